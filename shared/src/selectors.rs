//! Label selectors and node selectors with Kubernetes' matching rules.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

pub type Labels = BTreeMap<String, String>;

/// `metav1.LabelSelectorAsSelector` then `Matches`: a nil selector matches nothing, an
/// empty one everything; an unknown operator matches nothing.
pub fn label_selector_matches(selector: Option<&LabelSelector>, labels: &Labels) -> bool {
    let Some(sel) = selector else {
        return false;
    };
    let ml_ok = sel
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    ml_ok
        && sel
            .match_expressions
            .iter()
            .flatten()
            .all(|req| label_requirement_matches(req, labels))
}

/// A label selector in kubectl's string form (`a=b,c in (d,e),!f`); `empty` for one that
/// selects everything.
pub(crate) fn label_selector_string(sel: &LabelSelector, empty: &str) -> String {
    let mut parts: Vec<String> = sel
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for r in sel.match_expressions.iter().flatten() {
        let values = r.values.as_deref().unwrap_or_default().join(",");
        parts.push(match r.operator.as_str() {
            "In" => format!("{} in ({values})", r.key),
            "NotIn" => format!("{} notin ({values})", r.key),
            "Exists" => r.key.clone(),
            "DoesNotExist" => format!("!{}", r.key),
            other => format!("{} {other} ({values})", r.key),
        });
    }
    if parts.is_empty() {
        empty.to_string()
    } else {
        parts.join(",")
    }
}

fn label_requirement_matches(req: &LabelSelectorRequirement, labels: &Labels) -> bool {
    let value = labels.get(&req.key);
    let values = req.values.as_deref().unwrap_or_default();
    match req.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        _ => false,
    }
}

/// A node selector requirement on labels (`matchExpressions`): In, NotIn, Exists,
/// DoesNotExist, Gt, Lt (integers).
pub(crate) fn node_requirement_matches(req: &NodeSelectorRequirement, labels: &Labels) -> bool {
    let value = labels.get(&req.key);
    let values = req.values.as_deref().unwrap_or_default();
    match req.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), [bound]) = (value, values) else {
                return false;
            };
            match (v.parse::<i64>(), bound.parse::<i64>()) {
                (Ok(v), Ok(b)) if req.operator == "Gt" => v > b,
                (Ok(v), Ok(b)) => v < b,
                _ => false,
            }
        }
        _ => false,
    }
}

/// A `matchFields` requirement: only `metadata.name` with In / NotIn is supported, as in
/// Kubernetes.
fn field_requirement_matches(req: &NodeSelectorRequirement, node_name: &str) -> bool {
    if req.key != "metadata.name" {
        return false;
    }
    let values = req.values.as_deref().unwrap_or_default();
    match req.operator.as_str() {
        "In" => values.len() == 1 && values[0] == node_name,
        "NotIn" => values.len() == 1 && values[0] != node_name,
        _ => false,
    }
}

/// A term matches when all its expressions and fields do; an empty term matches nothing.
pub fn node_selector_term_matches(
    term: &NodeSelectorTerm,
    labels: &Labels,
    node_name: &str,
) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs.iter().all(|r| node_requirement_matches(r, labels))
        && fields
            .iter()
            .all(|r| field_requirement_matches(r, node_name))
}

/// Terms are ORed.
pub fn node_selector_matches(sel: &NodeSelector, labels: &Labels, node_name: &str) -> bool {
    sel.node_selector_terms
        .iter()
        .any(|t| node_selector_term_matches(t, labels, node_name))
}

pub fn node_labels(node: &Node) -> &Labels {
    static EMPTY: Labels = BTreeMap::new();
    node.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn node_requirements() {
        let l = labels(&[("zone", "a"), ("cores", "8")]);
        let cases = [
            (req("zone", "In", &["a", "b"]), true),
            (req("zone", "In", &["b"]), false),
            (req("zone", "NotIn", &["b"]), true),
            (req("missing", "NotIn", &["b"]), true),
            (req("zone", "Exists", &[]), true),
            (req("zone", "DoesNotExist", &[]), false),
            (req("cores", "Gt", &["4"]), true),
            (req("cores", "Lt", &["4"]), false),
            (req("zone", "Gt", &["4"]), false),
            (req("zone", "Bogus", &["a"]), false),
        ];
        for (r, want) in cases {
            assert_eq!(node_requirement_matches(&r, &l), want, "{r:?}");
        }
    }

    #[test]
    fn terms_and_fields() {
        let l = labels(&[("zone", "a")]);
        let term = NodeSelectorTerm {
            match_expressions: Some(vec![req("zone", "In", &["a"])]),
            match_fields: Some(vec![req("metadata.name", "In", &["n1"])]),
        };
        assert!(node_selector_term_matches(&term, &l, "n1"));
        assert!(!node_selector_term_matches(&term, &l, "n2"));
        assert!(!node_selector_term_matches(
            &NodeSelectorTerm::default(),
            &l,
            "n1"
        ));
    }

    #[test]
    fn label_selectors() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        let sel = LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "NotIn".into(),
                values: Some(vec!["back".into()]),
            }]),
        };
        assert!(label_selector_matches(Some(&sel), &l));
        assert!(label_selector_matches(Some(&LabelSelector::default()), &l));
        assert!(!label_selector_matches(None, &l));
    }
}
