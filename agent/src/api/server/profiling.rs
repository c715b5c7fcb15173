//! `GET /debug/pprof/profile?seconds=N`: a CPU profile of the whole agent, served as Go's
//! net/http/pprof serves kube-scheduler's when `enableProfiling` is true — a gzipped
//! `perftools.profiles.Profile` protobuf, which `go tool pprof` reads. The sampling is
//! pprof-rs's (SIGPROF at Go's 100 Hz); only one profile is taken at a time.

use std::io::Write;
use std::time::Duration;

use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use pprof::protos::Message;

use super::api_status::failure;

pub const PATH: &str = "/debug/pprof/profile";
/// Go's default when `seconds` is absent (or not positive).
pub const DEFAULT_SECONDS: u64 = 30;
/// The longest profile taken: longer ones hold a connection that sends nothing for
/// minutes, and are rarely what anyone meant.
pub const MAX_SECONDS: u64 = 300;
/// Go's `runtime.SetCPUProfileRate` default.
const FREQUENCY_HZ: i32 = 100;
/// pprof-rs's advice: a sample whose innermost frame is in these is dropped, as
/// unwinding from inside them (the unwinder's own locks, the vDSO's bad DWARF) can
/// deadlock or crash in the signal handler.
const BLOCKLIST: &[&str] = &["libc", "libgcc", "pthread", "vdso"];

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("seconds={0:?} is not a whole number of seconds")]
    NotANumber(String),
    #[error(
        "seconds={asked} is longer than the longest profile this server takes ({max} s: at most {MAX_SECONDS}, and shorter than --idle-timeout)"
    )]
    TooLong { asked: u64, max: u64 },
    #[error("cannot start the CPU profiler: {0}")]
    Start(#[source] pprof::Error),
    #[error("cannot build the profile: {0}")]
    Report(#[source] pprof::Error),
    #[error("cannot compress the profile: {0}")]
    Compress(#[source] std::io::Error),
    #[error("the profile's encoding was cancelled")]
    Cancelled,
}

/// The profiler of a server with `enableProfiling`. One profile at a time: pprof-rs's
/// profiler is process-wide and refuses to start while it runs, which answers a second
/// request at once (409), neither queued nor sharing the first one's samples.
pub struct Profiler {
    /// The longest profile: a connection silent for the idle timeout is closed, so a
    /// profile that long could never be delivered.
    max: Duration,
}

impl Profiler {
    pub fn new(idle_timeout: Duration) -> Self {
        let mut max = Duration::from_secs(MAX_SECONDS);
        if !idle_timeout.is_zero() {
            max = max.min(idle_timeout.saturating_sub(Duration::from_secs(1)));
        }
        Profiler { max }
    }

    /// How long the request asks to profile: Go's `seconds` form value (absent, empty
    /// or not positive: 30 s, as Go), refused past the maximum.
    pub fn requested(&self, uri: &Uri) -> Result<Duration, ProfileError> {
        let raw = uri
            .query()
            .unwrap_or("")
            .split('&')
            .filter_map(|kv| kv.split_once('=').or(Some((kv, ""))))
            .find(|(k, _)| *k == "seconds")
            .map(|(_, v)| {
                percent_encoding::percent_decode_str(&v.replace('+', " "))
                    .decode_utf8_lossy()
                    .into_owned()
            })
            .unwrap_or_default();
        let secs = if raw.is_empty() {
            DEFAULT_SECONDS
        } else {
            match raw.parse::<i64>() {
                Ok(n) if n <= 0 => DEFAULT_SECONDS,
                Ok(n) => n.unsigned_abs(),
                Err(_) => return Err(ProfileError::NotANumber(raw)),
            }
        };
        if Duration::from_secs(secs) > self.max {
            return Err(ProfileError::TooLong {
                asked: secs,
                max: self.max.as_secs(),
            });
        }
        Ok(Duration::from_secs(secs))
    }

    /// The handler: refused while another profile is taken, else samples for the asked
    /// duration and answers the gzipped protobuf.
    pub async fn serve(&self, uri: &Uri) -> Response {
        let duration = match self.requested(uri) {
            Ok(d) => d,
            Err(e) => return failure(StatusCode::BAD_REQUEST, e.to_string()),
        };
        let guard = match pprof::ProfilerGuardBuilder::default()
            .frequency(FREQUENCY_HZ)
            .blocklist(BLOCKLIST)
            .build()
        {
            Ok(g) => g,
            // Another request's profile (or anyone else's in the process) is running.
            Err(pprof::Error::Running) => return busy(),
            Err(e) => {
                return failure(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    ProfileError::Start(e).to_string(),
                );
            }
        };
        // The guard lives in this future: a client that goes away, or the request
        // deadline, drops it and so stops the sampling.
        tokio::time::sleep(duration).await;
        // The samples, copied out unsymbolized; sampling stops with the guard, so the
        // symbolizing below is not in the profile.
        let unresolved = guard.report().build_unresolved();
        drop(guard);
        // Symbolizing every sampled frame takes CPU seconds: off the runtime's threads.
        let encoded = tokio::task::spawn_blocking(move || encode(unresolved))
            .await
            .unwrap_or(Err(ProfileError::Cancelled));
        match encoded {
            Ok(body) => (
                [
                    (header::CONTENT_TYPE, "application/octet-stream"),
                    (
                        header::CONTENT_DISPOSITION,
                        r#"attachment; filename="profile""#,
                    ),
                    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
                ],
                body,
            )
                .into_response(),
            Err(e) => failure(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        }
    }
}

fn busy() -> Response {
    failure(
        StatusCode::CONFLICT,
        "a CPU profile is already being taken; try again when it is done",
    )
}

/// pprof-rs drops its signal handler's frame but, in a build that does not inline them,
/// keeps the unwinder's frames that called it (`trace`, `trace_unsynchronized`,
/// `<pprof::backtrace::…>::trace`) as every sample's innermost: they are the profiler's
/// cost, not the agent's, and would make every profile's top entry `trace`.
fn without_the_profilers_own(frames: &mut pprof::Frames) {
    let own = frames.frames.iter().position(|symbols| {
        symbols
            .iter()
            .any(|s| s.name().contains("pprof::backtrace"))
    });
    if let Some(i) = own {
        frames.frames.drain(..=i);
    }
}

fn encode(unresolved: pprof::Result<pprof::UnresolvedReport>) -> Result<Vec<u8>, ProfileError> {
    let unresolved = unresolved.map_err(ProfileError::Report)?;
    let mut data = std::collections::HashMap::new();
    for (frames, count) in unresolved.data {
        let mut frames = pprof::Frames::from(frames);
        without_the_profilers_own(&mut frames);
        *data.entry(frames).or_insert(0) += count;
    }
    let report = pprof::Report {
        data,
        timing: unresolved.timing,
    };
    let profile = report.pprof().map_err(ProfileError::Report)?;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&profile.encode_to_vec())
        .map_err(ProfileError::Compress)?;
    gz.finish().map_err(ProfileError::Compress)
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use axum::body::Body;
    use serde_json::{Value, json};
    use tower::ServiceExt;

    use super::super::{ServerState, router, tests::state_answering};
    use super::*;

    /// An API server whose TokenReview knows `alice-token` (alice) and `bob-token` (bob),
    /// and whose SubjectAccessReview lets alice, and only alice, `get` the non-resource
    /// URL `/debug/pprof/profile` — as kube asks it for this path.
    fn state() -> Arc<ServerState> {
        state_answering(|method, path, body: &Value| match (method, path) {
            ("POST", "/apis/authentication.k8s.io/v1/tokenreviews") => {
                let user = match body["spec"]["token"].as_str() {
                    Some("alice-token") => Some("alice"),
                    Some("bob-token") => Some("bob"),
                    _ => None,
                };
                Some((
                    201,
                    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                        "spec": {}, "status": {"authenticated": user.is_some(),
                        "user": {"username": user.unwrap_or_default()}}}),
                ))
            }
            ("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews") => {
                let spec = &body["spec"];
                let allowed = spec["user"] == "alice"
                    && spec["nonResourceAttributes"]
                        == json!({"path": "/debug/pprof/profile", "verb": "get"});
                Some((
                    201,
                    json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                        "spec": {}, "status": {"allowed": allowed}}),
                ))
            }
            _ => None,
        })
    }

    fn without_profiling(state: Arc<ServerState>) -> Arc<ServerState> {
        let mut s = Arc::into_inner(state).expect("the only reference");
        s.profiler = None;
        Arc::new(s)
    }

    async fn get(
        state: &Arc<ServerState>,
        uri: &str,
        token: Option<&str>,
    ) -> (StatusCode, Vec<u8>) {
        let mut req = axum::http::Request::get(uri);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let resp = router(state.clone())
            .oneshot(req.body(Body::empty()).expect("request"))
            .await
            .expect("answered");
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .expect("body");
        (status, body.to_vec())
    }

    /// CPU work for the profile to find, by name.
    #[inline(never)]
    fn spin_for_the_profile(stop: &AtomicBool) -> u64 {
        let mut x = 1u64;
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
        x
    }

    #[tokio::test]
    async fn callers_are_authenticated_and_authorized_and_a_disabled_profile_is_not_found() {
        let state = state();
        let uri = "/debug/pprof/profile?seconds=1";
        assert_eq!(get(&state, uri, None).await.0, StatusCode::UNAUTHORIZED);
        assert_eq!(
            get(&state, uri, Some("no-such-token")).await.0,
            StatusCode::UNAUTHORIZED
        );
        let (status, body) = get(&state, uri, Some("bob-token")).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let body: Value = serde_json::from_slice(&body).expect("a Status");
        assert_eq!(
            body["message"],
            r#"forbidden: User "bob" cannot get path "/debug/pprof/profile""#
        );
        // Past the maximum: refused before any profiling, saying why.
        let (status, body) = get(
            &state,
            "/debug/pprof/profile?seconds=100000",
            Some("alice-token"),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let body: Value = serde_json::from_slice(&body).expect("a Status");
        assert!(
            body["message"]
                .as_str()
                .is_some_and(|m| m.contains("seconds=100000 is longer than")),
            "{body}"
        );
        // enableProfiling false: as a path kube never registered.
        let disabled = without_profiling(state);
        assert_eq!(
            get(&disabled, uri, Some("alice-token")).await.0,
            StatusCode::NOT_FOUND
        );
        assert_eq!(get(&disabled, uri, None).await.0, StatusCode::UNAUTHORIZED);
    }

    /// The only test here that profiles: pprof-rs's profiler is one per process.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_authorized_caller_gets_a_pprof_protobuf_of_the_work_done_one_at_a_time() {
        let state = state();
        let stop = Arc::new(AtomicBool::new(false));
        let worker = {
            let stop = stop.clone();
            std::thread::spawn(move || spin_for_the_profile(&stop))
        };
        let second = {
            let state = state.clone();
            async move {
                // Well within the first one's second of sampling.
                tokio::time::sleep(Duration::from_millis(300)).await;
                get(
                    &state,
                    "/debug/pprof/profile?seconds=1",
                    Some("alice-token"),
                )
                .await
            }
        };
        let (first, second) = tokio::join!(
            get(
                &state,
                "/debug/pprof/profile?seconds=1",
                Some("alice-token")
            ),
            second
        );
        stop.store(true, Ordering::Relaxed);
        worker.join().expect("worker");

        assert_eq!(second.0, StatusCode::CONFLICT, "a second profile at once");
        let message: Value = serde_json::from_slice(&second.1).expect("a Status");
        assert_eq!(message["reason"], "Conflict");
        assert!(
            message["message"]
                .as_str()
                .is_some_and(|m| m.contains("already being taken")),
            "{message}"
        );

        let (status, body) = first;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        assert_eq!(&body[..2], &[0x1f, 0x8b], "gzipped, as Go serves it");
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&body[..])
            .read_to_end(&mut raw)
            .expect("gunzipped");
        let profile = pprof::protos::Profile::decode(&raw[..]).expect("a pprof Profile");
        let string = |i: i64| profile.string_table[i as usize].as_str();
        let types: Vec<(&str, &str)> = profile
            .sample_type
            .iter()
            .map(|t| (string(t.ty), string(t.unit)))
            .collect();
        assert!(types.contains(&("cpu", "nanoseconds")), "{types:?}");
        assert!(!profile.sample.is_empty(), "no sample in a busy second");
        // The spinning thread is in it, by name: the profile is of this process's work.
        assert!(
            profile
                .function
                .iter()
                .any(|f| string(f.name).contains("spin_for_the_profile")),
            "the worker's function is not among {} functions",
            profile.function.len()
        );

        // No sample's innermost frame is the unwinder's.
        for sample in &profile.sample {
            let leaf = sample.location_id.first().and_then(|id| {
                let location = profile.location.iter().find(|l| l.id == *id)?;
                let line = location.line.first()?;
                let f = profile.function.iter().find(|f| f.id == line.function_id)?;
                Some(string(f.name))
            });
            assert!(
                leaf.is_some_and(|n| n != "trace" && !n.contains("pprof::backtrace")),
                "innermost frame {leaf:?}"
            );
        }

        // Once done, the next one is taken.
        let (status, _) = get(
            &state,
            "/debug/pprof/profile?seconds=1",
            Some("alice-token"),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
    }

    #[test]
    fn seconds_are_read_as_gos_and_bounded() {
        let p = Profiler::new(Duration::from_secs(90));
        let asked = |q: &str| p.requested(&q.parse().expect("uri"));
        let secs = |q: &str| asked(q).expect("accepted").as_secs();
        assert_eq!(secs(PATH), DEFAULT_SECONDS);
        assert_eq!(secs("/debug/pprof/profile?seconds="), DEFAULT_SECONDS);
        assert_eq!(secs("/debug/pprof/profile?seconds=0"), DEFAULT_SECONDS);
        assert_eq!(secs("/debug/pprof/profile?seconds=-3"), DEFAULT_SECONDS);
        assert_eq!(secs("/debug/pprof/profile?debug=1&seconds=5"), 5);
        assert_eq!(secs("/debug/pprof/profile?seconds=89"), 89);
        // The idle timeout would close the connection before a 90 s profile is sent.
        assert!(matches!(
            asked("/debug/pprof/profile?seconds=90"),
            Err(ProfileError::TooLong { asked: 90, max: 89 })
        ));
        assert!(matches!(
            asked("/debug/pprof/profile?seconds=abc"),
            Err(ProfileError::NotANumber(_))
        ));
        // Without an idle timeout, the fixed maximum.
        let p = Profiler::new(Duration::ZERO);
        assert!(p.requested(&"/x?seconds=300".parse().expect("uri")).is_ok());
        assert!(
            p.requested(&"/x?seconds=301".parse().expect("uri"))
                .is_err()
        );
    }
}
