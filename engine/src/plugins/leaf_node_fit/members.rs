//! A virtual node stands for the leaf nodes its check found able to host the pod: Score
//! weighs it as the best of them (see [`crate::framework::Members`]), and the pod is
//! counted on the one chosen until the leaf's scheduler has placed the copy.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use crate::framework::{MemberNodes, Members};
use crate::leaf::cycle::LeafCycle;
use crate::plugins::volume_binding;
use crate::snapshot::{NodeInfo, NodeList, PodInfo, Snapshot};

/// The cycle's leaf check, as Score asks it which leaf nodes a virtual node stands for.
pub(crate) struct LeafMembers(pub(crate) LeafCycle);

impl Members for LeafMembers {
    fn members(&self, pod: &PodInfo, node: &NodeInfo) -> Option<MemberNodes> {
        let found = self.0.candidates(&node.name)?;
        let host = pod.object();
        let scored = score_pod(&found.leaf_pod, &host);
        let host_affinity = (host.spec.as_ref())
            .and_then(|s| s.affinity.as_ref())
            .is_some_and(|a| a.node_affinity.is_some());
        let nodes = if host_affinity {
            // The pod's node affinity was written for the host's nodes, the virtual node
            // among them (`mcsched.io/cluster`, the leaf's region): a leaf node answers
            // it with its own labels and, for the keys it lacks, its virtual node's.
            let vn = node.labels();
            NodeList::from_nodes(
                found
                    .positions
                    .iter()
                    .map(|&p| with_virtual_labels(&found.snapshot.nodes[p as usize], vn))
                    .collect(),
            )
        } else {
            NodeList::new(found.snapshot.nodes.clone(), found.positions.clone())
        };
        let snapshot = Snapshot {
            pod_selectors: self.0.host_selectors.clone(),
            ..found.snapshot.clone()
        };
        Some(MemberNodes {
            snapshot,
            pod: scored,
            nodes,
            state: found.state.clone(),
        })
    }

    fn size(&self, node: &NodeInfo) -> usize {
        node.cluster.as_deref().map_or(1, |c| self.0.leaf_size(c))
    }

    fn sample(&self, want: usize, of: usize) {
        self.0.set_sample(want, of);
    }

    fn choose(&self, node: &str, member: &str) {
        let Some(found) = self.0.candidates(node) else {
            return;
        };
        let notes = self.0.placement(node).map(|c| c.notes).unwrap_or_default();
        let volumes = volume_binding::chosen_volumes(&found.state, member);
        let devices = super::leaf_devices::chosen(&found.state, member);
        self.0
            .record_choice(node, &found.cluster, member, volumes, notes, devices);
    }
}

/// The pod as Score judges it on leaf nodes: the copy the check judged (its resources as
/// the leaf admits them), with the host pod's affinity and spreading, which the copy
/// keeps only at node level, and its controller, which kube's default spreading selects
/// its siblings by. Score weighs them as one cluster of host and leaf nodes would; the
/// leaf's scheduler later places the copy by what it keeps.
fn score_pod(copy: &Arc<PodInfo>, host: &Pod) -> Arc<PodInfo> {
    let Some(spec) = host.spec.as_ref() else {
        return copy.clone();
    };
    let copy_obj = copy.object();
    let Some(copy_spec) = copy_obj.spec.as_ref() else {
        return copy.clone();
    };
    if spec.affinity == copy_spec.affinity
        && spec.topology_spread_constraints == copy_spec.topology_spread_constraints
        && host.metadata.owner_references == copy_obj.metadata.owner_references
    {
        return copy.clone();
    }
    let mut pod: Pod = (*copy.pod()).clone();
    pod.metadata.owner_references = host.metadata.owner_references.clone();
    if let Some(s) = pod.spec.as_mut() {
        s.affinity = spec.affinity.clone();
        s.topology_spread_constraints = spec.topology_spread_constraints.clone();
    }
    Arc::new(PodInfo::new(Arc::new(pod)))
}

/// `leaf` with the labels of its virtual node that it lacks (its own win).
fn with_virtual_labels(
    leaf: &Arc<NodeInfo>,
    virtual_labels: &BTreeMap<String, String>,
) -> Arc<NodeInfo> {
    let own = leaf.labels();
    if virtual_labels.keys().all(|k| own.contains_key(k)) {
        return leaf.clone();
    }
    let mut labels = virtual_labels.clone();
    labels.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
    let mut node = (*leaf.node).clone();
    node.metadata.labels = Some(labels);
    let mut info = (**leaf).clone();
    info.node = Arc::new(node);
    Arc::new(info)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::runtime::CycleRecord;
    use crate::framework::{CycleState, Framework};
    use crate::leaf::cycle::{LeafChoice, LeafSnapshots, LeafView};
    use crate::plugins::helper::cluster_placement::tests_support::virtual_node;
    use crate::plugins::testing::{node_with, pod_requesting, quantities};
    use crate::snapshot::VolumeObjects;

    /// One leaf, `east`, whose nodes are `nodes`.
    struct OneLeaf(Vec<Arc<NodeInfo>>);

    impl LeafSnapshots for OneLeaf {
        fn cycle(&self, host_volumes: Arc<VolumeObjects>) -> LeafCycle {
            let view = LeafView {
                admission: Default::default(),
                cluster: "east".into(),
                snapshot: Snapshot::from_nodes(self.0.clone()),
                checks: crate::leaf::leaf_checks::LeafChecks::settled("east"),
                host_id: String::new(),
                served: Default::default(),
                kept: Default::default(),
                devices: Default::default(),
            };
            let mut c = LeafCycle::new(Arc::new(BTreeMap::from([(
                "east".to_string(),
                Arc::new(view),
            )])));
            c.host_volumes = host_volumes;
            c
        }
        fn assume(&self, _: Arc<PodInfo>, _: &LeafChoice) {}
        fn forget(&self, _: &str, _: &str) {}
    }

    /// An 8-CPU node `name` running a pod of `used` CPU.
    fn node(name: &str, used: &str) -> Arc<NodeInfo> {
        let mut n = node_with(name, |n| {
            if let Some(s) = n.status.as_mut() {
                s.allocatable = Some(quantities(&[
                    ("cpu", "8"),
                    ("memory", "32Gi"),
                    ("pods", "110"),
                ]));
            }
        });
        if used != "0" {
            let mut p = (*pod_requesting(&format!("on-{name}"), &[("cpu", used)]).pod()).clone();
            p.spec.get_or_insert_default().node_name = Some(name.into());
            n.add_pod(Arc::new(PodInfo::new(Arc::new(p))));
        }
        Arc::new(n)
    }

    fn framework(leaf: Vec<Arc<NodeInfo>>) -> Framework {
        framework_with(leaf, Default::default())
    }

    fn framework_with(leaf: Vec<Arc<NodeInfo>>, args: crate::plugins::PluginArgs) -> Framework {
        let spec = crate::config_bridge::default_spec("mcsched").expect("default profile");
        let plugins = crate::plugins::registry_with_leaves(&args, Arc::new(OneLeaf(leaf)));
        Framework::new(&spec, &plugins, 1).expect("framework")
    }

    /// The profile's strategy holds on leaf nodes: under MostAllocated the leaf's nodes,
    /// three quarters full, beat the host's half full ones, although the virtual node's
    /// summed free room looks emptier than any host node.
    #[test]
    fn most_allocated_prefers_the_fuller_leaf_nodes() {
        let mut args = crate::plugins::PluginArgs::default();
        args.fit.strategy = crate::plugins::node_resources_fit::Strategy::MostAllocated;
        let leaf = (0..10).map(|i| node(&format!("east-{i}"), "6")).collect();
        let fw = framework_with(leaf, args);
        let hosts = (0..10).map(|i| node(&format!("host-{i}"), "4")).collect();
        let snapshot = host_with_virtual(hosts);
        let pod = pod_requesting("p", &[("cpu", "1")]);
        let mut state = CycleState::new();
        let mut record = CycleRecord::default();
        let result = fw
            .schedule(&mut state, &pod, &snapshot, &mut record, false)
            .expect("scheduled");
        assert_eq!(result.node, "mcsched-east", "totals {:?}", record.totals);
    }

    fn host_with_virtual(hosts: Vec<Arc<NodeInfo>>) -> Snapshot {
        let mut nodes = hosts;
        nodes.push(Arc::new(virtual_node("east", &[])));
        Snapshot::from_nodes(nodes)
    }

    #[test]
    fn a_virtual_node_scores_as_its_best_leaf_node() {
        // east-1 is nearly full, east-2 half full, east-3 empty; host-1 is as full as
        // east-2, host-2 as empty as east-3. The check finds east-1 first; Score takes
        // east-3, scored as host-2 is.
        let fw = framework(vec![
            node("east-1", "7"),
            node("east-2", "4"),
            node("east-3", "0"),
        ]);
        let snapshot = host_with_virtual(vec![node("host-1", "4"), node("host-2", "0")]);
        let pod = pod_requesting("p", &[("cpu", "1")]);
        let mut state = CycleState::new();
        let mut record = CycleRecord::default();
        let result = fw
            .schedule(&mut state, &pod, &snapshot, &mut record, false)
            .expect("scheduled");
        assert!(
            ["mcsched-east", "host-2"].contains(&result.node.as_str()),
            "{}",
            result.node
        );
        assert_eq!(
            super::super::leaf_nodes(&state)
                .get("mcsched-east")
                .map(String::as_str),
            Some("east-3")
        );
        let at = |name: &str| {
            (0..record.feasible.len())
                .find(|&i| &*record.feasible[i].name == name)
                .expect("feasible")
        };
        for column in &record.scores {
            assert_eq!(
                column.raw[at("mcsched-east")],
                column.raw[at("host-2")],
                "{}",
                column.plugin
            );
        }
        let fit = record
            .scores
            .iter()
            .find(|c| c.plugin == "NodeResourcesFit")
            .expect("NodeResourcesFit scored");
        assert!(fit.raw[at("host-1")] < fit.raw[at("host-2")]);
        assert_eq!(
            record.totals[at("mcsched-east")],
            record.totals[at("host-2")]
        );
        assert_eq!(record.leaf_ties.get("mcsched-east"), Some(&1));
    }

    #[test]
    fn a_virtual_node_counts_once_per_equally_good_leaf_node() {
        // The cluster: a host of 10 empty 8-CPU nodes, a leaf of 40. One flat
        // cluster of the 50 would put a pod on the host's nodes 1 time in 5.
        let leaf = (0..40).map(|i| node(&format!("east-{i}"), "0")).collect();
        let fw = framework(leaf);
        let snapshot =
            host_with_virtual((0..10).map(|i| node(&format!("host-{i}"), "0")).collect());
        let pod = pod_requesting("p", &[("cpu", "1")]);
        let draws = 4000;
        let mut on_host = 0;
        let mut leaf_nodes = std::collections::HashSet::new();
        for _ in 0..draws {
            let mut state = CycleState::new();
            let mut record = CycleRecord::default();
            let result = fw
                .schedule(&mut state, &pod, &snapshot, &mut record, false)
                .expect("scheduled");
            assert_eq!(record.leaf_ties.get("mcsched-east"), Some(&40));
            if result.node == "mcsched-east" {
                leaf_nodes.extend(super::super::leaf_nodes(&state).remove("mcsched-east"));
            } else {
                on_host += 1;
            }
        }
        let share = on_host as f64 / draws as f64;
        // 0.2 expected; 4000 draws put 0.2 ± 0.019 at three standard deviations.
        assert!((0.18..=0.22).contains(&share), "host share {share}");
        // The leaf node the pod is counted on is drawn among the tied ones too.
        assert_eq!(leaf_nodes.len(), 40);
    }
}
