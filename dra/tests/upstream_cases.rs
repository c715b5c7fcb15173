//! kube's shared allocator test cases (k8s.io/dynamic-resource-allocation@v0.37.2,
//! structured/internal/allocatortesting), run against this allocator. tests/upstream/
//! generate.sh runs upstream's incubating allocator on each case, checking upstream's own
//! expectations on the way, and writes each case's inputs and outcome as a JSON line to
//! .build/dra-upstream-cases.jsonl (or `$MCSCHED_DRA_CASES`); this test runs it when that
//! file is missing. The cases are upstream's code, so they are generated, not committed.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{AllocationResult, DeviceClass, ResourceClaim, ResourceSlice};
use mcsched_dra::quantity::Quantity;
use mcsched_dra::{AllocatedState, Allocator, CelCache, DeviceId, Features, SharedDeviceId};
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Case {
    name: String,
    features: HashMap<String, bool>,
    #[serde(default)]
    skip: Option<String>,
    #[serde(default)]
    classes: Option<Vec<DeviceClass>>,
    #[serde(default)]
    claims: Option<Vec<ResourceClaim>>,
    #[serde(default)]
    allocated_devices: Option<Vec<[String; 3]>>,
    #[serde(default)]
    allocated_shared: Option<Vec<Share>>,
    #[serde(default)]
    allocated_capacity: Option<Vec<Capacity>>,
    #[serde(default)]
    slices: Option<Vec<ResourceSlice>>,
    node: Node,
    #[serde(default)]
    results: Option<Vec<AllocationResult>>,
    #[serde(default)]
    error: Option<String>,
    expectations_hold: bool,
    /// Upstream's count of placement attempts, for the cases that assert it.
    #[serde(default)]
    allocate_one_invocations: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Share {
    driver: String,
    pool: String,
    device: String,
    #[serde(rename = "ShareID")]
    share_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Capacity {
    driver: String,
    pool: String,
    device: String,
    capacity: HashMap<String, String>,
}

/// Cases whose outcome here differs from upstream's, and why.
const KNOWN_DIFFERENCES: &[(&str, &str)] = &[];

/// Cases the dump cannot carry, and why.
const LEFT_OUT: &[(&str, &str)] = &[(
    "consumable-capacity-requests-are-not-modified",
    "its quantity 1000000000000000000000 (10^21) prints as \"1\" in Go's JSON (resource.Quantity has no suffix for 10^21), so the dumped inputs are not the case's",
)];

fn features(set: &HashMap<String, bool>) -> Features {
    let on = |k: &str| set.get(k).copied().unwrap_or(false);
    let binding = on("DRADeviceBindingConditions+DRAResourceClaimDeviceStatus");
    Features {
        admin_access: on("DRAAdminAccess"),
        prioritized_list: on("DRAPrioritizedList"),
        partitionable_devices: on("DRAPartitionableDevices"),
        device_taints: on("DRADeviceTaints"),
        device_binding_conditions: binding,
        consumable_capacity: on("DRAConsumableCapacity"),
        device_status: binding,
        fractional_capacity_range: on("DRAFractionalCapacityRange"),
    }
}

/// JSON with nulls, empty lists and empty maps dropped, quantities canonical and share IDs
/// fixed, so that equal allocations compare equal.
fn normalize(v: Value, key: &str) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::Array(a) => {
            let a: Vec<Value> = a.into_iter().filter_map(|x| normalize(x, "")).collect();
            (!a.is_empty()).then_some(Value::Array(a))
        }
        Value::Object(m) => {
            let m: serde_json::Map<String, Value> = m
                .into_iter()
                .filter_map(|(k, x)| {
                    let x = if k == "consumedCapacity" {
                        quantities(x)
                    } else if k == "shareID" {
                        Value::String("fixed".into())
                    } else {
                        x
                    };
                    normalize(x, &k).map(|x| (k, x))
                })
                .collect();
            (!m.is_empty()).then_some(Value::Object(m))
        }
        Value::String(s) if s.is_empty() && key != "value" => None,
        other => Some(other),
    }
}

fn quantities(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, x)| {
                    let s = x
                        .as_str()
                        .and_then(|s| Quantity::parse(s).ok())
                        .map(|q| q.milli_value());
                    (k, s.map(|m| Value::String(format!("{m}m"))).unwrap_or(x))
                })
                .collect(),
        ),
        other => other,
    }
}

fn results_json(r: &[AllocationResult]) -> Value {
    normalize(serde_json::to_value(r).expect("results serialize"), "").unwrap_or(Value::Null)
}

/// Upstream's error text and ours are the same, except for what a missing class's lister
/// says (kube's test lister: `"not found" not found`; ours: the informer's
/// `deviceclass.resource.k8s.io "<name>" not found`).
fn error_matches(upstream: &str, ours: &str) -> bool {
    let marker = "could not retrieve device class";
    if let Some(i) = upstream.find(marker) {
        let end = i + marker.len();
        return ours.len() >= end && ours[..end] == upstream[..end];
    }
    upstream == ours
}

fn run(case: &Case) -> Result<(), String> {
    let classes: HashMap<String, Arc<DeviceClass>> = case
        .classes
        .iter()
        .flatten()
        .map(|c| {
            (
                c.metadata.name.clone().unwrap_or_default(),
                Arc::new(c.clone()),
            )
        })
        .collect();
    let slices: Vec<Arc<ResourceSlice>> = case
        .slices
        .iter()
        .flatten()
        .cloned()
        .map(Arc::new)
        .collect();
    let mut state = AllocatedState::default();
    for [d, p, n] in case.allocated_devices.iter().flatten() {
        state.allocated_devices.insert(DeviceId::new(d, p, n));
    }
    for s in case.allocated_shared.iter().flatten() {
        state.allocated_shared_device_ids.insert(SharedDeviceId {
            device: DeviceId::new(&s.driver, &s.pool, &s.device),
            share_id: s.share_id.clone(),
        });
    }
    for c in case.allocated_capacity.iter().flatten() {
        let entry = state
            .aggregated_capacity
            .entry(DeviceId::new(&c.driver, &c.pool, &c.device))
            .or_default();
        for (k, v) in &c.capacity {
            entry.insert(k.clone(), Quantity::parse(v).map_err(|e| e.to_string())?);
        }
    }
    let allocator = Allocator::new(
        features(&case.features),
        state,
        &classes,
        &slices,
        Arc::new(CelCache::new(1)),
    )
    .map_err(|e| format!("new: {e}"))?;
    let claims: Vec<&ResourceClaim> = case.claims.iter().flatten().collect();
    let got = allocator.allocate(&case.node, &claims);
    if let Some(want) = case.allocate_one_invocations {
        let ours = allocator.num_allocate_one_invocations();
        if ours != want {
            return Err(format!("placement attempts: upstream {want}, ours {ours}"));
        }
    }
    match (&case.error, got) {
        (Some(want), Err(e)) => {
            if error_matches(want, &e.to_string()) {
                Ok(())
            } else {
                Err(format!("error\n  upstream: {want}\n  ours:     {e}"))
            }
        }
        (Some(want), Ok(r)) => Err(format!(
            "upstream failed with {want:?}, ours returned {r:?}"
        )),
        (None, Err(e)) => Err(format!("upstream succeeded, ours failed: {e}")),
        (None, Ok(got)) => {
            let want = case.results.clone().unwrap_or_default();
            let got = got.unwrap_or_default();
            let (w, g) = (results_json(&want), results_json(&got));
            if w == g {
                Ok(())
            } else {
                Err(format!("results\n  upstream: {w}\n  ours:     {g}"))
            }
        }
    }
}

/// The generated cases: `$MCSCHED_DRA_CASES`, else .build/dra-upstream-cases.jsonl,
/// written by generate.sh first when it is not there.
fn upstream_cases_text() -> String {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let path = std::env::var_os("MCSCHED_DRA_CASES")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo.join(".build/dra-upstream-cases.jsonl"));
    if !path.exists() {
        let script = repo.join("dra/tests/upstream/generate.sh");
        let out = std::process::Command::new("bash")
            .arg(&script)
            .arg(&path)
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "{} failed (it needs Go and the Go module proxy):\n{}{}",
            script.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

#[test]
fn upstream_allocator_cases() {
    let text = upstream_cases_text();
    let mut ported = 0;
    let mut passed = 0;
    let mut skipped = Vec::new();
    let mut failures = Vec::new();
    let mut known = Vec::new();
    for line in text.lines() {
        let case: Case = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("case does not parse: {e}: {line:.200}"));
        if let Some(why) = &case.skip {
            skipped.push(format!("{}: {why}", case.name));
            continue;
        }
        if let Some((_, why)) = LEFT_OUT.iter().find(|(n, _)| *n == case.name) {
            skipped.push(format!("{}: {why}", case.name));
            continue;
        }
        assert!(
            case.expectations_hold,
            "{}: upstream's own expectations do not hold",
            case.name
        );
        ported += 1;
        let outcome = run(&case);
        let known_reason = KNOWN_DIFFERENCES
            .iter()
            .find(|(n, _)| *n == case.name)
            .map(|(_, r)| *r);
        match (outcome, known_reason) {
            (Ok(()), None) => passed += 1,
            (Ok(()), Some(_)) => failures.push(format!(
                "{}: listed as a known difference but passes",
                case.name
            )),
            (Err(e), Some(reason)) => known.push(format!("{}: {reason} ({e})", case.name)),
            (Err(e), None) => failures.push(format!("{}: {e}", case.name)),
        }
    }
    println!(
        "upstream cases: {ported} ported, {passed} pass, {} known differences, {} left out",
        known.len(),
        skipped.len()
    );
    for k in &known {
        println!("known difference: {k}");
    }
    for s in &skipped {
        println!("left out: {s}");
    }
    assert!(ported > 0, "no case ported");
    assert!(
        failures.is_empty(),
        "{} of {ported} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
