//! The leaf token in a join Secret expires (a bound token from the TokenRequest API):
//! the leader asks the leaf for a new one at 80 % of its lifetime — the leaf account may
//! request tokens for itself only, and join's admission policy in the leaf lets it ask
//! only for what the renewal asks: bound to the same Secret as the current token, for the
//! same audiences, for at most join's lifetime — and writes it back into the Secret, whose
//! change reconnects the leaf. A failure is a Warning event on the virtual node, retried
//! every 30 s until the token runs out.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ObjectReference, Secret, ServiceAccount};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use mcsched_shared::{keys, leaf_kubeconfig};
use serde_json::json;
use tokio::sync::watch;
use tracing::{info, warn};

use super::cluster::LeafCluster;
use super::join_secret::JoinSecret;
use crate::control::leader::{LeaseHealth, may_act};
use crate::observe::events::{EventSink, Message};

/// The fraction of a token's lifetime after which it is renewed.
const RENEW_AT: f64 = 0.8;
const RETRY: Duration = Duration::from_secs(30);
/// The lifetime asked for when the Secret does not say (join's default).
const DEFAULT_LIFETIME: Duration = Duration::from_secs(3600);

#[derive(Debug, thiserror::Error)]
pub enum RenewalError {
    #[error("requesting a token for {account} in the leaf: {source}")]
    Request {
        account: String,
        #[source]
        source: kube::Error,
    },
    #[error("the leaf answered the token request without a token")]
    Empty,
    #[error("writing the renewed token into secret {secret}: {source}")]
    Write {
        secret: String,
        #[source]
        source: kube::Error,
    },
    #[error("the join Secret's kubeconfig: {0}")]
    Kubeconfig(#[from] leaf_kubeconfig::LeafKubeconfigError),
}

/// When a JWT was issued and when it expires (seconds since the epoch), from its claims;
/// None for a token that is not a JWT or never expires.
pub fn validity(token: &str) -> Option<(u64, u64)> {
    let claims = claims(token)?;
    let exp = claims.get("exp")?.as_u64()?;
    let iat = claims
        .get("iat")
        .and_then(|v| v.as_u64())
        .or_else(|| claims.get("nbf").and_then(|v| v.as_u64()))
        .unwrap_or(exp.saturating_sub(DEFAULT_LIFETIME.as_secs()));
    Some((iat, exp))
}

/// A JWT's claims, if it is one.
fn claims(token: &str) -> Option<serde_json::Value> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The TokenRequest renewing `current`: `lifetime`, and the binding and audiences of
/// `current` (join's token is bound to its token Secret, with the leaf API server's own
/// audiences; the leaf's token policy allows nothing else). A token bound to nothing (a
/// join before the policy) is renewed as it was: bound to nothing, default audiences.
pub fn renewal_request(current: &str, lifetime: Duration) -> TokenRequest {
    let claims = claims(current).unwrap_or_default();
    let secret = &claims["kubernetes.io"]["secret"];
    let bound_object_ref = secret["name"].as_str().map(|name| BoundObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Secret".into()),
        name: Some(name.to_string()),
        uid: secret["uid"].as_str().map(String::from),
    });
    let audiences = match (&bound_object_ref, &claims["aud"]) {
        (None, _) => Vec::new(),
        (Some(_), serde_json::Value::String(a)) => vec![a.clone()],
        (Some(_), serde_json::Value::Array(a)) => a
            .iter()
            .filter_map(|a| a.as_str().map(String::from))
            .collect(),
        (Some(_), _) => Vec::new(),
    };
    TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: Some(audiences),
            expiration_seconds: Some(i64::try_from(lifetime.as_secs()).unwrap_or(i64::MAX)),
            bound_object_ref,
            attestations: None,
        }),
        ..Default::default()
    }
}

/// How long from `now` until the token should be renewed.
pub fn renew_in(iat: u64, exp: u64, now: u64) -> Duration {
    let lifetime = exp.saturating_sub(iat) as f64;
    let at = iat + (lifetime * RENEW_AT) as u64;
    Duration::from_secs(at.saturating_sub(now))
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// Keeps `leaf`'s token fresh while this agent leads.
pub async fn run(
    host: Client,
    leaf: Arc<LeafCluster>,
    join: JoinSecret,
    mut leader: watch::Receiver<bool>,
    lease: LeaseHealth,
    events: EventSink,
    renew_after: Option<Duration>,
) {
    let Some(token) = leaf_kubeconfig::token(&join.kubeconfig) else {
        return;
    };
    let Some((iat, exp)) = validity(&token) else {
        warn!(cluster = %leaf.name, "the leaf token has no expiry: it is not renewed (re-join the leaf for an expiring token)");
        return;
    };
    let mut wait = renew_in(iat, exp, now());
    if let Some(max) = renew_after {
        let issued_ago = Duration::from_secs(now().saturating_sub(iat));
        wait = wait.min(max.saturating_sub(issued_ago));
    }
    tokio::time::sleep(wait).await;
    loop {
        if leader.wait_for(|l| *l).await.is_err() {
            return;
        }
        if may_act(&leader, &lease) {
            match renew(&host, &leaf, &join).await {
                // The Secret's change reconnects the leaf; this task ends with it.
                Ok(()) => {
                    info!(cluster = %leaf.name, "leaf token renewed");
                    return;
                }
                Err(e) => {
                    warn!(cluster = %leaf.name, error = %e, "cannot renew the leaf token; retrying");
                    let left = exp.saturating_sub(now());
                    events.send(Message::Event {
                        reporting_controller: keys::AGENT_NAME.into(),
                        regarding: ObjectReference {
                            api_version: Some("v1".into()),
                            kind: Some("Node".into()),
                            name: Some(keys::virtual_node_name(&leaf.name)),
                            ..Default::default()
                        },
                        type_: crate::observe::events::EventType::Warning,
                        reason: "LeafTokenRenewalFailed",
                        action: "RenewToken",
                        note: format!("{e}; the current token expires in {left}s"),
                    });
                }
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}

async fn renew(host: &Client, leaf: &LeafCluster, join: &JoinSecret) -> Result<(), RenewalError> {
    let lifetime = join.lifetime.unwrap_or(DEFAULT_LIFETIME);
    let accounts: Api<ServiceAccount> =
        Api::namespaced(leaf.client.clone(), keys::SYSTEM_NAMESPACE);
    let current = leaf_kubeconfig::token(&join.kubeconfig).unwrap_or_default();
    let request = renewal_request(&current, lifetime);
    let answer = accounts
        .create_token_request(keys::LEAF_ACCOUNT, &PostParams::default(), &request)
        .await
        .map_err(|source| RenewalError::Request {
            account: format!("{}/{}", keys::SYSTEM_NAMESPACE, keys::LEAF_ACCOUNT),
            source,
        })?;
    let token = answer
        .status
        .and_then(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or(RenewalError::Empty)?;
    let kubeconfig = leaf_kubeconfig::with_token(&join.kubeconfig, &token)?;
    let secrets: Api<Secret> = Api::namespaced(host.clone(), &join.namespace);
    let patch = json!({"data": {keys::KUBECONFIG_KEY: ByteString(kubeconfig.into_bytes())}});
    secrets
        .patch(&join.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| RenewalError::Write {
            secret: join.name.clone(),
            source,
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(claims: serde_json::Value) -> String {
        let enc = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
        format!(
            "{}.{}.sig",
            enc(br#"{"alg":"RS256"}"#),
            enc(claims.to_string().as_bytes())
        )
    }

    #[test]
    fn a_token_is_renewed_at_four_fifths_of_its_lifetime() {
        let t = jwt(
            json!({"iat": 1000, "exp": 4600, "sub": "system:serviceaccount:mcsched-system:mcsched-leaf"}),
        );
        assert_eq!(validity(&t), Some((1000, 4600)));
        assert_eq!(renew_in(1000, 4600, 1000), Duration::from_secs(2880));
        assert_eq!(
            renew_in(1000, 4600, 4000),
            Duration::ZERO,
            "overdue: at once"
        );
    }

    #[test]
    fn a_renewal_asks_for_the_lifetime_binding_and_audiences_of_join() {
        let bound = jwt(json!({"iat": 1000, "exp": 4600,
            "aud": ["https://kubernetes.default.svc.cluster.local"],
            "kubernetes.io": {"namespace": "mcsched-system",
                "secret": {"name": "mcsched-leaf-token-abcde", "uid": "u-1"},
                "serviceaccount": {"name": "mcsched-leaf", "uid": "sa"}}}));
        let r = renewal_request(&bound, Duration::from_secs(1800))
            .spec
            .unwrap_or_default();
        assert_eq!(r.expiration_seconds, Some(1800));
        assert_eq!(
            r.audiences.unwrap_or_default(),
            ["https://kubernetes.default.svc.cluster.local"]
        );
        let b = r.bound_object_ref.expect("bound");
        assert_eq!(
            (
                b.api_version.as_deref(),
                b.kind.as_deref(),
                b.name.as_deref(),
                b.uid.as_deref()
            ),
            (
                Some("v1"),
                Some("Secret"),
                Some("mcsched-leaf-token-abcde"),
                Some("u-1")
            )
        );
        let single = jwt(json!({"exp": 2, "aud": "a",
            "kubernetes.io": {"secret": {"name": "s", "uid": "u"}}}));
        assert_eq!(
            renewal_request(&single, Duration::from_secs(600))
                .spec
                .and_then(|s| s.audiences)
                .unwrap_or_default(),
            ["a"]
        );
        // A token of a join before the policy: as before.
        let unbound = jwt(json!({"iat": 1, "exp": 2, "aud": ["x"]}));
        let r = renewal_request(&unbound, Duration::from_secs(600))
            .spec
            .unwrap_or_default();
        assert!(r.bound_object_ref.is_none() && r.audiences.unwrap_or_default().is_empty());
    }

    #[test]
    fn a_token_without_expiry_or_not_a_jwt_has_no_validity() {
        assert_eq!(validity(&jwt(json!({"sub": "x"}))), None);
        assert_eq!(validity("opaque-token"), None);
        assert_eq!(validity("a.!!!.c"), None);
    }
}
