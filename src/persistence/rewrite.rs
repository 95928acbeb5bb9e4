//! AOF rewrite: BGREWRITEAOF, automatic rewrites, and CONFIG SET appendonly yes.
//!
//! A rewrite runs on its own thread:
//! 1. create the next incremental file and (AOF on) list it in the manifest after the current
//!    files, so a crash at any later point still replays everything;
//! 2. lock EVERY shard (in the global order, like EXEC), then switch logging to the new
//!    incremental file: what was buffered goes to the old file (fsynced), everything fed from
//!    now on goes to the new one;
//! 3. serialize the shards one by one into a temporary base file, RELEASING each shard as soon
//!    as it is written: with `aof-use-rdb-preamble yes` an RDB image (`<name>.<n>.base.rdb`,
//!    see [`super::snapshot`]), else RESP commands (SET / RPUSH / SADD / HSET / ZADD in batches
//!    of 64, then PEXPIREAT; already-expired keys are skipped);
//! 4. fsync, rename to `<name>.<n+1>.base.aof`, atomically replace the manifest with
//!    "new base + new incremental file", delete the old files.
//!
//! Why the replay (new base, then new incremental file) is exact: the snapshot is a single
//! point in time T (the switch, made while no command runs). A command that ran before T holds
//! its effects in the snapshot and was logged to the old files only. A command that runs after
//! T holds the locks of all its shards while running; each of those shards stays locked from T
//! until it has been serialized, so the command can only run once ALL its shards are already in
//! the base, i.e. the base never contains its effects, and it is logged to the new incremental
//! file only. So the base is the state at T and the new file holds exactly the commands after
//! T, in an order consistent with every shard's order. Writes to a shard wait at most until
//! that shard has been written out (early shards are released early).

use super::manifest::{self, Manifest, Part};
use super::{encode_command, encode_select, open_append, paths, Inner};
use crate::keyspace::Shard;
use crate::state::Server;
use crate::types::Value;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Items per command in the base file (Redis's AOF_REWRITE_ITEMS_PER_CMD).
const ITEMS_PER_CMD: usize = 64;

/// Why a rewrite stopped when `appendonly` was turned off under it.
const CANCELED: &str = "the rewrite was stopped: appendonly was turned off";

/// `rdb-key-save-delay` between two keys of a rewrite (Redis's child pauses the same way), in
/// slices short enough that turning `appendonly` off stops the rewrite at once. False when
/// the rewrite is to stop.
fn key_delay(usec: i64, cancel: &std::sync::atomic::AtomicBool) -> bool {
    if usec <= 0 {
        super::snapshot::debug_delay(usec);
        return !cancel.load(Ordering::Relaxed);
    }
    let until = Instant::now() + std::time::Duration::from_micros(usec as u64);
    loop {
        if cancel.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= until {
            return true;
        }
        std::thread::sleep((until - now).min(std::time::Duration::from_millis(10)));
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// BGREWRITEAOF / automatic: compact the AOF (or, AOF off, just write a base file).
    Rewrite,
    /// CONFIG SET appendonly yes: write a base from the current data and start logging.
    Enable,
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

/// Start a rewrite in the background.
pub fn spawn(srv: &Server, kind: Kind) -> Result<(), String> {
    let Some(arc) = srv.arc() else {
        return Err("Can't start the AOF rewrite: no server handle".into());
    };
    let inner = &srv.aof.inner;
    if inner
        .rewriting
        .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
        .is_err()
    {
        if kind == Kind::Rewrite {
            return Err("Background append only file rewriting already in progress".into());
        }
        inner.state.lock().scheduled = true;
    }
    inner.rewrite_cancel.store(false, Ordering::SeqCst);
    let r = std::thread::Builder::new()
        .name("aof-rewrite".into())
        .spawn(move || {
            let inner = &arc.aof.inner;
            // An enable that found a rewrite running waits for it, then takes over.
            while kind == Kind::Enable && !inner.state.lock().scheduled_taken(inner) {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let started = Instant::now();
            inner.state.lock().rewrite_started = Some(started);
            let r = run(&arc, kind);
            let mut st = inner.state.lock();
            st.rewrite_started = None;
            st.last_rewrite_secs = started.elapsed().as_secs() as i64;
            match r {
                Ok(()) => {
                    st.rewrites += 1;
                    st.consecutive_failures = 0;
                    st.last_rewrite_ok = true;
                    tracing::info!("Background AOF rewrite finished successfully");
                }
                Err(e) => {
                    st.consecutive_failures += 1;
                    st.last_rewrite_ok = false;
                    tracing::warn!("Background AOF rewrite failed: {e}");
                    if kind == Kind::Enable {
                        // Nothing lists the new file: logging into it would be lost.
                        drop(st);
                        let mut out = inner.out.lock();
                        inner.enabled.store(false, Ordering::SeqCst);
                        *out = None;
                        inner.durable.notify_waiters();
                    }
                }
            }
            inner.rewriting.store(false, Ordering::SeqCst);
        });
    if let Err(e) = r {
        inner.rewriting.store(false, Ordering::SeqCst);
        return Err(format!("Can't start the AOF rewrite thread: {e}"));
    }
    Ok(())
}

impl super::State {
    /// For a scheduled enable: claim the rewrite slot once it is free.
    fn scheduled_taken(&mut self, inner: &Inner) -> bool {
        if !self.scheduled {
            return true;
        }
        if inner
            .rewriting
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            self.scheduled = false;
            return true;
        }
        false
    }
}

/// Start an automatic rewrite when the AOF grew past auto-aof-rewrite-percentage.
pub fn maybe_auto_rewrite(srv: &Server) {
    let inner = &srv.aof.inner;
    if !inner.enabled.load(Ordering::Relaxed) || inner.rewriting.load(Ordering::Relaxed) {
        return;
    }
    let perc = srv.config.get_i64("auto-aof-rewrite-percentage");
    let min = srv.config.get_i64("auto-aof-rewrite-min-size").max(0) as u64;
    if perc <= 0 {
        return;
    }
    let cur = inner.current_size();
    if cur <= min {
        return;
    }
    let base = inner.state.lock().rewrite_base_size.max(1);
    let growth = (cur as i128 * 100 / base as i128) - 100;
    if growth >= perc as i128 {
        tracing::info!("Starting automatic rewriting of AOF on {growth}% growth");
        if let Err(e) = spawn(srv, Kind::Rewrite) {
            tracing::debug!("automatic AOF rewrite not started: {e}");
        }
    }
}

fn io(what: &str) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

fn run(srv: &Server, kind: Kind) -> Result<(), String> {
    let inner = &srv.aof.inner;
    let (dir, filename) = paths(srv);
    super::create_aof_dir(&dir).map_err(io("can't create the AOF directory"))?;
    let aof_on = kind == Kind::Enable || inner.enabled.load(Ordering::SeqCst);
    // The current manifest (from state when logging, else from disk: a previous run's files).
    let old: Manifest = if inner.enabled.load(Ordering::SeqCst) {
        inner.state.lock().manifest.clone()
    } else {
        manifest::read(&dir, &filename)
            .ok()
            .flatten()
            .unwrap_or_default()
    };
    let preamble = srv.config.get_bool("aof-use-rdb-preamble");
    let new_base = Part {
        name: if preamble {
            manifest::base_name_rdb(&filename, old.base_seq() + 1)
        } else {
            manifest::base_name(&filename, old.base_seq() + 1)
        },
        seq: old.base_seq() + 1,
    };
    let new_incr = Part {
        name: manifest::incr_name(&filename, old.max_incr_seq() + 1),
        seq: old.max_incr_seq() + 1,
    };

    // 1. The new incremental file, listed after the current ones (AOF already on).
    let mut new_out = None;
    if aof_on {
        File::create(dir.join(&new_incr.name))
            .map_err(io("can't create the new incremental AOF file"))?;
        manifest::sync_dir(&dir).map_err(io("can't fsync the AOF directory"))?;
        if kind == Kind::Rewrite {
            let mut m = old.clone();
            m.incrs.push(new_incr.clone());
            manifest::write(&dir, &filename, &m).map_err(io("can't write the AOF manifest"))?;
            inner.state.lock().manifest = m;
        }
        new_out = Some(
            open_append(&dir.join(&new_incr.name))
                .map_err(io("can't open the new incremental AOF file"))?,
        );
    }
    let base_size = write_base(srv, kind, &dir, &new_base.name, new_out, preamble)?;
    // 4. Switch the manifest.
    if inner.rewrite_cancel.load(Ordering::SeqCst) {
        return Err(CANCELED.into());
    }
    let m = Manifest {
        base: Some(new_base.clone()),
        history: Vec::new(),
        incrs: if aof_on {
            vec![new_incr.clone()]
        } else {
            Vec::new()
        },
    };
    if kind == Kind::Enable && !inner.enabled.load(Ordering::SeqCst) {
        return Err("appendonly was turned off during the rewrite".into());
    }
    manifest::write(&dir, &filename, &m).map_err(io("can't write the AOF manifest"))?;
    // Old files are no longer referenced.
    let keep = |n: &str| n == new_base.name || n == new_incr.name;
    for p in old.base.iter().chain(&old.history).chain(&old.incrs) {
        if !keep(&p.name) {
            tracing::info!("Removing the history file {} in the background", p.name);
            let _ = std::fs::remove_file(dir.join(&p.name));
        }
    }
    let cur = inner.out.lock().as_ref().map(|o| o.size).unwrap_or(0);
    let mut st = inner.state.lock();
    st.dir = dir;
    st.filename = filename;
    st.base_size = base_size;
    st.other_incr_size = 0;
    st.rewrite_base_size = base_size + cur;
    st.manifest = m;
    Ok(())
}

/// A base file named `name` in `dir` holding the data as it is now (the AOF's first base when
/// the server starts without one): written to a temporary file, fsynced, then renamed. Its size.
pub(crate) fn write_base_file(
    srv: &Server,
    dir: &Path,
    name: &str,
    preamble: bool,
) -> Result<u64, String> {
    write_base(srv, Kind::Rewrite, dir, name, None, preamble)
}

/// Steps 2-4 up to the rename: the snapshot (switching logging to `new_out` at its instant)
/// into a temporary file that becomes `dir/name`. Its size.
fn write_base(
    srv: &Server,
    kind: Kind,
    dir: &Path,
    name: &str,
    new_out: Option<super::Out>,
    preamble: bool,
) -> Result<u64, String> {
    let temp = dir.join(format!("temp-rewriteaof-bg-{}.aof", std::process::id()));
    let tmpfile = File::create(&temp).map_err(io("can't create the temporary rewrite file"))?;
    let result = snapshot(srv, kind, tmpfile, new_out, preamble);
    let mut w = match result {
        Ok(x) => x,
        Err(e) => {
            let _ = std::fs::remove_file(&temp);
            return Err(e);
        }
    };
    let finish = (|| -> std::io::Result<u64> {
        w.flush()?;
        let f = w.into_inner().map_err(|e| e.into_error())?;
        f.sync_all()?;
        let size = f.metadata()?.len();
        std::fs::rename(&temp, dir.join(name))?;
        Ok(size)
    })();
    finish.map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        format!("can't write the new base file: {e}")
    })
}

/// Steps 2-3: lock everything, switch the log to the new file, serialize shard by shard.
fn snapshot(
    srv: &Server,
    kind: Kind,
    tmpfile: File,
    new_out: Option<super::Out>,
    preamble: bool,
) -> Result<BufWriter<File>, String> {
    let inner = &srv.aof.inner;
    let ks = &srv.keyspace;
    let per = ks.shards_per_db();
    let mut guards = Vec::with_capacity(ks.num_dbs() * per);
    for db in ks.dbs.iter() {
        for s in db.shards.iter() {
            guards.push(Some(s.lock()));
        }
    }
    // Switch: nothing runs while every shard is locked.
    if let Some(new_out) = new_out {
        if kind == Kind::Rewrite && inner.enabled.load(Ordering::SeqCst) {
            // Everything fed so far belongs to the old file.
            if !inner.write_pending(true) {
                return Err("can't flush the AOF before switching files".into());
            }
        }
        let mut out = inner.out.lock();
        let old_size = out.as_ref().map(|o| o.size).unwrap_or(0);
        *out = Some(new_out);
        let mut f = inner.feed.lock();
        f.db = None;
        if kind == Kind::Enable {
            f.buf.clear();
            inner.written.store(f.seq, Ordering::SeqCst);
            inner.synced.store(f.seq, Ordering::SeqCst);
            inner.enabled.store(true, Ordering::SeqCst);
        } else {
            inner.state.lock().other_incr_size += old_size;
        }
    }
    let w = BufWriter::with_capacity(1 << 16, tmpfile);
    if preamble {
        return rdb_base(srv, guards, w);
    }
    let now = crate::clock::unix_ms();
    let mut w = w;
    let mut buf = Vec::with_capacity(1 << 16);
    // As Redis's RESP base: the time it was taken (aof-timestamp-enabled), then the function
    // libraries as FUNCTION LOAD commands, then the keys. The libraries are read while every
    // shard is locked, at the snapshot's instant.
    if srv.config.get_bool("aof-timestamp-enabled") {
        buf.extend_from_slice(format!("#TS:{}\r\n", now / 1000).as_bytes());
    }
    for code in crate::scripting::library_codes(srv) {
        encode_command(&mut buf, &[&b"FUNCTION"[..], b"LOAD", &code[..]]);
    }
    let mut selected = None;
    // As for the RDB base: a pause set at the start is read again before each key.
    let paused = srv.config.get_i64("rdb-key-save-delay") != 0;
    for (i, g) in guards.iter_mut().enumerate() {
        let db = i / per;
        let shard = g.take().ok_or("shard lock missing")?;
        if !shard.is_empty() {
            if selected != Some(db) {
                encode_select(&mut buf, db);
                selected = Some(db);
            }
            serialize_shard(&shard, now, &mut buf, &mut w, &mut |_| {
                !paused
                    || key_delay(
                        srv.config.get_i64("rdb-key-save-delay"),
                        &inner.rewrite_cancel,
                    )
            })?;
        }
        // Commands on this shard may run again: their effects go to the new incremental file.
        drop(shard);
    }
    w.write_all(&buf)
        .map_err(io("can't write the rewrite file"))?;
    Ok(w)
}

/// Step 3 for `aof-use-rdb-preamble yes`: the base is an RDB image (`aof-base` aux field 1),
/// each shard released as soon as it is written, as for the RESP base.
fn rdb_base(
    srv: &Server,
    mut guards: Vec<Option<parking_lot::MutexGuard<'_, Shard>>>,
    w: BufWriter<File>,
) -> Result<BufWriter<File>, String> {
    let per = srv.keyspace.shards_per_db();
    let opts = super::snapshot::SaveOpts::from_config(srv, true);
    let mut out = super::snapshot::RdbWriter::new(w, opts, crate::alloc::used_memory());
    // A pause set when the rewrite starts applies (as in Redis's child); it is then read again
    // before each key, so lowering it speeds up the running rewrite (there is no child to kill).
    if srv.config.get_i64("rdb-key-save-delay") != 0 {
        let Some(arc) = srv.arc() else {
            return Err("no server handle".into());
        };
        out.pause_with(Box::new(move || {
            let delay = arc.config.get_i64("rdb-key-save-delay");
            key_delay(delay, &arc.aof.inner.rewrite_cancel)
        }));
    }
    let err = io("can't write the rewrite file");
    for db in 0..srv.keyspace.num_dbs() {
        let shards = &mut guards[db * per..(db + 1) * per];
        let (keys, expires) = shards
            .iter()
            .flatten()
            .fold((0, 0), |(k, e), s| (k + s.len(), e + s.volatile_len()));
        if keys > 0 {
            out.select_db(db, keys, expires);
        }
        for g in shards.iter_mut() {
            let shard = g.take().ok_or("shard lock missing")?;
            if srv.aof.inner.rewrite_cancel.load(Ordering::Relaxed) {
                return Err(CANCELED.into());
            }
            out.shard(&shard).map_err(&err)?;
            // Commands on this shard may run again: their effects go to the new incremental file.
            drop(shard);
        }
    }
    out.finish().map_err(err)
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
    for (key, e) in shard.keys() {
        if e.has_expire() && e.expire_at <= now {
            continue;
        }
        if !before_key(key) {
            return Err(CANCELED.into());
        }
        match &e.value {
            Value::Str(v) => encode_command(buf, &[&b"SET"[..], &key[..], &v[..]]),
            Value::List(l) => batched(
                b"RPUSH",
                key,
                l.items.iter().map(|i| vec![Cow::Borrowed(&i[..])]),
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
            let at = e.expire_at.to_string();
            encode_command(buf, &[&b"PEXPIREAT"[..], &key[..], at.as_bytes()]);
        }
        spill(buf, w)?;
    }
    Ok(())
}
