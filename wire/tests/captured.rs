//! Bytes captured from a real v1.36 API server (tests/data, `curl` through `kubectl
//! proxy` with `Accept: application/vnd.kubernetes.protobuf[;stream=watch]`): the same
//! pod and node in protobuf and in JSON decode to the same objects.

use k8s_openapi::api::core::v1::{Node, Pod};
use mcsched_wire::codec;
use mcsched_wire::schema::{self, Options};
use serde::de::DeserializeOwned;

fn data(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"))).expect("fixture")
}

/// Decoded straight into `K`, checked against the same bytes through the API server's
/// JSON (`to_json`, then serde): the two decoders must agree.
fn from_protobuf<K: DeserializeOwned + PartialEq + std::fmt::Debug>(
    bytes: &[u8],
    message: &str,
) -> K {
    let env = codec::decode(bytes).expect("envelope");
    decode(&env.raw, message, Options::default())
}

fn decode<K: DeserializeOwned + PartialEq + std::fmt::Debug>(
    raw: &[u8],
    message: &str,
    opts: Options,
) -> K {
    let direct: K = schema::schema().decode(message, raw, opts).expect("decode");
    let v = schema::schema()
        .to_json(message, raw, opts)
        .expect("transcode");
    let via_json: K = serde_json::from_value(v).expect("object");
    assert_eq!(
        direct, via_json,
        "the direct decode differs from the JSON one"
    );
    direct
}

#[test]
fn a_pod_decodes_the_same_from_protobuf_and_json() {
    let env = codec::decode(&data("pod.pb")).expect("envelope");
    assert_eq!((env.api_version.as_str(), env.kind.as_str()), ("v1", "Pod"));
    let pb: Pod = from_protobuf(&data("pod.pb"), "k8s.io.api.core.v1.Pod");
    let json: Pod = serde_json::from_slice(&data("pod.json")).expect("json");
    assert_eq!(pb, json);
    let spec = pb.spec.expect("spec");
    assert_eq!(spec.priority, Some(0), "a pointer's zero is kept");
    assert_eq!(spec.node_name, None, "an omitempty zero is dropped");
}

#[test]
fn a_node_decodes_the_same_from_protobuf_and_json() {
    let pb: Node = from_protobuf(&data("node.pb"), "k8s.io.api.core.v1.Node");
    let json: Node = serde_json::from_slice(&data("node.json")).expect("json");
    assert_eq!(pb, json);
}

#[test]
fn managed_fields_can_be_left_out() {
    let env = codec::decode(&data("pod.pb")).expect("envelope");
    let opts = Options {
        skip_managed_fields: true,
    };
    let pod: Pod = decode(&env.raw, "k8s.io.api.core.v1.Pod", opts);
    let mut json: Pod = serde_json::from_slice(&data("pod.json")).expect("json");
    assert!(json.metadata.managed_fields.is_some());
    json.metadata.managed_fields = None;
    assert_eq!(pod, json);
}

#[test]
fn a_watch_stream_is_length_framed_watch_events_of_enveloped_objects() {
    let mut frames = codec::Frames::default();
    frames.push(&data("watch.pb"));
    let mut seen = Vec::new();
    while let Some(frame) = frames.next_frame().expect("frame") {
        let ev = codec::decode_event(&frame).expect("event");
        let pod: Pod = decode(&ev.object.raw, "k8s.io.api.core.v1.Pod", Options::default());
        seen.push((
            ev.type_,
            pod.metadata.labels.unwrap_or_default().contains_key("x"),
        ));
    }
    assert_eq!(frames.pending(), 0);
    // Labelled, then deleted, and a bookmark (asked for with allowWatchBookmarks).
    let types: Vec<&str> = seen.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(seen.first(), Some(&("MODIFIED".to_string(), true)));
    assert!(types.contains(&"DELETED"), "{types:?}");
    assert_eq!(types.last(), Some(&"BOOKMARK"), "{types:?}");
}

#[test]
fn a_list_is_its_resource_version_and_enveloped_items() {
    let env = codec::decode(&data("pods-list.pb")).expect("envelope");
    assert_eq!(env.kind, "PodList");
    let list = schema::list_items(&env.raw).expect("list");
    assert!(!list.resource_version.is_empty());
    assert!(list.continue_token.is_empty());
    assert_eq!(list.items.len(), 1);
    let pod: Pod = decode(list.items[0], "k8s.io.api.core.v1.Pod", Options::default());
    assert_eq!(pod.metadata.name.as_deref(), Some("p1"));
}

#[test]
fn an_error_is_a_protobuf_status() {
    let s = mcsched_wire::write::status_of(404, &data("notfound.pb"));
    assert_eq!(s.code, 404);
    assert_eq!(s.reason, "NotFound");
    assert!(s.message.contains("\"nope\" not found"), "{}", s.message);
}
