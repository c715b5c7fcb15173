//! Every label, annotation and taint name mcsched uses, in one place.

/// Label on a virtual node naming the leaf cluster it stands for.
pub const CLUSTER_LABEL: &str = "mcsched.io/cluster";
/// Taint that keeps the default scheduler off virtual nodes.
pub const LEAF_TAINT: &str = "mcsched.io/leaf";
/// Kosmos' leaf taint, recognised as a leaf taint too.
pub const KOSMOS_LEAF_TAINT: &str = "kosmos.io/node";
/// Prefix of every virtual node's name.
pub const VIRTUAL_NODE_PREFIX: &str = "mcsched-";

/// The field manager of every object mcsched writes.
pub const FIELD_MANAGER: &str = "mcsched";
/// The scheduler name the agent serves when none is given.
pub const DEFAULT_SCHEDULER_NAME: &str = "mcsched";
/// kube-scheduler's profile: what a pod without `spec.schedulerName` (or a profile without
/// `schedulerName`) names.
pub(crate) const KUBE_DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

/// Whether a taint key marks a node as a leaf cluster's virtual node.
pub fn is_leaf_taint(key: &str) -> bool {
    key == LEAF_TAINT || key == KOSMOS_LEAF_TAINT
}

/// The namespace the agent, its configuration and the join Secrets live in (host), and
/// where `join` puts the leaf's ServiceAccount (leaf).
pub const SYSTEM_NAMESPACE: &str = "mcsched-system";
/// Standard topology labels copied onto a virtual node.
pub const REGION_LABEL: &str = "topology.kubernetes.io/region";
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// Label on a virtual node: the leaf's cloud provider (`--provider`).
pub const PROVIDER_LABEL: &str = "mcsched.io/provider";
/// Label on a virtual node: the relative cost of running a pod in the leaf (`--cost`).
pub const COST_LABEL: &str = "mcsched.io/cost";
/// The cluster name the host's own nodes go by in cluster policies (ClusterTiers, and
/// ClusterWeights' default `hostClusterName`).
pub const HOST_CLUSTER_NAME: &str = "host";
/// Label on every object mcsched creates (`app.kubernetes.io/managed-by=mcsched`).
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "mcsched";
/// Prefix of the host Secret holding a leaf's kubeconfig: `mcsched-cluster-<name>`,
/// labelled with [`CLUSTER_LABEL`]; its data key is [`KUBECONFIG_KEY`].
pub(crate) const CLUSTER_SECRET_PREFIX: &str = "mcsched-cluster-";
pub const KUBECONFIG_KEY: &str = "kubeconfig";
/// Annotation on the join Secret and virtual node: the leaf's identity (the UID of its
/// `kube-system` namespace), so one name is never reused for a different leaf.
pub const CLUSTER_ID_ANNOTATION: &str = "mcsched.io/cluster-id";
/// Name of the ServiceAccount, ClusterRole and ClusterRoleBinding `join` creates in a leaf.
pub const LEAF_ACCOUNT: &str = "mcsched-leaf";
/// Pod annotation: a node selector (JSON object) aimed at the leaf's nodes' labels.
pub const LEAF_NODE_SELECTOR_ANNOTATION: &str = "mcsched.io/leaf-node-selector";
/// Pod annotation the agent writes on a member of a pod group kept in one domain of a node
/// label (zone, rack) that it binds to a virtual node: the domain (JSON object, key to
/// value) the member's leaf copy must stay in, which the leaf check judged it by.
pub const LEAF_DOMAIN_ANNOTATION: &str = "mcsched.io/leaf-domain";
/// Label on a leaf pod (and the objects synced with it) naming the host cluster's leaf
/// name it belongs to: ownership, so restarts neither duplicate nor orphan.
pub const MANAGED_CLUSTER_LABEL: &str = "mcsched.io/managed-by-cluster";
/// Pod Security admission's namespace labels: the level a namespace enforces, and the
/// version of that level's checks.
pub const POD_SECURITY_ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";
pub const POD_SECURITY_ENFORCE_VERSION_LABEL: &str = "pod-security.kubernetes.io/enforce-version";
/// Annotation on a leaf pod: the host pod's UID it mirrors.
pub const HOST_POD_UID_ANNOTATION: &str = "mcsched.io/host-pod-uid";
/// Annotation on a host pod bound to a virtual node: the UID the leaf's API server gave
/// its copy when pod sync created it. The marks above can be copied by anyone who may
/// create pods in the leaf; this UID cannot, so only the leaf pod holding it is taken for
/// the copy (adopted, deleted, its status written back).
pub const LEAF_POD_UID_ANNOTATION: &str = "mcsched.io/leaf-pod-uid";

/// The virtual node standing for leaf `cluster`.
pub fn virtual_node_name(cluster: &str) -> String {
    format!("{VIRTUAL_NODE_PREFIX}{cluster}")
}

/// The host Secret holding leaf `cluster`'s kubeconfig.
pub fn cluster_secret_name(cluster: &str) -> String {
    format!("{CLUSTER_SECRET_PREFIX}{cluster}")
}

/// Name of the agent's ServiceAccount, Deployment and Service (in the install namespace).
pub const AGENT_NAME: &str = "mcsched-agent";
/// The agent's HTTPS port (health, metrics, explanations), as kube-scheduler's.
pub const AGENT_PORT: u16 = 10259;
/// Per-leaf RBAC `join` creates in the host for the agent: ClusterRole/ClusterRoleBinding
/// `mcsched-virtual-node-<name>` (that node and its status only) and Role/RoleBinding of the
/// same name in `kube-node-lease` (that node's Lease only), so the agent can touch virtual
/// nodes and nothing else.
pub const VIRTUAL_NODE_RBAC_PREFIX: &str = "mcsched-virtual-node-";

/// Annotation on a host PVC whose pod runs in a leaf: the leaf cluster that holds (and
/// binds) its copy. Such a claim never follows a pod to a host node or another leaf.
pub const BOUND_IN_CLUSTER_ANNOTATION: &str = "mcsched.io/bound-in-cluster";
/// Label on every object `install` creates, valued with the install namespace: how
/// `uninstall` finds them again (join's objects carry [`MANAGED_BY_LABEL`] but not this).
pub const INSTALL_LABEL: &str = "mcsched.io/install";
/// The ConfigMap holding the agent's KubeSchedulerConfiguration, its data key and where
/// the Deployment mounts it.
pub(crate) const AGENT_CONFIG_NAME: &str = "mcsched-agent-config";
pub(crate) const AGENT_CONFIG_KEY: &str = "config.yaml";
pub(crate) const AGENT_CONFIG_DIR: &str = "/etc/mcsched";
/// Name of the agent's HTTPS port on the Deployment and Service.
pub(crate) const AGENT_PORT_NAME: &str = "https";
/// Pod template annotation: a hash of the configuration, so a changed ConfigMap rolls the
/// Deployment.
pub(crate) const CONFIG_HASH_ANNOTATION: &str = "mcsched.io/config-hash";
/// Annotation on a virtual node: how many nodes the leaf cluster has (`get clusters`).
pub const LEAF_NODE_COUNT_ANNOTATION: &str = "mcsched.io/leaf-nodes";
/// The image `install` deploys unless `--image` says otherwise.
pub const AGENT_IMAGE_REPOSITORY: &str = "ghcr.io/mcsched/mcsched-agent";

/// The API group and version the agent serves as an aggregated API (explanations and
/// what-ifs), registered by `install` as APIService [`API_SERVICE_NAME`].
pub const API_GROUP: &str = "mcsched.io";
pub const API_VERSION: &str = "v1alpha1";
pub const API_GROUP_VERSION: &str = "mcsched.io/v1alpha1";
pub const API_SERVICE_NAME: &str = "v1alpha1.mcsched.io";
/// The selector-less Service the APIService points at; the leader writes its one
/// EndpointSlice (of the same name), so the API server always reaches the leader.
pub const API_SERVICE: &str = "mcsched-api";
/// Port of [`API_SERVICE`] (the APIService's `spec.service.port`).
pub(crate) const API_SERVICE_PORT: u16 = 443;
/// The namespaced, read-only resource holding a pod's explanation.
pub const EXPLANATIONS: &str = "explanations";
pub const EXPLANATION_KIND: &str = "Explanation";
/// The create-only resource answering a what-if (nothing is stored).
pub const WHATIFS: &str = "whatifs";
pub const WHATIF_KIND: &str = "WhatIf";
/// ClusterRoles aggregated into the built-in roles: reading explanations (view, edit,
/// admin) and creating what-ifs (edit, admin).
pub const EXPLANATION_READER_ROLE: &str = "mcsched:explanation-reader";
pub const WHATIF_CREATOR_ROLE: &str = "mcsched:whatif-creator";
/// Aggregated into view, edit and admin: read PlacementPolicies.
pub const POLICY_VIEWER_ROLE: &str = "mcsched:placementpolicy-viewer";
/// Aggregated into edit and admin: write PlacementPolicies.
pub const POLICY_EDITOR_ROLE: &str = "mcsched:placementpolicy-editor";

/// Label on every object pod sync (or `join`) creates in a leaf: the host cluster's id
/// (the UID of the host's `kube-system` namespace). Pod sync and `unjoin` touch only
/// objects with their own host's id, so two hosts joined to one leaf never touch each
/// other's objects, and nothing of the leaf owner's is used, changed or deleted.
pub const HOST_ID_LABEL: &str = "mcsched.io/host-id";
/// Annotation on every object pod sync creates in a leaf: the UID of the host object it
/// copies (pod, ConfigMap, Secret, PersistentVolumeClaim).
pub const HOST_UID_ANNOTATION: &str = "mcsched.io/host-uid";
/// Annotation on a join Secret: the lifetime of the leaf tokens the agent requests when
/// it renews the one in the Secret (a Go duration, e.g. `1h`).
pub const TOKEN_LIFETIME_ANNOTATION: &str = "mcsched.io/token-lifetime";
/// In a leaf: the read-only ClusterRole bound cluster-wide to [`LEAF_ACCOUNT`], and the
/// ClusterRole of what pod sync writes, bound by RoleBindings (named [`LEAF_ACCOUNT`]) in
/// the namespaces the leaf's admin grants.
pub const LEAF_WRITER_ROLE: &str = "mcsched-leaf-writer";
/// In a leaf: the ClusterRole letting [`LEAF_ACCOUNT`] create the ServiceAccounts the
/// host's pods name (`join --service-accounts`), bound under this name in each granted
/// namespace (or cluster-wide with `--all-namespaces`).
pub const LEAF_SERVICE_ACCOUNT_ROLE: &str = "mcsched-leaf-serviceaccount-writer";
/// In a leaf's [`SYSTEM_NAMESPACE`]: the Role (and RoleBinding) letting [`LEAF_ACCOUNT`]
/// request tokens for itself only (`serviceaccounts/token`, by name), so the agent renews
/// its token before it expires.
pub const LEAF_TOKEN_ROLE: &str = "mcsched-leaf-token";
/// In a leaf: the ClusterRole (and ClusterRoleBinding) of `join --all-namespaces`: what
/// [`LEAF_WRITER_ROLE`] grants, but Secrets only written, never read, cluster-wide; Secrets
/// are read where a RoleBinding of [`LEAF_WRITER_ROLE`] grants it (every namespace that
/// existed at join, [`LEAF_PROTECTED_NAMESPACES`] excepted).
pub const LEAF_CLUSTER_WRITER_ROLE: &str = "mcsched-leaf-writer-all-namespaces";
/// Leaf namespaces [`LEAF_ACCOUNT`] never writes in, whatever the grant (`--all-namespaces`
/// included): a pod there could run as their controllers' ServiceAccounts, and a Secret in
/// [`SYSTEM_NAMESPACE`] could become a token for the leaf account that never expires. Join
/// enforces it in the leaf with the admission policy [`LEAF_NAMESPACE_POLICY`].
pub const LEAF_PROTECTED_NAMESPACES: &[&str] = &[
    "kube-system",
    "kube-public",
    "kube-node-lease",
    SYSTEM_NAMESPACE,
];
/// Whether [`LEAF_ACCOUNT`] is never let write in leaf namespace `ns`.
pub fn is_protected_leaf_namespace(ns: &str) -> bool {
    LEAF_PROTECTED_NAMESPACES.contains(&ns)
}
/// In a leaf: the ValidatingAdmissionPolicy (and its binding) refusing every write of
/// [`LEAF_ACCOUNT`] in [`LEAF_PROTECTED_NAMESPACES`] but its own token requests.
pub const LEAF_NAMESPACE_POLICY: &str = "mcsched-leaf-system-namespaces";
/// In a leaf: the ValidatingAdmissionPolicy (and its binding) bounding the tokens
/// [`LEAF_ACCOUNT`] requests for itself: bound to one of join's token Secrets, for at most
/// that Secret's lifetime, for its audiences.
pub const LEAF_TOKEN_POLICY: &str = "mcsched-leaf-tokens";
/// In a leaf: the ValidatingAdmissionPolicy (and its binding) refusing [`LEAF_ACCOUNT`]
/// every update, patch and deletion of a pod, ConfigMap, Secret, claim or ServiceAccount
/// that does not carry the marks of what pod sync creates ([`HOST_ID_LABEL`] and
/// [`MANAGED_CLUSTER_LABEL`]): RBAC cannot grant by label, and such a write answers with
/// the object written over or deleted — a Secret's data the account may not read.
pub const LEAF_COPIES_POLICY: &str = "mcsched-leaf-copies-only";
/// In a leaf's [`SYSTEM_NAMESPACE`]: the name prefix of the Secrets join creates (one per
/// host) that the leaf account's tokens are bound to; deleting one revokes every token
/// bound to it.
pub const LEAF_TOKEN_SECRET_PREFIX: &str = "mcsched-leaf-token-";
/// Label (`"true"`) on a leaf token Secret: what the token policy takes as its parameters.
pub const LEAF_TOKEN_SECRET_LABEL: &str = "mcsched.io/leaf-token";
/// Annotation on a leaf token Secret: the longest lifetime, in seconds, of a token bound
/// to it.
pub const TOKEN_LIFETIME_SECONDS_ANNOTATION: &str = "mcsched.io/token-lifetime-seconds";
/// Annotation on a leaf token Secret: the audiences (comma-separated) of a token bound to
/// it, the leaf API server's own as join's first token got them.
pub const TOKEN_AUDIENCES_ANNOTATION: &str = "mcsched.io/token-audiences";
