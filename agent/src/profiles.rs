//! Profiles: a scheduler name with its plugins per extension point.

use std::collections::HashMap;
use std::sync::Arc;

use crate::framework::{ClusterEvent, Framework, FrameworkError, Plugin, ProfileSpec};

/// kube-scheduler v1's default plugins (multiPoint), with their score weights, as far as
/// this agent implements them.
pub const DEFAULT_PLUGINS: &[(&str, i64)] = &[
    ("SchedulingGates", 0),
    ("PrioritySort", 0),
    ("NodeUnschedulable", 0),
    ("NodeName", 0),
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodePorts", 0),
    ("NodeResourcesFit", 1),
    ("VolumeRestrictions", 0),
    ("NodeVolumeLimits", 0),
    ("VolumeBinding", 0),
    ("VolumeZone", 0),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("DefaultPreemption", 0),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
    ("DefaultBinder", 0),
];

/// Expands a multiPoint list into extension points by what each plugin implements.
pub fn expand_multi_point(
    scheduler_name: &str,
    plugins: &[(&str, i64)],
    registry: &HashMap<String, Arc<dyn Plugin>>,
) -> ProfileSpec {
    let mut spec = ProfileSpec {
        scheduler_name: scheduler_name.to_string(),
        ..Default::default()
    };
    for &(name, weight) in plugins {
        let Some(p) = registry.get(name) else {
            continue;
        };
        let n = name.to_string();
        let p = p.as_ref();
        if p.as_pre_enqueue().is_some() {
            spec.pre_enqueue.push(n.clone());
        }
        if p.as_queue_sort().is_some() {
            spec.queue_sort.push(n.clone());
        }
        if p.as_pre_filter().is_some() {
            spec.pre_filter.push(n.clone());
        }
        if p.as_filter().is_some() {
            spec.filter.push(n.clone());
        }
        if p.as_post_filter().is_some() {
            spec.post_filter.push(n.clone());
        }
        if p.as_pre_score().is_some() {
            spec.pre_score.push(n.clone());
        }
        if p.as_score().is_some() {
            spec.score.push((n.clone(), weight.max(1)));
        }
        if p.as_reserve().is_some() {
            spec.reserve.push(n.clone());
        }
        if p.as_permit().is_some() {
            spec.permit.push(n.clone());
        }
        if p.as_pre_bind().is_some() {
            spec.pre_bind.push(n.clone());
        }
        if p.as_bind().is_some() {
            spec.bind.push(n.clone());
        }
        if p.as_post_bind().is_some() {
            spec.post_bind.push(n);
        }
    }
    spec
}

/// Plugin instances by name.
pub type Registry = HashMap<String, Arc<dyn Plugin>>;

/// The frameworks by scheduler name, and the events each plugin wants for requeueing.
pub struct Profiles {
    pub frameworks: HashMap<String, Arc<Framework>>,
    pub plugin_events: HashMap<&'static str, Vec<ClusterEvent>>,
}

impl Profiles {
    /// One framework per profile, each with its own plugin instances (its pluginConfig).
    pub fn build(
        profiles: &[(ProfileSpec, Registry)],
        parallelism: usize,
    ) -> Result<Self, FrameworkError> {
        let mut frameworks = HashMap::new();
        let mut plugin_events = HashMap::new();
        for (spec, registry) in profiles {
            let fw = Framework::new(spec, registry, parallelism)?;
            for p in fw.plugins() {
                plugin_events.insert(p.name(), p.events_to_register());
            }
            frameworks.insert(spec.scheduler_name.clone(), Arc::new(fw));
        }
        Ok(Profiles {
            frameworks,
            plugin_events,
        })
    }

    pub fn get(&self, scheduler_name: &str) -> Option<&Arc<Framework>> {
        self.frameworks.get(scheduler_name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::default_registry;

    #[test]
    fn default_profile_expands_by_capability() {
        let reg = default_registry();
        let spec = expand_multi_point("mcsched", DEFAULT_PLUGINS, &reg);
        assert_eq!(spec.queue_sort, vec!["PrioritySort"]);
        assert_eq!(spec.bind, vec!["DefaultBinder"]);
        assert!(spec.filter.starts_with(&[
            "NodeUnschedulable".to_string(),
            "NodeName".to_string(),
            "TaintToleration".to_string(),
            "NodeAffinity".to_string(),
        ]));
        assert!(spec.score.contains(&("TaintToleration".to_string(), 3)));
        assert!(spec.pre_enqueue.contains(&"SchedulingGates".to_string()));
        assert!(Profiles::build(&[(spec, reg)], 4).is_ok());
    }
}
