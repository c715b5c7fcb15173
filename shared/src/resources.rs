//! Resource amounts in the units kube-scheduler compares them in: millicores for CPU,
//! whole units for everything else.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

use crate::quantity::{Quantity, QuantityError};

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
pub const PODS: &str = "pods";

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    pub allowed_pods: i64,
    /// Extended resources (`nvidia.com/gpu`, hugepages, ...), in whole units.
    pub scalar: BTreeMap<String, i64>,
}

impl Resources {
    /// Reads a `requests`/`allocatable` map; a quantity that does not parse names its resource.
    pub fn from_map(map: &BTreeMap<String, ApiQuantity>) -> Result<Self, ResourceError> {
        let mut r = Resources::default();
        for (name, quantity) in map {
            let q = Quantity::parse(&quantity.0).map_err(|source| ResourceError {
                resource: name.clone(),
                source,
            })?;
            match name.as_str() {
                CPU => r.milli_cpu = q.milli_value(),
                MEMORY => r.memory = q.value(),
                EPHEMERAL_STORAGE => r.ephemeral_storage = q.value(),
                PODS => r.allowed_pods = q.value(),
                other => {
                    r.scalar.insert(other.to_string(), q.value());
                }
            }
        }
        Ok(r)
    }

    /// Saturating: requests come from whoever creates a pod, and absurd ones must not
    /// overflow (a debug build would panic, a release build wrap to a negative request).
    pub fn add(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.saturating_add(other.milli_cpu);
        self.memory = self.memory.saturating_add(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_add(other.ephemeral_storage);
        self.allowed_pods = self.allowed_pods.saturating_add(other.allowed_pods);
        for (k, v) in &other.scalar {
            let e = self.scalar.entry(k.clone()).or_default();
            *e = e.saturating_add(*v);
        }
    }

    pub fn sub(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.saturating_sub(other.milli_cpu);
        self.memory = self.memory.saturating_sub(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_sub(other.ephemeral_storage);
        self.allowed_pods = self.allowed_pods.saturating_sub(other.allowed_pods);
        for (k, v) in &other.scalar {
            let e = self.scalar.entry(k.clone()).or_default();
            *e = e.saturating_sub(*v);
        }
    }

    /// Element-wise maximum, as an init container's needs are compared with the pod's.
    pub(crate) fn max_with(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        self.allowed_pods = self.allowed_pods.max(other.allowed_pods);
        for (k, v) in &other.scalar {
            let e = self.scalar.entry(k.clone()).or_default();
            *e = (*e).max(*v);
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("resource {resource:?}: {source}")]
pub struct ResourceError {
    pub(crate) resource: String,
    #[source]
    pub(crate) source: QuantityError,
}

fn container_requests(c: &Container) -> Result<Resources, ResourceError> {
    match c.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        Some(req) => Resources::from_map(req),
        None => Ok(Resources::default()),
    }
}

/// What a pod asks of a node, as kube-scheduler's `PodRequests` computes it: the app
/// containers' sum (plus sidecars, which keep running), at least the largest init step
/// (an init container plus the sidecars started before it), plus the pod overhead.
pub fn pod_requests(pod: &Pod) -> Result<Resources, ResourceError> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(Resources::default());
    };
    let mut reqs = Resources::default();
    for c in &spec.containers {
        reqs.add(&container_requests(c)?);
    }
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for ic in spec.init_containers.iter().flatten() {
        let mut step = container_requests(ic)?;
        if ic.restart_policy.as_deref() == Some("Always") {
            reqs.add(&step);
            sidecars.add(&step);
            step = sidecars.clone();
        } else {
            step.add(&sidecars);
        }
        init_peak.max_with(&step);
    }
    reqs.max_with(&init_peak);
    if let Some(overhead) = spec.overhead.as_ref() {
        reqs.add(&Resources::from_map(overhead)?);
    }
    Ok(reqs)
}

/// Which side of containers' resources [`pod_amounts`] sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Requests,
    Limits,
}

/// One container's requests or limits by resource name.
pub fn container_amounts(
    c: &Container,
    side: Side,
) -> Result<BTreeMap<String, Quantity>, ResourceError> {
    let map = c.resources.as_ref().and_then(|r| match side {
        Side::Requests => r.requests.as_ref(),
        Side::Limits => r.limits.as_ref(),
    });
    map.into_iter()
        .flatten()
        .map(|(name, q)| {
            Quantity::parse(&q.0)
                .map(|q| (name.clone(), q))
                .map_err(|source| ResourceError {
                    resource: name.clone(),
                    source,
                })
        })
        .collect()
}

/// A pod's requests or limits by resource name, kept as quantities (quota and limit
/// ranges compare and print them as given): the same sum as [`pod_requests`] — app
/// containers and sidecars, at least the largest init step, plus the overhead (for limits
/// only on resources that have one, as kube's `PodLimits`).
pub fn pod_amounts(pod: &Pod, side: Side) -> Result<BTreeMap<String, Quantity>, ResourceError> {
    type Amounts = BTreeMap<String, Quantity>;
    fn add(to: &mut Amounts, more: &Amounts) {
        for (k, v) in more {
            let e = to.entry(k.clone()).or_insert(Quantity::ZERO);
            *e = e.saturating_add(*v);
        }
    }
    fn max_with(to: &mut Amounts, other: &Amounts) {
        for (k, v) in other {
            let e = to.entry(k.clone()).or_insert(Quantity::ZERO);
            *e = (*e).max(*v);
        }
    }
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(Amounts::new());
    };
    let mut total = Amounts::new();
    for c in &spec.containers {
        add(&mut total, &container_amounts(c, side)?);
    }
    let mut sidecars = Amounts::new();
    let mut init_peak = Amounts::new();
    for ic in spec.init_containers.iter().flatten() {
        let mut step = container_amounts(ic, side)?;
        if ic.restart_policy.as_deref() == Some("Always") {
            add(&mut total, &step);
            add(&mut sidecars, &step);
            step = sidecars.clone();
        } else {
            add(&mut step, &sidecars);
        }
        max_with(&mut init_peak, &step);
    }
    max_with(&mut total, &init_peak);
    for (name, q) in spec.overhead.iter().flatten() {
        if side == Side::Limits && !total.contains_key(name) {
            continue;
        }
        let q = Quantity::parse(&q.0).map_err(|source| ResourceError {
            resource: name.clone(),
            source,
        })?;
        let e = total.entry(name.clone()).or_insert(Quantity::ZERO);
        *e = e.saturating_add(q);
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};

    fn container(name: &str, cpu: &str, mem: &str, restart: Option<&str>) -> Container {
        Container {
            name: name.into(),
            restart_policy: restart.map(String::from),
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([
                    (CPU.to_string(), ApiQuantity(cpu.into())),
                    (MEMORY.to_string(), ApiQuantity(mem.into())),
                ])),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(
        containers: Vec<Container>,
        init: Vec<Container>,
        overhead: Option<(&str, &str)>,
    ) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers,
                init_containers: Some(init),
                overhead: overhead.map(|(c, m)| {
                    BTreeMap::from([
                        (CPU.to_string(), ApiQuantity(c.into())),
                        (MEMORY.to_string(), ApiQuantity(m.into())),
                    ])
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn sums_containers_and_adds_overhead() {
        let p = pod(
            vec![
                container("a", "100m", "64Mi", None),
                container("b", "250m", "64Mi", None),
            ],
            vec![],
            Some(("10m", "1Mi")),
        );
        let r = pod_requests(&p).unwrap();
        assert_eq!(r.milli_cpu, 360);
        assert_eq!(r.memory, 129 << 20);
    }

    #[test]
    fn init_containers_count_by_their_peak() {
        let p = pod(
            vec![container("app", "100m", "1Mi", None)],
            vec![
                container("init-big", "2", "1Mi", None),
                container("init-small", "500m", "8Mi", None),
            ],
            None,
        );
        let r = pod_requests(&p).unwrap();
        assert_eq!(r.milli_cpu, 2000);
        assert_eq!(r.memory, 8 << 20);
    }

    #[test]
    fn sidecars_add_to_the_app_and_to_later_init_steps() {
        // kube-scheduler: sidecar 200m runs beside the app (100m) = 300m; the init step
        // after it needs 1 + 0.2 = 1.2 cores, which is the peak.
        let p = pod(
            vec![container("app", "100m", "1Mi", None)],
            vec![
                container("sidecar", "200m", "1Mi", Some("Always")),
                container("init", "1", "1Mi", None),
            ],
            None,
        );
        let r = pod_requests(&p).unwrap();
        assert_eq!(r.milli_cpu, 1200);
        assert_eq!(r.memory, 2 << 20);
    }

    #[test]
    fn a_bad_quantity_names_its_resource() {
        let p = pod(vec![container("app", "lots", "1Mi", None)], vec![], None);
        let err = pod_requests(&p).unwrap_err();
        assert_eq!(err.resource, "cpu");
        assert!(err.to_string().contains("\"lots\""), "{err}");
    }

    #[test]
    fn absurd_requests_saturate_instead_of_overflowing() {
        let huge = "9223372036854775807";
        let p = pod(
            vec![
                container("a", huge, huge, None),
                container("b", huge, huge, None),
            ],
            vec![],
            Some((huge, huge)),
        );
        let r = pod_requests(&p).unwrap();
        assert_eq!(r.milli_cpu, i64::MAX);
        assert_eq!(r.memory, i64::MAX);
        let mut sum = r.clone();
        sum.add(&r);
        assert_eq!(sum.milli_cpu, i64::MAX);
        sum.sub(&r);
        sum.sub(&r);
        assert!(sum.milli_cpu <= 0);
    }

    #[test]
    fn amounts_agree_with_requests_and_keep_limits_apart() {
        let mut p = pod(
            vec![
                container("a", "100m", "64Mi", None),
                container("b", "250m", "64Mi", None),
            ],
            vec![container("init-big", "2", "1Mi", None)],
            Some(("10m", "1Mi")),
        );
        let r = pod_amounts(&p, Side::Requests).unwrap();
        assert_eq!(r[CPU].canonical(false), "2010m");
        assert_eq!(r[MEMORY].canonical(true), "129Mi");
        // No container has a limit: the overhead adds none.
        assert!(pod_amounts(&p, Side::Limits).unwrap().is_empty());
        let spec = p.spec.as_mut().unwrap();
        spec.containers[0].resources.as_mut().unwrap().limits =
            Some(BTreeMap::from([(CPU.to_string(), ApiQuantity("1".into()))]));
        let l = pod_amounts(&p, Side::Limits).unwrap();
        assert_eq!(l[CPU].canonical(false), "1010m");
        assert!(!l.contains_key(MEMORY));
    }
}
