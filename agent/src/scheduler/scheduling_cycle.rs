//! kube's `schedulingCycle`: one pod through schedule_pod (PostFilter when nothing fits),
//! then assume, Reserve and Permit. What it places goes to the binding cycle.

use std::sync::Arc;
use std::time::Instant;

use super::Shared;
use super::failure::{Failure, forget, handle_failure};
use super::schedule_pod::{run_post_filter, schedule_pod};
use mcsched_engine::framework::runtime::CycleRecord;
use mcsched_engine::framework::{Code, CycleState, Framework, QueuedPodInfo, Status};
use mcsched_engine::nominator::Nominating;
use mcsched_engine::snapshot::PodInfo;

/// A pod assumed on its node, Reserve and Permit passed (or Permit said Wait).
pub(super) struct Placed {
    pub fw: Arc<Framework>,
    pub state: CycleState,
    pub pod: Arc<PodInfo>,
    pub node: String,
    pub info: QueuedPodInfo,
    pub started: Instant,
    /// Permit said Wait: the record turns into a failure's explanation if rejected.
    pub waiting: Option<CycleRecord>,
}

/// `leader`: checked right before preemption evicts anything (fencing).
pub(super) async fn scheduling_cycle(
    shared: &Arc<Shared>,
    leader: &tokio::sync::watch::Receiver<bool>,
    mut info: QueuedPodInfo,
) -> Option<Placed> {
    // Queued compact; the cycle reads the whole pod on every node.
    info.pod = info.pod.decoded();
    let pod = info.pod.clone();
    let Some(fw) = shared.profiles.for_pod(&pod.object()).cloned() else {
        shared.queue.done(&pod);
        return None;
    };
    let scheduler_name = fw.scheduler_name.as_str();
    let assumed = shared.cache().assumed_uid(&pod.key).map(String::from);
    match assumed {
        // Placed already; its binding is in flight.
        Some(uid) if uid == pod.uid => {
            shared.queue.done(&pod);
            return None;
        }
        // An earlier pod of this name is still being bound: this one waits its turn
        // instead of being dropped.
        Some(_) => {
            shared.queue.add_backoff(info);
            return None;
        }
        None => {}
    }
    let started = Instant::now();
    let snapshot = shared.cache().snapshot();
    let fw = fw.clone();
    let mut state = CycleState::new();
    // Plugin timings for a sample of cycles only, as kube-scheduler.
    state.set_record_plugin_metrics(mcsched_engine::metrics::sample_plugin_metrics(
        &mut rand::rng(),
    ));
    let mut record = CycleRecord::default();
    let result = schedule_pod(
        &fw,
        &shared.extenders,
        &mut state,
        &pod,
        &snapshot,
        &mut record,
        false,
    )
    .await;
    let metrics = mcsched_engine::metrics::global();
    metrics.scheduling_algorithm(started.elapsed().as_secs_f64());
    let outcome = if result.is_ok() {
        "Success"
    } else {
        "Unschedulable"
    };
    metrics.plugin_evaluations(&record.evaluations, scheduler_name);
    for d in &record.durations {
        metrics.extension_point(
            &d.extension_point,
            outcome,
            scheduler_name,
            d.micros as f64 / 1e6,
        );
    }
    let node = match result {
        Ok(r) => r.node,
        Err(mut fit) => {
            // kube: no nodes at all is an error, which clears a nomination; PostFilter
            // not run or not eligible keeps it.
            let mut nominating = if fit.num_all_nodes == 0 {
                Nominating::Override(String::new())
            } else {
                Nominating::Noop
            };
            let mut victims = Vec::new();
            if fw.has_post_filter() && fit.num_all_nodes > 0 {
                metrics.preemption_attempts.inc();
            }
            if let Some((res, plugin)) = run_post_filter(&fw, &state, &pod, &snapshot, &mut fit) {
                if res.clears_nomination {
                    nominating = Nominating::Override(String::new());
                }
                if let Some(node) = &res.nominated_node
                    && crate::control::leader::may_act(leader, &shared.lease_health)
                {
                    nominating = Nominating::Override(node.clone());
                    victims = res.victims.iter().map(|v| v.key.clone()).collect();
                    // A pod's victims are pods: no group is disrupted whole by one.
                    metrics.preempting("pod", victims.len(), 0, res.pdb_violations);
                    crate::scheduler::preemption::evict(
                        &shared.bind_ctx.client,
                        &shared.events,
                        &fw,
                        plugin,
                        &pod,
                        Some(node.as_str()),
                        &res.victims,
                        &res.lower_nominated,
                    );
                }
            }
            let failure = Failure::Unschedulable {
                fit,
                nominating,
                victims,
            };
            handle_failure(
                shared,
                scheduler_name,
                info,
                failure,
                Some(&record),
                started,
            );
            return None;
        }
    };
    shared
        .explanations
        .record_success(scheduler_name, &pod.key, &record, &node, snapshot.len());

    // Let go of the snapshot first: the cache then changes the node in place instead of
    // copying the list of every node.
    record.feasible = record.feasible.detached();
    drop(snapshot);
    let placing = Placing {
        fw: fw.clone(),
        state,
        info,
        node,
        record,
        started,
    };
    match assume_reserve_permit(shared, placing) {
        Ok(placed) => Some(placed),
        Err(refused) => {
            let Refused {
                info,
                failure,
                record,
            } = *refused;
            handle_failure(
                shared,
                scheduler_name,
                info,
                failure,
                Some(&record),
                started,
            );
            None
        }
    }
}

/// A placement Reserve or Permit refused, undone: what the failure handler needs.
pub(super) struct Refused {
    pub info: QueuedPodInfo,
    pub failure: Failure,
    pub record: CycleRecord,
}

/// A pod the algorithm found a node for, before it is assumed there.
pub(super) struct Placing {
    pub fw: Arc<Framework>,
    pub state: CycleState,
    pub info: QueuedPodInfo,
    pub node: String,
    pub record: CycleRecord,
    pub started: Instant,
}

/// kube's assume, Reserve and Permit: the pod placed (Permit passed or said Wait), or
/// undone with the failure to hand to the failure handler. A pod Permit told to wait
/// waits for its verdict among the framework's waiting pods.
pub(super) fn assume_reserve_permit(
    shared: &Arc<Shared>,
    placing: Placing,
) -> Result<Placed, Box<Refused>> {
    let Placing {
        fw,
        mut state,
        info,
        node,
        record,
        started,
    } = placing;
    let pod = info.pod.clone();
    shared.cache().assume(pod.clone(), &node);
    shared.profiles.pod_groups.assume(&pod);
    shared
        .profiles
        .nominator
        .delete(mcsched_engine::queue::id(&pod));
    let reserved = fw.run_reserve(&mut state, &pod, &node);
    let (permit, waits) = if reserved.is_success() {
        fw.run_permit(&state, &pod, &node)
    } else if reserved.is_rejected() {
        (reserved, Vec::new())
    } else {
        let msg = format!(
            "running Reserve plugin {:?}: {}",
            reserved.plugin,
            reserved.message()
        );
        (Status::error(msg).with_plugin(reserved.plugin), Vec::new())
    };
    let waiting = permit.code == Code::Wait;
    if waiting {
        fw.add_waiting_pod(pod.clone(), &node, &waits);
    } else if !permit.is_success() {
        forget(shared, &fw, &mut state, &pod, &node);
        let failure = if permit.is_rejected() {
            Failure::on_node(&node, permit)
        } else {
            Failure::Error(permit.message())
        };
        return Err(Box::new(Refused {
            info,
            failure,
            record,
        }));
    }
    Ok(Placed {
        fw,
        state,
        pod,
        node,
        info,
        started,
        waiting: waiting.then_some(record),
    })
}
