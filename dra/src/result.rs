//! The AllocationResult of each claim once the search found devices (the end of kube's
//! Allocate): device results, class and claim configuration, node selector.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceAllocationConfiguration, DeviceAllocationResult,
    DeviceRequestAllocationResult,
};

use crate::allocator::{DeviceResult, Search, claim_devices, claim_requests};
use crate::error::AllocateError;
use crate::request::RequestRef;

impl Search<'_> {
    pub(crate) fn build_results(
        &self,
        node_name: &str,
    ) -> Result<Vec<AllocationResult>, AllocateError> {
        let mut out = Vec::with_capacity(self.claims.len());
        for (ci, claim) in self.claims.iter().enumerate() {
            let requests = claim_requests(claim);
            let mut results = Vec::new();
            for d in &self.result[ci] {
                let tolerations = lookup_request(requests, d)
                    .map(|r| r.tolerations().to_vec())
                    .filter(|t| !t.is_empty());
                let (bc, bfc) = if self.a_features_binding() {
                    let dev = d.device.device();
                    (
                        dev.binding_conditions.clone(),
                        dev.binding_failure_conditions.clone(),
                    )
                } else {
                    (None, None)
                };
                results.push(DeviceRequestAllocationResult {
                    request: d.request_name(),
                    driver: d.device.id.driver.clone(),
                    pool: d.device.id.pool.clone(),
                    device: d.device.id.device.clone(),
                    admin_access: d.admin_access,
                    tolerations,
                    share_id: d.share_id.clone(),
                    consumed_capacity: d.consumed_capacity.as_ref().map(|c| {
                        c.iter()
                            .map(|(k, v)| (k.clone(), v.to_api()))
                            .collect::<BTreeMap<_, _>>()
                    }),
                    binding_conditions: bc,
                    binding_failure_conditions: bfc,
                    ..Default::default()
                });
            }

            let mut config: Vec<DeviceAllocationConfiguration> = Vec::new();
            let mut class_ranges: HashMap<String, (usize, usize)> = HashMap::new();
            let selected = |ri: usize| -> Option<&crate::allocator::RequestData<'_>> {
                let d = self.request_data.get(&(ci, ri, 0))?;
                if d.parent.is_some() {
                    self.request_data.get(&(ci, ri, d.selected_sub_request))
                } else {
                    Some(d)
                }
            };
            for ri in 0..requests.len() {
                let Some(data) = selected(ri) else { continue };
                let Some(class) = &data.class else { continue };
                let class_name = class.metadata.name.clone().unwrap_or_default();
                if let Some((start, end)) = class_ranges.get(&class_name) {
                    for c in &mut config[*start..*end] {
                        c.requests
                            .get_or_insert_with(Vec::new)
                            .push(data.request_name());
                    }
                    continue;
                }
                let start = config.len();
                for c in class.spec.iter().flat_map(|s| s.config.iter().flatten()) {
                    config.push(DeviceAllocationConfiguration {
                        source: "FromClass".into(),
                        requests: Some(vec![data.request_name()]),
                        opaque: c.opaque.clone(),
                    });
                }
                class_ranges.insert(class_name, (start, config.len()));
            }
            let claim_config = claim_devices(claim)
                .and_then(|d| d.config.as_deref())
                .unwrap_or_default();
            let sub_name = |ri: usize| -> Option<String> {
                let d = self.request_data.get(&(ci, ri, 0))?;
                d.parent?;
                let sub = requests[ri]
                    .first_available
                    .as_deref()?
                    .get(d.selected_sub_request)?;
                Some(format!("{}/{}", requests[ri].name, sub.name))
            };
            for c in claim_config {
                let names = c.requests.as_deref().unwrap_or_default();
                let applies = names.is_empty()
                    || requests.iter().enumerate().any(|(ri, r)| {
                        names.contains(&r.name) || sub_name(ri).is_some_and(|s| names.contains(&s))
                    });
                if applies {
                    config.push(DeviceAllocationConfiguration {
                        source: "FromClaim".into(),
                        requests: c.requests.clone().filter(|r| !r.is_empty()),
                        opaque: c.opaque.clone(),
                    });
                }
            }
            // A configuration for every request says so with an empty list.
            for c in &mut config {
                let Some(names) = &c.requests else { continue };
                let all = requests.iter().enumerate().all(|(ri, r)| {
                    names.contains(&r.name) || sub_name(ri).is_some_and(|s| names.contains(&s))
                });
                if all {
                    c.requests = None;
                }
            }

            let node_selector = node_selector(&self.result[ci], node_name).map_err(|e| {
                AllocateError::Invalid(format!(
                    "create NodeSelector for claim {}: {e}",
                    claim.metadata.name.as_deref().unwrap_or_default()
                ))
            })?;
            out.push(AllocationResult {
                devices: Some(DeviceAllocationResult {
                    results: Some(results),
                    config: (!config.is_empty()).then_some(config),
                }),
                node_selector,
                allocation_timestamp: None,
            });
        }
        Ok(out)
    }

    fn a_features_binding(&self) -> bool {
        self.a.features_binding_and_status()
    }
}

fn lookup_request<'a>(
    requests: &'a [k8s_openapi::api::resource::v1::DeviceRequest],
    d: &DeviceResult,
) -> Option<RequestRef<'a>> {
    let name = d.parent_request.as_deref().unwrap_or(&d.request);
    let request = requests.iter().find(|r| r.name == name)?;
    if d.parent_request.is_none() {
        return Some(RequestRef::Exact(request));
    }
    request
        .first_available
        .iter()
        .flatten()
        .find(|s| s.name == d.request)
        .map(RequestRef::Sub)
}

/// kube's createNodeSelector: this node when any device is local to it or binds to it,
/// else the devices' node selectors merged into one term, else none.
fn node_selector(
    results: &[DeviceResult],
    node_name: &str,
) -> Result<Option<NodeSelector>, String> {
    let mut fields: Vec<NodeSelectorRequirement> = Vec::new();
    let mut exprs: Vec<NodeSelectorRequirement> = Vec::new();
    for r in results {
        let slice = &r.device.slice.spec;
        let dev = r.device.device();
        let (name, selector) = if slice.per_device_node_selection.unwrap_or(false) {
            (dev.node_name.as_ref(), dev.node_selector.as_ref())
        } else {
            (slice.node_name.as_ref(), slice.node_selector.as_ref())
        };
        if name.is_some() || dev.binds_to_node.unwrap_or(false) {
            return Ok(Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_fields: Some(vec![NodeSelectorRequirement {
                        key: "metadata.name".into(),
                        operator: "In".into(),
                        values: Some(vec![node_name.to_string()]),
                    }]),
                    match_expressions: None,
                }],
            }));
        }
        if let Some(sel) = selector {
            match sel.node_selector_terms.len() {
                0 => {}
                1 => {
                    let term = &sel.node_selector_terms[0];
                    add_new(
                        term.match_fields.as_deref().unwrap_or_default(),
                        &mut fields,
                    );
                    add_new(
                        term.match_expressions.as_deref().unwrap_or_default(),
                        &mut exprs,
                    );
                }
                n => {
                    return Err(format!(
                        "unsupported ResourceSlice.NodeSelector with {n} terms"
                    ));
                }
            }
        }
    }
    if fields.is_empty() && exprs.is_empty() {
        return Ok(None);
    }
    Ok(Some(NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_fields: (!fields.is_empty()).then_some(fields),
            match_expressions: (!exprs.is_empty()).then_some(exprs),
        }],
    }))
}

fn add_new(from: &[NodeSelectorRequirement], to: &mut Vec<NodeSelectorRequirement>) {
    for req in from {
        let values: HashSet<&String> = req.values.iter().flatten().collect();
        let present = to.iter().any(|e| {
            e.key == req.key
                && e.operator == req.operator
                && e.values.iter().flatten().collect::<HashSet<_>>() == values
        });
        if !present {
            to.push(req.clone());
        }
    }
}
