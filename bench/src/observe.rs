//! Watches the measured pods and notes, on this process's clock, when each was sent for
//! creation and when its binding was first seen (timestamps in the API objects have
//! only second resolution).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

#[derive(Default)]
struct State {
    created: HashMap<String, Instant>,
    /// Pod name → when its binding was seen and to which node.
    bound: HashMap<String, (Instant, String)>,
}

pub struct Observer {
    state: Arc<Mutex<State>>,
    count: watch::Receiver<usize>,
    task: JoinHandle<()>,
}

/// What was seen of the measured pods, relative to the start of their creation.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    pub bound_at: Vec<Duration>,
    /// Creation (request sent) to binding seen, per bound pod.
    pub latencies: Vec<Duration>,
    /// Bound pods per node.
    pub per_node: HashMap<String, usize>,
}

impl Observer {
    /// Starts watching the pods labelled `label` in all namespaces; returns once the
    /// watch has listed what exists.
    pub async fn start(client: &Client, label: &str) -> anyhow::Result<Self> {
        let api: Api<Pod> = Api::all(client.clone());
        let state = Arc::new(Mutex::new(State::default()));
        let (count_tx, count) = watch::channel(0usize);
        let (ready_tx, ready_rx) = oneshot::channel();
        let st = Arc::clone(&state);
        let cfg = watcher::Config::default().labels(label);
        let task = tokio::spawn(async move {
            let mut ready_tx = Some(ready_tx);
            let mut events = std::pin::pin!(watcher(api, cfg));
            while let Some(ev) = events.next().await {
                let seen = Instant::now();
                let pod = match ev {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => p,
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = ready_tx.take() {
                            let _ = tx.send(());
                        }
                        continue;
                    }
                    Ok(_) => continue,
                    Err(e) => {
                        tracing::warn!("pod watch: {e}");
                        continue;
                    }
                };
                let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
                    continue;
                };
                let name = pod.metadata.name.unwrap_or_default();
                let mut s = st.lock().unwrap_or_else(PoisonError::into_inner);
                if let std::collections::hash_map::Entry::Vacant(e) = s.bound.entry(name) {
                    e.insert((seen, node));
                    let n = s.bound.len();
                    drop(s);
                    let _ = count_tx.send(n);
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(60), ready_rx)
            .await
            .map_err(|_| anyhow::anyhow!("the pod watch did not list within 60s"))??;
        Ok(Observer { state, count, task })
    }

    /// Notes that `name`'s create request is about to be sent.
    pub fn created(&self, name: &str) {
        self.lock().created.insert(name.to_string(), Instant::now());
    }

    pub fn bound(&self) -> usize {
        *self.count.borrow()
    }

    /// Waits until `n` pods are bound; false if `idle` passes without a new binding.
    pub async fn wait_bound(&self, n: usize, idle: Duration) -> bool {
        let mut count = self.count.clone();
        loop {
            if *count.borrow_and_update() >= n {
                return true;
            }
            match tokio::time::timeout(idle, count.changed()).await {
                Ok(Ok(())) => {}
                _ => return *count.borrow() >= n,
            }
        }
    }

    pub fn observation(&self, start: Instant) -> Observation {
        let s = self.lock();
        let mut o = Observation::default();
        for (name, (at, node)) in &s.bound {
            o.bound_at.push(at.saturating_duration_since(start));
            if let Some(created) = s.created.get(name) {
                o.latencies.push(at.saturating_duration_since(*created));
            }
            *o.per_node.entry(node.clone()).or_default() += 1;
        }
        o
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
