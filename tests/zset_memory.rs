//! Bytes per member of a 1M-member skiplist-encoded set (at most 40), counted by a
//! GlobalAlloc wrapper around System plus the pages of the set's mapped arenas
//! (`podium::alloc::outside_bytes`). Release only (too slow in debug).

use podium::types::zset::{ZSet, ZsetLimits};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

struct Counting;
static ALLOCATED: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards every call to System unchanged; only keeps a byte counter.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        ALLOCATED.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCATED.fetch_add(n as isize - l.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
#[cfg_attr(debug_assertions, ignore = "1M inserts: run with --release")]
fn one_million_members_under_40_bytes_each() {
    let lim = ZsetLimits::default();
    let n = 1_000_000u64;
    let counted = || ALLOCATED.load(Ordering::Relaxed) + podium::alloc::outside_bytes();
    let before = counted();
    let mut z = ZSet::new_for(14, 1, &lim);
    let mut x = 0x1234_5678_9abc_def1u64;
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let m = format!("m:{:012}", i.wrapping_mul(0x9E37_79B9) % 1_000_000_000_000);
        z.insert(m.as_bytes(), (x % 1_000_000_000) as f64, &lim);
    }
    let used = counted() - before;
    let mapped = podium::alloc::outside_bytes();
    let per = used as f64 / n as f64;
    println!(
        "allocated {per:.2} B/member, heap_bytes {:.2} B/member",
        z.heap_bytes() as f64 / n as f64
    );
    assert_eq!(z.len(), n as usize);
    assert!(per < 40.0, "{per} B/member");
    // The nodes (32 B each) and towers live in mappings at this size, counted as written,
    // and given back when the set goes.
    assert!(mapped >= 32 * n as isize, "mapped {mapped}");
    drop(z);
    assert_eq!(
        podium::alloc::outside_bytes(),
        0,
        "the mappings' pages were uncounted"
    );
}
