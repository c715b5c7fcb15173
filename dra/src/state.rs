//! What is already in use (kube's schedulerapi.AllocatedState).

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::resource::v1::AllocationResult;

use crate::DeviceId;
use crate::quantity::Quantity;

/// One share of a device that may be allocated more than once (kube's `SharedDeviceID`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SharedDeviceId {
    pub device: DeviceId,
    pub share_id: String,
}

/// Capacity consumed per capacity name (kube's `ConsumedCapacity`).
pub type ConsumedCapacity = BTreeMap<String, Quantity>;

/// What is already in use: devices of allocated or in-flight claims (kube's `AllocatedState`).
#[derive(Clone, Debug, Default)]
pub struct AllocatedState {
    pub allocated_devices: HashSet<DeviceId>,
    pub allocated_shared_device_ids: HashSet<SharedDeviceId>,
    pub aggregated_capacity: HashMap<DeviceId, ConsumedCapacity>,
}

impl AllocatedState {
    /// Adds what one claim's allocation uses (for claims allocated in the API or assumed in
    /// memory), as kube-scheduler's foreachAllocatedDevice: admin-access results use
    /// nothing; results with a share ID use a share and their consumed capacity; others
    /// the whole device. A consumed capacity that does not parse counts as nothing.
    pub fn add_allocation(&mut self, allocation: &AllocationResult) {
        let results = allocation
            .devices
            .as_ref()
            .and_then(|d| d.results.as_deref())
            .unwrap_or_default();
        for r in results {
            if r.admin_access == Some(true) {
                continue;
            }
            let id = DeviceId::new(&r.driver, &r.pool, &r.device);
            if let Some(share) = &r.share_id {
                if let Some(consumed) = &r.consumed_capacity {
                    let entry = self.aggregated_capacity.entry(id.clone()).or_default();
                    for (name, q) in consumed {
                        let Ok(q) = Quantity::from_api(q) else {
                            tracing::warn!(device = %id, capacity = %name, "consumed capacity does not parse");
                            continue;
                        };
                        let sum = entry
                            .get(name)
                            .copied()
                            .unwrap_or(Quantity::ZERO)
                            .saturating_add(q);
                        entry.insert(name.clone(), sum);
                    }
                }
                self.allocated_shared_device_ids.insert(SharedDeviceId {
                    device: id,
                    share_id: share.clone(),
                });
                continue;
            }
            self.allocated_devices.insert(id);
        }
    }

    /// kube's internal.IsDeviceAllocated.
    pub fn is_device_allocated(&self, id: &DeviceId) -> bool {
        self.allocated_devices.contains(id)
            || self.aggregated_capacity.contains_key(id)
            || self
                .allocated_shared_device_ids
                .iter()
                .any(|s| &s.device == id)
    }
}
