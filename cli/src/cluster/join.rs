//! `kubectl mcsched join cluster`: the leaf gets a least-privilege ServiceAccount, the host
//! a Secret with a kubeconfig for it, the virtual node and the agent's per-leaf RBAC.
//! Checks come first; whatever this run created is removed again if a later step fails.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Node, NodeSpec, Secret, Taint};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use mcsched_shared::keys;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::leaf_access::{self, managed_labels};
use super::{code, names, step, warn};
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
    /// How long to wait for the leaf to issue the ServiceAccount token.
    #[arg(long, default_value_t = 60, value_name = "SECONDS")]
    pub token_timeout: u64,
}

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
    let leaf = Client::try_from(leaf_config).context("creating the leaf client")?;
    let version =
        match tokio::time::timeout(Duration::from_secs(10), leaf.apiserver_version()).await {
            Ok(Ok(v)) => v.git_version,
            Ok(Err(e)) => bail!("cannot reach leaf cluster at {server}: {e}"),
            Err(_) => bail!("cannot reach leaf cluster at {server}: no answer within 10s"),
        };
    step(&format!("leaf cluster reachable at {server} ({version})"));
    let missing = leaf_access::missing_permissions(&leaf)
        .await
        .context("checking permissions in the leaf")?;
    if !missing.is_empty() {
        bail!(
            "missing permissions in the leaf cluster (nothing was created): {}",
            missing.join(", ")
        );
    }
    let leaf_id = Api::<Namespace>::all(leaf.clone())
        .get("kube-system")
        .await
        .context("reading the leaf's kube-system namespace")?
        .metadata
        .uid
        .unwrap_or_default();

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
    let rejoin = joined.items.iter().any(|s| s.name_any() == secret_name);

    let mut rollback = Rollback {
        host: host.clone(),
        leaf: leaf.clone(),
        created: Vec::new(),
    };
    let result = join_steps(
        &args,
        &host,
        &leaf,
        &namespace,
        &server,
        &leaf_id,
        &version,
        cost,
        extra,
        &mut rollback,
    )
    .await;
    match result {
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

#[allow(clippy::too_many_arguments)]
async fn join_steps(
    args: &JoinArgs,
    host: &Client,
    leaf: &Client,
    namespace: &str,
    server: &str,
    leaf_id: &str,
    version: &str,
    cost: Option<u64>,
    extra: BTreeMap<String, String>,
    rb: &mut Rollback,
) -> anyhow::Result<()> {
    // Leaf side.
    let leaf_ns: Api<Namespace> = Api::all(leaf.clone());
    if leaf_ns.get_opt(keys::SYSTEM_NAMESPACE).await?.is_none() {
        leaf_ns
            .create(
                &PostParams::default(),
                &namespace_object(keys::SYSTEM_NAMESPACE),
            )
            .await
            .context("creating the leaf namespace")?;
        rb.record_cluster::<Namespace>(true, keys::SYSTEM_NAMESPACE.into());
    }
    let sa_api = Api::namespaced(leaf.clone(), keys::SYSTEM_NAMESPACE);
    if apply(&sa_api, &leaf_access::service_account()).await? {
        rb.record_namespaced::<k8s_openapi::api::core::v1::ServiceAccount>(
            true,
            keys::SYSTEM_NAMESPACE.into(),
            keys::LEAF_ACCOUNT.into(),
        );
    }
    if apply(&Api::all(leaf.clone()), &leaf_access::cluster_role()).await? {
        rb.record_cluster::<ClusterRole>(true, keys::LEAF_ACCOUNT.into());
    }
    if apply(
        &Api::all(leaf.clone()),
        &leaf_access::cluster_role_binding(),
    )
    .await?
    {
        rb.record_cluster::<ClusterRoleBinding>(true, keys::LEAF_ACCOUNT.into());
    }
    let token_api: Api<Secret> = Api::namespaced(leaf.clone(), keys::SYSTEM_NAMESPACE);
    if apply(&token_api, &leaf_access::token_secret()).await? {
        rb.record_namespaced::<Secret>(
            true,
            keys::SYSTEM_NAMESPACE.into(),
            leaf_access::TOKEN_SECRET.into(),
        );
    }
    let Some((token, ca)) =
        leaf_access::wait_for_token(leaf, Duration::from_secs(args.token_timeout)).await?
    else {
        bail!(
            "the leaf did not issue a token for ServiceAccount {}/{} within {}s (is its kube-controller-manager's token controller running?)",
            keys::SYSTEM_NAMESPACE,
            keys::LEAF_ACCOUNT,
            args.token_timeout
        );
    };
    step(&format!(
        "leaf: ServiceAccount {}/{} with ClusterRole {} and its token",
        keys::SYSTEM_NAMESPACE,
        keys::LEAF_ACCOUNT,
        keys::LEAF_ACCOUNT
    ));

    // Host side.
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
    let mut labels = extra;
    labels.insert(keys::CLUSTER_LABEL.into(), args.name.clone());
    labels.insert("kubernetes.io/hostname".into(), node_name.clone());
    labels.insert("kubernetes.io/os".into(), "linux".into());
    labels.insert("type".into(), "virtual-kubelet".into());
    labels.insert(keys::MANAGED_BY_LABEL.into(), keys::MANAGED_BY_VALUE.into());
    for (k, v) in [
        (keys::REGION_LABEL, region),
        (keys::ZONE_LABEL, zone),
        (keys::PROVIDER_LABEL, args.provider.clone()),
        (keys::COST_LABEL, cost.map(|c| c.to_string())),
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
                leaf_id.to_string(),
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
            "nodeInfo": {"kubeletVersion": version},
            "conditions": [{"type": "Ready", "status": "Unknown", "reason": "LeafClusterJoined",
                "message": "waiting for the mcsched agent to report the leaf's state"}]}});
        nodes
            .patch_status(&node_name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .context("writing the virtual node's first status")?;
    }
    step(&format!("host: virtual node {node_name}"));

    for (created, kind) in agent_rbac(host, namespace, &node_name).await? {
        if created {
            rb.record_host_rbac(kind, &node_name);
        }
    }
    step(&format!(
        "host: RBAC {}{} for the agent (this node and its Lease only)",
        keys::VIRTUAL_NODE_RBAC_PREFIX,
        args.name
    ));

    // Last, so the agent only takes the leaf up once its virtual node and RBAC exist.
    let kubeconfig =
        serde_yaml::to_string(&leaf_access::kubeconfig(&args.name, server, &ca, &token))?;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(keys::cluster_secret_name(&args.name)),
            namespace: Some(namespace.into()),
            labels: Some(
                managed_labels()
                    .into_iter()
                    .chain([(keys::CLUSTER_LABEL.to_string(), args.name.clone())])
                    .collect(),
            ),
            annotations: Some(BTreeMap::from([(
                keys::CLUSTER_ID_ANNOTATION.to_string(),
                leaf_id.to_string(),
            )])),
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
        rb.record_namespaced::<Secret>(
            false,
            namespace.into(),
            keys::cluster_secret_name(&args.name),
        );
    }
    step(&format!(
        "host: Secret {namespace}/{} with a kubeconfig for the leaf's ServiceAccount",
        keys::cluster_secret_name(&args.name)
    ));
    Ok(())
}

impl Rollback {
    fn record_host_rbac(&mut self, kind: RbacKind, node: &str) {
        let name = rbac_name(node);
        match kind {
            RbacKind::ClusterRole => self.record_cluster::<ClusterRole>(false, name),
            RbacKind::ClusterRoleBinding => self.record_cluster::<ClusterRoleBinding>(false, name),
            RbacKind::Role => self.record_namespaced::<Role>(false, NODE_LEASE_NS.into(), name),
            RbacKind::RoleBinding => {
                self.record_namespaced::<RoleBinding>(false, NODE_LEASE_NS.into(), name)
            }
        }
    }
}

const NODE_LEASE_NS: &str = "kube-node-lease";

#[derive(Clone, Copy)]
pub enum RbacKind {
    ClusterRole,
    ClusterRoleBinding,
    Role,
    RoleBinding,
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

/// What the agent may do with this virtual node and its Lease, and nothing else.
async fn agent_rbac(
    host: &Client,
    namespace: &str,
    node: &str,
) -> anyhow::Result<Vec<(bool, RbacKind)>> {
    let name = rbac_name(node);
    let meta = |ns: Option<&str>| ObjectMeta {
        name: Some(name.clone()),
        namespace: ns.map(String::from),
        labels: Some(managed_labels()),
        ..Default::default()
    };
    let only = |resources: &[&str], verbs: &[&str], group: &str| PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(resources.iter().map(|s| s.to_string()).collect()),
        resource_names: Some(vec![node.to_string()]),
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
            only(&["nodes"], &["get", "update", "patch", "delete"], ""),
            only(&["nodes/status"], &["get", "update", "patch"], ""),
        ]),
        ..Default::default()
    };
    let crb = ClusterRoleBinding {
        metadata: meta(None),
        role_ref: role_ref("ClusterRole"),
        subjects: Some(vec![subject.clone()]),
    };
    let role = Role {
        metadata: meta(Some(NODE_LEASE_NS)),
        rules: Some(vec![only(
            &["leases"],
            &["get", "update", "patch", "delete"],
            "coordination.k8s.io",
        )]),
    };
    let rb = RoleBinding {
        metadata: meta(Some(NODE_LEASE_NS)),
        role_ref: role_ref("Role"),
        subjects: Some(vec![subject]),
    };
    Ok(vec![
        (
            apply(&Api::all(host.clone()), &cr).await?,
            RbacKind::ClusterRole,
        ),
        (
            apply(&Api::all(host.clone()), &crb).await?,
            RbacKind::ClusterRoleBinding,
        ),
        (
            apply(&Api::namespaced(host.clone(), NODE_LEASE_NS), &role).await?,
            RbacKind::Role,
        ),
        (
            apply(&Api::namespaced(host.clone(), NODE_LEASE_NS), &rb).await?,
            RbacKind::RoleBinding,
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
