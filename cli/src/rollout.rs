//! Whether a Deployment's rollout is done, judged as `kubectl rollout status` judges it
//! (kubectl's DeploymentStatusViewer, in its words): Available alone is not done, since
//! during a rolling update the old ReplicaSet's pods keep the Deployment available.

use k8s_openapi::api::apps::v1::Deployment;

/// kube-controller-manager's reason on the Progressing condition once
/// `progressDeadlineSeconds` passed without progress.
const TIMED_OUT_REASON: &str = "ProgressDeadlineExceeded";

#[derive(Debug, PartialEq, Eq)]
pub enum Rollout {
    /// Every replica is of the current template and available.
    Done(String),
    /// Not yet: what it waits for.
    Waiting(String),
    /// The controller gave up on it.
    Failed(String),
}

pub fn status(d: &Deployment) -> Rollout {
    let name = d.metadata.name.as_deref().unwrap_or_default();
    let status = d.status.clone().unwrap_or_default();
    let generation = d.metadata.generation.unwrap_or(0);
    if generation > status.observed_generation.unwrap_or(0) {
        return Rollout::Waiting("Waiting for deployment spec update to be observed...".into());
    }
    let timed_out = status.conditions.iter().flatten().any(|c| {
        c.type_.as_deref() == Some("Progressing") && c.reason.as_deref() == Some(TIMED_OUT_REASON)
    });
    if timed_out {
        return Rollout::Failed(format!(
            "deployment {name:?} exceeded its progress deadline"
        ));
    }
    let updated = status.updated_replicas.unwrap_or(0);
    let replicas = status.replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(0);
    let waiting = |what: String| {
        Rollout::Waiting(format!(
            "Waiting for deployment {name:?} rollout to finish: {what}..."
        ))
    };
    if let Some(wanted) = d.spec.replicas
        && updated < wanted
    {
        return waiting(format!(
            "{updated} out of {wanted} new replicas have been updated"
        ));
    }
    if replicas > updated {
        return waiting(format!(
            "{} old replicas are pending termination",
            replicas - updated
        ));
    }
    if available < updated {
        return waiting(format!(
            "{available} of {updated} updated replicas are available"
        ));
    }
    Rollout::Done(format!("deployment {name:?} successfully rolled out"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(generation: i64, status: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "mcsched-agent", "generation": generation},
            "spec": {"replicas": 2, "selector": {}, "template": {}},
            "status": status,
        }))
        .expect("a Deployment")
    }

    #[test]
    fn an_available_deployment_mid_roll_is_not_done() {
        // What an upgrade of 2 replicas looks like a moment after it was applied: both old
        // pods available, one new one starting (maxSurge 1).
        let d = deployment(
            2,
            json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 1,
                "availableReplicas": 2, "readyReplicas": 2,
                "conditions": [{"type": "Available", "status": "True"},
                    {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}]}),
        );
        assert_eq!(
            status(&d),
            Rollout::Waiting(
                "Waiting for deployment \"mcsched-agent\" rollout to finish: 1 out of 2 new replicas have been updated...".into()
            )
        );
    }

    #[test]
    fn each_step_of_a_roll_in_kubectls_words() {
        let cases = [
            (
                json!({"observedGeneration": 1}),
                "Waiting for deployment spec update to be observed...",
            ),
            (
                json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 2, "availableReplicas": 2}),
                "Waiting for deployment \"mcsched-agent\" rollout to finish: 1 old replicas are pending termination...",
            ),
            (
                json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 1}),
                "Waiting for deployment \"mcsched-agent\" rollout to finish: 1 of 2 updated replicas are available...",
            ),
        ];
        for (s, want) in cases {
            assert_eq!(status(&deployment(2, s)), Rollout::Waiting(want.into()));
        }
        let done = deployment(
            2,
            json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}),
        );
        assert_eq!(
            status(&done),
            Rollout::Done("deployment \"mcsched-agent\" successfully rolled out".into())
        );
        let stuck = deployment(
            2,
            json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 1,
                "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]}),
        );
        assert_eq!(
            status(&stuck),
            Rollout::Failed("deployment \"mcsched-agent\" exceeded its progress deadline".into())
        );
    }
}
