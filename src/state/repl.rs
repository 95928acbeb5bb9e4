//! The replication stream as a master keeps it (Redis's replication.c, master half): the
//! replication ID and offset, the backlog a reconnecting replica resumes from, and the
//! registry of replicas with what each has acknowledged.
//!
//! Every write is logged here beside the AOF ([`Replication::feed`], called under the command's
//! shard locks, so the stream's order is the order in which commands touched their keys). One
//! encoding of each command (preceded by `SELECT` when the database changes, as Redis's
//! `slaveseldb`) is written once into the replication buffer that the backlog and every
//! replica share, as Redis 7.0's (`SharedBuf`): a list of blocks; the backlog is the history
//! from the first block on, and each replica's connection copies the stream from its own
//! cursor as its socket takes it ([`Replication::pull`]). A block goes once no replica's cursor
//! is in it and the backlog holds `repl-backlog-size` bytes without it, so a lagging replica
//! keeps the history since its cursor (another replica can continue from it), and the
//! backlog shrinks back, a bounded number of blocks at a time, once it catches up or goes.
//! INFO's `mem_total_replication_buffers` is the blocks' memory; a replica's output (CLIENT
//! LIST `tot-mem`, and what the replica class of `client-output-buffer-limit` bounds) is the
//! blocks from its cursor's on. Nothing is encoded while there is neither a backlog nor a
//! replica (the first SYNC creates the backlog, as in Redis, and gives the server a new
//! replication ID).
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
    /// The stream offset of the next byte its connection takes from the shared buffer; 0
    /// while it reads none (waiting for a BGSAVE to start, or wanting the image only).
    /// Changed under the stream's lock.
    pub(crate) cursor: AtomicU64,
    /// Unix ms since when what it references has been over the soft output buffer limit; 0
    /// when it is not.
    pub(crate) soft_since_ms: AtomicI64,
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

/// The backlog: the history the shared buffer holds, at least the last `size` bytes of the
/// stream (more while a replica still reads older ones).
struct Backlog {
    size: usize,
}

/// The bytes of one block's bookkeeping, counted with its allocation in the buffer's memory
/// (as Redis counts its list node and block header).
const BLOCK_OVERHEAD: usize = std::mem::size_of::<Block>();

/// A block of the shared replication buffer: a run of the stream, filled to its allocation
/// before the next block starts.
struct Block {
    /// The stream offset of its first byte.
    start: u64,
    data: Vec<u8>,
    /// The memory (allocation and overhead) of every block created before this one: the
    /// memory from a block to the tail is the buffer's total less this.
    mem_before: u64,
}

impl Block {
    /// The offset just past its last byte.
    fn end(&self) -> u64 {
        self.start + self.data.len() as u64
    }

    fn mem(&self) -> u64 {
        (self.data.capacity() + BLOCK_OVERHEAD) as u64
    }
}

/// The replication buffer the backlog and every replica share (Redis 7.0's replication
/// buffer blocks): the stream is written once, into blocks; the backlog is the history from
/// the first block on, and each replica reads it from its own cursor. A block is freed only
/// when no replica's cursor is in it or before it and the backlog holds `size` bytes without
/// it, so a replica that lags (or waits for its image) keeps the history since its cursor, and
/// the backlog is that long until it catches up or goes.
#[derive(Default)]
struct SharedBuf {
    blocks: VecDeque<Block>,
    /// The memory of every block created so far (see [`Block::mem_before`]).
    mem_created: u64,
}

/// The most blocks one trim frees: a replica that held a long history and went away leaves
/// many, and freeing them is spread over the next writes and the cron (Redis's
/// REPL_BACKLOG_TRIM_BLOCKS_PER_CALL, and ten times that in its cron).
const TRIM_BLOCKS_PER_CALL: usize = 1024;

/// Blocks are at least this size (Redis's PROTO_REPLY_CHUNK_BYTES), so small commands share
/// them, and at most a sixteenth of the backlog's size when that is larger, so that a block a
/// replica still needs a little of does not keep much more than that.
const BLOCK_MIN: usize = 16 * 1024;

impl SharedBuf {
    /// Memory the blocks hold (mem_total_replication_buffers), with the list's room for
    /// more.
    fn mem(&self) -> usize {
        let spare = (self.blocks.capacity() - self.blocks.len()) * BLOCK_OVERHEAD;
        self.blocks
            .front()
            .map_or(0, |b| (self.mem_created - b.mem_before) as usize)
            + spare
    }

    /// Offset of the first byte held, `next` when none is (`next`: the stream's next offset).
    fn first(&self, next: u64) -> u64 {
        self.blocks.front().map_or(next, |b| b.start)
    }

    /// Append `bytes`, which start at stream offset `at`; true when a block was added.
    fn append(&mut self, mut bytes: &[u8], mut at: u64, backlog_size: usize) -> bool {
        let mut added = false;
        if let Some(tail) = self.blocks.back_mut() {
            let room = tail.data.capacity() - tail.data.len();
            let n = room.min(bytes.len());
            tail.data.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            at += n as u64;
        }
        let most = (backlog_size / 16).max(BLOCK_MIN);
        while !bytes.is_empty() {
            let size = bytes.len().clamp(BLOCK_MIN, most);
            let mut data = Vec::with_capacity(size);
            let n = data.capacity().min(bytes.len());
            data.extend_from_slice(&bytes[..n]);
            let block = Block {
                start: at,
                data,
                mem_before: self.mem_created,
            };
            self.mem_created += block.mem();
            self.blocks.push_back(block);
            bytes = &bytes[n..];
            at += n as u64;
            added = true;
        }
        added
    }

    /// Index of the block a reader at `cursor` references: the one holding that byte, or the
    /// last when it has read everything (it keeps that one, as a Redis replica keeps the block
    /// it last wrote from).
    fn index_of(&self, cursor: u64) -> usize {
        self.blocks
            .partition_point(|b| b.end() <= cursor)
            .min(self.blocks.len().saturating_sub(1))
    }

    /// The memory a reader at `cursor` references: its block and every block after it (Redis's
    /// getClientOutputBufferMemoryUsage for a replica).
    fn referenced_by(&self, cursor: u64) -> usize {
        match self.blocks.get(self.index_of(cursor)) {
            Some(b) => (self.mem_created - b.mem_before) as usize,
            None => 0,
        }
    }

    /// Copy up to `max` bytes from `cursor` on into `out`; the new cursor.
    fn copy_from(&self, mut cursor: u64, out: &mut Vec<u8>, max: usize) -> u64 {
        let mut left = max;
        let mut i = self.index_of(cursor);
        while left > 0 {
            let Some(b) = self.blocks.get(i) else { break };
            if cursor >= b.end() {
                i += 1;
                continue;
            }
            let from = cursor.saturating_sub(b.start) as usize;
            let n = (b.data.len() - from).min(left);
            out.extend_from_slice(&b.data[from..from + n]);
            cursor += n as u64;
            left -= n;
            i += 1;
        }
        cursor
    }

    /// Free first blocks that nobody needs: none of `cursors` is in them, and the history
    /// after them is still longer than `backlog_size`. At most `max_blocks` go; the first block
    /// always stays. The number of blocks freed.
    fn trim(
        &mut self,
        backlog_size: usize,
        oldest_cursor: Option<u64>,
        max_blocks: usize,
    ) -> usize {
        let mut histlen: u64 = match (self.blocks.front(), self.blocks.back()) {
            (Some(f), Some(l)) => l.end() - f.start,
            _ => return 0,
        };
        let mut freed = 0;
        while freed < max_blocks && self.blocks.len() > 1 {
            let Some(front) = self.blocks.front() else {
                break;
            };
            if oldest_cursor.is_some_and(|c| c < front.end()) {
                break;
            }
            let len = front.data.len() as u64;
            if histlen.saturating_sub(len) <= backlog_size as u64 {
                break;
            }
            histlen -= len;
            self.blocks.pop_front();
            freed += 1;
        }
        // The list gives back room that a long history left it.
        if freed > 0 && self.blocks.capacity() > 4 * self.blocks.len() + 64 {
            self.blocks.shrink_to(2 * self.blocks.len());
        }
        freed
    }

    /// Move every block's offsets by `by` (the history continues one loaded from an RDB).
    fn rebase(&mut self, by: u64) {
        for b in &mut self.blocks {
            b.start += by;
        }
    }

    fn clear(&mut self) {
        self.blocks = VecDeque::new();
    }
}

struct Stream {
    replid: String,
    replid2: String,
    /// The last offset of `replid2`'s history that is also ours (-1: none).
    second_offset: i64,
    /// master_repl_offset: bytes of stream produced so far.
    offset: u64,
    backlog: Option<Backlog>,
    /// The stream's bytes the backlog and the replicas share (empty while there is no
    /// backlog).
    buf: SharedBuf,
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
                buf: SharedBuf::default(),
                seldb: None,
                replicas: Vec::new(),
                alone_since_ms: crate::clock::unix_ms(),
            }),
            sync_full: AtomicU64::new(0),
            sync_partial_ok: AtomicU64::new(0),
            sync_partial_err: AtomicU64::new(0),
            acked: Notify::new(),
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

    /// [`crate::alloc::used_memory`] and [`Replication::replica_buffers_in`] at one instant
    /// as far as the shared buffer goes: its blocks are freed under the stream's lock, so both
    /// are read under it. Read apart, a trim in another thread between the two reads (a killed
    /// replica's history going at once) left the freed blocks in used_memory and out of the
    /// buffers' figure, and their difference, what `maxmemory` counts, jumped by megabytes.
    pub(crate) fn used_memory_and_replica_buffers(&self) -> (usize, usize) {
        if !self.active.load(Ordering::Relaxed) {
            return (crate::alloc::used_memory(), 0);
        }
        let s = self.stream.lock();
        (crate::alloc::used_memory(), Self::replica_buffers_in(&s))
    }

    /// Memory of the replicas' output not counted against `maxmemory` (part of INFO
    /// mem_not_counted_for_evict), as Redis leaves replica buffers out so that they cannot
    /// cause evictions: each replica's own buffers, and the shared buffer's memory past what a
    /// backlog of its configured size takes (Redis's freeMemoryGetNotCountedMemory).
    fn replica_buffers_in(s: &Stream) -> usize {
        let own: usize = s
            .replicas
            .iter()
            // A killed replica's buffers are counted with the killed clients'.
            .filter(|r| !r.info.killed.load(Ordering::Relaxed))
            .map(|r| r.info.memory_bytes() - r.info.stream_ref_bytes())
            .sum();
        let mem = s.buf.mem();
        let size = s.backlog.as_ref().map_or(0, |b| b.size);
        let shared = if mem > size {
            // The blocks' bookkeeping of a backlog of that size, roughly (as Redis estimates
            // it).
            let counted = size + (size / BLOCK_MIN + 1) * BLOCK_OVERHEAD;
            mem.saturating_sub(counted)
        } else {
            0
        };
        own + shared
    }

    /// The shared buffer's memory (INFO mem_total_replication_buffers).
    pub(crate) fn buffer_bytes(&self) -> usize {
        self.stream.lock().buf.mem()
    }

    /// The shared buffer's memory as Redis divides it between the backlog and the replicas
    /// (INFO mem_replication_backlog and part of mem_clients_slaves): with replicas, what is
    /// past the backlog's configured size is theirs.
    pub(crate) fn buffer_shares(&self) -> (usize, usize) {
        let s = self.stream.lock();
        let mem = s.buf.mem();
        let size = s.backlog.as_ref().map_or(0, |b| b.size);
        if !s.replicas.is_empty() && mem > size {
            (size, mem - size)
        } else {
            (mem, 0)
        }
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
            size: backlog_size.max(1),
        });
        s.buf.clear();
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
                size: backlog_size.max(1),
            });
            s.buf.clear();
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
        // What the expired keys logged continues the loaded history (Redis's
        // rebaseReplicationBuffer).
        s.buf.rebase(saved.offset);
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
        self.append(&mut s, bytes, limit);
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
        self.append(&mut s, &out, limit);
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
        self.append(&mut s, &out, limit);
    }

    /// Write `out` into the shared buffer and wake the replicas reading it. When that takes
    /// a new block, each replica's output is checked against its limit, as Redis checks it
    /// then, and the backlog gives back the blocks nobody needs any more.
    fn append(&self, s: &mut Stream, out: &[u8], limit: ObufLimit) {
        let at = s.offset + 1;
        s.offset += out.len() as u64;
        // No backlog, no reader: one exists whenever a replica is attached.
        let Some(size) = s.backlog.as_ref().map(|b| b.size) else {
            return;
        };
        let added = s.buf.append(out, at, size);
        let now = crate::clock::unix_ms();
        for r in &s.replicas {
            let cursor = r.cursor.load(Ordering::Relaxed);
            if cursor == 0 || r.info.killed.load(Ordering::Relaxed) {
                continue;
            }
            if added {
                let used = s.buf.referenced_by(cursor);
                r.info.set_stream_ref_bytes(used);
                if over_output_limit(r, used, limit, size, now) {
                    close_for_output_limit(r);
                    continue;
                }
            }
            r.info.push.stream_ready();
        }
        if added {
            Self::trim(s, TRIM_BLOCKS_PER_CALL);
        }
    }

    /// Free the blocks of history nobody needs (see [`SharedBuf::trim`]).
    fn trim(s: &mut Stream, max_blocks: usize) {
        let Some(size) = s.backlog.as_ref().map(|b| b.size) else {
            return;
        };
        // A killed replica reads nothing more: what only it held goes now, as Redis frees
        // such a client (and its references) at once.
        let oldest = s
            .replicas
            .iter()
            .filter(|r| !r.info.killed.load(Ordering::Relaxed))
            .map(|r| r.cursor.load(Ordering::Relaxed))
            .filter(|&c| c != 0)
            .min();
        s.buf.trim(size, oldest, max_blocks);
    }

    /// Copy into `out` up to `max` bytes of the stream that replica `client_id` has not taken
    /// yet, moving its cursor past them; true when more is left after them. Its connection
    /// calls this as its socket takes what it has, so a replica's output is the shared
    /// buffer's blocks from its cursor on plus at most `max` bytes of its own. `out`'s new
    /// allocation is stored in `out_held` under the stream's lock, which
    /// [`Replication::used_memory_and_replica_buffers`] takes: `maxmemory`'s count never sees the
    /// allocation without it (a replica's buffers are not counted).
    pub(crate) fn pull(
        &self,
        client_id: u64,
        out: &mut Vec<u8>,
        max: usize,
        out_held: &std::sync::atomic::AtomicUsize,
    ) -> bool {
        let mut s = self.stream.lock();
        let Some(r) = s.replicas.iter().find(|r| r.client_id == client_id) else {
            return false;
        };
        let cursor = r.cursor.load(Ordering::Relaxed);
        let next = s.offset + 1;
        if cursor == 0
            || cursor >= next
            || cursor < s.buf.first(next)
            || r.info.killed.load(Ordering::Relaxed)
        {
            return false;
        }
        let before = s.buf.index_of(cursor);
        out.reserve(max.min((next - cursor) as usize));
        out_held.store(out.capacity(), Ordering::Relaxed);
        let moved = s.buf.copy_from(cursor, out, max);
        r.cursor.store(moved, Ordering::Relaxed);
        r.info.set_stream_ref_bytes(s.buf.referenced_by(moved));
        let more = moved < next;
        // Past a block it may have been the last to need.
        if s.buf.index_of(moved) != before {
            Self::trim(&mut s, TRIM_BLOCKS_PER_CALL);
        }
        more
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
                size: backlog_size.max(1),
            });
            s.buf.clear();
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
        s.replicas.retain(|r| {
            let keep = r.client_id != client_id;
            if !keep {
                r.cursor.store(0, Ordering::Relaxed);
                r.info.set_stream_ref_bytes(0);
            }
            keep
        });
        if s.replicas.len() != before && s.replicas.is_empty() {
            s.alone_since_ms = crate::clock::unix_ms();
        }
        // The history only it still needed goes (the rest over the next writes and crons).
        Self::trim(&mut s, TRIM_BLOCKS_PER_CALL);
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
                // Its stream starts here (one that wants the image alone reads none).
                if !r.rdb_only {
                    r.cursor.store(offset + 1, Ordering::Relaxed);
                    r.info.set_stream_ref_bytes(s.buf.referenced_by(offset + 1));
                }
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
    /// still holds the stream since then: its cursor starts at that point of the buffer, and it waits
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
        if s.backlog.is_none() {
            return false;
        }
        // The shared buffer must still hold the stream after the image, from offset from + 1
        // on: the new replica reads it from there, as the other one does.
        if from + 1 < s.buf.first(s.offset + 1) || from > s.offset {
            return false;
        }
        if !r.rdb_only {
            r.cursor.store(from + 1, Ordering::Relaxed);
            r.info.set_stream_ref_bytes(s.buf.referenced_by(from + 1));
            if from < s.offset {
                r.info.push.stream_ready();
            }
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
        let cursor = s.offset + 1;
        r.cursor.store(cursor, Ordering::Relaxed);
        r.info.set_stream_ref_bytes(s.buf.referenced_by(cursor));
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
        if s.backlog.is_none() {
            return Resync::Full(Some(format!(
                "Unable to partial resync with replica {} for lack of backlog (Replica request was: {offset}).",
                r.describe()
            )));
        }
        let next = s.offset + 1;
        if offset < s.buf.first(next) as i64 || offset > next as i64 {
            return Resync::Full(Some(format!(
                "Unable to partial resync with replica {} for lack of backlog (Replica request was: {offset}).",
                r.describe()
            )));
        }
        let head = if psync2 {
            format!("+CONTINUE {}\r\n", s.replid)
        } else {
            "+CONTINUE\r\n".to_string()
        };
        // The line goes first; the history after it is read from the shared buffer, from the
        // requested offset on.
        r.info.push.push_unlimited(Bytes::from(head));
        let cursor = offset as u64;
        r.cursor.store(cursor, Ordering::Relaxed);
        r.info.set_stream_ref_bytes(s.buf.referenced_by(cursor));
        let sent = (next - cursor) as usize;
        if sent > 0 {
            r.info.push.stream_ready();
        }
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

    /// The cron's share (once a second): PING the replicas every `ping_period` seconds, close
    /// the replicas over their output buffer limit (a soft limit's seconds pass without a
    /// write), free history nobody needs (ten times a write's share of blocks) and drop the
    /// backlog after `ttl` seconds without replicas. No PING while `failing_over`:
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
        if let Some(size) = s.backlog.as_ref().map(|b| b.size) {
            let now = crate::clock::unix_ms();
            for r in &s.replicas {
                let cursor = r.cursor.load(Ordering::Relaxed);
                if cursor != 0
                    && !r.info.killed.load(Ordering::Relaxed)
                    && over_output_limit(r, s.buf.referenced_by(cursor), limit, size, now)
                {
                    close_for_output_limit(r);
                }
            }
            Self::trim(&mut s, 10 * TRIM_BLOCKS_PER_CALL);
        }
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
            s.buf.clear();
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
            Self::trim(&mut s, TRIM_BLOCKS_PER_CALL);
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
                let first = s.buf.first(s.offset + 1);
                out.push(("repl_backlog_active".into(), "1".into()));
                out.push(("repl_backlog_size".into(), b.size.to_string()));
                out.push(("repl_backlog_first_byte_offset".into(), first.to_string()));
                out.push((
                    "repl_backlog_histlen".into(),
                    (s.offset + 1 - first).to_string(),
                ));
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

/// True if a replica referencing `used` bytes of the shared buffer is over `limit` at `now_ms`
/// (Redis's checkClientOutputBufferLimits): a hard limit below the backlog's `backlog_size` is
/// taken as that size, since the replica shares the backlog's memory and a partial
/// resynchronization may hand it that much at once; the soft limit must hold for longer than
/// its seconds (the clock starts, or stops, here).
fn over_output_limit(
    r: &Replica,
    used: usize,
    limit: ObufLimit,
    backlog_size: usize,
    now_ms: i64,
) -> bool {
    let used = used as u64;
    let hard = if limit.hard > 0 {
        limit.hard.max(backlog_size as u64)
    } else {
        0
    };
    if hard > 0 && used >= hard {
        return true;
    }
    if limit.soft > 0 && used >= limit.soft {
        let since = r.soft_since_ms.load(Ordering::Relaxed);
        if since == 0 {
            r.soft_since_ms.store(now_ms, Ordering::Relaxed);
            return false;
        }
        return (now_ms - since) / 1000 > limit.soft_secs as i64;
    }
    r.soft_since_ms.store(0, Ordering::Relaxed);
    false
}

fn close_for_output_limit(r: &Replica) {
    tracing::warn!(
        "Client id={} addr={} closed for overcoming of output buffer limits.",
        r.client_id,
        r.info.addr
    );
    r.info.kill();
}

impl Replica {
    /// `ip:port` as Redis names a replica in its log.
    pub(crate) fn describe(&self) -> String {
        format!("{}:{}", self.ip, self.listening_port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(id: u64) -> Arc<Replica> {
        let info = Arc::new(crate::client::ClientInfo::new(
            id,
            format!("127.0.0.1:{}", 40000 + id),
            "127.0.0.1:6379".into(),
            0,
        ));
        Arc::new(Replica {
            client_id: id,
            info,
            state: AtomicU8::new(WAIT_BGSAVE_START),
            ready: AtomicBool::new(true),
            initial_offset: AtomicU64::new(0),
            ack_offset: AtomicU64::new(0),
            ack_ms: AtomicI64::new(0),
            listening_port: 0,
            ip: "127.0.0.1".into(),
            pre_psync: false,
            bgsave_outcome: Default::default(),
            changed: Default::default(),
            capa_eof: true,
            rdb_only: false,
            asked_ms: 0,
            rdb_feed: Default::default(),
            cursor: AtomicU64::new(0),
            soft_since_ms: AtomicI64::new(0),
        })
    }

    fn field(repl: &Replication, name: &str) -> u64 {
        let mut out = Vec::new();
        repl.info_master(&mut out, "no-failover");
        out.iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name}"))
    }

    /// Write `n` commands of about `len` bytes each.
    fn write(repl: &Replication, n: usize, len: usize, limit: ObufLimit) {
        let value = Bytes::from(vec![b'x'; len]);
        for i in 0..n {
            repl.feed(
                Some(0),
                &[
                    Bytes::from_static(b"SET"),
                    Bytes::from(format!("k{i}")),
                    value.clone(),
                ],
                limit,
            );
        }
    }

    /// Blocks are at least 16 KiB and at most a sixteenth of a large backlog; small writes
    /// fill the last block before another is made, and the memory counts every block's
    /// allocation.
    #[test]
    fn blocks_are_sized_as_redis_sizes_them() {
        let mut buf = SharedBuf::default();
        assert!(buf.append(&[1; 10], 1, 16 * 1024));
        assert!(
            !buf.append(&[2; 100], 11, 16 * 1024),
            "fits in the first block"
        );
        assert_eq!(buf.blocks.len(), 1);
        assert_eq!(
            buf.mem(),
            BLOCK_MIN + BLOCK_OVERHEAD * buf.blocks.capacity()
        );
        // A big write with a big backlog: blocks of backlog / 16.
        let mut big = SharedBuf::default();
        big.append(&vec![0; 5 << 20], 1, 16 << 20);
        let sizes: Vec<usize> = big.blocks.iter().map(|b| b.data.capacity()).collect();
        assert_eq!(sizes, vec![1 << 20; 5]);
        // Copying crosses blocks and ends where asked.
        let mut out = Vec::new();
        assert_eq!(big.copy_from(1, &mut out, 3 << 20), 1 + (3 << 20));
        assert_eq!(out.len(), 3 << 20);
        assert_eq!(
            big.referenced_by(1 + (3 << 20)),
            2 * ((1 << 20) + BLOCK_OVERHEAD)
        );
    }

    /// The backlog keeps `repl-backlog-size` bytes of history while nobody reads older ones;
    /// a replica waiting for its image keeps everything since its stream started (the
    /// backlog grows past its size, and a PSYNC from there is accepted); when it goes, the
    /// history is trimmed back to the size, a bounded number of blocks at a time. The shared
    /// buffer's memory does not depend on how many replicas reference it.
    #[test]
    fn a_waiting_replica_keeps_the_history_and_its_departure_trims_it() {
        let size = 16 * 1024;
        let limit = ObufLimit::default();
        let repl = Replication::default();
        let waiting = replica(1);
        repl.add_replica(waiting.clone(), size);
        write(&repl, 100, 100, limit);
        assert!(field(&repl, "repl_backlog_histlen") <= 2 * size as u64);
        let attached = repl.attach_waiting(false);
        assert_eq!(attached.len(), 1);
        let start = waiting.cursor.load(Ordering::Relaxed);
        assert_eq!(start, repl.offset() + 1);
        let second = replica(2);
        repl.add_replica(second.clone(), size);
        assert_eq!(repl.attach_waiting(false).len(), 1);
        write(&repl, 1000, 1000, limit);
        let histlen = field(&repl, "repl_backlog_histlen");
        assert!(
            histlen > 1_000_000,
            "the backlog kept the history: {histlen}"
        );
        assert!(field(&repl, "repl_backlog_first_byte_offset") <= start);
        let mem = repl.buffer_bytes();
        assert!(
            mem >= histlen as usize
                && mem < histlen as usize + 2 * BLOCK_MIN + 100 * BLOCK_OVERHEAD
        );
        // One of the two replicas goes: they share the buffer, which stays as it is.
        repl.remove_replica(2);
        assert_eq!(repl.buffer_bytes(), mem);
        // A PSYNC from the start of the kept history (past the backlog's size) continues.
        let psync = replica(3);
        match repl.try_partial(&psync, &repl.replid(), start as i64, true) {
            Resync::Continue { sent } => assert_eq!(sent as u64, repl.offset() + 1 - start),
            Resync::Full(why) => panic!("full resync: {why:?}"),
        }
        // Its connection takes the history from the shared buffer, a turn at a time.
        let mut out = Vec::new();
        let held = std::sync::atomic::AtomicUsize::new(0);
        assert!(repl.pull(3, &mut out, 4096, &held));
        assert_eq!(out.len(), 4096);
        assert_eq!(held.load(Ordering::Relaxed), out.capacity());
        while repl.pull(3, &mut out, 64 * 1024, &held) {}
        assert_eq!(out.len() as u64, repl.offset() + 1 - start);
        // The stream after the image's instant selects its database first.
        assert!(out.starts_with(b"*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n*3\r\n$3\r\nSET\r\n"));
        // Caught up, it references only the last block.
        assert!(psync.info.stream_ref_bytes() <= BLOCK_MIN + BLOCK_OVERHEAD);
        // The waiting replica goes: at most a call's share of blocks is freed at once, then
        // the rest, down to the backlog's size.
        repl.remove_replica(1);
        let mut s = repl.stream.lock();
        Replication::trim(&mut s, 3);
        drop(s);
        let after_few = field(&repl, "repl_backlog_histlen");
        assert!(after_few < histlen);
        repl.resize_backlog(size);
        let trimmed = field(&repl, "repl_backlog_histlen");
        assert!(
            trimmed >= size as u64 && trimmed <= (size + BLOCK_MIN) as u64,
            "{trimmed}"
        );
        assert!(repl.buffer_bytes() < mem / 10);
    }

    /// A replica's hard output limit below the backlog's size counts as that size (Redis's
    /// checkClientOutputBufferLimits); over it, the replica is closed when a block is added.
    #[test]
    fn a_replica_hard_limit_below_the_backlog_size_is_the_backlog_size() {
        let r = replica(1);
        let limit = ObufLimit {
            hard: 512 * 1024,
            soft: 0,
            soft_secs: 0,
        };
        let backlog = 100 << 20;
        assert!(!over_output_limit(&r, 20 << 20, limit, backlog, 0));
        assert!(over_output_limit(&r, 100 << 20, limit, backlog, 0));
        assert!(over_output_limit(&r, 600 * 1024, limit, 16 * 1024, 0));
        // The soft limit: over it for longer than its seconds.
        let soft = ObufLimit {
            hard: 0,
            soft: 1000,
            soft_secs: 1,
        };
        assert!(!over_output_limit(&r, 2000, soft, 0, 10_000));
        assert!(!over_output_limit(&r, 2000, soft, 0, 11_000));
        assert!(over_output_limit(&r, 2000, soft, 0, 12_000));
        assert!(!over_output_limit(&r, 10, soft, 0, 13_000));

        // End to end: a lagging online replica under "replica 32kb 0 0" with a 16 KiB backlog.
        let repl = Replication::default();
        let lagging = replica(2);
        repl.add_replica(lagging.clone(), 16 * 1024);
        repl.attach_waiting(false);
        let tight = ObufLimit {
            hard: 32 * 1024,
            soft: 0,
            soft_secs: 0,
        };
        write(&repl, 10, 1000, tight);
        assert!(!lagging.info.killed.load(Ordering::Relaxed));
        write(&repl, 40, 1000, tight);
        assert!(lagging.info.killed.load(Ordering::Relaxed));
    }
}
