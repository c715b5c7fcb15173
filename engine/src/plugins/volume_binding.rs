//! VolumeBinding (kube-scheduler's `volumebinding`): a pod's claims must be bound to
//! volumes its node can reach, or be bindable there — a matching available volume for a
//! WaitForFirstConsumer claim, or a class that can provision in the node's topology.
//! Reserve keeps the chosen volumes from other pods; PreBind binds them through the API
//! and waits, up to `bindTimeoutSeconds`, for the PV controller to complete the binding.
//! Not modelled: CSI storage capacity and the alpha StorageCapacityScoring score.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Node, ObjectReference, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, Patch, PatchParams};
use mcsched_shared::quantity::Quantity;
use mcsched_shared::selectors;

use super::helper::volumes::{class_of, names_claim, pod_claims, usable_claim};
use crate::framework::{
    BindContext, ClusterEvent, CycleState, FilterPlugin, Plugin, PreBindPlugin, PreFilterPlugin,
    PreFilterResult, ReservePlugin, Status,
};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

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
const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// What a node needs done for the pod's claims.
#[derive(Debug, Clone, Default)]
struct PodVolumes {
    /// Claim → the available volume chosen for it.
    static_bindings: Vec<(Arc<PersistentVolumeClaim>, Arc<PersistentVolume>)>,
    /// Claims the class's provisioner creates a volume for, on this node.
    provisions: Vec<Arc<PersistentVolumeClaim>>,
}

#[derive(Debug, Clone, Default)]
struct State {
    bound: Vec<Arc<PersistentVolumeClaim>>,
    delayed: Vec<Arc<PersistentVolumeClaim>>,
    volumes: Arc<HashMap<String, Arc<PersistentVolume>>>,
    classes: Arc<HashMap<String, Arc<StorageClass>>>,
    /// Filter's findings per node; Filter runs in parallel over nodes.
    by_node: Arc<Mutex<HashMap<String, PodVolumes>>>,
    /// The chosen node's, after Reserve.
    reserved: Option<PodVolumes>,
}

pub(crate) struct VolumeBinding {
    bind_timeout: Duration,
    /// Volumes reserved for a claim (`namespace/name`) until the API shows them bound.
    assumed: Mutex<HashMap<String, String>>,
}

impl VolumeBinding {
    pub(crate) fn new(bind_timeout_seconds: i64) -> Self {
        VolumeBinding {
            bind_timeout: Duration::from_secs(bind_timeout_seconds.max(0) as u64),
            assumed: Mutex::default(),
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
        ]
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
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
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(st) = state.read::<State>(STATE_KEY) else {
            return Status::success();
        };
        let mut reasons = Vec::new();
        for c in &st.bound {
            let pv_name = c
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.clone())
                .unwrap_or_default();
            match st.volumes.get(&pv_name) {
                None => {
                    reasons.push(REASON_PV_NOT_EXIST);
                    break;
                }
                Some(pv) if !pv_fits_node(pv, &node.node) => {
                    reasons.insert(0, REASON_NODE_CONFLICT);
                    break;
                }
                Some(_) => {}
            }
        }
        let mut found = PodVolumes::default();
        if reasons.is_empty() && !st.delayed.is_empty() {
            let assumed = self.assumed().clone();
            let mut chosen = Vec::new();
            let mut delayed = st.delayed.clone();
            delayed.sort_by_key(|c| request_bytes(c));
            let mut satisfied = true;
            for c in &delayed {
                let selected = c
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(ANN_SELECTED_NODE));
                if let Some(sel) = selected {
                    if sel.as_str() != &*node.name {
                        satisfied = false;
                        break;
                    }
                    found.provisions.push(c.clone());
                    continue;
                }
                match find_matching(c, &st.volumes, &node.node, &chosen, &assumed) {
                    Some(pv) => {
                        chosen.push(pv.metadata.name.clone().unwrap_or_default());
                        found.static_bindings.push((c.clone(), pv));
                    }
                    None => {
                        let provisionable = st.classes.get(&class_of(c)).is_some_and(|sc| {
                            !sc.provisioner.is_empty()
                                && sc.provisioner != NO_PROVISIONER
                                && topology_allows(sc, &node.node)
                        });
                        if provisionable {
                            found.provisions.push(c.clone());
                        } else {
                            satisfied = false;
                        }
                    }
                }
            }
            if !satisfied {
                reasons.push(REASON_BIND_CONFLICT);
            }
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
    for c in &found.provisions {
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
        .chain(found.provisions.iter())
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
}
