//! The pods waiting to be scheduled, each at most once, with kube-scheduler's per-pod
//! backoff (1 s, doubling, at most 10 s) for pods that could not be placed.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Inner {
    active: VecDeque<String>,
    queued: HashSet<String>,
    attempts: HashMap<String, u32>,
    closed: bool,
}

#[derive(Clone, Default)]
pub struct SchedulingQueue {
    inner: Arc<Mutex<Inner>>,
    ready: Arc<Notify>,
}

impl SchedulingQueue {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain collections behind: still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a pod unless it is already waiting.
    pub fn add(&self, key: String) {
        {
            let mut inner = self.lock();
            if inner.closed || !inner.queued.insert(key.clone()) {
                return;
            }
            inner.active.push_back(key);
        }
        self.ready.notify_one();
    }

    /// Puts a pod back after its backoff; the backoff doubles with each failed attempt.
    pub fn add_after_backoff(&self, key: String) {
        let delay = {
            let mut inner = self.lock();
            let attempts = inner.attempts.entry(key.clone()).or_default();
            *attempts += 1;
            backoff(*attempts)
        };
        let queue = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            queue.add(key);
        });
    }

    /// The pod was placed or is gone: its next failure starts from the initial backoff.
    pub fn forget(&self, key: &str) {
        self.lock().attempts.remove(key);
    }

    /// Waits for the next pod; `None` once the queue is closed.
    pub async fn pop(&self) -> Option<String> {
        loop {
            let notified = self.ready.notified();
            {
                let mut inner = self.lock();
                if inner.closed {
                    return None;
                }
                if let Some(key) = inner.active.pop_front() {
                    inner.queued.remove(&key);
                    return Some(key);
                }
            }
            notified.await;
        }
    }

    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_waiters();
    }

    pub fn len(&self) -> usize {
        self.lock().active.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

pub fn backoff(attempts: u32) -> Duration {
    let doublings = attempts.saturating_sub(1).min(16);
    INITIAL_BACKOFF
        .saturating_mul(1 << doublings)
        .min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_ten_seconds() {
        let secs: Vec<u64> = (1..=6).map(|a| backoff(a).as_secs()).collect();
        assert_eq!(secs, vec![1, 2, 4, 8, 10, 10]);
    }

    #[tokio::test]
    async fn a_pod_waits_once_and_in_order() {
        let q = SchedulingQueue::new();
        q.add("ns/a".into());
        q.add("ns/b".into());
        q.add("ns/a".into());
        assert_eq!(q.len(), 2);
        assert_eq!(q.pop().await.as_deref(), Some("ns/a"));
        assert_eq!(q.pop().await.as_deref(), Some("ns/b"));
        q.add("ns/a".into());
        assert_eq!(q.pop().await.as_deref(), Some("ns/a"));
        q.close();
        assert_eq!(q.pop().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_requeues_later() {
        let q = SchedulingQueue::new();
        q.add_after_backoff("ns/a".into());
        q.add_after_backoff("ns/a".into());
        tokio::time::sleep(Duration::from_millis(900)).await;
        assert!(q.is_empty());
        // The second attempt's backoff (2 s) and the first's (1 s) both land; the pod
        // is queued once.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(q.len(), 1);
        q.forget("ns/a");
        q.add_after_backoff("ns/a".into());
        assert_eq!(q.pop().await.as_deref(), Some("ns/a"));
    }
}
