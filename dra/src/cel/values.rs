//! The opaque CEL values Kubernetes adds to device selectors: `quantity` (apiserver's
//! cel.Quantity) and `semver` (apiserver's cel.Semver).

use std::cmp::Ordering;

use cel::objects::Opaque;

use crate::quantity::Quantity;

pub const QUANTITY_TYPE: &str = "kubernetes.Quantity";
pub const SEMVER_TYPE: &str = "kubernetes.Semver";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CelQuantity(pub Quantity);

impl Opaque for CelQuantity {
    fn runtime_type_name(&self) -> &str {
        QUANTITY_TYPE
    }
}

/// blang/semver's Version: equal and ordered by precedence (build metadata ignored).
#[derive(Debug, Clone)]
pub struct CelSemver(pub semver::Version);

impl PartialEq for CelSemver {
    fn eq(&self, other: &Self) -> bool {
        self.0.cmp_precedence(&other.0) == Ordering::Equal
    }
}
impl Eq for CelSemver {}

impl Opaque for CelSemver {
    fn runtime_type_name(&self) -> &str {
        SEMVER_TYPE
    }
}
