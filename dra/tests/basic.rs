//! The allocator's basic path: ExactCount requests, class and request selectors in CEL,
//! node-local slices, what is in use already, and errors with kube's texts.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{AllocationResult, DeviceClass, ResourceClaim, ResourceSlice};
use mcsched_dra::{AllocateError, AllocatedState, Allocator, CelCache, DeviceId, Features};
use serde_json::{Value, json};

fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("test object")
}

fn node(name: &str) -> Node {
    from(json!({"metadata": {"name": name, "labels": {"zone": "a"}}}))
}

fn class(name: &str, selectors: &[&str]) -> Arc<DeviceClass> {
    let sel: Vec<Value> = selectors
        .iter()
        .map(|e| json!({"cel": {"expression": e}}))
        .collect();
    Arc::new(from(
        json!({"metadata": {"name": name}, "spec": {"selectors": sel}}),
    ))
}

fn slice(name: &str, node: &str, pool: &str, devices: Value) -> Arc<ResourceSlice> {
    Arc::new(from(json!({
        "metadata": {"name": name},
        "spec": {"driver": "driver.example.com", "nodeName": node,
                 "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices}
    })))
}

fn claim(name: &str, requests: Value) -> ResourceClaim {
    from(
        json!({"metadata": {"name": name, "namespace": "default"}, "spec": {"devices": {"requests": requests}}}),
    )
}

fn exact(name: &str, class: &str, count: i64, selectors: &[&str]) -> Value {
    let sel: Vec<Value> = selectors
        .iter()
        .map(|e| json!({"cel": {"expression": e}}))
        .collect();
    json!({"name": name, "exactly": {"deviceClassName": class, "allocationMode": "ExactCount", "count": count, "selectors": sel}})
}

fn gpus(models: &[(&str, &str)]) -> Value {
    Value::Array(
        models
            .iter()
            .map(|(n, m)| json!({"name": n, "attributes": {"model": {"string": m}}}))
            .collect(),
    )
}

fn allocator(
    classes: &[Arc<DeviceClass>],
    slices: &[Arc<ResourceSlice>],
    allocated: AllocatedState,
) -> Allocator {
    let classes: HashMap<String, Arc<DeviceClass>> = classes
        .iter()
        .map(|c| (c.metadata.name.clone().unwrap_or_default(), c.clone()))
        .collect();
    Allocator::new(
        Features::default(),
        allocated,
        &classes,
        slices,
        Arc::new(CelCache::new(16)),
    )
    .expect("allocator")
}

fn devices_of(r: &AllocationResult) -> Vec<(String, String)> {
    r.devices
        .as_ref()
        .and_then(|d| d.results.as_ref())
        .map(|rs| {
            rs.iter()
                .map(|x| (x.request.clone(), x.device.clone()))
                .collect()
        })
        .unwrap_or_default()
}

const GPU_CLASS: &str = r#"device.driver == "driver.example.com""#;

#[test]
fn exact_count_with_class_and_request_selectors() {
    let s = slice(
        "s1",
        "node-1",
        "pool-1",
        gpus(&[
            ("gpu-0", "h100"),
            ("gpu-1", "a100"),
            ("gpu-2", "a100"),
            ("gpu-3", "a100"),
        ]),
    );
    let a = allocator(
        &[class("gpu", &[GPU_CLASS])],
        &[s],
        AllocatedState::default(),
    );
    let c = claim(
        "c1",
        json!([exact(
            "req-0",
            "gpu",
            2,
            &[r#"device.attributes["driver.example.com"].model == "a100""#]
        )]),
    );
    let got = a.allocate(&node("node-1"), &[&c]).unwrap().expect("fits");
    assert_eq!(got.len(), 1);
    assert_eq!(
        devices_of(&got[0]),
        vec![
            ("req-0".to_string(), "gpu-1".to_string()),
            ("req-0".to_string(), "gpu-2".to_string())
        ]
    );
    // Node-local devices pin the claim to the node.
    let ns = got[0].node_selector.as_ref().expect("node selector");
    let field = &ns.node_selector_terms[0].match_fields.as_ref().unwrap()[0];
    assert_eq!(
        (field.key.as_str(), field.operator.as_str()),
        ("metadata.name", "In")
    );
    assert_eq!(field.values.as_deref(), Some(&["node-1".to_string()][..]));
}

#[test]
fn too_few_matching_devices_do_not_fit() {
    let s = slice(
        "s1",
        "node-1",
        "pool-1",
        gpus(&[("gpu-0", "h100"), ("gpu-1", "a100")]),
    );
    let a = allocator(
        &[class("gpu", &[GPU_CLASS])],
        &[s],
        AllocatedState::default(),
    );
    let c = claim(
        "c1",
        json!([exact(
            "req-0",
            "gpu",
            2,
            &[r#"device.attributes["driver.example.com"].model == "a100""#]
        )]),
    );
    assert_eq!(a.allocate(&node("node-1"), &[&c]).unwrap(), None);
}

#[test]
fn slices_of_other_nodes_are_not_used() {
    let s = slice("s1", "node-2", "pool-1", gpus(&[("gpu-0", "a100")]));
    let a = allocator(
        &[class("gpu", &[GPU_CLASS])],
        &[s],
        AllocatedState::default(),
    );
    let c = claim("c1", json!([exact("req-0", "gpu", 1, &[])]));
    assert_eq!(a.allocate(&node("node-1"), &[&c]).unwrap(), None);
    assert!(a.allocate(&node("node-2"), &[&c]).unwrap().is_some());
}

#[test]
fn class_selector_filters() {
    let s = slice(
        "s1",
        "node-1",
        "pool-1",
        gpus(&[("gpu-0", "h100"), ("gpu-1", "a100")]),
    );
    let a = allocator(
        &[class(
            "h100",
            &[r#"device.attributes["driver.example.com"].model == "h100""#],
        )],
        &[s],
        AllocatedState::default(),
    );
    let c = claim("c1", json!([exact("req-0", "h100", 1, &[])]));
    let got = a.allocate(&node("node-1"), &[&c]).unwrap().expect("fits");
    assert_eq!(devices_of(&got[0]), vec![("req-0".into(), "gpu-0".into())]);
}

#[test]
fn allocated_devices_and_earlier_claims_of_the_pod_are_in_use() {
    let s = slice(
        "s1",
        "node-1",
        "pool-1",
        gpus(&[("gpu-0", "a100"), ("gpu-1", "a100"), ("gpu-2", "a100")]),
    );
    let mut allocated = AllocatedState::default();
    allocated
        .allocated_devices
        .insert(DeviceId::new("driver.example.com", "pool-1", "gpu-0"));
    let a = allocator(&[class("gpu", &[GPU_CLASS])], &[s], allocated);
    let c1 = claim("c1", json!([exact("req-0", "gpu", 1, &[])]));
    let c2 = claim("c2", json!([exact("req-0", "gpu", 1, &[])]));
    let got = a
        .allocate(&node("node-1"), &[&c1, &c2])
        .unwrap()
        .expect("fits");
    assert_eq!(devices_of(&got[0]), vec![("req-0".into(), "gpu-1".into())]);
    assert_eq!(devices_of(&got[1]), vec![("req-0".into(), "gpu-2".into())]);
    let c3 = claim("c3", json!([exact("req-0", "gpu", 1, &[])]));
    assert_eq!(a.allocate(&node("node-1"), &[&c1, &c2, &c3]).unwrap(), None);
}

#[test]
fn add_allocation_marks_devices_in_use() {
    let s = slice(
        "s1",
        "node-1",
        "pool-1",
        gpus(&[("gpu-0", "a100"), ("gpu-1", "a100")]),
    );
    let a = allocator(
        &[class("gpu", &[GPU_CLASS])],
        std::slice::from_ref(&s),
        AllocatedState::default(),
    );
    let c1 = claim("c1", json!([exact("req-0", "gpu", 2, &[])]));
    let got = a.allocate(&node("node-1"), &[&c1]).unwrap().expect("fits");
    let mut state = AllocatedState::default();
    state.add_allocation(&got[0]);
    assert_eq!(state.allocated_devices.len(), 2);
    let a = allocator(&[class("gpu", &[GPU_CLASS])], &[s], state);
    assert_eq!(a.allocate(&node("node-1"), &[&c1]).unwrap(), None);
}

#[test]
fn unknown_class_is_an_error_with_kubes_text() {
    let s = slice("s1", "node-1", "pool-1", gpus(&[("gpu-0", "a100")]));
    let a = allocator(&[], &[s], AllocatedState::default());
    let c = claim("c1", json!([exact("req-0", "missing", 1, &[])]));
    let err = a.allocate(&node("node-1"), &[&c]).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"claim default/c1, request req-0: could not retrieve device class missing: deviceclass.resource.k8s.io "missing" not found"#
    );
}

#[test]
fn cel_errors_name_the_selector() {
    let s = slice("s1", "node-1", "pool-1", gpus(&[("gpu-0", "a100")]));
    let a = allocator(
        &[class("gpu", &[GPU_CLASS])],
        &[s],
        AllocatedState::default(),
    );
    let c = claim(
        "c1",
        json!([exact(
            "req-0",
            "gpu",
            1,
            &["device.attributes[\"driver.example.com\"].nosuch == 1"]
        )]),
    );
    let err = a.allocate(&node("node-1"), &[&c]).unwrap_err();
    assert!(matches!(err, AllocateError::Cel(_)));
    let text = err.to_string();
    assert!(
        text.starts_with("claim default/c1: selector #0 on device driver.example.com/pool-1/gpu-0: CEL runtime error: "),
        "{text}"
    );
    let c = claim(
        "c1",
        json!([exact("req-0", "gpu", 1, &["device.driver =="])]),
    );
    let text = a.allocate(&node("node-1"), &[&c]).unwrap_err().to_string();
    assert!(
        text.starts_with("claim default/c1: selector #0: CEL compile error: compilation failed: "),
        "{text}"
    );
}

#[test]
fn allocator_and_cache_are_shareable_across_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<Allocator>();
    shareable::<CelCache>();
    let s = slice(
        "s1",
        "node-1",
        "pool-1",
        gpus(&[("gpu-0", "a100"), ("gpu-1", "a100")]),
    );
    let a = Arc::new(allocator(
        &[class("gpu", &[GPU_CLASS])],
        &[s],
        AllocatedState::default(),
    ));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let a = a.clone();
            std::thread::spawn(move || {
                let c = claim("c1", json!([exact("req-0", "gpu", 2, &[])]));
                a.allocate(&node("node-1"), &[&c])
                    .map(|r| r.map(|v| devices_of(&v[0]).len()))
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().expect("thread"), Ok(Some(2)));
    }
}

fn pool_slice(name: &str, generation: i64, count: i64, devices: Value) -> Arc<ResourceSlice> {
    Arc::new(from(json!({
        "metadata": {"name": name},
        "spec": {"driver": "driver.example.com", "nodeName": "node-1",
                 "pool": {"name": "pool-1", "generation": generation, "resourceSliceCount": count},
                 "devices": devices}
    })))
}

#[test]
fn only_the_newest_pool_generation_counts_whatever_the_order() {
    let old = pool_slice("old", 1, 1, gpus(&[("gpu-old", "a100")]));
    let new = pool_slice("new", 2, 1, gpus(&[("gpu-new", "a100")]));
    let c = claim("c1", json!([exact("req-0", "gpu", 1, &[])]));
    for slices in [vec![old.clone(), new.clone()], vec![new, old]] {
        let a = allocator(
            &[class("gpu", &[GPU_CLASS])],
            &slices,
            AllocatedState::default(),
        );
        let got = a.allocate(&node("node-1"), &[&c]).unwrap().expect("fits");
        assert_eq!(
            devices_of(&got[0]),
            vec![("req-0".into(), "gpu-new".into())]
        );
        let two = claim("c2", json!([exact("req-0", "gpu", 2, &[])]));
        assert_eq!(a.allocate(&node("node-1"), &[&two]).unwrap(), None);
    }
}

#[test]
fn incomplete_pools_are_not_used_and_refuse_all_mode() {
    // Generation 1 says it has two slices; only one is published.
    let half = pool_slice("half", 1, 2, gpus(&[("gpu-0", "a100")]));
    let a = allocator(
        &[class("gpu", &[GPU_CLASS])],
        &[half],
        AllocatedState::default(),
    );
    let c = claim("c1", json!([exact("req-0", "gpu", 1, &[])]));
    assert_eq!(a.allocate(&node("node-1"), &[&c]).unwrap(), None);
    let all = claim(
        "c2",
        json!([{"name": "req-0", "exactly": {"deviceClassName": "gpu", "allocationMode": "All"}}]),
    );
    assert_eq!(
        a.allocate(&node("node-1"), &[&all])
            .unwrap_err()
            .to_string(),
        "claim default/c2, request req-0: asks for all devices, but resource pool driver.example.com/pool-1 is currently being updated"
    );
}

#[test]
fn a_deadline_aborts_the_search_with_kubes_text() {
    // kube's "interrupt" case: 6 of 5 devices, which the search needs many steps to refuse.
    let devices: Vec<(String, &str)> = (1..=5).map(|i| (format!("device-{i}"), "a100")).collect();
    let names: Vec<(&str, &str)> = devices.iter().map(|(n, m)| (n.as_str(), *m)).collect();
    let s = slice("s1", "node-1", "pool-1", gpus(&names));
    let a = allocator(
        &[class("gpu", &[GPU_CLASS])],
        &[s],
        AllocatedState::default(),
    );
    let c = claim("c1", json!([exact("req-0", "gpu", 6, &[])]));
    let past = std::time::Instant::now();
    let err = a.allocate_until(&node("node-1"), &[&c], past).unwrap_err();
    assert!(matches!(err, AllocateError::Aborted(_)));
    assert_eq!(
        err.to_string(),
        "filter operation aborted: context deadline exceeded"
    );
    let later = std::time::Instant::now() + std::time::Duration::from_secs(60);
    assert_eq!(
        a.allocate_until(&node("node-1"), &[&c], later).unwrap(),
        None
    );
}
