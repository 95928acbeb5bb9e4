//! Configuration: the directive table, redis.conf-syntax files, command-line overrides and
//! the runtime CONFIG GET/SET view.
//!
//! Every directive Podium understands is one row of [`PARAMS`] or [`directives::EXTRA`]: its
//! name and aliases (`zset-max-ziplist-entries` is an alias of `zset-max-listpack-entries`, as
//! in Redis 7), type and bounds ([`Kind`]), default, help text and update hook (what a new
//! value changes beyond the stored text, [`Param::on_set`]). Each row is declared with a typed
//! identifier ([`dir`]: `dir::REPL_TIMEOUT` is an `Id<Int>`), and code reads a setting through
//! it ([`Config::int`], [`Config::flag`], [`Config::text`]): an index into the value array, no
//! name search, and a misspelt or mistyped directive does not compile. Names are looked up only
//! where the user gives one: CONFIG GET/SET, the config file, the command line, CONFIG REWRITE.
//! Values are kept as their canonical text (what CONFIG GET prints) and the few that commands
//! read on hot paths are mirrored into atomics ([`Hot`]) by their rows' hooks. Unknown
//! directives in a file or on the command line are a startup error naming the line.

use crate::protocol::split_args;
use parking_lot::RwLock;
use std::marker::PhantomData;
use std::sync::atomic::Ordering::{self, Relaxed};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize};

/// How a directive's value is checked and normalised.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Int {
        min: i64,
        max: i64,
    },
    /// A byte count with optional unit (k, kb, m, mb, g, gb); printed as plain bytes. `min` is
    /// Redis's lower bound where it has one above zero (the two buffer limits).
    Memory {
        min: i64,
    },
    Bool,
    Enum(&'static [&'static str]),
    Str,
    /// A non-negative octal number (file permissions), printed in octal as given.
    Octal,
    /// Any number of words, kept as given (e.g. `save`).
    Words,
}

/// What a new value of a directive changes beyond its stored text (a hot atomic, the
/// watchdog, the log level ...): run after every startup or CONFIG SET of the directive, and
/// once for every directive when the configuration is created, with the stored value.
pub type Hook = fn(&Config, &str);

/// See [`Param::check`].
pub type Check = fn(&str) -> Result<String, String>;

pub struct Param {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub kind: Kind,
    pub default: &'static str,
    /// Settable with CONFIG SET at run time.
    pub mutable: bool,
    pub help: &'static str,
    /// The update hook, if a value does more than sit in the table.
    pub on_set: Option<Hook>,
    /// One of Redis's hidden parameters (testing and debugging knobs): CONFIG GET shows it
    /// only when asked for by its exact name, not through a pattern.
    pub hidden: bool,
    /// The directive's own rule beyond its kind, if it has one: checks a normalised value and
    /// returns it in the form CONFIG GET shows (Err: Redis's reason).
    pub check: Option<Check>,
    /// Why every value but the default is refused: the feature it would need, which Podium
    /// lacks (cluster mode, TLS, syslog ...).
    pub unsupported: Option<&'static str>,
}

impl Param {
    /// This row with update hook `hook`.
    pub(crate) const fn on_set(mut self, hook: Hook) -> Param {
        self.on_set = Some(hook);
        self
    }

    /// This row as a hidden parameter.
    pub(crate) const fn hidden(mut self) -> Param {
        self.hidden = true;
        self
    }

    /// This row with its own value rule `check`.
    pub(crate) const fn checked(mut self, check: Check) -> Param {
        self.check = Some(check);
        self
    }

    /// This row refusing any value but its default, for `reason`.
    pub(crate) const fn unsupported(mut self, reason: &'static str) -> Param {
        self.unsupported = Some(reason);
        self
    }
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
        on_set: None,
        hidden: false,
        check: None,
        unsupported: None,
    }
}

pub(crate) const fn fixed(
    name: &'static str,
    kind: Kind,
    default: &'static str,
    help: &'static str,
) -> Param {
    Param {
        mutable: false,
        ..p(name, kind, default, help)
    }
}

pub(crate) const fn alias(mut prm: Param, aliases: &'static [&'static str]) -> Param {
    prm.aliases = aliases;
    prm
}

/// What a directive's identifier reads as: [`Config::int`] (an integer or memory directive).
pub enum Int {}
/// [`Config::flag`]: a yes/no directive.
pub enum Flag {}
/// [`Config::text`]: any other directive (strings, enums, word lists, octal), or any directive
/// as CONFIG GET shows it.
pub enum Text {}

/// A directive's identifier: its row's position in [`params`], typed by what the value reads
/// as. Made only by [`directive_table!`], from the row itself.
pub struct Id<T> {
    index: u16,
    reads_as: PhantomData<fn() -> T>,
}

impl<T> Id<T> {
    const fn at(index: usize) -> Id<T> {
        assert!(index <= u16::MAX as usize);
        Id {
            index: index as u16,
            reads_as: PhantomData,
        }
    }

    /// The row's position in [`params`] (and the value's in the value array).
    pub const fn index(self) -> usize {
        self.index as usize
    }

    /// The directive's name, as CONFIG GET lists it.
    pub fn name(self) -> &'static str {
        params()[self.index()].name
    }

    /// A (name, value) pair for [`Config::set_runtime`], named by this identifier.
    pub fn with(self, value: impl Into<String>) -> (String, String) {
        (self.name().to_string(), value.into())
    }
}

// By hand: derived impls would require the marker types to implement the traits too.
impl<T> Clone for Id<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Id<T> {}
impl<T> PartialEq for Id<T> {
    fn eq(&self, other: &Self) -> bool {
        self.index == other.index
    }
}
impl<T> Eq for Id<T> {}
impl<T> std::fmt::Debug for Id<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Declares a table of directive rows and, from the same list, one identifier per row
/// (`IDENT: Int = p("name", ...)` gives `pub const IDENT: Id<Int>` in `mod $ids`), numbered
/// by an enum whose variants are the rows in order, so a row and its identifier cannot drift
/// apart. `$first` is the table's first position in [`params`]; `$list` names a slice of
/// (position, identifier, read type) for the consistency tests and for the next table's
/// `$first`.
macro_rules! directive_table {
    (
        $(#[$doc:meta])*
        pub static $table:ident, identifiers in mod $ids:ident, listed in $list:ident,
            first $first:expr;
        $( $id:ident : $ty:ident = $row:expr ),* $(,)?
    ) => {
        $(#[$doc])*
        pub static $table: &[$crate::config::Param] = &[ $($row),* ];

        /// The typed identifiers of the rows of
        #[doc = concat!("[`", stringify!($table), "`]")]
        /// (re-exported by [`crate::config::dir`]).
        pub mod $ids {
            #[allow(unused_imports)]
            use $crate::config::{Flag, Id, Int, Text};

            /// The rows, in order: a variant's discriminant is its row's place in the table.
            #[allow(non_camel_case_types, clippy::upper_case_acronyms, dead_code)]
            enum Row {
                $($id),*
            }

            $( pub const $id: Id<$ty> = Id::at($first + Row::$id as usize); )*
        }

        /// (position, identifier, read type) of every row of
        #[doc = concat!("[`", stringify!($table), "`]")]
        #[cfg_attr(not(test), allow(dead_code))]
        pub(crate) const $list: &[(usize, &str, &str)] =
            &[ $( ($ids::$id.index(), stringify!($id), stringify!($ty)) ),* ];
    };
}

pub mod directives;

/// Every directive's typed identifier: `dir::APPENDONLY`, `dir::REPL_TIMEOUT` ... (the
/// directive's name in capitals, `-` as `_`).
pub mod dir {
    pub use super::core_ids::*;
    pub use super::directives::extra_ids::*;
}

const MEMORY: Kind = Kind::Memory { min: 0 };
const INT: Kind = Kind::Int {
    min: 0,
    max: i64::MAX,
};
const INT_ANY: Kind = Kind::Int {
    min: i64::MIN,
    max: i64::MAX,
};

directive_table! {
    /// Podium's core directives (the rest of Redis 7.0's vocabulary is
    /// [`directives::EXTRA`]).
    pub static PARAMS, identifiers in mod core_ids, listed in CORE_IDS, first 0;
    PORT: Int = p(
        "port",
        Kind::Int { min: 0, max: 65535 },
        "6379",
        "TCP port to listen on",
    ),
    BIND: Text = p(
        "bind",
        Kind::Words,
        "* -::*",
        "addresses to listen on (* = all IPv4, ::* = all IPv6, -addr = skip if absent)",
    ),
    DATABASES: Int = fixed(
        "databases",
        Kind::Int { min: 1, max: 1024 },
        "16",
        "number of databases",
    ),
    SHARDS_PER_DB: Int = fixed(
        "shards-per-db",
        Kind::Int { min: 1, max: 1024 },
        "16",
        "lock shards per database (Podium)",
    ),
    THREADS: Int = fixed(
        "threads",
        Kind::Int { min: 0, max: 256 },
        "0",
        "worker threads, 0 = one per core (Podium)",
    ),
    DAEMONIZE: Flag = fixed(
        "daemonize",
        Kind::Bool,
        "no",
        "fork into the background at startup (before any thread starts); logs go to logfile, or nowhere if it is empty",
    ),
    SUPERVISED: Text = fixed(
        "supervised",
        Kind::Enum(&["no", "upstart", "systemd", "auto"]),
        "no",
        "systemd: report READY=1, STATUS and STOPPING=1 to $NOTIFY_SOCKET; upstart: raise SIGSTOP when ready; auto: by the environment",
    ),
    PIDFILE: Text = fixed("pidfile", Kind::Str, "", "file to write the process id to"),
    UNIXSOCKET: Text = fixed(
        "unixsocket",
        Kind::Str,
        "",
        "also listen on this Unix socket path (empty = no Unix socket)",
    ),
    UNIXSOCKETPERM: Text = fixed(
        "unixsocketperm",
        Kind::Octal,
        "0",
        "permissions of the Unix socket, octal (0 = as the umask leaves them)",
    ),
    PROTECTED_MODE: Flag = p(
        "protected-mode",
        Kind::Bool,
        "yes",
        "with no password for the default user, refuse clients not on 127.0.0.1 or ::1",
    ),
    TCP_BACKLOG: Int = fixed(
        "tcp-backlog",
        INT,
        "511",
        "listen(2) backlog of the TCP sockets",
    ),
    TIMEOUT: Int = p(
        "timeout",
        INT,
        "0",
        "close idle clients after this many seconds (0 = never)",
    )
    .on_set(|c, v| c.hot.timeout.store(num(v), Relaxed)),
    TCP_KEEPALIVE: Int = p("tcp-keepalive", INT, "300", "TCP keepalive seconds"),
    LOGLEVEL: Text = p(
        "loglevel",
        Kind::Enum(&["debug", "verbose", "notice", "warning", "nothing"]),
        "notice",
        "log verbosity",
    )
    .on_set(|_, v| crate::log::set_level(v)),
    LOGFILE: Text = fixed(
        "logfile",
        Kind::Str,
        "",
        "log file (empty = standard output)",
    ),
    REQUIREPASS: Text = p(
        "requirepass",
        Kind::Str,
        "",
        "password for AUTH (empty = none)",
    )
    .on_set(|c, v| c.hot.requirepass_set.store(!v.is_empty(), Relaxed)),
    MAXCLIENTS: Int = p(
        "maxclients",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
        "10000",
        "maximum connected clients",
    ),
    MAXMEMORY: Int = p(
        "maxmemory",
        MEMORY,
        "0",
        "memory limit in bytes (0 = none)",
    )
    .on_set(|c, v| c.hot.maxmemory.store(num(v), Relaxed)),
    MAXMEMORY_POLICY: Text = p(
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
    )
    .on_set(|_, v| crate::keyspace::access::set_policy(v)),
    MAXMEMORY_SAMPLES: Int = p("maxmemory-samples", INT, "5", "keys sampled per eviction round (more is closer to true LRU/LFU/TTL order)"),
    HZ: Int = p(
        "hz",
        Kind::Int { min: 1, max: 500 },
        "10",
        "background task frequency (expiry reaper)",
    )
    .on_set(|c, v| {
        c.hot.hz.store(num(v), Relaxed);
        crate::watchdog::apply(c.int(dir::WATCHDOG_PERIOD).max(0) as u64, count(v) as u64);
    }),
    DYNAMIC_HZ: Flag = p(
        "dynamic-hz",
        Kind::Bool,
        "yes",
        "accepted, no effect: Podium's cron runs at hz whatever the number of clients",
    ),
    ACTIVE_EXPIRE_EFFORT: Int = p(
        "active-expire-effort",
        Kind::Int { min: 1, max: 10 },
        "1",
        "reaper effort 1..10",
    )
    .on_set(|c, v| c.hot.active_expire_effort.store(num(v), Relaxed)),
    PROTO_MAX_BULK_LEN: Int = p(
        "proto-max-bulk-len",
        Kind::Memory { min: 1024 * 1024 },
        "536870912",
        "largest accepted bulk argument",
    )
    .on_set(|c, v| c.hot.proto_max_bulk_len.store(num(v), Relaxed)),
    CLIENT_QUERY_BUFFER_LIMIT: Int = p(
        "client-query-buffer-limit",
        Kind::Memory { min: 1024 * 1024 },
        "1073741824",
        "largest query buffer per client",
    )
    .on_set(|c, v| c.hot.query_buffer_limit.store(num(v), Relaxed)),
    ZSET_MAX_LISTPACK_ENTRIES: Int = alias(
        p(
            "zset-max-listpack-entries",
            INT,
            "128",
            "small sorted-set encoding: max members",
        ),
        &["zset-max-ziplist-entries"],
    )
    .on_set(|c, v| c.hot.zset_max_entries.store(count(v), Relaxed)),
    ZSET_MAX_LISTPACK_VALUE: Int = alias(
        p(
            "zset-max-listpack-value",
            INT,
            "64",
            "small sorted-set encoding: max member bytes",
        ),
        &["zset-max-ziplist-value"],
    )
    .on_set(|c, v| c.hot.zset_max_value.store(count(v), Relaxed)),
    HASH_MAX_LISTPACK_ENTRIES: Int = alias(
        p(
            "hash-max-listpack-entries",
            INT,
            "128",
            "small hash encoding: max fields",
        ),
        &["hash-max-ziplist-entries"],
    )
    .on_set(|c, v| c.hot.hash_max_entries.store(count(v), Relaxed)),
    HASH_MAX_LISTPACK_VALUE: Int = alias(
        p(
            "hash-max-listpack-value",
            INT,
            "64",
            "small hash encoding: max value bytes",
        ),
        &["hash-max-ziplist-value"],
    )
    .on_set(|c, v| c.hot.hash_max_value.store(count(v), Relaxed)),
    SET_MAX_INTSET_ENTRIES: Int = p(
        "set-max-intset-entries",
        INT,
        "512",
        "integer set encoding: max members",
    )
    .on_set(|c, v| c.hot.set_max_intset.store(count(v), Relaxed)),
    LIST_MAX_LISTPACK_SIZE: Int = alias(
        p(
            "list-max-listpack-size",
            INT_ANY,
            "-2",
            "accepted, no effect: Podium's lists have one encoding (OBJECT ENCODING says quicklist or listpack by this size)",
        ),
        &["list-max-ziplist-size"],
    ),
    LIST_COMPRESS_DEPTH: Int = p(
        "list-compress-depth",
        INT,
        "0",
        "accepted, no effect: Podium does not compress list nodes",
    ),
    DIR: Text = p(
        "dir",
        Kind::Str,
        ".",
        "working directory for the RDB file and the append-only files",
    ),
    DBFILENAME: Text = p(
        "dbfilename",
        Kind::Str,
        "dump.rdb",
        "name of the RDB snapshot file in dir",
    ),
    SAVE: Text = p(
        "save",
        Kind::Words,
        "3600 1 300 100 60 10000",
        "save points: BGSAVE after <seconds> if at least <changes> writes (pairs; \"\" for none)",
    ),
    APPENDONLY: Flag = p(
        "appendonly",
        Kind::Bool,
        "no",
        "enable the append-only file",
    )
    .on_set(|c, v| c.hot.appendonly.store(v == "yes", Relaxed)),
    APPENDFILENAME: Text = fixed(
        "appendfilename",
        Kind::Str,
        "appendonly.aof",
        "base name of AOF files",
    ),
    APPENDDIRNAME: Text = fixed(
        "appenddirname",
        Kind::Str,
        "appendonlydir",
        "directory holding the AOF files",
    ),
    APPENDFSYNC: Text = p(
        "appendfsync",
        Kind::Enum(&["always", "everysec", "no"]),
        "everysec",
        "fsync policy",
    ),
    NO_APPENDFSYNC_ON_REWRITE: Flag = p(
        "no-appendfsync-on-rewrite",
        Kind::Bool,
        "no",
        "accepted, no effect: Podium's AOF rewrite does not compete with the fsync of the live file",
    ),
    AUTO_AOF_REWRITE_PERCENTAGE: Int = p(
        "auto-aof-rewrite-percentage",
        INT,
        "100",
        "rewrite when the AOF grew by this percent",
    ),
    AUTO_AOF_REWRITE_MIN_SIZE: Int = p(
        "auto-aof-rewrite-min-size",
        MEMORY,
        "67108864",
        "smallest AOF to rewrite automatically",
    ),
    AOF_LOAD_TRUNCATED: Flag = p(
        "aof-load-truncated",
        Kind::Bool,
        "yes",
        "load an AOF whose last command is truncated",
    ),
    AOF_MAX_SIZE: Int = p(
        "aof-max-size",
        MEMORY,
        "0",
        "fail AOF writes that would grow the file past this many bytes with ENOSPC (0: no limit; for testing disk-full handling, as Redis's hidden aof-max-size)",
    ),
    AOF_USE_RDB_PREAMBLE: Flag = p(
        "aof-use-rdb-preamble",
        Kind::Bool,
        "yes",
        "AOF rewrites write the base as an RDB file (<name>.<n>.base.rdb); no: RESP commands",
    ),
    AOF_DISABLE_AUTO_GC: Flag = p(
        "aof-disable-auto-gc",
        Kind::Bool,
        "no",
        "yes: files a rewrite replaced stay in the AOF directory, listed as history in the manifest; set back to no, they are deleted at once",
    ),
    AOF_TIMESTAMP_ENABLED: Flag = p(
        "aof-timestamp-enabled",
        Kind::Bool,
        "no",
        "yes: a #TS:<unix seconds> line before the first logged command of each second and atop a RESP rewrite base, as Redis writes them",
    ),
    AOF_REWRITE_INCREMENTAL_FSYNC: Flag = p(
        "aof-rewrite-incremental-fsync",
        Kind::Bool,
        "yes",
        "accepted, no effect: Podium fsyncs a rewritten AOF once, when it is complete",
    ),
    LAZYFREE_LAZY_EVICTION: Flag = p(
        "lazyfree-lazy-eviction",
        Kind::Bool,
        "no",
        "free an evicted key's big value on the lazyfree thread",
    )
    .on_set(|_, v| crate::keyspace::lazyfree::set(&crate::keyspace::lazyfree::EVICTION, v)),
    LAZYFREE_LAZY_EXPIRE: Flag = p(
        "lazyfree-lazy-expire",
        Kind::Bool,
        "no",
        "free an expired key's big value on the lazyfree thread",
    )
    .on_set(|_, v| crate::keyspace::lazyfree::set(&crate::keyspace::lazyfree::EXPIRE, v)),
    LAZYFREE_LAZY_SERVER_DEL: Flag = p(
        "lazyfree-lazy-server-del",
        Kind::Bool,
        "no",
        "free a big value a command overwrites or replaces on the lazyfree thread",
    )
    .on_set(|_, v| crate::keyspace::lazyfree::set(&crate::keyspace::lazyfree::SERVER_DEL, v)),
    LAZYFREE_LAZY_USER_DEL: Flag = p(
        "lazyfree-lazy-user-del",
        Kind::Bool,
        "no",
        "DEL frees big values on the lazyfree thread, as UNLINK does",
    )
    .on_set(|_, v| crate::keyspace::lazyfree::set(&crate::keyspace::lazyfree::USER_DEL, v)),
    LAZYFREE_LAZY_USER_FLUSH: Flag = p(
        "lazyfree-lazy-user-flush",
        Kind::Bool,
        "no",
        "FLUSHDB / FLUSHALL without SYNC or ASYNC free in the background, as ASYNC",
    )
    .on_set(|_, v| crate::keyspace::lazyfree::set(&crate::keyspace::lazyfree::USER_FLUSH, v)),
    IO_THREADS: Int = p(
        "io-threads",
        Kind::Int { min: 1, max: 128 },
        "1",
        "accepted, no effect: every worker thread (see threads) does its own clients' I/O",
    ),
    BUSY_REPLY_THRESHOLD: Int = alias(
        p(
            "busy-reply-threshold",
            INT,
            "5000",
            "ms a script runs before other clients get -BUSY",
        ),
        &["lua-time-limit"],
    )
    .on_set(|c, v| c.hot.busy_reply_threshold.store(num(v), Relaxed)),
    SLOWLOG_LOG_SLOWER_THAN: Int = p(
        "slowlog-log-slower-than",
        INT_ANY,
        "10000",
        "log commands slower than this many microseconds in the SLOWLOG (-1 = never, 0 = all)",
    )
    .on_set(|c, v| c.hot.slowlog_slower_than.store(num(v), Relaxed)),
    SLOWLOG_MAX_LEN: Int = p("slowlog-max-len", INT, "128", "entries kept in the SLOWLOG")
    .on_set(|c, v| c.hot.slowlog_max_len.store(num(v), Relaxed)),
    LATENCY_MONITOR_THRESHOLD: Int = p(
        "latency-monitor-threshold",
        INT,
        "0",
        "record LATENCY events of at least this many milliseconds (0 = off)",
    )
    .on_set(|c, v| c.hot.latency_threshold_ms.store(num(v), Relaxed)),
    TRACKING_TABLE_MAX_KEYS: Int = p(
        "tracking-table-max-keys",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
        "1000000",
        "most keys remembered for client-side caching (0: no limit); past it keys are invalidated",
    ),
    NOTIFY_KEYSPACE_EVENTS: Text = p(
        "notify-keyspace-events",
        Kind::Str,
        "",
        "keyspace event classes published over Pub/Sub (K E g $ l s h z x e t m d n A)",
    )
    .on_set(|c, v| {
        let flags = crate::keyspace::events::parse_flags(v).unwrap_or(0);
        c.hot.notify_flags.store(flags, Relaxed);
    }),
    MIN_REPLICAS_TO_WRITE: Int = alias(
        p(
            "min-replicas-to-write",
            INT,
            "0",
            "as Redis: writes need this many online replicas that acknowledged within min-replicas-max-lag (0 = none), else -NOREPLICAS",
        ),
        &["min-slaves-to-write"],
    )
    .on_set(good_replicas_required),
    MIN_REPLICAS_MAX_LAG: Int = alias(
        p(
            "min-replicas-max-lag",
            INT,
            "10",
            "lag in seconds a good replica may have (0 turns min-replicas-to-write off)",
        ),
        &["min-slaves-max-lag"],
    )
    .on_set(good_replicas_required),
    REPLICA_SERVE_STALE_DATA: Flag = alias(
        p(
            "replica-serve-stale-data",
            Kind::Bool,
            "yes",
            "as Redis: while the link to its master is down, a replica answers only the commands flagged stale unless set",
        ),
        &["slave-serve-stale-data"],
    ),
    REPLICA_READ_ONLY: Flag = alias(
        p(
            "replica-read-only",
            Kind::Bool,
            "yes",
            "as Redis: a replica refuses writes from its clients (-READONLY) while set",
        ),
        &["slave-read-only"],
    ),
    RDB_KEY_SAVE_DELAY: Int = p(
        "rdb-key-save-delay",
        INT_ANY,
        "0",
        "sleep this many microseconds per key while saving (negative -N: 1 us once in N keys), for tests",
    )
    .hidden(),
    RDBCOMPRESSION: Flag = p(
        "rdbcompression",
        Kind::Bool,
        "yes",
        "LZF-compress strings longer than 20 bytes in RDB files",
    ),
    RDBCHECKSUM: Flag = p(
        "rdbchecksum",
        Kind::Bool,
        "yes",
        "end RDB files with a CRC-64 (no: write zero, and loading skips the check)",
    ),
    SANITIZE_DUMP_PAYLOAD: Text = p(
        "sanitize-dump-payload",
        Kind::Enum(&["no", "yes", "clients"]),
        "no",
        "deep sanitization of listpacks and intsets in RESTORE payloads and loads (clients: RESTORE from users, not the master)",
    ),
    STOP_WRITES_ON_BGSAVE_ERROR: Flag = p(
        "stop-writes-on-bgsave-error",
        Kind::Bool,
        "yes",
        "refuse writes with -MISCONF while the last BGSAVE failed and save points are set",
    ),
    RDB_DEL_SYNC_FILES: Flag = p(
        "rdb-del-sync-files",
        Kind::Bool,
        "no",
        "as Redis: without save points or AOF, the RDB file written only to synchronize a replica is deleted once sent",
    ),
    ALWAYS_SHOW_LOGO: Flag = p(
        "always-show-logo",
        Kind::Bool,
        "no",
        "print the startup banner (port, pid) even when the log is not a terminal",
    ),
    SET_PROC_TITLE: Flag = fixed(
        "set-proc-title",
        Kind::Bool,
        "yes",
        "no: the process keeps the command line it was started with (children included)",
    ),
    ACTIVEREHASHING: Flag = p(
        "activerehashing",
        Kind::Bool,
        "yes",
        "accepted, no effect: Podium's hash tables resize incrementally on their own",
    ),
    CLIENT_OUTPUT_BUFFER_LIMIT: Text = p(
        "client-output-buffer-limit",
        Kind::Words,
        "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60",
        "per class (normal, replica, pubsub): hard limit, soft limit and seconds over the soft limit before a client with that much reply data pending is disconnected (all three enforced)",
    )
    .on_set(|c, v| {
        // Only the classes named change; the stored text becomes all three.
        c.store(dir::CLIENT_OUTPUT_BUFFER_LIMIT, c.hot.obuf.apply(v));
    }),
    ENABLE_DEBUG_COMMAND: Text = fixed(
        "enable-debug-command",
        Kind::Enum(&["no", "yes", "local"]),
        "no",
        "who may run DEBUG: no one, anyone, or clients on 127.0.0.1/::1 (local)",
    ),
    ENABLE_PROTECTED_CONFIGS: Text = fixed(
        "enable-protected-configs",
        Kind::Enum(&["no", "yes", "local"]),
        "no",
        "who may CONFIG SET dir and dbfilename: no one, anyone, or local clients",
    ),
    ACLFILE: Text = fixed(
        "aclfile",
        Kind::Str,
        "",
        "file of ACL users (ACL LOAD/SAVE); not together with user directives",
    ),
    ACLLOG_MAX_LEN: Int = p(
        "acllog-max-len",
        INT,
        "128",
        "entries kept in the ACL LOG",
    ),
    ACL_PUBSUB_DEFAULT: Text = p(
        "acl-pubsub-default",
        Kind::Enum(&["allchannels", "resetchannels"]),
        "resetchannels",
        "channel permissions of new users and selectors",
    ),
    ENABLE_MODULE_COMMAND: Text = fixed(
        "enable-module-command",
        Kind::Enum(&["no", "yes", "local"]),
        "no",
        "no effect: Podium loads no modules, MODULE is an unknown command whatever this says",
    ),
    REPL_DISKLESS_SYNC_DELAY: Int = p(
        "repl-diskless-sync-delay",
        INT,
        "5",
        "as Redis: seconds a diskless transfer waits for more replicas to share it"
    ),
    PROPAGATION_ERROR_BEHAVIOR: Text = p(
        "propagation-error-behavior",
        Kind::Enum(&["ignore", "panic", "panic-on-replicas"]),
        "ignore",
        "a command from the AOF or (on a replica) from its master that fails: logged as Redis logs it and skipped (ignore), or ends the server (panic; panic-on-replicas: only a read-only replica's master stream)",
    ),
}

/// Directives CONFIG SET refuses unless `enable-protected-configs` allows the client (Redis
/// 7.0's PROTECTED_CONFIG set): they choose where files are written.
pub(crate) const PROTECTED: &[usize] = &[dir::DIR.index(), dir::DBFILENAME.index()];

/// Directives CONFIG SET refuses with `-LOADING` while the data set loads (Redis's
/// DENY_LOADING_CONFIG): changing them then would pull the files out from under the load.
pub(crate) const DENY_LOADING: &[usize] = &[
    dir::APPENDONLY.index(),
    dir::DIR.index(),
    dir::REPL_DISKLESS_LOAD.index(),
];

/// The directives a CONFIG SET changed, in the order it named them.
#[derive(Debug)]
pub struct Changed(Vec<usize>);

impl Changed {
    pub fn contains<T>(&self, id: Id<T>) -> bool {
        self.0.contains(&id.index())
    }

    /// Of `ids`, the one the CONFIG SET named first.
    pub fn first_of<T>(&self, ids: &[Id<T>]) -> Option<Id<T>> {
        self.0
            .iter()
            .find_map(|i| ids.iter().find(|id| id.index() == *i).copied())
    }

    /// The changed directives' names.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.0.iter().map(|i| params()[*i].name)
    }
}

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

/// A checked integer value as a hook reads it (0 if it were not one, as a read by name gave).
fn num(v: &str) -> i64 {
    v.parse().unwrap_or(0)
}

/// [`num`] as a count: a negative value is 0.
fn count(v: &str) -> usize {
    num(v).max(0) as usize
}

/// Hook of `min-replicas-to-write` and `min-replicas-max-lag`: see [`Hot`].
fn good_replicas_required(c: &Config, _: &str) {
    let required = c.int(dir::MIN_REPLICAS_TO_WRITE) > 0 && c.int(dir::MIN_REPLICAS_MAX_LAG) > 0;
    c.hot.good_replicas_required.store(required, Relaxed);
}

/// Values read on hot paths, mirrored from the text table by the rows' update hooks.
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
/// ([`crate::config::directives::EXTRA`]). Values are indexed by position in this list, which
/// is what an [`Id`] holds (the two tables share no name: a test checks it).
pub fn params() -> &'static [&'static Param] {
    static ALL: std::sync::OnceLock<Vec<&'static Param>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        PARAMS
            .iter()
            .chain(crate::config::directives::EXTRA)
            .collect()
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
fn shown(idx: usize, v: &str) -> String {
    if idx == dir::NOTIFY_KEYSPACE_EVENTS.index() {
        crate::keyspace::events::normalise(v).unwrap_or_else(|_| v.to_string())
    } else if idx == dir::DIR.index() {
        // `dir` is the working directory (see change_dir): show where the process really is.
        std::env::current_dir()
            .map(|d| d.to_string_lossy().into_owned())
            .unwrap_or_else(|_| v.to_string())
    } else {
        v.to_string()
    }
}

/// Check and normalise a value for a parameter. Err carries Redis's reason text.
fn normalise(idx: usize, words: &[String]) -> Result<String, String> {
    let prm = params()[idx];
    if idx == dir::CLIENT_OUTPUT_BUFFER_LIMIT.index() {
        let w: Vec<&str> = words.iter().map(|s| s.as_str()).collect();
        crate::config::parse_obuf_limits(&w)?;
    }
    if idx == dir::NOTIFY_KEYSPACE_EVENTS.index() && words.len() == 1 {
        // Kept as given (CONFIG GET renders it as Redis does, which can hide `n` behind `A`).
        crate::keyspace::events::normalise(&words[0])?;
    }
    if let Kind::Words = prm.kind {
        if idx == dir::SAVE.index() {
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
        Kind::Memory { min } => {
            let n = parse_memory(v)
                .filter(|n| *n >= 0)
                .ok_or_else(|| "argument must be a memory value".to_string())?;
            if n < min {
                return Err(format!(
                    "argument must be between {min} and {} inclusive",
                    i64::MAX
                ));
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
        Kind::Str if idx == dir::DBFILENAME.index() && v.contains('/') => {
            Err("dbfilename can't be a path, just a filename".into())
        }
        Kind::Str if idx == dir::PROC_TITLE_TEMPLATE.index() && !crate::proctitle::validate(v) => {
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
            c.run_hook(i);
        }
        c
    }

    /// Run directive `idx`'s update hook on its stored value.
    fn run_hook(&self, idx: usize) {
        if let Some(hook) = params()[idx].on_set {
            // Cloned: a hook may store a value of its own (see Config::store).
            let v = self.values.read()[idx].clone();
            hook(self, &v);
        }
    }

    /// Replace a stored value from an update hook, where applying the value changed it (the
    /// watchdog's lower bound, the output-buffer classes merged into one text).
    fn store<T>(&self, id: Id<T>, text: String) {
        self.values.write()[id.index()] = text;
    }

    /// An integer or memory directive's value (memory in bytes).
    pub fn int(&self, id: Id<Int>) -> i64 {
        // Checked when it was set, so it parses; 0 is what a by-name read gave otherwise.
        self.values.read()[id.index()].parse().unwrap_or(0)
    }

    /// A yes/no directive's value.
    pub fn flag(&self, id: Id<Flag>) -> bool {
        self.values.read()[id.index()] == "yes"
    }

    /// A directive's value as CONFIG GET shows it.
    pub fn text<T>(&self, id: Id<T>) -> String {
        let i = id.index();
        shown(i, &self.values.read()[i])
    }

    /// Current text value of a directive named by the user (by name or alias), as CONFIG GET
    /// shows it; code reads through the typed [`Config::int`], [`Config::flag`],
    /// [`Config::text`].
    pub fn get(&self, name: &str) -> Option<String> {
        find(name).map(|i| shown(i, &self.values.read()[i]))
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
        if idx == dir::SAVE.index() {
            // redis.conf: the first `save` line replaces the default save points, each later
            // one adds to them; `save ""` clears them.
            let first = !self.save_loaded.swap(true, Ordering::Relaxed);
            let old = self.values.read()[idx].clone();
            if !first && !v.is_empty() && !old.is_empty() {
                v = format!("{old} {v}");
            }
        }
        if idx == dir::DIR.index() {
            v = change_dir(&v)?;
        }
        self.values.write()[idx] = v;
        self.run_hook(idx);
        Ok(())
    }

    /// Normalise `words` for parameter `idx`, with the directive-specific rules: the
    /// per-class merge of client-output-buffer-limit and the refusal of values that need a
    /// feature Podium lacks.
    fn checked_value(&self, idx: usize, words: &[String]) -> Result<String, String> {
        let prm = params()[idx];
        let v = if idx == dir::CLIENT_OUTPUT_BUFFER_LIMIT.index() {
            let current = self.values.read()[idx].clone();
            crate::config::directives::merge_obuf_limits(&current, words)?
        } else {
            normalise(idx, words)?
        };
        let v = match prm.check {
            Some(check) => check(&v)?,
            None => v,
        };
        if let Some(why) = crate::config::directives::refusal(prm, &v) {
            return Err(why);
        }
        Ok(v)
    }

    /// CONFIG SET of several parameters, all or nothing, from the server itself (no
    /// protected-config check). Err is the full error text.
    pub fn set_runtime(&self, pairs: &[(String, String)]) -> Result<Changed, String> {
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
    ) -> Result<Changed, String> {
        self.set_runtime_for(pairs, Some(local_client), loading)
    }

    fn set_runtime_for(
        &self,
        pairs: &[(String, String)],
        client_local: Option<bool>,
        loading: bool,
    ) -> Result<Changed, String> {
        let protected_allowed = match client_local {
            None => true,
            Some(local) => {
                protected_action_allowed(&self.text(dir::ENABLE_PROTECTED_CONFIGS), local)
            }
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
            let unchanged_podium_setting = [dir::SHARDS_PER_DB, dir::THREADS]
                .iter()
                .any(|id| id.index() == idx)
                && shown(idx, &self.values.read()[idx]) == value.trim();
            if !prm.mutable && !unchanged_podium_setting {
                refusal = Some(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - can't set immutable config"
                ));
                continue;
            }
            if !protected_allowed && PROTECTED.contains(&idx) {
                refusal = Some(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - can't set protected config"
                ));
                continue;
            }
            if loading && DENY_LOADING.contains(&idx) {
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
            if *idx == dir::DIR.index() {
                *v = change_dir(v).map_err(|e| {
                    format!("ERR CONFIG SET failed (possibly related to argument 'dir') - {e}")
                })?;
            }
        }
        let mut changed = Changed(Vec::new());
        {
            let mut vals = self.values.write();
            for (idx, v) in &staged {
                vals[*idx] = v.clone();
                changed.0.push(*idx);
            }
        }
        for (idx, _) in staged {
            self.run_hook(idx);
        }
        Ok(changed)
    }

    /// CONFIG GET: (name, value) for every parameter or alias matching one of the patterns.
    pub fn matching(&self, patterns: &[Vec<u8>]) -> Vec<(String, String)> {
        let vals = self.values.read();
        let mut out: Vec<(String, String)> = Vec::new();
        for (i, prm) in params().iter().enumerate() {
            // Hidden parameters answer only to their exact name, never to a pattern.
            let hidden = prm.hidden;
            for name in std::iter::once(&prm.name).chain(prm.aliases.iter()) {
                if patterns
                    .iter()
                    .filter(|p| !hidden || !p.iter().any(|c| matches!(c, b'*' | b'?' | b'[')))
                    .any(|p| crate::util::numtext::glob_match(p, name.as_bytes(), true))
                    && !out.iter().any(|(n, _)| n == name)
                {
                    out.push((name.to_string(), shown(i, &vals[i])));
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
            .enumerate()
            .map(|(i, (p, v))| (p.name, shown(i, v)))
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
        if !self.flag(dir::SET_PROC_TITLE) {
            return None;
        }
        let template = self.text(dir::PROC_TITLE_TEMPLATE);
        let port = self.int(dir::PORT);
        let var = |name: &str| -> Option<String> {
            Some(match name {
                "title" => title.unwrap_or(crate::proctitle::argv0()).to_string(),
                "listen-addr" if port != 0 => {
                    let bind = self.text(dir::BIND);
                    let first = bind.split_whitespace().next().unwrap_or("*");
                    format!("{first}:{port}")
                }
                "listen-addr" => {
                    format!("unixsocket:{}", self.text(dir::UNIXSOCKET))
                }
                // Sentinel mode does not exist here.
                "server-mode" if self.flag(dir::CLUSTER_ENABLED) => "[cluster]".into(),
                "server-mode" => String::new(),
                "config-file" => self
                    .config_file
                    .as_ref()
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "-".into()),
                "port" => port.to_string(),
                "tls-port" => self.int(dir::TLS_PORT).to_string(),
                "unixsocket" => self.text(dir::UNIXSOCKET),
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
        assert!(c.flag(dir::APPENDONLY));
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
mod typed {
    use super::*;

    /// The macro numbers identifiers by their rows, so this holds by construction; the test
    /// also catches a name used twice (a second row would never be found by name) and an
    /// identifier whose read type does not fit its row's kind.
    #[test]
    fn every_identifier_names_its_row() {
        let ids: Vec<&(usize, &str, &str)> = CORE_IDS.iter().chain(directives::EXTRA_IDS).collect();
        assert_eq!(ids.len(), params().len());
        for (pos, (index, ident, reads_as)) in ids.into_iter().enumerate() {
            assert_eq!(*index, pos, "{ident}");
            let prm = params()[pos];
            assert_eq!(prm.name.to_ascii_uppercase().replace('-', "_"), *ident);
            for name in std::iter::once(&prm.name).chain(prm.aliases) {
                assert_eq!(find(name), Some(pos), "{name} names two rows");
            }
            let fits = match prm.kind {
                Kind::Int { .. } | Kind::Memory { .. } => "Int",
                Kind::Bool => "Flag",
                _ => "Text",
            };
            assert_eq!(*reads_as, fits, "{} reads as {reads_as}", prm.name);
        }
        assert_eq!(dir::REPL_TIMEOUT.name(), "repl-timeout");
        assert_eq!(
            dir::ZSET_MAX_LISTPACK_ENTRIES.name(),
            "zset-max-listpack-entries"
        );
    }

    #[test]
    fn typed_reads_agree_with_reads_by_name() {
        let c = Config::new();
        c.set_runtime(&[
            dir::MAXMEMORY.with("2mb"),
            dir::APPENDONLY.with("yes"),
            dir::REPL_TIMEOUT.with("7"),
            dir::SLOWLOG_LOG_SLOWER_THAN.with("-1"),
        ])
        .expect("set");
        for (pos, (_, _, reads_as)) in CORE_IDS.iter().chain(directives::EXTRA_IDS).enumerate() {
            let by_name = c.get(params()[pos].name).expect("known");
            assert_eq!(c.text(Id::<Text>::at(pos)), by_name);
            match *reads_as {
                "Int" => assert_eq!(c.int(Id::at(pos)).to_string(), by_name),
                "Flag" => assert_eq!(c.flag(Id::at(pos)), by_name == "yes"),
                _ => {}
            }
        }
        assert_eq!(c.int(dir::MAXMEMORY), 2 << 20);
        assert!(c.flag(dir::APPENDONLY));
        assert_eq!(c.int(dir::SLOWLOG_LOG_SLOWER_THAN), -1);
    }

    #[test]
    fn hooks_follow_every_change() {
        let c = Config::new();
        assert_eq!(c.hot.hz.load(Relaxed), 10);
        assert!(!c.hot.good_replicas_required.load(Relaxed));
        let changed = c
            .set_runtime(&[
                dir::HZ.with("100"),
                dir::MIN_REPLICAS_TO_WRITE.with("1"),
                dir::CLIENT_OUTPUT_BUFFER_LIMIT.with("pubsub 1 2 3"),
            ])
            .expect("set");
        assert!(changed.contains(dir::HZ) && !changed.contains(dir::PORT));
        let first = changed.first_of(&[dir::MIN_REPLICAS_MAX_LAG, dir::MIN_REPLICAS_TO_WRITE]);
        assert_eq!(first, Some(dir::MIN_REPLICAS_TO_WRITE));
        assert_eq!(c.hot.hz.load(Relaxed), 100);
        // min-replicas-max-lag is 10 by default: both are now set.
        assert!(c.hot.good_replicas_required.load(Relaxed));
        assert_eq!(c.hot.obuf.pubsub().hard, 1);
        assert_eq!(
            c.text(dir::CLIENT_OUTPUT_BUFFER_LIMIT),
            "normal 0 0 0 slave 268435456 67108864 60 pubsub 1 2 3"
        );
        c.set_runtime(&[dir::MIN_REPLICAS_MAX_LAG.with("0")])
            .expect("set");
        assert!(!c.hot.good_replicas_required.load(Relaxed));
    }
}

#[cfg(test)]
mod shipped_conf {
    use super::*;

    /// The first comment line above each directive in conf/podium.conf is the directive's help
    /// from the table, with "(runtime)" when CONFIG SET may change it and its aliases after
    /// it, so the shipped file does
    /// not go stale as features land (it said "replication is not supported" long after
    /// replication was built). `PODIUM_WRITE_CONF=1 cargo test --release --lib shipped_conf`
    /// rewrites those lines from the table.
    #[test]
    fn shipped_conf_comments_are_the_table_help() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/conf/podium.conf");
        let text = std::fs::read_to_string(path).unwrap();
        let mut lines: Vec<String> = text.lines().map(String::from).collect();
        let mut stale = Vec::new();
        for i in 0..lines.len() {
            let Some(name) = lines[i].split_whitespace().next() else {
                continue;
            };
            let Some(p) = params().iter().find(|p| p.name == name) else {
                continue;
            };
            let mut first = i;
            while first > 0 && lines[first - 1].starts_with('#') {
                first -= 1;
            }
            let aliases = if p.aliases.is_empty() {
                String::new()
            } else {
                format!(" [alias: {}]", p.aliases.join(", "))
            };
            let runtime = if p.mutable { " (runtime)" } else { "" };
            let want = format!("# {}{runtime}{aliases}", p.help);
            if first == i {
                stale.push(format!("{name}: no comment"));
            } else if lines[first] != want {
                stale.push(format!(
                    "{name}: {:?}, the table says {want:?}",
                    lines[first]
                ));
                lines[first] = want;
            }
        }
        if !stale.is_empty() && std::env::var_os("PODIUM_WRITE_CONF").is_some() {
            std::fs::write(path, lines.join("\n") + "\n").unwrap();
            return;
        }
        assert!(
            stale.is_empty(),
            "conf/podium.conf is stale (PODIUM_WRITE_CONF=1 rewrites it):\n{}",
            stale.join("\n")
        );
    }

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
