//! What the leaf check must know of a leaf that its caches do not hold, asked of the
//! leaf's API server in the background: whether the leaf's admin granted a namespace to
//! mcsched (a SelfSubjectAccessReview: may the leaf account create pods there), and
//! whether an object a pod needs there already exists without mcsched's mark (a name
//! clash: the pod is not sent to that leaf, rather than mount or overwrite the leaf
//! owner's object). Unknown until answered; each answer, and each change of one, is a
//! `LeafChange` that retries the pods waiting on it.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use mcsched_shared::keys;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::OnEvent;
use crate::framework::ClusterEvent;

const RECHECK: Duration = Duration::from_secs(30);
const FORGET_AFTER: Duration = Duration::from_secs(600);

/// A kind pod sync copies into a leaf by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Synced {
    ConfigMap,
    Secret,
    Claim,
}

impl Synced {
    pub fn kind(self) -> &'static str {
        match self {
            Synced::ConfigMap => "ConfigMap",
            Synced::Secret => "Secret",
            Synced::Claim => "PersistentVolumeClaim",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Question {
    /// May the leaf account create pods in this namespace?
    Granted(String),
    /// Is there an object of this kind, namespace and name that is not this host's?
    Foreign(Synced, String, String),
    /// Is there a ServiceAccount of this namespace and name (anyone's: a copy may run as
    /// the leaf's own account, as any pod of that namespace there may)?
    ServiceAccount(String, String),
    /// May the leaf account create ServiceAccounts in this namespace
    /// (`join --service-accounts`)?
    MayCreateServiceAccounts(String),
}

struct Entry {
    answer: Option<bool>,
    checked: Option<Instant>,
    wanted: Instant,
}

/// Whether `meta` carries this host's mark for `cluster`: the only objects pod sync may
/// use, change or delete.
pub fn is_ours(meta: &ObjectMeta, cluster: &str, host_id: &str) -> bool {
    let labels = meta.labels.as_ref();
    labels
        .and_then(|l| l.get(keys::MANAGED_CLUSTER_LABEL))
        .is_some_and(|c| c == cluster)
        && labels
            .and_then(|l| l.get(keys::HOST_ID_LABEL))
            .is_some_and(|h| h == host_id)
}

pub struct LeafChecks {
    cluster: String,
    host_id: String,
    /// Every namespace granted and no clash, without asking: in-process tests.
    settled: bool,
    entries: Mutex<HashMap<Question, Entry>>,
    ask: mpsc::UnboundedSender<Question>,
    asked: Mutex<Option<mpsc::UnboundedReceiver<Question>>>,
}

impl LeafChecks {
    pub fn new(cluster: &str, host_id: &str) -> Arc<Self> {
        let (ask, asked) = mpsc::unbounded_channel();
        Arc::new(LeafChecks {
            cluster: cluster.to_string(),
            host_id: host_id.to_string(),
            settled: false,
            entries: Mutex::default(),
            ask,
            asked: Mutex::new(Some(asked)),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Question, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Checks that answer every namespace granted and no clash, without a leaf behind.
    pub fn settled(cluster: &str) -> Arc<Self> {
        let (ask, _) = mpsc::unbounded_channel();
        Arc::new(LeafChecks {
            cluster: cluster.to_string(),
            host_id: String::new(),
            settled: true,
            entries: Mutex::default(),
            ask,
            asked: Mutex::new(None),
        })
    }

    /// The answer if known; otherwise None, and the question is asked.
    pub fn answer(&self, q: &Question) -> Option<bool> {
        if self.settled {
            return Some(matches!(
                q,
                Question::Granted(_)
                    | Question::ServiceAccount(..)
                    | Question::MayCreateServiceAccounts(_)
            ));
        }
        let now = Instant::now();
        let mut entries = self.lock();
        if let Some(e) = entries.get_mut(q) {
            e.wanted = now;
            return e.answer;
        }
        entries.insert(
            q.clone(),
            Entry {
                answer: None,
                checked: None,
                wanted: now,
            },
        );
        let _ = self.ask.send(q.clone());
        None
    }

    /// Records what pod sync itself found (a clash met while copying), so that the next
    /// check knows at once.
    pub fn learned(&self, q: Question, answer: bool) {
        self.record(q, answer);
    }

    fn record(&self, q: Question, answer: bool) -> bool {
        let mut entries = self.lock();
        let e = entries.entry(q).or_insert(Entry {
            answer: None,
            checked: None,
            wanted: Instant::now(),
        });
        let changed = e.answer != Some(answer);
        e.answer = Some(answer);
        e.checked = Some(Instant::now());
        changed
    }

    /// Answers questions as they come and again every 30 s while wanted.
    pub async fn run(self: Arc<Self>, leaf: kube::Client, on_event: OnEvent) {
        let Some(mut asked) = self.asked.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        let mut tick = tokio::time::interval(RECHECK);
        loop {
            let due: BTreeSet<Question> = tokio::select! {
                next = asked.recv() => match next {
                    Some(q) => BTreeSet::from([q]),
                    None => return,
                },
                _ = tick.tick() => {
                    let now = Instant::now();
                    let mut entries = self.lock();
                    entries.retain(|_, e| now.duration_since(e.wanted) < FORGET_AFTER);
                    entries
                        .iter()
                        .filter(|(_, e)| e.checked.is_none_or(|c| now.duration_since(c) >= RECHECK))
                        .map(|(q, _)| q.clone())
                        .collect()
                }
            };
            let mut changed = false;
            for q in due {
                match self.ask_leaf(&leaf, &q).await {
                    Ok(answer) => {
                        debug!(cluster = %self.cluster, question = ?q, answer, "leaf checked");
                        changed |= self.record(q, answer);
                    }
                    Err(e) => {
                        warn!(cluster = %self.cluster, question = ?q, error = %e, "cannot ask the leaf; retrying")
                    }
                }
            }
            if changed {
                on_event(ClusterEvent::LeafChange);
            }
        }
    }

    async fn ask_leaf(&self, leaf: &kube::Client, q: &Question) -> Result<bool, kube::Error> {
        match q {
            Question::Granted(ns) => may_create(leaf, ns, "pods").await,
            Question::MayCreateServiceAccounts(ns) => may_create(leaf, ns, "serviceaccounts").await,
            // A leaf joined before the writer role could read accounts forbids it: taken
            // as absent, so that only `--service-accounts` lets such a pod go there.
            Question::ServiceAccount(ns, name) => {
                match Api::<ServiceAccount>::namespaced(leaf.clone(), ns)
                    .get_metadata_opt(name)
                    .await
                {
                    Ok(found) => Ok(found.is_some()),
                    Err(kube::Error::Api(s)) if s.code == 403 => Ok(false),
                    Err(e) => Err(e),
                }
            }
            Question::Foreign(kind, ns, name) => {
                let meta = match kind {
                    Synced::ConfigMap => Api::<ConfigMap>::namespaced(leaf.clone(), ns)
                        .get_metadata_opt(name)
                        .await?
                        .map(|m| m.metadata),
                    Synced::Secret => Api::<Secret>::namespaced(leaf.clone(), ns)
                        .get_metadata_opt(name)
                        .await?
                        .map(|m| m.metadata),
                    Synced::Claim => Api::<PersistentVolumeClaim>::namespaced(leaf.clone(), ns)
                        .get_metadata_opt(name)
                        .await?
                        .map(|m| m.metadata),
                };
                Ok(meta.is_some_and(|m| !is_ours(&m, &self.cluster, &self.host_id)))
            }
        }
    }
}

/// Whether the leaf account may create `resource` in `namespace` (a
/// SelfSubjectAccessReview in the leaf).
async fn may_create(
    leaf: &kube::Client,
    namespace: &str,
    resource: &str,
) -> Result<bool, kube::Error> {
    let api: Api<SelfSubjectAccessReview> = Api::all(leaf.clone());
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(namespace.to_string()),
                verb: Some("create".into()),
                resource: Some(resource.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = api.create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_foreign_object_is_a_clash_and_ours_is_not() {
        let (client, _calls) = crate::fake_api::client(|_, path| {
            let labels = if path.ends_with("/theirs") {
                json!({})
            } else {
                json!({"mcsched.io/managed-by-cluster": "east", "mcsched.io/host-id": "h1"})
            };
            (
                200,
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "x", "namespace": "shop", "labels": labels}}),
            )
        });
        let checks = LeafChecks::new("east", "h1");
        let theirs = Question::Foreign(Synced::ConfigMap, "shop".into(), "theirs".into());
        let ours = Question::Foreign(Synced::ConfigMap, "shop".into(), "ours".into());
        assert_eq!(checks.answer(&theirs), None, "unknown until asked");
        assert_eq!(checks.answer(&ours), None);
        let (tx, mut events) = mpsc::unbounded_channel();
        let on_event: OnEvent = Arc::new(move |e| {
            let _ = tx.send(e);
        });
        tokio::spawn(checks.clone().run(client, on_event));
        for _ in 0..2 {
            tokio::time::timeout(Duration::from_secs(5), events.recv())
                .await
                .expect("answered");
        }
        assert_eq!(checks.answer(&theirs), Some(true));
        assert_eq!(checks.answer(&ours), Some(false));
    }

    #[test]
    fn only_this_hosts_mark_for_this_cluster_is_ours() {
        let meta = |labels: serde_json::Value| -> ObjectMeta {
            serde_json::from_value(json!({"labels": labels})).unwrap()
        };
        assert!(is_ours(
            &meta(json!({"mcsched.io/managed-by-cluster": "east", "mcsched.io/host-id": "h1"})),
            "east",
            "h1"
        ));
        assert!(!is_ours(
            &meta(json!({"mcsched.io/managed-by-cluster": "east", "mcsched.io/host-id": "h2"})),
            "east",
            "h1"
        ));
        assert!(!is_ours(
            &meta(json!({"mcsched.io/managed-by-cluster": "east"})),
            "east",
            "h1"
        ));
        assert!(!is_ours(&meta(json!({})), "east", "h1"));
    }
}
