//! A pod and a node as every scheduling cycle reads them: what the plugins need computed
//! once (requests, ports, affinity terms, sums over the node's pods), beside the API
//! objects they came from.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use mcsched_shared::node;
use mcsched_shared::resources::{Resources, pod_requests};
use tracing::warn;
/// kube-scheduler's defaults for pods that request nothing, used only by scoring so that
/// zero-request pods still spread (`schedutil.DefaultMilliCPURequest`/`DefaultMemoryRequest`).
pub(crate) const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
pub(crate) const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// A host port in use: protocol, host IP (`0.0.0.0` when unset) and port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    pub(crate) protocol: String,
    pub(crate) ip: String,
    pub(crate) port: i32,
}

/// A pod with what every cycle needs of it computed once.
///
/// The cache keeps its thousands of bound pods [compact](PodInfo::compact): the fields
/// below, with the rest of the object serialized, since a decoded `Pod` is large however
/// few fields it sets (measured in bench/analysis.md). Everything that reads pods already
/// on nodes (plugins' add/remove and per-node checks, policies, preemption's victims)
/// reads these fields; the whole object ([`PodInfo::pod`]) is for the pod being scheduled
/// and the rare whole-object reader (pod sync, extenders, what-ifs that rewrite a pod).
#[derive(Debug, Clone)]
pub struct PodInfo {
    /// The object's metadata, managed fields dropped.
    pub meta: ObjectMeta,
    pub key: String,
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub requests: Resources,
    /// cpu/memory with kube-scheduler's non-zero defaults, for scoring.
    pub(crate) non_zero_milli_cpu: i64,
    pub(crate) non_zero_memory: i64,
    pub(crate) host_ports: Vec<HostPort>,
    pub(crate) has_affinity: bool,
    pub(crate) has_required_anti_affinity: bool,
    /// Parsed (anti-)affinity terms; shared, as most pods have none.
    pub(crate) terms: Arc<crate::affinity::PodAffinityTerms>,
    /// A request that did not parse; the pod is unschedulable with this message.
    pub(crate) invalid: Option<String>,
    node_name: Option<String>,
    nominated_node_name: Option<String>,
    priority: i32,
    /// `spec.volumes`, read by the volume plugins for pods already on a node.
    pub(crate) volumes: Vec<Volume>,
    pub(crate) start_time: Option<Time>,
    /// A `DisruptionTarget` condition set by a scheduler's preemption (kube's
    /// `podTerminatingByPreemption` reads it).
    pub(crate) preempted: bool,
    object: PodObject,
}

/// The whole pod: decoded for a pod being scheduled, serialized (without its metadata,
/// kept beside) for one in the cache.
#[derive(Debug, Clone)]
enum PodObject {
    Decoded(Arc<Pod>),
    Encoded(Arc<[u8]>),
}

/// The reason kube-scheduler's preemption writes into its victims' DisruptionTarget.
pub const PREEMPTED_REASON: &str = "PreemptionByScheduler";

impl PodInfo {
    /// A pod kept decoded: the one being scheduled, or one built for a what-if.
    pub fn new(pod: Arc<Pod>) -> Self {
        let mut info = Self::computed(&pod);
        info.meta = pod.metadata.clone();
        info.object = PodObject::Decoded(pod);
        info
    }

    /// A pod kept compact, as the cache keeps bound pods: the whole object is decoded
    /// again only when [`PodInfo::pod`] is asked for.
    pub fn compact(pod: Arc<Pod>) -> Self {
        let mut pod = Arc::unwrap_or_clone(pod);
        // Computed from the whole pod: terms default to the pod's own namespace.
        let mut info = Self::computed(&pod);
        info.meta = std::mem::take(&mut pod.metadata);
        if let Some(spec) = pod.spec.as_mut() {
            spec.volumes = None;
        }
        info.object = match serde_json::to_vec(&pod) {
            Ok(bytes) => PodObject::Encoded(bytes.into()),
            Err(e) => {
                // Not expected of a Pod; keep it whole rather than lose it.
                warn!(pod = %info.key, error = %e, "pod not serializable; kept decoded");
                pod.metadata = info.meta.clone();
                if let Some(spec) = pod.spec.as_mut() {
                    spec.volumes = (!info.volumes.is_empty()).then(|| info.volumes.clone());
                }
                PodObject::Decoded(Arc::new(pod))
            }
        };
        info
    }

    /// Everything but the metadata and the object, which the constructors move in.
    fn computed(pod: &Pod) -> Self {
        let meta = &pod.metadata;
        let namespace = meta.namespace.clone().unwrap_or_default();
        let name = meta.name.clone().unwrap_or_default();
        let (requests, invalid) = match pod_requests(pod) {
            Ok(r) => (r, None),
            Err(e) => (Resources::default(), Some(e.to_string())),
        };
        let (non_zero_milli_cpu, non_zero_memory) = non_zero_requests(pod);
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
            Arc::new(crate::affinity::PodAffinityTerms::of(pod))
        } else {
            no_terms()
        };
        let status = pod.status.as_ref();
        PodInfo {
            terms,
            key: format!("{namespace}/{name}"),
            uid: meta.uid.clone().unwrap_or_default(),
            namespace,
            name,
            requests,
            non_zero_milli_cpu,
            non_zero_memory,
            host_ports,
            has_affinity,
            has_required_anti_affinity,
            invalid,
            node_name: spec
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty()),
            nominated_node_name: status
                .and_then(|s| s.nominated_node_name.clone())
                .filter(|n| !n.is_empty()),
            priority: spec.and_then(|s| s.priority).unwrap_or(0),
            volumes: spec.and_then(|s| s.volumes.clone()).unwrap_or_default(),
            start_time: status.and_then(|s| s.start_time.clone()),
            preempted: status
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "DisruptionTarget"))
                .is_some_and(|c| {
                    c.status == "True" && c.reason.as_deref() == Some(PREEMPTED_REASON)
                }),
            meta: ObjectMeta::default(),
            object: PodObject::Encoded(Arc::from([])),
        }
    }

    /// The whole pod, shared; a compact one is decoded anew on each call.
    pub fn pod(&self) -> Arc<Pod> {
        match &self.object {
            PodObject::Decoded(pod) => pod.clone(),
            PodObject::Encoded(_) => Arc::new(self.decode()),
        }
    }

    /// The whole pod to read: borrowed when decoded (the plugins read the pod being
    /// scheduled on every node, from several threads: no shared count to bump), decoded
    /// anew when compact.
    pub fn object(&self) -> Cow<'_, Pod> {
        match &self.object {
            PodObject::Decoded(pod) => Cow::Borrowed(pod),
            PodObject::Encoded(_) => Cow::Owned(self.decode()),
        }
    }

    fn decode(&self) -> Pod {
        match &self.object {
            PodObject::Decoded(pod) => (**pod).clone(),
            PodObject::Encoded(bytes) => {
                let mut pod = serde_json::from_slice::<Pod>(bytes).unwrap_or_else(|e| {
                    // Bytes this process wrote from a Pod; only a serde bug gets here.
                    warn!(pod = %self.key, error = %e, "compact pod did not decode");
                    Pod::default()
                });
                pod.metadata = self.meta.clone();
                if !self.volumes.is_empty() {
                    pod.spec.get_or_insert_default().volumes = Some(self.volumes.clone());
                }
                pod
            }
        }
    }

    /// Roughly what the pod takes in memory: its fields, its metadata's JSON size, and
    /// the serialized object (a decoded one counted at its JSON size).
    pub fn approximate_bytes(&self) -> usize {
        fn json<T: serde::Serialize>(v: &T) -> usize {
            serde_json::to_vec(v).map(|v| v.len()).unwrap_or(0)
        }
        let object = match &self.object {
            PodObject::Decoded(pod) => json(&**pod),
            PodObject::Encoded(bytes) => bytes.len(),
        };
        std::mem::size_of::<PodInfo>() + json(&self.meta) + object + self.key.len() * 3
    }

    /// The same pod with its whole object decoded, for a scheduling cycle that reads it
    /// on every node.
    pub fn decoded(self: &Arc<Self>) -> Arc<PodInfo> {
        if !self.is_compact() {
            return self.clone();
        }
        let mut info = (**self).clone();
        info.object = PodObject::Decoded(self.pod());
        Arc::new(info)
    }

    /// The same pod kept compact, for a queue or cache that holds it a while.
    pub fn compacted(self: &Arc<Self>) -> Arc<PodInfo> {
        if self.is_compact() {
            return self.clone();
        }
        Arc::new(PodInfo::compact(self.pod()))
    }

    /// Whether the whole object is kept serialized.
    pub(crate) fn is_compact(&self) -> bool {
        matches!(self.object, PodObject::Encoded(_))
    }

    pub fn labels(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.meta.labels.as_ref().unwrap_or(&EMPTY)
    }

    pub fn node_name(&self) -> Option<&str> {
        self.node_name.as_deref()
    }

    /// `status.nominatedNodeName`, when set.
    pub fn nominated_node_name(&self) -> Option<&str> {
        self.nominated_node_name.as_deref()
    }

    pub fn priority(&self) -> i32 {
        self.priority
    }

    pub fn terminating(&self) -> bool {
        self.meta.deletion_timestamp.is_some()
    }

    /// The uid of the pod's controller (its owner reference marked `controller`).
    pub fn controller_uid(&self) -> Option<&str> {
        controller_uid(&self.meta)
    }
}

/// The uid of the object's controller (its owner reference marked `controller`).
pub(crate) fn controller_uid(meta: &ObjectMeta) -> Option<&str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str())
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
    /// Shared: explanations keep the names of the nodes they list.
    pub name: Arc<str>,
    pub allocatable: Resources,
    pub pods: Vec<Arc<PodInfo>>,
    pub(crate) requested: Resources,
    pub(crate) non_zero_milli_cpu: i64,
    pub(crate) non_zero_memory: i64,
    pub(crate) used_ports: HashSet<HostPort>,
    /// Container images present on the node: name → size in bytes.
    pub(crate) images: HashMap<String, i64>,
    /// Bumped on every change, so derived caches can tell stale entries.
    pub(crate) generation: u64,
    /// For a virtual node: the leaf cluster it stands for.
    pub cluster: Option<String>,
    /// `spec.unschedulable` and `spec.taints`, read by filters and scores of every cycle
    /// here, without following the pointer to the Node.
    pub unschedulable: bool,
    pub(crate) taints: Vec<k8s_openapi::api::core::v1::Taint>,
    /// How many of `pods` have pod (anti-)affinity / required anti-affinity, so plugins
    /// skip the many nodes without any.
    pub(crate) affinity_pods: usize,
    pub(crate) required_anti_affinity_pods: usize,
}

impl NodeInfo {
    /// Asks the CPU to bring the node's fields into its cache ahead of the filters. The
    /// 5000 NodeInfos of a large cluster do not stay cached between cycles beside the API
    /// server and etcd, and the first filter's first read of each node stalls on it
    /// (measured in bench/analysis.md).
    #[inline]
    pub(crate) fn prefetch(&self) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            let base = (self as *const Self).cast::<i8>();
            for line in (0..std::mem::size_of::<Self>()).step_by(64) {
                // SAFETY: SSE is part of x86_64's baseline, and a prefetch reads nothing:
                // it is only a hint, valid for any address.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(base.wrapping_add(line)) };
            }
        }
    }

    /// Asks the CPU for the line of the Node object that holds its labels (one pointer
    /// past [`NodeInfo::prefetch`], so called nearer the filters, when this NodeInfo is
    /// cached): label-reading filters stalled on it at 5000 nodes (bench/analysis.md).
    #[inline]
    pub(crate) fn prefetch_labels(&self) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            // The field's address only: nothing of the Node is read here.
            let labels = std::ptr::addr_of!(self.node.metadata.labels).cast::<i8>();
            // SAFETY: as in prefetch(): a hint, valid for any address.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(labels) };
        }
    }

    pub fn new(node: Arc<Node>) -> Self {
        let mut info = NodeInfo {
            name: node.metadata.name.as_deref().unwrap_or_default().into(),
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
    pub(crate) fn remove_pod(&mut self, key: &str) -> bool {
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

    pub(crate) fn pods_with_affinity(&self) -> impl Iterator<Item = &Arc<PodInfo>> {
        let pods: &[Arc<PodInfo>] = if self.affinity_pods > 0 {
            &self.pods
        } else {
            &[]
        };
        pods.iter().filter(|p| p.has_affinity)
    }

    pub(crate) fn pods_with_required_anti_affinity(&self) -> impl Iterator<Item = &Arc<PodInfo>> {
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

#[cfg(test)]
mod compact_tests {
    use super::*;

    fn full_pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                "labels": {"app": "web"}, "annotations": {"a": "b"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                    "uid": "rs-1", "controller": true}],
                "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {
                "nodeName": "n1", "priority": 5,
                "containers": [{"name": "c", "image": "img",
                    "ports": [{"containerPort": 80, "hostPort": 8080}],
                    "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "c1"}}],
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone"}]}},
                "tolerations": [{"key": "k", "operator": "Exists"}]
            },
            "status": {"phase": "Running", "nominatedNodeName": "n2",
                "startTime": "2026-01-01T00:00:00Z",
                "conditions": [{"type": "DisruptionTarget", "status": "True",
                    "reason": "PreemptionByScheduler"}]}
        }))
        .expect("pod")
    }

    /// A compact pod answers every field as the decoded one, and gives the whole object
    /// back unchanged.
    #[test]
    fn compact_pod_keeps_what_is_read_and_decodes_whole() {
        let pod = full_pod();
        let decoded = PodInfo::new(Arc::new(pod.clone()));
        let compact = PodInfo::compact(Arc::new(pod.clone()));
        assert!(compact.is_compact() && !decoded.is_compact());
        for info in [&decoded, &compact] {
            assert_eq!(info.key, "ns/p");
            assert_eq!(info.uid, "u1");
            assert_eq!(info.labels().get("app").map(String::as_str), Some("web"));
            assert_eq!(info.node_name(), Some("n1"));
            assert_eq!(info.nominated_node_name(), Some("n2"));
            assert_eq!(info.priority(), 5);
            assert!(info.terminating() && info.preempted);
            assert_eq!(info.controller_uid(), Some("rs-1"));
            assert_eq!(info.volumes.len(), 1);
            assert!(info.start_time.is_some());
            assert!(info.has_required_anti_affinity);
            // Terms without namespaces take the pod's own.
            assert_eq!(*info.terms, crate::affinity::PodAffinityTerms::of(&pod));
            assert!(
                info.terms.required_anti_affinity[0]
                    .namespaces
                    .contains("ns")
            );
            assert_eq!(info.host_ports.len(), 1);
            assert_eq!(info.requests.milli_cpu, 250);
            assert_eq!(*info.pod(), pod);
            assert_eq!(*info.object(), pod);
        }
        assert!(matches!(decoded.object(), Cow::Borrowed(_)));
    }

    #[test]
    fn compact_pod_without_spec_or_volumes_round_trips() {
        let mut pod = full_pod();
        pod.spec.as_mut().expect("spec").volumes = None;
        assert_eq!(*PodInfo::compact(Arc::new(pod.clone())).pod(), pod);
        let bare = Pod {
            metadata: pod.metadata.clone(),
            ..Default::default()
        };
        let info = PodInfo::compact(Arc::new(bare.clone()));
        assert_eq!(*info.pod(), bare);
        assert!(info.volumes.is_empty() && info.node_name().is_none());
    }
}
