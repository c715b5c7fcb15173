//! DefaultBinder: binds through the `pods/binding` subresource.

use futures::FutureExt;
use futures::future::BoxFuture;

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

impl BindPlugin for DefaultBinder {
    fn bind<'a>(
        &'a self,
        ctx: &'a BindContext,
        _state: &'a CycleState,
        pod: &'a PodInfo,
        node: &'a str,
    ) -> BoxFuture<'a, Status> {
        async move {
            let (client, ct) = (&ctx.client, ctx.content_type);
            match mcsched_wire::write::bind(client, ct, &pod.namespace, &pod.name, &pod.uid, node)
                .await
            {
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
