//! The agent's permissions in the host: kube-scheduler's system roles, plus exactly what
//! mcsched does beyond kube-scheduler. No wildcards.
//!
//! What `system:kube-scheduler` already grants (kube v1.37 bootstrap policy, as v1.36's),
//! so it is not repeated here: events create/update/patch (core and events.k8s.io), pods
//! get/list/watch/delete, pods/binding create, pods/status patch/update, nodes
//! get/list/watch, and csinodes, csidrivers and csistoragecapacities (storage.k8s.io)
//! get/list/watch, which the volume plugins read. (Where
//! its GenericWorkload gate is on it also grants the PodGroup rules below, which are
//! here for the API servers where it is not yet on.)
//! Per virtual node permissions (update that node and its status, its Lease, delete it)
//! are not here either: `join` grants them per leaf (`mcsched-virtual-node-<name>`), so
//! the agent can never touch a real node.
//!
//! Also here: the ClusterRoles that let users read explanations and create what-ifs of
//! the agent's aggregated API, aggregated into the built-in user-facing roles.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::config::AgentConfig;
use super::{Object, meta};
use crate::keys;

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
const COORDINATION: &str = "coordination.k8s.io";
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
const APIREGISTRATION: &str = "apiregistration.k8s.io";
const DISCOVERY: &str = "discovery.k8s.io";
const RESOURCE_GROUP: &str = "resource.k8s.io";
const POLICY_GROUP: &str = crate::policy::GROUP;
const POLICIES: [&str; 2] = ["placementpolicies", "clusterplacementpolicies"];

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str], names: &[&str]) -> PolicyRule {
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    PolicyRule {
        api_groups: Some(strings(groups)),
        resources: Some(strings(resources)),
        verbs: strings(verbs),
        resource_names: (!names.is_empty()).then(|| strings(names)),
        ..Default::default()
    }
}

fn subject(ns: &str) -> Vec<Subject> {
    vec![Subject {
        kind: "ServiceAccount".into(),
        name: keys::AGENT_NAME.into(),
        namespace: Some(ns.into()),
        ..Default::default()
    }]
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: Some(RBAC_GROUP.into()),
        kind: kind.into(),
        name: name.into(),
    }
}

fn cluster_binding(ns: &str, name: &str, cluster_role: &str) -> Object {
    Object::ClusterRoleBinding(ClusterRoleBinding {
        metadata: meta(name, None, ns),
        role_ref: role_ref("ClusterRole", cluster_role),
        subjects: Some(subject(ns)),
    })
}

fn role_binding(ns: &str, in_ns: &str, name: &str, kind: &str, role: &str) -> Object {
    Object::RoleBinding(RoleBinding {
        metadata: meta(name, Some(in_ns), ns),
        role_ref: role_ref(kind, role),
        subjects: Some(subject(ns)),
    })
}

/// The labels that aggregate a ClusterRole into the built-in `roles` (view, edit, admin).
fn aggregated_meta(ns: &str, name: &str, roles: &[&str]) -> ObjectMeta {
    let mut m = meta(name, None, ns);
    let labels = m.labels.get_or_insert_with(BTreeMap::new);
    for r in roles {
        labels.insert(format!("{RBAC_GROUP}/aggregate-to-{r}"), "true".to_string());
    }
    m
}

/// Who may use the aggregated API, given through the roles users already have in a
/// namespace: whoever may read its pods (view, edit, admin) may read why they went where
/// they did; a what-if runs a scheduling cycle on the agent, so only those who may create
/// pods there (edit, admin) may ask for one.
fn user_roles(ns: &str) -> Vec<Object> {
    let explanation_reader = ClusterRole {
        metadata: aggregated_meta(
            ns,
            keys::EXPLANATION_READER_ROLE,
            &["view", "edit", "admin"],
        ),
        rules: Some(vec![rule(
            &[keys::API_GROUP],
            &[keys::EXPLANATIONS],
            &["get", "list"],
            &[],
        )]),
        ..Default::default()
    };
    let whatif_creator = ClusterRole {
        metadata: aggregated_meta(ns, keys::WHATIF_CREATOR_ROLE, &["edit", "admin"]),
        rules: Some(vec![rule(
            &[keys::API_GROUP],
            &[keys::WHATIFS],
            &["create"],
            &[],
        )]),
        ..Default::default()
    };
    // Placement policies are the workload owners' to write (edit, admin), everyone's who
    // may view to read; cluster-wide ones only the cluster admin's, as for any
    // cluster-scoped kind.
    let policy_viewer = ClusterRole {
        metadata: aggregated_meta(ns, keys::POLICY_VIEWER_ROLE, &["view", "edit", "admin"]),
        rules: Some(vec![rule(
            &[POLICY_GROUP],
            &["placementpolicies"],
            &["get", "list", "watch"],
            &[],
        )]),
        ..Default::default()
    };
    let policy_editor = ClusterRole {
        metadata: aggregated_meta(ns, keys::POLICY_EDITOR_ROLE, &["edit", "admin"]),
        rules: Some(vec![rule(
            &[POLICY_GROUP],
            &["placementpolicies"],
            &["create", "update", "patch", "delete", "deletecollection"],
            &[],
        )]),
        ..Default::default()
    };
    vec![
        Object::ClusterRole(explanation_reader),
        Object::ClusterRole(whatif_creator),
        Object::ClusterRole(policy_viewer),
        Object::ClusterRole(policy_editor),
    ]
}

/// The ClusterRole an operator binds in a namespace to let the agent keep pod-deletion-cost
/// on the pods of policies that keep their shape, and evict those a policy rebalances or
/// fails over, and the members of a gang taken back from a leaf.
pub fn placement_keeper_name() -> String {
    format!("{}-placement-keeper", keys::AGENT_NAME)
}

/// The ClusterRole an operator binds in a namespace to let pod sync copy its Secrets.
pub fn secret_reader_name() -> String {
    format!("{}-secret-reader", keys::AGENT_NAME)
}

/// The ClusterRole an operator binds in a namespace to let pod sync copy its ConfigMaps.
pub fn configmap_reader_name() -> String {
    format!("{}-configmap-reader", keys::AGENT_NAME)
}

pub(super) fn objects(ns: &str, cfg: &AgentConfig) -> Vec<Object> {
    let agent = keys::AGENT_NAME;
    // Pod sync copies the ConfigMaps and Secrets a pod references into its leaf, and keeps
    // the copies following them: it reads them by name and watches the namespace while a
    // leaf pod refers to one there. Reading either cluster-wide is more than an operator
    // should have to grant: these roles are bound per namespace, by the operator, for the
    // namespaces whose pods may run in leaves with them; other pods stay off the leaves.
    // Nothing here creates pods: a bare pod taken back from a leaf is deleted, as
    // Kubernetes deletes a bare pod on a lost node.
    let configmap_reader = ClusterRole {
        metadata: meta(&configmap_reader_name(), None, ns),
        rules: Some(vec![rule(
            &[""],
            &["configmaps"],
            &["get", "list", "watch"],
            &[],
        )]),
        ..Default::default()
    };
    let secret_reader = ClusterRole {
        metadata: meta(&secret_reader_name(), None, ns),
        rules: Some(vec![rule(
            &[""],
            &["secrets"],
            &["get", "list", "watch"],
            &[],
        )]),
        ..Default::default()
    };
    // Placement policies that keep their shape write pod-deletion-cost on their pods, and
    // those that rebalance or fail over evict, as does a gang's take-back (through the
    // Eviction API, so PodDisruptionBudgets hold): bound per namespace by its operator, as
    // the readers above.
    let pod_annotator = ClusterRole {
        metadata: meta(&placement_keeper_name(), None, ns),
        rules: Some(vec![
            rule(&[""], &["pods"], &["patch"], &[]),
            rule(&[""], &["pods/eviction"], &["create"], &[]),
        ]),
        ..Default::default()
    };
    let mut own_rules = Vec::new();
    if let Some(lease) = &cfg.lease_name {
        // `create` cannot be limited by name (the object does not exist yet); the rest is
        // limited to our Lease. system:kube-scheduler's create is cluster-wide today, but
        // its own TODO means to scope it to kube-system, so ours is explicit.
        own_rules.push(rule(&[COORDINATION], &["leases"], &["create"], &[]));
        own_rules.push(rule(
            &[COORDINATION],
            &["leases"],
            &["get", "update", "patch"],
            &[lease],
        ));
    }
    // The join Secrets (leaf kubeconfigs) live in the agent's own namespace: the cluster
    // registry watches them.
    own_rules.push(rule(&[""], &["secrets"], &["get", "list", "watch"], &[]));
    // The leader points Service mcsched-api at itself through the one EndpointSlice of that
    // name, by server-side apply. Limited to that name, `create` included: an apply that
    // creates checks `create` with the object's name, unlike a POST.
    own_rules.push(rule(
        &[DISCOVERY],
        &["endpointslices"],
        &["get", "create", "patch"],
        &[keys::API_SERVICE],
    ));
    let own_role = Role {
        metadata: meta(agent, Some(ns), ns),
        rules: Some(own_rules),
    };
    // Virtual nodes' heartbeats: their Leases are created here; updating one is granted
    // per virtual node by `join`.
    let node_lease_role = Role {
        metadata: meta(agent, Some(NODE_LEASE_NAMESPACE), ns),
        rules: Some(vec![rule(&[COORDINATION], &["leases"], &["create"], &[])]),
    };
    // The leader publishes its serving CA as the caBundle of our APIService, and of no
    // other: the API server trusts whatever certificate an APIService's caBundle vouches for.
    let agent_role = ClusterRole {
        metadata: meta(agent, None, ns),
        rules: Some(vec![
            rule(
                &[APIREGISTRATION],
                &["apiservices"],
                &["get", "patch"],
                &[keys::API_SERVICE_NAME],
            ),
            // What-ifs get their priority from their PriorityClass, as admission gives it.
            rule(
                &["scheduling.k8s.io"],
                &["priorityclasses"],
                &["get", "list", "watch"],
                &[],
            ),
            // Pod groups (v1.36's gangs): what system:kube-scheduler grants only where the
            // GenericWorkload gate is on; without the read a 403 would stand for "not
            // served". Read, and their PodGroupScheduled condition written.
            rule(
                &["scheduling.k8s.io"],
                &["podgroups"],
                &["get", "list", "watch"],
                &[],
            ),
            rule(
                &["scheduling.k8s.io"],
                &["podgroups/status"],
                &["patch", "update"],
                &[],
            ),
            // Devices (DRA): system:kube-scheduler's resource.k8s.io rules of v1.37 with
            // its default gates, some of which (DeviceTaintRules, granular status
            // authorization's resourceclaims/binding) older API servers' roles lack.
            rule(
                &[RESOURCE_GROUP],
                &["deviceclasses"],
                &["get", "list", "watch"],
                &[],
            ),
            rule(
                &[RESOURCE_GROUP],
                &["resourceclaims"],
                &["get", "list", "watch", "update", "patch"],
                &[],
            ),
            rule(
                &[RESOURCE_GROUP],
                &["resourceclaims/status"],
                &["get", "list", "watch", "update", "patch"],
                &[],
            ),
            rule(
                &[RESOURCE_GROUP],
                &["resourceslices"],
                &["get", "list", "watch"],
                &[],
            ),
            rule(
                &[RESOURCE_GROUP],
                &["resourceclaims"],
                &["create", "delete"],
                &[],
            ),
            rule(
                &[RESOURCE_GROUP],
                &["devicetaintrules"],
                &["get", "list", "watch"],
                &[],
            ),
            rule(
                &[RESOURCE_GROUP],
                &["resourceclaims/binding"],
                &["update", "patch"],
                &[],
            ),
            // Pod sync copies the ResourceClaimTemplates a leaf pod's claims are made from,
            // read by name and nothing more (kube-scheduler never reads them):
            // cluster-wide, as the claims made from them are read.
            rule(
                &[RESOURCE_GROUP],
                &["resourceclaimtemplates"],
                &["get"],
                &[],
            ),
            // Placement policies: read, and their status written.
            rule(&[POLICY_GROUP], &POLICIES, &["get", "list", "watch"], &[]),
            rule(
                &[POLICY_GROUP],
                &[
                    "placementpolicies/status",
                    "clusterplacementpolicies/status",
                ],
                &["patch"],
                &[],
            ),
        ]),
        ..Default::default()
    };

    let mut objects = vec![
        Object::ClusterRole(configmap_reader),
        Object::ClusterRole(secret_reader),
        Object::ClusterRole(pod_annotator),
        Object::ClusterRole(agent_role),
    ];
    objects.extend(user_roles(ns));
    objects.extend([
        cluster_binding(ns, agent, agent),
        cluster_binding(
            ns,
            &format!("{agent}:kube-scheduler"),
            "system:kube-scheduler",
        ),
        cluster_binding(
            ns,
            &format!("{agent}:volume-scheduler"),
            "system:volume-scheduler",
        ),
        // Serving the aggregated API with delegated authentication and authorization: the
        // agent asks the API server about bearer tokens (TokenReview) and about what the
        // user the API server forwards may do (SubjectAccessReview).
        cluster_binding(
            ns,
            &format!("{agent}:auth-delegator"),
            "system:auth-delegator",
        ),
        Object::Role(own_role),
        Object::Role(node_lease_role),
        role_binding(ns, ns, agent, "Role", agent),
        role_binding(ns, NODE_LEASE_NAMESPACE, agent, "Role", agent),
        // Delegated authentication (as kube-scheduler): read the client CA the API server
        // publishes in kube-system, and the request-header CA that vouches for the user it
        // forwards with a request for mcsched.io.
        role_binding(
            ns,
            "kube-system",
            &format!("{agent}:extension-apiserver-authentication-reader"),
            "Role",
            "extension-apiserver-authentication-reader",
        ),
    ]);
    objects
}
