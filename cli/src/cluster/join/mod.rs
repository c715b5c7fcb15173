//! `kubectl mcsched join cluster`: the leaf gets a least-privilege ServiceAccount (reading
//! cluster-wide what scheduling needs, writing only in the namespaces granted), the host a
//! Secret with the leaf's server, CA and an expiring token for it, the virtual node and the
//! agent's per-leaf RBAC. Checks come first; whatever this run created is removed again if
//! a later step fails.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{Namespace, Node, NodeSpec, Secret, ServiceAccount, Taint};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::{
    Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions,
};
use kube::{Client, Resource, ResourceExt};
use mcsched_shared::keys;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::leaf_access::{self, Grant, PodSecurity, managed_labels};
use super::{code, names, step, warn};
use crate::duration;
use crate::kube_context::{KubeArgs, load_config};

mod apply;
mod rbac;
mod rollback;

use apply::*;
pub use apply::{delete_exactly, delete_quietly, is_managed};
use rbac::*;
pub use rbac::{NODE_LEASE_NS, rbac_name};
use rollback::*;

#[derive(Debug, clap::Args)]
pub struct JoinArgs {
    /// Name of the leaf cluster; its virtual node is mcsched-NAME.
    #[arg(long, value_name = "NAME")]
    pub name: String,
    /// Kubeconfig of the leaf cluster (the host is the usual --kubeconfig/--context).
    #[arg(long, value_name = "FILE")]
    pub cluster_kubeconfig: PathBuf,
    /// Context of --cluster-kubeconfig (its current context when not given).
    #[arg(long, value_name = "NAME")]
    pub cluster_context: Option<String>,
    /// Leaf namespaces the host may run pods in (comma-separated): the leaf account may
    /// write pods, ConfigMaps, Secrets and PVCs there and nowhere else. Missing ones are
    /// created. Joining again with another list adds and removes grants.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "NS,...",
        required_unless_present = "all_namespaces",
        conflicts_with = "all_namespaces"
    )]
    pub namespaces: Vec<String>,
    /// Let the host run pods in every leaf namespace but kube-system, kube-public,
    /// kube-node-lease and mcsched-system (an admission policy refuses writes there), and
    /// create namespaces; Secrets are read only in the namespaces there at join (join
    /// again to add later ones). Only for a host trusted as much as the leaf's admins.
    #[arg(long)]
    pub all_namespaces: bool,
    /// Let pod sync create, in the granted namespaces, a ServiceAccount a host pod names
    /// when the leaf has none of that name (marked as this host's, without any RBAC; deleted
    /// once no copy uses it). Without it such a pod goes to leaves that have the account.
    /// Joining again without it withdraws the grant.
    #[arg(long)]
    pub service_accounts: bool,
    /// Pod Security level (enforce, version latest) of the leaf namespaces join creates:
    /// the leaf's admission refuses host pods beyond it, and the agent keeps such pods off
    /// the leaf. Joining again with another level relabels the granted namespaces join created;
    /// namespaces that existed before keep their own labels, which the agent judges by.
    #[arg(long, value_enum, value_name = "LEVEL", default_value_t = PodSecurity::Baseline)]
    pub pod_security: PodSecurity,
    /// Lifetime of the leaf account's tokens (at least 10m); the agent renews the token
    /// in the join Secret before it expires. The leaf refuses the account longer tokens,
    /// or tokens not bound to the Secret join creates in its mcsched-system namespace;
    /// joining again replaces that Secret, revoking every token bound to the old one.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = crate::duration::parse)]
    pub token_lifetime: Duration,
    /// Accept a --cluster-kubeconfig with `insecure-skip-tls-verify: true`: join then
    /// talks to the leaf without verifying its certificate and pins into the join Secret
    /// the CA the leaf publishes (ConfigMap kube-root-ca.crt) as read over that unverified
    /// connection — trust on first use, as kubeadm's
    /// --discovery-token-unsafe-skip-ca-verification. Without it such a kubeconfig is
    /// refused.
    #[arg(long)]
    pub unsafe_skip_ca_verification: bool,
    /// Region label of the virtual node (default: the leaf nodes' common region).
    #[arg(long)]
    pub region: Option<String>,
    /// Zone label of the virtual node (default: the leaf nodes' common zone).
    #[arg(long)]
    pub zone: Option<String>,
    /// Provider label of the virtual node (mcsched.io/provider).
    #[arg(long)]
    pub provider: Option<String>,
    /// Relative cost of running a pod in this leaf (mcsched.io/cost).
    #[arg(long)]
    pub cost: Option<String>,
    /// Extra label of the virtual node; repeatable.
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<String>,
}

/// How long join waits for the leaf's kube-root-ca.crt ConfigMap when the leaf's
/// kubeconfig names no CA.
const CA_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TransportError {
    #[error(
        "clusters[].cluster.server is {0}://: join would send the leaf admin's credentials, and receive the leaf account's token, unencrypted; give the leaf's https:// address"
    )]
    NotHttps(String),
    #[error(
        "clusters[].cluster.insecure-skip-tls-verify is true: the leaf's CA join would pin would be read over an unverified connection; give the leaf's CA (certificate-authority-data), or pass --unsafe-skip-ca-verification to trust what the leaf answers now"
    )]
    Unverified,
}

/// How join may reach the leaf: over HTTPS only, and without verifying the leaf's
/// certificate only when the user said so.
fn transport(
    scheme: Option<&str>,
    insecure: bool,
    acknowledged: bool,
) -> Result<(), TransportError> {
    match scheme {
        Some("https") => {}
        other => return Err(TransportError::NotHttps(other.unwrap_or_default().into())),
    }
    if insecure && !acknowledged {
        return Err(TransportError::Unverified);
    }
    Ok(())
}

/// Everything join decided before it touches a cluster.
struct Plan<'a> {
    args: &'a JoinArgs,
    /// The host namespace of the agent and the join Secrets.
    namespace: String,
    server: String,
    leaf_id: String,
    host_id: String,
    version: String,
    cost: Option<u64>,
    extra: BTreeMap<String, String>,
    grant: Grant,
    /// The leaf's CA (PEM) from its kubeconfig, when that names one.
    ca: Option<Vec<u8>>,
    tls_server_name: Option<String>,
}

pub async fn run(kube: &KubeArgs, args: JoinArgs) -> anyhow::Result<()> {
    names::cluster(&args.name)?;
    let extra = names::labels(&args.labels)?;
    let cost = args.cost.as_deref().map(names::cost).transpose()?;
    for (flag, v) in [
        ("region", &args.region),
        ("zone", &args.zone),
        ("provider", &args.provider),
    ] {
        if let Some(v) = v {
            names::topology(flag, v)?;
        }
    }
    let grant = if args.all_namespaces {
        Grant::AllNamespaces
    } else {
        Grant::Namespaces(names::namespaces(&args.namespaces)?)
    };
    names::token_lifetime(args.token_lifetime)?;
    let namespace = kube.namespace_or(keys::SYSTEM_NAMESPACE).to_string();
    let host = kube.client().await.context("host cluster")?;
    let leaf_config = load_config(
        Some(&args.cluster_kubeconfig),
        args.cluster_context.as_deref(),
    )
    .await
    .with_context(|| format!("--cluster-kubeconfig {}", args.cluster_kubeconfig.display()))?;
    let server = leaf_config
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_string();
    transport(
        leaf_config.cluster_url.scheme_str(),
        leaf_config.accept_invalid_certs,
        args.unsafe_skip_ca_verification,
    )
    .with_context(|| format!("--cluster-kubeconfig {}", args.cluster_kubeconfig.display()))?;
    if leaf_config.accept_invalid_certs {
        warn(
            "--unsafe-skip-ca-verification: the leaf's certificate is not verified; the CA pinned into the join Secret is the one the leaf answers with now",
        );
    }
    let ca = leaf_config
        .root_cert
        .as_deref()
        .filter(|certs| !certs.is_empty())
        .map(leaf_access::ca_pem);
    let tls_server_name = leaf_config.tls_server_name.clone();
    let leaf = Client::try_from(leaf_config).context("creating the leaf client")?;
    let version =
        match tokio::time::timeout(Duration::from_secs(10), leaf.apiserver_version()).await {
            Ok(Ok(v)) => v.git_version,
            Ok(Err(e)) => bail!("cannot reach leaf cluster at {server}: {e}"),
            Err(_) => bail!("cannot reach leaf cluster at {server}: no answer within 10s"),
        };
    step(&format!("leaf cluster reachable at {server} ({version})"));
    let missing = leaf_access::missing_permissions(&leaf, &grant)
        .await
        .context("checking permissions in the leaf")?;
    if !missing.is_empty() {
        bail!(
            "missing permissions in the leaf cluster (nothing was created): {}",
            missing.join(", ")
        );
    }
    let host_id = super::host_id(&host).await?;
    let leaf_id = super::cluster_id(&leaf, "leaf").await?;
    if leaf_id == host_id {
        bail!("--cluster-kubeconfig names the host cluster itself: a leaf must be another cluster");
    }

    let secret_name = keys::cluster_secret_name(&args.name);
    let secrets: Api<Secret> = Api::namespaced(host.clone(), &namespace);
    let joined = secrets
        .list(&kube::api::ListParams::default().labels(keys::CLUSTER_LABEL))
        .await
        .context("listing join Secrets in the host")?;
    let joined_as = |s: &Secret| {
        (
            s.labels()
                .get(keys::CLUSTER_LABEL)
                .cloned()
                .unwrap_or_default(),
            s.annotations().get(keys::CLUSTER_ID_ANNOTATION).cloned(),
        )
    };
    // The name first: a name is never reused for a different leaf.
    for s in &joined.items {
        let (cluster, id) = joined_as(s);
        if cluster == args.name && id.as_deref() != Some(leaf_id.as_str()) {
            bail!(
                "cluster name {} is already used by another leaf (id {})",
                args.name,
                id.unwrap_or_default()
            );
        }
    }
    for s in &joined.items {
        let (cluster, id) = joined_as(s);
        if cluster != args.name && id.as_deref() == Some(leaf_id.as_str()) {
            bail!("this leaf cluster is already joined as {cluster}");
        }
    }
    let node_name = keys::virtual_node_name(&args.name);
    let nodes: Api<Node> = Api::all(host.clone());
    if let Some(n) = nodes.get_opt(&node_name).await?
        && n.labels().get(keys::CLUSTER_LABEL) != Some(&args.name)
    {
        bail!("node {node_name} exists in the host and is not this leaf's virtual node");
    }
    // Joining a joined leaf again updates it: labels, token, and which namespaces are
    // granted (the way to add or remove one later).
    let rejoin = joined.items.iter().any(|s| s.name_any() == secret_name);

    let mut rollback = Rollback {
        host: host.clone(),
        leaf: leaf.clone(),
        created: Vec::new(),
    };
    let plan = Plan {
        args: &args,
        namespace,
        server,
        leaf_id,
        host_id,
        version,
        cost,
        extra,
        grant,
        ca,
        tls_server_name,
    };
    match join_steps(&plan, &host, &leaf, &mut rollback).await {
        Ok(()) => {
            let verb = if rejoin { "updated" } else { "joined" };
            println!("cluster {} {verb}: virtual node {node_name}", args.name);
            Ok(())
        }
        Err(e) => {
            rollback.undo().await;
            Err(e)
        }
    }
}

async fn join_steps(
    p: &Plan<'_>,
    host: &Client,
    leaf: &Client,
    rb: &mut Rollback,
) -> anyhow::Result<()> {
    let args = p.args;
    let system = keys::SYSTEM_NAMESPACE;
    // Leaf side: the account, what it reads, what it may write, its own tokens.
    let leaf_ns: Api<Namespace> = Api::all(leaf.clone());
    if leaf_ns.get_opt(system).await?.is_none() {
        leaf_ns
            .create(&PostParams::default(), &namespace_object(system))
            .await
            .context("creating the leaf namespace")?;
        rb.record_cluster::<Namespace>(true, system.into());
    }
    if apply_in_leaf(
        &Api::namespaced(leaf.clone(), system),
        &leaf_access::service_account(),
    )
    .await?
    {
        rb.record_namespaced::<ServiceAccount>(true, system.into(), keys::LEAF_ACCOUNT.into());
    }
    if apply_in_leaf(&Api::all(leaf.clone()), &leaf_access::reader_role()).await? {
        rb.record_cluster::<ClusterRole>(true, keys::LEAF_ACCOUNT.into());
    }
    if apply_in_leaf(&Api::all(leaf.clone()), &leaf_access::reader_binding()).await? {
        rb.record_cluster::<ClusterRoleBinding>(true, keys::LEAF_ACCOUNT.into());
    }
    if apply_in_leaf(&Api::all(leaf.clone()), &leaf_access::writer_role()).await? {
        rb.record_cluster::<ClusterRole>(true, keys::LEAF_WRITER_ROLE.into());
    }
    if args.service_accounts
        && apply_in_leaf(
            &Api::all(leaf.clone()),
            &leaf_access::service_account_role(),
        )
        .await?
    {
        rb.record_cluster::<ClusterRole>(true, keys::LEAF_SERVICE_ACCOUNT_ROLE.into());
    }
    if matches!(p.grant, Grant::AllNamespaces)
        && apply_in_leaf(&Api::all(leaf.clone()), &leaf_access::cluster_writer_role()).await?
    {
        rb.record_cluster::<ClusterRole>(true, keys::LEAF_CLUSTER_WRITER_ROLE.into());
    }
    if apply_in_leaf(
        &Api::namespaced(leaf.clone(), system),
        &leaf_access::token_role(),
    )
    .await?
    {
        rb.record_namespaced::<Role>(true, system.into(), keys::LEAF_TOKEN_ROLE.into());
    }
    if apply_in_leaf(
        &Api::namespaced(leaf.clone(), system),
        &leaf_access::token_binding(),
    )
    .await?
    {
        rb.record_namespaced::<RoleBinding>(true, system.into(), keys::LEAF_TOKEN_ROLE.into());
    }
    step(&format!(
        "leaf: ServiceAccount {system}/{} reading cluster-wide what scheduling needs (ClusterRole {}) and requesting its own tokens (Role {})",
        keys::LEAF_ACCOUNT,
        keys::LEAF_ACCOUNT,
        keys::LEAF_TOKEN_ROLE
    ));
    // The policies before any grant: no moment when the account writes where it never may.
    policies(leaf, rb).await?;
    grant_writes(p, leaf, rb).await?;

    let ca = match &p.ca {
        Some(ca) => ca.clone(),
        None => leaf_access::published_ca(leaf, CA_TIMEOUT)
            .await
            .context("reading the leaf's CA")?
            .with_context(|| {
                format!(
                    "no CA for the leaf: --cluster-kubeconfig names none (certificate-authority-data or certificate-authority) and ConfigMap {system}/{} did not appear in the leaf within {}s",
                    leaf_access::ROOT_CA_CONFIGMAP,
                    CA_TIMEOUT.as_secs()
                )
            })?,
    };
    let token_secret = new_token_secret(p, leaf, rb).await?;
    let leaf_access::LeafToken {
        token,
        expires,
        audiences,
    } = leaf_access::request_token(leaf, args.token_lifetime, &token_secret)
        .await
        .with_context(|| {
            format!(
                "requesting a token for ServiceAccount {system}/{} (TokenRequest)",
                keys::LEAF_ACCOUNT
            )
        })?;
    allow_audiences(leaf, &token_secret, &audiences).await?;
    if token.is_empty() {
        bail!(
            "the leaf answered the TokenRequest for {system}/{} without a token",
            keys::LEAF_ACCOUNT
        );
    }
    let lifetime = duration::display(args.token_lifetime);
    step(&format!(
        "leaf: a token for {} valid for {lifetime}{}, bound to Secret {system}/{} (the agent renews it; tokens are refused longer, or bound to anything else)",
        keys::LEAF_ACCOUNT,
        expires
            .map(|t| format!(" (until {})", t.0))
            .unwrap_or_default(),
        token_secret.name_any()
    ));

    // Host side.
    let namespace = p.namespace.as_str();
    let host_ns: Api<Namespace> = Api::all(host.clone());
    if host_ns.get_opt(namespace).await?.is_none() {
        host_ns
            .create(&PostParams::default(), &namespace_object(namespace))
            .await
            .context("creating the host namespace")?;
        rb.record_cluster::<Namespace>(false, namespace.into());
    }
    let node_name = keys::virtual_node_name(&args.name);
    let (region, zone) = match (&args.region, &args.zone) {
        (Some(r), Some(z)) => (Some(r.clone()), Some(z.clone())),
        _ => {
            let (r, z) = leaf_topology(leaf).await?;
            (args.region.clone().or(r), args.zone.clone().or(z))
        }
    };
    let mut labels = p.extra.clone();
    labels.insert(keys::CLUSTER_LABEL.into(), args.name.clone());
    labels.insert("kubernetes.io/hostname".into(), node_name.clone());
    labels.insert("kubernetes.io/os".into(), "linux".into());
    labels.insert("type".into(), "virtual-kubelet".into());
    labels.insert(keys::MANAGED_BY_LABEL.into(), keys::MANAGED_BY_VALUE.into());
    for (k, v) in [
        (keys::REGION_LABEL, region),
        (keys::ZONE_LABEL, zone),
        (keys::PROVIDER_LABEL, args.provider.clone()),
        (keys::COST_LABEL, p.cost.map(|c| c.to_string())),
    ] {
        if let Some(v) = v {
            labels.insert(k.into(), v);
        }
    }
    let node = Node {
        metadata: ObjectMeta {
            name: Some(node_name.clone()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                keys::CLUSTER_ID_ANNOTATION.to_string(),
                p.leaf_id.clone(),
            )])),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: Some(vec![Taint {
                key: keys::LEAF_TAINT.into(),
                value: Some("true".into()),
                effect: "NoSchedule".into(),
                time_added: None,
            }]),
            ..Default::default()
        }),
        status: None,
    };
    let nodes: Api<Node> = Api::all(host.clone());
    if apply(&nodes, &node).await? {
        rb.record_cluster::<Node>(false, node_name.clone());
        let status = json!({"status": {
            "nodeInfo": {"kubeletVersion": p.version},
            "conditions": [{"type": "Ready", "status": "Unknown", "reason": "LeafClusterJoined",
                "message": "waiting for the mcsched agent to report the leaf's state"}]}});
        nodes
            .patch_status(&node_name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .context("writing the virtual node's first status")?;
    }
    step(&format!("host: virtual node {node_name}"));

    let secret_name = keys::cluster_secret_name(&args.name);
    for (created, kind) in agent_rbac(host, namespace, &node_name, &secret_name).await? {
        if created {
            rb.record_host_rbac(kind, &node_name, namespace);
        }
    }
    step(&format!(
        "host: RBAC {}{} for the agent (this node, its Lease and its join Secret only)",
        keys::VIRTUAL_NODE_RBAC_PREFIX,
        args.name
    ));

    // Last, so the agent only takes the leaf up once its virtual node and RBAC exist.
    let kubeconfig = leaf_access::kubeconfig(
        &args.name,
        &p.server,
        &ca,
        p.tls_server_name.as_deref(),
        &token,
    )?;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(secret_name.clone()),
            namespace: Some(namespace.into()),
            labels: Some(
                managed_labels()
                    .into_iter()
                    .chain([(keys::CLUSTER_LABEL.to_string(), args.name.clone())])
                    .collect(),
            ),
            annotations: Some(BTreeMap::from([
                (keys::CLUSTER_ID_ANNOTATION.to_string(), p.leaf_id.clone()),
                (keys::TOKEN_LIFETIME_ANNOTATION.to_string(), lifetime),
            ])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            keys::KUBECONFIG_KEY.to_string(),
            ByteString(kubeconfig.into_bytes()),
        )])),
        type_: Some("Opaque".into()),
        ..Default::default()
    };
    if apply(&Api::namespaced(host.clone(), namespace), &secret).await? {
        rb.record_namespaced::<Secret>(false, namespace.into(), secret_name.clone());
    }
    step(&format!(
        "host: Secret {namespace}/{secret_name} with the leaf's server, CA and token"
    ));
    // What the Secret no longer needs, and grants no longer asked for, go once all else
    // is in place.
    remove_legacy_token(leaf).await?;
    remove_old_token_secrets(p, leaf, &token_secret).await?;
    remove_stale_grants(p, leaf).await
}

/// The admission policies bounding the leaf account's tokens, keeping it out of the
/// leaf's system namespaces and off what pod sync did not create (the same for every
/// host: applied again as they are, so joining again brings a leaf joined before a policy
/// existed up to date).
async fn policies(leaf: &Client, rb: &mut Rollback) -> anyhow::Result<()> {
    let all = Api::<ValidatingAdmissionPolicy>::all(leaf.clone());
    let bindings = Api::<ValidatingAdmissionPolicyBinding>::all(leaf.clone());
    for (policy, binding) in [
        (
            leaf_access::namespace_policy(),
            leaf_access::namespace_policy_binding(),
        ),
        (
            leaf_access::token_policy(),
            leaf_access::token_policy_binding(),
        ),
        (
            leaf_access::copies_policy(),
            leaf_access::copies_policy_binding(),
        ),
    ] {
        let name = policy.name_any();
        if apply_in_leaf(&all, &policy).await? {
            rb.record_cluster::<ValidatingAdmissionPolicy>(true, name.clone());
        }
        if apply_in_leaf(&bindings, &binding).await? {
            rb.record_cluster::<ValidatingAdmissionPolicyBinding>(true, name);
        }
    }
    step(&format!(
        "leaf: admission policies {} (no write of {} in {}), {} (its tokens bound to join's Secret, for its lifetime at most) and {} (no update or deletion of {} pod sync did not create)",
        keys::LEAF_NAMESPACE_POLICY,
        keys::LEAF_ACCOUNT,
        keys::LEAF_PROTECTED_NAMESPACES.join(", "),
        keys::LEAF_TOKEN_POLICY,
        keys::LEAF_COPIES_POLICY,
        leaf_access::copied_resources_text()
    ));
    Ok(())
}

/// A new token Secret for this host, with the lifetime asked for: the leaf tokens are
/// bound to it.
async fn new_token_secret(
    p: &Plan<'_>,
    leaf: &Client,
    rb: &mut Rollback,
) -> anyhow::Result<Secret> {
    let api: Api<Secret> = Api::namespaced(leaf.clone(), keys::SYSTEM_NAMESPACE);
    let secret = api
        .create(
            &PostParams::default(),
            &leaf_access::token_secret(&p.host_id, &p.args.name, p.args.token_lifetime),
        )
        .await
        .context("creating the leaf token Secret")?;
    rb.record_namespaced::<Secret>(true, keys::SYSTEM_NAMESPACE.into(), secret.name_any());
    Ok(secret)
}

/// Records on the token Secret the audiences the leaf gave join's token: the token policy
/// lets renewals ask for these only.
async fn allow_audiences(
    leaf: &Client,
    secret: &Secret,
    audiences: &[String],
) -> anyhow::Result<()> {
    if audiences.is_empty() || audiences.iter().any(|a| a.is_empty() || a.contains(',')) {
        bail!(
            "the leaf gave its token the audiences {audiences:?}: the token policy keeps a comma-separated list of non-empty ones"
        );
    }
    let patch = json!({"metadata": {"annotations": {
        keys::TOKEN_AUDIENCES_ANNOTATION: audiences.join(",")}}});
    Api::<Secret>::namespaced(leaf.clone(), keys::SYSTEM_NAMESPACE)
        .patch(
            &secret.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .context("recording the token's audiences on the leaf token Secret")?;
    Ok(())
}

/// This host's token Secrets but the new one: deleting one revokes every token bound to
/// it (the join before's, and any minted from them).
async fn remove_old_token_secrets(
    p: &Plan<'_>,
    leaf: &Client,
    keep: &Secret,
) -> anyhow::Result<()> {
    let api: Api<Secret> = Api::namespaced(leaf.clone(), keys::SYSTEM_NAMESPACE);
    let old = api
        .list(&ListParams::default().labels(&leaf_access::token_secret_selector(&p.host_id)))
        .await
        .context("listing this host's leaf token Secrets")?;
    for s in old.items {
        if s.metadata.uid == keep.metadata.uid || !is_managed(&s.metadata) {
            continue;
        }
        delete_exactly(&api, &s)
            .await
            .context("removing the leaf token Secret of the join before")?;
        step(&format!(
            "leaf: token Secret {}/{} of the join before removed (the tokens bound to it no longer authenticate)",
            keys::SYSTEM_NAMESPACE,
            s.name_any()
        ));
    }
    Ok(())
}

/// The never-expiring token Secret earlier joins created: the join Secret now holds an
/// expiring token, so the old one is revoked.
async fn remove_legacy_token(leaf: &Client) -> anyhow::Result<()> {
    let api: Api<Secret> = Api::namespaced(leaf.clone(), keys::SYSTEM_NAMESPACE);
    if let Some(s) = api.get_opt(leaf_access::LEGACY_TOKEN_SECRET).await?
        && is_managed(&s.metadata)
    {
        delete_exactly(&api, &s)
            .await
            .context("removing the leaf's legacy token Secret")?;
        step(&format!(
            "leaf: legacy token Secret {}/{} removed (its token never expired)",
            keys::SYSTEM_NAMESPACE,
            leaf_access::LEGACY_TOKEN_SECRET
        ));
    }
    Ok(())
}

fn namespace_object(name: &str) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(managed_labels()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The leaf nodes' region and zone, each only when every node agrees.
async fn leaf_topology(leaf: &Client) -> anyhow::Result<(Option<String>, Option<String>)> {
    let nodes = Api::<Node>::all(leaf.clone())
        .list(&Default::default())
        .await
        .context("listing the leaf's nodes")?;
    let common = |key: &str| {
        let mut values = nodes.items.iter().map(|n| n.labels().get(key).cloned());
        let first = values.next().flatten()?;
        values.all(|v| v.as_ref() == Some(&first)).then_some(first)
    };
    Ok((common(keys::REGION_LABEL), common(keys::ZONE_LABEL)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leaf_is_reached_over_verified_https_unless_the_user_accepts_less() {
        assert_eq!(transport(Some("https"), false, false), Ok(()));
        let e = transport(Some("http"), false, false).expect_err("http refused");
        assert!(
            e.to_string()
                .starts_with("clusters[].cluster.server is http://"),
            "{e}"
        );
        assert_eq!(
            transport(Some("http"), true, true),
            Err(TransportError::NotHttps("http".into())),
            "not even acknowledged"
        );
        let e = transport(Some("https"), true, false).expect_err("unverified refused");
        assert!(
            e.to_string().contains("insecure-skip-tls-verify is true")
                && e.to_string().contains("--unsafe-skip-ca-verification"),
            "{e}"
        );
        assert_eq!(transport(Some("https"), true, true), Ok(()));
    }
}
