//! kube's FailureHandler and the one way an assumed placement is undone.

use std::sync::Arc;
use std::time::Instant;

use tracing::debug;

use super::Shared;
use crate::observe::events::Message;
use mcsched_engine::framework::runtime::CycleRecord;
use mcsched_engine::framework::{
    CycleState, FitError, Framework, QueuedPodInfo, Status, fit_error,
};
use mcsched_engine::nominator::Nominating;
use mcsched_engine::snapshot::PodInfo;

/// Why an attempt ended without a binding.
pub(super) enum Failure {
    /// No node fits (Filter), or the chosen one was refused (Reserve, Permit): the pod
    /// waits in unschedulablePods for an event that may help.
    Unschedulable {
        fit: Box<FitError>,
        /// What becomes of the pod's nomination (preemption's answer).
        nominating: Nominating,
        /// The pods preemption evicts for it.
        victims: Vec<String>,
    },
    /// The pod's group cannot be placed as a whole (kube's errPodGroupUnschedulable):
    /// the pod waits in unschedulablePods for any event; its nomination becomes what the
    /// group's cycle says (cleared; kept; where pod group preemption made room).
    Group(String, Nominating),
    /// Anything else: retried after backoff.
    Error(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Unschedulable { fit, .. } => write!(f, "{fit}"),
            Failure::Group(m, _) | Failure::Error(m) => f.write_str(m),
        }
    }
}

impl Failure {
    /// kube's FitError for a pod rejected after its node was chosen (Reserve, Permit,
    /// WaitOnPermit): one node, rejected by that plugin.
    pub(super) fn on_node(node: &str, status: Status) -> Self {
        let mut statuses = mcsched_engine::framework::NodeStatuses::new();
        statuses.insert(node.to_string(), status);
        Failure::Unschedulable {
            fit: Box::new(fit_error(1, statuses)),
            nominating: Nominating::Override(String::new()),
            victims: Vec::new(),
        }
    }
}

/// Metrics, the FailedScheduling event and PodScheduled condition, the explanation (when
/// the attempt's `record` is given), and the queue: unschedulablePods or backoff.
pub(super) fn handle_failure(
    shared: &Shared,
    scheduler_name: &str,
    info: QueuedPodInfo,
    failure: Failure,
    record: Option<&CycleRecord>,
    started: Instant,
) {
    let metrics = mcsched_engine::metrics::global();
    let (reason, message, nominating) = match &failure {
        Failure::Unschedulable {
            fit,
            nominating,
            victims,
        } => {
            let message = fit.to_string();
            debug!(pod = %info.pod.key, %message, "unschedulable");
            metrics.attempt(
                "unschedulable",
                scheduler_name,
                started.elapsed().as_secs_f64(),
            );
            if let Some(record) = record {
                let nominated = match nominating {
                    Nominating::Override(n) if !n.is_empty() => Some(n.clone()),
                    _ => None,
                };
                shared.explanations.record_failure(
                    scheduler_name,
                    &info.pod.key,
                    record,
                    fit,
                    nominated,
                    victims.clone(),
                );
            }
            ("Unschedulable", message, nominating.clone())
        }
        Failure::Group(message, nominating) => {
            debug!(pod = %info.pod.key, %message, "pod group unschedulable");
            metrics.attempt(
                "unschedulable",
                scheduler_name,
                started.elapsed().as_secs_f64(),
            );
            if let Some(record) = record {
                let num_all = shared.cache().snapshot().len();
                shared.explanations.record_group_failure(
                    scheduler_name,
                    &info.pod.key,
                    record,
                    message,
                    num_all,
                );
            }
            ("Unschedulable", message.clone(), nominating.clone())
        }
        Failure::Error(message) => {
            metrics.attempt("error", scheduler_name, 0.0);
            // kube clears the nomination of a pod whose attempt failed with an error.
            (
                "SchedulerError",
                message.clone(),
                Nominating::Override(String::new()),
            )
        }
    };
    // The nominator before the API: the next cycles keep the room made for the pod at
    // once (kube's AddNominatedPod in its failure handler). A pod deleted meanwhile
    // is not nominated again.
    let id = mcsched_engine::queue::id(&info.pod).to_string();
    let object = info.pod.pod();
    let current = info.pod.nominated_node_name().unwrap_or_default();
    // Changed in the API only when it differs, as kube's updatePod.
    let nominated_node = match &nominating {
        Nominating::Override(n) if n != current => Some(n.clone()),
        _ => None,
    };
    let mut info = info;
    // Back to the queue (and nominator) compact, as it came, with the nomination already
    // in its status as kube's API cacher patches the queued pod: the next attempt must
    // see it (PodEligibleToPreemptOthers) before the status write comes back by the watch,
    // or it preempts again the victims still terminating.
    info.pod = match &nominated_node {
        Some(node) => {
            let mut pod = (*object).clone();
            pod.status.get_or_insert_default().nominated_node_name =
                (!node.is_empty()).then(|| node.clone());
            Arc::new(PodInfo::compact(Arc::new(pod)))
        }
        None => info.pod.compacted(),
    };
    shared
        .profiles
        .nominator
        .add(info.pod.clone(), nominating.clone());
    if shared.queue.is_gone(&id) {
        shared.profiles.nominator.delete(&id);
    }
    shared
        .events
        .failed_scheduling(scheduler_name, &object, message.clone());
    shared.events.send(Message::Unschedulable {
        namespace: info.pod.namespace.clone(),
        name: info.pod.name.clone(),
        reason,
        message,
        nominated_node,
    });
    if let Failure::Unschedulable { fit, .. } = &failure {
        let d = &fit.diagnosis;
        let mut plugins: Vec<&'static str> = d
            .unschedulable_plugins
            .union(&d.pending_plugins)
            .copied()
            .collect();
        plugins.sort_unstable();
        info.rejection = Some(mcsched_engine::framework::Rejection {
            profile: scheduler_name.to_string(),
            plugins,
        });
    }
    match failure {
        Failure::Unschedulable { fit, .. } if !fit.diagnosis.pending_plugins.is_empty() => shared
            .queue
            .add_pending(info, fit.diagnosis.unschedulable_plugins),
        Failure::Unschedulable { fit, .. } => shared
            .queue
            .add_unschedulable(info, fit.diagnosis.unschedulable_plugins),
        Failure::Group(..) => shared.queue.add_unschedulable(info, Default::default()),
        Failure::Error(_) => shared.queue.add_backoff(info),
    }
}

/// A placement that will not happen: Unreserve runs (in reverse order) and the pod's
/// assumption leaves the cache.
/// A pod whose attempt panicked (caught by [`crate::observe::panics::guarded`]): its
/// assumed placement undone, and the attempt failed as an error (an event, the metric,
/// backoff). The Reserve plugins' state went with the attempt, so Unreserve cannot run.
pub(super) fn after_panic(shared: &Shared, info: QueuedPodInfo, what: &str, panic: String) {
    let pod = info.pod.clone();
    let assumed = shared.cache().assumed_uid(&pod.key) == Some(pod.uid.as_str());
    if assumed {
        shared.cache().forget(&pod.key, &pod.uid);
        shared.profiles.pod_groups.forget(&pod);
    }
    let scheduler = shared
        .profiles
        .for_pod(&pod.object())
        .map(|fw| fw.scheduler_name.clone())
        .unwrap_or_default();
    handle_failure(
        shared,
        &scheduler,
        info,
        Failure::Error(format!("internal error: the {what} panicked: {panic}")),
        None,
        Instant::now(),
    );
}

pub(super) fn forget(
    shared: &Shared,
    fw: &Framework,
    state: &mut CycleState,
    pod: &PodInfo,
    node: &str,
) {
    fw.run_unreserve(state, pod, node);
    shared.cache().forget(&pod.key, &pod.uid);
    shared.profiles.pod_groups.forget(pod);
}
