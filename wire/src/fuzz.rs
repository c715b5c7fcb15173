//! Property tests of the decoder, each named `fuzz_` (`make fuzz` runs them with many
//! cases): arbitrary bytes, and messages made from the schema itself (random fields,
//! fields newer than the schema, wrong wire types, lengths that lie, huge maps with
//! repeated keys, every depth the schema allows, cut anywhere) never panic, and cost at
//! most O(n log n) of their n bytes. The cost is work counted (`crate::work`: fields
//! read, map keys compared), never time, so that a loaded machine fails nothing.
//!
//! Cases: few by default, as these run in `cargo test --workspace`; `PROPTEST_CASES=N`
//! sets how many (proptest's own variable, read here too because the default is not
//! proptest's 256).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use proptest::collection::vec;
use proptest::prelude::*;
use prost::encoding::encode_varint;
use serde::de::DeserializeOwned;

use crate::bounds::{ANNOTATIONS_TOTAL_MAX, Bound};
use crate::schema::{FieldKind, Options, Scalar, Schema, Type, schema};
use crate::{WireError, codec, work};

pub(crate) const POD: &str = "k8s.io.api.core.v1.Pod";
const NODE: &str = "k8s.io.api.core.v1.Node";
const PVC: &str = "k8s.io.api.core.v1.PersistentVolumeClaim";
const RAW_EXTENSION: &str = "k8s.io.apimachinery.pkg.runtime.RawExtension";
const FIELDS_V1: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1";

/// ObjectMeta's field numbers.
pub(crate) const LABELS: u32 = 11;
pub(crate) const ANNOTATIONS: u32 = 12;

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn tag(number: u32, wire_type: u8, out: &mut Vec<u8>) {
    encode_varint((u64::from(number) << 3) | u64::from(wire_type), out);
}

/// A length-delimited field.
pub(crate) fn field(number: u32, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + 6);
    tag(number, 2, &mut out);
    encode_varint(bytes.len() as u64, &mut out);
    out.extend_from_slice(bytes);
    out
}

/// One entry of a map field `number`: key = 1, value = 2.
pub(crate) fn entry(number: u32, key: &[u8], value: &[u8]) -> Vec<u8> {
    field(number, &[field(1, key), field(2, value)].concat())
}

/// A pod of metadata alone, `meta` the ObjectMeta's bytes.
pub(crate) fn pod(meta: &[u8]) -> Vec<u8> {
    field(1, meta)
}

/// The most work a decode of `n` bytes may cost. Every field read has a tag byte of its
/// own and every message scan ends once after its last field, so reads are at most 2n; a
/// map of m entries (m < n) is sorted in O(m log m) comparisons.
pub(crate) fn work_bound(n: usize) -> u64 {
    let n = n as u64 + 1;
    let log2 = u64::from(64 - n.leading_zeros());
    n * (log2 + 4)
}

/// Decodes `bytes` as `message` into `K`, asserting the work bound; whether it decoded.
fn decode_counted<K: DeserializeOwned>(message: &str, bytes: &[u8], opts: Options) -> bool {
    work::take();
    let ok = schema().decode::<K>(message, bytes, opts).is_ok();
    let done = work::take();
    assert!(
        done <= work_bound(bytes.len()),
        "{message}: {done} units of work for {} bytes, past {}",
        bytes.len(),
        work_bound(bytes.len())
    );
    ok
}

/// Everything that reads bytes off the wire, on `bytes`: none may panic, and the decodes
/// are held to the work bound.
fn everything(bytes: &[u8]) {
    for opts in [
        Options::default(),
        Options {
            skip_managed_fields: true,
        },
    ] {
        decode_counted::<Pod>(POD, bytes, opts);
        decode_counted::<Node>(NODE, bytes, opts);
        decode_counted::<PersistentVolumeClaim>(PVC, bytes, opts);
        decode_counted::<serde_json::Value>(POD, bytes, opts);
        work::take();
        let _ = schema().to_json(POD, bytes, opts);
        let done = work::take();
        assert!(done <= work_bound(bytes.len()), "to_json: {done} units");
    }
    let _ = crate::read::object::<Pod>(POD, bytes);
    let _ = crate::schema::identity(bytes);
    let _ = crate::schema::list_items(bytes);
    let _ = codec::decode(bytes);
    let _ = codec::decode_event(bytes);
    let mut frames = codec::Frames::default();
    frames.push(bytes);
    while let Ok(Some(frame)) = frames.next_frame() {
        let _ = codec::decode_event(&frame);
    }
}

/// The bytes a test case drew, read as the choices that make a message, so that shrinking
/// them shrinks the message; past their end every choice is 0, the smallest.
struct Choices<'a> {
    bytes: &'a [u8],
    at: usize,
    /// Whether this message may be malformed: half are not, so that the fields deep
    /// inside are reached as often as the errors on the way.
    faults: bool,
}

impl Choices<'_> {
    fn next(&mut self) -> u8 {
        let b = self.bytes.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    fn left(&self) -> bool {
        self.at < self.bytes.len()
    }

    fn varint(&mut self) -> u64 {
        (0..self.next() % 9).fold(0u64, |v, _| (v << 8) | u64::from(self.next()))
    }

    fn bytes(&mut self, max: u8) -> Vec<u8> {
        (0..self.next() % max).map(|_| self.next()).collect()
    }
}

/// Where a made message stops growing: its bytes, and how deep messages go.
const MAX_MADE: usize = 1 << 20;
const MAX_DEPTH: u32 = 16;

/// A message `name` made of fields its schema has, and some it does not; `sent`, its
/// singular fields already sent, each sent once unless faults are made (as Go writes
/// them: the decoders keep the last of a field sent twice, where Go merges messages).
fn message(
    c: &mut Choices,
    s: &Schema,
    name: &str,
    depth: u32,
    out: &mut Vec<u8>,
    sent: &mut Vec<u32>,
) {
    let Some(fields) = s.fields(name) else {
        return;
    };
    let fields: Vec<_> = fields.numbered().collect();
    let count = if depth >= MAX_DEPTH { 0 } else { c.next() % 8 };
    for _ in 0..count {
        if !c.left() || out.len() > MAX_MADE || fields.is_empty() {
            return;
        }
        let (number, f) = fields[usize::from(c.next()) % fields.len()];
        if let FieldKind::Single(_) = f.kind {
            if sent.contains(&number) && !c.faults {
                continue;
            }
            sent.push(number);
        }
        match c.next() % 16 {
            // A field newer than these files: skipped, whatever its wire type.
            0 => {
                let unknown = 1000 + u32::from(c.next());
                let payload = c.bytes(16);
                out.extend(field(unknown, &payload));
            }
            // A wire type the field's type is not.
            1 if c.faults => {
                tag(number, [0, 1, 2, 5][usize::from(c.next() % 4)], out);
                out.extend(c.bytes(12));
            }
            // A length past the message's end.
            2 if c.faults => {
                tag(number, 2, out);
                encode_varint((u64::from(c.next()) + 1) << 10, out);
                out.extend(c.bytes(8));
            }
            _ => match &f.kind {
                FieldKind::Single(t) => value(c, s, number, t, depth, out),
                FieldKind::Repeated(Type::Scalar(Scalar::Bool | Scalar::Int32 | Scalar::Int64))
                    if c.next().is_multiple_of(4) =>
                {
                    // Packed, as proto3 writers send them.
                    let mut packed = Vec::new();
                    for _ in 0..c.next() % 8 {
                        encode_varint(c.varint(), &mut packed);
                    }
                    out.extend(field(number, &packed));
                }
                FieldKind::Repeated(t) => {
                    for _ in 0..c.next() % 4 {
                        value(c, s, number, t, depth, out);
                    }
                }
                FieldKind::Map(t) => {
                    // Huge, now and then, and with keys that repeat.
                    let entries = match c.next() % 8 {
                        0 => usize::from(c.next()) * 64,
                        _ => usize::from(c.next() % 4),
                    };
                    let keys = 1 + usize::from(c.next());
                    for i in 0..entries {
                        let mut e = Vec::new();
                        match c.next() % 8 {
                            0 if c.faults => {} // no key: "", which no label may have
                            1 if c.faults => e.extend(field(1, &c.bytes(80))),
                            _ => e.extend(field(1, format!("k{}", i % keys).as_bytes())),
                        }
                        if !c.next().is_multiple_of(8) {
                            value(c, s, 2, t, depth, &mut e);
                        }
                        out.extend(field(number, &e));
                        if out.len() > MAX_MADE {
                            return;
                        }
                    }
                }
            },
        }
    }
}

/// One field `number` of type `t`.
fn value(c: &mut Choices, s: &Schema, number: u32, t: &Type, depth: u32, out: &mut Vec<u8>) {
    match t {
        Type::Scalar(Scalar::String | Scalar::Bytes) => out.extend(field(number, &c.bytes(40))),
        Type::Scalar(Scalar::Bool | Scalar::Int32 | Scalar::Int64) => {
            tag(number, 0, out);
            encode_varint(c.varint(), out);
        }
        Type::Scalar(Scalar::Double) => {
            tag(number, 1, out);
            out.extend(c.varint().to_le_bytes());
        }
        Type::Scalar(Scalar::Float) => {
            tag(number, 5, out);
            out.extend((c.varint() as u32).to_le_bytes());
        }
        Type::Message(m) if m == RAW_EXTENSION || m == FIELDS_V1 => {
            let raw = match c.next() % 4 {
                // Nested past serde_json's recursion limit.
                1 if c.faults => "[".repeat(usize::from(c.next()) * 64).into_bytes(),
                2 if c.faults => c.bytes(40),
                _ => br#"{"f:metadata":{"f:labels":{}}}"#.to_vec(),
            };
            out.extend(field(number, &field(1, &raw)));
        }
        Type::Message(m) => {
            let mut inner = Vec::new();
            message(c, s, m, depth + 1, &mut inner, &mut Vec::new());
            out.extend(field(number, &inner));
        }
    }
}

/// A well-formed message `bytes` of `message` decodes, and the same through its JSON.
/// (Not asserted of malformed ones: the two decoders take a wrong wire type inside a
/// Time or an IntOrString differently, neither as Go does, which refuses it.)
fn agrees<K: DeserializeOwned + PartialEq + std::fmt::Debug>(message: &str, bytes: &[u8]) {
    let direct: K = schema()
        .decode(message, bytes, Options::default())
        .unwrap_or_else(|e| panic!("{message} does not decode: {e}"));
    let json = schema()
        .to_json(message, bytes, Options::default())
        .unwrap_or_else(|e| panic!("{message} does not decode to JSON: {e}"));
    let via_json: K = serde_json::from_value(json).expect("its JSON decodes");
    assert_eq!(direct, via_json, "the two decoders differ");
}

/// A message `top` made by `choices`, and whether it may be malformed.
fn made(choices: &[u8], top: &str) -> (Vec<u8>, bool) {
    let mut c = Choices {
        bytes: choices,
        at: 0,
        faults: choices.first().is_some_and(|b| !b.is_multiple_of(2)),
    };
    let (mut out, mut sent) = (Vec::new(), Vec::new());
    // Several top-level runs, so that one case can be larger than one run's few fields.
    while c.left() && out.len() <= MAX_MADE {
        message(&mut c, schema(), top, 0, &mut out, &mut sent);
    }
    (out, c.faults)
}

/// A label key valid to the API server, from a small set so that keys repeat.
fn label_key(i: u8) -> String {
    match i % 4 {
        0 => format!("k{i}"),
        1 => format!("example.com/k{i}"),
        2 => format!("app.kubernetes.io/n-{i}"),
        _ => format!("{i}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(64)))]

    #[test]
    fn fuzz_arbitrary_bytes(bytes in vec(any::<u8>(), 0..4096)) {
        everything(&bytes);
    }

    #[test]
    fn fuzz_schema_shaped_messages(
        choices in vec(any::<u8>(), 0..2048),
        top in prop::sample::select(vec![POD, NODE, PVC]),
        cut in any::<prop::sample::Index>(),
        flip in any::<(prop::sample::Index, u8)>(),
    ) {
        let (bytes, faults) = made(&choices, top);
        everything(&bytes);
        if !faults {
            match top {
                POD => agrees::<Pod>(POD, &bytes),
                NODE => agrees::<Node>(NODE, &bytes),
                _ => agrees::<PersistentVolumeClaim>(PVC, &bytes),
            }
        }
        // Cut short anywhere, and one byte changed.
        if !bytes.is_empty() {
            everything(&bytes[..cut.index(bytes.len())]);
            let mut flipped = bytes.clone();
            flipped[flip.0.index(bytes.len())] ^= flip.1 | 1;
            everything(&flipped);
        }
        // In a list and in a watch frame, as the watches read them.
        let list = field(2, &bytes);
        everything(&list);
        let mut envelope = codec::MAGIC.to_vec();
        envelope.extend(field(2, &bytes)); // runtime.Unknown's raw
        let frame = codec::encode_event("ADDED", envelope);
        everything(&frame);
    }

    /// Labels and annotations in any order, keys repeated, other metadata between them:
    /// the last entry for a key wins, as in Go; the bounds hold on what is left.
    #[test]
    fn fuzz_maps_keep_their_last_entry_and_the_bounds(
        labels in vec((any::<u8>(), 0usize..=66), 0..3000),
        annotations in vec((0u8..8, 0usize..90_000), 0..8),
    ) {
        let mut meta = Vec::new();
        let (mut want_labels, mut want_annotations) = (BTreeMap::new(), BTreeMap::new());
        for (i, (k, len)) in labels.iter().enumerate() {
            let (key, value) = (label_key(*k), "v".repeat(*len));
            meta.extend(entry(LABELS, key.as_bytes(), value.as_bytes()));
            want_labels.insert(key, value);
            if i.is_multiple_of(100) {
                meta.extend(field(1, format!("name-{i}").as_bytes()));
            }
        }
        for (k, len) in &annotations {
            let (key, value) = (format!("a.example/{k}"), "x".repeat(*len));
            meta.extend(entry(ANNOTATIONS, key.as_bytes(), value.as_bytes()));
            want_annotations.insert(key, value);
        }
        let bytes = pod(&meta);
        let long_value = want_labels.values().any(|v| v.len() > 63);
        let total: usize = want_annotations.iter().map(|(k, v)| k.len() + v.len()).sum();
        work::take();
        let got = schema().decode::<Pod>(POD, &bytes, Options::default());
        prop_assert!(work::take() <= work_bound(bytes.len()));
        match got {
            Ok(p) => {
                prop_assert!(!long_value && total <= ANNOTATIONS_TOTAL_MAX);
                prop_assert_eq!(p.metadata.labels.unwrap_or_default(), want_labels);
                prop_assert_eq!(p.metadata.annotations.unwrap_or_default(), want_annotations);
            }
            Err(WireError::Bound(Bound::LabelValue { .. })) => prop_assert!(long_value),
            Err(WireError::Bound(Bound::AnnotationsTotal { total: t })) => {
                prop_assert!(!long_value);
                prop_assert_eq!(t, total);
            }
            Err(e) => prop_assert!(false, "{e}"),
        }
        // The JSON decoder holds to the same.
        let json_ok = schema().to_json(POD, &bytes, Options::default()).is_ok();
        prop_assert_eq!(json_ok, !long_value && total <= ANNOTATIONS_TOTAL_MAX);
    }
}

/// The review's case: 140k short labels (~1.4 MB, within the 1.5 MiB etcd limit, and
/// valid to the API server, which bounds labels' lengths but not their number) decode,
/// all of them, in O(n log n) work.
#[test]
fn fuzz_140k_short_labels_decode_in_n_log_n_work() {
    const N: usize = 140_000;
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let key = |i: usize| -> [u8; 3] {
        let a = ALPHABET.len();
        [ALPHABET[i / (a * a)], ALPHABET[i / a % a], ALPHABET[i % a]]
    };
    let meta: Vec<u8> = (0..N).flat_map(|i| entry(LABELS, &key(i), b"v")).collect();
    let bytes = pod(&meta);
    assert!(bytes.len() < 3 << 19, "{} bytes", bytes.len());
    work::take();
    let p: Pod = schema()
        .decode(POD, &bytes, Options::default())
        .expect("valid labels decode");
    let done = work::take();
    assert_eq!(p.metadata.labels.map(|l| l.len()), Some(N));
    assert!(
        done <= work_bound(bytes.len()),
        "{done} units of work for {} bytes, past {}",
        bytes.len(),
        work_bound(bytes.len())
    );
}

/// Messages nest only as the schema's types do, and these have no cycle: the recursion
/// of a decode is as deep as the schema at most, whatever the bytes (unknown fields are
/// skipped, not descended into; JSON inside has serde_json's recursion limit).
#[test]
fn fuzz_nesting_is_bounded_by_the_schema() {
    fn depth<'s>(s: &'s Schema, name: &'s str, path: &mut Vec<&'s str>) -> usize {
        assert!(!path.contains(&name), "a cycle: {path:?} then {name}");
        path.push(name);
        let d = s.fields(name).map_or(0, |fields| {
            fields
                .numbered()
                .filter_map(|(_, f)| match &f.kind {
                    FieldKind::Single(Type::Message(m))
                    | FieldKind::Repeated(Type::Message(m))
                    | FieldKind::Map(Type::Message(m)) => Some(depth(s, m, path)),
                    _ => None,
                })
                .max()
                .unwrap_or(0)
        });
        path.pop();
        d + 1
    }
    let s = schema();
    let deepest = s
        .message_names()
        .map(|m| depth(s, m, &mut Vec::new()))
        .max()
        .unwrap_or(0);
    assert!((2..MAX_DEPTH as usize).contains(&deepest), "{deepest}");
    // A managedFields entry's FieldsV1 nested a million deep is an error, not a crash.
    let deep = "[".repeat(1 << 20);
    let managed = field(7, &field(1, deep.as_bytes())); // ManagedFieldsEntry.fieldsV1.Raw
    let bytes = pod(&field(17, &managed)); // ObjectMeta.managedFields
    assert!(
        schema()
            .decode::<Pod>(POD, &bytes, Options::default())
            .is_err()
    );
    assert!(schema().to_json(POD, &bytes, Options::default()).is_err());
}
