//! A policy's `jsonPatch` applied as tenant input must be: bounded in what it can cost,
//! unable to take the process down, and unable to widen what the copy reaches. Namespace
//! editors write PlacementPolicies, and the patch runs inside the scheduling cycle, pod
//! sync and what-ifs.
//!
//! - json-patch's `patch` undoes the applied operations when a later one fails, and
//!   panics when the undo fails (undoing a `move` from a child into its parent always
//!   does). The operations go one at a time to `patch_unsafe` on a document that is
//!   thrown away on error, so nothing needs undoing.
//! - `copy` doubles what it copies; the document's size is checked after every copy and
//!   at the end, against the API server's own limit on a stored object.
//! - What the host decided or the transform strips (node, scheduler, priority, account,
//!   owners, finalizers) stays as it was, and the copy names no object its pod did not.

use json_patch::Patch;
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use super::{OverrideError, PatchOp, PatchOperation};
use crate::pod_references::references;

/// The most operations one override's `jsonPatch` may have (the schema's `maxItems`).
pub const MAX_OPERATIONS: usize = 64;

/// The largest copy a patch may produce: etcd's default limit on a stored object
/// (1.5 MiB); the API server would refuse a bigger pod anyway.
pub const MAX_PATCHED_BYTES: usize = 1536 * 1024;

/// The pod fields a patch may not set, with their names: the host decides them, or the
/// transform strips them on purpose.
const HOST_DECIDED: &[(&str, &str)] = &[
    (
        "nodeName",
        "the host's decision; the leaf's scheduler places the copy",
    ),
    (
        "schedulerName",
        "the leaf's default scheduler places the copy",
    ),
    (
        "priorityClassName",
        "pod sync keeps the pod's class where the leaf has it",
    ),
    ("priority", "the leaf's admission sets it from the class"),
    (
        "preemptionPolicy",
        "the leaf's admission sets it from the class",
    ),
    ("schedulingGroup", "the gang was placed whole in the host"),
    ("serviceAccountName", "the copy runs as its pod's account"),
    ("serviceAccount", "the copy runs as its pod's account"),
];

/// `spec.overrides[n].jsonPatch[i]`'s paths, before anything runs: no operation may
/// write a host-decided field, metadata other than labels and annotations, or replace
/// the whole pod, spec or metadata.
pub(super) fn check_paths(op: &PatchOperation, field: &str) -> Result<(), OverrideError> {
    let mut written = vec![("path", op.path.as_str())];
    if op.op == PatchOp::Move
        && let Some(from) = &op.from
    {
        // A move removes what it moves.
        written.push(("from", from.as_str()));
    }
    if op.op == PatchOp::Test {
        return Ok(());
    }
    for (name, pointer) in written {
        let tokens = tokens(pointer);
        let refused = match tokens.as_slice() {
            [] => Some("replaces the whole copy".to_string()),
            [top] if top == "spec" || top == "metadata" => {
                Some(format!("replaces the copy's whole {top}: patch its fields"))
            }
            [m, key, ..] if m == "metadata" => match key.as_str() {
                "labels" | "annotations" => None,
                "name" | "namespace" => {
                    Some("the copy's name and namespace are the host pod's".into())
                }
                other => Some(format!(
                    "metadata.{other} is not an override's to set: a copy carries only its pod's labels and annotations"
                )),
            },
            [s, key, ..] if s == "spec" => HOST_DECIDED
                .iter()
                .find(|(k, _)| k == key)
                .map(|(k, why)| format!("spec.{k} is not an override's to set: {why}")),
            _ => None,
        };
        if let Some(message) = refused {
            return Err(OverrideError::everywhere(
                format!("{field}.{name}"),
                message,
            ));
        }
    }
    Ok(())
}

/// A JSON pointer's reference tokens, unescaped (`~1` is `/`, `~0` is `~`).
fn tokens(pointer: &str) -> Vec<String> {
    pointer
        .split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect()
}

/// Applies `ops` to `doc` one at a time; on error `doc` is half-patched and must be
/// dropped by the caller.
pub(super) fn apply(doc: &mut Value, ops: &Patch, field: &str) -> Result<(), OverrideError> {
    if ops.0.len() > MAX_OPERATIONS {
        return Err(OverrideError::everywhere(
            field,
            format!("{} operations: at most {MAX_OPERATIONS}", ops.0.len()),
        ));
    }
    for (i, op) in ops.0.iter().enumerate() {
        json_patch::patch_unsafe(doc, std::slice::from_ref(op))
            .map_err(|e| OverrideError::for_this_pod(format!("{field}[{i}]"), e.to_string()))?;
        if matches!(op, json_patch::PatchOperation::Copy(_)) && !fits(doc) {
            return Err(too_big(format!("{field}[{i}]")));
        }
    }
    if !fits(doc) {
        return Err(too_big(field.to_string()));
    }
    Ok(())
}

fn too_big(field: String) -> OverrideError {
    OverrideError::everywhere(
        field,
        format!("the patched copy is larger than {MAX_PATCHED_BYTES} bytes, the most a pod can be"),
    )
}

/// Whether `doc` serialises to at most [`MAX_PATCHED_BYTES`]; stops counting past it,
/// so the check costs no more than the limit whatever the document.
fn fits(doc: &Value) -> bool {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            if self.0 > MAX_PATCHED_BYTES {
                return Err(std::io::Error::other("over the limit"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    serde_json::to_writer(Counter(0), doc).is_ok()
}

/// `after` (the copy patched) against `before` (the copy as the transform made it): the
/// fields the host decided as they were, metadata changed only in labels and
/// annotations, and no object named that `before` did not name.
pub(super) fn check_not_widened(
    before: &Pod,
    after: &Pod,
    field: &str,
) -> Result<(), OverrideError> {
    let spec =
        |p: &Pod| serde_json::to_value(p.spec.clone().unwrap_or_default()).unwrap_or(Value::Null);
    let (b, a) = (spec(before), spec(after));
    for (key, why) in HOST_DECIDED {
        if b.get(key) != a.get(key) {
            return Err(OverrideError::for_this_pod(
                field,
                format!("sets spec.{key}, which is not an override's to set: {why}"),
            ));
        }
    }
    let meta = |p: &Pod| {
        let mut m = serde_json::to_value(&p.metadata).unwrap_or(Value::Null);
        if let Some(o) = m.as_object_mut() {
            for k in ["labels", "annotations", "name", "namespace"] {
                o.remove(k);
            }
        }
        m
    };
    let (b, a) = (meta(before), meta(after));
    if b != a {
        let key = a
            .as_object()
            .into_iter()
            .flatten()
            .find(|(k, v)| b.get(k.as_str()) != Some(v))
            .map_or("metadata".to_string(), |(k, _)| format!("metadata.{k}"));
        return Err(OverrideError::for_this_pod(
            field,
            format!(
                "sets {key}, which is not an override's to set: a copy carries only its pod's labels and annotations"
            ),
        ));
    }
    let allowed = references(before);
    if let Some(new) = references(after).difference(&allowed).next() {
        return Err(OverrideError::for_this_pod(
            field,
            format!(
                "names {} {}, which the pod does not: a copy uses only the objects its pod refers to",
                new.kind.as_str(),
                new.name
            ),
        ));
    }
    Ok(())
}

/// A pod as pods for mcsched usually look, for judging a policy's patch when the policy
/// is read: a patch that exceeds the bounds on it exceeds them on every pod.
pub(super) fn representative_pod() -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "representative", "namespace": "default",
                     "labels": {"app": "representative"}, "annotations": {"note": "x"}},
        "spec": {"containers": [{"name": "main", "image": "registry.example/app:1",
            "args": ["--serve"], "env": [{"name": "MODE", "value": "leaf"}],
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
            "volumes": [{"name": "scratch", "emptyDir": {}}]}
    }))
    .unwrap_or_default()
}
