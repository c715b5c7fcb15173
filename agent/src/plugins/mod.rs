//! In-tree plugins, one file each, named like kube-scheduler's.

pub mod default_binder;
pub mod default_preemption;
pub mod helper;
pub mod image_locality;
pub mod node_affinity;
pub mod node_name;
pub mod node_ports;
pub mod node_resources_balanced_allocation;
pub mod node_resources_fit;
pub mod node_unschedulable;
pub mod priority_sort;
pub mod scheduling_gates;
pub mod taint_toleration;
#[cfg(test)]
pub mod testing;

use std::collections::HashMap;
use std::sync::Arc;

use crate::framework::Plugin;

/// Every plugin this agent implements, built with default arguments.
pub fn default_registry() -> HashMap<String, Arc<dyn Plugin>> {
    let plugins: Vec<Arc<dyn Plugin>> = vec![
        Arc::new(scheduling_gates::SchedulingGates),
        Arc::new(priority_sort::PrioritySort),
        Arc::new(node_unschedulable::NodeUnschedulable),
        Arc::new(node_name::NodeName),
        Arc::new(taint_toleration::TaintToleration),
        Arc::new(node_affinity::NodeAffinity::default()),
        Arc::new(node_ports::NodePorts),
        Arc::new(node_resources_fit::NodeResourcesFit::new(Default::default())),
        Arc::new(node_resources_balanced_allocation::BalancedAllocation::default()),
        Arc::new(image_locality::ImageLocality),
        Arc::new(default_binder::DefaultBinder),
        Arc::new(default_preemption::DefaultPreemption::new(
            Default::default(),
        )),
    ];
    plugins
        .into_iter()
        .map(|p| (p.name().to_string(), p))
        .collect()
}
