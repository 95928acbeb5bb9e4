//! Lazy freeing: big values and emptied databases are freed on a background thread, as
//! Redis's lazyfree.c does with its bio thread.
//!
//! Freeing a value costs one deallocation per allocation it made: a 1M-member set is a
//! million frees, tens of milliseconds during which the command that deleted it would hold its
//! shard and its worker. UNLINK, FLUSHDB/FLUSHALL ASYNC and, when their `lazyfree-lazy-*`
//! directive is on, DEL, FLUSH* without a mode, expiry, eviction and the deletions a command
//! makes of its own accord (an overwrite by SET or a *STORE, RENAME's replaced destination)
//! hand the value to [`free`] instead of dropping it. A value whose free effort
//! ([`effort`], Redis's lazyfreeGetFreeEffort: about one unit per allocation) is above
//! [`THRESHOLD`] goes to the lazyfree thread; anything smaller is dropped on the spot, where
//! it costs less than the hand-off. Emptied databases always go to the thread, whatever their
//! size ([`free_shards`]), as Redis's emptyDbAsync does.
//!
//! INFO memory shows the objects waiting (`lazyfree_pending_objects`) and those freed so far
//! (`lazyfreed_objects`, which CONFIG RESETSTAT zeroes): a value counts one, a database as
//! many as it had keys.

use super::Shard;
use crate::types::Value;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::OnceLock;

/// Values with a free effort above this go to the thread (Redis's LAZYFREE_THRESHOLD).
pub const THRESHOLD: usize = 64;

/// `lazyfree-lazy-user-del`: DEL frees as UNLINK does.
pub static USER_DEL: AtomicBool = AtomicBool::new(false);
/// `lazyfree-lazy-user-flush`: FLUSHDB / FLUSHALL without SYNC or ASYNC are ASYNC.
pub static USER_FLUSH: AtomicBool = AtomicBool::new(false);
/// `lazyfree-lazy-server-del`: values a command overwrites or replaces.
pub static SERVER_DEL: AtomicBool = AtomicBool::new(false);
/// `lazyfree-lazy-expire`: values of expired keys.
pub static EXPIRE: AtomicBool = AtomicBool::new(false);
/// `lazyfree-lazy-eviction`: values of evicted keys.
pub static EVICTION: AtomicBool = AtomicBool::new(false);

static PENDING: AtomicUsize = AtomicUsize::new(0);
static FREED: AtomicU64 = AtomicU64::new(0);

/// Work for the thread: what to drop, and how many objects it counts for.
enum Job {
    /// A value and its free effort ([`effort`]).
    Value(Value, usize),
    Shards(Vec<Shard>, usize),
}

/// The thread's queue, started at the first hand-off.
fn queue() -> &'static std::sync::Mutex<Sender<Job>> {
    static QUEUE: OnceLock<std::sync::Mutex<Sender<Job>>> = OnceLock::new();
    QUEUE.get_or_init(|| {
        let (tx, rx) = channel::<Job>();
        let spawned = std::thread::Builder::new()
            .name("lazyfree".into())
            .spawn(move || {
                // Objects freed since the thread's cache was last given back.
                let mut since_flush = 0usize;
                loop {
                    let job = match rx.try_recv() {
                        Ok(job) => job,
                        Err(std::sync::mpsc::TryRecvError::Empty) => {
                            // Idle from here: what its cache keeps would pin pages for good.
                            crate::alloc::after_mass_free(std::mem::take(&mut since_flush));
                            match rx.recv() {
                                Ok(job) => job,
                                Err(_) => break,
                            }
                        }
                        Err(std::sync::mpsc::TryRecvError::Disconnected) => break,
                    };
                    let (n, effort) = match job {
                        Job::Value(v, e) => {
                            drop(v);
                            (1, e)
                        }
                        Job::Shards(shards, n) => {
                            drop(shards);
                            (n, n)
                        }
                    };
                    since_flush += effort;
                    PENDING.fetch_sub(n, Ordering::AcqRel);
                    FREED.fetch_add(n as u64, Ordering::AcqRel);
                }
            });
        if let Err(e) = spawned {
            // Without the thread every hand-off fails and is dropped in place (see `send`).
            crate::log::line(
                crate::log::WARNING,
                &format!("Can't start the lazyfree thread: {e}"),
            );
        }
        std::sync::Mutex::new(tx)
    })
}

/// Hand `job` (counting `n` objects) to the thread, or drop it here if the thread is gone.
fn send(job: Job, n: usize) {
    PENDING.fetch_add(n, Ordering::AcqRel);
    let sent = match queue().lock() {
        Ok(tx) => tx.send(job),
        Err(poisoned) => poisoned.into_inner().send(job),
    };
    if let Err(failed) = sent {
        drop(failed.0);
        PENDING.fetch_sub(n, Ordering::AcqRel);
    }
}

/// About how many allocations freeing `v` takes (Redis's lazyfreeGetFreeEffort).
pub fn effort(v: &Value) -> usize {
    match v {
        Value::Str(_) => 1,
        Value::List(l) => {
            if l.is_packed() {
                1
            } else {
                l.len()
            }
        }
        Value::Set(s) => s.free_effort(),
        Value::Hash(h) => {
            if h.encoding_name() == "hashtable" {
                h.len()
            } else {
                1
            }
        }
        Value::ZSet(z) => {
            if z.encoding_name() == "skiplist" {
                z.len()
            } else {
                1
            }
        }
        Value::Stream(s) => {
            // Every node is an allocation; each group is one, and so is every entry of its
            // pending list (the first group's size stands for all, as in Redis).
            let groups = s.groups.len();
            let pel = s.groups.values().next().map_or(0, |g| g.pel.len());
            s.node_count() + groups * (1 + pel)
        }
    }
}

/// Free `v` on the lazyfree thread if it is big enough to be worth it, else here.
pub fn free(v: Value) {
    let e = effort(&v);
    if e > THRESHOLD {
        send(Job::Value(v, e), 1);
    }
}

/// Free `v` lazily when `flag` (one of the `lazyfree-lazy-*` switches) is on, else here.
pub fn free_if(flag: &AtomicBool, v: Value) {
    if flag.load(Ordering::Relaxed) {
        free(v);
    }
}

/// Free the contents of emptied shards, which held `keys` keys, on the thread.
pub fn free_shards(shards: Vec<Shard>, keys: usize) {
    send(Job::Shards(shards, keys), keys);
}

/// Objects handed to the thread and not yet freed (INFO `lazyfree_pending_objects`).
pub fn pending() -> usize {
    PENDING.load(Ordering::Acquire)
}

/// Objects the thread has freed since the start or CONFIG RESETSTAT (INFO `lazyfreed_objects`).
pub fn freed() -> u64 {
    FREED.load(Ordering::Acquire)
}

/// CONFIG RESETSTAT.
pub fn reset_stats() {
    FREED.store(0, Ordering::Release);
}

/// The update hook of a `lazyfree-lazy-*` directive.
pub fn set(flag: &AtomicBool, value: &str) {
    flag.store(value.eq_ignore_ascii_case("yes"), Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::set::Set;

    fn big_set(n: usize) -> Value {
        let mut s = Set::for_member(b"a");
        for i in 0..n {
            s.add(format!("m{i}").as_bytes(), 512);
        }
        Value::Set(s)
    }

    #[test]
    fn effort_counts_allocations_and_small_values_stay_here() {
        assert_eq!(effort(&big_set(200)), 200);
        // Up to 128 short members a set is one array: one allocation.
        assert_eq!(effort(&big_set(100)), 1);
        let before = pending() + freed() as usize;
        // Small: dropped in place, the thread never sees it (nothing counted).
        free(big_set(10));
        assert_eq!(pending() + freed() as usize, before);
        // Big: counted as pending until the thread has freed it, then as freed.
        let freed_before = freed();
        free(big_set(1000));
        let mut waited = 0;
        while freed() == freed_before && waited < 5000 {
            std::thread::sleep(std::time::Duration::from_millis(1));
            waited += 1;
        }
        assert!(freed() > freed_before, "the thread freed the big set");
        // Shards count their keys.
        let mut sh = Shard::default();
        sh.insert(b"k", big_set(3), false);
        let freed_before = freed();
        free_shards(vec![sh], 1);
        let mut waited = 0;
        while freed() < freed_before + 1 && waited < 5000 {
            std::thread::sleep(std::time::Duration::from_millis(1));
            waited += 1;
        }
        assert!(freed() > freed_before);
    }
}
