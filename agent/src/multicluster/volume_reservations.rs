//! Leaf volumes held for pods on their way to a leaf, as VolumeBinding's assume cache
//! holds host volumes: the leaf check picks an available volume of the leaf for a pod's
//! claim, and until the leaf binds the copy's claim, later cycles must not pick the same
//! volume for another pod (two pods sent together would both count on it, and the second
//! would wait in the leaf until it is taken back).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim};

use mcsched_engine::snapshot::Snapshot;

struct Held {
    /// The claim, `namespace/name`, the volume is held for.
    claim: String,
    /// The host pod it was picked for.
    pod: String,
    until: Instant,
}

/// Volume name → who holds it, in one leaf.
#[derive(Default)]
pub struct VolumeReservations {
    held: Mutex<HashMap<String, Held>>,
}

fn claim_bound(c: &PersistentVolumeClaim) -> bool {
    c.spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .is_some_and(|v| !v.is_empty())
}

impl VolumeReservations {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Holds `volumes` ((volume, claim) pairs) for `pod` for at most `ttl`: by then a copy
    /// still waiting in the leaf is taken back (`--leaf-pending-timeout`).
    pub fn hold(&self, pod: &str, volumes: &[(String, String)], ttl: Duration) {
        if volumes.is_empty() {
            return;
        }
        let until = Instant::now() + ttl;
        let mut held = self.lock();
        for (volume, claim) in volumes {
            held.insert(
                volume.clone(),
                Held {
                    claim: claim.clone(),
                    pod: pod.to_string(),
                    until,
                },
            );
        }
    }

    /// Lets go of what `pod` holds: it did not go to this leaf after all.
    pub fn release(&self, pod: &str) {
        self.lock().retain(|_, h| h.pod != pod);
    }

    /// How many volumes are held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The leaf's snapshot with every held volume claimed by the claim it is held for, as
    /// a binding would leave it: another claim cannot match it, the same one still does.
    /// A hold ends once the leaf shows the volume claimed or the claim bound (the leaf's
    /// own decision, wherever it went), the volume is gone, or the hold expired.
    pub fn apply(&self, mut snapshot: Snapshot) -> Snapshot {
        let mut held = self.lock();
        if held.is_empty() {
            return snapshot;
        }
        let now = Instant::now();
        let volumes = &snapshot.volumes;
        held.retain(|name, h| {
            h.until > now
                && volumes
                    .volumes
                    .get(name)
                    .is_some_and(|v| v.spec.as_ref().is_none_or(|s| s.claim_ref.is_none()))
                && !volumes.claims.get(&h.claim).is_some_and(|c| claim_bound(c))
        });
        if held.is_empty() {
            return snapshot;
        }
        let mut objects = (*snapshot.volumes).clone();
        for (name, h) in held.iter() {
            let Some(v) = objects.volumes.get_mut(name) else {
                continue;
            };
            let (namespace, claim) = h.claim.split_once('/').unwrap_or(("", &h.claim));
            let mut claimed = (**v).clone();
            claimed.spec.get_or_insert_default().claim_ref = Some(ObjectReference {
                kind: Some("PersistentVolumeClaim".into()),
                namespace: Some(namespace.to_string()),
                name: Some(claim.to_string()),
                ..Default::default()
            });
            *v = Arc::new(claimed);
        }
        snapshot.volumes = Arc::new(objects);
        snapshot
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PersistentVolume;
    use mcsched_engine::snapshot::VolumeObjects;
    use serde_json::json;

    fn snapshot(claim_ref: Option<&str>, bound_claim: bool) -> Snapshot {
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "pv-1"},
            "spec": {"claimRef": claim_ref.map(|c| json!({"namespace": "default", "name": c}))},
            "status": {"phase": "Available"}
        }))
        .expect("pv");
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "data-a", "namespace": "default"},
            "spec": {"volumeName": if bound_claim { "pv-1" } else { "" }}
        }))
        .expect("claim");
        let mut s = Snapshot::default();
        let mut v = VolumeObjects::default();
        v.volumes.insert("pv-1".into(), Arc::new(pv));
        v.claims.insert("default/data-a".into(), Arc::new(claim));
        s.volumes = Arc::new(v);
        s
    }

    fn claimed_by(s: &Snapshot) -> Option<String> {
        s.volumes.volumes["pv-1"]
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .and_then(|r| r.name.clone())
    }

    #[test]
    fn a_held_volume_looks_claimed_until_the_leaf_decides() {
        let r = VolumeReservations::default();
        let hold = || {
            r.hold(
                "default/a",
                &[("pv-1".into(), "default/data-a".into())],
                Duration::from_secs(60),
            )
        };
        hold();
        let s = r.apply(snapshot(None, false));
        assert_eq!(claimed_by(&s).as_deref(), Some("data-a"));
        // The leaf bound the claim (to this volume or another): the hold ends.
        assert_eq!(claimed_by(&r.apply(snapshot(None, true))), None);
        assert!(r.is_empty());
        // The leaf claimed the volume itself: its own claimRef stands.
        hold();
        let s = r.apply(snapshot(Some("other"), false));
        assert_eq!(claimed_by(&s).as_deref(), Some("other"));
        assert!(r.is_empty());
        // The pod went elsewhere: released.
        hold();
        r.release("default/a");
        assert_eq!(claimed_by(&r.apply(snapshot(None, false))), None);
        // Expired.
        r.hold(
            "default/a",
            &[("pv-1".into(), "default/data-a".into())],
            Duration::ZERO,
        );
        assert_eq!(claimed_by(&r.apply(snapshot(None, false))), None);
        assert!(r.is_empty());
    }
}
