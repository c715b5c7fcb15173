//! The scheduling queue, after kube-scheduler's PriorityQueue: activeQ ordered by the
//! profiles' QueueSort plugin (PrioritySort: priority, then arrival), backoffQ for pods that failed recently (1 s
//! doubling to the maximum), unschedulablePods waiting for a cluster event that may help
//! them (or for the 5-minute flush), and gated pods held back by PreEnqueue.
//!
//! Pods are keyed by UID: a pod deleted and created again under the same name while the
//! first is being scheduled or bound is another pod, with its own entry and attempts.
//!
//! Pods wait here [compact](crate::node_info::PodInfo::compact): a burst of thousands of
//! pending pods is otherwise most of the agent's memory. The scheduling cycle decodes the
//! one it pops.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use k8s_openapi::api::core::v1::Pod;

use crate::framework::{ClusterEvent, QueuedPodInfo, Rejection};
use crate::snapshot::PodInfo;

/// A pod's queue key: its UID (`namespace/name` for a pod without one, which the API server
/// never sends).
pub fn pod_id(pod: &Pod) -> String {
    match pod.metadata.uid.as_deref() {
        Some(uid) if !uid.is_empty() => uid.to_string(),
        _ => format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        ),
    }
}

/// The queue's key of a pod: its uid, or `namespace/name` without one (as [`pod_id`]).
pub fn id(info: &PodInfo) -> &str {
    if info.uid.is_empty() {
        &info.key
    } else {
        &info.uid
    }
}

/// kube-scheduler's podMaxInUnschedulablePodsDuration.
pub(crate) const MAX_IN_UNSCHEDULABLE: Duration = Duration::from_secs(5 * 60);

/// QueueSort's `less`: whether `a` goes before `b`.
pub(crate) type Less = Arc<dyn Fn(&QueuedPodInfo, &QueuedPodInfo) -> bool + Send + Sync>;

/// kube-scheduler's default QueueSort, PrioritySort.
pub(crate) fn priority_sort() -> Less {
    Arc::new(crate::plugins::helper::queue_sort::priority_less)
}

struct Active {
    less: Less,
    seq: u64,
    info: QueuedPodInfo,
}

impl PartialEq for Active {
    fn eq(&self, o: &Self) -> bool {
        self.seq == o.seq
    }
}
impl Eq for Active {}
impl PartialOrd for Active {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Active {
    /// Max-heap: what QueueSort puts first is greatest; its ties by arrival.
    fn cmp(&self, o: &Self) -> Ordering {
        if (self.less)(&self.info, &o.info) {
            Ordering::Greater
        } else if (self.less)(&o.info, &self.info) {
            Ordering::Less
        } else {
            o.seq.cmp(&self.seq)
        }
    }
}

struct Unschedulable {
    info: QueuedPodInfo,
    plugins: HashSet<&'static str>,
    since: Instant,
    /// Rejected with Pending (waiting for an answer, not for room): an event of its
    /// plugins moves it to activeQ without backoff, as kube's PendingPlugins.
    pending: bool,
}

#[derive(Default)]
struct State {
    active: BinaryHeap<Active>,
    /// Pod ids in `active`, with the seq of their live entry (stale heap entries are
    /// skipped).
    active_seq: HashMap<String, u64>,
    backoff: HashMap<String, QueuedPodInfo>,
    unschedulable: HashMap<String, Unschedulable>,
    gated: HashMap<String, QueuedPodInfo>,
    /// Popped pods: their `namespace/name` and the move-request cycle current when they
    /// were popped.
    in_flight: HashMap<String, (String, u64)>,
    /// In-flight pods deleted (or bound by someone else) meanwhile: their attempt's
    /// result must not bring them back (kube checks its informer cache).
    gone: HashSet<String>,
    move_request_cycle: u64,
    seq: u64,
    closed: bool,
}

impl State {
    /// Every pod waiting in the queue: activeQ's live entries, backoff, unschedulable and
    /// gated (not the pods in a cycle).
    fn waiting(&self) -> impl Iterator<Item = &QueuedPodInfo> {
        self.active
            .iter()
            .filter(|a| self.active_seq.get(id(&a.info.pod)) == Some(&a.seq))
            .map(|a| &a.info)
            .chain(self.backoff.values())
            .chain(self.unschedulable.values().map(|u| &u.info))
            .chain(self.gated.values())
    }
}

/// How many pods wait where, for `scheduler_pending_pods`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PendingCounts {
    pub active: usize,
    pub backoff: usize,
    pub unschedulable: usize,
    pub gated: usize,
}

pub struct SchedulingQueue {
    state: Mutex<State>,
    ready: Notify,
    initial_backoff: Duration,
    max_backoff: Duration,
    /// Which cluster events each plugin registered: a pod rejected by plugin P is moved
    /// on P's events only.
    plugin_events: HashMap<&'static str, Vec<ClusterEvent>>,
    less: Less,
}

/// kube's `isPodUpdated`: a change beyond status, resourceVersion, generation, managed
/// fields and finalizers.
fn pod_updated(
    old: &k8s_openapi::api::core::v1::Pod,
    new: &k8s_openapi::api::core::v1::Pod,
) -> bool {
    let strip = |p: &k8s_openapi::api::core::v1::Pod| {
        let mut meta = p.metadata.clone();
        meta.resource_version = None;
        meta.generation = None;
        meta.managed_fields = None;
        meta.finalizers = None;
        (meta, p.spec.clone())
    };
    strip(old) != strip(new)
}

pub(crate) fn backoff_duration(attempts: u32, initial: Duration, max: Duration) -> Duration {
    let mut d = initial;
    for _ in 1..attempts {
        if d > max.saturating_sub(d) {
            return max;
        }
        d += d;
    }
    d.min(max)
}

impl SchedulingQueue {
    pub fn new(
        initial_backoff: Duration,
        max_backoff: Duration,
        plugin_events: HashMap<&'static str, Vec<ClusterEvent>>,
        less: Less,
    ) -> Arc<Self> {
        Arc::new(SchedulingQueue {
            state: Mutex::default(),
            ready: Notify::new(),
            initial_backoff,
            max_backoff,
            plugin_events,
            less,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Into activeQ, its timestamp kept: kube sets it when the pod is added and when it
    /// comes back from an attempt, not when it moves between queues (the order of a pod
    /// group's members, kept from one cycle to the next, depends on it).
    fn push_active(&self, st: &mut State, info: QueuedPodInfo) {
        st.seq += 1;
        let seq = st.seq;
        st.active_seq.insert(id(&info.pod).to_string(), seq);
        st.active.push(Active {
            less: self.less.clone(),
            seq,
            info,
        });
        self.ready.notify_one();
    }

    fn backoff_expiry(&self, info: &QueuedPodInfo) -> Instant {
        info.timestamp + backoff_duration(info.attempts, self.initial_backoff, self.max_backoff)
    }

    /// A pod to schedule appeared or changed. `gate`: the PreEnqueue plugin holding it
    /// back, if one does.
    pub fn add(&self, pod: Arc<PodInfo>, gate: Option<Rejection>) {
        let mut st = self.lock();
        self.add_locked(&mut st, pod, gate);
    }

    /// As [`Queue::add`] for each, at once: no pod is popped before the others are in
    /// (a pod group's members, let through together, are scheduled together).
    pub fn add_all(&self, pods: Vec<(Arc<PodInfo>, Option<Rejection>)>) {
        let mut st = self.lock();
        for (pod, gate) in pods {
            self.add_locked(&mut st, pod, gate);
        }
    }

    fn add_locked(&self, st: &mut State, pod: Arc<PodInfo>, gate: Option<Rejection>) {
        let gated = gate.is_some();
        let pod = pod.compacted();
        if st.closed {
            return;
        }
        let key = id(&pod).to_string();
        if !gated {
            // kube's Update: a pod waiting out its backoff is updated where it is...
            if let Some(info) = st.backoff.get_mut(&key) {
                info.pod = pod;
                return;
            }
            // ...and an unschedulable one stays unless more than its status changed (our
            // own PodScheduled condition must not retry it at once).
            if let Some(u) = st.unschedulable.get_mut(&key)
                && !pod_updated(&u.info.pod.pod(), &pod.pod())
            {
                u.info.pod = pod;
                return;
            }
        }
        let previous = st
            .backoff
            .remove(&key)
            .or_else(|| st.unschedulable.remove(&key).map(|u| u.info))
            .or_else(|| st.gated.remove(&key));
        let mut info = previous.unwrap_or_else(|| QueuedPodInfo {
            pod: pod.clone(),
            timestamp: Instant::now(),
            initial_attempt: None,
            attempts: 0,
            rejection: None,
        });
        info.pod = pod;
        if gated {
            info.rejection = gate;
            st.active_seq.remove(&key);
            st.gated.insert(key, info);
            return;
        }
        // Being scheduled right now: the result decides where it goes.
        if st.in_flight.contains_key(&key) {
            return;
        }
        crate::metrics::global().incoming("active", "PodAdd");
        self.push_active(st, info);
    }

    /// The pod ([`pod_id`]) was deleted, or bound: it leaves the queue.
    pub fn delete(&self, id: &str) {
        let mut st = self.lock();
        if st.in_flight.contains_key(id) {
            st.gone.insert(id.to_string());
        }
        st.active_seq.remove(id);
        st.backoff.remove(id);
        st.unschedulable.remove(id);
        st.gated.remove(id);
    }

    /// Waits for the next pod; `None` once closed.
    pub async fn pop(&self) -> Option<QueuedPodInfo> {
        loop {
            let notified = self.ready.notified();
            {
                let mut st = self.lock();
                if st.closed {
                    return None;
                }
                while let Some(top) = st.active.pop() {
                    let pod_id = id(&top.info.pod).to_string();
                    let live = st.active_seq.get(&pod_id) == Some(&top.seq);
                    if !live {
                        continue;
                    }
                    let mut info = top.info;
                    st.active_seq.remove(&pod_id);
                    info.attempts += 1;
                    info.initial_attempt.get_or_insert_with(Instant::now);
                    info.rejection = None;
                    let cycle = st.move_request_cycle;
                    st.in_flight
                        .insert(pod_id.clone(), (info.pod.key.clone(), cycle));
                    st.gone.remove(&pod_id);
                    return Some(info);
                }
            }
            notified.await;
        }
    }

    /// Takes the pod ([`pod_id`]) out of activeQ, backoffQ or unschedulablePods into a
    /// cycle, as `pop` would (kube's PopSpecificPod, for the other pods of a pod group).
    /// None when it waits nowhere there (gated, in a cycle, or gone).
    pub fn pop_specific(&self, pod_id: &str) -> Option<QueuedPodInfo> {
        let mut st = self.lock();
        if st.closed {
            return None;
        }
        let mut info = if let Some(seq) = st.active_seq.remove(pod_id) {
            // Its heap entry is now stale and skipped by `pop`.
            st.active
                .iter()
                .find(|a| a.seq == seq)
                .map(|a| a.info.clone())?
        } else if let Some(info) = st.backoff.remove(pod_id) {
            info
        } else {
            st.unschedulable.remove(pod_id)?.info
        };
        info.attempts += 1;
        info.initial_attempt.get_or_insert_with(Instant::now);
        info.rejection = None;
        let cycle = st.move_request_cycle;
        st.in_flight
            .insert(pod_id.to_string(), (info.pod.key.clone(), cycle));
        st.gone.remove(pod_id);
        Some(info)
    }

    /// The pods PreEnqueue holds back, to be judged again when what they wait for may
    /// have come.
    pub fn gated_pods(&self) -> Vec<Arc<PodInfo>> {
        self.lock().gated.values().map(|i| i.pod.clone()).collect()
    }

    /// The in-flight pod ([`pod_id`]) was deleted, or bound by someone else, meanwhile.
    pub fn is_gone(&self, id: &str) -> bool {
        self.lock().gone.contains(id)
    }

    /// The popped pod was bound (or is gone): it leaves the queue.
    pub fn done(&self, pod: &PodInfo) {
        let mut st = self.lock();
        let pod_id = id(pod);
        st.in_flight.remove(pod_id);
        st.gone.remove(pod_id);
    }

    /// The pod did not fit. If a cluster event came while it was being scheduled it may
    /// already fit, so it goes to backoff; else it waits for an event one of `plugins`
    /// registered.
    pub fn add_unschedulable(&self, info: QueuedPodInfo, plugins: HashSet<&'static str>) {
        self.requeue_rejected(info, plugins, false);
    }

    /// A plugin answered Pending: the pod waits for an event of `plugins` (or went on
    /// during the attempt) and then goes straight to activeQ.
    pub fn add_pending(&self, info: QueuedPodInfo, plugins: HashSet<&'static str>) {
        self.requeue_rejected(info, plugins, true);
    }

    fn requeue_rejected(
        &self,
        mut info: QueuedPodInfo,
        plugins: HashSet<&'static str>,
        pending: bool,
    ) {
        info.pod = info.pod.compacted();
        let mut st = self.lock();
        let key = id(&info.pod).to_string();
        let popped_at = st.in_flight.remove(&key).map(|(_, cycle)| cycle);
        if st.gone.remove(&key) || st.closed || st.active_seq.contains_key(&key) {
            return;
        }
        info.timestamp = Instant::now();
        let event_meanwhile = popped_at.is_some_and(|c| c < st.move_request_cycle);
        if event_meanwhile && pending {
            crate::metrics::global().incoming("active", "ScheduleAttemptFailure");
            self.push_active(&mut st, info);
        } else if event_meanwhile {
            crate::metrics::global().incoming("backoff", "ScheduleAttemptFailure");
            st.backoff.insert(key, info);
        } else {
            crate::metrics::global().incoming("unschedulable", "ScheduleAttemptFailure");
            st.unschedulable.insert(
                key,
                Unschedulable {
                    info,
                    plugins,
                    since: Instant::now(),
                    pending,
                },
            );
        }
    }

    /// An error (not a misfit): retry after backoff.
    pub fn add_backoff(&self, mut info: QueuedPodInfo) {
        info.pod = info.pod.compacted();
        let mut st = self.lock();
        let key = id(&info.pod).to_string();
        st.in_flight.remove(&key);
        if st.gone.remove(&key) || st.closed || st.active_seq.contains_key(&key) {
            return;
        }
        info.timestamp = Instant::now();
        crate::metrics::global().incoming("backoff", "ScheduleAttemptFailure");
        st.backoff.insert(key, info);
    }

    /// A cluster change: pods rejected by a plugin that cares about it move to backoffQ,
    /// or straight to activeQ when their backoff is over.
    pub fn on_event(&self, event: ClusterEvent) {
        let mut st = self.lock();
        st.move_request_cycle += 1;
        let now = Instant::now();
        let keys: Vec<String> = st
            .unschedulable
            .iter()
            .filter(|(_, u)| {
                u.plugins.is_empty()
                    || u.plugins.iter().any(|p| {
                        self.plugin_events
                            .get(p)
                            .is_none_or(|evs| evs.contains(&event))
                    })
            })
            .map(|(k, _)| k.clone())
            .collect();
        let event_name = format!("{event:?}");
        for key in keys {
            if let Some(u) = st.unschedulable.remove(&key) {
                if u.pending || self.backoff_expiry(&u.info) <= now {
                    crate::metrics::global().incoming("active", &event_name);
                    self.push_active(&mut st, u.info);
                } else {
                    crate::metrics::global().incoming("backoff", &event_name);
                    st.backoff.insert(key, u.info);
                }
            }
        }
    }

    /// Moves pods whose backoff ended to activeQ, and pods unschedulable for longer than
    /// MAX_IN_UNSCHEDULABLE back into circulation. Called every second.
    pub fn flush(&self) {
        self.flush_at(Instant::now());
    }

    /// [`Self::flush`] as of `now`: tests move the clock instead of waiting 5 minutes.
    fn flush_at(&self, now: Instant) {
        let mut st = self.lock();
        let done: Vec<String> = st
            .backoff
            .iter()
            .filter(|(_, i)| self.backoff_expiry(i) <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in done {
            if let Some(info) = st.backoff.remove(&key) {
                self.push_active(&mut st, info);
            }
        }
        let stale: Vec<String> = st
            .unschedulable
            .iter()
            .filter(|(_, u)| now.duration_since(u.since) >= MAX_IN_UNSCHEDULABLE)
            .map(|(k, _)| k.clone())
            .collect();
        for key in stale {
            if let Some(u) = st.unschedulable.remove(&key) {
                if self.backoff_expiry(&u.info) <= now {
                    self.push_active(&mut st, u.info);
                } else {
                    st.backoff.insert(key, u.info);
                }
            }
        }
    }

    /// The pod `namespace/name` waiting in the queue (not in a scheduling cycle right
    /// now), for its explanation.
    pub fn waiting(&self, key: &str) -> Option<Arc<PodInfo>> {
        let st = self.lock();
        st.waiting()
            .find(|i| i.pod.key == key)
            .map(|i| i.pod.clone())
    }

    /// `namespace/name` of every pod not yet bound: waiting or in a cycle.
    pub fn pending_keys(&self) -> HashSet<String> {
        let st = self.lock();
        st.waiting()
            .map(|i| i.pod.key.clone())
            .chain(st.in_flight.values().map(|(key, _)| key.clone()))
            .collect()
    }

    /// Waiting pods by (plugin, profile) of their [`Rejection`], for
    /// `scheduler_unschedulable_pods`: a pod counts under each plugin that rejected it.
    pub fn unschedulable_reasons(&self) -> HashMap<(&'static str, String), usize> {
        let st = self.lock();
        let mut counts = HashMap::new();
        // As kube: counted from the rejection until popped, in whichever queue it waits.
        for r in st.waiting().filter_map(|i| i.rejection.as_ref()) {
            for &plugin in &r.plugins {
                *counts.entry((plugin, r.profile.clone())).or_insert(0) += 1;
            }
        }
        counts
    }

    pub fn pending(&self) -> PendingCounts {
        let st = self.lock();
        PendingCounts {
            active: st.active_seq.len(),
            backoff: st.backoff.len(),
            unschedulable: st.unschedulable.len(),
            gated: st.gated.len(),
        }
    }

    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Pod, PodSpec};

    /// kube-scheduler's defaults (podInitialBackoffSeconds, podMaxBackoffSeconds).
    const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_secs(1);
    const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(10);

    fn pod(name: &str, priority: i32) -> Arc<PodInfo> {
        pod_with_uid(name, priority, &format!("uid-{name}"))
    }

    fn pod_with_uid(name: &str, priority: i32, uid: &str) -> Arc<PodInfo> {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.uid = Some(uid.into());
        p.metadata.namespace = Some("ns".into());
        p.spec = Some(PodSpec {
            priority: Some(priority),
            ..Default::default()
        });
        Arc::new(PodInfo::new(Arc::new(p)))
    }

    fn queue(events: &[(&'static str, Vec<ClusterEvent>)]) -> Arc<SchedulingQueue> {
        SchedulingQueue::new(
            DEFAULT_INITIAL_BACKOFF,
            DEFAULT_MAX_BACKOFF,
            events.iter().cloned().collect(),
            priority_sort(),
        )
    }

    #[test]
    fn backoff_doubles_up_to_the_maximum() {
        let secs: Vec<u64> = (1..=6)
            .map(|a| backoff_duration(a, DEFAULT_INITIAL_BACKOFF, DEFAULT_MAX_BACKOFF).as_secs())
            .collect();
        assert_eq!(secs, vec![1, 2, 4, 8, 10, 10]);
    }

    #[tokio::test]
    async fn higher_priority_first_then_arrival() {
        let q = queue(&[]);
        q.add(pod("low", 0), None);
        q.add(pod("high", 100), None);
        q.add(pod("low2", 0), None);
        q.add(pod("low", 0), None); // an update keeps one entry
        let order: Vec<String> = [q.pop().await, q.pop().await, q.pop().await]
            .into_iter()
            .flatten()
            .map(|i| i.pod.name.clone())
            .collect();
        assert_eq!(order, vec!["high", "low2", "low"]);
        assert_eq!(q.pending().active, 0);
    }

    /// Pods wait compact, whichever way they come back; what the cycle decodes from one
    /// is the pod that was queued.
    #[tokio::test]
    async fn pods_wait_compact() {
        let q = SchedulingQueue::new(
            Duration::from_millis(1),
            Duration::from_millis(1),
            HashMap::new(),
            priority_sort(),
        );
        let decoded = pod("p", 0);
        assert!(!decoded.is_compact());
        q.add(decoded.clone(), None);
        let mut popped = q.pop().await.expect("popped");
        assert!(popped.pod.is_compact());
        assert_eq!(popped.pod.pod(), decoded.pod());
        popped.pod = popped.pod.decoded();
        assert!(!popped.pod.is_compact());
        q.add_backoff(popped);
        tokio::time::sleep(Duration::from_millis(20)).await;
        q.flush();
        let again = q.pop().await.expect("popped again");
        assert!(again.pod.is_compact());
    }

    #[tokio::test]
    async fn unschedulable_pods_move_on_their_plugins_events_only() {
        let q = queue(&[(
            "NodeResourcesFit",
            vec![ClusterEvent::PodDelete, ClusterEvent::NodeAdd],
        )]);
        q.add(pod("p", 0), None);
        let info = q.pop().await.expect("queued");
        q.add_unschedulable(info, HashSet::from(["NodeResourcesFit"]));
        assert_eq!(q.pending().unschedulable, 1);
        q.on_event(ClusterEvent::PvcChange);
        assert_eq!(q.pending().unschedulable, 1);
        q.on_event(ClusterEvent::PodDelete);
        let p = q.pending();
        assert_eq!((p.unschedulable, p.active + p.backoff), (0, 1));
    }

    /// kube's podMaxInUnschedulablePodsDuration: a pod no event moved is retried after 5
    /// minutes in unschedulablePods, not before.
    #[tokio::test]
    async fn unschedulable_pods_are_flushed_after_five_minutes_without_an_event() {
        let q = queue(&[("X", vec![ClusterEvent::NodeAdd])]);
        q.add(pod("p", 0), None);
        let info = q.pop().await.expect("queued");
        let before = Instant::now();
        q.add_unschedulable(info, HashSet::from(["X"]));
        let after = Instant::now();
        q.flush_at(before + MAX_IN_UNSCHEDULABLE - Duration::from_millis(1));
        assert_eq!(q.pending().unschedulable, 1, "flushed before 5 minutes");
        q.flush_at(after + MAX_IN_UNSCHEDULABLE);
        let p = q.pending();
        assert_eq!(
            (p.unschedulable, p.backoff, p.active),
            (0, 0, 1),
            "not back in activeQ after 5 minutes"
        );
        assert_eq!(q.pop().await.expect("active").pod.name, "p");
    }

    /// A flushed pod whose backoff is not over yet serves it in backoffQ first.
    #[tokio::test]
    async fn a_flushed_pod_still_in_backoff_goes_to_backoff_q() {
        let long = Duration::from_secs(600);
        let q = SchedulingQueue::new(long, long, HashMap::new(), priority_sort());
        q.add(pod("p", 0), None);
        let info = q.pop().await.expect("queued");
        q.add_unschedulable(info, HashSet::from(["X"]));
        let after = Instant::now();
        q.flush_at(after + MAX_IN_UNSCHEDULABLE);
        let p = q.pending();
        assert_eq!((p.unschedulable, p.backoff, p.active), (0, 1, 0));
        q.flush_at(after + long);
        assert_eq!(q.pending().active, 1, "backoff over: activeQ");
    }

    #[tokio::test]
    async fn an_event_during_the_attempt_sends_the_pod_to_backoff() {
        let q = queue(&[]);
        q.add(pod("p", 0), None);
        let info = q.pop().await.expect("queued");
        q.on_event(ClusterEvent::NodeAdd);
        q.add_unschedulable(info, HashSet::from(["X"]));
        let p = q.pending();
        assert_eq!((p.unschedulable, p.backoff), (0, 1));
    }

    #[tokio::test]
    async fn gated_pods_wait_until_ungated() {
        let q = queue(&[]);
        q.add(pod("g", 0), Some(rejection(&["SchedulingGates"])));
        assert_eq!(q.pending().gated, 1);
        assert_eq!(
            q.unschedulable_reasons(),
            HashMap::from([(("SchedulingGates", "p".to_string()), 1)])
        );
        q.add(pod("g", 0), None);
        assert_eq!(
            q.pending(),
            PendingCounts {
                active: 1,
                ..Default::default()
            }
        );
        // Counted until popped, as kube.
        assert_eq!(q.unschedulable_reasons().len(), 1);
        let popped = q.pop().await.expect("active");
        assert_eq!(q.unschedulable_reasons(), HashMap::new());
        q.done(&popped.pod);
        assert_eq!(q.pending(), PendingCounts::default());
    }

    fn rejection(plugins: &[&'static str]) -> Rejection {
        Rejection {
            profile: "p".into(),
            plugins: plugins.to_vec(),
        }
    }

    #[tokio::test]
    async fn rejected_pods_count_under_each_rejecting_plugin_while_they_wait() {
        let q = queue(&[("NodeResourcesFit", vec![ClusterEvent::PodDelete])]);
        for name in ["a", "b"] {
            q.add(pod(name, 0), None);
        }
        let mut a = q.pop().await.expect("queued");
        let mut b = q.pop().await.expect("queued");
        a.rejection = Some(rejection(&["NodeResourcesFit", "TaintToleration"]));
        b.rejection = Some(rejection(&["NodeResourcesFit"]));
        q.add_unschedulable(a, HashSet::from(["NodeResourcesFit", "TaintToleration"]));
        q.add_unschedulable(b, HashSet::from(["NodeResourcesFit"]));
        let want = |fit, taint| {
            let mut m = HashMap::from([(("NodeResourcesFit", "p".to_string()), fit)]);
            if taint > 0 {
                m.insert(("TaintToleration", "p".to_string()), taint);
            }
            m
        };
        assert_eq!(q.unschedulable_reasons(), want(2, 1));
        // Still counted in backoff (kube counts them until they are popped)...
        q.on_event(ClusterEvent::PodDelete);
        assert_eq!(q.pending().backoff, 2);
        assert_eq!(q.unschedulable_reasons(), want(2, 1));
        // ...no more once deleted...
        q.delete("uid-a");
        assert_eq!(q.unschedulable_reasons(), want(1, 0));
        // ...or popped for the next attempt (a pending pod goes straight to activeQ).
        q.add(pod("c", 0), None);
        let mut c = q.pop().await.expect("queued");
        c.rejection = Some(rejection(&["VolumeBinding"]));
        q.add_pending(c, HashSet::from(["VolumeBinding"]));
        q.on_event(ClusterEvent::PodDelete);
        assert_eq!(q.pending().active, 1);
        assert_eq!(q.unschedulable_reasons().len(), 2);
        let c = q.pop().await.expect("active");
        assert_eq!(c.rejection, None);
        assert_eq!(q.unschedulable_reasons(), want(1, 0));
        q.delete("uid-b");
        assert_eq!(q.unschedulable_reasons(), HashMap::new());
    }

    #[tokio::test]
    async fn a_pod_deleted_during_its_attempt_does_not_come_back() {
        let q = queue(&[]);
        q.add(pod("p", 0), None);
        let info = q.pop().await.expect("queued");
        q.delete("uid-p");
        q.add_unschedulable(info.clone(), HashSet::from(["X"]));
        assert_eq!(q.pending(), PendingCounts::default());
        // Nor through backoff; and a new pod of that name, created meanwhile, is queued.
        q.add(pod_with_uid("p", 0, "uid-p2"), None);
        let again = q.pop().await.expect("queued");
        q.delete("uid-p2");
        q.add(pod_with_uid("p", 0, "uid-p3"), None);
        q.add_backoff(again);
        assert_eq!(
            q.pending(),
            PendingCounts {
                active: 1,
                ..Default::default()
            }
        );
    }

    #[tokio::test]
    async fn a_namesake_created_during_an_attempt_is_a_pod_of_its_own() {
        let q = queue(&[]);
        q.add(pod_with_uid("p", 0, "uid-1"), None);
        let first = q.pop().await.expect("queued");
        q.delete("uid-1");
        // The new pod is queued at once, not held back by the first one's attempt.
        q.add(pod_with_uid("p", 0, "uid-2"), None);
        let second = q.pop().await.expect("queued");
        assert_eq!(second.pod.uid, "uid-2");
        assert_eq!(q.pending_keys(), HashSet::from(["ns/p".to_string()]));
        // The first attempt ends while the second is in its cycle: the second is still
        // known to be in flight, so its own deletion keeps it from coming back.
        q.done(&first.pod);
        q.delete("uid-2");
        q.add_unschedulable(second, HashSet::from(["X"]));
        assert_eq!(q.pending(), PendingCounts::default());
        assert!(q.pending_keys().is_empty());
    }

    #[tokio::test]
    async fn status_updates_leave_backoff_and_unschedulable_pods_where_they_are() {
        let q = queue(&[]);
        q.add(pod("p", 0), None);
        let info = q.pop().await.expect("queued");
        q.add_unschedulable(info, HashSet::from(["X"]));
        let with_status = |p: &Arc<PodInfo>, rv: &str| {
            let mut pod = (*p.pod()).clone();
            pod.metadata.resource_version = Some(rv.into());
            pod.status = Some(Default::default());
            Arc::new(PodInfo::new(Arc::new(pod)))
        };
        let p = pod("p", 0);
        q.add(with_status(&p, "2"), None);
        assert_eq!(
            q.pending().unschedulable,
            1,
            "a status update changes nothing"
        );
        let mut relabelled = (*p.pod()).clone();
        relabelled.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
        q.add(Arc::new(PodInfo::new(Arc::new(relabelled))), None);
        assert_eq!(q.pending().active, 1, "a label change may make it fit");

        let info = q.pop().await.expect("queued");
        q.add_backoff(info);
        q.add(with_status(&p, "3"), None);
        assert_eq!(
            q.pending(),
            PendingCounts {
                backoff: 1,
                ..Default::default()
            }
        );
    }

    /// The events the real plugins register: a pod only LeafNodeFit rejected waits for
    /// its leaves, not for host changes that cannot help it.
    #[tokio::test]
    async fn a_pod_rejected_only_by_leaf_feasibility_waits_for_leaf_changes() {
        let spec = crate::config_bridge::default_spec("mcsched").expect("default profile");
        let profiles =
            crate::profiles::Profiles::build(&[(spec, crate::plugins::default_registry())], 1)
                .expect("profiles");
        let q = SchedulingQueue::new(
            DEFAULT_INITIAL_BACKOFF,
            DEFAULT_MAX_BACKOFF,
            profiles.plugin_events.clone(),
            profiles.less.clone(),
        );
        q.add(pod("p", 0), None);
        let info = q.pop().await.expect("queued");
        q.add_unschedulable(info, HashSet::from([crate::plugins::leaf_node_fit::NAME]));
        for unrelated in [
            ClusterEvent::NodeUpdate,
            ClusterEvent::PodDelete,
            ClusterEvent::PodAdd,
            ClusterEvent::PodUpdate,
            ClusterEvent::NamespaceChange,
            ClusterEvent::PvChange,
        ] {
            q.on_event(unrelated);
            assert_eq!(q.pending().unschedulable, 1, "moved on {unrelated:?}");
        }
        q.on_event(ClusterEvent::LeafChange);
        let p = q.pending();
        assert_eq!((p.unschedulable, p.active + p.backoff), (0, 1));
    }

    /// A pod waiting for an answer (Pending) is not penalised: the answer's event, or one
    /// during its attempt, sends it to activeQ at once; an Unschedulable one serves its
    /// backoff first.
    #[tokio::test]
    async fn pending_pods_skip_backoff() {
        let q = queue(&[("W", vec![ClusterEvent::LeafChange])]);
        q.add(pod("waits", 0), None);
        q.add(pod("misfit", 0), None);
        for _ in 0..2 {
            let info = q.pop().await.expect("queued");
            if info.pod.name == "waits" {
                q.add_pending(info, HashSet::from(["W"]));
            } else {
                q.add_unschedulable(info, HashSet::from(["W"]));
            }
        }
        q.on_event(ClusterEvent::LeafChange);
        let p = q.pending();
        assert_eq!((p.active, p.backoff, p.unschedulable), (1, 1, 0));
        let again = q.pop().await.expect("queued");
        assert_eq!(again.pod.name, "waits");
        // The answer comes while it is being scheduled: straight back to activeQ.
        q.on_event(ClusterEvent::LeafChange);
        q.add_pending(again, HashSet::from(["W"]));
        assert_eq!(q.pending().active, 1);
    }

    #[tokio::test]
    async fn active_pods_follow_the_queue_sort_plugin() {
        // A QueueSort that puts names in reverse order, priority ignored.
        let by_name_desc: Less = Arc::new(|a, b| a.pod.name > b.pod.name);
        let q = SchedulingQueue::new(
            DEFAULT_INITIAL_BACKOFF,
            DEFAULT_MAX_BACKOFF,
            HashMap::new(),
            by_name_desc,
        );
        q.add(pod("a", 100), None);
        q.add(pod("c", 0), None);
        q.add(pod("b", 50), None);
        let order: Vec<String> = [q.pop().await, q.pop().await, q.pop().await]
            .into_iter()
            .flatten()
            .map(|i| i.pod.name.clone())
            .collect();
        assert_eq!(order, vec!["c", "b", "a"]);
    }
}
