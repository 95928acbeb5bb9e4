//! Command table and dispatch.
//!
//! Each family file (`zset.rs`, `string.rs`, ...) exports a `COMMANDS` table of [`Spec`]s: the
//! name, Redis's arity convention (positive = exact, negative = at least), flags, where the
//! keys are, and the handler. A handler parses its own arguments, works on the keyspace
//! through [`Ctx`], and returns a [`CmdResult`]: `Ok` with its reply, or `Err` with an error
//! reply, so that `?` ends it early on a helper's `Err(Reply)`. It never sees the protocol
//! version except through `ctx.client.resp` when a reply shape depends on it.
//!
//! [`dispatch`] runs one request: lookup, arity, authentication, MULTI queueing, lock the
//! shards the keys live in (in global order), run, then feed the AOF and serve clients that
//! were blocked on keys the command touched.

pub mod acl;
pub mod argv;
pub mod bitmap;
pub mod client;
pub(crate) mod cluster;
pub mod command;
pub(crate) mod command_docs;
pub mod config_cmd;
pub mod debug;
mod debug_data;
pub(crate) mod doc_entry;
pub(crate) mod docs;
pub mod errors;
pub mod expire;
pub mod geo;
pub mod hash;
pub mod hyperloglog;
pub mod info;
use crate::config::dir;
/// Moved to `state::introspect` (the error counters live in the shared state); the old path
/// stays for code written against it.
pub use crate::state::introspect;
pub mod keys;
pub mod latency;
pub mod list;
mod long;
pub(crate) mod memory;
pub mod migrate;
pub(crate) mod pause;
pub mod persist;
pub mod pubsub;
pub(crate) mod repl;
pub mod scripting;
pub mod server;
pub mod set;
pub mod slowlog;
pub mod sort;
pub mod stream;
pub mod string;
pub mod takeover;
pub mod tx;
pub mod zset;

use crate::blocking::{Blocked, ServeFn};
use crate::client::Client;
use crate::keyspace::{DbHandle, Guards};
use crate::protocol::Reply;
use crate::state::Server;
use crate::util::counter::Counter;
use bytes::Bytes;
use hashbrown::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Moved to crate::cmdspec; kept here for code written against the old path.
pub use crate::cmdspec::{arity_ok, wrong_arity};

/// What a handler returns: `Ok` with its reply, or `Err` with the error reply to send (so that
/// `?` returns a helper's `Err(Reply)` early). Both are sent alike: the dispatcher takes the
/// reply out of either ([`reply_of`]), and an error is recognised by the reply itself, never by
/// which side it came on.
pub type CmdResult = Result<Reply, Reply>;

pub type Handler = fn(&mut Ctx, &[Bytes]) -> CmdResult;

/// The reply a handler's result sends, `Ok` or `Err` alike.
#[inline]
pub fn reply_of(r: CmdResult) -> Reply {
    match r {
        Ok(r) | Err(r) => r,
    }
}

/// A command that acts on the client's own session and takes whatever locks it needs itself
/// (the transaction commands: MULTI and DISCARD change only the client, WATCH locks the keys
/// it watches, EXEC locks every shard for its queue).
pub type SessionHandler = fn(&Server, &mut Client, &[Bytes], &mut ReplyExtras) -> CmdResult;

/// What a command leaves to be written with its reply, besides the reply: it travels up with
/// the reply (in [`Ran`], then [`Outcome`]), never on the client. EXEC and scripts gather the
/// extras of the commands they run into their own.
#[derive(Default)]
pub struct ReplyExtras {
    /// Invalidations this client's own command caused (client-side caching): written after
    /// its reply, as Redis does.
    pub after: Vec<u8>,
    /// The reply is a push (subscribe confirmations): written whatever CLIENT REPLY says.
    pub push: bool,
}

impl ReplyExtras {
    /// Take in the extras of a command run inside this one (EXEC's queue, a script's calls).
    pub fn absorb(&mut self, mut inner: ReplyExtras) {
        self.after.append(&mut inner.after);
        self.push |= inner.push;
    }
}

/// What [`run_locked`] gives back: the reply and what else the command left for its caller.
pub struct Ran {
    pub reply: Reply,
    /// The command must wait (a blocking command with nothing to serve it yet).
    pub blocked: Option<Blocked>,
    /// The connection closes once the reply is written (QUIT, CLIENT KILL of itself).
    pub close: bool,
    /// Work the command left for the connection ([`takeover`]).
    pub(crate) takeover: Option<takeover::Takeover>,
    pub extras: ReplyExtras,
}

/// How a command runs: what the table row holds instead of a handler caught by name.
#[derive(Clone, Copy)]
pub enum Run {
    /// Runs with its keys' shards locked by the dispatcher ([`run_locked`]).
    Keyed(Handler),
    /// Runs after every check the dispatcher makes, with no lock held (see [`SessionHandler`]).
    Session(SessionHandler),
}

/// Command flags (a subset of Redis's, the ones Podium acts on or reports).
pub mod flags {
    pub const WRITE: u32 = 1;
    pub const READONLY: u32 = 1 << 1;
    pub const DENYOOM: u32 = 1 << 2;
    pub const ADMIN: u32 = 1 << 3;
    pub const PUBSUB: u32 = 1 << 4;
    pub const NOSCRIPT: u32 = 1 << 5;
    pub const BLOCKING: u32 = 1 << 6;
    pub const LOADING: u32 = 1 << 7;
    pub const STALE: u32 = 1 << 8;
    pub const FAST: u32 = 1 << 9;
    pub const NO_AUTH: u32 = 1 << 10;
    pub const NO_MULTI: u32 = 1 << 11;
    pub const ALLOW_BUSY: u32 = 1 << 12;
    pub const MAY_REPLICATE: u32 = 1 << 13;
    pub const SORT_FOR_SCRIPT: u32 = 1 << 14;
    pub const MOVABLE_KEYS: u32 = 1 << 15;
    /// Runs the client's queued transaction (EXEC): the dispatcher's refusals are judged again
    /// on what was queued, and a -BUSY refusal discards the transaction.
    pub const RUNS_QUEUE: u32 = 1 << 16;
    /// Refused while the last background save failed (MISCONF) though it writes nothing: PING,
    /// so a health check sees the disk error, as Redis refuses it.
    pub const MISCONF_REFUSED: u32 = 1 << 17;
    /// Changes the client's database (SELECT): refused to a script held to one database.
    pub const SWITCHES_DB: u32 = 1 << 18;
    /// Runs at once inside MULTI instead of being queued (EXEC, DISCARD, MULTI, WATCH, QUIT,
    /// RESET: the list Redis's processCommand names).
    pub const NOT_QUEUED: u32 = 1 << 19;
    /// Runs a script (EVAL, EVALSHA, FCALL and their _RO forms): MONITOR shows it before the
    /// commands it calls, and client-side caching remembers the keys of those commands, not
    /// the script's own.
    pub const RUNS_SCRIPT: u32 = 1 << 20;
    /// Does not use up a CLIENT CACHING given for the next command (CLIENT itself, as in
    /// Redis, where only the command after CLIENT CACHING consumes it).
    pub const KEEPS_CACHING: u32 = 1 << 21;
    /// Refused with -LOADING while a replica loads its master's image beside the data set it
    /// serves (async loading): SAVE, BGSAVE, BGREWRITEAOF, SYNC, PSYNC, REPLICAOF.
    pub const NO_ASYNC_LOADING: u32 = 1 << 22;
}

/// Where a command's keys are.
#[derive(Clone, Copy)]
pub enum Keys {
    /// No keys; no shard is locked.
    None,
    /// Redis's (first, last, step) positions; last may be negative (from the end).
    Range(i32, i32, i32),
    /// A computed list of argument positions (ZUNIONSTORE's numkeys, ZMPOP ...).
    Custom(fn(&[Bytes]) -> Vec<usize>),
    /// All shards of the client's database (KEYS, SCAN, DBSIZE, FLUSHDB, RANDOMKEY).
    Db,
    /// All shards of the client's database, for a command that also reads keys its arguments
    /// only name by pattern (SORT ... BY/GET); the function gives the keys it names outright
    /// (COMMAND GETKEYS).
    DbNamed(fn(&[Bytes]) -> Vec<usize>),
    /// Every shard of every database (FLUSHALL, SWAPDB, MOVE, COPY ... DB, EXEC).
    All,
}

/// One command's registration.
pub struct Spec {
    pub name: &'static str,
    pub arity: i32,
    pub flags: u32,
    pub keys: Keys,
    pub run: Run,
    /// Redis's command group (e.g. "sorted-set"), as COMMAND DOCS reports it (checked against
    /// the generated docs table in `docs::tests`).
    pub group: &'static str,
}

impl Spec {
    pub const fn new(
        name: &'static str,
        arity: i32,
        flags: u32,
        keys: Keys,
        handler: Handler,
        group: &'static str,
    ) -> Spec {
        Spec::with_run(name, arity, flags, keys, Run::Keyed(handler), group)
    }

    /// A row whose command runs on the client's session (see [`Run::Session`]).
    pub const fn session(
        name: &'static str,
        arity: i32,
        flags: u32,
        keys: Keys,
        handler: SessionHandler,
        group: &'static str,
    ) -> Spec {
        Spec::with_run(name, arity, flags, keys, Run::Session(handler), group)
    }

    const fn with_run(
        name: &'static str,
        arity: i32,
        flags: u32,
        keys: Keys,
        run: Run,
        group: &'static str,
    ) -> Spec {
        Spec {
            name,
            arity,
            flags,
            keys,
            run,
            group,
        }
    }

    pub fn is_write(&self) -> bool {
        self.flags & flags::WRITE != 0
    }

    /// Argument positions of the keys in `args` (args[0] is the command name).
    pub fn key_positions(&self, args: &[Bytes]) -> Vec<usize> {
        match self.keys {
            Keys::Range(first, last, step) => {
                range_positions(first, last, step, args.len()).collect()
            }
            Keys::Custom(f) | Keys::DbNamed(f) => {
                f(args).into_iter().filter(|&i| i < args.len()).collect()
            }
            _ => Vec::new(),
        }
    }
}

/// The key positions a [`Keys::Range`] names in a request of `n` arguments (none when `first`
/// is not positive; a negative `last` counts from the end).
pub fn range_positions(first: i32, last: i32, step: i32, n: usize) -> impl Iterator<Item = usize> {
    let n = n.min(i32::MAX as usize) as i32;
    let last = if last < 0 { n + last } else { last };
    // An empty range when `first` is not positive.
    let end = if first > 0 {
        last.min(n - 1)
    } else {
        first - 1
    };
    (first..=end)
        .step_by(step.max(1) as usize)
        .map(|i| i as usize)
}

/// A request to block the client (BZPOPMIN & co when nothing is available).
pub struct BlockRequest {
    pub keys: Vec<Bytes>,
    /// Timeout in ms; 0 = forever.
    pub timeout_ms: u64,
    pub serve: ServeFn,
    /// What the client gets when it times out.
    pub on_timeout: Reply,
    /// What the serve function gets as the waiter's arguments, if not the command's own
    /// (XREAD keeps the IDs it waits after, `$` resolved).
    pub args: Option<Vec<Bytes>>,
    /// The waiters of a key are tried one by one even when an earlier one cannot be served
    /// (stream readers wait for different IDs), instead of stopping at the first.
    pub serve_each: bool,
}

/// What a handler works with.
pub struct Ctx<'c, 'a> {
    pub srv: &'a Server,
    pub client: &'c mut Client,
    pub g: &'c mut Guards<'a>,
    /// Number of changes this command made (Redis's `dirty`): non-zero means it is logged.
    pub dirty: u64,
    /// Commands to log instead of the one received (e.g. SET EX as SET PXAT, INCRBYFLOAT as SET).
    pub propagate: Option<Vec<Vec<Bytes>>>,
    /// Set by a blocking command that must wait.
    pub block: Option<BlockRequest>,
    /// True while running inside EXEC (blocking commands then do not block).
    pub in_exec: bool,
    /// Set by commands that end the connection after the reply (QUIT).
    pub close_after_reply: bool,
    /// Set by commands that leave work for the connection (SYNC, PSYNC, WAIT, SHUTDOWN).
    pub(crate) takeover: Option<takeover::Takeover>,
    /// What is written with the reply ([`ReplyExtras`]).
    pub extras: ReplyExtras,
    /// When the dispatcher started the command (a script's run record takes it rather than
    /// reading the clock again).
    pub started: crate::clock::Stamp,
}

/// Replies this long are weighed against the client's hard output limit before they are built
/// ([`Ctx::closes_for_reply_of`]).
pub(crate) const BIG_REPLY: usize = 64 * 1024;

impl<'c, 'a> Ctx<'c, 'a> {
    /// True, with the client closed, when a reply of `len` bytes alone reaches the client's
    /// hard output limit (`client-output-buffer-limit`): Redis builds such a reply and closes
    /// the client before it serves anyone else; building it here (a copy of a 4 MB value
    /// takes milliseconds) left the client in CLIENT LIST for other workers meanwhile
    /// (unit/client-eviction, "avoid client eviction when client is freed by output buffer
    /// limit"). Only for a reply of its own: inside MULTI or a script the reply is part of a
    /// bigger one, which the connection weighs once built.
    pub fn closes_for_reply_of(&self, len: usize) -> bool {
        let c = &*self.client;
        if len < BIG_REPLY
            || self.in_exec
            || c.in_script
            || c.multi.is_some()
            || c.reply_mode != crate::client::ReplyMode::On
            || c.obeys()
            || c.repl.is_replica
        {
            return false;
        }
        let hard = self.srv.config.hot.obuf.classes[c.obuf_class()].get().hard;
        if hard == 0 || (len as u64) < hard {
            return false;
        }
        c.close_for_output_limit();
        true
    }

    /// The client's current database.
    pub fn db(&mut self) -> DbHandle<'_, 'a> {
        self.g.db(self.client.db)
    }

    /// Database `index`.
    pub fn db_at(&mut self, index: usize) -> DbHandle<'_, 'a> {
        self.g.db(index)
    }

    pub fn now_ms(&self) -> i64 {
        self.g.now_ms
    }

    /// The protocol to encode a reply in while it is built ([`crate::protocol::reply::BulkReply`],
    /// [`crate::protocol::reply::RangeReply`]), or None when the reply must stay a structure:
    /// inside a script, where Lua reads it rather than the client.
    pub fn encoding_for_client(&self) -> Option<crate::protocol::Resp> {
        (!self.client.in_script).then_some(self.client.resp)
    }

    /// The reply size past which Redis would have closed this client mid-reply: its class's
    /// hard output-buffer limit. For replies whose size the client chooses (the repeated
    /// random picks of HRANDFIELD, SRANDMEMBER, ZRANDMEMBER): Redis builds them element by
    /// element and stops once the client is marked for closing, so a command stops adding
    /// elements once the reply passes this, and the connection then closes the client for it
    /// (the cut reply is never delivered). None inside a script (replies go to Lua, which
    /// Redis does not limit) or when the class has no hard limit.
    pub fn reply_cap(&self) -> Option<u64> {
        if self.client.in_script {
            return None;
        }
        let limit = self.srv.config.hot.obuf.classes[self.client.obuf_class()].get();
        (limit.hard > 0).then_some(limit.hard)
    }

    /// Record keyspace event `event` (class `class`, see [`crate::notify`]) on `key` of the
    /// client's database; published once the command has run.
    pub fn notify(&mut self, class: u32, event: &'static str, key: &[u8]) {
        let db = self.client.db;
        self.g.db(db).notify(class, event, key);
    }

    /// Log `cmds` in the AOF instead of the command as received.
    pub fn propagate_as(&mut self, cmds: Vec<Vec<Bytes>>) {
        self.propagate = Some(cmds);
    }
}

/// A registered command: its spec and its INFO commandstats counters.
pub struct Cmd {
    pub spec: &'static Spec,
    /// The command's INFO commandstats counters (a container's, for calls that name no
    /// subcommand).
    pub own: CmdStats,
    /// A container's subcommands, each with its counters: Redis keeps commandstats per
    /// subcommand (`cmdstat_config|get`).
    pub subs: Box<[(&'static str, CmdStats)]>,
    /// The latency histogram every run of a command without subcommands counts in (a
    /// container's depends on the subcommand). Filled on first use: the histograms are built
    /// from this table.
    pub histogram: OnceLock<Option<&'static latency::Histogram>>,
}

/// One command's (or subcommand's) INFO commandstats counters.
#[derive(Default)]
pub struct CmdStats {
    /// Added to by every call: per-thread counters (see `crate::util::counter`).
    pub calls: Counter,
    pub usec: Counter,
    pub rejected: AtomicU64,
    pub failed: AtomicU64,
}

impl CmdStats {
    pub fn reset(&self) {
        self.calls.reset();
        self.usec.reset();
        for c in [&self.rejected, &self.failed] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// Where the calls of an unknown subcommand go: Redis refuses them before any command's
/// statistics (only errorstats count them); never shown.
static UNCOUNTED: CmdStats = CmdStats {
    calls: Counter::unindexed(),
    usec: Counter::unindexed(),
    rejected: AtomicU64::new(0),
    failed: AtomicU64::new(0),
};

impl Cmd {
    /// The counters a call with `args` goes to: its subcommand's, for a container.
    pub fn stats(&self, args: &[Bytes]) -> &CmdStats {
        match args.get(1) {
            Some(sub) if !self.subs.is_empty() => self
                .subs
                .iter()
                .find(|(n, _)| sub.eq_ignore_ascii_case(n.as_bytes()))
                .map_or(&UNCOUNTED, |(_, s)| s),
            _ => &self.own,
        }
    }
}

impl std::ops::Deref for Cmd {
    type Target = Spec;
    fn deref(&self) -> &Spec {
        self.spec
    }
}

static TABLE: OnceLock<HashMap<&'static str, &'static Cmd>> = OnceLock::new();

/// `rename-command` directives given so far: (original name, new name or "" to disable).
static RENAMES: parking_lot::Mutex<Vec<(String, String)>> = parking_lot::Mutex::new(Vec::new());

/// `rename-command old new` (config file or command line, before the server starts): the
/// command answers to `new` only, or to nothing when `new` is empty. ACL rules still name
/// commands by their original names, as in Redis. Err is Redis's text.
pub fn rename_command(old: &str, new: &str) -> Result<(), String> {
    if TABLE.get().is_some() {
        return Err("rename-command is only valid before the server starts".into());
    }
    let mut renames = RENAMES.lock();
    let mut names: Vec<String> = base_specs().map(|s| s.name.to_string()).collect();
    for (o, n) in renames.iter() {
        names.retain(|x| x != o);
        if !n.is_empty() {
            names.push(n.clone());
        }
    }
    let (old, new) = (old.to_ascii_lowercase(), new.to_ascii_lowercase());
    if !names.contains(&old) {
        return Err("No such command in rename-command".into());
    }
    if !new.is_empty() && names.contains(&new) && new != old {
        return Err("Target command name already exists".into());
    }
    // Resolve chains (a renamed command renamed again) to the original name.
    let original = renames
        .iter()
        .find(|(_, n)| *n == old)
        .map(|(o, _)| o.clone())
        .unwrap_or(old);
    renames.retain(|(o, _)| *o != original);
    renames.push((original, new));
    Ok(())
}

/// Install what the layers below call back into: configuration's `rename-command` (it acts on
/// the command table) and persistence's [`crate::persistence::Upcalls`] (an AOF's commands run
/// through the dispatcher; FUNCTION libraries read from an RDB are compiled by the Lua
/// engine). Lower layers never import this one; main runs this before reading the
/// configuration, and every other way a server starts runs it too (later calls change
/// nothing).
pub fn install_hooks() {
    let _ = crate::config::RENAME_COMMAND.set(rename_command);
    crate::persistence::install_upcalls(crate::persistence::Upcalls {
        run_logged,
        restore_libraries: scripting::restore_libraries,
    });
}

/// Execute one command read from an AOF as the loader's client (persistence's
/// [`crate::persistence::Upcalls::run_logged`]): unknown commands stop the load, error replies
/// are reported as Redis reports them, and a command that would block changed nothing.
fn run_logged(srv: &Server, client: &mut Client, args: Vec<Bytes>) -> Result<(), String> {
    if lookup(&args[0]).is_none() {
        return Err(format!(
            "Unknown command '{}'",
            String::from_utf8_lossy(&args[0])
        ));
    }
    let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
    let outcome = dispatch(srv, client, args);
    report_propagation_error(srv, PropagationSource::AofLoader, &name, &outcome.reply);
    if let Some(b) = outcome.block {
        // Logged pops never wait; a command that would block changed nothing.
        srv.blocking.cancel(&srv.keyspace, &b.waiter);
    }
    Ok(())
}

/// Log the keys lazily expired under `g` as DELs and count them; the keys.
#[inline]
fn propagate_expired(srv: &Server, g: &mut Guards) -> Vec<(usize, Bytes)> {
    if g.expired.is_empty() {
        return Vec::new();
    }
    propagate_expired_keys(srv, g)
}

/// [`propagate_expired`] when the command found keys expired.
fn propagate_expired_keys(srv: &Server, g: &mut Guards) -> Vec<(usize, Bytes)> {
    let expired = std::mem::take(&mut g.expired);
    for (db, key) in &expired {
        srv.propagate(*db, vec![Bytes::from_static(b"DEL"), key.clone()]);
    }
    if !expired.is_empty() {
        srv.stats
            .expired_keys
            .fetch_add(expired.len() as u64, Ordering::Relaxed);
    }
    expired
}

/// Serve the clients blocked on keys the command (or transaction) made ready, and log what
/// that did: first the DELs of keys found expired meanwhile (their waiters stay blocked),
/// then the served commands.
pub(crate) fn serve_blocked(srv: &Server, g: &mut Guards) {
    let served = srv.blocking.serve_ready(g);
    propagate_expired(srv, g);
    for (db, cmd) in served {
        srv.propagate(db, cmd);
    }
}

/// Every family's registration table: the one list the command table is built from.
static FAMILIES: &[&[Spec]] = &[
    client::COMMANDS,
    command::COMMANDS,
    info::COMMANDS,
    config_cmd::COMMANDS,
    server::COMMANDS,
    persist::COMMANDS,
    repl::COMMANDS,
    acl::COMMANDS,
    keys::COMMANDS,
    migrate::COMMANDS,
    cluster::COMMANDS,
    sort::COMMANDS,
    scripting::COMMANDS,
    expire::COMMANDS,
    string::COMMANDS,
    zset::COMMANDS,
    geo::COMMANDS,
    bitmap::COMMANDS,
    hyperloglog::COMMANDS,
    hash::COMMANDS,
    set::COMMANDS,
    list::COMMANDS,
    stream::COMMANDS,
    tx::COMMANDS,
    pubsub::COMMANDS,
    slowlog::COMMANDS,
    latency::COMMANDS,
    debug::COMMANDS,
];

fn base_specs() -> impl Iterator<Item = &'static Spec> {
    FAMILIES.iter().flat_map(|f| f.iter())
}

/// The whole table, by lowercase name (as renamed by `rename-command`).
pub fn table() -> &'static HashMap<&'static str, &'static Cmd> {
    TABLE.get_or_init(|| {
        let renames = RENAMES.lock().clone();
        let mut m = HashMap::default();
        for family in FAMILIES.iter().copied() {
            for spec in family {
                // The table lives as long as the process: its records are leaked on purpose,
                // once each (a command renamed to "" gets none).
                let name: &'static str = match renames.iter().find(|(o, _)| o == spec.name) {
                    None => spec.name,
                    Some((_, new)) if new.is_empty() => continue,
                    Some((_, new)) => Box::leak(new.clone().into_boxed_str()),
                };
                let cmd: &'static Cmd = Box::leak(Box::new(Cmd {
                    spec,
                    own: CmdStats::default(),
                    subs: latency::subcommands_of(spec.name)
                        .iter()
                        .map(|s| (*s, CmdStats::default()))
                        .collect(),
                    histogram: OnceLock::new(),
                }));
                m.insert(name, cmd);
            }
        }
        m
    })
}

/// Look a command up by its name as sent (any case).
pub fn lookup(name: &[u8]) -> Option<&'static Cmd> {
    // A pipeline repeats a few commands, and a script's calls a few more: a small cache of
    // names found on this thread, as sent (case and all), answers without lowercasing and
    // hashing them. Uncached, a lookup was about 330 instructions; a script alternating
    // ZINCRBY and ZREVRANK missed a one-entry cache every time. The table never changes once
    // built, so a remembered row stays right.
    let (Some(&first), Some(&last)) = (name.first(), name.last()) else {
        return lookup_uncached(name);
    };
    if name.len() > LAST_NAME_MAX {
        return lookup_uncached(name);
    }
    let slot =
        (name.len() + usize::from(first | 0x20) * 3 + usize::from(last | 0x20)) % LOOKUP_SLOTS;
    RECENT_LOOKUPS.with(|recent| {
        let (len, sent, row) = recent[slot].get();
        if let Some(row) = row {
            if usize::from(len) == name.len() && &sent[..name.len()] == name {
                return Some(row);
            }
        }
        let row = lookup_uncached(name)?;
        let mut sent = [0u8; LAST_NAME_MAX];
        sent[..name.len()].copy_from_slice(name);
        recent[slot].set((name.len() as u8, sent, Some(row)));
        Some(row)
    })
}

/// The longest command name [`lookup`] remembers, and how many it remembers (one per slot).
const LAST_NAME_MAX: usize = 22;
const LOOKUP_SLOTS: usize = 8;

type RecentLookup = std::cell::Cell<(u8, [u8; LAST_NAME_MAX], Option<&'static Cmd>)>;

thread_local! {
    /// [`lookup`]'s recent hits on this thread: a name's length and bytes as sent, its row.
    static RECENT_LOOKUPS: [RecentLookup; LOOKUP_SLOTS] = const {
        [const { std::cell::Cell::new((0, [0; LAST_NAME_MAX], None)) }; LOOKUP_SLOTS]
    };
}

fn lookup_uncached(name: &[u8]) -> Option<&'static Cmd> {
    let mut buf = [0u8; 64];
    if name.len() > buf.len() {
        return None;
    }
    for (d, s) in buf.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    let lower = std::str::from_utf8(&buf[..name.len()]).ok()?;
    table().get(lower).copied()
}

/// Redis's error for an unknown command; see [`errors::unknown_command`].
pub fn unknown_command(args: &[Bytes]) -> Reply {
    errors::unknown_command(args)
}

/// Result of running a request.
pub struct Outcome {
    pub reply: Reply,
    pub block: Option<Blocked>,
    pub close: bool,
    /// The request was not run because clients are paused (CLIENT PAUSE): the connection
    /// waits for the pause to change and submits it again.
    pub postponed: Option<Vec<Bytes>>,
    /// The command blocked: what [`after_unblocked`] needs once it is answered.
    pub(crate) unblock_stats: Option<(&'static Cmd, Vec<Bytes>)>,
    /// Work the command left for the connection, after what it owes is sent ([`takeover`]).
    pub(crate) takeover: Option<takeover::Takeover>,
    /// What is written with the reply ([`ReplyExtras`]).
    pub extras: ReplyExtras,
}

/// Who sent a command whose error reply nobody reads: the stream of this server's master, or
/// the AOF being loaded.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PropagationSource {
    Master,
    AofLoader,
}

/// A propagated command failed: the master (or the file) and this server's data disagree.
/// As Redis's afterErrorReply: log it at warning level with the command's name (`<unknown>`
/// for a command that does not exist), count it (INFO unexpected_error_replies), and with
/// `propagation-error-behavior panic` (also `panic-on-replicas`, for a read-only replica's
/// master stream) stop rather than go on with data that may have diverged. The errors of the
/// commands an EXEC ran are reported one by one.
pub fn report_propagation_error(
    srv: &Server,
    source: PropagationSource,
    name: &str,
    reply: &Reply,
) {
    match reply {
        Reply::Array(items) if name == "exec" => {
            for item in items {
                report_propagation_error(srv, source, "exec", item);
            }
        }
        r => {
            let Some(e) = r.error_text() else {
                return;
            };
            let (from, to) = match source {
                PropagationSource::Master => ("replica", "master"),
                PropagationSource::AofLoader => ("server", "AOF-loading-client"),
            };
            let text: String = e.chars().take(4096).collect();
            tracing::warn!(
                "== CRITICAL == This {from} is sending an error to its {to}: '{text}' after processing the command '{name}'"
            );
            srv.stats
                .unexpected_error_replies
                .fetch_add(1, Ordering::Relaxed);
            let behavior = srv.config.text(dir::PROPAGATION_ERROR_BEHAVIOR);
            let panic = match source {
                PropagationSource::AofLoader => behavior == "panic",
                PropagationSource::Master => {
                    srv.config.flag(dir::REPLICA_READ_ONLY)
                        && matches!(behavior.as_str(), "panic" | "panic-on-replicas")
                }
            };
            if panic {
                tracing::error!(
                    "This {from} panicked sending an error to its {to} after processing the command '{name}'"
                );
                std::process::exit(1);
            }
        }
    }
}

/// Before a pipelined batch of requests runs (`batch`, in database `db`): warm the cache for
/// what it will read, so that the cache misses of its lookups overlap instead of coming one
/// request after another. The keys of the common single-key reads and writes have their
/// keyspace table lines prefetched ([`crate::keyspace::Keyspace::warm_keys`]); requests on one
/// large sorted set get their member lookups and skip-list searches warmed
/// ([`zset::warm_batch`]). Only reads, and only hints: the requests then run in order.
pub fn warm_batch(srv: &Server, db: usize, batch: &[Vec<Bytes>]) {
    // The first WARM_AHEAD keys only, gathered on the stack: a vector grown key by key cost
    // more than the prefetching saved (5% of a pipelined GET), and lines prefetched much
    // further ahead than that would be evicted before their request runs.
    const WARM_AHEAD: usize = 64;
    let mut keys: [&[u8]; WARM_AHEAD] = [&[]; WARM_AHEAD];
    let mut n = 0;
    for a in batch {
        if n == WARM_AHEAD {
            break;
        }
        if a.len() >= 2 && warms_first_key(&a[0]) {
            keys[n] = &a[1][..];
            n += 1;
        }
    }
    if n > 1 {
        srv.keyspace.warm_keys(db, &keys[..n]);
    }
    zset::warm_batch(srv, db, batch);
}

/// True for the common single-key commands whose key `warm_batch` prefetches. Sorted by name
/// length so a request is compared with a handful of names at most (this runs for every
/// request of every pipelined batch).
fn warms_first_key(name: &[u8]) -> bool {
    let candidates: &[&str] = match name.len() {
        3 => &["get", "set", "del", "ttl"],
        4 => &["incr", "decr", "type", "pttl", "hget", "hset", "sadd"],
        5 => &["setex", "getex"],
        6 => &[
            "getdel", "getset", "incrby", "decrby", "exists", "unlink", "expire",
        ],
        7 => &["pexpire", "hgetall", "hincrby"],
        9 => &["sismember"],
        _ => return false,
    };
    candidates.iter().any(|c| args::eq(name, c))
}

/// Run one request for `client`.
pub fn dispatch(srv: &Server, client: &mut Client, args: Vec<Bytes>) -> Outcome {
    let mut g = Guards::new(&srv.keyspace);
    dispatch_with(srv, client, args, &mut g)
}

/// [`dispatch`] reusing a connection's lock bookkeeping (saves allocations per command).
pub fn dispatch_with<'a>(
    srv: &'a Server,
    client: &mut Client,
    args: Vec<Bytes>,
    g: &mut Guards<'a>,
) -> Outcome {
    let done = |reply| Outcome {
        reply,
        block: None,
        close: false,
        postponed: None,
        unblock_stats: None,
        takeover: None,
        extras: ReplyExtras::default(),
    };
    debug::wait_while_stopped();
    srv.tracking.before_command(srv);
    // ASKING covers the one command after it (or the transaction it precedes): the flag is
    // settled for this command before it is read.
    client.cluster.command_starts(client.multi.is_some());
    let asking = client.cluster.asking;
    // Shard channels a slot move took from this client are forgotten before it runs more.
    crate::pubsub::PubSub::forget_dropped(&client.info, &mut client.subs);
    let Some(spec) = lookup(&args[0]) else {
        if client.multi.is_some() {
            client.multi_abort = true;
        }
        srv.stats.error_replies.fetch_add(1, Ordering::Relaxed);
        return done(unknown_command(&args));
    };
    // While the dataset loads only commands flagged LOADING run (the loader's own client, which
    // obeys, applies the file); checked first, before the arity.
    let refused_while_loading = || {
        if srv.aof.loading() {
            spec.flags & flags::LOADING == 0
        } else {
            spec.flags & flags::NO_ASYNC_LOADING != 0 && srv.aof.async_loading()
        }
    };
    let mut loading_refused = refused_while_loading();
    if loading_refused && !client.obeys() && srv.aof.loading() {
        // Redis would not have read this request before its loader's next step.
        let interval = srv
            .config
            .int(crate::config::dir::LOADING_PROCESS_EVENTS_INTERVAL_BYTES);
        srv.aof.hold_for_load(interval.max(1) as u64);
        loading_refused = refused_while_loading();
    }
    if loading_refused && !client.obeys() {
        if client.multi.is_some() {
            client.multi_abort = true;
        }
        return done(Reply::error(
            "LOADING Redis is loading the dataset in memory",
        ));
    }
    if !arity_ok(spec.arity, args.len()) {
        spec.stats(&args).rejected.fetch_add(1, Ordering::Relaxed);
        if client.multi.is_some() {
            client.multi_abort = true;
        }
        srv.stats.error_replies.fetch_add(1, Ordering::Relaxed);
        return done(wrong_arity(spec.name));
    }
    // A subcommand's arity is checked here too, as Redis checks it for every subcommand.
    if let Some(full) = subcommand_arity_error(spec, &args) {
        spec.stats(&args).rejected.fetch_add(1, Ordering::Relaxed);
        if client.multi.is_some() {
            client.multi_abort = true;
        }
        srv.stats.error_replies.fetch_add(1, Ordering::Relaxed);
        return done(wrong_arity(&full));
    }
    if let Some(refusal) = protected_command_refusal(srv, spec.name, &client.info.addr) {
        spec.stats(&args).rejected.fetch_add(1, Ordering::Relaxed);
        if client.multi.is_some() {
            client.multi_abort = true;
        }
        srv.stats.error_replies.fetch_add(1, Ordering::Relaxed);
        return done(refusal);
    }
    if !client.authenticated && spec.flags & flags::NO_AUTH == 0 {
        if client.multi.is_some() {
            client.multi_abort = true;
        }
        spec.stats(&args).rejected.fetch_add(1, Ordering::Relaxed);
        srv.stats.error_replies.fetch_add(1, Ordering::Relaxed);
        return done(Reply::error("NOAUTH Authentication required."));
    }
    if let Err((denied, pos, id)) = crate::commands::acl::check(client, spec, &args) {
        let context = if client.multi.is_some() {
            "multi"
        } else {
            "toplevel"
        };
        crate::commands::acl::log_denial(srv, client, denied, pos, id, &args, context);
        spec.stats(&args).rejected.fetch_add(1, Ordering::Relaxed);
        if client.multi.is_some() {
            client.multi_abort = true;
        }
        srv.stats.error_replies.fetch_add(1, Ordering::Relaxed);
        return done(crate::acl::noperm(denied, id));
    }
    // Cluster mode: a command for keys this node does not serve is redirected (MOVED, ASK,
    // TRYAGAIN, CROSSSLOT, CLUSTERDOWN), where Redis checks it: after the ACL.
    if let Some(redirect) = cluster_redirect(srv, client, spec, &args, asking) {
        spec.stats(&args).rejected.fetch_add(1, Ordering::Relaxed);
        if spec.flags & flags::RUNS_QUEUE != 0 && client.multi.is_some() {
            tx::discard_for(srv, client);
        } else if client.multi.is_some() {
            client.multi_abort = true;
        }
        srv.stats.error_replies.fetch_add(1, Ordering::Relaxed);
        return done(redirect);
    }
    // A RESP2 client with subscriptions may only run what Redis allows in subscriber mode.
    if client.resp == crate::protocol::Resp::V2 && client.subs.total() > 0 {
        if let Some(e) = crate::pubsub::subscriber_mode_refusal(spec.name) {
            spec.stats(&args).rejected.fetch_add(1, Ordering::Relaxed);
            if client.multi.is_some() {
                client.multi_abort = true;
            }
            srv.stats.error_replies.fetch_add(1, Ordering::Relaxed);
            return done(Reply::Error(e));
        }
    }
    // A script past `busy-reply-threshold` holds every shard: refuse rather than wait, as
    // Redis does, except for what Redis still allows (SCRIPT KILL, SHUTDOWN, MULTI ...).
    if srv
        .scripts
        .busy(srv.config.hot.busy_reply_threshold.load(Ordering::Relaxed))
        && spec.flags & flags::ALLOW_BUSY == 0
        && !scripting::is_script_kill(&args)
    {
        if spec.flags & flags::RUNS_QUEUE != 0 && client.multi.is_some() {
            tx::discard_for(srv, client);
            return done(Reply::error(format!(
                "EXECABORT Transaction discarded because of: {}",
                srv.scripts.busy_reply()
            )));
        }
        if client.multi.is_some() {
            client.multi_abort = true;
        }
        srv.stats.error_replies.fetch_add(1, Ordering::Relaxed);
        return done(Reply::error(srv.scripts.busy_reply()));
    }
    // A replica's link carries nothing that touches the keyspace: refused, as Redis refuses
    // it (a replica is exempt from CLIENT PAUSE and must not slip writes past it). The
    // connection then drops the replica for the reply (see `connection::emit`).
    if client.repl.is_replica
        && spec.flags & (flags::WRITE | flags::READONLY | flags::MAY_REPLICATE) != 0
    {
        *client.info.last_cmd.lock() = latency::full_name(spec, &args);
        spec.stats(&args).rejected.fetch_add(1, Ordering::Relaxed);
        srv.stats.error_replies.fetch_add(1, Ordering::Relaxed);
        return done(Reply::error("ERR Replica can't interact with the keyspace"));
    }
    // Under CLIENT PAUSE the request waits (checked where Redis checks: before queueing).
    if crate::commands::pause::holds_back(srv, client, spec, &args) {
        return Outcome {
            reply: Reply::NoReply,
            block: None,
            close: false,
            postponed: Some(args),
            unblock_stats: None,
            takeover: None,
            extras: ReplyExtras::default(),
        };
    }
    // One clock read serves the command's duration (commandstats) and its notion of now.
    let started = crate::clock::command_stamp();
    crate::clock::note_command_start(started);
    let now = started.unix_ms();
    client.note_command(latency::full_name(spec, &args), now);
    let out_of_memory = evict_before_command(srv);
    if client.info.killed.load(Ordering::Relaxed) {
        // Client eviction chose this client (or it was killed meanwhile): as Redis, the
        // command does not run.
        return Outcome {
            reply: Reply::NoReply,
            block: None,
            close: true,
            postponed: None,
            unblock_stats: None,
            takeover: None,
            extras: ReplyExtras::default(),
        };
    }
    if client.multi.is_some() && spec.flags & flags::NOT_QUEUED == 0 {
        if spec.flags & flags::NO_MULTI != 0 {
            client.multi_abort = true;
            spec.stats(&args).rejected.fetch_add(1, Ordering::Relaxed);
            srv.stats.error_replies.fetch_add(1, Ordering::Relaxed);
            return done(Reply::error("ERR Command not allowed inside a transaction"));
        }
        if let Some(err) = dispatch_refusal(srv, spec, &args, out_of_memory, client.obeys()) {
            client.multi_abort = true;
            spec.stats(&args).rejected.fetch_add(1, Ordering::Relaxed);
            srv.stats.error_replies.fetch_add(1, Ordering::Relaxed);
            return done(err);
        }
        client.queue_command(args);
        return done(Reply::Status("QUEUED"));
    }
    if let Some(err) = dispatch_refusal(srv, spec, &args, out_of_memory, client.obeys()) {
        spec.stats(&args).rejected.fetch_add(1, Ordering::Relaxed);
        srv.stats.error_replies.fetch_add(1, Ordering::Relaxed);
        return done(err);
    }
    // EXEC is checked again with what it queued, as the server's state may have changed
    // since (Redis's cmd_flags / cmd_inv_flags of the transaction).
    if spec.flags & flags::RUNS_QUEUE != 0 && !client.obeys() {
        if let Some(queue) = client.multi.as_ref() {
            let (mut any, mut all_stale, mut ping) = (0u32, true, false);
            for a in queue {
                if let Some(c) = lookup(&a[0]) {
                    let f = crate::commands::scripting::effective_command_flags(
                        srv, c.name, a, c.flags,
                    );
                    any |= f;
                    all_stale &= f & flags::STALE != 0;
                    ping |= c.flags & flags::MISCONF_REFUSED != 0;
                }
            }
            let fl =
                (any & (flags::WRITE | flags::DENYOOM)) | if all_stale { flags::STALE } else { 0 };
            if let Some(Reply::Error(e)) = refusal_by_flags(srv, fl, ping, out_of_memory, false) {
                tx::discard_for(srv, client);
                srv.stats.error_replies.fetch_add(1, Ordering::Relaxed);
                return done(Reply::Error(format!(
                    "EXECABORT Transaction discarded because of: {e}"
                )));
            }
        }
    }
    if let Run::Session(handler) = spec.run {
        let mut extras = ReplyExtras::default();
        let reply = reply_of(handler(srv, client, &args, &mut extras));
        feed_monitors(srv, client, client.db, &args);
        count_transaction_command(srv, client, spec, &args, &reply, started);
        return Outcome {
            extras,
            ..done(reply)
        };
    }
    g.now_ms = now;
    let Ran {
        reply,
        blocked: block,
        close,
        takeover,
        extras,
    } = run_locked(srv, client, spec, &args, g, false, started);
    srv.stats.commands.add(1);
    // CLIENT CACHING applies to the one command after it (or the transaction it opens).
    if spec.flags & flags::KEEPS_CACHING == 0 && client.multi.is_none() {
        client.tracking_caching = false;
    }
    if block.is_none() {
        slowlog::record(srv, client, spec, &args, client.last_duration_us);
    }
    let unblock_stats = block.as_ref().map(|_| (spec, args));
    Outcome {
        reply,
        block,
        close,
        postponed: None,
        unblock_stats,
        takeover,
        extras,
    }
}

/// Cluster mode's routing of a request (see `crate::cluster::routing`): None when this
/// node serves it. Our master's link and the AOF loader are never redirected, and neither
/// is a command without keys (but EXEC is checked with what it queued).
fn cluster_redirect(
    srv: &Server,
    client: &Client,
    spec: &Cmd,
    args: &[Bytes],
    asking: bool,
) -> Option<Reply> {
    crate::cluster::get(srv)?;
    if client.obeys() {
        return None;
    }
    let shard_pubsub = matches!(spec.name, "ssubscribe" | "sunsubscribe" | "spublish");
    let keys_of = |spec: &Spec, a: &'_ [Bytes]| -> Vec<usize> {
        match spec.name {
            "ssubscribe" | "sunsubscribe" => (1..a.len()).collect(),
            "spublish" => vec![1],
            _ => spec.key_positions(a),
        }
    };
    // A script's declared flags stand for EVAL's and FCALL's own (Redis's getCommandFlags):
    // a script that may write is redirected from a replica as any write is.
    let writes = |c: &Spec, a: &[Bytes]| {
        crate::commands::scripting::effective_command_flags(srv, c.name, a, c.flags) & flags::WRITE
            != 0
    };
    let mut keys: Vec<&[u8]> = Vec::new();
    let command_writes = writes(spec, args);
    let mut any_write = command_writes;
    if spec.flags & flags::RUNS_QUEUE != 0 {
        for a in client.multi.as_deref()? {
            if let Some(c) = lookup(&a[0]) {
                any_write |= writes(c, a);
                keys.extend(keys_of(c, a).into_iter().map(|i| &a[i][..]));
            }
        }
    } else {
        keys.extend(keys_of(spec, args).into_iter().map(|i| &args[i][..]));
    }
    if keys.is_empty() {
        return None;
    }
    crate::cluster::routing::redirect(
        srv,
        &crate::cluster::routing::Query {
            keys,
            command_writes,
            any_write,
            pubsub_shard: shard_pubsub,
            migrate: spec.name == "migrate",
            asking: asking || spec.name == "restore-asking",
            readonly: client.cluster.readonly,
            on_tls: client.cluster.on_tls,
        },
    )
}

/// Cluster mode: the routing of a command for a slot this node is migrating, checked again
/// now that the command holds its keys' locks (`cluster::routing::recheck_migrating`): a
/// MIGRATE may have moved a key since [`cluster_redirect`] found it here. MIGRATE itself, our
/// master's link and the AOF loader are not redirected.
fn recheck_migrating_slot(
    srv: &Server,
    client: &Client,
    spec: &Cmd,
    args: &[Bytes],
    g: &mut Guards<'_>,
) -> Option<Reply> {
    crate::cluster::get(srv)?;
    if client.obeys() || matches!(spec.name, "migrate" | "restore-asking") {
        return None;
    }
    // The common case, a slot that is not moving, is told by the first key without listing
    // the others (every key of a routed command is in one slot).
    let writes = spec.flags & flags::WRITE != 0;
    if let Keys::Range(first, last, step) = spec.keys {
        let first = range_positions(first, last, step, args.len()).next()?;
        if !crate::cluster::routing::needs_recheck(srv, &args[first], writes) {
            return None;
        }
    }
    let positions = spec.key_positions(args);
    let keys: Vec<&[u8]> = positions.iter().map(|&i| &args[i][..]).collect();
    recheck_migrating_keys(srv, &keys, writes, client.cluster.on_tls, g)
}

/// [`crate::cluster::routing::recheck_migrating`] with each key looked up in the shards `g`
/// holds (cluster mode has database 0 only; an expired key counts as absent, as Redis's
/// lookup for routing finds it).
pub(crate) fn recheck_migrating_keys(
    srv: &Server,
    keys: &[&[u8]],
    writes: bool,
    on_tls: bool,
    g: &mut Guards<'_>,
) -> Option<Reply> {
    let now = g.now_ms;
    crate::cluster::routing::recheck_migrating(srv, keys, writes, on_tls, |k| {
        let shard = g.shard_mut(0, srv.keyspace.shard_of(k));
        shard.raw_get(k).is_some() && !shard.is_expired(k, now)
    })
}

/// `name|sub` when `args` call a subcommand Podium runs with the wrong number of arguments
/// for it (Redis's table row gives the arity).
#[inline]
pub(crate) fn subcommand_arity_error(spec: &Cmd, args: &[Bytes]) -> Option<String> {
    if spec.subs.is_empty() {
        return None;
    }
    subcommand_arity_error_of(spec, args)
}

/// [`subcommand_arity_error`] for a container command.
fn subcommand_arity_error_of(spec: &Cmd, args: &[Bytes]) -> Option<String> {
    let sub = args.get(1)?;
    let (name, _) = spec
        .subs
        .iter()
        .find(|(n, _)| sub.eq_ignore_ascii_case(n.as_bytes()))?;
    let full = format!("{}|{name}", spec.spec.name);
    let row = crate::acl::view::command_row(&full)?;
    (!arity_ok(row.arity, args.len())).then_some(full)
}

/// The statistics of EXEC, MULTI, DISCARD, WATCH and UNWATCH, which run outside
/// [`run_locked`]: calls and time in INFO commandstats, `failed_calls` and
/// `total_error_replies` when their own reply is an error (EXECABORT, EXEC without MULTI;
/// errors of the commands an EXEC ran are counted by those commands), the slowlog and
/// latency figures.
fn count_transaction_command(
    srv: &Server,
    client: &mut Client,
    spec: &'static Cmd,
    args: &[Bytes],
    reply: &Reply,
    started: crate::clock::Stamp,
) {
    let duration_us = started.elapsed_us();
    client.last_duration_us = duration_us;
    let stats = spec.stats(args);
    stats.calls.add(1);
    stats.usec.add(duration_us);
    srv.stats.commands.add(1);
    if reply.is_error() {
        stats.failed.fetch_add(1, Ordering::Relaxed);
        srv.stats.error_replies.fetch_add(1, Ordering::Relaxed);
    }
    slowlog::record(srv, client, spec, args, duration_us);
}

/// A blocked command has been answered with `reply` (served, timed out or unblocked): as
/// Redis, a failure counts in its `failed_calls` and `total_error_replies`, and the command
/// goes to the slowlog and its latency histogram now, with the time it ran for.
pub(crate) fn after_unblocked(
    srv: &Server,
    client: &Client,
    (spec, args): (&'static Cmd, Vec<Bytes>),
    reply: &Reply,
) {
    if reply.is_error() {
        spec.stats(&args).failed.fetch_add(1, Ordering::Relaxed);
        srv.stats.error_replies.fetch_add(1, Ordering::Relaxed);
    }
    slowlog::record(srv, client, spec, &args, client.last_duration_us);
}

/// DEBUG and MODULE run only where `enable-debug-command` / `enable-module-command` allow
/// the client (`yes`, or `local` for a client on 127.0.0.1 or ::1): Redis's wording otherwise.
fn protected_command_refusal(srv: &Server, name: &str, peer: &str) -> Option<Reply> {
    let (label, directive) = match name {
        "debug" => ("DEBUG", dir::ENABLE_DEBUG_COMMAND),
        "module" => ("MODULE", dir::ENABLE_MODULE_COMMAND),
        _ => return None,
    };
    let setting = srv.config.text(directive);
    let directive = directive.name();
    if crate::config::protected_action_allowed(&setting, crate::net::is_local_peer(peer)) {
        return None;
    }
    Some(Reply::Error(format!(
        "ERR {label} command not allowed. If the {directive} option is set to \"local\", you can run it from a local connection, otherwise you need to set this option in the configuration file, and then restart the server."
    )))
}

/// Why `spec` must be refused now, if it must: `-MISCONF` for writes (and PING) while the AOF
/// cannot be written, `-OOM` for memory-growing commands over `maxmemory`. For a command a
/// script runs: the script holds shard locks, so nothing is evicted here (the EVAL evicted
/// before it started, as Redis decides a script's OOM state before the script runs).
pub(crate) fn write_refusal(srv: &Server, spec: &Spec) -> Option<Reply> {
    let max = srv.config.hot.maxmemory.load(Ordering::Relaxed);
    write_refusal_oom(
        srv,
        spec,
        max > 0 && crate::evict::counted_memory(srv) > max,
        false,
    )
}

/// As Redis before every command: over `maxmemory`, evict (whatever the command); true when
/// the memory is still over the limit and nothing more can go. Called with no shard locked.
/// Nothing is evicted while a load replays commands.
fn evict_before_command(srv: &Server) -> bool {
    crate::client_evict::evict_clients(srv);
    let max = srv.config.hot.maxmemory.load(Ordering::Relaxed);
    max > 0
        && !srv.aof.loading()
        && !(srv.repl.is_following() && srv.config.flag(dir::REPLICA_IGNORE_MAXMEMORY))
        && crate::evict::counted_memory(srv) > max
        && crate::evict::free_memory(srv) == crate::evict::Outcome::Fail
}

/// The dispatcher's refusals of `args` (see [`refusal_by_flags`]) with the flags Redis uses
/// for it: a container's subcommand adds its own (FUNCTION LOAD writes and may grow memory),
/// and EVAL's and FCALL's are those the script declares, when it declares any (Redis's
/// getCommandFlags).
fn dispatch_refusal(
    srv: &Server,
    spec: &Cmd,
    args: &[Bytes],
    out_of_memory: bool,
    from_master: bool,
) -> Option<Reply> {
    let mut fl = spec.flags;
    // A container command is one with subcommands in its record.
    if args.len() > 1 && !spec.subs.is_empty() {
        let full = format!(
            "{}|{}",
            spec.name,
            String::from_utf8_lossy(&args[1]).to_ascii_lowercase()
        );
        if let Some(row) = crate::acl::view::command_row(&full) {
            if row.flags.contains(&"write") {
                fl |= flags::WRITE;
            }
            if row.flags.contains(&"denyoom") {
                fl |= flags::DENYOOM;
            }
            // Whether a subcommand runs on a stale replica is its own (SCRIPT LOAD does,
            // SCRIPT EXISTS does not).
            if row.flags.contains(&"stale") {
                fl |= flags::STALE;
            } else {
                fl &= !flags::STALE;
            }
        }
    }
    if spec.flags & flags::MOVABLE_KEYS != 0
        && spec.group == "scripting"
        && refusal_by_flags(
            srv,
            (fl | flags::WRITE | flags::DENYOOM) & !flags::STALE,
            false,
            out_of_memory,
            from_master,
        )
        .is_some()
    {
        // Only when the server refuses something does what a script declares matter (this
        // reads the script's flags, which for EVAL means hashing its text).
        fl = crate::commands::scripting::effective_command_flags(srv, spec.name, args, fl);
    }
    refusal_by_flags(
        srv,
        fl,
        spec.flags & flags::MISCONF_REFUSED != 0,
        out_of_memory,
        from_master,
    )
}

/// [`write_refusal`] given whether memory is over `maxmemory` with nothing left to evict.
/// Nothing is refused to our master's link (`from_master`): a replica applies what its
/// master did, as Redis's obey-client rule.
fn write_refusal_oom(
    srv: &Server,
    spec: &Spec,
    out_of_memory: bool,
    from_master: bool,
) -> Option<Reply> {
    refusal_by_flags(
        srv,
        spec.flags,
        spec.flags & flags::MISCONF_REFUSED != 0,
        out_of_memory,
        from_master,
    )
}

/// [`write_refusal_oom`] for a command of `cmd_flags` (`is_ping`: PING, which MISCONF
/// refuses too). EXEC passes the flags of what it queued.
fn refusal_by_flags(
    srv: &Server,
    cmd_flags: u32,
    is_ping: bool,
    out_of_memory: bool,
    from_master: bool,
) -> Option<Reply> {
    if from_master {
        return None;
    }
    if cmd_flags & flags::WRITE != 0 || is_ping {
        if let Some(e) = crate::persistence::snapshot::write_refusal(srv) {
            return Some(Reply::error(e));
        }
        if let Some(e) = srv.aof.write_error() {
            return Some(Reply::error(format!(
                "MISCONF Errors writing to the AOF file: {e}"
            )));
        }
    }
    if out_of_memory && cmd_flags & flags::DENYOOM != 0 {
        return Some(Reply::error(
            "OOM command not allowed when used memory > 'maxmemory'.",
        ));
    }
    if cmd_flags & flags::WRITE != 0 {
        if let Some(e) = no_good_replicas(srv) {
            return Some(e);
        }
    }
    crate::state::replica_link::refusal(
        srv,
        cmd_flags & flags::WRITE != 0,
        cmd_flags & flags::STALE != 0,
        false,
    )
}

/// Redis's -NOREPLICAS: with `min-replicas-to-write` and `min-replicas-max-lag` set, a write
/// needs that many online replicas that acknowledged within the lag.
pub(crate) fn no_good_replicas(srv: &Server) -> Option<Reply> {
    if !srv
        .config
        .hot
        .good_replicas_required
        .load(Ordering::Relaxed)
        || crate::state::replica_link::is_replica(srv)
    {
        return None;
    }
    let need = srv.config.int(dir::MIN_REPLICAS_TO_WRITE).max(0) as usize;
    let lag = srv.config.int(dir::MIN_REPLICAS_MAX_LAG);
    (srv.repl.good_replicas(lag) < need)
        .then(|| Reply::error("NOREPLICAS Not enough good replicas to write."))
}

/// A write to a key that a BLMOVE / BRPOPLPUSH waits on serves it, which writes to the
/// waiter's destination: lock those destinations too before the command runs, so serving
/// never waits for a shard (or lets go of the command's own) half way. Looking the waiters up
/// takes the registry after the keys' shards, in the order waiters register in; a waiter that
/// registers before the keys are locked is found by looking again, until nothing is missing.
fn lock_move_destinations(
    srv: &Server,
    db: usize,
    spec: &'static Cmd,
    args: &[Bytes],
    g: &mut Guards,
) {
    let pos = spec.key_positions(args);
    loop {
        let missing: Vec<Bytes> = srv
            .blocking
            .move_destinations(db, pos.iter().map(|&i| &args[i][..]))
            .into_iter()
            .filter(|k| !g.holds_key(db, k))
            .collect();
        if missing.is_empty() {
            return;
        }
        g.lock_keys(db, missing.iter().map(|k| &k[..]));
    }
}

/// Lock what `spec` needs, run it, log it, serve blocked clients, unlock. `started` is when
/// the command began (its INFO commandstats duration runs from there).
pub fn run_locked<'a>(
    srv: &'a Server,
    client: &mut Client,
    spec: &'static Cmd,
    args: &[Bytes],
    g: &mut Guards<'a>,
    in_exec: bool,
    started: crate::clock::Stamp,
) -> Ran {
    let own_locks = g.is_empty();
    if own_locks {
        match spec.keys {
            Keys::None => {}
            Keys::Db | Keys::DbNamed(_) => g.lock_db(client.db),
            Keys::All => g.lock_all(),
            Keys::Range(1, 1, _) => g.lock_one(client.db, &args[1]),
            _ => {
                let pos = spec.key_positions(args);
                g.lock_keys(client.db, pos.iter().map(|&i| &args[i][..]));
            }
        }
        if spec.flags & flags::WRITE != 0
            && srv.keyspace.blocked_clients.load(Ordering::Relaxed) > 0
            && matches!(spec.keys, Keys::Range(..) | Keys::Custom(..))
        {
            lock_move_destinations(srv, client.db, spec, args, g);
        }
        if let Some(redirect) = recheck_migrating_slot(srv, client, spec, args, g) {
            g.release();
            spec.stats(args).rejected.fetch_add(1, Ordering::Relaxed);
            srv.stats.error_replies.fetch_add(1, Ordering::Relaxed);
            return Ran {
                reply: redirect,
                blocked: None,
                close: false,
                takeover: None,
                extras: ReplyExtras::default(),
            };
        }
    }
    // The clock was set by the caller: once per request, or once for a whole EXEC (as Redis
    // freezes time for expiry during a transaction).
    // A replica deletes no expired key itself (its master's DELs do): its master's commands
    // see every key, other clients see expired keys as absent without deleting them.
    let following = srv.repl.is_following();
    g.expire_enabled = !(srv.aof.loading() || following && client.repl.is_master);
    g.expire_paused = srv.pause.is_active() || following;
    g.replica_write = following && !client.repl.is_master;
    g.notify_flags = srv.config.hot.notify_flags.load(Ordering::Relaxed);
    g.tracking = srv.tracking.is_active();
    let db_before = client.db;
    // MONITOR sees a command once it has run (administrative ones never); a script is shown
    // before the commands it runs.
    let monitored = srv.pubsub.has_monitors() && spec.flags & flags::ADMIN == 0;
    let script_first = spec.flags & flags::RUNS_SCRIPT != 0;
    if monitored && script_first {
        feed_monitors(srv, client, db_before, args);
    }
    if script_first && srv.tracking.is_active() {
        // EVAL script numkeys key ... (FCALL function numkeys key ...): the declared keys.
        let n = args
            .get(2)
            .and_then(|n| crate::util::numtext::parse_i64(n))
            .unwrap_or(0)
            .clamp(0, args.len().saturating_sub(3) as i64) as usize;
        client.script_keys = args[3..3 + n].to_vec();
    }
    let mut ctx = Ctx {
        srv,
        client,
        g,
        dirty: 0,
        propagate: None,
        block: None,
        in_exec,
        close_after_reply: false,
        takeover: None,
        extras: ReplyExtras::default(),
        started,
    };
    let long = long::expected_long(ctx.g, ctx.client.db, spec, args);
    let busy = crate::watchdog::busy();
    let reply = match spec.run {
        Run::Keyed(handler) => long::run_maybe_off_io(long, || reply_of(handler(&mut ctx, args))),
        // Only UNWATCH gets here: queued in a transaction (MULTI, EXEC, DISCARD and WATCH
        // never are) and run by EXEC, which has already dropped the client's WATCHes, as
        // Redis's does, so it takes no lock.
        Run::Session(handler) => reply_of(handler(ctx.srv, ctx.client, args, &mut ctx.extras)),
    };
    drop(busy);
    let duration_us = started.elapsed_us();
    ctx.client.last_duration_us = duration_us;
    let stats = spec.stats(args);
    stats.usec.add(duration_us);
    stats.calls.add(1);
    let Ctx {
        dirty,
        propagate,
        block,
        close_after_reply,
        takeover,
        mut extras,
        ..
    } = ctx;
    if monitored && !script_first {
        feed_monitors(srv, client, client.db, args);
    }
    if reply.is_error() {
        spec.stats(args).failed.fetch_add(1, Ordering::Relaxed);
        // A script's error that a command it called counted already is not counted twice.
        if crate::state::scripts::take_error_already_counted() {
            if !in_exec {
                client.error_reply_counted = true;
            }
        } else {
            srv.stats.error_replies.fetch_add(1, Ordering::Relaxed);
        }
    }
    // Lazily expired keys are logged as DEL before the command itself.
    let expired = propagate_expired(srv, g);
    if dirty > 0 {
        srv.stats.dirty.add(dirty);
    }
    if dirty > 0 && srv.logging() {
        match propagate {
            Some(cmds) => {
                for c in cmds {
                    srv.propagate(db_before, c);
                }
            }
            None => srv.propagate(db_before, args.to_vec()),
        }
        // WAIT waits for the replicas to reach this client's last write.
        if !in_exec && srv.repl.is_active() {
            client.repl.woff = srv.repl.offset();
        }
    }
    // Only what moved.
    let (hits, misses) = (std::mem::take(&mut g.hits), std::mem::take(&mut g.misses));
    if hits > 0 {
        srv.stats.keyspace_hits.add(hits);
    }
    if misses > 0 {
        srv.stats.keyspace_misses.add(misses);
    }
    // Inside EXEC, blocked clients are served once the whole transaction has run.
    if !in_exec && !g.ready.is_empty() {
        serve_blocked(srv, g);
    }
    if g.tracking {
        let mut own = tracking_after_command(srv, client, spec, args, &expired, g, !in_exec);
        extras.after.append(&mut own);
    }
    // Keyspace events of the command (and of the blocked clients it served), in order.
    if !g.events.is_empty() {
        crate::notify::publish_all(srv, &mut g.events);
    }
    let blocked = block.map(|b| {
        let blocked = srv.blocking.block(
            g,
            client.id,
            client.db,
            b.keys,
            b.args.unwrap_or_else(|| args.to_vec()),
            b.serve,
            b.serve_each,
            client.cluster.readonly && !spec.is_write(),
            client.cluster.on_tls,
        );
        client.block_timeout_ms = b.timeout_ms;
        client.block_timeout_reply = Some(b.on_timeout);
        blocked
    });
    if own_locks {
        g.release();
    }
    Ran {
        reply,
        blocked,
        close: close_after_reply,
        takeover,
        extras,
    }
}

/// Client-side caching after a command: a tracking client's read-only command remembers its
/// keys; every key the command changed (or found expired) is invalidated. Returns the
/// invalidations meant for this client itself (written after its reply).
fn tracking_after_command(
    srv: &Server,
    client: &mut Client,
    spec: &Spec,
    args: &[Bytes],
    expired: &[(usize, Bytes)],
    g: &mut Guards,
    broadcast: bool,
) -> Vec<u8> {
    let mut touched = std::mem::take(&mut g.touched);
    touched.extend(expired.iter().map(|(_, k)| k.clone()));
    let id = client.id;
    // The invalidations of this client's own keys, returned to go after its reply.
    let mut own = Vec::new();
    srv.tracking
        .invalidate(srv, &touched, id, Some(&mut own), broadcast);
    let script = spec.flags & flags::RUNS_SCRIPT != 0;
    if spec.flags & flags::READONLY != 0 && spec.flags & flags::PUBSUB == 0 && !script {
        let keys: Vec<&[u8]> = if client.in_script {
            client.script_keys.iter().map(|k| &k[..]).collect()
        } else {
            spec.key_positions(args)
                .into_iter()
                .map(|i| &args[i][..])
                .collect()
        };
        if !keys.is_empty() {
            srv.tracking
                .remember(srv, id, &keys, client.tracking_caching);
        }
    }
    own
}

/// Show a command to MONITOR clients.
fn feed_monitors(srv: &Server, client: &Client, db: usize, args: &[Bytes]) {
    if !srv.pubsub.has_monitors() {
        return;
    }
    let source = if client.in_script {
        crate::pubsub::MonitorSource::Lua
    } else {
        crate::pubsub::MonitorSource::Client(&client.info.addr)
    };
    let limit = srv.config.hot.obuf.classes[crate::config::OBUF_NORMAL].get();
    srv.pubsub.feed_monitors(source, db, args, limit);
}

/// Common argument helpers for handlers.
pub mod args {
    use crate::protocol::Reply;
    use crate::util::numtext::{parse_f64, parse_i64};

    pub use super::errors::{NOT_FLOAT, NOT_INT, SYNTAX};

    pub fn int(a: &[u8]) -> Result<i64, Reply> {
        parse_i64(a).ok_or_else(|| Reply::error(NOT_INT))
    }

    pub fn float(a: &[u8]) -> Result<f64, Reply> {
        parse_f64(a).ok_or_else(|| Reply::error(NOT_FLOAT))
    }

    pub fn eq(a: &[u8], word: &str) -> bool {
        a.eq_ignore_ascii_case(word.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The recent-lookups cache answers as the table does: every command in any case, in an
    /// order that makes names share slots, and unknown names (which it must not remember).
    #[test]
    fn cached_lookups_match_the_table() {
        let names: Vec<&str> = table().keys().copied().collect();
        for round in 0..3 {
            for (i, name) in names.iter().enumerate() {
                let sent = match (round + i) % 3 {
                    0 => name.to_string(),
                    1 => name.to_ascii_uppercase(),
                    _ => name
                        .chars()
                        .enumerate()
                        .map(|(j, c)| {
                            if j % 2 == 0 {
                                c.to_ascii_uppercase()
                            } else {
                                c
                            }
                        })
                        .collect(),
                };
                let row = lookup(sent.as_bytes()).map(|c| c.name);
                assert_eq!(row, Some(*name), "{sent}");
                assert!(
                    lookup(format!("{sent}x").as_bytes()).is_none()
                        || table().contains_key(format!("{name}x").as_str())
                );
            }
        }
        assert!(lookup(b"").is_none());
        assert!(lookup(b"no-such-command").is_none());
        assert!(lookup(&[0xff, 0xfe]).is_none());
    }

    #[test]
    fn every_command_is_registered_once() {
        // A second registration silently shadowed the first in the table (and leaked its
        // record): found by the lua_script fuzz target's leak check (a FUNCTION stub).
        let mut names: Vec<&str> = base_specs().map(|s| s.name).collect();
        let all = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all, "a command name is registered twice");
    }

    #[test]
    fn warmed_commands_are_known_single_key_commands() {
        for name in [
            "get",
            "SET",
            "Del",
            "ttl",
            "incr",
            "decr",
            "type",
            "pttl",
            "hget",
            "hset",
            "sadd",
            "setex",
            "getex",
            "getdel",
            "getset",
            "incrby",
            "decrby",
            "exists",
            "unlink",
            "expire",
            "pexpire",
            "hgetall",
            "hincrby",
            "sismember",
        ] {
            assert!(warms_first_key(name.as_bytes()), "{name}");
            // Every one is a real command whose first key is argument 1.
            let spec = lookup(name.as_bytes()).expect("a registered command");
            assert!(
                matches!(spec.keys, Keys::Range(1, _, _)),
                "{name}: first key is argument 1"
            );
        }
        for name in [
            "",
            "ge",
            "gett",
            "zscore",
            "mget",
            "keys",
            "scan",
            "ping",
            "sismembers",
        ] {
            assert!(!warms_first_key(name.as_bytes()), "{name}");
        }
    }
}

#[cfg(test)]
mod range_position_tests {
    /// The positions of a key range, as Redis's key specs name them, for every small range,
    /// step and request length: first..=last (last from the end when negative) by step,
    /// within the request, none when first is not positive.
    #[test]
    fn range_positions_follow_the_key_spec() {
        for n in 0..8usize {
            for first in -1..5 {
                for last in -3..6 {
                    for step in 0..4 {
                        let mut expected = Vec::new();
                        if first > 0 {
                            let last = if last < 0 { n as i32 + last } else { last };
                            let mut i = first;
                            while i <= last && i < n as i32 {
                                expected.push(i as usize);
                                i += step.max(1);
                            }
                        }
                        let got: Vec<usize> =
                            super::range_positions(first, last, step, n).collect();
                        assert_eq!(got, expected, "n {n} first {first} last {last} step {step}");
                    }
                }
            }
        }
    }
}
