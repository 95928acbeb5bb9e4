//! The replication stream as a master keeps it (Redis's replication.c, master half): the
//! replication ID and offset, the backlog a reconnecting replica resumes from, and the
//! registry of replicas with what each has acknowledged.
//!
//! Every write is logged here beside the AOF ([`Replication::feed`], called under the command's
//! shard locks, so the stream's order is the order in which commands touched their keys). One
//! encoding of each command (preceded by `SELECT` when the database changes, as Redis's
//! `slaveseldb`) is appended to the backlog and handed, as one shared buffer, to the mailbox
//! of every attached replica, where the replica class of `client-output-buffer-limit` bounds
//! it. Nothing is encoded while there is neither a backlog nor a replica (the first SYNC
//! creates the backlog, as in Redis, and gives the server a new replication ID).
//!
//! A full synchronization needs the RDB image and the stream to meet at one instant: replicas
//! waiting for it are attached in [`Replication::attach_waiting`], which the BGSAVE runs while
//! it holds every shard lock for its fork. Their stream starts there; the child's image is
//! the data as of that instant (see `persistence::snapshot`). How the image reaches the
//! replica is [`crate::replication`], above.

use crate::config::ObufLimit;
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

/// A replica's progress (Redis's SLAVE_STATE_*).
pub(crate) const WAIT_BGSAVE_START: u8 = 0;
pub(crate) const WAIT_BGSAVE_END: u8 = 1;
pub(crate) const SEND_BULK: u8 = 2;
pub(crate) const ONLINE: u8 = 3;

/// Targets of a logged command (Redis's PROPAGATE_AOF / PROPAGATE_REPL).
pub(crate) const TO_AOF: u8 = 1;
pub(crate) const TO_REPLICAS: u8 = 2;
pub(crate) const TO_ALL: u8 = TO_AOF | TO_REPLICAS;

/// A replica connected to this server.
pub(crate) struct Replica {
    pub(crate) client_id: u64,
    pub(crate) info: Arc<crate::client::ClientInfo>,
    pub(crate) state: AtomicU8,
    /// Set by the connection once it is ready to send the image first: only then may a BGSAVE
    /// attach it (before, its mailbox could be drained ahead of the image).
    pub(crate) ready: AtomicBool,
    /// The offset the full synchronization starts from (+FULLRESYNC's offset).
    pub(crate) initial_offset: AtomicU64,
    /// What the replica acknowledged (REPLCONF ACK).
    pub(crate) ack_offset: AtomicU64,
    /// Unix ms of its last ACK (INFO's lag).
    pub(crate) ack_ms: AtomicI64,
    /// REPLCONF listening-port / ip-address.
    pub(crate) listening_port: u16,
    pub(crate) ip: String,
    /// SYNC rather than PSYNC: no +FULLRESYNC line.
    pub(crate) pre_psync: bool,
    /// The image it waits for is ready (true) or failed (false): set when the BGSAVE ends.
    pub(crate) bgsave_outcome: Mutex<Option<bool>>,
    /// Wakes the connection when `state` or `bgsave_outcome` change.
    pub(crate) changed: Notify,
    /// REPLCONF capa eof: it reads the diskless form (`$EOF:<mark>`).
    pub(crate) capa_eof: bool,
    /// REPLCONF rdb-only 1: the image is all it wants (no stream after it).
    pub(crate) rdb_only: bool,
    /// Unix ms of its SYNC / PSYNC (how long it waited, for `repl-diskless-sync-delay`).
    pub(crate) asked_ms: i64,
    /// The image's bytes when a transfer to sockets serves it (see
    /// `persistence::snapshot::bgsave_to_replicas`): set when it is attached to one.
    pub(crate) rdb_feed: Mutex<Option<tokio::sync::mpsc::Receiver<Bytes>>>,
}

impl Replica {
    pub(crate) fn state(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    pub(crate) fn state_name(&self) -> &'static str {
        match self.state() {
            WAIT_BGSAVE_START | WAIT_BGSAVE_END => "wait_bgsave",
            SEND_BULK => "send_bulk",
            _ => "online",
        }
    }
}

/// The backlog: the last `size` bytes of the stream.
struct Backlog {
    buf: VecDeque<u8>,
    size: usize,
    /// Offset of the first byte held (repl_backlog_first_byte_offset).
    first: u64,
}

struct Stream {
    replid: String,
    replid2: String,
    /// The last offset of `replid2`'s history that is also ours (-1: none).
    second_offset: i64,
    /// master_repl_offset: bytes of stream produced so far.
    offset: u64,
    backlog: Option<Backlog>,
    /// The database the stream last selected (None: the next command selects).
    seldb: Option<usize>,
    replicas: Vec<Arc<Replica>>,
    /// Since when no replica has been connected (for repl-backlog-ttl).
    alone_since_ms: i64,
}

/// What an RDB records of this server's replication history (aux fields `repl-stream-db`,
/// `repl-id`, `repl-offset`), so that a master restarted from the file can keep serving the
/// replicas that followed it with a partial resynchronization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SavedHistory {
    pub replid: String,
    pub offset: u64,
    /// The database the stream last selected (0 when it selected none yet).
    pub stream_db: usize,
}

/// The server's replication state as a master.
pub(crate) struct Replication {
    /// Anything to log: a backlog exists or replicas are connected. Read on every write.
    active: AtomicBool,
    stream: Mutex<Stream>,
    /// INFO stats: sync_full, sync_partial_ok, sync_partial_err.
    pub(crate) sync_full: AtomicU64,
    pub(crate) sync_partial_ok: AtomicU64,
    pub(crate) sync_partial_err: AtomicU64,
    /// Clients blocked in WAIT are woken when an ACK arrives.
    pub(crate) acked: Notify,
    /// Set when a WAIT asks the replicas for their offsets: the cron sends GETACK.
    pub(crate) getack_wanted: AtomicBool,
    /// This server follows a master: its stream is the master's, relayed byte for byte
    /// ([`Replication::feed_raw`]), and its own commands are not logged for replicas.
    following: AtomicBool,
}

fn random_id() -> String {
    (0..40)
        .map(|_| format!("{:x}", rand::random::<u8>() % 16))
        .collect()
}

const ZERO_ID: &str = "0000000000000000000000000000000000000000";

impl Default for Replication {
    fn default() -> Replication {
        Replication {
            active: AtomicBool::new(false),
            stream: Mutex::new(Stream {
                replid: random_id(),
                replid2: ZERO_ID.to_string(),
                second_offset: -1,
                offset: 0,
                backlog: None,
                seldb: None,
                replicas: Vec::new(),
                alone_since_ms: crate::clock::unix_ms(),
            }),
            sync_full: AtomicU64::new(0),
            sync_partial_ok: AtomicU64::new(0),
            sync_partial_err: AtomicU64::new(0),
            acked: Notify::new(),
            getack_wanted: AtomicBool::new(false),
            following: AtomicBool::new(false),
        }
    }
}

/// What a PSYNC asks for, and whether it can continue.
pub(crate) enum Resync {
    /// `+CONTINUE`: the bytes of backlog from the requested offset on were queued.
    Continue { sent: usize },
    /// Needs a full synchronization, with the reason for the log (None: no reason to log).
    Full(Option<String>),
}

impl Replication {
    /// True while writes are logged for replicas (a cheap check for callers that would
    /// otherwise build log entries for nobody).
    #[inline]
    pub(crate) fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire) && !self.following.load(Ordering::Relaxed)
    }

    /// The replica registered for client `id`.
    pub(crate) fn find(&self, id: u64) -> Option<Arc<Replica>> {
        self.stream
            .lock()
            .replicas
            .iter()
            .find(|r| r.client_id == id)
            .cloned()
    }

    /// Replicas online whose last ACK is at most `max_lag` seconds old
    /// (`min-replicas-max-lag`).
    pub(crate) fn good_replicas(&self, max_lag: i64) -> usize {
        let now = crate::clock::unix_ms();
        self.stream
            .lock()
            .replicas
            .iter()
            .filter(|r| {
                r.state() == ONLINE && (now - r.ack_ms.load(Ordering::Relaxed)) / 1000 <= max_lag
            })
            .count()
    }

    /// Bytes waiting in the replicas' output (INFO mem_clients_slaves): not counted against
    /// `maxmemory`, as Redis leaves replica buffers out so that they cannot cause evictions.
    pub(crate) fn replica_buffers_bytes(&self) -> usize {
        if !self.active.load(Ordering::Relaxed) {
            return 0;
        }
        self.stream
            .lock()
            .replicas
            .iter()
            // A killed replica's buffers are counted with the killed clients'.
            .filter(|r| !r.info.killed.load(Ordering::Relaxed))
            .map(|r| r.info.memory_bytes())
            .sum()
    }

    /// Bytes the backlog holds (INFO mem_replication_backlog).
    pub(crate) fn backlog_bytes(&self) -> usize {
        self.stream
            .lock()
            .backlog
            .as_ref()
            .map_or(0, |b| b.buf.capacity())
    }

    /// Close every replica's connection (this server starts following another history).
    pub(crate) fn disconnect_replicas(&self) {
        Self::kill_replicas(&self.stream.lock());
    }

    fn kill_replicas(s: &Stream) {
        for r in &s.replicas {
            r.info.kill();
        }
    }

    /// This server follows a master: it expires nothing itself (the master's DELs do).
    pub(crate) fn is_following(&self) -> bool {
        self.following.load(Ordering::Relaxed)
    }

    /// Close the online replicas that have not acknowledged for `timeout_ms` (repl-timeout),
    /// as Redis's cron does ("Disconnecting timedout replica").
    pub(crate) fn drop_silent_replicas(&self, timeout_ms: i64) {
        let now = crate::clock::unix_ms();
        let s = self.stream.lock();
        for r in &s.replicas {
            // A replica of the SYNC era never acknowledges (Redis skips those too).
            if r.state() == ONLINE
                && !r.pre_psync
                && now - r.ack_ms.load(Ordering::Relaxed) > timeout_ms
            {
                tracing::warn!(
                    "Disconnecting timedout replica (streaming sync): {}",
                    r.describe()
                );
                r.info.kill();
            }
        }
    }

    /// This server follows a master from now on: nothing of its own reaches its replicas.
    pub(crate) fn start_following(&self) {
        self.following.store(true, Ordering::Release);
        crate::log::set_replica(true);
    }

    /// A full synchronization from the master gave us its history `replid` up to `offset`:
    /// adopt it, with an empty backlog that the relayed stream fills. Our replicas hold the
    /// data just replaced: they are disconnected and resynchronize in full (Redis's
    /// replicationAttachToNewMaster).
    pub(crate) fn adopt_history(&self, replid: &str, offset: u64, backlog_size: usize) {
        let mut s = self.stream.lock();
        Self::kill_replicas(&s);
        s.replid = replid.to_string();
        s.replid2 = ZERO_ID.to_string();
        s.second_offset = -1;
        s.offset = offset;
        s.seldb = None;
        s.backlog = Some(Backlog {
            buf: VecDeque::new(),
            size: backlog_size.max(1),
            first: offset + 1,
        });
        self.active.store(true, Ordering::Release);
    }

    /// The history an RDB written now records, as Redis's rdbPopulateSaveInfo: a master's
    /// that has a backlog (replicas have followed it), or a replica's once it has synchronized
    /// (its master's ID and the offset it applied up to, with `master_stream_db`, the database
    /// the master's stream has selected); None otherwise. Read with every shard locked, so
    /// nothing is logged or applied between this and the image.
    pub(crate) fn saved_history(&self, master_stream_db: usize) -> Option<SavedHistory> {
        let s = self.stream.lock();
        s.backlog.as_ref()?;
        let stream_db = if self.is_following() {
            master_stream_db
        } else {
            s.seldb.unwrap_or(0)
        };
        Some(SavedHistory {
            replid: s.replid.clone(),
            offset: s.offset,
            stream_db,
        })
    }

    /// A master started from an RDB that recorded `saved` (Redis's loadDataFromDisk): that
    /// history becomes the secondary ID, valid up to its end, and this server's offset
    /// continues from it with a backlog, so a replica that followed it continues with a
    /// partial resynchronization. `expired` are the keys the load dropped as expired: they
    /// are logged first (`del`: DEL, or UNLINK under lazyfree-lazy-expire), as Redis feeds
    /// them, so the replicas drop them too.
    pub(crate) fn resume_history(
        &self,
        saved: &SavedHistory,
        backlog_size: usize,
        expired: &[(usize, Vec<u8>)],
        del: &'static str,
        limit: ObufLimit,
    ) {
        {
            let mut s = self.stream.lock();
            s.seldb = None;
            s.backlog = Some(Backlog {
                buf: VecDeque::new(),
                size: backlog_size.max(1),
                first: s.offset + 1,
            });
            self.active.store(true, Ordering::Release);
        }
        let del = Bytes::from_static(del.as_bytes());
        for (db, key) in expired {
            self.feed(
                Some(*db),
                &[del.clone(), Bytes::copy_from_slice(key)],
                limit,
            );
        }
        let mut s = self.stream.lock();
        s.replid2 = saved.replid.clone();
        s.second_offset = saved.offset as i64 + 1;
        s.offset += saved.offset;
        let offset = s.offset;
        if let Some(b) = s.backlog.as_mut() {
            b.first = offset + 1 - b.buf.len() as u64;
        }
        s.alone_since_ms = crate::clock::unix_ms();
        tracing::info!(
            "Secondary replication ID {} from the RDB file, valid up to offset {}; replication ID {}",
            s.replid2,
            s.second_offset,
            s.replid
        );
    }

    /// The master continued our history under a new ID (+CONTINUE with another replid). Our
    /// replicas follow the old ID: they are disconnected, and continue under the new one (a
    /// PSYNC with the old ID is served from the secondary ID), as Redis does.
    pub(crate) fn switch_id(&self, new_replid: &str) {
        let mut s = self.stream.lock();
        if s.replid != new_replid {
            s.replid2 = std::mem::replace(&mut s.replid, new_replid.to_string());
            s.second_offset = s.offset as i64 + 1;
            Self::kill_replicas(&s);
        }
    }

    /// Our history, for a PSYNC to a master: (replid, offset), None before any.
    pub(crate) fn history(&self) -> Option<(String, u64)> {
        let s = self.stream.lock();
        s.backlog.as_ref().map(|_| (s.replid.clone(), s.offset))
    }

    /// DEBUG CHANGE-REPL-ID: a new ID, the secondary one cleared.
    pub(crate) fn change_id(&self) {
        let mut s = self.stream.lock();
        s.replid = random_id();
        s.replid2 = ZERO_ID.to_string();
        s.second_offset = -1;
    }

    /// REPLICAOF NO ONE: keep serving the old history to replicas that followed the same
    /// master (they may PSYNC with the old ID up to here), under a new ID from now on.
    pub(crate) fn become_master(&self) {
        let mut s = self.stream.lock();
        s.replid2 = std::mem::replace(&mut s.replid, random_id());
        s.second_offset = s.offset as i64 + 1;
        s.seldb = None;
        self.following.store(false, Ordering::Release);
        crate::log::set_replica(false);
        tracing::info!(
            "Setting secondary replication ID to {}, valid up to offset: {}. New replication ID is {}",
            s.replid2,
            s.second_offset,
            s.replid
        );
    }

    /// Relay bytes of the master's stream (a replica passes on exactly what it applied).
    pub(crate) fn feed_raw(&self, bytes: &[u8], limit: ObufLimit) {
        let mut s = self.stream.lock();
        self.append(&mut s, bytes.to_vec(), limit);
    }

    pub(crate) fn replid(&self) -> String {
        self.stream.lock().replid.clone()
    }

    pub(crate) fn offset(&self) -> u64 {
        self.stream.lock().offset
    }

    /// Log one command for database `db` (None: no SELECT, as the cron's PING).
    pub(crate) fn feed(&self, db: Option<usize>, argv: &[Bytes], limit: ObufLimit) {
        if !self.is_active() {
            return;
        }
        let mut out = Vec::with_capacity(64);
        let mut s = self.stream.lock();
        if let Some(db) = db {
            if s.seldb != Some(db) {
                crate::protocol::encode_select(&mut out, db);
                s.seldb = Some(db);
            }
        }
        crate::protocol::encode_command(&mut out, argv);
        self.append(&mut s, out, limit);
    }

    /// Log several commands as one unbroken run (a script's MULTI ... EXEC).
    pub(crate) fn feed_all(&self, cmds: &[(usize, &[Bytes])], limit: ObufLimit) {
        if !self.is_active() || cmds.is_empty() {
            return;
        }
        let mut out = Vec::with_capacity(256);
        let mut s = self.stream.lock();
        for (db, argv) in cmds {
            if s.seldb != Some(*db) {
                crate::protocol::encode_select(&mut out, *db);
                s.seldb = Some(*db);
            }
            crate::protocol::encode_command(&mut out, argv);
        }
        self.append(&mut s, out, limit);
    }

    fn append(&self, s: &mut Stream, out: Vec<u8>, limit: ObufLimit) {
        s.offset += out.len() as u64;
        if let Some(b) = s.backlog.as_mut() {
            b.buf.extend(out.iter().copied());
            if b.buf.len() > b.size {
                let drop_n = b.buf.len() - b.size;
                b.buf.drain(..drop_n);
                b.first += drop_n as u64;
            }
        }
        if s.replicas.is_empty() {
            return;
        }
        let msg = Bytes::from(out);
        let now = crate::clock::unix_ms();
        for r in &s.replicas {
            if r.state() == WAIT_BGSAVE_START {
                continue;
            }
            if !r.info.push.push(msg.clone(), limit, now) {
                tracing::warn!(
                    "Client id={} addr={} closed for overcoming of output buffer limits.",
                    r.client_id,
                    r.info.addr
                );
                r.info.kill();
            }
        }
    }

    /// A replica asks for a synchronization: register it (waiting for a BGSAVE). The first
    /// replica creates the backlog and a new replication ID, as Redis does.
    pub(crate) fn add_replica(&self, r: Arc<Replica>, backlog_size: usize) {
        let mut s = self.stream.lock();
        if s.backlog.is_none() && s.replicas.is_empty() {
            s.replid = random_id();
            s.replid2 = ZERO_ID.to_string();
            s.second_offset = -1;
            s.backlog = Some(Backlog {
                buf: VecDeque::new(),
                size: backlog_size.max(1),
                first: s.offset + 1,
            });
            tracing::info!(
                "Replication backlog created, my new replication IDs are '{}' and '{}'",
                s.replid,
                s.replid2
            );
        }
        s.replicas.push(r);
        self.active.store(true, Ordering::Release);
    }

    /// Forget a replica (its connection closed). True when it was waiting for a BGSAVE's
    /// end and no other replica still does (that BGSAVE may have no use left).
    pub(crate) fn remove_replica(&self, client_id: u64) -> bool {
        let mut s = self.stream.lock();
        let before = s.replicas.len();
        let was_waiting = s
            .replicas
            .iter()
            .any(|r| r.client_id == client_id && r.state() == WAIT_BGSAVE_END);
        s.replicas.retain(|r| r.client_id != client_id);
        if s.replicas.len() != before && s.replicas.is_empty() {
            s.alone_since_ms = crate::clock::unix_ms();
        }
        was_waiting && !s.replicas.iter().any(|r| r.state() == WAIT_BGSAVE_END)
    }

    /// Whether a BGSAVE for the replicas waiting for one is due now, and its target: Some(true)
    /// for their sockets, Some(false) for the disk, None while none is due (Redis's
    /// shouldStartChildReplication). With `repl-diskless-sync` (`diskless`) the transfer waits
    /// until the longest-waiting replica waited `delay` seconds or `max_replicas` (when not 0)
    /// are waiting, so that replicas arriving meanwhile share it; it goes to sockets when every
    /// waiting replica reads the diskless form.
    pub(crate) fn replication_bgsave_due(
        &self,
        diskless: bool,
        delay: i64,
        max_replicas: i64,
    ) -> Option<bool> {
        let s = self.stream.lock();
        let now = crate::clock::unix_ms();
        let waiting: Vec<&Arc<Replica>> = s
            .replicas
            .iter()
            .filter(|r| r.state() == WAIT_BGSAVE_START && r.ready.load(Ordering::Acquire))
            .collect();
        if waiting.is_empty() {
            return None;
        }
        let all_eof = waiting.iter().all(|r| r.capa_eof);
        let max_idle = waiting
            .iter()
            .map(|r| (now - r.asked_ms) / 1000)
            .max()
            .unwrap_or(0);
        let due = !diskless
            || (max_replicas > 0 && waiting.len() as i64 >= max_replicas)
            || max_idle >= delay;
        due.then_some(diskless && all_eof)
    }

    /// Attach every ready replica waiting for a BGSAVE to the one starting now. Called by the
    /// BGSAVE while it holds every shard lock: no command runs, so the stream from here on is
    /// exactly what the image does not hold. The next command selects its database. For a
    /// transfer to sockets (`to_sockets`) each gets the receiving end of a channel the
    /// image's bytes come through; the sending ends are returned, with the replicas.
    pub(crate) fn attach_waiting(
        &self,
        to_sockets: bool,
    ) -> Vec<(Arc<Replica>, Option<tokio::sync::mpsc::Sender<Bytes>>)> {
        let mut s = self.stream.lock();
        let offset = s.offset;
        let mut attached = Vec::new();
        for r in &s.replicas {
            if r.state() == WAIT_BGSAVE_START && r.ready.load(Ordering::Acquire) {
                let tx = to_sockets.then(|| {
                    // A few chunks in flight per replica: the transfer goes at the pace of
                    // the slowest reader, as Redis's does.
                    let (tx, rx) = tokio::sync::mpsc::channel(4);
                    *r.rdb_feed.lock() = Some(rx);
                    tx
                });
                r.initial_offset.store(offset, Ordering::Release);
                r.state.store(WAIT_BGSAVE_END, Ordering::Release);
                r.changed.notify_one();
                attached.push((r.clone(), tx));
            }
        }
        if !attached.is_empty() {
            s.seldb = None;
        }
        attached
    }

    /// A replica arriving while a BGSAVE to disk runs joins it when another replica waits for
    /// that BGSAVE's file (so the image's instant is a replica's stream start) and the backlog
    /// still holds the stream since then: that stream is copied to its mailbox, and it waits
    /// for the same file (Redis's syncCommand, "Waiting for end of BGSAVE for SYNC", which
    /// copies the other replica's output buffer). False when it must wait for the next BGSAVE.
    pub(crate) fn attach_to_running_disk_save(&self, r: &Arc<Replica>) -> bool {
        let s = self.stream.lock();
        // A replica that wants the stream cannot start from one that gets none.
        let Some(peer) = s.replicas.iter().find(|p| {
            p.client_id != r.client_id
                && p.state() == WAIT_BGSAVE_END
                && p.rdb_feed.lock().is_none()
                && (!p.rdb_only || r.rdb_only)
        }) else {
            return false;
        };
        // It must read every form the BGSAVE's first replica reads.
        if peer.capa_eof && !r.capa_eof {
            return false;
        }
        let from = peer.initial_offset.load(Ordering::Acquire);
        let Some(b) = s.backlog.as_ref() else {
            return false;
        };
        // The backlog holds offsets b.first .. b.first + len - 1; the stream after the image
        // starts at from + 1.
        if from + 1 < b.first || from > s.offset {
            return false;
        }
        let skip = (from + 1 - b.first) as usize;
        let tail: Vec<u8> = b.buf.iter().skip(skip).copied().collect();
        if !tail.is_empty() {
            r.info.push.push_unlimited(Bytes::from(tail));
        }
        r.initial_offset.store(from, Ordering::Release);
        *r.bgsave_outcome.lock() = None;
        r.state.store(WAIT_BGSAVE_END, Ordering::Release);
        r.changed.notify_one();
        true
    }

    /// Put a waiting replica online at once, its stream starting now (an image that holds no
    /// data needs no snapshot instant).
    pub(crate) fn attach_now(&self, r: &Arc<Replica>) {
        let mut s = self.stream.lock();
        r.initial_offset.store(s.offset, Ordering::Release);
        r.ack_ms.store(crate::clock::unix_ms(), Ordering::Relaxed);
        r.state.store(ONLINE, Ordering::Release);
        s.seldb = None;
    }

    /// The BGSAVE the waiting replicas were attached to ended. When it failed their
    /// connections close (a transfer to sockets may hold them in the middle of a write).
    pub(crate) fn bgsave_done(&self, ok: bool) {
        let s = self.stream.lock();
        for r in &s.replicas {
            if r.state() == WAIT_BGSAVE_END {
                *r.bgsave_outcome.lock() = Some(ok);
                r.changed.notify_one();
                if !ok {
                    tracing::warn!("SYNC failed. BGSAVE child returned an error");
                    r.info.kill();
                }
            }
        }
    }

    /// A BGSAVE for replicas could not start: the ones waiting for it are told and closed.
    pub(crate) fn bgsave_failed_to_start(&self) {
        let s = self.stream.lock();
        for r in &s.replicas {
            if r.state() == WAIT_BGSAVE_START && r.ready.load(Ordering::Acquire) {
                *r.bgsave_outcome.lock() = Some(false);
                r.changed.notify_one();
            }
        }
    }

    /// PSYNC `replid` `offset`: continue from the backlog when it holds that history, queueing
    /// `+CONTINUE` and the missing bytes into the replica's mailbox, all under the stream's
    /// lock so that no command is logged in between.
    pub(crate) fn try_partial(
        &self,
        r: &Arc<Replica>,
        replid: &str,
        offset: i64,
        psync2: bool,
    ) -> Resync {
        let mut s = self.stream.lock();
        if replid != s.replid && (replid != s.replid2 || offset > s.second_offset) {
            if replid == "?" {
                return Resync::Full(None);
            }
            let why = if replid != s.replid2 {
                format!(
                    "Replication ID mismatch (Replica asked for '{replid}', my replication IDs are '{}' and '{}')",
                    s.replid, s.replid2
                )
            } else {
                format!(
                    "Requested offset for second ID was {offset}, but I can reply up to {}",
                    s.second_offset
                )
            };
            return Resync::Full(Some(why));
        }
        let Some(b) = s.backlog.as_ref() else {
            return Resync::Full(Some(format!(
                "Unable to partial resync with replica {} for lack of backlog (Replica request was: {offset}).",
                r.describe()
            )));
        };
        if offset < b.first as i64 || offset > (b.first + b.buf.len() as u64) as i64 {
            return Resync::Full(Some(format!(
                "Unable to partial resync with replica {} for lack of backlog (Replica request was: {offset}).",
                r.describe()
            )));
        }
        let skip = (offset as u64 - b.first) as usize;
        let mut msg = Vec::with_capacity(b.buf.len() - skip + 60);
        if psync2 {
            msg.extend_from_slice(format!("+CONTINUE {}\r\n", s.replid).as_bytes());
        } else {
            msg.extend_from_slice(b"+CONTINUE\r\n");
        }
        let head = msg.len();
        msg.extend(b.buf.iter().skip(skip).copied());
        let sent = msg.len() - head;
        r.info.push.push_unlimited(Bytes::from(msg));
        r.state.store(ONLINE, Ordering::Release);
        r.ack_ms.store(crate::clock::unix_ms(), Ordering::Relaxed);
        s.replicas.push(r.clone());
        self.active.store(true, Ordering::Release);
        Resync::Continue { sent }
    }

    /// The replicas, for INFO, ROLE, WAIT and the cron.
    pub(crate) fn replicas(&self) -> Vec<Arc<Replica>> {
        self.stream.lock().replicas.clone()
    }

    /// How many replicas acknowledged at least `offset`.
    pub(crate) fn acked_at_least(&self, offset: u64) -> usize {
        self.stream
            .lock()
            .replicas
            .iter()
            .filter(|r| r.state() == ONLINE && r.ack_offset.load(Ordering::Acquire) >= offset)
            .count()
    }

    /// The cron's share (once a second): PING the replicas every `ping_period` seconds and
    /// drop the backlog after `ttl` seconds without replicas. No PING while `failing_over`:
    /// the failover waits for a replica to acknowledge our last offset, which a PING would
    /// move.
    pub(crate) fn cron(
        &self,
        tick: u64,
        ping_period: u64,
        ttl: i64,
        limit: ObufLimit,
        failing_over: bool,
    ) {
        let has_online = self
            .stream
            .lock()
            .replicas
            .iter()
            .any(|r| r.state() == ONLINE);
        if has_online && !failing_over && ping_period > 0 && tick.is_multiple_of(ping_period) {
            self.feed(None, &[Bytes::from_static(b"PING")], limit);
        }
        let mut s = self.stream.lock();
        if ttl > 0
            && s.replicas.is_empty()
            && s.backlog.is_some()
            && crate::clock::unix_ms() - s.alone_since_ms > ttl * 1000
        {
            // As Redis: a new ID, so that a replica cannot resume from a history we forgot.
            s.replid2 = ZERO_ID.to_string();
            s.second_offset = -1;
            s.replid = random_id();
            s.backlog = None;
            self.active.store(false, Ordering::Release);
            tracing::info!(
                "Replication backlog freed after {ttl} seconds without connected replicas."
            );
        }
    }

    /// CONFIG SET repl-backlog-size: resize, keeping the newest bytes.
    pub(crate) fn resize_backlog(&self, size: usize) {
        let mut s = self.stream.lock();
        if let Some(b) = s.backlog.as_mut() {
            b.size = size.max(1);
            if b.buf.len() > b.size {
                let n = b.buf.len() - b.size;
                b.buf.drain(..n);
                b.first += n as u64;
            }
        }
    }

    /// INFO replication's master fields after role and connected_slaves' lines.
    /// `failover_state` is `master_failover_state`'s value (see `state::failover`).
    pub(crate) fn info_master(&self, out: &mut Vec<(String, String)>, failover_state: &str) {
        let s = self.stream.lock();
        out.push(("connected_slaves".into(), s.replicas.len().to_string()));
        let now = crate::clock::unix_ms();
        for (i, r) in s.replicas.iter().enumerate() {
            let lag = (now - r.ack_ms.load(Ordering::Relaxed)).max(0) / 1000;
            out.push((
                format!("slave{i}"),
                format!(
                    "ip={},port={},state={},offset={},lag={}",
                    r.ip,
                    r.listening_port,
                    r.state_name(),
                    r.ack_offset.load(Ordering::Relaxed),
                    lag
                ),
            ));
        }
        out.push(("master_failover_state".into(), failover_state.into()));
        out.push(("master_replid".into(), s.replid.clone()));
        out.push(("master_replid2".into(), s.replid2.clone()));
        out.push(("master_repl_offset".into(), s.offset.to_string()));
        out.push(("second_repl_offset".into(), s.second_offset.to_string()));
        match &s.backlog {
            Some(b) => {
                out.push(("repl_backlog_active".into(), "1".into()));
                out.push(("repl_backlog_size".into(), b.size.to_string()));
                out.push(("repl_backlog_first_byte_offset".into(), b.first.to_string()));
                out.push(("repl_backlog_histlen".into(), b.buf.len().to_string()));
            }
            None => {
                out.push(("repl_backlog_active".into(), "0".into()));
                out.push(("repl_backlog_size".into(), "0".into()));
                out.push(("repl_backlog_first_byte_offset".into(), "0".into()));
                out.push(("repl_backlog_histlen".into(), "0".into()));
            }
        }
    }
}

impl Replica {
    /// `ip:port` as Redis names a replica in its log.
    pub(crate) fn describe(&self) -> String {
        format!("{}:{}", self.ip, self.listening_port)
    }
}
