//! The leaves as one scheduling cycle sees them: each synced leaf's snapshot, taken once
//! at the cycle's start, and what the leaf check found for each virtual node.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use mcsched_shared::overrides::ClusterOverride;

use super::grants::{ReadAccess, ReadAll};
use super::transform::TransformError;
use crate::snapshot::{PodInfo, Snapshot, VolumeObjects};

/// What the agent may read for pod sync to copy (everything when nobody asked).
#[derive(Clone)]
pub struct Access(pub Arc<dyn ReadAccess>);

impl Default for Access {
    fn default() -> Self {
        Access(Arc::new(ReadAll))
    }
}

/// CycleState key of [`LeafCycle`].
pub(crate) const LEAF_CYCLE_KEY: &str = "mcsched.io/leaf-cycle";

/// One leaf as the agent sees it at the start of a cycle.
#[derive(Clone)]
pub struct LeafView {
    pub cluster: String,
    pub snapshot: Snapshot,
    /// The leaf's namespace grants and name clashes, as far as known.
    pub checks: Arc<super::leaf_checks::LeafChecks>,
    pub host_id: String,
    /// The leaf's ResourceQuotas and LimitRanges, and the copies it has yet to admit.
    pub admission: AdmissionView,
    /// The fields its API server serves: a copy carrying another does not go there.
    pub served: super::served_fields::Served,
    /// What pod sync's dry runs found it drops: a copy carrying such a field does not go
    /// there either.
    pub kept: Arc<super::kept_fields::KeptFields>,
    /// Its ResourceClaims (the snapshot holds its DeviceClasses and ResourceSlices).
    pub devices: LeafDevices,
}

/// What a leaf's devices are judged by beyond its snapshot's classes and slices: the
/// claims that hold devices there, and why its device objects cannot be read, if so.
#[derive(Clone, Default)]
pub struct LeafDevices {
    pub claims: Arc<crate::dra_state::ResourceClaims>,
    /// Set while the leaf's DRA objects are not all watched (not served there, or not
    /// readable by the reader role of an older join): pods with claims do not go there.
    pub unreadable: Option<String>,
}

/// What the leaf's admission will judge a copy by, at the cycle's start.
#[derive(Clone, Default)]
pub struct AdmissionView {
    pub rules: Arc<super::admission::LeafAdmission>,
    /// Copies decided on (assumed) that the leaf's watch has not shown yet: not in the
    /// quotas' status yet, so counted on top of it.
    pub pending: Arc<Vec<Arc<k8s_openapi::api::core::v1::Pod>>>,
}

/// Where a virtual node's pod would run: its cluster and the leaf node found for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafChoice {
    pub cluster: String,
    pub leaf_node: String,
    /// The leaf's available volumes the check picked for the pod's claims there, as
    /// (volume, claim `namespace/name`): held for the pod once it is sent.
    pub volumes: Vec<(String, String)>,
    /// What the copy would use there that `explain` should say (the ServiceAccount: the
    /// leaf's own, or one pod sync creates).
    pub notes: Vec<String>,
    /// The devices the check allocated the copy's claims on the leaf node.
    pub devices: LeafDeviceChoice,
}

/// The devices the check's allocation on a leaf node gives the copy's claims: said by
/// `explain`, and held in the leaf once the pod is sent, until the leaf's scheduler has
/// placed the copy, so that the next pod is not sent for the same devices.
#[derive(Debug, Clone, Default)]
pub struct LeafDeviceChoice {
    /// `claim namespace/name, request R: device driver/pool/device`, per device.
    pub said: Vec<String>,
    /// The claims as allocated there (the copy's, with the check's allocation).
    pub claims: Vec<Arc<k8s_openapi::api::resource::v1::ResourceClaim>>,
}

/// Told apart by what they say: the claims carry the same allocations.
impl PartialEq for LeafDeviceChoice {
    fn eq(&self, other: &Self) -> bool {
        self.said == other.said
    }
}

impl Eq for LeafDeviceChoice {}

/// The leaves for one scheduling cycle, and what the check found per virtual node.
#[derive(Clone, Default)]
pub struct LeafCycle {
    pub views: Arc<BTreeMap<String, Arc<LeafView>>>,
    leaf_pod: Arc<OnceLock<Result<Arc<PodInfo>, TransformError>>>,
    /// Virtual node → the leaf node found able to host the pod.
    choices: Arc<Mutex<HashMap<String, LeafChoice>>>,
    /// Owner → clusters its pods are kept away from, and why.
    pub avoid: Arc<HashMap<String, Vec<(String, crate::leaf::rescheduling::Avoided)>>>,
    /// The host's claims, whose leaf copies the volume check judges.
    pub host_volumes: Arc<VolumeObjects>,
    /// Whether pod sync may read the ConfigMaps and Secrets a pod refers to.
    pub access: Access,
    /// Leaves connected but not synced yet, with the watches still waiting for a list.
    pub unsynced: Arc<BTreeMap<String, Vec<&'static str>>>,
    /// Preemption's what-if: leaf copies of host victims taken out of their leaf's view,
    /// by host pod key, with their cluster and leaf node.
    removed: HashMap<String, (String, String, Arc<PodInfo>)>,
    /// The overrides of the pod's policy, with the policy's reference.
    overrides: Arc<(String, Vec<ClusterOverride>)>,
    /// Cluster → the copy with its overrides applied, and what they changed.
    overridden: Arc<Mutex<HashMap<String, OverriddenCopy>>>,
    /// The copy without overrides as JSON, for the leaves' served and dropped fields.
    leaf_pod_json: Arc<OnceLock<Option<Arc<serde_json::Value>>>>,
    /// Cluster → the first field of its copy the leaf does not serve (None: it serves
    /// all), found once per cycle.
    unserved: Arc<Mutex<HashMap<String, Option<String>>>>,
    /// Virtual node → the leaf nodes the check found able to host the pod, for Score.
    candidates: Arc<Mutex<HashMap<String, Arc<LeafCandidates>>>>,
    /// What selects pods in the host (its Services and controllers): the leaf copies
    /// carry their host pods' labels, so Score spreads them by the host's selectors.
    pub(crate) host_selectors: Arc<crate::pod_selectors::PodSelectors>,
    /// The cycle's sampled search, as (feasible nodes wanted, of all nodes) of one flat
    /// cluster of the host's and the leaves' nodes; None when unsampled.
    sample: Arc<Mutex<Option<(usize, usize)>>>,
}

/// The leaf nodes one virtual node's check found able to host the pod, and what it
/// judged them with: Score goes on from there.
pub(crate) struct LeafCandidates {
    pub(crate) cluster: String,
    /// The leaf's snapshot as the check saw it (with the copy's claims).
    pub(crate) snapshot: Snapshot,
    /// The copy as judged there (overrides applied, admitted).
    pub(crate) leaf_pod: Arc<PodInfo>,
    /// Positions in `snapshot.nodes` of the nodes that passed.
    pub(crate) positions: Vec<u32>,
    /// The check's state after PreFilter (the volumes it found per node).
    pub(crate) state: crate::framework::CycleState,
}

/// A leaf copy with the overrides for its cluster, and what they changed (said by
/// `explain`).
pub(crate) type OverriddenCopy = Result<(Arc<PodInfo>, Arc<Vec<String>>), LeafCopyError>;

/// Why the copy for a leaf cannot be built.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum LeafCopyError {
    #[error(transparent)]
    Transform(#[from] TransformError),
    #[error("{policy} cannot override the copy: {source}")]
    Override {
        policy: String,
        #[source]
        source: mcsched_shared::overrides::OverrideError,
    },
}

/// Whether leaf pod `copy` is this host's copy of host pod `host`: same name, and the
/// host pod's UID in its annotation.
fn is_copy_of(copy: &PodInfo, host: &PodInfo) -> bool {
    copy.key == host.key
        && copy
            .meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(mcsched_shared::keys::HOST_POD_UID_ANNOTATION))
            .is_some_and(|uid| !host.uid.is_empty() && *uid == host.uid)
}

impl LeafCycle {
    pub fn new(views: Arc<BTreeMap<String, Arc<LeafView>>>) -> Self {
        LeafCycle {
            views,
            ..Default::default()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, LeafChoice>> {
        self.choices.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Preemption's what-if of evicting host pod `victim` from a virtual node of
    /// `cluster`: its copy leaves the leaf's view, so the leaf check sees the room the
    /// eviction makes there. False when the leaf holds no copy of it.
    pub(crate) fn remove_copy(&mut self, cluster: &str, victim: &PodInfo) -> bool {
        let Some(view) = self.views.get(cluster) else {
            return false;
        };
        let Some((i, copy)) = view.snapshot.nodes.iter().enumerate().find_map(|(i, n)| {
            n.pods
                .iter()
                .find(|p| is_copy_of(p, victim))
                .map(|p| (i, p.clone()))
        }) else {
            return false;
        };
        let Some(view) = Arc::make_mut(&mut self.views).get_mut(cluster) else {
            return false;
        };
        let view = Arc::make_mut(view);
        let nodes = Arc::make_mut(&mut view.snapshot.nodes);
        let mut node = (*nodes[i]).clone();
        node.remove_pod(&copy.key);
        let leaf_node = node.name.to_string();
        nodes[i] = Arc::new(node);
        self.removed
            .insert(victim.key.clone(), (cluster.to_string(), leaf_node, copy));
        true
    }

    /// Undoes [`remove_copy`](Self::remove_copy): the victim is spared after all.
    pub(crate) fn restore_copy(&mut self, victim: &PodInfo) -> bool {
        let Some((cluster, leaf_node, copy)) = self.removed.remove(&victim.key) else {
            return false;
        };
        let Some(view) = Arc::make_mut(&mut self.views).get_mut(&cluster) else {
            return false;
        };
        let view = Arc::make_mut(view);
        let Some(&i) = view.snapshot.index.get(&leaf_node) else {
            return false;
        };
        let nodes = Arc::make_mut(&mut view.snapshot.nodes);
        let mut node = (*nodes[i]).clone();
        node.add_pod(copy);
        nodes[i] = Arc::new(node);
        true
    }

    pub(crate) fn record_choice(
        &self,
        virtual_node: &str,
        cluster: &str,
        leaf_node: &str,
        volumes: Vec<(String, String)>,
        notes: Vec<String>,
        devices: LeafDeviceChoice,
    ) {
        self.lock().insert(
            virtual_node.to_string(),
            LeafChoice {
                cluster: cluster.to_string(),
                leaf_node: leaf_node.to_string(),
                volumes,
                notes,
                devices,
            },
        );
    }

    /// How many nodes the leaf of `cluster` holds this cycle (0 when not synced).
    pub(crate) fn leaf_size(&self, cluster: &str) -> usize {
        self.views
            .get(cluster)
            .map_or(0, |v| v.snapshot.nodes.len())
    }

    /// The cycle's search looks for `want` feasible nodes of every `of`.
    pub(crate) fn set_sample(&self, want: usize, of: usize) {
        *self.sample.lock().unwrap_or_else(|e| e.into_inner()) = Some((want, of));
    }

    /// How many feasible nodes a leaf of `n` nodes contributes to the cycle's sampled
    /// search; None when the search was not sampled (an explanation, a lone Filter).
    pub(crate) fn leaf_share(&self, n: usize) -> Option<usize> {
        let sample = *self.sample.lock().unwrap_or_else(|e| e.into_inner());
        sample.map(|(want, of)| crate::framework::runtime::share_of_sample(want, of, n))
    }

    pub(crate) fn record_candidates(&self, virtual_node: &str, found: LeafCandidates) {
        self.candidates
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(virtual_node.to_string(), Arc::new(found));
    }

    /// The leaf nodes the check found able to host the pod for `virtual_node`.
    pub(crate) fn candidates(&self, virtual_node: &str) -> Option<Arc<LeafCandidates>> {
        self.candidates
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(virtual_node)
            .cloned()
    }

    /// The leaf node the check picked for `virtual_node` in this cycle.
    #[cfg(test)]
    pub(crate) fn choice(&self, virtual_node: &str) -> Option<String> {
        self.lock().get(virtual_node).map(|c| c.leaf_node.clone())
    }

    /// The cluster and leaf node the check picked for `virtual_node`.
    pub(crate) fn placement(&self, virtual_node: &str) -> Option<LeafChoice> {
        self.lock().get(virtual_node).cloned()
    }

    /// Virtual node → what the check noted about the copy there, for explanations.
    pub(crate) fn notes(&self) -> HashMap<String, Vec<String>> {
        self.lock()
            .iter()
            .filter(|(_, c)| !c.notes.is_empty() || !c.devices.said.is_empty())
            .map(|(v, c)| {
                let notes = c.notes.iter().chain(&c.devices.said).cloned().collect();
                (v.clone(), notes)
            })
            .collect()
    }

    /// Virtual node → leaf node, for explanations.
    pub(crate) fn choices(&self) -> HashMap<String, String> {
        self.lock()
            .iter()
            .map(|(v, c)| (v.clone(), c.leaf_node.clone()))
            .collect()
    }

    /// The overrides of `policy` (its reference) for this cycle's pod.
    pub(crate) fn set_overrides(&mut self, policy: String, overrides: Vec<ClusterOverride>) {
        self.overrides = Arc::new((policy, overrides));
    }

    /// The overrides targeting `cluster`, whose virtual node carries `labels`, in order.
    pub(crate) fn overrides_for(
        &self,
        cluster: &str,
        labels: &BTreeMap<String, String>,
    ) -> Vec<&ClusterOverride> {
        self.overrides
            .1
            .iter()
            .filter(|o| o.targets(cluster, labels))
            .collect()
    }

    /// The leaf's StorageClass for a host claim of class `class` copied to `cluster`.
    pub(crate) fn leaf_class(
        &self,
        cluster: &str,
        labels: &BTreeMap<String, String>,
        class: &str,
    ) -> String {
        mcsched_shared::overrides::storage_class(&self.overrides_for(cluster, labels), class)
            .to_string()
    }

    /// The copy as it would be created in `cluster` (virtual node labels `labels`): the
    /// pod's policy's overrides for that cluster applied, built once per cycle and
    /// cluster; with what they changed, each line naming the policy.
    pub(crate) fn leaf_pod_in(
        &self,
        host: &PodInfo,
        cluster: &str,
        labels: &BTreeMap<String, String>,
    ) -> OverriddenCopy {
        let targeted = self.overrides_for(cluster, labels);
        if targeted.is_empty() {
            return Ok((self.leaf_pod(host)?, Arc::default()));
        }
        let mut cache = self.overridden.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(done) = cache.get(cluster) {
            return done.clone();
        }
        let built =
            self.leaf_pod(host)
                .map_err(LeafCopyError::from)
                .and_then(|plain| {
                    let mut copy = (*plain.pod()).clone();
                    let changed = mcsched_shared::overrides::apply(&mut copy, &targeted).map_err(
                        |source| LeafCopyError::Override {
                            policy: self.overrides.0.clone(),
                            source,
                        },
                    )?;
                    let said = changed
                        .into_iter()
                        .map(|c| format!("{} overrides {c}", self.overrides.0))
                        .collect();
                    Ok((Arc::new(PodInfo::new(Arc::new(copy))), Arc::new(said)))
                });
        cache.insert(cluster.to_string(), built.clone());
        built
    }

    /// The copy [`Self::leaf_pod_in`] built for `cluster` this cycle, or the plain one.
    pub(crate) fn built_leaf_pod(
        &self,
        host: &PodInfo,
        cluster: &str,
    ) -> Result<Arc<PodInfo>, LeafCopyError> {
        let cache = self.overridden.lock().unwrap_or_else(|e| e.into_inner());
        match cache.get(cluster) {
            Some(built) => built.clone().map(|(p, _)| p),
            None => {
                drop(cache);
                Ok(self.leaf_pod(host)?)
            }
        }
    }

    /// The first field of `copy` (the copy for `cluster`, from [`Self::leaf_pod_in`])
    /// that `served` does not hold, judged once per cycle and cluster.
    pub(crate) fn unserved_field(
        &self,
        cluster: &str,
        copy: &Arc<PodInfo>,
        served: &super::served_fields::ServedFields,
    ) -> Option<String> {
        let lock = || self.unserved.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = lock().get(cluster) {
            return found.clone();
        }
        let found = self
            .copy_json(copy)
            .and_then(|j| served.first_unserved(super::served_fields::POD, &j));
        lock().insert(cluster.to_string(), found.clone());
        found
    }

    /// The first field of `copy` (the copy for its cluster, from [`Self::leaf_pod_in`])
    /// that the leaf is known to drop (`kept`, learned by pod sync's dry runs), with the
    /// leaf's version it was found at. Judged each time: pod sync may learn it meanwhile.
    pub(crate) fn dropped_field(
        &self,
        copy: &Arc<PodInfo>,
        kept: &super::kept_fields::KeptFields,
    ) -> Option<(String, String)> {
        let now = std::time::Instant::now();
        if !kept.drops_any(now) {
            return None;
        }
        kept.first_dropped(&*self.copy_json(copy)?, now)
    }

    /// `copy` as JSON; the copy without overrides, the same for every leaf, made JSON once.
    fn copy_json(&self, copy: &Arc<PodInfo>) -> Option<Arc<serde_json::Value>> {
        let to_json = |p: &PodInfo| match serde_json::to_value(&*p.pod()) {
            Ok(v) => Some(Arc::new(v)),
            Err(e) => {
                tracing::debug!(pod = %p.key, error = %e, "the copy as JSON");
                None
            }
        };
        let plain = matches!(self.leaf_pod.get(), Some(Ok(p)) if Arc::ptr_eq(p, copy));
        if plain {
            self.leaf_pod_json.get_or_init(|| to_json(copy)).clone()
        } else {
            to_json(copy)
        }
    }

    /// The pod as it would be created in a leaf, built once per cycle.
    pub fn leaf_pod(&self, host: &PodInfo) -> Result<Arc<PodInfo>, TransformError> {
        self.leaf_pod
            .get_or_init(|| {
                super::transform::leaf_pod(&host.pod(), "", "")
                    .map(|p| Arc::new(PodInfo::new(Arc::new(p))))
            })
            .clone()
    }
}

/// What the leaf check reads of the joined leaves, and where it counts a pod it sends
/// to one until the leaf's own scheduler has placed the copy.
pub trait LeafSnapshots: Send + Sync {
    /// The synced leaves' snapshots for one scheduling cycle, with the host's storage
    /// objects the leaf volume check needs.
    fn cycle(&self, host_volumes: Arc<VolumeObjects>) -> LeafCycle;
    /// Counts `pod` on the leaf node of `choice`, and holds the leaf volumes picked for it.
    fn assume(&self, pod: Arc<PodInfo>, choice: &LeafChoice);
    /// Undoes [`LeafSnapshots::assume`].
    fn forget(&self, cluster: &str, key: &str);
}

/// No leaves at all: every virtual node is a leaf the agent is not connected to.
pub(crate) struct NoLeaves;

impl LeafSnapshots for NoLeaves {
    fn cycle(&self, host_volumes: Arc<VolumeObjects>) -> LeafCycle {
        LeafCycle {
            host_volumes,
            ..Default::default()
        }
    }
    fn assume(&self, _: Arc<PodInfo>, _: &LeafChoice) {}
    fn forget(&self, _: &str, _: &str) {}
}
