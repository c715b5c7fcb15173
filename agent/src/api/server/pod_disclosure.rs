//! Which other pods an answer may name. A what-if or an explanation can name pods of
//! other namespaces (preemption's victims, the pods nominated to a node); the caller sees
//! their names only where it may `list pods`, as it could read them from the API server
//! itself, and otherwise only how many there are. Pods of the answer's own namespace are
//! always named: the caller could create the same pod there and watch what happens.
//!
//! Every answer of the aggregated API passes through [`PodDisclosure::redact`] before it
//! is written: this is the one place that decides.

use std::collections::{BTreeSet, HashMap};

use mcsched_shared::explain::{Explanation, Outcome, counted};
use tracing::warn;

use super::authn::UserInfo;
use super::authz::{Attributes, Authorizer};

/// At most this many SubjectAccessReviews per request (each is a call on the shared,
/// rate-limited auth client); namespaces past it are counted, not named. An answer that
/// names pods of more namespaces than this is a list across the whole cluster, for which
/// the cluster-wide review is asked first.
pub const MAX_REVIEWS_PER_REQUEST: usize = 50;

/// The namespace of a pod key `namespace/name`; None for anything else (a count).
fn namespace_of(key: &str) -> Option<&str> {
    key.split_once('/').map(|(ns, _)| ns)
}

/// One request's decisions: each namespace is reviewed at most once per request, and
/// the authorizer's TTL cache spares the review across requests.
pub struct PodDisclosure<'a> {
    authz: &'a Authorizer,
    /// None: no authenticated caller (a route served without the guard): nothing of
    /// another namespace is named.
    user: Option<&'a UserInfo>,
    decided: HashMap<String, bool>,
    cluster_wide: Option<bool>,
    reviews: usize,
}

impl<'a> PodDisclosure<'a> {
    pub fn new(authz: &'a Authorizer, user: Option<&'a UserInfo>) -> Self {
        PodDisclosure {
            authz,
            user,
            decided: HashMap::new(),
            cluster_wide: None,
            reviews: 0,
        }
    }

    /// Names of pods outside the explained pod's namespace that the caller may not list
    /// become a count, in the victims and in every node's nominated pods.
    pub async fn redact(&mut self, e: &mut Explanation) {
        let own = namespace_of(&e.pod).unwrap_or_default().to_string();
        let others: BTreeSet<String> = e
            .pod_entries()
            .filter_map(namespace_of)
            .filter(|ns| *ns != own)
            .map(str::to_string)
            .collect();
        if others.len() > 1 {
            self.cluster_wide().await;
        }
        for ns in &others {
            self.decide(ns).await;
        }
        let shown = |key: &String| match namespace_of(key) {
            Some(ns) => ns == own || self.decided.get(ns).copied().unwrap_or(false),
            None => true,
        };
        if let Outcome::Unschedulable { victims, .. } = &mut e.outcome {
            redact_keys(victims, &shown);
        }
        for n in &mut e.nodes {
            redact_keys(&mut n.nominated_pods, &shown);
        }
    }

    /// `list pods` in all namespaces: when allowed, every namespace is (RBAC's
    /// ClusterRoleBinding grants them all), and one review answers for all of them.
    async fn cluster_wide(&mut self) -> bool {
        if self.cluster_wide.is_none() {
            let allowed = self.review(None).await;
            self.cluster_wide = Some(allowed);
        }
        self.cluster_wide.unwrap_or(false)
    }

    async fn decide(&mut self, namespace: &str) {
        if self.decided.contains_key(namespace) {
            return;
        }
        let allowed = if self.cluster_wide == Some(true) {
            true
        } else if self.reviews >= MAX_REVIEWS_PER_REQUEST {
            false
        } else {
            self.review(Some(namespace)).await
        };
        self.decided.insert(namespace.to_string(), allowed);
    }

    /// A SubjectAccessReview for the caller; a review that fails denies (as kube's
    /// authorizers do when the webhook cannot answer).
    async fn review(&mut self, namespace: Option<&str>) -> bool {
        let Some(user) = self.user else {
            return false;
        };
        self.reviews += 1;
        let attrs = list_pods(namespace);
        match self.authz.authorize(user, &attrs).await {
            Ok(d) => d.allowed,
            Err(e) => {
                warn!(error = %e, namespace = namespace.unwrap_or(""), user = %user.name,
                    "cannot review whether the caller may list pods; their names are not shown");
                false
            }
        }
    }
}

fn list_pods(namespace: Option<&str>) -> Attributes {
    Attributes::Resource {
        verb: "list".into(),
        group: String::new(),
        version: "v1".into(),
        resource: "pods".into(),
        namespace: namespace.map(str::to_string),
        name: None,
    }
}

/// Keeps the keys `shown` allows, in order, and puts one count of the rest last (a list
/// of strings still: clients that read the names read the count as one more line).
fn redact_keys(keys: &mut Vec<String>, shown: &impl Fn(&String) -> bool) {
    let before = keys.len();
    keys.retain(shown);
    let hidden = before - keys.len();
    if hidden > 0 {
        keys.push(counted(hidden));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use mcsched_shared::explain::NodeExplanation;
    use serde_json::{Value, json};

    use super::*;

    /// An authorizer whose SubjectAccessReviews allow `list pods` in the namespaces
    /// given (and, with `cluster_wide`, in all of them), and record what they were asked.
    fn authorizer(allowed: &'static [&'static str]) -> (Authorizer, Arc<Mutex<Vec<Value>>>) {
        let asked: Arc<Mutex<Vec<Value>>> = Arc::default();
        let seen = asked.clone();
        let (client, _, _) = crate::fake_api::recording(move |_, path, body| {
            if path != "/apis/authorization.k8s.io/v1/subjectaccessreviews" {
                return (404, json!({}));
            }
            seen.lock().unwrap().push(body.clone());
            let attrs = &body["spec"]["resourceAttributes"];
            let ns = attrs["namespace"].as_str().unwrap_or("");
            let allowed =
                attrs["verb"] == "list" && attrs["resource"] == "pods" && allowed.contains(&ns);
            let mut answer = body.clone();
            answer["status"] = json!({"allowed": allowed});
            (201, answer)
        });
        let ttl = Duration::from_secs(10);
        (Authorizer::new(client, Vec::new(), ttl, ttl), asked)
    }

    fn alice() -> UserInfo {
        UserInfo {
            name: "alice".into(),
            uid: Some("u1".into()),
            groups: vec!["dev".into()],
            ..Default::default()
        }
    }

    fn node(name: &str, nominated: &[&str]) -> NodeExplanation {
        NodeExplanation {
            node: name.into(),
            feasible: false,
            filters: Vec::new(),
            scores: Vec::new(),
            total_score: None,
            leaf_node: None,
            leaf_ties: None,
            leaf_notes: Vec::new(),
            nominated_pods: nominated.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn answer(victims: &[&str]) -> Explanation {
        Explanation {
            pod: "shop/what-if".into(),
            scheduler_name: "mcsched".into(),
            time: "2024-01-01T00:00:00Z".into(),
            outcome: Outcome::Unschedulable {
                message: "0/2 nodes are available".into(),
                nominated_node: Some("n1".into()),
                victims: victims.iter().map(|s| s.to_string()).collect(),
            },
            num_all_nodes: 2,
            num_evaluated_nodes: 2,
            num_evaluated_virtual_nodes: 0,
            num_feasible_nodes: 0,
            nodes: vec![
                node("n1", &["b/urgent", "a/urgent", "shop/mine"]),
                node("n2", &["b/x", "b/y"]),
            ],
            durations: Vec::new(),
            pre_enqueue: Vec::new(),
            pre_filter: Vec::new(),
            permit: Vec::new(),
            extenders: Vec::new(),
            policy: None,
        }
    }

    fn victims(e: &Explanation) -> &[String] {
        match &e.outcome {
            Outcome::Unschedulable { victims, .. } => victims,
            other => panic!("not unschedulable: {other:?}"),
        }
    }

    #[tokio::test]
    async fn pods_of_namespaces_the_caller_may_not_list_are_counted_not_named() {
        let (authz, asked) = authorizer(&["a"]);
        let user = alice();
        let mut e = answer(&["shop/low", "a/batch", "b/one", "b/two", "c/three"]);
        PodDisclosure::new(&authz, Some(&user)).redact(&mut e).await;
        assert_eq!(
            victims(&e),
            ["shop/low", "a/batch", "3 pods in other namespaces"]
        );
        assert_eq!(
            e.nodes[0].nominated_pods,
            ["a/urgent", "shop/mine", "1 pod in another namespace"]
        );
        assert_eq!(e.nodes[1].nominated_pods, ["2 pods in other namespaces"]);
        // Asked for the caller, once per namespace (the cluster-wide question first),
        // never for its own namespace.
        let asked = asked.lock().unwrap();
        let namespaces: Vec<&str> = asked
            .iter()
            .map(|r| {
                r["spec"]["resourceAttributes"]["namespace"]
                    .as_str()
                    .unwrap_or("")
            })
            .collect();
        assert_eq!(namespaces, ["", "a", "b", "c"]);
        for r in asked.iter() {
            assert_eq!(r["spec"]["user"], "alice");
            assert_eq!(r["spec"]["uid"], "u1");
            assert_eq!(r["spec"]["groups"], json!(["dev"]));
            assert_eq!(r["spec"]["resourceAttributes"]["verb"], "list");
            assert_eq!(r["spec"]["resourceAttributes"]["resource"], "pods");
        }
    }

    #[tokio::test]
    async fn a_caller_who_may_list_pods_everywhere_sees_every_name_after_one_review() {
        let (authz, asked) = authorizer(&[""]);
        let user = alice();
        let mut e = answer(&["a/batch", "b/one"]);
        PodDisclosure::new(&authz, Some(&user)).redact(&mut e).await;
        assert_eq!(victims(&e), ["a/batch", "b/one"]);
        assert_eq!(e.nodes[1].nominated_pods, ["b/x", "b/y"]);
        assert_eq!(asked.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn without_a_caller_or_an_answer_from_the_reviews_nothing_else_is_named() {
        let (authz, _) = authorizer(&["a", "b"]);
        let mut e = answer(&["shop/low", "a/batch"]);
        PodDisclosure::new(&authz, None).redact(&mut e).await;
        assert_eq!(victims(&e), ["shop/low", "1 pod in another namespace"]);

        let (client, _) = crate::fake_api::client(|_, _| (500, json!({})));
        let ttl = Duration::from_secs(10);
        let failing = Authorizer::new(client, Vec::new(), ttl, ttl);
        let user = alice();
        let mut e = answer(&["a/batch"]);
        PodDisclosure::new(&failing, Some(&user))
            .redact(&mut e)
            .await;
        assert_eq!(victims(&e), ["1 pod in another namespace"]);
    }
}
