//! May the caller do this: kube-scheduler's delegated authorization. Health paths are
//! always allowed, `system:masters` always is, everything else is a SubjectAccessReview.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;

use super::authn::UserInfo;

/// What a request asks to do, as an authorizer sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Attributes {
    NonResource {
        path: String,
        verb: String,
    },
    Resource {
        verb: String,
        group: String,
        version: String,
        resource: String,
        namespace: Option<String>,
        name: Option<String>,
    },
}

impl Attributes {
    pub fn verb(&self) -> &str {
        match self {
            Attributes::NonResource { verb, .. } | Attributes::Resource { verb, .. } => verb,
        }
    }

    /// kube's Forbidden message for this request.
    pub fn forbidden_message(&self, user: &str, reason: &str) -> String {
        let base = match self {
            Attributes::NonResource { path, verb } => {
                format!("forbidden: User {user:?} cannot {verb} path {path:?}")
            }
            Attributes::Resource {
                verb,
                group,
                resource,
                namespace,
                name,
                ..
            } => {
                let object = match name {
                    Some(n) => format!("{resource}.{group} {n:?} is forbidden"),
                    None => format!("{resource}.{group} is forbidden"),
                };
                let scope = match namespace {
                    Some(ns) => format!(" in the namespace {ns:?}"),
                    None => " at the cluster scope".to_string(),
                };
                format!(
                    "{object}: User {user:?} cannot {verb} resource {resource:?} in API group {group:?}{scope}"
                )
            }
        };
        if reason.is_empty() {
            base
        } else {
            format!("{base}: {reason}")
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub reason: String,
}

/// Cloned to every request that waited on the same review.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AuthzError {
    #[error("SubjectAccessReview failed: {0}")]
    Review(#[source] Arc<kube::Error>),
}

/// kube-scheduler's always-allowed group.
const PRIVILEGED_GROUP: &str = "system:masters";
const DECISION_CACHE_CAPACITY: usize = 10_000;

pub struct Authorizer {
    client: kube::Client,
    always_allow_paths: Vec<String>,
    /// Requests that miss on the same caller and attributes together wait on one
    /// SubjectAccessReview; a full cache evicts entry by entry.
    decisions: moka::future::Cache<(UserInfo, Attributes), Decision>,
}

/// Allowed and denied decisions are kept for their own TTLs, as kube's
/// `--authorization-webhook-cache-authorized-ttl` and `-unauthorized-ttl` say.
struct DecisionTtl {
    allowed: Duration,
    denied: Duration,
}

impl moka::Expiry<(UserInfo, Attributes), Decision> for DecisionTtl {
    fn expire_after_create(
        &self,
        _: &(UserInfo, Attributes),
        d: &Decision,
        _: Instant,
    ) -> Option<Duration> {
        Some(if d.allowed { self.allowed } else { self.denied })
    }
}

impl Authorizer {
    pub fn new(
        client: kube::Client,
        always_allow_paths: Vec<String>,
        allowed_ttl: Duration,
        denied_ttl: Duration,
    ) -> Self {
        Authorizer {
            client,
            always_allow_paths,
            decisions: moka::future::Cache::builder()
                .max_capacity(DECISION_CACHE_CAPACITY as u64)
                .expire_after(DecisionTtl {
                    allowed: allowed_ttl,
                    denied: denied_ttl,
                })
                .build(),
        }
    }

    /// Paths served to anyone, without authentication (health probes): exact, or a
    /// prefix ending in `*`, as `--authorization-always-allow-paths` says.
    pub fn always_allowed(&self, path: &str) -> bool {
        path_allowed(&self.always_allow_paths, path)
    }

    pub async fn authorize(
        &self,
        user: &UserInfo,
        attrs: &Attributes,
    ) -> Result<Decision, AuthzError> {
        if user.groups.iter().any(|g| g == PRIVILEGED_GROUP) {
            return Ok(Decision {
                allowed: true,
                reason: String::new(),
            });
        }
        self.decisions
            .try_get_with((user.clone(), attrs.clone()), self.ask(user, attrs))
            .await
            .map_err(|e| (*e).clone())
    }

    async fn ask(&self, user: &UserInfo, attrs: &Attributes) -> Result<Decision, AuthzError> {
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let answer = api
            .create(&PostParams::default(), &review(user, attrs))
            .await
            .map_err(|e| AuthzError::Review(Arc::new(e)))?;
        let status = answer.status.unwrap_or_default();
        Ok(Decision {
            allowed: status.allowed && !status.denied.unwrap_or(false),
            reason: status.reason.unwrap_or_default(),
        })
    }
}

fn path_allowed(patterns: &[String], path: &str) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix),
        None => path == p,
    })
}

fn review(user: &UserInfo, attrs: &Attributes) -> SubjectAccessReview {
    let (resource_attributes, non_resource_attributes) = match attrs {
        Attributes::NonResource { path, verb } => (
            None,
            Some(NonResourceAttributes {
                path: Some(path.clone()),
                verb: Some(verb.clone()),
            }),
        ),
        Attributes::Resource {
            verb,
            group,
            version,
            resource,
            namespace,
            name,
        } => (
            Some(ResourceAttributes {
                verb: Some(verb.clone()),
                group: Some(group.clone()),
                version: Some(version.clone()),
                resource: Some(resource.clone()),
                namespace: namespace.clone(),
                name: name.clone(),
                ..Default::default()
            }),
            None,
        ),
    };
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            uid: user.uid.clone(),
            groups: Some(user.groups.clone()),
            extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
            resource_attributes,
            non_resource_attributes,
        },
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forbidden_messages_read_as_kubes() {
        let metrics = Attributes::NonResource {
            path: "/metrics".into(),
            verb: "get".into(),
        };
        assert_eq!(
            metrics.forbidden_message("system:serviceaccount:a:b", ""),
            r#"forbidden: User "system:serviceaccount:a:b" cannot get path "/metrics""#
        );
        let explanation = Attributes::Resource {
            verb: "get".into(),
            group: "mcsched.io".into(),
            version: "v1alpha1".into(),
            resource: "explanations".into(),
            namespace: Some("b".into()),
            name: Some("web".into()),
        };
        assert_eq!(
            explanation.forbidden_message("alice", "no RBAC policy matched"),
            r#"explanations.mcsched.io "web" is forbidden: User "alice" cannot get resource "explanations" in API group "mcsched.io" in the namespace "b": no RBAC policy matched"#
        );
    }

    /// Concurrent requests by one caller for one thing wait on one SubjectAccessReview;
    /// another caller's is asked on its own.
    #[tokio::test]
    async fn concurrent_misses_share_one_subject_access_review() {
        let (client, calls) = crate::fake_api::client(|method, path| {
            assert_eq!(
                (method, path),
                ("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews")
            );
            (
                201,
                serde_json::json!({
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": {},
                    "status": {"allowed": true},
                }),
            )
        });
        let ttl = Duration::from_secs(60);
        let authz = Authorizer::new(client, Vec::new(), ttl, ttl);
        let user = |name: &str| UserInfo {
            name: name.into(),
            ..Default::default()
        };
        let metrics = Attributes::NonResource {
            path: "/metrics".into(),
            verb: "get".into(),
        };
        let (alice, bob) = (user("alice"), user("bob"));
        let decisions = futures::future::join_all(
            (0..16)
                .map(|_| authz.authorize(&alice, &metrics))
                .chain((0..16).map(|_| authz.authorize(&bob, &metrics))),
        )
        .await;
        assert_eq!(
            calls.lock().expect("calls").len(),
            2,
            "32 requests by two callers, two reviews"
        );
        assert!(decisions.into_iter().all(|d| d.expect("decided").allowed));
    }

    #[test]
    fn always_allowed_paths_are_exact_or_prefixes() {
        let p = vec!["/healthz".to_string(), "/debug/*".to_string()];
        assert!(path_allowed(&p, "/healthz"));
        assert!(!path_allowed(&p, "/healthz/extra"));
        assert!(!path_allowed(&p, "/metrics"));
        assert!(path_allowed(&p, "/debug/pprof"));
    }

    #[test]
    fn the_review_carries_the_callers_identity() {
        let user = UserInfo {
            name: "alice".into(),
            uid: Some("u1".into()),
            groups: vec!["dev".into()],
            extra: Default::default(),
        };
        let r = review(
            &user,
            &Attributes::NonResource {
                path: "/metrics".into(),
                verb: "get".into(),
            },
        );
        assert_eq!(r.spec.user.as_deref(), Some("alice"));
        assert_eq!(r.spec.groups, Some(vec!["dev".to_string()]));
        assert_eq!(r.spec.uid.as_deref(), Some("u1"));
        assert!(r.spec.extra.is_none());
        let nr = r.spec.non_resource_attributes.unwrap();
        assert_eq!(nr.path.as_deref(), Some("/metrics"));
        assert!(r.spec.resource_attributes.is_none());
    }
}
