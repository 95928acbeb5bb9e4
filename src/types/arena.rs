//! `Arena<T>`: the growable array behind the skip list's nodes, towers and member-index
//! buckets.
//!
//! # What this owns
//!
//! One contiguous run of `Copy` elements, addressed by index, that only grows at its end (the
//! skip list frees slots into its own free lists and compacts by building a new arena). Every
//! element is at `base + index * size_of::<T>()`, so following a link (a `u32` slot number) is
//! one load.
//!
//! # Why not a `Vec`, and why not chunks
//!
//! A `Vec` that grows copies everything it holds: a ZADD that grew a 10M-member set's 320 MB of
//! nodes would copy them while holding the shard's lock (a stall of ~100 ms for every client of
//! that shard), and its spare capacity (a growth step's worth) counts as memory. Fixed-size
//! chunks, what this replaced, never copy and waste at most one chunk, but following a link
//! then took two dependent loads (the chunk's address from a directory, then the element), and
//! a walk or a descent waits for both at every step: the flat layout measured 2.5-15% less
//! server CPU per request on the sorted-set commands at P=16 (`bench/ab.py`, 1M members:
//! top100 15%, ZADD and ZINCRBY 12%, ZREVRANK 7%, around 4%, ZSCORE 2.5%).
//!
//! So an arena lives on the heap as a `Vec` while it is small (up to [`MAP_MIN`] bytes, growing
//! geometrically, then by a quarter), and past that in an anonymous private mapping. A mapping's
//! pages take memory only once written, and it grows by `mremap`, which moves the pages'
//! table entries rather than their contents (no copy, no stall; the address may change, the
//! indices do not). The memory it counts in `used_memory` (and so against `maxmemory`) is the
//! pages written so far, added to the allocator's count ([`crate::alloc::count_outside`]);
//! transparent huge pages are declined for it, so what is resident follows what was written.
//! Where a mapping cannot be made or grown (`vm.max_map_count` reached, an address-space
//! limit) the arena stays on or moves to the heap and grows as a `Vec` does: slower to grow,
//! never wrong.
//!
//! The member index's bucket table is one too, though it never grows (it is rebuilt at a new
//! size): a dropped mapping is unmapped at once, where a freed heap table stayed resident as
//! the allocator's dirty pages until their decay (~1 MB at 1M members, seen in the RSS read
//! right after a fill).

use std::ptr::NonNull;

/// Arrays larger than this many bytes move to a mapping (64 KiB: what a chunk held before; a
/// set needs about 2,000 members for its nodes to get there).
pub const MAP_MIN: usize = 64 * 1024;

const PAGE: usize = 4096;

/// The elements' storage once mapped.
struct Mapping {
    /// Bytes mapped (a multiple of the page size).
    bytes: usize,
    /// Bytes counted in `used_memory`: the pages written so far.
    counted: usize,
}

pub struct Arena<T: Copy> {
    /// The first element: `heap`'s buffer while small, the mapping's start once mapped.
    base: NonNull<T>,
    len: usize,
    /// The storage while small (empty once mapped).
    heap: Vec<T>,
    mapping: Option<Mapping>,
}

// SAFETY: an arena owns its storage exclusively, as a Vec owns its buffer: `base` is only the
// address of memory this value allocated (its Vec's buffer or its own mapping) and frees on
// drop; nothing else holds it. Shared access hands out `&T` only through `&self`.
unsafe impl<T: Copy + Send> Send for Arena<T> {}
// SAFETY: as above; `&Arena` gives only shared references to elements.
unsafe impl<T: Copy + Sync> Sync for Arena<T> {}

/// Round `bytes` up to whole pages.
fn pages(bytes: usize) -> usize {
    bytes.div_ceil(PAGE) * PAGE
}

/// Grow a Vec geometrically, but by only a quarter once it is big, to bound its slack.
pub(crate) fn grow_heap<T>(v: &mut Vec<T>, additional: usize) {
    let need = v.len() + additional;
    if need > v.capacity() {
        let cap = v.capacity();
        let step = if cap < 4096 { cap.max(8) } else { cap / 4 };
        let target = need.max(cap + step);
        v.reserve_exact(target - v.len());
    }
}

/// A fresh anonymous private mapping of `bytes` (a multiple of the page size), or None.
fn map(bytes: usize) -> Option<NonNull<u8>> {
    // SAFETY: asks the kernel for new memory at an address of its choosing; nothing existing
    // is touched. The result is checked against MAP_FAILED before use.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    // No transparent huge pages: where they are on for every mapping (`enabled=always`), each
    // arena's last, partly written 2 MiB page would be resident whole, up to 2 MiB per set
    // beyond what it holds. (The hint follows the mapping through `mremap`.)
    #[cfg(target_os = "linux")]
    // SAFETY: advice on the range just mapped; it changes no contents, and a failure (an old
    // kernel) only leaves the default.
    unsafe {
        libc::madvise(p, bytes, libc::MADV_NOHUGEPAGE);
    }
    NonNull::new(p.cast::<u8>())
}

/// Unmap `bytes` at `p`.
///
/// # Safety
/// `p` and `bytes` must be exactly a mapping made by [`map`] (or grown by [`remap`]) that
/// nothing refers to any more.
unsafe fn unmap(p: NonNull<u8>, bytes: usize) {
    // SAFETY: per this function's contract. A failure (which would mean the contract was
    // broken) leaks the range rather than anything worse.
    unsafe {
        libc::munmap(p.as_ptr().cast(), bytes);
    }
}

/// Grow the mapping at `p` from `old` to `new` bytes, moving it if it must: the new start, or
/// None (the old mapping is then unchanged).
///
/// # Safety
/// `p` and `old` must be exactly a live mapping made by [`map`] or [`remap`]; on success it is
/// gone and only the returned one may be used.
#[cfg(target_os = "linux")]
unsafe fn remap(p: NonNull<u8>, old: usize, new: usize) -> Option<NonNull<u8>> {
    // SAFETY: per this function's contract; with MREMAP_MAYMOVE the kernel moves the pages'
    // table entries (not their contents) to a free range when it cannot extend in place.
    let q = unsafe { libc::mremap(p.as_ptr().cast(), old, new, libc::MREMAP_MAYMOVE) };
    if q == libc::MAP_FAILED {
        return None;
    }
    NonNull::new(q.cast::<u8>())
}

/// Elsewhere: a new mapping and a copy.
///
/// # Safety
/// As the Linux version.
#[cfg(not(target_os = "linux"))]
unsafe fn remap(p: NonNull<u8>, old: usize, new: usize) -> Option<NonNull<u8>> {
    let q = map(new)?;
    // SAFETY: both ranges are mappings of at least `old` bytes and do not overlap (`q` is
    // new); the old one is then unmapped, as the contract allows.
    unsafe {
        std::ptr::copy_nonoverlapping(p.as_ptr(), q.as_ptr(), old);
        unmap(p, old);
    }
    Some(q)
}

impl<T: Copy> Arena<T> {
    const SIZE: usize = std::mem::size_of::<T>();

    /// An empty arena with room for `n` elements.
    pub fn with_capacity(n: usize) -> Self {
        let mut a = Arena {
            base: NonNull::dangling(),
            len: 0,
            heap: Vec::new(),
            mapping: None,
        };
        let bytes = n.saturating_mul(Self::SIZE);
        if bytes <= MAP_MIN || !a.map_with(pages(bytes)) {
            a.heap = Vec::with_capacity(n);
            a.base = NonNull::new(a.heap.as_mut_ptr()).unwrap_or(NonNull::dangling());
        }
        a
    }

    /// An arena of `n` copies of `v`.
    pub fn filled(n: usize, v: T) -> Self {
        let mut a = Arena::with_capacity(n);
        for _ in 0..n {
            a.push(v);
        }
        a
    }

    /// Move the elements into a new mapping of `bytes`: false (nothing changed) if the mapping
    /// cannot be made.
    fn map_with(&mut self, bytes: usize) -> bool {
        debug_assert!(self.mapping.is_none());
        let Some(p) = map(bytes) else {
            return false;
        };
        let base = p.cast::<T>();
        // SAFETY: the mapping is new, page-aligned (so aligned for T) and at least
        // `len * SIZE` bytes (callers map at least what they hold); the heap buffer holds
        // `len` initialized elements.
        unsafe {
            std::ptr::copy_nonoverlapping(self.heap.as_ptr(), base.as_ptr(), self.len);
        }
        self.heap = Vec::new();
        self.base = base;
        let counted = pages(self.len * Self::SIZE);
        crate::alloc::count_outside(counted as isize);
        self.mapping = Some(Mapping { bytes, counted });
        true
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Append `v`.
    #[inline]
    pub fn push(&mut self, v: T) {
        let Some(m) = &self.mapping else {
            return self.push_heap(v);
        };
        if (self.len + 1) * Self::SIZE > m.bytes {
            self.grow_mapping();
            if self.mapping.is_none() {
                // It could not grow and moved to the heap.
                return self.push_heap(v);
            }
        }
        // SAFETY: the mapping holds at least `len + 1` elements (checked or just grown above),
        // and `base` is its aligned start.
        unsafe { self.base.as_ptr().add(self.len).write(v) };
        self.len += 1;
        if let Some(m) = &mut self.mapping {
            let written = self.len * Self::SIZE;
            if written > m.counted {
                let now = pages(written);
                crate::alloc::count_outside((now - m.counted) as isize);
                m.counted = now;
            }
        }
    }

    #[cold]
    fn push_heap(&mut self, v: T) {
        // A mapping is tried when the heap buffer is full and past MAP_MIN (the moment a Vec
        // would copy anyway), not on every push: where mappings fail, that is one failed
        // system call per growth.
        if self.heap.len() == self.heap.capacity()
            && (self.len + 1) * Self::SIZE > MAP_MIN
            && self.map_with(pages(((self.len + 1) * Self::SIZE).max(2 * MAP_MIN)))
        {
            return self.push(v);
        }
        grow_heap(&mut self.heap, 1);
        self.heap.push(v);
        self.len = self.heap.len();
        self.base = NonNull::new(self.heap.as_mut_ptr()).unwrap_or(NonNull::dangling());
    }

    /// Double the mapping (at least one more page).
    #[cold]
    fn grow_mapping(&mut self) {
        let Some(m) = &self.mapping else { return };
        let old = m.bytes;
        let new = pages((old * 2).max(old + Self::SIZE));
        // SAFETY: `base` and `old` are exactly this arena's live mapping; on success only the
        // returned start is used.
        match unsafe { remap(self.base.cast(), old, new) } {
            Some(p) => {
                self.base = p.cast();
                if let Some(m) = &mut self.mapping {
                    m.bytes = new;
                }
            }
            None => self.move_to_heap(new / Self::SIZE),
        }
    }

    /// Where a mapping cannot grow (the address space or `vm.max_map_count` exhausted): copy
    /// the elements into a heap buffer of `capacity` and go on as a Vec.
    #[cold]
    fn move_to_heap(&mut self, capacity: usize) {
        let Some(m) = self.mapping.take() else { return };
        let mut heap = Vec::with_capacity(capacity.max(self.len + 1));
        heap.extend_from_slice(self.as_slice());
        crate::alloc::count_outside(-(m.counted as isize));
        // SAFETY: `base` and `m.bytes` are exactly this arena's mapping, whose elements were
        // just copied; `base` is replaced before anything reads through it again.
        unsafe { unmap(self.base.cast(), m.bytes) };
        self.heap = heap;
        self.base = NonNull::new(self.heap.as_mut_ptr()).unwrap_or(NonNull::dangling());
    }

    /// The elements, in index order.
    #[inline]
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: `base` is aligned and non-null, and the first `len` elements are
        // initialized (written by `push` or copied in `map_with`/`clone`).
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.len) }
    }

    #[inline]
    fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as `as_slice`, through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr(), self.len) }
    }

    /// Bytes this arena holds: the heap buffer's capacity, or the mapping's written pages.
    pub fn bytes(&self) -> usize {
        match &self.mapping {
            Some(m) => m.counted,
            None => self.heap.capacity() * Self::SIZE,
        }
    }

    /// Whether the elements live in a mapping.
    #[cfg(test)]
    fn is_mapped(&self) -> bool {
        self.mapping.is_some()
    }
}

impl<T: Copy> Drop for Arena<T> {
    fn drop(&mut self) {
        if let Some(m) = self.mapping.take() {
            crate::alloc::count_outside(-(m.counted as isize));
            // SAFETY: `base` and `m.bytes` are exactly this arena's mapping, which nothing
            // refers to once the arena is gone.
            unsafe { unmap(self.base.cast(), m.bytes) };
        }
    }
}

impl<T: Copy> Clone for Arena<T> {
    fn clone(&self) -> Self {
        let mut a = Arena::with_capacity(self.len);
        for &v in self.as_slice() {
            a.push(v);
        }
        a
    }
}

impl<T: Copy> std::fmt::Debug for Arena<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arena")
            .field("len", &self.len)
            .field("mapped", &self.mapping.as_ref().map(|m| m.bytes))
            .finish()
    }
}

impl<T: Copy> std::ops::Index<usize> for Arena<T> {
    type Output = T;
    #[inline]
    fn index(&self, i: usize) -> &T {
        &self.as_slice()[i]
    }
}

impl<T: Copy> std::ops::IndexMut<usize> for Arena<T> {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut T {
        &mut self.as_mut_slice()[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq)]
    struct Link {
        a: u32,
        b: u32,
        c: u64,
    }

    fn link(i: usize) -> Link {
        Link {
            a: i as u32,
            b: !(i as u32),
            c: (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
        }
    }

    /// Elements keep their values through the move from the heap to a mapping and through
    /// every growth of the mapping (each `mremap` may move it).
    #[test]
    fn elements_survive_the_move_to_a_mapping_and_its_growth() {
        let n = 1_000_000;
        let mut a = Arena::with_capacity(4);
        for i in 0..n {
            a.push(link(i));
            if i == MAP_MIN / std::mem::size_of::<Link>() - 1 {
                assert!(!a.is_mapped(), "still on the heap at {} bytes", MAP_MIN);
            }
        }
        assert!(a.is_mapped());
        assert_eq!(a.len(), n);
        for i in (0..n).step_by(997).chain([0, n - 1]) {
            assert_eq!(a[i], link(i), "element {i}");
        }
        a[12_345] = link(7);
        assert_eq!(a[12_345], link(7));
        let b = a.clone();
        assert_eq!(b.len(), n);
        assert_eq!(b[12_345], link(7));
        assert_eq!(b[n - 1], link(n - 1));
        // The written pages, not the mapping's size.
        assert_eq!(a.bytes(), pages(n * std::mem::size_of::<Link>()));
    }

    /// A mapping's memory is counted as its pages are written (not as it is reserved). The
    /// process-wide count is checked by `tests/zset_memory.rs`, alone in its process.
    #[test]
    fn mapped_bytes_are_the_pages_written() {
        let mut a = Arena::with_capacity(1 << 20);
        assert!(a.is_mapped());
        assert_eq!(a.bytes(), 0, "nothing written yet");
        for i in 0..300 {
            a.push(link(i));
        }
        assert_eq!(a.bytes(), pages(300 * 16));
        for i in 300..(1 << 20) + 5 {
            a.push(link(i));
        }
        assert_eq!(a.bytes(), pages(((1 << 20) + 5) * 16));
        assert_eq!(a[(1 << 20) + 4], link((1 << 20) + 4));
    }

    #[test]
    #[should_panic]
    fn an_index_past_the_end_panics() {
        let mut a = Arena::with_capacity(1 << 20);
        a.push(link(1));
        let _ = a[1];
    }

    /// Where a mapping cannot grow, the elements move to the heap and pushes go on there.
    #[test]
    fn a_mapping_that_cannot_grow_moves_to_the_heap() {
        let n = 20_000;
        let mut a = Arena::with_capacity(n);
        for i in 0..n {
            a.push(link(i));
        }
        assert!(a.is_mapped());
        a.move_to_heap(n + n / 4);
        assert!(!a.is_mapped());
        for i in n..3 * n {
            a.push(link(i));
        }
        assert_eq!(a.len(), 3 * n);
        for i in (0..3 * n).step_by(101) {
            assert_eq!(a[i], link(i), "element {i}");
        }
        assert!(a.is_mapped(), "mapped again when its heap buffer filled");
    }

    #[test]
    fn small_arenas_stay_on_the_heap() {
        let mut a = Arena::with_capacity(8);
        for i in 0..100 {
            a.push(link(i));
        }
        assert!(!a.is_mapped());
        assert_eq!(a.as_slice().len(), 100);
        assert_eq!(a[99], link(99));
        let b = a.clone();
        assert_eq!(b.as_slice(), a.as_slice());
    }
}
