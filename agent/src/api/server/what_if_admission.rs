//! What a what-if pod may ask, as admission would have it of a pod created: its priority
//! as the Priority admission plugin gives it (from `priorityClassName`, or the global
//! default class, or 0; a `spec.priority` or `preemptionPolicy` other than the class's is
//! refused), no `spec.nodeName` (a what-if asks where the scheduler would place a pod, not
//! what a given node holds), and a bounded number of names of other objects (each one a
//! lookup, here and in every leaf).

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::Api;
use kube::api::ListParams;

/// Names of ConfigMaps, Secrets, PersistentVolumeClaims and ResourceClaims a what-if pod
/// may refer to; a real pod rarely needs a tenth of it.
pub const MAX_REFERENCED_NAMES: usize = 64;

const SPEC: &str = "spec.template.spec";

/// A what-if refused, naming the field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WhatIfRefused {
    /// The Priority admission plugin's answer to a pod whose priority is not its class's.
    #[error(
        "{SPEC}.priority: Forbidden: the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {computed} from the given PriorityClass name"
    )]
    Priority { given: i32, computed: i32 },
    #[error(
        "{SPEC}.preemptionPolicy: Forbidden: the string value of PreemptionPolicy ({given}) must not be provided in pod spec; priority admission controller computed {computed} from the given PriorityClass name"
    )]
    PreemptionPolicy { given: String, computed: String },
    #[error("{SPEC}.priorityClassName: Not found: no PriorityClass with name {0} was found")]
    NoSuchClass(String),
    #[error(
        "{SPEC}.nodeName: Forbidden: may not be set; a what-if asks where the scheduler would place the pod"
    )]
    NodeName,
    #[error(
        "{SPEC}: Too many: refers to {0} ConfigMaps, Secrets, PersistentVolumeClaims and ResourceClaims by name; at most {MAX_REFERENCED_NAMES}"
    )]
    TooManyNames(usize),
}

#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    #[error(transparent)]
    Refused(#[from] WhatIfRefused),
    #[error("cannot read PriorityClasses: {0}")]
    Api(#[from] kube::Error),
}

/// The Priority admission plugin on a what-if pod: reads its PriorityClass (or the global
/// default), then [`admit_priority`].
pub async fn resolve_priority(
    client: &kube::Client,
    spec: &mut PodSpec,
) -> Result<(), AdmissionError> {
    let api: Api<PriorityClass> = Api::all(client.clone());
    let class = match spec
        .priority_class_name
        .as_deref()
        .filter(|n| !n.is_empty())
    {
        Some(name) => Some(
            api.get_opt(name)
                .await?
                .ok_or_else(|| WhatIfRefused::NoSuchClass(name.to_string()))?,
        ),
        None => api
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|c| c.global_default == Some(true))
            // kube takes the lowest of several global defaults.
            .min_by_key(|c| c.value),
    };
    Ok(admit_priority(spec, class.as_ref())?)
}

/// kube's Priority admission given the pod's class (named, or the global default; None:
/// neither, priority 0): a set priority or preemption policy must be the class's; both
/// are then set, with the default class's name.
pub fn admit_priority(
    spec: &mut PodSpec,
    class: Option<&PriorityClass>,
) -> Result<(), WhatIfRefused> {
    let computed = class.and_then(|c| c.value).unwrap_or(0);
    if let Some(given) = spec.priority
        && given != computed
    {
        return Err(WhatIfRefused::Priority { given, computed });
    }
    let policy = class
        .and_then(|c| c.preemption_policy.clone())
        .unwrap_or_else(|| "PreemptLowerPriority".into());
    if let Some(given) = spec.preemption_policy.as_ref()
        && *given != policy
    {
        return Err(WhatIfRefused::PreemptionPolicy {
            given: given.clone(),
            computed: policy,
        });
    }
    spec.priority = Some(computed);
    spec.preemption_policy = Some(policy);
    if let Some(c) = class
        && spec
            .priority_class_name
            .as_deref()
            .is_none_or(str::is_empty)
    {
        spec.priority_class_name = c.metadata.name.clone();
    }
    Ok(())
}

/// Refuses what a what-if pod may not ask (its priority is [`resolve_priority`]'s).
pub fn check(spec: &PodSpec) -> Result<(), WhatIfRefused> {
    if spec.node_name.as_deref().is_some_and(|n| !n.is_empty()) {
        return Err(WhatIfRefused::NodeName);
    }
    let n = referenced_names(spec);
    if n > MAX_REFERENCED_NAMES {
        return Err(WhatIfRefused::TooManyNames(n));
    }
    Ok(())
}

/// Every name of another object the pod refers to (repeats counted: each one is asked).
fn referenced_names(spec: &PodSpec) -> usize {
    let volumes = spec.volumes.iter().flatten().map(|v| {
        let projected = v.projected.iter().flat_map(|p| p.sources.iter().flatten());
        usize::from(v.config_map.is_some())
            + usize::from(v.secret.is_some())
            + usize::from(v.persistent_volume_claim.is_some())
            + projected
                .map(|s| usize::from(s.config_map.is_some()) + usize::from(s.secret.is_some()))
                .sum::<usize>()
    });
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .map(|c| {
            let env = c.env.iter().flatten().filter_map(|e| e.value_from.as_ref());
            let env = env
                .map(|f| {
                    usize::from(f.config_map_key_ref.is_some())
                        + usize::from(f.secret_key_ref.is_some())
                })
                .sum::<usize>();
            let env_from = c
                .env_from
                .iter()
                .flatten()
                .map(|f| {
                    usize::from(f.config_map_ref.is_some()) + usize::from(f.secret_ref.is_some())
                })
                .sum::<usize>();
            env + env_from
        });
    let ephemeral = spec.ephemeral_containers.iter().flatten().map(|c| {
        c.env_from.iter().flatten().count()
            + c.env
                .iter()
                .flatten()
                .filter(|e| e.value_from.is_some())
                .count()
    });
    volumes.sum::<usize>()
        + containers.sum::<usize>()
        + ephemeral.sum::<usize>()
        + spec.image_pull_secrets.iter().flatten().count()
        + spec.resource_claims.iter().flatten().count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(extra: serde_json::Value) -> PodSpec {
        let mut v = json!({"containers": [{"name": "c", "image": "i"}]});
        if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
            v.extend(extra.clone());
        }
        serde_json::from_value(v).expect("spec")
    }

    #[test]
    fn a_plain_pod_is_admitted() {
        assert_eq!(check(&spec(json!({"priorityClassName": "high"}))), Ok(()));
    }

    fn class(name: &str, value: i32, default: bool) -> PriorityClass {
        serde_json::from_value(
            json!({"metadata": {"name": name}, "value": value, "globalDefault": default}),
        )
        .expect("class")
    }

    #[test]
    fn the_priority_is_the_classes_as_admission_gives_it() {
        let high = class("high", 1000, false);
        // No class, no default: 0.
        let mut s = spec(json!({}));
        assert_eq!(admit_priority(&mut s, None), Ok(()));
        assert_eq!(s.priority, Some(0));
        // The named class's value; the same value given is accepted (a pod read back
        // from the API server carries it).
        let mut s = spec(json!({"priorityClassName": "high", "priority": 1000}));
        assert_eq!(admit_priority(&mut s, Some(&high)), Ok(()));
        assert_eq!(s.priority, Some(1000));
        assert_eq!(s.preemption_policy.as_deref(), Some("PreemptLowerPriority"));
        // The global default names itself.
        let mut s = spec(json!({}));
        assert_eq!(
            admit_priority(&mut s, Some(&class("normal", 10, true))),
            Ok(())
        );
        assert_eq!(
            (s.priority, s.priority_class_name.as_deref()),
            (Some(10), Some("normal"))
        );
    }

    #[test]
    fn a_chosen_priority_and_a_node_name_are_refused_naming_the_field() {
        let mut s = spec(json!({"priority": 2147483647}));
        let e = admit_priority(&mut s, None).expect_err("priority");
        assert_eq!(
            e.to_string(),
            "spec.template.spec.priority: Forbidden: the integer value of priority (2147483647) must not be provided in pod spec; priority admission controller computed 0 from the given PriorityClass name"
        );
        let mut s = spec(json!({"priorityClassName": "high", "priority": 2147483647}));
        assert!(admit_priority(&mut s, Some(&class("high", 1000, false))).is_err());
        let mut s = spec(json!({"preemptionPolicy": "Never"}));
        let e = admit_priority(&mut s, None).expect_err("policy");
        assert!(
            e.to_string()
                .starts_with("spec.template.spec.preemptionPolicy:"),
            "{e}"
        );
        let e = check(&spec(json!({"nodeName": "n1"}))).expect_err("nodeName");
        assert!(
            e.to_string().starts_with("spec.template.spec.nodeName:"),
            "{e}"
        );
    }

    #[test]
    fn referenced_names_are_bounded() {
        let secrets = |n: usize| {
            let volumes: Vec<_> = (0..n)
                .map(
                    |i| json!({"name": format!("v{i}"), "secret": {"secretName": format!("s{i}")}}),
                )
                .collect();
            spec(json!({"volumes": volumes}))
        };
        assert_eq!(check(&secrets(MAX_REFERENCED_NAMES)), Ok(()));
        assert_eq!(
            check(&secrets(30_000)),
            Err(WhatIfRefused::TooManyNames(30_000))
        );
        let env: Vec<_> = (0..=MAX_REFERENCED_NAMES)
            .map(|i| json!({"name": format!("E{i}"), "valueFrom": {"configMapKeyRef": {"name": format!("c{i}"), "key": "k"}}}))
            .collect();
        let s = spec(json!({"containers": [{"name": "c", "image": "i", "env": env}]}));
        assert_eq!(
            check(&s),
            Err(WhatIfRefused::TooManyNames(MAX_REFERENCED_NAMES + 1))
        );
    }
}
