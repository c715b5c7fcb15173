//! A leaf copy keeps every field of the host pod, including ones the Kubernetes types
//! this agent was built with do not know (an API server newer than them serves more): the
//! fields a round trip through the typed Pod drops are grafted back onto the copy.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Map, Value};

/// The parts of `raw` (a pod's JSON as the API server served it) that a round trip
/// through [`Pod`] drops, in the same shape; None when there are none (or `raw` is not a
/// pod the types can read).
pub fn of_pod(raw: &Value) -> Option<Value> {
    let typed: Pod = serde_json::from_value(raw.clone()).ok()?;
    let known = serde_json::to_value(&typed).ok()?;
    let spec = diff(raw.get("spec")?, known.get("spec").unwrap_or(&Value::Null))?;
    let mut out = Map::new();
    out.insert("spec".into(), spec);
    Some(Value::Object(out))
}

/// What of `raw` is absent from `known`: whole keys, and inside objects and lists the
/// parts that differ that way. Lists are matched element by element.
fn diff(raw: &Value, known: &Value) -> Option<Value> {
    match (raw, known) {
        (Value::Object(r), Value::Object(k)) => {
            let mut out = Map::new();
            for (key, rv) in r {
                match k.get(key) {
                    None => {
                        out.insert(key.clone(), rv.clone());
                    }
                    Some(kv) => {
                        if let Some(d) = diff(rv, kv) {
                            out.insert(key.clone(), d);
                        }
                    }
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        (Value::Array(r), Value::Array(k)) if r.len() == k.len() => {
            let parts: Vec<Value> = r
                .iter()
                .zip(k)
                .map(|(rv, kv)| diff(rv, kv).unwrap_or(Value::Object(Map::new())))
                .collect();
            parts
                .iter()
                .any(|p| p.as_object().is_none_or(|o| !o.is_empty()))
                .then_some(Value::Array(parts))
        }
        _ => None,
    }
}

/// Puts `unknown` (from [`of_pod`], of the host pod) into `copy` (the leaf copy's JSON):
/// an unknown field goes where its parent is in the copy, never over what the copy has.
/// List elements are matched by `name` when they have one (the copy may drop volumes),
/// else by position.
pub fn graft(copy: &mut Value, unknown: &Value, host: &Value) {
    match (copy, unknown) {
        (Value::Object(c), Value::Object(u)) => {
            for (key, uv) in u {
                let hv = host.get(key).unwrap_or(&Value::Null);
                match c.get_mut(key) {
                    None => {
                        c.insert(key.clone(), uv.clone());
                    }
                    Some(cv) => graft(cv, uv, hv),
                }
            }
        }
        (Value::Array(c), Value::Array(u)) => {
            let host_items = host.as_array().cloned().unwrap_or_default();
            for (i, uv) in u.iter().enumerate() {
                let name = host_items
                    .get(i)
                    .and_then(|h| h.get("name"))
                    .and_then(Value::as_str);
                let target = match name {
                    Some(n) => c
                        .iter_mut()
                        .find(|e| e.get("name").and_then(Value::as_str) == Some(n)),
                    None => c.get_mut(i),
                };
                if let Some(t) = target {
                    graft(t, uv, host_items.get(i).unwrap_or(&Value::Null));
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_the_types_do_not_know_are_found_and_grafted_onto_the_copy() {
        let host = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "futureField": {"mode": "x"},
                "containers": [
                    {"name": "a", "image": "i", "futureContainerField": 1},
                    {"name": "b", "image": "j"}
                ],
                "volumes": [
                    {"name": "kube-api-access", "projected": {"sources": []}},
                    {"name": "data", "emptyDir": {}, "futureVolumeField": true}
                ]
            }
        });
        let unknown = of_pod(&host).expect("unknown fields");
        assert_eq!(
            unknown,
            json!({"spec": {
                "futureField": {"mode": "x"},
                "containers": [{"futureContainerField": 1}, {}],
                "volumes": [{}, {"futureVolumeField": true}]
            }})
        );
        // The copy dropped the token volume and changed the image: matched by name.
        let mut copy = json!({"spec": {
            "containers": [{"name": "a", "image": "mirror/i"}, {"name": "b", "image": "j"}],
            "volumes": [{"name": "data", "emptyDir": {}}]
        }});
        graft(&mut copy, &unknown, &host);
        assert_eq!(
            copy,
            json!({"spec": {
                "futureField": {"mode": "x"},
                "containers": [
                    {"name": "a", "image": "mirror/i", "futureContainerField": 1},
                    {"name": "b", "image": "j"}
                ],
                "volumes": [{"name": "data", "emptyDir": {}, "futureVolumeField": true}]
            }})
        );
    }

    #[test]
    fn a_pod_the_types_know_whole_has_nothing_unknown() {
        let host = json!({
            "metadata": {"name": "p"},
            "spec": {"schedulingGroup": {"podGroupName": "g"}, "hostnameOverride": "h",
                "containers": [{"name": "a", "image": "i",
                    "resources": {"requests": {"cpu": "1"}}}]}
        });
        assert_eq!(of_pod(&host), None);
    }
}
