//! One client connection: reading, pipelining, replying, and the client's state.
//!
//! The loop reads whatever the socket has into the query buffer, executes every complete
//! request in it in order, renders each reply into one output buffer, and writes that buffer
//! with a single write: a pipeline of N commands costs one read and one write. What the
//! socket does not take stays in the buffer and is written as the socket drains, while the
//! loop goes on reading and running the client's commands, as Redis does: a client that
//! pipelines without reading makes its output grow until `client-output-buffer-limit` closes
//! it (`crate::obuf`). A protocol
//! error gets Redis's error reply and closes the connection. A blocking command parks the
//! client (the rest of its pipeline waits, as in Redis) until it is served, times out, is
//! unblocked, or the client goes away.

use crate::client::ReplyMode;
/// The client a connection serves, named here for code outside the crate (the fuzz targets
/// drive the dispatcher with one).
pub use crate::client::{Client, ClientInfo};
use crate::clock::unix_ms;
use crate::commands::{dispatch_with, Outcome};
use crate::config::dir;
use crate::keyspace::Guards;
use crate::net::ClientSocket;
use crate::protocol::{parse_request_resuming, ParseLimits, Parsed, Partial, Reply};
use crate::state::Server;
use crate::takeover::Resume;
use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

/// Serve one TCP connection until it closes; `tls` is the session of a client of the TLS
/// port, whose handshake is done first. The socket is set up here, before the task starts,
/// and the task is `serve_socket` itself: each layer of future between the runtime and
/// `serve_client` is entered on every wake-up.
pub fn handle(
    srv: Arc<Server>,
    sock: TcpStream,
    peer: SocketAddr,
    tls: Option<openssl::ssl::Ssl>,
) -> impl std::future::Future<Output = ()> {
    let sock = match tls {
        None => ClientSocket::new(sock),
        Some(ssl) => ClientSocket::new_tls(sock, ssl),
    };
    if let Ok(s) = &sock {
        s.set_keepalive(srv.config.int(dir::TCP_KEEPALIVE));
    }
    serve_socket(srv, sock, peer.to_string())
}

/// A client of the Unix socket at `path`; Redis shows its address as `path:0`.
pub fn handle_unix(
    srv: Arc<Server>,
    sock: tokio::net::UnixStream,
    path: String,
) -> impl std::future::Future<Output = ()> {
    serve_socket(srv, ClientSocket::new_unix(sock), format!("{path}:0"))
}

async fn serve_socket(srv: Arc<Server>, sock: std::io::Result<ClientSocket>, peer: String) {
    let sock = match sock {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!("dropping connection from {peer}: {e}");
            return;
        }
    };
    // Shared with the park hook that writes replies left for the worker's turn.
    let sock = Arc::new(sock);
    let id = srv.next_client_id();
    let laddr = sock.local_addr();
    let now = unix_ms();
    let info = Arc::new(ClientInfo::new(id, peer, laddr, now));
    let maxclients = srv.config.int(dir::MAXCLIENTS).max(1) as usize;
    let admitted = {
        let mut clients = srv.clients.lock();
        if clients.len() >= maxclients {
            false
        } else {
            clients.insert(id, info.clone());
            true
        }
    };
    if !admitted {
        srv.stats
            .rejected_connections
            .fetch_add(1, Ordering::Relaxed);
        // A TLS client refused here is closed before its handshake, so it reads no reason
        // (an I/O error), as from Redis.
        if !sock.is_tls() {
            let _ = sock
                .write_all(b"-ERR max number of clients reached\r\n")
                .await;
        }
        return;
    }
    // A TLS client counts from its accept, as in Redis; it is served once its handshake is
    // done.
    if let Err(e) = sock.handshake().await {
        tracing::debug!(
            "Error accepting a client connection: {e} (addr={})",
            info.addr
        );
        srv.clients.lock().remove(&id);
        return;
    }
    if crate::net::protected_mode_refuses(
        srv.config.flag(dir::PROTECTED_MODE),
        crate::commands::acl::default_user_nopass(&srv),
        &info.addr,
    ) {
        let _ = sock
            .write_all(crate::net::PROTECTED_MODE_DENIED.as_bytes())
            .await;
        srv.stats
            .rejected_connections
            .fetch_add(1, Ordering::Relaxed);
        srv.clients.lock().remove(&id);
        return;
    }
    srv.stats.connections.fetch_add(1, Ordering::Relaxed);
    let mut client = Client::new(id, info.clone());
    client.cluster.on_tls = sock.is_tls();
    client.set_user(srv.acl.default_user());
    client.authenticated = crate::commands::acl::starts_authenticated(&srv);
    *info.socket_fd.lock() = Some(sock.raw_fd());
    if let Err(e) = serve_client(&srv, &sock, &mut client).await {
        tracing::debug!("client {id} closed: {e}");
    }
    // Before `sock` can be dropped (and its descriptor reused).
    *info.socket_fd.lock() = None;
    // Its buffers went with serve_client; what waits in its mailbox goes now, before a
    // replica leaves the list of replicas whose buffers `maxmemory` leaves out.
    info.push.discard();
    // The mailbox's signal keeps the task's waker, and the task holds `info`: let go of it.
    info.push.ready.forget_waker();
    info.connection_freed();
    if client.repl.is_replica {
        if let Some(r) = srv.repl.find(id) {
            tracing::info!("Connection with replica {} lost.", r.describe());
        }
        crate::takeover::replica_closed(&srv, id);
    }
    crate::commands::tx::unwatch_all(&srv, &mut client);
    srv.pubsub.unsubscribe_all(&info, &mut client.subs);
    srv.pubsub.remove_monitor(&info);
    srv.tracking.disable(id);
    srv.clients.lock().remove(&id);
    // Last: whatever recorded the client until now (a publisher, the cron's snapshot) leaves
    // the total with it, and nothing can record it again.
    info.forget_memory();
}

async fn serve_client(
    srv: &Arc<Server>,
    sock: &Arc<ClientSocket>,
    client: &mut Client,
) -> std::io::Result<()> {
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut out: Vec<u8> = Vec::with_capacity(crate::obuf::REPLY_CHUNK);
    // How much of `out` the socket has taken (the rest waits for it to drain).
    let mut sent = 0usize;
    let mut soft_clock = crate::obuf::SoftClock::default();
    // Requests parsed from the buffer and not yet run (see the loop below).
    let mut pending: std::collections::VecDeque<Vec<Bytes>> = std::collections::VecDeque::new();
    // Progress through a long request that has not fully arrived yet.
    let mut partial = Partial::default();
    let info = client.info.clone();
    let mut guards = Guards::new(&srv.keyspace);
    let mut qb = crate::querybuf::QueryBuf::new();
    // Replies left for the worker's write turn (see ParkedReplies); `is_parked` while they
    // are the park hook's, until this loop takes them back.
    let parked = ParkedGuard(Arc::new(ParkedReplies {
        srv: srv.clone(),
        sock: sock.clone(),
        info: info.clone(),
        state: Mutex::new(Parked::default()),
    }));
    let mut is_parked = false;
    loop {
        // The cron asked for the query buffer check (see querybuf) and woke this connection
        // if it was waiting for input; the check is made when due by the connection's own
        // record of its input.
        if info.qbuf_check.load(Ordering::Relaxed) {
            info.qbuf_check.store(false, Ordering::Relaxed);
            if qb
                .next_check(&buf)
                .is_some_and(|at| at <= std::time::Instant::now())
            {
                qb.check(&mut buf);
            }
        }
        if !is_parked {
            shrink_out_if_asked(&info, &mut out, sent);
        }
        // What is left is the start of a request: shown as Redis shows what it has not parsed
        // yet, with room for all of a big argument once its header is read (as Redis sizes its
        // buffer for it), or the room of an ordinary read.
        let progress = if buf.is_empty() {
            crate::protocol::Progress::default()
        } else {
            crate::protocol::progress(&buf, &partial)
        };
        match progress.bulk {
            Some((start, len)) if len >= crate::querybuf::BIG_ARG => {
                qb.for_big_argument(&mut buf, start + len + 2)
            }
            _ => qb.before_read(&mut buf),
        }
        info.qbuf
            .store(buf.len() - progress.consumed, Ordering::Relaxed);
        info.qbuf_free
            .store(buf.capacity() - buf.len(), Ordering::Relaxed);
        info.qbuf_mem.store(buf.capacity(), Ordering::Relaxed);
        info.argv_mem.store(progress.argv_bytes, Ordering::Relaxed);
        // The client's memory as it waits (its replies written or waiting, its request in
        // progress): an eviction may take this very client, which the wait then hears.
        crate::client_evict::note(srv, &info);
        let len_before = buf.len();
        // `timeout N` closes a client idle for N seconds (not one inside MULTI, as Redis).
        let idle_limit = srv.config.hot.timeout.load(Ordering::Relaxed);
        // Replicas are not idle clients: they read the stream (Redis exempts them too).
        let idle_applies = idle_limit > 0 && client.multi.is_none() && !client.repl.is_replica;
        let waiting_output = sent < out.len();
        let woken = if !waiting_output && !idle_applies {
            // The common wait, for input or for something pushed to this client, polled in
            // one function: the `select!` below builds, polls and drops six futures on every
            // request, which at one request per wake-up cost more than the read itself.
            // Same order as there: what was pushed first, then the socket.
            std::future::poll_fn(|cx| {
                if info.push.ready.poll_wait(cx).is_ready() {
                    return std::task::Poll::Ready(Woken::Pushed);
                }
                sock.poll_read_as_sized(cx, &mut buf).map(Woken::Read)
            })
            .await
        } else {
            let idle = async {
                if idle_applies {
                    tokio::time::sleep(Duration::from_secs(idle_limit as u64)).await
                } else {
                    std::future::pending::<()>().await
                }
            };
            let soft_deadline = if waiting_output {
                soft_clock.deadline(obuf_limit(srv, client))
            } else {
                None
            };
            let soft_check = async {
                match soft_deadline {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                // Fixed order: the branches other than the read are ready only when woken, so
                // the read is not starved, and no random number is drawn per read.
                biased;
                _ = info.push.ready.wait(), if !waiting_output => Woken::Pushed,
                // While replies wait for the socket the push branch is off: a kill is heard
                // here.
                _ = info.kill.notified(), if waiting_output => return Ok(()),
                r = sock.write_some(&out[sent..]), if waiting_output => {
                    // The socket took more of the pending replies.
                    wrote(srv, &info, &mut out, &mut sent, r?);
                    if sent == out.len() {
                        send(srv, sock, &info, &mut out, &mut sent)?;
                    }
                    continue;
                }
                _ = soft_check => {
                    if over_limit(srv, client, &mut soft_clock, &out, sent) {
                        return Ok(());
                    }
                    continue;
                }
                r = sock.read_buf_as_sized(&mut buf) => Woken::Read(r),
                _ = idle => {
                    tracing::debug!("closing client {}: idle for {idle_limit} s", client.id);
                    return Ok(());
                }
            }
        };
        let n = match woken {
            Woken::Read(r) => r?,
            Woken::Pushed => {
                // A kill wakes this branch too (`ClientInfo::kill`).
                if info.killed.load(Ordering::SeqCst) {
                    return Ok(());
                }
                if std::mem::take(&mut is_parked) && parked.0.take_back(&mut out, &mut sent)? {
                    // The hook left them (a full socket, or an fsync to wait for).
                    srv.aof.wait_durable(srv.aof.last_seq()).await;
                }
                // Messages published to this client while it waited for input (while replies
                // wait for the socket, the messages wait in the mailbox, where the pubsub
                // limit applies to them).
                drain_output(srv, &info, &mut out);
                send(srv, sock, &info, &mut out, &mut sent)?;
                continue;
            }
        };
        qb.after_read(&buf, len_before, n);
        if std::mem::take(&mut is_parked) {
            // What the hook did not write goes first, before this read's replies.
            parked.0.take_back(&mut out, &mut sent)?;
            shrink_out_if_asked(&info, &mut out, sent);
        }
        // While this read's commands run, CLIENT LIST shows the buffer as read (the running
        // command included), as Redis shows it before trimming what it processed.
        info.qbuf.store(buf.len(), Ordering::Relaxed);
        info.qbuf_free
            .store(buf.capacity() - buf.len(), Ordering::Relaxed);
        info.qbuf_mem.store(buf.capacity(), Ordering::Relaxed);
        // A read that takes the clients over `maxmemory-clients` evicts before its commands
        // run (this client, if it is the biggest).
        crate::client_evict::note(srv, &info);
        // This read's first request runs after any request that arrived just before it on
        // another connection (crate::arrival); later ones in the read follow it anyway.
        let mut arrival = sock.arrival_ticket();
        if n == 0 || info.killed.load(Ordering::Relaxed) {
            return Ok(());
        }
        srv.stats.net_input_bytes.add(n as u64);
        srv.stats.reads_processed.add(1);
        let limit = srv
            .config
            .hot
            .query_buffer_limit
            .load(Ordering::Relaxed)
            .max(1024) as usize;
        if buf.len() > limit {
            tracing::warn!(
                "closing client {}: query buffer over client-query-buffer-limit",
                client.id
            );
            return Ok(());
        }
        let mut close = false;
        let mut proto_err = None;
        // Commands this read ran: a pipeline's replies keep their buffer room (OUT_KEEP_MAX).
        let mut ran = 0usize;
        // The longest argument of 32 KiB or more this read completed (see querybuf).
        let mut big_arg = 0usize;
        loop {
            if pending.is_empty() && proto_err.is_none() {
                // Parse every complete request of the read up front (one at a time before
                // AUTH: the parse limits depend on it), so a batch can be looked at as a whole
                // before it runs in order.
                let limits = ParseLimits {
                    max_bulk_len: srv.config.hot.proto_max_bulk_len.load(Ordering::Relaxed),
                    authenticated: client.authenticated,
                };
                loop {
                    match parse_request_resuming(&mut buf, &limits, &mut partial) {
                        Ok(Parsed::Command(args)) => {
                            if let Some(big) = args
                                .iter()
                                .map(|a| a.len())
                                .filter(|&l| l >= crate::querybuf::BIG_ARG)
                                .max()
                            {
                                big_arg = big_arg.max(big);
                            }
                            pending.push_back(args);
                            if !client.authenticated || pending.len() >= MAX_BATCH {
                                break;
                            }
                        }
                        Ok(Parsed::Empty) => {}
                        Ok(Parsed::Incomplete) => break,
                        Err(e) => {
                            proto_err = Some(e);
                            break;
                        }
                    }
                }
                if pending.len() > 1 && client.multi.is_none() {
                    crate::commands::warm_batch(srv, client.db, pending.make_contiguous());
                }
            }
            let Some(args) = pending.pop_front() else {
                if let Some(e) = proto_err.take() {
                    Reply::Error(format!("ERR {}", e.0)).encode(client.resp, &mut out);
                    close = true;
                }
                break;
            };
            if crate::commands::acl::user_revoked(client) {
                // Its user was deleted (ACL DELUSER / LOAD): Redis disconnects such clients.
                return Ok(());
            }
            if crate::net::is_cross_protocol(&args[0]) {
                // Replies still unsent are dropped with the connection, as Redis does.
                crate::net::warn_cross_protocol();
                return Ok(());
            }
            let argv_bytes: usize = args.iter().map(|a| a.len()).sum();
            info.argv_mem.store(argv_bytes, Ordering::Relaxed);
            info.argv_held.store(
                argv_bytes + args.len() * std::mem::size_of::<Bytes>(),
                Ordering::Relaxed,
            );
            client.output_pending = sent < out.len();
            if client.lua_debug.is_some()
                && crate::commands::scripting::may_start_debugging(&args[0])
            {
                // A debugging EVAL talks to the socket itself: what this connection owes the
                // client goes out first, and what it has read but not run becomes the
                // debugger's input (the connection closes after the session).
                flush(srv, sock, &info, &mut out, &mut sent).await?;
                let mut input = Vec::new();
                for request in pending.drain(..) {
                    crate::protocol::encode_command(&mut input, &request);
                }
                input.extend_from_slice(&buf);
                buf.clear();
                client.debug_io = Some(crate::commands::scripting::DebugIo {
                    sock: sock.clone(),
                    input,
                });
            }
            if let Some(ticket) = &arrival {
                ticket.wait_turn();
            }
            let Outcome {
                reply,
                block,
                close: mut quit,
                postponed,
                unblock_stats,
                takeover,
                mut extras,
            } = dispatch_with(srv, client, args, &mut guards);
            arrival = None;
            ran += 1;
            if let Some(args) = postponed {
                // Clients are paused: send what the pipeline produced so far, wait for the
                // pause to change, then submit the request again (it may wait again).
                flush(srv, sock, &info, &mut out, &mut sent).await?;
                info.postponed.store(true, Ordering::Relaxed);
                let woken = srv.pause.wait_change(&info.kill).await;
                info.postponed.store(false, Ordering::Relaxed);
                if !woken || info.killed.load(Ordering::Relaxed) {
                    return Ok(());
                }
                pending.push_front(args);
                continue;
            }
            let served_after_block = block.is_some();
            // Work the command left for the connection (it needs the socket or a wait).
            let reply = match takeover {
                None => reply,
                Some(t) => {
                    flush(srv, sock, &info, &mut out, &mut sent).await?;
                    match crate::takeover::run(srv, sock, client, t).await {
                        Resume::KeepReply => reply,
                        Resume::Reply(r) => r,
                        Resume::Close => return Ok(()),
                    }
                }
            };
            let reply = match block {
                Some(b) => {
                    // Send what the pipeline produced so far, then wait.
                    flush(srv, sock, &info, &mut out, &mut sent).await?;
                    match wait_blocked(srv, sock, client, b, &mut buf).await? {
                        Some((r, close_after_reply)) => {
                            quit |= close_after_reply;
                            if let Some(stats) = unblock_stats {
                                crate::commands::after_unblocked(srv, client, stats, &r);
                            }
                            r
                        }
                        None => return Ok(()),
                    }
                }
                None => reply,
            };
            info.argv_mem.store(0, Ordering::Relaxed);
            info.argv_held.store(0, Ordering::Relaxed);
            if reply_over_hard_limit(srv, client, &mut soft_clock, &reply, out.len() - sent) {
                return Ok(());
            }
            // Messages this command published to its own client go before its reply; a blocked
            // command's reply goes first, as Redis runs it for the client when it is served
            // (what the serving caused, such as an invalidation of the key it moved to, follows;
            // what came while it waited was sent then).
            if served_after_block {
                emit(srv, client, &reply, extras.push, &mut out);
                drain_output(srv, &info, &mut out);
            } else {
                drain_output(srv, &info, &mut out);
                emit(srv, client, &reply, extras.push, &mut out);
            }
            out.append(&mut extras.after);
            // The batch's replies accumulate as in Redis (which writes them after the
            // batch): a batch whose replies exceed the hard limit gets none of them. The
            // limit is checked before the replies count as the client's memory: a client
            // closed by it is never a reason to evict another (Redis's order).
            let quitting = quit || info.killed.load(Ordering::Relaxed);
            if !quitting && over_limit(srv, client, &mut soft_clock, &out, sent) {
                return Ok(());
            }
            // The batch's replies are this client's memory as they accumulate: client eviction,
            // before the next command of any client, must see them (Redis counts each reply as
            // it is added), or the memory they take evicts keys instead.
            note_pending(&info, &out, sent);
            client.publish_state_memory();
            crate::client_evict::note(srv, &info);
            if quitting || info.killed.load(Ordering::Relaxed) {
                close = true;
                break;
            }
        }
        if close {
            if info.killed.load(Ordering::Relaxed) {
                // Killed (CLIENT KILL, client eviction): dropped without its pending output,
                // as Redis frees such a client.
                return Ok(());
            }
            // Gone for everyone else before its last reply can be read, as Redis frees such a
            // client before it runs another client's command: an invalidation sent after the
            // client has read its QUIT's +OK finds its redirection broken, not this client.
            srv.clients.lock().remove(&info.id);
            srv.tracking.disable(info.id);
            flush(srv, sock, &info, &mut out, &mut sent).await?;
            sock.shutdown();
            return Ok(());
        }
        let pipelined = ran > 1;
        if info.pipelined.load(Ordering::Relaxed) != pipelined {
            info.pipelined.store(pipelined, Ordering::Relaxed);
        }
        if sent < out.len() {
            if crate::util::write_turn::deferring() && !srv.aof.replies_wait_for_fsync() {
                // Left for the park hook to write; this loop goes back to waiting for input.
                parked.0.leave(&mut out, &mut sent);
                is_parked = true;
            } else {
                if crate::util::write_turn::enabled() {
                    crate::util::write_turn::WriteTurn::default().await;
                    if info.killed.load(Ordering::Relaxed) {
                        return Ok(());
                    }
                }
                // Under appendfsync always, nothing is acknowledged before it is on disk.
                srv.aof.wait_durable(srv.aof.last_seq()).await;
                send(srv, sock, &info, &mut out, &mut sent)?;
            }
        }
        if big_arg > 0 {
            qb.after_big_arg(&mut buf, big_arg);
        }
    }
}

/// What ended a connection's wait for input in `serve_client` (the other outcomes of its
/// `select!` are handled in their branches).
enum Woken {
    /// Something was pushed to the client (a message, a kill, parked replies to finish).
    Pushed,
    /// The socket read this many bytes (0: the peer closed).
    Read(std::io::Result<usize>),
}

/// A connection's replies left for its worker's write turn (see `crate::util::write_turn`):
/// the park hook writes them with what the connection would have written them with, so the
/// connection's task is not polled again just to write. The connection takes the buffer back
/// when it next runs (before it adds anything to it), with whatever the hook did not write.
struct ParkedReplies {
    srv: Arc<Server>,
    sock: Arc<ClientSocket>,
    info: Arc<ClientInfo>,
    state: Mutex<Parked>,
}

#[derive(Default)]
struct Parked {
    /// The connection's output buffer while parked (an empty one otherwise).
    out: Vec<u8>,
    sent: usize,
    /// In the thread's list and not yet written.
    queued: bool,
    /// The write failed: the connection ends with this error.
    error: Option<std::io::Error>,
}

impl ParkedReplies {
    /// Hand the pending replies (`out` from `sent` on) to the worker's turn; `out` is left
    /// empty.
    fn leave(self: &Arc<Self>, out: &mut Vec<u8>, sent: &mut usize) {
        {
            let mut st = self.state.lock();
            debug_assert!(st.out.is_empty() && !st.queued);
            std::mem::swap(out, &mut st.out);
            st.sent = std::mem::take(sent);
            st.queued = true;
        }
        crate::util::write_turn::defer(self.clone());
    }

    /// Take the buffer back into the empty `out`: true if replies in it are still unsent.
    fn take_back(&self, out: &mut Vec<u8>, sent: &mut usize) -> std::io::Result<bool> {
        let mut st = self.state.lock();
        st.queued = false;
        if let Some(e) = st.error.take() {
            return Err(e);
        }
        debug_assert!(out.is_empty() && *sent == 0);
        std::mem::swap(out, &mut st.out);
        *sent = std::mem::take(&mut st.sent);
        Ok(*sent < out.len())
    }
}

impl crate::util::write_turn::DeferredWrite for ParkedReplies {
    fn write_now(&self) {
        let mut st = self.state.lock();
        if !std::mem::take(&mut st.queued) || self.info.killed.load(Ordering::Relaxed) {
            // Taken back already, or a killed client whose output is dropped with it.
            return;
        }
        let Parked {
            out, sent, error, ..
        } = &mut *st;
        // Under everysec / no the log is handed to the kernel first, as before any reply; an
        // fsync to wait for (the policy changed since) is the connection's to wait for.
        if !self.srv.aof.durable_now(self.srv.aof.last_seq()) {
            self.info.push.ready.notify();
            return;
        }
        let written = send(&self.srv, &self.sock, &self.info, out, sent);
        // What went out no longer counts as the client's (an eviction waits for the next
        // command or the cron).
        self.info.record_memory();
        match written {
            Ok(()) if *sent >= out.len() => {}
            // The socket is full: the connection waits for it to drain.
            Ok(()) => self.info.push.ready.notify(),
            Err(e) => {
                *error = Some(e);
                self.info.push.ready.notify();
            }
        }
    }
}

/// Drops what is parked when the connection ends (its replies go with it, as an ending
/// connection's pending output does).
struct ParkedGuard(Arc<ParkedReplies>);

impl Drop for ParkedGuard {
    fn drop(&mut self) {
        let mut st = self.0.state.lock();
        st.queued = false;
        st.out = Vec::new();
    }
}

/// The cron's visit of every client's query and output buffers (Redis's
/// clientsCronResizeQueryBuffer and clientsCronResizeOutputBuffer): each connection whose
/// buffer may be given back or shrunk is asked to check it.
pub(crate) fn request_buffer_checks(srv: &Server) {
    let now = unix_ms();
    for info in srv.clients.lock().values() {
        let idle = now - info.last_active_ms.load(Ordering::Relaxed);
        let qbuf = info.qbuf.load(Ordering::Relaxed);
        let free = info.qbuf_free.load(Ordering::Relaxed);
        if crate::querybuf::wants_check(qbuf, free, idle)
            && !info.qbuf_check.swap(true, Ordering::Relaxed)
        {
            info.push.ready.notify();
        }
        // The reply buffer is resized as Redis resizes it (`obuf::ReplyBuf`); room kept past
        // it that the client's batches since the last visit needed less than half of (none at
        // all for an idle client) is asked back.
        let pending = info.out_pending.load(Ordering::Relaxed);
        let keep = info
            .reply_buf
            .cron(now, pending)
            .unwrap_or(info.reply_buf.size());
        let held = info.out_held.load(Ordering::Relaxed);
        let peak = info.out_peak.swap(0, Ordering::Relaxed);
        if held > keep
            && peak * 2 < held
            && pending == 0
            && !info.out_check.swap(true, Ordering::Relaxed)
        {
            info.push.ready.notify();
        }
    }
}

/// Write `reply` as the client's reply mode allows; `pushed` (subscribe confirmations) is
/// written even when replies are silenced.
fn emit(srv: &Server, client: &mut Client, reply: &Reply, pushed: bool, out: &mut Vec<u8>) {
    // A replica reads the stream, not replies: one that sent a command producing a reply is
    // disconnected, as Redis disconnects it (the reply would corrupt its stream).
    if client.repl.is_replica {
        if !matches!(reply, Reply::NoReply) {
            let cmd = *client.info.last_cmd.lock();
            if let Reply::Error(e) = reply {
                tracing::warn!(
                    "== CRITICAL == This master is sending an error to its replica: '{}' after processing the command '{cmd}'",
                    e.trim_start_matches('-')
                );
            }
            tracing::warn!(
                "Replica generated a reply to command '{cmd}', disconnecting it: {}",
                client.info.describe()
            );
            client.info.kill();
        }
        return;
    }
    if !std::mem::take(&mut client.error_reply_counted) {
        srv.errorstats.count_reply(reply);
    }
    match client.reply_mode {
        ReplyMode::On => reply.encode(client.resp, out),
        ReplyMode::Off => {
            if pushed {
                reply.encode(client.resp, out)
            }
        }
        ReplyMode::Skip => {
            if pushed {
                reply.encode(client.resp, out)
            }
            client.reply_mode = ReplyMode::On
        }
        ReplyMode::SkipNext => {
            if pushed {
                reply.encode(client.resp, out)
            }
            client.reply_mode = ReplyMode::Skip
        }
    }
}

/// Most requests parsed ahead of running them (a pipelined read holds at most this many at
/// once; the rest stay in the read buffer).
const MAX_BATCH: usize = 256;

/// The `client-output-buffer-limit` of the client's class.
fn obuf_limit(srv: &Server, client: &Client) -> crate::config::ObufLimit {
    // A replica's limit applies to the replication buffer it references (`state::repl`); its
    // own buffer holds at most a turn's copy of it.
    if client.repl.is_replica {
        return crate::config::ObufLimit::default();
    }
    srv.config.hot.obuf.classes[client.obuf_class()].get()
}

/// True, after logging, if the client's pending output (`out` past `sent`, and its queued
/// pushes) is over its class's limit; the connection is then closed without it, as Redis
/// closes such a client.
fn over_limit(
    srv: &Server,
    client: &Client,
    soft_clock: &mut crate::obuf::SoftClock,
    out: &[u8],
    sent: usize,
) -> bool {
    over_limit_with(srv, client, soft_clock, out.len() - sent)
}

/// True, after logging, if the big bulk `reply` alone takes the client's pending output over
/// its class's hard limit: the client is closed without copying it (as it would be right
/// after), and so is gone at once. A client that runs GET of a value bigger than its limit
/// is then never seen with it by others (CLIENT LIST, client eviction: unit/client-eviction,
/// "avoid client eviction when client is freed by output buffer limit").
fn reply_over_hard_limit(
    srv: &Server,
    client: &Client,
    soft_clock: &mut crate::obuf::SoftClock,
    reply: &Reply,
    pending: usize,
) -> bool {
    let (Reply::Bulk(b) | Reply::Raw(b)) = reply else {
        return false;
    };
    if b.len() < crate::commands::BIG_REPLY
        || client.reply_mode != ReplyMode::On
        || client.repl.is_replica
    {
        return false;
    }
    let hard = obuf_limit(srv, client).hard;
    hard > 0
        && (pending + b.len()) as u64 >= hard
        && over_limit_with(srv, client, soft_clock, pending + b.len())
}

/// [`over_limit`] with `pending` bytes of replies waiting in the output buffer.
fn over_limit_with(
    srv: &Server,
    client: &Client,
    soft_clock: &mut crate::obuf::SoftClock,
    pending: usize,
) -> bool {
    let limit = obuf_limit(srv, client);
    if limit == crate::config::ObufLimit::default() {
        return false;
    }
    let pending = (pending + client.info.push.queued().0) as u64;
    if soft_clock.over(pending, limit, std::time::Instant::now()) {
        client.close_for_output_limit();
        return true;
    }
    false
}

/// The most output buffer room a pipelining client keeps between batches of replies (a client
/// whose last read held more than one command), past its reply buffer (`obuf::ReplyBuf`). A
/// client that pipelines big replies (LRANGE_300 at P=16: 53 KB a batch) keeps its room while
/// it goes on doing so: given back after every batch, the buffer grew again by doubling for the next one
/// (16 -> 32 -> 64 KiB, copying what it held each time), a fifth of the server's time. The
/// room stays counted as the client's (`out_held`), and the cron asks for it back once the
/// client's recent batches need less than half of it (see [`request_buffer_checks`]), as
/// Redis 7.0 resizes a client's reply buffer to its recent peak. Room past this is given back
/// at once, as before.
const OUT_KEEP_MAX: usize = 1 << 20;

/// Give back output buffer room the cron found unneeded (`out_check`), once nothing in the
/// buffer waits for the socket; the room kept is the client's recent peak, at least its reply
/// buffer.
fn shrink_out_if_asked(info: &ClientInfo, out: &mut Vec<u8>, sent: usize) {
    if !info.out_check.load(Ordering::Relaxed) || sent < out.len() {
        return;
    }
    info.out_check.store(false, Ordering::Relaxed);
    let keep = info
        .out_peak
        .load(Ordering::Relaxed)
        .max(info.reply_buf.size());
    if out.capacity() > keep {
        out.shrink_to(keep);
        note_pending(info, out, sent);
    }
}

/// Account for `n` more bytes of `out` taken by the socket.
fn wrote(srv: &Server, info: &ClientInfo, out: &mut Vec<u8>, sent: &mut usize, n: usize) {
    *sent += n;
    srv.stats.net_output_bytes.add(n as u64);
    srv.stats.writes_processed.add(1);
    if *sent == out.len() {
        let keep = info.pipelined.load(Ordering::Relaxed);
        let room = info.reply_buf.size();
        if keep && out.len() > room {
            info.out_peak.fetch_max(out.len(), Ordering::Relaxed);
        }
        out.clear();
        *sent = 0;
        info.push.sent();
        // A big reply's room is given back once it is out, as Redis frees its reply blocks,
        // unless the client pipelines (see OUT_KEEP_MAX). Pushes and one-at-a-time replies
        // keep only the reply buffer: kept room counts in used_memory, and the invalidations
        // that key eviction sends to tracking clients would then evict more keys
        // (unit/maxmemory, "client tracking don't cause eviction feedback loop").
        if out.capacity() > OUT_KEEP_MAX || (out.capacity() > room && !keep) {
            out.shrink_to(room);
        }
        // Eviction notices in it are out of the process now (client::Notices).
        info.push.written();
    }
    note_pending(info, out, *sent);
}

/// Publish how much output waits (CLIENT LIST, client eviction, MEMORY STATS).
fn note_pending(info: &ClientInfo, out: &Vec<u8>, sent: usize) {
    let pending = out.len() - sent;
    info.out_pending.store(pending, Ordering::Relaxed);
    info.reply_buf.holds(pending);
    // The capacity, not the length: what the buffer holds (Redis counts its client's reply
    // buffer as allocated too).
    let held = out.capacity();
    info.out_held.store(held, Ordering::Relaxed);
}

/// Write what the socket takes of the pending output now, without waiting; what it does not
/// take stays for the loop to write as the socket drains. Messages queued meanwhile follow
/// once everything before them is out.
fn send(
    srv: &Server,
    sock: &ClientSocket,
    info: &ClientInfo,
    out: &mut Vec<u8>,
    sent: &mut usize,
) -> std::io::Result<()> {
    loop {
        while *sent < out.len() {
            match sock.try_write(&out[*sent..]) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => wrote(srv, info, out, sent, n),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    note_pending(info, out, *sent);
                    return Ok(());
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if !info.push.has_pending() {
            return Ok(());
        }
        drain_output(srv, info, out);
    }
}

/// The most of the replication stream a replica's connection copies into its output at once:
/// the rest stays in the shared buffer (`state::repl`) until the socket took this.
const STREAM_PULL_MAX: usize = 256 * 1024;

/// Move what waits for the client into `out`: its queued pushes, then, for a replica, the
/// replication stream from its cursor on (unless the stream waits for its first ACK).
fn drain_output(srv: &Server, info: &ClientInfo, out: &mut Vec<u8>) {
    info.drain_pushes(out);
    if info.repl_role.load(Ordering::Relaxed) == crate::client::ROLE_REPLICA
        && !info.push.is_held()
        && srv.repl.pull(info.id, out, STREAM_PULL_MAX, &info.out_held)
    {
        info.push.stream_left();
    }
}

/// Write all the pending output, waiting for the socket as long as it takes (before a
/// client blocks, waits for a pause, or closes).
async fn flush(
    srv: &Server,
    sock: &ClientSocket,
    info: &ClientInfo,
    out: &mut Vec<u8>,
    sent: &mut usize,
) -> std::io::Result<()> {
    if *sent >= out.len() {
        return Ok(());
    }
    // Under appendfsync always, nothing is acknowledged before it is on disk.
    srv.aof.wait_durable(srv.aof.last_seq()).await;
    // A client killed while its write is stuck (a subscriber over its output buffer limit
    // that stopped reading) is dropped rather than waited for.
    tokio::select! {
        r = sock.write_all(&out[*sent..]) => r?,
        _ = info.kill.notified() => {
            return Err(std::io::Error::other("client killed while writing"));
        }
    }
    let n = out.len() - *sent;
    wrote(srv, info, out, sent, n);
    Ok(())
}

/// Wait for a blocked command's outcome, and whether the connection closes after it (the
/// server stopped being a master). None if the client went away or was killed.
async fn wait_blocked(
    srv: &Server,
    sock: &ClientSocket,
    client: &mut Client,
    blocked: crate::blocking::Blocked,
    buf: &mut BytesMut,
) -> std::io::Result<Option<(Reply, bool)>> {
    let info = client.info.clone();
    info.blocked.store(true, Ordering::Relaxed);
    let crate::blocking::Blocked { waiter, mut rx } = blocked;
    let timeout = client.block_timeout_ms;
    let deadline =
        (timeout > 0).then(|| tokio::time::Instant::now() + Duration::from_millis(timeout));
    let on_timeout = client
        .block_timeout_reply
        .take()
        .unwrap_or(Reply::NullArray);
    let result = loop {
        let sleep = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            // The reply first: a push queued by the command that served this client (an
            // invalidation of the key it moved to) must follow the reply, not overtake it.
            biased;
            r = &mut rx => break r.ok(),
            _ = sleep => {
                if srv.blocking.cancel(&srv.keyspace, &waiter) {
                    break Some(on_timeout);
                }
                break (&mut rx).await.ok();
            }
            _ = info.kill.notified() => {
                if srv.blocking.cancel(&srv.keyspace, &waiter) {
                    break None;
                }
                break None;
            }
            _ = info.push.ready.wait() => {
                // Messages (RESP3 pushes, invalidations) reach a blocked client as they come.
                let mut pushed = Vec::new();
                info.push.drain_into(&mut pushed);
                flush(srv, sock, &info, &mut pushed, &mut 0).await?;
            }
            r = sock.read_buf(buf) => {
                // Commands pipelined behind the blocking one wait in the buffer (their place
                // in the arrival order is the blocked command's); EOF ends it.
                drop(sock.arrival_ticket());
                if r.map(|n| n == 0).unwrap_or(true) {
                    srv.blocking.cancel(&srv.keyspace, &waiter);
                    break None;
                }
            }
        }
    };
    info.blocked.store(false, Ordering::Relaxed);
    let close_after_reply = waiter.close_after_reply.load(Ordering::Acquire);
    Ok(result.map(|r| (r, close_after_reply)))
}
