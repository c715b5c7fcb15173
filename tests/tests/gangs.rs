//! Gangs (PodGroups with a gang policy), end to end on control planes with the
//! GenericWorkload, TopologyAwareWorkloadScheduling and WorkloadWithJob gates on: a host
//! and a leaf joined the way `join` leaves them, and the agent.
//!
//! - A gang of 8 (minCount 8) on a host whose node fits 6 and a leaf whose node fits 4:
//!   while only 7 members exist none is bound; the 8th brings the whole gang in, split
//!   between host and leaf, never 6 alone, and its leaf members' copies are made.
//! - Two gangs of 4 that each fit alone on the host's remaining room but not together: one
//!   is bound whole, the other not at all, its PodGroup `PodGroupInitiallyScheduled=False` and its
//!   members' FailedScheduling event kube's message.
//! - A gang of 4 split between the host and a leaf whose copies stay Pending (it has no
//!   scheduler): the leaf's members are taken back, and the host's go with them; under a
//!   PodDisruptionBudget that keeps the host's two, they are evicted only once it allows
//!   (refused, said in an event, tried again; evicted once the budget is gone).
//! - A Job of 8 (Indexed, parallelism 8), whose gang of minCount 8 (asked for in its
//!   `spec.scheduling`) kube-controller-manager makes (WorkloadWithJob), on the same host
//!   and leaf: 6 on the host and 2 in the leaf
//!   under a PlacementPolicy that puts the host first, 4 and 4 under one that puts the
//!   leaf first.
//! - A PlacementPolicy keeping the gangs it selects in one cluster (`podGroupConstraints`),
//!   without the TopologyAwareWorkloadScheduling gate: a Job of 8 that would fit split
//!   (host 4, leaf 6) is not placed at all, with kube's placement message; a Job of 6 whose
//!   policy puts the host first goes whole to the leaf.
//! - A gang of 4 kept in one zone, on a host of zone c (room for 2) and a leaf with zones
//!   a (room for 2) and b (room for 4): bound to the leaf whole, held to zone b there (the
//!   leaf domain annotation), and the leaf's scheduler puts every copy in zone b.
//! - A gang of 6 that asks to stay in one cluster (`topology: [{key: mcsched.io/cluster}]`)
//!   and prefers the host, whose node fits 4: all 6 go to the leaf, none split off.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use kube::Api;
use kube::api::{ListParams, PostParams};
use mcsched_e2e::placement::agent_with_policies;
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions, objects, wait};
use mcsched_shared::keys;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);
const GATES: &str = "--feature-gates=GenericWorkload=true,\
    TopologyAwareWorkloadScheduling=true,WorkloadWithJob=true";

async fn start(name: &str) -> anyhow::Result<ControlPlane> {
    ControlPlane::start_with_args(name, ControlPlaneOptions::full(), &[GATES]).await
}

/// A host whose one node `host-a` has `host_cpu` CPUs and a leaf `east` whose one node
/// `leaf-1` has `leaf_cpu`, joined the way `join` leaves them.
async fn host_and_leaf(
    host_name: &str,
    leaf_name: &str,
    host_cpu: u32,
    leaf_cpu: u32,
) -> anyhow::Result<(ControlPlane, ControlPlane)> {
    let (host, leaf) = tokio::try_join!(start(host_name), start(leaf_name))?;
    for (cp, node, cpu) in [(&host, "host-a", host_cpu), (&leaf, "leaf-1", leaf_cpu)] {
        mcsched_e2e::objects::ready_node(
            &cp.client,
            node,
            &cpu.to_string(),
            "16Gi",
            json!({"kubernetes.io/hostname": node}),
        )
        .await?;
    }
    mcsched_e2e::objects::join_as_join_does(&host.client, &leaf, "east", json!({})).await?;
    Ok((host, leaf))
}

async fn pod_group(client: &kube::Client, name: &str, min_count: i32) -> anyhow::Result<()> {
    pod_group_with(client, name, min_count, json!(null)).await
}

async fn pod_group_with(
    client: &kube::Client,
    name: &str,
    min_count: i32,
    constraints: serde_json::Value,
) -> anyhow::Result<()> {
    let group: PodGroup = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}},
                 "schedulingConstraints": constraints}
    }))?;
    Api::<PodGroup>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &group)
        .await?;
    Ok(())
}

/// A member of `group` asking for 1 CPU, allowed on virtual nodes.
async fn member(pods: &Api<Pod>, name: &str, group: &str) -> anyhow::Result<()> {
    member_with(pods, name, group, json!(null)).await
}

async fn member_with(
    pods: &Api<Pod>,
    name: &str,
    group: &str,
    affinity: serde_json::Value,
) -> anyhow::Result<()> {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"gang": group}},
        "spec": {
            "schedulerName": "mcsched",
            "schedulingGroup": {"podGroupName": group},
            "affinity": affinity,
            "tolerations": [{"key": keys::LEAF_TAINT, "operator": "Exists"}],
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "1"}}}]
        }
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    Ok(())
}

/// Node affinity preferring the host's node `host-a`.
fn prefer_host() -> serde_json::Value {
    json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": {"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["host-a"]}]}}]}})
}

/// The node of every pod of `group` that is bound.
async fn placements(pods: &Api<Pod>, group: &str) -> anyhow::Result<BTreeMap<String, String>> {
    Ok(pods
        .list(&ListParams::default().labels(&format!("gang={group}")))
        .await?
        .items
        .into_iter()
        .filter_map(|p| {
            let node = p.spec.as_ref()?.node_name.clone()?;
            Some((p.metadata.name?, node))
        })
        .collect())
}

async fn all_bound(
    pods: &Api<Pod>,
    group: &str,
    count: usize,
    agent: &Agent,
) -> anyhow::Result<BTreeMap<String, String>> {
    wait::until(
        TIMEOUT,
        &format!("the {count} pods of {group} bound"),
        || async {
            let p = placements(pods, group).await?;
            Ok((p.len() == count).then_some(p))
        },
    )
    .await
    .map_err(|e| e.context(agent.logs()))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gang_is_placed_whole_across_host_and_leaf_or_not_at_all() -> anyhow::Result<()> {
    let (host, leaf) = host_and_leaf("gang-host", "gang-leaf", 6, 4).await?;
    let agent = agent_with_policies(&host, &["mcsched-east"], TIMEOUT).await?;
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");

    // 8 of 1 CPU: 6 fit on the host, 4 in the leaf.
    pod_group(&host.client, "train", 8).await?;
    for i in 0..7 {
        member(&pods, &format!("train-{i}"), "train").await?;
    }
    // A pod of no gang, created after the 7, is bound: the agent has seen them all.
    let loner: Pod = serde_json::from_value(json!({
        "metadata": {"name": "loner"},
        "spec": {"schedulerName": "mcsched", "nodeName": null,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
    }))?;
    pods.create(&PostParams::default(), &loner).await?;
    wait::until(TIMEOUT, "loner bound", || async {
        Ok(pods
            .get("loner")
            .await?
            .spec
            .and_then(|s| s.node_name)
            .map(|_| ()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    assert_eq!(
        placements(&pods, "train").await?,
        BTreeMap::new(),
        "7 members of a gang of minCount 8: none may be bound"
    );
    pods.delete("loner", &Default::default()).await?;

    member(&pods, "train-7", "train").await?;
    let placed = all_bound(&pods, "train", 8, &agent).await?;
    let on_host = placed.values().filter(|n| *n == "host-a").count();
    let on_leaf = placed
        .values()
        .filter(|n| *n == &format!("{}east", keys::VIRTUAL_NODE_PREFIX))
        .count();
    assert_eq!(on_host + on_leaf, 8, "{placed:?}");
    assert!(on_host <= 6 && on_leaf <= 4, "{placed:?}");
    // The gang bound whole, its leaf members' copies are made.
    let leaf_pods: Api<Pod> = Api::namespaced(leaf.client.clone(), "default");
    wait::until(TIMEOUT, "the leaf members' copies", || async {
        let copies = leaf_pods
            .list(&ListParams::default().labels("gang=train"))
            .await?
            .items
            .len();
        Ok((copies == on_leaf).then_some(()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;

    let groups: Api<PodGroup> = Api::namespaced(host.client.clone(), "default");
    wait::until(TIMEOUT, "train PodGroupInitiallyScheduled=True", || async {
        let g = groups.get("train").await?;
        let scheduled = g
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "PodGroupInitiallyScheduled");
        Ok(scheduled.filter(|c| c.status == "True").map(|_| ()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    Ok(())
}

/// Deletes Job `name` and waits until its pods are gone: room for the next one.
async fn delete_job(jobs: &Api<Job>, pods: &Api<Pod>, name: &str) -> anyhow::Result<()> {
    jobs.delete(name, &kube::api::DeleteParams::background())
        .await?;
    wait::until(TIMEOUT, &format!("{name}'s pods gone"), || async {
        let left = pods
            .list(&ListParams::default().labels(&format!("gang={name}")))
            .await?;
        Ok(left.items.is_empty().then_some(()))
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_of_8_is_placed_6_and_2_or_4_and_4_as_its_placement_policy_says() -> anyhow::Result<()>
{
    let (host, _leaf) = host_and_leaf("gang-job-host", "gang-job-leaf", 6, 4).await?;
    let agent = agent_with_policies(&host, &["mcsched-east"], TIMEOUT).await?;
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    let jobs: Api<Job> = Api::namespaced(host.client.clone(), "default");
    let groups: Api<PodGroup> = Api::namespaced(host.client.clone(), "default");
    let east = format!("{}east", keys::VIRTUAL_NODE_PREFIX);

    for (name, first, then, want_host, want_leaf) in [
        ("host-first", "host", "east", 6, 2),
        ("leaf-first", "east", "host", 4, 4),
    ] {
        mcsched_e2e::placement::policy(
            &host.client,
            name,
            json!({"podSelector": {"matchLabels": {"gang": name}},
                   "clusterGroups": [{"name": "first", "clusterNames": [first]},
                                     {"name": "then", "clusterNames": [then]}]}),
        )
        .await?;
        objects::gang_job(&host.client, name, 8).await?;
        let placed = all_bound(&pods, name, 8, &agent).await?;
        let on_host = placed.values().filter(|n| *n == "host-a").count();
        let on_leaf = placed.values().filter(|n| **n == east).count();
        assert_eq!(
            (on_host, on_leaf),
            (want_host, want_leaf),
            "{name}: {placed:?}"
        );

        // The pods were the gang kube-controller-manager made for the Job: one PodGroup,
        // minCount 8, Scheduled.
        let pod = pods
            .list(&ListParams::default().labels(&format!("gang={name}")))
            .await?
            .items
            .into_iter()
            .next()
            .ok_or_else(|| anyhow::anyhow!("no pod of {name}"))?;
        let group = (pod.spec.and_then(|s| s.scheduling_group))
            .and_then(|g| g.pod_group_name)
            .ok_or_else(|| anyhow::anyhow!("{name}'s pods are in no PodGroup"))?;
        let g = groups.get(&group).await?;
        assert_eq!(
            g.spec.scheduling_policy.gang.map(|gang| gang.min_count),
            Some(8),
            "{group}"
        );
        // The condition is written once the members are on their way to binding: it may
        // land just after the last binding.
        let scheduled = wait::until(TIMEOUT, "the PodGroup's condition", || async {
            let g = groups.get(&group).await?;
            Ok((g.status.and_then(|s| s.conditions).unwrap_or_default())
                .into_iter()
                .find(|c| c.type_ == "PodGroupInitiallyScheduled")
                .map(|c| c.status))
        })
        .await?;
        assert_eq!(scheduled, "True", "{group}");

        // Room for the next Job.
        delete_job(&jobs, &pods, name).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_placement_policy_keeps_the_gangs_it_selects_in_one_cluster() -> anyhow::Result<()> {
    let (host, _leaf) = host_and_leaf("kept-host", "kept-leaf", 4, 6).await?;
    // Without the TopologyAwareWorkloadScheduling gate: the policy needs none.
    let agent = agent_with_policies(&host, &["mcsched-east"], TIMEOUT).await?;
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    let jobs: Api<Job> = Api::namespaced(host.client.clone(), "default");
    let groups: Api<PodGroup> = Api::namespaced(host.client.clone(), "default");
    mcsched_e2e::placement::policy(
        &host.client,
        "kept",
        json!({"podSelector": {"matchExpressions": [
                   {"key": "gang", "operator": "In", "values": ["kept-8", "kept-6"]}]},
               "clusterGroups": [{"name": "first", "clusterNames": ["host"]},
                                 {"name": "then", "clusterNames": ["east"]}],
               "podGroupConstraints": {"topology": [{"key": keys::CLUSTER_LABEL}]}}),
    )
    .await?;

    // The leaf's grant of namespace default is asked once, on the first pod that could go
    // there; until it answers the leaf is no place for anyone ("asking leaf cluster east
    // ..."). A pod bound there first makes the group's first condition the one about room.
    let warm: Pod = serde_json::from_value(json!({
        "metadata": {"name": "warm-up"},
        "spec": {
            "schedulerName": "mcsched",
            "nodeSelector": {"kubernetes.io/hostname": format!("{}east", keys::VIRTUAL_NODE_PREFIX)},
            "tolerations": [{"key": keys::LEAF_TAINT, "operator": "Exists"}],
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
        }
    }))?;
    pods.create(&PostParams::default(), &warm).await?;
    wait::until(TIMEOUT, "the warm-up pod bound to the leaf", || async {
        let p = pods.get("warm-up").await?;
        Ok(p.spec.and_then(|s| s.node_name))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    pods.delete("warm-up", &Default::default()).await?;

    // 8 fit split (4 + 4) but in no one cluster: none is bound, the group says why.
    objects::gang_job(&host.client, "kept-8", 8).await?;
    let message = wait::until(
        TIMEOUT,
        "kept-8's PodGroupInitiallyScheduled=False",
        || async {
            for g in groups.list(&ListParams::default()).await?.items {
                let condition = (g.status.and_then(|s| s.conditions).unwrap_or_default())
                    .into_iter()
                    .find(|c| c.type_ == "PodGroupInitiallyScheduled" && c.status == "False");
                if g.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("kept-8"))
                    && let Some(c) = condition
                {
                    return Ok(Some(c.message));
                }
            }
            Ok(None)
        },
    )
    .await
    .map_err(|e| e.context(agent.logs()))?;
    // v1.37: east (the first domain by name) holds 6 of the 8, the 7th does not fit, and
    // minCount is out of reach; nothing of lower priority to preempt.
    assert_eq!(
        message,
        "pod group is unschedulable, 0/2 placements are available, first placement status: \
         minCount (8) cannot be satisfied: 6 scheduled, 1 remaining, pod group preemption: No \
         preemption victims found for incoming preemptor"
    );
    assert_eq!(placements(&pods, "kept-8").await?, BTreeMap::new());
    delete_job(&jobs, &pods, "kept-8").await?;

    // 6, the host first: split, 4 would go there; kept together, all 6 go to the leaf.
    objects::gang_job(&host.client, "kept-6", 6).await?;
    let placed = all_bound(&pods, "kept-6", 6, &agent).await?;
    let leaf_node = format!("{}east", keys::VIRTUAL_NODE_PREFIX);
    assert!(placed.values().all(|n| *n == leaf_node), "{placed:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn of_two_gangs_that_fit_only_alone_one_runs_whole_and_the_other_waits_whole()
-> anyhow::Result<()> {
    let host = start("gangs-two").await?;
    mcsched_e2e::objects::ready_node(
        &host.client,
        "host-a",
        "6",
        "16Gi",
        json!({"kubernetes.io/hostname": "host-a"}),
    )
    .await?;
    // With its API published: `explain podgroup` reads the members' explanations.
    let agent = mcsched_e2e::api::start_agent(&host, "mcsched", "gangs-two", &[]).await?;
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    pod_group(&host.client, "a", 4).await?;
    pod_group(&host.client, "b", 4).await?;
    // Interleaved, so that neither gang is complete before the other starts.
    for i in 0..4 {
        member(&pods, &format!("a-{i}"), "a").await?;
        member(&pods, &format!("b-{i}"), "b").await?;
    }
    let groups: Api<PodGroup> = Api::namespaced(host.client.clone(), "default");
    let condition = |name: &'static str| {
        let groups = groups.clone();
        async move {
            let g = groups.get(name).await?;
            Ok::<_, anyhow::Error>(
                g.status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .into_iter()
                    .find(|c| c.type_ == "PodGroupInitiallyScheduled"),
            )
        }
    };
    // One gang scheduled, the other found unschedulable as a whole.
    let (winner, loser) = wait::until(TIMEOUT, "one gang scheduled, one not", || async {
        let (a, b) = (condition("a").await?, condition("b").await?);
        let status = |c: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>| {
            c.as_ref().map(|c| c.status.clone())
        };
        Ok(match (status(&a).as_deref(), status(&b).as_deref()) {
            (Some("True"), Some("False")) => Some(("a", "b")),
            (Some("False"), Some("True")) => Some(("b", "a")),
            _ => None,
        })
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    all_bound(&pods, winner, 4, &agent).await?;
    assert_eq!(
        placements(&pods, loser).await?,
        BTreeMap::new(),
        "gang {loser} is not bound in part"
    );
    // v1.37 (over every node, the agent without TopologyAwareWorkloadScheduling): two of
    // the loser's fit, the third does not, and minCount is out of reach.
    let lost_status = "minCount (4) cannot be satisfied: 2 scheduled, 1 remaining";
    let lost = condition(loser).await?;
    assert_eq!(
        lost.as_ref()
            .map(|c| (c.reason.as_str(), c.message.as_str())),
        Some((
            "Unschedulable",
            format!(
                "{lost_status}, pod group preemption: No preemption victims found for incoming \
                 preemptor"
            )
            .as_str()
        )),
        "{lost:?}"
    );
    let events: Api<Event> = Api::namespaced(host.client.clone(), "default");
    let prefix = format!("{loser}-");
    let messages: Vec<String> = events
        .list(&ListParams::default().fields("reason=FailedScheduling"))
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .filter_map(|e| e.message)
        .collect();
    assert!(
        messages
            .iter()
            .any(|m| m.starts_with("pod group is unschedulable")),
        "{messages:?}"
    );

    // `explain podgroup`: the winner whole on the host, the loser's members each waiting.
    let out = mcsched_e2e::cli::run(&host.kubeconfig, &["explain", "podgroup", winner])?;
    let shown = mcsched_e2e::cli::text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains(&format!(
            "PODGROUP default/{winner}  POLICY gang (minCount 4)"
        )) && shown.contains("PodGroupInitiallyScheduled: True (Scheduled)")
            && shown.contains("members: 4 (4 bound: 4 in the host, 0 in leaves)"),
        "{shown}"
    );
    let out = mcsched_e2e::cli::run(&host.kubeconfig, &["explain", "podgroup", loser])?;
    let shown = mcsched_e2e::cli::text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains(&format!(
            "PodGroupInitiallyScheduled: False (Unschedulable): {lost_status}"
        )) && shown.contains("members: 4 (0 bound"),
        "{shown}"
    );
    let waiting = shown
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter(|l| l.contains(&format!("pod group is unschedulable, {lost_status}")))
        .count();
    assert!(
        waiting >= 1,
        "members that fit wait for their gang: {shown}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gang_kept_in_one_cluster_is_not_split_between_host_and_leaf() -> anyhow::Result<()> {
    let (host, _leaf) = host_and_leaf("together-host", "together-leaf", 4, 6).await?;
    // The agent follows kube-scheduler's TopologyAwareWorkloadScheduling gate.
    let agent = Agent::start_with(
        &host.kubeconfig,
        "mcsched",
        host.dir(),
        "together",
        &["--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true"],
    )?;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(host.client.clone());
    mcsched_e2e::objects::wait_ready(&nodes, "mcsched-east", "True", TIMEOUT)
        .await
        .map_err(|e| e.context(agent.logs()))?;
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    pod_group_with(
        &host.client,
        "together",
        6,
        json!({"topology": [{"key": keys::CLUSTER_LABEL}]}),
    )
    .await?;
    // Each member prefers the host: split, 4 would go there.
    for i in 0..6 {
        member_with(&pods, &format!("together-{i}"), "together", prefer_host()).await?;
    }
    let placed = all_bound(&pods, "together", 6, &agent).await?;
    let leaf_node = format!("{}east", keys::VIRTUAL_NODE_PREFIX);
    assert!(placed.values().all(|n| *n == leaf_node), "{placed:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gang_kept_in_one_zone_stays_in_one_zone_of_a_leaf() -> anyhow::Result<()> {
    let zone = keys::ZONE_LABEL;
    let (host, leaf) = tokio::try_join!(start("zoned-host"), start("zoned-leaf"))?;
    let node = |client: &kube::Client, name: &'static str, z: &'static str| {
        let client = client.clone();
        async move {
            mcsched_e2e::objects::ready_node(
                &client,
                name,
                "2",
                "16Gi",
                json!({"kubernetes.io/hostname": name, zone: z}),
            )
            .await
        }
    };
    node(&host.client, "host-c", "c").await?;
    node(&leaf.client, "leaf-a1", "a").await?;
    node(&leaf.client, "leaf-b1", "b").await?;
    node(&leaf.client, "leaf-b2", "b").await?;
    mcsched_e2e::objects::join_as_join_does(&host.client, &leaf, "east", json!({})).await?;
    let agent = Agent::start_with(
        &host.kubeconfig,
        "mcsched",
        host.dir(),
        "zoned",
        &["--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true"],
    )?;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(host.client.clone());
    mcsched_e2e::objects::wait_ready(&nodes, "mcsched-east", "True", TIMEOUT)
        .await
        .map_err(|e| e.context(agent.logs()))?;
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    // 4 of 1 CPU in one zone: zone c (the host) fits 2, the leaf's zone a 2, its zone b 4.
    pod_group_with(
        &host.client,
        "zoned",
        4,
        json!({"topology": [{"key": zone}]}),
    )
    .await?;
    for i in 0..4 {
        member(&pods, &format!("zoned-{i}"), "zoned").await?;
    }
    let placed = all_bound(&pods, "zoned", 4, &agent).await?;
    let leaf_node = format!("{}east", keys::VIRTUAL_NODE_PREFIX);
    assert!(placed.values().all(|n| *n == leaf_node), "{placed:?}");
    for name in placed.keys() {
        let annotations = pods
            .get(name)
            .await?
            .metadata
            .annotations
            .unwrap_or_default();
        assert_eq!(
            annotations
                .get(keys::LEAF_DOMAIN_ANNOTATION)
                .map(String::as_str),
            Some(r#"{"topology.kubernetes.io/zone":"b"}"#),
            "{name}"
        );
    }
    // `explain podgroup` names the domain, read from the members held to it.
    let out = mcsched_e2e::cli::run(&host.kubeconfig, &["explain", "podgroup", "zoned"])?;
    let shown = mcsched_e2e::cli::text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains("members: 4 (4 bound: 0 in the host, 4 in leaves); domain b"),
        "{shown}"
    );
    // The leaf's scheduler keeps the copies in zone b.
    let leaf_pods: Api<Pod> = Api::namespaced(leaf.client.clone(), "default");
    let copies = wait::until(TIMEOUT, "the 4 copies placed in the leaf", || async {
        let nodes: Vec<String> = (leaf_pods.list(&ListParams::default().labels("gang=zoned")))
            .await?
            .items
            .into_iter()
            .filter_map(|p| p.spec?.node_name)
            .collect();
        Ok((nodes.len() == 4).then_some(nodes))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    assert!(copies.iter().all(|n| n.starts_with("leaf-b")), "{copies:?}");
    Ok(())
}

/// A host (one 2-CPU node) and leaf `west` (one 8-CPU node) joined, whose scheduler
/// never runs: copies sent there stay Pending.
async fn host_and_a_leaf_that_schedules_nothing(
    prefix: &str,
) -> anyhow::Result<(ControlPlane, ControlPlane)> {
    let no_scheduler = ControlPlaneOptions {
        with_controller_manager: true,
        with_scheduler: false,
        simulate_kubelets: true,
    };
    let (host_name, leaf_name) = (format!("{prefix}-host"), format!("{prefix}-leaf"));
    let (host, leaf) = tokio::try_join!(
        start(&host_name),
        ControlPlane::start_with_args(&leaf_name, no_scheduler, &[GATES])
    )?;
    for (cp, node, cpu) in [(&host, "host-a", "2"), (&leaf, "leaf-1", "8")] {
        mcsched_e2e::objects::ready_node(
            &cp.client,
            node,
            cpu,
            "16Gi",
            json!({"kubernetes.io/hostname": node}),
        )
        .await?;
    }
    mcsched_e2e::objects::join_as_join_does(&host.client, &leaf, "west", json!({})).await?;
    Ok((host, leaf))
}

/// The agent, taking a copy back after 5 s Pending, once west's virtual node is Ready.
async fn taking_back_after_5s(host: &ControlPlane, name: &str) -> anyhow::Result<Agent> {
    let agent = Agent::start_with(
        &host.kubeconfig,
        "mcsched",
        host.dir(),
        name,
        &["--leaf-pending-timeout=5"],
    )?;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(host.client.clone());
    mcsched_e2e::objects::wait_ready(&nodes, "mcsched-west", "True", TIMEOUT)
        .await
        .map_err(|e| e.context(agent.logs()))?;
    Ok(agent)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_member_a_leaf_gives_back_takes_its_whole_gang_back() -> anyhow::Result<()> {
    let (host, _leaf) = host_and_a_leaf_that_schedules_nothing("back").await?;
    let agent = taking_back_after_5s(&host, "gang-back").await?;
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    pod_group(&host.client, "back", 4).await?;
    // Preferring the host, whose node fits 2: split 2 and 2.
    for i in 0..4 {
        member_with(&pods, &format!("back-{i}"), "back", prefer_host()).await?;
    }
    let placed = all_bound(&pods, "back", 4, &agent).await?;
    let on_host: Vec<String> = placed
        .iter()
        .filter(|(_, n)| *n == "host-a")
        .map(|(p, _)| p.clone())
        .collect();
    assert_eq!(on_host.len(), 2, "{placed:?}");
    // The leaf's copies stay Pending: taken back, and the host's members with them.
    wait::until(TIMEOUT, "the whole gang taken back", || async {
        Ok(placements(&pods, "back").await?.is_empty().then_some(()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(host.client.clone(), "default");
    for name in &on_host {
        let notes: Vec<String> = events
            .list(&ListParams::default().fields(&format!("regarding.name={name}")))
            .await?
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("GangTakenBack"))
            .filter_map(|e| e.note)
            .collect();
        assert!(
            notes
                .iter()
                .any(|n| n.contains("the whole gang is taken back")),
            "{name}: {notes:?}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gang_taken_back_is_evicted_as_its_disruption_budget_allows() -> anyhow::Result<()> {
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    let (host, _leaf) = host_and_a_leaf_that_schedules_nothing("budget").await?;
    // The gang's two members on the host, once running, are all the budget lets go of.
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(host.client.clone(), "default");
    let budget: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "kept"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"gang": "kept"}}}
    }))?;
    budgets.create(&PostParams::default(), &budget).await?;
    let agent = taking_back_after_5s(&host, "gang-budget").await?;
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    pod_group(&host.client, "kept", 4).await?;
    for i in 0..4 {
        member_with(&pods, &format!("kept-{i}"), "kept", prefer_host()).await?;
    }
    let placed = all_bound(&pods, "kept", 4, &agent).await?;
    let on_host: BTreeMap<String, String> = placed
        .iter()
        .filter(|(_, n)| *n == "host-a")
        .map(|(p, n)| (p.clone(), n.clone()))
        .collect();
    assert_eq!(on_host.len(), 2, "{placed:?}");
    let uids = |list: Vec<Pod>| -> BTreeMap<String, String> {
        list.into_iter()
            .filter_map(|p| Some((p.metadata.name?, p.metadata.uid?)))
            .collect()
    };
    let host_uids = uids(
        pods.list(&ListParams::default().labels("gang=kept"))
            .await?
            .items
            .into_iter()
            .filter(|p| on_host.contains_key(p.metadata.name.as_deref().unwrap_or_default()))
            .collect(),
    );
    // The leaf's members go (a Pending pod is evicted whatever a budget says); the
    // host's, running, are refused by the budget and stay, and their events say so.
    wait::until(TIMEOUT, "the leaf's members taken back", || async {
        let p = placements(&pods, "kept").await?;
        Ok((!p.values().any(|n| n == "mcsched-west")).then_some(()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let live = || async {
        anyhow::Ok(uids(
            pods.list(&ListParams::default().labels("gang=kept"))
                .await?
                .items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect(),
        ))
    };
    // The host's members were tried in the same pass as the leaf's.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        live().await?,
        host_uids,
        "the budget keeps the host's members: {}",
        agent.logs()
    );
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(host.client.clone(), "default");
    for name in on_host.keys() {
        let note = wait::until(
            TIMEOUT,
            &format!("{name}'s eviction refused, said"),
            || async {
                Ok(events
                    .list(&ListParams::default().fields(&format!("regarding.name={name}")))
                    .await?
                    .items
                    .into_iter()
                    .filter(|e| e.reason.as_deref() == Some("GangTakeBackRefused"))
                    .find_map(|e| e.note))
            },
        )
        .await
        .map_err(|e| e.context(agent.logs()))?;
        assert!(
            note.contains("disruption budget") && note.contains("tried again every 10s"),
            "{name}: {note}"
        );
    }
    // Tried again (every 10 s), still refused: the same pods stay.
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(live().await?, host_uids, "{}", agent.logs());
    // The budget gone, the next try evicts them.
    budgets
        .delete("kept", &kube::api::DeleteParams::default())
        .await?;
    wait::until(TIMEOUT, "the host's members evicted", || async {
        Ok(placements(&pods, "kept").await?.is_empty().then_some(()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    Ok(())
}
