//! A pod's ResourceClaims as a leaf will hold them once pod sync has copied what they
//! come from, so the leaf check can run DynamicResources on the leaf's own nodes,
//! ResourceSlices and allocated claims: a claim from a template will be made there by the
//! leaf's claim controller from the template's copy (the same spec as the host's claim
//! from it), a named claim is the leaf's when pod sync copied it already, else the host's
//! as its copy will be (unallocated). A named claim the host allocated holds host devices
//! and is not copied: the pod cannot go to a leaf.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::dra_state::{GivenClaims, ResourceClaims, allocation_of, claim_name};
use crate::leaf::cycle::{LeafDeviceChoice, LeafDevices};
use crate::plugins::dynamic_resources;

/// Why the pod's claims cannot be judged in the leaf, in the words the leaf check reports.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LeafClaimError {
    /// The host's tracker lacks a claim the pod names: DynamicResources' PreEnqueue and
    /// PreFilter on the host say so first; this is only for a claim deleted in between.
    #[error("{0}")]
    Unknown(String),
    #[error(
        "resource claim {0} is allocated in the host cluster: its devices cannot be used from a leaf"
    )]
    AllocatedInHost(String),
}

/// The devices the check's DynamicResources allocated on leaf node `node`.
pub(crate) fn chosen(state: &crate::framework::CycleState, node: &str) -> LeafDeviceChoice {
    let claims = dynamic_resources::allocated_on(state, node);
    LeafDeviceChoice {
        said: dynamic_resources::devices_of(&claims),
        claims,
    }
}

/// Whether the pod asks for any ResourceClaim.
pub(crate) fn has_claims(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .is_some_and(|c| !c.is_empty())
}

/// The unallocated claim the leaf will have for `from`: its spec, its name, a UID of its
/// own (the allocator tells claims apart by UID), no status and no owner.
fn as_copied(from: &ResourceClaim, name: &str, namespace: &str) -> Arc<ResourceClaim> {
    Arc::new(ResourceClaim {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            uid: Some(format!(
                "leaf-copy-of-{}",
                from.metadata.uid.as_deref().unwrap_or(name)
            )),
            ..Default::default()
        },
        spec: from.spec.clone(),
        status: None,
    })
}

/// The claims host pod `pod` will have in the leaf, in `spec.resourceClaims` order, and
/// the leaf's claims holding its devices.
pub(crate) fn given_claims(
    host: &ResourceClaims,
    pod: &Pod,
    leaf: &LeafDevices,
) -> Result<GivenClaims, LeafClaimError> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let mut claims = Vec::new();
    for pc in (pod.spec.as_ref())
        .and_then(|s| s.resource_claims.as_ref())
        .into_iter()
        .flatten()
    {
        let (name, _) = claim_name(pod, pc).map_err(LeafClaimError::Unknown)?;
        let Some(name) = name else {
            continue;
        };
        let key = format!("{namespace}/{name}");
        if let Some(named) = &pc.resource_claim_name
            && let Ok(copied) = leaf.claims.get(namespace, named)
        {
            claims.push(copied);
            continue;
        }
        let on_host = host
            .get(namespace, &name)
            .map_err(|e| LeafClaimError::Unknown(e.to_string()))?;
        if pc.resource_claim_name.is_some() && allocation_of(&on_host).is_some() {
            return Err(LeafClaimError::AllocatedInHost(key));
        }
        // A claim from a template: the host's claim was made from the same template, so
        // it asks for what the leaf's will (and whatever the host did with it does not
        // matter there).
        claims.push(as_copied(&on_host, &name, namespace));
    }
    Ok(GivenClaims {
        claims,
        held: leaf.claims.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(name: &str, model: &str, allocated: bool) -> Arc<ResourceClaim> {
        let mut c = json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                "resourceVersion": "5"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.example.com", "selectors": [{"cel": {
                    "expression": format!("device.attributes[\"gpu.example.com\"].model == {model:?}")}}]}}]}}
        });
        if allocated {
            c["status"] = json!({"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": "gpu.example.com", "pool": "h1", "device": "gpu-0"}]}}});
        }
        Arc::new(serde_json::from_value(c).expect("claim"))
    }

    fn pod(claims: serde_json::Value, statuses: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "uid-p"},
            "spec": {"containers": [{"name": "c", "image": "i"}], "resourceClaims": claims},
            "status": {"resourceClaimStatuses": statuses}
        }))
        .expect("pod")
    }

    #[test]
    fn a_template_claim_is_judged_as_the_leafs_fresh_claim_from_the_same_spec() {
        let host = ResourceClaims::new();
        // Allocated on a host node (say, by a first attempt there): the leaf's is new.
        host.apply(claim("p-gpu-x1", "a100", true));
        let p = pod(
            json!([{"name": "gpu", "resourceClaimTemplateName": "t"}]),
            json!([{"name": "gpu", "resourceClaimName": "p-gpu-x1"}]),
        );
        let given = given_claims(&host, &p, &LeafDevices::default()).expect("given");
        assert_eq!(given.claims.len(), 1);
        let c = &given.claims[0];
        assert!(c.status.is_none(), "judged unallocated");
        assert_eq!(c.spec, host.get("default", "p-gpu-x1").expect("host").spec);
        assert_ne!(c.metadata.uid.as_deref(), Some("uid-p-gpu-x1"));
    }

    #[test]
    fn a_named_claim_is_the_leafs_copy_else_the_hosts_unless_allocated_there() {
        let host = ResourceClaims::new();
        host.apply(claim("shared", "a100", false));
        let p = pod(
            json!([{"name": "gpu", "resourceClaimName": "shared"}]),
            json!([]),
        );
        let leaf = LeafDevices::default();
        let given = given_claims(&host, &p, &leaf).expect("given");
        assert_eq!(given.claims[0].spec, claim("shared", "a100", false).spec);
        // Copied and allocated in the leaf: the leaf's, as it is.
        leaf.claims.apply(claim("shared", "t4", true));
        let given = given_claims(&host, &p, &leaf).expect("given");
        assert!(allocation_of(&given.claims[0]).is_some());
        // Allocated in the host and not in the leaf: refused.
        host.apply(claim("host-only", "a100", true));
        let q = pod(
            json!([{"name": "gpu", "resourceClaimName": "host-only"}]),
            json!([]),
        );
        assert_eq!(
            given_claims(&host, &q, &leaf).err(),
            Some(LeafClaimError::AllocatedInHost("default/host-only".into()))
        );
    }

    #[test]
    fn a_template_that_generated_no_claim_is_left_out_and_one_not_made_yet_is_an_error() {
        let host = ResourceClaims::new();
        let none = pod(
            json!([{"name": "gpu", "resourceClaimTemplateName": "t"}]),
            json!([{"name": "gpu"}]),
        );
        let given = given_claims(&host, &none, &LeafDevices::default()).expect("given");
        assert!(given.claims.is_empty());
        let waiting = pod(
            json!([{"name": "gpu", "resourceClaimTemplateName": "t"}]),
            json!([]),
        );
        assert!(matches!(
            given_claims(&host, &waiting, &LeafDevices::default()),
            Err(LeafClaimError::Unknown(_))
        ));
    }
}
