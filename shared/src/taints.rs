//! Taints and tolerations with the semantics of `v1helper.TolerationsTolerateTaint`.

use k8s_openapi::api::core::v1::{Taint, Toleration};

pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = toleration.effect.as_deref()
        && !effect.is_empty()
        && effect != taint.effect
    {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        // An empty key with Equal matches nothing but a taint of empty key and value.
        "Equal" | "" => {
            (!key.is_empty() || taint.key.is_empty())
                && toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

/// The first taint with a scheduling effect (NoSchedule, NoExecute) none of the
/// tolerations tolerates.
pub fn first_untolerated<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(String::from),
            effect: effect.into(),
            ..Default::default()
        }
    }

    fn tol(
        key: Option<&str>,
        op: Option<&str>,
        value: Option<&str>,
        effect: Option<&str>,
    ) -> Toleration {
        Toleration {
            key: key.map(String::from),
            operator: op.map(String::from),
            value: value.map(String::from),
            effect: effect.map(String::from),
            ..Default::default()
        }
    }

    #[test]
    fn toleration_matching() {
        let t = taint("dedicated", Some("gpu"), "NoSchedule");
        assert!(tolerates(
            &tol(Some("dedicated"), Some("Equal"), Some("gpu"), None),
            &t
        ));
        assert!(tolerates(
            &tol(Some("dedicated"), None, Some("gpu"), Some("NoSchedule")),
            &t
        ));
        assert!(!tolerates(
            &tol(Some("dedicated"), Some("Equal"), Some("cpu"), None),
            &t
        ));
        assert!(!tolerates(
            &tol(Some("dedicated"), Some("Exists"), None, Some("NoExecute")),
            &t
        ));
        assert!(tolerates(&tol(None, Some("Exists"), None, None), &t));
        assert!(!tolerates(&tol(None, Some("Equal"), None, None), &t));
        assert!(!tolerates(
            &tol(Some("other"), Some("Exists"), None, None),
            &t
        ));
    }

    #[test]
    fn prefer_no_schedule_does_not_block() {
        let taints = vec![
            taint("soft", None, "PreferNoSchedule"),
            taint("hard", None, "NoExecute"),
        ];
        assert_eq!(
            first_untolerated(&taints, &[]).map(|t| t.key.as_str()),
            Some("hard")
        );
        let ok = [tol(Some("hard"), Some("Exists"), None, None)];
        assert!(first_untolerated(&taints, &ok).is_none());
    }
}
