//! Placements checked against what each workload asks, on the cluster as the run left it:
//! a scheduler that is fast because it skips a constraint must not pass. Every real
//! node's allocatable holds its pods' requests; SchedulingPodAntiAffinity's pods share no
//! hostname; TopologySpreading's zones differ by at most maxSkew; SchedulingNodeAffinity's
//! pods sit in zone1 or zone2. Bind-only places pods without looking, so it is not judged.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::ListParams;
use kube::{Api, Client};
use mcsched_shared::keys;
use mcsched_shared::resources::{Resources, pod_requests};

use crate::workloads::{Kind, MEASURED_LABEL};

/// The pod template's `maxSkew` for TopologySpreading.
const MAX_SKEW: usize = 5;
const ZONE: &str = "topology.kubernetes.io/zone";
const HOSTNAME: &str = "kubernetes.io/hostname";

/// Reads the host's nodes and pods and returns every broken constraint, one line each.
pub async fn check(client: &Client, kind: Kind) -> anyhow::Result<Vec<String>> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    Ok(violations(kind, &nodes, &pods))
}

fn label<'a>(labels: Option<&'a BTreeMap<String, String>>, key: &str) -> Option<&'a str> {
    labels.and_then(|l| l.get(key)).map(String::as_str)
}

fn bound_to(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

fn is_measured(pod: &Pod) -> bool {
    label(pod.metadata.labels.as_ref(), MEASURED_LABEL) == Some("true")
}

pub fn violations(kind: Kind, nodes: &[Node], pods: &[Pod]) -> Vec<String> {
    let mut out = Vec::new();
    let by_name: HashMap<&str, &Node> = nodes
        .iter()
        .filter_map(|n| n.metadata.name.as_deref().map(|name| (name, n)))
        .collect();

    // Requests per real node (virtual nodes answer for their leaves, checked apart).
    let mut used: HashMap<&str, Resources> = HashMap::new();
    for pod in pods {
        let Some(node) = bound_to(pod) else { continue };
        match pod_requests(pod) {
            Ok(r) => {
                let entry = used.entry(node).or_default();
                entry.add(&r);
                entry.allowed_pods = entry.allowed_pods.saturating_add(1);
            }
            Err(e) => out.push(format!(
                "pod {}: {e}",
                pod.metadata.name.as_deref().unwrap_or_default()
            )),
        }
    }
    for (name, u) in &used {
        let Some(node) = by_name.get(name) else {
            out.push(format!("pods bound to node {name}, which does not exist"));
            continue;
        };
        if label(node.metadata.labels.as_ref(), keys::CLUSTER_LABEL).is_some() {
            continue;
        }
        let allocatable = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .map(Resources::from_map);
        let Some(Ok(a)) = allocatable else {
            out.push(format!("node {name}: no readable allocatable"));
            continue;
        };
        if u.milli_cpu > a.milli_cpu || u.memory > a.memory || u.allowed_pods > a.allowed_pods {
            out.push(format!(
                "node {name} over its allocatable: cpu {}m of {}m, memory {} of {}, pods {} of {}",
                u.milli_cpu, a.milli_cpu, u.memory, a.memory, u.allowed_pods, a.allowed_pods
            ));
        }
    }

    let node_label = |pod: &Pod, key: &str| -> Option<String> {
        let node = by_name.get(bound_to(pod)?)?;
        label(node.metadata.labels.as_ref(), key).map(String::from)
    };
    let with_color = |color: &'static str| {
        pods.iter()
            .filter(move |p| label(p.metadata.labels.as_ref(), "color") == Some(color))
            .filter(|p| bound_to(p).is_some())
    };
    match kind {
        Kind::SchedulingPodAntiAffinity => {
            let mut per_host: BTreeMap<String, usize> = BTreeMap::new();
            for p in with_color("green") {
                let host = node_label(p, HOSTNAME).unwrap_or_default();
                *per_host.entry(host).or_default() += 1;
            }
            for (host, n) in per_host.iter().filter(|(_, n)| **n > 1) {
                out.push(format!(
                    "{n} anti-affine pods share hostname {host:?} (required anti-affinity)"
                ));
            }
        }
        Kind::TopologySpreading => {
            // Every zone of a node counts, with zero pods if none landed there.
            let mut per_zone: BTreeMap<String, usize> = nodes
                .iter()
                .filter_map(|n| label(n.metadata.labels.as_ref(), ZONE))
                .map(|z| (z.to_string(), 0))
                .collect();
            for p in with_color("blue").filter(|p| is_measured(p)) {
                match node_label(p, ZONE) {
                    Some(z) => *per_zone.entry(z).or_default() += 1,
                    None => out.push(format!(
                        "spread pod {} on a node without a zone",
                        p.metadata.name.as_deref().unwrap_or_default()
                    )),
                }
            }
            let (min, max) = (
                per_zone.values().min().copied().unwrap_or(0),
                per_zone.values().max().copied().unwrap_or(0),
            );
            if max - min > MAX_SKEW {
                out.push(format!(
                    "zones skewed by {} > maxSkew {MAX_SKEW}: {per_zone:?}",
                    max - min
                ));
            }
        }
        Kind::SchedulingNodeAffinity => {
            for p in pods.iter().filter(|p| is_measured(p)) {
                let zone = node_label(p, ZONE);
                if bound_to(p).is_some() && !matches!(zone.as_deref(), Some("zone1" | "zone2")) {
                    out.push(format!(
                        "pod {} on a node in zone {zone:?}, outside its required zone1/zone2",
                        p.metadata.name.as_deref().unwrap_or_default()
                    ));
                }
            }
        }
        Kind::SchedulingBasic
        | Kind::MultiCluster
        | Kind::MultiClusterFragmented
        | Kind::MultiClusterManyLeaves => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::{self, INIT_NAMESPACE, MEASURED_NAMESPACE, Phase};

    fn parse<T: k8s_openapi::serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).expect("valid object")
    }

    fn nodes(kind: Kind, n: usize) -> Vec<Node> {
        (0..n).map(|i| parse(workloads::node(kind, i))).collect()
    }

    fn measured(kind: Kind, i: usize, node: usize) -> Pod {
        parse(workloads::pod(
            kind,
            Phase::Measured,
            MEASURED_NAMESPACE,
            &format!("pod-{i}"),
            "s",
            Some(&workloads::node_name(node)),
        ))
    }

    #[test]
    fn anti_affine_pods_on_one_hostname_are_caught() {
        let kind = Kind::SchedulingPodAntiAffinity;
        let init: Pod = parse(workloads::pod(
            kind,
            Phase::Init,
            INIT_NAMESPACE,
            "init-0",
            "s",
            Some("node-0"),
        ));
        let ok = [init.clone(), measured(kind, 0, 1), measured(kind, 1, 2)];
        assert_eq!(violations(kind, &nodes(kind, 3), &ok), Vec::<String>::new());
        let bad = [init, measured(kind, 0, 0)];
        let v = violations(kind, &nodes(kind, 3), &bad);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("share hostname \"node-0\""), "{v:?}");
    }

    #[test]
    fn a_skew_beyond_max_skew_is_caught() {
        let kind = Kind::TopologySpreading;
        // Nodes 0 and 3 are in moon-1, 1 and 4 in moon-2, 2 and 5 in moon-3.
        let spread: Vec<Pod> = (0..12).map(|i| measured(kind, i, i % 6)).collect();
        assert_eq!(
            violations(kind, &nodes(kind, 6), &spread),
            Vec::<String>::new()
        );
        let piled: Vec<Pod> = (0..6).map(|i| measured(kind, i, 0)).collect();
        let v = violations(kind, &nodes(kind, 6), &piled);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("skewed by 6 > maxSkew 5"), "{v:?}");
    }

    #[test]
    fn overcommitted_nodes_and_wrong_zones_are_caught() {
        let kind = Kind::SchedulingNodeAffinity;
        let mut ns = nodes(kind, 2);
        // 41 pods of 100m on a 4-CPU node.
        let pods: Vec<Pod> = (0..41).map(|i| measured(kind, i, 0)).collect();
        let v = violations(kind, &ns, &pods);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].starts_with("node node-0 over its allocatable: cpu 4100m of 4000m"),
            "{v:?}"
        );
        assert_eq!(violations(kind, &ns, &pods[..40]), Vec::<String>::new());
        ns[1]
            .metadata
            .labels
            .get_or_insert_default()
            .insert(ZONE.into(), "zone3".into());
        let v = violations(kind, &ns, &[measured(kind, 0, 1)]);
        assert!(v[0].contains("outside its required zone1/zone2"), "{v:?}");
    }
}
