//! Every label, annotation and taint name mcsched uses, in one place.

/// Label on a virtual node naming the leaf cluster it stands for.
pub const CLUSTER_LABEL: &str = "mcsched.io/cluster";
/// Taint that keeps the default scheduler off virtual nodes.
pub const LEAF_TAINT: &str = "mcsched.io/leaf";
/// Kosmos' leaf taint, recognised as a leaf taint too.
pub const KOSMOS_LEAF_TAINT: &str = "kosmos.io/node";
/// Prefix of every virtual node's name.
pub const VIRTUAL_NODE_PREFIX: &str = "mcsched-";

/// The field manager of every object mcsched writes.
pub const FIELD_MANAGER: &str = "mcsched";
/// The scheduler name the agent serves when none is given.
pub const DEFAULT_SCHEDULER_NAME: &str = "mcsched";

/// Whether a taint key marks a node as a leaf cluster's virtual node.
pub fn is_leaf_taint(key: &str) -> bool {
    key == LEAF_TAINT || key == KOSMOS_LEAF_TAINT
}
