//! What a what-if pod may ask, as admission would have it of a pod created: no
//! `spec.priority` of the caller's choosing (the Priority admission plugin refuses a set
//! priority that its class does not give), no `spec.nodeName` (a what-if asks where the
//! scheduler would place a pod, not what a given node holds), and a bounded number of
//! names of other objects (each one a lookup, here and in every leaf).

use k8s_openapi::api::core::v1::PodSpec;

/// Names of ConfigMaps, Secrets, PersistentVolumeClaims and ResourceClaims a what-if pod
/// may refer to; a real pod rarely needs a tenth of it.
pub const MAX_REFERENCED_NAMES: usize = 64;

const SPEC: &str = "spec.template.spec";

/// A what-if refused, naming the field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WhatIfRefused {
    #[error(
        "{SPEC}.priority: Forbidden: may not be set; the priority comes from spec.template.spec.priorityClassName, as the Priority admission plugin gives it"
    )]
    Priority,
    #[error(
        "{SPEC}.nodeName: Forbidden: may not be set; a what-if asks where the scheduler would place the pod"
    )]
    NodeName,
    #[error(
        "{SPEC}: Too many: refers to {0} ConfigMaps, Secrets, PersistentVolumeClaims and ResourceClaims by name; at most {MAX_REFERENCED_NAMES}"
    )]
    TooManyNames(usize),
}

/// Refuses what a what-if pod may not ask.
pub fn check(spec: &PodSpec) -> Result<(), WhatIfRefused> {
    if spec.priority.is_some() {
        return Err(WhatIfRefused::Priority);
    }
    if spec.node_name.as_deref().is_some_and(|n| !n.is_empty()) {
        return Err(WhatIfRefused::NodeName);
    }
    let n = referenced_names(spec);
    if n > MAX_REFERENCED_NAMES {
        return Err(WhatIfRefused::TooManyNames(n));
    }
    Ok(())
}

/// Every name of another object the pod refers to (repeats counted: each one is asked).
fn referenced_names(spec: &PodSpec) -> usize {
    let volumes = spec.volumes.iter().flatten().map(|v| {
        let projected = v.projected.iter().flat_map(|p| p.sources.iter().flatten());
        usize::from(v.config_map.is_some())
            + usize::from(v.secret.is_some())
            + usize::from(v.persistent_volume_claim.is_some())
            + projected
                .map(|s| usize::from(s.config_map.is_some()) + usize::from(s.secret.is_some()))
                .sum::<usize>()
    });
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .map(|c| {
            let env = c.env.iter().flatten().filter_map(|e| e.value_from.as_ref());
            let env = env
                .map(|f| {
                    usize::from(f.config_map_key_ref.is_some())
                        + usize::from(f.secret_key_ref.is_some())
                })
                .sum::<usize>();
            let env_from = c
                .env_from
                .iter()
                .flatten()
                .map(|f| {
                    usize::from(f.config_map_ref.is_some()) + usize::from(f.secret_ref.is_some())
                })
                .sum::<usize>();
            env + env_from
        });
    let ephemeral = spec.ephemeral_containers.iter().flatten().map(|c| {
        c.env_from.iter().flatten().count()
            + c.env
                .iter()
                .flatten()
                .filter(|e| e.value_from.is_some())
                .count()
    });
    volumes.sum::<usize>()
        + containers.sum::<usize>()
        + ephemeral.sum::<usize>()
        + spec.image_pull_secrets.iter().flatten().count()
        + spec.resource_claims.iter().flatten().count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(extra: serde_json::Value) -> PodSpec {
        let mut v = json!({"containers": [{"name": "c", "image": "i"}]});
        if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
            v.extend(extra.clone());
        }
        serde_json::from_value(v).expect("spec")
    }

    #[test]
    fn a_plain_pod_is_admitted() {
        assert_eq!(check(&spec(json!({"priorityClassName": "high"}))), Ok(()));
    }

    #[test]
    fn a_set_priority_and_a_node_name_are_refused_naming_the_field() {
        let e = check(&spec(json!({"priority": 2147483647}))).expect_err("priority");
        assert!(
            e.to_string().starts_with("spec.template.spec.priority:"),
            "{e}"
        );
        let e = check(&spec(json!({"nodeName": "n1"}))).expect_err("nodeName");
        assert!(
            e.to_string().starts_with("spec.template.spec.nodeName:"),
            "{e}"
        );
    }

    #[test]
    fn referenced_names_are_bounded() {
        let secrets = |n: usize| {
            let volumes: Vec<_> = (0..n)
                .map(
                    |i| json!({"name": format!("v{i}"), "secret": {"secretName": format!("s{i}")}}),
                )
                .collect();
            spec(json!({"volumes": volumes}))
        };
        assert_eq!(check(&secrets(MAX_REFERENCED_NAMES)), Ok(()));
        assert_eq!(
            check(&secrets(30_000)),
            Err(WhatIfRefused::TooManyNames(30_000))
        );
        let env: Vec<_> = (0..=MAX_REFERENCED_NAMES)
            .map(|i| json!({"name": format!("E{i}"), "valueFrom": {"configMapKeyRef": {"name": format!("c{i}"), "key": "k"}}}))
            .collect();
        let s = spec(json!({"containers": [{"name": "c", "image": "i", "env": env}]}));
        assert_eq!(
            check(&s),
            Err(WhatIfRefused::TooManyNames(MAX_REFERENCED_NAMES + 1))
        );
    }
}
