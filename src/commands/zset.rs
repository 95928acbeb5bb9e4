//! Sorted-set commands: ZADD and friends, the range/rank/score queries, the ZRANGE family
//! (including ZRANGESTORE), range removals, the set-algebra commands (ZUNION/ZINTER/ZDIFF,
//! their *STORE forms and ZINTERCARD, accepting plain sets as inputs with score 1), pops
//! (ZPOPMIN/ZPOPMAX/ZMPOP and their blocking forms), ZRANDMEMBER and ZSCAN.
//!
//! Semantics, error texts and reply shapes follow Redis 7.0 (plus ZRANK/ZREVRANK WITHSCORE
//! from 7.2). The data structure itself lives in `crate::types::zset`; this module only
//! parses arguments, applies the keyspace rules (WRONGTYPE, a write that empties a set
//! deletes the key, *STORE of an empty result deletes the destination, `modified()` after
//! every change) and decides what is propagated to the AOF.

use super::args::{eq, float, int, NOT_INT, SYNTAX};
use super::argv::{block_timeout_ms, is_keyword, scan_reply, ArgReader};
use super::flags::*;
use super::hash::PickBudget;
use super::{BlockRequest, CmdResult, Ctx, Keys, Spec};
use crate::blocking::Waiter;
use crate::keyspace::DbHandle;
use crate::notify;
use crate::protocol::reply::{MemberList, RangeReply};
use crate::protocol::{Reply, Resp};
use crate::types::zset::{InsertResult, LexBound, LexRange, ScoreBound, ScoreRange, ZSet};
use crate::types::{Value, WRONGTYPE};
use crate::util::numtext::{format_f64, parse_i64};
use bytes::Bytes;
use rand::Rng;

const G: &str = "sorted-set";

/// Before a pipelined batch of requests runs: if several of them are ZADD (one member),
/// ZINCRBY, ZSCORE, ZRANK or ZREVRANK on the same large sorted set, warm the cache for what
/// they will read, all at once, so their cache misses overlap: first the member index and the
/// nodes of all their members (`SkipList::warm_lookups`), then the skip-list searches toward
/// the old and new positions of each member (`SkipList::warm`; not needed for ZSCORE). Only
/// reads; the requests then run in order as usual. Looks at the key of the first such
/// request; others are left alone.
///
/// EVAL / EVALSHA requests whose first key is that sorted set count too, with their first
/// few arguments taken as the members the script will look up (the leaderboard script's
/// shape: `KEYS[1]` the board, `ARGV` the player): an argument that is no member costs one
/// index probe, one that is gets its search warmed at its current score.
pub fn warm_batch(srv: &crate::state::Server, db: usize, batch: &[Vec<Bytes>]) {
    const ZADD: u8 = 1;
    const ZINCRBY: u8 = 2;
    const RANK: u8 = 3;
    const SCORE: u8 = 4;
    const SCRIPT: u8 = 5;
    /// Arguments of a script taken as candidate members.
    const SCRIPT_ARGS: usize = 4;
    let kind = |a: &[Bytes]| -> u8 {
        match a.len() {
            4 if eq(&a[0], "zadd") => ZADD,
            4 if eq(&a[0], "zincrby") => ZINCRBY,
            3 | 4 if eq(&a[0], "zrevrank") || eq(&a[0], "zrank") => RANK,
            3 if eq(&a[0], "zscore") => SCORE,
            n if n >= 5
                && (eq(&a[0], "evalsha") || eq(&a[0], "eval"))
                && a[2].first().is_some_and(|d| (b'1'..=b'9').contains(d)) =>
            {
                SCRIPT
            }
            _ => 0,
        }
    };
    // The sorted set a request names: a script's first key.
    let key_of = |k: u8| -> usize {
        if k == SCRIPT {
            3
        } else {
            1
        }
    };
    let Some((first_kind, first)) = batch.iter().map(|a| (kind(a), a)).find(|(k, _)| *k != 0)
    else {
        return;
    };
    let key = &first[key_of(first_kind)][..];
    let mut g = crate::keyspace::Guards::new(&srv.keyspace);
    g.lock_one(db, key);
    let shard = srv.keyspace.shard_of(key);
    let found = g.shard_mut(db, shard).raw_get(key);
    let Some(Value::ZSet(z)) = found.as_deref().map(|e| &e.value) else {
        return;
    };
    if z.len() < ZSet::WARM_MIN_LEN {
        return;
    }
    // (kind, request, the members it names)
    let requests: Vec<(u8, &Vec<Bytes>, &[Bytes])> = batch
        .iter()
        .filter_map(|a| {
            let k = kind(a);
            if k == 0 || &a[key_of(k)][..] != key {
                return None;
            }
            let members: &[Bytes] = match k {
                RANK | SCORE => &a[2..3],
                SCRIPT => {
                    let numkeys = parse_i64(&a[2])
                        .filter(|&n| n >= 1 && (n as usize) <= a.len() - 3)?
                        as usize;
                    let args = &a[3 + numkeys..];
                    &args[..args.len().min(SCRIPT_ARGS)]
                }
                _ => &a[3..4],
            };
            Some((k, a, members))
        })
        .collect();
    if requests.len() < 2 {
        return;
    }
    let members: Vec<&[u8]> = requests
        .iter()
        .flat_map(|r| r.2.iter().map(|m| &m[..]))
        .collect();
    z.warm_lookups(&members);
    let num = |b: &[u8]| std::str::from_utf8(b).ok()?.parse::<f64>().ok();
    let mut scores = Vec::with_capacity(requests.len() * 2);
    for &(k, a, named) in &requests {
        match k {
            SCORE => {}
            SCRIPT => scores.extend(named.iter().filter_map(|m| z.score(m))),
            _ => {
                let member = &named[0][..];
                let old = z.score(member);
                if let Some(o) = old {
                    scores.push(o);
                }
                let new = match k {
                    ZADD => num(&a[2]),
                    ZINCRBY => num(&a[2]).map(|d| old.unwrap_or(0.0) + d),
                    _ => None,
                };
                if let Some(n) = new.filter(|n| !n.is_nan()) {
                    scores.push(n);
                }
            }
        }
    }
    if scores.len() > 1 {
        z.warm(&scores);
    }
}

pub static COMMANDS: &[Spec] = &[
    Spec::new(
        "zadd",
        -4,
        WRITE | DENYOOM | FAST,
        Keys::Range(1, 1, 1),
        zadd,
        G,
    ),
    Spec::new(
        "zincrby",
        4,
        WRITE | DENYOOM | FAST,
        Keys::Range(1, 1, 1),
        zincrby,
        G,
    ),
    Spec::new("zrem", -3, WRITE | FAST, Keys::Range(1, 1, 1), zrem, G),
    Spec::new("zcard", 2, READONLY | FAST, Keys::Range(1, 1, 1), zcard, G),
    Spec::new(
        "zscore",
        3,
        READONLY | FAST,
        Keys::Range(1, 1, 1),
        zscore,
        G,
    ),
    Spec::new(
        "zmscore",
        -3,
        READONLY | FAST,
        Keys::Range(1, 1, 1),
        zmscore,
        G,
    ),
    Spec::new("zrank", -3, READONLY | FAST, Keys::Range(1, 1, 1), zrank, G),
    Spec::new(
        "zrevrank",
        -3,
        READONLY | FAST,
        Keys::Range(1, 1, 1),
        zrevrank,
        G,
    ),
    Spec::new("zrange", -4, READONLY, Keys::Range(1, 1, 1), zrange, G),
    Spec::new(
        "zrangestore",
        -5,
        WRITE | DENYOOM,
        Keys::Range(1, 2, 1),
        zrangestore,
        G,
    ),
    Spec::new(
        "zrevrange",
        -4,
        READONLY,
        Keys::Range(1, 1, 1),
        zrevrange,
        G,
    ),
    Spec::new(
        "zrangebyscore",
        -4,
        READONLY,
        Keys::Range(1, 1, 1),
        zrangebyscore,
        G,
    ),
    Spec::new(
        "zrevrangebyscore",
        -4,
        READONLY,
        Keys::Range(1, 1, 1),
        zrevrangebyscore,
        G,
    ),
    Spec::new(
        "zrangebylex",
        -4,
        READONLY,
        Keys::Range(1, 1, 1),
        zrangebylex,
        G,
    ),
    Spec::new(
        "zrevrangebylex",
        -4,
        READONLY,
        Keys::Range(1, 1, 1),
        zrevrangebylex,
        G,
    ),
    Spec::new(
        "zcount",
        4,
        READONLY | FAST,
        Keys::Range(1, 1, 1),
        zcount,
        G,
    ),
    Spec::new(
        "zlexcount",
        4,
        READONLY | FAST,
        Keys::Range(1, 1, 1),
        zlexcount,
        G,
    ),
    Spec::new(
        "zremrangebyrank",
        4,
        WRITE,
        Keys::Range(1, 1, 1),
        zremrangebyrank,
        G,
    ),
    Spec::new(
        "zremrangebyscore",
        4,
        WRITE,
        Keys::Range(1, 1, 1),
        zremrangebyscore,
        G,
    ),
    Spec::new(
        "zremrangebylex",
        4,
        WRITE,
        Keys::Range(1, 1, 1),
        zremrangebylex,
        G,
    ),
    Spec::new(
        "zunionstore",
        -4,
        WRITE | DENYOOM | MOVABLE_KEYS,
        Keys::Custom(keys_store),
        zunionstore,
        G,
    ),
    Spec::new(
        "zinterstore",
        -4,
        WRITE | DENYOOM | MOVABLE_KEYS,
        Keys::Custom(keys_store),
        zinterstore,
        G,
    ),
    Spec::new(
        "zdiffstore",
        -4,
        WRITE | DENYOOM | MOVABLE_KEYS,
        Keys::Custom(keys_store),
        zdiffstore,
        G,
    ),
    Spec::new(
        "zunion",
        -3,
        READONLY | MOVABLE_KEYS,
        Keys::Custom(keys_numkeys_at1),
        zunion,
        G,
    ),
    Spec::new(
        "zinter",
        -3,
        READONLY | MOVABLE_KEYS,
        Keys::Custom(keys_numkeys_at1),
        zinter,
        G,
    ),
    Spec::new(
        "zdiff",
        -3,
        READONLY | MOVABLE_KEYS,
        Keys::Custom(keys_numkeys_at1),
        zdiff,
        G,
    ),
    Spec::new(
        "zintercard",
        -3,
        READONLY | MOVABLE_KEYS,
        Keys::Custom(keys_numkeys_at1),
        zintercard,
        G,
    ),
    Spec::new(
        "zpopmin",
        -2,
        WRITE | FAST,
        Keys::Range(1, 1, 1),
        zpopmin,
        G,
    ),
    Spec::new(
        "zpopmax",
        -2,
        WRITE | FAST,
        Keys::Range(1, 1, 1),
        zpopmax,
        G,
    ),
    Spec::new(
        "zmpop",
        -4,
        WRITE | MOVABLE_KEYS,
        Keys::Custom(keys_numkeys_at1),
        zmpop,
        G,
    ),
    Spec::new(
        "bzpopmin",
        -3,
        WRITE | NOSCRIPT | FAST | BLOCKING,
        Keys::Range(1, -2, 1),
        bzpopmin,
        G,
    ),
    Spec::new(
        "bzpopmax",
        -3,
        WRITE | NOSCRIPT | FAST | BLOCKING,
        Keys::Range(1, -2, 1),
        bzpopmax,
        G,
    ),
    Spec::new(
        "bzmpop",
        -5,
        WRITE | BLOCKING | MOVABLE_KEYS,
        Keys::Custom(keys_numkeys_at2),
        bzmpop,
        G,
    ),
    Spec::new(
        "zrandmember",
        -2,
        READONLY,
        Keys::Range(1, 1, 1),
        zrandmember,
        G,
    ),
    Spec::new("zscan", -3, READONLY, Keys::Range(1, 1, 1), zscan, G),
];

// ---------------------------------------------------------------------------------------------
// Key positions for numkeys-style commands.

fn numkeys_positions(args: &[Bytes], numkeys_idx: usize, first: usize) -> Vec<usize> {
    let n = args
        .get(numkeys_idx)
        .and_then(|a| parse_i64(a))
        .unwrap_or(0);
    // A count the command will refuse (none, or more keys than arguments) names no keys, as
    // Redis's genericGetKeys.
    if n <= 0 || n as u64 > args.len().saturating_sub(first) as u64 {
        return Vec::new();
    }
    (first..first + n as usize).collect()
}

/// ZUNIONSTORE dst numkeys key... : the destination and every input.
fn keys_store(args: &[Bytes]) -> Vec<usize> {
    // No input keys (a numkeys the command will refuse): no keys at all, as Redis's
    // zunionInterDiffStoreGetKeys, so COMMAND GETKEYS agrees.
    let inputs = numkeys_positions(args, 2, 3);
    if inputs.is_empty() {
        return inputs;
    }
    let mut v = vec![1];
    v.extend(inputs);
    v
}

/// ZUNION numkeys key... (also ZINTERCARD, ZMPOP).
fn keys_numkeys_at1(args: &[Bytes]) -> Vec<usize> {
    numkeys_positions(args, 1, 2)
}

/// BZMPOP timeout numkeys key...
fn keys_numkeys_at2(args: &[Bytes]) -> Vec<usize> {
    numkeys_positions(args, 2, 3)
}

// ---------------------------------------------------------------------------------------------
// Shared helpers.

fn wrongtype() -> Reply {
    Reply::error(WRONGTYPE)
}

/// The sorted set in `v`: Ok(None) if the key is missing, Err(WRONGTYPE) for another type.
fn as_zset(v: Option<&mut Value>) -> Result<Option<&mut ZSet>, Reply> {
    match v {
        None => Ok(None),
        Some(Value::ZSet(z)) => Ok(Some(z)),
        Some(_) => Err(wrongtype()),
    }
}

fn bulk(m: &[u8]) -> Reply {
    Reply::Bulk(Bytes::copy_from_slice(m))
}

fn f64_text(d: f64) -> Bytes {
    let mut v = Vec::with_capacity(24);
    format_f64(d, &mut v);
    Bytes::from(v)
}

/// strtod-like parse used by score ranges: leading blanks skipped, the whole rest must be a
/// number (an empty rest is 0, as strtod leaves it), NaN rejected.
fn range_float(s: &[u8]) -> Option<f64> {
    // strtod reads a C string: it ends at the first NUL.
    let s = crate::util::c_str(s);
    let t = std::str::from_utf8(s).ok()?;
    let t = t.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    if t.is_empty() {
        return if s.is_empty() || s.len() == t.len() {
            Some(0.0)
        } else {
            None
        };
    }
    // Decimal text (overflow to infinity and underflow to zero included, as strtod
    // accepts them here), else the hex floats strtod also reads.
    let v: f64 = t
        .parse()
        .ok()
        .or_else(|| crate::util::numtext::parse_f64(t.as_bytes()))?;
    if v.is_nan() {
        return None;
    }
    Some(v)
}

fn score_bound(s: &[u8]) -> Option<ScoreBound> {
    if let Some(rest) = s.strip_prefix(b"(") {
        range_float(rest).map(ScoreBound::Exclusive)
    } else {
        range_float(s).map(ScoreBound::Inclusive)
    }
}

/// Redis's zslParseRange.
pub fn parse_score_range(min: &[u8], max: &[u8]) -> Result<ScoreRange, Reply> {
    match (score_bound(min), score_bound(max)) {
        (Some(min), Some(max)) => Ok(ScoreRange { min, max }),
        _ => Err(Reply::error("ERR min or max is not a float")),
    }
}

fn lex_bound(s: &[u8]) -> Option<LexBound> {
    match s.first() {
        Some(b'+') if s.len() == 1 => Some(LexBound::PosInf),
        Some(b'-') if s.len() == 1 => Some(LexBound::NegInf),
        Some(b'(') => Some(LexBound::Exclusive(s[1..].to_vec())),
        Some(b'[') => Some(LexBound::Inclusive(s[1..].to_vec())),
        _ => None,
    }
}

/// Redis's zslParseLexRange.
pub fn parse_lex_range(min: &[u8], max: &[u8]) -> Result<LexRange, Reply> {
    match (lex_bound(min), lex_bound(max)) {
        (Some(min), Some(max)) => Ok(LexRange { min, max }),
        _ => Err(Reply::error("ERR min or max not valid string range item")),
    }
}

/// Clamp a Redis (start, end) rank pair against `len`; None when the range is empty.
fn rank_range(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let llen = len as i64;
    let mut start = if start < 0 { llen + start } else { start };
    let mut end = if end < 0 { llen + end } else { end };
    if start < 0 {
        start = 0;
    }
    if start > end || start >= llen {
        return None;
    }
    if end >= llen {
        end = llen - 1;
    }
    Some((start as usize, end as usize))
}

/// Store `items` (already in order) as a new sorted set at `dst`, or delete `dst` when empty.
/// Returns the reply (the count) and bumps dirty as Redis does.
pub(crate) fn store_result<'m>(
    ctx: &mut Ctx,
    dst: &[u8],
    items: impl Iterator<Item = (&'m [u8], f64)> + Clone,
    event: &'static str,
) -> Reply {
    let limits = ctx.srv.config.zset_limits();
    let mut db = ctx.db();
    let (count, maxlen) = items
        .clone()
        .fold((0usize, 0usize), |(n, l), (m, _)| (n + 1, l.max(m.len())));
    if count == 0 {
        let existed = db.remove(dst).is_some();
        if existed {
            db.modified(dst);
            db.notify(notify::GENERIC, "del", dst);
            ctx.dirty += 1;
        }
        return Reply::Int(0);
    }
    let mut z = ZSet::new_for(maxlen, count, &limits);
    for (m, s) in items {
        // `z` was made in the encoding its final size takes, and the members are distinct.
        let s = z.stored_score(m, s, Some(false), &limits);
        z.insert(m, s, &limits);
    }
    let n = z.len();
    db.insert(dst, Value::ZSet(z));
    db.modified(dst);
    db.notify(notify::ZSET, event, dst);
    ctx.dirty += 1;
    Reply::Int(n as i64)
}

// ---------------------------------------------------------------------------------------------
// ZADD / ZINCRBY.

pub(crate) fn zadd(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let (mut nx, mut xx, mut ch, mut incr, mut gt, mut lt) =
        (false, false, false, false, false, false);
    let mut idx = 2;
    while idx < args.len() {
        let a = &args[idx][..];
        if eq(a, "nx") {
            nx = true;
        } else if eq(a, "xx") {
            xx = true;
        } else if eq(a, "ch") {
            ch = true;
        } else if eq(a, "incr") {
            incr = true;
        } else if eq(a, "gt") {
            gt = true;
        } else if eq(a, "lt") {
            lt = true;
        } else {
            break;
        }
        idx += 1;
    }
    let rest = &args[idx..];
    if rest.is_empty() || !rest.len().is_multiple_of(2) {
        return Err(Reply::error(SYNTAX));
    }
    if nx && xx {
        return Err(Reply::error(
            "ERR XX and NX options at the same time are not compatible",
        ));
    }
    if (nx && (gt || lt)) || (gt && lt) {
        return Err(Reply::error(
            "ERR GT, LT, and/or NX options at the same time are not compatible",
        ));
    }
    if incr && rest.len() > 2 {
        return Err(Reply::error(
            "ERR INCR option supports a single increment-element pair",
        ));
    }
    let mut scores = Vec::with_capacity(rest.len() / 2);
    for pair in rest.chunks_exact(2) {
        scores.push(float(&pair[0])?);
    }
    Ok(generic_zadd(
        ctx,
        &args[1],
        rest,
        &scores,
        ZaddFlags {
            nx,
            xx,
            ch,
            incr,
            gt,
            lt,
        },
    ))
}

#[derive(Clone, Copy)]
struct ZaddFlags {
    nx: bool,
    xx: bool,
    ch: bool,
    incr: bool,
    gt: bool,
    lt: bool,
}

fn generic_zadd(ctx: &mut Ctx, key: &[u8], pairs: &[Bytes], scores: &[f64], f: ZaddFlags) -> Reply {
    let limits = ctx.srv.config.zset_limits();
    let mut db = ctx.db();
    let exists = match db.value(key) {
        None => false,
        Some(Value::ZSet(_)) => true,
        Some(_) => return wrongtype(),
    };
    if !exists {
        if f.xx {
            return if f.incr { Reply::Null } else { Reply::Int(0) };
        }
        let z = ZSet::new_for(pairs[1].len(), scores.len(), &limits);
        db.insert(key, Value::ZSet(z));
    }
    let Some(Value::ZSet(z)) = db.value(key) else {
        return wrongtype();
    };
    let (mut added, mut updated, mut processed) = (0i64, 0i64, 0i64);
    let mut last = 0.0;
    let mut err = None;
    for (pair, &score) in pairs.chunks_exact(2).zip(scores) {
        let member = &pair[1][..];
        let plain = !(f.nx || f.xx || f.incr || f.gt || f.lt);
        if plain {
            // One operation: insert or update.
            let score = z.stored_score(member, score, None, &limits);
            match z.insert(member, score, &limits) {
                InsertResult::Added => added += 1,
                InsertResult::Updated { .. } => updated += 1,
                InsertResult::Unchanged => {}
            }
            processed += 1;
            last = score;
            continue;
        }
        match z.score(member) {
            Some(cur) => {
                if f.nx {
                    continue;
                }
                let mut new = score;
                if f.incr {
                    new = cur + score;
                    if new.is_nan() {
                        err = Some(Reply::error("ERR resulting score is not a number (NaN)"));
                        break;
                    }
                }
                if (f.lt && new >= cur) || (f.gt && new <= cur) {
                    continue;
                }
                if new != cur {
                    let new = z.stored_score(member, new, Some(true), &limits);
                    z.insert(member, new, &limits);
                    updated += 1;
                }
                processed += 1;
                last = new;
            }
            None => {
                if f.xx {
                    continue;
                }
                let stored = z.stored_score(member, score, Some(false), &limits);
                z.insert(member, stored, &limits);
                added += 1;
                processed += 1;
                last = score;
            }
        }
    }
    let empty = z.is_empty();
    if empty {
        // Only possible when the key was just created and nothing got in (an error).
        db.remove(key);
    }
    if added + updated > 0 {
        db.modified(key);
        db.notify(notify::ZSET, if f.incr { "zincr" } else { "zadd" }, key);
    }
    ctx.dirty += (added + updated) as u64;
    if let Some(e) = err {
        return e;
    }
    if f.incr {
        if processed > 0 {
            Reply::Double(last)
        } else {
            Reply::Null
        }
    } else if f.ch {
        Reply::Int(added + updated)
    } else {
        Reply::Int(added)
    }
}

fn zincrby(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    // Redis runs ZINCRBY through ZADD's parser: a ZADD flag where the increment goes leaves
    // an odd number of score/member arguments, a syntax error.
    if ["nx", "xx", "ch", "incr", "gt", "lt"]
        .iter()
        .any(|f| is_keyword(&args[2], f))
    {
        return Err(Reply::error(SYNTAX));
    }
    let incr = float(&args[2])?;
    let pairs = [args[2].clone(), args[3].clone()];
    let flags = ZaddFlags {
        nx: false,
        xx: false,
        ch: false,
        incr: true,
        gt: false,
        lt: false,
    };
    Ok(generic_zadd(ctx, &args[1], &pairs, &[incr], flags))
}

// ---------------------------------------------------------------------------------------------
// ZREM, ZCARD, ZSCORE, ZMSCORE, ZRANK.

fn zrem(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let key = &args[1][..];
    let mut db = ctx.db();
    let Some(z) = as_zset(db.value(key))? else {
        return Ok(Reply::Int(0));
    };
    let mut deleted = 0;
    for m in &args[2..] {
        if z.remove(m).is_some() {
            deleted += 1;
            if z.is_empty() {
                break;
            }
        }
    }
    let empty = z.is_empty();
    if empty {
        db.remove(key);
    }
    if deleted > 0 {
        db.modified(key);
        db.notify(notify::ZSET, "zrem", key);
        if empty {
            db.notify(notify::GENERIC, "del", key);
        }
    }
    ctx.dirty += deleted;
    Ok(Reply::Int(deleted as i64))
}

fn zcard(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let mut db = ctx.db();
    match as_zset(db.read(&args[1]))? {
        Some(z) => Ok(Reply::Int(z.len() as i64)),
        None => Ok(Reply::Int(0)),
    }
}

fn zscore(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let mut db = ctx.db();
    match as_zset(db.read(&args[1]))?.and_then(|z| z.score(&args[2])) {
        Some(s) => Ok(Reply::Double(s)),
        None => Ok(Reply::Null),
    }
}

fn zmscore(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let mut db = ctx.db();
    let z = as_zset(db.read(&args[1]))?;
    let out = args[2..]
        .iter()
        .map(|m| match z.as_ref().and_then(|z| z.score(m)) {
            Some(s) => Reply::Double(s),
            None => Reply::Null,
        })
        .collect();
    Ok(Reply::Array(out))
}

fn zrank_generic(ctx: &mut Ctx, args: &[Bytes], reverse: bool) -> CmdResult {
    let withscore = match args.len() {
        3 => false,
        4 if eq(&args[3], "withscore") => true,
        _ => return Err(Reply::error(SYNTAX)),
    };
    let mut db = ctx.db();
    let found = as_zset(db.read(&args[1]))?.and_then(|z| z.rank(&args[2], reverse));
    match (found, withscore) {
        (Some((r, _)), false) => Ok(Reply::Int(r as i64)),
        (Some((r, s)), true) => Ok(Reply::Array(vec![Reply::Int(r as i64), Reply::Double(s)])),
        (None, false) => Ok(Reply::Null),
        (None, true) => Ok(Reply::NullArray),
    }
}

fn zrank(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    zrank_generic(ctx, args, false)
}

fn zrevrank(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    zrank_generic(ctx, args, true)
}

// ---------------------------------------------------------------------------------------------
// The ZRANGE family.

#[derive(Clone, Copy, PartialEq)]
enum RangeType {
    Auto,
    Rank,
    Score,
    Lex,
}

#[derive(Clone, Copy, PartialEq)]
enum Direction {
    Auto,
    Forward,
    Reverse,
}

/// Redis's zrangeGenericCommand. `key_idx` is the source key; min/max follow it; options
/// start at `key_idx + 3`. `dst` is ZRANGESTORE's destination.
fn zrange_generic(
    ctx: &mut Ctx,
    args: &[Bytes],
    key_idx: usize,
    dst: Option<&[u8]>,
    mut rtype: RangeType,
    mut dir: Direction,
) -> CmdResult {
    let store = dst.is_some();
    let mut withscores = false;
    let mut offset: i64 = 0;
    let mut limit: i64 = -1;
    let mut j = key_idx + 3;
    while j < args.len() {
        let a = &args[j][..];
        let left = args.len() - j - 1;
        if !store && eq(a, "withscores") {
            withscores = true;
        } else if eq(a, "limit") && left >= 2 {
            offset = int(&args[j + 1])?;
            limit = int(&args[j + 2])?;
            j += 2;
        } else if dir == Direction::Auto && eq(a, "rev") {
            dir = Direction::Reverse;
        } else if rtype == RangeType::Auto && eq(a, "bylex") {
            rtype = RangeType::Lex;
        } else if rtype == RangeType::Auto && eq(a, "byscore") {
            rtype = RangeType::Score;
        } else {
            return Err(Reply::error(SYNTAX));
        }
        j += 1;
    }
    if dir == Direction::Auto {
        dir = Direction::Forward;
    }
    if rtype == RangeType::Auto {
        rtype = RangeType::Rank;
    }
    if limit != -1 && rtype == RangeType::Rank {
        return Err(Reply::error(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if withscores && rtype == RangeType::Lex {
        return Err(Reply::error(
            "ERR syntax error, WITHSCORES not supported in combination with BYLEX",
        ));
    }
    let reverse = dir == Direction::Reverse;
    let (mut min_idx, mut max_idx) = (key_idx + 1, key_idx + 2);
    if reverse && rtype != RangeType::Rank {
        std::mem::swap(&mut min_idx, &mut max_idx);
    }
    let parsed = match rtype {
        RangeType::Score => Parsed::Score(parse_score_range(&args[min_idx], &args[max_idx])?),
        RangeType::Lex => Parsed::Lex(parse_lex_range(&args[min_idx], &args[max_idx])?),
        _ => {
            let s = int(&args[min_idx])?;
            let e = int(&args[max_idx])?;
            Parsed::Rank(s, e)
        }
    };
    // A client reading the reply as sent gets it encoded during the walk; a script (which
    // reads the structure) and ZRANGESTORE (which stores the members) get the members copied.
    let direct = dst.is_none() && !ctx.client.in_script;
    let resp = ctx.client.resp;
    let items = {
        let mut db = ctx.db();
        let z = as_zset(db.read(&args[key_idx]))?;
        let hint = match (&z, &parsed) {
            (Some(z), Parsed::Rank(s, e)) => {
                rank_range(*s, *e, z.len()).map_or(0, |(s, e)| e - s + 1)
            }
            (Some(_), _) => 16,
            (None, _) => 0,
        };
        if direct {
            let mut reply = RangeReply::new(resp, withscores, hint);
            if let Some(z) = z {
                walk_range(z, &parsed, reverse, offset, limit, |m, s| reply.push(m, s));
            }
            return Ok(reply.finish());
        }
        let mut items = MemberList::with_capacity(hint);
        if let Some(z) = z {
            walk_range(z, &parsed, reverse, offset, limit, |m, s| items.push(m, s));
        }
        items
    };
    if let Some(dst) = dst {
        return Ok(store_result(ctx, dst, items.iter(), "zrangestore"));
    }
    if withscores {
        Ok(Reply::ScoredMembers(items))
    } else {
        Ok(Reply::Members(items))
    }
}

/// The parsed range of a ZRANGE-family command: ranks, scores or lexicographic bounds.
enum Parsed {
    Rank(i64, i64),
    Score(ScoreRange),
    Lex(LexRange),
}

/// Call `push` with each (member, score) of `parsed` in `z`, in the reply's order, after
/// `offset` and at most `limit` of them (-1: no limit) for score and lexicographic ranges.
fn walk_range(
    z: &ZSet,
    parsed: &Parsed,
    reverse: bool,
    offset: i64,
    limit: i64,
    push: impl FnMut(&[u8], f64),
) {
    match parsed {
        Parsed::Rank(s, e) => {
            if let Some((s, e)) = rank_range(*s, *e, z.len()) {
                z.for_each_in_rank_range(s, e, reverse, push);
            }
        }
        Parsed::Score(r) => {
            if offset >= 0 {
                let lim = (limit >= 0).then_some(limit as usize);
                z.for_each_in_score_range(r, reverse, offset as usize, lim, push);
            }
        }
        Parsed::Lex(r) => {
            if offset >= 0 {
                let lim = (limit >= 0).then_some(limit as usize);
                z.for_each_in_lex_range(r, reverse, offset as usize, lim, push);
            }
        }
    }
}

fn zrange(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    zrange_generic(ctx, args, 1, None, RangeType::Auto, Direction::Auto)
}

fn zrangestore(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let dst = args[1].clone();
    zrange_generic(ctx, args, 2, Some(&dst), RangeType::Auto, Direction::Auto)
}

fn zrevrange(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    zrange_generic(ctx, args, 1, None, RangeType::Rank, Direction::Reverse)
}

fn zrangebyscore(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    zrange_generic(ctx, args, 1, None, RangeType::Score, Direction::Forward)
}

fn zrevrangebyscore(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    zrange_generic(ctx, args, 1, None, RangeType::Score, Direction::Reverse)
}

fn zrangebylex(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    zrange_generic(ctx, args, 1, None, RangeType::Lex, Direction::Forward)
}

fn zrevrangebylex(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    zrange_generic(ctx, args, 1, None, RangeType::Lex, Direction::Reverse)
}

fn zcount(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let r = parse_score_range(&args[2], &args[3])?;
    let mut db = ctx.db();
    match as_zset(db.read(&args[1]))? {
        Some(z) => Ok(Reply::Int(z.count_in_score_range(&r) as i64)),
        None => Ok(Reply::Int(0)),
    }
}

fn zlexcount(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let r = parse_lex_range(&args[2], &args[3])?;
    let mut db = ctx.db();
    match as_zset(db.read(&args[1]))? {
        Some(z) => Ok(Reply::Int(z.count_in_lex_range(&r) as i64)),
        None => Ok(Reply::Int(0)),
    }
}

// ---------------------------------------------------------------------------------------------
// ZREMRANGEBY*.

enum RemRange {
    Rank(i64, i64),
    Score(ScoreRange),
    Lex(LexRange),
}

fn zremrange_generic(ctx: &mut Ctx, args: &[Bytes], r: RemRange) -> CmdResult {
    let key = &args[1][..];
    let mut db = ctx.db();
    let Some(z) = as_zset(db.value(key))? else {
        return Ok(Reply::Int(0));
    };
    let event = match r {
        RemRange::Rank(..) => "zremrangebyrank",
        RemRange::Score(_) => "zremrangebyscore",
        RemRange::Lex(_) => "zremrangebylex",
    };
    let removed = match r {
        RemRange::Rank(s, e) => match rank_range(s, e, z.len()) {
            Some((s, e)) => z.remove_rank_range(s, e),
            None => 0,
        },
        RemRange::Score(r) => z.remove_score_range(&r),
        RemRange::Lex(r) => z.remove_lex_range(&r),
    };
    let empty = z.is_empty();
    if empty {
        db.remove(key);
    }
    if removed > 0 {
        db.modified(key);
        db.notify(notify::ZSET, event, key);
        if empty {
            db.notify(notify::GENERIC, "del", key);
        }
    }
    ctx.dirty += removed as u64;
    Ok(Reply::Int(removed as i64))
}

fn zremrangebyrank(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let s = int(&args[2])?;
    let e = int(&args[3])?;
    zremrange_generic(ctx, args, RemRange::Rank(s, e))
}

fn zremrangebyscore(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let r = parse_score_range(&args[2], &args[3])?;
    zremrange_generic(ctx, args, RemRange::Score(r))
}

fn zremrangebylex(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let r = parse_lex_range(&args[2], &args[3])?;
    zremrange_generic(ctx, args, RemRange::Lex(r))
}

// ---------------------------------------------------------------------------------------------
// ZUNION / ZINTER / ZDIFF (+STORE) and ZINTERCARD.

#[derive(Clone, Copy, PartialEq)]
enum SetOp {
    Union,
    Inter,
    Diff,
    InterCard,
}

#[derive(Clone, Copy)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

fn aggregate(target: &mut f64, val: f64, agg: Aggregate) {
    match agg {
        Aggregate::Sum => {
            *target += val;
            // inf + -inf: Redis turns the NaN into 0.
            if target.is_nan() {
                *target = 0.0;
            }
        }
        Aggregate::Min => {
            if val < *target {
                *target = val;
            }
        }
        Aggregate::Max => {
            if val > *target {
                *target = val;
            }
        }
    }
}

/// Number of elements of an input (a sorted set or a plain set), Err for other types.
fn src_len(db: &mut DbHandle, key: &[u8]) -> Result<usize, Reply> {
    match db.read(key) {
        None => Ok(0),
        Some(Value::ZSet(z)) => Ok(z.len()),
        Some(Value::Set(s)) => Ok(s.len()),
        Some(_) => Err(wrongtype()),
    }
}

fn src_for_each(db: &mut DbHandle, key: &[u8], mut f: impl FnMut(&[u8], f64)) {
    match db.value(key) {
        Some(Value::ZSet(z)) => {
            for (m, s) in z.iter() {
                f(m, s);
            }
        }
        Some(Value::Set(s)) => {
            for m in s.iter() {
                f(&m, 1.0);
            }
        }
        _ => {}
    }
}

/// Keep the entries of `acc` whose member is in source `key`; `f` sees the source's score.
fn src_filter(
    db: &mut DbHandle,
    key: &[u8],
    acc: &mut hashbrown::HashMap<Vec<u8>, f64>,
    mut f: impl FnMut(&mut f64, f64),
) {
    match db.value(key) {
        Some(Value::ZSet(z)) => acc.retain(|m, v| match z.score(m) {
            Some(s) => {
                f(v, s);
                true
            }
            None => false,
        }),
        Some(Value::Set(s)) => acc.retain(|m, v| {
            if s.contains(m) {
                f(v, 1.0);
                true
            } else {
                false
            }
        }),
        _ => acc.clear(),
    }
}

fn sorted_result(acc: hashbrown::HashMap<Vec<u8>, f64>) -> Vec<(Bytes, f64)> {
    let mut v: Vec<(Bytes, f64)> = acc.into_iter().map(|(m, s)| (Bytes::from(m), s)).collect();
    v.sort_unstable_by(|a, b| {
        a.1.partial_cmp(&b.1)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| a.0.cmp(&b.0))
    });
    v
}

/// Redis's zunionInterDiffGenericCommand. `numkeys_idx` is the position of numkeys; `dst` the
/// destination of the *STORE forms.
fn setop_generic(
    ctx: &mut Ctx,
    args: &[Bytes],
    numkeys_idx: usize,
    dst: Option<&[u8]>,
    op: SetOp,
) -> CmdResult {
    let numkeys = int(&args[numkeys_idx])?;
    if numkeys < 1 {
        let name = String::from_utf8_lossy(&args[0]).to_lowercase();
        return Err(Reply::error(format!(
            "ERR at least 1 input key is needed for '{name}' command"
        )));
    }
    if numkeys as u64 > (args.len() - numkeys_idx - 1) as u64 {
        return Err(Reply::error(SYNTAX));
    }
    let n = numkeys as usize;
    let keys = &args[numkeys_idx + 1..numkeys_idx + 1 + n];
    // Type checks (and sizes) come before option parsing, as in Redis.
    let mut lens = Vec::with_capacity(n);
    {
        let mut db = ctx.db();
        for k in keys {
            lens.push(src_len(&mut db, k)?);
        }
    }
    let mut weights = vec![1.0f64; n];
    let mut agg = Aggregate::Sum;
    let mut withscores = false;
    let mut limit: usize = 0;
    let cardinality_only = op == SetOp::InterCard;
    let mut j = numkeys_idx + 1 + n;
    while j < args.len() {
        let remaining = args.len() - j;
        let a = &args[j][..];
        if op != SetOp::Diff && !cardinality_only && remaining > n && eq(a, "weights") {
            j += 1;
            for w in weights.iter_mut() {
                *w = match crate::util::numtext::parse_f64(&args[j]) {
                    Some(v) => v,
                    None => return Err(Reply::error("ERR weight value is not a float")),
                };
                j += 1;
            }
        } else if op != SetOp::Diff && !cardinality_only && remaining >= 2 && eq(a, "aggregate") {
            let v = &args[j + 1][..];
            agg = if eq(v, "sum") {
                Aggregate::Sum
            } else if eq(v, "min") {
                Aggregate::Min
            } else if eq(v, "max") {
                Aggregate::Max
            } else {
                return Err(Reply::error(SYNTAX));
            };
            j += 2;
        } else if dst.is_none() && !cardinality_only && eq(a, "withscores") {
            withscores = true;
            j += 1;
        } else if cardinality_only && remaining >= 2 && eq(a, "limit") {
            limit = match parse_i64(&args[j + 1]) {
                Some(v) if v >= 0 => v as usize,
                _ => return Err(Reply::error("ERR LIMIT can't be negative")),
            };
            j += 2;
        } else {
            return Err(Reply::error(SYNTAX));
        }
    }

    let mut db = ctx.db();
    let mut acc: hashbrown::HashMap<Vec<u8>, f64> = hashbrown::HashMap::new();
    match op {
        SetOp::Union => {
            for (i, k) in keys.iter().enumerate() {
                if lens[i] == 0 {
                    continue;
                }
                let w = weights[i];
                acc.reserve(lens[i]);
                src_for_each(&mut db, k, |m, s| {
                    let mut score = w * s;
                    if score.is_nan() {
                        score = 0.0;
                    }
                    match acc.get_mut(m) {
                        Some(v) => aggregate(v, score, agg),
                        None => {
                            acc.insert(m.to_vec(), score);
                        }
                    }
                });
            }
        }
        SetOp::Inter | SetOp::InterCard => {
            // Smallest input first (Redis sorts by cardinality).
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by_key(|&i| lens[i]);
            if lens[order[0]] > 0 {
                let first = order[0];
                let w = weights[first];
                acc.reserve(lens[first]);
                src_for_each(&mut db, &keys[first], |m, s| {
                    let mut score = w * s;
                    if score.is_nan() {
                        score = 0.0;
                    }
                    acc.insert(m.to_vec(), score);
                });
                for &i in &order[1..] {
                    if acc.is_empty() {
                        break;
                    }
                    let w = weights[i];
                    src_filter(&mut db, &keys[i], &mut acc, |v, s| aggregate(v, w * s, agg));
                }
            }
        }
        SetOp::Diff => {
            if lens[0] > 0 {
                acc.reserve(lens[0]);
                src_for_each(&mut db, &keys[0], |m, s| {
                    acc.insert(m.to_vec(), s);
                });
                for (i, k) in keys.iter().enumerate().skip(1) {
                    if acc.is_empty() {
                        break;
                    }
                    if lens[i] == 0 {
                        continue;
                    }
                    match db.value(k) {
                        Some(Value::ZSet(z)) => acc.retain(|m, _| z.score(m).is_none()),
                        Some(Value::Set(s)) => acc.retain(|m, _| !s.contains(m)),
                        _ => {}
                    }
                }
            }
        }
    }
    if cardinality_only {
        let c = acc.len();
        return Ok(Reply::Int(if limit > 0 { c.min(limit) } else { c } as i64));
    }
    let items = sorted_result(acc);
    if let Some(dst) = dst {
        let event = match op {
            SetOp::Union => "zunionstore",
            SetOp::Inter | SetOp::InterCard => "zinterstore",
            SetOp::Diff => "zdiffstore",
        };
        return Ok(store_result(
            ctx,
            dst,
            items.iter().map(|(m, s)| (&m[..], *s)),
            event,
        ));
    }
    if withscores {
        Ok(Reply::ScoredMembers(
            items.iter().map(|(m, s)| (&m[..], *s)).collect(),
        ))
    } else {
        Ok(Reply::Array(
            items.into_iter().map(|(m, _)| Reply::Bulk(m)).collect(),
        ))
    }
}

fn zunionstore(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let dst = args[1].clone();
    setop_generic(ctx, args, 2, Some(&dst), SetOp::Union)
}

fn zinterstore(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let dst = args[1].clone();
    setop_generic(ctx, args, 2, Some(&dst), SetOp::Inter)
}

fn zdiffstore(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let dst = args[1].clone();
    setop_generic(ctx, args, 2, Some(&dst), SetOp::Diff)
}

fn zunion(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    setop_generic(ctx, args, 1, None, SetOp::Union)
}

fn zinter(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    setop_generic(ctx, args, 1, None, SetOp::Inter)
}

fn zdiff(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    setop_generic(ctx, args, 1, None, SetOp::Diff)
}

fn zintercard(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    setop_generic(ctx, args, 1, None, SetOp::InterCard)
}

// ---------------------------------------------------------------------------------------------
// Pops.

/// How a pop's reply is shaped (Redis's emitkey / use_nested_array combinations).
#[derive(Clone, Copy, PartialEq)]
enum PopShape {
    /// ZPOPMIN without count (and with count in RESP2): flat member, score, ...
    Flat,
    /// ZPOPMIN with count in RESP3: [[member, score], ...]
    Pairs,
    /// BZPOPMIN: [key, member, score]
    KeyFlat,
    /// ZMPOP / BZMPOP: [key, [[member, score], ...]]
    KeyNested,
}

fn pop_name(max: bool) -> Bytes {
    Bytes::from_static(if max { b"ZPOPMAX" } else { b"ZPOPMIN" })
}

/// Pop `count` elements from the sorted set at `key` (which must exist and be a zset), delete
/// the key if emptied, and build the reply. Returns (reply, popped count).
fn pop_from(
    db: &mut DbHandle,
    key: &[u8],
    count: usize,
    max: bool,
    shape: PopShape,
) -> (Reply, usize) {
    let Some(Value::ZSet(z)) = db.value(key) else {
        return (Reply::NullArray, 0);
    };
    let popped = z.pop(count, max);
    let empty = z.is_empty();
    if empty {
        db.remove(key);
    }
    db.modified(key);
    db.notify(notify::ZSET, if max { "zpopmax" } else { "zpopmin" }, key);
    if empty {
        db.notify(notify::GENERIC, "del", key);
    }
    let n = popped.len();
    let pair =
        |m: Vec<u8>, s: f64| Reply::Array(vec![Reply::Bulk(Bytes::from(m)), Reply::Double(s)]);
    let reply = match shape {
        PopShape::Flat => {
            let mut v = Vec::with_capacity(n * 2);
            for (m, s) in popped {
                v.push(Reply::Bulk(Bytes::from(m)));
                v.push(Reply::Double(s));
            }
            Reply::Array(v)
        }
        PopShape::Pairs => Reply::Array(popped.into_iter().map(|(m, s)| pair(m, s)).collect()),
        PopShape::KeyFlat => {
            let mut v = Vec::with_capacity(n * 2 + 1);
            v.push(bulk(key));
            for (m, s) in popped {
                v.push(Reply::Bulk(Bytes::from(m)));
                v.push(Reply::Double(s));
            }
            Reply::Array(v)
        }
        PopShape::KeyNested => Reply::Array(vec![
            bulk(key),
            Reply::Array(popped.into_iter().map(|(m, s)| pair(m, s)).collect()),
        ]),
    };
    (reply, n)
}

fn zpop_generic(ctx: &mut Ctx, args: &[Bytes], max: bool) -> CmdResult {
    if args.len() > 3 {
        return Err(Reply::error(SYNTAX));
    }
    let count: Option<usize> = if args.len() == 3 {
        match parse_i64(&args[2]) {
            Some(c) if c >= 0 => Some(c as usize),
            _ => return Err(Reply::error("ERR value is out of range, must be positive")),
        }
    } else {
        None
    };
    let shape = match count {
        Some(_) if ctx.client.resp == Resp::V3 => PopShape::Pairs,
        _ => PopShape::Flat,
    };
    let key = &args[1][..];
    let mut db = ctx.db();
    if as_zset(db.value(key))?.is_none() {
        return Ok(Reply::Array(Vec::new()));
    }
    if count == Some(0) {
        return Ok(Reply::Array(Vec::new()));
    }
    let (reply, n) = pop_from(&mut db, key, count.unwrap_or(1), max, shape);
    ctx.dirty += n as u64;
    Ok(reply)
}

fn zpopmin(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    zpop_generic(ctx, args, false)
}

fn zpopmax(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    zpop_generic(ctx, args, true)
}

/// Parsed `numkeys key... MIN|MAX [COUNT c]` of ZMPOP/BZMPOP.
struct MpopArgs {
    first_key: usize,
    numkeys: usize,
    max: bool,
    count: usize,
}

fn parse_mpop(args: &[Bytes], numkeys_idx: usize) -> Result<MpopArgs, Reply> {
    let numkeys = match parse_i64(&args[numkeys_idx]) {
        Some(v) if v >= 1 => v as u64,
        _ => return Err(Reply::error("ERR numkeys should be greater than 0")),
    };
    let where_idx = numkeys_idx as u64 + numkeys + 1;
    if where_idx >= args.len() as u64 {
        return Err(Reply::error(SYNTAX));
    }
    let where_idx = where_idx as usize;
    let max = if eq(&args[where_idx], "min") {
        false
    } else if eq(&args[where_idx], "max") {
        true
    } else {
        return Err(Reply::error(SYNTAX));
    };
    let mut count: Option<usize> = None;
    let mut j = where_idx + 1;
    while j < args.len() {
        let more = args.len() - 1 - j;
        if count.is_none() && eq(&args[j], "count") && more > 0 {
            j += 1;
            match parse_i64(&args[j]) {
                Some(v) if v >= 1 => count = Some(v as usize),
                _ => return Err(Reply::error("ERR count should be greater than 0")),
            }
        } else {
            return Err(Reply::error(SYNTAX));
        }
        j += 1;
    }
    Ok(MpopArgs {
        first_key: numkeys_idx + 1,
        numkeys: numkeys as usize,
        max,
        count: count.unwrap_or(1),
    })
}

/// ZMPOP/BZMPOP: pop from the first of `keys` that holds a sorted set (None if none does).
fn mpop_first_nonempty(
    ctx: &mut Ctx,
    keys: &[Bytes],
    p: &MpopArgs,
) -> Result<Option<Reply>, Reply> {
    let mut db = ctx.db();
    for k in keys {
        if as_zset(db.value(k))?.is_none() {
            continue;
        }
        let (reply, n) = pop_from(&mut db, k, p.count, p.max, PopShape::KeyNested);
        ctx.dirty += n as u64;
        ctx.propagate_as(vec![vec![
            pop_name(p.max),
            k.clone(),
            Bytes::from(n.to_string()),
        ]]);
        return Ok(Some(reply));
    }
    Ok(None)
}

fn zmpop(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let p = parse_mpop(args, 1)?;
    let keys = &args[p.first_key..p.first_key + p.numkeys];
    if let Some(reply) = mpop_first_nonempty(ctx, keys, &p)? {
        return Ok(reply);
    }
    Ok(Reply::NullArray)
}

fn bzpop_generic(ctx: &mut Ctx, args: &[Bytes], max: bool) -> CmdResult {
    let now = ctx.now_ms();
    let timeout = block_timeout_ms(&args[args.len() - 1], now)?;
    let keys = &args[1..args.len() - 1];
    let mut db = ctx.db();
    for k in keys {
        if as_zset(db.value(k))?.is_none() {
            continue;
        }
        let (reply, n) = pop_from(&mut db, k, 1, max, PopShape::KeyFlat);
        ctx.dirty += n as u64;
        ctx.propagate_as(vec![vec![pop_name(max), k.clone()]]);
        return Ok(reply);
    }
    if ctx.in_exec {
        return Ok(Reply::NullArray);
    }
    ctx.block = Some(BlockRequest {
        keys: keys.to_vec(),
        timeout_ms: timeout,
        serve: serve_bzpop,
        on_timeout: Reply::NullArray,
        args: None,
        serve_each: false,
    });
    Ok(Reply::NoReply)
}

fn bzpopmin(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    bzpop_generic(ctx, args, false)
}

fn bzpopmax(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    bzpop_generic(ctx, args, true)
}

fn bzmpop(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let now = ctx.now_ms();
    // Redis reads numkeys, MIN|MAX and COUNT before the timeout.
    let p = parse_mpop(args, 2)?;
    let timeout = block_timeout_ms(&args[1], now)?;
    let keys = &args[p.first_key..p.first_key + p.numkeys];
    if let Some(reply) = mpop_first_nonempty(ctx, keys, &p)? {
        return Ok(reply);
    }
    if ctx.in_exec {
        return Ok(Reply::NullArray);
    }
    ctx.block = Some(BlockRequest {
        keys: keys.to_vec(),
        timeout_ms: timeout,
        serve: serve_bzmpop,
        on_timeout: Reply::NullArray,
        args: None,
        serve_each: false,
    });
    Ok(Reply::NoReply)
}

/// True if `key` holds a non-empty sorted set (what a blocked pop can be served from).
fn has_zset(db: &mut DbHandle, key: &[u8]) -> bool {
    matches!(db.value(key), Some(Value::ZSet(z)) if !z.is_empty())
}

fn serve_bzpop(db: &mut DbHandle, w: &Waiter, key: &[u8]) -> Option<(Reply, Vec<Vec<Bytes>>)> {
    if !has_zset(db, key) {
        return None;
    }
    let max = eq(&w.args[0], "bzpopmax");
    let (reply, _) = pop_from(db, key, 1, max, PopShape::KeyFlat);
    Some((
        reply,
        vec![vec![pop_name(max), Bytes::copy_from_slice(key)]],
    ))
}

fn serve_bzmpop(db: &mut DbHandle, w: &Waiter, key: &[u8]) -> Option<(Reply, Vec<Vec<Bytes>>)> {
    if !has_zset(db, key) {
        return None;
    }
    let p = parse_mpop(&w.args, 2).ok()?;
    let (reply, n) = pop_from(db, key, p.count, p.max, PopShape::KeyNested);
    // Logged with the count popped, as Redis (a replica must not pop what arrived since).
    Some((
        reply,
        vec![vec![
            pop_name(p.max),
            Bytes::copy_from_slice(key),
            Bytes::from(n.to_string()),
        ]],
    ))
}

// ---------------------------------------------------------------------------------------------
// ZRANDMEMBER.

fn zrandmember(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    if args.len() == 2 {
        let mut db = ctx.db();
        let Some(z) = as_zset(db.read(&args[1]))? else {
            return Ok(Reply::Null);
        };
        let r = rand::thread_rng().gen_range(0..z.len());
        return match z.get_by_rank(r) {
            Some((m, _)) => Ok(bulk(m)),
            None => Ok(Reply::Null),
        };
    }
    let l = match parse_i64(&args[2]) {
        Some(v) if v > i64::MIN => v,
        Some(_) => {
            return Err(Reply::error(format!(
                "ERR value is out of range, value must between {} and {}",
                -i64::MAX,
                i64::MAX
            )))
        }
        None => return Err(Reply::error(NOT_INT)),
    };
    let withscores = match args.len() {
        3 => false,
        4 if eq(&args[3], "withscores") => true,
        _ => return Err(Reply::error(SYNTAX)),
    };
    if withscores && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&l) {
        return Err(Reply::error("ERR value is out of range"));
    }
    let cap = ctx.reply_cap();
    let mut db = ctx.db();
    let Some(z) = as_zset(db.read(&args[1]))? else {
        return Ok(Reply::Array(Vec::new()));
    };
    if l == 0 {
        return Ok(Reply::Array(Vec::new()));
    }
    let len = z.len();
    let mut rng = rand::thread_rng();
    let mut items = MemberList::default();
    let mut push = |m: &[u8], s: f64| items.push(m, s);
    if l < 0 {
        // Repetitions allowed.
        let n = l.unsigned_abs();
        PickBudget::check(n, cap)?;
        let mut budget = PickBudget::new(cap);
        for _ in 0..n {
            let r = rng.gen_range(0..len);
            if let Some((m, s)) = z.get_by_rank(r) {
                push(m, s);
                // A score is at least one digit.
                if !budget.take(m.len(), withscores.then_some(1)) {
                    break;
                }
            }
        }
    } else {
        let n = l as usize;
        if n >= len {
            for (m, s) in z.iter() {
                push(m, s);
            }
        } else if n * 3 > len {
            // Many of them: shuffle a copy and take a prefix.
            let mut all: Vec<(&[u8], f64)> = z.iter().collect();
            for i in 0..n {
                let j = rng.gen_range(i..len);
                all.swap(i, j);
            }
            for &(m, s) in &all[..n] {
                push(m, s);
            }
        } else {
            let mut picked = hashbrown::HashSet::with_capacity(n);
            while picked.len() < n {
                let r = rng.gen_range(0..len);
                if picked.insert(r) {
                    if let Some((m, s)) = z.get_by_rank(r) {
                        push(m, s);
                    }
                }
            }
        }
    }
    if withscores {
        Ok(Reply::ScoredMembers(items))
    } else {
        Ok(Reply::Members(items))
    }
}

// ---------------------------------------------------------------------------------------------
// ZSCAN.

fn zscan(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let mut reader = ArgReader::new(args, 2);
    let cursor = reader.cursor()?;
    let mut db = ctx.db();
    let Some(z) = as_zset(db.read(&args[1]))? else {
        return Ok(scan_reply(0, Vec::new()));
    };
    let opts = reader.scan_options(false)?;
    let mut out = Vec::new();
    let next = z.scan(cursor, opts.count, |m, s| {
        if opts.matches(m) {
            out.push(bulk(m));
            out.push(Reply::Bulk(f64_text(s)));
        }
    });
    Ok(scan_reply(next, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn score_ranges() {
        let r = parse_score_range(b"(1.5", b"+inf").unwrap();
        assert_eq!(r.min, ScoreBound::Exclusive(1.5));
        assert_eq!(r.max, ScoreBound::Inclusive(f64::INFINITY));
        let r = parse_score_range(b"-inf", b"inf").unwrap();
        assert_eq!(r.min, ScoreBound::Inclusive(f64::NEG_INFINITY));
        assert!(parse_score_range(b"str", b"1").is_err());
        assert!(parse_score_range(b"1", b"NaN").is_err());
        assert!(parse_score_range(b"1 ", b"2").is_err());
    }

    #[test]
    fn lex_ranges() {
        let r = parse_lex_range(b"[a", b"(b").unwrap();
        assert_eq!(r.min, LexBound::Inclusive(b"a".to_vec()));
        assert_eq!(r.max, LexBound::Exclusive(b"b".to_vec()));
        assert!(parse_lex_range(b"-", b"+").is_ok());
        assert!(parse_lex_range(b"foo", b"+").is_err());
        assert!(parse_lex_range(b"+x", b"+").is_err());
        assert!(parse_lex_range(b"", b"+").is_err());
    }

    #[test]
    fn ranks() {
        assert_eq!(rank_range(0, -1, 5), Some((0, 4)));
        assert_eq!(rank_range(-100, 100, 5), Some((0, 4)));
        assert_eq!(rank_range(3, 1, 5), None);
        assert_eq!(rank_range(5, 10, 5), None);
        assert_eq!(rank_range(0, -1, 0), None);
    }

    #[test]
    fn key_positions() {
        let a: Vec<Bytes> = ["zunionstore", "d", "2", "a", "b", "weights", "1", "2"]
            .iter()
            .map(|s| Bytes::from(*s))
            .collect();
        assert_eq!(keys_store(&a), vec![1, 3, 4]);
        let a: Vec<Bytes> = ["bzmpop", "0", "2", "a", "b", "min"]
            .iter()
            .map(|s| Bytes::from(*s))
            .collect();
        assert_eq!(keys_numkeys_at2(&a), vec![3, 4]);
        let a: Vec<Bytes> = ["zunion", "x", "a"]
            .iter()
            .map(|s| Bytes::from(*s))
            .collect();
        assert!(keys_numkeys_at1(&a).is_empty());
    }
}
