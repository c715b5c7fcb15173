//! Which slices and devices a node can use (kube's NodeMatches).

use k8s_openapi::api::core::v1::{Node, NodeSelector};
use mcsched_shared::selectors::{node_labels, node_selector_matches};

pub fn node_matches(
    node: &Node,
    node_name: Option<&str>,
    all_nodes: bool,
    selector: Option<&NodeSelector>,
) -> bool {
    match (node_name.filter(|n| !n.is_empty()), all_nodes, selector) {
        (Some(name), _, _) => node.metadata.name.as_deref() == Some(name),
        (None, true, _) => true,
        (None, false, Some(sel)) => node_selector_matches(
            sel,
            node_labels(node),
            node.metadata.name.as_deref().unwrap_or_default(),
        ),
        _ => false,
    }
}
