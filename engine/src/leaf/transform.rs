//! What a host pod becomes in its leaf, and what of the leaf pod flows back. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    PersistentVolumeClaimSpec, Pod, PodAffinity, PodAffinityTerm, PodAntiAffinity, PodSpec,
    PodStatus, Volume, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use mcsched_shared::keys;

/// Why a pod cannot be mirrored into a leaf.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum TransformError {
    #[error("annotation {annotation}: not a JSON object of strings: {reason}")]
    LeafNodeSelector { annotation: String, reason: String },
}

/// The leaf node selector a pod asks for through its annotation; empty when none.
pub(crate) fn leaf_node_selector(pod: &Pod) -> Result<BTreeMap<String, String>, TransformError> {
    let Some(raw) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(keys::LEAF_NODE_SELECTOR_ANNOTATION))
    else {
        return Ok(BTreeMap::new());
    };
    serde_json::from_str(raw).map_err(|e| TransformError::LeafNodeSelector {
        annotation: keys::LEAF_NODE_SELECTOR_ANNOTATION.to_string(),
        reason: e.to_string(),
    })
}

/// The domain of the leaf's node labels its pod group was placed in; empty when none.
fn leaf_domain(pod: &Pod) -> Result<BTreeMap<String, String>, TransformError> {
    let Some(raw) =
        (pod.metadata.annotations.as_ref()).and_then(|a| a.get(keys::LEAF_DOMAIN_ANNOTATION))
    else {
        return Ok(BTreeMap::new());
    };
    serde_json::from_str(raw).map_err(|e| TransformError::LeafNodeSelector {
        annotation: keys::LEAF_DOMAIN_ANNOTATION.to_string(),
        reason: e.to_string(),
    })
}

/// The pod to create in leaf `cluster` for `host`: same namespace, name, labels and
/// containers; what the host decided removed (node name, scheduler, priority — pod sync
/// puts the PriorityClass's name back where the leaf has that class — node selector,
/// node affinity, and pod affinity and topology spread over more than one node — there
/// the virtual node was one node — and the leaf taint's tolerations);
/// the leaf node selector annotation becomes the node selector; the host's ServiceAccount
/// token volume dropped, as the leaf mounts its own. The result is exactly what the
/// leaf feasibility check ran its filters on.
pub fn leaf_pod(host: &Pod, cluster: &str, host_id: &str) -> Result<Pod, TransformError> {
    let selector = leaf_node_selector(host)?;
    let mut labels = host.metadata.labels.clone().unwrap_or_default();
    labels.insert(keys::MANAGED_CLUSTER_LABEL.into(), cluster.into());
    labels.insert(keys::HOST_ID_LABEL.into(), host_id.into());
    labels.insert(keys::MANAGED_BY_LABEL.into(), keys::MANAGED_BY_VALUE.into());
    let mut annotations = host.metadata.annotations.clone().unwrap_or_default();
    // The host's record of its copy, not the copy's.
    annotations.remove(keys::LEAF_POD_UID_ANNOTATION);
    annotations.insert(
        keys::HOST_POD_UID_ANNOTATION.into(),
        host.metadata.uid.clone().unwrap_or_default(),
    );
    let mut spec = host.spec.clone().unwrap_or_default();
    spec.node_name = None;
    spec.scheduler_name = None;
    spec.priority_class_name = None;
    spec.priority = None;
    spec.preemption_policy = None;
    // The gang was placed whole in the host; the leaf has no PodGroup to wait for.
    spec.scheduling_group = None;
    spec.node_selector = (!selector.is_empty()).then_some(selector);
    // Affinity and spreading were decided in the host, where the virtual node is one
    // node of the topology. What is about single nodes means the same in the leaf and
    // is kept for its scheduler (and judged by the leaf check against the leaf's pods);
    // node affinity (host node labels) and wider topologies stay decided in the host.
    spec.affinity = spec.affinity.take().and_then(node_level_affinity);
    let domain = leaf_domain(host)?;
    if !domain.is_empty() {
        // Beside a node selector of the user's own: both must hold.
        let term = NodeSelectorTerm {
            match_expressions: Some(
                domain
                    .into_iter()
                    .map(|(key, value)| NodeSelectorRequirement {
                        key,
                        operator: "In".into(),
                        values: Some(vec![value]),
                    })
                    .collect(),
            ),
            ..Default::default()
        };
        let affinity = spec.affinity.get_or_insert_with(Default::default);
        affinity.node_affinity = Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![term],
            }),
            ..Default::default()
        });
    }
    spec.topology_spread_constraints = spec
        .topology_spread_constraints
        .take()
        .map(|cs| {
            cs.into_iter()
                .filter(|c| c.topology_key == NODE_TOPOLOGY_KEY)
                .collect::<Vec<_>>()
        })
        .filter(|cs| !cs.is_empty());
    if let Some(t) = spec.tolerations.as_mut() {
        t.retain(|t| !t.key.as_deref().is_some_and(keys::is_leaf_taint));
    }
    strip_service_account_token(&mut spec);
    Ok(Pod {
        metadata: ObjectMeta {
            name: host.metadata.name.clone(),
            namespace: host.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    })
}

/// The topology key that names one node in every cluster (the kubelet sets it).
pub(crate) const NODE_TOPOLOGY_KEY: &str = "kubernetes.io/hostname";

/// The pod (anti-)affinity terms over single nodes; node affinity dropped.
fn node_level_affinity(affinity: Affinity) -> Option<Affinity> {
    fn keep<T>(terms: Option<Vec<T>>, key: fn(&T) -> &str) -> Option<Vec<T>> {
        terms
            .map(|ts| {
                ts.into_iter()
                    .filter(|t| key(t) == NODE_TOPOLOGY_KEY)
                    .collect::<Vec<_>>()
            })
            .filter(|ts| !ts.is_empty())
    }
    fn required(t: &PodAffinityTerm) -> &str {
        &t.topology_key
    }
    fn preferred(t: &WeightedPodAffinityTerm) -> &str {
        &t.pod_affinity_term.topology_key
    }
    let pod_affinity = affinity
        .pod_affinity
        .map(|a| PodAffinity {
            required_during_scheduling_ignored_during_execution: keep(
                a.required_during_scheduling_ignored_during_execution,
                required,
            ),
            preferred_during_scheduling_ignored_during_execution: keep(
                a.preferred_during_scheduling_ignored_during_execution,
                preferred,
            ),
        })
        .filter(|a| a != &PodAffinity::default());
    let pod_anti_affinity = affinity
        .pod_anti_affinity
        .map(|a| PodAntiAffinity {
            required_during_scheduling_ignored_during_execution: keep(
                a.required_during_scheduling_ignored_during_execution,
                required,
            ),
            preferred_during_scheduling_ignored_during_execution: keep(
                a.preferred_during_scheduling_ignored_during_execution,
                preferred,
            ),
        })
        .filter(|a| a != &PodAntiAffinity::default());
    (pod_affinity.is_some() || pod_anti_affinity.is_some()).then_some(Affinity {
        node_affinity: None,
        pod_affinity,
        pod_anti_affinity,
    })
}

/// A host claim's spec as its leaf copy carries it: bound in the leaf by the leaf's own
/// volumes or provisioner, so without the host's volume name.
pub fn leaf_claim_spec(host: &PersistentVolumeClaimSpec) -> PersistentVolumeClaimSpec {
    PersistentVolumeClaimSpec {
        access_modes: host.access_modes.clone(),
        resources: host.resources.clone(),
        storage_class_name: host.storage_class_name.clone(),
        volume_mode: host.volume_mode.clone(),
        selector: host.selector.clone(),
        ..Default::default()
    }
}

/// The host admission's token volume (`kube-api-access-*`): a projected token valid only
/// in the host, with the host's `kube-root-ca.crt`; the leaf's admission adds its own.
fn is_token_volume(v: &Volume) -> bool {
    v.name.starts_with("kube-api-access-")
        && v.projected.as_ref().is_some_and(|p| {
            p.sources
                .iter()
                .flatten()
                .any(|s| s.service_account_token.is_some())
        })
}

fn strip_service_account_token(spec: &mut PodSpec) {
    let dropped: Vec<String> = spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| is_token_volume(v))
        .map(|v| v.name.clone())
        .collect();
    if dropped.is_empty() {
        return;
    }
    if let Some(vs) = spec.volumes.as_mut() {
        vs.retain(|v| !dropped.contains(&v.name));
    }
    let containers = spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten());
    for c in containers {
        if let Some(m) = c.volume_mounts.as_mut() {
            m.retain(|m| !dropped.contains(&m.name));
        }
    }
}

/// The host pod's status as the leaf reports it; the host keeps its own scheduling
/// condition (PodScheduled is about the virtual node, which the host decided).
pub fn host_status(leaf: &PodStatus, host: Option<&PodStatus>) -> PodStatus {
    let mut conditions: Vec<_> = leaf
        .conditions
        .iter()
        .flatten()
        .filter(|c| c.type_ != "PodScheduled")
        .cloned()
        .collect();
    if let Some(scheduled) = host
        .and_then(|h| h.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
    {
        conditions.insert(0, scheduled.clone());
    }
    PodStatus {
        phase: leaf.phase.clone(),
        conditions: Some(conditions),
        message: leaf.message.clone(),
        reason: leaf.reason.clone(),
        pod_ip: leaf.pod_ip.clone(),
        pod_ips: leaf.pod_ips.clone(),
        start_time: leaf.start_time.clone(),
        container_statuses: leaf.container_statuses.clone(),
        init_container_statuses: leaf.init_container_statuses.clone(),
        ephemeral_container_statuses: leaf.ephemeral_container_statuses.clone(),
        qos_class: leaf.qos_class.clone(),
        host_ip: host.and_then(|h| h.host_ip.clone()),
        host_ips: host.and_then(|h| h.host_ips.clone()),
        nominated_node_name: None,
        ..Default::default()
    }
}

/// Whether the parts of the status the host mirrors differ.
pub fn status_differs(a: &PodStatus, b: &PodStatus) -> bool {
    a.phase != b.phase
        || a.pod_ip != b.pod_ip
        || a.reason != b.reason
        || a.message != b.message
        || a.container_statuses != b.container_statuses
        || a.init_container_statuses != b.init_container_statuses
        || strip_times(&a.conditions) != strip_times(&b.conditions)
}

fn strip_times(
    cs: &Option<Vec<k8s_openapi::api::core::v1::PodCondition>>,
) -> Vec<(String, String, Option<String>)> {
    cs.iter()
        .flatten()
        .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
        .collect()
}

/// Names of the ConfigMaps, Secrets, PVCs and DRA objects a pod refers to, which must
/// exist in the leaf before the pod can start there.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Dependencies {
    pub config_maps: Vec<String>,
    pub secrets: Vec<String>,
    pub claims: Vec<String>,
    /// ResourceClaimTemplates (`spec.resourceClaims[].resourceClaimTemplateName`): the
    /// leaf's claim controller makes the leaf pod's claims from their copies.
    pub claim_templates: Vec<String>,
    /// ResourceClaims named by `spec.resourceClaims[].resourceClaimName`.
    pub resource_claims: Vec<String>,
    /// ConfigMaps and Secrets every reference to which is `optional: true`: the pod
    /// starts without them, as a kubelet starts it.
    pub(crate) optional: std::collections::BTreeSet<String>,
}

impl Dependencies {
    pub fn is_optional(&self, kind: &str, name: &str) -> bool {
        self.optional.contains(&format!("{kind}/{name}"))
    }
}

/// The ServiceAccount a copy runs as when it is not the namespace's `default` (which
/// every namespace has: its controller creates it).
pub fn service_account(pod: &Pod) -> Option<&str> {
    let spec = pod.spec.as_ref()?;
    spec.service_account_name
        .as_deref()
        .or(spec.service_account.as_deref())
        .filter(|n| !n.is_empty() && *n != "default")
}

pub fn dependencies(pod: &Pod) -> Dependencies {
    let mut d = Dependencies::default();
    let Some(spec) = pod.spec.as_ref() else {
        return d;
    };
    let push = |v: &mut Vec<String>, name: Option<&String>| {
        if let Some(n) = name.filter(|n| !n.is_empty())
            && !v.contains(n)
        {
            v.push(n.clone());
        }
    };
    // Names seen with `optional: true`, and names some reference requires.
    let mut maybe = std::collections::BTreeSet::new();
    let mut required = std::collections::BTreeSet::new();
    let mut note = |kind: &str, name: Option<&String>, optional: Option<bool>| {
        if let Some(n) = name {
            let key = format!("{kind}/{n}");
            if optional == Some(true) {
                maybe.insert(key);
            } else {
                required.insert(key);
            }
        }
    };
    // The token volume is not copied (the leaf gives its own), nor is what it projects.
    for vol in spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| !is_token_volume(v))
    {
        push(&mut d.config_maps, vol.config_map.as_ref().map(|c| &c.name));
        note(
            "ConfigMap",
            vol.config_map.as_ref().map(|c| &c.name),
            vol.config_map.as_ref().and_then(|c| c.optional),
        );
        push(
            &mut d.secrets,
            vol.secret.as_ref().and_then(|s| s.secret_name.as_ref()),
        );
        note(
            "Secret",
            vol.secret.as_ref().and_then(|s| s.secret_name.as_ref()),
            vol.secret.as_ref().and_then(|s| s.optional),
        );
        push(
            &mut d.claims,
            vol.persistent_volume_claim.as_ref().map(|c| &c.claim_name),
        );
        for src in vol
            .projected
            .as_ref()
            .and_then(|p| p.sources.as_ref())
            .into_iter()
            .flatten()
        {
            push(&mut d.config_maps, src.config_map.as_ref().map(|c| &c.name));
            note(
                "ConfigMap",
                src.config_map.as_ref().map(|c| &c.name),
                src.config_map.as_ref().and_then(|c| c.optional),
            );
            push(&mut d.secrets, src.secret.as_ref().map(|s| &s.name));
            note(
                "Secret",
                src.secret.as_ref().map(|s| &s.name),
                src.secret.as_ref().and_then(|s| s.optional),
            );
        }
    }
    for s in spec.image_pull_secrets.iter().flatten() {
        push(&mut d.secrets, Some(&s.name));
        // A missing pull secret does not stop a kubelet either.
        note("Secret", Some(&s.name), Some(true));
    }
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    for c in containers {
        for from in c.env_from.iter().flatten() {
            push(
                &mut d.config_maps,
                from.config_map_ref.as_ref().map(|r| &r.name),
            );
            note(
                "ConfigMap",
                from.config_map_ref.as_ref().map(|r| &r.name),
                from.config_map_ref.as_ref().and_then(|r| r.optional),
            );
            push(&mut d.secrets, from.secret_ref.as_ref().map(|r| &r.name));
            note(
                "Secret",
                from.secret_ref.as_ref().map(|r| &r.name),
                from.secret_ref.as_ref().and_then(|r| r.optional),
            );
        }
        for env in c.env.iter().flatten() {
            let Some(from) = env.value_from.as_ref() else {
                continue;
            };
            push(
                &mut d.config_maps,
                from.config_map_key_ref.as_ref().map(|r| &r.name),
            );
            note(
                "ConfigMap",
                from.config_map_key_ref.as_ref().map(|r| &r.name),
                from.config_map_key_ref.as_ref().and_then(|r| r.optional),
            );
            push(
                &mut d.secrets,
                from.secret_key_ref.as_ref().map(|r| &r.name),
            );
            note(
                "Secret",
                from.secret_key_ref.as_ref().map(|r| &r.name),
                from.secret_key_ref.as_ref().and_then(|r| r.optional),
            );
        }
    }
    // The copy keeps `spec.resourceClaims` as it is: what it names must be in the leaf.
    for c in spec.resource_claims.iter().flatten() {
        push(
            &mut d.claim_templates,
            c.resource_claim_template_name.as_ref(),
        );
        push(&mut d.resource_claims, c.resource_claim_name.as_ref());
    }
    d.optional = maybe.difference(&required).cloned().collect();
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).expect("test pod")
    }

    #[test]
    fn only_single_node_topologies_go_to_the_leaf() {
        let term = |key: &str| json!({"topologyKey": key, "labelSelector": {"matchLabels": {"app": "web"}}});
        let spread = |key: &str| {
            json!({"maxSkew": 1, "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}})
        };
        let host = pod(json!({
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"containers": [{"name": "c", "image": "i"}],
                "affinity": {
                    "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("topology.kubernetes.io/zone")]},
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [term("mcsched.io/region")],
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 10, "podAffinityTerm": term("kubernetes.io/hostname")}]}},
                "topologySpreadConstraints": [spread("mcsched.io/region"), spread("kubernetes.io/hostname")]}
        }));
        let leaf = leaf_pod(&host, "east", "h1").expect("transform");
        let spec = leaf.spec.expect("spec");
        let affinity = spec.affinity.expect("the hostname term");
        assert!(affinity.pod_affinity.is_none(), "a zone term is the host's");
        let anti = affinity.pod_anti_affinity.expect("anti-affinity");
        assert!(
            anti.required_during_scheduling_ignored_during_execution
                .is_none()
        );
        assert_eq!(
            anti.preferred_during_scheduling_ignored_during_execution
                .map(|t| t.len()),
            Some(1)
        );
        let kept: Vec<_> = spec
            .topology_spread_constraints
            .into_iter()
            .flatten()
            .map(|c| c.topology_key)
            .collect();
        assert_eq!(kept, [NODE_TOPOLOGY_KEY]);

        let mut plain = host.clone();
        if let Some(s) = plain.spec.as_mut() {
            s.affinity = None;
            s.topology_spread_constraints =
                Some(vec![serde_json::from_value(spread("zone")).expect("c")]);
        }
        let spec = leaf_pod(&plain, "east", "h1")
            .expect("transform")
            .spec
            .expect("spec");
        assert!(spec.affinity.is_none());
        assert!(spec.topology_spread_constraints.is_none());
    }

    #[test]
    fn host_scheduling_is_stripped_and_the_leaf_selector_applied() {
        let host = pod(json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u-1",
                "labels": {"app": "web"},
                "annotations": {"mcsched.io/leaf-node-selector": "{\"disk\":\"ssd\"}"}},
            "spec": {
                "nodeName": "mcsched-east", "schedulerName": "mcsched",
                "schedulingGroup": {"podGroupName": "train"},
                "hostnameOverride": "web-0",
                "nodeSelector": {"mcsched.io/cluster": "east"},
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                    {"nodeSelectorTerms": [{"matchExpressions": [{"key": "topology.kubernetes.io/region", "operator": "In", "values": ["eu"]}]}]}},
                    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}]}},
                "tolerations": [{"key": "mcsched.io/leaf", "operator": "Exists"}, {"key": "gpu", "operator": "Exists"}],
                "containers": [{"name": "c", "image": "nginx",
                    "volumeMounts": [{"name": "kube-api-access-x1", "mountPath": "/var/run/secrets"}]}],
                "volumes": [{"name": "kube-api-access-x1", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}]
            }
        }));
        let leaf = leaf_pod(&host, "east", "h1").expect("transform");
        let spec = leaf.spec.as_ref().expect("spec");
        assert_eq!(spec.node_name, None);
        assert_eq!(spec.scheduler_name, None);
        // The gang is the host's; what v1.36 adds to a pod otherwise goes along.
        assert_eq!(spec.scheduling_group, None);
        assert_eq!(spec.hostname_override.as_deref(), Some("web-0"));
        assert_eq!(
            spec.node_selector,
            Some(BTreeMap::from([("disk".to_string(), "ssd".to_string())]))
        );
        // Node affinity goes; anti-affinity over single nodes stays for the leaf.
        let affinity = spec.affinity.as_ref().expect("node-level terms kept");
        assert!(affinity.node_affinity.is_none());
        let anti = affinity.pod_anti_affinity.as_ref().expect("anti-affinity");
        assert_eq!(
            anti.required_during_scheduling_ignored_during_execution
                .as_ref()
                .map(Vec::len),
            Some(1)
        );
        let tolerations: Vec<_> = spec
            .tolerations
            .iter()
            .flatten()
            .filter_map(|t| t.key.clone())
            .collect();
        assert_eq!(tolerations, ["gpu"]);
        assert!(spec.volumes.as_ref().is_some_and(|v| v.is_empty()));
        assert!(
            spec.containers[0]
                .volume_mounts
                .as_ref()
                .is_some_and(|m| m.is_empty())
        );
        let labels = leaf.metadata.labels.as_ref().expect("labels");
        assert_eq!(labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(
            labels.get(keys::MANAGED_CLUSTER_LABEL).map(String::as_str),
            Some("east")
        );
        assert_eq!(
            leaf.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(keys::HOST_POD_UID_ANNOTATION))
                .map(String::as_str),
            Some("u-1")
        );
    }

    #[test]
    fn a_leaf_domain_is_required_beside_the_users_leaf_selector() {
        let host = pod(json!({
            "metadata": {"name": "p", "annotations": {
                "mcsched.io/leaf-node-selector": "{\"disk\": \"ssd\"}",
                "mcsched.io/leaf-domain": "{\"topology.kubernetes.io/zone\": \"a\"}"}},
            "spec": {"containers": [],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                    {"nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "host-only", "operator": "Exists"}]}]}}}}
        }));
        let leaf = leaf_pod(&host, "east", "h1").expect("transform");
        let spec = leaf.spec.expect("spec");
        assert_eq!(
            spec.node_selector,
            Some(BTreeMap::from([("disk".to_string(), "ssd".to_string())]))
        );
        let required = serde_json::to_value(
            spec.affinity
                .and_then(|a| a.node_affinity)
                .and_then(|n| n.required_during_scheduling_ignored_during_execution),
        )
        .expect("json");
        assert_eq!(
            required,
            json!({"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]}]})
        );
        let bad = pod(json!({
            "metadata": {"name": "p", "annotations": {"mcsched.io/leaf-domain": "zone=a"}},
            "spec": {"containers": []}
        }));
        let err = leaf_pod(&bad, "east", "h1").expect_err("must fail");
        assert!(err.to_string().contains("mcsched.io/leaf-domain"), "{err}");
    }

    #[test]
    fn a_malformed_leaf_selector_names_the_annotation() {
        let host = pod(json!({
            "metadata": {"name": "p", "annotations": {"mcsched.io/leaf-node-selector": "disk=ssd"}},
            "spec": {"containers": []}
        }));
        let err = leaf_pod(&host, "east", "h1").expect_err("must fail");
        assert!(
            err.to_string().contains("mcsched.io/leaf-node-selector"),
            "{err}"
        );
    }

    #[test]
    fn dependencies_cover_volumes_env_and_pull_secrets() {
        let p = pod(json!({
            "metadata": {"name": "p"},
            "spec": {
                "imagePullSecrets": [{"name": "regcred"}],
                "containers": [{"name": "c",
                    "envFrom": [{"configMapRef": {"name": "cm-env"}}, {"secretRef": {"name": "s-env"}}],
                    "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s-key", "key": "k"}}},
                            {"name": "Y", "valueFrom": {"configMapKeyRef": {"name": "cm-env", "key": "k"}}}]}],
                "volumes": [
                    {"name": "a", "configMap": {"name": "cm-vol"}},
                    {"name": "b", "secret": {"secretName": "s-vol"}},
                    {"name": "c", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "d", "projected": {"sources": [{"configMap": {"name": "cm-proj"}}, {"secret": {"name": "s-proj"}}]}},
                    {"name": "kube-api-access-x1", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt"}}]}}
                ]
            }
        }));
        let d = dependencies(&p);
        assert_eq!(d.config_maps, ["cm-vol", "cm-proj", "cm-env"]);
        assert_eq!(d.secrets, ["s-vol", "s-proj", "regcred", "s-env", "s-key"]);
        assert_eq!(d.claims, ["data"]);
        assert!(d.claim_templates.is_empty() && d.resource_claims.is_empty());
    }

    #[test]
    fn dependencies_cover_resource_claim_templates_and_named_claims() {
        let p = pod(json!({
            "metadata": {"name": "p"},
            "spec": {
                "containers": [{"name": "c", "image": "i",
                    "resources": {"claims": [{"name": "gpu"}, {"name": "nic"}]}}],
                "resourceClaims": [
                    {"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
                    {"name": "nic", "resourceClaimName": "shared-nic"},
                    {"name": "gpu2", "resourceClaimTemplateName": "one-gpu"},
                    {"name": "empty", "resourceClaimName": ""}
                ]
            }
        }));
        let d = dependencies(&p);
        assert_eq!(d.claim_templates, ["one-gpu"]);
        assert_eq!(d.resource_claims, ["shared-nic"]);
        assert!(d.config_maps.is_empty() && d.claims.is_empty());
    }

    #[test]
    fn status_flows_back_but_the_host_keeps_its_scheduling_condition() {
        let leaf: PodStatus = serde_json::from_value(json!({
            "phase": "Running", "podIP": "10.1.0.7",
            "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]
        }))
        .expect("status");
        let host: PodStatus = serde_json::from_value(json!({
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True", "reason": "ByMcsched"}]
        }))
        .expect("status");
        let s = host_status(&leaf, Some(&host));
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.pod_ip.as_deref(), Some("10.1.0.7"));
        let cs = s.conditions.as_ref().expect("conditions");
        assert_eq!(cs.len(), 2);
        assert_eq!(cs[0].reason.as_deref(), Some("ByMcsched"));
        assert!(status_differs(&s, &host));
        assert!(!status_differs(&s, &s.clone()));
    }
}
