//! `kubectl mcsched get clusters`: the joined leaves as the host sees them — their join
//! Secret and virtual node, kept current by the agent.

use std::collections::BTreeMap;

use anyhow::Context;
use clap::Args;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use mcsched_shared::keys;
use mcsched_shared::quantity::Quantity as Parsed;
use mcsched_shared::resources::{self, Resources};
use serde::Serialize;

use crate::kube_context::KubeArgs;
use crate::printer::{Columns, Item, PrintArgs};

/// List the joined leaf clusters (join Secrets in -n NAMESPACE, default mcsched-system).
#[derive(Debug, Args)]
pub struct GetArgs {
    #[command(flatten)]
    pub print: PrintArgs,
}

/// A cluster as `-o json` shows it: not an object the API serves, but the CLI's view of the
/// join Secret and the virtual node, in the shape of one (`kind: Cluster`, `metadata`,
/// `status`) so that kubectl's paths (`{.items[*].metadata.name}`) read it.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRow {
    #[serde(skip)]
    pub name: String,
    pub virtual_node: String,
    /// True, False, Unknown, or "-" when the virtual node is missing.
    pub ready: String,
    pub version: String,
    pub nodes: String,
    /// The leaf's usable nodes' allocatable (the virtual node's capacity).
    pub allocatable: String,
    /// What is left for new pods: the virtual node's allocatable (what the leaf's own pods
    /// leave) minus the requests of the host pods running there.
    pub free: String,
    /// Host pods bound to the virtual node, i.e. synced to the leaf.
    pub pods: usize,
    /// The virtual node's topology and cost labels, which join sets (`-o wide`).
    pub region: String,
    pub zone: String,
    pub provider: String,
    pub cost: String,
    #[serde(skip)]
    pub age: String,
    /// When the join Secret was created.
    #[serde(skip)]
    pub created: Option<String>,
}

const HEADERS: Columns<'static> = Columns {
    headers: &[
        "NAME",
        "VIRTUAL NODE",
        "READY",
        "VERSION",
        "NODES",
        "ALLOCATABLE",
        "FREE",
        "PODS",
        "AGE",
    ],
    wide: &["REGION", "ZONE", "PROVIDER", "COST"],
};

fn item(r: &ClusterRow) -> Item {
    let mut metadata = serde_json::json!({"name": r.name});
    if let Some(t) = &r.created {
        metadata["creationTimestamp"] = t.clone().into();
    }
    Item {
        object: serde_json::json!({"kind": "Cluster", "metadata": metadata, "status": r}),
        resource: "cluster.mcsched.io".into(),
        name: r.name.clone(),
        cells: vec![
            r.name.clone(),
            r.virtual_node.clone(),
            r.ready.clone(),
            r.version.clone(),
            r.nodes.clone(),
            r.allocatable.clone(),
            r.free.clone(),
            r.pods.to_string(),
            r.age.clone(),
        ],
        wide: vec![
            r.region.clone(),
            r.zone.clone(),
            r.provider.clone(),
            r.cost.clone(),
        ],
    }
}

pub async fn run(kube: &KubeArgs, args: GetArgs) -> anyhow::Result<()> {
    let namespace = kube.namespace_or(keys::SYSTEM_NAMESPACE).to_string();
    let client = kube.client().await?;
    let rows = collect(&client, &namespace).await?;
    if rows.is_empty() && args.print.is_table() {
        eprintln!("No leaf clusters joined (no join Secrets in namespace {namespace}).");
        return Ok(());
    }
    let items: Vec<Item> = rows.iter().map(item).collect();
    print!(
        "{}",
        crate::printer::print(args.print.format(), args.print.no_headers, &HEADERS, &items)?
    );
    Ok(())
}

async fn collect(client: &Client, namespace: &str) -> anyhow::Result<Vec<ClusterRow>> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let joined = secrets
        .list_metadata(&ListParams::default().labels(keys::CLUSTER_LABEL))
        .await
        .with_context(|| format!("listing join Secrets in namespace {namespace}"))?;
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::all(client.clone());
    let mut rows = Vec::new();
    for s in joined.items {
        let Some(name) = s.labels().get(keys::CLUSTER_LABEL).cloned() else {
            continue;
        };
        let node_name = keys::virtual_node_name(&name);
        let node = nodes
            .get_opt(&node_name)
            .await
            .with_context(|| format!("reading node {node_name}"))?;
        let on_node = pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={node_name}")))
            .await
            .with_context(|| format!("listing pods on {node_name}"))?
            .items;
        let created = s.metadata.creation_timestamp.as_ref();
        let age = created.map(|t| age(t.0)).unwrap_or_else(|| "-".into());
        let mut r = row(name, node_name, node.as_ref(), &on_node, age);
        r.created = created.map(|t| t.0.to_string());
        rows.push(r);
    }
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(rows)
}

fn row(
    name: String,
    node_name: String,
    node: Option<&Node>,
    pods: &[Pod],
    age: String,
) -> ClusterRow {
    let status = node.and_then(|n| n.status.as_ref());
    let ready = match node {
        None => "-".to_string(),
        Some(_) => status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status.clone())
            .unwrap_or_else(|| "Unknown".into()),
    };
    let version = status
        .and_then(|s| s.node_info.as_ref())
        .map(|i| i.kubelet_version.clone())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "-".into());
    let nodes = node
        .and_then(|n| {
            n.annotations()
                .get(keys::LEAF_NODE_COUNT_ANNOTATION)
                .cloned()
        })
        .unwrap_or_else(|| "-".into());
    let label = |key: &str| {
        node.and_then(|n| n.labels().get(key).cloned())
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "-".into())
    };
    ClusterRow {
        region: label(keys::REGION_LABEL),
        zone: label(keys::ZONE_LABEL),
        provider: label(keys::PROVIDER_LABEL),
        cost: label(keys::COST_LABEL),
        created: None,
        name,
        virtual_node: if node.is_some() {
            node_name
        } else {
            format!("{node_name} (missing)")
        },
        ready,
        version,
        nodes,
        allocatable: resources(status.and_then(|s| s.capacity.as_ref())),
        free: status
            .and_then(|s| s.allocatable.as_ref())
            .map(|a| left_after(a, pods))
            .as_ref()
            .map_or_else(|| "-".into(), |m| resources(Some(m))),
        pods: pods.len(),
        age,
    }
}

/// `allocatable` minus the requests of the pods that still hold them (not Succeeded or
/// Failed), as the scheduler counts them; a pod whose requests do not parse counts as one
/// pod with no requests.
fn left_after(
    allocatable: &BTreeMap<String, Quantity>,
    pods: &[Pod],
) -> BTreeMap<String, Quantity> {
    let mut used = Resources::default();
    let mut running = 0i64;
    for p in pods {
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            continue;
        }
        running += 1;
        if let Ok(r) = resources::pod_requests(p) {
            used.add(&r);
        }
    }
    let mut left = allocatable.clone();
    let mut put = |key: &str, value: Option<i64>, used: i64, unit: &str| {
        if let Some(v) = value {
            left.insert(key.into(), Quantity(format!("{}{unit}", (v - used).max(0))));
        }
    };
    let parse = |key: &str, milli: bool| {
        allocatable
            .get(key)
            .and_then(|q| Parsed::parse(&q.0).ok())
            .map(|q| if milli { q.milli_value() } else { q.value() })
    };
    put(
        resources::CPU,
        parse(resources::CPU, true),
        used.milli_cpu,
        "m",
    );
    put(
        resources::MEMORY,
        parse(resources::MEMORY, false),
        used.memory,
        "",
    );
    put(resources::PODS, parse(resources::PODS, false), running, "");
    left
}

/// `cpu 16, memory 32Gi, pods 220`, or `-`.
fn resources(list: Option<&BTreeMap<String, Quantity>>) -> String {
    let Some(list) = list else {
        return "-".into();
    };
    let mut parts = Vec::new();
    if let Some(q) = list
        .get("cpu")
        .and_then(|q| Parsed::parse(&q.0).ok())
        .map(|q| q.milli_value())
    {
        parts.push(format!("cpu {}", cpu(q)));
    }
    if let Some(q) = list
        .get("memory")
        .and_then(|q| Parsed::parse(&q.0).ok())
        .map(|q| q.value())
    {
        parts.push(format!("memory {}", bytes(q)));
    }
    if let Some(q) = list.get("pods") {
        parts.push(format!("pods {}", q.0));
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

fn cpu(millis: i64) -> String {
    if millis % 1000 == 0 {
        (millis / 1000).to_string()
    } else {
        format!("{millis}m")
    }
}

fn bytes(b: i64) -> String {
    for (unit, size) in [
        ("Ti", 1i64 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ] {
        if b >= size && b % size == 0 {
            return format!("{}{unit}", b / size);
        }
    }
    for (unit, size) in [("Gi", 1i64 << 30), ("Mi", 1 << 20)] {
        if b >= size {
            return format!("{:.1}{unit}", b as f64 / size as f64);
        }
    }
    b.to_string()
}

/// kubectl's short ages: 45s, 12m, 5h, 3d.
pub fn age(t: k8s_openapi::jiff::Timestamp) -> String {
    let secs = (k8s_openapi::jiff::Timestamp::now().as_second() - t.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_row_from_a_virtual_node() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "mcsched-east", "annotations": {"mcsched.io/leaf-nodes": "4"},
                "labels": {"topology.kubernetes.io/region": "eu"}},
            "status": {
                "capacity": {"cpu": "16", "memory": "32Gi", "pods": "440"},
                "allocatable": {"cpu": "7500m", "memory": "30Gi", "pods": "431"},
                "conditions": [{"type": "Ready", "status": "True"}],
                "nodeInfo": {"kubeletVersion": "v1.36.3", "architecture": "", "bootID": "",
                    "containerRuntimeVersion": "", "kernelVersion": "", "kubeProxyVersion": "",
                    "machineID": "", "operatingSystem": "", "osImage": "", "systemUUID": ""}
            }
        }))
        .expect("node");
        let pod = |cpu: &str, phase: &str| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
                "status": {"phase": phase}
            }))
            .expect("pod")
        };
        let pods = [
            pod("500m", "Running"),
            pod("1", "Pending"),
            pod("4", "Succeeded"),
        ];
        let r = row(
            "east".into(),
            "mcsched-east".into(),
            Some(&node),
            &pods,
            "5m".into(),
        );
        assert_eq!(r.ready, "True");
        assert_eq!(r.version, "v1.36.3");
        assert_eq!(r.nodes, "4");
        assert_eq!(r.allocatable, "cpu 16, memory 32Gi, pods 440");
        assert_eq!(
            r.free, "cpu 6, memory 28Gi, pods 429",
            "finished pods hold nothing"
        );
        assert_eq!(r.pods, 3);
        let missing = row("west".into(), "mcsched-west".into(), None, &[], "1s".into());
        assert_eq!(missing.ready, "-");
        assert_eq!(missing.virtual_node, "mcsched-west (missing)");
        assert_eq!((r.region.as_str(), r.zone.as_str()), ("eu", "-"));
        let table = crate::printer::print(
            &crate::printer::OutputFormat::Table,
            false,
            &HEADERS,
            &[item(&r)],
        )
        .expect("table");
        assert!(
            table.starts_with("NAME   VIRTUAL NODE   READY   VERSION"),
            "{table}"
        );
        let json = serde_json::to_value(item(&r).object).expect("json");
        assert_eq!(json["metadata"]["name"], "east");
        assert_eq!(json["status"]["virtualNode"], "mcsched-east");
        assert_eq!(json["status"]["pods"], 3);
    }
}
