//! Facts about a Node object that every placement decision starts from.

use k8s_openapi::api::core::v1::Node;

use crate::resources::{ResourceError, Resources};

pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

pub fn is_unschedulable(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

pub fn allocatable(node: &Node) -> Result<Resources, ResourceError> {
    match node.status.as_ref().and_then(|s| s.allocatable.as_ref()) {
        Some(a) => Resources::from_map(a),
        None => Ok(Resources::default()),
    }
}

/// `status.declaredFeatures`: the features the node's kubelet declares, sorted (the API
/// server refuses an unsorted list).
pub fn declared_features(node: &Node) -> &[String] {
    node.status
        .as_ref()
        .and_then(|s| s.declared_features.as_deref())
        .unwrap_or_default()
}

/// Every feature some node of `nodes` declares, sorted and without duplicates: what a
/// virtual node declares for its leaf's nodes, so that the host's NodeDeclaredFeatures
/// refuses it only for a pod no leaf node could take (the leaf check then asks of each
/// leaf node all that the pod needs).
pub fn declared_features_union<'a>(nodes: impl IntoIterator<Item = &'a Node>) -> Vec<String> {
    let all: std::collections::BTreeSet<&String> =
        nodes.into_iter().flat_map(declared_features).collect();
    all.into_iter().cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeStatus;

    fn declaring(features: Option<&[&str]>) -> Node {
        Node {
            status: Some(NodeStatus {
                declared_features: features.map(|fs| fs.iter().map(|f| f.to_string()).collect()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_union_of_declared_features_is_sorted_and_unique() {
        let nodes = [
            declaring(Some(&[
                "UserNamespacesHostNetworkSupport",
                "VolumeBindMountOptions",
            ])),
            declaring(None),
            Node::default(),
            declaring(Some(&[
                "RestartAllContainersOnContainerExits",
                "UserNamespacesHostNetworkSupport",
            ])),
        ];
        assert_eq!(
            declared_features_union(&nodes),
            [
                "RestartAllContainersOnContainerExits",
                "UserNamespacesHostNetworkSupport",
                "VolumeBindMountOptions"
            ]
        );
        assert_eq!(declared_features(&nodes[0]).len(), 2);
        assert!(declared_features(&nodes[2]).is_empty());
        assert!(declared_features_union(&nodes[1..3]).is_empty());
        assert!(declared_features_union(&[]).is_empty());
    }
}
