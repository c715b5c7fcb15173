//! The resource pools a node can use (kube's GatherPools): slices that are node-local to
//! it, for all nodes, or node-selector-matched; of each pool only its newest generation;
//! incomplete pools (not all slices of that generation seen) and invalid ones marked.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{CounterSet, ResourceSlice};

use crate::Features;
use crate::node_match::node_matches;

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolId {
    pub driver: String,
    pub pool: String,
}

impl std::fmt::Display for PoolId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.driver, self.pool)
    }
}

#[derive(Debug)]
pub struct Pool {
    pub id: PoolId,
    pub incomplete: bool,
    pub invalid: bool,
    pub invalid_reason: String,
    pub slices_targeting_node: Vec<Arc<ResourceSlice>>,
    pub slices_not_targeting_node: Vec<Arc<ResourceSlice>>,
    pub counter_sets: BTreeMap<String, CounterSet>,
}

impl Pool {
    fn marked(id: PoolId, incomplete: bool, invalid_reason: Option<String>) -> Pool {
        Pool {
            id,
            incomplete,
            invalid: invalid_reason.is_some(),
            invalid_reason: invalid_reason.unwrap_or_default(),
            slices_targeting_node: Vec::new(),
            slices_not_targeting_node: Vec::new(),
            counter_sets: BTreeMap::new(),
        }
    }
}

fn pool_id(slice: &ResourceSlice) -> PoolId {
    PoolId {
        driver: slice.spec.driver.clone(),
        pool: slice.spec.pool.name.clone(),
    }
}

fn devices(slice: &ResourceSlice) -> &[k8s_openapi::api::resource::v1::Device] {
    slice.spec.devices.as_deref().unwrap_or_default()
}

fn uses_compatibility_groups(slice: &ResourceSlice) -> bool {
    devices(slice).iter().any(|d| {
        d.consumes_counters.iter().flatten().any(|c| {
            !c.compatibility_groups
                .as_deref()
                .unwrap_or_default()
                .is_empty()
        })
    })
}

fn has_shared_counters(slice: &ResourceSlice) -> bool {
    !slice
        .spec
        .shared_counters
        .as_deref()
        .unwrap_or_default()
        .is_empty()
}

pub fn gather_pools(
    slices_for_node: &[Arc<ResourceSlice>],
    node: &Node,
    features: Features,
    all_slices: &[Arc<ResourceSlice>],
) -> Vec<Pool> {
    let mut pools: HashMap<PoolId, Vec<Arc<ResourceSlice>>> = HashMap::new();
    for slice in slices_for_node {
        let spec = &slice.spec;
        if !features.partitionable_devices
            && (spec.per_device_node_selection.is_some() || has_shared_counters(slice))
        {
            continue;
        }
        // Without DRADeviceCompatibilityGroups (off in v1.37) such slices are ignored,
        // which leaves their pool incomplete.
        if uses_compatibility_groups(slice) {
            continue;
        }
        let node_name = spec.node_name.as_deref().filter(|n| !n.is_empty());
        let all_nodes = spec.all_nodes.unwrap_or(false);
        let relevant = if node_name.is_some() || all_nodes || spec.node_selector.is_some() {
            node_matches(node, node_name, all_nodes, spec.node_selector.as_ref())
        } else if spec.per_device_node_selection.unwrap_or(false) {
            devices(slice).iter().any(|d| {
                node_matches(
                    node,
                    d.node_name.as_deref(),
                    d.all_nodes.unwrap_or(false),
                    d.node_selector.as_ref(),
                )
            })
        } else {
            // Some future way of node selection: not understood, not used.
            continue;
        };
        if relevant {
            add_slice(&mut pools, slice.clone());
        }
    }

    let mut result = Vec::new();
    let mut with_binding_conditions = Vec::new();
    for (id, slices) in pools {
        let generation = slices[0].spec.pool.generation;
        let count = slices[0].spec.pool.resource_slice_count;
        let pool = if slices.len() as i64 == count {
            build_pool(id, slices, features, &[])
        } else {
            let Some(all_for_pool) = slices_in_pool(all_slices, &id, generation) else {
                // A newer generation is being published: ignore the old one.
                continue;
            };
            let all_for_pool: Vec<_> = all_for_pool
                .into_iter()
                .filter(|s| !uses_compatibility_groups(s))
                .collect();
            if all_for_pool.len() as i64 != count {
                result.push(Pool::marked(id, true, None));
                continue;
            }
            build_pool(id, slices, features, &all_for_pool)
        };
        if pool_has_binding_conditions(&pool) {
            with_binding_conditions.push(pool);
        } else {
            result.push(pool);
        }
    }
    result.sort_by(|a, b| a.id.cmp(&b.id));
    with_binding_conditions.sort_by(|a, b| a.id.cmp(&b.id));
    result.extend(with_binding_conditions);
    result
}

fn add_slice(pools: &mut HashMap<PoolId, Vec<Arc<ResourceSlice>>>, slice: Arc<ResourceSlice>) {
    let id = pool_id(&slice);
    let Some(existing) = pools.get_mut(&id) else {
        pools.insert(id, vec![slice]);
        return;
    };
    let current = existing[0].spec.pool.generation;
    let generation = slice.spec.pool.generation;
    if generation < current {
        return;
    }
    if generation > current {
        *existing = vec![slice];
        return;
    }
    existing.push(slice);
}

/// All slices of the pool at `generation`, or None when a newer generation exists.
fn slices_in_pool(
    all: &[Arc<ResourceSlice>],
    id: &PoolId,
    generation: i64,
) -> Option<Vec<Arc<ResourceSlice>>> {
    let mut out = Vec::new();
    for s in all {
        if s.spec.driver != id.driver || s.spec.pool.name != id.pool {
            continue;
        }
        match s.spec.pool.generation.cmp(&generation) {
            std::cmp::Ordering::Equal => out.push(s.clone()),
            std::cmp::Ordering::Greater => return None,
            std::cmp::Ordering::Less => {}
        }
    }
    Some(out)
}

fn slice_name(s: &ResourceSlice) -> &str {
    s.metadata.name.as_deref().unwrap_or_default()
}

fn build_pool(
    id: PoolId,
    mut slices: Vec<Arc<ResourceSlice>>,
    features: Features,
    all_for_pool: &[Arc<ResourceSlice>],
) -> Pool {
    slices.sort_by(|a, b| slice_name(a).cmp(slice_name(b)));
    let mut device_slices = Vec::new();
    let mut counter_slices = Vec::new();
    let mut not_targeting = Vec::new();
    for s in &slices {
        if features.partitionable_devices && has_shared_counters(s) {
            counter_slices.push(s.clone());
        } else {
            device_slices.push(s.clone());
        }
    }
    if slices.len() < all_for_pool.len() {
        let names: HashSet<&str> = slices.iter().map(|s| slice_name(s)).collect();
        for s in all_for_pool {
            if names.contains(slice_name(s)) {
                continue;
            }
            if features.partitionable_devices && has_shared_counters(s) {
                counter_slices.push(s.clone());
            } else {
                not_targeting.push(s.clone());
            }
        }
    }
    if let Err(reason) = validate_device_names(&device_slices) {
        return Pool::marked(id, false, Some(reason));
    }
    if !features.partitionable_devices {
        return Pool {
            slices_targeting_node: device_slices,
            ..Pool::marked(id, false, None)
        };
    }
    let counter_sets = match counter_sets(&counter_slices) {
        Ok(c) => c,
        Err(reason) => return Pool::marked(id, false, Some(reason)),
    };
    for group in [&device_slices, &not_targeting] {
        if let Err(reason) = validate_counter_consumption(&counter_sets, group) {
            return Pool::marked(id, false, Some(reason));
        }
    }
    Pool {
        id,
        incomplete: false,
        invalid: false,
        invalid_reason: String::new(),
        slices_targeting_node: device_slices,
        slices_not_targeting_node: not_targeting,
        counter_sets,
    }
}

fn counter_sets(slices: &[Arc<ResourceSlice>]) -> Result<BTreeMap<String, CounterSet>, String> {
    let mut out = BTreeMap::new();
    for s in slices {
        for set in s.spec.shared_counters.iter().flatten() {
            if out.contains_key(&set.name) {
                return Err(format!("duplicate counter set name {}", set.name));
            }
            out.insert(set.name.clone(), set.clone());
        }
    }
    Ok(out)
}

fn validate_device_names(slices: &[Arc<ResourceSlice>]) -> Result<(), String> {
    let mut names = HashSet::new();
    for s in slices {
        for d in devices(s) {
            if !names.insert(d.name.as_str()) {
                return Err(format!("duplicate device name {}", d.name));
            }
        }
    }
    Ok(())
}

fn validate_counter_consumption(
    sets: &BTreeMap<String, CounterSet>,
    slices: &[Arc<ResourceSlice>],
) -> Result<(), String> {
    for s in slices {
        for d in devices(s) {
            for consumption in d.consumes_counters.iter().flatten() {
                let Some(set) = sets.get(&consumption.counter_set) else {
                    return Err(format!("counter set {} not found", consumption.counter_set));
                };
                for name in consumption.counters.keys() {
                    if !set.counters.contains_key(name) {
                        return Err(format!(
                            "counter {name} not found in counter set {}",
                            set.name
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

fn pool_has_binding_conditions(pool: &Pool) -> bool {
    pool.slices_targeting_node
        .iter()
        .any(|s| devices(s).iter().any(|d| d.binding_conditions.is_some()))
}
