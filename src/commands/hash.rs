//! Hash commands (HSET ... HSCAN), plus the HSCAN/SSCAN argument parsing shared with sets.
//!
//! Handlers follow Redis 7.0: a write that empties a hash deletes the key, every change calls
//! `modified()` and counts in `dirty`, HINCRBYFLOAT is logged as an HSET of its result, and
//! the compact/large conversion limits come from the live `hash-max-listpack-*` settings.

use super::args::{eq, int, SYNTAX};
use super::argv::{scan_reply, ArgReader};
use super::{flags::*, CmdResult, Ctx, Keys, Spec};
use crate::cmdspec::wrong_arity;
use crate::keyspace::DbHandle;
use crate::protocol::reply::{Aggregate, BulkReply};
use crate::protocol::{Reply, Resp};
use crate::types::hash::{Hash, HashLimits};
use crate::types::{Value, WRONGTYPE};
use crate::util::numtext::LongDouble;
use bytes::Bytes;
use std::sync::atomic::Ordering;

const K1: Keys = Keys::Range(1, 1, 1);
const G: &str = "hash";

pub static COMMANDS: &[Spec] = &[
    Spec::new("hset", -4, WRITE | DENYOOM | FAST, K1, hset, G),
    Spec::new("hmset", -4, WRITE | DENYOOM | FAST, K1, hmset, G),
    Spec::new("hsetnx", 4, WRITE | DENYOOM | FAST, K1, hsetnx, G),
    Spec::new("hget", 3, READONLY | FAST, K1, hget, G),
    Spec::new("hmget", -3, READONLY | FAST, K1, hmget, G),
    Spec::new("hgetall", 2, READONLY, K1, hgetall, G),
    Spec::new("hkeys", 2, READONLY | SORT_FOR_SCRIPT, K1, hkeys, G),
    Spec::new("hvals", 2, READONLY | SORT_FOR_SCRIPT, K1, hvals, G),
    Spec::new("hdel", -3, WRITE | FAST, K1, hdel, G),
    Spec::new("hlen", 2, READONLY | FAST, K1, hlen, G),
    Spec::new("hexists", 3, READONLY | FAST, K1, hexists, G),
    Spec::new("hstrlen", 3, READONLY | FAST, K1, hstrlen, G),
    Spec::new("hincrby", 4, WRITE | DENYOOM | FAST, K1, hincrby, G),
    Spec::new(
        "hincrbyfloat",
        4,
        WRITE | DENYOOM | FAST,
        K1,
        hincrbyfloat,
        G,
    ),
    Spec::new("hrandfield", -2, READONLY, K1, hrandfield, G),
    Spec::new("hscan", -3, READONLY, K1, hscan, G),
];

pub fn limits(ctx: &Ctx) -> HashLimits {
    let h = &ctx.srv.config.hot;
    HashLimits {
        max_entries: h.hash_max_entries.load(Ordering::Relaxed),
        max_value: h.hash_max_value.load(Ordering::Relaxed),
    }
}

fn wrongtype() -> Reply {
    Reply::error(WRONGTYPE)
}

/// The hash at `key` for reading: Ok(None) if absent, Err(WRONGTYPE) if another type.
fn read_hash<'d>(db: &'d mut DbHandle<'_, '_>, key: &[u8]) -> Result<Option<&'d mut Hash>, Reply> {
    match db.read(key) {
        None => Ok(None),
        Some(Value::Hash(h)) => Ok(Some(h)),
        Some(_) => Err(wrongtype()),
    }
}

/// The hash at `key` for writing, created empty if absent (Redis's hashTypeLookupWriteOrCreate).
fn write_hash<'d>(db: &'d mut DbHandle<'_, '_>, key: &[u8]) -> Result<&'d mut Hash, Reply> {
    let exists = match db.value(key) {
        None => false,
        Some(Value::Hash(_)) => true,
        Some(_) => return Err(wrongtype()),
    };
    if !exists {
        db.insert(key, Value::Hash(Hash::new()));
    }
    match db.value(key) {
        Some(Value::Hash(h)) => Ok(h),
        _ => Err(Reply::error("ERR internal error: hash vanished")),
    }
}

fn bulk(b: &[u8]) -> Reply {
    Reply::Bulk(Bytes::copy_from_slice(b))
}

fn hset_common(ctx: &mut Ctx, args: &[Bytes], name: &str, reply_ok: bool) -> CmdResult {
    if !args.len().is_multiple_of(2) {
        return Err(wrong_arity(name));
    }
    let lim = limits(ctx);
    let key = &args[1];
    let mut db = ctx.db();
    let h = write_hash(&mut db, key)?;
    if h.len() + (args.len() - 2) / 2 > lim.max_entries {
        // Redis's hashTypeTryConversion looks at the arguments before inserting.
        let new_fields = args[2..].chunks(2).filter(|p| !h.contains(&p[0])).count();
        if h.len() + new_fields > lim.max_entries {
            h.convert_to_large();
        }
    }
    let mut created = 0;
    for p in args[2..].chunks(2) {
        if h.set(&p[0], &p[1], &lim) {
            created += 1;
        }
    }
    db.modified(key);
    db.notify(crate::notify::HASH, "hset", key);
    ctx.dirty += ((args.len() - 2) / 2) as u64;
    if reply_ok {
        Ok(Reply::Ok)
    } else {
        Ok(Reply::Int(created))
    }
}

fn hset(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    hset_common(ctx, args, "hset", false)
}

fn hmset(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    hset_common(ctx, args, "hmset", true)
}

fn hsetnx(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let lim = limits(ctx);
    let key = &args[1];
    let mut db = ctx.db();
    let h = write_hash(&mut db, key)?;
    if h.contains(&args[2]) {
        return Ok(Reply::Int(0));
    }
    h.set(&args[2], &args[3], &lim);
    db.modified(key);
    db.notify(crate::notify::HASH, "hset", key);
    ctx.dirty += 1;
    Ok(Reply::Int(1))
}

fn hget(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let mut db = ctx.db();
    match read_hash(&mut db, &args[1])? {
        None => Ok(Reply::Null),
        Some(h) => Ok(h.get(&args[2]).map_or(Reply::Null, bulk)),
    }
}

fn hmget(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let mut db = ctx.db();
    match read_hash(&mut db, &args[1])? {
        None => Ok(Reply::Array(vec![Reply::Null; args.len() - 2])),
        Some(h) => Ok(Reply::Array(
            args[2..]
                .iter()
                .map(|f| h.get(f).map_or(Reply::Null, bulk))
                .collect(),
        )),
    }
}

fn hgetall(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let resp = ctx.encoding_for_client();
    let mut db = ctx.db();
    match read_hash(&mut db, &args[1])? {
        None => Ok(Reply::Map(Vec::new())),
        Some(h) => Ok(match resp {
            Some(resp) => {
                let mut reply = BulkReply::new(resp, Aggregate::Map, h.len() * 2);
                for (f, v) in h.iter() {
                    reply.push(f);
                    reply.push(v);
                }
                reply.finish()
            }
            None => Reply::Map(h.iter().map(|(f, v)| (bulk(f), bulk(v))).collect()),
        }),
    }
}

fn hkeys(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    hash_column(ctx, &args[1], |(f, _)| f)
}

fn hvals(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    hash_column(ctx, &args[1], |(_, v)| v)
}

/// HKEYS / HVALS: one side of every pair of the hash at `key`, in the hash's order.
fn hash_column(
    ctx: &mut Ctx,
    key: &[u8],
    side: impl for<'a> Fn((&'a [u8], &'a [u8])) -> &'a [u8],
) -> CmdResult {
    let resp = ctx.encoding_for_client();
    let mut db = ctx.db();
    match read_hash(&mut db, key)? {
        None => Ok(Reply::Array(Vec::new())),
        Some(h) => Ok(match resp {
            Some(resp) => {
                let mut reply = BulkReply::new(resp, Aggregate::Array, h.len());
                h.iter().for_each(|pair| reply.push(side(pair)));
                reply.finish()
            }
            None => Reply::Array(h.iter().map(|pair| bulk(side(pair))).collect()),
        }),
    }
}

fn hdel(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let mut db = ctx.db();
    let h = match db.value(key) {
        None => return Ok(Reply::Int(0)),
        Some(Value::Hash(h)) => h,
        Some(_) => return Err(wrongtype()),
    };
    let mut deleted = 0;
    for f in &args[2..] {
        if h.remove(f) {
            deleted += 1;
            if h.is_empty() {
                break;
            }
        }
    }
    let empty = h.is_empty();
    if deleted > 0 {
        if empty {
            db.remove(key);
        }
        db.modified(key);
        db.notify(crate::notify::HASH, "hdel", key);
        if empty {
            db.notify(crate::notify::GENERIC, "del", key);
        }
        ctx.dirty += deleted as u64;
    }
    Ok(Reply::Int(deleted))
}

fn hlen(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let mut db = ctx.db();
    match read_hash(&mut db, &args[1])? {
        None => Ok(Reply::Int(0)),
        Some(h) => Ok(Reply::Int(h.len() as i64)),
    }
}

fn hexists(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let mut db = ctx.db();
    match read_hash(&mut db, &args[1])? {
        None => Ok(Reply::Int(0)),
        Some(h) => Ok(Reply::Int(h.contains(&args[2]) as i64)),
    }
}

fn hstrlen(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let mut db = ctx.db();
    match read_hash(&mut db, &args[1])? {
        None => Ok(Reply::Int(0)),
        Some(h) => Ok(Reply::Int(h.get(&args[2]).map_or(0, |v| v.len() as i64))),
    }
}

fn hincrby(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let incr = int(&args[3])?;
    let lim = limits(ctx);
    let key = &args[1];
    let mut db = ctx.db();
    let h = write_hash(&mut db, key)?;
    let old = match h.get(&args[2]) {
        None => 0,
        Some(v) => match crate::types::set::canonical_i64(v) {
            Some(n) => n,
            None => return Err(Reply::error("ERR hash value is not an integer")),
        },
    };
    let Some(new) = old.checked_add(incr) else {
        return Err(Reply::error("ERR increment or decrement would overflow"));
    };
    let mut text = Vec::with_capacity(20);
    crate::util::numtext::format_i64(new, &mut text);
    h.set(&args[2], &text, &lim);
    db.modified(key);
    db.notify(crate::notify::HASH, "hincrby", key);
    ctx.dirty += 1;
    Ok(Reply::Int(new))
}

fn hincrbyfloat(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let Some(incr) = LongDouble::parse(&args[3]) else {
        return Err(Reply::error(super::args::NOT_FLOAT));
    };
    if !incr.is_finite() {
        return Err(Reply::error("ERR value is NaN or Infinity"));
    }
    let lim = limits(ctx);
    let key = &args[1];
    let mut db = ctx.db();
    let h = write_hash(&mut db, key)?;
    let old = match h.get(&args[2]) {
        None => LongDouble::from_i64(0),
        Some(v) => match LongDouble::parse(v) {
            Some(n) => n,
            None => return Err(Reply::error("ERR hash value is not a float")),
        },
    };
    let new = old.add(incr);
    if !new.is_finite() {
        return Err(Reply::error("ERR increment would produce NaN or Infinity"));
    }
    let Some(text) = new.format_human() else {
        return Err(Reply::error("ERR increment would produce NaN or Infinity"));
    };
    h.set(&args[2], &text, &lim);
    db.modified(key);
    db.notify(crate::notify::HASH, "hincrbyfloat", key);
    ctx.dirty += 1;
    let text = Bytes::from(text);
    ctx.propagate_as(vec![vec![
        Bytes::from_static(b"HSET"),
        key.clone(),
        args[2].clone(),
        text.clone(),
    ]]);
    Ok(Reply::Bulk(text))
}

/// Repeated random picks a reply may hold when nothing else bounds it: a client with no hard
/// output-buffer limit asking for more gets an error rather than a reply built in memory
/// without bound (Redis would build it). Under a hard limit any count is accepted and the
/// reply stops at the limit, closing the client, as Redis's does (see [`PickBudget`]).
pub(crate) const UNBOUNDED_PICKS_MAX: u64 = 1 << 24;

/// Parse the count of HRANDFIELD / SRANDMEMBER: Redis's range is ±LONG_MAX.
pub(crate) fn rand_count(a: &[u8], cap: Option<u64>) -> Result<i64, Reply> {
    let v = int(a)?;
    if v == i64::MIN {
        return Err(Reply::error("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807"));
    }
    if v < 0 {
        PickBudget::check(v.unsigned_abs(), cap)?;
    }
    Ok(v)
}

/// The bytes a reply of repeated random picks has used against [`Ctx::reply_cap`].
pub(crate) struct PickBudget {
    cap: Option<u64>,
    used: u64,
}

impl PickBudget {
    pub(crate) fn new(cap: Option<u64>) -> PickBudget {
        PickBudget { cap, used: 0 }
    }

    /// Whether `picks` repeated picks may be asked for under `cap` (see
    /// [`UNBOUNDED_PICKS_MAX`]); Redis's range error if not.
    pub(crate) fn check(picks: u64, cap: Option<u64>) -> Result<(), Reply> {
        if cap.is_none() && picks > UNBOUNDED_PICKS_MAX {
            return Err(Reply::error("ERR value is out of range"));
        }
        Ok(())
    }

    /// Count a pick of `len` bytes (with, for a pair, its second element's `second` bytes) as
    /// RESP2 encodes it at the least; false once the reply has passed the cap, when the caller
    /// stops picking.
    pub(crate) fn take(&mut self, len: usize, second: Option<usize>) -> bool {
        let bulk = |n: usize| 5 + n.checked_ilog10().unwrap_or(0) as u64 + 1 + n as u64;
        self.used += bulk(len) + second.map_or(0, bulk);
        self.cap.is_none_or(|cap| self.used <= cap)
    }
}

fn hrandfield(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let resp = ctx.client.resp;
    let mut rng = rand::thread_rng();
    if args.len() == 2 {
        let mut db = ctx.db();
        return match read_hash(&mut db, &args[1])? {
            None => Ok(Reply::Null),
            Some(h) => h
                .random(&mut rng)
                .map_or(Ok(Reply::Null), |(f, _)| Ok(bulk(f))),
        };
    }
    let cap = ctx.reply_cap();
    let count = rand_count(&args[2], cap)?;
    let mut budget = PickBudget::new(cap);
    let withvalues = match args.len() {
        3 => false,
        4 if eq(&args[3], "withvalues") => {
            if !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&count) {
                return Err(Reply::error("ERR value is out of range"));
            }
            true
        }
        _ => return Err(Reply::error(SYNTAX)),
    };
    let mut db = ctx.db();
    let h = match read_hash(&mut db, &args[1])? {
        None => return Ok(Reply::Array(Vec::new())),
        Some(h) => h,
    };
    if count == 0 || h.is_empty() {
        return Ok(Reply::Array(Vec::new()));
    }
    let pairs: Vec<(&[u8], &[u8])> = if count < 0 {
        let mut picks = Vec::new();
        for _ in 0..count.unsigned_abs() {
            let Some((f, v)) = h.random(&mut rng) else {
                break;
            };
            picks.push((f, v));
            if !budget.take(f.len(), withvalues.then_some(v.len())) {
                break;
            }
        }
        picks
    } else {
        h.random_distinct(count as usize, &mut rng)
    };
    if !withvalues {
        return Ok(Reply::Array(
            pairs.into_iter().map(|(f, _)| bulk(f)).collect(),
        ));
    }
    match resp {
        Resp::V3 => Ok(Reply::Array(
            pairs
                .into_iter()
                .map(|(f, v)| Reply::Array(vec![bulk(f), bulk(v)]))
                .collect(),
        )),
        Resp::V2 => Ok(Reply::Array(
            pairs
                .into_iter()
                .flat_map(|(f, v)| [bulk(f), bulk(v)])
                .collect(),
        )),
    }
}

fn hscan(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let mut reader = ArgReader::new(args, 2);
    let cursor = reader.cursor()?;
    let mut db = ctx.db();
    let h = match read_hash(&mut db, &args[1])? {
        None => return Ok(scan_reply(0, Vec::new())),
        Some(h) => h,
    };
    let opts = reader.scan_options(false)?;
    let mut items = Vec::new();
    let next = h.scan(cursor, opts.count, |f, v| {
        if opts.matches(f) {
            items.push(bulk(f));
            items.push(bulk(v));
        }
    });
    Ok(scan_reply(next, items))
}
