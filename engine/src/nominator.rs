//! kube's nominator: the pods preemption nominated to a node, kept beside the scheduling
//! queue for all profiles. A nomination comes from the pod's `status.nominatedNodeName`,
//! or from this agent's own preemption before the API server has it, so that the next
//! cycles already keep the room made for the preemptor (Filter counts the pod there).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::framework::{NominatedPods, PodNominator};
use crate::snapshot::PodInfo;

/// How a pod's nomination changes (kube's NominatingInfo modes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nominating {
    /// As the pod's status says.
    Noop,
    /// This node; an empty name clears the nomination.
    Override(String),
}

#[derive(Default)]
struct State {
    /// Copied on change, shared with the cycles reading it: nominations change rarely
    /// (a preemption), cycles read them all the time.
    by_node: Arc<NominatedPods>,
    /// Pod id → its nominated node.
    node_of: HashMap<String, String>,
}

#[derive(Default)]
pub struct Nominator {
    state: RwLock<State>,
}

/// The pod's id as the queue keys it: its UID, else `namespace/name`.
fn id(pod: &PodInfo) -> &str {
    if pod.uid.is_empty() {
        &pod.key
    } else {
        &pod.uid
    }
}

fn status_node(pod: &PodInfo) -> Option<&str> {
    pod.nominated_node_name()
}

impl Nominator {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    /// kube's `addNominatedPod`: the pod's one nomination becomes what `how` says.
    pub fn add(&self, pod: Arc<PodInfo>, how: Nominating) {
        let mut st = self.write();
        delete(&mut st, id(&pod));
        let node = match how {
            Nominating::Override(node) => node,
            Nominating::Noop => match status_node(&pod) {
                Some(n) => n.to_string(),
                None => return,
            },
        };
        if node.is_empty() || pod.node_name().is_some() {
            return;
        }
        st.node_of.insert(id(&pod).to_string(), node.clone());
        Arc::make_mut(&mut st.by_node)
            .entry(node)
            .or_default()
            .push(pod);
    }

    /// kube's `UpdateNominatedPod`, for a new version of an unbound pod from the watch: a
    /// nomination made in memory survives an update that does not carry it yet.
    pub fn update(&self, pod: Arc<PodInfo>) {
        let how = {
            let st = self.state.read().unwrap_or_else(|e| e.into_inner());
            match st.node_of.get(id(&pod)) {
                Some(node)
                    if status_node(&pod).is_none()
                        && st
                            .by_node
                            .get(node)
                            .and_then(|ps| ps.iter().find(|p| id(p) == id(&pod)))
                            .is_some_and(|old| status_node(old).is_none()) =>
                {
                    Nominating::Override(node.clone())
                }
                _ => Nominating::Noop,
            }
        };
        self.add(pod, how);
    }

    /// The pod ([`crate::queue::pod_id`]) is gone, bound or assumed: no nomination.
    pub fn delete(&self, pod_id: &str) {
        let mut st = self.write();
        delete(&mut st, pod_id);
    }

    /// The node the pod is nominated to, if any.
    #[cfg(test)]
    pub(crate) fn node_of(&self, pod_id: &str) -> Option<String> {
        let st = self.state.read().unwrap_or_else(|e| e.into_inner());
        st.node_of.get(pod_id).cloned()
    }
}

fn delete(st: &mut State, pod_id: &str) {
    let Some(node) = st.node_of.remove(pod_id) else {
        return;
    };
    let by_node = Arc::make_mut(&mut st.by_node);
    if let Some(pods) = by_node.get_mut(&node) {
        pods.retain(|p| id(p) != pod_id);
        if pods.is_empty() {
            by_node.remove(&node);
        }
    }
}

impl PodNominator for Nominator {
    fn nominated_pods(&self) -> Arc<NominatedPods> {
        let st = self.state.read().unwrap_or_else(|e| e.into_inner());
        st.by_node.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, nominated: Option<&str>) -> Arc<PodInfo> {
        let mut v = json!({"metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
                           "spec": {"containers": []}});
        if let Some(n) = nominated {
            v["status"] = json!({"nominatedNodeName": n});
        }
        let p: k8s_openapi::api::core::v1::Pod = match serde_json::from_value(v) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        Arc::new(PodInfo::new(Arc::new(p)))
    }

    fn names(n: &Nominator, node: &str) -> Vec<String> {
        n.nominated_pods()
            .get(node)
            .map(|ps| ps.iter().map(|p| p.name.clone()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn status_nominations_follow_the_pod() {
        let n = Nominator::default();
        n.update(pod("a", Some("n1")));
        n.update(pod("b", None));
        assert_eq!(names(&n, "n1"), vec!["a"]);
        assert_eq!(n.nominated_pods().len(), 1);
        // Moved by a later preemption, then cleared in the API.
        n.update(pod("a", Some("n2")));
        assert!(names(&n, "n1").is_empty());
        assert_eq!(names(&n, "n2"), vec!["a"]);
        n.update(pod("a", None));
        assert!(n.nominated_pods().is_empty());
        assert_eq!(n.node_of("uid-a"), None);
    }

    #[test]
    fn a_nomination_in_memory_survives_updates_without_it() {
        let n = Nominator::default();
        n.add(pod("a", None), Nominating::Override("n1".into()));
        // The watch's next version of the pod (our condition patch) does not carry it.
        n.update(pod("a", None));
        assert_eq!(names(&n, "n1"), vec!["a"]);
        n.add(pod("a", None), Nominating::Override(String::new()));
        assert!(n.nominated_pods().is_empty());
    }

    #[test]
    fn readers_keep_their_view() {
        let n = Nominator::default();
        n.update(pod("a", Some("n1")));
        let view = n.nominated_pods();
        n.delete("uid-a");
        assert_eq!(view.get("n1").map(Vec::len), Some(1));
        assert!(n.nominated_pods().is_empty());
    }
}
