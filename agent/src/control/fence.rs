//! Fencing at the wire: a write of the scheduling (or a leaf's) client is refused at the
//! moment it is handed to the connection, once this agent may no longer act as the
//! leader. The callers check leadership before they write too, but a request may wait
//! between that check and the connection (behind the rate limit, or in a process frozen
//! meanwhile); this layer, placed under the rate limit, checks again at the last moment,
//! and at every step of the request until it is answered: a process frozen while its
//! connection was being opened must not send the request once it runs again.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use tower::{Layer, Service};

use crate::control::leader::{LeaseHealth, may_act};

/// Whether writes may go out: open until armed with the election's state, then open
/// only while this agent leads within its renew deadline.
#[derive(Clone, Default)]
pub struct Fence {
    armed: Arc<OnceLock<(tokio::sync::watch::Receiver<bool>, LeaseHealth)>>,
}

impl Fence {
    /// From now on, writes follow `leader` and the Lease's renew deadline.
    pub fn arm(&self, leader: tokio::sync::watch::Receiver<bool>, lease: LeaseHealth) {
        let _ = self.armed.set((leader, lease));
    }

    pub fn is_open(&self) -> bool {
        self.armed
            .get()
            .is_none_or(|(leader, lease)| may_act(leader, lease))
    }

    /// `write`, fenced as the layer fences a client's writes: not started once the fence
    /// is closed, and dropped (unsent, if its connection has not taken it yet) as soon
    /// as the fence closes while it is under way. For writes of clients outside the
    /// kube stack (the extender's bind verb).
    pub fn guard<F: Future>(
        &self,
        write: F,
    ) -> impl Future<Output = Result<F::Output, Fenced>> + use<F> {
        let fence = self.clone();
        let mut write = Box::pin(write);
        std::future::poll_fn(move |cx| {
            if !fence.is_open() {
                return Poll::Ready(Err(Fenced));
            }
            write.as_mut().poll(cx).map(Ok)
        })
    }
}

/// The error of a write refused by the fence.
#[derive(Debug, thiserror::Error)]
#[error("not sent: this agent no longer holds the leader Lease")]
pub struct Fenced;

#[derive(Clone)]
pub struct FenceLayer {
    fence: Fence,
}

impl FenceLayer {
    pub fn new(fence: Fence) -> Self {
        FenceLayer { fence }
    }
}

impl<S> Layer<S> for FenceLayer {
    type Service = FenceService<S>;
    fn layer(&self, inner: S) -> FenceService<S> {
        FenceService {
            inner,
            fence: self.fence.clone(),
        }
    }
}

pub struct FenceService<S> {
    inner: S,
    fence: Fence,
}

/// Reads change nothing: a standby keeps its caches warm through them.
fn is_write(method: &http::Method) -> bool {
    !matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    )
}

impl<S, B> Service<http::Request<B>> for FenceService<S>
where
    S: Service<http::Request<B>>,
    S::Error: From<Fenced> + Send + 'static,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if !is_write(req.method()) {
            return Box::pin(self.inner.call(req));
        }
        let (method, uri) = (req.method().clone(), req.uri().clone());
        let refused = move || {
            tracing::warn!(%method, %uri, "write refused: not the leader any more");
            Err(S::Error::from(Fenced))
        };
        if !self.fence.is_open() {
            return Box::pin(std::future::ready(refused()));
        }
        let write = self.fence.guard(self.inner.call(req));
        Box::pin(async move {
            match write.await {
                Ok(answer) => answer,
                Err(Fenced) => refused(),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    type BoxError = Box<dyn std::error::Error + Send + Sync>;

    /// Answers 200 to whatever it is sent.
    #[derive(Clone)]
    struct Ok200;
    impl Service<http::Request<()>> for Ok200 {
        type Response = u16;
        type Error = BoxError;
        type Future = std::future::Ready<Result<u16, BoxError>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, _: http::Request<()>) -> Self::Future {
            std::future::ready(Ok(200))
        }
    }

    async fn send(svc: &mut FenceService<Ok200>, method: http::Method) -> Result<u16, BoxError> {
        let req = http::Request::builder()
            .method(method)
            .uri("/api/v1/namespaces/default/pods/p/binding")
            .body(())
            .map_err(|e| Box::new(e) as BoxError)?;
        svc.call(req).await
    }

    /// Sends (counts) only when polled after its gate opened, as a request whose
    /// connection was still being opened.
    #[derive(Clone)]
    struct Gated {
        gate: Arc<tokio::sync::Notify>,
        sent: Arc<std::sync::atomic::AtomicUsize>,
    }
    impl Service<http::Request<()>> for Gated {
        type Response = u16;
        type Error = BoxError;
        type Future = Pin<Box<dyn Future<Output = Result<u16, BoxError>> + Send>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, _: http::Request<()>) -> Self::Future {
            let (gate, sent) = (self.gate.clone(), self.sent.clone());
            Box::pin(async move {
                gate.notified().await;
                sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(200)
            })
        }
    }

    #[tokio::test]
    async fn a_write_waiting_for_its_connection_is_not_sent_once_leadership_lapsed() {
        let fence = Fence::default();
        let (_tx, rx) = tokio::sync::watch::channel(true);
        let lease = LeaseHealth::default();
        lease.renewed_for_test(Duration::from_millis(50));
        fence.arm(rx, lease);
        let gated = Gated {
            gate: Arc::new(tokio::sync::Notify::new()),
            sent: Arc::default(),
        };
        let mut svc = FenceLayer::new(fence).layer(gated.clone());
        let req = http::Request::builder()
            .method(http::Method::POST)
            .uri("/api/v1/namespaces/default/pods/p/binding")
            .body(())
            .expect("request");
        let pending = tokio::spawn(svc.call(req));
        tokio::time::sleep(Duration::from_millis(10)).await;
        // The renew deadline passes while the request waits; then its connection is ready.
        tokio::time::sleep(Duration::from_millis(80)).await;
        gated.gate.notify_waiters();
        let result = pending.await.expect("joined");
        assert!(
            result.as_ref().is_err_and(|e| e.is::<Fenced>()),
            "{result:?}"
        );
        assert_eq!(gated.sent.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn writes_stop_when_leadership_does_and_reads_go_on() {
        let fence = Fence::default();
        let mut svc = FenceLayer::new(fence.clone()).layer(Ok200);
        // Not armed (no election): everything goes.
        assert!(send(&mut svc, http::Method::POST).await.is_ok());
        let (tx, rx) = tokio::sync::watch::channel(true);
        let lease = LeaseHealth::default();
        lease.renewed_for_test(Duration::from_millis(50));
        fence.arm(rx, lease);
        assert!(send(&mut svc, http::Method::POST).await.is_ok());
        // The renew deadline passes (as in a frozen process): writes are refused before
        // the elector has even noticed.
        tokio::time::sleep(Duration::from_millis(80)).await;
        let refused = send(&mut svc, http::Method::POST).await;
        assert!(
            refused.as_ref().is_err_and(|e| e.is::<Fenced>()),
            "{refused:?}"
        );
        assert!(send(&mut svc, http::Method::GET).await.is_ok());
        // Not the leader at all.
        let _ = tx.send(false);
        assert!(send(&mut svc, http::Method::DELETE).await.is_err());
    }
}
