//! The search (kube's incubating allocator): one claim after the other, for each of its
//! requests one device after the other, each candidate checked against what is in use,
//! the selectors, capacity, counters, taints and constraints; backtracking until the first
//! full solution.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{
    AllocationResult, Device, DeviceClaim, DeviceClass, DeviceRequest, DeviceSelector,
    ResourceClaim, ResourceSlice,
};

use crate::capacity;
use crate::cel::{CelCache, DeviceInput};
use crate::constraints::Constraint;
use crate::error::AllocateError;
use crate::pools::{Pool, PoolId, gather_pools};
use crate::quantity::Quantity;
use crate::request::RequestRef;
use crate::state::{AllocatedState, ConsumedCapacity};
use crate::taints::taint_prevents_allocation;
use crate::{DeviceId, Features};

/// `resourceapi.AllocationResultsMaxSize`.
pub const ALLOCATION_RESULTS_MAX_SIZE: usize = 32;

/// Counter values per counter set name, then counter name.
pub(crate) type CounterSets = HashMap<String, HashMap<String, Quantity>>;

pub struct Allocator {
    features: Features,
    allocated: AllocatedState,
    classes: HashMap<String, Arc<DeviceClass>>,
    slices_on_node: HashMap<String, Vec<Arc<ResourceSlice>>>,
    slices_shared: Vec<Arc<ResourceSlice>>,
    all_slices: Vec<Arc<ResourceSlice>>,
    cel: Arc<CelCache>,
    /// Counters left per pool after what is allocated already; computed on first use and
    /// never changed, since it depends only on this allocator's inputs.
    available_counters: Mutex<HashMap<PoolId, Arc<CounterSets>>>,
    /// How often the search tried to place one device, over all calls (kube's
    /// Stats.NumAllocateOneInvocations): the work allocation took.
    allocate_one_invocations: AtomicI64,
}

/// kube's klog.KObj of a claim.
pub(crate) fn claim_ref(claim: &ResourceClaim) -> String {
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    match claim.metadata.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

pub(crate) fn claim_devices(claim: &ResourceClaim) -> Option<&DeviceClaim> {
    claim.spec.as_ref()?.devices.as_ref()
}

pub(crate) fn claim_requests(claim: &ResourceClaim) -> &[DeviceRequest] {
    claim_devices(claim)
        .and_then(|d| d.requests.as_deref())
        .unwrap_or_default()
}

pub(crate) fn slice_devices(slice: &ResourceSlice) -> &[Device] {
    slice.spec.devices.as_deref().unwrap_or_default()
}

impl Allocator {
    /// `classes`: every DeviceClass by name; `slices`: every ResourceSlice (the allocator
    /// picks the ones that are node-local to the node, all-nodes, or node-selector-matched).
    pub fn new(
        features: Features,
        allocated: AllocatedState,
        classes: &HashMap<String, Arc<DeviceClass>>,
        slices: &[Arc<ResourceSlice>],
        cel: Arc<CelCache>,
    ) -> Result<Self, AllocateError> {
        let mut slices_on_node: HashMap<String, Vec<Arc<ResourceSlice>>> = HashMap::new();
        let mut slices_shared = Vec::new();
        for s in slices {
            match s.spec.node_name.as_deref().filter(|n| !n.is_empty()) {
                Some(n) => slices_on_node
                    .entry(n.to_string())
                    .or_default()
                    .push(s.clone()),
                None => slices_shared.push(s.clone()),
            }
        }
        Ok(Allocator {
            features,
            allocated,
            classes: classes.clone(),
            slices_on_node,
            slices_shared,
            all_slices: slices.to_vec(),
            cel,
            available_counters: Mutex::new(HashMap::new()),
            allocate_one_invocations: AtomicI64::new(0),
        })
    }

    /// One node, the pod's claims that still need an allocation, in the pod's order.
    /// Ok(None): they do not fit on this node. Ok(Some(v)): v[i] is claims[i]'s allocation.
    pub fn allocate(
        &self,
        node: &Node,
        claims: &[&ResourceClaim],
    ) -> Result<Option<Vec<AllocationResult>>, AllocateError> {
        self.allocate_within(node, claims, None)
    }

    /// As [`Allocator::allocate`], giving up at `deadline` (kube-scheduler's filterTimeout:
    /// the search can take exponentially long) with kube's "filter operation aborted:
    /// context deadline exceeded".
    pub fn allocate_until(
        &self,
        node: &Node,
        claims: &[&ResourceClaim],
        deadline: Instant,
    ) -> Result<Option<Vec<AllocationResult>>, AllocateError> {
        self.allocate_within(node, claims, Some(deadline))
    }

    fn allocate_within(
        &self,
        node: &Node,
        claims: &[&ResourceClaim],
        deadline: Option<Instant>,
    ) -> Result<Option<Vec<AllocationResult>>, AllocateError> {
        let node_name = node.metadata.name.as_deref().unwrap_or_default();
        let mut for_node: Vec<Arc<ResourceSlice>> = self
            .slices_on_node
            .get(node_name)
            .cloned()
            .unwrap_or_default();
        for_node.extend(self.slices_shared.iter().cloned());
        let pools = gather_pools(&for_node, node, self.features, &self.all_slices);
        tracing::trace!(
            node = node_name,
            claims = claims.len(),
            pools = pools.len(),
            "starting allocation"
        );
        let mut search = Search {
            a: self,
            node,
            claims,
            pools,
            device_matches: HashMap::new(),
            constraints: Vec::new(),
            consumed_counters: HashMap::new(),
            request_data: HashMap::new(),
            allocating_devices: HashMap::new(),
            allocating_capacity: HashMap::new(),
            result: vec![Vec::new(); claims.len()],
            deadline,
        };
        search.prepare()?;
        match search.allocate_one(DeviceIndices::default(), false, Location::default()) {
            Err(SearchError::Fatal(e)) => return Err(e),
            // As kube: past the first claim this is handled in the search.
            Err(SearchError::MaxSize) => {
                return Err(AllocateError::Invalid(
                    "allocation max size exceeded".into(),
                ));
            }
            Ok(false) => {
                if let Some(p) = search.pools.iter().find(|p| p.invalid) {
                    tracing::debug!(pool = %p.id, reason = %p.invalid_reason, "invalid resource pool");
                    return Err(AllocateError::FailedOnNode(
                        "invalid resource pools were encountered".into(),
                    ));
                }
                return Ok(None);
            }
            Ok(true) => {}
        }
        search.build_results(node_name).map(Some)
    }

    /// How often the search tried to place one device so far (kube's GetStats).
    pub fn num_allocate_one_invocations(&self) -> i64 {
        self.allocate_one_invocations.load(Ordering::Relaxed)
    }

    pub(crate) fn features_binding_and_status(&self) -> bool {
        self.features.binding_and_status()
    }

    fn class(&self, name: &str) -> Option<Arc<DeviceClass>> {
        self.classes.get(name).cloned()
    }

    /// Counters of the pool minus what allocated devices consume.
    fn available_counters(&self, pool: &Pool) -> Arc<CounterSets> {
        let mut cache = self
            .available_counters
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(c) = cache.get(&pool.id) {
            return c.clone();
        }
        let mut available: CounterSets = HashMap::new();
        for (name, set) in &pool.counter_sets {
            let counters = set
                .counters
                .iter()
                .map(|(n, c)| {
                    (
                        n.clone(),
                        Quantity::from_api(&c.value).unwrap_or(Quantity::ZERO),
                    )
                })
                .collect();
            available.insert(name.clone(), counters);
        }
        for slice in pool
            .slices_targeting_node
            .iter()
            .chain(&pool.slices_not_targeting_node)
        {
            for device in slice_devices(slice) {
                let id = DeviceId::new(&slice.spec.driver, &slice.spec.pool.name, &device.name);
                if !self.allocated.is_device_allocated(&id) {
                    continue;
                }
                for consumption in device.consumes_counters.iter().flatten() {
                    let Some(set) = available.get_mut(&consumption.counter_set) else {
                        continue;
                    };
                    for (name, c) in &consumption.counters {
                        if let Some(v) = set.get_mut(name) {
                            *v = v.saturating_sub(
                                Quantity::from_api(&c.value).unwrap_or(Quantity::ZERO),
                            );
                        }
                    }
                }
            }
        }
        let available = Arc::new(available);
        cache.insert(pool.id.clone(), available.clone());
        available
    }
}

enum SearchError {
    /// More devices than an allocation result may hold: backtrack further.
    MaxSize,
    Fatal(AllocateError),
}

impl From<AllocateError> for SearchError {
    fn from(e: AllocateError) -> Self {
        SearchError::Fatal(e)
    }
}

type ReqKey = (usize, usize, usize);

#[derive(Clone, Copy, Default, Debug)]
struct DeviceIndices {
    claim: usize,
    request: usize,
    sub_request: usize,
    device: usize,
}

#[derive(Clone, Copy, Default, Debug)]
struct Location {
    pool: usize,
    slice: usize,
    device: usize,
}

#[derive(Clone)]
pub(crate) struct DeviceRef {
    pub id: DeviceId,
    pub slice: Arc<ResourceSlice>,
    pub index: usize,
    pub pool: usize,
}

impl DeviceRef {
    pub fn device(&self) -> &Device {
        &slice_devices(&self.slice)[self.index]
    }
}

pub(crate) struct RequestData<'a> {
    pub request: RequestRef<'a>,
    pub parent: Option<RequestRef<'a>>,
    pub class: Option<Arc<DeviceClass>>,
    pub num_devices: usize,
    pub selected_sub_request: usize,
    pub all_devices: Vec<DeviceRef>,
}

impl RequestData<'_> {
    pub fn request_name(&self) -> String {
        match &self.parent {
            Some(p) => format!("{}/{}", p.name(), self.request.name()),
            None => self.request.name().to_string(),
        }
    }
}

#[derive(Clone)]
pub(crate) struct DeviceResult {
    pub request: String,
    pub parent_request: Option<String>,
    pub device: DeviceRef,
    pub share_id: Option<String>,
    pub consumed_capacity: Option<ConsumedCapacity>,
    pub admin_access: Option<bool>,
}

impl DeviceResult {
    pub fn request_name(&self) -> String {
        match &self.parent_request {
            Some(p) => format!("{p}/{}", self.request),
            None => self.request.clone(),
        }
    }
}

/// What allocate_device changed, so that rollback can undo it.
#[derive(Default)]
struct Undo {
    counters_reserved: bool,
    constraints_added: usize,
    device_marked: bool,
    capacity_inserted: Option<ConsumedCapacity>,
    capacity_entry_existed: bool,
    result_added: bool,
    previous_results: usize,
}

pub(crate) struct Search<'a> {
    pub(crate) a: &'a Allocator,
    node: &'a Node,
    pub claims: &'a [&'a ResourceClaim],
    pools: Vec<Pool>,
    device_matches: HashMap<(DeviceId, ReqKey), bool>,
    constraints: Vec<Vec<Constraint>>,
    consumed_counters: HashMap<PoolId, CounterSets>,
    pub request_data: HashMap<ReqKey, RequestData<'a>>,
    allocating_devices: HashMap<DeviceId, HashSet<usize>>,
    allocating_capacity: HashMap<DeviceId, ConsumedCapacity>,
    pub result: Vec<Vec<DeviceResult>>,
    deadline: Option<Instant>,
}

fn invalid(msg: String) -> AllocateError {
    AllocateError::Invalid(msg)
}

impl<'a> Search<'a> {
    /// Checks each claim and request and records what each needs (kube's Allocate before
    /// the search, and validateDeviceRequest).
    fn prepare(&mut self) -> Result<(), AllocateError> {
        let features = self.a.features;
        for (ci, claim) in self.claims.iter().enumerate() {
            let claim: &'a ResourceClaim = claim;
            let cref = claim_ref(claim);
            let mut min_per_claim = 0usize;
            for (ri, request) in claim_requests(claim).iter().enumerate() {
                let subs = request.first_available.as_deref().unwrap_or_default();
                if !features.prioritized_list && !subs.is_empty() {
                    return Err(invalid(format!(
                        "claim {cref}, request {}: has subrequests, but the DRAPrioritizedList feature is disabled",
                        request.name
                    )));
                }
                if !features.consumable_capacity {
                    if request
                        .exactly
                        .as_ref()
                        .is_some_and(|e| e.capacity.is_some())
                    {
                        return Err(invalid(format!(
                            "claim {cref}, request {}: has capacity requests, but the DRAConsumableCapacity feature is disabled",
                            request.name
                        )));
                    }
                    if let Some(sub) = subs.iter().find(|s| s.capacity.is_some()) {
                        return Err(invalid(format!(
                            "claim {cref}, subrequest {}: has capacity requests, but the DRAConsumableCapacity feature is disabled",
                            sub.name
                        )));
                    }
                }
                let min_per_request = if subs.is_empty() {
                    let data =
                        self.validate_request(ci, RequestRef::Exact(request), None, (ci, ri, 0))?;
                    let n = data.num_devices;
                    self.request_data.insert((ci, ri, 0), data);
                    n
                } else {
                    let mut min = usize::MAX;
                    for (si, sub) in subs.iter().enumerate() {
                        let data = self.validate_request(
                            ci,
                            RequestRef::Sub(sub),
                            Some(RequestRef::Exact(request)),
                            (ci, ri, si),
                        )?;
                        min = min.min(data.num_devices);
                        self.request_data.insert((ci, ri, si), data);
                    }
                    min
                };
                if min_per_request > ALLOCATION_RESULTS_MAX_SIZE - min_per_claim {
                    return Err(invalid(format!(
                        "claim {cref}, request {}: adding {min_per_request} devices exceeds the claim limit of {ALLOCATION_RESULTS_MAX_SIZE}, with {min_per_claim} already accounted for",
                        request.name
                    )));
                }
                min_per_claim += min_per_request;
            }
            let mut constraints = Vec::new();
            let declared = claim_devices(claim)
                .and_then(|d| d.constraints.as_deref())
                .unwrap_or_default();
            for (i, c) in declared.iter().enumerate() {
                let requests: HashSet<String> = c.requests.iter().flatten().cloned().collect();
                if let Some(attr) = &c.match_attribute {
                    constraints.push(Constraint::Match {
                        requests,
                        attribute: attr.clone(),
                        value: None,
                        num_devices: 0,
                    });
                } else if let Some(attr) = &c.distinct_attribute {
                    constraints.push(Constraint::Distinct {
                        requests,
                        attribute: attr.clone(),
                        values: Vec::new(),
                    });
                } else {
                    return Err(invalid(format!(
                        "claim {cref}, constraint #{i}: empty constraint (unsupported constraint type?)"
                    )));
                }
            }
            self.constraints.push(constraints);
        }
        Ok(())
    }

    fn validate_request(
        &mut self,
        ci: usize,
        request: RequestRef<'a>,
        parent: Option<RequestRef<'a>>,
        key: ReqKey,
    ) -> Result<RequestData<'a>, AllocateError> {
        let cref = claim_ref(self.claims[ci]);
        let name = request.name();
        if request.has_derived_attributes() {
            return Err(invalid(format!(
                "claim {cref}, request {name}: cannot handle request with derived attributes, the feature is disabled"
            )));
        }
        for (i, selector) in request.selectors().iter().enumerate() {
            if selector.cel.is_none() {
                return Err(invalid(format!(
                    "claim {cref}, request {name}, selector #{i}: CEL expression empty (unsupported selector type?)"
                )));
            }
        }
        if !self.a.features.admin_access && request.has_admin_access() {
            return Err(invalid(format!(
                "claim {cref}, request {name}: admin access is requested, but the feature is disabled"
            )));
        }
        let class_name = request.device_class_name();
        if class_name.is_empty() {
            return Err(invalid(format!(
                "claim {cref}, request {name}: missing device class name (unsupported request type?)"
            )));
        }
        let Some(class) = self.a.class(class_name) else {
            return Err(invalid(format!(
                "claim {cref}, request {name}: could not retrieve device class {class_name}: deviceclass.resource.k8s.io \"{class_name}\" not found"
            )));
        };
        let mut data = RequestData {
            request,
            parent,
            class: Some(class),
            num_devices: 0,
            selected_sub_request: 0,
            all_devices: Vec::new(),
        };
        match request.allocation_mode() {
            "ExactCount" => {
                let count = request.count();
                data.num_devices = usize::try_from(count).map_err(|_| {
                    invalid(format!(
                        "claim {cref}, request {name}: exact count {count} is too large"
                    ))
                })?;
            }
            "All" => {
                for pi in 0..self.pools.len() {
                    let pool = &self.pools[pi];
                    if pool.incomplete {
                        return Err(invalid(format!(
                            "claim {cref}, request {name}: asks for all devices, but resource pool {} is currently being updated",
                            pool.id
                        )));
                    }
                    if pool.invalid {
                        return Err(invalid(format!(
                            "claim {cref}, request {name}: asks for all devices, but resource pool {} is currently invalid",
                            pool.id
                        )));
                    }
                    let slices = pool.slices_targeting_node.clone();
                    for slice in slices {
                        for (di, device) in slice_devices(&slice).iter().enumerate() {
                            if !self.is_selectable(key, data.class.as_ref(), request, &slice, di)? {
                                continue;
                            }
                            if self.a.features.consumable_capacity {
                                let fits = capacity::request_fits(
                                    &ConsumedCapacity::new(),
                                    request.capacities(),
                                    device.capacity.as_ref(),
                                    None,
                                    self.a.features.fractional_capacity_range,
                                )
                                .map_err(|e| {
                                    invalid(format!(
                                        "claim {cref}, request {name}: checking capacity for device {}: {e}",
                                        device.name
                                    ))
                                })?;
                                if !fits {
                                    continue;
                                }
                            }
                            data.all_devices.push(DeviceRef {
                                id: DeviceId::new(
                                    &slice.spec.driver,
                                    &slice.spec.pool.name,
                                    &device.name,
                                ),
                                slice: slice.clone(),
                                index: di,
                                pool: pi,
                            });
                        }
                    }
                }
                data.num_devices = data.all_devices.len();
            }
            mode => {
                return Err(invalid(format!(
                    "claim {cref}, request {name}: unsupported count mode {mode}"
                )));
            }
        }
        Ok(data)
    }

    fn allocate_one(
        &mut self,
        r: DeviceIndices,
        allocate_sub_request: bool,
        start: Location,
    ) -> Result<bool, SearchError> {
        self.a
            .allocate_one_invocations
            .fetch_add(1, Ordering::Relaxed);
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(SearchError::Fatal(AllocateError::Aborted(
                "filter operation aborted: context deadline exceeded".into(),
            )));
        }
        if r.claim >= self.claims.len() {
            return Ok(true);
        }
        let claim = self.claims[r.claim];
        if r.request >= claim_requests(claim).len() {
            return match self.allocate_one(
                DeviceIndices {
                    claim: r.claim + 1,
                    ..Default::default()
                },
                false,
                Location::default(),
            ) {
                Err(SearchError::MaxSize) => Ok(false),
                other => other,
            };
        }
        let key = (r.claim, r.request, r.sub_request);
        let has_parent = self.request_data[&key].parent.is_some();
        if !allocate_sub_request && has_parent {
            let mut all_exceeded = true;
            let mut si = 0;
            loop {
                if !self.request_data.contains_key(&(r.claim, r.request, si)) {
                    return if all_exceeded {
                        Err(SearchError::MaxSize)
                    } else {
                        Ok(false)
                    };
                }
                let attempt = DeviceIndices {
                    sub_request: si,
                    ..r
                };
                match self.allocate_one(attempt, true, Location::default()) {
                    Err(SearchError::MaxSize) => {
                        si += 1;
                        continue;
                    }
                    Err(e) => return Err(e),
                    Ok(true) => {
                        if let Some(d) = self.request_data.get_mut(&key) {
                            d.selected_sub_request = si;
                        }
                        return Ok(true);
                    }
                    Ok(false) => {
                        all_exceeded = false;
                        si += 1;
                    }
                }
            }
        }

        let (request, num_devices, all_mode, all_empty) = {
            let d = &self.request_data[&key];
            (
                d.request,
                d.num_devices,
                d.request.allocation_mode() == "All",
                d.all_devices.is_empty(),
            )
        };
        if all_mode && all_empty {
            return Ok(false);
        }
        if r.device >= num_devices {
            return self.allocate_one(
                DeviceIndices {
                    claim: r.claim,
                    request: r.request + 1,
                    ..Default::default()
                },
                false,
                Location::default(),
            );
        }
        let remaining = num_devices - r.device;
        let available = ALLOCATION_RESULTS_MAX_SIZE.saturating_sub(self.result[r.claim].len());
        if remaining > available {
            return Err(SearchError::MaxSize);
        }

        if all_mode {
            let device = self.request_data[&key].all_devices[r.device].clone();
            let Some(undo) = self.allocate_device(r, &device, true)? else {
                return Ok(false);
            };
            let next = DeviceIndices {
                device: r.device + 1,
                ..r
            };
            return match self.allocate_one(next, allocate_sub_request, Location::default()) {
                Ok(true) => Ok(true),
                other => {
                    self.rollback(r, &device, &undo);
                    other
                }
            };
        }

        for pi in start.pool..self.pools.len() {
            let pool = &self.pools[pi];
            if pool.incomplete || pool.invalid {
                continue;
            }
            let slices = pool.slices_targeting_node.clone();
            let slice_start = if pi == start.pool { start.slice } else { 0 };
            for (si, slice) in slices.iter().enumerate().skip(slice_start) {
                let device_start = if pi == start.pool && si == start.slice {
                    start.device
                } else {
                    0
                };
                let devices = slice_devices(slice);
                for (di, candidate) in devices.iter().enumerate().skip(device_start) {
                    let id =
                        DeviceId::new(&slice.spec.driver, &slice.spec.pool.name, &candidate.name);
                    if request.admin_access() && self.allocating_for_claim(&id, r.claim) {
                        continue;
                    }
                    if !request.admin_access() && self.device_in_use(&id) {
                        continue;
                    }
                    let class = self.request_data[&key].class.clone();
                    let selectable = self.is_selectable(key, class.as_ref(), request, slice, di)?;
                    if !selectable {
                        continue;
                    }
                    if self.a.features.consumable_capacity {
                        let fits = self.capacity_fits(request, &id, candidate).map_err(|e| {
                            invalid(format!(
                                "claim {}, request {}: checking capacity for device {id}: {e}",
                                claim_ref(claim),
                                request.name()
                            ))
                        })?;
                        if !fits {
                            continue;
                        }
                    }
                    let device = DeviceRef {
                        id,
                        slice: slice.clone(),
                        index: di,
                        pool: pi,
                    };
                    let Some(undo) = self.allocate_device(r, &device, false)? else {
                        continue;
                    };
                    let next = DeviceIndices {
                        device: r.device + 1,
                        ..r
                    };
                    let next_location = Location {
                        pool: pi,
                        slice: si,
                        device: di + 1,
                    };
                    match self.allocate_one(next, allocate_sub_request, next_location) {
                        Ok(true) => return Ok(true),
                        Ok(false) => self.rollback(r, &device, &undo),
                        Err(e) => {
                            self.rollback(r, &device, &undo);
                            return Err(e);
                        }
                    }
                }
            }
        }
        Ok(false)
    }

    fn is_selectable(
        &mut self,
        key: ReqKey,
        class: Option<&Arc<DeviceClass>>,
        request: RequestRef<'a>,
        slice: &ResourceSlice,
        di: usize,
    ) -> Result<bool, AllocateError> {
        let device = &slice_devices(slice)[di];
        if !self.a.features.binding_and_status()
            && !device
                .binding_conditions
                .as_deref()
                .unwrap_or_default()
                .is_empty()
        {
            return Ok(false);
        }
        let id = DeviceId::new(&slice.spec.driver, &slice.spec.pool.name, &device.name);
        let cache_key = (id, key);
        if let Some(m) = self.device_matches.get(&cache_key) {
            return Ok(*m);
        }
        let id = &cache_key.0;
        let mut matches = true;
        if let Some(class) = class {
            let selectors = class
                .spec
                .as_ref()
                .and_then(|s| s.selectors.as_deref())
                .unwrap_or_default();
            matches = self.selectors_match(key.0, device, id, Some(class), selectors)?;
        }
        if matches {
            matches = self.selectors_match(key.0, device, id, None, request.selectors())?;
        }
        if matches && slice.spec.per_device_node_selection.unwrap_or(false) {
            matches = crate::node_match::node_matches(
                self.node,
                device.node_name.as_deref(),
                device.all_nodes.unwrap_or(false),
                device.node_selector.as_ref(),
            );
        }
        self.device_matches.insert(cache_key, matches);
        Ok(matches)
    }

    fn selectors_match(
        &self,
        ci: usize,
        device: &Device,
        id: &DeviceId,
        class: Option<&Arc<DeviceClass>>,
        selectors: &[DeviceSelector],
    ) -> Result<bool, AllocateError> {
        let owner = || match class {
            Some(c) => format!("class {}", c.metadata.name.as_deref().unwrap_or_default()),
            None => format!("claim {}", claim_ref(self.claims[ci])),
        };
        for (i, selector) in selectors.iter().enumerate() {
            let expression = selector
                .cel
                .as_ref()
                .map(|c| c.expression.as_str())
                .unwrap_or_default();
            let compiled = self.a.cel.get_or_compile(expression).map_err(|e| {
                AllocateError::Cel(format!(
                    "{}: selector #{i}: CEL compile error: {e}",
                    owner()
                ))
            })?;
            let input = DeviceInput {
                driver: &id.driver,
                allow_multiple_allocations: device.allow_multiple_allocations,
                attributes: device.attributes.as_ref(),
                capacity: device.capacity.as_ref(),
            };
            let matches = self.a.cel.device_matches(&compiled, &input).map_err(|e| {
                AllocateError::Cel(format!(
                    "{}: selector #{i} on device {id}: CEL runtime error: {e}",
                    owner()
                ))
            })?;
            tracing::trace!(device = %id, selector = i, expression, matches, "CEL result");
            if !matches {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn capacity_fits(
        &self,
        request: RequestRef,
        id: &DeviceId,
        device: &Device,
    ) -> Result<bool, String> {
        let empty = ConsumedCapacity::new();
        let current = self
            .a
            .allocated
            .aggregated_capacity
            .get(id)
            .unwrap_or(&empty);
        capacity::request_fits(
            current,
            request.capacities(),
            device.capacity.as_ref(),
            self.allocating_capacity.get(id),
            self.a.features.fractional_capacity_range,
        )
    }

    fn device_in_use(&self, id: &DeviceId) -> bool {
        self.a.allocated.allocated_devices.contains(id)
            || self
                .allocating_devices
                .get(id)
                .is_some_and(|s| !s.is_empty())
    }

    fn allocating_for_claim(&self, id: &DeviceId, ci: usize) -> bool {
        self.allocating_devices
            .get(id)
            .is_some_and(|s| s.contains(&ci))
    }

    fn device_capacity_in_use(&self, id: &DeviceId) -> bool {
        self.a.allocated.aggregated_capacity.contains_key(id)
            || self
                .a
                .allocated
                .allocated_shared_device_ids
                .iter()
                .any(|s| &s.device == id)
            || self.allocating_capacity.contains_key(id)
    }

    fn request_names(&self, key: ReqKey) -> (String, Option<String>) {
        let d = &self.request_data[&key];
        match &d.parent {
            None => (d.request.name().to_string(), None),
            Some(p) => (p.name().to_string(), Some(d.request.name().to_string())),
        }
    }

    /// kube's allocateDevice: Ok(Some(undo)) when the device was taken.
    fn allocate_device(
        &mut self,
        r: DeviceIndices,
        device: &DeviceRef,
        must: bool,
    ) -> Result<Option<Undo>, AllocateError> {
        let key = (r.claim, r.request, r.sub_request);
        let request = self.request_data[&key].request;
        let dev = device.device();
        let allow_multiple =
            self.a.features.consumable_capacity && dev.allow_multiple_allocations == Some(true);
        if !allow_multiple
            && request.admin_access()
            && self.allocating_for_claim(&device.id, r.claim)
        {
            return Ok(None);
        }
        if !request.admin_access() && self.device_in_use(&device.id) {
            return Ok(None);
        }
        let consumes = dev.consumes_counters.as_deref().unwrap_or_default();
        if !self.a.features.partitionable_devices && !consumes.is_empty() {
            return Ok(None);
        }
        let skip_counter_check = allow_multiple && self.device_capacity_in_use(&device.id);
        let mut undo = Undo {
            previous_results: self.result[r.claim].len(),
            ..Default::default()
        };
        if !skip_counter_check && !consumes.is_empty() {
            if !self.check_available_counters(device) {
                return Ok(None);
            }
            undo.counters_reserved = true;
        }
        let (base, sub) = self.request_names(key);
        if self.a.features.device_taints && taint_prevents_allocation(dev, request.tolerations()) {
            self.rollback(r, device, &undo);
            return Ok(None);
        }
        for i in 0..self.constraints[r.claim].len() {
            if !self.constraints[r.claim][i].add(&base, sub.as_deref(), dev, &device.id) {
                self.rollback(r, device, &undo);
                if must {
                    return Err(invalid(format!(
                        "claim {}, request {}: cannot add device {} because a claim constraint would not be satisfied",
                        claim_ref(self.claims[r.claim]),
                        request.name(),
                        device.id
                    )));
                }
                return Ok(None);
            }
            undo.constraints_added += 1;
        }
        if !allow_multiple {
            self.allocating_devices
                .entry(device.id.clone())
                .or_default()
                .insert(r.claim);
            undo.device_marked = true;
        }
        let mut consumed = None;
        let mut share_id = None;
        if self.a.features.consumable_capacity {
            let cref = claim_ref(self.claims[r.claim]);
            let fits = match self.capacity_fits(request, &device.id, dev) {
                Ok(f) => f,
                Err(e) => {
                    self.rollback(r, device, &undo);
                    return Err(invalid(format!(
                        "claim {cref}, request {}: rechecking capacity for device {}: {e}",
                        request.name(),
                        device.id
                    )));
                }
            };
            if !fits {
                self.rollback(r, device, &undo);
                return Ok(None);
            }
            if allow_multiple {
                let c = match capacity::consumed_from_request(
                    request.capacities(),
                    dev.capacity.as_ref(),
                    self.a.features.fractional_capacity_range,
                ) {
                    Ok(c) => c,
                    Err(e) => {
                        self.rollback(r, device, &undo);
                        return Err(invalid(format!(
                            "claim {cref}, request {}: computing consumed capacity for device {}: {e}",
                            request.name(),
                            device.id
                        )));
                    }
                };
                share_id = Some(uuid::Uuid::new_v4().to_string());
                undo.capacity_entry_existed = self.allocating_capacity.contains_key(&device.id);
                let entry = self
                    .allocating_capacity
                    .entry(device.id.clone())
                    .or_default();
                for (name, q) in &c {
                    let sum = entry
                        .get(name)
                        .copied()
                        .unwrap_or(Quantity::ZERO)
                        .saturating_add(*q);
                    entry.insert(name.clone(), sum);
                }
                undo.capacity_inserted = Some(c.clone());
                consumed = Some(c);
            }
        }
        let (request_name, parent_request) = match sub {
            None => (base, None),
            Some(s) => (s, Some(base)),
        };
        self.result[r.claim].push(DeviceResult {
            request: request_name,
            parent_request,
            device: device.clone(),
            share_id,
            consumed_capacity: consumed.filter(|c| !c.is_empty()),
            admin_access: request.admin_access().then_some(true),
        });
        undo.result_added = true;
        Ok(Some(undo))
    }

    fn rollback(&mut self, r: DeviceIndices, device: &DeviceRef, undo: &Undo) {
        if undo.result_added {
            self.result[r.claim].truncate(undo.previous_results);
        }
        if let Some(c) = &undo.capacity_inserted {
            if let Some(entry) = self.allocating_capacity.get_mut(&device.id) {
                for (name, q) in c {
                    if let Some(v) = entry.get_mut(name) {
                        *v = v.saturating_sub(*q);
                    }
                }
                if entry.values().all(|v| v.signum() == 0) {
                    self.allocating_capacity.remove(&device.id);
                }
            }
            // The entry doubles as the marker that the device is shared already; keep it
            // while an earlier share still holds it.
            if undo.capacity_entry_existed {
                self.allocating_capacity
                    .entry(device.id.clone())
                    .or_default();
            }
        }
        if undo.device_marked
            && let Some(s) = self.allocating_devices.get_mut(&device.id)
        {
            s.remove(&r.claim);
        }
        if undo.constraints_added > 0 {
            let key = (r.claim, r.request, r.sub_request);
            let (base, sub) = self.request_names(key);
            for i in (0..undo.constraints_added).rev() {
                self.constraints[r.claim][i].remove(&base, sub.as_deref());
            }
        }
        if undo.counters_reserved {
            self.release_counters(device);
        }
    }

    /// kube's checkAvailableCounters: reserves the device's counters if they all fit.
    fn check_available_counters(&mut self, device: &DeviceRef) -> bool {
        let pool = &self.pools[device.pool];
        let available = self.a.available_counters(pool);
        let pool_id = pool.id.clone();
        let consumed = self.consumed_counters.entry(pool_id).or_default();
        for consumption in device.device().consumes_counters.iter().flatten() {
            let set = consumed.entry(consumption.counter_set.clone()).or_default();
            for (name, c) in &consumption.counters {
                let v = Quantity::from_api(&c.value).unwrap_or(Quantity::ZERO);
                let sum = set
                    .get(name)
                    .copied()
                    .unwrap_or(Quantity::ZERO)
                    .saturating_add(v);
                set.insert(name.clone(), sum);
            }
        }
        for (set_name, counters) in available.iter() {
            for (name, avail) in counters {
                let used = consumed
                    .get(set_name)
                    .and_then(|s| s.get(name))
                    .copied()
                    .unwrap_or(Quantity::ZERO);
                if *avail < used {
                    self.release_counters(device);
                    return false;
                }
            }
        }
        true
    }

    fn release_counters(&mut self, device: &DeviceRef) {
        let pool_id = &self.pools[device.pool].id;
        let Some(consumed) = self.consumed_counters.get_mut(pool_id) else {
            return;
        };
        for consumption in device.device().consumes_counters.iter().flatten() {
            let Some(set) = consumed.get_mut(&consumption.counter_set) else {
                continue;
            };
            for (name, c) in &consumption.counters {
                if let Some(v) = set.get_mut(name) {
                    *v = v.saturating_sub(Quantity::from_api(&c.value).unwrap_or(Quantity::ZERO));
                }
            }
        }
    }
}
