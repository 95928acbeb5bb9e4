//! The server: shared state, the listener, the background cron and shutdown.
//!
//! [`Server`] is shared by every connection through an `Arc`: configuration, the keyspace,
//! statistics, the registry of connected and blocked clients, and the AOF. [`run`] builds the
//! tokio runtime, binds the configured addresses, accepts connections (one task each, see
//! [`crate::connection`]) and runs the cron (active expiry at `hz`) until SHUTDOWN or a signal.

use crate::blocking::Registry;
use crate::config::Config;
use crate::connection::ClientInfo;
use crate::keyspace::Keyspace;
use crate::persistence::Aof;
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
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
    pub keyspace: Keyspace,
    pub stats: Stats,
    pub blocking: Registry,
    pub clients: Mutex<BTreeMap<u64, Arc<ClientInfo>>>,
    next_client_id: AtomicU64,
    pub started: Instant,
    pub run_id: String,
    pub port: AtomicI64,
    pub aof: Aof,
    /// Lua scripts cached for EVALSHA, and the running script's state.
    pub scripts: crate::commands::script::Scripts,
    pub shutdown: Notify,
    pub shutting_down: AtomicBool,
    /// Unix seconds of the last successful save (LASTSAVE).
    pub lastsave: AtomicI64,
    /// Where the active-expiry reaper resumes: a (database, shard) position, db * shards + shard.
    pub expire_cursor: std::sync::atomic::AtomicUsize,
    /// A handle to this server's own Arc, for commands that start background work.
    self_ref: std::sync::OnceLock<std::sync::Weak<Server>>,
}

/// Current Unix time in milliseconds.
pub fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The monotonic instant the wall clock is derived from (see [`unix_ms_at`]).
fn clock_origin() -> Instant {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// Unix milliseconds at `clock_origin()`, as last measured by [`resync_wall_clock`].
static WALL_AT_ORIGIN_MS: AtomicI64 = AtomicI64::new(i64::MIN);

/// Measure the wall clock against the monotonic one again, so [`unix_ms_at`] follows a wall
/// clock that was stepped. Called by the cron on every tick.
pub fn resync_wall_clock() {
    let origin = clock_origin();
    let wall = unix_ms();
    let since = Instant::now().saturating_duration_since(origin).as_millis() as i64;
    WALL_AT_ORIGIN_MS.store(wall - since, Ordering::Relaxed);
}

/// Unix milliseconds at the monotonic instant `at`, without reading the wall clock: the
/// dispatcher reads one clock per command (for the command's duration) and derives the time
/// expiry is judged by from it. Reading `SystemTime` as well cost a third clock call per
/// command, ~3% of a pipelined GET. Between cron ticks the two clocks advance together; a
/// stepped wall clock is picked up at the next tick.
pub fn unix_ms_at(at: Instant) -> i64 {
    let base = WALL_AT_ORIGIN_MS.load(Ordering::Relaxed);
    if base == i64::MIN {
        resync_wall_clock();
        return unix_ms();
    }
    base + at.saturating_duration_since(clock_origin()).as_millis() as i64
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
            config,
            stats: Stats::default(),
            blocking: Registry::default(),
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
        if crate::scripting::aof_suppressed() {
            return;
        }
        self.aof.feed(db, argv);
    }

    /// Ask the server to stop (SHUTDOWN, signals).
    pub fn request_shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        self.shutdown.notify_waiters();
        self.shutdown.notify_one();
    }

    /// One cron tick: active expiry over every shard, within a time budget. Returns true when
    /// the tick ran out of time while keys were still going stale faster than accepted; the
    /// caller then runs the next tick after a short pause instead of a full `1/hz` period.
    pub fn cron(&self, rng: &mut impl rand::Rng) -> bool {
        let effort = self
            .config
            .hot
            .active_expire_effort
            .load(Ordering::Relaxed)
            .clamp(1, 10) as usize;
        let hz = self.config.hot.hz.load(Ordering::Relaxed).clamp(1, 500) as u64;
        // Redis: 20 keys per loop at effort 1, +25% per effort step; 25% of a tick's CPU at most;
        // keep sampling a shard while more than 10% (minus one per effort step) were stale.
        let sample = 20 + 5 * (effort - 1);
        let acceptable_stale = 10 - (effort - 1);
        let budget = Duration::from_micros(1_000_000 / hz * (25 + 2 * (effort as u64 - 1)) / 100);
        let start = Instant::now();
        let per = self.keyspace.shards_per_db();
        let total = self.keyspace.num_dbs() * per;
        let first = self.expire_cursor.load(Ordering::Relaxed) % total;
        let mut sampled_total = 0usize;
        let mut expired_total = 0usize;
        let mut expired = Vec::new();
        let mut graveyard = Vec::new();
        let mut capped = false;
        'shards: for step in 0..total {
            let idx = (first + step) % total;
            let dbi = idx / per;
            let shard = &self.keyspace.dbs[dbi].shards[idx % per];
            loop {
                let now = unix_ms();
                let mut sh = shard.lock();
                if sh.volatile_len() == 0 {
                    break;
                }
                let sampled = sh.active_expire(now, sample, rng, &mut expired, &mut graveyard);
                let n = expired.len();
                if n > 0 {
                    sh.maybe_shrink();
                }
                // Log the DELs while the shard is still locked: a write to the same key right
                // after the unlock must come after its DEL in the AOF.
                for k in expired.drain(..) {
                    self.propagate(dbi, vec![Bytes::from_static(b"DEL"), k]);
                }
                drop(sh);
                // Free the values outside the lock: big sorted sets take a while to drop.
                graveyard.clear();
                sampled_total += sampled;
                expired_total += n;
                self.stats
                    .expired_keys
                    .fetch_add(n as u64, Ordering::Relaxed);
                if start.elapsed() > budget {
                    self.stats
                        .expired_time_cap_reached
                        .fetch_add(1, Ordering::Relaxed);
                    // Resume here next time so every shard gets its turn.
                    self.expire_cursor.store(idx, Ordering::Relaxed);
                    capped = true;
                    break 'shards;
                }
                if sampled == 0 || n * 100 <= sampled * acceptable_stale {
                    break;
                }
            }
        }
        if let Some(perc) = (expired_total * 100).checked_div(sampled_total) {
            let perc = perc as u64;
            let old = self.stats.expired_stale_perc.load(Ordering::Relaxed);
            self.stats
                .expired_stale_perc
                .store((old * 95 + perc * 5) / 100, Ordering::Relaxed);
        }
        capped
    }
}

/// Build the runtime and serve until shutdown.
pub fn run(config: Config) -> Result<(), String> {
    let threads = match config.get_i64("threads") {
        0 => std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        n => n as usize,
    };
    // On one core a single-threaded scheduler avoids the work-stealing machinery entirely.
    let mut builder = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    let server = Server::new(config).into_arc();
    let aof = server.aof.clone();
    builder
        .enable_all()
        .on_thread_park(move || aof.executor_idle());
    let rt = builder
        .build()
        .map_err(|e| format!("can't start runtime: {e}"))?;
    let result = rt.block_on(serve(server));
    rt.shutdown_timeout(Duration::from_secs(2));
    result
}

fn init_logging(srv: &Server) {
    let level = match srv.config.get("loglevel").as_deref() {
        Some("debug") => "debug",
        Some("verbose") => "info",
        Some("warning") => "warn",
        Some("nothing") => "error",
        _ => "info",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    // `logfile` as in redis.conf: empty means standard output.
    let logfile = srv.config.get("logfile").unwrap_or_default();
    if !logfile.is_empty() {
        match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&logfile)
        {
            Ok(f) => {
                let _ = builder
                    .with_ansi(false)
                    .with_writer(std::sync::Mutex::new(f))
                    .try_init();
                return;
            }
            Err(e) => eprintln!("podium: can't open logfile {logfile}: {e}; logging to stdout"),
        }
    }
    let _ = builder.try_init();
}

/// Listen and serve on an existing runtime until shutdown.
pub async fn serve(srv: Arc<Server>) -> Result<(), String> {
    init_logging(&srv);
    let port = srv.config.get_i64("port") as u16;
    let bind = srv.config.get("bind").unwrap_or_default();
    let mut listeners = Vec::new();
    for addr in bind.split_whitespace() {
        let optional = addr.starts_with('-');
        let host = addr.trim_start_matches('-');
        let sockaddr = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        match TcpListener::bind(&sockaddr).await {
            Ok(l) => listeners.push(l),
            Err(e) if optional => tracing::debug!("skipping optional bind {sockaddr}: {e}"),
            Err(e) => return Err(format!("can't bind {sockaddr}: {e}")),
        }
    }
    if listeners.is_empty() {
        return Err("no address to listen on".into());
    }
    tokio::spawn(crate::persistence::relay_durable(srv.aof.clone()));
    // Clients are accepted while the AOF loads, as Redis does: they get -LOADING for anything
    // but the commands flagged `loading` (INFO shows loading:1), instead of a refused connection.
    if srv.config.get_bool("appendonly") {
        srv.aof.inner.loading.store(true, Ordering::SeqCst);
    }
    for l in listeners {
        let srv = srv.clone();
        tokio::spawn(async move {
            loop {
                match l.accept().await {
                    Ok((sock, peer)) => {
                        let srv = srv.clone();
                        tokio::spawn(crate::connection::handle(srv, sock, peer));
                    }
                    Err(e) => {
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        });
    }
    let loader = srv.clone();
    let loaded = tokio::task::spawn_blocking(move || crate::persistence::startup(&loader)).await;
    match loaded {
        Ok(r) => r?,
        Err(e) => return Err(format!("loading the AOF failed: {e}")),
    }
    if let Some(pidfile) = srv.config.get("pidfile").filter(|p| !p.is_empty()) {
        let _ = std::fs::write(pidfile, format!("{}\n", std::process::id()));
    }
    tracing::info!(
        "Podium {} ready to accept connections on port {port}",
        env!("CARGO_PKG_VERSION")
    );
    let cron_srv = srv.clone();
    tokio::spawn(async move {
        let mut rng = rand::rngs::SmallRng::from_entropy();
        let mut backlog = false;
        loop {
            let hz = cron_srv.config.hot.hz.load(Ordering::Relaxed).clamp(1, 500) as u64;
            // With a backlog of stale keys, pause only as long as a tick may run (at most half of
            // one thread goes to the reaper); otherwise tick at `hz`.
            let pause = if backlog {
                Duration::from_micros(1_000_000 / hz / 4)
            } else {
                Duration::from_millis(1000 / hz)
            };
            tokio::time::sleep(pause).await;
            resync_wall_clock();
            let s = cron_srv.clone();
            // The reaper takes shard locks: run it off the async workers.
            let r = tokio::task::spawn_blocking(move || {
                let capped = s.cron(&mut rng);
                (rng, capped)
            })
            .await;
            match r {
                Ok((back, capped)) => {
                    rng = back;
                    backlog = capped;
                }
                Err(_) => {
                    rng = rand::rngs::SmallRng::from_entropy();
                    backlog = false;
                }
            }
        }
    });
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    tokio::select! {
        _ = srv.shutdown.notified() => {}
        _ = tokio::signal::ctrl_c() => tracing::info!("Received SIGINT scheduling shutdown..."),
        _ = sigterm.recv() => tracing::info!("Received SIGTERM scheduling shutdown..."),
    }
    srv.shutting_down.store(true, Ordering::SeqCst);
    crate::persistence::shutdown(&srv);
    tracing::info!("Podium is now ready to exit, bye bye...");
    Ok(())
}

use rand::SeedableRng;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_wall_clock_tracks_the_real_one() {
        // Before any resync it falls back to the wall clock; afterwards it is derived from the
        // monotonic reading and must agree with SystemTime to within rounding.
        for _ in 0..3 {
            let before = unix_ms();
            let derived = unix_ms_at(Instant::now());
            let after = unix_ms();
            assert!(
                derived >= before - 2 && derived <= after + 2,
                "{before} <= {derived} <= {after}"
            );
            std::thread::sleep(Duration::from_millis(15));
        }
        resync_wall_clock();
        let t0 = Instant::now();
        assert_eq!(
            unix_ms_at(t0 + Duration::from_millis(500)) - unix_ms_at(t0),
            500,
            "a later instant maps to a later time, 1:1"
        );
    }
}
