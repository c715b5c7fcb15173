//! Resources as the scorers (NodeResourcesFit, NodeResourcesBalancedAllocation) count
//! them on a node with the pod placed.

use mcsched_shared::resources::{CPU, EPHEMERAL_STORAGE, MEMORY};

use crate::snapshot::{NodeInfo, PodInfo};

/// A scored resource, resolved from its name once instead of per node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ResourceKind {
    Cpu,
    Memory,
    EphemeralStorage,
    Scalar(String),
}

impl ResourceKind {
    pub(crate) fn of(name: &str) -> Self {
        match name {
            CPU => ResourceKind::Cpu,
            MEMORY => ResourceKind::Memory,
            EPHEMERAL_STORAGE => ResourceKind::EphemeralStorage,
            other => ResourceKind::Scalar(other.to_string()),
        }
    }
}

/// Allocatable and requested-after-placement of one resource, as the scorers see them:
/// cpu and memory count unset requests as 100m / 200Mi (unless `use_requested`).
#[inline]
pub(crate) fn allocatable_and_requested(
    node: &NodeInfo,
    pod: &PodInfo,
    resource: &ResourceKind,
    use_requested: bool,
) -> (i64, i64) {
    let a = &node.allocatable;
    match resource {
        ResourceKind::Cpu if use_requested => (
            a.milli_cpu,
            node.requested
                .milli_cpu
                .saturating_add(pod.requests.milli_cpu),
        ),
        ResourceKind::Cpu => (
            a.milli_cpu,
            node.non_zero_milli_cpu
                .saturating_add(pod.non_zero_milli_cpu),
        ),
        ResourceKind::Memory if use_requested => (
            a.memory,
            node.requested.memory.saturating_add(pod.requests.memory),
        ),
        ResourceKind::Memory => (
            a.memory,
            node.non_zero_memory.saturating_add(pod.non_zero_memory),
        ),
        ResourceKind::EphemeralStorage => (
            a.ephemeral_storage,
            node.requested
                .ephemeral_storage
                .saturating_add(pod.requests.ephemeral_storage),
        ),
        ResourceKind::Scalar(name) => {
            let want = pod.requests.scalar.get(name).copied().unwrap_or(0);
            // Extended resources count only when the pod asks for them.
            if want == 0 {
                return (0, 0);
            }
            let alloc = a.scalar.get(name).copied().unwrap_or(0);
            let used = node.requested.scalar.get(name).copied().unwrap_or(0);
            (alloc, used.saturating_add(want))
        }
    }
}
