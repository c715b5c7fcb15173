//! `--what-if -f FILE`: the pod a manifest would create. A Pod is taken as it is; a
//! workload (Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob,
//! ReplicationController) gives its pod template, as its controller would.

use std::path::Path;

use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("reading {file}: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    #[error("{file}: not YAML or JSON: {source}")]
    Syntax {
        file: String,
        source: mcsched_shared::yaml::YamlError,
    },
    #[error("{file}: empty; give one Pod or workload manifest")]
    Empty { file: String },
    #[error("{file}: holds {count} objects; --what-if simulates one")]
    Several { file: String, count: usize },
    #[error("{file}: {field} is missing")]
    Missing { file: String, field: &'static str },
    #[error(
        "{file}: kind {kind:?} has no pod to simulate; give a Pod or a Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob or ReplicationController"
    )]
    Kind { file: String, kind: String },
    #[error("{file}: {field}: {source}")]
    Invalid {
        file: String,
        /// The field path from the top of the manifest.
        field: String,
        source: serde_json::Error,
    },
}

/// Reads FILE (`-` is stdin) and returns the pod it describes, its namespace and name
/// filled in: the manifest's own, else `namespace` and a name derived from the object.
pub fn read_pod(file: &Path, namespace: &str) -> Result<Pod, ManifestError> {
    let name = file.display().to_string();
    let text = if file == Path::new("-") {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(file)
    }
    .map_err(|source| ManifestError::Read {
        file: name.clone(),
        source,
    })?;
    pod_from_text(&name, &text, namespace)
}

pub fn pod_from_text(file: &str, text: &str, namespace: &str) -> Result<Pod, ManifestError> {
    let mut docs: Vec<Value> = mcsched_shared::yaml::from_multiple(text)
        .map_err(|source| ManifestError::Syntax {
            file: file.into(),
            source,
        })?
        .into_iter()
        .filter(|v| !v.is_null())
        .collect();
    let object = match docs.len() {
        0 => return Err(ManifestError::Empty { file: file.into() }),
        1 => docs.remove(0),
        count => {
            return Err(ManifestError::Several {
                file: file.into(),
                count,
            });
        }
    };
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .ok_or(ManifestError::Missing {
            file: file.into(),
            field: "kind",
        })?
        .to_string();
    let owner_name = object
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .map(String::from);
    let owner_namespace = object
        .get("metadata")
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .map(String::from);
    let (template_path, field): (&[&str], &'static str) = match kind.as_str() {
        "Pod" => (&[], "spec"),
        "Deployment"
        | "ReplicaSet"
        | "StatefulSet"
        | "DaemonSet"
        | "Job"
        | "ReplicationController" => (&["spec", "template"], "spec.template"),
        "CronJob" => (
            &["spec", "jobTemplate", "spec", "template"],
            "spec.jobTemplate.spec.template",
        ),
        _ => {
            return Err(ManifestError::Kind {
                file: file.into(),
                kind,
            });
        }
    };
    let invalid = |prefix: &str, e: serde_path_to_error::Error<serde_json::Error>| {
        let path = e.path().to_string();
        let field = match (prefix, path.as_str()) {
            ("", p) => p.to_string(),
            (pre, ".") => pre.to_string(),
            (pre, p) => format!("{pre}.{p}"),
        };
        ManifestError::Invalid {
            file: file.into(),
            field,
            source: e.into_inner(),
        }
    };
    let mut pod = if template_path.is_empty() {
        serde_path_to_error::deserialize::<_, Pod>(object).map_err(|e| invalid("", e))?
    } else {
        let mut v = &object;
        for key in template_path {
            v = v.get(key).ok_or(ManifestError::Missing {
                file: file.into(),
                field,
            })?;
        }
        let template: PodTemplateSpec =
            serde_path_to_error::deserialize(v.clone()).map_err(|e| invalid(field, e))?;
        Pod {
            metadata: template.metadata.unwrap_or_default(),
            spec: template.spec,
            status: None,
        }
    };
    if pod.spec.is_none() {
        return Err(ManifestError::Missing {
            file: file.into(),
            field: if template_path.is_empty() {
                "spec"
            } else {
                "the pod template's spec"
            },
        });
    }
    let meta = &mut pod.metadata;
    if meta.namespace.is_none() {
        meta.namespace = Some(owner_namespace.unwrap_or_else(|| namespace.to_string()));
    }
    if meta.name.is_none() {
        let stem = owner_name
            .or_else(|| {
                meta.generate_name
                    .clone()
                    .map(|g| g.trim_end_matches('-').into())
            })
            .unwrap_or_else(|| "pod".into());
        meta.name = Some(format!("{stem}-what-if"));
    }
    Ok(pod)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_is_taken_as_it_is() {
        let pod = pod_from_text(
            "p.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: shop}\nspec:\n  schedulerName: mcsched\n  containers: [{name: a, image: x}]\n",
            "default",
        )
        .expect("pod");
        assert_eq!(pod.metadata.name.as_deref(), Some("web"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(
            pod.spec.and_then(|s| s.scheduler_name).as_deref(),
            Some("mcsched")
        );
    }

    #[test]
    fn a_workload_gives_its_template_named_after_it() {
        let pod = pod_from_text(
            "d.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: a, image: x}]}\n",
            "team-a",
        )
        .expect("pod");
        assert_eq!(pod.metadata.name.as_deref(), Some("web-what-if"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("team-a"));
        assert_eq!(
            pod.metadata.labels.and_then(|l| l.get("app").cloned()),
            Some("web".into())
        );
        let cron = pod_from_text(
            "c.yaml",
            "kind: CronJob\nmetadata: {name: nightly}\nspec:\n  schedule: '@daily'\n  jobTemplate:\n    spec:\n      template:\n        spec: {containers: [{name: a, image: x}]}\n",
            "default",
        )
        .expect("cronjob pod");
        assert_eq!(cron.metadata.name.as_deref(), Some("nightly-what-if"));
    }

    #[test]
    fn bad_manifests_name_the_problem() {
        let err = |text: &str| {
            pod_from_text("m.yaml", text, "default")
                .expect_err(text)
                .to_string()
        };
        assert_eq!(err(""), "m.yaml: empty; give one Pod or workload manifest");
        assert!(err("kind: Pod\n---\nkind: Pod\n").contains("holds 2 objects"));
        assert_eq!(err("metadata: {name: x}\n"), "m.yaml: kind is missing");
        assert!(
            err("kind: Service\nmetadata: {name: x}\n").contains("kind \"Service\" has no pod")
        );
        assert_eq!(
            err("kind: Deployment\nmetadata: {name: x}\nspec: {}\n"),
            "m.yaml: spec.template is missing"
        );
        assert!(err("kind: Pod\nspec: [1, 2\n").starts_with("m.yaml: not YAML or JSON"));
        assert_eq!(
            err("kind: Pod\nspec:\n  containers: 3\n"),
            "m.yaml: spec.containers: invalid type: integer `3`, expected a sequence"
        );
        assert_eq!(
            err(
                "kind: Job\nspec:\n  template:\n    spec:\n      containers:\n      - {name: a, resources: {requests: {cpu: [1]}}}\n"
            ),
            "m.yaml: spec.template.spec.containers[0].resources.requests.cpu: invalid type: sequence, expected Quantity"
        );
        assert_eq!(
            err("kind: Pod\nmetadata: {name: x}\n"),
            "m.yaml: spec is missing"
        );
    }
}
