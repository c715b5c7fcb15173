//! The reconcile loop: on a leaf's wake-up or every 30 s while leading, each host pod on
//! the virtual node is brought in step with its copy (created, adopted, its status
//! written back, taken back, or deleted with it), the copies' ConfigMaps, Secrets and
//! claims followed, and leaf copies without a host pod deleted.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;
use mcsched_shared::keys;
use tracing::{debug, info, warn};

use crate::multicluster::cluster::LeafCluster;
use crate::multicluster::dependents;
use crate::multicluster::ownership::{self, Verdict};
use mcsched_engine::leaf::leaf_checks::is_ours;
use mcsched_engine::leaf::rescheduling;
use mcsched_engine::leaf::transform;

use super::copy::{Placed, create_copy};
use super::forged::{forged, forged_orphan, report_forged};
use super::status::{fail_host_pod, set_leaf_condition, write_host_status};
use super::take_back::{clash, delete_copy, delete_host_pod_now, take_back};
use super::{HostSide, LEAF_POD_CONDITION, SyncError, api_err, condition, warn_event};

/// Periodic reconcile, for what no watch event announces.
const RESYNC: Duration = Duration::from_secs(30);

/// Keeps `leaf`'s pods in step with the host pods on its virtual node while leading.
pub async fn run(
    host: Client,
    host_side: HostSide,
    leaf: Arc<LeafCluster>,
    mut leader: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = leaf.sync_wake.notified() => {},
            _ = tokio::time::sleep(RESYNC) => {},
            r = leader.changed() => if r.is_err() { return },
        }
        let ready = *leader.borrow()
            && host_side.synced.load(std::sync::atomic::Ordering::Acquire)
            && leaf.is_synced();
        if ready {
            reconcile(&host, &host_side, &leaf).await;
        }
    }
}

/// The host pods bound (not merely assumed) to the leaf's virtual node, compact: each is
/// decoded when its turn comes, outside the cache's lock.
fn host_pods(
    host_side: &HostSide,
    node: &str,
) -> BTreeMap<String, Arc<mcsched_engine::snapshot::PodInfo>> {
    let mut cache = host_side.cache();
    let snapshot = cache.snapshot();
    let Some(info) = snapshot.get(node) else {
        return BTreeMap::new();
    };
    info.pods
        .iter()
        .filter(|p| !cache.is_assumed(&p.key))
        .map(|p| (p.key.clone(), p.clone()))
        .collect()
}

pub(super) async fn reconcile(host: &Client, host_side: &HostSide, leaf: &LeafCluster) {
    let node = keys::virtual_node_name(&leaf.name);
    let hosts = host_pods(host_side, &node);
    let copies = leaf.managed();
    {
        let host_uids = hosts.values().map(|i| i.uid.as_str()).collect();
        let leaf_uids = copies
            .values()
            .filter_map(|c| c.metadata.uid.as_deref())
            .collect();
        leaf.ownership.retain(&host_uids, &leaf_uids);
    }
    let is_forged = |c: &Pod| {
        c.metadata
            .uid
            .as_deref()
            .is_some_and(|u| leaf.ownership.is_forged(u))
    };
    let mut refs = HashSet::new();
    for (key, info) in &hosts {
        let pod = info.pod();
        let synced = crate::observe::panics::guarded(
            "pod_sync",
            sync_one(host, host_side, leaf, &pod, copies.get(key)),
        )
        .await;
        // A pod the leaf cannot store has no copy there to keep anything for.
        if !matches!(synced, Ok(Err(SyncError::TooLarge { .. }))) {
            refs.extend(dependents::references(&pod));
        }
        match synced {
            Ok(Ok(())) => {}
            Ok(Err(SyncError::NotLeader)) => return,
            Ok(Err(e)) => {
                warn!(cluster = %leaf.name, pod = %key, error = %e, "pod sync failed; retrying")
            }
            // This pod's sync only: the other pods of the leaf go on.
            Err(panic) => super::warn_event(
                host_side,
                &pod,
                "LeafPodSyncFailed",
                "Syncing",
                format!("internal error: pod sync panicked: {panic}; retrying"),
            ),
        }
    }
    let host_has_claim = |key: &str| host_side.cache().volumes.claims.contains_key(key);
    let may_write = || host_side.fence().is_ok();
    let follow = dependents::Follow {
        host,
        leaf,
        objects: &host_side.leaves.host_objects,
        host_has_claim: &host_has_claim,
        grace: host_side.leaves.settings.unused_copy_grace,
        may_write: &may_write,
        // A copy whose host pod is gone may still use what it refers to until it is.
        // A forged pod is not one of them.
        complete: copies
            .iter()
            .all(|(k, c)| hosts.contains_key(k) || is_forged(c)),
        events: &host_side.events,
    };
    if let Err(e) = dependents::follow(&follow, &refs).await {
        if matches!(e, dependents::FollowError::NotLeader) {
            return;
        }
        warn!(cluster = %leaf.name, error = %e, "keeping leaf copies of ConfigMaps, Secrets and claims in step failed; retrying");
    }
    for (key, copy) in &copies {
        if hosts.contains_key(key) || copy.metadata.deletion_timestamp.is_some() || is_forged(copy)
        {
            continue;
        }
        // A stale cache of an old leader would take the new leader's copies for orphans.
        if host_side.fence().is_err() {
            return;
        }
        match forged_orphan(host, host_side, leaf, copy).await {
            Ok(false) => {}
            Ok(true) => continue,
            Err(e) => {
                warn!(cluster = %leaf.name, pod = %key, error = %e, "cannot tell whether a leaf pod without a host pod is this host's; retrying");
                continue;
            }
        }
        info!(cluster = %leaf.name, pod = %key, "deleting leaf pod without a host pod");
        if let Err(e) = delete_copy(leaf, copy, None).await {
            warn!(cluster = %leaf.name, pod = %key, error = %e, "deleting orphan failed");
        }
    }
}

pub(super) async fn sync_one(
    host: &Client,
    host_side: &HostSide,
    leaf: &LeafCluster,
    pod: &Pod,
    copy: Option<&Arc<Pod>>,
) -> Result<(), SyncError> {
    host_side.fence()?;
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let host_pods: Api<Pod> = Api::namespaced(host.clone(), &ns);
    // Whether a leaf pod with this host's marks under the pod's name is its copy: by the
    // UID recorded on the host pod, never by the marks alone (see `ownership`).
    let judge = |c: &Pod| {
        let forged = c
            .metadata
            .uid
            .as_deref()
            .is_some_and(|u| leaf.ownership.is_forged(u));
        ownership::judge(pod, c, leaf.ownership.unrecorded(&uid).as_deref(), forged)
    };
    // The leaf's own answer, not a watch gap: the marked pod under the name, if any.
    let read_leaf = || async {
        let leaf_pods: Api<Pod> = Api::namespaced(leaf.client.clone(), &ns);
        let there = leaf_pods
            .get_opt(&name)
            .await
            .map_err(api_err(format!("reading leaf pod {ns}/{name}")))?;
        Ok::<_, SyncError>(there.filter(|c| is_ours(&c.metadata, &leaf.name, &leaf.host_id)))
    };
    let had_copy = condition(pod.status.as_ref(), LEAF_POD_CONDITION).is_some();
    if pod.metadata.deletion_timestamp.is_some() {
        // As a node partition in Kubernetes: the host pod stays Terminating until its leaf
        // confirms the copy is gone (or an operator force-deletes it), so a StatefulSet
        // never runs two copies; Deployments fail over through their ReplicaSets.
        if !leaf.is_ready() {
            debug!(cluster = %leaf.name, pod = %format!("{ns}/{name}"), "leaf not answering; the host pod stays Terminating");
            return Ok(());
        }
        let grace = pod.metadata.deletion_grace_period_seconds;
        let there = match copy {
            Some(c) if matches!(judge(c), Verdict::Copy | Verdict::Adopt) => Some((**c).clone()),
            _ => read_leaf().await?,
        };
        if let Some(c) = there {
            match judge(&c) {
                Verdict::Copy | Verdict::Adopt => {
                    if c.metadata.deletion_timestamp.is_none() {
                        delete_copy(leaf, &c, grace).await?;
                    }
                    return Ok(());
                }
                // Not this pod's copy: left as it is, and this pod's copy is gone.
                Verdict::Forged { recorded } => {
                    report_forged(host_side, leaf, pod, &c, recorded.as_deref());
                }
                Verdict::Earlier => {}
            }
        }
        // No kubelet will finish this deletion: the leaf copy is gone, so do it.
        delete_host_pod_now(&host_pods, &name, &uid)
            .await
            .map_err(api_err(format!(
                "finishing deletion of host pod {ns}/{name}"
            )))?;
        return Ok(());
    }
    let status = pod.status.as_ref();
    match copy {
        None if had_copy => {
            // The leaf's watch may not show a copy created a moment ago: the leaf's API
            // server answers for it before the pod is given up.
            if let Some(c) = read_leaf().await? {
                match judge(&c) {
                    Verdict::Copy | Verdict::Adopt => return Ok(()),
                    Verdict::Forged { recorded } => {
                        return forged(host_side, leaf, &host_pods, pod, &c, recorded).await;
                    }
                    Verdict::Earlier => {}
                }
            }
            // The copy existed and is gone without the host asking: the pod is lost.
            if status.and_then(|s| s.phase.as_deref()) != Some("Failed") {
                info!(cluster = %leaf.name, pod = %format!("{ns}/{name}"), "leaf pod vanished; host pod failed");
                let message = format!("the pod's copy in leaf cluster {} was deleted", leaf.name);
                fail_host_pod(&host_pods, &name, "LeafPodDeleted", &message).await?;
            }
            Ok(())
        }
        None => {
            if let Some(reason) = super::super::gang_hold::held(&host_side.pod_groups, pod) {
                debug!(cluster = %leaf.name, pod = %format!("{ns}/{name}"), %reason, "leaf copy held");
                return Ok(());
            }
            let placed = match create_copy(host, host_side, leaf, pod).await {
                Ok(p) => p,
                Err(e @ (SyncError::MissingOnHost { .. } | SyncError::StaleClaimCopy { .. })) => {
                    warn_event(host_side, pod, "LeafPodWaiting", "Syncing", e.to_string());
                    return Err(e);
                }
                Err(e @ SyncError::Override { .. }) => {
                    warn_event(host_side, pod, "LeafPodRefused", "Syncing", e.to_string());
                    return Err(e);
                }
                // Refused as the other refusals are; still an error for the caller, so
                // that nothing is kept in the leaf for it.
                Err(SyncError::TooLarge {
                    object,
                    bytes,
                    answer,
                }) => {
                    let e = SyncError::TooLarge {
                        object: object.clone(),
                        bytes,
                        answer: answer.clone(),
                    };
                    clash(host_side, leaf, &host_pods, pod, e).await?;
                    return Err(SyncError::TooLarge {
                        object,
                        bytes,
                        answer,
                    });
                }
                Err(
                    e @ (SyncError::Clash { .. }
                    | SyncError::NotGranted { .. }
                    | SyncError::NoServiceAccount { .. }
                    | SyncError::AdmissionRefused { .. }
                    | SyncError::FieldNotServed { .. }
                    | SyncError::FieldDropped { .. }
                    | SyncError::NotCopied(_)),
                ) => {
                    return clash(host_side, leaf, &host_pods, pod, e).await;
                }
                Err(e) => return Err(e),
            };
            let found = match placed {
                Placed::Created(leaf_uid) => {
                    // Remembered until recorded: a retry records this UID, not whatever
                    // holds the name by then.
                    leaf.ownership.created(&uid, &leaf_uid);
                    let mut new = pod.status.clone().unwrap_or_default();
                    set_leaf_condition(&mut new, leaf, None);
                    return write_host_status(leaf, &host_pods, pod, &new, Some(&leaf_uid)).await;
                }
                Placed::Found(c) => c,
            };
            // A pod of this host's marks already holds the name (an earlier run's copy
            // whose watch event has not come yet, or not).
            match judge(&found) {
                Verdict::Copy | Verdict::Adopt => {
                    let mut new = pod.status.clone().unwrap_or_default();
                    set_leaf_condition(&mut new, leaf, None);
                    let leaf_uid = found.metadata.uid.clone().unwrap_or_default();
                    write_host_status(leaf, &host_pods, pod, &new, Some(&leaf_uid)).await
                }
                Verdict::Forged { recorded } => {
                    forged(host_side, leaf, &host_pods, pod, &found, recorded).await
                }
                // Deleted when the watch shows it; the new copy comes after.
                Verdict::Earlier => Ok(()),
            }
        }
        Some(c) => match judge(c) {
            Verdict::Earlier => {
                // A copy of an earlier pod of the same name: it goes before the new one
                // comes.
                if c.metadata.deletion_timestamp.is_none() {
                    delete_copy(leaf, c, None).await?;
                }
                Ok(())
            }
            Verdict::Forged { recorded } => {
                forged(host_side, leaf, &host_pods, pod, c, recorded).await
            }
            verdict @ (Verdict::Copy | Verdict::Adopt) => {
                let mut new = transform::host_status(&c.status.clone().unwrap_or_default(), status);
                let leaf_node = c.spec.as_ref().and_then(|s| s.node_name.clone());
                set_leaf_condition(&mut new, leaf, leaf_node.as_deref());
                let old = status.cloned().unwrap_or_default();
                let leaf_uid = c.metadata.uid.clone().unwrap_or_default();
                // Recorded when adopted, or when this agent's record write failed.
                let record = (ownership::recorded(pod) != Some(leaf_uid.as_str()))
                    .then_some(leaf_uid.as_str());
                if verdict == Verdict::Adopt {
                    info!(cluster = %leaf.name, pod = %format!("{ns}/{name}"), leaf_uid = %leaf_uid, "no copy UID recorded (created before records, or just before a crash): the copy found is adopted and recorded");
                }
                if record.is_some()
                    || transform::status_differs(&new, &old)
                    || condition(Some(&new), LEAF_POD_CONDITION).map(|c| &c.message)
                        != condition(Some(&old), LEAF_POD_CONDITION).map(|c| &c.message)
                {
                    debug!(pod = %format!("{ns}/{name}"), phase = ?new.phase, "leaf status to host");
                    write_host_status(leaf, &host_pods, pod, &new, record).await?;
                }
                let settings = host_side.leaves.settings;
                match rescheduling::pending_for(c) {
                    Some(waited) if waited >= settings.pending_timeout => {
                        take_back(host_side, leaf, &host_pods, pod, c, waited).await
                    }
                    _ => Ok(()),
                }
            }
        },
    }
}
