//! Creating a copy: the namespace, the ConfigMaps, Secrets, claims, ResourceClaimTemplates,
//! ResourceClaims and ServiceAccount the pod refers to, then the pod itself with its
//! policy's overrides for the leaf.

use std::time::Instant;

use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, PersistentVolumeClaim, Pod, Secret, ServiceAccount,
};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use mcsched_shared::keys;
use serde_json::json;
use tracing::{info, warn};

use crate::multicluster::cluster::LeafCluster;
use crate::multicluster::dependents::{self, Dep, DepKind, FollowError, apply_params, owned_meta};
use mcsched_engine::leaf::leaf_checks::{Question, Synced, is_ours};
use mcsched_engine::leaf::transform;

use super::super::copy_create::{self, CreateError, create_strict, unknown_field};
use super::{HostSide, SyncError, api_err, code, is_rbac_denial, warn_event};

/// What holds the copy's name in the leaf after [`create_copy`].
pub(super) enum Placed {
    /// The copy, created now: its UID, as the leaf's API server gave it.
    Created(String),
    /// A pod with this host's marks that was there already (metadata only).
    Found(Box<Pod>),
}

/// The namespace, the objects the pod refers to, then the pod. Nothing in the leaf that
/// is not this host's is used, overwritten or adopted; nothing missing on the host is
/// replaced by the leaf's object of the same name.
pub(super) async fn create_copy(
    host: &Client,
    host_side: &HostSide,
    leaf: &LeafCluster,
    pod: &Pod,
) -> Result<Placed, SyncError> {
    let agent_namespace = host_side.leaves.agent_namespace();
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let namespaces: Api<Namespace> = Api::all(leaf.client.clone());
    let present = namespaces
        .get_metadata_opt(&ns)
        .await
        .map_err(api_err(format!("reading leaf namespace {ns}")))?;
    if present.is_none() {
        // Only a leaf that granted all namespaces lets the account create one.
        let created = Namespace {
            metadata: owned_meta(leaf, &ns, None, &ObjectMeta::default()),
            ..Default::default()
        };
        match namespaces.create(&PostParams::default(), &created).await {
            Ok(_) => {}
            Err(e) if code(&e) == Some(409) => {}
            Err(e) if code(&e) == Some(403) => return Err(not_granted(leaf, &ns)),
            Err(e) => return Err(api_err(format!("creating leaf namespace {ns}"))(e)),
        }
    }
    let overrides = overrides_for(host_side, leaf, pod);
    let targeted: Vec<_> = overrides.iter().flat_map(|(_, o)| o.iter()).collect();
    // The copy first: what it refers to is what is copied (overrides only narrow what the
    // pod refers to, never widen it), and a copy that cannot be built writes nothing.
    let mut copy = match judged_copy(leaf, pod) {
        Some(judged) => judged,
        None => {
            let mut copy = transform::leaf_pod(pod, &leaf.name, &leaf.host_id)?;
            if let Some((policy, _)) = &overrides {
                mcsched_shared::overrides::apply(&mut copy, &targeted).map_err(|source| {
                    SyncError::Override {
                        policy: policy.clone(),
                        source,
                    }
                })?;
            }
            copy
        }
    };
    let deps = transform::dependencies(&copy);
    let bytes = serde_json::to_vec(&copy).map_or(0, |b| b.len());
    let refused = *leaf.too_large.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(refused) = refused.filter(|r| bytes >= *r) {
        return Err(SyncError::TooLarge {
            object: format!("{ns}/{name}"),
            bytes,
            answer: format!("the leaf could not store a copy of {refused} bytes"),
        });
    }
    // A claim allocated in the host refuses the copy before anything is written for it.
    let host_claims_dra = named_claims(host, host_side, leaf, &ns, &deps).await?;
    // The ConfigMaps, Secrets and templates this copy is the first to need there: deleted
    // again if the leaf cannot store the pod, so that nothing of it is left there.
    let mut fresh: Vec<(Dep, String)> = Vec::new();
    let host_cms: Api<ConfigMap> = Api::namespaced(host.clone(), &ns);
    let leaf_cms: Api<ConfigMap> = Api::namespaced(leaf.client.clone(), &ns);
    for cm_name in &deps.config_maps {
        let Some(cm) = host_cms
            .get_opt(cm_name)
            .await
            .map_err(api_err(format!("reading host ConfigMap {ns}/{cm_name}")))?
        else {
            missing(&deps, "ConfigMap", &ns, cm_name)?;
            continue;
        };
        let there = leaf_object::<ConfigMap>(leaf, &ns, cm_name, Synced::ConfigMap).await?;
        let written = leaf_cms
            .patch(
                cm_name,
                &apply_params(),
                &Patch::Apply(&dependents::config_map_copy(leaf, &cm)),
            )
            .await
            .map_err(api_err(format!(
                "copying ConfigMap {ns}/{cm_name} to the leaf"
            )))?;
        if there.is_none() {
            fresh.push((
                Dep::new(DepKind::ConfigMap, &ns, cm_name),
                written.metadata.uid.unwrap_or_default(),
            ));
        }
        leaf.copied.copied(
            Dep::new(DepKind::ConfigMap, &ns, cm_name),
            cm.metadata.resource_version,
        );
    }
    let host_secrets: Api<Secret> = Api::namespaced(host.clone(), &ns);
    let leaf_secrets: Api<Secret> = Api::namespaced(leaf.client.clone(), &ns);
    for s_name in &deps.secrets {
        let Some(s) = host_secrets.get_opt(s_name).await.map_err(|e| {
            // The install grants Secrets per namespace only: say how to grant this one.
            let hint = if code(&e) == Some(403) {
                format!(
                    " (let the agent read Secrets in {ns}: {})",
                    mcsched_engine::leaf::grants::grant_command(
                        mcsched_engine::leaf::grants::Copied::Secrets,
                        &ns,
                        agent_namespace
                    )
                )
            } else {
                String::new()
            };
            api_err(format!("reading host Secret {ns}/{s_name}{hint}"))(e)
        })?
        else {
            missing(&deps, "Secret", &ns, s_name)?;
            continue;
        };
        if s.type_.as_deref() == Some("kubernetes.io/service-account-token") {
            continue;
        }
        let there = leaf_object::<Secret>(leaf, &ns, s_name, Synced::Secret).await?;
        let written = leaf_secrets
            .patch(
                s_name,
                &apply_params(),
                &Patch::Apply(&dependents::secret_copy(leaf, &s)),
            )
            .await
            .map_err(api_err(format!("copying Secret {ns}/{s_name} to the leaf")))?;
        if there.is_none() {
            fresh.push((
                Dep::new(DepKind::Secret, &ns, s_name),
                written.metadata.uid.unwrap_or_default(),
            ));
        }
        leaf.copied.copied(
            Dep::new(DepKind::Secret, &ns, s_name),
            s.metadata.resource_version,
        );
    }
    let host_claims: Api<PersistentVolumeClaim> = Api::namespaced(host.clone(), &ns);
    for c_name in &deps.claims {
        let Some(c) = host_claims
            .get_opt(c_name)
            .await
            .map_err(api_err(format!("reading host PVC {ns}/{c_name}")))?
        else {
            return Err(SyncError::MissingOnHost {
                kind: "PersistentVolumeClaim",
                object: format!("{ns}/{c_name}"),
            });
        };
        // This host's copy of this very claim, from an earlier pod, keeps its data:
        // reused as it is. A copy of an earlier claim of the same name holds that claim's
        // data, not this one's: never reused (collected once no leaf pod uses it).
        leaf.copied
            .copied(Dep::new(DepKind::Claim, &ns, c_name), None);
        if let Some(found) =
            leaf_object::<PersistentVolumeClaim>(leaf, &ns, c_name, Synced::Claim).await?
        {
            let copied_from = dependents::host_uid(&found);
            let host_uid = c.metadata.uid.clone().unwrap_or_default();
            if copied_from != Some(host_uid.as_str()) {
                return Err(SyncError::StaleClaimCopy {
                    kind: "PersistentVolumeClaim",
                    object: format!("{ns}/{c_name}"),
                    copied_from: copied_from.unwrap_or_default().to_string(),
                    host_uid,
                });
            }
            continue;
        }
        let spec = c.spec.unwrap_or_default();
        let copy = PersistentVolumeClaim {
            metadata: owned_meta(
                leaf,
                c_name,
                Some(&ns),
                &ObjectMeta {
                    labels: c.metadata.labels,
                    uid: c.metadata.uid,
                    ..Default::default()
                },
            ),
            spec: Some(transform::leaf_claim_spec(&spec)).map(|mut s| {
                if let Some(class) = s.storage_class_name.take() {
                    let leaf_class =
                        mcsched_shared::overrides::storage_class(&targeted, &class).to_string();
                    s.storage_class_name = Some(leaf_class);
                }
                s
            }),
            status: None,
        };
        match create_strict::<PersistentVolumeClaim>(&leaf.client, &ns, &copy).await {
            Ok(_) => {}
            // Created meanwhile: whose it is decides, on the next pass.
            Err(e) if code(&e) == Some(409) => {
                leaf_object::<PersistentVolumeClaim>(leaf, &ns, c_name, Synced::Claim).await?;
            }
            Err(e) if unknown_field(&e).is_some() => {
                return Err(SyncError::FieldNotServed {
                    object: format!("PersistentVolumeClaim {ns}/{c_name}"),
                    reason: unknown_field(&e).unwrap_or_default().to_string(),
                });
            }
            Err(e) => return Err(api_err(format!("creating leaf PVC {ns}/{c_name}"))(e)),
        }
        // From now on the claim's data lives in this leaf: LeafNodeVolumeBinding keeps
        // the claim's pods there.
        let mark =
            json!({"metadata": {"annotations": {keys::BOUND_IN_CLUSTER_ANNOTATION: leaf.name}}});
        host_claims
            .patch(c_name, &PatchParams::default(), &Patch::Merge(&mark))
            .await
            .map_err(api_err(format!("marking host PVC {ns}/{c_name}")))?;
    }
    copy_claim_templates(host, leaf, &ns, &deps, &mut fresh).await?;
    copy_resource_claims(leaf, &ns, host_claims_dra).await?;
    if let Some(sa) = transform::service_account(&copy) {
        ensure_service_account(leaf, pod, &ns, sa).await?;
    }
    keep_priority_class(host_side, leaf, pod, &mut copy).await;
    let leaf_pods: Api<Pod> = Api::namespaced(leaf.client.clone(), &ns);
    let created = match copy_create::create(host, leaf, &ns, &name, &copy).await {
        Ok(created) => Ok(created),
        Err(CreateError::Dropped { path, version }) => {
            return Err(SyncError::FieldDropped {
                object: format!("pod {ns}/{name}"),
                path,
                version,
            });
        }
        Err(CreateError::Api(e)) => Err(e),
    };
    match created {
        Ok(created) => {
            info!(cluster = %leaf.name, pod = %format!("{ns}/{name}"), "leaf pod created");
            Ok(Placed::Created(created.metadata.uid.unwrap_or_default()))
        }
        // Created by an earlier run whose watch event has not arrived yet, or a pod of
        // the same name that is not this host's (or only looks it: judged by the caller).
        Err(e) if code(&e) == Some(409) => {
            let there = leaf_pods
                .get_metadata_opt(&name)
                .await
                .map_err(api_err(format!("reading leaf pod {ns}/{name}")))?;
            match there {
                Some(m) if is_ours(&m.metadata, &leaf.name, &leaf.host_id) => {
                    Ok(Placed::Found(Box::new(Pod {
                        metadata: m.metadata,
                        ..Default::default()
                    })))
                }
                Some(_) => Err(SyncError::Clash {
                    kind: "Pod",
                    object: format!("{ns}/{name}"),
                }),
                // Gone meanwhile: created on the next pass.
                None => Err(api_err(format!("creating leaf pod {ns}/{name}"))(e)),
            }
        }
        Err(e) if too_large(&e).is_some() => {
            let answer = too_large(&e).unwrap_or_default();
            {
                let mut smallest = leaf.too_large.lock().unwrap_or_else(|e| e.into_inner());
                *smallest = Some(smallest.map_or(bytes, |s| s.min(bytes)));
            }
            warn!(cluster = %leaf.name, pod = %format!("{ns}/{name}"), bytes, %answer, "the leaf cannot store the copy; deleting what was copied for it alone");
            delete_fresh(leaf, &fresh).await?;
            Err(SyncError::TooLarge {
                object: format!("{ns}/{name}"),
                bytes,
                answer,
            })
        }
        Err(e) if is_rbac_denial(&e) => Err(not_granted(leaf, &ns)),
        // Strict field validation: the leaf does not know a field of the copy.
        Err(e) if unknown_field(&e).is_some() => Err(SyncError::FieldNotServed {
            object: format!("pod {ns}/{name}"),
            reason: unknown_field(&e).unwrap_or_default().to_string(),
        }),
        // Quotas and webhooks answer 403; a ValidatingAdmissionPolicy 422 unless it names
        // another reason; a webhook may answer 400.
        Err(kube::Error::Api(s)) if matches!(s.code, 400 | 403 | 422) => {
            Err(SyncError::AdmissionRefused {
                object: format!("{ns}/{name}"),
                reason: s.message,
            })
        }
        Err(e) => Err(api_err(format!("creating leaf pod {ns}/{name}"))(e)),
    }
}

/// The leaf's answer when it cannot store an object: etcd refuses a request over its
/// `--max-request-bytes` (1.5 MiB by default), which the API server passes on as a 500
/// with etcd's message, not a Status of its own; a body over the API server's own limit
/// (3 MiB) is a 413.
fn too_large(e: &kube::Error) -> Option<String> {
    match e {
        kube::Error::Api(s) if s.code == 413 || s.message.contains("request is too large") => {
            Some(format!("{} {}", s.code, s.message))
        }
        _ => None,
    }
}

/// Deletes the ConfigMaps, Secrets and templates created for a copy the leaf could not store, each
/// under the UID it was created with (one created meanwhile under the name is not
/// touched), and forgets them: no other leaf pod refers to them.
async fn delete_fresh(leaf: &LeafCluster, fresh: &[(Dep, String)]) -> Result<(), SyncError> {
    for (dep, uid) in fresh {
        let params = DeleteParams {
            preconditions: (!uid.is_empty()).then(|| Preconditions {
                uid: Some(uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        let (client, ns) = (leaf.client.clone(), dep.namespace.as_str());
        let deleted = match dep.kind {
            DepKind::ConfigMap => Api::<ConfigMap>::namespaced(client, ns)
                .delete(&dep.name, &params)
                .await
                .map(|_| ()),
            DepKind::Secret => Api::<Secret>::namespaced(client, ns)
                .delete(&dep.name, &params)
                .await
                .map(|_| ()),
            DepKind::ResourceClaimTemplate => Api::<ResourceClaimTemplate>::namespaced(client, ns)
                .delete(&dep.name, &params)
                .await
                .map(|_| ()),
            DepKind::Claim | DepKind::ResourceClaim | DepKind::ServiceAccount => Ok(()),
        };
        match deleted {
            Ok(()) => {}
            // Gone, or another object holds the name now: nothing of this copy is left.
            Err(e) if matches!(code(&e), Some(404 | 409)) => {}
            Err(e) => {
                return Err(api_err(format!(
                    "deleting leaf {dep} copied for a copy too large"
                ))(e));
            }
        }
        leaf.copied.lock().remove(dep);
    }
    Ok(())
}

/// The host ResourceClaims `deps` names, each read and judged before anything is written
/// for the copy: one missing makes the copy wait, and one allocated in the host refuses it,
/// reported as a refused copy (a Warning event on the claim, the log and
/// `mcsched_leaf_copy_consecutive_failures`, once per back-off) besides the pod's own.
async fn named_claims(
    host: &Client,
    host_side: &HostSide,
    leaf: &LeafCluster,
    ns: &str,
    deps: &transform::Dependencies,
) -> Result<Vec<ResourceClaim>, SyncError> {
    let api: Api<ResourceClaim> = Api::namespaced(host.clone(), ns);
    let mut claims = Vec::new();
    for name in &deps.resource_claims {
        let Some(c) = api
            .get_opt(name)
            .await
            .map_err(api_err(format!("reading host ResourceClaim {ns}/{name}")))?
        else {
            return Err(SyncError::MissingOnHost {
                kind: "ResourceClaim",
                object: format!("{ns}/{name}"),
            });
        };
        let dep = Dep::new(DepKind::ResourceClaim, ns, name);
        if let Err(refused) = dependents::resource_claim_copy(leaf, &c) {
            if !dependents::copy_backing_off(leaf, &dep, Instant::now()) {
                let e = FollowError::NotCopied(refused.clone());
                dependents::copy_failed(leaf, &host_side.events, &dep, &e);
            }
            return Err(SyncError::NotCopied(refused));
        }
        claims.push(c);
    }
    Ok(claims)
}

/// The ResourceClaimTemplates the copy's claims are made from, copied as ConfigMaps are:
/// the leaf's claim controller makes the leaf pod's claims from them.
async fn copy_claim_templates(
    host: &Client,
    leaf: &LeafCluster,
    ns: &str,
    deps: &transform::Dependencies,
    fresh: &mut Vec<(Dep, String)>,
) -> Result<(), SyncError> {
    let host_templates: Api<ResourceClaimTemplate> = Api::namespaced(host.clone(), ns);
    let leaf_templates: Api<ResourceClaimTemplate> = Api::namespaced(leaf.client.clone(), ns);
    for name in &deps.claim_templates {
        let Some(t) = host_templates.get_opt(name).await.map_err(api_err(format!(
            "reading host ResourceClaimTemplate {ns}/{name}"
        )))?
        else {
            return Err(SyncError::MissingOnHost {
                kind: "ResourceClaimTemplate",
                object: format!("{ns}/{name}"),
            });
        };
        let dep = Dep::new(DepKind::ResourceClaimTemplate, ns, name);
        let there =
            leaf_object::<ResourceClaimTemplate>(leaf, ns, name, Synced::ResourceClaimTemplate)
                .await?;
        // A copy of an earlier template of that name refuses the apply (a template's spec
        // is immutable): the copy waits until `dependents` has replaced it.
        let written = leaf_templates
            .patch(
                name,
                &apply_params(),
                &Patch::Apply(&dependents::claim_template_copy(leaf, &t)),
            )
            .await
            .map_err(api_err(format!(
                "copying ResourceClaimTemplate {ns}/{name} to the leaf"
            )))?;
        if there.is_none() {
            fresh.push((dep.clone(), written.metadata.uid.unwrap_or_default()));
        }
        leaf.copied.copied(dep, t.metadata.resource_version);
    }
    Ok(())
}

/// The copies of the host claims [`named_claims`] let through, spec only, created once and
/// never updated: each holds its allocation in the leaf. This host's copy of the same host
/// claim (from an earlier pod) is used as it is; one of an earlier claim of that name is
/// not (its allocation is that claim's).
async fn copy_resource_claims(
    leaf: &LeafCluster,
    ns: &str,
    claims: Vec<ResourceClaim>,
) -> Result<(), SyncError> {
    for c in claims {
        let name = c.metadata.name.clone().unwrap_or_default();
        let dep = Dep::new(DepKind::ResourceClaim, ns, &name);
        // Recorded first: a copy created and then lost before the record is collected all
        // the same (only while it is ours, unused and its host claim gone).
        leaf.copied.copied(dep.clone(), None);
        if let Some(found) =
            leaf_object::<ResourceClaim>(leaf, ns, &name, Synced::ResourceClaim).await?
        {
            let copied_from = dependents::host_uid(&found);
            let host_uid = c.metadata.uid.clone().unwrap_or_default();
            if copied_from != Some(host_uid.as_str()) {
                return Err(SyncError::StaleClaimCopy {
                    kind: "ResourceClaim",
                    object: format!("{ns}/{name}"),
                    copied_from: copied_from.unwrap_or_default().to_string(),
                    host_uid,
                });
            }
            dependents::copy_in_step(leaf, &dep);
            continue;
        }
        // Checked by `named_claims`: not allocated when read.
        let copy = dependents::resource_claim_copy(leaf, &c)?;
        match create_strict::<ResourceClaim>(&leaf.client, ns, &copy).await {
            Ok(_) => {
                info!(cluster = %leaf.name, claim = %format!("{ns}/{name}"), "leaf ResourceClaim created (unallocated: the leaf's scheduler allocates it)");
            }
            // Created meanwhile: whose it is decides, on the next pass.
            Err(e) if code(&e) == Some(409) => {
                leaf_object::<ResourceClaim>(leaf, ns, &name, Synced::ResourceClaim).await?;
            }
            Err(e) if unknown_field(&e).is_some() => {
                return Err(SyncError::FieldNotServed {
                    object: format!("ResourceClaim {ns}/{name}"),
                    reason: unknown_field(&e).unwrap_or_default().to_string(),
                });
            }
            Err(e) => {
                return Err(api_err(format!("creating leaf ResourceClaim {ns}/{name}"))(
                    e,
                ));
            }
        }
        dependents::copy_in_step(leaf, &dep);
    }
    Ok(())
}

/// The copy the leaf check judged when it sent `pod` to `leaf` (assumed in the leaf's
/// cache until the leaf's watch shows the copy), with this leaf's marks: a policy edited
/// since the decision does not change what is created. None after a restart, or once the
/// assumption expired: the copy is then built again from the policy as it is now, under
/// the same checks.
fn judged_copy(leaf: &LeafCluster, pod: &Pod) -> Option<Pod> {
    let key = format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    );
    let uid = pod.metadata.uid.as_deref().filter(|u| !u.is_empty())?;
    let judged = {
        let cache = leaf.cache();
        cache
            .is_assumed(&key)
            .then(|| cache.pod_info(&key).cloned())
            .flatten()?
    };
    let mut copy = (*judged.pod()).clone();
    let of_this_pod = copy
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(keys::HOST_POD_UID_ANNOTATION))
        .is_some_and(|u| u == uid);
    if !of_this_pod {
        return None;
    }
    // Judged before the cluster was known to the transform: this leaf's marks now.
    let labels = copy.metadata.labels.get_or_insert_default();
    labels.insert(keys::MANAGED_CLUSTER_LABEL.into(), leaf.name.clone());
    labels.insert(keys::HOST_ID_LABEL.into(), leaf.host_id.clone());
    Some(copy)
}

/// The overrides of `pod`'s policy for `leaf`, with the policy's reference: what the leaf
/// check applied when it sent the pod there.
fn overrides_for(
    host_side: &HostSide,
    leaf: &LeafCluster,
    pod: &Pod,
) -> Option<(String, Vec<mcsched_shared::overrides::ClusterOverride>)> {
    let cache = host_side.cache();
    let policy = cache.policies().for_pod(&pod.metadata)?;
    let overrides = policy.overrides()?;
    let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref())?;
    let labels = cache.labels_of_node(node).unwrap_or_default();
    let targeted: Vec<_> = overrides
        .iter()
        .filter(|o| o.targets(&leaf.name, &labels))
        .cloned()
        .collect();
    (!targeted.is_empty()).then(|| (policy.reference.clone(), targeted))
}

/// Whether the leaf already has `kind` `ns/name`: not at all (None), as this host's copy
/// (its metadata), or as someone else's object (a clash: never used, changed or deleted).
async fn leaf_object<K>(
    leaf: &LeafCluster,
    ns: &str,
    name: &str,
    kind: Synced,
) -> Result<Option<ObjectMeta>, SyncError>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(leaf.client.clone(), ns);
    let found = api
        .get_metadata_opt(name)
        .await
        .map_err(api_err(format!("reading leaf {} {ns}/{name}", kind.kind())))?;
    match found {
        None => Ok(None),
        Some(m) if is_ours(&m.metadata, &leaf.name, &leaf.host_id) => Ok(Some(m.metadata)),
        Some(_) => {
            leaf.checks.learned(
                Question::Foreign(kind, ns.to_string(), name.to_string()),
                true,
            );
            Err(SyncError::Clash {
                kind: kind.kind(),
                object: format!("{ns}/{name}"),
            })
        }
    }
}

/// A host object the copy needs is missing, unless every reference to it is optional.
fn missing(
    deps: &transform::Dependencies,
    kind: &'static str,
    ns: &str,
    name: &str,
) -> Result<(), SyncError> {
    if deps.is_optional(kind, name) {
        Ok(())
    } else {
        Err(SyncError::MissingOnHost {
            kind,
            object: format!("{ns}/{name}"),
        })
    }
}

/// The ServiceAccount `sa` the copy runs as: the leaf's when it has one of that name (any
/// pod of the namespace there may run as it), else created, marked as this host's, with no
/// RBAC and the pod's `automountServiceAccountToken`, where `join --service-accounts`
/// allows it.
async fn ensure_service_account(
    leaf: &LeafCluster,
    pod: &Pod,
    ns: &str,
    sa: &str,
) -> Result<(), SyncError> {
    let api: Api<ServiceAccount> = Api::namespaced(leaf.client.clone(), ns);
    let exists = |found: bool| {
        leaf.checks.learned(
            Question::ServiceAccount(ns.to_string(), sa.to_string()),
            found,
        )
    };
    let no_account = || {
        leaf.checks
            .learned(Question::MayCreateServiceAccounts(ns.to_string()), false);
        SyncError::NoServiceAccount {
            object: format!("{ns}/{sa}"),
        }
    };
    let found = api
        .get_metadata_opt(sa)
        .await
        .map_err(api_err(format!("reading leaf ServiceAccount {ns}/{sa}")))?;
    if let Some(m) = found {
        if is_ours(&m.metadata, &leaf.name, &leaf.host_id) {
            leaf.copied
                .copied(Dep::new(DepKind::ServiceAccount, ns, sa), None);
        }
        exists(true);
        return Ok(());
    }
    let account = ServiceAccount {
        metadata: owned_meta(leaf, sa, Some(ns), &ObjectMeta::default()),
        automount_service_account_token: pod
            .spec
            .as_ref()
            .and_then(|s| s.automount_service_account_token),
        ..Default::default()
    };
    // Recorded first: a copy created and then lost before the record is collected all
    // the same (only while it is ours and unused).
    leaf.copied
        .copied(Dep::new(DepKind::ServiceAccount, ns, sa), None);
    match api.create(&PostParams::default(), &account).await {
        Ok(_) => {
            info!(cluster = %leaf.name, account = %format!("{ns}/{sa}"), "leaf ServiceAccount created");
        }
        Err(e) if code(&e) == Some(409) => {}
        Err(e) if is_rbac_denial(&e) => return Err(no_account()),
        Err(e) => {
            return Err(api_err(format!("creating leaf ServiceAccount {ns}/{sa}"))(
                e,
            ));
        }
    }
    exists(true);
    Ok(())
}

/// The copy keeps the pod's PriorityClass when the leaf has one of that name (the leaf's
/// admission then gives it the leaf's value of it, and its scheduler may preempt for it);
/// otherwise it runs at the leaf's default priority, and a Warning says so.
async fn keep_priority_class(host_side: &HostSide, leaf: &LeafCluster, pod: &Pod, copy: &mut Pod) {
    let Some(class) = pod
        .spec
        .as_ref()
        .and_then(|s| s.priority_class_name.clone())
        .filter(|c| !c.is_empty())
    else {
        return;
    };
    let note = match leaf.has_priority_class(&class).await {
        Ok(true) => {
            if let Some(s) = copy.spec.as_mut() {
                s.priority_class_name = Some(class);
            }
            return;
        }
        Ok(false) => format!(
            "leaf cluster {} has no PriorityClass {class}: the pod's copy there runs at the \
             leaf's default priority",
            leaf.name
        ),
        Err(e) => format!(
            "cannot look up PriorityClass {class} in leaf cluster {} ({e}): the pod's copy \
             there runs at the leaf's default priority; joining the leaf again with this \
             version of kubectl mcsched grants the lookup",
            leaf.name
        ),
    };
    warn_event(host_side, pod, "PriorityClassNotInLeaf", "Syncing", note);
}

fn not_granted(leaf: &LeafCluster, ns: &str) -> SyncError {
    leaf.checks
        .learned(Question::Granted(ns.to_string()), false);
    SyncError::NotGranted {
        namespace: ns.to_string(),
    }
}
