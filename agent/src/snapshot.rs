//! An immutable, indexed view of the cluster for one scheduling cycle. Node entries are
//! shared `Arc`s: the cache replaces only the nodes that changed, so taking a snapshot
//! costs one vector of pointer copies, not a rebuild.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use mcsched_shared::node;
use mcsched_shared::resources::{Resources, pod_requests};

/// kube-scheduler's defaults for pods that request nothing, used only by scoring so that
/// zero-request pods still spread (`schedutil.DefaultMilliCPURequest`/`DefaultMemoryRequest`).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// A host port in use: protocol, host IP (`0.0.0.0` when unset) and port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    pub protocol: String,
    pub ip: String,
    pub port: i32,
}

/// A pod with what every cycle needs of it computed once.
#[derive(Debug, Clone)]
pub struct PodInfo {
    pub pod: Arc<Pod>,
    pub key: String,
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub requests: Resources,
    /// cpu/memory with kube-scheduler's non-zero defaults, for scoring.
    pub non_zero_milli_cpu: i64,
    pub non_zero_memory: i64,
    pub host_ports: Vec<HostPort>,
    pub has_affinity: bool,
    pub has_required_anti_affinity: bool,
    /// Parsed (anti-)affinity terms; shared, as most pods have none.
    pub terms: Arc<crate::affinity::PodAffinityTerms>,
    /// A request that did not parse; the pod is unschedulable with this message.
    pub invalid: Option<String>,
}

impl PodInfo {
    pub fn new(pod: Arc<Pod>) -> Self {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let (requests, invalid) = match pod_requests(&pod) {
            Ok(r) => (r, None),
            Err(e) => (Resources::default(), Some(e.to_string())),
        };
        let (non_zero_milli_cpu, non_zero_memory) = non_zero_requests(&pod);
        let spec = pod.spec.as_ref();
        let host_ports = spec
            .map(|s| {
                s.containers
                    .iter()
                    .flat_map(|c| c.ports.iter().flatten())
                    .filter(|p| p.host_port.unwrap_or(0) > 0)
                    .map(|p| HostPort {
                        protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                        ip: p
                            .host_ip
                            .clone()
                            .filter(|ip| !ip.is_empty())
                            .unwrap_or_else(|| "0.0.0.0".into()),
                        port: p.host_port.unwrap_or(0),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let affinity = spec.and_then(|s| s.affinity.as_ref());
        let has_affinity =
            affinity.is_some_and(|a| a.pod_affinity.is_some() || a.pod_anti_affinity.is_some());
        let has_required_anti_affinity = affinity
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .is_some_and(|t| !t.is_empty());
        let terms = if has_affinity {
            Arc::new(crate::affinity::PodAffinityTerms::of(&pod))
        } else {
            no_terms()
        };
        PodInfo {
            terms,
            key: format!("{namespace}/{name}"),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            namespace,
            name,
            requests,
            non_zero_milli_cpu,
            non_zero_memory,
            host_ports,
            has_affinity,
            has_required_anti_affinity,
            invalid,
            pod,
        }
    }

    pub fn labels(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.pod.metadata.labels.as_ref().unwrap_or(&EMPTY)
    }

    pub fn node_name(&self) -> Option<&str> {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .filter(|n| !n.is_empty())
    }

    pub fn priority(&self) -> i32 {
        self.pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
    }
}

fn no_terms() -> Arc<crate::affinity::PodAffinityTerms> {
    static NONE: std::sync::OnceLock<Arc<crate::affinity::PodAffinityTerms>> =
        std::sync::OnceLock::new();
    NONE.get_or_init(Arc::default).clone()
}

/// Per-container requests with 100m / 200Mi standing in for an unset cpu / memory
/// request, summed like `PodRequests` (app containers and sidecars added, at least the
/// largest init step: an init container plus the sidecars started before it), plus the
/// pod overhead — as kube-scheduler's `NonZeroRequested`.
fn non_zero_requests(pod: &Pod) -> (i64, i64) {
    let Some(spec) = pod.spec.as_ref() else {
        return (0, 0);
    };
    let read = |map: Option<
        &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >,
                name: &str,
                milli: bool| {
        map.and_then(|m| m.get(name))
            .and_then(|q| mcsched_shared::quantity::Quantity::parse(&q.0).ok())
            .map(|q| if milli { q.milli_value() } else { q.value() })
    };
    let get = |c: &k8s_openapi::api::core::v1::Container| {
        let req = c.resources.as_ref().and_then(|r| r.requests.as_ref());
        (
            read(req, "cpu", true).unwrap_or(DEFAULT_MILLI_CPU_REQUEST),
            read(req, "memory", false).unwrap_or(DEFAULT_MEMORY_REQUEST),
        )
    };
    let (mut cpu, mut mem) = (0i64, 0i64);
    for c in &spec.containers {
        let (c_cpu, c_mem) = get(c);
        cpu = cpu.saturating_add(c_cpu);
        mem = mem.saturating_add(c_mem);
    }
    let (mut sidecar_cpu, mut sidecar_mem, mut peak_cpu, mut peak_mem) = (0i64, 0i64, 0i64, 0i64);
    for ic in spec.init_containers.iter().flatten() {
        let (c_cpu, c_mem) = get(ic);
        let step = if ic.restart_policy.as_deref() == Some("Always") {
            cpu = cpu.saturating_add(c_cpu);
            mem = mem.saturating_add(c_mem);
            sidecar_cpu = sidecar_cpu.saturating_add(c_cpu);
            sidecar_mem = sidecar_mem.saturating_add(c_mem);
            (sidecar_cpu, sidecar_mem)
        } else {
            (
                c_cpu.saturating_add(sidecar_cpu),
                c_mem.saturating_add(sidecar_mem),
            )
        };
        peak_cpu = peak_cpu.max(step.0);
        peak_mem = peak_mem.max(step.1);
    }
    let overhead = spec.overhead.as_ref();
    (
        cpu.max(peak_cpu)
            .saturating_add(read(overhead, "cpu", true).unwrap_or(0)),
        mem.max(peak_mem)
            .saturating_add(read(overhead, "memory", false).unwrap_or(0)),
    )
}

/// A node and the pods on it, with their sums kept up to date.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub node: Arc<Node>,
    pub name: String,
    pub allocatable: Resources,
    pub pods: Vec<Arc<PodInfo>>,
    pub requested: Resources,
    pub non_zero_milli_cpu: i64,
    pub non_zero_memory: i64,
    pub used_ports: HashSet<HostPort>,
    /// Container images present on the node: name → size in bytes.
    pub images: HashMap<String, i64>,
    /// Bumped on every change, so derived caches can tell stale entries.
    pub generation: u64,
    /// For a virtual node: the leaf cluster it stands for.
    pub cluster: Option<String>,
    /// `spec.unschedulable` and `spec.taints`, read by filters and scores of every cycle
    /// here, without following the pointer to the Node.
    pub unschedulable: bool,
    pub taints: Vec<k8s_openapi::api::core::v1::Taint>,
    /// How many of `pods` have pod (anti-)affinity / required anti-affinity, so plugins
    /// skip the many nodes without any.
    pub affinity_pods: usize,
    pub required_anti_affinity_pods: usize,
}

impl NodeInfo {
    pub fn new(node: Arc<Node>) -> Self {
        let mut info = NodeInfo {
            name: node.metadata.name.clone().unwrap_or_default(),
            allocatable: Resources::default(),
            pods: Vec::new(),
            requested: Resources::default(),
            non_zero_milli_cpu: 0,
            non_zero_memory: 0,
            used_ports: HashSet::new(),
            images: HashMap::new(),
            generation: 0,
            affinity_pods: 0,
            required_anti_affinity_pods: 0,
            cluster: None,
            unschedulable: false,
            taints: Vec::new(),
            node: node.clone(),
        };
        info.set_node(node);
        info
    }

    /// Replaces the Node object and what derives from it, keeping the pods. When the
    /// node's image names or its being virtual changed: the images and flag it had.
    pub fn set_node(&mut self, node: Arc<Node>) -> Option<(HashMap<String, i64>, bool)> {
        let was_virtual = self.cluster.is_some();
        self.allocatable = node::allocatable(&node).unwrap_or_default();
        let old_images = std::mem::take(&mut self.images);
        self.images = node
            .status
            .as_ref()
            .and_then(|s| s.images.as_ref())
            .map(|imgs| {
                imgs.iter()
                    .flat_map(|i| {
                        let size = i.size_bytes.unwrap_or(0);
                        i.names.iter().flatten().map(move |n| (n.clone(), size))
                    })
                    .collect()
            })
            .unwrap_or_default();
        self.cluster = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(mcsched_shared::keys::CLUSTER_LABEL))
            .cloned();
        self.unschedulable = node::is_unschedulable(&node);
        self.taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        self.node = node;
        self.generation += 1;
        let same_images = old_images.len() == self.images.len()
            && old_images.keys().all(|k| self.images.contains_key(k));
        (!same_images || was_virtual != self.cluster.is_some()).then_some((old_images, was_virtual))
    }

    /// The cluster the node belongs to: its leaf for a virtual node, else the host
    /// (`host`, as policies name it).
    pub fn cluster_name(&self) -> &str {
        self.cluster
            .as_deref()
            .unwrap_or(mcsched_shared::keys::HOST_CLUSTER_NAME)
    }

    pub fn labels(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.node.metadata.labels.as_ref().unwrap_or(&EMPTY)
    }

    pub fn add_pod(&mut self, pod: Arc<PodInfo>) {
        self.requested.add(&pod.requests);
        self.non_zero_milli_cpu = self
            .non_zero_milli_cpu
            .saturating_add(pod.non_zero_milli_cpu);
        self.non_zero_memory = self.non_zero_memory.saturating_add(pod.non_zero_memory);
        for p in &pod.host_ports {
            self.used_ports.insert(p.clone());
        }
        self.affinity_pods += usize::from(pod.has_affinity);
        self.required_anti_affinity_pods += usize::from(pod.has_required_anti_affinity);
        self.pods.push(pod);
        self.generation += 1;
    }

    /// Removes the pod with this key; false when it was not here.
    pub fn remove_pod(&mut self, key: &str) -> bool {
        let Some(i) = self.pods.iter().position(|p| p.key == key) else {
            return false;
        };
        let pod = self.pods.swap_remove(i);
        self.affinity_pods -= usize::from(pod.has_affinity);
        self.required_anti_affinity_pods -= usize::from(pod.has_required_anti_affinity);
        self.requested.sub(&pod.requests);
        self.non_zero_milli_cpu = self
            .non_zero_milli_cpu
            .saturating_sub(pod.non_zero_milli_cpu);
        self.non_zero_memory = self.non_zero_memory.saturating_sub(pod.non_zero_memory);
        if !pod.host_ports.is_empty() {
            self.used_ports = self
                .pods
                .iter()
                .flat_map(|p| p.host_ports.iter().cloned())
                .collect();
        }
        self.generation += 1;
        true
    }

    pub fn pods_with_affinity(&self) -> impl Iterator<Item = &Arc<PodInfo>> {
        let pods: &[Arc<PodInfo>] = if self.affinity_pods > 0 {
            &self.pods
        } else {
            &[]
        };
        pods.iter().filter(|p| p.has_affinity)
    }

    pub fn pods_with_required_anti_affinity(&self) -> impl Iterator<Item = &Arc<PodInfo>> {
        let pods: &[Arc<PodInfo>] = if self.required_anti_affinity_pods > 0 {
            &self.pods
        } else {
            &[]
        };
        pods.iter().filter(|p| p.has_required_anti_affinity)
    }
}

/// The view one scheduling cycle works on. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub nodes: Arc<Vec<Arc<NodeInfo>>>,
    pub index: Arc<HashMap<String, usize>>,
    /// Namespace labels, for namespaceSelector in pod (anti-)affinity terms.
    pub namespaces: Arc<HashMap<String, BTreeMap<String, String>>>,
    /// How many nodes hold each image, for ImageLocality's spread factor.
    pub image_nodes: Arc<HashMap<String, usize>>,
    pub volumes: Arc<VolumeObjects>,
    pub pdbs: Arc<Vec<Arc<PodDisruptionBudget>>>,
    /// What selects pods (Services, controllers), for PodTopologySpread's defaults.
    pub pod_selectors: Arc<crate::pod_selectors::PodSelectors>,
    /// How many nodes are leaves' virtual nodes, counted once per snapshot so that the
    /// leaf check can step aside without walking every node.
    pub virtual_nodes: usize,
    /// The placement policies, for the pods they select.
    pub policies: Arc<crate::policies::PolicySet>,
    /// Pods counted per topology domain; kept only in snapshots of the cache.
    pub topology: crate::topology_counts::TopologyCounts,
}

/// The storage objects volume plugins read; claims keyed `namespace/name`, the rest by name.
#[derive(Debug, Clone, Default)]
pub struct VolumeObjects {
    pub claims: HashMap<String, Arc<PersistentVolumeClaim>>,
    pub volumes: HashMap<String, Arc<PersistentVolume>>,
    pub storage_classes: HashMap<String, Arc<StorageClass>>,
    pub csi_nodes: HashMap<String, Arc<CSINode>>,
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
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        let (image_nodes, virtual_nodes) = node_counts(&nodes);
        Snapshot {
            virtual_nodes,
            nodes: Arc::new(nodes),
            index: Arc::new(index),
            namespaces: Arc::default(),
            image_nodes: Arc::new(image_nodes),
            volumes: Arc::default(),
            pdbs: Arc::default(),
            pod_selectors: Arc::default(),
            policies: Arc::default(),
            topology: Default::default(),
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

/// Rough memory of a snapshot: struct sizes plus each Node's and Pod's JSON length as a
/// stand-in for the heap its strings and maps take. For reporting, not accounting.
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

    pub fn par_iter(&self) -> impl rayon::iter::IndexedParallelIterator<Item = &Arc<NodeInfo>> {
        use rayon::prelude::*;
        self.positions.par_iter().map(|&p| &self.all[p as usize])
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
            total += std::mem::size_of::<PodInfo>() + json(&*p.pod) + p.key.len() * 3;
        }
    }
    total
}

mod erased_len {
    pub trait JsonLen {
        fn json_len(&self) -> usize;
    }
    impl<T: serde::Serialize> JsonLen for T {
        fn json_len(&self) -> usize {
            serde_json::to_vec(self).map(|v| v.len()).unwrap_or(0)
        }
    }
}

#[cfg(test)]
mod non_zero_tests {
    use super::*;

    /// An init container before a sidecar counts alone; the sidecar runs beside the app
    /// containers; the overhead comes on top: kube's `PodRequests` with non-zero defaults.
    #[test]
    fn non_zero_requests_count_init_steps_sidecars_and_overhead() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {
                "containers": [{"name": "app"}],
                "initContainers": [
                    {"name": "init", "resources": {"requests": {"cpu": "1"}}},
                    {"name": "sidecar", "restartPolicy": "Always",
                     "resources": {"requests": {"cpu": "300m", "memory": "100Mi"}}}
                ],
                "overhead": {"cpu": "50m", "memory": "10Mi"}
            }
        }))
        .expect("pod");
        // cpu: max(100m + 300m, 1) + 50m; memory: max(200Mi + 100Mi, 200Mi) + 10Mi.
        assert_eq!(non_zero_requests(&pod), (1050, 310 * 1024 * 1024));
    }
}
