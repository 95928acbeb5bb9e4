//! String commands: GET SET SETEX PSETEX SETNX GETSET GETDEL GETEX MGET MSET MSETNX APPEND
//! STRLEN GETRANGE SUBSTR SETRANGE INCR DECR INCRBY DECRBY INCRBYFLOAT SETBIT GETBIT BITCOUNT
//! BITPOS LCS.
//!
//! Values are `Bytes`; integers are stored as their decimal text (Redis's "int" encoding is a
//! memory trick with the same observable behaviour). Commands with relative expiry are logged
//! as absolute (`SET .. PXAT`, `PEXPIREAT`) and INCRBYFLOAT as the resulting `SET`, so that an
//! AOF replays to the same state at any later time.

use super::args::{eq, int, NOT_FLOAT, NOT_INT, SYNTAX};
use super::argv::is_keyword;
use super::errors::invalid_expire_time;
use super::flags::*;
use super::{CmdResult, Ctx, Keys, Spec};
use crate::cmdspec::wrong_arity;
use crate::keyspace::StrSlot;
use crate::notify;
use crate::protocol::Reply;
use crate::types::compact::CompactBytes;
use crate::types::{Value, WRONGTYPE};
use crate::util::numtext::{parse_i64, LongDouble};
use bytes::Bytes;
use std::sync::atomic::Ordering;

pub static COMMANDS: &[Spec] = &[
    Spec::new(
        "get",
        2,
        READONLY | FAST,
        Keys::Range(1, 1, 1),
        get,
        "string",
    ),
    Spec::new(
        "set",
        -3,
        WRITE | DENYOOM,
        Keys::Range(1, 1, 1),
        set,
        "string",
    ),
    Spec::new(
        "setex",
        4,
        WRITE | DENYOOM,
        Keys::Range(1, 1, 1),
        setex,
        "string",
    ),
    Spec::new(
        "psetex",
        4,
        WRITE | DENYOOM,
        Keys::Range(1, 1, 1),
        setex,
        "string",
    ),
    Spec::new(
        "setnx",
        3,
        WRITE | DENYOOM | FAST,
        Keys::Range(1, 1, 1),
        setnx,
        "string",
    ),
    Spec::new(
        "getset",
        3,
        WRITE | DENYOOM | FAST,
        Keys::Range(1, 1, 1),
        getset,
        "string",
    ),
    Spec::new(
        "getdel",
        2,
        WRITE | FAST,
        Keys::Range(1, 1, 1),
        getdel,
        "string",
    ),
    Spec::new(
        "getex",
        -2,
        WRITE | FAST,
        Keys::Range(1, 1, 1),
        getex,
        "string",
    ),
    Spec::new(
        "mget",
        -2,
        READONLY | FAST,
        Keys::Range(1, -1, 1),
        mget,
        "string",
    ),
    Spec::new(
        "mset",
        -3,
        WRITE | DENYOOM,
        Keys::Range(1, -1, 2),
        mset,
        "string",
    ),
    Spec::new(
        "msetnx",
        -3,
        WRITE | DENYOOM,
        Keys::Range(1, -1, 2),
        mset,
        "string",
    ),
    Spec::new(
        "append",
        3,
        WRITE | DENYOOM | FAST,
        Keys::Range(1, 1, 1),
        append,
        "string",
    ),
    Spec::new(
        "strlen",
        2,
        READONLY | FAST,
        Keys::Range(1, 1, 1),
        strlen,
        "string",
    ),
    Spec::new(
        "getrange",
        4,
        READONLY,
        Keys::Range(1, 1, 1),
        getrange,
        "string",
    ),
    Spec::new(
        "substr",
        4,
        READONLY,
        Keys::Range(1, 1, 1),
        getrange,
        "string",
    ),
    Spec::new(
        "setrange",
        4,
        WRITE | DENYOOM,
        Keys::Range(1, 1, 1),
        setrange,
        "string",
    ),
    Spec::new(
        "incr",
        2,
        WRITE | DENYOOM | FAST,
        Keys::Range(1, 1, 1),
        incr,
        "string",
    ),
    Spec::new(
        "decr",
        2,
        WRITE | DENYOOM | FAST,
        Keys::Range(1, 1, 1),
        incr,
        "string",
    ),
    Spec::new(
        "incrby",
        3,
        WRITE | DENYOOM | FAST,
        Keys::Range(1, 1, 1),
        incr,
        "string",
    ),
    Spec::new(
        "decrby",
        3,
        WRITE | DENYOOM | FAST,
        Keys::Range(1, 1, 1),
        incr,
        "string",
    ),
    Spec::new(
        "incrbyfloat",
        3,
        WRITE | DENYOOM | FAST,
        Keys::Range(1, 1, 1),
        incrbyfloat,
        "string",
    ),
    Spec::new(
        "setbit",
        4,
        WRITE | DENYOOM,
        Keys::Range(1, 1, 1),
        setbit,
        "bitmap",
    ),
    Spec::new(
        "getbit",
        3,
        READONLY | FAST,
        Keys::Range(1, 1, 1),
        getbit,
        "bitmap",
    ),
    Spec::new(
        "bitcount",
        -2,
        READONLY,
        Keys::Range(1, 1, 1),
        bitcount,
        "bitmap",
    ),
    Spec::new(
        "bitpos",
        -3,
        READONLY,
        Keys::Range(1, 1, 1),
        bitpos,
        "bitmap",
    ),
    Spec::new("lcs", -3, READONLY, Keys::Range(1, 2, 1), lcs, "string"),
];

/// Read a string value: Ok(None) if absent, Err(WRONGTYPE) for other types.
fn read_str(ctx: &mut Ctx, key: &[u8]) -> Result<Option<Bytes>, Reply> {
    let mut db = ctx.db();
    match db.read(key) {
        None => Ok(None),
        Some(Value::Str(s)) => Ok(Some(s.to_bytes())),
        Some(_) => Err(Reply::error(WRONGTYPE)),
    }
}

fn max_len(ctx: &Ctx) -> i64 {
    ctx.srv
        .config
        .hot
        .proto_max_bulk_len
        .load(Ordering::Relaxed)
}

fn too_big() -> Reply {
    Reply::error("ERR string exceeds maximum allowed size (proto-max-bulk-len)")
}

fn get(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let len = match ctx.db().read(&a[1]) {
        None => return Ok(Reply::Null),
        Some(Value::Str(s)) if s.len() < super::BIG_REPLY => return Ok(Reply::bulk_of(s)),
        Some(Value::Str(s)) => s.len(),
        Some(_) => return Err(Reply::error(WRONGTYPE)),
    };
    // A value its client could never be sent is not copied into a reply first.
    if ctx.closes_for_reply_of(len) {
        return Ok(Reply::Null);
    }
    match ctx.db().read_uncounted(&a[1]) {
        Some(Value::Str(s)) => Ok(Reply::bulk_of(s)),
        _ => Ok(Reply::Null),
    }
}

#[derive(PartialEq, Clone, Copy)]
enum Cond {
    None,
    Nx,
    Xx,
}

#[derive(Clone, Copy, PartialEq)]
enum Ttl {
    /// Clear any TTL.
    Clear,
    Keep,
    /// Absolute Unix ms.
    At(i64),
    /// GETEX PERSIST.
    Persist,
    /// GETEX with no option.
    Unchanged,
}

/// The unit of an EX/PX/EXAT/PXAT option.
#[derive(Clone, Copy, PartialEq)]
enum ExpireUnit {
    Ex,
    Px,
    ExAt,
    PxAt,
}

impl ExpireUnit {
    /// The option `o` names, as Redis compares it (case-insensitive C string).
    fn of(o: &[u8]) -> Option<ExpireUnit> {
        [
            ("ex", ExpireUnit::Ex),
            ("px", ExpireUnit::Px),
            ("exat", ExpireUnit::ExAt),
            ("pxat", ExpireUnit::PxAt),
        ]
        .into_iter()
        .find(|(w, _)| is_keyword(o, w))
        .map(|(_, u)| u)
    }
}

/// Turn an EX/PX/EXAT/PXAT amount into absolute ms, with Redis's range checks
/// (`getExpireMillisecondsOrReply`): not an integer, then not positive or overflowing.
fn expire_at(ctx: &Ctx, unit: ExpireUnit, amount: &[u8], cmd: &str) -> Result<i64, Reply> {
    let bad = || Reply::error(invalid_expire_time(cmd));
    let v = parse_i64(amount).ok_or_else(|| Reply::error(NOT_INT))?;
    if v <= 0 {
        return Err(bad());
    }
    let ms = match unit {
        ExpireUnit::Ex | ExpireUnit::ExAt => v.checked_mul(1000).ok_or_else(bad)?,
        ExpireUnit::Px | ExpireUnit::PxAt => v,
    };
    match unit {
        ExpireUnit::Ex | ExpireUnit::Px => ms.checked_add(ctx.now_ms()).ok_or_else(bad),
        ExpireUnit::ExAt | ExpireUnit::PxAt => Ok(ms),
    }
}

/// SET's and GETEX's options as Redis's `parseExtendedStringArgumentsOrReply` reads them,
/// all before any of them is acted on: NX and XX exclude each other, KEEPTTL/PERSIST and the
/// four expiry options exclude each other (repeating the same one is accepted, the last value
/// wins), an expiry option needs a value after it; anything else is a syntax error.
#[derive(Default)]
struct StringOptions<'a> {
    nx: bool,
    xx: bool,
    get: bool,
    keepttl: bool,
    persist: bool,
    expire: Option<(ExpireUnit, &'a [u8])>,
}

impl<'a> StringOptions<'a> {
    fn parse(a: &'a [Bytes], for_set: bool) -> Result<StringOptions<'a>, Reply> {
        let mut o = StringOptions::default();
        let mut j = if for_set { 3 } else { 2 };
        while j < a.len() {
            let opt = &a[j][..];
            let next = a.get(j + 1);
            let unit_now = o.expire.map(|(u, _)| u);
            if for_set && is_keyword(opt, "nx") && !o.xx {
                o.nx = true;
            } else if for_set && is_keyword(opt, "xx") && !o.nx {
                o.xx = true;
            } else if for_set && is_keyword(opt, "get") {
                o.get = true;
            } else if for_set && is_keyword(opt, "keepttl") && !o.persist && o.expire.is_none() {
                o.keepttl = true;
            } else if !for_set && is_keyword(opt, "persist") && !o.keepttl && o.expire.is_none() {
                o.persist = true;
            } else if let (Some(unit), Some(next)) = (ExpireUnit::of(opt), next) {
                if o.keepttl || o.persist || unit_now.is_some_and(|u| u != unit) {
                    return Err(Reply::error(SYNTAX));
                }
                o.expire = Some((unit, &next[..]));
                j += 1;
            } else {
                return Err(Reply::error(SYNTAX));
            }
            j += 1;
        }
        Ok(o)
    }
}

/// Log a SET as `SET key value PXAT ms` (or KEEPTTL) so it replays identically.
fn propagate_set(ctx: &mut Ctx, key: &Bytes, val: &Bytes, ttl: Ttl) {
    let mut cmd = vec![Bytes::from_static(b"SET"), key.clone(), val.clone()];
    match ttl {
        Ttl::At(ms) => {
            cmd.push(Bytes::from_static(b"PXAT"));
            cmd.push(Bytes::from(ms.to_string()));
        }
        Ttl::Keep => cmd.push(Bytes::from_static(b"KEEPTTL")),
        _ => {}
    }
    ctx.propagate_as(vec![cmd]);
}

/// Store a string with the given TTL handling.
fn store(ctx: &mut Ctx, key: &Bytes, val: Bytes, ttl: Ttl) {
    let mut db = ctx.db();
    let value = Value::Str(CompactBytes::new(&val));
    match ttl {
        Ttl::Keep => db.insert_keep_ttl(key, value),
        _ => db.insert(key, value),
    }
    if let Ttl::At(ms) = ttl {
        db.set_expire(key, ms);
    }
    db.modified(key);
    db.notify(notify::STRING, "set", key);
    if let Ttl::At(_) = ttl {
        db.notify(notify::GENERIC, "expire", key);
    }
    ctx.dirty += 1;
}

fn set(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let (key, val) = (&a[1], &a[2]);
    let o = StringOptions::parse(a, true)?;
    // Redis checks the expiry value, then (with GET) the old value's type, then NX/XX.
    let ttl = match o.expire {
        Some((unit, amount)) => Ttl::At(expire_at(ctx, unit, amount, "set")?),
        None if o.keepttl => Ttl::Keep,
        None => Ttl::Clear,
    };
    let want_get = o.get;
    let cond = if o.nx {
        Cond::Nx
    } else if o.xx {
        Cond::Xx
    } else {
        Cond::None
    };
    // Only SET ... GET needs the old value (and its type); NX/XX only need existence.
    let (old, exists) = if want_get {
        let v = read_str(ctx, key)?;
        let e = v.is_some();
        (v, e)
    } else if cond != Cond::None {
        (None, ctx.db().exists(key))
    } else {
        (None, false)
    };
    let go = match cond {
        Cond::None => true,
        Cond::Nx => !exists,
        Cond::Xx => exists,
    };
    if go {
        store(ctx, key, val.clone(), ttl);
        if matches!(ttl, Ttl::At(_)) {
            propagate_set(ctx, key, val, ttl);
        }
    }
    if want_get {
        return match old {
            Some(v) => Ok(Reply::Bulk(v)),
            None => Ok(Reply::Null),
        };
    }
    if go {
        Ok(Reply::Ok)
    } else {
        Ok(Reply::Null)
    }
}

fn setex(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let cmd = if eq(&a[0], "setex") {
        "setex"
    } else {
        "psetex"
    };
    let unit = if cmd == "setex" {
        ExpireUnit::Ex
    } else {
        ExpireUnit::Px
    };
    let at = expire_at(ctx, unit, &a[2], cmd)?;
    store(ctx, &a[1], a[3].clone(), Ttl::At(at));
    propagate_set(ctx, &a[1], &a[3], Ttl::At(at));
    Ok(Reply::Ok)
}

fn setnx(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    if ctx.db().exists(&a[1]) {
        return Ok(Reply::Int(0));
    }
    store(ctx, &a[1], a[2].clone(), Ttl::Clear);
    Ok(Reply::Int(1))
}

fn getset(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let old = read_str(ctx, &a[1])?;
    store(ctx, &a[1], a[2].clone(), Ttl::Clear);
    // Propagated as the SET it amounts to, as Redis does (a replica counts a SET).
    ctx.propagate_as(vec![vec![
        Bytes::from_static(b"SET"),
        a[1].clone(),
        a[2].clone(),
    ]]);
    match old {
        Some(v) => Ok(Reply::Bulk(v)),
        None => Ok(Reply::Null),
    }
}

fn getdel(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    match read_str(ctx, &a[1])? {
        Some(v) => {
            ctx.db().remove(&a[1]);
            ctx.db().modified(&a[1]);
            ctx.notify(notify::GENERIC, "del", &a[1]);
            ctx.dirty += 1;
            ctx.propagate_as(vec![vec![Bytes::from_static(b"DEL"), a[1].clone()]]);
            Ok(Reply::Bulk(v))
        }
        None => Ok(Reply::Null),
    }
}

fn getex(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let key = &a[1];
    let o = StringOptions::parse(a, false)?;
    // Redis looks the key up (nil, WRONGTYPE) before it checks the expiry value.
    let Some(v) = read_str(ctx, key)? else {
        return Ok(Reply::Null);
    };
    let ttl = match o.expire {
        Some((unit, amount)) => Ttl::At(expire_at(ctx, unit, amount, "getex")?),
        None if o.persist => Ttl::Persist,
        None => Ttl::Unchanged,
    };
    match ttl {
        Ttl::At(ms) => {
            if ms <= ctx.now_ms() {
                ctx.db().remove(key);
                ctx.notify(notify::GENERIC, "del", key);
                ctx.propagate_as(vec![vec![Bytes::from_static(b"DEL"), key.clone()]]);
            } else {
                ctx.db().set_expire(key, ms);
                ctx.notify(notify::GENERIC, "expire", key);
                ctx.propagate_as(vec![vec![
                    Bytes::from_static(b"PEXPIREAT"),
                    key.clone(),
                    Bytes::from(ms.to_string()),
                ]]);
            }
            ctx.db().modified(key);
            ctx.dirty += 1;
        }
        Ttl::Persist if ctx.db().persist(key) => {
            ctx.notify(notify::GENERIC, "persist", key);
            ctx.propagate_as(vec![vec![Bytes::from_static(b"PERSIST"), key.clone()]]);
            ctx.db().modified(key);
            ctx.dirty += 1;
        }
        _ => {}
    }
    Ok(Reply::Bulk(v))
}

fn mget(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let mut db = ctx.db();
    Ok(Reply::Array(
        a[1..]
            .iter()
            .map(|k| match db.read(k) {
                Some(Value::Str(s)) => Reply::bulk_of(s),
                _ => Reply::Null,
            })
            .collect(),
    ))
}

fn mset(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let nx = eq(&a[0], "msetnx");
    if a.len().is_multiple_of(2) {
        return Err(wrong_arity(if nx { "msetnx" } else { "mset" }));
    }
    if nx && a[1..].chunks(2).any(|p| ctx.db().exists(&p[0])) {
        return Ok(Reply::Int(0));
    }
    for p in a[1..].chunks(2) {
        store(ctx, &p[0], p[1].clone(), Ttl::Clear);
    }
    if nx {
        Ok(Reply::Int(1))
    } else {
        Ok(Reply::Ok)
    }
}

fn append(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let max = max_len(ctx);
    let mut db = ctx.db();
    let new_len = match db.value(&a[1]) {
        None => {
            db.insert_keep_ttl(&a[1], Value::Str(CompactBytes::new(&a[2])));
            a[2].len()
        }
        Some(Value::Str(s)) => {
            if (s.len() + a[2].len()) as i64 > max {
                return Err(too_big());
            }
            s.append(&a[2]);
            s.len()
        }
        Some(_) => return Err(Reply::error(WRONGTYPE)),
    };
    db.modified(&a[1]);
    db.notify(notify::STRING, "append", &a[1]);
    ctx.dirty += 1;
    Ok(Reply::Int(new_len as i64))
}

fn strlen(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let v = read_str(ctx, &a[1])?;
    Ok(Reply::Int(v.map_or(0, |s| s.len() as i64)))
}

fn getrange(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let (Ok(mut start), Ok(mut end)) = (int(&a[2]), int(&a[3])) else {
        return Err(Reply::error(NOT_INT));
    };
    let Some(s) = read_str(ctx, &a[1])? else {
        return Ok(Reply::bulk_slice(b""));
    };
    let len = s.len() as i64;
    if start < 0 && end < 0 && start > end {
        return Ok(Reply::bulk_slice(b""));
    }
    if start < 0 {
        start += len;
    }
    if end < 0 {
        end += len;
    }
    start = start.max(0);
    end = end.max(0);
    if end >= len {
        end = len - 1;
    }
    if len == 0 || start > end {
        return Ok(Reply::bulk_slice(b""));
    }
    Ok(Reply::Bulk(s.slice(start as usize..=end as usize)))
}

fn setrange(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let Ok(offset) = int(&a[2]) else {
        return Err(Reply::error(NOT_INT));
    };
    if offset < 0 {
        return Err(Reply::error("ERR offset is out of range"));
    }
    let max = max_len(ctx);
    let patch = &a[3];
    let mut db = ctx.db();
    let cur = match db.value(&a[1]) {
        None => None,
        Some(Value::Str(s)) => Some(s.len()),
        Some(_) => return Err(Reply::error(WRONGTYPE)),
    };
    if patch.is_empty() {
        return Ok(Reply::Int(cur.unwrap_or(0) as i64));
    }
    if offset
        .checked_add(patch.len() as i64)
        .is_none_or(|end| end > max)
    {
        return Err(too_big());
    }
    let off = offset as usize;
    let mut v: Vec<u8> = match db.value(&a[1]) {
        Some(Value::Str(s)) => std::mem::take(s).into_vec(),
        _ => Vec::new(),
    };
    if v.len() < off + patch.len() {
        // Exactly (see `CompactBytes::append`): the stored string is exactly sized again.
        v.reserve_exact(off + patch.len() - v.len());
        v.resize(off + patch.len(), 0);
    }
    v[off..off + patch.len()].copy_from_slice(patch);
    let n = v.len();
    if cur.is_some() {
        if let Some(Value::Str(s)) = db.value(&a[1]) {
            *s = CompactBytes::from_vec(v);
        }
    } else {
        db.insert(&a[1], Value::Str(CompactBytes::from_vec(v)));
    }
    db.modified(&a[1]);
    db.notify(notify::STRING, "setrange", &a[1]);
    ctx.dirty += 1;
    Ok(Reply::Int(n as i64))
}

fn incr(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    // The command's name picks the delta; compared in place (INCR on a hot counter is a
    // benchmark line, and a lowercased copy of the name was an allocation per request).
    let name = &a[0][..];
    let delta = if name.eq_ignore_ascii_case(b"incr") {
        1
    } else if name.eq_ignore_ascii_case(b"decr") {
        -1
    } else if name.eq_ignore_ascii_case(b"incrby") {
        int(&a[2])?
    } else {
        let d = int(&a[2])?;
        if d == i64::MIN {
            return Err(Reply::error("ERR decrement would overflow"));
        }
        -d
    };
    let mut db = ctx.db();
    // One lookup: the counter is rewritten where it is; a missing key is inserted.
    let mut digits = [0u8; 20];
    let new = match db.string_slot(&a[1]) {
        Some(StrSlot::Packed(p)) => {
            let Some(cur) = parse_i64(p.bytes()) else {
                return Err(Reply::error(NOT_INT));
            };
            let Some(new) = cur.checked_add(delta) else {
                return Err(Reply::error("ERR increment or decrement would overflow"));
            };
            p.set(i64_text(new, &mut digits));
            new
        }
        Some(StrSlot::Stored(Value::Str(s))) => {
            let Some(cur) = parse_i64(s) else {
                return Err(Reply::error(NOT_INT));
            };
            let Some(new) = cur.checked_add(delta) else {
                return Err(Reply::error("ERR increment or decrement would overflow"));
            };
            *s = CompactBytes::new(i64_text(new, &mut digits));
            new
        }
        Some(StrSlot::Stored(_)) => return Err(Reply::error(WRONGTYPE)),
        None => {
            db.insert(
                &a[1],
                Value::Str(CompactBytes::new(i64_text(delta, &mut digits))),
            );
            delta
        }
    };
    db.modified(&a[1]);
    db.notify(notify::STRING, "incrby", &a[1]);
    ctx.dirty += 1;
    Ok(Reply::Int(new))
}

/// `v` in decimal, written into `buf` (20 bytes hold any i64).
fn i64_text(v: i64, buf: &mut [u8; 20]) -> &[u8] {
    let u = v.unsigned_abs();
    let digits = crate::util::numtext::digit_count(u);
    let sign = usize::from(v < 0);
    buf[0] = b'-';
    crate::util::numtext::write_digits(u, &mut buf[sign..sign + digits]);
    &buf[..sign + digits]
}

fn incrbyfloat(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    // Redis checks the key's type, then its value, then the increment.
    let mut db = ctx.db();
    let cur = match db.value(&a[1]) {
        None => LongDouble::from_i64(0),
        Some(Value::Str(s)) => match LongDouble::parse(s) {
            Some(v) => v,
            None => return Err(Reply::error(NOT_FLOAT)),
        },
        Some(_) => return Err(Reply::error(WRONGTYPE)),
    };
    let Some(incr) = LongDouble::parse(&a[2]) else {
        return Err(Reply::error(NOT_FLOAT));
    };
    let new = cur.add(incr);
    if !new.is_finite() {
        return Err(Reply::error("ERR increment would produce NaN or Infinity"));
    }
    let Some(text) = new.format_human() else {
        return Err(Reply::error(NOT_FLOAT));
    };
    let text = Bytes::from(text);
    match db.value(&a[1]) {
        Some(Value::Str(s)) => *s = CompactBytes::from_bytes(text.clone()),
        _ => db.insert(&a[1], Value::Str(CompactBytes::from_bytes(text.clone()))),
    }
    db.modified(&a[1]);
    db.notify(notify::STRING, "incrbyfloat", &a[1]);
    ctx.dirty += 1;
    // Replay the result, not the addition: float arithmetic must not drift across replays.
    propagate_set(ctx, &a[1], &text, Ttl::Keep);
    Ok(Reply::Bulk(text))
}

fn bit_offset(a: &[u8], max_len: i64) -> Result<u64, Reply> {
    let err = || Reply::error("ERR bit offset is not an integer or out of range");
    let v = parse_i64(a).ok_or_else(err)?;
    if v < 0 || (v >> 3) >= max_len {
        return Err(err());
    }
    Ok(v as u64)
}

fn setbit(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let max = max_len(ctx);
    let off = bit_offset(&a[2], max)?;
    let bit = match &a[3][..] {
        b"1" => 1u8,
        b"0" => 0u8,
        _ => return Err(Reply::error("ERR bit is not an integer or out of range")),
    };
    let byte = (off >> 3) as usize;
    let mask = 1u8 << (7 - (off & 7));
    let mut db = ctx.db();
    let (mut v, existed): (Vec<u8>, bool) = match db.value(&a[1]) {
        None => (Vec::new(), false),
        Some(Value::Str(s)) => (std::mem::take(s).into_vec(), true),
        Some(_) => return Err(Reply::error(WRONGTYPE)),
    };
    // As Redis: a new key or a longer string always counts as a change; otherwise only a bit
    // that flips does (so a no-op SETBIT is neither logged nor signalled).
    let grown = !existed || v.len() <= byte;
    if v.len() <= byte {
        // Exactly (see `CompactBytes::append`): the stored string is exactly sized again.
        v.reserve_exact(byte + 1 - v.len());
        v.resize(byte + 1, 0);
    }
    let old = (v[byte] & mask != 0) as i64;
    if bit == 1 {
        v[byte] |= mask;
    } else {
        v[byte] &= !mask;
    }
    match db.value(&a[1]) {
        Some(Value::Str(s)) => *s = CompactBytes::from_vec(v),
        _ => db.insert(&a[1], Value::Str(CompactBytes::from_vec(v))),
    }
    if grown || old != i64::from(bit) {
        db.modified(&a[1]);
        db.notify(notify::STRING, "setbit", &a[1]);
        ctx.dirty += 1;
    }
    Ok(Reply::Int(old))
}

fn getbit(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let max = max_len(ctx);
    let off = bit_offset(&a[2], max)?;
    let Some(s) = read_str(ctx, &a[1])? else {
        return Ok(Reply::Int(0));
    };
    let byte = (off >> 3) as usize;
    if byte >= s.len() {
        return Ok(Reply::Int(0));
    }
    Ok(Reply::Int(((s[byte] >> (7 - (off & 7))) & 1) as i64))
}

/// A BITCOUNT/BITPOS range over a string of `strlen` bytes, in Redis's steps: negative
/// indexes from the end, clamped, and with BIT the byte range plus masks of the bits of the
/// first and last byte that lie outside it. Returns (start byte, end byte, first mask, last
/// mask); start > end means an empty range.
fn byte_range(mut start: i64, mut end: i64, strlen: i64, isbit: bool) -> (i64, i64, u8, u8) {
    let totlen = if isbit { strlen << 3 } else { strlen };
    if start < 0 {
        start += totlen;
    }
    if end < 0 {
        end += totlen;
    }
    start = start.max(0);
    end = end.max(0);
    if end >= totlen {
        end = totlen - 1;
    }
    let (mut first_mask, mut last_mask) = (0u8, 0u8);
    if isbit && start <= end {
        first_mask = !((1u16 << (8 - (start & 7))) - 1) as u8;
        last_mask = ((1u16 << (7 - (end & 7))) - 1) as u8;
        start >>= 3;
        end >>= 3;
    }
    (start, end, first_mask, last_mask)
}

/// BIT or BYTE.
fn range_unit(a: &[u8]) -> Result<bool, Reply> {
    if eq(a, "bit") {
        Ok(true)
    } else if eq(a, "byte") {
        Ok(false)
    } else {
        Err(Reply::error(SYNTAX))
    }
}

/// BITCOUNT key [start end [BYTE|BIT]]: the key is looked up before the range is parsed, as
/// in Redis (so a missing key answers 0 whatever the arguments).
fn bitcount(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let Some(s) = read_str(ctx, &a[1])? else {
        return Ok(Reply::Int(0));
    };
    let strlen = s.len() as i64;
    let (start, end, first_mask, last_mask) = match a.len() {
        2 => (0, strlen - 1, 0, 0),
        4 | 5 => {
            let x = int(&a[2])?;
            let y = int(&a[3])?;
            if x < 0 && y < 0 && x > y {
                return Ok(Reply::Int(0));
            }
            let isbit = if a.len() == 5 {
                range_unit(&a[4])?
            } else {
                false
            };
            byte_range(x, y, strlen, isbit)
        }
        _ => return Err(Reply::error(SYNTAX)),
    };
    if start > end {
        return Ok(Reply::Int(0));
    }
    let (start, end) = (start as usize, end as usize);
    let mut n: i64 = s[start..=end]
        .iter()
        .map(|b| i64::from(b.count_ones()))
        .sum();
    // Bits of the edge bytes outside a BIT range were counted: take them off.
    n -= i64::from((s[start] & first_mask).count_ones());
    n -= i64::from((s[end] & last_mask).count_ones());
    Ok(Reply::Int(n))
}

/// Redis's `redisBitpos`: the first bit equal to `bit` in `bytes`; not found, -1 when looking
/// for a set bit, else the bit just past the end (the string reads as padded with zeros).
fn first_bit(bytes: &[u8], bit: u8) -> i64 {
    let skip = if bit == 1 { 0u8 } else { 0xff };
    for (i, &b) in bytes.iter().enumerate() {
        if b != skip {
            let x = if bit == 1 { b } else { !b };
            return i as i64 * 8 + i64::from(x.leading_zeros());
        }
    }
    if bit == 1 {
        -1
    } else {
        bytes.len() as i64 * 8
    }
}

/// BITPOS key bit [start [end [BYTE|BIT]]], in Redis's order of checks.
fn bitpos(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let bit = int(&a[2])?;
    if bit != 0 && bit != 1 {
        return Err(Reply::error("ERR The bit argument must be 1 or 0."));
    }
    let bit = bit as u8;
    let Some(s) = read_str(ctx, &a[1])? else {
        return Ok(Reply::Int(if bit == 1 { -1 } else { 0 }));
    };
    let strlen = s.len() as i64;
    let mut end_given = false;
    let (start, end, first_mask, last_mask) = match a.len() {
        3 => (0, strlen - 1, 0, 0),
        4..=6 => {
            let start = int(&a[3])?;
            let isbit = if a.len() == 6 {
                range_unit(&a[5])?
            } else {
                false
            };
            let end = if a.len() >= 5 {
                end_given = true;
                int(&a[4])?
            } else if isbit {
                (strlen << 3) + 7
            } else {
                strlen - 1
            };
            byte_range(start, end, strlen, isbit)
        }
        _ => return Err(Reply::error(SYNTAX)),
    };
    if start > end {
        return Ok(Reply::Int(-1));
    }
    let (mut start, end) = (start as usize, end as usize);
    let mut bytes = end - start + 1;
    let masked = |b: u8, mask: u8| if bit == 1 { b & !mask } else { b | mask };
    let pos = 'found: {
        if first_mask != 0 {
            let mut c = masked(s[start], first_mask);
            if last_mask != 0 && bytes == 1 {
                c = masked(c, last_mask);
            }
            let pos = first_bit(&[c], bit);
            if bytes == 1 || (pos != -1 && pos != 8) {
                break 'found pos;
            }
            start += 1;
            bytes -= 1;
        }
        let whole = bytes - usize::from(last_mask != 0);
        if whole > 0 {
            let pos = first_bit(&s[start..start + whole], bit);
            if bytes == whole || (pos != -1 && pos != (whole as i64) << 3) {
                break 'found pos;
            }
            start += whole;
            bytes -= whole;
        }
        first_bit(&[masked(s[end], last_mask)], bit)
    };
    // With an explicit end, a clear bit "past the range" is not in it.
    if end_given && bit == 0 && pos == (bytes as i64) << 3 {
        return Ok(Reply::Int(-1));
    }
    Ok(Reply::Int(if pos == -1 {
        -1
    } else {
        pos + ((start as i64) << 3)
    }))
}

fn lcs(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    // Redis reads both keys (and checks their types) before the options.
    let x = match read_str(ctx, &a[1]) {
        Ok(v) => v.unwrap_or_default(),
        Err(_) => {
            return Err(Reply::error(
                "ERR The specified keys must contain string values",
            ))
        }
    };
    let y = match read_str(ctx, &a[2]) {
        Ok(v) => v.unwrap_or_default(),
        Err(_) => {
            return Err(Reply::error(
                "ERR The specified keys must contain string values",
            ))
        }
    };
    let (mut want_len, mut want_idx, mut with_len) = (false, false, false);
    let mut min_len: i64 = 0;
    let mut i = 3;
    while i < a.len() {
        if eq(&a[i], "len") {
            want_len = true;
        } else if eq(&a[i], "idx") {
            want_idx = true;
        } else if eq(&a[i], "withmatchlen") {
            with_len = true;
        } else if eq(&a[i], "minmatchlen") && i + 1 < a.len() {
            min_len = int(&a[i + 1])?.max(0);
            i += 1;
        } else {
            return Err(Reply::error(SYNTAX));
        }
        i += 1;
    }
    if want_len && want_idx {
        return Err(Reply::error(
            "ERR If you want both the length and indexes, please just use IDX.",
        ));
    }
    let (n, m) = (x.len(), y.len());
    if (n as u64 + 1) * (m as u64 + 1) > (1u64 << 32) {
        return Err(Reply::error(
            "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len",
        ));
    }
    // dp[i][j] = LCS length of x[..i], y[..j]
    let w = m + 1;
    let mut dp = vec![0u32; (n + 1) * w];
    for i in 1..=n {
        for j in 1..=m {
            dp[i * w + j] = if x[i - 1] == y[j - 1] {
                dp[(i - 1) * w + j - 1] + 1
            } else {
                dp[(i - 1) * w + j].max(dp[i * w + j - 1])
            };
        }
    }
    let total = dp[n * w + m] as i64;
    if want_len {
        return Ok(Reply::Int(total));
    }
    // Walk back collecting the common string and, for IDX, the matching ranges.
    let mut out = vec![0u8; total as usize];
    let mut idx = total as usize;
    let (mut i, mut j) = (n, m);
    let mut matches: Vec<Reply> = Vec::new();
    let mut cur: Option<(usize, usize, usize, usize)> = None; // (a_start, a_end, b_start, b_end)
    let flush = |cur: &mut Option<(usize, usize, usize, usize)>, matches: &mut Vec<Reply>| {
        if let Some((as_, ae, bs, be)) = cur.take() {
            let len = (ae - as_ + 1) as i64;
            if len >= min_len {
                let mut item = vec![
                    Reply::Array(vec![Reply::Int(as_ as i64), Reply::Int(ae as i64)]),
                    Reply::Array(vec![Reply::Int(bs as i64), Reply::Int(be as i64)]),
                ];
                if with_len {
                    item.push(Reply::Int(len));
                }
                matches.push(Reply::Array(item));
            }
        }
    };
    while i > 0 && j > 0 {
        if x[i - 1] == y[j - 1] {
            idx -= 1;
            out[idx] = x[i - 1];
            let (pa, pb) = (i - 1, j - 1);
            match cur {
                Some((as_, _, bs, _)) if as_ == pa + 1 && bs == pb + 1 => {
                    if let Some(c) = cur.as_mut() {
                        c.0 = pa;
                        c.2 = pb;
                    }
                }
                _ => {
                    flush(&mut cur, &mut matches);
                    cur = Some((pa, pa, pb, pb));
                }
            }
            i -= 1;
            j -= 1;
        } else if dp[(i - 1) * w + j] > dp[i * w + j - 1] {
            i -= 1;
        } else {
            j -= 1;
        }
    }
    flush(&mut cur, &mut matches);
    if want_idx {
        return Ok(Reply::Map(vec![
            (Reply::bulk_slice(b"matches"), Reply::Array(matches)),
            (Reply::bulk_slice(b"len"), Reply::Int(total)),
        ]));
    }
    Ok(Reply::bulk(out))
}
