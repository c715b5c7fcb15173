//! Pods a Permit plugin told to wait: assumed and reserved on their node, their binding
//! held until every waiting plugin allows them, one rejects them, or a plugin's timeout
//! passes. kube-scheduler's `waitingPodsMap` and `waitingPod`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::{Code, Status};
use crate::snapshot::PodInfo;

/// kube's `maxTimeout`: no plugin may hold a pod longer.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(15 * 60);

struct Pending {
    plugin: &'static str,
    timeout: Duration,
    deadline: Instant,
}

#[derive(Default)]
struct WaitState {
    pending: Vec<Pending>,
    /// The first verdict delivered wins (kube's buffered channel of one).
    verdict: Option<Status>,
    done: bool,
}

pub struct WaitingPod {
    pod: Arc<PodInfo>,
    node: String,
    state: Mutex<WaitState>,
    notify: Notify,
}

impl WaitingPod {
    fn new(pod: Arc<PodInfo>, node: String, waits: &[(&'static str, Duration)]) -> Self {
        let now = Instant::now();
        let pending = waits
            .iter()
            .map(|&(plugin, timeout)| Pending {
                plugin,
                timeout,
                deadline: now + timeout,
            })
            .collect();
        WaitingPod {
            pod,
            node,
            state: Mutex::new(WaitState {
                pending,
                ..Default::default()
            }),
            notify: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, WaitState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn pod(&self) -> &Arc<PodInfo> {
        &self.pod
    }

    /// The node the pod is assumed on.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The Permit plugins that have not allowed the pod yet.
    #[cfg(test)]
    pub(crate) fn pending_plugins(&self) -> Vec<&'static str> {
        self.lock().pending.iter().map(|p| p.plugin).collect()
    }

    /// `plugin` allows the pod; the last one to allow lets it bind.
    pub fn allow(&self, plugin: &str) {
        let mut st = self.lock();
        st.pending.retain(|p| p.plugin != plugin);
        if !st.pending.is_empty() {
            return;
        }
        st.verdict.get_or_insert_with(Status::success);
        st.done = true;
        drop(st);
        self.notify.notify_one();
    }

    /// Declares the pod unschedulable; false when it was already allowed or stopped.
    pub(crate) fn reject(&self, plugin: &'static str, msg: &str) -> bool {
        self.stop(Code::Unschedulable, plugin, msg)
    }

    /// Stops the wait without calling the pod unschedulable (a preempted victim goes back
    /// to the queue to be retried); false when it was already allowed or stopped.
    pub fn preempt(&self, plugin: &'static str, msg: &str) -> bool {
        self.stop(Code::Error, plugin, msg)
    }

    fn stop(&self, code: Code, plugin: &'static str, msg: &str) -> bool {
        let mut st = self.lock();
        st.pending.clear();
        st.verdict.get_or_insert_with(|| {
            Status::new(code, vec![msg.to_string().into()]).with_plugin(plugin)
        });
        let first = !st.done;
        st.done = true;
        drop(st);
        self.notify.notify_one();
        first
    }

    /// Waits for the verdict; a plugin whose timeout passes first rejects the pod.
    async fn verdict(&self) -> Status {
        loop {
            let notified = self.notify.notified();
            let next_deadline = {
                let st = self.lock();
                if let Some(v) = &st.verdict {
                    return v.clone();
                }
                st.pending
                    .iter()
                    .min_by_key(|p| p.deadline)
                    .map(|p| (p.plugin, p.timeout, p.deadline))
            };
            match next_deadline {
                Some((plugin, timeout, deadline)) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(deadline) => {
                            let msg = format!(
                                "rejected due to timeout after waiting {} at plugin {plugin}",
                                mcsched_shared::config::duration::go_string(timeout)
                            );
                            self.reject(plugin, &msg);
                        }
                    }
                }
                None => notified.await,
            }
        }
    }
}

/// The waiting pods of one profile, by UID.
#[derive(Default)]
pub(crate) struct WaitingPods {
    pods: Mutex<HashMap<String, Arc<WaitingPod>>>,
}

impl WaitingPods {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<WaitingPod>>> {
        self.pods.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Parks `pod`, assumed on `node`, for the plugins that asked it to wait.
    pub(crate) fn add(&self, pod: Arc<PodInfo>, node: &str, waits: &[(&'static str, Duration)]) {
        let uid = pod.uid.clone();
        let wp = Arc::new(WaitingPod::new(pod, node.to_string(), waits));
        self.lock().insert(uid, wp);
    }

    pub(crate) fn get(&self, uid: &str) -> Option<Arc<WaitingPod>> {
        self.lock().get(uid).cloned()
    }

    /// Every waiting pod, for plugins that decide on several at once (kube's
    /// `IterateOverWaitingPods`).
    pub(crate) fn list(&self) -> Vec<Arc<WaitingPod>> {
        self.lock().values().cloned().collect()
    }

    /// kube's `RejectWaitingPod`, for a pod deleted while waiting.
    pub(crate) fn reject(&self, uid: &str) -> bool {
        self.get(uid).is_some_and(|wp| wp.reject("", "removed"))
    }

    /// kube's `WaitOnPermit`: success at once for a pod that is not waiting; else the
    /// verdict, the pod leaving the map. A rejection comes back as is; any other failure
    /// as an Error naming the wait.
    pub(crate) async fn wait_on_permit(&self, uid: &str) -> Status {
        let Some(wp) = self.get(uid) else {
            return Status::success();
        };
        let started = std::time::Instant::now();
        let status = wp.verdict().await;
        self.lock().remove(uid);
        crate::metrics::global().permit_wait(&status.code.to_string(), started.elapsed());
        if status.is_success() || status.is_rejected() {
            return status;
        }
        Status::error(format!("waiting on permit for pod: {}", status.message()))
            .with_plugin(status.plugin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::pod_with;

    fn waiting(waits: &[(&'static str, Duration)]) -> (WaitingPods, String) {
        let pods = WaitingPods::default();
        let pod = Arc::new(pod_with(|_| {}));
        let uid = pod.uid.clone();
        pods.add(pod, "n1", waits);
        (pods, uid)
    }

    const A: &str = "PermitA";
    const B: &str = "PermitB";
    const MINUTE: Duration = Duration::from_secs(60);

    #[tokio::test(start_paused = true)]
    async fn every_waiting_plugin_must_allow() {
        let (pods, uid) = waiting(&[(A, MINUTE), (B, MINUTE)]);
        let wp = pods.get(&uid).expect("waiting");
        assert_eq!(wp.node(), "n1");
        wp.allow(A);
        assert_eq!(wp.pending_plugins(), vec![B]);
        wp.allow(B);
        assert!(pods.wait_on_permit(&uid).await.is_success());
        assert!(pods.get(&uid).is_none(), "leaves the map");
        // A pod that never waited passes at once.
        assert!(pods.wait_on_permit("other").await.is_success());
    }

    #[tokio::test(start_paused = true)]
    async fn verdicts_delivered_while_the_binder_waits() {
        let (pods, uid) = waiting(&[(A, MINUTE)]);
        let pods = Arc::new(pods);
        let waiter = tokio::spawn({
            let (pods, uid) = (pods.clone(), uid.clone());
            async move { pods.wait_on_permit(&uid).await }
        });
        tokio::task::yield_now().await;
        assert!(pods.get(&uid).expect("waiting").reject(A, "no quorum"));
        let status = waiter.await.expect("joined");
        assert_eq!(status.code, Code::Unschedulable);
        assert_eq!((status.plugin, status.message().as_str()), (A, "no quorum"));
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_timeout_to_pass_rejects_with_kubes_message() {
        let (pods, uid) = waiting(&[(A, MINUTE), (B, Duration::from_millis(1500))]);
        // Paused time: the sleep to the deadline completes as soon as all else idles.
        let status = pods.wait_on_permit(&uid).await;
        assert_eq!(status.code, Code::Unschedulable);
        assert_eq!(status.plugin, B);
        assert_eq!(
            status.message(),
            "rejected due to timeout after waiting 1.5s at plugin PermitB"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn removal_and_preemption() {
        let (pods, uid) = waiting(&[(A, MINUTE)]);
        assert!(pods.reject(&uid));
        assert!(!pods.reject(&uid), "already stopped");
        let status = pods.wait_on_permit(&uid).await;
        assert_eq!((status.code, status.plugin), (Code::Unschedulable, ""));
        assert_eq!(status.message(), "removed");

        let (pods, uid) = waiting(&[(A, MINUTE)]);
        let wp = pods.get(&uid).expect("waiting");
        assert!(wp.preempt("DefaultPreemption", "preempted"));
        // Allowing after the fact changes nothing: the first verdict stands.
        wp.allow(A);
        let status = pods.wait_on_permit(&uid).await;
        assert_eq!(status.code, Code::Error);
        assert_eq!(status.plugin, "DefaultPreemption");
        assert_eq!(status.message(), "waiting on permit for pod: preempted");
    }
}
