//! Every object of its namespace a pod makes the kubelet or the control plane read on its
//! behalf: what a leaf copy could reach in the leaf. Overrides are checked against it, so
//! a copy never names an object its host pod did not (a Secret of the leaf's owner, a
//! claim holding someone else's data).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Container, EnvFromSource, EnvVar, Pod, Volume};

/// The kind of a referenced object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    ConfigMap,
    Secret,
    PersistentVolumeClaim,
    ResourceClaim,
    ResourceClaimTemplate,
    ServiceAccount,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::ConfigMap => "ConfigMap",
            Kind::Secret => "Secret",
            Kind::PersistentVolumeClaim => "PersistentVolumeClaim",
            Kind::ResourceClaim => "ResourceClaim",
            Kind::ResourceClaimTemplate => "ResourceClaimTemplate",
            Kind::ServiceAccount => "ServiceAccount",
        }
    }
}

/// One referenced object of the pod's namespace, and where the pod names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Reference {
    pub kind: Kind,
    pub name: String,
}

/// The pod's references, wherever the pod spec can hold one (every volume plugin with a
/// secret reference included: a copy may carry any of them).
pub fn references(pod: &Pod) -> BTreeSet<Reference> {
    let mut out = BTreeSet::new();
    let Some(spec) = pod.spec.as_ref() else {
        return out;
    };
    let mut add = |kind: Kind, name: Option<&String>| {
        if let Some(n) = name.filter(|n| !n.is_empty()) {
            out.insert(Reference {
                kind,
                name: n.clone(),
            });
        }
    };
    for v in spec.volumes.iter().flatten() {
        volume(v, &mut add);
    }
    for s in spec.image_pull_secrets.iter().flatten() {
        add(Kind::Secret, Some(&s.name));
    }
    for c in spec.resource_claims.iter().flatten() {
        add(Kind::ResourceClaim, c.resource_claim_name.as_ref());
        add(
            Kind::ResourceClaimTemplate,
            c.resource_claim_template_name.as_ref(),
        );
    }
    // `default` counts too: a copy that names no account runs as it.
    let account = spec
        .service_account_name
        .as_ref()
        .or(spec.service_account.as_ref())
        .filter(|n| !n.is_empty())
        .cloned()
        .unwrap_or_else(|| "default".to_string());
    add(Kind::ServiceAccount, Some(&account));
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    for c in containers {
        container(c, &mut add);
    }
    for c in spec.ephemeral_containers.iter().flatten() {
        env(
            c.env.iter().flatten(),
            c.env_from.iter().flatten(),
            &mut add,
        );
    }
    out
}

fn container(c: &Container, add: &mut impl FnMut(Kind, Option<&String>)) {
    env(c.env.iter().flatten(), c.env_from.iter().flatten(), add);
}

fn env<'a>(
    vars: impl Iterator<Item = &'a EnvVar>,
    from: impl Iterator<Item = &'a EnvFromSource>,
    add: &mut impl FnMut(Kind, Option<&String>),
) {
    for e in vars {
        let Some(f) = e.value_from.as_ref() else {
            continue;
        };
        add(
            Kind::ConfigMap,
            f.config_map_key_ref.as_ref().map(|r| &r.name),
        );
        add(Kind::Secret, f.secret_key_ref.as_ref().map(|r| &r.name));
    }
    for f in from {
        add(Kind::ConfigMap, f.config_map_ref.as_ref().map(|r| &r.name));
        add(Kind::Secret, f.secret_ref.as_ref().map(|r| &r.name));
    }
}

fn volume(v: &Volume, add: &mut impl FnMut(Kind, Option<&String>)) {
    add(Kind::ConfigMap, v.config_map.as_ref().map(|c| &c.name));
    add(
        Kind::Secret,
        v.secret.as_ref().and_then(|s| s.secret_name.as_ref()),
    );
    add(
        Kind::PersistentVolumeClaim,
        v.persistent_volume_claim.as_ref().map(|c| &c.claim_name),
    );
    for s in v
        .projected
        .as_ref()
        .and_then(|p| p.sources.as_ref())
        .into_iter()
        .flatten()
    {
        add(Kind::ConfigMap, s.config_map.as_ref().map(|c| &c.name));
        add(Kind::Secret, s.secret.as_ref().map(|c| &c.name));
    }
    // The volume plugins that read a Secret of the pod's namespace for the kubelet.
    let secret_refs = [
        v.csi
            .as_ref()
            .and_then(|s| s.node_publish_secret_ref.as_ref())
            .map(|r| &r.name),
        v.cephfs
            .as_ref()
            .and_then(|s| s.secret_ref.as_ref())
            .map(|r| &r.name),
        v.rbd
            .as_ref()
            .and_then(|s| s.secret_ref.as_ref())
            .map(|r| &r.name),
        v.iscsi
            .as_ref()
            .and_then(|s| s.secret_ref.as_ref())
            .map(|r| &r.name),
        v.flex_volume
            .as_ref()
            .and_then(|s| s.secret_ref.as_ref())
            .map(|r| &r.name),
        v.azure_file.as_ref().map(|s| &s.secret_name),
        v.scale_io.as_ref().map(|s| &s.secret_ref.name),
        v.storageos
            .as_ref()
            .and_then(|s| s.secret_ref.as_ref())
            .map(|r| &r.name),
    ];
    for name in secret_refs {
        add(Kind::Secret, name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_place_a_pod_names_an_object() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {
                "serviceAccountName": "builder",
                "imagePullSecrets": [{"name": "pull"}],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu-t"}],
                "volumes": [
                    {"name": "a", "secret": {"secretName": "s1"}},
                    {"name": "b", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "c", "projected": {"sources": [{"configMap": {"name": "cm1"}}]}},
                    {"name": "d", "csi": {"driver": "x", "nodePublishSecretRef": {"name": "csi-s"}}},
                    {"name": "e", "azureFile": {"secretName": "az", "shareName": "x"}}],
                "containers": [{"name": "c", "envFrom": [{"secretRef": {"name": "env-s"}}],
                    "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm2", "key": "k"}}}]}]}
        }))
        .expect("pod");
        let got: Vec<String> = references(&pod)
            .into_iter()
            .map(|r| format!("{}/{}", r.kind.as_str(), r.name))
            .collect();
        assert_eq!(
            got,
            [
                "ConfigMap/cm1",
                "ConfigMap/cm2",
                "Secret/az",
                "Secret/csi-s",
                "Secret/env-s",
                "Secret/pull",
                "Secret/s1",
                "PersistentVolumeClaim/data",
                "ResourceClaimTemplate/gpu-t",
                "ServiceAccount/builder",
            ]
        );
    }
}
