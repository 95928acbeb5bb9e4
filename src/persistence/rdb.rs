//! Values in Redis's RDB object format: the payload DUMP produces and RESTORE accepts.
//!
//! A payload is `<type byte><object><RDB version: u16 LE><CRC-64: u64 LE>`, the CRC (Jones
//! polynomial, reflected, as Redis's `crc64.c`) covering everything before it. RESTORE checks
//! the version (at most [`RDB_VERSION`], Redis 7.0's 10) and the CRC, then decodes the object.
//!
//! Reading accepts every encoding a Redis 7.0 DUMP (or an older Redis's) can contain: strings
//! raw, as 8/16/32-bit integers or LZF-compressed; lists as plain elements, ziplists,
//! quicklists of ziplists and 7.0's quicklists of listpacks; sets plain or as an intset; sorted
//! sets with text or binary scores, as ziplists or listpacks; hashes plain, as ziplists or
//! listpacks. Streams and module values are refused ("Bad data format"), as are payloads that
//! do not parse, declare more than they hold, hold an empty collection, repeat a member or field,
//! or give a sorted-set member a NaN score. Every declared length is checked against the bytes
//! that remain before anything is allocated for it, so a hostile payload cannot make us reserve
//! more memory than it is long. The decoded value is built through the types' own insert paths,
//! so it takes the compact or the large encoding by the configured limits, as after a load in
//! Redis.
//!
//! Writing uses the plain encodings (string, with the integer form where Redis would use it;
//! list, set, hash; `ZSET_2` with binary scores), which every Redis since 2.6 reads. Redis itself
//! writes listpacks for small collections because that is its in-memory form; the objects are
//! the same.

use crate::types::hash::{Hash, HashLimits};
use crate::types::list::List;
use crate::types::set::Set;
use crate::types::zset::{InsertResult, ZSet, ZsetLimits};
use crate::types::Value;

/// The RDB format version of Redis 7.0, written in DUMP payloads and the newest RESTORE takes.
pub const RDB_VERSION: u16 = 10;

const TYPE_STRING: u8 = 0;
const TYPE_LIST: u8 = 1;
const TYPE_SET: u8 = 2;
const TYPE_ZSET: u8 = 3;
const TYPE_HASH: u8 = 4;
const TYPE_ZSET_2: u8 = 5;
const TYPE_LIST_ZIPLIST: u8 = 10;
const TYPE_SET_INTSET: u8 = 11;
const TYPE_ZSET_ZIPLIST: u8 = 12;
const TYPE_HASH_ZIPLIST: u8 = 13;
const TYPE_LIST_QUICKLIST: u8 = 14;
const TYPE_HASH_LISTPACK: u8 = 16;
const TYPE_ZSET_LISTPACK: u8 = 17;
const TYPE_LIST_QUICKLIST_2: u8 = 18;

/// Quicklist node containers (RDB_TYPE_LIST_QUICKLIST_2).
const CONTAINER_PLAIN: u64 = 1;
const CONTAINER_PACKED: u64 = 2;

// ---------------------------------------------------------------------------------------------
// CRC-64 (Jones), as Redis's crc64.c: reflected polynomial 0xad93d23594c935a9, init 0, no xor.

const fn crc64_table() -> [u64; 256] {
    // The reflected form of 0xad93d23594c935a9.
    const POLY: u64 = 0x95ac_9329_ac4b_c9b5;
    let mut table = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u64;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

static CRC64_TABLE: [u64; 256] = crc64_table();

/// Continue the CRC-64 `crc` over `data`.
pub fn crc64(mut crc: u64, data: &[u8]) -> u64 {
    for &b in data {
        crc = CRC64_TABLE[((crc ^ u64::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    crc
}

// ---------------------------------------------------------------------------------------------
// Writing

/// The DUMP payload of `value`, footer included.
pub fn dump(value: &Value) -> Vec<u8> {
    let mut out = vec![object_type(value)];
    put_object(&mut out, value, false);
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64(0, &out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The RDB type byte `put_object` writes `value` under.
pub(crate) fn object_type(value: &Value) -> u8 {
    match value {
        Value::Str(_) => TYPE_STRING,
        Value::List(_) => TYPE_LIST,
        Value::Set(_) => TYPE_SET,
        Value::Hash(_) => TYPE_HASH,
        Value::ZSet(_) => TYPE_ZSET_2,
        Value::Stream(_) => super::rdb_stream::TYPE_STREAM_LISTPACKS_2,
    }
}

/// The object of `value` (without its type byte); `lzf`: compress strings longer than 20
/// bytes when that saves space (`rdbcompression`).
pub(crate) fn put_object(out: &mut Vec<u8>, value: &Value, lzf: bool) {
    let put = |out: &mut Vec<u8>, s: &[u8]| {
        if lzf {
            put_string_lzf(out, s)
        } else {
            put_string(out, s)
        }
    };
    match value {
        Value::Str(s) => put(out, s),
        Value::List(l) => {
            put_len(out, l.len() as u64);
            for item in l.iter() {
                put(out, item);
            }
        }
        Value::Set(s) => {
            put_len(out, s.len() as u64);
            for m in s.iter() {
                put(out, &m);
            }
        }
        Value::Hash(h) => {
            put_len(out, h.len() as u64);
            for (f, v) in h.iter() {
                put(out, f);
                put(out, v);
            }
        }
        Value::ZSet(z) => {
            put_len(out, z.len() as u64);
            for (m, score) in z.iter() {
                put(out, m);
                out.extend_from_slice(&score.to_le_bytes());
            }
        }
        Value::Stream(s) => super::rdb_stream::put_stream(out, s, lzf),
    }
}

/// An RDB string, LZF-compressed (0xC3, compressed length, length, data) when it is longer
/// than 20 bytes, not an integer, and compresses by more than 4 bytes, as Redis's
/// rdbSaveRawString decides.
pub(crate) fn put_string_lzf(out: &mut Vec<u8>, s: &[u8]) {
    if s.len() > 20 {
        if let Some(c) = lzf_compress(s, s.len() - 4) {
            out.push(0xC3);
            put_len(out, c.len() as u64);
            put_len(out, s.len() as u64);
            out.extend_from_slice(&c);
            return;
        }
    }
    put_string(out, s);
}

/// LZF compression in liblzf's format (what [`lzf_decompress`] and Redis read): literal runs
/// of up to 32 bytes, back references of 3..=264 bytes up to 8 KiB back, found through a hash
/// of the next 3 bytes. None when the result would exceed `max_out` bytes.
pub(crate) fn lzf_compress(input: &[u8], max_out: usize) -> Option<Vec<u8>> {
    const HASH_BITS: u32 = 14;
    const MAX_OFF: usize = 1 << 13;
    const MAX_REF: usize = 264;
    let n = input.len();
    let mut out = Vec::with_capacity(max_out.min(n));
    let mut table = vec![0u32; 1 << HASH_BITS];
    let hash = |i: usize| {
        let v =
            (u32::from(input[i]) << 16) | (u32::from(input[i + 1]) << 8) | u32::from(input[i + 2]);
        (v.wrapping_mul(2_654_435_761) >> (32 - HASH_BITS)) as usize
    };
    fn literals(out: &mut Vec<u8>, lit: &[u8]) {
        for chunk in lit.chunks(32) {
            out.push((chunk.len() - 1) as u8);
            out.extend_from_slice(chunk);
        }
    }
    let mut lit_start = 0;
    let mut i = 0;
    while i + 2 < n {
        let h = hash(i);
        let cand = table[h] as usize;
        table[h] = (i + 1) as u32;
        if cand > 0 {
            let c = cand - 1;
            let off = i - c - 1;
            if off < MAX_OFF && input[c..c + 3] == input[i..i + 3] {
                let max = MAX_REF.min(n - i);
                let mut len = 3;
                while len < max && input[c + len] == input[i + len] {
                    len += 1;
                }
                literals(&mut out, &input[lit_start..i]);
                let l = len - 2;
                if l < 7 {
                    out.push(((l << 5) | (off >> 8)) as u8);
                } else {
                    out.push(((7 << 5) | (off >> 8)) as u8);
                    out.push((l - 7) as u8);
                }
                out.push(off as u8);
                // Index the positions the reference covers (the last two start no 3-byte key).
                for k in i + 1..(i + len).min(n.saturating_sub(2)) {
                    table[hash(k)] = (k + 1) as u32;
                }
                i += len;
                lit_start = i;
                if out.len() > max_out {
                    return None;
                }
                continue;
            }
        }
        i += 1;
    }
    literals(&mut out, &input[lit_start..]);
    (out.len() <= max_out).then_some(out)
}

/// An RDB length: 6 bits, 14 bits, 32 or 64 bits big-endian.
pub(crate) fn put_len(out: &mut Vec<u8>, n: u64) {
    if n < 1 << 6 {
        out.push(n as u8);
    } else if n < 1 << 14 {
        out.push(0x40 | (n >> 8) as u8);
        out.push(n as u8);
    } else if n <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// An RDB string: the integer encodings for the canonical text of an integer that fits 32 bits
/// (as Redis's rdbTryIntegerEncoding), otherwise length and bytes.
pub(crate) fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    if s.len() <= 11 {
        if let Some(v) = crate::types::set::canonical_i64(s) {
            if let Ok(v) = i8::try_from(v) {
                out.push(0xC0);
                out.push(v as u8);
                return;
            }
            if let Ok(v) = i16::try_from(v) {
                out.push(0xC1);
                out.extend_from_slice(&v.to_le_bytes());
                return;
            }
            if let Ok(v) = i32::try_from(v) {
                out.push(0xC2);
                out.extend_from_slice(&v.to_le_bytes());
                return;
            }
        }
    }
    put_len(out, s.len() as u64);
    out.extend_from_slice(s);
}

// ---------------------------------------------------------------------------------------------
// Reading

/// Why a RESTORE payload was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum PayloadError {
    /// Too short, a newer RDB version, or a CRC mismatch.
    VersionOrChecksum,
    /// The object does not decode.
    BadFormat,
}

/// The configured encoding limits a restored value is built with.
pub struct Limits {
    pub hash: HashLimits,
    pub zset: ZsetLimits,
    pub set_max_intset: usize,
}

/// Check a payload's footer and decode its object.
pub fn restore(payload: &[u8], limits: &Limits) -> Result<Value, PayloadError> {
    if payload.len() < 10 {
        return Err(PayloadError::VersionOrChecksum);
    }
    let body = payload.len() - 10;
    let version = u16::from_le_bytes([payload[body], payload[body + 1]]);
    if version > RDB_VERSION {
        return Err(PayloadError::VersionOrChecksum);
    }
    let mut crc = [0u8; 8];
    crc.copy_from_slice(&payload[body + 2..]);
    if !SKIP_CHECKSUM.load(std::sync::atomic::Ordering::Relaxed)
        && crc64(0, &payload[..body + 2]) != u64::from_le_bytes(crc)
    {
        return Err(PayloadError::VersionOrChecksum);
    }
    let mut r = Reader {
        buf: &payload[..body],
        pos: 0,
    };
    take_failure_reason();
    let mut t = None;
    let value = (|| {
        t = Some(r.byte()?);
        read_object(&mut r, t?, limits)
    })();
    value.ok_or_else(|| {
        // As Redis in a RESTORE: the reason goes to the log at verbose level (an empty
        // collection is refused without one), the client gets "Bad data format".
        let reason = failure_reason(t);
        if reason != EMPTY_KEY {
            tracing::debug!(
                "Internal error in RDB reading offset 0, function at rdb.c:0 -> {reason}"
            );
        }
        PayloadError::BadFormat
    })
}

/// DEBUG SET-SKIP-CHECKSUM-VALIDATION: RESTORE skips the payload's CRC-64 check (the value is
/// still decoded and validated in full).
pub static SKIP_CHECKSUM: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

thread_local! {
    /// Why the object being decoded on this thread was refused, where the decoder knows more
    /// than its type (see [`fail`]).
    static FAILURE_REASON: std::cell::Cell<Option<&'static str>> = const { std::cell::Cell::new(None) };
}

/// The reason given for a collection with no elements: RESTORE refuses it, loading a file
/// skips the key (as Redis 7.0 does for files written by versions that could hold them).
pub(crate) const EMPTY_KEY: &str = "empty key";

/// Refuse the object being decoded, naming why (for the log line Redis writes).
pub(crate) fn fail<T>(reason: &'static str) -> Option<T> {
    FAILURE_REASON.with(|r| r.set(Some(reason)));
    None
}

pub(crate) fn take_failure_reason() -> Option<&'static str> {
    FAILURE_REASON.with(|r| r.take())
}

/// Redis's words for a refused object of RDB type `t`: the reason the decoder gave, or the
/// integrity check of the type's encoding.
pub(crate) fn failure_reason(t: Option<u8>) -> &'static str {
    if let Some(reason) = take_failure_reason() {
        return reason;
    }
    match t {
        Some(TYPE_LIST_ZIPLIST) => "List ziplist integrity check failed.",
        Some(TYPE_LIST_QUICKLIST) => "Ziplist integrity check failed.",
        Some(TYPE_LIST_QUICKLIST_2) => "Listpack integrity check failed.",
        Some(TYPE_SET_INTSET) => "Intset integrity check failed.",
        Some(TYPE_ZSET_ZIPLIST) => "Zset ziplist integrity check failed.",
        Some(TYPE_ZSET_LISTPACK) => "Zset listpack integrity check failed.",
        Some(9) => "Zipmap integrity check failed.",
        Some(TYPE_HASH_ZIPLIST) => "Hash ziplist integrity check failed.",
        Some(TYPE_HASH_LISTPACK) => "Hash listpack integrity check failed.",
        Some(15 | 19 | 21) => "Stream listpack integrity check failed.",
        Some(TYPE_STRING) => "String integrity check failed.",
        Some(TYPE_LIST) => "List integrity check failed.",
        Some(TYPE_SET) => "Set integrity check failed.",
        Some(TYPE_ZSET | TYPE_ZSET_2) => "Zset integrity check failed.",
        Some(TYPE_HASH) => "Hash integrity check failed.",
        _ => "Unknown RDB encoding type",
    }
}

/// A cursor over the payload; every read is bounds-checked (None = malformed).
pub(crate) struct Reader<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn byte(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Some(a)
    }

    /// An RDB length, or Err(encoding) for the special string encodings (0xC0 | enc).
    fn len_or_enc(&mut self) -> Option<Result<u64, u8>> {
        let b = self.byte()?;
        Some(match b >> 6 {
            0 => Ok(u64::from(b & 0x3f)),
            1 => Ok((u64::from(b & 0x3f) << 8) | u64::from(self.byte()?)),
            2 => match b {
                0x80 => Ok(u64::from(u32::from_be_bytes(self.array()?))),
                0x81 => Ok(u64::from_be_bytes(self.array()?)),
                _ => return None,
            },
            _ => Err(b & 0x3f),
        })
    }

    pub(crate) fn len(&mut self) -> Option<u64> {
        self.len_or_enc()?.ok()
    }

    /// A count of items each taking at least `min_bytes` bytes: refused when the payload is
    /// too short to hold them (so no allocation is sized by a forged count).
    fn count(&mut self, min_bytes: usize) -> Option<usize> {
        let n = usize::try_from(self.len()?).ok()?;
        (n.checked_mul(min_bytes)? <= self.remaining()).then_some(n)
    }

    /// [`count`](Self::count) for other modules' decoders.
    pub(crate) fn count_items(&mut self, min_bytes: usize) -> Option<usize> {
        self.count(min_bytes)
    }

    /// An RDB string in any of its encodings.
    pub(crate) fn string(&mut self) -> Option<Vec<u8>> {
        match self.len_or_enc()? {
            Ok(n) => {
                let n = usize::try_from(n).ok()?;
                Some(self.take(n)?.to_vec())
            }
            Err(0) => Some((self.byte()? as i8).to_string().into_bytes()),
            Err(1) => Some(i16::from_le_bytes(self.array()?).to_string().into_bytes()),
            Err(2) => Some(i32::from_le_bytes(self.array()?).to_string().into_bytes()),
            Err(3) => {
                let clen = usize::try_from(self.len()?).ok()?;
                let len = usize::try_from(self.len()?).ok()?;
                let src = self.take(clen)?;
                lzf_decompress(src, len)
            }
            Err(_) => None,
        }
    }

    /// A double in the old text form (RDB_TYPE_ZSET): a length byte, 253/254/255 for nan,
    /// +inf and -inf.
    fn text_double(&mut self) -> Option<f64> {
        let n = self.byte()?;
        match n {
            253 => Some(f64::NAN),
            254 => Some(f64::INFINITY),
            255 => Some(f64::NEG_INFINITY),
            _ => parse_double(self.take(n as usize)?),
        }
    }
}

/// Text to a double as Redis's loaders accept it (strtod: the whole text, inf and nan too).
fn parse_double(s: &[u8]) -> Option<f64> {
    let t = std::str::from_utf8(s).ok()?;
    if t.is_empty() || t.trim() != t {
        return None;
    }
    match t.to_ascii_lowercase().as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => Some(f64::INFINITY),
        "-inf" | "-infinity" => Some(f64::NEG_INFINITY),
        "nan" | "+nan" | "-nan" => Some(f64::NAN),
        _ => t.parse::<f64>().ok(),
    }
}

/// LZF (liblzf's format, as Redis compresses long strings): literal runs and back references.
/// `len` is the declared decompressed length, which the data must produce exactly.
fn lzf_decompress(src: &[u8], len: usize) -> Option<Vec<u8>> {
    // A back reference expands 3 bytes into at most 264, a literal run never grows, so the
    // declared length cannot honestly exceed 88x the compressed size: checked before reserving.
    if len > src.len().saturating_mul(88) {
        return None;
    }
    let mut out: Vec<u8> = Vec::with_capacity(len);
    let mut i = 0;
    while i < src.len() {
        let ctrl = usize::from(src[i]);
        i += 1;
        if ctrl < 32 {
            let run = ctrl + 1;
            let lit = src.get(i..i + run)?;
            if out.len() + run > len {
                return None;
            }
            out.extend_from_slice(lit);
            i += run;
        } else {
            let mut n = ctrl >> 5;
            if n == 7 {
                n += usize::from(*src.get(i)?);
                i += 1;
            }
            let back = ((ctrl & 0x1f) << 8) + usize::from(*src.get(i)?) + 1;
            i += 1;
            let n = n + 2;
            if back > out.len() || out.len() + n > len {
                return None;
            }
            // The reference may overlap what it produces (a repeated run): byte by byte.
            let from = out.len() - back;
            for k in 0..n {
                let b = out[from + k];
                out.push(b);
            }
        }
    }
    (out.len() == len).then_some(out)
}

/// One element of a ziplist or listpack: text or an integer.
pub(crate) enum Elem<'a> {
    Str(&'a [u8]),
    Int(i64),
}

impl Elem<'_> {
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        match self {
            Elem::Str(s) => s.to_vec(),
            Elem::Int(v) => v.to_string().into_bytes(),
        }
    }

    fn to_f64(&self) -> Option<f64> {
        match self {
            Elem::Str(s) => parse_double(s),
            Elem::Int(v) => Some(*v as f64),
        }
    }
}

/// `k` bytes of `buf` at `at` as a little-endian unsigned integer (None past the end): the
/// integer entries of listpacks and ziplists.
fn read_le(buf: &[u8], at: usize, k: usize) -> Option<u64> {
    let s = buf.get(at..at.checked_add(k)?)?;
    Some(s.iter().rev().fold(0u64, |a, &x| (a << 8) | u64::from(x)))
}

fn sign_extend(v: u64, bits: u32) -> i64 {
    let shift = 64 - bits;
    ((v << shift) as i64) >> shift
}

/// The elements of a listpack (Redis 7.0's compact encoding), validated as Redis's deep
/// sanitization does: header size and count, every entry's back-length, the terminator.
pub(crate) fn listpack(lp: &[u8]) -> Option<Vec<Elem<'_>>> {
    if lp.len() < 7 {
        return None;
    }
    let total = u32::from_le_bytes([lp[0], lp[1], lp[2], lp[3]]) as usize;
    let declared = u16::from_le_bytes([lp[4], lp[5]]);
    if total != lp.len() || lp[lp.len() - 1] != 0xFF {
        return None;
    }
    let end = lp.len() - 1;
    let mut out = Vec::new();
    let mut p = 6;
    while p < end {
        let b = lp[p];
        let (elem, size) = if b & 0x80 == 0 {
            (Elem::Int(i64::from(b & 0x7f)), 1)
        } else if b & 0xC0 == 0x80 {
            let n = usize::from(b & 0x3f);
            (Elem::Str(lp.get(p + 1..p + 1 + n)?), 1 + n)
        } else if b & 0xE0 == 0xC0 {
            let v = (u64::from(b & 0x1f) << 8) | u64::from(*lp.get(p + 1)?);
            (Elem::Int(sign_extend(v, 13)), 2)
        } else if b & 0xF0 == 0xE0 {
            let n = (usize::from(b & 0x0f) << 8) | usize::from(*lp.get(p + 1)?);
            (Elem::Str(lp.get(p + 2..p + 2 + n)?), 2 + n)
        } else {
            let le = |k: usize| read_le(lp, p + 1, k);
            match b {
                0xF1 => (Elem::Int(sign_extend(le(2)?, 16)), 3),
                0xF2 => (Elem::Int(sign_extend(le(3)?, 24)), 4),
                0xF3 => (Elem::Int(sign_extend(le(4)?, 32)), 5),
                0xF4 => (Elem::Int(le(8)? as i64), 9),
                0xF0 => {
                    let n = usize::try_from(le(4)?).ok()?;
                    (Elem::Str(lp.get(p + 5..(p + 5).checked_add(n)?)?), 5 + n)
                }
                _ => return None,
            }
        };
        // The back-length: `size` in 7-bit groups, most significant first, all but the first
        // byte with the high bit set (thresholds as listpack.c's lpEncodeBacklen).
        let back_bytes = match size {
            0..=127 => 1,
            128..=16382 => 2,
            16383..=2097150 => 3,
            2097151..=268435454 => 4,
            _ => 5,
        };
        let back = lp.get(p + size..p + size + back_bytes)?;
        let mut decoded = 0u64;
        for (k, &x) in back.iter().enumerate() {
            if (k == 0) == (x & 0x80 != 0) && back_bytes > 1 {
                return None;
            }
            decoded = (decoded << 7) | u64::from(x & 0x7f);
        }
        if decoded != size as u64 {
            return None;
        }
        out.push(elem);
        p += size + back_bytes;
    }
    if p != end || (declared != u16::MAX && usize::from(declared) != out.len()) {
        return None;
    }
    Some(out)
}

/// The elements of a ziplist (the compact encoding before Redis 7.0), validated: header size,
/// tail offset, count, every entry's previous-length, the terminator.
fn ziplist(zl: &[u8]) -> Option<Vec<Elem<'_>>> {
    if zl.len() < 11 {
        return None;
    }
    let total = u32::from_le_bytes([zl[0], zl[1], zl[2], zl[3]]) as usize;
    let tail = u32::from_le_bytes([zl[4], zl[5], zl[6], zl[7]]) as usize;
    let declared = u16::from_le_bytes([zl[8], zl[9]]);
    if total != zl.len() || zl[zl.len() - 1] != 0xFF {
        return None;
    }
    let end = zl.len() - 1;
    let mut out = Vec::new();
    let mut p = 10;
    let mut prev_size = 0usize;
    let mut last_start = 10;
    while p < end {
        let start = p;
        // Previous entry's length: one byte below 254, else 0xFE and 4 bytes.
        let prev = if zl[p] < 254 {
            p += 1;
            usize::from(zl[start])
        } else if zl[p] == 0xFE {
            let s = zl.get(p + 1..p + 5)?;
            p += 5;
            u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize
        } else {
            return None;
        };
        if prev != prev_size {
            return None;
        }
        let b = *zl.get(p)?;
        let le = |k: usize| read_le(zl, p + 1, k);
        let (elem, size) = match b >> 6 {
            0 => {
                let n = usize::from(b & 0x3f);
                (Elem::Str(zl.get(p + 1..p + 1 + n)?), 1 + n)
            }
            1 => {
                let n = (usize::from(b & 0x3f) << 8) | usize::from(*zl.get(p + 1)?);
                (Elem::Str(zl.get(p + 2..p + 2 + n)?), 2 + n)
            }
            2 => {
                if b != 0x80 {
                    return None;
                }
                let s = zl.get(p + 1..p + 5)?;
                let n = u32::from_be_bytes([s[0], s[1], s[2], s[3]]) as usize;
                (Elem::Str(zl.get(p + 5..(p + 5).checked_add(n)?)?), 5 + n)
            }
            _ => match b {
                0xC0 => (Elem::Int(sign_extend(le(2)?, 16)), 3),
                0xD0 => (Elem::Int(sign_extend(le(4)?, 32)), 5),
                0xE0 => (Elem::Int(le(8)? as i64), 9),
                0xF0 => (Elem::Int(sign_extend(le(3)?, 24)), 4),
                0xFE => (Elem::Int(sign_extend(le(1)?, 8)), 2),
                0xF1..=0xFD => (Elem::Int(i64::from(b & 0x0f) - 1), 1),
                _ => return None,
            },
        };
        p += size;
        prev_size = p - start;
        last_start = start;
        out.push(elem);
    }
    let tail_ok = if out.is_empty() {
        tail == 10
    } else {
        tail == last_start
    };
    if p != end || !tail_ok || (declared != u16::MAX && usize::from(declared) != out.len()) {
        return None;
    }
    Some(out)
}

/// The members of an intset: a width (2, 4 or 8), a count, then strictly ascending integers.
fn intset(is: &[u8]) -> Option<Vec<i64>> {
    if is.len() < 8 {
        return None;
    }
    let width = u32::from_le_bytes([is[0], is[1], is[2], is[3]]) as usize;
    let n = u32::from_le_bytes([is[4], is[5], is[6], is[7]]) as usize;
    if !matches!(width, 2 | 4 | 8) || n.checked_mul(width)? + 8 != is.len() {
        return None;
    }
    let vals: Vec<i64> = is[8..]
        .chunks_exact(width)
        .map(|c| match width {
            2 => i64::from(i16::from_le_bytes([c[0], c[1]])),
            4 => i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            _ => i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]),
        })
        .collect();
    vals.windows(2).all(|w| w[0] < w[1]).then_some(vals)
}

/// The elements of a ziplist or listpack that must pair up (member and score, field and value).
fn packed_pairs(blob: &[u8], ziplist_form: bool) -> Option<Vec<Elem<'_>>> {
    let elems = if ziplist_form {
        ziplist(blob)?
    } else {
        listpack(blob)?
    };
    (elems.len() % 2 == 0).then_some(elems)
}

pub(crate) fn read_object(r: &mut Reader<'_>, t: u8, limits: &Limits) -> Option<Value> {
    let value = match t {
        TYPE_STRING => Value::Str(crate::types::compact::CompactBytes::from_vec(r.string()?)),
        TYPE_LIST => {
            let n = r.count(1)?;
            let mut l = List::new();
            for _ in 0..n {
                l.push_back(&r.string()?);
            }
            Value::List(l)
        }
        TYPE_LIST_ZIPLIST => {
            let blob = r.string()?;
            let mut l = List::new();
            for e in ziplist(&blob)?.iter() {
                l.push_back(&e.to_vec());
            }
            Value::List(l)
        }
        TYPE_LIST_QUICKLIST | TYPE_LIST_QUICKLIST_2 => {
            let nodes = r.count(1)?;
            let mut l = List::new();
            for _ in 0..nodes {
                let container = if t == TYPE_LIST_QUICKLIST_2 {
                    r.len()?
                } else {
                    CONTAINER_PACKED
                };
                let blob = r.string()?;
                // A node of no bytes is corrupt, whatever its container (Redis).
                if blob.is_empty() {
                    return fail("Quicklist integrity check failed.");
                }
                match container {
                    CONTAINER_PLAIN => l.push_back(&blob),
                    CONTAINER_PACKED => {
                        let elems = if t == TYPE_LIST_QUICKLIST {
                            ziplist(&blob)?
                        } else {
                            listpack(&blob)?
                        };
                        // Redis skips an empty node (the list is refused if none is left).
                        if elems.is_empty() {
                            continue;
                        }
                        for e in elems.iter() {
                            l.push_back(&e.to_vec());
                        }
                    }
                    _ => return None,
                }
            }
            Value::List(l)
        }
        TYPE_SET => {
            let n = r.count(1)?;
            let mut members = Vec::with_capacity(n);
            for _ in 0..n {
                members.push(r.string()?);
            }
            build_set(members.iter().map(|m| &m[..]), limits)?
        }
        TYPE_SET_INTSET => {
            let blob = r.string()?;
            let members: Vec<Vec<u8>> = intset(&blob)?
                .into_iter()
                .map(|v| v.to_string().into_bytes())
                .collect();
            build_set(members.iter().map(|m| &m[..]), limits)?
        }
        TYPE_ZSET | TYPE_ZSET_2 => {
            let n = r.count(2)?;
            let mut pairs = Vec::with_capacity(n);
            for _ in 0..n {
                let m = r.string()?;
                let score = if t == TYPE_ZSET_2 {
                    f64::from_le_bytes(r.array()?)
                } else {
                    r.text_double()?
                };
                pairs.push((m, score));
            }
            build_zset(pairs, limits)?
        }
        TYPE_ZSET_ZIPLIST | TYPE_ZSET_LISTPACK => {
            let blob = r.string()?;
            let elems = packed_pairs(&blob, t == TYPE_ZSET_ZIPLIST)?;
            let mut pairs = Vec::with_capacity(elems.len() / 2);
            for pair in elems.chunks_exact(2) {
                pairs.push((pair[0].to_vec(), pair[1].to_f64()?));
            }
            build_zset(pairs, limits)?
        }
        TYPE_HASH => {
            let n = r.count(2)?;
            let mut pairs = Vec::with_capacity(n);
            for _ in 0..n {
                let f = r.string()?;
                let v = r.string()?;
                pairs.push((f, v));
            }
            build_hash(pairs, limits)?
        }
        TYPE_HASH_ZIPLIST | TYPE_HASH_LISTPACK => {
            let blob = r.string()?;
            let elems = packed_pairs(&blob, t == TYPE_HASH_ZIPLIST)?;
            let pairs = elems
                .chunks_exact(2)
                .map(|p| (p[0].to_vec(), p[1].to_vec()))
                .collect();
            build_hash(pairs, limits)?
        }
        super::rdb_stream::TYPE_STREAM_LISTPACKS | super::rdb_stream::TYPE_STREAM_LISTPACKS_2 => {
            // An empty stream is a value of its own (XGROUP CREATE MKSTREAM, XADD + XDEL).
            return Some(Value::Stream(Box::new(super::rdb_stream::read_stream(
                r, t,
            )?)));
        }
        // Modules, zipmaps and anything unknown.
        _ => return None,
    };
    let empty = match &value {
        Value::Str(_) => false,
        Value::List(l) => l.is_empty(),
        Value::Set(s) => s.is_empty(),
        Value::Hash(h) => h.is_empty(),
        Value::ZSet(z) => z.is_empty(),
        Value::Stream(_) => false,
    };
    if empty {
        return fail(EMPTY_KEY);
    }
    Some(value)
}

/// A set from its members; None on a repeated member.
fn build_set<'m>(mut members: impl Iterator<Item = &'m [u8]>, limits: &Limits) -> Option<Value> {
    let Some(first) = members.next() else {
        return fail(EMPTY_KEY);
    };
    let mut s = Set::for_member(first);
    s.add(first, limits.set_max_intset);
    for m in members {
        if !s.add(m, limits.set_max_intset) {
            return None;
        }
    }
    Some(Value::Set(Box::new(s)))
}

/// A sorted set from its pairs; None on a repeated member or a NaN score.
fn build_zset(pairs: Vec<(Vec<u8>, f64)>, limits: &Limits) -> Option<Value> {
    let Some(first_len) = pairs.first().map(|p| p.0.len()) else {
        return fail(EMPTY_KEY);
    };
    let mut z = ZSet::new_for(first_len, pairs.len(), &limits.zset);
    for (m, score) in pairs {
        if score.is_nan() {
            return None;
        }
        if !matches!(z.insert(&m, score, &limits.zset), InsertResult::Added) {
            return None;
        }
    }
    Some(Value::ZSet(z))
}

/// A hash from its pairs; None on a repeated field.
fn build_hash(pairs: Vec<(Vec<u8>, Vec<u8>)>, limits: &Limits) -> Option<Value> {
    let mut h = Hash::new();
    for (f, v) in pairs {
        if !h.set(&f, &v, &limits.hash) {
            return None;
        }
    }
    Some(Value::Hash(h))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            hash: HashLimits {
                max_entries: 128,
                max_value: 64,
            },
            zset: ZsetLimits {
                max_entries: 128,
                max_value: 64,
            },
            set_max_intset: 512,
        }
    }

    /// Wrap an object (type byte + body) in the DUMP footer.
    fn payload(body: &[u8]) -> Vec<u8> {
        let mut p = body.to_vec();
        p.extend_from_slice(&RDB_VERSION.to_le_bytes());
        let crc = crc64(0, &p);
        p.extend_from_slice(&crc.to_le_bytes());
        p
    }

    fn strings(v: &Value) -> Vec<Vec<u8>> {
        match v {
            Value::List(l) => l.iter().map(<[u8]>::to_vec).collect(),
            _ => panic!("not a list"),
        }
    }

    #[test]
    fn crc64_matches_redis_check_value() {
        // crc64.c's own test vector.
        assert_eq!(crc64(0, b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    }

    #[test]
    fn string_payload_layout() {
        // Type 0, 6-bit length 5, the bytes, RDB version 10 little-endian, then the CRC of all
        // of that (redis-server 7.0 gives the same bytes for SET k hello; DUMP k, which the
        // integration tests check against a real server when one is installed).
        let got = dump(&Value::Str(crate::types::compact::CompactBytes::new(
            b"hello",
        )));
        assert_eq!(&got[..9], b"\x00\x05hello\x0a\x00");
        assert_eq!(got[9..], crc64(0, &got[..9]).to_le_bytes());
    }

    #[test]
    fn integers_use_the_integer_encodings_and_round_trip() {
        for (text, first) in [
            (&b"12"[..], 0xC0),
            (b"-300", 0xC1),
            (b"70000", 0xC2),
            (b"4294967296", 0x0A),
            (b"012", 0x03),
        ] {
            let v = Value::Str(crate::types::compact::CompactBytes::new(text));
            let p = dump(&v);
            assert_eq!(p[1], first, "{text:?}");
            match restore(&p, &limits()) {
                Ok(Value::Str(s)) => assert_eq!(&s[..], text),
                _ => panic!("round trip of {text:?}"),
            }
        }
    }

    #[test]
    fn footer_is_checked() {
        let mut p = dump(&Value::Str(crate::types::compact::CompactBytes::new(b"x")));
        let n = p.len();
        p[n - 1] ^= 1;
        assert_eq!(
            restore(&p, &limits()).err(),
            Some(PayloadError::VersionOrChecksum)
        );
        assert_eq!(
            restore(b"short", &limits()).err(),
            Some(PayloadError::VersionOrChecksum)
        );
        // A newer RDB version is refused even with a good CRC.
        let mut body = vec![0u8, 1, b'x'];
        body.extend_from_slice(&11u16.to_le_bytes());
        let crc = crc64(0, &body);
        body.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(
            restore(&body, &limits()).err(),
            Some(PayloadError::VersionOrChecksum)
        );
    }

    #[test]
    fn lzf_strings_decode() {
        // "aaaaaaaaaa..." (40 a's): a literal 'a', then a back reference of length 39 at
        // distance 1 (ctrl: len-2 = 37 >= 7, so 7<<5 with an extra length byte 30).
        let compressed = [0x00, b'a', 0xE0, 30, 0x00];
        let mut body = vec![TYPE_STRING, 0xC3];
        put_len(&mut body, compressed.len() as u64);
        put_len(&mut body, 40);
        body.extend_from_slice(&compressed);
        match restore(&payload(&body), &limits()) {
            Ok(Value::Str(s)) => assert_eq!(&s[..], &[b'a'; 40][..]),
            _ => panic!("lzf string"),
        }
        // A reference before the start, or a length that does not match, is refused.
        assert!(lzf_decompress(&[0xE0, 30, 0x05], 40).is_none());
        assert!(lzf_decompress(&compressed, 41).is_none());
        assert!(lzf_decompress(&compressed, 1 << 40).is_none());
    }

    #[test]
    fn listpack_entries_of_every_width_decode() {
        // Build a listpack by hand: 7-bit uint 5, 13-bit int -2, 16-bit int 1000,
        // 24-bit int -100000, 32-bit int 1<<30, 64-bit int 1<<40, 6-bit string "ab",
        // 12-bit string of 100 x's.
        let mut entries: Vec<Vec<u8>> = vec![
            vec![5],
            vec![0xC0 | 0x1f, 0xfe],
            [&[0xF1][..], &1000i16.to_le_bytes()].concat(),
            [&[0xF2][..], &(-100000i32).to_le_bytes()[..3]].concat(),
            [&[0xF3][..], &(1i32 << 30).to_le_bytes()].concat(),
            [&[0xF4][..], &(1i64 << 40).to_le_bytes()].concat(),
            vec![0x82, b'a', b'b'],
            [&[0xE0, 100][..], &[b'x'; 100][..]].concat(),
        ];
        let mut lp = vec![0u8; 6];
        for e in entries.iter_mut() {
            let n = e.len();
            lp.extend_from_slice(e);
            if n < 128 {
                lp.push(n as u8);
            } else {
                lp.push((n >> 7) as u8);
                lp.push((n & 127) as u8 | 128);
            }
        }
        lp.push(0xFF);
        let total = lp.len() as u32;
        lp[..4].copy_from_slice(&total.to_le_bytes());
        lp[4..6].copy_from_slice(&8u16.to_le_bytes());
        let got: Vec<Vec<u8>> = listpack(&lp)
            .expect("valid")
            .iter()
            .map(|e| e.to_vec())
            .collect();
        let want: Vec<Vec<u8>> = [
            "5",
            "-2",
            "1000",
            "-100000",
            "1073741824",
            "1099511627776",
            "ab",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .chain(std::iter::once(vec![b'x'; 100]))
        .collect();
        assert_eq!(got, want);
        // A wrong count, a wrong back-length or a missing terminator is refused.
        let mut bad = lp.clone();
        bad[4] = 9;
        assert!(listpack(&bad).is_none());
        let mut bad = lp.clone();
        bad[7] = 2; // back-length of the first entry
        assert!(listpack(&bad).is_none());
        let mut bad = lp.clone();
        let n = bad.len();
        bad[n - 1] = 0;
        assert!(listpack(&bad).is_none());
        // Every truncation is refused, none panics.
        for cut in 0..lp.len() {
            assert!(listpack(&lp[..cut]).is_none());
        }
    }

    #[test]
    fn ziplist_lists_decode() {
        // Entries: "hi" (string), 7 (immediate), 300 (int16), -5 (int8).
        let bodies: Vec<Vec<u8>> = vec![
            vec![0x02, b'h', b'i'],
            vec![0xF1 + 7],
            [&[0xC0][..], &300i16.to_le_bytes()].concat(),
            vec![0xFE, (-5i8) as u8],
        ];
        let mut zl = vec![0u8; 10];
        let mut prev = 0usize;
        let mut tail = 10;
        for b in &bodies {
            tail = zl.len();
            zl.push(prev as u8);
            zl.extend_from_slice(b);
            prev = 1 + b.len();
        }
        zl.push(0xFF);
        let total = zl.len() as u32;
        zl[..4].copy_from_slice(&total.to_le_bytes());
        zl[4..8].copy_from_slice(&(tail as u32).to_le_bytes());
        zl[8..10].copy_from_slice(&4u16.to_le_bytes());
        let mut body = vec![TYPE_LIST_ZIPLIST];
        put_len(&mut body, zl.len() as u64);
        body.extend_from_slice(&zl);
        let v =
            restore(&payload(&body), &limits()).unwrap_or_else(|e| panic!("ziplist list: {e:?}"));
        assert_eq!(
            strings(&v),
            vec![
                b"hi".to_vec(),
                b"7".to_vec(),
                b"300".to_vec(),
                b"-5".to_vec()
            ]
        );
        for cut in 0..zl.len() {
            assert!(ziplist(&zl[..cut]).is_none());
        }
        let mut bad = zl.clone();
        bad[4] = 11; // tail offset
        assert!(ziplist(&bad).is_none());
    }

    #[test]
    fn intsets_decode_and_must_be_ascending() {
        let mut is = Vec::new();
        is.extend_from_slice(&2u32.to_le_bytes());
        is.extend_from_slice(&3u32.to_le_bytes());
        for v in [-1i16, 5, 9] {
            is.extend_from_slice(&v.to_le_bytes());
        }
        assert_eq!(intset(&is), Some(vec![-1, 5, 9]));
        let mut bad = is.clone();
        bad[8..10].copy_from_slice(&9i16.to_le_bytes());
        assert_eq!(intset(&bad), None);
        assert_eq!(intset(&is[..is.len() - 1]), None);
    }

    #[test]
    fn every_type_round_trips_through_dump() {
        let l = limits();
        let mut list = List::new();
        for i in 0..300 {
            list.push_back(format!("e{i}").as_bytes());
        }
        let mut set = Set::new_intset();
        for i in 0..10 {
            set.add(i.to_string().as_bytes(), 512);
        }
        let mut hash = Hash::new();
        for i in 0..200 {
            hash.set(
                format!("f{i}").as_bytes(),
                format!("v{i}").as_bytes(),
                &l.hash,
            );
        }
        let mut z = ZSet::new_large();
        for i in 0..500 {
            z.insert(format!("m{i}").as_bytes(), i as f64 * 0.5 - 3.0, &l.zset);
        }
        z.insert(b"inf", f64::INFINITY, &l.zset);
        for v in [
            Value::List(list),
            Value::Set(Box::new(set)),
            Value::Hash(hash),
            Value::ZSet(z),
        ] {
            let p = dump(&v);
            let back = restore(&p, &l).unwrap_or_else(|e| panic!("round trip: {e:?}"));
            assert_eq!(dump(&back), p, "{}", v.type_name());
        }
    }

    #[test]
    fn duplicates_empty_collections_and_nan_are_refused() {
        let l = limits();
        // A set with a repeated member.
        let mut body = vec![TYPE_SET];
        put_len(&mut body, 2);
        put_string(&mut body, b"a");
        put_string(&mut body, b"a");
        assert_eq!(
            restore(&payload(&body), &l).err(),
            Some(PayloadError::BadFormat)
        );
        // An empty hash.
        assert_eq!(
            restore(&payload(&[TYPE_HASH, 0]), &l).err(),
            Some(PayloadError::BadFormat)
        );
        // A NaN score.
        let mut body = vec![TYPE_ZSET_2];
        put_len(&mut body, 1);
        put_string(&mut body, b"m");
        body.extend_from_slice(&f64::NAN.to_le_bytes());
        assert_eq!(
            restore(&payload(&body), &l).err(),
            Some(PayloadError::BadFormat)
        );
        // A count far beyond the payload: refused before anything is reserved.
        let mut body = vec![TYPE_LIST];
        put_len(&mut body, u64::from(u32::MAX));
        put_string(&mut body, b"a");
        assert_eq!(
            restore(&payload(&body), &l).err(),
            Some(PayloadError::BadFormat)
        );
        // A stream type byte.
        assert_eq!(
            restore(&payload(&[15, 0]), &l).err(),
            Some(PayloadError::BadFormat)
        );
    }

    #[test]
    fn no_truncation_of_a_valid_payload_panics_or_decodes() {
        let mut z = ZSet::new_large();
        for i in 0..50 {
            z.insert(format!("member{i}").as_bytes(), i as f64, &limits().zset);
        }
        let p = dump(&Value::ZSet(z));
        let body = &p[..p.len() - 10];
        for cut in 1..body.len() {
            assert!(
                restore(&payload(&body[..cut]), &limits()).is_err(),
                "cut {cut}"
            );
        }
    }

    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        /// Valid payloads of every type and encoding the reader knows, to mutate.
        fn seeds() -> Vec<Vec<u8>> {
            let l = limits();
            let mut out = Vec::new();
            let mut list = List::new();
            let mut set = Set::new_intset();
            let mut hash = Hash::new();
            let mut z = ZSet::new_large();
            for i in 0..20 {
                list.push_back(format!("e{i}").as_bytes());
                set.add(i.to_string().as_bytes(), 512);
                hash.set(format!("f{i}").as_bytes(), b"v", &l.hash);
                z.insert(format!("m{i}").as_bytes(), f64::from(i), &l.zset);
            }
            out.push(dump(&Value::List(list)));
            out.push(dump(&Value::Set(Box::new(set))));
            out.push(dump(&Value::Hash(hash)));
            out.push(dump(&Value::ZSet(z)));
            out.push(dump(&Value::Str(crate::types::compact::CompactBytes::new(
                b"12345",
            ))));
            // Compact encodings wrapped as RDB strings: a listpack hash, an intset set, an
            // LZF string.
            let lp = [0x0f, 0, 0, 0, 2, 0, 0x81, b'a', 2, 0x81, b'b', 2, 0xff];
            let mut lp = lp.to_vec();
            let n = lp.len() as u32;
            lp[..4].copy_from_slice(&n.to_le_bytes());
            let mut body = vec![TYPE_HASH_LISTPACK];
            put_len(&mut body, lp.len() as u64);
            body.extend_from_slice(&lp);
            out.push(payload(&body));
            let mut is = vec![];
            is.extend_from_slice(&2u32.to_le_bytes());
            is.extend_from_slice(&2u32.to_le_bytes());
            is.extend_from_slice(&1i16.to_le_bytes());
            is.extend_from_slice(&7i16.to_le_bytes());
            let mut body = vec![TYPE_SET_INTSET];
            put_len(&mut body, is.len() as u64);
            body.extend_from_slice(&is);
            out.push(payload(&body));
            out.push(payload(&[
                TYPE_STRING,
                0xC3,
                5,
                40,
                0x00,
                b'a',
                0xE0,
                30,
                0x00,
            ]));
            out
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(3000))]

            /// Any byte changed, inserted or removed (with the CRC made valid again) gives a
            /// value or an error, never a panic or a runaway allocation.
            #[test]
            fn mutated_payloads_never_panic(
                which in 0usize..8,
                edits in proptest::collection::vec((any::<u16>(), any::<u8>(), 0u8..3), 1..6),
            ) {
                let seeds = seeds();
                let p = &seeds[which % seeds.len()];
                let mut body = p[..p.len() - 10].to_vec();
                for (pos, byte, kind) in edits {
                    let at = usize::from(pos) % (body.len() + 1);
                    match kind {
                        0 if at < body.len() => body[at] = byte,
                        1 => body.insert(at, byte),
                        _ if at < body.len() => {
                            body.remove(at);
                        }
                        _ => {}
                    }
                }
                let _ = restore(&payload(&body), &limits());
            }
        }

        #[test]
        fn the_seeds_are_valid() {
            for (i, p) in seeds().iter().enumerate() {
                assert!(restore(p, &limits()).is_ok(), "seed {i}");
            }
        }
    }
}
