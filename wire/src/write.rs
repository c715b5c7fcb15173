//! The hot writes: a pod's Binding and an events.k8s.io/v1 Event, in either encoding.
//! Only the answer's HTTP code is read; an error's Status is decoded in the encoding it
//! came in.

use http::header::{ACCEPT, CONTENT_TYPE};
use http_body_util::BodyExt;
use k8s_openapi::api::events::v1::Event;
use k8s_pb::api::core::v1 as pb;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pbmeta;
use kube::core::Status;
use prost::Message;

use crate::{ContentType, JSON, codec};

/// What the API server answers in: protobuf first, as client-go asks, JSON for whatever
/// it does not serve in protobuf.
const ACCEPT_PROTOBUF: &str = "application/vnd.kubernetes.protobuf, application/json";

/// The Binding of `namespace/name` (uid when known) to `node`, as kube-scheduler's
/// DefaultBinder posts it.
pub fn binding(namespace: &str, name: &str, uid: &str, node: &str) -> pb::Binding {
    pb::Binding {
        metadata: Some(pbmeta::ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            uid: (!uid.is_empty()).then(|| uid.to_string()),
            ..Default::default()
        }),
        target: Some(pb::ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            ..Default::default()
        }),
    }
}

/// The Binding as a JSON body, field for field [`binding`]'s.
pub fn binding_json(namespace: &str, name: &str, uid: &str, node: &str) -> Vec<u8> {
    let mut meta = serde_json::json!({"name": name, "namespace": namespace});
    if !uid.is_empty() {
        meta["uid"] = uid.into();
    }
    let b = serde_json::json!({"apiVersion": "v1", "kind": "Binding", "metadata": meta,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
    serde_json::to_vec(&b).unwrap_or_default()
}

/// The request body of a binding in `ct`.
pub fn binding_body(
    ct: ContentType,
    namespace: &str,
    name: &str,
    uid: &str,
    node: &str,
) -> Vec<u8> {
    match ct {
        ContentType::Protobuf => {
            codec::encode("v1", "Binding", &binding(namespace, name, uid, node))
        }
        ContentType::Json => binding_json(namespace, name, uid, node),
    }
}

/// POSTs pods/{name}/binding.
pub async fn bind(
    client: &kube::Client,
    ct: ContentType,
    namespace: &str,
    name: &str,
    uid: &str,
    node: &str,
) -> Result<(), kube::Error> {
    let path = format!("/api/v1/namespaces/{namespace}/pods/{name}/binding");
    post(
        client,
        ct,
        &path,
        binding_body(ct, namespace, name, uid, node),
    )
    .await
}

/// An events.k8s.io/v1 Event as its protobuf message.
pub fn event_message(e: &Event) -> k8s_pb::api::events::v1::Event {
    let micro = |t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime| pbmeta::MicroTime {
        seconds: Some(t.0.as_second()),
        nanos: Some(t.0.subsec_nanosecond()),
    };
    let reference = |r: &k8s_openapi::api::core::v1::ObjectReference| pb::ObjectReference {
        kind: r.kind.clone(),
        namespace: r.namespace.clone(),
        name: r.name.clone(),
        uid: r.uid.clone(),
        api_version: r.api_version.clone(),
        resource_version: r.resource_version.clone(),
        field_path: r.field_path.clone(),
    };
    k8s_pb::api::events::v1::Event {
        metadata: Some(pbmeta::ObjectMeta {
            name: e.metadata.name.clone(),
            generate_name: e.metadata.generate_name.clone(),
            namespace: e.metadata.namespace.clone(),
            resource_version: e.metadata.resource_version.clone(),
            ..Default::default()
        }),
        event_time: Some(micro(&e.event_time.clone().unwrap_or_else(|| {
            k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(Default::default())
        }))),
        series: e
            .series
            .as_ref()
            .map(|s| k8s_pb::api::events::v1::EventSeries {
                count: Some(s.count),
                last_observed_time: Some(micro(&s.last_observed_time)),
            }),
        reporting_controller: e.reporting_controller.clone(),
        reporting_instance: e.reporting_instance.clone(),
        action: e.action.clone(),
        reason: e.reason.clone(),
        regarding: e.regarding.as_ref().map(reference),
        related: e.related.as_ref().map(reference),
        note: e.note.clone(),
        r#type: e.type_.clone(),
        deprecated_source: None,
        deprecated_first_timestamp: None,
        deprecated_last_timestamp: None,
        deprecated_count: e.deprecated_count,
    }
}

/// The request body of creating `e` in `ct`.
pub fn event_body(ct: ContentType, e: &Event) -> Result<Vec<u8>, kube::Error> {
    Ok(match ct {
        ContentType::Protobuf => codec::encode("events.k8s.io/v1", "Event", &event_message(e)),
        ContentType::Json => serde_json::to_vec(e).map_err(kube::Error::SerdeError)?,
    })
}

/// Creates `e` in its namespace.
pub async fn create_event(
    client: &kube::Client,
    ct: ContentType,
    e: &Event,
) -> Result<(), kube::Error> {
    let ns = e.metadata.namespace.as_deref().unwrap_or("default");
    let path = format!("/apis/events.k8s.io/v1/namespaces/{ns}/events");
    post(client, ct, &path, event_body(ct, e)?).await
}

/// POSTs `body`; Ok on a 2xx, else the API server's Status as kube's error.
async fn post(
    client: &kube::Client,
    ct: ContentType,
    path: &str,
    body: Vec<u8>,
) -> Result<(), kube::Error> {
    let accept = match ct {
        ContentType::Protobuf => ACCEPT_PROTOBUF,
        ContentType::Json => JSON,
    };
    let mut request = http::Request::post(path)
        .header(CONTENT_TYPE, ct.media_type())
        .header(ACCEPT, accept)
        .body(kube::client::Body::from(body))
        .map_err(|e| kube::Error::BuildRequest(kube::core::request::Error::BuildRequest(e)))?;
    request.extensions_mut().insert("create");
    let response = client.send(request).await?;
    let code = response.status();
    if code.is_success() {
        return Ok(());
    }
    let bytes = response.into_body().collect().await?.to_bytes();
    Err(kube::Error::Api(Box::new(status_of(code.as_u16(), &bytes))))
}

/// A meta.v1.Status message (not enveloped); `code` when it names none.
pub fn status_from_message(raw: &[u8], code: u16) -> Status {
    match pbmeta::Status::decode(raw) {
        Ok(s) => Status::failure(
            s.message.as_deref().unwrap_or_default(),
            s.reason.as_deref().unwrap_or_default(),
        )
        .with_code(s.code.and_then(|c| u16::try_from(c).ok()).unwrap_or(code)),
        Err(e) => Status::failure(&format!("undecodable Status: {e}"), "").with_code(code),
    }
}

/// The Status of an answer that failed: protobuf, JSON, or (from a proxy) plain text.
pub fn status_of(code: u16, body: &[u8]) -> Status {
    if let Ok(env) = codec::decode(body) {
        return status_from_message(&env.raw, code);
    }
    if let Ok(s) = serde_json::from_slice::<Status>(body) {
        return s;
    }
    Status::failure(
        String::from_utf8_lossy(body).trim(),
        "Failed to parse error data",
    )
    .with_code(code)
}
