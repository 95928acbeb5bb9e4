//! `CompactBytes`: how the keyspace stores a key's bytes (`keyspace::CompactBytes`) and a string value's.
//!
//! Up to [`INLINE_MAX`] bytes (`k:000000123456`, `player:123456`, `leaderboard:global`, a
//! counter, a short flag) live inside the hash-table slot itself, next to the entry; longer ones
//! are an exactly sized `Box<[u8]>` on the heap. A lookup of a large keyspace then costs one
//! cache miss for the slot instead of two (slot, then the key's separate allocation to compare
//! it), a GET of a short value one more miss fewer (its bytes are in the same slot), and
//! neither needs an allocation of its own.
//!
//! The type is 24 bytes, and `Value` (which holds it) too: the inline length is an
//! [`InlineLen`], a byte with 24 valid values, so the compiler keeps the variant in that byte's
//! other values, and the heap form (pointer and length, 16 bytes) fits beside it. `Value`'s
//! other variants, 16 bytes at most, fit beside it the same way (see `types/mod.rs`).
//!
//! `CompactBytes` hashes, compares and borrows exactly as the `[u8]` it holds, so maps keyed by
//! it are looked up with plain `&[u8]`.

use bytes::Bytes;
use std::borrow::Borrow;
use std::hash::{Hash, Hasher};

/// Longest byte string stored inline.
pub const INLINE_MAX: usize = 23;

/// The length of an inline string: 0..=[`INLINE_MAX`], and nothing else, so that the byte
/// holding it leaves 232 values free for the enclosing enums' variants.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
#[rustfmt::skip]
pub enum InlineLen {
    L0, L1, L2, L3, L4, L5, L6, L7, L8, L9, L10, L11,
    L12, L13, L14, L15, L16, L17, L18, L19, L20, L21, L22, L23,
}

impl InlineLen {
    #[rustfmt::skip]
    const ALL: [InlineLen; INLINE_MAX + 1] = {
        use InlineLen::*;
        [
            L0, L1, L2, L3, L4, L5, L6, L7, L8, L9, L10, L11,
            L12, L13, L14, L15, L16, L17, L18, L19, L20, L21, L22, L23,
        ]
    };

    /// The length `n`; panics past [`INLINE_MAX`] (callers check first).
    #[inline]
    pub fn of(n: usize) -> InlineLen {
        InlineLen::ALL[n]
    }

    #[inline]
    pub fn get(self) -> usize {
        self as usize
    }
}

#[derive(Clone)]
pub enum CompactBytes {
    Inline {
        len: InlineLen,
        buf: [u8; INLINE_MAX],
    },
    Heap(Box<[u8]>),
}

const _: () = assert!(std::mem::size_of::<CompactBytes>() == 24);

impl CompactBytes {
    pub fn new(b: &[u8]) -> CompactBytes {
        if b.len() <= INLINE_MAX {
            let mut buf = [0u8; INLINE_MAX];
            buf[..b.len()].copy_from_slice(b);
            CompactBytes::Inline {
                len: InlineLen::of(b.len()),
                buf,
            }
        } else {
            CompactBytes::Heap(Box::from(b))
        }
    }

    /// Bytes allocated outside the inline form: the heap copy's allocation (MEMORY USAGE).
    pub fn heap_bytes(&self) -> usize {
        match self {
            CompactBytes::Inline { .. } => 0,
            CompactBytes::Heap(b) => crate::alloc::size_class(b.len()),
        }
    }

    /// [`CompactBytes::heap_bytes`] of `b` once stored.
    pub fn heap_bytes_of(b: &[u8]) -> usize {
        if b.len() <= INLINE_MAX {
            0
        } else {
            crate::alloc::size_class(b.len())
        }
    }

    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            CompactBytes::Inline { len, buf } => &buf[..len.get()],
            CompactBytes::Heap(b) => b,
        }
    }

    /// Takes `b`'s buffer when it is too long to be stored inline and `b` is its only owner
    /// (a copy otherwise).
    pub fn from_bytes(b: Bytes) -> CompactBytes {
        if b.len() <= INLINE_MAX {
            CompactBytes::new(&b)
        } else {
            CompactBytes::from_vec(Vec::from(b))
        }
    }

    /// Takes `v` without copying when it is too long to be stored inline (spare capacity is
    /// given back: the heap form is exactly sized).
    pub fn from_vec(v: Vec<u8>) -> CompactBytes {
        if v.len() <= INLINE_MAX {
            CompactBytes::new(&v)
        } else {
            CompactBytes::Heap(v.into_boxed_slice())
        }
    }

    /// The bytes as a `Vec`, reusing the heap allocation (no copy).
    pub fn into_vec(self) -> Vec<u8> {
        match self {
            CompactBytes::Inline { .. } => self.as_bytes().to_vec(),
            CompactBytes::Heap(b) => b.into_vec(),
        }
    }

    /// Append `tail` (APPEND). The heap form is grown to the exact new length: jemalloc grows
    /// a block within its size class in place, and its classes are at most 25% apart, so a
    /// string built by many appends is copied only when it crosses into the next class
    /// (amortized O(1) per byte, as Redis's sds with its preallocation).
    pub fn append(&mut self, tail: &[u8]) {
        let mut v = std::mem::take(self).into_vec();
        v.reserve_exact(tail.len());
        v.extend_from_slice(tail);
        *self = CompactBytes::from_vec(v);
    }

    /// The bytes as a `Bytes` (a copy).
    pub fn to_bytes(&self) -> Bytes {
        Bytes::copy_from_slice(self.as_bytes())
    }
}

impl Default for CompactBytes {
    /// The empty string.
    fn default() -> Self {
        CompactBytes::Inline {
            len: InlineLen::L0,
            buf: [0; INLINE_MAX],
        }
    }
}

impl std::ops::Deref for CompactBytes {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl Borrow<[u8]> for CompactBytes {
    #[inline]
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl Hash for CompactBytes {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Must match `<[u8] as Hash>` for lookups by `&[u8]` (Borrow's contract).
        self.as_bytes().hash(state);
    }
}

impl PartialEq for CompactBytes {
    #[inline]
    fn eq(&self, other: &CompactBytes) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for CompactBytes {}

impl std::fmt::Debug for CompactBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hashbrown::HashMap;

    #[test]
    fn inline_and_heap_strings_behave_like_their_bytes() {
        assert_eq!(std::mem::size_of::<CompactBytes>(), 24);
        assert_eq!(std::mem::size_of::<Option<CompactBytes>>(), 24);
        let mut m: HashMap<CompactBytes, u32> = HashMap::new();
        let short = b"k:000000123456".to_vec();
        let edge = vec![b'x'; INLINE_MAX];
        let long = vec![b'y'; INLINE_MAX + 1];
        let empty: Vec<u8> = Vec::new();
        for (i, k) in [&short, &edge, &long, &empty].into_iter().enumerate() {
            let key = CompactBytes::new(k);
            assert_eq!(&key[..], &k[..]);
            assert_eq!(key.to_bytes(), Bytes::copy_from_slice(k));
            assert_eq!(
                matches!(key, CompactBytes::Inline { .. }),
                k.len() <= INLINE_MAX
            );
            m.insert(key, i as u32);
        }
        assert_eq!(m.get(&short[..]), Some(&0));
        assert_eq!(m.get(&edge[..]), Some(&1));
        assert_eq!(m.get(&long[..]), Some(&2));
        assert_eq!(m.get(&empty[..]), Some(&3));
        assert_eq!(m.get(&b"k:000000123457"[..]), None);
        assert_eq!(CompactBytes::new(b"ab"), CompactBytes::new(b"ab"));
        assert_ne!(CompactBytes::new(b"ab"), CompactBytes::new(b"abc"));
    }

    #[test]
    fn conversions_keep_bytes_and_pick_the_form_by_length() {
        for n in [0, 1, INLINE_MAX - 1, INLINE_MAX, INLINE_MAX + 1, 1000] {
            let v: Vec<u8> = (0..n).map(|i| i as u8).collect();
            let inline = n <= INLINE_MAX;
            let a = CompactBytes::from_vec(v.clone());
            let b = CompactBytes::from_bytes(Bytes::from(v.clone()));
            assert_eq!(matches!(a, CompactBytes::Inline { .. }), inline);
            assert_eq!(matches!(b, CompactBytes::Inline { .. }), inline);
            assert_eq!(&a[..], &v[..]);
            assert_eq!(b.clone().into_vec(), v);
            assert_eq!(a.to_bytes(), Bytes::from(v));
        }
    }

    #[test]
    fn appends_cross_from_inline_to_heap_and_keep_every_byte() {
        let mut s = CompactBytes::default();
        let mut model = Vec::new();
        for i in 0..3000usize {
            let tail: Vec<u8> = (0..i % 13).map(|j| (i + j) as u8).collect();
            s.append(&tail);
            model.extend_from_slice(&tail);
            assert_eq!(&s[..], &model[..]);
            assert_eq!(
                matches!(s, CompactBytes::Inline { .. }),
                model.len() <= INLINE_MAX
            );
            assert_eq!(s.heap_bytes(), CompactBytes::heap_bytes_of(&model));
        }
        for n in 0..=INLINE_MAX {
            assert_eq!(InlineLen::of(n).get(), n);
        }
    }
}
