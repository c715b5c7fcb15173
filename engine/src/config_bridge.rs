//! From a validated KubeSchedulerConfiguration to the agent's runtime pieces: profiles
//! with their plugin instances, extenders, leader election and client settings.

use std::sync::Arc;

use mcsched_shared::config::{self, Point, SchedulerConfig, ScoringStrategyType};

use crate::framework::{FrameworkError, ProfileSpec};
use crate::leaf::cycle::LeafSnapshots;
use crate::plugins::default_preemption::PreemptionArgs;
use crate::plugins::dynamic_resources::DynamicResourcesArgs;
use crate::plugins::inter_pod_affinity::InterPodAffinityArgs;
use crate::plugins::node_resources_fit::{FitArgs, Strategy};
use crate::plugins::pod_topology_spread::{DefaultingType, PodTopologySpreadArgs};
use crate::plugins::{PluginArgs, registry_with};
use crate::profiles::{Profiles, Registry};

#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    #[error(transparent)]
    Framework(#[from] FrameworkError),
}

fn names(list: &[config::PluginRef]) -> Vec<String> {
    list.iter().map(|p| p.name.clone()).collect()
}

pub(crate) fn plugin_args(a: &config::PluginArgs) -> PluginArgs {
    let fit = &a.node_resources_fit;
    PluginArgs {
        fit: FitArgs {
            ignored_resources: fit.ignored_resources.clone(),
            ignored_resource_groups: fit.ignored_resource_groups.clone(),
            strategy: match fit.strategy {
                ScoringStrategyType::LeastAllocated => Strategy::LeastAllocated,
                ScoringStrategyType::MostAllocated => Strategy::MostAllocated,
                ScoringStrategyType::RequestedToCapacityRatio => {
                    Strategy::RequestedToCapacityRatio(fit.shape.clone())
                }
            },
            resources: fit
                .resources
                .iter()
                .map(|r| (r.name.clone(), r.weight))
                .collect(),
        },
        balanced_resources: Some(
            a.balanced_allocation_resources
                .iter()
                .map(|r| r.name.clone())
                .collect(),
        ),
        node_affinity_added: a.node_affinity_added.clone(),
        preemption: PreemptionArgs {
            min_candidate_nodes_percentage: a.min_candidate_nodes_percentage,
            min_candidate_nodes_absolute: a.min_candidate_nodes_absolute,
        },
        pod_topology_spread: PodTopologySpreadArgs {
            default_constraints: a.pod_topology_spread_default_constraints.clone(),
            defaulting_type: match a.pod_topology_spread_defaulting {
                config::DefaultingType::System => DefaultingType::System,
                config::DefaultingType::List => DefaultingType::List,
            },
        },
        inter_pod_affinity: InterPodAffinityArgs {
            hard_pod_affinity_weight: a.inter_pod_affinity_hard_weight,
            ignore_preferred_terms_of_existing_pods: a.ignore_preferred_terms_of_existing_pods,
        },
        dynamic_resources: DynamicResourcesArgs {
            filter_timeout: a.dynamic_resources_filter_timeout,
            binding_timeout: a.dynamic_resources_binding_timeout,
        },
        volume_bind_timeout_seconds: a.volume_binding_timeout_seconds,
        leaf_volume_bind_timeout_seconds: a.leaf_volume_binding_timeout_seconds,
        volume_binding_shape: a.volume_binding_shape.clone(),
        leaf_volume_binding_shape: a.leaf_volume_binding_shape.clone(),
        cluster_weights: a.cluster_weights.clone(),
        cluster_capacity: a.cluster_capacity,
        cluster_cost: a.cluster_cost,
        cluster_tiers: a.cluster_tiers.clone(),
    }
}

pub(crate) fn profile_spec(p: &config::Profile, global_percentage: Option<u32>) -> ProfileSpec {
    let pl = &p.plugins;
    ProfileSpec {
        scheduler_name: p.scheduler_name.clone(),
        pre_enqueue: names(pl.get(Point::PreEnqueue)),
        queue_sort: names(pl.get(Point::QueueSort)),
        pre_filter: names(pl.get(Point::PreFilter)),
        filter: names(pl.get(Point::Filter)),
        post_filter: names(pl.get(Point::PostFilter)),
        pre_score: names(pl.get(Point::PreScore)),
        score: pl
            .score
            .iter()
            .map(|r| (r.name.clone(), i64::from(r.weight)))
            .collect(),
        reserve: names(pl.get(Point::Reserve)),
        permit: names(pl.get(Point::Permit)),
        pre_bind: names(pl.get(Point::PreBind)),
        bind: names(pl.get(Point::Bind)),
        post_bind: names(pl.get(Point::PostBind)),
        placement_generate: names(pl.get(Point::PlacementGenerate)),
        placement_score: (pl.get(Point::PlacementScore).iter())
            .map(|r| (r.name.clone(), i64::from(r.weight)))
            .collect(),
        pod_group_post_filter: names(pl.get(Point::PodGroupPostFilter)),
        percentage_of_nodes_to_score: p.percentage_of_nodes_to_score.or(global_percentage),
    }
}

/// kube-scheduler v1's default profile named `name`, with default plugin arguments.
pub fn default_spec(name: &str) -> Result<ProfileSpec, config::ConfigErrors> {
    let cfg = config::default_config(name)?;
    Ok(cfg
        .profiles
        .first()
        .map(|p| profile_spec(p, None))
        .unwrap_or_default())
}

/// One profile's plugins as its framework takes them, the file's
/// percentageOfNodesToScore aside.
pub fn profile_spec_of(p: &config::Profile) -> ProfileSpec {
    profile_spec(p, None)
}

/// mcsched's default profile named `name` (the one `install` ships), with default
/// plugin arguments.
pub fn mcsched_default_spec(name: &str) -> Result<ProfileSpec, config::ConfigErrors> {
    let cfg = config::load(&config::mcsched_default::text(name, None))?;
    Ok(cfg
        .profiles
        .first()
        .map(|p| profile_spec(p, None))
        .unwrap_or_default())
}

/// Every profile's framework; their LeafNodeFit reads `leaves`, their GangScheduling the
/// PodGroups the profiles keep.
pub fn profiles(
    cfg: &SchedulerConfig,
    leaves: Arc<dyn LeafSnapshots>,
) -> Result<Profiles, BridgeError> {
    let groups = crate::pod_groups::PodGroups::new();
    let claims = crate::dra_state::ResourceClaims::new();
    let built: Vec<(ProfileSpec, Registry)> = cfg
        .profiles
        .iter()
        .map(|p| {
            (
                profile_spec(p, cfg.percentage_of_nodes_to_score),
                registry_with(
                    &plugin_args(&p.args),
                    leaves.clone(),
                    groups.clone(),
                    claims.clone(),
                ),
            )
        })
        .collect();
    let mut profiles = Profiles::build(&built, cfg.parallelism as usize)?;
    profiles.pod_groups = groups;
    profiles.resource_claims = claims;
    Ok(profiles)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcsched_shared::config::catalog;

    /// The configuration's table of plugins and extension points is the agent's truth.
    #[test]
    fn catalog_matches_the_registry() {
        let reg = crate::plugins::default_registry();
        let mut reg_names: Vec<&str> = reg.keys().map(String::as_str).collect();
        reg_names.sort();
        let mut cat_names: Vec<&str> = catalog::PLUGINS.iter().map(|(n, _)| *n).collect();
        cat_names.sort();
        assert_eq!(reg_names, cat_names);
        for (name, points) in catalog::PLUGINS {
            let p = &reg[*name];
            for point in Point::ALL {
                let has = match point {
                    Point::PreEnqueue => p.as_pre_enqueue().is_some(),
                    Point::QueueSort => p.as_queue_sort().is_some(),
                    Point::PreFilter => p.as_pre_filter().is_some(),
                    Point::Filter => p.as_filter().is_some(),
                    Point::PostFilter => p.as_post_filter().is_some(),
                    Point::PreScore => p.as_pre_score().is_some(),
                    Point::Score => p.as_score().is_some(),
                    Point::Reserve => p.as_reserve().is_some(),
                    Point::Permit => p.as_permit().is_some(),
                    Point::PreBind => p.as_pre_bind().is_some(),
                    Point::Bind => p.as_bind().is_some(),
                    Point::PostBind => p.as_post_bind().is_some(),
                    Point::PlacementGenerate => p.as_placement_generate().is_some(),
                    Point::PlacementScore => p.as_placement_score().is_some(),
                    Point::PodGroupPostFilter => p.as_pod_group_post_filter().is_some(),
                };
                assert_eq!(has, points.contains(&point), "{name} at {point:?}");
            }
        }
    }

    #[test]
    fn example_configs_build_frameworks() {
        for file in [
            "multiple-schedulers-v1beta2.yaml",
            "extending-my-scheduler-v1.yaml",
            "extending-extender-v1.yaml",
            "cluster-policies-v1.yaml",
        ] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../shared/testdata/config")
                .join(file);
            let cfg = match config::load_file(&path) {
                Ok(c) => c,
                Err(e) => panic!("{file}: {e}"),
            };
            if let Err(e) = profiles(&cfg, Arc::new(crate::leaf::cycle::NoLeaves)) {
                panic!("{file}: {e}");
            }
        }
    }
}
