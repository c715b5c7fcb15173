//! The APIService that registers the agent's aggregated API (`mcsched.io/v1alpha1`) with
//! the API server, and the selector-less Service it points at.
//!
//! `apiregistration.k8s.io/v1` is not in k8s-openapi, so the object is typed here: only
//! the fields `install` sets, plus `caBundle` for whoever reads one back.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize};

use super::meta;
use crate::keys;

/// `apiregistration.k8s.io/v1` APIService (cluster-scoped).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct APIService {
    pub(crate) metadata: ObjectMeta,
    pub(crate) spec: APIServiceSpec,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct APIServiceSpec {
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) group_priority_minimum: i32,
    pub(crate) version_priority: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) service: Option<ServiceReference>,
    /// PEM CA certificates that sign the serving certificate behind the Service. `install`
    /// leaves it unset (the leading agent writes its own), so that applying the install
    /// again never takes the field from the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ca_bundle: Option<ByteString>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceReference {
    pub(crate) namespace: String,
    pub(crate) name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) port: Option<i32>,
}

impl k8s_openapi::Resource for APIService {
    const API_VERSION: &'static str = "apiregistration.k8s.io/v1";
    const GROUP: &'static str = "apiregistration.k8s.io";
    const KIND: &'static str = "APIService";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "apiservices";
    type Scope = k8s_openapi::ClusterResourceScope;
}

impl k8s_openapi::ListableResource for APIService {
    const LIST_KIND: &'static str = "APIServiceList";
}

impl k8s_openapi::Metadata for APIService {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// With apiVersion and kind first, as k8s-openapi's own types serialize.
impl Serialize for APIService {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use k8s_openapi::Resource;
        let mut st = s.serialize_struct(Self::KIND, 4)?;
        st.serialize_field("apiVersion", Self::API_VERSION)?;
        st.serialize_field("kind", Self::KIND)?;
        st.serialize_field("metadata", &self.metadata)?;
        st.serialize_field("spec", &self.spec)?;
        st.end()
    }
}

/// apiVersion, kind and status are read past.
impl<'de> Deserialize<'de> for APIService {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Fields {
            #[serde(default)]
            metadata: ObjectMeta,
            #[serde(default)]
            spec: APIServiceSpec,
        }
        let f = Fields::deserialize(d)?;
        Ok(APIService {
            metadata: f.metadata,
            spec: f.spec,
        })
    }
}

/// Where kube-aggregator places the group among the others (kube's own groups are
/// 16000 and up, 100 is what third-party groups such as metrics.k8s.io use) and the
/// version within it.
const GROUP_PRIORITY_MINIMUM: i32 = 100;
const VERSION_PRIORITY: i32 = 100;

pub(super) fn api_service(ns: &str) -> APIService {
    APIService {
        metadata: meta(keys::API_SERVICE_NAME, None, ns),
        spec: APIServiceSpec {
            group: keys::API_GROUP.into(),
            version: keys::API_VERSION.into(),
            group_priority_minimum: GROUP_PRIORITY_MINIMUM,
            version_priority: VERSION_PRIORITY,
            service: Some(ServiceReference {
                namespace: ns.into(),
                name: keys::API_SERVICE.into(),
                port: Some(i32::from(keys::API_SERVICE_PORT)),
            }),
            // No insecureSkipTLSVerify: the API server checks the agent's certificate
            // against the caBundle the leader publishes.
            ca_bundle: None,
        },
    }
}

/// Selector-less: no pod selector could tell the leader from the standbys, so the leader
/// writes the one EndpointSlice (named as the Service) with its own address, and the API
/// server's requests for `mcsched.io` always reach the agent that decides.
pub(super) fn api_service_backend(ns: &str) -> Service {
    Service {
        metadata: meta(keys::API_SERVICE, Some(ns), ns),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            ports: Some(vec![ServicePort {
                name: Some(keys::AGENT_PORT_NAME.into()),
                port: i32::from(keys::API_SERVICE_PORT),
                // A number: without a selector there is no pod whose port name to look up.
                target_port: Some(IntOrString::Int(i32::from(keys::AGENT_PORT))),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}
