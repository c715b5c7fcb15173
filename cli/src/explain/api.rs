//! mcsched's aggregated API, `mcsched.io/v1alpha1`, through the API server: the user's own
//! credentials and RBAC apply, and the API server forwards to the leading agent.
//!
//! Every refusal is said once, naming what was asked (verb, resource, namespace) and who
//! refused: the API server (RBAC; the group not registered; the APIService unavailable) or
//! the agent (no explanation for that pod, a template it cannot simulate).

use http::StatusCode;
use mcsched_shared::api::{self, Explanation, WhatIf};
use mcsched_shared::keys;
use serde::Deserialize;

/// One request: `verb` on `resource` in `namespace`, as RBAC words it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub verb: &'static str,
    pub resource: &'static str,
    pub namespace: String,
}

impl Call {
    fn what(&self) -> String {
        format!(
            "{} {}.{} in namespace {}",
            self.verb,
            self.resource,
            keys::API_GROUP,
            self.namespace
        )
    }
}

/// Whether the API server serves the group, after a 404.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// No `mcsched.io/v1alpha1` at all: the APIService is missing.
    NotAtAll,
    /// The group, but not this resource: an agent older than this CLI.
    WithoutResource,
    /// The group and resource: the 404 is the agent's own answer.
    Yes,
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("you may not {}: {message}", .call.what())]
    Forbidden { call: Call, message: String },
    #[error(
        "the API server did not accept your credentials to {} (401 Unauthorized): {message}",
        .call.what()
    )]
    Unauthorized { call: Call, message: String },
    #[error(
        "mcsched's API is not installed: the API server does not serve {group_version} (no APIService {service}); install mcsched with `kubectl mcsched install`",
        group_version = keys::API_GROUP_VERSION,
        service = keys::API_SERVICE_NAME
    )]
    NotInstalled,
    #[error(
        "the API server serves {group_version} without {resource}: the installed agent is older than this kubectl-mcsched; upgrade it with `kubectl mcsched install`",
        group_version = keys::API_GROUP_VERSION,
        resource = .call.resource
    )]
    NotServed { call: Call },
    #[error(
        "the APIService {service} is not available (the agent is not running or not ready; `kubectl get apiservice {service}` tells why): {message}",
        service = keys::API_SERVICE_NAME
    )]
    Unavailable { message: String },
    /// The agent's own refusal (or another answer of the API server): its code and message.
    #[error("{} failed ({code}): {message}", .call.what())]
    Refused {
        call: Call,
        code: u16,
        message: String,
    },
    #[error("{}: the API server does not answer: {source}", .call.what())]
    Unreachable {
        call: Call,
        #[source]
        source: kube::Error,
    },
    #[error("{}: the answer is not {expected}: {source}", .call.what())]
    Decode {
        call: Call,
        expected: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("{}: cannot make the request: {source}", .call.what())]
    Request {
        call: Call,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// `GET .../namespaces/{ns}/explanations/{name}`.
pub async fn get_explanation(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Explanation, ApiError> {
    let call = Call {
        verb: "get",
        resource: keys::EXPLANATIONS,
        namespace: namespace.to_string(),
    };
    let path = format!(
        "{}/{name}",
        api::namespaced_path(namespace, keys::EXPLANATIONS)
    );
    let req = http::Request::get(path).body(Vec::new());
    let body = send(client, &call, req).await?;
    serde_json::from_slice(&body).map_err(|source| ApiError::Decode {
        call,
        expected: "an Explanation",
        source,
    })
}

/// `POST .../namespaces/{ns}/whatifs`: the WhatIf back, its status filled in.
pub async fn create_what_if(client: &kube::Client, what_if: &WhatIf) -> Result<WhatIf, ApiError> {
    let namespace = what_if.metadata.namespace.clone().unwrap_or_default();
    let call = Call {
        verb: "create",
        resource: keys::WHATIFS,
        namespace: namespace.clone(),
    };
    let body = serde_json::to_vec(what_if).map_err(|source| ApiError::Request {
        call: call.clone(),
        source: source.into(),
    })?;
    let req = http::Request::post(api::namespaced_path(&namespace, keys::WHATIFS))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body);
    let body = send(client, &call, req).await?;
    serde_json::from_slice(&body).map_err(|source| ApiError::Decode {
        call,
        expected: "a WhatIf",
        source,
    })
}

async fn send(
    client: &kube::Client,
    call: &Call,
    req: Result<http::Request<Vec<u8>>, http::Error>,
) -> Result<Vec<u8>, ApiError> {
    // A namespace or name that cannot be part of a path.
    let req = req.map_err(|source| ApiError::Request {
        call: call.clone(),
        source: source.into(),
    })?;
    let (code, body) = exchange(client, req)
        .await
        .map_err(|source| ApiError::Unreachable {
            call: call.clone(),
            source,
        })?;
    if code.is_success() {
        return Ok(body);
    }
    let served = if code == StatusCode::NOT_FOUND {
        Some(served(client, call.resource).await)
    } else {
        None
    };
    Err(refusal(call, code, &body, served))
}

async fn exchange(
    client: &kube::Client,
    req: http::Request<Vec<u8>>,
) -> Result<(StatusCode, Vec<u8>), kube::Error> {
    let resp = client.send(req.map(kube::client::Body::from)).await?;
    let code = resp.status();
    let body = resp.into_body().collect_bytes().await?;
    Ok((code, body.to_vec()))
}

/// Asks discovery whether the group (and `resource` in it) is served. When discovery
/// itself fails for another reason, the 404 is taken as the agent's.
async fn served(client: &kube::Client, resource: &str) -> Served {
    let path = format!("/apis/{}", keys::API_GROUP_VERSION);
    let req = match http::Request::get(path).body(Vec::new()) {
        Ok(r) => r,
        Err(_) => return Served::Yes,
    };
    match exchange(client, req).await {
        Ok((StatusCode::NOT_FOUND, _)) => Served::NotAtAll,
        Ok((code, body)) if code.is_success() => lists(&body, resource),
        Ok((code, _)) => {
            tracing::debug!(%code, "discovery of {}", keys::API_GROUP_VERSION);
            Served::Yes
        }
        Err(e) => {
            tracing::debug!(error = %e, "discovery of {}", keys::API_GROUP_VERSION);
            Served::Yes
        }
    }
}

/// Whether an APIResourceList names `resource`.
fn lists(body: &[u8], resource: &str) -> Served {
    #[derive(Deserialize)]
    struct ResourceList {
        #[serde(default)]
        resources: Vec<Named>,
    }
    #[derive(Deserialize)]
    struct Named {
        name: String,
    }
    match serde_json::from_slice::<ResourceList>(body) {
        Ok(list) if !list.resources.iter().any(|r| r.name == resource) => Served::WithoutResource,
        _ => Served::Yes,
    }
}

/// What a refusal means. `served` is discovery's answer after a 404.
pub fn refusal(call: &Call, code: StatusCode, body: &[u8], served: Option<Served>) -> ApiError {
    let message = message(code, body);
    let call = call.clone();
    match code {
        StatusCode::FORBIDDEN => ApiError::Forbidden { call, message },
        StatusCode::UNAUTHORIZED => ApiError::Unauthorized { call, message },
        StatusCode::SERVICE_UNAVAILABLE => ApiError::Unavailable { message },
        StatusCode::NOT_FOUND => match served {
            Some(Served::NotAtAll) => ApiError::NotInstalled,
            Some(Served::WithoutResource) => ApiError::NotServed { call },
            _ => ApiError::Refused {
                call,
                code: code.as_u16(),
                message,
            },
        },
        _ => ApiError::Refused {
            call,
            code: code.as_u16(),
            message,
        },
    }
}

/// The message of a metav1 Status (the API server's and the agent's errors alike); a body
/// that is not one (kube-aggregator answers some errors in plain text) as it came, and an
/// empty one as the HTTP status.
fn message(code: StatusCode, body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Status {
        kind: String,
        #[serde(default)]
        message: String,
    }
    let text = match serde_json::from_slice::<Status>(body) {
        Ok(s) if s.kind == "Status" => s.message,
        _ => String::from_utf8_lossy(body).into_owned(),
    };
    let text = text.trim();
    if text.is_empty() {
        code.to_string()
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(ns: &str) -> Call {
        Call {
            verb: "get",
            resource: keys::EXPLANATIONS,
            namespace: ns.into(),
        }
    }

    fn create(ns: &str) -> Call {
        Call {
            verb: "create",
            resource: keys::WHATIFS,
            namespace: ns.into(),
        }
    }

    fn status(code: u16, reason: &str, message: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        }))
        .expect("json")
    }

    fn said(call: &Call, code: u16, body: &[u8], served: Option<Served>) -> String {
        let code = StatusCode::from_u16(code).expect("code");
        refusal(call, code, body, served).to_string()
    }

    #[test]
    fn forbidden_names_verb_resource_and_namespace() {
        let rbac = "explanations.mcsched.io \"web\" is forbidden: User \"bob\" cannot get resource \"explanations\" in API group \"mcsched.io\" in the namespace \"b\"";
        assert_eq!(
            said(&get("b"), 403, &status(403, "Forbidden", rbac), None),
            format!("you may not get explanations.mcsched.io in namespace b: {rbac}")
        );
        let rbac = "whatifs.mcsched.io is forbidden: User \"bob\" cannot create resource \"whatifs\" in API group \"mcsched.io\" in the namespace \"shop\"";
        assert_eq!(
            said(&create("shop"), 403, &status(403, "Forbidden", rbac), None),
            format!("you may not create whatifs.mcsched.io in namespace shop: {rbac}")
        );
    }

    #[test]
    fn a_404_of_an_unserved_group_says_install() {
        let body = status(
            404,
            "NotFound",
            "the server could not find the requested resource",
        );
        assert_eq!(
            said(&get("default"), 404, &body, Some(Served::NotAtAll)),
            "mcsched's API is not installed: the API server does not serve mcsched.io/v1alpha1 (no APIService v1alpha1.mcsched.io); install mcsched with `kubectl mcsched install`"
        );
        assert_eq!(
            said(
                &create("default"),
                404,
                b"404 page not found\n",
                Some(Served::WithoutResource)
            ),
            "the API server serves mcsched.io/v1alpha1 without whatifs: the installed agent is older than this kubectl-mcsched; upgrade it with `kubectl mcsched install`"
        );
    }

    #[test]
    fn a_404_of_the_served_group_is_the_agents_own() {
        let body = status(
            404,
            "NotFound",
            "no explanation for pod default/web: the agent has not seen it",
        );
        let err = refusal(
            &get("default"),
            StatusCode::NOT_FOUND,
            &body,
            Some(Served::Yes),
        );
        assert!(
            matches!(&err, ApiError::Refused { code: 404, message, .. }
                if message == "no explanation for pod default/web: the agent has not seen it"),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "get explanations.mcsched.io in namespace default failed (404): no explanation for pod default/web: the agent has not seen it"
        );
    }

    #[test]
    fn a_503_is_the_unavailable_api_service() {
        // kube-aggregator answers in plain text when no endpoint is there.
        assert_eq!(
            said(&get("default"), 503, b"service unavailable\n", None),
            "the APIService v1alpha1.mcsched.io is not available (the agent is not running or not ready; `kubectl get apiservice v1alpha1.mcsched.io` tells why): service unavailable"
        );
        let body = status(
            503,
            "ServiceUnavailable",
            "the agent's caches are not synced yet",
        );
        assert!(
            said(&create("x"), 503, &body, None)
                .ends_with("tells why): the agent's caches are not synced yet")
        );
    }

    #[test]
    fn other_refusals_carry_code_and_message() {
        let body = status(400, "BadRequest", "spec.template.spec: required");
        assert_eq!(
            said(&create("shop"), 400, &body, None),
            "create whatifs.mcsched.io in namespace shop failed (400): spec.template.spec: required"
        );
        assert_eq!(
            said(&get("a"), 500, b"", None),
            "get explanations.mcsched.io in namespace a failed (500): 500 Internal Server Error"
        );
        // JSON that is not a Status is shown as it came.
        assert_eq!(
            message(StatusCode::BAD_GATEWAY, br#"{"error":"x"}"#),
            r#"{"error":"x"}"#
        );
        assert!(
            said(&get("a"), 401, &status(401, "Unauthorized", "Unauthorized"), None)
                .starts_with("the API server did not accept your credentials to get explanations.mcsched.io in namespace a")
        );
    }

    #[test]
    fn discovery_tells_a_missing_resource() {
        let list = br#"{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"mcsched.io/v1alpha1","resources":[{"name":"explanations","namespaced":true,"kind":"Explanation","verbs":["get","list"]}]}"#;
        assert_eq!(lists(list, "explanations"), Served::Yes);
        assert_eq!(lists(list, "whatifs"), Served::WithoutResource);
        assert_eq!(lists(b"not json", "whatifs"), Served::Yes);
    }
}
