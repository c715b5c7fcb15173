//! The topology domains a pod group may be kept in, over host nodes and leaves: a host
//! node is in the domain of its label; a virtual node, for `mcsched.io/cluster`, in its
//! leaf's, and for any other key in every domain its leaf's own nodes have (a leaf with
//! nodes in zones a and b is in both), where its members must then stay.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use mcsched_engine::snapshot::{NodeInfo, PodInfo, Snapshot};
use mcsched_shared::keys;

use super::Shared;

pub(super) struct Domains {
    key: String,
    /// Leaf → the values of `key` among its nodes, for leaves whose nodes are known.
    leaves: BTreeMap<String, BTreeSet<String>>,
}

impl Domains {
    pub(super) fn new(shared: &Shared, key: &str) -> Self {
        let leaves = if key == keys::CLUSTER_LABEL {
            BTreeMap::new()
        } else {
            (shared.leaves.all().into_iter())
                .filter(|c| c.is_synced())
                .map(|c| {
                    let snapshot = c.cache().snapshot();
                    let values = (snapshot.nodes.iter())
                        .filter_map(|n| n.labels().get(key).cloned())
                        .collect();
                    (c.name.clone(), values)
                })
                .collect()
        };
        Domains {
            key: key.to_string(),
            leaves,
        }
    }

    pub(super) fn key(&self) -> &str {
        &self.key
    }

    /// The domains `node` is in.
    pub(super) fn of(&self, node: &NodeInfo) -> BTreeSet<String> {
        if let Some(v) = node.labels().get(&self.key) {
            return BTreeSet::from([v.clone()]);
        }
        match &node.cluster {
            Some(leaf) if self.key == keys::CLUSTER_LABEL => BTreeSet::from([leaf.clone()]),
            Some(leaf) => self.leaves.get(leaf).cloned().unwrap_or_default(),
            None if self.key == keys::CLUSTER_LABEL => {
                BTreeSet::from([keys::HOST_CLUSTER_NAME.to_string()])
            }
            None => BTreeSet::new(),
        }
    }

    pub(super) fn all(&self, snapshot: &Snapshot) -> BTreeSet<String> {
        snapshot.nodes.iter().flat_map(|n| self.of(n)).collect()
    }

    /// Whether `node` is in `domain`: as `of(node).contains(domain)`, without building the
    /// set, since every member's attempt in every domain asks it of every node.
    pub(super) fn contains(&self, node: &NodeInfo, domain: &str) -> bool {
        if let Some(v) = node.labels().get(&self.key) {
            return v == domain;
        }
        match &node.cluster {
            Some(leaf) if self.key == keys::CLUSTER_LABEL => leaf == domain,
            Some(leaf) => self.leaves.get(leaf).is_some_and(|v| v.contains(domain)),
            None => self.key == keys::CLUSTER_LABEL && domain == keys::HOST_CLUSTER_NAME,
        }
    }

    /// Whether placing on `node` in `domain` keeps the member within a leaf's part of it,
    /// so that the leaf check and the copy must be held to it.
    pub(super) fn within_leaf(&self, node: &NodeInfo) -> bool {
        node.cluster.is_some()
            && self.key != keys::CLUSTER_LABEL
            && !node.labels().contains_key(&self.key)
    }

    /// `pod` as a member placed in `domain`: held there in a leaf by the leaf domain
    /// annotation (which the leaf check and the copy read), any earlier one replaced.
    pub(super) fn member_in(&self, pod: &Arc<PodInfo>, domain: &str) -> Arc<PodInfo> {
        let mut object = pod.object().into_owned();
        let annotations = object
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new);
        if self.key == keys::CLUSTER_LABEL {
            if annotations.remove(keys::LEAF_DOMAIN_ANNOTATION).is_none() {
                return pod.clone();
            }
        } else {
            let value = serde_json::json!({ &self.key: domain }).to_string();
            annotations.insert(keys::LEAF_DOMAIN_ANNOTATION.to_string(), value);
        }
        Arc::new(PodInfo::new(Arc::new(object)))
    }
}

/// The leaf domain annotation `pod` carries, to be written on the host's pod before it
/// is bound to a virtual node.
pub(super) fn leaf_domain_of(pod: &PodInfo) -> Option<String> {
    pod.object()
        .metadata
        .annotations
        .as_ref()?
        .get(keys::LEAF_DOMAIN_ANNOTATION)
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;

    fn node(name: &str, cluster: Option<&str>, labels: &[(&str, &str)]) -> NodeInfo {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.metadata.labels = Some(
            (labels.iter())
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        let mut info = NodeInfo::new(Arc::new(n));
        info.cluster = cluster.map(String::from);
        info
    }

    /// `contains` is asked of every node for every member attempt, so it skips building
    /// `of`'s set; it must answer as that set does.
    #[test]
    fn contains_answers_as_the_domains_of_a_node() {
        const ZONE: &str = "topology.kubernetes.io/zone";
        let nodes = [
            node("host-a", None, &[(ZONE, "a")]),
            node("host-bare", None, &[]),
            node("mcsched-east", Some("east"), &[]),
            node("mcsched-west", Some("west"), &[(ZONE, "c")]),
            node("mcsched-gone", Some("gone"), &[]),
            node(
                "mcsched-labelled",
                Some("east"),
                &[(keys::CLUSTER_LABEL, "other")],
            ),
        ];
        let leaves = BTreeMap::from([
            ("east".to_string(), BTreeSet::from(["a".into(), "b".into()])),
            ("west".to_string(), BTreeSet::from(["d".into()])),
        ]);
        for key in [ZONE, keys::CLUSTER_LABEL] {
            let domains = Domains {
                key: key.to_string(),
                leaves: if key == ZONE {
                    leaves.clone()
                } else {
                    BTreeMap::new()
                },
            };
            for n in &nodes {
                for d in ["a", "b", "c", "d", "east", "west", "gone", "other", "host"] {
                    assert_eq!(
                        domains.contains(n, d),
                        domains.of(n).contains(d),
                        "{key}: is {} in {d}",
                        n.name
                    );
                }
            }
        }
    }
}
