//! A TCP proxy in the test process, between a client (an agent) and its API server, that
//! can cut the line the way a network partition does: once cut, connections are still
//! accepted but no byte goes through either way, and those open stay open, frozen — the
//! client's requests hang, none is refused. Healing ends the partition as a long one
//! ends: the frozen connections are closed (TCP on the far side gave up on them) and new
//! connections go through again, so a client that still acts afterwards is seen.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The line's state. `epoch` counts the cuts: a connection opened in an earlier epoch
/// than the current one lived through a cut and is closed once the line is open again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Line {
    cut: bool,
    epoch: u64,
    closed: bool,
}

/// What went through, for a test to say what the client tried.
#[derive(Debug, Default)]
struct Counters {
    accepted: AtomicU64,
    accepted_while_cut: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
}

/// Counts since the proxy started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub accepted: u64,
    /// Connections accepted while cut: held, never forwarded, closed at the heal.
    pub accepted_while_cut: u64,
    /// Bytes forwarded from the client to the server, and back.
    pub bytes_up: u64,
    pub bytes_down: u64,
}

pub struct TcpProxy {
    addr: SocketAddr,
    line: watch::Sender<Line>,
    counters: Arc<Counters>,
}

impl TcpProxy {
    /// Listens on an ephemeral loopback port and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (line, _) = watch::channel(Line {
            cut: false,
            epoch: 0,
            closed: false,
        });
        let counters = Arc::new(Counters::default());
        tokio::spawn(accept(
            listener,
            upstream,
            line.subscribe(),
            counters.clone(),
        ));
        Ok(TcpProxy {
            addr,
            line,
            counters,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// From now on nothing goes through, either way, on any connection, old or new.
    pub fn cut(&self) {
        self.line.send_modify(|l| {
            if !l.cut {
                l.cut = true;
                l.epoch += 1;
            }
        });
    }

    /// Ends the cut: connections opened before it or during it are closed, new ones are
    /// forwarded.
    pub fn heal(&self) {
        self.line.send_modify(|l| l.cut = false);
    }

    pub fn stats(&self) -> Stats {
        let c = &self.counters;
        Stats {
            accepted: c.accepted.load(Ordering::SeqCst),
            accepted_while_cut: c.accepted_while_cut.load(Ordering::SeqCst),
            bytes_up: c.bytes_up.load(Ordering::SeqCst),
            bytes_down: c.bytes_down.load(Ordering::SeqCst),
        }
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.line.send_modify(|l| l.closed = true);
    }
}

async fn accept(
    listener: TcpListener,
    upstream: SocketAddr,
    mut line: watch::Receiver<Line>,
    counters: Arc<Counters>,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            changed = line.wait_for(|l| l.closed) => {
                let _ = changed;
                return;
            }
        };
        let Ok((client, _)) = accepted else { continue };
        counters.accepted.fetch_add(1, Ordering::SeqCst);
        let now = *line.borrow();
        if now.cut {
            counters.accepted_while_cut.fetch_add(1, Ordering::SeqCst);
        }
        // One accepted while cut never matches an epoch: the heal closes it.
        let epoch = if now.cut { u64::MAX } else { now.epoch };
        tokio::spawn(connection(
            client,
            upstream,
            epoch,
            line.clone(),
            counters.clone(),
        ));
    }
}

/// Whether a connection opened in `epoch` may forward now; waits while the line is cut.
/// False once it must close: the proxy closed, or the line healed after a cut it lived
/// through.
async fn may_forward(line: &mut watch::Receiver<Line>, epoch: u64) -> bool {
    match line.wait_for(|l| l.closed || !l.cut).await {
        Ok(l) => !l.closed && l.epoch == epoch,
        Err(_) => false,
    }
}

async fn connection(
    client: TcpStream,
    upstream: SocketAddr,
    epoch: u64,
    mut line: watch::Receiver<Line>,
    counters: Arc<Counters>,
) {
    // Accepted while cut: held open, unread, until the heal closes it.
    if !may_forward(&mut line, epoch).await {
        return;
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = pump(
        client_read,
        server_write,
        epoch,
        line.clone(),
        counters.clone(),
        true,
    );
    let down = pump(server_read, client_write, epoch, line, counters, false);
    // Either side ending (or the heal) ends the connection: both halves are dropped.
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}

/// Copies `from` to `to`, chunk by chunk, forwarding nothing while the line is cut: a cut
/// that falls while a chunk is read holds it, and a heal after it drops it with the
/// connection.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    epoch: u64,
    mut line: watch::Receiver<Line>,
    counters: Arc<Counters>,
    up: bool,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if !may_forward(&mut line, epoch).await {
            return;
        }
        // Not read while cut: the client's bytes stay in its socket, as on a dead link.
        let read = tokio::select! {
            r = from.read(&mut buf) => r,
            _ = line.wait_for(|l| l.cut || l.closed) => continue,
        };
        let n = match read {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if !may_forward(&mut line, epoch).await {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
        let counter = if up {
            &counters.bytes_up
        } else {
            &counters.bytes_down
        };
        counter.fetch_add(n as u64, Ordering::SeqCst);
    }
}

/// A copy of the kubeconfig at `from`, written to `to`, whose clusters' servers are
/// `proxy` instead (same scheme, same CA: the API server's certificate names the loopback
/// address, whatever the port).
pub fn kubeconfig_through(
    from: &std::path::Path,
    proxy: SocketAddr,
    to: &std::path::Path,
) -> anyhow::Result<()> {
    let mut kc = kube::config::Kubeconfig::read_from(from)?;
    for named in &mut kc.clusters {
        if let Some(cluster) = named.cluster.as_mut()
            && let Some(server) = cluster.server.as_mut()
        {
            let scheme = server.split_once("://").map_or("https", |(s, _)| s);
            *server = format!("{scheme}://{proxy}");
        }
    }
    std::fs::write(to, mcsched_shared::yaml::to_string(&kc)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A server that echoes every byte back.
    async fn echo() -> std::io::Result<SocketAddr> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        Ok(addr)
    }

    /// What `s` answers `ping` within `wait`: Some(bytes) (empty at EOF), None when
    /// nothing came (the connection hangs).
    async fn ask(s: &mut TcpStream, wait: Duration) -> Option<Vec<u8>> {
        if s.write_all(b"ping").await.is_err() {
            return Some(Vec::new());
        }
        let mut buf = [0u8; 4];
        match tokio::time::timeout(wait, s.read_exact(&mut buf)).await {
            Ok(Ok(_)) => Some(buf.to_vec()),
            Ok(Err(_)) => Some(Vec::new()),
            Err(_) => None,
        }
    }

    #[tokio::test]
    async fn a_cut_hangs_connections_old_and_new_and_a_heal_closes_them() -> anyhow::Result<()> {
        let proxy = TcpProxy::start(echo().await?).await?;
        let wait = Duration::from_millis(300);
        let mut before = TcpStream::connect(proxy.addr()).await?;
        assert_eq!(ask(&mut before, wait).await, Some(b"ping".to_vec()));

        proxy.cut();
        // The open connection hangs: no answer, and no EOF either.
        assert_eq!(ask(&mut before, wait).await, None);
        // A new one is accepted, and hangs too.
        let mut during = TcpStream::connect(proxy.addr()).await?;
        assert_eq!(ask(&mut during, wait).await, None);
        let stats = proxy.stats();
        assert_eq!((stats.accepted, stats.accepted_while_cut), (2, 1));
        let forwarded = stats.bytes_up;

        proxy.heal();
        // Both lived through the cut: closed, what they sent meanwhile never forwarded.
        for s in [&mut before, &mut during] {
            let mut buf = [0u8; 4];
            let read = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await?;
            assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        }
        assert_eq!(proxy.stats().bytes_up, forwarded);
        // A connection opened after the heal goes through.
        let mut after = TcpStream::connect(proxy.addr()).await?;
        assert_eq!(ask(&mut after, wait).await, Some(b"ping".to_vec()));
        Ok(())
    }
}
