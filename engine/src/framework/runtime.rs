//! A profile's plugins, in order, and the runner of its extension points (PreEnqueue
//! through PostBind, Permit's waiting pods included). The node search that Filter and
//! Score make of them is [`node_search`]; how it spreads over the pool, [`parallel`];
//! what a cycle records for explanations, [`record`].

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use mcsched_shared::explain::PluginVerdict;

use super::waiting_pods::{MAX_WAIT, WaitingPods};
use super::{
    BindContext, Code, CycleState, Handle, NodeStatuses, NominatedPods, Plugin, PodNominator,
    PostFilterResult, Status,
};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

mod node_search;
mod parallel;
mod record;

pub use node_search::{Filtered, ScheduleResult, fit_error, with_rejected};
pub(crate) use node_search::{num_feasible_nodes_to_find, share_of_sample};
pub(crate) use parallel::PARALLEL_MIN_NODES;
use parallel::{FILTER_CHUNK, FilterChunk, PREFETCH_AHEAD, PREFETCH_LABELS_AHEAD, SCORE_CHUNK};
pub use record::{CycleRecord, ScoreColumn, verdict};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameworkError {
    #[error("profile {profile:?}: plugin {plugin:?} is not registered")]
    UnknownPlugin { profile: String, plugin: String },
    #[error(
        "profile {profile:?}: plugin {plugin:?} does not implement the {point} extension point"
    )]
    NotImplemented {
        profile: String,
        plugin: String,
        point: &'static str,
    },
    #[error("profile {profile:?}: exactly one queueSort plugin is needed, found {found}")]
    QueueSort { profile: String, found: usize },
    #[error("profile {profile:?}: at least one bind plugin is needed")]
    NoBinder { profile: String },
    #[error("profile {profile:?}: at most one placement generate plugin is allowed")]
    PlacementGenerate { profile: String },
    #[error("cannot start the scheduling thread pool: {0}")]
    ThreadPool(String),
}

/// The plugins of one profile per extension point, in order; score plugins with weights.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProfileSpec {
    pub(crate) scheduler_name: String,
    pub(crate) pre_enqueue: Vec<String>,
    pub(crate) queue_sort: Vec<String>,
    pub(crate) pre_filter: Vec<String>,
    pub(crate) filter: Vec<String>,
    pub(crate) post_filter: Vec<String>,
    pub(crate) pre_score: Vec<String>,
    pub(crate) score: Vec<(String, i64)>,
    pub(crate) reserve: Vec<String>,
    pub permit: Vec<String>,
    pub pre_bind: Vec<String>,
    pub(crate) bind: Vec<String>,
    pub(crate) post_bind: Vec<String>,
    pub(crate) placement_generate: Vec<String>,
    pub(crate) placement_score: Vec<(String, i64)>,
    pub(crate) pod_group_post_filter: Vec<String>,
    pub percentage_of_nodes_to_score: Option<u32>,
}

type P = Arc<dyn Plugin>;
/// The nodes PreFilter allows, with the plugins that narrowed them down; None: every node.
type Allowed = Option<(HashSet<String>, Vec<&'static str>)>;

pub struct Framework {
    pub scheduler_name: String,
    pre_enqueue: Vec<P>,
    queue_sort: P,
    pre_filter: Vec<P>,
    filter: Vec<P>,
    post_filter: Vec<P>,
    pre_score: Vec<P>,
    score: Vec<(P, i64)>,
    reserve: Vec<P>,
    permit: Vec<P>,
    pre_bind: Vec<P>,
    bind: Vec<P>,
    post_bind: Vec<P>,
    placement_generate: Option<P>,
    pub(super) placement_score: Vec<(P, i64)>,
    pod_group_post_filter: Vec<P>,
    percentage_of_nodes_to_score: Option<u32>,
    pool: Arc<rayon::ThreadPool>,
    /// Where the next cycle starts looking, so nodes share the work of being checked.
    next_start: AtomicUsize,
    /// Pods a Permit plugin holds before binding.
    waiting_pods: Arc<WaitingPods>,
    /// Pods nominated by preemption, which Filter counts on their nodes.
    nominator: Arc<dyn PodNominator>,
    /// The scheduler's extenders, for preemption's preempt verb (set once they exist).
    extenders: std::sync::OnceLock<Vec<Arc<dyn super::PreemptionExtender>>>,
    /// The API client of the scheduling cycle's own writes (kube's `Handle.ClientSet()`,
    /// which DynamicResources' PostFilter deallocates with); set once the client exists.
    api: std::sync::OnceLock<BindContext>,
}

impl Framework {
    pub fn new(
        spec: &ProfileSpec,
        plugins: &HashMap<String, P>,
        parallelism: usize,
    ) -> Result<Self, FrameworkError> {
        let profile = &spec.scheduler_name;
        let lookup = |names: &[String], point: &'static str, has: fn(&dyn Plugin) -> bool| {
            names
                .iter()
                .map(|n| {
                    let p = plugins
                        .get(n)
                        .ok_or_else(|| FrameworkError::UnknownPlugin {
                            profile: profile.clone(),
                            plugin: n.clone(),
                        })?;
                    if !has(p.as_ref()) {
                        return Err(FrameworkError::NotImplemented {
                            profile: profile.clone(),
                            plugin: n.clone(),
                            point,
                        });
                    }
                    Ok(p.clone())
                })
                .collect::<Result<Vec<P>, FrameworkError>>()
        };
        let mut queue_sort = lookup(&spec.queue_sort, "queueSort", |p| {
            p.as_queue_sort().is_some()
        })?;
        if queue_sort.len() != 1 {
            return Err(FrameworkError::QueueSort {
                profile: profile.clone(),
                found: queue_sort.len(),
            });
        }
        let bind = lookup(&spec.bind, "bind", |p| p.as_bind().is_some())?;
        if bind.is_empty() {
            return Err(FrameworkError::NoBinder {
                profile: profile.clone(),
            });
        }
        let score_names: Vec<String> = spec.score.iter().map(|(n, _)| n.clone()).collect();
        let score = lookup(&score_names, "score", |p| p.as_score().is_some())?
            .into_iter()
            .zip(spec.score.iter().map(|(_, w)| *w))
            .collect();
        let mut placement_generate = lookup(&spec.placement_generate, "placementGenerate", |p| {
            p.as_placement_generate().is_some()
        })?;
        if placement_generate.len() > 1 {
            return Err(FrameworkError::PlacementGenerate {
                profile: profile.clone(),
            });
        }
        let placement_score_names: Vec<String> = (spec.placement_score.iter())
            .map(|(n, _)| n.clone())
            .collect();
        let placement_score = lookup(&placement_score_names, "placementScore", |p| {
            p.as_placement_score().is_some()
        })?
        .into_iter()
        .zip(spec.placement_score.iter().map(|(_, w)| (*w).max(1)))
        .collect();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(parallelism.max(1))
            .thread_name(|i| format!("mcsched-worker-{i}"))
            .build()
            .map_err(|e| FrameworkError::ThreadPool(e.to_string()))?;
        let fw = Framework {
            scheduler_name: profile.clone(),
            pre_enqueue: lookup(&spec.pre_enqueue, "preEnqueue", |p| {
                p.as_pre_enqueue().is_some()
            })?,
            queue_sort: queue_sort.remove(0),
            pre_filter: lookup(&spec.pre_filter, "preFilter", |p| {
                p.as_pre_filter().is_some()
            })?,
            filter: lookup(&spec.filter, "filter", |p| p.as_filter().is_some())?,
            post_filter: lookup(&spec.post_filter, "postFilter", |p| {
                p.as_post_filter().is_some()
            })?,
            pre_score: lookup(&spec.pre_score, "preScore", |p| p.as_pre_score().is_some())?,
            score,
            reserve: lookup(&spec.reserve, "reserve", |p| p.as_reserve().is_some())?,
            permit: lookup(&spec.permit, "permit", |p| p.as_permit().is_some())?,
            pre_bind: lookup(&spec.pre_bind, "preBind", |p| p.as_pre_bind().is_some())?,
            bind,
            post_bind: lookup(&spec.post_bind, "postBind", |p| p.as_post_bind().is_some())?,
            placement_generate: placement_generate.pop(),
            placement_score,
            pod_group_post_filter: lookup(
                &spec.pod_group_post_filter,
                "podGroupPostFilter",
                |p| p.as_pod_group_post_filter().is_some(),
            )?,
            percentage_of_nodes_to_score: spec.percentage_of_nodes_to_score,
            pool: Arc::new(pool),
            next_start: AtomicUsize::new(0),
            waiting_pods: Arc::default(),
            nominator: Arc::new(super::NoNominations),
            extenders: std::sync::OnceLock::new(),
            api: std::sync::OnceLock::new(),
        };
        let handle = fw.handle();
        for p in fw.plugins() {
            p.set_handle(&handle);
        }
        Ok(fw)
    }

    /// Nominations are read from `nominator` (the queue's, shared by all profiles).
    pub(crate) fn with_nominator(mut self, nominator: Arc<dyn PodNominator>) -> Self {
        self.nominator = nominator;
        self
    }

    /// The scheduler's extenders, for preemption (kube's `Handle.Extenders`); set once.
    pub fn set_extenders(&self, extenders: Vec<Arc<dyn super::PreemptionExtender>>) {
        let _ = self.extenders.set(extenders);
    }

    pub fn set_api(&self, api: BindContext) {
        let _ = self.api.set(api);
    }

    /// The client a plugin writes with outside binding; None until the agent set it.
    pub fn api(&self) -> Option<&BindContext> {
        self.api.get()
    }

    pub(crate) fn extenders(&self) -> &[Arc<dyn super::PreemptionExtender>] {
        self.extenders.get().map(Vec::as_slice).unwrap_or_default()
    }

    /// The pods nominated to `node` (kube's `NominatedPodsForNode`).
    pub(crate) fn nominated_pods_for_node(&self, node: &str) -> Vec<Arc<PodInfo>> {
        self.nominator
            .nominated_pods()
            .get(node)
            .cloned()
            .unwrap_or_default()
    }

    /// What plugins may use of the framework (kube's `framework.Handle`).
    pub fn handle(&self) -> Handle {
        Handle {
            waiting_pods: self.waiting_pods.clone(),
        }
    }

    /// Every plugin of the profile, once, in extension-point order.
    pub fn plugins(&self) -> Vec<P> {
        let mut seen = HashSet::new();
        let all = self
            .pre_enqueue
            .iter()
            .chain(std::iter::once(&self.queue_sort))
            .chain(&self.pre_filter)
            .chain(&self.filter)
            .chain(&self.post_filter)
            .chain(&self.pre_score)
            .chain(self.score.iter().map(|(p, _)| p))
            .chain(&self.reserve)
            .chain(&self.permit)
            .chain(&self.pre_bind)
            .chain(&self.bind)
            .chain(&self.post_bind)
            .chain(&self.placement_generate)
            .chain(self.placement_score.iter().map(|(p, _)| p))
            .chain(&self.pod_group_post_filter);
        all.filter(|p| seen.insert(p.name())).cloned().collect()
    }

    /// The profile's PlacementGenerate plugin, if it has one (kube allows one).
    pub fn placement_generator(&self) -> Option<&dyn super::PlacementGeneratePlugin> {
        self.placement_generate
            .as_ref()
            .and_then(|p| p.as_placement_generate())
    }

    /// The profile's PodGroupPostFilter plugins, in order, with what each does.
    pub fn pod_group_post_filters(&self) -> Vec<(&'static str, super::PodGroupRelief)> {
        (self.pod_group_post_filter.iter())
            .filter_map(|p| Some((p.name(), p.as_pod_group_post_filter()?.relief())))
            .collect()
    }

    /// The profile's QueueSort plugin (exactly one, checked when built).
    pub(crate) fn queue_sort(&self) -> &P {
        &self.queue_sort
    }

    pub fn run_pre_enqueue(&self, pod: &k8s_openapi::api::core::v1::Pod) -> Status {
        for p in &self.pre_enqueue {
            if let Some(pe) = p.as_pre_enqueue() {
                let s = pe.pre_enqueue(pod);
                if !s.is_success() {
                    return s.with_plugin(p.name());
                }
            }
        }
        Status::success()
    }

    /// Each PreEnqueue plugin's own verdict for `pod`, every plugin asked (a what-if shows
    /// what the queue would say; the queue itself stops at the first rejection).
    pub fn pre_enqueue_verdicts(
        &self,
        pod: &k8s_openapi::api::core::v1::Pod,
    ) -> Vec<PluginVerdict> {
        self.pre_enqueue
            .iter()
            .filter_map(|p| {
                let pe = p.as_pre_enqueue()?;
                Some(verdict(p.name(), &pe.pre_enqueue(pod)))
            })
            .collect()
    }

    /// Each Permit plugin's own verdict for `pod` on `node`, for a what-if: `state` must be
    /// a dry run's, so that no plugin allows a waiting pod; nothing is assumed.
    pub fn permit_verdicts(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &str,
    ) -> Vec<PluginVerdict> {
        debug_assert!(state.is_dry_run());
        self.permit
            .iter()
            .filter_map(|p| {
                let pm = p.as_permit()?;
                Some(verdict(p.name(), &pm.permit(state, pod, node).0))
            })
            .collect()
    }

    /// The nodes PreFilter allows (None: all) and the plugins that narrowed them down.
    fn run_pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        record: &mut CycleRecord,
    ) -> Result<Allowed, Status> {
        let mut allowed: Option<HashSet<String>> = None;
        let mut narrowing: Vec<&'static str> = Vec::new();
        for p in &self.pre_filter {
            let Some(pf) = p.as_pre_filter() else {
                continue;
            };
            let t = Instant::now();
            let (result, status) = pf.pre_filter(state, pod, snapshot);
            observe(state, p.name(), "PreFilter", &status, t);
            record.pre_filter.push(verdict(p.name(), &status));
            if status.is_skip() {
                state.skip_filter(p.name());
                continue;
            }
            record.evaluations.push(("PreFilter", p.name(), 1));
            if !status.is_success() {
                return Err(status.with_plugin(p.name()));
            }
            if let Some(nodes) = result {
                narrowing.push(p.name());
                allowed = Some(match allowed {
                    Some(prev) => prev.intersection(&nodes).cloned().collect(),
                    None => nodes,
                });
                if allowed.as_ref().is_some_and(|a| a.is_empty()) {
                    // kube's wording: one plugin, or several (sorted) "simultaneously".
                    narrowing.sort_unstable();
                    let msg = match narrowing.as_slice() {
                        [one] => format!("node(s) didn't satisfy plugin {one}"),
                        many => format!(
                            "node(s) didn't satisfy plugin(s) [{}] simultaneously",
                            many.join(" ")
                        ),
                    };
                    return Err(Status::unresolvable(msg).with_plugin(p.name()));
                }
            }
        }
        Ok(allowed.map(|a| (a, narrowing)))
    }

    /// Runs the filters on one node, the pods nominated to it counted (kube's
    /// RunFilterPluginsWithNominatedPods): the first rejection, or Success; with
    /// `record_all`, every filter runs and each verdict is returned.
    pub(crate) fn run_filters(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        record_all: bool,
    ) -> (Status, Vec<PluginVerdict>) {
        let active = self.active_filters(state);
        let nominated = self.nominator.nominated_pods();
        let eligible = eligible_nominated(&nominated, pod, &node.name);
        let out = self.filter_node(&active, &eligible, state, pod, node, record_all, true);
        observe_timings("Filter", out.timings);
        (out.status, out.verdicts)
    }

    /// kube's `addGENominatedPods`: the state and node with `nominated` added, told to
    /// the PreFilter extensions as pods on that node.
    fn with_nominated(
        &self,
        nominated: &[Arc<PodInfo>],
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> Result<(CycleState, NodeInfo), Status> {
        let mut state = state.clone();
        let mut node = node.clone();
        for other in nominated {
            node.add_pod(other.clone());
            let s = self.run_pre_filter_extension(&mut state, pod, other, &node, true);
            if !s.is_success() {
                return Err(Status::error(format!(
                    "adding nominated pod {} to node {}: {}",
                    other.key,
                    node.name,
                    s.message()
                ))
                .with_plugin(s.plugin));
            }
        }
        Ok((state, node))
    }

    /// The filters on one node. With nominated pods, as kube: once with them added and,
    /// when that passes, once without (a pod may depend on nominated pods that have not
    /// arrived yet, as with pod affinity); a plugin's recorded verdict is its rejection
    /// with them, else its verdict without. `full`: every verdict and timing kept.
    #[allow(clippy::too_many_arguments)]
    fn filter_node(
        &self,
        active: &[(&'static str, &dyn super::FilterPlugin)],
        nominated: &[Arc<PodInfo>],
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        record_all: bool,
        full: bool,
    ) -> NodeFiltered {
        let plain = |state: &CycleState, node: &NodeInfo| {
            if full || record_all {
                self.run_active_filters(active, state, pod, node, record_all)
            } else {
                let (status, calls) = self.first_rejection(active, state, pod, node);
                (
                    status.unwrap_or_else(Status::success),
                    Vec::new(),
                    Timings::new(),
                    calls,
                )
            }
        };
        if nominated.is_empty() {
            let (status, verdicts, timings, calls) = plain(state, node);
            return NodeFiltered {
                status,
                verdicts,
                timings,
                counted: Vec::new(),
                calls: [calls, 0],
            };
        }
        let mut counted: Vec<String> = nominated.iter().map(|p| p.key.clone()).collect();
        counted.sort_unstable();
        let (with_state, with_node) = match self.with_nominated(nominated, state, pod, node) {
            Ok(v) => v,
            Err(status) => {
                return NodeFiltered {
                    status,
                    verdicts: Vec::new(),
                    timings: Timings::new(),
                    counted,
                    calls: [0, 0],
                };
            }
        };
        let (first, with, mut timings, calls_with) = plain(&with_state, &with_node);
        let rejected_with = !first.is_success();
        if rejected_with && (!record_all || first.code == Code::Error) {
            return NodeFiltered {
                status: first,
                verdicts: with,
                timings,
                counted,
                calls: [calls_with, 0],
            };
        }
        let (second, without, more, calls_without) = plain(state, node);
        timings.extend(more);
        let verdicts = with
            .into_iter()
            .zip(without)
            .map(|(w, wo)| if passes(&w.code) { wo } else { w })
            .collect();
        NodeFiltered {
            status: if rejected_with { first } else { second },
            verdicts,
            timings,
            counted,
            calls: [calls_with, calls_without],
        }
    }

    /// The filter plugins not skipped by their PreFilter, resolved once per cycle.
    fn active_filters(&self, state: &CycleState) -> Vec<(&'static str, &dyn super::FilterPlugin)> {
        self.filter
            .iter()
            .filter(|p| !state.skips_filter(p.name()))
            .filter_map(|p| p.as_filter().map(|f| (p.name(), f)))
            .collect()
    }

    /// The common case of `run_active_filters` (no verdicts, no timings) without its
    /// bookkeeping: the first rejection, if any, and how many filters ran.
    fn first_rejection(
        &self,
        active: &[(&'static str, &dyn super::FilterPlugin)],
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> (Option<Status>, usize) {
        for (i, &(name, f)) in active.iter().enumerate() {
            let s = f.filter(state, pod, node);
            if !s.is_success() {
                return (Some(s.with_plugin(name)), i + 1);
            }
        }
        (None, active.len())
    }

    fn run_active_filters(
        &self,
        active: &[(&'static str, &dyn super::FilterPlugin)],
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        record_all: bool,
    ) -> (Status, Vec<PluginVerdict>, Timings, usize) {
        let mut verdicts = Vec::new();
        let mut first_failure: Option<Status> = None;
        let mut calls = 0;
        // One clock read per call: each call ends where the next starts (the reads were
        // most of a sampled cycle's extra cost).
        let mut last = state.should_record_plugin_metrics().then(Instant::now);
        let mut timings = Timings::new();
        for &(name, f) in active {
            let s = f.filter(state, pod, node);
            calls += 1;
            if let Some(t) = last.as_mut() {
                let now = Instant::now();
                timings.push((name, s.code, (now - *t).as_secs_f64()));
                *t = now;
            }
            if record_all {
                verdicts.push(verdict(name, &s));
            }
            if !s.is_success() && first_failure.is_none() {
                first_failure = Some(s.with_plugin(name));
                if !record_all {
                    break;
                }
            }
        }
        (
            first_failure.unwrap_or_else(Status::success),
            verdicts,
            timings,
            calls,
        )
    }

    pub fn has_post_filter(&self) -> bool {
        !self.post_filter.is_empty()
    }

    /// kube's RunPostFilterPlugins: the first success wins; an unresolvable or error
    /// status ends it; otherwise every plugin's reasons are kept, in order.
    pub fn run_post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        statuses: &NodeStatuses,
    ) -> (PostFilterResult, Status) {
        let mut reasons = Vec::new();
        let mut rejector: &'static str = "";
        // The last rejecting plugin's result that changes the nomination, as kube.
        let mut kept = PostFilterResult::default();
        for p in &self.post_filter {
            let Some(pf) = p.as_post_filter() else {
                continue;
            };
            let t = Instant::now();
            let (result, s) = pf.post_filter(self, state, pod, snapshot, statuses);
            observe(state, p.name(), "PostFilter", &s, t);
            if s.is_success() || s.code == Code::UnschedulableAndUnresolvable || !s.is_rejected() {
                return (result, s.with_plugin(p.name()));
            }
            if result.clears_nomination || result.nominated_node.is_some() {
                kept = result;
            }
            reasons.extend(s.reasons);
            if rejector.is_empty() {
                rejector = p.name();
            }
        }
        (
            kept,
            Status::new(Code::Unschedulable, reasons).with_plugin(rejector),
        )
    }

    /// Runs PreFilter extensions as if `other` joined (`add`) or left a node: preemption's
    /// what-if.
    pub(crate) fn run_pre_filter_extension(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
        add: bool,
    ) -> Status {
        for p in &self.pre_filter {
            if state.skips_filter(p.name()) {
                continue;
            }
            let Some(pf) = p.as_pre_filter() else {
                continue;
            };
            let t = Instant::now();
            let (s, point) = if add {
                (
                    pf.add_pod(state, pod, other, node),
                    "PreFilterExtensionAddPod",
                )
            } else {
                (
                    pf.remove_pod(state, pod, other, node),
                    "PreFilterExtensionRemovePod",
                )
            };
            observe(state, p.name(), point, &s, t);
            if !s.is_success() {
                return s.with_plugin(p.name());
            }
        }
        Status::success()
    }

    pub fn run_reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        for p in &self.reserve {
            let Some(r) = p.as_reserve() else { continue };
            let t = Instant::now();
            let s = r.reserve(state, pod, node);
            observe(state, p.name(), "Reserve", &s, t);
            if !s.is_success() {
                return s.with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// Unreserve runs on every Reserve plugin, in reverse order.
    pub fn run_unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) {
        for p in self.reserve.iter().rev() {
            if let Some(r) = p.as_reserve() {
                let t = Instant::now();
                r.unreserve(state, pod, node);
                observe(state, p.name(), "Unreserve", &Status::success(), t);
            }
        }
    }

    /// kube's RunPermitPlugins: a rejection or error ends it; otherwise the plugins that
    /// asked to wait, each with its timeout (at most 15 minutes), and a Wait status.
    pub fn run_permit(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &str,
    ) -> (Status, Vec<(&'static str, Duration)>) {
        let mut waits = Vec::new();
        let mut wait_status = None;
        for p in &self.permit {
            let Some(pm) = p.as_permit() else { continue };
            let t = Instant::now();
            let (s, timeout) = pm.permit(state, pod, node);
            observe(state, p.name(), "Permit", &s, t);
            match s.code {
                Code::Success | Code::Skip => {}
                Code::Wait => {
                    waits.push((p.name(), timeout.min(MAX_WAIT)));
                    wait_status = Some(s);
                }
                _ if s.is_rejected() => return (s.with_plugin(p.name()), Vec::new()),
                _ => {
                    let msg = format!("running Permit plugin {:?}: {}", p.name(), s.message());
                    return (Status::error(msg).with_plugin(p.name()), Vec::new());
                }
            }
        }
        // kube's: the last waiting plugin's status, with its own reason after.
        let Some(mut wait) = wait_status else {
            return (Status::success(), waits);
        };
        wait.reasons
            .push("one or more plugins asked to wait and no plugin rejected pod".into());
        (wait, waits)
    }

    /// Parks a pod whose Permit said Wait until `wait_on_permit` learns the verdict.
    pub fn add_waiting_pod(
        &self,
        pod: Arc<PodInfo>,
        node: &str,
        waits: &[(&'static str, Duration)],
    ) {
        self.waiting_pods.add(pod, node, waits);
    }

    /// kube's WaitOnPermit: success at once unless the pod is waiting.
    pub async fn wait_on_permit(&self, pod: &PodInfo) -> Status {
        self.waiting_pods.wait_on_permit(&pod.uid).await
    }

    pub async fn run_pre_bind(
        &self,
        ctx: &BindContext,
        state: &CycleState,
        pod: &PodInfo,
        node: &str,
    ) -> Status {
        for p in &self.pre_bind {
            let Some(pb) = p.as_pre_bind() else { continue };
            let t = Instant::now();
            let s = pb.pre_bind(ctx, state, pod, node).await;
            observe(state, p.name(), "PreBind", &s, t);
            if !s.is_success() && !s.is_skip() {
                return s.with_plugin(p.name());
            }
        }
        Status::success()
    }

    pub async fn run_bind(
        &self,
        ctx: &BindContext,
        state: &CycleState,
        pod: &PodInfo,
        node: &str,
    ) -> Status {
        for p in &self.bind {
            let Some(b) = p.as_bind() else { continue };
            let t = Instant::now();
            let s = b.bind(ctx, state, pod, node).await;
            observe(state, p.name(), "Bind", &s, t);
            if s.is_skip() {
                continue;
            }
            return s.with_plugin(p.name());
        }
        Status::error("no bind plugin bound the pod")
    }

    pub fn run_post_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) {
        for p in &self.post_bind {
            if let Some(pb) = p.as_post_bind() {
                let t = Instant::now();
                pb.post_bind(state, pod, node);
                observe(state, p.name(), "PostBind", &Status::success(), t);
            }
        }
    }
}

/// scheduler_plugin_execution_duration_seconds for one call, in sampled cycles only.
fn observe(state: &CycleState, plugin: &str, point: &str, s: &Status, started: Instant) {
    if !state.should_record_plugin_metrics() {
        return;
    }
    crate::metrics::global().plugin(
        plugin,
        point,
        &s.code.to_string(),
        started.elapsed().as_secs_f64(),
    );
}

/// Per-call plugin timings of a sampled cycle: plugin, code, seconds.
type Timings = Vec<(&'static str, Code, f64)>;

/// One node's Filter outcome.
struct NodeFiltered {
    status: Status,
    verdicts: Vec<PluginVerdict>,
    timings: Timings,
    /// The nominated pods counted on the node.
    counted: Vec<String>,
    /// How many filters ran in the pass with the nominated pods (or the only pass) and
    /// in the pass without them (0: not run).
    calls: [usize; 2],
}

fn passes(code: &str) -> bool {
    code == "Success" || code == "Skip"
}

/// The pods nominated to `node` that Filter counts for `pod`: of its priority or higher,
/// and not the pod itself (kube's addGENominatedPods).
fn eligible_nominated(nominated: &NominatedPods, pod: &PodInfo, node: &str) -> Vec<Arc<PodInfo>> {
    let Some(pods) = nominated.get(node) else {
        return Vec::new();
    };
    pods.iter()
        .filter(|p| p.priority() >= pod.priority())
        .filter(|p| {
            // A pod without a UID (a what-if) is itself when its name is.
            if p.uid.is_empty() || pod.uid.is_empty() {
                p.key != pod.key
            } else {
                p.uid != pod.uid
            }
        })
        .cloned()
        .collect()
}

/// Records many calls' timings, one label lookup per plugin and code.
fn observe_timings(point: &str, timings: Timings) {
    // A cycle's few plugins and codes: a list beats hashing each of thousands of calls.
    let mut grouped: Vec<((&'static str, Code), Vec<f64>)> = Vec::new();
    for (plugin, code, secs) in timings {
        match grouped
            .iter_mut()
            .find(|((p, c), _)| *c == code && *p == plugin)
        {
            Some((_, all)) => all.push(secs),
            None => grouped.push(((plugin, code), vec![secs])),
        }
    }
    let metrics = crate::metrics::global();
    for ((plugin, code), secs) in grouped {
        metrics.plugin_many(plugin, point, &code.to_string(), &secs);
    }
}

#[cfg(test)]
mod tests {
    use super::node_search::select_host;
    use super::*;
    use crate::snapshot::NodeList;

    #[test]
    fn select_host_picks_the_best_and_breaks_ties_uniformly() {
        let nodes = NodeList::from_nodes(
            ["a", "b", "c", "d"]
                .iter()
                .map(|n| Arc::new(crate::plugins::testing::node_with(n, |_| {})))
                .collect(),
        );
        assert_eq!(select_host(&nodes, &[1, 9, 3, 2]), "b");
        let mut counts: HashMap<String, usize> = HashMap::new();
        for _ in 0..3000 {
            *counts
                .entry(select_host(&nodes, &[7, 2, 7, 7]))
                .or_default() += 1;
        }
        assert!(!counts.contains_key("b"), "{counts:?}");
        // Each of the three tied nodes expects 1000; 800 is more than 10 standard deviations off.
        for n in ["a", "c", "d"] {
            assert!(counts.get(n).copied().unwrap_or(0) > 800, "{counts:?}");
        }
    }

    #[test]
    fn feasible_nodes_to_find_follows_kube_scheduler() {
        assert_eq!(num_feasible_nodes_to_find(None, 50), 50);
        assert_eq!(num_feasible_nodes_to_find(None, 100), 100);
        assert_eq!(num_feasible_nodes_to_find(None, 1000), 420);
        assert_eq!(num_feasible_nodes_to_find(None, 5000), 500);
        assert_eq!(num_feasible_nodes_to_find(None, 6000), 300);
        assert_eq!(num_feasible_nodes_to_find(Some(100), 5000), 5000);
        assert_eq!(num_feasible_nodes_to_find(Some(1), 5000), 100);
        assert_eq!(num_feasible_nodes_to_find(Some(30), 1000), 300);
    }

    /// A Permit plugin answering `code` with `timeout`.
    struct FixedPermit(&'static str, Code, Duration);

    impl Plugin for FixedPermit {
        fn name(&self) -> &'static str {
            self.0
        }
        fn as_permit(&self) -> Option<&dyn super::super::PermitPlugin> {
            Some(self)
        }
    }

    impl super::super::PermitPlugin for FixedPermit {
        fn permit(&self, _: &CycleState, _: &PodInfo, _: &str) -> (Status, Duration) {
            (Status::new(self.1, vec!["said so".into()]), self.2)
        }
    }

    fn with_permits(permits: Vec<FixedPermit>) -> Framework {
        let mut plugins = crate::plugins::default_registry();
        let mut spec = ProfileSpec {
            scheduler_name: "test".into(),
            queue_sort: vec!["PrioritySort".into()],
            bind: vec!["DefaultBinder".into()],
            ..Default::default()
        };
        for p in permits {
            spec.permit.push(p.0.into());
            plugins.insert(p.0.into(), Arc::new(p));
        }
        match Framework::new(&spec, &plugins, 1) {
            Ok(fw) => fw,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn permit_waits_rejections_and_errors_as_kube() {
        let pod = crate::plugins::testing::pod_with(|_| {});
        let state = CycleState::new();
        let hour = Duration::from_secs(3600);
        let fw = with_permits(vec![
            FixedPermit("A", Code::Wait, Duration::from_secs(5)),
            FixedPermit("B", Code::Success, Duration::ZERO),
            FixedPermit("C", Code::Wait, hour),
        ]);
        let (s, waits) = fw.run_permit(&state, &pod, "n1");
        assert_eq!(s.code, Code::Wait);
        // kube's: the last waiting plugin's status, its own reason after.
        assert_eq!(
            s.message(),
            "said so, one or more plugins asked to wait and no plugin rejected pod"
        );
        // No plugin may hold a pod beyond 15 minutes.
        assert_eq!(waits, vec![("A", Duration::from_secs(5)), ("C", MAX_WAIT)]);

        let fw = with_permits(vec![
            FixedPermit("A", Code::Wait, hour),
            FixedPermit("R", Code::Unschedulable, Duration::ZERO),
        ]);
        let (s, waits) = fw.run_permit(&state, &pod, "n1");
        assert_eq!(
            (s.code, s.plugin, s.message()),
            (Code::Unschedulable, "R", "said so".into())
        );
        assert!(waits.is_empty());

        let fw = with_permits(vec![FixedPermit("E", Code::Error, Duration::ZERO)]);
        let (s, _) = fw.run_permit(&state, &pod, "n1");
        assert_eq!((s.code, s.plugin), (Code::Error, "E"));
        assert_eq!(s.message(), "running Permit plugin \"E\": said so");

        let fw = with_permits(vec![FixedPermit("S", Code::Success, Duration::ZERO)]);
        assert!(fw.run_permit(&state, &pod, "n1").0.is_success());
    }

    /// A filter and score plugin that accepts every node, under a name no other test uses
    /// so its series in the global registry are this test's own.
    struct Sampled;

    const SAMPLED: &str = "SampledTimings";

    impl Plugin for Sampled {
        fn name(&self) -> &'static str {
            SAMPLED
        }
        fn as_filter(&self) -> Option<&dyn super::super::FilterPlugin> {
            Some(self)
        }
        fn as_score(&self) -> Option<&dyn super::super::ScorePlugin> {
            Some(self)
        }
    }

    impl super::super::FilterPlugin for Sampled {
        fn filter(&self, _: &CycleState, _: &PodInfo, _: &NodeInfo) -> Status {
            Status::success()
        }
    }

    impl super::super::ScorePlugin for Sampled {
        fn score(&self, _: &CycleState, _: &PodInfo, _: &NodeInfo) -> Result<i64, Status> {
            Ok(1)
        }
    }

    fn count(point: &str) -> u64 {
        let name = format!(
            "scheduler_plugin_execution_duration_seconds_count{{plugin=\"{SAMPLED}\",extension_point=\"{point}\",status=\"Success\"}} "
        );
        crate::metrics::global()
            .encode()
            .lines()
            .find_map(|l| l.strip_prefix(name.as_str()).and_then(|n| n.parse().ok()))
            .unwrap_or(0)
    }

    #[test]
    fn plugin_timings_only_in_sampled_cycles_explanations_always() {
        use crate::plugins::testing::{node_with, pod_with};
        use rand::SeedableRng;
        let mut plugins = crate::plugins::default_registry();
        plugins.insert(SAMPLED.into(), Arc::new(Sampled));
        let spec = ProfileSpec {
            scheduler_name: "test".into(),
            queue_sort: vec!["PrioritySort".into()],
            filter: vec![SAMPLED.into()],
            score: vec![(SAMPLED.into(), 1)],
            bind: vec!["DefaultBinder".into()],
            ..Default::default()
        };
        let fw = match Framework::new(&spec, &plugins, 1) {
            Ok(fw) => fw,
            Err(e) => panic!("{e}"),
        };
        let nodes = ["a", "b", "c"].map(|n| Arc::new(node_with(n, |_| {})));
        let snapshot = Snapshot::from_nodes(nodes.to_vec());
        let pod = pod_with(|_| {});
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let cycles = 500;
        let mut sampled = 0;
        for _ in 0..cycles {
            let mut state = CycleState::new();
            let sample = crate::metrics::sample_plugin_metrics(&mut rng);
            sampled += u64::from(sample);
            state.set_record_plugin_metrics(sample);
            let mut record = CycleRecord::default();
            assert!(
                fw.schedule(&mut state, &pod, &snapshot, &mut record, false)
                    .is_ok()
            );
            let points: Vec<&str> = record
                .durations
                .iter()
                .map(|d| d.extension_point.as_str())
                .collect();
            assert_eq!(points, ["PreFilter", "Filter", "Score"]);
        }
        assert!(
            (30..=70).contains(&sampled),
            "{sampled} of {cycles} sampled"
        );
        // Every Filter and Score call of a sampled cycle, one per node.
        assert_eq!(count("Filter"), sampled * 3);
        assert_eq!(count("Score"), sampled * 3);
    }

    #[test]
    fn plugin_evaluations_count_each_call_sampled_or_not() {
        use crate::plugins::testing::{node_with, pod_with};
        let spec = match crate::config_bridge::default_spec("test") {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        };
        let fw = match Framework::new(&spec, &crate::plugins::default_registry(), 1) {
            Ok(fw) => fw,
            Err(e) => panic!("{e}"),
        };
        let mut nodes: Vec<_> = ["a", "b", "c"]
            .map(|n| Arc::new(node_with(n, |_| {})))
            .to_vec();
        nodes.push(Arc::new(node_with("cordoned", |n| {
            n.spec.get_or_insert_default().unschedulable = Some(true);
        })));
        let snapshot = Snapshot::from_nodes(nodes);
        let pod = pod_with(|_| {});
        let mut seen = Vec::new();
        for sampled in [false, true] {
            let mut state = CycleState::new();
            state.set_record_plugin_metrics(sampled);
            let mut record = CycleRecord::default();
            assert!(
                fw.schedule(&mut state, &pod, &snapshot, &mut record, false)
                    .is_ok()
            );
            let count = |point: &str, plugin: &str| {
                record
                    .evaluations
                    .iter()
                    .filter(|e| e.0 == point && e.1 == plugin)
                    .map(|e| e.2)
                    .sum::<u64>()
            };
            // NodeName, the first filter, and NodeUnschedulable, the second, ran on all
            // four nodes, and the latter stopped the cordoned one: every later filter
            // ran on three.
            assert_eq!(
                record.filter_plugins[..2],
                ["NodeName", "NodeUnschedulable"]
            );
            assert_eq!(count("Filter", "NodeName"), 4);
            assert_eq!(count("Filter", "NodeUnschedulable"), 4);
            for plugin in &record.filter_plugins[2..] {
                assert_eq!(count("Filter", plugin), 3, "{plugin}");
            }
            assert!(!record.scores.is_empty());
            for column in &record.scores {
                assert_eq!(count("Score", column.plugin), 3, "{}", column.plugin);
            }
            // PreFilter once per plugin that did not skip, skipped ones not at all.
            for v in &record.pre_filter {
                let want = u64::from(v.code != "Skip");
                assert_eq!(count("PreFilter", &v.plugin), want, "{}", v.plugin);
            }
            let mut evaluations = record.evaluations.clone();
            evaluations.sort_unstable();
            seen.push(evaluations);
        }
        assert_eq!(seen[0], seen[1]);
    }

    /// Accepts every node; scores virtual nodes 100 and host nodes 0, as a policy or
    /// profile that prefers a leaf does.
    struct PrefersLeaves;

    impl Plugin for PrefersLeaves {
        fn name(&self) -> &'static str {
            "PrefersLeaves"
        }
        fn as_filter(&self) -> Option<&dyn super::super::FilterPlugin> {
            Some(self)
        }
        fn as_score(&self) -> Option<&dyn super::super::ScorePlugin> {
            Some(self)
        }
    }

    impl super::super::FilterPlugin for PrefersLeaves {
        fn filter(&self, _: &CycleState, _: &PodInfo, _: &NodeInfo) -> Status {
            Status::success()
        }
    }

    impl super::super::ScorePlugin for PrefersLeaves {
        fn score(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
            Ok(if node.cluster.is_some() { 100 } else { 0 })
        }
    }

    #[test]
    fn sampling_bounds_host_nodes_and_weighs_every_virtual_node() {
        use crate::plugins::testing::{node_with, pod_with};
        let mut plugins = crate::plugins::default_registry();
        plugins.insert("PrefersLeaves".into(), Arc::new(PrefersLeaves));
        let spec = ProfileSpec {
            scheduler_name: "test".into(),
            queue_sort: vec!["PrioritySort".into()],
            filter: vec!["PrefersLeaves".into()],
            score: vec![("PrefersLeaves".into(), 1)],
            bind: vec!["DefaultBinder".into()],
            ..Default::default()
        };
        let pod = pod_with(|_| {});
        for hosts in [400, 1000] {
            let fw = match Framework::new(&spec, &plugins, 1) {
                Ok(fw) => fw,
                Err(e) => panic!("{e}"),
            };
            let mut nodes: Vec<_> = (0..hosts)
                .map(|i| Arc::new(node_with(&format!("host-{i}"), |_| {})))
                .collect();
            // The virtual nodes among the host nodes, not at the end: where the rotation
            // starts must not matter wherever they sit.
            for (at, leaf) in [(hosts / 3, "east"), (hosts - 1, "west")] {
                let vn = node_with(&format!("mcsched-{leaf}"), |n| {
                    n.metadata
                        .labels
                        .get_or_insert_default()
                        .insert(mcsched_shared::keys::CLUSTER_LABEL.into(), leaf.into());
                });
                nodes.insert(at, Arc::new(vn));
            }
            let snapshot = Snapshot::from_nodes(nodes);
            assert_eq!(snapshot.virtual_nodes, 2);
            let host_share = num_feasible_nodes_to_find(None, hosts);
            assert!(host_share < hosts);
            for cycle in 0..12 {
                let mut state = CycleState::new();
                let mut record = CycleRecord::default();
                let result = match fw.schedule(&mut state, &pod, &snapshot, &mut record, false) {
                    Ok(r) => r,
                    Err(e) => panic!("{hosts} hosts, cycle {cycle}: {e:?}"),
                };
                assert!(
                    result.node.starts_with("mcsched-"),
                    "{hosts} hosts, cycle {cycle}: went to {}",
                    result.node
                );
                assert_eq!(record.num_evaluated_virtual, 2, "cycle {cycle}");
                assert_eq!(record.num_evaluated, host_share + 2, "cycle {cycle}");
                assert_eq!(record.num_feasible, host_share + 2, "cycle {cycle}");
            }
        }
        // Without virtual nodes the search is kube-scheduler's, unchanged.
        let fw = match Framework::new(&spec, &plugins, 1) {
            Ok(fw) => fw,
            Err(e) => panic!("{e}"),
        };
        let snapshot = Snapshot::from_nodes(
            (0..400)
                .map(|i| Arc::new(node_with(&format!("host-{i}"), |_| {})))
                .collect(),
        );
        let mut record = CycleRecord::default();
        let mut state = CycleState::new();
        assert!(
            fw.schedule(&mut state, &pod, &snapshot, &mut record, false)
                .is_ok()
        );
        assert_eq!(record.num_evaluated, num_feasible_nodes_to_find(None, 400));
        assert_eq!(record.num_evaluated_virtual, 0);
    }
}
