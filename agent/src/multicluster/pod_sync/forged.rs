//! Forged copies: a leaf pod with this host's marks that is not the copy recorded on its
//! host pod is reported, never adopted, deleted or read.

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;
use tracing::warn;

use crate::multicluster::cluster::LeafCluster;
use crate::multicluster::ownership::{self, Verdict};

use super::status::fail_host_pod;
use super::take_back::clash;
use super::{HostSide, LEAF_POD_CONDITION, SyncError, api_err, condition, warn_event};

/// Whether `copy`, a marked leaf pod without a host pod on the virtual node, is forged:
/// the host pod it names may still be there, terminal (the host cache holds no terminal
/// pods) — e.g. failed because its copy was replaced — with a record naming another leaf
/// pod. A copy whose host pod is gone, or replaced by a pod of the same name, cannot be
/// told from a forged one and goes as an orphan: deleting it is what keeps a StatefulSet
/// pod force-deleted on the host from running twice.
pub(super) async fn forged_orphan(
    host: &Client,
    host_side: &HostSide,
    leaf: &LeafCluster,
    copy: &Pod,
) -> Result<bool, SyncError> {
    let ns = copy.metadata.namespace.clone().unwrap_or_default();
    let name = copy.metadata.name.clone().unwrap_or_default();
    let Some(named) = ownership::names_host_pod(copy) else {
        return Ok(false);
    };
    let host_pods: Api<Pod> = Api::namespaced(host.clone(), &ns);
    let found = host_pods
        .get_opt(&name)
        .await
        .map_err(api_err(format!("reading host pod {ns}/{name}")))?;
    let Some(pod) = found.filter(|p| p.metadata.uid.as_deref() == Some(named)) else {
        return Ok(false);
    };
    match ownership::judge(&pod, copy, None, false) {
        Verdict::Forged { recorded } => {
            report_forged(host_side, leaf, &pod, copy, recorded.as_deref());
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Reports a forged leaf pod on its host pod, once per leaf UID: a Warning event, a log
/// line and `mcsched_leaf_forged_copies_total`.
pub(super) fn report_forged(
    host_side: &HostSide,
    leaf: &LeafCluster,
    pod: &Pod,
    forged: &Pod,
    recorded: Option<&str>,
) {
    let leaf_uid = forged.metadata.uid.clone().unwrap_or_default();
    if !leaf.ownership.forged(&leaf_uid) {
        return;
    }
    mcsched_engine::metrics::global().leaf_forged_copy(&leaf.name);
    let object = format!(
        "{}/{}",
        forged.metadata.namespace.as_deref().unwrap_or_default(),
        forged.metadata.name.as_deref().unwrap_or_default()
    );
    let expected = match recorded {
        Some(r) => format!("the copy mcsched created has UID {r}"),
        None => "no copy UID is recorded on this pod".to_string(),
    };
    warn!(cluster = %leaf.name, pod = %object, leaf_uid = %leaf_uid, recorded = ?recorded, "forged leaf copy: left alone, nothing of it written to the host");
    warn_event(
        host_side,
        pod,
        "ForgedLeafCopy",
        "Syncing",
        format!(
            "leaf cluster {}: pod {object} (UID {leaf_uid}) carries this host's marks but is not this pod's copy ({expected}); it is neither adopted nor deleted, and nothing of it is written to this pod",
            leaf.name
        ),
    );
}

/// A forged pod holds the name of `pod`'s copy. The forged pod is never adopted, deleted
/// or read. Where `pod` had a copy, that copy is gone: the pod fails as for a copy
/// deleted in the leaf (`LeafPodReplaced`), so its controller replaces it and Services
/// drop it; where it never had one, the name is taken as by any pod that is not this
/// host's (a clash: a pod with a controller goes elsewhere, a bare pod waits).
pub(super) async fn forged(
    host_side: &HostSide,
    leaf: &LeafCluster,
    host_pods: &Api<Pod>,
    pod: &Pod,
    forged: &Pod,
    recorded: Option<String>,
) -> Result<(), SyncError> {
    report_forged(host_side, leaf, pod, forged, recorded.as_deref());
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let had_copy =
        recorded.is_some() || condition(pod.status.as_ref(), LEAF_POD_CONDITION).is_some();
    if !had_copy {
        let e = SyncError::Clash {
            kind: "Pod",
            object: format!("{ns}/{name}"),
        };
        return clash(host_side, leaf, host_pods, pod, e).await;
    }
    host_side.fence()?;
    if pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed") {
        return Ok(());
    }
    let message = format!(
        "the pod's copy in leaf cluster {} was deleted and pod {ns}/{name} there (UID {}) is not it",
        leaf.name,
        forged.metadata.uid.as_deref().unwrap_or_default()
    );
    fail_host_pod(host_pods, &name, "LeafPodReplaced", &message).await
}
