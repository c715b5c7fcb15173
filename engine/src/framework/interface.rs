//! The extension points, after kube-scheduler's `framework/interface.go`. Plugins are pure
//! over the snapshot and the pod, except PreBind and Bind, which talk to the API server.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;

use super::{CycleState, Framework, Status};
use crate::snapshot::{NodeInfo, NodeList, PodInfo, Snapshot};

/// What the API-facing extension points may use.
#[derive(Clone)]
pub struct BindContext {
    pub client: kube::Client,
    /// The encoding bindings are posted in.
    pub content_type: mcsched_wire::ContentType,
}

/// A pod waiting in the scheduling queue.
#[derive(Debug, Clone)]
pub struct QueuedPodInfo {
    pub pod: Arc<PodInfo>,
    /// When the pod was (re)added to the queue.
    pub(crate) timestamp: Instant,
    pub initial_attempt: Option<Instant>,
    pub attempts: u32,
    /// Why it waits, while it waits after a rejection or at PreEnqueue.
    pub rejection: Option<Rejection>,
}

impl QueuedPodInfo {
    /// When the pod was (re)added to the queue (kube's `QueuedPodInfo.Timestamp`): pod
    /// group members are tried in its order after priority and attempts.
    pub fn timestamp(&self) -> Instant {
        self.timestamp
    }
}

/// The plugins that rejected a pod in its last attempt, or hold it back at PreEnqueue,
/// and its profile: what `scheduler_unschedulable_pods` counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub profile: String,
    pub plugins: Vec<&'static str>,
}

/// The kinds of cluster change that may make an unschedulable pod schedulable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClusterEvent {
    NodeAdd,
    NodeUpdate,
    PodAdd,
    PodUpdate,
    PodDelete,
    PvcChange,
    PvChange,
    StorageClassChange,
    CsiNodeChange,
    CsiDriverChange,
    StorageCapacityChange,
    NamespaceChange,
    /// A leaf cluster changed (its nodes, pods or storage), or one connected.
    LeafChange,
    /// A PlacementPolicy or ClusterPlacementPolicy changed.
    PolicyChange,
    /// A PodGroup appeared (its spec is immutable).
    PodGroupAdd,
    /// A ResourceClaim was added, changed or deleted.
    ResourceClaimChange,
    /// A ResourceSlice was added or changed (one deleted frees no device).
    ResourceSliceChange,
    /// A DeviceClass was added or changed.
    DeviceClassChange,
}

/// The pods nominated to each node by preemption, waiting for the room made for them
/// (kube's `PodNominator`): Filter counts them on their node for pods of lower or equal
/// priority. Nodes without nominated pods are absent.
pub(crate) type NominatedPods = std::collections::HashMap<String, Vec<Arc<PodInfo>>>;

/// A node's preemption victims and how many PodDisruptionBudgets evicting them breaks
/// (kube's `extenderv1.Victims`).
#[derive(Debug, Clone, Default)]
pub struct Victims {
    pub pods: Vec<Arc<PodInfo>>,
    pub pdb_violations: usize,
}

/// A scheduler extender's preempt verb as preemption calls it (kube's
/// `Extender.ProcessPreemption`): it may drop candidate nodes or change their victims.
pub trait PreemptionExtender: Send + Sync {
    fn name(&self) -> String;
    fn supports_preemption(&self) -> bool;
    fn is_interested(&self, pod: &PodInfo) -> bool;
    /// Its errors skip it instead of failing preemption.
    fn is_ignorable(&self) -> bool;
    /// Blocks until the extender answers: preemption runs on a blocking thread. The
    /// victims it names are looked up on the nodes of `snapshot`.
    fn process_preemption(
        &self,
        pod: &PodInfo,
        victims: &std::collections::BTreeMap<String, Victims>,
        snapshot: &Snapshot,
    ) -> Result<std::collections::BTreeMap<String, Victims>, PreemptionExtenderError>;
}

/// Why an extender's preempt verb failed, in the extender's own error type.
pub type PreemptionExtenderError = Box<dyn std::error::Error + Send + Sync>;

/// Where the framework reads nominations; the scheduling queue's side keeps them.
pub(crate) trait PodNominator: Send + Sync {
    /// Every current nomination, as one consistent view.
    fn nominated_pods(&self) -> Arc<NominatedPods>;
}

/// No nominations: a framework used without a queue (what-if tools, tests).
pub(crate) struct NoNominations;

impl PodNominator for NoNominations {
    fn nominated_pods(&self) -> Arc<NominatedPods> {
        Arc::default()
    }
}

/// What a plugin may use of its profile's framework, given once the framework is built
/// (kube's `framework.Handle`, which kube passes to plugin factories).
#[derive(Clone)]
pub struct Handle {
    pub(super) waiting_pods: Arc<super::waiting_pods::WaitingPods>,
}

impl Handle {
    pub fn get_waiting_pod(&self, uid: &str) -> Option<Arc<super::WaitingPod>> {
        self.waiting_pods.get(uid)
    }

    pub fn iterate_over_waiting_pods(&self, mut f: impl FnMut(&super::WaitingPod)) {
        for wp in self.waiting_pods.list() {
            f(&wp);
        }
    }

    /// Rejects a waiting pod as removed; false when it was not waiting.
    pub fn reject_waiting_pod(&self, uid: &str) -> bool {
        self.waiting_pods.reject(uid)
    }
}

#[cfg(test)]
impl Handle {
    /// A handle of no framework, for plugins' unit tests.
    pub(crate) fn for_test() -> Self {
        Handle {
            waiting_pods: Arc::default(),
        }
    }

    /// Parks `pod`, assumed on `node`, as waiting for `plugin` to allow it.
    pub(crate) fn park_for_test(&self, pod: Arc<PodInfo>, node: &str, plugin: &'static str) {
        self.waiting_pods
            .add(pod, node, &[(plugin, Duration::from_secs(60))]);
    }
}

pub trait Plugin: Send + Sync {
    fn name(&self) -> &'static str;

    /// Called once the profile's framework exists, for plugins that act on it later
    /// (e.g. a Permit plugin allowing the pods it made wait).
    fn set_handle(&self, _handle: &Handle) {}

    /// Cluster changes after which pods this plugin rejected are worth retrying.
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        Vec::new()
    }

    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        None
    }
    fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        None
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        None
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        None
    }
    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        None
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        None
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        None
    }
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        None
    }
    fn as_permit(&self) -> Option<&dyn PermitPlugin> {
        None
    }
    fn as_pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        None
    }
    fn as_bind(&self) -> Option<&dyn BindPlugin> {
        None
    }
    fn as_post_bind(&self) -> Option<&dyn PostBindPlugin> {
        None
    }
    fn as_placement_feasible(&self) -> Option<&dyn PlacementFeasiblePlugin> {
        None
    }
    fn as_placement_score(&self) -> Option<&dyn PlacementScorePlugin> {
        None
    }
    fn as_placement_generate(&self) -> Option<&dyn PlacementGeneratePlugin> {
        None
    }
    fn as_pod_group_post_filter(&self) -> Option<&dyn PodGroupPostFilterPlugin> {
        None
    }
}

pub trait PreEnqueuePlugin: Plugin {
    fn pre_enqueue(&self, pod: &Pod) -> Status;
}

pub trait QueueSortPlugin: Plugin {
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool;
}

/// The nodes a PreFilter restricts the cycle to; `None` means all.
pub(crate) type PreFilterResult = Option<HashSet<String>>;

pub trait PreFilterPlugin: Plugin {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status);

    /// Preemption: account for `added` joining `node` in the state PreFilter wrote.
    fn add_pod(
        &self,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _added: &PodInfo,
        _node: &NodeInfo,
    ) -> Status {
        Status::success()
    }

    /// Preemption: account for `removed` leaving `node`.
    fn remove_pod(
        &self,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _removed: &PodInfo,
        _node: &NodeInfo,
    ) -> Status {
        Status::success()
    }
}

pub trait FilterPlugin: Plugin {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status;
}

/// Every node's Filter status of a failed cycle.
pub type NodeStatuses = std::collections::HashMap<String, Status>;

/// A PostFilter's answer: the node to nominate and the pods to evict for it.
#[derive(Debug, Clone, Default)]
pub struct PostFilterResult {
    pub nominated_node: Option<String>,
    /// No node is nominated and an earlier nomination no longer holds (kube's
    /// `NewPostFilterResultWithNominatedNode("")`): the pod's nominatedNodeName is cleared.
    pub clears_nomination: bool,
    /// Lower-priority pods nominated to the nominated node, whose nominations preemption
    /// clears: they may no longer fit there.
    pub lower_nominated: Vec<Arc<PodInfo>>,
    pub victims: Vec<Arc<PodInfo>>,
    /// How many of the victims' PodDisruptionBudgets evicting them breaks.
    pub pdb_violations: usize,
}

pub trait PostFilterPlugin: Plugin {
    fn post_filter(
        &self,
        framework: &Framework,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        statuses: &NodeStatuses,
    ) -> (PostFilterResult, Status);
}

pub trait PreScorePlugin: Plugin {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &NodeList,
        snapshot: &Snapshot,
    ) -> Status;
}

pub const MAX_NODE_SCORE: i64 = 100;
pub(crate) const MIN_NODE_SCORE: i64 = 0;

pub trait ScorePlugin: Plugin {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status>;

    /// Scales this plugin's raw scores into 0..=100, in place, in node order.
    fn normalize(&self, _state: &CycleState, _pod: &PodInfo, _scores: &mut [i64]) -> Status {
        Status::success()
    }

    /// Whether this plugin's input lives on the node the pod runs on (kube's plugins: its
    /// resources, images, taints, labels, pods), so that a node standing for others (see
    /// [`super::Members`]) is scored as its best member; false when it lives on the
    /// standing node itself (a cluster's weight, cost or tier).
    fn scores_members(&self) -> bool {
        true
    }
}

pub trait ReservePlugin: Plugin {
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status;
    fn unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str);
}

pub trait PermitPlugin: Plugin {
    fn permit(&self, state: &CycleState, pod: &PodInfo, node: &str) -> (Status, Duration);
}

pub trait PreBindPlugin: Plugin {
    fn pre_bind<'a>(
        &'a self,
        ctx: &'a BindContext,
        state: &'a CycleState,
        pod: &'a PodInfo,
        node: &'a str,
    ) -> BoxFuture<'a, Status>;
}

pub trait BindPlugin: Plugin {
    /// Returns Skip to let the next Bind plugin do it.
    fn bind<'a>(
        &'a self,
        ctx: &'a BindContext,
        state: &'a CycleState,
        pod: &'a PodInfo,
        node: &'a str,
    ) -> BoxFuture<'a, Status>;
}

pub trait PostBindPlugin: Plugin {
    fn post_bind(&self, state: &CycleState, pod: &PodInfo, node: &str);
}

/// How far a pod group's algorithm got in one placement (kube's `PlacementProgress`): its
/// members not tried yet, and those scheduled (bound, assumed, or placed in this
/// placement so far).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PlacementProgress {
    pub remaining: usize,
    pub scheduled: usize,
}

/// kube's PlacementFeasible extension point (v1.37): whether a pod group can still meet
/// its constraints in the placement being tried. Success: met; Wait: not yet, more
/// members may meet them; Unschedulable: they cannot be met, whatever the members left do.
pub trait PlacementFeasiblePlugin: Plugin {
    fn placement_feasible(
        &self,
        group: &crate::pod_groups::GroupPolicy,
        progress: PlacementProgress,
    ) -> Status;
}

/// kube's PlacementScore extension point: a score for a placement where the pod group
/// was found feasible, from its nodes and the members proposed there. Scores are used
/// as they are (no plugin here normalizes), times the plugin's weight.
pub trait PlacementScorePlugin: Plugin {
    /// `scheduled`: the group's members bound or assumed before this cycle.
    fn score_placement(
        &self,
        scheduled: usize,
        nodes: &[Arc<NodeInfo>],
        proposed: &[Arc<PodInfo>],
    ) -> i64;

    /// kube's NormalizePlacementScore (PlacementScoreExtensions), over one score per
    /// placement; Err: why it cannot.
    fn normalize_placement_scores(&self, _scores: &mut [i64]) -> Result<(), String> {
        Ok(())
    }
}

/// kube's PlacementGenerate extension point (v1.37, at most one per profile): the
/// placements a pod group is tried in. `domains`: the values of the group's topology key
/// it may be placed in (only the one its scheduled members are in, when it has some), or
/// None when it has no key. Each placement is a domain, or None for every node.
pub trait PlacementGeneratePlugin: Plugin {
    fn generate_placements(
        &self,
        domains: Option<&std::collections::BTreeSet<String>>,
    ) -> Result<Vec<Option<String>>, Status>;
}

/// What a PodGroupPostFilter plugin does for a pod group that did not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodGroupRelief {
    /// Pod group preemption: evict lower-priority pods to make room for the whole group
    /// (the scheduler runs the evaluation, which needs the API to evict).
    Preemption,
    /// Nothing this plugin holds can be released: Unschedulable with no reason.
    Nothing,
}

/// kube's PodGroupPostFilter extension point (v1.37): run in order when the group is
/// Unschedulable, the first success or UnschedulableAndUnresolvable ends it.
pub trait PodGroupPostFilterPlugin: Plugin {
    fn relief(&self) -> PodGroupRelief;
}
