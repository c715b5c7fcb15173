//! What one connection may hold of the secure port: a place among a bounded number of
//! connections (in all and per client address) and no longer than the idle timeout
//! without a byte either way, as Go's `http.Server` bounds kube-scheduler's port with
//! `IdleTimeout` (and `ReadHeaderTimeout`, set on the HTTP builder in `configure`).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum_server::Server;
use axum_server::accept::Accept;
use hyper_util::rt::TokioTimer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// The limits of one listener; zero lifts a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionOptions {
    /// How long a client may take to send a request's headers (and, before its first
    /// request, to say which HTTP version it speaks).
    pub header_read_timeout: Duration,
    /// How long a connection may go without a byte read or written.
    pub idle_timeout: Duration,
    pub max_connections: usize,
    pub max_connections_per_ip: usize,
}

/// Open connections, in all and per client address.
#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    max_total: usize,
    max_per_ip: usize,
    counts: Arc<Mutex<Counts>>,
}

/// A connection's place, given back when the connection ends.
#[derive(Debug)]
pub struct Place {
    ip: IpAddr,
    counts: Arc<Mutex<Counts>>,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts.total = counts.total.saturating_sub(1);
        if let Some(n) = counts.per_ip.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.per_ip.remove(&self.ip);
            }
        }
    }
}

impl ConnectionLimits {
    pub fn new(max_total: usize, max_per_ip: usize) -> Self {
        ConnectionLimits {
            max_total,
            max_per_ip,
            counts: Arc::default(),
        }
    }

    /// A place for a connection from `ip`, or None when either limit is reached.
    pub fn admit(&self, ip: IpAddr) -> Option<Place> {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let from_ip = counts.per_ip.get(&ip).copied().unwrap_or(0);
        if (self.max_total != 0 && counts.total >= self.max_total)
            || (self.max_per_ip != 0 && from_ip >= self.max_per_ip)
        {
            return None;
        }
        counts.total += 1;
        *counts.per_ip.entry(ip).or_default() += 1;
        Some(Place {
            ip,
            counts: self.counts.clone(),
        })
    }

    pub fn open(&self) -> usize {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).total
    }
}

/// Admits a TCP connection only when it has a place (else it is closed at once, before
/// any TLS handshake) and bounds its idle time; `inner` (TLS) runs over what this
/// returns.
#[derive(Debug, Clone)]
pub struct LimitedAcceptor {
    limits: ConnectionLimits,
    idle_timeout: Duration,
}

impl LimitedAcceptor {
    pub fn new(limits: ConnectionLimits, idle_timeout: Duration) -> Self {
        LimitedAcceptor {
            limits,
            idle_timeout,
        }
    }
}

impl<S> Accept<TcpStream, S> for LimitedAcceptor {
    type Stream = Limited<TcpStream>;
    type Service = S;
    type Future = std::future::Ready<io::Result<(Self::Stream, S)>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        let admitted = stream.peer_addr().and_then(|peer: SocketAddr| {
            self.limits.admit(peer.ip()).ok_or_else(|| {
                mcsched_engine::metrics::global().connection_refused();
                io::Error::other(format!("connection limit reached; refusing {peer}"))
            })
        });
        std::future::ready(admitted.map(|place| {
            (
                Limited {
                    inner: stream,
                    _place: place,
                    idle: (!self.idle_timeout.is_zero()).then(|| {
                        (
                            self.idle_timeout,
                            Box::pin(tokio::time::sleep(self.idle_timeout)),
                        )
                    }),
                },
                service,
            )
        }))
    }
}

/// A connection holding its place; reads fail once nothing has moved either way for the
/// idle timeout (hyper then closes it).
pub struct Limited<S> {
    inner: S,
    _place: Place,
    idle: Option<(Duration, Pin<Box<Sleep>>)>,
}

impl<S> Limited<S> {
    fn moved(&mut self) {
        if let Some((timeout, sleep)) = &mut self.idle {
            sleep.as_mut().reset(Instant::now() + *timeout);
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Limited<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                this.moved();
                Poll::Ready(r)
            }
            Poll::Pending => {
                let idled = match &mut this.idle {
                    Some((_, sleep)) => sleep.as_mut().poll(cx).is_ready(),
                    None => false,
                };
                if idled {
                    Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "connection idle for longer than the idle timeout",
                    )))
                } else {
                    Poll::Pending
                }
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Limited<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if r.is_ready() {
            self.moved();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The HTTP side of the limits: hyper's header-read timeout (HTTP/1, which needs a
/// timer), and the same bound on a new connection's first request (protocol detection,
/// and HTTP/2's first headers).
pub fn configure<A>(
    server: Server<SocketAddr, A>,
    opts: &ConnectionOptions,
) -> Server<SocketAddr, A> {
    let mut server = if opts.header_read_timeout.is_zero() {
        server
    } else {
        server.first_request_timeout(opts.header_read_timeout)
    };
    let mut http1 = server.http_builder().http1();
    http1.timer(TokioTimer::new());
    http1.header_read_timeout(
        (!opts.header_read_timeout.is_zero()).then_some(opts.header_read_timeout),
    );
    server
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A plain-HTTP server answering `ok` on `/`, limited as the secure port is.
    async fn serve(opts: ConnectionOptions) -> (SocketAddr, ConnectionLimits) {
        let limits = ConnectionLimits::new(opts.max_connections, opts.max_connections_per_ip);
        let handle = axum_server::Handle::new();
        let server = axum_server::bind("127.0.0.1:0".parse().expect("address"))
            .acceptor(LimitedAcceptor::new(limits.clone(), opts.idle_timeout))
            .handle(handle.clone());
        let server = configure(server, &opts);
        let app = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
        tokio::spawn(server.serve(app.into_make_service()));
        let addr = handle.listening().await.expect("listening");
        (addr, limits)
    }

    fn opts() -> ConnectionOptions {
        ConnectionOptions {
            header_read_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            max_connections: 0,
            max_connections_per_ip: 0,
        }
    }

    const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: test\r\n\r\n";

    /// Sends one request and reads its answer, keeping the connection open.
    async fn served(conn: &mut TcpStream) -> bool {
        if conn.write_all(REQUEST).await.is_err() {
            return false;
        }
        let mut buf = [0u8; 512];
        matches!(conn.read(&mut buf).await, Ok(n) if n > 0 && buf[..n].starts_with(b"HTTP/1.1 200"))
    }

    /// Reads until the server closes the connection (an error counts as closed); the
    /// outer timeout only keeps a broken test from hanging.
    async fn closed_by_server(conn: &mut TcpStream) -> bool {
        let mut buf = [0u8; 512];
        tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => return true,
                    Ok(_) => {}
                }
            }
        })
        .await
        .unwrap_or(false)
    }

    #[tokio::test]
    async fn connections_beyond_the_limit_are_closed_unserved() {
        let (addr, limits) = serve(ConnectionOptions {
            max_connections: 2,
            ..opts()
        })
        .await;
        let mut a = TcpStream::connect(addr).await.expect("a");
        let mut b = TcpStream::connect(addr).await.expect("b");
        assert!(served(&mut a).await && served(&mut b).await);
        let mut c = TcpStream::connect(addr).await.expect("c");
        assert!(!served(&mut c).await, "a third connection is not served");
        assert!(closed_by_server(&mut c).await);
        assert_eq!(limits.open(), 2);
        // A place given back is a place for the next connection.
        drop(a);
        while limits.open() == 2 {
            tokio::task::yield_now().await;
        }
        let mut d = TcpStream::connect(addr).await.expect("d");
        assert!(served(&mut d).await);
    }

    #[test]
    fn one_address_cannot_take_every_place() {
        let limits = ConnectionLimits::new(10, 2);
        let attacker: IpAddr = "10.0.0.9".parse().expect("ip");
        let kubelet: IpAddr = "10.0.0.1".parse().expect("ip");
        let held: Vec<Place> = (0..2).filter_map(|_| limits.admit(attacker)).collect();
        assert_eq!(held.len(), 2);
        assert!(limits.admit(attacker).is_none(), "over its own limit");
        assert!(
            limits.admit(kubelet).is_some(),
            "another address still gets in"
        );
        drop(held);
        assert!(limits.admit(attacker).is_some(), "places are given back");
    }

    #[tokio::test]
    async fn a_client_slow_to_send_its_headers_is_disconnected() {
        let (addr, _) = serve(ConnectionOptions {
            header_read_timeout: Duration::from_millis(200),
            ..opts()
        })
        .await;
        let mut conn = TcpStream::connect(addr).await.expect("connect");
        assert!(served(&mut conn).await, "a prompt request is served");
        conn.write_all(b"GET / HTTP/1.1\r\nHost: te")
            .await
            .expect("part of the headers");
        assert!(closed_by_server(&mut conn).await);
    }

    #[tokio::test]
    async fn an_idle_connection_is_closed() {
        let (addr, limits) = serve(ConnectionOptions {
            idle_timeout: Duration::from_millis(200),
            max_connections: 1,
            ..opts()
        })
        .await;
        let mut conn = TcpStream::connect(addr).await.expect("connect");
        assert!(served(&mut conn).await);
        assert!(closed_by_server(&mut conn).await);
        while limits.open() != 0 {
            tokio::task::yield_now().await;
        }
    }
}
