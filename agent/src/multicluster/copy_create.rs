//! Creating a pod's leaf copy with every field of the host pod, including those the
//! agent's Kubernetes types do not know (read from the host pod's JSON as served), under
//! strict field validation: a leaf whose API server does not know a field refuses the
//! copy rather than drop the field (its default, `Warn`, drops it with a warning header
//! nobody reads). The leaf check keeps such copies off such leaves first
//! ([`mcsched_engine::leaf::served_fields`]); this is the second line behind it, for a
//! leaf whose document could not be read, and for fields only the raw host pod has.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject};
use kube::{Api, Client, Resource};
use mcsched_engine::leaf::unknown_fields;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Creates `object` in the collection of `K` in namespace `ns` with
/// `fieldValidation=Strict` (kube's `PostParams` has no field for it). `object` may hold
/// fields `K` does not (a pod's JSON with its grafted fields); the answer is read as `K`.
pub(crate) async fn create_strict<K>(
    client: &Client,
    ns: &str,
    object: &impl Serialize,
) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    let body = serde_json::to_vec(object).map_err(kube::Error::SerdeError)?;
    let request = http::Request::post(format!(
        "{}?fieldValidation=Strict",
        K::url_path(&(), Some(ns))
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .body(body)
    .map_err(kube::Error::HttpError)?;
    client.request::<K>(request).await
}

/// The API server's message when it refused an object for a field it does not know
/// (strict field validation: `Pod in version "v1" cannot be handled as a Pod: strict
/// decoding error: unknown field "spec.x"`).
pub(crate) fn unknown_field(e: &kube::Error) -> Option<&str> {
    match e {
        kube::Error::Api(s) if s.code == 400 && s.message.contains("strict decoding error") => {
            Some(&s.message)
        }
        _ => None,
    }
}

/// Creates `copy` in `leaf`; the fields of host pod `ns/name` its types dropped are put
/// back first (a second read of the host pod, as JSON).
pub(crate) async fn create(
    host: &Client,
    leaf: &Client,
    ns: &str,
    name: &str,
    copy: &Pod,
) -> Result<Pod, kube::Error> {
    let pods = ApiResource::erase::<Pod>(&());
    let raw = Api::<DynamicObject>::namespaced_with(host.clone(), ns, &pods)
        .get_opt(name)
        .await?
        .and_then(|o| serde_json::to_value(o).ok());
    let grafted = match &raw {
        Some(raw) => unknown_fields::of_pod(raw).map(|unknown| (raw, unknown)),
        None => None,
    };
    let Some((raw, unknown)) = grafted else {
        return create_strict::<Pod>(leaf, ns, copy).await;
    };
    let mut value = serde_json::to_value(copy).map_err(kube::Error::SerdeError)?;
    unknown_fields::graft(&mut value, &unknown, raw);
    create_strict::<Pod>(leaf, ns, &value).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use serde_json::json;
    use std::sync::{Arc, Mutex};

    /// The requests' URIs with their queries (`fake_api` keeps paths only), and bodies.
    type Sent = Arc<Mutex<Vec<(String, serde_json::Value)>>>;

    /// A leaf answering every create with what was sent.
    fn leaf() -> (Client, Sent) {
        let uris: Sent = Arc::default();
        let seen = uris.clone();
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let seen = seen.clone();
            async move {
                let uri = format!("{} {}", req.method(), req.uri());
                let body = req.into_body().collect_bytes().await.unwrap_or_default();
                let sent = serde_json::from_slice(&body).unwrap_or_default();
                seen.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((uri, sent));
                let response = http::Response::builder()
                    .status(201)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(body.to_vec()));
                Ok::<_, std::convert::Infallible>(
                    response.unwrap_or_else(|_| http::Response::new(kube::client::Body::empty())),
                )
            }
        });
        (Client::new(service, "default"), uris)
    }

    #[tokio::test]
    async fn copies_are_created_under_strict_field_validation() {
        // The host pod has a field the agent's types do not know: grafted, created as JSON.
        let (host, _) = crate::fake_api::client(|_, _| {
            (
                200,
                json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "shop"},
                "spec": {"futureField": 1, "containers": [{"name": "c", "image": "i"}]}}),
            )
        });
        let (leaf_client, uris) = leaf();
        let copy: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "shop"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}
        }))
        .expect("pod");
        let created = create(&host, &leaf_client, "shop", "p", &copy)
            .await
            .expect("created");
        assert_eq!(created.metadata.name.as_deref(), Some("p"));
        // No unknown fields: created from the typed copy.
        let (plain, _) = crate::fake_api::client(|_, _| {
            (
                200,
                json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "shop"},
                "spec": {"containers": [{"name": "c", "image": "i"}]}}),
            )
        });
        create(&plain, &leaf_client, "shop", "p", &copy)
            .await
            .expect("created");
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "shop"},
            "spec": {"accessModes": ["ReadWriteOnce"]}
        }))
        .expect("claim");
        create_strict::<PersistentVolumeClaim>(&leaf_client, "shop", &claim)
            .await
            .expect("created");
        let sent = uris.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert_eq!(sent[0].1["spec"]["futureField"], 1, "grafted");
        assert_eq!(sent[1].1["spec"]["futureField"], serde_json::Value::Null);
        assert_eq!(
            sent.into_iter().map(|(u, _)| u).collect::<Vec<_>>(),
            [
                "POST /api/v1/namespaces/shop/pods?fieldValidation=Strict",
                "POST /api/v1/namespaces/shop/pods?fieldValidation=Strict",
                "POST /api/v1/namespaces/shop/persistentvolumeclaims?fieldValidation=Strict",
            ]
        );
    }

    #[test]
    fn a_strict_refusal_is_told_from_other_bad_requests() {
        let api = |code: u16, message: &str| {
            kube::Error::Api(
                serde_json::from_value(crate::fake_api::status(code, "BadRequest", message))
                    .expect("status"),
            )
        };
        let strict = "Pod in version \"v1\" cannot be handled as a Pod: strict decoding error: unknown field \"spec.x\"";
        assert_eq!(unknown_field(&api(400, strict)), Some(strict));
        assert_eq!(unknown_field(&api(400, "admission webhook denied")), None);
        assert_eq!(unknown_field(&api(422, strict)), None);
    }
}
