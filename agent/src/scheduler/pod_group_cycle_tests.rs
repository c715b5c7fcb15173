//! The pod group cycle against an in-memory API (see `fake_api`): kube v1.37's algorithm
//! (which members are tried, PlacementFeasible's verdicts, no PostFilter for members),
//! the PodGroup's condition and the members' messages, pod group preemption, and how
//! much the placement search simulates, with the pod queued behind a gang scheduled once
//! it is done. The work is counted, not timed: NodeAffinity, the first PreFilter plugin,
//! is wrapped to count its PreFilter calls (one per member attempt), and panics past a
//! budget so that a search that is not bounded fails at once rather than run for hours;
//! NodeResourcesFit, to count its Filter calls (one per node tried).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use mcsched_shared::pod_group_versions::PodGroupVersion;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::{MAX_PLACEMENT_ATTEMPTS, group_to_schedule, pod_group_cycle};
use crate::control::watch::Change;
use crate::fake_api::{self, Requests};
use crate::multicluster::registry::Leaves;
use crate::scheduler::scheduling_cycle::scheduling_cycle;
use crate::scheduler::{SchedulerOptions, Shared};
use mcsched_engine::framework::{
    ClusterEvent, CycleState, FilterPlugin, Handle, Plugin, PreFilterPlugin, Status,
};
use mcsched_engine::policies::PolicySet;
use mcsched_engine::snapshot::{NodeInfo, PodInfo, Snapshot};

/// A plugin as it is, its PreFilter and Filter calls counted; a PreFilter past `budget`
/// panics.
struct Counting {
    inner: Arc<dyn Plugin>,
    budget: usize,
    attempts: AtomicUsize,
    nodes: AtomicUsize,
}

impl Plugin for Counting {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn set_handle(&self, handle: &Handle) {
        self.inner.set_handle(handle)
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        self.inner.events_to_register()
    }
    fn as_pre_enqueue(&self) -> Option<&dyn mcsched_engine::framework::PreEnqueuePlugin> {
        self.inner.as_pre_enqueue()
    }
    fn as_queue_sort(&self) -> Option<&dyn mcsched_engine::framework::QueueSortPlugin> {
        self.inner.as_queue_sort()
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        self.inner
            .as_pre_filter()
            .map(|_| self as &dyn PreFilterPlugin)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        self.inner.as_filter().map(|_| self as &dyn FilterPlugin)
    }
    fn as_post_filter(&self) -> Option<&dyn mcsched_engine::framework::PostFilterPlugin> {
        self.inner.as_post_filter()
    }
    fn as_pre_score(&self) -> Option<&dyn mcsched_engine::framework::PreScorePlugin> {
        self.inner.as_pre_score()
    }
    fn as_score(&self) -> Option<&dyn mcsched_engine::framework::ScorePlugin> {
        self.inner.as_score()
    }
    fn as_reserve(&self) -> Option<&dyn mcsched_engine::framework::ReservePlugin> {
        self.inner.as_reserve()
    }
    fn as_permit(&self) -> Option<&dyn mcsched_engine::framework::PermitPlugin> {
        self.inner.as_permit()
    }
    fn as_pre_bind(&self) -> Option<&dyn mcsched_engine::framework::PreBindPlugin> {
        self.inner.as_pre_bind()
    }
    fn as_bind(&self) -> Option<&dyn mcsched_engine::framework::BindPlugin> {
        self.inner.as_bind()
    }
    fn as_post_bind(&self) -> Option<&dyn mcsched_engine::framework::PostBindPlugin> {
        self.inner.as_post_bind()
    }
    fn as_placement_feasible(
        &self,
    ) -> Option<&dyn mcsched_engine::framework::PlacementFeasiblePlugin> {
        self.inner.as_placement_feasible()
    }
    fn as_placement_score(&self) -> Option<&dyn mcsched_engine::framework::PlacementScorePlugin> {
        self.inner.as_placement_score()
    }
}

impl PreFilterPlugin for Counting {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Option<HashSet<String>>, Status) {
        let n = self.attempts.fetch_add(1, Ordering::Relaxed) + 1;
        assert!(
            n <= self.budget,
            "attempt {n} (pod {}): the search is past the {} attempts this test allows",
            pod.key,
            self.budget
        );
        let inner = self.inner.as_pre_filter().expect("a PreFilter plugin");
        inner.pre_filter(state, pod, snapshot)
    }
    fn add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        added: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        let inner = self.inner.as_pre_filter().expect("a PreFilter plugin");
        inner.add_pod(state, pod, added, node)
    }
    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        removed: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        let inner = self.inner.as_pre_filter().expect("a PreFilter plugin");
        inner.remove_pod(state, pod, removed, node)
    }
}

impl FilterPlugin for Counting {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        self.nodes.fetch_add(1, Ordering::Relaxed);
        let inner = self.inner.as_filter().expect("a Filter plugin");
        inner.filter(state, pod, node)
    }
}

/// A node named `name` with `cpu` allocatable and `labels`.
fn node(name: &str, cpu: u32, labels: Value) -> Node {
    let mut labels = labels;
    labels[HOSTNAME] = json!(name);
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": cpu.to_string(), "memory": "64Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .expect("node")
}

struct Cluster {
    shared: Arc<Shared>,
    /// NodeAffinity's: its PreFilter calls are the member attempts.
    attempts: Arc<Counting>,
    /// NodeResourcesFit's: its Filter calls are the nodes tried.
    filtered: Arc<Counting>,
    requests: Requests,
}

/// The agent's default profile over `nodes`, NodeAffinity and NodeResourcesFit counted,
/// past `budget` member attempts a panic.
fn cluster(nodes: impl IntoIterator<Item = Node>, budget: usize) -> Cluster {
    let spec =
        mcsched_engine::config_bridge::mcsched_default_spec("mcsched").expect("default profile");
    cluster_with(nodes, budget, spec)
}

fn cluster_with(
    nodes: impl IntoIterator<Item = Node>,
    budget: usize,
    spec: mcsched_engine::framework::ProfileSpec,
) -> Cluster {
    let (client, _, requests) = fake_api::recording(|method, path, _| {
        if method == "POST" && path.ends_with("/binding") {
            (201, json!({}))
        } else {
            (200, json!({}))
        }
    });
    let leaves = Arc::new(Leaves::new(Default::default()));
    let groups = mcsched_engine::pod_groups::PodGroups::new();
    let mut registry = mcsched_engine::plugins::registry_with(
        &Default::default(),
        leaves.clone(),
        groups.clone(),
        mcsched_engine::dra_state::ResourceClaims::new(),
    );
    let mut counted = |name: &str| {
        let counting = Arc::new(Counting {
            inner: registry.get(name).expect("in the registry").clone(),
            budget,
            attempts: AtomicUsize::new(0),
            nodes: AtomicUsize::new(0),
        });
        registry.insert(name.to_string(), counting.clone());
        counting
    };
    let attempts = counted("NodeAffinity");
    let filtered = counted("NodeResourcesFit");
    let mut profiles =
        mcsched_engine::profiles::Profiles::build(&[(spec, registry)], 2).expect("profiles");
    profiles.pod_groups = groups;
    let options = SchedulerOptions {
        parallel_bindings: 16,
        namespace: "mcsched-system".into(),
        initial_backoff: Duration::from_secs(1),
        max_backoff: Duration::from_secs(10),
        content_type: mcsched_wire::ContentType::Json,
        watch_content_type: mcsched_wire::ContentType::Json,
    };
    let shared = Shared::new(client, profiles, Vec::new(), leaves, &options);
    for n in nodes {
        shared.cache().apply_node(Arc::new(n));
    }
    Cluster {
        shared,
        attempts,
        filtered,
        requests,
    }
}

fn pod(name: &str, cpu: &str, group: Option<&str>) -> Arc<PodInfo> {
    let mut p = json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"schedulerName": "mcsched",
            "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]}
    });
    if let Some(g) = group {
        p["metadata"]["labels"] = json!({"gang": g});
        p["spec"]["schedulingGroup"] = json!({"podGroupName": g});
    }
    let p: Pod = serde_json::from_value(p).expect("pod");
    Arc::new(PodInfo::new(Arc::new(p)))
}

impl Cluster {
    /// PodGroup `g` of `members` members of `cpu` each, a gang of `min_count`, and a
    /// PlacementPolicy keeping it in one domain of `key`; all queued, then `other`.
    fn gang(&self, members: usize, min_count: usize, cpu: &str, key: &str) {
        self.gang_kept(members, min_count, cpu, Kept::ByPolicy(key));
    }

    fn gang_kept(&self, members: usize, min_count: usize, cpu: &str, kept: Kept) {
        let mut group = json!({
            "metadata": {"name": "g", "namespace": "default", "generation": 1},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}
        });
        match kept {
            Kept::ByPolicy(key) => {
                let policy = serde_json::from_value(json!({
                    "metadata": {"name": "keep", "namespace": "default"},
                    "spec": {"podSelector": {"matchLabels": {"gang": "g"}},
                             "podGroupConstraints": {"topology": [{"key": key}]}}
                }))
                .expect("policy");
                let mut set = PolicySet::default();
                set.apply_namespaced(Change::Apply(Arc::new(policy), false));
                self.shared.cache().set_policies(Arc::new(set));
            }
            Kept::ByItself(key) => {
                group["spec"]["schedulingConstraints"] = json!({"topology": [{"key": key}]});
                self.shared.profiles.pod_groups.set_topology_aware(true);
            }
        }
        let group: PodGroup = serde_json::from_value(group).expect("group");
        let groups = &self.shared.profiles.pod_groups;
        groups.set_served(Some(PodGroupVersion::V1beta1));
        groups.set_group(&group);
        for i in 0..members {
            let member = pod(&format!("m-{i:04}"), cpu, Some("g"));
            self.shared.profiles.pod_groups.add_pod(member.clone());
            self.shared.queue.add(member, None);
        }
        self.shared.queue.add(pod("other", "1", None), None);
    }

    /// What the loop does: the gang's cycle, then the next pod's, which must be `other`
    /// and be placed. The member attempts the gang made.
    async fn gang_then_other(&self) -> usize {
        let shared = &self.shared;
        let (_tx, leader) = tokio::sync::watch::channel(true);
        let bindings = Arc::new(Semaphore::new(16));
        let first = shared.queue.pop().await.expect("a member queued");
        let key = group_to_schedule(shared, &first).expect("a member of g");
        pod_group_cycle(shared, &bindings, &leader, first, key).await;
        let attempts = self.attempts.attempts.load(Ordering::Relaxed);
        assert!(shared.queue.pending().active >= 1, "other is queued");
        let next = shared.queue.pop().await.expect("other queued");
        assert_eq!(next.pod.name, "other");
        let placed = scheduling_cycle(shared, &leader, next).await;
        assert!(placed.is_some(), "other is placed right after the gang");
        attempts
    }

    /// The PodGroupInitiallyScheduled condition the cycle wrote last: (status, reason,
    /// message).
    fn condition(&self) -> (String, String, String) {
        let patches = fake_api::sent(
            &self.requests,
            "PATCH",
            "/namespaces/default/podgroups/g/status",
        );
        let last = patches.last().expect("PodGroup status patched");
        let c = &last["status"]["conditions"][0];
        assert_eq!(c["type"], "PodGroupInitiallyScheduled");
        let s = |f: &str| c[f].as_str().unwrap_or_default().to_string();
        (s("status"), s("reason"), s("message"))
    }

    /// The zone of every member the cache holds placed.
    fn zones_placed(&self) -> BTreeMap<String, usize> {
        let cache = self.shared.cache();
        let mut zones = BTreeMap::new();
        for p in cache.assumed_pods() {
            if p.name == "other" {
                continue;
            }
            let node = cache.node_of(&p.key).expect("assumed on a node");
            let zone = cache
                .labels_of_node(node)
                .and_then(|l| l.get(ZONE).cloned());
            *zones.entry(zone.unwrap_or_default()).or_default() += 1;
        }
        zones
    }
}

const ZONE: &str = "topology.kubernetes.io/zone";
const HOSTNAME: &str = "kubernetes.io/hostname";

/// What keeps the gang in one domain of a key.
enum Kept<'a> {
    /// A PlacementPolicy's `podGroupConstraints`, without the gate.
    ByPolicy(&'a str),
    /// The PodGroup's own `schedulingConstraints`, under TopologyAwareWorkloadScheduling.
    ByItself(&'a str),
}

/// 1000 nodes of 4 cpu in zones a to d, 250 each.
fn thousand_nodes() -> impl Iterator<Item = Node> {
    (0..1000).map(|i| {
        let zone = ["a", "b", "c", "d"][i % 4];
        node(
            &format!("n{i:04}"),
            4,
            json!({ZONE: format!("zone-{zone}")}),
        )
    })
}

/// A gang of 500 kept on one node of 1000 asks for 500 000 member attempts in the loop
/// every other pod waits behind; it is refused before any, with the policy's field named,
/// and the pod behind it is scheduled next. With minCount 1 no domain can be cut short
/// (each places 4 and may still have quorum), so only the cap bounds the search.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_of_500_kept_per_hostname_on_1000_nodes_is_refused_without_a_simulation() {
    for min_count in [500, 1] {
        let c = cluster(thousand_nodes(), MAX_PLACEMENT_ATTEMPTS + 1);
        c.gang(500, min_count, "1", HOSTNAME);
        let attempts = c.gang_then_other().await;
        assert_eq!(attempts, 0, "minCount {min_count}: member attempts");
        assert_eq!(
            c.shared.queue.pending().unschedulable,
            500,
            "minCount {min_count}: every member waits"
        );
        let (status, reason, message) = c.condition();
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "Unschedulable")
        );
        assert_eq!(
            message,
            "pod group is unschedulable: its placement search would try 500 members in each of \
             1000 domains of \"kubernetes.io/hostname\" (PlacementPolicy default/keep \
             spec.podGroupConstraints.topology[0].key), 500000 attempts, more than the 10000 \
             allowed"
        );
    }
}

/// The PodGroup's own constraint, under the gate, is held to the same cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_of_500_keeping_itself_per_hostname_on_1000_nodes_is_refused_as_well() {
    let c = cluster(thousand_nodes(), MAX_PLACEMENT_ATTEMPTS + 1);
    c.gang_kept(500, 500, "1", Kept::ByItself(HOSTNAME));
    assert_eq!(c.gang_then_other().await, 0, "member attempts");
    let (status, reason, message) = c.condition();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "Unschedulable")
    );
    assert_eq!(
        message,
        "pod group is unschedulable: its placement search would try 500 members in each of \
         1000 domains of \"kubernetes.io/hostname\" (PodGroup default/g \
         spec.schedulingConstraints.topology[0].key), 500000 attempts, more than the 10000 \
         allowed"
    );
}

/// Within the cap the search runs: 500 members in each of 4 zones of 250 nodes, at most
/// 2000 attempts, the gang placed whole in one zone, and the pod behind it next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_of_500_kept_in_one_of_4_zones_of_1000_nodes_is_searched_within_the_cap() {
    let c = cluster(thousand_nodes(), MAX_PLACEMENT_ATTEMPTS + 1);
    c.gang(500, 500, "1", ZONE);
    let attempts = c.gang_then_other().await;
    assert_eq!(attempts, 4 * 500, "member attempts");
    let zones = c.zones_placed();
    assert_eq!(
        zones.values().copied().collect::<Vec<_>>(),
        [500],
        "{zones:?}"
    );
    let (status, reason, _) = c.condition();
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Scheduled"));
}

/// A gang that fits in no domain (10 members, a node holds 2) is tried in each of 200
/// domains only until minCount is out of reach (kube v1.37's PlacementFeasible): 2 fit,
/// the 3rd does not, and 2 + 7 left < 10. The group is told about the first domain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_that_fits_in_no_domain_stops_in_each_once_min_count_is_out_of_reach() {
    let nodes = (0..200).map(|i| node(&format!("n{i:04}"), 4, json!({})));
    let c = cluster(nodes, MAX_PLACEMENT_ATTEMPTS + 1);
    c.gang(10, 10, "2", HOSTNAME);
    let attempts = c.gang_then_other().await;
    assert_eq!(attempts, 200 * 3);
    let (status, _, message) = c.condition();
    assert_eq!(status, "False");
    assert_eq!(
        message,
        "pod group is unschedulable, 0/200 placements are available, first placement status: \
         minCount (10) cannot be satisfied: 2 scheduled, 7 remaining, pod group preemption: \
         No preemption victims found for incoming preemptor"
    );
    assert_eq!(c.shared.queue.pending().unschedulable, 10);
}

/// Every domain where the gang is feasible is simulated whole (v1.37 stops only where
/// minCount is out of reach), and PlacementScore chooses: zone-a places 3 of 6, zone-b all
/// 6, zone-c 4; PodGroupPodsCount (50, 100, 66) and NodeResourcesFit's MostAllocated
/// (each zone full: 50) make zone-b's the best.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_placement_scoring_best_is_chosen_among_the_feasible() {
    let nodes = [("na", 3, "a"), ("nb", 6, "b"), ("nc", 4, "c")]
        .map(|(name, cpu, zone)| node(name, cpu, json!({ZONE: format!("zone-{zone}")})));
    let c = cluster(nodes, MAX_PLACEMENT_ATTEMPTS + 1);
    c.gang(6, 3, "1", ZONE);
    let attempts = c.gang_then_other().await;
    assert_eq!(attempts, 6 + 6 + 6);
    let zones: BTreeSet<String> = c.zones_placed().into_keys().collect();
    assert_eq!(zones, BTreeSet::from(["zone-b".to_string()]));
    assert_eq!(c.zones_placed()["zone-b"], 6);
}

/// Not an assertion: how long the gang's cycle holds the loop, for docs/gangs.md. Run
/// `cargo test --release -p mcsched-agent --lib placement_search_measured -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run in release"]
async fn placement_search_measured() {
    let cases: [(&str, usize, usize, &str, &str); 3] = [
        // The cap's worst case: no domain can be cut short.
        ("10 per hostname", 10, 1, "2", HOSTNAME),
        ("500 in one of 4 zones", 500, 500, "1", ZONE),
        ("500 per hostname (refused)", 500, 500, "1", HOSTNAME),
    ];
    for (name, members, min_count, cpu, key) in cases {
        let c = cluster(thousand_nodes(), MAX_PLACEMENT_ATTEMPTS + 1);
        c.gang(members, min_count, cpu, key);
        let started = std::time::Instant::now();
        let attempts = c.gang_then_other().await;
        let elapsed = started.elapsed();
        let per = elapsed.as_secs_f64() * 1e6 / attempts.max(1) as f64;
        println!(
            "{name} on 1000 nodes: {attempts} member attempts, {} nodes filtered, the gang's \
             cycle and the next pod's {elapsed:.2?} ({per:.0} µs an attempt)",
            c.filtered.nodes.load(Ordering::Relaxed)
        );
    }
}

/// A pod of `cpu`, of group `g` when `group`, `extra` merged into it (priority,
/// preemptionPolicy, nodeName, status...).
fn pod_with(name: &str, cpu: &str, group: bool, extra: Value) -> Arc<PodInfo> {
    let mut p = json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"schedulerName": "mcsched",
            "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]}
    });
    if group {
        p["metadata"]["labels"] = json!({"gang": "g"});
        p["spec"]["schedulingGroup"] = json!({"podGroupName": "g"});
    }
    let p: Pod = serde_json::from_value(fake_api::merged(p, extra)).expect("pod");
    Arc::new(PodInfo::new(Arc::new(p)))
}

/// A member's last PodScheduled=False write: (reason, message, nominatedNodeName as sent).
type Written = (String, String, Value);

impl Cluster {
    /// PodGroup `g` (uid `uid-g`) with `spec`, and `members` members of `cpu`, each with
    /// `extra`, queued.
    fn group(&self, spec: Value, members: usize, cpu: &str, extra: Value) {
        let group: PodGroup = serde_json::from_value(json!({
            "metadata": {"name": "g", "namespace": "default", "uid": "uid-g", "generation": 1},
            "spec": spec
        }))
        .expect("group");
        let groups = &self.shared.profiles.pod_groups;
        groups.set_served(Some(PodGroupVersion::V1beta1));
        groups.set_group(&group);
        for i in 0..members {
            let member = pod_with(&format!("m-{i:04}"), cpu, true, extra.clone());
            groups.add_pod(member.clone());
            self.shared.queue.add(member, None);
        }
    }

    /// A pod bound to `node` in the cache.
    fn bound(&self, name: &str, node: &str, cpu: &str, extra: Value) {
        let pod = pod_with(
            name,
            cpu,
            false,
            fake_api::merged(json!({"spec": {"nodeName": node}}), extra),
        );
        self.shared.cache().apply_pod(pod.pod());
    }

    /// The group's cycle, started by the first member queued.
    async fn cycle(&self) {
        let shared = &self.shared;
        let (_tx, leader) = tokio::sync::watch::channel(true);
        let bindings = Arc::new(Semaphore::new(16));
        let first = shared.queue.pop().await.expect("a member queued");
        let key = group_to_schedule(shared, &first).expect("a member of g");
        pod_group_cycle(shared, &bindings, &leader, first, key).await;
    }

    /// The last PodScheduled=False write of each of the first `members` members, once
    /// every one has one (the status writer runs on its own task).
    async fn written(&self, members: usize) -> Vec<Written> {
        for _ in 0..100 {
            let found: Vec<Option<Written>> = (0..members)
                .map(|i| {
                    let path = format!("/namespaces/default/pods/m-{i:04}/status");
                    let last = fake_api::sent(&self.requests, "PATCH", &path).pop()?;
                    let c = &last["status"]["conditions"][0];
                    let s = |f: &str| c[f].as_str().unwrap_or_default().to_string();
                    Some((
                        s("reason"),
                        s("message"),
                        last["status"]["nominatedNodeName"].clone(),
                    ))
                })
                .collect();
            if found.iter().all(Option::is_some) {
                return found.into_iter().flatten().collect();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("not every member's status was written");
    }

    /// How many requests matching `method` and ending in `suffix` were made.
    fn count(&self, method: &str, suffix: &str) -> usize {
        fake_api::sent(&self.requests, method, suffix).len()
    }
}

/// The messages of members, sorted.
fn messages(written: &[Written]) -> Vec<&str> {
    let mut m: Vec<&str> = written.iter().map(|(_, m, _)| m.as_str()).collect();
    m.sort_unstable();
    m
}

/// Case c8 of the side-by-side test with kube-scheduler v1.37: a gang of minCount 5 of 6
/// members on a node that holds 3. The members are tried until minCount is out of reach
/// (3 placed, 2 do not fit, 1 left: 4 < 5), the 6th not at all; no member runs
/// PostFilter; the group's PodGroupPostFilter finds no victims. Kube's messages word for
/// word, over every node and by placements (TopologyAwareWorkloadScheduling).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_short_of_min_count_tells_its_members_what_kube_does() {
    for by_placements in [false, true] {
        let c = cluster([node("n1", 3, json!({}))], MAX_PLACEMENT_ATTEMPTS + 1);
        c.shared
            .profiles
            .pod_groups
            .set_topology_aware(by_placements);
        c.group(
            json!({"schedulingPolicy": {"gang": {"minCount": 5}}}),
            6,
            "1",
            json!({}),
        );
        c.cycle().await;
        assert_eq!(
            c.attempts.attempts.load(Ordering::Relaxed),
            5,
            "the 6th is not tried"
        );
        let status = "minCount (5) cannot be satisfied: 3 scheduled, 1 remaining";
        let group = if by_placements {
            format!(
                "pod group is unschedulable, 0/1 placements are available, first placement \
                 status: {status}"
            )
        } else {
            status.to_string()
        };
        let preemption = "pod group preemption: No preemption victims found for incoming preemptor";
        let (s, reason, message) = c.condition();
        assert_eq!((s.as_str(), reason.as_str()), ("False", "Unschedulable"));
        assert_eq!(message, format!("{group}, {preemption}"));
        let written = c.written(6).await;
        let placed = format!("pod group is unschedulable, {group}, {preemption}");
        let fit = "0/1 nodes are available: 1 Insufficient cpu.";
        let mut want = vec![placed.as_str(); 3];
        want.extend([fit, fit, group.as_str()]);
        want.sort_unstable();
        assert_eq!(messages(&written), want, "by placements: {by_placements}");
        assert!(written.iter().all(|(r, _, _)| r == "Unschedulable"));
        assert_eq!(c.shared.queue.pending().unschedulable, 6);
        assert_eq!(c.count("DELETE", ""), 0);
    }
}

/// Case c2: minCount 4 of 5 on a node that holds 4. The group is feasible once 4 are
/// placed; the 5th is tried (minCount met, the rest are too) and does not fit; the four
/// pass Permit together and are bound. The 5th's message is its FitError alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_that_meets_min_count_binds_whatever_fits() {
    let c = cluster([node("n1", 4, json!({}))], MAX_PLACEMENT_ATTEMPTS + 1);
    c.shared.profiles.pod_groups.set_topology_aware(true);
    c.group(
        json!({"schedulingPolicy": {"gang": {"minCount": 4}}}),
        5,
        "1",
        json!({}),
    );
    c.cycle().await;
    assert_eq!(c.attempts.attempts.load(Ordering::Relaxed), 5);
    assert_eq!(
        c.condition(),
        ("True".into(), "Scheduled".into(), String::new())
    );
    let path = "/namespaces/default/pods/m-0004/status";
    // The bindings and the 5th's status are sent by tasks of their own.
    for _ in 0..250 {
        if c.count("POST", "/binding") == 4
            && !fake_api::sent(&c.requests, "PATCH", path).is_empty()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(c.count("POST", "/binding"), 4);
    let last = fake_api::sent(&c.requests, "PATCH", path)
        .pop()
        .expect("m-0004 told");
    assert_eq!(
        last["status"]["conditions"][0]["message"],
        "0/1 nodes are available: 1 Insufficient cpu."
    );
}

/// Pod group preemption (v1.37's PodGroupPostFilter): a gang of 2 (priority 100) on a node
/// full of lower-priority pods. All of them out, both members fit; put back the most
/// important first, the one of priority 50 (2 cpu) leaves room for both, each of the two
/// of priority 0 does not: they are evicted, marked as preempted by the pod group, and
/// the members wait, nominated to the node, the group saying how many it preempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_group_preemption_evicts_the_victims_the_group_needs_gone() {
    let c = cluster([node("n1", 4, json!({}))], MAX_PLACEMENT_ATTEMPTS + 1);
    c.bound("v-high", "n1", "2", json!({"spec": {"priority": 50}}));
    c.bound("v-a", "n1", "1", json!({}));
    c.bound("v-b", "n1", "1", json!({}));
    c.group(
        json!({"priority": 100, "schedulingPolicy": {"gang": {"minCount": 2}}}),
        2,
        "1",
        json!({"spec": {"priority": 100}}),
    );
    c.cycle().await;
    let group = "minCount (2) cannot be satisfied: 0 scheduled, 1 remaining";
    let (s, reason, message) = c.condition();
    assert_eq!((s.as_str(), reason.as_str()), ("False", "Unschedulable"));
    assert_eq!(
        message,
        format!(
            "{group}, pod group preemption: found a placement for podgroup, preempting 2 victims"
        )
    );
    let written = c.written(2).await;
    assert_eq!(
        messages(&written),
        ["0/1 nodes are available: 1 Insufficient cpu.", group]
    );
    assert!(
        written.iter().all(|(_, _, nominated)| nominated == "n1"),
        "{written:?}"
    );
    for _ in 0..100 {
        if c.count("DELETE", "/pods/v-a") + c.count("DELETE", "/pods/v-b") == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(c.count("DELETE", "/pods/v-a"), 1);
    assert_eq!(c.count("DELETE", "/pods/v-b"), 1);
    assert_eq!(c.count("DELETE", "/pods/v-high"), 0, "reprieved");
    let marked = fake_api::sent(&c.requests, "PATCH", "/pods/v-a/status");
    assert_eq!(
        marked[0]["status"]["conditions"][0]["message"],
        "mcsched: preempting to accommodate a higher priority podgroup"
    );
    assert_eq!(c.count("POST", "/binding"), 0);
}

/// A profile without DefaultPreemption at podGroupPostFilter (config v1's
/// `plugins.podGroupPostFilter.disabled`) does not preempt for pod groups, though its
/// DefaultPreemption still runs at PostFilter: the group stays Unschedulable, nothing is
/// evicted, no member is nominated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_without_pod_group_post_filter_does_not_preempt_for_groups() {
    let text = "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: mcsched
  plugins:
    podGroupPostFilter:
      disabled:
      - name: DefaultPreemption
";
    let cfg = mcsched_shared::config::load(text).expect("config");
    let spec = mcsched_engine::config_bridge::profile_spec_of(&cfg.profiles[0]);
    let c = cluster_with([node("n1", 4, json!({}))], MAX_PLACEMENT_ATTEMPTS + 1, spec);
    c.bound("v-high", "n1", "2", json!({"spec": {"priority": 50}}));
    c.bound("v-a", "n1", "1", json!({}));
    c.bound("v-b", "n1", "1", json!({}));
    c.group(
        json!({"priority": 100, "schedulingPolicy": {"gang": {"minCount": 2}}}),
        2,
        "1",
        json!({"spec": {"priority": 100}}),
    );
    c.cycle().await;
    let (s, reason, message) = c.condition();
    assert_eq!((s.as_str(), reason.as_str()), ("False", "Unschedulable"));
    // DynamicResources' verdict has no reason, and kube appends it all the same
    // (applyPodGroupPostFilterResult's AppendReason of an empty status message).
    assert_eq!(
        message,
        "minCount (2) cannot be satisfied: 0 scheduled, 1 remaining, "
    );
    let written = c.written(2).await;
    assert!(written.iter().all(|(_, _, n)| n.is_null()), "{written:?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(c.count("DELETE", ""), 0);
}

/// While the victims of an earlier preemption terminate on a member's nominated node, the
/// group waits for them (kube's isOngoingPreemption): nothing more is evicted, the
/// nominations stand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_waits_for_its_preemption_to_finish() {
    let c = cluster([node("n1", 2, json!({}))], MAX_PLACEMENT_ATTEMPTS + 1);
    c.bound(
        "going",
        "n1",
        "2",
        json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
               "status": {"conditions": [{"type": "DisruptionTarget", "status": "True",
                                          "reason": "PreemptionByScheduler"}]}}),
    );
    c.group(
        json!({"priority": 100, "schedulingPolicy": {"gang": {"minCount": 2}}}),
        2,
        "1",
        json!({"spec": {"priority": 100}, "status": {"nominatedNodeName": "n1"}}),
    );
    c.cycle().await;
    let (_, _, message) = c.condition();
    assert!(
        message.ends_with(", pod group preemption: ongoing preemption on nominated nodes"),
        "{message}"
    );
    let written = c.written(2).await;
    assert!(written.iter().all(|(_, _, n)| n.is_null()), "{written:?}");
    assert_eq!(c.count("DELETE", ""), 0);
}

/// A group whose members may not preempt (preemptionPolicy Never) is not eligible.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_that_never_preempts_is_not_eligible() {
    let c = cluster([node("n1", 2, json!({}))], MAX_PLACEMENT_ATTEMPTS + 1);
    c.bound("low", "n1", "2", json!({}));
    c.group(
        json!({"priority": 100, "schedulingPolicy": {"gang": {"minCount": 2}}}),
        2,
        "1",
        json!({"spec": {"priority": 100, "preemptionPolicy": "Never"}}),
    );
    c.cycle().await;
    let (_, _, message) = c.condition();
    assert_eq!(
        message,
        "minCount (2) cannot be satisfied: 0 scheduled, 1 remaining, pod group preemption: \
         not eligible due to preemptionPolicy=Never."
    );
    assert_eq!(c.count("DELETE", ""), 0);
}

/// kube's validatePodGroup (#140183): members of another profile, or of another priority
/// than the group's, fail it before anything is tried, as errors, and the PodGroup's
/// condition says why (SchedulerError).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_that_break_the_group_rules_fail_it_with_kubes_error() {
    let gang = json!({"schedulingPolicy": {"gang": {"minCount": 2}}});
    let cases = [
        (
            json!({"spec": {"priority": 10}}),
            "all pods in a single pod group should have the same priority as the pod group's \
             priority, got 10 and 0",
        ),
        (
            json!({"spec": {"preemptionPolicy": "Never"}}),
            "all pods in a single pod group should have the same preemption policy, got \
             PreemptLowerPriority and Never",
        ),
    ];
    for (odd, want) in cases {
        let c = cluster([node("n1", 4, json!({}))], MAX_PLACEMENT_ATTEMPTS + 1);
        c.group(gang.clone(), 1, "1", odd);
        let other = pod_with("m-0001", "1", true, json!({}));
        c.shared.profiles.pod_groups.add_pod(other.clone());
        c.shared.queue.add(other, None);
        c.cycle().await;
        assert_eq!(c.attempts.attempts.load(Ordering::Relaxed), 0);
        assert_eq!(
            c.condition(),
            ("False".into(), "SchedulerError".into(), want.to_string())
        );
        let written = c.written(2).await;
        assert!(
            written
                .iter()
                .all(|(r, m, _)| r == "SchedulerError" && m == want),
            "{written:?}"
        );
        assert_eq!(c.shared.queue.pending().backoff, 2);
    }
}
