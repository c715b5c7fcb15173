//! The agent's Deployment, its Service and, with more than one replica, its
//! PodDisruptionBudget.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource,
    HTTPGetAction, ObjectFieldSelector, PodAffinityTerm, PodAntiAffinity, PodSecurityContext,
    PodSpec, PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile, SecurityContext,
    Service, ServicePort, ServiceSpec, Volume, VolumeMount, WeightedPodAffinityTerm,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::config::AgentConfig;
use super::{InstallOptions, common_labels, meta, pod_selector};
use crate::keys;

/// The distroless `nonroot` user the image runs as.
const NONROOT: i64 = 65532;

fn port() -> IntOrString {
    IntOrString::String(keys::AGENT_PORT_NAME.into())
}

fn probe(path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: port(),
            scheme: Some("HTTPS".into()),
            ..Default::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(5),
        ..Default::default()
    }
}

fn selector() -> LabelSelector {
    LabelSelector {
        match_labels: Some(pod_selector()),
        ..Default::default()
    }
}

/// Every replica's HTTPS port (health, metrics), for scraping; the aggregated API goes to
/// the leader alone, through Service `mcsched-api`.
pub(super) fn service(ns: &str) -> Service {
    Service {
        metadata: meta(keys::AGENT_NAME, Some(ns), ns),
        spec: Some(ServiceSpec {
            selector: Some(pod_selector()),
            ports: Some(vec![ServicePort {
                name: Some(keys::AGENT_PORT_NAME.into()),
                port: i32::from(keys::AGENT_PORT),
                target_port: Some(port()),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn from_field(name: &str, field_path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: field_path.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn container(image: &str) -> Container {
    let config_file = format!("{}/{}", keys::AGENT_CONFIG_DIR, keys::AGENT_CONFIG_KEY);
    Container {
        name: "agent".into(),
        image: Some(image.into()),
        args: Some(vec!["--config".into(), config_file]),
        env: Some(vec![
            // The agent looks for join Secrets in its own namespace.
            from_field("POD_NAMESPACE", "metadata.namespace"),
            // Its --advertise-address: the address the leader writes into the
            // EndpointSlice of Service mcsched-api.
            from_field("POD_IP", "status.podIP"),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some(keys::AGENT_PORT_NAME.into()),
            container_port: i32::from(keys::AGENT_PORT),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        // Liveness and start-up on /healthz as kube-scheduler's; readiness on /readyz,
        // which waits for the caches, so the Service only reaches an agent that has seen
        // the cluster.
        startup_probe: Some(probe("/healthz", 2, 30)),
        liveness_probe: Some(probe("/healthz", 10, 3)),
        readiness_probe: Some(probe("/readyz", 5, 3)),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".into(), Quantity("100m".into())),
                ("memory".into(), Quantity("128Mi".into())),
            ])),
            ..Default::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Default::default()
            }),
            ..Default::default()
        }),
        volume_mounts: Some(vec![VolumeMount {
            name: "config".into(),
            mount_path: keys::AGENT_CONFIG_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

pub(super) fn deployment(ns: &str, opts: &InstallOptions, cfg: &AgentConfig) -> Deployment {
    let mut pod_labels = common_labels(ns);
    pod_labels.extend(pod_selector());
    // Replicas on different nodes, when there are nodes to spread on.
    let affinity = (opts.replicas > 1).then(|| Affinity {
        pod_anti_affinity: Some(PodAntiAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![
                WeightedPodAffinityTerm {
                    weight: 100,
                    pod_affinity_term: PodAffinityTerm {
                        label_selector: Some(selector()),
                        topology_key: "kubernetes.io/hostname".into(),
                        ..Default::default()
                    },
                },
            ]),
            ..Default::default()
        }),
        ..Default::default()
    });
    Deployment {
        metadata: meta(keys::AGENT_NAME, Some(ns), ns),
        spec: DeploymentSpec {
            replicas: Some(opts.replicas),
            selector: selector(),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: Some(BTreeMap::from([(
                        keys::CONFIG_HASH_ANNOTATION.into(),
                        cfg.hash(),
                    )])),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(keys::AGENT_NAME.into()),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(NONROOT),
                        run_as_group: Some(NONROOT),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    containers: vec![container(&opts.image)],
                    volumes: Some(vec![Volume {
                        name: "config".into(),
                        config_map: Some(ConfigMapVolumeSource {
                            name: keys::AGENT_CONFIG_NAME.into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }]),
                    affinity,
                    node_selector: (!opts.node_selector.is_empty())
                        .then(|| opts.node_selector.clone()),
                    ..Default::default()
                }),
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

pub(super) fn pdb(ns: &str) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: meta(keys::AGENT_NAME, Some(ns), ns),
        spec: Some(PodDisruptionBudgetSpec {
            // One agent must stay to hold the Lease; the others may go during a drain.
            min_available: Some(IntOrString::Int(1)),
            selector: Some(selector()),
            ..Default::default()
        }),
        ..Default::default()
    }
}
