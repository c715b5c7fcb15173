//! Server-side apply and deletion of the objects `shared::manifests` renders, whatever
//! their kind.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PropagationPolicy,
};
use kube::{Api, Client};
use mcsched_shared::keys;
use mcsched_shared::manifests::{APIService, Object};

/// The kinds `install` creates, in apply order; `uninstall` walks them backwards.
pub fn kinds() -> Vec<(ApiResource, bool)> {
    vec![
        (ApiResource::erase::<CustomResourceDefinition>(&()), false),
        (ApiResource::erase::<Namespace>(&()), false),
        (ApiResource::erase::<ServiceAccount>(&()), true),
        (ApiResource::erase::<ClusterRole>(&()), false),
        (ApiResource::erase::<ClusterRoleBinding>(&()), false),
        (ApiResource::erase::<Role>(&()), true),
        (ApiResource::erase::<RoleBinding>(&()), true),
        (ApiResource::erase::<ConfigMap>(&()), true),
        (ApiResource::erase::<Service>(&()), true),
        (ApiResource::erase::<Deployment>(&()), true),
        (ApiResource::erase::<PodDisruptionBudget>(&()), true),
        (ApiResource::erase::<APIService>(&()), false),
    ]
}

pub fn api_resource(o: &Object) -> ApiResource {
    match o {
        Object::CustomResourceDefinition(_) => ApiResource::erase::<CustomResourceDefinition>(&()),
        Object::Namespace(_) => ApiResource::erase::<Namespace>(&()),
        Object::ServiceAccount(_) => ApiResource::erase::<ServiceAccount>(&()),
        Object::ClusterRole(_) => ApiResource::erase::<ClusterRole>(&()),
        Object::ClusterRoleBinding(_) => ApiResource::erase::<ClusterRoleBinding>(&()),
        Object::Role(_) => ApiResource::erase::<Role>(&()),
        Object::RoleBinding(_) => ApiResource::erase::<RoleBinding>(&()),
        Object::ConfigMap(_) => ApiResource::erase::<ConfigMap>(&()),
        Object::Service(_) => ApiResource::erase::<Service>(&()),
        Object::Deployment(_) => ApiResource::erase::<Deployment>(&()),
        Object::PodDisruptionBudget(_) => ApiResource::erase::<PodDisruptionBudget>(&()),
        Object::APIService(_) => ApiResource::erase::<APIService>(&()),
    }
}

fn api_for(client: &Client, ar: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Created,
    Configured,
    Unchanged,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Created => "created",
            Action::Configured => "configured",
            Action::Unchanged => "unchanged",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("applying {reference}: {source}")]
    Apply {
        reference: String,
        #[source]
        source: kube::Error,
    },
    #[error("reading {reference}: {source}")]
    Read {
        reference: String,
        #[source]
        source: kube::Error,
    },
    #[error("deleting {reference}: {source}")]
    Delete {
        reference: String,
        #[source]
        source: kube::Error,
    },
}

/// The object as it is in the cluster, if it is.
pub async fn current(client: &Client, o: &Object) -> Result<Option<DynamicObject>, ApplyError> {
    api_for(client, &api_resource(o), o.namespace())
        .get_opt(o.name())
        .await
        .map_err(|source| ApplyError::Read {
            reference: o.reference(),
            source,
        })
}

/// Server-side applies `o` as the `mcsched` field manager, taking over fields another
/// manager set (install owns these objects), and tells what changed: the resourceVersion
/// moves only when the object did.
pub async fn apply(
    client: &Client,
    o: &Object,
    server_dry_run: bool,
) -> Result<Action, ApplyError> {
    let before = current(client, o).await?;
    let mut params = PatchParams::apply(keys::FIELD_MANAGER).force();
    params.dry_run = server_dry_run;
    let after = api_for(client, &api_resource(o), o.namespace())
        .patch(o.name(), &params, &Patch::Apply(o.to_json()))
        .await
        .map_err(|source| ApplyError::Apply {
            reference: o.reference(),
            source,
        })?;
    Ok(match before.and_then(|b| b.metadata.resource_version) {
        None => Action::Created,
        Some(rv) if Some(&rv) == after.metadata.resource_version.as_ref() => Action::Unchanged,
        Some(_) => Action::Configured,
    })
}

/// One object found by its install label.
#[derive(Debug, Clone)]
pub struct Found {
    pub resource: ApiResource,
    pub name: String,
    pub namespace: Option<String>,
    /// Deleted already (a deletionTimestamp): the API server or a controller is finishing
    /// it (a CRD's instances, a namespace's contents), and deleting it again does nothing.
    pub terminating: bool,
}

impl Found {
    pub fn reference(&self) -> String {
        format!("{}/{}", self.resource.kind.to_lowercase(), self.name)
    }

    pub fn located(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} (namespace {ns})", self.reference()),
            None => self.reference(),
        }
    }
}

/// Every object labelled `selector`, of every kind install creates, in apply order.
pub async fn find(client: &Client, selector: &str) -> Result<Vec<Found>, ApplyError> {
    let mut out = Vec::new();
    for (ar, namespaced) in kinds() {
        // Listing across all namespaces also finds the bindings in kube-system and the
        // Role in kube-node-lease.
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let list = api
            .list_metadata(&ListParams::default().labels(selector))
            .await
            .map_err(|source| ApplyError::Read {
                reference: format!("{} labelled {selector}", ar.plural),
                source,
            })?;
        for item in list.items {
            out.push(Found {
                resource: ar.clone(),
                terminating: item.metadata.deletion_timestamp.is_some(),
                name: item.metadata.name.unwrap_or_default(),
                namespace: if namespaced {
                    item.metadata.namespace
                } else {
                    None
                },
            });
        }
    }
    Ok(out)
}

/// Deletes one object; one already gone counts as deleted.
pub async fn delete(client: &Client, f: &Found) -> Result<(), ApplyError> {
    let api = api_for(client, &f.resource, f.namespace.as_deref());
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..Default::default()
    };
    match api.delete(&f.name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => Err(ApplyError::Delete {
            reference: f.reference(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcsched_shared::manifests::{InstallOptions, render};

    /// Uninstall and pruning find objects only among `kinds()`: every rendered kind must be
    /// there, with its scope.
    #[test]
    fn every_rendered_kind_is_found_again() {
        let objects = render(&InstallOptions {
            replicas: 2,
            ..Default::default()
        })
        .expect("renders");
        let kinds = kinds();
        for o in &objects {
            let ar = api_resource(o);
            assert_eq!(ar.kind, o.kind());
            assert_eq!(ar.api_version, o.api_version());
            let (_, namespaced) = kinds
                .iter()
                .find(|(k, _)| k == &ar)
                .unwrap_or_else(|| panic!("{} is not in kinds()", ar.kind));
            assert_eq!(*namespaced, o.namespace().is_some(), "{}", o.reference());
        }
        let api = ApiResource::erase::<APIService>(&());
        assert_eq!(api.group, "apiregistration.k8s.io");
        assert_eq!(api.plural, "apiservices");
    }
}
