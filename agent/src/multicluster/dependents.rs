//! What pod sync copied into a leaf for the pods there — ConfigMaps, Secrets, claims — kept
//! following the host objects while a leaf pod refers to them: an edit on the host reaches
//! the copy, and a copy no pod of that leaf refers to any more is deleted after a grace
//! period. Only objects carrying this host's marks are changed or deleted; a claim's copy
//! holds data, so it goes only once its host claim is gone and no leaf pod refers to it.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Client};
use mcsched_shared::keys;
use tracing::{debug, info};

use super::cluster::LeafCluster;
pub use super::copied::{Copied, Dep, DepKind};
use super::host_objects::{Found, HostObjects};
use mcsched_engine::leaf::leaf_checks::is_ours;

/// A host object read by name is read again at most this often when no watch holds it.
const REREAD: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("no longer the leader: nothing written")]
    NotLeader,
}

fn api_err(what: String) -> impl FnOnce(kube::Error) -> FollowError {
    move |source| FollowError::Api { what, source }
}

/// The objects `pod`'s copy refers to.
pub fn references(pod: &Pod) -> impl Iterator<Item = Dep> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let deps = mcsched_engine::leaf::transform::dependencies(pod);
    let of = move |kind: DepKind, names: Vec<String>| {
        let ns = ns.clone();
        names.into_iter().map(move |n| Dep::new(kind, &ns, &n))
    };
    let account =
        mcsched_engine::leaf::transform::service_account(pod).map(|sa| vec![sa.to_string()]);
    of(DepKind::ConfigMap, deps.config_maps)
        .chain(of(DepKind::Secret, deps.secrets))
        .chain(of(DepKind::Claim, deps.claims))
        .chain(of(DepKind::ServiceAccount, account.unwrap_or_default()))
}

/// The mark of an object pod sync creates: this host's id and the cluster, and the host
/// object's UID.
pub fn owned_meta(
    leaf: &LeafCluster,
    name: &str,
    ns: Option<&str>,
    from: &ObjectMeta,
) -> ObjectMeta {
    let mut labels = from.labels.clone().unwrap_or_default();
    labels.insert(keys::MANAGED_BY_LABEL.into(), keys::MANAGED_BY_VALUE.into());
    labels.insert(keys::MANAGED_CLUSTER_LABEL.into(), leaf.name.clone());
    labels.insert(keys::HOST_ID_LABEL.into(), leaf.host_id.clone());
    let mut annotations: BTreeMap<String, String> = from
        .annotations
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| !k.starts_with("kubectl.kubernetes.io/"))
        .collect();
    if let Some(uid) = &from.uid {
        annotations.insert(keys::HOST_UID_ANNOTATION.into(), uid.clone());
    }
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: ns.map(String::from),
        labels: Some(labels),
        annotations: Some(annotations),
        ..Default::default()
    }
}

/// Server-side apply as mcsched's field manager.
pub fn apply_params() -> PatchParams {
    PatchParams::apply(keys::FIELD_MANAGER).force()
}

/// The leaf's copy of host ConfigMap `cm`.
pub fn config_map_copy(leaf: &LeafCluster, cm: &ConfigMap) -> ConfigMap {
    let name = cm.metadata.name.as_deref().unwrap_or_default();
    ConfigMap {
        metadata: owned_meta(leaf, name, cm.metadata.namespace.as_deref(), &cm.metadata),
        data: cm.data.clone(),
        binary_data: cm.binary_data.clone(),
        immutable: cm.immutable,
    }
}

/// The leaf's copy of host Secret `s`.
pub fn secret_copy(leaf: &LeafCluster, s: &Secret) -> Secret {
    let name = s.metadata.name.as_deref().unwrap_or_default();
    Secret {
        metadata: owned_meta(leaf, name, s.metadata.namespace.as_deref(), &s.metadata),
        data: s.data.clone(),
        type_: s.type_.clone(),
        immutable: s.immutable,
        ..Default::default()
    }
}

/// What [`follow`] needs of the host and of pod sync.
pub struct Follow<'a> {
    pub host: &'a Client,
    pub leaf: &'a LeafCluster,
    pub objects: &'a HostObjects,
    /// Whether the host still has claim `namespace/name`.
    pub host_has_claim: &'a (dyn Fn(&str) -> bool + Sync),
    /// How long a copy stays unreferenced before it is deleted.
    pub grace: Duration,
    /// Fencing: checked right before each write.
    pub may_write: &'a (dyn Fn() -> bool + Sync),
    /// Whether every pod in the leaf is one of `refs`' pods: only then does an object
    /// missing from `refs` mean no leaf pod refers to it.
    pub complete: bool,
}

/// A host object as read for a copy: its resourceVersion and the copy to write.
enum Source {
    ConfigMap(Arc<ConfigMap>),
    Secret(Arc<Secret>),
}

impl Source {
    fn version(&self) -> String {
        match self {
            Source::ConfigMap(o) => o.metadata.resource_version.clone(),
            Source::Secret(o) => o.metadata.resource_version.clone(),
        }
        .unwrap_or_default()
    }
}

/// Brings the copies of what `refs` (the objects the leaf's pods refer to now) names in
/// line with the host, and deletes what no pod has referred to for `grace`.
pub async fn follow(f: &Follow<'_>, refs: &HashSet<Dep>) -> Result<(), FollowError> {
    let namespaces: BTreeSet<String> = refs
        .iter()
        .filter(|d| d.kind.follows_host())
        .map(|d| d.namespace.clone())
        .collect();
    let wake = f.leaf.sync_wake.clone();
    let changed: Arc<dyn Fn() + Send + Sync> = Arc::new(move || wake.notify_one());
    f.objects.want(f.host, &f.leaf.name, namespaces, &changed);
    let mut sorted: Vec<&Dep> = refs.iter().collect();
    sorted.sort();
    for dep in sorted {
        if !dep.kind.follows_host() {
            // Only what pod sync recorded is ever collected: an account of the leaf's own
            // that a copy uses is not.
            if let Some(e) = f.leaf.copied.lock().get_mut(dep) {
                e.unused_since = None;
            } else if dep.kind == DepKind::Claim {
                f.leaf.copied.lock().entry(dep.clone()).or_default();
            }
            continue;
        }
        let Some(source) = read_host(f, dep).await? else {
            continue;
        };
        let version = source.version();
        let stale = {
            let mut copied = f.leaf.copied.lock();
            let entry = copied.entry(dep.clone()).or_default();
            entry.unused_since = None;
            entry.version != version
        };
        if stale {
            refresh(f, dep, &source).await?;
            f.leaf.copied.copied(dep.clone(), Some(version));
        }
    }
    if f.complete {
        collect_unused(f, refs).await?;
    }
    Ok(())
}

/// The host object `dep` names: from the watch when it has listed the namespace, else
/// read by name at most every [`REREAD`]. None when the host has none (the copy stays:
/// a kubelet keeps what it mounted) or it is not due for a read.
async fn read_host(f: &Follow<'_>, dep: &Dep) -> Result<Option<Source>, FollowError> {
    let (ns, name) = (&dep.namespace, &dep.name);
    let watched = match dep.kind {
        DepKind::ConfigMap => match f.objects.config_map(ns, name) {
            Found::Watched(o) => Some(o.map(Source::ConfigMap)),
            Found::Unknown => None,
        },
        DepKind::Secret => match f.objects.secret(ns, name) {
            Found::Watched(o) => Some(o.map(Source::Secret)),
            Found::Unknown => None,
        },
        DepKind::Claim | DepKind::ServiceAccount => return Ok(None),
    };
    if let Some(found) = watched {
        return Ok(found);
    }
    {
        let mut copied = f.leaf.copied.lock();
        let entry = copied.entry(dep.clone()).or_default();
        if entry.read_at.is_some_and(|at| at.elapsed() < REREAD) {
            return Ok(None);
        }
        entry.read_at = Some(Instant::now());
    }
    let what = format!("reading host {dep}");
    Ok(match dep.kind {
        DepKind::ConfigMap => Api::<ConfigMap>::namespaced(f.host.clone(), ns)
            .get_opt(name)
            .await
            .map_err(api_err(what))?
            .map(|o| Source::ConfigMap(Arc::new(o))),
        DepKind::Secret => Api::<Secret>::namespaced(f.host.clone(), ns)
            .get_opt(name)
            .await
            .map_err(api_err(what))?
            .map(|o| Source::Secret(Arc::new(o))),
        DepKind::Claim | DepKind::ServiceAccount => None,
    })
}

/// The leaf's `dep`: `Some(None)` when absent, `Some(Some(uid))` when it is this host's
/// copy, None when it is someone else's (never touched).
async fn ours_or_absent<K>(
    api: &Api<K>,
    leaf: &LeafCluster,
    dep: &Dep,
) -> Result<Option<Option<String>>, FollowError>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let found = api
        .get_metadata_opt(&dep.name)
        .await
        .map_err(api_err(format!("reading leaf {dep}")))?;
    Ok(match found {
        None => Some(None),
        Some(m) if is_ours(&m.metadata, &leaf.name, &leaf.host_id) => Some(m.metadata.uid),
        Some(_) => None,
    })
}

/// Writes the copy of `source` over this host's copy in the leaf (or creates it).
async fn refresh(f: &Follow<'_>, dep: &Dep, source: &Source) -> Result<(), FollowError> {
    match source {
        Source::ConfigMap(cm) => apply_ours(f, dep, &config_map_copy(f.leaf, cm)).await?,
        // The leaf gives its pods their own tokens.
        Source::Secret(s) if s.type_.as_deref() == Some("kubernetes.io/service-account-token") => {}
        Source::Secret(s) => apply_ours(f, dep, &secret_copy(f.leaf, s)).await?,
    }
    debug!(cluster = %f.leaf.name, object = %dep, "leaf copy follows its host object");
    Ok(())
}

/// Writes `copy` as the leaf's `dep`: created when the leaf has none (an object of that name
/// made meanwhile answers 409 and is someone else's unless it carries this host's marks),
/// else server-side applied over this host's copy with its UID and resourceVersion as
/// preconditions, so that an object replaced since it was read is never taken over.
async fn apply_ours<K>(f: &Follow<'_>, dep: &Dep, copy: &K) -> Result<(), FollowError>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(f.leaf.client.clone(), &dep.namespace);
    let read = || async {
        api.get_metadata_opt(&dep.name)
            .await
            .map_err(api_err(format!("reading leaf {dep}")))
    };
    let found = match read().await? {
        Some(m) => m,
        None => {
            if !(f.may_write)() {
                return Err(FollowError::NotLeader);
            }
            let pp = PostParams {
                field_manager: Some(keys::FIELD_MANAGER.into()),
                ..Default::default()
            };
            match api.create(&pp, copy).await {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => match read().await? {
                    Some(m) => m,
                    // Gone again already: the next round creates it.
                    None => return Ok(()),
                },
                Err(e) => return Err(api_err(format!("creating leaf {dep}"))(e)),
            }
        }
    };
    if !is_ours(&found.metadata, &f.leaf.name, &f.leaf.host_id) {
        debug!(cluster = %f.leaf.name, object = %dep, "the leaf's object of that name is not this host's: left alone");
        return Ok(());
    }
    if !(f.may_write)() {
        return Err(FollowError::NotLeader);
    }
    let mut copy = copy.clone();
    copy.meta_mut().uid = found.metadata.uid;
    copy.meta_mut().resource_version = found.metadata.resource_version;
    api.patch(&dep.name, &apply_params(), &Patch::Apply(&copy))
        .await
        .map_err(api_err(format!("updating leaf {dep}")))?;
    Ok(())
}

/// Deletes the copies no leaf pod has referred to for the grace period.
async fn collect_unused(f: &Follow<'_>, refs: &HashSet<Dep>) -> Result<(), FollowError> {
    let now = Instant::now();
    let due: Vec<Dep> = {
        let mut copied = f.leaf.copied.lock();
        copied
            .iter_mut()
            .filter(|(dep, _)| !refs.contains(*dep))
            .filter_map(|(dep, entry)| {
                let since = *entry.unused_since.get_or_insert(now);
                let keep_claim = dep.kind == DepKind::Claim
                    && (f.host_has_claim)(&format!("{}/{}", dep.namespace, dep.name));
                (now.duration_since(since) >= f.grace && !keep_claim).then(|| dep.clone())
            })
            .collect()
    };
    for dep in due {
        let gone = match dep.kind {
            DepKind::ConfigMap => {
                delete_ours(
                    f,
                    &Api::<ConfigMap>::namespaced(f.leaf.client.clone(), &dep.namespace),
                    &dep,
                )
                .await?
            }
            DepKind::Secret => {
                delete_ours(
                    f,
                    &Api::<Secret>::namespaced(f.leaf.client.clone(), &dep.namespace),
                    &dep,
                )
                .await?
            }
            DepKind::ServiceAccount => {
                delete_ours(
                    f,
                    &Api::<ServiceAccount>::namespaced(f.leaf.client.clone(), &dep.namespace),
                    &dep,
                )
                .await?
            }
            DepKind::Claim => {
                delete_ours(
                    f,
                    &Api::<PersistentVolumeClaim>::namespaced(
                        f.leaf.client.clone(),
                        &dep.namespace,
                    ),
                    &dep,
                )
                .await?
            }
        };
        if gone {
            f.leaf.copied.lock().remove(&dep);
        }
    }
    Ok(())
}

/// Deletes the leaf's `dep` if it is this host's copy (by its UID, so an object recreated
/// meanwhile under that name is not touched); true once it is gone or not ours to delete.
async fn delete_ours<K>(f: &Follow<'_>, api: &Api<K>, dep: &Dep) -> Result<bool, FollowError>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let uid = match ours_or_absent(api, f.leaf, dep).await? {
        Some(Some(uid)) => uid,
        // Absent, or someone else's: nothing of ours to delete.
        _ => return Ok(true),
    };
    if !(f.may_write)() {
        return Err(FollowError::NotLeader);
    }
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&dep.name, &dp).await {
        Ok(_) => {
            info!(cluster = %f.leaf.name, object = %dep, "leaf copy deleted: no pod there refers to it any more");
            Ok(true)
        }
        Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409) => Ok(true),
        Err(e) => Err(api_err(format!("deleting leaf {dep}"))(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_api;
    use serde_json::json;

    const CM: &str = "/api/v1/namespaces/shop/configmaps";

    /// `apply_ours` of ConfigMap shop/settings against a leaf answering with `answer`.
    async fn write_copy(
        answer: impl Fn(&str, &str, &serde_json::Value) -> (u16, serde_json::Value)
        + Send
        + Sync
        + 'static,
    ) -> (Result<(), FollowError>, fake_api::Calls, fake_api::Requests) {
        let (leaf_client, calls, sent) = fake_api::recording(answer);
        let (host, _, _) = fake_api::recording(|_, _, _| (404, json!({})));
        let leaf = LeafCluster::new("east".into(), leaf_client, "1".into(), "h1".into());
        let objects = HostObjects::default();
        let f = Follow {
            host: &host,
            leaf: &leaf,
            objects: &objects,
            host_has_claim: &|_| false,
            grace: Duration::from_secs(60),
            may_write: &|| true,
            complete: false,
        };
        let host_cm: ConfigMap = serde_json::from_value(json!({"metadata": {
            "name": "settings", "namespace": "shop", "uid": "host-uid"}, "data": {"k": "v"}}))
        .expect("cm");
        let dep = Dep::new(DepKind::ConfigMap, "shop", "settings");
        let r = apply_ours(&f, &dep, &config_map_copy(&leaf, &host_cm)).await;
        (r, calls, sent)
    }

    fn found(labels: serde_json::Value) -> (u16, serde_json::Value) {
        (
            200,
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": "settings", "namespace": "shop", "uid": "leaf-uid",
                "resourceVersion": "42", "labels": labels}}),
        )
    }

    #[tokio::test]
    async fn a_copy_is_created_and_one_made_meanwhile_is_not_taken_over() {
        // Absent when read, then someone's of that name is there when created.
        let reads = std::sync::atomic::AtomicUsize::new(0);
        let (r, calls, _) = write_copy(move |method, path, _| match method {
            "GET" if reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 => {
                (404, fake_api::status(404, "NotFound", "not found"))
            }
            "GET" => found(json!({"team": "theirs"})),
            "POST" => (409, fake_api::status(409, "AlreadyExists", path)),
            _ => (500, json!({})),
        })
        .await;
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(
            fake_api::writes(&calls),
            [format!("POST {CM}")],
            "created, never patched over theirs"
        );

        // Absent: created, with this host's marks, and nothing else.
        let (r, calls, sent) = write_copy(|method, _, body| match method {
            "GET" => (404, fake_api::status(404, "NotFound", "not found")),
            _ => (201, body.clone()),
        })
        .await;
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(fake_api::writes(&calls), [format!("POST {CM}")]);
        let created = fake_api::sent(&sent, "POST", CM);
        assert_eq!(created[0]["metadata"]["labels"][keys::HOST_ID_LABEL], "h1");
    }

    #[tokio::test]
    async fn this_hosts_copy_is_updated_only_as_it_was_read() {
        let ours = json!({keys::MANAGED_CLUSTER_LABEL: "east", keys::HOST_ID_LABEL: "h1"});
        let (r, calls, sent) = write_copy(move |method, _, body| match method {
            "GET" => found(ours.clone()),
            _ => (200, body.clone()),
        })
        .await;
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(fake_api::writes(&calls), [format!("PATCH {CM}/settings")]);
        let patch = &fake_api::sent(&sent, "PATCH", "/settings")[0];
        assert_eq!(patch["metadata"]["uid"], "leaf-uid");
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        // Someone else's of that name: not written at all.
        let (r, calls, _) = write_copy(|method, _, body| match method {
            "GET" => found(json!({keys::HOST_ID_LABEL: "another-host"})),
            _ => (200, body.clone()),
        })
        .await;
        assert!(r.is_ok(), "{r:?}");
        assert!(fake_api::writes(&calls).is_empty());
    }

    #[test]
    fn a_pod_refers_to_its_config_maps_secrets_and_claims_in_its_namespace() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "shop"},
            "spec": {"containers": [{"name": "c", "image": "i",
                "envFrom": [{"secretRef": {"name": "creds"}}]}],
                "volumes": [
                    {"name": "a", "configMap": {"name": "settings"}},
                    {"name": "b", "persistentVolumeClaim": {"claimName": "data"}}]}
        }))
        .expect("pod");
        let mut refs: Vec<Dep> = references(&pod).collect();
        refs.sort();
        assert_eq!(
            refs,
            [
                Dep::new(DepKind::ConfigMap, "shop", "settings"),
                Dep::new(DepKind::Secret, "shop", "creds"),
                Dep::new(DepKind::Claim, "shop", "data"),
            ]
        );
        let copied = Copied::default();
        copied.copied(refs[0].clone(), Some("7".into()));
        copied.copied(refs[0].clone(), Some("8".into()));
        assert_eq!(copied.len(), 1);
        assert_eq!(copied.lock()[&refs[0]].version, "8");
    }
}
