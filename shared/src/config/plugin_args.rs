//! `pluginConfig[].args`, decoded per plugin and validated like kube-scheduler's
//! validation_pluginargs.go.

use serde::de::DeserializeOwned;

use super::ConfigErrors;
use super::catalog;
use super::cluster_policies as policies;
use super::model::*;
use super::raw::*;

/// Decodes `args` into `T`, dropping the optional apiVersion/kind of typed args.
fn decode<T: DeserializeOwned + Default>(
    args: Option<&serde_json::Value>,
    path: &str,
    errs: &mut ConfigErrors,
) -> Option<T> {
    let Some(v) = args else {
        return Some(T::default());
    };
    let mut v = v.clone();
    if let serde_json::Value::Object(m) = &mut v {
        m.remove("apiVersion");
        m.remove("kind");
    }
    match crate::yaml::from_value(v) {
        Ok(t) => Some(t),
        Err(e) => {
            let msg = e.to_string();
            match msg.split_once(": ") {
                Some((p, m)) if !p.contains(' ') => errs.push(format!("{path}.{p}"), m),
                _ => errs.push(path, msg),
            }
            None
        }
    }
}

fn resources(raw: &[RawResource], path: &str, errs: &mut ConfigErrors) -> Vec<ResourceWeight> {
    let mut out = Vec::new();
    for (i, r) in raw.iter().enumerate() {
        let w = r.weight.unwrap_or(1);
        if !(1..=100).contains(&w) {
            errs.push(
                format!("{path}[{i}].weight"),
                format!(
                    "resource weight of {} should be in the range [1, 100], got {w}",
                    r.name
                ),
            );
        }
        if out.iter().any(|x: &ResourceWeight| x.name == r.name) {
            errs.push(
                format!("{path}[{i}].name"),
                format!("Duplicate value: {:?}", r.name),
            );
        }
        out.push(ResourceWeight {
            name: r.name.clone(),
            weight: w,
        });
    }
    out
}

fn shape(
    raw: &[RawShapePoint],
    max_score: i64,
    path: &str,
    errs: &mut ConfigErrors,
) -> Vec<(i64, i64)> {
    if raw.is_empty() {
        errs.push(path, "at least one point must be specified");
    }
    let mut prev = -1;
    for (i, p) in raw.iter().enumerate() {
        if !(0..=100).contains(&p.utilization) {
            errs.push(
                format!("{path}[{i}].utilization"),
                format!("not in valid range [0, 100], got {}", p.utilization),
            );
        } else if p.utilization <= prev {
            errs.push(
                format!("{path}[{i}].utilization"),
                "values must be sorted in increasing order",
            );
        }
        prev = p.utilization;
        if !(0..=max_score).contains(&p.score) {
            errs.push(
                format!("{path}[{i}].score"),
                format!("not in valid range [0, {max_score}], got {}", p.score),
            );
        }
    }
    raw.iter().map(|p| (p.utilization, p.score)).collect()
}

/// A Go duration that may be negative: Ok(d) when not, Err(()) when negative, None (the
/// error pushed at `path`) when it is no duration.
fn signed_duration(
    text: &str,
    path: &str,
    errs: &mut ConfigErrors,
) -> Option<Result<std::time::Duration, ()>> {
    let (negative, abs) = match text.trim().strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    match super::duration::parse(abs) {
        Ok(d) if negative && !d.is_zero() => Some(Err(())),
        Ok(d) => Some(Ok(d)),
        Err(e) => {
            errs.push(path, e.to_string());
            None
        }
    }
}

pub(super) fn apply(
    configs: &[RawPluginConfig],
    profile: &str,
    args: &mut PluginArgs,
    errs: &mut ConfigErrors,
) {
    let mut seen = std::collections::HashSet::new();
    for (i, pc) in configs.iter().enumerate() {
        let path = format!("{profile}.pluginConfig[{i}]");
        if !seen.insert(pc.name.clone()) {
            errs.push(
                format!("{path}.name"),
                format!("Duplicate value: {:?}", pc.name),
            );
            continue;
        }
        let a = format!("{path}.args");
        let raw = pc.args.as_ref();
        match pc.name.as_str() {
            "NodeResourcesFit" => {
                let Some(r) = decode::<RawFitArgs>(raw, &a, errs) else {
                    continue;
                };
                let fit = &mut args.node_resources_fit;
                fit.ignored_resources = r.ignored_resources.unwrap_or_default();
                fit.ignored_resource_groups = r.ignored_resource_groups.unwrap_or_default();
                for (j, g) in fit.ignored_resource_groups.iter().enumerate() {
                    if g.contains('/') {
                        errs.push(
                            format!("{a}.ignoredResourceGroups[{j}]"),
                            format!("resource group name can't contain '/': {g:?}"),
                        );
                    }
                }
                if let Some(s) = r.scoring_strategy {
                    fit.strategy = match s.type_.as_deref() {
                        None | Some("LeastAllocated") => ScoringStrategyType::LeastAllocated,
                        Some("MostAllocated") => ScoringStrategyType::MostAllocated,
                        Some("RequestedToCapacityRatio") => {
                            ScoringStrategyType::RequestedToCapacityRatio
                        }
                        Some(other) => {
                            errs.push(
                                format!("{a}.scoringStrategy.type"),
                                format!("Unsupported value: {other:?}: supported values: \"LeastAllocated\", \"MostAllocated\", \"RequestedToCapacityRatio\""),
                            );
                            ScoringStrategyType::LeastAllocated
                        }
                    };
                    if let Some(res) = s.resources {
                        fit.resources =
                            resources(&res, &format!("{a}.scoringStrategy.resources"), errs);
                    }
                    if fit.strategy == ScoringStrategyType::RequestedToCapacityRatio {
                        let pts = s
                            .requested_to_capacity_ratio
                            .and_then(|r| r.shape)
                            .unwrap_or_default();
                        fit.shape = shape(
                            &pts,
                            10,
                            &format!("{a}.scoringStrategy.requestedToCapacityRatio.shape"),
                            errs,
                        );
                    }
                }
            }
            "NodeResourcesBalancedAllocation" => {
                let Some(r) = decode::<RawBalancedArgs>(raw, &a, errs) else {
                    continue;
                };
                if let Some(res) = r.resources {
                    args.balanced_allocation_resources =
                        resources(&res, &format!("{a}.resources"), errs);
                }
            }
            "InterPodAffinity" => {
                let Some(r) = decode::<RawInterPodAffinityArgs>(raw, &a, errs) else {
                    continue;
                };
                if let Some(w) = r.hard_pod_affinity_weight {
                    if !(0..=100).contains(&w) {
                        errs.push(
                            format!("{a}.hardPodAffinityWeight"),
                            format!("not in valid range [0, 100], got {w}"),
                        );
                    }
                    args.inter_pod_affinity_hard_weight = w as i32;
                }
                args.ignore_preferred_terms_of_existing_pods =
                    r.ignore_preferred_terms_of_existing_pods.unwrap_or(false);
            }
            "PodTopologySpread" => {
                let Some(r) = decode::<RawPodTopologySpreadArgs>(raw, &a, errs) else {
                    continue;
                };
                args.pod_topology_spread_defaulting = match r.defaulting_type.as_deref() {
                    None | Some("System") => DefaultingType::System,
                    Some("List") => DefaultingType::List,
                    Some(other) => {
                        errs.push(format!("{a}.defaultingType"), format!("Unsupported value: {other:?}: supported values: \"System\", \"List\""));
                        DefaultingType::System
                    }
                };
                let constraints = r.default_constraints.unwrap_or_default();
                if args.pod_topology_spread_defaulting == DefaultingType::System
                    && !constraints.is_empty()
                {
                    errs.push(
                        format!("{a}.defaultConstraints"),
                        "when .defaultingType=System, .defaultConstraints must be empty",
                    );
                }
                for (j, c) in constraints.iter().enumerate() {
                    let f = format!("{a}.defaultConstraints[{j}]");
                    if c.max_skew <= 0 {
                        errs.push(
                            format!("{f}.maxSkew"),
                            format!("must be greater than zero, got {}", c.max_skew),
                        );
                    }
                    if c.topology_key.is_empty() {
                        errs.push(format!("{f}.topologyKey"), "Required value");
                    }
                    if !matches!(
                        c.when_unsatisfiable.as_str(),
                        "DoNotSchedule" | "ScheduleAnyway"
                    ) {
                        errs.push(
                            format!("{f}.whenUnsatisfiable"),
                            format!("Unsupported value: {:?}", c.when_unsatisfiable),
                        );
                    }
                    if c.label_selector.is_some() {
                        errs.push(
                            format!("{f}.labelSelector"),
                            "constraint must not define a selector, as they deduced for each pod",
                        );
                    }
                    if constraints[..j].iter().any(|o| {
                        o.topology_key == c.topology_key
                            && o.when_unsatisfiable == c.when_unsatisfiable
                    }) {
                        errs.push(
                            f.to_string(),
                            "Duplicate value: topologyKey and whenUnsatisfiable",
                        );
                    }
                }
                args.pod_topology_spread_default_constraints = constraints;
            }
            "VolumeBinding" | "LeafNodeVolumeBinding" => {
                let Some(r) = decode::<RawVolumeBindingArgs>(raw, &a, errs) else {
                    continue;
                };
                let t = r.bind_timeout_seconds.unwrap_or(600);
                if t < 0 {
                    errs.push(
                        format!("{a}.bindTimeoutSeconds"),
                        format!(
                            "invalid BindTimeoutSeconds, should not be a negative value, got {t}"
                        ),
                    );
                }
                // Defaulted before validation: none or an empty list is the default.
                let s = match r.shape.filter(|pts| !pts.is_empty()) {
                    Some(pts) => shape(&pts, 10, &format!("{a}.shape"), errs),
                    None => DEFAULT_VOLUME_BINDING_SHAPE.to_vec(),
                };
                if pc.name == "VolumeBinding" {
                    args.volume_binding_timeout_seconds = t;
                    args.volume_binding_shape = s;
                } else {
                    args.leaf_volume_binding_timeout_seconds = t;
                    args.leaf_volume_binding_shape = s;
                }
            }
            "DynamicResources" => {
                let Some(r) = decode::<RawDynamicResourcesArgs>(raw, &a, errs) else {
                    continue;
                };
                if let Some(t) = r.filter_timeout {
                    // ValidateDynamicResourcesArgs: zero turns the timeout off.
                    if let Some(d) = signed_duration(&t, &format!("{a}.filterTimeout"), errs) {
                        match d {
                            Ok(d) => args.dynamic_resources_filter_timeout = d,
                            Err(()) => errs.push(
                                format!("{a}.filterTimeout"),
                                format!("Invalid value: {t:?}: must be zero or positive"),
                            ),
                        }
                    }
                }
                if let Some(t) = r.binding_timeout
                    && let Some(d) = signed_duration(&t, &format!("{a}.bindingTimeout"), errs)
                {
                    match d {
                        Ok(d) if d >= std::time::Duration::from_secs(1) => {
                            args.dynamic_resources_binding_timeout = d
                        }
                        _ => errs.push(
                            format!("{a}.bindingTimeout"),
                            format!("Invalid value: {t:?}: must be at least 1 second"),
                        ),
                    }
                }
            }
            "NodeAffinity" => {
                let Some(r) = decode::<RawNodeAffinityArgs>(raw, &a, errs) else {
                    continue;
                };
                args.node_affinity_added = r.added_affinity;
            }
            "DefaultPreemption" => {
                let Some(r) = decode::<RawDefaultPreemptionArgs>(raw, &a, errs) else {
                    continue;
                };
                let pct = r.min_candidate_nodes_percentage.unwrap_or(10);
                let abs = r.min_candidate_nodes_absolute.unwrap_or(100);
                if !(0..=100).contains(&pct) {
                    errs.push(
                        format!("{a}.minCandidateNodesPercentage"),
                        format!("not in valid range [0, 100], got {pct}"),
                    );
                }
                if abs < 0 {
                    errs.push(
                        format!("{a}.minCandidateNodesAbsolute"),
                        format!("not in valid range [0, inf), got {abs}"),
                    );
                }
                if pct == 0 && abs == 0 {
                    errs.push(a.to_string(), "both minCandidateNodesPercentage and minCandidateNodesAbsolute cannot be zero");
                }
                args.min_candidate_nodes_percentage = pct.clamp(0, 100) as u32;
                args.min_candidate_nodes_absolute = abs.max(0) as u32;
            }
            policies::CLUSTER_WEIGHTS => {
                if let Some(r) = decode(raw, &a, errs) {
                    args.cluster_weights = policies::weights(r, &a, errs);
                }
            }
            policies::CLUSTER_CAPACITY => {
                if let Some(r) = decode(raw, &a, errs) {
                    args.cluster_capacity = policies::capacity(r, &a, errs);
                }
            }
            policies::CLUSTER_COST => {
                if let Some(r) = decode(raw, &a, errs) {
                    args.cluster_cost = policies::cost(r, &a, errs);
                }
            }
            policies::CLUSTER_TIERS => {
                if let Some(r) = decode(raw, &a, errs) {
                    args.cluster_tiers = policies::tiers(r, &a, errs);
                }
            }
            other if catalog::is_known(other) => {
                // Plugins without arguments accept none.
                if raw.is_some_and(|v| !matches!(v, serde_json::Value::Null)) {
                    errs.push(a, format!("plugin {other:?} takes no arguments"));
                }
            }
            other => errs.push(format!("{path}.name"), format!("unknown plugin {other:?}")),
        }
    }
}

/// ClusterWeights and ClusterTiers mean nothing without their args: enabled with no
/// `pluginConfig` entry, the profile is refused rather than silently scoring nothing.
pub(super) fn require_args(
    configs: &[RawPluginConfig],
    plugins: &Plugins,
    profile: &str,
    errs: &mut ConfigErrors,
) {
    for (name, what) in [
        (policies::CLUSTER_WEIGHTS, "weights"),
        (policies::CLUSTER_TIERS, "tiers"),
    ] {
        let enabled = plugins.score.iter().any(|r| r.name == name);
        if enabled && !configs.iter().any(|c| c.name == name) {
            errs.push(
                format!("{profile}.pluginConfig"),
                format!("Required value: {name} is enabled, so its args ({what}) must be given"),
            );
        }
    }
}
