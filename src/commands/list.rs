//! List commands (LPUSH ... LPOS, LMOVE, LMPOP and the blocking pops).
//!
//! Redis 7.0 semantics: popping the last element deletes the key; every change calls
//! `modified()` (which also wakes clients blocked on the key) and counts in `dirty`. The
//! blocking commands pop at once when they can; otherwise they register through `ctx.block`
//! and are served by [`serve_pop`] / [`serve_move`] when a push makes the key ready (the
//! served pop is logged as the equivalent non-blocking command). Inside MULTI they never
//! block: they answer as on timeout.

use super::args::{eq, int, SYNTAX};
use super::argv::{block_timeout_ms, positive_long};
use super::{flags::*, BlockRequest, CmdResult, Ctx, Keys, Spec};
use crate::blocking::Waiter;
use crate::keyspace::DbHandle;
use crate::notify;
use crate::protocol::reply::{Aggregate, BulkReply};
use crate::protocol::Reply;
use crate::types::list::List;
use crate::types::{Value, WRONGTYPE};
use bytes::Bytes;

const K1: Keys = Keys::Range(1, 1, 1);
const G: &str = "list";

pub static COMMANDS: &[Spec] = &[
    Spec::new("lpush", -3, WRITE | DENYOOM | FAST, K1, lpush, G),
    Spec::new("rpush", -3, WRITE | DENYOOM | FAST, K1, rpush, G),
    Spec::new("lpushx", -3, WRITE | DENYOOM | FAST, K1, lpushx, G),
    Spec::new("rpushx", -3, WRITE | DENYOOM | FAST, K1, rpushx, G),
    Spec::new("lpop", -2, WRITE | FAST, K1, lpop, G),
    Spec::new("rpop", -2, WRITE | FAST, K1, rpop, G),
    Spec::new("llen", 2, READONLY | FAST, K1, llen, G),
    Spec::new("lrange", 4, READONLY, K1, lrange, G),
    Spec::new("lindex", 3, READONLY, K1, lindex, G),
    Spec::new("lset", 4, WRITE | DENYOOM, K1, lset, G),
    Spec::new("lrem", 4, WRITE, K1, lrem, G),
    Spec::new("ltrim", 4, WRITE, K1, ltrim, G),
    Spec::new("linsert", 5, WRITE | DENYOOM, K1, linsert, G),
    Spec::new("lpos", -3, READONLY, K1, lpos, G),
    Spec::new(
        "rpoplpush",
        3,
        WRITE | DENYOOM,
        Keys::Range(1, 2, 1),
        rpoplpush,
        G,
    ),
    Spec::new("lmove", 5, WRITE | DENYOOM, Keys::Range(1, 2, 1), lmove, G),
    Spec::new(
        "lmpop",
        -4,
        WRITE | MOVABLE_KEYS,
        Keys::Custom(lmpop_keys),
        lmpop,
        G,
    ),
    Spec::new(
        "blpop",
        -3,
        WRITE | NOSCRIPT | BLOCKING,
        Keys::Range(1, -2, 1),
        blpop,
        G,
    ),
    Spec::new(
        "brpop",
        -3,
        WRITE | NOSCRIPT | BLOCKING,
        Keys::Range(1, -2, 1),
        brpop,
        G,
    ),
    Spec::new(
        "brpoplpush",
        4,
        WRITE | DENYOOM | NOSCRIPT | BLOCKING,
        Keys::Range(1, 2, 1),
        brpoplpush,
        G,
    ),
    Spec::new(
        "blmove",
        6,
        WRITE | DENYOOM | NOSCRIPT | BLOCKING,
        Keys::Range(1, 2, 1),
        blmove,
        G,
    ),
    Spec::new(
        "blmpop",
        -5,
        WRITE | BLOCKING | MOVABLE_KEYS,
        Keys::Custom(blmpop_keys),
        blmpop,
        G,
    ),
];

fn wrongtype() -> Reply {
    Reply::error(WRONGTYPE)
}

fn bulk(b: &[u8]) -> Reply {
    Reply::Bulk(Bytes::copy_from_slice(b))
}

fn get_list<'d>(
    db: &'d mut DbHandle<'_, '_>,
    key: &[u8],
    count: bool,
) -> Result<Option<&'d mut List>, Reply> {
    let v = if count { db.read(key) } else { db.value(key) };
    match v {
        None => Ok(None),
        Some(Value::List(l)) => Ok(Some(l)),
        Some(_) => Err(wrongtype()),
    }
}

fn push(ctx: &mut Ctx, args: &[Bytes], left: bool, only_existing: bool) -> CmdResult {
    let key = &args[1];
    let mut db = ctx.db();
    let exists = get_list(&mut db, key, false)?.is_some();
    if !exists {
        if only_existing {
            return Ok(Reply::Int(0));
        }
        db.insert(key, Value::List(List::new()));
    }
    let Ok(Some(l)) = get_list(&mut db, key, false) else {
        return Err(Reply::error("ERR internal error: list vanished"));
    };
    for v in &args[2..] {
        if left {
            l.push_front(v);
        } else {
            l.push_back(v);
        }
    }
    let n = l.len();
    db.modified(key);
    db.notify(notify::LIST, if left { "lpush" } else { "rpush" }, key);
    ctx.dirty += (args.len() - 2) as u64;
    Ok(Reply::Int(n as i64))
}

fn lpush(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    push(ctx, args, true, false)
}
fn rpush(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    push(ctx, args, false, false)
}
fn lpushx(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    push(ctx, args, true, true)
}
fn rpushx(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    push(ctx, args, false, true)
}

/// Pop up to `n` elements from one end of the list at `key` (which must be a list), deleting
/// the key when it empties. Does not call `modified`. Records the pop (and `del`) keyspace
/// events when `events` (LMOVE records its own, in Redis's order).
fn pop_n(db: &mut DbHandle, key: &[u8], left: bool, n: usize, events: bool) -> Vec<Vec<u8>> {
    let Ok(Some(l)) = get_list(db, key, false) else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(n.min(l.len()));
    for _ in 0..n {
        let e = if left { l.pop_front() } else { l.pop_back() };
        match e {
            Some(e) => out.push(e),
            None => break,
        }
    }
    let empty = l.is_empty();
    if events && !out.is_empty() {
        db.notify(notify::LIST, if left { "lpop" } else { "rpop" }, key);
    }
    if empty {
        db.remove(key);
        if events {
            db.notify(notify::GENERIC, "del", key);
        }
    }
    out
}

fn pop(ctx: &mut Ctx, args: &[Bytes], left: bool) -> CmdResult {
    let name = if left { "lpop" } else { "rpop" };
    if args.len() > 3 {
        return Err(crate::cmdspec::wrong_arity(name));
    }
    let count = if args.len() == 3 {
        Some(super::argv::positive_long(&args[2], None)?)
    } else {
        None
    };
    let key = &args[1];
    let mut db = ctx.db();
    let len = match get_list(&mut db, key, false)? {
        None => {
            return if count.is_some() {
                Ok(Reply::NullArray)
            } else {
                Ok(Reply::Null)
            }
        }
        Some(l) => l.len(),
    };
    if count == Some(0) || len == 0 {
        return Ok(Reply::Array(Vec::new()));
    }
    let got = pop_n(&mut db, key, left, count.unwrap_or(1) as usize, true);
    db.modified(key);
    ctx.dirty += 1;
    match count {
        None => got.first().map_or(Ok(Reply::Null), |e| Ok(bulk(e))),
        Some(_) => Ok(Reply::Array(got.iter().map(|e| bulk(e)).collect())),
    }
}

fn lpop(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    pop(ctx, args, true)
}
fn rpop(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    pop(ctx, args, false)
}

fn llen(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let mut db = ctx.db();
    let l = get_list(&mut db, &args[1], true)?;
    Ok(Reply::Int(l.map_or(0, |l| l.len() as i64)))
}

fn lrange(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let start = int(&args[2])?;
    let stop = int(&args[3])?;
    let resp = ctx.encoding_for_client();
    let mut db = ctx.db();
    match get_list(&mut db, &args[1], true)? {
        None => Ok(Reply::Array(Vec::new())),
        Some(l) => match l.range(start, stop) {
            None => Ok(Reply::Array(Vec::new())),
            Some((a, b)) => match resp {
                Some(resp) => {
                    let mut reply = BulkReply::new(resp, Aggregate::Array, b - a + 1);
                    l.range_iter(a, b).for_each(|e| reply.push(e));
                    Ok(reply.finish())
                }
                None => Ok(Reply::Array(l.range_iter(a, b).map(bulk).collect())),
            },
        },
    }
}

fn lindex(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    // Redis looks the key up (nil, WRONGTYPE) before it reads the index.
    let mut db = ctx.db();
    match get_list(&mut db, &args[1], true)? {
        None => Ok(Reply::Null),
        Some(l) => {
            let i = int(&args[2])?;
            l.index(i)
                .and_then(|p| l.get(p))
                .map_or(Ok(Reply::Null), |e| Ok(bulk(e)))
        }
    }
}

fn lset(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    // Redis looks the key up (no such key, WRONGTYPE) before it reads the index.
    let key = &args[1];
    let mut db = ctx.db();
    match get_list(&mut db, key, false)? {
        None => Err(Reply::error("ERR no such key")),
        Some(l) => match l.index(int(&args[2])?) {
            None => Err(Reply::error("ERR index out of range")),
            Some(p) => {
                l.deque_mut()[p] = args[3].to_vec();
                db.modified(key);
                db.notify(notify::LIST, "lset", key);
                ctx.dirty += 1;
                Ok(Reply::Ok)
            }
        },
    }
}

fn lrem(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let count = int(&args[2])?;
    let key = &args[1];
    let elem = &args[3][..];
    let mut db = ctx.db();
    let l = match get_list(&mut db, key, false)? {
        None => return Ok(Reply::Int(0)),
        Some(l) => l,
    };
    let limit = if count == 0 {
        usize::MAX
    } else {
        count.unsigned_abs() as usize
    };
    let mut removed = 0usize;
    if !l.iter().any(|e| e == elem) {
        // Nothing to remove: a packed list stays packed.
        return Ok(Reply::Int(0));
    }
    let items = l.deque_mut();
    if count >= 0 {
        let mut i = 0;
        while i < items.len() && removed < limit {
            if items[i] == elem {
                items.remove(i);
                removed += 1;
            } else {
                i += 1;
            }
        }
    } else {
        let mut i = items.len();
        while i > 0 && removed < limit {
            i -= 1;
            if items[i] == elem {
                items.remove(i);
                removed += 1;
            }
        }
    }
    let empty = l.is_empty();
    if removed > 0 {
        if empty {
            db.remove(key);
        }
        db.modified(key);
        db.notify(notify::LIST, "lrem", key);
        if empty {
            db.notify(notify::GENERIC, "del", key);
        }
        ctx.dirty += removed as u64;
    }
    Ok(Reply::Int(removed as i64))
}

fn ltrim(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let start = int(&args[2])?;
    let stop = int(&args[3])?;
    let key = &args[1];
    let mut db = ctx.db();
    let l = match get_list(&mut db, key, false)? {
        None => return Ok(Reply::Ok),
        Some(l) => l,
    };
    let before = l.len();
    match l.range(start, stop) {
        None => l.clear(),
        Some((a, b)) => l.keep_range(a, b),
    }
    let removed = before - l.len();
    let empty = l.is_empty();
    if empty {
        db.remove(key);
    }
    db.modified(key);
    db.notify(notify::LIST, "ltrim", key);
    if empty {
        db.notify(notify::GENERIC, "del", key);
    }
    ctx.dirty += removed as u64;
    Ok(Reply::Ok)
}

fn linsert(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let after = if eq(&args[2], "after") {
        true
    } else if eq(&args[2], "before") {
        false
    } else {
        return Err(Reply::error(SYNTAX));
    };
    let key = &args[1];
    let mut db = ctx.db();
    let l = match get_list(&mut db, key, false)? {
        None => return Ok(Reply::Int(0)),
        Some(l) => l,
    };
    let Some(p) = l.iter().position(|e| e == &args[3][..]) else {
        return Ok(Reply::Int(-1));
    };
    l.deque_mut()
        .insert(if after { p + 1 } else { p }, args[4].to_vec());
    let n = l.len();
    db.modified(key);
    db.notify(notify::LIST, "linsert", key);
    ctx.dirty += 1;
    Ok(Reply::Int(n as i64))
}

fn lpos(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let mut rank: i64 = 1;
    let mut count: Option<usize> = None;
    let mut maxlen = 0usize;
    let mut i = 3;
    while i < args.len() {
        let more = i + 1 < args.len();
        if eq(&args[i], "rank") && more {
            // Redis 7.0 takes any long here (7.2 narrowed it to ±LONG_MAX); see below for
            // what it makes of LONG_MIN.
            rank = int(&args[i + 1])?;
            if rank == 0 {
                return Err(Reply::error(
                    "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list",
                ));
            }
        } else if eq(&args[i], "count") && more {
            let c = positive_long(&args[i + 1], Some("COUNT can't be negative"))?;
            count = Some(usize::try_from(c).unwrap_or(usize::MAX));
        } else if eq(&args[i], "maxlen") && more {
            let m = positive_long(&args[i + 1], Some("MAXLEN can't be negative"))?;
            maxlen = usize::try_from(m).unwrap_or(usize::MAX);
        } else {
            return Err(Reply::error(SYNTAX));
        }
        i += 2;
    }
    let mut db = ctx.db();
    let l = match get_list(&mut db, &args[1], true)? {
        None => {
            return if count.is_some() {
                Ok(Reply::Array(Vec::new()))
            } else {
                Ok(Reply::Null)
            }
        }
        Some(l) => l,
    };
    // RANK LONG_MIN: Redis 7.0 negates it (still LONG_MIN: from the tail) and then every
    // match is past the rank and no COUNT is ever reached (its `matches - rank + 1` wraps
    // negative), so it answers every match from the tail, as COUNT 0 does.
    let want = match count {
        _ if rank == i64::MIN => usize::MAX,
        Some(0) => usize::MAX,
        Some(c) => c,
        None => 1,
    };
    let n = l.len();
    let scan = if maxlen == 0 { n } else { maxlen.min(n) };
    let mut skip = if rank == i64::MIN {
        0
    } else {
        rank.unsigned_abs() - 1
    };
    let mut found = Vec::new();
    for k in 0..scan {
        let p = if rank > 0 { k } else { n - 1 - k };
        if l.get(p) == Some(&args[2][..]) {
            if skip > 0 {
                skip -= 1;
                continue;
            }
            found.push(Reply::Int(p as i64));
            if found.len() >= want {
                break;
            }
        }
    }
    match count {
        Some(_) => Ok(Reply::Array(found)),
        None => Ok(found.into_iter().next().unwrap_or(Reply::Null)),
    }
}

fn side(a: &[u8]) -> Option<bool> {
    if eq(a, "left") {
        Some(true)
    } else if eq(a, "right") {
        Some(false)
    } else {
        None
    }
}

/// Move one element from `src` (end `from_left`) to `dst` (end `to_left`). Both keys were
/// type-checked. Returns the element, or None if `src` is empty/absent.
fn do_move(
    db: &mut DbHandle,
    src: &[u8],
    dst: &[u8],
    from_left: bool,
    to_left: bool,
) -> Option<Vec<u8>> {
    if src == dst {
        // A rotation: the list never empties, so it is not deleted and re-created.
        let l = get_list(db, src, false).ok()??;
        let e = if from_left {
            l.pop_front()
        } else {
            l.pop_back()
        }?;
        if to_left {
            l.push_front(&e);
        } else {
            l.push_back(&e);
        }
        db.modified(src);
        db.notify(notify::LIST, if to_left { "lpush" } else { "rpush" }, dst);
        db.notify(notify::LIST, if from_left { "lpop" } else { "rpop" }, src);
        return Some(e);
    }
    let src_len = get_list(db, src, false).ok()??.len();
    let e = pop_n(db, src, from_left, 1, false).into_iter().next()?;
    if !matches!(db.value(dst), Some(Value::List(_))) {
        db.insert(dst, Value::List(List::new()));
    }
    if let Ok(Some(l)) = get_list(db, dst, false) {
        if to_left {
            l.push_front(&e);
        } else {
            l.push_back(&e);
        }
    }
    db.modified(src);
    db.modified(dst);
    // Redis's order: the push on the destination, then the pop on the source.
    db.notify(notify::LIST, if to_left { "lpush" } else { "rpush" }, dst);
    db.notify(notify::LIST, if from_left { "lpop" } else { "rpop" }, src);
    if src_len == 1 {
        db.notify(notify::GENERIC, "del", src);
    }
    Some(e)
}

/// Check LMOVE's keys: Ok(true) if `src` has something to move.
fn move_ready(db: &mut DbHandle, src: &[u8], dst: &[u8]) -> Result<bool, Reply> {
    let has = get_list(db, src, false)?.is_some_and(|l| !l.is_empty());
    if has {
        get_list(db, dst, false)?;
    }
    Ok(has)
}

fn lmove_generic(
    ctx: &mut Ctx,
    src: &Bytes,
    dst: &Bytes,
    from_left: bool,
    to_left: bool,
) -> CmdResult {
    let mut db = ctx.db();
    if !move_ready(&mut db, src, dst)? {
        return Ok(Reply::Null);
    }
    match do_move(&mut db, src, dst, from_left, to_left) {
        Some(e) => {
            ctx.dirty += 1;
            Ok(Reply::Bulk(Bytes::from(e)))
        }
        None => Ok(Reply::Null),
    }
}

fn rpoplpush(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    lmove_generic(ctx, &args[1], &args[2], false, true)
}

fn lmove(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let (Some(from), Some(to)) = (side(&args[3]), side(&args[4])) else {
        return Err(Reply::error(SYNTAX));
    };
    lmove_generic(ctx, &args[1], &args[2], from, to)
}

fn pop_cmd(key: &[u8], left: bool, n: Option<usize>) -> Vec<Bytes> {
    let mut c = vec![
        Bytes::from_static(if left { b"LPOP" } else { b"RPOP" }),
        Bytes::copy_from_slice(key),
    ];
    if let Some(n) = n {
        c.push(Bytes::from(n.to_string()));
    }
    c
}

fn bpop(ctx: &mut Ctx, args: &[Bytes], left: bool) -> CmdResult {
    let timeout = block_timeout_ms(&args[args.len() - 1], ctx.now_ms())?;
    let keys = &args[1..args.len() - 1];
    let mut db = ctx.db();
    for k in keys {
        let has = get_list(&mut db, k, false)?.is_some_and(|l| !l.is_empty());
        if has {
            let e = pop_n(&mut db, k, left, 1, true);
            db.modified(k);
            ctx.dirty += 1;
            ctx.propagate_as(vec![pop_cmd(k, left, None)]);
            return Ok(Reply::Array(vec![
                Reply::Bulk(k.clone()),
                e.first().map_or(Reply::Null, |e| bulk(e)),
            ]));
        }
    }
    if ctx.in_exec {
        return Ok(Reply::NullArray);
    }
    ctx.block = Some(BlockRequest {
        keys: keys.to_vec(),
        timeout_ms: timeout,
        serve: serve_pop,
        on_timeout: Reply::NullArray,
        args: None,
        serve_each: false,
    });
    Ok(Reply::NoReply)
}

/// Serve a blocked BLPOP/BRPOP/BLMPOP from `key`.
fn serve_pop(db: &mut DbHandle, w: &Waiter, key: &[u8]) -> Option<(Reply, Vec<Vec<Bytes>>)> {
    let name = w.args[0].to_ascii_lowercase();
    let (left, count) = if name == b"blmpop" {
        let (_, left, count) = parse_mpop(&w.args, 2).ok()?;
        (left, Some(count))
    } else {
        (name == b"blpop", None)
    };
    if get_list(db, key, false).ok()??.is_empty() {
        return None;
    }
    let got = pop_n(db, key, left, count.unwrap_or(1), true);
    if got.is_empty() {
        return None;
    }
    db.modified(key);
    let k = Bytes::copy_from_slice(key);
    let reply = match count {
        None => Reply::Array(vec![Reply::Bulk(k), bulk(&got[0])]),
        Some(_) => Reply::Array(vec![
            Reply::Bulk(k),
            Reply::Array(got.iter().map(|e| bulk(e)).collect()),
        ]),
    };
    Some((reply, vec![pop_cmd(key, left, count.map(|_| got.len()))]))
}

fn blpop(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    bpop(ctx, args, true)
}
fn brpop(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    bpop(ctx, args, false)
}

fn bmove(
    ctx: &mut Ctx,
    args: &[Bytes],
    from_left: bool,
    to_left: bool,
    timeout_arg: &[u8],
) -> CmdResult {
    let timeout = block_timeout_ms(timeout_arg, ctx.now_ms())?;
    let (src, dst) = (&args[1], &args[2]);
    let mut db = ctx.db();
    if move_ready(&mut db, src, dst)? {
        if let Some(e) = do_move(&mut db, src, dst, from_left, to_left) {
            ctx.dirty += 1;
            let rpoplpush = args[0].eq_ignore_ascii_case(b"brpoplpush");
            ctx.propagate_as(vec![move_cmd(rpoplpush, src, dst, from_left, to_left)]);
            return Ok(Reply::Bulk(Bytes::from(e)));
        }
    }
    if ctx.in_exec {
        return Ok(Reply::Null);
    }
    ctx.block = Some(BlockRequest {
        keys: vec![src.clone()],
        timeout_ms: timeout,
        serve: serve_move,
        // Redis answers a timed-out BLMOVE/BRPOPLPUSH with a null array (RESP2 `*-1`).
        on_timeout: Reply::NullArray,
        args: None,
        serve_each: false,
    });
    Ok(Reply::NoReply)
}

/// The command a served BLMOVE / BRPOPLPUSH is propagated as: LMOVE, or RPOPLPUSH for a
/// BRPOPLPUSH (`rpoplpush`), as Redis rewrites them (a replica's command statistics show it).
fn move_cmd(rpoplpush: bool, src: &[u8], dst: &[u8], from_left: bool, to_left: bool) -> Vec<Bytes> {
    if rpoplpush {
        return vec![
            Bytes::from_static(b"RPOPLPUSH"),
            Bytes::copy_from_slice(src),
            Bytes::copy_from_slice(dst),
        ];
    }
    let s = |l: bool| Bytes::from_static(if l { b"LEFT" } else { b"RIGHT" });
    vec![
        Bytes::from_static(b"LMOVE"),
        Bytes::copy_from_slice(src),
        Bytes::copy_from_slice(dst),
        s(from_left),
        s(to_left),
    ]
}

/// Serve a blocked BLMOVE/BRPOPLPUSH from `key` (its source).
fn serve_move(db: &mut DbHandle, w: &Waiter, key: &[u8]) -> Option<(Reply, Vec<Vec<Bytes>>)> {
    let rpoplpush = !w.args[0].eq_ignore_ascii_case(b"blmove");
    let (from_left, to_left) = if rpoplpush {
        (false, true)
    } else {
        (side(&w.args[3])?, side(&w.args[4])?)
    };
    let dst = &w.args[2];
    match move_ready(db, key, dst) {
        Ok(true) => {}
        Ok(false) => return None,
        // The destination holds another type: the client gets the error, as in Redis.
        Err(e) => return Some((e, Vec::new())),
    }
    let e = do_move(db, key, dst, from_left, to_left)?;
    Some((
        Reply::Bulk(Bytes::from(e)),
        vec![move_cmd(rpoplpush, key, dst, from_left, to_left)],
    ))
}

fn brpoplpush(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    bmove(ctx, args, false, true, &args[3])
}

fn blmove(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let (Some(from), Some(to)) = (side(&args[3]), side(&args[4])) else {
        return Err(Reply::error(SYNTAX));
    };
    bmove(ctx, args, from, to, &args[5])
}

/// Parse `numkeys key... LEFT|RIGHT [COUNT n]` starting at `args[first]`.
/// Returns (keys range, left, count).
fn parse_mpop(
    args: &[Bytes],
    first: usize,
) -> Result<(std::ops::Range<usize>, bool, usize), Reply> {
    let n = match crate::util::numtext::parse_i64(&args[first]) {
        Some(n) if n > 0 => n as usize,
        _ => return Err(Reply::error("ERR numkeys should be greater than 0")),
    };
    let keys = first + 1..first + 1 + n;
    if keys.end >= args.len() {
        return Err(Reply::error(SYNTAX));
    }
    let left = side(&args[keys.end]).ok_or_else(|| Reply::error(SYNTAX))?;
    let mut count = None;
    let mut i = keys.end + 1;
    while i < args.len() {
        if eq(&args[i], "count") && i + 1 < args.len() && count.is_none() {
            match crate::util::numtext::parse_i64(&args[i + 1]) {
                Some(c) if c > 0 => count = Some(c as usize),
                _ => return Err(Reply::error("ERR count should be greater than 0")),
            }
            i += 2;
        } else {
            return Err(Reply::error(SYNTAX));
        }
    }
    Ok((keys, left, count.unwrap_or(1)))
}

fn mpop_keys(args: &[Bytes], first: usize) -> Vec<usize> {
    match args
        .get(first)
        .and_then(|a| crate::util::numtext::parse_i64(a))
    {
        Some(n) if n > 0 => (first + 1..(first + 1 + n as usize).min(args.len())).collect(),
        _ => Vec::new(),
    }
}

fn lmpop_keys(args: &[Bytes]) -> Vec<usize> {
    mpop_keys(args, 1)
}
fn blmpop_keys(args: &[Bytes]) -> Vec<usize> {
    mpop_keys(args, 2)
}

/// Pop from the first non-empty list among `keys`; None if all are empty.
fn mpop_now(
    ctx: &mut Ctx,
    keys: &[Bytes],
    left: bool,
    count: usize,
) -> Result<Option<Reply>, Reply> {
    let mut db = ctx.db();
    for k in keys {
        let has = get_list(&mut db, k, false)?.is_some_and(|l| !l.is_empty());
        if has {
            let got = pop_n(&mut db, k, left, count, true);
            db.modified(k);
            ctx.dirty += 1;
            ctx.propagate_as(vec![pop_cmd(k, left, Some(got.len()))]);
            return Ok(Some(Reply::Array(vec![
                Reply::Bulk(k.clone()),
                Reply::Array(got.iter().map(|e| bulk(e)).collect()),
            ])));
        }
    }
    Ok(None)
}

fn lmpop(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let (keys, left, count) = parse_mpop(args, 1)?;
    match mpop_now(ctx, &args[keys], left, count)? {
        Some(r) => Ok(r),
        None => Ok(Reply::NullArray),
    }
}

fn blmpop(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    // Redis reads numkeys, the side and COUNT before the timeout.
    let (keys, left, count) = parse_mpop(args, 2)?;
    let timeout = block_timeout_ms(&args[1], ctx.now_ms())?;
    match mpop_now(ctx, &args[keys.clone()], left, count)? {
        Some(r) => Ok(r),
        None if ctx.in_exec => Ok(Reply::NullArray),
        None => {
            ctx.block = Some(BlockRequest {
                keys: args[keys].to_vec(),
                timeout_ms: timeout,
                serve: serve_pop,
                on_timeout: Reply::NullArray,
                args: None,
                serve_each: false,
            });
            Ok(Reply::NoReply)
        }
    }
}
