//! The leaves as one scheduling cycle sees them: each synced leaf's snapshot, taken once
//! at the cycle's start, and what the leaf check found for each virtual node.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use super::grants::{ReadAccess, ReadAll};
use crate::snapshot::{PodInfo, Snapshot, VolumeObjects};

/// What the agent may read for pod sync to copy (everything when nobody asked).
#[derive(Clone)]
pub struct Access(pub Arc<dyn ReadAccess>);

impl Default for Access {
    fn default() -> Self {
        Access(Arc::new(ReadAll))
    }
}

/// CycleState key of [`LeafCycle`].
pub const LEAF_CYCLE_KEY: &str = "mcsched.io/leaf-cycle";

/// One leaf as the agent sees it at the start of a cycle.
pub struct LeafView {
    pub cluster: String,
    pub snapshot: Snapshot,
    /// The leaf's namespace grants and name clashes, as far as known.
    pub checks: Arc<super::leaf_checks::LeafChecks>,
    pub host_id: String,
}

/// Where a virtual node's pod would run: its cluster and the leaf node found for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafChoice {
    pub cluster: String,
    pub leaf_node: String,
}

/// The leaves for one scheduling cycle, and what the check found per virtual node.
#[derive(Clone, Default)]
pub struct LeafCycle {
    pub views: Arc<BTreeMap<String, Arc<LeafView>>>,
    leaf_pod: Arc<OnceLock<Result<Arc<PodInfo>, String>>>,
    /// Virtual node → the leaf node found able to host the pod.
    choices: Arc<Mutex<HashMap<String, LeafChoice>>>,
    /// Owner → clusters its pods are kept away from (they stayed Pending there).
    pub avoid: Arc<HashMap<String, Vec<String>>>,
    /// The host's claims, whose leaf copies the volume check judges.
    pub host_volumes: Arc<VolumeObjects>,
    /// Whether pod sync may read the ConfigMaps and Secrets a pod refers to.
    pub access: Access,
}

impl LeafCycle {
    pub fn new(views: Arc<BTreeMap<String, Arc<LeafView>>>) -> Self {
        LeafCycle {
            views,
            ..Default::default()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, LeafChoice>> {
        self.choices.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn record_choice(&self, virtual_node: &str, cluster: &str, leaf_node: &str) {
        self.lock().insert(
            virtual_node.to_string(),
            LeafChoice {
                cluster: cluster.to_string(),
                leaf_node: leaf_node.to_string(),
            },
        );
    }

    /// The leaf node the check picked for `virtual_node` in this cycle.
    pub fn choice(&self, virtual_node: &str) -> Option<String> {
        self.lock().get(virtual_node).map(|c| c.leaf_node.clone())
    }

    /// The cluster and leaf node the check picked for `virtual_node`.
    pub fn placement(&self, virtual_node: &str) -> Option<LeafChoice> {
        self.lock().get(virtual_node).cloned()
    }

    /// Virtual node → leaf node, for explanations.
    pub fn choices(&self) -> HashMap<String, String> {
        self.lock()
            .iter()
            .map(|(v, c)| (v.clone(), c.leaf_node.clone()))
            .collect()
    }

    /// The pod as it would be created in a leaf, built once per cycle.
    pub fn leaf_pod(&self, host: &PodInfo) -> Result<Arc<PodInfo>, String> {
        self.leaf_pod
            .get_or_init(|| {
                super::transform::leaf_pod(&host.pod, "", "")
                    .map(|p| Arc::new(PodInfo::new(Arc::new(p))))
                    .map_err(|e| e.to_string())
            })
            .clone()
    }
}

/// What the leaf check reads of the joined leaves, and where it counts a pod it sends
/// to one until the leaf's own scheduler has placed the copy.
pub trait LeafSnapshots: Send + Sync {
    /// The synced leaves' snapshots for one scheduling cycle, with the host's storage
    /// objects the leaf volume check needs.
    fn cycle(&self, host_volumes: Arc<VolumeObjects>) -> LeafCycle;
    /// Counts `pod` on `leaf_node` of `cluster`.
    fn assume(&self, cluster: &str, pod: Arc<PodInfo>, leaf_node: &str);
    /// Undoes [`LeafSnapshots::assume`].
    fn forget(&self, cluster: &str, key: &str);
}

/// No leaves at all: every virtual node is a leaf the agent is not connected to.
pub struct NoLeaves;

impl LeafSnapshots for NoLeaves {
    fn cycle(&self, host_volumes: Arc<VolumeObjects>) -> LeafCycle {
        LeafCycle {
            host_volumes,
            ..Default::default()
        }
    }
    fn assume(&self, _: &str, _: Arc<PodInfo>, _: &str) {}
    fn forget(&self, _: &str, _: &str) {}
}
