//! mcsched's default profile, written once: what `kubectl mcsched install` ships in its
//! ConfigMap and what the agent runs without `--config`. kube-scheduler v1's default
//! plugins in kube's order, with the leaf-aware plugins in the places of VolumeBinding and
//! of TaintToleration's Filter (so reasons come in kube-scheduler's order), and
//! LeafNodeFit last.

use std::fmt::Write;

use super::GROUP;
use super::catalog::{self, Point};

/// A leaf-aware plugin standing in for kube's at `point`.
fn leaf_aware(name: &str, point: Option<Point>) -> &str {
    match (name, point) {
        ("VolumeBinding", _) => "LeafNodeVolumeBinding",
        ("TaintToleration", Some(Point::Filter)) => "LeafNodeTaintToleration",
        _ => name,
    }
}

/// The KubeSchedulerConfiguration of one profile `scheduler_name`; with `lease`
/// (name, namespace), leader election on that Lease.
pub fn text(scheduler_name: &str, lease: Option<(&str, &str)>) -> String {
    let mut t = format!("apiVersion: {GROUP}/v1\nkind: KubeSchedulerConfiguration\n");
    if let Some((name, namespace)) = lease {
        let _ = write!(
            t,
            "leaderElection:\n  leaderElect: true\n  resourceLock: leases\n  \
             resourceName: {name}\n  resourceNamespace: {namespace}\n"
        );
    }
    let _ = write!(
        t,
        "profiles:\n- schedulerName: {scheduler_name}\n  plugins:\n    \
         # kube-scheduler's defaults, in its order; leaf-aware plugins in their places.\n    \
         multiPoint:\n      disabled:\n      - name: \"*\"\n      enabled:\n"
    );
    // TopologyAwareWorkloadScheduling's plugins too: named here, they survive the "*"
    // when an operator turns the gate on; without it, they place only the pod groups a
    // PlacementPolicy keeps in one domain.
    let plugins = catalog::V1_MULTI_POINT
        .iter()
        .chain(catalog::TOPOLOGY_AWARE_MULTI_POINT);
    for (name, weight) in plugins {
        let _ = writeln!(t, "      - name: {}", leaf_aware(name, None));
        if *weight > 0 {
            let _ = writeln!(t, "        weight: {weight}");
        }
    }
    t.push_str("    filter:\n      disabled:\n      - name: \"*\"\n      enabled:\n");
    for (name, _) in catalog::V1_MULTI_POINT {
        if catalog::implements(name, Point::Filter) {
            let _ = writeln!(t, "      - name: {}", leaf_aware(name, Some(Point::Filter)));
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::feature_gates::FeatureGates;
    use crate::config::{PluginRef, load};

    /// The profile equals kube-scheduler's default under TopologyAwareWorkloadScheduling
    /// with the leaf-aware plugins put in place at every point: the same plugins, order
    /// and weights.
    #[test]
    fn kube_defaults_with_leaf_aware_plugins_in_place() {
        let ours = load(&text("mcsched", Some(("mcsched", "mcsched-system")))).expect("valid");
        let gates =
            FeatureGates::parse("TopologyAwareWorkloadScheduling=true,GenericWorkload=true")
                .expect("gates");
        let kube = crate::config::load_with(
            &format!("apiVersion: {GROUP}/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: mcsched\n"),
            &gates,
        )
        .expect("valid");
        let (ours, kube) = (&ours.profiles[0].plugins, &kube.profiles[0].plugins);
        for point in Point::ALL {
            let expected: Vec<PluginRef> = kube
                .get(point)
                .iter()
                .map(|r| PluginRef {
                    name: leaf_aware(&r.name, Some(point)).to_string(),
                    weight: r.weight,
                })
                .collect();
            assert_eq!(ours.get(point), &expected, "{point:?}");
        }
        assert_eq!(
            ours.get(Point::Filter).first().map(|r| r.name.as_str()),
            Some("NodeName")
        );
        assert!(
            ours.get(Point::Score)
                .iter()
                .any(|r| r.name == "TaintToleration" && r.weight == 3),
            "TaintToleration still scores"
        );
    }

    #[test]
    fn leader_election_only_with_a_lease() {
        let on = load(&text("s", Some(("lease", "ns")))).expect("valid");
        assert!(on.leader_election.leader_elect);
        assert_eq!(on.leader_election.resource_name, "lease");
        assert_eq!(on.leader_election.resource_namespace, "ns");
        assert_eq!(on.profiles[0].scheduler_name, "s");
    }
}
