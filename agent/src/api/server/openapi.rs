//! The OpenAPI documents the API server's aggregator downloads from every APIService
//! (v2 and v3), so that the aggregated spec stays whole and `kubectl explain
//! explanations.mcsched.io` works.

use axum::Router;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use mcsched_shared::keys;
use serde_json::{Value, json};

use super::api_status::json_ok;

fn gvk(kind: &str) -> Value {
    json!([{"group": keys::API_GROUP, "version": keys::API_VERSION, "kind": kind}])
}

fn field(kind: &str, description: &str) -> Value {
    json!({"type": kind, "description": description})
}

/// The schemas, by definition name, the same in both versions (no `$ref`s: the
/// aggregator merges documents, and a dangling reference would break the merge).
fn schemas() -> Value {
    let type_meta = |kind: &str| {
        json!({
            "apiVersion": field("string", keys::API_GROUP_VERSION),
            "kind": field("string", kind),
        })
    };
    let decision = json!({
        "type": "object",
        "description": "One scheduling decision: what every plugin said about every node.",
        "properties": {
            "pod": field("string", "namespace/name of the pod."),
            "schedulerName": field("string", "The profile that decided."),
            "time": field("string", "RFC 3339 time of the attempt."),
            "outcome": field("object", "result: scheduled (node, and leafNode for a virtual node), unschedulable (message as in the FailedScheduling event, nominatedNode and the victims preemption evicts for it) or error (message)."),
            "numAllNodes": field("integer", "Nodes in the scheduler's cache."),
            "numEvaluatedNodes": field("integer", "Nodes Filter looked at (percentageOfNodesToScore may stop it early)."),
            "numFeasibleNodes": field("integer", "Nodes that passed every filter."),
            "nodes": field("array", "Per node: each filter plugin's verdict and reasons, each score plugin's raw, normalized and weighted score, the total, for a virtual node the leaf's node, and the pods nominated there that Filter kept room for."),
            "durations": field("array", "Extension points in the order they ran, with the time spent in each."),
            "preEnqueue": field("array", "A what-if's only: each PreEnqueue plugin's verdict, as the queue would ask it before taking the pod in (GangScheduling holds a PodGroup's member until its group and minCount members exist)."),
            "preFilter": field("array", "PreFilter verdicts that ended the attempt before Filter."),
            "permit": field("array", "A what-if's only, when a node fits: each Permit plugin's verdict for the pod there, nothing assumed (GangScheduling waits until minCount members are scheduled)."),
            "extenders": field("array", "What each scheduler extender answered."),
        },
        "x-kubernetes-preserve-unknown-fields": true,
    });
    let mut explanation = type_meta(keys::EXPLANATION_KIND);
    explanation["metadata"] = field("object", "Named as the pod, in the pod's namespace.");
    explanation["status"] = decision.clone();
    let mut list = type_meta(&format!("{}List", keys::EXPLANATION_KIND));
    list["metadata"] = field("object", "Standard list metadata.");
    list["items"] =
        json!({"type": "array", "items": {"type": "object", "description": "An Explanation."}});
    let mut what_if = type_meta(keys::WHATIF_KIND);
    what_if["metadata"] = field("object", "Only the namespace matters: nothing is stored.");
    what_if["spec"] = json!({
        "type": "object",
        "required": ["template"],
        "properties": {
            "template": {
                "type": "object",
                "description": "A Pod's metadata and spec, or a workload's pod template: the pod to decide about. It is never created.",
                "x-kubernetes-preserve-unknown-fields": true,
            },
        },
    });
    what_if["status"] = decision;
    let group = "io.mcsched.v1alpha1";
    json!({
        format!("{group}.Explanation"): {
            "type": "object",
            "description": "Why a pod went where it went (or why it waits): the last scheduling decision for a bound pod, the decision now for a pending one. Read-only.",
            "properties": explanation,
            "x-kubernetes-group-version-kind": gvk(keys::EXPLANATION_KIND),
        },
        format!("{group}.ExplanationList"): {
            "type": "object",
            "description": "Explanations of a namespace's pods, pending ones first.",
            "properties": list,
            "x-kubernetes-group-version-kind": gvk(&format!("{}List", keys::EXPLANATION_KIND)),
        },
        format!("{group}.WhatIf"): {
            "type": "object",
            "description": "Create one to ask where a pod would go now: the answer comes back in status; nothing is created, bound or stored.",
            "properties": what_if,
            "x-kubernetes-group-version-kind": gvk(keys::WHATIF_KIND),
        },
    })
}

fn info() -> Value {
    json!({"title": "mcsched", "version": keys::API_VERSION})
}

async fn v2() -> Response {
    json_ok(
        StatusCode::OK,
        &json!({"swagger": "2.0", "info": info(), "paths": {}, "definitions": schemas()}),
    )
}

fn v3_path() -> String {
    format!("apis/{}", keys::API_GROUP_VERSION)
}

/// The index names each document with a hash of its content, as kube-apiserver's does,
/// so that the aggregator sees a changed document (after an upgrade) and downloads it.
async fn v3_index() -> Response {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v3_document().to_string().hash(&mut h);
    let url = format!("/openapi/v3/{}?hash={:016X}", v3_path(), h.finish());
    json_ok(
        StatusCode::OK,
        &json!({"paths": {v3_path(): {"serverRelativeURL": url}}}),
    )
}

/// One operation of the group-version document: `kubectl explain` finds a resource's
/// kind through the operations on its paths.
fn operation(action: &str, kind: &str, description: &str) -> Value {
    let gvk = json!({"group": keys::API_GROUP, "version": keys::API_VERSION, "kind": kind});
    json!({
        "description": description,
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk,
        "parameters": [],
        "responses": {
            "200": {
                "description": "OK",
                "content": {"application/json": {"schema": {
                    "$ref": format!("#/components/schemas/io.mcsched.v1alpha1.{kind}")
                }}},
            },
        },
    })
}

fn v3_paths() -> Value {
    let base = format!("/apis/{}/namespaces/{{namespace}}", keys::API_GROUP_VERSION);
    let list_kind = format!("{}List", keys::EXPLANATION_KIND);
    json!({
        format!("{base}/{}", keys::EXPLANATIONS): {
            "get": operation("list", &list_kind, "The namespace's explanations, pending pods first."),
        },
        format!("{base}/{}/{{name}}", keys::EXPLANATIONS): {
            "get": operation("get", keys::EXPLANATION_KIND, "A pod's explanation."),
        },
        format!("{base}/{}", keys::WHATIFS): {
            "post": operation("post", keys::WHATIF_KIND, "Where a pod made from spec.template would go now."),
        },
    })
}

fn v3_document() -> Value {
    json!({"openapi": "3.0.0", "info": info(), "paths": v3_paths(), "components": {"schemas": schemas()}})
}

async fn v3_group_version() -> Response {
    json_ok(StatusCode::OK, &v3_document())
}

pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/openapi/v2", get(v2))
        .route("/openapi/v3", get(v3_index))
        .route(&format!("/openapi/v3/{}", v3_path()), get(v3_group_version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_schema_named_by_its_group_version_kind() {
        let s = schemas();
        for kind in ["Explanation", "ExplanationList", "WhatIf"] {
            let def = &s[format!("io.mcsched.v1alpha1.{kind}")];
            assert_eq!(def["x-kubernetes-group-version-kind"][0]["kind"], kind);
            assert_eq!(
                def["x-kubernetes-group-version-kind"][0]["group"],
                "mcsched.io"
            );
        }
        assert!(!s.to_string().contains("$ref"), "no reference can dangle");
    }
}
