//! A gang lives whole or not at all past scheduling too: no member's leaf copy is made
//! until `minCount` members are bound (host and leaves together), and a member a leaf
//! gives back (Pending too long, refused) takes the rest of its gang back with it, so
//! that the gang is placed whole again. The rest go as any voluntary disruption does:
//! through the Eviction API, so PodDisruptionBudgets hold, and only in namespaces whose
//! admin lets the agent evict (the placement keeper grant, as for failover and
//! rebalancing); what is refused is said and tried again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use mcsched_engine::pod_groups::{PodGroups, group_key_of};
use tracing::{info, warn};

use crate::observe::events::{EventSink, EventType, Message, object_ref};

/// The event reason on the members taken back.
const REASON: &str = "GangTakenBack";
/// The event reason on a member whose eviction was refused (a PodDisruptionBudget, no
/// grant): it stays until a later try succeeds.
const REFUSED_REASON: &str = "GangTakeBackRefused";
/// How often a member whose eviction was refused is tried again.
pub(crate) const RETRY: Duration = Duration::from_secs(10);

/// Why the copy of `pod` must wait, or None when it may be made.
pub(crate) fn held(groups: &PodGroups, pod: &Pod) -> Option<String> {
    let key = group_key_of(pod)?;
    let min = groups.policy(&key)?.gang_min_count?;
    let bound = groups.state(&key).assigned_count();
    (bound < min).then(|| {
        format!(
            "waiting for the gang {key} to be bound whole: {bound} of minCount {min} pods bound"
        )
    })
}

/// What evicting the members needs: the host's client, where events go, the agent's
/// namespace (for the grant it names) and whether this agent may still write.
#[derive(Clone)]
pub(crate) struct Evictor {
    pub client: kube::Client,
    pub events: EventSink,
    pub agent_namespace: String,
    pub may_act: Arc<dyn Fn() -> bool + Send + Sync>,
}

/// Why an eviction did not happen this time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// 429: a PodDisruptionBudget allows no disruption now.
    Budget,
    /// 403: the namespace has not granted the agent evictions.
    NotGranted,
    /// Anything else (the API server unreachable, a pod of several budgets).
    Failed,
}

/// A member taken back whose eviction is still to succeed.
#[derive(Debug, Clone)]
struct Member {
    namespace: String,
    name: String,
    uid: String,
    /// `namespace/name`, for logs.
    key: String,
    regarding: ObjectReference,
    reporting_controller: String,
    /// Why its gang is taken back.
    note: String,
    /// The refusal last reported in an event: a new one only when the reason changes.
    reported: Option<Refusal>,
    /// The last refusal's note.
    last: String,
}

#[derive(Default)]
struct Pending {
    members: BTreeMap<String, Member>,
    /// Whether a task is trying them again; set and cleared under the same lock as the
    /// members, so none is left without one.
    retrying: bool,
}

/// The members of gangs taken back whose eviction was refused, by UID, tried again every
/// [`RETRY`] while this agent leads. Kept in memory: a new leader does not know them
/// (their events say they stayed).
#[derive(Clone, Default)]
pub struct TakeBacks(Arc<Mutex<Pending>>);

impl TakeBacks {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The UIDs waiting, and the note of each one's last refusal.
    #[cfg(test)]
    fn waiting(&self) -> BTreeMap<String, String> {
        self.lock()
            .members
            .iter()
            .map(|(uid, m)| (uid.clone(), m.last.clone()))
            .collect()
    }
}

/// `pod` was taken back from `leaf` (`why`): every other bound member of its gang goes
/// too, each with a Warning event saying so, evicted (its owner recreates it; its leaf
/// copy, if any, is then an orphan pod sync deletes). A member whose eviction is refused
/// stays, with an event saying why, and is tried again. Nothing for a pod of no gang.
pub(crate) async fn take_back_gang(
    groups: &PodGroups,
    take_backs: &TakeBacks,
    evictor: &Evictor,
    pod: &Pod,
    leaf: &str,
    why: &str,
) {
    let Some(key) = group_key_of(pod) else {
        return;
    };
    if groups.policy(&key).and_then(|p| p.gang_min_count).is_none() {
        return;
    }
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let note = format!(
        "pod {name} of gang {key} was taken back from leaf cluster {leaf} ({why}); the whole gang is taken back so that it is placed whole again"
    );
    let mut refused = false;
    for member in groups.state(&key).scheduled() {
        if member.uid == uid || member.node_name().is_none() {
            continue;
        }
        // Taken back with another of its gang already, and tried again: said once.
        if take_backs.lock().members.contains_key(&member.uid) {
            continue;
        }
        if !(evictor.may_act)() {
            break;
        }
        let object = member.pod();
        info!(gang = %key, pod = %member.key, "taking a gang member back with its gang");
        let mut m = Member {
            namespace: object.metadata.namespace.clone().unwrap_or_default(),
            name: member.name.clone(),
            uid: member.uid.clone(),
            key: member.key.clone(),
            regarding: object_ref(&object),
            reporting_controller: mcsched_shared::pod::scheduler_name(&object).to_string(),
            note: note.clone(),
            reported: None,
            last: String::new(),
        };
        evictor.events.send(Message::Event {
            reporting_controller: m.reporting_controller.clone(),
            regarding: m.regarding.clone(),
            type_: EventType::Warning,
            reason: REASON,
            action: "Rescheduling",
            note: note.clone(),
        });
        if !try_evict(evictor, &mut m).await {
            take_backs.lock().members.insert(m.uid.clone(), m);
            refused = true;
        }
    }
    if refused {
        keep_trying(take_backs, evictor);
    }
}

/// Evicts `m` (UID-preconditioned: never a successor of the same name); true once it is
/// evicted or gone, false when it stays, its refusal reported when it is new.
async fn try_evict(evictor: &Evictor, m: &mut Member) -> bool {
    let result =
        crate::placement::cluster_failover::evict(&evictor.client, &m.namespace, &m.name, &m.uid)
            .await;
    let (refusal, last) = match result {
        Ok(()) => {
            info!(pod = %m.key, "gang member evicted with its gang");
            return true;
        }
        // Gone, or replaced by a pod of the same name: nothing of this one left to evict.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => return true,
        Err(kube::Error::Api(e)) if e.code == 429 => (
            Refusal::Budget,
            format!(
                "{}; not evicted yet: {} (a PodDisruptionBudget allows no disruption now); tried again every {}s",
                m.note,
                e.message,
                RETRY.as_secs()
            ),
        ),
        Err(kube::Error::Api(e)) if e.code == 403 => (
            Refusal::NotGranted,
            format!(
                "{}; the agent may not evict pods in namespace {} ({}): {}; tried again every {}s",
                m.note,
                m.namespace,
                e.message,
                mcsched_engine::policies::placement_keeper_grant(
                    &m.namespace,
                    &evictor.agent_namespace
                ),
                RETRY.as_secs()
            ),
        ),
        Err(e) => (
            Refusal::Failed,
            format!(
                "{}; evicting it failed: {e}; tried again every {}s",
                m.note,
                RETRY.as_secs()
            ),
        ),
    };
    info!(pod = %m.key, ?refusal, "gang member not evicted yet");
    if m.reported != Some(refusal) {
        m.reported = Some(refusal);
        evictor.events.send(Message::Event {
            reporting_controller: m.reporting_controller.clone(),
            regarding: m.regarding.clone(),
            type_: EventType::Warning,
            reason: REFUSED_REASON,
            action: "Rescheduling",
            note: last.clone(),
        });
    }
    m.last = last;
    false
}

/// One more try of every member waiting; those still refused stay. Nothing written, and
/// nothing kept, once this agent may no longer act: it would evict on a stale decision
/// should it lead again.
pub(crate) async fn retry(take_backs: &TakeBacks, evictor: &Evictor) {
    let due: Vec<Member> = std::mem::take(&mut take_backs.lock().members)
        .into_values()
        .collect();
    for mut m in due {
        if !(evictor.may_act)() {
            warn!(pod = %m.key, "no longer the leader: a gang member taken back is left to stay");
            continue;
        }
        if !try_evict(evictor, &mut m).await {
            take_backs.lock().members.insert(m.uid.clone(), m);
        }
    }
}

/// A task trying the members waiting again every [`RETRY`] until none is left, unless
/// one already does.
fn keep_trying(take_backs: &TakeBacks, evictor: &Evictor) {
    {
        let mut p = take_backs.lock();
        if p.retrying || p.members.is_empty() {
            return;
        }
        p.retrying = true;
    }
    let (take_backs, evictor) = (take_backs.clone(), evictor.clone());
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(RETRY).await;
            retry(&take_backs, &evictor).await;
            let mut p = take_backs.lock();
            if p.members.is_empty() {
                p.retrying = false;
                return;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcsched_engine::snapshot::PodInfo;
    use serde_json::json;
    use std::sync::Arc;

    fn member(name: &str, node: Option<&str>) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": name},
            "spec": {"containers": [], "nodeName": node,
                "schedulingGroup": {"podGroupName": "g"}}
        }))
        .expect("pod")
    }

    /// Gang ns/g (minCount 3): `a` (taken back from east), `b` on the host, `c` in east,
    /// and `d` not bound.
    fn gang() -> (Arc<PodGroups>, Pod) {
        let groups = PodGroups::new();
        groups.set_group(
            &serde_json::from_value(json!({
                "metadata": {"name": "g", "namespace": "ns"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}}
            }))
            .expect("group"),
        );
        let a = member("a", Some("mcsched-east"));
        for p in [
            a.clone(),
            member("b", Some("host-a")),
            member("c", Some("mcsched-east")),
            member("d", None),
        ] {
            groups.add_pod(Arc::new(PodInfo::new(Arc::new(p))));
        }
        (groups, a)
    }

    fn evictor(client: kube::Client, leading: bool) -> Evictor {
        Evictor {
            events: EventSink::start(
                client.clone(),
                "test".into(),
                mcsched_wire::ContentType::Json,
            ),
            client,
            agent_namespace: "mcsched-system".into(),
            may_act: Arc::new(move || leading),
        }
    }

    const B: &str = "/api/v1/namespaces/ns/pods/b/eviction";
    const C: &str = "/api/v1/namespaces/ns/pods/c/eviction";

    fn pod_deletes(calls: &crate::fake_api::Calls) -> Vec<String> {
        crate::fake_api::writes(calls)
            .into_iter()
            .filter(|c| c.starts_with("DELETE") && c.contains("/pods/"))
            .collect()
    }

    #[tokio::test]
    async fn a_member_a_disruption_budget_keeps_is_evicted_once_it_allows_never_deleted() {
        let (groups, a) = gang();
        let budget_allows = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let allows = budget_allows.clone();
        let (client, calls, sent) = crate::fake_api::recording(move |_, path, _| {
            if path == B && !allows.load(std::sync::atomic::Ordering::SeqCst) {
                return (
                    429,
                    crate::fake_api::status(
                        429,
                        "TooManyRequests",
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                    ),
                );
            }
            (201, json!({}))
        });
        let take_backs = TakeBacks::default();
        let evictor = evictor(client, true);
        take_back_gang(
            &groups,
            &take_backs,
            &evictor,
            &a,
            "east",
            "Pending there for 5s",
        )
        .await;
        for (path, uid) in [(B, "b"), (C, "c")] {
            let evictions = crate::fake_api::sent(&sent, "POST", path);
            assert_eq!(evictions.len(), 1, "{path}");
            assert_eq!(evictions[0]["deleteOptions"]["preconditions"]["uid"], uid);
        }
        assert!(
            !crate::fake_api::called(&calls, "POST", "/pods/a/eviction")
                && !crate::fake_api::called(&calls, "POST", "/pods/d/eviction"),
            "the member taken back is pod sync's, and d is not bound"
        );
        let waiting = take_backs.waiting();
        assert_eq!(waiting.keys().collect::<Vec<_>>(), ["b"], "{waiting:?}");
        assert!(
            waiting["b"].contains("would violate the pod's disruption budget")
                && waiting["b"].contains("tried again every 10s"),
            "{waiting:?}"
        );
        // Another member of the gang taken back meanwhile: b is already being tried again.
        take_back_gang(&groups, &take_backs, &evictor, &a, "east", "refused there").await;
        assert_eq!(crate::fake_api::sent(&sent, "POST", B).len(), 1);
        // Tried again: still kept while the budget says no, evicted once it allows.
        retry(&take_backs, &evictor).await;
        assert_eq!(crate::fake_api::sent(&sent, "POST", B).len(), 2);
        assert_eq!(take_backs.waiting().len(), 1);
        budget_allows.store(true, std::sync::atomic::Ordering::SeqCst);
        retry(&take_backs, &evictor).await;
        assert_eq!(crate::fake_api::sent(&sent, "POST", B).len(), 3);
        assert!(take_backs.waiting().is_empty());
        assert_eq!(
            pod_deletes(&calls),
            Vec::<String>::new(),
            "no delete around a budget"
        );
    }

    #[tokio::test]
    async fn without_the_namespaces_grant_a_member_stays_and_the_grant_is_named() {
        let (groups, a) = gang();
        let (client, calls) = crate::fake_api::client(|_, path| {
            if path.ends_with("/eviction") {
                (
                    403,
                    crate::fake_api::status(
                        403,
                        "Forbidden",
                        "pods \"b\" is forbidden: User cannot create resource \"pods/eviction\"",
                    ),
                )
            } else {
                (201, json!({}))
            }
        });
        let take_backs = TakeBacks::default();
        let evictor = evictor(client, true);
        take_back_gang(&groups, &take_backs, &evictor, &a, "east", "refused there").await;
        let waiting = take_backs.waiting();
        assert_eq!(waiting.len(), 2, "{waiting:?}");
        assert!(
            waiting["b"].contains("may not evict pods in namespace ns")
                && waiting["b"].contains(
                    "kubectl create rolebinding mcsched-placement-keeper -n ns --clusterrole=mcsched-agent-placement-keeper --serviceaccount=mcsched-system:mcsched-agent"
                ),
            "{waiting:?}"
        );
        assert_eq!(pod_deletes(&calls), Vec::<String>::new());
        // Once this agent no longer leads, nothing is tried, nor kept for later.
        let follower = Evictor {
            may_act: Arc::new(|| false),
            ..evictor
        };
        let before = crate::fake_api::writes(&calls).len();
        retry(&take_backs, &follower).await;
        assert!(take_backs.waiting().is_empty());
        assert!(
            !crate::fake_api::writes(&calls)[before..]
                .iter()
                .any(|c| c.contains("/pods/")),
            "{calls:?}"
        );
    }

    #[test]
    fn a_member_waits_until_min_count_members_are_bound() {
        let groups = PodGroups::new();
        groups.set_group(
            &serde_json::from_value(json!({
                "metadata": {"name": "g", "namespace": "ns"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}
            }))
            .expect("group"),
        );
        let a = member("a", Some("mcsched-east"));
        groups.add_pod(Arc::new(PodInfo::new(Arc::new(a.clone()))));
        groups.add_pod(Arc::new(PodInfo::new(Arc::new(member("b", None)))));
        assert_eq!(
            held(&groups, &a).as_deref(),
            Some("waiting for the gang ns/g to be bound whole: 1 of minCount 2 pods bound")
        );
        groups.add_pod(Arc::new(PodInfo::new(Arc::new(member(
            "b",
            Some("host-a"),
        )))));
        assert_eq!(held(&groups, &a), None);
    }
}
