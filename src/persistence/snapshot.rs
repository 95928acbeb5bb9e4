//! RDB snapshot files (Redis 7.0's format, RDB version 10): writing, reading, SAVE / BGSAVE,
//! save points and the RDB half of INFO persistence.
//!
//! File layout (as Redis's rdb.c writes it): `REDIS0010`; aux fields (`redis-ver`,
//! `redis-bits`, `ctime`, `used-mem`, `aof-base`); each FUNCTION library as a `FUNCTION2`
//! record holding its code; per non-empty database `SELECTDB n` and `RESIZEDB keys expires`;
//! per key an optional `EXPIRETIME_MS` (Unix ms, little-endian), the type byte, the key and the
//! object in the codec of [`super::rdb`] (plain encodings, streams as `super::rdb_stream`
//! writes them, strings LZF-compressed when `rdbcompression yes`); then `EOF` and the CRC-64 of
//! everything before it (zero when `rdbchecksum no`). Reading takes everything Redis 7.0 (or
//! older) writes: listpacks, ziplists, intsets, quicklists, streams (type 19, and 15 from
//! Redis 5 and 6), `FUNCTION2` libraries (compiled once the file is applied), old-style second
//! expiries, LRU/LFU hints (skipped: they are eviction metadata, not data). Module values,
//! module aux data, the `FUNCTION` records of Redis 7.0's release candidates, zipmaps and the
//! types of later Redis versions are refused with a message naming the key (or the record) and
//! the type. A file is parsed and its checksum verified in full before a single key is
//! inserted, so a damaged file is refused (with the offset and the key being read) and never
//! half-loaded.
//!
//! Saving. SAVE locks every shard (as EXEC does), writes `temp-<pid>.rdb`, fsyncs, renames it
//! to `dir/dbfilename` and fsyncs the directory. BGSAVE takes the same all-shard lock only
//! long enough to `fork()`: the child (one thread, holding the shard guards in its
//! copy-on-write image of memory) serializes that instant with `std::fs` only and `_exit`s; the
//! parent releases the locks at once and a waiter thread reaps the child and records the
//! outcome. The child allocates through jemalloc, whose atfork handlers make that safe, and
//! touches no lock another thread could have held at the fork (no logging, no config reads:
//! everything it needs is read before forking). It reports its copy-on-write size
//! (`Private_Dirty` of `/proc/self/smaps_rollup`) through a pipe, as Redis does.

use super::child::{
    bgsave_running, child_report, fork_child, kill_bgsave, kill_rewrite, lock_all, private_dirty,
    wait_child_reporting, REPORT_FINAL, REPORT_PROGRESS,
};
use super::rdb::{self, Limits};
use super::rdb_encoding::{self, Reader};
use crate::config::dir;
use crate::keyspace::Shard;
use crate::state::Server;
use crate::types::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

const OP_FUNCTION2: u8 = 0xF5;
const OP_FUNCTION: u8 = 0xF6;
const OP_MODULE_AUX: u8 = 0xF9;
const OP_IDLE: u8 = 0xF8;
const OP_FREQ: u8 = 0xF7;
const OP_AUX: u8 = 0xFA;
const OP_RESIZEDB: u8 = 0xFB;
const OP_EXPIRETIME_MS: u8 = 0xFC;
const OP_EXPIRETIME: u8 = 0xFD;
const OP_SELECTDB: u8 = 0xFE;
const OP_EOF: u8 = 0xFF;

/// Redis 7's save points when no configuration sets `save`.
pub const DEFAULT_SAVE: &str = "3600 1 300 100 60 10000";

// ---------------------------------------------------------------------------------------------
// Writing

/// What a save reads from the configuration (before any fork).
#[derive(Clone, Debug)]
pub(crate) struct SaveOpts {
    pub compress: bool,
    pub checksum: bool,
    /// `rdb-key-save-delay`: the pause per key, for tests (see [`crate::util::debug_delay`]).
    pub key_delay: i64,
    pub aof_base: bool,
    /// The FUNCTION libraries' codes, written before the databases (read before any fork).
    pub functions: Vec<bytes::Bytes>,
    /// The replication history to record (set with every shard locked, see
    /// [`crate::state::repl::Replication::saved_history`]).
    pub history: Option<crate::state::repl::SavedHistory>,
}

impl SaveOpts {
    pub(crate) fn from_config(srv: &Server, aof_base: bool) -> SaveOpts {
        SaveOpts {
            compress: srv.config.flag(dir::RDBCOMPRESSION),
            checksum: srv.config.flag(dir::RDBCHECKSUM),
            key_delay: srv.config.int(dir::RDB_KEY_SAVE_DELAY),
            aof_base,
            functions: srv.scripts.library_codes(),
            history: None,
        }
    }
}

/// An RDB file being written: buffers records, keeps the running CRC-64.
pub(crate) struct RdbWriter<W: Write> {
    w: W,
    buf: Vec<u8>,
    crc: u64,
    opts: SaveOpts,
    pub keys: u64,
    /// Called every 64 keys with the count so far (a BGSAVE child reports its progress).
    progress: Option<Box<dyn FnMut(u64) + 'static>>,
}

impl<W: Write> RdbWriter<W> {
    /// Start a file: the magic, the version and the aux fields.
    pub(crate) fn new(w: W, opts: SaveOpts, used_mem: usize) -> RdbWriter<W> {
        let mut out = RdbWriter {
            w,
            buf: Vec::with_capacity(1 << 16),
            crc: 0,
            opts,
            keys: 0,
            progress: None,
        };
        out.buf
            .extend_from_slice(format!("REDIS{:04}", rdb::RDB_VERSION).as_bytes());
        let ctime = (crate::clock::unix_ms() / 1000).to_string();
        let aux: [(&str, String); 5] = [
            ("redis-ver", crate::version::REDIS_VERSION.to_string()),
            ("redis-bits", (usize::BITS).to_string()),
            ("ctime", ctime),
            ("used-mem", used_mem.to_string()),
            ("aof-base", u8::from(out.opts.aof_base).to_string()),
        ];
        let history = out.opts.history.as_ref().map(|h| {
            [
                ("repl-stream-db", h.stream_db.to_string()),
                ("repl-id", h.replid.clone()),
                ("repl-offset", h.offset.to_string()),
            ]
        });
        for (k, v) in aux.into_iter().chain(history.into_iter().flatten()) {
            out.buf.push(OP_AUX);
            rdb_encoding::put_string(&mut out.buf, k.as_bytes());
            rdb_encoding::put_string(&mut out.buf, v.as_bytes());
        }
        // Each library as Redis 7.0 writes it: FUNCTION2 and its code (FUNCTION LOAD's
        // payload, shebang line included) as a string.
        for code in &out.opts.functions {
            out.buf.push(OP_FUNCTION2);
            rdb_encoding::put_string(&mut out.buf, code);
        }
        out
    }

    fn spill(&mut self) -> std::io::Result<()> {
        if self.opts.checksum {
            self.crc = rdb::crc64(self.crc, &self.buf);
        }
        self.w.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }

    /// `SELECTDB db` and `RESIZEDB keys expires`.
    pub(crate) fn select_db(&mut self, db: usize, keys: usize, expires: usize) {
        self.buf.push(OP_SELECTDB);
        rdb_encoding::put_len(&mut self.buf, db as u64);
        self.buf.push(OP_RESIZEDB);
        rdb_encoding::put_len(&mut self.buf, keys as u64);
        rdb_encoding::put_len(&mut self.buf, expires as u64);
    }

    /// Every key of `shard`.
    pub(crate) fn shard(&mut self, shard: &Shard) -> std::io::Result<()> {
        for (key, e, expire_at) in shard.keys() {
            if e.has_expire() {
                self.buf.push(OP_EXPIRETIME_MS);
                self.buf.extend_from_slice(&expire_at.to_le_bytes());
            }
            self.buf.push(rdb::object_type(&e.value));
            if self.opts.compress {
                rdb_encoding::put_string_lzf(&mut self.buf, key);
            } else {
                rdb_encoding::put_string(&mut self.buf, key);
            }
            rdb::put_object(&mut self.buf, &e.value, self.opts.compress);
            self.keys += 1;
            if self.keys.is_multiple_of(64) {
                if let Some(p) = self.progress.as_mut() {
                    p(self.keys);
                }
            }
            if self.buf.len() >= 1 << 16 {
                self.spill()?;
            }
            crate::util::debug_delay(self.opts.key_delay);
        }
        Ok(())
    }

    /// `EOF` and the checksum; returns the writer (flushed).
    pub(crate) fn finish(mut self) -> std::io::Result<W> {
        self.buf.push(OP_EOF);
        self.spill()?;
        let crc = if self.opts.checksum { self.crc } else { 0 };
        self.w.write_all(&crc.to_le_bytes())?;
        self.w.flush()?;
        Ok(self.w)
    }
}

/// A foreground save succeeded with `dirty` changes counted: LASTSAVE, the change counter's
/// base and the last save status move, as after a BGSAVE.
fn record_save(srv: &Server, dirty: u64) {
    srv.aof.inner.dirty_base.store(dirty, Ordering::Relaxed);
    srv.lastsave
        .store(crate::clock::unix_ms() / 1000, Ordering::Relaxed);
    srv.aof
        .inner
        .snap
        .last_bgsave_ok
        .store(true, Ordering::Relaxed);
}

/// Write a whole keyspace image: `dbs[i]` holds database i's shards (locked by the caller).
#[cfg(test)]
pub(crate) fn write_image<W: Write>(
    w: W,
    dbs: &[Vec<&Shard>],
    opts: SaveOpts,
    used_mem: usize,
) -> std::io::Result<(W, u64)> {
    write_image_reporting(w, dbs, opts, used_mem, None)
}

/// An image holding the FUNCTION libraries and no data (a replica's `REPLCONF
/// rdb-filter-only functions`, as redis-cli --functions-rdb asks for).
pub(crate) fn functions_image(srv: &Server) -> std::io::Result<Vec<u8>> {
    let opts = SaveOpts::from_config(srv, false);
    let (buf, _) = write_image_reporting(Vec::new(), &[], opts, crate::alloc::used_memory(), None)?;
    Ok(buf)
}

pub(crate) fn write_image_reporting<W: Write>(
    w: W,
    dbs: &[Vec<&Shard>],
    opts: SaveOpts,
    used_mem: usize,
    progress: Option<Box<dyn FnMut(u64)>>,
) -> std::io::Result<(W, u64)> {
    let mut out = RdbWriter::new(w, opts, used_mem);
    out.progress = progress;
    for (db, shards) in dbs.iter().enumerate() {
        let keys: usize = shards.iter().map(|s| s.len()).sum();
        if keys == 0 {
            continue;
        }
        let expires: usize = shards.iter().map(|s| s.volatile_len()).sum();
        out.select_db(db, keys, expires);
        for s in shards {
            out.shard(s)?;
        }
    }
    let keys = out.keys;
    Ok((out.finish()?, keys))
}

/// Why a save failed, at which of its steps: each step has its own line in Redis's log.
#[derive(Debug)]
pub(crate) enum SaveError {
    /// The temporary file could not be created.
    Open(std::io::Error),
    /// Writing or syncing the image failed.
    Write(std::io::Error),
    /// The finished file could not be renamed onto the target (e.g. the target is a directory).
    Rename(std::io::Error),
}

impl SaveError {
    /// The warning Redis logs for this failure, with the paths as the save used them and the
    /// working directory (which is `dir`).
    pub(crate) fn log_line(&self, tmp: &Path, target: &Path) -> String {
        let cwd = std::env::current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_else(|_| "unknown".into());
        match self {
            SaveError::Open(e) => format!(
                "Failed opening the temp RDB file {} (in server root dir {cwd}) for saving: {}",
                short_name(tmp),
                crate::util::strerror(e)
            ),
            SaveError::Write(e) => {
                format!("Write error saving DB on disk: {}", crate::util::strerror(e))
            }
            SaveError::Rename(e) => format!(
                "Error moving temp DB file {} on the final destination {} (in server root dir {cwd}): {}",
                short_name(tmp),
                short_name(target),
                crate::util::strerror(e)
            ),
        }
    }
}

/// A file in `dir` as Redis names it in its log: relative to `dir`, its working directory.
fn short_name(p: &Path) -> String {
    match p.file_name() {
        Some(n)
            if p.parent()
                .is_some_and(|d| d == Path::new(".") || same_as_cwd(d)) =>
        {
            n.to_string_lossy().into_owned()
        }
        _ => p.display().to_string(),
    }
}

fn same_as_cwd(d: &Path) -> bool {
    std::env::current_dir().is_ok_and(|c| c == d)
}

/// Write the image to `tmp`, fsync it, rename it to `target` and fsync the directory.
fn write_file_at(
    tmp: &Path,
    target: &Path,
    dbs: &[Vec<&Shard>],
    opts: SaveOpts,
    used_mem: usize,
) -> Result<u64, SaveError> {
    write_file_reporting(tmp, target, dbs, opts, used_mem, None)
}

fn write_file_reporting(
    tmp: &Path,
    target: &Path,
    dbs: &[Vec<&Shard>],
    opts: SaveOpts,
    used_mem: usize,
    progress: Option<Box<dyn FnMut(u64)>>,
) -> Result<u64, SaveError> {
    let r = (|| {
        let f = std::fs::File::create(tmp).map_err(SaveError::Open)?;
        let (w, keys) = write_image_reporting(
            std::io::BufWriter::with_capacity(1 << 16, f),
            dbs,
            opts,
            used_mem,
            progress,
        )
        .map_err(SaveError::Write)?;
        let f = w
            .into_inner()
            .map_err(|e| SaveError::Write(e.into_error()))?;
        f.sync_all().map_err(SaveError::Write)?;
        drop(f);
        std::fs::rename(tmp, target).map_err(SaveError::Rename)?;
        if let Some(dir) = target.parent() {
            super::manifest::sync_dir(if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            })
            .map_err(SaveError::Write)?;
        }
        Ok(keys)
    })();
    if r.is_err() {
        let _ = std::fs::remove_file(tmp);
    }
    r
}

// ---------------------------------------------------------------------------------------------
// Reading

/// One key read from a file.
pub(crate) struct LoadedKey {
    pub db: usize,
    pub key: Vec<u8>,
    pub value: Value,
    pub expire_at: i64,
}

/// A parsed file, not yet applied.
pub(crate) struct Parsed {
    pub keys: Vec<LoadedKey>,
    /// Offset just past the file (after the checksum): an AOF preamble's commands start here.
    pub end: usize,
    /// Keys dropped because they had expired (rdb_last_load_keys_expired).
    pub expired: u64,
    pub aof_base: bool,
    /// The `used-mem` aux field: the writer's memory use (INFO loading_rdb_used_mem).
    pub used_mem: u64,
    /// The FUNCTION libraries' codes, in file order.
    pub functions: Vec<bytes::Bytes>,
    /// Keys holding an empty collection, skipped.
    pub empty_keys_skipped: u64,
    /// The replication history the file recorded, when complete (`repl-stream-db`,
    /// `repl-id`, `repl-offset` all present and valid, as Redis's loadDataFromDisk checks).
    pub history: Option<crate::state::repl::SavedHistory>,
    /// The keys dropped as expired, with their databases (a restarted master logs them).
    pub expired_keys: Vec<(usize, Vec<u8>)>,
}

/// How a load error names an object that failed to decode (the startup path then ends the
/// process with Redis's "Terminating server after rdb file reading failure.").
pub(crate) const CORRUPT_OBJECT: &str = "does not decode";

fn type_name(t: u8) -> &'static str {
    match t {
        6 => "module (pre-GA module value)",
        7 => "module",
        20 => "set (listpack, Redis 7.2)",
        21 => "stream (listpacks v3, Redis 7.2)",
        _ => "unknown type",
    }
}

fn type_supported(t: u8) -> bool {
    matches!(t, 0..=5 | 9..=19)
}

/// Check an image's header (`REDIS` and the version, the first 9 bytes): its version.
pub(crate) fn header_version(data: &[u8], name: &str) -> Result<u16, String> {
    let bad = |off: usize, what: &str| format!("Bad RDB file {name} at offset {off}: {what}");
    if data.len() < 9 || &data[..5] != b"REDIS" {
        return Err(bad(0, "Wrong signature trying to load DB from file"));
    }
    let version = std::str::from_utf8(&data[5..9])
        .ok()
        .filter(|v| v.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|v| v.parse::<u16>().ok())
        .ok_or_else(|| bad(5, "bad RDB version field"))?;
    if !(1..=rdb::RDB_VERSION).contains(&version) {
        return Err(format!(
            "Can't handle RDB format version {version} in {name} (Podium reads versions 1 to {})",
            rdb::RDB_VERSION
        ));
    }
    Ok(version)
}

/// A record that could not be read: the message, and for an object that does not decode the
/// line Redis logs for it ("Internal error in RDB ..."), which the caller logs once it knows
/// the failure is final (a load from a socket retries a record cut short by the network).
pub(crate) struct RecordError {
    pub msg: String,
    pub log_line: Option<String>,
}

impl From<String> for RecordError {
    fn from(msg: String) -> RecordError {
        RecordError {
            msg,
            log_line: None,
        }
    }
}

/// What an image's reading carries from one record to the next: the database selected, the
/// expiry read for the next key, the history aux fields. [`parse`] reads a whole file with it;
/// [`super::stream_load`] reads an image record by record as it arrives from a master.
pub(crate) struct RecordReader<'l> {
    pub name: String,
    limits: &'l Limits,
    num_dbs: usize,
    skip_expired_at: Option<i64>,
    db: usize,
    expire_at: i64,
    /// The three history fields, as read: (repl-stream-db, repl-id, repl-offset).
    history: (Option<i64>, Option<String>, Option<i64>),
    /// Offset in the image of the reader's buffer start (messages name image offsets).
    pub base: usize,
}

impl<'l> RecordReader<'l> {
    pub(crate) fn new(
        name: &str,
        limits: &'l Limits,
        num_dbs: usize,
        skip_expired_at: Option<i64>,
    ) -> RecordReader<'l> {
        RecordReader {
            name: name.to_string(),
            limits,
            num_dbs,
            skip_expired_at,
            db: 0,
            expire_at: crate::keyspace::NO_EXPIRE,
            history: (None, None, None),
            base: 0,
        }
    }

    fn bad(&self, off: usize, what: &str) -> String {
        format!(
            "Bad RDB file {} at offset {}: {what}",
            self.name,
            self.base + off
        )
    }

    fn short(&self, r: &Reader<'_>, what: &str) -> String {
        self.bad(r.pos, &format!("short read or damage {what}"))
    }

    /// Read the record at `r.pos` into `out` (a key goes to `out.keys`, a library to
    /// `out.functions`, an expired key to the counts). Ok(true) at the EOF opcode.
    pub(crate) fn record(
        &mut self,
        r: &mut Reader<'_>,
        out: &mut Parsed,
    ) -> Result<bool, RecordError> {
        let at = r.pos;
        let Some(op) = r.byte() else {
            return Err(self
                .short(r, "(the file ends before its EOF marker)")
                .into());
        };
        match op {
            OP_EOF => return Ok(true),
            OP_SELECTDB => {
                let n = r.len().ok_or_else(|| self.short(r, "reading SELECTDB"))?;
                if n >= self.num_dbs as u64 {
                    return Err(format!(
                        "{} was created with a server configured to handle more than {} \
                         databases (it selects database {n}): raise `databases`",
                        self.name, self.num_dbs
                    )
                    .into());
                }
                self.db = n as usize;
            }
            OP_RESIZEDB => {
                r.len()
                    .and_then(|_| r.len())
                    .ok_or_else(|| self.short(r, "reading RESIZEDB"))?;
            }
            OP_EXPIRETIME_MS => {
                self.expire_at = i64::from_le_bytes(
                    r.array()
                        .ok_or_else(|| self.short(r, "reading an expire time"))?,
                );
            }
            OP_EXPIRETIME => {
                let s = i32::from_le_bytes(
                    r.array()
                        .ok_or_else(|| self.short(r, "reading an expire time"))?,
                );
                self.expire_at = i64::from(s) * 1000;
            }
            OP_IDLE => {
                r.len()
                    .ok_or_else(|| self.short(r, "reading an LRU idle time"))?;
            }
            OP_FREQ => {
                r.byte()
                    .ok_or_else(|| self.short(r, "reading an LFU frequency"))?;
            }
            OP_AUX => {
                let k = r
                    .string()
                    .ok_or_else(|| self.short(r, "reading an aux field"))?;
                let v = r
                    .string()
                    .ok_or_else(|| self.short(r, "reading an aux field"))?;
                if k == b"aof-base" {
                    out.aof_base = v == b"1";
                } else if k == b"used-mem" {
                    out.used_mem = crate::util::numtext::parse_i64(&v).unwrap_or(0).max(0) as u64;
                } else if k == b"repl-stream-db" {
                    self.history.0 = crate::util::numtext::parse_i64(&v);
                } else if k == b"repl-id" {
                    self.history.1 = (v.len() == 40)
                        .then(|| String::from_utf8(v.to_vec()).ok())
                        .flatten();
                } else if k == b"repl-offset" {
                    self.history.2 = crate::util::numtext::parse_i64(&v);
                }
            }
            OP_MODULE_AUX => {
                return Err(self
                    .bad(
                        at,
                        "module auxiliary data: Podium has no modules, so this file cannot be loaded",
                    )
                    .into())
            }
            OP_FUNCTION2 => {
                let code = r
                    .string()
                    .ok_or_else(|| self.short(r, "reading a function library"))?;
                out.functions.push(bytes::Bytes::from(code));
            }
            OP_FUNCTION => return Err(self.bad(
                at,
                "a function library in the format of Redis 7.0's release candidates (FUNCTION), which Podium does not read",
            ).into()),
            t => {
                let key = r.string().ok_or_else(|| self.short(r, "reading a key"))?;
                let shown = String::from_utf8_lossy(&key).into_owned();
                if !type_supported(t) {
                    return Err(self
                        .bad(
                            at,
                            &format!(
                                "key '{shown}' has RDB type {t}, a {}, which Podium does not support",
                                type_name(t)
                            ),
                        )
                        .into());
                }
                rdb_encoding::take_failure_reason();
                let Some(value) = rdb::read_object(r, t, self.limits) else {
                    let reason = rdb::failure_reason(Some(t));
                    // A collection with no elements (older versions could write them) is
                    // skipped, as Redis 7.0 skips it.
                    if reason == rdb::EMPTY_KEY {
                        tracing::warn!("rdbLoadObject skipping empty key: {shown}");
                        out.empty_keys_skipped += 1;
                        self.expire_at = crate::keyspace::NO_EXPIRE;
                        return Ok(false);
                    }
                    return Err(RecordError {
                        msg: self.bad(
                            at,
                            &format!(
                                "key '{shown}' (RDB type {t}) {CORRUPT_OBJECT}: {}",
                                reason.trim_end_matches('.')
                            ),
                        ),
                        log_line: Some(format!(
                            "Internal error in RDB reading offset 0, function at rdb.c:0 -> {reason}"
                        )),
                    });
                };
                let exp = std::mem::replace(&mut self.expire_at, crate::keyspace::NO_EXPIRE);
                if exp != crate::keyspace::NO_EXPIRE
                    && self.skip_expired_at.is_some_and(|now| exp <= now)
                {
                    out.expired += 1;
                    out.expired_keys.push((self.db, key));
                    return Ok(false);
                }
                out.keys.push(LoadedKey {
                    db: self.db,
                    key,
                    value,
                    expire_at: exp,
                });
            }
        }
        Ok(false)
    }

    /// The history the image recorded, when all three fields are there and valid.
    pub(crate) fn history(&self) -> Option<crate::state::repl::SavedHistory> {
        if let (Some(db), Some(replid), Some(offset)) = &self.history {
            if *db >= 0 && *offset >= 0 {
                return Some(crate::state::repl::SavedHistory {
                    replid: replid.clone(),
                    offset: *offset as u64,
                    stream_db: *db as usize,
                });
            }
        }
        None
    }
}

impl Parsed {
    pub(crate) fn empty() -> Parsed {
        Parsed {
            keys: Vec::new(),
            end: 0,
            expired: 0,
            aof_base: false,
            used_mem: 0,
            functions: Vec::new(),
            empty_keys_skipped: 0,
            history: None,
            expired_keys: Vec::new(),
        }
    }
}

/// Parse an RDB image at the start of `data`. `skip_expired_at`: drop keys whose expiry is
/// at or before this Unix ms time (a master loading its own file), None to keep them (an AOF
/// preamble, where later commands may refer to them). `name` is used in messages.
pub(crate) fn parse(
    data: &[u8],
    name: &str,
    limits: &Limits,
    num_dbs: usize,
    skip_expired_at: Option<i64>,
) -> Result<Parsed, String> {
    let version = header_version(data, name)?;
    let mut r = Reader { buf: data, pos: 9 };
    let mut out = Parsed::empty();
    let mut records = RecordReader::new(name, limits, num_dbs, skip_expired_at);
    loop {
        match records.record(&mut r, &mut out) {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                if let Some(line) = e.log_line {
                    tracing::warn!("{line}");
                }
                return Err(e.msg);
            }
        }
    }
    let mut end = r.pos;
    if version >= 5 {
        let crc_at = r.pos;
        let stored = u64::from_le_bytes(
            r.array()
                .ok_or_else(|| records.bad(crc_at, "the file ends inside its checksum"))?,
        );
        if stored != 0 {
            let got = rdb::crc64(0, &data[..crc_at]);
            if got != stored {
                return Err(format!(
                    "Wrong RDB checksum in {name} expected: ({stored:x}) but got ({got:x}): RDB CRC error"
                ));
            }
        }
        end = r.pos;
    }
    out.end = end;
    out.history = records.history();
    Ok(out)
}

/// The encoding limits loaded values are built with (the configured ones, as after a load in
/// Redis).
pub(crate) fn limits(srv: &Server) -> Limits {
    Limits {
        hash: crate::types::hash::HashLimits {
            max_entries: srv.config.int(dir::HASH_MAX_LISTPACK_ENTRIES).max(0) as usize,
            max_value: srv.config.int(dir::HASH_MAX_LISTPACK_VALUE).max(0) as usize,
        },
        zset: srv.config.zset_limits(),
        set_max_intset: srv.config.hot.set_max_intset.load(Ordering::Relaxed),
        // A load is trusted under `clients` (Redis: server.loading).
        deep: rdb::deep_sanitization(&srv.config.text(dir::SANITIZE_DUMP_PAYLOAD), true, false),
    }
}

/// Insert parsed keys into the locked shards (`guards[db][shard]`). A key that exists
/// already (a file repeating a key, or NOFLUSH over existing data) is an error, and then every
/// database is emptied: nothing of a refused file stays half-loaded; with `replace_duplicates`
/// (DEBUG RELOAD NOFLUSH MERGE) the file's value replaces it instead.
fn apply_locked(
    srv: &Server,
    guards: &mut [Vec<parking_lot::MutexGuard<'_, Shard>>],
    parsed: Parsed,
    name: &str,
    replace_duplicates: bool,
) -> Result<u64, String> {
    let ks = &srv.keyspace;
    let mut n = 0u64;
    let st = &srv.aof.inner.snap;
    let total_keys = parsed.keys.len().max(1) as u64;
    let total_bytes = st.load_total_bytes.load(Ordering::Relaxed);
    let mut delay = srv.config.int(dir::KEY_LOAD_DELAY);
    for k in parsed.keys {
        // Progress for INFO (loading_loaded_bytes): the file was parsed in full before this,
        // so bytes are counted in proportion to the keys inserted.
        if n.is_multiple_of(1024) {
            st.load_done_bytes
                .store(total_bytes * n / total_keys, Ordering::Relaxed);
            // Re-read now and then: tests lower it with CONFIG SET while a load runs.
            delay = srv.config.int(dir::KEY_LOAD_DELAY);
        }
        crate::util::debug_delay(delay);
        let shard = &mut guards[k.db][ks.shard_of(&k.key)];
        if replace_duplicates && shard.raw_get(&k.key).is_some() {
            shard.remove(&k.key);
        }
        if shard.raw_get(&k.key).is_some() {
            let msg = format!(
                "{name} has the duplicated key '{}' in DB {}",
                String::from_utf8_lossy(&k.key),
                k.db
            );
            for s in guards.iter_mut().flatten() {
                s.touch_all_watched();
                s.clear();
            }
            return Err(msg);
        }
        shard.insert(&k.key, k.value, false);
        if k.expire_at != crate::keyspace::NO_EXPIRE {
            shard.set_expire(&k.key, k.expire_at);
        }
        n += 1;
    }
    Ok(n)
}

/// Insert parsed keys (see [`apply_locked`]), locking every shard meanwhile.
pub(crate) fn apply(srv: &Server, mut parsed: Parsed, name: &str) -> Result<u64, String> {
    let codes = std::mem::take(&mut parsed.functions);
    (super::upcalls().restore_libraries)(srv, codes, super::LibraryPolicy::Append)
        .map_err(|e| format!("{name}: {}", e.trim_start_matches("ERR ")))?;
    let mut guards = lock_all(srv);
    apply_locked(srv, &mut guards, parsed, name, false)
}

/// Read and check `path` in full: the parsed keys, ready to apply.
fn read_checked(srv: &Server, path: &Path) -> Result<Parsed, String> {
    let name = path.display().to_string();
    let data = std::fs::read(path).map_err(|e| format!("Can't open {name}: {e}"))?;
    start_load_progress(srv, data.len() as u64);
    // Keys that expired while the file lay on disk are dropped by a master only: a replica
    // keeps them until its master's DELs come (Redis's rdbLoad checks iAmMaster()), so a
    // replica restarted from its own file has what its master still has.
    let as_replica = crate::state::replica_link::is_replica(srv)
        || crate::config::directives::replicaof_target(&srv.config.text(dir::REPLICAOF)).is_some()
        || srv.cluster_replica_at_start.load(Ordering::Relaxed);
    let parsed = parse(
        &data,
        &name,
        &limits(srv),
        srv.keyspace.num_dbs(),
        (!as_replica).then(crate::clock::unix_ms),
    )?;
    srv.aof
        .inner
        .snap
        .load_rdb_used_mem
        .store(parsed.used_mem, Ordering::Relaxed);
    if parsed.end != data.len() {
        return Err(format!(
            "Bad RDB file {name}: {} bytes after its end (offset {})",
            data.len() - parsed.end,
            parsed.end
        ));
    }
    Ok(parsed)
}

/// A load of `total_bytes` starts now (INFO loading_start_time, loading_total_bytes).
pub(crate) fn start_load_progress(srv: &Server, total_bytes: u64) {
    let st = &srv.aof.inner.snap;
    st.load_started
        .store(crate::clock::unix_ms() / 1000, Ordering::Relaxed);
    st.load_total_bytes.store(total_bytes, Ordering::Relaxed);
    st.load_done_bytes.store(0, Ordering::Relaxed);
    st.load_rdb_used_mem.store(0, Ordering::Relaxed);
}

/// INFO persistence's loading_* fields, printed while a load runs (Redis's computation of the
/// percentage and the ETA).
pub(crate) fn info_loading(srv: &Server) -> Vec<(&'static str, String)> {
    if !srv.aof.loading() {
        return Vec::new();
    }
    let st = &srv.aof.inner.snap;
    let started = st.load_started.load(Ordering::Relaxed);
    let total = st.load_total_bytes.load(Ordering::Relaxed);
    let done = st.load_done_bytes.load(Ordering::Relaxed).min(total);
    let (perc, remaining) = if total > 0 {
        (done as f64 * 100.0 / total as f64, total - done)
    } else {
        (0.0, 1)
    };
    let elapsed = (crate::clock::unix_ms() / 1000 - started).max(0) as u64;
    let eta = if elapsed == 0 {
        1
    } else {
        elapsed.saturating_mul(remaining) / (done + 1)
    };
    vec![
        ("loading_start_time", started.to_string()),
        ("loading_total_bytes", total.to_string()),
        (
            "loading_rdb_used_mem",
            st.load_rdb_used_mem.load(Ordering::Relaxed).to_string(),
        ),
        ("loading_loaded_bytes", done.to_string()),
        ("loading_loaded_perc", format!("{perc:.2}")),
        ("loading_eta_seconds", eta.to_string()),
    ]
}

pub(crate) fn record_load(srv: &Server, loaded: u64, expired: u64, empty_skipped: u64) {
    let st = &srv.aof.inner.snap;
    st.last_load_loaded.store(loaded, Ordering::Relaxed);
    st.last_load_expired.store(expired, Ordering::Relaxed);
    srv.aof
        .inner
        .dirty_base
        .store(srv.stats.dirty.get(), Ordering::Relaxed);
    if empty_skipped > 0 {
        tracing::warn!("Done loading RDB, keys loaded: {loaded}, keys expired: {expired}, empty keys skipped: {empty_skipped}.");
    } else {
        tracing::info!("Done loading RDB, keys loaded: {loaded}, keys expired: {expired}.");
    }
}

/// Empty every database and the FUNCTION libraries (DEBUG LOADAOF before its replay, as
/// Redis's emptyData), waking WATCHes on what it drops.
pub(crate) fn empty_all(srv: &Server) {
    let _ = (super::upcalls().restore_libraries)(srv, Vec::new(), super::LibraryPolicy::Flush);
    for s in lock_all(srv).iter_mut().flatten() {
        s.touch_all_watched();
        s.clear();
    }
}

/// DEBUG RELOAD's load: read `dir/dbfilename` in full, then (every shard locked) empty the
/// databases when `flush` and insert its keys.
pub(crate) fn reload(srv: &Server, flush: bool, merge: bool) -> Result<(), String> {
    let path = rdb_path(srv);
    let mut parsed = read_checked(srv, &path)?;
    let (expired, empty_skipped) = (parsed.expired, parsed.empty_keys_skipped);
    // Libraries first, as they come first in the file: FLUSH empties them with the data,
    // NOFLUSH MERGE replaces same-named ones, plain NOFLUSH refuses a name already loaded.
    let policy = if flush {
        super::LibraryPolicy::Flush
    } else if merge {
        super::LibraryPolicy::Replace
    } else {
        super::LibraryPolicy::Append
    };
    (super::upcalls().restore_libraries)(srv, std::mem::take(&mut parsed.functions), policy)
        .map_err(|e| format!("{}: {}", path.display(), e.trim_start_matches("ERR ")))?;
    let mut guards = lock_all(srv);
    if flush {
        for s in guards.iter_mut().flatten() {
            s.touch_all_watched();
            s.clear();
        }
    }
    let loaded = apply_locked(srv, &mut guards, parsed, &path.display().to_string(), merge)?;
    drop(guards);
    record_load(srv, loaded, expired, empty_skipped);
    Ok(())
}

/// Load `path` into the (empty) keyspace at startup.
pub(crate) fn load_file(srv: &Server, path: &Path) -> Result<(), String> {
    let started = Instant::now();
    let mut parsed = read_checked(srv, path)?;
    let (expired, empty_skipped) = (parsed.expired, parsed.empty_keys_skipped);
    let history = parsed.history.take();
    let expired_keys = std::mem::take(&mut parsed.expired_keys);
    let loaded = apply(srv, parsed, &path.display().to_string())?;
    record_load(srv, loaded, expired, empty_skipped);
    // A master (no `replicaof` at startup, and not a replica by nodes.conf: Redis's
    // iAmMaster) keeps serving the history the file recorded.
    let master = crate::config::directives::replicaof_target(&srv.config.text(dir::REPLICAOF))
        .is_none()
        && !srv.cluster_replica_at_start.load(Ordering::Relaxed);
    if let (false, Some(h)) = (master, &history) {
        // A replica restarted from its own RDB continues its master's history from the offset
        // it recorded, in the database the stream had selected (Redis's loadDataFromDisk
        // makes a cached master of them): its first PSYNC can be a partial one.
        srv.repl.adopt_history(
            &h.replid,
            h.offset,
            srv.config.int(dir::REPL_BACKLOG_SIZE).max(1) as usize,
        );
        srv.master_link
            .stream_db
            .store(h.stream_db, Ordering::Relaxed);
    }
    if let (true, Some(h)) = (master, history) {
        let del = if crate::keyspace::lazyfree::EXPIRE.load(Ordering::Relaxed) {
            "UNLINK"
        } else {
            "DEL"
        };
        srv.repl.resume_history(
            &h,
            srv.config.int(dir::REPL_BACKLOG_SIZE).max(1) as usize,
            &expired_keys,
            del,
            srv.replica_obuf_limit(),
        );
    }
    tracing::info!(
        "DB loaded from disk: {:.3} seconds",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// SAVE / BGSAVE

/// `dir/dbfilename`.
pub(crate) fn rdb_path(srv: &Server) -> PathBuf {
    let dir = srv.config.text(dir::DIR);
    let name = srv.config.text(dir::DBFILENAME);
    if name.is_empty() {
        // `dbfilename ""` (which Redis accepts) names no file: `dir` joined with it would be
        // the directory itself. An empty path fails to open or rename as Redis's "" does.
        return PathBuf::new();
    }
    Path::new(&dir).join(name)
}

/// The temporary file a save writes before renaming it onto [`rdb_path`]: `temp-<pid>.rdb` in
/// `dir` itself. It is built from `dir`, never from the target's parent: with `dbfilename ""`
/// the target is `dir/` and its parent is the directory above `dir`, where Redis never writes.
pub(crate) fn temp_rdb_path(srv: &Server, pid: u32) -> PathBuf {
    Path::new(&srv.config.text(dir::DIR)).join(format!("temp-{pid}.rdb"))
}

/// The configured save points: (seconds, changes) pairs.
pub(crate) fn save_points(srv: &Server) -> Vec<(i64, u64)> {
    let text = srv.config.text(dir::SAVE);
    let nums: Vec<i64> = text
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    nums.chunks_exact(2)
        .map(|c| (c[0], c[1].max(0) as u64))
        .collect()
}

/// Changes since the last successful save.
pub(crate) fn changes_since_save(srv: &Server) -> u64 {
    srv.stats
        .dirty
        .get()
        .saturating_sub(srv.aof.inner.dirty_base.load(Ordering::Relaxed))
}

/// `-MISCONF` text for writes while the last BGSAVE failed and save points are set with
/// `stop-writes-on-bgsave-error yes` (Redis's writeCommandsDeniedByDiskError).
pub fn write_refusal(srv: &Server) -> Option<&'static str> {
    let st = &srv.aof.inner.snap;
    if st.last_bgsave_ok.load(Ordering::Relaxed)
        || !srv.config.flag(dir::STOP_WRITES_ON_BGSAVE_ERROR)
        || save_points(srv).is_empty()
    {
        return None;
    }
    Some(
        "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk. \
         Commands that may modify the data set are disabled, because this instance is configured to report \
         errors during writes if RDB snapshotting fails (stop-writes-on-bgsave-error option). Please check \
         the Redis logs for details about the RDB error.",
    )
}

/// Every shard locked for an image (SAVE, BGSAVE, the diskless transfer), taken through the
/// replica link's apply gate: no request of a master's stream is then half applied (its data
/// changed, its offset not yet counted) when the image's history and stream start are read.
fn lock_for_image(srv: &Server) -> Vec<Vec<parking_lot::MutexGuard<'_, Shard>>> {
    let _gate = srv.master_link.image_gate();
    lock_all(srv)
}

/// A new save child's progress for INFO: the keys it has to write, none written yet, no
/// copy-on-write measured yet.
fn start_child_progress(
    st: &crate::state::aof::SnapState,
    guards: &[Vec<parking_lot::MutexGuard<'_, Shard>>],
) {
    let total: usize = guards.iter().flatten().map(|s| s.len()).sum();
    st.keys_total.store(total as u64, Ordering::Relaxed);
    st.keys_processed.store(0, Ordering::Relaxed);
    st.cow.store(0, Ordering::Relaxed);
    st.cow_peak.store(0, Ordering::Relaxed);
    *st.cow_at.lock() = None;
}

/// The replication history an RDB written now records (see
/// [`crate::state::repl::Replication::saved_history`]).
fn history_to_save(srv: &Server) -> Option<crate::state::repl::SavedHistory> {
    srv.repl
        .saved_history(srv.master_link.stream_db.load(Ordering::Relaxed))
}

/// SAVE (and SHUTDOWN's save): write the file in the foreground, every shard locked.
pub(crate) fn save(srv: &Server) -> Result<(), String> {
    let target = rdb_path(srv);
    let tmp = temp_rdb_path(srv, std::process::id());
    let mut opts = SaveOpts::from_config(srv, false);
    let guards = lock_for_image(srv);
    opts.history = history_to_save(srv);
    let dirty = srv.stats.dirty.get();
    let dbs: Vec<Vec<&Shard>> = guards
        .iter()
        .map(|g| g.iter().map(|s| &**s).collect())
        .collect();
    let r = write_file_at(&tmp, &target, &dbs, opts, crate::alloc::used_memory());
    drop(dbs);
    drop(guards);
    match r {
        Ok(_) => {
            tracing::info!("DB saved on disk");
            record_save(srv, dirty);
            Ok(())
        }
        Err(e) => {
            let msg = e.log_line(&tmp, &target);
            tracing::warn!("{msg}");
            Err(msg)
        }
    }
}

/// The locked shards as the image writer takes them: `[db][shard]`.
fn shard_refs<'a>(guards: &'a [Vec<parking_lot::MutexGuard<'_, Shard>>]) -> Vec<Vec<&'a Shard>> {
    guards
        .iter()
        .map(|g| g.iter().map(|s| &**s).collect())
        .collect()
}

/// In a BGSAVE child: once a second, the keys written so far and the copy-on-write size, for
/// INFO.
fn progress_reports(report_fd: i32) -> Box<dyn FnMut(u64)> {
    let mut last = Instant::now();
    Box::new(move |keys: u64| {
        if last.elapsed() >= std::time::Duration::from_secs(1) {
            last = Instant::now();
            child_report(report_fd, REPORT_PROGRESS, keys, private_dirty());
        }
    })
}

/// Under the fork lock: no child runs (else why not), and the server's handle for the
/// child's waiter thread.
fn may_fork(srv: &Server) -> Result<std::sync::Arc<Server>, String> {
    if bgsave_running(srv) {
        return Err("Background save already in progress".into());
    }
    if srv.aof.inner.rewriting.load(Ordering::SeqCst) {
        return Err("Another child process is active (AOF?)".into());
    }
    srv.arc().ok_or_else(|| "no server handle".to_string())
}

/// Start a BGSAVE: fork a child that writes the file. Err carries the reason.
pub(crate) fn bgsave_start(srv: &Server) -> Result<(), String> {
    let st = &srv.aof.inner.snap;
    // One child at a time (the rule of `super::child`; `rewrite::start` takes the same lock).
    let _one_child = st.fork_lock.lock();
    let arc = may_fork(srv)?;
    let target = rdb_path(srv);
    let mut opts = SaveOpts::from_config(srv, false);
    // The child's temporary file goes in `dir` (see temp_rdb_path), named by the child's pid.
    let dir = PathBuf::from(srv.config.text(dir::DIR));
    let used_mem = crate::alloc::used_memory();
    st.last_bgsave_try
        .store(crate::clock::unix_ms() / 1000, Ordering::Relaxed);
    let guards = lock_for_image(srv);
    // Replicas waiting for an image start their stream here: no command runs while every
    // shard is locked, so the image and the stream meet at this instant.
    srv.repl.attach_waiting(false);
    opts.history = history_to_save(srv);
    let dirty = srv.stats.dirty.get();
    start_child_progress(st, &guards);
    let forked = fork_child(srv, "redis-rdb-bgsave", |report_fd| {
        let tmp = dir.join(format!("temp-{}.rdb", std::process::id()));
        let dbs = shard_refs(&guards);
        let progress = progress_reports(report_fd);
        // The failure's line goes to the log (fork_child), as Redis's child logs it.
        let keys = write_file_reporting(&tmp, &target, &dbs, opts, used_mem, Some(progress))
            .map_err(|e| e.log_line(&tmp, &target))?;
        child_report(report_fd, REPORT_FINAL, keys, private_dirty());
        Ok(())
    });
    drop(guards);
    let (pid, read_fd) = match forked {
        Ok(x) => x,
        Err(e) => {
            srv.repl.bgsave_done(false);
            st.last_bgsave_ok.store(false, Ordering::Relaxed);
            return Err(format!("Can't save in background: fork: {e}"));
        }
    };
    let fork_ms = st.latest_fork_usec.load(Ordering::Relaxed) as f64 / 1000.0;
    st.saves.fetch_add(1, Ordering::Relaxed);
    st.dirty_at_fork.store(dirty, Ordering::Relaxed);
    *st.child_started.lock() = Some(Instant::now());
    st.child.store(pid, Ordering::SeqCst);
    tracing::info!("Background saving started by pid {pid} (fork took {fork_ms:.3} ms)");
    spawn_reaper(arc, pid, read_fd, dir, None);
    Ok(())
}

/// The thread that waits for a BGSAVE's child (see [`reap`]).
fn spawn_reaper(
    arc: std::sync::Arc<Server>,
    pid: i32,
    read_fd: i32,
    dir: PathBuf,
    transfer_done: Option<std::sync::mpsc::Receiver<()>>,
) {
    let r = std::thread::Builder::new()
        .name("rdb-bgsave-wait".into())
        .spawn(move || reap(&arc, pid, read_fd, &dir, transfer_done));
    if let Err(e) = r {
        tracing::warn!("can't start the BGSAVE waiter thread: {e}");
    }
}

/// Wait for the child, then record how it ended. `transfer_done` is set for a transfer to
/// replicas' sockets: it fires when the pump has handed over everything the child wrote, which
/// a successful child waits for before it counts as ended (Redis's child waits for its parent
/// to read the pipe); such a transfer is not a save, so the save records stay.
fn reap(
    srv: &Server,
    pid: i32,
    read_fd: i32,
    dir: &Path,
    transfer_done: Option<std::sync::mpsc::Receiver<()>>,
) {
    let st = &srv.aof.inner.snap;
    let (status, _) = wait_child_reporting(pid, read_fd, &mut |kind, keys, cow| {
        st.keys_processed.store(keys, Ordering::Relaxed);
        st.cow.store(cow, Ordering::Relaxed);
        st.cow_peak.fetch_max(cow, Ordering::Relaxed);
        *st.cow_at.lock() = Some(Instant::now());
        if kind == REPORT_FINAL {
            st.last_cow.store(cow, Ordering::Relaxed);
        }
    });
    let exited_ok = status != -1 && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    let to_sockets = transfer_done.is_some();
    if let (true, Some(done)) = (exited_ok, transfer_done) {
        let _ = done.recv();
    }
    let started = st.child_started.lock().take();
    let secs = started.map(|t| t.elapsed().as_secs() as i64).unwrap_or(-1);
    st.last_bgsave_secs.store(secs, Ordering::Relaxed);
    st.keys_total.store(0, Ordering::Relaxed);
    st.keys_processed.store(0, Ordering::Relaxed);
    st.cow.store(0, Ordering::Relaxed);
    st.cow_peak.store(0, Ordering::Relaxed);
    *st.cow_at.lock() = None;
    if to_sockets {
        if exited_ok {
            tracing::info!("Background RDB transfer terminated with success");
        } else if status != -1 && libc::WIFSIGNALED(status) {
            tracing::warn!(
                "Background transfer terminated by signal {}",
                libc::WTERMSIG(status)
            );
        } else {
            tracing::warn!("Background transfer error");
        }
    } else if exited_ok {
        tracing::info!("Background saving terminated with success");
        srv.aof
            .inner
            .dirty_base
            .store(st.dirty_at_fork.load(Ordering::Relaxed), Ordering::Relaxed);
        srv.lastsave
            .store(crate::clock::unix_ms() / 1000, Ordering::Relaxed);
        st.last_bgsave_ok.store(true, Ordering::Relaxed);
    } else {
        let _ = std::fs::remove_file(dir.join(format!("temp-{pid}.rdb")));
        if status != -1 && libc::WIFSIGNALED(status) {
            let sig = libc::WTERMSIG(status);
            tracing::warn!("Background saving terminated by signal {sig}");
            // Redis counts a child it killed itself (SIGUSR1) as neither success nor error.
            if sig != libc::SIGUSR1 {
                st.last_bgsave_ok.store(false, Ordering::Relaxed);
            }
        } else {
            tracing::warn!("Background saving error");
            st.last_bgsave_ok.store(false, Ordering::Relaxed);
        }
    }
    st.child_to_sockets.store(false, Ordering::SeqCst);
    st.child.store(0, Ordering::SeqCst);
    // Replicas attached to this BGSAVE get its file now (or are told it failed).
    srv.repl.bgsave_done(exited_ok);
}

/// A BGSAVE for the replicas waiting for one: to their sockets (`to_sockets`, diskless sync)
/// or to the file they are then sent.
pub(crate) fn bgsave_for_replicas(srv: &Server, to_sockets: bool) -> Result<(), String> {
    tracing::info!(
        "Starting BGSAVE for SYNC with target: {}",
        if to_sockets {
            "replicas sockets"
        } else {
            "disk"
        }
    );
    if to_sockets {
        bgsave_to_replicas(srv)
    } else {
        bgsave_start(srv)
    }
}

/// A pipe whose ends are not inherited by exec'd programs: (read end, write end).
fn cloexec_pipe() -> std::io::Result<(i32, i32)> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2(2) writes two descriptors into the array we pass; nothing else is touched.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((fds[0], fds[1]))
}

fn close_fd(fd: i32) {
    // SAFETY: closing a descriptor this code opened and still owns.
    unsafe {
        libc::close(fd);
    }
}

/// Diskless sync (Redis's rdbSaveToSlavesSockets): fork a child that writes the image in the
/// diskless form (`$EOF:<40 random characters>`, the RDB, the same 40 characters) into a
/// pipe; every replica waiting for an image is attached at the fork's instant, and a pump
/// thread hands what the pipe brings to each of their connections (see
/// `crate::replication::full_sync`), at the pace of the slowest. The child never touches a
/// socket, so a TLS connection stays the parent's. Nothing is written to disk, and the
/// transfer does not count as a save (LASTSAVE, the change counter and the last save status
/// stay).
fn bgsave_to_replicas(srv: &Server) -> Result<(), String> {
    let st = &srv.aof.inner.snap;
    let _one_child = st.fork_lock.lock();
    let arc = may_fork(srv)?;
    let mut opts = SaveOpts::from_config(srv, false);
    let used_mem = crate::alloc::used_memory();
    let mark: String = (0..40)
        .map(|_| char::from(b"0123456789abcdef"[rand::random::<u8>() as usize % 16]))
        .collect();
    let (read_fd, write_fd) = cloexec_pipe().map_err(|e| format!("Can't create the pipe: {e}"))?;
    let guards = lock_for_image(srv);
    let attached = srv.repl.attach_waiting(true);
    if attached.is_empty() {
        drop(guards);
        close_fd(read_fd);
        close_fd(write_fd);
        return Err("no replica waits for the transfer".into());
    }
    opts.history = history_to_save(srv);
    start_child_progress(st, &guards);
    let forked = fork_child(srv, "redis-rdb-to-slaves", |report_fd| {
        close_fd(read_fd);
        // SAFETY: the child owns its copy of the pipe's write end from here on; the File
        // closes it when the image is written (or the child exits).
        let pipe = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(write_fd) };
        let mut w = std::io::BufWriter::with_capacity(1 << 16, pipe);
        let failed = |e: std::io::Error| format!("Diskless rdb transfer, write error: {e}");
        w.write_all(format!("$EOF:{mark}\r\n").as_bytes())
            .map_err(failed)?;
        let dbs = shard_refs(&guards);
        let progress = progress_reports(report_fd);
        let (mut w, keys) =
            write_image_reporting(w, &dbs, opts, used_mem, Some(progress)).map_err(failed)?;
        w.write_all(mark.as_bytes()).map_err(failed)?;
        w.flush().map_err(failed)?;
        drop(w);
        child_report(report_fd, REPORT_FINAL, keys, private_dirty());
        Ok(())
    });
    drop(guards);
    close_fd(write_fd);
    let pid = match forked {
        Ok((pid, report_fd)) => (pid, report_fd),
        Err(e) => {
            close_fd(read_fd);
            srv.repl.bgsave_done(false);
            return Err(format!("Can't save in background: fork: {e}"));
        }
    };
    let (pid, report_fd) = pid;
    *st.child_started.lock() = Some(Instant::now());
    st.child_to_sockets.store(true, Ordering::SeqCst);
    st.child.store(pid, Ordering::SeqCst);
    tracing::info!("Background RDB transfer started by pid {pid}");
    let senders: Vec<_> = attached
        .into_iter()
        .filter_map(|(r, tx)| tx.map(|tx| (r, tx)))
        .collect();
    let pump_srv = arc.clone();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let pump = std::thread::Builder::new()
        .name("rdb-to-replicas".into())
        .spawn(move || {
            pump_to_replicas(&pump_srv, read_fd, senders);
            let _ = done_tx.send(());
        });
    if let Err(e) = pump {
        tracing::warn!("can't start the diskless transfer thread: {e}");
        // SAFETY: kill(2) of our own child; its end is reaped below.
        unsafe {
            libc::kill(pid, libc::SIGUSR1);
        }
    }
    let dir = PathBuf::from(srv.config.text(dir::DIR));
    spawn_reaper(arc, pid, report_fd, dir, Some(done_rx));
    Ok(())
}

/// Hand what the child writes into the pipe to every attached replica's connection, in
/// chunks, waiting for each to take it (Redis's rdbPipeReadHandler). A replica whose
/// connection ended is dropped; when none is left the child is stopped.
fn pump_to_replicas(
    srv: &Server,
    read_fd: i32,
    mut outs: Vec<(
        std::sync::Arc<crate::state::repl::Replica>,
        tokio::sync::mpsc::Sender<bytes::Bytes>,
    )>,
) {
    use std::io::Read;
    // SAFETY: this thread owns the pipe's read end from here on; the File closes it.
    let mut pipe = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(read_fd) };
    let mut chunk = vec![0u8; 1 << 16];
    loop {
        let n = match pipe.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!("Diskless rdb transfer, read error sending DB to replicas: {e}");
                for (r, _) in &outs {
                    r.info.kill();
                }
                super::child::signal_bgsave(srv);
                return;
            }
        };
        let bytes = bytes::Bytes::copy_from_slice(&chunk[..n]);
        outs.retain(|(_, tx)| tx.blocking_send(bytes.clone()).is_ok());
        if outs.is_empty() {
            tracing::warn!("Diskless rdb transfer, last replica dropped, killing fork child.");
            super::child::signal_bgsave(srv);
            return;
        }
    }
    tracing::warn!(
        "Diskless rdb transfer, done reading from pipe, {} replicas still up.",
        outs.len()
    );
}

/// INFO persistence's `current_*` fields (the running child's reports), in Redis's order.
pub(crate) fn info_current(srv: &Server) -> Vec<(&'static str, String)> {
    let st = &srv.aof.inner.snap;
    let running = bgsave_running(srv);
    let get = |a: &AtomicU64| {
        if running {
            a.load(Ordering::Relaxed)
        } else {
            0
        }
    };
    let (total, done) = (get(&st.keys_total), get(&st.keys_processed));
    let age = st
        .cow_at
        .lock()
        .filter(|_| running)
        .map(|t| t.elapsed().as_secs())
        .unwrap_or(0);
    let perc = if total > 0 {
        done as f64 * 100.0 / total as f64
    } else {
        0.0
    };
    vec![
        ("current_cow_peak", get(&st.cow_peak).to_string()),
        ("current_cow_size", get(&st.cow).to_string()),
        ("current_cow_size_age", age.to_string()),
        ("current_fork_perc", format!("{perc:.2}")),
        ("current_save_keys_processed", done.to_string()),
        ("current_save_keys_total", total.to_string()),
    ]
}

/// RDB fields of INFO persistence, in Redis's order.
pub(crate) fn info_fields(srv: &Server) -> Vec<(&'static str, String)> {
    let st = &srv.aof.inner.snap;
    let running = bgsave_running(srv);
    let current = st
        .child_started
        .lock()
        .filter(|_| running)
        .map(|t| t.elapsed().as_secs() as i64)
        .unwrap_or(-1);
    vec![
        (
            "rdb_changes_since_last_save",
            changes_since_save(srv).to_string(),
        ),
        ("rdb_bgsave_in_progress", u8::from(running).to_string()),
        (
            "rdb_last_save_time",
            srv.lastsave.load(Ordering::Relaxed).to_string(),
        ),
        (
            "rdb_last_bgsave_status",
            if st.last_bgsave_ok.load(Ordering::Relaxed) {
                "ok"
            } else {
                "err"
            }
            .into(),
        ),
        (
            "rdb_last_bgsave_time_sec",
            st.last_bgsave_secs.load(Ordering::Relaxed).to_string(),
        ),
        ("rdb_current_bgsave_time_sec", current.to_string()),
        ("rdb_saves", st.saves.load(Ordering::Relaxed).to_string()),
        (
            "rdb_last_cow_size",
            st.last_cow.load(Ordering::Relaxed).to_string(),
        ),
        (
            "rdb_last_load_keys_expired",
            st.last_load_expired.load(Ordering::Relaxed).to_string(),
        ),
        (
            "rdb_last_load_keys_loaded",
            st.last_load_loaded.load(Ordering::Relaxed).to_string(),
        ),
    ]
}

/// FLUSHALL (every shard held by the caller, every database now empty): stop a running
/// BGSAVE, and with save points write the (empty) dataset at once, as Redis does.
pub(crate) fn after_flushall(srv: &Server) {
    kill_bgsave(srv);
    if save_points(srv).is_empty() {
        return;
    }
    let target = rdb_path(srv);
    let tmp = temp_rdb_path(srv, std::process::id());
    let mut opts = SaveOpts::from_config(srv, false);
    opts.history = history_to_save(srv);
    match write_file_at(&tmp, &target, &[], opts, crate::alloc::used_memory()) {
        Ok(_) => {
            tracing::info!("DB saved on disk");
            // The FLUSHALL counts as one change once it returns; Redis forces its propagation
            // instead of counting it, so after this save no change is pending (INFO
            // rdb_changes_since_last_save 0, and no save point fires for it).
            let dirty = srv.stats.dirty.get();
            record_save(srv, dirty + 1);
        }
        Err(e) => tracing::warn!("{}", e.log_line(&tmp, &target)),
    }
}

/// The save SHUTDOWN and the signal handlers do: when `save` is forced or save points exist
/// (and not `nosave`), kill a running BGSAVE and save in the foreground.
pub(crate) fn shutdown_save(
    srv: &Server,
    save_flag: bool,
    nosave: bool,
    force: bool,
) -> Result<(), String> {
    kill_bgsave(srv);
    // A rewrite that is turning the AOF on holds the only copy of the data set the AOF will
    // have: as Redis, only FORCE exits without it. Any other rewrite is stopped (the AOF
    // already holds everything).
    let inner = &srv.aof.inner;
    if inner.rewriting.load(Ordering::SeqCst) {
        if inner.waiting_rewrite.load(Ordering::SeqCst) {
            if !force {
                tracing::warn!("Writing initial AOF, can't exit.");
                return Err("Writing initial AOF, can't exit.".into());
            }
            tracing::warn!("Writing initial AOF. Exit anyway.");
        }
        tracing::warn!("There is a child rewriting the AOF. Killing it!");
        kill_rewrite(srv);
    }
    if nosave || (!save_flag && save_points(srv).is_empty()) {
        return Ok(());
    }
    if srv.aof.loading() {
        // As Redis: a save now would replace the file with the part loaded so far.
        tracing::warn!("Shutting down while loading: the dataset is not saved.");
        return Ok(());
    }
    tracing::info!("Saving the final RDB snapshot before exiting.");
    save(srv).inspect_err(|_| tracing::warn!("Error trying to save the DB, can't exit."))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::types::compact::CompactBytes;

    pub(crate) fn lim() -> Limits {
        Limits {
            hash: crate::types::hash::HashLimits {
                max_entries: 128,
                max_value: 64,
            },
            zset: crate::types::zset::ZsetLimits {
                max_entries: 128,
                max_value: 64,
            },
            set_max_intset: 512,
            deep: true,
        }
    }

    fn sample(n: usize) -> Shard {
        let mut sh = Shard::default();
        for i in 0..n {
            let v = format!("value-{i}-{}", "x".repeat(i % 50));
            sh.insert(
                format!("k{i}").as_bytes(),
                Value::Str(CompactBytes::new(v.as_bytes())),
                false,
            );
            if i % 3 == 0 {
                sh.set_expire(format!("k{i}").as_bytes(), 4_000_000_000_000 + i as i64);
            }
        }
        sh
    }

    fn opts(compress: bool, checksum: bool) -> SaveOpts {
        SaveOpts {
            compress,
            checksum,
            key_delay: 0,
            functions: Vec::new(),
            aof_base: false,
            history: None,
        }
    }

    #[test]
    fn image_round_trips_with_and_without_compression_and_checksum() {
        let a = sample(200);
        let b = sample(5);
        for (c, k) in [(true, true), (false, true), (true, false)] {
            let (img, keys) = write_image(Vec::new(), &[vec![&a], vec![], vec![&b]], opts(c, k), 0)
                .expect("write");
            assert_eq!(keys, 205);
            assert!(img.starts_with(b"REDIS0010"));
            let p = parse(&img, "t", &lim(), 3, Some(0)).expect("parse");
            assert_eq!(p.end, img.len());
            assert_eq!(p.keys.len(), 205);
            assert_eq!(p.keys.iter().filter(|k| k.db == 2).count(), 5);
            let k0 = p
                .keys
                .iter()
                .find(|k| k.key == b"k3" && k.db == 0)
                .expect("k3");
            assert_eq!(k0.expire_at, 4_000_000_000_003);
            match &k0.value {
                Value::Str(s) => {
                    assert_eq!(&s[..], format!("value-3-{}", "x".repeat(3)).as_bytes())
                }
                _ => panic!("type"),
            }
            // Too few databases configured: refused.
            assert!(parse(&img, "t", &lim(), 2, None).is_err());
        }
    }

    #[test]
    fn damage_is_refused_never_panics() {
        let a = sample(60);
        let (img, _) = write_image(Vec::new(), &[vec![&a]], opts(true, true), 0).expect("write");
        for cut in 0..img.len() {
            assert!(
                parse(&img[..cut], "t", &lim(), 1, None).is_err(),
                "cut {cut}"
            );
        }
        for at in (9..img.len()).step_by(7) {
            let mut bad = img.clone();
            bad[at] ^= 0x55;
            assert!(parse(&bad, "t", &lim(), 1, None).is_err(), "flip at {at}");
        }
    }

    #[test]
    fn expired_keys_are_skipped_when_asked() {
        let mut sh = Shard::default();
        sh.insert(b"old", Value::Str(CompactBytes::new(b"v")), false);
        sh.set_expire(b"old", 1000);
        sh.insert(b"live", Value::Str(CompactBytes::new(b"v")), false);
        let (img, _) = write_image(Vec::new(), &[vec![&sh]], opts(false, true), 0).expect("write");
        let p = parse(&img, "t", &lim(), 1, Some(2000)).expect("parse");
        assert_eq!((p.keys.len(), p.expired), (1, 1));
        assert_eq!(p.expired_keys, vec![(0, b"old".to_vec())]);
        let p = parse(&img, "t", &lim(), 1, None).expect("parse");
        assert_eq!((p.keys.len(), p.expired), (2, 0));
    }

    #[test]
    fn the_replication_history_round_trips_and_is_absent_unless_recorded() {
        let sh = sample(3);
        let (img, _) = write_image(Vec::new(), &[vec![&sh]], opts(true, true), 0).expect("write");
        assert_eq!(
            parse(&img, "t", &lim(), 1, None).expect("parse").history,
            None
        );
        let history = crate::state::repl::SavedHistory {
            replid: "0123456789abcdef0123456789abcdef01234567".into(),
            offset: 147_564,
            stream_db: 9,
        };
        let mut o = opts(true, true);
        o.history = Some(history.clone());
        let (img, _) = write_image(Vec::new(), &[vec![&sh]], o, 0).expect("write");
        let p = parse(&img, "t", &lim(), 1, None).expect("parse");
        assert_eq!(p.history, Some(history));
        assert_eq!(p.keys.len(), 3);
    }

    #[test]
    fn redis_7_2_streams_and_functions_are_refused_by_name() {
        let mut img = b"REDIS0010".to_vec();
        img.push(21);
        rdb_encoding::put_string(&mut img, b"mystream");
        img.push(0);
        let e = parse(&img, "t", &lim(), 1, None).err().expect("refused");
        assert!(e.contains("mystream") && e.contains("stream"), "{e}");
        let mut img = b"REDIS0010".to_vec();
        img.push(OP_FUNCTION);
        let e = parse(&img, "t", &lim(), 1, None).err().expect("refused");
        assert!(e.contains("function"), "{e}");
    }

    #[test]
    fn function_libraries_round_trip() {
        let code = bytes::Bytes::from_static(
            b"#!lua name=lib\nredis.register_function('f', function() return 1 end)",
        );
        let mut o = opts(false, true);
        o.functions = vec![code.clone()];
        let (img, _) = write_image(Vec::new(), &[], o, 0).expect("write");
        let p = parse(&img, "t", &lim(), 1, None).expect("parse");
        assert_eq!(p.functions, vec![code]);
        // A library cut short is a damaged file, not an empty one.
        let at = img
            .windows(3)
            .position(|w| w == b"#!l")
            .expect("code in the image");
        assert!(parse(&img[..at + 3], "t", &lim(), 1, None).is_err());
    }

    #[test]
    fn lzf_round_trips() {
        let mut data = Vec::new();
        for i in 0..5000u32 {
            data.extend_from_slice(format!("member:{}:", i % 97).as_bytes());
        }
        let c = rdb_encoding::lzf_compress(&data, data.len()).expect("compresses");
        assert!(c.len() < data.len() / 3);
        let mut body = vec![0u8, 0xC3];
        rdb_encoding::put_len(&mut body, c.len() as u64);
        rdb_encoding::put_len(&mut body, data.len() as u64);
        body.extend_from_slice(&c);
        let mut r = Reader {
            buf: &body[1..],
            pos: 0,
        };
        assert_eq!(r.string().expect("decodes"), data);
        // Incompressible data is left alone.
        let noise: Vec<u8> = (0..200u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        assert!(rdb_encoding::lzf_compress(&noise, noise.len() - 4).is_none());
    }
}
