//! What a leaf's admission does to a pod's copy before its scheduler sees it: LimitRange
//! defaults and limits, the namespace's Pod Security level, then ResourceQuota (the
//! API server's order). The leaf check asks this first, so a pod is sent only where its
//! copy would be created, and judged as the leaf will hold it.

pub(crate) mod limit_range;
pub(crate) mod pod_security;
pub(crate) mod quota;

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{LimitRange, Namespace, Pod, ResourceQuota};

use crate::change::{Change, key_of};
use pod_security::Enforce;

/// A leaf's ResourceQuotas and LimitRanges, by namespace, and its namespaces' Pod
/// Security levels; cloned per cycle (pointers).
#[derive(Clone, Default)]
pub struct LeafAdmission {
    quotas: HashMap<String, HashMap<String, Arc<ResourceQuota>>>,
    limit_ranges: HashMap<String, HashMap<String, Arc<LimitRange>>>,
    /// Namespace → its enforced level, for the namespaces that label one (the others
    /// get the default). Behind its own pointer: quota status changes often, namespace
    /// labels seldom.
    pod_security: Arc<HashMap<String, Enforce>>,
    /// The leaf's Kubernetes minor version, once known: what `latest` means there.
    leaf_minor: Option<u32>,
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
pub(crate) enum Admitted {
    /// Unchanged by the leaf's admission.
    AsIs,
    /// With the LimitRange defaults filled in.
    Defaulted(Box<Pod>),
    /// Against a LimitRange: nothing but a change of the copy's pod or the range helps.
    OutOfLimits(String),
    /// Over a ResourceQuota: room may come back as the namespace's pods end.
    OverQuota(String),
    /// Against the namespace's Pod Security level: only a change of the pod or of the
    /// namespace's level helps.
    Forbidden(String),
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

    /// A leaf namespace's change as Pod Security sees it: the namespace and the level it
    /// now enforces (None: the default, or gone).
    pub fn level_of(change: &Change<Namespace>) -> (String, Option<Enforce>) {
        let (ns, gone) = match change {
            Change::Apply(o, _) => (o, false),
            Change::Delete(o) => (o, true),
        };
        let name = ns.metadata.name.clone().unwrap_or_default();
        let enforce = Enforce::from_labels(ns.metadata.labels.as_ref());
        (
            name,
            (!gone && enforce != Enforce::default()).then_some(enforce),
        )
    }

    /// Whether namespace `ns` is known to enforce `level` already.
    pub fn has_level(&self, ns: &str, level: Option<Enforce>) -> bool {
        self.pod_security.get(ns).copied() == level
    }

    pub fn set_level(&mut self, ns: String, level: Option<Enforce>) {
        match level {
            Some(l) => Arc::make_mut(&mut self.pod_security).insert(ns, l),
            None => Arc::make_mut(&mut self.pod_security).remove(&ns),
        };
    }

    /// The leaf's version (`v1.36.3`), as its API server reports it; true when it changed.
    pub fn set_leaf_version(&mut self, git_version: &str) -> bool {
        let minor = git_version
            .trim_start_matches('v')
            .split('.')
            .nth(1)
            .map(|m| m.trim_end_matches(|c: char| !c.is_ascii_digit()))
            .and_then(|m| m.parse().ok());
        let changed = minor.is_some() && minor != self.leaf_minor;
        if changed {
            self.leaf_minor = minor;
        }
        changed
    }

    /// The level enforced in leaf namespace `ns`.
    pub(crate) fn enforced(&self, ns: &str) -> Enforce {
        self.pod_security.get(ns).copied().unwrap_or_default()
    }

    fn in_namespace<K>(map: &HashMap<String, HashMap<String, Arc<K>>>, ns: &str) -> Vec<Arc<K>> {
        let mut v: Vec<(&String, &Arc<K>)> = map.get(ns).into_iter().flatten().collect();
        v.sort_by(|a, b| a.0.cmp(b.0));
        v.into_iter().map(|(_, k)| k.clone()).collect()
    }

    /// The leaf's admission of `copy` (as the leaf check builds it), with `priority_class`
    /// the class it may carry there (quota scopes select by it) and `pending` the copies
    /// this agent has sent to the namespace that the leaf has not admitted yet.
    pub(crate) fn admit(
        &self,
        copy: &Pod,
        priority_class: Option<&str>,
        pending: &[Arc<Pod>],
    ) -> Admitted {
        let ns = copy.metadata.namespace.as_deref().unwrap_or_default();
        let ranges = Self::in_namespace(&self.limit_ranges, ns);
        let quotas = Self::in_namespace(&self.quotas, ns);
        // LimitRange defaults only touch resources, which Pod Security does not read.
        let forbidden = || {
            let enforce = self.enforced(ns);
            let why = enforce.refusal(&copy.metadata, copy.spec.as_ref()?, self.leaf_minor)?;
            Some(Admitted::Forbidden(format!(
                "pods in namespace {ns} violate PodSecurity \"{enforce}\": {why}"
            )))
        };
        if ranges.is_empty() && quotas.is_empty() {
            return forbidden().unwrap_or(Admitted::AsIs);
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
        if let Some(refused) = forbidden() {
            return refused;
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

    fn namespace(labels: serde_json::Value) -> Change<Namespace> {
        change(json!({"metadata": {"name": "shop", "labels": labels}}))
    }

    fn learn(a: &mut LeafAdmission, c: Change<Namespace>) {
        let (ns, level) = LeafAdmission::level_of(&c);
        a.set_level(ns, level);
    }

    #[test]
    fn the_namespaces_pod_security_level_judges_the_copy_after_limit_ranges() {
        let privileged: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"containers": [{"name": "app", "image": "i",
                "securityContext": {"privileged": true}}],
                "volumes": [{"name": "root", "hostPath": {"path": "/"}}]}}))
        .expect("pod");
        let mut a = LeafAdmission::default();
        assert_eq!(
            a.admit(&privileged, None, &[]),
            Admitted::AsIs,
            "no label: the default, privileged"
        );
        learn(
            &mut a,
            namespace(json!({"pod-security.kubernetes.io/enforce": "baseline"})),
        );
        assert!(!a.has_level("shop", None));
        assert_eq!(
            a.admit(&privileged, None, &[]),
            Admitted::Forbidden(
                "pods in namespace shop violate PodSecurity \"baseline:latest\": hostPath volumes (volume \"root\"), privileged (container \"app\" must not set securityContext.privileged=true)".into()
            )
        );
        assert_eq!(a.admit(&copy(Some("1")), None, &[]), Admitted::AsIs);
        // A pinned version, as labelled; `latest` is the leaf's own version.
        learn(
            &mut a,
            namespace(json!({"pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "v1.30"})),
        );
        let Admitted::Forbidden(why) = a.admit(&copy(Some("1")), None, &[]) else {
            panic!("restricted refuses a plain pod");
        };
        assert!(
            why.starts_with("pods in namespace shop violate PodSecurity \"restricted:v1.30\": allowPrivilegeEscalation != false"),
            "{why}"
        );
        assert!(a.set_leaf_version("v1.36.3"));
        assert!(!a.set_leaf_version("v1.36.4"));
        // A LimitRange's refusal comes first, as the API server validates it first.
        a.apply_limit_range(change(
            json!({"metadata": {"name": "lr", "namespace": "shop"},
            "spec": {"limits": [{"type": "Container", "max": {"cpu": "1"}}]}}),
        ));
        assert!(matches!(
            a.admit(&copy(Some("2")), None, &[]),
            Admitted::OutOfLimits(_)
        ));
        a.apply_limit_range(Change::Delete(Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "lr", "namespace": "shop"}}))
                .expect("lr"),
        )));
        // Relabelled privileged, or gone: the default again.
        learn(
            &mut a,
            namespace(json!({"pod-security.kubernetes.io/enforce": "privileged"})),
        );
        assert!(a.has_level("shop", None));
        assert_eq!(a.admit(&privileged, None, &[]), Admitted::AsIs);
        learn(
            &mut a,
            namespace(json!({"pod-security.kubernetes.io/enforce": "baseline"})),
        );
        learn(
            &mut a,
            Change::Delete(Arc::new(
                serde_json::from_value(json!({"metadata": {"name": "shop"}})).expect("ns"),
            )),
        );
        assert_eq!(a.admit(&privileged, None, &[]), Admitted::AsIs);
    }
}
