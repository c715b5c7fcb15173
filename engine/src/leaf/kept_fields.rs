//! Whether a leaf keeps every field of a copy, as a dry run of the copy's creation answers.
//!
//! A leaf's API server that knows a field (its OpenAPI document has it, strict field
//! validation accepts it: [`super::served_fields`]) may still drop it on create: a field
//! whose feature gate is off there is cleared by the pod strategy (`dropDisabledFields`),
//! silently, and the leaf runs something else than the host asked for. Pod sync therefore
//! creates a copy with `dryRun=All` first and compares the answer with what it sent
//! ([`dropped`]): every field set in the copy must come back. [`KeptFields`] remembers per
//! leaf, at the version the leaf reports, the shapes already verified (so the copies of one
//! Deployment cost one dry run, not one each) and the fields found dropped (so the leaf
//! check keeps pods carrying them off that leaf). No I/O here: the agent asks, this judges.
//!
//! What counts as kept, walking the JSON generically (objects key by key, lists item by
//! item, by position or, for items with a `name`, by name):
//! - a field set in the copy that the answer lacks, or holds as null, was dropped; so was
//!   a scalar the answer cleared to its type's zero value (what dropping a field that is
//!   not a pointer leaves);
//! - what the server adds (defaults, admission's volumes and tolerations) is not judged, nor
//!   a value it changed to another one that is not empty (a quantity written canonically,
//!   `1000m` as `1`; an image a webhook rewrote): that is not a field dropped;
//! - a value sent empty (`false`, `0`, `""`, `[]`, `{}`) may come back omitted
//!   (`omitempty`), so it is not judged: a gated pointer field set to its zero value and
//!   dropped (`hostUsers: false`) is not seen;
//! - the metadata the server owns (`uid`, `resourceVersion`, `creationTimestamp`,
//!   `managedFields`, `generation`, `selfLink`) and the status (the server writes it on
//!   create) are not judged; labels and annotations are maps: each entry sent must come
//!   back (`metadata.labels[app]`).

use std::collections::{BTreeSet, HashSet};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::served_fields::{Step, format_path};

/// The most field path patterns remembered as verified per leaf: past it, the verified
/// shapes are forgotten and verified again.
pub const MAX_VERIFIED: usize = 4096;

/// What was learned of a leaf is forgotten this long after it began to be learned (and at
/// once when the leaf reports another version): a feature gate turned on or off without
/// an upgrade (an API server restarted with other flags) is seen again.
pub const FORGET_AFTER: Duration = Duration::from_secs(1800);

/// How deep a walk goes; below, nothing is judged.
const MAX_DEPTH: usize = 64;

/// Metadata the API server sets itself on create.
const SERVER_OWNED: [&str; 6] = [
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "managedFields",
    "generation",
    "selfLink",
];

/// Where in the object a key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Root,
    Metadata,
    /// Labels or annotations: keys of the user's choosing.
    Map,
    Inside,
}

/// The step to `key` of an object at `at`, and where it leads; None when not judged.
fn child(at: At, key: &str) -> Option<(Step<'_>, At)> {
    match at {
        At::Root => match key {
            "status" => None,
            "metadata" => Some((Step::Field(key), At::Metadata)),
            _ => Some((Step::Field(key), At::Inside)),
        },
        At::Metadata if SERVER_OWNED.contains(&key) => None,
        At::Metadata if matches!(key, "labels" | "annotations") => {
            Some((Step::Field(key), At::Map))
        }
        At::Map => Some((Step::Key(key), At::Inside)),
        At::Metadata | At::Inside => Some((Step::Field(key), At::Inside)),
    }
}

/// Null, `false`, `0`, `""`, `[]`, and an object of only those: what `omitempty` may
/// leave out, and what sets nothing.
fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.values().all(is_empty),
    }
}

/// A field path with its indexes removed, as remembered: `spec.volumes[].emptyDir.mode`.
fn pattern(path: &[Step<'_>]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Field(f) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(f);
            }
            Step::Index(_) => out.push_str("[]"),
            Step::Key(k) => {
                out.push('[');
                out.push_str(k);
                out.push(']');
            }
        }
    }
    out
}

/// A field of a copy that the leaf dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// In kube's style: `spec.volumes[0].emptyDir.mode`.
    pub path: String,
    /// Without indexes: `spec.volumes[].emptyDir.mode`.
    pub pattern: String,
}

/// Every field set in `sent` (a pod as created) that `answer` (the API server's answer to
/// its creation) dropped, in the walk's order (keys by name, lists by index): empty when
/// it kept them all.
pub fn dropped(sent: &Value, answer: &Value) -> Vec<Dropped> {
    let mut out = Vec::new();
    compare(At::Root, sent, Some(answer), &mut Vec::new(), &mut out);
    out
}

/// The path of the first field of `sent` that `answer` dropped.
pub fn first_dropped(sent: &Value, answer: &Value) -> Option<String> {
    dropped(sent, answer).into_iter().next().map(|d| d.path)
}

fn compare<'v>(
    at: At,
    sent: &'v Value,
    answer: Option<&Value>,
    path: &mut Vec<Step<'v>>,
    out: &mut Vec<Dropped>,
) {
    if path.len() >= MAX_DEPTH || is_empty(sent) {
        return;
    }
    let Some(answer) = answer.filter(|a| !a.is_null()) else {
        out.push(Dropped {
            path: format_path(path),
            pattern: pattern(path),
        });
        return;
    };
    match (sent, answer) {
        (Value::Object(fields), Value::Object(back)) => {
            for (key, v) in fields {
                let Some((step, inner)) = child(at, key) else {
                    continue;
                };
                path.push(step);
                compare(inner, v, back.get(key), path, out);
                path.pop();
            }
        }
        (Value::Array(items), Value::Array(back)) => {
            for (n, v) in items.iter().enumerate() {
                path.push(Step::Index(n));
                compare(At::Inside, v, counterpart(items, n, back), path, out);
                path.pop();
            }
        }
        // Cleared to its zero value.
        (Value::Bool(_), Value::Bool(false))
        | (Value::Number(_), Value::Number(_))
        | (Value::String(_), Value::String(_))
            if is_empty(answer) =>
        {
            out.push(Dropped {
                path: format_path(path),
                pattern: pattern(path),
            });
        }
        // The same value, another one, or another type: the server's, not a field dropped.
        _ => {}
    }
}

/// The answer's item for `sent[n]`: an item with a `name` is the answer's item of that
/// name (the same occurrence of it: admission may put items before it, a sidecar or a
/// volume), any other the item at the same index.
fn counterpart<'a>(sent: &[Value], n: usize, answer: &'a [Value]) -> Option<&'a Value> {
    let name = |v: &Value| v.get("name").and_then(Value::as_str).map(str::to_owned);
    match sent.get(n).and_then(name) {
        Some(wanted) => {
            let same = |v: &&Value| name(v).as_deref() == Some(wanted.as_str());
            let occurrence = sent[..n].iter().filter(same).count();
            answer.iter().filter(same).nth(occurrence)
        }
        None => answer.get(n),
    }
}

/// Calls `visit` with the path of every value set in `value` (not empty) that a
/// comparison judges, objects and lists as well as what they hold, in the walk's order;
/// it stops at the first `true`.
fn walk<'v>(
    at: At,
    value: &'v Value,
    path: &mut Vec<Step<'v>>,
    visit: &mut impl FnMut(&[Step<'v>], &Value) -> bool,
) -> bool {
    if path.len() >= MAX_DEPTH || is_empty(value) {
        return false;
    }
    if !path.is_empty() && visit(path, value) {
        return true;
    }
    match value {
        Value::Object(fields) => {
            for (key, v) in fields {
                let Some((step, inner)) = child(at, key) else {
                    continue;
                };
                path.push(step);
                let found = walk(inner, v, path, visit);
                path.pop();
                if found {
                    return true;
                }
            }
            false
        }
        Value::Array(items) => {
            for (n, v) in items.iter().enumerate() {
                path.push(Step::Index(n));
                let found = walk(At::Inside, v, path, visit);
                path.pop();
                if found {
                    return true;
                }
            }
            false
        }
        _ => false,
    }
}

/// The field path patterns of what a copy sets (each value that is not empty, objects
/// and lists by what they hold): what a dry run of it verifies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shape(BTreeSet<Box<str>>);

impl Shape {
    pub fn of(copy: &Value) -> Self {
        let mut patterns = BTreeSet::new();
        walk(At::Root, copy, &mut Vec::new(), &mut |path, v| {
            if !matches!(v, Value::Object(_) | Value::Array(_)) {
                patterns.insert(pattern(path).into_boxed_str());
            }
            false
        });
        Shape(patterns)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn patterns(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|p| &**p)
    }
}

/// What a dry run taught of one leaf, at the version it reported.
#[derive(Debug, Default)]
struct Memory {
    version: String,
    /// When this began to be learned (None: nothing learned yet).
    since: Option<Instant>,
    /// Patterns every one of which some dry run found kept.
    verified: HashSet<Box<str>>,
    /// Patterns some dry run found dropped.
    dropped: BTreeSet<Box<str>>,
}

impl Memory {
    fn forget(&mut self, version: &str) {
        self.version = version.to_string();
        self.since = None;
        self.verified.clear();
        self.dropped.clear();
    }
}

/// What dry runs taught of one leaf: the shapes of copies it keeps, and the fields it drops.
/// Learned at one version of the leaf, forgotten at another, and after [`FORGET_AFTER`].
#[derive(Debug, Default)]
pub struct KeptFields {
    memory: Mutex<Memory>,
}

impl KeptFields {
    /// The memory at `version` and `now`: what was learned at another version, or too long
    /// ago, is forgotten first.
    fn at(&self, version: &str, now: Instant) -> MutexGuard<'_, Memory> {
        let mut m = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        let stale = m
            .since
            .is_some_and(|t| now.saturating_duration_since(t) >= FORGET_AFTER);
        if m.version != version || stale {
            m.forget(version);
        }
        m
    }

    /// The leaf reports `version` (its probe): what was learned at another is forgotten.
    pub fn at_version(&self, version: &str, now: Instant) {
        drop(self.at(version, now));
    }

    /// The version what is known was learned at (empty: not known).
    pub fn version(&self) -> String {
        self.memory
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .version
            .clone()
    }

    /// None when every field `copy` sets is of a shape a dry run at `version` found kept:
    /// the copy is created without one. Otherwise the shape the dry run is to verify.
    pub fn to_verify(&self, version: &str, copy: &Value, now: Instant) -> Option<Shape> {
        let shape = Shape::of(copy);
        let m = self.at(version, now);
        let verified = shape.0.iter().all(|p| m.verified.contains(p));
        (!verified).then_some(shape)
    }

    /// A dry run at `version` kept every field of a copy of `shape`. Past [`MAX_VERIFIED`]
    /// patterns the ones verified before are forgotten; a shape larger than that is not
    /// remembered at all.
    pub fn kept(&self, version: &str, shape: &Shape, now: Instant) {
        if shape.len() > MAX_VERIFIED {
            return;
        }
        let mut m = self.at(version, now);
        let new = shape.0.iter().filter(|p| !m.verified.contains(*p)).count();
        if m.verified.len() + new > MAX_VERIFIED {
            m.verified.clear();
        }
        m.verified.extend(shape.0.iter().cloned());
        m.since.get_or_insert(now);
    }

    /// A dry run at `version` dropped these fields: the leaf check keeps copies carrying
    /// any of their patterns off the leaf, and they are verified again before any is
    /// created there.
    pub fn dropped(&self, version: &str, dropped: &[Dropped], now: Instant) {
        let mut m = self.at(version, now);
        for d in dropped {
            m.verified.remove(d.pattern.as_str());
            m.dropped.insert(d.pattern.as_str().into());
        }
        m.since.get_or_insert(now);
    }

    /// How many patterns are remembered as verified.
    pub fn verified_len(&self) -> usize {
        self.memory
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .verified
            .len()
    }

    /// Whether some field is known to be dropped (as of `now`).
    pub fn drops_any(&self, now: Instant) -> bool {
        let version = self.version();
        !self.at(&version, now).dropped.is_empty()
    }

    /// The path of the first field `copy` sets that the leaf is known to drop, with the
    /// version it was found at: the leaf check's reason ([`drops`]).
    pub fn first_dropped(&self, copy: &Value, now: Instant) -> Option<(String, String)> {
        let version = self.version();
        let m = self.at(&version, now);
        if m.dropped.is_empty() {
            return None;
        }
        let mut found = None;
        walk(At::Root, copy, &mut Vec::new(), &mut |path, _| {
            if m.dropped.contains(pattern(path).as_str()) {
                found = Some(format_path(path));
                true
            } else {
                false
            }
        });
        found.map(|path| (path, m.version.clone()))
    }
}

/// The leaf check's reason for a copy carrying a field its leaf drops: `leaf cluster east
/// (v1.37.2) drops spec.volumes[0].emptyDir.mode (its feature gate is off there, or its
/// admission removes it)`. `version` is the leaf's as `/version` reports it (empty:
/// unknown).
pub fn drops(cluster: &str, version: &str, path: &str) -> String {
    let version = if version.is_empty() {
        String::new()
    } else {
        format!(" ({version})")
    };
    format!(
        "leaf cluster {cluster}{version} drops {path} (its feature gate is off there, or its admission removes it)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A copy as pod sync sends it: v1.37's emptyDir mode on the second volume.
    fn sent() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "shop",
                "labels": {"app": "web", "mcsched.io/managed-by-cluster": "east"},
                "annotations": {"mcsched.io/host-pod-uid": "u1"}},
            "spec": {
                "containers": [{"name": "a", "image": "i", "args": ["x", "y"],
                    "resources": {"requests": {"cpu": "1000m"}},
                    "volumeMounts": [{"name": "data", "mountPath": "/d"}]}],
                "volumes": [{"name": "cache", "emptyDir": {}},
                    {"name": "data", "emptyDir": {"sizeLimit": "1Gi", "mode": 448}}],
                "hostNetwork": false, "tolerations": [], "nodeSelector": {}
            }
        })
    }

    /// What a v1.37 API server with the gate on answers: `sent` with its defaults, the
    /// server's metadata, admission's volume and tolerations, and the status.
    fn kept() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "shop", "uid": "leaf-uid",
                "resourceVersion": "17", "creationTimestamp": "2026-01-01T00:00:00Z",
                "generation": 1, "managedFields": [{"manager": "mcsched"}],
                "labels": {"app": "web", "mcsched.io/managed-by-cluster": "east",
                    "injected": "by-a-webhook"},
                "annotations": {"mcsched.io/host-pod-uid": "u1"}},
            "spec": {
                "containers": [{"name": "a", "image": "i", "args": ["x", "y"],
                    "resources": {"requests": {"cpu": "1"}},
                    "volumeMounts": [{"name": "data", "mountPath": "/d"},
                        {"name": "kube-api-access-x", "mountPath": "/var/run/secrets"}],
                    "terminationMessagePath": "/dev/termination-log",
                    "imagePullPolicy": "IfNotPresent"}],
                "volumes": [{"name": "kube-api-access-x", "projected": {"sources": []}},
                    {"name": "cache", "emptyDir": {}},
                    {"name": "data", "emptyDir": {"sizeLimit": "1Gi", "mode": 448}}],
                "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}],
                "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
                "schedulerName": "default-scheduler", "priority": 0
            },
            "status": {"phase": "Pending", "qosClass": "Burstable"}
        })
    }

    #[test]
    fn what_the_server_adds_defaults_or_writes_canonically_is_not_a_field_dropped() {
        assert_eq!(dropped(&sent(), &kept()), []);
        // Its own metadata and the status, sent or not, are the server's.
        let mut with_status = sent();
        with_status["status"] = json!({"phase": "Running"});
        with_status["metadata"]["uid"] = json!("host-uid");
        with_status["metadata"]["resourceVersion"] = json!("5");
        assert_eq!(first_dropped(&with_status, &kept()), None);
    }

    #[test]
    fn a_nested_field_dropped_is_named() {
        let mut answer = kept();
        // The gate off: the strategy clears the mode, the rest of emptyDir stays.
        answer["spec"]["volumes"][2]["emptyDir"] = json!({"sizeLimit": "1Gi"});
        let found = dropped(&sent(), &answer);
        assert_eq!(
            found,
            [Dropped {
                path: "spec.volumes[1].emptyDir.mode".into(),
                pattern: "spec.volumes[].emptyDir.mode".into(),
            }],
            "named by the sent index; the answer's volume of that name compared"
        );
        // Null is dropped too; so is a whole object, named itself.
        answer["spec"]["volumes"][2]["emptyDir"]["mode"] = Value::Null;
        assert_eq!(
            first_dropped(&sent(), &answer).as_deref(),
            Some("spec.volumes[1].emptyDir.mode")
        );
        let mut no_resources = kept();
        if let Some(c) = no_resources["spec"]["containers"][0].as_object_mut() {
            c.remove("resources");
        }
        assert_eq!(
            first_dropped(&sent(), &no_resources).as_deref(),
            Some("spec.containers[0].resources")
        );
        // A scalar cleared to its zero value was dropped; one changed otherwise was not.
        let sent = json!({"spec": {"hostUsers": true, "priority": 5, "image": "a"}});
        for (answer, path) in [
            (
                json!({"spec": {"hostUsers": false, "priority": 5, "image": "a"}}),
                Some("spec.hostUsers"),
            ),
            (
                json!({"spec": {"hostUsers": true, "priority": 0, "image": "a"}}),
                Some("spec.priority"),
            ),
            (
                json!({"spec": {"hostUsers": true, "priority": 5, "image": ""}}),
                Some("spec.image"),
            ),
            (
                json!({"spec": {"hostUsers": true, "priority": 7, "image": "mirror/a"}}),
                None,
            ),
            (
                json!({"spec": {"hostUsers": "yes", "priority": "5", "image": 1}}),
                None,
            ),
        ] {
            assert_eq!(first_dropped(&sent, &answer).as_deref(), path, "{answer}");
        }
        // Every field dropped, in order.
        let all = dropped(
            &json!({"metadata": {"name": "p"}, "spec": {"a": 1, "b": {"c": 2}}}),
            &json!({"metadata": {}, "spec": {"b": {}}}),
        );
        let paths: Vec<_> = all.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["metadata.name", "spec.a", "spec.b.c"]);
    }

    #[test]
    fn lists_are_compared_item_by_item_by_index_or_by_name() {
        // Scalars by index: one missing is dropped, an item added is the server's.
        let sent = json!({"spec": {"args": ["a", "b", "c"]}});
        assert_eq!(
            first_dropped(&sent, &json!({"spec": {"args": ["a", "b"]}})).as_deref(),
            Some("spec.args[2]")
        );
        assert_eq!(
            first_dropped(&sent, &json!({"spec": {"args": ["a", "b", "c", "d"]}})),
            None
        );
        // Items with a name by name, each occurrence as its own: admission put a sidecar
        // first, and the second `X` lost its valueFrom.
        let sent = json!({"spec": {"containers": [{"name": "app", "image": "i",
            "env": [{"name": "X", "value": "1"}, {"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "a"}}}]}]}});
        let mut answer = json!({"spec": {"containers": [{"name": "sidecar", "image": "s"},
            {"name": "app", "image": "i", "env": [{"name": "X", "value": "1"},
                {"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "a"}}}]}]}});
        assert_eq!(first_dropped(&sent, &answer), None);
        answer["spec"]["containers"][1]["env"][1] = json!({"name": "X"});
        assert_eq!(
            first_dropped(&sent, &answer).as_deref(),
            Some("spec.containers[0].env[1].valueFrom")
        );
        // An item without a counterpart is dropped whole; lists in lists.
        assert_eq!(
            first_dropped(&sent, &json!({"spec": {"containers": [{"name": "other"}]}})).as_deref(),
            Some("spec.containers[0]")
        );
        assert_eq!(
            first_dropped(
                &json!({"spec": {"grid": [[1], [2, 3]]}}),
                &json!({"spec": {"grid": [[1], [2]]}})
            )
            .as_deref(),
            Some("spec.grid[1][1]")
        );
        // Sent empty, left out by omitempty: not judged.
        assert_eq!(
            first_dropped(
                &json!({"spec": {"tolerations": [], "hostNetwork": false, "x": {}, "y": ""}}),
                &json!({"spec": {}})
            ),
            None
        );
    }

    #[test]
    fn labels_and_annotations_are_maps_each_entry_sent_must_come_back() {
        let sent = json!({"metadata": {"labels": {"app.kubernetes.io/name": "web", "tier": "x"},
            "annotations": {"a/b": "c"}}});
        // Entries added are admission's.
        let answer = json!({"metadata": {"labels": {"app.kubernetes.io/name": "web",
            "tier": "x", "added": "y"}, "annotations": {"a/b": "c", "more": "d"}}});
        assert_eq!(first_dropped(&sent, &answer), None);
        let found = dropped(
            &sent,
            &json!({"metadata": {"labels": {"tier": "x"}, "annotations": {"a/b": "c"}}}),
        );
        assert_eq!(
            found,
            [Dropped {
                path: "metadata.labels[app.kubernetes.io/name]".into(),
                pattern: "metadata.labels[app.kubernetes.io/name]".into(),
            }]
        );
        assert_eq!(
            first_dropped(
                &sent,
                &json!({"metadata": {"labels": sent["metadata"]["labels"]}})
            )
            .as_deref(),
            Some("metadata.annotations")
        );
    }

    #[test]
    fn a_shape_is_the_patterns_of_what_a_copy_sets() {
        let shape = Shape::of(&sent());
        let patterns: Vec<_> = shape.patterns().collect();
        assert_eq!(
            patterns,
            [
                "apiVersion",
                "kind",
                "metadata.annotations[mcsched.io/host-pod-uid]",
                "metadata.labels[app]",
                "metadata.labels[mcsched.io/managed-by-cluster]",
                "metadata.name",
                "metadata.namespace",
                "spec.containers[].args[]",
                "spec.containers[].image",
                "spec.containers[].name",
                "spec.containers[].resources.requests.cpu",
                "spec.containers[].volumeMounts[].mountPath",
                "spec.containers[].volumeMounts[].name",
                "spec.volumes[].emptyDir.mode",
                "spec.volumes[].emptyDir.sizeLimit",
                "spec.volumes[].name",
            ]
        );
        // Another pod of the same owner: other names and values, the same shape.
        let mut other = sent();
        other["metadata"]["name"] = json!("web-2");
        other["spec"]["containers"][0]["args"] = json!(["z"]);
        assert_eq!(Shape::of(&other), shape);
    }

    #[test]
    fn a_shape_verified_needs_no_dry_run_until_the_version_changes_or_time_passes() {
        let kept_fields = KeptFields::default();
        let now = Instant::now();
        let copy = sent();
        let shape = kept_fields
            .to_verify("v1.37.2", &copy, now)
            .expect("not verified yet");
        kept_fields.kept("v1.37.2", &shape, now);
        assert_eq!(kept_fields.to_verify("v1.37.2", &copy, now), None);
        // A subset of what was verified: no dry run either; a new field: one.
        let mut less = copy.clone();
        if let Some(v) = less["spec"]["volumes"].as_array_mut() {
            v.truncate(1);
        }
        assert_eq!(kept_fields.to_verify("v1.37.2", &less, now), None);
        let mut more = copy.clone();
        more["spec"]["hostname"] = json!("h");
        assert!(kept_fields.to_verify("v1.37.2", &more, now).is_some());
        // Another version forgets it all; so does time.
        kept_fields.at_version("v1.37.3", now);
        assert!(kept_fields.to_verify("v1.37.3", &copy, now).is_some());
        kept_fields.kept("v1.37.3", &shape, now);
        assert_eq!(kept_fields.to_verify("v1.37.3", &copy, now), None);
        let later = now + FORGET_AFTER;
        assert!(kept_fields.to_verify("v1.37.3", &copy, later).is_some());
    }

    #[test]
    fn the_verified_patterns_are_bounded() {
        let kept_fields = KeptFields::default();
        let now = Instant::now();
        let shape_of = |from: usize, n: usize| {
            let labels: serde_json::Map<String, Value> = (from..from + n)
                .map(|i| (format!("k{i}"), json!("v")))
                .collect();
            Shape::of(&json!({"metadata": {"labels": labels}}))
        };
        let first = shape_of(0, MAX_VERIFIED - 10);
        kept_fields.kept("v", &first, now);
        assert_eq!(kept_fields.verified_len(), MAX_VERIFIED - 10);
        // Within the bound: added; past it, the earlier ones go.
        kept_fields.kept("v", &shape_of(MAX_VERIFIED - 20, 20), now);
        assert_eq!(kept_fields.verified_len(), MAX_VERIFIED);
        let second = shape_of(MAX_VERIFIED, 5);
        kept_fields.kept("v", &second, now);
        assert_eq!(kept_fields.verified_len(), 5);
        assert!(
            kept_fields
                .to_verify("v", &json!({"metadata": {"labels": {"k0": "v"}}}), now)
                .is_some()
        );
        // A shape larger than the bound is not remembered.
        kept_fields.kept("v", &shape_of(0, MAX_VERIFIED + 1), now);
        assert_eq!(kept_fields.verified_len(), 5);
    }

    #[test]
    fn a_field_found_dropped_is_named_for_any_copy_carrying_it() {
        let kept_fields = KeptFields::default();
        let now = Instant::now();
        kept_fields.at_version("v1.37.2", now);
        assert!(!kept_fields.drops_any(now));
        assert_eq!(kept_fields.first_dropped(&sent(), now), None);
        let shape = Shape::of(&sent());
        kept_fields.kept("v1.37.2", &shape, now);
        let mut answer = kept();
        answer["spec"]["volumes"][2]["emptyDir"] = json!({"sizeLimit": "1Gi"});
        kept_fields.dropped("v1.37.2", &dropped(&sent(), &answer), now);
        assert!(kept_fields.drops_any(now));
        // Verified no more: the next copy of that shape is tried again.
        assert!(kept_fields.to_verify("v1.37.2", &sent(), now).is_some());
        // Another pod, the mode on its first volume.
        let other = json!({"spec": {"volumes": [{"name": "x", "emptyDir": {"mode": 493}}]}});
        let (path, version) = kept_fields.first_dropped(&other, now).expect("dropped");
        assert_eq!(path, "spec.volumes[0].emptyDir.mode");
        assert_eq!(
            drops("east", &version, &path),
            "leaf cluster east (v1.37.2) drops spec.volumes[0].emptyDir.mode (its feature gate is off there, or its admission removes it)"
        );
        assert_eq!(
            kept_fields.first_dropped(
                &json!({"spec": {"volumes": [{"name": "x", "emptyDir": {}}]}}),
                now
            ),
            None
        );
        // Forgotten at another version.
        kept_fields.at_version("v1.38.0", now);
        assert_eq!(kept_fields.first_dropped(&other, now), None);
        assert_eq!(
            drops("east", "", "spec.x"),
            "leaf cluster east drops spec.x (its feature gate is off there, or its admission removes it)"
        );
    }
}
