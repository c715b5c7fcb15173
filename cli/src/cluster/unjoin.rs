//! `kubectl mcsched unjoin cluster NAME`: drains the virtual node and removes everything
//! join created, in the host and in the leaf.

use std::io::IsTerminal;

use anyhow::{Context, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, Node, PersistentVolumeClaim, Pod, Secret, ServiceAccount,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, ResourceExt};
use mcsched_shared::keys;
use serde_json::json;

use super::join::{delete_quietly, rbac_name};
use super::leaf_access::TOKEN_SECRET;
use super::{names, step, warn};
use crate::kube_context::KubeArgs;

#[derive(Debug, clap::Args)]
pub struct UnjoinArgs {
    /// The leaf cluster to remove.
    pub name: String,
    /// Do not ask for confirmation.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Kubeconfig of the leaf with rights to remove what join created there (its
    /// ServiceAccount and ClusterRole). Without it only the pods and objects mcsched synced
    /// are removed, with the leaf ServiceAccount's own token.
    #[arg(long, value_name = "FILE")]
    pub cluster_kubeconfig: Option<std::path::PathBuf>,
    /// Context of --cluster-kubeconfig.
    #[arg(long, value_name = "NAME")]
    pub cluster_context: Option<String>,
}

pub async fn run(kube: &KubeArgs, args: UnjoinArgs) -> anyhow::Result<()> {
    names::cluster(&args.name)?;
    let namespace = kube.namespace_or(keys::SYSTEM_NAMESPACE).to_string();
    let node_name = keys::virtual_node_name(&args.name);
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            bail!(
                "refusing to unjoin {} without confirmation: no terminal to ask on; pass --yes",
                args.name
            );
        }
        let go = dialoguer::Confirm::new()
            .with_prompt(format!(
                "Unjoin leaf cluster {}? Its pods are deleted in host and leaf, and node {node_name} is removed",
                args.name
            ))
            .default(false)
            .interact()
            .context("asking for confirmation")?;
        if !go {
            bail!("unjoin of {} cancelled", args.name);
        }
    }
    let host = kube.client().await.context("host cluster")?;
    let secret_name = keys::cluster_secret_name(&args.name);
    let secrets: Api<Secret> = Api::namespaced(host.clone(), &namespace);
    let secret = secrets.get_opt(&secret_name).await?;
    let nodes: Api<Node> = Api::all(host.clone());
    let node = nodes.get_opt(&node_name).await?;
    if secret.is_none() && node.is_none() {
        bail!(
            "leaf cluster {} is not joined (no Secret {namespace}/{secret_name}, no node {node_name})",
            args.name
        );
    }

    // Drain: no new pods, then the pods there go (their copies with them).
    if node.is_some() {
        let cordon = json!({"spec": {"unschedulable": true}});
        nodes
            .patch(&node_name, &PatchParams::default(), &Patch::Merge(&cordon))
            .await
            .context("cordoning the virtual node")?;
        let pods: Api<Pod> = Api::all(host.clone());
        let on_node = pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={node_name}")))
            .await?;
        for p in &on_node.items {
            let api: Api<Pod> =
                Api::namespaced(host.clone(), p.namespace().as_deref().unwrap_or("default"));
            // No kubelet finishes a deletion on a virtual node.
            let _ = api
                .delete(&p.name_any(), &DeleteParams::default().grace_period(0))
                .await;
        }
        step(&format!(
            "host: {node_name} cordoned and drained ({} pods deleted)",
            on_node.items.len()
        ));
    }

    let leaf = match &args.cluster_kubeconfig {
        Some(path) => {
            let config =
                crate::kube_context::load_config(Some(path), args.cluster_context.as_deref())
                    .await
                    .with_context(|| format!("--cluster-kubeconfig {}", path.display()))?;
            Client::try_from(config)
                .map(Some)
                .map_err(anyhow::Error::from)
        }
        None => leaf_client(secret.as_ref()).await,
    };
    let admin = args.cluster_kubeconfig.is_some();
    match leaf {
        Ok(Some(leaf)) => match clean_leaf(&leaf, &args.name, admin).await {
            Ok(()) if admin => step(
                "leaf: synced pods and objects, namespaces mcsched created, ServiceAccount, RBAC and token removed",
            ),
            Ok(()) => {
                step("leaf: synced pods and objects, and namespaces mcsched created, removed");
                warn(&format!(
                    "left in the leaf: ServiceAccount {}/{}, ClusterRole and ClusterRoleBinding {} (pass --cluster-kubeconfig to remove them)",
                    keys::SYSTEM_NAMESPACE,
                    keys::LEAF_ACCOUNT,
                    keys::LEAF_ACCOUNT
                ));
            }
            Err(e) => warn(&format!(
                "leaf not cleaned ({e:#}); left there: pods labelled {}={}, ServiceAccount {}/{}, ClusterRole and ClusterRoleBinding {}",
                keys::MANAGED_CLUSTER_LABEL,
                args.name,
                keys::SYSTEM_NAMESPACE,
                keys::LEAF_ACCOUNT,
                keys::LEAF_ACCOUNT
            )),
        },
        Ok(None) => {
            warn("no join Secret and no --cluster-kubeconfig: the leaf side was not cleaned")
        }
        Err(e) => warn(&format!(
            "cannot reach the leaf ({e:#}); its side was not cleaned"
        )),
    }

    // Host side last, so a failed leaf clean-up can be retried with the Secret in place.
    let rbac = rbac_name(&node_name);
    delete_quietly(&Api::<ClusterRoleBinding>::all(host.clone()), &rbac).await?;
    delete_quietly(&Api::<ClusterRole>::all(host.clone()), &rbac).await?;
    delete_quietly(
        &Api::<RoleBinding>::namespaced(host.clone(), "kube-node-lease"),
        &rbac,
    )
    .await?;
    delete_quietly(
        &Api::<Role>::namespaced(host.clone(), "kube-node-lease"),
        &rbac,
    )
    .await?;
    delete_quietly(
        &Api::<Lease>::namespaced(host.clone(), "kube-node-lease"),
        &node_name,
    )
    .await?;
    delete_quietly(&nodes, &node_name).await?;
    delete_quietly(&secrets, &secret_name).await?;
    step(&format!(
        "host: node {node_name}, Secret {namespace}/{secret_name} and RBAC {rbac} removed"
    ));
    println!("cluster {} unjoined", args.name);
    Ok(())
}

/// A client for the leaf from the join Secret, if it answers.
async fn leaf_client(secret: Option<&Secret>) -> anyhow::Result<Option<Client>> {
    let Some(raw) = secret
        .and_then(|s| s.data.as_ref())
        .and_then(|d| d.get(keys::KUBECONFIG_KEY))
    else {
        return Ok(None);
    };
    let kc = Kubeconfig::from_yaml(std::str::from_utf8(&raw.0)?)?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    let client = Client::try_from(config)?;
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        client.apiserver_version(),
    )
    .await
    .context("no answer within 10s")??;
    Ok(Some(client))
}

async fn clean_leaf(leaf: &Client, cluster: &str, admin: bool) -> anyhow::Result<()> {
    let ours = ListParams::default().labels(&format!("{}={cluster}", keys::MANAGED_CLUSTER_LABEL));
    let pods: Api<Pod> = Api::all(leaf.clone());
    for p in pods.list(&ours).await?.items {
        let api: Api<Pod> =
            Api::namespaced(leaf.clone(), p.namespace().as_deref().unwrap_or("default"));
        delete_quietly(&api, &p.name_any()).await?;
    }
    for cm in Api::<ConfigMap>::all(leaf.clone()).list(&ours).await?.items {
        let api: Api<ConfigMap> =
            Api::namespaced(leaf.clone(), cm.namespace().as_deref().unwrap_or("default"));
        delete_quietly(&api, &cm.name_any()).await?;
    }
    for s in Api::<Secret>::all(leaf.clone()).list(&ours).await?.items {
        let api: Api<Secret> =
            Api::namespaced(leaf.clone(), s.namespace().as_deref().unwrap_or("default"));
        delete_quietly(&api, &s.name_any()).await?;
    }
    for c in Api::<PersistentVolumeClaim>::all(leaf.clone())
        .list(&ours)
        .await?
        .items
    {
        let api: Api<PersistentVolumeClaim> =
            Api::namespaced(leaf.clone(), c.namespace().as_deref().unwrap_or("default"));
        delete_quietly(&api, &c.name_any()).await?;
    }
    // Namespaces pod sync created for this leaf, never ones that were there before.
    let namespaces: Api<Namespace> = Api::all(leaf.clone());
    for ns in namespaces.list(&ours).await?.items {
        delete_quietly(&namespaces, &ns.name_any()).await?;
    }
    if !admin {
        return Ok(());
    }
    delete_quietly(
        &Api::<ClusterRoleBinding>::all(leaf.clone()),
        keys::LEAF_ACCOUNT,
    )
    .await?;
    delete_quietly(&Api::<ClusterRole>::all(leaf.clone()), keys::LEAF_ACCOUNT).await?;
    let system = keys::SYSTEM_NAMESPACE;
    delete_quietly(
        &Api::<Secret>::namespaced(leaf.clone(), system),
        TOKEN_SECRET,
    )
    .await?;
    delete_quietly(
        &Api::<ServiceAccount>::namespaced(leaf.clone(), system),
        keys::LEAF_ACCOUNT,
    )
    .await?;
    // The namespace only when join created it (labelled managed-by) and nothing else is left.
    if let Some(ns) = namespaces.get_opt(system).await?
        && ns.labels().get(keys::MANAGED_BY_LABEL).map(String::as_str)
            == Some(keys::MANAGED_BY_VALUE)
    {
        delete_quietly(&namespaces, system).await?;
    }
    Ok(())
}
