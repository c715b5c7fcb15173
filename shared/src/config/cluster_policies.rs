//! The arguments of mcsched's cluster-policy plugins (ClusterWeights, ClusterCapacity,
//! ClusterCost, ClusterTiers): their model, how `pluginConfig[].args` decode into it, and
//! kube-style validation whose errors name the field path.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Deserialize;

use super::ConfigErrors;
use crate::keys;

pub(crate) const CLUSTER_WEIGHTS: &str = "ClusterWeights";
pub(crate) const CLUSTER_CAPACITY: &str = "ClusterCapacity";
pub(crate) const CLUSTER_COST: &str = "ClusterCost";
pub(crate) const CLUSTER_TIERS: &str = "ClusterTiers";

/// ClusterWeights: an owner's replicas divided between clusters by static weights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterWeightsArgs {
    /// Cluster name → weight (≥ 0, at least one positive).
    pub weights: BTreeMap<String, i64>,
    /// The name the host's own nodes count as.
    pub host_cluster_name: String,
}

impl Default for ClusterWeightsArgs {
    fn default() -> Self {
        ClusterWeightsArgs {
            weights: BTreeMap::new(),
            host_cluster_name: keys::HOST_CLUSTER_NAME.into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CapacityMode {
    /// An owner's replicas in proportion to how many each cluster can hold.
    #[default]
    Dynamic,
    /// An owner's replicas on as few clusters as possible.
    Aggregated,
}

impl CapacityMode {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CapacityMode::Dynamic => "Dynamic",
            CapacityMode::Aggregated => "Aggregated",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClusterCapacityArgs {
    pub mode: CapacityMode,
}

/// ClusterCost: the cheapest cluster first, by the virtual node's cost label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClusterCostArgs {
    /// What a pod costs on the host's own nodes.
    pub host_cost: i64,
    /// What it costs on a virtual node without a (valid) cost label.
    pub default_cost: i64,
}

/// One tier of ClusterTiers: the clusters named, or the nodes a label selector picks.
#[derive(Debug, Clone, PartialEq)]
pub enum ClusterTier {
    Clusters(Vec<String>),
    Selector(LabelSelector),
}

/// ClusterTiers: nodes of earlier tiers first (e.g. host, then on-premises, then cloud).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusterTiersArgs {
    pub tiers: Vec<ClusterTier>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawClusterWeightsArgs {
    weights: Option<BTreeMap<String, i64>>,
    host_cluster_name: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawClusterCapacityArgs {
    mode: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawClusterCostArgs {
    host_cost: Option<i64>,
    default_cost: Option<i64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawClusterTiersArgs {
    tiers: Option<Vec<RawTier>>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawTier {
    clusters: Option<Vec<String>>,
    selector: Option<LabelSelector>,
}

/// A cluster name is the value of the `mcsched.io/cluster` label: a non-empty label
/// value (at most 63 characters, alphanumerics with `-`, `_`, `.` inside).
fn check_cluster_name(name: &str, path: &str, errs: &mut ConfigErrors) {
    let inner_ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let valid = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(inner_ok)
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !valid {
        errs.push(
            path,
            format!(
                "Invalid value: {name:?}: a cluster name must be 1 to 63 characters, alphanumeric, '-', '_' or '.', starting and ending with an alphanumeric character"
            ),
        );
    }
}

fn check_non_negative(value: i64, path: &str, errs: &mut ConfigErrors) {
    if value < 0 {
        errs.push(
            path,
            format!("Invalid value: {value}: must be greater than or equal to 0"),
        );
    }
}

pub(super) fn weights(
    r: RawClusterWeightsArgs,
    a: &str,
    errs: &mut ConfigErrors,
) -> ClusterWeightsArgs {
    let mut out = ClusterWeightsArgs::default();
    if let Some(host) = r.host_cluster_name {
        check_cluster_name(&host, &format!("{a}.hostClusterName"), errs);
        out.host_cluster_name = host;
    }
    let weights = r.weights.unwrap_or_default();
    if weights.is_empty() {
        errs.push(
            format!("{a}.weights"),
            "Required value: at least one cluster and its weight",
        );
    }
    for (cluster, w) in &weights {
        let path = format!("{a}.weights[{cluster}]");
        check_cluster_name(cluster, &path, errs);
        check_non_negative(*w, &path, errs);
    }
    if !weights.is_empty() && weights.values().all(|w| *w <= 0) {
        errs.push(
            format!("{a}.weights"),
            "Invalid value: every weight is 0: at least one weight must be positive",
        );
    }
    out.weights = weights;
    out
}

pub(super) fn capacity(
    r: RawClusterCapacityArgs,
    a: &str,
    errs: &mut ConfigErrors,
) -> ClusterCapacityArgs {
    let mode = match r.mode.as_deref() {
        None | Some("Dynamic") => CapacityMode::Dynamic,
        Some("Aggregated") => CapacityMode::Aggregated,
        Some(other) => {
            errs.push(
                format!("{a}.mode"),
                format!(
                    "Unsupported value: {other:?}: supported values: \"Dynamic\", \"Aggregated\""
                ),
            );
            CapacityMode::Dynamic
        }
    };
    ClusterCapacityArgs { mode }
}

pub(super) fn cost(r: RawClusterCostArgs, a: &str, errs: &mut ConfigErrors) -> ClusterCostArgs {
    let out = ClusterCostArgs {
        host_cost: r.host_cost.unwrap_or(0),
        default_cost: r.default_cost.unwrap_or(0),
    };
    check_non_negative(out.host_cost, &format!("{a}.hostCost"), errs);
    check_non_negative(out.default_cost, &format!("{a}.defaultCost"), errs);
    out
}

/// metav1's ValidateLabelSelector, with its messages.
fn check_selector(sel: &LabelSelector, path: &str, errs: &mut ConfigErrors) {
    for (j, req) in sel.match_expressions.iter().flatten().enumerate() {
        let p = format!("{path}.matchExpressions[{j}]");
        let has_values = req.values.as_ref().is_some_and(|v| !v.is_empty());
        match req.operator.as_str() {
            "In" | "NotIn" if !has_values => errs.push(
                format!("{p}.values"),
                "Required value: must be specified when `operator` is 'In' or 'NotIn'",
            ),
            "Exists" | "DoesNotExist" if has_values => errs.push(
                format!("{p}.values"),
                "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            ),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => errs.push(
                format!("{p}.operator"),
                format!("Invalid value: {other:?}: not a valid selector operator"),
            ),
        }
        if req.key.is_empty() {
            errs.push(format!("{p}.key"), "Required value: a label key");
        }
    }
    for k in sel.match_labels.iter().flatten().map(|(k, _)| k) {
        if k.is_empty() {
            errs.push(format!("{path}.matchLabels"), "Required value: a label key");
        }
    }
}

pub(super) fn tiers(r: RawClusterTiersArgs, a: &str, errs: &mut ConfigErrors) -> ClusterTiersArgs {
    let raw = r.tiers.unwrap_or_default();
    if raw.is_empty() {
        errs.push(format!("{a}.tiers"), "Required value: at least one tier");
    }
    let mut seen: HashMap<String, String> = HashMap::new();
    let mut out = Vec::new();
    for (i, t) in raw.into_iter().enumerate() {
        let path = format!("{a}.tiers[{i}]");
        match (t.clusters, t.selector) {
            (Some(_), Some(_)) => errs.push(
                format!("{path}.selector"),
                "Forbidden: a tier has either clusters or a selector, not both",
            ),
            (None, None) => errs.push(
                path.clone(),
                "Required value: a tier needs clusters or a selector",
            ),
            (Some(clusters), None) => {
                if clusters.is_empty() {
                    errs.push(
                        format!("{path}.clusters"),
                        "Required value: at least one cluster name",
                    );
                }
                for (j, c) in clusters.iter().enumerate() {
                    let p = format!("{path}.clusters[{j}]");
                    check_cluster_name(c, &p, errs);
                    if let Some(first) = seen.insert(c.clone(), p.clone()) {
                        errs.push(p, format!("Duplicate value: {c:?} (also {first})"));
                    }
                }
                out.push(ClusterTier::Clusters(clusters));
            }
            (None, Some(sel)) => {
                check_selector(&sel, &format!("{path}.selector"), errs);
                out.push(ClusterTier::Selector(sel));
            }
        }
    }
    ClusterTiersArgs { tiers: out }
}

/// `weights east=1, west=2; hostClusterName host` and the like, for `--check`.
pub(crate) fn describe(plugin: &str, args: &super::PluginArgs) -> Option<String> {
    Some(match plugin {
        CLUSTER_WEIGHTS => {
            let w = &args.cluster_weights;
            let list: Vec<String> = w.weights.iter().map(|(c, w)| format!("{c}={w}")).collect();
            format!(
                "weights {}; hostClusterName {}",
                list.join(", "),
                w.host_cluster_name
            )
        }
        CLUSTER_CAPACITY => format!("mode {}", args.cluster_capacity.mode.as_str()),
        CLUSTER_COST => format!(
            "hostCost {}; defaultCost {}",
            args.cluster_cost.host_cost, args.cluster_cost.default_cost
        ),
        CLUSTER_TIERS => {
            let tiers: Vec<String> = args
                .cluster_tiers
                .tiers
                .iter()
                .enumerate()
                .map(|(i, t)| match t {
                    ClusterTier::Clusters(c) => format!("{}: clusters {}", i + 1, c.join(",")),
                    ClusterTier::Selector(s) => format!("{}: selector {}", i + 1, selector(s)),
                })
                .collect();
            format!("tiers {}", tiers.join("; "))
        }
        _ => return None,
    })
}

/// A label selector in kubectl's string form: `a=b,c in (d,e),!f`.
fn selector(s: &LabelSelector) -> String {
    crate::selectors::label_selector_string(s, "(everything)")
}
