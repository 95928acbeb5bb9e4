//! This server as a replica: which master it follows (REPLICAOF / `replicaof`), the state of
//! the link to it as INFO replication and ROLE report it, and what the link has processed.
//!
//! The link itself (connecting, the handshake, loading the master's image, applying its
//! stream) is a task of [`crate::replication`], above; REPLICAOF starts one through the hook
//! the server registers at startup ([`MasterLink::set_starter`]). Every REPLICAOF bumps a
//! generation number: a task of an older generation sees it and ends, so at most one link
//! acts at a time.

use crate::config::dir;
use crate::protocol::Reply;
use crate::state::Server;
use bytes::Bytes;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use tokio::sync::Notify;

/// The link's state (Redis's REPL_STATE_*), as INFO's master_link_status and ROLE name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LinkState {
    /// Must connect (ROLE: connect).
    Connect,
    /// TCP connection under way (ROLE: connecting).
    Connecting,
    /// PING / AUTH / REPLCONF / PSYNC exchange (ROLE: handshake).
    Handshake,
    /// Receiving the image (ROLE: sync).
    Transfer,
    /// Applying the stream (ROLE: connected).
    Connected,
}

#[derive(Default)]
pub(crate) struct LinkInfo {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) state: Option<LinkState>,
    /// Unix ms since when the link is down (INFO master_link_down_since_seconds).
    pub(crate) down_since_ms: i64,
    /// Unix ms of the last bytes read from the master (INFO master_last_io_seconds_ago).
    pub(crate) last_io_ms: i64,
    /// The transfer in progress: total size (-1 when unknown: diskless) and bytes read.
    pub(crate) transfer_size: i64,
    pub(crate) transfer_read: u64,
    pub(crate) transfer_start_ms: i64,
    /// The client id the link runs its commands as (CLIENT LIST flag M).
    pub(crate) client_id: Option<u64>,
    /// The link's socket while the stream is applied, so that INFO tells a link the master
    /// has closed before the link's task has read to its end (see [`peer_closed`]). The task
    /// clears it under this struct's lock before the socket closes.
    pub(crate) socket_fd: Option<std::os::fd::RawFd>,
}

/// Whether the peer of socket `fd` has closed its side or the socket failed. Redis's single
/// thread reads a link's end before a request that arrived after it; here the link's task and
/// the connection asking INFO run apart, so INFO asks the socket itself (a test kills the
/// link on the master and then waits for master_link_status to be "up" with the new data).
fn peer_closed(fd: std::os::fd::RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: poll(2) of one descriptor with a zero timeout, reading and writing only `p`;
    // the caller holds the link's lock, under which the link's task clears the descriptor
    // before closing it, so it is still the link's socket.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

/// The server's link to its master (none while it is a master itself).
#[derive(Default)]
pub struct MasterLink {
    pub(crate) info: Mutex<Option<LinkInfo>>,
    /// `info` is Some: read without its lock by the checks every command makes
    /// ([`refusal`]), which a master (the usual case) passes without locking anything.
    has_master: AtomicBool,
    /// Bumped by every REPLICAOF: a link task of an older generation ends.
    pub(crate) generation: AtomicU64,
    /// Set by REPLCONF GETACK from the master: the link acknowledges at once.
    pub(crate) ack_now: AtomicBool,
    pub(crate) ack_wake: Notify,
    /// Woken by every REPLICAOF (see [`MasterLink::moved_on`]).
    generation_changed: Notify,
    /// Starts the link task for a generation (registered by the server).
    starter: OnceLock<Box<dyn Fn(u64) + Send + Sync>>,
    /// The last generation a link task was started for: a target set before the starter
    /// is registered (a cluster bus message while the dataset loads) is started by
    /// [`MasterLink::set_starter`], once.
    started: AtomicU64,
    /// Offset of the master's stream processed so far (INFO slave_repl_offset); -1 unknown.
    pub(crate) processed: std::sync::atomic::AtomicI64,
    /// Bytes of the stream read but not applied yet (a request CLIENT PAUSE holds back and
    /// what follows it): INFO slave_read_repl_offset is `processed` plus these.
    pub(crate) unapplied: std::sync::atomic::AtomicI64,
    /// The database the master's stream had selected when the last link ended. A partial
    /// resynchronization continues the stream where it stopped, with no SELECT in front, so
    /// the next link starts in it (Redis keeps it in its cached master client).
    pub(crate) stream_db: std::sync::atomic::AtomicUsize,
    /// Held by a link task for its whole life: a new generation's task waits for the old one
    /// to end before it takes the offset it asks PSYNC for, so that the old task cannot apply
    /// (and count, and pass on) one more request behind it. The old task checks its
    /// generation before each request and stops waiting at [`MasterLink::moved_on`].
    pub(crate) task_slot: tokio::sync::Mutex<()>,
    /// Held (shared) while the link applies one request and counts it (offset, relay, stream
    /// database), and (exclusive) while an image locks every shard: the history an RDB records
    /// is then the one its data holds ([`MasterLink::image_gate`]).
    apply_gate: parking_lot::RwLock<()>,
}

thread_local! {
    /// Set while this thread applies a request of the master's stream (under `apply_gate`).
    static APPLYING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl MasterLink {
    /// Register what starts a link task (`crate::replication::start_link`).
    pub fn set_starter(&self, f: Box<dyn Fn(u64) + Send + Sync>) {
        let _ = self.starter.set(f);
        // A REPLICAOF that came before (the cluster bus names this node's master while its
        // data still loads, as Redis's bus is served from its loading loop) is followed from
        // now, as Redis's replication cron connects once loading is done.
        if self.has_master.load(Ordering::Acquire) {
            self.start(self.generation.load(Ordering::Acquire));
        }
    }

    /// Start the link task for `generation` unless one was started for it.
    fn start(&self, generation: u64) {
        if let Some(start) = self.starter.get() {
            if self.started.swap(generation, Ordering::AcqRel) != generation {
                start(generation);
            }
        }
    }

    /// The generation a link task runs for is still current.
    pub(crate) fn current(&self, generation: u64) -> bool {
        self.generation.load(Ordering::Acquire) == generation
    }

    /// Follow `host:port` from now on (config `replicaof` at startup, REPLICAOF).
    pub(crate) fn follow(&self, host: String, port: u16) {
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        *self.info.lock() = Some(LinkInfo {
            host,
            port,
            state: Some(LinkState::Connect),
            down_since_ms: crate::clock::unix_ms(),
            transfer_size: -1,
            ..Default::default()
        });
        self.has_master.store(true, Ordering::Release);
        self.generation_changed.notify_waiters();
        self.start(generation);
    }

    /// Stop following (REPLICAOF NO ONE): the link task of the old generation ends.
    pub(crate) fn unfollow(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        *self.info.lock() = None;
        self.has_master.store(false, Ordering::Release);
        self.ack_wake.notify_waiters();
        self.generation_changed.notify_waiters();
    }

    /// Resolves once `generation` is no longer the current one (REPLICAOF, REPLICAOF NO ONE):
    /// a link task waiting on its socket, its retry delay or its master's stream ends at once.
    pub(crate) async fn moved_on(&self, generation: u64) {
        loop {
            let changed = self.generation_changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if !self.current(generation) {
                return;
            }
            changed.await;
        }
    }

    /// Run `apply` (one request of the master's stream: dispatch, then counting it) under the
    /// shared side of the apply gate.
    pub(crate) fn applying<T>(&self, apply: impl FnOnce() -> T) -> T {
        struct Applying;
        impl Drop for Applying {
            fn drop(&mut self) {
                APPLYING.with(|a| a.set(false));
            }
        }
        let _shared = self.apply_gate.read();
        APPLYING.with(|a| a.set(true));
        let _flag = Applying;
        apply()
    }

    /// Taken before an image locks every shard: no request is then half applied (its data
    /// changed, its offset not yet counted). None on the thread applying a request (a FLUSHALL
    /// from the master that saves), which holds the shared side already.
    pub(crate) fn image_gate(&self) -> Option<parking_lot::RwLockWriteGuard<'_, ()>> {
        if APPLYING.with(|a| a.get()) {
            None
        } else {
            Some(self.apply_gate.write())
        }
    }

    pub(crate) fn set_state(&self, generation: u64, state: LinkState) {
        if !self.current(generation) {
            return;
        }
        if let Some(i) = self.info.lock().as_mut() {
            if state != LinkState::Connected && i.state == Some(LinkState::Connected) {
                i.down_since_ms = crate::clock::unix_ms();
            }
            i.state = Some(state);
        }
    }
}

/// The master this server follows now, as `replicaof` writes it ("host port"), or "".
pub(crate) fn followed_master(srv: &Server) -> String {
    srv.master_link
        .info
        .lock()
        .as_ref()
        .map_or_else(String::new, |l| format!("{} {}", l.host, l.port))
}

/// How long ago this replica last heard from its master, in ms: since the last bytes read
/// while the link is up, since the link went down otherwise (0 without a master).
pub(crate) fn data_age_ms(srv: &Server) -> i64 {
    let i = srv.master_link.info.lock();
    let Some(l) = i.as_ref() else {
        return 0;
    };
    let now = crate::clock::unix_ms();
    if l.state == Some(LinkState::Connected) {
        now - l.last_io_ms
    } else {
        now - l.down_since_ms
    }
}

/// True while this server follows a master.
pub(crate) fn is_replica(srv: &Server) -> bool {
    srv.master_link.has_master.load(Ordering::Acquire)
}

/// The replication offset a replica gives the cluster bus (Redis's
/// replicationGetSlaveOffset): 0 during a full synchronization, when Redis has neither a
/// master client nor a cached one, so that the master and the other nodes leave a loading
/// replica out of CLUSTER SLOTS; else the stream's offset.
pub(crate) fn gossip_offset(srv: &Server) -> u64 {
    let syncing = is_replica(srv)
        && srv
            .master_link
            .info
            .lock()
            .as_ref()
            .is_some_and(|l| l.state == Some(LinkState::Transfer));
    if syncing {
        0
    } else {
        srv.repl.offset()
    }
}

/// Why a SYNC / PSYNC is refused: a replica not connected to its master has nothing to give.
pub(crate) fn sync_refusal(srv: &Server) -> Option<&'static str> {
    let i = srv.master_link.info.lock();
    match i.as_ref() {
        Some(l) if l.state != Some(LinkState::Connected) => {
            Some("NOMASTERLINK Can't SYNC while not connected with my master")
        }
        _ => None,
    }
}

/// REPLCONF GETACK on the link: acknowledge at once.
pub(crate) fn ack_requested(srv: &Server) {
    if is_replica(srv) {
        srv.master_link.ack_now.store(true, Ordering::Release);
        srv.master_link.ack_wake.notify_waiters();
    }
}

/// ROLE of a replica: slave, host, port, state, processed offset.
pub(crate) fn role_reply(srv: &Server) -> Option<Reply> {
    let i = srv.master_link.info.lock();
    let l = i.as_ref()?;
    let state = match l.state.unwrap_or(LinkState::Connect) {
        LinkState::Connect => "connect",
        LinkState::Connecting => "connecting",
        LinkState::Handshake => "handshake",
        LinkState::Transfer => "sync",
        LinkState::Connected => "connected",
    };
    Some(Reply::Array(vec![
        Reply::bulk_slice(b"slave"),
        Reply::Bulk(Bytes::from(l.host.clone())),
        Reply::Int(l.port as i64),
        Reply::Bulk(Bytes::from_static(state.as_bytes())),
        Reply::Int(srv.master_link.processed.load(Ordering::Relaxed)),
    ]))
}

/// The -READONLY / -MASTERDOWN refusals of a replica, in Redis's order. `from_master` is
/// the link's own client, which may write.
pub(crate) fn refusal(
    srv: &Server,
    is_write: bool,
    stale_ok: bool,
    from_master: bool,
) -> Option<Reply> {
    if from_master || !is_replica(srv) {
        return None;
    }
    let i = srv.master_link.info.lock();
    let l = i.as_ref()?;
    if is_write && srv.config.flag(dir::REPLICA_READ_ONLY) {
        return Some(Reply::error(
            "READONLY You can't write against a read only replica.",
        ));
    }
    if l.state != Some(LinkState::Connected)
        && !stale_ok
        && !srv.config.flag(dir::REPLICA_SERVE_STALE_DATA)
    {
        return Some(Reply::error(
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        ));
    }
    None
}

/// A replica whose link is down with `replica-serve-stale-data no`: it serves only the
/// commands flagged stale (and scripts that allow it).
pub(crate) fn running_stale(srv: &Server) -> bool {
    if !is_replica(srv) {
        return false;
    }
    let i = srv.master_link.info.lock();
    matches!(i.as_ref(), Some(l) if l.state != Some(LinkState::Connected))
        && !srv.config.flag(dir::REPLICA_SERVE_STALE_DATA)
}

/// A read-only replica (its clients may not write).
pub(crate) fn read_only(srv: &Server) -> bool {
    is_replica(srv) && srv.config.flag(dir::REPLICA_READ_ONLY)
}

/// REPLICAOF host port | NO ONE, for client `client_id`.
pub(crate) fn replicaof(srv: &Server, client_id: u64, host: &[u8], port: &[u8]) -> Reply {
    let who = client_id;
    if srv.failover.active() {
        return Reply::error("ERR REPLICAOF not allowed while failing over.");
    }
    if host.eq_ignore_ascii_case(b"no") && port.eq_ignore_ascii_case(b"one") {
        if is_replica(srv) {
            unset_master(srv);
            tracing::info!("MASTER MODE enabled (user request from 'id={who}')");
        }
        return Reply::Ok;
    }
    let port = match crate::util::numtext::parse_i64(port) {
        Some(p) if (0..=65535).contains(&p) => p as u16,
        Some(_) => return Reply::error("ERR Invalid master port"),
        None => return Reply::error("ERR value is not an integer or out of range"),
    };
    let host = String::from_utf8_lossy(host).into_owned();
    {
        let i = srv.master_link.info.lock();
        if let Some(l) = i.as_ref() {
            if l.host.eq_ignore_ascii_case(&host) && l.port == port {
                tracing::info!("REPLICAOF would result into synchronization with the master we are already connected with. No operation performed.");
                return Reply::Status("OK Already connected to specified master");
            }
        }
    }
    set_master(srv, host.clone(), port);
    tracing::info!("REPLICAOF {host}:{port} enabled (user request from 'id={who}')");
    Reply::Ok
}

/// Follow `host:port` from now on (REPLICAOF, and a failover handing the role to its target).
/// A master's history stays ours: the link continues it with `PSYNC <replid> <offset+1>`.
pub(crate) fn set_master(srv: &Server, host: String, port: u16) {
    if !is_replica(srv) {
        // A master's own history has no stream database to continue in: its new master
        // starts the stream with SELECT (Redis's replicationCacheMasterUsingMyself).
        srv.master_link.stream_db.store(0, Ordering::Relaxed);
    }
    // Clients blocked while this was a master would be served by the new master's stream.
    srv.blocking.unblock_all(
        &srv.keyspace,
        "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)",
    );
    // Our replicas stay: if the new master continues our history (PSYNC) they continue too;
    // they are disconnected when the history changes (a new replication ID, or a full
    // synchronization's data set about to replace ours), as Redis's replicationSetMaster
    // leaves them.
    srv.repl.start_following();
    srv.master_link.follow(host, port);
}

/// Stop following and become a master under a new replication ID (REPLICAOF NO ONE, a
/// PSYNC FAILOVER from our master, an aborted failover).
pub(crate) fn unset_master(srv: &Server) {
    srv.master_link.unfollow();
    srv.repl.become_master();
    // Our replicas must learn the new replication ID: they reconnect and continue with a
    // partial resynchronization (the old ID is our secondary one), as Redis's
    // replicationUnsetMaster makes them.
    srv.repl.disconnect_replicas();
}

/// INFO replication's lines for a replica (after `role:slave`).
pub(crate) fn info_replica(srv: &Server, out: &mut Vec<(String, String)>) {
    let i = srv.master_link.info.lock();
    let Some(l) = i.as_ref() else {
        return;
    };
    let now = crate::clock::unix_ms();
    let up = l.state == Some(LinkState::Connected) && !l.socket_fd.is_some_and(peer_closed);
    out.push(("master_host".into(), l.host.clone()));
    out.push(("master_port".into(), l.port.to_string()));
    out.push((
        "master_link_status".into(),
        if up { "up" } else { "down" }.into(),
    ));
    let io = if l.last_io_ms > 0 {
        ((now - l.last_io_ms) / 1000).to_string()
    } else {
        "-1".into()
    };
    out.push(("master_last_io_seconds_ago".into(), io));
    let syncing = l.state == Some(LinkState::Transfer);
    out.push((
        "master_sync_in_progress".into(),
        if syncing { "1" } else { "0" }.into(),
    ));
    out.push((
        "slave_read_repl_offset".into(),
        (srv.master_link.processed.load(Ordering::Relaxed)
            + srv.master_link.unapplied.load(Ordering::Relaxed))
        .to_string(),
    ));
    out.push((
        "slave_repl_offset".into(),
        srv.master_link
            .processed
            .load(Ordering::Relaxed)
            .to_string(),
    ));
    if syncing {
        out.push((
            "master_sync_total_bytes".into(),
            l.transfer_size.to_string(),
        ));
        out.push(("master_sync_read_bytes".into(), l.transfer_read.to_string()));
        let left = if l.transfer_size >= 0 {
            l.transfer_size - l.transfer_read as i64
        } else {
            0
        };
        out.push(("master_sync_left_bytes".into(), left.to_string()));
        out.push((
            "master_sync_perc".into(),
            if l.transfer_size > 0 {
                format!(
                    "{:.2}",
                    l.transfer_read as f64 * 100.0 / l.transfer_size as f64
                )
            } else {
                "0.00".into()
            },
        ));
        out.push((
            "master_sync_last_io_seconds_ago".into(),
            ((now - l.last_io_ms.max(l.transfer_start_ms)) / 1000).to_string(),
        ));
    }
    if !up {
        out.push((
            "master_link_down_since_seconds".into(),
            ((now - l.down_since_ms) / 1000).to_string(),
        ));
    }
    out.push((
        "slave_priority".into(),
        srv.config.int(dir::REPLICA_PRIORITY).to_string(),
    ));
    out.push((
        "slave_read_only".into(),
        if srv.config.flag(dir::REPLICA_READ_ONLY) {
            "1"
        } else {
            "0"
        }
        .into(),
    ));
    out.push((
        "replica_announced".into(),
        if srv.config.flag(dir::REPLICA_ANNOUNCED) {
            "1"
        } else {
            "0"
        }
        .into(),
    ));
}

#[cfg(test)]
mod tests {
    use super::{peer_closed, MasterLink};
    use std::sync::{Arc, Mutex};

    /// A socket whose peer is open reads as open; once the peer closes, as closed (with
    /// unread data before the end, too).
    #[test]
    fn peer_closed_tells_a_closed_peer() {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut peer =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (ours, _) = listener.accept().expect("accept");
        assert!(!peer_closed(ours.as_raw_fd()));
        peer.write_all(b"+PING\r\n").expect("write");
        drop(peer);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !peer_closed(ours.as_raw_fd()) {
            assert!(
                std::time::Instant::now() < deadline,
                "the close was not seen"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// A master named before the link task starter is registered (a cluster bus message
    /// while the dataset loads) is followed once the starter is there, and only once.
    #[test]
    fn a_master_named_before_the_starter_is_followed_once_it_is_registered() {
        let link = MasterLink::default();
        link.follow("127.0.0.1".into(), 30006);
        let started = Arc::new(Mutex::new(Vec::new()));
        let seen = started.clone();
        link.set_starter(Box::new(move |g| seen.lock().unwrap().push(g)));
        assert_eq!(*started.lock().unwrap(), vec![1]);
        // A later REPLICAOF starts its own generation's task, once.
        link.follow("127.0.0.1".into(), 30007);
        assert_eq!(*started.lock().unwrap(), vec![1, 2]);
        link.unfollow();
        assert_eq!(*started.lock().unwrap(), vec![1, 2]);
    }

    /// With no master named, registering the starter starts nothing.
    #[test]
    fn no_master_no_task() {
        let link = MasterLink::default();
        let started = Arc::new(Mutex::new(0));
        let seen = started.clone();
        link.set_starter(Box::new(move |_| *seen.lock().unwrap() += 1));
        assert_eq!(*started.lock().unwrap(), 0);
    }
}
