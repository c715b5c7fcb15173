//! Which leaf pod is a host pod's copy. The marks pod sync puts on a copy (this host's id,
//! the leaf's name, the host pod's UID) are labels and an annotation that anyone who may
//! create pods in the leaf can read and copy onto a pod of their own. What they cannot
//! copy is the UID the leaf's API server gave the pod pod sync created: that UID is
//! recorded on the host pod (`mcsched.io/leaf-pod-uid`) right after the create, and only
//! the leaf pod holding it is taken for the copy — adopted, deleted, taken back, its
//! status written to the host pod. A leaf pod with the marks and another UID is
//! *forged*: left alone, never read into the host. The host pod whose copy it replaced
//! fails as for a copy deleted in the leaf (`LeafPodReplaced`): its copy is gone, and the
//! name is taken; a new host pod of that name sent there meets it as a name clash.
//!
//! Host pods without a record — copies created before the record existed (an upgrade),
//! or an agent stopped between the create and the record — adopt the first leaf pod seen
//! under their name with their UID in its annotation and record its UID: the window is
//! the time from the upgrade (or the crash) to the new leader's first pass over the pod,
//! which is the first thing it does. A forger has to delete the copy and create theirs
//! inside it; before this record existed they could do so at any time. A copy this agent
//! created whose record write failed is remembered here, so a retry records that UID and
//! not whatever holds the name by then.
//!
//! A marked leaf pod whose host pod is gone (force-deleted, or replaced by a pod of the
//! same name) has no record left to be judged by: it is deleted as an orphan or an earlier
//! pod's copy, since a StatefulSet pod force-deleted on the host must not keep running in
//! the leaf — unless it is known forged (found so by this agent, or the host pod it names
//! is still there, terminal, recording another UID). After a restart, a forged pod whose
//! host pod was deleted cannot be told from such a copy, and goes.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Pod;
use mcsched_shared::keys;

/// What a marked leaf pod under a host pod's name is to that host pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The copy: its UID is the recorded one (or the one this agent just created).
    Copy,
    /// No record yet (upgrade or crash window) and the pod names this host pod: adopted,
    /// and its UID is to be recorded.
    Adopt,
    /// The recorded copy of an earlier host pod of the same name (or, without a record
    /// to tell, a marked pod naming another host pod): it goes before a new copy comes.
    Earlier,
    /// Marked as this host's, but not the copy pod sync created: left alone.
    Forged { recorded: Option<String> },
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// The leaf UID recorded on host pod `host`.
pub fn recorded(host: &Pod) -> Option<&str> {
    annotation(host, keys::LEAF_POD_UID_ANNOTATION)
}

/// The host pod UID a leaf pod names in its annotation.
pub fn names_host_pod(leaf: &Pod) -> Option<&str> {
    annotation(leaf, keys::HOST_POD_UID_ANNOTATION)
}

/// Judges `leaf`, a leaf pod carrying this host's marks under `host`'s name. `created`
/// is the UID of the copy this agent created for `host` and has not recorded yet;
/// `known_forged` whether `leaf`'s UID was judged forged before.
pub fn judge(host: &Pod, leaf: &Pod, created: Option<&str>, known_forged: bool) -> Verdict {
    let leaf_uid = leaf.metadata.uid.as_deref().unwrap_or_default();
    let names_this = host
        .metadata
        .uid
        .as_deref()
        .is_some_and(|h| !h.is_empty() && names_host_pod(leaf) == Some(h));
    let expected = created.or(recorded(host));
    match expected {
        Some(e) if e == leaf_uid && !leaf_uid.is_empty() => {
            if names_this {
                Verdict::Copy
            } else {
                // A record copied from an earlier pod's manifest: that pod's copy.
                Verdict::Earlier
            }
        }
        Some(e) => Verdict::Forged {
            recorded: Some(e.to_string()),
        },
        None if known_forged => Verdict::Forged { recorded: None },
        None if names_this => Verdict::Adopt,
        None => Verdict::Earlier,
    }
}

/// What pod sync remembers of one leaf between passes: the copies it created and has not
/// recorded on their host pods yet, and the leaf UIDs it found forged (each reported
/// once, and never deleted as an orphan).
#[derive(Default)]
pub struct Ownership {
    created: Mutex<HashMap<String, String>>,
    forged: Mutex<HashSet<String>>,
}

impl Ownership {
    /// Pod sync created leaf pod `leaf_uid` for host pod `host_uid`.
    pub fn created(&self, host_uid: &str, leaf_uid: &str) {
        lock(&self.created).insert(host_uid.to_string(), leaf_uid.to_string());
    }

    /// The copy created for `host_uid` and not recorded yet.
    pub fn unrecorded(&self, host_uid: &str) -> Option<String> {
        lock(&self.created).get(host_uid).cloned()
    }

    /// The copy of `host_uid` is recorded on it.
    pub fn recorded(&self, host_uid: &str) {
        lock(&self.created).remove(host_uid);
    }

    /// Remembers `leaf_uid` as forged; true the first time.
    pub fn forged(&self, leaf_uid: &str) -> bool {
        lock(&self.forged).insert(leaf_uid.to_string())
    }

    pub fn is_forged(&self, leaf_uid: &str) -> bool {
        lock(&self.forged).contains(leaf_uid)
    }

    /// Forgets host pods and leaf pods that are gone.
    pub fn retain(&self, host_uids: &HashSet<&str>, leaf_uids: &HashSet<&str>) {
        lock(&self.created).retain(|h, _| host_uids.contains(h.as_str()));
        lock(&self.forged).retain(|l| leaf_uids.contains(l.as_str()));
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn host(record: Option<&str>) -> Pod {
        let mut p = json!({"metadata": {"name": "p", "namespace": "default", "uid": "h1"}});
        if let Some(r) = record {
            p["metadata"]["annotations"] = json!({keys::LEAF_POD_UID_ANNOTATION: r});
        }
        serde_json::from_value(p).expect("pod")
    }

    fn leaf(uid: &str, names: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "default",
            "uid": uid, "annotations": {keys::HOST_POD_UID_ANNOTATION: names}}}))
        .expect("pod")
    }

    #[test]
    fn only_the_recorded_uid_is_the_copy() {
        assert_eq!(
            judge(&host(Some("l1")), &leaf("l1", "h1"), None, false),
            Verdict::Copy
        );
        assert_eq!(
            judge(&host(Some("l1")), &leaf("l2", "h1"), None, false),
            Verdict::Forged {
                recorded: Some("l1".into())
            }
        );
        assert_eq!(
            judge(&host(Some("l1")), &leaf("l2", "h0"), None, false),
            Verdict::Forged {
                recorded: Some("l1".into())
            },
            "whatever host pod it names"
        );
    }

    #[test]
    fn a_copy_created_and_not_yet_recorded_is_known_by_its_uid() {
        assert_eq!(
            judge(&host(None), &leaf("l1", "h1"), Some("l1"), false),
            Verdict::Copy
        );
        assert!(matches!(
            judge(&host(None), &leaf("l2", "h1"), Some("l1"), false),
            Verdict::Forged { .. }
        ));
    }

    #[test]
    fn without_a_record_the_pod_naming_the_host_pod_is_adopted() {
        assert_eq!(
            judge(&host(None), &leaf("l1", "h1"), None, false),
            Verdict::Adopt
        );
        assert_eq!(
            judge(&host(None), &leaf("l1", "h0"), None, false),
            Verdict::Earlier
        );
        assert_eq!(
            judge(&host(None), &leaf("l1", "h1"), None, true),
            Verdict::Forged { recorded: None },
            "once found forged, always"
        );
    }

    #[test]
    fn a_record_copied_from_an_earlier_pod_marks_that_pods_copy_as_earlier() {
        assert_eq!(
            judge(&host(Some("l0")), &leaf("l0", "h0"), None, false),
            Verdict::Earlier
        );
    }

    #[test]
    fn forged_uids_are_reported_once_and_forgotten_when_gone() {
        let o = Ownership::default();
        assert!(o.forged("l2"));
        assert!(!o.forged("l2"));
        o.created("h1", "l1");
        o.retain(&HashSet::from(["h1"]), &HashSet::new());
        assert!(!o.is_forged("l2"));
        assert_eq!(o.unrecorded("h1").as_deref(), Some("l1"));
        o.retain(&HashSet::new(), &HashSet::new());
        assert_eq!(o.unrecorded("h1"), None);
    }
}
