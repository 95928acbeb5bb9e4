//! BITOP, BITFIELD and BITFIELD_RO: bit-level operations across strings and integer fields
//! inside a string (SETBIT, GETBIT, BITCOUNT and BITPOS live with the other string commands).
//!
//! This file owns the integer-field arithmetic as Redis defines it: fields of 1 to 64 bits
//! (signed) or 1 to 63 (unsigned) at any bit offset, most significant bit first, read as if
//! the string were padded with zeros; SET and INCRBY under the OVERFLOW policy in force (WRAP
//! keeps the low bits, SAT clamps, FAIL skips the operation and answers nil). Writes grow the
//! string to the highest bit any write names before any operation runs, as Redis does, so a
//! BITFIELD whose every write FAILs still leaves the grown string behind. BITOP stores the
//! result as a plain string (`set` event) or deletes the destination when every source is
//! empty. Both are logged to the AOF as received: their results depend only on the data.

use super::args::{eq, SYNTAX};
use super::flags::*;
use super::{CmdResult, Ctx, Keys, Spec};
use crate::notify;
use crate::protocol::Reply;
use crate::types::compact::CompactBytes;
use crate::types::{Value, WRONGTYPE};
use crate::util::numtext::parse_i64;
use bytes::Bytes;
use std::sync::atomic::Ordering;

const G: &str = "bitmap";

#[rustfmt::skip]
pub static COMMANDS: &[Spec] = &[
    Spec::new("bitop", -4, WRITE | DENYOOM, Keys::Range(2, -1, 1), bitop, G),
    Spec::new("bitfield", -2, WRITE | DENYOOM, Keys::Range(1, 1, 1), bitfield, G),
    Spec::new("bitfield_ro", -2, READONLY | FAST, Keys::Range(1, 1, 1), bitfield_ro, G),
];

#[derive(Clone, Copy, PartialEq)]
enum BitOp {
    And,
    Or,
    Xor,
    Not,
}

/// BITOP AND|OR|XOR|NOT destkey key [key ...]
fn bitop(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let op = if eq(&a[1], "and") {
        BitOp::And
    } else if eq(&a[1], "or") {
        BitOp::Or
    } else if eq(&a[1], "xor") {
        BitOp::Xor
    } else if eq(&a[1], "not") {
        BitOp::Not
    } else {
        return Err(Reply::error(SYNTAX));
    };
    if op == BitOp::Not && a.len() != 4 {
        return Err(Reply::error(
            "ERR BITOP NOT must be called with a single source key.",
        ));
    }
    let mut db = ctx.db();
    let mut sources: Vec<Option<Bytes>> = Vec::with_capacity(a.len() - 3);
    for key in &a[3..] {
        match db.read(key) {
            None => sources.push(None),
            Some(Value::Str(s)) => sources.push(Some(s.to_bytes())),
            Some(_) => return Err(Reply::error(WRONGTYPE)),
        }
    }
    let maxlen = sources
        .iter()
        .map(|s| s.as_ref().map_or(0, |s| s.len()))
        .max()
        .unwrap_or(0);
    let dst = &a[2];
    if maxlen == 0 {
        if db.remove(dst).is_some() {
            db.modified(dst);
            db.notify(notify::GENERIC, "del", dst);
            ctx.dirty += 1;
        }
        return Ok(Reply::Int(0));
    }
    let byte_of = |s: &Option<Bytes>, j: usize| s.as_ref().and_then(|s| s.get(j)).copied();
    let mut res = vec![0u8; maxlen];
    match op {
        BitOp::Not => {
            for (r, b) in res.iter_mut().zip(sources[0].iter().flat_map(|s| s.iter())) {
                *r = !b;
            }
        }
        _ => {
            // Bytes past a source's end count as zero.
            for (j, r) in res.iter_mut().enumerate() {
                let mut out = byte_of(&sources[0], j).unwrap_or(0);
                for s in &sources[1..] {
                    let b = byte_of(s, j).unwrap_or(0);
                    match op {
                        BitOp::And => out &= b,
                        BitOp::Or => out |= b,
                        _ => out ^= b,
                    }
                }
                *r = out;
            }
        }
    }
    db.insert(dst, Value::Str(CompactBytes::from_vec(res)));
    db.modified(dst);
    db.notify(notify::STRING, "set", dst);
    ctx.dirty += 1;
    Ok(Reply::Int(maxlen as i64))
}

#[derive(Clone, Copy, PartialEq)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

#[derive(Clone, Copy, PartialEq)]
enum FieldOp {
    Get,
    Set,
    Incrby,
}

struct Field {
    op: FieldOp,
    offset: u64,
    value: i64,
    overflow: Overflow,
    bits: u32,
    signed: bool,
}

const BAD_OFFSET: &str = "ERR bit offset is not an integer or out of range";
const BAD_TYPE: &str = "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.";

/// `i<bits>` or `u<bits>`: (signed, bits).
fn field_type(a: &[u8]) -> Result<(bool, u32), Reply> {
    let signed = match a.first() {
        Some(b'i') => true,
        Some(b'u') => false,
        _ => return Err(Reply::error(BAD_TYPE)),
    };
    // Redis reads the width as a C string: it ends at the first NUL.
    let width = crate::util::c_str(&a[1..]);
    match parse_i64(width) {
        Some(b) if b >= 1 && b <= if signed { 64 } else { 63 } => Ok((signed, b as u32)),
        _ => Err(Reply::error(BAD_TYPE)),
    }
}

/// A field offset: bits, or `#n` for the n-th field of this width.
fn field_offset(a: &[u8], bits: u32, max_len: i64) -> Result<u64, Reply> {
    let (text, times) = match a.strip_prefix(b"#") {
        Some(rest) => (rest, i64::from(bits)),
        None => (a, 1),
    };
    let v = parse_i64(text)
        .ok_or_else(|| Reply::error(BAD_OFFSET))?
        .wrapping_mul(times);
    if v < 0 || (v >> 3) >= max_len {
        return Err(Reply::error(BAD_OFFSET));
    }
    Ok(v as u64)
}

fn get_unsigned(s: &[u8], offset: u64, bits: u32) -> u64 {
    let mut v = 0u64;
    for i in 0..u64::from(bits) {
        let pos = offset + i;
        let byte = s.get((pos >> 3) as usize).copied().unwrap_or(0);
        let bit = (byte >> (7 - (pos & 7))) & 1;
        v = (v << 1) | u64::from(bit);
    }
    v
}

fn get_signed(s: &[u8], offset: u64, bits: u32) -> i64 {
    let mut v = get_unsigned(s, offset, bits);
    if bits < 64 && v & (1u64 << (bits - 1)) != 0 {
        v |= u64::MAX << bits;
    }
    v as i64
}

/// Write the low `bits` of `v` at `offset` (the string is already long enough).
fn set_bits(s: &mut [u8], offset: u64, bits: u32, v: u64) {
    for i in 0..u64::from(bits) {
        let bit = (v >> (u64::from(bits) - 1 - i)) & 1;
        let pos = offset + i;
        let byte = &mut s[(pos >> 3) as usize];
        let mask = 1u8 << (7 - (pos & 7));
        if bit == 1 {
            *byte |= mask;
        } else {
            *byte &= !mask;
        }
    }
}

/// Redis's `checkUnsignedBitfieldOverflow`: whether `value + incr` leaves `bits` bits, and what
/// WRAP or SAT makes of it.
fn unsigned_overflow(value: u64, incr: i64, bits: u32, ow: Overflow) -> Option<u64> {
    let max = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let maxincr = max.wrapping_sub(value) as i64;
    let minincr = value.wrapping_neg() as i64;
    let wrapped = || value.wrapping_add(incr as u64) & !(u64::MAX << bits);
    if value > max || (incr > 0 && incr > maxincr) {
        Some(match ow {
            Overflow::Wrap => wrapped(),
            _ => max,
        })
    } else if incr < 0 && incr < minincr {
        Some(match ow {
            Overflow::Wrap => wrapped(),
            _ => 0,
        })
    } else {
        None
    }
}

/// Redis's `checkSignedBitfieldOverflow`.
fn signed_overflow(value: i64, incr: i64, bits: u32, ow: Overflow) -> Option<i64> {
    let max = if bits == 64 {
        i64::MAX
    } else {
        (1i64 << (bits - 1)) - 1
    };
    let min = -max - 1;
    let maxincr = (max as u64).wrapping_sub(value as u64) as i64;
    let minincr = min.wrapping_sub(value);
    let wrapped = || {
        let mut c = (value as u64).wrapping_add(incr as u64);
        if bits < 64 {
            let mask = u64::MAX << bits;
            if c & (1u64 << (bits - 1)) != 0 {
                c |= mask;
            } else {
                c &= !mask;
            }
        }
        c as i64
    };
    if value > max || (bits != 64 && incr > maxincr) || (value >= 0 && incr > 0 && incr > maxincr) {
        Some(match ow {
            Overflow::Wrap => wrapped(),
            _ => max,
        })
    } else if value < min
        || (bits != 64 && incr < minincr)
        || (value < 0 && incr < 0 && incr < minincr)
    {
        Some(match ow {
            Overflow::Wrap => wrapped(),
            _ => min,
        })
    } else {
        None
    }
}

fn bitfield(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    bitfield_generic(ctx, a, false)
}

fn bitfield_ro(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    bitfield_generic(ctx, a, true)
}

/// BITFIELD key [GET type offset] [SET type offset value] [INCRBY type offset increment]
/// [OVERFLOW WRAP|SAT|FAIL] ...
fn bitfield_generic(ctx: &mut Ctx, a: &[Bytes], ro_command: bool) -> CmdResult {
    let max_len = ctx
        .srv
        .config
        .hot
        .proto_max_bulk_len
        .load(Ordering::Relaxed);
    let mut fields = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut readonly = true;
    let mut highest_write: u64 = 0;
    let mut j = 2;
    while j < a.len() {
        let remaining = a.len() - j - 1;
        let sub = &a[j][..];
        let op = if eq(sub, "get") && remaining >= 2 {
            FieldOp::Get
        } else if eq(sub, "set") && remaining >= 3 {
            FieldOp::Set
        } else if eq(sub, "incrby") && remaining >= 3 {
            FieldOp::Incrby
        } else if eq(sub, "overflow") && remaining >= 1 {
            let kind = &a[j + 1];
            overflow = if eq(kind, "wrap") {
                Overflow::Wrap
            } else if eq(kind, "sat") {
                Overflow::Sat
            } else if eq(kind, "fail") {
                Overflow::Fail
            } else {
                return Err(Reply::error("ERR Invalid OVERFLOW type specified"));
            };
            j += 2;
            continue;
        } else {
            return Err(Reply::error(SYNTAX));
        };
        let (signed, bits) = field_type(&a[j + 1])?;
        let offset = field_offset(&a[j + 2], bits, max_len)?;
        let mut value = 0;
        if op != FieldOp::Get {
            readonly = false;
            highest_write = highest_write.max(offset + u64::from(bits) - 1);
            value = super::args::int(&a[j + 3])?;
        }
        fields.push(Field {
            op,
            offset,
            value,
            overflow,
            bits,
            signed,
        });
        j += if op == FieldOp::Get { 3 } else { 4 };
    }

    let key = &a[1];
    let mut db = ctx.db();
    if readonly {
        let s = match db.read(key) {
            None => None,
            Some(Value::Str(s)) => Some(s.to_bytes()),
            Some(_) => return Err(Reply::error(WRONGTYPE)),
        };
        let s = s.as_deref().unwrap_or(&[]);
        let out = fields
            .iter()
            .map(|f| {
                if f.signed {
                    Reply::Int(get_signed(s, f.offset, f.bits))
                } else {
                    Reply::Int(get_unsigned(s, f.offset, f.bits) as i64)
                }
            })
            .collect();
        return Ok(Reply::Array(out));
    }
    if ro_command {
        return Err(Reply::error(
            "ERR BITFIELD_RO only supports the GET subcommand",
        ));
    }
    // Grow (or create) the string to the highest bit written, before any operation runs.
    let need = (highest_write >> 3) as usize + 1;
    let (mut s, grown) = match db.value(key) {
        None => (vec![0u8; need], true),
        Some(Value::Str(s)) => {
            let mut v = std::mem::take(s).into_vec();
            let grown = v.len() < need;
            if grown {
                // Exactly (see `CompactBytes::append`): the stored string is exactly sized.
                v.reserve_exact(need - v.len());
                v.resize(need, 0);
            }
            (v, grown)
        }
        Some(_) => return Err(Reply::error(WRONGTYPE)),
    };
    let mut changes = 0u64;
    let mut out = Vec::with_capacity(fields.len());
    for f in &fields {
        match (f.op, f.signed) {
            (FieldOp::Get, true) => out.push(Reply::Int(get_signed(&s, f.offset, f.bits))),
            (FieldOp::Get, false) => {
                out.push(Reply::Int(get_unsigned(&s, f.offset, f.bits) as i64))
            }
            (op, true) => {
                let old = get_signed(&s, f.offset, f.bits);
                let (over, new, reply) = if op == FieldOp::Incrby {
                    let over = signed_overflow(old, f.value, f.bits, f.overflow);
                    let new = over.unwrap_or(old.wrapping_add(f.value));
                    (over.is_some(), new, new)
                } else {
                    let over = signed_overflow(f.value, 0, f.bits, f.overflow);
                    (over.is_some(), over.unwrap_or(f.value), old)
                };
                if over && f.overflow == Overflow::Fail {
                    out.push(Reply::Null);
                } else {
                    out.push(Reply::Int(reply));
                    set_bits(&mut s, f.offset, f.bits, new as u64);
                    if grown || old != new {
                        changes += 1;
                    }
                }
            }
            (op, false) => {
                let old = get_unsigned(&s, f.offset, f.bits);
                let (over, new, reply) = if op == FieldOp::Incrby {
                    let over = unsigned_overflow(old, f.value, f.bits, f.overflow);
                    let new = over.unwrap_or(old.wrapping_add(f.value as u64));
                    (over.is_some(), new, new)
                } else {
                    let over = unsigned_overflow(f.value as u64, 0, f.bits, f.overflow);
                    (over.is_some(), over.unwrap_or(f.value as u64), old)
                };
                if over && f.overflow == Overflow::Fail {
                    out.push(Reply::Null);
                } else {
                    out.push(Reply::Int(reply as i64));
                    set_bits(&mut s, f.offset, f.bits, new);
                    if grown || old != new {
                        changes += 1;
                    }
                }
            }
        }
    }
    match db.value(key) {
        Some(Value::Str(v)) => *v = CompactBytes::from_vec(s),
        _ => db.insert(key, Value::Str(CompactBytes::from_vec(s))),
    }
    if changes > 0 {
        db.modified(key);
        db.notify(notify::STRING, "setbit", key);
        ctx.dirty += changes;
    }
    Ok(Reply::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_read_and_write_msb_first() {
        let mut s = vec![0u8; 3];
        set_bits(&mut s, 5, 8, 0xff);
        assert_eq!(s, [0b0000_0111, 0b1111_1000, 0]);
        assert_eq!(get_unsigned(&s, 5, 8), 0xff);
        assert_eq!(get_signed(&s, 5, 8), -1);
        assert_eq!(get_unsigned(&s, 20, 8), 0, "bits past the end read as zero");
    }

    #[test]
    fn overflow_policies() {
        assert_eq!(unsigned_overflow(250, 10, 8, Overflow::Wrap), Some(4));
        assert_eq!(unsigned_overflow(250, 10, 8, Overflow::Sat), Some(255));
        assert_eq!(unsigned_overflow(5, -10, 8, Overflow::Sat), Some(0));
        assert_eq!(unsigned_overflow(5, -10, 8, Overflow::Wrap), Some(251));
        assert_eq!(unsigned_overflow(5, 10, 8, Overflow::Fail), None);
        assert_eq!(signed_overflow(120, 10, 8, Overflow::Wrap), Some(-126));
        assert_eq!(signed_overflow(120, 10, 8, Overflow::Sat), Some(127));
        assert_eq!(signed_overflow(-120, -10, 8, Overflow::Sat), Some(-128));
        assert_eq!(
            signed_overflow(i64::MAX, 1, 64, Overflow::Wrap),
            Some(i64::MIN)
        );
        assert_eq!(signed_overflow(1, 1, 64, Overflow::Wrap), None);
    }

    #[test]
    fn types_and_offsets() {
        assert!(field_type(b"i64").is_ok());
        assert!(field_type(b"u64").is_err());
        assert!(field_type(b"u0").is_err());
        assert!(field_type(b"x8").is_err());
        assert_eq!(field_offset(b"#3", 8, 1 << 29).ok(), Some(24));
        assert!(field_offset(b"-1", 8, 1 << 29).is_err());
        assert!(field_offset(b"#-1", 8, 1 << 29).is_err());
    }
}
