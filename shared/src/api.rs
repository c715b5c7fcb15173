//! The objects of the `mcsched.io/v1alpha1` aggregated API: an `Explanation` (a pod's
//! last scheduling decision, read-only) and a `WhatIf` (a pod template in, the decision
//! out, nothing stored: as `SubjectAccessReview` works).

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta};
use serde::{Deserialize, Serialize};

use crate::explain;
use crate::keys;

/// A pod's explanation: named as the pod, in the pod's namespace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    pub(crate) api_version: String,
    pub(crate) kind: String,
    pub metadata: ObjectMeta,
    pub status: explain::Explanation,
}

impl Explanation {
    pub fn new(metadata: ObjectMeta, status: explain::Explanation) -> Self {
        Explanation {
            api_version: keys::API_GROUP_VERSION.into(),
            kind: keys::EXPLANATION_KIND.into(),
            metadata,
            status,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExplanationList {
    pub(crate) api_version: String,
    pub(crate) kind: String,
    pub(crate) metadata: ListMeta,
    pub(crate) items: Vec<Explanation>,
}

impl ExplanationList {
    pub fn new(items: Vec<Explanation>) -> Self {
        ExplanationList {
            api_version: keys::API_GROUP_VERSION.into(),
            kind: format!("{}List", keys::EXPLANATION_KIND),
            metadata: ListMeta::default(),
            items,
        }
    }
}

/// What would happen to a pod made from `spec.template` now; the answer is `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WhatIf {
    #[serde(default = "group_version")]
    pub api_version: String,
    #[serde(default = "whatif_kind")]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: WhatIfSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<explain::Explanation>,
}

fn group_version() -> String {
    keys::API_GROUP_VERSION.into()
}

fn whatif_kind() -> String {
    keys::WHATIF_KIND.into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WhatIfSpec {
    /// A Pod's metadata and spec, or a workload's pod template.
    pub template: PodTemplateSpec,
}

impl WhatIf {
    pub fn new(namespace: &str, template: PodTemplateSpec) -> Self {
        WhatIf {
            api_version: group_version(),
            kind: whatif_kind(),
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                ..Default::default()
            },
            spec: WhatIfSpec { template },
            status: None,
        }
    }
}

/// `/apis/mcsched.io/v1alpha1/namespaces/{ns}/{resource}`.
pub fn namespaced_path(namespace: &str, resource: &str) -> String {
    format!(
        "/apis/{}/namespaces/{namespace}/{resource}",
        keys::API_GROUP_VERSION
    )
}
