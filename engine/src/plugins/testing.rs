//! Builders for plugin unit tests.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Node, NodeStatus, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::snapshot::{NodeInfo, PodInfo};

pub(crate) fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect()
}

/// A node with 4 cpu, 8Gi and 110 pods allocatable, changed by `f`.
pub(crate) fn node_with(name: &str, f: impl FnOnce(&mut Node)) -> NodeInfo {
    let mut node = Node::default();
    node.metadata.name = Some(name.into());
    node.metadata.labels = Some(BTreeMap::from([(
        "kubernetes.io/hostname".to_string(),
        name.to_string(),
    )]));
    node.status = Some(NodeStatus {
        allocatable: Some(quantities(&[
            ("cpu", "4"),
            ("memory", "8Gi"),
            ("pods", "110"),
        ])),
        ..Default::default()
    });
    f(&mut node);
    NodeInfo::new(Arc::new(node))
}

/// A pod `default/p` with one container and no requests, changed by `f`.
pub(crate) fn pod_with(f: impl FnOnce(&mut Pod)) -> PodInfo {
    let mut pod = Pod::default();
    pod.metadata.name = Some("p".into());
    pod.metadata.namespace = Some("default".into());
    pod.metadata.uid = Some("uid-p".into());
    pod.spec = Some(PodSpec {
        containers: vec![Container {
            name: "c".into(),
            ..Default::default()
        }],
        ..Default::default()
    });
    f(&mut pod);
    PodInfo::new(Arc::new(pod))
}

/// A pod named `name` requesting `requests` (e.g. `[("cpu", "1")]`).
pub fn pod_requesting(name: &str, requests: &[(&str, &str)]) -> PodInfo {
    pod_with(|p| {
        p.metadata.name = Some(name.into());
        p.metadata.uid = Some(format!("uid-{name}"));
        if let Some(s) = p.spec.as_mut() {
            s.containers[0].resources = Some(ResourceRequirements {
                requests: Some(quantities(requests)),
                ..Default::default()
            });
        }
    })
}
