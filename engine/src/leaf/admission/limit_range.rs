//! The leaf's LimitRanges as its LimitRanger admission applies them to a copy: container
//! defaults filled in (the copy may then ask for more than the host pod), then min, max
//! and limit-to-request ratio enforced per Container and per Pod, with kube's messages.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, LimitRange, LimitRangeItem, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use mcsched_shared::quantity::Quantity;
use mcsched_shared::resources::{Side, pod_amounts};

type ResourceList = BTreeMap<String, ApiQuantity>;

fn items<'a>(
    ranges: &'a [std::sync::Arc<LimitRange>],
    kind: &'a str,
) -> impl Iterator<Item = &'a LimitRangeItem> {
    ranges
        .iter()
        .filter_map(|r| r.spec.as_ref())
        .flat_map(|s| s.limits.iter())
        .filter(move |i| i.type_ == kind)
}

/// Fills in what the Container items' `default` (limits) and `defaultRequest` set and a
/// container leaves out, in init and app containers alike. True when anything changed.
pub(crate) fn apply_defaults(pod: &mut Pod, ranges: &[std::sync::Arc<LimitRange>]) -> bool {
    let mut limits = ResourceList::new();
    let mut requests = ResourceList::new();
    for item in items(ranges, "Container") {
        limits.extend(item.default.clone().unwrap_or_default());
        requests.extend(item.default_request.clone().unwrap_or_default());
    }
    if limits.is_empty() && requests.is_empty() {
        return false;
    }
    let Some(spec) = pod.spec.as_mut() else {
        return false;
    };
    let mut changed = false;
    let containers = spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten());
    for c in containers {
        let r = c.resources.get_or_insert_with(Default::default);
        for (defaults, side) in [(&limits, &mut r.limits), (&requests, &mut r.requests)] {
            for (name, q) in defaults {
                let side = side.get_or_insert_with(Default::default);
                if !side.contains_key(name) {
                    side.insert(name.clone(), q.clone());
                    changed = true;
                }
            }
        }
    }
    changed
}

/// The LimitRanger's verdict on `pod` (defaults already applied): every violation, in
/// kube's words, or nothing.
pub(crate) fn violations(pod: &Pod, ranges: &[std::sync::Arc<LimitRange>]) -> Vec<String> {
    let mut errs = Vec::new();
    let Some(spec) = pod.spec.as_ref() else {
        return errs;
    };
    for item in items(ranges, "Container") {
        for c in spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
        {
            let (requests, limits) = container_lists(c);
            check(item, "Container", &requests, &limits, &mut errs);
        }
    }
    let pod_items: Vec<_> = items(ranges, "Pod").collect();
    if !pod_items.is_empty() {
        let sum = |side| {
            pod_amounts(pod, side)
                .unwrap_or_default()
                .into_iter()
                .map(|(k, q)| (k, Observed::Summed(q)))
                .collect::<BTreeMap<_, _>>()
        };
        let (requests, limits) = (sum(Side::Requests), sum(Side::Limits));
        for item in pod_items {
            check(item, "Pod", &requests, &limits, &mut errs);
        }
    }
    errs
}

/// An amount as the message prints it: a container's as written, a pod's sum canonical.
#[derive(Clone)]
enum Observed {
    Written(String, Quantity),
    Summed(Quantity),
}

impl Observed {
    fn quantity(&self) -> Quantity {
        match self {
            Observed::Written(_, q) | Observed::Summed(q) => *q,
        }
    }
    fn text(&self) -> String {
        match self {
            Observed::Written(s, _) => s.clone(),
            Observed::Summed(q) => q.canonical(false),
        }
    }
}

fn container_lists(c: &Container) -> (BTreeMap<String, Observed>, BTreeMap<String, Observed>) {
    let list = |l: Option<&ResourceList>| {
        l.into_iter()
            .flatten()
            .filter_map(|(k, v)| {
                Quantity::parse(&v.0)
                    .ok()
                    .map(|q| (k.clone(), Observed::Written(v.0.clone(), q)))
            })
            .collect()
    };
    let r = c.resources.as_ref();
    (
        list(r.and_then(|r| r.requests.as_ref())),
        list(r.and_then(|r| r.limits.as_ref())),
    )
}

fn check(
    item: &LimitRangeItem,
    kind: &str,
    requests: &BTreeMap<String, Observed>,
    limits: &BTreeMap<String, Observed>,
    errs: &mut Vec<String>,
) {
    let parsed = |l: &Option<ResourceList>| -> Vec<(String, String, Quantity)> {
        l.iter()
            .flatten()
            .filter_map(|(k, v)| {
                Quantity::parse(&v.0)
                    .ok()
                    .map(|q| (k.clone(), v.0.clone(), q))
            })
            .collect()
    };
    for (name, text, min) in parsed(&item.min) {
        let (req, lim) = (requests.get(&name), limits.get(&name));
        match req {
            None => errs.push(format!(
                "minimum {name} usage per {kind} is {text}.  No request is specified"
            )),
            Some(r) if r.quantity() < min => errs.push(format!(
                "minimum {name} usage per {kind} is {text}, but request is {}",
                r.text()
            )),
            Some(_) => {
                if let Some(l) = lim.filter(|l| l.quantity() < min) {
                    errs.push(format!(
                        "minimum {name} usage per {kind} is {text}, but limit is {}",
                        l.text()
                    ));
                }
            }
        }
    }
    for (name, text, max) in parsed(&item.max) {
        let (req, lim) = (requests.get(&name), limits.get(&name));
        match lim {
            None => errs.push(format!(
                "maximum {name} usage per {kind} is {text}.  No limit is specified"
            )),
            Some(l) if l.quantity() > max => errs.push(format!(
                "maximum {name} usage per {kind} is {text}, but limit is {}",
                l.text()
            )),
            Some(_) => {
                if let Some(r) = req.filter(|r| r.quantity() > max) {
                    errs.push(format!(
                        "maximum {name} usage per {kind} is {text}, but request is {}",
                        r.text()
                    ));
                }
            }
        }
    }
    for (name, text, ratio) in parsed(&item.max_limit_request_ratio) {
        let req = requests.get(&name).map(|r| r.quantity().milli_value());
        let lim = limits.get(&name).map(|l| l.quantity().milli_value());
        match (req, lim) {
            (None | Some(0), _) => errs.push(format!(
                "{name} max limit to request ratio per {kind} is {text}, but no request is specified or request is 0"
            )),
            (_, None | Some(0)) => errs.push(format!(
                "{name} max limit to request ratio per {kind} is {text}, but no limit is specified or limit is 0"
            )),
            (Some(req), Some(lim)) => {
                let observed = lim as f64 / req as f64;
                if observed * 1000.0 > ratio.milli_value() as f64 {
                    errs.push(format!(
                        "{name} max limit to request ratio per {kind} is {text}, but provided ratio is {observed:.6}"
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn range(limits: serde_json::Value) -> Vec<Arc<LimitRange>> {
        vec![Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "lr", "namespace": "default"},
                "spec": {"limits": limits}}))
            .expect("limit range"),
        )]
    }

    fn pod(resources: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": resources}]}}))
        .expect("pod")
    }

    fn requests_of(p: &Pod) -> ResourceList {
        p.spec.as_ref().unwrap().containers[0]
            .resources
            .as_ref()
            .and_then(|r| r.requests.clone())
            .unwrap_or_default()
    }

    #[test]
    fn defaults_fill_only_what_a_container_leaves_out() {
        let ranges = range(json!([{"type": "Container",
            "default": {"cpu": "1", "memory": "1Gi"},
            "defaultRequest": {"cpu": "500m", "memory": "512Mi"}}]));
        let mut p = pod(json!({"requests": {"cpu": "100m"}}));
        assert!(apply_defaults(&mut p, &ranges));
        let req = requests_of(&p);
        assert_eq!(req["cpu"].0, "100m");
        assert_eq!(req["memory"].0, "512Mi");
        let lim = p.spec.as_ref().unwrap().containers[0]
            .resources
            .as_ref()
            .and_then(|r| r.limits.clone())
            .unwrap_or_default();
        assert_eq!(lim["cpu"].0, "1");
        assert!(!apply_defaults(&mut p, &ranges), "nothing left to fill");
    }

    #[test]
    fn min_max_and_ratio_are_refused_in_kubes_words() {
        let ranges = range(json!([
            {"type": "Container", "max": {"cpu": "1"}, "min": {"memory": "64Mi"}},
            {"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}}
        ]));
        let p = pod(json!({"requests": {"cpu": "500m", "memory": "32Mi"},
            "limits": {"cpu": "2"}}));
        assert_eq!(
            violations(&p, &ranges),
            [
                "minimum memory usage per Container is 64Mi, but request is 32Mi",
                "maximum cpu usage per Container is 1, but limit is 2",
                "cpu max limit to request ratio per Container is 2, but provided ratio is 4.000000",
            ]
        );
        let p = pod(json!({"requests": {"cpu": "500m", "memory": "64Mi"}}));
        assert_eq!(
            violations(
                &p,
                &range(json!([{"type": "Container", "max": {"cpu": "1"}}]))
            ),
            ["maximum cpu usage per Container is 1.  No limit is specified"]
        );
        let fits = pod(json!({"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"cpu": "1"}}));
        assert!(violations(&fits, &ranges).is_empty());
    }

    #[test]
    fn pod_items_judge_the_sum_of_containers() {
        let ranges = range(json!([{"type": "Pod", "max": {"cpu": "1"}}]));
        let p: Pod =
            serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "a", "image": "i", "resources": {"limits": {"cpu": "600m"}}},
            {"name": "b", "image": "i", "resources": {"limits": {"cpu": "600m"}}}]}}))
            .unwrap();
        assert_eq!(
            violations(&p, &ranges),
            ["maximum cpu usage per Pod is 1, but limit is 1200m"]
        );
    }
}
