//! The encodings an RDB object is made of, below any one value type: lengths, strings (plain,
//! as integers, LZF-compressed), and the packed encodings of small collections (listpacks,
//! ziplists, intsets), written and read as Redis's rdb.c, listpack.c, ziplist.c and intset.c
//! lay them out; plus the bounds-checked [`Reader`] every decoder reads through and the
//! per-thread reason a decoder gives when it refuses an object ([`fail`]).
//!
//! The object codec (`super::rdb`) and the stream codec (`super::rdb_stream`) are both built
//! on these, and the object codec hands streams to the stream codec; keeping the encodings
//! here lets both sit on them without importing each other.

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

thread_local! {
    /// Why the object being decoded on this thread was refused, where the decoder knows more
    /// than its type (see [`fail`]).
    static FAILURE_REASON: std::cell::Cell<Option<&'static str>> = const { std::cell::Cell::new(None) };
}

/// Refuse the object being decoded, naming why (for the log line Redis writes).
pub(crate) fn fail<T>(reason: &'static str) -> Option<T> {
    FAILURE_REASON.with(|r| r.set(Some(reason)));
    None
}

pub(crate) fn take_failure_reason() -> Option<&'static str> {
    FAILURE_REASON.with(|r| r.take())
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
    pub(super) fn count(&mut self, min_bytes: usize) -> Option<usize> {
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
    pub(super) fn text_double(&mut self) -> Option<f64> {
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
pub(super) fn lzf_decompress(src: &[u8], len: usize) -> Option<Vec<u8>> {
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

    pub(super) fn to_f64(&self) -> Option<f64> {
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

/// The field/value pairs of a zipmap, the small-hash encoding of RDB files written by Redis
/// 2.x (type 9), validated in full as Redis does before converting one: a count byte (254:
/// "count them"), then per pair a length-prefixed field and a length-prefixed value followed
/// by a "free" byte and that many unused bytes, then 255. A length is one byte below 254, or
/// 254 and a 4-byte little-endian length. The pairs are not checked for repeats here.
pub(crate) fn zipmap(zm: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    const BIGLEN: u8 = 254;
    const END: u8 = 255;
    let declared = *zm.first()?;
    let mut at = 1;
    let length = |at: &mut usize| -> Option<usize> {
        let b = *zm.get(*at)?;
        *at += 1;
        match b {
            END => None,
            BIGLEN => {
                let n = read_le(zm, *at, 4)? as usize;
                *at += 4;
                Some(n)
            }
            n => Some(usize::from(n)),
        }
    };
    let mut pairs = Vec::new();
    while *zm.get(at)? != END {
        let flen = length(&mut at)?;
        let field = zm.get(at..at.checked_add(flen)?)?;
        at += flen;
        let vlen = length(&mut at)?;
        let free = usize::from(*zm.get(at)?);
        at += 1;
        let value = zm.get(at..at.checked_add(vlen)?)?;
        at = at.checked_add(vlen)?.checked_add(free)?;
        pairs.push((field, value));
    }
    if at + 1 != zm.len() || (declared < BIGLEN && usize::from(declared) != pairs.len()) {
        return None;
    }
    Some(pairs)
}

/// The elements of a listpack (Redis 7.0's compact encoding), validated as Redis's deep
/// sanitization does: header size and count, every entry's back-length, the terminator.
#[cfg(test)]
pub(crate) fn listpack(lp: &[u8]) -> Option<Vec<Elem<'_>>> {
    listpack_checked(lp, true)
}

/// The elements of a listpack. `deep` checks what Redis's deep sanitization checks (every
/// entry's back-length and the header's count); without it, what its shallow check does (the
/// header's size and the terminator). Either way every entry is decoded within the buffer's
/// bounds, so a payload that passes cannot make the decoder read outside it; what the deep
/// checks add matters to Redis, which keeps the listpack and walks it later (backwards too),
/// not to Podium, which builds its own structures from the entries.
pub(crate) fn listpack_checked(lp: &[u8], deep: bool) -> Option<Vec<Elem<'_>>> {
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
        if deep {
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
        }
        out.push(elem);
        p += size + back_bytes;
    }
    if p != end || (deep && declared != u16::MAX && usize::from(declared) != out.len()) {
        return None;
    }
    Some(out)
}

/// The elements of a ziplist (the compact encoding before Redis 7.0), validated: header size,
/// tail offset, count, every entry's previous-length, the terminator.
pub(super) fn ziplist(zl: &[u8]) -> Option<Vec<Elem<'_>>> {
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
#[cfg(test)]
pub(super) fn intset(is: &[u8]) -> Option<Vec<i64>> {
    intset_checked(is, true)
}

/// The members of an intset; the ascending order is checked when `deep` (Redis's deep
/// sanitization), the width and the size always (its shallow check).
pub(super) fn intset_checked(is: &[u8], deep: bool) -> Option<Vec<i64>> {
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
    (!deep || vals.windows(2).all(|w| w[0] < w[1])).then_some(vals)
}

/// The elements of a ziplist or listpack that must pair up (member and score, field and value).
/// A ziplist is always checked in full (Redis converts ziplists as it loads them, and checks
/// them in full whatever `sanitize-dump-payload` says); a listpack in full when `deep`.
pub(super) fn packed_pairs(blob: &[u8], ziplist_form: bool, deep: bool) -> Option<Vec<Elem<'_>>> {
    let elems = if ziplist_form {
        ziplist(blob)?
    } else {
        listpack_checked(blob, deep)?
    };
    (elems.len() % 2 == 0).then_some(elems)
}

/// INFO's dump_payload_sanitizations: listpacks and intsets sanitized in depth, counted as
/// Redis counts them (each quicklist node and stream node apart; ziplists, zipmaps and plain
/// encodings are not counted, Redis checks those in full whatever the directive says).
/// CONFIG RESETSTAT zeroes it.
pub static DUMP_PAYLOAD_SANITIZATIONS: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(0);

pub(crate) fn count_sanitization() {
    DUMP_PAYLOAD_SANITIZATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::zipmap;

    /// The zipmap of Redis's tests/assets/hash-zipmap.rdb ({f1: v1, f2: v2}), one with a long
    /// value (the 254 + 4-byte length form) and free bytes, and corrupt ones.
    #[test]
    fn zipmaps_decode_and_corrupt_ones_are_refused() {
        let asset = b"\x02\x02f1\x02\x00v1\x02f2\x02\x00v2\xff";
        assert_eq!(
            zipmap(asset),
            Some(vec![(&b"f1"[..], &b"v1"[..]), (&b"f2"[..], &b"v2"[..])])
        );
        let long = vec![b'x'; 300];
        let mut zm = vec![0xfe, 1, b'k', 0xfe];
        zm.extend_from_slice(&300u32.to_le_bytes());
        zm.push(3);
        zm.extend_from_slice(&long);
        zm.extend_from_slice(&[0, 0, 0, 0xff]);
        assert_eq!(zipmap(&zm), Some(vec![(&b"k"[..], &long[..])]));
        assert_eq!(zipmap(b"\x00\xff"), Some(vec![]));
        // Wrong count, truncated, missing or early end, free bytes past the end.
        for bad in [
            &b"\x03\x02f1\x02\x00v1\x02f2\x02\x00v2\xff"[..],
            b"\x02\x02f1\x02\x00v1\x02f2\x02\x00v2",
            b"\x02\x02f1\x02\x00v1\x02f2\x02\x00v",
            b"\x01\x02f1\xff",
            b"\x01\x02f1\x02\x05v1\xff",
            b"\x01\x02f1\x02\x00v1\xff\xff",
            b"",
        ] {
            assert_eq!(zipmap(bad), None, "{bad:?}");
        }
    }
}
