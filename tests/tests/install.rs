//! `kubectl mcsched install` and `uninstall` as the real binary against a real API server
//! with kube-controller-manager, kube-scheduler and simulated kubelets (so the agent's
//! Deployment becomes Available without a container runtime), and the agent's rights
//! checked with `kubectl auth can-i --as` its ServiceAccount.

use std::path::Path;
use std::process::Command;

use anyhow::Context;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Api;
use mcsched_e2e::cli::{run, text};
use mcsched_e2e::{ControlPlane, ControlPlaneOptions, wait};
use mcsched_shared::keys;
use serde_json::json;

const AGENT: &str = "system:serviceaccount:mcsched-system:mcsched-agent";

/// What the operator does to let pod sync copy `kind` (secret, configmap) from `default`,
/// or (pod) the agent keep pod-deletion-cost there.
fn grant(kc: &Path, kind: &str) -> anyhow::Result<()> {
    let role = if kind == "pod" {
        "mcsched-agent-placement-keeper".to_string()
    } else {
        format!("mcsched-agent-{kind}-reader")
    };
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kc)
        .args([
            "create",
            "rolebinding",
            &format!("mcsched-{kind}s"),
            "-n",
            "default",
        ])
        .arg(format!("--clusterrole={role}"))
        .arg("--serviceaccount=mcsched-system:mcsched-agent")
        .output()?;
    anyhow::ensure!(out.status.success(), "{}", text(&out));
    Ok(())
}

/// `kubectl auth can-i VERB RESOURCE... --as` the agent's ServiceAccount.
fn agent_can(kubeconfig: &Path, args: &[&str]) -> anyhow::Result<bool> {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["auth", "can-i", "--as", AGENT])
        .args(args)
        .output()
        .context("kubectl must be on PATH")?;
    // "no" exits 1 as a failure would: only a "yes" or a "no" is an answer.
    match String::from_utf8_lossy(&out.stdout).trim() {
        "yes" => Ok(true),
        "no" => Ok(false),
        other => anyhow::bail!(
            "kubectl auth can-i {args:?} answered {other:?}: {}",
            text(&out)
        ),
    }
}

#[test]
fn committed_manifests_are_what_install_renders() -> anyhow::Result<()> {
    let out = Command::new(mcsched_e2e::cli::binary())
        .args(["install", "--dry-run=client", "-o", "yaml"])
        .output()?;
    assert!(out.status.success(), "{}", text(&out));
    let committed =
        std::fs::read_to_string(mcsched_e2e::repo_root().join("manifests/install.yaml"))?;
    assert!(
        String::from_utf8_lossy(&out.stdout) == committed,
        "manifests/install.yaml is stale: run `make manifests`"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn install_twice_then_uninstall_with_least_privilege() -> anyhow::Result<()> {
    let cp = ControlPlane::start("install", ControlPlaneOptions::full()).await?;
    let kc = cp.kubeconfig.clone();
    // A node for the agent's pod: kube-scheduler binds it, the kubelet simulator runs it.
    mcsched_e2e::objects::create_node(
        &cp.client,
        json!({
            "metadata": {"name": "node-1", "labels": {"kubernetes.io/hostname": "node-1"}},
            "status": {
                "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}]
            }
        }),
    )
    .await?;
    let namespaces: Api<Namespace> = Api::all(cp.client.clone());

    // Bad input: named, and nothing created.
    let out = run(&kc, &["install", "--replicas", "0"])?;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("--replicas: must be 1 or more"),
        "{}",
        text(&out)
    );
    let bad = cp.dir().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: x\n  plugins:\n    filter:\n      enabled:\n      - name: Foo\n",
    )?;
    let out = run(&kc, &["install", "--config", &bad.display().to_string()])?;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("profiles[0].plugins.filter.enabled[0].name: unknown plugin \"Foo\""),
        "{}",
        text(&out)
    );
    assert!(namespaces.get_opt(keys::SYSTEM_NAMESPACE).await?.is_none());

    // The manifests as committed are accepted by a real API server (server dry run needs
    // the namespace first, as any apply of a namespace with its contents would).
    let manifests = mcsched_e2e::repo_root().join("manifests/install.yaml");
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["apply", "--dry-run=server", "-f"])
        .arg(&manifests)
        .output()?;
    let applied = text(&out);
    assert!(
        applied.contains("namespace/mcsched-system created (server dry run)"),
        "{applied}"
    );

    let out = run(&kc, &["version"])?;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("agent: not installed in namespace mcsched-system"),
        "{}",
        text(&out)
    );

    // Install and wait: every object created, the Deployment Available.
    let out = run(
        &kc,
        &[
            "install",
            "--image",
            "mcsched/agent:test",
            "--wait",
            "--timeout",
            "90s",
        ],
    )?;
    let first = text(&out);
    println!("{first}");
    assert!(out.status.success(), "{first}");
    assert!(
        first.contains("mcsched installed in namespace mcsched-system: 26 objects (26 created, 0 configured, 0 unchanged)"),
        "{first}"
    );
    assert!(
        first.contains("deployment/mcsched-agent available"),
        "{first}"
    );
    let deployments: Api<Deployment> = Api::namespaced(cp.client.clone(), keys::SYSTEM_NAMESPACE);
    assert!(deployments.get_opt(keys::AGENT_NAME).await?.is_some());

    let out = run(&kc, &["version"])?;
    assert!(
        text(&out).contains(&format!(
            "kubectl-mcsched {}\nagent: mcsched/agent:test in namespace mcsched-system (1/1 ready)",
            env!("CARGO_PKG_VERSION")
        )),
        "{}",
        text(&out)
    );

    // Twice: nothing changes, except that what an older install left and this one no
    // longer has goes: the cluster-wide role that let the agent create pods anywhere.
    let crs: Api<ClusterRole> = Api::all(cp.client.clone());
    let stale: ClusterRole = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "mcsched-agent-pod-creator", "labels": {keys::INSTALL_LABEL: keys::SYSTEM_NAMESPACE}},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]
    }))?;
    crs.create(&Default::default(), &stale).await?;
    let out = run(&kc, &["install", "--image", "mcsched/agent:test"])?;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("26 objects (0 created, 0 configured, 26 unchanged, 1 pruned)"),
        "{}",
        text(&out)
    );
    assert!(
        text(&out).contains(
            "clusterrole/mcsched-agent-pod-creator pruned (no longer part of the install)"
        ),
        "{}",
        text(&out)
    );
    assert!(crs.get_opt("mcsched-agent-pod-creator").await?.is_none());

    // The aggregated API: registered with no TLS shortcut (the agent sets caBundle when
    // it leads), and readable through the built-in roles.
    let apiservices: Api<kube::api::DynamicObject> = Api::all_with(
        cp.client.clone(),
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "apiregistration.k8s.io",
            "v1",
            "APIService",
        )),
    );
    let registered = apiservices.get(keys::API_SERVICE_NAME).await?;
    assert_eq!(registered.data["spec"]["group"], "mcsched.io");
    assert_eq!(
        registered.data["spec"]["service"]["name"],
        keys::API_SERVICE
    );
    assert!(registered.data["spec"]["insecureSkipTLSVerify"].is_null());
    for (role, aggregated_into) in [
        (
            keys::EXPLANATION_READER_ROLE,
            &["view", "edit", "admin"][..],
        ),
        (keys::WHATIF_CREATOR_ROLE, &["edit", "admin"]),
    ] {
        let labels = crs.get(role).await?.metadata.labels.unwrap_or_default();
        for r in aggregated_into {
            let key = format!("rbac.authorization.k8s.io/aggregate-to-{r}");
            assert_eq!(
                labels.get(&key).map(String::as_str),
                Some("true"),
                "{role} {key}"
            );
        }
    }

    // What the agent needs.
    for args in [
        &["create", "pods", "--subresource=binding", "-n", "shop"][..],
        &["patch", "pods", "--subresource=status", "-n", "shop"],
        &["delete", "pods", "-n", "shop"],
        &["watch", "nodes"],
        &["watch", "persistentvolumes"],
        &["patch", "persistentvolumeclaims", "-n", "shop"],
        &["watch", "storageclasses.storage.k8s.io"],
        &["watch", "csinodes.storage.k8s.io"],
        &["watch", "csidrivers.storage.k8s.io"],
        &["watch", "csistoragecapacities.storage.k8s.io"],
        &["watch", "poddisruptionbudgets.policy"],
        // What selects pods, for PodTopologySpread's default constraints.
        &["watch", "services"],
        &["watch", "replicationcontrollers"],
        &["watch", "replicasets.apps"],
        &["watch", "statefulsets.apps"],
        &["create", "events.events.k8s.io", "-n", "shop"],
        &["watch", "secrets", "-n", "mcsched-system"],
        // Whether it may read what pod sync copies, namespace by namespace.
        &["create", "selfsubjectaccessreviews.authorization.k8s.io"],
        &[
            "create",
            "leases.coordination.k8s.io",
            "-n",
            "mcsched-system",
        ],
        &[
            "update",
            "leases.coordination.k8s.io/mcsched",
            "-n",
            "mcsched-system",
        ],
        &[
            "create",
            "leases.coordination.k8s.io",
            "-n",
            "kube-node-lease",
        ],
        &[
            "get",
            "configmaps/extension-apiserver-authentication",
            "-n",
            "kube-system",
        ],
        // Delegated authentication and authorization on the secure port.
        &["create", "tokenreviews.authentication.k8s.io"],
        &["create", "subjectaccessreviews.authorization.k8s.io"],
        // The leader as the aggregated API's backend.
        &[
            "patch",
            "endpointslices.discovery.k8s.io/mcsched-api",
            "-n",
            "mcsched-system",
        ],
        &[
            "create",
            "endpointslices.discovery.k8s.io/mcsched-api",
            "-n",
            "mcsched-system",
        ],
        &[
            "patch",
            "apiservices.apiregistration.k8s.io/v1alpha1.mcsched.io",
        ],
        // Placement policies: read everywhere, status written.
        &["watch", "placementpolicies.policy.mcsched.io", "-A"],
        &["list", "clusterplacementpolicies.policy.mcsched.io"],
        &[
            "patch",
            "placementpolicies.policy.mcsched.io",
            "--subresource=status",
            "-n",
            "shop",
        ],
    ] {
        assert!(agent_can(&kc, args)?, "the agent cannot {args:?}");
    }
    // And no more.
    for args in [
        &["get", "secrets/db", "-n", "shop"][..],
        &["list", "secrets", "-n", "default"],
        // No pod creation anywhere (a pod can run as any ServiceAccount of its namespace).
        &["create", "pods", "-n", "shop"],
        &["create", "pods", "-n", "default"],
        &["create", "pods", "-n", "mcsched-system"],
        // ConfigMaps only where the operator grants them.
        &["get", "configmaps/app", "-n", "shop"],
        &["get", "configmaps/app", "-n", "default"],
        &["list", "configmaps", "-n", "shop"],
        &[
            "update",
            "leases.coordination.k8s.io/other",
            "-n",
            "mcsched-system",
        ],
        &["update", "nodes/node-1"],
        &["delete", "nodes/node-1"],
        &["create", "deployments.apps", "-n", "shop"],
        &["create", "clusterrolebindings.rbac.authorization.k8s.io"],
        &[
            "patch",
            "endpointslices.discovery.k8s.io/other",
            "-n",
            "mcsched-system",
        ],
        &["patch", "endpointslices.discovery.k8s.io/web", "-n", "shop"],
        &[
            "patch",
            "apiservices.apiregistration.k8s.io/v1beta1.metrics.k8s.io",
        ],
        // No pod writes or evictions but where an operator grants the placement keeper.
        &["patch", "pods", "-n", "default"],
        &["create", "pods", "--subresource=eviction", "-n", "default"],
        // Users write policies; the agent only their status.
        &[
            "create",
            "placementpolicies.policy.mcsched.io",
            "-n",
            "shop",
        ],
        &["patch", "placementpolicies.policy.mcsched.io", "-n", "shop"],
        &["delete", "clusterplacementpolicies.policy.mcsched.io"],
        &["*", "*"],
    ] {
        assert!(!agent_can(&kc, args)?, "the agent can {args:?}");
    }
    // Secrets of a namespace become readable once the operator binds the reader role there
    // (listed and watched too: edits follow the leaf copies), and only there.
    grant(&kc, "secret")?;
    assert!(agent_can(&kc, &["get", "secrets/db", "-n", "default"])?);
    assert!(agent_can(&kc, &["watch", "secrets", "-n", "default"])?);
    assert!(!agent_can(&kc, &["list", "secrets", "-n", "shop"])?);
    assert!(!agent_can(&kc, &["update", "secrets/db", "-n", "default"])?);
    // ConfigMaps likewise, and only in that namespace.
    grant(&kc, "configmap")?;
    assert!(agent_can(&kc, &["get", "configmaps/app", "-n", "default"])?);
    assert!(agent_can(&kc, &["watch", "configmaps", "-n", "default"])?);
    assert!(!agent_can(&kc, &["get", "configmaps/app", "-n", "shop"])?);
    assert!(!agent_can(&kc, &["list", "configmaps", "-n", "shop"])?);
    // Pod-deletion-cost likewise.
    grant(&kc, "pod")?;
    assert!(agent_can(&kc, &["patch", "pods", "-n", "default"])?);
    assert!(agent_can(
        &kc,
        &["create", "pods", "--subresource=eviction", "-n", "default"]
    )?);
    assert!(!agent_can(&kc, &["patch", "pods", "-n", "shop"])?);
    assert!(!agent_can(
        &kc,
        &["create", "pods", "--subresource=eviction", "-n", "shop"]
    )?);
    assert!(!agent_can(&kc, &["update", "pods", "-n", "default"])?);

    // Uninstall refuses without a terminal unless --yes, and then removes everything.
    let out = run(&kc, &["uninstall"])?;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("pass --yes"), "{}", text(&out));
    assert!(deployments.get_opt(keys::AGENT_NAME).await?.is_some());
    let out = run(&kc, &["uninstall", "--yes"])?;
    let removed = text(&out);
    println!("{removed}");
    assert!(out.status.success(), "{removed}");
    assert!(removed.contains("26 objects deleted"), "{removed}");
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(cp.client.clone());
    // Uninstall's part is the delete; the API server's CRD finalizer then removes the
    // (empty) instances and the CRD. On a loaded machine that has taken over three
    // minutes: its list found the instances' watch cache re-initializing ("storage is
    // (re)initializing") and its retries back off exponentially. So a CRD may still be
    // there, terminating, and is not waited for.
    let mut terminating = Vec::new();
    for crd in [
        "placementpolicies.policy.mcsched.io",
        "clusterplacementpolicies.policy.mcsched.io",
    ] {
        if let Some(left) = crds.get_opt(crd).await? {
            assert!(
                left.metadata.deletion_timestamp.is_some(),
                "{crd} left without a deletionTimestamp: uninstall did not delete it"
            );
            terminating.push(crd);
        }
    }
    // Uninstall again at once: whatever the first one deleted and the API server still
    // removes (the CRDs, the namespace) is not installed any more, and not deleted again.
    let out = run(&kc, &["uninstall", "--yes"])?;
    let again = text(&out);
    println!("{again}");
    assert!(out.status.success(), "{again}");
    assert!(again.contains("not installed"), "{again}");
    assert!(!again.contains(" deleted"), "{again}");
    for crd in terminating {
        let still = crds.get_opt(crd).await?.is_some();
        assert!(
            !still || again.contains(&format!("customresourcedefinition/{crd}")),
            "{crd} is still terminating but the second uninstall did not name it: {again}"
        );
    }
    assert!(
        apiservices.get_opt(keys::API_SERVICE_NAME).await?.is_none(),
        "the APIService left"
    );
    for role in [
        keys::EXPLANATION_READER_ROLE,
        keys::WHATIF_CREATOR_ROLE,
        keys::POLICY_VIEWER_ROLE,
        keys::POLICY_EDITOR_ROLE,
    ] {
        assert!(crs.get_opt(role).await?.is_none(), "{role} left");
    }
    let crbs: Api<ClusterRoleBinding> = Api::all(cp.client.clone());
    for name in [
        "mcsched-agent",
        "mcsched-agent:kube-scheduler",
        "mcsched-agent:volume-scheduler",
    ] {
        assert!(crbs.get_opt(name).await?.is_none(), "{name} left");
    }
    assert!(crs.get_opt("mcsched-agent").await?.is_none());
    assert!(crs.get_opt("mcsched-agent-secret-reader").await?.is_none());
    assert!(
        crs.get_opt("mcsched-agent-configmap-reader")
            .await?
            .is_none()
    );
    wait::until(
        std::time::Duration::from_secs(180),
        "the namespace gone",
        || async {
            match namespaces.get_opt(keys::SYSTEM_NAMESPACE).await? {
                None => Ok(Some(())),
                Some(left) => Err(anyhow::anyhow!(
                    "namespace still there: {:?}",
                    left.status.and_then(|s| s.conditions)
                )),
            }
        },
    )
    .await?;
    let out = run(&kc, &["uninstall", "--yes"])?;
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("not installed"), "{}", text(&out));
    assert!(!text(&out).contains(" deleted"), "{}", text(&out));
    Ok(())
}
