//! The global allocator: the system allocator with a byte counter, so that INFO's
//! `used_memory` reports bytes actually allocated (as Redis's zmalloc does), not an estimate.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

pub struct CountingAlloc;

static ALLOCATED: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every method forwards to `System` with the same arguments and only adds bookkeeping
// on an atomic counter; the allocation contract is System's. Covered by `counts_allocations`.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            ALLOCATED.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            ALLOCATED.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        ALLOCATED.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: ptr was allocated by System with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: ptr was allocated by System with `layout`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            ALLOCATED.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        p
    }
}

/// Bytes currently allocated through the global allocator (0 if another allocator is in use).
pub fn used_memory() -> usize {
    ALLOCATED.load(Ordering::Relaxed).max(0) as usize
}

/// Resident set size of this process in bytes, from /proc.
pub fn rss_bytes() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<usize>().ok())
        })
        .map(|pages| pages * 4096)
        .unwrap_or(0)
}

/// Tune glibc malloc for a server holding large arenas: big blocks come from mmap and go back
/// to the OS when freed (so RSS follows the data), and the number of arenas stays small.
pub fn tune_malloc() {
    // SAFETY: mallopt only changes allocator parameters; called once at startup.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
        libc::mallopt(libc::M_ARENA_MAX, 4);
    }
}

/// Return free heap memory to the OS (glibc `malloc_trim`).
pub fn trim() {
    // SAFETY: malloc_trim only releases free memory held by the allocator; it is thread-safe.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_allocations() {
        // Only meaningful when the binary installs CountingAlloc; the lib's tests do not, so
        // exercise the methods directly.
        use super::*;
        let a = CountingAlloc;
        let layout = Layout::from_size_align(1000, 8).unwrap();
        let before = used_memory();
        // SAFETY: layout is non-zero; the pointer is freed with the same layout.
        unsafe {
            let p = a.alloc(layout);
            assert!(!p.is_null());
            assert!(used_memory() >= before + 1000 || used_memory() >= 1000);
            let p = a.realloc(p, layout, 4000);
            a.dealloc(p, Layout::from_size_align(4000, 8).unwrap());
        }
    }
}
