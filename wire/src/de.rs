//! Protobuf bytes deserialized straight into an object (k8s-openapi's, or the agent's
//! lean one) by serde, with no JSON in between: the same fields, names and zeros as
//! `Schema::to_json`, whose JSON the tests compare it with.

use std::borrow::Cow;

use base64::Engine;
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde::forward_to_deserialize_any;

use crate::WireError;
use crate::schema::{
    FIELDS_V1, FieldKind, INT_OR_STRING, MICRO_TIME, OBJECT_META, Options, QUANTITY, RAW_EXTENSION,
    Reader, Scalar, Schema, TIME, Type, Wire, malformed, timestamp_string,
};

/// Why a direct decode failed, kept apart so that `Schema::decode` can tell bytes that are
/// wrong (malformed, or past the API server's bounds) from an object of another shape.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error(transparent)]
    Wire(#[from] WireError),
    /// A RawExtension's or FieldsV1's JSON.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// The object's type refused a value (serde's message).
    #[error("{0}")]
    Type(String),
}

impl de::Error for Error {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Error::Type(msg.to_string())
    }
}

impl From<Error> for WireError {
    fn from(e: Error) -> Self {
        match e {
            Error::Wire(e) => e,
            Error::Json(e) => WireError::Object(e),
            Error::Type(s) => WireError::Object(de::Error::custom(s)),
        }
    }
}

fn wire(e: WireError) -> Error {
    Error::Wire(e)
}

/// A map's entries each key once, its last value (as Go's unmarshal assigns them in
/// turn), sorted by key as Go's JSON writes a map. A sort, not a search per entry: labels
/// have no bound on their number (`crate::bounds`), and a search per entry costs 140k of
/// them ~10^10 comparisons.
pub(crate) fn last_wins<K: Ord, V>(entries: &mut Vec<(K, V)>) {
    // Stable: equal keys stay in wire order, so the last of each run is the last sent.
    entries.sort_by(|a, b| {
        crate::work::tick();
        a.0.cmp(&b.0)
    });
    let mut kept: Vec<(K, V)> = Vec::with_capacity(entries.len());
    for (k, v) in entries.drain(..) {
        match kept.last_mut() {
            Some(last) if last.0 == k => last.1 = v,
            _ => kept.push((k, v)),
        }
    }
    *entries = kept;
}

/// A value off the wire, as JSON would have it, its messages decoded when visited.
pub(crate) enum Val<'s, 'b> {
    Null,
    Bool(bool),
    I64(i64),
    F64(f64),
    Str(&'b [u8]),
    Owned(String),
    /// A field's JSON name.
    Name(&'s str),
    /// Raw JSON (a RawExtension's or FieldsV1's bytes).
    Json(&'b [u8]),
    Msg(Msg<'s, 'b>),
    Seq(Vec<Val<'s, 'b>>),
    Map(Vec<(&'b [u8], Val<'s, 'b>)>),
}

#[derive(Clone, Copy)]
pub(crate) struct Msg<'s, 'b> {
    pub schema: &'s Schema,
    pub name: &'s str,
    pub bytes: &'b [u8],
    pub opts: Options,
}

impl<'s, 'b> Val<'s, 'b> {
    /// JSON's zero, which `omitempty` leaves out.
    fn is_zero(&self) -> bool {
        match self {
            Val::Null => true,
            Val::Bool(b) => !b,
            Val::I64(i) => *i == 0,
            Val::F64(f) => *f == 0.0,
            Val::Str(s) => s.is_empty(),
            Val::Owned(s) => s.is_empty(),
            Val::Name(s) => s.is_empty(),
            _ => false,
        }
    }
}

impl<'s, 'b> Msg<'s, 'b> {
    /// A message as its Go type marshals to JSON: the special types as scalars, the rest
    /// as objects.
    pub(crate) fn value(self) -> Result<Val<'s, 'b>, Error> {
        Ok(match self.name {
            QUANTITY => match self.field(1)? {
                Some(Wire::Bytes(b)) => Val::Str(b),
                _ => Val::Str(b""),
            },
            INT_OR_STRING => {
                let (mut kind, mut int, mut string) = (0, 0, &b""[..]);
                let mut r = Reader::new(self.bytes, self.name);
                while let Some((n, w)) = r.next().map_err(wire)? {
                    match (n, w) {
                        (1, Wire::Varint(v)) => kind = v,
                        (2, Wire::Varint(v)) => int = v as i32,
                        (3, Wire::Bytes(b)) => string = b,
                        _ => {}
                    }
                }
                if kind == 1 {
                    Val::Str(string)
                } else {
                    Val::I64(int.into())
                }
            }
            TIME | MICRO_TIME => {
                let (mut seconds, mut nanos) = (0i64, 0i64);
                let mut r = Reader::new(self.bytes, self.name);
                while let Some((n, w)) = r.next().map_err(wire)? {
                    match (n, w) {
                        (1, Wire::Varint(v)) => seconds = v as i64,
                        (2, Wire::Varint(v)) => nanos = i64::from(v as i32),
                        _ => {}
                    }
                }
                match timestamp_string(seconds, nanos, self.name == MICRO_TIME) {
                    Some(s) => Val::Owned(s),
                    None => Val::Null,
                }
            }
            RAW_EXTENSION => match self.field(1)? {
                Some(Wire::Bytes(b)) if !b.is_empty() => Val::Json(b),
                _ => Val::Null,
            },
            FIELDS_V1 => match self.field(1)? {
                Some(Wire::Bytes(b)) => Val::Json(b),
                _ => Val::Json(b"null"),
            },
            _ => Val::Msg(self),
        })
    }

    /// The last occurrence of field `number`.
    fn field(self, number: u32) -> Result<Option<Wire<'b>>, Error> {
        let mut r = Reader::new(self.bytes, self.name);
        let mut found = None;
        while let Some((n, w)) = r.next().map_err(wire)? {
            if n == number {
                found = Some(w);
            }
        }
        Ok(found)
    }

    fn child(self, name: &'s str, bytes: &'b [u8]) -> Msg<'s, 'b> {
        Msg {
            name,
            bytes,
            ..self
        }
    }

    fn scalar_or_message(self, t: &'s Type, w: Wire<'b>) -> Result<Val<'s, 'b>, Error> {
        Ok(match (t, w) {
            (Type::Message(m), Wire::Bytes(b)) => self.child(m, b).value()?,
            (Type::Scalar(Scalar::String), Wire::Bytes(b)) => Val::Str(b),
            (Type::Scalar(Scalar::Bytes), Wire::Bytes(b)) => {
                Val::Owned(base64::engine::general_purpose::STANDARD.encode(b))
            }
            (Type::Scalar(Scalar::Bool), Wire::Varint(v)) => Val::Bool(v != 0),
            (Type::Scalar(Scalar::Int32), Wire::Varint(v)) => Val::I64((v as i32).into()),
            (Type::Scalar(Scalar::Int64), Wire::Varint(v)) => Val::I64(v as i64),
            (Type::Scalar(Scalar::Double), Wire::Fixed64(v)) => Val::F64(f64::from_bits(v)),
            (Type::Scalar(Scalar::Float), Wire::Fixed32(v)) => Val::F64(f32::from_bits(v).into()),
            (Type::Scalar(Scalar::Int32), Wire::Fixed32(v)) => Val::I64((v as i32).into()),
            (Type::Scalar(Scalar::Int64), Wire::Fixed64(v)) => Val::I64(v as i64),
            _ => {
                return Err(wire(malformed(
                    self.name,
                    "a field whose wire type is not its type's",
                )));
            }
        })
    }

    /// The fields JSON would have, by their JSON names; embedded (`inline`) messages'
    /// fields among them; maps each key once, ObjectMeta's held to the API server's bounds.
    fn entries(self) -> Result<Vec<(&'s str, Val<'s, 'b>)>, Error> {
        let mut out = Vec::new();
        self.collect(&mut out)?;
        for (name, v) in &mut out {
            if let Val::Map(map) = v {
                last_wins(map);
                if self.name == OBJECT_META {
                    let pairs = map.iter().map(|(k, v)| match v {
                        Val::Str(s) => (*k, *s),
                        _ => (*k, &b""[..]),
                    });
                    crate::bounds::check(name, pairs).map_err(|e| wire(e.into()))?;
                }
            }
        }
        Ok(out)
    }

    fn collect(self, out: &mut Vec<(&'s str, Val<'s, 'b>)>) -> Result<(), Error> {
        let fields = self
            .schema
            .fields(self.name)
            .ok_or_else(|| wire(crate::WireError::UnknownMessage(self.name.to_string())))?;
        let skip_managed = self.opts.skip_managed_fields && self.name == OBJECT_META;
        let mut r = Reader::new(self.bytes, self.name);
        while let Some((number, w)) = r.next().map_err(wire)? {
            let Some(f) = fields.get(&number) else {
                continue; // a field newer than these files: as JSON would drop it
            };
            let name = f.name.as_str();
            if skip_managed && name == "managedFields" {
                continue;
            }
            match &f.kind {
                FieldKind::Single(Type::Message(m)) if f.inline => {
                    if let Wire::Bytes(b) = w {
                        self.child(m, b).collect(out)?;
                    }
                }
                FieldKind::Single(t) => {
                    let v = self.scalar_or_message(t, w)?;
                    let keep = !matches!(v, Val::Null) && (f.keep_zero || !v.is_zero());
                    // The last occurrence wins even when it is a zero JSON leaves out.
                    match (out.iter().position(|(n, _)| *n == name), keep) {
                        (Some(i), true) => out[i].1 = v,
                        (Some(i), false) => {
                            out.remove(i);
                        }
                        (None, true) => out.push((name, v)),
                        (None, false) => {}
                    }
                }
                FieldKind::Repeated(t) => {
                    let i = match out.iter().position(|(n, _)| *n == name) {
                        Some(i) => i,
                        None => {
                            out.push((name, Val::Seq(Vec::new())));
                            out.len() - 1
                        }
                    };
                    let Val::Seq(list) = &mut out[i].1 else {
                        continue;
                    };
                    match (t, w) {
                        // Packed numbers (proto3 writers; Go's proto2 ones do not pack).
                        (Type::Scalar(s), Wire::Bytes(b))
                            if *s != Scalar::String && *s != Scalar::Bytes =>
                        {
                            let mut p = Reader::new(b, self.name);
                            while let Some(v) = p.varint_or_end().map_err(wire)? {
                                list.push(self.scalar_or_message(t, Wire::Varint(v))?);
                            }
                        }
                        _ => list.push(self.scalar_or_message(t, w)?),
                    }
                }
                FieldKind::Map(t) => {
                    let Wire::Bytes(entry) = w else {
                        return Err(wire(malformed(
                            self.name,
                            "a map entry that is not a message",
                        )));
                    };
                    let (mut key, mut val) = (&b""[..], None);
                    let mut e = Reader::new(entry, self.name);
                    while let Some((n, v)) = e.next().map_err(wire)? {
                        match (n, v) {
                            (1, Wire::Bytes(k)) => key = k,
                            (2, v) => val = Some(self.scalar_or_message(t, v)?),
                            _ => {}
                        }
                    }
                    let val = match (val, t) {
                        (Some(v), _) => v,
                        (None, Type::Scalar(Scalar::String)) => Val::Str(b""),
                        (None, Type::Message(m)) => self.child(m, b"").value()?,
                        (None, _) => Val::Null,
                    };
                    let i = match out.iter().position(|(n, _)| *n == name) {
                        Some(i) => i,
                        None => {
                            out.push((name, Val::Map(Vec::new())));
                            out.len() - 1
                        }
                    };
                    // Deduplicated once the message is read (`entries`).
                    if let Val::Map(map) = &mut out[i].1 {
                        map.push((key, val));
                    }
                }
            }
        }
        Ok(())
    }
}

fn text(b: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(b)
}

impl<'de, 's, 'b> de::Deserializer<'de> for Val<'s, 'b> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Val::Null => visitor.visit_unit(),
            Val::Bool(b) => visitor.visit_bool(b),
            Val::I64(i) if i >= 0 => visitor.visit_u64(i as u64),
            Val::I64(i) => visitor.visit_i64(i),
            Val::F64(f) => visitor.visit_f64(f),
            Val::Str(b) => match text(b) {
                Cow::Borrowed(s) => visitor.visit_str(s),
                Cow::Owned(s) => visitor.visit_string(s),
            },
            Val::Owned(s) => visitor.visit_string(s),
            Val::Name(s) => visitor.visit_str(s),
            // Rare (RawExtension, FieldsV1), so through a JSON value.
            Val::Json(raw) => {
                Ok(serde_json::from_slice::<serde_json::Value>(raw)?.deserialize_any(visitor)?)
            }
            Val::Msg(m) => visitor.visit_map(Pairs {
                iter: m.entries()?.into_iter(),
                value: None,
            }),
            Val::Seq(items) => visitor.visit_seq(Items {
                iter: items.into_iter(),
            }),
            Val::Map(pairs) => visitor.visit_map(Pairs {
                iter: pairs.into_iter(),
                value: None,
            }),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Val::Null => visitor.visit_none(),
            Val::Json(b"null") => visitor.visit_none(),
            v => visitor.visit_some(v),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self {
            Val::Str(b) => visitor.visit_enum(text(b).into_owned().into_deserializer()),
            Val::Owned(s) => visitor.visit_enum(s.into_deserializer()),
            Val::Name(s) => visitor.visit_enum(s.into_deserializer()),
            Val::Json(raw) => Ok(serde_json::from_slice::<serde_json::Value>(raw)?
                .deserialize_enum(name, variants, visitor)?),
            other => other.deserialize_any(visitor),
        }
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct identifier
        ignored_any
    }
}

/// A key of an object: a field's JSON name, or a map's key off the wire.
trait Key<'s, 'b> {
    fn key(self) -> Val<'s, 'b>;
}

impl<'s, 'b> Key<'s, 'b> for &'s str {
    fn key(self) -> Val<'s, 'b> {
        Val::Name(self)
    }
}

impl<'s, 'b> Key<'s, 'b> for &'b [u8] {
    fn key(self) -> Val<'s, 'b> {
        Val::Str(self)
    }
}

struct Pairs<'s, 'b, K> {
    iter: std::vec::IntoIter<(K, Val<'s, 'b>)>,
    value: Option<Val<'s, 'b>>,
}

impl<'de, 's, 'b, K: Key<'s, 'b>> MapAccess<'de> for Pairs<'s, 'b, K> {
    type Error = Error;

    fn next_key_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Error> {
        match self.iter.next() {
            Some((k, v)) => {
                self.value = Some(v);
                seed.deserialize(k.key()).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        seed.deserialize(self.value.take().unwrap_or(Val::Null))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

struct Items<'s, 'b> {
    iter: std::vec::IntoIter<Val<'s, 'b>>,
}

impl<'de, 's, 'b> SeqAccess<'de> for Items<'s, 'b> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        self.iter.next().map(|v| seed.deserialize(v)).transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;

    use crate::bounds::{ANNOTATIONS_TOTAL_MAX, Bound, KeyProblem};
    use crate::fuzz::{ANNOTATIONS, LABELS, POD, entry, field, pod, work_bound};
    use crate::schema::{Options, schema};
    use crate::{WireError, work};

    fn decode(bytes: &[u8]) -> Result<Pod, WireError> {
        schema().decode(POD, bytes, Options::default())
    }

    /// 2·16384 label entries, every key twice ("old" then "new"): the map comes out with
    /// each key once and its last value, in O(n log n) work (~10⁷ units here). A search
    /// per entry, as the map was once deduplicated, makes it ~2.7·10⁸ key comparisons.
    #[test]
    fn a_map_is_deduplicated_in_n_log_n_work_its_last_entry_winning() {
        const N: usize = 1 << 14;
        let mut meta = Vec::new();
        for value in ["old", "new"] {
            for i in 0..N {
                meta.extend(entry(LABELS, format!("k{i}").as_bytes(), value.as_bytes()));
            }
        }
        let bytes = pod(&meta);
        work::take();
        let p = decode(&bytes).expect("valid labels");
        let done = work::take();
        let labels = p.metadata.labels.unwrap_or_default();
        assert_eq!(labels.len(), N);
        assert!(labels.values().all(|v| v == "new"), "the last entry wins");
        assert!(
            done <= work_bound(bytes.len()),
            "{done} units of work for {} bytes ({} entries), past {}",
            bytes.len(),
            2 * N,
            work_bound(bytes.len())
        );
    }

    /// As Go's unmarshal: the last entry for a key wins, wherever the entries are, and so
    /// does the last occurrence of a singular field, a zero included.
    #[test]
    fn the_last_entry_and_the_last_field_win() {
        let meta = [
            entry(LABELS, b"b", b"1"),
            field(1, b"first-name"),
            entry(LABELS, b"a", b"2"),
            entry(ANNOTATIONS, b"note", b"x"),
            entry(LABELS, b"b", b"3"),
            field(1, b""),
            field(LABELS, &field(1, b"c")), // an entry with no value: ""
        ]
        .concat();
        let p = decode(&pod(&meta)).expect("decodes");
        let labels: Vec<(String, String)> =
            p.metadata.labels.unwrap_or_default().into_iter().collect();
        let want = [("a", "2"), ("b", "3"), ("c", "")].map(|(k, v)| (k.into(), v.into()));
        assert_eq!(labels, want);
        assert_eq!(p.metadata.name, None, "the last name sent was empty");
        let json = schema()
            .to_json(POD, &pod(&meta), Options::default())
            .expect("decodes");
        assert_eq!(
            json["metadata"]["labels"],
            serde_json::json!({"a": "2", "b": "3", "c": ""})
        );
        assert_eq!(json["metadata"].get("name"), None);
    }

    /// Past the API server's bounds, a decode fails naming the field, in both decoders; a
    /// key sent again is counted once, as the API server counts the map.
    #[test]
    fn metadata_past_the_api_servers_bounds_is_refused_naming_the_field() {
        let chunk = "x".repeat(60 << 10);
        let five: Vec<u8> = (0..5)
            .flat_map(|i| entry(ANNOTATIONS, format!("a{i}").as_bytes(), chunk.as_bytes()))
            .collect();
        let once_five_times: Vec<u8> = (0..5)
            .flat_map(|_| entry(ANNOTATIONS, b"a", chunk.as_bytes()))
            .collect();
        let cases: [(&str, Vec<u8>, Option<Bound>); 5] = [
            (
                "five 60 KiB annotations",
                five,
                Some(Bound::AnnotationsTotal {
                    total: 5 * (2 + (60 << 10)),
                }),
            ),
            (
                "one 60 KiB annotation, sent five times",
                once_five_times,
                None,
            ),
            (
                "a 64-byte label value",
                entry(LABELS, b"k", &[b'v'; 64]),
                Some(Bound::LabelValue {
                    key: "k".into(),
                    len: 64,
                }),
            ),
            (
                "a 64-byte label name",
                entry(LABELS, &[b'n'; 64], b""),
                Some(Bound::Key {
                    field: "labels",
                    key: "n".repeat(64),
                    why: KeyProblem::LongName(64),
                }),
            ),
            (
                "an annotation key of two slashes",
                entry(ANNOTATIONS, b"a/b/c", b""),
                Some(Bound::Key {
                    field: "annotations",
                    key: "a/b/c".into(),
                    why: KeyProblem::Slashes,
                }),
            ),
        ];
        for (what, meta, want) in cases {
            let bytes = pod(&meta);
            let json = schema().to_json(POD, &bytes, Options::default());
            match (decode(&bytes), want) {
                (Ok(_), None) => assert!(json.is_ok(), "{what}"),
                (Err(WireError::Bound(got)), Some(want)) => {
                    assert_eq!(got, want, "{what}");
                    let field = match want {
                        Bound::LabelValue { .. } => "labels",
                        Bound::AnnotationsTotal { .. } => "annotations",
                        Bound::Key { field, .. } => field,
                    };
                    let message = WireError::Bound(got).to_string();
                    assert!(message.contains(&format!("metadata.{field}")), "{message}");
                    assert!(
                        matches!(json, Err(WireError::Bound(j)) if j == want),
                        "{what}"
                    );
                }
                (got, want) => panic!("{what}: {got:?}, want {want:?}"),
            }
        }
        const { assert!(5 * (60 << 10) > ANNOTATIONS_TOTAL_MAX) };
    }
}
