//! The only kubeconfig form a join Secret may hold: a server, its CA (inline) and a
//! bearer token. Anything that would make the agent or `unjoin` run a program, read a
//! file, or present another identity is refused, naming the field.

use serde_json::Value;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LeafKubeconfigError {
    #[error("not YAML: {0}")]
    NotYaml(String),
    #[error(
        "{field}: not allowed in a leaf kubeconfig (only clusters[].cluster.server and certificate-authority-data, and users[].user.token)"
    )]
    Forbidden { field: String },
    #[error("{field}: required")]
    Missing { field: String },
    #[error("{field}: {problem}")]
    Invalid { field: String, problem: String },
}

const CLUSTER_FIELDS: &[&str] = &["server", "certificate-authority-data", "tls-server-name"];
const USER_FIELDS: &[&str] = &["token"];

fn entries<'a>(doc: &'a Value, list: &str) -> Result<Vec<&'a Value>, LeafKubeconfigError> {
    match doc.get(list) {
        None | Some(Value::Null) => Err(LeafKubeconfigError::Missing { field: list.into() }),
        Some(Value::Array(items)) if !items.is_empty() => Ok(items.iter().collect()),
        Some(_) => Err(LeafKubeconfigError::Invalid {
            field: list.into(),
            problem: "must be a non-empty list".into(),
        }),
    }
}

fn only(body: Option<&Value>, allowed: &[&str], path: &str) -> Result<(), LeafKubeconfigError> {
    let Some(Value::Object(map)) = body else {
        return Err(LeafKubeconfigError::Missing { field: path.into() });
    };
    for key in map.keys() {
        let name = key.as_str();
        if !allowed.contains(&name) {
            return Err(LeafKubeconfigError::Forbidden {
                field: format!("{path}.{name}"),
            });
        }
    }
    Ok(())
}

/// Checks `text` is a kubeconfig of the allowed form.
pub fn check(text: &str) -> Result<(), LeafKubeconfigError> {
    let doc: Value =
        crate::yaml::from_str(text).map_err(|e| LeafKubeconfigError::NotYaml(e.to_string()))?;
    for (i, c) in entries(&doc, "clusters")?.into_iter().enumerate() {
        let path = format!("clusters[{i}].cluster");
        let body = c.get("cluster");
        only(body, CLUSTER_FIELDS, &path)?;
        for required in ["server", "certificate-authority-data"] {
            if body.and_then(|b| b.get(required)).is_none() {
                return Err(LeafKubeconfigError::Missing {
                    field: format!("{path}.{required}"),
                });
            }
        }
    }
    for (i, u) in entries(&doc, "users")?.into_iter().enumerate() {
        let path = format!("users[{i}].user");
        let body = u.get("user");
        only(body, USER_FIELDS, &path)?;
        if body.and_then(|b| b.get("token")).is_none() {
            return Err(LeafKubeconfigError::Missing {
                field: format!("{path}.token"),
            });
        }
    }
    // Contexts choose among the above; only a namespace may be added.
    for (i, c) in entries(&doc, "contexts")?.into_iter().enumerate() {
        only(
            c.get("context"),
            &["cluster", "user", "namespace"],
            &format!("contexts[{i}].context"),
        )?;
    }
    Ok(())
}

/// The token of a checked kubeconfig's first user.
pub fn token(text: &str) -> Option<String> {
    let doc: Value = crate::yaml::from_str(text).ok()?;
    doc.get("users")?
        .get(0)?
        .get("user")?
        .get("token")?
        .as_str()
        .map(String::from)
}

/// The same kubeconfig with every user's token replaced: what the agent writes back
/// when it renews the token.
pub fn with_token(text: &str, token: &str) -> Result<String, LeafKubeconfigError> {
    let mut doc: Value =
        crate::yaml::from_str(text).map_err(|e| LeafKubeconfigError::NotYaml(e.to_string()))?;
    if let Some(Value::Array(users)) = doc.get_mut("users") {
        for u in users {
            if let Some(Value::Object(user)) = u.get_mut("user") {
                user.insert("token".into(), Value::from(token));
            }
        }
    }
    crate::yaml::to_string(&doc).map_err(|e| LeafKubeconfigError::NotYaml(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "apiVersion: v1
kind: Config
clusters:
- name: east
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority-data: Q0E=
users:
- name: mcsched-leaf
  user:
    token: abc
contexts:
- name: east
  context: {cluster: east, user: mcsched-leaf}
current-context: east
";

    #[test]
    fn server_ca_and_token_are_all_it_takes() {
        assert_eq!(check(GOOD), Ok(()));
        assert_eq!(token(GOOD).as_deref(), Some("abc"));
        let renewed = with_token(GOOD, "xyz").unwrap();
        assert_eq!(check(&renewed), Ok(()));
        assert_eq!(token(&renewed).as_deref(), Some("xyz"));
    }

    #[test]
    fn anything_that_runs_reads_or_impersonates_is_refused_by_field() {
        for (from, to, field) in [
            (
                "    token: abc",
                "    exec: {command: /bin/sh}",
                "users[0].user.exec",
            ),
            (
                "    token: abc",
                "    tokenFile: /var/run/token",
                "users[0].user.tokenFile",
            ),
            (
                "    token: abc",
                "    token: abc\n    client-key: /k",
                "users[0].user.client-key",
            ),
            (
                "    token: abc",
                "    token: abc\n    auth-provider: {name: gcp}",
                "users[0].user.auth-provider",
            ),
            (
                "    token: abc",
                "    token: abc\n    as: admin",
                "users[0].user.as",
            ),
            (
                "    certificate-authority-data: Q0E=",
                "    certificate-authority: /etc/ca.crt",
                "clusters[0].cluster.certificate-authority",
            ),
            (
                "    certificate-authority-data: Q0E=",
                "    certificate-authority-data: Q0E=\n    insecure-skip-tls-verify: true",
                "clusters[0].cluster.insecure-skip-tls-verify",
            ),
            (
                "    server: https://10.0.0.1:6443",
                "    server: https://10.0.0.1:6443\n    proxy-url: http://p",
                "clusters[0].cluster.proxy-url",
            ),
        ] {
            let text = GOOD.replace(from, to);
            let e = check(&text).unwrap_err();
            assert!(e.to_string().starts_with(&format!("{field}:")), "{e}");
        }
    }

    #[test]
    fn a_missing_token_or_ca_is_named() {
        let e = check(&GOOD.replace("    token: abc\n", "    {}\n")).unwrap_err();
        assert!(e.to_string().contains("users[0].user"), "{e}");
        let e = check(&GOOD.replace("    certificate-authority-data: Q0E=\n", "")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "clusters[0].cluster.certificate-authority-data: required"
        );
        assert!(matches!(check("{"), Err(LeafKubeconfigError::NotYaml(_))));
    }
}
