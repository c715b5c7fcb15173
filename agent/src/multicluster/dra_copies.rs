//! The Dynamic Resource Allocation objects a pod's copy names in `spec.resourceClaims`,
//! which the copy keeps as it is: a ResourceClaimTemplate is copied as a ConfigMap is (the
//! leaf's claim controller makes the leaf pod's claim from it, and the leaf's scheduler
//! allocates that), and a named ResourceClaim only while the host has not allocated it. An
//! allocation names the host's devices and nodes, which mean nothing in the leaf; a claim
//! copied without it would be allocated again there while the host claim still holds the
//! host's devices, so an allocated claim is refused instead. Pure: `dependents` and
//! pod sync write what these build.

use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Why a host object a pod names is not copied into its leaf.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotCopied {
    #[error(
        "ResourceClaim {claim} is allocated in the host cluster: its devices are the host's, so it is not copied to the leaf (only an unallocated claim is, for the leaf's scheduler to allocate)"
    )]
    AllocatedInHost { claim: String },
}

/// The leaf's copy of host template `t`, under `meta` (pod sync's marks).
pub fn template_copy(meta: ObjectMeta, t: &ResourceClaimTemplate) -> ResourceClaimTemplate {
    ResourceClaimTemplate {
        metadata: meta,
        spec: t.spec.clone(),
    }
}

/// The leaf's copy of host claim `c`, under `meta`: its spec only (the leaf writes its own
/// status), and none while the host claim is allocated.
pub fn claim_copy(meta: ObjectMeta, c: &ResourceClaim) -> Result<ResourceClaim, NotCopied> {
    if mcsched_engine::dra_state::allocation_of(c).is_some() {
        return Err(NotCopied::AllocatedInHost {
            claim: format!(
                "{}/{}",
                c.metadata.namespace.as_deref().unwrap_or_default(),
                c.metadata.name.as_deref().unwrap_or_default()
            ),
        });
    }
    Ok(ResourceClaim {
        metadata: meta,
        spec: c.spec.clone(),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(status: serde_json::Value) -> ResourceClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "nic", "namespace": "shop", "uid": "host-uid",
                "resourceVersion": "7", "finalizers": ["resource.kubernetes.io/delete-protection"]},
            "spec": {"devices": {"requests": [{"name": "r",
                "exactly": {"deviceClassName": "nics"}}]}},
            "status": status
        }))
        .expect("claim")
    }

    fn marks() -> ObjectMeta {
        ObjectMeta {
            name: Some("nic".into()),
            namespace: Some("shop".into()),
            labels: Some([("mcsched.io/host-id".to_string(), "h1".to_string())].into()),
            ..Default::default()
        }
    }

    #[test]
    fn an_unallocated_claim_is_copied_spec_only_under_the_marks() {
        // Reserved for nobody, with no allocation: a status the leaf has no use for.
        let host = claim(json!({"reservedFor": []}));
        let copy = claim_copy(marks(), &host).expect("copied");
        assert_eq!(copy.spec, host.spec);
        assert_eq!(copy.status, None);
        assert_eq!(
            copy.metadata,
            marks(),
            "no finalizer, UID or version of the host's"
        );
    }

    #[test]
    fn an_allocated_claim_is_not_copied() {
        let host = claim(
            json!({"allocation": {"devices": {"results": [{"request": "r",
            "driver": "nic.example.com", "pool": "n1", "device": "nic-0"}]}}}),
        );
        let refused = claim_copy(marks(), &host).expect_err("allocated in the host");
        assert_eq!(
            refused,
            NotCopied::AllocatedInHost {
                claim: "shop/nic".into()
            }
        );
        assert!(
            refused
                .to_string()
                .contains("shop/nic is allocated in the host cluster"),
            "{refused}"
        );
    }

    #[test]
    fn a_template_is_copied_with_its_spec() {
        let host: ResourceClaimTemplate = serde_json::from_value(json!({
            "metadata": {"name": "one-gpu", "namespace": "shop", "uid": "t-uid"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu",
                "exactly": {"deviceClassName": "gpus"}}]}}}
        }))
        .expect("template");
        let copy = template_copy(marks(), &host);
        assert_eq!(copy.spec, host.spec);
        assert_eq!(copy.metadata, marks());
    }
}
