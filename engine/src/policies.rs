//! The PlacementPolicies and ClusterPlacementPolicies the agent watches, and which one a
//! pod falls under: the highest priority among those selecting it; at equal priority a
//! namespaced policy before a cluster-wide one, then by name.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use mcsched_shared::policy::{
    ClusterPlacementPolicy, Invalid, PlacementPolicy, PlacementPolicySpec,
};

use crate::change::Change;

/// One policy as the scheduler uses it.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// `PlacementPolicy shop/web` or `ClusterPlacementPolicy eu-only`.
    pub reference: String,
    /// Empty for a ClusterPlacementPolicy.
    pub namespace: String,
    pub name: String,
    pub generation: Option<i64>,
    pub spec: PlacementPolicySpec,
    /// What makes it unusable: its pods are kept Pending, never placed as if it did
    /// not exist.
    pub invalid: Option<Invalid>,
}

impl Policy {
    fn new(
        kind: &str,
        namespace: &str,
        name: &str,
        generation: Option<i64>,
        spec: PlacementPolicySpec,
    ) -> Self {
        let reference = if namespace.is_empty() {
            format!("{kind} {name}")
        } else {
            format!("{kind} {namespace}/{name}")
        };
        Policy {
            invalid: spec.validate().err(),
            reference,
            namespace: namespace.to_string(),
            name: name.to_string(),
            generation,
            spec,
        }
    }

    pub fn is_cluster_wide(&self) -> bool {
        self.namespace.is_empty()
    }

    /// The overrides that adapt its pods' leaf copies: none while it is invalid (its pods
    /// wait Pending then), or when it has none.
    pub fn overrides(&self) -> Option<&[mcsched_shared::overrides::ClusterOverride]> {
        (self.invalid.is_none() && !self.spec.overrides.is_empty())
            .then_some(self.spec.overrides.as_slice())
    }
}

/// Every policy, namespaced ones by namespace. Cloned per change (pointers).
#[derive(Debug, Clone, Default)]
pub struct PolicySet {
    namespaced: HashMap<String, BTreeMap<String, Arc<Policy>>>,
    cluster: BTreeMap<String, Arc<Policy>>,
}

/// The grant that lets the agent keep pod-deletion-cost on, and evict, the pods of
/// namespace `ns` (`agent_namespace`: where the agent's ServiceAccount lives).
pub fn placement_keeper_grant(ns: &str, agent_namespace: &str) -> String {
    format!(
        "kubectl create rolebinding mcsched-placement-keeper -n {ns} --clusterrole={} --serviceaccount={agent_namespace}:{}",
        mcsched_shared::manifests::placement_keeper_name(),
        mcsched_shared::keys::AGENT_NAME
    )
}

/// The kind of a pod's controller (`ReplicaSet`, `StatefulSet`, ...).
pub(crate) fn owner_kind(meta: &ObjectMeta) -> Option<&str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| r.kind.as_str())
}

impl PolicySet {
    pub fn is_empty(&self) -> bool {
        self.namespaced.is_empty() && self.cluster.is_empty()
    }

    pub fn apply_namespaced(&mut self, change: Change<PlacementPolicy>) {
        match change {
            Change::Apply(p, _) => {
                let ns = p.namespace().unwrap_or_default();
                let policy = Policy::new(
                    "PlacementPolicy",
                    &ns,
                    &p.name_any(),
                    p.metadata.generation,
                    p.spec.clone(),
                );
                self.namespaced
                    .entry(ns)
                    .or_default()
                    .insert(p.name_any(), Arc::new(policy));
            }
            Change::Delete(p) => {
                let ns = p.namespace().unwrap_or_default();
                if let Some(m) = self.namespaced.get_mut(&ns) {
                    m.remove(&p.name_any());
                    if m.is_empty() {
                        self.namespaced.remove(&ns);
                    }
                }
            }
        }
    }

    pub fn apply_cluster(&mut self, change: Change<ClusterPlacementPolicy>) {
        match change {
            Change::Apply(p, _) => {
                let policy = Policy::new(
                    "ClusterPlacementPolicy",
                    "",
                    &p.name_any(),
                    p.metadata.generation,
                    p.spec.policy.clone(),
                );
                self.cluster.insert(p.name_any(), Arc::new(policy));
            }
            Change::Delete(p) => {
                self.cluster.remove(&p.name_any());
            }
        }
    }

    /// Every policy: namespaced ones first.
    pub fn all(&self) -> impl Iterator<Item = &Arc<Policy>> {
        self.namespaced
            .values()
            .flat_map(|m| m.values())
            .chain(self.cluster.values())
    }

    /// The policy `pod` falls under, if any.
    pub fn for_pod(&self, meta: &ObjectMeta) -> Option<Arc<Policy>> {
        if self.is_empty() {
            return None;
        }
        let ns = meta.namespace.as_deref().unwrap_or_default();
        let empty = BTreeMap::new();
        let labels = meta.labels.as_ref().unwrap_or(&empty);
        let kind = owner_kind(meta);
        let namespaced = self.namespaced.get(ns).into_iter().flat_map(|m| m.values());
        // Ranked by priority, then namespaced first, then name (BTreeMap order).
        namespaced
            .map(|p| (p, 1))
            .chain(self.cluster.values().map(|p| (p, 0)))
            .filter(|(p, _)| p.spec.selects(labels, kind))
            .fold(None::<(&Arc<Policy>, i32)>, |best, (p, scope)| match best {
                Some((b, bs)) if (b.spec.priority, bs) >= (p.spec.priority, scope) => Some((b, bs)),
                _ => Some((p, scope)),
            })
            .map(|(p, _)| p.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn namespaced(name: &str, ns: &str, spec: serde_json::Value) -> Change<PlacementPolicy> {
        Change::Apply(
            Arc::new(
                serde_json::from_value(
                    json!({"metadata": {"name": name, "namespace": ns}, "spec": spec}),
                )
                .expect("policy"),
            ),
            false,
        )
    }

    fn cluster(name: &str, spec: serde_json::Value) -> Change<ClusterPlacementPolicy> {
        Change::Apply(
            Arc::new(
                serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec}))
                    .expect("policy"),
            ),
            false,
        )
    }

    fn pod(ns: &str, labels: serde_json::Value, owner: Option<&str>) -> Pod {
        let owners = owner.map(|k| json!([{"apiVersion": "apps/v1", "kind": k, "name": "o", "uid": "u", "controller": true}]));
        serde_json::from_value(json!({"metadata": {"name": "p", "namespace": ns, "labels": labels, "ownerReferences": owners}}))
            .expect("pod")
    }

    #[test]
    fn the_highest_priority_then_namespaced_then_name_wins() {
        let mut set = PolicySet::default();
        let web = json!({"app": "web"});
        assert_eq!(set.for_pod(&pod("shop", web.clone(), None).metadata), None);
        set.apply_cluster(cluster("everyone", json!({"podSelector": {}})));
        set.apply_namespaced(namespaced(
            "b-web",
            "shop",
            json!({"podSelector": {"matchLabels": {"app": "web"}}}),
        ));
        set.apply_namespaced(namespaced(
            "a-web",
            "shop",
            json!({"podSelector": {"matchLabels": {"app": "web"}}}),
        ));
        let chosen =
            |p: &Pod, set: &PolicySet| set.for_pod(&p.metadata).map(|p| p.reference.clone());
        let p = pod("shop", web.clone(), Some("ReplicaSet"));
        assert_eq!(
            chosen(&p, &set).as_deref(),
            Some("PlacementPolicy shop/a-web")
        );
        // Other namespaces and other labels: the cluster-wide policy.
        assert_eq!(
            chosen(&pod("other", web.clone(), None), &set).as_deref(),
            Some("ClusterPlacementPolicy everyone")
        );
        assert_eq!(
            chosen(&pod("shop", json!({"app": "db"}), None), &set).as_deref(),
            Some("ClusterPlacementPolicy everyone")
        );
        // A higher priority beats the namespaced one.
        set.apply_cluster(cluster(
            "urgent",
            json!({"podSelector": {}, "priority": 10, "ownerKinds": ["ReplicaSet"]}),
        ));
        assert_eq!(
            chosen(&p, &set).as_deref(),
            Some("ClusterPlacementPolicy urgent")
        );
        assert_eq!(
            chosen(&pod("shop", web.clone(), Some("StatefulSet")), &set).as_deref(),
            Some("PlacementPolicy shop/a-web")
        );
        set.apply_cluster(Change::Delete(Arc::new(
            serde_json::from_value(
                json!({"metadata": {"name": "urgent"}, "spec": {"podSelector": {}}}),
            )
            .unwrap(),
        )));
        assert_eq!(
            chosen(&p, &set).as_deref(),
            Some("PlacementPolicy shop/a-web")
        );
    }

    #[test]
    fn an_invalid_policy_is_kept_with_its_reason() {
        let mut set = PolicySet::default();
        set.apply_namespaced(namespaced(
            "bad",
            "shop",
            json!({"podSelector": {},
            "division": {"type": "Weighted", "weights": {"east": -2}}}),
        ));
        let p = set
            .for_pod(&pod("shop", json!({}), None).metadata)
            .expect("selected");
        assert_eq!(
            p.invalid.as_ref().map(ToString::to_string).as_deref(),
            Some("spec.division.weights.east: -2 is negative")
        );
    }
}
