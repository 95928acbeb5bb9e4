//! Moving one heap block to a better place: the allocator half of active defragmentation.
//!
//! Redis's defragmenter asks its patched jemalloc, per pointer, whether the block sits in a
//! slab used less than the average of its size class's other slabs; if so it copies the block
//! to a fresh allocation taken without the thread cache (which then comes from the bin's
//! current, fullest-first slab) and frees the old one, so sparse slabs empty out and go back
//! to the OS. Stock jemalloc 5.3 answers the same question through two controls, which is
//! what [`Relocator`] uses:
//! - `experimental.utilization.query` (live, under the bin's lock): the pointer's slab's free
//!   and total regions, the slab's size, the bin's free and total regions over all its slabs,
//!   and the address of the slab new allocations come from (`slabcur`);
//! - `stats.arenas.<i>.bins.<j>.nonfull_slabs` (from the statistics snapshot, refreshed once
//!   per defrag step by [`Relocator::refresh`]): how many of the bin's slabs are not full.
//!
//! The decision is Redis's: a slab in use by new allocations, or a full one, is left alone;
//! otherwise the block moves when its slab's used regions, scaled to the number of non-full
//! slabs, are at most the non-full slabs' used regions plus an eighth (the eighth keeps the
//! defragmenter from stagnating when every slab is as full as the others).
//!
//! The moves go through jemalloc directly (`mallocx` into the block's own arena with no thread
//! cache, `sdallocx` of the old block), not through the counting global allocator: the block
//! keeps its size, so `used_memory` is unchanged, and the later free of the new block through
//! the global allocator counts it out as the old one would have been.
//!
//! Where the global allocator is not jemalloc (the library's tests run on the system
//! allocator) nothing is ever moved, except by a [`Relocator::always`] made for tests, which
//! moves every block it is shown through the global allocator, to exercise the callers'
//! pointer fixing.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by the binary, whose global allocator is jemalloc (`CountingAlloc`): blocks of the
/// keyspace are then jemalloc's, and may be asked about and moved.
static GLOBAL_IS_JEMALLOC: AtomicBool = AtomicBool::new(false);

/// The binary installs jemalloc as the global allocator: let the defragmenter move blocks.
pub fn mark_global_jemalloc() {
    GLOBAL_IS_JEMALLOC.store(true, Ordering::Relaxed);
}

/// True when blocks can really be moved (the global allocator is jemalloc).
pub fn available() -> bool {
    GLOBAL_IS_JEMALLOC.load(Ordering::Relaxed)
}

/// Turn the calling thread's jemalloc cache off (the defrag thread's): what it allocates
/// then comes from the current slab of its bin and what it frees goes straight back to its
/// slab. A block rebuilt by copy (a hashbrown table, see [`Relocator::picks`]) would
/// otherwise take the place the previous one just left in the cache, in the same sparse
/// slab, and the two would trade places at every pass.
pub fn disable_thread_cache() {
    if !available() {
        return;
    }
    let mut off = false;
    // SAFETY: `thread.tcache.enabled` takes a bool, written from a live bool; nothing read.
    let _ = unsafe {
        tikv_jemalloc_sys::mallctl(
            c"thread.tcache.enabled".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            (&mut off as *mut bool).cast(),
            std::mem::size_of::<bool>(),
        )
    };
}

/// What `experimental.utilization.query` writes: jemalloc's
/// `inspect_extent_util_stats_verbose_t`.
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
struct SlabUtil {
    slabcur_addr: usize,
    nfree: usize,
    nregs: usize,
    size: usize,
    bin_nfree: usize,
    bin_nregs: usize,
}

/// How blocks are judged and moved.
enum Mode {
    /// jemalloc's answers, jemalloc's moves.
    Jemalloc(Box<Controls>),
    /// Every block moves, through the global allocator (tests).
    Always,
    /// Nothing moves (another global allocator).
    Never,
}

/// The jemalloc controls a relocator uses, looked up by name once.
struct Controls {
    query: [usize; 3],
    lookup: [usize; 2],
    /// `stats.arenas.<i>.bins.<j>.nonfull_slabs`, with `i` and `j` filled in per read.
    nonfull: [usize; 6],
    /// `epoch`.
    epoch: [usize; 1],
    /// Size of each small bin, by bin index (`arenas.bin.<j>.size`).
    bin_sizes: Vec<usize>,
    /// Non-full slabs per (arena, bin), from the last snapshot: `u32::MAX` not read yet.
    nonfull_cache: Vec<u32>,
}

/// Counts a relocator keeps: blocks moved (hits) and blocks looked at and left (misses), as
/// Redis's `active_defrag_hits` / `active_defrag_misses`.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub hits: u64,
    pub misses: u64,
}

/// Judges heap blocks and moves those in sparse slabs (see the module's description).
pub struct Relocator {
    mode: Mode,
    pub tally: Tally,
}

/// jemalloc's size-to-flags rule for the global allocator's blocks (tikv-jemallocator's):
/// an explicit alignment only when the layout needs more than jemalloc's natural one.
fn align_flags(layout: Layout) -> i32 {
    const MIN_ALIGN: usize = 16;
    if layout.align() <= MIN_ALIGN && layout.align() <= layout.size() {
        0
    } else {
        tikv_jemalloc_sys::MALLOCX_ALIGN(layout.align())
    }
}

/// The MIB of a control, for repeated reads; None if jemalloc does not know it.
fn mib<const N: usize>(name: &std::ffi::CStr) -> Option<[usize; N]> {
    let mut mib = [0usize; N];
    let mut len = N;
    // SAFETY: `name` is NUL-terminated; `mib` has room for `len` components.
    let rc =
        unsafe { tikv_jemalloc_sys::mallctlnametomib(name.as_ptr(), mib.as_mut_ptr(), &mut len) };
    (rc == 0 && len == N).then_some(mib)
}

/// Read a control of type `T` by MIB, writing `new` first if given (the `T` and `W` sizes
/// are the control's own: callers name only controls of these types).
///
/// # Safety
/// `mib` names a control whose value is a `T` and whose input (if `new`) is a `W`.
unsafe fn by_mib<T: Default, W>(mib: &[usize], new: Option<&mut W>) -> Option<T> {
    let mut out = T::default();
    let mut len = std::mem::size_of::<T>();
    let (newp, newlen) = match new {
        Some(w) => (
            (w as *mut W).cast::<std::ffi::c_void>(),
            std::mem::size_of::<W>(),
        ),
        None => (std::ptr::null_mut(), 0),
    };
    // SAFETY: per the contract, the output is a T (with its size passed) and the input a W.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctlbymib(
            mib.as_ptr(),
            mib.len(),
            (&mut out as *mut T).cast(),
            &mut len,
            newp,
            newlen,
        )
    };
    (rc == 0).then_some(out)
}

impl Controls {
    fn new() -> Option<Controls> {
        let nbins: u32 = {
            let m = mib::<2>(c"arenas.nbins")?;
            // SAFETY: `arenas.nbins` is an unsigned.
            unsafe { by_mib::<u32, ()>(&m, None)? }
        };
        let mut size_mib = mib::<4>(c"arenas.bin.0.size")?;
        let mut bin_sizes = Vec::with_capacity(nbins as usize);
        for j in 0..nbins as usize {
            size_mib[2] = j;
            // SAFETY: `arenas.bin.<j>.size` is a size_t.
            bin_sizes.push(unsafe { by_mib::<usize, ()>(&size_mib, None)? });
        }
        Some(Controls {
            query: mib(c"experimental.utilization.query")?,
            lookup: mib(c"arenas.lookup")?,
            nonfull: mib(c"stats.arenas.0.bins.0.nonfull_slabs")?,
            epoch: mib(c"epoch")?,
            bin_sizes,
            nonfull_cache: Vec::new(),
        })
    }

    /// The small bin of blocks of `size` bytes: the first whose size holds it.
    fn bin_of(&self, size: usize) -> Option<usize> {
        let j = self.bin_sizes.partition_point(|&s| s < size);
        (j < self.bin_sizes.len()).then_some(j)
    }

    /// Non-full slabs of bin `j` of arena `arena`, from the current statistics snapshot.
    fn nonfull_slabs(&mut self, arena: usize, j: usize) -> usize {
        let at = arena * self.bin_sizes.len() + j;
        if at >= self.nonfull_cache.len() {
            self.nonfull_cache.resize(at + 1, u32::MAX);
        }
        if self.nonfull_cache[at] == u32::MAX {
            let mut m = self.nonfull;
            m[2] = arena;
            m[4] = j;
            // SAFETY: `stats.arenas.<i>.bins.<j>.nonfull_slabs` is a size_t.
            let n = unsafe { by_mib::<usize, ()>(&m, None) }.unwrap_or(0);
            self.nonfull_cache[at] = n.min(u32::MAX as usize - 1) as u32;
        }
        self.nonfull_cache[at] as usize
    }

    /// The arena that owns `ptr`.
    fn arena_of(&self, ptr: NonNull<u8>) -> Option<usize> {
        let mut p = ptr.as_ptr().cast::<std::ffi::c_void>();
        // SAFETY: `arenas.lookup` takes a `void *` and gives an unsigned.
        unsafe { by_mib::<u32, *mut std::ffi::c_void>(&self.lookup, Some(&mut p)) }
            .map(|a| a as usize)
    }

    /// The slab `ptr` lives in, as jemalloc sees it now.
    fn util(&self, ptr: NonNull<u8>) -> Option<SlabUtil> {
        let mut p = ptr.as_ptr().cast::<std::ffi::c_void>();
        // SAFETY: `experimental.utilization.query` takes a `void *` and writes a SlabUtil.
        unsafe { by_mib::<SlabUtil, *mut std::ffi::c_void>(&self.query, Some(&mut p)) }
    }

    /// Should the block at `ptr` of `layout` move? (See the module's description.)
    fn should_move(&mut self, ptr: NonNull<u8>, layout: Layout) -> Option<usize> {
        let u = self.util(ptr)?;
        // Not a slab (a large block, alone in its extent), or a full slab: nothing to gain.
        if u.nregs <= 1 || u.nfree == 0 || u.size == 0 {
            return None;
        }
        // The slab new blocks come from: moving out of it would land in it again.
        let p = ptr.as_ptr() as usize;
        if u.slabcur_addr != 0 && (u.slabcur_addr..u.slabcur_addr + u.size).contains(&p) {
            return None;
        }
        let arena = self.arena_of(ptr)?;
        let j = self.bin_of(crate::alloc::size_class(layout.size()))?;
        let slabs = u.bin_nregs / u.nregs;
        let nonfull = self.nonfull_slabs(arena, j).min(slabs);
        let full = slabs - nonfull;
        let used_nonfull = (u.bin_nregs - u.bin_nfree).saturating_sub(full * u.nregs);
        let used_here = u.nregs - u.nfree;
        (used_here * nonfull <= used_nonfull + used_nonfull / 8).then_some(arena)
    }

    /// Advance jemalloc's statistics epoch and forget the cached slab counts.
    fn refresh(&mut self) {
        let mut e: u64 = 1;
        // SAFETY: `epoch` reads and writes a uint64_t.
        let _ = unsafe { by_mib::<u64, u64>(&self.epoch, Some(&mut e)) };
        self.nonfull_cache.clear();
    }
}

impl Relocator {
    /// The server's relocator: jemalloc's judgement where jemalloc is the global allocator,
    /// otherwise one that moves nothing.
    pub fn new() -> Relocator {
        let mode = if available() {
            match Controls::new() {
                Some(c) => Mode::Jemalloc(Box::new(c)),
                None => Mode::Never,
            }
        } else {
            Mode::Never
        };
        Relocator {
            mode,
            tally: Tally::default(),
        }
    }

    /// A relocator that moves every block through the global allocator (tests of the
    /// callers' pointer fixing).
    pub fn always() -> Relocator {
        Relocator {
            mode: Mode::Always,
            tally: Tally::default(),
        }
    }

    /// A relocator for blocks allocated with jemalloc's own `mallocx` (this module's tests,
    /// whose global allocator is the system's).
    #[cfg(test)]
    fn jemalloc_direct() -> Relocator {
        Relocator {
            mode: Mode::Jemalloc(Box::new(Controls::new().expect("jemalloc controls"))),
            tally: Tally::default(),
        }
    }

    /// True if this relocator can move anything at all.
    pub fn can_move(&self) -> bool {
        !matches!(self.mode, Mode::Never)
    }

    /// Take a fresh statistics snapshot (once per defrag step): the non-full slab counts
    /// the decision reads come from it.
    pub fn refresh(&mut self) {
        if let Mode::Jemalloc(c) = &mut self.mode {
            c.refresh();
        }
    }

    /// Move the block at `ptr`, allocated with `layout` by the global allocator, if it sits in
    /// a sparse slab: the bytes are copied to a new block of the same layout and the old one
    /// is freed. Returns the new address, or None if the block stays (a miss).
    ///
    /// # Safety
    /// `ptr` must be a live block of the global allocator allocated with `layout`, and the
    /// caller must replace every pointer to it with the returned one before anything reads it
    /// again (nothing else may use the block during the call).
    pub unsafe fn relocate(&mut self, ptr: NonNull<u8>, layout: Layout) -> Option<NonNull<u8>> {
        // SAFETY: per the contract `ptr` is a live block of `layout`, copied from by `place`
        // and freed once here, after the copy, with the flags it was allocated with.
        unsafe {
            let (new, flags) = self.place(ptr, layout)?;
            match flags {
                None => std::alloc::dealloc(ptr.as_ptr(), layout),
                Some(f) => tikv_jemalloc_sys::sdallocx(
                    ptr.as_ptr().cast(),
                    layout.size(),
                    f | tikv_jemalloc_sys::MALLOCX_TCACHE_NONE,
                ),
            }
            Some(new)
        }
    }

    /// Whether the block holding `interior` (any address inside a live block of the global
    /// allocator) sits in a sparse slab: for blocks whose owner can only be rebuilt, not
    /// moved in place (a hashbrown table's, reached through one of its elements). Counts the
    /// hit or miss; the caller rebuilds the block when this is true.
    pub fn picks(&mut self, interior: *const u8) -> bool {
        let picked = match &mut self.mode {
            Mode::Never => false,
            Mode::Always => true,
            Mode::Jemalloc(c) => match NonNull::new(interior.cast_mut()) {
                Some(p) => match c.util(p) {
                    // The slab's region size names the bin (slabs hold whole regions).
                    Some(u) if u.nregs > 1 => match Layout::from_size_align(u.size / u.nregs, 1) {
                        Ok(l) => c.should_move(p, l).is_some(),
                        Err(_) => false,
                    },
                    _ => false,
                },
                None => false,
            },
        };
        if picked {
            self.tally.hits += 1;
        } else {
            self.tally.misses += 1;
        }
        picked
    }

    /// The judgement and the copy of [`Relocator::relocate`], without freeing the old block:
    /// the new block (of the same layout, from the global allocator's point of view) and the
    /// jemalloc flags to free the old one with (None: through the global allocator). Counts
    /// the hit or miss.
    ///
    /// # Safety
    /// `ptr` must be a live block of the global allocator allocated with `layout`.
    unsafe fn place(
        &mut self,
        ptr: NonNull<u8>,
        layout: Layout,
    ) -> Option<(NonNull<u8>, Option<i32>)> {
        if layout.size() == 0 {
            return None;
        }
        let placed = match &mut self.mode {
            Mode::Never => None,
            // SAFETY: a non-zero layout; the new block is filled from the live old one.
            Mode::Always => unsafe { NonNull::new(std::alloc::alloc(layout)).map(|n| (n, None)) },
            Mode::Jemalloc(c) => c.should_move(ptr, layout).and_then(|arena| {
                let flags = align_flags(layout);
                // SAFETY: a non-zero size: a block from the old one's arena without the
                // thread cache, so from the bin's current slab.
                let new = unsafe {
                    tikv_jemalloc_sys::mallocx(
                        layout.size(),
                        flags
                            | tikv_jemalloc_sys::MALLOCX_ARENA(arena)
                            | tikv_jemalloc_sys::MALLOCX_TCACHE_NONE,
                    )
                };
                NonNull::new(new.cast::<u8>()).map(|n| (n, Some(flags)))
            }),
        };
        match placed {
            Some((new, _)) => {
                // SAFETY: both blocks are live and `layout.size()` bytes long, and distinct.
                unsafe { std::ptr::copy_nonoverlapping(ptr.as_ptr(), new.as_ptr(), layout.size()) };
                self.tally.hits += 1;
            }
            None => self.tally.misses += 1,
        }
        placed
    }

    /// A copy of `data` in a fuller slab, if the block `data` sits in is one the relocator
    /// picks: for shared bytes (`bytes::Bytes`) whose holders are then given the copy. `data`
    /// must be a whole block of the global allocator (a `Vec` of exactly its length, made
    /// into `Bytes`); it is not freed.
    pub fn copy_out(&mut self, data: &[u8]) -> Option<Vec<u8>> {
        let layout = Layout::array::<u8>(data.len()).ok()?;
        let ptr = NonNull::new(data.as_ptr().cast_mut())?;
        // SAFETY: per the contract `data` is a live block of this layout; the copy is a new
        // block of the same layout, handed over as a vector of exactly its length.
        unsafe {
            let (new, _) = self.place(ptr, layout)?;
            Some(Vec::from_raw_parts(new.as_ptr(), data.len(), data.len()))
        }
    }

    /// Move a string's buffer if it sits in a sparse slab; true if it moved.
    pub fn string(&mut self, s: &mut String) -> bool {
        let mut v = std::mem::take(s).into_bytes();
        let moved = self.vec(&mut v);
        match String::from_utf8(v) {
            Ok(back) => *s = back,
            Err(_) => unreachable!("the bytes of a string, unchanged"),
        }
        moved
    }

    /// Move a boxed byte string's block if it sits in a sparse slab; true if it moved.
    pub fn boxed_bytes(&mut self, b: &mut Box<[u8]>) -> bool {
        if b.is_empty() {
            return false;
        }
        let len = b.len();
        let layout = Layout::array::<u8>(len).unwrap_or_else(|_| unreachable!("a live box"));
        let old = NonNull::from(&mut **b).cast::<u8>();
        // SAFETY: the box's block is the global allocator's, of this layout; on a move the
        // box is rebuilt on the new block at once and the old box forgotten (its block freed).
        unsafe {
            match self.relocate(old, layout) {
                Some(new) => {
                    let fresh =
                        Box::from_raw(std::ptr::slice_from_raw_parts_mut(new.as_ptr(), len));
                    std::mem::forget(std::mem::replace(b, fresh));
                    true
                }
                None => false,
            }
        }
    }

    /// Move a box's block if it sits in a sparse slab; true if it moved.
    pub fn boxed<T>(&mut self, b: &mut Box<T>) -> bool {
        let layout = Layout::new::<T>();
        if layout.size() == 0 {
            return false;
        }
        let old = NonNull::from(&mut **b).cast::<u8>();
        // SAFETY: as in `boxed_bytes`: a `Box<T>`'s block has `T`'s layout.
        unsafe {
            match self.relocate(old, layout) {
                Some(new) => {
                    let fresh = Box::from_raw(new.as_ptr().cast::<T>());
                    std::mem::forget(std::mem::replace(b, fresh));
                    true
                }
                None => false,
            }
        }
    }

    /// Move a vector's buffer if it sits in a sparse slab; true if it moved.
    pub fn vec<T>(&mut self, v: &mut Vec<T>) -> bool {
        if v.capacity() == 0 || std::mem::size_of::<T>() == 0 {
            return false;
        }
        let (len, cap) = (v.len(), v.capacity());
        let layout = Layout::array::<T>(cap).unwrap_or_else(|_| unreachable!("a live vector"));
        let old = NonNull::new(v.as_mut_ptr())
            .unwrap_or_else(|| unreachable!("a vector with capacity"))
            .cast::<u8>();
        // SAFETY: a vector's buffer is the global allocator's block of `cap` elements; on a
        // move the vector is rebuilt on the new block (same length and capacity) and the old
        // one forgotten (its buffer freed by the move, its elements now in the new buffer).
        unsafe {
            match self.relocate(old, layout) {
                Some(new) => {
                    let fresh = Vec::from_raw_parts(new.as_ptr().cast::<T>(), len, cap);
                    std::mem::forget(std::mem::replace(v, fresh));
                    true
                }
                None => false,
            }
        }
    }
}

/// A heap of its own for one thread's Lua state: a jemalloc arena shared by every Lua state
/// and a thread cache of this heap's own. Lua's blocks (compiled scripts, their constants,
/// the interpreter's tables) cannot be moved by the defragmenter, so kept in the keyspace's
/// arenas they would pin the slabs they share with keys and values, and deleting the keys
/// would leave holes no defrag could close (Redis's Lua allocates with libc's malloc, outside
/// jemalloc, for the same effect). Blocks are counted in `used_memory` as the global
/// allocator's are, and are interchangeable with them (either may free the other's).
pub struct SideHeap {
    tcache: u32,
    arena: u32,
}

/// The arena of every [`SideHeap`], once made.
static SIDE_ARENA: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();

/// The side heaps' arena, if one was made (no side heap yet: None).
pub(crate) fn side_arena_made() -> Option<u32> {
    SIDE_ARENA.get().copied().flatten()
}

/// The arena every [`SideHeap`] allocates from, made on first use; None if jemalloc refused.
fn side_arena() -> Option<u32> {
    *SIDE_ARENA.get_or_init(|| {
        let m = mib::<2>(c"arenas.create")?;
        // SAFETY: `arenas.create` gives an unsigned (no input: default extent hooks).
        unsafe { by_mib::<u32, ()>(&m, None) }
    })
}

impl SideHeap {
    /// A heap for the calling thread's Lua state, where jemalloc is the global allocator.
    pub fn new() -> Option<SideHeap> {
        if !available() {
            return None;
        }
        let arena = side_arena()?;
        let m = mib::<2>(c"tcache.create")?;
        // SAFETY: `tcache.create` gives an unsigned.
        let tcache = unsafe { by_mib::<u32, ()>(&m, None)? };
        Some(SideHeap { tcache, arena })
    }

    /// The jemalloc flags of a block of `size` bytes at Lua's alignment of 16 (the
    /// alignment rule the global allocator applies, so that either may free the block).
    pub fn flags(&self, size: usize) -> i32 {
        let layout = Layout::from_size_align(size.max(1), 16).unwrap_or(Layout::new::<u128>());
        align_flags(layout)
            | tikv_jemalloc_sys::MALLOCX_ARENA(self.arena as usize)
            | tikv_jemalloc_sys::MALLOCX_TCACHE(self.tcache as usize)
    }

    /// A block of `size` (> 0) bytes, or null.
    ///
    /// # Safety
    /// Only on the thread that owns this heap (its thread cache is not shared).
    pub unsafe fn alloc(&self, size: usize) -> *mut u8 {
        // SAFETY: a non-zero size, with this heap's arena and cache.
        let p = unsafe { tikv_jemalloc_sys::mallocx(size, self.flags(size)) }.cast::<u8>();
        if !p.is_null() {
            super::count(size as isize);
        }
        p
    }

    /// Free a block of `size` bytes from this heap or the global allocator.
    ///
    /// # Safety
    /// As [`SideHeap::alloc`]; `p` is a live block of `size` bytes at alignment 16.
    pub unsafe fn free(&self, p: *mut u8, size: usize) {
        super::count(-(size as isize));
        // SAFETY: per the contract; the size and alignment flags are those it was made with.
        unsafe { tikv_jemalloc_sys::sdallocx(p.cast(), size, self.flags(size)) }
    }

    /// Resize a block of `old` bytes to `new` (> 0) bytes; null (the block unchanged) on
    /// failure.
    ///
    /// # Safety
    /// As [`SideHeap::free`].
    pub unsafe fn realloc(&self, p: *mut u8, old: usize, new: usize) -> *mut u8 {
        // SAFETY: per the contract; the new block has this heap's flags for its size.
        let q = unsafe { tikv_jemalloc_sys::rallocx(p.cast(), new, self.flags(new)) }.cast::<u8>();
        if !q.is_null() {
            super::count(new as isize - old as isize);
        }
        q
    }
}

impl Drop for SideHeap {
    fn drop(&mut self) {
        if let Some(m) = mib::<2>(c"tcache.destroy") {
            let mut t = self.tcache;
            // SAFETY: `tcache.destroy` is write-only and takes an unsigned; this heap's cache
            // is not used after.
            let _ = unsafe {
                tikv_jemalloc_sys::mallctlbymib(
                    m.as_ptr(),
                    m.len(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    (&mut t as *mut u32).cast(),
                    std::mem::size_of::<u32>(),
                )
            };
        }
    }
}

impl Default for Relocator {
    fn default() -> Self {
        Relocator::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` blocks of `size` bytes from jemalloc directly, without the thread cache so that
    /// they fill slabs in order, as a long-running server's would.
    fn fill(n: usize, size: usize) -> Vec<NonNull<u8>> {
        (0..n)
            .map(|i| {
                // SAFETY: a non-zero size; freed by the test.
                let p = unsafe {
                    tikv_jemalloc_sys::mallocx(size, tikv_jemalloc_sys::MALLOCX_TCACHE_NONE)
                };
                let p = NonNull::new(p.cast::<u8>()).expect("mallocx");
                // SAFETY: the block has `size` bytes.
                unsafe { p.as_ptr().write_bytes(i as u8, size) };
                p
            })
            .collect()
    }

    /// Slabs of the bin (and arena) of `p`'s block, live.
    fn slabs_of(p: NonNull<u8>) -> usize {
        let u = Controls::new().expect("controls").util(p).expect("query");
        u.bin_nregs / u.nregs
    }

    /// Free a block of `size` from `fill` straight to its slab (not to a thread cache, which
    /// would keep it counted as in use).
    fn free(p: NonNull<u8>, size: usize) {
        // SAFETY: a block of `size` bytes from `fill` or a move, freed once.
        unsafe {
            tikv_jemalloc_sys::sdallocx(
                p.as_ptr().cast(),
                size,
                tikv_jemalloc_sys::MALLOCX_TCACHE_NONE,
            )
        };
    }

    /// The probe behind the design: jemalloc 5.3's stock controls tell a sparse slab from a
    /// dense one, and moving the blocks they pick packs the survivors of a half-freed bin
    /// into about half as many slabs, with the bytes unchanged.
    #[test]
    fn sparse_slabs_empty_out() {
        const SIZE: usize = 640;
        let blocks = fill(32 * 400, SIZE);
        // Free every other block: each slab is left half used.
        let mut kept = Vec::new();
        for (i, p) in blocks.into_iter().enumerate() {
            if i % 2 == 0 {
                kept.push((i, p));
            } else {
                free(p, SIZE);
            }
        }
        let layout = Layout::from_size_align(SIZE, 8).expect("layout");
        let before = slabs_of(kept[0].1);
        let mut r = Relocator::jemalloc_direct();
        for _pass in 0..3 {
            r.refresh();
            for (_, p) in kept.iter_mut() {
                // SAFETY: `p` is a live block of `layout` (jemalloc's, flags 0 as the global
                // allocator's would be), replaced at once by the moved one.
                if let Some(n) = unsafe { r.relocate(*p, layout) } {
                    *p = n;
                }
            }
        }
        let after = slabs_of(kept[0].1);
        assert!(r.tally.hits > 1000, "{:?}", r.tally);
        assert!(
            after * 10 <= before * 6,
            "slabs {before} -> {after}, {:?}",
            r.tally
        );
        for (i, p) in kept {
            // SAFETY: a live block of `SIZE` bytes.
            let bytes = unsafe { std::slice::from_raw_parts(p.as_ptr(), SIZE) };
            assert!(bytes.iter().all(|&b| b == i as u8));
            free(p, SIZE);
        }
    }

    #[test]
    fn dense_slabs_stay() {
        const SIZE: usize = 96;
        let blocks = fill(4096, SIZE);
        let layout = Layout::from_size_align(SIZE, 8).expect("layout");
        let mut r = Relocator::jemalloc_direct();
        r.refresh();
        let mut moved = 0;
        let mut kept = Vec::new();
        for p in blocks {
            // SAFETY: as in `sparse_slabs_empty_out`.
            match unsafe { r.relocate(p, layout) } {
                Some(n) => {
                    moved += 1;
                    kept.push(n)
                }
                None => kept.push(p),
            }
        }
        // Full slabs (all but the current one or two) are never picked.
        assert!(moved < 200, "{moved} moves among full slabs");
        for p in kept {
            free(p, SIZE);
        }
    }

    #[test]
    fn always_moves_keep_the_bytes() {
        let mut r = Relocator::always();
        let mut b: Box<[u8]> = (0..100u8).collect();
        let before = b.as_ptr();
        assert!(r.boxed_bytes(&mut b));
        assert_ne!(b.as_ptr(), before);
        assert_eq!(&b[..], &(0..100u8).collect::<Vec<_>>()[..]);
        let mut v: Vec<u64> = Vec::with_capacity(10);
        v.extend([1, 2, 3]);
        assert!(r.vec(&mut v));
        assert_eq!((v.as_slice(), v.capacity()), (&[1u64, 2, 3][..], 10));
        let mut bx = Box::new([7u32; 9]);
        assert!(r.boxed(&mut bx));
        assert_eq!(*bx, [7u32; 9]);
        let mut empty: Box<[u8]> = Box::new([]);
        assert!(!r.boxed_bytes(&mut empty));
        assert!(!r.vec(&mut Vec::<u8>::new()));
        assert_eq!(r.tally, Tally { hits: 3, misses: 0 });
    }

    #[test]
    fn the_system_allocator_moves_nothing() {
        // The library's tests do not mark jemalloc as the global allocator.
        let mut r = Relocator::new();
        assert!(!r.can_move());
        let mut b: Box<[u8]> = Box::from(&b"abc"[..]);
        assert!(!r.boxed_bytes(&mut b));
        assert_eq!(r.tally.misses, 1);
    }
}
