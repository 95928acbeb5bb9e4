//! The state every connection shares through an `Arc`: [`Server`] holds configuration, the
//! keyspace, statistics, the registry of connected and blocked clients, ACL users, Pub/Sub and
//! tracking tables, scripts, the AOF and the introspection logs; [`Stats`] the counters INFO
//! reports. What runs it (the listener, the cron, shutdown) is [`crate::server`], above.

pub(crate) mod aof;
pub mod introspect;
pub(crate) mod latency;
pub(crate) mod listeners;
pub(crate) mod pause;
pub(crate) mod scripts;
pub(crate) mod shutdown;
pub(crate) mod slowlog;
pub(crate) mod tracking;

use crate::blocking::Registry;
use crate::client::ClientInfo;
use crate::clock::unix_ms;
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

/// Counters INFO reports.
#[derive(Default)]
pub struct Stats {
    pub commands: AtomicU64,
    pub connections: AtomicU64,
    pub rejected_connections: AtomicU64,
    pub error_replies: AtomicU64,
    pub expired_keys: AtomicU64,
    pub expired_stale_perc: AtomicU64,
    pub expired_time_cap_reached: AtomicU64,
    pub keyspace_hits: AtomicU64,
    pub keyspace_misses: AtomicU64,
    pub dirty: AtomicU64,
    pub net_input_bytes: AtomicU64,
    pub net_output_bytes: AtomicU64,
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
    /// Lua scripts cached for EVALSHA, and the running script's state.
    pub scripts: scripts::Scripts,
    pub shutdown: Notify,
    pub shutting_down: AtomicBool,
    /// Unix seconds of the last successful save (LASTSAVE).
    pub lastsave: AtomicI64,
    /// Where the active-expiry reaper resumes: a (database, shard) position, db * shards + shard.
    pub expire_cursor: std::sync::atomic::AtomicUsize,
    /// SLOWLOG entries.
    pub slowlog: slowlog::SlowLog,
    /// LATENCY monitor events.
    pub latency: latency::Monitor,
    /// INFO errorstats: error replies by their first word.
    pub errorstats: crate::state::introspect::ErrorStats,
    /// INFO's instantaneous rates, sampled by the cron.
    pub instant: crate::state::introspect::InstantMetrics,
    /// CLIENT PAUSE state.
    pub(crate) pause: pause::Pause,
    /// The TCP accept loops (CONFIG SET port / bind replace them).
    pub(crate) listeners: listeners::Listeners,
    /// A shutdown a signal asked for (SHUTDOWN ABORT, DEBUG PAUSE-CRON).
    pub(crate) signal_shutdown: shutdown::SignalShutdown,
    /// A handle to this server's own Arc, for commands that start background work.
    self_ref: std::sync::OnceLock<std::sync::Weak<Server>>,
}

impl Server {
    pub fn new(config: Config) -> Server {
        let dbs = config.get_i64("databases").max(1) as usize;
        let shards = config.get_i64("shards-per-db").max(1) as usize;
        let run_id: String = (0..40)
            .map(|_| format!("{:x}", rand::random::<u8>() % 16))
            .collect();
        Server {
            keyspace: Keyspace::new(dbs, shards),
            port: AtomicI64::new(config.get_i64("port")),
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
            scripts: Default::default(),
            shutdown: Notify::new(),
            shutting_down: AtomicBool::new(false),
            lastsave: AtomicI64::new(unix_ms() / 1000),
            expire_cursor: std::sync::atomic::AtomicUsize::new(0),
            slowlog: Default::default(),
            latency: Default::default(),
            errorstats: Default::default(),
            instant: Default::default(),
            pause: Default::default(),
            listeners: Default::default(),
            signal_shutdown: Default::default(),
            self_ref: std::sync::OnceLock::new(),
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

    /// Log a change to the AOF (if enabled).
    pub fn propagate(&self, db: usize, argv: Vec<Bytes>) {
        // A script's redis.set_repl can keep its commands out of the AOF.
        if scripts::aof_suppressed() {
            return;
        }
        // A running script collects its commands and feeds them in one piece.
        if let Some(argv) = scripts::collect_for_script(db, argv) {
            self.aof.feed(db, argv);
        }
    }

    /// Ask the server to stop (SHUTDOWN, signals).
    pub fn request_shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        self.shutdown.notify_waiters();
        self.shutdown.notify_one();
    }
}
