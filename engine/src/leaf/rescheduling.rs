//! Taking pods back from a leaf where they stay Pending: the leaf accepted the pod on
//! paper (its nodes fit) but something the host cannot see keeps it from running.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

/// The identity a placement is avoided for: the controlling owner, so the replacement
/// pod its controller creates is kept away too; a bare pod is its own owner.
pub fn owner_key(pod: &Pod) -> String {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| format!("owner:{}", o.uid))
        .unwrap_or_else(|| {
            format!(
                "pod:{}/{}",
                pod.metadata.namespace.as_deref().unwrap_or_default(),
                pod.metadata.name.as_deref().unwrap_or_default()
            )
        })
}

pub fn has_controller(pod: &Pod) -> bool {
    owner_key(pod).starts_with("owner:")
}

/// How long a leaf copy has waited for the leaf's scheduler; None once it is placed.
pub fn pending_for(copy: &Pod) -> Option<Duration> {
    let placed = copy
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let phase = copy.status.as_ref().and_then(|s| s.phase.as_deref());
    if placed || !matches!(phase, None | Some("Pending")) {
        return None;
    }
    let created = copy.metadata.creation_timestamp.as_ref()?.0;
    let age = k8s_openapi::jiff::Timestamp::now().duration_since(created);
    Duration::try_from(age).ok()
}

/// Why a cluster is kept away from an owner's pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Avoided {
    /// Its copies stayed Pending there (`--leaf-pending-timeout`).
    Pending,
    /// The leaf's admission refused a copy, or an object of its name is not this host's.
    Refused,
}

/// The longest an owner keeps a cluster away, in doublings of the first back-off.
const MAX_DOUBLINGS: u32 = 5;

struct Entry {
    cluster: String,
    why: Avoided,
    until: Instant,
    backoff: Duration,
}

/// Clusters kept away from an owner's pods for a back-off that doubles each time the same
/// cluster is avoided again for the owner (up to 32 times the first), as kube's pod
/// back-off does: a leaf that keeps refusing an owner is tried less and less often. An
/// entry is forgotten once a quiet period as long as its back-off has passed after it.
#[derive(Default)]
pub struct Avoidance {
    entries: Mutex<HashMap<String, Vec<Entry>>>,
}

impl Avoidance {
    /// Avoids `cluster` for `owner`: `first` the first time, then twice the last back-off
    /// while the last one is remembered. Returns the back-off applied.
    pub fn avoid(&self, owner: String, cluster: &str, why: Avoided, first: Duration) -> Duration {
        let now = Instant::now();
        let mut e = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let list = e.entry(owner).or_default();
        let backoff = match list.iter().position(|a| a.cluster == cluster) {
            Some(i) => {
                let last = list.remove(i);
                if now < last.until + last.backoff {
                    (last.backoff * 2).min(first * 2u32.pow(MAX_DOUBLINGS))
                } else {
                    first
                }
            }
            None => first,
        };
        list.push(Entry {
            cluster: cluster.to_string(),
            why,
            until: now + backoff,
            backoff,
        });
        backoff
    }

    /// Owner → clusters avoided as of now, with why.
    pub fn current(&self) -> Arc<HashMap<String, Vec<(String, Avoided)>>> {
        let now = Instant::now();
        let mut e = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        e.retain(|_, list| {
            list.retain(|a| a.until + a.backoff > now);
            !list.is_empty()
        });
        Arc::new(
            e.iter()
                .filter_map(|(k, v)| {
                    let live: Vec<(String, Avoided)> = v
                        .iter()
                        .filter(|a| a.until > now)
                        .map(|a| (a.cluster.clone(), a.why))
                        .collect();
                    (!live.is_empty()).then(|| (k.clone(), live))
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn owners_and_avoidance() {
        let owned: Pod = serde_json::from_value(json!({
            "metadata": {"name": "a-1", "namespace": "ns", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "a", "uid": "rs-1", "controller": true}]}
        }))
        .expect("pod");
        let bare: Pod =
            serde_json::from_value(json!({"metadata": {"name": "b", "namespace": "ns"}}))
                .expect("pod");
        assert_eq!(owner_key(&owned), "owner:rs-1");
        assert!(has_controller(&owned));
        assert_eq!(owner_key(&bare), "pod:ns/b");
        assert!(!has_controller(&bare));

        let a = Avoidance::default();
        let minute = Duration::from_secs(60);
        assert_eq!(
            a.avoid("owner:rs-1".into(), "west", Avoided::Pending, minute),
            minute
        );
        a.avoid(
            "owner:rs-2".into(),
            "east",
            Avoided::Refused,
            Duration::ZERO,
        );
        let now = a.current();
        assert_eq!(
            now.get("owner:rs-1"),
            Some(&vec![("west".to_string(), Avoided::Pending)])
        );
        assert!(!now.contains_key("owner:rs-2"), "expired entries go");
        // Avoided again while remembered: the back-off doubles, up to 32 times the first.
        let refused =
            |a: &Avoidance| a.avoid("owner:rs-1".into(), "west", Avoided::Refused, minute);
        let backoffs: Vec<u64> = (0..7).map(|_| refused(&a).as_secs()).collect();
        assert_eq!(backoffs, [120, 240, 480, 960, 1920, 1920, 1920]);
        assert_eq!(
            a.current().get("owner:rs-1"),
            Some(&vec![("west".to_string(), Avoided::Refused)])
        );
        // Another cluster of the same owner starts at the first back-off.
        assert_eq!(
            a.avoid("owner:rs-1".into(), "east", Avoided::Refused, minute),
            minute
        );
    }

    #[test]
    fn only_unplaced_copies_are_pending() {
        let old = json!("2020-01-01T00:00:00Z");
        let pending: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "creationTimestamp": old}, "status": {"phase": "Pending"}
        }))
        .expect("pod");
        assert!(pending_for(&pending).is_some_and(|d| d > Duration::from_secs(3600)));
        let placed: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "creationTimestamp": old},
            "spec": {"nodeName": "n", "containers": []}, "status": {"phase": "Pending"}
        }))
        .expect("pod");
        assert_eq!(pending_for(&placed), None);
    }
}
