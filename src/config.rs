//! Configuration: the directive table, redis.conf-syntax files, command-line overrides and
//! the runtime CONFIG GET/SET view.
//!
//! Every directive Podium understands is one row of [`PARAMS`] with its type, default and
//! aliases (`zset-max-ziplist-entries` is an alias of `zset-max-listpack-entries`, as in
//! Redis 7). Values are kept as their canonical text (what CONFIG GET prints) and the few that
//! commands read on hot paths are mirrored into atomics ([`Hot`]). Unknown directives in a file
//! or on the command line are a startup error naming the line.

pub mod directives;

use crate::protocol::split_args;
/// Moved to crate::util; kept here for code written against the old path.
#[allow(unused_imports)]
pub(crate) use crate::util::strerror;
use parking_lot::RwLock;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};

/// How a directive's value is checked and normalised.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Int {
        min: i64,
        max: i64,
    },
    /// A byte count with optional unit (k, kb, m, mb, g, gb); printed as plain bytes.
    Memory,
    Bool,
    Enum(&'static [&'static str]),
    Str,
    /// A non-negative octal number (file permissions), printed in octal as given.
    Octal,
    /// Any number of words, kept as given (e.g. `save`).
    Words,
}

pub struct Param {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub kind: Kind,
    pub default: &'static str,
    /// Settable with CONFIG SET at run time.
    pub mutable: bool,
    pub help: &'static str,
}

pub(crate) const fn p(
    name: &'static str,
    kind: Kind,
    default: &'static str,
    help: &'static str,
) -> Param {
    Param {
        name,
        aliases: &[],
        kind,
        default,
        mutable: true,
        help,
    }
}

pub(crate) const fn fixed(
    name: &'static str,
    kind: Kind,
    default: &'static str,
    help: &'static str,
) -> Param {
    Param {
        name,
        aliases: &[],
        kind,
        default,
        mutable: false,
        help,
    }
}

pub(crate) const fn alias(mut prm: Param, aliases: &'static [&'static str]) -> Param {
    prm.aliases = aliases;
    prm
}

const INT: Kind = Kind::Int {
    min: 0,
    max: i64::MAX,
};
const INT_ANY: Kind = Kind::Int {
    min: i64::MIN,
    max: i64::MAX,
};

/// Every directive Podium accepts.
pub static PARAMS: &[Param] = &[
    p(
        "port",
        Kind::Int { min: 0, max: 65535 },
        "6379",
        "TCP port to listen on",
    ),
    p(
        "bind",
        Kind::Words,
        "* -::*",
        "addresses to listen on (* = all IPv4, ::* = all IPv6, -addr = skip if absent)",
    ),
    fixed(
        "databases",
        Kind::Int { min: 1, max: 1024 },
        "16",
        "number of databases",
    ),
    fixed(
        "shards-per-db",
        Kind::Int { min: 1, max: 1024 },
        "16",
        "lock shards per database (Podium)",
    ),
    fixed(
        "threads",
        Kind::Int { min: 0, max: 256 },
        "0",
        "worker threads, 0 = one per core (Podium)",
    ),
    fixed(
        "daemonize",
        Kind::Bool,
        "no",
        "fork into the background at startup (before any thread starts); logs go to logfile, or nowhere if it is empty",
    ),
    fixed(
        "supervised",
        Kind::Enum(&["no", "upstart", "systemd", "auto"]),
        "no",
        "systemd: report READY=1, STATUS and STOPPING=1 to $NOTIFY_SOCKET; upstart: raise SIGSTOP when ready; auto: by the environment",
    ),
    fixed("pidfile", Kind::Str, "", "file to write the process id to"),
    fixed(
        "unixsocket",
        Kind::Str,
        "",
        "also listen on this Unix socket path (empty = no Unix socket)",
    ),
    fixed(
        "unixsocketperm",
        Kind::Octal,
        "0",
        "permissions of the Unix socket, octal (0 = as the umask leaves them)",
    ),
    p(
        "protected-mode",
        Kind::Bool,
        "yes",
        "with no password for the default user, refuse clients not on 127.0.0.1 or ::1",
    ),
    fixed(
        "tcp-backlog",
        INT,
        "511",
        "listen(2) backlog of the TCP sockets",
    ),
    p(
        "timeout",
        INT,
        "0",
        "close idle clients after this many seconds (0 = never)",
    ),
    p("tcp-keepalive", INT, "300", "TCP keepalive seconds"),
    p(
        "loglevel",
        Kind::Enum(&["debug", "verbose", "notice", "warning", "nothing"]),
        "notice",
        "log verbosity",
    ),
    fixed(
        "logfile",
        Kind::Str,
        "",
        "log file (empty = standard output)",
    ),
    p(
        "requirepass",
        Kind::Str,
        "",
        "password for AUTH (empty = none)",
    ),
    p(
        "maxclients",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
        "10000",
        "maximum connected clients",
    ),
    p(
        "maxmemory",
        Kind::Memory,
        "0",
        "memory limit in bytes (0 = none)",
    ),
    p(
        "maxmemory-policy",
        // Redis's order, which its error text lists.
        Kind::Enum(&[
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "noeviction",
        ]),
        "noeviction",
        "what a write does over maxmemory: evict keys by this policy, or fail with -OOM (noeviction)",
    ),
    p("maxmemory-samples", INT, "5", "keys sampled per eviction round (more is closer to true LRU/LFU/TTL order)"),
    p(
        "hz",
        Kind::Int { min: 1, max: 500 },
        "10",
        "background task frequency (expiry reaper)",
    ),
    p(
        "dynamic-hz",
        Kind::Bool,
        "yes",
        "accepted, no effect: Podium's cron runs at hz whatever the number of clients",
    ),
    p(
        "active-expire-effort",
        Kind::Int { min: 1, max: 10 },
        "1",
        "reaper effort 1..10",
    ),
    p(
        "proto-max-bulk-len",
        Kind::Memory,
        "536870912",
        "largest accepted bulk argument",
    ),
    p(
        "client-query-buffer-limit",
        Kind::Memory,
        "1073741824",
        "largest query buffer per client",
    ),
    alias(
        p(
            "zset-max-listpack-entries",
            INT,
            "128",
            "small sorted-set encoding: max members",
        ),
        &["zset-max-ziplist-entries"],
    ),
    alias(
        p(
            "zset-max-listpack-value",
            INT,
            "64",
            "small sorted-set encoding: max member bytes",
        ),
        &["zset-max-ziplist-value"],
    ),
    alias(
        p(
            "hash-max-listpack-entries",
            INT,
            "128",
            "small hash encoding: max fields",
        ),
        &["hash-max-ziplist-entries"],
    ),
    alias(
        p(
            "hash-max-listpack-value",
            INT,
            "64",
            "small hash encoding: max value bytes",
        ),
        &["hash-max-ziplist-value"],
    ),
    p(
        "set-max-intset-entries",
        INT,
        "512",
        "integer set encoding: max members",
    ),
    alias(
        p(
            "list-max-listpack-size",
            INT_ANY,
            "-2",
            "accepted, no effect: Podium's lists have one encoding (OBJECT ENCODING says quicklist or listpack by this size)",
        ),
        &["list-max-ziplist-size"],
    ),
    p(
        "list-compress-depth",
        INT,
        "0",
        "accepted, no effect: Podium does not compress list nodes",
    ),
    p(
        "dir",
        Kind::Str,
        ".",
        "working directory for the RDB file and the append-only files",
    ),
    p(
        "dbfilename",
        Kind::Str,
        "dump.rdb",
        "name of the RDB snapshot file in dir",
    ),
    p(
        "save",
        Kind::Words,
        "3600 1 300 100 60 10000",
        "save points: BGSAVE after <seconds> if at least <changes> writes (pairs; \"\" for none)",
    ),
    p(
        "appendonly",
        Kind::Bool,
        "no",
        "enable the append-only file",
    ),
    fixed(
        "appendfilename",
        Kind::Str,
        "appendonly.aof",
        "base name of AOF files",
    ),
    fixed(
        "appenddirname",
        Kind::Str,
        "appendonlydir",
        "directory holding the AOF files",
    ),
    p(
        "appendfsync",
        Kind::Enum(&["always", "everysec", "no"]),
        "everysec",
        "fsync policy",
    ),
    p(
        "no-appendfsync-on-rewrite",
        Kind::Bool,
        "no",
        "accepted, no effect: Podium's AOF rewrite does not compete with the fsync of the live file",
    ),
    p(
        "auto-aof-rewrite-percentage",
        INT,
        "100",
        "rewrite when the AOF grew by this percent",
    ),
    p(
        "auto-aof-rewrite-min-size",
        Kind::Memory,
        "67108864",
        "smallest AOF to rewrite automatically",
    ),
    p(
        "aof-load-truncated",
        Kind::Bool,
        "yes",
        "load an AOF whose last command is truncated",
    ),
    p(
        "aof-max-size",
        Kind::Memory,
        "0",
        "fail AOF writes that would grow the file past this many bytes with ENOSPC (0: no limit; for testing disk-full handling, as Redis's hidden aof-max-size)",
    ),
    p(
        "aof-use-rdb-preamble",
        Kind::Bool,
        "yes",
        "AOF rewrites write the base as an RDB file (<name>.<n>.base.rdb); no: RESP commands",
    ),
    p(
        "aof-disable-auto-gc",
        Kind::Bool,
        "no",
        "yes: files a rewrite replaced stay in the AOF directory, listed as history in the manifest; set back to no, they are deleted at once",
    ),
    p(
        "aof-timestamp-enabled",
        Kind::Bool,
        "no",
        "yes: a #TS:<unix seconds> line before the first logged command of each second and atop a RESP rewrite base, as Redis writes them",
    ),
    p(
        "aof-rewrite-incremental-fsync",
        Kind::Bool,
        "yes",
        "accepted, no effect: Podium fsyncs a rewritten AOF once, when it is complete",
    ),
    p(
        "lazyfree-lazy-eviction",
        Kind::Bool,
        "no",
        "accepted, no effect: Podium frees big values outside the shard locks already",
    ),
    p(
        "lazyfree-lazy-expire",
        Kind::Bool,
        "no",
        "accepted, no effect: Podium frees expired values outside the shard locks already",
    ),
    p(
        "lazyfree-lazy-server-del",
        Kind::Bool,
        "no",
        "accepted, no effect: Podium frees big values outside the shard locks already",
    ),
    p(
        "lazyfree-lazy-user-del",
        Kind::Bool,
        "no",
        "accepted, no effect: Podium frees big values outside the shard locks already",
    ),
    p(
        "lazyfree-lazy-user-flush",
        Kind::Bool,
        "no",
        "accepted, no effect: Podium frees big values outside the shard locks already",
    ),
    p(
        "io-threads",
        Kind::Int { min: 1, max: 128 },
        "1",
        "accepted, no effect: every worker thread (see threads) does its own clients' I/O",
    ),
    alias(
        p(
            "busy-reply-threshold",
            INT,
            "5000",
            "ms a script runs before other clients get -BUSY",
        ),
        &["lua-time-limit"],
    ),
    p(
        "slowlog-log-slower-than",
        INT_ANY,
        "10000",
        "log commands slower than this many microseconds in the SLOWLOG (-1 = never, 0 = all)",
    ),
    p("slowlog-max-len", INT, "128", "entries kept in the SLOWLOG"),
    p(
        "latency-monitor-threshold",
        INT,
        "0",
        "record LATENCY events of at least this many milliseconds (0 = off)",
    ),
    p(
        "tracking-table-max-keys",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
        "1000000",
        "most keys remembered for client-side caching (0: no limit); past it keys are invalidated",
    ),
    p(
        "notify-keyspace-events",
        Kind::Str,
        "",
        "keyspace event classes published over Pub/Sub (K E g $ l s h z x e t m d n A)",
    ),
    alias(
        p(
            "min-replicas-to-write",
            INT,
            "0",
            "as Redis: writes need this many online replicas that acknowledged within min-replicas-max-lag (0 = none), else -NOREPLICAS",
        ),
        &["min-slaves-to-write"],
    ),
    alias(
        p(
            "min-replicas-max-lag",
            INT,
            "10",
            "lag in seconds a good replica may have (0 turns min-replicas-to-write off)",
        ),
        &["min-slaves-max-lag"],
    ),
    alias(
        p(
            "replica-serve-stale-data",
            Kind::Bool,
            "yes",
            "as Redis: while the link to its master is down, a replica answers only the commands flagged stale unless set",
        ),
        &["slave-serve-stale-data"],
    ),
    alias(
        p(
            "replica-read-only",
            Kind::Bool,
            "yes",
            "as Redis: a replica refuses writes from its clients (-READONLY) while set",
        ),
        &["slave-read-only"],
    ),
    p(
        "rdb-key-save-delay",
        INT_ANY,
        "0",
        "sleep this many microseconds per key while saving (negative -N: 1 us once in N keys), for tests",
    ),
    p(
        "rdbcompression",
        Kind::Bool,
        "yes",
        "LZF-compress strings longer than 20 bytes in RDB files",
    ),
    p(
        "rdbchecksum",
        Kind::Bool,
        "yes",
        "end RDB files with a CRC-64 (no: write zero, and loading skips the check)",
    ),
    p(
        "sanitize-dump-payload",
        Kind::Enum(&["no", "yes", "clients"]),
        "no",
        "RESTORE validates every payload in full whatever this says (as `yes`)",
    ),
    p(
        "stop-writes-on-bgsave-error",
        Kind::Bool,
        "yes",
        "refuse writes with -MISCONF while the last BGSAVE failed and save points are set",
    ),
    p(
        "rdb-del-sync-files",
        Kind::Bool,
        "no",
        "as Redis: without save points or AOF, the RDB file written only to synchronize a replica is deleted once sent",
    ),
    p(
        "always-show-logo",
        Kind::Bool,
        "no",
        "print the startup banner (port, pid) even when the log is not a terminal",
    ),
    fixed(
        "set-proc-title",
        Kind::Bool,
        "yes",
        "no: the process keeps the command line it was started with (children included)",
    ),
    p(
        "activerehashing",
        Kind::Bool,
        "yes",
        "accepted, no effect: Podium's hash tables resize incrementally on their own",
    ),
    p(
        "client-output-buffer-limit",
        Kind::Words,
        "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60",
        "per class (normal, replica, pubsub): hard limit, soft limit and seconds over the soft limit before a client with that much reply data pending is disconnected (all three enforced)",
    ),
    fixed(
        "enable-debug-command",
        Kind::Enum(&["no", "yes", "local"]),
        "no",
        "who may run DEBUG: no one, anyone, or clients on 127.0.0.1/::1 (local)",
    ),
    fixed(
        "enable-protected-configs",
        Kind::Enum(&["no", "yes", "local"]),
        "no",
        "who may CONFIG SET dir and dbfilename: no one, anyone, or local clients",
    ),
    fixed(
        "aclfile",
        Kind::Str,
        "",
        "file of ACL users (ACL LOAD/SAVE); not together with user directives",
    ),
    p(
        "acllog-max-len",
        INT,
        "128",
        "entries kept in the ACL LOG",
    ),
    p(
        "acl-pubsub-default",
        Kind::Enum(&["allchannels", "resetchannels"]),
        "resetchannels",
        "channel permissions of new users and selectors",
    ),
    fixed(
        "enable-module-command",
        Kind::Enum(&["no", "yes", "local"]),
        "no",
        "no effect: Podium loads no modules, MODULE is an unknown command whatever this says",
    ),
    p(
        "repl-diskless-sync-delay",
        INT,
        "5",
        "accepted, no effect: a Podium master sends its image from disk, where Redis starts at once too"
    ),
    p(
        "propagation-error-behavior",
        Kind::Enum(&["ignore", "panic", "panic-on-replicas"]),
        "ignore",
        "a command from the AOF or (on a replica) from its master that fails: logged as Redis logs it and skipped (ignore), or ends the server (panic; panic-on-replicas: only a read-only replica's master stream)",
    ),
];

/// Directives CONFIG SET refuses unless `enable-protected-configs` allows the client (Redis
/// 7.0's PROTECTED_CONFIG set): they choose where files are written.
pub(crate) const PROTECTED: &[&str] = &["dir", "dbfilename"];

/// Directives CONFIG SET refuses with `-LOADING` while the data set loads (Redis's
/// DENY_LOADING_CONFIG): changing them then would pull the files out from under the load.
pub(crate) const DENY_LOADING: &[&str] = &["appendonly", "dir", "repl-diskless-load"];

/// Whether a `no | yes | local` directive (enable-protected-configs, enable-debug-command)
/// allows a client, `local` meaning one connected from 127.0.0.1 or ::1 (Redis's
/// allowProtectedAction).
pub(crate) fn protected_action_allowed(setting: &str, local_client: bool) -> bool {
    setting == "yes" || (setting == "local" && local_client)
}

/// `rename-command` edits the command table, which sits above configuration
/// ([`crate::commands`]): the table installs its handler here before any configuration is read
/// (`commands::install_hooks`, called by main), so config never calls up into it.
pub static RENAME_COMMAND: std::sync::OnceLock<RenameCommand> = std::sync::OnceLock::new();

/// The `rename-command` handler: (old name, new name or "" to disable) -> Err with Redis's text.
pub type RenameCommand = fn(&str, &str) -> Result<(), String>;

/// Values read on hot paths, mirrored from the text table.
#[derive(Default)]
pub struct Hot {
    pub zset_max_entries: AtomicUsize,
    pub zset_max_value: AtomicUsize,
    pub hash_max_entries: AtomicUsize,
    pub hash_max_value: AtomicUsize,
    pub set_max_intset: AtomicUsize,
    /// `hll-sparse-max-bytes`: the largest sparse HyperLogLog before it turns dense.
    pub hll_sparse_max_bytes: AtomicUsize,
    pub maxmemory: AtomicI64,
    pub proto_max_bulk_len: AtomicI64,
    pub query_buffer_limit: AtomicI64,
    pub hz: AtomicI64,
    pub active_expire_effort: AtomicI64,
    pub appendonly: AtomicBool,
    pub requirepass_set: AtomicBool,
    pub timeout: AtomicI64,
    pub busy_reply_threshold: AtomicI64,
    /// `notify-keyspace-events` as class bits (see `notify`).
    pub notify_flags: std::sync::atomic::AtomicU32,
    /// `client-output-buffer-limit`, per client class.
    pub(crate) obuf: crate::config::ObufLimits,
    pub slowlog_slower_than: AtomicI64,
    pub slowlog_max_len: AtomicI64,
    pub latency_threshold_ms: AtomicI64,
    pub latency_tracking: AtomicBool,
    /// `min-replicas-to-write` and `min-replicas-max-lag` are both non-zero: writes need
    /// that many good replicas, and Podium never has any, so every write is refused.
    pub good_replicas_required: AtomicBool,
}

/// The running configuration.
pub struct Config {
    values: RwLock<Vec<String>>,
    pub hot: Hot,
    /// A `save` directive was read at startup: later ones add save points (as redis.conf).
    save_loaded: AtomicBool,
    /// `user <name> rules...` directives, in order (the words after `user`).
    pub(crate) acl_users: parking_lot::Mutex<Vec<Vec<String>>>,
    /// The file the server was started with, as an absolute path (CONFIG REWRITE writes it).
    pub config_file: Option<std::path::PathBuf>,
}

/// Every directive: [`PARAMS`], then the rest of Redis 7.0's vocabulary
/// ([`crate::config::directives::EXTRA`]). Values are indexed by position in this list.
pub fn params() -> &'static [&'static Param] {
    static ALL: std::sync::OnceLock<Vec<&'static Param>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        let mut v: Vec<&'static Param> = PARAMS.iter().collect();
        for e in crate::config::directives::EXTRA {
            if !v.iter().any(|p| p.name == e.name) {
                v.push(e);
            }
        }
        v
    })
}

fn find(name: &str) -> Option<usize> {
    let lname = name.to_ascii_lowercase();
    params()
        .iter()
        .position(|p| p.name == lname || p.aliases.contains(&lname.as_str()))
}

/// Parse a memory amount as Redis's memtoull: digits with an optional unit.
pub fn parse_memory(s: &str) -> Option<i64> {
    let l = s.to_ascii_lowercase();
    let split = l.find(|c: char| !c.is_ascii_digit()).unwrap_or(l.len());
    let (num, unit) = l.split_at(split);
    let mul: i64 = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    if num.is_empty() {
        return None;
    }
    num.parse::<i64>().ok()?.checked_mul(mul)
}

/// `save`: pairs of non-negative integers (seconds, changes), or nothing (`save ""`).
fn save_points_text(words: &[String]) -> Result<String, String> {
    let words: Vec<&str> = words.iter().flat_map(|w| w.split_whitespace()).collect();
    if !words.len().is_multiple_of(2)
        || words
            .iter()
            .any(|w| w.parse::<i64>().map_or(true, |n| n < 0))
    {
        return Err("Invalid save parameters".into());
    }
    Ok(words
        .iter()
        .map(|w| w.parse::<i64>().unwrap_or(0).to_string())
        .collect::<Vec<_>>()
        .join(" "))
}

/// A stored value as CONFIG GET shows it: `notify-keyspace-events` is kept as set (its `n`
/// must survive an `A`) and shown in Redis's canonical letters.
fn shown(prm: &Param, v: &str) -> String {
    match prm.name {
        "notify-keyspace-events" => {
            crate::keyspace::events::normalise(v).unwrap_or_else(|_| v.to_string())
        }
        // `dir` is the working directory (see change_dir): show where the process really is.
        "dir" => std::env::current_dir()
            .map(|d| d.to_string_lossy().into_owned())
            .unwrap_or_else(|_| v.to_string()),
        _ => v.to_string(),
    }
}

/// Check and normalise a value for a parameter. Err carries Redis's reason text.
fn normalise(prm: &Param, words: &[String]) -> Result<String, String> {
    if prm.name == "client-output-buffer-limit" {
        let w: Vec<&str> = words.iter().map(|s| s.as_str()).collect();
        crate::config::parse_obuf_limits(&w)?;
    }
    if prm.name == "notify-keyspace-events" && words.len() == 1 {
        // Kept as given (CONFIG GET renders it as Redis does, which can hide `n` behind `A`).
        crate::keyspace::events::normalise(&words[0])?;
    }
    if let Kind::Words = prm.kind {
        if prm.name == "save" {
            return save_points_text(words);
        }
        return Ok(words.join(" "));
    }
    if words.len() != 1 {
        return Err("wrong number of arguments".into());
    }
    let v = &words[0];
    match prm.kind {
        Kind::Int { min, max } => {
            let n: i64 = v
                .parse()
                .map_err(|_| "argument couldn't be parsed into an integer".to_string())?;
            if n < min || n > max {
                return Err(format!(
                    "argument must be between {min} and {max} inclusive"
                ));
            }
            Ok(n.to_string())
        }
        Kind::Memory => {
            let n = parse_memory(v)
                .filter(|n| *n >= 0)
                .ok_or_else(|| "argument must be a memory value".to_string())?;
            if let Some(min) = crate::config::directives::memory_min(prm.name) {
                if n < min {
                    return Err(format!(
                        "argument must be between {min} and {} inclusive",
                        i64::MAX
                    ));
                }
            }
            Ok(n.to_string())
        }
        Kind::Bool => match v.to_ascii_lowercase().as_str() {
            "yes" => Ok("yes".into()),
            "no" => Ok("no".into()),
            _ => Err("argument must be 'yes' or 'no'".into()),
        },
        Kind::Enum(opts) => {
            let l = v.to_ascii_lowercase();
            if opts.contains(&l.as_str()) {
                Ok(l)
            } else {
                Err("argument(s) must be one of the following: ".to_string() + &opts.join(", "))
            }
        }
        // As Redis: the RDB file lives in `dir`; a path would write elsewhere.
        Kind::Str if prm.name == "dbfilename" && v.contains('/') => {
            Err("dbfilename can't be a path, just a filename".into())
        }
        Kind::Str if prm.name == "proc-title-template" && !crate::proctitle::validate(v) => {
            Err("template format is invalid or contains unknown variables".into())
        }
        Kind::Str => Ok(v.clone()),
        Kind::Octal => u32::from_str_radix(v, 8)
            .ok()
            .filter(|n| *n <= 0o7777)
            .map(|n| format!("{n:o}"))
            .ok_or_else(|| "argument must be an octal number".to_string()),
        Kind::Words => unreachable!("handled above"),
    }
}

/// The value of parameter `idx` as reported: `dir` is the working directory (absolute, as
/// Redis's getcwd), whatever text set it.
/// Make `dir` the working directory (Redis's chdir: the directory must exist; nothing is
/// created). Returns the value to keep: the absolute path, as Redis's CONFIG GET dir prints.
fn change_dir(dir: &str) -> Result<String, String> {
    std::env::set_current_dir(dir).map_err(|e| crate::util::strerror(&e))?;
    Ok(std::env::current_dir()
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_else(|_| dir.to_string()))
}

impl Default for Config {
    fn default() -> Self {
        Self::new()
    }
}

impl Config {
    pub fn new() -> Config {
        let c = Config {
            values: RwLock::new(params().iter().map(|p| p.default.to_string()).collect()),
            hot: Hot::default(),
            save_loaded: AtomicBool::new(false),
            acl_users: parking_lot::Mutex::new(Vec::new()),
            config_file: None,
        };
        for i in 0..params().len() {
            c.refresh_hot(i);
        }
        c
    }

    fn refresh_hot(&self, idx: usize) {
        let v = self.values.read()[idx].clone();
        let n = v.parse::<i64>().unwrap_or(0);
        let u = n.max(0) as usize;
        let h = &self.hot;
        match params()[idx].name {
            "zset-max-listpack-entries" => h.zset_max_entries.store(u, Ordering::Relaxed),
            "zset-max-listpack-value" => h.zset_max_value.store(u, Ordering::Relaxed),
            "hash-max-listpack-entries" => h.hash_max_entries.store(u, Ordering::Relaxed),
            "hash-max-listpack-value" => h.hash_max_value.store(u, Ordering::Relaxed),
            "set-max-intset-entries" => h.set_max_intset.store(u, Ordering::Relaxed),
            "hll-sparse-max-bytes" => h.hll_sparse_max_bytes.store(u, Ordering::Relaxed),
            "maxmemory" => h.maxmemory.store(n, Ordering::Relaxed),
            "proto-max-bulk-len" => h.proto_max_bulk_len.store(n, Ordering::Relaxed),
            "client-query-buffer-limit" => h.query_buffer_limit.store(n, Ordering::Relaxed),
            "hz" => {
                h.hz.store(n, Ordering::Relaxed);
                crate::watchdog::apply(self.get_i64("watchdog-period").max(0) as u64, u as u64);
            }
            // As Redis, a period under two cron periods is raised, and CONFIG GET shows that.
            "watchdog-period" => {
                let hz = h.hz.load(Ordering::Relaxed).max(1) as u64;
                let applied = crate::watchdog::apply(u as u64, hz);
                if applied != u as u64 {
                    self.values.write()[idx] = applied.to_string();
                }
            }
            "active-expire-effort" => h.active_expire_effort.store(n, Ordering::Relaxed),
            "appendonly" => h.appendonly.store(v == "yes", Ordering::Relaxed),
            "requirepass" => h.requirepass_set.store(!v.is_empty(), Ordering::Relaxed),
            "timeout" => h.timeout.store(n, Ordering::Relaxed),
            "busy-reply-threshold" => h.busy_reply_threshold.store(n, Ordering::Relaxed),
            "notify-keyspace-events" => h.notify_flags.store(
                crate::keyspace::events::parse_flags(&v).unwrap_or(0),
                Ordering::Relaxed,
            ),
            // Only the classes named change; the stored text becomes all three.
            "client-output-buffer-limit" => self.values.write()[idx] = h.obuf.apply(&v),
            "slowlog-log-slower-than" => h.slowlog_slower_than.store(n, Ordering::Relaxed),
            "slowlog-max-len" => h.slowlog_max_len.store(n, Ordering::Relaxed),
            "latency-monitor-threshold" => h.latency_threshold_ms.store(n, Ordering::Relaxed),
            "latency-tracking" => h.latency_tracking.store(v == "yes", Ordering::Relaxed),
            "min-replicas-to-write" | "min-replicas-max-lag" => h.good_replicas_required.store(
                self.get_i64("min-replicas-to-write") > 0
                    && self.get_i64("min-replicas-max-lag") > 0,
                Ordering::Relaxed,
            ),
            name @ ("maxmemory-policy" | "lfu-log-factor" | "lfu-decay-time") => {
                crate::keyspace::access::configure(name, &v)
            }
            "loglevel" => crate::log::set_level(&v),
            _ => {}
        }
    }

    /// Current text value of a parameter (by name or alias).
    pub fn get(&self, name: &str) -> Option<String> {
        find(name).map(|i| shown(params()[i], &self.values.read()[i]))
    }

    pub fn get_i64(&self, name: &str) -> i64 {
        self.get(name).and_then(|v| v.parse().ok()).unwrap_or(0)
    }

    pub fn get_bool(&self, name: &str) -> bool {
        self.get(name).as_deref() == Some("yes")
    }

    /// Set at startup (file or command line): any known directive, mutable or not.
    pub fn set_startup(&self, name: &str, words: &[String]) -> Result<(), String> {
        // Directives that may repeat: collected, applied when the server starts.
        if name.eq_ignore_ascii_case("user") {
            if words.is_empty() {
                return Err("wrong number of arguments".into());
            }
            self.acl_users.lock().push(words.to_vec());
            return Ok(());
        }
        if name.eq_ignore_ascii_case("rename-command") {
            let [old, new] = words else {
                return Err("wrong number of arguments".into());
            };
            return match RENAME_COMMAND.get() {
                Some(rename) => rename(old, new),
                None => Err("rename-command is not available: no command table installed".into()),
            };
        }
        if let Some(why) = crate::config::directives::refused_keyword(name) {
            return Err(format!("'{name}' is not supported: {why}"));
        }
        let idx = find(name).ok_or_else(|| format!("unknown directive '{name}'"))?;
        let mut v = self.checked_value(idx, words)?;
        if params()[idx].name == "save" {
            // redis.conf: the first `save` line replaces the default save points, each later
            // one adds to them; `save ""` clears them.
            let first = !self.save_loaded.swap(true, Ordering::Relaxed);
            let old = self.values.read()[idx].clone();
            if !first && !v.is_empty() && !old.is_empty() {
                v = format!("{old} {v}");
            }
        }
        if params()[idx].name == "dir" {
            v = change_dir(&v)?;
        }
        self.values.write()[idx] = v;
        self.refresh_hot(idx);
        Ok(())
    }

    /// Normalise `words` for parameter `idx`, with the directive-specific rules: the
    /// per-class merge of client-output-buffer-limit and the refusal of values that need a
    /// feature Podium lacks.
    fn checked_value(&self, idx: usize, words: &[String]) -> Result<String, String> {
        let prm = params()[idx];
        let v = if prm.name == "client-output-buffer-limit" {
            let current = self.values.read()[idx].clone();
            crate::config::directives::merge_obuf_limits(&current, words)?
        } else {
            normalise(prm, words)?
        };
        crate::config::directives::validate(prm.name, &v)?;
        let v = crate::config::directives::canonical(prm.name, v);
        if let Some(why) = crate::config::directives::refusal(prm.name, &v, prm.default) {
            return Err(why);
        }
        Ok(v)
    }

    /// CONFIG SET of several parameters, all or nothing, from the server itself (no
    /// protected-config check). Err is the full error text.
    pub fn set_runtime(&self, pairs: &[(String, String)]) -> Result<Vec<&'static str>, String> {
        self.set_runtime_for(pairs, None, false)
    }

    /// CONFIG SET from a client: as [`Config::set_runtime`], but the protected directives
    /// ([`PROTECTED`]) are refused unless `enable-protected-configs` allows this client
    /// (`local_client`: connected from 127.0.0.1 or ::1), and while the server is `loading`
    /// its data the directives Redis refuses then ([`DENY_LOADING`]) get `-LOADING`.
    pub fn set_runtime_checked(
        &self,
        pairs: &[(String, String)],
        local_client: bool,
        loading: bool,
    ) -> Result<Vec<&'static str>, String> {
        self.set_runtime_for(pairs, Some(local_client), loading)
    }

    fn set_runtime_for(
        &self,
        pairs: &[(String, String)],
        client_local: Option<bool>,
        loading: bool,
    ) -> Result<Vec<&'static str>, String> {
        let protected_allowed = match client_local {
            None => true,
            Some(local) => protected_action_allowed(
                &self.get("enable-protected-configs").unwrap_or_default(),
                local,
            ),
        };
        // First every name, as Redis looks at them all before any value: the reply prefers a
        // loading refusal, then the first unknown name, then the last other refusal.
        let mut deny_loading = false;
        let mut unknown: Option<&str> = None;
        let mut refusal: Option<String> = None;
        let mut chosen: Vec<usize> = Vec::new();
        for (name, value) in pairs {
            let Some(idx) = find(name) else {
                unknown.get_or_insert(name.as_str());
                continue;
            };
            let prm = params()[idx];
            // Podium's own start-up-only directives take CONFIG SET of the value they already
            // have (nothing changes), so a tool writing back CONFIG GET * works; Redis's
            // immutable ones are refused whatever the value, as Redis refuses them.
            let unchanged_podium_setting = matches!(prm.name, "shards-per-db" | "threads")
                && self.get(prm.name).as_deref() == Some(value.trim());
            if !prm.mutable && !unchanged_podium_setting {
                refusal = Some(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - can't set immutable config"
                ));
                continue;
            }
            if !protected_allowed && PROTECTED.contains(&prm.name) {
                refusal = Some(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - can't set protected config"
                ));
                continue;
            }
            if loading && DENY_LOADING.contains(&prm.name) {
                deny_loading = true;
                continue;
            }
            if chosen.contains(&idx) {
                refusal = Some(format!("ERR CONFIG SET failed (possibly related to argument '{name}') - duplicate parameter"));
                continue;
            }
            chosen.push(idx);
        }
        if deny_loading {
            return Err("LOADING Redis is loading the dataset in memory".into());
        }
        if let Some(name) = unknown {
            return Err(format!(
                "ERR Unknown option or number of arguments for CONFIG SET - '{name}'"
            ));
        }
        if let Some(e) = refusal {
            return Err(e);
        }
        // Then the values, in order: the first invalid one fails the whole command.
        let mut staged = Vec::new();
        for ((_, value), idx) in pairs.iter().zip(chosen) {
            let prm = params()[idx];
            let name = prm.name;
            let words: Vec<String> = match prm.kind {
                Kind::Words => split_args(value.as_bytes())
                    .unwrap_or_default()
                    .into_iter()
                    .map(|w| String::from_utf8_lossy(&w).into_owned())
                    .collect(),
                _ => vec![value.clone()],
            };
            let v = self.checked_value(idx, &words).map_err(|e| {
                format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {e}")
            })?;
            staged.push((idx, v));
        }
        // `dir` is applied last, once everything else is known to be valid: it changes the
        // working directory (as Redis's chdir), so a missing directory fails here and is
        // never created.
        for (idx, v) in staged.iter_mut() {
            if params()[*idx].name == "dir" {
                *v = change_dir(v).map_err(|e| {
                    format!("ERR CONFIG SET failed (possibly related to argument 'dir') - {e}")
                })?;
            }
        }
        let mut names = Vec::new();
        {
            let mut vals = self.values.write();
            for (idx, v) in &staged {
                vals[*idx] = v.clone();
                names.push(params()[*idx].name);
            }
        }
        for (idx, _) in staged {
            self.refresh_hot(idx);
        }
        Ok(names)
    }

    /// CONFIG GET: (name, value) for every parameter or alias matching one of the patterns.
    pub fn matching(&self, patterns: &[Vec<u8>]) -> Vec<(String, String)> {
        let vals = self.values.read();
        let mut out: Vec<(String, String)> = Vec::new();
        for (i, prm) in params().iter().enumerate() {
            // Hidden parameters answer only to their exact name, never to a pattern.
            let hidden = crate::directives::hidden(prm.name);
            for name in std::iter::once(&prm.name).chain(prm.aliases.iter()) {
                if patterns
                    .iter()
                    .filter(|p| !hidden || !p.iter().any(|c| matches!(c, b'*' | b'?' | b'[')))
                    .any(|p| crate::util::numtext::glob_match(p, name.as_bytes(), true))
                    && !out.iter().any(|(n, _)| n == name)
                {
                    out.push((name.to_string(), shown(prm, &vals[i])));
                }
            }
        }
        out
    }

    /// All parameters and values (for CONFIG REWRITE).
    pub fn all(&self) -> Vec<(&'static str, String)> {
        let vals = self.values.read();
        params()
            .iter()
            .zip(vals.iter())
            .map(|(p, v)| (p.name, shown(p, v)))
            .collect()
    }

    pub fn zset_limits(&self) -> crate::types::zset::ZsetLimits {
        crate::types::zset::ZsetLimits {
            max_entries: self.hot.zset_max_entries.load(Ordering::Relaxed),
            max_value: self.hot.zset_max_value.load(Ordering::Relaxed),
        }
    }

    /// Apply a redis.conf-syntax text. `origin` names the source in errors.
    pub fn load_text(&self, text: &str, origin: &str) -> Result<(), String> {
        for (n, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words = split_args(line.as_bytes())
                .ok_or_else(|| format!("{origin}:{}: '{line}': unbalanced quotes", n + 1))?;
            let words: Vec<String> = words
                .into_iter()
                .map(|w| String::from_utf8_lossy(&w).into_owned())
                .collect();
            let Some((name, args)) = words.split_first() else {
                continue;
            };
            if name.eq_ignore_ascii_case("include") {
                for f in args {
                    let t = std::fs::read_to_string(f)
                        .map_err(|e| format!("{origin}:{}: include {f}: {e}", n + 1))?;
                    self.load_text(&t, f)?;
                }
                continue;
            }
            self.set_startup(name, args)
                .map_err(|e| format!("{origin}:{}: '{line}': {e}", n + 1))?;
        }
        Ok(())
    }

    /// The process title `proc-title-template` gives, with `{title}` the program's name or
    /// `title` (a child's: "redis-rdb-bgsave", as Redis names them). None under
    /// `set-proc-title no`, or if the template does not expand (it is validated when set).
    pub fn proc_title(&self, title: Option<&str>) -> Option<String> {
        if !self.get_bool("set-proc-title") {
            return None;
        }
        let template = self.get("proc-title-template").unwrap_or_default();
        let port = self.get_i64("port");
        let var = |name: &str| -> Option<String> {
            Some(match name {
                "title" => title.unwrap_or(crate::proctitle::argv0()).to_string(),
                "listen-addr" if port != 0 => {
                    let bind = self.get("bind").unwrap_or_default();
                    let first = bind.split_whitespace().next().unwrap_or("*");
                    format!("{first}:{port}")
                }
                "listen-addr" => {
                    format!("unixsocket:{}", self.get("unixsocket").unwrap_or_default())
                }
                // Neither cluster nor sentinel mode exists here.
                "server-mode" => String::new(),
                "config-file" => self
                    .config_file
                    .as_ref()
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "-".into()),
                "port" => port.to_string(),
                "tls-port" => self.get_i64("tls-port").to_string(),
                "unixsocket" => self.get("unixsocket").unwrap_or_default(),
                _ => return None,
            })
        };
        crate::proctitle::expand(&template, &var)
    }

    /// Show the server's title ([`Config::proc_title`]) as the process title.
    pub fn show_proc_title(&self) {
        if let Some(t) = self.proc_title(None) {
            if let Err(e) = crate::proctitle::set(&t) {
                tracing::debug!("the process title is not set: {e}");
            }
        }
    }

    /// Build from redis-server style arguments: `[config-file] [--name value...]...`.
    pub fn from_args(args: &[String]) -> Result<Config, String> {
        let mut cfg = Config::new();
        let mut rest = args;
        if let Some(first) = rest.first() {
            if !first.starts_with("--") {
                let text = if first == "-" {
                    let mut s = String::new();
                    std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                        .map_err(|e| e.to_string())?;
                    s
                } else {
                    std::fs::read_to_string(first)
                        .map_err(|e| format!("can't open config file '{first}': {e}"))?
                };
                // Made absolute before loading, as Redis does: a `dir` in the file changes
                // the working directory, and CONFIG REWRITE must find the file afterwards.
                if first != "-" {
                    cfg.config_file = std::fs::canonicalize(first).ok();
                }
                cfg.load_text(&text, first)?;
                rest = &rest[1..];
            }
        }
        // As redis-server: the options become config lines, appended to the file's. Each
        // `--name` starts a line unless the line before still waits for its value (so a value
        // may itself start with `--`); "--name value" in one argument is a whole line; other
        // arguments are values, quoted. A bare `--save` means `save ""`.
        for line in command_line_options(rest) {
            let words = split_args(line.as_bytes())
                .ok_or_else(|| format!("command line: '{}': unbalanced quotes", line.trim_end()))?;
            let words: Vec<String> = words
                .into_iter()
                .map(|w| String::from_utf8_lossy(&w).into_owned())
                .collect();
            let Some((name, vals)) = words.split_first() else {
                continue;
            };
            cfg.set_startup(name, vals)
                .map_err(|e| format!("command line: '{}': {e}", line.trim_end()))?;
        }
        Ok(cfg)
    }
}

/// redis-server's reading of the options after the config file: one config line each.
fn command_line_options(args: &[String]) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut value_given = true;
    for (j, arg) in args.iter().enumerate() {
        if value_given && arg.starts_with("--") {
            let mut line = format!("{} ", &arg[2..]);
            let words = split_args(arg.as_bytes()).map_or(1, |w| w.len());
            if words == 1 {
                value_given = false;
                let next_is_option = args.get(j + 1).is_some_and(|n| n.starts_with("--"));
                if arg.eq_ignore_ascii_case("--save") && (next_is_option || j + 1 == args.len()) {
                    line.push_str("\"\"");
                    value_given = true;
                }
            } else {
                value_given = true;
            }
            lines.push(line);
        } else {
            if lines.is_empty() {
                lines.push(String::new());
            }
            if let Some(line) = lines.last_mut() {
                line.push_str(&crate::util::sds_repr_str(arg));
                line.push(' ');
            }
            value_given = true;
        }
    }
    lines
}

/// `client-output-buffer-limit` for one client class: bytes (0 = none) and seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ObufLimit {
    pub hard: u64,
    pub soft: u64,
    pub soft_secs: u64,
}

/// One class of `client-output-buffer-limit`, readable without a lock.
#[derive(Default)]
pub(crate) struct AtomicObufLimit {
    hard: AtomicI64,
    soft: AtomicI64,
    soft_secs: AtomicI64,
}

impl AtomicObufLimit {
    pub(crate) fn set(&self, l: ObufLimit) {
        self.hard.store(l.hard as i64, Ordering::Relaxed);
        self.soft.store(l.soft as i64, Ordering::Relaxed);
        self.soft_secs.store(l.soft_secs as i64, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> ObufLimit {
        ObufLimit {
            hard: self.hard.load(Ordering::Relaxed) as u64,
            soft: self.soft.load(Ordering::Relaxed) as u64,
            soft_secs: self.soft_secs.load(Ordering::Relaxed) as u64,
        }
    }
}

/// The classes of `client-output-buffer-limit` in Redis's order: normal, replica, pubsub
/// (see `crate::obuf` for how the connection applies them).
#[derive(Default)]
pub(crate) struct ObufLimits {
    pub(crate) classes: [AtomicObufLimit; 3],
}

pub(crate) const OBUF_NORMAL: usize = 0;
pub(crate) const OBUF_REPLICA: usize = 1;
pub(crate) const OBUF_PUBSUB: usize = 2;

impl ObufLimits {
    pub(crate) fn pubsub(&self) -> ObufLimit {
        self.classes[OBUF_PUBSUB].get()
    }

    /// Apply a checked `client-output-buffer-limit` value (only the classes it names change)
    /// and return the full value as CONFIG GET shows it.
    pub(crate) fn apply(&self, text: &str) -> String {
        let words: Vec<&str> = text.split_whitespace().collect();
        if let Ok(parsed) = parse_obuf_limits(&words) {
            for (class, l) in parsed {
                self.classes[class].set(l);
            }
        }
        let mut s = String::new();
        for (i, name) in ["normal", "slave", "pubsub"].iter().enumerate() {
            let l = self.classes[i].get();
            if i > 0 {
                s.push(' ');
            }
            s.push_str(&format!("{name} {} {} {}", l.hard, l.soft, l.soft_secs));
        }
        s
    }
}

/// Check a `client-output-buffer-limit` value (`<class> <hard> <soft> <seconds>` groups),
/// with Redis's error texts.
pub(crate) fn parse_obuf_limits(words: &[&str]) -> Result<Vec<(usize, ObufLimit)>, String> {
    if !words.len().is_multiple_of(4) {
        return Err("Wrong number of arguments in buffer limit configuration.".into());
    }
    let mut v = Vec::new();
    for g in words.chunks(4) {
        let class = match g[0].to_ascii_lowercase().as_str() {
            "normal" => OBUF_NORMAL,
            "slave" | "replica" => 1,
            "pubsub" => OBUF_PUBSUB,
            _ => {
                return Err("Invalid client class specified in buffer limit configuration.".into())
            }
        };
        let bad = || "Error in hard, soft or soft_seconds setting in buffer limit configuration.";
        let hard = parse_memory(g[1]).ok_or_else(bad)?;
        let soft = parse_memory(g[2]).ok_or_else(bad)?;
        let secs: i64 = g[3].parse().map_err(|_| bad())?;
        if hard < 0 || soft < 0 || secs < 0 {
            return Err(bad().into());
        }
        v.push((
            class,
            ObufLimit {
                hard: hard as u64,
                soft: soft as u64,
                soft_secs: secs as u64,
            },
        ));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_options_are_read_as_redis_server_reads_them() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            command_line_options(&v(&["--port", "6379", "6380"])),
            vec!["port \"6379\" \"6380\" "]
        );
        assert_eq!(
            command_line_options(&v(&["--port", "--loglevel", "verbose"])),
            vec!["port \"--loglevel\" \"verbose\" "]
        );
        assert_eq!(
            command_line_options(&v(&["--maxmemory 700mb", "--loglevel", "verbose"])),
            vec!["maxmemory 700mb ", "loglevel \"verbose\" "]
        );
        assert_eq!(
            command_line_options(&v(&["--save", "--loglevel", "verbose", "--save"])),
            vec!["save \"\"", "loglevel \"verbose\" ", "save \"\""]
        );
        assert_eq!(
            command_line_options(&v(&["loglevel", "verbose", "--port"])),
            vec!["\"loglevel\" \"verbose\" ", "port "]
        );
        let c = Config::from_args(&v(&[
            "--maxmemory 700mb",
            "--maxmemory-policy 'volatile-lru'",
        ]))
        .expect("accepted");
        assert_eq!(c.get("maxmemory").as_deref(), Some("734003200"));
        let e = Config::from_args(&v(&["--port", "6379", "6380"])).err();
        assert!(e.is_some_and(|e| e.contains("'port \"6379\" \"6380\"'")));
    }

    #[test]
    fn defaults_and_aliases() {
        let c = Config::new();
        assert_eq!(c.get("port").as_deref(), Some("6379"));
        assert_eq!(c.get("zset-max-ziplist-entries").as_deref(), Some("128"));
        c.set_runtime(&[("zset-max-ziplist-entries".into(), "0".into())])
            .unwrap();
        assert_eq!(c.zset_limits().max_entries, 0);
    }

    #[test]
    fn runtime_errors() {
        let c = Config::new();
        assert!(c
            .set_runtime(&[("nosuch".into(), "1".into())])
            .unwrap_err()
            .contains("Unknown option"));
        assert!(c
            .set_runtime(&[("maxmemory".into(), "lots".into())])
            .unwrap_err()
            .contains("memory value"));
        assert!(c
            .set_runtime(&[("databases".into(), "1".into())])
            .unwrap_err()
            .contains("immutable"));
        c.set_runtime(&[("maxmemory".into(), "1mb".into())])
            .unwrap();
        assert_eq!(c.get("maxmemory").as_deref(), Some("1048576"));
    }

    #[test]
    fn protected_configs_and_actions() {
        let c = Config::new();
        let dir = vec![("dir".to_string(), "/".to_string())];
        let err = c.set_runtime_checked(&dir, true, false).unwrap_err();
        assert!(err.ends_with("- can't set protected config"), "{err}");
        let c = Config::from_args(&["--enable-protected-configs".into(), "local".into()]).unwrap();
        let missing = vec![("dir".to_string(), "/no/such/dir/x".to_string())];
        let err = c.set_runtime_checked(&missing, true, false).unwrap_err();
        assert!(err.ends_with("'dir') - No such file or directory"), "{err}");
        let err = c.set_runtime_checked(&missing, false, false).unwrap_err();
        assert!(err.ends_with("can't set protected config"), "{err}");
        assert!(protected_action_allowed("yes", false));
        assert!(protected_action_allowed("local", true));
        assert!(!protected_action_allowed("local", false));
        assert!(!protected_action_allowed("no", true));
    }

    #[test]
    fn file_and_command_line() {
        let c = Config::from_args(&["--port".into(), "7000".into(), "--save".into(), "".into()])
            .unwrap();
        assert_eq!(c.get("port").as_deref(), Some("7000"));
        let c = Config::new();
        let err = c.load_text("port 1\n# x\nbogus 3\n", "f.conf").unwrap_err();
        assert!(err.starts_with("f.conf:3:"), "{err}");
        c.load_text("appendonly yes\nsave 3600 1 300 100\n", "f")
            .unwrap();
        assert!(c.get_bool("appendonly"));
        assert_eq!(c.get("save").as_deref(), Some("3600 1 300 100"));
    }

    #[test]
    fn save_lines_replace_the_default_then_accumulate() {
        assert_eq!(
            Config::new().get("save").as_deref(),
            Some("3600 1 300 100 60 10000")
        );
        let c = Config::new();
        c.load_text("save 900 1\nsave 300 10\n", "f").unwrap();
        assert_eq!(c.get("save").as_deref(), Some("900 1 300 10"));
        c.load_text("save \"\"\nsave 60 5\n", "f").unwrap();
        assert_eq!(c.get("save").as_deref(), Some("60 5"));
        assert!(c.load_text("save 900\n", "f").is_err());
        assert!(c.load_text("save 900 x\n", "f").is_err());
        let c = Config::from_args(&["--save".into(), "".into()]).unwrap();
        assert_eq!(c.get("save").as_deref(), Some(""));
        let c = Config::new();
        c.set_runtime(&[("save".into(), "100 10 200 20".into())])
            .unwrap();
        assert_eq!(c.get("save").as_deref(), Some("100 10 200 20"));
        let e = c.set_runtime(&[("save".into(), "100".into())]).unwrap_err();
        assert!(e.contains("Invalid save parameters"), "{e}");
        let e = c
            .set_runtime(&[("dbfilename".into(), "a/b.rdb".into())])
            .unwrap_err();
        assert!(e.contains("can't be a path"), "{e}");
    }
}

#[cfg(test)]
mod shipped_conf {
    use super::*;

    #[test]
    fn shipped_conf_loads_and_lists_every_directive() {
        let text = include_str!("../conf/podium.conf");
        let c = Config::new();
        c.load_text(text, "conf/podium.conf").unwrap();
        for p in params() {
            assert!(
                text.lines()
                    .any(|l| l.split_whitespace().next() == Some(p.name)),
                "conf/podium.conf does not document '{}'",
                p.name
            );
            if p.name == "dir" || p.name == "bind" {
                // dir is reported as the absolute working directory; the shipped file binds
                // loopback where the default binds every address.
                continue;
            }
            assert_eq!(
                c.get(p.name).as_deref(),
                Some(p.default),
                "default of {} differs",
                p.name
            );
        }
    }
}
