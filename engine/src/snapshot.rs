//! An immutable, indexed view of the cluster for one scheduling cycle. Node entries are
//! shared `Arc`s: the cache replaces only the nodes that changed, so taking a snapshot
//! costs one vector of pointer copies, not a rebuild.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};

// The parts a snapshot is made of, where the agent has always imported them from.
pub use crate::node_info::{HostPort, NodeInfo, PodInfo};

/// The view one scheduling cycle works on. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub nodes: Arc<Vec<Arc<NodeInfo>>>,
    pub(crate) index: Arc<HashMap<String, usize>>,
    /// Namespace labels, for namespaceSelector in pod (anti-)affinity terms.
    pub(crate) namespaces: Arc<HashMap<String, BTreeMap<String, String>>>,
    /// How many nodes hold each image, for ImageLocality's spread factor.
    pub(crate) image_nodes: Arc<HashMap<String, usize>>,
    pub volumes: Arc<VolumeObjects>,
    /// DeviceClasses and ResourceSlices, for DynamicResources.
    pub devices: Arc<crate::dra_state::DeviceObjects>,
    pub(crate) pdbs: Arc<Vec<Arc<PodDisruptionBudget>>>,
    /// What selects pods (Services, controllers), for PodTopologySpread's defaults.
    pub(crate) pod_selectors: Arc<crate::pod_selectors::PodSelectors>,
    /// How many nodes are leaves' virtual nodes, counted once per snapshot so that the
    /// leaf check can step aside without walking every node.
    pub(crate) virtual_nodes: usize,
    /// The placement policies, for the pods they select.
    pub policies: Arc<crate::policies::PolicySet>,
    /// Pods counted per topology domain; kept only in snapshots of the cache.
    pub(crate) topology: crate::topology_counts::TopologyCounts,
}

/// The storage objects volume plugins read; claims and storage capacities keyed
/// `namespace/name`, the rest by name.
#[derive(Debug, Clone, Default)]
pub struct VolumeObjects {
    pub claims: HashMap<String, Arc<PersistentVolumeClaim>>,
    pub volumes: HashMap<String, Arc<PersistentVolume>>,
    pub storage_classes: HashMap<String, Arc<StorageClass>>,
    pub csi_nodes: HashMap<String, Arc<CSINode>>,
    pub csi_drivers: HashMap<String, Arc<CSIDriver>>,
    pub storage_capacities: HashMap<String, Arc<CSIStorageCapacity>>,
}

/// How many nodes hold each image, and how many nodes are virtual.
pub(crate) fn node_counts(nodes: &[Arc<NodeInfo>]) -> (HashMap<String, usize>, usize) {
    let mut image_nodes: HashMap<String, usize> = HashMap::new();
    let mut virtual_nodes = 0;
    for n in nodes {
        for image in n.images.keys() {
            *image_nodes.entry(image.clone()).or_default() += 1;
        }
        virtual_nodes += usize::from(n.cluster.is_some());
    }
    (image_nodes, virtual_nodes)
}

impl Snapshot {
    pub fn from_nodes(nodes: Vec<Arc<NodeInfo>>) -> Self {
        let index = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.to_string(), i))
            .collect();
        let (image_nodes, virtual_nodes) = node_counts(&nodes);
        Snapshot {
            virtual_nodes,
            nodes: Arc::new(nodes),
            index: Arc::new(index),
            namespaces: Arc::default(),
            image_nodes: Arc::new(image_nodes),
            volumes: Arc::default(),
            devices: Arc::default(),
            pdbs: Arc::default(),
            pod_selectors: Arc::default(),
            policies: Arc::default(),
            topology: Default::default(),
        }
    }

    /// The same cluster with only the nodes `keep` keeps (kube's AssumePlacement): what a
    /// pod group is simulated on when it must stay within one topology domain.
    pub fn restricted_to(&self, keep: impl Fn(&NodeInfo) -> bool) -> Snapshot {
        let nodes: Vec<Arc<NodeInfo>> = self.nodes.iter().filter(|n| keep(n)).cloned().collect();
        Snapshot {
            namespaces: self.namespaces.clone(),
            volumes: self.volumes.clone(),
            devices: self.devices.clone(),
            pdbs: self.pdbs.clone(),
            pod_selectors: self.pod_selectors.clone(),
            policies: self.policies.clone(),
            ..Snapshot::from_nodes(nodes)
        }
    }

    pub fn get(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        self.index.get(name).and_then(|&i| self.nodes.get(i))
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// Some of a snapshot's nodes (the feasible ones), as positions in its shared node list:
/// a cycle over thousands of nodes then writes no node's reference count, which would pull
/// every node's cache line from core to core.
#[derive(Clone, Default)]
pub struct NodeList {
    all: Arc<Vec<Arc<NodeInfo>>>,
    positions: Vec<u32>,
}

impl NodeList {
    pub fn new(all: Arc<Vec<Arc<NodeInfo>>>, positions: Vec<u32>) -> Self {
        NodeList { all, positions }
    }

    /// Every node of `nodes`, in order.
    pub fn from_nodes(nodes: Vec<Arc<NodeInfo>>) -> Self {
        let positions = (0..nodes.len() as u32).collect();
        NodeList {
            all: Arc::new(nodes),
            positions,
        }
    }

    pub fn len(&self) -> usize {
        self.positions.len()
    }

    /// The same nodes in a list of their own, no longer sharing the snapshot's: what is
    /// kept of a cycle after it then does not hold every node of that snapshot.
    pub fn detached(&self) -> Self {
        NodeList::from_nodes(self.iter().cloned().collect())
    }

    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &Arc<NodeInfo>> + Clone {
        self.positions.iter().map(|&p| &self.all[p as usize])
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&NodeInfo) -> bool) {
        let all = &self.all;
        self.positions.retain(|&p| keep(&all[p as usize]));
    }
}

impl std::ops::Index<usize> for NodeList {
    type Output = Arc<NodeInfo>;
    fn index(&self, i: usize) -> &Arc<NodeInfo> {
        &self.all[self.positions[i] as usize]
    }
}

/// Rough memory of a snapshot: struct sizes plus each Node's and Pod's JSON length as a
/// stand-in for the heap its strings and maps take. For reporting, not accounting.
pub fn approximate_bytes(s: &Snapshot) -> usize {
    let json = |v: &dyn erased_len::JsonLen| v.json_len();
    let mut total =
        std::mem::size_of::<Snapshot>() + s.nodes.capacity() * std::mem::size_of::<Arc<NodeInfo>>();
    for n in s.nodes.iter() {
        total += std::mem::size_of::<NodeInfo>()
            + json(&*n.node)
            + n.pods.capacity() * std::mem::size_of::<Arc<PodInfo>>()
            + n.used_ports.len() * std::mem::size_of::<HostPort>()
            + n.images.keys().map(|k| k.len() + 16).sum::<usize>();
        for p in &n.pods {
            total += p.approximate_bytes();
        }
    }
    total
}

mod erased_len {
    pub(crate) trait JsonLen {
        fn json_len(&self) -> usize;
    }
    impl<T: serde::Serialize> JsonLen for T {
        fn json_len(&self) -> usize {
            serde_json::to_vec(self).map(|v| v.len()).unwrap_or(0)
        }
    }
}
