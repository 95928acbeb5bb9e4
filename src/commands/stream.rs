//! Stream commands (XADD ... XINFO), Redis 7.0.15's semantics from `t_stream.c`.
//!
//! Arguments are checked in Redis's order, errors are Redis's texts. Writes record their
//! keyspace events (class `t`), count in `dirty` and are logged as Redis propagates them: XADD
//! with the ID it generated and an approximate trim rewritten as the exact one it did;
//! XREADGROUP, XCLAIM and XAUTOCLAIM as the idempotent XCLAIM / XGROUP SETID /
//! XGROUP CREATECONSUMER commands Redis emits, never as themselves. XREAD and XREADGROUP with
//! BLOCK wait through [`crate::blocking`]: the waiter keeps the IDs it waits after (`$`
//! resolved when it blocked) and is served by [`serve_read`] when XADD makes its key ready;
//! an XREADGROUP waiter whose key is deleted or whose group is destroyed gets Redis's error.

use super::args::{eq, SYNTAX};
use super::{flags::*, BlockRequest, CmdResult, Ctx, Keys, Spec};
use crate::blocking::Waiter;
use crate::config::dir;
use crate::keyspace::DbHandle;
use crate::notify;
use crate::protocol::{Reply, Resp};
use crate::types::stream::{Group, NodeLimits, Stream, StreamId, Trim, INVALID_ENTRIES_READ};
use crate::types::{Value, WRONGTYPE};
use bytes::Bytes;

const K1: Keys = Keys::Range(1, 1, 1);
const G: &str = "stream";

pub static COMMANDS: &[Spec] = &[
    Spec::new("xadd", -5, WRITE | DENYOOM | FAST, K1, xadd, G),
    Spec::new("xlen", 2, READONLY | FAST, K1, xlen, G),
    Spec::new("xrange", -4, READONLY, K1, xrange, G),
    Spec::new("xrevrange", -4, READONLY, K1, xrevrange, G),
    Spec::new("xdel", -3, WRITE | FAST, K1, xdel, G),
    Spec::new("xtrim", -4, WRITE, K1, xtrim, G),
    Spec::new("xsetid", -3, WRITE | DENYOOM | FAST, K1, xsetid, G),
    Spec::new(
        "xread",
        -4,
        READONLY | BLOCKING | MOVABLE_KEYS,
        Keys::Custom(xread_keys),
        xread,
        G,
    ),
    Spec::new(
        "xreadgroup",
        -7,
        WRITE | BLOCKING | MOVABLE_KEYS,
        Keys::Custom(xread_keys),
        xreadgroup,
        G,
    ),
    Spec::new("xgroup", -2, WRITE, Keys::Custom(sub_key), xgroup, G),
    Spec::new("xack", -4, WRITE | FAST, K1, xack, G),
    Spec::new("xpending", -3, READONLY, K1, xpending, G),
    Spec::new("xclaim", -6, WRITE | FAST, K1, xclaim, G),
    Spec::new("xautoclaim", -6, WRITE | FAST, K1, xautoclaim, G),
    Spec::new("xinfo", -2, READONLY, Keys::Custom(sub_key), xinfo, G),
];

/// XGROUP / XINFO: the key follows the subcommand.
fn sub_key(a: &[Bytes]) -> Vec<usize> {
    if a.len() >= 3 && !eq(&a[1], "help") {
        vec![2]
    } else {
        vec![]
    }
}

/// XREAD / XREADGROUP: the keys are the first half of what follows STREAMS (Redis's
/// xreadGetKeys: options before it are skipped with their arguments).
fn xread_keys(a: &[Bytes]) -> Vec<usize> {
    let mut i = 1;
    let mut streams = None;
    while i < a.len() {
        if eq(&a[i], "block") || eq(&a[i], "count") {
            i += 2;
        } else if eq(&a[i], "group") {
            i += 3;
        } else if eq(&a[i], "noack") {
            i += 1;
        } else if eq(&a[i], "streams") {
            streams = Some(i);
            break;
        } else {
            break;
        }
    }
    let Some(pos) = streams else {
        return vec![];
    };
    let num = a.len() - pos - 1;
    if num == 0 || !num.is_multiple_of(2) {
        return vec![];
    }
    (pos + 1..pos + 1 + num / 2).collect()
}

const INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";

/// Redis's string2ull: string2ll, else strtoull over the whole string.
fn parse_u64(s: &[u8]) -> Option<u64> {
    if let Some(v) = crate::util::numtext::parse_i64(s) {
        return (v >= 0).then_some(v as u64);
    }
    let mut i = 0;
    while i < s.len() && matches!(s[i], b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r') {
        i += 1;
    }
    let mut neg = false;
    if i < s.len() && (s[i] == b'+' || s[i] == b'-') {
        neg = s[i] == b'-';
        i += 1;
    }
    if i >= s.len() {
        return None;
    }
    let mut v: u64 = 0;
    for &c in &s[i..] {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    Some(if neg { v.wrapping_neg() } else { v })
}

/// Parse an ID as Redis's streamGenericParseIDOrReply. `seq_given` non-None accepts `ms-*`
/// (and reports whether the sequence was given).
fn parse_id_generic(
    a: &[u8],
    missing_seq: u64,
    strict: bool,
    seq_given: Option<&mut bool>,
) -> Result<StreamId, Reply> {
    let bad = || Reply::error(INVALID_ID);
    if a.len() > 127 {
        return Err(bad());
    }
    // A C string: it ends at the first NUL.
    let a = match a.iter().position(|&b| b == 0) {
        Some(n) => &a[..n],
        None => a,
    };
    if strict && (a == b"-" || a == b"+") {
        return Err(bad());
    }
    let mut given = true;
    let id = if a == b"-" {
        StreamId::MIN
    } else if a == b"+" {
        StreamId::MAX
    } else {
        let (ms, seq) = match a.iter().position(|&b| b == b'-') {
            Some(d) => (&a[..d], Some(&a[d + 1..])),
            None => (a, None),
        };
        let ms = parse_u64(ms).ok_or_else(bad)?;
        let seq = match seq {
            Some(b"*") if seq_given.is_some() => {
                given = false;
                0
            }
            Some(s) => parse_u64(s).ok_or_else(bad)?,
            None => missing_seq,
        };
        StreamId::new(ms, seq)
    };
    if let Some(g) = seq_given {
        *g = given;
    }
    Ok(id)
}

fn parse_id(a: &[u8], missing_seq: u64) -> Result<StreamId, Reply> {
    parse_id_generic(a, missing_seq, false, None)
}

fn parse_strict_id(a: &[u8]) -> Result<StreamId, Reply> {
    parse_id_generic(a, 0, true, None)
}

/// A range bound: `(` makes it exclusive (and strict). Returns the ID and whether exclusive.
fn parse_interval(a: &[u8], missing_seq: u64) -> Result<(StreamId, bool), Reply> {
    if a.len() > 1 && a[0] == b'(' {
        Ok((parse_id_generic(&a[1..], missing_seq, true, None)?, true))
    } else {
        Ok((parse_id(a, missing_seq)?, false))
    }
}

fn int(a: &[u8]) -> Result<i64, Reply> {
    super::args::int(a)
}

fn int_or(a: &[u8], msg: &str) -> Result<i64, Reply> {
    crate::util::numtext::parse_i64(a).ok_or_else(|| Reply::error(format!("ERR {msg}")))
}

fn id_reply(id: StreamId) -> Reply {
    Reply::Bulk(id.to_bytes())
}

fn entry_reply(e: &crate::types::stream::Entry) -> Reply {
    Reply::Array(vec![
        id_reply(e.id),
        Reply::Array(e.items().map(Reply::bulk_slice).collect()),
    ])
}

/// The stream at `key` (`Ok(None)` if absent), WRONGTYPE otherwise.
fn get_stream<'d>(
    db: &'d mut DbHandle<'_, '_>,
    key: &[u8],
    count: bool,
) -> Result<Option<&'d mut Stream>, Reply> {
    let v = if count { db.read(key) } else { db.value(key) };
    match v {
        None => Ok(None),
        Some(Value::Stream(s)) => Ok(Some(s)),
        Some(_) => Err(Reply::error(WRONGTYPE)),
    }
}

fn node_limits(ctx: &Ctx) -> NodeLimits {
    NodeLimits {
        max_bytes: ctx.srv.config.int(dir::STREAM_NODE_MAX_BYTES).max(0) as usize,
        max_entries: ctx.srv.config.int(dir::STREAM_NODE_MAX_ENTRIES).max(0) as usize,
    }
}

/// XADD/XTRIM options (Redis's streamAddTrimArgs).
struct TrimArgs {
    trim: Option<Trim>,
    approx: bool,
    limit: u64,
    /// Position of the MAXLEN/MINID value (the `~` is right before it when approx).
    trim_arg: usize,
    no_mkstream: bool,
    id: Option<(StreamId, bool)>,
    /// Position of the ID argument (XADD).
    id_pos: usize,
}

fn parse_trim_args(ctx: &Ctx, a: &[Bytes], xadd: bool) -> Result<TrimArgs, Reply> {
    let mut t = TrimArgs {
        trim: None,
        approx: false,
        limit: 0,
        trim_arg: 0,
        no_mkstream: false,
        id: None,
        id_pos: a.len(),
    };
    let mut limit_given = false;
    let mut i = 2;
    while i < a.len() {
        let more = a.len() - 1 - i;
        let opt = &a[i];
        if xadd && &opt[..] == b"*" {
            break;
        } else if (eq(opt, "maxlen") || eq(opt, "minid")) && more > 0 {
            if t.trim.is_some() {
                return Err(Reply::error("ERR syntax error, MAXLEN and MINID options at the same time are not compatible"));
            }
            t.approx = false;
            let next = &a[i + 1];
            if more >= 2 && &next[..] == b"~" {
                t.approx = true;
                i += 1;
            } else if more >= 2 && &next[..] == b"=" {
                i += 1;
            }
            t.trim = Some(if eq(opt, "maxlen") {
                let n = int(&a[i + 1])?;
                if n < 0 {
                    return Err(Reply::error("ERR The MAXLEN argument must be >= 0."));
                }
                Trim::MaxLen(n as u64)
            } else {
                Trim::MinId(parse_strict_id(&a[i + 1])?)
            });
            i += 1;
            t.trim_arg = i;
        } else if eq(opt, "limit") && more > 0 {
            let n = int(&a[i + 1])?;
            if n < 0 {
                return Err(Reply::error("ERR The LIMIT argument must be >= 0."));
            }
            t.limit = n as u64;
            limit_given = true;
            i += 1;
        } else if xadd && eq(opt, "nomkstream") {
            t.no_mkstream = true;
        } else if xadd {
            let mut seq_given = true;
            let id = parse_id_generic(opt, 0, true, Some(&mut seq_given))?;
            t.id = Some((id, seq_given));
            break;
        } else {
            return Err(Reply::error(SYNTAX));
        }
        i += 1;
    }
    t.id_pos = i;
    if t.limit != 0 && t.trim.is_none() {
        return Err(Reply::error(
            "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy",
        ));
    }
    if !xadd && t.trim.is_none() {
        return Err(Reply::error(
            "ERR syntax error, XTRIM must be called with a trimming strategy",
        ));
    }
    if ctx.srv.aof.loading() {
        // Replayed commands carry the exact trim Redis did (see the rewrite below).
        t.limit = 0;
    } else if limit_given {
        if !t.approx {
            return Err(Reply::error(
                "ERR syntax error, LIMIT cannot be used without the special ~ option",
            ));
        }
    } else if t.approx {
        let per_node = ctx.srv.config.int(dir::STREAM_NODE_MAX_ENTRIES);
        let mut limit = per_node.saturating_mul(100);
        if limit <= 0 {
            limit = 10000;
        }
        t.limit = limit.min(1_000_000) as u64;
    } else {
        t.limit = 0;
    }
    Ok(t)
}

/// After an approximate trim, the command is logged with `=` and the exact result (the
/// stream's length, or its first ID), as Redis's streamRewriteTrimArgument.
fn rewrite_trim(argv: &mut [Bytes], s: &Stream, t: &TrimArgs) {
    argv[t.trim_arg - 1] = Bytes::from_static(b"=");
    argv[t.trim_arg] = match t.trim {
        Some(Trim::MaxLen(_)) => Bytes::from(s.length.to_string()),
        _ => s.edge_id(false).unwrap_or_default().to_bytes(),
    };
}

fn xadd(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let t = parse_trim_args(ctx, a, true)?;
    let field_pos = t.id_pos + 1;
    if a.len() < field_pos + 2 || (a.len() - field_pos) % 2 == 1 {
        return Err(crate::cmdspec::wrong_arity("xadd"));
    }
    if let Some((id, true)) = t.id {
        if id.is_zero() {
            return Err(Reply::error(
                "ERR The ID specified in XADD must be greater than 0-0",
            ));
        }
    }
    let limits = node_limits(ctx);
    let now = ctx.now_ms().max(0) as u64;
    let key = &a[1];
    let mut db = ctx.db();
    let exists = get_stream(&mut db, key, false)?.is_some();
    if !exists {
        if t.no_mkstream {
            return Ok(Reply::Null);
        }
        db.insert(key, Value::Stream(Box::default()));
    }
    let Ok(Some(s)) = get_stream(&mut db, key, false) else {
        return Err(Reply::error("ERR internal error: stream vanished"));
    };
    if s.last_id == StreamId::MAX {
        return Err(Reply::error(
            "ERR The stream has exhausted the last possible ID, unable to add more items",
        ));
    }
    let (given, seq_given) = match t.id {
        Some((id, sg)) => (Some(id), sg),
        None => (None, true),
    };
    let id =
        match s.next_id(given, seq_given, now) {
            Some(id) => id,
            None => return Err(Reply::error(
                "ERR The ID specified in XADD is equal or smaller than the target stream top item",
            )),
        };
    let total: usize = a[field_pos..].iter().map(|f| f.len()).sum();
    if total > crate::types::stream::LISTPACK_MAX_SIZE {
        return Err(Reply::error("ERR Elements are too large to be stored"));
    }
    s.append(id, &a[field_pos..], limits);
    let mut argv = a.to_vec();
    let mut trimmed = false;
    if let Some(how) = t.trim {
        trimmed = s.trim(how, t.approx, t.limit) > 0;
        if t.approx {
            rewrite_trim(&mut argv, s, &t);
        }
    }
    if t.id.is_none() || !seq_given {
        argv[t.id_pos] = id.to_bytes();
    }
    db.modified(key);
    db.notify(notify::STREAM, "xadd", key);
    if trimmed {
        db.notify(notify::STREAM, "xtrim", key);
    }
    ctx.dirty += 1;
    ctx.propagate_as(vec![argv]);
    Ok(id_reply(id))
}

fn xlen(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    match get_stream(&mut ctx.db(), &a[1], true)? {
        None => Ok(Reply::Int(0)),
        Some(s) => Ok(Reply::Int(s.length as i64)),
    }
}

fn xrange(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    range(ctx, a, false)
}

fn xrevrange(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    range(ctx, a, true)
}

fn range(ctx: &mut Ctx, a: &[Bytes], rev: bool) -> CmdResult {
    let (start_arg, end_arg) = if rev { (&a[3], &a[2]) } else { (&a[2], &a[3]) };
    let (mut start, sx) = parse_interval(start_arg, 0)?;
    if sx {
        match start.incr() {
            Some(s) => start = s,
            None => return Err(Reply::error("ERR invalid start ID for the interval")),
        }
    }
    let (mut end, ex) = parse_interval(end_arg, u64::MAX)?;
    if ex {
        match end.decr() {
            Some(e) => end = e,
            None => return Err(Reply::error("ERR invalid end ID for the interval")),
        }
    }
    let mut count: i64 = -1;
    let mut j = 4;
    while j < a.len() {
        if eq(&a[j], "count") && j + 1 < a.len() {
            count = int(&a[j + 1])?.max(0);
            j += 2;
        } else {
            return Err(Reply::error(SYNTAX));
        }
    }
    let mut db = ctx.db();
    let s = match get_stream(&mut db, &a[1], true)? {
        None => return Ok(Reply::Array(vec![])),
        Some(s) => s,
    };
    if count == 0 {
        return Ok(Reply::NullArray);
    }
    let limit = if count < 0 {
        usize::MAX
    } else {
        count as usize
    };
    let mut out = Vec::new();
    s.for_each(start, end, rev, |e| {
        out.push(entry_reply(e));
        out.len() < limit
    });
    Ok(Reply::Array(out))
}

fn xdel(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let key = &a[1];
    let mut db = ctx.db();
    if get_stream(&mut db, key, false)?.is_none() {
        return Ok(Reply::Int(0));
    }
    let mut ids = Vec::with_capacity(a.len() - 2);
    for x in &a[2..] {
        ids.push(parse_strict_id(x)?);
    }
    let Ok(Some(s)) = get_stream(&mut db, key, false) else {
        return Ok(Reply::Int(0));
    };
    let deleted = s.delete_ids(&ids);
    if deleted > 0 {
        db.modified(key);
        db.notify(notify::STREAM, "xdel", key);
        ctx.dirty += deleted;
    }
    Ok(Reply::Int(deleted as i64))
}

fn xtrim(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let t = parse_trim_args(ctx, a, false)?;
    let key = &a[1];
    let mut db = ctx.db();
    let s = match get_stream(&mut db, key, false)? {
        None => return Ok(Reply::Int(0)),
        Some(s) => s,
    };
    let Some(how) = t.trim else {
        return Ok(Reply::Int(0));
    };
    let deleted = s.trim(how, t.approx, t.limit);
    if deleted > 0 {
        let mut argv = a.to_vec();
        if t.approx {
            rewrite_trim(&mut argv, s, &t);
        }
        db.notify(notify::STREAM, "xtrim", key);
        db.modified(key);
        ctx.dirty += deleted;
        ctx.propagate_as(vec![argv]);
    }
    Ok(Reply::Int(deleted as i64))
}

fn xsetid(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let id = parse_strict_id(&a[2])?;
    let mut entries_added: i64 = -1;
    let mut max_xdel = StreamId::MIN;
    let mut i = 3;
    while i < a.len() {
        let more = a.len() - 1 - i;
        if eq(&a[i], "entriesadded") && more > 0 {
            entries_added = int(&a[i + 1])?;
            if entries_added < 0 {
                return Err(Reply::error("ERR entries_added must be positive"));
            }
            i += 2;
        } else if eq(&a[i], "maxdeletedid") && more > 0 {
            max_xdel = parse_strict_id(&a[i + 1])?;
            if id < max_xdel {
                return Err(Reply::error("ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id"));
            }
            i += 2;
        } else {
            return Err(Reply::error(SYNTAX));
        }
    }
    let key = &a[1];
    let mut db = ctx.db();
    let s = match get_stream(&mut db, key, false)? {
        None => return Err(Reply::error("ERR no such key")),
        Some(s) => s,
    };
    if s.length > 0 {
        let maxid = s.edge_id(true).unwrap_or_default();
        if id < maxid {
            return Err(Reply::error(
                "ERR The ID specified in XSETID is smaller than the target stream top item",
            ));
        }
        if entries_added != -1 && s.length > entries_added as u64 {
            return Err(Reply::error("ERR The entries_added specified in XSETID is smaller than the target stream length"));
        }
    }
    s.last_id = id;
    if entries_added != -1 {
        s.entries_added = entries_added as u64;
    }
    if !max_xdel.is_zero() {
        s.max_deleted_entry_id = max_xdel;
    }
    db.notify(notify::STREAM, "xsetid", key);
    ctx.dirty += 1;
    Ok(Reply::Ok)
}

// ---------------------------------------------------------------------------------------
// XREAD / XREADGROUP

/// Redis's default COUNT for a blocked XREAD with none (XREAD_BLOCKED_DEFAULT_COUNT).
const BLOCKED_DEFAULT_COUNT: i64 = 1000;

struct ReadArgs {
    block_ms: Option<i64>,
    count: i64,
    group: Option<(Bytes, Bytes)>,
    noack: bool,
    keys: Vec<Bytes>,
    id_args: Vec<Bytes>,
}

fn parse_read(ctx: &Ctx, a: &[Bytes], group_cmd: bool) -> Result<ReadArgs, Reply> {
    let mut r = ReadArgs {
        block_ms: None,
        count: 0,
        group: None,
        noack: false,
        keys: Vec::new(),
        id_args: Vec::new(),
    };
    let mut streams_arg = 0;
    let mut i = 1;
    while i < a.len() {
        let more = a.len() - i - 1;
        let o = &a[i];
        if eq(o, "block") && more > 0 {
            if ctx.client.in_script {
                let name = String::from_utf8_lossy(&a[0]).into_owned();
                return Err(Reply::error(format!(
                    "ERR {name} command is not allowed with BLOCK option from scripts"
                )));
            }
            i += 1;
            let t = crate::util::numtext::parse_i64(&a[i])
                .ok_or_else(|| Reply::error("ERR timeout is not an integer or out of range"))?;
            if t < 0 {
                return Err(Reply::error("ERR timeout is negative"));
            }
            if t > 0 && t > i64::MAX - ctx.now_ms() {
                return Err(Reply::error("ERR timeout is out of range"));
            }
            r.block_ms = Some(t);
        } else if eq(o, "count") && more > 0 {
            i += 1;
            r.count = int(&a[i])?.max(0);
        } else if eq(o, "streams") && more > 0 {
            streams_arg = i + 1;
            let n = a.len() - streams_arg;
            if !n.is_multiple_of(2) {
                return Err(Reply::error("ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified."));
            }
            r.keys = a[streams_arg..streams_arg + n / 2].to_vec();
            r.id_args = a[streams_arg + n / 2..].to_vec();
            break;
        } else if eq(o, "group") && more >= 2 {
            if !group_cmd {
                return Err(Reply::error(
                    "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            r.group = Some((a[i + 1].clone(), a[i + 2].clone()));
            i += 2;
        } else if eq(o, "noack") {
            if !group_cmd {
                return Err(Reply::error(
                    "ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            r.noack = true;
        } else {
            return Err(Reply::error(SYNTAX));
        }
        i += 1;
    }
    if streams_arg == 0 {
        return Err(Reply::error(SYNTAX));
    }
    if group_cmd && r.group.is_none() {
        return Err(Reply::error("ERR Missing GROUP option for XREADGROUP"));
    }
    Ok(r)
}

fn xread(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    read_cmd(ctx, a, false)
}

fn xreadgroup(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    read_cmd(ctx, a, true)
}

/// Commands a group read logs: XCLAIM per delivered entry, XGROUP SETID after a NOACK read,
/// XGROUP CREATECONSUMER for a consumer a NOACK read created.
struct GroupRead<'k> {
    key: &'k [u8],
    group: &'k Bytes,
    consumer: &'k Bytes,
    noack: bool,
    now: i64,
}

fn xclaim_cmd(key: &[u8], group: &[u8], id: StreamId, g: &Group) -> Vec<Bytes> {
    let nack = &g.pel[&id];
    vec![
        Bytes::from_static(b"XCLAIM"),
        Bytes::copy_from_slice(key),
        Bytes::copy_from_slice(group),
        nack.consumer.clone(),
        Bytes::from_static(b"0"),
        id.to_bytes(),
        Bytes::from_static(b"TIME"),
        Bytes::from(nack.delivery_time.to_string()),
        Bytes::from_static(b"RETRYCOUNT"),
        Bytes::from(nack.delivery_count.to_string()),
        Bytes::from_static(b"FORCE"),
        Bytes::from_static(b"JUSTID"),
        Bytes::from_static(b"LASTID"),
        g.last_id.to_bytes(),
    ]
}

fn setid_cmd(key: &[u8], group: &[u8], g: &Group) -> Vec<Bytes> {
    vec![
        Bytes::from_static(b"XGROUP"),
        Bytes::from_static(b"SETID"),
        Bytes::copy_from_slice(key),
        Bytes::copy_from_slice(group),
        g.last_id.to_bytes(),
        Bytes::from_static(b"ENTRIESREAD"),
        Bytes::from(g.entries_read.to_string()),
    ]
}

/// Deliver entries after `after` (exclusive) to a group's consumer (Redis's
/// streamReplyWithRange with a group): advances the group, adds PEL entries unless NOACK,
/// and appends the commands to log to `log`.
fn deliver_new(
    s: &mut Stream,
    after: StreamId,
    count: usize,
    gr: &GroupRead,
    log: &mut Vec<Vec<Bytes>>,
) -> Vec<Reply> {
    let Some(start) = after.incr() else {
        return Vec::new();
    };
    let mut ids = Vec::new();
    let mut out = Vec::new();
    s.for_each(start, StreamId::MAX, false, |e| {
        ids.push(e.id);
        out.push(entry_reply(e));
        count == 0 || out.len() < count
    });
    let mut groups = std::mem::take(&mut s.groups);
    let mut propagate_last_id = false;
    if let Some(g) = groups.get_mut(&gr.group[..]) {
        for id in ids {
            if id > g.last_id {
                s.advance_group(g, id);
                if gr.noack {
                    propagate_last_id = true;
                }
            }
            if !gr.noack {
                g.assign(id, gr.consumer, gr.now, Some(1));
                log.push(xclaim_cmd(gr.key, gr.group, id, g));
            }
        }
        if propagate_last_id {
            log.push(setid_cmd(gr.key, gr.group, g));
        }
    }
    s.groups = groups;
    out
}

/// A consumer's own history from `start` (Redis's streamReplyWithRangeFromConsumerPEL):
/// entries deleted since show as `[id, nil]`; delivered ones count a delivery.
fn deliver_history(s: &mut Stream, start: StreamId, count: usize, gr: &GroupRead) -> Vec<Reply> {
    let mut groups = std::mem::take(&mut s.groups);
    let mut out = Vec::new();
    if let Some(g) = groups.get_mut(&gr.group[..]) {
        let ids: Vec<StreamId> = match g.consumers.get(&gr.consumer[..]) {
            Some(c) => c
                .pel
                .range(start..)
                .take(if count == 0 { usize::MAX } else { count })
                .copied()
                .collect(),
            None => Vec::new(),
        };
        for id in ids {
            match s.get(id) {
                Some(e) => {
                    out.push(entry_reply(e));
                    if let Some(n) = g.pel.get_mut(&id) {
                        n.delivery_time = gr.now;
                        n.delivery_count = n.delivery_count.wrapping_add(1);
                    }
                }
                None => out.push(Reply::Array(vec![id_reply(id), Reply::NullArray])),
            }
        }
    }
    s.groups = groups;
    out
}

/// Look up (refreshing its seen time) or create a group's consumer; true if created.
fn touch_consumer(g: &mut Group, name: &[u8], now: i64) -> bool {
    match g.consumers.get_mut(name) {
        Some(c) => {
            c.seen_time = now;
            false
        }
        None => g.create_consumer(name, now),
    }
}

fn read_reply(resp: Resp, items: Vec<(Bytes, Vec<Reply>)>) -> Reply {
    if resp == Resp::V2 {
        Reply::Array(
            items
                .into_iter()
                .map(|(k, v)| Reply::Array(vec![Reply::Bulk(k), Reply::Array(v)]))
                .collect(),
        )
    } else {
        Reply::Map(
            items
                .into_iter()
                .map(|(k, v)| (Reply::Bulk(k), Reply::Array(v)))
                .collect(),
        )
    }
}

fn read_cmd(ctx: &mut Ctx, a: &[Bytes], group_cmd: bool) -> CmdResult {
    let r = parse_read(ctx, a, group_cmd)?;
    let now = ctx.now_ms();
    let mut ids: Vec<StreamId> = Vec::with_capacity(r.keys.len());
    {
        let mut db = ctx.db();
        for (key, idarg) in r.keys.iter().zip(&r.id_args) {
            let s = get_stream(&mut db, key, true)?;
            if let Some((gname, _)) = &r.group {
                if !s
                    .as_ref()
                    .is_some_and(|s| s.groups.contains_key(&gname[..]))
                {
                    return Err(Reply::error(format!(
                        "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
                        String::from_utf8_lossy(key),
                        String::from_utf8_lossy(gname)
                    )));
                }
            }
            if &idarg[..] == b"$" {
                if group_cmd {
                    return Err(Reply::error("ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set."));
                }
                ids.push(s.map_or(StreamId::MIN, |s| s.last_id));
                continue;
            } else if &idarg[..] == b">" {
                if !group_cmd {
                    return Err(Reply::error("ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option."));
                }
                ids.push(StreamId::MAX);
                continue;
            }
            ids.push(parse_strict_id(idarg)?);
        }
    }
    let mut log: Vec<Vec<Bytes>> = Vec::new();
    let mut items: Vec<(Bytes, Vec<Reply>)> = Vec::new();
    let count = r.count as usize;
    for (i, key) in r.keys.iter().enumerate() {
        let mut db = ctx.db();
        let Ok(Some(s)) = get_stream(&mut db, key, false) else {
            continue;
        };
        let gt = ids[i];
        match &r.group {
            Some((gname, cname)) => {
                let history = gt != StreamId::MAX;
                let last_valid = s.edge_id(true);
                let group_last = s.groups.get(&gname[..]).map(|g| g.last_id);
                let serve =
                    history || matches!((last_valid, group_last), (Some(m), Some(l)) if m > l);
                if !serve {
                    continue;
                }
                let mut created = false;
                if let Some(g) = s.groups.get_mut(&gname[..]) {
                    created = touch_consumer(g, cname, now);
                }
                if created {
                    db.notify(notify::STREAM, "xgroup-createconsumer", key);
                    ctx.dirty += 1;
                    if r.noack {
                        log.push(vec![
                            Bytes::from_static(b"XGROUP"),
                            Bytes::from_static(b"CREATECONSUMER"),
                            key.clone(),
                            gname.clone(),
                            cname.clone(),
                        ]);
                    }
                }
                let mut db = ctx.db();
                let Ok(Some(s)) = get_stream(&mut db, key, false) else {
                    continue;
                };
                let gr = GroupRead {
                    key,
                    group: gname,
                    consumer: cname,
                    noack: r.noack,
                    now,
                };
                let entries = if history {
                    let Some(start) = gt.incr() else {
                        items.push((key.clone(), Vec::new()));
                        ctx.dirty += 1;
                        continue;
                    };
                    deliver_history(s, start, count, &gr)
                } else {
                    let after = group_last.unwrap_or_default();
                    deliver_new(s, after, count, &gr, &mut log)
                };
                items.push((key.clone(), entries));
                ctx.dirty += 1;
            }
            None => {
                let Some(maxid) = s.edge_id(true) else {
                    continue;
                };
                if maxid <= gt {
                    continue;
                }
                let Some(start) = gt.incr() else { continue };
                let mut out = Vec::new();
                s.for_each(start, StreamId::MAX, false, |e| {
                    out.push(entry_reply(e));
                    count == 0 || out.len() < count
                });
                items.push((key.clone(), out));
            }
        }
    }
    if group_cmd {
        // XREADGROUP is never logged as itself (see the module comment).
        ctx.propagate_as(log);
    }
    if !items.is_empty() {
        return Ok(read_reply(ctx.client.resp, items));
    }
    let Some(block_ms) = r.block_ms else {
        return Ok(Reply::NullArray);
    };
    if ctx.in_exec {
        return Ok(Reply::NullArray);
    }
    // The waiter's arguments: name, protocol, count, NOACK, group, consumer, then key/ID
    // pairs with `$` resolved.
    let mut wargs = vec![
        a[0].clone(),
        Bytes::from_static(if ctx.client.resp == Resp::V2 {
            b"2"
        } else {
            b"3"
        }),
        Bytes::from(
            if r.count > 0 {
                r.count
            } else {
                BLOCKED_DEFAULT_COUNT
            }
            .to_string(),
        ),
        Bytes::from_static(if r.noack { b"1" } else { b"0" }),
    ];
    match &r.group {
        Some((g, c)) => {
            wargs.push(g.clone());
            wargs.push(c.clone());
        }
        None => {
            wargs.push(Bytes::new());
            wargs.push(Bytes::new());
        }
    }
    for (k, id) in r.keys.iter().zip(&ids) {
        wargs.push(k.clone());
        wargs.push(Bytes::copy_from_slice(&id.encode()));
    }
    ctx.block = Some(BlockRequest {
        keys: r.keys.clone(),
        timeout_ms: block_ms as u64,
        serve: serve_read,
        on_timeout: Reply::NullArray,
        args: Some(wargs),
        serve_each: true,
    });
    Ok(Reply::NoReply)
}

/// Serve a blocked XREAD / XREADGROUP from `key` (Redis's serveClientsBlockedOnStreamKey).
fn serve_read(db: &mut DbHandle, w: &Waiter, key: &[u8]) -> Option<(Reply, Vec<Vec<Bytes>>)> {
    let a = &w.args;
    if a.len() < 6 {
        return None;
    }
    let resp = if &a[1][..] == b"2" {
        Resp::V2
    } else {
        Resp::V3
    };
    let count = crate::util::numtext::parse_i64(&a[2]).unwrap_or(0).max(0) as usize;
    let noack = &a[3][..] == b"1";
    let group = (!a[4].is_empty() || !a[5].is_empty()).then(|| (a[4].clone(), a[5].clone()));
    let mut gt = a[6..]
        .chunks(2)
        .find(|p| p.len() == 2 && &p[0][..] == key)
        .and_then(|p| StreamId::decode(&p[1]))?;
    let now = db.now_ms();
    let s = match db.value(key) {
        Some(Value::Stream(s)) => s,
        _ => {
            // The key is gone or is no stream: a group reader learns it at once.
            return group.map(|_| {
                (
                    Reply::error("UNBLOCKED the stream key no longer exists"),
                    Vec::new(),
                )
            });
        }
    };
    let k = Bytes::copy_from_slice(key);
    let Some((gname, cname)) = group else {
        if s.last_id <= gt {
            return None;
        }
        let start = gt.incr()?;
        let mut out = Vec::new();
        s.for_each(start, StreamId::MAX, false, |e| {
            out.push(entry_reply(e));
            count == 0 || out.len() < count
        });
        return Some((read_reply(resp, vec![(k, out)]), Vec::new()));
    };
    let Some(g) = s.groups.get_mut(&gname[..]) else {
        return Some((
            Reply::error("NOGROUP the consumer group this client was blocked on no longer exists"),
            Vec::new(),
        ));
    };
    gt = g.last_id;
    if s.last_id <= gt {
        return None;
    }
    let mut log = Vec::new();
    let created = touch_consumer(g, &cname, now);
    if created && noack {
        log.push(vec![
            Bytes::from_static(b"XGROUP"),
            Bytes::from_static(b"CREATECONSUMER"),
            k.clone(),
            gname.clone(),
            cname.clone(),
        ]);
    }
    let gr = GroupRead {
        key,
        group: &gname,
        consumer: &cname,
        noack,
        now,
    };
    let out = deliver_new(s, gt, count, &gr, &mut log);
    if created {
        db.notify(notify::STREAM, "xgroup-createconsumer", key);
    }
    Some((read_reply(resp, vec![(k, out)]), log))
}

// ---------------------------------------------------------------------------------------
// Consumer groups

fn help(name: &[u8], lines: &[&str]) -> Reply {
    let cmd = String::from_utf8_lossy(name).to_ascii_uppercase();
    let mut out = vec![Reply::StatusOwned(format!(
        "{cmd} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    ))];
    out.extend(lines.iter().map(|l| Reply::StatusOwned(l.to_string())));
    out.push(Reply::Status("HELP"));
    out.push(Reply::Status("    Print this help."));
    Reply::Array(out)
}

fn subcommand_syntax(a: &[Bytes]) -> Reply {
    Reply::error(format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {} HELP.",
        String::from_utf8_lossy(&a[1][..a[1].len().min(128)]),
        String::from_utf8_lossy(&a[0]).to_ascii_uppercase()
    ))
}

/// Arity of a container's subcommand (Redis checks it before the subcommand runs), or None
/// for an unknown subcommand.
fn sub_arity(cmd: &str, sub: &str) -> Option<i32> {
    Some(match (cmd, sub) {
        ("xgroup", "create") | ("xgroup", "setid") => -5,
        ("xgroup", "destroy") => 4,
        ("xgroup", "createconsumer") | ("xgroup", "delconsumer") => 5,
        ("xinfo", "consumers") => 4,
        ("xinfo", "groups") => 3,
        ("xinfo", "stream") => -3,
        (_, "help") => 2,
        _ => return None,
    })
}

/// Redis's checks for a container's subcommand: unknown, then arity.
fn check_sub(cmd: &str, a: &[Bytes]) -> Result<String, Reply> {
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    let Some(arity) = sub_arity(cmd, &sub) else {
        return Err(Reply::error(format!(
            "ERR unknown subcommand '{}'. Try {} HELP.",
            String::from_utf8_lossy(&a[1][..a[1].len().min(128)]),
            cmd.to_ascii_uppercase()
        )));
    };
    if !crate::cmdspec::arity_ok(arity, a.len()) {
        return Err(crate::cmdspec::wrong_arity(&format!("{cmd}|{sub}")));
    }
    Ok(sub)
}

fn no_group(group: &[u8], key: &[u8]) -> Reply {
    Reply::error(format!(
        "NOGROUP No such consumer group '{}' for key name '{}'",
        String::from_utf8_lossy(group),
        String::from_utf8_lossy(key)
    ))
}

fn xgroup(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let sub = check_sub("xgroup", a)?;
    let mut mkstream = false;
    let mut entries_read = INVALID_ENTRIES_READ;
    if a.len() >= 4 {
        let create = sub == "create";
        let setid = sub == "setid";
        let mut i = 5;
        while i < a.len() {
            if create && eq(&a[i], "mkstream") {
                mkstream = true;
                i += 1;
            } else if (create || setid) && eq(&a[i], "entriesread") && i + 1 < a.len() {
                entries_read = int(&a[i + 1])?;
                if entries_read < 0 && entries_read != INVALID_ENTRIES_READ {
                    return Err(Reply::error(
                        "ERR value for ENTRIESREAD must be positive or -1",
                    ));
                }
                i += 2;
            } else {
                return Err(subcommand_syntax(a));
            }
        }
    }
    if sub == "help" {
        return Ok(help(
            &a[0],
            &[
                "CREATE <key> <groupname> <id|$> [option]",
                "    Create a new consumer group. Options are:",
                "    * MKSTREAM",
                "      Create the empty stream if it does not exist.",
                "    * ENTRIESREAD entries_read",
                "      Set the group's entries_read counter (internal use).",
                "CREATECONSUMER <key> <groupname> <consumer>",
                "    Create a new consumer in the specified group.",
                "DELCONSUMER <key> <groupname> <consumer>",
                "    Remove the specified consumer.",
                "DESTROY <key> <groupname>",
                "    Remove the specified group.",
                "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
                "    Set the current group ID and entries_read counter.",
            ],
        ));
    }
    let key = &a[2];
    let gname = &a[3];
    let now = ctx.now_ms();
    let mut db = ctx.db();
    let exists = get_stream(&mut db, key, false)?.map(|s| s.groups.contains_key(&gname[..]));
    if !mkstream {
        let Some(has_group) = exists else {
            return Err(Reply::error("ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically."));
        };
        if !has_group && matches!(sub.as_str(), "setid" | "createconsumer" | "delconsumer") {
            return Err(no_group(gname, key));
        }
    }
    match sub.as_str() {
        "create" if a.len() <= 8 => {
            let id = if &a[4][..] == b"$" {
                match get_stream(&mut db, key, false) {
                    Ok(Some(s)) => s.last_id,
                    _ => StreamId::MIN,
                }
            } else {
                parse_strict_id(&a[4])?
            };
            if exists.is_none() {
                db.insert(key, Value::Stream(Box::default()));
                db.modified(key);
            }
            let Ok(Some(s)) = get_stream(&mut db, key, false) else {
                return Err(Reply::error("ERR internal error: stream vanished"));
            };
            if s.groups.contains_key(&gname[..]) {
                return Err(Reply::error("BUSYGROUP Consumer Group name already exists"));
            }
            s.groups.insert(gname.clone(), Group::new(id, entries_read));
            db.notify(notify::STREAM, "xgroup-create", key);
            ctx.dirty += 1;
            Ok(Reply::Ok)
        }
        "setid" if a.len() == 5 || a.len() == 7 => {
            let Ok(Some(s)) = get_stream(&mut db, key, false) else {
                return Err(no_group(gname, key));
            };
            let id = if &a[4][..] == b"$" {
                s.last_id
            } else {
                parse_id(&a[4], 0)?
            };
            let Some(g) = s.groups.get_mut(&gname[..]) else {
                return Err(no_group(gname, key));
            };
            g.last_id = id;
            g.entries_read = entries_read;
            db.notify(notify::STREAM, "xgroup-setid", key);
            ctx.dirty += 1;
            Ok(Reply::Ok)
        }
        "destroy" if a.len() == 4 => {
            let Ok(Some(s)) = get_stream(&mut db, key, false) else {
                return Ok(Reply::Int(0));
            };
            if s.groups.remove(&gname[..]).is_none() {
                return Ok(Reply::Int(0));
            }
            db.notify(notify::STREAM, "xgroup-destroy", key);
            // Wakes XREADGROUP clients blocked on the group, to tell them.
            db.modified(key);
            ctx.dirty += 1;
            Ok(Reply::Int(1))
        }
        "createconsumer" if a.len() == 5 => {
            let Ok(Some(s)) = get_stream(&mut db, key, false) else {
                return Err(no_group(gname, key));
            };
            let Some(g) = s.groups.get_mut(&gname[..]) else {
                return Err(no_group(gname, key));
            };
            let created = g.create_consumer(&a[4], now);
            if created {
                db.notify(notify::STREAM, "xgroup-createconsumer", key);
                ctx.dirty += 1;
            }
            Ok(Reply::Int(i64::from(created)))
        }
        "delconsumer" if a.len() == 5 => {
            let Ok(Some(s)) = get_stream(&mut db, key, false) else {
                return Err(no_group(gname, key));
            };
            let Some(g) = s.groups.get_mut(&gname[..]) else {
                return Err(no_group(gname, key));
            };
            let pending = match g.delete_consumer(&a[4]) {
                Some(n) => {
                    db.notify(notify::STREAM, "xgroup-delconsumer", key);
                    ctx.dirty += 1;
                    n
                }
                None => 0,
            };
            Ok(Reply::Int(pending as i64))
        }
        _ => Err(subcommand_syntax(a)),
    }
}

fn xack(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let key = &a[1];
    let mut db = ctx.db();
    let has_group =
        get_stream(&mut db, key, true)?.is_some_and(|s| s.groups.contains_key(&a[2][..]));
    if !has_group {
        return Ok(Reply::Int(0));
    }
    let mut ids = Vec::with_capacity(a.len() - 3);
    for x in &a[3..] {
        ids.push(parse_strict_id(x)?);
    }
    let Ok(Some(s)) = get_stream(&mut db, key, false) else {
        return Ok(Reply::Int(0));
    };
    let Some(g) = s.groups.get_mut(&a[2][..]) else {
        return Ok(Reply::Int(0));
    };
    let mut acked = 0;
    for id in ids {
        if g.ack(&id) {
            acked += 1;
        }
    }
    ctx.dirty += acked;
    Ok(Reply::Int(acked as i64))
}

fn xpending(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let justinfo = a.len() == 3;
    let key = &a[1];
    let gname = &a[2];
    if a.len() != 3 && (a.len() < 6 || a.len() > 9) {
        return Err(Reply::error(SYNTAX));
    }
    let mut start = StreamId::MIN;
    let mut end = StreamId::MAX;
    let mut count: i64 = 0;
    let mut minidle: i64 = 0;
    let mut consumer: Option<&Bytes> = None;
    if a.len() >= 6 {
        let mut si = 3;
        if eq(&a[3], "idle") {
            minidle = int(&a[4])?;
            if a.len() < 8 {
                return Err(Reply::error(SYNTAX));
            }
            si += 2;
        }
        count = int(&a[si + 2])?.max(0);
        let (s, sx) = parse_interval(&a[si], 0)?;
        start = s;
        if sx {
            match start.incr() {
                Some(s) => start = s,
                None => return Err(Reply::error("ERR invalid start ID for the interval")),
            }
        }
        let (e, ex) = parse_interval(&a[si + 1], u64::MAX)?;
        end = e;
        if ex {
            match end.decr() {
                Some(e) => end = e,
                None => return Err(Reply::error("ERR invalid end ID for the interval")),
            }
        }
        if si + 3 < a.len() {
            consumer = Some(&a[si + 3]);
        }
    }
    let now = ctx.now_ms();
    let mut db = ctx.db();
    let s = get_stream(&mut db, key, true)?;
    let Some(g) = s.and_then(|s| s.groups.get_mut(&gname[..])) else {
        return Err(Reply::error(format!(
            "NOGROUP No such key '{}' or consumer group '{}'",
            String::from_utf8_lossy(key),
            String::from_utf8_lossy(gname)
        )));
    };
    if justinfo {
        let mut out = vec![Reply::Int(g.pel.len() as i64)];
        match (g.pel.keys().next(), g.pel.keys().next_back()) {
            (Some(first), Some(last)) => {
                out.push(id_reply(*first));
                out.push(id_reply(*last));
                out.push(Reply::Array(
                    g.consumers
                        .iter()
                        .filter(|(_, c)| !c.pel.is_empty())
                        .map(|(n, c)| {
                            Reply::Array(vec![
                                Reply::Bulk(n.clone()),
                                Reply::Bulk(Bytes::from(c.pel.len().to_string())),
                            ])
                        })
                        .collect(),
                ));
            }
            _ => {
                out.push(Reply::Null);
                out.push(Reply::Null);
                out.push(Reply::NullArray);
            }
        }
        return Ok(Reply::Array(out));
    }
    let ids: Vec<StreamId> = match consumer {
        Some(c) => match g.consumers.get(&c[..]) {
            None => return Ok(Reply::Array(vec![])),
            Some(c) => {
                if start > end {
                    Vec::new()
                } else {
                    c.pel.range(start..=end).copied().collect()
                }
            }
        },
        None => {
            if start > end {
                Vec::new()
            } else {
                g.pel.range(start..=end).map(|(k, _)| *k).collect()
            }
        }
    };
    let mut out = Vec::new();
    for id in ids {
        if count == 0 {
            break;
        }
        let Some(n) = g.pel.get(&id) else { continue };
        if minidle != 0 && now.saturating_sub(n.delivery_time) < minidle {
            continue;
        }
        count -= 1;
        out.push(Reply::Array(vec![
            id_reply(id),
            Reply::Bulk(n.consumer.clone()),
            Reply::Int(now.saturating_sub(n.delivery_time).max(0)),
            Reply::Int(n.delivery_count as i64),
        ]));
    }
    Ok(Reply::Array(out))
}

fn no_key_or_group(key: &[u8], group: &[u8]) -> Reply {
    Reply::error(format!(
        "NOGROUP No such key '{}' or consumer group '{}'",
        String::from_utf8_lossy(key),
        String::from_utf8_lossy(group)
    ))
}

fn xclaim(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let key = &a[1];
    let gname = &a[2];
    let cname = &a[3];
    {
        let mut db = ctx.db();
        let has =
            get_stream(&mut db, key, true)?.is_some_and(|s| s.groups.contains_key(&gname[..]));
        if !has {
            return Err(no_key_or_group(key, gname));
        }
    }
    let minidle = int_or(&a[4], "Invalid min-idle-time argument for XCLAIM")?.max(0);
    let mut ids = Vec::new();
    let mut j = 5;
    while j < a.len() {
        match parse_strict_id(&a[j]) {
            Ok(id) => ids.push((id, j)),
            Err(_) => break,
        }
        j += 1;
    }
    let now = ctx.now_ms();
    let mut last_id = StreamId::MIN;
    let mut force = false;
    let mut justid = false;
    let mut retrycount: i64 = -1;
    let mut deliverytime: i64 = -1;
    while j < a.len() {
        let more = a.len() - 1 - j;
        let opt = &a[j];
        if eq(opt, "force") {
            force = true;
        } else if eq(opt, "justid") {
            justid = true;
        } else if eq(opt, "idle") && more > 0 {
            j += 1;
            deliverytime = int_or(&a[j], "Invalid IDLE option argument for XCLAIM")?;
            deliverytime = now.wrapping_sub(deliverytime);
        } else if eq(opt, "time") && more > 0 {
            j += 1;
            deliverytime = int_or(&a[j], "Invalid TIME option argument for XCLAIM")?;
        } else if eq(opt, "retrycount") && more > 0 {
            j += 1;
            retrycount = int_or(&a[j], "Invalid RETRYCOUNT option argument for XCLAIM")?;
        } else if eq(opt, "lastid") && more > 0 {
            j += 1;
            last_id = parse_strict_id(&a[j])?;
        } else {
            return Err(Reply::error(format!(
                "ERR Unrecognized XCLAIM option '{}'",
                String::from_utf8_lossy(opt)
            )));
        }
        j += 1;
    }
    if deliverytime != -1 {
        if deliverytime < 0 || deliverytime > now {
            deliverytime = now;
        }
    } else {
        deliverytime = now;
    }
    let mut db = ctx.db();
    let Ok(Some(s)) = get_stream(&mut db, key, false) else {
        return Err(no_key_or_group(key, gname));
    };
    let mut groups = std::mem::take(&mut s.groups);
    let Some(g) = groups.get_mut(&gname[..]) else {
        s.groups = groups;
        return Err(no_key_or_group(key, gname));
    };
    let mut propagate_last_id = false;
    if last_id > g.last_id {
        g.last_id = last_id;
        propagate_last_id = true;
    }
    let mut log = Vec::new();
    let mut out = Vec::new();
    let mut dirty = 0;
    let mut consumer_ready = false;
    let mut created = false;
    for (id, _) in ids {
        let pending = g.pel.contains_key(&id);
        let Some(entry) = s.get(id) else {
            if pending {
                log.push(xclaim_cmd(key, gname, id, g));
                propagate_last_id = false;
                dirty += 1;
                g.ack(&id);
            }
            continue;
        };
        if !pending && !force {
            continue;
        }
        if pending && minidle != 0 {
            if let Some(n) = g.pel.get(&id) {
                if now.saturating_sub(n.delivery_time) < minidle {
                    continue;
                }
            }
        }
        if !consumer_ready {
            created = touch_consumer(g, cname, now);
            consumer_ready = true;
        }
        let old_count = g.pel.get(&id).map_or(0, |n| n.delivery_count);
        let new_count = if retrycount >= 0 {
            retrycount as u64
        } else if !justid {
            old_count.wrapping_add(1)
        } else {
            old_count
        };
        g.assign(id, cname, deliverytime, Some(new_count));
        if justid {
            out.push(id_reply(id));
        } else {
            out.push(entry_reply(entry));
        }
        log.push(xclaim_cmd(key, gname, id, g));
        propagate_last_id = false;
        dirty += 1;
    }
    if propagate_last_id {
        log.push(setid_cmd(key, gname, g));
        dirty += 1;
    }
    s.groups = groups;
    if created {
        db.notify(notify::STREAM, "xgroup-createconsumer", key);
        dirty += 1;
    }
    ctx.dirty += dirty;
    ctx.propagate_as(log);
    Ok(Reply::Array(out))
}

fn xautoclaim(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let key = &a[1];
    let gname = &a[2];
    let cname = &a[3];
    let minidle = int_or(&a[4], "Invalid min-idle-time argument for XAUTOCLAIM")?.max(0);
    let (mut start, sx) = parse_interval(&a[5], 0)?;
    if sx {
        match start.incr() {
            Some(s) => start = s,
            None => return Err(Reply::error("ERR invalid start ID for the interval")),
        }
    }
    let mut count: i64 = 100;
    let mut justid = false;
    let mut j = 6;
    while j < a.len() {
        let more = a.len() - 1 - j;
        if eq(&a[j], "count") && more > 0 {
            let max_count = i64::MAX / 16;
            count = match crate::util::numtext::parse_i64(&a[j + 1]) {
                Some(c) if (1..=max_count).contains(&c) => c,
                _ => return Err(Reply::error("ERR COUNT must be > 0")),
            };
            j += 1;
        } else if eq(&a[j], "justid") {
            justid = true;
        } else {
            return Err(Reply::error(SYNTAX));
        }
        j += 1;
    }
    let now = ctx.now_ms();
    let mut db = ctx.db();
    let s = get_stream(&mut db, key, true)?;
    let Some(s) = s.filter(|s| s.groups.contains_key(&gname[..])) else {
        return Err(no_key_or_group(key, gname));
    };
    let mut groups = std::mem::take(&mut s.groups);
    let Some(g) = groups.get_mut(&gname[..]) else {
        s.groups = groups;
        return Err(no_key_or_group(key, gname));
    };
    let mut attempts = count.saturating_mul(10);
    let mut out = Vec::new();
    let mut deleted = Vec::new();
    let mut log = Vec::new();
    let mut dirty = 0;
    let mut consumer_ready = false;
    let mut created = false;
    let mut cursor = start;
    let mut next: Option<StreamId> = g.pel.range(cursor..).next().map(|(k, _)| *k);
    while attempts > 0 && count > 0 {
        let Some(id) = next else { break };
        attempts -= 1;
        cursor = id;
        next = id
            .incr()
            .and_then(|n| g.pel.range(n..).next().map(|(k, _)| *k));
        let Some(entry) = s.get(id) else {
            log.push(xclaim_cmd(key, gname, id, g));
            dirty += 1;
            g.ack(&id);
            deleted.push(id_reply(id));
            count -= 1;
            continue;
        };
        if minidle != 0 {
            if let Some(n) = g.pel.get(&id) {
                if now.saturating_sub(n.delivery_time) < minidle {
                    continue;
                }
            }
        }
        if !consumer_ready {
            created = touch_consumer(g, cname, now);
            consumer_ready = true;
        }
        let old = g.pel.get(&id).map_or(0, |n| n.delivery_count);
        let new_count = if justid { old } else { old.wrapping_add(1) };
        g.assign(id, cname, now, Some(new_count));
        if justid {
            out.push(id_reply(id));
        } else {
            out.push(entry_reply(entry));
        }
        count -= 1;
        log.push(xclaim_cmd(key, gname, id, g));
        dirty += 1;
    }
    let _ = cursor;
    let end = next.unwrap_or(StreamId::MIN);
    s.groups = groups;
    if created {
        db.notify(notify::STREAM, "xgroup-createconsumer", key);
        dirty += 1;
    }
    ctx.dirty += dirty;
    ctx.propagate_as(log);
    Ok(Reply::Array(vec![
        id_reply(end),
        Reply::Array(out),
        Reply::Array(deleted),
    ]))
}

// ---------------------------------------------------------------------------------------
// XINFO

fn xinfo(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let sub = check_sub("xinfo", a)?;
    if sub == "help" {
        return Ok(help(
            &a[0],
            &[
                "CONSUMERS <key> <groupname>",
                "    Show consumers of <groupname>.",
                "GROUPS <key>",
                "    Show the stream consumer groups.",
                "STREAM <key> [FULL [COUNT <count>]",
                "    Show information about the stream.",
            ],
        ));
    }
    let key = &a[2];
    let now = ctx.now_ms();
    let mut db = ctx.db();
    let s = match get_stream(&mut db, key, true)? {
        None => return Err(Reply::error("ERR no such key")),
        Some(s) => s,
    };
    let bulk = |t: &'static str| Reply::bulk_slice(t.as_bytes());
    match sub.as_str() {
        "consumers" => {
            let Some(g) = s.groups.get(&a[3][..]) else {
                return Err(no_group(&a[3], key));
            };
            Ok(Reply::Array(
                g.consumers
                    .iter()
                    .map(|(n, c)| {
                        Reply::Map(vec![
                            (bulk("name"), Reply::Bulk(n.clone())),
                            (bulk("pending"), Reply::Int(c.pel.len() as i64)),
                            (
                                bulk("idle"),
                                Reply::Int(now.saturating_sub(c.seen_time).max(0)),
                            ),
                        ])
                    })
                    .collect(),
            ))
        }
        "groups" => Ok(Reply::Array(
            s.groups
                .iter()
                .map(|(n, g)| {
                    Reply::Map(vec![
                        (bulk("name"), Reply::Bulk(n.clone())),
                        (bulk("consumers"), Reply::Int(g.consumers.len() as i64)),
                        (bulk("pending"), Reply::Int(g.pel.len() as i64)),
                        (bulk("last-delivered-id"), id_reply(g.last_id)),
                        (bulk("entries-read"), entries_read_reply(g)),
                        (bulk("lag"), s.group_lag(g).map_or(Reply::Null, Reply::Int)),
                    ])
                })
                .collect(),
        )),
        _ => stream_info(s, a),
    }
}

fn entries_read_reply(g: &Group) -> Reply {
    if g.entries_read != INVALID_ENTRIES_READ {
        Reply::Int(g.entries_read)
    } else {
        Reply::Null
    }
}

fn stream_info(s: &Stream, a: &[Bytes]) -> CmdResult {
    let opts = &a[3..];
    let mut full = true;
    let mut count: i64 = 10;
    if opts.is_empty() {
        full = false;
    } else {
        if opts.len() != 1 && opts.len() != 3 {
            return Err(subcommand_syntax(a));
        }
        if !eq(&opts[0], "full") {
            return Err(subcommand_syntax(a));
        }
        if opts.len() == 3 {
            if !eq(&opts[1], "count") {
                return Err(subcommand_syntax(a));
            }
            count = int(&opts[2])?;
            if count < 0 {
                count = 10;
            }
        }
    }
    let bulk = |t: &'static str| Reply::bulk_slice(t.as_bytes());
    let mut m = vec![
        (bulk("length"), Reply::Int(s.length as i64)),
        (bulk("radix-tree-keys"), Reply::Int(s.node_count() as i64)),
        (
            bulk("radix-tree-nodes"),
            Reply::Int(s.radix_tree_nodes() as i64),
        ),
        (bulk("last-generated-id"), id_reply(s.last_id)),
        (
            bulk("max-deleted-entry-id"),
            id_reply(s.max_deleted_entry_id),
        ),
        (bulk("entries-added"), Reply::Int(s.entries_added as i64)),
        (bulk("recorded-first-entry-id"), id_reply(s.first_id)),
    ];
    if !full {
        m.push((bulk("groups"), Reply::Int(s.groups.len() as i64)));
        let mut first = Reply::Null;
        s.for_each(StreamId::MIN, StreamId::MAX, false, |e| {
            first = entry_reply(e);
            false
        });
        let mut last = Reply::Null;
        s.for_each(StreamId::MIN, StreamId::MAX, true, |e| {
            last = entry_reply(e);
            false
        });
        m.push((bulk("first-entry"), first));
        m.push((bulk("last-entry"), last));
        return Ok(Reply::Map(m));
    }
    let limit = if count == 0 {
        usize::MAX
    } else {
        count as usize
    };
    let mut entries = Vec::new();
    s.for_each(StreamId::MIN, StreamId::MAX, false, |e| {
        entries.push(entry_reply(e));
        entries.len() < limit
    });
    m.push((bulk("entries"), Reply::Array(entries)));
    let groups = s
        .groups
        .iter()
        .map(|(n, g)| {
            let pending = g
                .pel
                .iter()
                .take(limit)
                .map(|(id, nack)| {
                    Reply::Array(vec![
                        id_reply(*id),
                        Reply::Bulk(nack.consumer.clone()),
                        Reply::Int(nack.delivery_time),
                        Reply::Int(nack.delivery_count as i64),
                    ])
                })
                .collect();
            let consumers = g
                .consumers
                .iter()
                .map(|(cn, c)| {
                    let cpel = c
                        .pel
                        .iter()
                        .take(limit)
                        .map(|id| {
                            let (t, n) = g
                                .pel
                                .get(id)
                                .map_or((0, 0), |x| (x.delivery_time, x.delivery_count));
                            Reply::Array(vec![id_reply(*id), Reply::Int(t), Reply::Int(n as i64)])
                        })
                        .collect();
                    Reply::Map(vec![
                        (bulk("name"), Reply::Bulk(cn.clone())),
                        (bulk("seen-time"), Reply::Int(c.seen_time)),
                        (bulk("pel-count"), Reply::Int(c.pel.len() as i64)),
                        (bulk("pending"), Reply::Array(cpel)),
                    ])
                })
                .collect();
            Reply::Map(vec![
                (bulk("name"), Reply::Bulk(n.clone())),
                (bulk("last-delivered-id"), id_reply(g.last_id)),
                (bulk("entries-read"), entries_read_reply(g)),
                (bulk("lag"), s.group_lag(g).map_or(Reply::Null, Reply::Int)),
                (bulk("pel-count"), Reply::Int(g.pel.len() as i64)),
                (bulk("pending"), Reply::Array(pending)),
                (bulk("consumers"), Reply::Array(consumers)),
            ])
        })
        .collect();
    m.push((bulk("groups"), Reply::Array(groups)));
    Ok(Reply::Map(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_as_redis() {
        assert_eq!(parse_id(b"5", 7).ok(), Some(StreamId::new(5, 7)));
        assert_eq!(parse_id(b"5-3", 7).ok(), Some(StreamId::new(5, 3)));
        assert_eq!(parse_id(b"-", 0).ok(), Some(StreamId::MIN));
        assert!(parse_strict_id(b"+").is_err());
        assert!(parse_id(b"-1", 0).is_err());
        assert!(parse_id(b"1-a", 0).is_err());
        let mut given = true;
        let id = parse_id_generic(b"5-*", 0, true, Some(&mut given)).ok();
        assert_eq!(id, Some(StreamId::new(5, 0)));
        assert!(!given);
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
    }

    #[test]
    fn xread_keys_follow_streams() {
        let a: Vec<Bytes> = ["xread", "count", "2", "streams", "a", "b", "0", "0"]
            .iter()
            .map(|s| Bytes::from(s.to_string()))
            .collect();
        assert_eq!(xread_keys(&a), vec![4, 5]);
    }
}
