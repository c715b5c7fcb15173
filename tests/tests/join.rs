//! `kubectl mcsched join cluster` and `unjoin cluster`, run as the real binary against a
//! real host and a real leaf API server (the leaf's token comes from its TokenRequest API;
//! no token controller is needed). What the leaf account may and may not do in detail is
//! in `leaf_safety.rs`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use mcsched_e2e::cli::{can_i, run, text};
use mcsched_e2e::{ControlPlane, ControlPlaneOptions};
use mcsched_shared::keys;
use serde_json::json;

async fn exists<K>(api: &Api<K>, name: &str) -> anyhow::Result<bool>
where
    K: kube::Resource + Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(api.get_opt(name).await?.is_some())
}

async fn leaf_node(client: &Client, name: &str, zone: &str) -> anyhow::Result<()> {
    mcsched_e2e::objects::create_node(
        client,
        json!({
            "metadata": {"name": name, "labels": {"topology.kubernetes.io/region": "eu", "topology.kubernetes.io/zone": zone}},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}]}
        }),
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn join_and_unjoin_a_leaf() -> anyhow::Result<()> {
    let (host, leaf) = tokio::try_join!(
        ControlPlane::start("join-host", ControlPlaneOptions::default()),
        ControlPlane::start("join-leaf", ControlPlaneOptions::default())
    )?;
    leaf_node(&leaf.client, "leaf-1", "eu-1").await?;
    leaf_node(&leaf.client, "leaf-2", "eu-2").await?;
    let leaf_kc = leaf.kubeconfig.to_string_lossy().into_owned();
    let dir = tempfile::tempdir()?;

    // Bad input first: nothing may be created by any of these.
    let garbage = dir.path().join("garbage.yaml");
    std::fs::write(&garbage, "this: [is not a kubeconfig")?;
    let out = run(
        &host.kubeconfig,
        &[
            "join",
            "cluster",
            "--name",
            "east",
            "--cluster-kubeconfig",
            &garbage.to_string_lossy(),
            "--namespaces",
            "shop",
        ],
    )?;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(&*garbage.to_string_lossy()),
        "{}",
        text(&out)
    );

    let unreachable = dir.path().join("unreachable.yaml");
    std::fs::write(
        &unreachable,
        "apiVersion: v1\nkind: Config\nclusters: [{name: x, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: x, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: x, user: x}}]\ncurrent-context: x\n",
    )?;
    let out = run(
        &host.kubeconfig,
        &[
            "join",
            "cluster",
            "--name",
            "east",
            "--cluster-kubeconfig",
            &unreachable.to_string_lossy(),
            "--namespaces",
            "shop",
        ],
    )?;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("cannot reach leaf cluster at https://127.0.0.1:1"),
        "{}",
        text(&out)
    );

    let out = run(
        &host.kubeconfig,
        &[
            "join",
            "cluster",
            "--name",
            "East!",
            "--cluster-kubeconfig",
            &leaf_kc,
            "--namespaces",
            "shop",
        ],
    )?;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("--name \"East!\""), "{}", text(&out));

    let out = run(
        &host.kubeconfig,
        &[
            "join",
            "cluster",
            "--cluster-kubeconfig",
            &leaf_kc,
            "--namespaces",
            "shop",
        ],
    )?;
    assert_eq!(out.status.code(), Some(2), "a usage error: {}", text(&out));
    // Where the host may write in the leaf is never left implicit.
    let out = run(
        &host.kubeconfig,
        &[
            "join",
            "cluster",
            "--name",
            "east",
            "--cluster-kubeconfig",
            &leaf_kc,
        ],
    )?;
    assert_eq!(out.status.code(), Some(2), "a usage error: {}", text(&out));
    assert!(
        text(&out).contains("--namespaces"),
        "names the missing flag: {}",
        text(&out)
    );

    // A leaf user without the rights join needs: refused before anything is created.
    let limited = limited_kubeconfig(&leaf, dir.path()).await?;
    let out = run(
        &host.kubeconfig,
        &[
            "join",
            "cluster",
            "--name",
            "east",
            "--cluster-kubeconfig",
            &limited.to_string_lossy(),
            "--namespaces",
            "shop",
        ],
    )?;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("missing permissions in the leaf cluster")
            && text(&out).contains("create clusterroles.rbac.authorization.k8s.io"),
        "{}",
        text(&out)
    );
    let leaf_ns: Api<Namespace> = Api::all(leaf.client.clone());
    assert!(!exists(&leaf_ns, keys::SYSTEM_NAMESPACE).await?);
    let host_nodes: Api<Node> = Api::all(host.client.clone());
    assert!(!exists(&host_nodes, "mcsched-east").await?);

    // The join itself.
    let out = run(
        &host.kubeconfig,
        &[
            "join",
            "cluster",
            "--name",
            "east",
            "--cluster-kubeconfig",
            &leaf_kc,
            "--namespaces",
            "shop",
            "--provider",
            "onprem",
            "--cost",
            "3",
            "--label",
            "tier=a",
        ],
    )?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("cluster east joined: virtual node mcsched-east"),
        "{}",
        text(&out)
    );

    // get clusters: the virtual node as join left it (no agent runs here to report the
    // leaf's room, so readiness is Unknown and the version is the one join read).
    let out = run(&host.kubeconfig, &["get", "clusters", "-o", "json"])?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(
        (&list["apiVersion"], &list["kind"]),
        (&json!("v1"), &json!("List")),
        "{list}"
    );
    let east = &list["items"][0];
    assert_eq!(east["kind"], "Cluster", "{list}");
    assert_eq!(east["metadata"]["name"], "east", "{list}");
    assert!(east["metadata"]["creationTimestamp"].is_string(), "{list}");
    let status = &east["status"];
    assert_eq!(status["virtualNode"], "mcsched-east", "{list}");
    assert_eq!(status["ready"], "Unknown", "{list}");
    assert!(
        status["version"]
            .as_str()
            .is_some_and(|v| v.starts_with("v1.37")),
        "{list}"
    );
    assert_eq!(status["pods"], 0, "{list}");
    assert_eq!(status["provider"], "onprem", "{list}");
    let out = run(&host.kubeconfig, &["get", "clusters", "-o", "yaml"])?;
    let yaml: serde_json::Value = mcsched_shared::yaml::from_slice(&out.stdout)?;
    assert_eq!(yaml, list, "-o yaml is -o json's list");
    // kubectl's other formats, on the same list.
    let formats: [(&[&str], &str); 5] = [
        (&["-o", "name"], "cluster.mcsched.io/east\n"),
        (&["-o", "jsonpath={.items[*].metadata.name}"], "east"),
        (
            &[
                "-o",
                r#"jsonpath={range .items[*]}{.metadata.name}={.status.virtualNode}{"\n"}{end}"#,
            ],
            "east=mcsched-east\n",
        ),
        (
            &[
                "-o",
                "custom-columns=NAME:.metadata.name,NODE:.status.virtualNode",
                "--no-headers",
            ],
            "east   mcsched-east\n",
        ),
        (
            &["-o", "custom-columns=NAME:.metadata.name,COST:.status.cost"],
            "NAME   COST\neast   3\n",
        ),
    ];
    for (args, want) in formats {
        let out = run(&host.kubeconfig, &[&["get", "clusters"][..], args].concat())?;
        assert!(out.status.success(), "{args:?}: {}", text(&out));
        assert_eq!(String::from_utf8_lossy(&out.stdout), want, "{args:?}");
    }
    let out = run(&host.kubeconfig, &["get", "clusters", "-o", "wide"])?;
    let wide = text(&out);
    assert!(
        wide.lines()
            .next()
            .is_some_and(|h| h.ends_with("AGE   REGION   ZONE   PROVIDER   COST")),
        "{wide}"
    );
    assert!(
        wide.lines()
            .nth(1)
            .is_some_and(|r| r.ends_with("onprem     3")),
        "{wide}"
    );
    let out = run(&host.kubeconfig, &["get", "clusters", "-o", "table"])?;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("unable to match a printer suitable for the output format \"table\", allowed formats are: custom-columns,json,jsonpath,name,wide,yaml"),
        "{}",
        text(&out)
    );
    let out = run(&host.kubeconfig, &["get", "clusters"])?;
    println!("{}", text(&out));
    let table = text(&out);
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        [
            "NAME",
            "VIRTUAL",
            "NODE",
            "READY",
            "VERSION",
            "NODES",
            "ALLOCATABLE",
            "FREE",
            "PODS",
            "AGE"
        ],
        "{table}"
    );
    assert_eq!(
        lines[1][..3],
        ["east", "mcsched-east", "Unknown"],
        "{table}"
    );

    let node = host_nodes.get("mcsched-east").await?;
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let label = |k: &str| labels.get(k).map(String::as_str);
    assert_eq!(label(keys::CLUSTER_LABEL), Some("east"));
    assert_eq!(
        label(keys::REGION_LABEL),
        Some("eu"),
        "all leaf nodes agree"
    );
    assert_eq!(label(keys::ZONE_LABEL), None, "leaf nodes disagree");
    assert_eq!(label(keys::PROVIDER_LABEL), Some("onprem"));
    assert_eq!(label(keys::COST_LABEL), Some("3"));
    assert_eq!(label("tier"), Some("a"));
    let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(
        taints
            .iter()
            .any(|t| t.key == keys::LEAF_TAINT && t.effect == "NoSchedule")
    );

    let secret = Api::<Secret>::namespaced(host.client.clone(), keys::SYSTEM_NAMESPACE)
        .get("mcsched-cluster-east")
        .await?;
    assert_eq!(
        secret
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(keys::CLUSTER_LABEL))
            .map(String::as_str),
        Some("east")
    );
    let kc = secret
        .data
        .and_then(|d| d.get(keys::KUBECONFIG_KEY).cloned())
        .context("no kubeconfig in the join Secret")?;
    let kc_path = dir.path().join("leaf-sa.yaml");
    std::fs::write(&kc_path, &kc.0)?;
    let kc_text = String::from_utf8_lossy(&kc.0).into_owned();
    assert_eq!(
        mcsched_shared::leaf_kubeconfig::check(&kc_text),
        Ok(()),
        "server, CA and token only: {kc_text}"
    );
    assert_eq!(
        secret
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::TOKEN_LIFETIME_ANNOTATION))
            .map(String::as_str),
        Some("1h0m0s"),
        "the default lifetime"
    );
    // The leaf ServiceAccount can do what the agent needs there, and not more.
    assert!(can_i(&kc_path, &["watch", "nodes"])?);
    assert!(can_i(&kc_path, &["watch", "persistentvolumes"])?);
    assert!(can_i(
        &kc_path,
        &["watch", "storageclasses.storage.k8s.io"]
    )?);
    assert!(!can_i(&kc_path, &["delete", "persistentvolumes"])?);
    assert!(can_i(&kc_path, &["create", "pods", "-n", "shop"])?);
    assert!(!can_i(&kc_path, &["create", "pods", "-n", "default"])?);
    assert!(!can_i(&kc_path, &["create", "namespaces"])?);
    assert!(can_i(&kc_path, &["create", "secrets", "-n", "shop"])?);
    assert!(!can_i(&kc_path, &["list", "secrets", "-n", "shop"])?);
    assert!(!can_i(&kc_path, &["delete", "nodes"])?);
    assert!(!can_i(&kc_path, &["update", "nodes"])?);
    assert!(!can_i(&kc_path, &["create", "deployments"])?);
    assert!(!can_i(&kc_path, &["create", "clusterroles"])?);
    assert!(!can_i(&kc_path, &["*", "*"])?);
    // The agent in the host may touch this virtual node and its Lease only.
    let agent = format!(
        "system:serviceaccount:{}:{}",
        keys::SYSTEM_NAMESPACE,
        keys::AGENT_NAME
    );
    assert!(can_i(
        &host.kubeconfig,
        &[
            "update",
            "nodes/mcsched-east",
            "--subresource=status",
            "--as",
            &agent
        ]
    )?);
    assert!(can_i(
        &host.kubeconfig,
        &[
            "update",
            "leases/mcsched-east",
            "-n",
            "kube-node-lease",
            "--as",
            &agent
        ]
    )?);
    assert!(!can_i(
        &host.kubeconfig,
        &["delete", "nodes/some-real-node", "--as", &agent]
    )?);
    assert!(!can_i(
        &host.kubeconfig,
        &["update", "nodes/some-real-node", "--as", &agent]
    )?);
    // ... and write the renewed token into its join Secret, no other.
    assert!(can_i(
        &host.kubeconfig,
        &[
            "patch",
            "secrets/mcsched-cluster-east",
            "-n",
            keys::SYSTEM_NAMESPACE,
            "--as",
            &agent
        ]
    )?);
    assert!(!can_i(
        &host.kubeconfig,
        &[
            "patch",
            "secrets/another",
            "-n",
            keys::SYSTEM_NAMESPACE,
            "--as",
            &agent
        ]
    )?);

    // Joining again updates.
    let out = run(
        &host.kubeconfig,
        &[
            "join",
            "cluster",
            "--name",
            "east",
            "--cluster-kubeconfig",
            &leaf_kc,
            "--namespaces",
            "shop",
            "--cost",
            "5",
        ],
    )?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("cluster east updated"),
        "{}",
        text(&out)
    );
    let node = host_nodes.get("mcsched-east").await?;
    assert_eq!(
        node.metadata
            .labels
            .and_then(|l| l.get(keys::COST_LABEL).cloned())
            .as_deref(),
        Some("5")
    );

    // The same leaf under another name, and another leaf under this name: refused.
    let out = run(
        &host.kubeconfig,
        &[
            "join",
            "cluster",
            "--name",
            "west",
            "--cluster-kubeconfig",
            &leaf_kc,
            "--namespaces",
            "shop",
        ],
    )?;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("this leaf cluster is already joined as east"),
        "{}",
        text(&out)
    );
    let squatter = Secret {
        metadata: ObjectMeta {
            name: Some("mcsched-cluster-taken".into()),
            labels: Some([(keys::CLUSTER_LABEL.to_string(), "taken".to_string())].into()),
            annotations: Some(
                [(
                    keys::CLUSTER_ID_ANNOTATION.to_string(),
                    "another-leaf".to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Secret>::namespaced(host.client.clone(), keys::SYSTEM_NAMESPACE)
        .create(&PostParams::default(), &squatter)
        .await?;
    let out = run(
        &host.kubeconfig,
        &[
            "join",
            "cluster",
            "--name",
            "taken",
            "--cluster-kubeconfig",
            &leaf_kc,
            "--namespaces",
            "shop",
        ],
    )?;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("cluster name taken is already used by another leaf (id another-leaf)"),
        "{}",
        text(&out)
    );
    assert!(!exists(&host_nodes, "mcsched-taken").await?);

    // Unjoin refuses without a terminal or --yes, then removes everything this host's
    // join and sync created, and nothing else.
    let host_id = Api::<Namespace>::all(host.client.clone())
        .get("kube-system")
        .await?
        .metadata
        .uid
        .context("no host id")?;
    let leaf_pods: Api<Pod> = Api::namespaced(leaf.client.clone(), "shop");
    for (name, labels) in [
        (
            "synced",
            json!({keys::MANAGED_CLUSTER_LABEL: "east", keys::HOST_ID_LABEL: host_id}),
        ),
        // Another host's copy, under the same leaf name.
        (
            "other-host",
            json!({keys::MANAGED_CLUSTER_LABEL: "east", keys::HOST_ID_LABEL: "another-host"}),
        ),
    ] {
        leaf_pods
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": labels},
                    "spec": {"containers": [{"name": "c", "image": "pause"}]}
                }))?,
            )
            .await?;
    }
    let host_pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    host_pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "synced"},
                "spec": {"nodeName": "mcsched-east", "containers": [{"name": "c", "image": "pause"}]}
            }))?,
        )
        .await?;
    let out = run(&host.kubeconfig, &["unjoin", "cluster", "east"])?;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("pass --yes"), "{}", text(&out));
    assert!(exists(&host_nodes, "mcsched-east").await?);

    let out = mcsched_e2e::cli::unjoin_as_leaf_admin(&host.kubeconfig, "east", &leaf.kubeconfig)?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("cluster east unjoined"),
        "{}",
        text(&out)
    );
    assert!(!exists(&host_nodes, "mcsched-east").await?);
    assert!(
        !exists(
            &Api::<Secret>::namespaced(host.client.clone(), keys::SYSTEM_NAMESPACE),
            "mcsched-cluster-east"
        )
        .await?
    );
    assert!(
        !exists(
            &Api::<ClusterRole>::all(host.client.clone()),
            "mcsched-virtual-node-east"
        )
        .await?
    );
    assert!(
        !exists(
            &Api::<Role>::namespaced(host.client.clone(), "kube-node-lease"),
            "mcsched-virtual-node-east"
        )
        .await?
    );
    assert!(
        host_pods
            .get_opt("synced")
            .await?
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
    );
    assert!(
        leaf_pods
            .get_opt("synced")
            .await?
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
    );
    assert!(
        leaf_pods
            .get_opt("other-host")
            .await?
            .is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
        "another host's copy stays"
    );
    assert!(
        !exists(
            &Api::<RoleBinding>::namespaced(leaf.client.clone(), "shop"),
            keys::LEAF_ACCOUNT
        )
        .await?
    );
    assert!(
        !exists(
            &Api::<ClusterRole>::all(leaf.client.clone()),
            keys::LEAF_WRITER_ROLE
        )
        .await?
    );
    assert!(
        leaf_ns
            .get_opt("shop")
            .await?
            .is_some_and(|n| n.metadata.deletion_timestamp.is_none()),
        "join created shop, but another host's pod is still there"
    );
    assert!(
        !exists(
            &Api::<ClusterRole>::all(leaf.client.clone()),
            keys::LEAF_ACCOUNT
        )
        .await?
    );
    assert!(
        !exists(
            &Api::<ClusterRoleBinding>::all(leaf.client.clone()),
            keys::LEAF_ACCOUNT
        )
        .await?
    );
    assert!(
        !exists(
            &Api::<ServiceAccount>::namespaced(leaf.client.clone(), keys::SYSTEM_NAMESPACE),
            keys::LEAF_ACCOUNT
        )
        .await?
    );
    let ns = leaf_ns.get_opt(keys::SYSTEM_NAMESPACE).await?;
    assert!(
        ns.is_none_or(|n| n.metadata.deletion_timestamp.is_some()),
        "join created it, unjoin removes it"
    );
    Ok(())
}

/// A kubeconfig for a leaf ServiceAccount that may only read namespaces and create
/// ServiceAccounts: not enough to join.
async fn limited_kubeconfig(leaf: &ControlPlane, dir: &Path) -> anyhow::Result<PathBuf> {
    let kubectl = |args: &[&str]| -> anyhow::Result<String> {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&leaf.kubeconfig)
            .args(args)
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    kubectl(&["create", "serviceaccount", "limited", "-n", "default"])?;
    kubectl(&[
        "create",
        "clusterrole",
        "limited",
        "--verb=get,list,create",
        "--resource=namespaces,serviceaccounts",
    ])?;
    kubectl(&[
        "create",
        "clusterrolebinding",
        "limited",
        "--clusterrole=limited",
        "--serviceaccount=default:limited",
    ])?;
    let token = kubectl(&["create", "token", "limited", "-n", "default"])?;
    let server = kubectl(&[
        "config",
        "view",
        "--minify",
        "-o",
        "jsonpath={.clusters[0].cluster.server}",
    ])?;
    let ca = kubectl(&[
        "config",
        "view",
        "--raw",
        "--minify",
        "-o",
        "jsonpath={.clusters[0].cluster.certificate-authority-data}",
    ])?;
    let path = dir.join("limited.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: l, cluster: {{server: '{server}', certificate-authority-data: '{ca}'}}}}]\nusers: [{{name: l, user: {{token: '{token}'}}}}]\ncontexts: [{{name: l, context: {{cluster: l, user: l}}}}]\ncurrent-context: l\n"
        ),
    )?;
    Ok(path)
}
