//! Profiles: a scheduler name with its plugins per extension point.

use std::collections::HashMap;
use std::sync::Arc;

use crate::framework::{ClusterEvent, Framework, FrameworkError, Plugin, ProfileSpec};
use crate::nominator::Nominator;
use crate::queue::{Less, priority_sort};

/// Plugin instances by name.
pub(crate) type Registry = HashMap<String, Arc<dyn Plugin>>;

/// The frameworks by scheduler name, the events each plugin wants for requeueing, and
/// the queue's order.
pub struct Profiles {
    pub frameworks: HashMap<String, Arc<Framework>>,
    pub plugin_events: HashMap<&'static str, Vec<ClusterEvent>>,
    /// The QueueSort plugin's order; one for all profiles, as kube-scheduler requires (the
    /// configuration check enforces it), so the first profile's.
    pub less: Less,
    /// Preemption's nominations, one for all profiles as kube's queue keeps them.
    pub nominator: Arc<Nominator>,
    /// The PodGroups and their members, which the profiles' GangScheduling reads.
    pub pod_groups: Arc<crate::pod_groups::PodGroups>,
    /// The ResourceClaims, which the profiles' DynamicResources reads and allocates.
    pub resource_claims: Arc<crate::dra_state::ResourceClaims>,
}

impl Profiles {
    /// One framework per profile, each with its own plugin instances (its pluginConfig).
    pub fn build(
        profiles: &[(ProfileSpec, Registry)],
        parallelism: usize,
    ) -> Result<Self, FrameworkError> {
        let mut frameworks = HashMap::new();
        let mut plugin_events = HashMap::new();
        let mut sort: Option<Arc<dyn Plugin>> = None;
        let nominator = Nominator::new();
        for (spec, registry) in profiles {
            let fw = Framework::new(spec, registry, parallelism)?.with_nominator(nominator.clone());
            sort.get_or_insert_with(|| fw.queue_sort().clone());
            for p in fw.plugins() {
                plugin_events.insert(p.name(), p.events_to_register());
            }
            frameworks.insert(spec.scheduler_name.clone(), Arc::new(fw));
        }
        let less: Less = match sort {
            Some(p) => Arc::new(move |a, b| p.as_queue_sort().is_some_and(|q| q.less(a, b))),
            None => priority_sort(),
        };
        Ok(Profiles {
            frameworks,
            plugin_events,
            less,
            nominator,
            pod_groups: crate::pod_groups::PodGroups::new(),
            resource_claims: crate::dra_state::ResourceClaims::new(),
        })
    }

    pub fn get(&self, scheduler_name: &str) -> Option<&Arc<Framework>> {
        self.frameworks.get(scheduler_name)
    }

    /// The framework serving `pod`, if this agent serves its scheduler name.
    pub fn for_pod(&self, pod: &k8s_openapi::api::core::v1::Pod) -> Option<&Arc<Framework>> {
        self.get(mcsched_shared::pod::scheduler_name(pod))
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
            "NodeName".to_string(),
            "NodeUnschedulable".to_string(),
            "TaintToleration".to_string(),
            "NodeAffinity".to_string(),
        ]));
        assert!(spec.score.contains(&("TaintToleration".to_string(), 3)));
        assert!(spec.pre_enqueue.contains(&"SchedulingGates".to_string()));
        assert!(Profiles::build(&[(spec, reg)], 4).is_ok());
    }

    struct ByName;
    impl Plugin for ByName {
        fn name(&self) -> &'static str {
            "ByName"
        }
        fn as_queue_sort(&self) -> Option<&dyn crate::framework::QueueSortPlugin> {
            Some(self)
        }
    }
    impl crate::framework::QueueSortPlugin for ByName {
        fn less(
            &self,
            a: &crate::framework::QueuedPodInfo,
            b: &crate::framework::QueuedPodInfo,
        ) -> bool {
            a.pod.name < b.pod.name
        }
    }

    #[test]
    fn the_queue_orders_by_the_profiles_queue_sort_plugin() {
        let mut reg = default_registry();
        reg.insert("ByName".into(), Arc::new(ByName));
        let mut spec = default_spec("mcsched").expect("default profile");
        spec.queue_sort = vec!["ByName".into()];
        let profiles = Profiles::build(&[(spec, reg)], 1).expect("profiles");
        let queued = |name: &str, priority: i32| {
            let mut p = k8s_openapi::api::core::v1::Pod::default();
            p.metadata.name = Some(name.into());
            p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
                priority: Some(priority),
                ..Default::default()
            });
            crate::framework::QueuedPodInfo {
                pod: Arc::new(crate::snapshot::PodInfo::new(Arc::new(p))),
                timestamp: std::time::Instant::now(),
                initial_attempt: None,
                attempts: 0,
                rejection: None,
            }
        };
        // PrioritySort would put "b" (priority 9) first; ByName puts "a" first.
        assert!((profiles.less)(&queued("a", 0), &queued("b", 9)));
        assert!(!(profiles.less)(&queued("b", 9), &queued("a", 0)));
    }
}
