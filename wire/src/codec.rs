//! The bytes around objects, as k8s.io/apimachinery's protobuf serializer writes them: an
//! object is `k8s\0` then a runtime.Unknown whose `raw` holds the object's message; a
//! watch stream is frames of a 4-byte big-endian length then a meta.v1.WatchEvent (not
//! enveloped), whose `object.raw` is an enveloped object.

use bytes::{Buf, Bytes, BytesMut};
use k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent;
use k8s_pb::apimachinery::pkg::runtime::{RawExtension, TypeMeta, Unknown};
use prost::Message;

use crate::WireError;

/// What every protobuf-encoded object starts with.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// `message` enveloped as the API server expects a request body.
pub fn encode<M: Message>(api_version: &str, kind: &str, message: &M) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.to_string()),
            kind: Some(kind.to_string()),
        }),
        raw: Some(message.encode_to_vec()),
        content_encoding: None,
        content_type: None,
    };
    let mut out = Vec::with_capacity(MAGIC.len() + unknown.encoded_len());
    out.extend_from_slice(MAGIC);
    unknown.encode(&mut out).unwrap_or_default(); // a Vec grows: encoding cannot fail
    out
}

/// An enveloped object: its apiVersion, kind and message bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub api_version: String,
    pub kind: String,
    pub raw: Bytes,
}

/// Opens an envelope; the message stays undecoded.
pub fn decode(bytes: &[u8]) -> Result<Envelope, WireError> {
    let body = bytes.strip_prefix(MAGIC).ok_or(WireError::NoMagic)?;
    let unknown = Unknown::decode(body)?;
    let type_meta = unknown.type_meta.unwrap_or_default();
    Ok(Envelope {
        api_version: type_meta.api_version.unwrap_or_default(),
        kind: type_meta.kind.unwrap_or_default(),
        raw: Bytes::from(unknown.raw.unwrap_or_default()),
    })
}

/// A watch event: its type (`ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK`, `ERROR`) and its
/// enveloped object.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub type_: String,
    pub object: Envelope,
}

/// One frame's WatchEvent.
pub fn decode_event(frame: &[u8]) -> Result<Event, WireError> {
    let ev = WatchEvent::decode(frame)?;
    let raw = ev.object.and_then(|o| o.raw).unwrap_or_default();
    Ok(Event {
        type_: ev.r#type.unwrap_or_default(),
        object: decode(&raw)?,
    })
}

/// A WatchEvent framed as the API server writes it (for tests and stand-ins).
pub fn encode_event(type_: &str, object: Vec<u8>) -> Vec<u8> {
    let ev = WatchEvent {
        r#type: Some(type_.to_string()),
        object: Some(RawExtension { raw: Some(object) }),
    };
    let body = ev.encode_to_vec();
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// The frames of a watch stream as its chunks arrive, whatever their sizes.
#[derive(Default)]
pub struct Frames {
    buf: BytesMut,
}

/// The largest frame accepted: the API server's own limit on an object is 3 MiB, and a
/// length past this is a stream out of step, not an object.
const MAX_FRAME: usize = 64 << 20;

impl Frames {
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete frame, if one has arrived.
    pub fn next_frame(&mut self) -> Result<Option<Bytes>, WireError> {
        let Some(head) = self.buf.get(..4) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        if len > MAX_FRAME {
            return Err(WireError::Unexpected {
                what: "watch frame length",
                got: len.to_string(),
            });
        }
        if self.buf.len() < 4 + len {
            return Ok(None);
        }
        self.buf.advance(4);
        Ok(Some(self.buf.split_to(len).freeze()))
    }

    /// Bytes of a frame begun but not finished.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_pb::api::core::v1::{Binding, ObjectReference};
    use k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn an_envelope_opens_to_what_was_put_in() {
        let b = Binding {
            metadata: Some(ObjectMeta {
                name: Some("p".into()),
                ..Default::default()
            }),
            target: Some(ObjectReference {
                kind: Some("Node".into()),
                name: Some("n1".into()),
                ..Default::default()
            }),
        };
        let bytes = encode("v1", "Binding", &b);
        assert_eq!(&bytes[..4], MAGIC);
        let env = decode(&bytes).expect("decodes");
        assert_eq!(
            (env.api_version.as_str(), env.kind.as_str()),
            ("v1", "Binding")
        );
        assert_eq!(Binding::decode(env.raw).ok(), Some(b));
        assert!(matches!(decode(b"{\"kind\":1}"), Err(WireError::NoMagic)));
    }

    #[test]
    fn frames_come_out_whole_however_the_stream_is_cut() {
        let a = encode_event("ADDED", encode("v1", "Pod", &ObjectMeta::default()));
        let b = encode_event("BOOKMARK", encode("v1", "Pod", &ObjectMeta::default()));
        let stream: Vec<u8> = [a.clone(), b.clone()].concat();
        for cut in 0..stream.len() {
            let mut f = Frames::default();
            let mut got = Vec::new();
            for part in [&stream[..cut], &stream[cut..]] {
                f.push(part);
                while let Some(frame) = f.next_frame().expect("frame") {
                    got.push(decode_event(&frame).expect("event").type_);
                }
            }
            assert_eq!(got, ["ADDED", "BOOKMARK"], "cut at {cut}");
            assert_eq!(f.pending(), 0);
        }
        let mut f = Frames::default();
        f.push(&[0xff, 0xff, 0xff, 0xff]);
        assert!(f.next_frame().is_err());
    }
}
