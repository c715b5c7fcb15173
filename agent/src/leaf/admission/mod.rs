//! What a leaf's admission does to a pod's copy before its scheduler sees it: LimitRange
//! defaults and limits, then ResourceQuota. The leaf check asks this first, so a pod is
//! sent only where its copy would be created, and judged as the leaf will hold it.

pub mod limit_range;
pub mod quota;

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{LimitRange, Pod, ResourceQuota};

use crate::watch::{Change, key_of};

/// A leaf's ResourceQuotas and LimitRanges, by namespace; cloned per cycle (pointers).
#[derive(Clone, Default)]
pub struct LeafAdmission {
    quotas: HashMap<String, HashMap<String, Arc<ResourceQuota>>>,
    limit_ranges: HashMap<String, HashMap<String, Arc<LimitRange>>>,
}

fn apply<K: kube::Resource>(map: &mut HashMap<String, HashMap<String, Arc<K>>>, change: Change<K>) {
    let (obj, deleted) = match change {
        Change::Apply(o, _) => (o, false),
        Change::Delete(o) => (o, true),
    };
    let ns = obj.meta().namespace.clone().unwrap_or_default();
    let key = key_of(&*obj);
    let entry = map.entry(ns.clone()).or_default();
    if deleted {
        entry.remove(&key);
        if entry.is_empty() {
            map.remove(&ns);
        }
    } else {
        entry.insert(key, obj);
    }
}

/// Why the leaf would refuse a copy, or the copy as its admission would store it.
#[derive(Debug, Clone, PartialEq)]
pub enum Admitted {
    /// Unchanged by the leaf's admission.
    AsIs,
    /// With the LimitRange defaults filled in.
    Defaulted(Box<Pod>),
    /// Against a LimitRange: nothing but a change of the copy's pod or the range helps.
    OutOfLimits(String),
    /// Over a ResourceQuota: room may come back as the namespace's pods end.
    OverQuota(String),
}

impl LeafAdmission {
    pub fn has_quotas(&self) -> bool {
        !self.quotas.is_empty()
    }

    pub fn apply_quota(&mut self, change: Change<ResourceQuota>) {
        apply(&mut self.quotas, change);
    }

    pub fn apply_limit_range(&mut self, change: Change<LimitRange>) {
        apply(&mut self.limit_ranges, change);
    }

    fn in_namespace<K>(map: &HashMap<String, HashMap<String, Arc<K>>>, ns: &str) -> Vec<Arc<K>> {
        let mut v: Vec<(&String, &Arc<K>)> = map.get(ns).into_iter().flatten().collect();
        v.sort_by(|a, b| a.0.cmp(b.0));
        v.into_iter().map(|(_, k)| k.clone()).collect()
    }

    /// The leaf's admission of `copy` (as the leaf check builds it), with `priority_class`
    /// the class it may carry there (quota scopes select by it) and `pending` the copies
    /// this agent has sent to the namespace that the leaf has not admitted yet.
    pub fn admit(
        &self,
        copy: &Pod,
        priority_class: Option<&str>,
        pending: &[Arc<Pod>],
    ) -> Admitted {
        let ns = copy.metadata.namespace.as_deref().unwrap_or_default();
        let ranges = Self::in_namespace(&self.limit_ranges, ns);
        let quotas = Self::in_namespace(&self.quotas, ns);
        if ranges.is_empty() && quotas.is_empty() {
            return Admitted::AsIs;
        }
        let mut admitted = copy.clone();
        let defaulted = limit_range::apply_defaults(&mut admitted, &ranges);
        let errs = limit_range::violations(&admitted, &ranges);
        if !errs.is_empty() {
            let msg = if errs.len() == 1 {
                errs.concat()
            } else {
                format!("[{}]", errs.join(", "))
            };
            return Admitted::OutOfLimits(format!("LimitRange: {msg}"));
        }
        if !quotas.is_empty() {
            let mut judged = admitted.clone();
            if let Some(spec) = judged.spec.as_mut() {
                spec.priority_class_name = priority_class.map(String::from);
            }
            if let Some(r) = quota::first_refusal(&quotas, &judged, pending) {
                return Admitted::OverQuota(format!("ResourceQuota: {r}"));
            }
        }
        if defaulted {
            Admitted::Defaulted(Box::new(admitted))
        } else {
            Admitted::AsIs
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn change<K: serde::de::DeserializeOwned>(v: serde_json::Value) -> Change<K> {
        Change::Apply(Arc::new(serde_json::from_value(v).expect("object")), false)
    }

    fn copy(cpu: Option<&str>) -> Pod {
        let resources = cpu.map_or(json!({}), |c| json!({"requests": {"cpu": c}}));
        serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "shop"},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": resources}]}}))
        .expect("pod")
    }

    #[test]
    fn defaults_then_quota_judge_the_copy_as_the_leaf_stores_it() {
        let mut a = LeafAdmission::default();
        assert_eq!(a.admit(&copy(None), None, &[]), Admitted::AsIs);
        a.apply_limit_range(change(
            json!({"metadata": {"name": "lr", "namespace": "shop"},
            "spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "2"}}]}}),
        ));
        let Admitted::Defaulted(p) = a.admit(&copy(None), None, &[]) else {
            panic!("defaults expected");
        };
        assert_eq!(
            p.spec.as_ref().unwrap().containers[0]
                .resources
                .as_ref()
                .unwrap()
                .requests
                .as_ref()
                .unwrap()["cpu"]
                .0,
            "2"
        );
        // The quota sees the defaulted request, not the host pod's none.
        a.apply_quota(change(
            json!({"metadata": {"name": "q", "namespace": "shop"},
            "spec": {"hard": {"requests.cpu": "3"}},
            "status": {"hard": {"requests.cpu": "3"}, "used": {"requests.cpu": "2"}}}),
        ));
        assert_eq!(
            a.admit(&copy(None), None, &[]),
            Admitted::OverQuota("ResourceQuota: exceeded quota: q, requested: requests.cpu=2, used: requests.cpu=2, limited: requests.cpu=3".into())
        );
        assert!(matches!(
            a.admit(&copy(Some("1")), None, &[]),
            Admitted::AsIs
        ));
        // Other namespaces are not concerned.
        let mut elsewhere = copy(None);
        elsewhere.metadata.namespace = Some("other".into());
        assert_eq!(a.admit(&elsewhere, None, &[]), Admitted::AsIs);
        a.apply_quota(Change::Delete(Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "q", "namespace": "shop"}}))
                .unwrap(),
        )));
        assert!(matches!(
            a.admit(&copy(None), None, &[]),
            Admitted::Defaulted(_)
        ));
    }
}
