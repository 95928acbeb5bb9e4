//! Keyspace commands: DEL UNLINK EXISTS TYPE KEYS SCAN RANDOMKEY RENAME RENAMENX COPY MOVE
//! TOUCH OBJECT DUMP RESTORE.

use super::args::{eq, int, NOT_INT, SYNTAX};
use super::argv::{range_long, scan_reply, ArgReader};
use super::flags::*;
use super::{CmdResult, Ctx, Keys, Spec};
use crate::config::dir;
use crate::keyspace::NO_EXPIRE;
use crate::protocol::Reply;
use crate::types::Value;
use crate::util::numtext::{glob_match, parse_i64};
use bytes::Bytes;
use rand::Rng;
use std::sync::atomic::Ordering;

pub static COMMANDS: &[Spec] = &[
    Spec::new("del", -2, WRITE, Keys::Range(1, -1, 1), del, "generic"),
    Spec::new(
        "unlink",
        -2,
        WRITE | FAST,
        Keys::Range(1, -1, 1),
        unlink,
        "generic",
    ),
    Spec::new(
        "exists",
        -2,
        READONLY | FAST,
        Keys::Range(1, -1, 1),
        exists,
        "generic",
    ),
    Spec::new(
        "touch",
        -2,
        READONLY | FAST,
        Keys::Range(1, -1, 1),
        touch,
        "generic",
    ),
    Spec::new(
        "type",
        2,
        READONLY | FAST,
        Keys::Range(1, 1, 1),
        type_cmd,
        "generic",
    ),
    Spec::new("keys", 2, READONLY, Keys::Db, keys, "generic"),
    Spec::new("scan", -2, READONLY, Keys::Db, scan, "generic"),
    Spec::new("randomkey", 1, READONLY, Keys::Db, randomkey, "generic"),
    Spec::new("rename", 3, WRITE, Keys::Range(1, 2, 1), rename, "generic"),
    Spec::new(
        "renamenx",
        3,
        WRITE | FAST,
        Keys::Range(1, 2, 1),
        rename,
        "generic",
    ),
    Spec::new("copy", -3, WRITE | DENYOOM, Keys::All, copy, "generic"),
    Spec::new("move", 3, WRITE | FAST, Keys::All, move_cmd, "generic"),
    Spec::new("dump", 2, READONLY, Keys::Range(1, 1, 1), dump, "generic"),
    Spec::new(
        "restore",
        -4,
        WRITE | DENYOOM,
        Keys::Range(1, 1, 1),
        restore,
        "generic",
    ),
    // RESTORE as cluster slot migration sends it; without cluster mode it is RESTORE.
    Spec::new(
        "restore-asking",
        -4,
        WRITE | DENYOOM,
        Keys::Range(1, 1, 1),
        restore,
        "server",
    ),
    Spec::new(
        "object",
        -2,
        READONLY,
        Keys::Custom(object_keys),
        object,
        "generic",
    ),
];

fn object_keys(a: &[Bytes]) -> Vec<usize> {
    if a.len() >= 3 {
        vec![2]
    } else {
        vec![]
    }
}

/// Heap bytes a value allocates outside its keyspace slot (MEMORY USAGE).
pub fn value_heap_bytes(v: &Value) -> usize {
    match v {
        Value::Str(s) => s.heap_bytes(),
        Value::ZSet(z) => z.heap_bytes(),
        Value::Hash(h) => h.heap_bytes(),
        Value::Set(s) => s.heap_bytes(),
        Value::List(l) => l.heap_bytes(),
        Value::Stream(s) => {
            crate::alloc::size_class(std::mem::size_of::<crate::types::stream::Stream>())
                + s.heap_bytes()
        }
    }
}

fn del(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let lazy = crate::keyspace::lazyfree::USER_DEL.load(Ordering::Relaxed);
    delete(ctx, a, lazy)
}

/// UNLINK: DEL, with big values freed on the lazyfree thread.
fn unlink(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    delete(ctx, a, true)
}

fn delete(ctx: &mut Ctx, a: &[Bytes], lazy: bool) -> CmdResult {
    let mut n = 0;
    for k in &a[1..] {
        let gone = ctx.db().remove(k);
        if let Some(gone) = gone {
            if lazy {
                crate::keyspace::lazyfree::free(gone.value);
            }
            ctx.db().modified(k);
            ctx.notify(crate::notify::GENERIC, "del", k);
            n += 1;
        }
    }
    ctx.dirty += n as u64;
    Ok(Reply::Int(n))
}

/// TOUCH: counts the keys that exist and, unlike EXISTS, updates their access time.
fn touch(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    Ok(Reply::Int(
        a[1..].iter().filter(|k| ctx.db().read(k).is_some()).count() as i64,
    ))
}

fn exists(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    Ok(Reply::Int(
        a[1..]
            .iter()
            .filter(|k| ctx.db().read_no_touch(k).is_some())
            .count() as i64,
    ))
}

fn type_cmd(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    Ok(Reply::Status(
        ctx.db()
            .read_no_touch(&a[1])
            .map(|e| e.value.type_name())
            .unwrap_or("none"),
    ))
}

fn keys(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let pat = &a[1];
    let all = &pat[..] == b"*";
    let now = ctx.now_ms();
    let mut out = Vec::new();
    ctx.db().for_each_shard(|_, sh| {
        for (k, _, at) in sh.keys() {
            if at != NO_EXPIRE && at < now {
                continue;
            }
            if all || glob_match(pat, k, false) {
                out.push(Reply::Bulk(Bytes::copy_from_slice(k)));
            }
        }
    });
    Ok(Reply::Array(out))
}

fn scan(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let mut reader = ArgReader::new(a, 1);
    let cursor = reader.cursor()?;
    let opts = reader.scan_options(true)?;
    let shards = ctx.srv.keyspace.shards_per_db() as u64;
    // Cursor layout: high 24 bits = shard, low 40 bits = the shard's bucket cursor (Redis's
    // reverse-binary cursor over the shard table's buckets, `keyspace::table`). The table
    // never has more than 2^40 buckets, so the bucket cursor's increments, which run from
    // its top bit down and never set a bit at or above the bucket count, stay below the
    // shard's bits.
    let mut shard = cursor >> 40;
    let mut pos = cursor & ((1 << 40) - 1);
    if shard >= shards {
        return Ok(scan_reply(0, vec![]));
    }
    let now = ctx.now_ms();
    let mut found: Vec<Bytes> = Vec::new();
    let mut expired: Vec<Bytes> = Vec::new();
    // As Redis's scanGenericCommand, the call ends once COUNT keys were visited, counting the
    // expired ones and those the pattern or type filter drops: a budget of visited keys, not of
    // keys returned, and not spent on shards that are empty.
    let mut visited = 0usize;
    let next = loop {
        let mut db = ctx.db();
        let sh = db.shard_at(shard as usize);
        let budget = opts.count.saturating_sub(visited).max(1);
        let next_pos = sh.scan_buckets(pos, budget, |k, e, at| {
            visited += 1;
            if at != NO_EXPIRE && at < now {
                expired.push(Bytes::copy_from_slice(k));
                return;
            }
            if let Some(t) = &opts.type_name {
                if e.value.type_name() != t {
                    return;
                }
            }
            if !opts.matches(k) {
                return;
            }
            found.push(Bytes::copy_from_slice(k));
        });
        if next_pos != 0 {
            break (shard << 40) | next_pos;
        }
        shard += 1;
        pos = 0;
        if shard >= shards {
            break 0;
        }
        if visited >= opts.count {
            break shard << 40;
        }
    };
    for k in expired {
        // Deleting through the handle counts and logs the expiry.
        ctx.db().exists(&k);
    }
    Ok(scan_reply(
        next,
        found.into_iter().map(Reply::Bulk).collect(),
    ))
}

fn randomkey(ctx: &mut Ctx, _: &[Bytes]) -> CmdResult {
    let mut rng = rand::thread_rng();
    for _ in 0..100 {
        let mut sizes = Vec::new();
        ctx.db().for_each_shard(|_, sh| sizes.push(sh.len()));
        let total: usize = sizes.iter().sum();
        if total == 0 {
            return Ok(Reply::Null);
        }
        let mut pick = rng.gen_range(0..total);
        let mut sid = 0;
        while pick >= sizes[sid] {
            pick -= sizes[sid];
            sid += 1;
        }
        let Some(k) = ctx.db().shard_at(sid).random_key(&mut rng) else {
            continue;
        };
        if ctx.db().exists(&k) {
            return Ok(Reply::Bulk(k));
        }
    }
    Ok(Reply::Null)
}

fn rename(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let nx = eq(&a[0], "renamenx");
    let (src, dst) = (&a[1], &a[2]);
    if !ctx.db().exists(src) {
        return Err(Reply::error("ERR no such key"));
    }
    if src == dst {
        return if nx { Ok(Reply::Int(0)) } else { Ok(Reply::Ok) };
    }
    if nx && ctx.db().exists(dst) {
        return Ok(Reply::Int(0));
    }
    let Some(entry) = ctx.db().remove(src) else {
        return Err(Reply::error("ERR no such key"));
    };
    let expire = entry.expire_at;
    // As Redis: an existing destination is deleted first, so the key is created anew (`new`).
    if let Some(replaced) = ctx.db().remove(dst) {
        crate::keyspace::lazyfree::free_if(&crate::keyspace::lazyfree::SERVER_DEL, replaced.value);
    }
    ctx.db().insert(dst, entry.value);
    if expire != NO_EXPIRE {
        ctx.db().set_expire(dst, expire);
    }
    ctx.db().modified(src);
    ctx.db().modified(dst);
    ctx.notify(crate::notify::GENERIC, "rename_from", src);
    ctx.notify(crate::notify::GENERIC, "rename_to", dst);
    ctx.dirty += 1;
    if nx {
        Ok(Reply::Int(1))
    } else {
        Ok(Reply::Ok)
    }
}

/// A database number as COPY ... DB and MOVE read it (Redis's getIntFromObjectOrReply): a C
/// `int`, with Redis's range text otherwise; whether that database exists is checked after.
fn db_index(a: &[u8]) -> Result<i64, Reply> {
    range_long(a, i64::from(i32::MIN), i64::from(i32::MAX), None)
}

fn copy(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let (src, dst) = (&a[1], &a[2]);
    let mut target_db = ctx.client.db;
    let mut replace = false;
    let mut i = 3;
    while i < a.len() {
        if eq(&a[i], "replace") {
            replace = true;
            i += 1;
        } else if eq(&a[i], "db") && i + 1 < a.len() {
            let d = db_index(&a[i + 1])?;
            if d != 0 && crate::cluster::get(ctx.srv).is_some() {
                return Err(Reply::error(
                    "ERR Copying to another database is not allowed in cluster mode",
                ));
            }
            if d < 0 || d as usize >= ctx.srv.keyspace.num_dbs() {
                return Err(Reply::error("ERR DB index is out of range"));
            }
            target_db = d as usize;
            i += 2;
        } else {
            return Err(Reply::error(SYNTAX));
        }
    }
    if src == dst && target_db == ctx.client.db {
        return Err(Reply::error(
            "ERR source and destination objects are the same",
        ));
    }
    let mut db = ctx.db();
    let Some(e) = db.get(src) else {
        return Ok(Reply::Int(0));
    };
    let value = e.value.clone();
    let expire = db.shard(src).raw_expire(src).unwrap_or(NO_EXPIRE);
    let mut dest = ctx.db_at(target_db);
    if dest.exists(dst) {
        if !replace {
            return Ok(Reply::Int(0));
        }
        dest.remove(dst);
    }
    dest.insert(dst, value);
    if expire != NO_EXPIRE {
        dest.set_expire(dst, expire);
    }
    dest.modified(dst);
    dest.notify(crate::notify::GENERIC, "copy_to", dst);
    ctx.dirty += 1;
    Ok(Reply::Int(1))
}

fn move_cmd(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    if crate::cluster::get(ctx.srv).is_some() {
        return Err(Reply::error("ERR MOVE is not allowed in cluster mode"));
    }
    let key = &a[1];
    let d = db_index(&a[2])?;
    if d < 0 || d as usize >= ctx.srv.keyspace.num_dbs() {
        return Err(Reply::error("ERR DB index is out of range"));
    }
    let d = d as usize;
    if d == ctx.client.db {
        return Err(Reply::error(
            "ERR source and destination objects are the same",
        ));
    }
    if !ctx.db().exists(key) || ctx.db_at(d).exists(key) {
        return Ok(Reply::Int(0));
    }
    let Some(e) = ctx.db().remove(key) else {
        return Ok(Reply::Int(0));
    };
    let mut dest = ctx.db_at(d);
    dest.insert(key, e.value);
    if e.expire_at != NO_EXPIRE {
        dest.set_expire(key, e.expire_at);
    }
    dest.modified(key);
    ctx.db().modified(key);
    ctx.notify(crate::notify::GENERIC, "move_from", key);
    ctx.db_at(d).notify(crate::notify::GENERIC, "move_to", key);
    ctx.dirty += 1;
    Ok(Reply::Int(1))
}

/// DUMP key: the value in Redis's RDB object format (see `persistence::rdb`), nil if absent.
fn dump(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let mut db = ctx.db();
    match db.read_uncounted(&a[1]) {
        Some(v) => Ok(Reply::Bulk(Bytes::from(crate::persistence::rdb::dump(v)))),
        None => Ok(Reply::Null),
    }
}

/// RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency]
///
/// Checks in Redis's order: options, an existing key without REPLACE (-BUSYKEY), the TTL, the
/// payload's version and CRC, then its object. A TTL already in the past replaces nothing new:
/// the old key is deleted (with REPLACE) and logged as DEL. A relative TTL is logged as an
/// absolute one with ABSTTL, so a replay restores the same deadline.
fn restore(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    use crate::persistence::rdb;
    let (mut replace, mut absttl) = (false, false);
    // IDLETIME and FREQ exclude each other (the second is a syntax error, as in Redis).
    let (mut idle, mut freq): (Option<u64>, Option<u8>) = (None, None);
    let mut i = 4;
    while i < a.len() {
        let more = i + 1 < a.len();
        if eq(&a[i], "replace") {
            replace = true;
        } else if eq(&a[i], "absttl") {
            absttl = true;
        } else if eq(&a[i], "idletime") && more && freq.is_none() {
            let Ok(v) = int(&a[i + 1]) else {
                return Err(Reply::error(NOT_INT));
            };
            if v < 0 {
                return Err(Reply::error("ERR Invalid IDLETIME value, must be >= 0"));
            }
            idle = Some(v as u64);
            i += 1;
        } else if eq(&a[i], "freq") && more && idle.is_none() {
            let Ok(v) = int(&a[i + 1]) else {
                return Err(Reply::error(NOT_INT));
            };
            if !(0..=255).contains(&v) {
                return Err(Reply::error(
                    "ERR Invalid FREQ value, must be >= 0 and <= 255",
                ));
            }
            freq = Some(v as u8);
            i += 1;
        } else {
            return Err(Reply::error(SYNTAX));
        }
        i += 1;
    }
    let key = &a[1];
    if !replace && ctx.db().exists(key) {
        return Err(Reply::error("BUSYKEY Target key name already exists."));
    }
    let Ok(ttl) = int(&a[2]) else {
        return Err(Reply::error(NOT_INT));
    };
    if ttl < 0 {
        return Err(Reply::error("ERR Invalid TTL value, must be >= 0"));
    }
    let limits = rdb::Limits {
        hash: super::hash::limits(ctx),
        zset: ctx.srv.config.zset_limits(),
        set_max_intset: ctx.srv.config.hot.set_max_intset.load(Ordering::Relaxed),
        deep: rdb::deep_sanitization(
            &ctx.srv
                .config
                .text(crate::config::dir::SANITIZE_DUMP_PAYLOAD),
            ctx.client.repl.is_master || ctx.client.user.is_none(),
            ctx.client
                .user
                .as_ref()
                .is_some_and(|u| u.read().skips_sanitize_payload()),
        ),
    };
    let value = match rdb::restore(&a[3], &limits) {
        Ok(v) => v,
        Err(rdb::PayloadError::VersionOrChecksum) => {
            return Err(Reply::error(
                "ERR DUMP payload version or checksum are wrong",
            ))
        }
        Err(rdb::PayloadError::BadFormat) => return Err(Reply::error("ERR Bad data format")),
    };
    let deleted = replace && ctx.db().remove(key).is_some();
    let expire_at = match (ttl, absttl) {
        (0, _) => NO_EXPIRE,
        (t, true) => t,
        (t, false) => ctx.now_ms().saturating_add(t),
    };
    // Already expired: nothing to restore (except while loading the AOF, as Redis's
    // checkAlreadyExpired, where the key is restored with its past expiry).
    if expire_at != NO_EXPIRE && expire_at <= ctx.now_ms() && !ctx.srv.aof.loading() {
        if deleted {
            ctx.db().modified(key);
            ctx.notify(crate::notify::GENERIC, "del", key);
            ctx.dirty += 1;
            ctx.propagate_as(vec![vec![Bytes::from_static(b"DEL"), key.clone()]]);
        }
        return Ok(Reply::Ok);
    }
    let mut db = ctx.db();
    db.insert(key, value);
    if expire_at != NO_EXPIRE {
        db.set_expire(key, expire_at);
    }
    // The access field as Redis's objectSetLRUOrLFU sets it: IDLETIME counts in LRU mode,
    // FREQ in LFU mode, and the other is not recorded (the key starts fresh in that respect).
    if let Some(e) = db.header_no_touch(key) {
        if let Some(secs) = idle {
            crate::evict::set_idle_secs(e, secs);
        }
        if let Some(f) = freq {
            crate::evict::set_frequency(e, f);
        }
    }
    db.modified(key);
    db.notify(crate::notify::GENERIC, "restore", key);
    ctx.dirty += 1;
    if expire_at != NO_EXPIRE && !absttl {
        let mut logged = a.to_vec();
        logged[2] = Bytes::from(expire_at.to_string());
        logged.push(Bytes::from_static(b"ABSTTL"));
        ctx.propagate_as(vec![logged]);
    }
    Ok(Reply::Ok)
}

/// OBJECT REFCOUNT. Podium keeps no reference counts (a value belongs to one key); it answers
/// what Redis 7.0 would for the same value under the same settings, which tools and tests
/// read to learn whether small integers are shared: Redis shares the integers 0 to 9999
/// (refcount INT_MAX) unless maxmemory is set with an LRU or LFU policy, which needs a
/// per-object access clock; every other value has one reference.
fn refcount(srv: &crate::state::Server, v: &Value) -> i64 {
    const SHARED_INTEGERS: i64 = 10_000;
    const SHARED_REFCOUNT: i64 = i32::MAX as i64;
    let Value::Str(s) = v else {
        return 1;
    };
    let small = s.len() <= 20 && parse_i64(s).is_some_and(|n| (0..SHARED_INTEGERS).contains(&n));
    let policy = srv.config.text(dir::MAXMEMORY_POLICY);
    let per_object_clock = srv
        .config
        .hot
        .maxmemory
        .load(std::sync::atomic::Ordering::Relaxed)
        > 0
        && (policy.contains("lru") || policy.contains("lfu"));
    if small && !per_object_clock {
        SHARED_REFCOUNT
    } else {
        1
    }
}

fn object(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    if sub == "help" {
        return Ok(Reply::Array(
            [
                "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "ENCODING <key>",
                "FREQ <key>",
                "IDLETIME <key>",
                "REFCOUNT <key>",
                "HELP",
            ]
            .iter()
            .map(|s| Reply::StatusOwned(s.to_string()))
            .collect(),
        ));
    }
    if !matches!(sub.as_str(), "encoding" | "freq" | "idletime" | "refcount") {
        return Err(Reply::error(format!(
            "ERR unknown subcommand '{}'. Try OBJECT HELP.",
            String::from_utf8_lossy(&a[1])
        )));
    }
    if a.len() != 3 {
        return Err(crate::cmdspec::wrong_arity(&format!("object|{sub}")));
    }
    let srv = ctx.srv;
    let mut db = ctx.db();
    // OBJECT looks without touching: the idle time it reports is not reset by asking.
    let Some(e) = db.peek(&a[2]) else {
        return Ok(Reply::Null);
    };
    match sub.as_str() {
        "encoding" => Ok(Reply::bulk_slice(e.value.encoding_name().as_bytes())),
        "refcount" => Ok(Reply::Int(refcount(srv, &e.value))),
        "idletime" if crate::evict::lfu_mode() => Err(Reply::error("ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.")),
        "idletime" => Ok(Reply::Int((crate::evict::idle_ms(e) / 1000) as i64)),
        _ if crate::evict::lfu_mode() => Ok(Reply::Int(i64::from(crate::evict::frequency(e)))),
        _ => Err(Reply::error("ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.")),
    }
}
