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

/// Objects this run created (not ones that existed before), undone in reverse order.
type Undo = Box<dyn FnOnce(Client) -> futures::future::BoxFuture<'static, ()> + Send>;

enum Created {
    Leaf(Undo),
    Host(Undo),
}

struct Rollback {
    host: Client,
    leaf: Client,
    created: Vec<(String, Created)>,
}

impl Rollback {
    fn push(&mut self, in_leaf: bool, what: String, undo: Undo) {
        let what = format!("{} {what}", if in_leaf { "leaf" } else { "host" });
        let c = if in_leaf {
            Created::Leaf(undo)
        } else {
            Created::Host(undo)
        };
        self.created.push((what, c));
    }

    fn record_cluster<K>(&mut self, in_leaf: bool, name: String)
    where
        K: Resource<DynamicType = (), Scope = kube::core::ClusterResourceScope>
            + Clone
            + DeserializeOwned
            + Debug
            + Send
            + 'static,
    {
        let what = format!("{} {name}", K::kind(&()));
        self.push(
            in_leaf,
            what,
            Box::new(
                move |client: Client| -> futures::future::BoxFuture<'static, ()> {
                    Box::pin(async move {
                        let _ = Api::<K>::all(client)
                            .delete(&name, &DeleteParams::default())
                            .await;
                    })
                },
            ),
        );
    }

    fn record_namespaced<K>(&mut self, in_leaf: bool, ns: String, name: String)
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + Debug
            + Send
            + 'static,
    {
        let what = format!("{} {ns}/{name}", K::kind(&()));
        self.push(
            in_leaf,
            what,
            Box::new(
                move |client: Client| -> futures::future::BoxFuture<'static, ()> {
                    Box::pin(async move {
                        let _ = Api::<K>::namespaced(client, &ns)
                            .delete(&name, &DeleteParams::default())
                            .await;
                    })
                },
            ),
        );
    }

    async fn undo(self) {
        for (what, c) in self.created.into_iter().rev() {
            match c {
                Created::Leaf(f) => f(self.leaf.clone()).await,
                Created::Host(f) => f(self.host.clone()).await,
            }
            warn(&format!("rolled back: removed {what}"));
        }
    }
}

/// Server-side applies `obj`; true when it did not exist before.
async fn apply<K>(api: &Api<K>, obj: &K) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    let existed = api.get_opt(&name).await?.is_some();
    api.patch(
        &name,
        &PatchParams::apply(keys::FIELD_MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await?;
    Ok(!existed)
}

/// Whether mcsched created the object (`app.kubernetes.io/managed-by=mcsched`).
pub fn is_managed(meta: &ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(keys::MANAGED_BY_LABEL))
        .is_some_and(|v| v == keys::MANAGED_BY_VALUE)
}

fn describe<K: Resource<DynamicType = ()>>(meta: &ObjectMeta) -> String {
    let name = meta.name.as_deref().unwrap_or_default();
    match meta.namespace.as_deref() {
        Some(ns) => format!("{} {ns}/{name}", K::kind(&())),
        None => format!("{} {name}", K::kind(&())),
    }
}

/// [`apply`] in the leaf, refusing to take over an object of the same name that mcsched
/// did not create: the leaf owner's objects are never changed.
async fn apply_in_leaf<K>(api: &Api<K>, obj: &K) -> anyhow::Result<bool>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    if let Some(existing) = api.get_opt(&name).await?
        && !is_managed(existing.meta())
    {
        bail!(
            "{} exists in the leaf and is not mcsched's (no label {}={}): join does not take it over; remove or rename it",
            describe::<K>(existing.meta()),
            keys::MANAGED_BY_LABEL,
            keys::MANAGED_BY_VALUE
        );
    }
    apply(api, obj)
        .await
        .with_context(|| format!("writing leaf {}", describe::<K>(obj.meta())))
}

/// Deletes exactly the object that was read (its UID as precondition), ignoring what is
/// already gone.
pub async fn delete_exactly<K>(api: &Api<K>, obj: &K) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: obj.meta().uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&obj.name_any(), &dp).await {
        Ok(_) => Ok(true),
        Err(e) if code(&e) == Some(404) => Ok(false),
        Err(e) => Err(e),
    }
}

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

/// The admission policies bounding the leaf account's tokens and keeping it out of the
/// leaf's system namespaces (the same for every host: applied again as they are).
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
        "leaf: admission policies {} (no write of {} in {}) and {} (its tokens bound to join's Secret, for its lifetime at most)",
        keys::LEAF_NAMESPACE_POLICY,
        keys::LEAF_ACCOUNT,
        keys::LEAF_PROTECTED_NAMESPACES.join(", "),
        keys::LEAF_TOKEN_POLICY
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

/// The leaf account's write rights: a RoleBinding of [`keys::LEAF_WRITER_ROLE`] in each
/// granted namespace (created, marked as this host's, when missing), or with
/// `--all-namespaces` a ClusterRoleBinding of [`keys::LEAF_CLUSTER_WRITER_ROLE`] (no
/// Secret read) and a RoleBinding of the writer role (Secrets read) in every namespace
/// there now but the protected ones, where the namespace policy refuses every write.
async fn grant_writes(p: &Plan<'_>, leaf: &Client, rb: &mut Rollback) -> anyhow::Result<()> {
    match &p.grant {
        Grant::Namespaces(list) => {
            let namespaces: Api<Namespace> = Api::all(leaf.clone());
            let mut created = Vec::new();
            for ns in list {
                match namespaces.get_opt(ns).await? {
                    None => {
                        namespaces
                            .create(
                                &PostParams::default(),
                                &leaf_access::granted_namespace(
                                    ns,
                                    &p.host_id,
                                    &p.args.name,
                                    p.args.pod_security,
                                ),
                            )
                            .await
                            .with_context(|| format!("creating leaf namespace {ns}"))?;
                        rb.record_cluster::<Namespace>(true, ns.clone());
                        created.push(ns.as_str());
                    }
                    Some(existing) => pod_security_of(p, &namespaces, &existing, rb).await?,
                }
                let api: Api<RoleBinding> = Api::namespaced(leaf.clone(), ns);
                let binding = leaf_access::writer_binding(ns, &p.host_id);
                if put_grant(&api, &binding, &binding.role_ref, &p.host_id).await? {
                    rb.record_namespaced::<RoleBinding>(
                        true,
                        ns.clone(),
                        keys::LEAF_ACCOUNT.into(),
                    );
                }
                if p.args.service_accounts {
                    let binding = leaf_access::service_account_binding(ns, &p.host_id);
                    if put_grant(&api, &binding, &binding.role_ref, &p.host_id).await? {
                        rb.record_namespaced::<RoleBinding>(
                            true,
                            ns.clone(),
                            keys::LEAF_SERVICE_ACCOUNT_ROLE.into(),
                        );
                    }
                }
            }
            let created = if created.is_empty() {
                String::new()
            } else {
                format!(
                    "; created {} with Pod Security {}",
                    created.join(", "),
                    p.args.pod_security.as_str()
                )
            };
            step(&format!(
                "leaf: {} may write in namespace(s) {} only (RoleBinding {} to ClusterRole {}{created})",
                keys::LEAF_ACCOUNT,
                list.join(", "),
                keys::LEAF_ACCOUNT,
                keys::LEAF_WRITER_ROLE
            ));
        }
        Grant::AllNamespaces => {
            warn(&format!(
                "--all-namespaces: the host may create pods and write Secrets in every namespace of the leaf but {} (an admission policy refuses those), and so act as any ServiceAccount there; name the namespaces with --namespaces unless the host is trusted as much as the leaf's admins",
                keys::LEAF_PROTECTED_NAMESPACES.join(", ")
            ));
            let api: Api<ClusterRoleBinding> = Api::all(leaf.clone());
            let binding = leaf_access::writer_cluster_binding(&p.host_id);
            if put_grant(&api, &binding, &binding.role_ref, &p.host_id).await? {
                rb.record_cluster::<ClusterRoleBinding>(
                    true,
                    keys::LEAF_CLUSTER_WRITER_ROLE.into(),
                );
            }
            // Secrets are read by RoleBindings, never cluster-wide: in each namespace
            // there now (a namespace made later gets one when join runs again).
            for ns in readable_namespaces(leaf).await? {
                let api: Api<RoleBinding> = Api::namespaced(leaf.clone(), &ns);
                let binding = leaf_access::writer_binding(&ns, &p.host_id);
                if let Some(b) = api.get_opt(keys::LEAF_ACCOUNT).await?
                    && !(is_managed(&b.metadata) && b.role_ref == binding.role_ref)
                {
                    warn(&format!(
                        "leaf namespace {ns} has a RoleBinding {} that is not mcsched's: left as it is, and Secrets there are not read",
                        keys::LEAF_ACCOUNT
                    ));
                    continue;
                }
                if put_grant(&api, &binding, &binding.role_ref, &p.host_id).await? {
                    rb.record_namespaced::<RoleBinding>(true, ns, keys::LEAF_ACCOUNT.into());
                }
            }
            step(&format!(
                "leaf: {} may write in every namespace but {} (ClusterRoleBinding {}; Secrets read only in the namespaces there now, by RoleBindings {})",
                keys::LEAF_ACCOUNT,
                keys::LEAF_PROTECTED_NAMESPACES.join(", "),
                keys::LEAF_CLUSTER_WRITER_ROLE,
                keys::LEAF_ACCOUNT
            ));
            if p.args.service_accounts {
                let binding = leaf_access::service_account_cluster_binding(&p.host_id);
                if put_grant(&api, &binding, &binding.role_ref, &p.host_id).await? {
                    rb.record_cluster::<ClusterRoleBinding>(
                        true,
                        keys::LEAF_SERVICE_ACCOUNT_ROLE.into(),
                    );
                }
            }
        }
    }
    if p.args.service_accounts {
        step(&format!(
            "leaf: {} may create the ServiceAccounts the host's pods name where it may write (ClusterRole {}; no RBAC goes with them)",
            keys::LEAF_ACCOUNT,
            keys::LEAF_SERVICE_ACCOUNT_ROLE
        ));
    }
    Ok(())
}

/// A granted namespace that exists: one this host's join created for this leaf gets the
/// Pod Security level asked for; another is the leaf's own, whose labels are left as
/// they are (and are what the leaf enforces, and the agent judges copies by).
async fn pod_security_of(
    p: &Plan<'_>,
    namespaces: &Api<Namespace>,
    existing: &Namespace,
    rb: &mut Rollback,
) -> anyhow::Result<()> {
    let ns = existing.name_any();
    let labels = existing.labels();
    let ours = is_managed(&existing.metadata)
        && labels.get(keys::HOST_ID_LABEL) == Some(&p.host_id)
        && labels.get(keys::MANAGED_CLUSTER_LABEL) == Some(&p.args.name);
    if !ours {
        let level = labels
            .get(keys::POD_SECURITY_ENFORCE_LABEL)
            .map_or("none: the leaf's default", String::as_str);
        step(&format!(
            "leaf: namespace {ns} is not one join created: its Pod Security labels stay as they are (enforce: {level})"
        ));
        return Ok(());
    }
    let wanted = leaf_access::pod_security_labels(p.args.pod_security);
    if wanted.iter().all(|(k, v)| labels.get(k) == Some(v)) {
        return Ok(());
    }
    namespaces
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": wanted}})),
        )
        .await
        .with_context(|| format!("labelling leaf namespace {ns} with its Pod Security level"))?;
    // Undone with the rest if a later step fails: the labels as they were.
    let before: serde_json::Map<String, serde_json::Value> = wanted
        .keys()
        .map(|k| (k.clone(), labels.get(k).cloned().into()))
        .collect();
    rb.push(
        true,
        format!("Pod Security relabelling of Namespace {ns}"),
        Box::new(
            move |client: Client| -> futures::future::BoxFuture<'static, ()> {
                Box::pin(async move {
                    let _ = Api::<Namespace>::all(client)
                        .patch(
                            &ns,
                            &PatchParams::default(),
                            &Patch::Merge(json!({"metadata": {"labels": before}})),
                        )
                        .await;
                })
            },
        ),
    );
    step(&format!(
        "leaf: namespace {} now enforces Pod Security {}",
        existing.name_any(),
        p.args.pod_security.as_str()
    ));
    Ok(())
}

/// Creates a grant binding, or keeps the one there: this host's is re-applied, another
/// host's (the same grant of the same account) is left as it is. A binding of that name
/// that is not mcsched's, or binds another role, is refused. True when created.
async fn put_grant<K>(
    api: &Api<K>,
    binding: &K,
    role: &RoleRef,
    host_id: &str,
) -> anyhow::Result<bool>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug + HasRoleRef,
{
    let name = binding.meta().name.clone().unwrap_or_default();
    let Some(existing) = api.get_opt(&name).await? else {
        api.create(&PostParams::default(), binding)
            .await
            .with_context(|| format!("creating leaf {}", describe::<K>(binding.meta())))?;
        return Ok(true);
    };
    if !is_managed(existing.meta()) || existing.role_ref() != role {
        bail!(
            "{} exists in the leaf and is not mcsched's grant (label {}={}, role {} {}): join does not take it over; remove or rename it",
            describe::<K>(existing.meta()),
            keys::MANAGED_BY_LABEL,
            keys::MANAGED_BY_VALUE,
            role.kind,
            role.name
        );
    }
    let owner = existing
        .meta()
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::HOST_ID_LABEL));
    if owner.is_some_and(|o| o == host_id) {
        apply(api, binding)
            .await
            .with_context(|| format!("writing leaf {}", describe::<K>(binding.meta())))?;
    }
    Ok(false)
}

/// The leaf's namespaces that `--all-namespaces` grants Secrets read in: all there now
/// but the protected ones and those on their way out.
async fn readable_namespaces(leaf: &Client) -> anyhow::Result<Vec<String>> {
    let list = Api::<Namespace>::all(leaf.clone())
        .list(&ListParams::default())
        .await
        .context("listing the leaf's namespaces")?;
    Ok(list
        .items
        .into_iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .map(|n| n.name_any())
        .filter(|n| !keys::is_protected_leaf_namespace(n))
        .collect())
}

/// RoleBinding and ClusterRoleBinding alike.
trait HasRoleRef {
    fn role_ref(&self) -> &RoleRef;
}

impl HasRoleRef for RoleBinding {
    fn role_ref(&self) -> &RoleRef {
        &self.role_ref
    }
}

impl HasRoleRef for ClusterRoleBinding {
    fn role_ref(&self) -> &RoleRef {
        &self.role_ref
    }
}

/// Removes this host's grants that the run no longer asks for: RoleBindings in
/// namespaces not listed, or the all-namespaces binding when namespaces are listed. The
/// namespaces themselves and what runs there stay.
async fn remove_stale_grants(p: &Plan<'_>, leaf: &Client) -> anyhow::Result<()> {
    let ours = format!(
        "{}={},{}={}",
        keys::MANAGED_BY_LABEL,
        keys::MANAGED_BY_VALUE,
        keys::HOST_ID_LABEL,
        p.host_id
    );
    let keep: Vec<String> = match &p.grant {
        Grant::Namespaces(list) => list.clone(),
        Grant::AllNamespaces => readable_namespaces(leaf).await?,
    };
    let all = matches!(p.grant, Grant::AllNamespaces);
    let bindings = Api::<RoleBinding>::all(leaf.clone())
        .list(&ListParams::default().labels(&ours))
        .await
        .context("listing this host's grants in the leaf")?;
    for b in bindings.items {
        let ns = b.namespace().unwrap_or_default();
        let writes =
            b.name_any() == keys::LEAF_ACCOUNT && b.role_ref.name == keys::LEAF_WRITER_ROLE;
        let accounts = b.name_any() == keys::LEAF_SERVICE_ACCOUNT_ROLE
            && b.role_ref.name == keys::LEAF_SERVICE_ACCOUNT_ROLE;
        // With --all-namespaces the per-namespace grant is the writer's only (Secrets
        // read); the ServiceAccount grant is cluster-wide.
        let wanted = keep.contains(&ns) && (writes || (p.args.service_accounts && !all));
        if !(writes || accounts) || wanted {
            continue;
        }
        delete_exactly(&Api::<RoleBinding>::namespaced(leaf.clone(), &ns), &b)
            .await
            .with_context(|| format!("removing the grant in leaf namespace {ns}"))?;
        step(&format!(
            "leaf: {} in namespace {ns} removed (RoleBinding {ns}/{}); the namespace and what runs there stay",
            if writes {
                "grant"
            } else {
                "ServiceAccount grant"
            },
            b.name_any()
        ));
    }
    let api: Api<ClusterRoleBinding> = Api::all(leaf.clone());
    for (name, wanted, what) in [
        (
            keys::LEAF_CLUSTER_WRITER_ROLE,
            all,
            "the all-namespaces grant",
        ),
        // Joins before the split bound the writer role, Secrets read included, here.
        (
            keys::LEAF_WRITER_ROLE,
            false,
            "the all-namespaces grant of an earlier join",
        ),
        (
            keys::LEAF_SERVICE_ACCOUNT_ROLE,
            all && p.args.service_accounts,
            "the all-namespaces ServiceAccount grant",
        ),
    ] {
        if wanted {
            continue;
        }
        if let Some(b) = api.get_opt(name).await?
            && b.labels().get(keys::HOST_ID_LABEL) == Some(&p.host_id)
            && is_managed(&b.metadata)
        {
            delete_exactly(&api, &b)
                .await
                .with_context(|| format!("removing {what} in the leaf"))?;
            step(&format!("leaf: {what} removed (ClusterRoleBinding {name})"));
        }
    }
    Ok(())
}

impl Rollback {
    fn record_host_rbac(&mut self, kind: RbacKind, node: &str, namespace: &str) {
        let name = rbac_name(node);
        match kind {
            RbacKind::ClusterRole => self.record_cluster::<ClusterRole>(false, name),
            RbacKind::ClusterRoleBinding => self.record_cluster::<ClusterRoleBinding>(false, name),
            RbacKind::LeaseRole => {
                self.record_namespaced::<Role>(false, NODE_LEASE_NS.into(), name)
            }
            RbacKind::LeaseRoleBinding => {
                self.record_namespaced::<RoleBinding>(false, NODE_LEASE_NS.into(), name)
            }
            RbacKind::SecretRole => self.record_namespaced::<Role>(false, namespace.into(), name),
            RbacKind::SecretRoleBinding => {
                self.record_namespaced::<RoleBinding>(false, namespace.into(), name)
            }
        }
    }
}

pub const NODE_LEASE_NS: &str = "kube-node-lease";

#[derive(Clone, Copy)]
pub enum RbacKind {
    ClusterRole,
    ClusterRoleBinding,
    /// In `kube-node-lease`: the virtual node's Lease.
    LeaseRole,
    LeaseRoleBinding,
    /// In the agent's namespace: the join Secret, where the agent writes renewed tokens.
    SecretRole,
    SecretRoleBinding,
}

/// `mcsched-virtual-node-<cluster>`, from the node name `mcsched-<cluster>`.
pub fn rbac_name(node: &str) -> String {
    let cluster = node.strip_prefix(keys::VIRTUAL_NODE_PREFIX).unwrap_or(node);
    format!("{}{cluster}", keys::VIRTUAL_NODE_RBAC_PREFIX)
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

/// What the agent may do with this virtual node, its Lease and its join Secret, and
/// nothing else.
async fn agent_rbac(
    host: &Client,
    namespace: &str,
    node: &str,
    secret: &str,
) -> anyhow::Result<Vec<(bool, RbacKind)>> {
    let name = rbac_name(node);
    let meta = |ns: Option<&str>| ObjectMeta {
        name: Some(name.clone()),
        namespace: ns.map(String::from),
        labels: Some(managed_labels()),
        ..Default::default()
    };
    let only = |resources: &[&str], verbs: &[&str], group: &str, object: &str| PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(resources.iter().map(|s| s.to_string()).collect()),
        resource_names: Some(vec![object.to_string()]),
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    let subject = Subject {
        kind: "ServiceAccount".into(),
        name: keys::AGENT_NAME.into(),
        namespace: Some(namespace.into()),
        ..Default::default()
    };
    let role_ref = |kind: &str| RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: kind.into(),
        name: name.clone(),
    };
    let cr = ClusterRole {
        metadata: meta(None),
        rules: Some(vec![
            only(&["nodes"], &["get", "update", "patch", "delete"], "", node),
            only(&["nodes/status"], &["get", "update", "patch"], "", node),
        ]),
        ..Default::default()
    };
    let crb = ClusterRoleBinding {
        metadata: meta(None),
        role_ref: role_ref("ClusterRole"),
        subjects: Some(vec![subject.clone()]),
    };
    let lease_role = Role {
        metadata: meta(Some(NODE_LEASE_NS)),
        rules: Some(vec![only(
            &["leases"],
            &["get", "update", "patch", "delete"],
            "coordination.k8s.io",
            node,
        )]),
    };
    let lease_binding = RoleBinding {
        metadata: meta(Some(NODE_LEASE_NS)),
        role_ref: role_ref("Role"),
        subjects: Some(vec![subject.clone()]),
    };
    let secret_role = Role {
        metadata: meta(Some(namespace)),
        rules: Some(vec![only(
            &["secrets"],
            &["get", "patch", "update"],
            "",
            secret,
        )]),
    };
    let secret_binding = RoleBinding {
        metadata: meta(Some(namespace)),
        role_ref: role_ref("Role"),
        subjects: Some(vec![subject]),
    };
    let leases = Api::<Role>::namespaced(host.clone(), NODE_LEASE_NS);
    let lease_bindings = Api::<RoleBinding>::namespaced(host.clone(), NODE_LEASE_NS);
    let roles = Api::<Role>::namespaced(host.clone(), namespace);
    let bindings = Api::<RoleBinding>::namespaced(host.clone(), namespace);
    Ok(vec![
        (
            apply(&Api::all(host.clone()), &cr).await?,
            RbacKind::ClusterRole,
        ),
        (
            apply(&Api::all(host.clone()), &crb).await?,
            RbacKind::ClusterRoleBinding,
        ),
        (apply(&leases, &lease_role).await?, RbacKind::LeaseRole),
        (
            apply(&lease_bindings, &lease_binding).await?,
            RbacKind::LeaseRoleBinding,
        ),
        (apply(&roles, &secret_role).await?, RbacKind::SecretRole),
        (
            apply(&bindings, &secret_binding).await?,
            RbacKind::SecretRoleBinding,
        ),
    ])
}

/// Deletes, ignoring what is already gone; other failures are reported.
pub async fn delete_quietly<K>(api: &Api<K>, name: &str) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(true),
        Err(e) if code(&e) == Some(404) => Ok(false),
        Err(e) => Err(e),
    }
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
