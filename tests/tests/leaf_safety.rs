//! Leaf safety as `join` and `unjoin` leave it, on a real host and a real leaf: the leaf
//! account reads cluster-wide only what scheduling needs and writes only in the namespaces
//! the leaf's admin granted; its credential is an expiring TokenRequest token in a
//! kubeconfig of server, CA and token only; grants are added and removed by joining again;
//! nothing of the leaf owner's is taken over; unjoin removes only what carries this host's
//! mark, and refuses a join Secret that would make it run a program.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, Node, PersistentVolumeClaim, Pod, Secret, ServiceAccount,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use mcsched_e2e::cli::{can_i, run, text};
use mcsched_e2e::{ControlPlane, ControlPlaneOptions};
use mcsched_shared::{keys, leaf_kubeconfig};
use serde::de::DeserializeOwned;
use serde_json::json;

const LEAF_SA: &str = "system:serviceaccount:mcsched-system:mcsched-leaf";

fn join(host: &ControlPlane, leaf_kc: &str, extra: &[&str]) -> anyhow::Result<String> {
    let mut args = vec![
        "join",
        "cluster",
        "--name",
        "east",
        "--cluster-kubeconfig",
        leaf_kc,
    ];
    args.extend_from_slice(extra);
    let out = run(&host.kubeconfig, &args)?;
    anyhow::ensure!(out.status.success(), "join {extra:?}: {}", text(&out));
    Ok(text(&out))
}

/// `kubectl auth can-i ARGS --as` the leaf account, in the leaf.
fn leaf_may(leaf: &ControlPlane, args: &[&str]) -> anyhow::Result<bool> {
    let mut all = args.to_vec();
    all.extend(["--as", LEAF_SA]);
    can_i(&leaf.kubeconfig, &all)
}

async fn create<K>(client: &Client, ns: &str, obj: serde_json::Value) -> anyhow::Result<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(obj)?;
    Ok(Api::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &obj)
        .await?)
}

async fn create_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    Ok(())
}

/// The objects of one leaf namespace a test watches for changes.
struct InNamespace {
    pods: Api<Pod>,
    configmaps: Api<ConfigMap>,
    secrets: Api<Secret>,
    claims: Api<PersistentVolumeClaim>,
}

impl InNamespace {
    fn new(client: &Client, ns: &str) -> Self {
        InNamespace {
            pods: Api::namespaced(client.clone(), ns),
            configmaps: Api::namespaced(client.clone(), ns),
            secrets: Api::namespaced(client.clone(), ns),
            claims: Api::namespaced(client.clone(), ns),
        }
    }

    async fn version(&self, kind: &str, name: &str) -> anyhow::Result<Option<String>> {
        match kind {
            "pod" => version(&self.pods, name).await,
            "configmap" => version(&self.configmaps, name).await,
            "secret" => version(&self.secrets, name).await,
            "claim" => version(&self.claims, name).await,
            _ => anyhow::bail!("unknown kind {kind}"),
        }
    }

    /// Each object still there, not being deleted, at the same resourceVersion.
    async fn unchanged(
        &self,
        kept: &BTreeMap<(&'static str, &'static str), Option<String>>,
    ) -> anyhow::Result<()> {
        for ((kind, name), v) in kept {
            let now = self.version(kind, name).await?;
            anyhow::ensure!(
                v.is_some() && now == *v,
                "{kind} {name} changed: {v:?} -> {now:?}"
            );
        }
        Ok(())
    }
}

/// The object's resourceVersion when it is there and not being deleted.
async fn version<K>(api: &Api<K>, name: &str) -> anyhow::Result<Option<String>>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    Ok(api
        .get_opt(name)
        .await?
        .filter(|o| o.meta().deletion_timestamp.is_none())
        .and_then(|o| o.meta().resource_version.clone()))
}

/// Gone, or on its way (a namespace's or a claim's deletion takes kube-controller-manager
/// a moment).
async fn gone<K>(api: &Api<K>, name: &str) -> anyhow::Result<bool>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    Ok(api
        .get_opt(name)
        .await?
        .is_none_or(|o| o.meta().deletion_timestamp.is_some()))
}

/// Base64, standard or URL-safe, padded or not.
fn base64_decode(text: &str) -> anyhow::Result<Vec<u8>> {
    let mut bits = 0u32;
    let mut nbits = 0;
    let mut bytes = Vec::new();
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            b'=' => break,
            _ => anyhow::bail!("not base64: {c}"),
        };
        bits = (bits << 6) | u32::from(v);
        nbits += 6;
        if nbits >= 8 {
            nbits -= 8;
            bytes.push((bits >> nbits) as u8);
            bits &= (1 << nbits) - 1;
        }
    }
    Ok(bytes)
}

/// The claims of a JWT's payload, unverified.
fn jwt_claims(token: &str) -> anyhow::Result<serde_json::Value> {
    let payload = token.split('.').nth(1).context("not a JWT")?;
    Ok(serde_json::from_slice(&base64_decode(payload)?)?)
}

/// The CA a join kubeconfig holds, without whitespace.
fn join_ca(kc: &str) -> anyhow::Result<String> {
    let doc: serde_json::Value = mcsched_shared::yaml::from_str(kc)?;
    let data = doc["clusters"][0]["cluster"]["certificate-authority-data"]
        .as_str()
        .context("no certificate-authority-data")?;
    Ok(String::from_utf8(base64_decode(data)?)?
        .split_whitespace()
        .collect())
}

fn join_kubeconfig(secret: &Secret) -> anyhow::Result<String> {
    let raw = secret
        .data
        .as_ref()
        .and_then(|d| d.get(keys::KUBECONFIG_KEY))
        .context("no kubeconfig in the join Secret")?;
    Ok(String::from_utf8(raw.0.clone())?)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_leaf_account_is_least_privilege_and_unjoin_removes_only_what_is_marked()
-> anyhow::Result<()> {
    let (host, leaf) = tokio::try_join!(
        ControlPlane::start("safety-host", ControlPlaneOptions::default()),
        // kube-controller-manager finishes namespace and claim deletions.
        ControlPlane::start(
            "safety-leaf",
            ControlPlaneOptions {
                with_controller_manager: true,
                ..Default::default()
            }
        )
    )?;
    let leaf_kc = leaf.kubeconfig.to_string_lossy().into_owned();
    let dir = tempfile::tempdir()?;
    let host_id = Api::<Namespace>::all(host.client.clone())
        .get("kube-system")
        .await?
        .metadata
        .uid
        .context("no host id")?;
    let lc = &leaf.client;
    let leaf_ns: Api<Namespace> = Api::all(lc.clone());
    let host_nodes: Api<Node> = Api::all(host.client.clone());
    let host_secrets: Api<Secret> = Api::namespaced(host.client.clone(), keys::SYSTEM_NAMESPACE);

    // The leaf owner's: namespace apps with a ConfigMap and a Secret, and a RoleBinding
    // named as join's grant in namespace taken.
    create_namespace(lc, "apps").await?;
    create::<ConfigMap>(
        lc,
        "apps",
        json!({"metadata": {"name": "settings"}, "data": {"mode": "owner"}}),
    )
    .await?;
    create::<Secret>(
        lc,
        "apps",
        json!({"metadata": {"name": "creds"}, "stringData": {"password": "owner"}}),
    )
    .await?;
    create_namespace(lc, "taken").await?;
    create::<RoleBinding>(lc, "taken",
        json!({"metadata": {"name": keys::LEAF_ACCOUNT},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "User", "name": "alice"}]}),
    )
    .await?;
    let owner_cm: Api<ConfigMap> = Api::namespaced(lc.clone(), "apps");
    let owner_secret: Api<Secret> = Api::namespaced(lc.clone(), "apps");
    let settings_version = version(&owner_cm, "settings").await?;
    let creds_version = version(&owner_secret, "creds").await?;
    let apps_version = version(&leaf_ns, "apps").await?;

    // Refused before anything is created: a token shorter than the API server issues, a
    // system namespace by name, no grant at all.
    for (extra, expect) in [
        (
            vec!["--namespaces", "apps", "--token-lifetime", "5m"],
            "--token-lifetime 5m0s: must be at least 10m0s",
        ),
        (
            vec!["--namespaces", "apps,kube-system"],
            "--namespaces \"kube-system\": a system namespace",
        ),
        (vec!["--namespaces", "Apps"], "--namespaces \"Apps\""),
    ] {
        let mut args = vec![
            "join",
            "cluster",
            "--name",
            "east",
            "--cluster-kubeconfig",
            &leaf_kc,
        ];
        args.extend(extra);
        let out = run(&host.kubeconfig, &args)?;
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(text(&out).contains(expect), "{expect}: {}", text(&out));
    }
    assert!(version(&leaf_ns, keys::SYSTEM_NAMESPACE).await?.is_none());

    // A grant binding of that name that is the leaf owner's is not taken over, and the
    // whole run is undone.
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
            "apps,taken",
        ],
    )?;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(
            "RoleBinding taken/mcsched-leaf exists in the leaf and is not mcsched's grant"
        ),
        "{}",
        text(&out)
    );
    assert!(text(&out).contains("rolled back"), "{}", text(&out));
    let taken_rb = Api::<RoleBinding>::namespaced(lc.clone(), "taken")
        .get(keys::LEAF_ACCOUNT)
        .await?;
    assert_eq!(
        taken_rb.role_ref.name, "view",
        "the owner's binding unchanged"
    );
    assert!(
        gone(
            &Api::<RoleBinding>::namespaced(lc.clone(), "apps"),
            keys::LEAF_ACCOUNT
        )
        .await?
    );
    assert!(
        gone(
            &Api::<ServiceAccount>::namespaced(lc.clone(), keys::SYSTEM_NAMESPACE),
            keys::LEAF_ACCOUNT
        )
        .await?
    );
    assert!(gone(&Api::<ClusterRole>::all(lc.clone()), keys::LEAF_ACCOUNT).await?);
    assert!(gone(&Api::<ClusterRole>::all(lc.clone()), keys::LEAF_WRITER_ROLE).await?);
    assert!(gone(&leaf_ns, keys::SYSTEM_NAMESPACE).await?);
    assert!(gone(&host_nodes, "mcsched-east").await?);
    assert!(gone(&host_secrets, "mcsched-cluster-east").await?);
    mcsched_e2e::wait::until(
        Duration::from_secs(60),
        "the rolled-back namespace to go",
        || async {
            Ok(leaf_ns
                .get_opt(keys::SYSTEM_NAMESPACE)
                .await?
                .is_none()
                .then_some(()))
        },
    )
    .await?;

    // The join: writes in apps only, a 20-minute token.
    let before = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let shown = join(
        &host,
        &leaf_kc,
        &["--namespaces", "apps", "--token-lifetime", "20m"],
    )?;
    assert!(
        shown.contains("may write in namespace(s) apps only"),
        "{shown}"
    );
    let after = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();

    // What the leaf account may not do.
    for args in [
        &["list", "secrets", "--all-namespaces"][..],
        &["get", "secrets", "-n", "kube-system"],
        &["get", "secrets", "-n", "default"],
        &["list", "secrets", "-n", "apps"],
        &["watch", "secrets", "-n", "apps"],
        &["list", "configmaps", "-n", "apps"],
        &["create", "pods", "-n", "default"],
        &["create", "pods", "-n", "kube-system"],
        &["create", "pods", "-n", keys::SYSTEM_NAMESPACE],
        &["create", "secrets", "-n", keys::SYSTEM_NAMESPACE],
        &["create", "rolebindings", "-n", "apps"],
        &["create", "roles", "-n", "apps"],
        &["create", "clusterrolebindings"],
        &["bind", "clusterroles"],
        &["bind", "clusterroles", "-n", "apps"],
        &["escalate", "roles", "-n", "apps"],
        &["impersonate", "serviceaccounts", "-n", "apps"],
        &["create", "namespaces"],
        &["delete", "namespaces"],
        &["delete", "namespaces/apps"],
        &["patch", "nodes"],
        &["update", "nodes"],
        &["delete", "nodes"],
        &["create", "serviceaccounts", "-n", "apps"],
        &[
            "create",
            "serviceaccounts/default",
            "--subresource=token",
            "-n",
            keys::SYSTEM_NAMESPACE,
        ],
        &[
            "create",
            "serviceaccounts/default",
            "--subresource=token",
            "-n",
            "apps",
        ],
        &[
            "create",
            "serviceaccounts/mcsched-leaf",
            "--subresource=token",
            "-n",
            "apps",
        ],
        &["delete", "persistentvolumes"],
        &["deletecollection", "pods", "-n", "apps"],
    ] {
        assert!(!leaf_may(&leaf, args)?, "the leaf account may {args:?}");
    }
    // What pod sync, the leaf check and token renewal need.
    for args in [
        &["create", "pods", "-n", "apps"][..],
        &["delete", "pods", "-n", "apps"],
        &["get", "pods", "-n", "apps", "--subresource=status"],
        &["get", "configmaps", "-n", "apps"],
        &["create", "configmaps", "-n", "apps"],
        &["update", "configmaps", "-n", "apps"],
        &["get", "secrets", "-n", "apps"],
        &["create", "secrets", "-n", "apps"],
        &["delete", "secrets", "-n", "apps"],
        &["create", "persistentvolumeclaims", "-n", "apps"],
        &["create", "events", "-n", "apps"],
        &["list", "nodes"],
        &["watch", "pods", "--all-namespaces"],
        &["list", "persistentvolumes"],
        &["list", "persistentvolumeclaims", "--all-namespaces"],
        &["list", "storageclasses.storage.k8s.io"],
        &["list", "csinodes.storage.k8s.io"],
        &["get", "priorityclasses.scheduling.k8s.io"],
        &["list", "namespaces"],
        &[
            "create",
            "serviceaccounts/mcsched-leaf",
            "--subresource=token",
            "-n",
            keys::SYSTEM_NAMESPACE,
        ],
        &["create", "selfsubjectaccessreviews.authorization.k8s.io"],
    ] {
        assert!(leaf_may(&leaf, args)?, "the leaf account may not {args:?}");
    }

    // The join Secret: server, CA and an expiring token, no legacy token Secret.
    let secret = host_secrets.get("mcsched-cluster-east").await?;
    assert_eq!(
        secret
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::TOKEN_LIFETIME_ANNOTATION))
            .map(String::as_str),
        Some("20m0s")
    );
    let kc = join_kubeconfig(&secret)?;
    assert_eq!(leaf_kubeconfig::check(&kc), Ok(()), "{kc}");
    let leaf_ca: String = String::from_utf8(leaf.ca_pem()?)?
        .split_whitespace()
        .collect();
    assert_eq!(join_ca(&kc)?, leaf_ca, "the CA of the leaf's kubeconfig");
    let token = leaf_kubeconfig::token(&kc).context("no token")?;
    let claims = jwt_claims(&token)?;
    let exp = claims["exp"].as_u64().context("no exp claim")?;
    let iat = claims["iat"].as_u64().context("no iat claim")?;
    assert_eq!(exp - iat, 20 * 60, "{claims}");
    assert!(
        (before + 20 * 60..=after + 20 * 60).contains(&exp),
        "exp {exp} not within 20m of the join ({before}..{after})"
    );
    assert_eq!(
        claims["kubernetes.io"]["serviceaccount"]["name"],
        keys::LEAF_ACCOUNT,
        "{claims}"
    );
    let legacy: Vec<Secret> = Api::<Secret>::namespaced(lc.clone(), keys::SYSTEM_NAMESPACE)
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|s| s.type_.as_deref() == Some("kubernetes.io/service-account-token"))
        .collect();
    assert!(legacy.is_empty(), "no legacy token Secret: {legacy:?}");
    // The real token, not impersonation: its own SelfSubjectAccessReviews (how
    // `kubectl auth can-i` asks, and how the agent's leaf check asks) say the same.
    let kc_path = dir.path().join("leaf-account.yaml");
    std::fs::write(&kc_path, &kc)?;
    assert!(can_i(&kc_path, &["list", "nodes"])?);
    assert!(can_i(&kc_path, &["create", "pods", "-n", "apps"])?);
    assert!(!can_i(&kc_path, &["create", "pods", "-n", "web"])?);
    assert!(!can_i(&kc_path, &["list", "secrets", "--all-namespaces"])?);
    // The agent may write the renewed token into this join Secret, and no other.
    let agent = format!(
        "system:serviceaccount:{}:{}",
        keys::SYSTEM_NAMESPACE,
        keys::AGENT_NAME
    );
    for verb in ["get", "patch", "update"] {
        assert!(can_i(
            &host.kubeconfig,
            &[
                verb,
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
                verb,
                "secrets/mcsched-cluster-west",
                "-n",
                keys::SYSTEM_NAMESPACE,
                "--as",
                &agent
            ]
        )?);
    }
    assert!(!can_i(
        &host.kubeconfig,
        &[
            "list",
            "secrets",
            "-n",
            keys::SYSTEM_NAMESPACE,
            "--as",
            &agent
        ]
    )?);

    // As an earlier join left it: a never-expiring token Secret, revoked by joining again.
    create::<Secret>(
        lc,
        keys::SYSTEM_NAMESPACE,
        json!({"metadata": {"name": "mcsched-leaf-token",
                "labels": {keys::MANAGED_BY_LABEL: keys::MANAGED_BY_VALUE},
                "annotations": {"kubernetes.io/service-account.name": keys::LEAF_ACCOUNT}},
            "type": "kubernetes.io/service-account-token"}),
    )
    .await?;

    // Granting web later: joining again adds it (created, marked as this host's) ...
    let shown = join(
        &host,
        &leaf_kc,
        &["--namespaces", "apps,web", "--token-lifetime", "20m"],
    )?;
    assert!(
        shown.contains("legacy token Secret mcsched-system/mcsched-leaf-token removed"),
        "{shown}"
    );
    assert!(
        gone(
            &Api::<Secret>::namespaced(lc.clone(), keys::SYSTEM_NAMESPACE),
            "mcsched-leaf-token"
        )
        .await?
    );
    assert!(shown.contains("cluster east updated"), "{shown}");
    assert!(shown.contains("created web"), "{shown}");
    assert!(leaf_may(&leaf, &["create", "pods", "-n", "web"])?);
    assert!(leaf_may(&leaf, &["create", "pods", "-n", "apps"])?);
    let web = leaf_ns.get("web").await?;
    let labels = web.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get(keys::HOST_ID_LABEL), Some(&host_id));
    assert_eq!(
        labels.get(keys::MANAGED_CLUSTER_LABEL).map(String::as_str),
        Some("east")
    );
    // ... and without apps, removes apps's grant, leaving the namespace and its objects.
    // This time the leaf's kubeconfig names no CA and skips verification: join refuses it
    // unless told to, and then takes the one the leaf publishes.
    let no_ca: String = std::fs::read_to_string(&leaf.kubeconfig)?
        .lines()
        .map(
            |l| match l.trim_start().strip_prefix("certificate-authority-data:") {
                Some(_) => format!(
                    "{}insecure-skip-tls-verify: true\n",
                    &l[..l.len() - l.trim_start().len()]
                ),
                None => format!("{l}\n"),
            },
        )
        .collect();
    anyhow::ensure!(no_ca.contains("insecure-skip-tls-verify"), "{no_ca}");
    let no_ca_path = dir.path().join("leaf-no-ca.yaml");
    std::fs::write(&no_ca_path, no_ca)?;
    let refused = run(
        &host.kubeconfig,
        &[
            "join",
            "cluster",
            "--name",
            "east",
            "--cluster-kubeconfig",
            &no_ca_path.to_string_lossy(),
            "--namespaces",
            "web",
        ],
    )?;
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        text(&refused).contains("--unsafe-skip-ca-verification"),
        "{}",
        text(&refused)
    );
    let shown = join(
        &host,
        &no_ca_path.to_string_lossy(),
        &["--namespaces", "web", "--unsafe-skip-ca-verification"],
    )?;
    assert!(shown.contains("grant in namespace apps removed"), "{shown}");
    assert!(!leaf_may(&leaf, &["create", "pods", "-n", "apps"])?);
    assert!(!leaf_may(&leaf, &["get", "secrets", "-n", "apps"])?);
    assert!(leaf_may(&leaf, &["create", "pods", "-n", "web"])?);
    assert!(
        gone(
            &Api::<RoleBinding>::namespaced(lc.clone(), "apps"),
            keys::LEAF_ACCOUNT
        )
        .await?
    );
    assert_eq!(version(&leaf_ns, "apps").await?, apps_version);
    assert_eq!(version(&owner_cm, "settings").await?, settings_version);
    assert_eq!(version(&owner_secret, "creds").await?, creds_version);
    let secret = host_secrets.get("mcsched-cluster-east").await?;
    assert_eq!(
        secret
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::TOKEN_LIFETIME_ANNOTATION))
            .map(String::as_str),
        Some("1h0m0s"),
        "joining again sets the lifetime given (the default)"
    );
    let kc = join_kubeconfig(&secret)?;
    assert_eq!(join_ca(&kc)?, leaf_ca, "the CA of kube-root-ca.crt");
    assert!(!kc.contains("insecure"), "{kc}");
    let token = leaf_kubeconfig::token(&kc).context("no token")?;

    // In web: this host's synced copy and its objects, another host's copy of the same
    // name space, and the leaf owner's objects (one even labelled with this leaf's name).
    let ours = json!({keys::HOST_ID_LABEL: host_id, keys::MANAGED_CLUSTER_LABEL: "east"});
    let theirs = json!({keys::HOST_ID_LABEL: "another-host", keys::MANAGED_CLUSTER_LABEL: "east"});
    let cluster_only = json!({keys::MANAGED_CLUSTER_LABEL: "east"});
    create::<ConfigMap>(
        lc,
        "web",
        json!({"metadata": {"name": "cfg", "labels": ours}}),
    )
    .await?;
    create::<Secret>(
        lc,
        "web",
        json!({"metadata": {"name": "sec", "labels": ours}}),
    )
    .await?;
    create::<Secret>(
        lc,
        "web",
        json!({"metadata": {"name": "pull", "labels": ours}}),
    )
    .await?;
    create::<ConfigMap>(lc, "web", json!({"metadata": {"name": "owner-cfg"}})).await?;
    create::<Secret>(
        lc,
        "web",
        json!({"metadata": {"name": "owner-sec", "labels": cluster_only}}),
    )
    .await?;
    create::<Secret>(
        lc,
        "web",
        json!({"metadata": {"name": "their-sec", "labels": theirs}}),
    )
    .await?;
    let claim = |name: &str, labels: &serde_json::Value| {
        json!({"metadata": {"name": name, "labels": labels},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    };
    create::<PersistentVolumeClaim>(lc, "web", claim("data", &ours)).await?;
    create::<PersistentVolumeClaim>(lc, "web", claim("owner-data", &json!({}))).await?;
    let pod = |name: &str, labels: &serde_json::Value| {
        json!({"metadata": {"name": name, "labels": labels},
            "spec": {"imagePullSecrets": [{"name": "pull"}],
                "containers": [{"name": "c", "image": "pause",
                    "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "p"}}}],
                    "envFrom": [{"secretRef": {"name": "owner-sec"}}]}],
                "volumes": [{"name": "cfg", "configMap": {"name": "cfg"}},
                    {"name": "o", "configMap": {"name": "owner-cfg"}},
                    {"name": "t", "secret": {"secretName": "their-sec"}}]}})
    };
    create::<Pod>(lc, "web", pod("copy", &ours)).await?;
    create::<Pod>(lc, "web", pod("their-copy", &theirs)).await?;
    create::<Pod>(lc, "web", pod("owner-pod", &cluster_only)).await?;
    let web = InNamespace::new(lc, "web");
    let mut kept = BTreeMap::new();
    for (kind, name) in [
        ("pod", "their-copy"),
        ("pod", "owner-pod"),
        ("configmap", "owner-cfg"),
        ("secret", "owner-sec"),
        ("secret", "their-sec"),
        ("claim", "owner-data"),
    ] {
        kept.insert((kind, name), web.version(kind, name).await?);
    }

    // A join Secret rewritten with an exec plugin: unjoin refuses it, runs nothing and
    // changes nothing.
    let marker = dir.path().join("exec-ran");
    let tampered = kc.replace(
        &format!("token: {token}"),
        &format!(
            "exec: {{apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, 'touch {}'], interactiveMode: Never}}",
            marker.display()
        ),
    );
    assert_ne!(tampered, kc);
    let original = secret.data.clone();
    host_secrets
        .patch(
            "mcsched-cluster-east",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"data": {keys::KUBECONFIG_KEY: ByteString(tampered.into_bytes())}}),
            ),
        )
        .await?;
    let out = run(&host.kubeconfig, &["unjoin", "cluster", "east", "--yes"])?;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("users[0].user.exec: not allowed in a leaf kubeconfig"),
        "{}",
        text(&out)
    );
    assert!(text(&out).contains("nothing was changed"), "{}", text(&out));
    assert!(!marker.exists(), "the exec plugin ran");
    let node = host_nodes.get("mcsched-east").await?;
    assert!(
        node.spec.and_then(|s| s.unschedulable).is_none(),
        "not cordoned"
    );
    assert!(version(&web.pods, "copy").await?.is_some());
    host_secrets
        .patch(
            "mcsched-cluster-east",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": original})),
        )
        .await?;

    // Unjoin with the leaf account's own token (no admin kubeconfig): this host's copy and
    // the objects it refers to go, nothing else; the account and its grants stay, said so.
    let out = run(&host.kubeconfig, &["unjoin", "cluster", "east", "--yes"])?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("pass --cluster-kubeconfig"),
        "{}",
        text(&out)
    );
    assert!(gone(&web.pods, "copy").await?);
    assert!(gone(&web.configmaps, "cfg").await?);
    assert!(gone(&web.secrets, "sec").await?);
    assert!(gone(&web.secrets, "pull").await?);
    assert!(gone(&web.claims, "data").await?);
    web.unchanged(&kept).await?;
    assert!(version(&leaf_ns, "web").await?.is_some());
    assert!(
        version(
            &Api::<ServiceAccount>::namespaced(lc.clone(), keys::SYSTEM_NAMESPACE),
            keys::LEAF_ACCOUNT
        )
        .await?
        .is_some()
    );
    assert!(gone(&host_nodes, "mcsched-east").await?);
    assert!(gone(&host_secrets, "mcsched-cluster-east").await?);
    assert!(
        gone(
            &Api::<Role>::namespaced(host.client.clone(), keys::SYSTEM_NAMESPACE),
            "mcsched-virtual-node-east"
        )
        .await?
    );

    // Joined again, and another host holding a grant of the same account: the admin's
    // unjoin removes this host's grant and namespace contents, keeps the shared account.
    join(&host, &leaf_kc, &["--namespaces", "web,batch"])?;
    create_namespace(lc, "theirs").await?;
    create::<RoleBinding>(lc, "theirs",
        json!({"metadata": {"name": keys::LEAF_ACCOUNT,
                "labels": {keys::MANAGED_BY_LABEL: keys::MANAGED_BY_VALUE, keys::HOST_ID_LABEL: "another-host"}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": keys::LEAF_WRITER_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": keys::LEAF_ACCOUNT, "namespace": keys::SYSTEM_NAMESPACE}]}),
    )
    .await?;
    let out = mcsched_e2e::cli::unjoin_as_leaf_admin(&host.kubeconfig, "east", &leaf.kubeconfig)?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("still granted to another host (id another-host)"),
        "{}",
        text(&out)
    );
    assert!(
        text(&out).contains("leaf namespace web kept"),
        "web holds the owner's and another host's objects: {}",
        text(&out)
    );
    web.unchanged(&kept).await?;
    assert!(version(&leaf_ns, "web").await?.is_some());
    assert!(gone(&leaf_ns, "batch").await?, "join created batch, empty");
    assert_eq!(
        version(&leaf_ns, "apps").await?,
        apps_version,
        "never mcsched's"
    );
    assert!(
        gone(
            &Api::<RoleBinding>::namespaced(lc.clone(), "web"),
            keys::LEAF_ACCOUNT
        )
        .await?
    );
    assert!(
        version(
            &Api::<RoleBinding>::namespaced(lc.clone(), "theirs"),
            keys::LEAF_ACCOUNT
        )
        .await?
        .is_some()
    );
    assert!(
        version(
            &Api::<ServiceAccount>::namespaced(lc.clone(), keys::SYSTEM_NAMESPACE),
            keys::LEAF_ACCOUNT
        )
        .await?
        .is_some()
    );
    assert!(
        version(&Api::<ClusterRole>::all(lc.clone()), keys::LEAF_WRITER_ROLE)
            .await?
            .is_some()
    );

    // The other host gone too: joined once more with every namespace (a warning), then
    // the admin's unjoin removes everything join created.
    Api::<RoleBinding>::namespaced(lc.clone(), "theirs")
        .delete(keys::LEAF_ACCOUNT, &Default::default())
        .await?;
    let shown = join(&host, &leaf_kc, &["--all-namespaces"])?;
    assert!(
        shown.contains("--all-namespaces: the host may create pods"),
        "{shown}"
    );
    assert!(leaf_may(&leaf, &["create", "pods", "-n", "default"])?);
    assert!(leaf_may(&leaf, &["create", "namespaces"])?);
    assert!(!leaf_may(&leaf, &["delete", "namespaces"])?);
    assert!(!leaf_may(&leaf, &["list", "secrets", "--all-namespaces"])?);
    assert!(!leaf_may(&leaf, &["create", "rolebindings", "-n", "apps"])?);
    let out = mcsched_e2e::cli::unjoin_as_leaf_admin(&host.kubeconfig, "east", &leaf.kubeconfig)?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    for (kind, gone_now) in [
        (
            "ClusterRoleBinding mcsched-leaf-writer",
            gone(
                &Api::<ClusterRoleBinding>::all(lc.clone()),
                keys::LEAF_WRITER_ROLE,
            )
            .await?,
        ),
        (
            "ClusterRoleBinding mcsched-leaf",
            gone(
                &Api::<ClusterRoleBinding>::all(lc.clone()),
                keys::LEAF_ACCOUNT,
            )
            .await?,
        ),
        (
            "ClusterRole mcsched-leaf",
            gone(&Api::<ClusterRole>::all(lc.clone()), keys::LEAF_ACCOUNT).await?,
        ),
        (
            "ClusterRole mcsched-leaf-writer",
            gone(&Api::<ClusterRole>::all(lc.clone()), keys::LEAF_WRITER_ROLE).await?,
        ),
        (
            "Role mcsched-leaf-token",
            gone(
                &Api::<Role>::namespaced(lc.clone(), keys::SYSTEM_NAMESPACE),
                keys::LEAF_TOKEN_ROLE,
            )
            .await?,
        ),
        (
            "RoleBinding mcsched-leaf-token",
            gone(
                &Api::<RoleBinding>::namespaced(lc.clone(), keys::SYSTEM_NAMESPACE),
                keys::LEAF_TOKEN_ROLE,
            )
            .await?,
        ),
        (
            "ServiceAccount mcsched-leaf",
            gone(
                &Api::<ServiceAccount>::namespaced(lc.clone(), keys::SYSTEM_NAMESPACE),
                keys::LEAF_ACCOUNT,
            )
            .await?,
        ),
        (
            "Namespace mcsched-system",
            gone(&leaf_ns, keys::SYSTEM_NAMESPACE).await?,
        ),
    ] {
        assert!(gone_now, "{kind} left in the leaf: {}", text(&out));
    }
    assert_eq!(version(&leaf_ns, "apps").await?, apps_version);
    assert_eq!(version(&owner_cm, "settings").await?, settings_version);
    assert_eq!(version(&owner_secret, "creds").await?, creds_version);
    assert_eq!(
        Api::<RoleBinding>::namespaced(lc.clone(), "taken")
            .get(keys::LEAF_ACCOUNT)
            .await?
            .role_ref
            .name,
        "view"
    );
    Ok(())
}

/// Pod Security in the leaf, from join to the leaf check: the namespace join creates
/// enforces `baseline` (labels), a leaf owner's namespace keeps its own labels (here
/// `restricted`), and the agent judges each copy by its namespace's level as the leaf's
/// admission would. A host pod asking for `privileged: true` and `hostPath: /` in a host
/// namespace where nothing forbids it stays Pending, with the leaf's refusal in its
/// FailedScheduling event and in `explain`, and nothing is created in the leaf; the same
/// pod without them goes. Joining again with `--pod-security privileged` relabels only the
/// namespace join created, and the refused pod goes too.
#[tokio::test(flavor = "multi_thread")]
async fn leaf_copies_run_no_more_privileged_than_the_leaf_namespace_allows() -> anyhow::Result<()> {
    use k8s_openapi::api::events::v1::Event;
    use kube::api::ListParams;
    use mcsched_e2e::wait;

    let timeout = Duration::from_secs(60);
    let cps =
        ControlPlane::start_many(&["psa-host", "psa-east"], ControlPlaneOptions::full()).await?;
    let [host, leaf]: [ControlPlane; 2] = cps
        .try_into()
        .map_err(|_| anyhow::anyhow!("expected two control planes"))?;
    mcsched_e2e::objects::ready_node(
        &leaf.client,
        "east-1",
        "4",
        "8Gi",
        json!({"kubernetes.io/hostname": "east-1"}),
    )
    .await?;
    let lc = &leaf.client;
    let leaf_ns: Api<Namespace> = Api::all(lc.clone());
    // The leaf owner's namespace, with a level of its own.
    let owned: Namespace = serde_json::from_value(json!({"metadata": {"name": "owned",
        "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}))?;
    leaf_ns.create(&PostParams::default(), &owned).await?;
    let owned_version = version(&leaf_ns, "owned").await?;

    let kc = host.kubeconfig.clone();
    let cli = |args: &[&str]| -> anyhow::Result<String> {
        let out = run(&kc, args)?;
        anyhow::ensure!(out.status.success(), "{args:?}: {}", text(&out));
        Ok(text(&out))
    };
    cli(&["install", "--image", "mcsched/agent:test"])?;
    let leaf_kc = leaf.kubeconfig.to_string_lossy().into_owned();
    let joined = join(&host, &leaf_kc, &["--namespaces", "shop,owned"])?;
    assert!(
        joined.contains("created shop with Pod Security baseline"),
        "{joined}"
    );
    assert!(
        joined.contains("namespace owned is not one join created: its Pod Security labels stay as they are (enforce: restricted)"),
        "{joined}"
    );
    let level = |ns: Namespace| {
        let labels = ns.metadata.labels.unwrap_or_default();
        (
            labels.get("pod-security.kubernetes.io/enforce").cloned(),
            labels
                .get("pod-security.kubernetes.io/enforce-version")
                .cloned(),
        )
    };
    assert_eq!(
        level(leaf_ns.get("shop").await?),
        (Some("baseline".into()), Some("latest".into()))
    );
    assert_eq!(version(&leaf_ns, "owned").await?, owned_version);

    let agent = mcsched_e2e::api::agent_as_installed(&host, &[]).await?;
    let nodes: Api<Node> = Api::all(host.client.clone());
    mcsched_e2e::objects::wait_ready(&nodes, "mcsched-east", "True", timeout)
        .await
        .map_err(|e| e.context(agent.logs()))?;

    // Host namespaces that forbid nothing; the leaf is the only node.
    for ns in ["shop", "owned"] {
        create_namespace(&host.client, ns).await?;
    }
    let pod = |name: &str, ns: &str, privileged: bool| -> anyhow::Result<Pod> {
        let mut p = json!({
            "metadata": {"name": name, "namespace": ns},
            "spec": {"schedulerName": "mcsched",
                "containers": [{"name": "app", "image": "pause",
                    "resources": {"requests": {"cpu": "100m"}}}]}});
        if privileged {
            p["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
            p["spec"]["containers"][0]["volumeMounts"] =
                json!([{"name": "root", "mountPath": "/host"}]);
            p["spec"]["volumes"] = json!([{"name": "root", "hostPath": {"path": "/"}}]);
        }
        Ok(serde_json::from_value(p)?)
    };
    let host_shop: Api<Pod> = Api::namespaced(host.client.clone(), "shop");
    let leaf_shop: Api<Pod> = Api::namespaced(lc.clone(), "shop");
    host_shop
        .create(&PostParams::default(), &pod("rooted", "shop", true)?)
        .await?;
    let refusal = "leaf cluster east: pods in namespace shop violate PodSecurity \"baseline:latest\": \
                   hostPath volumes (volume \"root\"), \
                   privileged (container \"app\" must not set securityContext.privileged=true)";
    // A FailedScheduling repeated for the same pod only counts up the first event's series
    // (the first may say "asking leaf cluster ..."): the PodScheduled condition carries
    // the latest message.
    let events: Api<Event> = Api::namespaced(host.client.clone(), "shop");
    wait::until(
        timeout,
        "FailedScheduling naming the Pod Security refusal",
        || async {
            let lp = ListParams::default().fields("regarding.name=rooted");
            let condition = host_shop
                .get("rooted")
                .await?
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .filter(|c| c.type_ == "PodScheduled" && c.status == "False")
                .filter_map(|c| c.message);
            Ok(events
                .list(&lp)
                .await?
                .items
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some("FailedScheduling"))
                .filter_map(|e| e.note)
                .chain(condition)
                .find(|n| n.contains(refusal)))
        },
    )
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let explained = cli(&["explain", "pod", "rooted", "-n", "shop"])?;
    assert!(
        explained.contains("mcsched-east") && explained.contains(refusal),
        "{explained}"
    );
    let node_of = |p: Pod| p.spec.and_then(|s| s.node_name);
    assert_eq!(node_of(host_shop.get("rooted").await?), None);
    assert!(
        leaf_shop.get_opt("rooted").await?.is_none(),
        "a copy in the leaf"
    );

    // Without the privilege, the same pod goes.
    host_shop
        .create(&PostParams::default(), &pod("plain", "shop", false)?)
        .await?;
    wait::until(timeout, "shop/plain copied into the leaf", || async {
        Ok(leaf_shop.get_opt("plain").await?)
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    assert_eq!(
        node_of(host_shop.get("plain").await?).as_deref(),
        Some("mcsched-east")
    );

    // The leaf owner's level is what counts in its namespace: restricted refuses even
    // the plain pod.
    let host_owned: Api<Pod> = Api::namespaced(host.client.clone(), "owned");
    host_owned
        .create(&PostParams::default(), &pod("plain", "owned", false)?)
        .await?;
    let owned_refusal = "leaf cluster east: pods in namespace owned violate PodSecurity \"restricted:latest\": \
                         allowPrivilegeEscalation != false";
    let shown = wait::until(timeout, "owned/plain refused by restricted", || async {
        let out = run(&kc, &["explain", "pod", "plain", "-n", "owned"])?;
        Ok(Some(text(&out)).filter(|t| t.contains(owned_refusal)))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    assert!(shown.contains("mcsched-east"), "{shown}");

    // Joining again with privileged relabels the namespace join created, not the owner's;
    // the namespace's change retries the refused pod, which goes.
    let rejoined = join(
        &host,
        &leaf_kc,
        &["--namespaces", "shop,owned", "--pod-security", "privileged"],
    )?;
    assert!(
        rejoined.contains("namespace shop now enforces Pod Security privileged"),
        "{rejoined}"
    );
    assert_eq!(
        level(leaf_ns.get("shop").await?),
        (Some("privileged".into()), Some("latest".into()))
    );
    assert_eq!(version(&leaf_ns, "owned").await?, owned_version);
    wait::until(timeout, "shop/rooted copied into the leaf", || async {
        Ok(leaf_shop.get_opt("rooted").await?)
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    assert_eq!(
        node_of(host_shop.get("rooted").await?).as_deref(),
        Some("mcsched-east")
    );
    assert_eq!(node_of(host_owned.get("plain").await?), None);
    Ok(())
}
