//! The plugins mcsched implements and their extension points, and kube-scheduler's
//! default plugin sets per configuration version.

/// Extension points, in the order a cycle runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Point {
    PreEnqueue,
    QueueSort,
    PreFilter,
    Filter,
    PostFilter,
    PreScore,
    Score,
    Reserve,
    Permit,
    PreBind,
    Bind,
    PostBind,
    /// The pod group cycle's (v1 only, as kube-scheduler v1.37's config).
    PlacementGenerate,
    PlacementScore,
    PodGroupPostFilter,
}

impl Point {
    pub const ALL: [Point; 15] = [
        Point::PreEnqueue,
        Point::QueueSort,
        Point::PreFilter,
        Point::Filter,
        Point::PostFilter,
        Point::PreScore,
        Point::Score,
        Point::Reserve,
        Point::Permit,
        Point::PreBind,
        Point::Bind,
        Point::PostBind,
        Point::PlacementGenerate,
        Point::PlacementScore,
        Point::PodGroupPostFilter,
    ];

    /// The field name in `profiles[].plugins`.
    pub(crate) fn field(self) -> &'static str {
        match self {
            Point::PreEnqueue => "preEnqueue",
            Point::QueueSort => "queueSort",
            Point::PreFilter => "preFilter",
            Point::Filter => "filter",
            Point::PostFilter => "postFilter",
            Point::PreScore => "preScore",
            Point::Score => "score",
            Point::Reserve => "reserve",
            Point::Permit => "permit",
            Point::PreBind => "preBind",
            Point::Bind => "bind",
            Point::PostBind => "postBind",
            Point::PlacementGenerate => "placementGenerate",
            Point::PlacementScore => "placementScore",
            Point::PodGroupPostFilter => "podGroupPostFilter",
        }
    }

    /// Whether its plugins carry a weight (kube's getValidScoreWeights: Score and
    /// PlacementScore).
    pub fn weighted(self) -> bool {
        matches!(self, Point::Score | Point::PlacementScore)
    }

    /// The pod group cycle's points, fields of config v1 only.
    pub(crate) fn v1_only(self) -> bool {
        matches!(
            self,
            Point::PlacementGenerate | Point::PlacementScore | Point::PodGroupPostFilter
        )
    }
}

use Point::*;

/// Every plugin mcsched implements, with the extension points it implements. The agent's
/// registry is checked against this table by a unit test.
pub const PLUGINS: &[(&str, &[Point])] = &[
    ("SchedulingGates", &[PreEnqueue]),
    ("PrioritySort", &[QueueSort]),
    ("NodeName", &[Filter]),
    ("NodeUnschedulable", &[Filter]),
    ("TaintToleration", &[Filter, PreScore, Score]),
    ("LeafNodeTaintToleration", &[Filter]),
    // Always on (see [`ALWAYS_ON`]).
    ("LeafNodeFit", &[PreFilter, Filter, Reserve]),
    (
        "LeafNodeVolumeBinding",
        &[PreFilter, Filter, PreScore, Score, Reserve, PreBind],
    ),
    (
        "VolumeBinding",
        &[PreFilter, Filter, PreScore, Score, Reserve, PreBind],
    ),
    ("NodeAffinity", &[PreFilter, Filter, PreScore, Score]),
    ("NodePorts", &[Filter]),
    (
        "NodeResourcesFit",
        &[PreFilter, Filter, Score, PlacementScore],
    ),
    ("VolumeRestrictions", &[PreFilter, Filter]),
    ("NodeVolumeLimits", &[PreFilter, Filter]),
    ("VolumeZone", &[PreFilter, Filter]),
    ("NodeResourcesBalancedAllocation", &[PreScore, Score]),
    ("ImageLocality", &[PreScore, Score]),
    ("PodTopologySpread", &[PreFilter, Filter, PreScore, Score]),
    ("InterPodAffinity", &[PreFilter, Filter, PreScore, Score]),
    (
        "DynamicResources",
        &[
            PreEnqueue,
            PreFilter,
            Filter,
            PostFilter,
            PreScore,
            Score,
            Reserve,
            PreBind,
            PodGroupPostFilter,
        ],
    ),
    ("DefaultPreemption", &[PostFilter, PodGroupPostFilter]),
    ("DefaultBinder", &[Bind]),
    ("NodeDeclaredFeatures", &[PreFilter, Filter]),
    ("GangScheduling", &[PreEnqueue, Permit]),
    // TopologyAwareWorkloadScheduling's (see [`TOPOLOGY_AWARE_MULTI_POINT`]).
    ("TopologyPlacementGenerator", &[PlacementGenerate]),
    ("PodGroupPodsCount", &[PlacementScore]),
    // mcsched's cluster policies: not in any default set, enabled through a profile.
    ("ClusterWeights", &[PreScore, Score]),
    ("ClusterCapacity", &[PreScore, Score]),
    ("ClusterCost", &[Score]),
    ("ClusterTiers", &[Score]),
    // Always on: a pod's PlacementPolicy, if one selects it.
    ("PlacementPolicy", &[PreFilter, Filter, PreScore, Score]),
];

/// mcsched plugins every profile runs, last at each of their extension points, whatever
/// the configuration says: without LeafNodeFit a virtual node would take pods none of its
/// leaf's nodes can run; without PlacementPolicy a workload's policy would hold only under
/// some profiles.
pub(crate) const ALWAYS_ON: &[&str] = &["LeafNodeFit", "PlacementPolicy"];

/// The always-on plugins' Score weight: more than twice every other score plugin's
/// together, so that the half score PlacementPolicy gives a node outweighs everything
/// the other plugins can give (theirs are at most 100 each, times their weight).
pub(crate) fn always_on_score_weight(others: i64) -> i64 {
    2 * others + 1
}

pub(crate) fn points_of(plugin: &str) -> Option<&'static [Point]> {
    PLUGINS.iter().find(|(n, _)| *n == plugin).map(|(_, p)| *p)
}

pub(crate) fn is_known(plugin: &str) -> bool {
    points_of(plugin).is_some()
}

pub(crate) fn implements(plugin: &str, point: Point) -> bool {
    points_of(plugin).is_some_and(|p| p.contains(&point))
}

/// kube-scheduler v1.37's v1/v1beta3 multiPoint defaults with their score weights
/// (pkg/scheduler/apis/config/v1/default_plugins.go: NodeName before NodeUnschedulable),
/// with what its default-on gates add: NodeDeclaredFeatures (GA, locked on) after
/// DefaultBinder, DynamicResources (DynamicResourceAllocation) before DefaultPreemption,
/// and GangScheduling (GenericWorkload) last: it acts only on pods with
/// `spec.schedulingGroup`, which an API server without the GenericWorkload gate drops.
pub(crate) const V1_MULTI_POINT: &[(&str, i32)] = &[
    ("SchedulingGates", 0),
    ("PrioritySort", 0),
    ("NodeName", 0),
    ("NodeUnschedulable", 0),
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodePorts", 0),
    ("NodeResourcesFit", 1),
    ("VolumeRestrictions", 0),
    ("NodeVolumeLimits", 0),
    ("VolumeBinding", 0),
    ("VolumeZone", 0),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("DynamicResources", 2),
    ("DefaultPreemption", 0),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
    ("DefaultBinder", 0),
    ("NodeDeclaredFeatures", 0),
    ("GangScheduling", 0),
];

/// What kube-scheduler v1.37 appends to the multiPoint defaults under the
/// TopologyAwareWorkloadScheduling gate (applyTopologyAwareWorkloadScheduling).
pub(crate) const TOPOLOGY_AWARE_MULTI_POINT: &[(&str, i32)] =
    &[("TopologyPlacementGenerator", 0), ("PodGroupPodsCount", 1)];

/// v1beta2's per-extension-point defaults (Kubernetes 1.22–1.24).
pub(crate) fn v1beta2_defaults(point: Point) -> &'static [(&'static str, i32)] {
    match point {
        QueueSort => &[("PrioritySort", 0)],
        PreFilter => &[
            ("NodeResourcesFit", 0),
            ("NodePorts", 0),
            ("VolumeRestrictions", 0),
            ("PodTopologySpread", 0),
            ("InterPodAffinity", 0),
            ("VolumeBinding", 0),
            ("NodeAffinity", 0),
        ],
        Filter => &[
            ("NodeUnschedulable", 0),
            ("NodeName", 0),
            ("TaintToleration", 0),
            ("NodeAffinity", 0),
            ("NodePorts", 0),
            ("NodeResourcesFit", 0),
            ("VolumeRestrictions", 0),
            ("EBSLimits", 0),
            ("GCEPDLimits", 0),
            ("NodeVolumeLimits", 0),
            ("AzureDiskLimits", 0),
            ("VolumeBinding", 0),
            ("VolumeZone", 0),
            ("PodTopologySpread", 0),
            ("InterPodAffinity", 0),
        ],
        PostFilter => &[("DefaultPreemption", 0)],
        PreScore => &[
            ("InterPodAffinity", 0),
            ("PodTopologySpread", 0),
            ("TaintToleration", 0),
            ("NodeAffinity", 0),
        ],
        Score => &[
            ("NodeResourcesBalancedAllocation", 1),
            ("ImageLocality", 1),
            ("InterPodAffinity", 1),
            ("NodeResourcesFit", 1),
            ("NodeAffinity", 1),
            ("PodTopologySpread", 2),
            ("TaintToleration", 1),
        ],
        Reserve => &[("VolumeBinding", 0)],
        PreBind => &[("VolumeBinding", 0)],
        Bind => &[("DefaultBinder", 0)],
        // The pod group cycle's points are v1's alone; decode gives them v1's defaults.
        PreEnqueue | Permit | PostBind | PlacementGenerate | PlacementScore
        | PodGroupPostFilter => &[],
    }
}

/// v1beta1's per-extension-point defaults (Kubernetes 1.19–1.21).
pub(crate) fn v1beta1_defaults(point: Point) -> &'static [(&'static str, i32)] {
    match point {
        PreFilter => &[
            ("NodeResourcesFit", 0),
            ("NodePorts", 0),
            ("PodTopologySpread", 0),
            ("InterPodAffinity", 0),
            ("VolumeBinding", 0),
            ("NodeAffinity", 0),
        ],
        PreScore => &[
            ("InterPodAffinity", 0),
            ("PodTopologySpread", 0),
            ("TaintToleration", 0),
            ("SelectorSpread", 0),
        ],
        Score => &[
            ("NodeResourcesBalancedAllocation", 1),
            ("ImageLocality", 1),
            ("InterPodAffinity", 1),
            ("NodeResourcesLeastAllocated", 1),
            ("NodeAffinity", 1),
            ("NodePreferAvoidPods", 10000),
            ("PodTopologySpread", 2),
            ("TaintToleration", 1),
            ("SelectorSpread", 1),
        ],
        other => v1beta2_defaults(other),
    }
}

/// Names older versions used, and what became of them.
pub(crate) enum Legacy {
    /// Now this plugin (the cloud volume limits folded into NodeVolumeLimits).
    Renamed(&'static str),
    /// NodeResourcesFit scoring with this strategy.
    FitStrategy(&'static str),
    /// Removed from kube-scheduler without a replacement.
    Removed,
}

pub(crate) fn legacy(name: &str) -> Option<Legacy> {
    Some(match name {
        "EBSLimits" | "GCEPDLimits" | "AzureDiskLimits" | "CinderLimits" => {
            Legacy::Renamed("NodeVolumeLimits")
        }
        "NodeResourcesLeastAllocated" => Legacy::FitStrategy("LeastAllocated"),
        "NodeResourcesMostAllocated" => Legacy::FitStrategy("MostAllocated"),
        "RequestedToCapacityRatio" => Legacy::FitStrategy("RequestedToCapacityRatio"),
        "SelectorSpread"
        | "NodePreferAvoidPods"
        | "NodeLabel"
        | "ServiceAffinity"
        | "DefaultPodTopologySpread" => Legacy::Removed,
        _ => return None,
    })
}

/// Plugins kube-scheduler has that mcsched does not implement yet (default sets name
/// them; they are left out with a warning).
pub(crate) const NOT_YET_IMPLEMENTED: &[&str] = &[];
