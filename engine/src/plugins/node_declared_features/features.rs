//! The node declared features of Kubernetes v1.37 (component-helpers'
//! `nodedeclaredfeatures/features.AllFeatures`), as kube's `ndf.DefaultFramework` holds
//! them: sorted by name, each with its scheduling inference (`InferForScheduling`, from the
//! pod's spec alone) and its version window (`MaxVersion`). Only what scheduling uses is
//! here: `Discover` is the kubelet's, and `InferForUpdate` (in-place resizes) is
//! the API server's admission of pod updates.

use k8s_openapi::api::core::v1::{Container, PodSpec, VolumeMount};

/// A Kubernetes release, `major.minor.patch`: the scheduler's own and a feature's
/// MaxVersion. Neither is ever a pre-release here, so the triple orders them as
/// semantic versioning does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Version(pub(crate) u32, pub(crate) u32, pub(crate) u32);

/// The version kube-scheduler infers requirements at (its own, `version.Get()`): the
/// reference release's scheduler, v1.37.2. The leaf check infers at it too: no feature
/// of v1.37 has a MaxVersion, so a leaf scheduler of another version infers the same.
pub(crate) const SCHEDULER_VERSION: Version = Version(1, 37, 2);

/// One declared feature (kube's `types.Feature`, as far as scheduling reads it).
pub(crate) struct Feature {
    /// The name nodes list in `status.declaredFeatures`.
    pub(crate) name: &'static str,
    /// Whether scheduling a pod of this spec needs a node declaring the feature.
    pub(crate) infer_for_scheduling: fn(&PodSpec) -> bool,
    /// The last version (inclusive) at which the feature is still a scheduling factor:
    /// past it every node of the version skew has it. None: no upper bound.
    pub(crate) max_version: Option<Version>,
}

/// Every feature of v1.37, sorted by name (kube's `New` sorts its registry).
pub(crate) static REGISTRY: &[Feature] = &[
    // dranodeallocatableresources: does not affect pod scheduling.
    Feature {
        name: "DRANodeAllocatableResources",
        infer_for_scheduling: never,
        max_version: None,
    },
    // draoptionalnodeoperations: a claim's allocation is not known at PreFilter;
    // DynamicResources filters for it.
    Feature {
        name: "DRAOptionalNodeOperations",
        infer_for_scheduling: never,
        max_version: None,
    },
    // extendwebsocketstokubelet: does not affect scheduling.
    Feature {
        name: "ExtendWebSocketsToKubelet",
        infer_for_scheduling: never,
        max_version: None,
    },
    // inplacepodresize (pod-level resources): only relevant for pod updates.
    Feature {
        name: "InPlacePodLevelResourcesVerticalScaling",
        infer_for_scheduling: never,
        max_version: None,
    },
    // inplacepodresize (non-sidecar init containers): only relevant for pod updates.
    Feature {
        name: "InPlacePodVerticalScalingInitContainers",
        infer_for_scheduling: never,
        max_version: None,
    },
    // inplacepodresize (memory-backed volumes): only relevant for pod updates.
    Feature {
        name: "InPlacePodVerticalScalingMemoryBackedVolumes",
        infer_for_scheduling: never,
        max_version: None,
    },
    Feature {
        name: "RestartAllContainersOnContainerExits",
        infer_for_scheduling: restarts_all_containers,
        max_version: None,
    },
    Feature {
        name: "UserNamespacesHostNetworkSupport",
        infer_for_scheduling: user_namespaces_with_host_network,
        max_version: None,
    },
    Feature {
        name: "VolumeBindMountOptions",
        infer_for_scheduling: bind_mount_options,
        max_version: None,
    },
];

/// The features of `registry` that scheduling a pod of `spec` requires at `version`
/// (kube's `Framework.InferForPodScheduling`), in the registry's order: a feature past
/// its MaxVersion is required of no node.
pub(crate) fn infer_for_pod_scheduling(
    registry: &[Feature],
    spec: &PodSpec,
    version: Version,
) -> Vec<&'static str> {
    registry
        .iter()
        .filter(|f| f.max_version.is_none_or(|max| version <= max))
        .filter(|f| (f.infer_for_scheduling)(spec))
        .map(|f| f.name)
        .collect()
}

fn never(_: &PodSpec) -> bool {
    false
}

/// restartallcontainers: a container or init container with a restart rule whose action
/// is RestartAllContainers (ephemeral containers are not looked at, as upstream).
fn restarts_all_containers(spec: &PodSpec) -> bool {
    let restarts_all = |c: &Container| {
        c.restart_policy_rules
            .iter()
            .flatten()
            .any(|r| r.action == "RestartAllContainers")
    };
    spec.containers.iter().any(restarts_all)
        || spec.init_containers.iter().flatten().any(restarts_all)
}

/// usernamespaceshostnetwork: host network in a user namespace (`hostUsers: false`).
fn user_namespaces_with_host_network(spec: &PodSpec) -> bool {
    spec.host_network == Some(true) && spec.host_users == Some(false)
}

/// volumebindmountoptions: a volume mount of any container, init container or ephemeral
/// container with bind mount options.
fn bind_mount_options(spec: &PodSpec) -> bool {
    let has_options = |mounts: Option<&Vec<VolumeMount>>| {
        mounts
            .into_iter()
            .flatten()
            .any(|m| m.bind_mount_options.as_ref().is_some_and(|o| !o.is_empty()))
    };
    spec.containers
        .iter()
        .any(|c| has_options(c.volume_mounts.as_ref()))
        || spec
            .init_containers
            .iter()
            .flatten()
            .any(|c| has_options(c.volume_mounts.as_ref()))
        || spec
            .ephemeral_containers
            .iter()
            .flatten()
            .any(|c| has_options(c.volume_mounts.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> PodSpec {
        serde_json::from_value(v).expect("pod spec")
    }

    fn required(s: &PodSpec) -> Vec<&'static str> {
        infer_for_pod_scheduling(REGISTRY, s, SCHEDULER_VERSION)
    }

    #[test]
    fn the_registry_is_v1_37s_sorted_by_name() {
        let names: Vec<&str> = REGISTRY.iter().map(|f| f.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(names, sorted);
        assert_eq!(
            names,
            [
                "DRANodeAllocatableResources",
                "DRAOptionalNodeOperations",
                "ExtendWebSocketsToKubelet",
                "InPlacePodLevelResourcesVerticalScaling",
                "InPlacePodVerticalScalingInitContainers",
                "InPlacePodVerticalScalingMemoryBackedVolumes",
                "RestartAllContainersOnContainerExits",
                "UserNamespacesHostNetworkSupport",
                "VolumeBindMountOptions",
            ]
        );
        // No feature of v1.37 has left the version skew yet.
        assert!(REGISTRY.iter().all(|f| f.max_version.is_none()));
    }

    fn restart_all_container(name: &str) -> serde_json::Value {
        json!({"name": name, "image": "image", "restartPolicy": "Never",
            "restartPolicyRules": [{"action": "RestartAllContainers",
                "exitCodes": {"operator": "In", "values": [1]}}]})
    }

    /// restartallcontainers' TestInferForScheduling.
    #[test]
    fn restart_all_containers_rules() {
        let init = spec(json!({
            "initContainers": [restart_all_container("container")],
            "containers": [{"name": "name", "image": "image"}]
        }));
        assert!(restarts_all_containers(&init), "init container with rules");
        let regular = spec(json!({
            "initContainers": [{"name": "name", "image": "image"}],
            "containers": [restart_all_container("container")]
        }));
        assert!(
            restarts_all_containers(&regular),
            "regular container with rules"
        );
        let none = spec(json!({
            "initContainers": [{"name": "name", "image": "image"}],
            "containers": [{"name": "name2", "image": "image"}]
        }));
        assert!(!restarts_all_containers(&none), "no rules");
        // A rule of another action needs nothing.
        let other = spec(
            json!({"containers": [{"name": "c", "restartPolicy": "Never",
            "restartPolicyRules": [{"action": "Restart",
                "exitCodes": {"operator": "In", "values": [1]}}]}]}),
        );
        assert!(!restarts_all_containers(&other));
        assert_eq!(required(&init), ["RestartAllContainersOnContainerExits"]);
    }

    /// usernamespaceshostnetwork's TestInferForScheduling.
    #[test]
    fn user_namespaces_with_host_network_rules() {
        for (host_network, host_users, want) in [
            (true, Some(false), true),
            (true, None, false),
            (true, Some(true), false),
            (false, Some(false), false),
        ] {
            let s = PodSpec {
                host_network: Some(host_network),
                host_users,
                ..Default::default()
            };
            assert_eq!(
                user_namespaces_with_host_network(&s),
                want,
                "hostNetwork {host_network}, hostUsers {host_users:?}"
            );
        }
        let s = spec(json!({"hostNetwork": true, "hostUsers": false, "containers": []}));
        assert_eq!(required(&s), ["UserNamespacesHostNetworkSupport"]);
    }

    /// volumebindmountoptions has no upstream test; its rule, case by case.
    #[test]
    fn bind_mount_options_rules() {
        let mount = |options: serde_json::Value| {
            json!({"name": "c", "volumeMounts": [{"name": "v", "mountPath": "/v",
                "bindMountOptions": options}]})
        };
        let in_container = spec(json!({"containers": [mount(json!(["noexec"]))]}));
        assert!(bind_mount_options(&in_container));
        let in_init = spec(json!({"containers": [{"name": "m"}],
            "initContainers": [mount(json!(["nosuid"]))]}));
        assert!(bind_mount_options(&in_init));
        let in_ephemeral = spec(json!({"containers": [{"name": "m"}],
            "ephemeralContainers": [mount(json!(["nodev"]))]}));
        assert!(bind_mount_options(&in_ephemeral));
        let empty = spec(json!({"containers": [mount(json!([]))]}));
        assert!(!bind_mount_options(&empty), "an empty list is none");
        let plain = spec(json!({"containers": [{"name": "c",
            "volumeMounts": [{"name": "v", "mountPath": "/v"}]}]}));
        assert!(!bind_mount_options(&plain));
        assert_eq!(required(&in_ephemeral), ["VolumeBindMountOptions"]);
    }

    /// The update-only features (in-place resize) and the DRA and websocket ones never
    /// need a node at scheduling, whatever the pod holds.
    #[test]
    fn update_only_features_are_never_required_at_scheduling() {
        let s = spec(json!({
            "resources": {"requests": {"cpu": "500m"}},
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "1"}}}],
            "containers": [{"name": "c"}],
            "volumes": [{"name": "m", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu"}]
        }));
        assert_eq!(required(&s), Vec::<&str>::new());
        // Everything at once, in the registry's order.
        let all = spec(json!({
            "hostNetwork": true, "hostUsers": false,
            "containers": [restart_all_container("c")],
            "initContainers": [{"name": "i", "volumeMounts": [{"name": "v", "mountPath": "/v",
                "bindMountOptions": ["ro"]}]}]
        }));
        assert_eq!(
            required(&all),
            [
                "RestartAllContainersOnContainerExits",
                "UserNamespacesHostNetworkSupport",
                "VolumeBindMountOptions"
            ]
        );
    }

    fn has_pod_level_resources(s: &PodSpec) -> bool {
        s.resources.is_some()
    }

    static POD_LEVEL: &[Feature] = &[Feature {
        name: "PodLevelResources",
        infer_for_scheduling: has_pod_level_resources,
        max_version: None,
    }];
    static POD_LEVEL_UNTIL_1_30: &[Feature] = &[Feature {
        name: "PodLevelResources",
        infer_for_scheduling: has_pod_level_resources,
        max_version: Some(Version(1, 30, 0)),
    }];

    /// nodedeclaredfeatures' TestInferForPodScheduling (its nil and pre-release target
    /// versions cannot occur here: the version is the scheduler's own, a release).
    #[test]
    fn inference_honours_the_version_window() {
        let with = spec(json!({"containers": [], "resources": {"requests": {"cpu": "500m"}}}));
        let without = PodSpec::default();
        let v1_30 = Version(1, 30, 0);
        assert_eq!(
            infer_for_pod_scheduling(POD_LEVEL, &with, v1_30),
            ["PodLevelResources"],
            "pod with feature, inferred during scheduling"
        );
        assert!(
            infer_for_pod_scheduling(POD_LEVEL, &without, v1_30).is_empty(),
            "pod without feature"
        );
        assert!(
            infer_for_pod_scheduling(POD_LEVEL_UNTIL_1_30, &with, Version(1, 31, 0)).is_empty(),
            "feature universally available, not inferred"
        );
        assert!(
            infer_for_pod_scheduling(POD_LEVEL_UNTIL_1_30, &with, Version(1, 40, 0)).is_empty(),
            "exceeds max version"
        );
        assert_eq!(
            infer_for_pod_scheduling(POD_LEVEL_UNTIL_1_30, &with, v1_30),
            ["PodLevelResources"],
            "MaxVersion is inclusive"
        );
        assert!(
            infer_for_pod_scheduling(POD_LEVEL_UNTIL_1_30, &with, Version(1, 30, 9)).is_empty(),
            "a patch release past MaxVersion's is past it (full semantic versions compared)"
        );
        assert!(
            Version(1, 30, 9) > Version(1, 30, 0) && Version(1, 31, 0) > Version(1, 30, 9),
            "semantic order"
        );
    }
}
