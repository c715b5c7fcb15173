//! Reading the test control plane's audit log (`controlplane --audit-log`): who created
//! which binding, with what answer, and when — the record of what really reached the API
//! server, which events and logs are not.

use std::collections::HashMap;
use std::path::Path;

use anyhow::Context;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    stage: String,
    verb: String,
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

/// Every completed pod create, pod delete and binding in the log, in order.
pub fn pod_requests(path: &Path) -> anyhow::Result<Vec<Request>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the audit log {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let e: Event = serde_json::from_str(line)
            .with_context(|| format!("audit log line {}: {line}", i + 1))?;
        let Some(o) = e.object_ref.filter(|o| o.resource == "pods") else {
            continue;
        };
        if e.stage != "ResponseComplete" {
            continue;
        }
        let what = match (e.verb.as_str(), o.subresource.as_str()) {
            ("create", "binding") => "binding",
            ("create", "") => "create",
            ("delete", "") => "delete",
            _ => continue,
        };
        let (code, message) = e
            .response_status
            .map(|s| (s.code, s.message))
            .unwrap_or_default();
        let user = e
            .impersonated_user
            .or(e.user)
            .map(|u| u.username)
            .unwrap_or_default();
        out.push(Request {
            pod: format!("{}/{}", o.namespace, o.name),
            what,
            code,
            message,
            user,
            at: e
                .stage_timestamp
                .parse()
                .with_context(|| format!("audit log line {}: stageTimestamp", i + 1))?,
        });
    }
    Ok(out)
}

impl Request {
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.code)
    }

    /// Its client went away before the answer (killed): the API server logs a 504
    /// "context canceled", though what it was asked may have been done.
    pub fn client_gone(&self) -> bool {
        self.code == 504 && self.message.contains("context canceled")
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
