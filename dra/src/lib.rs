//! kube-scheduler's structured-parameters allocator for Dynamic Resource Allocation
//! (k8s.io/dynamic-resource-allocation/structured, the "incubating" variant that v1.37's
//! default feature gates choose), without I/O: given the DeviceClasses, ResourceSlices and
//! what is already allocated, which devices a pod's ResourceClaims get on one node.

mod allocator;
mod capacity;
pub mod cel;
mod constraints;
mod error;
mod node_match;
mod pools;
pub mod quantity;
mod request;
mod result;
mod state;
mod taints;

pub use allocator::Allocator;
pub use cel::CelCache;
pub use error::AllocateError;
pub use state::{AllocatedState, SharedDeviceId};

/// Which v1.37 features are on (kube's `structured.Features`); Default = v1.37's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    pub admin_access: bool,
    pub prioritized_list: bool,
    pub partitionable_devices: bool,
    pub device_taints: bool,
    /// DRADeviceBindingConditions (with DRAResourceClaimDeviceStatus, kube's
    /// `DeviceBindingAndStatus`).
    pub device_binding_conditions: bool,
    pub consumable_capacity: bool,
    pub device_status: bool,
    /// DRAFractionalCapacityRange: capacity request policies in milli-units. Beta in v1.37
    /// but on by default only with --min-compatibility-version=1.37, so off by default.
    pub fractional_capacity_range: bool,
}

impl Default for Features {
    fn default() -> Self {
        Features {
            admin_access: true,
            prioritized_list: true,
            partitionable_devices: true,
            device_taints: true,
            device_binding_conditions: true,
            consumable_capacity: true,
            device_status: true,
            fractional_capacity_range: false,
        }
    }
}

impl Features {
    fn binding_and_status(&self) -> bool {
        self.device_binding_conditions && self.device_status
    }
}

/// A device's identity (kube's `DeviceID`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId {
    pub driver: String,
    pub pool: String,
    pub device: String,
}

impl DeviceId {
    pub fn new(
        driver: impl Into<String>,
        pool: impl Into<String>,
        device: impl Into<String>,
    ) -> Self {
        DeviceId {
            driver: driver.into(),
            pool: pool.into(),
            device: device.into(),
        }
    }
}

impl std::fmt::Display for DeviceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.driver, self.pool, self.device)
    }
}
