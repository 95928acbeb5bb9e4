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
pub mod thin;
pub mod zset;

/// A key's value: 24 bytes. A string is a `CompactBytes` (24 bytes, its inline length a byte
/// with 24 valid values); every other variant is at most 16 bytes (a tag and a pointer), so
/// the compiler keeps the variant in that length byte's spare values and lays the others out
/// beside it, with no tag of its own. A keyspace record (an 8-byte header, the value, the key)
/// then takes jemalloc's 48-byte class for a key of up to 16 bytes.
#[derive(Clone)]
pub enum Value {
    /// Short strings (counters, flags, small JSON fragments) inline in the keyspace slot.
    Str(compact::CompactBytes),
    // A small list is one counted array, a large one a boxed deque (see list::List).
    List(list::List),
    // A small hash is one counted array, a large one boxed (see hash::Hash).
    Hash(hash::Hash),
    // A small set is one array (intset or SmallSet), a large one boxed (see set::Set).
    Set(set::Set),
    // A small sorted set is one counted array, a large one boxed (see zset::ZSet).
    ZSet(zset::ZSet),
    // Boxed: a stream's header (IDs, counters, maps) is larger than a keyspace slot should be.
    Stream(Box<stream::Stream>),
}

// A keyspace record holds a Value; keep it at three words (the record test pins the total).
const _: () = assert!(std::mem::size_of::<Value>() == 24);
const _: () = assert!(std::mem::size_of::<list::List>() <= 16);
const _: () = assert!(std::mem::size_of::<hash::Hash>() <= 16);
const _: () = assert!(std::mem::size_of::<set::Set>() <= 16);
const _: () = assert!(std::mem::size_of::<zset::ZSet>() <= 16);

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

impl Value {
    /// Elements the value holds (a string counts as one): what a defrag pass walks (values
    /// over `active-defrag-max-scan-fields` over several steps) and a long command's cost.
    pub fn elements(&self) -> usize {
        match self {
            Value::Str(_) => 1,
            Value::List(l) => l.len(),
            Value::Hash(h) => h.len(),
            Value::Set(s) => s.len(),
            Value::ZSet(z) => z.len(),
            Value::Stream(s) => s.length as usize,
        }
    }

    /// Active defrag: move the value's heap blocks that sit in sparse slabs to fuller ones,
    /// elements `from` on, at most `budget` of them; returns where to go on from, or None
    /// when the value is done. What the value holds is unchanged.
    pub fn defrag(
        &mut self,
        r: &mut crate::alloc::defrag::Relocator,
        from: usize,
        budget: usize,
    ) -> Option<usize> {
        match self {
            Value::Str(compact::CompactBytes::Heap(b)) => {
                r.boxed_bytes(b);
                None
            }
            Value::Str(compact::CompactBytes::Inline { .. }) => None,
            Value::List(l) => l.defrag(r, from, budget),
            Value::Hash(h) => h.defrag(r, from, budget),
            Value::Set(s) => s.defrag(r, from, budget),
            Value::ZSet(z) => z.defrag(r, from, budget),
            Value::Stream(s) => {
                if from == 0 {
                    r.boxed(s);
                }
                s.defrag(r, from, budget)
            }
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
    fn a_value_is_three_words() {
        // The keyspace stores each entry in a record: an 8-byte header, this value and the
        // key; at 24 bytes a record of a key up to 16 bytes is jemalloc's 48-byte class.
        assert_eq!(std::mem::size_of::<super::Value>(), 24);
        assert_eq!(std::mem::size_of::<Option<super::Value>>(), 24);
    }
}
