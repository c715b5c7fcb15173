//! The leaf account's tokens and where it may write, as `join` leaves a real leaf: with
//! the leaf token itself, a TokenRequest longer than join's lifetime, bound to nothing or
//! for other audiences is refused, the renewer's request is not; deleting the token Secret
//! (joining again, unjoin) revokes every token bound to it; `--all-namespaces` never
//! reaches the leaf's system namespaces; and the leaf account never updates, patches or
//! deletes what pod sync did not create, so no write answers with the body of a Secret it
//! may not read (joining again brings the policy to a leaf without it, unjoin removes it).

use std::time::Duration;

use k8s_openapi::api::authentication::v1::{
    BoundObjectReference, TokenRequest, TokenRequestSpec, TokenReview, TokenReviewSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, ServiceAccount};
use kube::api::{ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use mcsched_agent::multicluster::token_renewal;
use mcsched_e2e::cli::{can_i, run, text};
use mcsched_e2e::wait::until;
use mcsched_e2e::{ControlPlane, ControlPlaneOptions};
use mcsched_shared::{keys, leaf_kubeconfig};
use serde_json::json;

const LEAF_SA: &str = "system:serviceaccount:mcsched-system:mcsched-leaf";
/// How long the leaf's admission and token caches may take to see a change.
const SETTLE: Duration = Duration::from_secs(30);

fn join(host: &ControlPlane, leaf: &ControlPlane, extra: &[&str]) -> anyhow::Result<String> {
    let leaf_kc = leaf.kubeconfig.to_string_lossy().into_owned();
    join_with(host, &leaf_kc, extra)
}

fn join_with(host: &ControlPlane, leaf_kc: &str, extra: &[&str]) -> anyhow::Result<String> {
    let out = join_output(host, leaf_kc, extra)?;
    anyhow::ensure!(out.status.success(), "join failed: {}", text(&out));
    Ok(text(&out))
}

fn join_output(
    host: &ControlPlane,
    leaf_kc: &str,
    extra: &[&str],
) -> anyhow::Result<std::process::Output> {
    let mut args = vec![
        "join",
        "cluster",
        "--name",
        "east",
        "--cluster-kubeconfig",
        leaf_kc,
    ];
    args.extend(extra);
    run(&host.kubeconfig, &args)
}

/// The leaf admin's kubeconfig with its cluster entry changed by `edit`, in `dir`.
fn edited_kubeconfig(
    leaf: &ControlPlane,
    dir: &std::path::Path,
    name: &str,
    edit: impl Fn(&mut serde_json::Map<String, serde_json::Value>),
) -> anyhow::Result<String> {
    let mut doc: serde_json::Value =
        mcsched_shared::yaml::from_str(&std::fs::read_to_string(&leaf.kubeconfig)?)?;
    for c in doc["clusters"]
        .as_array_mut()
        .ok_or_else(|| anyhow::anyhow!("no clusters in the leaf's kubeconfig"))?
    {
        if let Some(entry) = c["cluster"].as_object_mut() {
            edit(entry);
        }
    }
    let path = dir.join(name);
    std::fs::write(&path, mcsched_shared::yaml::to_string(&doc)?)?;
    Ok(path.to_string_lossy().into_owned())
}

/// The kubeconfig in the host's join Secret.
async fn join_kubeconfig(host: &ControlPlane) -> anyhow::Result<String> {
    let secret = Api::<Secret>::namespaced(host.client.clone(), keys::SYSTEM_NAMESPACE)
        .get(&keys::cluster_secret_name("east"))
        .await?;
    let raw = secret
        .data
        .and_then(|d| d.get(keys::KUBECONFIG_KEY).cloned())
        .ok_or_else(|| anyhow::anyhow!("no kubeconfig in the join Secret"))?;
    Ok(String::from_utf8(raw.0)?)
}

async fn client_of(kubeconfig: &str) -> anyhow::Result<Client> {
    let config = Config::from_custom_kubeconfig(
        Kubeconfig::from_yaml(kubeconfig)?,
        &KubeConfigOptions::default(),
    )
    .await?;
    Ok(Client::try_from(config)?)
}

/// A TokenRequest for the leaf account made with `client`: the token, or the refusal's
/// status code and message.
async fn request(
    client: &Client,
    r: &TokenRequest,
) -> anyhow::Result<Result<String, (u16, String)>> {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), keys::SYSTEM_NAMESPACE);
    match api
        .create_token_request(keys::LEAF_ACCOUNT, &PostParams::default(), r)
        .await
    {
        Ok(answer) => Ok(Ok(answer.status.and_then(|s| s.token).unwrap_or_default())),
        Err(kube::Error::Api(s)) => Ok(Err((s.code, s.message))),
        Err(e) => Err(e.into()),
    }
}

/// Whether the leaf's API server still authenticates `token` (a TokenReview as its admin).
async fn authenticates(leaf: &ControlPlane, token: &str) -> anyhow::Result<bool> {
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: token.to_string(),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<TokenReview>::all(leaf.client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(answer.status.and_then(|s| s.authenticated) == Some(true))
}

/// The `kubernetes.io.secret.name` claim of a token.
fn bound_secret(token: &str) -> Option<String> {
    let r = token_renewal::renewal_request(token, Duration::from_secs(600));
    r.spec.and_then(|s| s.bound_object_ref).and_then(|b| b.name)
}

async fn token_secrets(leaf: &ControlPlane) -> anyhow::Result<Vec<String>> {
    Ok(
        Api::<Secret>::namespaced(leaf.client.clone(), keys::SYSTEM_NAMESPACE)
            .list(&ListParams::default().labels(&format!("{}=true", keys::LEAF_TOKEN_SECRET_LABEL)))
            .await?
            .items
            .into_iter()
            .filter_map(|s| s.metadata.name)
            .collect(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn leaf_tokens_are_bounded_bound_and_revoked_with_their_secret() -> anyhow::Result<()> {
    let (host, leaf) = tokio::try_join!(
        ControlPlane::start("tokens-host", ControlPlaneOptions::default()),
        ControlPlane::start("tokens-leaf", ControlPlaneOptions::default())
    )?;
    join(
        &host,
        &leaf,
        &["--namespaces", "default", "--token-lifetime", "1h"],
    )?;
    // A Secret of the leaf's own in the account's namespace, not join's.
    let theirs: Secret = serde_json::from_value(json!({"metadata": {"name": "not-joins"}}))?;
    Api::<Secret>::namespaced(leaf.client.clone(), keys::SYSTEM_NAMESPACE)
        .create(&PostParams::default(), &theirs)
        .await?;
    let kubeconfig = join_kubeconfig(&host).await?;
    let first = leaf_kubeconfig::token(&kubeconfig).unwrap_or_default();
    let secret = bound_secret(&first)
        .ok_or_else(|| anyhow::anyhow!("join's token is bound to no Secret"))?;
    assert!(
        secret.starts_with(keys::LEAF_TOKEN_SECRET_PREFIX),
        "{secret}"
    );
    assert_eq!(token_secrets(&leaf).await?, std::slice::from_ref(&secret));
    let as_leaf = client_of(&kubeconfig).await?;

    // What the renewer sends, and variations of it.
    let renewal = token_renewal::renewal_request(&first, Duration::from_secs(3600));
    let with = |f: &dyn Fn(&mut TokenRequestSpec)| {
        let mut r = renewal.clone();
        f(r.spec.get_or_insert_with(Default::default));
        r
    };
    let ten_years = with(&|s| s.expiration_seconds = Some(10 * 365 * 24 * 3600));
    let a_bit_longer = with(&|s| s.expiration_seconds = Some(3601));
    let unbound = with(&|s| s.bound_object_ref = None);
    let unbound_default = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let other_audience = with(&|s| s.audiences = Some(vec!["vault".into()]));
    let other_secret = with(&|s| {
        s.bound_object_ref = Some(BoundObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Secret".into()),
            name: Some("not-joins".into()),
            uid: None,
        })
    });
    // The policy takes a moment to be in force after join: the ten-year one is asked until
    // refused (never, without the policy).
    let (code, message) = until(SETTLE, "the ten-year token to be refused", || async {
        Ok(request(&as_leaf, &ten_years).await?.err())
    })
    .await?;
    assert!(matches!(code, 403 | 422), "{code} {message}");
    assert!(
        message.contains("longer than the 3600s join allows"),
        "{message}"
    );
    for (what, r, says) in [
        ("3601 s", &a_bit_longer, "longer than the 3600s join allows"),
        ("bound to nothing", &unbound, "must be bound to a Secret"),
        (
            "bound to nothing, defaults",
            &unbound_default,
            "must be bound to a Secret",
        ),
        ("for another audience", &other_audience, "spec.audiences"),
        (
            "bound to another Secret",
            &other_secret,
            "must be bound to a Secret",
        ),
    ] {
        match request(&as_leaf, r).await? {
            Ok(_) => anyhow::bail!("a token {what} was issued to the leaf account"),
            Err((code, message)) => {
                assert!(matches!(code, 403 | 422), "{what}: {code} {message}");
                assert!(message.contains(says), "{what}: {message}");
            }
        }
    }
    // The renewer's own request goes through, and its token is bound as join's was.
    let renewed = request(&as_leaf, &renewal)
        .await?
        .map_err(|(code, m)| anyhow::anyhow!("the renewal was refused: {code} {m}"))?;
    assert_eq!(bound_secret(&renewed).as_deref(), Some(secret.as_str()));
    assert!(authenticates(&leaf, &renewed).await?);
    let (iat, exp) = token_renewal::validity(&renewed)
        .ok_or_else(|| anyhow::anyhow!("the renewed token has no expiry"))?;
    assert_eq!(exp - iat, 3600);

    // Joining again replaces the token Secret: every token bound to the old one, join's
    // and the renewed one alike, stops authenticating; the new join's token works.
    let out = join(
        &host,
        &leaf,
        &["--namespaces", "default", "--token-lifetime", "1h"],
    )?;
    assert!(out.contains("of the join before removed"), "{out}");
    let second = leaf_kubeconfig::token(&join_kubeconfig(&host).await?).unwrap_or_default();
    let new_secret = bound_secret(&second).unwrap_or_default();
    assert_ne!(new_secret, secret);
    assert_eq!(
        token_secrets(&leaf).await?,
        std::slice::from_ref(&new_secret)
    );
    for (what, t) in [
        ("join's first token", &first),
        ("the renewed token", &renewed),
    ] {
        until(SETTLE, &format!("{what} to be revoked"), || async {
            Ok((!authenticates(&leaf, t).await?).then_some(()))
        })
        .await?;
    }
    // A request made with a revoked token: 401.
    let revoked = client_of(&leaf_kubeconfig::with_token(&kubeconfig, &first)?).await?;
    match Api::<Namespace>::all(revoked).get("default").await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 401, "{}", s.message),
        other => anyhow::bail!("a revoked token was answered: {other:?}"),
    }
    assert!(authenticates(&leaf, &second).await?);

    // Unjoin as the leaf's admin: the token Secret, and so the token, and the policies go.
    let out = mcsched_e2e::cli::unjoin_as_leaf_admin(&host.kubeconfig, "east", &leaf.kubeconfig)?;
    anyhow::ensure!(out.status.success(), "unjoin failed: {}", text(&out));
    assert!(token_secrets(&leaf).await?.is_empty());
    until(SETTLE, "the last token to be revoked", || async {
        Ok((!authenticates(&leaf, &second).await?).then_some(()))
    })
    .await?;
    let policies =
        Api::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy>::all(
            leaf.client.clone(),
        );
    for name in [
        keys::LEAF_TOKEN_POLICY,
        keys::LEAF_NAMESPACE_POLICY,
        keys::LEAF_COPIES_POLICY,
    ] {
        assert!(policies.get_opt(name).await?.is_none(), "{name} left");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn all_namespaces_never_reaches_the_leafs_system_namespaces() -> anyhow::Result<()> {
    let (host, leaf) = tokio::try_join!(
        ControlPlane::start("allns-host", ControlPlaneOptions::default()),
        ControlPlane::start("allns-leaf", ControlPlaneOptions::default())
    )?;
    for ns in ["shop", "kube-public", "kube-node-lease"] {
        let n: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
        match Api::<Namespace>::all(leaf.client.clone())
            .create(&PostParams::default(), &n)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    for ns in ["kube-system", "shop"] {
        let s: Secret = serde_json::from_value(
            json!({"metadata": {"name": "cloud-credentials"}, "stringData": {"key": "s3cr3t"}}),
        )?;
        Api::<Secret>::namespaced(leaf.client.clone(), ns)
            .create(&PostParams::default(), &s)
            .await?;
    }
    // Before anything: join refuses to reach the leaf over plain HTTP, or unverified
    // unless told to (and then pins the CA the leaf answers with).
    let dir = tempfile::tempdir()?;
    let http = edited_kubeconfig(&leaf, dir.path(), "http.yaml", |c| {
        let server = c["server"]
            .as_str()
            .unwrap_or_default()
            .replace("https://", "http://");
        c.insert("server".into(), server.into());
    })?;
    let out = join_output(&host, &http, &["--all-namespaces"])?;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("clusters[].cluster.server is http://"),
        "{}",
        text(&out)
    );
    // What kube-controller-manager would publish (this leaf runs none): the leaf's CA.
    let doc: serde_json::Value =
        mcsched_shared::yaml::from_str(&std::fs::read_to_string(&leaf.kubeconfig)?)?;
    let ca = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        doc["clusters"][0]["cluster"]["certificate-authority-data"]
            .as_str()
            .unwrap_or_default(),
    )?;
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": keys::SYSTEM_NAMESPACE}}))?;
    Api::<Namespace>::all(leaf.client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let published: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "kube-root-ca.crt"},
        "data": {"ca.crt": String::from_utf8(ca)?}}))?;
    Api::<ConfigMap>::namespaced(leaf.client.clone(), keys::SYSTEM_NAMESPACE)
        .create(&PostParams::default(), &published)
        .await?;
    let unverified = edited_kubeconfig(&leaf, dir.path(), "insecure.yaml", |c| {
        c.remove("certificate-authority-data");
        c.remove("certificate-authority");
        c.insert("insecure-skip-tls-verify".into(), true.into());
    })?;
    let out = join_output(&host, &unverified, &["--all-namespaces"])?;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("insecure-skip-tls-verify is true")
            && text(&out).contains("--unsafe-skip-ca-verification"),
        "{}",
        text(&out)
    );
    assert!(
        Api::<ServiceAccount>::namespaced(leaf.client.clone(), keys::SYSTEM_NAMESPACE)
            .get_opt(keys::LEAF_ACCOUNT)
            .await?
            .is_none(),
        "a refused join created nothing"
    );
    let out = join_with(
        &host,
        &unverified,
        &["--all-namespaces", "--unsafe-skip-ca-verification"],
    )?;
    assert!(out.contains("is not verified"), "{out}");
    assert!(out.contains("but kube-system, kube-public"), "{out}");
    let as_leaf = client_of(&join_kubeconfig(&host).await?).await?;
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "probe"},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}))?;
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    // Granted elsewhere, by the ClusterRoleBinding: a pod may be created in a namespace...
    until(SETTLE, "a pod in shop to be admitted", || async {
        Ok(Api::<Pod>::namespaced(as_leaf.clone(), "shop")
            .create(&dry_run, &pod)
            .await
            .ok())
    })
    .await?;
    // ... and a Secret read where join bound the reading.
    Api::<Secret>::namespaced(as_leaf.clone(), "shop")
        .get("cloud-credentials")
        .await?;
    let system = [
        "kube-system",
        "kube-public",
        "kube-node-lease",
        keys::SYSTEM_NAMESPACE,
    ];
    for ns in system {
        let (code, message) = until(SETTLE, &format!("a pod in {ns} to be refused"), || async {
            Ok(
                match Api::<Pod>::namespaced(as_leaf.clone(), ns)
                    .create(&dry_run, &pod)
                    .await
                {
                    Ok(_) => None,
                    Err(kube::Error::Api(s)) => Some((s.code, s.message)),
                    Err(e) => return Err(e.into()),
                },
            )
        })
        .await?;
        assert_eq!(code, 403, "{ns}: {message}");
        let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "mine"}}))?;
        match Api::<Secret>::namespaced(as_leaf.clone(), ns)
            .create(&dry_run, &secret)
            .await
        {
            Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{ns}: {}", s.message),
            other => anyhow::bail!("a Secret in {ns} was admitted: {other:?}"),
        }
        // Neither RBAC lets it read Secrets there.
        let mut args = vec!["get", "secrets", "-n", ns, "--as", LEAF_SA];
        assert!(!can_i(&leaf.kubeconfig, &args)?, "{args:?}");
        args[0] = "list";
        assert!(!can_i(&leaf.kubeconfig, &args)?, "{args:?}");
    }
    match Api::<Secret>::namespaced(as_leaf.clone(), "kube-system")
        .get("cloud-credentials")
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{}", s.message),
        other => anyhow::bail!("the leaf account read a kube-system Secret: {other:?}"),
    }
    // Nor a write that would answer with the object written over.
    let patch = json!({"metadata": {"labels": {"x": "y"}}});
    match Api::<Secret>::namespaced(as_leaf.clone(), "kube-system")
        .patch(
            "cloud-credentials",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{}", s.message),
        other => anyhow::bail!("the leaf account patched a kube-system Secret: {other:?}"),
    }
    Ok(())
}

/// A request of the leaf account as the leaf's API server answered it: what it answered
/// with, or the refusal's status code and message.
fn answer<K>(result: Result<K, kube::Error>) -> anyhow::Result<Result<K, (u16, String)>> {
    match result {
        Ok(k) => Ok(Ok(k)),
        Err(kube::Error::Api(s)) => Ok(Err((s.code, s.message))),
        Err(e) => Err(e.into()),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_leaf_account_never_changes_deletes_or_reads_back_what_pod_sync_did_not_create()
-> anyhow::Result<()> {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use kube::api::{DeleteParams, Patch, PatchParams};

    let (host, leaf) = tokio::try_join!(
        ControlPlane::start("copies-host", ControlPlaneOptions::default()),
        ControlPlane::start("copies-leaf", ControlPlaneOptions::default())
    )?;
    let out = join(&host, &leaf, &["--all-namespaces"])?;
    assert!(out.contains(keys::LEAF_COPIES_POLICY), "{out}");
    // The leaf owner's namespace, made after join: no RoleBinding lets the account read
    // its Secrets, only the ClusterRole's create, update, patch and delete.
    let later: Namespace = serde_json::from_value(json!({"metadata": {"name": "later"}}))?;
    Api::<Namespace>::all(leaf.client.clone())
        .create(&PostParams::default(), &later)
        .await?;
    let owner_secrets: Api<Secret> = Api::namespaced(leaf.client.clone(), "later");
    let theirs: Secret = serde_json::from_value(json!({"metadata": {"name": "db-password"},
        "stringData": {"password": "s3cr3t-value"}}))?;
    owner_secrets
        .create(&PostParams::default(), &theirs)
        .await?;
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "settings"}, "data": {"k": "v"}}))?;
    Api::<ConfigMap>::namespaced(leaf.client.clone(), "later")
        .create(&PostParams::default(), &cm)
        .await?;
    let claim: PersistentVolumeClaim = serde_json::from_value(
        json!({"metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
    )?;
    Api::<PersistentVolumeClaim>::namespaced(leaf.client.clone(), "later")
        .create(&PostParams::default(), &claim)
        .await?;
    let as_leaf = client_of(&join_kubeconfig(&host).await?).await?;
    let secrets: Api<Secret> = Api::namespaced(as_leaf.clone(), "later");
    match answer(secrets.get("db-password").await)? {
        Err((code, _)) => assert_eq!(code, 403),
        Ok(_) => anyhow::bail!("the leaf account read a Secret of a namespace made after join"),
    }
    let leaks = |s: &str| s.contains("s3cr3t-value") || s.contains("czNjcjN0LXZhbHVl");
    let empty = Patch::Merge(json!({}));
    // The policy takes a moment to be in force after join.
    let (code, message) = until(
        SETTLE,
        "an empty merge patch of the owner's Secret to be refused",
        || async {
            Ok(answer(
                secrets
                    .patch("db-password", &PatchParams::default(), &empty)
                    .await,
            )?
            .err())
        },
    )
    .await?;
    assert_eq!(code, 403, "{message}");
    assert!(
        message.contains("changes and deletes only what pod sync created")
            && message.contains("secrets later/db-password is not"),
        "{message}"
    );
    assert!(!leaks(&message), "{message}");
    // Every other way of writing over it, marks included, and deleting it.
    let marks = json!({"metadata": {"labels": {keys::HOST_ID_LABEL: "h", keys::MANAGED_CLUSTER_LABEL: "east"}}});
    let mut replaced = theirs.clone();
    replaced.metadata.labels = serde_json::from_value(marks["metadata"]["labels"].clone())?;
    let pod_sync = PatchParams::apply(keys::FIELD_MANAGER).force();
    let mut copy = replaced.clone();
    copy.string_data = Some([("password".to_string(), "ours".to_string())].into());
    for (what, result) in [
        (
            "a merge patch adding the marks",
            answer(
                secrets
                    .patch(
                        "db-password",
                        &PatchParams::default(),
                        &Patch::Merge(&marks),
                    )
                    .await,
            )?
            .map(|_| ()),
        ),
        (
            "pod sync's server-side apply",
            answer(
                secrets
                    .patch("db-password", &pod_sync, &Patch::Apply(&copy))
                    .await,
            )?
            .map(|_| ()),
        ),
        (
            "an update",
            answer(
                secrets
                    .replace("db-password", &PostParams::default(), &replaced)
                    .await,
            )?
            .map(|_| ()),
        ),
        (
            "a delete",
            answer(
                secrets
                    .delete("db-password", &DeleteParams::default())
                    .await,
            )?
            .map(|_| ()),
        ),
    ] {
        match result {
            Ok(()) => anyhow::bail!("{what} of the owner's Secret was let through"),
            Err((code, message)) => {
                assert_eq!(code, 403, "{what}: {message}");
                assert!(message.contains("is not"), "{what}: {message}");
                assert!(!leaks(&message), "{what}: {message}");
            }
        }
    }
    let kept = owner_secrets.get("db-password").await?;
    assert_eq!(kept.metadata.labels, None, "nothing written over it");
    assert_eq!(
        kept.data
            .and_then(|d| d.get("password").cloned())
            .map(|b| b.0),
        Some(b"s3cr3t-value".to_vec())
    );
    for (what, result) in [
        (
            "ConfigMap delete",
            answer(
                Api::<ConfigMap>::namespaced(as_leaf.clone(), "later")
                    .delete("settings", &DeleteParams::default())
                    .await,
            )?
            .map(|_| ()),
        ),
        (
            "ConfigMap patch",
            answer(
                Api::<ConfigMap>::namespaced(as_leaf.clone(), "later")
                    .patch("settings", &PatchParams::default(), &empty)
                    .await,
            )?
            .map(|_| ()),
        ),
        (
            "PVC delete",
            answer(
                Api::<PersistentVolumeClaim>::namespaced(as_leaf.clone(), "later")
                    .delete("data", &DeleteParams::default())
                    .await,
            )?
            .map(|_| ()),
        ),
    ] {
        match result {
            Ok(()) => anyhow::bail!("{what} of the owner's was let through"),
            Err((code, message)) => assert_eq!(code, 403, "{what}: {message}"),
        }
    }
    // What pod sync creates, the account still creates, applies over, patches and deletes.
    let mut ours = copy.clone();
    ours.metadata.name = Some("copied".into());
    secrets
        .patch("copied", &pod_sync, &Patch::Apply(&ours))
        .await?;
    ours.string_data = Some([("password".to_string(), "changed".to_string())].into());
    secrets
        .patch("copied", &pod_sync, &Patch::Apply(&ours))
        .await?;
    secrets
        .patch("copied", &PatchParams::default(), &empty)
        .await?;
    secrets.delete("copied", &DeleteParams::default()).await?;
    // A create of the owner's name answers 409, and nothing of the object.
    match answer(secrets.create(&PostParams::default(), &replaced).await)? {
        Err((code, message)) => {
            assert_eq!(code, 409, "{message}");
            assert!(!leaks(&message), "{message}");
        }
        Ok(_) => anyhow::bail!("a second db-password was created"),
    }

    // A leaf joined before the policy existed: the patch answers with the Secret...
    let policies = Api::<ValidatingAdmissionPolicy>::all(leaf.client.clone());
    let bindings = Api::<ValidatingAdmissionPolicyBinding>::all(leaf.client.clone());
    bindings
        .delete(keys::LEAF_COPIES_POLICY, &DeleteParams::default())
        .await?;
    policies
        .delete(keys::LEAF_COPIES_POLICY, &DeleteParams::default())
        .await?;
    let leaked = until(SETTLE, "the policy to be out of force", || async {
        Ok(answer(
            secrets
                .patch("db-password", &PatchParams::default(), &empty)
                .await,
        )?
        .ok())
    })
    .await?;
    assert_eq!(
        leaked
            .data
            .and_then(|d| d.get("password").cloned())
            .map(|b| b.0),
        Some(b"s3cr3t-value".to_vec()),
        "what the policy is there for"
    );
    // ... until it is joined again.
    join(&host, &leaf, &["--all-namespaces"])?;
    let as_leaf = client_of(&join_kubeconfig(&host).await?).await?;
    let secrets: Api<Secret> = Api::namespaced(as_leaf.clone(), "later");
    assert!(policies.get_opt(keys::LEAF_COPIES_POLICY).await?.is_some());
    assert!(bindings.get_opt(keys::LEAF_COPIES_POLICY).await?.is_some());
    until(SETTLE, "the policy joined again to be in force", || async {
        Ok(answer(
            secrets
                .patch("db-password", &PatchParams::default(), &empty)
                .await,
        )?
        .err())
    })
    .await?;
    match answer(
        secrets
            .delete("db-password", &DeleteParams::default())
            .await,
    )? {
        Err((code, message)) => assert_eq!(code, 403, "{message}"),
        Ok(_) => anyhow::bail!("the owner's Secret was deleted once joined again"),
    }
    owner_secrets.get("db-password").await?;

    // Unjoin as the leaf's admin removes it with the rest.
    let out = mcsched_e2e::cli::unjoin_as_leaf_admin(&host.kubeconfig, "east", &leaf.kubeconfig)?;
    anyhow::ensure!(out.status.success(), "unjoin failed: {}", text(&out));
    assert!(policies.get_opt(keys::LEAF_COPIES_POLICY).await?.is_none());
    assert!(bindings.get_opt(keys::LEAF_COPIES_POLICY).await?.is_none());
    Ok(())
}
