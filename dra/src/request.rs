//! A request or one of its subrequests, read alike (kube's requestAccessor).

use k8s_openapi::api::resource::v1::{
    CapacityRequirements, DeviceRequest, DeviceSelector, DeviceSubRequest, DeviceToleration,
};

#[derive(Clone, Copy, Debug)]
pub enum RequestRef<'a> {
    Exact(&'a DeviceRequest),
    Sub(&'a DeviceSubRequest),
}

impl<'a> RequestRef<'a> {
    pub fn name(&self) -> &'a str {
        match self {
            RequestRef::Exact(r) => &r.name,
            RequestRef::Sub(s) => &s.name,
        }
    }

    pub fn device_class_name(&self) -> &'a str {
        match self {
            RequestRef::Exact(r) => r
                .exactly
                .as_ref()
                .map(|e| e.device_class_name.as_str())
                .unwrap_or_default(),
            RequestRef::Sub(s) => &s.device_class_name,
        }
    }

    pub fn allocation_mode(&self) -> &'a str {
        match self {
            RequestRef::Exact(r) => r
                .exactly
                .as_ref()
                .and_then(|e| e.allocation_mode.as_deref())
                .unwrap_or_default(),
            RequestRef::Sub(s) => s.allocation_mode.as_deref().unwrap_or_default(),
        }
    }

    /// The API server defaults the count of ExactCount to 1.
    pub fn count(&self) -> i64 {
        match self {
            RequestRef::Exact(r) => r.exactly.as_ref().and_then(|e| e.count).unwrap_or(1),
            RequestRef::Sub(s) => s.count.unwrap_or(1),
        }
    }

    pub fn admin_access(&self) -> bool {
        match self {
            RequestRef::Exact(r) => r
                .exactly
                .as_ref()
                .and_then(|e| e.admin_access)
                .unwrap_or(false),
            RequestRef::Sub(_) => false,
        }
    }

    pub fn has_admin_access(&self) -> bool {
        match self {
            RequestRef::Exact(r) => r.exactly.as_ref().is_some_and(|e| e.admin_access.is_some()),
            RequestRef::Sub(_) => false,
        }
    }

    pub fn selectors(&self) -> &'a [DeviceSelector] {
        match self {
            RequestRef::Exact(r) => r
                .exactly
                .as_ref()
                .and_then(|e| e.selectors.as_deref())
                .unwrap_or_default(),
            RequestRef::Sub(s) => s.selectors.as_deref().unwrap_or_default(),
        }
    }

    pub fn tolerations(&self) -> &'a [DeviceToleration] {
        match self {
            RequestRef::Exact(r) => r
                .exactly
                .as_ref()
                .and_then(|e| e.tolerations.as_deref())
                .unwrap_or_default(),
            RequestRef::Sub(s) => s.tolerations.as_deref().unwrap_or_default(),
        }
    }

    pub fn capacities(&self) -> Option<&'a CapacityRequirements> {
        match self {
            RequestRef::Exact(r) => r.exactly.as_ref().and_then(|e| e.capacity.as_ref()),
            RequestRef::Sub(s) => s.capacity.as_ref(),
        }
    }

    pub fn has_derived_attributes(&self) -> bool {
        match self {
            RequestRef::Exact(r) => r.exactly.as_ref().is_some_and(|e| {
                !e.derived_attributes
                    .as_deref()
                    .unwrap_or_default()
                    .is_empty()
            }),
            RequestRef::Sub(s) => !s
                .derived_attributes
                .as_deref()
                .unwrap_or_default()
                .is_empty(),
        }
    }
}
