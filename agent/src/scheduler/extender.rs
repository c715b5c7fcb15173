//! The HTTP scheduler-extender protocol (kube-scheduler's `HTTPExtender`): filter,
//! prioritize, bind and preempt verbs, JSON with Go's PascalCase field names, read back
//! case-insensitively as Go's decoder does.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use mcsched_shared::config::SchedulerConfig;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};

use crate::control::fence::Fence;
use mcsched_engine::framework::{PreemptionExtender, PreemptionExtenderError, Victims};
use mcsched_engine::snapshot::{PodInfo, Snapshot};

/// Extender priorities run 0..=10 and are scaled to node scores (0..=100).
pub const MAX_EXTENDER_PRIORITY: i64 = 10;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExtenderTls {
    pub insecure: bool,
    pub server_name: Option<String>,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    pub ca_file: Option<PathBuf>,
    pub cert_data: Option<Vec<u8>>,
    pub key_data: Option<Vec<u8>>,
    pub ca_data: Option<Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ExtenderConfig {
    pub url_prefix: String,
    pub filter_verb: Option<String>,
    pub prioritize_verb: Option<String>,
    pub bind_verb: Option<String>,
    pub preempt_verb: Option<String>,
    pub weight: i64,
    pub enable_https: bool,
    pub tls: Option<ExtenderTls>,
    pub http_timeout: Duration,
    pub node_cache_capable: bool,
    /// Resource names; an empty list means every pod is of interest.
    pub managed_resources: Vec<String>,
    pub ignorable: bool,
}

impl Default for ExtenderConfig {
    fn default() -> Self {
        ExtenderConfig {
            url_prefix: String::new(),
            filter_verb: None,
            prioritize_verb: None,
            bind_verb: None,
            preempt_verb: None,
            weight: 1,
            enable_https: false,
            tls: None,
            // kube-scheduler's DefaultExtenderTimeout.
            http_timeout: Duration::from_secs(5),
            node_cache_capable: false,
            managed_resources: Vec::new(),
            ignorable: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ExtenderError {
    #[error("extender {url}: {source}")]
    Http {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("extender {url}: {message}")]
    Remote { url: String, message: String },
    #[error("extender {url}: invalid answer: {message}")]
    Invalid { url: String, message: String },
    #[error("extender TLS configuration: {0}")]
    Tls(String),
    #[error("extender {url}: bind not sent: this agent no longer holds the leader Lease")]
    Fenced { url: String },
    #[error("extender {url}: {source}")]
    Answer {
        url: String,
        #[source]
        source: AnswerError,
    },
    #[error("extender {url}: preemption runs outside the agent's runtime")]
    NoRuntime { url: String },
}

/// What is wrong with an extender's answer, before it is known whose answer it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// The ExtenderFilterResult's own `Error`, as the extender wrote it.
    #[error("{0}")]
    Reported(String),
    #[error("invalid answer: expected a HostPriorityList (a JSON array)")]
    NotAList,
}

/// What the filter verb left.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FilterResult {
    pub nodes: Vec<String>,
    pub failed: HashMap<String, String>,
    pub failed_unresolvable: HashMap<String, String>,
}

pub struct Extender {
    pub config: ExtenderConfig,
    client: reqwest::Client,
    /// The bind verb is a binding write: fenced as the scheduling client's are.
    fence: Fence,
}

/// Go's encoding/json matches object keys case-insensitively.
fn field<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    let obj = v.as_object()?;
    obj.get(name).or_else(|| {
        obj.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    })
}

fn string_map(v: Option<&Value>) -> HashMap<String, String> {
    v.and_then(|m| m.as_object())
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// An ExtenderFilterResult as kube reads it; its `Error`, if any, as the error.
pub fn decode_filter(
    answer: &Value,
    node_cache_capable: bool,
) -> Result<FilterResult, AnswerError> {
    if let Some(e) = field(answer, "Error")
        .and_then(|e| e.as_str())
        .filter(|e| !e.is_empty())
    {
        return Err(AnswerError::Reported(e.to_string()));
    }
    let names: Vec<String> = if node_cache_capable {
        field(answer, "NodeNames")
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|n| n.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    } else {
        field(answer, "Nodes")
            .and_then(|v| field(v, "items"))
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|n| field(n, "metadata").and_then(|m| field(m, "name")))
                    .filter_map(|n| n.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    Ok(FilterResult {
        nodes: names,
        failed: string_map(field(answer, "FailedNodes")),
        failed_unresolvable: string_map(field(answer, "FailedAndUnresolvableNodes")),
    })
}

/// A HostPriorityList: node name → score as the extender gave it.
pub fn decode_priorities(answer: &Value) -> Result<HashMap<String, i64>, AnswerError> {
    let list = answer.as_array().ok_or(AnswerError::NotAList)?;
    Ok(list
        .iter()
        .filter_map(|hp| {
            let host = field(hp, "Host")?.as_str()?.to_string();
            let score = field(hp, "Score")?.as_i64()?;
            Some((host, score))
        })
        .collect())
}

fn read_pem(
    data: &Option<Vec<u8>>,
    file: &Option<PathBuf>,
) -> Result<Option<Vec<u8>>, ExtenderError> {
    if let Some(d) = data {
        return Ok(Some(d.clone()));
    }
    match file {
        Some(f) => std::fs::read(f)
            .map(Some)
            .map_err(|e| ExtenderError::Tls(format!("{}: {e}", f.display()))),
        None => Ok(None),
    }
}

impl Extender {
    pub fn new(config: ExtenderConfig) -> Result<Self, ExtenderError> {
        let mut builder = reqwest::Client::builder().timeout(config.http_timeout);
        if let Some(tls) = &config.tls {
            if tls.insecure {
                builder = builder.danger_accept_invalid_certs(true);
            }
            if let Some(ca) = read_pem(&tls.ca_data, &tls.ca_file)? {
                let cert = reqwest::Certificate::from_pem(&ca)
                    .map_err(|e| ExtenderError::Tls(e.to_string()))?;
                builder = builder.add_root_certificate(cert);
            }
            if let (Some(cert), Some(key)) = (
                read_pem(&tls.cert_data, &tls.cert_file)?,
                read_pem(&tls.key_data, &tls.key_file)?,
            ) {
                let mut pem = cert;
                pem.extend_from_slice(&key);
                let id = reqwest::Identity::from_pem(&pem)
                    .map_err(|e| ExtenderError::Tls(e.to_string()))?;
                builder = builder.identity(id);
            }
        }
        let client = builder
            .build()
            .map_err(|e| ExtenderError::Tls(e.to_string()))?;
        Ok(Extender {
            config,
            client,
            fence: Fence::default(),
        })
    }

    /// Its bind verb goes out only while `fence` is open (the leader's fence).
    pub fn fenced(mut self, fence: Fence) -> Self {
        self.fence = fence;
        self
    }

    pub fn name(&self) -> &str {
        &self.config.url_prefix
    }

    /// kube's `IsInterested`: no managed resources, or the pod asks for one of them.
    pub fn is_interested(&self, pod: &PodInfo) -> bool {
        if self.config.managed_resources.is_empty() {
            return true;
        }
        let obj = pod.pod();
        let Some(spec) = obj.spec.as_ref() else {
            return false;
        };
        spec.containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .filter_map(|c| c.resources.as_ref())
            .any(|r| {
                [r.requests.as_ref(), r.limits.as_ref()]
                    .into_iter()
                    .flatten()
                    .any(|m| m.keys().any(|k| self.config.managed_resources.contains(k)))
            })
    }

    fn url(&self, verb: &str) -> String {
        let prefix = self.config.url_prefix.trim_end_matches('/');
        let prefix = if self.config.enable_https && prefix.starts_with("http://") {
            prefix.replacen("http://", "https://", 1)
        } else {
            prefix.to_string()
        };
        format!("{prefix}/{verb}")
    }

    async fn post(&self, verb: &str, body: &Value) -> Result<Value, ExtenderError> {
        let url = self.url(verb);
        let http = |source| ExtenderError::Http {
            url: url.clone(),
            source,
        };
        let resp = self
            .client
            .post(&url)
            .json(body)
            .send()
            .await
            .map_err(http)?;
        let status = resp.status();
        if !status.is_success() {
            return Err(ExtenderError::Remote {
                url,
                message: format!("HTTP {status}"),
            });
        }
        resp.json::<Value>().await.map_err(http)
    }

    /// The pod and the candidate nodes: whole Node objects, or only names when the
    /// extender caches nodes itself (nodeCacheCapable).
    fn args(&self, pod: &Pod, nodes: &[&Node]) -> Value {
        if self.config.node_cache_capable {
            let names: Vec<&str> = nodes
                .iter()
                .filter_map(|n| n.metadata.name.as_deref())
                .collect();
            json!({ "Pod": pod, "Nodes": null, "NodeNames": names })
        } else {
            json!({ "Pod": pod, "Nodes": { "items": nodes }, "NodeNames": null })
        }
    }

    pub async fn filter(&self, pod: &Pod, nodes: &[&Node]) -> Result<FilterResult, ExtenderError> {
        let Some(verb) = &self.config.filter_verb else {
            return Ok(FilterResult {
                nodes: nodes
                    .iter()
                    .filter_map(|n| n.metadata.name.clone())
                    .collect(),
                ..Default::default()
            });
        };
        let answer = self.post(verb, &self.args(pod, nodes)).await?;
        decode_filter(&answer, self.config.node_cache_capable).map_err(|source| {
            ExtenderError::Answer {
                url: self.url(verb),
                source,
            }
        })
    }

    /// Node name → score 0..=10 as the extender gave it.
    pub async fn prioritize(
        &self,
        pod: &Pod,
        nodes: &[&Node],
    ) -> Result<HashMap<String, i64>, ExtenderError> {
        let Some(verb) = &self.config.prioritize_verb else {
            return Ok(HashMap::new());
        };
        let url = self.url(verb);
        let answer = self.post(verb, &self.args(pod, nodes)).await?;
        decode_priorities(&answer).map_err(|source| ExtenderError::Answer { url, source })
    }

    pub fn is_binder(&self) -> bool {
        self.config.bind_verb.is_some()
    }

    pub async fn bind(&self, pod: &PodInfo, node: &str) -> Result<(), ExtenderError> {
        let Some(verb) = &self.config.bind_verb else {
            return Ok(());
        };
        let body = json!({
            "PodName": pod.name,
            "PodNamespace": pod.namespace,
            "PodUID": pod.uid,
            "Node": node,
        });
        let answer = self
            .fence
            .guard(self.post(verb, &body))
            .await
            .map_err(|_| ExtenderError::Fenced {
                url: self.url(verb),
            })??;
        match field(&answer, "Error")
            .and_then(|e| e.as_str())
            .filter(|e| !e.is_empty())
        {
            Some(e) => Err(ExtenderError::Remote {
                url: self.url(verb),
                message: e.to_string(),
            }),
            None => Ok(()),
        }
    }

    /// kube's HTTPExtender.ProcessPreemption: the candidates' victims as whole pods, or
    /// by UID for a node-cache-capable extender; the answer's NodeNameToMetaVictims looked
    /// up on the snapshot's nodes (a victim the node does not hold is an error).
    pub async fn preempt(
        &self,
        pod: &Pod,
        victims: &BTreeMap<String, Victims>,
        snapshot: &Snapshot,
    ) -> Result<BTreeMap<String, Victims>, ExtenderError> {
        let Some(verb) = &self.config.preempt_verb else {
            return Err(ExtenderError::Invalid {
                url: self.config.url_prefix.clone(),
                message: "no preemptVerb".into(),
            });
        };
        let args: serde_json::Map<String, Value> = victims
            .iter()
            .map(|(node, v)| {
                let pods: Vec<Value> = if self.config.node_cache_capable {
                    v.pods.iter().map(|p| json!({ "UID": p.uid })).collect()
                } else {
                    v.pods
                        .iter()
                        .map(|p| serde_json::to_value(&*p.pod()).unwrap_or_default())
                        .collect()
                };
                (
                    node.clone(),
                    json!({ "Pods": pods, "NumPDBViolations": v.pdb_violations }),
                )
            })
            .collect();
        let key = if self.config.node_cache_capable {
            "NodeNameToMetaVictims"
        } else {
            "NodeNameToVictims"
        };
        let answer = self.post(verb, &json!({ "Pod": pod, key: args })).await?;
        let invalid = |message: String| ExtenderError::Invalid {
            url: self.url(verb),
            message,
        };
        let mut out = BTreeMap::new();
        let Some(meta) = field(&answer, "NodeNameToMetaVictims").and_then(|m| m.as_object()) else {
            return Ok(out);
        };
        for (node, v) in meta {
            let info = snapshot
                .get(node)
                .ok_or_else(|| invalid(format!("node {node} not found")))?;
            let mut pods = Vec::new();
            for p in field(v, "Pods")
                .and_then(|p| p.as_array())
                .into_iter()
                .flatten()
            {
                let uid = field(p, "UID").and_then(|u| u.as_str()).unwrap_or_default();
                let found = info.pods.iter().find(|q| !uid.is_empty() && q.uid == uid);
                pods.push(found.cloned().ok_or_else(|| {
                    invalid(format!(
                        "claims to preempt pod (UID: {uid}) on node {node}, but the pod is not found on that node"
                    ))
                })?);
            }
            let pdb_violations = field(v, "NumPDBViolations")
                .and_then(|n| n.as_u64())
                .unwrap_or(0) as usize;
            out.insert(
                node.clone(),
                Victims {
                    pods,
                    pdb_violations,
                },
            );
        }
        Ok(out)
    }
}

impl PreemptionExtender for Extender {
    fn name(&self) -> String {
        self.config.url_prefix.clone()
    }

    fn supports_preemption(&self) -> bool {
        self.config.preempt_verb.is_some()
    }

    fn is_interested(&self, pod: &PodInfo) -> bool {
        Extender::is_interested(self, pod)
    }

    fn is_ignorable(&self) -> bool {
        self.config.ignorable
    }

    fn process_preemption(
        &self,
        pod: &PodInfo,
        victims: &BTreeMap<String, Victims>,
        snapshot: &Snapshot,
    ) -> Result<BTreeMap<String, Victims>, PreemptionExtenderError> {
        use tokio::runtime::{Handle, RuntimeFlavor};
        let handle = Handle::try_current()
            .ok()
            .filter(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread)
            .ok_or_else(|| ExtenderError::NoRuntime {
                url: self.config.url_prefix.clone(),
            })?;
        Ok(tokio::task::block_in_place(|| {
            handle.block_on(self.preempt(&pod.pod(), victims, snapshot))
        })?)
    }
}

/// The configured extenders; their bind verbs go out only while `fence` is open.
pub fn extenders(
    cfg: &SchedulerConfig,
    fence: &Fence,
) -> Result<Vec<Arc<Extender>>, ExtenderError> {
    cfg.extenders
        .iter()
        .map(|e| {
            let tls = e.tls_config.as_ref().map(|t| ExtenderTls {
                insecure: t.insecure,
                server_name: t.server_name.clone(),
                cert_file: t.cert_file.as_ref().map(PathBuf::from),
                key_file: t.key_file.as_ref().map(PathBuf::from),
                ca_file: t.ca_file.as_ref().map(PathBuf::from),
                cert_data: t.cert_data.clone(),
                key_data: t.key_data.clone(),
                ca_data: t.ca_data.clone(),
            });
            Ok(Arc::new(
                Extender::new(ExtenderConfig {
                    url_prefix: e.url_prefix.clone(),
                    filter_verb: e.filter_verb.clone(),
                    prioritize_verb: e.prioritize_verb.clone(),
                    bind_verb: e.bind_verb.clone(),
                    preempt_verb: e.preempt_verb.clone(),
                    weight: e.weight,
                    enable_https: e.enable_https,
                    tls,
                    http_timeout: e.http_timeout,
                    node_cache_capable: e.node_cache_capable,
                    managed_resources: e.managed_resources.iter().map(|(n, _)| n.clone()).collect(),
                    ignorable: e.ignorable,
                })?
                .fenced(fence.clone()),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn keys_match_case_insensitively() {
        let v = json!({"nodenames": ["a"], "FailedNodes": {"b": "no"}});
        assert_eq!(field(&v, "NodeNames"), Some(&json!(["a"])));
        assert_eq!(
            string_map(field(&v, "failedNodes"))
                .get("b")
                .map(String::as_str),
            Some("no")
        );
    }

    #[test]
    fn https_is_enforced_on_the_prefix() {
        let e = Extender::new(ExtenderConfig {
            url_prefix: "http://ext.kube-system.svc:8080/".into(),
            enable_https: true,
            ..Default::default()
        });
        let e = match e {
            Ok(e) => e,
            Err(err) => panic!("{err}"),
        };
        assert_eq!(e.url("filter"), "https://ext.kube-system.svc:8080/filter");
    }

    /// A binder extender on a local port, counting the bind verbs it is sent.
    async fn binder() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let sent = Arc::new(AtomicUsize::new(0));
        let counted = sent.clone();
        let app = axum::Router::new().route(
            "/bind",
            axum::routing::post(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                async { axum::Json(json!({})) }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("listen");
        let addr = listener.local_addr().expect("address");
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{addr}"), sent)
    }

    fn pod_info() -> PodInfo {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}
        }))
        .expect("pod");
        PodInfo::new(Arc::new(pod))
    }

    #[tokio::test]
    async fn the_bind_verb_is_fenced_as_the_other_binding_writes() {
        use std::sync::atomic::Ordering;
        let (url_prefix, sent) = binder().await;
        let fence = crate::control::fence::Fence::default();
        let (leader_tx, leader) = tokio::sync::watch::channel(true);
        let lease = crate::control::leader::LeaseHealth::default();
        lease.renewed_for_test(Duration::from_secs(3600));
        fence.arm(leader, lease);
        let ext = Extender::new(ExtenderConfig {
            url_prefix,
            bind_verb: Some("bind".into()),
            ..Default::default()
        })
        .expect("extender")
        .fenced(fence);
        ext.bind(&pod_info(), "n1")
            .await
            .expect("sent while leading");
        assert_eq!(sent.load(Ordering::SeqCst), 1);
        let _ = leader_tx.send(false);
        let refused = ext.bind(&pod_info(), "n1").await;
        assert!(
            matches!(refused, Err(ExtenderError::Fenced { .. })),
            "{refused:?}"
        );
        assert_eq!(
            sent.load(Ordering::SeqCst),
            1,
            "nothing sent once not leading"
        );
    }
    /// The example configurations' extenders build.
    #[test]
    fn example_configs_build_extenders() {
        for file in [
            "multiple-schedulers-v1beta2.yaml",
            "extending-my-scheduler-v1.yaml",
            "extending-extender-v1.yaml",
            "cluster-policies-v1.yaml",
        ] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../shared/testdata/config")
                .join(file);
            let cfg = match mcsched_shared::config::load_file(&path) {
                Ok(c) => c,
                Err(e) => panic!("{file}: {e}"),
            };
            assert!(extenders(&cfg, &Default::default()).is_ok());
        }
    }
}
