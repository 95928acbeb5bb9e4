//! The HyperLogLog family: PFADD, PFCOUNT, PFMERGE, PFDEBUG and PFSELFTEST.
//!
//! An HLL is a string value in Redis's layout (`types::hll` owns the bytes), so these commands
//! read and write strings: a string that is not an HLL answers `WRONGTYPE Key is not a valid
//! HyperLogLog string value.`, and one whose sparse opcodes do not add up `INVALIDOBJ Corrupted
//! HLL object detected`. As in Redis, PFCOUNT of one key stores the estimate it computes in the
//! string's cache (a change that is counted, so the command is logged), PFMERGE raises a
//! `pfadd` event, and PFDEBUG GETREG/TODENSE convert a sparse HLL to dense for good. Every
//! command is logged as received.

use super::args::eq;
use super::flags::*;
use super::{CmdResult, Ctx, Keys, Spec};
use crate::keyspace::DbHandle;
use crate::notify;
use crate::protocol::Reply;
use crate::types::compact::CompactBytes;
use crate::types::hll::{self, REGISTERS};
use crate::types::{Value, WRONGTYPE};
use bytes::Bytes;
use std::sync::atomic::Ordering;

const G: &str = "hyperloglog";

#[rustfmt::skip]
pub static COMMANDS: &[Spec] = &[
    Spec::new("pfadd", -2, WRITE | DENYOOM | FAST, Keys::Range(1, 1, 1), pfadd, G),
    Spec::new(
        "pfcount",
        -2,
        READONLY | MAY_REPLICATE,
        Keys::Range(1, -1, 1),
        pfcount,
        G,
    ),
    Spec::new("pfmerge", -2, WRITE | DENYOOM, Keys::Range(1, -1, 1), pfmerge, G),
    Spec::new("pfdebug", 3, WRITE | DENYOOM | ADMIN, Keys::Range(2, 2, 1), pfdebug, G),
    Spec::new("pfselftest", 1, ADMIN, Keys::None, pfselftest, G),
];

const NOT_HLL: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";
const CORRUPT: &str = "INVALIDOBJ Corrupted HLL object detected";

fn sparse_max(ctx: &Ctx) -> usize {
    ctx.srv
        .config
        .hot
        .hll_sparse_max_bytes
        .load(Ordering::Relaxed)
}

/// The HLL bytes at `key`: Ok(None) when missing, the two WRONGTYPE errors otherwise.
fn read_hll(db: &mut DbHandle, key: &[u8], count_access: bool) -> Result<Option<Bytes>, Reply> {
    let v = if count_access {
        db.read(key)
    } else {
        db.value(key)
    };
    match v {
        None => Ok(None),
        Some(Value::Str(s)) if hll::is_hll(s) => Ok(Some(s.to_bytes())),
        Some(Value::Str(_)) => Err(Reply::error(NOT_HLL)),
        Some(_) => Err(Reply::error(WRONGTYPE)),
    }
}

/// Store `s` at `key` (an existing string is replaced in place, keeping its TTL).
fn write_back(db: &mut DbHandle, key: &[u8], s: Vec<u8>) {
    match db.value(key) {
        Some(Value::Str(v)) => *v = CompactBytes::from_vec(s),
        _ => db.insert(key, Value::Str(CompactBytes::from_vec(s))),
    }
}

/// PFADD key [element ...]
fn pfadd(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let max_bytes = sparse_max(ctx);
    let key = &a[1];
    let mut db = ctx.db();
    let (mut s, mut updated) = match read_hll(&mut db, key, false)? {
        None => (hll::new_sparse(), 1u64),
        Some(b) => (b.to_vec(), 0),
    };
    for ele in &a[2..] {
        match hll::add(&mut s, ele, max_bytes) {
            Ok(true) => updated += 1,
            Ok(false) => {}
            Err(hll::Corrupt) => {
                // What was added before the corruption was found stays, unannounced, as in
                // Redis (which edits the string in place).
                write_back(&mut db, key, s);
                return Err(Reply::error(CORRUPT));
            }
        }
    }
    if updated > 0 {
        hll::invalidate_cache(&mut s);
    }
    write_back(&mut db, key, s);
    if updated > 0 {
        db.modified(key);
        db.notify(notify::STRING, "pfadd", key);
        ctx.dirty += updated;
    }
    Ok(Reply::Int(i64::from(updated > 0)))
}

/// PFCOUNT key [key ...]
fn pfcount(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let mut db = ctx.db();
    if a.len() > 2 {
        // The estimate of the union; nothing is cached.
        let mut max = Box::new([0u8; REGISTERS]);
        for key in &a[1..] {
            let Some(s) = read_hll(&mut db, key, true)? else {
                continue;
            };
            if hll::merge_into(&mut max, &s).is_err() {
                return Err(Reply::error(CORRUPT));
            }
        }
        return Ok(Reply::Int(hll::count_registers(&max) as i64));
    }
    let key = &a[1];
    let Some(s) = read_hll(&mut db, key, true)? else {
        return Ok(Reply::Int(0));
    };
    if let Some(card) = hll::cached_card(&s) {
        return Ok(Reply::Int(card as i64));
    }
    let Ok(card) = hll::count(&s) else {
        return Err(Reply::error(CORRUPT));
    };
    let mut s = s.to_vec();
    hll::set_cached_card(&mut s, card);
    write_back(&mut db, key, s);
    db.modified(key);
    ctx.dirty += 1;
    Ok(Reply::Int(card as i64))
}

/// PFMERGE destkey [sourcekey ...] (the destination takes part in the union).
fn pfmerge(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let max_bytes = sparse_max(ctx);
    let mut db = ctx.db();
    let mut max = Box::new([0u8; REGISTERS]);
    let mut use_dense = false;
    for key in &a[1..] {
        let Some(s) = read_hll(&mut db, key, true)? else {
            continue;
        };
        if !hll::is_sparse(&s) {
            use_dense = true;
        }
        if hll::merge_into(&mut max, &s).is_err() {
            return Err(Reply::error(CORRUPT));
        }
    }
    let dst = &a[1];
    // The destination was checked above when it exists.
    let mut s = match db.value(dst) {
        Some(Value::Str(v)) => v.to_vec(),
        _ => {
            let fresh = hll::new_sparse();
            db.insert(dst, Value::Str(CompactBytes::from_vec(fresh.clone())));
            fresh
        }
    };
    if use_dense && hll::sparse_to_dense(&mut s).is_err() {
        return Err(Reply::error(CORRUPT));
    }
    for (i, &m) in max.iter().enumerate() {
        if m != 0 {
            // A corrupted destination cannot reach here (it failed the merge above).
            let _ = hll::set_register(&mut s, i, m, max_bytes);
        }
    }
    hll::invalidate_cache(&mut s);
    write_back(&mut db, dst, s);
    db.modified(dst);
    db.notify(notify::STRING, "pfadd", dst);
    ctx.dirty += 1;
    Ok(Reply::Ok)
}

/// PFDEBUG GETREG|DECODE|ENCODING|TODENSE key
fn pfdebug(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let key = &a[2];
    let mut db = ctx.db();
    let Some(s) = read_hll(&mut db, key, false)? else {
        return Err(Reply::error("ERR The specified key does not exist"));
    };
    let sub = &a[1];
    if eq(sub, "getreg") || eq(sub, "todense") {
        let mut converted = false;
        let mut s = s.to_vec();
        if hll::is_sparse(&s) {
            if hll::sparse_to_dense(&mut s).is_err() {
                return Err(Reply::error(CORRUPT));
            }
            converted = true;
        }
        let reply = if eq(sub, "getreg") {
            Reply::Array(
                hll::registers(&s)
                    .into_iter()
                    .map(|r| Reply::Int(i64::from(r)))
                    .collect(),
            )
        } else {
            Reply::Int(i64::from(converted))
        };
        if converted {
            write_back(&mut db, key, s);
            ctx.dirty += 1;
        }
        Ok(reply)
    } else if eq(sub, "decode") {
        if !hll::is_sparse(&s) {
            return Err(Reply::error("ERR HLL encoding is not sparse"));
        }
        Ok(Reply::Bulk(Bytes::from(hll::decode_sparse(&s))))
    } else if eq(sub, "encoding") {
        Ok(Reply::Status(if hll::is_sparse(&s) {
            "sparse"
        } else {
            "dense"
        }))
    } else {
        Err(Reply::error(format!(
            "ERR Unknown PFDEBUG subcommand '{}'",
            String::from_utf8_lossy(crate::util::c_str(sub))
        )))
    }
}

/// PFSELFTEST
fn pfselftest(ctx: &mut Ctx, _a: &[Bytes]) -> CmdResult {
    let max_bytes = sparse_max(ctx);
    let mut rng = rand::thread_rng();
    match hll::self_test(max_bytes, || rand::Rng::gen::<u32>(&mut rng) & 0x7fff_ffff) {
        Ok(()) => Ok(Reply::Ok),
        Err(e) => Err(Reply::error(e)),
    }
}
