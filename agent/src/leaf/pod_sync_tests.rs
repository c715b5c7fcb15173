//! Pod sync's decisions against in-memory host and leaf API servers (see `fake_api`):
//! what it creates, adopts, refuses, takes back and deletes, on which side.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use k8s_openapi::api::core::v1::{Node, Pod};
use mcsched_shared::keys;
use serde_json::{Value, json};

use super::{HostSide, LEAF_POD_CONDITION, SyncError, reconcile, sync_one};
use crate::events::EventSink;
use crate::fake_api::{self, Calls, Requests};
use crate::leaf::cluster::LeafCluster;
use crate::leaf::registry::Leaves;
use crate::leaf::rescheduling::Avoided;

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
}

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

    fn start(self) -> (kube::Client, Calls, Requests) {
        fake_api::recording(move |method, path, sent| {
            if let Some(a) = self.answers.get(&(method.to_string(), path.to_string())) {
                return a.clone();
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
        cache: Arc::new(Mutex::new(crate::cache::Cache::new())),
        synced: Arc::new(AtomicBool::new(true)),
        leaves: Arc::new(Leaves::new(Default::default())),
        events: EventSink::start(host_client.clone(), "test".into()),
        leader: leading,
        lease: Default::default(),
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
    crate::watch::lock(&f.side.cache).apply_node(Arc::new(node));
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
