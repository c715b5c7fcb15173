//! The selectors of the objects that select pods — Services, ReplicationControllers,
//! ReplicaSets, StatefulSets — kept per namespace from their watches, for kube-scheduler's
//! `helper.DefaultSelector` (PodTopologySpread's default constraints). Only the selectors
//! are kept: nothing else of those objects matters to scheduling.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use mcsched_shared::selectors::Labels;

/// namespace → name → selector.
type ByNamespace<T> = HashMap<String, HashMap<String, T>>;

/// Which kind of pod-selecting object a selector came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectorKind {
    Service,
    ReplicationController,
    ReplicaSet,
    StatefulSet,
}

#[derive(Debug, Clone, Default)]
pub struct PodSelectors {
    /// `spec.selector`; None (nil) selects nothing.
    services: ByNamespace<Option<Labels>>,
    replication_controllers: ByNamespace<Option<Labels>>,
    replica_sets: ByNamespace<Option<LabelSelector>>,
    stateful_sets: ByNamespace<Option<LabelSelector>>,
}

/// A selector as the watches deliver it: a label map (Service, RC) or a LabelSelector.
#[derive(Debug, Clone)]
pub enum Selector {
    Map(Option<Labels>),
    Label(Option<LabelSelector>),
}

fn set<T>(map: &mut ByNamespace<T>, ns: &str, name: &str, value: Option<T>) {
    match value {
        Some(v) => {
            map.entry(ns.to_string())
                .or_default()
                .insert(name.to_string(), v);
        }
        None => {
            if let Some(m) = map.get_mut(ns) {
                m.remove(name);
                if m.is_empty() {
                    map.remove(ns);
                }
            }
        }
    }
}

impl PodSelectors {
    /// Records (`Some`) or forgets (`None`) one object's selector.
    pub fn set(&mut self, kind: SelectorKind, ns: &str, name: &str, selector: Option<Selector>) {
        use SelectorKind::*;
        let map = |s: Option<Selector>| {
            s.map(|s| match s {
                Selector::Map(m) => m,
                Selector::Label(_) => None,
            })
        };
        let label = |s: Option<Selector>| {
            s.map(|s| match s {
                Selector::Label(l) => l,
                Selector::Map(_) => None,
            })
        };
        match kind {
            Service => set(&mut self.services, ns, name, map(selector)),
            ReplicationController => {
                set(&mut self.replication_controllers, ns, name, map(selector))
            }
            ReplicaSet => set(&mut self.replica_sets, ns, name, label(selector)),
            StatefulSet => set(&mut self.stateful_sets, ns, name, label(selector)),
        }
    }

    /// kube's `helper.DefaultSelector`: the labels of every Service selecting the pod,
    /// merged, plus the selector of its controlling RC, ReplicaSet or StatefulSet. None
    /// when that leaves no requirement (kube's `selector.Empty()`).
    pub(crate) fn default_selector(&self, pod: &ObjectMeta) -> Option<LabelSelector> {
        static EMPTY: Labels = BTreeMap::new();
        let ns = pod.namespace.as_deref().unwrap_or_default();
        let labels = pod.labels.as_ref().unwrap_or(&EMPTY);
        let mut label_set = Labels::new();
        for selector in self.services.get(ns).into_iter().flat_map(|m| m.values()) {
            // A nil selector selects nothing; an empty one everything (and adds nothing).
            let Some(sel) = selector else { continue };
            if sel.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                label_set.extend(sel.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        let mut expressions = Vec::new();
        let owner = pod
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true));
        if let Some(owner) = owner {
            let name = owner.name.as_str();
            match (owner.api_version.as_str(), owner.kind.as_str()) {
                ("v1", "ReplicationController") => {
                    if let Some(sel) = get(&self.replication_controllers, ns, name) {
                        label_set.extend(sel.iter().map(|(k, v)| (k.clone(), v.clone())));
                    }
                }
                ("apps/v1", "ReplicaSet") => {
                    expressions = requirements(get(&self.replica_sets, ns, name));
                }
                ("apps/v1", "StatefulSet") => {
                    expressions = requirements(get(&self.stateful_sets, ns, name));
                }
                _ => {}
            }
        }
        if label_set.is_empty() && expressions.is_empty() {
            return None;
        }
        Some(LabelSelector {
            match_labels: (!label_set.is_empty()).then_some(label_set),
            match_expressions: (!expressions.is_empty()).then_some(expressions),
        })
    }
}

/// The selector of `ns/name`, when the object is known and has one.
fn get<'a, T>(m: &'a ByNamespace<Option<T>>, ns: &str, name: &str) -> Option<&'a T> {
    m.get(ns)?.get(name)?.as_ref()
}

/// `LabelSelectorAsSelector(sel).Requirements()` as LabelSelectorRequirements: nothing
/// for a nil selector or one that does not parse, matchLabels as `In [value]`.
fn requirements(selector: Option<&LabelSelector>) -> Vec<LabelSelectorRequirement> {
    let Some(sel) = selector else {
        return Vec::new();
    };
    let valid = sel.match_expressions.iter().flatten().all(|r| {
        let n = r.values.as_ref().map_or(0, Vec::len);
        match r.operator.as_str() {
            "In" | "NotIn" => n > 0,
            "Exists" | "DoesNotExist" => n == 0,
            _ => false,
        }
    });
    if !valid {
        return Vec::new();
    }
    let from_labels = sel
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| LabelSelectorRequirement {
            key: k.clone(),
            operator: "In".into(),
            values: Some(vec![v.clone()]),
        });
    from_labels
        .chain(sel.match_expressions.iter().flatten().cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn pod(ns: &str, l: &[(&str, &str)], owner: Option<(&str, &str, &str)>) -> Pod {
        let mut p = Pod::default();
        p.metadata.namespace = Some(ns.into());
        p.metadata.labels = Some(labels(l));
        p.metadata.owner_references = owner.map(|(api_version, kind, name)| {
            vec![OwnerReference {
                api_version: api_version.into(),
                kind: kind.into(),
                name: name.into(),
                uid: "u".into(),
                controller: Some(true),
                ..Default::default()
            }]
        });
        p
    }

    fn label_selector(v: serde_json::Value) -> LabelSelector {
        serde_json::from_value(v).unwrap_or_default()
    }

    fn selectors() -> PodSelectors {
        let mut s = PodSelectors::default();
        let map = |l: &[(&str, &str)]| Some(Selector::Map(Some(labels(l))));
        s.set(SelectorKind::Service, "ns", "web", map(&[("app", "web")]));
        s.set(
            SelectorKind::Service,
            "ns",
            "tier",
            map(&[("tier", "front")]),
        );
        s.set(
            SelectorKind::Service,
            "ns",
            "nil",
            Some(Selector::Map(None)),
        );
        s.set(SelectorKind::Service, "other", "web", map(&[("app", "db")]));
        s.set(
            SelectorKind::ReplicationController,
            "ns",
            "rc",
            map(&[("rc", "1")]),
        );
        s.set(
            SelectorKind::ReplicaSet,
            "ns",
            "rs",
            Some(Selector::Label(Some(label_selector(json!({
                "matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "track", "operator": "Exists"}]
            }))))),
        );
        s.set(
            SelectorKind::ReplicaSet,
            "ns",
            "bad",
            Some(Selector::Label(Some(label_selector(json!({
                "matchExpressions": [{"key": "track", "operator": "In"}]
            }))))),
        );
        s.set(
            SelectorKind::StatefulSet,
            "ns",
            "ss",
            Some(Selector::Label(Some(label_selector(
                json!({"matchLabels": {"sts": "db"}}),
            )))),
        );
        s
    }

    fn in_req(k: &str, v: &str) -> serde_json::Value {
        json!({"key": k, "operator": "In", "values": [v]})
    }

    #[test]
    fn default_selector_follows_kube_helper() {
        let s = selectors();
        let web = [("app", "web"), ("tier", "front"), ("track", "x")];
        let cases: Vec<(&str, Pod, Option<serde_json::Value>)> = vec![
            ("no service, no owner", pod("ns", &[("x", "y")], None), None),
            (
                "services selecting the pod merge; the nil one and other namespaces do not count",
                pod("ns", &web, None),
                Some(json!({"matchLabels": {"app": "web", "tier": "front"}})),
            ),
            (
                "replication controller labels merge into the set",
                pod(
                    "ns",
                    &[("rc", "1")],
                    Some(("v1", "ReplicationController", "rc")),
                ),
                Some(json!({"matchLabels": {"rc": "1"}})),
            ),
            (
                "replica set requirements are added",
                pod("ns", &web, Some(("apps/v1", "ReplicaSet", "rs"))),
                Some(json!({"matchLabels": {"app": "web", "tier": "front"},
                            "matchExpressions": [in_req("app", "web"),
                                                 {"key": "track", "operator": "Exists"}]})),
            ),
            (
                "stateful set requirements alone",
                pod(
                    "ns",
                    &[("sts", "db")],
                    Some(("apps/v1", "StatefulSet", "ss")),
                ),
                Some(json!({"matchExpressions": [in_req("sts", "db")]})),
            ),
            (
                "an owner that is not in the cache adds nothing",
                pod(
                    "ns",
                    &[("sts", "db")],
                    Some(("apps/v1", "StatefulSet", "gone")),
                ),
                None,
            ),
            (
                "an unsupported controller kind adds nothing",
                pod("ns", &[("sts", "db")], Some(("batch/v1", "Job", "ss"))),
                None,
            ),
            (
                "a ReplicaSet selector that does not parse adds nothing",
                pod(
                    "ns",
                    &[("track", "x")],
                    Some(("apps/v1", "ReplicaSet", "bad")),
                ),
                None,
            ),
        ];
        for (name, p, want) in cases {
            let want = want.map(label_selector);
            assert_eq!(s.default_selector(&p.metadata), want, "{name}");
        }
    }

    #[test]
    fn forgetting_an_object_drops_its_selector() {
        let mut s = selectors();
        let p = pod("ns", &[("app", "web")], None);
        assert!(s.default_selector(&p.metadata).is_some());
        s.set(SelectorKind::Service, "ns", "web", None);
        assert_eq!(s.default_selector(&p.metadata), None);
    }
}
