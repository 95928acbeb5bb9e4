//! Replication, the parts that own a socket: sending a replica its RDB image
//! ([`full_sync`]), waiting for acknowledgements (WAIT, [`wait_acks`]), and, when this server
//! is a replica, the link to its master ([`replica`]).
//!
//! The protocol is Redis's (replication.c), so Redis replicas follow a Podium master and a
//! Podium replica follows a Redis master:
//! - the replica sends `PING`, `AUTH` (masterauth / masteruser), `REPLCONF listening-port`,
//!   `REPLCONF capa eof capa psync2`, then `PSYNC <replid> <offset>` (`? -1` the first time);
//! - the master answers `+CONTINUE [<replid>]` and the missing bytes of its backlog, or
//!   `+FULLRESYNC <replid> <offset>`, then the image as a bulk (`$<len>\r\n` and the RDB file
//!   its BGSAVE wrote; newlines keep the connection alive while the BGSAVE runs), then the
//!   stream: every write as the request that makes it, with `SELECT` when the database
//!   changes, `PING` every `repl-ping-replica-period` seconds, `REPLCONF GETACK *` when a
//!   WAIT needs the replicas' offsets;
//! - the replica applies the stream as a client whose replies nobody reads, relays it byte
//!   for byte to its own replicas, and sends `REPLCONF ACK <offset>` every second and when
//!   asked.
//!
//! A master sends the image from disk (Redis's `repl-diskless-sync no`): the replica's stream
//! must start at the instant the image shows, which the BGSAVE's fork gives (see
//! `state::repl`). A replica reads either form (`$<len>` or the diskless `$EOF:<mark>`).

pub mod replica;

use crate::client::Client;
use crate::config::dir;
use crate::net::ClientSocket;
use crate::protocol::Reply;
use crate::state::repl::{Replica, ONLINE, SEND_BULK, WAIT_BGSAVE_START};
use crate::state::Server;
use bytes::Bytes;
use std::io::Read;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Send the replica its image, then hand it back to the connection loop, which writes its
/// stream from the shared replication buffer, where its cursor waits at the image's instant
/// (see `state::repl`). False when
/// the connection must close (the BGSAVE failed, the replica went away or was killed).
pub(crate) async fn full_sync(srv: &Server, sock: &ClientSocket, client: &mut Client) -> bool {
    let Some(r) = srv.repl.find(client.id) else {
        return false;
    };
    let info = client.info.clone();
    if client.repl.rdb_functions_only {
        return send_functions_image(srv, sock, client, &r).await;
    }
    r.ready.store(true, Ordering::Release);
    if !start_or_join_bgsave(srv, &r) {
        let _ = sock
            .write_all(b"-ERR BGSAVE failed, maybe there is no disk space?\r\n")
            .await;
        return false;
    }
    // Until the replica is attached to a BGSAVE, and while a BGSAVE to disk runs: a newline
    // a second keeps the replica from timing out.
    let mut header_sent = false;
    let mut transfer = None;
    loop {
        let changed = r.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if info.killed.load(Ordering::Relaxed) {
            return false;
        }
        if r.state() != WAIT_BGSAVE_START && !header_sent {
            header_sent = true;
            if !r.pre_psync {
                let line = format!(
                    "+FULLRESYNC {} {}\r\n",
                    srv.repl.replid(),
                    r.initial_offset.load(Ordering::Acquire)
                );
                tracing::info!("Full resync requested by replica {}", r.describe());
                if sock.write_all(line.as_bytes()).await.is_err() {
                    return false;
                }
            }
            // A transfer to sockets: its bytes come from the pump (the Notified above is
            // dropped first, so that the outcome's notification reaches the next wait).
            if let Some(feed) = r.rdb_feed.lock().take() {
                transfer = Some(feed);
                break;
            }
            continue;
        }
        if let Some(ok) = *r.bgsave_outcome.lock() {
            if !ok {
                return false;
            }
            if r.state() != WAIT_BGSAVE_START {
                break;
            }
        }
        tokio::select! {
            _ = &mut changed => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {
                // Redis sends this newline from its cron, which a DEBUG SLEEP stops too: a
                // replica is meant to time out then (its handshake timeout test).
                crate::commands::debug::resumed().await;
                if sock.write_all(b"\n").await.is_err() {
                    return false;
                }
            }
            _ = info.kill.notified() => return false,
            _ = sock.closed() => return false,
        }
    }
    match transfer {
        Some(feed) => send_from_transfer(srv, sock, client, &r, feed).await,
        None => send_file(srv, sock, client, &r).await,
    }
}

/// Start the BGSAVE a replica asking for a full synchronization needs, join one that serves
/// it, or leave it waiting (Redis's syncCommand): a BGSAVE to disk already running is joined
/// when it can be; otherwise the replica waits for the next BGSAVE, which the persistence cron
/// starts once the running child ends or `repl-diskless-sync-delay` has passed. False when a
/// BGSAVE was needed now and could not start.
fn start_or_join_bgsave(srv: &Server, r: &Arc<Replica>) -> bool {
    let diskless = srv.config.flag(dir::REPL_DISKLESS_SYNC);
    if crate::persistence::child::bgsave_running(srv) {
        if srv.aof.inner.snap.child_to_sockets.load(Ordering::SeqCst) {
            tracing::info!("Current BGSAVE has socket target. Waiting for next BGSAVE for SYNC");
        } else if srv.repl.attach_to_running_disk_save(r) {
            tracing::info!("Waiting for end of BGSAVE for SYNC");
        } else {
            tracing::info!(
                "Can't attach the replica to the current BGSAVE. Waiting for next BGSAVE for SYNC"
            );
        }
        return true;
    }
    if diskless && r.capa_eof && srv.config.int(dir::REPL_DISKLESS_SYNC_DELAY) > 0 {
        tracing::info!("Delay next BGSAVE for diskless SYNC");
        return true;
    }
    if srv.aof.inner.rewriting.load(Ordering::SeqCst) {
        tracing::info!(
            "No BGSAVE in progress, but another BG operation is active. BGSAVE for replication delayed"
        );
        return true;
    }
    let to_sockets = srv
        .repl
        .replication_bgsave_due(diskless, 0, 0)
        .unwrap_or(false);
    match crate::persistence::snapshot::bgsave_for_replicas(srv, to_sockets) {
        Ok(()) => true,
        // Another child started meanwhile (the cron, a BGSAVE): the next one serves it.
        Err(_) if crate::persistence::child::bgsave_running(srv) => true,
        Err(e) => {
            tracing::warn!("BGSAVE for replication failed: {e}");
            false
        }
    }
}

/// A diskless transfer (see `persistence::snapshot::bgsave_to_replicas`): write what the
/// transfer's pump hands over until it is done, then wait for the child's outcome. A replica
/// whose socket takes nothing for `repl-timeout` seconds is dropped, as Redis's cron drops
/// it. The stream then waits for the replica's first ACK (`Mailbox::hold`).
async fn send_from_transfer(
    srv: &Server,
    sock: &ClientSocket,
    client: &mut Client,
    r: &Arc<Replica>,
    mut feed: tokio::sync::mpsc::Receiver<Bytes>,
) -> bool {
    let info = client.info.clone();
    loop {
        let chunk = tokio::select! {
            c = feed.recv() => c,
            _ = info.kill.notified() => return false,
            // A replica gone while the child is slow to produce (rdb-key-save-delay) is
            // noticed now, not at the next chunk.
            _ = sock.closed() => return false,
        };
        let Some(chunk) = chunk else { break };
        if !write_watched(srv, sock, r, &chunk).await {
            return false;
        }
        srv.stats.net_output_bytes.add(chunk.len() as u64);
        srv.stats.writes_processed.add(1);
    }
    drop(feed);
    loop {
        let changed = r.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if info.killed.load(Ordering::Relaxed) {
            return false;
        }
        match *r.bgsave_outcome.lock() {
            Some(false) => return false,
            Some(true) => break,
            None => {}
        }
        tokio::select! {
            _ = &mut changed => {}
            _ = info.kill.notified() => return false,
            _ = sock.closed() => return false,
        }
    }
    tracing::info!(
        "Streamed RDB transfer with replica {} succeeded (socket). Waiting for REPLCONF ACK from slave to enable streaming",
        r.describe()
    );
    if client.repl.rdb_only {
        tracing::info!(
            "RDB transfer completed, rdb only replica ({}) should be disconnected asap",
            r.describe()
        );
        return false;
    }
    // The stream waits for the replica's first ACK (Mailbox::hold).
    info.push.hold();
    r.ack_ms.store(crate::clock::unix_ms(), Ordering::Relaxed);
    r.state.store(ONLINE, Ordering::Release);
    tracing::info!("Synchronization with replica {} succeeded", r.describe());
    true
}

/// Write `data` to a replica in the middle of a transfer; false when the connection failed,
/// the replica was killed, or its socket took nothing for `repl-timeout` seconds.
async fn write_watched(srv: &Server, sock: &ClientSocket, r: &Replica, mut data: &[u8]) -> bool {
    let mut last_progress = std::time::Instant::now();
    while !data.is_empty() {
        tokio::select! {
            w = sock.write_some(data) => match w {
                Ok(0) | Err(_) => return false,
                Ok(n) => {
                    data = &data[n..];
                    last_progress = std::time::Instant::now();
                }
            },
            _ = tokio::time::sleep(Duration::from_millis(250)) => {
                let timeout = srv.config.int(dir::REPL_TIMEOUT).max(1) as u64;
                if last_progress.elapsed() > Duration::from_secs(timeout) {
                    tracing::warn!("Disconnecting timedout replica (full sync): {}", r.describe());
                    return false;
                }
            }
            _ = r.info.kill.notified() => return false,
        }
        if r.info.killed.load(Ordering::Relaxed) {
            return false;
        }
    }
    true
}

/// The image of a BGSAVE to disk: the file as the bulk `$<len>`, then the replica is online.
async fn send_file(srv: &Server, sock: &ClientSocket, client: &Client, r: &Arc<Replica>) -> bool {
    r.state.store(SEND_BULK, Ordering::Release);
    let path = crate::persistence::snapshot::rdb_path(srv);
    let mut file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!("SYNC failed. Can't open/stat DB after BGSAVE: {e}");
            return false;
        }
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if sock
        .write_all(format!("${len}\r\n").as_bytes())
        .await
        .is_err()
    {
        return false;
    }
    let mut chunk = vec![0u8; 64 * 1024];
    let mut left = len;
    while left > 0 {
        let want = chunk.len().min(left as usize);
        let n = match file.read(&mut chunk[..want]) {
            Ok(0) | Err(_) => {
                tracing::warn!("Read error sending DB to replica");
                return false;
            }
            Ok(n) => n,
        };
        if sock.write_all(&chunk[..n]).await.is_err() {
            return false;
        }
        srv.stats.net_output_bytes.add(n as u64);
        srv.stats.writes_processed.add(1);
        left -= n as u64;
    }
    r.ack_ms.store(crate::clock::unix_ms(), Ordering::Relaxed);
    r.state.store(ONLINE, Ordering::Release);
    tracing::info!("Synchronization with replica {} succeeded", r.describe());
    delete_sync_file(srv, &path);
    // `REPLCONF rdb-only 1` (redis-cli --rdb): the image was all it asked for.
    !client.repl.rdb_only
}

/// `REPLCONF rdb-filter-only functions`: an image of the libraries alone, made in place (it
/// holds no data, so no snapshot of the keyspace is needed); with `rdb-only` the connection
/// then closes, else the stream follows from now.
async fn send_functions_image(
    srv: &Server,
    sock: &ClientSocket,
    client: &Client,
    r: &std::sync::Arc<crate::state::repl::Replica>,
) -> bool {
    let image = match crate::persistence::snapshot::functions_image(srv) {
        Ok(i) => i,
        Err(e) => {
            tracing::warn!("SYNC failed. Can't build the functions image: {e}");
            return false;
        }
    };
    let mut out = Vec::with_capacity(image.len() + 80);
    if !r.pre_psync {
        out.extend_from_slice(
            format!(
                "+FULLRESYNC {} {}\r\n",
                srv.repl.replid(),
                srv.repl.offset()
            )
            .as_bytes(),
        );
    }
    out.extend_from_slice(format!("${}\r\n", image.len()).as_bytes());
    out.extend_from_slice(&image);
    if sock.write_all(&out).await.is_err() {
        return false;
    }
    tracing::info!("Synchronization with replica {} succeeded", r.describe());
    if client.repl.rdb_only {
        return false;
    }
    // From here on the stream (nothing before this instant is in the image but libraries).
    srv.repl.attach_now(r);
    true
}

/// `rdb-del-sync-files yes`: without persistence, the file written only for replicas goes.
fn delete_sync_file(srv: &Server, path: &std::path::Path) {
    if !srv.config.flag(dir::RDB_DEL_SYNC_FILES)
        || srv.aof.is_enabled()
        || !crate::persistence::snapshot::save_points(srv).is_empty()
        || srv.repl.replicas().iter().any(|r| r.state() != ONLINE)
    {
        return;
    }
    tracing::info!("Removing the RDB file used only for SYNC purposes");
    let _ = std::fs::remove_file(path);
}

/// WAIT: until `replicas` replicas acknowledged `offset` or the deadline (Unix ms, 0: none)
/// passes; the number that did. None if the client was killed meanwhile.
pub(crate) async fn wait_acks(
    srv: &Server,
    client: &Client,
    replicas: i64,
    offset: u64,
    deadline_ms: i64,
) -> Option<Reply> {
    // Ask the replicas where they are now rather than wait for their next ACK.
    srv.repl.feed(
        None,
        &[
            Bytes::from_static(b"REPLCONF"),
            Bytes::from_static(b"GETACK"),
            Bytes::from_static(b"*"),
        ],
        srv.replica_obuf_limit(),
    );
    let info = &client.info;
    loop {
        let acked = srv.repl.acked.notified();
        tokio::pin!(acked);
        acked.as_mut().enable();
        let n = srv.repl.acked_at_least(offset) as i64;
        if n >= replicas {
            return Some(Reply::Int(n));
        }
        let sleep = async {
            if deadline_ms > 0 {
                let left = (deadline_ms - crate::clock::unix_ms()).max(0) as u64;
                tokio::time::sleep(Duration::from_millis(left)).await
            } else {
                std::future::pending::<()>().await
            }
        };
        tokio::select! {
            _ = &mut acked => {}
            _ = sleep => return Some(Reply::Int(srv.repl.acked_at_least(offset) as i64)),
            _ = info.kill.notified() => return None,
        }
    }
}
