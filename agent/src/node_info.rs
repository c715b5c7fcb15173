//! A pod and a node as every scheduling cycle reads them: what the plugins need computed
//! once (requests, ports, affinity terms, sums over the node's pods), beside the API
//! objects they came from.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
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
