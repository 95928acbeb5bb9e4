//! A client's state. [`Client`] is the connection's private state, handed to every command it
//! runs (database, protocol, transaction queue, WATCHed keys, subscriptions, ACL user);
//! [`ClientInfo`] is what other clients can see of it (CLIENT LIST, CLIENT KILL) and its
//! [`Mailbox`] of push messages. The socket loop that owns a `Client` is
//! [`crate::connection`], above.

use crate::clock::unix_ms;
use crate::config::ObufLimit;
use crate::keyspace::WatchFlag;
use crate::protocol::{Reply, Resp};
use bytes::Bytes;
use hashbrown::HashSet;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

/// Memory of killed clients (CLIENT KILL, client eviction, a dropped replica) whose
/// connections have not freed their buffers yet. A killed client is closed by its own
/// connection task, a moment later; Redis frees it at once. Until then its buffers are still
/// in used_memory, and leaving them in the memory `maxmemory` counts would evict keys for
/// memory that is about to go (unit/maxmemory: client eviction by MGET replies, a killed
/// replica), so [`crate::evict::counted_memory`] leaves this out, and INFO shows it with
/// `mem_not_counted_for_evict`.
static KILLED_UNFREED: AtomicUsize = AtomicUsize::new(0);

/// Bytes of killed clients not freed yet (see [`KILLED_UNFREED`]).
pub fn killed_unfreed() -> usize {
    KILLED_UNFREED.load(Ordering::Relaxed)
}

/// Shut down the socket `fd` names, if any (the master link's, or a served connection's):
/// its owner clears it under the lock before the socket closes.
fn shut_down(fd: &Mutex<Option<i32>>) {
    if let Some(fd) = *fd.lock() {
        // SAFETY: shutdown(2) of a socket its owner keeps open while the lock holds it here (it
        // clears this under the lock before closing it), so the descriptor is that socket's;
        // nothing is closed or freed. Covered by
        // `tests::kill_and_close_shuts_the_socket_down_at_once`.
        unsafe {
            libc::shutdown(fd, libc::SHUT_RDWR);
        }
    }
}

/// Client eviction's records (`client_evict`): the limit in force in bytes (0: none) and the
/// sum of the memory last recorded of the clients that count toward it.
static EVICT_LIMIT: AtomicU64 = AtomicU64::new(0);
static COUNTED: AtomicU64 = AtomicU64::new(0);

/// The bit of a client's record that says it is in [`COUNTED`].
const COUNTED_BIT: u64 = 1 << 63;
/// The record of a client that is gone: no later record replaces it (a publisher or the
/// cron holding the client's `ClientInfo` may still try), so it never counts again.
const GONE: u64 = !COUNTED_BIT;

/// Set client eviction's limit; returns the one before.
pub(crate) fn set_evict_limit(limit: u64) -> u64 {
    EVICT_LIMIT.swap(limit, Ordering::Relaxed)
}

/// Client eviction's limit in bytes (0: none).
#[inline]
pub(crate) fn evict_limit() -> u64 {
    EVICT_LIMIT.load(Ordering::Relaxed)
}

/// The recorded memory of the clients that count toward client eviction's limit.
pub(crate) fn counted_memory() -> u64 {
    COUNTED.load(Ordering::Relaxed)
}

/// The memory of a client's own records (its connection state and what others see of it),
/// counted in its memory as Redis counts its client struct.
const CLIENT_RECORD: usize = std::mem::size_of::<Client>() + std::mem::size_of::<ClientInfo>();

/// What other clients can see of a connection (CLIENT LIST, CLIENT KILL, INFO clients).
pub struct ClientInfo {
    pub id: u64,
    pub addr: String,
    pub laddr: String,
    pub name: Mutex<Option<Bytes>>,
    pub db: AtomicUsize,
    pub created_ms: i64,
    pub last_active_ms: AtomicI64,
    pub last_cmd: Mutex<&'static str>,
    pub resp: AtomicU8,
    pub multi: AtomicBool,
    pub blocked: AtomicBool,
    /// Waiting for CLIENT PAUSE to end before running its next command (counted as blocked).
    pub(crate) postponed: AtomicBool,
    pub no_evict: AtomicBool,
    pub killed: AtomicBool,
    pub kill: Notify,
    /// A socket the kill shuts down at once (the master link's): Redis closes its master
    /// client's socket inside CLIENT KILL, and the link's own task may not run for a while
    /// (a DEBUG SLEEP or a long script holds the workers), while the master must see the
    /// link go now. Cleared by the link before its socket closes.
    pub(crate) shutdown_fd: Mutex<Option<i32>>,
    /// A served connection's socket, which [`ClientInfo::kill_and_close`] (CLIENT KILL of
    /// another client) shuts down at once. Cleared by the connection before its socket can
    /// close.
    pub(crate) socket_fd: Mutex<Option<i32>>,
    pub qbuf: AtomicUsize,
    /// Free space of the query buffer (CLIENT LIST qbuf-free).
    pub(crate) qbuf_free: AtomicUsize,
    /// The cron found the query buffer worth a look (see `querybuf::wants_check`): the
    /// connection checks it when it next waits for input.
    pub(crate) qbuf_check: AtomicBool,
    /// Bytes of the arguments of the command being run (or blocked), or of the complete
    /// arguments of a request still arriving: CLIENT LIST argv-mem.
    pub(crate) argv_mem: AtomicUsize,
    /// The memory of the running command's arguments (their bytes and handles); 0 between
    /// commands (a request still arriving is in the query buffer's memory).
    pub(crate) argv_held: AtomicUsize,
    /// Shard channels the server dropped from this client's subscriptions (their slot moved
    /// to another shard: [`crate::pubsub::PubSub::drop_shard_channels`]), already confirmed
    /// to it with a sunsubscribe push; the connection forgets them before its next command
    /// ([`ClientInfo::take_dropped_shard_channels`]).
    dropped_shard_channels: Mutex<Vec<Bytes>>,
    shard_channels_dropped: AtomicBool,
    /// The query buffer's allocation (what `qbuf` and `qbuf-free` show is what Redis would
    /// have left in it: see `protocol::Progress`).
    pub(crate) qbuf_mem: AtomicUsize,
    /// The memory of the client's state kept between commands: its MULTI queue, WATCHed
    /// keys and subscriptions (see [`Client::publish_state_memory`]).
    pub(crate) state_mem: AtomicUsize,
    /// The arguments queued by MULTI as Redis counts them (CLIENT LIST multi-mem), and the
    /// commands queued (CLIENT LIST multi).
    pub(crate) multi_mem: AtomicUsize,
    pub(crate) multi_queued: AtomicUsize,
    /// The memory of the client's tracking prefixes (CLIENT TRACKING ... BCAST PREFIX).
    pub(crate) tracking_mem: AtomicUsize,
    /// The client's memory as client eviction last recorded it, with [`COUNTED_BIT`] when it
    /// is in the total (see [`ClientInfo::record_memory`]).
    pub(crate) recorded_mem: AtomicU64,
    /// The reply buffer's size and recent peak (CLIENT LIST rbs, rbp; see `obuf`).
    pub(crate) reply_buf: crate::obuf::ReplyBuf,
    /// Push messages (Pub/Sub, keyspace events) waiting to be written to this client.
    pub(crate) push: Mailbox,
    /// Bytes of replies in the connection's output buffer that the socket has not taken yet
    /// (CLIENT LIST obl; with the queued pushes, omem).
    pub(crate) out_pending: AtomicUsize,
    /// The output buffer's allocation (see `connection::OUT_KEEP_MAX` for what is kept
    /// between replies; the whole of it while any reply waits): what client eviction and
    /// MEMORY STATS count.
    pub(crate) out_held: AtomicUsize,
    /// A replica's share of the replication buffer: the blocks from the one its stream cursor
    /// is in to the newest (see `state::repl`), which Redis counts as the replica's output.
    stream_ref: AtomicUsize,
    /// The largest batch of replies over 16 KiB written since the cron last looked (see
    /// `connection::request_buffer_checks`).
    pub(crate) out_peak: AtomicUsize,
    /// The cron found the output buffer's room bigger than the client has lately needed: the
    /// connection shrinks it once nothing in it waits.
    pub(crate) out_check: AtomicBool,
    /// The client's last read held more than one command: its output buffer's room is kept
    /// between batches (see `connection::OUT_KEEP_MAX`).
    pub(crate) pipelined: AtomicBool,
    /// The client's memory when it was killed, until its connection has freed its buffers
    /// (see [`killed_unfreed`]); `usize::MAX` once the connection is gone.
    unfreed_bytes: AtomicUsize,
    /// The ACL user the connection runs as (a copy of [`Client::user`], set through
    /// [`Client::set_user`]): CLIENT LIST's `user=`, and ACL DELUSER / SETUSER find the
    /// clients to disconnect by it.
    pub(crate) user: Mutex<Option<crate::acl::UserRef>>,
    /// A replica of this server ([`ROLE_REPLICA`]) or the link to our master
    /// ([`ROLE_MASTER`]): CLIENT LIST flags S / M, CLIENT KILL TYPE.
    pub(crate) repl_role: AtomicU8,
}

/// [`ClientInfo::repl_role`] values.
pub(crate) const ROLE_NONE: u8 = 0;
pub(crate) const ROLE_REPLICA: u8 = 1;
pub(crate) const ROLE_MASTER: u8 = 2;

/// A connection's replication state.
#[derive(Default)]
pub(crate) struct ReplClient {
    /// REPLCONF listening-port / ip-address / capa, sent before SYNC.
    pub(crate) listening_port: u16,
    pub(crate) announced_ip: Option<String>,
    pub(crate) capa_eof: bool,
    pub(crate) capa_psync2: bool,
    /// REPLCONF rdb-only 1: the image alone, no stream (redis-cli --rdb).
    pub(crate) rdb_only: bool,
    /// REPLCONF rdb-filter-only functions: an image of the FUNCTION libraries only.
    pub(crate) rdb_functions_only: bool,
    /// The client is a replica (after SYNC / PSYNC): it gets no replies.
    pub(crate) is_replica: bool,
    /// The client is our master's link: it may write on a read-only replica.
    pub(crate) is_master: bool,
    /// The replication offset right after this client's last logged write (WAIT).
    pub(crate) woff: u64,
}

impl ClientInfo {
    /// A connection's record: `id`, peer and local addresses, created at `now_ms`.
    pub fn new(id: u64, addr: String, laddr: String, now_ms: i64) -> ClientInfo {
        ClientInfo {
            id,
            addr,
            laddr,
            name: Mutex::new(None),
            db: AtomicUsize::new(0),
            created_ms: now_ms,
            last_active_ms: AtomicI64::new(now_ms),
            last_cmd: Mutex::new("NULL"),
            resp: AtomicU8::new(2),
            multi: AtomicBool::new(false),
            blocked: AtomicBool::new(false),
            postponed: AtomicBool::new(false),
            no_evict: AtomicBool::new(false),
            killed: AtomicBool::new(false),
            kill: Notify::new(),
            shutdown_fd: Mutex::new(None),
            socket_fd: Mutex::new(None),
            qbuf: AtomicUsize::new(0),
            qbuf_free: AtomicUsize::new(0),
            qbuf_check: AtomicBool::new(false),
            argv_mem: AtomicUsize::new(0),
            argv_held: AtomicUsize::new(0),
            dropped_shard_channels: Mutex::new(Vec::new()),
            shard_channels_dropped: AtomicBool::new(false),
            qbuf_mem: AtomicUsize::new(0),
            state_mem: AtomicUsize::new(0),
            multi_mem: AtomicUsize::new(0),
            multi_queued: AtomicUsize::new(0),
            tracking_mem: AtomicUsize::new(0),
            recorded_mem: AtomicU64::new(0),
            reply_buf: Default::default(),
            push: Default::default(),
            out_pending: AtomicUsize::new(0),
            out_held: AtomicUsize::new(0),
            stream_ref: AtomicUsize::new(0),
            out_peak: AtomicUsize::new(0),
            out_check: AtomicBool::new(false),
            pipelined: AtomicBool::new(false),
            unfreed_bytes: AtomicUsize::new(0),
            user: Mutex::new(None),
            repl_role: AtomicU8::new(ROLE_NONE),
        }
    }

    /// The client's class as CLIENT LIST / KILL TYPE name it: master (our master's link),
    /// replica, pubsub (with subscriptions) or normal.
    pub(crate) fn client_type(&self) -> &'static str {
        match self.repl_role.load(Ordering::Relaxed) {
            ROLE_MASTER => "master",
            ROLE_REPLICA => "replica",
            _ if self
                .push
                .counts
                .iter()
                .any(|n| n.load(Ordering::Relaxed) > 0) =>
            {
                "pubsub"
            }
            _ => "normal",
        }
    }

    /// The name of the connection's ACL user (`default` before one is set).
    pub(crate) fn user_name(&self) -> String {
        self.user
            .lock()
            .as_ref()
            .map(|u| String::from_utf8_lossy(&u.read().name).into_owned())
            .unwrap_or_else(|| "default".to_string())
    }

    /// The command CLIENT LIST shows as the connection's last (`cmd=`); see
    /// [`Client::note_command`], which calls this only when the name changes.
    fn set_last_cmd(&self, name: &'static str) {
        *self.last_cmd.lock() = name;
    }

    /// Kill the client and shut its socket down now, as Redis frees a client CLIENT KILL names
    /// (other than the caller) before replying: whoever acts on the reply finds the connection
    /// closed (a killed replica's server then sees its link down), where the connection's own
    /// task may run only after the reply is out.
    /// The socket goes first: once flagged, the connection's task may end and let go of the
    /// descriptor before its socket closes, leaving nothing here to shut down in time.
    pub(crate) fn kill_and_close(&self) {
        shut_down(&self.socket_fd);
        self.kill();
    }

    pub fn kill(&self) {
        if !self.killed.swap(true, Ordering::SeqCst) {
            self.forget_memory();
            // What waits in its mailbox is dropped now, as Redis frees a killed client at
            // once; the rest goes with its connection (see [`KILLED_UNFREED`]).
            self.push.discard();
            // A replica's share of the replication buffer is not its own to free: the
            // buffer gives back what only it referenced (`state::repl`).
            let mem = self.memory_bytes() - self.stream_ref_bytes();
            if self
                .unfreed_bytes
                .compare_exchange(0, mem, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                KILLED_UNFREED.fetch_add(mem, Ordering::Relaxed);
            }
        }
        shut_down(&self.shutdown_fd);
        self.kill.notify_one();
        // A connection waiting for input listens for pushes and for this flag on the one
        // wake-up (one signal per read instead of two).
        self.push.ready.notify();
    }

    /// The connection ended and freed its buffers: a killed client's memory is no longer on
    /// its way out (see [`killed_unfreed`]).
    pub(crate) fn connection_freed(&self) {
        let mem = self.unfreed_bytes.swap(usize::MAX, Ordering::AcqRel);
        if mem != 0 && mem != usize::MAX {
            let _ = KILLED_UNFREED.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(mem))
            });
        }
    }

    /// What is measured of the client's memory (CLIENT LIST tot-mem, MEMORY STATS
    /// `clients.normal`, client eviction), the parts Redis 7.0 counts: the client's own
    /// record, its query buffer's allocation, the arguments of the command it runs, its
    /// output (the buffer's allocation and the queued pushes), its MULTI queue, WATCHed keys
    /// and subscriptions, and its tracking prefixes.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.memory_between_commands() + self.argv_held.load(Ordering::Relaxed)
    }

    /// [`ClientInfo::memory_bytes`] without the arguments of the command running now.
    fn memory_between_commands(&self) -> usize {
        // The queue before the output buffer: see Mailbox::drain_counted.
        let queued = self.push.queued().0;
        CLIENT_RECORD
            + self.qbuf_mem.load(Ordering::Relaxed)
            + queued
            + self.stream_ref.load(Ordering::Relaxed)
            + self.out_held.load(Ordering::Relaxed)
            + self.state_mem.load(Ordering::Relaxed)
            + self.tracking_mem.load(Ordering::Relaxed)
    }

    /// Record the client's memory as it is now for client eviction (Redis's
    /// updateClientMemUsage); true if the counted clients' total is then at or over the
    /// limit. Nothing is recorded while there is no limit. A normal or pubsub client counts
    /// (no-evict ones included, as in Redis); replicas and our master's link do not.
    #[inline]
    pub(crate) fn record_memory(&self) -> bool {
        let limit = evict_limit();
        if limit == 0 {
            return false;
        }
        self.record_memory_under(limit)
    }

    #[cold]
    fn record_memory_under(&self, limit: u64) -> bool {
        // The arguments of a command running now are left out: Redis records a client
        // between its commands (after reading, after each command), never during one, and a
        // record of the client that sets the limit (CONFIG SET maxmemory-clients) taken with
        // its own arguments made the total exceed what CLIENT LIST had just shown.
        let mem = self.memory_between_commands() as u64;
        let counts = self.repl_role.load(Ordering::Relaxed) == ROLE_NONE
            && !self.killed.load(Ordering::Relaxed);
        self.replace_record(if counts { mem | COUNTED_BIT } else { mem });
        counted_memory() >= limit
    }

    /// The client is gone (killed or disconnected): its memory leaves the total.
    pub(crate) fn forget_memory(&self) {
        let old = self.recorded_mem.swap(GONE, Ordering::AcqRel);
        if old & COUNTED_BIT != 0 {
            COUNTED.fetch_sub(old & !COUNTED_BIT, Ordering::AcqRel);
        }
    }

    /// The memory recorded of the client, if it counts toward the limit.
    pub(crate) fn counted_record(&self) -> Option<u64> {
        let r = self.recorded_mem.load(Ordering::Relaxed);
        (r & COUNTED_BIT != 0).then_some(r & !COUNTED_BIT)
    }

    /// Replace the client's record with `new`, moving the total by the difference.
    fn replace_record(&self, new: u64) {
        let Ok(old) = self
            .recorded_mem
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                (r != GONE).then_some(new)
            })
        else {
            return;
        };
        let counted = |r: u64| {
            if r & COUNTED_BIT != 0 {
                r & !COUNTED_BIT
            } else {
                0
            }
        };
        let (old, new) = (counted(old), counted(new));
        if old != new {
            COUNTED.fetch_add(new.wrapping_sub(old), Ordering::AcqRel);
        }
    }

    /// Move the queued pushes into the connection's output buffer `out`.
    /// Note a shard channel the server dropped from this client's subscriptions.
    pub(crate) fn note_dropped_shard_channel(&self, channel: Bytes) {
        self.dropped_shard_channels.lock().push(channel);
        self.shard_channels_dropped.store(true, Ordering::Release);
    }

    /// The shard channels dropped since the last call (one atomic load when none was).
    pub(crate) fn take_dropped_shard_channels(&self) -> Vec<Bytes> {
        // A plain load first: this runs before every command, and the flag is almost never set.
        if !self.shard_channels_dropped.load(Ordering::Acquire)
            || !self.shard_channels_dropped.swap(false, Ordering::AcqRel)
        {
            return Vec::new();
        }
        std::mem::take(&mut *self.dropped_shard_channels.lock())
    }

    /// A replica's share of the replication buffer (see `stream_ref`); 0 for other clients.
    pub(crate) fn stream_ref_bytes(&self) -> usize {
        self.stream_ref.load(Ordering::Relaxed)
    }

    /// Record a replica's share of the replication buffer (under the stream's lock).
    pub(crate) fn set_stream_ref_bytes(&self, bytes: usize) {
        self.stream_ref.store(bytes, Ordering::Relaxed);
    }

    pub(crate) fn drain_pushes(&self, out: &mut Vec<u8>) {
        self.push.drain_counted(out, Some(&self.out_held));
    }

    /// One CLIENT LIST line.
    pub fn describe(&self) -> String {
        let now = unix_ms();
        let name = self
            .name
            .lock()
            .as_ref()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .unwrap_or_default();
        let mut flags = String::new();
        match self.repl_role.load(Ordering::Relaxed) {
            ROLE_REPLICA => flags.push('S'),
            ROLE_MASTER => flags.push('M'),
            _ => {}
        }
        if self.multi.load(Ordering::Relaxed) {
            flags.push('x');
        }
        if self.blocked.load(Ordering::Relaxed) || self.postponed.load(Ordering::Relaxed) {
            flags.push('b');
        }
        if self.no_evict.load(Ordering::Relaxed) {
            flags.push('e');
        }
        if self.push.monitor.load(Ordering::Relaxed) {
            flags.push('O');
        }
        let subs = self
            .push
            .counts
            .each_ref()
            .map(|c| c.load(Ordering::Relaxed));
        if subs.iter().any(|&n| n > 0) {
            flags.push('P');
        }
        if flags.is_empty() {
            flags.push('N');
        }
        let qbuf = self.qbuf.load(Ordering::Relaxed);
        let qbuf_free = self.qbuf_free.load(Ordering::Relaxed);
        let argv_mem = self.argv_mem.load(Ordering::Relaxed);
        let obl = self.out_pending.load(Ordering::Relaxed);
        let (queued_bytes, oll) = self.push.queued();
        let omem = obl + queued_bytes + self.stream_ref_bytes();
        format!(
            "id={} addr={} laddr={} fd=8 name={} age={} idle={} flags={} db={} sub={} psub={} ssub={} multi={} qbuf={} qbuf-free={} argv-mem={} multi-mem={} rbs={} rbp={} obl={} oll={} omem={} tot-mem={} events=r cmd={} user={} redir=-1 resp={}",
            self.id,
            self.addr,
            self.laddr,
            name,
            (now - self.created_ms) / 1000,
            (now - self.last_active_ms.load(Ordering::Relaxed)) / 1000,
            flags,
            self.db.load(Ordering::Relaxed),
            subs[0],
            subs[1],
            subs[2],
            if self.multi.load(Ordering::Relaxed) {
                self.multi_queued.load(Ordering::Relaxed) as i64
            } else {
                -1
            },
            qbuf,
            qbuf_free,
            argv_mem,
            self.multi_mem.load(Ordering::Relaxed),
            self.reply_buf.size(),
            self.reply_buf.peak(),
            // Podium's output is one buffer of replies (obl, its unsent bytes) and a list of
            // queued push messages (oll, their count); omem is both.
            obl,
            oll,
            omem,
            // What is measured of the client's memory (as client eviction measures it): its
            // query buffer, arguments, queued pushes and its output buffer's allocation (Redis
            // 7.0 counts its reply buffer's usable size too).
            self.memory_bytes(),
            self.last_cmd.lock(),
            self.user_name(),
            self.resp.load(Ordering::Relaxed),
        )
    }
}

/// CLIENT REPLY mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyMode {
    On,
    Off,
    /// Skip the reply to the next command only.
    Skip,
    /// Set by CLIENT REPLY SKIP: applies from the command after it.
    SkipNext,
}

/// A connection's private state, handed to every command it runs.
pub struct Client {
    pub id: u64,
    pub db: usize,
    pub resp: Resp,
    pub authenticated: bool,
    pub info: Arc<ClientInfo>,
    /// The name last given to `info.last_cmd` (see [`Client::note_command`]).
    last_cmd_shown: &'static str,
    /// (address of the user, `acl::users_changed()`) when `commands::acl::check` last found
    /// the client's user unrestricted; (0, 0) when it has not. Atomics only so that `&Client`
    /// may cross an await: the connection alone reads and writes them (plain loads, stores).
    pub(crate) unrestricted_user: (AtomicUsize, AtomicU64),
    /// The same for `commands::acl::user_revoked` finding the user not deleted.
    pub(crate) live_user: (AtomicUsize, AtomicU64),
    /// Commands queued since MULTI; None outside a transaction.
    pub multi: Option<Vec<Vec<Bytes>>>,
    /// The queued commands' arguments: their bytes plus a pointer each, as Redis counts them
    /// (CLIENT LIST multi-mem), and how many there are (see [`Client::queue_command`]).
    pub(crate) multi_argv: (usize, usize),
    /// An error while queueing: EXEC will answer EXECABORT.
    pub multi_abort: bool,
    /// Keys under WATCH and the flag their modification sets.
    pub watched: Vec<(usize, Bytes)>,
    pub watch_flag: WatchFlag,
    /// Each WATCHed key with its `stale` marker, shared with the shard's registration
    /// (`keyspace::Watcher`): a key live when watched that has expired since fails EXEC.
    pub watched_expiry: Vec<(usize, Bytes, Arc<AtomicBool>)>,
    pub reply_mode: ReplyMode,
    pub block_timeout_ms: u64,
    pub block_timeout_reply: Option<Reply>,
    /// Channels, patterns and shard channels this client is subscribed to.
    pub(crate) subs: Subscriptions,
    /// Set while a script's `redis.call` runs a command (MONITOR shows it as `lua`).
    pub(crate) in_script: bool,
    /// The reply about to be sent is a script's error that the command it called already
    /// counted in errorstats (see `state::scripts::take_error_already_counted`).
    pub(crate) error_reply_counted: bool,
    /// CLIENT CACHING was given for the next command (tracking OPTIN/OPTOUT).
    pub(crate) tracking_caching: bool,
    /// The keys the running script declared: what a read inside it makes a tracking client
    /// remember (as Redis, which tracks the script's keys, not the inner command's).
    pub(crate) script_keys: Vec<Bytes>,
    /// The ACL user the connection runs as; None (internal clients: AOF loading) may run
    /// anything.
    pub user: Option<crate::acl::UserRef>,
    /// How long the last command this client ran took, in microseconds (SLOWLOG, LATENCY).
    pub last_duration_us: u64,
    /// Replication: REPLCONF settings, replica / master roles, WAIT's offset.
    pub(crate) repl: ReplClient,
    /// SCRIPT DEBUG YES / SYNC: the next EVAL runs under the Lua debugger.
    pub lua_debug: Option<DebugMode>,
    /// The socket and unread input the connection hands a debugging EVAL.
    pub debug_io: Option<DebugIo>,
    /// Replies of earlier commands of this batch are not written yet (SCRIPT DEBUG must not
    /// be pipelined).
    pub output_pending: bool,
    /// Cluster mode: READONLY / READWRITE and ASKING (see `cluster::routing`).
    pub cluster: ClusterFlags,
}

/// A client's cluster-mode flags.
#[derive(Default, Clone, Copy)]
pub struct ClusterFlags {
    /// READONLY: a replica serves this client's reads of its master's slots.
    pub readonly: bool,
    /// ASKING: the next command may use a slot this node is importing.
    pub asking: bool,
    /// ASKING was the last command: the flag survives the next command's start.
    pub asking_fresh: bool,
    /// The connection is TLS. A cluster with `tls-cluster yes` announces its nodes' TLS
    /// ports, and names their plaintext ports instead to a client that is not on TLS
    /// (MOVED, ASK, CLUSTER SLOTS / NODES / REPLICAS), as Redis does.
    pub on_tls: bool,
}

impl ClusterFlags {
    /// Called as a command starts: the ASKING flag lasts one command (or one transaction,
    /// from MULTI to EXEC), as Redis clears it after any other command outside MULTI.
    pub fn command_starts(&mut self, in_multi: bool) {
        if !in_multi && !self.asking_fresh {
            self.asking = false;
        }
        self.asking_fresh = false;
    }
}

impl Client {
    /// The `client-output-buffer-limit` class of the client (`crate::config::OBUF_*`):
    /// replica for a replica's link, pubsub once it has subscriptions, normal otherwise.
    pub fn obuf_class(&self) -> usize {
        if self.repl.is_replica {
            crate::config::OBUF_REPLICA
        } else if self.subs.total() > 0 {
            crate::config::OBUF_PUBSUB
        } else {
            crate::config::OBUF_NORMAL
        }
    }

    /// Close the client for going over its output buffer limit, after logging it as Redis
    /// does: gone for everyone at once (CLIENT LIST, client eviction), as Redis frees such a
    /// client before it runs another command; its connection closes right after.
    pub fn close_for_output_limit(&self) {
        self.info.kill();
        tracing::warn!(
            "Client id={} addr={} closed for overcoming of output buffer limits.",
            self.id,
            self.info.addr
        );
    }

    /// The client applies what was already decided elsewhere: our master's link, or the AOF
    /// loader (id u64::MAX, Redis's CLIENT_ID_AOF). Nothing is refused to it for the server's
    /// state (Redis's mustObeyClient).
    pub fn obeys(&self) -> bool {
        self.repl.is_master || self.id == u64::MAX
    }

    /// A command of this client starts at `now_ms`: CLIENT LIST's `cmd=` and idle time. The
    /// name is shown through a lock (others read it), taken only when it changes: a pipeline
    /// of one command took it per request.
    pub fn note_command(&mut self, name: &'static str, now_ms: i64) {
        if !std::ptr::eq(name, self.last_cmd_shown) {
            self.last_cmd_shown = name;
            self.info.set_last_cmd(name);
        }
        self.info.last_active_ms.store(now_ms, Ordering::Relaxed);
    }

    pub fn new(id: u64, info: Arc<ClientInfo>) -> Client {
        Client {
            id,
            db: 0,
            resp: Resp::V2,
            authenticated: false,
            info,
            last_cmd_shown: "NULL",
            unrestricted_user: (AtomicUsize::new(0), AtomicU64::new(0)),
            live_user: (AtomicUsize::new(0), AtomicU64::new(0)),
            multi: None,
            multi_argv: (0, 0),
            multi_abort: false,
            watched: Vec::new(),
            watch_flag: Arc::new(AtomicBool::new(false)),
            watched_expiry: Vec::new(),
            reply_mode: ReplyMode::On,
            block_timeout_ms: 0,
            block_timeout_reply: None,
            subs: Default::default(),
            in_script: false,
            lua_debug: None,
            debug_io: None,
            output_pending: false,
            cluster: ClusterFlags::default(),
            error_reply_counted: false,
            tracking_caching: false,
            script_keys: Vec::new(),
            user: None,
            last_duration_us: 0,
            repl: Default::default(),
        }
    }

    /// Start a MULTI queue.
    pub(crate) fn start_multi(&mut self) {
        self.multi = Some(Vec::new());
        self.multi_argv = (0, 0);
    }

    /// Queue `args` in the MULTI queue (there must be one).
    pub(crate) fn queue_command(&mut self, args: Vec<Bytes>) {
        if let Some(q) = self.multi.as_mut() {
            let bytes: usize = args.iter().map(|a| a.len()).sum();
            self.multi_argv.0 += bytes + std::mem::size_of::<usize>() * args.len();
            self.multi_argv.1 += args.len();
            q.push(args);
        }
    }

    /// Publish the memory of the state the client keeps between commands (its MULTI queue,
    /// WATCHed keys, subscriptions) for CLIENT LIST and client eviction: what its structures
    /// hold, as Redis counts its own (the queued arguments, a record per watched key and per
    /// subscription; the keys and channels themselves are the server's).
    pub(crate) fn publish_state_memory(&self) {
        use std::mem::size_of;
        let (multi_mem, multi) = match &self.multi {
            Some(q) => (
                self.multi_argv.0,
                self.multi_argv.0
                    + self.multi_argv.1 * (size_of::<Bytes>() - size_of::<usize>())
                    + q.capacity() * size_of::<Vec<Bytes>>(),
            ),
            None => (0, 0),
        };
        let watched = self.watched.capacity() * size_of::<(usize, Bytes)>()
            + self.watched_expiry.capacity() * size_of::<(usize, Bytes, Arc<AtomicBool>)>()
            // Each key's expiry marker and its entry in the shard's list of watchers.
            + self.watched.len() * (2 * size_of::<usize>() + 2 * size_of::<Arc<AtomicBool>>());
        let mem = multi + watched + self.subs.memory();
        let info = &self.info;
        if info.state_mem.load(Ordering::Relaxed) != mem {
            info.state_mem.store(mem, Ordering::Relaxed);
        }
        if info.multi_mem.load(Ordering::Relaxed) != multi_mem {
            info.multi_mem.store(multi_mem, Ordering::Relaxed);
        }
        let queued = self.multi.as_ref().map_or(0, Vec::len);
        if info.multi_queued.load(Ordering::Relaxed) != queued {
            info.multi_queued.store(queued, Ordering::Relaxed);
        }
    }

    /// Run as ACL user `user` from now on.
    pub fn set_user(&mut self, user: crate::acl::UserRef) {
        *self.info.user.lock() = Some(user.clone());
        self.user = Some(user);
    }

    pub fn select(&mut self, db: usize) {
        self.db = db;
        self.info.db.store(db, Ordering::Relaxed);
    }
}

/// The three kinds of subscription.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Channel,
    Pattern,
    Shard,
}

/// One client's subscriptions, kept in its connection state.
#[derive(Default)]
pub(crate) struct Subscriptions {
    pub(crate) channels: HashSet<Bytes>,
    /// In subscription order (PUNSUBSCRIBE without arguments answers in this order, as Redis).
    pub(crate) patterns: Vec<Bytes>,
    pub(crate) shard: HashSet<Bytes>,
}

impl Subscriptions {
    /// Channels plus patterns: the count SUBSCRIBE/PSUBSCRIBE confirmations report.
    pub(crate) fn classic_count(&self) -> usize {
        self.channels.len() + self.patterns.len()
    }

    /// All subscriptions: a RESP2 client with any is in subscriber mode.
    pub(crate) fn total(&self) -> usize {
        self.classic_count() + self.shard.len()
    }

    /// The memory of the client's own sets and list of subscriptions (a slot per entry).
    pub(crate) fn memory(&self) -> usize {
        let slot = std::mem::size_of::<Bytes>();
        // A hash set's slot carries a control byte too.
        (self.channels.capacity() + self.shard.capacity()) * (slot + 1)
            + self.patterns.capacity() * slot
    }

    pub(crate) fn count_for(&self, kind: Kind) -> usize {
        match kind {
            Kind::Shard => self.shard.len(),
            _ => self.classic_count(),
        }
    }
}

/// Eviction notices: the messages an eviction sends (invalidations to tracking clients,
/// `evicted` keyspace events), followed from the mailboxes they are queued in until their
/// connections have written them, so that `maxmemory` leaves them out meanwhile
/// (`evict::counted_memory`). Redis writes them before it runs its next command; here the
/// connections that write them may run after the next command, and counting them then made
/// evictions feed themselves. Their memory is measured as a whole (the allocator's count
/// across the sending, which also sees what tracking gives back and what a message's buffer
/// really holds) and known to the mailboxes only as a number of messages; a delivery of some
/// of them takes its share of the memory, and the last one all of it. Only evictions and the
/// mailboxes holding their notices touch it.
struct Notices {
    /// (measured bytes, messages not yet written).
    state: Mutex<(i64, i64)>,
    /// The bytes, read without the lock on every write over `maxmemory`.
    bytes: std::sync::atomic::AtomicI64,
}

static NOTICES: Notices = Notices {
    state: Mutex::new((0, 0)),
    bytes: std::sync::atomic::AtomicI64::new(0),
};

thread_local! {
    /// Set while this thread sends an eviction's notices: what it queues then is one.
    static SENDING_NOTICES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// While this thread runs an eviction round: the wakers of the connections its notices
    /// went to, woken when the round is over (None outside a round).
    static ROUND_WAKES: std::cell::RefCell<Option<Vec<std::task::Waker>>> =
        const { std::cell::RefCell::new(None) };
}

/// Run an eviction round (`f`): the connections its notices go to are woken when it is over,
/// as Redis writes them after its eviction loop, so none of them is drained while the round
/// measures what its notices take (a connection draining on the other worker made that
/// measure miss what it freed, and the round evict more keys).
pub(crate) fn eviction_round<R>(f: impl FnOnce() -> R) -> R {
    struct WakeAfter;
    impl Drop for WakeAfter {
        fn drop(&mut self) {
            if let Some(wakers) = ROUND_WAKES.with(|w| w.borrow_mut().take()) {
                for w in wakers {
                    w.wake();
                }
            }
        }
    }
    ROUND_WAKES.with(|w| *w.borrow_mut() = Some(Vec::new()));
    let _wake = WakeAfter;
    f()
}

impl Notices {
    fn add_memory(&self, bytes: i64) {
        let mut st = self.state.lock();
        // Messages already delivered took their memory with them.
        if st.1 > 0 {
            st.0 += bytes.max(0);
            self.bytes.store(st.0, Ordering::Relaxed);
        }
    }

    fn queued(&self) {
        self.state.lock().1 += 1;
    }

    fn delivered(&self, messages: usize) {
        let mut st = self.state.lock();
        let n = messages as i64;
        if n >= st.1 {
            *st = (0, 0);
        } else {
            st.0 -= st.0 * n / st.1;
            st.1 -= n;
        }
        self.bytes.store(st.0, Ordering::Relaxed);
    }
}

/// Inside an eviction round: leave `ready` notified and its waiter for the round to wake
/// (false outside a round: the caller wakes it now).
fn wake_after_round(ready: &crate::util::signal::Signal) -> bool {
    ROUND_WAKES.with(|w| match w.borrow_mut().as_mut() {
        Some(wakers) => {
            wakers.extend(ready.notify_later());
            true
        }
        None => false,
    })
}

/// Run `send`, which sends an eviction's notices: what it queues in mailboxes, and the memory
/// that takes, is followed as eviction notices.
pub(crate) fn send_eviction_notices(send: impl FnOnce()) {
    let before = crate::alloc::used_memory() as i64;
    SENDING_NOTICES.set(true);
    send();
    SENDING_NOTICES.set(false);
    NOTICES.add_memory(crate::alloc::used_memory() as i64 - before);
}

/// The memory of eviction notices not yet written to their sockets.
pub(crate) fn eviction_notice_bytes() -> i64 {
    NOTICES.bytes.load(Ordering::Relaxed).max(0)
}

/// A connection's queue of push messages (Pub/Sub messages, keyspace events) waiting to be
/// written, and the wake-up for its task.
#[derive(Default)]
pub(crate) struct Mailbox {
    queue: Mutex<Queue>,
    /// Wakes the connection task to write what is queued.
    pub(crate) ready: crate::util::signal::Signal,
    /// Quick check before taking the lock: anything queued.
    pending: AtomicBool,
    /// Bytes drained into the connection's output and not yet written (see [`Mailbox::sent`]).
    in_flight: AtomicUsize,
    /// Set once the output buffer limit was crossed: nothing more is queued.
    pub(crate) overflowed: AtomicBool,
    /// Subscription counts for CLIENT LIST (sub, psub, ssub).
    pub(crate) counts: [AtomicUsize; 3],
    /// The client is in MONITOR mode (CLIENT LIST flag `O`).
    pub(crate) monitor: AtomicBool,
    /// Eviction notices taken into the connection's output and not yet written (see
    /// [`Notices`]; Redis writes them before its next command runs).
    notices_out: AtomicUsize,
    /// What is queued is kept from the connection until [`Mailbox::release`]: a replica's
    /// stream after a diskless transfer waits for its first REPLCONF ACK, so that nothing
    /// follows the EOF mark on the wire before the replica found it (Redis's
    /// repl_start_cmd_stream_on_ack).
    held: AtomicBool,
}

impl Drop for Mailbox {
    fn drop(&mut self) {
        self.written();
    }
}

/// Once messages wait in a queue, later ones up to this size are copied into the queue's
/// current chunk rather than queued one by one: a replica's stream is mostly commands of a few
/// dozen bytes, and an allocation and a queue slot each cost more than the message itself
/// (Redis appends replies into 16 KiB blocks for the same reason). Bigger ones are queued as
/// they are, shared between the clients they go to.
const COALESCE_MAX: usize = 1024;
/// The size past which a chunk is closed and a new one started.
const CHUNK: usize = 16 * 1024;

#[derive(Default)]
struct Queue {
    /// Full chunks and big messages, oldest first; `tail` follows them.
    messages: VecDeque<Bytes>,
    /// The chunk small messages are being appended to.
    tail: Vec<u8>,
    /// Bytes of messages queued (in `messages` and `tail`).
    bytes: usize,
    /// Memory `messages` holds: each buffer's allocation and its bookkeeping (what client
    /// eviction and `maxmemory`'s leaving out of replica buffers must see; see [`Queue::add`]).
    held: usize,
    /// Unix ms since when the buffer has been over the soft limit; 0 = not over it.
    soft_since_ms: i64,
    /// How many of the messages queued are evictions' notices (see [`Notices`]).
    notices: usize,
}

impl Drop for Queue {
    fn drop(&mut self) {
        self.notices_gone();
    }
}

impl Queue {
    /// Drop everything queued, giving its memory back.
    fn clear(&mut self) {
        self.messages = VecDeque::new();
        self.tail = Vec::new();
        self.bytes = 0;
        self.held = 0;
        self.notices_gone();
    }

    /// The queued eviction notices were taken out (or dropped): their memory is the
    /// connection's now, or freed.
    fn notices_gone(&mut self) {
        if self.notices > 0 {
            NOTICES.delivered(std::mem::take(&mut self.notices));
        }
    }

    /// Move the chunk being filled, if any, to `messages`. Counted as what it holds: its
    /// allocation, the queue slot, and the header `Bytes` adds to a vector it takes over.
    fn close_chunk(&mut self) {
        if self.tail.is_empty() {
            return;
        }
        let full = std::mem::take(&mut self.tail);
        self.held += full.capacity() + std::mem::size_of::<Bytes>() + 32;
        self.messages.push_back(Bytes::from(full));
    }

    /// Append `msg` after everything queued (see [`COALESCE_MAX`]).
    fn add(&mut self, msg: Bytes) {
        // A client that keeps up finds its queue empty: the message is queued as it is (no
        // copy; a published message stays shared between its subscribers).
        if msg.len() > COALESCE_MAX || self.messages.is_empty() && self.tail.is_empty() {
            self.close_chunk();
            self.held += msg.len() + std::mem::size_of::<Bytes>();
            self.messages.push_back(msg);
            return;
        }
        if self.tail.len() + msg.len() > CHUNK {
            self.close_chunk();
        }
        // Powers of two up to the chunk size: Vec's own doubling from the first message's size
        // (53, 106, ... 13568, 27136) left chunks two-thirds empty.
        let need = self.tail.len() + msg.len();
        if need > self.tail.capacity() {
            let cap = need.next_power_of_two().clamp(256, CHUNK);
            self.tail.reserve_exact(cap - self.tail.len());
        }
        self.tail.extend_from_slice(&msg);
    }
}

impl Mailbox {
    /// Queue `msg`. False if the client crossed its output buffer limit (the caller
    /// disconnects it); the message is then dropped.
    pub(crate) fn push(&self, msg: Bytes, limit: ObufLimit, now_ms: i64) -> bool {
        if self.overflowed.load(Ordering::Relaxed) {
            return false;
        }
        let mut q = self.queue.lock();
        q.bytes += msg.len();
        q.add(msg);
        if SENDING_NOTICES.get() {
            q.notices += 1;
            NOTICES.queued();
        }
        let used = (q.bytes + self.in_flight.load(Ordering::Relaxed)) as u64;
        let mut over = limit.hard > 0 && used >= limit.hard;
        if limit.soft > 0 && used >= limit.soft {
            if q.soft_since_ms == 0 {
                q.soft_since_ms = now_ms;
            } else if (now_ms - q.soft_since_ms) / 1000 >= limit.soft_secs as i64 {
                over = true;
            }
        } else {
            q.soft_since_ms = 0;
        }
        if over {
            self.overflowed.store(true, Ordering::Relaxed);
            q.clear();
            return false;
        }
        drop(q);
        self.pending.store(true, Ordering::Release);
        if self.held.load(Ordering::Acquire) {
            return true;
        }
        // An eviction round's notices wake their connection when the round is over.
        if !(SENDING_NOTICES.get() && wake_after_round(&self.ready)) {
            self.ready.notify();
        }
        true
    }

    /// The connection is gone: free what is queued now (a replica's queue, until freed, must
    /// stay out of the memory `maxmemory` counts, and it stops being a replica's next).
    pub(crate) fn discard(&self) {
        let mut q = self.queue.lock();
        self.pending.store(false, Ordering::Release);
        q.clear();
    }

    /// New bytes of the replication stream wait for this replica (it reads them from the
    /// shared buffer, `state::repl`): its connection is woken unless the stream is held.
    pub(crate) fn stream_ready(&self) {
        self.pending.store(true, Ordering::Release);
        if !self.held.load(Ordering::Acquire) {
            self.ready.notify();
        }
    }

    /// More of the stream is left for the connection's next turn (it took what fits).
    pub(crate) fn stream_left(&self) {
        self.pending.store(true, Ordering::Release);
    }

    /// The stream waits for the replica's first ACK (see `held`).
    pub(crate) fn is_held(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }

    /// Queue a message no output buffer limit applies to (invalidations: normal clients).
    pub(crate) fn push_unlimited(&self, msg: Bytes) {
        let _ = self.push(msg, ObufLimit::default(), 0);
    }

    /// Anything waiting to be written (nothing while held).
    pub(crate) fn has_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire) && !self.held.load(Ordering::Acquire)
    }

    /// Keep what is queued, and what comes, from the connection (see `held`).
    pub(crate) fn hold(&self) {
        self.held.store(true, Ordering::Release);
    }

    /// Hand what is queued to the connection again.
    pub(crate) fn release(&self) {
        if self.held.swap(false, Ordering::AcqRel) && self.pending.load(Ordering::Acquire) {
            self.ready.notify();
        }
    }

    /// Move every queued message into `out`, in order. The bytes stay accounted until
    /// [`Mailbox::sent`].
    pub(crate) fn drain_into(&self, out: &mut Vec<u8>) {
        self.drain_counted(out, None);
    }

    /// [`Mailbox::drain_into`], storing `out`'s new allocation in `out_held` before the
    /// queue stops counting what it held: a reader of [`Mailbox::queued`] then `out_held`
    /// (client memory, replica buffers left out of `maxmemory`) sees the bytes in one place
    /// or the other, never in neither.
    pub(crate) fn drain_counted(&self, out: &mut Vec<u8>, out_held: Option<&AtomicUsize>) {
        if !self.has_pending() {
            return;
        }
        let mut q = self.queue.lock();
        // Room for everything first: the buffer's growth is published at once, not after
        // copying megabytes of a replica's backlog.
        out.reserve(q.bytes);
        if let Some(held) = out_held {
            held.store(out.capacity(), Ordering::Relaxed);
        }
        for m in q.messages.drain(..) {
            out.extend_from_slice(&m);
        }
        out.extend_from_slice(&q.tail);
        // After the store above: `queued` reads no lock once this says empty.
        self.pending.store(false, Ordering::Release);
        q.tail = Vec::new();
        q.held = 0;
        if q.notices > 0 {
            self.notices_out
                .fetch_add(std::mem::take(&mut q.notices), Ordering::Relaxed);
        }
        self.in_flight.fetch_add(q.bytes, Ordering::Relaxed);
        q.bytes = 0;
    }

    /// The connection's output was written: the eviction notices drained into it are out of
    /// the process.
    pub(crate) fn written(&self) {
        if self.notices_out.load(Ordering::Relaxed) != 0 {
            let n = self.notices_out.swap(0, Ordering::Relaxed);
            if n > 0 {
                NOTICES.delivered(n);
            }
        }
    }

    /// The connection's output was written: drained messages no longer count.
    pub(crate) fn sent(&self) {
        if self.in_flight.load(Ordering::Relaxed) != 0 {
            self.in_flight.store(0, Ordering::Relaxed);
            let mut q = self.queue.lock();
            if q.bytes == 0 {
                q.soft_since_ms = 0;
            }
        }
    }

    /// Over the soft limit for longer than its seconds, and not yet closed for it. The cron
    /// asks this of every subscriber, as Redis's client cron checks the limits: a subscriber
    /// that stopped reading is closed on time even when no message comes any more.
    pub(crate) fn soft_limit_expired(&self, limit: ObufLimit, now_ms: i64) -> bool {
        if limit.soft == 0 || self.overflowed.load(Ordering::Relaxed) {
            return false;
        }
        let q = self.queue.lock();
        let used = (q.bytes + self.in_flight.load(Ordering::Relaxed)) as u64;
        q.soft_since_ms != 0
            && used >= limit.soft
            && (now_ms - q.soft_since_ms) / 1000 >= limit.soft_secs as i64
    }

    /// The memory of what is queued and not yet moved to the connection's output (buffers
    /// as allocated), and the number of buffers holding it.
    pub(crate) fn queued(&self) -> (usize, usize) {
        // A held queue is memory all the same.
        if !self.pending.load(Ordering::Acquire) {
            return (0, 0);
        }
        let q = self.queue.lock();
        (
            q.held + q.tail.capacity(),
            q.messages.len() + usize::from(!q.tail.is_empty()),
        )
    }

    /// Bytes queued or in flight (what the pubsub limit in [`Mailbox::push`] measures).
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.queue.lock().bytes + self.in_flight.load(Ordering::Relaxed)
    }
}

/// How a client asked to debug its scripts.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum DebugMode {
    /// SCRIPT DEBUG YES: each session runs in a forked child; the data set is not changed.
    Forked,
    /// SCRIPT DEBUG SYNC: the session runs in the server and keeps its changes.
    Sync,
}

/// What the connection gives a session: the socket and the input it had not run yet.
pub struct DebugIo {
    pub sock: std::sync::Arc<crate::net::ClientSocket>,
    pub input: Vec<u8>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kill_and_close shuts a registered socket down before it returns (the peer reads the
    /// end at once); kill alone leaves the socket to its connection.
    #[test]
    fn kill_and_close_shuts_the_socket_down_at_once() {
        use std::io::Read;
        use std::os::fd::AsRawFd;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let ends_at_once = |close: bool| {
            let mut peer = std::net::TcpStream::connect(addr).expect("connect");
            let (served, _) = listener.accept().expect("accept");
            let info = ClientInfo::new(1, String::new(), String::new(), 0);
            *info.socket_fd.lock() = Some(served.as_raw_fd());
            if close {
                info.kill_and_close();
            } else {
                info.kill();
            }
            *info.socket_fd.lock() = None;
            // What the kill counted as on its way out goes, as the connection's end would.
            info.connection_freed();
            peer.set_read_timeout(Some(std::time::Duration::from_millis(200)))
                .expect("timeout");
            let mut buf = [0u8; 8];
            let ended = matches!(peer.read(&mut buf), Ok(0));
            drop(served);
            ended
        };
        assert!(ends_at_once(true));
        assert!(!ends_at_once(false));
    }

    #[test]
    fn notices_give_back_their_share_as_they_are_delivered() {
        let n = Notices {
            state: Mutex::new((0, 0)),
            bytes: std::sync::atomic::AtomicI64::new(0),
        };
        for _ in 0..10 {
            n.queued();
        }
        n.add_memory(10_000);
        assert_eq!(n.bytes.load(Ordering::Relaxed), 10_000);
        n.delivered(4);
        assert_eq!(n.bytes.load(Ordering::Relaxed), 6_000);
        n.delivered(6);
        assert_eq!(n.bytes.load(Ordering::Relaxed), 0);
        // Measured after every message was already delivered: nothing left to leave out.
        n.queued();
        n.delivered(1);
        n.add_memory(5_000);
        assert_eq!(n.bytes.load(Ordering::Relaxed), 0);
        // A negative measure (something else freed memory meanwhile) adds nothing.
        n.queued();
        n.add_memory(-300);
        assert_eq!(n.bytes.load(Ordering::Relaxed), 0);
        n.delivered(5);
        assert_eq!(*n.state.lock(), (0, 0));
    }

    /// An eviction round wakes the connections its notices went to once it is over, not
    /// while it still measures them; other pushes wake at once.
    #[test]
    fn an_eviction_round_wakes_its_notices_connections_at_its_end() {
        use std::future::Future;
        use std::task::{Context, Wake, Waker};
        struct Count(AtomicUsize);
        impl Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mb = Mailbox::default();
        let mut wait = std::pin::pin!(mb.ready.wait());
        assert!(wait
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        eviction_round(|| {
            send_eviction_notices(|| mb.push_unlimited(Bytes::from_static(b"n")));
            assert_eq!(count.0.load(Ordering::SeqCst), 0, "not during the round");
        });
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "once it is over");
        // Outside a round a notice wakes at once, as any push does.
        send_eviction_notices(|| mb.push_unlimited(Bytes::from_static(b"n")));
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
        mb.discard();
    }

    /// An eviction's notices are the mailbox's until drained, then the connection's until it
    /// offers them to the socket; other messages are never notices.
    #[test]
    fn eviction_notices_are_followed_to_the_socket() {
        let mb = Mailbox::default();
        send_eviction_notices(|| {
            mb.push_unlimited(Bytes::from_static(b">2\r\n$10\r\ninvalidate\r\n"));
            mb.push_unlimited(Bytes::from_static(b">2\r\n$10\r\ninvalidate\r\n"));
        });
        mb.push_unlimited(Bytes::from_static(b">3\r\n$7\r\nmessage\r\n"));
        assert_eq!(mb.queue.lock().notices, 2);
        let mut out = Vec::new();
        mb.drain_into(&mut out);
        assert_eq!(mb.queue.lock().notices, 0);
        assert_eq!(mb.notices_out.load(Ordering::Relaxed), 2);
        mb.written();
        assert_eq!(mb.notices_out.load(Ordering::Relaxed), 0);
        // Dropped with the queue (an overflowing or departing client): counted as gone.
        send_eviction_notices(|| mb.push_unlimited(Bytes::from_static(b"x")));
        mb.discard();
        assert_eq!(mb.queue.lock().notices, 0);
    }

    /// Small messages behind a backlog share chunks, big ones stay whole, and what comes out
    /// is every message in order.
    #[test]
    fn a_backlog_of_small_messages_is_kept_in_chunks_in_order() {
        let mb = Mailbox::default();
        let mut want = Vec::new();
        for i in 0..5_000u32 {
            let msg = if i % 1000 == 999 {
                Bytes::from(vec![b'a' + (i % 26) as u8; 5000])
            } else {
                Bytes::from(format!("*1\r\n$4\r\n{i:04}\r\n"))
            };
            want.extend_from_slice(&msg);
            assert!(mb.push(msg, ObufLimit::default(), 0));
        }
        let (bytes, buffers) = mb.queued();
        assert!(bytes >= want.len(), "{bytes} < {}", want.len());
        // 5 big messages, the first small one alone, the rest in 16 KiB chunks.
        assert!(
            buffers < 5 + 1 + want.len() / (CHUNK / 2),
            "{buffers} buffers"
        );
        let mut out = Vec::new();
        mb.drain_into(&mut out);
        assert_eq!(out, want);
        assert_eq!(mb.queued(), (0, 0));
    }
}
