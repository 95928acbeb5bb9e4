//! The state every connection shares through an `Arc`: [`Server`] holds configuration, the
//! keyspace, statistics, the registry of connected and blocked clients, ACL users, Pub/Sub and
//! tracking tables, scripts, the AOF and the introspection logs; [`Stats`] the counters INFO
//! reports. What runs it (the listener, the cron, shutdown) is [`crate::server`], above.

pub(crate) mod aof;
pub mod defrag;
pub(crate) mod failover;
pub mod introspect;
pub(crate) mod latency;
pub(crate) mod listeners;
pub(crate) mod pause;
pub(crate) mod repl;
pub(crate) mod replica_link;
pub(crate) mod scripts;
pub(crate) mod shutdown;
pub(crate) mod slowlog;
pub(crate) mod tracking;

use crate::blocking::Registry;
use crate::client::ClientInfo;
use crate::clock::unix_ms;
use crate::config::dir;
use crate::config::Config;
use crate::keyspace::Keyspace;
use aof::Aof;
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Notify;

/// Counters INFO reports (those added to on every request are per-thread
/// [`crate::util::counter::Counter`]s).
#[derive(Default)]
pub struct Stats {
    pub commands: crate::util::counter::Counter,
    pub connections: AtomicU64,
    pub rejected_connections: AtomicU64,
    pub error_replies: AtomicU64,
    /// Errors this server answered its master or the AOF loader (INFO
    /// unexpected_error_replies; see `commands::report_propagation_error`).
    pub unexpected_error_replies: AtomicU64,
    pub expired_keys: AtomicU64,
    pub expired_stale_perc: AtomicU64,
    pub expired_time_cap_reached: AtomicU64,
    pub keyspace_hits: crate::util::counter::Counter,
    pub keyspace_misses: crate::util::counter::Counter,
    pub dirty: crate::util::counter::Counter,
    pub net_input_bytes: crate::util::counter::Counter,
    pub net_output_bytes: crate::util::counter::Counter,
    /// Reads from and writes to sockets of clients, replicas and the master link (INFO
    /// total_reads_processed / total_writes_processed, as Redis counts its read and write
    /// handler calls).
    pub reads_processed: crate::util::counter::Counter,
    pub writes_processed: crate::util::counter::Counter,
}

pub struct Server {
    pub config: Config,
    /// ACL users and the ACL LOG.
    pub acl: crate::acl::Acl,
    pub keyspace: Keyspace,
    pub stats: Stats,
    pub blocking: Registry,
    /// Pub/Sub channels, patterns and shard channels with their subscribers.
    pub(crate) pubsub: crate::pubsub::PubSub,
    /// Client-side caching: tracked keys, BCAST prefixes, tracking clients.
    pub(crate) tracking: tracking::Tracking,
    pub clients: Mutex<BTreeMap<u64, Arc<ClientInfo>>>,
    next_client_id: AtomicU64,
    pub started: Instant,
    pub run_id: String,
    pub port: AtomicI64,
    pub aof: Aof,
    /// The replication stream, backlog and replicas (this server as a master).
    pub(crate) repl: repl::Replication,
    /// The link to our master when this server is a replica.
    pub master_link: replica_link::MasterLink,
    /// Lua scripts cached for EVALSHA, and the running script's state.
    pub scripts: scripts::Scripts,
    pub shutdown: Notify,
    pub shutting_down: AtomicBool,
    /// nodes.conf made this node a replica at startup: its files load with their expired
    /// keys kept, as a replica's do (the master's DELs will come), where a master drops them.
    pub cluster_replica_at_start: AtomicBool,
    /// Unix seconds of the last successful save (LASTSAVE).
    pub lastsave: AtomicI64,
    /// Where the active-expiry reaper resumes: a (database, shard) position, db * shards + shard.
    pub expire_cursor: std::sync::atomic::AtomicUsize,
    /// SLOWLOG entries.
    pub slowlog: slowlog::SlowLog,
    /// LATENCY monitor events.
    pub latency: latency::Monitor,
    /// Active defragmentation: its walk and counters (`activedefrag`).
    pub defrag: defrag::Defrag,
    /// INFO errorstats: error replies by their first word.
    pub errorstats: crate::state::introspect::ErrorStats,
    /// INFO's instantaneous rates, sampled by the cron.
    pub instant: crate::state::introspect::InstantMetrics,
    /// CLIENT PAUSE state.
    pub(crate) pause: pause::Pause,
    /// A coordinated failover (FAILOVER) and its state.
    pub(crate) failover: failover::Failover,
    /// The TCP accept loops (CONFIG SET port / bind replace them).
    pub(crate) listeners: listeners::Listeners,
    /// The TLS contexts new TLS connections use (`tls-*`; crate::listeners configures them).
    pub(crate) tls: crate::tls::TlsState,
    /// A shutdown a signal asked for (SHUTDOWN ABORT, DEBUG PAUSE-CRON).
    pub(crate) signal_shutdown: shutdown::SignalShutdown,
    /// A shutdown waiting for replicas (`shutdown-timeout`).
    pub(crate) shutdown_wait: shutdown::ReplicaWait,
    /// A handle to this server's own Arc, for commands that start background work.
    self_ref: std::sync::OnceLock<std::sync::Weak<Server>>,
    /// Cluster mode's state (`crate::cluster::Cluster`), set at startup when
    /// `cluster-enabled` is yes. Typed as Any because the cluster module sits above this one.
    pub(crate) cluster: std::sync::OnceLock<Arc<dyn std::any::Any + Send + Sync>>,
}

impl Server {
    pub fn new(config: Config) -> Server {
        let dbs = config.int(dir::DATABASES).max(1) as usize;
        let shards = config.int(dir::SHARDS_PER_DB).max(1) as usize;
        let run_id: String = (0..40)
            .map(|_| format!("{:x}", rand::random::<u8>() % 16))
            .collect();
        Server {
            // In cluster mode shards follow hash slots and index their keys by slot.
            keyspace: Keyspace::with_slots(dbs, shards, config.flag(dir::CLUSTER_ENABLED)),
            port: AtomicI64::new(config.int(dir::PORT)),
            acl: crate::acl::Acl::new(&config),
            config,
            stats: Stats::default(),
            blocking: Registry::default(),
            pubsub: Default::default(),
            tracking: Default::default(),
            clients: Mutex::new(BTreeMap::new()),
            next_client_id: AtomicU64::new(1),
            started: Instant::now(),
            run_id,
            aof: Aof::default(),
            repl: Default::default(),
            master_link: Default::default(),
            scripts: Default::default(),
            shutdown: Notify::new(),
            shutting_down: AtomicBool::new(false),
            cluster_replica_at_start: AtomicBool::new(false),
            lastsave: AtomicI64::new(unix_ms() / 1000),
            expire_cursor: std::sync::atomic::AtomicUsize::new(0),
            slowlog: Default::default(),
            latency: Default::default(),
            defrag: Default::default(),
            errorstats: Default::default(),
            instant: Default::default(),
            pause: Default::default(),
            failover: Default::default(),
            listeners: Default::default(),
            tls: Default::default(),
            signal_shutdown: Default::default(),
            shutdown_wait: Default::default(),
            self_ref: std::sync::OnceLock::new(),
            cluster: std::sync::OnceLock::new(),
        }
    }

    /// Wrap in an Arc that [`Server::arc`] can hand out.
    pub fn into_arc(self) -> Arc<Server> {
        let a = Arc::new(self);
        let _ = a.self_ref.set(Arc::downgrade(&a));
        a
    }

    /// This server's Arc (for background tasks started by commands).
    pub fn arc(&self) -> Option<Arc<Server>> {
        self.self_ref.get().and_then(|w| w.upgrade())
    }

    pub fn next_client_id(&self) -> u64 {
        self.next_client_id.fetch_add(1, Ordering::Relaxed)
    }

    /// True while writes are logged anywhere (the AOF or the replication stream): callers
    /// skip building log entries otherwise.
    #[inline]
    pub fn logging(&self) -> bool {
        self.aof.is_enabled() || self.repl.is_active()
    }

    /// The replica class of `client-output-buffer-limit`.
    pub(crate) fn replica_obuf_limit(&self) -> crate::config::ObufLimit {
        self.config.hot.obuf.classes[crate::config::OBUF_REPLICA].get()
    }

    /// Log a change to the AOF and the replication stream (those enabled).
    pub fn propagate(&self, db: usize, argv: Vec<Bytes>) {
        // A script's redis.set_repl can keep its commands out of either.
        let targets = repl::TO_ALL & !scripts::suppressed_targets();
        let to_aof = targets & repl::TO_AOF != 0 && self.aof.is_enabled();
        let to_replicas = targets & repl::TO_REPLICAS != 0 && self.repl.is_active();
        if !to_aof && !to_replicas {
            return;
        }
        // A running script collects its commands and feeds them in one piece.
        if let Some(argv) = scripts::collect_for_script(db, argv, targets) {
            if to_replicas {
                self.repl.feed(Some(db), &argv, self.replica_obuf_limit());
            }
            if to_aof {
                self.aof.feed(db, argv);
            }
        }
    }

    /// Log what a script collected (see [`Server::propagate`]) as one unbroken run in each
    /// target.
    pub(crate) fn propagate_script(&self, mut cmds: Vec<scripts::LoggedCommand>, wrap: bool) {
        if cmds.is_empty() {
            return;
        }
        if wrap && cmds.len() > 1 {
            // MULTI takes the first command's database (its SELECT goes first), EXEC the
            // last one's, so that no SELECT comes between the last command and EXEC.
            let first = cmds[0].0;
            let last = cmds[cmds.len() - 1].0;
            cmds.insert(0, (first, vec![Bytes::from_static(b"MULTI")], repl::TO_ALL));
            cmds.push((last, vec![Bytes::from_static(b"EXEC")], repl::TO_ALL));
        }
        if self.repl.is_active() {
            let for_replicas: Vec<(usize, &[Bytes])> = cmds
                .iter()
                .filter(|c| c.2 & repl::TO_REPLICAS != 0)
                .map(|c| (c.0, &c.1[..]))
                .collect();
            self.repl.feed_all(&for_replicas, self.replica_obuf_limit());
        }
        if self.aof.is_enabled() {
            self.aof.feed_all(
                cmds.into_iter()
                    .filter(|c| c.2 & repl::TO_AOF != 0)
                    .map(|c| (c.0, c.1))
                    .collect(),
            );
        }
    }

    /// Ask the server to stop (SHUTDOWN, signals).
    pub fn request_shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        self.shutdown.notify_waiters();
        self.shutdown.notify_one();
    }
}
