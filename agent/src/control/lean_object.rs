//! Objects decoded without their `metadata.managedFields`. Nothing here reads them, yet
//! decoding them built nested JSON maps for every object of every watch event only to
//! drop them (bench/analysis.md has the cost). The decoder skips their
//! value as it reads it: the object is the one the API server sent, minus that field.

use std::borrow::Cow;
use std::fmt;

use kube::Resource;
use kube::core::DynamicResourceScope;
use serde::Deserialize;
use serde::de::value::{BorrowedStrDeserializer, CowStrDeserializer};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// `K` as watched: decoded without managedFields.
#[derive(Clone, Debug, Default)]
pub struct Lean<K>(pub K);

impl<'de, K: Deserialize<'de>> Deserialize<'de> for Lean<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        K::deserialize(Object {
            inner: d,
            level: Level::Top,
        })
        .map(Lean)
    }
}

impl<K: Resource> Resource for Lean<K> {
    type DynamicType = K::DynamicType;
    // Dynamic, so an `Api` of either scope can be built for it from the caller's.
    type Scope = DynamicResourceScope;

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &kube::core::ObjectMeta {
        self.0.meta()
    }
    fn meta_mut(&mut self) -> &mut kube::core::ObjectMeta {
        self.0.meta_mut()
    }
}

/// Where in the object a map is: the object itself (whose `metadata` is looked into) or
/// its metadata (whose `managedFields` is skipped).
#[derive(Clone, Copy, PartialEq)]
enum Level {
    Top,
    Meta,
}

/// A deserializer of one of those maps, passing everything else through.
struct Object<D> {
    inner: D,
    level: Level,
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Object<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_any(Wrap::new(v, self.level))
    }
    fn deserialize_map<V: Visitor<'de>>(self, v: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_map(Wrap::new(v, self.level))
    }
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, D::Error> {
        self.inner
            .deserialize_struct(name, fields, Wrap::new(v, self.level))
    }
    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_option(Wrap::new(v, self.level))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct newtype_struct seq tuple tuple_struct enum identifier ignored_any
    }
}

/// The visitor of such a map: hands the map on wrapped, anything else as it is.
struct Wrap<V> {
    inner: V,
    level: Level,
}

impl<V> Wrap<V> {
    fn new(inner: V, level: Level) -> Self {
        Wrap { inner, level }
    }
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.expecting(f)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(Map {
            inner: map,
            level: self.level,
            metadata_next: false,
        })
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.inner.visit_some(Object {
            inner: d,
            level: self.level,
        })
    }
    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }
    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }
    fn visit_bool<E: de::Error>(self, b: bool) -> Result<V::Value, E> {
        self.inner.visit_bool(b)
    }
    fn visit_i64<E: de::Error>(self, n: i64) -> Result<V::Value, E> {
        self.inner.visit_i64(n)
    }
    fn visit_u64<E: de::Error>(self, n: u64) -> Result<V::Value, E> {
        self.inner.visit_u64(n)
    }
    fn visit_f64<E: de::Error>(self, n: f64) -> Result<V::Value, E> {
        self.inner.visit_f64(n)
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<V::Value, E> {
        self.inner.visit_str(s)
    }
    fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<V::Value, E> {
        self.inner.visit_borrowed_str(s)
    }
    fn visit_string<E: de::Error>(self, s: String) -> Result<V::Value, E> {
        self.inner.visit_string(s)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.inner.visit_seq(seq)
    }
}

/// The map's entries: at the top, `metadata`'s value is decoded as a [`Level::Meta`]
/// map; in the metadata, `managedFields` is read past.
struct Map<A> {
    inner: A,
    level: Level,
    metadata_next: bool,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Map<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        loop {
            let Some(key) = self.inner.next_key_seed(KeyName)? else {
                return Ok(None);
            };
            match self.level {
                Level::Meta if key == "managedFields" => {
                    self.inner.next_value::<IgnoredAny>()?;
                    continue;
                }
                Level::Top => self.metadata_next = key == "metadata",
                Level::Meta => {}
            }
            return match key {
                Cow::Borrowed(s) => seed.deserialize(BorrowedStrDeserializer::new(s)),
                owned => seed.deserialize(CowStrDeserializer::new(owned)),
            }
            .map(Some);
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        if std::mem::take(&mut self.metadata_next) {
            self.inner.next_value_seed(MetadataSeed(seed))
        } else {
            self.inner.next_value_seed(seed)
        }
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// A map key as text, borrowed from the input when it can be.
struct KeyName;

impl<'de> DeserializeSeed<'de> for KeyName {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(KeyName)
    }
}

impl<'de> Visitor<'de> for KeyName {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field name")
    }
    fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(s))
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(s.to_owned()))
    }
    fn visit_string<E: de::Error>(self, s: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(s))
    }
}

/// The value of the object's `metadata`.
struct MetadataSeed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for MetadataSeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Object {
            inner: d,
            level: Level::Meta,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;

    fn pod_json() -> serde_json::Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "p",
                "namespace": "ns",
                "uid": "u-1",
                "labels": {"app": "web"},
                "annotations": {"a": "b\"c"},
                "managedFields": [{
                    "manager": "kubectl",
                    "operation": "Update",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}
                }],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "rs", "uid": "u-0", "controller": true}],
                "resourceVersion": "42"
            },
            "spec": {
                "nodeName": "n1",
                "containers": [{"name": "c", "image": "i",
                    "resources": {"requests": {"cpu": "100m"}}}]
            },
            "status": {"phase": "Pending"}
        })
    }

    /// The same object as a plain decode, but for managedFields.
    #[test]
    fn decodes_everything_but_managed_fields() {
        let text = pod_json().to_string();
        let Lean(lean) = serde_json::from_str::<Lean<Pod>>(&text).expect("lean decode");
        let mut plain: Pod = serde_json::from_str(&text).expect("plain decode");
        assert!(plain.metadata.managed_fields.is_some());
        plain.metadata.managed_fields = None;
        assert_eq!(lean, plain);
        assert_eq!(
            lean.metadata.annotations.as_ref().map(|a| a["a"].as_str()),
            Some("b\"c")
        );
    }

    /// Escaped keys come as owned text; `managedFields` elsewhere than in the metadata
    /// is data and kept (here a label and an annotation named so).
    #[test]
    fn escaped_keys_and_look_alikes_decode_as_they_are() {
        let text = r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"n",
            "labels":{"managedFields":"x"},"managedFields":[{"manager":"m"}],
            "annot\u0061tions":{"managedFields":"y"}},
            "spec":{"unschedulable":true}}"#;
        let Lean(node) = serde_json::from_str::<Lean<Node>>(text).expect("decode");
        assert_eq!(node.metadata.managed_fields, None);
        assert_eq!(
            node.metadata
                .labels
                .as_ref()
                .map(|l| l["managedFields"].as_str()),
            Some("x")
        );
        assert_eq!(
            node.metadata
                .annotations
                .as_ref()
                .map(|a| a["managedFields"].as_str()),
            Some("y")
        );
        assert_eq!(node.spec.and_then(|s| s.unschedulable), Some(true));
    }

    /// Malformed input fails as a plain decode does, naming what is wrong.
    #[test]
    fn errors_are_the_plain_decoders() {
        for text in [
            r#"{"metadata":{"name":7}}"#,
            r#"{"metadata":{"managedFields":[{"manager":}]}}"#,
            r#"{"metadata":[]}"#,
            r#"[]"#,
        ] {
            let lean = serde_json::from_str::<Lean<Pod>>(text);
            assert!(lean.is_err(), "{text} decoded");
        }
        let lean = serde_json::from_str::<Lean<Pod>>(r#"{"metadata":{"name":7}}"#);
        let plain = serde_json::from_str::<Pod>(r#"{"metadata":{"name":7}}"#);
        assert_eq!(
            lean.err().map(|e| e.to_string()),
            plain.err().map(|e| e.to_string())
        );
    }

    /// A watch event's object, as kube's watcher decodes it.
    #[test]
    fn watch_events_decode_lean() {
        let line = json!({"type": "MODIFIED", "object": pod_json()}).to_string();
        let ev: kube::core::WatchEvent<Lean<Pod>> = serde_json::from_str(&line).expect("decode");
        let kube::core::WatchEvent::Modified(Lean(pod)) = ev else {
            panic!("not a modification");
        };
        assert_eq!(pod.metadata.managed_fields, None);
        assert_eq!(pod.metadata.resource_version.as_deref(), Some("42"));
    }
}
