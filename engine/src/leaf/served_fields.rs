//! Which fields a leaf's API server serves, so that a copy never carries one it would drop.
//!
//! An API server in its default field validation (`Warn`) drops a field it does not know
//! and says so only in a warning header: a leaf older than the host would run something
//! else than the host asked for. The agent reads each leaf's OpenAPI v3 document of
//! core/v1 (`/openapi/v3/api/v1`); [`ServedFields`] keeps of it, per schema, the property
//! names and what each holds (another schema, a list, a map), enough to walk a JSON
//! object ([`ServedFields::first_unserved`]) and name the first field the leaf would
//! drop, in kube's field path style (`spec.containers[0].volumeMounts[0].bindMountOptions`).
//! No I/O here: the agent fetches, this reads.
//!
//! The document, as served from v1.27 on: `components.schemas` maps names
//! (`io.k8s.api.core.v1.Pod`) to schemas whose `properties` name the fields; a property
//! refers to another schema by `$ref`, directly or as the one member of an `allOf` (kube
//! wraps a reference in `allOf` when it adds a default or a description), lists have
//! `items`, maps (labels, resources) `additionalProperties`. A schema without properties
//! (Quantity, Time, IntOrString, RawExtension, FieldsV1) holds a value or content the
//! API server keeps as it is: nothing in it is judged.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

/// The schema of a Pod in the core/v1 document.
pub const POD: &str = "io.k8s.api.core.v1.Pod";

/// Where an API server serves its OpenAPI v3 document of core/v1.
pub const DOCUMENT_PATH: &str = "/openapi/v3/api/v1";

/// The largest document read (v1.37's is some 2 MB): a leaf serving a bigger one is not read.
pub const MAX_DOCUMENT_BYTES: usize = 16 << 20;

/// How deep a walk goes (a Pod's deepest field is some 12 levels down); below, nothing
/// is judged.
const MAX_DEPTH: usize = 64;

/// How many `$ref` hops a schema that only names another may take.
const MAX_ALIASES: usize = 16;

/// Why a document cannot be read as the fields a leaf serves.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error("not an OpenAPI v3 document: {0}")]
    NotADocument(String),
    #[error("the document has no object schema {0}")]
    NoSchema(&'static str),
}

/// What a value of a field holds, as the leaf's API server decodes it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Shape {
    /// A scalar, or a schema without properties (Quantity, Time): nothing inside judged.
    Any,
    /// Content kept as it is (`x-kubernetes-preserve-unknown-fields`, or
    /// `additionalProperties: true`): nothing inside judged, whatever else it is combined
    /// with.
    Kept,
    /// An object of the schema at this index: only its properties are kept.
    Object(u32),
    /// A list of values of this shape.
    List(Box<Shape>),
    /// A map of keys of the user's choosing (labels, resource names) to values of this
    /// shape.
    Map(Box<Shape>),
    /// An object of all these schemas (`allOf` of several): their properties together.
    AllOf(Vec<u32>),
}

/// One object schema: its properties and what each holds.
#[derive(Debug, Clone, Default)]
struct Schema {
    properties: HashMap<Box<str>, Shape>,
}

/// The fields a leaf's API server serves of core/v1, read from its OpenAPI v3 document,
/// with the version it reported.
#[derive(Debug, Clone)]
pub struct ServedFields {
    git_version: String,
    schemas: Vec<Schema>,
    names: HashMap<Box<str>, u32>,
}

/// A schema as the document writes it; what the walk does not need is skipped unread.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Raw {
    #[serde(rename = "$ref")]
    reference: Option<String>,
    #[serde(rename = "allOf")]
    all_of: Vec<Raw>,
    properties: Option<BTreeMap<String, Raw>>,
    items: Option<Box<Raw>>,
    #[serde(rename = "additionalProperties")]
    additional: Option<Additional>,
    #[serde(rename = "x-kubernetes-preserve-unknown-fields")]
    preserve: bool,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Additional {
    Allowed(bool),
    Schema(Box<Raw>),
}

#[derive(Debug, Deserialize)]
struct Document {
    components: Components,
}

#[derive(Debug, Deserialize)]
struct Components {
    schemas: BTreeMap<String, Raw>,
}

/// The model being built: named object schemas take their indexes first, so references
/// (recursive ones included) resolve without walking.
struct Builder<'a> {
    raw: &'a BTreeMap<String, Raw>,
    names: HashMap<Box<str>, u32>,
    schemas: Vec<Schema>,
}

impl Builder<'_> {
    /// What a `$ref` (`#/components/schemas/<name>`) holds.
    fn resolve(&mut self, reference: &str, hops: usize) -> Shape {
        let name = reference
            .strip_prefix("#/components/schemas/")
            .unwrap_or(reference);
        if let Some(&i) = self.names.get(name) {
            return Shape::Object(i);
        }
        match self.raw.get(name) {
            // A schema that only names another, or describes a list or a scalar.
            Some(raw) if hops < MAX_ALIASES => self.shape(raw, hops + 1),
            // Unknown to the document, or too long a chain: not judged.
            _ => Shape::Any,
        }
    }

    /// What a value of schema `raw` holds.
    fn shape(&mut self, raw: &Raw, hops: usize) -> Shape {
        if raw.preserve {
            return Shape::Kept;
        }
        let mut parts = Vec::new();
        if let Some(r) = &raw.reference {
            parts.push(self.resolve(r, hops));
        }
        for member in &raw.all_of {
            parts.push(self.shape(member, hops));
        }
        if let Some(props) = &raw.properties {
            let i = self.object(props, hops);
            parts.push(Shape::Object(i));
        }
        if let Some(items) = &raw.items {
            parts.push(Shape::List(Box::new(self.shape(items, hops))));
        }
        match &raw.additional {
            Some(Additional::Schema(s)) => parts.push(Shape::Map(Box::new(self.shape(s, hops)))),
            Some(Additional::Allowed(true)) => parts.push(Shape::Kept),
            Some(Additional::Allowed(false)) | None => {}
        }
        Self::combine(parts)
    }

    /// `allOf`: every part holds. A part kept as it is keeps the whole; objects merge
    /// their properties; scalars add nothing; anything else mixed is not judged.
    fn combine(parts: Vec<Shape>) -> Shape {
        if parts.contains(&Shape::Kept) {
            return Shape::Kept;
        }
        let mut parts: Vec<Shape> = parts.into_iter().filter(|p| *p != Shape::Any).collect();
        match parts.len() {
            0 => Shape::Any,
            1 => parts.pop().unwrap_or(Shape::Any),
            _ => {
                let objects: Vec<u32> = parts
                    .iter()
                    .filter_map(|p| match p {
                        Shape::Object(i) => Some(*i),
                        _ => None,
                    })
                    .collect();
                if objects.len() == parts.len() {
                    // Merged when walked: a named member may not be filled in yet.
                    Shape::AllOf(objects)
                } else {
                    Shape::Any
                }
            }
        }
    }

    fn push(&mut self, schema: Schema) -> u32 {
        self.schemas.push(schema);
        (self.schemas.len() - 1) as u32
    }

    /// An object schema written in place (not named).
    fn object(&mut self, props: &BTreeMap<String, Raw>, hops: usize) -> u32 {
        let i = self.push(Schema::default());
        let properties = props
            .iter()
            .map(|(k, v)| (k.as_str().into(), self.shape(v, hops)))
            .collect();
        self.schemas[i as usize] = Schema { properties };
        i
    }
}

impl ServedFields {
    /// The fields served by an API server of `git_version` (`v1.34.4`, as `/version`
    /// reports it) whose core/v1 OpenAPI v3 document is `document`.
    pub fn from_document(document: &[u8], git_version: &str) -> Result<Self, SchemaError> {
        let doc: Document = serde_json::from_slice(document)
            .map_err(|e| SchemaError::NotADocument(e.to_string()))?;
        let raw = &doc.components.schemas;
        let mut b = Builder {
            raw,
            names: HashMap::new(),
            schemas: Vec::new(),
        };
        // Object schemas by name first: references to them resolve to their index.
        let named: Vec<&String> = raw
            .iter()
            .filter(|(_, r)| !r.preserve && r.properties.is_some())
            .map(|(n, _)| n)
            .collect();
        for name in &named {
            let i = b.push(Schema::default());
            b.names.insert(name.as_str().into(), i);
        }
        for name in named {
            let Some(props) = raw.get(name).and_then(|r| r.properties.as_ref()) else {
                continue;
            };
            let properties = props
                .iter()
                .map(|(k, v)| (k.as_str().into(), b.shape(v, 0)))
                .collect();
            if let Some(&i) = b.names.get(name.as_str()) {
                b.schemas[i as usize] = Schema { properties };
            }
        }
        if !b.names.contains_key(POD) {
            return Err(SchemaError::NoSchema(POD));
        }
        Ok(ServedFields {
            git_version: git_version.to_string(),
            names: b.names,
            schemas: b.schemas,
        })
    }

    /// The version the API server reported when its document was read.
    pub fn git_version(&self) -> &str {
        &self.git_version
    }

    /// How many object schemas the document has (named and in place).
    pub fn len(&self) -> usize {
        self.schemas.len()
    }

    pub fn is_empty(&self) -> bool {
        self.schemas.is_empty()
    }

    /// The path of the first field of `value`, an object of schema `schema` (e.g.
    /// [`POD`]), that the API server does not serve and would drop: the first in
    /// the object's key order (`metadata` before `spec`, fields by name), lists by
    /// index. Any key present counts, null included: strict field validation refuses
    /// it as well. None when it serves all, or when `schema` is not in its document.
    pub fn first_unserved(&self, schema: &str, value: &Value) -> Option<String> {
        let &i = self.names.get(schema)?;
        let mut path = Vec::new();
        if self.walk(&Shape::Object(i), value, &mut path) {
            Some(format_path(&path))
        } else {
            None
        }
    }

    /// True, with `path` the field's, when something under `value` is not served.
    fn walk<'v>(&self, shape: &Shape, value: &'v Value, path: &mut Vec<Step<'v>>) -> bool {
        if path.len() >= MAX_DEPTH {
            return false;
        }
        match (shape, value) {
            (Shape::Object(_) | Shape::AllOf(_), Value::Object(fields)) => {
                let members = match shape {
                    Shape::Object(i) => std::slice::from_ref(i),
                    Shape::AllOf(is) => is.as_slice(),
                    _ => &[],
                };
                let property = |key: &str| {
                    members
                        .iter()
                        .filter_map(|i| self.schemas.get(*i as usize))
                        .find_map(|s| s.properties.get(key))
                };
                for (key, v) in fields {
                    path.push(Step::Field(key));
                    match property(key) {
                        None => return true,
                        Some(inner) => {
                            if self.walk(inner, v, path) {
                                return true;
                            }
                        }
                    }
                    path.pop();
                }
                false
            }
            (Shape::List(inner), Value::Array(items)) => {
                for (n, v) in items.iter().enumerate() {
                    path.push(Step::Index(n));
                    if self.walk(inner, v, path) {
                        return true;
                    }
                    path.pop();
                }
                false
            }
            (Shape::Map(inner), Value::Object(entries)) => {
                for (key, v) in entries {
                    path.push(Step::Key(key));
                    if self.walk(inner, v, path) {
                        return true;
                    }
                    path.pop();
                }
                false
            }
            // Scalars, content kept as it is, and values of another type than the
            // schema's (the API server refuses those itself, it does not drop them).
            _ => false,
        }
    }
}

/// One step of a field path.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Step<'v> {
    Field(&'v str),
    Index(usize),
    Key(&'v str),
}

/// kube's field path style: `spec.containers[0].resources.limits[cpu]`.
pub(crate) fn format_path(path: &[Step<'_>]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Field(f) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(f);
            }
            Step::Index(n) => {
                let _ = write!(out, "[{n}]");
            }
            Step::Key(k) => {
                let _ = write!(out, "[{k}]");
            }
        }
    }
    out
}

/// `v1.34` of `v1.34.4` (or `v1.34.4-gke.100`); the version as it is when it is not
/// `vMAJOR.MINOR...`.
pub fn minor_version(git_version: &str) -> String {
    let mut parts = git_version.trim_start_matches('v').splitn(3, '.');
    match (parts.next(), parts.next()) {
        (Some(major), Some(minor))
            if !major.is_empty() && major.bytes().all(|b| b.is_ascii_digit()) =>
        {
            let minor: String = minor.chars().take_while(char::is_ascii_digit).collect();
            if minor.is_empty() {
                git_version.to_string()
            } else {
                format!("v{major}.{minor}")
            }
        }
        _ => git_version.to_string(),
    }
}

/// The leaf check's reason for a copy carrying a field its leaf does not serve:
/// `leaf cluster east (v1.34) does not serve spec.evictionResponders`. `git_version` is
/// the leaf's as `/version` reports it.
pub fn not_served(cluster: &str, git_version: &str, path: &str) -> String {
    format!(
        "leaf cluster {cluster} ({}) does not serve {path}",
        minor_version(git_version)
    )
}

/// What the leaf check knows of the fields a leaf serves.
#[derive(Debug, Clone, Default)]
pub enum Served {
    /// Not read: the copy is not judged by it (the agent reads it before the leaf
    /// counts as synced, so only a view built by hand is in this state).
    #[default]
    NotRead,
    /// Read: a copy carrying a field the leaf does not serve does not go there.
    Known(Arc<ServedFields>),
    /// The leaf gave no usable answer (unreachable, refused, a document too large or not
    /// OpenAPI v3): the copy is not judged by it, and `explain` says so. Pod sync still
    /// creates copies with strict field validation, so the leaf refuses what it would
    /// have dropped.
    Unreadable(Arc<str>),
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! Core/v1 documents cut by hand from the ones v1.34.4 and v1.37.2 serve
    //! (`api/openapi-spec/v3/api__v1_openapi.json`): a few schemas each, written as the
    //! real ones are (direct `$ref`s, `$ref`s in `allOf` with a default, items, maps,
    //! schemas without properties), descriptions left out. v1.37 added
    //! `PodSpec.evictionResponders`, `PodSpec.schedulingGroup`,
    //! `VolumeMount.bindMountOptions` and `EmptyDirVolumeSource.mode`.

    use serde_json::{Value, json};

    fn reference(name: &str) -> Value {
        json!({"$ref": format!("#/components/schemas/{name}")})
    }

    fn wrapped(name: &str) -> Value {
        json!({"allOf": [reference(name)], "default": {}})
    }

    fn core(name: &str) -> String {
        format!("io.k8s.api.core.v1.{name}")
    }

    /// The document of `minor` (34 or 37).
    pub(crate) fn document(minor: u32) -> Vec<u8> {
        let newer = minor >= 37;
        let meta = "io.k8s.apimachinery.pkg.apis.meta.v1";
        let quantity = "io.k8s.apimachinery.pkg.api.resource.Quantity";
        let mut pod_spec = json!({
            "activeDeadlineSeconds": {"type": "integer", "format": "int64"},
            "affinity": {"allOf": [reference(&core("Affinity"))]},
            "containers": {"type": "array", "items": wrapped(&core("Container")),
                "x-kubernetes-list-map-keys": ["name"], "x-kubernetes-list-type": "map"},
            "enableServiceLinks": {"type": "boolean"},
            "nodeName": {"type": "string"},
            "nodeSelector": {"type": "object",
                "additionalProperties": {"type": "string", "default": ""},
                "x-kubernetes-map-type": "atomic"},
            "overhead": {"type": "object", "additionalProperties": reference(quantity)},
            "priority": {"type": "integer", "format": "int32"},
            "schedulerName": {"type": "string"},
            "tolerations": {"type": "array", "items": wrapped(&core("Toleration")),
                "x-kubernetes-list-type": "atomic"},
            "volumes": {"type": "array", "items": wrapped(&core("Volume"))}
        });
        let mut volume_mount = json!({
            "mountPath": {"type": "string", "default": ""},
            "name": {"type": "string", "default": ""},
            "readOnly": {"type": "boolean"},
            "subPath": {"type": "string"}
        });
        let mut empty_dir = json!({
            "medium": {"type": "string"},
            "sizeLimit": {"allOf": [reference(quantity)]}
        });
        if newer {
            // v1.37 writes a list's items as a direct `$ref` more often.
            pod_spec["evictionResponders"] = json!({"type": "array",
                "items": reference(&core("EvictionResponder")),
                "x-kubernetes-list-map-keys": ["name"], "x-kubernetes-list-type": "map"});
            pod_spec["schedulingGroup"] =
                json!({"allOf": [reference(&core("PodSchedulingGroup"))]});
            volume_mount["bindMountOptions"] = json!({"type": "array",
                "items": {"type": "string"}, "x-kubernetes-list-type": "set"});
            empty_dir["mode"] = json!({"type": "integer", "format": "int32"});
        }
        let mut schemas = json!({
            core("Pod"): {"type": "object", "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": wrapped(&format!("{meta}.ObjectMeta")),
                "spec": wrapped(&core("PodSpec")),
                "status": wrapped(&core("PodStatus"))
            }, "x-kubernetes-group-version-kind": [{"group": "", "kind": "Pod", "version": "v1"}]},
            core("PodSpec"): {"type": "object", "properties": pod_spec, "required": ["containers"]},
            core("PodStatus"): {"type": "object", "properties": {
                "phase": {"type": "string"},
                "podIP": {"type": "string"}
            }},
            core("Affinity"): {"type": "object", "properties": {
                "nodeAffinity": {"allOf": [reference(&core("NodeAffinity"))]}
            }},
            core("NodeAffinity"): {"type": "object", "properties": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"type": "object"}
            }},
            core("Container"): {"type": "object", "properties": {
                "args": {"type": "array", "items": {"type": "string", "default": ""}},
                "image": {"type": "string"},
                "name": {"type": "string", "default": ""},
                "resources": wrapped(&core("ResourceRequirements")),
                "volumeMounts": {"type": "array", "items": wrapped(&core("VolumeMount"))}
            }},
            core("ResourceRequirements"): {"type": "object", "properties": {
                "limits": {"type": "object", "additionalProperties": reference(quantity)},
                "requests": {"type": "object", "additionalProperties": reference(quantity)}
            }},
            core("Toleration"): {"type": "object", "properties": {
                "effect": {"type": "string"},
                "key": {"type": "string"},
                "operator": {"type": "string"},
                "value": {"type": "string"}
            }},
            core("Volume"): {"type": "object", "properties": {
                "emptyDir": {"allOf": [reference(&core("EmptyDirVolumeSource"))]},
                "name": {"type": "string", "default": ""},
                "persistentVolumeClaim":
                    {"allOf": [reference(&core("PersistentVolumeClaimVolumeSource"))]}
            }},
            core("PersistentVolumeClaimVolumeSource"): {"type": "object", "properties": {
                "claimName": {"type": "string", "default": ""},
                "readOnly": {"type": "boolean"}
            }},
            core("EmptyDirVolumeSource"): {"type": "object", "properties": empty_dir},
            core("VolumeMount"): {"type": "object", "properties": volume_mount,
                "required": ["name", "mountPath"]},
            format!("{meta}.ObjectMeta"): {"type": "object", "properties": {
                "annotations": {"type": "object",
                    "additionalProperties": {"type": "string", "default": ""}},
                "labels": {"type": "object",
                    "additionalProperties": {"type": "string", "default": ""}},
                "managedFields": {"type": "array",
                    "items": wrapped(&format!("{meta}.ManagedFieldsEntry"))},
                "name": {"type": "string"},
                "namespace": {"type": "string"},
                "uid": {"type": "string"}
            }},
            format!("{meta}.ManagedFieldsEntry"): {"type": "object", "properties": {
                "fieldsType": {"type": "string"},
                "fieldsV1": {"allOf": [reference(&format!("{meta}.FieldsV1"))]},
                "manager": {"type": "string"},
                "time": {"allOf": [reference(&format!("{meta}.Time"))]}
            }},
            format!("{meta}.FieldsV1"): {"type": "object"},
            format!("{meta}.Time"): {"type": "string", "format": "date-time"},
            quantity: {"oneOf": [{"type": "string"}, {"type": "number"}]}
        });
        if newer {
            schemas[core("EvictionResponder")] = json!({"type": "object", "properties": {
                "name": {"type": "string", "default": ""},
                "priority": {"type": "integer", "format": "int32"}
            }, "x-kubernetes-map-type": "atomic"});
            schemas[core("PodSchedulingGroup")] = json!({"type": "object", "properties": {
                "podGroupName": {"type": "string"}
            }});
        }
        let doc = json!({
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": "unversioned"},
            "paths": {},
            "components": {"schemas": schemas}
        });
        serde_json::to_vec(&doc).unwrap_or_default()
    }

    /// The fields a v1.`minor`.4 leaf serves.
    pub(crate) fn served(minor: u32) -> super::ServedFields {
        match super::ServedFields::from_document(&document(minor), &format!("v1.{minor}.4")) {
            Ok(s) => s,
            Err(e) => panic!("fixture v1.{minor}: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{document, served};
    use super::*;
    use serde_json::json;

    /// A pod using what v1.37 added, in lists of objects and under `$ref`s in `allOf`.
    fn newer_pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "shop",
                "labels": {"app": "web", "mcsched.io/managed-by-cluster": "east"},
                "annotations": {"mcsched.io/host-pod-uid": "u1", "any/key": "v"},
                "managedFields": [{"manager": "kubectl", "fieldsType": "FieldsV1",
                    "time": "2026-01-01T00:00:00Z",
                    "fieldsV1": {"f:spec": {"f:whatever": {}}}}]},
            "spec": {
                "containers": [
                    {"name": "a", "image": "i",
                        "resources": {"requests": {"cpu": "1", "example.com/gpu": 2}},
                        "volumeMounts": [{"name": "data", "mountPath": "/d"}]},
                    {"name": "b", "image": "j",
                        "volumeMounts": [{"name": "data", "mountPath": "/d"},
                            {"name": "data", "mountPath": "/e", "bindMountOptions": ["noexec"]}]}
                ],
                "nodeSelector": {"disk": "ssd"},
                "overhead": {"cpu": "100m"},
                "volumes": [{"name": "data", "emptyDir": {"sizeLimit": "1Gi", "mode": 448}}]
            }
        })
    }

    #[test]
    fn a_v1_34_leaf_does_not_serve_what_v1_37_added() {
        let old = served(34);
        assert_eq!(old.git_version(), "v1.34.4");
        let pod = newer_pod();
        // Containers before volumes, the second container's second mount.
        assert_eq!(
            old.first_unserved(POD, &pod).as_deref(),
            Some("spec.containers[1].volumeMounts[1].bindMountOptions")
        );
        let mut no_bind = pod.clone();
        if let Some(mounts) = no_bind["spec"]["containers"][1]["volumeMounts"].as_array_mut() {
            mounts.truncate(1);
        }
        assert_eq!(
            old.first_unserved(POD, &no_bind).as_deref(),
            Some("spec.volumes[0].emptyDir.mode")
        );
        let mut grouped = json!({"spec": {"containers": [{"name": "a"}],
            "schedulingGroup": {"podGroupName": "g"}}});
        assert_eq!(
            old.first_unserved(POD, &grouped).as_deref(),
            Some("spec.schedulingGroup")
        );
        // Present at all is enough: strict field validation refuses a null too.
        grouped["spec"]["schedulingGroup"] = Value::Null;
        assert_eq!(
            old.first_unserved(POD, &grouped).as_deref(),
            Some("spec.schedulingGroup")
        );
        let evicted = json!({"spec": {"evictionResponders": [{"name": "x", "priority": 1}]}});
        assert_eq!(
            old.first_unserved(POD, &evicted).as_deref(),
            Some("spec.evictionResponders")
        );

        // v1.37 serves it all, down to the items of a direct `$ref`.
        let new = served(37);
        assert_eq!(new.first_unserved(POD, &pod), None);
        assert_eq!(new.first_unserved(POD, &evicted), None);
        let mut bad = evicted.clone();
        bad["spec"]["evictionResponders"][0]["deadline"] = json!(5);
        assert_eq!(
            new.first_unserved(POD, &bad).as_deref(),
            Some("spec.evictionResponders[0].deadline")
        );
    }

    #[test]
    fn maps_and_contents_kept_as_they_are_take_any_key() {
        let old = served(34);
        // Labels, annotations, resource names, the node selector, fieldsV1's content,
        // a status the leaf serves.
        let pod = json!({
            "metadata": {"labels": {"x/y": "z"}, "annotations": {"": ""},
                "managedFields": [{"fieldsV1": {"f:metadata": {"f:labels": {".": {}}}}}]},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"anything": "1"}}}],
                "nodeSelector": {"k": "v"}, "overhead": {"memory": "1Mi"},
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                    {"nodeSelectorTerms": [{"matchFields": []}]}}}},
            "status": {"phase": "Pending"}
        });
        assert_eq!(old.first_unserved(POD, &pod), None);
        // But not an unknown field at the top, in metadata or in status.
        for (doc, path) in [
            (json!({"extra": 1}), "extra"),
            (
                json!({"metadata": {"generateName2": "x"}}),
                "metadata.generateName2",
            ),
            (json!({"status": {"resources": {}}}), "status.resources"),
        ] {
            assert_eq!(old.first_unserved(POD, &doc).as_deref(), Some(path));
        }
        // A value of another type than the schema's is the API server's to refuse.
        assert_eq!(
            old.first_unserved(POD, &json!({"spec": {"containers": "x"}})),
            None
        );
        // A schema the document lacks cannot be judged.
        assert_eq!(
            old.first_unserved("io.k8s.api.core.v1.Nope", &json!({"a": 1})),
            None
        );
    }

    #[test]
    fn references_direct_or_in_all_of_inline_objects_and_maps_of_objects_resolve_alike() {
        let doc = json!({"components": {"schemas": {
            "io.k8s.api.core.v1.Pod": {"type": "object", "properties": {
                "direct": {"$ref": "#/components/schemas/T"},
                "wrapped": {"allOf": [{"$ref": "#/components/schemas/T"}], "default": {}},
                "alias": {"$ref": "#/components/schemas/Alias"},
                "merged": {"allOf": [{"$ref": "#/components/schemas/T"},
                    {"$ref": "#/components/schemas/U"}]},
                "inline": {"type": "object", "properties": {"a": {"type": "string"}}},
                "byName": {"type": "object",
                    "additionalProperties": {"$ref": "#/components/schemas/T"}},
                "grid": {"type": "array", "items": {"type": "array",
                    "items": {"$ref": "#/components/schemas/T"}}},
                "kept": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "open": {"type": "object", "additionalProperties": true},
                "dangling": {"$ref": "#/components/schemas/Missing"},
                "self": {"$ref": "#/components/schemas/io.k8s.api.core.v1.Pod"}
            }},
            "T": {"type": "object", "properties": {"t": {"type": "string"}}},
            "U": {"type": "object", "properties": {"u": {"type": "string"}}},
            "Alias": {"$ref": "#/components/schemas/T"}
        }}});
        let fields =
            ServedFields::from_document(&serde_json::to_vec(&doc).unwrap_or_default(), "v1.35.0")
                .expect("document");
        let ok = json!({
            "direct": {"t": "x"}, "wrapped": {"t": "x"}, "alias": {"t": "x"},
            "merged": {"t": "x", "u": "y"}, "inline": {"a": "x"},
            "byName": {"one": {"t": "x"}}, "grid": [[{"t": "x"}]],
            "kept": {"any": {"thing": 1}}, "open": {"any": 1}, "dangling": {"any": 1},
            "self": {"direct": {"t": "x"}}
        });
        assert_eq!(fields.first_unserved(POD, &ok), None);
        for (bad, path) in [
            (json!({"direct": {"u": 1}}), "direct.u"),
            (json!({"wrapped": {"u": 1}}), "wrapped.u"),
            (json!({"alias": {"u": 1}}), "alias.u"),
            (json!({"merged": {"v": 1}}), "merged.v"),
            (json!({"inline": {"b": 1}}), "inline.b"),
            (
                json!({"byName": {"one": {"t": "x"}, "two": {"u": 1}}}),
                "byName[two].u",
            ),
            (
                json!({"grid": [[], [{"t": "x"}, {"u": 1}]]}),
                "grid[1][1].u",
            ),
            (json!({"self": {"self": {"nope": 1}}}), "self.self.nope"),
        ] {
            assert_eq!(
                fields.first_unserved(POD, &bad).as_deref(),
                Some(path),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_document_without_a_pod_schema_or_not_json_cannot_be_used() {
        assert!(matches!(
            ServedFields::from_document(b"<html>", "v1.34.0"),
            Err(SchemaError::NotADocument(_))
        ));
        assert!(matches!(
            ServedFields::from_document(b"{\"swagger\": \"2.0\"}", "v1.34.0"),
            Err(SchemaError::NotADocument(_))
        ));
        let no_pod = json!({"components": {"schemas": {
            "io.k8s.api.core.v1.Pod": {"type": "string"}}}});
        assert_eq!(
            ServedFields::from_document(
                &serde_json::to_vec(&no_pod).unwrap_or_default(),
                "v1.34.0"
            )
            .err(),
            Some(SchemaError::NoSchema(POD))
        );
        assert!(ServedFields::from_document(&document(34), "v1.34.4").is_ok());
    }

    #[test]
    fn the_reason_names_the_leaf_its_minor_version_and_the_field() {
        assert_eq!(
            not_served("east", "v1.34.4", "spec.evictionResponders"),
            "leaf cluster east (v1.34) does not serve spec.evictionResponders"
        );
        for (git, minor) in [
            ("v1.34.4", "v1.34"),
            ("v1.35.0-gke.1200", "v1.35"),
            ("v1.36+", "v1.36"),
            ("1.37.2", "v1.37"),
            ("weird", "weird"),
            ("v1", "v1"),
        ] {
            assert_eq!(minor_version(git), minor, "{git}");
        }
    }
}
