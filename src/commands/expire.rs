//! Key time-to-live commands: EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT (with NX / XX / GT / LT),
//! TTL, PTTL, EXPIRETIME, PEXPIRETIME and PERSIST.
//!
//! Semantics follow Redis 7.0's `expire.c`: options are validated before the time argument;
//! a relative time is turned into absolute Unix milliseconds with overflow checks ("invalid
//! expire time"); a time that is already in the past deletes the key (reply 1) and is logged
//! as `DEL key`; otherwise the key gets the absolute expiry and the command is logged as
//! `PEXPIREAT key <abs-ms> [options]`, so that replaying the AOF never shifts a TTL forward.
//! GT/LT treat a key without a TTL as having an infinite one. The expiry index itself and the
//! lazy / active deletion of expired keys live in [`crate::keyspace`] and the server cron.

use super::args::{eq, int};
use super::{flags, CmdResult, Ctx, Keys, Spec};
use crate::keyspace::NO_EXPIRE;
use crate::protocol::Reply;
use bytes::Bytes;

const W: u32 = flags::WRITE | flags::FAST;
const R: u32 = flags::READONLY | flags::FAST;
const K1: Keys = Keys::Range(1, 1, 1);

pub static COMMANDS: &[Spec] = &[
    Spec::new("expire", -3, W, K1, expire, "generic"),
    Spec::new("pexpire", -3, W, K1, pexpire, "generic"),
    Spec::new("expireat", -3, W, K1, expireat, "generic"),
    Spec::new("pexpireat", -3, W, K1, pexpireat, "generic"),
    Spec::new("ttl", 2, R, K1, ttl, "generic"),
    Spec::new("pttl", 2, R, K1, pttl, "generic"),
    Spec::new("expiretime", 2, R, K1, expiretime, "generic"),
    Spec::new("pexpiretime", 2, R, K1, pexpiretime, "generic"),
    Spec::new("persist", 2, W, K1, persist, "generic"),
];

/// The error for a time that overflows once converted to absolute milliseconds.
pub fn invalid_expire_time(command: &str) -> Reply {
    Reply::Error(format!("ERR invalid expire time in '{command}' command"))
}

/// Convert a time argument to absolute Unix milliseconds the way Redis does: seconds are
/// multiplied by 1000 and `basetime` (0 for the *AT forms, now for relative ones) is added.
/// None when either step overflows a signed 64-bit integer.
pub fn to_absolute_ms(when: i64, seconds: bool, basetime: i64) -> Option<i64> {
    let ms = if seconds {
        when.checked_mul(1000)?
    } else {
        when
    };
    // Redis only guards the upward overflow of the addition; `basetime` is never negative.
    if ms > i64::MAX - basetime {
        return None;
    }
    Some(ms + basetime)
}

/// Conditions from the optional NX / XX / GT / LT arguments.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
struct Cond {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

fn parse_cond(opts: &[Bytes]) -> Result<Cond, Reply> {
    let mut c = Cond::default();
    for o in opts {
        if eq(o, "nx") {
            c.nx = true;
        } else if eq(o, "xx") {
            c.xx = true;
        } else if eq(o, "gt") {
            c.gt = true;
        } else if eq(o, "lt") {
            c.lt = true;
        } else {
            return Err(Reply::Error(format!(
                "ERR Unsupported option {}",
                String::from_utf8_lossy(o)
            )));
        }
    }
    if c.nx && (c.xx || c.gt || c.lt) {
        return Err(Reply::error(
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if c.gt && c.lt {
        return Err(Reply::error(
            "ERR GT and LT options at the same time are not compatible",
        ));
    }
    Ok(c)
}

impl Cond {
    /// May a key whose current expiry is `current` (or [`NO_EXPIRE`]) get expiry `when`?
    fn allows(self, current: i64, when: i64) -> bool {
        let persistent = current == NO_EXPIRE;
        if self.nx && !persistent {
            return false;
        }
        if self.xx && persistent {
            return false;
        }
        // No TTL counts as an infinite one: never smaller than `when`, always greater.
        if self.gt && (persistent || when <= current) {
            return false;
        }
        if self.lt && !persistent && when >= current {
            return false;
        }
        true
    }
}

fn expire(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let now = ctx.now_ms();
    expire_generic(ctx, args, "expire", true, now)
}

fn pexpire(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let now = ctx.now_ms();
    expire_generic(ctx, args, "pexpire", false, now)
}

fn expireat(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    expire_generic(ctx, args, "expireat", true, 0)
}

fn pexpireat(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    expire_generic(ctx, args, "pexpireat", false, 0)
}

fn expire_generic(
    ctx: &mut Ctx,
    args: &[Bytes],
    name: &str,
    seconds: bool,
    basetime: i64,
) -> CmdResult {
    let cond = parse_cond(&args[3..])?;
    let when = int(&args[2])?;
    let Some(when) = to_absolute_ms(when, seconds, basetime) else {
        return Err(invalid_expire_time(name));
    };
    let key = &args[1];
    let now = ctx.now_ms();
    let loading = ctx.srv.aof.loading();
    let mut db = ctx.db();
    let Some(current) = db.expire_at(key) else {
        return Ok(Reply::Int(0));
    };
    if !cond.allows(current, when) {
        return Ok(Reply::Int(0));
    }
    // A time already past deletes the key, except while loading the AOF (Redis's
    // checkAlreadyExpired): there the key keeps that expiry, so the logged commands that
    // follow it still find the key, and it expires once loading ends.
    if when <= now && !loading {
        db.remove(key);
        db.modified(key);
        db.notify(crate::notify::GENERIC, "del", key);
        ctx.dirty += 1;
        ctx.propagate_as(vec![vec![Bytes::from_static(b"DEL"), key.clone()]]);
        return Ok(Reply::Int(1));
    }
    db.set_expire(key, when);
    db.modified(key);
    db.notify(crate::notify::GENERIC, "expire", key);
    ctx.dirty += 1;
    let mut cmd = Vec::with_capacity(args.len());
    cmd.push(Bytes::from_static(b"PEXPIREAT"));
    cmd.push(key.clone());
    cmd.push(Bytes::from(when.to_string()));
    cmd.extend(args[3..].iter().cloned());
    ctx.propagate_as(vec![cmd]);
    Ok(Reply::Int(1))
}

/// Shared body of TTL / PTTL / EXPIRETIME / PEXPIRETIME.
fn ttl_generic(ctx: &mut Ctx, key: &[u8], millis: bool, absolute: bool) -> Reply {
    let now = ctx.now_ms();
    let mut db = ctx.db();
    let at = match db
        .read_no_touch(key)
        .is_some()
        .then(|| db.shard(key).raw_expire(key).unwrap_or(NO_EXPIRE))
    {
        None => return Reply::Int(-2),
        Some(NO_EXPIRE) => return Reply::Int(-1),
        Some(at) => at,
    };
    let v = if absolute { at } else { at.saturating_sub(now) }.max(0);
    Reply::Int(if millis { v } else { (v + 500) / 1000 })
}

fn ttl(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    Ok(ttl_generic(ctx, &args[1], false, false))
}

fn pttl(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    Ok(ttl_generic(ctx, &args[1], true, false))
}

fn expiretime(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    Ok(ttl_generic(ctx, &args[1], false, true))
}

fn pexpiretime(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    Ok(ttl_generic(ctx, &args[1], true, true))
}

fn persist(ctx: &mut Ctx, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let mut db = ctx.db();
    if !db.exists(key) || !db.persist(key) {
        return Ok(Reply::Int(0));
    }
    db.modified(key);
    db.notify(crate::notify::GENERIC, "persist", key);
    ctx.dirty += 1;
    Ok(Reply::Int(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(v: &[&str]) -> Vec<Bytes> {
        v.iter()
            .map(|s| Bytes::copy_from_slice(s.as_bytes()))
            .collect()
    }

    fn err(r: Result<Cond, Reply>) -> String {
        match r {
            Err(Reply::Error(e)) => e,
            _ => panic!("expected an error"),
        }
    }

    #[test]
    fn option_errors() {
        assert_eq!(
            err(parse_cond(&opts(&["lt", "GT"]))),
            "ERR GT and LT options at the same time are not compatible"
        );
        for bad in [["nx", "gt"], ["NX", "lt"], ["nx", "xx"], ["xx", "nx"]] {
            assert_eq!(
                err(parse_cond(&opts(&bad))),
                "ERR NX and XX, GT or LT options at the same time are not compatible"
            );
        }
        assert_eq!(err(parse_cond(&opts(&["AB"]))), "ERR Unsupported option AB");
        assert_eq!(
            err(parse_cond(&opts(&["xx", "AB"]))),
            "ERR Unsupported option AB"
        );
        assert_eq!(
            parse_cond(&opts(&["XX", "gt"])),
            Ok(Cond {
                xx: true,
                gt: true,
                ..Cond::default()
            })
        );
    }

    #[test]
    fn conditions() {
        let c = |v: &[&str]| parse_cond(&opts(v)).unwrap_or_default();
        // NX: only keys without a TTL.
        assert!(c(&["nx"]).allows(NO_EXPIRE, 10));
        assert!(!c(&["nx"]).allows(5, 10));
        // XX: only keys with a TTL.
        assert!(!c(&["xx"]).allows(NO_EXPIRE, 10));
        assert!(c(&["xx"]).allows(5, 10));
        // GT: persistent is infinite, so never greater.
        assert!(!c(&["gt"]).allows(NO_EXPIRE, 10));
        assert!(c(&["gt"]).allows(5, 10));
        assert!(!c(&["gt"]).allows(10, 10));
        // LT: persistent is infinite, so always less.
        assert!(c(&["lt"]).allows(NO_EXPIRE, 10));
        assert!(!c(&["lt"]).allows(5, 10));
        assert!(c(&["lt"]).allows(20, 10));
        assert!(!c(&["lt", "xx"]).allows(NO_EXPIRE, 10));
        assert!(c(&[]).allows(5, 1));
    }

    #[test]
    fn absolute_time_overflow() {
        let base = 1_700_000_000_000;
        assert_eq!(to_absolute_ms(5, true, base), Some(base + 5000));
        assert_eq!(to_absolute_ms(-5, false, base), Some(base - 5));
        assert_eq!(to_absolute_ms(9_223_370_399_119_966, true, base), None);
        assert_eq!(to_absolute_ms(9_223_372_036_854_776, true, base), None);
        assert_eq!(to_absolute_ms(-9_223_372_036_854_776, true, base), None);
        assert_eq!(to_absolute_ms(9_223_372_036_854_770_000, false, base), None);
        assert_eq!(
            to_absolute_ms(9_223_372_036_854_770_000, false, 0),
            Some(9_223_372_036_854_770_000)
        );
        assert_eq!(to_absolute_ms(i64::MIN, false, 0), Some(i64::MIN));
    }
}
