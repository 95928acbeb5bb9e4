//! The cluster bus's sockets: the listener on the bus port, the links to and from other
//! nodes, and the cron that drives the state ten times a second.
//!
//! Each link is two tasks: a reader that takes whole messages off the socket (checking the
//! "RCmb" signature and the announced length first, as Redis does, and growing its buffer
//! only as bytes arrive) and hands each to the state as one event, and a writer that sends
//! what the state queued on the link's channel. When the state frees a link it drops the
//! channel (the writer ends) and wakes the reader (which ends); a socket error frees the link
//! in the state the same way. Outbound links are created by the cron for nodes without one;
//! the connecting task sends the first PING (or MEET) once connected.
//!
//! With `tls-cluster yes` every link is TLS, as in Redis: an accepted link must present a
//! certificate the CA signed (whatever `tls-auth-clients` says, which is for clients), and an
//! outbound one uses the client context and checks the peer's certificate against the CA.
//! The handshake runs in the link's own task, under the connect timeout, before the link
//! exists in the state for an accepted one, and before its first PING for an outbound one. The
//! flag is read per link, so CONFIG SET tls-cluster applies to links made after it.

use super::codec::{self, HEADER_LEN};
use super::nodes::{Link, LinkId, Outbox, F_MEET};
use super::{get, now_ms};
use crate::state::Server;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// A bus link's socket: TCP, or TLS over it (`tls-cluster yes`).
trait BusStream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> BusStream for T {}

/// The time a bus connection may take to connect and finish its TLS handshake.
fn handshake_timeout(srv: &Server) -> Duration {
    Duration::from_millis(
        srv.config
            .int(crate::config::dir::CLUSTER_NODE_TIMEOUT)
            .clamp(100, 60_000) as u64,
    )
}

/// TLS over `tcp` for a bus link, accepting (`connect` false) or connecting; None, logged,
/// when the session cannot be made or the handshake fails or times out.
async fn start_tls(
    srv: &Server,
    tcp: TcpStream,
    connect: bool,
) -> Option<tokio_openssl::SslStream<TcpStream>> {
    let ssl = if connect {
        srv.tls.connecting()
    } else {
        srv.tls.accepting_with(crate::tls::AuthClients::Yes)
    };
    let ssl = match ssl {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("Error creating a TLS connection for the cluster bus: {e}");
            return None;
        }
    };
    let mut s = tokio_openssl::SslStream::new(ssl, tcp).ok()?;
    let handshake = async {
        if connect {
            std::pin::Pin::new(&mut s).connect().await
        } else {
            std::pin::Pin::new(&mut s).accept().await
        }
    };
    match tokio::time::timeout(handshake_timeout(srv), handshake).await {
        Ok(Ok(())) => Some(s),
        Ok(Err(e)) => {
            tracing::debug!("TLS handshake on the cluster bus failed: {e}");
            None
        }
        Err(_) => {
            tracing::debug!("TLS handshake on the cluster bus timed out");
            None
        }
    }
}

fn tls_cluster(srv: &Server) -> bool {
    srv.config.flag(crate::config::dir::TLS_CLUSTER)
}

/// Accept bus connections on `listeners`.
pub(super) fn listen(
    srv: &Arc<Server>,
    listeners: Vec<std::net::TcpListener>,
) -> Result<(), String> {
    for l in listeners {
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        let l = tokio::net::TcpListener::from_std(l).map_err(|e| e.to_string())?;
        let weak = Arc::downgrade(srv);
        tokio::spawn(async move {
            loop {
                let Ok((sock, peer)) = l.accept().await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let Some(srv) = weak.upgrade() else { return };
                // While the dataset loads, UPDATE messages could touch keys: wait.
                if srv.aof.loading() {
                    continue;
                }
                tracing::debug!("Accepting cluster node connection from {peer}");
                accepted(&srv, sock);
            }
        });
    }
    Ok(())
}

fn ip_of(addr: std::io::Result<std::net::SocketAddr>) -> String {
    addr.map(|a| match a.ip() {
        std::net::IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or_else(|| v6.to_string(), |v4| v4.to_string()),
        ip => ip.to_string(),
    })
    .unwrap_or_default()
}

fn accepted(srv: &Arc<Server>, sock: TcpStream) {
    let _ = sock.set_nodelay(true);
    let local = ip_of(sock.local_addr());
    let peer = ip_of(sock.peer_addr());
    if !tls_cluster(srv) {
        register_accepted(srv, sock, local, peer);
        return;
    }
    let srv = srv.clone();
    tokio::spawn(async move {
        if let Some(tls) = start_tls(&srv, sock, false).await {
            register_accepted(&srv, tls, local, peer);
        }
    });
}

/// An accepted link, connected (and through its TLS handshake): into the state, then its tasks.
fn register_accepted(srv: &Arc<Server>, sock: impl BusStream, local: String, peer: String) {
    let Some(cluster) = get(srv) else { return };
    let (id, outbox) = cluster.event(srv, |st, _| {
        let id = st.new_link_id();
        let (mut link, outbox) = Link::new(None, now_ms());
        link.local_ip = local;
        link.peer_ip = peer;
        st.links.insert(id, link);
        (id, outbox)
    });
    run_link(srv.clone(), id, sock, outbox);
}

/// Connect an outbound link the state created.
pub(super) fn connect(srv: Arc<Server>, id: LinkId, outbox: Outbox) {
    tokio::spawn(async move {
        let Some(cluster) = get(&srv) else { return };
        let target = cluster.read(|st| {
            st.links
                .get(&id)
                .and_then(|l| l.node)
                .map(|n| (st.node(n).ip.clone(), st.node(n).cport))
        });
        let Some((ip, cport)) = target else { return };
        let timeout = handshake_timeout(&srv);
        // A failed connect counts as a ping never answered, so the node can be flagged.
        let failed = || {
            cluster.event(&srv, |st, _| {
                if let Some(n) = st.links.get(&id).and_then(|l| l.node) {
                    let now = now_ms();
                    if let Some(node) = st.nodes.get_mut(&n) {
                        if node.ping_sent == 0 {
                            node.ping_sent = now;
                        }
                    }
                }
                st.free_link(id);
            })
        };
        let sock =
            match tokio::time::timeout(timeout, TcpStream::connect((ip.as_str(), cport))).await {
                Ok(Ok(s)) => s,
                _ => return failed(),
            };
        let _ = sock.set_nodelay(true);
        let local = ip_of(sock.local_addr());
        let peer = ip_of(sock.peer_addr());
        if !tls_cluster(&srv) {
            connected(&srv, id, sock, outbox, local, peer);
            return;
        }
        match start_tls(&srv, sock, true).await {
            Some(tls) => connected(&srv, id, tls, outbox, local, peer),
            None => failed(),
        }
    });
}

/// An outbound link, connected (and through its TLS handshake): its first PING or MEET, then
/// its tasks.
fn connected(
    srv: &Arc<Server>,
    id: LinkId,
    sock: impl BusStream,
    outbox: Outbox,
    local: String,
    peer: String,
) {
    let Some(cluster) = get(srv) else { return };
    let live = cluster.event(srv, |st, _| {
        let now = now_ms();
        let Some(link) = st.links.get_mut(&id) else {
            return false;
        };
        link.local_ip = local;
        link.peer_ip = peer;
        let Some(n) = link.node else { return false };
        let old_ping_sent = st.node(n).ping_sent;
        let kind = if st.node(n).flags & F_MEET != 0 {
            codec::MEET
        } else {
            codec::PING
        };
        st.send_ping(id, kind, now);
        if let Some(node) = st.nodes.get_mut(&n) {
            if old_ping_sent != 0 {
                node.ping_sent = old_ping_sent;
            }
            node.flags &= !F_MEET;
        }
        true
    });
    if live {
        run_link(srv.clone(), id, sock, outbox);
    }
}

/// The reader and writer tasks of a connected link.
fn run_link(srv: Arc<Server>, id: LinkId, sock: impl BusStream, mut outbox: Outbox) {
    let Some(cluster) = get(&srv) else { return };
    let handles = cluster.read(|st| {
        st.links
            .get(&id)
            .map(|l| (l.closed.clone(), l.queued.clone()))
    });
    let Some((closed, queued)) = handles else {
        return;
    };
    let (mut rd, mut wr) = tokio::io::split(sock);
    let writer_srv = srv.clone();
    tokio::spawn(async move {
        while let Some(msg) = outbox.recv().await {
            let len = msg.len();
            let r = wr.write_all(&msg).await;
            queued.fetch_sub(len, Ordering::Relaxed);
            if r.is_err() {
                if let Some(c) = get(&writer_srv) {
                    c.event(&writer_srv, |st, _| st.free_link(id));
                }
                return;
            }
        }
    });
    tokio::spawn(async move {
        let mut buf: Vec<u8> = Vec::with_capacity(HEADER_LEN);
        loop {
            let read = tokio::select! {
                r = read_message(&mut rd, &mut buf) => r,
                _ = closed.notified() => return,
            };
            let Some(cluster) = get(&srv) else { return };
            if !read {
                cluster.event(&srv, |st, _| st.free_link(id));
                return;
            }
            // A message whose length does not fit its type is dropped, the link kept.
            let Some((h, body)) = codec::decode(&buf) else {
                continue;
            };
            let keep = cluster.event(&srv, |st, deliveries| {
                st.process(id, &h, &body, now_ms(), deliveries)
            });
            if !keep {
                return;
            }
        }
    });
}

/// Read one whole message into `buf`. False on a closed socket, an I/O error, a wrong
/// signature or a length shorter than a header.
async fn read_message(rd: &mut (impl AsyncRead + Unpin), buf: &mut Vec<u8>) -> bool {
    buf.clear();
    let mut first = [0u8; 8];
    if rd.read_exact(&mut first).await.is_err() {
        return false;
    }
    let Some(total) = codec::announced_len(&first) else {
        tracing::warn!("Bad message length or signature received from Cluster bus.");
        return false;
    };
    let total = total as usize;
    if total < HEADER_LEN {
        tracing::warn!("Bad message length or signature received from Cluster bus.");
        return false;
    }
    buf.extend_from_slice(&first);
    // Grow with what arrives rather than trusting the announced length up front.
    let mut chunk = vec![0u8; 64 * 1024];
    while buf.len() < total {
        let want = (total - buf.len()).min(chunk.len());
        match rd.read(&mut chunk[..want]).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    true
}

/// The cron: Redis's clusterCron ten times a second.
pub(super) fn start_cron(srv: &Arc<Server>) {
    let weak = Arc::downgrade(srv);
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(100));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let Some(srv) = weak.upgrade() else { return };
            if srv.shutting_down.load(Ordering::Relaxed) {
                return;
            }
            if let Some(c) = get(&srv) {
                c.event(&srv, |st, _| st.cron(now_ms()));
                super::routing::redirect_blocked_clients(&srv);
            }
        }
    });
}
