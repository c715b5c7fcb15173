//! PlacementPolicy (namespaced) and ClusterPlacementPolicy (cluster-wide): where a
//! workload's pods may go among the host and the leaf clusters, and how its replicas are
//! divided, per workload rather than per scheduler profile (Karmada's
//! PropagationPolicy, for pods). The CRDs' schemas are generated from these types.
//!
//! They live in `policy.mcsched.io/v1alpha1`: `mcsched.io/v1alpha1` is the agent's
//! aggregated API (explanations, what-ifs), and a CRD in a group-version an APIService
//! already serves would never be reached.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::cluster_affinity::ClusterAffinity;
use crate::keys;
use crate::selectors::label_selector_matches;

pub(crate) const GROUP: &str = "policy.mcsched.io";

/// What a policy says; the same for both kinds.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "policy.mcsched.io",
    version = "v1alpha1",
    kind = "PlacementPolicy",
    plural = "placementpolicies",
    shortname = "pp",
    namespaced,
    status = "PlacementPolicyStatus",
    derive = "Default",
    crates(
        kube_core = "::kube_core",
        schemars = "::schemars",
        serde = "::serde",
        serde_json = "::serde_json",
        k8s_openapi = "::k8s_openapi"
    ),
    printcolumn = r#"{"name":"Selector","type":"string","jsonPath":".status.selector"}"#,
    printcolumn = r#"{"name":"Clusters","type":"string","jsonPath":".status.clustersInUse"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct PlacementPolicySpec {
    /// The pods this policy places: those of the policy's namespace (every namespace for
    /// a ClusterPlacementPolicy) whose labels match.
    pub pod_selector: LabelSelector,
    /// Only pods whose controller is of one of these kinds (ReplicaSet, StatefulSet,
    /// Job, ...); every pod when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) owner_kinds: Vec<String>,
    /// Where more than one policy selects a pod, the highest priority applies; at equal
    /// priority a PlacementPolicy before a ClusterPlacementPolicy, then by name.
    #[serde(default)]
    pub priority: i32,
    /// The clusters the pods may use (the host is the cluster `host`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_affinity: Option<ClusterAffinity>,
    /// Ordered groups of clusters: the first group with room, then the next
    /// (Karmada's clusterAffinities). Each group is further limited by
    /// `clusterAffinity` when both are given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub cluster_groups: Vec<ClusterGroup>,
    /// Limits on how many groups (clusters, regions, zones, providers) an owner's pods use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spread: Vec<SpreadConstraint>,
    /// How an owner's replicas are divided between the clusters they may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub division: Option<Division>,
    /// Among the clusters the rest of the policy leaves equal, the cheapest: by the
    /// virtual node's `mcsched.io/cost` label (the host costs 0; a cluster without a valid
    /// cost comes last).
    #[serde(default)]
    pub prefer_cheapest: bool,
    /// Taints of the clusters' virtual nodes these pods tolerate, as if the pods carried
    /// them: a NoSchedule taint an operator put on a cluster, or — with NoExecute and
    /// `tolerationSeconds` — how long they stay on a NotReady or unreachable leaf
    /// (`node.kubernetes.io/not-ready`, `node.kubernetes.io/unreachable`) before the agent
    /// deletes them so that their owners recreate them elsewhere. It can shorten, not
    /// lengthen, what the pods' own tolerations allow (kube's taint manager still applies
    /// those).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_tolerations: Vec<Toleration>,
    /// Move running pods to where the policy now places them: a pod in a later cluster
    /// group than one with room, in a cluster the policy no longer allows, or in one over
    /// its weighted share is evicted (Eviction API: PodDisruptionBudgets hold) once a
    /// replacement would be placed better, a bounded number at a time. Off when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebalance: Option<Rebalance>,
    /// How the copies of these pods are adapted to the leaf cluster they go to (images,
    /// command, env, resources, labels, the leaf's node selector and tolerations, storage
    /// classes, a JSON patch), in order; the leaf check judges the adapted copy. A change
    /// reaches running pods only when their owner replaces them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub overrides: Vec<crate::overrides::ClusterOverride>,
    /// For pod groups (PodGroups) whose members this policy selects and whose PodGroup
    /// sets no topology of its own: keep each group in one domain of these keys, as
    /// `PodGroup.spec.schedulingConstraints.topology` does (`mcsched.io/cluster`: one
    /// cluster, the host being `host`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_group_constraints: Option<PodGroupConstraints>,
}

/// `podGroupConstraints`: what a PodGroup's `schedulingConstraints` would say.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupConstraints {
    /// One key, as kube v1.36 allows one: the group's pods share its value.
    #[schemars(length(min = 1, max = 1))]
    pub topology: Vec<TopologyConstraint>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologyConstraint {
    /// A node label key (`topology.kubernetes.io/zone`, `mcsched.io/cluster`).
    pub key: String,
}

impl PodGroupConstraints {
    /// The key groups are kept within.
    pub fn topology_key(&self) -> Option<&str> {
        self.topology.first().map(|t| t.key.as_str())
    }
}

/// One group of `clusterGroups`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterGroup {
    /// Shown in explanations and status.
    pub name: String,
    #[serde(flatten)]
    pub(crate) affinity: ClusterAffinity,
}

#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum SpreadBy {
    Cluster,
    Region,
    Zone,
    Provider,
}

impl SpreadBy {
    /// The virtual node label a group is named by (none for clusters: their name).
    pub fn label(self) -> Option<&'static str> {
        match self {
            SpreadBy::Cluster => None,
            SpreadBy::Region => Some(keys::REGION_LABEL),
            SpreadBy::Zone => Some(keys::ZONE_LABEL),
            SpreadBy::Provider => Some(keys::PROVIDER_LABEL),
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpreadConstraint {
    pub by: SpreadBy,
    /// At least this many groups, while the owner has that many replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub min_groups: Option<i32>,
    /// Never more than this many groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_groups: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum DivisionType {
    /// By `weights`.
    Weighted,
    /// In proportion to how many replicas each cluster's nodes can hold (leaf-accurate).
    Dynamic,
    /// As few clusters as possible, the one with most room first.
    Aggregated,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Division {
    #[serde(rename = "type")]
    pub type_: DivisionType,
    /// For `Weighted`: cluster name → weight.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("additionalProperties" = {"type": "integer", "format": "int64", "minimum": 0}))]
    pub weights: BTreeMap<String, i64>,
    /// For `Weighted`: keep `controller.kubernetes.io/pod-deletion-cost` on the owner's
    /// pods, so that a ReplicaSet scaled down removes pods from the clusters most over
    /// their share first. The agent then patches that annotation on these pods, which
    /// the namespace's operator allows by binding ClusterRole `mcsched-agent-placement-keeper`.
    #[serde(default)]
    pub keep_shape: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Rebalance {
    /// Owners with a pod evicted and its replacement not yet running, at most.
    #[serde(default = "one")]
    #[schemars(range(min = 1))]
    pub max_in_flight: i32,
}

fn one() -> i32 {
    1
}

/// What the agent observed of a policy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementPolicyStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The pod selector, printed (`app=web`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// `east:8,west:4`: the clusters the selected pods run on, with their counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters_in_use: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterPods>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPods {
    pub name: String,
    pub pods: i64,
}

/// The cluster-wide kind: the same spec, for pods of every namespace.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "policy.mcsched.io",
    version = "v1alpha1",
    kind = "ClusterPlacementPolicy",
    plural = "clusterplacementpolicies",
    shortname = "cpp",
    status = "PlacementPolicyStatus",
    derive = "Default",
    crates(
        kube_core = "::kube_core",
        schemars = "::schemars",
        serde = "::serde",
        serde_json = "::serde_json",
        k8s_openapi = "::k8s_openapi"
    ),
    printcolumn = r#"{"name":"Selector","type":"string","jsonPath":".status.selector"}"#,
    printcolumn = r#"{"name":"Clusters","type":"string","jsonPath":".status.clustersInUse"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPlacementPolicySpec {
    #[serde(flatten)]
    pub policy: PlacementPolicySpec,
}

/// A policy the agent cannot apply: the field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct Invalid {
    pub(crate) field: String,
    pub(crate) message: String,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> Invalid {
    Invalid {
        field: field.into(),
        message: message.into(),
    }
}

/// A label key as the API server validates one: an optional DNS subdomain prefix and
/// `/`, then a name of 1 to 63 alphanumerics, `-`, `_`, `.`, alphanumeric at both ends.
fn check_label_key(key: &str) -> Result<(), &'static str> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        let subdomain = crate::names::is_dns_subdomain(p);
        if !subdomain {
            return Err("its prefix must be a DNS subdomain");
        }
    }
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let valid = (1..=63).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && alnum(name.chars().next())
        && alnum(name.chars().last());
    if valid {
        Ok(())
    } else {
        Err("its name must be 1 to 63 alphanumerics, '-', '_' or '.', alphanumeric at both ends")
    }
}

fn check_selector(sel: &LabelSelector, field: &str) -> Result<(), Invalid> {
    for (i, r) in sel.match_expressions.iter().flatten().enumerate() {
        let f = format!("{field}.matchExpressions[{i}]");
        let values = r.values.as_deref().unwrap_or_default();
        match r.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(invalid(
                    format!("{f}.values"),
                    format!("must be non-empty for operator {}", r.operator),
                ));
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(invalid(
                    format!("{f}.values"),
                    format!("must be empty for operator {}", r.operator),
                ));
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => {
                return Err(invalid(
                    format!("{f}.operator"),
                    format!("{other:?} is not In, NotIn, Exists or DoesNotExist"),
                ));
            }
        }
    }
    Ok(())
}

fn check_affinity(a: &ClusterAffinity, field: &str) -> Result<(), Invalid> {
    if let Some(sel) = &a.label_selector {
        check_selector(sel, &format!("{field}.labelSelector"))?;
    }
    if let Some(c) = a.cluster_names.iter().find(|c| a.exclude.contains(c)) {
        return Err(invalid(
            format!("{field}.exclude"),
            format!("cluster {c} is both named and excluded"),
        ));
    }
    Ok(())
}

impl PlacementPolicySpec {
    /// What the schema cannot say: the first problem, with its field.
    pub fn validate(&self) -> Result<(), Invalid> {
        check_selector(&self.pod_selector, "spec.podSelector")?;
        if let Some(a) = &self.cluster_affinity {
            check_affinity(a, "spec.clusterAffinity")?;
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, g) in self.cluster_groups.iter().enumerate() {
            let f = format!("spec.clusterGroups[{i}]");
            if g.name.is_empty() {
                return Err(invalid(format!("{f}.name"), "must not be empty"));
            }
            if !names.insert(g.name.as_str()) {
                return Err(invalid(
                    format!("{f}.name"),
                    format!("group {} is named twice", g.name),
                ));
            }
            check_affinity(&g.affinity, &f)?;
        }
        let mut by = std::collections::BTreeSet::new();
        for (i, c) in self.spread.iter().enumerate() {
            let f = format!("spec.spread[{i}]");
            if !by.insert(c.by) {
                return Err(invalid(
                    format!("{f}.by"),
                    "one constraint per kind of group",
                ));
            }
            for (name, v) in [("minGroups", c.min_groups), ("maxGroups", c.max_groups)] {
                if v.is_some_and(|v| v < 1) {
                    return Err(invalid(format!("{f}.{name}"), "must be 1 or more"));
                }
            }
            if let (Some(min), Some(max)) = (c.min_groups, c.max_groups)
                && min > max
            {
                return Err(invalid(
                    format!("{f}.minGroups"),
                    format!("{min} is more than maxGroups {max}"),
                ));
            }
        }
        for (i, t) in self.cluster_tolerations.iter().enumerate() {
            let f = format!("spec.clusterTolerations[{i}]");
            let op = t.operator.as_deref().unwrap_or("Equal");
            if op != "Equal" && op != "Exists" {
                return Err(invalid(
                    format!("{f}.operator"),
                    format!("{op:?} is not Equal or Exists"),
                ));
            }
            if op == "Exists" && t.value.as_deref().is_some_and(|v| !v.is_empty()) {
                return Err(invalid(
                    format!("{f}.value"),
                    "must be empty with operator Exists",
                ));
            }
            if t.key.as_deref().unwrap_or("").is_empty() && op != "Exists" {
                return Err(invalid(
                    format!("{f}.operator"),
                    "must be Exists when key is empty",
                ));
            }
            let effect = t.effect.as_deref().unwrap_or("");
            if !["", "NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
                return Err(invalid(
                    format!("{f}.effect"),
                    format!("{effect:?} is not NoSchedule, PreferNoSchedule or NoExecute"),
                ));
            }
            if t.toleration_seconds.is_some() && effect != "NoExecute" {
                return Err(invalid(
                    format!("{f}.tolerationSeconds"),
                    "only a NoExecute toleration has seconds",
                ));
            }
        }
        for (i, o) in self.overrides.iter().enumerate() {
            let f = format!("spec.overrides[{i}]");
            if let Some(t) = &o.target {
                check_affinity(t, &format!("{f}.target"))?;
            }
            o.validate(&f).map_err(|e| invalid(e.field, e.message))?;
        }
        if let Some(c) = &self.pod_group_constraints {
            if c.topology.len() != 1 {
                return Err(invalid(
                    "spec.podGroupConstraints.topology",
                    format!("must have exactly 1 key, has {}", c.topology.len()),
                ));
            }
            let key = &c.topology[0].key;
            if let Err(problem) = check_label_key(key) {
                return Err(invalid(
                    "spec.podGroupConstraints.topology[0].key",
                    format!("{key:?} is not a label key: {problem}"),
                ));
            }
        }
        if let Some(r) = &self.rebalance
            && r.max_in_flight < 1
        {
            return Err(invalid("spec.rebalance.maxInFlight", "must be 1 or more"));
        }
        if let Some(d) = &self.division {
            if let Some((c, w)) = d.weights.iter().find(|(_, w)| **w < 0) {
                return Err(invalid(
                    format!("spec.division.weights.{c}"),
                    format!("{w} is negative"),
                ));
            }
            match d.type_ {
                DivisionType::Weighted if !d.weights.values().any(|w| *w > 0) => {
                    return Err(invalid(
                        "spec.division.weights",
                        "a Weighted division needs at least one positive weight",
                    ));
                }
                DivisionType::Dynamic | DivisionType::Aggregated if d.keep_shape => {
                    return Err(invalid(
                        "spec.division.keepShape",
                        format!(
                            "only a Weighted division has a shape to keep, not {:?}",
                            d.type_
                        ),
                    ));
                }
                DivisionType::Dynamic | DivisionType::Aggregated if !d.weights.is_empty() => {
                    return Err(invalid(
                        "spec.division.weights",
                        format!("only a Weighted division takes weights, not {:?}", d.type_),
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The first cluster group a cluster (whose node carries `labels`) belongs to; 0 without
    /// groups, none when no group takes it.
    pub fn group_index(&self, cluster: &str, labels: &BTreeMap<String, String>) -> Option<usize> {
        if self.cluster_groups.is_empty() {
            return Some(0);
        }
        self.cluster_groups
            .iter()
            .position(|g| g.affinity.allows(cluster, labels))
    }

    /// Whether the policy lets its pods use a cluster at all: its affinity and its groups.
    pub fn allows(&self, cluster: &str, labels: &BTreeMap<String, String>) -> bool {
        self.cluster_affinity
            .as_ref()
            .is_none_or(|a| a.allows(cluster, labels))
            && self.group_index(cluster, labels).is_some()
    }

    /// Whether the policy takes a pod with these labels, whose controller is of kind
    /// `owner_kind`.
    pub fn selects(&self, labels: &BTreeMap<String, String>, owner_kind: Option<&str>) -> bool {
        label_selector_matches(Some(&self.pod_selector), labels)
            && (self.owner_kinds.is_empty()
                || owner_kind.is_some_and(|k| self.owner_kinds.iter().any(|o| o == k)))
    }

    /// The groups a cluster belongs to for spread constraint `by`: its name, or its
    /// node's label (none when it has no such label).
    pub fn group_of(
        by: SpreadBy,
        cluster: &str,
        labels: &BTreeMap<String, String>,
    ) -> Option<String> {
        match by.label() {
            None => Some(cluster.to_string()),
            Some(l) => labels.get(l).cloned(),
        }
    }
}

/// `app=web,tier in (front,back)`: a label selector as kubectl prints one.
pub fn selector_string(sel: &LabelSelector) -> String {
    crate::selectors::label_selector_string(sel, "<all>")
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_core::CustomResourceExt;

    fn spec(v: serde_json::Value) -> PlacementPolicySpec {
        serde_json::from_value(v).expect("spec")
    }

    #[test]
    fn the_crds_carry_schema_validation_printer_columns_and_status() {
        let crd = PlacementPolicy::crd();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("placementpolicies.policy.mcsched.io")
        );
        assert_eq!(crd.spec.scope, "Namespaced");
        let v = &crd.spec.versions[0];
        assert!(
            v.subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
        let columns: Vec<_> = v
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(columns, ["Selector", "Clusters", "Ready", "Age"]);
        let schema = serde_json::to_value(&v.schema).expect("schema");
        let weights = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["division"]["properties"]
            ["weights"];
        assert_eq!(weights["additionalProperties"]["minimum"], 0.0);
        assert_eq!(ClusterPlacementPolicy::crd().spec.scope, "Cluster");
    }

    #[test]
    fn validation_names_the_field() {
        let ok = spec(
            serde_json::json!({"podSelector": {"matchLabels": {"app": "web"}},
            "division": {"type": "Weighted", "weights": {"east": 2, "west": 1}}}),
        );
        assert_eq!(ok.validate(), Ok(()));
        let cases = [
            (
                serde_json::json!({"podSelector": {}, "division": {"type": "Weighted", "weights": {"east": -1}}}),
                "spec.division.weights.east: -1 is negative",
            ),
            (
                serde_json::json!({"podSelector": {}, "division": {"type": "Weighted", "weights": {"east": 0}}}),
                "spec.division.weights: a Weighted division needs at least one positive weight",
            ),
            (
                serde_json::json!({"podSelector": {}, "spread": [{"by": "region", "minGroups": 3, "maxGroups": 2}]}),
                "spec.spread[0].minGroups: 3 is more than maxGroups 2",
            ),
            (
                serde_json::json!({"podSelector": {"matchExpressions": [{"key": "a", "operator": "Has"}]}}),
                "spec.podSelector.matchExpressions[0].operator: \"Has\" is not In, NotIn, Exists or DoesNotExist",
            ),
            (
                serde_json::json!({"podSelector": {}, "clusterAffinity": {"clusterNames": ["east"], "exclude": ["east"]}}),
                "spec.clusterAffinity.exclude: cluster east is both named and excluded",
            ),
            (
                serde_json::json!({"podSelector": {}, "clusterGroups": [{"name": "a"}, {"name": "a"}]}),
                "spec.clusterGroups[1].name: group a is named twice",
            ),
            (
                serde_json::json!({"podSelector": {}, "podGroupConstraints": {"topology": []}}),
                "spec.podGroupConstraints.topology: must have exactly 1 key, has 0",
            ),
            (
                serde_json::json!({"podSelector": {}, "podGroupConstraints": {"topology": [{"key": "Zone!"}]}}),
                "spec.podGroupConstraints.topology[0].key: \"Zone!\" is not a label key: its name must be 1 to 63 alphanumerics, '-', '_' or '.', alphanumeric at both ends",
            ),
            (
                serde_json::json!({"podSelector": {}, "podGroupConstraints": {"topology": [{"key": "Mcsched.io/cluster"}]}}),
                "spec.podGroupConstraints.topology[0].key: \"Mcsched.io/cluster\" is not a label key: its prefix must be a DNS subdomain",
            ),
        ];
        let kept = spec(serde_json::json!({"podSelector": {},
            "podGroupConstraints": {"topology": [{"key": "mcsched.io/cluster"}]}}));
        assert_eq!(kept.validate(), Ok(()));
        assert_eq!(
            kept.pod_group_constraints
                .as_ref()
                .and_then(|c| c.topology_key()),
            Some("mcsched.io/cluster")
        );
        for (v, want) in cases {
            assert_eq!(
                spec(v).validate().map_err(|e| e.to_string()),
                Err(want.to_string())
            );
        }
    }

    #[test]
    fn selection_by_labels_and_owner_kind() {
        let s = spec(
            serde_json::json!({"podSelector": {"matchLabels": {"app": "web"}}, "ownerKinds": ["ReplicaSet"]}),
        );
        let web = BTreeMap::from([("app".to_string(), "web".to_string())]);
        assert!(s.selects(&web, Some("ReplicaSet")));
        assert!(!s.selects(&web, Some("StatefulSet")));
        assert!(!s.selects(&web, None));
        assert!(!s.selects(&BTreeMap::new(), Some("ReplicaSet")));
        assert_eq!(selector_string(&s.pod_selector), "app=web");
    }

    #[test]
    fn affinity_by_name_label_and_exclusion() {
        let a: ClusterAffinity = serde_json::from_value(serde_json::json!({
            "clusterNames": ["host"], "labelSelector": {"matchLabels": {"topology.kubernetes.io/region": "eu"}},
            "exclude": ["paris"]})).expect("affinity");
        let eu = BTreeMap::from([(
            "topology.kubernetes.io/region".to_string(),
            "eu".to_string(),
        )]);
        assert!(a.allows("host", &BTreeMap::new()));
        assert!(a.allows("berlin", &eu));
        assert!(!a.allows("paris", &eu));
        assert!(!a.allows("ohio", &BTreeMap::new()));
        assert!(ClusterAffinity::default().allows("anything", &BTreeMap::new()));
    }
}
