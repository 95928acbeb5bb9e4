//! Command table and dispatch.
//!
//! Each family file (`zset.rs`, `string.rs`, ...) exports a `COMMANDS` table of [`Spec`]s: the
//! name, Redis's arity convention (positive = exact, negative = at least), flags, where the
//! keys are, and the handler. A handler parses its own arguments, works on the keyspace
//! through [`Ctx`], and returns a [`Reply`]; it never sees the protocol version except through
//! `ctx.client.resp` when a reply shape depends on it.
//!
//! [`dispatch`] runs one request: lookup, arity, authentication, MULTI queueing, lock the
//! shards the keys live in (in global order), run, then feed the AOF and serve clients that
//! were blocked on keys the command touched.

pub mod expire;
pub mod hash;
pub mod keys;
pub mod list;
pub mod script;
pub mod server;
pub mod set;
pub mod sort;
pub mod string;
pub mod tx;
pub mod zset;

use crate::blocking::{Blocked, ServeFn};
use crate::connection::Client;
use crate::keyspace::{DbHandle, Guards};
use crate::protocol::Reply;
use crate::server::Server;
use bytes::Bytes;
use hashbrown::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

pub type Handler = fn(&mut Ctx, &[Bytes]) -> Reply;

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
    pub handler: Handler,
    /// Group name reported by COMMAND DOCS (e.g. "sorted-set").
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
        Spec {
            name,
            arity,
            flags,
            keys,
            handler,
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
                if first <= 0 {
                    return Vec::new();
                }
                let n = args.len() as i32;
                let last = if last < 0 { n + last } else { last };
                let step = step.max(1);
                let mut v = Vec::new();
                let mut i = first;
                while i <= last && i < n {
                    v.push(i as usize);
                    i += step;
                }
                v
            }
            Keys::Custom(f) | Keys::DbNamed(f) => {
                f(args).into_iter().filter(|&i| i < args.len()).collect()
            }
            _ => Vec::new(),
        }
    }
}

/// A request to block the client (BZPOPMIN & co when nothing is available).
pub struct BlockRequest {
    pub keys: Vec<Bytes>,
    /// Timeout in ms; 0 = forever.
    pub timeout_ms: u64,
    pub serve: ServeFn,
    /// What the client gets when it times out.
    pub on_timeout: Reply,
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
}

impl<'c, 'a> Ctx<'c, 'a> {
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

    /// Log `cmds` in the AOF instead of the command as received.
    pub fn propagate_as(&mut self, cmds: Vec<Vec<Bytes>>) {
        self.propagate = Some(cmds);
    }
}

/// A registered command: its spec and its INFO commandstats counters.
pub struct Cmd {
    pub spec: &'static Spec,
    pub calls: AtomicU64,
    pub usec: AtomicU64,
    pub rejected: AtomicU64,
    pub failed: AtomicU64,
}

impl std::ops::Deref for Cmd {
    type Target = Spec;
    fn deref(&self) -> &Spec {
        self.spec
    }
}

/// The whole table, by lowercase name.
pub fn table() -> &'static HashMap<&'static str, &'static Cmd> {
    static TABLE: OnceLock<HashMap<&'static str, &'static Cmd>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut m = HashMap::default();
        for family in [
            server::COMMANDS,
            keys::COMMANDS,
            sort::COMMANDS,
            script::COMMANDS,
            expire::COMMANDS,
            string::COMMANDS,
            zset::COMMANDS,
            hash::COMMANDS,
            set::COMMANDS,
            list::COMMANDS,
            tx::COMMANDS,
        ] {
            for spec in family {
                let cmd: &'static Cmd = Box::leak(Box::new(Cmd {
                    spec,
                    calls: AtomicU64::new(0),
                    usec: AtomicU64::new(0),
                    rejected: AtomicU64::new(0),
                    failed: AtomicU64::new(0),
                }));
                m.insert(spec.name, cmd);
            }
        }
        m
    })
}

/// Look a command up by its name as sent (any case).
pub fn lookup(name: &[u8]) -> Option<&'static Cmd> {
    let mut buf = [0u8; 32];
    if name.len() > buf.len() {
        return None;
    }
    for (d, s) in buf.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    let lower = std::str::from_utf8(&buf[..name.len()]).ok()?;
    table().get(lower).copied()
}

/// Redis's text for an unknown command.
pub fn unknown_command(args: &[Bytes]) -> Reply {
    let name = String::from_utf8_lossy(&args[0]);
    let mut s = format!(
        "ERR unknown command '{}', with args beginning with: ",
        trunc(&name, 128)
    );
    for a in args.iter().skip(1) {
        let a = String::from_utf8_lossy(a);
        s.push_str(&format!("'{}' ", trunc(&a, 128)));
        if s.len() > 128 * 4 {
            break;
        }
    }
    Reply::Error(s)
}

fn trunc(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

pub fn wrong_arity(name: &str) -> Reply {
    Reply::Error(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

pub fn arity_ok(arity: i32, n: usize) -> bool {
    let n = n as i32;
    (arity > 0 && n == arity) || (arity < 0 && n >= -arity)
}

/// Result of running a request.
pub struct Outcome {
    pub reply: Reply,
    pub block: Option<Blocked>,
    pub close: bool,
}

/// Before a pipelined batch of requests runs (`batch`, in database `db`): warm the cache for
/// what it will read, so that the cache misses of its lookups overlap instead of coming one
/// request after another. The keys of the common single-key reads and writes have their
/// keyspace table lines prefetched ([`crate::keyspace::Keyspace::warm_keys`]); requests on one
/// large sorted set get their member lookups and skip-list searches warmed
/// ([`zset::warm_batch`]). Only reads, and only hints: the requests then run in order.
pub fn warm_batch(srv: &Server, db: usize, batch: &[Vec<Bytes>]) {
    let keys: Vec<&[u8]> = batch
        .iter()
        .filter(|a| a.len() >= 2 && warms_first_key(&a[0]))
        .map(|a| &a[1][..])
        .collect();
    if keys.len() > 1 {
        srv.keyspace.warm_keys(db, &keys);
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
    };
    let Some(spec) = lookup(&args[0]) else {
        if client.multi.is_some() {
            client.multi_abort = true;
        }
        srv.stats.error_replies.fetch_add(1, Ordering::Relaxed);
        return done(unknown_command(&args));
    };
    if !arity_ok(spec.arity, args.len()) {
        spec.rejected.fetch_add(1, Ordering::Relaxed);
        if client.multi.is_some() {
            client.multi_abort = true;
        }
        srv.stats.error_replies.fetch_add(1, Ordering::Relaxed);
        return done(wrong_arity(spec.name));
    }
    if !client.authenticated
        && spec.flags & flags::NO_AUTH == 0
        && srv.config.hot.requirepass_set.load(Ordering::Relaxed)
    {
        if client.multi.is_some() {
            client.multi_abort = true;
        }
        return done(Reply::error("NOAUTH Authentication required."));
    }
    // A script past `busy-reply-threshold` holds every shard: refuse rather than wait, as
    // Redis does, except for what Redis still allows (SCRIPT KILL, SHUTDOWN, MULTI ...).
    if srv
        .scripts
        .busy(srv.config.hot.busy_reply_threshold.load(Ordering::Relaxed))
        && spec.flags & flags::ALLOW_BUSY == 0
        && !script::is_script_kill(&args)
    {
        if spec.name == "exec" && client.multi.is_some() {
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
    // One clock read serves the command's duration (commandstats) and its notion of now.
    let started = std::time::Instant::now();
    let now = crate::server::unix_ms_at(started);
    client.info.set_last_cmd(spec.name, now);
    if client.multi.is_some()
        && !matches!(
            spec.name,
            "exec" | "discard" | "multi" | "watch" | "quit" | "reset"
        )
    {
        if spec.flags & flags::NO_MULTI != 0 {
            client.multi_abort = true;
            return done(Reply::error("ERR Command not allowed inside a transaction"));
        }
        if let Some(err) = write_refusal(srv, spec) {
            client.multi_abort = true;
            return done(err);
        }
        if let Some(q) = client.multi.as_mut() {
            q.push(args);
        }
        return done(Reply::Status("QUEUED"));
    }
    if let Some(err) = write_refusal(srv, spec) {
        spec.rejected.fetch_add(1, Ordering::Relaxed);
        return done(err);
    }
    match spec.name {
        "exec" => return done(tx::exec(srv, client)),
        "multi" | "discard" | "watch" | "unwatch" => {
            return done(tx::control(srv, client, spec.name, &args))
        }
        _ => {}
    }
    g.now_ms = now;
    let (reply, block, close) = run_locked(srv, client, spec, &args, g, false, started);
    srv.stats.commands.fetch_add(1, Ordering::Relaxed);
    Outcome {
        reply,
        block,
        close,
    }
}

/// Why `spec` must be refused now, if it must: `-MISCONF` for writes (and PING) while the AOF
/// cannot be written, `-OOM` for memory-growing commands over `maxmemory`.
pub(crate) fn write_refusal(srv: &Server, spec: &Spec) -> Option<Reply> {
    if spec.flags & flags::WRITE != 0 || spec.name == "ping" {
        if let Some(e) = srv.aof.write_error() {
            return Some(Reply::error(format!(
                "MISCONF Errors writing to the AOF file: {e}"
            )));
        }
    }
    let max = srv.config.hot.maxmemory.load(Ordering::Relaxed);
    if max > 0 && spec.flags & flags::DENYOOM != 0 && crate::alloc::used_memory() as i64 > max {
        return Some(Reply::error(
            "OOM command not allowed when used memory > 'maxmemory'.",
        ));
    }
    None
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
    started: std::time::Instant,
) -> (Reply, Option<Blocked>, bool) {
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
    }
    // The clock was set by the caller: once per request, or once for a whole EXEC (as Redis
    // freezes time for expiry during a transaction).
    g.expire_enabled = !srv.aof.loading();
    let db_before = client.db;
    let mut ctx = Ctx {
        srv,
        client,
        g,
        dirty: 0,
        propagate: None,
        block: None,
        in_exec,
        close_after_reply: false,
    };
    let reply = (spec.handler)(&mut ctx, args);
    spec.usec
        .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    spec.calls.fetch_add(1, Ordering::Relaxed);
    let Ctx {
        dirty,
        propagate,
        block,
        close_after_reply,
        ..
    } = ctx;
    if reply.is_error() {
        spec.failed.fetch_add(1, Ordering::Relaxed);
        srv.stats.error_replies.fetch_add(1, Ordering::Relaxed);
    }
    // Lazily expired keys are logged as DEL before the command itself.
    let expired = std::mem::take(&mut g.expired);
    for (db, key) in &expired {
        srv.propagate(*db, vec![Bytes::from_static(b"DEL"), key.clone()]);
    }
    if !expired.is_empty() {
        srv.stats
            .expired_keys
            .fetch_add(expired.len() as u64, Ordering::Relaxed);
    }
    if dirty > 0 {
        srv.stats.dirty.fetch_add(dirty, Ordering::Relaxed);
    }
    if dirty > 0 && srv.aof.is_enabled() {
        match propagate {
            Some(cmds) => {
                for c in cmds {
                    srv.propagate(db_before, c);
                }
            }
            None => srv.propagate(db_before, args.to_vec()),
        }
    }
    srv.stats
        .keyspace_hits
        .fetch_add(std::mem::take(&mut g.hits), Ordering::Relaxed);
    srv.stats
        .keyspace_misses
        .fetch_add(std::mem::take(&mut g.misses), Ordering::Relaxed);
    // Inside EXEC, blocked clients are served once the whole transaction has run.
    if !in_exec && !g.ready.is_empty() {
        for (db, cmd) in srv.blocking.serve_ready(g) {
            srv.propagate(db, cmd);
        }
    }
    let blocked = block.map(|b| {
        let blocked = srv
            .blocking
            .block(g, client.id, client.db, b.keys, args.to_vec(), b.serve);
        client.block_timeout_ms = b.timeout_ms;
        client.block_timeout_reply = Some(b.on_timeout);
        blocked
    });
    if own_locks {
        g.release();
    }
    (reply, blocked, close_after_reply)
}

/// Common argument helpers for handlers.
pub mod args {
    use crate::protocol::Reply;
    use crate::util::numtext::{parse_f64, parse_i64};

    pub const NOT_INT: &str = "ERR value is not an integer or out of range";
    pub const NOT_FLOAT: &str = "ERR value is not a valid float";
    pub const SYNTAX: &str = "ERR syntax error";

    pub fn int(a: &[u8]) -> Result<i64, Reply> {
        parse_i64(a).ok_or_else(|| Reply::error(NOT_INT))
    }

    pub fn float(a: &[u8]) -> Result<f64, Reply> {
        parse_f64(a).ok_or_else(|| Reply::error(NOT_FLOAT))
    }

    /// An integer that must be >= 0, with Redis's "out of range" text otherwise.
    pub fn positive(a: &[u8], what: &str) -> Result<i64, Reply> {
        let v = int(a)?;
        if v < 0 {
            return Err(Reply::error(format!(
                "ERR {what} is out of range, must be positive"
            )));
        }
        Ok(v)
    }

    pub fn eq(a: &[u8], word: &str) -> bool {
        a.eq_ignore_ascii_case(word.as_bytes())
    }
}

/// `try_reply!(expr)`: unwrap a `Result<T, Reply>` or return the error reply.
#[macro_export]
macro_rules! try_reply {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(r) => return r,
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

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
