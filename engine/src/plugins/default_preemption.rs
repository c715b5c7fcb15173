//! DefaultPreemption: when no node fits, find a node where evicting lower-priority pods
//! makes room, keeping as many of them as possible (PodDisruptionBudget-protected ones
//! first), and nominate it. kube-scheduler's `defaultpreemption` and `preemption`
//! packages, with their candidate ordering.

use std::sync::Arc;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use rand::RngExt;

use crate::framework::{
    Code, CycleState, Framework, NodeStatuses, Plugin, PodGroupPostFilterPlugin, PodGroupRelief,
    PostFilterPlugin, PostFilterResult, Status, Victims,
};
use crate::pod_groups::PodGroups;
use crate::preemption::{
    AllModeMembers, Victim, VictimKind, all_mode_members, filter_victims_with_pdb_violation,
    more_important_victim, pod_priority, terminating_by_preemption, victims_on,
};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

pub(crate) const NAME: &str = "DefaultPreemption";
pub(crate) const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
pub(crate) const NO_VICTIMS: &str = "No preemption victims found for incoming pod";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PreemptionArgs {
    pub(crate) min_candidate_nodes_percentage: u32,
    pub(crate) min_candidate_nodes_absolute: u32,
}

impl Default for PreemptionArgs {
    fn default() -> Self {
        PreemptionArgs {
            min_candidate_nodes_percentage: 10,
            min_candidate_nodes_absolute: 100,
        }
    }
}

pub(crate) struct DefaultPreemption {
    args: PreemptionArgs,
    /// The PodGroups, which victims weigh as (v1.37, under GenericWorkload).
    groups: Arc<PodGroups>,
}

impl DefaultPreemption {
    pub(crate) fn new(args: PreemptionArgs, groups: Arc<PodGroups>) -> Self {
        DefaultPreemption { args, groups }
    }
}

/// A node where preemption works, and what it costs.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub(crate) node: String,
    pub(crate) victims: Vec<Arc<PodInfo>>,
    pub(crate) pdb_violations: usize,
}

fn start_time_secs(p: &PodInfo) -> i64 {
    p.start_time
        .as_ref()
        .map(|t| t.0.as_second())
        .unwrap_or(i64::MAX)
}

/// The rest of kube's `PodEligibleToPreemptOthers`: a pod nominated to a node that can
/// still take it waits while pods there of lower priority (a PodGroup's member at its
/// group's, under GenericWorkload) terminate after preemption.
fn terminating_victims_on_nominated_node(
    pod: &PodInfo,
    snapshot: &Snapshot,
    statuses: &NodeStatuses,
    groups: Option<&PodGroups>,
) -> bool {
    let Some(nominated) = pod.nominated_node_name() else {
        return false;
    };
    if statuses
        .get(nominated)
        .is_some_and(|s| s.code == Code::UnschedulableAndUnresolvable)
    {
        return false;
    }
    let priority = |p: &PodInfo| groups.map_or_else(|| p.priority(), |g| pod_priority(p, g));
    snapshot.get(nominated).is_some_and(|n| {
        n.pods
            .iter()
            .any(|p| priority(p) < pod.priority() && terminating_by_preemption(p))
    })
}

/// A victim's pods out of (`add` false) or back on their nodes, told to the preemptor's
/// PreFilter state: only the main node's NodeInfo changes; a pod of a group victim on
/// another node is told with that node as it is (kube's SelectVictimsOnNode).
fn move_victim(
    fw: &Framework,
    state: &mut CycleState,
    pod: &PodInfo,
    main: &mut NodeInfo,
    snapshot: &Snapshot,
    victim: &Victim,
    add: bool,
) -> Result<(), Status> {
    for (p, on) in &victim.pods {
        let s = if **on == *main.name {
            if add {
                main.add_pod(p.clone());
            } else {
                main.remove_pod(&p.key);
            }
            fw.run_pre_filter_extension(state, pod, p, main, add)
        } else {
            match snapshot.get(on) {
                Some(remote) => fw.run_pre_filter_extension(state, pod, p, remote, add),
                None => continue,
            }
        };
        if !s.is_success() {
            return Err(Status::error(s.message()).with_plugin(s.plugin));
        }
    }
    Ok(())
}

impl DefaultPreemption {
    /// kube's `GetVictimsOnNode`: each pod on the node; under GenericWorkload (PodGroups
    /// served) a PodGroup member weighs as its group, and one of a group whose
    /// `disruptionMode` is `all` brings every scheduled pod of its group.
    fn possible_victims(&self, node: &NodeInfo, all_mode: Option<&AllModeMembers>) -> Vec<Victim> {
        match all_mode {
            Some(members) => victims_on(std::iter::once(node), &self.groups, members),
            None => (node.pods.iter())
                .map(|p| {
                    let pods = vec![(p.clone(), node.name.to_string())];
                    Victim::new(pods, p.priority(), VictimKind::Pod)
                })
                .collect(),
        }
    }

    /// kube's `SelectVictimsOnNode`: remove every victim of lower priority; if the pod then
    /// fits, put them back one by one (the most important first, those breaking a
    /// PodDisruptionBudget before the rest) while it still fits. A node where that fails
    /// says why, as the dry run's status.
    #[allow(clippy::too_many_arguments)]
    fn victims_on_node(
        &self,
        fw: &Framework,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        snapshot: &Snapshot,
        possible: Vec<Victim>,
        pdbs: &[Arc<PodDisruptionBudget>],
    ) -> Result<Candidate, Status> {
        let mut state = state.clone();
        let mut node = node.clone();
        let mut potential: Vec<Victim> = (possible.into_iter())
            .filter(|v| v.priority < pod.priority())
            .collect();
        if potential.is_empty() {
            return Err(Status::unresolvable(NO_VICTIMS));
        }
        for v in &potential {
            move_victim(fw, &mut state, pod, &mut node, snapshot, v, false)?;
        }
        // Still no room without them: the filters' own verdict.
        let (s, _) = fw.run_filters(&state, pod, &node, false);
        if !s.is_success() {
            return Err(s);
        }
        potential.sort_by(more_important_victim);
        let (violating, fine) = filter_victims_with_pdb_violation(potential, pdbs);
        let both = !violating.is_empty() && !fine.is_empty();
        let mut victims: Vec<Victim> = Vec::new();
        let mut pdb_violations = 0;
        let mut reprieve = |v: Victim, state: &mut CycleState, node: &mut NodeInfo| {
            move_victim(fw, state, pod, node, snapshot, &v, true)?;
            if fw.run_filters(state, pod, node, false).0.is_success() {
                return Ok(true);
            }
            move_victim(fw, state, pod, node, snapshot, &v, false)?;
            victims.push(v);
            Ok::<bool, Status>(false)
        };
        for (v, count) in violating {
            if !reprieve(v, &mut state, &mut node)? {
                pdb_violations += count;
            }
        }
        for v in fine {
            reprieve(v, &mut state, &mut node)?;
        }
        if victims.is_empty() {
            return Err(Status::unresolvable(NO_VICTIMS));
        }
        // The victims most important first again, when both kinds were reprieved (kube).
        if both {
            victims.sort_by(more_important_victim);
        }
        Ok(Candidate {
            node: node.name.to_string(),
            victims: (victims.into_iter())
                .flat_map(|v| v.pods.into_iter().map(|(p, _)| p))
                .collect(),
            pdb_violations,
        })
    }

    fn candidates_to_find(&self, potential: usize) -> usize {
        let pct = potential * self.args.min_candidate_nodes_percentage as usize / 100;
        pct.max(self.args.min_candidate_nodes_absolute as usize)
            .min(potential)
    }
}

/// kube's `callExtenders`: each interested extender with a preempt verb may drop candidate
/// nodes or change their victims, in turn; an ignorable one's errors skip it.
fn call_extenders(
    fw: &Framework,
    pod: &PodInfo,
    candidates: Vec<Candidate>,
    snapshot: &Snapshot,
) -> Result<Vec<Candidate>, Status> {
    let extenders: Vec<_> = fw
        .extenders()
        .iter()
        .filter(|e| e.supports_preemption() && e.is_interested(pod))
        .collect();
    if extenders.is_empty() {
        return Ok(candidates);
    }
    let mut victims: std::collections::BTreeMap<String, Victims> = candidates
        .into_iter()
        .map(|c| {
            (
                c.node,
                Victims {
                    pods: c.victims,
                    pdb_violations: c.pdb_violations,
                },
            )
        })
        .collect();
    for e in extenders {
        let mut kept = match e.process_preemption(pod, &victims, snapshot) {
            Ok(kept) => kept,
            Err(err) if e.is_ignorable() => {
                tracing::info!(extender = %e.name(), error = %err, "skipped an ignorable extender's preempt verb");
                continue;
            }
            Err(err) => return Err(Status::error(err.to_string())),
        };
        let empty: Vec<String> = kept
            .iter()
            .filter(|(_, v)| v.pods.is_empty())
            .map(|(n, _)| n.clone())
            .collect();
        for node in empty {
            if !e.is_ignorable() {
                return Err(Status::error(format!(
                    "expected at least one victim pod on node {node:?}"
                )));
            }
            kept.remove(&node);
        }
        victims = kept;
        if victims.is_empty() {
            break;
        }
    }
    Ok(victims
        .into_iter()
        .map(|(node, v)| Candidate {
            node,
            victims: v.pods,
            pdb_violations: v.pdb_violations,
        })
        .collect())
}

/// kube's `pickOneNodeForPreemption`: fewest PDB violations, then the lowest priority of
/// the first (most important) victim, the smallest sum of priorities, the fewest victims, the latest start
/// of the highest-priority victims; then the first.
pub(crate) fn pick_one(candidates: &[Candidate]) -> Option<&Candidate> {
    let key = |c: &Candidate| {
        // kube reads the first victim's priority as the highest: victims come most
        // important first, which (v1.37) weighs PodGroup members at their group's priority,
        // so the first may not be the highest of the pods' own.
        let first = c.victims.first().map_or(i32::MIN, |v| v.priority());
        let highest = c
            .victims
            .iter()
            .map(|v| v.priority())
            .max()
            .unwrap_or(i32::MIN);
        let sum: i64 = c
            .victims
            .iter()
            .map(|v| i64::from(v.priority()) + i64::from(i32::MAX) + 1)
            .sum();
        let latest_start_of_highest = c
            .victims
            .iter()
            .filter(|v| v.priority() == highest)
            .map(|v| start_time_secs(v))
            .min()
            .unwrap_or(i64::MAX);
        (
            c.pdb_violations,
            first,
            sum,
            c.victims.len(),
            std::cmp::Reverse(latest_start_of_highest),
        )
    };
    candidates.iter().min_by(|a, b| key(a).cmp(&key(b)))
}

impl Plugin for DefaultPreemption {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        Some(self)
    }
    fn as_pod_group_post_filter(&self) -> Option<&dyn PodGroupPostFilterPlugin> {
        Some(self)
    }
}

impl PodGroupPostFilterPlugin for DefaultPreemption {
    fn relief(&self) -> PodGroupRelief {
        PodGroupRelief::Preemption
    }
}

impl PostFilterPlugin for DefaultPreemption {
    fn post_filter(
        &self,
        fw: &Framework,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        statuses: &NodeStatuses,
    ) -> (PostFilterResult, Status) {
        // kube's Evaluator.evaluate: all of it but the eviction, which is the agent's. A
        // what-if's evaluation preempts nothing and is left out.
        let started = std::time::Instant::now();
        let (result, status) = self.evaluate(fw, state, pod, snapshot, statuses);
        if state.is_dry_run() {
            return (result, status);
        }
        crate::metrics::global().preemption_evaluated(
            "pod",
            &status.code.to_string(),
            started.elapsed().as_secs_f64(),
        );
        (result, status)
    }
}

impl DefaultPreemption {
    fn evaluate(
        &self,
        fw: &Framework,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        statuses: &NodeStatuses,
    ) -> (PostFilterResult, Status) {
        let total = snapshot.len();
        let obj = pod.object();
        // kube v1.37 runs no PostFilter for pod group members in their cycle (the group's
        // PodGroupPostFilter preempts for them), and so no longer tells them apart here.
        // Under GenericWorkload (PodGroups served) victims weigh as their groups.
        let generic = self.groups.served().is_some();
        let policy = obj
            .spec
            .as_ref()
            .and_then(|s| s.preemption_policy.as_deref());
        if policy == Some("Never") {
            // kube's PodEligibleToPreemptOthers: Unschedulable, so that the other
            // PostFilter plugins' reasons stay in the message.
            return (
                PostFilterResult::default(),
                Status::unschedulable("preemption: not eligible due to preemptionPolicy=Never."),
            );
        }
        let groups = generic.then_some(&*self.groups);
        if terminating_victims_on_nominated_node(pod, snapshot, statuses, groups) {
            // Its earlier victims are still going: it waits for them, not preempting more.
            return (
                PostFilterResult::default(),
                Status::unschedulable(
                    "preemption: not eligible due to a terminating pod on the nominated node.",
                ),
            );
        }
        // Nodes rejected for good (or not evaluated because PreFilter failed) cannot help.
        let potential: Vec<&Arc<NodeInfo>> = snapshot
            .nodes
            .iter()
            .filter(|n| {
                statuses
                    .get(&*n.name)
                    .is_some_and(|s| s.code == Code::Unschedulable)
            })
            .collect();
        let want = self.candidates_to_find(potential.len());
        let offset = if potential.is_empty() {
            0
        } else {
            rand::rng().random_range(0..potential.len())
        };
        let all_mode = generic.then(|| all_mode_members(snapshot, &self.groups));
        let mut candidates = Vec::new();
        let mut failed: Vec<Status> = Vec::new();
        for i in 0..potential.len() {
            if candidates.len() >= want {
                break;
            }
            let node = potential[(offset + i) % potential.len()];
            let possible = self.possible_victims(node, all_mode.as_ref());
            match self.victims_on_node(fw, state, pod, node, snapshot, possible, &snapshot.pdbs) {
                Ok(c) => candidates.push(c),
                Err(s) => failed.push(s),
            }
        }
        if candidates.is_empty() {
            // kube's FitError of the dry run: each node's reasons, the nodes it did not
            // try as not helpful.
            let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
            for r in failed.iter().flat_map(|s| &s.reasons) {
                *counts.entry(r.as_ref()).or_default() += 1;
            }
            let untried = total.saturating_sub(failed.len());
            if untried > 0 {
                *counts.entry(NOT_HELPFUL).or_default() += untried;
            }
            let mut parts: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
            parts.sort();
            // No candidate: an earlier nomination no longer holds.
            return (
                PostFilterResult {
                    clears_nomination: true,
                    ..Default::default()
                },
                Status::unschedulable(format!(
                    "preemption: 0/{total} nodes are available: {}.",
                    parts.join(", ")
                )),
            );
        }
        let candidates = match call_extenders(fw, pod, candidates, snapshot) {
            Ok(c) => c,
            Err(s) => return (PostFilterResult::default(), s),
        };
        let Some(best) = pick_one(&candidates) else {
            return (
                PostFilterResult::default(),
                Status::unschedulable("preemption: no candidate node for preemption"),
            );
        };
        // Lower-priority pods nominated there may no longer fit: their nominations go, so
        // they look elsewhere at once (kube's getLowerPriorityNominatedPods).
        let lower_nominated = fw
            .nominated_pods_for_node(&best.node)
            .into_iter()
            .filter(|p| p.priority() < pod.priority())
            .collect();
        // v1.37's words (preemption.go), behind the plugin's `preemption: `.
        let found = format!(
            "preemption: found a potential placement for pod on node {}, preempting {} victims",
            best.node,
            best.victims.len()
        );
        (
            PostFilterResult {
                nominated_node: Some(best.node.clone()),
                victims: best.victims.clone(),
                pdb_violations: best.pdb_violations,
                lower_nominated,
                clears_nomination: false,
            },
            Status::new(Code::Success, vec![found.into()]),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node_info::PREEMPTED_REASON;
    use crate::plugins::default_registry;
    use crate::plugins::testing::{node_with, pod_requesting};

    fn with_priority(mut p: PodInfo, prio: i32, node: &str) -> Arc<PodInfo> {
        let mut pod = (*p.pod()).clone();
        if let Some(s) = pod.spec.as_mut() {
            s.priority = Some(prio);
            s.node_name = Some(node.into());
        }
        p = PodInfo::new(Arc::new(pod));
        Arc::new(p)
    }

    fn framework() -> Framework {
        let reg = default_registry();
        let spec = match crate::config_bridge::default_spec("s") {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        };
        match Framework::new(&spec, &reg, 2) {
            Ok(f) => f,
            Err(e) => panic!("{e}"),
        }
    }

    /// PostFilter after a cycle where no node fits.
    fn preempt(fw: &Framework, pod: &PodInfo, snap: &Snapshot) -> (PostFilterResult, Status) {
        let statuses = schedule_fails(fw, pod, snap);
        DefaultPreemption::new(Default::default(), PodGroups::new()).post_filter(
            fw,
            &CycleState::new(),
            pod,
            snap,
            &statuses,
        )
    }

    fn schedule_fails(fw: &Framework, pod: &PodInfo, snap: &Snapshot) -> NodeStatuses {
        let mut state = CycleState::new();
        let mut rec = Default::default();
        match fw.schedule(&mut state, pod, snap, &mut rec, false) {
            Ok(r) => panic!("expected no fit, got {}", r.node),
            Err(e) => e.diagnosis.node_statuses,
        }
    }

    #[test]
    fn evicts_the_fewest_lowest_priority_pods() {
        // n1: two 1-cpu pods of priority 10; n2: one 2-cpu pod of priority 5. The pod (3
        // cpu, priority 100) needs 3 of 4 cpu: on n1 one victim suffices (priority 10),
        // on n2 one victim (priority 5) — the lower highest priority wins.
        let mut n1 = node_with("n1", |_| {});
        n1.add_pod(with_priority(
            pod_requesting("a", &[("cpu", "1")]),
            10,
            "n1",
        ));
        n1.add_pod(with_priority(
            pod_requesting("b", &[("cpu", "1")]),
            10,
            "n1",
        ));
        let mut n2 = node_with("n2", |_| {});
        n2.add_pod(with_priority(pod_requesting("c", &[("cpu", "2")]), 5, "n2"));
        let snap = Snapshot::from_nodes(vec![Arc::new(n1), Arc::new(n2)]);
        let pod = with_priority(pod_requesting("p", &[("cpu", "3")]), 100, "");
        let fw = framework();
        let (res, s) = preempt(&fw, &pod, &snap);
        assert!(s.is_success(), "{s}");
        assert_eq!(res.nominated_node.as_deref(), Some("n2"));
        assert_eq!(
            res.victims
                .iter()
                .map(|v| v.name.as_str())
                .collect::<Vec<_>>(),
            vec!["c"]
        );
    }

    /// v1.37 under GenericWorkload: a PodGroup member weighs as its group (a member of a
    /// priority-100 group is no victim for a priority-50 pod, whatever its own), and one of
    /// a group whose `disruptionMode` is `all` takes its whole group with it, on other
    /// nodes too; the success says where and how many (#140180).
    #[test]
    fn pod_group_members_are_victims_as_their_groups() {
        let groups = crate::pod_groups::PodGroups::new();
        groups.set_served(Some(
            mcsched_shared::pod_group_versions::PodGroupVersion::V1beta1,
        ));
        for (name, spec) in [
            ("high", serde_json::json!({"priority": 100})),
            (
                "all",
                serde_json::json!({"priority": 0, "disruptionMode": {"all": {}}}),
            ),
        ] {
            let mut spec = spec;
            spec["schedulingPolicy"] = serde_json::json!({"basic": {}});
            let g = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "default"}, "spec": spec}))
            .expect("group");
            groups.set_group(&g);
        }
        let member = |name: &str, group: &str, cpu: &str, node: &str| {
            let mut pod = (*pod_requesting(name, &[("cpu", cpu)]).pod()).clone();
            if let Some(s) = pod.spec.as_mut() {
                s.priority = Some(0);
                s.node_name = Some(node.into());
                s.scheduling_group = Some(
                    serde_json::from_value(serde_json::json!({"podGroupName": group}))
                        .expect("group ref"),
                );
            }
            Arc::new(PodInfo::new(Arc::new(pod)))
        };
        // n1 (4 cpu): h (of "high", 2 cpu) and a1 (of "all", 2 cpu); a2 of "all" (4 cpu)
        // on n2.
        let mut n1 = node_with("n1", |_| {});
        n1.add_pod(member("h", "high", "2", "n1"));
        n1.add_pod(member("a1", "all", "2", "n1"));
        let mut n2 = node_with("n2", |_| {});
        n2.add_pod(member("a2", "all", "4", "n2"));
        let snap = Snapshot::from_nodes(vec![Arc::new(n1), Arc::new(n2)]);
        let pod = with_priority(pod_requesting("p", &[("cpu", "2")]), 50, "");
        let fw = framework();
        let statuses = schedule_fails(&fw, &pod, &snap);
        let (res, s) = DefaultPreemption::new(Default::default(), groups).post_filter(
            &fw,
            &CycleState::new(),
            &pod,
            &snap,
            &statuses,
        );
        // n1 (a1 out) or n2 (a2 out): either way the group goes whole, h stays.
        let node = res.nominated_node.clone().expect("nominated");
        assert_eq!(
            s.message(),
            format!(
                "preemption: found a potential placement for pod on node {node}, preempting 2 victims"
            )
        );
        let mut victims: Vec<&str> = res.victims.iter().map(|v| v.name.as_str()).collect();
        victims.sort_unstable();
        assert_eq!(victims, ["a1", "a2"]);
    }

    /// The differential's case 97 of seed 218860932 against kube v1.37.2: on n1 three
    /// members of a PodGroup of priority 0 (their own 1000, 0 and 100), on n3 a pod of 100.
    /// n1 keeps the first member and evicts the other two, whose first is of priority 0:
    /// kube reads the first victim's priority as the highest and so prefers n1 to n3.
    #[test]
    fn the_first_victim_s_priority_picks_the_node() {
        let groups = crate::pod_groups::PodGroups::new();
        groups.set_served(Some(
            mcsched_shared::pod_group_versions::PodGroupVersion::V1beta1,
        ));
        let g = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "g", "namespace": "default"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 5}}}}))
        .expect("group");
        groups.set_group(&g);
        let pod = |name: &str, prio: i32, cpu: &str, node: &str, group: bool, start: &str| {
            let mut pod = (*pod_requesting(name, &[("cpu", cpu)]).pod()).clone();
            if let Some(s) = pod.spec.as_mut() {
                s.priority = Some(prio);
                s.node_name = Some(node.into());
                if group {
                    s.scheduling_group = Some(
                        serde_json::from_value(serde_json::json!({"podGroupName": "g"}))
                            .expect("ref"),
                    );
                }
            }
            pod.status = Some(
                serde_json::from_value(serde_json::json!({"startTime": start})).expect("status"),
            );
            Arc::new(PodInfo::new(Arc::new(pod)))
        };
        let mut n1 = node_with("n1", |_| {});
        n1.add_pod(pod("a", 1000, "1", "n1", true, "2026-01-01T00:00:56Z"));
        n1.add_pod(pod("b", 0, "1", "n1", true, "2026-01-01T00:01:42Z"));
        n1.add_pod(pod("c", 100, "1", "n1", true, "2026-01-01T00:02:10Z"));
        let mut n3 = node_with("n3", |_| {});
        n3.add_pod(pod("x", 100, "4", "n3", false, "2026-01-01T00:02:52Z"));
        let snap = Snapshot::from_nodes(vec![Arc::new(n1), Arc::new(n3)]);
        let incoming = with_priority(pod_requesting("p", &[("cpu", "3")]), 1000, "");
        let fw = framework();
        let statuses = schedule_fails(&fw, &incoming, &snap);
        let (res, s) = DefaultPreemption::new(Default::default(), groups).post_filter(
            &fw,
            &CycleState::new(),
            &incoming,
            &snap,
            &statuses,
        );
        assert!(s.is_success(), "{s}");
        assert_eq!(res.nominated_node.as_deref(), Some("n1"));
        let victims: Vec<&str> = res.victims.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(victims, ["b", "c"]);
    }

    #[test]
    fn equal_or_higher_priority_pods_are_never_victims() {
        let mut n1 = node_with("n1", |_| {});
        n1.add_pod(with_priority(
            pod_requesting("a", &[("cpu", "3")]),
            100,
            "n1",
        ));
        let snap = Snapshot::from_nodes(vec![Arc::new(n1)]);
        let pod = with_priority(pod_requesting("p", &[("cpu", "2")]), 100, "");
        let fw = framework();
        let (res, s) = preempt(&fw, &pod, &snap);
        assert!(res.nominated_node.is_none());
        assert_eq!(
            s.message(),
            "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
        );
    }

    /// A node still too small without its lower-priority pods keeps the filters' reasons,
    /// as kube's SelectVictimsOnNode returns them to the dry run's FitError.
    #[test]
    fn nodes_too_small_even_when_emptied_say_why() {
        // 4 cpu: a (priority 100, 2 cpu) stays, b (priority 10, 1 cpu) may go; 3 cpu
        // still do not fit.
        let mut n1 = node_with("n1", |_| {});
        n1.add_pod(with_priority(
            pod_requesting("a", &[("cpu", "2")]),
            100,
            "n1",
        ));
        n1.add_pod(with_priority(
            pod_requesting("b", &[("cpu", "1")]),
            10,
            "n1",
        ));
        let snap = Snapshot::from_nodes(vec![Arc::new(n1)]);
        let pod = with_priority(pod_requesting("p", &[("cpu", "3")]), 50, "");
        let fw = framework();
        let (res, s) = preempt(&fw, &pod, &snap);
        assert!(res.nominated_node.is_none());
        assert_eq!(
            s.message(),
            "preemption: 0/1 nodes are available: 1 Insufficient cpu."
        );
    }

    #[test]
    fn unresolvable_nodes_are_not_helpful() {
        let n1 = node_with("n1", |_| {});
        let snap = Snapshot::from_nodes(vec![Arc::new(n1)]);
        // More than the node has at all: UnschedulableAndUnresolvable.
        let pod = with_priority(pod_requesting("p", &[("cpu", "8")]), 100, "");
        let fw = framework();
        let (_, s) = preempt(&fw, &pod, &snap);
        assert_eq!(
            s.message(),
            "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn preemption_policy_never() {
        let pod = pod_requesting("p", &[]);
        let mut raw = (*pod.pod()).clone();
        if let Some(s) = raw.spec.as_mut() {
            s.preemption_policy = Some("Never".into());
        }
        let pod = PodInfo::new(Arc::new(raw));
        let fw = framework();
        let (_, s) = DefaultPreemption::new(Default::default(), PodGroups::new()).post_filter(
            &fw,
            &CycleState::new(),
            &pod,
            &Snapshot::default(),
            &NodeStatuses::new(),
        );
        assert_eq!(
            s.message(),
            "preemption: not eligible due to preemptionPolicy=Never."
        );
    }

    #[test]
    fn pdb_protected_pods_are_spared_when_possible() {
        use k8s_openapi::api::policy::v1::{PodDisruptionBudgetSpec, PodDisruptionBudgetStatus};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
        let labelled = |name: &str, app: &str| {
            let p = pod_requesting(name, &[("cpu", "2")]);
            let mut raw = (*p.pod()).clone();
            raw.metadata.labels = Some([("app".to_string(), app.to_string())].into());
            with_priority(PodInfo::new(Arc::new(raw)), 1, "n1")
        };
        let mut n1 = node_with("n1", |_| {});
        n1.add_pod(labelled("protected", "db"));
        n1.add_pod(labelled("free", "web"));
        let pdb = PodDisruptionBudget {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("db".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(PodDisruptionBudgetSpec {
                selector: Some(LabelSelector {
                    match_labels: Some([("app".to_string(), "db".to_string())].into()),
                    match_expressions: None,
                }),
                ..Default::default()
            }),
            status: Some(PodDisruptionBudgetStatus {
                disruptions_allowed: Some(0),
                ..Default::default()
            }),
        };
        let snap = Snapshot {
            pdbs: Arc::new(vec![Arc::new(pdb)]),
            ..Snapshot::from_nodes(vec![Arc::new(n1)])
        };
        let pod = with_priority(pod_requesting("p", &[("cpu", "2")]), 100, "");
        let fw = framework();
        let (res, s) = preempt(&fw, &pod, &snap);
        assert!(s.is_success(), "{s}");
        assert_eq!(
            res.victims
                .iter()
                .map(|v| v.name.as_str())
                .collect::<Vec<_>>(),
            vec!["free"]
        );
    }

    /// A pod of `prio` nominated to `node` (not bound), and the nominator holding it.
    fn nominated(
        name: &str,
        cpu: &str,
        prio: i32,
        node: &str,
        nominator: &crate::nominator::Nominator,
    ) {
        let p = with_priority(pod_requesting(name, &[("cpu", cpu)]), prio, "");
        nominator.add(p, crate::nominator::Nominating::Override(node.into()));
    }

    fn nominating_framework() -> (Framework, Arc<crate::nominator::Nominator>) {
        let n = crate::nominator::Nominator::new();
        (framework().with_nominator(n.clone()), n)
    }

    #[test]
    fn filter_keeps_the_room_of_pods_nominated_with_equal_or_higher_priority() {
        // n1 has 4 cpu free, 2 of them kept for q (priority 100).
        let snap = Snapshot::from_nodes(vec![Arc::new(node_with("n1", |_| {}))]);
        let (fw, n) = nominating_framework();
        nominated("q", "2", 100, "n1", &n);
        let state = CycleState::new();
        let lower = with_priority(pod_requesting("p", &[("cpu", "3")]), 100, "");
        let (s, verdicts) = fw.run_filters(&state, &lower, &snap.nodes[0], true);
        assert_eq!(s.reasons, vec!["Insufficient cpu"], "{s}");
        let fit = verdicts.iter().find(|v| v.plugin == "NodeResourcesFit");
        assert_eq!(fit.map(|v| v.code.as_str()), Some("Unschedulable"));
        // A higher-priority pod does not count q; nor does q count itself.
        let higher = with_priority(pod_requesting("p", &[("cpu", "3")]), 101, "");
        assert!(
            fw.run_filters(&state, &higher, &snap.nodes[0], false)
                .0
                .is_success()
        );
        let itself = with_priority(pod_requesting("q", &[("cpu", "3")]), 100, "");
        assert!(
            fw.run_filters(&state, &itself, &snap.nodes[0], false)
                .0
                .is_success()
        );
        // The cycle records which nominated pods it counted where.
        let mut rec = crate::framework::runtime::CycleRecord::default();
        let mut state = CycleState::new();
        assert!(
            fw.schedule(&mut state, &lower, &snap, &mut rec, true)
                .is_err()
        );
        assert_eq!(
            rec.nominated.get("n1"),
            Some(&vec!["default/q".to_string()])
        );
    }

    #[test]
    fn preemption_counts_nominated_pods_and_clears_lower_nominations() {
        // n1: victim v (2 cpu, priority 10) and q (2 cpu, priority 100) nominated there.
        let mut n1 = node_with("n1", |_| {});
        n1.add_pod(with_priority(
            pod_requesting("v", &[("cpu", "2")]),
            10,
            "n1",
        ));
        let snap = Snapshot::from_nodes(vec![Arc::new(n1)]);
        let (fw, n) = nominating_framework();
        nominated("q", "2", 100, "n1", &n);
        let preempt = |cpu: &str| {
            let pod = with_priority(pod_requesting("p", &[("cpu", cpu)]), 50, "");
            preempt(&fw, &pod, &snap)
        };
        // 2 cpu: evicting v leaves room beside q.
        let (res, s) = preempt("2");
        assert!(s.is_success(), "{s}");
        assert_eq!(res.nominated_node.as_deref(), Some("n1"));
        assert!(res.lower_nominated.is_empty());
        // 3 cpu: q keeps its 2, so no eviction helps, and an earlier nomination goes.
        let (res, s) = preempt("3");
        assert!(!s.is_success());
        assert!(res.clears_nomination && res.nominated_node.is_none());
        assert_eq!(
            s.message(),
            "preemption: 0/1 nodes are available: 1 Insufficient cpu."
        );
        // A lower-priority nomination on the chosen node is handed back to be cleared.
        nominated("low", "1", 1, "n1", &n);
        let (res, s) = preempt("2");
        assert!(s.is_success(), "{s}");
        let lower: Vec<&str> = res
            .lower_nominated
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(lower, vec!["low"]);
    }

    #[test]
    fn a_preemptor_waits_for_its_terminating_victims() {
        let terminating = {
            let p = with_priority(pod_requesting("v", &[("cpu", "4")]), 10, "n1");
            let mut raw = (*p.pod()).clone();
            raw.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ));
            raw.status = Some(k8s_openapi::api::core::v1::PodStatus {
                conditions: Some(vec![k8s_openapi::api::core::v1::PodCondition {
                    type_: "DisruptionTarget".into(),
                    status: "True".into(),
                    reason: Some(PREEMPTED_REASON.into()),
                    ..Default::default()
                }]),
                ..Default::default()
            });
            Arc::new(PodInfo::new(Arc::new(raw)))
        };
        let mut n1 = node_with("n1", |_| {});
        n1.add_pod(terminating);
        let snap = Snapshot::from_nodes(vec![Arc::new(n1)]);
        let fw = framework();
        let mut raw = (*with_priority(pod_requesting("p", &[("cpu", "2")]), 50, "").pod()).clone();
        raw.status = Some(k8s_openapi::api::core::v1::PodStatus {
            nominated_node_name: Some("n1".into()),
            ..Default::default()
        });
        let pod = PodInfo::new(Arc::new(raw));
        let (res, s) = preempt(&fw, &pod, &snap);
        assert_eq!(
            s.message(),
            "preemption: not eligible due to a terminating pod on the nominated node."
        );
        assert!(res.nominated_node.is_none() && !res.clears_nomination);
    }
}
