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

/// Clusters kept away from an owner's pods for a while.
#[derive(Default)]
pub struct Avoidance {
    entries: Mutex<HashMap<String, Vec<(String, Instant)>>>,
}

impl Avoidance {
    pub fn avoid(&self, owner: String, cluster: &str, for_: Duration) {
        let until = Instant::now() + for_;
        let mut e = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let list = e.entry(owner).or_default();
        list.retain(|(c, _)| c != cluster);
        list.push((cluster.to_string(), until));
    }

    /// Owner → avoided clusters, as of now.
    pub fn current(&self) -> Arc<HashMap<String, Vec<String>>> {
        let now = Instant::now();
        let mut e = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        e.retain(|_, list| {
            list.retain(|(_, until)| *until > now);
            !list.is_empty()
        });
        Arc::new(
            e.iter()
                .map(|(k, v)| (k.clone(), v.iter().map(|(c, _)| c.clone()).collect()))
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
        a.avoid("owner:rs-1".into(), "west", Duration::from_secs(60));
        a.avoid("owner:rs-2".into(), "east", Duration::ZERO);
        let now = a.current();
        assert_eq!(now.get("owner:rs-1"), Some(&vec!["west".to_string()]));
        assert!(!now.contains_key("owner:rs-2"), "expired entries go");
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
