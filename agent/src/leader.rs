//! Leader election on a coordination.k8s.io Lease, with client-go's rules: the lease is
//! taken when its holder has not renewed within leaseDuration (judged by our own clock
//! since we last saw it change), renewed every retryPeriod, and given up when a renewal
//! has not succeeded for renewDeadline. Standbys keep watching; only the leader binds.

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

pub struct Elector {
    api: Api<Lease>,
    cfg: ElectionConfig,
    /// The holder and renew time we last saw, and when we saw them change.
    observed: Option<(Option<String>, Option<MicroTime>, Instant)>,
}

#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    Held,
    HeldByOther(String),
}

impl Elector {
    pub fn new(client: kube::Client, cfg: ElectionConfig) -> Self {
        Elector {
            api: Api::namespaced(client, &cfg.lease_namespace),
            cfg,
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

    /// Campaigns until `stop` is set; `leader` tells the scheduler whether it may bind.
    pub async fn run(mut self, leader: watch::Sender<bool>, mut stop: watch::Receiver<bool>) {
        let mut last_renew: Option<Instant> = None;
        loop {
            if *stop.borrow() {
                break;
            }
            let result = self.try_acquire_or_renew().await;
            let is_leader = *leader.borrow();
            match result {
                Ok(Attempt::Held) => {
                    last_renew = Some(Instant::now());
                    if !is_leader {
                        info!(lease = %self.cfg.lease_name, identity = %self.cfg.identity, "became leader");
                        let _ = leader.send(true);
                    }
                }
                Ok(Attempt::HeldByOther(holder)) => {
                    if is_leader {
                        warn!(%holder, "lost the leader lease to another holder; stop binding");
                        let _ = leader.send(false);
                    }
                    last_renew = None;
                }
                Err(e) => {
                    let expired = last_renew.is_none_or(|t| t.elapsed() >= self.cfg.renew_deadline);
                    if is_leader && expired {
                        warn!(error = %e, "could not renew the leader lease within renewDeadline; stop binding");
                        let _ = leader.send(false);
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(self.cfg.retry_period) => {}
                _ = stop.changed() => {}
            }
        }
        if *leader.borrow() {
            let _ = leader.send(false);
            self.release().await;
        }
    }
}
