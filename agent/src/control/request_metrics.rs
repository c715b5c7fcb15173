//! client-go's request metrics for the agent's kube clients: every request a client
//! sends counts in `rest_client_requests_total{code,host,method}` and
//! `rest_client_request_duration_seconds{host,verb}`, as client-go counts them for
//! kube-scheduler (its dashboards' API-server panels read these).
//!
//! The layer sits under the rate limit and the fence, as client-go times a request after
//! its rate limiter: a request the fence refuses was never sent and is not counted.
//! kube's own retries (of a 429, 503 or 504) happen inside, so a retried request counts
//! once, with its last answer, where client-go counts each try.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use tower::{Layer, Service};

/// client-go's code label when no answer came.
const NO_ANSWER: &str = "<error>";

#[derive(Clone)]
pub struct RequestMetricsLayer {
    host: Arc<str>,
}

impl RequestMetricsLayer {
    /// For a client of the API server at `cluster_url`: the host label is its host and
    /// port, as client-go's (the request URL's host). A client's requests carry only the
    /// path at this point of kube's stack; the base URI is added under it.
    pub fn new(cluster_url: &http::Uri) -> Self {
        let host = cluster_url
            .authority()
            .map(|a| a.as_str().to_string())
            .unwrap_or_default();
        RequestMetricsLayer { host: host.into() }
    }
}

impl<S> Layer<S> for RequestMetricsLayer {
    type Service = RequestMetrics<S>;
    fn layer(&self, inner: S) -> RequestMetrics<S> {
        RequestMetrics {
            inner,
            host: self.host.clone(),
        }
    }
}

pub struct RequestMetrics<S> {
    inner: S,
    host: Arc<str>,
}

impl<S, B, RB> Service<http::Request<B>> for RequestMetrics<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    RB: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let method = req.method().clone();
        let host = self.host.clone();
        let started = Instant::now();
        let answer = self.inner.call(req);
        Box::pin(async move {
            let answer = answer.await;
            // client-go's latency ends with the answer's headers for a watch, and so
            // here for every request: the body is the caller's to read.
            let code = match &answer {
                Ok(response) => response.status().as_str().to_string(),
                Err(_) => NO_ANSWER.to_string(),
            };
            mcsched_engine::metrics::global().rest_request(
                &code,
                method.as_str(),
                &host,
                started.elapsed().as_secs_f64(),
            );
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type BoxError = Box<dyn std::error::Error + Send + Sync>;

    /// Answers `status` to GETs and fails everything else, as a connection refused.
    #[derive(Clone)]
    struct Answer(u16);
    impl Service<http::Request<()>> for Answer {
        type Response = http::Response<()>;
        type Error = BoxError;
        type Future = std::future::Ready<Result<http::Response<()>, BoxError>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, req: http::Request<()>) -> Self::Future {
            if req.method() != http::Method::GET {
                return std::future::ready(Err("connection refused".into()));
            }
            let mut response = http::Response::new(());
            *response.status_mut() = http::StatusCode::from_u16(self.0).unwrap_or_default();
            std::future::ready(Ok(response))
        }
    }

    fn count(text: &str, series: &str) -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    #[tokio::test]
    async fn each_request_counts_by_its_code_method_and_host() {
        let url: http::Uri = "https://requests.test:6443".parse().expect("url");
        let mut svc = RequestMetricsLayer::new(&url).layer(Answer(404));
        let get = || {
            http::Request::get("/api/v1/pods/x")
                .body(())
                .expect("request")
        };
        let post = || {
            http::Request::post("/api/v1/pods")
                .body(())
                .expect("request")
        };
        let before = mcsched_engine::metrics::global().encode();
        let found =
            r#"rest_client_requests_total{code="404",host="requests.test:6443",method="GET"}"#;
        let failed =
            r#"rest_client_requests_total{code="<error>",host="requests.test:6443",method="POST"}"#;
        let timed =
            r#"rest_client_request_duration_seconds_count{host="requests.test:6443",verb="GET"}"#;
        let (found0, failed0, timed0) = (
            count(&before, found),
            count(&before, failed),
            count(&before, timed),
        );
        for _ in 0..2 {
            let answer = svc.call(get()).await.expect("answered");
            assert_eq!(answer.status(), 404);
        }
        assert!(svc.call(post()).await.is_err());
        let after = mcsched_engine::metrics::global().encode();
        assert_eq!(count(&after, found), found0 + 2, "{after}");
        assert_eq!(count(&after, failed), failed0 + 1, "{after}");
        assert_eq!(count(&after, timed), timed0 + 2, "{after}");
    }
}
