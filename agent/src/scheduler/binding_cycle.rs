//! kube's `bindingCycle`, run as its own task: WaitOnPermit, PreBind, Bind (an interested
//! binder extender instead of the Bind plugins), PostBind; on failure the placement is
//! undone and the pod handed to the failure handler.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::{debug, warn};

use super::Shared;
use super::failure::{Failure, forget, handle_failure};
use super::scheduling_cycle::Placed;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use mcsched_engine::framework::{Cause, ClusterEvent, Status};
use mcsched_engine::snapshot::PodInfo;

pub(super) async fn binding_cycle(
    shared: Arc<Shared>,
    leader: tokio::sync::watch::Receiver<bool>,
    placed: Placed,
    slot: Option<OwnedSemaphorePermit>,
    bindings: Arc<Semaphore>,
) {
    let Placed {
        fw,
        mut state,
        pod,
        node,
        info,
        started,
        waiting,
        ..
    } = placed;
    let scheduler_name = fw.scheduler_name.clone();
    let waited = fw.wait_on_permit(&pod).await;
    if !waited.is_success() {
        forget(&shared, &fw, &mut state, &pod, &node);
        let failure = if waited.is_rejected() {
            debug!(pod = %pod.key, %node, status = %waited, "rejected while waiting on permit");
            Failure::on_node(&node, waited)
        } else {
            Failure::Error(waited.message())
        };
        handle_failure(
            &shared,
            &scheduler_name,
            info,
            failure,
            waiting.as_ref(),
            started,
        );
        // The room it held is free again (kube's AssignedPodDelete), the pod itself
        // already requeued.
        shared.queue.on_event(ClusterEvent::PodDelete);
        return;
    }
    let _slot = match slot {
        Some(slot) => slot,
        None => match bindings.acquire_owned().await {
            Ok(slot) => slot,
            Err(_) => return,
        },
    };
    if !crate::control::leader::may_act(&leader, &shared.lease_health) {
        // Lost the lease since this pod was placed: the new leader decides.
        forget(&shared, &fw, &mut state, &pod, &node);
        shared.queue.add_backoff(info);
        return;
    }
    let ctx = shared.bind_ctx.clone();
    let pre_bind_started = std::time::Instant::now();
    let mut status = fw.run_pre_bind(&ctx, &state, &pod, &node).await;
    // PreBind may wait on other controllers (volumes bound): a slow attempt says where.
    let pre_bind = pre_bind_started.elapsed();
    if status.is_success() && !crate::control::leader::may_act(&leader, &shared.lease_health) {
        // PreBind may wait minutes (volumes): a lease lost meanwhile leaves the binding to
        // the new leader, whichever binder (plugin or extender) would have sent it.
        debug!(pod = %pod.key, %node, "lost the lease during PreBind; not binding");
        forget(&shared, &fw, &mut state, &pod, &node);
        shared.queue.add_backoff(info);
        return;
    }
    if status.is_success() {
        let binder = shared
            .extenders
            .iter()
            .find(|e| e.is_binder() && e.is_interested(&pod));
        status = match binder {
            Some(ext) => match ext.bind(&pod, &node).await {
                Ok(()) => Status::success(),
                Err(e) => Status::error(e.to_string()),
            },
            None => fw.run_bind(&ctx, &state, &pod, &node).await,
        };
        if !status.is_success() && status.cause.is_none() && landed(&shared, &pod, &node).await {
            // The answer was lost (a timeout, a dropped connection, a 5xx after the
            // write) but the binding took: a retry would only be refused as a conflict.
            debug!(pod = %pod.key, %node, status = %status, "binding answered with an error but bound");
            status = Status::success();
        }
    }
    if status.is_success() {
        debug!(pod = %pod.key, %node, attempt = ?started.elapsed(), ?pre_bind, "bound");
        let metrics = mcsched_engine::metrics::global();
        metrics.attempt(
            "scheduled",
            &scheduler_name,
            started.elapsed().as_secs_f64(),
        );
        metrics.pod_scheduled(info.attempts, info.initial_attempt.map(|t| t.elapsed()));
        shared
            .events
            .scheduled(&scheduler_name, &pod.object(), &node);
        fw.run_post_bind(&state, &pod, &node);
        shared.queue.done(&pod);
        return;
    }
    forget(&shared, &fw, &mut state, &pod, &node);
    warn!(pod = %pod.key, %node, status = %status, "binding failed");
    if still_to_bind(&shared, &pod, status.cause).await {
        let failure = Failure::Error(format!("Binding rejected: {status}"));
        handle_failure(&shared, &scheduler_name, info, failure, None, started);
    } else {
        // Deleted, replaced by a pod of the same name (queued on its own), or bound
        // elsewhere: the watch tells the rest.
        shared.queue.done(&pod);
    }
}

/// Whether the pod, read back, is this pod (its UID) bound to `node`.
async fn landed(shared: &Shared, pod: &PodInfo, node: &str) -> bool {
    let pods: Api<Pod> = Api::namespaced(shared.bind_ctx.client.clone(), &pod.namespace);
    matches!(pods.get_opt(&pod.name).await, Ok(Some(now))
        if now.metadata.uid.as_deref() == Some(pod.uid.as_str())
            && now.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
}

/// Whether a pod whose binding failed still waits for one, from the API's answer: a 404
/// means it is gone; after a 409 the pod is read back (gone, another UID, or bound
/// already: nothing to do; the same pod unbound: retry); other errors retry.
async fn still_to_bind(shared: &Shared, pod: &PodInfo, cause: Option<Cause>) -> bool {
    match cause {
        Some(Cause::NotFound) => false,
        Some(Cause::Conflict) => {
            let pods: Api<Pod> = Api::namespaced(shared.bind_ctx.client.clone(), &pod.namespace);
            match pods.get_opt(&pod.name).await {
                Ok(Some(now)) => {
                    now.metadata.uid.as_deref() == Some(pod.uid.as_str())
                        && now
                            .spec
                            .as_ref()
                            .and_then(|s| s.node_name.as_deref())
                            .is_none_or(str::is_empty)
                }
                Ok(None) => false,
                // Unknown: retrying is safe, the next binding answers again.
                Err(_) => true,
            }
        }
        None => true,
    }
}
