//! The PodGroup API as each supported Kubernetes minor serves it: `scheduling.k8s.io/v1beta1`
//! from v1.37, `v1alpha2` on v1.36 (both only with the GenericWorkload gate and their
//! runtime-config); v1.35 has none (its alpha Workload API, `v1alpha1` with `spec.workloadRef`
//! on pods, has no PodGroup objects, and mcsched does not read it). Scheduling reads one model, v1beta1's; a v1alpha2
//! PodGroup is read into it, and the condition the scheduler writes is named as the served
//! version names it.

use k8s_openapi::api::scheduling::v1beta1::{
    AllDisruptionMode, DisruptionMode, PodGroup, PodGroupSchedulingConstraints,
    PodGroupSchedulingPolicy, PodGroupSpec, PodGroupStatus, SingleDisruptionMode,
    WorkloadReference,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "scheduling.k8s.io";

/// A served version of the PodGroup API, newest first in [`PodGroupVersion::ALL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PodGroupVersion {
    V1beta1,
    V1alpha2,
}

impl PodGroupVersion {
    /// Newest first: the one to use is the first an API server serves.
    pub const ALL: [PodGroupVersion; 2] = [PodGroupVersion::V1beta1, PodGroupVersion::V1alpha2];

    pub fn version(self) -> &'static str {
        match self {
            PodGroupVersion::V1beta1 => "v1beta1",
            PodGroupVersion::V1alpha2 => "v1alpha2",
        }
    }

    /// `scheduling.k8s.io/v1beta1`.
    pub fn api_version(self) -> String {
        format!("{GROUP}/{}", self.version())
    }

    /// The condition kube-scheduler sets when it first places a group: v1.37 renamed
    /// `PodGroupScheduled` to `PodGroupInitiallyScheduled` with v1beta1.
    pub fn scheduled_condition(self) -> &'static str {
        match self {
            PodGroupVersion::V1beta1 => "PodGroupInitiallyScheduled",
            PodGroupVersion::V1alpha2 => "PodGroupScheduled",
        }
    }
}

/// What no served version names: said where gangs are looked for.
pub fn none_served() -> String {
    let versions: Vec<String> = PodGroupVersion::ALL
        .iter()
        .map(|v| v.api_version())
        .collect();
    format!(
        "the API server serves none of {} (Kubernetes v1.36 serves v1alpha2, v1.37 v1beta1, each \
         only with the GenericWorkload feature gate on and the version enabled in \
         --runtime-config; v1.35 serves none): pods of a pod group are scheduled one by one",
        versions.join(", ")
    )
}

/// A `scheduling.k8s.io/v1alpha2` PodGroup (Kubernetes v1.36), as far as it
/// differs from v1beta1: everything scheduling reads has the same JSON in both.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PodGroupV1alpha2 {
    pub metadata: ObjectMeta,
    pub spec: PodGroupV1alpha2Spec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodGroupV1alpha2Status>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupV1alpha2Spec {
    /// `Pod` or `PodGroup` (v1beta1: `single` or `all`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_group_template_ref: Option<TemplateRefV1alpha2>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_constraints: Option<PodGroupSchedulingConstraints>,
    #[serde(default)]
    pub scheduling_policy: PodGroupSchedulingPolicy,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TemplateRefV1alpha2 {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadTemplateRefV1alpha2>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadTemplateRefV1alpha2 {
    #[serde(default)]
    pub workload_name: String,
    #[serde(default)]
    pub pod_group_template_name: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PodGroupV1alpha2Status {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

impl k8s_openapi::Resource for PodGroupV1alpha2 {
    const API_VERSION: &'static str = "scheduling.k8s.io/v1alpha2";
    const GROUP: &'static str = GROUP;
    const KIND: &'static str = "PodGroup";
    const VERSION: &'static str = "v1alpha2";
    const URL_PATH_SEGMENT: &'static str = "podgroups";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::ListableResource for PodGroupV1alpha2 {
    const LIST_KIND: &'static str = "PodGroupList";
}

impl k8s_openapi::Metadata for PodGroupV1alpha2 {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl From<PodGroupV1alpha2> for PodGroup {
    fn from(g: PodGroupV1alpha2) -> PodGroup {
        let s = g.spec;
        PodGroup {
            metadata: g.metadata,
            spec: PodGroupSpec {
                disruption_mode: s.disruption_mode.as_deref().and_then(|m| match m {
                    "Pod" => Some(DisruptionMode {
                        single: Some(SingleDisruptionMode(serde_json::json!({}))),
                        all: None,
                    }),
                    "PodGroup" => Some(DisruptionMode {
                        single: None,
                        all: Some(AllDisruptionMode(serde_json::json!({}))),
                    }),
                    _ => None,
                }),
                workload_ref: s.pod_group_template_ref.and_then(|r| r.workload).map(|w| {
                    WorkloadReference {
                        workload_name: w.workload_name,
                        template_name: w.pod_group_template_name,
                    }
                }),
                priority: s.priority,
                priority_class_name: s.priority_class_name,
                scheduling_constraints: s.scheduling_constraints,
                scheduling_policy: s.scheduling_policy,
                ..PodGroupSpec::default()
            },
            status: g.status.map(|st| PodGroupStatus {
                conditions: st.conditions,
                ..PodGroupStatus::default()
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v1alpha2_group_reads_as_v1beta1() {
        let alpha: PodGroupV1alpha2 = serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.k8s.io/v1alpha2",
            "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ns", "generation": 3},
            "spec": {
                "disruptionMode": "PodGroup",
                "podGroupTemplateRef": {"workload": {"workloadName": "w", "podGroupTemplateName": "t"}},
                "priorityClassName": "high",
                "schedulingPolicy": {"gang": {"minCount": 4}},
                "schedulingConstraints": {"topology": [{"key": "zone"}]}
            },
            "status": {"conditions": [{"type": "PodGroupScheduled", "status": "True",
                "reason": "Scheduled", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .expect("v1alpha2 PodGroup");
        let beta = PodGroup::from(alpha);
        assert_eq!(beta.metadata.generation, Some(3));
        assert_eq!(
            beta.spec
                .scheduling_policy
                .gang
                .as_ref()
                .map(|g| g.min_count),
            Some(4)
        );
        assert_eq!(
            beta.spec
                .scheduling_constraints
                .and_then(|c| c.topology)
                .map(|t| t[0].key.clone()),
            Some("zone".to_string())
        );
        assert!(beta.spec.disruption_mode.is_some_and(|m| m.all.is_some()));
        assert_eq!(
            beta.spec
                .workload_ref
                .map(|w| (w.workload_name, w.template_name)),
            Some(("w".to_string(), "t".to_string()))
        );
        assert_eq!(beta.spec.priority_class_name.as_deref(), Some("high"));
        assert_eq!(
            beta.status
                .and_then(|s| s.conditions)
                .map(|c| c[0].type_.clone()),
            Some("PodGroupScheduled".to_string())
        );
    }

    #[test]
    fn each_version_names_its_condition() {
        assert_eq!(
            PodGroupVersion::V1beta1.scheduled_condition(),
            "PodGroupInitiallyScheduled"
        );
        assert_eq!(
            PodGroupVersion::V1alpha2.scheduled_condition(),
            "PodGroupScheduled"
        );
        assert_eq!(
            PodGroupVersion::ALL[0].api_version(),
            "scheduling.k8s.io/v1beta1"
        );
    }
}
