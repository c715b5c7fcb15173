//! Leader election on a coordination.k8s.io Lease, with client-go's rules: the lease is
//! taken when its holder has not renewed within leaseDuration (judged by our own clock
//! since we last saw it change), renewed every retryPeriod, and given up when a renewal
//! has not succeeded for renewDeadline. Standbys keep watching; only the leader binds.
//!
//! Fencing: leadership ends at the renew deadline, measured on the monotonic clock from
//! the last successful renewal, whatever the requests are doing — a renewal that hangs is
//! cut off there — and an agent that lost the Lease ends (`Ended::Lost`), as
//! kube-scheduler exits, so that it restarts as a standby with fresh caches.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tracing::{info, warn};

#[derive(Debug, Clone)]
pub struct ElectionConfig {
    pub lease_name: String,
    pub lease_namespace: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// Fencing: whether this agent may act as the leader right now — it leads, and its last
/// renewal is within renewDeadline. Checked right before every write a leader makes.
pub fn may_act(leader: &watch::Receiver<bool>, lease: &LeaseHealth) -> bool {
    *leader.borrow() && lease.within_deadline()
}

/// How an election ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Asked to stop; the Lease was released if held.
    Stopped,
    /// Leadership was lost: not renewed within renewDeadline, or taken by another.
    Lost,
}

/// When the Lease was last renewed by this agent, for the health check: kube-scheduler's
/// `/healthz` fails when its leader has not renewed for longer than it may lead.
#[derive(Clone, Default)]
pub struct LeaseHealth {
    inner: Arc<Mutex<Option<(Instant, Duration)>>>,
    /// Set once leadership was lost: the agent is on its way out, and nothing it still
    /// asks of the API server (a read-back of a refused binding) may keep it waiting on a
    /// network that may not answer.
    lost: Arc<std::sync::atomic::AtomicBool>,
}

/// How much longer than renewDeadline a leader may go unrenewed before it is unhealthy
/// (client-go's HealthzAdaptor timeout).
pub const HEALTH_GRACE: Duration = Duration::from_secs(20);

impl LeaseHealth {
    fn renewed(&self, deadline: Duration) {
        *self.inner.lock().unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), deadline));
    }

    #[cfg(test)]
    pub fn renewed_for_test(&self, deadline: Duration) {
        self.renewed(deadline);
    }

    fn cleared(&self) {
        *self.inner.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// False once renewDeadline has passed since the last renewal, even before the
    /// elector (which may not have run yet, say after the process was frozen) says so.
    pub fn within_deadline(&self) -> bool {
        match *self.inner.lock().unwrap_or_else(|e| e.into_inner()) {
            Some((at, deadline)) => at.elapsed() < deadline,
            None => true,
        }
    }

    /// Whether this agent led and lost the Lease (it exits, as kube-scheduler does).
    pub fn is_lost(&self) -> bool {
        self.lost.load(std::sync::atomic::Ordering::SeqCst)
    }

    #[cfg(test)]
    pub fn lost_for_test(&self) {
        self.lost.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// When leadership ends unless renewed first: the last renewal + renewDeadline; None
    /// when not leading.
    pub fn deadline(&self) -> Option<Instant> {
        let last = *self.inner.lock().unwrap_or_else(|e| e.into_inner());
        last.map(|(at, deadline)| at + deadline)
    }

    /// An error when this agent leads but has not renewed within its deadline + grace.
    pub fn check(&self) -> Result<(), StaleLease> {
        match *self.inner.lock().unwrap_or_else(|e| e.into_inner()) {
            Some((at, deadline)) if at.elapsed() > deadline + HEALTH_GRACE => Err(StaleLease {
                ago: at.elapsed(),
                deadline,
            }),
            _ => Ok(()),
        }
    }
}

/// A leader that has not renewed its Lease within renewDeadline plus [`HEALTH_GRACE`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("leader election: the Lease was last renewed {ago:.0?} ago (renewDeadline {deadline:?})")]
pub struct StaleLease {
    pub ago: Duration,
    pub deadline: Duration,
}

pub struct Elector {
    api: Api<Lease>,
    cfg: ElectionConfig,
    health: LeaseHealth,
    /// The holder and renew time we last saw, and when we saw them change.
    observed: Option<(Option<String>, Option<MicroTime>, Instant)>,
}

#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    Held,
    HeldByOther(String),
}

impl Elector {
    /// `client` should be the election's own, so that no other traffic queues the
    /// renewals behind it.
    pub fn new(client: kube::Client, cfg: ElectionConfig, health: LeaseHealth) -> Self {
        // A standby reports 0 from the start, as client-go's elector does once created.
        mcsched_engine::metrics::global().leading(&cfg.lease_name, false);
        Elector {
            api: Api::namespaced(client, &cfg.lease_namespace),
            cfg,
            health,
            observed: None,
        }
    }

    fn spec(&self, previous: Option<&LeaseSpec>) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        let same_holder =
            previous.and_then(|p| p.holder_identity.as_deref()) == Some(self.cfg.identity.as_str());
        let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.cfg.identity.clone()),
            lease_duration_seconds: Some(self.cfg.lease_duration.as_secs().max(1) as i32),
            acquire_time: if same_holder {
                previous.and_then(|p| p.acquire_time.clone())
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(if same_holder || previous.is_none() {
                transitions
            } else {
                transitions + 1
            }),
            ..Default::default()
        }
    }

    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        let current = self.api.get_opt(&self.cfg.lease_name).await?;
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.cfg.lease_name.clone()),
                    namespace: Some(self.cfg.lease_namespace.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec(None)),
            };
            self.api.create(&PostParams::default(), &lease).await?;
            return Ok(Attempt::Held);
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|(h, r, _)| *h != holder || *r != spec.renew_time);
        if changed {
            self.observed = Some((holder.clone(), spec.renew_time.clone(), Instant::now()));
        }
        let seen_at = self
            .observed
            .as_ref()
            .map(|o| o.2)
            .unwrap_or_else(Instant::now);
        let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
        if let Some(h) = &holder
            && *h != self.cfg.identity
            && seen_at.elapsed() < duration
        {
            return Ok(Attempt::HeldByOther(h.clone()));
        }
        lease.spec = Some(self.spec(Some(&spec)));
        // The resourceVersion in `lease` makes this a compare-and-swap.
        self.api
            .replace(&self.cfg.lease_name, &PostParams::default(), &lease)
            .await?;
        Ok(Attempt::Held)
    }

    /// Gives the lease up so a standby takes over without waiting for it to expire.
    async fn release(&mut self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.cfg.lease_name).await else {
            return;
        };
        let ours = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            == Some(self.cfg.identity.as_str());
        if !ours {
            return;
        }
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(MicroTime(Timestamp::now()));
        }
        if let Err(e) = self
            .api
            .replace(&self.cfg.lease_name, &PostParams::default(), &lease)
            .await
        {
            warn!(error = %e, "could not release the leader lease");
        }
    }

    /// Campaigns until `stop` is set or leadership is lost; `leader` tells the scheduler
    /// whether it may act. While leading, each renewal must succeed before the renew
    /// deadline (last renewal + renewDeadline); one still running then is abandoned and
    /// leadership ends at that instant.
    pub async fn run(
        mut self,
        leader: watch::Sender<bool>,
        mut stop: watch::Receiver<bool>,
    ) -> Ended {
        let mut last_renew: Option<Instant> = None;
        loop {
            if *stop.borrow() {
                break;
            }
            let is_leader = *leader.borrow();
            // A standby's attempt is bounded by the retry period, a leader's by its deadline.
            let deadline = match last_renew {
                Some(t) if is_leader => t + self.cfg.renew_deadline,
                _ => Instant::now() + self.cfg.retry_period.max(Duration::from_secs(1)),
            };
            let attempt = tokio::time::timeout_at(
                tokio::time::Instant::from_std(deadline),
                self.try_acquire_or_renew(),
            );
            let result = tokio::select! {
                r = attempt => r,
                _ = stop.changed() => break,
            };
            match result {
                Ok(Ok(Attempt::Held)) => {
                    last_renew = Some(Instant::now());
                    self.health.renewed(self.cfg.renew_deadline);
                    if !is_leader {
                        info!(lease = %self.cfg.lease_name, identity = %self.cfg.identity, "became leader");
                        self.tell(&leader, true);
                    }
                }
                Ok(Ok(Attempt::HeldByOther(holder))) => {
                    if is_leader {
                        warn!(%holder, "lost the leader lease to another holder");
                        return self.lost(&leader);
                    }
                    last_renew = None;
                }
                Ok(Err(e)) => {
                    let expired = last_renew.is_none_or(|t| t.elapsed() >= self.cfg.renew_deadline);
                    if is_leader && expired {
                        warn!(error = %e, "could not renew the leader lease within renewDeadline");
                        return self.lost(&leader);
                    }
                }
                Err(_) => {
                    if is_leader {
                        warn!(deadline = ?self.cfg.renew_deadline, "the leader lease renewal did not finish within renewDeadline");
                        return self.lost(&leader);
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(self.cfg.retry_period) => {}
                _ = stop.changed() => {}
            }
        }
        if *leader.borrow() {
            self.tell(&leader, false);
            self.health.cleared();
            self.release().await;
        }
        Ended::Stopped
    }

    /// Whether this agent leads, to the scheduler and to leader_election_master_status.
    fn tell(&self, leader: &watch::Sender<bool>, leading: bool) {
        let _ = leader.send(leading);
        mcsched_engine::metrics::global().leading(&self.cfg.lease_name, leading);
    }

    fn lost(&self, leader: &watch::Sender<bool>) -> Ended {
        // Before the news: whoever it wakes sees the Lease lost.
        self.health
            .lost
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.tell(leader, false);
        self.health.cleared();
        Ended::Lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// An API server holding one Lease, whose answers hang once `hang` is set.
    fn lease_server(hang: Arc<AtomicBool>) -> kube::Client {
        let created = Arc::new(AtomicBool::new(false));
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let (hang, created) = (hang.load(Ordering::SeqCst), created.clone());
            let method = req.method().clone();
            async move {
                if hang {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
                let lease = serde_json::json!({
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": "s", "namespace": "ns", "resourceVersion": "1"},
                    "spec": {"holderIdentity": "me", "leaseDurationSeconds": 2,
                        "renewTime": MicroTime(Timestamp::now())}
                });
                let (code, body) = if method == http::Method::GET && !created.load(Ordering::SeqCst)
                {
                    (
                        404,
                        serde_json::json!({"kind": "Status", "apiVersion": "v1",
                        "status": "Failure", "code": 404, "reason": "NotFound"}),
                    )
                } else {
                    created.store(true, Ordering::SeqCst);
                    (200, lease)
                };
                let body = serde_json::to_vec(&body).unwrap_or_default();
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .status(code)
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(body))
                        .unwrap_or_else(|_| http::Response::new(kube::client::Body::empty())),
                )
            }
        });
        kube::Client::new(service, "ns")
    }

    #[tokio::test]
    async fn a_renewal_that_hangs_ends_leadership_at_the_renew_deadline() {
        let hang = Arc::new(AtomicBool::new(false));
        let cfg = ElectionConfig {
            lease_name: "s".into(),
            lease_namespace: "ns".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(2),
            renew_deadline: Duration::from_millis(800),
            retry_period: Duration::from_millis(100),
        };
        let health = LeaseHealth::default();
        let elector = Elector::new(lease_server(hang.clone()), cfg, health.clone());
        let (leader_tx, mut leader) = watch::channel(false);
        let (_stop_tx, stop) = watch::channel(false);
        let run = tokio::spawn(elector.run(leader_tx, stop));
        tokio::time::timeout(Duration::from_secs(5), leader.wait_for(|l| *l))
            .await
            .expect("became leader")
            .expect("elector running");
        assert!(health.check().is_ok());
        let status = || {
            let text = mcsched_engine::metrics::global().encode();
            (text.lines())
                .find_map(|l| l.strip_prefix(r#"leader_election_master_status{name="s"} "#))
                .map(String::from)
        };
        assert_eq!(status().as_deref(), Some("1"));
        let hung_at = Instant::now();
        hang.store(true, Ordering::SeqCst);
        let ended = tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .expect("ended by the deadline, not by the hung request")
            .expect("elector task");
        assert_eq!(ended, Ended::Lost);
        assert!(!*leader.borrow());
        assert_eq!(status().as_deref(), Some("0"));
        // At the latest renewDeadline after the last renewal.
        assert!(hung_at.elapsed() < Duration::from_millis(800) + Duration::from_millis(500));
    }

    #[test]
    fn health_fails_once_the_lease_is_older_than_the_deadline_and_grace() {
        let health = LeaseHealth::default();
        assert!(health.check().is_ok(), "a standby is healthy");
        health.renewed(Duration::from_secs(10));
        assert!(health.check().is_ok());
        let old = Instant::now()
            .checked_sub(Duration::from_secs(31))
            .expect("uptime above 31 s");
        *health.inner.lock().expect("lock") = Some((old, Duration::from_secs(10)));
        let err = health.check().expect_err("stale lease");
        assert_eq!(err.deadline, Duration::from_secs(10));
        assert!(err.to_string().contains("renewDeadline 10s"), "{err}");
    }
}
