//! `ThinBytes`: an owned byte array behind a single pointer, and `Counted`, one that also
//! keeps an element count in its first bytes.
//!
//! The compact forms of the aggregate values (a small list, hash, set, sorted set or intset)
//! are each one byte array. As a `Box<[u8]>` or a `Vec<u8>` the array's length (and capacity)
//! sit beside the pointer, so the value took 16-24 bytes and `Value` 40. A `ThinBytes` keeps
//! its length in the heap block instead, ahead of the bytes:
//!
//! ```text
//! pointer -> [ len: u32 | len bytes ]
//! ```
//!
//! so each compact form is one 8-byte pointer and `Value` fits in 24 bytes (see
//! `types/mod.rs`). The block is jemalloc's size class of `4 + len` bytes, asked for whole:
//! what jemalloc would hand out for an exact request anyway, so it costs no memory, `MEMORY
//! USAGE` reports exactly it ([`ThinBytes::heap_bytes`]), and an edit that keeps the array in
//! its class ([`ThinBytes::splice`], [`ThinBytes::resize`]) is a `memmove` with no allocator
//! call; one that changes class copies the array into a new block once (an allocation and a
//! free, which are jemalloc's fast paths; `realloc` is not). The empty array allocates
//! nothing: its pointer is that of a static zero header, which is never written nor freed.
//!
//! This is the one place in `types` with `unsafe` for the compact forms: every block says why
//! it holds, and the tests exercise allocation, growth, shrinking, clone, drop, the empty
//! array and long arrays against a `Vec<u8>` model.

use std::alloc::Layout;
use std::ops::Range;
use std::ptr::NonNull;

/// Bytes of the length header ahead of the array's bytes.
const HEADER: usize = std::mem::size_of::<u32>();
/// Longest array a `ThinBytes` holds (its length is a u32, its block a size class above it). The compact forms stay far below
/// it: each converts to its large form long before (see `Counted`'s users).
pub const MAX_LEN: usize = u32::MAX as usize - HEADER;

/// Most bytes a compact form's elements take: past it a hash or sorted set converts to its
/// large form, as Redis's does when its listpack would pass `LISTPACK_MAX_SAFETY_SIZE`
/// (1 GiB). Only a configuration with huge `*-max-listpack-*` limits gets near it; it keeps
/// every [`Counted`] far below [`MAX_LEN`].
pub const PACKED_SAFETY_BYTES: usize = 1 << 30;

/// Whether a compact form of at most `max_entries` elements of at most `max_element` bytes
/// each (prefixes included) may pass [`PACKED_SAFETY_BYTES`]: only then does an insert need
/// to look at the array's length, which the usual limits (128 of 64 bytes) never reach.
#[inline]
pub fn may_pass_safety_bound(max_entries: usize, max_element: usize) -> bool {
    max_entries.saturating_add(1).saturating_mul(max_element) > PACKED_SAFETY_BYTES
}

/// The header of every empty array: length 0, never written, never freed.
static EMPTY: u32 = 0;

/// An owned byte array whose length lives in its heap block (see the module documentation).
pub struct ThinBytes {
    /// The block's length header; the bytes follow it. Points at [`EMPTY`] exactly when the
    /// array is empty.
    head: NonNull<u32>,
}

// SAFETY: a ThinBytes owns its block outright (no other pointer to it exists; the shared
// EMPTY header is only ever read), like a Box<[u8]>, so sending it or sharing `&ThinBytes`
// across threads is as safe as for a Box<[u8]>.
unsafe impl Send for ThinBytes {}
// SAFETY: see Send: `&ThinBytes` only reads.
unsafe impl Sync for ThinBytes {}

/// Largest of jemalloc's small size classes (blocks in slabs, which active defrag may move);
/// past it [`class_of`] asks jemalloc.
pub(crate) const SMALL_MAX: usize = 14336;

/// jemalloc's size class for a request of `n` bytes (`n` > 0), as `crate::alloc::size_class`
/// asks jemalloc for it (a test checks they agree). The small classes (8, 16, then four per
/// doubling, at least 16 bytes apart), where every compact form lives, are computed here
/// because every edit asks; larger ones are asked of jemalloc.
#[inline]
pub(crate) fn class_of(n: usize) -> usize {
    if n <= 8 {
        return 8;
    }
    if n > SMALL_MAX {
        return crate::alloc::size_class(n);
    }
    // 2^k < n <= 2^(k+1)
    let k = usize::BITS - 1 - (n - 1).leading_zeros();
    let spacing = (1usize << k.saturating_sub(2)).max(16);
    (n + spacing - 1) & !(spacing - 1)
}

/// Bytes of the block of an array of `len` bytes (`len` > 0): the whole size class of the
/// header and the bytes, so that an edit that stays within the class needs no allocator call
/// (the bytes past `len` are room, never read), and what jemalloc hands out is exactly what
/// was asked for (MEMORY USAGE and `used_memory` agree).
#[inline]
fn block_size(len: usize) -> usize {
    class_of(HEADER + len)
}

/// The layout of the block of an array of `len` bytes (`len` > 0).
fn block_layout(len: usize) -> Layout {
    assert!(
        len <= MAX_LEN,
        "byte array of {len} bytes is over {MAX_LEN}"
    );
    // Size at most about 5 GiB and align 4: this cannot fail on a 64-bit target.
    Layout::from_size_align(block_size(len), std::mem::align_of::<u32>())
        .unwrap_or_else(|_| panic!("byte array of {len} bytes"))
}

impl ThinBytes {
    /// The empty array (no allocation).
    #[inline]
    pub const fn new() -> ThinBytes {
        ThinBytes {
            head: NonNull::from_ref(&EMPTY),
        }
    }

    /// An array of `len` zero bytes.
    pub fn zeroed(len: usize) -> ThinBytes {
        let mut t = ThinBytes::new();
        t.resize(len);
        t
    }

    /// An array of `len` bytes written by `fill` (which is handed them zeroed).
    pub fn with_len(len: usize, fill: impl FnOnce(&mut [u8])) -> ThinBytes {
        let mut t = ThinBytes::zeroed(len);
        fill(&mut t);
        t
    }

    /// A copy of `b`.
    pub fn from_slice(b: &[u8]) -> ThinBytes {
        ThinBytes::with_len(b.len(), |out| out.copy_from_slice(b))
    }

    #[inline]
    pub fn len(&self) -> usize {
        // SAFETY: `head` always points at a live, initialized u32 header (a block of ours or
        // EMPTY), aligned for it.
        unsafe { self.head.as_ptr().read() as usize }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Move the block to a fuller slab if the relocator picks it (active defrag); true if
    /// it moved. The bytes are unchanged; the empty array has no block.
    pub fn defrag(&mut self, r: &mut crate::alloc::defrag::Relocator) -> bool {
        let len = self.len();
        if len == 0 {
            return false;
        }
        // SAFETY: a non-empty array's block is the global allocator's, of `block_layout(len)`,
        // owned by self alone; on a move it is replaced by the copy at once.
        match unsafe { r.relocate(self.head.cast(), block_layout(len)) } {
            Some(p) => {
                self.head = p.cast();
                true
            }
            None => false,
        }
    }

    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        let len = self.len();
        if len == 0 {
            return &[];
        }
        // SAFETY: a non-empty array's block holds `len` initialized bytes right after its
        // header (every byte is written before it is exposed: see `splice`), and the borrow
        // of self keeps the block alive and unchanged.
        unsafe { std::slice::from_raw_parts(self.head.as_ptr().add(1).cast::<u8>(), len) }
    }

    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let len = self.len();
        if len == 0 {
            return &mut [];
        }
        // SAFETY: as in `as_slice`; the block is ours alone (never EMPTY when non-empty), and
        // the exclusive borrow of self makes this the only reference into it.
        unsafe { std::slice::from_raw_parts_mut(self.head.as_ptr().add(1).cast::<u8>(), len) }
    }

    /// Bytes the allocator hands out for the block (MEMORY USAGE): 0 for the empty array.
    pub fn heap_bytes(&self) -> usize {
        Self::heap_bytes_for(self.len())
    }

    /// [`ThinBytes::heap_bytes`] of an array of `len` bytes: its block, a whole size class.
    pub fn heap_bytes_for(len: usize) -> usize {
        if len == 0 {
            0
        } else {
            block_size(len)
        }
    }

    /// Grow (with zero bytes) or truncate to `new_len`, keeping the bytes before it.
    pub fn resize(&mut self, new_len: usize) {
        let old = self.len();
        if new_len >= old {
            self.splice(old..old, new_len - old);
        } else {
            self.splice(new_len..old, 0);
        }
    }

    /// Replace the bytes of `range` with `n` zero bytes, moving what follows, and return those
    /// `n` bytes to be written. Within the block's size class this moves the tail in place;
    /// across classes it copies the array into a new block (one allocation and one free, the
    /// allocator's fast paths, where `realloc` took its slow one), once.
    ///
    /// Panics if `range` is not within the array.
    #[inline]
    pub fn splice(&mut self, range: Range<usize>, n: usize) -> &mut [u8] {
        let old = self.len();
        assert!(
            range.start <= range.end && range.end <= old,
            "splice {range:?} of {old} bytes"
        );
        let new_len = old - range.len() + n;
        let to = range.start + n;
        let tail = old - range.end;
        if old == 0 || new_len == 0 || block_size(old) != block_size(new_len) {
            return self.splice_moving(range, n);
        }
        // SAFETY: the block is ours (non-empty) and `block_size(new_len)` bytes long, so both
        // the tail's old place (..old) and its new one (..new_len) are inside it; the copy may
        // overlap (memmove). The header stays aligned and `new_len` fits a u32 (at most
        // MAX_LEN: the block's class was computed from it). Zeroing `range.start..to`
        // initializes the only bytes of the array not written before, before any is exposed.
        unsafe {
            let bytes = self.head.as_ptr().add(1).cast::<u8>();
            if tail > 0 && n != range.len() {
                std::ptr::copy(bytes.add(range.end), bytes.add(to), tail);
            }
            self.head.as_ptr().write(new_len as u32);
            std::ptr::write_bytes(bytes.add(range.start), 0, n);
        }
        &mut self.as_mut_slice()[range.start..to]
    }

    /// [`ThinBytes::splice`] into a new block (or none), for a change of size class.
    #[inline(never)]
    fn splice_moving(&mut self, range: Range<usize>, n: usize) -> &mut [u8] {
        let old = self.len();
        let new_len = old - range.len() + n;
        let to = range.start + n;
        let tail = old - range.end;
        if new_len == 0 {
            if old > 0 {
                // SAFETY: the array was non-empty, so `head` is a block of ours allocated with
                // `block_layout(old)`; it is freed once and replaced by EMPTY.
                unsafe { std::alloc::dealloc(self.head.as_ptr().cast(), block_layout(old)) };
                self.head = NonNull::from_ref(&EMPTY);
            }
            return &mut [];
        }
        let layout = block_layout(new_len);
        // SAFETY: the layout's size is at least 8, never zero.
        let block = unsafe { std::alloc::alloc(layout) };
        let Some(head) = NonNull::new(block.cast::<u32>()) else {
            std::alloc::handle_alloc_error(layout)
        };
        // SAFETY: `head` is a fresh block of `block_size(new_len)` bytes, aligned for the
        // header; the old array (if any) is a separate live block of `old` bytes after its
        // header, from which the bytes before `range` and the tail are copied to their new
        // places (inside the new block: range.start + n + tail = new_len), and the region
        // between them is zeroed, so every byte of the array is initialized; the old block is
        // then freed once, with its layout.
        unsafe {
            head.as_ptr().write(new_len as u32);
            let bytes = head.as_ptr().add(1).cast::<u8>();
            if old > 0 {
                let from = self.head.as_ptr().add(1).cast::<u8>();
                std::ptr::copy_nonoverlapping(from, bytes, range.start);
                std::ptr::copy_nonoverlapping(from.add(range.end), bytes.add(to), tail);
                std::alloc::dealloc(self.head.as_ptr().cast(), block_layout(old));
            }
            std::ptr::write_bytes(bytes.add(range.start), 0, n);
        }
        self.head = head;
        &mut self.as_mut_slice()[range.start..to]
    }
}

impl Default for ThinBytes {
    fn default() -> ThinBytes {
        ThinBytes::new()
    }
}

impl Drop for ThinBytes {
    fn drop(&mut self) {
        let len = self.len();
        self.splice(0..len, 0);
    }
}

impl Clone for ThinBytes {
    fn clone(&self) -> ThinBytes {
        ThinBytes::from_slice(self)
    }
}

impl std::ops::Deref for ThinBytes {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::ops::DerefMut for ThinBytes {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl From<&[u8]> for ThinBytes {
    fn from(b: &[u8]) -> ThinBytes {
        ThinBytes::from_slice(b)
    }
}

impl From<Vec<u8>> for ThinBytes {
    /// A copy: the length header has to go ahead of the bytes.
    fn from(v: Vec<u8>) -> ThinBytes {
        ThinBytes::from_slice(&v)
    }
}

impl PartialEq for ThinBytes {
    fn eq(&self, other: &ThinBytes) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for ThinBytes {}

impl std::fmt::Debug for ThinBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ThinBytes({:?})", self.as_slice())
    }
}

/// A [`ThinBytes`] of `count` elements: a LEB128 count, then the elements' bytes (the
/// "body"), whose encoding is the owner's. The empty array stands for 0 elements and no bytes,
/// and holds no allocation. The compact list, hash and sorted-set forms keep their element
/// count this way, inside their one block, where it costs one byte up to 127 elements.
#[derive(Clone, Default, PartialEq, Eq, Debug)]
pub struct Counted {
    bytes: ThinBytes,
}

/// Bytes a LEB128 varint of `n` takes.
#[inline]
pub(crate) fn varint_len(n: usize) -> usize {
    (usize::BITS - (n | 1).leading_zeros()).div_ceil(7) as usize
}

/// Write `n` as a LEB128 varint at the start of `out`, which is [`varint_len`]`(n)` bytes or
/// longer; returns the bytes written.
#[inline]
pub(crate) fn write_varint(out: &mut [u8], mut n: usize) -> usize {
    let mut i = 0;
    while n >= 0x80 {
        out[i] = (n as u8) | 0x80;
        n >>= 7;
        i += 1;
    }
    out[i] = n as u8;
    i + 1
}

impl Counted {
    pub const fn new() -> Counted {
        Counted {
            bytes: ThinBytes::new(),
        }
    }

    /// Move the block to a fuller slab if the relocator picks it (see [`ThinBytes::defrag`]).
    pub fn defrag(&mut self, r: &mut crate::alloc::defrag::Relocator) -> bool {
        self.bytes.defrag(r)
    }

    /// The element count and where the body starts.
    #[inline]
    fn head(&self) -> (usize, usize) {
        let b = self.bytes.as_slice();
        match b.first() {
            None => (0, 0),
            // Up to 127 elements, the usual case: one byte.
            Some(&c) if c < 0x80 => (usize::from(c), 1),
            Some(_) => super::get_varint(b, 0),
        }
    }

    /// Elements held.
    #[inline]
    pub fn count(&self) -> usize {
        self.head().0
    }

    /// The elements' bytes.
    #[inline]
    pub fn body(&self) -> &[u8] {
        let start = self.head().1;
        &self.bytes[start..]
    }

    /// The elements' bytes, to change in place (same length, same count).
    #[inline]
    pub fn body_mut(&mut self) -> &mut [u8] {
        let start = self.head().1;
        &mut self.bytes[start..]
    }

    /// Bytes the allocator hands out for the array (count included).
    pub fn heap_bytes(&self) -> usize {
        self.bytes.heap_bytes()
    }

    /// [`Counted::heap_bytes`] of `count` elements in `body_len` bytes.
    pub fn heap_bytes_for(count: usize, body_len: usize) -> usize {
        if count == 0 && body_len == 0 {
            0
        } else {
            ThinBytes::heap_bytes_for(varint_len(count) + body_len)
        }
    }

    /// Replace the body's bytes in `range` with `n` zero bytes, set the count to `count`, and
    /// return the `n` bytes to be written. A count of 0 with an empty body frees the array.
    pub fn splice(&mut self, range: Range<usize>, n: usize, count: usize) -> &mut [u8] {
        let (old_count, start) = self.head();
        let body_len = self.bytes.len() - start;
        assert!(
            range.start <= range.end && range.end <= body_len,
            "splice {range:?} of a {body_len}-byte body"
        );
        if count == 0 && body_len - range.len() + n == 0 {
            self.bytes = ThinBytes::new();
            return &mut [];
        }
        if start == 0 {
            // A new array: its count and body in one block.
            let width = varint_len(count);
            let out = self.bytes.splice(0..0, width + n);
            write_varint(out, count);
            return &mut out[width..];
        }
        let width = if count == old_count {
            start
        } else {
            varint_len(count)
        };
        if width != start {
            // The count's width changes: redo the prefix, moving the body.
            self.bytes.splice(0..start, width);
        }
        write_varint(&mut self.bytes[..width], count);
        self.bytes.splice(width + range.start..width + range.end, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic byte pattern.
    fn pattern(n: usize, seed: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 31 + seed * 7) as u8).collect()
    }

    #[test]
    fn a_thin_array_is_one_pointer_and_empty_allocates_nothing() {
        assert_eq!(std::mem::size_of::<ThinBytes>(), 8);
        assert_eq!(std::mem::size_of::<Option<ThinBytes>>(), 8);
        let e = ThinBytes::new();
        assert!(e.is_empty());
        assert_eq!(&e[..], b"");
        assert_eq!(e.heap_bytes(), 0);
        assert_eq!(ThinBytes::default(), e);
        let c = e.clone();
        assert!(c.is_empty());
        assert_eq!(ThinBytes::from_slice(b""), e);
        assert_eq!(ThinBytes::zeroed(0), e);
        drop(c);
        drop(e);
    }

    #[test]
    fn construct_clone_and_drop_keep_the_bytes() {
        for n in [1, 3, 4, 12, 28, 60, 61, 1000, 70_000, 1 << 20] {
            let v = pattern(n, n);
            let a = ThinBytes::from_slice(&v);
            let b = ThinBytes::from(v.clone());
            let c = ThinBytes::from(&v[..]);
            let d = ThinBytes::with_len(n, |out| {
                assert!(out.iter().all(|&x| x == 0), "handed zeroed");
                out.copy_from_slice(&v);
            });
            for t in [&a, &b, &c, &d] {
                assert_eq!(t.len(), n);
                assert_eq!(&t[..], &v[..]);
                assert_eq!(t.heap_bytes(), crate::alloc::size_class(4 + n));
            }
            let mut e = a.clone();
            drop(a);
            e[0] ^= 0xff;
            assert_ne!(e, b, "a clone is a separate array");
            assert_eq!(&b[1..], &e[1..]);
            assert!(ThinBytes::zeroed(n).iter().all(|&x| x == 0));
        }
    }

    #[test]
    fn resize_keeps_the_front_and_zeroes_growth() {
        let mut t = ThinBytes::new();
        let mut model: Vec<u8> = Vec::new();
        for (step, n) in [5usize, 9, 9, 2, 0, 0, 40, 4000, 17, 300_000, 1, 0]
            .into_iter()
            .enumerate()
        {
            t.resize(n);
            model.resize(n, 0);
            assert_eq!(&t[..], &model[..], "step {step}");
            // Mark the contents so the next resize has something to keep.
            for (i, b) in t.iter_mut().enumerate() {
                *b = (i + step) as u8;
            }
            for (i, b) in model.iter_mut().enumerate() {
                *b = (i + step) as u8;
            }
        }
        assert_eq!(t.heap_bytes(), 0);
    }

    /// Random splices agree with `Vec::splice` on a model, across growth, shrinking, the
    /// empty array and back.
    #[test]
    fn splice_agrees_with_a_vec() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut t = ThinBytes::new();
        let mut model: Vec<u8> = Vec::new();
        for step in 0..5000 {
            let len = model.len();
            let a = rng.gen_range(0..=len);
            let b = rng.gen_range(a..=len.min(a + 40));
            let n = if step % 97 == 0 {
                rng.gen_range(0..3000)
            } else {
                rng.gen_range(0..30)
            };
            let fill = pattern(n, step);
            let out = t.splice(a..b, n);
            assert_eq!(out.len(), n);
            assert!(out.iter().all(|&x| x == 0));
            out.copy_from_slice(&fill);
            model.splice(a..b, fill);
            assert_eq!(&t[..], &model[..], "step {step}");
            if step % 500 == 499 {
                // Back to empty, then on.
                let all = t.len();
                assert!(t.splice(0..all, 0).is_empty());
                model.clear();
                assert_eq!(t.heap_bytes(), 0);
            }
            if step % 50 == 0 {
                let c = t.clone();
                assert_eq!(c, t);
            }
        }
    }

    #[test]
    fn classes_are_jemallocs_and_edits_within_one_stay_in_place() {
        let mut n = 1;
        while n < 1 << 26 {
            assert_eq!(class_of(n), crate::alloc::size_class(n), "{n}");
            n += if n < 20_000 { 1 } else { n / 97 };
        }
        // 4 + 20 bytes: the 32-byte class holds arrays of 13..=28 bytes in place.
        let mut t = ThinBytes::from_slice(&pattern(20, 3));
        let at = t.as_ptr();
        t.splice(5..5, 8).copy_from_slice(b"12345678");
        t.splice(0..3, 0);
        assert_eq!(t.as_ptr(), at, "no new block within the class");
        assert_eq!(t.len(), 25);
        assert_eq!(t.heap_bytes(), 32);
        t.splice(25..25, 4);
        assert_eq!(t.heap_bytes(), 48, "past the class: a new block");
        let mut model = pattern(20, 3);
        model.splice(5..5, *b"12345678");
        model.drain(0..3);
        model.extend_from_slice(&[0; 4]);
        assert_eq!(&t[..], &model[..]);
    }

    #[test]
    #[should_panic(expected = "splice")]
    fn splice_out_of_range_panics() {
        let mut t = ThinBytes::from_slice(b"abc");
        t.splice(2..4, 1);
    }

    #[test]
    fn arrays_move_between_threads() {
        let t = ThinBytes::from_slice(&pattern(100, 1));
        let back = std::thread::spawn(move || {
            let mut t = t;
            t.resize(200);
            t
        })
        .join()
        .expect("thread");
        assert_eq!(&back[..100], &pattern(100, 1)[..]);
        assert!(back[100..].iter().all(|&x| x == 0));
    }

    #[test]
    fn counted_keeps_its_count_ahead_of_the_body() {
        let mut c = Counted::new();
        assert_eq!((c.count(), c.body(), c.heap_bytes()), (0, &b""[..], 0));
        c.splice(0..0, 3, 1).copy_from_slice(b"abc");
        assert_eq!((c.count(), c.body()), (1, &b"abc"[..]));
        assert_eq!(c.heap_bytes(), crate::alloc::size_class(4 + 1 + 3));
        assert_eq!(c.heap_bytes(), Counted::heap_bytes_for(1, 3));
        c.splice(3..3, 2, 2).copy_from_slice(b"de");
        assert_eq!((c.count(), c.body()), (2, &b"abcde"[..]));
        // A count past 127 takes two bytes, and the body moves with it, both ways.
        c.splice(1..1, 0, 200);
        assert_eq!((c.count(), c.body()), (200, &b"abcde"[..]));
        assert_eq!(c.heap_bytes(), Counted::heap_bytes_for(200, 5));
        c.splice(0..1, 0, 100);
        assert_eq!((c.count(), c.body()), (100, &b"bcde"[..]));
        c.body_mut()[0] = b'B';
        assert_eq!(c.body(), b"Bcde");
        let d = c.clone();
        // Zero elements and no body: the array is freed.
        c.splice(0..4, 0, 0);
        assert_eq!((c.count(), c.body(), c.heap_bytes()), (0, &b""[..], 0));
        assert_eq!((d.count(), d.body()), (100, &b"Bcde"[..]));
        for n in [0usize, 1, 127, 128, 16_383, 16_384, 1 << 30] {
            let mut buf = [0u8; 10];
            let w = write_varint(&mut buf, n);
            assert_eq!(w, varint_len(n));
            assert_eq!(super::super::get_varint(&buf, 0), (n, w));
        }
    }
}
