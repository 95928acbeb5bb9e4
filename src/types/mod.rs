//! Value types stored in the keyspace.

pub(crate) mod arena;
pub mod compact;
pub(crate) mod geohash;
pub mod hash;
pub(crate) mod hll;
pub mod list;
pub mod located;
pub mod set;
pub mod skiplist;
pub mod small_set;
pub mod stream;
pub mod zset;

/// A key's value.
#[derive(Clone)]
pub enum Value {
    /// Short strings (counters, flags, small JSON fragments) inline in the keyspace slot.
    Str(compact::CompactBytes),
    List(list::List),
    // Inline: a small hash is one packed array, a large one boxed (see hash::Hash).
    Hash(hash::Hash),
    // Inline: a set of a few short members is one array (see set::Set), a large one boxed.
    Set(set::Set),
    ZSet(zset::ZSet),
    // Boxed: a stream's header (IDs, counters, maps) is larger than a keyspace slot should be.
    Stream(Box<stream::Stream>),
}

// A keyspace record holds a Value; keep it at five words (the record test pins the total).
const _: () = assert!(std::mem::size_of::<Value>() <= 40);

impl Value {
    /// The name TYPE reports.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::List(_) => "list",
            Value::Hash(_) => "hash",
            Value::Set(_) => "set",
            Value::ZSet(_) => "zset",
            Value::Stream(_) => "stream",
        }
    }

    /// The name OBJECT ENCODING reports. A string's is Redis's rule for the encoding it would
    /// choose (an integer up to 20 characters is "int", up to 44 bytes "embstr", longer
    /// "raw"); Podium keeps every string the same way.
    pub fn encoding_name(&self) -> &'static str {
        match self {
            Value::Str(s) => {
                if s.len() <= 20 && crate::util::numtext::parse_i64(s).is_some() {
                    "int"
                } else if s.len() <= 44 {
                    "embstr"
                } else {
                    "raw"
                }
            }
            Value::ZSet(z) => z.encoding_name(),
            Value::Hash(h) => h.encoding_name(),
            Value::Set(s) => s.encoding_name(),
            Value::List(l) => l.encoding_name(),
            Value::Stream(_) => "stream",
        }
    }
}

/// The error a command gets for a key of the wrong type.
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// Append `n` as a LEB128 varint: the length prefix of the packed small encodings (a small
/// hash's fields and values, a small sorted set's members).
pub(crate) fn put_varint(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// The LEB128 varint at `pos` of `buf` (written by [`put_varint`]), and the position after it.
#[inline]
pub(crate) fn get_varint(buf: &[u8], mut pos: usize) -> (usize, usize) {
    let mut n = 0usize;
    let mut shift = 0;
    loop {
        let b = buf[pos];
        pos += 1;
        n |= usize::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return (n, pos);
        }
        shift += 7;
    }
}

/// `count` distinct indices of `0..n` in random order (a partial Fisher-Yates shuffle);
/// `count` must be below `n`. Used for the compact encodings' distinct random picks.
pub fn distinct_indices(n: usize, count: usize, rng: &mut impl rand::Rng) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..n).collect();
    for k in 0..count {
        let j = rng.gen_range(k..n);
        idx.swap(k, j);
    }
    idx.truncate(count);
    idx
}

#[cfg(test)]
mod layout_tests {
    #[test]
    fn a_value_with_an_inline_string_is_no_bigger_than_before() {
        // The keyspace stores `(Key, Entry)` in its table slots; a string value is 24 bytes
        // inline or a `Bytes` (32), so `Value` stays 40 bytes with its tag.
        assert!(std::mem::size_of::<super::Value>() <= 40);
    }
}
