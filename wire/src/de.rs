//! Protobuf bytes deserialized straight into an object (k8s-openapi's, or the agent's
//! lean one) by serde, with no JSON in between: the same fields, names and zeros as
//! `Schema::to_json`, whose JSON the tests compare it with.

use std::borrow::Cow;

use base64::Engine;
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde::forward_to_deserialize_any;

use crate::schema::{
    FIELDS_V1, FieldKind, INT_OR_STRING, MICRO_TIME, OBJECT_META, Options, QUANTITY, RAW_EXTENSION,
    Reader, Scalar, Schema, TIME, Type, Wire, malformed, timestamp_string,
};

type Error = serde_json::Error;

fn wire(e: crate::WireError) -> Error {
    de::Error::custom(e)
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
    /// fields among them.
    fn entries(self, out: &mut Vec<(&'s str, Val<'s, 'b>)>) -> Result<(), Error> {
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
                        self.child(m, b).entries(out)?;
                    }
                }
                FieldKind::Single(t) => {
                    let v = self.scalar_or_message(t, w)?;
                    let keep = !matches!(v, Val::Null) && (f.keep_zero || !v.is_zero());
                    if keep {
                        match out.iter().position(|(n, _)| *n == name) {
                            Some(i) => out[i].1 = v,
                            None => out.push((name, v)),
                        }
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
                    if let Val::Map(map) = &mut out[i].1 {
                        match map.iter().position(|(k, _)| *k == key) {
                            Some(j) => map[j].1 = val,
                            None => map.push((key, val)),
                        }
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
                serde_json::from_slice::<serde_json::Value>(raw)?.deserialize_any(visitor)
            }
            Val::Msg(m) => {
                let mut entries = Vec::new();
                m.entries(&mut entries)?;
                visitor.visit_map(Pairs {
                    iter: entries.into_iter(),
                    value: None,
                })
            }
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
            Val::Json(raw) => serde_json::from_slice::<serde_json::Value>(raw)?
                .deserialize_enum(name, variants, visitor),
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
