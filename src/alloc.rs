//! The global allocator: jemalloc (as redis-server uses) behind a byte counter, so that INFO's
//! `used_memory` reports bytes actually allocated (as Redis's zmalloc does), not an estimate.
//!
//! jemalloc's options are set by the binary (`src/main.rs`, `MALLOC_CONF`): freed pages go back
//! to the OS within 100 ms and large blocks carry no cache-colouring page, which keeps RSS within
//! a few hundred KiB of `used_memory` on a 1M-member sorted set (see README, "Memory
//! accounting"). `jemalloc-bg-thread` (as Redis's) starts jemalloc's purging thread, so an idle
//! server still gives its freed pages back ([`set_background_thread`]).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, AtomicUsize, Ordering};
use tikv_jemallocator::Jemalloc;

pub mod defrag;

/// An allocator that counts the bytes it hands out into [`used_memory`].
pub struct Counting<A>(A);

/// The server's allocator: jemalloc, counted.
pub type CountingAlloc = Counting<Jemalloc>;

/// jemalloc behind the counter (what the binary installs).
pub const COUNTING_JEMALLOC: CountingAlloc = Counting(Jemalloc);

/// The system allocator behind the counter, for the fuzz targets: AddressSanitizer sees
/// allocations made through malloc but not jemalloc's, and the scripts' fuzz budget reads
/// [`used_memory`].
pub const COUNTING_SYSTEM: Counting<System> = Counting(System);

/// Allocated bytes are counted per thread: the threads that serve requests (the runtime's,
/// which claim a slot when they start, see [`claim_thread_slot`]) each own a counter that only
/// they write, with a plain load and store, and `used_memory` sums them. One shared counter
/// took a locked read-modify-write (about 4 ns here) on every allocation and every free, and
/// its cache line moved between cores with two workers. Valkey 8 counts per
/// thread for the same reason. Threads without a slot (the cron, the AOF writer, the main
/// thread, or more runtime threads than slots) share [`SHARED`], with atomic additions.
pub(crate) const THREAD_SLOTS: usize = 64;
/// A slot index meaning "none" (the thread counts into [`SHARED`]).
const NO_SLOT: u8 = u8::MAX;

/// One thread's counter, alone on its cache line so that the threads' stores do not contend.
#[repr(align(128))]
struct Slot(AtomicIsize);

static SLOTS: [Slot; THREAD_SLOTS] = [const { Slot(AtomicIsize::new(0)) }; THREAD_SLOTS];
/// The counter of threads without a slot.
static SHARED: AtomicIsize = AtomicIsize::new(0);
/// Bit i set: slot i is free. Claiming clears the bit (acquire) and releasing sets it again
/// (release), so a slot's next owner sees the last store of the one before it and goes on
/// from its value: a slot's total outlives its thread, as the bytes it counted may.
static FREE_SLOTS: AtomicU64 = AtomicU64::new(u64::MAX);
/// One past the highest slot ever claimed: `used_memory` sums only those.
static SLOTS_IN_USE: AtomicUsize = AtomicUsize::new(0);

const _: () = assert!(THREAD_SLOTS <= 64 && THREAD_SLOTS < NO_SLOT as usize);

thread_local! {
    /// This thread's slot, or NO_SLOT. A const initializer and no destructor: reading it never
    /// allocates and works while the thread is being torn down.
    static THREAD_SLOT: std::cell::Cell<u8> = const { std::cell::Cell::new(NO_SLOT) };
}

/// Add `delta` bytes to this thread's counter.
#[inline]
fn count(delta: isize) {
    match thread_slot() {
        // Only this thread writes its slot, so a load and a store count exactly.
        Some(i) => {
            let s = &SLOTS[i].0;
            s.store(s.load(Ordering::Relaxed) + delta, Ordering::Relaxed)
        }
        None => {
            SHARED.fetch_add(delta, Ordering::Relaxed);
        }
    }
}

/// The calling thread's slot, if it claimed one (other per-thread counters use the same
/// slots, see `crate::util::counter`).
#[inline]
pub(crate) fn thread_slot() -> Option<usize> {
    let slot = THREAD_SLOT.try_with(|s| s.get()).unwrap_or(NO_SLOT);
    (usize::from(slot) < THREAD_SLOTS).then_some(usize::from(slot))
}

/// How many slots have ever been claimed (the lowest ones): summing them covers every thread.
#[inline]
pub(crate) fn thread_slots_in_use() -> usize {
    SLOTS_IN_USE.load(Ordering::Relaxed).min(THREAD_SLOTS)
}

/// Give the calling thread a counter of its own (the runtime calls this as each of its threads
/// starts); without a free slot it keeps counting into the shared one.
pub fn claim_thread_slot() {
    if THREAD_SLOT.with(|s| s.get()) != NO_SLOT {
        return;
    }
    let mut free = FREE_SLOTS.load(Ordering::Relaxed);
    loop {
        let i = free.trailing_zeros() as usize;
        if i >= THREAD_SLOTS {
            return;
        }
        match FREE_SLOTS.compare_exchange_weak(
            free,
            free & !(1u64 << i),
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            Ok(_) => {
                SLOTS_IN_USE.fetch_max(i + 1, Ordering::Relaxed);
                THREAD_SLOT.with(|s| s.set(i as u8));
                return;
            }
            Err(now) => free = now,
        }
    }
}

/// Hand the calling thread's counter back (as the thread stops); what it counted stays in the
/// total, and the thread counts into the shared counter until it is gone.
pub fn release_thread_slot() {
    let slot = THREAD_SLOT.with(|s| s.replace(NO_SLOT));
    if usize::from(slot) < THREAD_SLOTS {
        FREE_SLOTS.fetch_or(1u64 << slot, Ordering::Release);
    }
}

// SAFETY: every method forwards to the inner allocator with the same arguments and only adds
// bookkeeping on the counters (no allocation, no lock); the allocation contract is the inner
// allocator's. Covered by `counts_allocations` and `thread_slots_keep_the_total`.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { self.0.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { self.0.alloc_zeroed(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        // SAFETY: ptr was allocated by the inner allocator with this layout.
        unsafe { self.0.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: ptr was allocated by the inner allocator with `layout`.
        let p = unsafe { self.0.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(new_size as isize - layout.size() as isize);
        }
        p
    }
}

/// Bytes currently allocated through the global allocator (0 if another allocator is in use):
/// the sum of the threads' counters. A thread's counter goes negative when it frees what
/// another allocated; only the sum means anything.
pub fn used_memory() -> usize {
    let total = SLOTS[..thread_slots_in_use()]
        .iter()
        .fold(SHARED.load(Ordering::Relaxed), |sum, s| {
            sum + s.0.load(Ordering::Relaxed)
        });
    (total + outside_bytes()).max(0) as usize
}

/// Bytes of memory in use that did not come from the global allocator: the skip lists' mapped
/// arenas (`types::arena`), counted by the page as they are written.
static OUTSIDE: AtomicIsize = AtomicIsize::new(0);

/// Count `bytes` more (or, negative, fewer) of memory obtained outside the global allocator,
/// so that `used_memory` (INFO, MEMORY STATS, `maxmemory`) includes it.
pub(crate) fn count_outside(bytes: isize) {
    OUTSIDE.fetch_add(bytes, Ordering::Relaxed);
}

/// The memory counted by [`count_outside`] so far.
pub fn outside_bytes() -> isize {
    OUTSIDE.load(Ordering::Relaxed)
}

/// The highest [`used_memory`] seen so far: sampled, as Redis samples its peak (every cron
/// tick and whenever INFO or MEMORY STATS reads it), not tracked per allocation, which would put
/// an atomic maximum on every allocation's path.
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// Sample the allocated bytes into the peak; returns the peak (INFO `used_memory_peak`).
pub fn sample_peak() -> usize {
    let used = used_memory();
    PEAK.fetch_max(used, Ordering::Relaxed).max(used)
}

/// The bytes an allocation of `n` bytes really takes: jemalloc's size class (0 for 0). MEMORY
/// USAGE counts these, as Redis counts `zmalloc_size` of each allocation.
pub fn size_class(n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    // SAFETY: nallocx only computes the size class of a request; it allocates nothing and
    // reads no memory of ours (tested in `size_classes_round_up`).
    let real = unsafe { tikv_jemalloc_sys::nallocx(n, 0) };
    if real == 0 {
        n
    } else {
        real
    }
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

/// The allocator's name and version for INFO `mem_allocator`, as redis-server prints it
/// (`jemalloc-5.3.1`).
pub fn allocator_name() -> String {
    let mut version: *const std::ffi::c_char = std::ptr::null();
    let mut len = std::mem::size_of::<*const std::ffi::c_char>();
    // SAFETY: "version" is a read-only jemalloc control whose value is a `const char *` to a
    // static NUL-terminated string; we pass a pointer-sized output buffer and its size.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            c"version".as_ptr(),
            (&mut version as *mut *const std::ffi::c_char).cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    if rc != 0 || version.is_null() {
        return "jemalloc".to_string();
    }
    // SAFETY: jemalloc returned a pointer to its static version string.
    let full = unsafe { std::ffi::CStr::from_ptr(version) }.to_string_lossy();
    // "5.3.1-0-g81034ce..." -> "5.3.1"
    format!("jemalloc-{}", full.split('-').next().unwrap_or(""))
}

/// What jemalloc itself reports (MEMORY STATS `allocator.*`, INFO `allocator_*`): bytes in
/// allocations, in active pages, and resident in the allocator's mappings. Refreshed by
/// advancing jemalloc's statistics epoch first, so the figures are current.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct AllocatorStats {
    pub(crate) allocated: usize,
    pub(crate) active: usize,
    pub(crate) resident: usize,
}

/// Read a `size_t` jemalloc control; None when jemalloc does not provide it.
fn mallctl_usize(name: &std::ffi::CStr) -> Option<usize> {
    let mut value: usize = 0;
    let mut len = std::mem::size_of::<usize>();
    // SAFETY: `name` is NUL-terminated; the control is a size_t, written into `value`, whose
    // size we pass in `len`. Covered by `allocator_stats_are_read`.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr(),
            (&mut value as *mut usize).cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    (rc == 0).then_some(value)
}

/// `jemalloc-bg-thread`'s value, and whether the server has started (daemonized) so the thread
/// may run: a thread started before a fork is not in the child.
static BACKGROUND_THREAD_WANTED: AtomicBool = AtomicBool::new(true);
static BACKGROUND_THREAD_ALLOWED: AtomicBool = AtomicBool::new(false);

/// `jemalloc-bg-thread yes|no`: jemalloc's purging thread on or off, at once when the server
/// runs, otherwise once it starts ([`allow_background_thread`]), as Redis applies it.
pub fn set_background_thread(on: bool) {
    BACKGROUND_THREAD_WANTED.store(on, Ordering::Relaxed);
    if BACKGROUND_THREAD_ALLOWED.load(Ordering::Relaxed) {
        apply_background_thread(on);
    }
}

/// The server has started (after daemonizing): apply `jemalloc-bg-thread` from now on.
pub fn allow_background_thread() {
    BACKGROUND_THREAD_ALLOWED.store(true, Ordering::Relaxed);
    apply_background_thread(BACKGROUND_THREAD_WANTED.load(Ordering::Relaxed));
}

/// Whether jemalloc's purging thread runs.
pub fn background_thread() -> bool {
    let mut on = false;
    let mut len = std::mem::size_of::<bool>();
    // SAFETY: "background_thread" is a bool control, read into a live bool whose size we pass.
    // Covered by `background_thread_follows_the_setting`.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            c"background_thread".as_ptr(),
            (&mut on as *mut bool).cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    rc == 0 && on
}

fn apply_background_thread(mut on: bool) {
    // SAFETY: "background_thread" is a bool control, written from a live bool whose size we
    // pass; no old value is read. Covered by `background_thread_follows_the_setting`.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            c"background_thread".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            (&mut on as *mut bool).cast(),
            std::mem::size_of::<bool>(),
        )
    };
    if rc != 0 {
        tracing::warn!("jemalloc-bg-thread: jemalloc refused to switch its purging thread ({rc})");
    }
}

/// jemalloc's current totals (all zero if its statistics are not compiled in), plus the skip
/// lists' mapped arenas ([`outside_bytes`]: pages written, so allocated, active and resident
/// alike), which serve as their allocator: without them the fragmentation and RSS-overhead
/// ratios computed from these would count a large sorted set as memory outside any allocator.
pub(crate) fn allocator_stats() -> AllocatorStats {
    let own = jemalloc_stats();
    let mapped = outside_bytes().max(0) as usize;
    AllocatorStats {
        allocated: own.allocated + mapped,
        active: own.active + mapped,
        resident: own.resident + mapped,
    }
}

/// jemalloc's own totals.
fn jemalloc_stats() -> AllocatorStats {
    let mut epoch: u64 = 1;
    let mut len = std::mem::size_of::<u64>();
    // SAFETY: "epoch" reads and writes a uint64_t; both pointers are to a live u64 and `len`
    // is its size. Writing it makes jemalloc refresh the statistics read below.
    unsafe {
        tikv_jemalloc_sys::mallctl(
            c"epoch".as_ptr(),
            (&mut epoch as *mut u64).cast(),
            &mut len,
            (&mut epoch as *mut u64).cast(),
            std::mem::size_of::<u64>(),
        );
    }
    let total = AllocatorStats {
        allocated: mallctl_usize(c"stats.allocated").unwrap_or(0),
        active: mallctl_usize(c"stats.active").unwrap_or(0),
        resident: mallctl_usize(c"stats.resident").unwrap_or(0),
    };
    // The Lua states' arena (`defrag::SideHeap`) is left out, as Redis's Lua allocates
    // outside jemalloc: these figures (and the fragmentation the defragmenter acts on) are
    // the data's. Lua's bytes are still in `used_memory`.
    let Some(a) = defrag::side_arena_made() else {
        return total;
    };
    let arena = |what: &str| {
        std::ffi::CString::new(format!("stats.arenas.{a}.{what}"))
            .ok()
            .and_then(|name| mallctl_usize(&name))
            .unwrap_or(0)
    };
    let page = mallctl_usize(c"arenas.page").unwrap_or(4096);
    let lua_allocated = arena("small.allocated") + arena("large.allocated");
    let allocated = total.allocated.saturating_sub(lua_allocated);
    // The arena's allocated bytes count regions and its active bytes whole pages, so the two
    // differences can cross by a few pages: what is left keeps jemalloc's own order
    // (allocated <= active <= resident), as the fragmentation ratios assume.
    let active = total
        .active
        .saturating_sub(arena("pactive") * page)
        .max(allocated);
    AllocatorStats {
        allocated,
        active,
        resident: total.resident.saturating_sub(arena("resident")).max(active),
    }
}

/// jemalloc's own statistics report (MEMORY MALLOC-STATS), as `malloc_stats_print` writes it.
pub(crate) fn malloc_stats_text() -> String {
    unsafe extern "C" fn append(opaque: *mut std::ffi::c_void, text: *const std::ffi::c_char) {
        // SAFETY: `opaque` is the `String` passed below, alive for the whole call; jemalloc
        // hands a NUL-terminated string.
        let (out, text) = unsafe {
            (
                &mut *opaque.cast::<String>(),
                std::ffi::CStr::from_ptr(text),
            )
        };
        out.push_str(&text.to_string_lossy());
    }
    let mut out = String::new();
    // SAFETY: the callback only appends to `out`, which outlives the call; a null option
    // string selects the full report.
    unsafe {
        tikv_jemalloc_sys::malloc_stats_print(
            Some(append),
            (&mut out as *mut String).cast(),
            std::ptr::null(),
        );
    }
    out
}

/// Give every arena's unused dirty pages back to the OS (MEMORY PURGE): jemalloc's
/// `arena.<MALLCTL_ARENAS_ALL>.purge`. Err with jemalloc's error number.
pub(crate) fn purge() -> Result<(), i32> {
    mallctl_void(c"arena.4096.purge")
}

/// Run a jemalloc control that takes and gives nothing (an action). Err with its error number.
fn mallctl_void(name: &std::ffi::CStr) -> Result<(), i32> {
    // SAFETY: a void control (the callers name only action controls): no input, no output
    // pointers, and `name` is NUL-terminated.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(rc)
    }
}

/// Return this thread's cached free blocks to their arenas (jemalloc's
/// `thread.tcache.flush`), after the thread freed many objects at once (a FLUSHALL, the
/// lazyfree thread's work). A thread cache keeps up to a few hundred freed blocks per size
/// class, each from a different page, and an idle thread never gives them back: after
/// FLUSHALL of 200k small hashes they pinned about 2.5 MB of otherwise empty slabs (RSS 24 B
/// per flushed key left, 6 B with the cache flushed). Err with jemalloc's error number.
pub(crate) fn flush_thread_cache() -> Result<(), i32> {
    mallctl_void(c"thread.tcache.flush")
}

/// A thread freed this many objects or more at once: worth [`flush_thread_cache`] and a purge.
pub(crate) const MANY_FREED: usize = 1024;

/// After a thread freed `n` objects at once: give the blocks its cache keeps and the pages
/// left empty back (as Redis purges jemalloc after a synchronous FLUSHALL).
pub(crate) fn after_mass_free(n: usize) {
    if n >= MANY_FREED {
        // Both only fail without jemalloc (the library's tests): nothing to give back then.
        let _ = flush_thread_cache();
        let _ = purge();
    }
}

/// Controls whose value, or input, is a pointer jemalloc follows (hook tables, strings,
/// structures): DEBUG MALLCTL would hand it a number as one, which Redis does and then
/// crashes on. Any name containing one of these is refused a write by [`mallctl_int`], and
/// the string ones are what [`mallctl_str`] reads and writes.
const POINTER_CONTROLS: &[&str] = &[
    "extent_hooks",
    "hooks",
    "prof",
    ".dss",
    ".name",
    "ncached_max",
    "arenas_create_ext",
    "utilization",
    "lookup",
];

/// Controls whose value is a `const char *` (the names of jemalloc 5.3's string controls,
/// and the patterns of the per-arena ones), which DEBUG MALLCTL-STR may read as a string.
fn is_string_control(name: &str) -> bool {
    const EXACT: &[&str] = &[
        "version",
        "config.malloc_conf",
        "opt.metadata_thp",
        "opt.dss",
        "opt.percpu_arena",
        "opt.stats_print_opts",
        "opt.stats_interval_opts",
        "opt.junk",
        "opt.thp",
        "opt.prof_prefix",
        "opt.zero_realloc",
        "opt.hpa_hugify_style",
        "opt.prof_time_resolution",
        "opt.malloc_conf.symlink",
        "opt.malloc_conf.env_var",
        "opt.malloc_conf.global_var",
        "opt.malloc_conf.global_var_2_conf_harder",
        "thread.prof.name",
    ];
    let parts: Vec<&str> = name.split('.').collect();
    EXACT.contains(&name)
        || matches!(parts.as_slice(), ["arena", _, "dss" | "name"])
        || matches!(parts.as_slice(), ["stats", "arenas", _, "dss"])
}

/// What DEBUG MALLCTL does with jemalloc control `name` (Redis's mallctl_int): read it as
/// a 64-bit integer, or write `new` and read the old value, retrying with half the width
/// on EINVAL (jemalloc's answer to a size mismatch) and, for a write-only control, writing
/// alone. Ok(Some(old value)), Ok(None) for a write-only control written, or Err(errno).
/// The size dance is Redis's to the byte, so the same control gets the same answer (jemalloc
/// shrinks the size it is given on a mismatch, so a 4-byte control ends in EINVAL there
/// too). A write to a control whose input is a pointer is refused with EPERM.
pub(crate) fn mallctl_int(name: &std::ffi::CStr, new: Option<i64>) -> Result<Option<i64>, i32> {
    let text = name.to_string_lossy();
    if new.is_some() && POINTER_CONTROLS.iter().any(|p| text.contains(p)) {
        return Err(libc::EPERM);
    }
    let mut old: i64 = 0;
    let mut val: i64 = new.unwrap_or(0);
    let mut sz = std::mem::size_of::<i64>();
    while sz > 0 {
        let (newp, newlen) = match new {
            Some(_) => ((&mut val as *mut i64).cast::<std::ffi::c_void>(), sz),
            None => (std::ptr::null_mut(), 0),
        };
        // SAFETY: `old` has room for 8 bytes and jemalloc writes at most `sz` (<= 8) of them;
        // the input, if any, is `val`, 8 bytes of which jemalloc reads at most `sz`; controls
        // that would follow the input as a pointer were refused above.
        let mut ret = unsafe {
            tikv_jemalloc_sys::mallctl(
                name.as_ptr(),
                (&mut old as *mut i64).cast(),
                &mut sz,
                newp,
                newlen,
            )
        };
        if ret == 0 {
            return Ok(Some(old));
        }
        if ret == libc::EPERM && new.is_some() {
            // SAFETY: as above, writing only.
            ret = unsafe {
                tikv_jemalloc_sys::mallctl(
                    name.as_ptr(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    newp,
                    sz,
                )
            };
            if ret == 0 {
                return Ok(None);
            }
        }
        if ret != libc::EINVAL {
            return Err(ret);
        }
        sz /= 2;
    }
    Err(libc::EINVAL)
}

/// What DEBUG MALLCTL-STR does with jemalloc control `name` (Redis's mallctl_string): read
/// its string value, and write `new` if given (`VOID`: run the control with no input, as
/// `thread.tcache.flush` wants). Ok(Some(old value)) when the read succeeded, Ok(None) when
/// only the write did, or Err(errno). Only string controls are read as strings (Redis
/// follows any control's value as a `char *`, and crashes on a number): another control that
/// answers is EINVAL. A string is written only to a string control (EPERM otherwise).
pub(crate) fn mallctl_str(
    name: &std::ffi::CStr,
    new: Option<&[u8]>,
) -> Result<Option<String>, i32> {
    let text = name.to_string_lossy();
    let string_control = is_string_control(&text);
    let mut old: *const std::ffi::c_char = std::ptr::null();
    let mut sz = std::mem::size_of::<*const std::ffi::c_char>();
    // SAFETY: `old` has room for a pointer, and jemalloc writes at most `sz` bytes.
    let rret = unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr(),
            (&mut old as *mut *const std::ffi::c_char).cast(),
            &mut sz,
            std::ptr::null_mut(),
            0,
        )
    };
    if rret != 0 && !(rret == libc::EPERM && new.is_some()) {
        return Err(rret);
    }
    if rret == 0 && !string_control {
        return Err(libc::EINVAL);
    }
    let mut wret = 0;
    if let Some(v) = new {
        if v == b"VOID" {
            // SAFETY: no input and no output: an action control, or EINVAL/EPERM.
            wret = unsafe {
                tikv_jemalloc_sys::mallctl(
                    name.as_ptr(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                )
            };
        } else if !string_control {
            wret = libc::EPERM;
        } else {
            let owned = std::ffi::CString::new(v.split(|&b| b == 0).next().unwrap_or(&[]))
                .map_err(|_| libc::EINVAL)?;
            let mut p = owned.as_ptr();
            // SAFETY: a string control takes a `const char *`: `p` points at a NUL-terminated
            // string alive for the call (jemalloc copies what it keeps).
            wret = unsafe {
                tikv_jemalloc_sys::mallctl(
                    name.as_ptr(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    (&mut p as *mut *const std::ffi::c_char).cast(),
                    std::mem::size_of::<*const std::ffi::c_char>(),
                )
            };
        }
    }
    if rret == 0 {
        if old.is_null() {
            return Ok(Some(String::new()));
        }
        // SAFETY: a string control's value is a NUL-terminated string jemalloc keeps.
        let s = unsafe { std::ffi::CStr::from_ptr(old) };
        return Ok(Some(s.to_string_lossy().into_owned()));
    }
    if wret != 0 {
        return Err(wret);
    }
    Ok(None)
}

/// [`used_memory`] once the server was set up and before any data loaded (INFO
/// `used_memory_startup`, MEMORY STATS `startup.allocated`), as Redis records it.
static STARTUP: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Record the memory in use now as the startup figure.
pub(crate) fn record_startup() {
    STARTUP.store(used_memory(), Ordering::Relaxed);
}

/// The figure [`record_startup`] recorded.
pub(crate) fn startup_memory() -> usize {
    STARTUP.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {

    #[test]
    fn size_classes_round_up() {
        assert_eq!(super::size_class(0), 0);
        assert_eq!(super::size_class(1), 8);
        assert_eq!(super::size_class(75), 80);
        assert_eq!(super::size_class(100), 112);
        assert_eq!(super::size_class(4096), 4096);
        assert!(super::size_class(5000) >= 5000);
    }

    #[test]
    fn the_peak_never_falls_below_a_sampled_use() {
        use super::*;
        let a = &COUNTING_SYSTEM;
        let layout = Layout::from_size_align(1 << 20, 8).unwrap();
        // SAFETY: layout is non-zero; the pointer is freed with the same layout.
        unsafe {
            let p = a.alloc(layout);
            assert!(!p.is_null());
            // Other tests count through the same total, but only add while they hold a block.
            let high = sample_peak();
            assert!(high >= 1 << 20, "peak {high}");
            a.dealloc(p, layout);
            // Freeing does not lower the peak, and a later sample keeps it.
            assert!(sample_peak() >= high);
        }
    }

    #[test]
    fn background_thread_follows_the_setting() {
        use super::*;
        allow_background_thread();
        set_background_thread(true);
        assert!(background_thread());
        set_background_thread(false);
        assert!(!background_thread());
    }

    #[test]
    fn allocator_stats_are_read() {
        use super::*;
        // The library's tests run on the system allocator, so jemalloc's own totals are
        // whatever it holds itself; what matters is that the controls answer and agree.
        let s = allocator_stats();
        assert!(s.active >= s.allocated, "{s:?}");
        assert!(s.resident >= s.active, "{s:?}");
        let text = malloc_stats_text();
        assert!(text.contains("jemalloc"), "{text}");
        assert_eq!(purge(), Ok(()));
        assert_eq!(flush_thread_cache(), Ok(()));
        after_mass_free(MANY_FREED);
    }

    #[test]
    fn counts_allocations() {
        // Only meaningful when the binary installs CountingAlloc; the lib's tests do not, so
        // exercise the methods directly.
        use super::*;
        fn exercise(a: &impl GlobalAlloc) {
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
        exercise(&COUNTING_JEMALLOC);
        exercise(&COUNTING_SYSTEM);
    }

    /// Bytes allocated by a thread with a slot of its own and freed by another stay counted
    /// until freed, after the first thread stopped and gave its slot back.
    #[test]
    fn thread_slots_keep_the_total() {
        use super::*;
        const N: usize = 64 << 20;
        // Other tests exercise the counters concurrently, by a few KiB.
        const NOISE: usize = 1 << 20;
        let layout = Layout::from_size_align(N, 8).unwrap();
        let before = used_memory();
        let p = std::thread::spawn(move || {
            claim_thread_slot();
            assert_ne!(THREAD_SLOT.with(|s| s.get()), NO_SLOT);
            // SAFETY: a non-zero layout; freed below with the same layout.
            let p = unsafe { COUNTING_SYSTEM.alloc(layout) };
            assert!(!p.is_null());
            release_thread_slot();
            assert_eq!(THREAD_SLOT.with(|s| s.get()), NO_SLOT);
            p as usize
        })
        .join()
        .unwrap();
        assert!(used_memory() + NOISE >= before + N);
        std::thread::spawn(move || {
            claim_thread_slot();
            // SAFETY: allocated above by the same allocator with this layout.
            unsafe { COUNTING_SYSTEM.dealloc(p as *mut u8, layout) };
            release_thread_slot();
        })
        .join()
        .unwrap();
        assert!(used_memory() < before + NOISE);
    }

    #[test]
    fn names_jemalloc_with_its_version() {
        let name = super::allocator_name();
        assert!(name.starts_with("jemalloc-5."), "{name}");
        assert!(!name.contains("-g"), "{name}");
    }
}
