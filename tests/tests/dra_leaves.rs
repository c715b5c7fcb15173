//! Devices across clusters: pods with ResourceClaims go to a leaf only when one of its
//! nodes could allocate them there, from the leaf's own DeviceClasses, ResourceSlices and
//! allocated claims. No driver runs: slices are API objects.
//!
//! The host (kube-controller-manager, so its claim controller makes claims from
//! templates) has one node, host-a, with a t4; the leaf east (its own kube-scheduler and
//! controller manager) has east-1 with an a100 and east-2 with a t4. Both define the
//! driver's DeviceClass.
//!
//! 1. A pod whose template asks for an a100 (there is one, in the leaf) is bound to the
//!    virtual node; explain names east-1 and the device that would serve its request, and
//!    the host's claim is left unallocated. Pod sync copies the template into the leaf,
//!    whose claim controller makes the copy's claim, and the leaf's scheduler binds the
//!    copy to east-1 with that claim allocated on east-1's a100.
//! 2. A second a100 pod right after it: east-1's a100 is held for the first (in flight
//!    until the leaf's scheduler has placed its copy), so it is Pending with the leaf's
//!    reason, "cannot allocate all claims".
//! 3. A pod naming a claim allocated (by hand, reserved for nobody) on host-a's t4 and
//!    allowed only on the virtual node: the claim holds host devices, so the virtual node
//!    refuses it, PostFilter deallocates it, and the retry sends it to the leaf, whose
//!    east-2 has a t4: the claim is copied unallocated, and the leaf's scheduler binds the
//!    copy to east-2 with the copied claim allocated there.
//! 4. A pod asking for an h100, which neither cluster has: Pending, with the host node's
//!    and the leaf's reasons.
//!
//! A second test places a gang of GPU pods all or nothing over the host and the leaf:
//! a Job of 5 whose members each ask for an a100 (PodGroup minCount 5), with 2 a100s on
//! the host and 2 in the leaf: none is bound, every member is told why; once a third leaf
//! node brings a fifth a100, the gang is bound whole, 2 on the host and 3 on the virtual
//! node (each leaf a100 held for one member as it waits for the rest).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use mcsched_e2e::dra::{self, DRIVER, PodClaim, nodes_with_devices, selector};
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions, objects, wait};
use mcsched_shared::explain::{Explanation, Outcome};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);
const VIRTUAL_NODE: &str = "mcsched-east";

fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

/// The pod's PodScheduled message once it is False.
fn unschedulable_message(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .and_then(|c| c.message.clone())
}

/// The pod's PodScheduled message once it is False; fails at once if it is bound.
async fn unschedulable(
    pods: &Api<Pod>,
    name: &str,
    logs: &impl Fn() -> String,
) -> anyhow::Result<String> {
    let seen = wait::until(TIMEOUT, &format!("{name} unschedulable"), || async {
        let p = pods.get(name).await?;
        Ok(match node_of(&p) {
            Some(node) => Some(Err(node)),
            None => unschedulable_message(&p).map(Ok),
        })
    })
    .await
    .map_err(|e| e.context(logs()))?;
    seen.map_err(|node| anyhow::anyhow!("{name} was bound to {node}\n{}", logs()))
}

/// Waits for the leaf copy of `name` to be bound to `leaf_node` by the leaf's scheduler,
/// with its claim allocated there on that node's `gpu-0`.
async fn leaf_placed(
    leaf_pods: &Api<Pod>,
    leaf_claims: &Api<ResourceClaim>,
    name: &str,
    leaf_node: &str,
) -> anyhow::Result<()> {
    let copy = wait::until(
        TIMEOUT,
        &format!("the leaf copy of {name} bound"),
        || async {
            Ok(leaf_pods
                .get_opt(name)
                .await?
                .filter(|p| node_of(p).is_some()))
        },
    )
    .await?;
    assert_eq!(node_of(&copy).as_deref(), Some(leaf_node), "{name}'s copy");
    let claim = match copy
        .spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| c.resource_claim_name.clone())
    {
        Some(named) => named,
        None => (copy.status.as_ref())
            .and_then(|s| s.resource_claim_statuses.as_ref())
            .and_then(|s| s.first())
            .and_then(|s| s.resource_claim_name.clone())
            .ok_or_else(|| anyhow::anyhow!("{name}'s copy names no claim"))?,
    };
    let devices: Vec<(String, String)> = (leaf_claims.get(&claim).await?.status)
        .and_then(|s| s.allocation)
        .and_then(|a| a.devices)
        .and_then(|d| d.results)
        .into_iter()
        .flatten()
        .map(|r| (r.pool, r.device))
        .collect();
    assert_eq!(
        devices,
        [(leaf_node.to_string(), "gpu-0".to_string())],
        "leaf claim {claim} of {name}'s copy"
    );
    Ok(())
}

/// The claim the host's claim controller made for pod `name`.
async fn generated_claim(
    pods: &Api<Pod>,
    claims: &Api<ResourceClaim>,
    name: &str,
) -> anyhow::Result<ResourceClaim> {
    let claim = (pods.get(name).await?.status)
        .and_then(|s| s.resource_claim_statuses)
        .and_then(|s| s.into_iter().next())
        .and_then(|s| s.resource_claim_name)
        .ok_or_else(|| anyhow::anyhow!("pod {name} names no generated claim"))?;
    Ok(claims.get(&claim).await?)
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_with_claims_go_to_the_leaf_whose_devices_fit() -> anyhow::Result<()> {
    let no_scheduler = ControlPlaneOptions {
        with_controller_manager: true,
        with_scheduler: false,
        simulate_kubelets: true,
    };
    let (host, east) = tokio::try_join!(
        ControlPlane::start("drl-host", no_scheduler),
        ControlPlane::start("drl-east", ControlPlaneOptions::full()),
    )?;
    nodes_with_devices(&host.client, &[("host-a", "t4")]).await?;
    nodes_with_devices(&east.client, &[("east-1", "a100"), ("east-2", "t4")]).await?;
    for cp in [&host, &east] {
        dra::device_class(&cp.client).await?;
    }
    for model in ["a100", "h100"] {
        dra::template(&host.client, model).await?;
    }
    objects::join_as_join_does(&host.client, &east, "east", json!({})).await?;
    let agent = Agent::start_with(&host.kubeconfig, "mcsched", host.dir(), "drl", &[])?;
    let nodes: Api<Node> = Api::all(host.client.clone());
    objects::wait_ready(&nodes, VIRTUAL_NODE, "True", TIMEOUT)
        .await
        .map_err(|e| e.context(agent.logs()))?;
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    let claims: Api<ResourceClaim> = Api::namespaced(host.client.clone(), "default");
    let http = mcsched_e2e::api::admin_https(&host)?;

    // 1. The one a100 is in the leaf.
    dra::pod(
        &host.client,
        "mcsched",
        "a100-first",
        PodClaim::Template("a100"),
        None,
    )
    .await?;
    let bound = wait::until(TIMEOUT, "a100-first bound", || async {
        Ok(node_of(&pods.get("a100-first").await?))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    assert_eq!(bound, VIRTUAL_NODE);
    let explanation: Explanation =
        mcsched_e2e::api::explain(&http, &agent.url, "default", "a100-first").await?;
    match &explanation.outcome {
        Outcome::Scheduled { node, leaf_node } => {
            assert_eq!(node, VIRTUAL_NODE);
            assert_eq!(leaf_node.as_deref(), Some("east-1"));
        }
        other => panic!("unexpected outcome {other:?}"),
    }
    let claim = generated_claim(&pods, &claims, "a100-first").await?;
    let claim_name = claim.metadata.name.clone().unwrap_or_default();
    let vn = explanation
        .nodes
        .iter()
        .find(|n| n.node == VIRTUAL_NODE)
        .ok_or_else(|| anyhow::anyhow!("no explanation of {VIRTUAL_NODE}"))?;
    let device = format!("claim default/{claim_name}, request gpu: device {DRIVER}/east-1/gpu-0");
    assert!(
        vn.leaf_notes.contains(&device),
        "{VIRTUAL_NODE}'s notes {:?} lack {device:?}",
        vn.leaf_notes
    );
    // Nothing allocated in the host for a pod the leaf runs.
    assert!(
        claim
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .is_none(),
        "the host claim was allocated: {:?}",
        claim.status
    );

    // 2. Right after it: east-1's a100 is held for a100-first (in flight, then by the
    // leaf's own claim).
    dra::pod(
        &host.client,
        "mcsched",
        "a100-second",
        PodClaim::Template("a100"),
        None,
    )
    .await?;
    let why = unschedulable(&pods, "a100-second", &|| agent.logs()).await?;
    assert!(
        why.contains("leaf cluster east has no node that fits: 2 cannot allocate all claims"),
        "{why}"
    );

    // The leaf's scheduler placed the copy where the check said, with the device it named,
    // through the leaf claim its controller made from the template's copy.
    let leaf_pods: Api<Pod> = Api::namespaced(east.client.clone(), "default");
    let leaf_claims: Api<ResourceClaim> = Api::namespaced(east.client.clone(), "default");
    leaf_placed(&leaf_pods, &leaf_claims, "a100-first", "east-1")
        .await
        .map_err(|e| e.context(agent.logs()))?;

    // 3. A claim allocated in the host, for a pod only the virtual node may take.
    dra::create::<ResourceClaim>(
        &host.client,
        json!({"metadata": {"name": "t4-by-hand"},
            "spec": {"devices": {"requests": [{"name": "gpu",
                "exactly": {"deviceClassName": DRIVER, "selectors": selector("t4")}}]}}}),
    )
    .await?;
    let allocation = json!({"status": {"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "host-a", "device": "gpu-0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["host-a"]}]}]}
    }}});
    claims
        .patch_status(
            "t4-by-hand",
            &PatchParams::default(),
            &Patch::Merge(&allocation),
        )
        .await?;
    dra::pod(
        &host.client,
        "mcsched",
        "t4-leaf",
        PodClaim::Named("t4-by-hand"),
        Some(VIRTUAL_NODE),
    )
    .await?;
    let bound = wait::until(TIMEOUT, "t4-leaf bound", || async {
        Ok(node_of(&pods.get("t4-leaf").await?))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    assert_eq!(bound, VIRTUAL_NODE);
    let deallocated = claims.get("t4-by-hand").await?;
    assert!(
        deallocated
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .is_none(),
        "still allocated in the host: {:?}",
        deallocated.status
    );
    let explanation: Explanation =
        mcsched_e2e::api::explain(&http, &agent.url, "default", "t4-leaf").await?;
    assert!(
        matches!(&explanation.outcome, Outcome::Scheduled { leaf_node: Some(l), .. } if l == "east-2"),
        "{:?}",
        explanation.outcome
    );
    // Copied unallocated, and allocated by the leaf's scheduler there.
    leaf_placed(&leaf_pods, &leaf_claims, "t4-leaf", "east-2")
        .await
        .map_err(|e| e.context(agent.logs()))?;

    // 4. No h100 anywhere.
    dra::pod(
        &host.client,
        "mcsched",
        "h100",
        PodClaim::Template("h100"),
        None,
    )
    .await?;
    let why = unschedulable(&pods, "h100", &|| agent.logs()).await?;
    assert!(why.contains("1 cannot allocate all claims"), "{why}");
    assert!(
        why.contains("leaf cluster east has no node that fits: 2 cannot allocate all claims"),
        "{why}"
    );
    drop(agent);
    Ok(())
}

const GANG_GATES: &str = "--feature-gates=GenericWorkload=true,\
    TopologyAwareWorkloadScheduling=true,WorkloadWithJob=true";

/// The gang's members: name → node, once bound.
async fn members(pods: &Api<Pod>) -> anyhow::Result<Vec<(String, Option<String>, Option<String>)>> {
    Ok(pods
        .list(&ListParams::default().labels("gang=train"))
        .await?
        .items
        .iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap_or_default(),
                node_of(p),
                unschedulable_message(p),
            )
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gang_of_gpu_pods_is_placed_whole_over_host_and_leaf_devices() -> anyhow::Result<()> {
    let no_scheduler = ControlPlaneOptions {
        with_controller_manager: true,
        with_scheduler: false,
        simulate_kubelets: true,
    };
    let (host, east) = tokio::try_join!(
        ControlPlane::start_with_args("drg-host", no_scheduler, &[GANG_GATES]),
        ControlPlane::start_with_args("drg-east", ControlPlaneOptions::full(), &[GANG_GATES]),
    )?;
    nodes_with_devices(&host.client, &[("host-a", "a100"), ("host-b", "a100")]).await?;
    nodes_with_devices(&east.client, &[("east-1", "a100"), ("east-2", "a100")]).await?;
    for cp in [&host, &east] {
        dra::device_class(&cp.client).await?;
    }
    dra::template(&host.client, "a100").await?;
    objects::join_as_join_does(&host.client, &east, "east", json!({})).await?;
    let agent = Agent::start_with(&host.kubeconfig, "mcsched", host.dir(), "drg", &[])?;
    let nodes: Api<Node> = Api::all(host.client.clone());
    objects::wait_ready(&nodes, VIRTUAL_NODE, "True", TIMEOUT)
        .await
        .map_err(|e| e.context(agent.logs()))?;
    let template = json!({
        "metadata": {"labels": {"gang": "train"}},
        "spec": {
            "schedulerName": "mcsched",
            "restartPolicy": "Never",
            "tolerations": [{"key": mcsched_shared::keys::LEAF_TAINT, "operator": "Exists"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "a100"}],
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"claims": [{"name": "gpu"}]}}]
        }
    });
    objects::gang_job_with(
        &host.client,
        "train",
        5,
        json!({"template": template, "backoffLimitPerIndex": 2}),
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    // Four a100s for five members: none bound, each told why.
    let refused = wait::until(TIMEOUT, "every member unschedulable", || async {
        let m = members(&pods).await?;
        if let Some((name, Some(node), _)) = m.iter().find(|(_, n, _)| n.is_some()) {
            return Ok(Some(Err(format!("{name} bound to {node}"))));
        }
        Ok((m.len() == 5 && m.iter().all(|(_, _, why)| why.is_some())).then_some(Ok(m)))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let refused =
        refused.map_err(|e| anyhow::anyhow!("{e}: not all or nothing\n{}", agent.logs()))?;
    println!("refused: {refused:?}");
    // A fifth a100, in the leaf.
    nodes_with_devices(&east.client, &[("east-3", "a100")]).await?;
    let placed = wait::until(TIMEOUT, "the gang bound whole", || async {
        let m = members(&pods).await?;
        Ok((m.len() == 5 && m.iter().all(|(_, n, _)| n.is_some())).then_some(m))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let on = |node: &str| {
        placed
            .iter()
            .filter(|(_, n, _)| n.as_deref() == Some(node))
            .count()
    };
    assert_eq!(
        (on("host-a"), on("host-b"), on(VIRTUAL_NODE)),
        (1, 1, 3),
        "{placed:?}"
    );
    drop(agent);
    Ok(())
}
