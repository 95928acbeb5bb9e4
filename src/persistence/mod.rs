//! Persistence: Redis 7.0's formats on disk. This file owns the append-only file (the
//! multi-part AOF) and the persistence thread; RDB snapshot files are [`snapshot`]'s, the RDB
//! object codec that DUMP/RESTORE and files share is [`rdb`] (streams in [`rdb_stream`], the
//! encodings under both in [`rdb_encoding`]), and AOF rewrites are [`rewrite`]'s.
//!
//! Layout (as Redis 7.0 with `aof-use-rdb-preamble no`): `<dir>/<appenddirname>/` holds a base
//! file `<appendfilename>.<n>.base.aof` (plain RESP commands), incremental files
//! `<appendfilename>.<m>.incr.aof`, and the manifest listing them (see [`manifest`]).
//!
//! Logging: [`Aof::feed`] is called under the command's shard locks after every write; it only
//! appends the RESP encoding (preceded by `SELECT` when the database changes) to an in-memory
//! buffer and bumps a sequence number. Getting the buffer to disk depends on `appendfsync`:
//! - `always`: a writer thread takes everything buffered, writes it, fdatasyncs, and publishes
//!   the sequence number it covered; every connection awaits ([`Aof::wait_durable`]) a sequence
//!   at least as high as the last fed command before it sends its replies. A group commit
//!   starts when the executor runs out of ready work ([`Aof::executor_idle`], tokio's
//!   `on_thread_park`, Redis's `beforeSleep`), so one fsync covers every client that was ready,
//!   or after 500 us when the executor never idles; clients that write during an fsync share
//!   the next one. One runtime task ([`relay_durable`]) wakes the waiting connections, so the
//!   writer crosses threads once per fsync, not once per client.
//! - `everysec` / `no`: before a connection sends replies, everything fed so far is written
//!   (write(2), no fsync) if nobody has yet ([`Aof::wait_durable`]), as Redis writes in
//!   beforeSleep before replying: a killed process loses nothing acknowledged. The writer thread
//!   also writes what commands without a client fed (expiry DELs) every 2 ms, and fsyncs once a
//!   second (`everysec`) or never (`no`), off the command path.
//!
//! Loading ([`startup`], see [`load`]), rewriting ([`rewrite`]: BGREWRITEAOF, automatic
//! rewrites, CONFIG SET appendonly yes) and INFO persistence are here too, and so is the cron
//! that starts BGSAVEs and rewrites ([`children_cron`]): it decides between the two kinds of
//! forked child, so it sits above both, which share only [`child`]'s rules.

pub(crate) mod child;
pub mod load;
pub mod manifest;
pub mod rdb;
pub(crate) mod rdb_encoding;
pub(crate) mod rdb_stream;
pub mod rewrite;
pub mod snapshot;
pub(crate) mod stream_load;

use crate::config::dir;
use crate::protocol::Reply;
pub use crate::state::aof::{Aof, FSYNC_ALWAYS, FSYNC_EVERYSEC, FSYNC_NO};
pub(crate) use crate::state::aof::{Inner, Out};
use crate::state::Server;
use bytes::Bytes;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// The longest a request waits for a load's next step ([`Aof::hold_for_load`]).
pub const LOAD_HOLD_MAX: Duration = Duration::from_millis(100);

/// What persistence needs from the command layer above it: running a logged command and
/// compiling FUNCTION libraries both go through the dispatcher and the Lua engine, which
/// import persistence (DUMP, BGSAVE, the AOF feed). So persistence hands them back up through
/// these two entries, which [`crate::commands::install_hooks`] fills once at startup, instead
/// of importing the layer above it.
pub struct Upcalls {
    /// Execute one command read from an AOF (anything but a SELECT outside MULTI, which the
    /// loader applies itself) as the loader's client; Err is why the file cannot be loaded.
    pub run_logged: fn(&Server, &mut crate::client::Client, Vec<Bytes>) -> Result<(), String>,
    /// Compile and install FUNCTION libraries (each a whole FUNCTION LOAD payload) under a
    /// policy; nothing changes unless all of them load. Err is Redis's text.
    pub restore_libraries: fn(&Server, Vec<Bytes>, LibraryPolicy) -> Result<(), String>,
}

pub use crate::state::scripts::LibraryPolicy;

static UPCALLS: std::sync::OnceLock<Upcalls> = std::sync::OnceLock::new();

/// Install the command layer's entries (see [`Upcalls`]); later calls change nothing.
pub fn install_upcalls(upcalls: Upcalls) {
    let _ = UPCALLS.set(upcalls);
}

/// The command layer's entries. Every way a server comes to exist (`server::run`, the tests'
/// servers) installs them before anything is loaded, so their absence is a bug in that
/// start-up path, not a condition to recover from.
pub(crate) fn upcalls() -> &'static Upcalls {
    UPCALLS
        .get()
        .expect("commands::install_hooks runs before anything is loaded or saved")
}

fn fsync_mode(s: &str) -> u8 {
    match s {
        "always" => FSYNC_ALWAYS,
        "no" => FSYNC_NO,
        _ => FSYNC_EVERYSEC,
    }
}

/// The C library's text for `errno` ("No space left on device"), as Redis prints it.
fn strerror(errno: i32) -> String {
    // SAFETY: strerror returns a pointer to a NUL-terminated string that stays valid until the
    // next strerror call on this thread; it is copied out at once.
    unsafe {
        let p = libc::strerror(errno);
        if p.is_null() {
            return format!("error {errno}");
        }
        std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// Runs on the runtime for the server's lifetime: passes each fsync's completion on to the
/// connections waiting for it (see `Inner::synced_signal`).
pub async fn relay_durable(aof: Aof) {
    loop {
        aof.inner.synced_signal.notified().await;
        aof.inner.durable.notify_waiters();
    }
}

pub use crate::protocol::{encode_command, encode_select};

impl Aof {
    /// Bytes held by the AOF's write buffer: like Redis's aof_buf, left out of the memory
    /// `maxmemory` compares (INFO mem_not_counted_for_evict, mem_aof_buffer).
    pub fn buffer_bytes(&self) -> usize {
        self.inner.feed.lock().buf.capacity()
    }

    /// Log one command that changed database `db`. Called under the command's shard locks, so
    /// it only buffers.
    pub fn feed(&self, db: usize, argv: Vec<Bytes>) {
        let inner = &*self.inner;
        if !inner.enabled.load(Ordering::Acquire) {
            return;
        }
        let mut f = inner.feed.lock();
        if inner.timestamps.load(Ordering::Relaxed) {
            let now = crate::clock::unix_ms() / 1000;
            if f.ts < now {
                f.ts = now;
                f.buf.extend_from_slice(format!("#TS:{now}\r\n").as_bytes());
            }
        }
        if f.db != Some(db) {
            encode_select(&mut f.buf, db);
            f.db = Some(db);
        }
        encode_command(&mut f.buf, &argv);
        f.seq += 1;
        inner.fed.store(f.seq, Ordering::Release);
    }

    /// DEBUG AOF-FLUSH-SLEEP.
    pub fn set_flush_sleep(&self, usec: u64) {
        self.inner.flush_sleep_us.store(usec, Ordering::Relaxed);
    }

    /// Pick up the settings the command path reads without the configuration's lock
    /// (`aof-timestamp-enabled`): at startup and after each CONFIG SET of them.
    pub fn config_changed(&self, config: &crate::config::Config) {
        self.inner
            .timestamps
            .store(config.flag(dir::AOF_TIMESTAMP_ENABLED), Ordering::Relaxed);
    }

    /// Feed `cmds` (database, command) as one unbroken run: nothing another thread feeds
    /// lands between them (a script's MULTI ... EXEC, see `scripting::run_atomically`).
    pub fn feed_all(&self, cmds: Vec<(usize, Vec<Bytes>)>) {
        let inner = &*self.inner;
        if !inner.enabled.load(Ordering::Acquire) || cmds.is_empty() {
            return;
        }
        let mut f = inner.feed.lock();
        for (db, argv) in cmds {
            if f.db != Some(db) {
                encode_select(&mut f.buf, db);
                f.db = Some(db);
            }
            encode_command(&mut f.buf, &argv);
            f.seq += 1;
        }
        inner.fed.store(f.seq, Ordering::Release);
    }

    /// Called by the runtime each time an executor thread runs out of ready work (tokio's
    /// `on_thread_park`, the equivalent of Redis's `beforeSleep`). Under `always` this is when
    /// a group commit starts: every command of every client that was ready has been executed
    /// and fed, so one fsync covers them all, instead of the first command's fsync going out
    /// alone while the rest wait for the next one. (The writer also starts on its own when
    /// commands have waited `GROUP_WAIT`, for executors that never go idle.)
    pub fn executor_idle(&self) {
        let inner = &*self.inner;
        if inner.mode.load(Ordering::Relaxed) != FSYNC_ALWAYS
            || !inner.enabled.load(Ordering::Relaxed)
            || inner.fed.load(Ordering::Acquire) <= inner.synced.load(Ordering::Acquire)
        {
            return;
        }
        inner.kick.store(true, Ordering::Release);
        // Taking the mutex orders this wake-up after the writer's check of `kick` (parking_lot
        // makes no system call when the writer is not waiting).
        drop(inner.feed.lock());
        inner.wake.notify_one();
    }

    /// True while commands are being logged (callers skip building log entries otherwise).
    #[inline]
    pub fn is_enabled(&self) -> bool {
        self.inner.enabled.load(Ordering::Acquire)
    }

    /// Sequence number of the last fed command.
    pub fn last_seq(&self) -> u64 {
        self.inner.fed.load(Ordering::Acquire)
    }

    /// Whether replies must wait for an fsync before they go out (`appendfsync always` with
    /// the log on): such replies are not left to the park hook, which can not wait.
    pub fn replies_wait_for_fsync(&self) -> bool {
        let inner = &*self.inner;
        inner.enabled.load(Ordering::Acquire) && inner.mode.load(Ordering::Relaxed) == FSYNC_ALWAYS
    }

    /// [`Aof::wait_durable`] where it does not wait: true once everything up to `seq` is as
    /// durable as the policy promises (handed to the kernel now if need be); false when an
    /// fsync is still to come (`always`).
    pub fn durable_now(&self, seq: u64) -> bool {
        let inner = &*self.inner;
        if seq == 0 || !inner.enabled.load(Ordering::Acquire) {
            return true;
        }
        if inner.mode.load(Ordering::Relaxed) != FSYNC_ALWAYS {
            // everysec / no: the commands are handed to the kernel before the reply goes out
            // (as Redis's beforeSleep writes before it replies), so killing the process loses
            // nothing acknowledged; only a machine crash can lose the last second (everysec).
            // Whoever writes takes everything fed so far: a client whose commands another one
            // already wrote makes no system call.
            if inner.written.load(Ordering::Acquire) < seq {
                inner.write_pending(false);
            }
            return true;
        }
        inner.synced.load(Ordering::Acquire) >= seq
    }

    /// Wait until everything up to `seq` is as durable as the fsync policy promises: fsynced
    /// under `always`, handed to the kernel otherwise.
    pub async fn wait_durable(&self, seq: u64) {
        if self.durable_now(seq) {
            return;
        }
        let inner = &*self.inner;
        loop {
            let notified = inner.durable.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if inner.synced.load(Ordering::Acquire) >= seq || !inner.enabled.load(Ordering::Acquire)
            {
                return;
            }
            // The writer is started by `executor_idle` once this thread has nothing else to
            // run, or by its own timer.
            notified.await;
        }
    }

    /// While writing the AOF fails (disk full, I/O error): the error's text, for the
    /// `-MISCONF` refusal of write commands (as Redis refuses them until a write succeeds).
    pub fn write_error(&self) -> Option<String> {
        let inner = &*self.inner;
        if inner.last_write_ok.load(Ordering::Acquire) || !inner.enabled.load(Ordering::Acquire) {
            return None;
        }
        Some(strerror(inner.last_write_errno.load(Ordering::Relaxed)))
    }

    /// True while the AOF is being loaded.
    pub fn loading(&self) -> bool {
        self.inner.loading.load(Ordering::Relaxed)
    }

    /// True while a replica loads its master's image beside the data set it serves.
    pub fn async_loading(&self) -> bool {
        self.inner.async_loading.load(Ordering::Relaxed)
    }

    /// Hold a request that came while a file loads, as Redis holds it. Redis loads on the
    /// thread that serves clients and answers them (-LOADING) only each time it has read
    /// another `interval` bytes (`loading-process-events-interval-bytes`), so a client never
    /// sees a small load, and sees a big one only between such steps. Podium loads on a
    /// thread of its own; this waits until the load ended or its progress crossed the next
    /// multiple of `interval`, and at most [`LOAD_HOLD_MAX`], so a worker never stays parked
    /// on a slow load. A load from the master's socket is not waited for: its bytes come
    /// through a task the waiting worker may be the one to run.
    pub fn hold_for_load(&self, interval: u64) {
        let inner = &*self.inner;
        if inner.loading_from_socket.load(Ordering::Acquire) {
            return;
        }
        let interval = interval.max(1);
        let done = &inner.snap.load_done_bytes;
        let step = done.load(Ordering::Relaxed) / interval;
        let waiting = || {
            inner.loading.load(Ordering::Acquire) && done.load(Ordering::Relaxed) / interval == step
        };
        if !waiting() {
            return;
        }
        let hold = || {
            let start = Instant::now();
            while waiting() && start.elapsed() < LOAD_HOLD_MAX {
                std::thread::sleep(Duration::from_micros(200));
            }
        };
        // The wait gives this worker's other clients to another thread: a dozen requests held
        // at once (Sentinels' and replicas' PINGs to a loading master) otherwise parked both
        // workers, and INFO, which runs during a load, went unanswered for seconds.
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if multi_thread {
            crate::util::write_turn::block_in_place(hold)
        } else {
            hold()
        }
    }
}

impl Inner {
    fn publish(&self, written: u64, synced: Option<u64>) {
        self.written.fetch_max(written, Ordering::AcqRel);
        if let Some(s) = synced {
            self.synced.fetch_max(s, Ordering::AcqRel);
            self.synced_signal.notify_one();
        }
    }

    fn write_failed(&self, e: &std::io::Error) {
        let errno = e.raw_os_error().unwrap_or(libc::EIO);
        self.last_write_errno.store(errno, Ordering::Relaxed);
        if self.last_write_ok.swap(false, Ordering::Release) {
            tracing::warn!("Error writing to the AOF file: {}", strerror(errno));
        }
        if self.mode.load(Ordering::Relaxed) == FSYNC_ALWAYS {
            tracing::warn!("Can't recover from AOF write error when the AOF fsync policy is 'always'. Exiting...");
            std::process::exit(1);
        }
    }

    /// Write what is buffered to the current file; with `sync`, fdatasync it too. Returns false
    /// on an I/O error (the data stays buffered and is retried).
    pub(crate) fn write_pending(&self, sync: bool) -> bool {
        let mut out = self.out.lock();
        let (buf, hi) = {
            let mut f = self.feed.lock();
            (std::mem::take(&mut f.buf), f.seq)
        };
        let Some(o) = out.as_mut() else {
            // Logging is off: nothing to write to.
            self.publish(hi, Some(hi));
            return true;
        };
        if !buf.is_empty() {
            let sleep = self.flush_sleep_us.load(Ordering::Relaxed);
            if sleep > 0 {
                std::thread::sleep(Duration::from_micros(sleep));
            }
            let max = self.max_size.load(Ordering::Relaxed);
            let r = if max > 0 && o.size + buf.len() as u64 > max {
                Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
            } else {
                (&*o.file).write_all(&buf)
            };
            if let Err(e) = r {
                // A partial write is cut off again (as Redis does), so the retry does not
                // log those commands twice.
                if let Err(t) = o.file.set_len(o.size) {
                    tracing::warn!("Could not remove a partial AOF write: {t}");
                }
                // Put the data back in front of whatever was fed meanwhile.
                let mut f = self.feed.lock();
                let mut back = buf;
                back.extend_from_slice(&f.buf);
                f.buf = back;
                self.write_failed(&e);
                return false;
            }
            o.size += buf.len() as u64;
        }
        if sync && self.synced.load(Ordering::Acquire) < hi {
            self.fsync_in_progress.store(true, Ordering::Relaxed);
            let r = o.file.sync_data();
            self.fsync_in_progress.store(false, Ordering::Relaxed);
            if let Err(e) = r {
                self.write_failed(&e);
                self.publish(hi, None);
                return false;
            }
            self.last_fsync_ms
                .store(crate::clock::unix_ms(), Ordering::Relaxed);
            self.last_write_ok.store(true, Ordering::Relaxed);
            self.publish(hi, Some(hi));
        } else {
            self.last_write_ok.store(true, Ordering::Relaxed);
            self.publish(hi, None);
        }
        true
    }

    /// everysec: write pending data, then fsync the file without holding the lock.
    fn background_fsync(&self) {
        if !self.write_pending(false) {
            return;
        }
        let hi = self.written.load(Ordering::Acquire);
        if self.synced.load(Ordering::Acquire) >= hi {
            return;
        }
        let file = match self.out.lock().as_ref() {
            Some(o) => o.file.clone(),
            None => return,
        };
        self.fsync_in_progress.store(true, Ordering::Relaxed);
        let r = file.sync_data();
        self.fsync_in_progress.store(false, Ordering::Relaxed);
        match r {
            Ok(()) => {
                self.last_fsync_ms
                    .store(crate::clock::unix_ms(), Ordering::Relaxed);
                self.publish(hi, Some(hi));
            }
            Err(e) => self.write_failed(&e),
        }
    }

    /// Pick up `aof-max-size` from the config.
    fn refresh_max_size(&self, srv: &Server) {
        let max = srv.config.int(dir::AOF_MAX_SIZE).max(0) as u64;
        self.max_size.store(max, Ordering::Relaxed);
    }

    /// Bytes in the AOF right now (base + incremental files).
    pub(crate) fn current_size(&self) -> u64 {
        let cur = self.out.lock().as_ref().map(|o| o.size).unwrap_or(0);
        let st = self.state.lock();
        st.base_size + st.other_incr_size + cur
    }
}

/// The writer thread: group-commits under `always`, fsyncs every second under `everysec`, and
/// checks the automatic rewrite conditions.
/// How often the writer hands buffered commands to the kernel under everysec / no.
const POLL: Duration = Duration::from_millis(2);
/// `always`: the longest a fed command waits for its group commit to start when no executor
/// goes idle (a server kept busy by other clients).
const GROUP_WAIT: Duration = Duration::from_micros(500);

fn writer(inner: Arc<Inner>, srv: Weak<Server>) {
    let tick = Duration::from_millis(100);
    let mut next_tick = Instant::now() + tick;
    let mut last_sync = Instant::now();
    // always: when the writer first saw commands waiting for an fsync that nobody kicked.
    let mut waiting_since: Option<Instant> = None;
    loop {
        let work = {
            let mut f = inner.feed.lock();
            loop {
                let always = inner.mode.load(Ordering::Relaxed) == FSYNC_ALWAYS;
                let pending = !f.buf.is_empty() || inner.synced.load(Ordering::Acquire) < f.seq;
                let enabled = inner.enabled.load(Ordering::Acquire);
                let now = Instant::now();
                if enabled && always && pending {
                    let since = *waiting_since.get_or_insert(now);
                    if inner.kick.swap(false, Ordering::AcqRel) || now - since >= GROUP_WAIT {
                        waiting_since = None;
                        break true;
                    }
                } else {
                    waiting_since = None;
                }
                if enabled && !always && !f.buf.is_empty() {
                    break true;
                }
                if now >= next_tick {
                    break false;
                }
                // everysec / no: poll the buffer every 2 ms (batching many commands per write(2)
                // and costing the command path nothing); always: woken by `executor_idle`, or
                // after GROUP_WAIT at the latest.
                let wait = match waiting_since {
                    Some(since) => (since + GROUP_WAIT).saturating_duration_since(now),
                    None if enabled && !always => POLL,
                    None => next_tick - now,
                };
                inner.wake.wait_for(&mut f, wait.min(next_tick - now));
            }
        };
        if work {
            if !inner.write_pending(inner.mode.load(Ordering::Relaxed) == FSYNC_ALWAYS) {
                // The data stays buffered; retry at the pace of Redis's serverCron rather than
                // spinning, picking up a changed aof-max-size.
                std::thread::sleep(tick);
                if let Some(srv) = srv.upgrade() {
                    inner.refresh_max_size(&srv);
                }
            }
            continue;
        }
        next_tick = Instant::now() + tick;
        let Some(srv) = srv.upgrade() else { return };
        let mode = fsync_mode(&srv.config.text(dir::APPENDFSYNC));
        inner.mode.store(mode, Ordering::Relaxed);
        inner.refresh_max_size(&srv);
        children_cron(&srv);
        if !inner.enabled.load(Ordering::Acquire) {
            continue;
        }
        match mode {
            FSYNC_EVERYSEC if last_sync.elapsed() >= Duration::from_secs(1) => {
                last_sync = Instant::now();
                inner.background_fsync();
            }
            FSYNC_NO => {
                inner.write_pending(false);
            }
            _ => {}
        }
        rewrite::maybe_auto_rewrite(&srv);
    }
}

fn start_writer(srv: &Server) {
    let inner = srv.aof.inner.clone();
    if inner.writer_started.swap(true, Ordering::SeqCst) {
        return;
    }
    let weak = srv.arc().map(|a| Arc::downgrade(&a)).unwrap_or_default();
    let r = std::thread::Builder::new()
        .name("aof-writer".into())
        .spawn(move || writer(inner, weak));
    if let Err(e) = r {
        tracing::warn!("can't start the AOF writer thread: {e}");
    }
}

pub(crate) fn paths(srv: &Server) -> (PathBuf, String) {
    let dir = srv.config.text(dir::DIR);
    let dirname = srv.config.text(dir::APPENDDIRNAME);
    let filename = srv.config.text(dir::APPENDFILENAME);
    (manifest::aof_dir(&dir, &dirname), filename)
}

/// Create the AOF directory inside `dir` (one level, as Redis's mkdir: `dir` itself must
/// exist, so no CONFIG SET can make the server create directories elsewhere).
pub(crate) fn create_aof_dir(path: &std::path::Path) -> std::io::Result<()> {
    match std::fs::create_dir(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && path.is_dir() => Ok(()),
        r => r,
    }
}

pub(crate) fn open_append(path: &std::path::Path) -> std::io::Result<Out> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let size = file.metadata()?.len();
    Ok(Out {
        file: Arc::new(file),
        size,
    })
}

fn file_size(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// True when [`startup`] will load data: with `appendonly yes` an AOF (its manifest, or a
/// single-file AOF of Redis before 7.0 to upgrade), otherwise the RDB file. With `appendonly
/// yes` and no AOF yet there is nothing to load, only files to create: the server then serves
/// no one until they exist, as Redis, which is not loading then (a client answered during it,
/// PING included, would take the server for ready and get -LOADING for its first write).
pub fn will_load(srv: &Server) -> bool {
    if srv.config.flag(dir::APPENDONLY) {
        let (aofdir, filename) = paths(srv);
        return manifest::manifest_path(&aofdir, &filename).exists()
            || legacy_aof(srv, &filename).is_some();
    }
    snapshot::rdb_path(srv).exists()
}

/// Replay the files `m` names in `dir`, in order: the number of commands and each file's size.
/// Every file is looked at first, as Redis does: one the manifest lists but the directory does
/// not hold refuses the load before anything is applied, naming the file and the reason.
fn replay(
    srv: &Server,
    dir: &std::path::Path,
    m: &manifest::Manifest,
) -> Result<(u64, Vec<u64>), String> {
    let files: Vec<&manifest::Part> = m.base.iter().chain(m.incrs.iter()).collect();
    let mut sizes = Vec::with_capacity(files.len());
    for p in &files {
        match std::fs::metadata(dir.join(&p.name)) {
            Ok(md) => sizes.push(md.len()),
            Err(e) => {
                return Err(format!(
                    "Unable to obtain the AOF file {} length. stat: {}",
                    p.name,
                    crate::util::strerror(&e)
                ))
            }
        }
    }
    let mut total_cmds = 0;
    if sizes.iter().sum::<u64>() == 0 {
        // Nothing but empty files: nothing to load (Redis's AOF_EMPTY).
        return Ok((0, sizes));
    }
    snapshot::start_load_progress(srv, sizes.iter().sum());
    for (i, p) in files.iter().enumerate() {
        let path = dir.join(&p.name);
        let last = i + 1 == files.len();
        if sizes[i] == 0 {
            continue;
        }
        let started = Instant::now();
        let l = load::load_file(srv, &path, last, p.name == srv_filename(srv))?;
        total_cmds += l.commands;
        sizes[i] = file_size(&path);
        tracing::info!(
            "DB loaded from {} file {}: {:.3} seconds",
            if i == 0 && m.base.is_some() {
                "base"
            } else {
                "incr"
            },
            p.name,
            started.elapsed().as_secs_f64()
        );
    }
    Ok((total_cmds, sizes))
}

/// `appendfilename`.
fn srv_filename(srv: &Server) -> String {
    paths(srv).1
}

/// DEBUG LOADAOF: write out and fsync what the AOF has pending, empty every database and
/// replay the AOF the manifest on disk names (as Redis does, also with `appendonly no`, for
/// the files a BGREWRITEAOF left). The replayed commands are not logged again, and count as no
/// change since the last save. Must be called with no shard lock held.
pub fn debug_loadaof(srv: &Server) -> Result<(), String> {
    let inner = &srv.aof.inner;
    if inner.enabled.load(Ordering::Acquire) {
        inner.write_pending(true);
    }
    let (dir, filename) = paths(srv);
    let m = manifest::read(&dir, &filename)
        .map_err(|e| e.to_string())?
        .unwrap_or_default();
    // As Redis: the manifest on disk becomes the server's (its sequence numbers included),
    // and its history files go.
    inner.state.lock().manifest = m.clone();
    rewrite::delete_history(srv);
    let was_loading = inner.loading.swap(true, Ordering::SeqCst);
    snapshot::empty_all(srv);
    // This thread's commands stay out of the AOF (they come from it).
    let r = crate::state::scripts::without_aof_if(true, || replay(srv, &dir, &m));
    inner.loading.store(was_loading, Ordering::SeqCst);
    inner
        .dirty_base
        .store(srv.stats.dirty.get(), Ordering::Relaxed);
    let (cmds, _) = r.inspect_err(|e| tracing::warn!("{e}"))?;
    tracing::warn!("Append Only File loaded by DEBUG LOADAOF ({cmds} commands)");
    Ok(())
}

/// Load the AOF (if `appendonly yes`; else the RDB file, if there is one) and start logging.
/// Clients are accepted meanwhile and get -LOADING. A refusal is logged (Redis's lines, the
/// last one saying why) before the error is returned and the server exits.
pub fn startup(srv: &Server) -> Result<(), String> {
    startup_steps(srv).map_err(|f| {
        if !f.logged {
            tracing::warn!("{}", f.msg);
        }
        f.msg
    })
}

/// Why the server cannot start with the data on disk, and whether the log says so already.
struct Fatal {
    msg: String,
    logged: bool,
}

impl From<String> for Fatal {
    fn from(msg: String) -> Fatal {
        Fatal { msg, logged: false }
    }
}

fn startup_steps(srv: &Server) -> Result<(), Fatal> {
    let inner = &srv.aof.inner;
    srv.aof.config_changed(&srv.config);
    inner.mode.store(
        fsync_mode(&srv.config.text(dir::APPENDFSYNC)),
        Ordering::Relaxed,
    );
    start_writer(srv);
    if !srv.config.flag(dir::APPENDONLY) {
        // As Redis: without the AOF, the dataset comes from `dir/dbfilename` when it exists.
        let path = snapshot::rdb_path(srv);
        if path.exists() {
            inner.loading.store(true, Ordering::SeqCst);
            // On failure `loading` stays set: the process is about to exit, and a client must
            // not see an empty dataset answered as if it were loaded meanwhile.
            if let Err(e) = snapshot::load_file(srv, &path) {
                tracing::warn!("Fatal error loading the DB: {e}. Exiting.");
                if e.contains(snapshot::CORRUPT_OBJECT) {
                    tracing::warn!("Terminating server after rdb file reading failure.");
                }
                return Err(Fatal {
                    msg: e,
                    logged: true,
                });
            }
            inner.loading.store(false, Ordering::SeqCst);
        }
        return Ok(());
    }
    let (dir, filename) = paths(srv);
    // 1. The manifest, if the AOF directory and the manifest exist.
    let mut m = if dir.is_dir() {
        match manifest::read(&dir, &filename) {
            Ok(m) => m.unwrap_or_default(),
            Err(e) => {
                e.log();
                return Err(Fatal {
                    msg: e.to_string(),
                    logged: true,
                });
            }
        }
    } else {
        manifest::Manifest::default()
    };
    // 2. A single-file AOF of Redis before 7.0 in `dir`: upgrade, as Redis does, when there is
    // no AOF directory, or no manifest, or only the manifest of an upgrade interrupted before
    // it moved the file (its one base named like the old file, which the directory lacks).
    if legacy_aof(srv, &filename).is_some() {
        let interrupted = m.incrs.is_empty()
            && m.base.as_ref().is_some_and(|b| b.name == filename)
            && !dir.join(&filename).exists();
        if !dir.is_dir() || m.is_empty() || interrupted {
            m = upgrade_legacy_aof(srv, &dir, &filename, m)?;
        }
    }
    if dir.exists() {
        rewrite::remove_temp_files(&dir);
    }
    // 3. Replay.
    let mut sizes = Vec::new();
    if !m.is_empty() {
        inner.loading.store(true, Ordering::SeqCst);
        let started = Instant::now();
        // On failure `loading` stays set until the process exits (see the RDB case above).
        let (total_cmds, s) = replay(srv, &dir, &m)?;
        sizes = s;
        tracing::info!(
            "DB loaded from append only file: {:.3} seconds ({total_cmds} commands)",
            started.elapsed().as_secs_f64()
        );
    }
    inner
        .dirty_base
        .store(srv.stats.dirty.get(), Ordering::Relaxed);
    // 4. Open the AOF for appending (Redis's aofOpenIfNeededOnServerStart).
    create_aof_dir(&dir).map_err(|e| {
        format!(
            "Can't open or create append-only dir {}: {}",
            dir.display(),
            crate::util::strerror(&e)
        )
    })?;
    if m.is_empty() {
        // Starting from an empty dataset: a base file holding it, in the configured format.
        let preamble = srv.config.flag(dir::AOF_USE_RDB_PREAMBLE);
        let name = m.next_base(&filename, preamble);
        let size = rewrite::write_base_file(srv, &dir, &name, preamble)
            .map_err(|e| format!("Can't create the AOF base file {name}: {e}"))?;
        sizes = vec![size];
        tracing::info!(
            "Creating AOF base file {} on server start",
            m.base.as_ref().map(|b| b.name.as_str()).unwrap_or("")
        );
    }
    let had_incr = !m.incrs.is_empty();
    if !had_incr {
        m.next_incr(&filename);
        sizes.push(0);
    }
    let last = m.incrs.last().map(|p| p.name.clone()).unwrap_or_default();
    let out = open_append(&dir.join(&last)).map_err(|e| {
        format!(
            "Can't open the append-only file {last}: {}",
            crate::util::strerror(&e)
        )
    })?;
    // 5. The manifest is written; history files a rewrite left are deleted below, unless
    // aof-disable-auto-gc keeps them.
    manifest::write(&dir, &filename, &m).map_err(|e| {
        format!(
            "Can't write the AOF manifest: {}",
            crate::util::strerror(&e)
        )
    })?;
    if had_incr {
        tracing::info!("Opening AOF incr file {last} on server start");
    } else {
        tracing::info!("Creating AOF incr file {last} on server start");
    }
    {
        let mut st = inner.state.lock();
        st.base_size = if m.base.is_some() {
            sizes.first().copied().unwrap_or(0)
        } else {
            0
        };
        let incr_total: u64 = sizes.iter().skip(usize::from(m.base.is_some())).sum();
        st.other_incr_size = incr_total.saturating_sub(out.size);
        st.rewrite_base_size = st.base_size + incr_total;
        st.dir = dir;
        st.filename = filename;
        st.manifest = m;
    }
    *inner.out.lock() = Some(out);
    {
        let mut f = inner.feed.lock();
        f.db = None;
        f.buf.clear();
        f.ts = 0;
        inner.written.store(f.seq, Ordering::SeqCst);
        inner.synced.store(f.seq, Ordering::SeqCst);
    }
    inner.enabled.store(true, Ordering::SeqCst);
    rewrite::delete_history(srv);
    // Clients get -LOADING until the AOF is open for appending, as Redis serves none before.
    inner.loading.store(false, Ordering::SeqCst);
    Ok(())
}

/// A Redis 6-style single-file AOF, `<dir>/<appendfilename>`, if there is one.
fn legacy_aof(srv: &Server, filename: &str) -> Option<PathBuf> {
    let dir = srv.config.text(dir::DIR);
    let p = std::path::Path::new(&dir).join(filename);
    p.is_file().then_some(p)
}

/// Upgrade a single-file AOF (Redis before 7.0) to the multi-part layout, as Redis 7 does on
/// its first start: the manifest names the old file as the base (seq 1), then the file moves
/// into the AOF directory unchanged (a file with an RDB preamble keeps it: the loader reads
/// both parts). The incremental file is created when the AOF is opened. Manifest first: a crash
/// before the move leaves an interrupted upgrade, which the next start completes.
fn upgrade_legacy_aof(
    srv: &Server,
    aofdir: &std::path::Path,
    filename: &str,
    mut m: manifest::Manifest,
) -> Result<manifest::Manifest, String> {
    let Some(old) = legacy_aof(srv, filename) else {
        return Err("no single-file AOF to upgrade".into());
    };
    create_aof_dir(aofdir).map_err(|e| {
        format!(
            "Can't open or create append-only dir {}: {}",
            aofdir.display(),
            crate::util::strerror(&e)
        )
    })?;
    m.base = Some(manifest::Part {
        name: filename.to_string(),
        seq: 1,
    });
    m.curr_base_seq = m.curr_base_seq.max(1);
    manifest::write(aofdir, filename, &m).map_err(|e| {
        format!(
            "Can't write the AOF manifest: {}",
            crate::util::strerror(&e)
        )
    })?;
    std::fs::rename(&old, aofdir.join(filename))
        .and_then(|_| manifest::sync_dir(aofdir))
        .map_err(|e| {
            format!(
                "Error trying to move the old AOF file {filename} into dir {}: {}",
                aofdir.display(),
                crate::util::strerror(&e)
            )
        })?;
    tracing::info!(
        "Successfully migrated an old-style AOF file ({filename}) into the AOF directory ({}).",
        aofdir.display()
    );
    Ok(m)
}

/// A replica's connection closed: forget it. When it was the last one waiting for a BGSAVE
/// to disk and no save points are set, that BGSAVE is of no use and is stopped, so the next
/// full synchronization (or BGSAVE) can fork at once (Redis's freeClient).
pub(crate) fn forget_replica(srv: &Server, client_id: u64) {
    if srv.repl.remove_replica(client_id)
        && snapshot::save_points(srv).is_empty()
        && !srv.aof.inner.snap.child_to_sockets.load(Ordering::SeqCst)
    {
        child::signal_bgsave(srv);
    }
}

/// Seconds between BGSAVE attempts after a failed one (Redis's CONFIG_BGSAVE_RETRY_DELAY).
const BGSAVE_RETRY_DELAY: i64 = 5;

/// Save points, scheduled BGSAVEs and rewrites: called from the persistence thread's 100 ms
/// tick. It starts either kind of child, in Redis's order of preference, so it sits here above
/// both (`snapshot`, `rewrite`), which share only the rules of `child`.
fn children_cron(srv: &Server) {
    let st = &srv.aof.inner.snap;
    if child::bgsave_running(srv) || srv.aof.inner.rewriting.load(Ordering::Relaxed) {
        return;
    }
    if srv.aof.loading() {
        return;
    }
    // Replicas waiting for an image (a BGSAVE was running when they asked, or a diskless
    // transfer waits `repl-diskless-sync-delay` for more replicas to share it).
    if let Some(to_sockets) = srv.repl.replication_bgsave_due(
        srv.config.flag(dir::REPL_DISKLESS_SYNC),
        srv.config.int(dir::REPL_DISKLESS_SYNC_DELAY),
        srv.config.int(dir::REPL_DISKLESS_SYNC_MAX_REPLICAS),
    ) {
        if let Err(e) = snapshot::bgsave_for_replicas(srv, to_sockets) {
            tracing::warn!("BGSAVE for replication failed: {e}");
            srv.repl.bgsave_failed_to_start();
        }
        return;
    }
    let now = crate::clock::unix_ms() / 1000;
    // A scheduled rewrite (the flag stays set until one has forked, as Redis's).
    if st.rewrite_scheduled.load(Ordering::SeqCst) && !rewrite::limited(srv) {
        if let Err(e) = rewrite::start(srv) {
            tracing::warn!("scheduled AOF rewrite not started: {e}");
        }
        return;
    }
    if st.scheduled.swap(false, Ordering::SeqCst) {
        if let Err(e) = snapshot::bgsave_start(srv) {
            tracing::warn!("scheduled BGSAVE not started: {e}");
        }
        return;
    }
    let changes = snapshot::changes_since_save(srv);
    let last = srv.lastsave.load(Ordering::Relaxed);
    let retry_ok = st.last_bgsave_ok.load(Ordering::Relaxed)
        || now - st.last_bgsave_try.load(Ordering::Relaxed) > BGSAVE_RETRY_DELAY;
    for (secs, min_changes) in snapshot::save_points(srv) {
        if changes >= min_changes && now - last > secs && retry_ok {
            tracing::info!("{min_changes} changes in {secs} seconds. Saving...");
            if let Err(e) = snapshot::bgsave_start(srv) {
                tracing::warn!("BGSAVE for a save point not started: {e}");
            }
            return;
        }
    }
}

/// Before exit (SHUTDOWN, SIGTERM, SIGINT): the RDB save when save points exist (unless the
/// SHUTDOWN command already did it or said NOSAVE), then flush and fsync the AOF.
pub fn shutdown(srv: &Server) {
    let inner = &srv.aof.inner;
    if !inner.snap.shutdown_handled.swap(true, Ordering::SeqCst) {
        if let Err(e) = snapshot::shutdown_save(srv, false, false, true) {
            tracing::warn!("Exiting without the final RDB snapshot: {e}");
        }
    }
    child::kill_rewrite(srv);
    if !inner.enabled.load(Ordering::Acquire) {
        return;
    }
    tracing::info!("Calling fsync() on the AOF file.");
    inner.write_pending(true);
}

/// INFO persistence fields, in Redis's order.
pub fn info_fields(srv: &Server) -> Vec<(String, String)> {
    let inner = &srv.aof.inner;
    let enabled =
        inner.enabled.load(Ordering::Relaxed) || inner.waiting_rewrite.load(Ordering::Relaxed);
    let scheduled = inner.snap.rewrite_scheduled.load(Ordering::Relaxed);
    let rewriting = inner.rewriting.load(Ordering::Relaxed);
    let loading = inner.loading.load(Ordering::Relaxed);
    let cur_size = inner.current_size();
    let buffer_len = inner.feed.lock().buf.len();
    let st = inner.state.lock();
    let mut v: Vec<(&str, String)> = vec![
        ("loading", u8::from(loading).to_string()),
        (
            "async_loading",
            u8::from(inner.async_loading.load(Ordering::Relaxed)).to_string(),
        ),
    ];
    v.extend(snapshot::info_current(srv));
    v.extend(snapshot::info_fields(srv));
    v.extend([
        ("aof_enabled", u8::from(enabled).to_string()),
        ("aof_rewrite_in_progress", u8::from(rewriting).to_string()),
        ("aof_rewrite_scheduled", u8::from(scheduled).to_string()),
        (
            "aof_last_rewrite_time_sec",
            st.last_rewrite_secs.to_string(),
        ),
        (
            "aof_current_rewrite_time_sec",
            st.rewrite_started
                .filter(|_| rewriting)
                .map(|t| t.elapsed().as_secs() as i64)
                .unwrap_or(-1)
                .to_string(),
        ),
        (
            "aof_last_bgrewrite_status",
            if st.last_rewrite_ok { "ok" } else { "err" }.into(),
        ),
        ("aof_rewrites", st.rewrites.to_string()),
        (
            "aof_rewrites_consecutive_failures",
            st.consecutive_failures.to_string(),
        ),
        (
            "aof_last_write_status",
            if inner.last_write_ok.load(Ordering::Relaxed) {
                "ok"
            } else {
                "err"
            }
            .into(),
        ),
        ("aof_last_cow_size", st.last_cow.to_string()),
        ("module_fork_in_progress", "0".into()),
        ("module_fork_last_cow_size", "0".into()),
    ]);
    if enabled {
        v.push(("aof_current_size", cur_size.to_string()));
        v.push(("aof_base_size", st.base_size.to_string()));
        v.push(("aof_pending_rewrite", u8::from(scheduled).to_string()));
        v.push(("aof_buffer_length", buffer_len.to_string()));
        v.push((
            "aof_pending_bio_fsync",
            u8::from(inner.fsync_in_progress.load(Ordering::Relaxed)).to_string(),
        ));
        v.push(("aof_delayed_fsync", "0".into()));
    }
    v.extend(snapshot::info_loading(srv));
    v.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// BGREWRITEAOF when no child runs: start a rewrite now.
pub fn bgrewriteaof(srv: &Server) -> Reply {
    match rewrite::start(srv) {
        Ok(()) => Reply::Status("Background append only file rewriting started"),
        Err(_) => Reply::error(
            "ERR Can't execute an AOF background rewriting. Please check the server logs for more information.",
        ),
    }
}

/// Turning the AOF on failed where it must not stay off (after a replica's full sync): wait for
/// the first rewrite, which the cron starts again and again until one forks.
pub(crate) fn retry_appendonly(srv: &Server) {
    let inner = &srv.aof.inner;
    inner.waiting_rewrite.store(true, Ordering::SeqCst);
    inner.snap.rewrite_scheduled.store(true, Ordering::SeqCst);
}

/// CONFIG SET appendonly yes|no at run time (Redis's startAppendOnly / stopAppendOnly).
/// `in_exec`: inside a transaction, which holds every shard this would lock, the rewrite that
/// turns the AOF on is scheduled instead.
pub fn set_appendonly(srv: &Server, on: bool, in_exec: bool) -> Result<(), String> {
    let inner = &srv.aof.inner;
    if on {
        if inner.enabled.load(Ordering::SeqCst) || inner.waiting_rewrite.load(Ordering::SeqCst) {
            return Ok(());
        }
        inner.mode.store(
            fsync_mode(&srv.config.text(dir::APPENDFSYNC)),
            Ordering::Relaxed,
        );
        start_writer(srv);
        inner.waiting_rewrite.store(true, Ordering::SeqCst);
        if child::bgsave_running(srv) {
            inner.snap.rewrite_scheduled.store(true, Ordering::SeqCst);
            tracing::warn!("AOF was enabled but there is already another background operation. An AOF background was scheduled to start when possible.");
        } else if in_exec {
            inner.snap.rewrite_scheduled.store(true, Ordering::SeqCst);
            tracing::warn!("AOF was enabled during a transaction. An AOF background was scheduled to start when possible.");
        } else {
            if inner.rewriting.load(Ordering::SeqCst) {
                tracing::warn!("AOF was enabled but there is already an AOF rewriting in background. Stopping background AOF and starting a rewrite now.");
                child::kill_rewrite(srv);
            }
            if let Err(e) = rewrite::start(srv) {
                inner.waiting_rewrite.store(false, Ordering::SeqCst);
                tracing::warn!("Redis needs to enable the AOF but can't trigger a background AOF rewrite operation. Check the above logs for more info about the error.");
                return Err(e);
            }
        }
        if !inner.last_write_ok.swap(true, Ordering::SeqCst) {
            tracing::warn!("AOF reopen, just ignore the last error.");
        }
        Ok(())
    } else {
        if !inner.enabled.load(Ordering::SeqCst) && !inner.waiting_rewrite.load(Ordering::SeqCst) {
            return Ok(());
        }
        inner.write_pending(true);
        let mut out = inner.out.lock();
        {
            let mut f = inner.feed.lock();
            inner.enabled.store(false, Ordering::SeqCst);
            f.buf.clear();
            f.db = None;
        }
        let had_temp_incr = inner.waiting_rewrite.swap(false, Ordering::SeqCst) && out.is_some();
        *out = None;
        drop(out);
        inner.durable.notify_waiters();
        inner.snap.rewrite_scheduled.store(false, Ordering::SeqCst);
        child::kill_rewrite(srv);
        if had_temp_incr {
            let (aofdir, filename) = paths(srv);
            let _ = std::fs::remove_file(aofdir.join(rewrite::temp_incr_name(&filename)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding() {
        let mut v = Vec::new();
        encode_command(
            &mut v,
            &[Bytes::from("SET"), Bytes::from("k"), Bytes::from("")],
        );
        assert_eq!(v, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
        let mut v = Vec::new();
        encode_select(&mut v, 12);
        assert_eq!(v, b"*2\r\n$6\r\nSELECT\r\n$2\r\n12\r\n");
    }
}
