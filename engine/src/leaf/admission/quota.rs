//! The leaf's ResourceQuotas as its quota admission judges a copy: the quotas whose
//! scopes match the pod, the pod's usage of each resource they limit, and the refusal in
//! kube's words when used plus requested exceeds hard. "Used" is the quota's status plus
//! the copies this agent has decided on but the leaf has not admitted yet.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, ResourceQuota, ScopedResourceSelectorRequirement};
use mcsched_shared::quantity::Quantity;
use mcsched_shared::resources::{Side, container_amounts, pod_amounts};

/// Pod usage by quota resource name, as kube's pod evaluator counts it.
pub(crate) type Usage = BTreeMap<String, Quantity>;

/// The compute resources quota tracks by plain name and with a `requests.` or `limits.`
/// prefix; extended resources are tracked only as `requests.<name>`.
const COMPUTE: [&str; 3] = ["cpu", "memory", "ephemeral-storage"];

/// Resources whose quota obliges every container to state them (kube's backward
/// compatible constraint for cpu and memory).
const MUST_SPECIFY: [&str; 6] = [
    "cpu",
    "memory",
    "requests.cpu",
    "requests.memory",
    "limits.cpu",
    "limits.memory",
];

fn is_extended(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/")
}

/// What quota counts for usage from `requests` and `limits` (pod or container level).
fn usage_of(requests: &Usage, limits: &Usage) -> Usage {
    let mut u = Usage::from([
        ("pods".to_string(), Quantity::ONE),
        ("count/pods".to_string(), Quantity::ONE),
    ]);
    for name in COMPUTE {
        if let Some(&q) = requests.get(name) {
            u.insert(name.to_string(), q);
            u.insert(format!("requests.{name}"), q);
        }
        if let Some(&q) = limits.get(name) {
            u.insert(format!("limits.{name}"), q);
        }
    }
    for (name, &q) in requests {
        if name.starts_with("hugepages-") {
            u.insert(name.clone(), q);
            u.insert(format!("requests.{name}"), q);
        } else if is_extended(name) {
            u.insert(format!("requests.{name}"), q);
        }
    }
    u
}

/// The pod's usage; a quantity that does not parse counts as absent (the API server
/// validated the host pod's).
pub(crate) fn pod_usage(pod: &Pod) -> Usage {
    usage_of(
        &pod_amounts(pod, Side::Requests).unwrap_or_default(),
        &pod_amounts(pod, Side::Limits).unwrap_or_default(),
    )
}

/// Whether quota tracks resource `name` for pods.
fn tracked(name: &str) -> bool {
    matches!(name, "pods" | "count/pods")
        || COMPUTE.contains(&name)
        || COMPUTE.iter().any(|c| {
            name.strip_prefix("requests.") == Some(c) || name.strip_prefix("limits.") == Some(c)
        })
        || name.starts_with("hugepages-")
        || name.starts_with("requests.hugepages-")
        || name.strip_prefix("requests.").is_some_and(is_extended)
}

fn qos_best_effort(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .filter_map(|c| c.resources.as_ref())
        .flat_map(|r| r.requests.iter().chain(r.limits.iter()).flatten())
        .filter(|(name, _)| *name == "cpu" || *name == "memory")
        .all(|(_, q)| Quantity::parse(&q.0).is_ok_and(|q| q.is_zero()))
}

fn cross_namespace_affinity(pod: &Pod) -> bool {
    let Some(aff) = pod.spec.as_ref().and_then(|s| s.affinity.as_ref()) else {
        return false;
    };
    let terms =
        |req: Option<&Vec<k8s_openapi::api::core::v1::PodAffinityTerm>>,
         pref: Option<&Vec<k8s_openapi::api::core::v1::WeightedPodAffinityTerm>>| {
            req.into_iter()
                .flatten()
                .chain(pref.into_iter().flatten().map(|w| &w.pod_affinity_term))
                .any(|t| {
                    t.namespace_selector.is_some()
                        || t.namespaces.as_ref().is_some_and(|n| !n.is_empty())
                })
        };
    aff.pod_affinity.as_ref().is_some_and(|a| {
        terms(
            a.required_during_scheduling_ignored_during_execution
                .as_ref(),
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref(),
        )
    }) || aff.pod_anti_affinity.as_ref().is_some_and(|a| {
        terms(
            a.required_during_scheduling_ignored_during_execution
                .as_ref(),
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref(),
        )
    })
}

/// kube's isTerminating: an active deadline bounds the pod's life.
fn terminating(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.active_deadline_seconds)
        .is_some_and(|d| d >= 0)
}

fn scope_matches(req: &ScopedResourceSelectorRequirement, pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    let has = match req.scope_name.as_str() {
        "Terminating" => terminating(pod),
        "NotTerminating" => !terminating(pod),
        "BestEffort" => qos_best_effort(pod),
        "NotBestEffort" => !qos_best_effort(pod),
        "CrossNamespacePodAffinity" => cross_namespace_affinity(pod),
        "PriorityClass" => {
            let class = spec
                .and_then(|s| s.priority_class_name.as_deref())
                .unwrap_or("");
            let values = req.values.as_deref().unwrap_or_default();
            return match req.operator.as_str() {
                "In" => values.iter().any(|v| v == class),
                "NotIn" => !values.iter().any(|v| v == class),
                "Exists" => !class.is_empty(),
                "DoesNotExist" => class.is_empty(),
                _ => false,
            };
        }
        _ => false,
    };
    match req.operator.as_str() {
        "DoesNotExist" => !has,
        _ => has,
    }
}

/// Whether quota `q` applies to `pod`: every scope and scope selector expression matches.
pub(crate) fn matches(q: &ResourceQuota, pod: &Pod) -> bool {
    let Some(spec) = q.spec.as_ref() else {
        return true;
    };
    let scopes = spec
        .scopes
        .iter()
        .flatten()
        .map(|s| ScopedResourceSelectorRequirement {
            scope_name: s.clone(),
            operator: "Exists".into(),
            values: None,
        });
    let selected = spec
        .scope_selector
        .iter()
        .flat_map(|s| s.match_expressions.iter().flatten().cloned());
    scopes.chain(selected).all(|r| scope_matches(&r, pod))
}

fn is_binary(text: &str) -> bool {
    text.ends_with('i')
}

/// `requests.cpu=2,requests.memory=1Gi`: kube's prettyPrint of a resource list.
fn pretty(list: &BTreeMap<String, String>) -> String {
    list.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The refusal quota `q` gives `pod` (usage `usage`) when `pending` is already counted
/// in it beyond its status, if any.
pub(crate) fn refusal(
    q: &ResourceQuota,
    pod: &Pod,
    usage: &Usage,
    pending: &Usage,
) -> Option<String> {
    let name = q.metadata.name.as_deref().unwrap_or_default();
    let status = q.status.as_ref();
    let hard: BTreeMap<&String, (&str, Quantity)> = status
        .and_then(|s| s.hard.as_ref())
        .into_iter()
        .flatten()
        .filter(|(k, _)| tracked(k))
        .filter_map(|(k, v)| Quantity::parse(&v.0).ok().map(|q| (k, (v.0.as_str(), q))))
        .collect();
    if hard.is_empty() {
        return None;
    }
    let mut missing: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    if let Some(spec) = pod.spec.as_ref() {
        for c in spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
        {
            let has = usage_of(
                &container_amounts(c, Side::Requests).unwrap_or_default(),
                &container_amounts(c, Side::Limits).unwrap_or_default(),
            );
            for need in MUST_SPECIFY {
                if hard.keys().any(|k| k.as_str() == need) && !has.contains_key(need) {
                    missing.entry(need).or_default().push(c.name.clone());
                }
            }
        }
    }
    if !missing.is_empty() {
        let msg = missing
            .iter()
            .map(|(r, cs)| format!("must specify {r} for: {}", cs.join(",")))
            .collect::<Vec<_>>()
            .join("; ");
        return Some(format!("failed quota: {name}: {msg}"));
    }
    let used: BTreeMap<&String, Quantity> = status
        .and_then(|s| s.used.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Quantity::parse(&v.0).ok().map(|q| (k, q)))
        .collect();
    let unknown: Vec<&str> = hard
        .keys()
        .filter(|k| !used.contains_key(*k))
        .map(|k| k.as_str())
        .collect();
    if !unknown.is_empty() {
        return Some(format!(
            "status unknown for quota: {name}, resources: {}",
            unknown.join(",")
        ));
    }
    let (mut requested, mut was, mut limited) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    for (k, (text, hard)) in &hard {
        let Some(&asked) = usage.get(*k) else {
            continue;
        };
        let before = used[k].saturating_add(pending.get(*k).copied().unwrap_or(Quantity::ZERO));
        if before.saturating_add(asked) > *hard {
            let binary = is_binary(text);
            requested.insert(k.to_string(), asked.canonical(binary));
            was.insert(k.to_string(), before.canonical(binary));
            limited.insert(k.to_string(), text.to_string());
        }
    }
    (!requested.is_empty()).then(|| {
        format!(
            "exceeded quota: {name}, requested: {}, used: {}, limited: {}",
            pretty(&requested),
            pretty(&was),
            pretty(&limited)
        )
    })
}

/// The first refusal among `quotas` for `pod`, counting `pending` copies (decided on,
/// not yet admitted by the leaf) where each quota matches them.
pub(crate) fn first_refusal(
    quotas: &[Arc<ResourceQuota>],
    pod: &Pod,
    pending: &[Arc<Pod>],
) -> Option<String> {
    let usage = pod_usage(pod);
    quotas.iter().filter(|q| matches(q, pod)).find_map(|q| {
        let mut counted = Usage::new();
        for p in pending.iter().filter(|p| matches(q, p)) {
            for (k, v) in pod_usage(p) {
                let e = counted.entry(k).or_insert(Quantity::ZERO);
                *e = e.saturating_add(v);
            }
        }
        refusal(q, pod, &usage, &counted)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn quota(
        spec: serde_json::Value,
        hard: serde_json::Value,
        used: serde_json::Value,
    ) -> Arc<ResourceQuota> {
        Arc::new(
            serde_json::from_value(
                json!({"metadata": {"name": "compute", "namespace": "default"},
                "spec": spec, "status": {"hard": hard, "used": used}}),
            )
            .expect("quota"),
        )
    }

    fn pod(resources: serde_json::Value, extra: serde_json::Value) -> Pod {
        let mut spec =
            json!({"containers": [{"name": "app", "image": "i", "resources": resources}]});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        serde_json::from_value(
            json!({"metadata": {"name": "p", "namespace": "default"}, "spec": spec}),
        )
        .expect("pod")
    }

    #[test]
    fn an_exhausted_quota_refuses_in_kubes_words() {
        let q = quota(
            json!({"hard": {"requests.cpu": "4", "pods": "10"}}),
            json!({"requests.cpu": "4", "pods": "10"}),
            json!({"requests.cpu": "3", "pods": "2"}),
        );
        let p = pod(json!({"requests": {"cpu": "2"}}), json!({}));
        assert_eq!(
            first_refusal(std::slice::from_ref(&q), &p, &[]).as_deref(),
            Some(
                "exceeded quota: compute, requested: requests.cpu=2, used: requests.cpu=3, limited: requests.cpu=4"
            )
        );
        let small = pod(json!({"requests": {"cpu": "1"}}), json!({}));
        assert_eq!(first_refusal(std::slice::from_ref(&q), &small, &[]), None);
        // A copy decided on but not admitted yet counts.
        assert_eq!(
            first_refusal(&[q], &small, &[Arc::new(small.clone())]).as_deref(),
            Some(
                "exceeded quota: compute, requested: requests.cpu=1, used: requests.cpu=4, limited: requests.cpu=4"
            )
        );
    }

    #[test]
    fn a_quota_on_cpu_needs_every_container_to_state_it() {
        let q = quota(
            json!({"hard": {"limits.cpu": "4"}}),
            json!({"limits.cpu": "4"}),
            json!({"limits.cpu": "0"}),
        );
        let p = pod(json!({"requests": {"cpu": "1"}}), json!({}));
        assert_eq!(
            first_refusal(&[q], &p, &[]).as_deref(),
            Some("failed quota: compute: must specify limits.cpu for: app")
        );
    }

    #[test]
    fn scopes_choose_the_pods_a_quota_counts() {
        let best_effort = quota(
            json!({"hard": {"pods": "1"}, "scopes": ["BestEffort"]}),
            json!({"pods": "1"}),
            json!({"pods": "1"}),
        );
        let plain = pod(json!({}), json!({}));
        let burstable = pod(json!({"requests": {"cpu": "1"}}), json!({}));
        assert!(first_refusal(std::slice::from_ref(&best_effort), &plain, &[]).is_some());
        assert_eq!(first_refusal(&[best_effort], &burstable, &[]), None);
        let high = quota(
            json!({"hard": {"pods": "0"}, "scopeSelector": {"matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}}),
            json!({"pods": "0"}),
            json!({"pods": "0"}),
        );
        assert!(
            first_refusal(
                std::slice::from_ref(&high),
                &pod(json!({}), json!({"priorityClassName": "high"})),
                &[]
            )
            .is_some()
        );
        assert_eq!(first_refusal(&[high], &plain, &[]), None);
        let terminating = quota(
            json!({"hard": {"pods": "0"}, "scopes": ["Terminating"]}),
            json!({"pods": "0"}),
            json!({"pods": "0"}),
        );
        assert_eq!(
            first_refusal(std::slice::from_ref(&terminating), &plain, &[]),
            None
        );
        assert!(
            first_refusal(
                &[terminating],
                &pod(json!({}), json!({"activeDeadlineSeconds": 60})),
                &[]
            )
            .is_some()
        );
    }

    #[test]
    fn a_quota_the_controller_has_not_counted_yet_refuses() {
        let q = quota(
            json!({"hard": {"pods": "5"}}),
            json!({"pods": "5"}),
            json!({}),
        );
        assert_eq!(
            first_refusal(&[q], &pod(json!({}), json!({})), &[]).as_deref(),
            Some("status unknown for quota: compute, resources: pods")
        );
        // No status at all yet (just created): nothing is enforced by it so far.
        let fresh: Arc<ResourceQuota> = Arc::new(
            serde_json::from_value(
                json!({"metadata": {"name": "new"}, "spec": {"hard": {"pods": "0"}}}),
            )
            .unwrap(),
        );
        assert_eq!(
            first_refusal(&[fresh], &pod(json!({}), json!({})), &[]),
            None
        );
    }

    #[test]
    fn memory_prints_in_binary_like_the_hard_limit() {
        let q = quota(
            json!({"hard": {"requests.memory": "1Gi"}}),
            json!({"requests.memory": "1Gi"}),
            json!({"requests.memory": "768Mi"}),
        );
        let p = pod(
            json!({"requests": {"memory": "512Mi", "cpu": "1"}}),
            json!({}),
        );
        assert_eq!(
            first_refusal(&[q], &p, &[]).as_deref(),
            Some(
                "exceeded quota: compute, requested: requests.memory=512Mi, used: requests.memory=768Mi, limited: requests.memory=1Gi"
            )
        );
    }
}
