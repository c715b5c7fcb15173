//! What `join` creates in a leaf so the agent can work there, and nothing more: a
//! ServiceAccount that reads cluster-wide what feasibility needs, writes only in the
//! namespaces the leaf's admin grants (never in the leaf's system namespaces), and may
//! request tokens for itself alone, bounded by an admission policy; and the expiring
//! token, CA and server the host's join Secret holds.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, NamedRuleWithOperations, ParamKind, ParamRef,
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    ValidatingAdmissionPolicyBindingSpec, ValidatingAdmissionPolicySpec, Validation,
};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use mcsched_shared::keys;
use mcsched_shared::leaf_kubeconfig::{self, LeafKubeconfigError};

/// The never-expiring token Secret that joins made before tokens came from the
/// TokenRequest API; joining again or `unjoin` removes it.
pub const LEGACY_TOKEN_SECRET: &str = "mcsched-leaf-token";
/// The ConfigMap every namespace gets from kube-controller-manager with the cluster's CA.
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
const ADMISSION_GROUP: &str = "admissionregistration.k8s.io";
/// Dynamic Resource Allocation (`resource.k8s.io/v1`).
const RESOURCE_GROUP: &str = "resource.k8s.io";

/// Where the leaf account may write: the leaf namespaces the admin names, or (opt-in)
/// every namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    Namespaces(Vec<String>),
    AllNamespaces,
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    PolicyRule {
        api_groups: Some(v(groups)),
        resources: Some(v(resources)),
        verbs: v(verbs),
        ..Default::default()
    }
}

pub fn managed_labels() -> BTreeMap<String, String> {
    BTreeMap::from([(
        keys::MANAGED_BY_LABEL.to_string(),
        keys::MANAGED_BY_VALUE.to_string(),
    )])
}

/// [`managed_labels`] and the host's id: what one host's join created, told apart from
/// another host's.
pub fn host_labels(host_id: &str) -> BTreeMap<String, String> {
    let mut l = managed_labels();
    l.insert(keys::HOST_ID_LABEL.into(), host_id.into());
    l
}

/// The selector of what this host synced (or join created) for leaf `cluster`.
pub fn ours_selector(host_id: &str, cluster: &str) -> String {
    format!(
        "{}={host_id},{}={cluster}",
        keys::HOST_ID_LABEL,
        keys::MANAGED_CLUSTER_LABEL
    )
}

fn meta(name: &str, namespace: Option<&str>, labels: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(String::from),
        labels: Some(labels),
        ..Default::default()
    }
}

fn leaf_subject() -> Subject {
    Subject {
        kind: "ServiceAccount".into(),
        name: keys::LEAF_ACCOUNT.into(),
        namespace: Some(keys::SYSTEM_NAMESPACE.into()),
        ..Default::default()
    }
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: Some(RBAC_GROUP.into()),
        kind: kind.into(),
        name: name.into(),
    }
}

/// Cluster-wide, read only: what the agent's leaf watches and the leaf check read (nodes,
/// pods, volumes, claims, classes, CSI nodes, namespaces, events, the ResourceQuotas
/// and LimitRanges the leaf's admission applies to copies, and the devices: DeviceClasses,
/// ResourceSlices, ResourceClaims and DeviceTaintRules), and the PriorityClasses pod sync
/// looks up to keep a pod's class in its copy. No Secret, no ConfigMap, no
/// ResourceClaimTemplate, no write.
pub fn reader_role() -> ClusterRole {
    let read = ["get", "list", "watch"];
    ClusterRole {
        metadata: meta(keys::LEAF_ACCOUNT, None, managed_labels()),
        rules: Some(vec![
            rule(
                &[""],
                &[
                    "nodes",
                    "pods",
                    "persistentvolumes",
                    "persistentvolumeclaims",
                    "namespaces",
                    "resourcequotas",
                    "limitranges",
                ],
                &read,
            ),
            rule(&["storage.k8s.io"], &["storageclasses", "csinodes"], &read),
            rule(&["scheduling.k8s.io"], &["priorityclasses"], &read),
            rule(&["", "events.k8s.io"], &["events"], &read),
            rule(
                &[RESOURCE_GROUP],
                &[
                    "deviceclasses",
                    "resourceslices",
                    "resourceclaims",
                    "devicetaintrules",
                ],
                &read,
            ),
        ]),
        ..Default::default()
    }
}

pub fn reader_binding() -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(keys::LEAF_ACCOUNT, None, managed_labels()),
        role_ref: role_ref("ClusterRole", keys::LEAF_ACCOUNT),
        subjects: Some(vec![leaf_subject()]),
    }
}

/// What pod sync writes, granted per namespace by RoleBindings: pods, and the ConfigMaps,
/// Secrets, claims, ResourceClaimTemplates and ResourceClaims they use (by name: no list
/// or watch of any of them), and events; ServiceAccounts are only read, by name (does the
/// one a pod names exist?). `namespaces` `create` is cluster-scoped, which a RoleBinding
/// cannot grant: it takes effect only through the `--all-namespaces` ClusterRoleBinding.
/// Never `bind`, `escalate`, RBAC objects or namespace deletion.
pub fn writer_role() -> ClusterRole {
    let write = ["get", "create", "update", "patch", "delete"];
    ClusterRole {
        metadata: meta(keys::LEAF_WRITER_ROLE, None, managed_labels()),
        rules: Some(vec![
            rule(&[""], &["pods"], &write),
            rule(&[""], &["pods/status"], &["get"]),
            rule(
                &[""],
                &["configmaps", "secrets", "persistentvolumeclaims"],
                &write,
            ),
            rule(
                &[RESOURCE_GROUP],
                &["resourceclaimtemplates", "resourceclaims"],
                &write,
            ),
            rule(&[""], &["serviceaccounts"], &["get"]),
            rule(&["", "events.k8s.io"], &["events"], &["create"]),
            rule(&[""], &["namespaces"], &["create"]),
        ]),
        ..Default::default()
    }
}

/// What `--all-namespaces` grants cluster-wide: [`writer_role`]'s rules but Secrets only
/// written, never read: RBAC cannot leave namespaces out, and a cluster-wide `get` would
/// read kube-system's Secrets by name. Writes in the leaf's system namespaces (which would
/// return what they write over) are refused by [`namespace_policy`], and elsewhere an
/// update, patch or delete of a Secret pod sync did not create (which would answer with it)
/// by [`copies_policy`]; Secrets are read through [`writer_binding`]s in every other
/// namespace there at join.
pub fn cluster_writer_role() -> ClusterRole {
    let mut rules = writer_role().rules.unwrap_or_default();
    for r in &mut rules {
        if r.resources.iter().flatten().any(|res| res == "secrets") {
            r.resources = Some(
                r.resources
                    .iter()
                    .flatten()
                    .filter(|res| *res != "secrets")
                    .cloned()
                    .collect(),
            );
        }
    }
    rules.push(rule(
        &[""],
        &["secrets"],
        &["create", "update", "patch", "delete"],
    ));
    ClusterRole {
        metadata: meta(keys::LEAF_CLUSTER_WRITER_ROLE, None, managed_labels()),
        rules: Some(rules),
        ..Default::default()
    }
}

/// `join --service-accounts`: pod sync may create (and delete its own) ServiceAccounts of
/// the names the host's pods use. No RBAC goes with them: a copy runs with the leaf's
/// defaults for an account, nothing more.
pub fn service_account_role() -> ClusterRole {
    ClusterRole {
        metadata: meta(keys::LEAF_SERVICE_ACCOUNT_ROLE, None, managed_labels()),
        rules: Some(vec![rule(
            &[""],
            &["serviceaccounts"],
            &["get", "create", "delete"],
        )]),
        ..Default::default()
    }
}

/// The ServiceAccount role bound in one granted leaf namespace.
pub fn service_account_binding(namespace: &str, host_id: &str) -> RoleBinding {
    RoleBinding {
        metadata: meta(
            keys::LEAF_SERVICE_ACCOUNT_ROLE,
            Some(namespace),
            host_labels(host_id),
        ),
        role_ref: role_ref("ClusterRole", keys::LEAF_SERVICE_ACCOUNT_ROLE),
        subjects: Some(vec![leaf_subject()]),
    }
}

/// The ServiceAccount role bound cluster-wide: `--all-namespaces --service-accounts`.
pub fn service_account_cluster_binding(host_id: &str) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(keys::LEAF_SERVICE_ACCOUNT_ROLE, None, host_labels(host_id)),
        role_ref: role_ref("ClusterRole", keys::LEAF_SERVICE_ACCOUNT_ROLE),
        subjects: Some(vec![leaf_subject()]),
    }
}

/// The writer role bound in one granted leaf namespace.
pub fn writer_binding(namespace: &str, host_id: &str) -> RoleBinding {
    RoleBinding {
        metadata: meta(keys::LEAF_ACCOUNT, Some(namespace), host_labels(host_id)),
        role_ref: role_ref("ClusterRole", keys::LEAF_WRITER_ROLE),
        subjects: Some(vec![leaf_subject()]),
    }
}

/// [`cluster_writer_role`] bound cluster-wide: `--all-namespaces` only.
pub fn writer_cluster_binding(host_id: &str) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(keys::LEAF_CLUSTER_WRITER_ROLE, None, host_labels(host_id)),
        role_ref: role_ref("ClusterRole", keys::LEAF_CLUSTER_WRITER_ROLE),
        subjects: Some(vec![leaf_subject()]),
    }
}

/// Tokens for the leaf account itself, and for no other account: how the agent renews.
pub fn token_role() -> Role {
    Role {
        metadata: meta(
            keys::LEAF_TOKEN_ROLE,
            Some(keys::SYSTEM_NAMESPACE),
            managed_labels(),
        ),
        rules: Some(vec![PolicyRule {
            resource_names: Some(vec![keys::LEAF_ACCOUNT.into()]),
            ..rule(&[""], &["serviceaccounts/token"], &["create"])
        }]),
    }
}

pub fn token_binding() -> RoleBinding {
    RoleBinding {
        metadata: meta(
            keys::LEAF_TOKEN_ROLE,
            Some(keys::SYSTEM_NAMESPACE),
            managed_labels(),
        ),
        role_ref: role_ref("Role", keys::LEAF_TOKEN_ROLE),
        subjects: Some(vec![leaf_subject()]),
    }
}

/// The leaf account's user name, as admission policies see it.
fn leaf_user() -> String {
    format!(
        "system:serviceaccount:{}:{}",
        keys::SYSTEM_NAMESPACE,
        keys::LEAF_ACCOUNT
    )
}

fn cel_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("'{i}'")).collect();
    format!("[{}]", quoted.join(", "))
}

fn validation(expression: String, message: String) -> Validation {
    Validation {
        expression,
        message: Some(message),
        reason: Some("Forbidden".into()),
        ..Default::default()
    }
}

fn policy_binding(name: &str, param_ref: Option<ParamRef>) -> ValidatingAdmissionPolicyBinding {
    ValidatingAdmissionPolicyBinding {
        metadata: meta(name, None, managed_labels()),
        spec: ValidatingAdmissionPolicyBindingSpec {
            policy_name: name.into(),
            param_ref,
            validation_actions: vec!["Deny".into()],
            ..Default::default()
        },
    }
}

/// Every write of the leaf account in [`keys::LEAF_PROTECTED_NAMESPACES`] is refused but
/// its own TokenRequest, whatever RBAC grants (`--all-namespaces` grants every namespace,
/// and RBAC cannot leave one out).
pub fn namespace_policy() -> ValidatingAdmissionPolicy {
    let protected = cel_list(keys::LEAF_PROTECTED_NAMESPACES);
    ValidatingAdmissionPolicy {
        metadata: meta(keys::LEAF_NAMESPACE_POLICY, None, managed_labels()),
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some("Fail".into()),
            match_constraints: Some(MatchResources {
                resource_rules: Some(vec![NamedRuleWithOperations {
                    api_groups: Some(vec!["*".into()]),
                    api_versions: Some(vec!["*".into()]),
                    operations: Some(
                        ["CREATE", "UPDATE", "DELETE", "CONNECT"]
                            .map(String::from)
                            .to_vec(),
                    ),
                    // Every resource and subresource.
                    resources: Some(vec!["*/*".into()]),
                    scope: Some("Namespaced".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            match_conditions: Some(vec![
                MatchCondition {
                    name: "leaf-account".into(),
                    expression: format!("request.userInfo.username == '{}'", leaf_user()),
                },
                MatchCondition {
                    name: "protected-namespace".into(),
                    expression: format!("request.namespace in {protected}"),
                },
            ]),
            validations: Some(vec![validation(
                format!(
                    "request.namespace == '{}' && request.operation == 'CREATE' && request.resource.group == '' && request.resource.resource == 'serviceaccounts' && request.subResource == 'token' && request.name == '{}'",
                    keys::SYSTEM_NAMESPACE,
                    keys::LEAF_ACCOUNT
                ),
                format!(
                    "mcsched's leaf account never writes in the leaf's system namespaces ({})",
                    keys::LEAF_PROTECTED_NAMESPACES.join(", ")
                ),
            )]),
            ..Default::default()
        }),
        status: None,
    }
}

pub fn namespace_policy_binding() -> ValidatingAdmissionPolicyBinding {
    policy_binding(keys::LEAF_NAMESPACE_POLICY, None)
}

/// What the leaf account writes that may hold someone else's object under a name pod sync
/// wants: the copies and what they refer to, as (API group, resource).
pub const COPIED_RESOURCES: &[(&str, &str)] = &[
    ("", "pods"),
    ("", "configmaps"),
    ("", "secrets"),
    ("", "persistentvolumeclaims"),
    ("", "serviceaccounts"),
    (RESOURCE_GROUP, "resourceclaimtemplates"),
    (RESOURCE_GROUP, "resourceclaims"),
];

/// [`COPIED_RESOURCES`] as `resource` (core) or `resource.group`, for people to read.
pub fn copied_resources_text() -> String {
    COPIED_RESOURCES
        .iter()
        .map(|(group, resource)| match *group {
            "" => resource.to_string(),
            g => format!("{resource}.{g}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One admission rule per API group of [`COPIED_RESOURCES`]: a rule's groups and
/// resources match as a cross product, so one rule naming both groups would match
/// resources of one group under the other's name too.
fn copied_resource_rules() -> Vec<NamedRuleWithOperations> {
    let mut groups: Vec<&str> = COPIED_RESOURCES.iter().map(|(g, _)| *g).collect();
    groups.dedup();
    groups
        .into_iter()
        .map(|group| NamedRuleWithOperations {
            api_groups: Some(vec![group.to_string()]),
            api_versions: Some(vec!["*".into()]),
            operations: Some(vec!["UPDATE".into(), "DELETE".into()]),
            resources: Some(
                COPIED_RESOURCES
                    .iter()
                    .filter(|(g, _)| *g == group)
                    .map(|(_, r)| r.to_string())
                    .collect(),
            ),
            scope: Some("Namespaced".into()),
            ..Default::default()
        })
        .collect()
}

/// The leaf account may update, patch or delete only what carries the marks pod sync
/// puts on what it creates ([`keys::HOST_ID_LABEL`], [`keys::MANAGED_CLUSTER_LABEL`], as
/// pod sync's own ownership check reads them). RBAC grants by resource, not label, and an
/// update, a patch (an empty one too) or a delete answers with the object: with
/// `--all-namespaces` the body of a Secret the account may not read. Admission refuses
/// before any body is written back. Creating is not matched: a create of a name that
/// exists answers 409 with no body, and a server-side apply of an absent object is a
/// create.
pub fn copies_policy() -> ValidatingAdmissionPolicy {
    let marks = cel_list(&[keys::HOST_ID_LABEL, keys::MANAGED_CLUSTER_LABEL]);
    ValidatingAdmissionPolicy {
        metadata: meta(keys::LEAF_COPIES_POLICY, None, managed_labels()),
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some("Fail".into()),
            match_constraints: Some(MatchResources {
                resource_rules: Some(copied_resource_rules()),
                ..Default::default()
            }),
            match_conditions: Some(vec![MatchCondition {
                name: "leaf-account".into(),
                expression: format!("request.userInfo.username == '{}'", leaf_user()),
            }]),
            validations: Some(vec![Validation {
                message_expression: Some(format!(
                    "\"mcsched's leaf account changes and deletes only what pod sync created (labels {}): \" + request.resource.resource + \" \" + request.namespace + \"/\" + request.name + \" is not\"",
                    [keys::HOST_ID_LABEL, keys::MANAGED_CLUSTER_LABEL].join(", ")
                )),
                ..validation(
                    // An UPDATE or DELETE always has an oldObject; were it ever missing, the
                    // expression fails and the failure policy refuses.
                    format!(
                        "has(oldObject.metadata.labels) && {marks}.all(k, k in oldObject.metadata.labels && oldObject.metadata.labels[k] != '')"
                    ),
                    "mcsched's leaf account changes and deletes only what pod sync created".into(),
                )
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

pub fn copies_policy_binding() -> ValidatingAdmissionPolicyBinding {
    policy_binding(keys::LEAF_COPIES_POLICY, None)
}

/// The leaf account's TokenRequests are refused unless bound to one of join's token
/// Secrets ([`token_secret`], the policy's parameters) and, for that Secret, no longer
/// than its lifetime and for its audiences: a leaked token cannot mint a longer-lived or
/// unbound one, and deleting the Secret revokes every token bound to it. Join's own
/// request (as the leaf's admin) is not matched.
pub fn token_policy() -> ValidatingAdmissionPolicy {
    // Each field asked for by itself: a request bound to nothing may still carry an empty
    // reference.
    let bound = "(has(object.spec.boundObjectRef) && has(object.spec.boundObjectRef.apiVersion) && has(object.spec.boundObjectRef.kind) && has(object.spec.boundObjectRef.name))";
    let ours = "object.spec.boundObjectRef.name == params.metadata.name";
    let lifetime = format!(
        "int(params.metadata.annotations['{}'])",
        keys::TOKEN_LIFETIME_SECONDS_ANNOTATION
    );
    let audiences = format!(
        "params.metadata.annotations['{}'].split(',')",
        keys::TOKEN_AUDIENCES_ANNOTATION
    );
    ValidatingAdmissionPolicy {
        metadata: meta(keys::LEAF_TOKEN_POLICY, None, managed_labels()),
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some("Fail".into()),
            param_kind: Some(ParamKind {
                api_version: Some("v1".into()),
                kind: Some("Secret".into()),
            }),
            match_constraints: Some(MatchResources {
                resource_rules: Some(vec![NamedRuleWithOperations {
                    api_groups: Some(vec![String::new()]),
                    api_versions: Some(vec!["v1".into()]),
                    operations: Some(vec!["CREATE".into()]),
                    resources: Some(vec!["serviceaccounts/token".into()]),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            match_conditions: Some(vec![MatchCondition {
                name: "leaf-account".into(),
                expression: format!("request.userInfo.username == '{}'", leaf_user()),
            }]),
            validations: Some(vec![
                validation(
                    format!(
                        "{bound} && object.spec.boundObjectRef.apiVersion == 'v1' && object.spec.boundObjectRef.kind == 'Secret' && object.spec.boundObjectRef.name.startsWith('{}')",
                        keys::LEAF_TOKEN_SECRET_PREFIX
                    ),
                    format!(
                        "a token of mcsched's leaf account must be bound to a Secret {}/{}* that join created (spec.boundObjectRef)",
                        keys::SYSTEM_NAMESPACE,
                        keys::LEAF_TOKEN_SECRET_PREFIX
                    ),
                ),
                Validation {
                    message_expression: Some(format!(
                        "'spec.expirationSeconds ' + string(object.spec.expirationSeconds) + ' is longer than the ' + string({lifetime}) + 's join allows'"
                    )),
                    ..validation(
                        format!(
                            "!{bound} || !({ours}) || object.spec.expirationSeconds <= {lifetime}"
                        ),
                        "spec.expirationSeconds is longer than join allows".into(),
                    )
                },
                validation(
                    format!("!{bound} || !({ours}) || object.spec.audiences == {audiences}"),
                    "spec.audiences are not the leaf API server's own, as join's token had them"
                        .into(),
                ),
            ]),
            ..Default::default()
        }),
        status: None,
    }
}

/// Every token Secret join created is a parameter; none (no host joined) refuses all.
pub fn token_policy_binding() -> ValidatingAdmissionPolicyBinding {
    policy_binding(
        keys::LEAF_TOKEN_POLICY,
        Some(ParamRef {
            namespace: Some(keys::SYSTEM_NAMESPACE.into()),
            selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    keys::LEAF_TOKEN_SECRET_LABEL.to_string(),
                    "true".to_string(),
                )])),
                ..Default::default()
            }),
            parameter_not_found_action: Some("Deny".into()),
            ..Default::default()
        }),
    )
}

/// The Secret a host's leaf tokens are bound to (a new name each join: the one before is
/// deleted once the join Secret holds a token bound to this one, revoking what the old
/// one's tokens could do), with the lifetime [`token_policy`] allows.
pub fn token_secret(host_id: &str, cluster: &str, lifetime: Duration) -> Secret {
    let mut labels = host_labels(host_id);
    labels.insert(keys::MANAGED_CLUSTER_LABEL.into(), cluster.into());
    labels.insert(keys::LEAF_TOKEN_SECRET_LABEL.into(), "true".into());
    Secret {
        metadata: ObjectMeta {
            generate_name: Some(keys::LEAF_TOKEN_SECRET_PREFIX.into()),
            namespace: Some(keys::SYSTEM_NAMESPACE.into()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                keys::TOKEN_LIFETIME_SECONDS_ANNOTATION.to_string(),
                lifetime.as_secs().to_string(),
            )])),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        ..Default::default()
    }
}

/// The selector of a host's token Secrets in the leaf.
pub fn token_secret_selector(host_id: &str) -> String {
    format!(
        "{}=true,{}={host_id}",
        keys::LEAF_TOKEN_SECRET_LABEL,
        keys::HOST_ID_LABEL
    )
}

pub fn service_account() -> ServiceAccount {
    ServiceAccount {
        metadata: meta(
            keys::LEAF_ACCOUNT,
            Some(keys::SYSTEM_NAMESPACE),
            managed_labels(),
        ),
        ..Default::default()
    }
}

/// The Pod Security level a namespace join creates enforces (`join --pod-security`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PodSecurity {
    /// No restriction: host pods may run privileged, on the leaf node's network and
    /// files.
    Privileged,
    /// Pod Security's baseline: no privileged containers, host namespaces, hostPath
    /// volumes, host ports or added capabilities beyond the default set.
    Baseline,
    /// Pod Security's restricted: baseline, and non-root, no privilege escalation,
    /// capabilities dropped, RuntimeDefault or Localhost seccomp.
    Restricted,
}

impl PodSecurity {
    pub fn as_str(self) -> &'static str {
        match self {
            PodSecurity::Privileged => "privileged",
            PodSecurity::Baseline => "baseline",
            PodSecurity::Restricted => "restricted",
        }
    }
}

/// The Pod Security labels of a namespace join creates: `level`, checks of the leaf's
/// own (`latest`) version.
pub fn pod_security_labels(level: PodSecurity) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            keys::POD_SECURITY_ENFORCE_LABEL.to_string(),
            level.as_str().to_string(),
        ),
        (
            keys::POD_SECURITY_ENFORCE_VERSION_LABEL.to_string(),
            "latest".to_string(),
        ),
    ])
}

/// A granted leaf namespace that join creates: marked with the host and the leaf name,
/// as pod sync marks what it creates, so that only this host's `unjoin` removes it (and
/// only this host's join relabels it); and enforcing Pod Security `level`, so that the
/// host's pods run there no more privileged than the leaf's owner allows.
pub fn granted_namespace(
    name: &str,
    host_id: &str,
    cluster: &str,
    level: PodSecurity,
) -> Namespace {
    let mut labels = host_labels(host_id);
    labels.insert(keys::MANAGED_CLUSTER_LABEL.into(), cluster.into());
    labels.extend(pod_security_labels(level));
    Namespace {
        metadata: meta(name, None, labels),
        ..Default::default()
    }
}

/// What the caller must be allowed in the leaf for join to succeed, as (verb, group,
/// resource, namespace).
fn needed(grant: &Grant) -> Vec<(&'static str, &'static str, &'static str, Option<String>)> {
    let system = || Some(keys::SYSTEM_NAMESPACE.to_string());
    let mut out = vec![
        ("get", "", "namespaces", None),
        ("create", "", "namespaces", None),
        // The Pod Security labels of the namespaces an earlier join created.
        ("patch", "", "namespaces", None),
        ("create", "", "serviceaccounts", system()),
        ("create", "", "serviceaccounts/token", system()),
        ("create", RBAC_GROUP, "clusterroles", None),
        ("create", RBAC_GROUP, "clusterrolebindings", None),
        ("create", RBAC_GROUP, "roles", system()),
        ("create", RBAC_GROUP, "rolebindings", system()),
        // Grants no longer asked for are found and removed.
        ("list", RBAC_GROUP, "rolebindings", None),
        // What bounds the leaf account's tokens and keeps it out of system namespaces.
        (
            "create",
            ADMISSION_GROUP,
            "validatingadmissionpolicies",
            None,
        ),
        (
            "create",
            ADMISSION_GROUP,
            "validatingadmissionpolicybindings",
            None,
        ),
        // The token Secret: created, and the one of the join before found and deleted.
        ("create", "", "secrets", system()),
        ("list", "", "secrets", system()),
        ("delete", "", "secrets", system()),
    ];
    match grant {
        Grant::Namespaces(namespaces) => {
            for ns in namespaces {
                out.push(("create", RBAC_GROUP, "rolebindings", Some(ns.clone())));
            }
        }
        // A RoleBinding (Secrets read) in every namespace there.
        Grant::AllNamespaces => {
            out.push(("list", "", "namespaces", None));
            out.push(("create", RBAC_GROUP, "rolebindings", None));
        }
    }
    out
}

/// The permissions join needs that the caller lacks in the leaf, as `verb resource`.
pub async fn missing_permissions(leaf: &Client, grant: &Grant) -> Result<Vec<String>, kube::Error> {
    let api: Api<SelfSubjectAccessReview> = Api::all(leaf.clone());
    let mut missing = Vec::new();
    for (verb, group, resource, namespace) in needed(grant) {
        let (resource, subresource) = match resource.split_once('/') {
            Some((r, s)) => (r, Some(s.to_string())),
            None => (resource, None),
        };
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.to_string()),
                    group: Some(group.to_string()),
                    resource: Some(resource.to_string()),
                    subresource: subresource.clone(),
                    namespace: namespace.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = api.create(&PostParams::default(), &review).await?;
        if !answer.status.is_some_and(|s| s.allowed) {
            let scope = match &namespace {
                Some(ns) => format!(" in namespace {ns}"),
                None => String::new(),
            };
            let group = if group.is_empty() {
                String::new()
            } else {
                format!(".{group}")
            };
            let sub = subresource.map(|s| format!("/{s}")).unwrap_or_default();
            missing.push(format!("{verb} {resource}{group}{sub}{scope}"));
        }
    }
    Ok(missing)
}

/// A token join got for the leaf account.
pub struct LeafToken {
    pub token: String,
    pub expires: Option<Time>,
    /// The audiences the leaf API server gave it (its own, none being asked for).
    pub audiences: Vec<String>,
}

/// An expiring token for the leaf account (TokenRequest, the API server's default
/// audiences), bound to `secret` (its name and UID): deleting that Secret revokes it.
pub async fn request_token(
    leaf: &Client,
    lifetime: Duration,
    secret: &Secret,
) -> Result<LeafToken, kube::Error> {
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: None,
            attestations: None,
            expiration_seconds: Some(i64::try_from(lifetime.as_secs()).unwrap_or(i64::MAX)),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Secret".into()),
                name: secret.metadata.name.clone(),
                uid: secret.metadata.uid.clone(),
            }),
        }),
        ..Default::default()
    };
    let answer = Api::<ServiceAccount>::namespaced(leaf.clone(), keys::SYSTEM_NAMESPACE)
        .create_token_request(keys::LEAF_ACCOUNT, &PostParams::default(), &request)
        .await?;
    let (token, expires) = match answer.status {
        Some(s) => (
            s.token.unwrap_or_default(),
            s.expiration_timestamp.filter(|t| t.0.as_second() > 0),
        ),
        None => (String::new(), None),
    };
    Ok(LeafToken {
        token,
        expires,
        audiences: answer.spec.and_then(|s| s.audiences).unwrap_or_default(),
    })
}

/// The CA bundle (PEM) a kubeconfig's cluster entry was loaded with (kube keeps it as DER).
pub fn ca_pem(root_cert: &[Vec<u8>]) -> Vec<u8> {
    let mut pem = String::new();
    for der in root_cert {
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        let b64 = base64(der);
        for line in b64.as_bytes().chunks(64) {
            pem.push_str(&String::from_utf8_lossy(line));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    pem.into_bytes()
}

/// The leaf's CA as kube-controller-manager publishes it in every namespace, waiting up
/// to `timeout` for it to appear in a namespace just created.
pub async fn published_ca(
    leaf: &Client,
    timeout: Duration,
) -> Result<Option<Vec<u8>>, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(leaf.clone(), keys::SYSTEM_NAMESPACE);
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let ca = api
            .get_opt(ROOT_CA_CONFIGMAP)
            .await?
            .and_then(|cm| cm.data)
            .and_then(|d| d.get("ca.crt").cloned())
            .filter(|c| !c.trim().is_empty());
        if let Some(ca) = ca {
            return Ok(Some(ca.into_bytes()));
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Standard base64 with padding, as the `*-data` fields of a kubeconfig want.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The kubeconfig of a join Secret: a server, its CA inline (and the name to verify it
/// for, when the leaf's kubeconfig gives one) and the leaf account's token; never the
/// caller's credentials, and nothing [`leaf_kubeconfig::check`] refuses.
pub fn kubeconfig(
    cluster: &str,
    server: &str,
    ca_pem: &[u8],
    tls_server_name: Option<&str>,
    token: &str,
) -> Result<String, LeafKubeconfigError> {
    let name = format!("mcsched-{cluster}");
    let mut entry =
        serde_json::json!({"server": server, "certificate-authority-data": base64(ca_pem)});
    if let Some(sni) = tls_server_name {
        entry["tls-server-name"] = sni.into();
    }
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": entry}],
        "users": [{"name": keys::LEAF_ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": keys::LEAF_ACCOUNT}}],
        "current-context": name,
    });
    let text = mcsched_shared::yaml::to_string(&doc)
        .map_err(|e| LeafKubeconfigError::NotYaml(e.to_string()))?;
    leaf_kubeconfig::check(&text)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verbs(r: &PolicyRule) -> Vec<&str> {
        r.verbs.iter().map(String::as_str).collect()
    }

    #[test]
    fn cluster_wide_the_leaf_account_reads_the_devices_and_no_template() {
        let rules = reader_role().rules.unwrap_or_default();
        let dra: Vec<&PolicyRule> = rules
            .iter()
            .filter(|r| r.api_groups.iter().flatten().any(|g| g == RESOURCE_GROUP))
            .collect();
        assert_eq!(dra.len(), 1, "{rules:?}");
        assert_eq!(
            dra[0].api_groups.as_deref(),
            Some(&[RESOURCE_GROUP.to_string()][..])
        );
        assert_eq!(
            dra[0].resources.as_deref(),
            Some(
                &[
                    "deviceclasses".to_string(),
                    "resourceslices".into(),
                    "resourceclaims".into(),
                    "devicetaintrules".into()
                ][..]
            )
        );
        assert_eq!(
            copied_resources_text(),
            "pods, configmaps, secrets, persistentvolumeclaims, serviceaccounts, resourceclaimtemplates.resource.k8s.io, resourceclaims.resource.k8s.io"
        );
    }

    #[test]
    fn cluster_wide_the_leaf_account_only_reads_and_never_secrets() {
        for r in reader_role().rules.unwrap_or_default() {
            assert_eq!(verbs(&r), ["get", "list", "watch"], "{r:?}");
            for res in r.resources.iter().flatten() {
                assert!(
                    !["secrets", "configmaps", "*"].contains(&res.as_str()),
                    "{r:?}"
                );
            }
        }
    }

    #[test]
    fn all_namespaces_never_reads_secrets_cluster_wide_nor_writes_in_system_namespaces() {
        let all = cluster_writer_role().rules.unwrap_or_default();
        let secrets: Vec<&PolicyRule> = all
            .iter()
            .filter(|r| r.resources.iter().flatten().any(|res| res == "secrets"))
            .collect();
        assert_eq!(secrets.len(), 1, "{all:?}");
        assert_eq!(verbs(secrets[0]), ["create", "update", "patch", "delete"]);
        // Otherwise the writer's rules.
        let others = |rules: Vec<PolicyRule>| -> Vec<(Vec<String>, Vec<String>)> {
            rules
                .into_iter()
                .filter_map(|r| {
                    let res: Vec<String> = r
                        .resources
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|x| x != "secrets")
                        .collect();
                    (!res.is_empty()).then_some((res, r.verbs))
                })
                .collect()
        };
        assert_eq!(
            others(all.clone()),
            others(writer_role().rules.unwrap_or_default())
        );
        let policy = namespace_policy().spec.unwrap_or_default();
        let conditions = policy.match_conditions.unwrap_or_default();
        for ns in keys::LEAF_PROTECTED_NAMESPACES {
            assert!(
                conditions
                    .iter()
                    .any(|c| c.expression.contains(&format!("'{ns}'"))),
                "{ns}: {conditions:?}"
            );
        }
        assert_eq!(policy.failure_policy.as_deref(), Some("Fail"));
        let token = token_policy().spec.unwrap_or_default();
        assert_eq!(token.failure_policy.as_deref(), Some("Fail"));
        let binding = token_policy_binding().spec;
        assert_eq!(
            binding
                .param_ref
                .and_then(|p| p.parameter_not_found_action)
                .as_deref(),
            Some("Deny"),
            "no token Secret: no token"
        );
    }

    #[test]
    fn the_leaf_account_changes_and_deletes_only_marked_objects_failing_closed() {
        let spec = copies_policy().spec.unwrap_or_default();
        assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
        let rules = spec
            .match_constraints
            .and_then(|m| m.resource_rules)
            .unwrap_or_default();
        // One rule per group (groups and resources match as a cross product).
        assert_eq!(rules.len(), 2, "{rules:?}");
        let mut matched: Vec<(String, String)> = Vec::new();
        for rule in &rules {
            assert_eq!(
                rule.operations.as_deref(),
                Some(&["UPDATE".to_string(), "DELETE".to_string()][..]),
                "a patch is an UPDATE to admission"
            );
            let groups = rule.api_groups.clone().unwrap_or_default();
            assert_eq!(groups.len(), 1, "{rule:?}");
            for res in rule.resources.iter().flatten() {
                matched.push((groups[0].clone(), res.clone()));
            }
        }
        assert!(
            matched.contains(&("resource.k8s.io".into(), "resourceclaims".into()))
                && !matched.contains(&("".into(), "resourceclaims".into())),
            "{matched:?}"
        );
        // Whatever the writer role lets it update or delete, in its group.
        let changes = |r: &PolicyRule| {
            r.verbs
                .iter()
                .any(|v| ["update", "patch", "delete"].contains(&v.as_str()))
        };
        let rules = writer_role()
            .rules
            .unwrap_or_default()
            .into_iter()
            .chain(cluster_writer_role().rules.unwrap_or_default())
            .chain(service_account_role().rules.unwrap_or_default());
        for r in rules.filter(changes) {
            for group in r.api_groups.iter().flatten() {
                for res in r.resources.iter().flatten() {
                    let want = (group.clone(), res.clone());
                    assert!(matched.contains(&want), "{want:?} not matched: {matched:?}");
                }
            }
        }
        let conditions = spec.match_conditions.unwrap_or_default();
        assert_eq!(conditions.len(), 1);
        assert_eq!(
            conditions[0].expression,
            "request.userInfo.username == 'system:serviceaccount:mcsched-system:mcsched-leaf'"
        );
        let validations = spec.validations.unwrap_or_default();
        let expression = &validations[0].expression;
        for label in [keys::HOST_ID_LABEL, keys::MANAGED_CLUSTER_LABEL] {
            assert!(expression.contains(&format!("'{label}'")), "{expression}");
        }
        assert!(expression.starts_with("has(oldObject.metadata.labels)"));
        assert_eq!(
            copies_policy_binding().spec.validation_actions,
            ["Deny".to_string()]
        );
    }

    #[test]
    fn the_writer_role_cannot_grant_itself_anything() {
        let rules = writer_role().rules.unwrap_or_default();
        for r in &rules {
            for v in &r.verbs {
                assert!(
                    ![
                        "*",
                        "bind",
                        "escalate",
                        "impersonate",
                        "list",
                        "watch",
                        "deletecollection"
                    ]
                    .contains(&v.as_str()),
                    "{r:?}"
                );
            }
            for g in r.api_groups.iter().flatten() {
                assert!(
                    ["", "events.k8s.io", "resource.k8s.io"].contains(&g.as_str()),
                    "{r:?}"
                );
                // DRA: the templates and claims copies name, nothing of the devices.
                if g == "resource.k8s.io" {
                    assert_eq!(
                        r.resources.as_deref(),
                        Some(&["resourceclaimtemplates".into(), "resourceclaims".into()][..]),
                        "{r:?}"
                    );
                    assert_eq!(verbs(r), ["get", "create", "update", "patch", "delete"]);
                }
            }
            for res in r.resources.iter().flatten() {
                assert!(
                    !["*", "serviceaccounts/token", "nodes"].contains(&res.as_str()),
                    "{r:?}"
                );
                if res == "namespaces" {
                    assert_eq!(verbs(r), ["create"]);
                }
                // Whether a pod's account exists, asked by name; creating one is
                // `--service-accounts`' own grant.
                if res == "serviceaccounts" {
                    assert_eq!(verbs(r), ["get"]);
                }
            }
        }
        let accounts = service_account_role().rules.unwrap_or_default();
        assert_eq!(accounts.len(), 1);
        assert_eq!(
            accounts[0].resources.as_deref(),
            Some(&["serviceaccounts".to_string()][..]),
            "never serviceaccounts/token, never RBAC"
        );
        assert_eq!(verbs(&accounts[0]), ["get", "create", "delete"]);
        let token = token_role().rules.unwrap_or_default();
        assert_eq!(token.len(), 1);
        assert_eq!(verbs(&token[0]), ["create"]);
        assert_eq!(
            token[0].resource_names.as_deref(),
            Some(&[keys::LEAF_ACCOUNT.to_string()][..])
        );
    }

    #[test]
    fn grants_are_marked_with_the_host() {
        let b = writer_binding("apps", "host-1");
        assert_eq!(b.metadata.namespace.as_deref(), Some("apps"));
        assert_eq!(b.metadata.name.as_deref(), Some(keys::LEAF_ACCOUNT));
        assert_eq!(b.role_ref.name, keys::LEAF_WRITER_ROLE);
        let labels = b.metadata.labels.unwrap_or_default();
        assert_eq!(
            labels.get(keys::HOST_ID_LABEL).map(String::as_str),
            Some("host-1")
        );
        let ns = granted_namespace("apps", "host-1", "east", PodSecurity::Baseline);
        let labels = ns.metadata.labels.unwrap_or_default();
        assert_eq!(
            labels.get(keys::MANAGED_CLUSTER_LABEL).map(String::as_str),
            Some("east")
        );
        assert_eq!(
            labels
                .get("pod-security.kubernetes.io/enforce")
                .map(String::as_str),
            Some("baseline")
        );
        assert_eq!(
            labels
                .get("pod-security.kubernetes.io/enforce-version")
                .map(String::as_str),
            Some("latest")
        );
        assert_eq!(
            ours_selector("h", "east"),
            "mcsched.io/host-id=h,mcsched.io/managed-by-cluster=east"
        );
    }

    #[test]
    fn base64_and_pem_as_kubeconfigs_want_them() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"h"), "aA==");
        assert_eq!(base64(b"he"), "aGU=");
        assert_eq!(base64(b"hello"), "aGVsbG8=");
        assert_eq!(base64(&[0xfb, 0xff, 0xbf]), "+/+/");
        let pem = String::from_utf8(ca_pem(&[vec![0u8; 60]])).unwrap_or_default();
        let lines: Vec<&str> = pem.lines().collect();
        assert_eq!(lines[0], "-----BEGIN CERTIFICATE-----");
        assert_eq!(lines[1].len(), 64);
        assert_eq!(lines[2], "AAAAAAAAAAAAAAAA");
        assert_eq!(lines[3], "-----END CERTIFICATE-----");
    }

    #[test]
    fn the_kubeconfig_holds_server_ca_and_token_only() {
        let text = kubeconfig("east", "https://10.0.0.1:6443", b"hello", None, "tok")
            .expect("a valid kubeconfig");
        assert_eq!(leaf_kubeconfig::check(&text), Ok(()));
        assert_eq!(leaf_kubeconfig::token(&text).as_deref(), Some("tok"));
        let doc: serde_json::Value = mcsched_shared::yaml::from_str(&text).expect("YAML");
        assert_eq!(
            doc["clusters"][0]["cluster"]["certificate-authority-data"].as_str(),
            Some("aGVsbG8=")
        );
        assert_eq!(doc["current-context"].as_str(), Some("mcsched-east"));
        let sni = kubeconfig(
            "east",
            "https://10.0.0.1:6443",
            b"x",
            Some("kube.local"),
            "t",
        )
        .expect("a valid kubeconfig");
        assert!(sni.contains("tls-server-name: kube.local"), "{sni}");
    }
}
