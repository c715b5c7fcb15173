//! Lists and watches in protobuf: a stream of kube-runtime's watcher events, as its
//! `watcher()` yields them (paged list as Init, InitApply.., InitDone; then the watch from
//! the list's resourceVersion, resumed from the last one seen, bookmarks included; 410
//! Gone relists), so the caller's backoff and handling stay what they are for JSON.
//! Only core/v1 kinds: those are the ones whose .proto files the decoder reads.

use std::collections::VecDeque;
use std::pin::Pin;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use http::header::ACCEPT;
use http_body_util::BodyExt;
use kube::Resource;
use kube::api::{ListParams, WatchParams};
use kube::core::Request;
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;

use crate::schema::{self, Options};
use crate::{PROTOBUF, WireError, codec, write};

const WATCH_STREAM: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// The object `raw` (a message of `message`) without its managedFields.
pub fn object<K: DeserializeOwned>(message: &str, raw: &[u8]) -> Result<K, WireError> {
    let opts = Options {
        skip_managed_fields: true,
    };
    schema::schema().decode(message, raw, opts)
}

/// An object the decoder refused (`e`), logged by name, as far as its metadata's identity
/// decodes (name, namespace, uid, resourceVersion): all a deletion needs.
fn refused<K: Resource + DeserializeOwned>(message: &str, raw: &[u8], e: &WireError) -> Option<K> {
    let stub = schema::identity(raw)
        .and_then(|stub| object::<K>(message, &stub))
        .ok()
        .filter(|o: &K| o.meta().name.is_some());
    let (namespace, name) = stub.as_ref().map_or(("", ""), |o| {
        let m = o.meta();
        (
            m.namespace.as_deref().unwrap_or(""),
            m.name.as_deref().unwrap_or(""),
        )
    });
    tracing::warn!(message, namespace, name, error = %e, "object refused; left out");
    stub
}

/// The protobuf message name of `K`, if it is served in protobuf here.
pub fn message_of<K: Resource>(dt: &K::DynamicType) -> Option<String> {
    (K::group(dt).is_empty() && K::version(dt) == "v1")
        .then(|| format!("k8s.io.api.core.v1.{}", K::kind(dt)))
}

type Body = Pin<Box<dyn Stream<Item = Result<Bytes, kube::Error>> + Send>>;

enum State<K> {
    Empty,
    Listing {
        page: Option<String>,
    },
    Applying {
        items: VecDeque<K>,
        next: Option<String>,
        rv: String,
    },
    Watching {
        rv: String,
    },
    Streaming {
        rv: String,
        body: Body,
        frames: codec::Frames,
    },
}

struct Watch<K> {
    target: Target,
    state: State<K>,
}

/// What is watched, apart from where the watch is (the state holds a body that is not
/// Sync, so the requests borrow this alone).
struct Target {
    client: kube::Client,
    url: String,
    message: String,
    config: watcher::Config,
}

fn wire_error(e: WireError) -> kube::Error {
    kube::Error::Service(Box::new(e))
}

/// Watches `url` (an `Api`'s `resource_url()`, of a core/v1 kind) in protobuf.
pub fn watcher<K>(
    client: kube::Client,
    url: String,
    config: watcher::Config,
) -> Result<impl Stream<Item = watcher::Result<Event<K>>> + Send, WireError>
where
    K: Resource + DeserializeOwned + Clone + Send + 'static,
    K::DynamicType: Default,
{
    let message = message_of::<K>(&K::DynamicType::default()).ok_or(WireError::Unexpected {
        what: "kind for protobuf",
        got: K::kind(&K::DynamicType::default()).to_string(),
    })?;
    let w = Watch {
        target: Target {
            client,
            url,
            message,
            config,
        },
        state: State::Empty,
    };
    Ok(futures::stream::unfold(w, |mut w| async move {
        let item = w.step().await;
        Some((item, w))
    })
    .filter_map(|x| async move { x }))
}

impl<K> Watch<K>
where
    K: Resource + DeserializeOwned + Clone + Send + 'static,
{
    /// One step of the state machine: an event or error to yield, if any.
    async fn step(&mut self) -> Option<watcher::Result<Event<K>>> {
        match std::mem::replace(&mut self.state, State::Empty) {
            State::Empty => {
                self.state = State::Listing { page: None };
                Some(Ok(Event::Init))
            }
            State::Listing { page } => match self.target.list::<K>(page.clone()).await {
                Ok((items, next, rv)) => {
                    self.state = State::Applying { items, next, rv };
                    None
                }
                // A page's continue token expired: the list starts over.
                Err(kube::Error::Api(s)) if s.code == 410 => {
                    Some(Err(watcher::Error::InitialListFailed(kube::Error::Api(s))))
                }
                Err(e) => {
                    self.state = State::Listing { page };
                    Some(Err(watcher::Error::InitialListFailed(e)))
                }
            },
            State::Applying {
                mut items,
                next,
                rv,
            } => {
                if let Some(o) = items.pop_front() {
                    self.state = State::Applying { items, next, rv };
                    return Some(Ok(Event::InitApply(o)));
                }
                if next.is_some() {
                    self.state = State::Listing { page: next };
                    return None;
                }
                self.state = State::Watching { rv };
                Some(Ok(Event::InitDone))
            }
            State::Watching { rv } => match self.target.watch(&rv).await {
                Ok(body) => {
                    self.state = State::Streaming {
                        rv,
                        body,
                        frames: codec::Frames::default(),
                    };
                    None
                }
                Err(kube::Error::Api(s)) if s.code == 410 => {
                    Some(Err(watcher::Error::WatchStartFailed(kube::Error::Api(s))))
                }
                Err(e) => {
                    self.state = State::Watching { rv };
                    Some(Err(watcher::Error::WatchStartFailed(e)))
                }
            },
            State::Streaming {
                mut rv,
                mut body,
                mut frames,
            } => {
                let frame = match frames.next_frame() {
                    Ok(Some(f)) => f,
                    Ok(None) => {
                        match body.next().await {
                            Some(Ok(chunk)) => {
                                frames.push(&chunk);
                                self.state = State::Streaming { rv, body, frames };
                            }
                            Some(Err(e)) => {
                                self.state = State::Watching { rv };
                                return Some(Err(watcher::Error::WatchFailed(e)));
                            }
                            // The watch's timeout: resumed where it was.
                            None => self.state = State::Watching { rv },
                        }
                        return None;
                    }
                    Err(e) => {
                        self.state = State::Watching { rv };
                        return Some(Err(watcher::Error::WatchFailed(wire_error(e))));
                    }
                };
                let event = match codec::decode_event(&frame) {
                    Ok(ev) => ev,
                    Err(e) => {
                        self.state = State::Watching { rv };
                        return Some(Err(watcher::Error::WatchFailed(wire_error(e))));
                    }
                };
                if event.type_ == "ERROR" {
                    let status = write::status_from_message(&event.object.raw, 500);
                    // Gone: relist (from Empty); anything else: watch again from here.
                    if status.code != 410 {
                        self.state = State::Watching { rv };
                    }
                    return Some(Err(watcher::Error::WatchError(Box::new(status))));
                }
                let decoded = object::<K>(&self.target.message, &event.object.raw);
                let o = match decoded {
                    Ok(o) => o,
                    // The frame was whole, so the stream is still in step: only this
                    // object is lost. Watching again from `rv` would be sent it again, and
                    // one bad pod would stall the watch of every pod.
                    Err(e) => {
                        let refused = refused::<K>(&self.target.message, &event.object.raw, &e);
                        if let Some(v) = refused
                            .as_ref()
                            .and_then(|o| o.meta().resource_version.clone())
                        {
                            rv = v;
                        }
                        self.state = State::Streaming { rv, body, frames };
                        // Gone as far as the caches know, as a relist will have it
                        // (`list` leaves it out): a stale copy would outlive its deletion.
                        return match event.type_.as_str() {
                            "MODIFIED" | "DELETED" => refused.map(|o| Ok(Event::Delete(o))),
                            _ => None,
                        };
                    }
                };
                if let Some(v) = o.meta().resource_version.clone() {
                    rv = v;
                }
                self.state = State::Streaming { rv, body, frames };
                match event.type_.as_str() {
                    "ADDED" | "MODIFIED" => Some(Ok(Event::Apply(o))),
                    "DELETED" => Some(Ok(Event::Delete(o))),
                    _ => None, // BOOKMARK: only its resourceVersion counts
                }
            }
        }
    }
}

impl Target {
    /// One page: its objects, the next page's token, the list's resourceVersion.
    async fn list<K: Resource + DeserializeOwned>(
        &self,
        page: Option<String>,
    ) -> Result<(VecDeque<K>, Option<String>, String), kube::Error> {
        let lp = ListParams {
            label_selector: self.config.label_selector.clone(),
            field_selector: self.config.field_selector.clone(),
            limit: self.config.page_size,
            continue_token: page,
            ..Default::default()
        };
        let mut request = Request::new(&self.url)
            .list(&lp)
            .map_err(kube::Error::BuildRequest)?;
        request
            .headers_mut()
            .insert(ACCEPT, http::HeaderValue::from_static(PROTOBUF));
        request.extensions_mut().insert("list");
        let response = self
            .client
            .send(request.map(kube::client::Body::from))
            .await?;
        let code = response.status();
        let bytes = response.into_body().collect().await?.to_bytes();
        if !code.is_success() {
            return Err(kube::Error::Api(Box::new(write::status_of(
                code.as_u16(),
                &bytes,
            ))));
        }
        let env = codec::decode(&bytes).map_err(wire_error)?;
        let list = schema::list_items(&env.raw).map_err(wire_error)?;
        // An object the decoder refuses is left out, the rest of the page kept: failing
        // the page would list it again, and fail again, for ever.
        let items = list
            .items
            .iter()
            .filter_map(|raw| match object::<K>(&self.message, raw) {
                Ok(o) => Some(o),
                Err(e) => {
                    refused::<K>(&self.message, raw, &e);
                    None
                }
            })
            .collect::<VecDeque<K>>();
        let next = (!list.continue_token.is_empty()).then_some(list.continue_token);
        Ok((items, next, list.resource_version))
    }

    async fn watch(&self, rv: &str) -> Result<Body, kube::Error> {
        let wp = WatchParams {
            label_selector: self.config.label_selector.clone(),
            field_selector: self.config.field_selector.clone(),
            timeout: self.config.timeout,
            bookmarks: self.config.bookmarks,
            send_initial_events: false,
        };
        let mut request = Request::new(&self.url)
            .watch(&wp, rv)
            .map_err(kube::Error::BuildRequest)?;
        request
            .headers_mut()
            .insert(ACCEPT, http::HeaderValue::from_static(WATCH_STREAM));
        request.extensions_mut().insert("watch");
        let response = self
            .client
            .send(request.map(kube::client::Body::from))
            .await?;
        let code = response.status();
        if !code.is_success() {
            let bytes = response.into_body().collect().await?.to_bytes();
            return Err(kube::Error::Api(Box::new(write::status_of(
                code.as_u16(),
                &bytes,
            ))));
        }
        Ok(Box::pin(response.into_body().into_data_stream()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use k8s_openapi::api::core::v1::Pod;
    use k8s_pb::api::core::v1 as pb;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as pbmeta;

    use super::*;

    fn pod(name: &str, rv: &str) -> pb::Pod {
        pb::Pod {
            metadata: Some(pbmeta::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                resource_version: Some(rv.into()),
                managed_fields: vec![pbmeta::ManagedFieldsEntry {
                    manager: Some("m".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// A stand-in API server: each request recorded as `ACCEPT QUERY`, then answered with
    /// `answer(watch, lists, watches)` (the lists and watches asked so far, this one
    /// counted); None hangs, as a watch that sends nothing more.
    fn serving(
        queries: Arc<Mutex<Vec<String>>>,
        answer: fn(bool, usize, usize) -> Option<Vec<u8>>,
    ) -> kube::Client {
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let q = req.uri().query().unwrap_or_default().to_string();
            let accept = req
                .headers()
                .get(ACCEPT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            let queries = queries.clone();
            async move {
                let watch = q.contains("watch=true");
                let (lists, watches) = {
                    let mut all = queries.lock().unwrap_or_else(|e| e.into_inner());
                    all.push(format!("{accept} {q}"));
                    let watches = all.iter().filter(|x| x.contains("watch=true")).count();
                    (all.len() - watches, watches)
                };
                let Some(body) = answer(watch, lists, watches) else {
                    tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
                    return Ok(http::Response::new(kube::client::Body::empty()));
                };
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .body(kube::client::Body::from(body))
                        .unwrap_or_else(|_| http::Response::new(kube::client::Body::empty())),
                )
            }
        });
        kube::Client::new(service, "ns")
    }

    /// An API server that lists pod a at 10; the first watch sends b at 11 and a bookmark
    /// at 15, then ends; the next is too old (410); the relist shows b alone.
    fn stand_in(queries: Arc<Mutex<Vec<String>>>) -> kube::Client {
        serving(queries, |watch, lists, watches| {
            Some(if !watch {
                let items = if lists == 1 {
                    vec![pod("a", "10")]
                } else {
                    vec![pod("b", "20")]
                };
                let list = pb::PodList {
                    metadata: Some(pbmeta::ListMeta {
                        resource_version: Some(if lists == 1 { "10" } else { "20" }.into()),
                        ..Default::default()
                    }),
                    items,
                };
                codec::encode("v1", "PodList", &list)
            } else if watches == 1 {
                [
                    codec::encode_event("ADDED", codec::encode("v1", "Pod", &pod("b", "11"))),
                    codec::encode_event("BOOKMARK", codec::encode("v1", "Pod", &pod("", "15"))),
                ]
                .concat()
            } else if watches == 2 {
                let gone = pbmeta::Status {
                    code: Some(410),
                    reason: Some("Expired".into()),
                    message: Some("too old resource version: 15 (16)".into()),
                    ..Default::default()
                };
                codec::encode_event("ERROR", codec::encode("v1", "Status", &gone))
            } else {
                return None;
            })
        })
    }

    #[tokio::test]
    async fn lists_then_watches_resuming_at_bookmarks_and_relists_when_gone() {
        let queries = Arc::new(Mutex::new(Vec::new()));
        let client = stand_in(queries.clone());
        let config = watcher::Config::default().fields("spec.nodeName=");
        let stream = watcher::<Pod>(client, "/api/v1/pods".into(), config).expect("a core kind");
        let got: Vec<String> = stream
            .take(8)
            .map(|e| match e {
                Ok(Event::Init) => "init".to_string(),
                Ok(Event::InitApply(p)) => {
                    assert_eq!(p.metadata.managed_fields, None);
                    format!("list {}", p.metadata.name.unwrap_or_default())
                }
                Ok(Event::InitDone) => "listed".to_string(),
                Ok(Event::Apply(p)) => format!("apply {}", p.metadata.name.unwrap_or_default()),
                Ok(Event::Delete(p)) => format!("delete {}", p.metadata.name.unwrap_or_default()),
                Err(watcher::Error::WatchError(s)) => format!("error {}", s.code),
                Err(e) => format!("other error {e}"),
            })
            .collect()
            .await;
        assert_eq!(
            got,
            [
                "init",
                "list a",
                "listed",
                "apply b",
                "error 410",
                "init",
                "list b",
                "listed"
            ]
        );
        let queries = queries.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let watches: Vec<&String> = queries
            .iter()
            .filter(|q| q.contains("watch=true"))
            .collect();
        assert!(watches[0].starts_with(WATCH_STREAM), "{watches:?}");
        assert!(watches[0].contains("resourceVersion=10"), "{watches:?}");
        assert!(
            watches[0].contains("allowWatchBookmarks=true"),
            "{watches:?}"
        );
        assert!(
            watches[1].contains("resourceVersion=15"),
            "resumed at the bookmark: {watches:?}"
        );
        let lists: Vec<&String> = queries
            .iter()
            .filter(|q| !q.contains("watch=true"))
            .collect();
        assert!(
            lists[0].starts_with(PROTOBUF) && lists[0].contains("limit=500"),
            "{lists:?}"
        );
        assert!(
            lists[0].contains("fieldSelector=spec.nodeName%3D"),
            "{lists:?}"
        );
    }

    /// A pod whose annotations are past the API server's 256 KiB.
    fn oversized(name: &str, rv: &str) -> pb::Pod {
        let mut p = pod(name, rv);
        if let Some(m) = p.metadata.as_mut() {
            m.uid = Some(format!("uid-{name}"));
            m.annotations = [("big".to_string(), "x".repeat(300 << 10))].into();
        }
        p
    }

    /// An API server that lists a and the oversized x at 10; its first watch modifies x
    /// (still oversized) at 11 and ends, the second adds b at 12; later watches hang.
    fn refusing_stand_in(queries: Arc<Mutex<Vec<String>>>) -> kube::Client {
        serving(queries, |watch, _, watches| {
            Some(if !watch {
                let list = pb::PodList {
                    metadata: Some(pbmeta::ListMeta {
                        resource_version: Some("10".into()),
                        ..Default::default()
                    }),
                    items: vec![pod("a", "10"), oversized("x", "10")],
                };
                codec::encode("v1", "PodList", &list)
            } else if watches == 1 {
                let x = codec::encode("v1", "Pod", &oversized("x", "11"));
                codec::encode_event("MODIFIED", x)
            } else if watches == 2 {
                codec::encode_event("ADDED", codec::encode("v1", "Pod", &pod("b", "12")))
            } else {
                return None;
            })
        })
    }

    /// An object past the API server's bounds ends there: left out of its list page, a
    /// deletion (by name and uid) in the watch, which goes on after it.
    #[tokio::test]
    async fn an_object_the_decoder_refuses_is_left_out_and_the_watch_goes_on() {
        let queries = Arc::new(Mutex::new(Vec::new()));
        let client = refusing_stand_in(queries.clone());
        let stream = watcher::<Pod>(client, "/api/v1/pods".into(), watcher::Config::default())
            .expect("a core kind");
        let got: Vec<String> = stream
            .take(5)
            .map(|e| match e {
                Ok(Event::Init) => "init".to_string(),
                Ok(Event::InitApply(p)) => format!("list {}", p.metadata.name.unwrap_or_default()),
                Ok(Event::InitDone) => "listed".to_string(),
                Ok(Event::Apply(p)) => format!("apply {}", p.metadata.name.unwrap_or_default()),
                Ok(Event::Delete(p)) => format!(
                    "delete {} {}",
                    p.metadata.name.unwrap_or_default(),
                    p.metadata.uid.unwrap_or_default()
                ),
                Err(e) => format!("error {e}"),
            })
            .collect()
            .await;
        assert_eq!(
            got,
            ["init", "list a", "listed", "delete x uid-x", "apply b"]
        );
        let queries = queries.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let watches: Vec<&String> = queries
            .iter()
            .filter(|q| q.contains("watch=true"))
            .collect();
        assert_eq!(watches.len(), 2, "{queries:?}");
        assert!(
            watches[1].contains("resourceVersion=11"),
            "resumed past the refused object: {watches:?}"
        );
    }
}
