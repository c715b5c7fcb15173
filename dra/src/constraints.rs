//! Claim constraints across the devices of several requests (kube's
//! matchAttributeConstraint and distinctAttributeConstraint). Both are monotonic: once a
//! device is refused, adding more devices cannot make it acceptable.

use std::collections::HashSet;

use k8s_openapi::api::resource::v1::{Device, DeviceAttribute};

use crate::DeviceId;

pub enum Constraint {
    Match {
        requests: HashSet<String>,
        attribute: String,
        value: Option<DeviceAttribute>,
        num_devices: usize,
    },
    Distinct {
        requests: HashSet<String>,
        attribute: String,
        values: Vec<DeviceAttribute>,
    },
}

fn applies(requests: &HashSet<String>, request: &str, sub_request: Option<&str>) -> bool {
    if requests.is_empty() {
        return true;
    }
    match sub_request {
        None => requests.contains(request),
        Some(sub) => requests.contains(request) || requests.contains(&format!("{request}/{sub}")),
    }
}

/// kube's lookupAttribute: the fully qualified name, or the bare id when the domain is the
/// device's driver.
pub fn lookup_attribute<'a>(
    device: &'a Device,
    id: &DeviceId,
    name: &str,
) -> Option<&'a DeviceAttribute> {
    let attributes = device.attributes.as_ref()?;
    if let Some(a) = attributes.get(name) {
        return Some(a);
    }
    let (domain, bare) = name.split_once('/')?;
    if domain != id.driver {
        return None;
    }
    attributes.get(bare)
}

/// Scalar values of the same type and value; lists and unknown types never match.
fn same_value(a: &DeviceAttribute, b: &DeviceAttribute) -> Option<bool> {
    if let Some(v) = &a.string {
        return Some(b.string.as_ref() == Some(v));
    }
    if let Some(v) = a.int {
        return Some(b.int == Some(v));
    }
    if let Some(v) = a.bool {
        return Some(b.bool == Some(v));
    }
    if let Some(v) = &a.version {
        return Some(b.version.as_ref() == Some(v));
    }
    None
}

impl Constraint {
    pub fn add(
        &mut self,
        request: &str,
        sub_request: Option<&str>,
        device: &Device,
        id: &DeviceId,
    ) -> bool {
        match self {
            Constraint::Match {
                requests,
                attribute,
                value,
                num_devices,
            } => {
                if !applies(requests, request, sub_request) {
                    return true;
                }
                let Some(attr) = lookup_attribute(device, id, attribute) else {
                    return false;
                };
                if *num_devices == 0 {
                    *value = Some(attr.clone());
                    *num_devices = 1;
                    return true;
                }
                let Some(first) = value.as_ref() else {
                    return false;
                };
                if same_value(attr, first) != Some(true) {
                    return false;
                }
                *num_devices += 1;
                true
            }
            Constraint::Distinct {
                requests,
                attribute,
                values,
            } => {
                if !applies(requests, request, sub_request) {
                    return true;
                }
                let Some(attr) = lookup_attribute(device, id, attribute) else {
                    return false;
                };
                for existing in values.iter() {
                    match same_value(attr, existing) {
                        Some(true) | None => return false,
                        Some(false) => {}
                    }
                }
                values.push(attr.clone());
                true
            }
        }
    }

    pub fn remove(&mut self, request: &str, sub_request: Option<&str>) {
        match self {
            Constraint::Match {
                requests,
                num_devices,
                ..
            } => {
                if applies(requests, request, sub_request) {
                    *num_devices = num_devices.saturating_sub(1);
                }
            }
            Constraint::Distinct {
                requests, values, ..
            } => {
                if applies(requests, request, sub_request) {
                    values.pop();
                }
            }
        }
    }
}
