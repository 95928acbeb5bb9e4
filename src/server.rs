//! The server: the listener, the background cron and shutdown.
//!
//! [`Server`] (in [`crate::state`]) is shared by every connection through an `Arc`. [`run`] builds the
//! tokio runtime, binds the configured addresses, accepts connections (one task each, see
//! [`crate::connection`]) and runs the cron (active expiry at `hz`) until SHUTDOWN or a signal.

use crate::clock::{resync_wall_clock, unix_ms};
use crate::config::dir;
use crate::config::Config;
use bytes::Bytes;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The server's shared state, named here for code outside the crate (the fuzz targets).
pub use crate::state::Server;

impl Server {
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
        if self.repl.is_following()
            && crate::commands::debug::active_expire_enabled()
            && !self.pause.is_active()
        {
            self.expire_replica_keys();
        }
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
                if sh.volatile_len() == 0
                    || !crate::commands::debug::active_expire_enabled()
                    || self.pause.is_active()
                    || self.repl.is_following()
                {
                    break;
                }
                let mut ttls = crate::keyspace::TtlSample::default();
                let sampled =
                    sh.active_expire(now, sample, rng, &mut expired, &mut graveyard, &mut ttls);
                self.keyspace.dbs[dbi].record_ttls(ttls);
                let n = expired.len();
                if n > 0 {
                    sh.maybe_shrink();
                }
                // Log the DELs while the shard is still locked: a write to the same key right
                // after the unlock must come after its DEL in the AOF.
                for k in expired.drain(..) {
                    crate::notify::keyspace_event(self, crate::notify::EXPIRED, "expired", &k, dbi);
                    self.tracking
                        .invalidate(self, std::slice::from_ref(&k), 0, None, true);
                    self.propagate(dbi, vec![Bytes::from_static(b"DEL"), k]);
                }
                drop(sh);
                // Free the values outside the lock: big sorted sets take a while to drop.
                for gone in graveyard.drain(..) {
                    crate::keyspace::lazyfree::free_if(
                        &crate::keyspace::lazyfree::EXPIRE,
                        gone.value,
                    );
                }
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
        self.latency
            .add_if_needed(self, "expire-cycle", start.elapsed().as_millis() as u64);
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

impl Server {
    /// On a replica: delete the keys its own clients gave a TTL once they expire (Redis's
    /// expireSlaveKeys), logged as DELs for the AOF and sub-replicas like any expiry. Keys
    /// that are gone or lost their TTL are forgotten.
    fn expire_replica_keys(&self) {
        let keys: Vec<(usize, Bytes)> = self.keyspace.replica_ttl_keys.lock().drain().collect();
        if keys.is_empty() {
            return;
        }
        let now = unix_ms();
        let mut keep = Vec::new();
        for (db, key) in keys {
            let Some(d) = self.keyspace.dbs.get(db) else {
                continue;
            };
            let mut sh = d.shards[self.keyspace.shard_of(&key)].lock();
            let has_ttl = sh.raw_get(&key).map(|e| e.has_expire());
            match has_ttl {
                Some(true) if sh.is_expired(&key, now) => {
                    sh.remove(&key);
                    sh.expired_total += 1;
                    sh.touch_watched(&key);
                    crate::notify::keyspace_event(
                        self,
                        crate::notify::EXPIRED,
                        "expired",
                        &key,
                        db,
                    );
                    self.tracking
                        .invalidate(self, std::slice::from_ref(&key), 0, None, true);
                    self.propagate(db, vec![Bytes::from_static(b"DEL"), key]);
                    self.stats.expired_keys.fetch_add(1, Ordering::Relaxed);
                }
                Some(true) => keep.push((db, key)),
                _ => {}
            }
        }
        self.keyspace.replica_ttl_keys.lock().extend(keep);
    }
}

/// Build the runtime and serve until shutdown.
pub fn run(config: Config) -> Result<(), String> {
    // Fork before the runtime (or anything else) starts a thread; the log and the pidfile
    // name the process that serves.
    let daemonized = config.flag(dir::DAEMONIZE);
    if daemonized {
        crate::process::daemonize()?;
    }
    init_logging(&config);
    let threads = match config.int(dir::THREADS) {
        0 => std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        n => n as usize,
    };
    // Several worker threads keep requests of different connections in arrival order.
    crate::arrival::enable(threads > 1);
    // The multi-threaded scheduler even for one worker: a script or a long command that runs
    // past its first milliseconds hands the worker's role to another thread
    // (`block_in_place`), so other clients keep being served (-BUSY, SCRIPT KILL, SHUTDOWN
    // NOSAVE) as Redis serves them from inside a long script. The single-threaded scheduler
    // cannot hand off: a runaway script held the only thread and nothing could stop it, on a
    // process confined to one core (`taskset`, a container with one CPU) or with `threads 1`.
    // It was 2-5% cheaper per request at P=1 (measured 2026-11-26 with redis-benchmark
    // against the pinned server).
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(threads.max(1));
    builder.thread_stack_size(crate::util::WORKER_STACK);
    // Connections woken together are served in the order they were woken (their requests'
    // arrival order), not the last one first: see .cargo/config.toml.
    #[cfg(tokio_unstable)]
    builder.disable_lifo_slot();
    if config.flag(dir::DISABLE_THP) {
        crate::process::disable_thp();
    }
    let _pidfile = crate::process::Pidfile::create(crate::process::pidfile_path(
        &config.text(dir::PIDFILE),
        daemonized,
    ));
    crate::commands::install_hooks();
    // jemalloc's purging thread (`jemalloc-bg-thread`) only now: the fork is behind us.
    crate::alloc::allow_background_thread();
    let server = Server::new(config).into_arc();
    // Redis sets its OOM score at startup and only logs a failure.
    if let Err(e) = crate::commands::config_cmd::apply_oom_score_adj(&server) {
        tracing::warn!("{e}");
    }
    let aof = server.aof.clone();
    // One thread: replies are written in a burst before the thread sleeps (see
    // crate::util::write_turn), after the AOF's group commit is kicked off.
    crate::util::write_turn::set_enabled(threads <= 1);
    // Each runtime thread counts its allocations in a counter of its own (crate::alloc).
    crate::alloc::claim_thread_slot();
    builder
        .on_thread_start(crate::alloc::claim_thread_slot)
        .on_thread_stop(crate::alloc::release_thread_slot);
    let parked = server.clone();
    builder.enable_all().on_thread_park(move || {
        aof.executor_idle();
        crate::util::write_turn::parking();
        crate::commands::scripting::release_stale_engine(&parked.scripts);
    });
    let rt = builder
        .build()
        .map_err(|e| format!("can't start runtime: {e}"))?;
    let result = rt.block_on(serve(server));
    rt.shutdown_timeout(Duration::from_secs(2));
    result
}

/// Point the log at the configured file and level and print the lines Redis prints before
/// the server is built (tools and Redis's test harness read them).
/// The log goes to a file (`logfile` set): `main` reports a failed start there alone.
pub fn logs_to_file() -> bool {
    crate::log::to_file()
}

fn init_logging(config: &Config) {
    crate::log::set_level(&config.text(dir::LOGLEVEL));
    crate::log::set_logfile(&config.text(dir::LOGFILE));
    crate::log::install();
    let pid = std::process::id();
    let version = env!("CARGO_PKG_VERSION");
    tracing::warn!("Podium is starting");
    tracing::warn!(
        "Podium version={version}, bits={}, pid={pid}, just started",
        usize::BITS
    );
    tracing::warn!("Configuration loaded");
}

/// Redis shows a banner with the port and pid when `always-show-logo` is set or the log goes
/// to a terminal, and a one-line summary otherwise. Redis's test harness waits for the banner's
/// " PID: <pid>" (its default.conf sets `always-show-logo yes`).
fn log_banner(config: &Config, port: u16) {
    let pid = std::process::id();
    let mode = if config.flag(dir::CLUSTER_ENABLED) {
        "cluster"
    } else {
        "standalone"
    };
    let to_terminal = config.text(dir::LOGFILE).is_empty()
        && std::io::IsTerminal::is_terminal(&std::io::stdout());
    if config.flag(dir::ALWAYS_SHOW_LOGO) || to_terminal {
        crate::log::raw(&format!(
            "\n    Podium {} {} bit, Redis 7.0 protocol\n    Running in {mode} mode\n    Port: {port}\n    PID: {pid}\n\n",
            env!("CARGO_PKG_VERSION"),
            usize::BITS
        ));
    } else {
        tracing::info!("Running mode={mode}, port={port}.");
    }
}

/// The Unix socket listener of `unixsocket` (none when it is empty), with the permissions of
/// `unixsocketperm` (octal, as in redis.conf; 0 leaves the umask's). A stale socket file at
/// the path is removed first, as Redis does.
fn bind_unix_socket(config: &Config) -> Result<Option<(tokio::net::UnixListener, String)>, String> {
    let path = config.text(dir::UNIXSOCKET);
    if path.is_empty() {
        return Ok(None);
    }
    let perm = config.text(dir::UNIXSOCKETPERM);
    let perm = u32::from_str_radix(&perm, 8)
        .map_err(|_| format!("unixsocketperm {perm} is not an octal permission"))?;
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path).map_err(|e| {
        tracing::warn!("Failed opening Unix socket: {e}");
        format!("can't bind the Unix socket {path}: {e}")
    })?;
    if perm != 0 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(perm))
            .map_err(|e| format!("can't set unixsocketperm on {path}: {e}"))?;
    }
    Ok(Some((listener, path)))
}

/// The sockets a server listens on: `port`'s, `tls-port`'s, and the Unix socket.
struct Sockets {
    tcp: Vec<std::net::TcpListener>,
    tls: Vec<std::net::TcpListener>,
    unix: Option<(tokio::net::UnixListener, String)>,
}

/// Start the accept loops: TCP on `port` and `tls-port`, and the Unix socket when one is
/// configured.
fn start_accepting(srv: &Arc<Server>, sockets: Sockets) -> Result<(), String> {
    let Sockets { tcp, tls, unix } = sockets;
    crate::listeners::start(srv, tcp, crate::listeners::Group::Plain)?;
    crate::listeners::start(srv, tls, crate::listeners::Group::Tls)?;
    if let Some((l, path)) = unix {
        let srv = srv.clone();
        tokio::spawn(async move {
            loop {
                match l.accept().await {
                    Ok((sock, _)) => {
                        let srv = srv.clone();
                        tokio::spawn(crate::connection::handle_unix(srv, sock, path.clone()));
                    }
                    Err(e) => {
                        tracing::warn!("accept failed on {path}: {e}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        });
    }
    Ok(())
}

/// Listen and serve on an existing runtime until shutdown.
pub async fn serve(srv: Arc<Server>) -> Result<(), String> {
    crate::crash::install(srv.config.flag(dir::CRASH_LOG_ENABLED));
    crate::commands::acl::load_users_at_startup(&srv)?;
    let port = srv.config.int(dir::PORT) as u16;
    let tls_port = srv.config.int(dir::TLS_PORT) as u16;
    let bind = srv.config.text(dir::BIND);
    let _ = srv.listeners.serve.set(|srv, sock, peer, tls| {
        tokio::spawn(crate::connection::handle(srv, sock, peer, tls));
    });
    if crate::listeners::configure_tls(&srv).is_err() {
        tracing::warn!("Failed to configure TLS. Check logs for more info.");
        return Err("Failed to configure TLS".into());
    }
    let listen = |p: u16, what: &str| {
        let sockets = crate::listeners::bind(&srv, &bind, p).inspect_err(|_| {
            // Redis's words: its test harness looks for "Failed listening on port" to retry
            // on another port.
            tracing::warn!("Failed listening on port {p} ({what}), aborting.");
        })?;
        // An empty `bind` listens on no TCP address, as in Redis (the Unix socket may serve).
        if p != 0 && sockets.is_empty() && !bind.trim().is_empty() {
            tracing::warn!("Failed listening on port {p} ({what}), aborting.");
            return Err("no address to listen on".to_string());
        }
        Ok(sockets)
    };
    let tcp = listen(port, "TCP")?;
    // Cluster mode: nodes.conf and the bus port, before the dataset loads (as Redis).
    crate::cluster::init(&srv).inspect_err(|e| tracing::warn!("{e}"))?;
    let tls = listen(tls_port, "TLS")?;
    let unix_listener = bind_unix_socket(&srv.config)?;
    if port == 0 && tls_port == 0 && unix_listener.is_none() {
        tracing::warn!("Configured to not listen anywhere, exiting.");
        return Err("Configured to not listen anywhere".into());
    }
    log_banner(&srv.config, port);
    srv.config.show_proc_title();
    tracing::warn!("Server initialized");
    tokio::spawn(crate::persistence::relay_durable(srv.aof.clone()));
    start_defrag_thread(&srv)?;
    // Clients are accepted while the AOF loads, as Redis does: they get -LOADING for anything
    // but the commands flagged `loading` (INFO shows loading:1), instead of a refused connection.
    // What the server holds before any data: INFO used_memory_startup.
    crate::alloc::record_startup();
    // With nothing to load (only an AOF to create, or no persistence) connections wait in the
    // listen backlog until startup is done, as Redis serves no one before its event loop.
    let signals = crate::shutdown::catch_signals()?;
    let loads_data = crate::persistence::will_load(&srv);
    let mut accepting = Some(Sockets {
        tcp,
        tls,
        unix: unix_listener,
    });
    if loads_data {
        srv.aof.inner.loading.store(true, Ordering::SeqCst);
        if let Some(sockets) = accepting.take() {
            start_accepting(&srv, sockets)?;
        }
    }
    let loader = srv.clone();
    let loaded = tokio::task::spawn_blocking(move || crate::persistence::startup(&loader)).await;
    match loaded {
        Ok(r) => r?,
        Err(e) => return Err(format!("loading the AOF failed: {e}")),
    }
    if let Some(sockets) = accepting.take() {
        start_accepting(&srv, sockets)?;
    }
    crate::client_evict::configure(&srv);
    // Replication can start links before cluster mode's first event: a replica in nodes.conf
    // follows its master from there.
    crate::replication::replica::install(&srv);
    crate::cluster::start(&srv).inspect_err(|e| tracing::warn!("{e}"))?;
    tracing::info!("Ready to accept connections");
    start_replication_cron(&srv);
    // `replicaof host port` in the configuration: follow it from the start.
    let target = srv.config.text(dir::REPLICAOF);
    if let Some((host, port)) = crate::config::directives::replicaof_target(&target) {
        srv.repl.start_following();
        srv.master_link.follow(host.to_string(), port);
        let _ = crate::commands::config_cmd::apply_oom_score_adj(&srv);
    }
    let supervisor = crate::process::supervisor(&srv.config.text(dir::SUPERVISED));
    crate::process::notify_ready(supervisor);
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
            crate::alloc::sample_peak();
            let st = &cron_srv.stats;
            cron_srv.instant.sample(
                Instant::now(),
                [
                    st.commands.get(),
                    st.net_input_bytes.get(),
                    st.net_output_bytes.get(),
                ],
            );
            crate::crash::set_enabled(cron_srv.config.flag(dir::CRASH_LOG_ENABLED));
            if cron_srv.signal_shutdown.cron_paused() {
                continue;
            }
            let s = cron_srv.clone();
            // The reaper takes shard locks: run it off the async workers.
            let r = tokio::task::spawn_blocking(move || {
                let capped = s.cron(&mut rng);
                // A lowered tracking-table-max-keys takes effect without waiting for a read.
                s.tracking.enforce_limit(&s);
                enforce_pubsub_soft_limits(&s);
                crate::connection::request_buffer_checks(&s);
                crate::commands::migrate::close_idle();
                crate::client_evict::configure(&s);
                crate::client_evict::cron(&s);
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
    crate::shutdown::wait_for_exit(&srv, signals).await?;
    srv.shutting_down.store(true, Ordering::SeqCst);
    crate::commands::scripting::kill_forked_sessions();
    crate::process::notify_stopping(supervisor);
    crate::persistence::shutdown(&srv);
    let path = srv.config.text(dir::UNIXSOCKET);
    if !path.is_empty() {
        let _ = std::fs::remove_file(path);
    }
    tracing::info!("Podium is now ready to exit, bye bye...");
    Ok(())
}

use rand::SeedableRng;

/// The active defragmenter's own thread (`state::defrag`): a tick every `1/hz`, which does
/// nothing unless `activedefrag yes` and the fragmentation call for a run. It runs beside the
/// loading of the AOF or RDB too, as Redis's runs from its loading loop, and takes shard locks
/// one at a time as commands do. Paused with the cron (DEBUG PAUSE-CRON).
fn start_defrag_thread(srv: &Arc<Server>) -> Result<(), String> {
    let srv = srv.clone();
    std::thread::Builder::new()
        .name("podium-defrag".into())
        .spawn(move || {
            crate::alloc::defrag::disable_thread_cache();
            defrag_loop(&srv)
        })
        .map(drop)
        .map_err(|e| format!("can't start the defrag thread: {e}"))
}

/// The defrag thread's ticks, until the process ends.
fn defrag_loop(srv: &Server) -> ! {
    loop {
        let hz = srv.config.hot.hz.load(Ordering::Relaxed).clamp(1, 500) as u64;
        std::thread::sleep(Duration::from_micros(1_000_000 / hz));
        // While data loads, the loader runs the ticks itself (`Defrag::while_loading`).
        if srv.signal_shutdown.cron_paused()
            || srv.shutting_down.load(Ordering::Relaxed)
            || srv.aof.inner.loading.load(Ordering::Relaxed)
        {
            continue;
        }
        if let Some(took) = srv.defrag.tick(srv) {
            srv.latency
                .add_if_needed(srv, "active-defrag-cycle", took.as_millis() as u64);
        }
    }
}

/// Replication's once-a-second work (Redis's replicationCron): PINGs to the replicas, the
/// backlog's time to live, replicas that stopped acknowledging.
fn start_replication_cron(srv: &Arc<Server>) {
    let weak = Arc::downgrade(srv);
    tokio::spawn(async move {
        let mut tick: u64 = 0;
        let mut every = tokio::time::interval(Duration::from_secs(1));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let Some(srv) = weak.upgrade() else {
                return;
            };
            if srv.shutting_down.load(Ordering::Relaxed) {
                return;
            }
            tick += 1;
            let period = srv.config.int(dir::REPL_PING_REPLICA_PERIOD).max(1) as u64;
            let ttl = srv.config.int(dir::REPL_BACKLOG_TTL);
            let failing_over = srv.failover.active();
            srv.repl
                .cron(tick, period, ttl, srv.replica_obuf_limit(), failing_over);
            let timeout_ms = srv.config.int(dir::REPL_TIMEOUT).max(1) * 1000;
            srv.repl.drop_silent_replicas(timeout_ms);
        }
    });
}

/// The cron's check of the pubsub class's soft limit: close the subscribers that have been
/// over it for longer than its seconds.
fn enforce_pubsub_soft_limits(srv: &crate::state::Server) {
    let limit = srv.config.hot.obuf.pubsub();
    if limit.soft == 0 {
        return;
    }
    let now_ms = crate::clock::unix_ms();
    let clients: Vec<_> = srv
        .clients
        .lock()
        .values()
        .filter(|c| {
            c.push
                .counts
                .iter()
                .any(|n| n.load(std::sync::atomic::Ordering::Relaxed) > 0)
        })
        .cloned()
        .collect();
    for info in clients {
        if info.push.soft_limit_expired(limit, now_ms) {
            info.push
                .overflowed
                .store(true, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(
                "Client id={} addr={} scheduled to be closed ASAP for overcoming of output buffer limits.",
                info.id,
                info.addr
            );
            info.kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Stamp;

    fn unix_ms_at(at: Instant) -> i64 {
        Stamp::at(at).unix_ms()
    }

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
