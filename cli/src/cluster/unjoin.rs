//! `kubectl mcsched unjoin cluster NAME`: drains the virtual node and removes what this
//! host's join and pod sync created, in the host and in the leaf — in the leaf only
//! objects carrying this host's mark, never the leaf owner's or another host's.

use std::collections::BTreeSet;
use std::io::IsTerminal;

use anyhow::{Context, bail};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, EnvFromSource, EnvVar, Namespace, Node, PersistentVolumeClaim, Pod, Secret,
    ServiceAccount,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::discovery::{Discovery, Scope, verbs};
use kube::{Client, Config, ResourceExt};
use mcsched_shared::{keys, leaf_kubeconfig};
use serde_json::json;

use super::join::{NODE_LEASE_NS, delete_exactly, delete_quietly, is_managed, rbac_name};
use super::leaf_access::{
    LEGACY_TOKEN_SECRET, ROOT_CA_CONFIGMAP, ours_selector, token_secret_selector,
};
use super::{code, names, step, warn};
use crate::kube_context::KubeArgs;

#[derive(Debug, clap::Args)]
pub struct UnjoinArgs {
    /// The leaf cluster to remove.
    pub name: String,
    /// Do not ask for confirmation.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Kubeconfig of the leaf with rights to remove what join created there (its
    /// ServiceAccount, roles, grants, admission policies, token Secret — revoking the leaf
    /// tokens — and namespaces). Without it only the pods and objects this host synced are
    /// removed, with the leaf account's token from the join Secret.
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
    // The join Secret's kubeconfig is checked before anything is changed, and only the
    // allowed form (server, inline CA, token) is ever used: nothing in it is run or read.
    let stored = match secret.as_ref().map(stored_kubeconfig).transpose() {
        Ok(s) => s.flatten(),
        Err(e) if args.cluster_kubeconfig.is_some() => {
            warn(&format!(
                "join Secret {namespace}/{secret_name} not used: {e:#}; cleaning the leaf with --cluster-kubeconfig"
            ));
            None
        }
        Err(e) => bail!(
            "join Secret {namespace}/{secret_name} refused, nothing was changed: {e:#}; pass --cluster-kubeconfig to clean the leaf as its admin instead"
        ),
    };
    let host_id = super::host_id(&host).await?;

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
        None => match &stored {
            Some(text) => leaf_client(text).await.map(Some),
            None => Ok(None),
        },
    };
    let admin = args.cluster_kubeconfig.is_some();
    let left_rbac = format!(
        "ServiceAccount {}/{}, ClusterRoles {}, {}, {} and {}, Role {}, admission policies {}, {} and {}, this host's grants (RoleBindings {} and {}) and its token Secret {}/{}* (its tokens stay valid until they expire)",
        keys::SYSTEM_NAMESPACE,
        keys::LEAF_ACCOUNT,
        keys::LEAF_ACCOUNT,
        keys::LEAF_WRITER_ROLE,
        keys::LEAF_CLUSTER_WRITER_ROLE,
        keys::LEAF_SERVICE_ACCOUNT_ROLE,
        keys::LEAF_TOKEN_ROLE,
        keys::LEAF_TOKEN_POLICY,
        keys::LEAF_NAMESPACE_POLICY,
        keys::LEAF_COPIES_POLICY,
        keys::LEAF_ACCOUNT,
        keys::LEAF_SERVICE_ACCOUNT_ROLE,
        keys::SYSTEM_NAMESPACE,
        keys::LEAF_TOKEN_SECRET_PREFIX
    );
    match leaf {
        Ok(Some(leaf)) => match clean_leaf(&leaf, &args.name, &host_id, admin).await {
            Ok(kept) => {
                step(&format!(
                    "leaf: this host's pods and objects synced for {}{} removed",
                    args.name,
                    if admin {
                        ", the namespaces join or sync created, and what join created"
                    } else {
                        ""
                    }
                ));
                for k in kept {
                    warn(&k);
                }
                if !admin {
                    warn(&format!(
                        "left in the leaf: {left_rbac}, and the namespaces join created (pass --cluster-kubeconfig to remove them; the leaf account may not)"
                    ));
                }
            }
            Err(e) => warn(&format!(
                "leaf not cleaned ({e:#}); left there: pods labelled {}, {left_rbac}",
                ours_selector(&host_id, &args.name)
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
    for ns in [NODE_LEASE_NS, namespace.as_str()] {
        delete_quietly(&Api::<RoleBinding>::namespaced(host.clone(), ns), &rbac).await?;
        delete_quietly(&Api::<Role>::namespaced(host.clone(), ns), &rbac).await?;
    }
    delete_quietly(
        &Api::<Lease>::namespaced(host.clone(), NODE_LEASE_NS),
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

/// The join Secret's kubeconfig, if it has one, when it is of the one allowed form.
fn stored_kubeconfig(secret: &Secret) -> anyhow::Result<Option<String>> {
    let Some(raw) = secret
        .data
        .as_ref()
        .and_then(|d| d.get(keys::KUBECONFIG_KEY))
    else {
        return Ok(None);
    };
    let text = std::str::from_utf8(&raw.0)
        .with_context(|| format!("data.{}: not UTF-8", keys::KUBECONFIG_KEY))?;
    leaf_kubeconfig::check(text).with_context(|| format!("data.{}", keys::KUBECONFIG_KEY))?;
    Ok(Some(text.to_string()))
}

/// A client for the leaf from a checked join kubeconfig, if it answers.
async fn leaf_client(text: &str) -> anyhow::Result<Client> {
    let kc = Kubeconfig::from_yaml(text)?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    let client = Client::try_from(config)?;
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        client.apiserver_version(),
    )
    .await
    .context("no answer within 10s")??;
    Ok(client)
}

/// Whether a leaf object carries this host's mark for leaf `cluster`.
fn marked(meta: &ObjectMeta, host_id: &str, cluster: &str) -> bool {
    let labels = meta.labels.as_ref();
    let is = |k: &str, v: &str| labels.and_then(|l| l.get(k)).is_some_and(|x| x == v);
    is(keys::HOST_ID_LABEL, host_id) && is(keys::MANAGED_CLUSTER_LABEL, cluster)
}

/// The ConfigMaps and Secrets a pod refers to by name.
fn references(pod: &Pod) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut cms, mut secrets) = (BTreeSet::new(), BTreeSet::new());
    let Some(spec) = &pod.spec else {
        return (cms, secrets);
    };
    for v in spec.volumes.iter().flatten() {
        if let Some(c) = &v.config_map {
            cms.insert(c.name.clone());
        }
        if let Some(name) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
            secrets.insert(name);
        }
        for src in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(c) = &src.config_map {
                cms.insert(c.name.clone());
            }
            if let Some(s) = &src.secret {
                secrets.insert(s.name.clone());
            }
        }
    }
    let mut env = |vars: Option<&Vec<EnvVar>>, from: Option<&Vec<EnvFromSource>>| {
        for e in vars.into_iter().flatten() {
            let Some(v) = &e.value_from else { continue };
            if let Some(r) = &v.config_map_key_ref {
                cms.insert(r.name.clone());
            }
            if let Some(r) = &v.secret_key_ref {
                secrets.insert(r.name.clone());
            }
        }
        for f in from.into_iter().flatten() {
            if let Some(r) = &f.config_map_ref {
                cms.insert(r.name.clone());
            }
            if let Some(r) = &f.secret_ref {
                secrets.insert(r.name.clone());
            }
        }
    };
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        env(c.env.as_ref(), c.env_from.as_ref());
    }
    for c in spec.ephemeral_containers.iter().flatten() {
        env(c.env.as_ref(), c.env_from.as_ref());
    }
    for s in spec.image_pull_secrets.iter().flatten() {
        secrets.insert(s.name.clone());
    }
    cms.retain(|n| !n.is_empty());
    secrets.retain(|n| !n.is_empty());
    (cms, secrets)
}

/// Deletes the objects of one kind this host synced for `cluster`: listed by their mark
/// with the leaf admin's rights, else (the leaf account may read ConfigMaps and Secrets
/// only by name) the ones the synced pods referred to, read and checked one by one.
async fn clean_kind<K>(
    leaf: &Client,
    host_id: &str,
    cluster: &str,
    admin: bool,
    referenced: &BTreeSet<(String, String)>,
) -> anyhow::Result<()>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let found = if admin {
        Api::<K>::all(leaf.clone())
            .list(&ListParams::default().labels(&ours_selector(host_id, cluster)))
            .await
            .with_context(|| format!("listing leaf {}s", K::kind(&())))?
            .items
    } else {
        let mut found = Vec::new();
        for (ns, name) in referenced {
            if let Some(o) = Api::<K>::namespaced(leaf.clone(), ns)
                .get_opt(name)
                .await
                .with_context(|| format!("reading leaf {} {ns}/{name}", K::kind(&())))?
            {
                found.push(o);
            }
        }
        found
    };
    for o in found {
        if !marked(o.meta(), host_id, cluster) {
            continue;
        }
        let ns = o.namespace().unwrap_or_default();
        delete_exactly(&Api::<K>::namespaced(leaf.clone(), &ns), &o)
            .await
            .with_context(|| format!("deleting leaf {} {ns}/{}", K::kind(&()), o.name_any()))?;
    }
    Ok(())
}

/// Removes from the leaf what this host put there for `cluster`, and only that: objects
/// carrying its mark; with the admin's rights also this host's grants, the namespaces
/// join or sync created for it (when nothing of anyone else's is left in them), and the
/// account and roles join created (unless another host still holds a grant). Returns what
/// it had to keep, and why.
async fn clean_leaf(
    leaf: &Client,
    cluster: &str,
    host_id: &str,
    admin: bool,
) -> anyhow::Result<Vec<String>> {
    let ours = ListParams::default().labels(&ours_selector(host_id, cluster));
    let pods: Api<Pod> = Api::all(leaf.clone());
    let mut cms = BTreeSet::new();
    let mut secrets = BTreeSet::new();
    let mut accounts = BTreeSet::new();
    for p in pods.list(&ours).await.context("listing leaf pods")?.items {
        if !marked(&p.metadata, host_id, cluster) {
            continue;
        }
        let ns = p.namespace().unwrap_or_default();
        let (c, s) = references(&p);
        cms.extend(c.into_iter().map(|n| (ns.clone(), n)));
        secrets.extend(s.into_iter().map(|n| (ns.clone(), n)));
        if let Some(a) = p.spec.as_ref().and_then(|s| s.service_account_name.clone()) {
            accounts.insert((ns.clone(), a));
        }
        delete_exactly(&Api::<Pod>::namespaced(leaf.clone(), &ns), &p)
            .await
            .with_context(|| format!("deleting leaf pod {ns}/{}", p.name_any()))?;
    }
    clean_kind::<ConfigMap>(leaf, host_id, cluster, admin, &cms).await?;
    clean_kind::<Secret>(leaf, host_id, cluster, admin, &secrets).await?;
    // The leaf account lists claims cluster-wide, as the admin does.
    clean_kind::<PersistentVolumeClaim>(leaf, host_id, cluster, true, &BTreeSet::new()).await?;
    // Pod sync's accounts (`join --service-accounts`); the leaf account reads them by name.
    clean_kind::<ServiceAccount>(leaf, host_id, cluster, admin, &accounts).await?;
    if !admin {
        return Ok(Vec::new());
    }
    let others = remove_grants(leaf, host_id).await?;
    remove_token_secrets(leaf, host_id).await?;
    let mut kept = Vec::new();
    let namespaces: Api<Namespace> = Api::all(leaf.clone());
    let listed = namespaces.list(&ours).await?.items;
    let mut ns_kinds = None;
    for ns in listed {
        if !marked(&ns.metadata, host_id, cluster) || ns.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = ns.name_any();
        if ns_kinds.is_none() {
            ns_kinds = Some(namespaced_kinds(leaf).await?);
        }
        let kinds = ns_kinds.as_deref().unwrap_or_default();
        let foreign = foreign_objects(leaf, kinds, &name, host_id, cluster).await?;
        if foreign.is_empty() {
            delete_exactly(&namespaces, &ns)
                .await
                .with_context(|| format!("deleting leaf namespace {name}"))?;
        } else {
            let more = if foreign.len() > 5 {
                format!(" and {} more", foreign.len() - 5)
            } else {
                String::new()
            };
            kept.push(format!(
                "leaf namespace {name} kept: mcsched created it, but it holds what this host did not put there ({}{more})",
                foreign[..foreign.len().min(5)].join(", ")
            ));
        }
    }
    if others.is_empty() {
        remove_account(leaf).await?;
    } else {
        kept.push(format!(
            "left in the leaf: ServiceAccount {}/{} and its roles, still granted to another host (id {})",
            keys::SYSTEM_NAMESPACE,
            keys::LEAF_ACCOUNT,
            others.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    Ok(kept)
}

/// Every namespaced kind the leaf serves that can be listed, but events (which the leaf
/// writes about anyone's objects).
async fn namespaced_kinds(leaf: &Client) -> anyhow::Result<Vec<ApiResource>> {
    let discovery = match Discovery::new(leaf.clone()).run_aggregated().await {
        Ok(d) => d,
        Err(_) => Discovery::new(leaf.clone())
            .run()
            .await
            .context("discovering the leaf's kinds")?,
    };
    let mut out = Vec::new();
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            if caps.scope == Scope::Namespaced
                && caps.supports_operation(verbs::LIST)
                && ar.plural != "events"
            {
                out.push(ar);
            }
        }
    }
    Ok(out)
}

/// Objects in `namespace` that are not this host's for `cluster` (nor on their way out),
/// as `kind/name`, of every kind: a namespace holding any is not deleted. What the leaf's
/// own controllers put in every namespace (the `default` ServiceAccount, the CA
/// ConfigMap) and this host's grant do not count.
async fn foreign_objects(
    leaf: &Client,
    kinds: &[ApiResource],
    namespace: &str,
    host_id: &str,
    cluster: &str,
) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for ar in kinds {
        let api: Api<DynamicObject> = Api::namespaced_with(leaf.clone(), namespace, ar);
        let items = match api.list_metadata(&ListParams::default()).await {
            Ok(list) => list.items,
            // An aggregated API that does not answer holds nothing we could delete.
            Err(e) if matches!(code(&e), Some(404 | 503)) => {
                tracing::debug!(kind = %ar.kind, error = %e, "not listed");
                continue;
            }
            Err(e) => {
                return Err(anyhow::Error::from(e).context(format!(
                    "listing {} in leaf namespace {namespace}",
                    ar.plural
                )));
            }
        };
        for o in items {
            let meta = &o.metadata;
            let name = meta.name.as_deref().unwrap_or_default();
            let built_in = matches!(
                (ar.group.as_str(), ar.plural.as_str(), name),
                ("", "configmaps", ROOT_CA_CONFIGMAP) | ("", "serviceaccounts", "default")
            );
            let grant = ar.group == "rbac.authorization.k8s.io"
                && ar.plural == "rolebindings"
                && name == keys::LEAF_ACCOUNT
                && is_managed(meta)
                && meta
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(keys::HOST_ID_LABEL))
                    .is_some_and(|h| h == host_id);
            if built_in
                || grant
                || meta.deletion_timestamp.is_some()
                || marked(meta, host_id, cluster)
            {
                continue;
            }
            out.push(format!("{}/{name}", ar.plural));
        }
    }
    Ok(out)
}

/// Deletes `name` if it is there and mcsched's.
async fn delete_if_managed<K>(api: &Api<K>, name: &str) -> anyhow::Result<()>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if let Some(o) = api.get_opt(name).await?
        && is_managed(o.meta())
    {
        delete_exactly(api, &o)
            .await
            .with_context(|| format!("deleting leaf {} {name}", K::kind(&())))?;
    }
    Ok(())
}

/// Removes this host's grants (its RoleBindings and its all-namespaces binding); returns
/// the other hosts that still hold one.
async fn remove_grants(leaf: &Client, host_id: &str) -> anyhow::Result<BTreeSet<String>> {
    let managed = format!("{}={}", keys::MANAGED_BY_LABEL, keys::MANAGED_BY_VALUE);
    let grants = Api::<RoleBinding>::all(leaf.clone())
        .list(&ListParams::default().labels(&format!("{managed},{}", keys::HOST_ID_LABEL)))
        .await
        .context("listing grants in the leaf")?;
    let mut others = BTreeSet::new();
    for b in grants.items {
        let writes =
            b.name_any() == keys::LEAF_ACCOUNT && b.role_ref.name == keys::LEAF_WRITER_ROLE;
        let accounts = b.name_any() == keys::LEAF_SERVICE_ACCOUNT_ROLE
            && b.role_ref.name == keys::LEAF_SERVICE_ACCOUNT_ROLE;
        if !(writes || accounts) {
            continue;
        }
        let owner = b
            .labels()
            .get(keys::HOST_ID_LABEL)
            .cloned()
            .unwrap_or_default();
        if owner == host_id {
            let ns = b.namespace().unwrap_or_default();
            delete_exactly(&Api::<RoleBinding>::namespaced(leaf.clone(), &ns), &b)
                .await
                .with_context(|| format!("deleting leaf RoleBinding {ns}/{}", b.name_any()))?;
        } else {
            others.insert(owner);
        }
    }
    let cluster_grants: Api<ClusterRoleBinding> = Api::all(leaf.clone());
    for name in [
        keys::LEAF_CLUSTER_WRITER_ROLE,
        // The all-namespaces grant of joins before Secrets read left it.
        keys::LEAF_WRITER_ROLE,
        keys::LEAF_SERVICE_ACCOUNT_ROLE,
    ] {
        if let Some(b) = cluster_grants.get_opt(name).await?
            && is_managed(&b.metadata)
        {
            match b.labels().get(keys::HOST_ID_LABEL) {
                Some(owner) if owner == host_id => {
                    delete_exactly(&cluster_grants, &b).await.with_context(|| {
                        format!("deleting the leaf's all-namespaces grant {name}")
                    })?;
                }
                Some(owner) => {
                    others.insert(owner.clone());
                }
                None => {}
            }
        }
    }
    Ok(others)
}

/// This host's token Secrets: every token of the leaf account bound to one stops
/// authenticating.
async fn remove_token_secrets(leaf: &Client, host_id: &str) -> anyhow::Result<()> {
    let api = Api::<Secret>::namespaced(leaf.clone(), keys::SYSTEM_NAMESPACE);
    let ours = api
        .list(&ListParams::default().labels(&token_secret_selector(host_id)))
        .await
        .context("listing this host's leaf token Secrets")?;
    for s in ours.items {
        if is_managed(&s.metadata) {
            delete_exactly(&api, &s).await.with_context(|| {
                format!(
                    "deleting leaf token Secret {}/{}",
                    keys::SYSTEM_NAMESPACE,
                    s.name_any()
                )
            })?;
        }
    }
    Ok(())
}

/// The account, the roles and the admission policies join created, once no host holds a
/// grant.
async fn remove_account(leaf: &Client) -> anyhow::Result<()> {
    let system = keys::SYSTEM_NAMESPACE;
    for name in [
        keys::LEAF_TOKEN_POLICY,
        keys::LEAF_NAMESPACE_POLICY,
        keys::LEAF_COPIES_POLICY,
    ] {
        delete_if_managed(
            &Api::<ValidatingAdmissionPolicyBinding>::all(leaf.clone()),
            name,
        )
        .await?;
        delete_if_managed(&Api::<ValidatingAdmissionPolicy>::all(leaf.clone()), name).await?;
    }
    delete_if_managed(
        &Api::<RoleBinding>::namespaced(leaf.clone(), system),
        keys::LEAF_TOKEN_ROLE,
    )
    .await?;
    delete_if_managed(
        &Api::<Role>::namespaced(leaf.clone(), system),
        keys::LEAF_TOKEN_ROLE,
    )
    .await?;
    delete_if_managed(
        &Api::<ClusterRoleBinding>::all(leaf.clone()),
        keys::LEAF_ACCOUNT,
    )
    .await?;
    delete_if_managed(&Api::<ClusterRole>::all(leaf.clone()), keys::LEAF_ACCOUNT).await?;
    delete_if_managed(
        &Api::<ClusterRole>::all(leaf.clone()),
        keys::LEAF_WRITER_ROLE,
    )
    .await?;
    delete_if_managed(
        &Api::<ClusterRole>::all(leaf.clone()),
        keys::LEAF_CLUSTER_WRITER_ROLE,
    )
    .await?;
    delete_if_managed(
        &Api::<ClusterRole>::all(leaf.clone()),
        keys::LEAF_SERVICE_ACCOUNT_ROLE,
    )
    .await?;
    // The token Secret of joins made before tokens came from the TokenRequest API.
    delete_if_managed(
        &Api::<Secret>::namespaced(leaf.clone(), system),
        LEGACY_TOKEN_SECRET,
    )
    .await?;
    delete_if_managed(
        &Api::<ServiceAccount>::namespaced(leaf.clone(), system),
        keys::LEAF_ACCOUNT,
    )
    .await?;
    // The namespace only when join created it (labelled managed-by).
    delete_if_managed(&Api::<Namespace>::all(leaf.clone()), system).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pods_references_by_name() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {
                "imagePullSecrets": [{"name": "pull"}],
                "initContainers": [{"name": "i", "envFrom": [{"configMapRef": {"name": "init-cm"}}]}],
                "containers": [{"name": "c",
                    "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "env-sec", "key": "k"}}},
                        {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "env-cm", "key": "k"}}},
                        {"name": "C", "value": "plain"}],
                    "envFrom": [{"secretRef": {"name": "from-sec"}}]}],
                "volumes": [{"name": "a", "configMap": {"name": "vol-cm"}},
                    {"name": "b", "secret": {"secretName": "vol-sec"}},
                    {"name": "c", "projected": {"sources": [{"configMap": {"name": "proj-cm"}},
                        {"secret": {"name": "proj-sec"}}, {"serviceAccountToken": {"path": "t"}}]}},
                    {"name": "d", "emptyDir": {}}]
            }
        }))
        .expect("a pod");
        let (cms, secrets) = references(&pod);
        assert_eq!(
            cms.into_iter().collect::<Vec<_>>(),
            ["env-cm", "init-cm", "proj-cm", "vol-cm"]
        );
        assert_eq!(
            secrets.into_iter().collect::<Vec<_>>(),
            ["env-sec", "from-sec", "proj-sec", "pull", "vol-sec"]
        );
    }

    #[test]
    fn only_the_allowed_kubeconfig_form_is_used() {
        let good = "apiVersion: v1\nkind: Config\nclusters: [{name: e, cluster: {server: 'https://10.0.0.1', certificate-authority-data: Q0E=}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: e, context: {cluster: e, user: u}}]\ncurrent-context: e\n";
        let secret = |text: &str| Secret {
            data: Some(
                [(
                    keys::KUBECONFIG_KEY.to_string(),
                    k8s_openapi::ByteString(text.as_bytes().to_vec()),
                )]
                .into(),
            ),
            ..Default::default()
        };
        assert_eq!(
            stored_kubeconfig(&secret(good)).ok().flatten().as_deref(),
            Some(good)
        );
        let exec = good.replace("{token: t}", "{exec: {command: /bin/sh}}");
        let e = stored_kubeconfig(&secret(&exec)).expect_err("exec refused");
        assert!(
            format!("{e:#}").starts_with("data.kubeconfig: users[0].user.exec: not allowed"),
            "{e:#}"
        );
        assert!(matches!(stored_kubeconfig(&Secret::default()), Ok(None)));
    }

    #[test]
    fn marks_name_the_host_and_the_leaf() {
        let meta = |labels: serde_json::Value| -> ObjectMeta {
            serde_json::from_value(json!({"labels": labels})).expect("metadata")
        };
        let ours = meta(json!({keys::HOST_ID_LABEL: "h", keys::MANAGED_CLUSTER_LABEL: "east"}));
        assert!(marked(&ours, "h", "east"));
        assert!(!marked(&ours, "other", "east"));
        assert!(!marked(&ours, "h", "west"));
        assert!(!marked(
            &meta(json!({keys::MANAGED_CLUSTER_LABEL: "east"})),
            "h",
            "east"
        ));
    }
}
