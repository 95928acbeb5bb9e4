//! Statistics counters that every request adds to and that only INFO and its kin read:
//! commandstats' calls and time, the latency histograms, total_commands_processed, the keyspace
//! hits and misses, the network byte counts.
//!
//! An atomic addition is a locked instruction, about 4 ns on this machine even when no other
//! core touches the counter, and a request made five of them; with several workers the
//! counters' cache lines also moved between cores on every request. Here each runtime thread
//! (the threads that hold an allocation-counter slot, `crate::alloc::claim_thread_slot`) adds
//! into a row of counters of its own with a plain load and store, and a read sums the rows.
//! Rows are indexed by the counter: each counter takes an index when it is made, up to
//! [`MAX_COUNTERS`]; counters made after that, and threads without a slot, fall back to one
//! atomic per counter. A reset (CONFIG RESETSTAT) moves a baseline rather than zeroing the rows,
//! which only their threads may write.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// How many counters can have per-thread rows (the command table's calls, time and latency
/// buckets take most: a few thousand).
pub const MAX_COUNTERS: usize = 16_384;

/// One row of counters per thread slot. Zero-initialised static memory: a page becomes resident
/// only when a thread first adds to a counter on it.
static ROWS: [[AtomicU64; MAX_COUNTERS]; crate::alloc::THREAD_SLOTS] =
    [const { [const { AtomicU64::new(0) }; MAX_COUNTERS] }; crate::alloc::THREAD_SLOTS];

static NEXT_INDEX: AtomicUsize = AtomicUsize::new(0);

const NO_INDEX: u32 = u32::MAX;

/// A counter added to by many threads and read rarely (see the module's notes).
pub struct Counter {
    /// Its column in [`ROWS`], or NO_INDEX.
    index: u32,
    /// What threads without a row (or every thread, without an index) add.
    shared: AtomicU64,
    /// The raw total at the last reset.
    base: AtomicU64,
}

impl Default for Counter {
    fn default() -> Counter {
        Counter::new()
    }
}

impl Counter {
    pub fn new() -> Counter {
        let next = NEXT_INDEX.fetch_add(1, Ordering::Relaxed);
        Counter {
            index: if next < MAX_COUNTERS {
                next as u32
            } else {
                NO_INDEX
            },
            shared: AtomicU64::new(0),
            base: AtomicU64::new(0),
        }
    }

    /// A counter without a per-thread column (one atomic), for statics and rarely used ones.
    pub const fn unindexed() -> Counter {
        Counter {
            index: NO_INDEX,
            shared: AtomicU64::new(0),
            base: AtomicU64::new(0),
        }
    }

    /// Add `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        if let (Some(slot), true) = (crate::alloc::thread_slot(), self.index != NO_INDEX) {
            let cell = &ROWS[slot][self.index as usize];
            // Only this thread writes its row, so a load and a store add exactly.
            cell.store(
                cell.load(Ordering::Relaxed).wrapping_add(n),
                Ordering::Relaxed,
            );
        } else {
            self.shared.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Everything added since the counter was made or last reset.
    fn raw(&self) -> u64 {
        let mut sum = self.shared.load(Ordering::Relaxed);
        if self.index != NO_INDEX {
            for row in &ROWS[..crate::alloc::thread_slots_in_use()] {
                sum = sum.wrapping_add(row[self.index as usize].load(Ordering::Relaxed));
            }
        }
        sum
    }

    /// The count since the last reset.
    pub fn get(&self) -> u64 {
        self.raw().wrapping_sub(self.base.load(Ordering::Relaxed))
    }

    /// Count from zero again (an addition made while this runs may land on either side).
    pub fn reset(&self) {
        self.base.store(self.raw(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::Counter;

    /// Threads with rows of their own, threads without, and one thread after another in the
    /// same slot all count; a reset starts from zero.
    #[test]
    fn counts_every_thread_and_resets() {
        let c = std::sync::Arc::new(Counter::new());
        let workers: Vec<_> = (0..4)
            .map(|i| {
                let c = c.clone();
                std::thread::spawn(move || {
                    if i % 2 == 0 {
                        crate::alloc::claim_thread_slot();
                    }
                    for _ in 0..10_000 {
                        c.add(1);
                    }
                    c.add(5);
                    crate::alloc::release_thread_slot();
                })
            })
            .collect();
        for w in workers {
            w.join().expect("worker");
        }
        assert_eq!(c.get(), 4 * 10_005);
        c.reset();
        assert_eq!(c.get(), 0);
        std::thread::spawn({
            let c = c.clone();
            move || {
                crate::alloc::claim_thread_slot();
                c.add(7);
                crate::alloc::release_thread_slot();
            }
        })
        .join()
        .expect("worker");
        c.add(3);
        assert_eq!(c.get(), 10);
    }
}
