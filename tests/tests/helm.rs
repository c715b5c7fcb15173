//! The Helm chart (`charts/mcsched`) against `kubectl mcsched install`: rendered by `helm`
//! (built from its Go module, `make helm`: .build/helm), its objects are the CLI's dry
//! run's, default and with values beside the flags they stand for; installed and upgraded
//! on a real API server with kube-controller-manager and simulated kubelets (the agent's
//! Deployment becomes Available without a container runtime, as in install.rs: the agent
//! process itself does not run). `kubectl kustomize manifests/` gives install.yaml's
//! objects.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::discovery::Scope;
use mcsched_e2e::cli::text;
use mcsched_e2e::{ControlPlane, ControlPlaneOptions, wait};
use mcsched_shared::keys;
use serde_json::{Value, json};

const CONFIG_HASH: &str = "mcsched.io/config-hash";

/// `.build/helm`, built by `make helm` when it is not there yet.
fn helm_binary() -> anyhow::Result<PathBuf> {
    let root = mcsched_e2e::repo_root();
    let bin = root.join(".build/helm");
    if !bin.exists() {
        let out = Command::new("make")
            .arg("-C")
            .arg(&root)
            .arg("helm")
            .output()
            .context("make must be on PATH to build .build/helm")?;
        anyhow::ensure!(out.status.success(), "make helm: {}", text(&out));
    }
    Ok(bin)
}

/// A `helm` command whose cache, configuration and data stay in `home`.
fn helm(home: &Path) -> anyhow::Result<Command> {
    let mut cmd = Command::new(helm_binary()?);
    cmd.current_dir(mcsched_e2e::repo_root())
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"));
    Ok(cmd)
}

fn ok(out: Output, what: &str) -> anyhow::Result<String> {
    anyhow::ensure!(out.status.success(), "{what}: {}", text(&out));
    Ok(String::from_utf8(out.stdout)?)
}

fn objects(yaml: &str) -> anyhow::Result<Vec<Value>> {
    Ok(mcsched_shared::yaml::from_multiple(yaml)?
        .into_iter()
        .filter(|o| !o.is_null())
        .collect())
}

/// `helm template mcsched charts/mcsched` with `args`.
fn chart(home: &Path, args: &[&str]) -> anyhow::Result<Vec<Value>> {
    let out = helm(home)?
        .args(["template", "mcsched", "charts/mcsched"])
        .args(args)
        .output()?;
    objects(&ok(out, &format!("helm template {args:?}"))?)
}

/// `kubectl mcsched install --dry-run=client -o yaml` with `args`.
fn cli(args: &[&str]) -> anyhow::Result<Vec<Value>> {
    let out = Command::new(mcsched_e2e::cli::binary())
        .args(["install", "--dry-run=client", "-o", "yaml"])
        .args(args)
        .output()?;
    objects(&ok(out, &format!("install {args:?}"))?)
}

type Key = (String, String, String, String);

fn key(o: &Value) -> Key {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (
        s(&o["apiVersion"]),
        s(&o["kind"]),
        s(&o["metadata"]["namespace"]),
        s(&o["metadata"]["name"]),
    )
}

fn by_key(objects: &[Value]) -> BTreeMap<Key, Value> {
    let mut map = BTreeMap::new();
    for o in objects {
        assert!(
            map.insert(key(o), o.clone()).is_none(),
            "{:?} twice",
            key(o)
        );
    }
    map
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn sha256_16(text: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    d.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The Deployment's config-hash annotation is the first 16 hex digits of the SHA-256 of
/// the ConfigMap's configuration, from the chart (`sha256sum | trunc 16`) and from the CLI
/// alike: a move from one install path to the other does not roll the agent.
fn with_config_hash_checked(objects: Vec<Value>, what: &str) -> Vec<Value> {
    let config = find(&objects, "ConfigMap", "mcsched-agent-config")["data"]["config.yaml"]
        .as_str()
        .expect("config.yaml")
        .to_string();
    let deployment = find(&objects, "Deployment", "mcsched-agent");
    let hash = &deployment["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH];
    assert_eq!(
        hash.as_str(),
        Some(sha256_16(&config).as_str()),
        "{what}: the config-hash annotation"
    );
    objects
}

/// Object for object (parsed, in any order), the config hash included.
fn assert_same(chart: Vec<Value>, cli: Vec<Value>, what: &str) {
    let chart = by_key(&with_config_hash_checked(chart, "the chart"));
    let cli = by_key(&with_config_hash_checked(cli, "the CLI"));
    let only = |a: &BTreeMap<Key, Value>, b: &BTreeMap<Key, Value>| -> Vec<Key> {
        a.keys().filter(|k| !b.contains_key(*k)).cloned().collect()
    };
    assert!(
        chart.len() == cli.len() && only(&chart, &cli).is_empty(),
        "{what}: only in the chart {:?}, only in the CLI's {:?}",
        only(&chart, &cli),
        only(&cli, &chart)
    );
    for (k, c) in &chart {
        assert!(
            c == &cli[k],
            "{what}: {k:?} differs\nchart: {}\ncli:   {}",
            serde_json::to_string_pretty(c).unwrap_or_default(),
            serde_json::to_string_pretty(&cli[k]).unwrap_or_default()
        );
    }
}

#[test]
fn default_rendering_is_the_cli_install() -> anyhow::Result<()> {
    let home = tempfile::tempdir()?;
    let rendered = chart(home.path(), &["--namespace", "mcsched-system"])?;
    assert_eq!(rendered.len(), 26);
    let committed =
        std::fs::read_to_string(mcsched_e2e::repo_root().join("manifests/install.yaml"))?;
    assert_same(
        rendered.clone(),
        objects(&committed)?,
        "manifests/install.yaml",
    );
    assert_same(rendered, cli(&[])?, "install --dry-run=client");
    Ok(())
}

#[test]
fn values_render_as_the_flags_they_stand_for() -> anyhow::Result<()> {
    let home = tempfile::tempdir()?;
    // Replicas (a PodDisruptionBudget and anti-affinity come with them), node selector.
    assert_same(
        chart(
            home.path(),
            &[
                "-n",
                "mcsched-system",
                "--set",
                "replicas=3",
                "--set",
                r"nodeSelector.kubernetes\.io/hostname=node-r",
            ],
        )?,
        cli(&[
            "--replicas",
            "3",
            "--node-selector",
            "kubernetes.io/hostname=node-r",
        ])?,
        "replicas, nodeSelector",
    );
    // Namespace, image and scheduler name (the default configuration's profile and Lease).
    assert_same(
        chart(
            home.path(),
            &[
                "-n",
                "team-sched",
                "--set",
                "image.repository=registry.local/agent",
                "--set",
                "image.tag=dev",
                "--set",
                "schedulerName=multi",
            ],
        )?,
        cli(&[
            "-n",
            "team-sched",
            "--image",
            "registry.local/agent:dev",
            "--scheduler-name",
            "multi",
        ])?,
        "namespace, image, schedulerName",
    );
    // A configuration of one's own: its Lease in the Role, or none without leader election.
    for (lease, config) in [
        (
            "elsewhere",
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nleaderElection:\n  resourceName: elsewhere\n  resourceNamespace: mcsched-system\nprofiles:\n- schedulerName: one\n- schedulerName: two\n",
        ),
        (
            "",
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nleaderElection:\n  leaderElect: false\nprofiles:\n- schedulerName: solo\n",
        ),
    ] {
        let file = home.path().join("config.yaml");
        std::fs::write(&file, config)?;
        let file = file.display().to_string();
        let rendered = chart(
            home.path(),
            &[
                "-n",
                "mcsched-system",
                "--set-file",
                &format!("config={file}"),
            ],
        )?;
        let role = find(&rendered, "Role", keys::AGENT_NAME);
        let names: Vec<&Value> = role["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .filter(|r| r["resources"] == json!(["leases"]))
            .flat_map(|r| r["resourceNames"].as_array().into_iter().flatten())
            .collect();
        if lease.is_empty() {
            assert!(names.is_empty(), "{names:?}");
        } else {
            assert_eq!(names, [&json!(lease)]);
        }
        assert_same(rendered, cli(&["--config", &file])?, "config");
    }

    // What the CLI has no flag for: in the pod template as given.
    let values = home.path().join("values.yaml");
    std::fs::write(
        &values,
        r#"
image: {pullPolicy: Always}
resources: {requests: {cpu: 250m}, limits: {memory: 1Gi}}
tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/os, operator: In, values: [linux]}]}]}}}
replicas: 2
namespace: {create: false}
"#,
    )?;
    let rendered = chart(
        home.path(),
        &["-n", "mcsched-system", "-f", &values.display().to_string()],
    )?;
    assert!(rendered.iter().all(|o| o["kind"] != "Namespace"));
    let pod = &find(&rendered, "Deployment", keys::AGENT_NAME)["spec"]["template"]["spec"];
    assert_eq!(pod["containers"][0]["imagePullPolicy"], "Always");
    assert_eq!(
        pod["containers"][0]["resources"],
        // Merged into the defaults, as Helm merges maps (`memory: null` would drop it).
        json!({"requests": {"cpu": "250m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}})
    );
    assert_eq!(
        pod["tolerations"],
        json!([{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}])
    );
    // One's own affinity replaces the replicas' anti-affinity.
    assert!(pod["affinity"]["podAntiAffinity"].is_null());
    assert_eq!(
        pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchExpressions"][0]["key"],
        "kubernetes.io/os"
    );
    Ok(())
}

#[test]
fn cert_manager_serves_the_certificate_and_injects_the_ca() -> anyhow::Result<()> {
    let home = tempfile::tempdir()?;
    let default = chart(home.path(), &["-n", "mcsched-system"])?;
    let rendered = chart(
        home.path(),
        &["-n", "mcsched-system", "--set", "tls.source=cert-manager"],
    )?;
    let api = find(&rendered, "APIService", keys::API_SERVICE_NAME);
    assert_eq!(
        api["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "mcsched-system/mcsched-agent"
    );
    assert!(api["spec"]["caBundle"].is_null());
    let cert = find(&rendered, "Certificate", "mcsched-agent");
    assert_eq!(cert["spec"]["secretName"], "mcsched-agent-tls");
    // The name the API server's aggregator checks: the Service of the APIService.
    assert!(
        cert["spec"]["dnsNames"]
            .as_array()
            .expect("dnsNames")
            .contains(&json!("mcsched-api.mcsched-system.svc"))
    );
    assert_eq!(
        cert["spec"]["issuerRef"],
        json!({"name": "mcsched-agent-selfsigned", "kind": "Issuer", "group": "cert-manager.io"})
    );
    assert!(
        find(&rendered, "Issuer", "mcsched-agent-selfsigned")["spec"]["selfSigned"].is_object()
    );
    // The agent serves the Secret's files: with --tls-cert-file it leaves caBundle to
    // whoever manages it (its Publisher writes one only for a CA of its own).
    let pod = &find(&rendered, "Deployment", keys::AGENT_NAME)["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["args"],
        json!([
            "--config",
            "/etc/mcsched/config.yaml",
            "--tls-cert-file",
            "/etc/mcsched-tls/tls.crt",
            "--tls-private-key-file",
            "/etc/mcsched-tls/tls.key"
        ])
    );
    assert!(
        pod["volumes"]
            .as_array()
            .expect("volumes")
            .contains(&json!({"name": "tls", "secret": {"secretName": "mcsched-agent-tls"}}))
    );
    assert_eq!(rendered.len(), default.len() + 2);
    // One's own issuer: no Issuer rendered.
    let rendered = chart(
        home.path(),
        &[
            "-n",
            "mcsched-system",
            "--set",
            "tls.source=cert-manager",
            "--set",
            "tls.certManager.issuerRef.name=corp-ca",
            "--set",
            "tls.certManager.issuerRef.kind=ClusterIssuer",
        ],
    )?;
    assert!(rendered.iter().all(|o| o["kind"] != "Issuer"));
    assert_eq!(
        find(&rendered, "Certificate", "mcsched-agent")["spec"]["issuerRef"],
        json!({"name": "corp-ca", "kind": "ClusterIssuer"})
    );
    // Anything else is refused.
    let out = helm(home.path())?
        .args([
            "template",
            "mcsched",
            "charts/mcsched",
            "--set",
            "tls.source=self",
        ])
        .output()?;
    assert!(!out.status.success());
    assert!(
        text(&out).contains("tls.source: \"self\" is neither agent nor cert-manager"),
        "{}",
        text(&out)
    );
    Ok(())
}

/// Whether `live` holds everything `rendered` says (the API server adds defaults; numbers
/// compare by value, 0.0 and 0 alike).
fn contains(live: &Value, rendered: &Value, path: &str) -> Result<(), String> {
    match (live, rendered) {
        (Value::Object(l), Value::Object(r)) => r.iter().try_for_each(|(k, v)| {
            let p = format!("{path}.{k}");
            contains(l.get(k).unwrap_or(&Value::Null), v, &p)
        }),
        (Value::Array(l), Value::Array(r)) if l.len() == r.len() => l
            .iter()
            .zip(r)
            .enumerate()
            .try_for_each(|(i, (l, r))| contains(l, r, &format!("{path}[{i}]"))),
        (Value::Number(l), Value::Number(r)) if l.as_f64() == r.as_f64() => Ok(()),
        (l, r) if l == r => Ok(()),
        (l, r) => Err(format!("{path}: live {l}, rendered {r}")),
    }
}

/// Every object of `rendered` is on the API server as rendered, Helm's own label aside
/// (it sets app.kubernetes.io/managed-by: Helm on what it installs).
async fn on_the_server(client: &kube::Client, rendered: &[Value]) -> anyhow::Result<()> {
    for o in rendered {
        let mut want = o.clone();
        if let Some(labels) = want["metadata"]["labels"].as_object_mut() {
            labels.remove("app.kubernetes.io/managed-by");
        }
        let (group, version) = match o["apiVersion"].as_str().unwrap_or_default().split_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (
                String::new(),
                o["apiVersion"].as_str().unwrap_or_default().to_string(),
            ),
        };
        let gvk = kube::api::GroupVersionKind::gvk(
            &group,
            &version,
            o["kind"].as_str().unwrap_or_default(),
        );
        // One group at a time: the mcsched.io group answers 503 without an agent running,
        // so discovery of everything would fail.
        let (ar, caps) = kube::discovery::pinned_kind(client, &gvk)
            .await
            .with_context(|| format!("{gvk:?} not served"))?;
        let (_, _, ns, name) = key(o);
        let api: Api<DynamicObject> = if caps.scope == Scope::Namespaced {
            Api::namespaced_with(client.clone(), &ns, &ar)
        } else {
            Api::all_with(client.clone(), &ar)
        };
        let live = api
            .get_opt(&name)
            .await?
            .with_context(|| format!("{:?} not on the server", key(o)))?;
        let live = serde_json::to_value(&live)?;
        assert_eq!(
            live["metadata"]["annotations"]["meta.helm.sh/release-name"],
            "mcsched",
            "{:?} not Helm's",
            key(o)
        );
        contains(&live, &want, "").map_err(|e| anyhow::anyhow!("{:?}: {e}", key(o)))?;
    }
    Ok(())
}

async fn available(client: &kube::Client, replicas: i32) -> anyhow::Result<()> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), keys::SYSTEM_NAMESPACE);
    wait::until(
        Duration::from_secs(90),
        "the agent's Deployment available",
        || async {
            let d = deployments.get(keys::AGENT_NAME).await?;
            let status = d.status.clone().unwrap_or_default();
            let ready = status.ready_replicas.unwrap_or(0);
            let current = status.observed_generation >= d.metadata.generation;
            if current && ready == replicas && status.updated_replicas == Some(replicas) {
                Ok(Some(()))
            } else {
                Err(anyhow::anyhow!("{ready}/{replicas} ready: {status:?}"))
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn helm_installs_and_upgrades_on_a_control_plane() -> anyhow::Result<()> {
    let cp = ControlPlane::start("helm", ControlPlaneOptions::full()).await?;
    let kc = cp.kubeconfig.display().to_string();
    let home = tempfile::tempdir()?;
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
    // Helm keeps its release in the namespace, so it creates it (--create-namespace) and the
    // chart does not.
    let values = [
        "--set",
        "namespace.create=false",
        "--set",
        "image.repository=mcsched/agent",
        "--set",
        "image.tag=test",
    ];
    let out = helm(home.path())?
        .args(["install", "mcsched", "charts/mcsched", "--kubeconfig", &kc])
        .args(["-n", "mcsched-system", "--create-namespace"])
        .args(values)
        .args(["--wait", "--timeout", "120s"])
        .output()?;
    println!("{}", ok(out, "helm install")?);
    let mut rendered = chart(
        home.path(),
        &[&["-n", "mcsched-system"][..], &values].concat(),
    )?;
    assert_eq!(rendered.len(), 25);
    on_the_server(&cp.client, &rendered).await?;
    available(&cp.client, 1).await?;
    let out = mcsched_e2e::cli::run(&cp.kubeconfig, &["version"])?;
    assert!(
        text(&out).contains("agent: mcsched/agent:test in namespace mcsched-system (1/1 ready)"),
        "{}",
        text(&out)
    );

    // The leader's caBundle (written as the agent writes it) survives an upgrade: the chart
    // leaves the field out.
    let apiservices: Api<DynamicObject> = Api::all_with(
        cp.client.clone(),
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "apiregistration.k8s.io",
            "v1",
            "APIService",
        )),
    );
    let bundle = json!("Q0EgUEVN"); // "CA PEM"
    apiservices
        .patch(
            keys::API_SERVICE_NAME,
            &PatchParams {
                field_manager: Some("mcsched-agent".into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"spec": {"caBundle": bundle}})),
        )
        .await?;

    // Upgrade: two replicas, so a PodDisruptionBudget and anti-affinity too.
    let out = helm(home.path())?
        .args(["upgrade", "mcsched", "charts/mcsched", "--kubeconfig", &kc])
        .args([
            "-n",
            "mcsched-system",
            "--reuse-values",
            "--set",
            "replicas=2",
        ])
        .args(["--wait", "--timeout", "120s"])
        .output()?;
    println!("{}", ok(out, "helm upgrade")?);
    rendered = chart(
        home.path(),
        &[
            &["-n", "mcsched-system"][..],
            &values,
            &["--set", "replicas=2"],
        ]
        .concat(),
    )?;
    assert_eq!(rendered.len(), 26);
    on_the_server(&cp.client, &rendered).await?;
    available(&cp.client, 2).await?;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(cp.client.clone(), keys::SYSTEM_NAMESPACE);
    assert!(pdbs.get_opt(keys::AGENT_NAME).await?.is_some());
    assert_eq!(
        apiservices.get(keys::API_SERVICE_NAME).await?.data["spec"]["caBundle"],
        bundle
    );
    // The agent's rights, as install.rs checks them after the CLI's install.
    for args in [
        &[
            "update",
            "leases.coordination.k8s.io/mcsched",
            "-n",
            "mcsched-system",
        ][..],
        &["create", "pods", "--subresource=binding", "-n", "shop"],
        &[
            "patch",
            "apiservices.apiregistration.k8s.io/v1alpha1.mcsched.io",
        ],
    ] {
        assert!(
            mcsched_e2e::cli::can_i(
                &cp.kubeconfig,
                &[
                    &["--as", "system:serviceaccount:mcsched-system:mcsched-agent"][..],
                    args
                ]
                .concat()
            )?,
            "the agent cannot {args:?}"
        );
    }

    // Uninstall: everything the release made goes (the namespace is Helm's, not the chart's).
    let out = helm(home.path())?
        .args([
            "uninstall",
            "mcsched",
            "--kubeconfig",
            &kc,
            "-n",
            "mcsched-system",
            "--wait",
        ])
        .output()?;
    println!("{}", ok(out, "helm uninstall")?);
    let deployments: Api<Deployment> = Api::namespaced(cp.client.clone(), keys::SYSTEM_NAMESPACE);
    assert!(deployments.get_opt(keys::AGENT_NAME).await?.is_none());
    assert!(apiservices.get_opt(keys::API_SERVICE_NAME).await?.is_none());
    Ok(())
}

#[test]
fn kustomize_renders_install_yaml() -> anyhow::Result<()> {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(mcsched_e2e::repo_root().join("manifests"))
        .output()
        .context("kubectl must be on PATH")?;
    let rendered = objects(&ok(out, "kubectl kustomize manifests/")?)?;
    let committed =
        std::fs::read_to_string(mcsched_e2e::repo_root().join("manifests/install.yaml"))?;
    let (rendered, committed) = (by_key(&rendered), by_key(&objects(&committed)?));
    assert_eq!(
        rendered.keys().collect::<Vec<_>>(),
        committed.keys().collect::<Vec<_>>()
    );
    // Numbers by value: kustomize writes the CRDs' `minimum: 0.0` as 0.
    for (k, o) in &committed {
        let (r, o) = (&rendered[k], o);
        contains(r, o, "")
            .and_then(|()| contains(o, r, ""))
            .map_err(|e| anyhow::anyhow!("{k:?}: {e}"))?;
    }
    Ok(())
}
