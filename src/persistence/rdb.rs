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
//! listpacks; streams (type 19, and 15 from Redis 5 and 6) through `super::rdb_stream`. Module
//! values and zipmaps (Redis 2.x hashes) are refused ("Bad data format"), as are payloads that do not parse, declare more than
//! they hold, hold an empty collection, repeat a member or field, or give a sorted-set member a
//! NaN score. Every declared length is checked against the bytes
//! that remain before anything is allocated for it, so a hostile payload cannot make us reserve
//! more memory than it is long. The decoded value is built through the types' own insert paths,
//! so it takes the compact or the large encoding by the configured limits, as after a load in
//! Redis.
//!
//! Writing uses the plain encodings (string, with the integer form where Redis would use it;
//! list, set, hash; `ZSET_2` with binary scores), which every Redis since 2.6 reads. Redis itself
//! writes listpacks for small collections because that is its in-memory form; the objects are
//! the same. Streams are written as Redis 7.0 writes them (type 19, `super::rdb_stream`).
//! The encodings below an object (lengths, strings, LZF, listpacks, the reader) are
//! `super::rdb_encoding`'s.

use super::rdb_encoding::{
    fail, intset_checked, listpack_checked, packed_pairs, put_len, put_string, put_string_lzf,
    take_failure_reason, ziplist, zipmap, Reader,
};
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
/// Redis 2.x small hashes (read only; Redis converts them on load).
const TYPE_HASH_ZIPMAP: u8 = 9;
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
    /// Sanitize listpacks and intsets in depth (Redis's `deep_integrity_validation`, from
    /// `sanitize-dump-payload`: [`deep_sanitization`]). Each one so checked is counted in
    /// [`DUMP_PAYLOAD_SANITIZATIONS`]. Without it they get Redis's shallow check, and are still
    /// decoded within their bounds.
    pub deep: bool,
}

use super::rdb_encoding::count_sanitization;
pub use super::rdb_encoding::DUMP_PAYLOAD_SANITIZATIONS;

/// Whether `sanitize-dump-payload` (`policy`: no, yes or clients) asks for deep sanitization.
/// `clients` exempts what loads a file or a replication stream (`trusted`: the load, the AOF,
/// our master's link) and users with ACL's `skip-sanitize-payload`, as Redis does.
pub fn deep_sanitization(policy: &str, trusted: bool, user_skips: bool) -> bool {
    match policy {
        "yes" => true,
        "clients" => !trusted && !user_skips,
        _ => false,
    }
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

/// The reason given for a collection with no elements: RESTORE refuses it, loading a file
/// skips the key (as Redis 7.0 does for files written by versions that could hold them).
pub(crate) const EMPTY_KEY: &str = "empty key";

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
        Some(TYPE_HASH_ZIPMAP) => "Zipmap integrity check failed.",
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
                            if limits.deep {
                                count_sanitization();
                            }
                            listpack_checked(&blob, limits.deep)?
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
            if limits.deep {
                count_sanitization();
            }
            let members: Vec<Vec<u8>> = intset_checked(&blob, limits.deep)?
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
            if limits.deep && t == TYPE_ZSET_LISTPACK {
                count_sanitization();
            }
            let elems = packed_pairs(&blob, t == TYPE_ZSET_ZIPLIST, limits.deep)?;
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
            if limits.deep && t == TYPE_HASH_LISTPACK {
                count_sanitization();
            }
            let elems = packed_pairs(&blob, t == TYPE_HASH_ZIPLIST, limits.deep)?;
            let pairs = elems
                .chunks_exact(2)
                .map(|p| (p[0].to_vec(), p[1].to_vec()))
                .collect();
            build_hash(pairs, limits)?
        }
        TYPE_HASH_ZIPMAP => {
            let blob = r.string()?;
            let pairs = zipmap(&blob)?
                .into_iter()
                .map(|(f, v)| (f.to_vec(), v.to_vec()))
                .collect();
            build_hash(pairs, limits)?
        }
        super::rdb_stream::TYPE_STREAM_LISTPACKS | super::rdb_stream::TYPE_STREAM_LISTPACKS_2 => {
            // An empty stream is a value of its own (XGROUP CREATE MKSTREAM, XADD + XDEL).
            return Some(Value::Stream(Box::new(super::rdb_stream::read_stream(
                r,
                t,
                limits.deep,
            )?)));
        }
        // Modules and anything unknown.
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
    Some(Value::Set(s))
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
    use crate::persistence::rdb_encoding::{intset, listpack, lzf_decompress};

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
            deep: true,
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
            assert!(listpack_checked(&lp[..cut], false).is_none());
        }
        // The shallow check (sanitize-dump-payload no) takes a wrong count or back-length, as
        // Redis's does, and still decodes the entries; the terminator it checks.
        let mut bad = lp.clone();
        bad[4] = 9;
        bad[7] = 2;
        let shallow = listpack_checked(&bad, false).expect("shallow check passes");
        assert_eq!(shallow.len(), want.len());
        let n = bad.len();
        bad[n - 1] = 0;
        assert!(listpack_checked(&bad, false).is_none());
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
        // The shallow check leaves the order alone (the set is built member by member, and a
        // repeated member is refused there); the size it checks.
        assert_eq!(
            super::super::rdb_encoding::intset_checked(&bad, false),
            Some(vec![9, 5, 9])
        );
        assert_eq!(
            super::super::rdb_encoding::intset_checked(&is[..is.len() - 1], false),
            None
        );
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
            Value::Set(set),
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
            out.push(dump(&Value::Set(set)));
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
