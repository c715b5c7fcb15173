//! Pod (anti-)affinity terms parsed once per pod, with kube-scheduler's matching rules
//! (`framework.AffinityTerm`): a term applies to the pod's own namespace unless it names
//! namespaces or has a namespaceSelector; a nil label selector matches nothing.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::{Pod, PodAffinityTerm, WeightedPodAffinityTerm};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use mcsched_shared::selectors::label_selector_matches;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AffinityTerm {
    pub(crate) namespaces: HashSet<String>,
    pub(crate) selector: Option<LabelSelector>,
    pub(crate) topology_key: String,
    /// None matches no namespace; an empty selector matches all.
    pub(crate) namespace_selector: Option<LabelSelector>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WeightedTerm {
    pub(crate) weight: i32,
    pub(crate) term: AffinityTerm,
}

impl AffinityTerm {
    pub(crate) fn new(pod_namespace: &str, t: &PodAffinityTerm) -> Self {
        let mut namespaces: HashSet<String> = t.namespaces.iter().flatten().cloned().collect();
        if namespaces.is_empty() && t.namespace_selector.is_none() {
            namespaces.insert(pod_namespace.to_string());
        }
        AffinityTerm {
            namespaces,
            selector: t.label_selector.clone(),
            topology_key: t.topology_key.clone(),
            namespace_selector: t.namespace_selector.clone(),
        }
    }

    /// Whether `pod` is in one of the term's namespaces (by name, or by `ns_labels`
    /// matching the namespaceSelector) and matches its label selector.
    pub(crate) fn matches(
        &self,
        pod: &ObjectMeta,
        ns_labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        let ns = pod.namespace.as_deref().unwrap_or_default();
        let in_namespace = self.namespaces.contains(ns)
            || ns_labels.is_some_and(|l| {
                self.namespace_selector
                    .as_ref()
                    .is_some_and(|s| label_selector_matches(Some(s), l))
            });
        in_namespace && label_selector_matches(self.selector.as_ref(), labels_of(pod))
    }

    /// Folds the namespaces the namespaceSelector picks into `namespaces`, as kube's
    /// mergeAffinityTermNamespacesIfNotEmpty does before matching other pods.
    pub(crate) fn merge_selected_namespaces(
        &mut self,
        all: &std::collections::HashMap<String, BTreeMap<String, String>>,
    ) {
        let Some(sel) = &self.namespace_selector else {
            return;
        };
        for (name, labels) in all {
            if label_selector_matches(Some(sel), labels) {
                self.namespaces.insert(name.clone());
            }
        }
        self.namespace_selector = None;
    }
}

pub(crate) fn labels_of(meta: &ObjectMeta) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    meta.labels.as_ref().unwrap_or(&EMPTY)
}

/// A pod's four term lists.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PodAffinityTerms {
    pub(crate) required_affinity: Vec<AffinityTerm>,
    pub(crate) required_anti_affinity: Vec<AffinityTerm>,
    pub(crate) preferred_affinity: Vec<WeightedTerm>,
    pub(crate) preferred_anti_affinity: Vec<WeightedTerm>,
}

impl PodAffinityTerms {
    pub(crate) fn of(pod: &Pod) -> Self {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let affinity = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
        let pa = affinity.and_then(|a| a.pod_affinity.as_ref());
        let paa = affinity.and_then(|a| a.pod_anti_affinity.as_ref());
        let required = |terms: Option<&Vec<PodAffinityTerm>>| -> Vec<AffinityTerm> {
            terms
                .into_iter()
                .flatten()
                .map(|t| AffinityTerm::new(ns, t))
                .collect()
        };
        let preferred = |terms: Option<&Vec<WeightedPodAffinityTerm>>| -> Vec<WeightedTerm> {
            terms
                .into_iter()
                .flatten()
                .map(|t| WeightedTerm {
                    weight: t.weight,
                    term: AffinityTerm::new(ns, &t.pod_affinity_term),
                })
                .collect()
        };
        PodAffinityTerms {
            required_affinity: required(pa.and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
            required_anti_affinity: required(paa.and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
            preferred_affinity: preferred(pa.and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
            preferred_anti_affinity: preferred(paa.and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
        }
    }
}
