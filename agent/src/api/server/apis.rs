//! The `mcsched.io/v1alpha1` aggregated API: discovery, a pod's `Explanation` (get,
//! list) and `WhatIf` (create; the answer comes back, nothing is stored). The API server
//! authorizes each request for its caller before proxying it here; this server checks
//! again (authn/authz middleware) and reads only its own cache.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Extension;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use mcsched_shared::api::{Explanation, ExplanationList, WhatIf};
use mcsched_shared::explain::{self, Outcome};
use mcsched_shared::keys;
use serde_json::json;

use super::ServerState;
use super::api_status::{failure, json_ok, too_many_requests};
use super::authn::UserInfo;
use super::dry_run::DryRunError;
use super::pod_disclosure::PodDisclosure;

pub fn routes() -> Router<Arc<ServerState>> {
    let gv = format!("/apis/{}", keys::API_GROUP_VERSION);
    Router::new()
        .route("/apis", get(group_list))
        .route(&format!("/apis/{}", keys::API_GROUP), get(group))
        .route(&gv, get(resource_list))
        .route(
            &format!("{gv}/namespaces/{{namespace}}/{}", keys::EXPLANATIONS),
            get(list_in_namespace),
        )
        .route(
            &format!(
                "{gv}/namespaces/{{namespace}}/{}/{{name}}",
                keys::EXPLANATIONS
            ),
            get(get_explanation),
        )
        .route(&format!("{gv}/{}", keys::EXPLANATIONS), get(list_all))
        .route(
            &format!("{gv}/namespaces/{{namespace}}/{}", keys::WHATIFS),
            post(create_what_if),
        )
}

fn api_group() -> serde_json::Value {
    let version = json!({
        "groupVersion": keys::API_GROUP_VERSION,
        "version": keys::API_VERSION,
    });
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": keys::API_GROUP,
        "versions": [version],
        "preferredVersion": version,
    })
}

async fn group_list() -> Response {
    json_ok(
        StatusCode::OK,
        &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [api_group()]}),
    )
}

async fn group() -> Response {
    json_ok(StatusCode::OK, &api_group())
}

async fn resource_list() -> Response {
    json_ok(
        StatusCode::OK,
        &json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": keys::API_GROUP_VERSION,
            "resources": [
                {
                    "name": keys::EXPLANATIONS,
                    "singularName": "explanation",
                    "namespaced": true,
                    "kind": keys::EXPLANATION_KIND,
                    "verbs": ["get", "list"],
                },
                {
                    "name": keys::WHATIFS,
                    "singularName": "whatif",
                    "namespaced": true,
                    "kind": keys::WHATIF_KIND,
                    "verbs": ["create"],
                },
            ],
        }),
    )
}

fn metadata(namespace: &str, name: &str, time: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        creation_timestamp: serde_json::from_value::<Time>(json!(time)).ok(),
        ..Default::default()
    }
}

fn object(e: explain::Explanation) -> Explanation {
    let (namespace, name) = e.pod.split_once('/').unwrap_or(("", e.pod.as_str()));
    Explanation::new(metadata(namespace, name, &e.time), e.clone())
}

fn not_found(namespace: &str, name: &str) -> Response {
    failure(
        StatusCode::NOT_FOUND,
        format!(
            "{}.{} {name:?} not found: pod {namespace}/{name} is not waiting to be scheduled by this agent, and no decision about it is kept (the agent keeps its last {} decisions since it started)",
            keys::EXPLANATIONS,
            keys::API_GROUP,
            crate::observe::explain::CAPACITY
        ),
    )
}

fn dry_run_failure(e: DryRunError) -> Response {
    match e {
        DryRunError::NotServed(_) => failure(StatusCode::BAD_REQUEST, e.to_string()),
        DryRunError::Busy(_) => too_many_requests(e.to_string(), 1),
        DryRunError::Timeout(_) => failure(StatusCode::GATEWAY_TIMEOUT, e.to_string()),
        DryRunError::Failed(_) => failure(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn get_explanation(
    State(s): State<Arc<ServerState>>,
    Path((namespace, name)): Path<(String, String)>,
    user: Option<Extension<UserInfo>>,
    headers: HeaderMap,
) -> Response {
    let key = format!("{namespace}/{name}");
    // Pending: what would happen now says more than the last attempt.
    let found = match s.shared.queue.waiting(&key) {
        Some(info) => match s
            .dry_runs
            .run(s.shared.clone(), info.pod().as_ref().clone())
            .await
        {
            Ok(e) => Some(e),
            Err(e) => return dry_run_failure(e),
        },
        None => s.shared.explanations.get(&key),
    };
    let Some(mut e) = found else {
        return not_found(&namespace, &name);
    };
    PodDisclosure::new(&s.authz, user.as_deref())
        .redact(&mut e)
        .await;
    let pending = s.shared.queue.pending_keys();
    let item = object(e);
    if wants_table(&headers) {
        return table(&[item], &pending);
    }
    json_ok(StatusCode::OK, &item)
}

async fn list_in_namespace(
    State(s): State<Arc<ServerState>>,
    Path(namespace): Path<String>,
    user: Option<Extension<UserInfo>>,
    headers: HeaderMap,
) -> Response {
    list(&s, Some(&namespace), user.as_deref(), &headers).await
}

async fn list_all(
    State(s): State<Arc<ServerState>>,
    user: Option<Extension<UserInfo>>,
    headers: HeaderMap,
) -> Response {
    list(&s, None, user.as_deref(), &headers).await
}

/// The kept explanations, the pods still pending first; no dry run (a list must stay
/// cheap), so a pending pod shows its last attempt. Each names other namespaces' pods
/// as its own pod's namespace allows (one review per namespace for the whole list).
async fn list(
    s: &ServerState,
    namespace: Option<&str>,
    user: Option<&UserInfo>,
    headers: &HeaderMap,
) -> Response {
    let pending = s.shared.queue.pending_keys();
    let mut kept = s.shared.explanations.list(namespace);
    let mut disclosure = PodDisclosure::new(&s.authz, user);
    for e in &mut kept {
        disclosure.redact(e).await;
    }
    let mut items: Vec<Explanation> = kept.into_iter().map(object).collect();
    items.sort_by(|a, b| {
        let waiting = |e: &Explanation| !pending.contains(&e.status.pod);
        (waiting(a), &a.status.pod).cmp(&(waiting(b), &b.status.pod))
    });
    if wants_table(headers) {
        return table(&items, &pending);
    }
    json_ok(StatusCode::OK, &ExplanationList::new(items))
}

async fn create_what_if(
    State(s): State<Arc<ServerState>>,
    Path(namespace): Path<String>,
    user: Option<Extension<UserInfo>>,
    body: axum::body::Bytes,
) -> Response {
    let mut what_if: WhatIf = match serde_json::from_slice(&body) {
        Ok(w) => w,
        Err(e) => {
            return failure(
                StatusCode::BAD_REQUEST,
                format!("the body is not a {} in JSON: {e}", keys::WHATIF_KIND),
            );
        }
    };
    if what_if.kind != keys::WHATIF_KIND || what_if.api_version != keys::API_GROUP_VERSION {
        return failure(
            StatusCode::BAD_REQUEST,
            format!(
                "kind {:?} of apiVersion {:?}: this resource takes kind {} of {}",
                what_if.kind,
                what_if.api_version,
                keys::WHATIF_KIND,
                keys::API_GROUP_VERSION
            ),
        );
    }
    if let Some(ns) = &what_if.metadata.namespace
        && ns != &namespace
    {
        return failure(
            StatusCode::BAD_REQUEST,
            format!(
                "metadata.namespace {ns:?} does not match the namespace of the request {namespace:?}"
            ),
        );
    }
    let template = what_if.spec.template.clone();
    let Some(mut spec) = template.spec else {
        return failure(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "{} is invalid: spec.template.spec: Required value",
                keys::WHATIF_KIND
            ),
        );
    };
    if let Err(refused) = super::what_if_admission::check(&spec) {
        return failure(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("{} is invalid: {refused}", keys::WHATIF_KIND),
        );
    }
    match super::what_if_admission::resolve_priority(&s.shared.bind_ctx.client, &mut spec).await {
        Ok(()) => {}
        Err(super::what_if_admission::AdmissionError::Refused(refused)) => {
            return failure(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("{} is invalid: {refused}", keys::WHATIF_KIND),
            );
        }
        Err(e) => return failure(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
    let mut meta = template.metadata.unwrap_or_default();
    meta.namespace = Some(namespace.clone());
    if meta.name.as_deref().is_none_or(str::is_empty) {
        meta.name = Some(
            meta.generate_name
                .clone()
                .map(|g| format!("{g}what-if"))
                .unwrap_or_else(|| "what-if".into()),
        );
    }
    let pod = Pod {
        metadata: meta,
        spec: Some(spec),
        status: None,
    };
    match s.dry_runs.run(s.shared.clone(), pod).await {
        Ok(mut e) => {
            PodDisclosure::new(&s.authz, user.as_deref())
                .redact(&mut e)
                .await;
            what_if.metadata.namespace = Some(namespace);
            what_if.status = Some(e);
            json_ok(StatusCode::CREATED, &what_if)
        }
        Err(e) => dry_run_failure(e),
    }
}

/// kubectl asks for a Table (`as=Table;g=meta.k8s.io`) to print `get`.
fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("as=Table") && v.contains("g=meta.k8s.io"))
}

/// kube's short age: 45s, 12m, 5h, 3d, 2y.
fn age(time: &str) -> String {
    let Some(then) = serde_json::from_value::<Time>(json!(time))
        .ok()
        .map(|t| t.0.as_second())
    else {
        return "<unknown>".into();
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(then);
    let s = (now - then).max(0);
    match s {
        s if s < 60 * 2 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s if s < 730 * 86400 => format!("{}d", s / 86400),
        s => format!("{}y", s / (365 * 86400)),
    }
}

fn table(items: &[Explanation], pending: &std::collections::HashSet<String>) -> Response {
    let column = |name: &str, description: &str| {
        json!({"name": name, "type": "string", "format": if name == "Name" { "name" } else { "" },
               "description": description, "priority": 0})
    };
    let rows: Vec<serde_json::Value> = items
        .iter()
        .map(|e| {
            let (result, node) = match &e.status.outcome {
                Outcome::Scheduled { node, leaf_node } => (
                    "Scheduled".to_string(),
                    match leaf_node {
                        Some(l) => format!("{node} ({l})"),
                        None => node.clone(),
                    },
                ),
                Outcome::Unschedulable { nominated_node, .. } => (
                    "Unschedulable".to_string(),
                    nominated_node
                        .as_ref()
                        .map(|n| format!("nominated {n}"))
                        .unwrap_or_else(|| "<none>".into()),
                ),
                Outcome::Error { .. } => ("Error".to_string(), "<none>".into()),
            };
            let pod_state = if pending.contains(&e.status.pod) {
                "Pending"
            } else {
                "Bound"
            };
            json!({
                "cells": [
                    e.metadata.name.clone().unwrap_or_default(),
                    e.status.scheduler_name,
                    result,
                    node,
                    pod_state,
                    format!("{}/{}", e.status.num_feasible_nodes, e.status.num_all_nodes),
                    age(&e.status.time),
                ],
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": e.metadata,
                },
            })
        })
        .collect();
    let body = json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {},
        "columnDefinitions": [
            column("Name", "The pod's name"),
            column("Scheduler", "The profile that decided"),
            column("Result", "Scheduled, Unschedulable or Error"),
            column("Node", "The node chosen (and, for a virtual node, the leaf's node), or the node nominated by preemption"),
            column("Pod", "Pending: still waiting to be scheduled (its last attempt is shown)"),
            column("Feasible", "Nodes that passed every filter, of all nodes"),
            column("Age", "Time since the decision"),
        ],
        "rows": rows,
    });
    match serde_json::to_string(&body) {
        Ok(text) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/json;as=Table;v=v1;g=meta.k8s.io",
            )],
            text,
        )
            .into_response(),
        Err(e) => failure(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_as_kubectls() {
        let at = |secs_ago: i64| {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_secs() as i64;
            let t = serde_json::from_value::<Time>(json!("1970-01-01T00:00:00Z")).unwrap();
            let shifted = t.0 + std::time::Duration::from_secs((now - secs_ago) as u64);
            serde_json::to_value(Time(shifted))
                .unwrap()
                .as_str()
                .unwrap()
                .to_string()
        };
        assert_eq!(age(&at(5)), "5s");
        assert_eq!(age(&at(300)), "5m");
        assert_eq!(age(&at(5 * 3600)), "5h");
        assert_eq!(age(&at(3 * 86400)), "3d");
        assert_eq!(age("not a time"), "<unknown>");
    }

    #[tokio::test]
    async fn a_what_if_with_a_chosen_priority_or_node_is_refused_before_any_dry_run() {
        use tower::ServiceExt;
        let app = routes().with_state(super::super::tests::state());
        for (field, value) in [("priority", json!(2147483647)), ("nodeName", json!("n1"))] {
            let body = json!({
                "apiVersion": keys::API_GROUP_VERSION,
                "kind": keys::WHATIF_KIND,
                "metadata": {"namespace": "a"},
                "spec": {"template": {"spec": {
                    field: value,
                    "containers": [{"name": "c", "image": "i"}]
                }}}
            });
            let req = axum::http::Request::post(format!(
                "/apis/{}/namespaces/a/{}",
                keys::API_GROUP_VERSION,
                keys::WHATIFS
            ))
            .body(axum::body::Body::from(body.to_string()))
            .unwrap();
            let resp = app.clone().oneshot(req).await.unwrap();
            assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY, "{field}");
            let bytes = axum::body::to_bytes(resp.into_body(), 1 << 16)
                .await
                .unwrap();
            let status: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            let message = status["message"].as_str().unwrap_or_default();
            assert!(
                message.contains(&format!("spec.template.spec.{field}")),
                "{message}"
            );
        }
    }

    /// SubjectAccessReviews allow `list pods` in namespace `a` only.
    fn lists_pods_in_a(
        _: &str,
        path: &str,
        body: &serde_json::Value,
    ) -> Option<(u16, serde_json::Value)> {
        if path != "/apis/authorization.k8s.io/v1/subjectaccessreviews" {
            return None;
        }
        let attrs = &body["spec"]["resourceAttributes"];
        let allowed = body["spec"]["user"] == "alice"
            && attrs["verb"] == "list"
            && attrs["resource"] == "pods"
            && attrs["namespace"] == "a";
        let mut answer = body.clone();
        answer["status"] = json!({"allowed": allowed});
        Some((201, answer))
    }

    #[tokio::test]
    async fn an_explanation_names_other_namespaces_pods_only_where_the_caller_may_list_pods() {
        use mcsched_engine::framework::FitError;
        use mcsched_engine::framework::runtime::CycleRecord;
        use tower::ServiceExt;
        let state = super::super::tests::state_answering(lists_pods_in_a);
        let node: k8s_openapi::api::core::v1::Node =
            serde_json::from_value(json!({"metadata": {"name": "n1"}})).unwrap();
        let record = CycleRecord {
            nominated: std::collections::HashMap::from([(
                "n1".to_string(),
                vec!["b/urgent".to_string(), "a/urgent".to_string()],
            )]),
            rejected: vec![(
                Arc::new(mcsched_engine::snapshot::NodeInfo::new(Arc::new(node))),
                mcsched_engine::framework::Status::unschedulable("Insufficient cpu")
                    .with_plugin("NodeResourcesFit"),
            )],
            ..Default::default()
        };
        let fit = FitError {
            num_all_nodes: 1,
            diagnosis: Default::default(),
        };
        let victims = ["shop/low", "a/batch", "b/one", "b/two"]
            .map(String::from)
            .to_vec();
        state.shared.explanations.record_failure(
            "mcsched",
            "shop/web",
            &record,
            &fit,
            Some("n1".into()),
            victims,
        );
        let alice = UserInfo {
            name: "alice".into(),
            groups: vec!["system:authenticated".into()],
            ..Default::default()
        };
        let app = routes().with_state(state).layer(Extension(alice));
        let base = format!("/apis/{}", keys::API_GROUP_VERSION);
        for path in [
            format!("{base}/namespaces/shop/{}/web", keys::EXPLANATIONS),
            format!("{base}/namespaces/shop/{}", keys::EXPLANATIONS),
            format!("{base}/{}", keys::EXPLANATIONS),
        ] {
            let req = axum::http::Request::get(&path)
                .body(axum::body::Body::empty())
                .unwrap();
            let resp = app.clone().oneshot(req).await.unwrap();
            assert_eq!(resp.status(), StatusCode::OK, "{path}");
            let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
                .await
                .unwrap();
            let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            let e = body.get("items").map_or(&body, |items| &items[0]);
            assert_eq!(
                e["status"]["outcome"]["victims"],
                json!(["shop/low", "a/batch", "2 pods in other namespaces"]),
                "{path}"
            );
            assert_eq!(
                e["status"]["nodes"][0]["nominatedPods"],
                json!(["a/urgent", "1 pod in another namespace"]),
                "{path}"
            );
        }
    }

    #[tokio::test]
    async fn a_what_ifs_victims_name_other_namespaces_pods_only_where_the_caller_may_list_pods() {
        use tower::ServiceExt;
        // The global default class is high: the what-if preempts the pods of n1.
        let state = super::super::tests::state_answering(|method, path, body| {
            if path == "/apis/scheduling.k8s.io/v1/priorityclasses" {
                return Some((
                    200,
                    json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClassList",
                        "metadata": {"resourceVersion": "1"}, "items": [{
                            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                            "metadata": {"name": "high"}, "value": 1000, "globalDefault": true}]}),
                ));
            }
            lists_pods_in_a(method, path, body)
        });
        {
            let mut cache = state.shared.cache();
            let node = json!({"metadata": {"name": "n1"}, "status": {
                "allocatable": {"cpu": "1", "memory": "1Gi", "pods": "10"}}});
            cache.apply_node(Arc::new(serde_json::from_value(node).unwrap()));
            for (ns, name) in [("shop", "low"), ("a", "batch"), ("b", "one"), ("b", "two")] {
                let pod = json!({
                    "metadata": {"namespace": ns, "name": name, "uid": format!("{ns}-{name}")},
                    "spec": {"nodeName": "n1", "priority": 0, "containers": [{"name": "c", "image": "i",
                        "resources": {"requests": {"cpu": "250m"}}}]},
                    "status": {"phase": "Running"}
                });
                cache.apply_pod(Arc::new(serde_json::from_value(pod).unwrap()));
            }
        }
        let alice = UserInfo {
            name: "alice".into(),
            ..Default::default()
        };
        let app = routes().with_state(state).layer(Extension(alice));
        let body = json!({
            "apiVersion": keys::API_GROUP_VERSION,
            "kind": keys::WHATIF_KIND,
            "metadata": {"namespace": "shop"},
            "spec": {"template": {"metadata": {"name": "web"}, "spec": {
                "schedulerName": "mcsched",
                "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}]
            }}}
        });
        let req = axum::http::Request::post(format!(
            "/apis/{}/namespaces/shop/{}",
            keys::API_GROUP_VERSION,
            keys::WHATIFS
        ))
        .body(axum::body::Body::from(body.to_string()))
        .unwrap();
        let resp = app.oneshot(req).await.unwrap();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        let answer: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(status, StatusCode::CREATED, "{answer}");
        let outcome = &answer["status"]["outcome"];
        // (The outcome's fields are snake_case on the wire.)
        assert_eq!(outcome["nominatedNode"], "n1", "{outcome}");
        let mut victims: Vec<String> = serde_json::from_value(outcome["victims"].clone()).unwrap();
        let count = victims.pop();
        victims.sort();
        assert_eq!(victims, ["a/batch", "shop/low"]);
        assert_eq!(count.as_deref(), Some("2 pods in other namespaces"));
    }

    #[test]
    fn kubectls_table_request_is_recognised() {
        let mut h = HeaderMap::new();
        assert!(!wants_table(&h));
        h.insert(
            header::ACCEPT,
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
                .parse()
                .unwrap(),
        );
        assert!(wants_table(&h));
    }
}
