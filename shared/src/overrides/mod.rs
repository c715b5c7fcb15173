//! Per-cluster overrides of leaf copies (Karmada's OverridePolicy, for pods): a policy's
//! `overrides` adapt the copy of a pod, and of its claims, to the leaf cluster it goes to —
//! images, command and args, environment, resources, labels and annotations, the leaf's
//! node selector and tolerations, storage classes, and an RFC 6902 JSON patch for the
//! rest. Pure: the leaf check judges exactly the copy pod sync creates.
//!
//! Entries apply in list order; within an entry: labels, annotations, image, command, args,
//! env, resources, leaf node selector, leaf tolerations, then the JSON patch. The host's
//! own pods are never changed.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod, ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cluster_affinity::ClusterAffinity;
use crate::quantity::{Quantity, QuantityError};

mod bounded_patch;
pub use bounded_patch::{MAX_OPERATIONS, MAX_PATCHED_BYTES};

/// One override: the leaf clusters it targets and what it changes in their copies.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterOverride {
    /// The leaf clusters whose copies this changes (names, virtual-node labels,
    /// exclusions); every leaf when absent. `host` is never a target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) target: Option<ClusterAffinity>,
    /// Image references changed by component (registry, repository, tag, digest).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) image: Vec<ImageOverride>,
    /// A container's command: values added at the end, removed, or the whole list replaced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) command: Vec<ListOverride>,
    /// A container's args, as `command`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) args: Vec<ListOverride>,
    /// Environment variables added, replaced or removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) env: Vec<EnvOverride>,
    /// Requests and limits set, or scaled by a percentage.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) resources: Vec<ResourcesOverride>,
    /// Labels of the copy added, replaced or removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) labels: Vec<MapOverride>,
    /// Annotations of the copy added, replaced or removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) annotations: Vec<MapOverride>,
    /// Node selector entries for the leaf's own nodes, merged into the copy's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) leaf_node_selector: BTreeMap<String, String>,
    /// Tolerations of the leaf's own nodes' taints, added to the copy's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) leaf_tolerations: Vec<Toleration>,
    /// Host StorageClass → the leaf's, for the copies of the pod's claims.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) storage_classes: BTreeMap<String, String>,
    /// RFC 6902 operations on the copy, applied last. They may not set what the host
    /// decides (node, scheduler, priority, account), metadata beyond labels and
    /// annotations, or name an object the pod does not refer to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub(crate) json_patch: Vec<PatchOperation>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Operator {
    Add,
    Remove,
    Replace,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub(crate) enum ImageComponent {
    Registry,
    Repository,
    Tag,
    Digest,
}

/// Karmada's image overrider: `add` appends the value to the component (sets it when
/// empty), `replace` sets it, `remove` clears it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ImageOverride {
    /// Containers and init containers by name; every one when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) containers: Vec<String>,
    pub(crate) component: ImageComponent,
    pub(crate) operator: Operator,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) value: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListOverride {
    pub(crate) container_name: String,
    pub(crate) operator: Operator,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) value: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EnvOverride {
    /// Containers and init containers by name; every one when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) containers: Vec<String>,
    pub(crate) operator: Operator,
    pub(crate) name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) value: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ResourcesOverride {
    /// Containers and init containers by name; every one when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) containers: Vec<String>,
    /// Requests set to these quantities.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) requests: BTreeMap<String, String>,
    /// Limits set to these quantities.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) limits: BTreeMap<String, String>,
    /// Every request and limit scaled to this percentage (150: half as much again),
    /// after the quantities above are set; rounded up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub(crate) scale_percent: Option<i64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MapOverride {
    pub(crate) operator: Operator,
    /// For `remove`, only the keys count.
    pub(crate) value: BTreeMap<String, String>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum PatchOp {
    Add,
    Remove,
    Replace,
    Move,
    Copy,
    Test,
}

/// One RFC 6902 operation on the copy (a Pod as JSON).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PatchOperation {
    pub(crate) op: PatchOp,
    /// A JSON pointer (`/spec/containers/0/image`).
    pub(crate) path: String,
    /// For `move` and `copy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) from: Option<String>,
    /// For `add`, `replace` and `test`: any JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
    pub(crate) value: Option<serde_json::Value>,
}

/// An override that cannot apply, with the field that says so.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct OverrideError {
    pub(crate) field: String,
    pub(crate) message: String,
    /// Whether it fails whatever the pod (the policy is invalid), rather than for this
    /// pod's copy only.
    pub(crate) any_pod: bool,
}

impl OverrideError {
    fn everywhere(field: impl Into<String>, message: impl Into<String>) -> Self {
        OverrideError {
            field: field.into(),
            message: message.into(),
            any_pod: true,
        }
    }

    fn for_this_pod(field: impl Into<String>, message: impl Into<String>) -> Self {
        OverrideError {
            any_pod: false,
            ..Self::everywhere(field, message)
        }
    }
}

fn error(field: impl Into<String>, message: impl Into<String>) -> OverrideError {
    OverrideError::everywhere(field, message)
}

impl ClusterOverride {
    /// Whether this entry adapts copies for `cluster`, whose virtual node has `labels`.
    pub fn targets(&self, cluster: &str, labels: &BTreeMap<String, String>) -> bool {
        cluster != crate::keys::HOST_CLUSTER_NAME
            && self
                .target
                .as_ref()
                .is_none_or(|t| t.allows(cluster, labels))
    }

    /// What the schema cannot say; `field` is the entry's path (`spec.overrides[0]`).
    pub(crate) fn validate(&self, field: &str) -> Result<(), OverrideError> {
        for (i, o) in self.image.iter().enumerate() {
            let f = format!("{field}.image[{i}]");
            if o.operator != Operator::Remove && o.value.is_empty() {
                return Err(error(format!("{f}.value"), "must not be empty"));
            }
            if o.operator != Operator::Remove {
                let bad = match o.component {
                    ImageComponent::Registry => o.value.contains('@'),
                    ImageComponent::Repository => o.value.contains([':', '@']),
                    ImageComponent::Tag => o.value.contains(['/', ':', '@']),
                    ImageComponent::Digest => o.operator == Operator::Add || !o.value.contains(':'),
                };
                if bad {
                    return Err(error(
                        format!("{f}.value"),
                        format!(
                            "{:?} is not a {:?} this operator can apply",
                            o.value, o.component
                        ),
                    ));
                }
            }
        }
        for (name, list) in [("command", &self.command), ("args", &self.args)] {
            for (i, o) in list.iter().enumerate() {
                if o.container_name.is_empty() {
                    return Err(error(
                        format!("{field}.{name}[{i}].containerName"),
                        "must not be empty",
                    ));
                }
            }
        }
        for (i, o) in self.env.iter().enumerate() {
            let f = format!("{field}.env[{i}]");
            if o.name.is_empty() {
                return Err(error(format!("{f}.name"), "must not be empty"));
            }
            if o.operator != Operator::Remove && o.value.is_none() {
                return Err(error(
                    format!("{f}.value"),
                    "is required unless operator is remove",
                ));
            }
        }
        for (i, o) in self.resources.iter().enumerate() {
            let f = format!("{field}.resources[{i}]");
            for (what, map) in [("requests", &o.requests), ("limits", &o.limits)] {
                for (resource, q) in map {
                    if let Err(e) = Quantity::parse(q) {
                        return Err(error(format!("{f}.{what}.{resource}"), e.to_string()));
                    }
                }
            }
            if o.scale_percent.is_some_and(|p| !(1..=10_000).contains(&p)) {
                return Err(error(format!("{f}.scalePercent"), "must be 1 to 10000"));
            }
        }
        for (name, list) in [("labels", &self.labels), ("annotations", &self.annotations)] {
            for (i, o) in list.iter().enumerate() {
                if let Some(k) = o.value.keys().find(|k| is_mark(k)) {
                    return Err(error(
                        format!("{field}.{name}[{i}].value"),
                        format!("{k} is mcsched's own mark on a copy"),
                    ));
                }
            }
        }
        for (i, t) in self.leaf_tolerations.iter().enumerate() {
            let op = t.operator.as_deref().unwrap_or("Equal");
            if op != "Equal" && op != "Exists" {
                return Err(error(
                    format!("{field}.leafTolerations[{i}].operator"),
                    format!("{op:?} is not Equal or Exists"),
                ));
            }
        }
        for (host, leaf) in &self.storage_classes {
            if host.is_empty() || leaf.is_empty() {
                return Err(error(
                    format!("{field}.storageClasses"),
                    "class names must not be empty",
                ));
            }
        }
        if self.json_patch.len() > MAX_OPERATIONS {
            return Err(error(
                format!("{field}.jsonPatch"),
                format!(
                    "{} operations: at most {MAX_OPERATIONS}",
                    self.json_patch.len()
                ),
            ));
        }
        for (i, p) in self.json_patch.iter().enumerate() {
            let f = format!("{field}.jsonPatch[{i}]");
            if !p.path.is_empty() && !p.path.starts_with('/') {
                return Err(error(
                    format!("{f}.path"),
                    "must be a JSON pointer starting with /",
                ));
            }
            match p.op {
                PatchOp::Add | PatchOp::Replace | PatchOp::Test if p.value.is_none() => {
                    return Err(error(format!("{f}.value"), "is required for this op"));
                }
                PatchOp::Move | PatchOp::Copy
                    if p.from.as_deref().is_none_or(|s| !s.starts_with('/')) =>
                {
                    return Err(error(
                        format!("{f}.from"),
                        "must be a JSON pointer starting with /",
                    ));
                }
                _ => {}
            }
            bounded_patch::check_paths(p, &f)?;
        }
        if !self.json_patch.is_empty() {
            // What fails on a plain pod fails on every pod: the bounds, not the paths a
            // real pod may have and this one lacks.
            let mut pod = bounded_patch::representative_pod();
            match self.apply_json_patch(&mut pod, &format!("{field}.jsonPatch")) {
                Err(e) if e.any_pod => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }
}

impl ClusterOverride {
    /// This entry's jsonPatch on `pod`, bounded and checked; `pod` unchanged on error.
    fn apply_json_patch(&self, pod: &mut Pod, field: &str) -> Result<(), OverrideError> {
        let ops =
            serde_json::to_value(&self.json_patch).map_err(|e| error(field, e.to_string()))?;
        let patch: ::json_patch::Patch =
            serde_json::from_value(ops).map_err(|e| error(field, e.to_string()))?;
        let mut doc = serde_json::to_value(&*pod).map_err(|e| error(field, e.to_string()))?;
        bounded_patch::apply(&mut doc, &patch, field)?;
        let mut patched: Pod = serde_json::from_value(doc)
            .map_err(|e| error(field, format!("the patched copy is no Pod: {e}")))?;
        patched.metadata.name = pod.metadata.name.clone();
        patched.metadata.namespace = pod.metadata.namespace.clone();
        bounded_patch::check_not_widened(pod, &patched, field)?;
        *pod = patched;
        Ok(())
    }

    /// `west: image,storageClasses` — the targets (`*` for every leaf, `labels` for a
    /// selector) and what it overrides, as `get policies` lists it.
    pub fn summary(&self) -> String {
        let target = match &self.target {
            None => "*".to_string(),
            Some(t) => {
                let mut parts: Vec<String> = t.cluster_names.clone();
                if t.label_selector.is_some() {
                    parts.push("labels".into());
                }
                if parts.is_empty() {
                    parts.push("*".into());
                }
                let mut s = parts.join("+");
                if !t.exclude.is_empty() {
                    s.push_str(&format!(" except {}", t.exclude.join("+")));
                }
                s
            }
        };
        let kinds: Vec<&str> = [
            ("image", self.image.is_empty()),
            ("command", self.command.is_empty()),
            ("args", self.args.is_empty()),
            ("env", self.env.is_empty()),
            ("resources", self.resources.is_empty()),
            ("labels", self.labels.is_empty()),
            ("annotations", self.annotations.is_empty()),
            ("leafNodeSelector", self.leaf_node_selector.is_empty()),
            ("leafTolerations", self.leaf_tolerations.is_empty()),
            ("storageClasses", self.storage_classes.is_empty()),
            ("jsonPatch", self.json_patch.is_empty()),
        ]
        .into_iter()
        .filter(|(_, empty)| !empty)
        .map(|(k, _)| k)
        .collect();
        format!(
            "{target}: {}",
            if kinds.is_empty() {
                "nothing".to_string()
            } else {
                kinds.join(",")
            }
        )
    }
}

/// The leaf's class for a host claim's `class` under `overrides` (the last that maps it).
pub fn storage_class<'a>(overrides: &[&'a ClusterOverride], class: &'a str) -> &'a str {
    overrides
        .iter()
        .rev()
        .find_map(|o| o.storage_classes.get(class))
        .map_or(class, String::as_str)
}

/// An image reference by component: `[registry/]repository[:tag][@digest]`.
#[derive(Debug, Default, PartialEq, Eq)]
struct ImageRef {
    registry: String,
    repository: String,
    tag: String,
    digest: String,
}

impl ImageRef {
    fn parse(image: &str) -> Self {
        let (rest, digest) = image.split_once('@').unwrap_or((image, ""));
        // A registry is a first component with a dot or a port, or localhost.
        let (registry, rest) = match rest.split_once('/') {
            Some((first, tail)) if first.contains(['.', ':']) || first == "localhost" => {
                (first, tail)
            }
            _ => ("", rest),
        };
        let (repository, tag) = match rest.rsplit_once(':') {
            Some((repo, tag)) if !tag.contains('/') => (repo, tag),
            _ => (rest, ""),
        };
        ImageRef {
            registry: registry.into(),
            repository: repository.into(),
            tag: tag.into(),
            digest: digest.into(),
        }
    }

    fn render(&self) -> String {
        let mut s = String::new();
        if !self.registry.is_empty() {
            s.push_str(&self.registry);
            s.push('/');
        }
        s.push_str(&self.repository);
        if !self.tag.is_empty() {
            s.push(':');
            s.push_str(&self.tag);
        }
        if !self.digest.is_empty() {
            s.push('@');
            s.push_str(&self.digest);
        }
        s
    }
}

fn operate(part: &mut String, op: Operator, value: &str) {
    match op {
        Operator::Add => part.push_str(value),
        Operator::Replace => *part = value.to_string(),
        Operator::Remove => part.clear(),
    }
}

fn selected(names: &[String], container: &Container) -> bool {
    names.is_empty() || names.contains(&container.name)
}

fn containers(pod: &mut Pod) -> impl Iterator<Item = &mut Container> {
    let spec = pod.spec.get_or_insert_default();
    spec.init_containers
        .iter_mut()
        .flatten()
        .chain(spec.containers.iter_mut())
}

fn map_override(map: &mut BTreeMap<String, String>, o: &MapOverride) {
    for (k, v) in &o.value {
        match o.operator {
            Operator::Add => {
                map.entry(k.clone()).or_insert_with(|| v.clone());
            }
            Operator::Replace => {
                map.insert(k.clone(), v.clone());
            }
            Operator::Remove => {
                map.remove(k);
            }
        }
    }
}

fn quantity_map(reqs: &mut Option<BTreeMap<String, K8sQuantity>>, set: &BTreeMap<String, String>) {
    if set.is_empty() {
        return;
    }
    let m = reqs.get_or_insert_default();
    for (k, v) in set {
        m.insert(k.clone(), K8sQuantity(v.clone()));
    }
}

fn scale(
    reqs: &mut Option<BTreeMap<String, K8sQuantity>>,
    percent: i64,
) -> Result<(), QuantityError> {
    for (resource, q) in reqs.iter_mut().flatten() {
        let parsed = Quantity::parse(&q.0)?;
        let binary = q.0.ends_with('i');
        *q = K8sQuantity(
            parsed
                .scaled_percent(percent)
                .canonical(binary || resource == "memory"),
        );
    }
    Ok(())
}

/// `pod` as `overrides` adapt it, in order; the differences, said for `explain`
/// (`image web: nginx:1 → mirror.eu/nginx:1`).
pub fn apply(pod: &mut Pod, overrides: &[&ClusterOverride]) -> Result<Vec<String>, OverrideError> {
    let before = pod.clone();
    let marks = |m: &Option<BTreeMap<String, String>>| -> BTreeMap<String, String> {
        m.iter()
            .flatten()
            .filter(|(k, _)| is_mark(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let (labels, annotations) = (
        marks(&pod.metadata.labels),
        marks(&pod.metadata.annotations),
    );
    for (n, o) in overrides.iter().enumerate() {
        let meta = &mut pod.metadata;
        for l in &o.labels {
            map_override(meta.labels.get_or_insert_default(), l);
        }
        for a in &o.annotations {
            map_override(meta.annotations.get_or_insert_default(), a);
        }
        for i in &o.image {
            for c in containers(pod).filter(|c| selected(&i.containers, c)) {
                let mut r = ImageRef::parse(c.image.as_deref().unwrap_or_default());
                let part = match i.component {
                    ImageComponent::Registry => &mut r.registry,
                    ImageComponent::Repository => &mut r.repository,
                    ImageComponent::Tag => &mut r.tag,
                    ImageComponent::Digest => &mut r.digest,
                };
                operate(part, i.operator, &i.value);
                c.image = Some(r.render());
            }
        }
        for (is_command, list) in [(true, &o.command), (false, &o.args)] {
            for l in list {
                for c in containers(pod).filter(|c| c.name == l.container_name) {
                    let target = if is_command {
                        &mut c.command
                    } else {
                        &mut c.args
                    };
                    let v = target.get_or_insert_default();
                    match l.operator {
                        Operator::Add => v.extend(l.value.iter().cloned()),
                        Operator::Replace => *v = l.value.clone(),
                        Operator::Remove => v.retain(|x| !l.value.contains(x)),
                    }
                }
            }
        }
        for e in &o.env {
            for c in containers(pod).filter(|c| selected(&e.containers, c)) {
                let env = c.env.get_or_insert_default();
                let at = env.iter().position(|v| v.name == e.name);
                let var = EnvVar {
                    name: e.name.clone(),
                    value: e.value.clone(),
                    value_from: None,
                };
                match (e.operator, at) {
                    (Operator::Add, None) => env.push(var),
                    (Operator::Add, Some(_)) => {}
                    (Operator::Replace, Some(i)) => env[i] = var,
                    (Operator::Replace, None) => env.push(var),
                    (Operator::Remove, Some(i)) => {
                        env.remove(i);
                    }
                    (Operator::Remove, None) => {}
                }
            }
        }
        for (i, r) in o.resources.iter().enumerate() {
            for c in containers(pod).filter(|c| selected(&r.containers, c)) {
                let res = c
                    .resources
                    .get_or_insert_with(ResourceRequirements::default);
                quantity_map(&mut res.requests, &r.requests);
                quantity_map(&mut res.limits, &r.limits);
                if let Some(p) = r.scale_percent {
                    scale(&mut res.requests, p)
                        .and_then(|()| scale(&mut res.limits, p))
                        .map_err(|e| {
                            OverrideError::for_this_pod(
                                format!("spec.overrides[{n}].resources[{i}]"),
                                e.to_string(),
                            )
                        })?;
                }
            }
        }
        let spec = pod.spec.get_or_insert_default();
        if !o.leaf_node_selector.is_empty() {
            let sel = spec.node_selector.get_or_insert_default();
            sel.extend(o.leaf_node_selector.clone());
        }
        if !o.leaf_tolerations.is_empty() {
            spec.tolerations
                .get_or_insert_default()
                .extend(o.leaf_tolerations.iter().cloned());
        }
        if !o.json_patch.is_empty() {
            o.apply_json_patch(pod, &format!("spec.overrides[{n}].jsonPatch"))?;
        }
    }
    // The marks that make the copy this host's are never overridden.
    for (target, saved) in [
        (&mut pod.metadata.labels, labels),
        (&mut pod.metadata.annotations, annotations),
    ] {
        if target.is_none() && saved.is_empty() {
            continue;
        }
        let m = target.get_or_insert_default();
        m.retain(|k, _| !is_mark(k));
        m.extend(saved);
    }
    Ok(differences(&before, pod))
}

/// mcsched's own labels and annotations on a copy.
fn is_mark(key: &str) -> bool {
    key.starts_with("mcsched.io/") || key == crate::keys::MANAGED_BY_LABEL
}

/// What changed between the copy and its overridden form, for `explain`.
fn differences(before: &Pod, after: &Pod) -> Vec<String> {
    let mut out = Vec::new();
    let spec = |p: &Pod| p.spec.clone().unwrap_or_default();
    let (b, a) = (spec(before), spec(after));
    let all = |s: &k8s_openapi::api::core::v1::PodSpec| {
        s.init_containers
            .clone()
            .unwrap_or_default()
            .into_iter()
            .chain(s.containers.clone())
            .collect::<Vec<_>>()
    };
    let (bc, ac) = (all(&b), all(&a));
    for c in &ac {
        let Some(o) = bc.iter().find(|o| o.name == c.name) else {
            continue;
        };
        if o.image != c.image {
            out.push(format!(
                "image {}: {} → {}",
                c.name,
                o.image.as_deref().unwrap_or_default(),
                c.image.as_deref().unwrap_or_default()
            ));
        }
        // Said without their values: a ClusterPlacementPolicy's command and args are
        // the cluster admin's, and explanations go to whoever may read the pod.
        if o.command != c.command {
            out.push(format!("command {} changed", c.name));
        }
        if o.args != c.args {
            out.push(format!("args {} changed", c.name));
        }
        if o.env != c.env {
            out.push(format!("env {} changed", c.name));
        }
        let q = |r: &Option<ResourceRequirements>, limits: bool| {
            r.as_ref()
                .and_then(|r| {
                    if limits {
                        r.limits.clone()
                    } else {
                        r.requests.clone()
                    }
                })
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| format!("{k}={}", v.0))
                .collect::<Vec<_>>()
                .join(",")
        };
        for (what, limits) in [("requests", false), ("limits", true)] {
            let (x, y) = (q(&o.resources, limits), q(&c.resources, limits));
            if x != y {
                out.push(format!("{what} {}: {} → {}", c.name, none(&x), none(&y)));
            }
        }
    }
    if b.node_selector != a.node_selector {
        out.push(format!(
            "leaf node selector: {}",
            a.node_selector
                .unwrap_or_default()
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    if b.tolerations != a.tolerations {
        out.push("tolerations of the leaf's nodes added".into());
    }
    if before.metadata.labels != after.metadata.labels {
        out.push("labels changed".into());
    }
    if before.metadata.annotations != after.metadata.annotations {
        out.push("annotations changed".into());
    }
    if out.is_empty() && before != after {
        out.push("changed by JSON patch".into());
    }
    out
}

fn none(s: &str) -> &str {
    if s.is_empty() { "none" } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "db", "namespace": "shop", "labels": {"app": "db"}},
            "spec": {"containers": [
                {"name": "mysql", "image": "docker.io/library/mysql:8.0", "args": ["--a"],
                 "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                {"name": "exporter", "image": "prom/mysqld-exporter"}]}
        }))
        .expect("pod")
    }

    fn over(v: serde_json::Value) -> ClusterOverride {
        serde_json::from_value(v).expect("override")
    }

    fn image(p: &Pod, i: usize) -> &str {
        p.spec.as_ref().expect("spec").containers[i]
            .image
            .as_deref()
            .unwrap_or_default()
    }

    #[test]
    fn image_references_are_changed_by_component() {
        for (raw, want) in [
            (
                "nginx",
                ImageRef {
                    repository: "nginx".into(),
                    ..Default::default()
                },
            ),
            (
                "localhost:5000/a/b:1@sha256:x",
                ImageRef {
                    registry: "localhost:5000".into(),
                    repository: "a/b".into(),
                    tag: "1".into(),
                    digest: "sha256:x".into(),
                },
            ),
        ] {
            let r = ImageRef::parse(raw);
            assert_eq!(r, want, "{raw}");
            assert_eq!(r.render(), raw);
        }
        let mut p = pod();
        let o = over(json!({"image": [
            {"component": "Registry", "operator": "replace", "value": "mirror.eu"},
            {"containers": ["mysql"], "component": "Tag", "operator": "replace", "value": "8.4"}]}));
        let diff = apply(&mut p, &[&o]).expect("apply");
        assert_eq!(image(&p, 0), "mirror.eu/library/mysql:8.4");
        assert_eq!(image(&p, 1), "mirror.eu/prom/mysqld-exporter");
        assert_eq!(
            diff[0],
            "image mysql: docker.io/library/mysql:8.0 → mirror.eu/library/mysql:8.4"
        );
    }

    #[test]
    fn resources_env_args_and_maps_apply_in_order() {
        let mut p = pod();
        let first = over(json!({
            "resources": [{"containers": ["mysql"], "requests": {"cpu": "1"}, "scalePercent": 150}],
            "env": [{"operator": "add", "name": "REGION", "value": "eu"}],
            "args": [{"containerName": "mysql", "operator": "add", "value": ["--b"]}],
            "labels": [{"operator": "replace", "value": {"tier": "leaf"}}],
            "leafNodeSelector": {"disk": "ssd"}}));
        let second =
            over(json!({"env": [{"operator": "replace", "name": "REGION", "value": "us"}]}));
        let diff = apply(&mut p, &[&first, &second]).expect("apply");
        let c = &p.spec.as_ref().expect("spec").containers[0];
        let req = c
            .resources
            .as_ref()
            .and_then(|r| r.requests.clone())
            .expect("requests");
        assert_eq!(req["cpu"].0, "1500m");
        assert_eq!(req["memory"].0, "1536Mi");
        assert_eq!(
            c.args.as_deref(),
            Some(&["--a".to_string(), "--b".to_string()][..])
        );
        assert_eq!(c.env.as_ref().expect("env")[0].value.as_deref(), Some("us"));
        assert_eq!(p.metadata.labels.as_ref().expect("labels")["tier"], "leaf");
        assert!(
            diff.contains(
                &"requests mysql: cpu=500m,memory=1Gi → cpu=1500m,memory=1536Mi".to_string()
            ),
            "{diff:?}"
        );
        assert!(
            diff.contains(&"leaf node selector: disk=ssd".to_string()),
            "{diff:?}"
        );
    }

    #[test]
    fn the_copys_marks_survive_every_override() {
        let mut p = pod();
        p.metadata
            .labels
            .get_or_insert_default()
            .insert("mcsched.io/managed-by-cluster".into(), "west".into());
        let o = over(json!({"jsonPatch": [{"op": "remove", "path": "/metadata/labels"}]}));
        apply(&mut p, &[&o]).expect("apply");
        let labels = p.metadata.labels.expect("labels");
        assert_eq!(
            labels
                .get("mcsched.io/managed-by-cluster")
                .map(String::as_str),
            Some("west")
        );
        assert!(!labels.contains_key("app"));
    }

    #[test]
    fn a_json_patch_applies_last_and_keeps_the_name() {
        let mut p = pod();
        let o = over(json!({"jsonPatch": [
            {"op": "add", "path": "/spec/hostname", "value": "leafy"},
            {"op": "replace", "path": "/spec/containers/1/image", "value": "exporter:2"}]}));
        apply(&mut p, &[&o]).expect("apply");
        assert_eq!(
            p.spec.as_ref().and_then(|s| s.hostname.as_deref()),
            Some("leafy")
        );
        assert_eq!(image(&p, 1), "exporter:2");
        let bad = over(json!({"jsonPatch": [{"op": "remove", "path": "/spec/nothing"}]}));
        let e = apply(&mut pod(), &[&bad]).expect_err("nothing to remove");
        assert_eq!(e.field, "spec.overrides[0].jsonPatch[0]");
    }

    #[test]
    fn invalid_overrides_name_their_field() {
        for (v, field) in [
            (
                json!({"image": [{"component": "Tag", "operator": "replace", "value": "a/b"}]}),
                "x.image[0].value",
            ),
            (
                json!({"image": [{"component": "Tag", "operator": "add"}]}),
                "x.image[0].value",
            ),
            (
                json!({"env": [{"operator": "add", "name": "A"}]}),
                "x.env[0].value",
            ),
            (
                json!({"resources": [{"requests": {"cpu": "lots"}}]}),
                "x.resources[0].requests.cpu",
            ),
            (
                json!({"args": [{"containerName": "", "operator": "add"}]}),
                "x.args[0].containerName",
            ),
            (
                json!({"jsonPatch": [{"op": "add", "path": "spec"}]}),
                "x.jsonPatch[0].path",
            ),
            (
                json!({"jsonPatch": [{"op": "replace", "path": "/metadata/name", "value": "x"}]}),
                "x.jsonPatch[0].path",
            ),
            (
                json!({"jsonPatch": [{"op": "move", "path": "/a"}]}),
                "x.jsonPatch[0].from",
            ),
            (json!({"storageClasses": {"a": ""}}), "x.storageClasses"),
            (
                json!({"labels": [{"operator": "remove", "value": {"mcsched.io/managed-by-cluster": ""}}]}),
                "x.labels[0].value",
            ),
        ] {
            let e = over(v.clone()).validate("x").expect_err("invalid");
            assert_eq!(e.field, field, "{v}");
        }
    }

    #[test]
    fn targets_and_storage_classes() {
        let o = over(
            json!({"target": {"clusterNames": ["west"]}, "storageClasses": {"local-wffc": "standard"}}),
        );
        assert!(o.targets("west", &BTreeMap::new()));
        assert!(!o.targets("east", &BTreeMap::new()));
        assert!(!over(json!({})).targets(crate::keys::HOST_CLUSTER_NAME, &BTreeMap::new()));
        assert_eq!(storage_class(&[&o], "local-wffc"), "standard");
        assert_eq!(storage_class(&[&o], "other"), "other");
    }
    #[test]
    fn a_failing_patch_after_a_move_into_the_parent_is_an_error_not_a_panic() {
        // json-patch's own undo of this move panics (unreachable!).
        let o = over(json!({"jsonPatch": [
            {"op": "move", "from": "/spec/containers", "path": "/spec"},
            {"op": "test", "path": "/x", "value": 1}]}));
        let mut p = pod();
        let e = apply(&mut p, &[&o]).expect_err("the test fails");
        assert_eq!(e.field, "spec.overrides[0].jsonPatch[1]");
        assert_eq!(p, pod(), "nothing applied");
        let e = o.validate("x").expect_err("replaces the whole spec");
        assert_eq!(e.field, "x.jsonPatch[0].path");
    }

    #[test]
    fn copies_that_double_the_copy_stop_at_the_size_of_a_pod() {
        let ops: Vec<_> = (0..30)
            .map(|i| json!({"op": "copy", "from": "/spec", "path": format!("/spec/x{i}")}))
            .collect();
        let o = over(json!({ "jsonPatch": ops }));
        let e = o.validate("x").expect_err("too big on any pod");
        assert!(e.field.starts_with("x.jsonPatch["), "{e}");
        assert!(e.message.contains("larger than"), "{e}");
        let e = apply(&mut pod(), &[&o]).expect_err("too big");
        assert!(e.message.contains("larger than"), "{e}");
        let many: Vec<_> = (0..=MAX_OPERATIONS)
            .map(|_| json!({"op": "test", "path": "/spec", "value": {}}))
            .collect();
        let e = over(json!({ "jsonPatch": many }))
            .validate("x")
            .expect_err("too many operations");
        assert_eq!(e.field, "x.jsonPatch");
    }

    #[test]
    fn the_schema_bounds_the_operations() {
        let schema = serde_json::to_value(schemars::schema_for!(ClusterOverride)).expect("schema");
        assert_eq!(
            schema["properties"]["jsonPatch"]["maxItems"],
            json!(MAX_OPERATIONS)
        );
    }

    #[test]
    fn a_patch_never_widens_what_the_copy_reaches() {
        for (patch, says) in [
            (
                json!([{"op": "add", "path": "/spec/volumes", "value":
                    [{"name": "x", "secret": {"secretName": "leaf-owned"}}]}]),
                "names Secret leaf-owned",
            ),
            (
                json!([{"op": "add", "path": "/spec/volumes", "value":
                    [{"name": "x", "persistentVolumeClaim": {"claimName": "theirs"}}]}]),
                "names PersistentVolumeClaim theirs",
            ),
            (
                json!([{"op": "add", "path": "/spec/imagePullSecrets", "value": [{"name": "pull"}]}]),
                "names Secret pull",
            ),
        ] {
            let o = over(json!({ "jsonPatch": patch }));
            o.validate("x")
                .expect("valid: only a real pod's references say");
            let mut p = pod();
            let e = apply(&mut p, &[&o]).expect_err("widens");
            assert!(e.message.contains(says), "{e}");
            assert_eq!(p, pod(), "nothing applied");
        }
        // A reference the pod has may move; a label value may not become a reference.
        let mut p = pod();
        p.spec.as_mut().expect("spec").volumes = Some(vec![
            serde_json::from_value(json!({"name": "s", "secret": {"secretName": "mine"}}))
                .expect("volume"),
        ]);
        let rename = over(json!({"jsonPatch": [
            {"op": "copy", "from": "/metadata/labels/app", "path": "/spec/volumes/0/secret/secretName"}]}));
        let e = apply(&mut p.clone(), &[&rename]).expect_err("a name the pod never used");
        assert!(e.message.contains("names Secret db"), "{e}");
        let again = over(json!({"jsonPatch": [
            {"op": "copy", "from": "/spec/volumes/0", "path": "/spec/volumes/-"}]}));
        apply(&mut p, &[&again]).expect("the same Secret twice is no wider");
    }

    #[test]
    fn what_the_host_decides_stays_stripped() {
        for (patch, field) in [
            (
                json!([{"op": "add", "path": "/spec/nodeName", "value": "leaf-node-1"}]),
                "x.jsonPatch[0].path",
            ),
            (
                json!([{"op": "add", "path": "/spec/priorityClassName", "value": "system-node-critical"}]),
                "x.jsonPatch[0].path",
            ),
            (
                json!([{"op": "add", "path": "/spec/serviceAccountName", "value": "admin"}]),
                "x.jsonPatch[0].path",
            ),
            (
                json!([{"op": "add", "path": "/metadata/ownerReferences", "value": []}]),
                "x.jsonPatch[0].path",
            ),
            (
                json!([{"op": "add", "path": "/metadata/finalizers", "value": ["x"]}]),
                "x.jsonPatch[0].path",
            ),
            (
                json!([{"op": "add", "path": "/metadata/labels/a", "value": "leaf-node-1"},
                       {"op": "move", "from": "/metadata/labels/a", "path": "/spec/nodeName"}]),
                "x.jsonPatch[1].path",
            ),
        ] {
            let o = over(json!({ "jsonPatch": patch.clone() }));
            let e = o.validate("x").expect_err("refused when read");
            assert_eq!(e.field, field, "{patch}");
        }
        // Applied all the same (a policy read before this check): refused per copy.
        let o = over(json!({"jsonPatch": [{"op": "add", "path": "/spec/nodeName", "value": "n"}]}));
        let e = apply(&mut pod(), &[&o]).expect_err("refused");
        assert!(e.message.contains("spec.nodeName"), "{e}");
        let o = over(
            json!({"jsonPatch": [{"op": "add", "path": "/metadata/finalizers", "value": ["x"]}]}),
        );
        let e = apply(&mut pod(), &[&o]).expect_err("refused");
        assert!(e.message.contains("metadata.finalizers"), "{e}");
    }

    #[test]
    fn command_and_args_are_said_without_their_values() {
        let mut p = pod();
        let o = over(
            json!({"args": [{"containerName": "mysql", "operator": "replace", "value": ["--password=x"]}]}),
        );
        let diff = apply(&mut p, &[&o]).expect("apply");
        assert_eq!(diff, ["args mysql changed"]);
    }
}

/// Arbitrary patches from a vocabulary of the pod's paths: none panics, none produces a
/// copy over the bound, and none that applies widens the copy.
#[cfg(test)]
mod fuzz_overrides {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn pointer() -> impl Strategy<Value = String> {
        let parts = prop::sample::select(vec![
            "",
            "/spec",
            "/metadata",
            "/spec/containers",
            "/spec/containers/0",
            "/spec/containers/0/env",
            "/spec/containers/0/env/-",
            "/spec/volumes",
            "/spec/volumes/0",
            "/spec/volumes/-",
            "/spec/volumes/0/secret/secretName",
            "/metadata/labels",
            "/metadata/labels/app",
            "/metadata/annotations/a",
            "/spec/nodeName",
            "/spec/x",
            "/spec/containers/0/image",
            "/x",
            "/spec/containers/-",
            "/metadata/ownerReferences",
            "/spec/serviceAccountName",
            "/spec/containers/0/args/0",
        ]);
        (parts, prop::option::of("[a-z~01/]{0,4}")).prop_map(|(p, tail)| match tail {
            Some(t) => format!("{p}/{t}"),
            None => p.to_string(),
        })
    }

    fn value() -> impl Strategy<Value = serde_json::Value> {
        prop_oneof![
            Just(json!(null)),
            Just(json!("leaf-owned")),
            Just(json!(1)),
            Just(json!({})),
            Just(json!([])),
            Just(json!({"name": "v", "secret": {"secretName": "leaf-owned"}})),
            Just(json!([{"name": "c", "image": "x"}])),
            "[a-z]{0,8}".prop_map(serde_json::Value::String),
        ]
    }

    fn operation() -> impl Strategy<Value = serde_json::Value> {
        (
            prop::sample::select(vec!["add", "remove", "replace", "move", "copy", "test"]),
            pointer(),
            pointer(),
            value(),
        )
            .prop_map(|(op, path, from, value)| {
                json!({"op": op, "path": path, "from": from, "value": value})
            })
    }

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "db", "namespace": "shop", "labels": {"app": "db"}},
            "spec": {"containers": [{"name": "c", "image": "i", "args": ["a"],
                "env": [{"name": "E", "valueFrom": {"secretKeyRef": {"name": "mine", "key": "k"}}}]}],
                "volumes": [{"name": "v", "secret": {"secretName": "mine"}}]}
        }))
        .expect("pod")
    }

    /// Any of the typed overriders, with arbitrary strings where the schema takes any.
    fn typed_override() -> impl Strategy<Value = serde_json::Value> {
        let word = "[a-zA-Z0-9:/@.~_-]{0,12}";
        let quantity = prop_oneof![
            "[0-9]{0,20}(\\.[0-9]{0,10})?(m|k|M|G|Ti|Ei|e[0-9]{1,3}|)",
            Just("9223372036854775807".to_string()),
        ];
        (
            prop::sample::select(vec!["Registry", "Repository", "Tag", "Digest"]),
            prop::sample::select(vec!["add", "remove", "replace"]),
            word,
            quantity,
            1i64..=10_000,
            word,
        )
            .prop_map(|(component, operator, value, q, percent, name)| {
                json!({
                    "image": [{"component": component, "operator": operator, "value": value}],
                    "command": [{"containerName": "c", "operator": operator, "value": [value]}],
                    "env": [{"operator": operator, "name": name, "value": value}],
                    "resources": [{"requests": {"cpu": q}, "limits": {"memory": q},
                                   "scalePercent": percent}],
                    "labels": [{"operator": operator, "value": {name.clone(): value}}],
                    "leafNodeSelector": {name: "x"},
                })
            })
    }

    proptest! {
        #[test]
        fn fuzz_typed_overrides(o in typed_override()) {
            let Ok(o) = serde_json::from_value::<ClusterOverride>(o) else {
                return Ok(());
            };
            let valid = o.validate("x").is_ok();
            let before = pod();
            let mut p = before.clone();
            match apply(&mut p, &[&o]) {
                Ok(_) => prop_assert!(crate::pod_references::references(&p)
                    .is_subset(&crate::pod_references::references(&before))),
                Err(e) => prop_assert!(!valid || !e.any_pod, "a valid override failed: {e}"),
            }
        }

        #[test]
        fn fuzz_json_patches(ops in prop::collection::vec(operation(), 0..40)) {
            let Ok(o) = serde_json::from_value::<ClusterOverride>(json!({"jsonPatch": ops})) else {
                return Ok(());
            };
            let _ = o.validate("x");
            let before = pod();
            let mut p = before.clone();
            match apply(&mut p, &[&o]) {
                Ok(_) => {
                    let size = serde_json::to_vec(&p).map(|v| v.len()).unwrap_or(usize::MAX);
                    prop_assert!(size <= MAX_PATCHED_BYTES);
                    prop_assert!(crate::pod_references::references(&p)
                        .is_subset(&crate::pod_references::references(&before)));
                    prop_assert_eq!(p.spec.as_ref().and_then(|s| s.node_name.as_ref()), None);
                    prop_assert_eq!(&p.metadata.owner_references, &None);
                }
                Err(_) => prop_assert_eq!(p, before),
            }
        }
    }
}
