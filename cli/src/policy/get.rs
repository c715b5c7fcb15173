//! `kubectl mcsched get policies`: PlacementPolicies (of -n NAMESPACE, or every namespace
//! with -A) and ClusterPlacementPolicies, with the clusters their pods use and whether
//! the agent finds them usable.

use anyhow::Context;
use clap::Args;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use mcsched_shared::policy::{
    ClusterPlacementPolicy, PlacementPolicy, PlacementPolicyStatus, selector_string,
};
use serde::Serialize;

use crate::cluster::get::Format;
use crate::kube_context::KubeArgs;

/// List placement policies: those of -n NAMESPACE (else the kubeconfig context's
/// namespace; every namespace with -A) and the cluster-wide ones.
#[derive(Debug, Args)]
pub struct GetArgs {
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Format,
    /// Namespaced policies of every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRow {
    /// `PlacementPolicy` or `ClusterPlacementPolicy`.
    pub kind: String,
    pub name: String,
    /// Empty for a ClusterPlacementPolicy.
    pub namespace: String,
    pub selector: String,
    pub priority: i32,
    /// `east:8,west:4`; `-` while none of its pods runs.
    pub clusters: String,
    /// What its overrides change in leaf copies, per entry (`west: image; *: env`); `-`
    /// when none.
    pub overrides: String,
    /// The Ready condition's status, and its reason when not True.
    pub ready: String,
}

fn row(
    kind: &str,
    name: String,
    namespace: String,
    spec: &mcsched_shared::policy::PlacementPolicySpec,
    status: Option<&PlacementPolicyStatus>,
) -> PolicyRow {
    let ready = status
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| {
            if c.status == "True" {
                c.status.clone()
            } else {
                format!("{} ({}: {})", c.status, c.reason, c.message)
            }
        })
        .unwrap_or_else(|| "Unknown (no status from the agent yet)".into());
    PolicyRow {
        kind: kind.into(),
        name,
        namespace,
        selector: selector_string(&spec.pod_selector),
        priority: spec.priority,
        clusters: status
            .and_then(|s| s.clusters_in_use.clone())
            .unwrap_or_else(|| "-".into()),
        overrides: if spec.overrides.is_empty() {
            "-".into()
        } else {
            spec.overrides
                .iter()
                .map(|o| o.summary())
                .collect::<Vec<_>>()
                .join("; ")
        },
        ready,
    }
}

pub async fn collect(client: &Client, namespace: Option<&str>) -> anyhow::Result<Vec<PolicyRow>> {
    let namespaced: Api<PlacementPolicy> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let not_installed = "listing placement policies (are the policy.mcsched.io CRDs installed? `kubectl mcsched install` applies them)";
    let mut rows: Vec<PolicyRow> = namespaced
        .list(&ListParams::default())
        .await
        .context(not_installed)?
        .items
        .into_iter()
        .map(|p| {
            row(
                "PlacementPolicy",
                p.name_any(),
                p.namespace().unwrap_or_default(),
                &p.spec,
                p.status.as_ref(),
            )
        })
        .collect();
    rows.extend(
        Api::<ClusterPlacementPolicy>::all(client.clone())
            .list(&ListParams::default())
            .await
            .context(not_installed)?
            .items
            .into_iter()
            .map(|p| {
                row(
                    "ClusterPlacementPolicy",
                    p.name_any(),
                    String::new(),
                    &p.spec.policy,
                    p.status.as_ref(),
                )
            }),
    );
    Ok(rows)
}

pub async fn run(kube: &KubeArgs, args: GetArgs) -> anyhow::Result<()> {
    let (client, context_namespace) = kube.namespaced_client().await?;
    let namespace = (!args.all_namespaces).then_some(context_namespace);
    let rows = collect(&client, namespace.as_deref()).await?;
    match args.output {
        Format::Json => println!("{}", serde_json::to_string_pretty(&rows)?),
        Format::Table if rows.is_empty() => eprintln!("No placement policies found."),
        Format::Table => print!("{}", render(&rows)),
    }
    Ok(())
}

pub fn render(rows: &[PolicyRow]) -> String {
    let header = [
        "NAME",
        "NAMESPACE",
        "SELECTOR",
        "PRIORITY",
        "CLUSTERS (PODS)",
        "OVERRIDES",
        "READY",
    ];
    let table: Vec<Vec<String>> = std::iter::once(header.map(String::from).to_vec())
        .chain(rows.iter().map(|r| {
            let name = if r.kind == "ClusterPlacementPolicy" {
                format!("clusterplacementpolicy/{}", r.name)
            } else {
                format!("placementpolicy/{}", r.name)
            };
            let ns = if r.namespace.is_empty() {
                "-".to_string()
            } else {
                r.namespace.clone()
            };
            vec![
                name,
                ns,
                r.selector.clone(),
                r.priority.to_string(),
                r.clusters.clone(),
                r.overrides.clone(),
                r.ready.clone(),
            ]
        }))
        .collect();
    crate::table::render(&table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_row_per_policy_with_why_it_is_not_ready() {
        let spec: mcsched_shared::policy::PlacementPolicySpec = serde_json::from_value(
            serde_json::json!({"podSelector": {"matchLabels": {"app": "web"}}, "overrides": [
                {"target": {"clusterNames": ["west"]}, "storageClasses": {"a": "b"},
                 "image": [{"component": "Registry", "operator": "replace", "value": "m.eu"}]},
                {"env": [{"operator": "add", "name": "A", "value": "1"}]}]}),
        )
        .unwrap();
        let status: PlacementPolicyStatus = serde_json::from_value(serde_json::json!({
            "clustersInUse": "east:8,west:4",
            "conditions": [{"type": "Ready", "status": "False", "reason": "NoReadyCluster",
                "message": "no Ready cluster satisfies its cluster affinity and groups", "lastTransitionTime": "2026-11-24T00:00:00Z"}]}))
        .unwrap();
        let rows = vec![
            row(
                "PlacementPolicy",
                "web".into(),
                "shop".into(),
                &spec,
                Some(&status),
            ),
            row(
                "ClusterPlacementPolicy",
                "all".into(),
                String::new(),
                &spec,
                None,
            ),
        ];
        let table = render(&rows);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("NAME"), "{table}");
        assert!(lines[1].starts_with("placementpolicy/web"), "{table}");
        assert!(lines[1].contains("east:8,west:4"), "{table}");
        assert!(
            lines[1].contains("west: image,storageClasses; *: env"),
            "{table}"
        );
        assert!(
            lines[1].ends_with(
                "False (NoReadyCluster: no Ready cluster satisfies its cluster affinity and groups)"
            ),
            "{table}"
        );
        assert!(
            lines[2].contains("clusterplacementpolicy/all   -"),
            "{table}"
        );
        assert!(
            lines[2].ends_with("Unknown (no status from the agent yet)"),
            "{table}"
        );
    }
}
