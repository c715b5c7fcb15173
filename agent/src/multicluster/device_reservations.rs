//! Leaf devices held for pods on their way to a leaf, as Reserve holds host devices in
//! flight: the leaf check allocates a copy's claims on a leaf node, and until the leaf's
//! scheduler has placed the copy (its own allocation written by then), later cycles count
//! those devices as taken, or two pods sent together would both count on one device and
//! the second would wait in the leaf until it is taken back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::resource::v1::ResourceClaim;
use mcsched_engine::dra_state::ResourceClaims;

struct Held {
    /// The UIDs of the claims put in flight.
    claims: Vec<String>,
    until: Instant,
}

/// Host pod key → the allocations held for it, in one leaf's claim tracker.
#[derive(Default)]
pub struct DeviceReservations {
    held: Mutex<HashMap<String, Held>>,
}

impl DeviceReservations {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Holds `claims` (allocated) in `tracker` for `pod` for at most `ttl`: by then a
    /// copy still waiting in the leaf is taken back (`--leaf-pending-timeout`).
    pub fn hold(
        &self,
        tracker: &ResourceClaims,
        pod: &str,
        claims: &[Arc<ResourceClaim>],
        ttl: Duration,
    ) {
        if claims.is_empty() {
            return;
        }
        self.release(tracker, pod);
        for c in claims {
            tracker.signal_pending_allocation(c.clone());
        }
        let uids = claims
            .iter()
            .map(|c| c.metadata.uid.clone().unwrap_or_default())
            .collect();
        self.lock().insert(
            pod.to_string(),
            Held {
                claims: uids,
                until: Instant::now() + ttl,
            },
        );
    }

    /// Lets go of what `pod` holds: its copy is placed in the leaf, or it went elsewhere.
    pub fn release(&self, tracker: &ResourceClaims, pod: &str) {
        if let Some(h) = self.lock().remove(pod) {
            for uid in h.claims {
                tracker.maybe_remove_pending_allocation(&uid, false);
            }
        }
    }

    /// Lets go of the holds that outlived their time.
    pub fn expire(&self, tracker: &ResourceClaims, now: Instant) {
        let expired: Vec<String> = (self.lock().iter())
            .filter(|(_, h)| h.until <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for pod in expired {
            self.release(tracker, &pod);
        }
    }

    /// How many pods hold devices.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::resource::v1::{
        AllocationResult, DeviceAllocationResult, DeviceRequestAllocationResult,
        ResourceClaimStatus,
    };

    fn allocated(uid: &str) -> Arc<ResourceClaim> {
        let mut c = ResourceClaim::default();
        c.metadata.namespace = Some("default".into());
        c.metadata.name = Some(uid.into());
        c.metadata.uid = Some(uid.into());
        c.status = Some(ResourceClaimStatus {
            allocation: Some(AllocationResult {
                devices: Some(DeviceAllocationResult {
                    results: Some(vec![DeviceRequestAllocationResult {
                        device: "gpu-0".into(),
                        driver: "gpu.example.com".into(),
                        pool: "east-1".into(),
                        request: "gpu".into(),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        Arc::new(c)
    }

    fn held_devices(tracker: &ResourceClaims) -> usize {
        let mut n = 0;
        tracker.for_each_allocation(|_| n += 1);
        n
    }

    #[test]
    fn held_devices_count_as_taken_until_released_or_expired() {
        let tracker = ResourceClaims::new();
        let holds = DeviceReservations::default();
        holds.hold(
            &tracker,
            "default/a",
            &[allocated("a")],
            Duration::from_secs(60),
        );
        holds.hold(
            &tracker,
            "default/b",
            &[allocated("b")],
            Duration::from_secs(1),
        );
        assert_eq!(held_devices(&tracker), 2);
        holds.release(&tracker, "default/a");
        assert_eq!(held_devices(&tracker), 1);
        holds.expire(&tracker, Instant::now() + Duration::from_secs(2));
        assert_eq!(held_devices(&tracker), 0);
        assert!(holds.is_empty());
    }

    #[test]
    fn holding_again_replaces_the_pods_earlier_hold() {
        let tracker = ResourceClaims::new();
        let holds = DeviceReservations::default();
        holds.hold(
            &tracker,
            "default/a",
            &[allocated("a")],
            Duration::from_secs(60),
        );
        holds.hold(
            &tracker,
            "default/a",
            &[allocated("a")],
            Duration::from_secs(60),
        );
        assert_eq!(held_devices(&tracker), 1);
        holds.release(&tracker, "default/a");
        assert_eq!(held_devices(&tracker), 0);
    }
}
