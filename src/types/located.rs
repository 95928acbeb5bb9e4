//! `Located`: an allocator for one hashbrown table that remembers where the table lives, so
//! that the first cache lines a lookup will read can be prefetched before the lookup runs.
//!
//! # Why
//!
//! A lookup in a table of a million entries misses the cache on its group of control bytes,
//! on the slot beside it and then on whatever the slot points to, one after the other. A
//! pipelined batch of sixteen GETs pays that chain sixteen times in a row. If the addresses
//! are known up front, the first misses of all sixteen can be in flight at once (see
//! `Keyspace::warm_keys`). hashbrown exposes no addresses, but it allocates each table as
//! one block through its allocator: `[slots | control bytes | 16 trailing control bytes]`, with
//! the control bytes starting right after the slot array (rounded up to 16 bytes) and slot `i`
//! stored just below them, at `ctrl - (i + 1) * size_of::<T>()`; a lookup of hash `h` starts at
//! bucket `h & (buckets - 1)`. Recording the block here gives both.
//!
//! That layout is hashbrown's internal business, so it is only ever used for prefetch hints:
//! a prefetch of a wrong address is harmless (it cannot fault and changes no memory), so if a
//! future hashbrown lays tables out differently, lookups stay correct and only lose the speed.
//! `tests::addresses_match_hashbrowns_layout` checks the assumption against the pinned version.

use allocator_api2::alloc::{AllocError, Allocator, Global, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Width of a hashbrown probe group on x86_64 (SSE2), and the trailing control bytes.
const GROUP_WIDTH: usize = 16;

/// Allocates like the global allocator and records the last block it handed out (the table's
/// current one: hashbrown allocates the new block before freeing the old on a resize).
#[derive(Default)]
pub struct Located {
    ptr: AtomicUsize,
    len: AtomicUsize,
}

impl Clone for Located {
    /// A clone belongs to a different table, which records its own block.
    fn clone(&self) -> Self {
        Located::default()
    }
}

impl std::fmt::Debug for Located {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Located").finish_non_exhaustive()
    }
}

// SAFETY: every method forwards to `Global` with the same arguments and only records the
// returned block's address and length in atomics; memory safety is Global's.
unsafe impl Allocator for Located {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        let block = Global.allocate(layout)?;
        self.ptr
            .store(block.as_ptr() as *mut u8 as usize, Ordering::Relaxed);
        self.len.store(layout.size(), Ordering::Relaxed);
        Ok(block)
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        if self.ptr.load(Ordering::Relaxed) == ptr.as_ptr() as usize {
            self.ptr.store(0, Ordering::Relaxed);
            self.len.store(0, Ordering::Relaxed);
        }
        // SAFETY: `ptr` was allocated by `Global` (in `allocate`) with this layout.
        unsafe { Global.deallocate(ptr, layout) }
    }
}

impl Located {
    /// Address of the table's control bytes and its bucket mask, if the recorded block has the
    /// shape of a table of `slot_size`-byte slots.
    #[inline]
    pub(crate) fn table(&self, slot_size: usize) -> Option<(usize, usize)> {
        let ptr = self.ptr.load(Ordering::Relaxed);
        let len = self.len.load(Ordering::Relaxed);
        if ptr == 0 || len <= GROUP_WIDTH {
            return None;
        }
        // len = round_up(buckets * slot_size, 16) + buckets + 16; for the large tables this is
        // used on, buckets * slot_size is already a multiple of 16.
        let buckets = (len - GROUP_WIDTH) / (slot_size + 1);
        let slots = buckets * slot_size;
        if !buckets.is_power_of_two()
            || !slots.is_multiple_of(GROUP_WIDTH)
            || slots + buckets + GROUP_WIDTH != len
        {
            return None;
        }
        Some((ptr + slots, buckets - 1))
    }

    /// Start loading the control group a lookup of `hash` probes first and that group's home
    /// slot (where the entry almost always is at hashbrown's load factor).
    #[inline]
    pub fn prefetch(&self, hash: u64, slot_size: usize) {
        if let Some((ctrl, mask)) = self.table(slot_size) {
            let pos = hash as usize & mask;
            prefetch_addr(ctrl + pos);
            // Slot `pos` occupies ctrl - (pos + 1) * size .. ctrl - pos * size.
            prefetch_addr(ctrl - (pos + 1) * slot_size);
            prefetch_addr(ctrl - pos * slot_size - 1);
        }
    }
}

/// Hint the CPU to start loading the cache line holding `addr`.
#[inline(always)]
pub fn prefetch_addr(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` is only a hint: it never faults, even on an unmapped address, and
    // changes no memory.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

#[cfg(test)]
mod tests {
    use super::*;
    use hashbrown::HashTable;

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn addresses_match_hashbrowns_layout() {
        // A lookup whose key sits in its home bucket must find it at the address `table`
        // predicts; check that for every key of a large table that does.
        let mut t: HashTable<u32, Located> = HashTable::with_capacity_in(0, Located::default());
        let hash = |k: u32| (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for k in 0..100_000u32 {
            t.insert_unique(hash(k), k, |&k| hash(k));
        }
        let (ctrl, mask) = t.allocator().table(4).expect("table shape recognised");
        assert!(mask + 1 >= t.capacity());
        let mut home = 0;
        for k in 0..100_000u32 {
            let found = t.find(hash(k), |&x| x == k).expect("present") as *const u32 as usize;
            let pos = hash(k) as usize & mask;
            let predicted = ctrl - (pos + 1) * 4;
            assert!(
                found <= ctrl && found >= ctrl - (mask + 1) * 4,
                "slot inside the block"
            );
            if found == predicted {
                home += 1;
            }
        }
        // At hashbrown's load factor (<= 7/8) most keys live in their home bucket.
        assert!(
            home > 50_000,
            "only {home} of 100000 keys found where predicted"
        );
    }

    #[test]
    fn clones_and_frees_forget_the_block() {
        let mut t: HashTable<u32, Located> = HashTable::with_capacity_in(1000, Located::default());
        t.insert_unique(1, 1, |_| 1);
        assert!(t.allocator().table(4).is_some());
        let c = t.clone();
        assert!(c.allocator().table(4).is_some());
        drop(c);
        assert!(t.allocator().table(4).is_some());
        t.clear();
        t.shrink_to(0, |_| 1);
        assert!(t.allocator().table(4).is_none());
        // Prefetching with no table is a no-op.
        t.allocator().prefetch(12345, 4);
    }
}
