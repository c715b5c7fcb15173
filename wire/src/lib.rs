//! The Kubernetes API's protobuf encoding (`application/vnd.kubernetes.protobuf`) where
//! the agent and the bench's baselines spend their requests: bindings, events, and the
//! pod and node lists and watches. kube-rs speaks JSON only; this is the hand work on top
//! of its `Client::send`. JSON stays for everything else, and for these too when asked.

pub mod bounds;
pub mod codec;
mod de;
#[cfg(test)]
mod fuzz;
pub mod read;
pub mod schema;
pub mod write;

use std::fmt;
use std::str::FromStr;

/// The release of k8s.io/api whose .proto files the decoder reads (build.rs).
pub const K8S_API_VERSION: &str = env!("MCSCHED_K8S_API_VERSION");

/// The protobuf media type; a watch asks for it with `;stream=watch`.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
pub const JSON: &str = "application/json";

/// The encoding of requests and responses on the hot paths: kube-scheduler's
/// `clientConnection.contentType`, protobuf unless told otherwise.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ContentType {
    #[default]
    Protobuf,
    Json,
}

impl ContentType {
    pub fn media_type(self) -> &'static str {
        match self {
            ContentType::Protobuf => PROTOBUF,
            ContentType::Json => JSON,
        }
    }
}

impl fmt::Display for ContentType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.media_type())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unsupported content type {0:?}: want {PROTOBUF} or {JSON}")]
pub struct UnknownContentType(String);

impl FromStr for ContentType {
    type Err = UnknownContentType;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // An empty value is the default, as in a KubeSchedulerConfiguration.
        match s.trim() {
            "" | PROTOBUF => Ok(ContentType::Protobuf),
            JSON => Ok(ContentType::Json),
            other => Err(UnknownContentType(other.to_string())),
        }
    }
}

/// What can go wrong between the bytes and the objects.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("not a protobuf-encoded object: no k8s\\0 prefix")]
    NoMagic,
    #[error("malformed protobuf: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("malformed protobuf in {message}: {why}")]
    Malformed { message: String, why: &'static str },
    #[error("no message {0} in the protobuf schema")]
    UnknownMessage(String),
    #[error("the decoded object does not fit its type: {0}")]
    Object(#[from] serde_json::Error),
    #[error("unexpected {what}: {got}")]
    Unexpected { what: &'static str, got: String },
    #[error("an object past the API server's own bounds: {0}")]
    Bound(#[from] bounds::Bound),
}

/// The work of a decode (fields read, map keys compared), counted in tests to hold it to
/// O(n log n) of its input without timing anything; outside tests, nothing.
pub(crate) mod work {
    #[cfg(test)]
    thread_local! {
        static DONE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    #[inline(always)]
    pub(crate) fn tick() {
        #[cfg(test)]
        DONE.with(|d| d.set(d.get() + 1));
    }

    /// The work counted on this thread since the last call.
    #[cfg(test)]
    pub(crate) fn take() -> u64 {
        DONE.with(|d| d.replace(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_parse_as_kube_schedulers() {
        assert_eq!("".parse::<ContentType>().ok(), Some(ContentType::Protobuf));
        assert_eq!(
            PROTOBUF.parse::<ContentType>().ok(),
            Some(ContentType::Protobuf)
        );
        assert_eq!(JSON.parse::<ContentType>().ok(), Some(ContentType::Json));
        assert!("application/yaml".parse::<ContentType>().is_err());
    }
}
