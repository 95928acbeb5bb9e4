//! `Key`: how the keyspace stores a key's bytes.
//!
//! Keys of up to [`INLINE_MAX`] bytes (`k:000000123456`, `player:123456`,
//! `leaderboard:global`) live inside the hash-table slot itself, next to the entry; longer ones are a `Bytes` on the heap. A lookup of a large
//! keyspace then costs one cache miss for the slot instead of two (slot, then the key's
//! separate allocation to compare it), and a short key needs no allocation of its own.
//!
//! `Key` hashes, compares and borrows exactly as the `[u8]` it holds, so maps keyed by `Key`
//! are looked up with plain `&[u8]`.

use bytes::Bytes;
use std::borrow::Borrow;
use std::hash::{Hash, Hasher};

/// Longest key stored inline.
pub const INLINE_MAX: usize = 23;

#[derive(Clone)]
pub enum Key {
    Inline { len: u8, buf: [u8; INLINE_MAX] },
    Heap(Bytes),
}

impl Key {
    pub fn new(b: &[u8]) -> Key {
        if b.len() <= INLINE_MAX {
            let mut buf = [0u8; INLINE_MAX];
            buf[..b.len()].copy_from_slice(b);
            Key::Inline {
                len: b.len() as u8,
                buf,
            }
        } else {
            Key::Heap(Bytes::copy_from_slice(b))
        }
    }

    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Key::Inline { len, buf } => &buf[..*len as usize],
            Key::Heap(b) => b,
        }
    }

    /// The key as a `Bytes` (a copy for inline keys, a shared reference otherwise).
    pub fn to_bytes(&self) -> Bytes {
        match self {
            Key::Inline { .. } => Bytes::copy_from_slice(self.as_bytes()),
            Key::Heap(b) => b.clone(),
        }
    }
}

impl std::ops::Deref for Key {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl Borrow<[u8]> for Key {
    #[inline]
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl Hash for Key {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Must match `<[u8] as Hash>` for lookups by `&[u8]` (Borrow's contract).
        self.as_bytes().hash(state);
    }
}

impl PartialEq for Key {
    #[inline]
    fn eq(&self, other: &Key) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Key {}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hashbrown::HashMap;

    #[test]
    fn inline_and_heap_keys_behave_like_their_bytes() {
        assert_eq!(std::mem::size_of::<Key>(), 32);
        let mut m: HashMap<Key, u32> = HashMap::new();
        let short = b"k:000000123456".to_vec();
        let edge = vec![b'x'; INLINE_MAX];
        let long = vec![b'y'; INLINE_MAX + 1];
        let empty: Vec<u8> = Vec::new();
        for (i, k) in [&short, &edge, &long, &empty].into_iter().enumerate() {
            let key = Key::new(k);
            assert_eq!(&key[..], &k[..]);
            assert_eq!(key.to_bytes(), Bytes::copy_from_slice(k));
            assert_eq!(matches!(key, Key::Inline { .. }), k.len() <= INLINE_MAX);
            m.insert(key, i as u32);
        }
        assert_eq!(m.get(&short[..]), Some(&0));
        assert_eq!(m.get(&edge[..]), Some(&1));
        assert_eq!(m.get(&long[..]), Some(&2));
        assert_eq!(m.get(&empty[..]), Some(&3));
        assert_eq!(m.get(&b"k:000000123457"[..]), None);
        assert_eq!(Key::new(b"ab"), Key::new(b"ab"));
        assert_ne!(Key::new(b"ab"), Key::new(b"abc"));
    }
}
