//! AOF rewrite: BGREWRITEAOF, automatic rewrites, and CONFIG SET appendonly yes, by fork as
//! Redis 7.0 does it (aof.c's rewriteAppendOnlyFileBackground and
//! backgroundRewriteDoneHandler).
//!
//! Starting ([`start`]): every shard is locked (as EXEC locks them), so no command runs; at
//! that instant the log switches to a new incremental file, listed in the manifest after the
//! current ones (AOF on), or to the temporary `temp-<appendfilename>.incr` (AOF being turned
//! on: nothing lists it until the rewrite succeeds); then the process forks and the locks are
//! released. The child holds the instant in its copy-on-write image of memory and writes it to
//! `temp-rewriteaof-bg-<pid>.aof` in `dir` (an RDB image with `aof-use-rdb-preamble yes`, else
//! RESP commands), fsynced; it touches no lock another thread could have held at the fork
//! (everything it reads from the configuration is read before). A killed or failed child costs
//! nothing: its temporary file is removed, and the files the manifest lists still replay
//! everything.
//!
//! Finishing ([`reap`], on a waiter thread): the temporary file becomes the next base, the old
//! base and the incremental files the rewrite covered become history (newest first), the
//! manifest is replaced atomically, and history files are deleted unless
//! `aof-disable-auto-gc yes`. Turning the AOF on completes only here: the temporary incremental
//! file is renamed into the manifest's next one; on failure it is dropped and the rewrite is
//! scheduled again.
//!
//! Why a replay of the new base then the files after it is exact: the base is the state at the
//! switch, and every command after the switch ran after it (it needed a shard lock) and was fed
//! to the new file only.
//!
//! After three failures in a row, automatic and scheduled rewrites wait 1, 2, 4 ... 60 minutes
//! (Redis's aofRewriteLimited); BGREWRITEAOF still starts one at once.

use super::child;
use super::manifest;
use super::snapshot::{self, SaveOpts};
use super::{create_aof_dir, encode_command, encode_select, open_append, paths};
use crate::config::dir;
use crate::keyspace::Shard;
use crate::state::Server;
use crate::types::Value;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Items per command in the base file (Redis's AOF_REWRITE_ITEMS_PER_CMD).
const ITEMS_PER_CMD: usize = 64;

/// Failures in a row after which automatic rewrites are delayed (AOF_REWRITE_LIMITE_THRESHOLD).
const LIMIT_THRESHOLD: u64 = 3;
/// The longest such delay, in minutes.
const LIMIT_MAX_MINUTES: i64 = 60;

/// The temporary incremental file of an AOF being turned on (Redis's getTempIncrAofName).
pub fn temp_incr_name(filename: &str) -> String {
    format!("temp-{filename}.incr")
}

/// The child's finished base file, in `dir`, before the parent moves it into the AOF directory.
fn temp_bg_name(pid: i32) -> String {
    format!("temp-rewriteaof-bg-{pid}.aof")
}

/// The child's file while it writes it.
fn temp_child_name(pid: i32) -> String {
    format!("temp-rewriteaof-{pid}.aof")
}

/// Remove temporary files a killed rewrite left behind.
pub fn remove_temp_files(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with("temp-rewriteaof-") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// `dir`: where the child writes its temporary file (Redis's working directory).
fn server_dir(srv: &Server) -> PathBuf {
    let d = srv.config.text(dir::DIR);
    PathBuf::from(if d.is_empty() { ".".to_string() } else { d })
}

/// What a base file is written from, read from the configuration before any fork.
pub(crate) struct BaseJob {
    pub preamble: bool,
    pub opts: SaveOpts,
    pub timestamps: bool,
    /// Unix ms of the instant: keys already expired then are left out of a RESP base.
    pub now: i64,
    pub used_mem: usize,
}

impl BaseJob {
    pub(crate) fn from_config(srv: &Server) -> BaseJob {
        BaseJob {
            preamble: srv.config.flag(dir::AOF_USE_RDB_PREAMBLE),
            opts: SaveOpts::from_config(srv, true),
            timestamps: srv.config.flag(dir::AOF_TIMESTAMP_ENABLED),
            now: crate::clock::unix_ms(),
            used_mem: crate::alloc::used_memory(),
        }
    }
}

/// Write the base image of `dbs` (database i's shards, locked by the caller) to `w`: an RDB
/// image (`aof-base` 1) or, as Redis's RESP base, the time it was taken
/// (`aof-timestamp-enabled`), the FUNCTION libraries as FUNCTION LOAD commands, then the keys.
fn write_base_image(
    w: BufWriter<File>,
    dbs: &[Vec<&Shard>],
    job: BaseJob,
) -> Result<BufWriter<File>, String> {
    let err = io("can't write the rewrite file");
    if job.preamble {
        let (w, _) =
            snapshot::write_image_reporting(w, dbs, job.opts, job.used_mem, None).map_err(&err)?;
        return Ok(w);
    }
    let mut w = w;
    let mut buf = Vec::with_capacity(1 << 16);
    if job.timestamps {
        buf.extend_from_slice(format!("#TS:{}\r\n", job.now / 1000).as_bytes());
    }
    for code in &job.opts.functions {
        encode_command(&mut buf, &[&b"FUNCTION"[..], b"LOAD", &code[..]]);
    }
    let delay = job.opts.key_delay;
    for (db, shards) in dbs.iter().enumerate() {
        if shards.iter().all(|s| s.is_empty()) {
            continue;
        }
        encode_select(&mut buf, db);
        for shard in shards {
            serialize_shard(shard, job.now, &mut buf, &mut w, &mut |_| {
                crate::util::debug_delay(delay);
                true
            })?;
        }
    }
    w.write_all(&buf).map_err(err)?;
    Ok(w)
}

/// A base file named `name` in `dir` holding the data as it is now (the AOF's first base when
/// the server starts without one), written in the foreground with every shard locked: to a
/// temporary file, fsynced, then renamed. Its size.
pub(crate) fn write_base_file(
    srv: &Server,
    dir: &Path,
    name: &str,
    preamble: bool,
) -> Result<u64, String> {
    let mut job = BaseJob::from_config(srv);
    job.preamble = preamble;
    let temp = server_dir(srv).join(temp_child_name(std::process::id() as i32));
    let guards = child::lock_all(srv);
    let dbs: Vec<Vec<&Shard>> = guards
        .iter()
        .map(|g| g.iter().map(|s| &**s).collect())
        .collect();
    let r = write_temp_file(&temp, &dbs, job);
    drop(dbs);
    drop(guards);
    let size = r?;
    std::fs::rename(&temp, dir.join(name))
        .and_then(|_| manifest::sync_dir(dir))
        .map_err(|e| {
            let _ = std::fs::remove_file(&temp);
            format!("can't write the new base file: {e}")
        })?;
    Ok(size)
}

/// Write the base image into `temp`, fsynced. Its size. The file is removed on failure.
fn write_temp_file(temp: &Path, dbs: &[Vec<&Shard>], job: BaseJob) -> Result<u64, String> {
    let r = (|| {
        let f = File::create(temp).map_err(io("can't create the temporary rewrite file"))?;
        let w = write_base_image(BufWriter::with_capacity(1 << 16, f), dbs, job)?;
        let f = w
            .into_inner()
            .map_err(|e| format!("can't write the rewrite file: {}", e.into_error()))?;
        f.sync_all().map_err(io("can't fsync the rewrite file"))?;
        f.metadata()
            .map(|m| m.len())
            .map_err(io("can't stat the rewrite file"))
    })();
    if r.is_err() {
        let _ = std::fs::remove_file(temp);
    }
    r
}

/// Start a rewrite (Redis's rewriteAppendOnlyFileBackground). Err when another child runs or
/// the switch or the fork failed (logged; the caller words the reply).
pub fn start(srv: &Server) -> Result<(), String> {
    let inner = &srv.aof.inner;
    let snap = &inner.snap;
    // One child at a time: a BGSAVE and a rewrite starting together must not both fork.
    let _one_child = snap.fork_lock.lock();
    if inner.rewriting.load(Ordering::SeqCst) || child::bgsave_running(srv) {
        return Err("Another child process is active".into());
    }
    let Some(arc) = srv.arc() else {
        return Err("no server handle".into());
    };
    let (aofdir, filename) = paths(srv);
    if let Err(e) = create_aof_dir(&aofdir) {
        let msg = format!(
            "Can't open or create append-only dir {}: {}",
            aofdir.display(),
            crate::util::strerror(&e)
        );
        tracing::warn!("{msg}");
        inner.state.lock().last_rewrite_ok = false;
        return Err(msg);
    }
    let dir = server_dir(srv);
    let guards = child::lock_all(srv);
    // The instant: no command runs while every shard is locked.
    if let Err(e) = switch_incr(srv, &aofdir, &filename) {
        drop(guards);
        tracing::warn!("{e}");
        inner.state.lock().last_rewrite_ok = false;
        return Err(e);
    }
    let job = BaseJob::from_config(srv);
    let preamble = job.preamble;
    inner.state.lock().rewrites += 1;
    let forked = child::fork_child(srv, "redis-aof-rewrite", |report_fd| {
        let me = std::process::id() as i32;
        let dbs: Vec<Vec<&Shard>> = guards
            .iter()
            .map(|g| g.iter().map(|s| &**s).collect())
            .collect();
        let temp = dir.join(temp_child_name(me));
        write_temp_file(&temp, &dbs, job)
            .and_then(|_| {
                std::fs::rename(&temp, dir.join(temp_bg_name(me)))
                    .map_err(io("can't rename the rewrite file"))
            })
            .map_err(|e| {
                let _ = std::fs::remove_file(&temp);
                format!("Background AOF rewrite error: {e}")
            })?;
        child::child_report(report_fd, child::REPORT_FINAL, 0, child::private_dirty());
        Ok(())
    });
    drop(guards);
    let (pid, read_fd) = match forked {
        Ok(x) => x,
        Err(e) => {
            tracing::warn!("Can't rewrite append only file in background: fork: {e}");
            inner.state.lock().last_rewrite_ok = false;
            stop_waiting_rewrite(srv, &aofdir, &filename);
            return Err(format!("fork: {e}"));
        }
    };
    {
        let mut st = inner.state.lock();
        st.rewrite_started = Some(Instant::now());
        st.rewrite_preamble = preamble;
    }
    inner.rewrite_child.store(pid, Ordering::SeqCst);
    inner.rewrite_cancel.store(false, Ordering::SeqCst);
    inner.rewriting.store(true, Ordering::SeqCst);
    snap.rewrite_scheduled.store(false, Ordering::SeqCst);
    tracing::info!("Background append only file rewriting started by pid {pid}");
    let r = std::thread::Builder::new()
        .name("aof-rewrite-wait".into())
        .spawn(move || reap(&arc, pid, read_fd, &dir));
    if let Err(e) = r {
        tracing::warn!("can't start the AOF rewrite waiter thread: {e}");
    }
    Ok(())
}

/// At the rewrite's instant (every shard locked): where the log goes from now on. AOF on: a new
/// incremental file, listed in the manifest (written to disk first, so a crash still replays
/// everything); AOF being turned on: the temporary incremental file, and logging starts; AOF
/// off: nothing.
fn switch_incr(srv: &Server, aofdir: &Path, filename: &str) -> Result<(), String> {
    let inner = &srv.aof.inner;
    let create = |name: &str| {
        let path = aofdir.join(name);
        File::create(&path)
            .and_then(|_| open_append(&path))
            .map_err(|e| {
                format!(
                    "Can't open the append-only file {name}: {}",
                    crate::util::strerror(&e)
                )
            })
    };
    if inner.waiting_rewrite.load(Ordering::SeqCst) {
        let name = temp_incr_name(filename);
        let new = create(&name)?;
        tracing::info!("Creating AOF incr file {name} on background rewrite");
        let mut out = inner.out.lock();
        *out = Some(new);
        let mut f = inner.feed.lock();
        f.buf.clear();
        f.db = None;
        f.ts = 0;
        inner.written.store(f.seq, Ordering::SeqCst);
        inner.synced.store(f.seq, Ordering::SeqCst);
        inner.enabled.store(true, Ordering::SeqCst);
        return Ok(());
    }
    if !inner.enabled.load(Ordering::SeqCst) {
        return Ok(());
    }
    // Everything fed so far belongs to the old file (fsynced first under `always`, where
    // clients wait for it; else in the background below, as Redis's bio close job).
    let always = inner.mode.load(Ordering::Relaxed) == super::FSYNC_ALWAYS;
    if !inner.write_pending(always) {
        return Err("Can't flush the AOF before switching to a new incremental file".into());
    }
    let mut m = inner.state.lock().manifest.clone();
    let name = m.next_incr(filename);
    let new = create(&name)?;
    if let Err(e) = manifest::write(aofdir, filename, &m) {
        let _ = std::fs::remove_file(aofdir.join(&name));
        return Err(format!(
            "Can't persist the AOF manifest: {}",
            crate::util::strerror(&e)
        ));
    }
    tracing::info!("Creating AOF incr file {name} on background rewrite");
    let mut out = inner.out.lock();
    let old = out.replace(new);
    inner.feed.lock().db = None;
    drop(out);
    let mut st = inner.state.lock();
    st.manifest = m;
    if let Some(old) = old {
        st.other_incr_size += old.size;
        if !always {
            let file = old.file;
            let _ = std::thread::Builder::new()
                .name("aof-close".into())
                .spawn(move || {
                    if let Err(e) = file.sync_data() {
                        tracing::warn!("Fail to fsync the previous AOF file: {e}");
                    }
                });
        }
    }
    Ok(())
}

/// The rewrite that was to turn the AOF on could not start: logging stops again and the
/// temporary incremental file goes.
fn stop_waiting_rewrite(srv: &Server, aofdir: &Path, filename: &str) {
    let inner = &srv.aof.inner;
    if !inner.waiting_rewrite.load(Ordering::SeqCst) {
        return;
    }
    let mut out = inner.out.lock();
    inner.enabled.store(false, Ordering::SeqCst);
    *out = None;
    inner.feed.lock().buf.clear();
    drop(out);
    inner.durable.notify_waiters();
    let name = temp_incr_name(filename);
    tracing::info!("Removing the temp incr aof file {name} in the background");
    let _ = std::fs::remove_file(aofdir.join(name));
}

/// Wait for the rewrite child, then finish the rewrite or clean up after it (Redis's
/// backgroundRewriteDoneHandler).
fn reap(srv: &Server, pid: i32, read_fd: i32, dir: &Path) {
    let inner = &srv.aof.inner;
    let (status, cow) = child::wait_child(pid, read_fd);
    let cancelled = inner.rewrite_cancel.load(Ordering::SeqCst);
    let ok =
        !cancelled && status != -1 && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    let (aofdir, filename) = paths(srv);
    let temp = dir.join(temp_bg_name(pid));
    if ok {
        tracing::info!("Background AOF rewrite terminated with success");
        inner.state.lock().last_cow = cow;
        match finish(srv, &temp, &aofdir, &filename) {
            Ok(()) => {
                let mut st = inner.state.lock();
                st.last_rewrite_ok = true;
                st.consecutive_failures = 0;
                tracing::info!("Background AOF rewrite finished successfully");
                inner.waiting_rewrite.store(false, Ordering::SeqCst);
            }
            Err(e) => {
                tracing::warn!("{e}");
                let mut st = inner.state.lock();
                st.last_rewrite_ok = false;
                st.consecutive_failures += 1;
            }
        }
    } else if status != -1 && libc::WIFEXITED(status) {
        let mut st = inner.state.lock();
        st.last_rewrite_ok = false;
        st.consecutive_failures += 1;
        tracing::warn!("Background AOF rewrite terminated with error");
    } else {
        let sig = if status != -1 && libc::WIFSIGNALED(status) {
            libc::WTERMSIG(status)
        } else {
            libc::SIGUSR1
        };
        // A child the server stopped itself (SIGUSR1) is neither a success nor an error.
        if sig != libc::SIGUSR1 && !cancelled {
            let mut st = inner.state.lock();
            st.last_rewrite_ok = false;
            st.consecutive_failures += 1;
        }
        tracing::warn!("Background AOF rewrite terminated by signal {sig}");
    }
    // Cleanup, whatever happened.
    let _ = std::fs::remove_file(&temp);
    let _ = std::fs::remove_file(dir.join(temp_child_name(pid)));
    let waiting = inner.waiting_rewrite.load(Ordering::SeqCst) && !cancelled;
    if waiting {
        stop_waiting_rewrite(srv, &aofdir, &filename);
    }
    {
        let mut st = inner.state.lock();
        let started = st.rewrite_started.take();
        st.last_rewrite_secs = started.map(|t| t.elapsed().as_secs() as i64).unwrap_or(-1);
    }
    if waiting {
        // The AOF is still to be turned on: try again from the cron.
        inner.snap.rewrite_scheduled.store(true, Ordering::SeqCst);
    }
    inner.rewrite_child.store(0, Ordering::SeqCst);
    inner.rewriting.store(false, Ordering::SeqCst);
}

/// The child succeeded: its file becomes the new base, the manifest is replaced, history goes.
fn finish(srv: &Server, temp: &Path, aofdir: &Path, filename: &str) -> Result<(), String> {
    let inner = &srv.aof.inner;
    let preamble = inner.state.lock().rewrite_preamble;
    let mut m = inner.state.lock().manifest.clone();
    let fail = |what: &str, e: std::io::Error| format!("{what}: {}", crate::util::strerror(&e));
    let base = m.next_base(filename, preamble);
    let base_path = aofdir.join(&base);
    std::fs::rename(temp, &base_path).map_err(|e| {
        fail(
            &format!(
                "Error trying to rename the temporary AOF base file {} into {base}",
                temp.display()
            ),
            e,
        )
    })?;
    tracing::info!(
        "Successfully renamed the temporary AOF base file {} into {base}",
        temp.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default()
    );
    let waiting = inner.waiting_rewrite.load(Ordering::SeqCst);
    let mut new_incr = None;
    if waiting {
        let temp_incr = temp_incr_name(filename);
        let name = m.next_incr(filename);
        if let Err(e) = std::fs::rename(aofdir.join(&temp_incr), aofdir.join(&name)) {
            let _ = std::fs::remove_file(&base_path);
            return Err(fail(
                &format!(
                    "Error trying to rename the temporary AOF incr file {temp_incr} into {name}"
                ),
                e,
            ));
        }
        tracing::info!("Successfully renamed the temporary AOF incr file {temp_incr} into {name}");
        new_incr = Some(name);
    }
    let logging = inner.out.lock().is_some();
    m.incrs_to_history(logging);
    if let Err(e) = manifest::write(aofdir, filename, &m) {
        let _ = std::fs::remove_file(&base_path);
        if let Some(n) = &new_incr {
            let _ = std::fs::remove_file(aofdir.join(n));
        }
        return Err(fail("Can't persist the AOF manifest", e));
    }
    let base_size = std::fs::metadata(&base_path).map(|m| m.len()).unwrap_or(0);
    let cur = inner.out.lock().as_ref().map(|o| o.size).unwrap_or(0);
    {
        let mut st = inner.state.lock();
        st.manifest = m;
        st.dir = aofdir.to_path_buf();
        st.filename = filename.to_string();
        if logging {
            st.base_size = base_size;
            st.other_incr_size = 0;
            st.rewrite_base_size = base_size + cur;
        }
    }
    delete_history(srv);
    Ok(())
}

/// Delete the history files the manifest lists and write it without them, unless
/// `aof-disable-auto-gc yes` (Redis's aofDelHistoryFiles). After a rewrite, at startup, on
/// DEBUG LOADAOF and when `aof-disable-auto-gc` is set back to no.
pub fn delete_history(srv: &Server) {
    if srv.config.flag(dir::AOF_DISABLE_AUTO_GC) {
        return;
    }
    let inner = &srv.aof.inner;
    let mut st = inner.state.lock();
    if st.manifest.history.is_empty() {
        return;
    }
    let (aofdir, filename) = paths(srv);
    for h in std::mem::take(&mut st.manifest.history) {
        tracing::info!("Removing the history file {} in the background", h.name);
        let _ = std::fs::remove_file(aofdir.join(&h.name));
    }
    if let Err(e) = manifest::write(&aofdir, &filename, &st.manifest) {
        tracing::warn!(
            "Can't persist the AOF manifest: {}",
            crate::util::strerror(&e)
        );
    }
}

/// Whether automatic and scheduled rewrites must wait after repeated failures (Redis's
/// aofRewriteLimited): after LIMIT_THRESHOLD failures in a row, 1 minute, then 2, 4 ... up to
/// an hour. Logs when a new delay starts.
pub(crate) fn limited(srv: &Server) -> bool {
    let mut st = srv.aof.inner.state.lock();
    if st.consecutive_failures < LIMIT_THRESHOLD {
        st.limit_delay_minutes = 0;
        st.limit_next_try = 0;
        return false;
    }
    let now = crate::clock::unix_ms() / 1000;
    if st.limit_next_try != 0 {
        if now < st.limit_next_try {
            return true;
        }
        st.limit_next_try = 0;
        return false;
    }
    st.limit_delay_minutes = (st.limit_delay_minutes * 2).clamp(1, LIMIT_MAX_MINUTES);
    st.limit_next_try = now + st.limit_delay_minutes * 60;
    tracing::warn!(
        "Background AOF rewrite has repeatedly failed and triggered the limit, will retry in {} minutes",
        st.limit_delay_minutes
    );
    true
}

/// Start an automatic rewrite when the AOF grew past auto-aof-rewrite-percentage.
pub fn maybe_auto_rewrite(srv: &Server) {
    let inner = &srv.aof.inner;
    if !inner.enabled.load(Ordering::Relaxed)
        || inner.waiting_rewrite.load(Ordering::Relaxed)
        || inner.rewriting.load(Ordering::Relaxed)
        || child::bgsave_running(srv)
    {
        return;
    }
    let perc = srv.config.int(dir::AUTO_AOF_REWRITE_PERCENTAGE);
    let min = srv.config.int(dir::AUTO_AOF_REWRITE_MIN_SIZE).max(0) as u64;
    if perc <= 0 {
        return;
    }
    let cur = inner.current_size();
    if cur <= min {
        return;
    }
    let base = inner.state.lock().rewrite_base_size.max(1);
    let growth = (cur as i128 * 100 / base as i128) - 100;
    if growth >= perc as i128 && !limited(srv) {
        tracing::info!("Starting automatic rewriting of AOF on {growth}% growth");
        if let Err(e) = start(srv) {
            tracing::debug!("automatic AOF rewrite not started: {e}");
        }
    }
}

fn io(what: &str) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

fn spill(buf: &mut Vec<u8>, w: &mut BufWriter<File>) -> Result<(), String> {
    if buf.len() >= 1 << 16 {
        w.write_all(buf)
            .map_err(io("can't write the rewrite file"))?;
        buf.clear();
    }
    Ok(())
}

/// Emit `head` followed by items in batches of ITEMS_PER_CMD commands.
fn batched<'a>(
    head: &[u8],
    key: &[u8],
    items: impl Iterator<Item = Vec<std::borrow::Cow<'a, [u8]>>>,
    buf: &mut Vec<u8>,
    w: &mut BufWriter<File>,
) -> Result<(), String> {
    let mut argv: Vec<std::borrow::Cow<'a, [u8]>> = Vec::with_capacity(2 + 2 * ITEMS_PER_CMD);
    let mut n = 0;
    let start = |argv: &mut Vec<std::borrow::Cow<'a, [u8]>>| {
        argv.clear();
        argv.push(std::borrow::Cow::Owned(head.to_vec()));
        argv.push(std::borrow::Cow::Owned(key.to_vec()));
    };
    start(&mut argv);
    for it in items {
        argv.extend(it);
        n += 1;
        if n == ITEMS_PER_CMD {
            encode_command(buf, &argv);
            spill(buf, w)?;
            start(&mut argv);
            n = 0;
        }
    }
    if n > 0 {
        encode_command(buf, &argv);
    }
    spill(buf, w)
}

/// Append commands rebuilding every live key of `shard` to `buf`. `before_key` runs before
/// each key (the test pause); false from it stops the rewrite.
pub(crate) fn serialize_shard(
    shard: &Shard,
    now: i64,
    buf: &mut Vec<u8>,
    w: &mut BufWriter<File>,
    before_key: &mut dyn FnMut(&[u8]) -> bool,
) -> Result<(), String> {
    use std::borrow::Cow;
    for (key, e, expire_at) in shard.keys() {
        if e.has_expire() && expire_at <= now {
            continue;
        }
        if !before_key(key) {
            return Err("the rewrite was stopped".into());
        }
        match &e.value {
            Value::Str(v) => encode_command(buf, &[&b"SET"[..], key, &v[..]]),
            Value::List(l) => batched(
                b"RPUSH",
                key,
                l.iter().map(|i| vec![Cow::Borrowed(i)]),
                buf,
                w,
            )?,
            Value::Set(s) => batched(
                b"SADD",
                key,
                s.iter().map(|m| vec![Cow::Owned(m.to_vec())]),
                buf,
                w,
            )?,
            Value::Hash(h) => batched(
                b"HSET",
                key,
                h.iter()
                    .map(|(f, v)| vec![Cow::Borrowed(f), Cow::Borrowed(v)]),
                buf,
                w,
            )?,
            Value::ZSet(z) => batched(
                b"ZADD",
                key,
                z.iter().map(|(m, s)| {
                    vec![
                        Cow::Owned(crate::util::numtext::f64_to_vec(s)),
                        Cow::Borrowed(m),
                    ]
                }),
                buf,
                w,
            )?,
            Value::Stream(s) => {
                for cmd in super::rdb_stream::rewrite_commands(key, s) {
                    let argv: Vec<&[u8]> = cmd.iter().map(|a| &a[..]).collect();
                    encode_command(buf, &argv);
                    spill(buf, w)?;
                }
            }
        }
        if e.has_expire() {
            let at = expire_at.to_string();
            encode_command(buf, &[&b"PEXPIREAT"[..], key, at.as_bytes()]);
        }
        spill(buf, w)?;
    }
    Ok(())
}
