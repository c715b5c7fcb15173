//! VolumeBinding (kube-scheduler's `volumebinding`): a pod's claims must be bound to
//! volumes its node can reach, or be bindable there — a matching available volume for a
//! WaitForFirstConsumer claim, or a class that can provision in the node's topology.
//! Reserve keeps the chosen volumes from other pods; PreBind binds them through the API
//! and waits, up to `bindTimeoutSeconds`, for the PV controller to complete the binding.
//!
//! Storage capacity (binder.go's hasEnoughCapacity): a claim to provision, whose class's
//! provisioner is a CSIDriver with `spec.storageCapacity: true`, needs a CSIStorageCapacity
//! of its class whose `nodeTopology` selects the node and whose `maximumVolumeSize` (else
//! `capacity`) holds the claim's request; none is "node(s) did not have enough free
//! storage". kube takes the first such object its lister lists (in no set order); this
//! plugin the first by `namespace/name`.
//!
//! Score (StorageCapacityScoring, beta and on in v1.37; scorer.go): per node, the claims
//! bound to available volumes there grouped by the volumes' class (requested and capacity
//! summed), or when there are none the claims to provision with a capacity found, grouped
//! by the claims' class (requested summed, capacity the CSIStorageCapacity's `capacity`);
//! each class scored by `shape` (VolumeBindingArgs; default (0, 10), (100, 0): the most
//! free room scores highest) at requested×100/capacity, the classes' mean rounded. PreScore
//! never skips. A capacity without `capacity` counts as 0 here (kube dereferences it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Node, ObjectReference, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSIStorageCapacity, StorageClass};
use kube::api::{Api, Patch, PatchParams};
use mcsched_shared::quantity::Quantity;
use mcsched_shared::selectors;

use super::helper::broken_linear;
use super::helper::volumes::{class_of, names_claim, pod_claims, usable_claim};
use crate::framework::{
    BindContext, ClusterEvent, CycleState, FilterPlugin, MAX_NODE_SCORE, Plugin, PreBindPlugin,
    PreFilterPlugin, PreFilterResult, PreScorePlugin, ReservePlugin, ScorePlugin, Status,
};
use crate::snapshot::{NodeInfo, NodeList, PodInfo, Snapshot, VolumeObjects};

pub(crate) const NAME: &str = "VolumeBinding";
const STATE_KEY: &str = NAME;

pub(crate) const REASON_BIND_CONFLICT: &str =
    "node(s) didn't find available persistent volumes to bind";
pub(crate) const REASON_NODE_CONFLICT: &str =
    "node(s) didn't match PersistentVolume's node affinity";
pub(crate) const REASON_PV_NOT_EXIST: &str =
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
pub(crate) const REASON_UNBOUND_IMMEDIATE: &str =
    "pod has unbound immediate PersistentVolumeClaims";
pub(crate) const REASON_NOT_ENOUGH_SPACE: &str = "node(s) did not have enough free storage";
/// VolumeBindingArgs' `shape` as v1.37 defaults it with StorageCapacityScoring on.
pub(crate) const DEFAULT_SHAPE: [(i64, i64); 2] = [(0, MAX_CUSTOM_PRIORITY_SCORE), (100, 0)];
const MAX_CUSTOM_PRIORITY_SCORE: i64 = 10;
const MAX_UTILIZATION: i64 = 100;
const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// What a node needs done for the pod's claims.
#[derive(Debug, Clone, Default)]
struct PodVolumes {
    /// Claim → the available volume chosen for it.
    static_bindings: Vec<(Arc<PersistentVolumeClaim>, Arc<PersistentVolume>)>,
    /// Claims the class's provisioner creates a volume for, on this node, with the
    /// CSIStorageCapacity that has room for it when its driver tracks capacity.
    provisions: Vec<(Arc<PersistentVolumeClaim>, Option<Arc<CSIStorageCapacity>>)>,
}

#[derive(Debug, Clone, Default)]
struct State {
    bound: Vec<Arc<PersistentVolumeClaim>>,
    delayed: Vec<Arc<PersistentVolumeClaim>>,
    volumes: Arc<HashMap<String, Arc<PersistentVolume>>>,
    classes: Arc<HashMap<String, Arc<StorageClass>>>,
    /// The cycle's storage objects, for CSIDrivers and CSIStorageCapacities.
    objects: Arc<VolumeObjects>,
    /// Filter's findings per node; Filter runs in parallel over nodes.
    by_node: Arc<Mutex<HashMap<String, PodVolumes>>>,
    /// The chosen node's, after Reserve.
    reserved: Option<PodVolumes>,
}

pub(crate) struct VolumeBinding {
    bind_timeout: Duration,
    /// Volumes reserved for a claim (`namespace/name`) until the API shows them bound.
    assumed: Mutex<HashMap<String, String>>,
    /// The score's shape, scores scaled to 0..=100 (kube: ×MaxNodeScore/MaxCustomPriorityScore).
    shape: Vec<(i64, i64)>,
}

impl VolumeBinding {
    /// With the default shape.
    pub(crate) fn new(bind_timeout_seconds: i64) -> Self {
        Self::with_shape(bind_timeout_seconds, &DEFAULT_SHAPE)
    }

    /// `shape` as VolumeBindingArgs gives it: scores 0..=10.
    pub(crate) fn with_shape(bind_timeout_seconds: i64, shape: &[(i64, i64)]) -> Self {
        VolumeBinding {
            bind_timeout: Duration::from_secs(bind_timeout_seconds.max(0) as u64),
            assumed: Mutex::default(),
            shape: shape
                .iter()
                .map(|&(u, s)| (u, s * (MAX_NODE_SCORE / MAX_CUSTOM_PRIORITY_SCORE)))
                .collect(),
        }
    }

    fn assumed(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.assumed.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn claim_key(c: &PersistentVolumeClaim) -> String {
    format!(
        "{}/{}",
        c.metadata.namespace.as_deref().unwrap_or_default(),
        c.metadata.name.as_deref().unwrap_or_default()
    )
}

fn pv_class(pv: &PersistentVolume) -> String {
    pv.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("volume.beta.kubernetes.io/storage-class"))
        .cloned()
        .or_else(|| pv.spec.as_ref().and_then(|s| s.storage_class_name.clone()))
        .unwrap_or_default()
}

fn fully_bound(c: &PersistentVolumeClaim) -> bool {
    c.spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .is_some_and(|v| !v.is_empty())
        && c.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(ANN_BIND_COMPLETED))
}

fn pv_fits_node(pv: &PersistentVolume, node: &Node) -> bool {
    let Some(required) = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
    else {
        return true;
    };
    let name = node.metadata.name.as_deref().unwrap_or_default();
    selectors::node_selector_matches(required, selectors::node_labels(node), name)
}

fn request_bytes(c: &PersistentVolumeClaim) -> i64 {
    c.spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .and_then(|q| Quantity::parse(&q.0).ok())
        .map(|q| q.value())
        .unwrap_or(0)
}

fn capacity_bytes(pv: &PersistentVolume) -> i64 {
    pv.spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .and_then(|q| Quantity::parse(&q.0).ok())
        .map(|q| q.value())
        .unwrap_or(0)
}

/// kube's FindMatchingVolume over the volumes of the claim's class (the scheduler's
/// `ListPVs(class)`): a volume pre-bound to the claim, if large enough, decides alone
/// (no match when the node cannot reach it); otherwise the smallest Available volume
/// that is large enough, matches the selector, the access modes and the node.
fn find_matching(
    claim: &PersistentVolumeClaim,
    volumes: &HashMap<String, Arc<PersistentVolume>>,
    node: &Node,
    chosen: &[String],
    assumed: &HashMap<String, String>,
) -> Option<Arc<PersistentVolume>> {
    let key = claim_key(claim);
    let class = class_of(claim);
    let spec = claim.spec.as_ref()?;
    let want = request_bytes(claim);
    let modes = spec.access_modes.clone().unwrap_or_default();
    let mode = spec
        .volume_mode
        .clone()
        .unwrap_or_else(|| "Filesystem".into());
    let mut best: Option<Arc<PersistentVolume>> = None;
    let mut candidates: Vec<&Arc<PersistentVolume>> = volumes
        .values()
        .filter(|pv| pv_class(pv) == class)
        .collect();
    candidates.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for pv in candidates {
        let name = pv.metadata.name.clone().unwrap_or_default();
        let Some(pv_spec) = pv.spec.as_ref() else {
            continue;
        };
        if chosen.contains(&name) {
            continue;
        }
        // Assumed for another claim by a pod in flight: as if its claimRef were set.
        if assumed.get(&name).is_some_and(|c| *c != key) {
            continue;
        }
        let prebound = names_claim(pv, claim);
        if pv_spec.claim_ref.is_some() && !prebound {
            continue;
        }
        let size = capacity_bytes(pv);
        if size < want {
            continue;
        }
        if pv_spec
            .volume_mode
            .clone()
            .unwrap_or_else(|| "Filesystem".into())
            != mode
        {
            continue;
        }
        if pv.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let reachable = pv_fits_node(pv, node);
        if prebound {
            return reachable.then(|| pv.clone());
        }
        // Volumes not yet Available are left alone, as kube does: the PV controller is
        // about to update them and binding now would likely conflict.
        let available = pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Available");
        if !available {
            continue;
        }
        let labels = pv.metadata.labels.clone().unwrap_or_default();
        if spec.selector.is_some()
            && !selectors::label_selector_matches(spec.selector.as_ref(), &labels)
        {
            continue;
        }
        if !reachable {
            continue;
        }
        let pv_modes = pv_spec.access_modes.clone().unwrap_or_default();
        if !modes.iter().all(|m| pv_modes.contains(m)) {
            continue;
        }
        if best.as_ref().is_none_or(|b| size < capacity_bytes(b)) {
            best = Some(pv.clone());
        }
    }
    best
}

fn storage_request(c: &PersistentVolumeClaim) -> Option<i64> {
    let q = c
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))?;
    Some(Quantity::parse(&q.0).map(|q| q.value()).unwrap_or(0))
}

fn quantity_bytes(
    q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) -> Option<i64> {
    q.and_then(|q| Quantity::parse(&q.0).ok())
        .map(|q| q.value())
}

/// capacitySufficient: `maximumVolumeSize`, else `capacity`, holds `size`.
fn capacity_sufficient(c: &CSIStorageCapacity, size: i64) -> bool {
    let limit = c.maximum_volume_size.as_ref().or(c.capacity.as_ref());
    quantity_bytes(limit).is_some_and(|l| l >= size)
}

/// nodeHasAccess: a capacity without `nodeTopology` is available nowhere.
fn node_has_access(c: &CSIStorageCapacity, node: &Node) -> bool {
    c.node_topology.is_some()
        && selectors::label_selector_matches(c.node_topology.as_ref(), selectors::node_labels(node))
}

/// hasEnoughCapacity: `Ok(None)` when nothing is to be checked (no storage request, the
/// provisioner no CSIDriver or one not tracking capacity), `Ok(Some(c))` with the
/// capacity that has room, `Err(())` when none has.
fn enough_capacity(
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
    node: &Node,
    objects: &VolumeObjects,
) -> Result<Option<Arc<CSIStorageCapacity>>, ()> {
    let Some(size) = storage_request(claim) else {
        return Ok(None);
    };
    let tracked = objects
        .csi_drivers
        .get(&class.provisioner)
        .and_then(|d| d.spec.storage_capacity)
        == Some(true);
    if !tracked {
        return Ok(None);
    }
    let class_name = class.metadata.name.as_deref().unwrap_or_default();
    let mut keys: Vec<&String> = objects.storage_capacities.keys().collect();
    keys.sort();
    keys.into_iter()
        .filter_map(|k| objects.storage_capacities.get(k))
        .find(|c| {
            c.storage_class_name == class_name
                && capacity_sufficient(c, size)
                && node_has_access(c, node)
        })
        .cloned()
        .map(Some)
        .ok_or(())
}

/// checkVolumeProvisions: (every claim provisionable here, enough storage, what to provision).
fn check_provisions(
    claims: &[Arc<PersistentVolumeClaim>],
    classes: &HashMap<String, Arc<StorageClass>>,
    objects: &VolumeObjects,
    node: &Node,
) -> (bool, bool, PodVolumes) {
    let mut found = PodVolumes::default();
    for c in claims {
        let Some(sc) = classes.get(&class_of(c)) else {
            return (false, true, PodVolumes::default());
        };
        if sc.provisioner.is_empty()
            || sc.provisioner == NO_PROVISIONER
            || !topology_allows(sc, node)
        {
            return (false, true, PodVolumes::default());
        }
        match enough_capacity(c, sc, node, objects) {
            Ok(capacity) => found.provisions.push((c.clone(), capacity)),
            Err(()) => return (true, false, PodVolumes::default()),
        }
    }
    (true, true, found)
}

/// scorer.go's buildScorerFunction over (requested, capacity) per class.
fn score_classes(shape: &[(i64, i64)], classes: &HashMap<String, (i64, i64)>) -> i64 {
    if classes.is_empty() {
        return 0;
    }
    let sum: i64 = classes
        .values()
        .map(|&(requested, capacity)| {
            if capacity == 0 || requested > capacity {
                broken_linear(shape, MAX_UTILIZATION)
            } else {
                broken_linear(shape, requested * MAX_UTILIZATION / capacity)
            }
        })
        .sum();
    let n = classes.len() as i64;
    // math.Round of the mean, half away from zero.
    let twice = 2 * sum;
    if twice >= 0 {
        (twice + n) / (2 * n)
    } else {
        (twice - n) / (2 * n)
    }
}

fn topology_allows(class: &StorageClass, node: &Node) -> bool {
    let Some(terms) = class.allowed_topologies.as_ref().filter(|t| !t.is_empty()) else {
        return true;
    };
    let labels = selectors::node_labels(node);
    terms.iter().any(|t| {
        t.match_label_expressions
            .iter()
            .flatten()
            .all(|e| labels.get(&e.key).is_some_and(|v| e.values.contains(v)))
    })
}

impl Plugin for VolumeBinding {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::NodeAdd,
            ClusterEvent::NodeUpdate,
            ClusterEvent::PvcChange,
            ClusterEvent::PvChange,
            ClusterEvent::StorageClassChange,
            ClusterEvent::CsiNodeChange,
            ClusterEvent::CsiDriverChange,
            ClusterEvent::StorageCapacityChange,
        ]
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
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
}

impl PreFilterPlugin for VolumeBinding {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let claims = pod_claims(pod);
        if claims.is_empty() {
            return (None, Status::skip());
        }
        let vols = &snapshot.volumes;
        // podHasPVCs: every claim there, alive and the pod's, before any is classified.
        let mut found = Vec::with_capacity(claims.len());
        for claim in &claims {
            match usable_claim(pod, claim, vols) {
                Ok(c) => found.push(c),
                Err(why) => return (None, Status::unresolvable(why.to_string())),
            }
        }
        let mut st = State {
            volumes: Arc::new(vols.volumes.clone()),
            classes: Arc::new(vols.storage_classes.clone()),
            objects: vols.clone(),
            ..Default::default()
        };
        let mut immediate = false;
        for c in found {
            if fully_bound(c) {
                st.bound.push(c.clone());
                continue;
            }
            let delayed = vols
                .storage_classes
                .get(&class_of(c))
                .and_then(|sc| sc.volume_binding_mode.as_deref())
                == Some("WaitForFirstConsumer");
            let prebound = c
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.as_deref())
                .is_some_and(|v| !v.is_empty());
            if delayed && !prebound {
                st.delayed.push(c.clone());
            } else {
                immediate = true;
            }
        }
        if immediate {
            return (None, Status::unresolvable(REASON_UNBOUND_IMMEDIATE));
        }
        // Volumes the API now shows claimed need no reservation of ours any more.
        self.assumed().retain(|pv, _| {
            vols.volumes
                .get(pv)
                .is_some_and(|v| v.spec.as_ref().is_none_or(|s| s.claim_ref.is_none()))
        });
        state.write(STATE_KEY, st);
        (None, Status::success())
    }
}

impl FilterPlugin for VolumeBinding {
    /// FindPodVolumes.
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(st) = state.read::<State>(STATE_KEY) else {
            return Status::success();
        };
        let (mut bound_ok, mut bound_found) = (true, true);
        for c in &st.bound {
            let pv_name = c
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.clone())
                .unwrap_or_default();
            match st.volumes.get(&pv_name) {
                None => {
                    bound_found = false;
                    break;
                }
                Some(pv) if !pv_fits_node(pv, &node.node) => {
                    bound_ok = false;
                    break;
                }
                Some(_) => {}
            }
        }
        let (mut unbound_ok, mut sufficient) = (true, true);
        let mut found = PodVolumes::default();
        if !st.delayed.is_empty() {
            let mut to_provision = Vec::new();
            let mut to_match = Vec::new();
            for c in &st.delayed {
                let selected = c
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(ANN_SELECTED_NODE));
                match selected {
                    // Fast path: provisioning was begun for another node.
                    Some(sel) if sel.as_str() != &*node.name => {
                        unbound_ok = false;
                        break;
                    }
                    Some(_) => to_provision.push(c.clone()),
                    None => to_match.push(c.clone()),
                }
            }
            if unbound_ok {
                let assumed = self.assumed().clone();
                let mut chosen = Vec::new();
                to_match.sort_by_key(|c| request_bytes(c));
                for c in &to_match {
                    match find_matching(c, &st.volumes, &node.node, &chosen, &assumed) {
                        Some(pv) => {
                            chosen.push(pv.metadata.name.clone().unwrap_or_default());
                            found.static_bindings.push((c.clone(), pv));
                        }
                        None => {
                            unbound_ok = false;
                            to_provision.push(c.clone());
                        }
                    }
                }
                if !to_provision.is_empty() {
                    let provisions;
                    (unbound_ok, sufficient, provisions) =
                        check_provisions(&to_provision, &st.classes, &st.objects, &node.node);
                    found.provisions = provisions.provisions;
                }
            }
        }
        let mut reasons = Vec::new();
        if !bound_ok {
            reasons.push(REASON_NODE_CONFLICT);
        }
        if !unbound_ok {
            reasons.push(REASON_BIND_CONFLICT);
        }
        if !sufficient {
            reasons.push(REASON_NOT_ENOUGH_SPACE);
        }
        if !bound_found {
            reasons.push(REASON_PV_NOT_EXIST);
        }
        if !reasons.is_empty() {
            return Status::new(
                crate::framework::Code::UnschedulableAndUnresolvable,
                reasons.into_iter().map(Into::into).collect(),
            );
        }
        st.by_node
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(node.name.to_string(), found);
        Status::success()
    }
}

impl PreScorePlugin for VolumeBinding {
    /// With StorageCapacityScoring on kube never skips, whether or not the pod has claims.
    fn pre_score(
        &self,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _nodes: &NodeList,
        _snapshot: &Snapshot,
    ) -> Status {
        Status::success()
    }
}

impl ScorePlugin for VolumeBinding {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(st) = state.read::<State>(STATE_KEY) else {
            return Ok(0);
        };
        let by_node = st.by_node.lock().unwrap_or_else(|e| e.into_inner());
        let Some(found) = by_node.get(&*node.name) else {
            return Ok(0);
        };
        let mut classes: HashMap<String, (i64, i64)> = HashMap::new();
        if !found.static_bindings.is_empty() {
            for (c, pv) in &found.static_bindings {
                let class = pv
                    .spec
                    .as_ref()
                    .and_then(|s| s.storage_class_name.clone())
                    .unwrap_or_default();
                let e = classes.entry(class).or_default();
                e.0 += request_bytes(c);
                e.1 += capacity_bytes(pv);
            }
        } else {
            for (c, capacity) in &found.provisions {
                let Some(capacity) = capacity else {
                    continue;
                };
                let class = c
                    .spec
                    .as_ref()
                    .and_then(|s| s.storage_class_name.clone())
                    .unwrap_or_default();
                let e = classes.entry(class).or_default();
                // Not summed: two claims of a class share one capacity.
                e.1 = quantity_bytes(capacity.capacity.as_ref()).unwrap_or(0);
                e.0 += request_bytes(c);
            }
        }
        Ok(score_classes(&self.shape, &classes))
    }
}

/// The available volumes Filter chose on `node` for the pod's claims, as (volume, claim
/// `namespace/name`): what the leaf check holds for a pod it sends to a leaf.
pub(crate) fn chosen_volumes(state: &CycleState, node: &str) -> Vec<(String, String)> {
    let Some(st) = state.read::<State>(STATE_KEY) else {
        return Vec::new();
    };
    st.by_node
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(node)
        .map(|found| {
            found
                .static_bindings
                .iter()
                .map(|(c, pv)| (pv.metadata.name.clone().unwrap_or_default(), claim_key(c)))
                .collect()
        })
        .unwrap_or_default()
}

impl ReservePlugin for VolumeBinding {
    fn reserve(&self, state: &mut CycleState, _pod: &PodInfo, node: &str) -> Status {
        let Some(st) = state.read_mut::<State>(STATE_KEY) else {
            return Status::success();
        };
        let found = st
            .by_node
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(node)
            .cloned()
            .unwrap_or_default();
        let mut assumed = self.assumed();
        for (c, pv) in &found.static_bindings {
            assumed.insert(pv.metadata.name.clone().unwrap_or_default(), claim_key(c));
        }
        st.reserved = Some(found);
        Status::success()
    }

    fn unreserve(&self, state: &mut CycleState, _pod: &PodInfo, _node: &str) {
        let Some(st) = state.read_mut::<State>(STATE_KEY) else {
            return;
        };
        if let Some(found) = st.reserved.take() {
            let mut assumed = self.assumed();
            for (_, pv) in &found.static_bindings {
                assumed.remove(pv.metadata.name.as_deref().unwrap_or_default());
            }
        }
    }
}

impl PreBindPlugin for VolumeBinding {
    fn pre_bind<'a>(
        &'a self,
        ctx: &'a BindContext,
        state: &'a CycleState,
        _pod: &'a PodInfo,
        node: &'a str,
    ) -> BoxFuture<'a, Status> {
        Box::pin(async move {
            let Some(found) = state
                .read::<State>(STATE_KEY)
                .and_then(|s| s.reserved.clone())
            else {
                return Status::success();
            };
            if found.static_bindings.is_empty() && found.provisions.is_empty() {
                return Status::success();
            }
            match bind(ctx, &found, node, self.bind_timeout).await {
                Ok(()) => Status::success(),
                Err(e) => Status::error(format!("binding volumes: {e}")),
            }
        })
    }
}

/// The API updates kube's binder makes, then the wait for the PV controller.
async fn bind(
    ctx: &BindContext,
    found: &PodVolumes,
    node: &str,
    timeout: Duration,
) -> Result<(), kube::Error> {
    let pvs: Api<PersistentVolume> = Api::all(ctx.client.clone());
    for (c, pv) in &found.static_bindings {
        let claim_ref = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("PersistentVolumeClaim".into()),
            namespace: c.metadata.namespace.clone(),
            name: c.metadata.name.clone(),
            uid: c.metadata.uid.clone(),
            resource_version: c.metadata.resource_version.clone(),
            ..Default::default()
        };
        let patch = serde_json::json!({"spec": {"claimRef": claim_ref}});
        pvs.patch(
            pv.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    }
    for (c, _) in &found.provisions {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(
            ctx.client.clone(),
            c.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let patch = serde_json::json!({"metadata": {"annotations": {ANN_SELECTED_NODE: node}}});
        claims
            .patch(
                c.metadata.name.as_deref().unwrap_or_default(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
    }
    let all: Vec<&Arc<PersistentVolumeClaim>> = found
        .static_bindings
        .iter()
        .map(|(c, _)| c)
        .chain(found.provisions.iter().map(|(c, _)| c))
        .collect();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last_error = None;
    loop {
        let mut done = true;
        for c in &all {
            let claims: Api<PersistentVolumeClaim> = Api::namespaced(
                ctx.client.clone(),
                c.metadata.namespace.as_deref().unwrap_or_default(),
            );
            match claims
                .get(c.metadata.name.as_deref().unwrap_or_default())
                .await
            {
                Ok(now) if fully_bound(&now) => {}
                Ok(_) => {
                    done = false;
                    break;
                }
                // kube's wait reads its informers and fails only on a claim gone; a read
                // the API server failed (throttled, timed out) is no answer yet. Failing
                // here would leave the volumes' claimRefs written for a pod placed again.
                Err(kube::Error::Api(e)) if e.code == 404 => {
                    return Err(kube::Error::Api(e));
                }
                Err(e) => {
                    tracing::debug!(error = %e, "reading a claim while waiting for its binding; reading again");
                    last_error = Some(e);
                    done = false;
                    break;
                }
            }
        }
        if done {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(last_error.unwrap_or_else(|| {
                kube::Error::Service("context deadline exceeded".to_string().into())
            }));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    /// A binding context whose GETs of the claim are answered in turn by `gets` (status, body)
    /// and whose other requests succeed; it counts the GETs.
    fn claim_api(
        gets: Vec<(u16, serde_json::Value)>,
    ) -> (BindContext, Arc<std::sync::atomic::AtomicUsize>) {
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = count.clone();
        let gets = Arc::new(gets);
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let (seen, gets) = (seen.clone(), gets.clone());
            async move {
                let (code, body) = if req.method() == http::Method::GET {
                    let i = seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    gets[i.min(gets.len() - 1)].clone()
                } else {
                    (200, json!({"metadata": {"name": "pv-1"}}))
                };
                let body = serde_json::to_vec(&body).expect("json");
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .status(code)
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(body))
                        .expect("response"),
                )
            }
        });
        let ctx = BindContext {
            client: kube::Client::new(service, "ns"),
            content_type: mcsched_wire::ContentType::Json,
        };
        (ctx, count)
    }

    fn wffc_claim(bound: bool) -> serde_json::Value {
        let mut c = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "namespace": "ns", "uid": "u1"},
            "spec": {"storageClassName": "local"}});
        if bound {
            c["spec"]["volumeName"] = json!("pv-1");
            c["metadata"]["annotations"] = json!({ANN_BIND_COMPLETED: "yes"});
        }
        c
    }

    fn status(code: u16, reason: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
            "message": format!("{reason} (test)"), "reason": reason, "code": code})
    }

    fn one_binding() -> PodVolumes {
        let claim: PersistentVolumeClaim = serde_json::from_value(wffc_claim(false)).expect("pvc");
        let pv: PersistentVolume =
            serde_json::from_value(local_pv("pv-1", "n1", "1Gi")).expect("pv");
        PodVolumes {
            static_bindings: vec![(Arc::new(claim), Arc::new(pv))],
            provisions: Vec::new(),
        }
    }

    /// kube's PreBind waits on its informers, which a busy API server cannot fail: a read
    /// the API server throttles or times out is no verdict, and the wait goes on. A
    /// PreBind that gave up here would leave the volume's claimRef written and the pod
    /// placed again, perhaps in a leaf, with the host volume then bound to its claim.
    #[tokio::test(start_paused = true)]
    async fn the_wait_for_the_binding_outlasts_a_busy_api_server() {
        let (ctx, gets) = claim_api(vec![
            (429, status(429, "TooManyRequests")),
            (504, status(504, "Timeout")),
            (200, wffc_claim(false)),
            (200, wffc_claim(true)),
        ]);
        let done = bind(&ctx, &one_binding(), "n1", Duration::from_secs(600)).await;
        assert!(done.is_ok(), "{done:?}");
        assert_eq!(gets.load(std::sync::atomic::Ordering::SeqCst), 4);
    }

    /// A claim gone ends the wait at once, as kube's cache read does; errors that never
    /// stop end it at the timeout, with the last one.
    #[tokio::test(start_paused = true)]
    async fn the_wait_ends_on_a_claim_gone_or_at_its_timeout() {
        let (ctx, gets) = claim_api(vec![(404, status(404, "NotFound"))]);
        let gone = bind(&ctx, &one_binding(), "n1", Duration::from_secs(600)).await;
        assert!(
            matches!(&gone, Err(kube::Error::Api(e)) if e.code == 404),
            "{gone:?}"
        );
        assert_eq!(gets.load(std::sync::atomic::Ordering::SeqCst), 1);

        let (ctx, gets) = claim_api(vec![(503, status(503, "ServiceUnavailable"))]);
        let busy = bind(&ctx, &one_binding(), "n1", Duration::from_secs(5)).await;
        assert!(
            matches!(&busy, Err(kube::Error::Api(e)) if e.code == 503),
            "{busy:?}"
        );
        assert!(gets.load(std::sync::atomic::Ordering::SeqCst) >= 5);
    }

    fn node(name: &str, zone: &str) -> NodeInfo {
        let n: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "zone": zone}}
        }))
        .expect("node");
        NodeInfo::new(Arc::new(n))
    }

    fn pod(claim: &str) -> PodInfo {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "db", "namespace": "ns"},
            "spec": {"containers": [], "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": claim}}]}
        }))
        .expect("pod");
        PodInfo::new(Arc::new(p))
    }

    fn local_pv(name: &str, host: &str, size: &str) -> serde_json::Value {
        json!({"metadata": {"name": name}, "spec": {
            "storageClassName": "local", "capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}]}]}}},
            "status": {"phase": "Available"}})
    }

    fn snapshot(claims: Vec<serde_json::Value>, pvs: Vec<serde_json::Value>) -> Snapshot {
        let mut s = Snapshot::from_nodes(Vec::new());
        let mut v = (*s.volumes).clone();
        for c in claims {
            let c: PersistentVolumeClaim = serde_json::from_value(c).expect("pvc");
            v.claims.insert(claim_key(&c), Arc::new(c));
        }
        for p in pvs {
            let p: PersistentVolume = serde_json::from_value(p).expect("pv");
            v.volumes
                .insert(p.metadata.name.clone().unwrap_or_default(), Arc::new(p));
        }
        for (name, mode, prov) in [
            ("local", "WaitForFirstConsumer", NO_PROVISIONER),
            ("fast", "Immediate", "ebs.csi.aws.com"),
        ] {
            let sc: StorageClass = serde_json::from_value(json!({
                "metadata": {"name": name}, "provisioner": prov, "volumeBindingMode": mode}))
            .expect("sc");
            v.storage_classes.insert(name.into(), Arc::new(sc));
        }
        s.volumes = Arc::new(v);
        s
    }

    fn claim(name: &str, class: &str, size: &str) -> serde_json::Value {
        json!({"metadata": {"name": name, "namespace": "ns", "uid": "u"}, "spec": {
            "storageClassName": class, "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": size}}}})
    }

    #[test]
    fn wait_for_first_consumer_claims_follow_local_volumes() {
        let vb = VolumeBinding::new(600);
        let snap = snapshot(
            vec![claim("data", "local", "5Gi")],
            vec![
                local_pv("pv-a-big", "a", "100Gi"),
                local_pv("pv-a", "a", "10Gi"),
                local_pv("pv-b-small", "b", "1Gi"),
            ],
        );
        let mut state = CycleState::new();
        let p = pod("data");
        assert!(vb.pre_filter(&mut state, &p, &snap).1.is_success());
        assert!(vb.filter(&state, &p, &node("a", "z1")).is_success());
        let b = vb.filter(&state, &p, &node("b", "z1"));
        assert_eq!(b.reasons, [REASON_BIND_CONFLICT]);
        assert!(vb.reserve(&mut state, &p, "a").is_success());
        let chosen = state
            .read::<State>(STATE_KEY)
            .and_then(|s| s.reserved.clone())
            .expect("reserved");
        assert_eq!(
            chosen.static_bindings[0].1.metadata.name.as_deref(),
            Some("pv-a"),
            "the smallest that fits"
        );
        // Another pod's cycle cannot take the reserved volume.
        let snap2 = snapshot(
            vec![claim("other", "local", "5Gi")],
            vec![local_pv("pv-a", "a", "10Gi")],
        );
        let mut s2 = CycleState::new();
        let p2 = pod("other");
        assert!(vb.pre_filter(&mut s2, &p2, &snap2).1.is_success());
        assert!(!vb.filter(&s2, &p2, &node("a", "z1")).is_success());
        vb.unreserve(&mut state, &p, "a");
        assert!(vb.filter(&s2, &p2, &node("a", "z1")).is_success());
    }

    #[test]
    fn unbound_immediate_missing_and_bound_claims() {
        let vb = VolumeBinding::new(600);
        let mut state = CycleState::new();
        let snap = snapshot(vec![claim("fast-1", "fast", "1Gi")], vec![]);
        let (_, s) = vb.pre_filter(&mut state, &pod("fast-1"), &snap);
        assert_eq!(s.reasons, [REASON_UNBOUND_IMMEDIATE]);
        let (_, s) = vb.pre_filter(&mut state, &pod("nope"), &snap);
        assert_eq!(s.message(), "persistentvolumeclaim \"nope\" not found");

        let mut bound = claim("bound", "local", "1Gi");
        bound["spec"]["volumeName"] = json!("pv-a");
        bound["metadata"]["annotations"] = json!({ANN_BIND_COMPLETED: "yes"});
        let snap = snapshot(vec![bound.clone()], vec![local_pv("pv-a", "a", "10Gi")]);
        let mut state = CycleState::new();
        let p = pod("bound");
        assert!(vb.pre_filter(&mut state, &p, &snap).1.is_success());
        assert!(vb.filter(&state, &p, &node("a", "z")).is_success());
        assert_eq!(
            vb.filter(&state, &p, &node("b", "z")).reasons,
            [REASON_NODE_CONFLICT]
        );
        let snap = snapshot(vec![bound], vec![]);
        let mut state = CycleState::new();
        assert!(vb.pre_filter(&mut state, &p, &snap).1.is_success());
        assert_eq!(
            vb.filter(&state, &p, &node("a", "z")).reasons,
            [REASON_PV_NOT_EXIST]
        );
    }

    /// podHasPVCs' messages: a generic ephemeral volume's claim not made yet, or made for
    /// another pod; a claim whose volume is lost.
    #[test]
    fn ephemeral_and_lost_claims_are_refused_in_kubes_words() {
        let vb = VolumeBinding::new(600);
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "db", "namespace": "ns", "uid": "pod-uid"},
            "spec": {"containers": [], "volumes": [{"name": "scratch", "ephemeral": {
                "volumeClaimTemplate": {"spec": {"storageClassName": "local"}}}}]}
        }))
        .expect("pod");
        let p = PodInfo::new(Arc::new(p));
        let refusal = |claims| {
            vb.pre_filter(&mut CycleState::new(), &p, &snapshot(claims, vec![]))
                .1
        };
        let s = refusal(vec![]);
        assert_eq!(s.code, crate::framework::Code::UnschedulableAndUnresolvable);
        assert_eq!(
            s.message(),
            "waiting for ephemeral volume controller to create the persistentvolumeclaim \"db-scratch\""
        );
        let mut theirs = claim("db-scratch", "local", "1Gi");
        theirs["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod",
            "name": "db", "uid": "other-uid", "controller": true}]);
        assert_eq!(
            refusal(vec![theirs.clone()]).message(),
            "PVC ns/db-scratch was not created for pod ns/db (pod is not owner)"
        );
        theirs["metadata"]["ownerReferences"][0]["uid"] = json!("pod-uid");
        assert!(refusal(vec![theirs]).is_success());

        let mut lost = claim("data", "local", "1Gi");
        lost["spec"]["volumeName"] = json!("pv-gone");
        lost["status"] = json!({"phase": "Lost"});
        let s = vb
            .pre_filter(
                &mut CycleState::new(),
                &pod("data"),
                &snapshot(vec![lost], vec![]),
            )
            .1;
        assert_eq!(
            s.message(),
            "persistentvolumeclaim \"data\" bound to non-existent persistentvolume \"pv-gone\""
        );
    }

    #[test]
    fn matching_follows_kubes_find_matching_volume() {
        let on_a = |f: &dyn Fn(&mut serde_json::Value)| {
            let mut pv = local_pv("pv", "a", "10Gi");
            f(&mut pv);
            let snap = snapshot(vec![claim("data", "local", "5Gi")], vec![pv]);
            let vb = VolumeBinding::new(600);
            let mut state = CycleState::new();
            let p = pod("data");
            assert!(vb.pre_filter(&mut state, &p, &snap).1.is_success());
            vb.filter(&state, &p, &node("a", "z")).is_success()
        };
        let prebind = |pv: &mut serde_json::Value| {
            pv["spec"]["claimRef"] = json!({"namespace": "ns", "name": "data"});
        };
        type Edit = Box<dyn Fn(&mut serde_json::Value)>;
        let cases: Vec<(&str, Edit, bool)> = vec![
            ("available", Box::new(|_| {}), true),
            // Not yet Available: the PV controller has not processed it.
            (
                "pending",
                Box::new(|pv| pv["status"]["phase"] = json!("Pending")),
                false,
            ),
            // Pre-bound volumes need no Available phase...
            (
                "pre-bound",
                Box::new(move |pv| {
                    prebind(pv);
                    pv["status"]["phase"] = json!("Pending");
                }),
                true,
            ),
            // ...but must still be large enough.
            (
                "pre-bound, too small",
                Box::new(move |pv| {
                    prebind(pv);
                    pv["spec"]["capacity"]["storage"] = json!("1Gi");
                }),
                false,
            ),
            (
                "claimed by another",
                Box::new(|pv| pv["spec"]["claimRef"] = json!({"namespace": "ns", "name": "x"})),
                false,
            ),
            (
                "another class",
                Box::new(|pv| pv["spec"]["storageClassName"] = json!("fast")),
                false,
            ),
            (
                "read-write-many only",
                Box::new(|pv| pv["spec"]["accessModes"] = json!(["ReadWriteMany"])),
                false,
            ),
        ];
        for (name, f, want) in cases {
            assert_eq!(on_a(&*f), want, "{name}");
        }
    }

    /// scorer_test.go's TestScore: the default shape and a custom one (scores as the
    /// plugin holds them, already ×10), over one and two classes.
    #[test]
    fn scorer_matches_kube_scorer_test() {
        let default: Vec<(i64, i64)> = DEFAULT_SHAPE.iter().map(|&(u, s)| (u, s * 10)).collect();
        let custom = [(50, 0), (80, 30), (100, 50)];
        let classes = |pairs: &[(i64, i64)]| -> HashMap<String, (i64, i64)> {
            pairs
                .iter()
                .enumerate()
                .map(|(i, &(req, cap))| (["hdd", "ssd"][i].to_string(), (req, cap)))
                .collect()
        };
        type Shape<'a> = &'a [(i64, i64)];
        let cases: &[(Shape, Shape, i64)] = &[
            (&default, &[(0, 100)], 100),
            (&default, &[(30, 100)], 70),
            (&default, &[(50, 100)], 50),
            (&default, &[(100, 100)], 0),
            (&default, &[(0, 100), (0, 100)], 100),
            (&default, &[(0, 100), (30, 100)], 85),
            (&default, &[(30, 100), (30, 100)], 70),
            (&default, &[(30, 100), (60, 100)], 55),
            (&default, &[(50, 100), (50, 100)], 50),
            (&default, &[(50, 100), (100, 100)], 25),
            (&default, &[(100, 100), (100, 100)], 0),
            (&custom, &[(0, 100), (0, 100)], 0),
            (&custom, &[(0, 100), (30, 100)], 0),
            (&custom, &[(30, 100), (30, 100)], 0),
            (&custom, &[(30, 100), (60, 100)], 5),
            (&custom, &[(50, 100), (100, 100)], 25),
            (&custom, &[(90, 100), (90, 100)], 40),
            (&custom, &[(100, 100), (100, 100)], 50),
        ];
        for (shape, pairs, want) in cases {
            assert_eq!(
                score_classes(shape, &classes(pairs)),
                *want,
                "{shape:?} {pairs:?}"
            );
        }
        // No classes, no score; a class with no capacity or asking more is full.
        assert_eq!(score_classes(&default, &HashMap::new()), 0);
        assert_eq!(score_classes(&default, &classes(&[(1, 0)])), 0);
        assert_eq!(score_classes(&default, &classes(&[(200, 100)])), 0);
    }

    const CAPACITY_DRIVER: &str = "driver-with-storage-capacity";
    const CAPACITY_CLASS: &str = "wait-sc-with-storage-capacity";
    const NODE_LABEL: &str = "kubernetes.io/hostname";

    /// volume_binding_test.go's fixtures: `wait-sc` without a provisioner and
    /// `wait-sc-with-storage-capacity` whose driver tracks capacity.
    fn capacity_snapshot(
        claims: Vec<serde_json::Value>,
        pvs: Vec<serde_json::Value>,
        capacities: Vec<serde_json::Value>,
    ) -> Snapshot {
        let mut s = snapshot(claims, pvs);
        let mut v = (*s.volumes).clone();
        for (name, prov) in [("wait-sc", ""), (CAPACITY_CLASS, CAPACITY_DRIVER)] {
            let sc: StorageClass = serde_json::from_value(json!({
                "metadata": {"name": name}, "provisioner": prov,
                "volumeBindingMode": "WaitForFirstConsumer"}))
            .expect("sc");
            v.storage_classes.insert(name.into(), Arc::new(sc));
        }
        let driver: k8s_openapi::api::storage::v1::CSIDriver = serde_json::from_value(json!({
            "metadata": {"name": CAPACITY_DRIVER}, "spec": {"storageCapacity": true}}))
        .expect("driver");
        v.csi_drivers
            .insert(CAPACITY_DRIVER.into(), Arc::new(driver));
        for c in capacities {
            let c: CSIStorageCapacity = serde_json::from_value(c).expect("capacity");
            v.storage_capacities.insert(
                format!("/{}", c.metadata.name.clone().unwrap_or_default()),
                Arc::new(c),
            );
        }
        s.volumes = Arc::new(v);
        s
    }

    /// binder_test.go's makeCapacity: for the node labelled `node` (none: every node).
    fn capacity(
        name: &str,
        class: &str,
        node: Option<&str>,
        cap: &str,
        max: &str,
    ) -> serde_json::Value {
        let mut c = json!({"metadata": {"name": name}, "storageClassName": class,
            "nodeTopology": {}});
        if let Some(n) = node {
            c["nodeTopology"] = json!({"matchLabels": {NODE_LABEL: n}});
        }
        if !cap.is_empty() {
            c["capacity"] = json!(cap);
        }
        if !max.is_empty() {
            c["maximumVolumeSize"] = json!(max);
        }
        c
    }

    fn pod_with(claims: &[&str]) -> PodInfo {
        let vols: Vec<serde_json::Value> = claims
            .iter()
            .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
            .collect();
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "pod-a", "namespace": "ns"},
            "spec": {"containers": [], "volumes": vols}
        }))
        .expect("pod");
        PodInfo::new(Arc::new(p))
    }

    fn labelled(name: &str, labels: serde_json::Value) -> NodeInfo {
        let n: Node = serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))
            .expect("node");
        NodeInfo::new(Arc::new(n))
    }

    /// Filter then Score on every node, as volume_binding_test.go's TestVolumeBinding runs
    /// them: each node's filter reasons, and the scores of all nodes.
    fn run(
        vb: &VolumeBinding,
        pod: &PodInfo,
        snap: &Snapshot,
        nodes: &[NodeInfo],
    ) -> (Vec<Vec<String>>, Vec<i64>) {
        let mut state = CycleState::new();
        let (_, s) = vb.pre_filter(&mut state, pod, snap);
        assert!(s.is_success(), "{s:?}");
        let reasons = nodes
            .iter()
            .map(|n| {
                vb.filter(&state, pod, n)
                    .reasons
                    .iter()
                    .map(|r| r.to_string())
                    .collect()
            })
            .collect();
        let list = NodeList::default();
        assert!(vb.pre_score(&mut state, pod, &list, snap).is_success());
        let scores = nodes
            .iter()
            .map(|n| vb.score(&state, pod, n).expect("score"))
            .collect();
        (reasons, scores)
    }

    fn abc() -> Vec<NodeInfo> {
        ["node-a", "node-b", "node-c"]
            .iter()
            .map(|n| labelled(n, json!({NODE_LABEL: n})))
            .collect()
    }

    /// "storage capacity score", "prefer node with least allocatable" and "prefer node
    /// with maximum allocatable": 10Gi provisioned where 100Gi, 50Gi or 20Gi, 10Gi remain.
    #[test]
    fn storage_capacity_scores_like_kube() {
        let claims = vec![claim("pvc-dynamic", CAPACITY_CLASS, "10Gi")];
        let caps = |b: &str| {
            vec![
                capacity("node-a", CAPACITY_CLASS, Some("node-a"), "100Gi", ""),
                capacity("node-b", CAPACITY_CLASS, Some("node-b"), b, ""),
                capacity("node-c", CAPACITY_CLASS, Some("node-c"), "10Gi", ""),
            ]
        };
        let pod = pod_with(&["pvc-dynamic"]);
        let none: Vec<Vec<String>> = vec![vec![]; 3];
        let snap = capacity_snapshot(claims.clone(), vec![], caps("50Gi"));
        let (reasons, scores) = run(&VolumeBinding::new(600), &pod, &snap, &abc());
        assert_eq!((reasons, scores), (none.clone(), vec![90, 80, 0]));
        let snap = capacity_snapshot(claims, vec![], caps("20Gi"));
        let least = VolumeBinding::with_shape(300, &[(0, 0), (100, 10)]);
        assert_eq!(run(&least, &pod, &snap, &abc()).1, vec![10, 50, 100]);
        let most = VolumeBinding::with_shape(300, &DEFAULT_SHAPE);
        assert_eq!(run(&most, &pod, &snap, &abc()).1, vec![90, 50, 0]);
    }

    /// "storage capacity score with static binds": a node with a static binding is scored
    /// by its volumes alone; "dynamic provisioning with multiple PVCs of the same
    /// StorageClass": two 50Gi claims fill one 100Gi capacity (not counted twice).
    #[test]
    fn static_bindings_win_and_one_capacity_serves_a_class() {
        let pvs = ["a", "b", "c"]
            .iter()
            .map(|n| {
                let mut pv = local_pv(&format!("pv-static-{n}"), &format!("node-{n}"), "100Gi");
                pv["spec"]["storageClassName"] = json!("wait-sc");
                pv
            })
            .collect();
        let snap = capacity_snapshot(
            vec![
                claim("pvc-dynamic", CAPACITY_CLASS, "10Gi"),
                claim("pvc-static", "wait-sc", "50Gi"),
            ],
            pvs,
            vec![
                capacity("node-a", CAPACITY_CLASS, Some("node-a"), "100Gi", ""),
                capacity("node-b", CAPACITY_CLASS, Some("node-b"), "50Gi", ""),
                capacity("node-c", CAPACITY_CLASS, Some("node-c"), "10Gi", ""),
            ],
        );
        let pod = pod_with(&["pvc-dynamic", "pvc-static"]);
        let (reasons, scores) = run(&VolumeBinding::new(600), &pod, &snap, &abc());
        assert_eq!(reasons, vec![Vec::<String>::new(); 3]);
        assert_eq!(scores, vec![50, 50, 50]);

        let snap = capacity_snapshot(
            vec![
                claim("pvc-dynamic-0", CAPACITY_CLASS, "50Gi"),
                claim("pvc-dynamic-1", CAPACITY_CLASS, "50Gi"),
            ],
            vec![],
            vec![capacity(
                "node-a",
                CAPACITY_CLASS,
                Some("node-a"),
                "100Gi",
                "",
            )],
        );
        let pod = pod_with(&["pvc-dynamic-0", "pvc-dynamic-1"]);
        let (_, scores) = run(&VolumeBinding::new(600), &pod, &snap, &abc()[..1]);
        assert_eq!(scores, vec![0]);
    }

    /// "zonal volumes with close capacity are preferred (custom shape)": 50Gi on 200Gi
    /// volumes (zone a) or 100Gi ones (zone b), shape (0,0), (50,3), (100,5); zone c has
    /// none and no provisioner.
    #[test]
    fn zonal_volumes_with_close_capacity_are_preferred() {
        let zonal = |name: &str, zone: &str, size: &str| {
            json!({"metadata": {"name": name}, "spec": {
                "storageClassName": "wait-sc", "capacity": {"storage": size},
                "accessModes": ["ReadWriteOnce"],
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "topology.kubernetes.io/region", "operator": "In", "values": [format!("region-{zone}")]},
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [format!("zone-{zone}")]}]}]}}},
                "status": {"phase": "Available"}})
        };
        let snap = capacity_snapshot(
            vec![claim("pvc-a", "wait-sc", "50Gi")],
            vec![
                zonal("pv-a-0", "a", "200Gi"),
                zonal("pv-a-1", "a", "200Gi"),
                zonal("pv-b-0", "b", "100Gi"),
                zonal("pv-b-1", "b", "100Gi"),
            ],
            vec![],
        );
        let nodes: Vec<NodeInfo> = ["a", "b", "c"]
            .iter()
            .flat_map(|z| {
                ["a", "b"].map(|n| {
                    labelled(
                        &format!("zone-{z}-node-{n}"),
                        json!({"topology.kubernetes.io/region": format!("region-{z}"),
                               "topology.kubernetes.io/zone": format!("zone-{z}")}),
                    )
                })
            })
            .collect();
        let vb = VolumeBinding::with_shape(300, &[(0, 0), (50, 3), (100, 5)]);
        let (reasons, scores) = run(&vb, &pod_with(&["pvc-a"]), &snap, &nodes);
        let conflict = vec![REASON_BIND_CONFLICT.to_string()];
        assert_eq!(
            reasons,
            vec![vec![], vec![], vec![], vec![], conflict.clone(), conflict]
        );
        assert_eq!(scores, vec![15, 15, 30, 30, 0, 0]);
    }

    /// binder_test.go's TestCapacity: a capacity of the class, reaching the node, with room
    /// by `maximumVolumeSize` (preferred) or `capacity`; else "did not have enough free
    /// storage". A driver without storageCapacity, or none at all, is not checked.
    #[test]
    fn capacity_checks_follow_kubes_binder() {
        let pod = pod_with(&["pvc"]);
        let node = &abc()[..1];
        let verdict = |caps: Vec<serde_json::Value>, tracked: bool| {
            let mut snap =
                capacity_snapshot(vec![claim("pvc", CAPACITY_CLASS, "1Gi")], vec![], caps);
            if !tracked {
                let mut v = (*snap.volumes).clone();
                v.csi_drivers.clear();
                snap.volumes = Arc::new(v);
            }
            run(&VolumeBinding::new(600), &pod, &snap, node).0.remove(0)
        };
        let no_space = vec![REASON_NOT_ENOUGH_SPACE.to_string()];
        let ok: Vec<String> = Vec::new();
        // Without any capacity object.
        assert_eq!(verdict(vec![], true), no_space);
        assert_eq!(verdict(vec![], false), ok);
        // Enough, as capacity or as maximumVolumeSize; maximumVolumeSize wins.
        assert_eq!(
            verdict(
                vec![capacity("c", CAPACITY_CLASS, Some("node-a"), "1Gi", "")],
                true
            ),
            ok
        );
        assert_eq!(
            verdict(
                vec![capacity("c", CAPACITY_CLASS, Some("node-a"), "", "1Gi")],
                true
            ),
            ok
        );
        assert_eq!(
            verdict(
                vec![capacity("c", CAPACITY_CLASS, Some("node-a"), "10Gi", "1Mi")],
                true
            ),
            no_space
        );
        assert_eq!(
            verdict(
                vec![capacity("c", CAPACITY_CLASS, Some("node-a"), "1Mi", "")],
                true
            ),
            no_space
        );
        // Another class, another node, or no topology at all.
        assert_eq!(
            verdict(
                vec![capacity("c", "wait-sc", Some("node-a"), "1Gi", "")],
                true
            ),
            no_space
        );
        assert_eq!(
            verdict(
                vec![capacity("c", CAPACITY_CLASS, Some("node-b"), "1Gi", "")],
                true
            ),
            no_space
        );
        let mut nowhere = capacity("c", CAPACITY_CLASS, None, "1Gi", "");
        nowhere.as_object_mut().map(|o| o.remove("nodeTopology"));
        assert_eq!(verdict(vec![nowhere], true), no_space);
        // An empty topology reaches every node.
        assert_eq!(
            verdict(vec![capacity("c", CAPACITY_CLASS, None, "1Gi", "")], true),
            ok
        );
    }

    /// FindPodVolumes' reasons together, in its order: a bound claim's volume elsewhere
    /// does not stop the unbound claims from being looked at.
    #[test]
    fn reasons_come_together_in_kubes_order() {
        let mut bound = claim("bound", "local", "1Gi");
        bound["spec"]["volumeName"] = json!("pv-b");
        bound["metadata"]["annotations"] = json!({ANN_BIND_COMPLETED: "yes"});
        let snap = capacity_snapshot(
            vec![bound, claim("pvc", CAPACITY_CLASS, "1Gi")],
            vec![local_pv("pv-b", "node-b", "1Gi")],
            vec![],
        );
        let (reasons, _) = run(
            &VolumeBinding::new(600),
            &pod_with(&["bound", "pvc"]),
            &snap,
            &abc()[..1],
        );
        assert_eq!(reasons[0], [REASON_NODE_CONFLICT, REASON_NOT_ENOUGH_SPACE]);
    }

    /// Pods without claims are scored 0 everywhere, and PreScore does not skip them.
    #[test]
    fn no_claims_no_score_but_no_skip() {
        let vb = VolumeBinding::new(600);
        let mut state = CycleState::new();
        let p = pod_with(&[]);
        let snap = snapshot(vec![], vec![]);
        assert!(vb.pre_filter(&mut state, &p, &snap).1.is_skip());
        assert!(
            vb.pre_score(&mut state, &p, &NodeList::default(), &snap)
                .is_success()
        );
        assert_eq!(vb.score(&state, &p, &abc()[0]).expect("score"), 0);
    }
}
