//! Set commands (SADD ... SSCAN).
//!
//! Redis 7.0 semantics: a write that empties a set deletes the key, SPOP is logged as SREM of
//! what it popped (or DEL when it popped everything), the *STORE commands build their result
//! as an intset first (so integer results stay intsets) and delete the destination when the
//! result is empty. Multi-key commands check every key's type before doing anything.

use super::args::{eq, SYNTAX};
use super::argv::{scan_reply, ArgReader};
use super::hash::{rand_count, PickBudget};
use super::{flags::*, CmdResult, Ctx, Keys, Spec};
use crate::keyspace::DbHandle;
use crate::notify;
use crate::protocol::reply::{Aggregate, BulkReply};
use crate::protocol::{Reply, Resp};
use crate::types::set::Set;
use crate::types::{Value, WRONGTYPE};
use bytes::Bytes;
use std::sync::atomic::Ordering;

const K1: Keys = Keys::Range(1, 1, 1);
const ALL: Keys = Keys::Range(1, -1, 1);
const G: &str = "set";

pub static COMMANDS: &[Spec] = &[
    Spec::new("sadd", -3, WRITE | DENYOOM | FAST, K1, sadd, G),
    Spec::new("srem", -3, WRITE | FAST, K1, srem, G),
    Spec::new("scard", 2, READONLY | FAST, K1, scard, G),
    Spec::new("sismember", 3, READONLY | FAST, K1, sismember, G),
    Spec::new("smismember", -3, READONLY | FAST, K1, smismember, G),
    Spec::new("smembers", 2, READONLY | SORT_FOR_SCRIPT, K1, smembers, G),
    Spec::new("srandmember", -2, READONLY, K1, srandmember, G),
    Spec::new("spop", -2, WRITE | FAST, K1, spop, G),
    Spec::new("smove", 4, WRITE | FAST, Keys::Range(1, 2, 1), smove, G),
    Spec::new("sinter", -2, READONLY | SORT_FOR_SCRIPT, ALL, sinter, G),
    Spec::new(
        "sintercard",
        -3,
        READONLY | MOVABLE_KEYS,
        Keys::Custom(sintercard_keys),
        sintercard,
        G,
    ),
    Spec::new("sunion", -2, READONLY | SORT_FOR_SCRIPT, ALL, sunion, G),
    Spec::new("sdiff", -2, READONLY | SORT_FOR_SCRIPT, ALL, sdiff, G),
    Spec::new("sinterstore", -3, WRITE | DENYOOM, ALL, sinterstore, G),
    Spec::new("sunionstore", -3, WRITE | DENYOOM, ALL, sunionstore, G),
    Spec::new("sdiffstore", -3, WRITE | DENYOOM, ALL, sdiffstore, G),
    Spec::new("sscan", -3, READONLY, K1, sscan, G),
];

fn max_intset(ctx: &Ctx) -> usize {
    ctx.srv.config.hot.set_max_intset.load(Ordering::Relaxed)
}

fn wrongtype() -> Reply {
    Reply::error(WRONGTYPE)
}

fn bulk(b: &[u8]) -> Reply {
    Reply::Bulk(Bytes::copy_from_slice(b))
}

/// The set at `key`: Ok(None) if absent, Err(WRONGTYPE) if another type. `count` says whether
/// the lookup counts in keyspace hits/misses (reads do, writes don't).
fn get_set<'d>(
    db: &'d mut DbHandle<'_, '_>,
    key: &[u8],
    count: bool,
) -> Result<Option<&'d mut Set>, Reply> {
    let v = if count { db.read(key) } else { db.value(key) };
    match v {
        None => Ok(None),
        Some(Value::Set(s)) => Ok(Some(s)),
        Some(_) => Err(wrongtype()),
    }
}

fn sadd(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let max = max_intset(ctx);
    let key = &args[1];
    let mut db = ctx.db();
    let exists = get_set(&mut db, key, false)?.is_some();
    if !exists {
        db.insert(key, Value::Set(Set::for_member(&args[2])));
    }
    let Ok(Some(s)) = get_set(&mut db, key, false) else {
        return Err(Reply::error("ERR internal error: set vanished"));
    };
    let added = args[2..].iter().filter(|m| s.add(m, max)).count();
    if added > 0 {
        db.modified(key);
        db.notify(notify::SET, "sadd", key);
    }
    ctx.dirty += added as u64;
    Ok(Reply::Int(added as i64))
}

fn srem(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let mut db = ctx.db();
    let s = match get_set(&mut db, key, false)? {
        None => return Ok(Reply::Int(0)),
        Some(s) => s,
    };
    let mut removed = 0;
    for m in &args[2..] {
        if s.remove(m) {
            removed += 1;
            if s.is_empty() {
                break;
            }
        }
    }
    let empty = s.is_empty();
    if removed > 0 {
        if empty {
            db.remove(key);
        }
        db.modified(key);
        db.notify(notify::SET, "srem", key);
        if empty {
            db.notify(notify::GENERIC, "del", key);
        }
    }
    ctx.dirty += removed as u64;
    Ok(Reply::Int(removed))
}

fn scard(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let mut db = ctx.db();
    let s = get_set(&mut db, &args[1], true)?;
    Ok(Reply::Int(s.map_or(0, |s| s.len() as i64)))
}

fn sismember(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let mut db = ctx.db();
    let s = get_set(&mut db, &args[1], true)?;
    Ok(Reply::Int(s.is_some_and(|s| s.contains(&args[2])) as i64))
}

fn smismember(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let mut db = ctx.db();
    let s = get_set(&mut db, &args[1], true)?;
    Ok(Reply::Array(
        args[2..]
            .iter()
            .map(|m| Reply::Int(s.as_ref().is_some_and(|s| s.contains(m)) as i64))
            .collect(),
    ))
}

/// A set's members as a reply: encoded while walked for a client (`resp`), a structure for a
/// script.
fn members_reply(s: &Set, resp: Option<Resp>) -> Reply {
    match resp {
        Some(resp) => {
            let mut reply = BulkReply::new(resp, Aggregate::Set, s.len());
            s.iter().for_each(|m| reply.push(&m));
            reply.finish()
        }
        None => Reply::Set(s.iter().map(|m| bulk(&m)).collect()),
    }
}

fn smembers(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let resp = ctx.encoding_for_client();
    let mut db = ctx.db();
    match get_set(&mut db, &args[1], true)? {
        None => Ok(Reply::Set(Vec::new())),
        Some(s) => Ok(members_reply(s, resp)),
    }
}

fn srandmember(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let mut rng = rand::thread_rng();
    if args.len() == 2 {
        let mut db = ctx.db();
        return match get_set(&mut db, &args[1], true)? {
            None => Ok(Reply::Null),
            Some(s) => s.random(&mut rng).map_or(Ok(Reply::Null), |m| Ok(bulk(&m))),
        };
    }
    if args.len() > 3 {
        return Err(Reply::error(SYNTAX));
    }
    let cap = ctx.reply_cap();
    let count = rand_count(&args[2], cap)?;
    let mut budget = PickBudget::new(cap);
    let mut db = ctx.db();
    let s = match get_set(&mut db, &args[1], true)? {
        None => return Ok(Reply::Array(Vec::new())),
        Some(s) => s,
    };
    if count == 0 || s.is_empty() {
        return Ok(Reply::Array(Vec::new()));
    }
    if count < 0 {
        let mut picks = Vec::new();
        for _ in 0..count.unsigned_abs() {
            let Some(m) = s.random(&mut rng) else {
                break;
            };
            let more = budget.take(m.len(), None);
            picks.push(bulk(&m));
            if !more {
                break;
            }
        }
        return Ok(Reply::Array(picks));
    }
    Ok(Reply::Array(
        s.random_distinct(count as usize, &mut rng)
            .into_iter()
            .map(|m| bulk(&m))
            .collect(),
    ))
}

fn spop(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let mut rng = rand::thread_rng();
    if args.len() > 3 {
        return Err(Reply::error(SYNTAX));
    }
    let count = if args.len() == 3 {
        Some(super::argv::positive_long(&args[2], None)?)
    } else {
        None
    };
    let mut db = ctx.db();
    let s = match get_set(&mut db, key, false)? {
        None => {
            return if count.is_some() {
                Ok(Reply::Set(Vec::new()))
            } else {
                Ok(Reply::Null)
            }
        }
        Some(s) => s,
    };
    let Some(count) = count else {
        let popped = s.pop_random(1, &mut rng);
        let empty = s.is_empty();
        let Some(m) = popped.into_iter().next() else {
            return Ok(Reply::Null);
        };
        if empty {
            db.remove(key);
        }
        db.modified(key);
        db.notify(notify::SET, "spop", key);
        if empty {
            db.notify(notify::GENERIC, "del", key);
        }
        ctx.dirty += 1;
        let m = Bytes::from(m);
        ctx.propagate_as(vec![vec![
            Bytes::from_static(b"SREM"),
            key.clone(),
            m.clone(),
        ]]);
        return Ok(Reply::Bulk(m));
    };
    if count == 0 {
        return Ok(Reply::Set(Vec::new()));
    }
    let all = count as u64 >= s.len() as u64;
    let popped = s.pop_random(count as usize, &mut rng);
    let empty = s.is_empty();
    if empty {
        db.remove(key);
    }
    db.modified(key);
    db.notify(notify::SET, "spop", key);
    if empty {
        db.notify(notify::GENERIC, "del", key);
    }
    ctx.dirty += 1;
    let popped: Vec<Bytes> = popped.into_iter().map(Bytes::from).collect();
    if all {
        ctx.propagate_as(vec![vec![Bytes::from_static(b"DEL"), key.clone()]]);
    } else {
        let cmds = popped
            .chunks(1024)
            .map(|c| {
                let mut cmd = vec![Bytes::from_static(b"SREM"), key.clone()];
                cmd.extend(c.iter().cloned());
                cmd
            })
            .collect();
        ctx.propagate_as(cmds);
    }
    Ok(Reply::Set(popped.into_iter().map(Reply::Bulk).collect()))
}

fn smove(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let max = max_intset(ctx);
    let (src, dst, m) = (&args[1], &args[2], &args[3]);
    let mut db = ctx.db();
    let src_has = match get_set(&mut db, src, false)? {
        None => return Ok(Reply::Int(0)),
        Some(s) => s.contains(m),
    };
    let dst_exists = get_set(&mut db, dst, false)?.is_some();
    if src == dst {
        return Ok(Reply::Int(src_has as i64));
    }
    if !src_has {
        return Ok(Reply::Int(0));
    }
    let src_empty = match get_set(&mut db, src, false) {
        Ok(Some(s)) => {
            s.remove(m);
            s.is_empty()
        }
        _ => false,
    };
    db.notify(notify::SET, "srem", src);
    if src_empty {
        db.remove(src);
        db.notify(notify::GENERIC, "del", src);
    }
    if !dst_exists {
        db.insert(dst, Value::Set(Set::for_member(m)));
    }
    db.modified(src);
    let added = match get_set(&mut db, dst, false) {
        Ok(Some(d)) => d.add(m, max),
        _ => false,
    };
    if added {
        db.modified(dst);
        db.notify(notify::SET, "sadd", dst);
    }
    ctx.dirty += 1 + added as u64;
    Ok(Reply::Int(1))
}

/// Type-check every key first (WRONGTYPE wins over everything), then return each key's size
/// (None if absent).
fn sizes(db: &mut DbHandle, keys: &[Bytes], count: bool) -> Result<Vec<Option<usize>>, Reply> {
    let mut out = Vec::with_capacity(keys.len());
    for k in keys {
        out.push(get_set(db, k, count)?.map(|s| s.len()));
    }
    Ok(out)
}

fn members_of(db: &mut DbHandle, key: &[u8]) -> Vec<Vec<u8>> {
    match get_set(db, key, false) {
        Ok(Some(s)) => s.iter().map(|m| m.to_vec()).collect(),
        _ => Vec::new(),
    }
}

/// Members common to all `keys` (in the smallest set's order), at most `limit` of them.
fn intersect(
    db: &mut DbHandle,
    keys: &[Bytes],
    sizes: &[Option<usize>],
    limit: usize,
) -> Vec<Vec<u8>> {
    if sizes.iter().any(|s| s.is_none()) {
        return Vec::new();
    }
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by_key(|&i| sizes[i]);
    let mut acc = members_of(db, &keys[order[0]]);
    for &i in &order[1..] {
        if acc.is_empty() {
            break;
        }
        if let Ok(Some(s)) = get_set(db, &keys[i], false) {
            acc.retain(|m| s.contains(m));
        }
    }
    acc.truncate(limit);
    acc
}

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Inter,
    Union,
    Diff,
}

/// Compute `op` over `keys`; Err on a wrong type.
fn compute(
    db: &mut DbHandle,
    keys: &[Bytes],
    op: Op,
    max: usize,
    count: bool,
) -> Result<Set, Reply> {
    let sz = sizes(db, keys, count)?;
    let mut res = Set::new_intset();
    match op {
        Op::Inter => {
            for m in intersect(db, keys, &sz, usize::MAX) {
                res.add(&m, max);
            }
        }
        Op::Union => {
            for (k, s) in keys.iter().zip(&sz) {
                if s.is_some() {
                    for m in members_of(db, k) {
                        res.add(&m, max);
                    }
                }
            }
        }
        Op::Diff => {
            if sz[0].is_some() {
                for m in members_of(db, &keys[0]) {
                    res.add(&m, max);
                }
                for k in &keys[1..] {
                    if res.is_empty() {
                        break;
                    }
                    if let Ok(Some(s)) = get_set(db, k, false) {
                        if s.len() < res.len() {
                            for m in s.iter() {
                                res.remove(&m);
                            }
                        } else {
                            let doomed: Vec<Vec<u8>> = res
                                .iter()
                                .filter(|m| s.contains(m))
                                .map(|m| m.to_vec())
                                .collect();
                            for m in doomed {
                                res.remove(&m);
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(res)
}

fn set_op(ctx: &mut Ctx, args: &[Bytes], op: Op) -> Reply {
    let max = max_intset(ctx);
    let resp = ctx.encoding_for_client();
    let mut db = ctx.db();
    match compute(&mut db, &args[1..], op, max, true) {
        Err(e) => e,
        Ok(s) => members_reply(&s, resp),
    }
}

fn set_op_store(ctx: &mut Ctx, args: &[Bytes], op: Op) -> CmdResult {
    let max = max_intset(ctx);
    let dst = &args[1];
    let mut db = ctx.db();
    let res = compute(&mut db, &args[2..], op, max, false)?;
    let n = res.len();
    if n > 0 {
        db.insert(dst, Value::Set(res));
        db.modified(dst);
        let event = match op {
            Op::Inter => "sinterstore",
            Op::Union => "sunionstore",
            Op::Diff => "sdiffstore",
        };
        db.notify(notify::SET, event, dst);
        ctx.dirty += 1;
    } else if db.remove(dst).is_some() {
        db.modified(dst);
        db.notify(notify::GENERIC, "del", dst);
        ctx.dirty += 1;
    }
    Ok(Reply::Int(n as i64))
}

fn sinter(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    Ok(set_op(ctx, args, Op::Inter))
}
fn sunion(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    Ok(set_op(ctx, args, Op::Union))
}
fn sdiff(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    Ok(set_op(ctx, args, Op::Diff))
}
fn sinterstore(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    set_op_store(ctx, args, Op::Inter)
}
fn sunionstore(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    set_op_store(ctx, args, Op::Union)
}
fn sdiffstore(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    set_op_store(ctx, args, Op::Diff)
}

fn numkeys(a: &[u8]) -> Option<usize> {
    crate::util::numtext::parse_i64(a)
        .filter(|&n| n > 0)
        .map(|n| n as usize)
}

fn sintercard_keys(args: &[Bytes]) -> Vec<usize> {
    match args.get(1).and_then(|a| numkeys(a)) {
        Some(n) => (2..(2 + n).min(args.len())).collect(),
        None => Vec::new(),
    }
}

fn sintercard(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let Some(n) = numkeys(&args[1]) else {
        return Err(Reply::error("ERR numkeys should be greater than 0"));
    };
    if n > args.len() - 2 {
        return Err(Reply::error(
            "ERR Number of keys can't be greater than number of args",
        ));
    }
    let mut limit = 0usize;
    let mut i = 2 + n;
    while i < args.len() {
        if eq(&args[i], "limit") && i + 1 < args.len() {
            match crate::util::numtext::parse_i64(&args[i + 1]) {
                Some(l) if l >= 0 => limit = l as usize,
                _ => return Err(Reply::error("ERR LIMIT can't be negative")),
            }
            i += 2;
        } else {
            return Err(Reply::error(SYNTAX));
        }
    }
    let keys = &args[2..2 + n];
    let mut db = ctx.db();
    let sz = sizes(&mut db, keys, true)?;
    let limit = if limit == 0 { usize::MAX } else { limit };
    Ok(Reply::Int(intersect(&mut db, keys, &sz, limit).len() as i64))
}

fn sscan(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let mut reader = ArgReader::new(args, 2);
    let cursor = reader.cursor()?;
    let mut db = ctx.db();
    let s = match get_set(&mut db, &args[1], true)? {
        None => return Ok(scan_reply(0, Vec::new())),
        Some(s) => s,
    };
    let opts = reader.scan_options(false)?;
    let mut items = Vec::new();
    let next = s.scan(cursor, opts.count, |m| {
        if opts.matches(m) {
            items.push(bulk(m));
        }
    });
    Ok(scan_reply(next, items))
}
