//! Active defragmentation (`activedefrag yes`): the incremental walk over every key, its
//! pacing and its counters, held by [`crate::state::Server`] and run by the server's defrag
//! thread (`server`) at `hz`.
//!
//! As Redis's activeDefragCycle: once a second the allocator's fragmentation is measured
//! (jemalloc's active bytes over its allocated bytes); a run starts when it is above both
//! `active-defrag-threshold-lower` (percent) and `active-defrag-ignore-bytes`, with a CPU share
//! interpolated between `active-defrag-cycle-min` and `-max` as the fragmentation goes from the
//! lower to the upper threshold (it may grow during a run, never shrink). Each tick then spends
//! that share of the tick's period walking the keyspace: database by database, shard by shard,
//! bucket chain by bucket chain (`keyspace::defrag`), the shard locked as a command would
//! lock it, and let go every few chains so commands interleave. Values bigger than
//! `active-defrag-max-scan-fields` are walked over several steps. At the end of a pass the
//! script cache is done too, the fragmentation measured again, and the run stops or goes
//! on. Nothing runs while a fork child (BGSAVE, AOF rewrite) shares the pages: moving memory
//! then would only copy it.
//!
//! The blocks are judged and moved by `alloc::defrag` with stock jemalloc's controls. INFO
//! reports `active_defrag_running` (the CPU share, 0 when idle), the hits and misses (blocks
//! moved and left), the key hits and misses, and the time spent in runs.

use crate::alloc::defrag::Relocator;
use crate::config::dir;
use crate::keyspace::defrag::KeyTally;
use bytes::Bytes;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::Server;

/// Bucket chains walked under one hold of a shard's lock.
const CHAINS_PER_HOLD: usize = 16;
/// Keys looked at, or blocks moved, after which a hold ends early (Redis checks its clock
/// after 64 keys or 512 moves for the same reason).
const KEYS_PER_HOLD: u64 = 64;
const HITS_PER_HOLD: u64 = 512;
/// Elements of a big value walked under one hold.
const FIELDS_PER_HOLD: usize = 512;

/// The defragmenter's state and counters.
#[derive(Default)]
pub struct Defrag {
    /// The CPU percent of the current run; 0 when not running (INFO `active_defrag_running`).
    running: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    key_hits: AtomicU64,
    key_misses: AtomicU64,
    /// Milliseconds spent in finished runs (INFO `total_active_defrag_time`).
    total_ms: AtomicU64,
    /// Unix milliseconds at which the current run started; 0 when none (INFO
    /// `current_active_defrag_time`).
    run_started_ms: AtomicU64,
    walk: Mutex<Walk>,
}

/// Where the walk is, between ticks.
#[derive(Default)]
struct Walk {
    relocator: Option<Relocator>,
    /// Database and shard being walked, and the bucket cursor in it; `in_pass` false when
    /// no pass is under way (the next starts at database 0).
    in_pass: bool,
    db: usize,
    shard: usize,
    cursor: u64,
    /// The shard's bucket chains are all walked (its big values may still be pending).
    buckets_done: bool,
    /// Keys of the current shard whose values are too big for one step, and the element to
    /// go on from in the last one.
    later: Vec<Bytes>,
    later_from: usize,
    /// When the fragmentation was last measured.
    checked: Option<Instant>,
    /// When the current run started (INFO `current_active_defrag_time`).
    run_started: Option<Instant>,
    /// When the current pass started, and the hits then (for the log line at its end).
    pass_started: Option<Instant>,
    pass_hits: u64,
}

/// Counters INFO shows.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct DefragStats {
    pub running: u64,
    pub hits: u64,
    pub misses: u64,
    pub key_hits: u64,
    pub key_misses: u64,
    pub total_ms: u64,
    pub current_ms: u64,
}

/// The allocator's fragmentation: percent of active bytes over allocated ones (as Redis's
/// getAllocatorFragmentation), and the bytes between them.
fn fragmentation() -> (f64, u64) {
    let a = crate::alloc::allocator_stats();
    if a.allocated == 0 {
        return (0.0, 0);
    }
    (
        a.active as f64 / a.allocated as f64 * 100.0 - 100.0,
        a.active.saturating_sub(a.allocated) as u64,
    )
}

/// The CPU percent for fragmentation `pct`: `cycle-min` at the lower threshold, `cycle-max`
/// at the upper one, linear between, and clamped to the two.
fn cpu_percent(pct: f64, lower: i64, upper: i64, min: i64, max: i64) -> u64 {
    let cpu = if upper > lower {
        min as f64 + (pct - lower as f64) * (max - min) as f64 / (upper - lower) as f64
    } else {
        max as f64
    };
    // Redis limits to [min, max] with min checked last.
    (cpu as i64).min(max).max(min).max(0) as u64
}

impl Defrag {
    pub fn stats(&self) -> DefragStats {
        let started = self.run_started_ms.load(Ordering::Relaxed);
        let current_ms = if started == 0 {
            0
        } else {
            (crate::clock::unix_ms() as u64).saturating_sub(started)
        };
        DefragStats {
            running: self.running.load(Ordering::Relaxed),
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            key_hits: self.key_hits.load(Ordering::Relaxed),
            key_misses: self.key_misses.load(Ordering::Relaxed),
            total_ms: self.total_ms.load(Ordering::Relaxed) + current_ms,
            current_ms,
        }
    }

    /// CONFIG RESETSTAT: the counters and the time spent go back to zero (a run under way
    /// counts from now).
    pub fn reset_stats(&self) {
        for c in [
            &self.hits,
            &self.misses,
            &self.key_hits,
            &self.key_misses,
            &self.total_ms,
        ] {
            c.store(0, Ordering::Relaxed);
        }
        let now = crate::clock::unix_ms().max(1) as u64;
        let _ = self
            .run_started_ms
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                (t != 0).then_some(now)
            });
    }

    /// Once a second: start a run, or make the current one more aggressive, per the
    /// fragmentation now (Redis's computeDefragCycles).
    fn compute_cycles(&self, srv: &Server) {
        let (pct, bytes) = fragmentation();
        let c = &srv.config;
        let lower = c.int(dir::ACTIVE_DEFRAG_THRESHOLD_LOWER);
        let running = self.running.load(Ordering::Relaxed);
        if running == 0
            && (pct < lower as f64 || bytes < c.int(dir::ACTIVE_DEFRAG_IGNORE_BYTES).max(0) as u64)
        {
            return;
        }
        let cpu = cpu_percent(
            pct,
            lower,
            c.int(dir::ACTIVE_DEFRAG_THRESHOLD_UPPER),
            c.int(dir::ACTIVE_DEFRAG_CYCLE_MIN),
            c.int(dir::ACTIVE_DEFRAG_CYCLE_MAX),
        );
        if cpu > running {
            self.running.store(cpu, Ordering::Relaxed);
            tracing::debug!(
                "Starting active defrag, frag={pct:.0}%, frag_bytes={bytes}, cpu={cpu}%"
            );
        }
    }

    /// A loader's hook (Redis's whileBlockedCron during loading), called every so many
    /// commands or keys: run the ticks due since `last` (one per `1/hz` of loading time), on
    /// the loader's thread, so that a load which fragments memory (an AOF of SETs and the
    /// DELs of their evictions) is defragmented as it goes, at the cron's CPU share. The
    /// defrag thread leaves loading time to this hook.
    pub fn while_loading(&self, srv: &Server, last: &mut Instant) {
        let hz = srv.config.hot.hz.load(Ordering::Relaxed).clamp(1, 500) as u64;
        let period = Duration::from_micros(1_000_000 / hz);
        while *last + period <= Instant::now() {
            self.tick(srv);
            *last += period;
        }
    }

    /// One tick of the defragmenter (`1/hz` apart). Returns how long it worked, if it did
    /// (the caller records `active-defrag-cycle` latency from it).
    pub fn tick(&self, srv: &Server) -> Option<Duration> {
        let mut walk = self.walk.lock();
        let w = &mut *walk;
        if !srv.config.flag(dir::ACTIVEDEFRAG) {
            if self.running.load(Ordering::Relaxed) != 0 {
                // Turned off mid-run: the next run starts afresh.
                self.running.store(0, Ordering::Relaxed);
                w.in_pass = false;
                w.later.clear();
                w.later_from = 0;
            }
            self.end_run(w);
            return None;
        }
        let inner = &srv.aof.inner;
        if inner.snap.child.load(Ordering::SeqCst) != 0 || inner.rewriting.load(Ordering::SeqCst) {
            return None;
        }
        // Once a second, as Redis; while data loads, every tick: Podium's loader replays
        // an AOF several times faster than Redis's, and a run started a second late would
        // find the load done and the damage in place.
        let every = if inner.loading.load(Ordering::Relaxed) {
            Duration::ZERO
        } else {
            Duration::from_secs(1)
        };
        if w.checked.is_none_or(|t| t.elapsed() >= every) {
            w.checked = Some(Instant::now());
            self.compute_cycles(srv);
        }
        let cpu = self.running.load(Ordering::Relaxed);
        if cpu == 0 {
            self.end_run(w);
            return None;
        }
        if w.run_started.is_none() {
            w.run_started = Some(Instant::now());
            self.run_started_ms
                .store(crate::clock::unix_ms().max(1) as u64, Ordering::Relaxed);
        }
        let hz = srv.config.hot.hz.load(Ordering::Relaxed).clamp(1, 500) as u64;
        let start = Instant::now();
        let end = start + Duration::from_micros((1_000_000 * cpu / hz / 100).max(1));
        let r = w.relocator.get_or_insert_with(Relocator::new);
        if !r.can_move() {
            return None;
        }
        r.refresh();
        loop {
            if !w.in_pass {
                w.in_pass = true;
                w.db = 0;
                w.shard = 0;
                w.cursor = 0;
                w.buckets_done = false;
                w.later.clear();
                w.later_from = 0;
                w.pass_started = Some(Instant::now());
                w.pass_hits = self.hits.load(Ordering::Relaxed);
            }
            if w.db >= srv.keyspace.num_dbs() {
                self.end_pass(srv, w);
                // Another pass right away if the fragmentation still calls for it.
                self.compute_cycles(srv);
                if self.running.load(Ordering::Relaxed) != 0 && Instant::now() < end {
                    continue;
                }
                break;
            }
            // As Redis, a tick that finished a database ends there: a pass takes a tick per
            // database at least, and the script cache is done at the start of a tick.
            if self.step(srv, w) || Instant::now() >= end {
                break;
            }
        }
        if self.running.load(Ordering::Relaxed) == 0 {
            self.end_run(w);
        }
        Some(start.elapsed())
    }

    /// One hold of one shard's lock: a piece of a big value, or a few bucket chains; moves
    /// on to the next shard (and database) when this one is done. True when a database was
    /// finished.
    fn step(&self, srv: &Server, w: &mut Walk) -> bool {
        let max_fields = srv
            .config
            .int(dir::ACTIVE_DEFRAG_MAX_SCAN_FIELDS)
            .clamp(1, i64::MAX) as usize;
        let per = srv.keyspace.shards_per_db();
        let Some(r) = w.relocator.as_mut() else {
            return false;
        };
        let before = r.tally;
        let mut keys = KeyTally::default();
        {
            let mut sh = srv.keyspace.dbs[w.db].shards[w.shard].lock();
            if let Some(key) = w.later.last() {
                match sh.defrag_value(key, r, w.later_from, FIELDS_PER_HOLD) {
                    Some(next) => w.later_from = next,
                    None => {
                        w.later.pop();
                        w.later_from = 0;
                    }
                }
            } else {
                let mut chains = 0;
                loop {
                    w.cursor = sh.defrag_buckets(w.cursor, r, max_fields, &mut w.later, &mut keys);
                    chains += 1;
                    if w.cursor == 0
                        || chains >= CHAINS_PER_HOLD
                        || keys.hits + keys.misses >= KEYS_PER_HOLD
                        || r.tally.hits - before.hits >= HITS_PER_HOLD
                    {
                        break;
                    }
                }
                w.buckets_done = w.cursor == 0;
            }
        }
        // The shard is done when its chains and then its big values are.
        let mut db_done = false;
        if w.buckets_done && w.later.is_empty() {
            w.buckets_done = false;
            w.shard += 1;
            if w.shard >= per {
                w.shard = 0;
                w.db += 1;
                db_done = true;
            }
        }
        self.count(
            r.tally.hits - before.hits,
            r.tally.misses - before.misses,
            keys,
        );
        db_done
    }

    fn count(&self, hits: u64, misses: u64, keys: KeyTally) {
        self.hits.fetch_add(hits, Ordering::Relaxed);
        self.misses.fetch_add(misses, Ordering::Relaxed);
        self.key_hits.fetch_add(keys.hits, Ordering::Relaxed);
        self.key_misses.fetch_add(keys.misses, Ordering::Relaxed);
    }

    /// A pass over every database finished: the script cache too, then the run stops (the
    /// caller measures again whether another is needed).
    fn end_pass(&self, srv: &Server, w: &mut Walk) {
        if let Some(r) = w.relocator.as_mut() {
            let before = r.tally;
            srv.scripts.cache.lock().defrag(r);
            self.count(
                r.tally.hits - before.hits,
                r.tally.misses - before.misses,
                KeyTally::default(),
            );
        }
        let (pct, bytes) = fragmentation();
        tracing::debug!(
            "Active defrag done in {}ms, reallocated={}, frag={pct:.0}%, frag_bytes={bytes}",
            w.pass_started.map_or(0, |t| t.elapsed().as_millis()),
            self.hits
                .load(Ordering::Relaxed)
                .saturating_sub(w.pass_hits),
        );
        w.in_pass = false;
        self.running.store(0, Ordering::Relaxed);
    }

    /// No run under way: fold the finished run's time into the total.
    fn end_run(&self, w: &mut Walk) {
        if w.run_started.take().is_some() {
            let started = self.run_started_ms.swap(0, Ordering::Relaxed);
            let now = crate::clock::unix_ms() as u64;
            self.total_ms
                .fetch_add(now.saturating_sub(started), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_share_follows_the_thresholds() {
        // Redis's defaults: 10..100 percent mapped onto 1..25.
        assert_eq!(cpu_percent(5.0, 10, 100, 1, 25), 1);
        assert_eq!(cpu_percent(10.0, 10, 100, 1, 25), 1);
        assert_eq!(cpu_percent(55.0, 10, 100, 1, 25), 13);
        assert_eq!(cpu_percent(100.0, 10, 100, 1, 25), 25);
        assert_eq!(cpu_percent(400.0, 10, 100, 1, 25), 25);
        // The suite's: lower 5, cycle 65..75.
        assert_eq!(cpu_percent(40.0, 5, 100, 65, 75), 68);
        // Equal thresholds do not divide by zero.
        assert_eq!(cpu_percent(40.0, 5, 5, 65, 75), 75);
    }
}
