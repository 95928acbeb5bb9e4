//! One client connection: reading, pipelining, replying, and the client's state.
//!
//! The loop reads whatever the socket has into the query buffer, executes every complete
//! request in it in order, renders each reply into one output buffer, and writes that buffer
//! with a single write: a pipeline of N commands costs one read and one write. A protocol
//! error gets Redis's error reply and closes the connection. A blocking command parks the
//! client (the rest of its pipeline waits, as in Redis) until it is served, times out, is
//! unblocked, or the client goes away.

/// Moved to crate::client; kept here for code written against the old path.
#[allow(unused_imports)]
pub use crate::client::{Client, ClientInfo, ReplyMode};
use crate::clock::unix_ms;
use crate::commands::{dispatch_with, Outcome};
use crate::keyspace::Guards;
use crate::net::ClientSocket;
use crate::protocol::{parse_request_resuming, ParseLimits, Parsed, Partial, Reply};
use crate::state::Server;
use bytes::{Bytes, BytesMut};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

/// Serve one TCP connection until it closes.
pub async fn handle(srv: Arc<Server>, sock: TcpStream, peer: SocketAddr) {
    let sock = match ClientSocket::new(sock) {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!("dropping connection from {peer}: {e}");
            return;
        }
    };
    sock.set_keepalive(srv.config.get_i64("tcp-keepalive"));
    serve_socket(srv, sock, peer.to_string()).await
}

/// A client of the Unix socket at `path`; Redis shows its address as `path:0`.
pub async fn handle_unix(srv: Arc<Server>, sock: tokio::net::UnixStream, path: String) {
    let sock = match ClientSocket::new_unix(sock) {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!("dropping connection on {path}: {e}");
            return;
        }
    };
    serve_socket(srv, sock, format!("{path}:0")).await
}

async fn serve_socket(srv: Arc<Server>, sock: ClientSocket, peer: String) {
    let id = srv.next_client_id();
    let laddr = sock.local_addr();
    let now = unix_ms();
    let info = Arc::new(ClientInfo::new(id, peer, laddr, now));
    let maxclients = srv.config.get_i64("maxclients").max(1) as usize;
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
        let _ = sock
            .write_all(b"-ERR max number of clients reached\r\n")
            .await;
        return;
    }
    if crate::net::protected_mode_refuses(
        srv.config.get_bool("protected-mode"),
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
    client.set_user(srv.acl.default_user());
    client.authenticated = crate::commands::acl::starts_authenticated(&srv);
    if let Err(e) = serve_client(&srv, &sock, &mut client).await {
        tracing::debug!("client {id} closed: {e}");
    }
    crate::commands::tx::unwatch_all(&srv, &mut client);
    srv.pubsub.unsubscribe_all(&info, &mut client.subs);
    srv.pubsub.remove_monitor(&info);
    srv.tracking.disable(id);
    srv.clients.lock().remove(&id);
}

async fn serve_client(
    srv: &Server,
    sock: &ClientSocket,
    client: &mut Client,
) -> std::io::Result<()> {
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut out: Vec<u8> = Vec::with_capacity(16 * 1024);
    // Requests parsed from the buffer and not yet run (see the loop below).
    let mut pending: std::collections::VecDeque<Vec<Bytes>> = std::collections::VecDeque::new();
    // Progress through a long request that has not fully arrived yet.
    let mut partial = Partial::default();
    let info = client.info.clone();
    let mut guards = Guards::new(&srv.keyspace);
    let mut qb = crate::querybuf::QueryBuf::new();
    // The query buffer's check (querybuf) is due a while after the last input, so the due time
    // moves on with every read. One timer per connection is armed for the earliest due time
    // and left alone while later reads push the due time back; when it fires early it is
    // re-armed once. Arming a fresh timer per read cost a timer-wheel insert and removal
    // (about 600 instructions) on every request at P=1.
    let mut buffer_timer = std::pin::pin!(tokio::time::sleep(Duration::ZERO));
    let mut timer_armed: Option<std::time::Instant> = None;
    loop {
        qb.before_read(&mut buf);
        info.qbuf.store(buf.len(), Ordering::Relaxed);
        info.qbuf_free
            .store(buf.capacity() - buf.len(), Ordering::Relaxed);
        let check_at = qb.next_check(&buf);
        if let Some(at) = check_at {
            if timer_armed.is_none_or(|armed| armed > at) {
                buffer_timer.as_mut().reset(at.into());
                timer_armed = Some(at);
            }
        }
        let len_before = buf.len();
        // `timeout N` closes a client idle for N seconds (not one inside MULTI, as Redis).
        let idle_limit = srv.config.hot.timeout.load(Ordering::Relaxed);
        let idle = async {
            if idle_limit > 0 && client.multi.is_none() {
                tokio::time::sleep(Duration::from_secs(idle_limit as u64)).await
            } else {
                std::future::pending::<()>().await
            }
        };
        let n = tokio::select! {
            // Fixed order: the branches other than the read are ready only when woken, so the
            // read is not starved, and no random number is drawn per read.
            biased;
            _ = info.push.ready.notified() => {
                // A kill wakes this branch too (`ClientInfo::kill`).
                if info.killed.load(Ordering::SeqCst) {
                    return Ok(());
                }
                // Messages published to this client while it waited for input.
                info.push.drain_into(&mut out);
                flush(srv, sock, &info, &mut out).await?;
                continue;
            }
            r = sock.read_buf(&mut buf) => r?,
            _ = idle => {
                tracing::debug!("closing client {}: idle for {idle_limit} s", client.id);
                return Ok(());
            }
            _ = buffer_timer.as_mut(), if timer_armed.is_some() => {
                timer_armed = None;
                // A check that is no longer due (input came since the timer was armed) waits
                // for the timer to be armed again at its new due time.
                if qb.next_check(&buf).is_some_and(|at| at <= std::time::Instant::now()) {
                    qb.check(&mut buf);
                }
                continue;
            }
        };
        qb.after_read(len_before, n);
        // While this read's commands run, CLIENT LIST shows the buffer as read (the running
        // command included), as Redis shows it before trimming what it processed.
        info.qbuf.store(buf.len(), Ordering::Relaxed);
        info.qbuf_free
            .store(buf.capacity() - buf.len(), Ordering::Relaxed);
        if n == 0 || info.killed.load(Ordering::Relaxed) {
            return Ok(());
        }
        srv.stats
            .net_input_bytes
            .fetch_add(n as u64, Ordering::Relaxed);
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
            if srv.aof.loading() {
                if let Some(spec) = crate::commands::lookup(&args[0]) {
                    if spec.flags & crate::commands::flags::LOADING == 0 {
                        if client.multi.is_some() {
                            client.multi_abort = true;
                        }
                        let e = Reply::error("LOADING Redis is loading the dataset in memory");
                        emit(srv, client, &e, &mut out);
                        continue;
                    }
                }
            }
            info.argv_mem
                .store(args.iter().map(|a| a.len()).sum(), Ordering::Relaxed);
            let Outcome {
                reply,
                block,
                close: quit,
                postponed,
                unblock_stats,
            } = dispatch_with(srv, client, args, &mut guards);
            if let Some(args) = postponed {
                // Clients are paused: send what the pipeline produced so far, wait for the
                // pause to change, then submit the request again (it may wait again).
                flush(srv, sock, &info, &mut out).await?;
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
            let reply = match block {
                Some(b) => {
                    // Send what the pipeline produced so far, then wait.
                    flush(srv, sock, &info, &mut out).await?;
                    match wait_blocked(srv, sock, client, b, &mut buf).await? {
                        Some(r) => {
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
            // Messages this command published to its own client go before its reply; a blocked
            // command's reply goes first, as Redis runs it for the client when it is served
            // (what the serving caused, such as an invalidation of the key it moved to, follows;
            // what came while it waited was sent then).
            if served_after_block {
                emit(srv, client, &reply, &mut out);
                info.push.drain_into(&mut out);
            } else {
                info.push.drain_into(&mut out);
                emit(srv, client, &reply, &mut out);
            }
            if !client.after_reply.is_empty() {
                out.append(&mut client.after_reply);
            }
            if quit || info.killed.load(Ordering::Relaxed) {
                close = true;
                break;
            }
            // Under a hard limit the batch's replies accumulate as in Redis (which writes
            // them after the batch), so a batch whose replies exceed it gets none of them;
            // without one, long output is written every 64 KiB.
            if over_hard_limit(srv, client, out.len()) {
                return Ok(());
            }
            if out.len() > 64 * 1024 && normal_obuf_limit(srv).hard == 0 {
                flush(srv, sock, &info, &mut out).await?;
            }
        }
        flush(srv, sock, &info, &mut out).await?;
        if close {
            sock.shutdown();
            return Ok(());
        }
        if big_arg > 0 {
            qb.after_big_arg(&mut buf, big_arg);
        }
    }
}

fn emit(srv: &Server, client: &mut Client, reply: &Reply, out: &mut Vec<u8>) {
    srv.errorstats.count_reply(reply);
    // Pushes (subscribe confirmations) are written even when replies are silenced.
    let pushed = std::mem::take(&mut client.push_reply);
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

/// `client-output-buffer-limit` (normal class): true, after logging, if `pending` reply bytes
/// exceed the hard limit; the connection is then closed without them, as Redis closes it.
fn over_hard_limit(srv: &Server, client: &Client, pending: usize) -> bool {
    let limit = normal_obuf_limit(srv);
    if limit.hard > 0 && pending as u64 > limit.hard {
        tracing::warn!(
            "Client id={} addr={} closed for overcoming of output buffer limits.",
            client.id,
            client.info.addr
        );
        return true;
    }
    false
}

fn normal_obuf_limit(srv: &Server) -> crate::config::ObufLimit {
    srv.config.hot.obuf.classes[crate::config::OBUF_NORMAL].get()
}

async fn flush(
    srv: &Server,
    sock: &ClientSocket,
    info: &ClientInfo,
    out: &mut Vec<u8>,
) -> std::io::Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    // Under appendfsync always, nothing is acknowledged before it is on disk.
    srv.aof.wait_durable(srv.aof.last_seq()).await;
    // Over the soft limit, the reader gets soft_seconds to take the data; a client that stays
    // over it longer is closed (client-output-buffer-limit, normal class).
    let soft = if out.len() > 64 * 1024 {
        normal_obuf_limit(srv)
    } else {
        crate::config::ObufLimit::default()
    };
    // Most replies fit the socket's buffer: one write, without setting up the waits below.
    let mut sent = 0;
    if soft.soft == 0 || out.len() as u64 <= soft.soft {
        sent = sock.write_now(out)?;
    }
    if sent < out.len() {
        flush_rest(sock, info, &out[sent..], soft).await?;
    }
    info.push.sent();
    srv.stats
        .net_output_bytes
        .fetch_add(out.len() as u64, Ordering::Relaxed);
    out.clear();
    Ok(())
}

/// The part of [`flush`] that waits: what the socket did not take at once.
async fn flush_rest(
    sock: &ClientSocket,
    info: &ClientInfo,
    out: &[u8],
    soft: crate::config::ObufLimit,
) -> std::io::Result<()> {
    let write = async {
        if soft.soft > 0 && out.len() as u64 > soft.soft {
            let grace = Duration::from_secs(soft.soft_secs.max(1));
            match tokio::time::timeout(grace, sock.write_all(out)).await {
                Ok(r) => r,
                Err(_) => {
                    tracing::warn!("Client closed for overcoming of output buffer soft limit.");
                    Err(std::io::Error::other("output buffer soft limit"))
                }
            }
        } else {
            sock.write_all(out).await
        }
    };
    // A client killed while its write is stuck (a subscriber over its output buffer limit
    // that stopped reading) is dropped rather than waited for.
    tokio::select! {
        r = write => r?,
        _ = info.kill.notified() => {
            return Err(std::io::Error::other("client killed while writing"));
        }
    }
    Ok(())
}

/// Wait for a blocked command's outcome. None if the client went away or was killed.
async fn wait_blocked(
    srv: &Server,
    sock: &ClientSocket,
    client: &mut Client,
    blocked: crate::blocking::Blocked,
    buf: &mut BytesMut,
) -> std::io::Result<Option<Reply>> {
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
            _ = info.push.ready.notified() => {
                // Messages (RESP3 pushes, invalidations) reach a blocked client as they come.
                let mut pushed = Vec::new();
                info.push.drain_into(&mut pushed);
                flush(srv, sock, &info, &mut pushed).await?;
            }
            r = sock.read_buf(buf) => {
                // Commands pipelined behind the blocking one wait in the buffer; EOF ends it.
                if r.map(|n| n == 0).unwrap_or(true) {
                    srv.blocking.cancel(&srv.keyspace, &waiter);
                    break None;
                }
            }
        }
    };
    info.blocked.store(false, Ordering::Relaxed);
    Ok(result)
}
