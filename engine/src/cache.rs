//! The scheduler's view of the cluster, fed by watches: nodes with the pods bound or
//! assumed on them, kept incrementally. Taking a snapshot copies pointers only; a node
//! changed since the last snapshot is copied on write.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::dra_state::DeviceObjects;
use crate::node_tree::{NodeTree, zone_key};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot, VolumeObjects};
use crate::topology_counts::TopologyCounts;

#[derive(Debug, Clone)]
struct PodEntry {
    node: String,
    info: Arc<PodInfo>,
    /// Placed by this scheduler, binding not yet seen in the watch.
    assumed: bool,
}

pub struct Cache {
    /// Shared with the latest snapshot; changed in place once the snapshot is dropped
    /// (a cycle drops its own before assuming), so that taking a snapshot per cycle does
    /// not touch every node's reference count.
    nodes: Arc<Vec<Arc<NodeInfo>>>,
    /// How many nodes hold each image, and how many are virtual: kept as nodes change.
    image_nodes: Arc<HashMap<String, usize>>,
    virtual_nodes: usize,
    index: Arc<HashMap<String, usize>>,
    pods: HashMap<String, PodEntry>,
    /// Pods whose node the cache has not seen yet, by node name.
    waiting: HashMap<String, Vec<Arc<PodInfo>>>,
    namespaces: Arc<HashMap<String, BTreeMap<String, String>>>,
    pub volumes: Arc<VolumeObjects>,
    devices: Arc<DeviceObjects>,
    pdbs: Arc<Vec<Arc<k8s_openapi::api::policy::v1::PodDisruptionBudget>>>,
    pod_selectors: Arc<crate::pod_selectors::PodSelectors>,
    policies: Arc<crate::policies::PolicySet>,
    topology: TopologyCounts,
    /// The nodes by zone; `nodes` follows its interleaved order from the next snapshot
    /// after a node is added or deleted (as kube's snapshot list follows its node tree).
    tree: NodeTree,
    order_stale: bool,
    snapshot: Option<Snapshot>,
}

fn node_labels(node: &Node) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    node.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

fn bound_node(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

impl Default for Cache {
    fn default() -> Self {
        Cache {
            nodes: Arc::default(),
            image_nodes: Arc::default(),
            virtual_nodes: 0,
            index: Arc::default(),
            pods: HashMap::new(),
            waiting: HashMap::new(),
            namespaces: Arc::default(),
            volumes: Arc::default(),
            devices: Arc::default(),
            pdbs: Arc::default(),
            pod_selectors: Arc::default(),
            policies: Arc::default(),
            topology: TopologyCounts::kept_by_cache(),
            tree: NodeTree::default(),
            order_stale: false,
            snapshot: None,
        }
    }
}

impl Cache {
    pub fn new() -> Self {
        Self::default()
    }

    fn dirty(&mut self) {
        self.snapshot = None;
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The node at `i`, to change: the cached snapshot is let go first, so that nodes
    /// no snapshot holds any more change in place.
    fn node_at(&mut self, i: usize) -> Option<&mut NodeInfo> {
        self.dirty();
        Arc::make_mut(&mut self.nodes).get_mut(i).map(Arc::make_mut)
    }

    /// Counts a node's images and whether it is virtual (`by` 1), or uncounts them (−1).
    fn count_node<'a>(
        &mut self,
        images: impl Iterator<Item = &'a String>,
        virtual_node: bool,
        by: isize,
    ) {
        let mut images = images.peekable();
        if images.peek().is_some() {
            let counts = Arc::make_mut(&mut self.image_nodes);
            for image in images {
                let c = counts.entry(image.clone()).or_default();
                *c = c.saturating_add_signed(by);
                if *c == 0 {
                    counts.remove(image);
                }
            }
        }
        if virtual_node {
            self.virtual_nodes = self.virtual_nodes.saturating_add_signed(by);
        }
    }

    pub fn apply_node(&mut self, node: Arc<Node>) {
        let name = node.metadata.name.clone().unwrap_or_default();
        if let Some(&i) = self.index.get(&name) {
            // Pods counted by topology move with a node's labels.
            let relabelled = self.nodes[i].labels() != node_labels(&node);
            if relabelled {
                self.topology.node(&self.nodes[i], -1);
                // kube's node tree moves the node at once, its snapshot's list only at
                // the next node added or deleted: the same here.
                self.tree.update(
                    &name,
                    &zone_key(self.nodes[i].labels()),
                    &zone_key(node_labels(&node)),
                );
            }
            let Some(info) = self.node_at(i) else {
                return;
            };
            let changed = info.set_node(node);
            let (new_images, now_virtual): (Vec<String>, bool) = match &changed {
                Some(_) => (
                    info.images.keys().cloned().collect(),
                    info.cluster.is_some(),
                ),
                None => (Vec::new(), false),
            };
            if relabelled {
                self.topology.node(&self.nodes[i], 1);
            }
            if let Some((old_images, was_virtual)) = changed {
                self.count_node(old_images.keys(), was_virtual, -1);
                self.count_node(new_images.iter(), now_virtual, 1);
            }
        } else {
            self.dirty();
            self.tree.add(&name, &zone_key(node_labels(&node)));
            self.order_stale = true;
            let mut info = NodeInfo::new(node);
            for pod in self.waiting.remove(&name).unwrap_or_default() {
                info.add_pod(pod);
            }
            self.topology.node(&info, 1);
            self.count_node(info.images.keys(), info.cluster.is_some(), 1);
            Arc::make_mut(&mut self.index).insert(name, self.nodes.len());
            Arc::make_mut(&mut self.nodes).push(Arc::new(info));
        }
    }

    pub fn delete_node(&mut self, name: &str) {
        let Some(&i) = self.index.get(name) else {
            return;
        };
        self.dirty();
        let info = Arc::make_mut(&mut self.nodes).remove(i);
        self.tree.remove(name, &zone_key(info.labels()));
        self.order_stale = true;
        self.topology.node(&info, -1);
        self.count_node(info.images.keys(), info.cluster.is_some(), -1);
        // Pods stay known until their own deletion arrives; park them under the node name.
        if !info.pods.is_empty() {
            self.waiting.insert(name.to_string(), info.pods.clone());
        }
        self.reindex();
    }

    fn reindex(&mut self) {
        self.index = Arc::new(
            self.nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (n.name.to_string(), i))
                .collect(),
        );
    }

    /// A pod from the watch. Bound pods are placed on their node (confirming an assumed
    /// one); unbound pods are dropped from the cache unless assumed.
    pub fn apply_pod(&mut self, pod: Arc<Pod>) {
        let key = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        );
        let Some(node) = bound_node(&pod).map(String::from) else {
            // Still unbound: an assumed pod keeps its place until the binding shows up.
            if self.pods.get(&key).is_some_and(|e| !e.assumed) {
                self.remove_pod(&key);
            }
            return;
        };
        if let Some(e) = self.pods.get(&key)
            && e.node == node
            && e.info.meta.resource_version == pod.metadata.resource_version
            && !e.assumed
        {
            return;
        }
        self.remove_pod(&key);
        self.add_pod(key, node, Arc::new(PodInfo::compact(pod)), false);
    }

    fn add_pod(&mut self, key: String, node: String, info: Arc<PodInfo>, assumed: bool) {
        self.dirty();
        match self.index.get(&node).copied() {
            Some(i) => {
                let n = Arc::make_mut(&mut Arc::make_mut(&mut self.nodes)[i]);
                n.add_pod(info.clone());
                self.topology.place(&info, n, 1);
            }
            None => self
                .waiting
                .entry(node.clone())
                .or_default()
                .push(info.clone()),
        }
        self.pods.insert(
            key,
            PodEntry {
                node,
                info,
                assumed,
            },
        );
        self.dirty();
    }

    pub fn remove_pod(&mut self, key: &str) {
        let Some(entry) = self.pods.remove(key) else {
            return;
        };
        self.dirty();
        if let Some(i) = self.index.get(&entry.node).copied() {
            let n = Arc::make_mut(&mut Arc::make_mut(&mut self.nodes)[i]);
            if n.remove_pod(key) {
                self.topology.place(&entry.info, n, -1);
            }
        } else if let Some(w) = self.waiting.get_mut(&entry.node) {
            w.retain(|p| p.key != key);
        }
        self.dirty();
    }

    /// Counts a pod on `node` before its binding lands.
    pub fn assume(&mut self, pod: Arc<PodInfo>, node: &str) {
        let key = pod.key.clone();
        self.remove_pod(&key);
        self.add_pod(key, node.to_string(), pod, true);
    }

    /// The binding failed: the assumption is dropped — only that pod's (`uid`; empty: any),
    /// not a later pod of the same name assumed meanwhile.
    pub fn forget(&mut self, key: &str, uid: &str) {
        if self
            .pods
            .get(key)
            .is_some_and(|e| e.assumed && (uid.is_empty() || e.info.uid == uid))
        {
            self.remove_pod(key);
        }
    }

    /// The pod under `key`, bound or assumed.
    pub fn pod_info(&self, key: &str) -> Option<&Arc<PodInfo>> {
        self.pods.get(key).map(|e| &e.info)
    }

    pub fn is_assumed(&self, key: &str) -> bool {
        self.pods.get(key).is_some_and(|e| e.assumed)
    }

    /// kube's scheduler_cache_size: the nodes, the pods (bound or assumed, on a node
    /// the cache holds or not) and the assumed ones.
    pub fn sizes(&self) -> (usize, usize, usize) {
        let assumed = self.pods.values().filter(|e| e.assumed).count();
        (self.nodes.len(), self.pods.len(), assumed)
    }

    /// The pods assumed and not yet seen bound.
    pub fn assumed_pods(&self) -> impl Iterator<Item = &Arc<PodInfo>> {
        self.pods.values().filter(|e| e.assumed).map(|e| &e.info)
    }

    /// The UID of the pod assumed under `key`, if any.
    pub fn assumed_uid(&self, key: &str) -> Option<&str> {
        self.pods
            .get(key)
            .filter(|e| e.assumed)
            .map(|e| e.info.uid.as_str())
    }

    /// The node the pod under `key` is bound or assumed to.
    pub fn node_of(&self, key: &str) -> Option<&str> {
        self.pods.get(key).map(|e| e.node.as_str())
    }

    pub fn set_namespace(&mut self, name: String, labels: BTreeMap<String, String>) {
        Arc::make_mut(&mut self.namespaces).insert(name, labels);
        self.dirty();
    }

    pub fn delete_namespace(&mut self, name: &str) {
        Arc::make_mut(&mut self.namespaces).remove(name);
        self.dirty();
    }

    pub fn volumes_mut(&mut self) -> &mut VolumeObjects {
        self.dirty();
        Arc::make_mut(&mut self.volumes)
    }

    /// The DeviceClasses and ResourceSlices, to change.
    pub fn devices_mut(&mut self) -> &mut DeviceObjects {
        self.dirty();
        Arc::make_mut(&mut self.devices)
    }

    pub fn set_pdbs(&mut self, pdbs: Vec<Arc<k8s_openapi::api::policy::v1::PodDisruptionBudget>>) {
        self.pdbs = Arc::new(pdbs);
        self.dirty();
    }

    pub fn set_policies(&mut self, policies: Arc<crate::policies::PolicySet>) {
        self.policies = policies;
        self.dirty();
    }

    /// The placement policies as last set.
    pub fn policies(&self) -> Arc<crate::policies::PolicySet> {
        self.policies.clone()
    }

    /// The labels of node `name`, if the cache has it.
    pub fn labels_of_node(&self, name: &str) -> Option<BTreeMap<String, String>> {
        let i = *self.index.get(name)?;
        self.nodes.get(i).map(|n| node_labels(&n.node).clone())
    }

    pub fn pod_selectors_mut(&mut self) -> &mut crate::pod_selectors::PodSelectors {
        self.dirty();
        Arc::make_mut(&mut self.pod_selectors)
    }

    /// Puts `nodes` in the node tree's order.
    fn follow_tree(&mut self) {
        self.order_stale = false;
        let order = self.tree.list();
        if order.len() == self.nodes.len()
            && order
                .iter()
                .zip(self.nodes.iter())
                .all(|(a, n)| *a == &*n.name)
        {
            return;
        }
        let mut nodes: Vec<Arc<NodeInfo>> = order
            .iter()
            .filter_map(|name| self.index.get(*name).map(|&i| self.nodes[i].clone()))
            .collect();
        if nodes.len() != self.nodes.len() {
            // Not in the tree (cannot happen: every node added is): kept, at the end.
            let listed: HashSet<&str> = order.iter().copied().collect();
            nodes.extend(
                self.nodes
                    .iter()
                    .filter(|n| !listed.contains(&*n.name))
                    .cloned(),
            );
        }
        self.dirty();
        self.nodes = Arc::new(nodes);
        self.reindex();
    }

    pub fn snapshot(&mut self) -> Snapshot {
        if self.order_stale {
            self.follow_tree();
        }
        if self.topology.keep_asked(&self.nodes) {
            self.dirty();
        }
        if let Some(s) = &self.snapshot {
            return s.clone();
        }
        let snap = Snapshot {
            virtual_nodes: self.virtual_nodes,
            nodes: self.nodes.clone(),
            index: self.index.clone(),
            namespaces: self.namespaces.clone(),
            image_nodes: self.image_nodes.clone(),
            volumes: self.volumes.clone(),
            devices: self.devices.clone(),
            pdbs: self.pdbs.clone(),
            pod_selectors: self.pod_selectors.clone(),
            policies: self.policies.clone(),
            topology: self.topology.clone(),
        };
        self.snapshot = Some(snap.clone());
        snap
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    fn node(name: &str) -> Arc<Node> {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        Arc::new(n)
    }

    fn pod(name: &str, node: Option<&str>, rv: &str) -> Arc<Pod> {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("ns".into());
        p.metadata.resource_version = Some(rv.into());
        p.spec = Some(PodSpec {
            node_name: node.map(String::from),
            ..Default::default()
        });
        Arc::new(p)
    }

    fn pods_on(c: &mut Cache, node: &str) -> Vec<String> {
        let s = c.snapshot();
        let mut v: Vec<String> = s
            .get(node)
            .map(|n| n.pods.iter().map(|p| p.key.clone()).collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    #[test]
    fn pods_follow_their_nodes() {
        let mut c = Cache::new();
        c.apply_pod(pod("early", Some("n1"), "1"));
        c.apply_node(node("n1"));
        c.apply_pod(pod("later", Some("n1"), "1"));
        c.apply_pod(pod("unbound", None, "1"));
        assert_eq!(pods_on(&mut c, "n1"), vec!["ns/early", "ns/later"]);
        c.remove_pod("ns/early");
        assert_eq!(pods_on(&mut c, "n1"), vec!["ns/later"]);
    }

    /// Bound pods are kept compact, on real and virtual nodes alike (pod sync decodes
    /// those on a virtual node one at a time).
    #[test]
    fn bound_pods_are_compact() {
        let mut c = Cache::new();
        c.apply_node(node("n1"));
        let mut v = (*node("vn")).clone();
        v.metadata.labels = Some(
            [(
                mcsched_shared::keys::CLUSTER_LABEL.to_string(),
                "east".to_string(),
            )]
            .into(),
        );
        c.apply_node(Arc::new(v));
        c.apply_pod(pod("real", Some("n1"), "1"));
        c.apply_pod(pod("sent", Some("vn"), "1"));
        let s = c.snapshot();
        let on = |n: &str| s.get(n).map(|n| n.pods[0].clone()).expect("pod");
        assert!(on("n1").is_compact());
        assert!(on("vn").is_compact());
        assert_eq!(*on("n1").pod(), *pod("real", Some("n1"), "1"));
        assert_eq!(*on("vn").pod(), *pod("sent", Some("vn"), "1"));
    }

    #[test]
    fn assumed_pods_count_until_confirmed_or_forgotten() {
        let mut c = Cache::new();
        c.apply_node(node("n1"));
        let info = Arc::new(PodInfo::new(pod("p", None, "1")));
        c.assume(info.clone(), "n1");
        assert_eq!(pods_on(&mut c, "n1"), vec!["ns/p"]);
        // The watch still shows it unbound: the assumption holds.
        c.apply_pod(pod("p", None, "2"));
        assert!(c.is_assumed("ns/p"));
        assert_eq!(c.sizes(), (1, 1, 1));
        // Forgetting another pod of the same name (another UID) leaves this one.
        c.forget("ns/p", "someone-else");
        assert_eq!(c.assumed_uid("ns/p"), Some(info.uid.as_str()));
        c.forget("ns/p", &info.uid);
        assert!(pods_on(&mut c, "n1").is_empty());
        c.assume(info, "n1");
        c.apply_pod(pod("p", Some("n1"), "3"));
        assert!(!c.is_assumed("ns/p"));
        assert_eq!(c.sizes(), (1, 1, 0));
        assert_eq!(pods_on(&mut c, "n1"), vec!["ns/p"]);
    }

    fn with_images(name: &str, images: &[&str], virtual_node: bool) -> Arc<Node> {
        let mut n = (*node(name)).clone();
        n.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            images: Some(
                images
                    .iter()
                    .map(|i| k8s_openapi::api::core::v1::ContainerImage {
                        names: Some(vec![i.to_string()]),
                        size_bytes: Some(1),
                    })
                    .collect(),
            ),
            ..Default::default()
        });
        if virtual_node {
            n.metadata.labels = Some(BTreeMap::from([(
                mcsched_shared::keys::CLUSTER_LABEL.to_string(),
                "east".to_string(),
            )]));
        }
        Arc::new(n)
    }

    /// Image and virtual-node counts kept as nodes come, change and go equal a recount.
    #[test]
    fn node_counts_follow_nodes() {
        let mut c = Cache::new();
        c.apply_node(with_images("n1", &["a", "b"], false));
        c.apply_node(with_images("n2", &["b"], true));
        let held = c.snapshot();
        c.apply_node(with_images("n1", &["b", "c"], false));
        c.apply_node(with_images("n2", &["b"], false));
        c.apply_node(with_images("n3", &["c"], true));
        c.delete_node("n1");
        let s = c.snapshot();
        let (images, virtual_nodes) = crate::snapshot::node_counts(&s.nodes);
        assert_eq!(*s.image_nodes, images);
        assert_eq!(s.virtual_nodes, virtual_nodes);
        assert_eq!(images.get("b"), Some(&1));
        assert_eq!(virtual_nodes, 1);
        // The snapshot taken before is untouched.
        assert_eq!(held.image_nodes.get("b"), Some(&2));
        assert_eq!(held.virtual_nodes, 1);
    }

    fn zoned(name: &str, zone: &str) -> Arc<Node> {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.metadata.labels = Some(BTreeMap::from([(
            "topology.kubernetes.io/zone".to_string(),
            zone.to_string(),
        )]));
        Arc::new(n)
    }

    fn order(c: &mut Cache) -> Vec<String> {
        let s = c.snapshot();
        assert!(
            s.nodes
                .iter()
                .enumerate()
                .all(|(i, n)| s.index.get(&*n.name) == Some(&i)),
            "the index follows the order"
        );
        s.nodes.iter().map(|n| n.name.to_string()).collect()
    }

    /// As kube's snapshot lists its node tree: zone by zone, and a relabelled node moves
    /// only once a node is added or deleted.
    #[test]
    fn snapshots_list_nodes_interleaved_by_zone() {
        let mut c = Cache::new();
        for (n, z) in [
            ("a1", "a"),
            ("a2", "a"),
            ("a3", "a"),
            ("b1", "b"),
            ("b2", "b"),
        ] {
            c.apply_node(zoned(n, z));
        }
        c.apply_pod(pod("p", Some("b1"), "1"));
        assert_eq!(order(&mut c), ["a1", "b1", "a2", "b2", "a3"]);
        assert_eq!(pods_on(&mut c, "b1"), ["ns/p"]);
        c.apply_node(zoned("a1", "b"));
        assert_eq!(order(&mut c), ["a1", "b1", "a2", "b2", "a3"]);
        c.delete_node("a3");
        assert_eq!(order(&mut c), ["a2", "b1", "b2", "a1"]);
        c.apply_node(zoned("c1", "c"));
        assert_eq!(order(&mut c), ["a2", "b1", "c1", "b2", "a1"]);
        assert_eq!(pods_on(&mut c, "b1"), ["ns/p"]);
    }

    #[test]
    fn snapshots_are_stable_copies() {
        let mut c = Cache::new();
        c.apply_node(node("n1"));
        let before = c.snapshot();
        c.apply_pod(pod("p", Some("n1"), "1"));
        let after = c.snapshot();
        assert!(before.get("n1").is_some_and(|n| n.pods.is_empty()));
        assert!(after.get("n1").is_some_and(|n| n.pods.len() == 1));
    }
}
