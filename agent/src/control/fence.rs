//! Fencing at the wire: a write of the scheduling (or a leaf's) client is refused at the
//! moment it is handed to the connection, once this agent may no longer act as the
//! leader. The callers check leadership before they write too, but a request may wait
//! between that check and the connection (behind the rate limit, or in a process frozen
//! meanwhile); this layer, placed under the rate limit, checks again at the last moment,
//! and at every step of the request until it is answered: a process frozen while its
//! connection was being opened must not send the request once it runs again. A request
//! whose connection hangs (the network cut off) is dropped when leadership ends, not left
//! pending: the agent, stopping, waits for its writes in flight, and must not wait on
//! the network to exit.

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

    /// Whether this agent led and lost the Lease: it is stopping, and its reads end too.
    fn lost(&self) -> bool {
        self.armed.get().is_some_and(|(_, lease)| lease.is_lost())
    }

    /// `read`, ended (refused) once the Lease is lost: a read of a stopping agent (the
    /// read-back of a binding the fence refused) must not hold its exit on a connection
    /// that hangs. A standby's reads, and a leader's until it loses, go on as ever.
    fn read_until_lost<F: Future>(
        &self,
        read: F,
    ) -> impl Future<Output = Result<F::Output, Fenced>> + use<F> {
        let fence = self.clone();
        async move {
            let mut lost = std::pin::pin!(fence.lost_now());
            let mut read = std::pin::pin!(read);
            std::future::poll_fn(|cx| {
                if lost.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Err(Fenced));
                }
                read.as_mut().poll(cx).map(Ok)
            })
            .await
        }
    }

    /// Resolves once the Lease is lost; never, while unarmed.
    async fn lost_now(&self) {
        let Some((leader, _)) = self.armed.get() else {
            return std::future::pending().await;
        };
        let mut leader = leader.clone();
        while !self.lost() {
            if leader.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    pub fn is_open(&self) -> bool {
        self.armed
            .get()
            .is_none_or(|(leader, lease)| may_act(leader, lease))
    }

    /// `write`, fenced as the layer fences a client's writes: not started once the fence
    /// is closed, and dropped (unsent, if its connection has not taken it yet) as soon
    /// as the fence closes while it is under way — at the renew deadline itself, not at
    /// the next wake-up of a request that may never wake (its connection hangs). For
    /// writes of clients outside the kube stack (the extender's bind verb) too.
    pub fn guard<F: Future>(
        &self,
        write: F,
    ) -> impl Future<Output = Result<F::Output, Fenced>> + use<F> {
        let fence = self.clone();
        async move {
            let mut closed = std::pin::pin!(fence.closed());
            let mut write = std::pin::pin!(write);
            std::future::poll_fn(|cx| {
                if !fence.is_open() || closed.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Err(Fenced));
                }
                write.as_mut().poll(cx).map(Ok)
            })
            .await
        }
    }

    /// Resolves once the fence is closed: the elector says this agent no longer leads,
    /// or the renew deadline of its last renewal passes (a renewal meanwhile moves it).
    /// Never, while unarmed.
    async fn closed(&self) {
        let Some((leader, lease)) = self.armed.get() else {
            return std::future::pending().await;
        };
        let mut leader = leader.clone();
        loop {
            if !may_act(&leader, lease) {
                return;
            }
            let deadline = lease.deadline().map(tokio::time::Instant::from_std);
            let changed = async {
                // An elector gone leaves the value as it was: only the deadline is left.
                if leader.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            match deadline {
                Some(at) => tokio::select! {
                    _ = changed => {}
                    _ = tokio::time::sleep_until(at) => {}
                },
                None => changed.await,
            }
        }
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
            if self.fence.armed.get().is_none() {
                return Box::pin(self.inner.call(req));
            }
            let uri = req.uri().clone();
            let read = self.fence.read_until_lost(self.inner.call(req));
            return Box::pin(async move {
                match read.await {
                    Ok(answer) => answer,
                    Err(Fenced) => {
                        tracing::debug!(%uri, "read ended: the leader Lease is lost, the agent stops");
                        Err(S::Error::from(Fenced))
                    }
                }
            });
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

    /// Never answers, never wakes its task: a request on a connection the network cut.
    #[derive(Clone)]
    struct Hangs;
    impl Service<http::Request<()>> for Hangs {
        type Response = u16;
        type Error = BoxError;
        type Future = std::future::Pending<Result<u16, BoxError>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, _: http::Request<()>) -> Self::Future {
            std::future::pending()
        }
    }

    fn binding() -> http::Request<()> {
        http::Request::builder()
            .method(http::Method::POST)
            .uri("/api/v1/namespaces/default/pods/p/binding")
            .body(())
            .expect("request")
    }

    #[tokio::test]
    async fn a_write_whose_connection_hangs_ends_at_the_renew_deadline() {
        let fence = Fence::default();
        let (_tx, rx) = tokio::sync::watch::channel(true);
        let lease = LeaseHealth::default();
        lease.renewed_for_test(Duration::from_millis(300));
        fence.arm(rx, lease.clone());
        let mut svc = FenceLayer::new(fence).layer(Hangs);
        let sent = std::time::Instant::now();
        let pending = tokio::spawn(svc.call(binding()));
        // A renewal while it hangs moves the deadline: still under way after the first.
        tokio::time::sleep(Duration::from_millis(200)).await;
        lease.renewed_for_test(Duration::from_millis(300));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!pending.is_finished(), "ended before the renewed deadline");
        let result = tokio::time::timeout(Duration::from_secs(5), pending)
            .await
            .expect("ended by the deadline, not by an answer that never comes")
            .expect("joined");
        assert!(
            result.as_ref().is_err_and(|e| e.is::<Fenced>()),
            "{result:?}"
        );
        let took = sent.elapsed();
        assert!(
            took >= Duration::from_millis(500) && took < Duration::from_millis(1500),
            "{took:?}"
        );
    }

    #[tokio::test]
    async fn a_write_whose_connection_hangs_ends_when_the_elector_says_so() {
        let fence = Fence::default();
        let (tx, rx) = tokio::sync::watch::channel(true);
        let lease = LeaseHealth::default();
        lease.renewed_for_test(Duration::from_secs(3600));
        fence.arm(rx, lease);
        let mut svc = FenceLayer::new(fence).layer(Hangs);
        let pending = tokio::spawn(svc.call(binding()));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!pending.is_finished());
        let _ = tx.send(false);
        let result = tokio::time::timeout(Duration::from_secs(5), pending)
            .await
            .expect("ended once leadership did")
            .expect("joined");
        assert!(
            result.as_ref().is_err_and(|e| e.is::<Fenced>()),
            "{result:?}"
        );
    }

    /// The agent's own client, through a connection that hangs (the server accepts and
    /// never answers, as across a network cut): the write ends at the renew deadline.
    #[tokio::test]
    async fn a_write_of_the_agents_client_on_a_hung_connection_ends_at_the_renew_deadline() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                held.push(conn);
            }
        });
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: 'http://{addr}'}}}}]\nusers: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\ncurrent-context: x\n"
            ),
        )
        .expect("kubeconfig");
        let fence = Fence::default();
        let (_tx, rx) = tokio::sync::watch::channel(true);
        let lease = LeaseHealth::default();
        lease.renewed_for_test(Duration::from_millis(500));
        fence.arm(rx, lease);
        let client = crate::control::client::connect_fenced(Some(&path), None, 0.0, 0, &fence)
            .await
            .expect("client");
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(client, "default");
        let sent = std::time::Instant::now();
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            pods.delete("p", &Default::default()),
        )
        .await
        .expect("ended by the deadline, not by an answer that never comes");
        assert!(answer.is_err(), "{answer:?}");
        assert!(
            sent.elapsed() < Duration::from_secs(2),
            "{:?}",
            sent.elapsed()
        );
    }

    #[tokio::test]
    async fn reads_go_on_while_not_leading_and_end_once_the_lease_is_lost() {
        let fence = Fence::default();
        let (tx, rx) = tokio::sync::watch::channel(true);
        let lease = LeaseHealth::default();
        lease.renewed_for_test(Duration::from_secs(3600));
        fence.arm(rx, lease.clone());
        let mut svc = FenceLayer::new(fence).layer(Hangs);
        let get = || {
            http::Request::builder()
                .method(http::Method::GET)
                .uri("/api/v1/namespaces/default/pods/p")
                .body(())
                .expect("request")
        };
        // Not leading (a standby, or a leader past its deadline): reads go on.
        let _ = tx.send(false);
        let standing_by = tokio::spawn(svc.call(get()));
        let pending = tokio::spawn(svc.call(get()));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!pending.is_finished() && !standing_by.is_finished());
        // Lost: the one under way ends, and the next is not sent.
        lease.lost_for_test();
        let _ = tx.send(false);
        for read in [pending, standing_by] {
            let result = tokio::time::timeout(Duration::from_secs(5), read)
                .await
                .expect("ended once the Lease was lost")
                .expect("joined");
            assert!(
                result.as_ref().is_err_and(|e| e.is::<Fenced>()),
                "{result:?}"
            );
        }
        let after = tokio::time::timeout(Duration::from_secs(5), svc.call(get()))
            .await
            .expect("refused at once");
        assert!(after.is_err_and(|e| e.is::<Fenced>()));
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
