//! What DynamicResources reads beside the nodes, after kube-scheduler's DRA manager: the
//! DeviceClasses and ResourceSlices in the snapshot, and the ResourceClaims in a tracker
//! shared by every profile (kube's `ResourceClaimTracker`): an assume cache over the
//! claims' watch, so that a claim this scheduler wrote counts as written before its watch
//! event arrives, and the allocations in flight between Reserve and PreBind, so that the
//! next pod does not get the same device.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use k8s_openapi::api::core::v1::{Pod, PodResourceClaim};
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceClass, DeviceTaint, DeviceTaintRule, ResourceClaim, ResourceSlice,
};

/// The device objects of one snapshot: classes by name, slices by name, as the allocator
/// sees them (with the DeviceTaintRules' taints on their devices, as kube's resource
/// slice tracker patches them), and what they come from.
#[derive(Debug, Clone, Default)]
pub struct DeviceObjects {
    pub classes: HashMap<String, Arc<DeviceClass>>,
    pub slices: HashMap<String, Arc<ResourceSlice>>,
    /// The slices as the API server serves them, when a taint rule changed them.
    unpatched: HashMap<String, Arc<ResourceSlice>>,
    taint_rules: HashMap<String, Arc<DeviceTaintRule>>,
}

impl DeviceObjects {
    /// A slice added or changed; true when the allocator's view of it changed.
    pub fn apply_slice(&mut self, slice: Arc<ResourceSlice>) -> bool {
        let name = slice.metadata.name.clone().unwrap_or_default();
        let patched = patched(&slice, self.taint_rules.values());
        if Arc::ptr_eq(&patched, &slice) {
            self.unpatched.remove(&name);
        } else {
            self.unpatched.insert(name.clone(), slice);
        }
        self.slices.insert(name, patched);
        true
    }

    pub fn remove_slice(&mut self, name: &str) {
        self.slices.remove(name);
        self.unpatched.remove(name);
    }

    /// A DeviceTaintRule added, changed (`Some`) or deleted (`None`); true when some
    /// device's taints changed, which counts as those slices' update (kube's tracker
    /// sends one then).
    pub fn set_taint_rule(&mut self, name: &str, rule: Option<Arc<DeviceTaintRule>>) -> bool {
        match rule {
            Some(r) => self.taint_rules.insert(name.to_string(), r),
            None => self.taint_rules.remove(name),
        };
        let mut changed = false;
        let names: Vec<String> = self.slices.keys().cloned().collect();
        for n in names {
            let Some(current) = self.slices.get(&n).cloned() else {
                continue;
            };
            let original = self.unpatched.get(&n).cloned().unwrap_or(current.clone());
            let before = device_taints(&current);
            self.apply_slice(original);
            if self.slices.get(&n).map(|s| device_taints(s)) != Some(before) {
                changed = true;
            }
        }
        changed
    }
}

/// The implicit extended resource name of every DeviceClass is this prefix and its name
/// (resourceapi.ResourceDeviceClassPrefix).
pub const DEVICE_CLASS_PREFIX: &str = "deviceclass.resource.kubernetes.io/";
/// The annotation marking the claim the scheduler made for a pod's extended resources
/// (resourceapi.ExtendedResourceClaimAnnotation).
pub const EXTENDED_RESOURCE_CLAIM_ANNOTATION: &str =
    "resource.kubernetes.io/extended-resource-claim";

/// kube-scheduler's `IsDRAExtendedResourceName`: an extended resource name (one with a
/// domain outside kubernetes.io, not a quota's `requests.`), or a class's implicit name.
pub fn is_dra_extended_resource_name(name: &str) -> bool {
    if name.starts_with(DEVICE_CLASS_PREFIX) {
        return true;
    }
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

impl DeviceObjects {
    /// The DeviceClass serving extended resource `name` (kube's DeviceClassResolver over
    /// its extended resource cache). A class's `spec.extendedResourceName` is looked up
    /// first; when several classes name the same resource the newest by creation time
    /// wins, the smallest name on a tie, as the cache keeps them. Else the implicit
    /// `deviceclass.resource.kubernetes.io/<class>`.
    pub fn class_for_extended_resource(&self, name: &str) -> Option<&Arc<DeviceClass>> {
        let created = |c: &DeviceClass| {
            c.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_nanosecond())
        };
        let explicit = (self.classes.values())
            .filter(|c| {
                c.spec
                    .as_ref()
                    .and_then(|s| s.extended_resource_name.as_deref())
                    == Some(name)
            })
            .max_by(|a, b| {
                created(a)
                    .cmp(&created(b))
                    .then_with(|| b.metadata.name.cmp(&a.metadata.name))
            });
        explicit.or_else(|| {
            name.strip_prefix(DEVICE_CLASS_PREFIX)
                .and_then(|class| self.classes.get(class))
        })
    }
}

/// Every device's taints, in order, for telling whether a rule changed a slice.
fn device_taints(slice: &ResourceSlice) -> Vec<Option<Vec<DeviceTaint>>> {
    slice
        .spec
        .devices
        .iter()
        .flatten()
        .map(|d| d.taints.clone())
        .collect()
}

/// kube's `Tracker.applyPatches`: each rule whose selector matches the slice's driver and
/// pool adds its taint to the devices it names (all of them when it names none); a rule
/// without a selector matches nothing. The slice itself when no rule applies.
pub fn patched<'a>(
    slice: &Arc<ResourceSlice>,
    rules: impl IntoIterator<Item = &'a Arc<DeviceTaintRule>>,
) -> Arc<ResourceSlice> {
    let mut out: Option<ResourceSlice> = None;
    let mut rules: Vec<&Arc<DeviceTaintRule>> = rules.into_iter().collect();
    // One order for the taints a device gets (kube's follows its informer's list).
    rules.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for rule in rules {
        let Some(sel) = &rule.spec.device_selector else {
            continue;
        };
        if sel.driver.as_ref().is_some_and(|d| *d != slice.spec.driver)
            || sel
                .pool
                .as_ref()
                .is_some_and(|p| *p != slice.spec.pool.name)
        {
            continue;
        }
        let devices = slice.spec.devices.as_deref().unwrap_or_default();
        for (i, device) in devices.iter().enumerate() {
            if sel.device.as_ref().is_some_and(|d| *d != device.name) {
                continue;
            }
            let copy = out.get_or_insert_with(|| (**slice).clone());
            if let Some(d) = copy.spec.devices.as_mut().and_then(|ds| ds.get_mut(i)) {
                d.taints
                    .get_or_insert_default()
                    .push(rule.spec.taint.clone());
            }
        }
    }
    out.map_or_else(|| slice.clone(), Arc::new)
}

/// CycleState key of [`GivenClaims`].
pub const GIVEN_CLAIMS_KEY: &str = "mcsched.io/given-claims";

/// A pod's claims as they will be where it is judged, given by whoever judges it there
/// (the leaf check: the copy's claims as the leaf will hold them, before the leaf's claim
/// controller has made them), and the claims already holding devices there.
/// DynamicResources' PreFilter takes these instead of looking the pod's claims up in the
/// host's tracker.
#[derive(Clone)]
pub struct GivenClaims {
    pub claims: Vec<Arc<ResourceClaim>>,
    pub held: Arc<ResourceClaims>,
}

/// A claim as the watch last showed it, and as this scheduler last wrote it when that is
/// newer (kube's assume cache: `apiObj` and `latestObj`).
#[derive(Debug, Clone)]
struct Entry {
    api: Arc<ResourceClaim>,
    latest: Arc<ResourceClaim>,
}

/// An allocation made in Reserve and not yet written, and how many pods share it.
#[derive(Debug, Clone)]
struct InFlight {
    claim: Arc<ResourceClaim>,
    sharers: usize,
}

#[derive(Debug, Default)]
struct Claims {
    by_key: HashMap<String, Entry>,
    in_flight: HashMap<String, InFlight>,
}

/// The ResourceClaims, shared by the profiles and fed by the agent's watch.
#[derive(Debug, Default)]
pub struct ResourceClaims {
    inner: RwLock<Claims>,
}

/// Why a claim could not be assumed, in kube's assume cache's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssumeError {
    #[error("could not find ResourceClaim {0:?}")]
    NotFound(String),
    #[error("ResourceClaim {key:?} is out of sync (stored: {stored}, assume: {assumed})")]
    OutOfSync {
        key: String,
        stored: u64,
        assumed: u64,
    },
}

fn claim_key(c: &ResourceClaim) -> String {
    format!(
        "{}/{}",
        c.metadata.namespace.as_deref().unwrap_or_default(),
        c.metadata.name.as_deref().unwrap_or_default()
    )
}

/// kube's assume cache compares resource versions as integers; one that is not counts
/// as 0 (kube would refuse the object).
fn version(c: &ResourceClaim) -> u64 {
    c.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn uid(c: &ResourceClaim) -> &str {
    c.metadata.uid.as_deref().unwrap_or_default()
}

/// The claim's allocation, if it has one.
pub fn allocation_of(c: &ResourceClaim) -> Option<&AllocationResult> {
    c.status.as_ref().and_then(|s| s.allocation.as_ref())
}

fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// kube's `resourceclaim.Name`: the name of the claim a pod's entry refers to (None: its
/// template generated none, on purpose), and whether the pod must own that claim. Errors
/// in kube's words.
pub fn claim_name(pod: &Pod, claim: &PodResourceClaim) -> Result<(Option<String>, bool), String> {
    if let Some(name) = &claim.resource_claim_name {
        return Ok((Some(name.clone()), false));
    }
    if claim.resource_claim_template_name.is_some() {
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.as_ref());
        if let Some(s) = statuses
            .into_iter()
            .flatten()
            .find(|s| s.name == claim.name)
        {
            return Ok((s.resource_claim_name.clone(), true));
        }
        return Err(format!(
            "pod \"{}\": ResourceClaim not created yet",
            pod_key(pod)
        ));
    }
    Err(format!(
        "pod \"{}\", spec.resourceClaim {:?}: none of the supported fields are set",
        pod_key(pod),
        claim.name
    ))
}

/// Whether `pod` refers to the claim `name` in its namespace, so far as known (kube's
/// pod-by-claim index, which a claim's event is matched against).
pub fn pod_refers_to(pod: &Pod, namespace: &str, name: &str) -> bool {
    pod.metadata.namespace.as_deref().unwrap_or_default() == namespace
        && pod
            .spec
            .as_ref()
            .and_then(|s| s.resource_claims.as_ref())
            .into_iter()
            .flatten()
            .any(|pc| claim_name(pod, pc).is_ok_and(|(n, _)| n.as_deref() == Some(name)))
}

impl ResourceClaims {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    fn read(&self) -> RwLockReadGuard<'_, Claims> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Claims> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// A claim from the watch. Kept unless what this scheduler assumed is newer; the
    /// claim it replaces, if any (for the queueing decision).
    pub fn apply(&self, claim: Arc<ResourceClaim>) -> Option<Arc<ResourceClaim>> {
        let key = claim_key(&claim);
        let mut claims = self.write();
        match claims.by_key.get_mut(&key) {
            Some(e) if version(&claim) <= version(&e.latest) => {
                e.api = claim;
                None
            }
            Some(e) => {
                let old = std::mem::replace(&mut e.latest, claim.clone());
                e.api = claim;
                Some(old)
            }
            None => {
                claims.by_key.insert(
                    key,
                    Entry {
                        api: claim.clone(),
                        latest: claim,
                    },
                );
                None
            }
        }
    }

    /// The claim `namespace/name` left the watch; what was known of it.
    pub fn delete(&self, key: &str) -> Option<Arc<ResourceClaim>> {
        self.write().by_key.remove(key).map(|e| e.latest)
    }

    /// The claim as this scheduler knows it: what it wrote, or else what the watch showed.
    pub fn get(&self, namespace: &str, name: &str) -> Result<Arc<ResourceClaim>, AssumeError> {
        let key = format!("{namespace}/{name}");
        match self.read().by_key.get(&key) {
            Some(e) => Ok(e.latest.clone()),
            None => Err(AssumeError::NotFound(key)),
        }
    }

    /// The first known claim (as assumed) for which `matches` holds.
    pub fn find(&self, matches: impl Fn(&ResourceClaim) -> bool) -> Option<Arc<ResourceClaim>> {
        (self.read().by_key.values())
            .find(|e| matches(&e.latest))
            .map(|e| e.latest.clone())
    }

    /// How many claims are known.
    pub fn len(&self) -> usize {
        self.read().by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stores the claim this scheduler just wrote, unless the watch already showed a newer
    /// one (kube's AssumeClaimAfterAPICall).
    pub fn assume(&self, claim: Arc<ResourceClaim>) -> Result<(), AssumeError> {
        let key = claim_key(&claim);
        let mut claims = self.write();
        let Some(e) = claims.by_key.get_mut(&key) else {
            return Err(AssumeError::NotFound(key));
        };
        let (stored, assumed) = (version(&e.latest), version(&claim));
        if assumed < stored {
            return Err(AssumeError::OutOfSync {
                key,
                stored,
                assumed,
            });
        }
        e.latest = claim;
        Ok(())
    }

    /// Back to the watch's version of `namespace/name` (kube's AssumedClaimRestore).
    pub fn restore(&self, key: &str) {
        if let Some(e) = self.write().by_key.get_mut(key) {
            e.latest = e.api.clone();
        }
    }

    /// The allocation Reserve made for the claim `uid` and PreBind has not written yet.
    pub fn pending_allocation(&self, uid: &str) -> Option<AllocationResult> {
        self.read()
            .in_flight
            .get(uid)
            .and_then(|f| allocation_of(&f.claim).cloned())
    }

    /// Reserve's allocation of `claim` (carrying it in its status), held until PreBind
    /// writes it or Unreserve drops it; a claim already in flight gains a sharer. A claim
    /// already allocated in the assume cache is not put in flight again.
    pub fn signal_pending_allocation(&self, allocated: Arc<ResourceClaim>) {
        let id = uid(&allocated).to_string();
        let key = claim_key(&allocated);
        let mut claims = self.write();
        if let Some(f) = claims.in_flight.get_mut(&id) {
            f.sharers += 1;
            return;
        }
        if claims
            .by_key
            .get(&key)
            .is_some_and(|e| uid(&e.latest) == id && allocation_of(&e.latest).is_some())
        {
            return;
        }
        claims.in_flight.insert(
            id,
            InFlight {
                claim: allocated,
                sharers: 1,
            },
        );
    }

    /// One sharer of the in-flight claim `uid` is done; true when the allocation left
    /// the in-flight set (its last sharer, or `force`).
    pub fn maybe_remove_pending_allocation(&self, uid: &str, force: bool) -> bool {
        let mut claims = self.write();
        let Some(f) = claims.in_flight.get_mut(uid) else {
            return false;
        };
        if force || f.sharers == 1 {
            claims.in_flight.remove(uid);
            return true;
        }
        f.sharers -= 1;
        false
    }

    /// Every allocation that holds devices: the claims allocated (as assumed) and those in
    /// flight, read under one lock so that none is seen twice or missed.
    pub fn for_each_allocation(&self, mut f: impl FnMut(&AllocationResult)) {
        let claims = self.read();
        for e in claims.by_key.values() {
            if let Some(a) = allocation_of(&e.latest) {
                f(a);
            }
        }
        for inflight in claims.in_flight.values() {
            if let Some(a) = allocation_of(&inflight.claim) {
                f(a);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::resource::v1::{
        DeviceAllocationResult, DeviceRequestAllocationResult, ResourceClaimStatus,
    };

    fn claim(name: &str, rv: &str, device: Option<&str>) -> Arc<ResourceClaim> {
        let mut c = ResourceClaim::default();
        c.metadata.namespace = Some("ns".into());
        c.metadata.name = Some(name.into());
        c.metadata.uid = Some(format!("uid-{name}"));
        c.metadata.resource_version = Some(rv.into());
        c.status = device.map(|d| ResourceClaimStatus {
            allocation: Some(AllocationResult {
                devices: Some(DeviceAllocationResult {
                    results: Some(vec![DeviceRequestAllocationResult {
                        device: d.into(),
                        driver: "gpu.example.com".into(),
                        pool: "n1".into(),
                        request: "gpu".into(),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        Arc::new(c)
    }

    fn devices(c: &ResourceClaims) -> Vec<String> {
        let mut v = Vec::new();
        c.for_each_allocation(|a| {
            for r in a.devices.iter().flat_map(|d| d.results.iter().flatten()) {
                v.push(r.device.clone());
            }
        });
        v.sort();
        v
    }

    /// As kube's assume cache: what this scheduler wrote holds until the watch shows a
    /// version as new, and a restore goes back to the watch's.
    #[test]
    fn assumed_claims_hold_until_the_watch_catches_up() {
        let c = ResourceClaims::default();
        assert_eq!(
            c.get("ns", "a").map(|_| ()),
            Err(AssumeError::NotFound("ns/a".into()))
        );
        assert_eq!(
            c.get("ns", "a").err().map(|e| e.to_string()),
            Some("could not find ResourceClaim \"ns/a\"".into())
        );
        c.apply(claim("a", "5", None));
        c.assume(claim("a", "7", Some("gpu-0"))).expect("assumed");
        // An older event (a relist) does not undo the assumption.
        c.apply(claim("a", "6", None));
        assert_eq!(devices(&c), ["gpu-0"]);
        assert!(matches!(
            c.assume(claim("a", "3", None)),
            Err(AssumeError::OutOfSync { .. })
        ));
        c.restore("ns/a");
        assert!(devices(&c).is_empty(), "restored to the watch's version 6");
        c.assume(claim("a", "7", Some("gpu-0"))).expect("assumed");
        let replaced = c.apply(claim("a", "8", Some("gpu-1")));
        assert!(replaced.is_some());
        assert_eq!(devices(&c), ["gpu-1"]);
        assert!(c.delete("ns/a").is_some());
        assert!(c.is_empty());
    }

    /// Allocations in flight count as allocated until their last sharer is done.
    #[test]
    fn in_flight_allocations_count_until_their_last_sharer_is_done() {
        let c = ResourceClaims::default();
        c.apply(claim("a", "1", None));
        c.signal_pending_allocation(claim("a", "1", Some("gpu-0")));
        c.signal_pending_allocation(claim("a", "1", Some("gpu-0")));
        assert_eq!(devices(&c), ["gpu-0"]);
        assert!(c.pending_allocation("uid-a").is_some());
        assert!(!c.maybe_remove_pending_allocation("uid-a", false));
        assert_eq!(devices(&c), ["gpu-0"]);
        assert!(c.maybe_remove_pending_allocation("uid-a", false));
        assert!(devices(&c).is_empty());
        assert!(!c.maybe_remove_pending_allocation("uid-a", true));
        // Already allocated in the assume cache: not in flight again.
        c.apply(claim("b", "2", Some("gpu-1")));
        c.signal_pending_allocation(claim("b", "2", Some("gpu-1")));
        assert!(c.pending_allocation("uid-b").is_none());
    }

    fn slice(name: &str, driver: &str, pool: &str, devices: &[&str]) -> Arc<ResourceSlice> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name},
                "spec": {"driver": driver, "nodeName": pool,
                    "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices.iter().map(|d| serde_json::json!({"name": d})).collect::<Vec<_>>()}
            }))
            .expect("slice"),
        )
    }

    fn rule(name: &str, selector: Option<serde_json::Value>) -> Arc<DeviceTaintRule> {
        let mut spec = serde_json::json!({"taint": {"key": name, "effect": "NoSchedule"}});
        if let Some(sel) = selector {
            spec["deviceSelector"] = sel;
        }
        Arc::new(
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "spec": spec}))
                .expect("rule"),
        )
    }

    /// The taint keys of each device of slice `name`, as the allocator sees them.
    fn taint_keys(d: &DeviceObjects, name: &str) -> Vec<Vec<String>> {
        d.slices[name]
            .spec
            .devices
            .iter()
            .flatten()
            .map(|dev| dev.taints.iter().flatten().map(|t| t.key.clone()).collect())
            .collect()
    }

    /// kube's tracker: a rule's taint goes onto every device its driver, pool and device
    /// name select (all unset: every device; no selector: none), for slices that came
    /// before the rule and after it; deleting the rule takes it off again.
    #[test]
    fn taint_rules_patch_the_devices_they_select() {
        let mut d = DeviceObjects::default();
        d.apply_slice(slice("a", "gpu.example.com", "n1", &["gpu-0", "gpu-1"]));
        d.apply_slice(slice("b", "nic.example.com", "n1", &["nic-0"]));
        assert!(d.set_taint_rule(
            "one-gpu",
            Some(rule(
                "one-gpu",
                Some(serde_json::json!({"driver": "gpu.example.com", "pool": "n1", "device": "gpu-1"}))
            ))
        ));
        assert_eq!(taint_keys(&d, "a"), [vec![], vec!["one-gpu".to_string()]]);
        assert_eq!(taint_keys(&d, "b"), [Vec::<String>::new()]);
        // No selector: nothing; another pool: nothing; so nothing changed.
        assert!(!d.set_taint_rule("none", Some(rule("none", None))));
        assert!(!d.set_taint_rule(
            "elsewhere",
            Some(rule("elsewhere", Some(serde_json::json!({"pool": "n2"}))))
        ));
        assert!(d.set_taint_rule("all", Some(rule("all", Some(serde_json::json!({}))))));
        assert_eq!(
            taint_keys(&d, "a"),
            [
                vec!["all".to_string()],
                vec!["all".to_string(), "one-gpu".to_string()]
            ]
        );
        // A slice updated after the rules gets them too, once each.
        d.apply_slice(slice("a", "gpu.example.com", "n1", &["gpu-1"]));
        assert_eq!(
            taint_keys(&d, "a"),
            [vec!["all".to_string(), "one-gpu".to_string()]]
        );
        assert!(d.set_taint_rule("all", None));
        assert!(d.set_taint_rule("one-gpu", None));
        assert_eq!(taint_keys(&d, "a"), [Vec::<String>::new()]);
        assert_eq!(taint_keys(&d, "b"), [Vec::<String>::new()]);
        d.remove_slice("a");
        assert!(!d.slices.contains_key("a"));
    }
}
