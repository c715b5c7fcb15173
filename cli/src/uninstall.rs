//! `kubectl mcsched uninstall`: every object `install` created, found by its install label.

use anyhow::{Context, bail};
use clap::Args;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::ListParams;
use kube::{Api, Client};
use mcsched_shared::{keys, manifests};

use crate::apply;
use crate::kube_context::KubeArgs;
use crate::progress::{Mark, Progress};

/// Remove the mcsched agent and every object install created (-n NAMESPACE, default
/// mcsched-system).
#[derive(Debug, Args)]
pub struct UninstallArgs {
    /// Do not ask for confirmation (needed when stdin is not a terminal).
    #[arg(long, short = 'y')]
    pub yes: bool,
}

pub async fn run(kube: &KubeArgs, args: UninstallArgs) -> anyhow::Result<()> {
    let namespace = kube.namespace_or(keys::SYSTEM_NAMESPACE).to_string();
    let client = kube.client().await?;
    let selector = manifests::install_selector(&namespace);
    let (terminating, mut found): (Vec<_>, Vec<_>) = apply::find(&client, &selector)
        .await?
        .into_iter()
        .partition(|f| f.terminating);
    if found.is_empty() {
        if terminating.is_empty() {
            println!(
                "mcsched is not installed in namespace {namespace}: no objects labelled {selector}"
            );
        } else {
            // An earlier uninstall deleted them; the API server is removing them (a CRD
            // once its instances are gone, a namespace once it is empty).
            println!(
                "mcsched is not installed in namespace {namespace}: its last {} objects are being removed by the API server:",
                terminating.len()
            );
            for f in &terminating {
                println!("  {}", f.located());
            }
        }
        return Ok(());
    }
    println!("These {} objects will be deleted:", found.len());
    for f in &found {
        println!("  {}", f.located());
    }
    if !terminating.is_empty() {
        println!(
            "({} more are being removed by the API server already.)",
            terminating.len()
        );
    }
    let warnings = leftovers(&client, &namespace, &found).await?;
    for w in &warnings {
        println!("{} {w}", console::style("warning:").yellow());
    }
    if !args.yes {
        if !console::Term::stdout().is_term() || !console::Term::stderr().is_term() {
            bail!(
                "refusing to uninstall without confirmation: not a terminal; pass --yes to delete"
            );
        }
        let go_on = dialoguer::Confirm::new()
            .with_prompt(format!("Uninstall mcsched from {namespace}?"))
            .default(false)
            .interact()
            .context("asking for confirmation")?;
        if !go_on {
            bail!("uninstall cancelled; nothing was deleted");
        }
    }
    // The Deployment first (the agent stops scheduling), the namespace last.
    found.reverse();
    let progress = Progress::stdout();
    for f in &found {
        let step = progress.step(format!("deleting {}", f.located()));
        match apply::delete(&client, f).await {
            Ok(()) => step.finish(Mark::Done, format!("{} deleted", f.located())),
            Err(e) => {
                step.finish(Mark::Failed, format!("{} not deleted", f.located()));
                return Err(e.into());
            }
        }
    }
    println!();
    println!(
        "mcsched uninstalled from namespace {namespace}: {} objects deleted",
        found.len()
    );
    Ok(())
}

/// What the user should know before the namespace goes: the join Secrets in it go too,
/// and the leaves' virtual nodes stay until `unjoin`.
async fn leftovers(
    client: &Client,
    namespace: &str,
    found: &[apply::Found],
) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    let deletes_namespace = found
        .iter()
        .any(|f| f.resource.kind == "Namespace" && f.name == namespace);
    let by_cluster = ListParams::default().labels(keys::CLUSTER_LABEL);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let joined = secrets
        .list_metadata(&by_cluster)
        .await
        .context("listing join Secrets")?;
    if deletes_namespace && !joined.items.is_empty() {
        let names: Vec<String> = joined
            .items
            .iter()
            .filter_map(|s| s.metadata.name.clone())
            .collect();
        out.push(format!(
            "namespace {namespace} holds {} join Secret(s) ({}); they are deleted with it",
            names.len(),
            names.join(", ")
        ));
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let virtual_nodes = nodes
        .list_metadata(&by_cluster)
        .await
        .context("listing virtual nodes")?;
    if !virtual_nodes.items.is_empty() {
        let names: Vec<String> = virtual_nodes
            .items
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        out.push(format!(
            "{} virtual node(s) stay ({}); `kubectl mcsched unjoin cluster` removes a leaf cleanly",
            names.len(),
            names.join(", ")
        ));
    }
    Ok(out)
}
