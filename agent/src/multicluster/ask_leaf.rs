//! Asks a leaf's API server the questions the engine's [`LeafChecks`] holds: whether the
//! leaf's admin granted a namespace (a SelfSubjectAccessReview) and whether an object a
//! pod needs there exists without mcsched's mark. The answers are the engine's; the leaf
//! client that asks is the agent's.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret, ServiceAccount};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use mcsched_engine::framework::ClusterEvent;
use mcsched_engine::leaf::OnEvent;
use mcsched_engine::leaf::leaf_checks::{LeafChecks, Question, RECHECK, Synced, is_ours};
use tracing::{debug, warn};

/// The loop that answers a leaf's [`LeafChecks`].
pub trait AskLeaf {
    /// Answers questions as they come and again every 30 s while wanted.
    fn run(
        self: Arc<Self>,
        leaf: kube::Client,
        on_event: OnEvent,
    ) -> impl Future<Output = ()> + Send;
}

impl AskLeaf for LeafChecks {
    async fn run(self: Arc<Self>, leaf: kube::Client, on_event: OnEvent) {
        let Some(mut asked) = self.memory().take_receiver() else {
            return;
        };
        let mut tick = tokio::time::interval(RECHECK);
        loop {
            let due: BTreeSet<Question> = tokio::select! {
                next = asked.recv() => match next {
                    // Not when forgotten, or answered, since it was queued.
                    Some(q) if self.memory().unanswered(&q) => BTreeSet::from([q]),
                    Some(_) => continue,
                    None => return,
                },
                _ = tick.tick() => self.memory().due(),
            };
            let mut changed = false;
            for q in due {
                match ask_leaf(&self, &leaf, &q).await {
                    Ok(answer) => {
                        debug!(cluster = %self.cluster(), question = ?q, answer, "leaf checked");
                        changed |= self.memory().record(&q, answer);
                    }
                    Err(e) => {
                        warn!(cluster = %self.cluster(), question = ?q, error = %e, "cannot ask the leaf; retrying")
                    }
                }
            }
            if changed {
                on_event(ClusterEvent::LeafChange);
            }
        }
    }
}

async fn ask_leaf(
    checks: &LeafChecks,
    leaf: &kube::Client,
    q: &Question,
) -> Result<bool, kube::Error> {
    match q {
        Question::Granted(ns) => may_create(leaf, ns, "pods").await,
        Question::MayCreateServiceAccounts(ns) => may_create(leaf, ns, "serviceaccounts").await,
        // A leaf joined before the writer role could read accounts forbids it: taken
        // as absent, so that only `--service-accounts` lets such a pod go there.
        Question::ServiceAccount(ns, name) => {
            match Api::<ServiceAccount>::namespaced(leaf.clone(), ns)
                .get_metadata_opt(name)
                .await
            {
                Ok(found) => Ok(found.is_some()),
                Err(kube::Error::Api(s)) if s.code == 403 => Ok(false),
                Err(e) => Err(e),
            }
        }
        Question::Foreign(kind, ns, name) => {
            let meta = match foreign_meta(leaf, *kind, ns, name).await {
                Ok(m) => m,
                // Not readable (a namespace made after an `--all-namespaces` join,
                // Secrets read only where join bound it): it cannot be told to be
                // ours, so it is taken as not ours.
                Err(kube::Error::Api(s)) if s.code == 403 => return Ok(true),
                Err(e) => return Err(e),
            };
            Ok(meta.is_some_and(|m| !is_ours(&m, checks.cluster(), checks.host_id())))
        }
    }
}

async fn foreign_meta(
    leaf: &kube::Client,
    kind: Synced,
    ns: &str,
    name: &str,
) -> Result<Option<ObjectMeta>, kube::Error> {
    Ok(match kind {
        Synced::ConfigMap => Api::<ConfigMap>::namespaced(leaf.clone(), ns)
            .get_metadata_opt(name)
            .await?
            .map(|m| m.metadata),
        Synced::Secret => Api::<Secret>::namespaced(leaf.clone(), ns)
            .get_metadata_opt(name)
            .await?
            .map(|m| m.metadata),
        Synced::Claim => Api::<PersistentVolumeClaim>::namespaced(leaf.clone(), ns)
            .get_metadata_opt(name)
            .await?
            .map(|m| m.metadata),
        Synced::ResourceClaimTemplate => Api::<ResourceClaimTemplate>::namespaced(leaf.clone(), ns)
            .get_metadata_opt(name)
            .await?
            .map(|m| m.metadata),
        Synced::ResourceClaim => Api::<ResourceClaim>::namespaced(leaf.clone(), ns)
            .get_metadata_opt(name)
            .await?
            .map(|m| m.metadata),
    })
}

/// Whether the leaf account may create `resource` in `namespace` (a
/// SelfSubjectAccessReview in the leaf).
async fn may_create(
    leaf: &kube::Client,
    namespace: &str,
    resource: &str,
) -> Result<bool, kube::Error> {
    let api: Api<SelfSubjectAccessReview> = Api::all(leaf.clone());
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(namespace.to_string()),
                verb: Some("create".into()),
                resource: Some(resource.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = api.create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use mcsched_engine::leaf::check_memory::{Asker, Limits};
    use mcsched_engine::leaf::leaf_checks::LIMITS;
    use serde_json::json;
    use tokio::sync::mpsc;

    fn secret(i: usize) -> Question {
        Question::Foreign(Synced::Secret, "shop".into(), format!("s-{i}"))
    }

    /// A question the full queue dropped is asked at the next tick.
    #[tokio::test(start_paused = true)]
    async fn a_dropped_question_is_asked_at_the_next_tick() {
        let (client, calls) = crate::fake_api::client(|_, _| {
            (404, crate::fake_api::status(404, "NotFound", "not found"))
        });
        let limits = Limits { queue: 1, ..LIMITS };
        let checks = LeafChecks::with_limits("dropped-then-asked", "h1", limits);
        let (first, second) = (secret(1), secret(2));
        checks.want(&first, Asker::Live);
        checks.want(&second, Asker::Live);
        let (dropped, _) =
            mcsched_engine::metrics::global().leaf_check_counters("dropped-then-asked");
        assert_eq!(dropped.get(), 1);
        let (tx, mut events) = mpsc::unbounded_channel();
        let on_event: OnEvent = Arc::new(move |e| {
            let _ = tx.send(e);
        });
        tokio::spawn(checks.clone().run(client, on_event));
        // Within the first tick after the start (virtual time: nothing waits really).
        let answered = tokio::time::timeout(RECHECK + Duration::from_secs(1), async {
            while checks.answer(&second).is_none() {
                events.recv().await.expect("answered");
            }
        })
        .await;
        assert!(
            answered.is_ok(),
            "the dropped question is asked at the tick"
        );
        assert_eq!(checks.answer(&first), Some(false));
        assert_eq!(checks.answer(&second), Some(false));
        let gets = calls.lock().map(|c| c.len()).unwrap_or_default();
        assert_eq!(gets, 2, "each asked once");
    }

    #[tokio::test]
    async fn a_foreign_object_is_a_clash_and_ours_is_not() {
        let (client, _calls) = crate::fake_api::client(|_, path| {
            let labels = if path.ends_with("/theirs") {
                json!({})
            } else {
                json!({"mcsched.io/managed-by-cluster": "east", "mcsched.io/host-id": "h1"})
            };
            (
                200,
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "x", "namespace": "shop", "labels": labels}}),
            )
        });
        let checks = LeafChecks::new("east", "h1");
        let theirs = Question::Foreign(Synced::ConfigMap, "shop".into(), "theirs".into());
        let ours = Question::Foreign(Synced::ConfigMap, "shop".into(), "ours".into());
        assert_eq!(
            checks.want(&theirs, Asker::Live),
            None,
            "unknown until asked"
        );
        assert_eq!(checks.want(&ours, Asker::Live), None);
        let (tx, mut events) = mpsc::unbounded_channel();
        let on_event: OnEvent = Arc::new(move |e| {
            let _ = tx.send(e);
        });
        tokio::spawn(checks.clone().run(client, on_event));
        for _ in 0..2 {
            tokio::time::timeout(Duration::from_secs(5), events.recv())
                .await
                .expect("answered");
        }
        assert_eq!(checks.answer(&theirs), Some(true));
        assert_eq!(checks.answer(&ours), Some(false));
    }
}
