//! Profiles: a scheduler name with its plugins per extension point.

use std::collections::HashMap;
use std::sync::Arc;

use crate::framework::{ClusterEvent, Framework, FrameworkError, Plugin, ProfileSpec};

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
    use crate::config_bridge::default_spec;
    use crate::plugins::default_registry;

    #[test]
    fn default_profile_builds() {
        let reg = default_registry();
        let spec = match default_spec("mcsched") {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        };
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
