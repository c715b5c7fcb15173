//! One rendered object of any of the kinds `install` creates.

use k8s_openapi::Resource;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

use super::APIService;

// A score of objects per install: the Deployment's size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    CustomResourceDefinition(CustomResourceDefinition),
    Namespace(Namespace),
    ServiceAccount(ServiceAccount),
    ClusterRole(ClusterRole),
    ClusterRoleBinding(ClusterRoleBinding),
    Role(Role),
    RoleBinding(RoleBinding),
    ConfigMap(ConfigMap),
    Service(Service),
    Deployment(Deployment),
    PodDisruptionBudget(PodDisruptionBudget),
    APIService(APIService),
}

/// Calls `$f` with the typed object inside, whatever its kind.
macro_rules! each {
    ($obj:expr, $o:ident => $f:expr) => {
        match $obj {
            Object::CustomResourceDefinition($o) => $f,
            Object::Namespace($o) => $f,
            Object::ServiceAccount($o) => $f,
            Object::ClusterRole($o) => $f,
            Object::ClusterRoleBinding($o) => $f,
            Object::Role($o) => $f,
            Object::RoleBinding($o) => $f,
            Object::ConfigMap($o) => $f,
            Object::Service($o) => $f,
            Object::Deployment($o) => $f,
            Object::PodDisruptionBudget($o) => $f,
            Object::APIService($o) => $f,
        }
    };
}

fn kind_of<K: Resource>(_: &K) -> &'static str {
    K::KIND
}

fn api_version_of<K: Resource>(_: &K) -> &'static str {
    K::API_VERSION
}

impl Object {
    pub fn kind(&self) -> &'static str {
        each!(self, o => kind_of(o))
    }

    pub fn api_version(&self) -> &'static str {
        each!(self, o => api_version_of(o))
    }

    pub(crate) fn metadata(&self) -> &ObjectMeta {
        each!(self, o => &o.metadata)
    }

    pub fn name(&self) -> &str {
        self.metadata().name.as_deref().unwrap_or_default()
    }

    pub fn namespace(&self) -> Option<&str> {
        self.metadata().namespace.as_deref()
    }

    /// `kind/name` the way kubectl prints it (`clusterrolebinding/mcsched-agent`).
    pub fn reference(&self) -> String {
        format!("{}/{}", self.kind().to_lowercase(), self.name())
    }

    /// The object as JSON, with apiVersion and kind (what server-side apply sends).
    pub fn to_json(&self) -> serde_json::Value {
        each!(self, o => serde_json::to_value(o).unwrap_or_default())
    }

    fn to_yaml(&self) -> Result<String, crate::yaml::YamlError> {
        each!(self, o => crate::yaml::to_string(o))
    }
}

/// A YAML stream, one document per object, as `kubectl apply -f` reads it.
pub fn to_yaml_stream(objects: &[Object]) -> Result<String, crate::yaml::YamlError> {
    let mut out = String::new();
    for o in objects {
        out.push_str("---\n");
        out.push_str(&o.to_yaml()?);
    }
    Ok(out)
}

/// A `v1` List, as `kubectl get -o json` prints several objects.
pub fn to_json_list(objects: &[Object]) -> serde_json::Value {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct List {
        api_version: &'static str,
        kind: &'static str,
        items: Vec<serde_json::Value>,
    }
    serde_json::to_value(List {
        api_version: "v1",
        kind: "List",
        items: objects.iter().map(Object::to_json).collect(),
    })
    .unwrap_or_default()
}
