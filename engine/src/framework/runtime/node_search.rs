//! kube's schedule_one.go node search: Filter over the nodes (findNodesThatFitPod, from a
//! rotating start, bounded by percentageOfNodesToScore), Score (prioritizeNodes) and the
//! pick (selectHost). `schedule_pod` in the agent runs it with the extenders.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use rand::RngExt;
use rayon::prelude::*;

use super::*;
use crate::framework::{
    Code, CycleState, Diagnosis, FitError, MemberNodes, NodeStatuses, NominatedPods, Status,
};
use crate::snapshot::{NodeList, PodInfo, Snapshot};

const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: usize = 5;

/// What one cycle's Filter searches with, the same for host and virtual nodes.
pub(super) struct FilterSearch<'a> {
    pub(super) active: &'a [(&'static str, &'a dyn crate::framework::FilterPlugin)],
    pub(super) nominated: Arc<NominatedPods>,
    pub(super) timed: bool,
    pub(super) record_all: bool,
    pub(super) state: &'a CycleState,
    pub(super) pod: &'a PodInfo,
    pub(super) snapshot: &'a Snapshot,
}

/// What Filter left: the nominated node, or the feasible nodes and the statuses of the
/// nodes PreFilter left out (the rejected ones are in the cycle's record: `with_rejected`).
pub enum Filtered {
    Nominated(String),
    Feasible(NodeList, NodeStatuses),
}

/// `statuses` with the cycle's rejections added: built only when a FitError or an
/// extender needs them, not in every cycle that rejects thousands of nodes.
pub fn with_rejected(mut statuses: NodeStatuses, record: &CycleRecord) -> NodeStatuses {
    statuses.reserve(record.rejected.len());
    for (node, status) in &record.rejected {
        statuses.insert(node.name.to_string(), status.clone());
    }
    statuses
}

/// The FitError for statuses where every node was rejected.
pub fn fit_error(num_all_nodes: usize, statuses: NodeStatuses) -> FitError {
    let mut diagnosis = Diagnosis::default();
    for s in statuses.values() {
        if s.is_rejected() {
            diagnosis.unschedulable_plugins.insert(s.plugin);
        }
    }
    diagnosis.node_statuses = statuses;
    FitError {
        num_all_nodes,
        diagnosis,
    }
}

/// One successful cycle.
#[derive(Debug, Clone)]
pub struct ScheduleResult {
    pub node: String,
    pub evaluated_nodes: usize,
    pub feasible_nodes: usize,
}

impl ScheduleResult {
    /// The nominated node still fits: nothing else was looked at.
    pub fn nominated(node: String) -> Self {
        ScheduleResult {
            node,
            evaluated_nodes: 1,
            feasible_nodes: 1,
        }
    }
}

impl Framework {
    /// Filters, scores and picks a node. `record_all` runs every filter on every node
    /// (for explanations) instead of stopping at the first rejection and at
    /// percentageOfNodesToScore.
    pub fn schedule(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        record: &mut CycleRecord,
        record_all: bool,
    ) -> Result<ScheduleResult, Box<FitError>> {
        let cycle = || match self.filter_phase_in_pool(state, pod, snapshot, record, record_all)? {
            Filtered::Nominated(node) => Ok(ScheduleResult::nominated(node)),
            Filtered::Feasible(feasible, _) => {
                let feasible_nodes = feasible.len();
                let node = self.score_phase_in_pool(state, pod, feasible, snapshot, record, None);
                Ok(ScheduleResult {
                    node,
                    evaluated_nodes: record.num_evaluated,
                    feasible_nodes,
                })
            }
        };
        // One hand-over to the pool for the whole cycle: the phases' parallel sections
        // then start from a worker.
        self.on_pool(self.parallel(snapshot, record_all), cycle)
    }

    /// Where the next cycle's Filter starts among the host nodes: kube-scheduler's
    /// `nextStartNodeIndex`.
    pub fn next_start_node_index(&self) -> usize {
        self.next_start.load(Ordering::Relaxed)
    }

    /// Sets where the next cycle's Filter starts, as a test sets kube-scheduler's
    /// `nextStartNodeIndex` to compare the two sampled searches from one index.
    pub fn set_next_start_node_index(&self, index: usize) {
        self.next_start.store(index, Ordering::Relaxed);
    }

    /// PreFilter and Filter: the nominated node if it still fits, else the feasible
    /// nodes (at least one) with every rejected node's status.
    pub fn filter_phase(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        record: &mut CycleRecord,
        record_all: bool,
    ) -> Result<Filtered, Box<FitError>> {
        self.on_pool(self.parallel(snapshot, record_all), || {
            self.filter_phase_in_pool(state, pod, snapshot, record, record_all)
        })
    }

    fn filter_phase_in_pool(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        record: &mut CycleRecord,
        record_all: bool,
    ) -> Result<Filtered, Box<FitError>> {
        let num_all_nodes = snapshot.len();
        let mut diagnosis = Diagnosis::default();
        if let Some(msg) = &pod.invalid {
            diagnosis.pre_filter_msg = Some(msg.clone());
            return Err(Box::new(FitError {
                num_all_nodes,
                diagnosis,
            }));
        }
        if num_all_nodes == 0 {
            return Err(Box::new(FitError {
                num_all_nodes,
                diagnosis,
            }));
        }

        state.write(crate::framework::VOLUMES_KEY, snapshot.volumes.clone());
        let started = Instant::now();
        let allowed = match self.run_pre_filter(state, pod, snapshot, record) {
            Ok(allowed) => allowed,
            Err(status) => {
                if status.is_rejected() {
                    diagnosis.unschedulable_plugins.insert(status.plugin);
                }
                if status.code == Code::Pending {
                    diagnosis.pending_plugins.insert(status.plugin);
                }
                diagnosis.pre_filter_msg = Some(status.message());
                record.timed("PreFilter", started);
                return Err(Box::new(FitError {
                    num_all_nodes,
                    diagnosis,
                }));
            }
        };
        record.timed("PreFilter", started);

        // A pod nominated by an earlier preemption tries its node first (kube's
        // evaluateNominatedNode), so the room made for it is not lost.
        if !record_all
            && let Some(nominated) = pod.nominated_node_name()
            && let Some(node) = snapshot.get(nominated)
            && allowed.as_ref().is_none_or(|(a, _)| a.contains(nominated))
            && self.run_filters(state, pod, node, false).0.is_success()
        {
            record.num_evaluated = 1;
            record.num_feasible = 1;
            return Ok(Filtered::Nominated(nominated.to_string()));
        }

        let started = Instant::now();
        let feasible = self.find_feasible(
            state,
            pod,
            snapshot,
            allowed.as_ref().map(|(a, _)| a),
            record,
            record_all,
        );
        record.timed("Filter", started);
        // Nodes PreFilter left out count in the FitError as kube's absent nodes do.
        let mut statuses = NodeStatuses::new();
        if let Some((allowed, narrowing)) = &allowed {
            let mut names = narrowing.clone();
            names.sort_unstable();
            let absent = Status::unresolvable(format!(
                "node(s) didn't satisfy plugin(s) [{}]",
                names.join(" ")
            ))
            .with_plugin(narrowing.first().copied().unwrap_or_default());
            for n in snapshot
                .nodes
                .iter()
                .filter(|n| !allowed.contains(&*n.name))
            {
                statuses.insert(n.name.to_string(), absent.clone());
            }
        }
        record.num_feasible = feasible.len();
        if feasible.is_empty() {
            let statuses = with_rejected(statuses, record);
            return Err(Box::new(fit_error(num_all_nodes, statuses)));
        }
        Ok(Filtered::Feasible(feasible, statuses))
    }

    /// PreScore, Score and NormalizeScore, plus `extra` totals (extenders'), aligned with
    /// `feasible`; returns the chosen node.
    pub fn score_phase(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        feasible: NodeList,
        snapshot: &Snapshot,
        record: &mut CycleRecord,
        extra: Option<&[i64]>,
    ) -> String {
        self.on_pool(feasible.len() >= PARALLEL_MIN_NODES, || {
            self.score_phase_in_pool(state, pod, feasible, snapshot, record, extra)
        })
    }

    fn score_phase_in_pool(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        feasible: NodeList,
        snapshot: &Snapshot,
        record: &mut CycleRecord,
        extra: Option<&[i64]>,
    ) -> String {
        let started = Instant::now();
        record.num_feasible = feasible.len();
        let (mut scores, stands_for) = self.prioritize(state, pod, &feasible, snapshot, record);
        if let Some(extra) = extra {
            for (s, e) in scores.iter_mut().zip(extra) {
                *s += e;
            }
            record.totals = scores.clone();
        }
        record.timed("Score", started);
        let node = select_host_weighted(&feasible, &scores, stands_for.as_deref());
        record.feasible = feasible;
        node
    }

    /// Filter over the nodes PreFilter allowed. percentageOfNodesToScore bounds the search
    /// among host nodes only, from a rotating start, as kube-scheduler's among its nodes;
    /// every allowed virtual node is filtered in every cycle, so which cluster a pod goes
    /// to never depends on where the rotation started.
    fn find_feasible(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        allowed: Option<&HashSet<String>>,
        record: &mut CycleRecord,
        record_all: bool,
    ) -> NodeList {
        // Positions in the snapshot of the nodes PreFilter allowed; None: all of them.
        let subset: Option<Vec<u32>> = allowed.map(|names| {
            (0..snapshot.nodes.len() as u32)
                .filter(|&p| names.contains(&snapshot.nodes[p as usize].name[..]))
                .collect()
        });
        // Without leaves (the common case) no node is walked to tell them apart.
        let (hosts, virtuals): (Option<Vec<u32>>, Vec<u32>) = if snapshot.virtual_nodes == 0 {
            (subset, Vec::new())
        } else {
            let all = subset.unwrap_or_else(|| (0..snapshot.nodes.len() as u32).collect());
            let (hosts, virtuals) = all
                .into_iter()
                .partition(|&p| snapshot.nodes[p as usize].cluster.is_none());
            (Some(hosts), virtuals)
        };
        let total = hosts.as_ref().map_or(snapshot.nodes.len(), Vec::len);
        let members = if virtuals.is_empty() {
            None
        } else {
            state.members()
        };
        let want = if record_all {
            total
        } else if let Some(m) = &members {
            // One flat cluster of the host's nodes and the leaves' would look for
            // numFeasibleNodesToFind of all of them: the host's nodes and each virtual
            // node's members look for their share, so that neither side is sampled more
            // densely than the other (the best of a larger sample scores higher) and a
            // cycle costs what the flat cluster's does.
            let of = total
                + virtuals
                    .iter()
                    .map(|&p| m.size(&snapshot.nodes[p as usize]))
                    .sum::<usize>();
            let flat = num_feasible_nodes_to_find(self.percentage_of_nodes_to_score, of);
            m.sample(flat, of);
            share_of_sample(flat, of, total)
        } else {
            num_feasible_nodes_to_find(self.percentage_of_nodes_to_score, total)
        };
        let next = self.next_start.load(Ordering::Relaxed);
        let start = if total == 0 { 0 } else { next % total };
        let active = self.active_filters(state);
        let search = FilterSearch {
            active: &active,
            nominated: self.nominator.nominated_pods(),
            timed: state.should_record_plugin_metrics(),
            record_all,
            state,
            pod,
            snapshot,
        };
        let mut found = self.filter_positions(&search, hosts.as_deref(), total, start, want);
        // As kube's: modulo all the host nodes, also when PreFilter allowed fewer.
        let all_hosts = snapshot.nodes.len().saturating_sub(snapshot.virtual_nodes);
        if all_hosts > 0 {
            self.next_start
                .store((next + found.processed) % all_hosts, Ordering::Relaxed);
        }
        if !virtuals.is_empty() {
            let leaves =
                self.filter_positions(&search, Some(&virtuals), virtuals.len(), 0, virtuals.len());
            found.merge(leaves, usize::MAX);
        }
        observe_timings("Filter", found.timings);
        record.num_evaluated = found.processed;
        record.num_evaluated_virtual = virtuals.len();
        record.filter_plugins = active.iter().map(|&(name, _)| name).collect();
        record.rejected.extend(found.rejected);
        record.verdicts.extend(found.verdicts);
        record.nominated.extend(found.nominated);
        // The i-th filter ran wherever more than i filters ran.
        let mut ran = 0;
        for (i, &(name, _)) in active.iter().enumerate().rev() {
            ran += found.called[i + 1];
            if ran > 0 {
                record.evaluations.push(("Filter", name, ran));
            }
        }
        NodeList::new(snapshot.nodes.clone(), found.feasible)
    }

    /// Filters `total` nodes (at `positions`, or the snapshot's first `total`) in a
    /// rotating order from `start`, in parallel chunks, until `want` are feasible. A chunk
    /// keeps only what is needed of its nodes (feasible ones, rejections), so the serial
    /// merge does not walk every node again.
    fn filter_positions(
        &self,
        search: &FilterSearch<'_>,
        positions: Option<&[u32]>,
        total: usize,
        start: usize,
        want: usize,
    ) -> FilterChunk {
        let FilterSearch {
            active,
            nominated,
            timed,
            record_all,
            state,
            pod,
            snapshot,
        } = search;
        let (timed, record_all) = (*timed, *record_all);
        let position = |i: usize| positions.map_or(i as u32, |s| s[i]);
        let found = AtomicUsize::new(0);
        // kube's search goes on past the `want`-th feasible node, rejections counted, until
        // one feasible node more stops it (neither kept nor counted as processed): where
        // the next cycle starts depends on it.
        let stopped = AtomicBool::new(false);
        let run_chunk = |c: usize| {
            let mut out = FilterChunk {
                called: vec![0; active.len() + 1],
                ..FilterChunk::default()
            };
            // Counted locally and published once per chunk: one shared counter
            // bumped per feasible node bounces between the cores.
            let mut local = 0;
            let end = ((c + 1) * FILTER_CHUNK).min(total);
            for i in c * FILTER_CHUNK..end {
                if stopped.load(Ordering::Relaxed) {
                    break;
                }
                let enough = found.load(Ordering::Relaxed) + local >= want;
                if i + PREFETCH_AHEAD < end {
                    let ahead = position((start + i + PREFETCH_AHEAD) % total);
                    snapshot.nodes[ahead as usize].prefetch();
                }
                if i + PREFETCH_LABELS_AHEAD < end {
                    let ahead = position((start + i + PREFETCH_LABELS_AHEAD) % total);
                    snapshot.nodes[ahead as usize].prefetch_labels();
                }
                let p = position((start + i) % total);
                let node = &snapshot.nodes[p as usize];
                out.processed += 1;
                let eligible = if nominated.is_empty() {
                    Vec::new()
                } else {
                    eligible_nominated(nominated, pod, &node.name)
                };
                let status = if record_all || timed || !eligible.is_empty() {
                    let f =
                        self.filter_node(active, &eligible, state, pod, node, record_all, timed);
                    out.called[f.calls[0]] += 1;
                    out.called[f.calls[1]] += 1;
                    out.timings.extend(f.timings);
                    if record_all {
                        out.verdicts.push((node.name.to_string(), f.verdicts));
                        if !f.counted.is_empty() {
                            out.nominated.push((node.name.to_string(), f.counted));
                        }
                    }
                    f.status
                } else {
                    let (status, calls) = self.first_rejection(active, state, pod, node);
                    out.called[calls] += 1;
                    status.unwrap_or_else(Status::success)
                };
                if status.is_success() && enough {
                    out.processed -= 1;
                    stopped.store(true, Ordering::Relaxed);
                    break;
                } else if status.is_success() {
                    local += 1;
                    out.feasible.push(p);
                } else {
                    out.rejected.push((node.clone(), status));
                }
            }
            found.fetch_add(local, Ordering::Relaxed);
            out
        };
        let n_chunks = total.div_ceil(FILTER_CHUNK);
        let chunks: Vec<FilterChunk> = if want.min(total) >= PARALLEL_MIN_NODES {
            self.pool
                .install(|| (0..n_chunks).into_par_iter().map(run_chunk).collect())
        } else {
            (0..n_chunks).map(run_chunk).collect()
        };
        let mut all = FilterChunk {
            feasible: Vec::with_capacity(want.min(total)),
            called: vec![0; active.len() + 1],
            ..FilterChunk::default()
        };
        for chunk in chunks {
            all.merge(chunk, want);
        }
        all
    }

    /// Runs PreScore and Score, normalises and weights; returns total scores in node order
    /// and, when some node stands for others (see [`crate::framework::Members`]), how many
    /// equally good candidates each node counts as in the pick.
    ///
    /// A node standing for others is scored as the best of its members: the plugins whose
    /// input lives on the node the pod runs on score each member in the members' own
    /// cluster (PreScore there first), the best member by those plugins' weighted and
    /// normalised scores gives the standing node its raw scores, and normalisation then
    /// runs once over the cycle's nodes, as kube's. The other plugins score the standing
    /// node itself.
    fn prioritize(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &NodeList,
        snapshot: &Snapshot,
        record: &mut CycleRecord,
    ) -> (Vec<i64>, Option<Vec<usize>>) {
        let members = if snapshot.virtual_nodes > 0 {
            state.members()
        } else {
            None
        };
        if self.score.is_empty() {
            return (vec![0; nodes.len()], None);
        }
        // kube scores nothing with one feasible node; a node standing for others still
        // needs its member chosen.
        if nodes.len() == 1 && (members.is_none() || nodes[0].cluster.is_none()) {
            return (vec![0; nodes.len()], None);
        }
        for p in &self.pre_score {
            let Some(ps) = p.as_pre_score() else { continue };
            let t = Instant::now();
            let s = ps.pre_score(state, pod, nodes, snapshot);
            observe(state, p.name(), "PreScore", &s, t);
            if s.is_skip() {
                state.skip_score(p.name());
            } else {
                record.evaluations.push(("PreScore", p.name(), 1));
            }
        }
        // (position in `nodes`, what it stands for), PreScore run there.
        let mut standing: Vec<(usize, MemberNodes)> = Vec::new();
        if let Some(m) = &members {
            for (i, node) in nodes.iter().enumerate() {
                if node.cluster.is_none() {
                    continue;
                }
                let Some(mut found) = m.members(pod, node) else {
                    continue;
                };
                if found.nodes.is_empty() {
                    continue;
                }
                for p in &self.pre_score {
                    let Some(ps) = p.as_pre_score() else { continue };
                    if p.as_score().is_some_and(|sp| !sp.scores_members()) {
                        continue;
                    }
                    let s =
                        ps.pre_score(&mut found.state, &found.pod, &found.nodes, &found.snapshot);
                    if s.is_skip() {
                        found.state.skip_score(p.name());
                    }
                }
                standing.push((i, found));
            }
        }
        let state: &CycleState = state;
        let on_members = |p: &P| p.as_score().is_some_and(|sp| sp.scores_members());
        // A plugin PreScore skipped on the host nodes may still score some members.
        let active: Vec<&(P, i64)> = self
            .score
            .iter()
            .filter(|(p, _)| {
                !state.skips_score(p.name())
                    || (on_members(p)
                        && standing.iter().any(|(_, m)| !m.state.skips_score(p.name())))
            })
            .collect();
        let scorers: Vec<(&'static str, Option<&dyn crate::framework::ScorePlugin>)> = active
            .iter()
            .map(|(p, _)| {
                let sp = p.as_score().filter(|_| !state.skips_score(p.name()));
                (p.name(), sp)
            })
            .collect();
        let k = scorers.len();
        let n = nodes.len();
        for &(name, sp) in &scorers {
            if sp.is_some() {
                record.evaluations.push(("Score", name, n as u64));
            }
        }
        // Every call timed in a sampled cycle, as kube's runScorePlugin.
        let timed = state.should_record_plugin_metrics();
        // Node-major, in parallel chunks: each node's entry is read once for all plugins
        // (thousands of scattered entries per cycle; read once per plugin, they were most
        // of the phase's time). raw[node * k + plugin].
        let mut raw_by_node = vec![0i64; n * k];
        let score_chunk = |(c, out): (usize, &mut [i64])| {
            let mut timings = Vec::new();
            for (j, row) in out.chunks_mut(k).enumerate() {
                let node = &nodes[c * SCORE_CHUNK + j];
                // One clock read per call, as in Filter.
                let mut last = timed.then(Instant::now);
                for (slot, &(name, sp)) in row.iter_mut().zip(&scorers) {
                    let Some(sp) = sp else { continue };
                    let r = sp.score(state, pod, node);
                    if let Some(t) = last.as_mut() {
                        let now = Instant::now();
                        let code = r.as_ref().map_or_else(|s| s.code, |_| Code::Success);
                        timings.push((name, code, (now - *t).as_secs_f64()));
                        *t = now;
                    }
                    *slot = r.unwrap_or(0);
                }
            }
            timings
        };
        let timings: Vec<(&'static str, Code, f64)> = if k == 0 {
            Vec::new()
        } else if n >= PARALLEL_MIN_NODES {
            self.pool.install(|| {
                raw_by_node
                    .par_chunks_mut(k * SCORE_CHUNK)
                    .enumerate()
                    .map(score_chunk)
                    .flatten()
                    .collect()
            })
        } else {
            raw_by_node
                .chunks_mut(k * SCORE_CHUNK)
                .enumerate()
                .flat_map(score_chunk)
                .collect()
        };
        if timed {
            observe_timings("Score", timings);
        }
        let mut stands_for = (!standing.is_empty()).then(|| vec![1usize; n]);
        for (i, m) in &standing {
            let row = &mut raw_by_node[i * k..(i + 1) * k];
            let best = best_member(&active, m, row, record);
            if let Some(w) = stands_for.as_mut() {
                w[*i] = best.ties;
            }
            record
                .leaf_ties
                .insert(nodes[*i].name.to_string(), best.ties);
            members
                .as_ref()
                .inspect(|ms| ms.choose(&nodes[*i].name, &best.member));
            row.copy_from_slice(&best.raw);
        }
        if nodes.len() == 1 {
            return (vec![0], None);
        }
        // (raw, normalized)[plugin][node]. A plugin PreScore skipped on the host nodes
        // normalises with the state of members it scored.
        let columns: Vec<(Vec<i64>, Vec<i64>)> = active
            .iter()
            .enumerate()
            .map(|(i, (p, _))| {
                let raw: Vec<i64> = (0..n).map(|j| raw_by_node[j * k + i]).collect();
                let mut normalized = raw.clone();
                let with = if state.skips_score(p.name()) {
                    standing
                        .iter()
                        .map(|(_, m)| &m.state)
                        .find(|s| !s.skips_score(p.name()))
                } else {
                    Some(state)
                };
                if let (Some(sp), Some(with)) = (p.as_score(), with) {
                    sp.normalize(with, pod, &mut normalized);
                }
                (raw, normalized)
            })
            .collect();
        let mut totals = vec![0i64; nodes.len()];
        for ((p, weight), (raw, normalized)) in active.iter().zip(columns) {
            for (t, n) in totals.iter_mut().zip(&normalized) {
                *t += n * weight;
            }
            record.scores.push(ScoreColumn {
                plugin: p.name(),
                weight: *weight,
                raw,
                normalized,
            });
        }
        record.totals = totals.clone();
        (totals, stands_for)
    }
}

/// The member a standing node is scored as, and how many members tie with it.
struct BestMember {
    member: String,
    ties: usize,
    /// Its raw scores, one per active plugin.
    raw: Vec<i64>,
}

/// Scores `m`'s members with the `active` plugins that score members (the others keep the
/// standing node's own score, in `own`), and picks the best by those plugins' scores
/// normalised among the members and weighted; ties drawn uniformly.
fn best_member(
    active: &[&(P, i64)],
    m: &MemberNodes,
    own: &[i64],
    record: &mut CycleRecord,
) -> BestMember {
    let k = active.len();
    let count = m.nodes.len();
    let mut raw = vec![0i64; count * k];
    let mut totals = vec![0i64; count];
    for (i, (p, weight)) in active.iter().enumerate() {
        let sp = p.as_score();
        let scores_here = sp.filter(|sp| sp.scores_members() && !m.state.skips_score(p.name()));
        let mut column: Vec<i64> = match scores_here {
            Some(sp) => {
                record.evaluations.push(("Score", p.name(), count as u64));
                m.nodes
                    .iter()
                    .map(|node| sp.score(&m.state, &m.pod, node).unwrap_or(0))
                    .collect()
            }
            None if sp.is_some_and(|sp| !sp.scores_members()) => vec![own[i]; count],
            // PreScore skipped there: nothing of the pod's matters on these nodes.
            None => vec![0; count],
        };
        for (j, v) in column.iter().enumerate() {
            raw[j * k + i] = *v;
        }
        if let Some(sp) = scores_here {
            sp.normalize(&m.state, &m.pod, &mut column);
            for (t, v) in totals.iter_mut().zip(&column) {
                *t += v * weight;
            }
        }
    }
    let best = totals.iter().copied().max().unwrap_or(0);
    let tied: Vec<usize> = (0..count).filter(|&j| totals[j] == best).collect();
    let pick = if tied.len() > 1 {
        tied[rand::rng().random_range(0..tied.len())]
    } else {
        tied.first().copied().unwrap_or(0)
    };
    BestMember {
        member: m.nodes[pick].name.to_string(),
        ties: tied.len(),
        raw: raw[pick * k..(pick + 1) * k].to_vec(),
    }
}

/// How many feasible nodes `n` of a flat cluster's `of` nodes contribute to a search for
/// `want` of them: their proportional share, rounded up (at least one of a non-empty
/// set, so that a small leaf is never left out), all of them when the search is not
/// sampled.
pub(crate) fn share_of_sample(want: usize, of: usize, n: usize) -> usize {
    if want >= of || of == 0 {
        return n;
    }
    (n * want).div_ceil(of).clamp(n.min(1), n)
}

/// kube-scheduler's `numFeasibleNodesToFind`: all nodes below 100; else the percentage
/// (adaptive when unset: 50 % minus 1 % per 125 nodes, at least 5 %), at least 100.
pub(crate) fn num_feasible_nodes_to_find(percentage: Option<u32>, num_all_nodes: usize) -> usize {
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND {
        return num_all_nodes;
    }
    let mut pct = percentage.unwrap_or(0) as usize;
    if pct >= 100 {
        return num_all_nodes;
    }
    if pct == 0 {
        pct = 50usize
            .saturating_sub(num_all_nodes / 125)
            .max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND);
    }
    (num_all_nodes * pct / 100).max(MIN_FEASIBLE_NODES_TO_FIND)
}

/// The highest total; ties broken uniformly at random, as kube-scheduler's selectHost
/// (which samples a reservoir, one random number per tie): here the ties are counted and
/// one random number picks among them, the same distribution for one draw instead of one
/// per tied node — thousands when identical nodes all score the same.
#[cfg(test)]
pub(super) fn select_host(nodes: &NodeList, scores: &[i64]) -> String {
    select_host_weighted(nodes, scores, None)
}

/// [`select_host`] where node `i` counts as `stands_for[i]` tied candidates (a virtual
/// node for its equally good leaf nodes, 1 for the others), so that a host and its leaves
/// share the ties as one cluster of all their nodes would.
pub(super) fn select_host_weighted(
    nodes: &NodeList,
    scores: &[i64],
    stands_for: Option<&[usize]>,
) -> String {
    let Some(&best) = scores.iter().max() else {
        return String::new();
    };
    let count = |i: usize| stands_for.and_then(|w| w.get(i).copied()).unwrap_or(1);
    let ties: usize = scores
        .iter()
        .enumerate()
        .filter(|&(_, &s)| s == best)
        .map(|(i, _)| count(i))
        .sum();
    let mut pick = if ties > 1 {
        rand::rng().random_range(0..ties)
    } else {
        0
    };
    let mut chosen = 0;
    for (i, _) in scores.iter().enumerate().filter(|&(_, &s)| s == best) {
        chosen = i;
        let c = count(i);
        if pick < c {
            break;
        }
        pick -= c;
    }
    nodes[chosen].name.to_string()
}
