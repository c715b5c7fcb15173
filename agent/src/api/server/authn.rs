//! Who is calling, as kube-scheduler's delegated authentication decides it: the API
//! server's front proxy (its client certificate, then the user from request headers),
//! a client certificate of the cluster's CA, or a bearer token checked by TokenReview.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::http::HeaderMap;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::Api;
use kube::api::PostParams;

use super::auth_config::AuthConfig;
use super::failed_auth::FailedAuthLimiter;
use super::tls::{ClientVerifiers, subject, verified};

#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct UserInfo {
    pub name: String,
    pub uid: Option<String>,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// Cloned to every request that waited on the same review.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AuthnError {
    #[error("TokenReview failed: {0}")]
    TokenReview(#[source] Arc<kube::Error>),
    #[error("too many failed authentications from this client; retry in {retry_after:?}")]
    Throttled { retry_after: Duration },
}

/// How many token answers are kept at most.
const TOKEN_CACHE_CAPACITY: usize = 10_000;

pub struct Authenticator {
    published: RwLock<(AuthConfig, ClientVerifiers)>,
    client: kube::Client,
    /// Keyed by the token's sha256 (as kube's cached token authenticator): a memory
    /// dump of the agent shows no caller's token. Requests that miss on the same token
    /// together wait on one TokenReview (kube's cache coalesces them likewise), and a
    /// full cache evicts entry by entry, the least used first: a flood of new tokens does
    /// not push out the ones in use.
    tokens: moka::future::Cache<String, Option<UserInfo>>,
    failures: FailedAuthLimiter,
}

/// The token cache's key: the hex sha256 of the token.
fn token_key(token: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, token.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Authenticator {
    pub fn new(client: kube::Client, token_ttl: Duration) -> Self {
        Self::with_capacity(client, token_ttl, TOKEN_CACHE_CAPACITY)
    }

    /// Answers are kept `token_ttl` (a zero TTL keeps none, while concurrent misses
    /// still share their review), `capacity` of them at most.
    fn with_capacity(client: kube::Client, token_ttl: Duration, capacity: usize) -> Self {
        Authenticator {
            published: RwLock::new(Default::default()),
            client,
            tokens: moka::future::Cache::builder()
                .max_capacity(capacity as u64)
                .time_to_live(token_ttl)
                .build(),
            failures: FailedAuthLimiter::default(),
        }
    }

    /// The published CAs and headers changed (or were read for the first time).
    pub fn set_config(&self, cfg: AuthConfig, verifiers: ClientVerifiers) {
        *self.published.write().unwrap_or_else(|e| e.into_inner()) = (cfg, verifiers);
    }

    /// The caller, or None when no method names one (401); `client_ip` is where the
    /// connection comes from, for the budget of failed token reviews.
    pub async fn authenticate(
        &self,
        peer_certificates: &[Vec<u8>],
        headers: &HeaderMap,
        client_ip: Option<IpAddr>,
    ) -> Result<Option<UserInfo>, AuthnError> {
        let user = match self.by_certificate(peer_certificates, headers) {
            Some(user) => Some(user),
            None => match bearer_token(headers) {
                Some(token) => self.by_token(token, client_ip).await?,
                None => None,
            },
        };
        Ok(user.map(authenticated))
    }

    fn by_certificate(&self, chain: &[Vec<u8>], headers: &HeaderMap) -> Option<UserInfo> {
        let leaf = chain.first()?;
        let published = self.published.read().unwrap_or_else(|e| e.into_inner());
        let (cfg, verifiers) = &*published;
        // Request headers name the user only when the front proxy's own certificate
        // came with them; anyone else's X-Remote-User is ignored.
        if let (Some(rh), Some(v)) = (&cfg.request_header, &verifiers.front_proxy)
            && verified(v.as_ref(), chain)
        {
            let (cn, _) = subject(leaf)?;
            if !rh.allowed_names.is_empty() && !rh.allowed_names.contains(&cn) {
                return None;
            }
            return from_request_headers(rh, headers);
        }
        if let Some(v) = &verifiers.cluster
            && verified(v.as_ref(), chain)
        {
            let (name, groups) = subject(leaf)?;
            return Some(UserInfo {
                name,
                groups,
                ..Default::default()
            });
        }
        None
    }

    async fn by_token(
        &self,
        token: &str,
        client_ip: Option<IpAddr>,
    ) -> Result<Option<UserInfo>, AuthnError> {
        self.tokens
            .try_get_with(token_key(token), self.review(token, client_ip))
            .await
            .map_err(|e| (*e).clone())
    }

    /// One TokenReview, within the budget of failures.
    async fn review(
        &self,
        token: &str,
        client_ip: Option<IpAddr>,
    ) -> Result<Option<UserInfo>, AuthnError> {
        let reserved = self.failures.reserve(client_ip).map_err(|retry_after| {
            mcsched_engine::metrics::global().authentication_throttled();
            AuthnError::Throttled { retry_after }
        })?;
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| AuthnError::TokenReview(Arc::new(e)))?;
        let status = answer.status.unwrap_or_default();
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(u)) => Some(UserInfo {
                name: u.username.unwrap_or_default(),
                uid: u.uid,
                groups: u.groups.unwrap_or_default(),
                extra: u.extra.unwrap_or_default(),
            }),
            _ => None,
        };
        if user.is_some() {
            self.failures.succeeded(reserved);
        }
        Ok(user)
    }
}

/// kube's AuthenticatedGroupAdder: every authenticated user is in
/// `system:authenticated` (the group RBAC's discovery and public-info roles name), even
/// when the front proxy or a token review did not say so.
fn authenticated(mut user: UserInfo) -> UserInfo {
    if !user
        .groups
        .iter()
        .any(|g| g == AUTHENTICATED || g == "system:unauthenticated")
    {
        user.groups.push(AUTHENTICATED.into());
    }
    user
}

const AUTHENTICATED: &str = "system:authenticated";

fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn values<'a>(headers: &'a HeaderMap, name: &str) -> impl Iterator<Item = &'a str> {
    headers
        .get_all(name)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
}

/// kube's requestheader authenticator: the first non-empty user header, every group
/// header's values, and the extras named by the prefixed headers (unescaped, lowercased).
fn from_request_headers(
    rh: &super::auth_config::RequestHeader,
    headers: &HeaderMap,
) -> Option<UserInfo> {
    let name = rh
        .username_headers
        .iter()
        .flat_map(|h| values(headers, h))
        .find(|v| !v.is_empty())?
        .to_string();
    let uid = rh
        .uid_headers
        .iter()
        .flat_map(|h| values(headers, h))
        .find(|v| !v.is_empty())
        .map(String::from);
    let groups = rh
        .group_headers
        .iter()
        .flat_map(|h| values(headers, h))
        .map(String::from)
        .collect();
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (header, value) in headers {
        let header = header.as_str();
        for prefix in &rh.extra_headers_prefix {
            let prefix = prefix.to_ascii_lowercase();
            if let Some(key) = header.strip_prefix(prefix.as_str())
                && let Ok(v) = value.to_str()
            {
                extra
                    .entry(unescape(key).to_lowercase())
                    .or_default()
                    .push(v.to_string());
            }
        }
    }
    Some(UserInfo {
        name,
        uid,
        groups,
        extra,
    })
}

/// Header names cannot hold every character of an extra's key: the front proxy
/// percent-encodes them.
fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::server::auth_config::RequestHeader;
    use axum::http::HeaderValue;

    fn rh() -> RequestHeader {
        RequestHeader {
            username_headers: vec!["X-Remote-User".into()],
            group_headers: vec!["X-Remote-Group".into()],
            extra_headers_prefix: vec!["X-Remote-Extra-".into()],
            ..Default::default()
        }
    }

    #[test]
    fn request_headers_name_the_user_groups_and_extras() {
        let mut h = HeaderMap::new();
        h.insert("x-remote-user", HeaderValue::from_static("alice"));
        h.append("x-remote-group", HeaderValue::from_static("dev"));
        h.append(
            "x-remote-group",
            HeaderValue::from_static("system:authenticated"),
        );
        h.insert("x-remote-extra-scopes%2fa", HeaderValue::from_static("one"));
        let u = from_request_headers(&rh(), &h).unwrap();
        assert_eq!(u.name, "alice");
        assert_eq!(u.groups, vec!["dev", "system:authenticated"]);
        assert_eq!(u.extra.get("scopes/a"), Some(&vec!["one".to_string()]));
    }

    #[test]
    fn every_authenticated_user_is_in_system_authenticated() {
        let u = authenticated(UserInfo {
            name: "system:kube-aggregator".into(),
            ..Default::default()
        });
        assert_eq!(u.groups, vec!["system:authenticated"]);
        let u = authenticated(u);
        assert_eq!(u.groups, vec!["system:authenticated"], "added once");
    }

    #[test]
    fn no_user_header_no_user() {
        let mut h = HeaderMap::new();
        h.insert("x-remote-group", HeaderValue::from_static("dev"));
        assert!(from_request_headers(&rh(), &h).is_none());
        h.insert("x-remote-user", HeaderValue::from_static(""));
        assert!(from_request_headers(&rh(), &h).is_none());
    }

    #[test]
    fn bearer_tokens_are_read_as_kube_reads_them() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer_token(&h), None);
        h.insert("authorization", HeaderValue::from_static("Bearer abc"));
        assert_eq!(bearer_token(&h), Some("abc"));
        h.insert("authorization", HeaderValue::from_static("bearer  xyz "));
        assert_eq!(bearer_token(&h), Some("xyz"));
        h.insert("authorization", HeaderValue::from_static("Basic Zm9v"));
        assert_eq!(bearer_token(&h), None);
        h.insert("authorization", HeaderValue::from_static("Bearer "));
        assert_eq!(bearer_token(&h), None);
    }

    /// An authenticator whose TokenReviews are answered `authenticated` (as user
    /// alice), counting them.
    fn reviewing(authenticated: bool) -> (Authenticator, crate::fake_api::Calls) {
        reviewing_with(authenticated, TOKEN_CACHE_CAPACITY)
    }

    /// As [`reviewing`], keeping `capacity` answers at most.
    fn reviewing_with(
        authenticated: bool,
        capacity: usize,
    ) -> (Authenticator, crate::fake_api::Calls) {
        let (client, calls) = crate::fake_api::client(move |method, path| {
            assert_eq!(
                (method, path),
                ("POST", "/apis/authentication.k8s.io/v1/tokenreviews")
            );
            (
                201,
                serde_json::json!({
                    "apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenReview",
                    "spec": {},
                    "status": {"authenticated": authenticated, "user": {"username": "alice"}},
                }),
            )
        });
        (
            Authenticator::with_capacity(client, Duration::from_secs(60), capacity),
            calls,
        )
    }

    fn bearer(token: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            "authorization",
            HeaderValue::from_str(&format!("Bearer {token}")).expect("header"),
        );
        h
    }

    #[tokio::test]
    async fn the_token_cache_keeps_a_hash_never_the_token() {
        let (authn, calls) = reviewing(true);
        let token = "s3cret-token";
        for _ in 0..2 {
            let user = authn
                .authenticate(&[], &bearer(token), None)
                .await
                .expect("reviewed");
            assert_eq!(user.map(|u| u.name).as_deref(), Some("alice"));
        }
        assert_eq!(
            calls.lock().expect("calls").len(),
            1,
            "the answer is cached"
        );
        assert_eq!(
            authn.tokens.get(&token.to_string()).await,
            None,
            "no raw token kept"
        );
        assert!(authn.tokens.get(&token_key(token)).await.is_some());
        // `echo -n s3cret-token | sha256sum`
        assert_eq!(
            token_key(token),
            "a81e611a041b13f078bf8ebe5dab4d4fd63fcc5594661c918bec093a2f416a7e"
        );
    }

    #[tokio::test]
    async fn concurrent_requests_with_one_new_token_share_one_token_review() {
        let (authn, calls) = reviewing(true);
        let headers = bearer("fresh-token");
        let answers =
            futures::future::join_all((0..32).map(|_| authn.authenticate(&[], &headers, None)))
                .await;
        assert_eq!(
            calls.lock().expect("calls").len(),
            1,
            "32 requests, one TokenReview"
        );
        for a in answers {
            let user = a.expect("reviewed");
            assert_eq!(user.map(|u| u.name).as_deref(), Some("alice"));
        }
    }

    #[tokio::test]
    async fn a_full_token_cache_evicts_one_entry_not_all() {
        let (authn, calls) = reviewing_with(true, 4);
        let tokens: Vec<String> = (0..5).map(|i| format!("token-{i}")).collect();
        for t in &tokens[..4] {
            authn
                .authenticate(&[], &bearer(t), None)
                .await
                .expect("reviewed");
        }
        authn.tokens.run_pending_tasks().await;
        assert_eq!(authn.tokens.entry_count(), 4, "full");
        authn
            .authenticate(&[], &bearer(&tokens[4]), None)
            .await
            .expect("reviewed");
        authn.tokens.run_pending_tasks().await;
        assert_eq!(calls.lock().expect("calls").len(), 5);
        let kept = tokens
            .iter()
            .filter(|t| authn.tokens.contains_key(&token_key(t)))
            .count();
        assert_eq!(
            (authn.tokens.entry_count(), kept),
            (4, 4),
            "one of the five left out, the rest kept"
        );
    }

    #[tokio::test]
    async fn random_tokens_from_one_client_cannot_flood_token_reviews() {
        use super::super::failed_auth::PER_IP_BURST;
        let (authn, calls) = reviewing(false);
        let attacker: IpAddr = "10.0.0.9".parse().expect("ip");
        let mut throttled = 0;
        for i in 0..100 {
            match authn
                .authenticate(&[], &bearer(&format!("random-{i}")), Some(attacker))
                .await
            {
                Ok(None) => {}
                Err(AuthnError::Throttled { .. }) => throttled += 1,
                other => panic!("{other:?}"),
            }
        }
        let reviews = calls.lock().expect("calls").len();
        assert_eq!(reviews, PER_IP_BURST as usize, "reviews made for the flood");
        assert_eq!(throttled, 100 - reviews);
        // Another client's token is still reviewed.
        let other: IpAddr = "10.0.0.1".parse().expect("ip");
        assert!(matches!(
            authn.authenticate(&[], &bearer("mine"), Some(other)).await,
            Ok(None)
        ));
    }

    #[test]
    fn percent_escapes_are_undone_and_bad_ones_kept() {
        assert_eq!(unescape("a%2fb"), "a/b");
        assert_eq!(unescape("50%"), "50%");
        assert_eq!(unescape("%zz"), "%zz");
    }
}
