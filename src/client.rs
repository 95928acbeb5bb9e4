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
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicUsize, Ordering};
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
    pub qbuf: AtomicUsize,
    /// Free space of the query buffer (CLIENT LIST qbuf-free).
    pub(crate) qbuf_free: AtomicUsize,
    /// The cron found the query buffer worth a look (see `querybuf::wants_check`): the
    /// connection checks it when it next waits for input.
    pub(crate) qbuf_check: AtomicBool,
    /// Bytes of the arguments of the command being run (or blocked), CLIENT LIST argv-mem.
    pub(crate) argv_mem: AtomicUsize,
    /// Push messages (Pub/Sub, keyspace events) waiting to be written to this client.
    pub(crate) push: Mailbox,
    /// Bytes of replies in the connection's output buffer that the socket has not taken yet
    /// (CLIENT LIST obl; with the queued pushes, omem).
    pub(crate) out_pending: AtomicUsize,
    /// The output buffer's allocation (kept at up to 16 KiB between replies, the whole of
    /// it while any reply waits): what client eviction and MEMORY STATS count.
    pub(crate) out_held: AtomicUsize,
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

/// Work a replication command leaves for the connection (it needs the socket or must wait).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReplAction {
    /// Send this replica the RDB image, then its stream (SYNC / PSYNC without +CONTINUE).
    FullSync,
    /// WAIT: until `replicas` replicas acknowledged `offset`, or `deadline_ms` (0: none).
    Wait {
        replicas: i64,
        offset: u64,
        deadline_ms: i64,
    },
}

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
    pub(crate) action: Option<ReplAction>,
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
            qbuf: AtomicUsize::new(0),
            qbuf_free: AtomicUsize::new(0),
            qbuf_check: AtomicBool::new(false),
            argv_mem: AtomicUsize::new(0),
            push: Default::default(),
            out_pending: AtomicUsize::new(0),
            out_held: AtomicUsize::new(0),
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

    pub fn set_last_cmd(&self, name: &'static str, now_ms: i64) {
        *self.last_cmd.lock() = name;
        self.last_active_ms.store(now_ms, Ordering::Relaxed);
    }

    pub fn kill(&self) {
        if !self.killed.swap(true, Ordering::SeqCst) {
            // What waits in its mailbox is dropped now, as Redis frees a killed client at
            // once; the rest goes with its connection (see [`KILLED_UNFREED`]).
            self.push.discard();
            let mem = self.memory_bytes();
            if self
                .unfreed_bytes
                .compare_exchange(0, mem, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                KILLED_UNFREED.fetch_add(mem, Ordering::Relaxed);
            }
        }
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
    /// `clients.normal`): its query buffer with its free room, the arguments of the command
    /// it runs, and its pending output.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.qbuf.load(Ordering::Relaxed)
            + self.qbuf_free.load(Ordering::Relaxed)
            + self.argv_mem.load(Ordering::Relaxed)
            + self.out_held.load(Ordering::Relaxed)
            + self.push.queued().0
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
        let omem = obl + queued_bytes;
        format!(
            "id={} addr={} laddr={} fd=8 name={} age={} idle={} flags={} db={} sub={} psub={} ssub={} multi={} qbuf={} qbuf-free={} argv-mem={} multi-mem=0 rbs=16384 rbp=0 obl={} oll={} omem={} tot-mem={} events=r cmd={} user={} redir=-1 resp={}",
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
            if self.multi.load(Ordering::Relaxed) { 0 } else { -1 },
            qbuf,
            qbuf_free,
            argv_mem,
            // Podium's output is one buffer of replies (obl, its unsent bytes) and a list of
            // queued push messages (oll, their count); omem is both.
            obl,
            oll,
            omem,
            // What is measured of the client's memory: its query buffer, arguments and
            // pending output.
            qbuf + qbuf_free + argv_mem + omem,
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
    /// Commands queued since MULTI; None outside a transaction.
    pub multi: Option<Vec<Vec<Bytes>>>,
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
    /// The reply being produced is a push (subscribe confirmations): it is written whatever
    /// CLIENT REPLY says, as in Redis.
    pub(crate) push_reply: bool,
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
    /// Invalidations caused by this client's own command: written after its reply.
    pub(crate) after_reply: Vec<u8>,
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

    /// The client applies what was already decided elsewhere: our master's link, or the AOF
    /// loader (id u64::MAX, Redis's CLIENT_ID_AOF). Nothing is refused to it for the server's
    /// state (Redis's mustObeyClient).
    pub fn obeys(&self) -> bool {
        self.repl.is_master || self.id == u64::MAX
    }

    pub fn new(id: u64, info: Arc<ClientInfo>) -> Client {
        Client {
            id,
            db: 0,
            resp: Resp::V2,
            authenticated: false,
            info,
            multi: None,
            multi_abort: false,
            watched: Vec::new(),
            watch_flag: Arc::new(AtomicBool::new(false)),
            watched_expiry: Vec::new(),
            reply_mode: ReplyMode::On,
            block_timeout_ms: 0,
            block_timeout_reply: None,
            subs: Default::default(),
            push_reply: false,
            in_script: false,
            lua_debug: None,
            debug_io: None,
            output_pending: false,
            error_reply_counted: false,
            tracking_caching: false,
            script_keys: Vec::new(),
            after_reply: Vec::new(),
            user: None,
            last_duration_us: 0,
            repl: Default::default(),
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

    pub(crate) fn count_for(&self, kind: Kind) -> usize {
        match kind {
            Kind::Shard => self.shard.len(),
            _ => self.classic_count(),
        }
    }
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
}

impl Queue {
    /// Drop everything queued, giving its memory back.
    fn clear(&mut self) {
        self.messages = VecDeque::new();
        self.tail = Vec::new();
        self.bytes = 0;
        self.held = 0;
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
        self.ready.notify();
        true
    }

    /// The connection is gone: free what is queued now (a replica's queue, until freed, must
    /// stay out of the memory `maxmemory` counts, and it stops being a replica's next).
    pub(crate) fn discard(&self) {
        let mut q = self.queue.lock();
        self.pending.store(false, Ordering::Release);
        q.clear();
    }

    /// Queue a message no output buffer limit applies to (invalidations: normal clients).
    pub(crate) fn push_unlimited(&self, msg: Bytes) {
        let _ = self.push(msg, ObufLimit::default(), 0);
    }

    /// Anything waiting to be written.
    pub(crate) fn has_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// Move every queued message into `out`, in order. The bytes stay accounted until
    /// [`Mailbox::sent`].
    pub(crate) fn drain_into(&self, out: &mut Vec<u8>) {
        if !self.has_pending() {
            return;
        }
        let mut q = self.queue.lock();
        self.pending.store(false, Ordering::Release);
        for m in q.messages.drain(..) {
            out.extend_from_slice(&m);
        }
        out.extend_from_slice(&q.tail);
        q.tail = Vec::new();
        q.held = 0;
        self.in_flight.fetch_add(q.bytes, Ordering::Relaxed);
        q.bytes = 0;
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
        if !self.has_pending() {
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
    pub fd: std::os::fd::RawFd,
    pub input: Vec<u8>,
}

#[cfg(test)]
mod tests {
    use super::*;

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
