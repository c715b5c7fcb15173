//! DefaultBinder: binds through the `pods/binding` subresource.

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;

use crate::framework::{BindContext, BindPlugin, Cause, CycleState, Plugin, Status};
use crate::snapshot::PodInfo;

pub(crate) const NAME: &str = "DefaultBinder";

pub(crate) struct DefaultBinder;

impl Plugin for DefaultBinder {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_bind(&self) -> Option<&dyn BindPlugin> {
        Some(self)
    }
}

pub(crate) async fn bind_pod(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    uid: &str,
    node: &str,
) -> Result<(), kube::Error> {
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            uid: (!uid.is_empty()).then(|| uid.to_string()),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            ..Default::default()
        },
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    // The Status the API server answers with is not read: success is its HTTP code.
    pods.create_subresource::<_, serde::de::IgnoredAny>(
        "binding",
        name,
        &PostParams::default(),
        &binding,
    )
    .await
    .map(|_| ())
}

impl BindPlugin for DefaultBinder {
    fn bind<'a>(
        &'a self,
        ctx: &'a BindContext,
        _state: &'a CycleState,
        pod: &'a PodInfo,
        node: &'a str,
    ) -> BoxFuture<'a, Status> {
        async move {
            match bind_pod(&ctx.client, &pod.namespace, &pod.name, &pod.uid, node).await {
                Ok(()) => Status::success(),
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                    let cause = if s.code == 404 {
                        Cause::NotFound
                    } else {
                        Cause::Conflict
                    };
                    Status::error(format!("binding rejected: {}", s.message)).with_cause(cause)
                }
                Err(e) => Status::error(format!("binding failed: {e}")),
            }
        }
        .boxed()
    }
}
