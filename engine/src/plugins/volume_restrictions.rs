//! VolumeRestrictions (kube-scheduler's `volumerestrictions`): a pod may not share a
//! node with a pod mounting the same GCE PD (unless both read-only), AWS EBS volume, Ceph
//! RBD image (unless both read-only) or iSCSI IQN (unless both read-only); and a claim
//! with the ReadWriteOncePod access mode may be used by one pod in the whole cluster.
//! PreFilter counts the scheduled pods already using the pod's ReadWriteOncePod claims;
//! AddPod/RemovePod keep that count right for preemption, which may evict the user.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Volume;

use super::helper::volumes::pod_volumes;
use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, Plugin, PreFilterPlugin, PreFilterResult, Status,
};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

pub(crate) const NAME: &str = "VolumeRestrictions";
const STATE_KEY: &str = "PreFilterVolumeRestrictions";

pub(crate) const REASON_DISK_CONFLICT: &str = "node(s) had no available disk";
pub(crate) const REASON_READ_WRITE_ONCE_POD_CONFLICT: &str = "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod";

pub(crate) struct VolumeRestrictions;

#[derive(Debug, Clone, Default)]
struct State {
    /// Names of the pod's claims with the ReadWriteOncePod access mode.
    rwop_claims: Arc<HashSet<String>>,
    /// References to those claims by scheduled pods.
    conflicting_refs: i64,
}

impl State {
    /// Like kube, matched by claim name alone: only pods on one node are added or removed.
    fn refs_of(&self, pod: &PodInfo) -> i64 {
        pod_volumes(pod)
            .iter()
            .filter_map(|v| v.persistent_volume_claim.as_ref())
            .filter(|c| self.rwop_claims.contains(&c.claim_name))
            .count() as i64
    }
}

/// The volume kinds two pods on one node may conflict over.
fn needs_restrictions_check(v: &Volume) -> bool {
    v.gce_persistent_disk.is_some()
        || v.aws_elastic_block_store.is_some()
        || v.rbd.is_some()
        || v.iscsi.is_some()
}

fn have_overlap(a: &[String], b: &[String]) -> bool {
    a.iter().any(|x| b.contains(x))
}

/// kube's isVolumeConflict: does `v` clash with any volume of `existing`?
fn is_volume_conflict(v: &Volume, existing: &PodInfo) -> bool {
    pod_volumes(existing).iter().any(|ev| {
        if let (Some(d), Some(ed)) = (&v.gce_persistent_disk, &ev.gce_persistent_disk)
            && d.pd_name == ed.pd_name
            && !(d.read_only.unwrap_or(false) && ed.read_only.unwrap_or(false))
        {
            return true;
        }
        if let (Some(d), Some(ed)) = (&v.aws_elastic_block_store, &ev.aws_elastic_block_store)
            && d.volume_id == ed.volume_id
        {
            return true;
        }
        if let (Some(d), Some(ed)) = (&v.iscsi, &ev.iscsi)
            && d.iqn == ed.iqn
            && !(d.read_only.unwrap_or(false) && ed.read_only.unwrap_or(false))
        {
            return true;
        }
        if let (Some(d), Some(ed)) = (&v.rbd, &ev.rbd)
            && have_overlap(&d.monitors, &ed.monitors)
            && d.pool == ed.pool
            && d.image == ed.image
            && !(d.read_only.unwrap_or(false) && ed.read_only.unwrap_or(false))
        {
            return true;
        }
        false
    })
}

fn satisfies_volume_conflicts(pod: &PodInfo, node: &NodeInfo) -> bool {
    pod_volumes(pod)
        .iter()
        .filter(|v| needs_restrictions_check(v))
        .all(|v| !node.pods.iter().any(|ep| is_volume_conflict(v, ep)))
}

/// IsPVCUsedByPods: some pod assigned to a node (assumed ones included) uses the claim.
fn is_claim_used(snapshot: &Snapshot, namespace: &str, claim: &str) -> bool {
    snapshot.nodes.iter().flat_map(|n| n.pods.iter()).any(|p| {
        p.namespace == namespace
            && pod_volumes(p)
                .iter()
                .filter_map(|v| v.persistent_volume_claim.as_ref())
                .any(|c| c.claim_name == claim)
    })
}

impl Plugin for VolumeRestrictions {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        // Pod/Delete frees volumes; Node/Add (and label or taint updates) as kube
        // registers; PVC/Add brings a missing claim.
        vec![
            ClusterEvent::PodDelete,
            ClusterEvent::NodeAdd,
            ClusterEvent::NodeUpdate,
            ClusterEvent::PvcChange,
        ]
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for VolumeRestrictions {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let vols = pod_volumes(pod);
        let needs_check = vols.iter().any(needs_restrictions_check);
        let mut rwop = HashSet::new();
        for c in vols
            .iter()
            .filter_map(|v| v.persistent_volume_claim.as_ref())
        {
            let key = format!("{}/{}", pod.namespace, c.claim_name);
            let Some(claim) = snapshot.volumes.claims.get(&key) else {
                return (
                    None,
                    Status::unresolvable(format!(
                        "persistentvolumeclaim \"{}\" not found",
                        c.claim_name
                    )),
                );
            };
            let modes = claim.spec.as_ref().and_then(|s| s.access_modes.as_ref());
            if modes.is_some_and(|m| m.iter().any(|m| m == "ReadWriteOncePod")) {
                rwop.insert(c.claim_name.clone());
            }
        }
        // At most one pod can be using a ReadWriteOncePod claim.
        let conflicting_refs = rwop
            .iter()
            .filter(|c| is_claim_used(snapshot, &pod.namespace, c))
            .count() as i64;
        if !needs_check && conflicting_refs == 0 {
            return (None, Status::skip());
        }
        state.write(
            STATE_KEY,
            State {
                rwop_claims: Arc::new(rwop),
                conflicting_refs,
            },
        );
        (None, Status::success())
    }

    fn add_pod(
        &self,
        state: &mut CycleState,
        _pod: &PodInfo,
        added: &PodInfo,
        _node: &NodeInfo,
    ) -> Status {
        if let Some(s) = state.read_mut::<State>(STATE_KEY) {
            s.conflicting_refs += s.refs_of(added);
        }
        Status::success()
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        _pod: &PodInfo,
        removed: &PodInfo,
        _node: &NodeInfo,
    ) -> Status {
        if let Some(s) = state.read_mut::<State>(STATE_KEY) {
            s.conflicting_refs -= s.refs_of(removed);
        }
        Status::success()
    }
}

impl FilterPlugin for VolumeRestrictions {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if !satisfies_volume_conflicts(pod, node) {
            return Status::unschedulable(REASON_DISK_CONFLICT);
        }
        // Without PreFilter state (as in this agent's preemption what-ifs on a fresh
        // state) there is no known claim user; kube would return an error instead.
        let conflicts = state
            .read::<State>(STATE_KEY)
            .is_some_and(|s| s.conflicting_refs > 0);
        // Unschedulable, not unresolvable: preempting the user frees the claim.
        if conflicts {
            return Status::unschedulable(REASON_READ_WRITE_ONCE_POD_CONFLICT);
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::plugins::testing::node_with;
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::{Value, json};

    fn pod(name: &str, ns: &str, vols: Value) -> PodInfo {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}")},
            "spec": {"containers": [{"name": "c"}], "volumes": vols}
        }))
        .expect("pod");
        PodInfo::new(Arc::new(p))
    }

    fn node_of(pods: &[&PodInfo]) -> NodeInfo {
        let mut n = node_with("n1", |_| {});
        for p in pods {
            n.add_pod(Arc::new((*p).clone()));
        }
        n
    }

    fn snapshot(nodes: Vec<NodeInfo>, claims: &[(&str, &str)]) -> Snapshot {
        let mut s = Snapshot::from_nodes(nodes.into_iter().map(Arc::new).collect());
        let mut v = (*s.volumes).clone();
        for (name, mode) in claims {
            let c: PersistentVolumeClaim = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"accessModes": [mode]}
            }))
            .expect("pvc");
            v.claims.insert(format!("default/{name}"), Arc::new(c));
        }
        s.volumes = Arc::new(v);
        s
    }

    fn gce(pd: &str, ro: bool) -> Value {
        json!([{"name": "v", "gcePersistentDisk": {"pdName": pd, "readOnly": ro}}])
    }
    fn ebs(id: &str) -> Value {
        json!([{"name": "v", "awsElasticBlockStore": {"volumeID": id}}])
    }
    fn rbd(mons: &[&str], pool: &str, image: &str, ro: bool) -> Value {
        json!([{"name": "v", "rbd": {"monitors": mons, "pool": pool, "image": image, "readOnly": ro}}])
    }
    fn iscsi(iqn: &str, ro: bool) -> Value {
        json!([{"name": "v", "iscsi": {"targetPortal": "127.0.0.1:3260", "iqn": iqn, "lun": 0, "readOnly": ro}}])
    }
    fn claim(name: &str) -> Value {
        json!([{"name": "v", "persistentVolumeClaim": {"claimName": name}}])
    }

    fn run(p: &PodInfo, node: &NodeInfo, snap: &Snapshot) -> (Status, Option<Status>) {
        let mut state = CycleState::new();
        let (_, pre) = VolumeRestrictions.pre_filter(&mut state, p, snap);
        if !pre.is_success() {
            return (pre, None);
        }
        let f = VolumeRestrictions.filter(&state, p, node);
        (pre, Some(f))
    }

    #[test]
    fn disk_conflicts_like_kube() {
        // (case, new pod's volumes, existing pod's volumes, conflict?)
        let cases = [
            ("gce same disk", gce("foo", false), gce("foo", false), true),
            (
                "gce both read-only",
                gce("foo", true),
                gce("foo", true),
                false,
            ),
            (
                "gce one read-only",
                gce("foo", true),
                gce("foo", false),
                true,
            ),
            (
                "gce other disk",
                gce("foo", false),
                gce("bar", false),
                false,
            ),
            ("ebs same id", ebs("foo"), ebs("foo"), true),
            ("ebs other id", ebs("foo"), ebs("bar"), false),
            (
                "rbd shared monitor",
                rbd(&["a", "b"], "p", "i", false),
                rbd(&["b", "c"], "p", "i", false),
                true,
            ),
            (
                "rbd both read-only",
                rbd(&["a"], "p", "i", true),
                rbd(&["a"], "p", "i", true),
                false,
            ),
            (
                "rbd no shared monitor",
                rbd(&["a"], "p", "i", false),
                rbd(&["b"], "p", "i", false),
                false,
            ),
            (
                "rbd other image",
                rbd(&["a"], "p", "i", false),
                rbd(&["a"], "p", "j", false),
                false,
            ),
            (
                "iscsi same iqn",
                iscsi("iqn.a", false),
                iscsi("iqn.a", false),
                true,
            ),
            (
                "iscsi both read-only",
                iscsi("iqn.a", true),
                iscsi("iqn.a", true),
                false,
            ),
            (
                "iscsi other iqn",
                iscsi("iqn.a", false),
                iscsi("iqn.b", false),
                false,
            ),
            ("different kinds", gce("foo", false), ebs("foo"), false),
        ];
        for (name, new, existing, conflict) in cases {
            let p = pod("new", "default", new);
            let e = pod("old", "default", existing);
            let node = node_of(&[&e]);
            let snap = snapshot(vec![node.clone()], &[]);
            let (pre, f) = run(&p, &node, &snap);
            assert!(pre.is_success(), "{name}: {pre}");
            let f = f.expect("filter ran");
            if conflict {
                assert_eq!(f.code, Code::Unschedulable, "{name}");
                assert_eq!(f.reasons, [REASON_DISK_CONFLICT], "{name}");
            } else {
                assert!(f.is_success(), "{name}: {f}");
            }
        }
    }

    #[test]
    fn read_write_once_pod_claims() {
        let rwop = ("rwop", "ReadWriteOncePod");
        let rwx = ("rwx", "ReadWriteMany");
        let user = pod("user", "default", claim("rwop"));
        let other_ns = pod("elsewhere", "other", claim("rwop"));
        let rwx_user = pod("rwx-user", "default", claim("rwx"));
        // (case, the pod's claim, pods on n1, pods on n2, PreFilter code, Filter code)
        type Case<'a> = (
            &'a str,
            &'a str,
            Vec<&'a PodInfo>,
            Vec<&'a PodInfo>,
            Code,
            Option<Code>,
        );
        let cases: [Case; 6] = [
            (
                "claim missing",
                "nope",
                vec![],
                vec![],
                Code::UnschedulableAndUnresolvable,
                None,
            ),
            ("no users", "rwop", vec![], vec![], Code::Skip, None),
            (
                "rwx claim shared",
                "rwx",
                vec![&rwx_user],
                vec![],
                Code::Skip,
                None,
            ),
            (
                "used on this node",
                "rwop",
                vec![&user],
                vec![],
                Code::Success,
                Some(Code::Unschedulable),
            ),
            (
                "used on another node: every node rejects",
                "rwop",
                vec![],
                vec![&user],
                Code::Success,
                Some(Code::Unschedulable),
            ),
            (
                "same name in another namespace",
                "rwop",
                vec![&other_ns],
                vec![],
                Code::Skip,
                None,
            ),
        ];
        for (name, c, on_n1, on_n2, pre_code, filter_code) in cases {
            let p = pod("new", "default", claim(c));
            let n1 = node_of(&on_n1);
            let mut n2 = node_with("n2", |_| {});
            for e in on_n2 {
                n2.add_pod(Arc::new(e.clone()));
            }
            let snap = snapshot(vec![n1.clone(), n2], &[rwop, rwx]);
            let (pre, f) = run(&p, &n1, &snap);
            assert_eq!(pre.code, pre_code, "{name}: {pre}");
            if pre_code == Code::UnschedulableAndUnresolvable {
                assert_eq!(pre.message(), "persistentvolumeclaim \"nope\" not found");
            }
            assert_eq!(f.as_ref().map(|f| f.code), filter_code, "{name}");
            if let Some(f) = f.filter(|f| !f.is_success()) {
                assert_eq!(f.reasons, [REASON_READ_WRITE_ONCE_POD_CONFLICT], "{name}");
            }
        }
    }

    #[test]
    fn preemption_removing_the_user_clears_the_conflict() {
        let user = pod("user", "default", claim("rwop"));
        let node = node_of(&[&user]);
        let snap = snapshot(vec![node.clone()], &[("rwop", "ReadWriteOncePod")]);
        let p = pod("new", "default", claim("rwop"));
        let mut state = CycleState::new();
        assert!(
            VolumeRestrictions
                .pre_filter(&mut state, &p, &snap)
                .1
                .is_success()
        );
        assert!(!VolumeRestrictions.filter(&state, &p, &node).is_success());
        let mut trial = state.clone();
        assert!(
            VolumeRestrictions
                .remove_pod(&mut trial, &p, &user, &node)
                .is_success()
        );
        assert!(VolumeRestrictions.filter(&trial, &p, &node).is_success());
        assert!(
            VolumeRestrictions
                .add_pod(&mut trial, &p, &user, &node)
                .is_success()
        );
        assert!(!VolumeRestrictions.filter(&trial, &p, &node).is_success());
    }
}
