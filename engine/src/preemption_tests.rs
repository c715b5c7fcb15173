//! Pod group preemption's victims, their order and the budgets they break, as kube v1.37
//! (`podgrouppreemption_test.go`, `types_test.go`, `util_test.go`) has them.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use serde_json::{Value, json};

use super::*;
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

fn pod(name: &str, extra: Value) -> Arc<PodInfo> {
    let mut p = json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                     "labels": {"app": name}},
        "spec": {"containers": [{"name": "c", "image": "i"}]}
    });
    if let (Some(base), Some(more)) = (p.as_object_mut(), extra.as_object()) {
        for (k, v) in more {
            match (base.get_mut(k), v) {
                (Some(Value::Object(b)), Value::Object(m)) => {
                    b.extend(m.clone());
                }
                _ => {
                    base.insert(k.clone(), v.clone());
                }
            }
        }
    }
    let p: Pod = serde_json::from_value(p).expect("pod");
    Arc::new(PodInfo::new(Arc::new(p)))
}

fn member(name: &str, group: &str, priority: i32) -> Arc<PodInfo> {
    pod(
        name,
        json!({"spec": {"priority": priority, "containers": [{"name": "c", "image": "i"}],
                        "schedulingGroup": {"podGroupName": group}}}),
    )
}

fn node(name: &str, pods: &[&Arc<PodInfo>]) -> Arc<NodeInfo> {
    let n: Node = serde_json::from_value(json!({"metadata": {"name": name}})).expect("node");
    let mut info = NodeInfo::new(Arc::new(n));
    for p in pods {
        info.add_pod((*p).clone());
    }
    Arc::new(info)
}

fn group(name: &str, spec: Value) -> PodGroup {
    let mut spec = spec;
    spec["schedulingPolicy"] = json!({"gang": {"minCount": 1}});
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns"}, "spec": spec}))
        .expect("group")
}

fn names(v: &Victim) -> Vec<&str> {
    v.pods.iter().map(|(p, _)| p.name.as_str()).collect()
}

/// kube's getCrossNodesVictims: a group with `disruptionMode: all` is one victim of all
/// its pods on any node, at the group's priority; a member of a group disrupted pod by
/// pod is a victim alone (typed by its group, at the group's priority); any other pod is
/// a pod victim.
#[test]
fn victims_are_pods_and_whole_groups() {
    let groups = PodGroups::new();
    groups.set_group(&group(
        "all",
        json!({"priority": 5, "disruptionMode": {"all": {}}}),
    ));
    groups.set_group(&group("single", json!({"priority": 7})));
    let (a1, a2) = (member("a1", "all", 5), member("a2", "all", 5));
    let s1 = member("s1", "single", 7);
    let lone = pod(
        "lone",
        json!({"spec": {"priority": 3, "containers": [{"name": "c"}]}}),
    );
    let snapshot = Snapshot::from_nodes(vec![node("n1", &[&a1, &lone]), node("n2", &[&a2, &s1])]);
    let victims = cluster_victims(&snapshot, &groups);
    let summary: Vec<(Vec<&str>, i32, VictimKind)> = (victims.iter())
        .map(|v| (names(v), v.priority, v.kind))
        .collect();
    assert_eq!(
        summary,
        [
            (vec!["a1", "a2"], 5, VictimKind::PodGroup),
            (vec!["lone"], 3, VictimKind::Pod),
            (vec!["s1"], 7, VictimKind::PodGroup),
        ]
    );
    assert_eq!(victims[0].pods[1].1, "n2", "each pod with its node");
    let preemptor = Preemptor {
        priority: 6,
        never: false,
        members: Vec::new(),
    };
    let potential = potential_victims(victims, &preemptor);
    assert_eq!(
        potential.iter().map(names).collect::<Vec<_>>(),
        [vec!["a1", "a2"], vec!["lone"]]
    );
}

/// kube's MoreImportantVictim: priority, then a group before a pod, then the larger, then
/// the one started first.
#[test]
fn more_important_victims_come_first() {
    let started = |name: &str, at: &str| pod(name, json!({"status": {"startTime": at}}));
    let v = |pods: Vec<Arc<PodInfo>>, priority, kind| {
        Victim::new(
            pods.into_iter().map(|p| (p, "n".to_string())).collect(),
            priority,
            kind,
        )
    };
    let old = started("old", "2026-01-01T00:00:00Z");
    let new = started("new", "2026-06-01T00:00:00Z");
    let mut victims = [
        v(vec![new.clone()], 0, VictimKind::Pod),
        v(vec![old.clone()], 0, VictimKind::Pod),
        v(vec![new.clone()], 0, VictimKind::PodGroup),
        v(vec![new.clone(), old.clone()], 0, VictimKind::PodGroup),
        v(vec![new.clone()], 1, VictimKind::Pod),
    ];
    victims.sort_by(more_important_victim);
    let order: Vec<(i32, VictimKind, usize, &str)> = (victims.iter())
        .map(|v| (v.priority, v.kind, v.pods.len(), v.pods[0].0.name.as_str()))
        .collect();
    assert_eq!(
        order,
        [
            (1, VictimKind::Pod, 1, "new"),
            (0, VictimKind::PodGroup, 2, "new"),
            (0, VictimKind::PodGroup, 1, "new"),
            (0, VictimKind::Pod, 1, "old"),
            (0, VictimKind::Pod, 1, "new"),
        ]
    );
}

fn pdb(allowed: i32, selector: Value, disrupted: Value) -> Arc<PodDisruptionBudget> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": "pdb", "namespace": "ns"},
            "spec": {"selector": selector},
            "status": {"disruptionsAllowed": allowed, "disruptedPods": disrupted,
                       "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}
        }))
        .expect("pdb"),
    )
}

/// kube's FilterVictimsWithPDBViolation: a victim is violating as a whole when any of its
/// pods overdraws a budget; a pod the budget already counts as disrupted does not draw on
/// it; an empty selector selects nothing.
#[test]
fn a_victim_breaking_a_budget_is_violating_whole() {
    let v = |names: &[&str]| {
        Victim::new(
            (names.iter())
                .map(|n| {
                    (
                        pod(n, json!({"metadata": {"labels": {"app": "x"}}})),
                        "n".into(),
                    )
                })
                .collect(),
            0,
            VictimKind::PodGroup,
        )
    };
    let budget = pdb(1, json!({"matchLabels": {"app": "x"}}), json!({}));
    let (violating, fine) =
        filter_victims_with_pdb_violation(vec![v(&["a", "b"]), v(&["c"])], &[budget]);
    assert_eq!(
        (violating.iter())
            .map(|(v, n)| (names(v), *n))
            .collect::<Vec<_>>(),
        [(vec!["a", "b"], 1), (vec!["c"], 1)]
    );
    assert!(fine.is_empty());
    let counted = pdb(
        0,
        json!({"matchLabels": {"app": "x"}}),
        json!({"a": "2026-01-01T00:00:00Z"}),
    );
    let (violating, fine) = filter_victims_with_pdb_violation(vec![v(&["a"])], &[counted]);
    assert!(violating.is_empty());
    assert_eq!(fine.len(), 1);
    let everything = pdb(0, json!({"matchLabels": {}}), json!({}));
    let (violating, _) = filter_victims_with_pdb_violation(vec![v(&["a"])], &[everything]);
    assert!(violating.is_empty(), "an empty selector selects nothing");
}

/// kube's resolvePreemptionPolicy: without the PodGroupPreemptionPolicy gate any member's
/// Never; with it, the group's own policy.
#[test]
fn whether_a_group_may_preempt() {
    let never = pod(
        "m",
        json!({"spec": {"preemptionPolicy": "Never", "containers": [{"name": "c"}]}}),
    );
    let plain = GroupPolicy::default();
    assert_eq!(
        Preemptor::new(&plain, vec![never.clone()], false).eligible(),
        Err(NOT_ELIGIBLE_NEVER)
    );
    assert!(Preemptor::new(&plain, vec![never], true).eligible().is_ok());
    let own = GroupPolicy {
        preemption_policy: Some("Never".into()),
        ..Default::default()
    };
    assert!(Preemptor::new(&own, Vec::new(), true).eligible().is_err());
}

/// The mutable snapshot's edits (kube's AddPod, RemovePod) change a copy only.
#[test]
fn a_mutable_snapshot_changes_a_copy() {
    let p = pod("p", json!({}));
    let base = Snapshot::from_nodes(vec![node("n1", &[&p])]);
    let mut changed = MutableSnapshot::new(&base);
    assert!(changed.remove_pod("n1", &p.key));
    assert!(!changed.remove_pod("n1", &p.key));
    assert!(!changed.add_pod("missing", p.clone()));
    assert_eq!(changed.snapshot().get("n1").map(|n| n.pods.len()), Some(0));
    assert_eq!(base.get("n1").map(|n| n.pods.len()), Some(1));
    assert!(changed.add_pod("n1", p));
    assert_eq!(changed.snapshot().get("n1").map(|n| n.pods.len()), Some(1));
}
