//! DynamicResources on host nodes, mcsched beside kube-scheduler v1.37: the same objects in
//! two control planes (kube-controller-manager in both, so the claim controller makes
//! claims from templates), one scheduled by kube-scheduler (profile `default-scheduler`),
//! the other by mcsched-agent. No driver runs: ResourceSlices are API objects, as in
//! scheduler_perf's DRA workloads. Two nodes: n1 publishes an `a100` device, n2 a `t4`;
//! one DeviceClass of the driver; a ResourceClaimTemplate asks for one device whose
//! `model` attribute is `a100` (CEL).
//!
//! 1. A pod with a claim from that template is bound to n1 by both, and its claim's
//!    `status.allocation` (devices, node selector, a timestamp), `status.reservedFor`
//!    and finalizers are the same in both clusters (the pod's UID aside).
//! 2. A second such pod, for the one a100 taken: Pending in both, with the same
//!    PodScheduled reason and message (kube's "cannot allocate all claims").
//! 3. A pod naming a claim that does not exist waits in both; once the claim is created
//!    (asking for a t4) it is bound to n2 in both: a claim added requeues.
//! 4. The first pod deleted, its claim goes (the claim controller and the garbage
//!    collector): the second pod is bound to n1 in both: a claim deleted requeues.
//! 5. A claim allocated (by hand, reserved for nobody) on n3's h100, for a pod that may
//!    run only on n4, which has an h100 too: Filter finds the claim available nowhere
//!    the pod may go, PostFilter deallocates it, and the retry allocates n4's device and
//!    binds the pod there, in both (nothing else deallocates a claim no pod ever used).
//! 6. A DeviceTaintRule taints n3's devices NoSchedule: a pod whose claim asks for an
//!    h100 (n3's is the only one free) is Pending in both with the same message; the
//!    rule deleted, it is bound to n3 in both: a rule's change requeues.
//! 7. Extended resources backed by DRA: a DeviceClass `l4` with `extendedResourceName:
//!    example.com/gpu` (selecting n5's l4), and a pod requesting `example.com/gpu: 1`
//!    without claims, on nodes none of which lists that resource in allocatable: bound
//!    to n5 in both, each scheduler having created the claim (generateName
//!    `<pod>-extended-resources-`, annotated, controlled by the pod) with the same
//!    requests and allocation (compared as `written`), and set the pod's
//!    `status.extendedResourceClaimStatus` alike.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use mcsched_e2e::dra::{
    self, DRIVER, PodClaim, create, create_cluster_scoped, nodes_with_devices, selector,
};
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions, wait};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(90);

/// Nodes, their slices, the class and the template.
async fn devices(client: &Client) -> anyhow::Result<()> {
    nodes_with_devices(client, &[("n1", "a100"), ("n2", "t4")]).await?;
    dra::device_class(client).await?;
    dra::template(client, "a100").await
}

/// Pod `name` of `scheduler` with one claim: from the template, or the claim `named`.
async fn pod(
    client: &Client,
    scheduler: &str,
    name: &str,
    named: Option<&str>,
) -> anyhow::Result<()> {
    pod_on(client, scheduler, name, named, None).await
}

/// As `pod`, and only on node `only_on` when given.
async fn pod_on(
    client: &Client,
    scheduler: &str,
    name: &str,
    named: Option<&str>,
    only_on: Option<&str>,
) -> anyhow::Result<()> {
    let claim = named.map_or(PodClaim::Template("a100"), PodClaim::Named);
    dra::pod(client, scheduler, name, claim, only_on).await
}

async fn get_pod(client: &Client, name: &str) -> anyhow::Result<Pod> {
    Ok(Api::<Pod>::namespaced(client.clone(), "default")
        .get(name)
        .await?)
}

fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

/// The pod's PodScheduled (status, reason, message), once it has one.
fn scheduled_condition(p: &Pod) -> Option<(String, String, String)> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")
        .map(|c| {
            (
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

async fn bound_to(client: &Client, name: &str, what: &str) -> anyhow::Result<String> {
    let bound = wait::until(TIMEOUT, what, || async {
        Ok(node_of(&get_pod(client, name).await?))
    })
    .await;
    match bound {
        Ok(node) => Ok(node),
        Err(e) => Err(e.context(state_of(client, name).await)),
    }
}

/// The pod's status and the namespace's claims, for a failure's message.
async fn state_of(client: &Client, name: &str) -> String {
    let pod = get_pod(client, name)
        .await
        .map(|p| serde_json::to_string(&p.status).unwrap_or_default());
    let claims = Api::<ResourceClaim>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .iter()
                .map(|c| {
                    format!(
                        "{:?} {}",
                        c.metadata.name,
                        serde_json::to_string(&c.status).unwrap_or_default()
                    )
                })
                .collect::<Vec<_>>()
        });
    format!("pod {name}: {pod:?}\nclaims: {claims:?}")
}

/// The claim the claim controller made for pod `name`, as the pod's status names it.
async fn claim_of(client: &Client, name: &str) -> anyhow::Result<ResourceClaim> {
    let pod = get_pod(client, name).await?;
    let claim = pod
        .status
        .and_then(|s| s.resource_claim_statuses)
        .and_then(|s| s.into_iter().next())
        .and_then(|s| s.resource_claim_name)
        .ok_or_else(|| anyhow::anyhow!("pod {name} names no generated claim"))?;
    Ok(Api::<ResourceClaim>::namespaced(client.clone(), "default")
        .get(&claim)
        .await?)
}

/// What a scheduler wrote into a claim, comparable across clusters: the allocation with
/// its timestamp's presence for the time, reservedFor with the pod's UID replaced by
/// whether it is the pod's, and the finalizers.
fn written(claim: &ResourceClaim, pod: &Pod) -> anyhow::Result<Value> {
    let mut status = serde_json::to_value(claim.status.clone().unwrap_or_default())?;
    let allocation = &mut status["allocation"];
    let stamped = allocation
        .get("allocationTimestamp")
        .is_some_and(Value::is_string);
    if let Some(a) = allocation.as_object_mut() {
        a.remove("allocationTimestamp");
    }
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    for r in status["reservedFor"].as_array_mut().into_iter().flatten() {
        let mine = r["uid"] == json!(uid);
        r["uid"] = json!(if mine { "<the pod>" } else { "<another>" });
    }
    Ok(json!({
        "status": status,
        "allocationTimestamp": stamped,
        "finalizers": claim.metadata.finalizers,
    }))
}

#[tokio::test(flavor = "multi_thread")]
async fn mcsched_allocates_claims_as_kube_scheduler_does() -> anyhow::Result<()> {
    let only_scheduler = ControlPlaneOptions {
        with_controller_manager: true,
        with_scheduler: false,
        simulate_kubelets: true,
    };
    let (kube, ours) = tokio::try_join!(
        ControlPlane::start("dra-kube", ControlPlaneOptions::full()),
        ControlPlane::start("dra-mcsched", only_scheduler)
    )?;
    let agent = Agent::start(&ours.kubeconfig, "mcsched", ours.dir())?;
    let both = [(&kube, "default-scheduler"), (&ours, "mcsched")];
    for (cp, _) in both {
        devices(&cp.client).await?;
    }
    let logs = || agent.logs();

    // 1. One pod, one matching device.
    for (cp, scheduler) in both {
        pod(&cp.client, scheduler, "trainer", None).await?;
    }
    let mut seen = Vec::new();
    for (cp, scheduler) in both {
        let node = bound_to(
            &cp.client,
            "trainer",
            &format!("{scheduler}: trainer bound"),
        )
        .await
        .map_err(|e| e.context(logs()))?;
        let claim = claim_of(&cp.client, "trainer").await?;
        let pod = get_pod(&cp.client, "trainer").await?;
        seen.push((node, written(&claim, &pod)?));
    }
    println!(
        "kube-scheduler: {:?}\nmcsched:        {:?}",
        seen[0], seen[1]
    );
    assert_eq!(seen[0].0, "n1", "kube-scheduler bound the pod elsewhere");
    assert_eq!(seen[0], seen[1], "the claims differ");
    let results = &seen[0].1["status"]["allocation"]["devices"]["results"];
    assert_eq!(
        results,
        &json!([{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]),
        "kube-scheduler's allocation is not the one this test means"
    );
    assert_eq!(seen[0].1["allocationTimestamp"], json!(true));

    // 2. A second pod for the one a100.
    for (cp, scheduler) in both {
        pod(&cp.client, scheduler, "second", None).await?;
    }
    pending_alike(&both, "second", &logs).await?;

    // 3. A pod whose named claim does not exist yet waits; created, it is allocated a t4.
    for (cp, scheduler) in both {
        pod(&cp.client, scheduler, "named", Some("shared-t4")).await?;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (cp, scheduler) in both {
        let p = get_pod(&cp.client, "named").await?;
        assert_eq!(
            node_of(&p),
            None,
            "{scheduler} bound a pod whose claim is missing"
        );
    }
    for (cp, _) in both {
        create::<ResourceClaim>(
            &cp.client,
            json!({"metadata": {"name": "shared-t4"},
                "spec": {"devices": {"requests": [{"name": "gpu",
                    "exactly": {"deviceClassName": DRIVER, "selectors": selector("t4")}}]}}}),
        )
        .await?;
    }
    for (cp, scheduler) in both {
        let node = bound_to(&cp.client, "named", &format!("{scheduler}: named bound"))
            .await
            .map_err(|e| e.context(logs()))?;
        assert_eq!(node, "n2", "{scheduler}");
    }

    // 4. The first pod goes, and its claim with it: the second gets the a100.
    for (cp, _) in both {
        let claim = claim_of(&cp.client, "trainer").await?;
        Api::<Pod>::namespaced(cp.client.clone(), "default")
            .delete("trainer", &DeleteParams::default().grace_period(0))
            .await?;
        let claims: Api<ResourceClaim> = Api::namespaced(cp.client.clone(), "default");
        let name = claim.metadata.name.clone().unwrap_or_default();
        wait::until(TIMEOUT, "trainer's claim gone", || async {
            let left = claims.list(&ListParams::default()).await?.items;
            Ok((!left
                .iter()
                .any(|c| c.metadata.name.as_deref() == Some(&name)))
            .then_some(()))
        })
        .await?;
    }
    for (cp, scheduler) in both {
        let node = bound_to(&cp.client, "second", &format!("{scheduler}: second bound"))
            .await
            .map_err(|e| e.context(logs()))?;
        assert_eq!(node, "n1", "{scheduler}");
    }

    // 5. A claim allocated where its pod may not run: deallocated by PostFilter.
    for (cp, scheduler) in both {
        nodes_with_devices(&cp.client, &[("n3", "h100"), ("n4", "h100")]).await?;
        allocated_on(&cp.client, "pinned", "h100", "n3").await?;
        pod_on(&cp.client, scheduler, "pinned", Some("pinned"), Some("n4")).await?;
    }
    let mut seen = Vec::new();
    for (cp, scheduler) in both {
        let node = bound_to(&cp.client, "pinned", &format!("{scheduler}: pinned bound"))
            .await
            .map_err(|e| e.context(logs()))?;
        let claim = Api::<ResourceClaim>::namespaced(cp.client.clone(), "default")
            .get("pinned")
            .await?;
        let pod = get_pod(&cp.client, "pinned").await?;
        seen.push((node, written(&claim, &pod)?));
    }
    println!(
        "pinned, kube-scheduler: {:?}\npinned, mcsched:        {:?}",
        seen[0], seen[1]
    );
    assert_eq!(seen[0].0, "n4", "kube-scheduler bound the pod elsewhere");
    assert_eq!(
        seen[0].1["status"]["allocation"]["devices"]["results"][0]["pool"],
        json!("n4"),
        "kube-scheduler did not allocate anew"
    );
    assert_eq!(seen[0], seen[1], "the claims differ");

    // 6. A DeviceTaintRule keeps n3's h100 from new claims until it goes.
    use k8s_openapi::api::resource::v1::DeviceTaintRule;
    for (cp, scheduler) in both {
        create_cluster_scoped::<DeviceTaintRule>(
            &cp.client,
            json!({"metadata": {"name": "n3-maintenance"},
                "spec": {"deviceSelector": {"driver": DRIVER, "pool": "n3"},
                    "taint": {"key": "example.com/maintenance", "effect": "NoSchedule"}}}),
        )
        .await?;
        create::<ResourceClaim>(
            &cp.client,
            json!({"metadata": {"name": "h100"},
                "spec": {"devices": {"requests": [{"name": "gpu",
                    "exactly": {"deviceClassName": DRIVER, "selectors": selector("h100")}}]}}}),
        )
        .await?;
        // Created once the rule is in the scheduler's view: kube-scheduler's tracker and
        // mcsched's watch each see it within a moment; a pod tried before would bind.
        tokio::time::sleep(Duration::from_secs(3)).await;
        pod(&cp.client, scheduler, "tainted", Some("h100")).await?;
    }
    pending_alike(&both, "tainted", &logs).await?;
    for (cp, _) in both {
        Api::<DeviceTaintRule>::all(cp.client.clone())
            .delete("n3-maintenance", &DeleteParams::default())
            .await?;
    }
    for (cp, scheduler) in both {
        let node = bound_to(
            &cp.client,
            "tainted",
            &format!("{scheduler}: tainted bound"),
        )
        .await
        .map_err(|e| e.context(logs()))?;
        assert_eq!(node, "n3", "{scheduler}");
    }

    // 7. An extended resource a DeviceClass serves, on nodes without it in allocatable.
    use k8s_openapi::api::resource::v1::DeviceClass;
    for (cp, scheduler) in both {
        nodes_with_devices(&cp.client, &[("n5", "l4")]).await?;
        create_cluster_scoped::<DeviceClass>(
            &cp.client,
            json!({"metadata": {"name": "l4"},
                "spec": {"extendedResourceName": "example.com/gpu", "selectors": selector("l4")}}),
        )
        .await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        create::<Pod>(
            &cp.client,
            json!({"metadata": {"name": "plain-gpu"},
                "spec": {"schedulerName": scheduler, "containers": [{"name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"limits": {"example.com/gpu": "1"}}}]}}),
        )
        .await?;
    }
    let mut seen = Vec::new();
    for (cp, scheduler) in both {
        let node = bound_to(
            &cp.client,
            "plain-gpu",
            &format!("{scheduler}: plain-gpu bound"),
        )
        .await
        .map_err(|e| e.context(logs()))?;
        let pod = get_pod(&cp.client, "plain-gpu").await?;
        let ext = wait::until(
            TIMEOUT,
            &format!("{scheduler}: plain-gpu's extendedResourceClaimStatus"),
            || async {
                let p = get_pod(&cp.client, "plain-gpu").await?;
                Ok(p.status.and_then(|s| s.extended_resource_claim_status))
            },
        )
        .await?;
        let claim = Api::<ResourceClaim>::namespaced(cp.client.clone(), "default")
            .get(&ext.resource_claim_name)
            .await?;
        anyhow::ensure!(
            ext.resource_claim_name
                .starts_with("plain-gpu-extended-resources-"),
            "{scheduler}: claim {}",
            ext.resource_claim_name
        );
        let owners: Vec<(String, Option<bool>)> = (claim.metadata.owner_references.iter())
            .flatten()
            .map(|r| (r.name.clone(), r.controller))
            .collect();
        seen.push((
            node,
            written(&claim, &pod)?,
            serde_json::to_value(&claim.spec)?,
            claim.metadata.annotations.clone(),
            owners,
            serde_json::to_value(&ext.request_mappings)?,
        ));
    }
    println!(
        "plain-gpu, kube-scheduler: {:?}\nplain-gpu, mcsched:        {:?}",
        seen[0], seen[1]
    );
    assert_eq!(seen[0].0, "n5", "kube-scheduler bound the pod elsewhere");
    assert_eq!(
        seen[0].1["status"]["allocation"]["devices"]["results"][0]["pool"],
        json!("n5"),
        "kube-scheduler's allocation is not the one this test means"
    );
    assert_eq!(seen[0], seen[1], "the extended-resource claims differ");
    Ok(())
}

/// Pod `name` Pending in both clusters for want of a device: its PodScheduled False with
/// kube-scheduler's "cannot allocate all claims", and the same condition in mcsched's. A
/// pod seen bound fails at once.
async fn pending_alike(
    both: &[(&ControlPlane, &str); 2],
    name: &str,
    logs: &impl Fn() -> String,
) -> anyhow::Result<()> {
    let mut pending = Vec::new();
    for (cp, scheduler) in both {
        let seen = wait::until(
            TIMEOUT,
            &format!("{scheduler}: {name} unschedulable"),
            || async {
                let p = get_pod(&cp.client, name).await?;
                Ok(match node_of(&p) {
                    Some(node) => Some(Err(node)),
                    None => scheduled_condition(&p).filter(|c| c.0 == "False").map(Ok),
                })
            },
        )
        .await
        .map_err(|e| e.context(logs()))?;
        match seen {
            Ok(c) => pending.push(c),
            Err(node) => anyhow::bail!("{scheduler} bound {name} to {node}\n{}", logs()),
        }
    }
    println!(
        "{name}, kube-scheduler: {:?}\n{name}, mcsched:        {:?}",
        pending[0], pending[1]
    );
    anyhow::ensure!(
        pending[0].2.contains("cannot allocate all claims"),
        "kube-scheduler's reason is not the device: {:?}",
        pending[0]
    );
    anyhow::ensure!(pending[0] == pending[1], "the conditions differ");
    Ok(())
}

/// Claim `name` asking for one `model` device, allocated on `node`'s `gpu-0` and reserved
/// for nobody, as an earlier allocation whose pod never came would leave it.
async fn allocated_on(client: &Client, name: &str, model: &str, node: &str) -> anyhow::Result<()> {
    create::<ResourceClaim>(
        client,
        json!({"metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu",
                "exactly": {"deviceClassName": DRIVER, "selectors": selector(model)}}]}}}),
    )
    .await?;
    let api: Api<ResourceClaim> = Api::namespaced(client.clone(), "default");
    let mut claim = api.get(name).await?;
    claim.status = Some(serde_json::from_value(json!({"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": node, "device": "gpu-0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}
    }}))?);
    api.replace_status(name, &PostParams::default(), &claim)
        .await?;
    Ok(())
}
