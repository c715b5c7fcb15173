//! Extended resources backed by DRA (kube's `extendeddynamicresources.go`, feature
//! DRAExtendedResource, on in v1.37). A pod's plain extended-resource request
//! (`example.com/gpu: 1`) that a DeviceClass serves is met, on a node whose allocatable
//! lacks that resource, by devices the scheduler allocates for a claim it makes itself:
//! PreFilter starts an in-memory claim without requests (kube's `<extended-resources>`,
//! never a valid name, with a temporary UID for the in-flight set); Filter gives it, per
//! node, one `exactly` request per container and resource (`container-<i>-request-<j>`)
//! and allocates it with the pod's other claims; Reserve puts that allocation in flight;
//! PreBind creates the claim (generateName `<pod>-extended-resources-`, controlled by the
//! pod, annotated), adds the finalizer, writes allocation and reservation with a status
//! update and patches the pod's `status.extendedResourceClaimStatus`; Unreserve deletes
//! a claim it created. A claim of an earlier cycle (found by annotation and owner) is
//! stale: Filter refuses every node and PostFilter deletes it, so the retry starts anew.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, ContainerExtendedResourceRequest, Pod};
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceClaim, DeviceRequest, ExactDeviceRequest, ResourceClaim,
    ResourceClaimSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::dra_state::{
    DeviceObjects, EXTENDED_RESOURCE_CLAIM_ANNOTATION, ResourceClaims,
    is_dra_extended_resource_name,
};
use crate::framework::Status;
use crate::snapshot::{NodeInfo, PodInfo};

/// kube's `specialClaimInMemName`.
pub(super) const IN_MEMORY_NAME: &str = "<extended-resources>";
pub(super) const REASON_STALE: &str = "cannot schedule extended resource claim";
pub(super) const REASON_CANNOT_FIT: &str = "cannot fit resource";
pub(super) const REASON_DELETED: &str = "deletion of ResourceClaim completed";

/// The pod's extended-resource claim for this cycle (kube's `draExtendedResource` and the
/// claim store's last claim).
#[derive(Debug, Clone)]
pub(super) struct Extended {
    /// The in-memory claim, or the one an earlier cycle created (stale).
    pub(super) claim: Arc<ResourceClaim>,
    /// Every requested scalar resource of the pod, as kube's `podScalarResources`.
    pub(super) requests: BTreeMap<String, i64>,
    /// The class serving each requested resource that one serves.
    pub(super) classes: BTreeMap<String, String>,
}

impl Extended {
    /// Created by an earlier cycle: it has a real name.
    pub(super) fn is_stale(&self) -> bool {
        self.claim.metadata.name.as_deref() != Some(IN_MEMORY_NAME)
    }

    pub(super) fn uid(&self) -> &str {
        self.claim.metadata.uid.as_deref().unwrap_or_default()
    }
}

/// What Filter made for one node: the claim with its requests, the pod's mappings of
/// container and resource to request, and the allocation (set once allocated).
#[derive(Debug, Clone)]
pub(super) struct NodeExtended {
    pub(super) claim: ResourceClaim,
    pub(super) mappings: Vec<ContainerExtendedResourceRequest>,
    pub(super) allocation: Option<AllocationResult>,
}

/// kube's `findExtendedResourceClaim`: annotated, and controlled by the pod.
fn is_extended_claim_of(pod: &Pod, claim: &ResourceClaim) -> bool {
    let annotated = (claim.metadata.annotations.as_ref())
        .and_then(|a| a.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION))
        .is_some_and(|v| v == "true");
    annotated
        && claim.metadata.owner_references.iter().flatten().any(|r| {
            Some(&r.name) == pod.metadata.name.as_ref()
                && r.controller == Some(true)
                && Some(&r.uid) == pod.metadata.uid.as_ref()
        })
}

/// A random version-4 UUID, for the in-memory claim's temporary UID.
fn temporary_uid() -> String {
    let v: u128 = rand::random();
    let v = (v & !(0xf_u128 << 76) | (0x4_u128 << 76)) & !(0x3_u128 << 62) | (0x2_u128 << 62);
    let h = format!("{v:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// kube's `preFilterExtendedResources`: None when no requested resource is served by a
/// class; else the claim of an earlier cycle, or a new in-memory one.
pub(super) fn pre_filter(
    pod: &PodInfo,
    devices: &DeviceObjects,
    claims: &ResourceClaims,
) -> Option<Extended> {
    let classes: BTreeMap<String, String> = (pod.requests.scalar.iter())
        .filter(|(name, want)| **want != 0 && is_dra_extended_resource_name(name))
        .filter_map(|(name, _)| {
            let class = devices.class_for_extended_resource(name)?;
            Some((
                name.clone(),
                class.metadata.name.clone().unwrap_or_default(),
            ))
        })
        .collect();
    if classes.is_empty() {
        return None;
    }
    let object = pod.object();
    let claim = match claims.find(|c| is_extended_claim_of(&object, c)) {
        Some(c) => c,
        None => Arc::new(in_memory_claim(&object)),
    };
    Some(Extended {
        claim,
        requests: pod.requests.scalar.clone(),
        classes,
    })
}

fn in_memory_claim(pod: &Pod) -> ResourceClaim {
    let name = pod.metadata.name.clone().unwrap_or_default();
    ResourceClaim {
        metadata: ObjectMeta {
            namespace: pod.metadata.namespace.clone(),
            name: Some(IN_MEMORY_NAME.into()),
            uid: Some(temporary_uid()),
            generate_name: Some(format!("{name}-extended-resources-")),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name,
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                ..Default::default()
            }]),
            annotations: Some(BTreeMap::from([(
                EXTENDED_RESOURCE_CLAIM_ANNOTATION.to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(ResourceClaimSpec::default()),
        status: None,
    }
}

fn has_requests(claim: &ResourceClaim) -> bool {
    (claim.spec.as_ref())
        .and_then(|s| s.devices.as_ref())
        .is_some_and(|d| d.requests.is_some())
}

/// kube's `filterExtendedResources`: None when the node's device plugins serve every
/// requested resource (NodeResourcesFit checks those); else the claim for this node.
pub(super) fn filter(
    ext: &Extended,
    pod: &PodInfo,
    node: &NodeInfo,
) -> Result<Option<NodeExtended>, Status> {
    // Only a claim an earlier cycle wrote has requests; whatever it holds may no longer
    // be valid, so it is deleted in PostFilter rather than checked.
    if ext.is_stale() && has_requests(&ext.claim) {
        tracing::debug!(pod = %pod.key, node = %node.name, "pod unschedulable: {REASON_STALE}");
        return Err(Status::unresolvable(REASON_STALE));
    }
    let mut needed = BTreeMap::new();
    for (name, &want) in &ext.requests {
        if !is_dra_extended_resource_name(name) || want == 0 {
            continue;
        }
        let allocatable = node.allocatable.scalar.get(name);
        let backed = ext.classes.contains_key(name);
        if backed && allocatable.copied().unwrap_or(0) == 0 {
            needed.insert(name.clone(), want);
        } else if allocatable.is_none() {
            tracing::debug!(pod = %pod.key, node = %node.name, resource = %name, "pod unschedulable: {REASON_CANNOT_FIT}");
            return Err(Status::unresolvable(REASON_CANNOT_FIT));
        }
    }
    if needed.is_empty() || ext.is_stale() {
        return Ok(None);
    }
    let (requests, mappings) = requests_and_mappings(&pod.object(), &needed, &ext.classes);
    let mut claim = (*ext.claim).clone();
    claim
        .spec
        .get_or_insert_default()
        .devices
        .get_or_insert_with(DeviceClaim::default)
        .requests = Some(requests);
    Ok(Some(NodeExtended {
        claim,
        mappings,
        allocation: None,
    }))
}

/// A container's whole-unit request of `resource`, as `Quantity.AsInt64`: None when it
/// has none, or one that is not a whole number.
fn container_request(container: &Container, resource: &str) -> Option<i64> {
    let q = container
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get(resource)?;
    let q = mcsched_shared::quantity::Quantity::parse(&q.0).ok()?;
    let milli = q.milli_value();
    (milli % 1000 == 0).then_some(milli / 1000)
}

/// kube's `createResourceRequestAndMappings`: container `index`'s request of `resource`,
/// less what the later long-lived containers' `reusable` requests already give it (an
/// init container runs before them and may use their devices).
fn request_and_mappings(
    index: usize,
    container: &Container,
    resource: &str,
    class: &str,
    reusable: &[Option<DeviceRequest>],
) -> (Option<DeviceRequest>, Vec<ContainerExtendedResourceRequest>) {
    let Some(want) = container_request(container, resource).filter(|w| *w != 0) else {
        return (None, Vec::new());
    };
    let mapping = |request: &str| ContainerExtendedResourceRequest {
        container_name: container.name.clone(),
        resource_name: resource.to_string(),
        request_name: request.to_string(),
    };
    let mut mappings = Vec::new();
    let mut sum = 0;
    for r in reusable.iter().flatten() {
        sum += r.exactly.as_ref().and_then(|e| e.count).unwrap_or(0);
        mappings.push(mapping(&r.name));
        if sum >= want {
            return (None, mappings);
        }
    }
    // The request is named by the resource's place among the container's requests,
    // sorted (BTreeMap keys are).
    let position = (container.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.keys().position(|k| k == resource))
        .unwrap_or(0);
    let name = format!("container-{index}-request-{position}");
    let request = DeviceRequest {
        name: name.clone(),
        exactly: Some(ExactDeviceRequest {
            device_class_name: class.to_string(),
            allocation_mode: Some("ExactCount".into()),
            count: Some(want - sum),
            ..Default::default()
        }),
        ..Default::default()
    };
    mappings.push(mapping(&name));
    (Some(request), mappings)
}

/// kube's `createRequestsAndMappings`: per resource (sorted), a request for each
/// long-lived container (regular and sidecar), and one for the largest short-lived init
/// container, which the others share; requests sorted by name.
pub(super) fn requests_and_mappings(
    pod: &Pod,
    needed: &BTreeMap<String, i64>,
    classes: &BTreeMap<String, String>,
) -> (Vec<DeviceRequest>, Vec<ContainerExtendedResourceRequest>) {
    let spec = pod.spec.as_ref();
    let inits = spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default();
    let containers: Vec<&Container> = inits
        .iter()
        .chain(spec.map(|s| s.containers.as_slice()).unwrap_or_default())
        .collect();
    let short_lived =
        |i: usize| i < inits.len() && containers[i].restart_policy.as_deref() != Some("Always");
    let mut requests = Vec::new();
    let mut mappings = Vec::new();
    for resource in needed.keys() {
        let Some(class) = classes.get(resource) else {
            continue;
        };
        let mut long_lived: Vec<Option<DeviceRequest>> = vec![None; containers.len()];
        let mut long_mappings = Vec::new();
        for (i, c) in containers
            .iter()
            .enumerate()
            .filter(|(i, _)| !short_lived(*i))
        {
            let (r, m) = request_and_mappings(i, c, resource, class, &[]);
            long_lived[i] = r;
            long_mappings.extend(m);
        }
        let mut largest: Option<DeviceRequest> = None;
        let mut short_names = BTreeSet::new();
        let mut short_mappings = Vec::new();
        for (i, c) in containers
            .iter()
            .enumerate()
            .filter(|(i, _)| short_lived(*i))
        {
            let (r, m) = request_and_mappings(i, c, resource, class, &long_lived[i..]);
            if let Some(r) = r {
                short_names.insert(r.name.clone());
                let count = |r: &DeviceRequest| r.exactly.as_ref().and_then(|e| e.count);
                if largest.as_ref().is_none_or(|l| count(l) < count(&r)) {
                    largest = Some(r);
                }
            }
            short_mappings.extend(m);
        }
        if let Some(l) = &largest
            && short_names.len() > 1
        {
            short_names.remove(&l.name);
            for m in short_mappings.iter_mut() {
                if short_names.contains(&m.request_name) {
                    m.request_name = l.name.clone();
                }
            }
        }
        requests.extend(largest);
        requests.extend(long_lived.into_iter().flatten());
        mappings.extend(long_mappings);
        mappings.extend(short_mappings);
    }
    requests.sort_by(|a, b| a.name.cmp(&b.name));
    (requests, mappings)
}
