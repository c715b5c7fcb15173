//! The leader makes itself the aggregated API's backend: it writes the EndpointSlice of
//! the selector-less Service the APIService points at (so the API server reaches the
//! leader, never a standby whose explanations would be empty) and puts the CA of its
//! serving certificate in the APIService's caBundle. Both objects are mcsched's: the
//! APIService and Service are `install`'s (checked by label), the EndpointSlice the
//! agent's own; anything else of those names is left alone.

use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::{Api, Client};
use mcsched_shared::keys;
use serde_json::json;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::control::leader::{LeaseHealth, may_act};

/// The EndpointSlice's `endpointslice.kubernetes.io/managed-by`: not the endpointslice
/// controller's, so it leaves the slice alone.
pub const SLICE_MANAGER: &str = "mcsched-agent.mcsched.io";
const FIELD_MANAGER: &str = "mcsched-agent";
/// How often the leader checks that both objects still say what it wrote.
const RECHECK: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{0}")]
    NotOurs(String),
}

fn api_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> PublishError {
    let what = what.into();
    move |source| PublishError::Api { what, source }
}

pub struct Publisher {
    pub client: Client,
    pub namespace: String,
    pub address: IpAddr,
    pub port: u16,
    /// PEM of the serving certificate's CA; None: the operator manages caBundle.
    pub ca_bundle: Option<String>,
}

fn api_service_resource() -> ApiResource {
    ApiResource {
        group: "apiregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiregistration.k8s.io/v1".into(),
        kind: "APIService".into(),
        plural: "apiservices".into(),
    }
}

fn installed_here(meta: &ObjectMeta, namespace: &str) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(keys::INSTALL_LABEL))
        .is_some_and(|ns| ns == namespace)
}

/// What there is to do, once a published object was looked at.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Not installed (yet): nothing to publish.
    Absent,
    Unchanged,
    Written,
}

impl Publisher {
    /// Publishes whenever this agent leads, until `leader`'s sender goes away.
    pub async fn run(self, mut leader: watch::Receiver<bool>, lease: LeaseHealth) {
        let mut said_absent = false;
        loop {
            if leader.wait_for(|l| *l).await.is_err() {
                return;
            }
            match self.publish_once(&leader, &lease).await {
                Ok(Step::Written) => {
                    said_absent = false;
                    info!(address = %self.address, port = self.port, "serving the {} API as its backend", keys::API_GROUP_VERSION);
                }
                Ok(Step::Unchanged) => said_absent = false,
                Ok(Step::Absent) => {
                    if !said_absent {
                        info!(
                            "APIService {} or Service {}/{} is not installed: the {} API is not served through the API server",
                            keys::API_SERVICE_NAME,
                            self.namespace,
                            keys::API_SERVICE,
                            keys::API_GROUP_VERSION
                        );
                        said_absent = true;
                    }
                }
                Err(e) => {
                    warn!(error = %e, "cannot publish the agent as the {} API's backend", keys::API_GROUP_VERSION)
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(RECHECK) => {}
                changed = leader.changed() => if changed.is_err() { return },
            }
        }
    }

    pub async fn publish_once(
        &self,
        leader: &watch::Receiver<bool>,
        lease: &LeaseHealth,
    ) -> Result<Step, PublishError> {
        let services: Api<Service> = Api::namespaced(self.client.clone(), &self.namespace);
        let Some(service) = services
            .get_opt(keys::API_SERVICE)
            .await
            .map_err(api_error(format!("reading service {}", keys::API_SERVICE)))?
        else {
            return Ok(Step::Absent);
        };
        if !installed_here(&service.metadata, &self.namespace) {
            return Err(PublishError::NotOurs(format!(
                "service {}/{} was not created by `kubectl mcsched install`; not publishing to it",
                self.namespace,
                keys::API_SERVICE
            )));
        }
        let slice = self.endpoint_slice(&service)?;
        let slices: Api<EndpointSlice> = Api::namespaced(self.client.clone(), &self.namespace);
        let current = slices
            .get_opt(keys::API_SERVICE)
            .await
            .map_err(api_error("reading the API's EndpointSlice"))?;
        let mut step = Step::Unchanged;
        if let Some(c) = &current {
            let managed = c
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("endpointslice.kubernetes.io/managed-by"));
            if managed.map(String::as_str) != Some(SLICE_MANAGER) {
                return Err(PublishError::NotOurs(format!(
                    "endpointslice {}/{} exists and is not the agent's; not overwriting it",
                    self.namespace,
                    keys::API_SERVICE
                )));
            }
        }
        let same = current
            .as_ref()
            .is_some_and(|c| c.endpoints == slice.endpoints && c.ports == slice.ports);
        if !same {
            if !may_act(leader, lease) {
                return Ok(Step::Unchanged);
            }
            slices
                .patch(
                    keys::API_SERVICE,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&slice),
                )
                .await
                .map_err(api_error("writing the API's EndpointSlice"))?;
            step = Step::Written;
        }
        if let Some(ca) = &self.ca_bundle {
            match self.set_ca_bundle(ca, leader, lease).await? {
                Step::Written => step = Step::Written,
                Step::Absent => return Ok(Step::Absent),
                Step::Unchanged => {}
            }
        }
        Ok(step)
    }

    async fn set_ca_bundle(
        &self,
        ca: &str,
        leader: &watch::Receiver<bool>,
        lease: &LeaseHealth,
    ) -> Result<Step, PublishError> {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &api_service_resource());
        let Some(current) = api
            .get_opt(keys::API_SERVICE_NAME)
            .await
            .map_err(api_error(format!(
                "reading apiservice {}",
                keys::API_SERVICE_NAME
            )))?
        else {
            return Ok(Step::Absent);
        };
        let points_here = current.data["spec"]["service"]["namespace"] == json!(self.namespace)
            && current.data["spec"]["service"]["name"] == json!(keys::API_SERVICE);
        if !installed_here(&current.metadata, &self.namespace) || !points_here {
            return Err(PublishError::NotOurs(format!(
                "apiservice {} was not created by `kubectl mcsched install` in {} (or points elsewhere); not changing it",
                keys::API_SERVICE_NAME,
                self.namespace
            )));
        }
        let bundle = serde_json::to_value(ByteString(ca.as_bytes().to_vec())).unwrap_or_default();
        if current.data["spec"]["caBundle"] == bundle {
            return Ok(Step::Unchanged);
        }
        if !may_act(leader, lease) {
            return Ok(Step::Unchanged);
        }
        let patch = json!({"spec": {"caBundle": bundle}});
        api.patch(
            keys::API_SERVICE_NAME,
            &PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            },
            &Patch::Merge(&patch),
        )
        .await
        .map_err(api_error(format!(
            "setting the caBundle of apiservice {}",
            keys::API_SERVICE_NAME
        )))?;
        Ok(Step::Written)
    }

    fn endpoint_slice(&self, service: &Service) -> Result<EndpointSlice, PublishError> {
        let port_name = service
            .spec
            .as_ref()
            .and_then(|s| s.ports.as_ref())
            .and_then(|p| p.first())
            .and_then(|p| p.name.clone());
        let uid = service.metadata.uid.clone().unwrap_or_default();
        Ok(EndpointSlice {
            metadata: ObjectMeta {
                name: Some(keys::API_SERVICE.into()),
                namespace: Some(self.namespace.clone()),
                labels: Some(
                    [
                        ("kubernetes.io/service-name", keys::API_SERVICE),
                        ("endpointslice.kubernetes.io/managed-by", SLICE_MANAGER),
                        (keys::MANAGED_BY_LABEL, keys::MANAGED_BY_VALUE),
                    ]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ),
                // Deleted with the Service by `uninstall` (garbage collection).
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Service".into(),
                    name: keys::API_SERVICE.into(),
                    uid,
                    ..Default::default()
                }]),
                ..Default::default()
            },
            address_type: if self.address.is_ipv4() {
                "IPv4".into()
            } else {
                "IPv6".into()
            },
            endpoints: Some(vec![Endpoint {
                addresses: vec![self.address.to_string()],
                conditions: Some(EndpointConditions {
                    ready: Some(true),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ports: Some(vec![EndpointPort {
                name: port_name,
                port: Some(i32::from(self.port)),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_api::{self, Calls, Requests};

    const NS: &str = "mcsched-system";

    /// What the fake API server holds: the Service, the EndpointSlice and the APIService
    /// (None: absent), each answered on GET; writes are accepted.
    struct Objects {
        service: Option<serde_json::Value>,
        slice: Option<serde_json::Value>,
        api_service: Option<serde_json::Value>,
    }

    fn installed_service() -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": keys::API_SERVICE, "namespace": NS, "uid": "svc-uid",
                "labels": {keys::INSTALL_LABEL: NS}},
            "spec": {"ports": [{"name": "https", "port": 443}]}})
    }

    fn installed_api_service(ca_bundle: Option<&str>) -> serde_json::Value {
        let mut spec = json!({"service": {"namespace": NS, "name": keys::API_SERVICE}});
        if let Some(ca) = ca_bundle {
            spec["caBundle"] = serde_json::to_value(ByteString(ca.as_bytes().to_vec())).unwrap();
        }
        json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": keys::API_SERVICE_NAME, "labels": {keys::INSTALL_LABEL: NS}},
            "spec": spec})
    }

    fn publisher(objects: Objects) -> (Publisher, Calls, Requests) {
        let (client, calls, requests) = fake_api::recording(move |method, path, sent| {
            let held = if path.ends_with(&format!("/services/{}", keys::API_SERVICE)) {
                &objects.service
            } else if path.ends_with(&format!("/endpointslices/{}", keys::API_SERVICE)) {
                &objects.slice
            } else if path.ends_with(&format!("/apiservices/{}", keys::API_SERVICE_NAME)) {
                &objects.api_service
            } else {
                return (404, fake_api::status(404, "NotFound", "not found"));
            };
            match (method, held) {
                ("GET", Some(o)) => (200, o.clone()),
                ("GET", None) => (404, fake_api::status(404, "NotFound", "not found")),
                // A merge patch is answered with the object it patched, an apply with itself.
                (_, Some(o)) if sent.get("metadata").is_none() => (200, o.clone()),
                _ => (200, sent.clone()),
            }
        });
        let publisher = Publisher {
            client,
            namespace: NS.into(),
            address: "10.0.0.5".parse().unwrap(),
            port: 8443,
            ca_bundle: Some("CA PEM".into()),
        };
        (publisher, calls, requests)
    }

    fn leading(yes: bool) -> (watch::Sender<bool>, watch::Receiver<bool>) {
        watch::channel(yes)
    }

    fn slice_path() -> String {
        format!("/endpointslices/{}", keys::API_SERVICE)
    }

    fn api_service_path() -> String {
        format!("/apiservices/{}", keys::API_SERVICE_NAME)
    }

    #[tokio::test]
    async fn the_leader_writes_its_address_into_the_slice_and_its_ca_into_the_api_service() {
        let (p, _, requests) = publisher(Objects {
            service: Some(installed_service()),
            slice: None,
            api_service: Some(installed_api_service(None)),
        });
        let (_tx, leader) = leading(true);
        let step = p.publish_once(&leader, &LeaseHealth::default()).await;
        assert_eq!(step.unwrap(), Step::Written);
        let slices = fake_api::sent(&requests, "PATCH", &slice_path());
        assert_eq!(slices.len(), 1, "one EndpointSlice write");
        let slice = &slices[0];
        assert_eq!(slice["endpoints"][0]["addresses"], json!(["10.0.0.5"]));
        assert_eq!(slice["ports"][0]["port"], json!(8443));
        assert_eq!(
            slice["ports"][0]["name"],
            json!("https"),
            "the Service's port name"
        );
        assert_eq!(
            slice["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
            json!(SLICE_MANAGER)
        );
        assert_eq!(
            slice["metadata"]["ownerReferences"][0]["uid"],
            json!("svc-uid")
        );
        let bundles = fake_api::sent(&requests, "PATCH", &api_service_path());
        assert_eq!(bundles.len(), 1, "one APIService write");
        assert_eq!(
            bundles[0]["spec"]["caBundle"],
            serde_json::to_value(ByteString(b"CA PEM".to_vec())).unwrap()
        );
    }

    #[tokio::test]
    async fn a_standby_writes_nothing() {
        let (p, calls, _) = publisher(Objects {
            service: Some(installed_service()),
            slice: None,
            api_service: Some(installed_api_service(None)),
        });
        let (_tx, leader) = leading(false);
        let step = p.publish_once(&leader, &LeaseHealth::default()).await;
        assert_eq!(step.unwrap(), Step::Unchanged);
        assert_eq!(fake_api::writes(&calls), Vec::<String>::new());
    }

    #[tokio::test]
    async fn a_leader_past_its_renew_deadline_writes_nothing() {
        let (p, calls, _) = publisher(Objects {
            service: Some(installed_service()),
            slice: None,
            api_service: Some(installed_api_service(None)),
        });
        let (_tx, leader) = leading(true);
        let lease = LeaseHealth::default();
        lease.renewed_for_test(Duration::ZERO);
        let step = p.publish_once(&leader, &lease).await;
        assert_eq!(step.unwrap(), Step::Unchanged);
        assert_eq!(fake_api::writes(&calls), Vec::<String>::new());
    }

    #[tokio::test]
    async fn what_already_says_the_same_is_not_rewritten() {
        let service = installed_service();
        let (probe, _, _) = publisher(Objects {
            service: None,
            slice: None,
            api_service: None,
        });
        let current = probe
            .endpoint_slice(&serde_json::from_value(service.clone()).unwrap())
            .unwrap();
        let (p, calls, _) = publisher(Objects {
            service: Some(service),
            slice: Some(serde_json::to_value(&current).unwrap()),
            api_service: Some(installed_api_service(Some("CA PEM"))),
        });
        let (_tx, leader) = leading(true);
        let step = p.publish_once(&leader, &LeaseHealth::default()).await;
        assert_eq!(step.unwrap(), Step::Unchanged);
        assert_eq!(fake_api::writes(&calls), Vec::<String>::new());
    }

    #[tokio::test]
    async fn a_slice_that_is_not_the_agents_is_not_overwritten() {
        let foreign = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": keys::API_SERVICE, "namespace": NS,
                "labels": {"endpointslice.kubernetes.io/managed-by": "someone-else"}},
            "addressType": "IPv4", "endpoints": []});
        let (p, calls, _) = publisher(Objects {
            service: Some(installed_service()),
            slice: Some(foreign),
            api_service: Some(installed_api_service(None)),
        });
        let (_tx, leader) = leading(true);
        let step = p.publish_once(&leader, &LeaseHealth::default()).await;
        assert!(matches!(step, Err(PublishError::NotOurs(_))), "{step:?}");
        assert_eq!(fake_api::writes(&calls), Vec::<String>::new());
    }

    #[tokio::test]
    async fn a_service_not_installed_by_mcsched_is_left_alone() {
        let mut service = installed_service();
        service["metadata"]["labels"] = json!({});
        let (p, calls, _) = publisher(Objects {
            service: Some(service),
            slice: None,
            api_service: Some(installed_api_service(None)),
        });
        let (_tx, leader) = leading(true);
        let step = p.publish_once(&leader, &LeaseHealth::default()).await;
        assert!(matches!(step, Err(PublishError::NotOurs(_))), "{step:?}");
        assert_eq!(fake_api::writes(&calls), Vec::<String>::new());
    }

    #[tokio::test]
    async fn an_api_service_pointing_elsewhere_keeps_its_ca_bundle() {
        let mut api_service = installed_api_service(None);
        api_service["spec"]["service"]["name"] = json!("other");
        let (p, calls, _) = publisher(Objects {
            service: Some(installed_service()),
            slice: None,
            api_service: Some(api_service),
        });
        let (_tx, leader) = leading(true);
        let step = p.publish_once(&leader, &LeaseHealth::default()).await;
        assert!(matches!(step, Err(PublishError::NotOurs(_))), "{step:?}");
        assert!(!fake_api::called(&calls, "PATCH", &api_service_path()));
    }

    #[tokio::test]
    async fn nothing_is_published_before_install() {
        let (p, calls, _) = publisher(Objects {
            service: None,
            slice: None,
            api_service: None,
        });
        let (_tx, leader) = leading(true);
        let step = p.publish_once(&leader, &LeaseHealth::default()).await;
        assert_eq!(step.unwrap(), Step::Absent);
        assert_eq!(fake_api::writes(&calls), Vec::<String>::new());
    }
}
