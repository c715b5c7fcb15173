//! Checks of what the user typed, before anything is touched.

use std::collections::BTreeMap;

use mcsched_shared::keys;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NameError {
    #[error("--name {0:?}: {1}")]
    Cluster(String, Problem),
    #[error("--label {0:?}: {1}")]
    Label(String, Problem),
    #[error("--node-selector {0:?}: {1}")]
    NodeSelector(String, Problem),
    #[error("--cost {0:?}: must be a non-negative integer")]
    Cost(String),
    #[error("--{0} {1:?}: {2}")]
    Topology(&'static str, String, Problem),
    #[error("--namespaces {0:?}: {1}")]
    Namespace(String, Problem),
    #[error("--token-lifetime {0}: must be at least {1} (the API server's shortest token)")]
    TokenLifetime(String, String),
}

/// What is wrong with one value the user typed, in kube's validation words.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Problem {
    #[error("must be 1 to {0} characters")]
    Length(usize),
    #[error(
        "must consist of lower case alphanumeric characters or '-', and start and end with an alphanumeric character (a DNS-1123 label)"
    )]
    NotDnsLabel,
    #[error("{0} must be no more than 63 characters")]
    TooLong(Part),
    #[error(
        "{0} must consist of alphanumeric characters, '-', '_' or '.', and start and end with an alphanumeric character"
    )]
    NotLabelText(Part),
    #[error("key prefix must be a DNS-1123 subdomain")]
    KeyPrefix,
    #[error("key name must not be empty")]
    EmptyKeyName,
    #[error("expected key=value")]
    NotKeyValue,
    #[error("{0} is set by mcsched from --name")]
    SetByMcsched(&'static str),
    #[error("{0} is given twice")]
    Twice(String),
    #[error(
        "a system namespace is never granted (pods there could run as its ServiceAccounts), not even by --all-namespaces"
    )]
    SystemNamespace,
    #[error("name at least one leaf namespace, or pass --all-namespaces")]
    NoNamespace,
}

/// Which part of a label [`Problem::TooLong`] and [`Problem::NotLabelText`] are about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Value,
    KeyName,
}

impl std::fmt::Display for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Part::Value => "value",
            Part::KeyName => "key name",
        })
    }
}

fn dns_label(s: &str, max: usize) -> Result<(), Problem> {
    if s.is_empty() || s.len() > max {
        return Err(Problem::Length(max));
    }
    let ok = s
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !ok || s.starts_with('-') || s.ends_with('-') {
        return Err(Problem::NotDnsLabel);
    }
    Ok(())
}

/// A cluster name: a DNS-1123 label short enough that `mcsched-<name>` is one too.
pub fn cluster(name: &str) -> Result<(), NameError> {
    dns_label(name, 63 - keys::VIRTUAL_NODE_PREFIX.len())
        .map_err(|e| NameError::Cluster(name.into(), e))
}

fn label_value(v: &str) -> Result<(), Problem> {
    label_text(v, Part::Value)
}

fn label_text(v: &str, part: Part) -> Result<(), Problem> {
    if v.len() > 63 {
        return Err(Problem::TooLong(part));
    }
    let ok = v
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let ends = |c: Option<char>| c.is_none_or(|c| c.is_ascii_alphanumeric());
    if !ok || !ends(v.chars().next()) || !ends(v.chars().last()) {
        return Err(Problem::NotLabelText(part));
    }
    Ok(())
}

fn label_key(k: &str) -> Result<(), Problem> {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if let Some(p) = prefix
        && (p.is_empty() || p.len() > 253 || !p.split('.').all(|part| dns_label(part, 63).is_ok()))
    {
        return Err(Problem::KeyPrefix);
    }
    if name.is_empty() {
        return Err(Problem::EmptyKeyName);
    }
    label_text(name, Part::KeyName)
}

/// `k=v` pairs; the keys mcsched sets itself are refused.
pub fn labels(raw: &[String]) -> Result<BTreeMap<String, String>, NameError> {
    let mut out = BTreeMap::new();
    for l in raw {
        let Some((k, v)) = l.split_once('=') else {
            return Err(NameError::Label(l.clone(), Problem::NotKeyValue));
        };
        label_key(k).map_err(|e| NameError::Label(l.clone(), e))?;
        label_value(v).map_err(|e| NameError::Label(l.clone(), e))?;
        if k == keys::CLUSTER_LABEL {
            return Err(NameError::Label(
                l.clone(),
                Problem::SetByMcsched(keys::CLUSTER_LABEL),
            ));
        }
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

/// `--node-selector k=v[,k=v]`, repeatable: the labels the agent's nodes must have.
pub fn node_selector(raw: &[String]) -> Result<BTreeMap<String, String>, NameError> {
    let mut out = BTreeMap::new();
    for pair in raw.iter().flat_map(|r| r.split(',')) {
        let bad = |e: Problem| NameError::NodeSelector(pair.to_string(), e);
        let Some((k, v)) = pair.split_once('=') else {
            return Err(bad(Problem::NotKeyValue));
        };
        label_key(k).map_err(bad)?;
        label_value(v).map_err(bad)?;
        if out.insert(k.to_string(), v.to_string()).is_some() {
            return Err(bad(Problem::Twice(k.to_string())));
        }
    }
    Ok(out)
}

pub fn cost(raw: &str) -> Result<u64, NameError> {
    raw.parse().map_err(|_| NameError::Cost(raw.into()))
}

pub fn topology(flag: &'static str, raw: &str) -> Result<(), NameError> {
    label_value(raw).map_err(|e| NameError::Topology(flag, raw.into(), e))
}

/// Leaf namespaces never granted: a pod created there may run as any of their
/// ServiceAccounts (the leaf's controllers in `kube-system`), and a Secret created in
/// [`keys::SYSTEM_NAMESPACE`] could be a token that never expires for the leaf account
/// itself. `--all-namespaces` leaves them out too (an admission policy join creates).
const NEVER_GRANTED: &[&str] = keys::LEAF_PROTECTED_NAMESPACES;

/// The leaf namespaces of `--namespaces`, sorted and each once.
pub fn namespaces(raw: &[String]) -> Result<Vec<String>, NameError> {
    let mut out = std::collections::BTreeSet::new();
    for ns in raw {
        dns_label(ns, 63).map_err(|e| NameError::Namespace(ns.clone(), e))?;
        if NEVER_GRANTED.contains(&ns.as_str()) {
            return Err(NameError::Namespace(ns.clone(), Problem::SystemNamespace));
        }
        out.insert(ns.clone());
    }
    if out.is_empty() {
        return Err(NameError::Namespace(String::new(), Problem::NoNamespace));
    }
    Ok(out.into_iter().collect())
}

/// The shortest token lifetime the API server issues (TokenRequest's
/// `expirationSeconds` minimum).
pub const MIN_TOKEN_LIFETIME: std::time::Duration = std::time::Duration::from_secs(600);

pub fn token_lifetime(d: std::time::Duration) -> Result<(), NameError> {
    if d < MIN_TOKEN_LIFETIME {
        return Err(NameError::TokenLifetime(
            crate::duration::display(d),
            crate::duration::display(MIN_TOKEN_LIFETIME),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_labels_and_costs_are_checked() {
        assert!(cluster("east-1").is_ok());
        assert!(cluster("East").is_err());
        assert!(cluster("-east").is_err());
        assert!(cluster(&"a".repeat(56)).is_err());
        assert!(cluster(&"a".repeat(55)).is_ok());
        assert_eq!(
            labels(&["tier=onprem".into(), "example.com/team=db".into()]).map(|m| m.len()),
            Ok(2)
        );
        assert!(matches!(
            labels(&["tier".into()]),
            Err(NameError::Label(_, Problem::NotKeyValue))
        ));
        assert_eq!(
            labels(&["tier=on prem".into()]).map_err(|e| e.to_string()),
            Err("--label \"tier=on prem\": value must consist of alphanumeric characters, '-', '_' or '.', and start and end with an alphanumeric character".into())
        );
        assert_eq!(
            labels(&["t ier=x".into()]),
            Err(NameError::Label(
                "t ier=x".into(),
                Problem::NotLabelText(Part::KeyName)
            ))
        );
        assert!(labels(&["mcsched.io/cluster=x".into()]).is_err());
        assert_eq!(cost("3"), Ok(3));
        assert!(cost("-1").is_err());
        assert!(cost("cheap").is_err());
        assert!(topology("region", "eu-west-1").is_ok());
        assert!(topology("region", "eu west").is_err());
    }

    #[test]
    fn node_selectors_are_checked() {
        let sel =
            |xs: &[&str]| node_selector(&xs.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            sel(&[
                "kubernetes.io/hostname=node-1,tier=infra",
                "kubernetes.io/os=linux"
            ])
            .map(|m| m.into_iter().collect::<Vec<_>>()),
            Ok(vec![
                ("kubernetes.io/hostname".to_string(), "node-1".to_string()),
                ("kubernetes.io/os".to_string(), "linux".to_string()),
                ("tier".to_string(), "infra".to_string()),
            ])
        );
        assert_eq!(
            sel(&["node-role.kubernetes.io/control-plane="]).map(|m| m.len()),
            Ok(1)
        );
        assert_eq!(
            sel(&["tier"]).map_err(|e| e.to_string()),
            Err("--node-selector \"tier\": expected key=value".to_string())
        );
        assert!(
            matches!(sel(&["a=b,a=c"]), Err(NameError::NodeSelector(p, Problem::Twice(k))) if p == "a=c" && k == "a")
        );
        assert!(sel(&["bad key=x"]).is_err());
        assert!(sel(&["k=bad value"]).is_err());
    }

    #[test]
    fn namespaces_and_token_lifetimes_are_checked() {
        let ns = |xs: &[&str]| namespaces(&xs.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            ns(&["web", "apps", "web"]),
            Ok(vec!["apps".to_string(), "web".to_string()])
        );
        assert!(matches!(ns(&["Apps"]), Err(NameError::Namespace(n, _)) if n == "Apps"));
        assert!(matches!(ns(&[""]), Err(NameError::Namespace(..))));
        assert!(ns(&[]).is_err());
        for system in [
            "kube-system",
            "kube-public",
            "kube-node-lease",
            "mcsched-system",
        ] {
            let e = ns(&["apps", system]).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("--namespaces \"{system}\": a system namespace")),
                "{e}"
            );
        }
        assert!(token_lifetime(std::time::Duration::from_secs(600)).is_ok());
        assert_eq!(
            token_lifetime(std::time::Duration::from_secs(300))
                .unwrap_err()
                .to_string(),
            "--token-lifetime 5m0s: must be at least 10m0s (the API server's shortest token)"
        );
    }
}
