//! Pod sync's decisions against in-memory host and leaf API servers (see `fake_api`):
//! what it creates, adopts, refuses, takes back and deletes, on which side.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use k8s_openapi::api::core::v1::{Node, Pod};
use mcsched_shared::keys;
use serde_json::{Value, json};

use super::reconcile::{reconcile, sync_one};
use super::{HostSide, LEAF_POD_CONDITION, SyncError};
use crate::fake_api::{self, Calls, Requests};
use crate::multicluster::cluster::LeafCluster;
use crate::multicluster::registry::Leaves;
use crate::observe::events::EventSink;
use mcsched_engine::leaf::rescheduling::Avoided;

const CLUSTER: &str = "east";
const HOST_ID: &str = "h1";
const NS: &str = "/api/v1/namespaces/default";

fn not_found() -> (u16, Value) {
    (404, fake_api::status(404, "NotFound", "not found"))
}

/// An API server holding `objects` by path (GET answers them, 404 otherwise) and
/// accepting every write, unless `answers` says otherwise for that method and path.
#[derive(Default)]
struct Server {
    objects: HashMap<String, Value>,
    answers: HashMap<(String, String), (u16, Value)>,
    /// How a dry run of a pod's creation is answered (unset: with what was sent).
    dry_run: Option<Arc<DryRunAnswer>>,
}

type DryRunAnswer = dyn Fn(&Value) -> (u16, Value) + Send + Sync;

impl Server {
    fn with(mut self, path: &str, object: Value) -> Self {
        self.objects.insert(path.to_string(), object);
        self
    }

    fn answering(mut self, method: &str, path: &str, answer: (u16, Value)) -> Self {
        self.answers
            .insert((method.to_string(), path.to_string()), answer);
        self
    }

    fn dry_running(
        mut self,
        answer: impl Fn(&Value) -> (u16, Value) + Send + Sync + 'static,
    ) -> Self {
        self.dry_run = Some(Arc::new(answer));
        self
    }

    fn start(self) -> (kube::Client, Calls, Requests) {
        fake_api::recording(move |method, path, sent| {
            if let Some(a) = self.answers.get(&(method.to_string(), path.to_string())) {
                return a.clone();
            }
            if let Some(dry_run) = &self.dry_run
                && method == "POST"
                && path == format!("{NS}/pods{}", fake_api::DRY_RUN)
            {
                return dry_run(sent);
            }
            let held = self.objects.get(path.trim_end_matches("/status"));
            match method {
                "GET" => held.map_or_else(not_found, |o| (200, o.clone())),
                "POST" => (201, sent.clone()),
                "PATCH" => (200, held.cloned().unwrap_or_else(|| sent.clone())),
                "DELETE" => (
                    200,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
                ),
                _ => not_found(),
            }
        })
    }
}

struct Fixture {
    host: kube::Client,
    host_calls: Calls,
    host_sent: Requests,
    leaf_calls: Calls,
    leaf_sent: Requests,
    side: HostSide,
    leaf: Arc<LeafCluster>,
    leader: tokio::sync::watch::Sender<bool>,
}

/// The host and a synced, answering leaf `east`, this agent leading.
fn fixture(host: Server, leaf: Server) -> Fixture {
    let (host_client, host_calls, host_sent) = host.start();
    let (leaf_client, leaf_calls, leaf_sent) = leaf.start();
    let (leader, leading) = tokio::sync::watch::channel(true);
    let side = HostSide {
        cache: Arc::new(Mutex::new(mcsched_engine::cache::Cache::new())),
        synced: Arc::new(AtomicBool::new(true)),
        leaves: Arc::new(Leaves::new(Default::default())),
        events: EventSink::start(
            host_client.clone(),
            "test".into(),
            mcsched_wire::ContentType::Json,
        ),
        leader: leading,
        lease: Default::default(),
        pod_groups: mcsched_engine::pod_groups::PodGroups::new(),
    };
    let leaf = LeafCluster::new(CLUSTER.into(), leaf_client, "1".into(), HOST_ID.into());
    leaf.mark_synced();
    leaf.answered_at(Some(Instant::now()));
    Fixture {
        host: host_client,
        host_calls,
        host_sent,
        leaf_calls,
        leaf_sent,
        side,
        leaf,
        leader,
    }
}

impl Fixture {
    /// Writes to the host, events (sent in the background) left out.
    fn host_writes(&self) -> Vec<String> {
        fake_api::writes(&self.host_calls)
            .into_iter()
            .filter(|c| !c.contains("/events"))
            .collect()
    }

    fn leaf_writes(&self) -> Vec<String> {
        fake_api::writes(&self.leaf_calls)
    }

    /// The clusters avoided for the pods of ReplicaSet `rs-1`.
    fn avoided(&self) -> Vec<(String, Avoided)> {
        let current = self.side.leaves.avoidance.current();
        current.get("owner:rs-1").cloned().unwrap_or_default()
    }

    async fn sync(&self, pod: &Pod, copy: Option<Pod>) -> Result<(), SyncError> {
        let copy = copy.map(Arc::new);
        sync_one(&self.host, &self.side, &self.leaf, pod, copy.as_ref()).await
    }
}

/// Host pod `default/p` (uid `uid-p`) bound to the virtual node, changed by `extra`.
fn host_pod(extra: Value) -> Pod {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": "uid-p"},
        "spec": {"nodeName": keys::virtual_node_name(CLUSTER), "schedulerName": "mcsched",
            "containers": [{"name": "c", "image": "i"}]}
    });
    serde_json::from_value(fake_api::merged(pod, extra)).expect("pod")
}

/// Owned by ReplicaSet `rs-1`: its controller recreates it elsewhere.
fn owned() -> Value {
    json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "name": "rs", "uid": "rs-1", "controller": true}]}})
}

/// The marks pod sync puts on what it creates in leaf `east` for host `h1`.
fn ours() -> Value {
    json!({keys::MANAGED_CLUSTER_LABEL: CLUSTER, keys::HOST_ID_LABEL: HOST_ID})
}

/// This host's copy in the leaf of the host pod `uid`, changed by `extra`.
fn copy_of(uid: &str, extra: Value) -> Value {
    let copy = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": "leaf-uid-p",
            "labels": ours(), "annotations": {keys::HOST_POD_UID_ANNOTATION: uid},
            "creationTimestamp": k8s_openapi::jiff::Timestamp::now().to_string()},
        "spec": {"containers": [{"name": "c", "image": "i"}]}
    });
    fake_api::merged(copy, extra)
}

fn copy(extra: Value) -> Pod {
    serde_json::from_value(copy_of("uid-p", extra)).expect("copy")
}

fn namespace() -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})
}

/// The host deletions of `default/p`, as (gracePeriodSeconds, precondition uid).
fn host_deletions(f: &Fixture) -> Vec<(Value, Value)> {
    fake_api::sent(&f.host_sent, "DELETE", &format!("{NS}/pods/p"))
        .into_iter()
        .map(|b| {
            (
                b["gracePeriodSeconds"].clone(),
                b["preconditions"]["uid"].clone(),
            )
        })
        .collect()
}

fn status_writes(f: &Fixture) -> Vec<Value> {
    fake_api::sent(&f.host_sent, "PATCH", &format!("{NS}/pods/p/status"))
}

fn leaf_pod_condition(status: &Value) -> Option<Value> {
    status["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == LEAF_POD_CONDITION)
        .cloned()
}

#[tokio::test]
async fn a_new_pod_gets_its_namespace_config_map_secret_claim_account_and_copy_in_the_leaf() {
    let host = Server::default()
        .with(
            &format!("{NS}/configmaps/cm"),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cm", "namespace": "default", "uid": "cm-uid"},
                "data": {"k": "v"}}),
        )
        .with(
            &format!("{NS}/secrets/s"),
            json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "s", "namespace": "default", "uid": "s-uid"},
                "data": {"k": "dg=="}}),
        )
        .with(
            &format!("{NS}/persistentvolumeclaims/data"),
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data", "namespace": "default", "uid": "pvc-uid"},
                "spec": {"accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}}}}),
        );
    let f = fixture(host, Server::default());
    let pod = host_pod(json!({"spec": {"serviceAccountName": "runner", "volumes": [
        {"name": "cfg", "configMap": {"name": "cm"}},
        {"name": "sec", "secret": {"secretName": "s"}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}}));
    f.sync(&pod, None).await.expect("synced");
    assert_eq!(
        f.leaf_writes(),
        [
            "POST /api/v1/namespaces".to_string(),
            format!("PATCH {NS}/configmaps/cm"),
            format!("PATCH {NS}/secrets/s"),
            format!("POST {NS}/persistentvolumeclaims"),
            format!("POST {NS}/serviceaccounts"),
            format!("POST {NS}/pods"),
        ]
    );
    let created = &fake_api::sent(&f.leaf_sent, "POST", &format!("{NS}/pods"))[0];
    assert_eq!(
        created["metadata"]["labels"][keys::MANAGED_CLUSTER_LABEL],
        CLUSTER
    );
    assert_eq!(created["metadata"]["labels"][keys::HOST_ID_LABEL], HOST_ID);
    assert_eq!(
        created["metadata"]["annotations"][keys::HOST_POD_UID_ANNOTATION],
        "uid-p"
    );
    assert_eq!(created["spec"]["nodeName"], Value::Null, "left to the leaf");
    let mark = fake_api::sent(
        &f.host_sent,
        "PATCH",
        &format!("{NS}/persistentvolumeclaims/data"),
    );
    assert_eq!(
        mark[0]["metadata"]["annotations"][keys::BOUND_IN_CLUSTER_ANNOTATION],
        CLUSTER
    );
    let status = status_writes(&f);
    let condition = leaf_pod_condition(&status[0]).expect("LeafPod condition written");
    assert_eq!(condition["message"], "created in leaf cluster east");
}

/// etcd's answer, through the API server, to a request over its --max-request-bytes.
fn too_large() -> (u16, Value) {
    (
        500,
        fake_api::status(500, "", "etcdserver: request is too large"),
    )
}

#[tokio::test]
async fn a_copy_the_leaf_cannot_store_leaves_nothing_there_and_is_not_tried_again_as_large() {
    let cm = |name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default", "uid": format!("{name}-uid")},
            "data": {"k": "v"}})
    };
    let host = Server::default()
        .with(&format!("{NS}/configmaps/fresh"), cm("fresh"))
        .with(&format!("{NS}/configmaps/shared"), cm("shared"))
        .with(
            &format!("{NS}/secrets/s"),
            json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "s", "namespace": "default", "uid": "s-uid"},
                "data": {"k": "dg=="}}),
        );
    // `shared` is there already, this host's, for another leaf pod: it stays.
    let shared_copy = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "shared", "namespace": "default", "uid": "leaf-shared",
            "labels": ours()}});
    let leaf = Server::default()
        .with(NS, namespace())
        .with(&format!("{NS}/configmaps/shared"), shared_copy)
        .answering(
            "PATCH",
            &format!("{NS}/configmaps/fresh"),
            (
                200,
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "fresh", "namespace": "default", "uid": "leaf-fresh"}}),
            ),
        )
        .answering("POST", &format!("{NS}/pods"), too_large());
    let f = fixture(host, leaf);
    let pod = host_pod(json!({"spec": {"volumes": [
        {"name": "a", "configMap": {"name": "fresh"}},
        {"name": "b", "configMap": {"name": "shared"}},
        {"name": "c", "secret": {"secretName": "s"}}]}}));
    let e = f.sync(&pod, None).await.expect_err("refused");
    let SyncError::TooLarge { object, bytes, .. } = &e else {
        panic!("not refused as too large: {e}");
    };
    assert_eq!(object, "default/p");
    assert!(*bytes > 0);
    assert!(e.to_string().contains("too large to store there"), "{e}");
    // What was copied for it alone is deleted again, under the UID it was created with.
    assert_eq!(
        f.leaf_writes(),
        [
            format!("PATCH {NS}/configmaps/fresh"),
            format!("PATCH {NS}/configmaps/shared"),
            format!("PATCH {NS}/secrets/s"),
            format!("POST {NS}/pods"),
            format!("DELETE {NS}/configmaps/fresh"),
            format!("DELETE {NS}/secrets/s"),
        ]
    );
    let deleted = fake_api::sent(&f.leaf_sent, "DELETE", &format!("{NS}/configmaps/fresh"));
    assert_eq!(deleted[0]["preconditions"]["uid"], "leaf-fresh");
    assert!(
        !f.leaf
            .copied
            .lock()
            .keys()
            .any(|d| d.name == "fresh" || d.name == "s"),
        "forgotten, so nothing follows them"
    );
    // Next time nothing is written: a copy as large is refused before.
    let before = f.leaf_writes().len();
    let again = f.sync(&pod, None).await.expect_err("refused again");
    assert!(matches!(again, SyncError::TooLarge { .. }), "{again}");
    assert_eq!(f.leaf_writes().len(), before, "{:?}", f.leaf_writes());
}

#[tokio::test]
async fn a_copy_created_by_an_earlier_run_is_adopted() {
    let leaf = Server::default()
        .with(NS, namespace())
        .answering(
            "POST",
            &format!("{NS}/pods"),
            (409, fake_api::status(409, "AlreadyExists", "exists")),
        )
        .with(&format!("{NS}/pods/p"), copy_of("uid-p", json!({})));
    let f = fixture(Server::default(), leaf);
    let pod = host_pod(owned());
    f.sync(&pod, None).await.expect("adopted");
    assert_eq!(f.leaf_writes(), [format!("POST {NS}/pods")]);
    assert_eq!(host_deletions(&f), []);
    assert!(leaf_pod_condition(&status_writes(&f)[0]).is_some());
    assert_eq!(f.avoided(), []);
}

#[tokio::test]
async fn a_copys_status_is_written_back_to_its_host_pod() {
    let f = fixture(Server::default(), Server::default());
    let running = copy(json!({"spec": {"nodeName": "leaf-1"},
        "status": {"phase": "Running", "podIP": "10.1.2.3"}}));
    f.sync(&host_pod(json!({})), Some(running))
        .await
        .expect("synced");
    let written = status_writes(&f);
    assert_eq!(written.len(), 1);
    assert_eq!(written[0]["status"]["phase"], "Running");
    assert_eq!(written[0]["status"]["podIP"], "10.1.2.3");
    assert_eq!(
        leaf_pod_condition(&written[0]).expect("condition")["message"],
        "running in leaf cluster east on node leaf-1"
    );
    assert_eq!(f.leaf_writes(), Vec::<String>::new());
}

#[tokio::test]
async fn a_foreign_config_map_is_never_used_and_its_pod_goes_with_the_leaf_avoided() {
    let leaf = Server::default().with(NS, namespace()).with(
        &format!("{NS}/configmaps/cm"),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": "default", "labels": {"team": "leaf-owner"}}}),
    );
    let host = Server::default().with(
        &format!("{NS}/configmaps/cm"),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": "default"}}),
    );
    let f = fixture(host, leaf);
    let pod = host_pod(fake_api::merged(
        owned(),
        json!({"spec": {"volumes": [{"name": "cfg", "configMap": {"name": "cm"}}]}}),
    ));
    f.sync(&pod, None).await.expect("handled");
    assert_eq!(
        f.leaf_writes(),
        Vec::<String>::new(),
        "the leaf was written"
    );
    assert_eq!(host_deletions(&f), [(json!(0), json!("uid-p"))]);
    assert_eq!(f.avoided(), [(CLUSTER.to_string(), Avoided::Refused)]);
}

#[tokio::test]
async fn a_bare_pod_whose_name_clashes_waits_undeleted() {
    let leaf = Server::default()
        .with(NS, namespace())
        .answering(
            "POST",
            &format!("{NS}/pods"),
            (409, fake_api::status(409, "AlreadyExists", "exists")),
        )
        .with(
            &format!("{NS}/pods/p"),
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "default", "labels": {"app": "theirs"}}}),
        );
    let f = fixture(Server::default(), leaf);
    let result = f.sync(&host_pod(json!({})), None).await;
    assert!(
        matches!(result, Err(SyncError::Clash { kind: "Pod", .. })),
        "{result:?}"
    );
    assert_eq!(
        f.leaf_writes(),
        [format!("POST {NS}/pods")],
        "only the refused create"
    );
    assert_eq!(host_deletions(&f), []);
    assert_eq!(status_writes(&f), Vec::<Value>::new());
}

#[tokio::test]
async fn a_foreign_pod_of_the_same_name_is_not_adopted_and_the_owned_pod_goes() {
    let leaf = Server::default()
        .with(NS, namespace())
        .answering(
            "POST",
            &format!("{NS}/pods"),
            (409, fake_api::status(409, "AlreadyExists", "exists")),
        )
        .with(
            &format!("{NS}/pods/p"),
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "default", "labels": {"app": "theirs"}}}),
        );
    let f = fixture(Server::default(), leaf);
    f.sync(&host_pod(owned()), None).await.expect("handled");
    assert!(!fake_api::called(&f.leaf_calls, "DELETE", "/pods/p"));
    assert_eq!(host_deletions(&f), [(json!(0), json!("uid-p"))]);
    assert_eq!(f.avoided(), [(CLUSTER.to_string(), Avoided::Refused)]);
}

/// Older than the default `--leaf-pending-timeout` (120 s).
fn long_ago() -> String {
    (k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(600))
        .to_string()
}

#[tokio::test]
async fn a_copy_pending_too_long_is_taken_back_and_its_leaf_avoided() {
    let f = fixture(Server::default(), Server::default());
    let pending = copy(json!({"metadata": {"creationTimestamp": long_ago()},
        "status": {"phase": "Pending"}}));
    f.sync(&host_pod(owned()), Some(pending))
        .await
        .expect("taken back");
    let leaf_deletes = fake_api::sent(&f.leaf_sent, "DELETE", &format!("{NS}/pods/p"));
    assert_eq!(leaf_deletes.len(), 1, "copy not deleted");
    assert_eq!(leaf_deletes[0]["gracePeriodSeconds"], 0);
    assert_eq!(leaf_deletes[0]["preconditions"]["uid"], "leaf-uid-p");
    assert_eq!(host_deletions(&f), [(json!(0), json!("uid-p"))]);
    assert_eq!(f.avoided(), [(CLUSTER.to_string(), Avoided::Pending)]);
}

/// A leaf that stops answering cannot delete the copy: the host pod is deleted
/// gracefully instead (it stays Terminating, as on an unreachable node) so that its owner
/// replaces it and its gang can be taken back, and the copy is deleted once the leaf
/// answers, before the host pod's deletion is finished.
#[tokio::test]
async fn a_copy_pending_too_long_in_a_leaf_that_does_not_answer_is_taken_back_without_it() {
    let f = fixture(Server::default(), Server::default());
    f.leaf.answered_at(None);
    let pending = copy(json!({"metadata": {"creationTimestamp": long_ago()},
        "status": {"phase": "Pending"}}));
    f.sync(&host_pod(owned()), Some(pending.clone()))
        .await
        .expect("taken back");
    assert_eq!(f.leaf_writes(), Vec::<String>::new(), "the leaf was asked");
    assert_eq!(
        host_deletions(&f),
        [(Value::Null, json!("uid-p"))],
        "the host pod is deleted with its grace period, not at once"
    );
    assert_eq!(f.avoided(), [(CLUSTER.to_string(), Avoided::Pending)]);

    // Terminating while the leaf is still silent: nothing more.
    let terminating = host_pod(json!({"metadata": {
        "deletionTimestamp": k8s_openapi::jiff::Timestamp::now().to_string(),
        "deletionGracePeriodSeconds": 30,
        "ownerReferences": owned()["metadata"]["ownerReferences"].clone()}}));
    f.sync(&terminating, Some(pending.clone()))
        .await
        .expect("waits");
    assert_eq!(f.leaf_writes(), Vec::<String>::new());
    assert_eq!(host_deletions(&f).len(), 1);

    // The leaf answers again: its copy goes first.
    f.leaf.answered_at(Some(Instant::now()));
    f.sync(&terminating, Some(pending)).await.expect("deleted");
    assert_eq!(f.leaf_writes(), [format!("DELETE {NS}/pods/p")]);
}

#[tokio::test]
async fn a_copy_pending_less_than_the_timeout_stays() {
    let f = fixture(Server::default(), Server::default());
    let pending = copy(json!({"status": {"phase": "Pending"}}));
    f.sync(&host_pod(owned()), Some(pending))
        .await
        .expect("synced");
    assert!(!fake_api::called(&f.leaf_calls, "DELETE", "/pods/p"));
    assert_eq!(host_deletions(&f), []);
    assert_eq!(f.avoided(), []);
}

/// The host's cache with the virtual node of `east` and nothing on it.
fn with_virtual_node(f: &Fixture) {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": keys::virtual_node_name(CLUSTER)},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}
    }))
    .expect("node");
    crate::control::watch::lock(&f.side.cache).apply_node(Arc::new(node));
}

#[tokio::test]
async fn a_leaf_copy_whose_host_pod_is_gone_is_deleted() {
    let f = fixture(Server::default(), Server::default());
    with_virtual_node(&f);
    f.leaf.saw_pod(copy(json!({"metadata": {"name": "gone"}})));
    reconcile(&f.host, &f.side, &f.leaf).await;
    assert!(
        fake_api::called(&f.leaf_calls, "DELETE", &format!("{NS}/pods/gone")),
        "orphan kept: {:?}",
        f.leaf_writes()
    );
}

#[tokio::test]
async fn a_former_leader_deletes_no_orphan() {
    let f = fixture(Server::default(), Server::default());
    with_virtual_node(&f);
    f.leaf.saw_pod(copy(json!({"metadata": {"name": "gone"}})));
    f.leader.send_replace(false);
    reconcile(&f.host, &f.side, &f.leaf).await;
    assert!(!fake_api::called(&f.leaf_calls, "DELETE", "/pods/gone"));
}

#[tokio::test]
async fn a_copy_of_an_earlier_pod_of_the_same_name_goes_before_the_new_one_comes() {
    let f = fixture(Server::default(), Server::default());
    let earlier: Pod = serde_json::from_value(copy_of("uid-earlier", json!({}))).expect("copy");
    f.sync(&host_pod(json!({})), Some(earlier))
        .await
        .expect("synced");
    assert_eq!(f.leaf_writes(), [format!("DELETE {NS}/pods/p")]);
    assert_eq!(status_writes(&f), Vec::<Value>::new());
}

fn deleted(grace: i64) -> Value {
    json!({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z",
        "deletionGracePeriodSeconds": grace}})
}

#[tokio::test]
async fn a_deleted_host_pod_has_its_copy_deleted_with_the_same_grace_period() {
    let f = fixture(Server::default(), Server::default());
    f.sync(&host_pod(deleted(42)), Some(copy(json!({}))))
        .await
        .expect("synced");
    let leaf_deletes = fake_api::sent(&f.leaf_sent, "DELETE", &format!("{NS}/pods/p"));
    assert_eq!(leaf_deletes.len(), 1, "copy not deleted");
    assert_eq!(leaf_deletes[0]["gracePeriodSeconds"], 42);
    assert_eq!(host_deletions(&f), [], "finished before the copy is gone");
}

#[tokio::test]
async fn a_deleted_host_pod_is_finished_once_its_copy_is_gone() {
    let f = fixture(Server::default(), Server::default());
    f.sync(&host_pod(deleted(30)), None).await.expect("synced");
    assert!(fake_api::called(
        &f.leaf_calls,
        "GET",
        &format!("{NS}/pods/p")
    ));
    assert_eq!(host_deletions(&f), [(json!(0), json!("uid-p"))]);
}

#[tokio::test]
async fn a_deleted_host_pod_stays_terminating_while_its_leaf_is_silent() {
    let f = fixture(Server::default(), Server::default());
    f.leaf.answered_at(None);
    f.sync(&host_pod(deleted(30)), None).await.expect("synced");
    f.sync(&host_pod(deleted(30)), Some(copy(json!({}))))
        .await
        .expect("synced");
    assert_eq!(f.leaf_writes(), Vec::<String>::new());
    assert_eq!(f.host_writes(), Vec::<String>::new());
}

fn with_leaf_pod_condition() -> Value {
    json!({"status": {"phase": "Running", "conditions": [
        {"type": LEAF_POD_CONDITION, "status": "True", "reason": "LeafPodCreated"}]}})
}

#[tokio::test]
async fn a_vanished_copy_fails_its_host_pod() {
    let f = fixture(Server::default(), Server::default());
    f.sync(&host_pod(with_leaf_pod_condition()), None)
        .await
        .expect("synced");
    let written = status_writes(&f);
    assert_eq!(written.len(), 1, "host pod not failed");
    assert_eq!(written[0]["status"]["phase"], "Failed");
    assert_eq!(written[0]["status"]["reason"], "LeafPodDeleted");
    assert!(
        !fake_api::called(&f.leaf_calls, "POST", "/pods"),
        "copy recreated"
    );
}

#[tokio::test]
async fn a_copy_the_leaf_watch_has_not_shown_yet_is_not_taken_for_vanished() {
    let leaf = Server::default().with(&format!("{NS}/pods/p"), copy_of("uid-p", json!({})));
    let f = fixture(Server::default(), leaf);
    f.sync(&host_pod(with_leaf_pod_condition()), None)
        .await
        .expect("synced");
    assert_eq!(status_writes(&f), Vec::<Value>::new());
}

#[tokio::test]
async fn a_former_leader_writes_nothing_for_a_pod() {
    let f = fixture(Server::default(), Server::default());
    f.leader.send_replace(false);
    let result = f.sync(&host_pod(owned()), None).await;
    assert!(matches!(result, Err(SyncError::NotLeader)), "{result:?}");
    assert_eq!(fake_api::writes(&f.leaf_calls), Vec::<String>::new());
    assert_eq!(f.host_writes(), Vec::<String>::new());
}

/// The UID the leaf gave this host's copy, as [`copy_of`] has it.
const LEAF_UID: &str = "leaf-uid-p";

/// A pod of the leaf user's own, carrying the marks and the annotation of the copy of
/// host pod `uid-p`, and a status of their choosing.
fn forged(extra: Value) -> Pod {
    let pod = copy_of(
        "uid-p",
        json!({"metadata": {"uid": "forged-uid"}, "spec": {"nodeName": "leaf-1"},
            "status": {"phase": "Running", "podIP": "10.66.6.6",
                "podIPs": [{"ip": "10.66.6.6"}],
                "conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    serde_json::from_value(fake_api::merged(pod, extra)).expect("forged")
}

/// Host pod `default/p` whose copy (`LEAF_UID`) ran in the leaf at 10.1.2.3, recorded.
fn with_recorded_copy() -> Value {
    json!({"metadata": {"annotations": {keys::LEAF_POD_UID_ANNOTATION: LEAF_UID}},
        "status": {"phase": "Running", "podIP": "10.1.2.3", "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": LEAF_POD_CONDITION, "status": "True", "reason": "LeafPodCreated"}]}})
}

/// The events the host was sent so far (they go in the background: given a moment).
async fn events(f: &Fixture, at_least: usize) -> Vec<Value> {
    let all = || {
        f.host_sent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(c, _)| c.contains("/events") && !c.starts_with("GET"))
            .map(|(_, b)| b.clone())
            .collect::<Vec<_>>()
    };
    for _ in 0..200 {
        if all().len() >= at_least {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    all()
}

#[tokio::test]
async fn a_created_copys_leaf_uid_is_recorded_on_its_host_pod_with_the_leaf_pod_condition() {
    let leaf = Server::default().with(NS, namespace()).answering(
        "POST",
        &format!("{NS}/pods"),
        (201, copy_of("uid-p", json!({}))),
    );
    let f = fixture(Server::default(), leaf);
    f.sync(&host_pod(json!({})), None).await.expect("synced");
    let created = &fake_api::sent(&f.leaf_sent, "POST", &format!("{NS}/pods"))[0];
    assert_eq!(
        created["metadata"]["annotations"][keys::LEAF_POD_UID_ANNOTATION],
        Value::Null,
        "the host's record is not the copy's"
    );
    let written = status_writes(&f);
    assert_eq!(written.len(), 1, "one write: record and condition together");
    assert_eq!(
        written[0]["metadata"]["annotations"][keys::LEAF_POD_UID_ANNOTATION],
        LEAF_UID
    );
    assert_eq!(written[0]["metadata"]["uid"], "uid-p", "only on this pod");
    assert!(leaf_pod_condition(&written[0]).is_some());
    assert_eq!(f.leaf.ownership.unrecorded("uid-p"), None, "recorded");
}

#[tokio::test]
async fn a_forged_copy_is_neither_adopted_nor_deleted_and_its_host_pod_fails_once_reported() {
    let f = fixture(Server::default(), Server::default());
    let pod = host_pod(fake_api::merged(owned(), with_recorded_copy()));
    f.sync(&pod, Some(forged(json!({})))).await.expect("synced");
    assert_eq!(
        f.leaf_writes(),
        Vec::<String>::new(),
        "the forged pod is left alone"
    );
    let written = status_writes(&f);
    assert_eq!(written.len(), 1, "{written:?}");
    let status = &written[0]["status"];
    assert_eq!(status["phase"], "Failed");
    assert_eq!(status["reason"], "LeafPodReplaced");
    assert_eq!(
        status["podIP"],
        Value::Null,
        "nothing of the forged pod: {status}"
    );
    assert!(
        !written[0].to_string().contains("10.66.6.6"),
        "the forged pod's IP reached the host: {}",
        written[0]
    );
    let ready = status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .cloned();
    assert_eq!(ready.map(|c| c["status"].clone()), Some(json!("False")));
    assert_eq!(
        host_deletions(&f),
        [],
        "failed, not deleted: its controller replaces it"
    );
    let sent = events(&f, 1).await;
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["reason"], "ForgedLeafCopy");
    assert_eq!(sent[0]["type"], "Warning");
    let note = sent[0]["note"].as_str().unwrap_or_default();
    for part in ["leaf cluster east", "default/p", "forged-uid", LEAF_UID] {
        assert!(note.contains(part), "{part} not in {note:?}");
    }
    // The next resyncs report it no more.
    f.sync(&pod, Some(forged(json!({})))).await.expect("synced");
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(events(&f, 2).await.len(), 1, "reported once per forged UID");
    assert_eq!(f.leaf_writes(), Vec::<String>::new());
}

#[tokio::test]
async fn a_forged_pod_pending_for_long_is_not_taken_back() {
    let f = fixture(Server::default(), Server::default());
    let pending = forged(json!({"metadata": {"creationTimestamp": long_ago()},
        "spec": {"nodeName": null}, "status": {"phase": "Pending"}}));
    f.sync(
        &host_pod(fake_api::merged(owned(), with_recorded_copy())),
        Some(pending),
    )
    .await
    .expect("synced");
    assert_eq!(f.leaf_writes(), Vec::<String>::new());
    assert_eq!(host_deletions(&f), []);
    assert_eq!(f.avoided(), []);
}

#[tokio::test]
async fn a_forged_pod_found_when_the_watch_shows_no_copy_is_not_taken_for_it() {
    let leaf = Server::default().with(
        &format!("{NS}/pods/p"),
        serde_json::to_value(forged(json!({}))).expect("json"),
    );
    let f = fixture(Server::default(), leaf);
    f.sync(&host_pod(with_recorded_copy()), None)
        .await
        .expect("synced");
    let written = status_writes(&f);
    assert_eq!(written.len(), 1, "{written:?}");
    assert_eq!(written[0]["status"]["reason"], "LeafPodReplaced");
    assert_eq!(f.leaf_writes(), Vec::<String>::new());
}

#[tokio::test]
async fn a_deleted_host_pod_leaves_a_forged_pod_and_finishes_as_its_copy_is_gone() {
    let leaf = Server::default().with(
        &format!("{NS}/pods/p"),
        serde_json::to_value(forged(json!({}))).expect("json"),
    );
    let f = fixture(Server::default(), leaf);
    let pod = host_pod(fake_api::merged(with_recorded_copy(), deleted(30)));
    f.sync(&pod, Some(forged(json!({})))).await.expect("synced");
    assert_eq!(
        f.leaf_writes(),
        Vec::<String>::new(),
        "the forged pod was deleted"
    );
    assert_eq!(host_deletions(&f), [(json!(0), json!("uid-p"))]);
    assert_eq!(events(&f, 1).await.len(), 1);
}

#[tokio::test]
async fn a_deleted_host_pod_still_deletes_its_recorded_copy() {
    let f = fixture(Server::default(), Server::default());
    let pod = host_pod(fake_api::merged(with_recorded_copy(), deleted(30)));
    f.sync(&pod, Some(copy(json!({})))).await.expect("synced");
    let leaf_deletes = fake_api::sent(&f.leaf_sent, "DELETE", &format!("{NS}/pods/p"));
    assert_eq!(leaf_deletes.len(), 1);
    assert_eq!(leaf_deletes[0]["preconditions"]["uid"], LEAF_UID);
}

#[tokio::test]
async fn a_copy_created_before_records_is_adopted_and_recorded_at_first_sight() {
    let f = fixture(Server::default(), Server::default());
    let legacy = host_pod(json!({"status": {"phase": "Running", "conditions": [
        {"type": LEAF_POD_CONDITION, "status": "True", "reason": "LeafPodCreated"}]}}));
    let running = copy(json!({"spec": {"nodeName": "leaf-1"},
        "status": {"phase": "Running", "podIP": "10.1.2.3"}}));
    f.sync(&legacy, Some(running)).await.expect("synced");
    let written = status_writes(&f);
    assert_eq!(written.len(), 1);
    assert_eq!(
        written[0]["metadata"]["annotations"][keys::LEAF_POD_UID_ANNOTATION],
        LEAF_UID
    );
    assert_eq!(written[0]["status"]["podIP"], "10.1.2.3");
}

#[tokio::test]
async fn a_copy_whose_record_failed_is_known_by_the_uid_created_not_by_what_holds_the_name() {
    let host = Server::default().answering(
        "PATCH",
        &format!("{NS}/pods/p/status"),
        (500, fake_api::status(500, "InternalError", "etcd")),
    );
    let leaf = Server::default().with(NS, namespace()).answering(
        "POST",
        &format!("{NS}/pods"),
        (201, copy_of("uid-p", json!({}))),
    );
    let f = fixture(host, leaf);
    let pod = host_pod(owned());
    assert!(f.sync(&pod, None).await.is_err(), "the record write failed");
    assert_eq!(
        f.leaf.ownership.unrecorded("uid-p").as_deref(),
        Some(LEAF_UID)
    );
    // Before the retry, the copy is replaced by a pod of the leaf user's.
    let _ = f.sync(&pod, Some(forged(json!({})))).await;
    assert!(
        !status_writes(&f)
            .iter()
            .any(|w| w.to_string().contains("10.66.6.6")),
        "the forged pod was adopted"
    );
    assert_eq!(f.leaf_writes(), [format!("POST {NS}/pods")]);
    assert_eq!(events(&f, 1).await[0]["reason"], "ForgedLeafCopy");
}

#[tokio::test]
async fn a_forged_pod_whose_host_pod_failed_is_no_orphan_to_delete() {
    let host = Server::default().with(
        &format!("{NS}/pods/p"),
        serde_json::to_value(host_pod(fake_api::merged(
            with_recorded_copy(),
            json!({"status": {"phase": "Failed", "reason": "LeafPodReplaced"}}),
        )))
        .expect("json"),
    );
    let f = fixture(host, Server::default());
    with_virtual_node(&f);
    f.leaf.saw_pod(forged(json!({})));
    reconcile(&f.host, &f.side, &f.leaf).await;
    reconcile(&f.host, &f.side, &f.leaf).await;
    assert_eq!(
        f.leaf_writes(),
        Vec::<String>::new(),
        "the forged pod was deleted"
    );
    assert_eq!(events(&f, 1).await.len(), 1, "reported once");
}

#[tokio::test]
async fn a_copy_whose_failed_host_pod_recorded_it_is_still_deleted_as_an_orphan() {
    let host = Server::default().with(
        &format!("{NS}/pods/p"),
        serde_json::to_value(host_pod(fake_api::merged(
            with_recorded_copy(),
            json!({"status": {"phase": "Succeeded"}}),
        )))
        .expect("json"),
    );
    let f = fixture(host, Server::default());
    with_virtual_node(&f);
    f.leaf.saw_pod(copy(json!({})));
    reconcile(&f.host, &f.side, &f.leaf).await;
    assert_eq!(f.leaf_writes(), [format!("DELETE {NS}/pods/p")]);
}

#[tokio::test]
async fn a_forged_pod_holding_the_name_of_a_pod_never_copied_is_a_clash() {
    let f = fixture(Server::default(), Server::default());
    f.leaf.ownership.forged("forged-uid");
    let result = f.sync(&host_pod(json!({})), Some(forged(json!({})))).await;
    assert!(
        matches!(result, Err(SyncError::Clash { kind: "Pod", .. })),
        "{result:?}"
    );
    assert_eq!(f.leaf_writes(), Vec::<String>::new());
    assert_eq!(status_writes(&f), Vec::<Value>::new());
}

#[tokio::test]
async fn a_recorded_copy_whose_status_is_written_back_is_not_written_again() {
    let f = fixture(Server::default(), Server::default());
    let running = || {
        copy(json!({"spec": {"nodeName": "leaf-1"},
            "status": {"phase": "Running", "podIP": "10.1.2.3"}}))
    };
    f.sync(&host_pod(json!({})), Some(running()))
        .await
        .expect("synced");
    let written = status_writes(&f);
    assert_eq!(written.len(), 1);
    // The host pod as that write left it.
    let after = host_pod(written[0].clone());
    f.sync(&after, Some(running())).await.expect("synced");
    assert_eq!(
        status_writes(&f).len(),
        1,
        "written again: {:?}",
        status_writes(&f)
    );
}

#[tokio::test]
async fn the_copy_created_is_the_one_the_leaf_check_judged() {
    let f = fixture(Server::default(), Server::default());
    let pod = host_pod(json!({}));
    // The leaf check judged (and assumed) the copy with an override's image; the policy
    // is gone or changed by the time pod sync runs.
    let mut judged = mcsched_engine::leaf::transform::leaf_pod(&pod, "", "").expect("copy");
    judged.spec.as_mut().expect("spec").containers[0].image = Some("mirror.eu/i".into());
    let info = Arc::new(mcsched_engine::snapshot::PodInfo::new(Arc::new(judged)));
    f.leaf.cache().assume(info, "east-1");
    f.sync(&pod, None).await.expect("synced");
    let created = &fake_api::sent(&f.leaf_sent, "POST", &format!("{NS}/pods"))[0];
    assert_eq!(created["spec"]["containers"][0]["image"], "mirror.eu/i");
    assert_eq!(
        created["metadata"]["labels"][keys::MANAGED_CLUSTER_LABEL],
        CLUSTER
    );
    assert_eq!(created["metadata"]["labels"][keys::HOST_ID_LABEL], HOST_ID);
}

#[tokio::test]
async fn a_claim_copy_of_an_earlier_claim_of_the_same_name_is_not_reused() {
    let host = Server::default().with(
        &format!("{NS}/persistentvolumeclaims/data"),
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "namespace": "default", "uid": "pvc-uid-2"},
            "spec": {"accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}}}),
    );
    // This host's copy of the claim deleted and recreated on the host since.
    let leaf = Server::default().with(
        &format!("{NS}/persistentvolumeclaims/data"),
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "namespace": "default", "uid": "leaf-pvc",
                "labels": ours(), "annotations": {keys::HOST_UID_ANNOTATION: "pvc-uid-1"}}}),
    );
    let f = fixture(host, leaf);
    let pod = host_pod(json!({"spec": {"volumes": [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}}));
    let e = f.sync(&pod, None).await.expect_err("waits");
    assert!(
        matches!(&e, SyncError::StaleClaimCopy { copied_from, .. } if copied_from == "pvc-uid-1"),
        "{e}"
    );
    assert!(
        !f.leaf_writes().iter().any(|w| w.ends_with("/pods")),
        "{:?}",
        f.leaf_writes()
    );
}

#[tokio::test]
async fn a_copy_the_leaf_refuses_for_a_field_it_does_not_serve_is_never_silently_lost() {
    // The leaf's answer to a create under strict field validation with a field it lacks.
    let strict = || {
        Server::default().with(NS, namespace()).answering(
            "POST",
            &format!("{NS}/pods"),
            (
                400,
                fake_api::status(
                    400,
                    "BadRequest",
                    "Pod in version \"v1\" cannot be handled as a Pod: strict decoding error: \
                     unknown field \"spec.evictionResponders\"",
                ),
            ),
        )
    };
    // A bare pod waits, its event naming the field.
    let f = fixture(Server::default(), strict());
    let pod = host_pod(json!({"spec": {"evictionResponders": [{"name": "r", "priority": 1}]}}));
    let result = f.sync(&pod, None).await;
    assert!(
        matches!(&result, Err(SyncError::FieldNotServed { object, .. }) if object == "pod default/p"),
        "{result:?}"
    );
    let sent = events(&f, 1).await;
    assert_eq!(sent[0]["reason"], "LeafRefused", "{sent:?}");
    let note = sent[0]["note"].as_str().unwrap_or_default();
    assert!(
        note.starts_with("leaf cluster east: leaf does not serve a field of pod default/p")
            && note.contains("unknown field \"spec.evictionResponders\""),
        "{note}"
    );
    assert_eq!(host_deletions(&f), []);
    // One with a controller goes, to be recreated elsewhere, and the leaf is avoided.
    let f = fixture(Server::default(), strict());
    f.sync(&host_pod(owned()), None).await.expect("handled");
    assert_eq!(host_deletions(&f), [(json!(0), json!("uid-p"))]);
    assert_eq!(f.avoided(), [(CLUSTER.to_string(), Avoided::Refused)]);
}

/// A v1.37 leaf whose EmptyDirVolumeMode gate is off: it knows `emptyDir.mode`, and its
/// pod strategy drops it on create; a dry run answers so.
fn dropping_the_mode() -> Server {
    Server::default().with(NS, namespace()).dry_running(|sent| {
        let mut answer = sent.clone();
        answer["metadata"]["uid"] = json!("dry-run-uid");
        answer["spec"]["restartPolicy"] = json!("Always");
        if let Some(volumes) = answer["spec"]["volumes"].as_array_mut() {
            for v in volumes {
                if let Some(e) = v["emptyDir"].as_object_mut() {
                    e.remove("mode");
                }
            }
        }
        (201, answer)
    })
}

fn dry_runs(f: &Fixture) -> usize {
    f.leaf_calls
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|c| c.starts_with("POST ") && c.ends_with(fake_api::DRY_RUN))
        .count()
}

#[tokio::test]
async fn a_copy_whose_field_the_leaf_would_drop_is_not_created_and_the_field_named() {
    let with_mode = |extra: Value| {
        host_pod(fake_api::merged(
            json!({"spec": {"volumes": [{"name": "scratch", "emptyDir": {"mode": 448}}]}}),
            extra,
        ))
    };
    // A bare pod waits, its event naming the field; nothing is created.
    let f = fixture(Server::default(), dropping_the_mode());
    let result = f.sync(&with_mode(json!({})), None).await;
    assert!(
        matches!(&result, Err(SyncError::FieldDropped { object, path, .. })
            if object == "pod default/p" && path == "spec.volumes[0].emptyDir.mode"),
        "{result:?}"
    );
    assert_eq!(dry_runs(&f), 1);
    assert!(
        !f.leaf_writes().iter().any(|w| w.ends_with("/pods")),
        "created: {:?}",
        f.leaf_writes()
    );
    let sent = events(&f, 1).await;
    assert_eq!(sent[0]["reason"], "LeafRefused", "{sent:?}");
    let note = sent[0]["note"].as_str().unwrap_or_default();
    assert!(
        note.starts_with("leaf cluster east: leaf drops spec.volumes[0].emptyDir.mode of pod default/p (its feature gate is off there"),
        "{note}"
    );
    assert_eq!(host_deletions(&f), []);
    // Remembered: the leaf check names it for any pod carrying it there.
    let other = json!({"spec": {"volumes": [{"name": "a", "emptyDir": {}},
        {"name": "b", "emptyDir": {"mode": 493}}]}});
    assert_eq!(
        f.leaf.kept.first_dropped(&other, Instant::now()),
        Some(("spec.volumes[1].emptyDir.mode".to_string(), String::new()))
    );
    // Tried again, it is verified again (the gate may have been turned on meanwhile).
    let again = f.sync(&with_mode(json!({})), None).await;
    assert!(
        matches!(&again, Err(SyncError::FieldDropped { .. })),
        "{again:?}"
    );
    assert_eq!(dry_runs(&f), 2);

    // One with a controller goes, to be recreated elsewhere, and the leaf is avoided.
    let f = fixture(Server::default(), dropping_the_mode());
    f.sync(&with_mode(owned()), None).await.expect("handled");
    assert_eq!(host_deletions(&f), [(json!(0), json!("uid-p"))]);
    assert_eq!(f.avoided(), [(CLUSTER.to_string(), Avoided::Refused)]);
    assert!(!f.leaf_writes().iter().any(|w| w.ends_with("/pods")));

    // The version the leaf reports is named, and another one forgets what was learned.
    let f = fixture(Server::default(), dropping_the_mode());
    f.leaf.kept.at_version("v1.37.2", Instant::now());
    f.leaf
        .set_served(mcsched_engine::leaf::served_fields::Served::Known(
            Arc::new(
                mcsched_engine::leaf::served_fields::ServedFields::from_document(
                    &serde_json::to_vec(&json!({"components": {"schemas": {
                "io.k8s.api.core.v1.Pod": {"type": "object", "properties": {}}}}}))
                    .unwrap_or_default(),
                    "v1.37.2",
                )
                .expect("document"),
            ),
        ));
    let e = f
        .sync(&with_mode(json!({})), None)
        .await
        .expect_err("refused");
    assert!(
        e.to_string()
            .starts_with("leaf (v1.37.2) drops spec.volumes[0].emptyDir.mode of pod default/p"),
        "{e}"
    );
    f.leaf.kept.at_version("v1.37.3", Instant::now());
    assert_eq!(f.leaf.kept.first_dropped(&other, Instant::now()), None);

    // A leaf that keeps it: created, after one dry run.
    let f = fixture(Server::default(), Server::default().with(NS, namespace()));
    f.sync(&with_mode(json!({})), None).await.expect("synced");
    assert_eq!(dry_runs(&f), 1);
    let created = fake_api::sent(&f.leaf_sent, "POST", &format!("{NS}/pods"));
    assert_eq!(created.len(), 1);
    assert_eq!(created[0]["spec"]["volumes"][0]["emptyDir"]["mode"], 448);
}

#[tokio::test]
async fn the_copies_of_one_shape_cost_one_dry_run() {
    let f = fixture(Server::default(), Server::default().with(NS, namespace()));
    for i in 0..100 {
        let pod = host_pod(
            json!({"metadata": {"name": format!("web-{i}"), "uid": format!("uid-{i}"),
            "labels": {"app": "web"}},
            "spec": {"volumes": [{"name": "scratch", "emptyDir": {"mode": 448}}]}}),
        );
        f.sync(&pod, None).await.expect("synced");
    }
    let creates = fake_api::sent(&f.leaf_sent, "POST", &format!("{NS}/pods"));
    assert_eq!((dry_runs(&f), creates.len()), (1, 100));
    // A copy with a field not verified yet on this leaf: one more.
    let pod = host_pod(json!({"metadata": {"name": "other", "uid": "uid-o"},
        "spec": {"hostname": "h"}}));
    f.sync(&pod, None).await.expect("synced");
    assert_eq!(dry_runs(&f), 2);
}
