//! What a namespace editor's PlacementPolicy overrides cannot do, end to end: a host with
//! one node and a leaf, west, joined the way `join` leaves it, whose admin created a
//! Secret `leaf-owned` in the shared namespace.
//!
//! - A jsonPatch whose later operation fails after a `move` into its parent (json-patch's
//!   own undo panics on it): the policy is refused, naming the operation, and the agent
//!   goes on scheduling.
//! - A patch that doubles the copy thirty times: refused, naming the bound.
//! - A patch that mounts `leaf-owned` into the copy: the leaf is never used for the pod,
//!   and why is said; no copy reaches the leaf.
//! - A patch that sets `spec.nodeName`: refused, naming the path.
//! - More operations than the schema's maxItems: the API server refuses the policy.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::PostParams;
use mcsched_e2e::placement::{agent_with_policies, policy};
use mcsched_e2e::{ControlPlane, ControlPlaneOptions, wait};
use mcsched_shared::keys;
use mcsched_shared::policy::PlacementPolicy;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);

fn pod(name: &str, app: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"app": app}},
        "spec": {"schedulerName": "mcsched", "containers": [{"name": "c", "image": "pause",
            "resources": {"requests": {"cpu": "100m"}}}]}}),
    )?)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_namespace_editors_overrides_neither_crash_the_agent_nor_widen_the_copy()
-> anyhow::Result<()> {
    let cps =
        ControlPlane::start_many(&["os-host", "os-west"], ControlPlaneOptions::full()).await?;
    let [host, west]: [ControlPlane; 2] = cps
        .try_into()
        .map_err(|_| anyhow::anyhow!("expected two control planes"))?;
    for (cp, node) in [(&host, "host-a"), (&west, "west-1")] {
        mcsched_e2e::objects::ready_node(
            &cp.client,
            node,
            "4",
            "8Gi",
            json!({"kubernetes.io/hostname": node}),
        )
        .await?;
    }
    mcsched_e2e::objects::join_as_join_does(&host.client, &west, "west", json!({})).await?;
    // The leaf owner's own Secret, in the namespace the leaf shares with the host.
    Api::<Secret>::namespaced(west.client.clone(), "default")
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "leaf-owned"},
                "stringData": {"password": "the leaf owner's"}}))?,
        )
        .await?;
    let mut agent = agent_with_policies(&host, &["mcsched-west"], TIMEOUT).await?;
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    let policies: Api<PlacementPolicy> = Api::namespaced(host.client.clone(), "default");
    let only_west = json!({"clusterNames": ["west"]});

    // More operations than the schema allows: the API server refuses the policy.
    let many: Vec<_> = (0..=mcsched_shared::overrides::MAX_OPERATIONS)
        .map(|_| json!({"op": "test", "path": "/spec", "value": {}}))
        .collect();
    let refused = policy(
        &host.client,
        "too-many",
        json!({"podSelector": {"matchLabels": {"app": "none"}},
               "overrides": [{"jsonPatch": many}]}),
    )
    .await
    .err()
    .map(|e| format!("{e:#}"))
    .unwrap_or_default();
    assert!(
        refused.contains("spec.overrides[0].jsonPatch"),
        "a policy of {} operations was not refused: {refused:?}",
        mcsched_shared::overrides::MAX_OPERATIONS + 1
    );

    let doubling: Vec<_> = (0..30)
        .map(|i| json!({"op": "copy", "from": "/spec", "path": format!("/spec/x{i}")}))
        .collect();
    for (name, patch) in [
        (
            "crash",
            json!([{"op": "move", "from": "/spec/containers", "path": "/spec"},
                   {"op": "test", "path": "/x", "value": 1}]),
        ),
        ("doubling", json!(doubling)),
        (
            "node-name",
            json!([{"op": "add", "path": "/spec/nodeName", "value": "west-1"}]),
        ),
        (
            "widen",
            json!([{"op": "add", "path": "/spec/volumes", "value":
                        [{"name": "stolen", "secret": {"secretName": "leaf-owned"}}]},
                   {"op": "add", "path": "/spec/containers/0/volumeMounts", "value":
                        [{"name": "stolen", "mountPath": "/stolen"}]}]),
        ),
    ] {
        policy(
            &host.client,
            name,
            json!({"podSelector": {"matchLabels": {"app": name}},
                   "clusterAffinity": only_west,
                   "overrides": [{"jsonPatch": patch}]}),
        )
        .await?;
    }
    // Pods only once the agent has judged every policy (its Ready condition written):
    // a pod scheduled before the agent saw its policy would be judged without it.
    let mut ready = std::collections::BTreeMap::new();
    for name in ["crash", "doubling", "node-name", "widen"] {
        let condition = wait::until(TIMEOUT, &format!("{name}'s Ready condition"), || async {
            let p = policies.get(name).await?;
            Ok(p.status
                .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Ready")))
        })
        .await
        .map_err(|e| e.context(agent.logs()))?;
        ready.insert(name, condition);
        pods.create(&PostParams::default(), &pod(&format!("{name}-1"), name)?)
            .await?;
    }

    // The agent goes on: a plain pod created after them all is bound.
    pods.create(&PostParams::default(), &pod("after", "plain")?)
        .await?;
    wait::until(TIMEOUT, "pod after bound", || async {
        Ok(pods
            .get_opt("after")
            .await?
            .and_then(|p| p.spec.and_then(|s| s.node_name)))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    assert!(
        agent.wait_exit(Duration::from_millis(100)).is_none(),
        "the agent exited: {}",
        agent.logs()
    );

    // Each refused policy names the field and why.
    for (name, field, why) in [
        ("crash", "spec.overrides[0].jsonPatch[0].path", "whole spec"),
        ("doubling", "spec.overrides[0].jsonPatch[", "larger than"),
        (
            "node-name",
            "spec.overrides[0].jsonPatch[0].path",
            "spec.nodeName",
        ),
    ] {
        let c = &ready[name];
        assert!(
            c.status == "False" && c.message.contains(field) && c.message.contains(why),
            "{name}: {c:?}"
        );
    }
    assert_eq!(ready["widen"].status, "True", "{:?}", ready["widen"]);

    // The widening patch is valid as a policy; each copy it would make is refused, and
    // the pod is never sent to the leaf.
    let http = mcsched_e2e::api::admin_https(&host)?;
    let said = wait::until(TIMEOUT, "widen-1's explanation of west", || async {
        let e = mcsched_e2e::api::explain(&http, &agent.url, "default", "widen-1").await?;
        Ok(e.nodes
            .iter()
            .find(|n| n.node == keys::virtual_node_name("west"))
            .map(|n| format!("{n:?}"))
            .filter(|s| s.contains("names Secret leaf-owned")))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    assert!(said.contains("spec.overrides[0].jsonPatch"), "{said}");
    for name in ["crash-1", "doubling-1", "node-name-1", "widen-1"] {
        let p = pods.get(name).await?;
        assert_eq!(
            p.spec.and_then(|s| s.node_name),
            None,
            "{name} was bound: {}",
            agent.logs()
        );
    }
    let leaf_pods: Api<Pod> = Api::namespaced(west.client.clone(), "default");
    let in_leaf: Vec<_> = leaf_pods
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .filter(|n| n != "after")
        .collect();
    assert!(in_leaf.is_empty(), "copies reached the leaf: {in_leaf:?}");
    agent.stop();
    Ok(())
}
