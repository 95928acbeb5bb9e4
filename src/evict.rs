//! Eviction under `maxmemory`: Redis's policies with Redis's sampling approximation.
//!
//! Every keyspace entry carries a 24-bit access field ([`crate::keyspace::Entry::access`]),
//! Redis's `lru` field: under an LRU (or TTL/random) policy the Unix second of the last access,
//! modulo 2^24; under an LFU policy the last decrement time in minutes (16 bits) and a
//! logarithmic access counter (8 bits) that starts at 5, grows with probability
//! 1/((counter-5)·lfu-log-factor+1) per access and loses one per `lfu-decay-time` minutes idle.
//! Lookups update it ([`touch`]); OBJECT IDLETIME / FREQ read it.
//!
//! Before a command flagged `denyoom` runs over `maxmemory`, [`free_memory`] evicts keys until
//! the allocator's count is under the limit: the LRU/LFU/TTL policies sample
//! `maxmemory-samples` keys per database (all keys, or those with a TTL for volatile-*) into a
//! pool of the 16 best candidates kept between calls, and delete the best one still present;
//! the random policies delete random keys, one database after another. Evicted keys are logged
//! to the AOF as DEL, invalidated for tracking clients, published as `evicted` keyspace events
//! and counted in INFO evicted_keys; CONFIG SET of a `maxmemory` under the memory in use
//! evicts at once. Nothing to evict means -OOM; running out
//! of the `maxmemory-eviction-tenacity` time budget lets the command through, as Redis does.
//!
//! The messages an eviction sends (invalidations to tracking clients, `evicted` keyspace
//! events) are not held against `maxmemory` while they wait in their clients' mailboxes
//! (`client::Notices`): Redis writes them out before it runs the next command, so they never make it
//! evict more keys, and here the connections that write them may run after the next command
//! (another worker, or later in the same worker's queue). Once taken into a connection's
//! output they count, as a slow reader's output buffer counts in Redis.

use crate::config::dir;
pub use crate::keyspace::access::{
    frequency, idle_ms, lfu_mode, policy, set_frequency, set_idle_secs, Policy, EVICTED_KEYS,
};
use crate::keyspace::Entry;
use crate::state::Server;
use bytes::Bytes;
use parking_lot::Mutex;
use rand::Rng;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// How much better a candidate is to evict (higher = evict first).
fn score(policy: Policy, e: &Entry, expire_at: i64) -> u64 {
    match policy {
        Policy::VolatileTtl => u64::MAX - expire_at.max(0) as u64,
        p if p.is_lfu() => 255 - u64::from(frequency(e)),
        _ => idle_ms(e),
    }
}

/// Candidates kept between evictions: (score, db, key), best last.
const POOL_SIZE: usize = 16;
static POOL: Mutex<Vec<(u64, usize, Bytes)>> = Mutex::new(Vec::new());
/// Bytes of the pool's copies of candidate keys, left out of what `maxmemory` compares: a
/// key is one allocation with its record, so a candidate is a copy of it (up to 16 of them;
/// with 1 KB keys, 16 KB that more evictions would otherwise have to make up for, as in
/// unit/maxmemory's tracking test: 52 evictions where 50 is the most allowed).
static POOL_BYTES: AtomicUsize = AtomicUsize::new(0);

fn pool_bytes(key: &Bytes) -> usize {
    crate::alloc::size_class(key.len())
}

fn pool_insert(pool: &mut Vec<(u64, usize, Bytes)>, cand: (u64, usize, Bytes)) {
    if pool.iter().any(|c| c.1 == cand.1 && c.2 == cand.2) {
        return;
    }
    if pool.len() >= POOL_SIZE {
        if pool[0].0 >= cand.0 {
            return;
        }
        let out = pool.remove(0);
        POOL_BYTES.fetch_sub(pool_bytes(&out.2), Ordering::Relaxed);
    }
    POOL_BYTES.fetch_add(pool_bytes(&cand.2), Ordering::Relaxed);
    let at = pool.partition_point(|c| c.0 <= cand.0);
    pool.insert(at, cand);
}

/// The best candidate, taken out of the pool.
fn pool_pop() -> Option<(u64, usize, Bytes)> {
    let best = POOL.lock().pop()?;
    POOL_BYTES.fetch_sub(pool_bytes(&best.2), Ordering::Relaxed);
    Some(best)
}

/// Sample up to `samples` keys of database `db` into the pool.
fn sample_db(srv: &Server, db: usize, policy: Policy, samples: usize, rng: &mut impl Rng) {
    let shards = &srv.keyspace.dbs[db].shards;
    let mut found = Vec::with_capacity(samples);
    for _ in 0..samples * 2 {
        if found.len() >= samples {
            break;
        }
        let sh = shards[rng.gen_range(0..shards.len())].lock();
        let key = if policy.volatile() {
            sh.random_volatile_key(rng)
        } else {
            sh.random_key(rng)
        };
        if let Some(k) = key {
            if let Some(e) = sh.raw_get(&k) {
                found.push((score(policy, &e, sh.expire_of(&e)), db, k));
            }
        }
    }
    let mut pool = POOL.lock();
    for c in found {
        pool_insert(&mut pool, c);
    }
}

/// Evict `key` of `db` if it is still there (and still volatile for a volatile policy): None
/// if not.
fn evict_key(srv: &Server, db: usize, key: &[u8], policy: Policy) -> Option<()> {
    let sid = srv.keyspace.shard_of(key);
    let mut sh = srv.keyspace.dbs[db].shards[sid].lock();
    match sh.raw_get(key) {
        Some(e) if !policy.volatile() || e.has_expire() => {}
        _ => return None,
    }
    let entry = sh.remove(key);
    sh.shrink_after_eviction();
    sh.touch_watched(key);
    // Logged while the shard is locked, so a later write to the key follows the DEL.
    srv.propagate(
        db,
        vec![Bytes::from_static(b"DEL"), Bytes::copy_from_slice(key)],
    );
    // As Redis: tracking clients are told first, then the `evicted` keyspace event goes out.
    let k = Bytes::copy_from_slice(key);
    crate::client::send_eviction_notices(|| {
        srv.tracking
            .invalidate(srv, std::slice::from_ref(&k), 0, None, true);
        crate::notify::keyspace_event(srv, crate::notify::EVICTED, "evicted", key, db);
    });
    drop(sh);
    if let Some(gone) = entry {
        crate::keyspace::lazyfree::free_if(&crate::keyspace::lazyfree::EVICTION, gone.value);
    }
    EVICTED_KEYS.fetch_add(1, Ordering::Relaxed);
    Some(())
}

/// The memory `maxmemory` is compared with: all allocated bytes but the AOF buffer (as Redis
/// leaves out its AOF and replication buffers, so that writing them out never evicts keys),
/// the buffers of killed clients, which their connections are freeing, evictions' notices
/// still in mailboxes (`client::Notices`) and the eviction pool's key copies.
pub fn counted_memory(srv: &Server) -> i64 {
    let (used, replica_buffers) = srv.repl.used_memory_and_replica_buffers();
    (used as u64)
        .saturating_sub(POOL_BYTES.load(Ordering::Relaxed) as u64)
        .saturating_sub(srv.aof.buffer_bytes() as u64)
        .saturating_sub(replica_buffers as u64)
        .saturating_sub(crate::client::killed_unfreed() as u64)
        .saturating_sub(crate::client::eviction_notice_bytes() as u64) as i64
}

/// CONFIG SET maxmemory: a limit below the memory in use evicts at once (Redis starts its
/// eviction timer), rather than at the next write.
/// `evict_now` is false inside EXEC, which holds every shard lock: the eviction then happens
/// before the next command, and the transaction runs as queued (as Redis's tests expect).
pub fn after_maxmemory_set(srv: &Server, evict_now: bool) {
    let max = srv.config.hot.maxmemory.load(Ordering::Relaxed);
    let used = counted_memory(srv);
    if max <= 0 || used <= max {
        return;
    }
    tracing::warn!(
        "WARNING: the new maxmemory value set via CONFIG SET ({max}) is smaller than the current memory usage ({used}). This will result in key eviction and/or the inability to accept new write commands depending on the maxmemory-policy."
    );
    if evict_now {
        while free_memory(srv) == Outcome::Running {}
    }
}

/// Databases holding keys the policy may evict.
fn candidate_dbs(srv: &Server, policy: Policy) -> Vec<usize> {
    (0..srv.keyspace.num_dbs())
        .filter(|&db| {
            let (keys, volatile) = srv.keyspace.db_sizes(db);
            if policy.volatile() {
                volatile > 0
            } else {
                keys > 0
            }
        })
        .collect()
}

/// Redis's per-call eviction time budget for a tenacity of 0..=100 (None = no limit).
fn time_limit_us(tenacity: i64) -> Option<u64> {
    match tenacity {
        t if t <= 10 => Some(50 * t.max(0) as u64),
        t if t < 100 => Some((500.0 * 1.15f64.powi((t - 10) as i32)) as u64),
        _ => None,
    }
}

/// What a write over `maxmemory` may do.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Under the limit (or no limit).
    Ok,
    /// Still over the limit, but eviction is under way: the command may run.
    Running,
    /// Nothing can be evicted: the command gets -OOM.
    Fail,
}

/// Evict until used memory is under `maxmemory`, per the policy.
pub fn free_memory(srv: &Server) -> Outcome {
    let max = srv.config.hot.maxmemory.load(Ordering::Relaxed);
    if max <= 0 || counted_memory(srv) <= max {
        return Outcome::Ok;
    }
    crate::client::eviction_round(|| free_memory_round(srv))
}

fn free_memory_round(srv: &Server) -> Outcome {
    let max = srv.config.hot.maxmemory.load(Ordering::Relaxed);
    if max <= 0 || counted_memory(srv) <= max {
        return Outcome::Ok;
    }
    // While clients are paused the dataset stays as it is: no eviction (and no -OOM), as Redis.
    if srv.pause.is_active() {
        return Outcome::Ok;
    }
    let policy = policy();
    if policy == Policy::NoEviction {
        return Outcome::Fail;
    }
    let samples = srv.config.int(dir::MAXMEMORY_SAMPLES).max(1) as usize;
    let limit = time_limit_us(srv.config.int(dir::MAXMEMORY_EVICTION_TENACITY));
    let start = Instant::now();
    let mut rng = rand::thread_rng();
    let mut evicted = 0u64;
    let mut next_db = 0usize;
    // The evictions' own messages are left out of the count while queued (see Notices), so
    // messages about evicted keys cannot make this or the next command evict more keys (the
    // feedback loop of unit/maxmemory's tracking test).
    while counted_memory(srv) > max {
        let dbs = candidate_dbs(srv, policy);
        if dbs.is_empty() {
            return Outcome::Fail;
        }
        let done = if policy.is_random() {
            let db = dbs[next_db % dbs.len()];
            next_db += 1;
            let shards = &srv.keyspace.dbs[db].shards;
            let mut key = None;
            for _ in 0..shards.len() * 4 {
                let sh = shards[rng.gen_range(0..shards.len())].lock();
                key = if policy.volatile() {
                    sh.random_volatile_key(&mut rng)
                } else {
                    sh.random_key(&mut rng)
                };
                if key.is_some() {
                    break;
                }
            }
            key.and_then(|k| evict_key(srv, db, &k, policy))
        } else {
            for &db in &dbs {
                sample_db(srv, db, policy, samples, &mut rng);
            }
            let mut done = None;
            loop {
                let Some((_, db, key)) = pool_pop() else {
                    break;
                };
                done = evict_key(srv, db, &key, policy);
                if done.is_some() {
                    break;
                }
            }
            done
        };
        if done.is_some() {
            evicted += 1;
        }
        // As Redis: look at the clock every 16 evictions.
        if evicted.is_multiple_of(16) {
            if let Some(us) = limit {
                if start.elapsed().as_micros() as u64 > us {
                    return Outcome::Running;
                }
            }
        }
    }
    Outcome::Ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_keeps_the_best_sixteen_in_order() {
        let mut pool = Vec::new();
        for i in 0..40u64 {
            pool_insert(&mut pool, ((i * 7) % 40, 0, Bytes::from(i.to_string())));
        }
        assert_eq!(pool.len(), POOL_SIZE);
        let scores: Vec<u64> = pool.iter().map(|c| c.0).collect();
        assert_eq!(scores, (24..40).collect::<Vec<_>>());
        // A duplicate key is not added twice.
        let dup = pool[15].clone();
        pool_insert(&mut pool, (99, dup.1, dup.2));
        assert_eq!(pool.len(), POOL_SIZE);
    }

    #[test]
    fn tenacity_bounds_the_eviction_time() {
        assert_eq!(time_limit_us(10), Some(500));
        assert_eq!(time_limit_us(100), None);
    }
}
