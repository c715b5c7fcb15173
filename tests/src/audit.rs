//! Reading the test control plane's audit log (`controlplane --audit-log`): who created
//! which binding, with what answer, and when — the record of what really reached the API
//! server, which events and logs are not.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    stage: String,
    verb: String,
    #[serde(default, rename = "requestURI")]
    request_uri: String,
    #[serde(default)]
    user_agent: String,
    request_received_timestamp: String,
    #[serde(default)]
    object_ref: Option<ObjectRef>,
    #[serde(default)]
    response_status: Option<ResponseStatus>,
    #[serde(default)]
    impersonated_user: Option<User>,
    #[serde(default)]
    user: Option<User>,
    stage_timestamp: String,
}

#[derive(Debug, Deserialize)]
struct ObjectRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
}

#[derive(Debug, Deserialize)]
struct ResponseStatus {
    #[serde(default)]
    code: i64,
    #[serde(default)]
    message: String,
}

#[derive(Debug, Deserialize)]
struct User {
    #[serde(default)]
    username: String,
    #[serde(default)]
    extra: HashMap<String, Vec<String>>,
}

/// One completed request on a pod.
#[derive(Debug, Clone)]
pub struct Request {
    /// `namespace/name`.
    pub pod: String,
    /// `binding`, `create` or `delete`.
    pub what: &'static str,
    pub code: i64,
    /// The answer's message, for a failure.
    pub message: String,
    /// The impersonated user, else the authenticated one.
    pub user: String,
    pub at: k8s_openapi::jiff::Timestamp,
}

/// One completed write (the policy records no reads).
#[derive(Debug, Clone)]
pub struct Write {
    /// create, update, patch, delete, deletecollection.
    pub verb: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub code: i64,
    pub message: String,
    /// The impersonated user, else the authenticated one.
    pub user: String,
    pub user_agent: String,
    /// The credential it was authenticated with, for a ServiceAccount token the API
    /// server issued: `JTI=<the token's jti>`.
    pub credential_id: String,
    /// The pod a ServiceAccount token was bound to (the kubelet's projected token): which
    /// replica of an installed agent sent it, when all share one ServiceAccount.
    pub pod_name: String,
    /// When the API server received it, and when it answered.
    pub received: k8s_openapi::jiff::Timestamp,
    pub completed: k8s_openapi::jiff::Timestamp,
}

impl Write {
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.code)
    }

    /// `resource` or `resource/subresource`.
    pub fn what(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

impl std::fmt::Display for Write {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {}/{} by {} ({}) at {} → {}",
            self.verb,
            self.what(),
            self.namespace,
            self.name,
            self.user,
            self.user_agent,
            self.received,
            self.code
        )
    }
}

/// Every completed write in the log, in order.
pub fn writes(path: &Path) -> anyhow::Result<Vec<Write>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the audit log {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let e: Event = serde_json::from_str(line)
            .with_context(|| format!("audit log line {}: {line}", i + 1))?;
        // A dry run (pod sync's before each new shape of copy) writes nothing.
        if e.stage != "ResponseComplete" || e.request_uri.contains("dryRun=") {
            continue;
        }
        let o = e.object_ref.unwrap_or(ObjectRef {
            resource: String::new(),
            subresource: String::new(),
            namespace: String::new(),
            name: String::new(),
        });
        let (code, message) = e
            .response_status
            .map(|s| (s.code, s.message))
            .unwrap_or_default();
        let extra = |key: &str| {
            e.user
                .as_ref()
                .and_then(|u| u.extra.get(key))
                .and_then(|v| v.first().cloned())
                .unwrap_or_default()
        };
        let credential_id = extra("authentication.kubernetes.io/credential-id");
        let pod_name = extra("authentication.kubernetes.io/pod-name");
        let user = e
            .impersonated_user
            .or(e.user)
            .map(|u| u.username)
            .unwrap_or_default();
        let time = |t: &str, field: &str| -> anyhow::Result<k8s_openapi::jiff::Timestamp> {
            t.parse()
                .with_context(|| format!("audit log line {}: {field}", i + 1))
        };
        out.push(Write {
            verb: e.verb,
            resource: o.resource,
            subresource: o.subresource,
            namespace: o.namespace,
            name: o.name,
            code,
            message,
            user,
            user_agent: e.user_agent,
            credential_id,
            pod_name,
            received: time(&e.request_received_timestamp, "requestReceivedTimestamp")?,
            completed: time(&e.stage_timestamp, "stageTimestamp")?,
        });
    }
    Ok(out)
}

/// Every completed pod create, pod delete and binding in the log, in order.
pub fn pod_requests(path: &Path) -> anyhow::Result<Vec<Request>> {
    let mut out = Vec::new();
    for w in writes(path)? {
        if w.resource != "pods" {
            continue;
        }
        let what = match (w.verb.as_str(), w.subresource.as_str()) {
            ("create", "binding") => "binding",
            ("create", "") => "create",
            ("delete", "") => "delete",
            _ => continue,
        };
        out.push(Request {
            pod: format!("{}/{}", w.namespace, w.name),
            what,
            code: w.code,
            message: w.message,
            user: w.user,
            at: w.completed,
        });
    }
    Ok(out)
}

/// Who held a Lease when: each successful write of it (its holder renewing or taking it)
/// as (user, when it was answered), in order.
pub fn lease_writes(
    writes: &[Write],
    namespace: &str,
    name: &str,
) -> Vec<(String, k8s_openapi::jiff::Timestamp)> {
    writes
        .iter()
        .filter(|w| {
            w.resource == "leases"
                && w.namespace == namespace
                && w.name == name
                && matches!(w.verb.as_str(), "create" | "update" | "patch")
                && w.succeeded()
        })
        .map(|w| (w.user.clone(), w.completed))
        .collect()
}

/// Whether `user` held the Lease when the API server received a request at `at`: the
/// Lease's last successful write answered before then was `user`'s, less than
/// `lease_duration` before.
pub fn held_at(
    leases: &[(String, k8s_openapi::jiff::Timestamp)],
    user: &str,
    at: k8s_openapi::jiff::Timestamp,
    lease_duration: std::time::Duration,
) -> bool {
    let Some((holder, since)) = leases.iter().rev().find(|(_, t)| *t <= at) else {
        return false;
    };
    let Ok(age) = at.duration_since(*since).try_into() else {
        return false;
    };
    let age: std::time::Duration = age;
    holder == user && age < lease_duration
}

impl Request {
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.code)
    }

    /// Its client went away before the answer (killed): the API server logs a 504
    /// "context canceled", though what it was asked may have been done; or, when the
    /// cancel reached a binding inside its storage update, a 409 wrapping that error
    /// (kube's BindingREST.assignPod makes any error that is not a Status a Conflict).
    pub fn client_gone(&self) -> bool {
        match self.code {
            504 => self.message.contains("context canceled"),
            409 => self.what == "binding" && self.message.ends_with(": context canceled"),
            _ => false,
        }
    }
}

/// Per pod: its successful bindings, and those whose client went away before the answer.
pub fn bindings(requests: &[Request]) -> HashMap<String, (usize, usize)> {
    let mut out: HashMap<String, (usize, usize)> = HashMap::new();
    for r in requests.iter().filter(|r| r.what == "binding") {
        let e = out.entry(r.pod.clone()).or_default();
        if r.succeeded() {
            e.0 += 1;
        } else if r.client_gone() {
            e.1 += 1;
        }
    }
    out
}

/// A copy of an audit log under `<target>/<test>/`, for a failure to be looked into;
/// named after the time and the control plane (`<its dir>/data/audit.log`).
pub fn keep(audit_log: &Path, test: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::repo_root().join("target"))
        .join(test);
    std::fs::create_dir_all(&dir)?;
    let plane = audit_log
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let to = dir.join(format!(
        "audit-{}-{plane}.log",
        k8s_openapi::jiff::Timestamp::now().as_second()
    ));
    std::fs::copy(audit_log, &to)?;
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::Request;

    fn binding(code: i64, message: &str) -> Request {
        Request {
            pod: "default/p00214".into(),
            what: "binding",
            code,
            message: message.into(),
            user: "replica-2".into(),
            at: k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        }
    }

    #[test]
    fn a_cancelled_binding_is_a_client_gone_not_a_refusal() {
        // What a faults run's audit log held for a leader killed mid-binding.
        assert!(
            binding(
                409,
                "Operation cannot be fulfilled on pods/binding \"p00214\": context canceled"
            )
            .client_gone()
        );
        assert!(binding(504, "context canceled").client_gone());
        // A second binding of a bound pod is refused, not gone.
        assert!(
            !binding(
                409,
                "Operation cannot be fulfilled on pods/binding \"p00214\": pod p00214 is already assigned to node \"n3\""
            )
            .client_gone()
        );
        assert!(
            !binding(
                409,
                "Operation cannot be fulfilled on pods \"p00214\": the object has been modified"
            )
            .client_gone()
        );
    }
}
