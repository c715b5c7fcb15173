//! Permit's Wait against a real API server: mcsched's scheduler runs in this process
//! with a test-only Permit plugin (no default plugin ever waits), a small gang
//! scheduler like kubernetes-sigs' coscheduling: a pod labelled `gang=NAME` waits until
//! `gang-size` members are waiting, then they are all allowed; `timeout-seconds` bounds
//! the wait.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use mcsched_agent::scheduler::{SchedulerOptions, Shared};
use mcsched_e2e::objects::ready_node;
use mcsched_e2e::{ControlPlane, ControlPlaneOptions, wait};
use mcsched_engine::framework::{
    Code, CycleState, Handle, PermitPlugin, Plugin, ProfileSpec, Status,
};
use mcsched_engine::profiles::Profiles;
use mcsched_engine::snapshot::PodInfo;
use mcsched_shared::explain::Outcome;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);
const GANG: &str = "TestGang";

#[derive(Default)]
struct Gang {
    handle: OnceLock<Handle>,
}

impl Plugin for Gang {
    fn name(&self) -> &'static str {
        GANG
    }
    fn set_handle(&self, handle: &Handle) {
        let _ = self.handle.set(handle.clone());
    }
    fn as_permit(&self) -> Option<&dyn PermitPlugin> {
        Some(self)
    }
}

impl PermitPlugin for Gang {
    fn permit(&self, _state: &CycleState, pod: &PodInfo, _node: &str) -> (Status, Duration) {
        let labels = pod.labels();
        let (Some(gang), Some(handle)) = (labels.get("gang"), self.handle.get()) else {
            return (Status::success(), Duration::ZERO);
        };
        let size: usize = labels
            .get("gang-size")
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        let timeout = labels
            .get("timeout-seconds")
            .and_then(|s| s.parse().ok())
            .map_or(Duration::from_secs(600), Duration::from_secs);
        let mut members = Vec::new();
        handle.iterate_over_waiting_pods(|wp| {
            if wp.pod().labels().get("gang") == Some(gang) {
                members.push(wp.pod().uid.clone());
            }
        });
        if members.len() + 1 < size {
            return (Status::new(Code::Wait, Vec::new()), timeout);
        }
        for uid in members {
            if let Some(wp) = handle.get_waiting_pod(&uid) {
                wp.allow(GANG);
            }
        }
        (Status::success(), Duration::ZERO)
    }
}

fn pod(name: &str, cpu: &str, labels: serde_json::Value) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "schedulerName": "mcsched",
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}]
        }
    }))?)
}

fn profile() -> anyhow::Result<Profiles> {
    let mut spec: ProfileSpec = mcsched_engine::config_bridge::default_spec("mcsched")?;
    spec.permit.push(GANG.into());
    let mut registry = mcsched_engine::plugins::default_registry();
    registry.insert(GANG.into(), Arc::new(Gang::default()));
    Ok(Profiles::build(&[(spec, registry)], 2)?)
}

fn waiting(shared: &Shared) -> Vec<String> {
    let mut names = Vec::new();
    if let Some(fw) = shared.profiles.get("mcsched") {
        fw.handle()
            .iterate_over_waiting_pods(|wp| names.push(wp.pod().name.clone()));
    }
    names.sort();
    names
}

async fn bound(pods: &Api<Pod>, name: &str) -> anyhow::Result<Option<String>> {
    Ok(pods.get(name).await?.spec.and_then(|s| s.node_name))
}

async fn delete_now(pods: &Api<Pod>, names: &[&str]) -> anyhow::Result<()> {
    for name in names {
        pods.delete(name, &DeleteParams::default().grace_period(0))
            .await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit_wait_allow_timeout_delete_and_preemption() -> anyhow::Result<()> {
    let cp = ControlPlane::start("permit", ControlPlaneOptions::default()).await?;
    ready_node(&cp.client, "only", "2", "8Gi", json!({})).await?;
    let options = SchedulerOptions {
        parallel_bindings: 4,
        namespace: "mcsched-system".into(),
        initial_backoff: Duration::from_secs(1),
        max_backoff: Duration::from_secs(10),
        content_type: mcsched_wire::ContentType::default(),
        watch_content_type: mcsched_wire::ContentType::default(),
    };
    let leaves = Arc::new(mcsched_agent::multicluster::registry::Leaves::new(
        Default::default(),
    ));
    let shared = Shared::new(cp.client.clone(), profile()?, Vec::new(), leaves, &options);
    let (_leader_tx, leader) = tokio::sync::watch::channel(true);
    let (stop_tx, stop) = tokio::sync::oneshot::channel::<()>();
    let scheduler = tokio::spawn(mcsched_agent::scheduler::run(
        shared.clone(),
        options,
        leader,
        async move {
            let _ = stop.await;
        },
    ));
    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), "default");
    let create = |p: Pod| {
        let pods = pods.clone();
        async move { pods.create(&PostParams::default(), &p).await }
    };

    // A gang of three: the first two wait, assumed, until the third is permitted.
    let gang = json!({"gang": "g1", "gang-size": "3"});
    create(pod("g1-a", "100m", gang.clone())?).await?;
    create(pod("g1-b", "100m", gang.clone())?).await?;
    wait::until(TIMEOUT, "g1-a and g1-b waiting", || async {
        Ok((waiting(&shared) == ["g1-a", "g1-b"]).then_some(()))
    })
    .await?;
    assert!(shared.cache().is_assumed("default/g1-a"));
    assert_eq!(bound(&pods, "g1-a").await?, None);
    create(pod("g1-c", "100m", gang.clone())?).await?;
    for name in ["g1-a", "g1-b", "g1-c"] {
        let node = wait::until(TIMEOUT, &format!("{name} bound"), || bound(&pods, name)).await?;
        assert_eq!(node, "only");
    }
    assert!(waiting(&shared).is_empty());
    delete_now(&pods, &["g1-a", "g1-b", "g1-c"]).await?;

    // Alone in a gang of two with a 1 s timeout: rejected with kube's message.
    create(pod(
        "lonely",
        "100m",
        json!({"gang": "g2", "gang-size": "2", "timeout-seconds": "1"}),
    )?)
    .await?;
    let message = wait::until(TIMEOUT, "lonely rejected", || async {
        let p = pods.get("lonely").await?;
        let condition = p
            .status
            .and_then(|s| s.conditions)
            .into_iter()
            .flatten()
            .find(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("Unschedulable"));
        Ok(condition.and_then(|c| c.message))
    })
    .await?;
    let want =
        "0/1 nodes are available: 1 rejected due to timeout after waiting 1s at plugin TestGang.";
    assert_eq!(message, want);
    assert_eq!(bound(&pods, "lonely").await?, None);
    // Its explanation says so too, not the node it waited on.
    let explained = shared
        .explanations
        .get("default/lonely")
        .context("no explanation of lonely")?;
    assert!(
        matches!(&explained.outcome, Outcome::Unschedulable { message, .. } if *message == want),
        "{:?}",
        explained.outcome
    );
    delete_now(&pods, &["lonely"]).await?;

    // Deleted while waiting: rejected, its room given back, not requeued.
    create(pod(
        "gone",
        "100m",
        json!({"gang": "g3", "gang-size": "2"}),
    )?)
    .await?;
    wait::until(TIMEOUT, "gone waiting", || async {
        Ok((waiting(&shared) == ["gone"]).then_some(()))
    })
    .await?;
    delete_now(&pods, &["gone"]).await?;
    wait::until(TIMEOUT, "gone forgotten", || async {
        let clear = waiting(&shared).is_empty()
            && !shared.cache().is_assumed("default/gone")
            && shared.queue.pending() == Default::default();
        Ok(clear.then_some(()))
    })
    .await?;

    // Preemption stops a waiting victim in memory instead of deleting it.
    let classes: Api<PriorityClass> = Api::all(cp.client.clone());
    for (name, value) in [("low", 10), ("high", 1000)] {
        classes
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name}, "value": value}))?,
            )
            .await?;
    }
    let with_class = |mut p: Pod, class: &str| {
        if let Some(s) = p.spec.as_mut() {
            s.priority_class_name = Some(class.into());
        }
        p
    };
    create(with_class(
        pod("victim", "2", json!({"gang": "g4", "gang-size": "2"}))?,
        "low",
    ))
    .await?;
    wait::until(TIMEOUT, "victim waiting", || async {
        Ok((waiting(&shared) == ["victim"]).then_some(()))
    })
    .await?;
    create(with_class(pod("important", "2", json!({}))?, "high")).await?;
    let node = wait::until(TIMEOUT, "important bound", || bound(&pods, "important")).await?;
    assert_eq!(node, "only");
    let victim = pods.get_opt("victim").await?;
    assert!(
        victim.is_some_and(|v| v.metadata.deletion_timestamp.is_none()),
        "the waiting victim must not be deleted"
    );
    assert_eq!(bound(&pods, "victim").await?, None);
    let events: Api<Event> = Api::namespaced(cp.client.clone(), "default");
    let note = wait::until(TIMEOUT, "the victim's Preempted event", || async {
        let list = events
            .list(&ListParams::default().fields("regarding.name=victim"))
            .await?;
        Ok(list
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("Preempted"))
            .and_then(|e| e.note))
    })
    .await?;
    assert!(
        note.starts_with("Preempted by pod ")
            && note.ends_with(" on node only (in kube-scheduler memory)."),
        "{note}"
    );

    let _ = stop_tx.send(());
    scheduler.await??;
    Ok(())
}
