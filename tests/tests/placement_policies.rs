//! Placement policies against real API servers: a host (region ap) and two leaves (east:
//! region us, west: region eu), joined the way `join` leaves them, the policy CRDs as
//! `install` renders them, and one agent with the default profile. Each workload gets its
//! own policy: weights 2:1 and 1:3 for two Deployments in one namespace, a cluster
//! excluded, at most two regions, ordered cluster groups; invalid policies are refused by
//! the API server or reported with the field; `explain`, the policies' status and `get
//! policies` say what applied.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use mcsched_e2e::placement::{agent_with_policies, explain_first, placed, policy, replica_set};
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions, wait};
use mcsched_shared::keys;
use mcsched_shared::policy::PlacementPolicy;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(120);

/// A Deployment of `replicas` pods of app `name` for profile mcsched.
async fn deployment(client: &Client, name: &str, replicas: usize, cpu: &str) -> anyhow::Result<()> {
    let d: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {
                "schedulerName": "mcsched",
                "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}]}}}
    }))?;
    Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &d)
        .await?;
    Ok(())
}

/// The PodScheduled=False message of app `app`'s (first) pod, once it has one.
async fn unschedulable(pods: &Api<Pod>, app: &str, agent: &Agent) -> anyhow::Result<String> {
    wait::until(TIMEOUT, &format!("{app}'s pod unschedulable"), || async {
        let list = pods
            .list(&ListParams::default().labels(&format!("app={app}")))
            .await?;
        Ok(list
            .items
            .into_iter()
            .next()
            .and_then(|p| p.status)
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
            .and_then(|c| c.message))
    })
    .await
    .map_err(|e| e.context(agent.logs()))
}

fn within_one(got: &BTreeMap<String, usize>, want: &[(&str, usize)]) -> bool {
    want.iter()
        .all(|(c, n)| got.get(*c).copied().unwrap_or(0).abs_diff(*n) <= 1)
        && got.keys().all(|c| want.iter().any(|(w, _)| w == c))
}

#[tokio::test(flavor = "multi_thread")]
async fn placement_policies_per_workload() -> anyhow::Result<()> {
    let cps = ControlPlane::start_many(
        &["pp-host", "pp-east", "pp-west"],
        ControlPlaneOptions::full(),
    )
    .await?;
    let [host, east, west]: [ControlPlane; 3] = cps
        .try_into()
        .map_err(|_| anyhow::anyhow!("expected three control planes"))?;
    for (cp, name, region) in [
        (&host, "host-a", "ap"),
        (&east, "east-1", "us"),
        (&west, "west-1", "eu"),
    ] {
        mcsched_e2e::objects::ready_node(
            &cp.client,
            name,
            "16",
            "64Gi",
            json!({"kubernetes.io/hostname": name, keys::REGION_LABEL: region}),
        )
        .await?;
    }
    mcsched_e2e::objects::join_as_join_does(
        &host.client,
        &east,
        "east",
        json!({keys::REGION_LABEL: "us"}),
    )
    .await?;
    mcsched_e2e::objects::join_as_join_does(
        &host.client,
        &west,
        "west",
        json!({keys::REGION_LABEL: "eu"}),
    )
    .await?;
    let mut agent = agent_with_policies(&host, &["mcsched-east", "mcsched-west"], TIMEOUT).await?;
    let nodes: Api<Node> = Api::all(host.client.clone());
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");

    // Invalid policies: the schema refuses a negative weight and (kubectl's strict field
    // validation) an unknown field, naming them; what only the agent can judge is a
    // status condition naming the field, and its pods stay Pending with it.
    let negative = policy(
        &host.client,
        "negative",
        json!({"podSelector": {}, "division": {"type": "Weighted", "weights": {"east": -1}}}),
    )
    .await;
    let refused = negative.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        refused.contains("spec.division.weights.east")
            && refused.contains("greater than or equal to 0"),
        "{refused}"
    );
    let unknown = std::process::Command::new("kubectl")
        .arg(format!("--kubeconfig={}", host.kubeconfig.display()))
        .args(["apply", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            if let Some(mut stdin) = c.stdin.take() {
                stdin.write_all(b"apiVersion: policy.mcsched.io/v1alpha1\nkind: PlacementPolicy\nmetadata: {name: typo, namespace: default}\nspec: {podSelector: {}, clusterAfinity: {}}\n")?;
            }
            c.wait_with_output()
        })?;
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        !unknown.status.success() && stderr.contains("unknown field \"spec.clusterAfinity\""),
        "{stderr}"
    );
    policy(
        &host.client,
        "bad",
        json!({"podSelector": {"matchLabels": {"app": "bad"}},
        "spread": [{"by": "region", "minGroups": 3, "maxGroups": 2}]}),
    )
    .await?;
    replica_set(&host.client, "bad", 1, "100m").await?;

    // Weights per workload: 2:1 and 1:3 over the two leaves, Deployments of 12 replicas.
    policy(
        &host.client,
        "two-to-one",
        json!({"podSelector": {"matchLabels": {"app": "a"}},
        "division": {"type": "Weighted", "weights": {"east": 2, "west": 1}}}),
    )
    .await?;
    policy(
        &host.client,
        "one-to-three",
        json!({"podSelector": {"matchLabels": {"app": "b"}},
        "division": {"type": "Weighted", "weights": {"east": 1, "west": 3}}}),
    )
    .await?;
    deployment(&host.client, "a", 12, "100m").await?;
    deployment(&host.client, "b", 12, "100m").await?;
    let a = placed(&pods, "a", 12, TIMEOUT, &agent).await?;
    let b = placed(&pods, "b", 12, TIMEOUT, &agent).await?;
    assert!(within_one(&a, &[("east", 8), ("west", 4)]), "a: {a:?}");
    assert!(within_one(&b, &[("east", 3), ("west", 9)]), "b: {b:?}");

    // Keeping the shape: with keepShape the leader keeps pod-deletion-cost on both
    // Deployments' pods, so scaled down to 6 and back to 12 each keeps its split (±1).
    let policies: Api<PlacementPolicy> = Api::namespaced(host.client.clone(), "default");
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(host.client.clone(), "default");
    type Split = [(&'static str, usize); 2];
    let shapes: [(&str, &str, Split, Split); 2] = [
        (
            "a",
            "two-to-one",
            [("east", 4), ("west", 2)],
            [("east", 8), ("west", 4)],
        ),
        (
            "b",
            "one-to-three",
            [("east", 2), ("west", 4)],
            [("east", 3), ("west", 9)],
        ),
    ];
    for (app, policy_name, _, _) in &shapes {
        policies
            .patch(
                policy_name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"spec": {"division": {"keepShape": true}}})),
            )
            .await?;
        wait::until(
            TIMEOUT,
            &format!("pod-deletion-cost on every pod of {app}"),
            || async {
                let list = pods
                    .list(&ListParams::default().labels(&format!("app={app}")))
                    .await?;
                let all = list.items.iter().all(|p| {
                    p.metadata.annotations.as_ref().is_some_and(|a| {
                        a.contains_key("controller.kubernetes.io/pod-deletion-cost")
                    })
                });
                Ok(all.then_some(()))
            },
        )
        .await
        .map_err(|e| e.context(agent.logs()))?;
    }
    for (app, _, at_six, at_twelve) in &shapes {
        for (replicas, want) in [(6, at_six), (12, at_twelve)] {
            deployments
                .patch(
                    app,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"spec": {"replicas": replicas}})),
                )
                .await?;
            let got = placed(&pods, app, replicas, TIMEOUT, &agent).await?;
            assert!(within_one(&got, want), "{app} at {replicas}: {got:?}");
            println!("{app} at {replicas} replicas: {got:?}");
        }
    }
    let a = placed(&pods, "a", 12, TIMEOUT, &agent).await?;
    let b = placed(&pods, "b", 12, TIMEOUT, &agent).await?;

    // A cluster excluded is never used; at most two regions of three.
    policy(
        &host.client,
        "not-west",
        json!({"podSelector": {"matchLabels": {"app": "c"}},
        "clusterAffinity": {"exclude": ["west"]}}),
    )
    .await?;
    policy(
        &host.client,
        "two-regions",
        json!({"podSelector": {"matchLabels": {"app": "d"}},
        "spread": [{"by": "region", "maxGroups": 2}]}),
    )
    .await?;
    replica_set(&host.client, "c", 6, "100m").await?;
    replica_set(&host.client, "d", 9, "100m").await?;
    let c = placed(&pods, "c", 6, TIMEOUT, &agent).await?;
    assert!(!c.contains_key("west"), "c: {c:?}");
    let d = placed(&pods, "d", 9, TIMEOUT, &agent).await?;
    assert!(d.len() <= 2, "d used {} regions: {d:?}", d.len());

    // Ordered groups: east while it has room, then west. A pod of east's own takes 6 CPU,
    // so east (16 CPU, less the 100m pods above) has room for `before` pods of 3 CPU.
    let east_pods: Api<Pod> = Api::namespaced(east.client.clone(), "default");
    east_pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "blocker"},
                "spec": {"nodeName": "east-1", "containers": [{"name": "c", "image": "pause",
                    "resources": {"requests": {"cpu": "6"}}}]}}))?,
        )
        .await?;
    let small_in_east = [&a, &b, &c, &d]
        .iter()
        .map(|m| m.get("east").copied().unwrap_or(0))
        .sum::<usize>();
    let east_free = 160 - small_in_east; // tenths of a CPU, without the blocker
    let before = ((east_free - 60) / 30).min(6);
    let after = (east_free / 30).min(6);
    assert!(
        after > before,
        "the test needs room to come back: {before} then {after}"
    );
    policy(&host.client, "east-first", json!({"podSelector": {"matchLabels": {"app": "e"}},
        "clusterGroups": [{"name": "first", "clusterNames": ["east"]}, {"name": "then", "clusterNames": ["west"]}],
        "rebalance": {"maxInFlight": 1}})).await?;
    let pdbs: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(host.client.clone(), "default");
    pdbs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "e"},
            "spec": {"minAvailable": 5, "selector": {"matchLabels": {"app": "e"}}}}))?,
    )
    .await?;
    replica_set(&host.client, "e", 6, "3").await?;
    let e = placed(&pods, "e", 6, TIMEOUT, &agent).await?;
    assert_eq!(e.get("east").copied(), Some(before), "e: {e:?}");
    assert_eq!(e.get("west").copied().unwrap_or(0), 6 - before, "e: {e:?}");
    assert!(!e.contains_key(keys::HOST_CLUSTER_NAME), "e: {e:?}");

    // Room comes back in east: the rebalancer moves west's pods there one at a time,
    // through evictions the PodDisruptionBudget (5 of 6 available) allows; sampled every
    // 200 ms, never fewer than 5 pods of e run (bound, not terminating).
    east_pods
        .delete(
            "blocker",
            &kube::api::DeleteParams::default().grace_period(0),
        )
        .await?;
    let started = std::time::Instant::now();
    let mut fewest = usize::MAX;
    let moved = loop {
        let list = pods
            .list(&ListParams::default().labels("app=e"))
            .await?
            .items;
        let running: Vec<String> = list
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
            .collect();
        fewest = fewest.min(running.len());
        let in_east = running.iter().filter(|n| *n == "mcsched-east").count();
        if running.len() == 6 && in_east == after {
            break started.elapsed();
        }
        anyhow::ensure!(
            started.elapsed() < TIMEOUT,
            "e did not come back to east: {running:?}\n{}",
            agent.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(fewest >= 5, "only {fewest} pods of e ran at one moment");
    println!(
        "rebalanced {} pods of e back to east in {moved:?}; at least {fewest} of 6 ran throughout",
        after - before
    );

    // explain names the policy and what it weighed.
    let explanation = explain_first(&host, &agent.url, &pods, "a").await?;
    let applied = explanation.policy.expect("the policy in the explanation");
    assert_eq!(applied.name, "PlacementPolicy default/two-to-one");
    assert!(
        applied
            .notes
            .iter()
            .any(|n| n.starts_with("Weighted division by east:2 west:1")),
        "{:?}",
        applied.notes
    );

    // The invalid policy's pod waits, saying why; its status names the field.
    let message = unschedulable(&pods, "bad", &agent).await?;
    assert!(
        message.contains("PlacementPolicy default/bad is invalid: spec.spread[0].minGroups: 3 is more than maxGroups 2"),
        "{message}"
    );

    // Status: pods per cluster, Ready and why not.
    let want = a
        .iter()
        .map(|(c, n)| format!("{c}:{n}"))
        .collect::<Vec<_>>()
        .join(",");
    wait::until(TIMEOUT, "two-to-one's status", || async {
        let p = policies.get("two-to-one").await?;
        let s = p.status.unwrap_or_default();
        let ready = s
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        Ok((s.clusters_in_use.as_deref() == Some(want.as_str()) && ready).then_some(()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    wait::until(TIMEOUT, "bad's status", || async {
        let p = policies.get("bad").await?;
        let c = p
            .status
            .unwrap_or_default()
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready");
        Ok(c.filter(|c| c.status == "False" && c.reason == "Invalid")
            .map(|c| c.message))
    })
    .await
    .map(|m| assert_eq!(m, "spec.spread[0].minGroups: 3 is more than maxGroups 2"))?;

    let moved_back = format!("east:{after},west:{}", 6 - after);
    wait::until(TIMEOUT, "east-first's status after rebalancing", || async {
        let p = policies.get("east-first").await?;
        let s = p.status.unwrap_or_default();
        Ok((s.clusters_in_use.as_deref() == Some(moved_back.as_str())).then_some(()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;

    // get policies: one row per policy, with its clusters and readiness.
    let out = mcsched_e2e::cli::run(&host.kubeconfig, &["get", "policies"])?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = String::from_utf8_lossy(&out.stdout).to_string();
    let row = out
        .lines()
        .find(|l| l.starts_with("placementpolicy/two-to-one"))
        .unwrap_or_default();
    assert!(
        row.contains("app=a") && row.contains(&want) && row.trim_end().ends_with("True"),
        "{out}"
    );
    let bad_row = out
        .lines()
        .find(|l| l.starts_with("placementpolicy/bad"))
        .unwrap_or_default();
    assert!(
        bad_row.contains("False (Invalid: spec.spread[0].minGroups"),
        "{out}"
    );
    println!("{out}");
    // Cluster tolerations: an operator taints west for maintenance; only the policy that
    // tolerates it still sends pods there.
    let mut west_node = nodes.get("mcsched-west").await?;
    let mut taints = west_node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    taints.push(serde_json::from_value(
        json!({"key": "maintenance", "value": "true", "effect": "NoSchedule"}),
    )?);
    west_node.spec.get_or_insert_default().taints = Some(taints);
    west_node.metadata.managed_fields = None;
    nodes
        .replace("mcsched-west", &PostParams::default(), &west_node)
        .await?;
    policy(&host.client, "tolerant", json!({"podSelector": {"matchLabels": {"app": "f"}},
        "clusterAffinity": {"clusterNames": ["west"]},
        "clusterTolerations": [{"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}]})).await?;
    policy(
        &host.client,
        "intolerant",
        json!({"podSelector": {"matchLabels": {"app": "g"}},
        "clusterAffinity": {"clusterNames": ["west"]}}),
    )
    .await?;
    replica_set(&host.client, "f", 2, "100m").await?;
    replica_set(&host.client, "g", 1, "100m").await?;
    let f = placed(&pods, "f", 2, TIMEOUT, &agent).await?;
    assert_eq!(f, BTreeMap::from([("west".to_string(), 2)]));
    let message = unschedulable(&pods, "g", &agent).await?;
    assert!(message.contains("untolerated taint"), "{message}");

    // NoExecute with tolerationSeconds: east goes silent, its virtual node turns NotReady
    // and is tainted; the pods of a policy tolerating that for 0 s leave at once for the
    // host, while the others wait for their own tolerations (300 s by default).
    policy(&host.client, "quick-failover", json!({"podSelector": {"matchLabels": {"app": "h"}},
        "clusterGroups": [{"name": "leaf", "clusterNames": ["east"]}, {"name": "home", "clusterNames": ["host"]}],
        "clusterTolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0}]})).await?;
    replica_set(&host.client, "h", 2, "100m").await?;
    let h = placed(&pods, "h", 2, TIMEOUT, &agent).await?;
    assert_eq!(h, BTreeMap::from([("east".to_string(), 2)]));
    east.pause();
    let paused = std::time::Instant::now();
    let h = wait::until(
        Duration::from_secs(180),
        "h's pods replaced on the host",
        || async {
            let got = placed(&pods, "h", 2, TIMEOUT, &agent).await?;
            Ok((got.get(keys::HOST_CLUSTER_NAME) == Some(&2)).then_some(got))
        },
    )
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let took = paused.elapsed();
    let a_now = placed(&pods, "a", 12, TIMEOUT, &agent).await?;
    assert_eq!(
        a_now.get("east"),
        a.get("east"),
        "a's pods in east left too: {a_now:?}"
    );
    println!(
        "h left the silent leaf for {h:?} {took:?} after it stopped answering; a stayed: {a_now:?}"
    );
    east.resume();
    agent.stop();
    Ok(())
}
