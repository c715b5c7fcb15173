//! A scheduling decision computed on request (a what-if, or a Pending pod's explanation):
//! the live cycle's own path, bounded so that requests cannot take the scheduler's CPU
//! or its runtime away.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use mcsched_shared::explain::{Explanation, Outcome};
use tokio::sync::Semaphore;

use crate::observe::explain::explanation;
use crate::scheduler::{Shared, run_post_filter, schedule_pod};
use mcsched_engine::framework::CycleState;
use mcsched_engine::framework::runtime::CycleRecord;
use mcsched_engine::snapshot::PodInfo;

#[derive(Debug, thiserror::Error)]
pub enum DryRunError {
    /// The pod names a scheduler this agent does not serve.
    #[error("spec.schedulerName {0:?} is not served by this agent")]
    NotServed(String),
    #[error("{0} what-ifs are already running; try again shortly")]
    Busy(usize),
    #[error("the scheduling dry run did not finish within {0:?}")]
    Timeout(Duration),
    #[error("the scheduling dry run failed: {0}")]
    Failed(String),
}

/// At most `limit` dry runs at once, each on a blocking thread (a dry run keeps a
/// thread busy for the whole filter and score phase, which must not be one of the
/// runtime's workers: those renew nothing, but they serve the requests and the watches).
pub struct DryRuns {
    permits: Arc<Semaphore>,
    limit: usize,
    timeout: Duration,
}

impl DryRuns {
    pub fn new(limit: usize, timeout: Duration) -> Self {
        DryRuns {
            permits: Arc::new(Semaphore::new(limit)),
            limit,
            timeout,
        }
    }

    pub async fn run(&self, shared: Arc<Shared>, pod: Pod) -> Result<Explanation, DryRunError> {
        let permit = self
            .permits
            .clone()
            .try_acquire_owned()
            .map_err(|_| DryRunError::Busy(self.limit))?;
        let runtime = tokio::runtime::Handle::current();
        let task = tokio::task::spawn_blocking(move || {
            // The permit is held until the work ends, even when the caller stopped
            // waiting: the limit bounds the CPU used, not the answers given.
            let _permit = permit;
            runtime.block_on(dry_run(&shared, pod))
        });
        match tokio::time::timeout(self.timeout, task).await {
            Err(_) => Err(DryRunError::Timeout(self.timeout)),
            Ok(Err(join)) if join.is_panic() => {
                let panic = crate::observe::panics::message(&*join.into_panic());
                mcsched_engine::metrics::global().recovered_panic("what_if");
                Err(DryRunError::Failed(format!(
                    "internal error: it panicked: {panic}"
                )))
            }
            Ok(Err(join)) => Err(DryRunError::Failed(join.to_string())),
            Ok(Ok(result)) => result,
        }
    }
}

/// The live scheduling cycle's decision for `pod` now, up to (not including) Reserve,
/// with every filter on every node: the same schedule_pod, extenders included, and, when
/// nothing fits, the same PostFilter dry run (nothing is evicted).
async fn dry_run(shared: &Shared, pod: Pod) -> Result<Explanation, DryRunError> {
    let Some(fw) = shared.profiles.for_pod(&pod).cloned() else {
        return Err(DryRunError::NotServed(
            mcsched_shared::pod::scheduler_name(&pod).to_string(),
        ));
    };
    let scheduler = fw.scheduler_name.clone();
    // What the queue would say before taking the pod in (a PodGroup's member waits there
    // for its group); the cycle below runs whatever it says, as kube's oracle does.
    let pre_enqueue = fw.pre_enqueue_verdicts(&pod);
    let info = PodInfo::new(Arc::new(pod));
    let snapshot = shared.cache().snapshot();
    let mut state = CycleState::new();
    state.set_dry_run();
    let mut record = CycleRecord::default();
    let result = schedule_pod(
        &fw,
        &shared.extenders,
        &mut state,
        &info,
        &snapshot,
        &mut record,
        true,
    )
    .await;
    let mut permit = Vec::new();
    let outcome = match result {
        Ok(r) => {
            // The state is a dry run's: Permit allows no waiting pod.
            permit = fw.permit_verdicts(&state, &info, &r.node);
            Outcome::Scheduled {
                leaf_node: record.leaf_nodes.get(&r.node).cloned(),
                node: r.node,
            }
        }
        Err(mut fit) => {
            let preemption = run_post_filter(&fw, &state, &info, &snapshot, &mut fit);
            let (nominated_node, victims) = match preemption {
                Some((res, _)) => (
                    res.nominated_node,
                    res.victims.iter().map(|v| v.key.clone()).collect(),
                ),
                None => (None, Vec::new()),
            };
            Outcome::Unschedulable {
                message: fit.to_string(),
                nominated_node,
                victims,
            }
        }
    };
    let mut e = explanation(
        &scheduler,
        &info.key,
        &record,
        outcome,
        snapshot.len(),
        usize::MAX,
    );
    e.pre_enqueue = pre_enqueue;
    e.permit = permit;
    Ok(e)
}
