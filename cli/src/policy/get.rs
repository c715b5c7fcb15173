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

use crate::kube_context::KubeArgs;
use crate::printer::{Columns, Item, PrintArgs};

/// List placement policies: those of -n NAMESPACE (else the kubeconfig context's
/// namespace; every namespace with -A) and the cluster-wide ones.
#[derive(Debug, Args)]
pub struct GetArgs {
    #[command(flatten)]
    pub print: PrintArgs,
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
    /// `-o wide`: when it was created, as kubectl's AGE.
    pub age: String,
}

/// The object as the API served it, without the managed fields kubectl hides too.
fn object<K: Serialize>(o: &K) -> serde_json::Value {
    let mut v = serde_json::to_value(o).unwrap_or_default();
    if let Some(m) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        m.remove("managedFields");
    }
    v
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
        age: "-".into(),
    }
}

fn age_of(meta: &kube::api::ObjectMeta) -> String {
    meta.creation_timestamp
        .as_ref()
        .map(|t| crate::cluster::get::age(t.0))
        .unwrap_or_else(|| "-".into())
}

pub async fn collect(
    client: &Client,
    namespace: Option<&str>,
) -> anyhow::Result<Vec<(PolicyRow, serde_json::Value)>> {
    let namespaced: Api<PlacementPolicy> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let not_installed = "listing placement policies (are the policy.mcsched.io CRDs installed? `kubectl mcsched install` applies them)";
    let mut rows: Vec<(PolicyRow, serde_json::Value)> = namespaced
        .list(&ListParams::default())
        .await
        .context(not_installed)?
        .items
        .into_iter()
        .map(|p| {
            let mut r = row(
                "PlacementPolicy",
                p.name_any(),
                p.namespace().unwrap_or_default(),
                &p.spec,
                p.status.as_ref(),
            );
            r.age = age_of(&p.metadata);
            (r, object(&p))
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
                let mut r = row(
                    "ClusterPlacementPolicy",
                    p.name_any(),
                    String::new(),
                    &p.spec.policy,
                    p.status.as_ref(),
                );
                r.age = age_of(&p.metadata);
                (r, object(&p))
            }),
    );
    Ok(rows)
}

pub async fn run(kube: &KubeArgs, args: GetArgs) -> anyhow::Result<()> {
    let (client, context_namespace) = kube.namespaced_client().await?;
    let namespace = (!args.all_namespaces).then_some(context_namespace);
    let rows = collect(&client, namespace.as_deref()).await?;
    if rows.is_empty() && args.print.is_table() {
        eprintln!("No placement policies found.");
        return Ok(());
    }
    let items: Vec<Item> = rows.into_iter().map(|(r, o)| item(&r, o)).collect();
    print!(
        "{}",
        crate::printer::print(args.print.format(), args.print.no_headers, &HEADERS, &items)?
    );
    Ok(())
}

const HEADERS: Columns<'static> = Columns {
    headers: &[
        "NAME",
        "NAMESPACE",
        "SELECTOR",
        "PRIORITY",
        "CLUSTERS (PODS)",
        "OVERRIDES",
        "READY",
    ],
    wide: &["AGE"],
};

fn item(r: &PolicyRow, object: serde_json::Value) -> Item {
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
    Item {
        object,
        resource: format!("{}.policy.mcsched.io", r.kind.to_lowercase()),
        name: r.name.clone(),
        cells: vec![
            name,
            ns,
            r.selector.clone(),
            r.priority.to_string(),
            r.clusters.clone(),
            r.overrides.clone(),
            r.ready.clone(),
        ],
        wide: vec![r.age.clone()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::printer::OutputFormat;

    #[test]
    fn the_object_as_served_without_managed_fields() {
        let p: PlacementPolicy = serde_json::from_value(serde_json::json!({
            "apiVersion": "policy.mcsched.io/v1alpha1", "kind": "PlacementPolicy",
            "metadata": {"name": "web", "namespace": "shop",
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}]},
            "spec": {"podSelector": {}}
        }))
        .expect("policy");
        let o = object(&p);
        assert_eq!(o["kind"], "PlacementPolicy");
        assert_eq!(o["apiVersion"], "policy.mcsched.io/v1alpha1");
        assert_eq!(o["metadata"]["name"], "web");
        assert!(o["metadata"].get("managedFields").is_none(), "{o}");
    }

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
        let rows = [
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
        let items: Vec<Item> = rows
            .iter()
            .map(|r| item(r, serde_json::Value::Null))
            .collect();
        let print =
            |f: OutputFormat| crate::printer::print(&f, false, &HEADERS, &items).expect("print");
        assert_eq!(
            print(OutputFormat::Name),
            "placementpolicy.policy.mcsched.io/web\nclusterplacementpolicy.policy.mcsched.io/all\n"
        );
        assert!(
            print(OutputFormat::Wide)
                .lines()
                .all(|l| l.ends_with("   AGE") || l.ends_with("   -"))
        );
        let table = print(OutputFormat::Table);
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
