//! Redis 7.0 directives beyond Podium's core table, and the rules for refusing a value.
//!
//! [`crate::config::PARAMS`] holds the directives Podium acts on. This module owns the rest of
//! Redis 7.0's redis.conf vocabulary, so that any file Redis accepts (Debian's stock
//! /etc/redis/redis.conf among them) either starts Podium or stops it with a reason:
//! - [`EXTRA`]: directives accepted with no effect, each with the reason in its help text
//!   (tuning knobs of machinery Podium does not have: replication links,
//!   cluster buses), plus a few Podium acts on (eviction, latency tracking, the replication
//!   link); its rows are declared as the core table's are, each with its typed identifier
//!   ([`extra_ids`], read through [`crate::config::dir`]) and update hook;
//! - [`refusal`]: directives, or values of them, that would need a feature Podium lacks
//!   (cluster mode, modules, syslog ...), refused with a message saying so;
//! - [`merge_obuf_limits`]: `client-output-buffer-limit`, given one class per line as Redis
//!   allows, merged into the full three-class value.

use crate::config::{count, dir, Kind, Param};
use std::sync::atomic::Ordering::Relaxed;

// The row constructors of the core table, under the names this table reads best with.
use crate::config::{alias as aka, fixed as fixed_row, p as row};

const UINT: Kind = Kind::Int {
    min: 0,
    max: i64::MAX,
};
const PORT: Kind = Kind::Int { min: 0, max: 65535 };
const YES_NO: Kind = Kind::Bool;
const MEMORY: Kind = Kind::Memory { min: 0 };

const DISK_SYNC: &str = "as Redis: yes streams the image from a fork straight to the replicas' sockets ($EOF:<mark> form) to every replica that reads it, several replicas sharing one transfer; no writes the file and sends it ($<len>)";
const DISK_SYNC_MAX: &str = "as Redis: with repl-diskless-sync, start the transfer as soon as this many replicas wait (0: wait repl-diskless-sync-delay)";

directive_table! {
    /// Directives of Redis 7.0 that the core table does not list.
    pub static EXTRA, identifiers in mod extra_ids, listed in EXTRA_IDS,
        first crate::config::CORE_IDS.len();
    // Eviction (see crate::evict).
    LFU_LOG_FACTOR: Int = row(
        "lfu-log-factor",
        UINT,
        "10",
        "LFU counter growth: higher means more hits per counter step",
    )
    .on_set(|_, v| crate::keyspace::access::set_lfu_log_factor(v)),
    LFU_DECAY_TIME: Int = row(
        "lfu-decay-time",
        UINT,
        "1",
        "LFU counter decay: minutes per halving step (0 = never decay)",
    )
    .on_set(|_, v| crate::keyspace::access::set_lfu_decay_time(v)),
    MAXMEMORY_EVICTION_TENACITY: Int = row(
        "maxmemory-eviction-tenacity",
        Kind::Int { min: 0, max: 100 },
        "10",
        "how long one command may evict before the rest is left to later commands",
    ),
    MAXMEMORY_CLIENTS: Text = row(
        "maxmemory-clients",
        Kind::Str,
        "0",
        "client eviction: disconnect the biggest clients when all clients' buffers reach this (bytes, or % of maxmemory; 0 = off)",
    )
    .checked(maxmemory_clients),
    // Latency tracking (INFO latencystats).
    LATENCY_TRACKING: Flag = row(
        "latency-tracking",
        YES_NO,
        "yes",
        "per-command latency percentiles in INFO latencystats",
    )
    .on_set(|c, v| c.hot.latency_tracking.store(v == "yes", Relaxed)),
    LATENCY_TRACKING_INFO_PERCENTILES: Text = row(
        "latency-tracking-info-percentiles",
        Kind::Words,
        "50 99 99.9",
        "percentiles INFO latencystats reports",
    )
    .checked(latency_percentiles),
    // Memory and process tuning.
    JEMALLOC_BG_THREAD: Flag = row(
        "jemalloc-bg-thread",
        YES_NO,
        "yes",
        "jemalloc's purging thread: returns freed pages to the OS when the server is idle",
    )
    .on_set(|_, v| crate::alloc::set_background_thread(v == "yes")),
    ACTIVEDEFRAG: Flag = row(
        "activedefrag",
        YES_NO,
        "no",
        "active defragmentation: move keys and values out of sparse jemalloc slabs when fragmentation passes the thresholds below",
    ),
    ACTIVE_DEFRAG_IGNORE_BYTES: Int = row(
        "active-defrag-ignore-bytes",
        Kind::Memory { min: 1 },
        "104857600",
        "active defrag starts only with at least this much fragmentation (allocator active minus allocated bytes)",
    ),
    ACTIVE_DEFRAG_THRESHOLD_LOWER: Int = row(
        "active-defrag-threshold-lower",
        Kind::Int { min: 0, max: 1000 },
        "10",
        "active defrag starts above this fragmentation percent",
    ),
    ACTIVE_DEFRAG_THRESHOLD_UPPER: Int = row(
        "active-defrag-threshold-upper",
        Kind::Int { min: 0, max: 1000 },
        "100",
        "fragmentation percent at which active defrag uses active-defrag-cycle-max",
    ),
    ACTIVE_DEFRAG_CYCLE_MIN: Int = row(
        "active-defrag-cycle-min",
        Kind::Int { min: 1, max: 99 },
        "1",
        "least CPU percent active defrag uses while it runs",
    ),
    ACTIVE_DEFRAG_CYCLE_MAX: Int = row(
        "active-defrag-cycle-max",
        Kind::Int { min: 1, max: 99 },
        "25",
        "most CPU percent active defrag uses",
    ),
    ACTIVE_DEFRAG_MAX_SCAN_FIELDS: Int = row(
        "active-defrag-max-scan-fields",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
        "1000",
        "values with more elements are defragmented over several steps",
    ),
    DISABLE_THP: Flag = fixed_row(
        "disable-thp",
        YES_NO,
        "yes",
        "turn transparent huge pages off for the process at startup (prctl PR_SET_THP_DISABLE)",
    ),
    IO_THREADS_DO_READS: Flag = fixed_row(
        "io-threads-do-reads",
        YES_NO,
        "no",
        "accepted, no effect: every Podium worker thread reads and parses its own clients",
    ),
    OOM_SCORE_ADJ: Text = row(
        "oom-score-adj",
        Kind::Enum(&["no", "yes", "relative", "absolute"]),
        "no",
        "let the kernel's OOM killer see the server with an adjusted score (yes = relative)",
    ),
    OOM_SCORE_ADJ_VALUES: Text = row(
        "oom-score-adj-values",
        Kind::Words,
        "0 200 800",
        "OOM score adjustments of the server, a replica (not built: unused) and a BGSAVE child",
    )
    .checked(oom_score_adj_directive),
    PROC_TITLE_TEMPLATE: Text = row(
        "proc-title-template",
        Kind::Str,
        "{title} {listen-addr} {server-mode}",
        "the process title ps and /proc/<pid>/cmdline show: {title} {listen-addr} {server-mode} {config-file} {port} {tls-port} {unixsocket}; forked children show redis-rdb-bgsave / redis-aof-rewrite as {title}",
    ),
    SERVER_CPULIST: Text = fixed_row(
        "server_cpulist",
        Kind::Str,
        "",
        "accepted, no effect: Podium does not pin threads to CPUs",
    ),
    BIO_CPULIST: Text = fixed_row(
        "bio_cpulist",
        Kind::Str,
        "",
        "accepted, no effect: Podium does not pin threads to CPUs",
    ),
    AOF_REWRITE_CPULIST: Text = fixed_row(
        "aof_rewrite_cpulist",
        Kind::Str,
        "",
        "accepted, no effect: Podium does not pin threads to CPUs",
    ),
    BGSAVE_CPULIST: Text = fixed_row(
        "bgsave_cpulist",
        Kind::Str,
        "",
        "accepted, no effect: Podium does not pin threads to CPUs",
    ),
    IGNORE_WARNINGS: Text = row(
        "ignore-warnings",
        Kind::Str,
        "",
        "accepted, no effect: Podium prints none of Redis's kernel warnings",
    ),
    CRASH_LOG_ENABLED: Flag = row(
        "crash-log-enabled",
        YES_NO,
        "yes",
        "write a bug report with a stack trace to the log when the process dies of a fatal signal",
    ),
    CRASH_MEMCHECK_ENABLED: Flag = row(
        "crash-memcheck-enabled",
        YES_NO,
        "yes",
        "accepted, no effect: the crash report has no memory test (Redis's runs one after a crash)",
    ),
    USE_EXIT_ON_PANIC: Flag = row(
        "use-exit-on-panic",
        YES_NO,
        "no",
        "accepted, no effect: a Rust panic is reported by the runtime",
    )
    .hidden(),
    SHUTDOWN_TIMEOUT: Int = row(
        "shutdown-timeout",
        UINT,
        "10",
        "seconds a shutdown (SHUTDOWN without NOW, SIGTERM, SIGINT) waits for lagging replicas to catch up, writes held back meanwhile (0: no wait)",
    ),
    SHUTDOWN_ON_SIGINT: Text = row(
        "shutdown-on-sigint",
        Kind::Words,
        "default",
        "what SIGINT does: default (save if save points exist), save, nosave, now, force (exit even if the save fails)",
    )
    .checked(shutdown_directive),
    SHUTDOWN_ON_SIGTERM: Text = row(
        "shutdown-on-sigterm",
        Kind::Words,
        "default",
        "what SIGTERM does: default (save if save points exist), save, nosave, now, force (exit even if the save fails)",
    )
    .checked(shutdown_directive),
    WATCHDOG_PERIOD: Int = row(
        "watchdog-period",
        UINT,
        "0",
        "as Redis: milliseconds a command may run before its thread's stack trace is logged (0: off)",
    )
    .hidden()
    .on_set(|c, v| {
        // As Redis, a period under two cron periods is raised, and CONFIG GET shows that.
        let hz = c.hot.hz.load(Relaxed).max(1) as u64;
        let period = count(v) as u64;
        let applied = crate::watchdog::apply(period, hz);
        if applied != period {
            c.store(dir::WATCHDOG_PERIOD, applied.to_string());
        }
    }),
    KEY_LOAD_DELAY: Int = row(
        "key-load-delay",
        Kind::Int {
            min: i32::MIN as i64,
            max: i32::MAX as i64,
        },
        "0",
        "sleep this many microseconds per key while loading an RDB file (negative -N: 1 us once in N keys), for tests",
    )
    .hidden(),
    LOADING_PROCESS_EVENTS_INTERVAL_BYTES: Int = row(
        "loading-process-events-interval-bytes",
        Kind::Int {
            min: 1024,
            max: i32::MAX as i64,
        },
        "2097152",
        "as Redis: a request that comes while a file loads is held until the loader read another this many bytes (at most 100 ms), then refused with -LOADING; during a load from the master's socket at once",
    )
    .hidden(),
    // RDB knobs Debian's file sets.
    RDB_SAVE_INCREMENTAL_FSYNC: Flag = row(
        "rdb-save-incremental-fsync",
        YES_NO,
        "yes",
        "accepted, no effect: Podium fsyncs an RDB file once, when it is complete",
    ),
    // Logging.
    SYSLOG_ENABLED: Flag = fixed_row(
        "syslog-enabled",
        YES_NO,
        "no",
        "logging to syslog is not supported: only 'no' is accepted (use logfile)",
    )
    .unsupported("logging to syslog is not supported (use logfile)"),
    SYSLOG_IDENT: Text = fixed_row(
        "syslog-ident",
        Kind::Str,
        "redis",
        "accepted, no effect: syslog-enabled yes is refused",
    ),
    SYSLOG_FACILITY: Text = fixed_row(
        "syslog-facility",
        Kind::Enum(&[
            "user", "local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7",
        ]),
        "local0",
        "accepted, no effect: syslog-enabled yes is refused",
    ),
    HLL_SPARSE_MAX_BYTES: Int = row(
        "hll-sparse-max-bytes",
        MEMORY,
        "3000",
        "largest sparse HyperLogLog string, in bytes, before it is converted to dense",
    )
    .on_set(|c, v| c.hot.hll_sparse_max_bytes.store(count(v), Relaxed)),
    // Stream node sizes (crate::types::stream); then features Podium does not have.
    STREAM_NODE_MAX_BYTES: Int = row(
        "stream-node-max-bytes",
        MEMORY,
        "4096",
        "streams: a new node (listpack) starts past this many bytes (0 = no limit)",
    ),
    STREAM_NODE_MAX_ENTRIES: Int = row(
        "stream-node-max-entries",
        UINT,
        "100",
        "streams: a new node (listpack) starts past this many entries (0 = no limit)",
    ),
    SOCKET_MARK_ID: Int = fixed_row(
        "socket-mark-id",
        Kind::Int {
            min: 0,
            max: u32::MAX as i64,
        },
        "0",
        "socket marks are not supported: only 0 is accepted",
    )
    .unsupported("socket marks are not supported"),
    // Replication.
    REPLICAOF: Text = aka(
        fixed_row(
            "replicaof",
            Kind::Words,
            "",
            "the master to follow from startup (REPLICAOF changes it at run time)",
        ),
        &["slaveof"],
    )
    .checked(replicaof),
    MASTERAUTH: Text = row("masterauth", Kind::Str, "", "the password the replication link sends to the master"),
    MASTERUSER: Text = row("masteruser", Kind::Str, "", "the ACL user the replication link authenticates as"),
    REPL_DISKLESS_SYNC: Flag = row("repl-diskless-sync", YES_NO, "yes", DISK_SYNC),
    REPL_DISKLESS_SYNC_MAX_REPLICAS: Int = row("repl-diskless-sync-max-replicas", UINT, "0", DISK_SYNC_MAX),
    REPL_DISKLESS_LOAD: Text = row(
        "repl-diskless-load",
        Kind::Enum(&["disabled", "on-empty-db", "swapdb"]),
        "disabled",
        "as Redis: disabled writes the master's image to disk and loads the file; on-empty-db loads from the socket while the data set is empty; swapdb loads from the socket beside the old data set, swapped in on success and kept on failure (served meanwhile, async_loading, when the master continues our history)",
    ),
    REPL_DISABLE_TCP_NODELAY: Flag = row("repl-disable-tcp-nodelay", YES_NO, "no", "as Redis: TCP_NODELAY on the replication link unless set"),
    REPL_BACKLOG_SIZE: Int = row(
        "repl-backlog-size",
        Kind::Memory { min: 1 },
        "1048576",
        "as Redis: the bytes of stream kept for replicas that reconnect (PSYNC)",
    ),
    REPL_BACKLOG_TTL: Int = row("repl-backlog-ttl", UINT, "3600", "as Redis: seconds without replicas before the backlog is freed"),
    REPL_TIMEOUT: Int = row(
        "repl-timeout",
        Kind::Int {
            min: 1,
            max: i32::MAX as i64,
        },
        "60",
        "as Redis: a silent master, or a replica that stops acknowledging, is disconnected after it",
    ),
    REPL_PING_REPLICA_PERIOD: Int = aka(
        row(
            "repl-ping-replica-period",
            Kind::Int {
                min: 1,
                max: i32::MAX as i64,
            },
            "10",
            "as Redis: seconds between the master's PINGs in the stream",
        ),
        &["repl-ping-slave-period"],
    ),
    REPLICA_PRIORITY: Int = aka(
        row("replica-priority", UINT, "100", "as Redis: shown in INFO (slave_priority) for Sentinel"),
        &["slave-priority"],
    ),
    REPLICA_LAZY_FLUSH: Flag = aka(
        row("replica-lazy-flush", YES_NO, "no", "accepted, no effect: a replica empties its data set before loading the master's image in one step either way"),
        &["slave-lazy-flush"],
    ),
    REPLICA_IGNORE_MAXMEMORY: Flag = aka(
        row("replica-ignore-maxmemory", YES_NO, "yes", "as Redis: a replica evicts nothing while set (the master's deletions arrive in the stream)"),
        &["slave-ignore-maxmemory"],
    ),
    REPLICA_ANNOUNCED: Flag = row("replica-announced", YES_NO, "yes", "as Redis: shown in INFO (replica_announced) for Sentinel"),
    REPLICA_ANNOUNCE_IP: Text = aka(
        row("replica-announce-ip", Kind::Str, "", "as Redis: the address a replica gives its master (REPLCONF ip-address)"),
        &["slave-announce-ip"],
    ),
    REPLICA_ANNOUNCE_PORT: Int = aka(
        row("replica-announce-port", PORT, "0", "as Redis: the port a replica gives its master (REPLCONF listening-port)"),
        &["slave-announce-port"],
    ),
    REPLICA_IGNORE_DISK_WRITE_ERRORS: Flag = row("replica-ignore-disk-write-errors", YES_NO, "no", "accepted, no effect: a replica refuses no write of its master's stream"),
    BIND_SOURCE_ADDR: Text = row("bind-source-addr", Kind::Str, "", "as Redis: the local address the replication link connects from"),
    // Cluster (crate::cluster reads these).
    CLUSTER_ENABLED: Flag = fixed_row(
        "cluster-enabled",
        YES_NO,
        "no",
        "Redis Cluster mode: the cluster bus on port+10000, hash slots, MOVED/ASK redirections",
    ),
    CLUSTER_CONFIG_FILE: Text = fixed_row("cluster-config-file", Kind::Str, "nodes.conf", "the cluster's node table (Redis's nodes.conf format), written by the node itself"),
    CLUSTER_NODE_TIMEOUT: Int = row("cluster-node-timeout", UINT, "15000", "ms without an answer before a node is flagged as possibly failing (PFAIL)"),
    CLUSTER_PORT: Int = fixed_row("cluster-port", PORT, "0", "the cluster bus port (0: port + 10000)"),
    CLUSTER_REQUIRE_FULL_COVERAGE: Flag = row("cluster-require-full-coverage", YES_NO, "yes", "the cluster is down while any slot is unassigned or served by a failed node"),
    CLUSTER_REPLICA_NO_FAILOVER: Flag = aka(
        row("cluster-replica-no-failover", YES_NO, "no", "a replica does not start an election when its master fails"),
        &["cluster-slave-no-failover"],
    ),
    CLUSTER_REPLICA_VALIDITY_FACTOR: Int = aka(
        row("cluster-replica-validity-factor", UINT, "10", "a replica disconnected longer than node-timeout times this (plus the ping period) does not fail over; 0: always may"),
        &["cluster-slave-validity-factor"],
    ),
    CLUSTER_MIGRATION_BARRIER: Int = row("cluster-migration-barrier", UINT, "1", "a replica migrates to an orphaned master only if its own master keeps more than this many working replicas"),
    CLUSTER_ALLOW_REPLICA_MIGRATION: Flag = row("cluster-allow-replica-migration", YES_NO, "yes", "replicas migrate to orphaned masters, and a master emptied by a resharding becomes a replica of the node that took its last slots"),
    CLUSTER_ALLOW_READS_WHEN_DOWN: Flag = row("cluster-allow-reads-when-down", YES_NO, "no", "reads are served while the cluster is down"),
    CLUSTER_ALLOW_PUBSUBSHARD_WHEN_DOWN: Flag = row(
        "cluster-allow-pubsubshard-when-down",
        YES_NO,
        "yes",
        "sharded Pub/Sub is served while the cluster is down",
    ),
    CLUSTER_ANNOUNCE_IP: Text = row("cluster-announce-ip", Kind::Str, "", "the address this node gives the cluster (empty: the one its peers see)"),
    CLUSTER_ANNOUNCE_HOSTNAME: Text = row("cluster-announce-hostname", Kind::Str, "", "the hostname this node gives the cluster (the bus's hostname extension)")
        .checked(announced_hostname),
    CLUSTER_ANNOUNCE_PORT: Int = row("cluster-announce-port", PORT, "0", "the client port this node gives the cluster (0: port)"),
    CLUSTER_ANNOUNCE_BUS_PORT: Int = row("cluster-announce-bus-port", PORT, "0", "the bus port this node gives the cluster (0: the bus port it listens on)"),
    CLUSTER_ANNOUNCE_TLS_PORT: Int = row("cluster-announce-tls-port", PORT, "0", "the TLS client port this node announces to the cluster with tls-cluster yes (0 = tls-port); the plaintext port is then announced as cluster-announce-port (0 = none)"),
    CLUSTER_PREFERRED_ENDPOINT_TYPE: Text = row(
        "cluster-preferred-endpoint-type",
        Kind::Enum(&["ip", "hostname", "unknown-endpoint"]),
        "ip",
        "what MOVED, ASK, CLUSTER SLOTS and SHARDS name a node by",
    ),
    CLUSTER_LINK_SENDBUF_LIMIT: Int = row("cluster-link-sendbuf-limit", MEMORY, "0", "a bus link whose unsent messages pass this many bytes is closed (0: no limit)"),
    // TLS (crate::tls builds OpenSSL contexts from these; crate::listeners applies a change).
    TLS_PORT: Int = row("tls-port", PORT, "0", "the TLS port (0 = none); serves beside `port`"),
    TLS_CERT_FILE: Text = row("tls-cert-file", Kind::Str, "", "the server's certificate chain (PEM); also the client certificate when tls-client-cert-file is not set"),
    TLS_KEY_FILE: Text = row("tls-key-file", Kind::Str, "", "the private key of tls-cert-file (PEM)"),
    TLS_KEY_FILE_PASS: Text = row("tls-key-file-pass", Kind::Str, "", "the passphrase of an encrypted tls-key-file"),
    TLS_CLIENT_CERT_FILE: Text = row("tls-client-cert-file", Kind::Str, "", "the certificate Podium presents when it connects (replication, MIGRATE)"),
    TLS_CLIENT_KEY_FILE: Text = row("tls-client-key-file", Kind::Str, "", "the private key of tls-client-cert-file"),
    TLS_CLIENT_KEY_FILE_PASS: Text = row("tls-client-key-file-pass", Kind::Str, "", "the passphrase of an encrypted tls-client-key-file"),
    TLS_DH_PARAMS_FILE: Text = row("tls-dh-params-file", Kind::Str, "", "DH parameters (PEM) for DHE cipher suites; empty: OpenSSL's built-in groups"),
    TLS_CA_CERT_FILE: Text = row("tls-ca-cert-file", Kind::Str, "", "the CA bundle peers' certificates must chain to"),
    TLS_CA_CERT_DIR: Text = row("tls-ca-cert-dir", Kind::Str, "", "a directory of CA certificates (OpenSSL's hashed layout)"),
    TLS_PROTOCOLS: Text = row("tls-protocols", Kind::Str, "", "the TLS versions allowed: TLSv1 TLSv1.1 TLSv1.2 TLSv1.3 (empty: TLSv1.2 and TLSv1.3)"),
    TLS_CIPHERS: Text = row("tls-ciphers", Kind::Str, "", "OpenSSL cipher list for TLS 1.2 and below"),
    TLS_CIPHERSUITES: Text = row("tls-ciphersuites", Kind::Str, "", "OpenSSL cipher suites for TLS 1.3"),
    TLS_AUTH_CLIENTS: Text = row(
        "tls-auth-clients",
        Kind::Enum(&["no", "yes", "optional"]),
        "yes",
        "whether a TLS client must present a certificate signed by the CA (optional: verified if given)",
    ),
    TLS_REPLICATION: Flag = row("tls-replication", YES_NO, "no", "a replica connects to its master over TLS"),
    TLS_CLUSTER: Flag = row("tls-cluster", YES_NO, "no", "the cluster bus and MIGRATE speak TLS: the bus port is tls-port + 10000 and the TLS port is the one announced (plain clients are sent to the plaintext port)"),
    TLS_PREFER_SERVER_CIPHERS: Flag = row("tls-prefer-server-ciphers", YES_NO, "no", "choose the cipher by the server's order rather than the client's"),
    TLS_SESSION_CACHING: Flag = row("tls-session-caching", YES_NO, "yes", "cache TLS sessions so clients can resume them"),
    TLS_SESSION_CACHE_SIZE: Int = row("tls-session-cache-size", UINT, "20480", "how many TLS sessions the cache holds"),
    TLS_SESSION_CACHE_TIMEOUT: Int = row("tls-session-cache-timeout", UINT, "300", "seconds a cached TLS session may be resumed"),
}

/// Why `value` (already normalised) of directive `prm` is refused, if it is: a directive
/// whose every value but the default needs a feature Podium lacks ([`Param::unsupported`]).
pub fn refusal(prm: &Param, value: &str) -> Option<String> {
    let reason = prm.unsupported?;
    if value == prm.default {
        return None;
    }
    Some(reason.to_string())
}

/// `cluster-announce-hostname`: shorter than 256 bytes, of letters, digits, '-' and '.', as
/// Redis checks it.
fn announced_hostname(value: &str) -> Result<String, String> {
    if value.len() >= 256 {
        return Err("Hostnames must be less than 256 characters".into());
    }
    if !value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
    {
        return Err("Hostnames may only contain alphanumeric characters, hyphens or dots".into());
    }
    Ok(value.to_string())
}

/// `replicaof <host> <port>` or `replicaof no one`, as Redis checks it (empty: none).
fn replicaof(value: &str) -> Result<String, String> {
    if !value.trim().is_empty() {
        let w: Vec<&str> = value.split_whitespace().collect();
        if w.len() != 2 {
            return Err("wrong number of arguments".into());
        }
        let no_one = w[0].eq_ignore_ascii_case("no") && w[1].eq_ignore_ascii_case("one");
        if !no_one && !w[1].parse::<i64>().is_ok_and(|p| (0..=65535).contains(&p)) {
            return Err("Invalid master port".into());
        }
    }
    Ok(value.to_string())
}

/// The master a `replicaof` value names (host, port); None for "" and `no one`.
pub fn replicaof_target(value: &str) -> Option<(&str, u16)> {
    let mut w = value.split_whitespace();
    match (w.next(), w.next().map(|p| p.parse::<u16>())) {
        (Some(host), Some(Ok(port))) => Some((host, port)),
        _ => None,
    }
}

/// `maxmemory-clients`: a memory amount, shown in bytes, or a percentage of `maxmemory`.
fn maxmemory_clients(value: &str) -> Result<String, String> {
    Ok(match memory_or_percent(value)? {
        Some(percent) => format!("{percent}%"),
        None => crate::config::parse_memory(value).map_or(value.to_string(), |b| b.to_string()),
    })
}

/// `shutdown-on-sigint` / `shutdown-on-sigterm`: the flags in SHUTDOWN's order.
fn shutdown_directive(value: &str) -> Result<String, String> {
    shutdown_flags(value).map(|flags| flags.to_string())
}

/// `oom-score-adj-values`: see [`oom_score_adj_values`]; kept as given.
fn oom_score_adj_directive(value: &str) -> Result<String, String> {
    oom_score_adj_values(value).map(|_| value.to_string())
}

/// The percentiles INFO latencystats reports: numbers from 0 to 100, as Redis requires, each
/// shown as C's `%f` with trailing zeros trimmed ("50.0" is "50", "12.3456789" is
/// "12.345679"), as Redis rewrites them.
fn latency_percentiles(value: &str) -> Result<String, String> {
    let mut shown = Vec::new();
    for w in value.split_whitespace() {
        match w.parse::<f64>() {
            Ok(p) if (0.0..=100.0).contains(&p) => {
                let text = format!("{p:.6}");
                shown.push(text.trim_end_matches('0').trim_end_matches('.').to_string());
            }
            Ok(_) => {
                return Err(
                    "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]"
                        .into(),
                )
            }
            Err(_) => return Err("Invalid latency-tracking-info-percentiles parameters".into()),
        }
    }
    Ok(shown.join(" "))
}

/// `oom-score-adj-values`: three integers (server, replica, background child), each within
/// -2000..2000, as Redis checks them.
pub fn oom_score_adj_values(value: &str) -> Result<[i32; 3], String> {
    let words: Vec<&str> = value.split_whitespace().collect();
    if words.len() != 3 {
        return Err("wrong number of arguments".into());
    }
    let mut out = [0i32; 3];
    for (slot, w) in out.iter_mut().zip(words) {
        match w.parse::<i64>() {
            Ok(v) if (-2000..=2000).contains(&v) => *slot = v as i32,
            _ => {
                return Err(
                    "Invalid oom-score-adj-values, elements must be between -2000 and 2000.".into(),
                )
            }
        }
    }
    Ok(out)
}

/// A memory amount or a percentage of `maxmemory` (`maxmemory-clients`), checked as Redis
/// checks it: Some(percent) for a percentage.
fn memory_or_percent(value: &str) -> Result<Option<i64>, String> {
    if let Some(number) = value.strip_suffix('%') {
        let percent: i64 = number
            .parse()
            .map_err(|_| "argument must be a memory or percent value".to_string())?;
        if percent > 100 {
            return Err("percentage argument must be less or equal to 100".into());
        }
        if percent < 0 {
            return Err("argument must be a memory or percent value".into());
        }
        return Ok(Some(percent));
    }
    match crate::config::parse_memory(value) {
        Some(n) if n >= 0 => Ok(None),
        _ => Err("argument must be a memory or percent value".into()),
    }
}

/// What a shutdown does: SHUTDOWN's options, and `shutdown-on-sigint` / `shutdown-on-sigterm`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShutdownFlags {
    /// Save even without save points.
    pub save: bool,
    /// Do not save.
    pub nosave: bool,
    /// Do not wait for replicas (SHUTDOWN never waits for them: nothing to skip).
    pub now: bool,
    /// Exit even if the save fails.
    pub force: bool,
}

impl std::fmt::Display for ShutdownFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = [
            (self.save, "save"),
            (self.nosave, "nosave"),
            (self.now, "now"),
            (self.force, "force"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, n)| *n)
        .collect();
        if names.is_empty() {
            f.write_str("default")
        } else {
            f.write_str(&names.join(" "))
        }
    }
}

/// `shutdown-on-sigint` / `shutdown-on-sigterm` words as flags, with Redis's errors.
pub fn shutdown_flags(value: &str) -> Result<ShutdownFlags, String> {
    let mut flags = ShutdownFlags::default();
    let words: Vec<&str> = value.split_whitespace().collect();
    if words.is_empty() {
        return Err(SHUTDOWN_FLAG_WORDS.into());
    }
    for w in words {
        match w.to_ascii_lowercase().as_str() {
            "default" => {}
            "save" => flags.save = true,
            "nosave" => flags.nosave = true,
            "now" => flags.now = true,
            "force" => flags.force = true,
            _ => return Err(SHUTDOWN_FLAG_WORDS.into()),
        }
    }
    if flags.save && flags.nosave {
        return Err("shutdown options SAVE and NOSAVE can't be used simultaneously".into());
    }
    Ok(flags)
}

const SHUTDOWN_FLAG_WORDS: &str =
    "argument(s) must be one of the following: default, save, nosave, now, force";

/// Why a directive of redis.conf that is not a configuration parameter is refused.
pub fn refused_keyword(name: &str) -> Option<&'static str> {
    Some(match name.to_ascii_lowercase().as_str() {
        "loadmodule" => "modules are not supported",
        "sentinel" => "Sentinel mode is not supported",
        _ => return None,
    })
}

/// One class of `client-output-buffer-limit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ObufLimit {
    pub hard: u64,
    pub soft: u64,
    pub soft_seconds: u64,
}

/// The three classes in Redis's order (normal, replica, pubsub) from the canonical value.
pub fn parse_obuf_limits(value: &str) -> [ObufLimit; 3] {
    let mut out = [
        ObufLimit::default(),
        ObufLimit {
            hard: 256 << 20,
            soft: 64 << 20,
            soft_seconds: 60,
        },
        ObufLimit {
            hard: 32 << 20,
            soft: 8 << 20,
            soft_seconds: 60,
        },
    ];
    let w: Vec<&str> = value.split_whitespace().collect();
    for c in w.chunks(4) {
        if let [class, h, s, secs] = c {
            if let (Some(i), Ok(h), Ok(s), Ok(secs)) =
                (class_index(class), h.parse(), s.parse(), secs.parse())
            {
                out[i] = ObufLimit {
                    hard: h,
                    soft: s,
                    soft_seconds: secs,
                };
            }
        }
    }
    out
}

fn class_index(class: &str) -> Option<usize> {
    match class.to_ascii_lowercase().as_str() {
        "normal" => Some(0),
        "replica" | "slave" => Some(1),
        "pubsub" => Some(2),
        _ => None,
    }
}

/// `client-output-buffer-limit <class> <hard> <soft> <seconds> [...]` applied to the current
/// value: the classes named change, the others stay. Err carries Redis's reason text.
pub fn merge_obuf_limits(current: &str, words: &[String]) -> Result<String, String> {
    if words.is_empty() || !words.len().is_multiple_of(4) {
        return Err("Wrong number of arguments in buffer limit configuration.".into());
    }
    let mut limits = parse_obuf_limits(current);
    for c in words.chunks(4) {
        let Some(i) = class_index(&c[0]) else {
            return Err("Invalid client class specified in buffer limit configuration.".into());
        };
        let bad = || "Error in hard, soft or soft_seconds setting in buffer limit configuration.";
        let hard = crate::config::parse_memory(&c[1]).ok_or_else(bad)?;
        let soft = crate::config::parse_memory(&c[2]).ok_or_else(bad)?;
        let secs: i64 = c[3].parse().map_err(|_| bad())?;
        if hard < 0 || soft < 0 || secs < 0 {
            return Err(bad().into());
        }
        limits[i] = ObufLimit {
            hard: hard as u64,
            soft: soft as u64,
            soft_seconds: secs as u64,
        };
    }
    Ok(format_obuf_limits(&limits))
}

fn format_obuf_limits(l: &[ObufLimit; 3]) -> String {
    let names = ["normal", "slave", "pubsub"];
    names
        .iter()
        .zip(l.iter())
        .map(|(n, c)| format!("{n} {} {} {}", c.hard, c.soft, c.soft_seconds))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn obuf_classes_merge_one_line_at_a_time() {
        let d = "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60";
        let w = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        let v = merge_obuf_limits(d, &w("normal 1mb 512kb 10")).unwrap();
        assert_eq!(
            v,
            "normal 1048576 524288 10 slave 268435456 67108864 60 pubsub 33554432 8388608 60"
        );
        let v = merge_obuf_limits(&v, &w("replica 1 2 3 pubsub 4 5 6")).unwrap();
        assert_eq!(v, "normal 1048576 524288 10 slave 1 2 3 pubsub 4 5 6");
        assert!(merge_obuf_limits(d, &w("normal 1 2"))
            .unwrap_err()
            .contains("Wrong number"));
        assert!(merge_obuf_limits(d, &w("bogus 1 2 3"))
            .unwrap_err()
            .contains("Invalid client class"));
        assert!(merge_obuf_limits(d, &w("normal x 2 3"))
            .unwrap_err()
            .contains("hard, soft"));
        assert_eq!(parse_obuf_limits(&v)[0].hard, 1048576);
    }

    #[test]
    fn extra_directives_do_not_repeat_core_ones() {
        for e in EXTRA {
            assert!(
                !crate::config::PARAMS.iter().any(|p| p.name == e.name),
                "{} is in both tables",
                e.name
            );
        }
    }

    #[test]
    fn value_rules_read_back_as_redis_prints_them() {
        let check = |id: usize, v: &str| (crate::config::params()[id].check.expect("a rule"))(v);
        assert_eq!(
            check(
                dir::LATENCY_TRACKING_INFO_PERCENTILES.index(),
                "0.0 50.0 99.9 100.0 12.3456789 1e1"
            )
            .unwrap(),
            "0 50 99.9 100 12.345679 10"
        );
        assert!(crate::config::params()[dir::DIR.index()].check.is_none());
        let sigint = dir::SHUTDOWN_ON_SIGINT.index();
        assert_eq!(
            check(sigint, "force now nosave").unwrap(),
            "nosave now force"
        );
        assert_eq!(
            check(dir::SHUTDOWN_ON_SIGTERM.index(), "default").unwrap(),
            "default"
        );
        assert!(check(sigint, "save nosave").is_err());
        assert!(check(sigint, "").is_err());
        assert!(check(sigint, "bla").is_err());
        let clients = dir::MAXMEMORY_CLIENTS.index();
        assert_eq!(check(clients, "1kb").unwrap(), "1024");
        assert_eq!(check(clients, "5%").unwrap(), "5%");
        assert!(check(clients, "101%").is_err());
        let replicaof = dir::REPLICAOF.index();
        assert_eq!(check(replicaof, "").unwrap(), "");
        assert_eq!(check(replicaof, "no one").unwrap(), "no one");
        assert_eq!(
            check(replicaof, "h 70000").unwrap_err(),
            "Invalid master port"
        );
    }

    #[test]
    fn refusals_name_the_missing_feature() {
        let prm = |id: usize| crate::config::params()[id];
        assert!(refusal(prm(dir::REPLICAOF.index()), "127.0.0.1 6379").is_none());
        assert!(refusal(prm(dir::BIND_SOURCE_ADDR.index()), "127.0.0.1").is_none());
        assert!(refusal(prm(dir::CLUSTER_ENABLED.index()), "no").is_none());
        assert!(refusal(prm(dir::CLUSTER_ENABLED.index()), "yes").is_none());
        assert!(refusal(prm(dir::CLUSTER_MIGRATION_BARRIER.index()), "2").is_none());
        assert!(refusal(prm(dir::CLUSTER_ANNOUNCE_TLS_PORT.index()), "6380").is_none());
        // TLS is built: every TLS directive takes its values (crate::tls checks them).
        for p in EXTRA.iter().filter(|p| p.name.starts_with("tls-")) {
            assert!(p.unsupported.is_none(), "{}", p.name);
        }
        assert!(refused_keyword("LOADMODULE").unwrap().contains("modules"));
        assert!(refused_keyword("port").is_none());
    }
}
