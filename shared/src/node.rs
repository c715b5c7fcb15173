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
