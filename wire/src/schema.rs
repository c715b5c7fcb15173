//! Objects decoded from protobuf by the v1.37 API's own .proto files (taken by build.rs
//! from the k8s.io/api and k8s.io/apimachinery Go modules), into the JSON the API server would have sent
//! for them, so that one serde decode (k8s-openapi's, or the agent's lean one) serves both
//! encodings. The field names in those files are the JSON names.

use std::collections::HashMap;
use std::sync::OnceLock;

use base64::Engine;
use serde_json::{Map, Value};

use crate::WireError;

const PROTOS: &[&str] = &[
    include_str!(concat!(env!("OUT_DIR"), "/core_v1.proto")),
    include_str!(concat!(env!("OUT_DIR"), "/meta_v1.proto")),
    include_str!(concat!(env!("OUT_DIR"), "/resource.proto")),
    include_str!(concat!(env!("OUT_DIR"), "/intstr.proto")),
    include_str!(concat!(env!("OUT_DIR"), "/runtime.proto")),
    include_str!(concat!(env!("OUT_DIR"), "/runtime_schema.proto")),
];

/// What the Go types say of the JSON that the .proto files do not (build.rs).
const JSON_SHAPE: &str = include_str!(concat!(env!("OUT_DIR"), "/json_shape.txt"));

const META: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.";
pub(crate) const OBJECT_META: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta";
pub(crate) const TIME: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.Time";
pub(crate) const MICRO_TIME: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime";
pub(crate) const FIELDS_V1: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1";
pub(crate) const QUANTITY: &str = "k8s.io.apimachinery.pkg.api.resource.Quantity";
pub(crate) const INT_OR_STRING: &str = "k8s.io.apimachinery.pkg.util.intstr.IntOrString";
pub(crate) const RAW_EXTENSION: &str = "k8s.io.apimachinery.pkg.runtime.RawExtension";

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Scalar {
    String,
    Bytes,
    Bool,
    Int32,
    Int64,
    Double,
    Float,
}

#[derive(Debug, Clone)]
pub(crate) enum Type {
    Scalar(Scalar),
    Message(String),
}

#[derive(Debug, Clone)]
pub(crate) struct Field {
    pub(crate) name: String,
    pub(crate) kind: FieldKind,
    /// A scalar whose zero JSON keeps (json_shape.txt, written by build.rs).
    pub(crate) keep_zero: bool,
    /// An embedded message whose fields JSON puts in its parent's.
    pub(crate) inline: bool,
}

#[derive(Debug, Clone)]
pub(crate) enum FieldKind {
    Single(Type),
    Repeated(Type),
    Map(Type),
}

/// A message's fields by number: a vector, as the numbers are small and dense, and a
/// lookup happens for every field on the wire.
#[derive(Default)]
pub(crate) struct Fields(Vec<Option<Field>>);

impl Fields {
    fn insert(&mut self, number: u32, field: Field) {
        let i = number as usize;
        if self.0.len() <= i {
            self.0.resize(i + 1, None);
        }
        self.0[i] = Some(field);
    }

    pub(crate) fn get(&self, number: &u32) -> Option<&Field> {
        self.0.get(*number as usize).and_then(Option::as_ref)
    }

    fn get_mut(&mut self, number: &u32) -> Option<&mut Field> {
        self.0.get_mut(*number as usize).and_then(Option::as_mut)
    }

    #[cfg(test)]
    fn values(&self) -> impl Iterator<Item = &Field> {
        self.0.iter().flatten()
    }

    /// The fields with their numbers (the property tests' messages are made from them).
    #[cfg(test)]
    pub(crate) fn numbered(&self) -> impl Iterator<Item = (u32, &Field)> {
        (0u32..)
            .zip(&self.0)
            .filter_map(|(n, f)| f.as_ref().map(|f| (n, f)))
    }

    fn values_mut(&mut self) -> impl Iterator<Item = &mut Field> {
        self.0.iter_mut().flatten()
    }
}

#[cfg(test)]
impl std::ops::Index<&u32> for Fields {
    type Output = Field;
    fn index(&self, number: &u32) -> &Field {
        self.get(number)
            .unwrap_or_else(|| panic!("no field {number}"))
    }
}

/// The messages of all files, by full name (`k8s.io.api.core.v1.Pod`), each its fields
/// by number.
pub struct Schema {
    messages: HashMap<String, Fields>,
}

/// The schema, parsed once.
pub fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let mut messages = HashMap::new();
        for text in PROTOS {
            parse(text, &mut messages);
        }
        for line in JSON_SHAPE.lines() {
            let Some((what, path)) = line.split_once(' ') else {
                continue;
            };
            let Some((message, field)) = path.trim().rsplit_once('.') else {
                continue;
            };
            let Some(fields) = messages.get_mut(message) else {
                continue;
            };
            match what {
                "keep" => fields
                    .values_mut()
                    .filter(|f| f.name == field)
                    .for_each(|f| f.keep_zero = true),
                "inline" => {
                    if let Some(f) = field.parse().ok().and_then(|n: u32| fields.get_mut(&n)) {
                        f.inline = true;
                    }
                }
                _ => {}
            }
        }
        Schema { messages }
    })
}

fn scalar(name: &str) -> Option<Scalar> {
    Some(match name {
        "string" => Scalar::String,
        "bytes" => Scalar::Bytes,
        "bool" => Scalar::Bool,
        "int32" | "sint32" | "uint32" | "fixed32" | "sfixed32" => Scalar::Int32,
        "int64" | "sint64" | "uint64" | "fixed64" | "sfixed64" => Scalar::Int64,
        "double" => Scalar::Double,
        "float" => Scalar::Float,
        _ => return None,
    })
}

/// The subset of proto2 these files use: a package, flat messages of optional, repeated
/// and map fields. The files are the build's own: a shape other than that is a bug
/// caught by the tests, so the parse is lenient rather than fallible.
fn parse(text: &str, out: &mut HashMap<String, Fields>) {
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let spaced = ["{", "}", "=", ";", "<", ">", ","]
        .iter()
        .fold(code, |s, p| s.replace(p, &format!(" {p} ")));
    let tokens: Vec<&str> = spaced.split_whitespace().collect();
    let mut package = String::new();
    let mut i = 0;
    while i < tokens.len() {
        match tokens[i] {
            "package" => {
                package = tokens.get(i + 1).copied().unwrap_or("").to_string();
                i += 3;
            }
            "message" => {
                let name = format!("{package}.{}", tokens.get(i + 1).copied().unwrap_or(""));
                i += 3; // message Name {
                let mut fields = Fields::default();
                while i < tokens.len() && tokens[i] != "}" {
                    let end = tokens[i..]
                        .iter()
                        .position(|t| *t == ";")
                        .map_or(tokens.len(), |p| i + p);
                    if let Some((number, field)) = field(&tokens[i..end], &package) {
                        fields.insert(number, field);
                    }
                    i = end + 1;
                }
                out.insert(name, fields);
                i += 1;
            }
            _ => {
                // syntax, import, option: to the end of the statement.
                while i < tokens.len() && tokens[i] != ";" {
                    i += 1;
                }
                i += 1;
            }
        }
    }
}

fn type_of(name: &str, package: &str) -> Type {
    match scalar(name) {
        Some(s) => Type::Scalar(s),
        None if name.contains('.') => Type::Message(name.trim_start_matches('.').to_string()),
        None => Type::Message(format!("{package}.{name}")),
    }
}

/// One field statement's tokens, without the `;`.
fn field(t: &[&str], package: &str) -> Option<(u32, Field)> {
    let (kind, name, number) = match t {
        ["map", "<", _, ",", v, ">", name, "=", n] => {
            (FieldKind::Map(type_of(v, package)), name, n)
        }
        ["optional" | "required", ty, name, "=", n] => {
            (FieldKind::Single(type_of(ty, package)), name, n)
        }
        ["repeated", ty, name, "=", n] => (FieldKind::Repeated(type_of(ty, package)), name, n),
        _ => return None,
    };
    let field = Field {
        name: name.to_string(),
        kind,
        keep_zero: false,
        inline: false,
    };
    Some((number.parse().ok()?, field))
}

/// What to leave out of decoded objects.
#[derive(Clone, Copy, Default, Debug)]
pub struct Options {
    /// ObjectMeta's managedFields, which no cache reads (the agent's lean objects).
    pub skip_managed_fields: bool,
}

impl Schema {
    /// The message `bytes` of type `message` (a full name) deserialized into `K`, as
    /// `to_json` then serde would, with no JSON in between.
    pub fn decode<K: serde::de::DeserializeOwned>(
        &self,
        message: &str,
        bytes: &[u8],
        opts: Options,
    ) -> Result<K, WireError> {
        let (name, _) = self
            .messages
            .get_key_value(message)
            .ok_or_else(|| WireError::UnknownMessage(message.to_string()))?;
        let msg = crate::de::Msg {
            schema: self,
            name,
            bytes,
            opts,
        };
        Ok(K::deserialize(msg.value()?)?)
    }

    pub(crate) fn fields(&self, message: &str) -> Option<&Fields> {
        self.messages.get(message)
    }

    #[cfg(test)]
    pub(crate) fn message_names(&self) -> impl Iterator<Item = &str> {
        self.messages.keys().map(String::as_str)
    }

    /// The message `bytes` of type `message` (a full name) as the API server's JSON.
    pub fn to_json(&self, message: &str, bytes: &[u8], opts: Options) -> Result<Value, WireError> {
        self.message(message, bytes, opts)
    }

    /// The JSON of a message, special-cased as its Go type marshals to JSON.
    fn message(&self, name: &str, bytes: &[u8], opts: Options) -> Result<Value, WireError> {
        match name {
            "k8s.io.apimachinery.pkg.api.resource.Quantity" => {
                let s = self.string_field(name, bytes, 1)?;
                return Ok(Value::String(s.unwrap_or_default()));
            }
            "k8s.io.apimachinery.pkg.util.intstr.IntOrString" => {
                let m = self.plain(name, bytes, opts)?;
                let is_string = m.get("type").and_then(Value::as_i64) == Some(1);
                return Ok(if is_string {
                    m.get("strVal")
                        .cloned()
                        .unwrap_or(Value::String(String::new()))
                } else {
                    m.get("intVal").cloned().unwrap_or(Value::from(0))
                });
            }
            n @ (TIME | MICRO_TIME) => {
                let m = self.plain(name, bytes, opts)?;
                let seconds = m.get("seconds").and_then(Value::as_i64).unwrap_or(0);
                let nanos = m.get("nanos").and_then(Value::as_i64).unwrap_or(0);
                return Ok(timestamp(seconds, nanos, n == MICRO_TIME));
            }
            "k8s.io.apimachinery.pkg.runtime.RawExtension" => {
                let raw = self.bytes_field(name, bytes, 1)?.unwrap_or_default();
                if raw.is_empty() {
                    return Ok(Value::Null);
                }
                return Ok(serde_json::from_slice(&raw)?);
            }
            FIELDS_V1 => {
                let raw = self.bytes_field(name, bytes, 1)?.unwrap_or_default();
                return Ok(serde_json::from_slice(&raw)?);
            }
            _ => {}
        }
        Ok(Value::Object(self.plain(name, bytes, opts)?))
    }

    /// A message's fields by their names. Protobuf carries every non-pointer scalar, zero
    /// or not; the zeros that JSON's `omitempty` leaves out are left out here too.
    fn plain(
        &self,
        name: &str,
        bytes: &[u8],
        opts: Options,
    ) -> Result<Map<String, Value>, WireError> {
        let fields = self
            .messages
            .get(name)
            .ok_or_else(|| WireError::UnknownMessage(name.to_string()))?;
        let skip_managed = opts.skip_managed_fields && name == OBJECT_META;
        let mut out = Map::new();
        // ObjectMeta's bounded maps as on the wire (field, key, value): Go's bounds count
        // bytes, which a lossy UTF-8 string would not keep.
        let mut bounded: Vec<(&str, &[u8], &[u8])> = Vec::new();
        let mut r = Reader::new(bytes, name);
        while let Some((number, value)) = r.next()? {
            let Some(f) = fields.get(&number) else {
                continue; // a field newer than these files: as JSON would drop it
            };
            if skip_managed && f.name == "managedFields" {
                continue;
            }
            match &f.kind {
                FieldKind::Single(t) if f.inline => {
                    if let Value::Object(inner) = self.value(t, value, name, opts)? {
                        out.extend(inner);
                    }
                }
                FieldKind::Single(t) => {
                    let v = self.value(t, value, name, opts)?;
                    if !v.is_null() && (f.keep_zero || !is_zero(&v)) {
                        out.insert(f.name.clone(), v);
                    } else {
                        // The last occurrence wins even when it is a zero JSON leaves out.
                        out.remove(&f.name);
                    }
                }
                FieldKind::Repeated(t) => {
                    let list = out
                        .entry(f.name.clone())
                        .or_insert_with(|| Value::Array(Vec::new()));
                    if let Value::Array(list) = list {
                        match (t, value) {
                            // Packed numbers (proto3 writers; Go's proto2 ones do not pack).
                            (Type::Scalar(s), Wire::Bytes(b))
                                if *s != Scalar::String && *s != Scalar::Bytes =>
                            {
                                let mut p = Reader::new(b, name);
                                while let Some(v) = p.varint_or_end()? {
                                    list.push(self.value(t, Wire::Varint(v), name, opts)?);
                                }
                            }
                            _ => list.push(self.value(t, value, name, opts)?),
                        }
                    }
                }
                FieldKind::Map(t) => {
                    let Wire::Bytes(entry) = value else {
                        return Err(malformed(name, "a map entry that is not a message"));
                    };
                    let (mut key, mut val) = (&b""[..], None);
                    let mut raw_val = &b""[..];
                    let mut e = Reader::new(entry, name);
                    while let Some((n, v)) = e.next()? {
                        match (n, v) {
                            (1, Wire::Bytes(k)) => key = k,
                            (2, v) => {
                                if let Wire::Bytes(b) = v {
                                    raw_val = b;
                                }
                                val = Some(self.value(t, v, name, opts)?);
                            }
                            _ => {}
                        }
                    }
                    if name == OBJECT_META {
                        bounded.push((f.name.as_str(), key, raw_val));
                    }
                    let key = String::from_utf8_lossy(key).into_owned();
                    let val = match (val, t) {
                        (Some(v), _) => v,
                        (None, Type::Scalar(Scalar::String)) => Value::String(String::new()),
                        (None, Type::Message(m)) => self.message(m, &[], opts)?,
                        (None, _) => Value::Null,
                    };
                    if let Value::Object(map) = out
                        .entry(f.name.clone())
                        .or_insert_with(|| Value::Object(Map::new()))
                    {
                        map.insert(key, val);
                    }
                }
            }
        }
        if name == OBJECT_META {
            for field in ["labels", "annotations"] {
                let mut pairs: Vec<(&[u8], &[u8])> = bounded
                    .iter()
                    .filter(|(f, _, _)| *f == field)
                    .map(|&(_, k, v)| (k, v))
                    .collect();
                crate::de::last_wins(&mut pairs);
                crate::bounds::check(field, pairs)?;
            }
        }
        Ok(out)
    }

    fn value(&self, t: &Type, w: Wire<'_>, at: &str, opts: Options) -> Result<Value, WireError> {
        Ok(match (t, w) {
            (Type::Message(m), Wire::Bytes(b)) => self.message(m, b, opts)?,
            (Type::Scalar(Scalar::String), Wire::Bytes(b)) => {
                Value::String(String::from_utf8_lossy(b).into_owned())
            }
            (Type::Scalar(Scalar::Bytes), Wire::Bytes(b)) => {
                Value::String(base64::engine::general_purpose::STANDARD.encode(b))
            }
            (Type::Scalar(Scalar::Bool), Wire::Varint(v)) => Value::Bool(v != 0),
            (Type::Scalar(Scalar::Int32), Wire::Varint(v)) => Value::from(v as i32),
            (Type::Scalar(Scalar::Int64), Wire::Varint(v)) => Value::from(v as i64),
            (Type::Scalar(Scalar::Double), Wire::Fixed64(v)) => Value::from(f64::from_bits(v)),
            (Type::Scalar(Scalar::Float), Wire::Fixed32(v)) => {
                Value::from(f32::from_bits(v) as f64)
            }
            (Type::Scalar(Scalar::Int32), Wire::Fixed32(v)) => Value::from(v as i32),
            (Type::Scalar(Scalar::Int64), Wire::Fixed64(v)) => Value::from(v as i64),
            _ => return Err(malformed(at, "a field whose wire type is not its type's")),
        })
    }

    fn string_field(
        &self,
        at: &str,
        bytes: &[u8],
        number: u32,
    ) -> Result<Option<String>, WireError> {
        Ok(self
            .bytes_field(at, bytes, number)?
            .map(|b| String::from_utf8_lossy(&b).into_owned()))
    }

    fn bytes_field(
        &self,
        at: &str,
        bytes: &[u8],
        number: u32,
    ) -> Result<Option<Vec<u8>>, WireError> {
        let mut r = Reader::new(bytes, at);
        let mut found = None;
        while let Some((n, v)) = r.next()? {
            if let (true, Wire::Bytes(b)) = (n == number, v) {
                found = Some(b.to_vec());
            }
        }
        Ok(found)
    }
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

/// metav1.Time's JSON (RFC 3339, whole seconds) or MicroTime's (microseconds); the zero
/// time is null, as Go marshals it.
fn timestamp(seconds: i64, nanos: i64, micro: bool) -> Value {
    timestamp_string(seconds, nanos, micro).map_or(Value::Null, Value::String)
}

pub(crate) fn timestamp_string(seconds: i64, nanos: i64, micro: bool) -> Option<String> {
    const GO_ZERO: i64 = -62_135_596_800;
    if seconds == GO_ZERO && nanos == 0 {
        return None;
    }
    let t = time::OffsetDateTime::from_unix_timestamp(seconds).ok()?;
    let (y, mo, d) = (t.year(), u8::from(t.month()), t.day());
    let (h, mi, s) = (t.hour(), t.minute(), t.second());
    let base = format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}");
    Some(if micro {
        format!("{base}.{:06}Z", nanos / 1000)
    } else {
        format!("{base}Z")
    })
}

pub(crate) fn malformed(message: &str, why: &'static str) -> WireError {
    WireError::Malformed {
        message: message.to_string(),
        why,
    }
}

#[derive(Clone, Copy)]
pub(crate) enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Bytes(&'a [u8]),
}

/// Fields off the wire, one at a time.
pub(crate) struct Reader<'a, 'n> {
    buf: &'a [u8],
    at: &'n str,
}

impl<'a, 'n> Reader<'a, 'n> {
    pub(crate) fn new(buf: &'a [u8], at: &'n str) -> Self {
        Reader { buf, at }
    }

    fn varint(&mut self) -> Result<u64, WireError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self
                .buf
                .split_first()
                .ok_or_else(|| malformed(self.at, "a varint cut short"))?;
            self.buf = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(malformed(self.at, "a varint too long"))
    }

    pub(crate) fn varint_or_end(&mut self) -> Result<Option<u64>, WireError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        self.varint().map(Some)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.buf.len() < n {
            return Err(malformed(self.at, "a field cut short"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    pub(crate) fn next(&mut self) -> Result<Option<(u32, Wire<'a>)>, WireError> {
        crate::work::tick();
        let Some(key) = self.varint_or_end()? else {
            return Ok(None);
        };
        let number =
            u32::try_from(key >> 3).map_err(|_| malformed(self.at, "a field number too large"))?;
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => {
                let b = self.take(8)?;
                Wire::Fixed64(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
            }
            2 => {
                let n = usize::try_from(self.varint()?)
                    .map_err(|_| malformed(self.at, "a length too large"))?;
                Wire::Bytes(self.take(n)?)
            }
            5 => {
                let b = self.take(4)?;
                Wire::Fixed32(u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
            }
            _ => return Err(malformed(self.at, "a wire type proto2 does not use here")),
        };
        Ok(Some((number, wire)))
    }
}

/// A list message (`PodList`: metadata = 1, items = 2), its items undecoded.
pub struct List<'a> {
    pub resource_version: String,
    pub continue_token: String,
    pub items: Vec<&'a [u8]>,
}

/// The parts of a list message.
pub fn list_items(bytes: &[u8]) -> Result<List<'_>, WireError> {
    let mut r = Reader::new(bytes, "List");
    let mut list = List {
        resource_version: String::new(),
        continue_token: String::new(),
        items: Vec::new(),
    };
    while let Some((n, v)) = r.next()? {
        match (n, v) {
            (1, Wire::Bytes(meta)) => {
                // ListMeta: resourceVersion = 2, continue = 3.
                let mut m = Reader::new(meta, "ListMeta");
                while let Some((n, v)) = m.next()? {
                    match (n, v) {
                        (2, Wire::Bytes(b)) => {
                            list.resource_version = String::from_utf8_lossy(b).into_owned()
                        }
                        (3, Wire::Bytes(b)) => {
                            list.continue_token = String::from_utf8_lossy(b).into_owned()
                        }
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(item)) => list.items.push(item),
            _ => {}
        }
    }
    Ok(list)
}

/// The object `raw` (a message of any core/v1 kind: metadata = 1) cut down to its
/// metadata's name (1), namespace (3), uid (5) and resourceVersion (6): an object the
/// decoder refuses can still be named, and its watch move past it.
pub(crate) fn identity(raw: &[u8]) -> Result<Vec<u8>, WireError> {
    use prost::encoding::{WireType, encode_key, encode_varint};
    let mut meta = Vec::new();
    let mut r = Reader::new(raw, "object");
    while let Some((n, w)) = r.next()? {
        let (1, Wire::Bytes(m)) = (n, w) else {
            continue;
        };
        meta.clear(); // the last metadata, as the decoder keeps it
        let mut f = Reader::new(m, OBJECT_META);
        while let Some((n, w)) = f.next()? {
            if let (1 | 3 | 5 | 6, Wire::Bytes(b)) = (n, w) {
                encode_key(n, WireType::LengthDelimited, &mut meta);
                encode_varint(b.len() as u64, &mut meta);
                meta.extend_from_slice(b);
            }
        }
    }
    let mut out = Vec::with_capacity(meta.len() + 8);
    encode_key(1, WireType::LengthDelimited, &mut out);
    encode_varint(meta.len() as u64, &mut out);
    out.extend_from_slice(&meta);
    Ok(out)
}

/// The full message name of a kind served in protobuf, by its apiVersion and kind.
pub fn message_name(api_version: &str, kind: &str) -> Option<String> {
    match api_version {
        "v1" => Some(format!("k8s.io.api.core.v1.{kind}")),
        "meta.k8s.io/v1" => Some(format!("{META}{kind}")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The decoder's release is the one the test control plane runs.
    #[test]
    fn the_protos_are_the_test_control_planes_release() {
        let go_mod = include_str!("../../tests/controlplane/go.mod");
        for module in ["k8s.io/api", "k8s.io/apimachinery"] {
            let pin = format!("\t{module} {}\n", crate::K8S_API_VERSION);
            assert!(go_mod.contains(&pin), "go.mod does not require {pin:?}");
        }
    }

    #[test]
    fn the_modules_files_parse_whole() {
        let s = schema();
        let pod = &s.messages["k8s.io.api.core.v1.Pod"];
        assert_eq!(pod[&1].name, "metadata");
        assert!(
            matches!(&pod[&2].kind, FieldKind::Single(Type::Message(m)) if m == "k8s.io.api.core.v1.PodSpec")
        );
        let meta = &s.messages[&format!("{META}ObjectMeta")];
        assert_eq!(meta[&11].name, "labels");
        assert!(matches!(
            &meta[&11].kind,
            FieldKind::Map(Type::Scalar(Scalar::String))
        ));
        let node_status = &s.messages["k8s.io.api.core.v1.NodeStatus"];
        assert!(
            matches!(&node_status[&2].kind, FieldKind::Map(Type::Message(m)) if m.ends_with("resource.Quantity"))
        );
        // Every referenced message is defined.
        for (name, fields) in &s.messages {
            for f in fields.values() {
                let t = match &f.kind {
                    FieldKind::Single(t) | FieldKind::Repeated(t) | FieldKind::Map(t) => t,
                };
                if let Type::Message(m) = t {
                    assert!(
                        s.messages.contains_key(m),
                        "{name}.{} refers to {m}",
                        f.name
                    );
                }
            }
        }
    }

    #[test]
    fn times_marshal_as_go_does() {
        assert_eq!(timestamp(0, 0, false), Value::from("1970-01-01T00:00:00Z"));
        assert_eq!(
            timestamp(1_700_000_000, 123_456_789, true),
            Value::from("2023-11-14T22:13:20.123456Z")
        );
        assert_eq!(timestamp(-62_135_596_800, 0, false), Value::Null);
    }
}
