//! Asks the host's API server the questions the engine's [`Grants`] holds: may the agent
//! read a namespace's ConfigMaps or Secrets (a SelfSubjectAccessReview). The answers are
//! the engine's; the client that asks is the agent's.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use mcsched_engine::framework::ClusterEvent;
use mcsched_engine::leaf::OnEvent;
use mcsched_engine::leaf::grants::{Copied, Grants, RECHECK};
use tracing::{debug, warn};

/// The loop that answers [`Grants`]' questions.
pub trait AskGrants {
    /// Asks the API server, on each request and every 30 s for what is still wanted; tells
    /// `on_event` when an answer arrives or changes, so pods waiting on it are retried.
    fn run(
        self: Arc<Self>,
        client: kube::Client,
        on_event: OnEvent,
    ) -> impl Future<Output = ()> + Send;
}

impl AskGrants for Grants {
    async fn run(self: Arc<Self>, client: kube::Client, on_event: OnEvent) {
        let Some(mut asked) = self.memory().take_receiver() else {
            return;
        };
        let api: Api<SelfSubjectAccessReview> = Api::all(client);
        let mut tick = tokio::time::interval(RECHECK);
        loop {
            let due: BTreeSet<(String, Copied)> = tokio::select! {
                next = asked.recv() => match next {
                    // Not when forgotten, or answered, since it was queued.
                    Some(one) if self.memory().unanswered(&one) => BTreeSet::from([one]),
                    Some(_) => continue,
                    None => return,
                },
                _ = tick.tick() => self.memory().due(),
            };
            let mut changed = false;
            for key in due {
                let (namespace, kind) = (&key.0, key.1);
                match review(&api, namespace, kind).await {
                    Ok(allowed) => {
                        debug!(%namespace, kind = kind.resource(), allowed, "read access checked");
                        changed |= self.memory().record(&key, allowed);
                    }
                    Err(e) => {
                        warn!(%namespace, kind = kind.resource(), error = %e, "cannot check read access; retrying")
                    }
                }
            }
            if changed {
                on_event(ClusterEvent::LeafChange);
            }
        }
    }
}

/// `get` on the kind in the namespace, as pod sync reads it (by name).
async fn review(
    api: &Api<SelfSubjectAccessReview>,
    namespace: &str,
    kind: Copied,
) -> Result<bool, kube::Error> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(namespace.to_string()),
                verb: Some("get".into()),
                resource: Some(kind.resource().into()),
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

    use mcsched_engine::leaf::grants::ReadAccess;
    use serde_json::json;
    use tokio::sync::mpsc;

    #[tokio::test]
    async fn unknown_until_the_api_server_answers_then_a_leaf_event() {
        let (client, calls) = crate::fake_api::client(|_, _| {
            (
                201,
                json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {}, "status": {"allowed": false}}),
            )
        });
        let grants = Grants::new("mcsched-system".into());
        assert_eq!(grants.may_read("shop", Copied::ConfigMaps), None);
        let (tx, mut events) = mpsc::unbounded_channel();
        let on_event: OnEvent = Arc::new(move |e| {
            let _ = tx.send(e);
        });
        tokio::spawn(grants.clone().run(client, on_event));
        let event = tokio::time::timeout(Duration::from_secs(5), events.recv())
            .await
            .expect("answered");
        assert_eq!(event, Some(ClusterEvent::LeafChange));
        assert_eq!(grants.may_read("shop", Copied::ConfigMaps), Some(false));
        assert!(crate::fake_api::called(
            &calls,
            "POST",
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
        ));
    }
}
