//! DynamicResources (kube-scheduler's `dynamicresources`, v1.37): a pod's ResourceClaims
//! must exist (PreEnqueue), be allocatable on the node from its ResourceSlices by the
//! structured-parameters allocator (Filter), or, when allocated already, be available on
//! it; Reserve holds the chosen allocation in memory (in flight, so the next pod does
//! not get the same devices) and PreBind writes it with the pod's reservation into the
//! claim's status. Score prefers the nodes where prioritized lists (`firstAvailable`) got
//! their earlier subrequests. A pod without claims makes every point step aside.
//!
//! A virtual node passes Filter when none of the pod's claims is allocated in the host:
//! the leaf check (LeafNodeFit) runs this plugin on the leaf's own nodes, with the
//! copy's claims as the leaf will hold them ([`GivenClaims`]), and the leaf's scheduler
//! allocates them there; nothing is allocated or written in the host for it.
//!
//! Extended resources backed by DRA ([`extended`]): a pod's plain `example.com/gpu`
//! request that a DeviceClass serves is met, on nodes whose allocatable lacks it, by a
//! claim the scheduler makes itself: allocated in Filter with the pod's other claims,
//! held in flight by Reserve, created with its allocation and the pod's reservation by
//! PreBind, which records it in the pod's `status.extendedResourceClaimStatus`, and
//! deleted again by Unreserve.
//!
//! Not here yet: PodGroup-owned claims (off by default in v1.37),
//! PodGroupPostFilter's deallocation of the claims a group's members hold, and an event
//! while binding conditions are waited for.

mod bind;
mod claims;
mod deallocate;
mod extended;
#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::NodeSelector;
use k8s_openapi::api::resource::v1::{AllocationResult, DeviceClass, ResourceClaim, ResourceSlice};
use mcsched_dra::{AllocateError, AllocatedState, Allocator, CelCache, Features};
use mcsched_shared::selectors;

use crate::dra_state::{GIVEN_CLAIMS_KEY, GivenClaims, ResourceClaims, allocation_of};
use crate::framework::{
    BindContext, ClusterEvent, Code, CycleState, FilterPlugin, Framework, NodeStatuses, Plugin,
    PodGroupPostFilterPlugin, PodGroupRelief, PostFilterPlugin, PostFilterResult, PreBindPlugin,
    PreEnqueuePlugin, PreFilterPlugin, PreFilterResult, PreScorePlugin, ReservePlugin, ScorePlugin,
    Status,
};
use crate::snapshot::{NodeInfo, NodeList, PodInfo, Snapshot};

pub(crate) const NAME: &str = "DynamicResources";
/// CycleState's error for a key nothing wrote, in kube's words.
pub(crate) const REASON_NO_STATE: &str = "not found";
pub(crate) const REASON_NOT_AVAILABLE: &str = "resourceclaim not available on the node";
pub(crate) const REASON_CANNOT_ALLOCATE: &str = "cannot allocate all claims";
pub(crate) const REASON_DEALLOCATED: &str = "deallocation of ResourceClaim completed";
/// A claim allocated in the host holds host devices, which no leaf node can reach.
pub(crate) const REASON_ALLOCATED_IN_HOST: &str =
    "resourceclaim is allocated in the host cluster: a leaf cluster's nodes cannot use its devices";
const STATE_KEY: &str = "PreFilterDynamicResources";
/// kube keeps the 10 most recently compiled CEL expressions.
const CEL_CACHE_ENTRIES: usize = 10;
/// kube's `resourceapi.FirstAvailableDeviceRequestMaxSize`.
const FIRST_AVAILABLE_MAX: i64 = 8;

/// DynamicResourcesArgs, v1.37's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DynamicResourcesArgs {
    pub(crate) filter_timeout: Duration,
    pub(crate) binding_timeout: Duration,
}

impl Default for DynamicResourcesArgs {
    fn default() -> Self {
        DynamicResourcesArgs {
            filter_timeout: Duration::from_secs(10),
            binding_timeout: Duration::from_secs(600),
        }
    }
}

/// One of the pod's claims as the cycle sees it (kube's `informationForClaim`).
#[derive(Debug, Clone)]
struct ClaimSlot {
    claim: Arc<ResourceClaim>,
    /// Where an allocated claim's devices are; None: everywhere, or not allocated.
    available_on: Option<NodeSelector>,
    /// Set by Reserve: what PreBind writes.
    allocation: Option<AllocationResult>,
}

/// What PreFilter found, shared by the cycle's later points (kube's `stateData`, a
/// pointer there too: preemption's copies of the state share it).
#[derive(Clone, Default)]
struct State {
    slots: Arc<Vec<ClaimSlot>>,
    allocator: Option<Arc<Allocator>>,
    /// Indices of allocated claims not available on some node, for PostFilter.
    unavailable: Arc<Mutex<BTreeSet<usize>>>,
    /// Filter's allocations per node, in the order of the claims to allocate.
    by_node: Arc<Mutex<HashMap<String, Vec<AllocationResult>>>>,
    /// The claims as PreBind wrote them (index → claim), for Unreserve; and the client
    /// it wrote with.
    written: Arc<Mutex<HashMap<usize, Arc<ResourceClaim>>>>,
    bind_ctx: Arc<Mutex<Option<BindContext>>>,
    /// Virtual nodes Filter passed: their leaf allocates, so Reserve and PreBind leave
    /// the host's claims alone there.
    virtual_nodes: Arc<Mutex<BTreeSet<String>>>,
    /// The pod's claim for extended resources backed by DRA, when a class serves one.
    extended: Option<Arc<extended::Extended>>,
    /// Filter's extended-resource claim per node, with its allocation.
    extended_by_node: Arc<Mutex<HashMap<String, extended::NodeExtended>>>,
    /// Reserve's pick of those, for PreBind.
    extended_reserved: Option<extended::NodeExtended>,
    /// The extended-resource claim as PreBind created and wrote it, for Unreserve to
    /// delete.
    extended_created: Arc<Mutex<Option<Arc<ResourceClaim>>>>,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) struct DynamicResources {
    args: DynamicResourcesArgs,
    claims: Arc<ResourceClaims>,
    cel: Arc<CelCache>,
}

impl DynamicResources {
    pub(crate) fn new(args: DynamicResourcesArgs, claims: Arc<ResourceClaims>) -> Self {
        DynamicResources {
            args,
            claims,
            cel: Arc::new(CelCache::new(CEL_CACHE_ENTRIES)),
        }
    }

    /// What holds devices now: allocated claims (as assumed) and allocations in flight.
    fn allocated_state(claims: &ResourceClaims) -> AllocatedState {
        let mut state = AllocatedState::default();
        claims.for_each_allocation(|a| state.add_allocation(a));
        state
    }
}

/// The pod's unallocated claims as Filter's allocation on `node` would leave them (with
/// `status.allocation` set), in the claims' order; empty when Filter allocated nothing
/// there. The leaf check holds them in the leaf once the pod is sent there.
pub(crate) fn allocated_on(state: &CycleState, node: &str) -> Vec<Arc<ResourceClaim>> {
    let Some(s) = state.read::<State>(STATE_KEY) else {
        return Vec::new();
    };
    let by_node = locked(&s.by_node);
    let Some(allocations) = by_node.get(node) else {
        return Vec::new();
    };
    let unallocated = s
        .slots
        .iter()
        .filter(|slot| allocation_of(&slot.claim).is_none());
    unallocated
        .zip(allocations)
        .map(|(slot, a)| {
            let mut claim = (*slot.claim).clone();
            claim.status.get_or_insert_default().allocation = Some(a.clone());
            Arc::new(claim)
        })
        .collect()
}

/// The devices allocated claims give each request, as
/// `claim namespace/name, request R: device driver/pool/device`: what `explain` names for
/// a leaf node.
pub(crate) fn devices_of(claims: &[Arc<ResourceClaim>]) -> Vec<String> {
    (claims.iter())
        .filter_map(|c| allocation_of(c).map(|a| (claims::kobj(c), a)))
        .flat_map(|(claim, a)| {
            (a.devices.iter())
                .flat_map(|d| d.results.iter().flatten())
                .map(move |r| {
                    format!(
                        "claim {claim}, request {}: device {}/{}/{}",
                        r.request, r.driver, r.pool, r.device
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// kube's `validateDeviceClass`.
fn check_class(
    classes: &HashMap<String, Arc<DeviceClass>>,
    class: &str,
    request: &str,
) -> Option<Status> {
    if class.is_empty() {
        return Some(Status::error(format!(
            "request {request}: unsupported request type"
        )));
    }
    (!classes.contains_key(class)).then(|| {
        Status::unresolvable(format!(
            "request {request}: device class {class} does not exist"
        ))
    })
}

/// Every request of an unallocated claim names a class that exists.
fn check_requests(
    claim: &ResourceClaim,
    classes: &HashMap<String, Arc<DeviceClass>>,
) -> Option<Status> {
    let requests = claim
        .spec
        .as_ref()
        .and_then(|s| s.devices.as_ref())
        .and_then(|d| d.requests.as_ref());
    for request in requests.into_iter().flatten() {
        if let Some(exactly) = &request.exactly {
            if let Some(s) = check_class(classes, &exactly.device_class_name, &request.name) {
                return Some(s);
            }
        } else if let Some(subs) = request.first_available.as_ref().filter(|s| !s.is_empty()) {
            for sub in subs {
                let name = format!("{}/{}", request.name, sub.name);
                if let Some(s) = check_class(classes, &sub.device_class_name, &name) {
                    return Some(s);
                }
            }
        } else {
            return Some(Status::unresolvable(format!(
                "resource claim {}, request {}: unknown request type",
                claims::kobj(claim),
                request.name
            )));
        }
    }
    None
}

impl Plugin for DynamicResources {
    fn name(&self) -> &'static str {
        NAME
    }
    /// kube's: nodes added or relabelled (a slice or an allocation may select them),
    /// any claim change, classes and slices added or changed.
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::NodeAdd,
            ClusterEvent::NodeUpdate,
            ClusterEvent::ResourceClaimChange,
            ClusterEvent::DeviceClassChange,
            ClusterEvent::ResourceSliceChange,
        ]
    }
    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        Some(self)
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        Some(self)
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        Some(self)
    }
    fn as_pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        Some(self)
    }
    fn as_pod_group_post_filter(&self) -> Option<&dyn PodGroupPostFilterPlugin> {
        Some(self)
    }
}

/// kube's DynamicResources.PodGroupPostFilter deallocates claims the group's members
/// hold; that is not done here yet, so there is nothing it releases.
impl PodGroupPostFilterPlugin for DynamicResources {
    fn relief(&self) -> PodGroupRelief {
        PodGroupRelief::Nothing
    }
}

/// The pod waits until each of its claims exists and is not being deleted.
impl PreEnqueuePlugin for DynamicResources {
    fn pre_enqueue(&self, pod: &k8s_openapi::api::core::v1::Pod) -> Status {
        match claims::pod_claims(pod, &self.claims) {
            Ok(_) => Status::success(),
            Err(reason) => Status::unresolvable(reason),
        }
    }
}

impl PreFilterPlugin for DynamicResources {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        // Written first, as kube's empty stateData: PostFilter tells "no state" apart.
        state.write(STATE_KEY, State::default());
        let object = pod.object();
        let given = state.read::<GivenClaims>(GIVEN_CLAIMS_KEY).cloned();
        let held = given.as_ref().map_or(&self.claims, |g| &g.held);
        let ext = extended::pre_filter(pod, &snapshot.devices, held).map(Arc::new);
        if !claims::has_claims(&object) && ext.is_none() {
            return (None, Status::skip());
        }
        let found = match &given {
            Some(g) => g.claims.clone(),
            None => match claims::pod_claims(&object, &self.claims) {
                Ok(found) => found,
                Err(reason) => return (None, Status::unresolvable(reason)),
            },
        };
        if found.is_empty() && ext.is_none() {
            return (None, Status::skip());
        }
        let classes = &snapshot.devices.classes;
        let mut slots = Vec::with_capacity(found.len());
        let mut to_allocate = 0;
        for claim in found {
            let mut slot = ClaimSlot {
                claim: claim.clone(),
                available_on: None,
                allocation: None,
            };
            match allocation_of(&claim) {
                // kube's CanBeReserved holds for every claim: no "in use" refusal.
                Some(a) => slot.available_on = a.node_selector.clone(),
                None => {
                    to_allocate += 1;
                    let uid = claim.metadata.uid.as_deref().unwrap_or_default();
                    if held.pending_allocation(uid).is_some() {
                        return (
                            None,
                            Status::unresolvable(format!(
                                "resource claim {} is in the process of being allocated",
                                claims::kobj(&claim)
                            )),
                        );
                    }
                    if let Some(s) = check_requests(&claim, classes) {
                        return (None, s);
                    }
                }
            }
            slots.push(slot);
        }
        // The in-memory claim is allocated too; its classes exist (they map it).
        if ext.as_ref().is_some_and(|e| !e.is_stale()) {
            to_allocate += 1;
        }
        let mut s = State {
            slots: Arc::new(slots),
            extended: ext,
            ..State::default()
        };
        if to_allocate > 0 {
            let mut slices: Vec<Arc<ResourceSlice>> =
                snapshot.devices.slices.values().cloned().collect();
            // The allocator's choices follow the slices' order: one order, every cycle.
            slices.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
            match Allocator::new(
                Features::default(),
                Self::allocated_state(held),
                classes,
                &slices,
                self.cel.clone(),
            ) {
                Ok(a) => s.allocator = Some(Arc::new(a)),
                Err(e) => return (None, Status::error(e.to_string())),
            }
        }
        state.write(STATE_KEY, s);
        (None, Status::success())
    }
}

impl FilterPlugin for DynamicResources {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<State>(STATE_KEY) else {
            // A cycle that ran no PreFilter (a preemption dry run of a test): nothing to
            // check for a pod without claims; kube's error for one with claims.
            if !claims::has_claims(&pod.object()) {
                return Status::success();
            }
            return Status::error(REASON_NO_STATE);
        };
        if s.slots.is_empty() && s.extended.is_none() {
            return Status::success();
        }
        if node.cluster.is_some() {
            // As a claim available only elsewhere: PostFilter may deallocate it, and the
            // retry may send it to the leaf unallocated.
            let in_host: Vec<usize> = (s.slots.iter().enumerate())
                .filter(|(_, slot)| allocation_of(&slot.claim).is_some())
                .map(|(i, _)| i)
                .collect();
            if !in_host.is_empty() {
                locked(&s.unavailable).extend(in_host);
                return Status::unresolvable(REASON_ALLOCATED_IN_HOST);
            }
            locked(&s.virtual_nodes).insert(node.name.to_string());
            return Status::success();
        }
        let node_extended = match s
            .extended
            .as_deref()
            .map(|e| extended::filter(e, pod, node))
        {
            Some(Err(status)) => return status,
            Some(Ok(claim)) => claim,
            None => None,
        };
        // Device plugins serve the pod's extended resources here, and it has no claims.
        if node_extended.is_none() && s.slots.is_empty() {
            return Status::success();
        }
        let labels = selectors::node_labels(&node.node);
        let unavailable: Vec<usize> = (s.slots.iter().enumerate())
            .filter(|(_, slot)| {
                slot.available_on
                    .as_ref()
                    .is_some_and(|sel| !selectors::node_selector_matches(sel, labels, &node.name))
            })
            .map(|(i, _)| i)
            .collect();
        let mut allocations = None;
        if let Some(allocator) = &s.allocator {
            // The node's extended-resource claim last, as kube's claim store has it.
            let to_allocate: Vec<&ResourceClaim> = (s.slots.iter())
                .filter(|slot| allocation_of(&slot.claim).is_none())
                .map(|slot| &*slot.claim)
                .chain(node_extended.as_ref().map(|e| &e.claim))
                .collect();
            // kube bounds the search (exponential in the worst case, and written by
            // whoever writes claims) by filterTimeout; zero turns the bound off.
            let allocated = if self.args.filter_timeout.is_zero() {
                allocator.allocate(&node.node, &to_allocate)
            } else {
                let deadline = std::time::Instant::now() + self.args.filter_timeout;
                allocator.allocate_until(&node.node, &to_allocate, deadline)
            };
            match allocated {
                // Perhaps transient: an error, so the pod retries with backoff rather
                // than waiting for a cluster event, in kube's words.
                Err(AllocateError::Aborted(_)) => {
                    return Status::error(format!(
                        "node {}: timed out trying to allocate devices",
                        node.name
                    ));
                }
                // Only this node's pools are broken: other nodes may do.
                Err(e) if e.is_failed_on_node() => return Status::unresolvable(e.to_string()),
                // A claim or class that cannot be handled: the cycle ends in an error.
                Err(e) => return Status::error(e.to_string()),
                Ok(Some(v)) if v.len() == to_allocate.len() => allocations = Some(v),
                Ok(_) => return Status::unresolvable(REASON_CANNOT_ALLOCATE),
            }
        }
        if !unavailable.is_empty() {
            locked(&s.unavailable).extend(unavailable);
            return Status::unresolvable(REASON_NOT_AVAILABLE);
        }
        if let Some(mut v) = allocations {
            if let Some(mut e) = node_extended {
                e.allocation = v.pop();
                locked(&s.extended_by_node).insert(node.name.to_string(), e);
            }
            locked(&s.by_node).insert(node.name.to_string(), v);
        }
        Status::success()
    }
}

/// kube's PostFilter: an allocated claim that kept the pod off some node and that no
/// other pod uses is deallocated (one per attempt), so the pod's next attempt, woken by
/// the claim's change, may allocate it where it fits; preemption is still tried after.
impl PostFilterPlugin for DynamicResources {
    fn post_filter(
        &self,
        fw: &Framework,
        state: &CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
        _statuses: &NodeStatuses,
    ) -> (PostFilterResult, Status) {
        let Some(s) = state.read::<State>(STATE_KEY) else {
            return (PostFilterResult::default(), Status::error(REASON_NO_STATE));
        };
        let unschedulable = |reasons: Vec<std::borrow::Cow<'static, str>>| {
            (
                PostFilterResult::default(),
                Status::new(Code::Unschedulable, reasons),
            )
        };
        if s.slots.is_empty() && s.extended.is_none() {
            return unschedulable(Vec::new());
        }
        let unavailable = locked(&s.unavailable).clone();
        // A user claim to deallocate first; else an extended-resource claim an earlier
        // cycle created is deleted, so the retry makes a new one.
        let (claim, delete) = match deallocate::pick(&s.slots, unavailable, &pod.uid) {
            Some(claim) => (claim, false),
            None => match s.extended.as_deref().filter(|e| e.is_stale()) {
                Some(e) => (&*e.claim, true),
                None => return unschedulable(Vec::new()),
            },
        };
        let Some(api) = fw.api() else {
            return (
                PostFilterResult::default(),
                Status::error(format!(
                    "no API client to deallocate resource claim {} with",
                    claims::kobj(claim)
                )),
            );
        };
        // The cycle is synchronous, as kube's; on a multi-threaded runtime the write
        // blocks this thread only.
        use tokio::runtime::{Handle, RuntimeFlavor};
        let Some(runtime) = Handle::try_current()
            .ok()
            .filter(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread)
        else {
            return (
                PostFilterResult::default(),
                Status::error("no multi-threaded runtime to write resource claims on"),
            );
        };
        if delete {
            let deleted =
                tokio::task::block_in_place(|| runtime.block_on(bind::delete_claim(api, claim)));
            return match deleted {
                Ok(()) => unschedulable(vec![extended::REASON_DELETED.into()]),
                Err(e) => (PostFilterResult::default(), Status::error(e)),
            };
        }
        let written =
            tokio::task::block_in_place(|| runtime.block_on(deallocate::write(api, claim)));
        match written {
            Ok(()) => unschedulable(vec![REASON_DEALLOCATED.into()]),
            Err(e) => (PostFilterResult::default(), Status::error(e)),
        }
    }
}

/// Nothing to score for a pod without claims, so Score is skipped (kube scores it 0 on
/// every node, which normalizes to the same).
impl PreScorePlugin for DynamicResources {
    fn pre_score(
        &self,
        state: &mut CycleState,
        _pod: &PodInfo,
        _nodes: &NodeList,
        _snapshot: &Snapshot,
    ) -> Status {
        match state.read::<State>(STATE_KEY) {
            Some(s) if !s.slots.is_empty() => Status::success(),
            _ => Status::skip(),
        }
    }
}

/// kube's computeScore: per claim, for each prioritized-list request, the earlier the
/// subrequest the node's allocation took, the more it scores.
fn prioritized_score(slots: &[ClaimSlot], allocations: &[AllocationResult]) -> Result<i64, String> {
    let mut score = 0;
    let mut next = 0;
    for slot in slots {
        let allocation = match allocation_of(&slot.claim) {
            Some(a) => a,
            None => {
                let a = allocations.get(next).ok_or_else(|| {
                    format!(
                        "number of allocations {} is smaller than number of claims needing allocation",
                        allocations.len()
                    )
                })?;
                next += 1;
                a
            }
        };
        let taken: BTreeSet<&str> = (allocation.devices.iter())
            .flat_map(|d| d.results.iter().flatten())
            .map(|r| r.request.as_str())
            .filter(|r| r.split('/').count() == 2)
            .collect();
        let requests = (slot.claim.spec.as_ref())
            .and_then(|s| s.devices.as_ref())
            .and_then(|d| d.requests.as_ref());
        for request in requests.into_iter().flatten() {
            if request.exactly.is_some() {
                continue;
            }
            for (i, sub) in request.first_available.iter().flatten().enumerate() {
                if taken.contains(format!("{}/{}", request.name, sub.name).as_str()) {
                    score += FIRST_AVAILABLE_MAX - i as i64;
                }
            }
        }
    }
    Ok(score)
}

impl ScorePlugin for DynamicResources {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.read::<State>(STATE_KEY) else {
            return Err(Status::error(REASON_NO_STATE));
        };
        if s.slots.is_empty() {
            return Ok(0);
        }
        let by_node = locked(&s.by_node);
        let Some(allocations) = by_node.get(&*node.name) else {
            return Ok(0);
        };
        prioritized_score(&s.slots, allocations).map_err(Status::error)
    }

    fn normalize(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) -> Status {
        super::helper::normalize_to_max(scores);
        Status::success()
    }
}

impl ReservePlugin for DynamicResources {
    /// The chosen node's allocations go in flight: the next pod's PreFilter counts their
    /// devices as taken. Allocated claims are reserved for real only in PreBind.
    fn reserve(&self, state: &mut CycleState, _pod: &PodInfo, node: &str) -> Status {
        let Some(s) = state.read_mut::<State>(STATE_KEY) else {
            return Status::error(REASON_NO_STATE);
        };
        if s.allocator.is_none() || locked(&s.virtual_nodes).contains(node) {
            return Status::success();
        }
        let to_allocate = s
            .slots
            .iter()
            .filter(|slot| allocation_of(&slot.claim).is_none())
            .count();
        let found = locked(&s.by_node).get(node).cloned();
        let allocations = match found {
            Some(a) => a,
            // Only the extended-resource claim, which device plugins serve on this node.
            None if to_allocate == 0 => Vec::new(),
            None => return Status::error("claim allocation not found for node"),
        };
        if allocations.len() != to_allocate {
            return Status::error(format!(
                "internal error, have {} allocations, {to_allocate} claims to allocate, want {to_allocate} claims",
                allocations.len()
            ));
        }
        let slots = Arc::make_mut(&mut s.slots);
        let mut allocations = allocations.into_iter();
        for slot in slots.iter_mut() {
            if allocation_of(&slot.claim).is_some() {
                continue;
            }
            let Some(allocation) = allocations.next() else {
                break;
            };
            let mut claim = (*slot.claim).clone();
            let finalizers = claim.metadata.finalizers.get_or_insert_default();
            if !finalizers.iter().any(|f| f == bind::FINALIZER) {
                finalizers.push(bind::FINALIZER.into());
            }
            claim.status.get_or_insert_default().allocation = Some(allocation.clone());
            self.claims.signal_pending_allocation(Arc::new(claim));
            tracing::debug!(claim = %claims::kobj(&slot.claim), node, "Reserved resource in allocation result");
            slot.allocation = Some(allocation);
        }
        let node_extended = locked(&s.extended_by_node).get(node).cloned();
        if let Some(e) = node_extended
            && let Some(allocation) = &e.allocation
        {
            // Under the in-memory claim's temporary UID: PreBind's claim gets its own.
            let mut claim = e.claim.clone();
            claim.metadata.finalizers = Some(vec![bind::FINALIZER.into()]);
            claim.status.get_or_insert_default().allocation = Some(allocation.clone());
            self.claims.signal_pending_allocation(Arc::new(claim));
            tracing::debug!(claim = %claims::kobj(&e.claim), node, "Reserved resource in allocation result");
            s.extended_reserved = Some(e);
        }
        Status::success()
    }

    /// The allocations this pod held in flight are dropped, and a reservation PreBind
    /// wrote is taken back (as kube: a strategic-merge patch removing the pod's entry).
    fn unreserve(&self, state: &mut CycleState, pod: &PodInfo, _node: &str) {
        let Some(s) = state.read::<State>(STATE_KEY) else {
            return;
        };
        let written = locked(&s.written).clone();
        let ctx = locked(&s.bind_ctx).clone();
        for (i, slot) in s.slots.iter().enumerate() {
            let uid = slot.claim.metadata.uid.as_deref().unwrap_or_default();
            if self.claims.maybe_remove_pending_allocation(uid, false) {
                self.claims.restore(&claims::kobj(&slot.claim));
            }
            let claim = written.get(&i).unwrap_or(&slot.claim);
            if allocation_of(claim).is_some()
                && claims::is_reserved_for(&pod.uid, claim)
                && let Some(ctx) = &ctx
            {
                bind::unreserve_in_background(ctx, claim, &pod.uid);
            }
        }
        if let Some(e) = &s.extended {
            if self.claims.maybe_remove_pending_allocation(e.uid(), false) {
                self.claims.restore(&claims::kobj(&e.claim));
            }
            // Written to the API server: deleted, so that no claim holds devices for a
            // pod that is not there.
            if let Some(created) = locked(&s.extended_created).take()
                && let Some(ctx) = &ctx
            {
                tracing::debug!(resourceclaim = %claims::kobj(&created), pod = %pod.key, "delete extended resource backed by DRA");
                bind::delete_in_background(ctx, created);
            }
        }
    }
}

impl PreBindPlugin for DynamicResources {
    fn pre_bind<'a>(
        &'a self,
        ctx: &'a BindContext,
        state: &'a CycleState,
        pod: &'a PodInfo,
        node: &'a str,
    ) -> futures::future::BoxFuture<'a, Status> {
        Box::pin(async move {
            let Some(s) = state.read::<State>(STATE_KEY) else {
                return Status::error(REASON_NO_STATE);
            };
            if (s.slots.is_empty() && s.extended_reserved.is_none())
                || locked(&s.virtual_nodes).contains(node)
            {
                return Status::success();
            }
            *locked(&s.bind_ctx) = Some(ctx.clone());
            bind::pre_bind(self, ctx, s, pod, node).await
        })
    }
}
