//! The pod group cycle's placement search against an in-memory API (see `fake_api`): how
//! much it simulates, and that the pod queued behind a gang is scheduled once it is done.
//! The work is counted, not timed: NodeAffinity, the first PreFilter plugin, is wrapped
//! to count its PreFilter calls (one per member attempt), and panics past a budget so
//! that a search that is not bounded fails at once rather than run for hours;
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
    let (client, _, requests) = fake_api::recording(|method, path, _| {
        if method == "POST" && path.ends_with("/binding") {
            (201, json!({}))
        } else {
            (200, json!({}))
        }
    });
    let spec = mcsched_engine::config_bridge::default_spec("mcsched").expect("default profile");
    let leaves = Arc::new(Leaves::new(Default::default()));
    let groups = mcsched_engine::pod_groups::PodGroups::new();
    let mut registry =
        mcsched_engine::plugins::registry_with(&Default::default(), leaves.clone(), groups.clone());
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

/// A gang that fits in no domain (10 members, a node holds 2) is simulated whole in the
/// first of 200 domains, whose statuses the members report, and in every other only until
/// it cannot reach minCount: 3 attempts (2 fit, 1 does not) instead of 10.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_that_fits_in_no_domain_is_simulated_whole_only_in_the_first() {
    let nodes = (0..200).map(|i| node(&format!("n{i:04}"), 4, json!({})));
    let c = cluster(nodes, MAX_PLACEMENT_ATTEMPTS + 1);
    c.gang(10, 10, "2", HOSTNAME);
    let attempts = c.gang_then_other().await;
    assert_eq!(attempts, 10 + 199 * 3);
    let (status, _, message) = c.condition();
    assert_eq!(status, "False");
    assert_eq!(
        message,
        "0/200 placements are available, first placement status: pod group is unschedulable"
    );
    assert_eq!(c.shared.queue.pending().unschedulable, 10);
}

/// Cutting a domain short never changes the one chosen: zone-a places 3 of 6 (quorum),
/// zone-b all 6, zone-c 4; zone-c stops once it cannot reach 6, and zone-b is chosen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_domain_cut_short_could_not_have_been_chosen() {
    let nodes = [("na", 3, "a"), ("nb", 6, "b"), ("nc", 4, "c")]
        .map(|(name, cpu, zone)| node(name, cpu, json!({ZONE: format!("zone-{zone}")})));
    let c = cluster(nodes, MAX_PLACEMENT_ATTEMPTS + 1);
    c.gang(6, 3, "1", ZONE);
    let attempts = c.gang_then_other().await;
    // zone-a and zone-b whole; zone-c: 4 fit, the 5th does not, and 4 + 1 left < 6.
    assert_eq!(attempts, 6 + 6 + 5);
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
