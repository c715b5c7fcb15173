use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::*;
use crate::dra_state::DeviceObjects;
use crate::plugins::testing::node_with;

const DRIVER: &str = "gpu.example.com";

fn class() -> Arc<DeviceClass> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": format!("device.driver == {DRIVER:?}")}}]}
        }))
        .expect("class"),
    )
}

/// One device `gpu-0` of `model` on node `node`.
fn slice(node: &str, model: &str) -> Arc<ResourceSlice> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": format!("{node}-gpus")},
            "spec": {"driver": DRIVER, "nodeName": node,
                "pool": {"name": node, "generation": 0, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0", "attributes": {"model": {"string": model}}}]}
        }))
        .expect("slice"),
    )
}

fn request(name: &str, model: &str) -> Value {
    // As the API server defaults it: one device.
    json!({"name": name, "exactly": {"deviceClassName": DRIVER,
        "allocationMode": "ExactCount", "count": 1, "selectors": [{"cel": {
        "expression": format!("device.attributes[{DRIVER:?}].model == {model:?}")}}]}})
}

/// The claim `{pod}-gpu` generated for pod `pod`, asking for one a100 unless `requests`
/// says otherwise.
fn claim(pod: &str, requests: Option<Value>) -> Value {
    json!({
        "metadata": {"name": format!("{pod}-gpu"), "namespace": "default",
            "uid": format!("uid-{pod}-gpu"), "resourceVersion": "10",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod,
                "uid": format!("uid-{pod}"), "controller": true}]},
        "spec": {"devices": {"requests": requests.unwrap_or_else(|| json!([request("gpu", "a100")]))}}
    })
}

fn to_claim(v: Value) -> Arc<ResourceClaim> {
    Arc::new(serde_json::from_value(v).expect("claim"))
}

/// Pod `name` with one claim from a template; `generated`: the claim controller has
/// recorded the claim's name.
fn pod(name: &str, generated: bool) -> PodInfo {
    let mut p = json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"containers": [{"name": "c", "image": "i"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu-template"}]}
    });
    if generated {
        p["status"] = json!({"resourceClaimStatuses": [
            {"name": "gpu", "resourceClaimName": format!("{name}-gpu")}]});
    }
    let pod: Pod = serde_json::from_value(p).expect("pod");
    PodInfo::new(Arc::new(pod))
}

struct World {
    plugin: DynamicResources,
    claims: Arc<ResourceClaims>,
    snapshot: Snapshot,
}

/// Nodes n1 (an a100) and n2 (a t4), and the class.
fn world() -> World {
    let claims = ResourceClaims::new();
    let nodes = vec![
        Arc::new(node_with("n1", |_| {})),
        Arc::new(node_with("n2", |_| {})),
    ];
    let mut devices = DeviceObjects::default();
    devices.classes.insert(DRIVER.into(), class());
    for s in [slice("n1", "a100"), slice("n2", "t4")] {
        devices
            .slices
            .insert(s.metadata.name.clone().unwrap_or_default(), s);
    }
    let snapshot = Snapshot {
        devices: Arc::new(devices),
        ..Snapshot::from_nodes(nodes)
    };
    World {
        plugin: DynamicResources::new(DynamicResourcesArgs::default(), claims.clone()),
        claims,
        snapshot,
    }
}

impl World {
    fn pre_filter(&self, pod: &PodInfo) -> (CycleState, Status) {
        let mut state = CycleState::new();
        let (_, s) = self.plugin.pre_filter(&mut state, pod, &self.snapshot);
        (state, s)
    }

    /// Each node's Filter verdict: (code, message).
    fn filter(&self, state: &CycleState, pod: &PodInfo) -> Vec<(Code, String)> {
        (self.snapshot.nodes.iter())
            .map(|n| {
                let s = self.plugin.filter(state, pod, n);
                (s.code, s.message())
            })
            .collect()
    }
}

fn fits() -> (Code, String) {
    (Code::Success, String::new())
}

fn cannot() -> (Code, String) {
    (
        Code::UnschedulableAndUnresolvable,
        REASON_CANNOT_ALLOCATE.to_string(),
    )
}

#[test]
fn pre_enqueue_waits_for_the_pods_claims_in_kubes_words() {
    let w = world();
    let verdict = |p: &PodInfo| {
        let s = w.plugin.pre_enqueue(&p.object());
        (s.code, s.message())
    };
    let unresolvable = |m: &str| (Code::UnschedulableAndUnresolvable, m.to_string());
    assert_eq!(
        verdict(&pod("p", false)),
        unresolvable("pod \"default/p\": ResourceClaim not created yet")
    );
    assert_eq!(
        verdict(&pod("p", true)),
        unresolvable("could not find ResourceClaim \"default/p-gpu\"")
    );
    // A claim of that name made for another pod.
    let mut theirs = claim("p", None);
    theirs["metadata"]["ownerReferences"][0]["uid"] = json!("uid-other");
    w.claims.apply(to_claim(theirs));
    assert_eq!(
        verdict(&pod("p", true)),
        unresolvable(
            "ResourceClaim default/p-gpu was not created for Pod default/p (Pod is not owner)"
        )
    );
    let mut deleting = claim("p", None);
    deleting["metadata"]["resourceVersion"] = json!("11");
    deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    w.claims.apply(to_claim(deleting));
    assert_eq!(
        verdict(&pod("p", true)),
        unresolvable("resourceclaim \"p-gpu\" is being deleted")
    );
    w.claims.delete("default/p-gpu");
    w.claims.apply(to_claim(claim("p", None)));
    assert_eq!(verdict(&pod("p", true)), (Code::Success, String::new()));
    // A pod without claims is never held.
    let plain = crate::plugins::testing::pod_with(|_| {});
    assert!(w.plugin.pre_enqueue(&plain.object()).is_success());
}

#[test]
fn pre_filter_skips_pods_without_claims_and_checks_classes() {
    let w = world();
    let plain = crate::plugins::testing::pod_with(|_| {});
    let (state, s) = w.pre_filter(&plain);
    assert!(s.is_skip());
    let pre_score = |state: &mut CycleState, p: &PodInfo| {
        w.plugin
            .pre_score(state, p, &NodeList::default(), &w.snapshot)
    };
    assert!(pre_score(&mut state.clone(), &plain).is_skip());
    let mut missing = claim("p", None);
    missing["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = json!("fpga");
    w.claims.apply(to_claim(missing));
    let (_, s) = w.pre_filter(&pod("p", true));
    assert_eq!(
        (s.code, s.message()),
        (
            Code::UnschedulableAndUnresolvable,
            "request gpu: device class fpga does not exist".to_string()
        )
    );
    let mut neither = claim("p", Some(json!([{"name": "gpu"}])));
    neither["metadata"]["resourceVersion"] = json!("12");
    w.claims.apply(to_claim(neither));
    let (_, s) = w.pre_filter(&pod("p", true));
    assert_eq!(
        s.message(),
        "resource claim default/p-gpu, request gpu: unknown request type"
    );
    let mut good = claim("p", None);
    good["metadata"]["resourceVersion"] = json!("13");
    w.claims.apply(to_claim(good));
    let (mut state, s) = w.pre_filter(&pod("p", true));
    assert!(s.is_success(), "{s}");
    assert!(pre_score(&mut state, &pod("p", true)).is_success());
}

#[test]
fn filter_allocates_on_the_node_whose_device_matches() {
    let w = world();
    w.claims.apply(to_claim(claim("p", None)));
    let p = pod("p", true);
    let (state, s) = w.pre_filter(&p);
    assert!(s.is_success(), "{s}");
    assert_eq!(w.filter(&state, &p), [fits(), cannot()]);
    // A model no node has.
    let mut t4 = claim("q", Some(json!([request("gpu", "h100")])));
    t4["metadata"]["uid"] = json!("uid-q-gpu");
    w.claims.apply(to_claim(t4));
    let q = pod("q", true);
    let (state, _) = w.pre_filter(&q);
    assert_eq!(w.filter(&state, &q), [cannot(), cannot()]);
}

#[test]
fn filter_gives_up_at_the_filter_timeout_with_an_error() {
    let mut w = world();
    w.plugin = DynamicResources::new(
        DynamicResourcesArgs {
            filter_timeout: Duration::from_nanos(1),
            ..DynamicResourcesArgs::default()
        },
        w.claims.clone(),
    );
    w.claims.apply(to_claim(claim("p", None)));
    let p = pod("p", true);
    let (state, s) = w.pre_filter(&p);
    assert!(s.is_success(), "{s}");
    let timed_out = |n: &str| {
        (
            Code::Error,
            format!("node {n}: timed out trying to allocate devices"),
        )
    };
    assert_eq!(w.filter(&state, &p), [timed_out("n1"), timed_out("n2")]);
}

/// A virtual node passes when no claim is allocated in the host (its leaf allocates, as
/// the leaf check judges), and Reserve puts nothing in flight there; a claim allocated
/// in the host keeps the pod off every leaf.
#[test]
fn virtual_nodes_pass_unless_a_claim_is_allocated_in_the_host() {
    let mut w = world();
    let vn = node_with("mcsched-east", |n| {
        n.metadata.labels.get_or_insert_default().insert(
            mcsched_shared::keys::CLUSTER_LABEL.to_string(),
            "east".to_string(),
        );
    });
    assert!(vn.cluster.is_some());
    w.snapshot = Snapshot {
        devices: w.snapshot.devices.clone(),
        ..Snapshot::from_nodes(vec![Arc::new(vn)])
    };
    w.claims.apply(to_claim(claim("p", None)));
    let p = pod("p", true);
    let (mut state, _) = w.pre_filter(&p);
    assert_eq!(w.filter(&state, &p), [fits()]);
    let s = w.plugin.reserve(&mut state, &p, "mcsched-east");
    assert!(s.is_success(), "{s}");
    assert!(w.claims.pending_allocation("uid-p-gpu").is_none());

    let mut allocated = claim("q", None);
    allocated["status"] = json!({"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]}
    }});
    w.claims.apply(to_claim(allocated));
    let q = pod("q", true);
    let (state, _) = w.pre_filter(&q);
    assert_eq!(
        w.filter(&state, &q),
        [(
            Code::UnschedulableAndUnresolvable,
            REASON_ALLOCATED_IN_HOST.to_string()
        )]
    );
}

/// Given claims (the leaf check's) are judged instead of the pod's own, against the
/// devices the given tracker holds, and Filter's allocation names the devices.
#[test]
fn given_claims_are_allocated_against_their_own_tracker() {
    let w = world();
    // The host tracker knows nothing of the pod's claim: PreFilter would refuse it.
    let p = pod("p", true);
    let (_, s) = w.pre_filter(&p);
    assert_eq!(s.code, Code::UnschedulableAndUnresolvable, "{s}");
    let held = ResourceClaims::new();
    let mut other = claim("other", None);
    other["status"] = json!({"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]}
    }});
    held.apply(to_claim(other));
    let mut state = CycleState::new();
    state.write(
        GIVEN_CLAIMS_KEY,
        GivenClaims {
            claims: vec![to_claim(claim("p", Some(json!([request("gpu", "t4")]))))],
            held: held.clone(),
        },
    );
    let (_, s) = w.plugin.pre_filter(&mut state, &p, &w.snapshot);
    assert!(s.is_success(), "{s}");
    assert_eq!(w.filter(&state, &p), [cannot(), fits()]);
    let on_n2 = allocated_on(&state, "n2");
    assert_eq!(
        devices_of(&on_n2),
        ["claim default/p-gpu, request gpu: device gpu.example.com/n2/gpu-0"]
    );
    assert!(allocated_on(&state, "n1").is_empty());
    // n1's a100 is held by the given tracker's claim, not the host's.
    let mut state = CycleState::new();
    state.write(
        GIVEN_CLAIMS_KEY,
        GivenClaims {
            claims: vec![to_claim(claim("p", None))],
            held,
        },
    );
    let (_, s) = w.plugin.pre_filter(&mut state, &p, &w.snapshot);
    assert!(s.is_success(), "{s}");
    assert_eq!(w.filter(&state, &p), [cannot(), cannot()]);
}

/// An allocated claim is available only where its node selector says.
#[test]
fn an_allocated_claim_keeps_the_pod_to_its_node() {
    let w = world();
    let mut allocated = claim("p", None);
    allocated["status"] = json!({"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}
    }});
    w.claims.apply(to_claim(allocated));
    let p = pod("p", true);
    let (state, s) = w.pre_filter(&p);
    assert!(s.is_success(), "{s}");
    assert_eq!(
        w.filter(&state, &p),
        [
            fits(),
            (
                Code::UnschedulableAndUnresolvable,
                REASON_NOT_AVAILABLE.to_string()
            )
        ]
    );
    let s = state.read::<State>(STATE_KEY).expect("state");
    assert_eq!(*locked(&s.unavailable), BTreeSet::from([0]));
}

/// Reserve puts the allocation in flight: a second pod's claim for the same device fits
/// nowhere until Unreserve drops it.
#[test]
fn reserve_keeps_the_device_from_the_next_pod_until_unreserve() {
    let w = world();
    w.claims.apply(to_claim(claim("p", None)));
    w.claims.apply(to_claim(claim("q", None)));
    let (p, q) = (pod("p", true), pod("q", true));
    let (mut state, _) = w.pre_filter(&p);
    assert_eq!(w.filter(&state, &p), [fits(), cannot()]);
    assert!(w.plugin.reserve(&mut state, &p, "n1").is_success());
    assert!(w.claims.pending_allocation("uid-p-gpu").is_some());
    let (q_state, _) = w.pre_filter(&q);
    assert_eq!(w.filter(&q_state, &q), [cannot(), cannot()]);
    // p's own claim, in flight, makes a retry of p wait.
    let (_, again) = w.pre_filter(&p);
    assert_eq!(
        again.message(),
        "resource claim default/p-gpu is in the process of being allocated"
    );
    w.plugin.unreserve(&mut state, &p, "n1");
    assert!(w.claims.pending_allocation("uid-p-gpu").is_none());
    let (q_state, _) = w.pre_filter(&q);
    assert_eq!(w.filter(&q_state, &q), [fits(), cannot()]);
    // Reserve on a node Filter did not pass is an internal error.
    let (mut state, _) = w.pre_filter(&p);
    let s = w.plugin.reserve(&mut state, &p, "n2");
    assert_eq!(
        (s.code, s.message()),
        (Code::Error, "claim allocation not found for node".into())
    );
}

/// Score: a prioritized list scores its first subrequest highest (8, then 7, ...).
#[test]
fn score_prefers_earlier_subrequests_of_a_prioritized_list() {
    let w = world();
    let sub = |name: &str, model: &str| {
        json!({"name": name, "deviceClassName": DRIVER, "allocationMode": "ExactCount",
            "count": 1, "selectors": [{"cel": {
            "expression": format!("device.attributes[{DRIVER:?}].model == {model:?}")}}]})
    };
    w.claims.apply(to_claim(claim(
        "p",
        Some(json!([{"name": "gpu", "firstAvailable": [sub("big", "a100"), sub("small", "t4")]}])),
    )));
    let p = pod("p", true);
    let (state, s) = w.pre_filter(&p);
    assert!(s.is_success(), "{s}");
    assert_eq!(w.filter(&state, &p), [fits(), fits()]);
    let mut scores: Vec<i64> = (w.snapshot.nodes.iter())
        .map(|n| w.plugin.score(&state, &p, n).expect("score"))
        .collect();
    assert_eq!(scores, [8, 7]);
    assert!(w.plugin.normalize(&state, &p, &mut scores).is_success());
    assert_eq!(scores, [100, 87]);
}

/// An API server that answers every write with the object it got, at a new resource
/// version, and records (method, path, body); `conflicts` status updates first get 409.
/// The requests an API server got: (method, path, body).
type Request = (String, String, Value);
type Requests = Arc<Mutex<Vec<Request>>>;

fn recording_api(conflicts: usize) -> (BindContext, Requests) {
    let seen: Requests = Arc::default();
    let conflicts = Arc::new(AtomicUsize::new(conflicts));
    let log = seen.clone();
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let (log, conflicts) = (log.clone(), conflicts.clone());
        async move {
            let method = req.method().to_string();
            let path = req.uri().path().to_string();
            let bytes = body_bytes(req.into_body()).await;
            let mut body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let n = {
                let mut l = locked(&log);
                l.push((method.clone(), path.clone(), body.clone()));
                l.len()
            };
            let (code, reply) = if method == "GET" {
                (200, to_value_claim("p"))
            } else if method == "POST" {
                // The API server's generated name and UID.
                let base = body["metadata"]["generateName"]
                    .as_str()
                    .unwrap_or_default();
                body["metadata"]["name"] = json!(format!("{base}x7k2p"));
                body["metadata"]["uid"] = json!("uid-created");
                body["metadata"]["resourceVersion"] = json!(format!("{}", 100 + n));
                (201, body)
            } else if path.contains("/pods/") {
                (
                    200,
                    json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "p", "namespace": "default"}}),
                )
            } else if method == "DELETE" {
                (
                    200,
                    json!({"apiVersion": "v1", "kind": "Status", "status": "Success"}),
                )
            } else if path.ends_with("/status")
                && conflicts
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| c.checked_sub(1))
                    .is_ok()
            {
                (
                    409,
                    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                        "reason": "Conflict", "code": 409, "message": "the object has been modified"}),
                )
            } else {
                body["metadata"]["resourceVersion"] = json!(format!("{}", 100 + n));
                (200, body)
            };
            Ok::<_, std::convert::Infallible>(
                http::Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(
                        serde_json::to_vec(&reply).expect("json"),
                    ))
                    .expect("response"),
            )
        }
    });
    let ctx = BindContext {
        client: kube::Client::new(service, "default"),
        content_type: mcsched_wire::ContentType::Json,
    };
    (ctx, seen)
}

fn to_value_claim(pod: &str) -> Value {
    let mut c = claim(pod, None);
    c["apiVersion"] = json!("resource.k8s.io/v1");
    c["kind"] = json!("ResourceClaim");
    c
}

async fn body_bytes(body: kube::client::Body) -> Vec<u8> {
    body.collect_bytes()
        .await
        .map(|b| b.to_vec())
        .unwrap_or_default()
}

/// PreBind writes as kube's bindClaim: the finalizer by an update, then the allocation,
/// its timestamp and the pod's reservation by a status update; the claim written is
/// assumed and leaves the in-flight set. A conflict re-reads the claim and tries again.
#[tokio::test]
async fn pre_bind_writes_allocation_and_reservation_as_kube() {
    let w = world();
    w.claims.apply(to_claim(claim("p", None)));
    let p = pod("p", true);
    let (mut state, _) = w.pre_filter(&p);
    assert_eq!(w.filter(&state, &p), [fits(), cannot()]);
    assert!(w.plugin.reserve(&mut state, &p, "n1").is_success());
    let (ctx, seen) = recording_api(1);
    let s = w.plugin.pre_bind(&ctx, &state, &p, "n1").await;
    assert!(s.is_success(), "{s}");
    let seen = locked(&seen).clone();
    let calls: Vec<(&str, &str)> = seen
        .iter()
        .map(|(m, p, _)| (m.as_str(), p.as_str()))
        .collect();
    let at = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/p-gpu";
    let status = format!("{at}/status");
    assert_eq!(
        calls,
        [
            ("PUT", at),
            ("PUT", status.as_str()),
            ("GET", at),
            ("PUT", at),
            ("PUT", status.as_str())
        ]
    );
    let (_, _, finalized) = &seen[0];
    assert_eq!(
        finalized["metadata"]["finalizers"],
        json!(["resource.kubernetes.io/delete-protection"])
    );
    let (_, _, written) = &seen[4];
    assert_eq!(
        written["status"]["reservedFor"],
        json!([{"resource": "pods", "name": "p", "uid": "uid-p"}])
    );
    let allocation = &written["status"]["allocation"];
    assert_eq!(
        allocation["devices"]["results"][0]["device"],
        json!("gpu-0")
    );
    assert_eq!(allocation["devices"]["results"][0]["pool"], json!("n1"));
    assert!(
        allocation["allocationTimestamp"].is_string(),
        "{allocation}"
    );
    // Assumed as written; no longer in flight.
    assert!(w.claims.pending_allocation("uid-p-gpu").is_none());
    let assumed = w.claims.get("default", "p-gpu").expect("claim");
    assert_eq!(assumed.metadata.resource_version.as_deref(), Some("105"));
    assert!(allocation_of(&assumed).is_some());
    // The device stays taken for the next pod.
    w.claims.apply(to_claim(claim("q", None)));
    let q = pod("q", true);
    let (q_state, _) = w.pre_filter(&q);
    assert_eq!(w.filter(&q_state, &q), [cannot(), cannot()]);
}

/// A claim already reserved for the pod is not written again.
#[tokio::test]
async fn pre_bind_leaves_a_claim_already_reserved_for_the_pod() {
    let w = world();
    let mut reserved = claim("p", None);
    reserved["status"] = json!({
        "allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]}},
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "uid-p"}]
    });
    w.claims.apply(to_claim(reserved));
    let p = pod("p", true);
    let (mut state, s) = w.pre_filter(&p);
    assert!(s.is_success(), "{s}");
    assert!(w.plugin.reserve(&mut state, &p, "n1").is_success());
    let (ctx, seen) = recording_api(0);
    assert!(w.plugin.pre_bind(&ctx, &state, &p, "n1").await.is_success());
    assert!(locked(&seen).is_empty());
}

#[test]
fn binding_conditions_decide_readiness_as_kube() {
    let mut c = claim("p", None);
    c["status"] = json!({"allocation": {"devices": {"results": [{"request": "gpu",
        "driver": DRIVER, "pool": "n1", "device": "gpu-0",
        "bindingConditions": ["Attached"], "bindingFailureConditions": ["Failed"]}]}}});
    let not_yet: ResourceClaim = serde_json::from_value(c.clone()).expect("claim");
    assert_eq!(bind::ready_for_binding(&not_yet), Ok(false));
    let with = |conditions: Value| -> ResourceClaim {
        let mut c = c.clone();
        c["status"]["devices"] =
            json!([{"driver": DRIVER, "pool": "n1", "device": "gpu-0", "conditions": conditions}]);
        serde_json::from_value(c).expect("claim")
    };
    let cond = |t: &str, s: &str| {
        json!({"type": t, "status": s, "reason": "R", "message": "m",
            "lastTransitionTime": "2026-01-01T00:00:00Z"})
    };
    assert_eq!(
        bind::ready_for_binding(&with(json!([cond("Attached", "True")]))),
        Ok(true)
    );
    assert_eq!(
        bind::ready_for_binding(&with(json!([cond("Attached", "False")]))),
        Ok(false)
    );
    assert_eq!(
        bind::ready_for_binding(&with(json!([cond("Failed", "True")]))),
        Err("device binding failed: claim=p-gpu, reason=R, message=\"m\"".into())
    );
}

/// A framework with DynamicResources at PostFilter, writing with `api` when given.
fn framework(api: Option<BindContext>) -> Framework {
    let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let spec = crate::framework::ProfileSpec {
        scheduler_name: "test".into(),
        queue_sort: names(&["PrioritySort"]),
        post_filter: names(&[NAME]),
        bind: names(&["DefaultBinder"]),
        ..Default::default()
    };
    let fw = Framework::new(&spec, &crate::plugins::default_registry(), 1).expect("framework");
    if let Some(api) = api {
        fw.set_api(api);
    }
    fw
}

/// p's claim allocated on n2 (which has no matching device, so nothing can be allocated
/// anew there either), reserved for `reserved` pods by UID.
fn claim_allocated_on_n2(reserved: &[&str]) -> Arc<ResourceClaim> {
    let mut c = to_value_claim("p");
    c["status"] = json!({
        "allocation": {
            "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n2", "device": "gpu-0"}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]}
        },
        "reservedFor": reserved.iter().map(|uid| json!({"resource": "pods", "name": "x", "uid": uid})).collect::<Vec<_>>(),
        "devices": [{"driver": DRIVER, "pool": "n2", "device": "gpu-0"}]
    });
    to_claim(c)
}

/// Runs Filter on every node, then PostFilter as the scheduling cycle does (inside
/// block_in_place, on a multi-threaded runtime).
fn post_filter_after_filter(w: &World, fw: &Framework, p: &PodInfo) -> (Code, String) {
    let (state, s) = w.pre_filter(p);
    assert!(s.is_success(), "{s}");
    w.filter(&state, p);
    let statuses = NodeStatuses::default();
    let (_, s) =
        tokio::task::block_in_place(|| w.plugin.post_filter(fw, &state, p, &w.snapshot, &statuses));
    (s.code, s.message())
}

/// PostFilter for pod p with `claim` in the tracker, the API answering `conflicts` status
/// updates with 409 first: its (code, message) and the requests the API got.
fn post_filter_with(claim: Arc<ResourceClaim>, conflicts: usize) -> ((Code, String), Vec<Request>) {
    let w = world();
    w.claims.apply(claim);
    let (ctx, seen) = recording_api(conflicts);
    let fw = framework(Some(ctx));
    let verdict = post_filter_after_filter(&w, &fw, &pod("p", true));
    let seen = locked(&seen).clone();
    (verdict, seen)
}

/// kube's PostFilter: an allocated claim that kept the pod off a node and that only this
/// pod (or nobody) uses is deallocated by a status update at the version the cycle saw;
/// the attempt still ends Unschedulable, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_filter_deallocates_a_claim_no_other_pod_uses() {
    for reserved in [vec![], vec!["uid-p"]] {
        let (verdict, seen) = post_filter_with(claim_allocated_on_n2(&reserved), 0);
        assert_eq!(
            verdict,
            (Code::Unschedulable, REASON_DEALLOCATED.to_string()),
            "reserved for {reserved:?}"
        );
        assert_eq!(seen.len(), 1, "{seen:?}");
        let (method, path, body) = &seen[0];
        assert_eq!(
            (method.as_str(), path.as_str()),
            (
                "PUT",
                "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/p-gpu/status"
            )
        );
        assert_eq!(body["metadata"]["resourceVersion"], json!("10"));
        for field in ["allocation", "reservedFor", "devices"] {
            assert!(body["status"].get(field).is_none(), "{field} kept: {body}");
        }
    }
}

/// A claim another pod uses is left alone: Unschedulable with no reason, nothing written.
/// A pod whose claims were all available is not PostFilter's business either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_filter_leaves_a_claim_another_pod_uses() {
    for reserved in [vec!["uid-other"], vec!["uid-p", "uid-other"]] {
        let (verdict, seen) = post_filter_with(claim_allocated_on_n2(&reserved), 0);
        assert_eq!(
            verdict,
            (Code::Unschedulable, String::new()),
            "reserved for {reserved:?}"
        );
        assert!(seen.is_empty(), "{seen:?}");
    }
    // Unallocated, so nothing unavailable: nothing to deallocate.
    let (verdict, seen) = post_filter_with(to_claim(claim("p", None)), 0);
    assert_eq!(verdict, (Code::Unschedulable, String::new()));
    assert!(seen.is_empty(), "{seen:?}");
}

/// A failed write ends the attempt in the API server's error, as kube's statusError.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_filter_reports_a_failed_deallocation_as_an_error() {
    let (verdict, _) = post_filter_with(claim_allocated_on_n2(&[]), 1);
    assert_eq!(
        verdict,
        (Code::Error, "the object has been modified".to_string())
    );
    let w = world();
    w.claims.apply(claim_allocated_on_n2(&[]));
    let (code, message) = post_filter_after_filter(&w, &framework(None), &pod("p", true));
    assert_eq!(code, Code::Error);
    assert!(message.contains("default/p-gpu"), "{message}");
}

/// A class serving `example.com/gpu` with a100s only.
fn a100_class(name: &str, created: &str) -> Arc<DeviceClass> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"extendedResourceName": "example.com/gpu", "selectors": [{"cel": {
                "expression": format!("device.attributes[{DRIVER:?}].model == \"a100\"")}}]}
        }))
        .expect("class"),
    )
}

/// As `world`, with the class `a100` serving `example.com/gpu`, and n3 whose device
/// plugin lists two.
fn extended_world() -> World {
    let mut w = world();
    let mut devices = (*w.snapshot.devices).clone();
    devices
        .classes
        .insert("a100".into(), a100_class("a100", "2026-01-01T00:00:00Z"));
    let mut nodes: Vec<Arc<NodeInfo>> = w.snapshot.nodes.iter().cloned().collect();
    nodes.push(Arc::new(node_with("n3", |n| {
        if let Some(a) = n.status.as_mut().and_then(|s| s.allocatable.as_mut()) {
            a.insert("example.com/gpu".into(), Quantity("2".into()));
        }
    })));
    w.snapshot = Snapshot {
        devices: Arc::new(devices),
        ..Snapshot::from_nodes(nodes)
    };
    w
}

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Pod `name` whose one container requests `example.com/gpu: count`, without claims.
fn gpu_pod(name: &str, count: &str) -> PodInfo {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"containers": [{"name": "c", "image": "i",
            "resources": {"requests": {"example.com/gpu": count}, "limits": {"example.com/gpu": count}}}]}
    }))
    .expect("pod");
    PodInfo::new(Arc::new(pod))
}

/// kube's extended resource cache: a class's explicit name first, the newest class when
/// several name it (the smallest name on a tie), else the implicit name.
#[test]
fn extended_resources_map_to_classes_as_kubes_cache() {
    let mut devices = DeviceObjects::default();
    let name = |d: &DeviceObjects, r: &str| {
        d.class_for_extended_resource(r)
            .and_then(|c| c.metadata.name.clone())
    };
    devices
        .classes
        .insert("old".into(), a100_class("old", "2026-01-01T00:00:00Z"));
    assert_eq!(name(&devices, "example.com/gpu").as_deref(), Some("old"));
    devices
        .classes
        .insert("new".into(), a100_class("new", "2026-02-01T00:00:00Z"));
    assert_eq!(name(&devices, "example.com/gpu").as_deref(), Some("new"));
    devices
        .classes
        .insert("b-tie".into(), a100_class("b-tie", "2026-02-01T00:00:00Z"));
    devices
        .classes
        .insert("a-tie".into(), a100_class("a-tie", "2026-02-01T00:00:00Z"));
    assert_eq!(name(&devices, "example.com/gpu").as_deref(), Some("a-tie"));
    // Every class, by its implicit name.
    assert_eq!(
        name(&devices, "deviceclass.resource.kubernetes.io/old").as_deref(),
        Some("old")
    );
    assert_eq!(
        name(&devices, "deviceclass.resource.kubernetes.io/none"),
        None
    );
    assert_eq!(name(&devices, "example.com/fpga"), None);
    assert!(crate::dra_state::is_dra_extended_resource_name(
        "example.com/gpu"
    ));
    assert!(crate::dra_state::is_dra_extended_resource_name(
        "deviceclass.resource.kubernetes.io/old"
    ));
    assert!(!crate::dra_state::is_dra_extended_resource_name("cpu"));
    assert!(!crate::dra_state::is_dra_extended_resource_name(
        "kubernetes.io/batch"
    ));
    assert!(!crate::dra_state::is_dra_extended_resource_name(
        "requests.example.com/gpu"
    ));
}

/// Filter: the in-memory claim asks, on nodes whose allocatable lacks the resource, for
/// one device of the class; the device plugin's node fits without DRA.
#[test]
fn extended_resource_filter_allocates_where_allocatable_lacks_it() {
    let w = extended_world();
    let p = gpu_pod("p", "1");
    let (state, s) = w.pre_filter(&p);
    assert!(s.is_success(), "{s}");
    assert_eq!(w.filter(&state, &p), [fits(), cannot(), fits()]);
    let st = state.read::<State>(STATE_KEY).expect("state");
    let by_node = locked(&st.extended_by_node);
    assert_eq!(by_node.keys().collect::<Vec<_>>(), ["n1"]);
    let n1 = &by_node["n1"];
    let requests = serde_json::to_value(&n1.claim.spec).expect("json");
    assert_eq!(
        requests["devices"]["requests"],
        json!([{"name": "container-0-request-0", "exactly": {
            "deviceClassName": "a100", "allocationMode": "ExactCount", "count": 1}}])
    );
    let allocated = serde_json::to_value(&n1.allocation).expect("json");
    assert_eq!(
        allocated["devices"]["results"],
        json!([{"request": "container-0-request-0", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}])
    );
    assert_eq!(
        serde_json::to_value(&n1.mappings).expect("json"),
        json!([{"containerName": "c", "resourceName": "example.com/gpu",
            "requestName": "container-0-request-0"}])
    );
    // Two: more than n1's one a100; n3's device plugin has two.
    let two = gpu_pod("p", "2");
    let (state, _) = w.pre_filter(&two);
    assert_eq!(w.filter(&state, &two), [cannot(), cannot(), fits()]);
    // No class serves it: nothing for DynamicResources.
    let fpga: Pod = serde_json::from_value(json!({
        "metadata": {"name": "f", "namespace": "default", "uid": "uid-f"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"example.com/fpga": "1"}}}]}
    }))
    .expect("pod");
    let (_, s) = w.pre_filter(&PodInfo::new(Arc::new(fpga)));
    assert!(s.is_skip());
    // A served resource with another that neither a class nor the node serves.
    let both: Pod = serde_json::from_value(json!({
        "metadata": {"name": "b", "namespace": "default", "uid": "uid-b"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {
            "example.com/gpu": "1", "example.com/fpga": "1"}}}]}
    }))
    .expect("pod");
    let both = PodInfo::new(Arc::new(both));
    let (state, _) = w.pre_filter(&both);
    let unfit = (
        Code::UnschedulableAndUnresolvable,
        extended::REASON_CANNOT_FIT.to_string(),
    );
    assert_eq!(
        w.filter(&state, &both),
        [unfit.clone(), unfit.clone(), unfit]
    );
}

/// kube's "three init containers, one sidecar, one regular container": an init
/// container reuses a later sidecar's devices, the largest init request is shared.
#[test]
fn extended_resource_requests_for_init_containers_and_sidecars_as_kube() {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {
            "initContainers": [
                {"name": "i0", "resources": {"requests": {"example.com/gpuinit": "1"}}},
                {"name": "s1", "restartPolicy": "Always",
                    "resources": {"requests": {"example.com/gpuinit": "1"}}},
                {"name": "i2", "resources": {"requests": {"example.com/gpuinit": "2"}}}],
            "containers": [{"name": "c3", "resources": {"requests": {"example.com/gpu": "1"}}}]}
    }))
    .expect("pod");
    let needed = BTreeMap::from([
        ("example.com/gpu".to_string(), 1),
        ("example.com/gpuinit".to_string(), 2),
    ]);
    let classes = BTreeMap::from([
        ("example.com/gpu".to_string(), "class".to_string()),
        ("example.com/gpuinit".to_string(), "classInit".to_string()),
    ]);
    let (requests, mappings) = extended::requests_and_mappings(&pod, &needed, &classes);
    let got: Vec<(String, String, i64)> = requests
        .iter()
        .map(|r| {
            let e = r.exactly.as_ref().expect("exactly");
            (
                r.name.clone(),
                e.device_class_name.clone(),
                e.count.unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("container-1-request-0".into(), "classInit".into(), 1),
            ("container-2-request-0".into(), "classInit".into(), 2),
            ("container-3-request-0".into(), "class".into(), 1),
        ]
    );
    let got: Vec<(&str, &str, &str)> = (mappings.iter())
        .map(|m| {
            (
                m.container_name.as_str(),
                m.resource_name.as_str(),
                m.request_name.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("c3", "example.com/gpu", "container-3-request-0"),
            ("s1", "example.com/gpuinit", "container-1-request-0"),
            ("i0", "example.com/gpuinit", "container-1-request-0"),
            ("i2", "example.com/gpuinit", "container-2-request-0"),
        ]
    );
}

/// Reserve holds the extended claim's device in flight; Unreserve lets it go.
#[test]
fn extended_resource_reserve_and_unreserve() {
    let w = extended_world();
    let (p, q) = (gpu_pod("p", "1"), gpu_pod("q", "1"));
    let (mut state, _) = w.pre_filter(&p);
    assert_eq!(w.filter(&state, &p), [fits(), cannot(), fits()]);
    assert!(w.plugin.reserve(&mut state, &p, "n1").is_success());
    let uid = state
        .read::<State>(STATE_KEY)
        .and_then(|s| s.extended.clone())
        .expect("ext");
    assert!(w.claims.pending_allocation(uid.uid()).is_some());
    let (q_state, _) = w.pre_filter(&q);
    assert_eq!(w.filter(&q_state, &q), [cannot(), cannot(), fits()]);
    w.plugin.unreserve(&mut state, &p, "n1");
    assert!(w.claims.pending_allocation(uid.uid()).is_none());
    let (q_state, _) = w.pre_filter(&q);
    assert_eq!(w.filter(&q_state, &q), [fits(), cannot(), fits()]);
    // On the device plugin's node nothing is held or written.
    let (mut state, _) = w.pre_filter(&p);
    let _ = w.filter(&state, &p);
    assert!(w.plugin.reserve(&mut state, &p, "n3").is_success());
    assert!(
        state
            .read::<State>(STATE_KEY)
            .is_some_and(|s| s.extended_reserved.is_none())
    );
}

/// PreBind as kube's bindClaim for the extended claim: create (generateName, owner,
/// annotation, the node's requests; no allocation), the finalizer, the allocation and
/// reservation in status, then the pod's extendedResourceClaimStatus. Unreserve
/// deletes the claim it created (the finalizer first).
#[tokio::test(start_paused = true)]
async fn extended_resource_pre_bind_creates_the_claim_as_kube() {
    let w = extended_world();
    let p = gpu_pod("p", "1");
    let (mut state, _) = w.pre_filter(&p);
    let _ = w.filter(&state, &p);
    assert!(w.plugin.reserve(&mut state, &p, "n1").is_success());
    let (ctx, seen) = recording_api(0);
    let log = seen.clone();
    let s = w.plugin.pre_bind(&ctx, &state, &p, "n1").await;
    assert!(s.is_success(), "{s}");
    let calls: Vec<(String, String)> = (locked(&seen).iter())
        .map(|(m, p, _)| (m.clone(), p.clone()))
        .collect();
    let claims = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims";
    let created = format!("{claims}/p-extended-resources-x7k2p");
    assert_eq!(
        calls,
        [
            ("POST".to_string(), claims.to_string()),
            ("PUT".into(), created.clone()),
            ("PUT".into(), format!("{created}/status")),
            (
                "PATCH".into(),
                "/api/v1/namespaces/default/pods/p/status".into()
            ),
        ]
    );
    let seen = locked(&seen).clone();
    let body = &seen[0].2;
    assert_eq!(
        body["metadata"]["generateName"],
        json!("p-extended-resources-")
    );
    assert!(body["metadata"].get("name").is_none() && body["metadata"].get("uid").is_none());
    assert_eq!(
        body["metadata"]["annotations"],
        json!({"resource.kubernetes.io/extended-resource-claim": "true"})
    );
    assert_eq!(
        body["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-p", "controller": true}])
    );
    assert!(body.get("status").is_none(), "{body}");
    assert_eq!(
        seen[1].2["metadata"]["finalizers"],
        json!(["resource.kubernetes.io/delete-protection"])
    );
    let status = &seen[2].2["status"];
    assert_eq!(
        status["reservedFor"],
        json!([{"resource": "pods", "name": "p", "uid": "uid-p"}])
    );
    assert_eq!(
        status["allocation"]["devices"]["results"][0]["request"],
        json!("container-0-request-0")
    );
    assert_eq!(
        seen[3].2,
        json!({"status": {"extendedResourceClaimStatus": {
            "requestMappings": [{"containerName": "c", "resourceName": "example.com/gpu",
                "requestName": "container-0-request-0"}],
            "resourceClaimName": "p-extended-resources-x7k2p"}}})
    );
    let uid = state
        .read::<State>(STATE_KEY)
        .and_then(|s| s.extended.clone())
        .expect("ext");
    assert!(w.claims.pending_allocation(uid.uid()).is_none());
    // Unreserve after a later PreBind failed: the claim goes, the finalizer first.
    w.plugin.unreserve(&mut state, &p, "n1");
    for _ in 0..100 {
        if locked(&log).len() >= 6 {
            break;
        }
        tokio::task::yield_now().await;
    }
    let calls: Vec<(String, String)> = (locked(&log).iter().skip(4))
        .map(|(m, p, _)| (m.clone(), p.clone()))
        .collect();
    assert_eq!(
        calls,
        [
            ("PUT".to_string(), created.clone()),
            ("DELETE".into(), created)
        ]
    );
    assert_eq!(locked(&log)[4].2["metadata"]["finalizers"], json!([]));
}
