//! Creating a pod's leaf copy with every field of the host pod, including those the
//! agent's Kubernetes types do not know (read from the host pod's JSON as served), under
//! strict field validation: a leaf whose API server does not know a field refuses the
//! copy rather than drop the field (its default, `Warn`, drops it with a warning header
//! nobody reads). The leaf check keeps such copies off such leaves first
//! ([`mcsched_engine::leaf::served_fields`]); this is the second line behind it, for a
//! leaf whose document could not be read, and for fields only the raw host pod has.
//!
//! A leaf that knows a field may still drop it: its feature gate is off there, and the
//! pod strategy clears it on create without a word. So the copy is created with
//! `dryRun=All` first, and the answer compared with what was sent
//! ([`mcsched_engine::leaf::kept_fields`]): a field it lacks is not created but refused
//! ([`CreateError::Dropped`]), and remembered for the leaf check. A copy whose every field
//! is of a shape a dry run on that leaf (at its version) found kept needs none: the pods
//! of one owner cost one dry run, not one each.

use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject};
use kube::{Api, Client, Resource};
use mcsched_engine::leaf::{kept_fields, unknown_fields};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::{info, warn};

use super::cluster::LeafCluster;

/// The query of a create under strict field validation.
const STRICT: &str = "fieldValidation=Strict";

/// The query of its dry run: admission, defaults and the strategy as for the create,
/// nothing stored.
const DRY_RUN: &str = "dryRun=All&fieldValidation=Strict";

/// Why a copy was not created.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CreateError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// A dry run of its creation came back without `path`, a field the copy sets.
    #[error("leaf ({version}) drops {path}")]
    Dropped { path: String, version: String },
}

/// POSTs `object` to the collection of `K` in namespace `ns` with `query`; the answer is
/// read as `A`.
async fn post<K, A>(
    client: &Client,
    ns: &str,
    object: &impl Serialize,
    query: &str,
) -> Result<A, kube::Error>
where
    K: Resource<DynamicType = ()>,
    A: DeserializeOwned,
{
    let body = serde_json::to_vec(object).map_err(kube::Error::SerdeError)?;
    let request = http::Request::post(format!("{}?{query}", K::url_path(&(), Some(ns))))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body)
        .map_err(kube::Error::HttpError)?;
    client.request::<A>(request).await
}

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
    post::<K, K>(client, ns, object, STRICT).await
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
/// back first (a second read of the host pod, as JSON). Not created when the leaf would
/// drop a field of it ([`kept_by`]).
pub(crate) async fn create(
    host: &Client,
    leaf: &LeafCluster,
    ns: &str,
    name: &str,
    copy: &Pod,
) -> Result<Pod, CreateError> {
    let pods = ApiResource::erase::<Pod>(&());
    let raw = Api::<DynamicObject>::namespaced_with(host.clone(), ns, &pods)
        .get_opt(name)
        .await?
        .and_then(|o| serde_json::to_value(o).ok());
    let mut value = serde_json::to_value(copy).map_err(kube::Error::SerdeError)?;
    if let Some(raw) = &raw
        && let Some(unknown) = unknown_fields::of_pod(raw)
    {
        unknown_fields::graft(&mut value, &unknown, raw);
    }
    kept_by(leaf, ns, name, &value).await?;
    Ok(create_strict::<Pod>(&leaf.client, ns, &value).await?)
}

/// Whether `leaf` keeps every field `copy` (pod `ns/name` as it is to be created) sets: a
/// dry run of its creation answers, unless one of a copy of its shape did before at the
/// leaf's version. A dry run that fails says nothing: the create answers for itself
/// (strict field validation, admission, a name taken), and a leaf whose admission cannot
/// dry-run (a webhook with side effects) creates copies unverified, as before.
async fn kept_by(
    leaf: &LeafCluster,
    ns: &str,
    name: &str,
    copy: &Value,
) -> Result<(), CreateError> {
    let version = leaf.version();
    let Some(shape) = leaf.kept.to_verify(&version, copy, Instant::now()) else {
        return Ok(());
    };
    let answer = match post::<Pod, Value>(&leaf.client, ns, copy, DRY_RUN).await {
        Ok(answer) => answer,
        Err(e) => {
            let for_the_create = unknown_field(&e).is_some()
                || matches!(&e, kube::Error::Api(s) if matches!(s.code, 403 | 409 | 422));
            if !for_the_create {
                warn!(cluster = %leaf.name, pod = %format!("{ns}/{name}"), error = %e, "a dry run of the copy's creation failed: created without knowing whether the leaf keeps every field");
            }
            return Ok(());
        }
    };
    let dropped = kept_fields::dropped(copy, &answer);
    let now = Instant::now();
    let Some(first) = dropped.first() else {
        leaf.kept.kept(&version, &shape, now);
        return Ok(());
    };
    info!(cluster = %leaf.name, pod = %format!("{ns}/{name}"), %version, field = %first.path, dropped = dropped.len(), "the leaf drops a field of the copy: not created");
    leaf.kept.dropped(&version, &dropped, now);
    Err(CreateError::Dropped {
        path: first.path.clone(),
        version,
    })
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
        let leaf_cluster =
            LeafCluster::new("east".into(), leaf_client.clone(), "1".into(), "h1".into());
        let copy: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "shop"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}
        }))
        .expect("pod");
        let created = create(&host, &leaf_cluster, "shop", "p", &copy)
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
        create(&plain, &leaf_cluster, "shop", "p", &copy)
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
        assert_eq!(
            sent[0].1["spec"]["futureField"], 1,
            "grafted, in the dry run too"
        );
        assert_eq!(sent[1].1["spec"]["futureField"], 1, "grafted");
        assert_eq!(sent[2].1["spec"]["futureField"], serde_json::Value::Null);
        assert_eq!(
            sent.into_iter().map(|(u, _)| u).collect::<Vec<_>>(),
            [
                "POST /api/v1/namespaces/shop/pods?dryRun=All&fieldValidation=Strict",
                "POST /api/v1/namespaces/shop/pods?fieldValidation=Strict",
                // Of a shape the first dry run verified: none.
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
