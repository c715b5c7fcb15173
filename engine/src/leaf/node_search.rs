//! The leaf check's search among a leaf's nodes, as kube-scheduler's among a cluster's:
//! it stops once the cycle's share of feasible nodes is found and starts the next cycle
//! where this one stopped (kube's `nextStartNodeIndex`, one per leaf), so that over
//! the cycles every leaf node is sampled as often as it would be in one flat cluster of
//! the host's and the leaves' nodes.

use std::collections::HashMap;
use std::sync::Mutex;

use rayon::prelude::*;

use crate::framework::runtime::PARALLEL_MIN_NODES;

/// Where each leaf's next search starts.
#[derive(Default)]
pub(crate) struct Rotation(Mutex<HashMap<String, usize>>);

impl Rotation {
    /// Where the search among the `n` nodes of `cluster` starts.
    pub(crate) fn start(&self, cluster: &str, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        let starts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        starts.get(cluster).copied().unwrap_or(0) % n
    }

    /// The search among the `n` nodes of `cluster` looked at `processed` of them.
    pub(crate) fn advance(&self, cluster: &str, processed: usize, n: usize) {
        if n == 0 {
            return;
        }
        let mut starts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let next = starts.get(cluster).copied().unwrap_or(0);
        if starts.len() > 10_000 && !starts.contains_key(cluster) {
            // Leaves come and go by name; a bound keeps the unjoined from piling up.
            starts.clear();
        }
        starts.insert(cluster.to_string(), (next + processed) % n);
    }
}

/// What one search found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Found {
    /// Positions of the feasible nodes, in the order searched.
    pub(crate) positions: Vec<u32>,
    /// How many nodes were looked at up to the last one kept.
    pub(crate) processed: usize,
}

/// The first `want` of positions `0..n` that `fits`, walking from `start` round; in
/// parallel rounds when `parallel` (each round as long as what is still wanted, so a
/// search that stops early filters little past where it stops).
pub(crate) fn search(
    n: usize,
    start: usize,
    want: usize,
    parallel: bool,
    fits: impl Fn(u32) -> bool + Sync,
) -> Found {
    let at = |i: usize| ((start + i) % n) as u32;
    let mut found = Found {
        positions: Vec::with_capacity(want.min(n)),
        processed: 0,
    };
    if want == 0 {
        return found;
    }
    if !parallel {
        for i in 0..n {
            found.processed += 1;
            if fits(at(i)) {
                found.positions.push(at(i));
                if found.positions.len() == want {
                    break;
                }
            }
        }
        return found;
    }
    let mut next = 0;
    while next < n && found.positions.len() < want {
        let round = (want - found.positions.len())
            .max(PARALLEL_MIN_NODES)
            .min(n - next);
        let fit: Vec<bool> = (next..next + round)
            .into_par_iter()
            .map(|i| fits(at(i)))
            .collect();
        for (i, ok) in (next..).zip(fit) {
            found.processed += 1;
            if ok {
                found.positions.push(at(i));
                if found.positions.len() == want {
                    break;
                }
            }
        }
        next += round;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_stops_at_its_share_and_goes_round_from_its_start() {
        let even = |p: u32| p.is_multiple_of(2);
        for parallel in [false, true] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .expect("pool");
            let found = pool.install(|| search(300, 290, 8, parallel, even));
            assert_eq!(
                found.positions,
                vec![290, 292, 294, 296, 298, 0, 2, 4],
                "parallel {parallel}"
            );
            assert_eq!(found.processed, 15, "parallel {parallel}");
            let all = pool.install(|| search(300, 7, 1000, parallel, even));
            assert_eq!(all.positions.len(), 150);
            assert_eq!(all.processed, 300);
            assert_eq!(search(300, 0, 0, parallel, even).processed, 0);
        }
    }

    mod flat_sample {
        use std::collections::{BTreeMap, BTreeSet};
        use std::sync::Arc;

        use crate::framework::runtime::{CycleRecord, num_feasible_nodes_to_find};
        use crate::framework::{CycleState, Framework};
        use crate::leaf::cycle::{LEAF_CYCLE_KEY, LeafChoice, LeafCycle, LeafSnapshots, LeafView};
        use crate::plugins::helper::cluster_placement::tests_support::virtual_node;
        use crate::plugins::testing::{node_with, pod_requesting, quantities};
        use crate::snapshot::{NodeInfo, PodInfo, Snapshot, VolumeObjects};

        /// Leaves `leaf-0`.. of `per_leaf` empty nodes each.
        struct Leaves(Vec<(String, Snapshot)>);

        impl LeafSnapshots for Leaves {
            fn cycle(&self, host_volumes: Arc<VolumeObjects>) -> LeafCycle {
                let views = self
                    .0
                    .iter()
                    .map(|(cluster, snapshot)| {
                        let view = LeafView {
                            admission: Default::default(),
                            cluster: cluster.clone(),
                            snapshot: snapshot.clone(),
                            checks: crate::leaf::leaf_checks::LeafChecks::settled(cluster),
                            host_id: String::new(),
                            served: Default::default(),
                            kept: Default::default(),
                            devices: Default::default(),
                        };
                        (cluster.clone(), Arc::new(view))
                    })
                    .collect::<BTreeMap<_, _>>();
                let mut c = LeafCycle::new(Arc::new(views));
                c.host_volumes = host_volumes;
                c
            }
            fn assume(&self, _: Arc<PodInfo>, _: &LeafChoice) {}
            fn forget(&self, _: &str, _: &str) {}
        }

        fn node(name: &str) -> Arc<NodeInfo> {
            Arc::new(node_with(name, |n| {
                if let Some(s) = n.status.as_mut() {
                    s.allocatable = Some(quantities(&[
                        ("cpu", "8"),
                        ("memory", "32Gi"),
                        ("pods", "110"),
                    ]));
                }
            }))
        }

        /// MultiClusterManyLeaves' nodes: a host of 1000, 16 leaves of 100, all empty and
        /// alike. One flat cluster of the 2600 looks for 780 feasible nodes per cycle (30 %):
        /// 300 of them host nodes, 30 in each leaf; every one ties, so the host takes
        /// 300 / 780 of the pods, as the flat cluster would (1000 / 2600).
        #[test]
        fn a_host_and_its_leaves_are_sampled_as_one_flat_cluster() {
            let (hosts, leaves, per_leaf) = (1000, 16, 100);
            let leaf_snapshots = (0..leaves)
                .map(|l| {
                    let nodes = (0..per_leaf)
                        .map(|i| node(&format!("leaf-{l}-{i}")))
                        .collect();
                    (format!("leaf-{l}"), Snapshot::from_nodes(nodes))
                })
                .collect();
            let spec = crate::config_bridge::default_spec("mcsched").expect("default profile");
            let plugins = crate::plugins::registry_with_leaves(
                &Default::default(),
                Arc::new(Leaves(leaf_snapshots)),
            );
            let fw = Framework::new(&spec, &plugins, 1).expect("framework");
            let mut nodes: Vec<_> = (0..hosts).map(|i| node(&format!("host-{i}"))).collect();
            nodes.extend((0..leaves).map(|l| Arc::new(virtual_node(&format!("leaf-{l}"), &[]))));
            let snapshot = Snapshot::from_nodes(nodes);
            let pod = pod_requesting("p", &[("cpu", "1")]);
            let flat = num_feasible_nodes_to_find(None, hosts + leaves * per_leaf);
            assert_eq!(flat, 780);
            let draws = 1200;
            let mut on_host = 0;
            let mut seen: BTreeSet<u32> = BTreeSet::new();
            for draw in 0..draws {
                let mut state = CycleState::new();
                let mut record = CycleRecord::default();
                let result = fw
                    .schedule(&mut state, &pod, &snapshot, &mut record, false)
                    .expect("scheduled");
                assert_eq!(
                    record.num_evaluated,
                    300 + leaves,
                    "host and virtual nodes searched, draw {draw}"
                );
                for l in 0..leaves {
                    assert_eq!(
                        record.leaf_ties.get(&format!("mcsched-leaf-{l}")),
                        Some(&30),
                        "leaf nodes found in leaf-{l}, draw {draw}"
                    );
                }
                if draw < 4 {
                    // The leaf's search goes on where the last one stopped: four cycles
                    // of 30 cover its 100 nodes.
                    let cycle = state.read::<LeafCycle>(LEAF_CYCLE_KEY).expect("leaf cycle");
                    let found = cycle.candidates("mcsched-leaf-0").expect("candidates");
                    let first = draw as u32 * 30;
                    let expected: Vec<u32> = (first..first + 30).map(|p| p % 100).collect();
                    assert_eq!(found.positions, expected, "draw {draw}");
                    seen.extend(found.positions.iter().copied());
                }
                if !result.node.starts_with("mcsched-") {
                    on_host += 1;
                }
            }
            assert_eq!(seen.len(), per_leaf, "every leaf node sampled");
            let share = on_host as f64 / draws as f64;
            // 300 / 780 = 0.385 expected; 1200 draws put it within ± 0.042 at three
            // standard deviations. Sampled as before (420 host nodes, every leaf node):
            // 0.21.
            assert!((0.343..=0.427).contains(&share), "host share {share}");
        }
    }

    #[test]
    fn each_leaf_goes_on_where_its_last_search_stopped() {
        let r = Rotation::default();
        assert_eq!(r.start("east", 100), 0);
        r.advance("east", 30, 100);
        r.advance("east", 80, 100);
        r.advance("west", 5, 10);
        assert_eq!(r.start("east", 100), 10);
        assert_eq!(r.start("west", 10), 5);
        // A leaf that lost nodes starts within them.
        assert_eq!(r.start("east", 4), 2);
        assert_eq!(r.start("south", 0), 0);
    }
}
