//! The access field of every keyspace entry ([`super::Entry::access`], Redis's `lru`): under an
//! LRU (or TTL/random) policy the Unix second of the last access, modulo 2^24; under an LFU
//! policy the last decrement time in minutes (16 bits) and a logarithmic access counter
//! (8 bits). Lookups update it ([`touch`]), OBJECT IDLETIME / FREQ read it, and eviction
//! (`crate::evict`, above this layer) ranks keys by it. The policy settings live here because
//! the field's meaning depends on them; `crate::evict` re-exports these names.

use super::Entry;
use rand::Rng;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// The eviction policy, from `maxmemory-policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    NoEviction,
    VolatileLru,
    AllkeysLru,
    VolatileLfu,
    AllkeysLfu,
    VolatileRandom,
    AllkeysRandom,
    VolatileTtl,
}

impl Policy {
    pub fn parse(name: &str) -> Policy {
        match name {
            "volatile-lru" => Policy::VolatileLru,
            "allkeys-lru" => Policy::AllkeysLru,
            "volatile-lfu" => Policy::VolatileLfu,
            "allkeys-lfu" => Policy::AllkeysLfu,
            "volatile-random" => Policy::VolatileRandom,
            "allkeys-random" => Policy::AllkeysRandom,
            "volatile-ttl" => Policy::VolatileTtl,
            _ => Policy::NoEviction,
        }
    }

    pub(crate) fn volatile(self) -> bool {
        matches!(
            self,
            Policy::VolatileLru
                | Policy::VolatileLfu
                | Policy::VolatileRandom
                | Policy::VolatileTtl
        )
    }

    pub(crate) fn is_lfu(self) -> bool {
        matches!(self, Policy::VolatileLfu | Policy::AllkeysLfu)
    }

    pub(crate) fn is_random(self) -> bool {
        matches!(self, Policy::VolatileRandom | Policy::AllkeysRandom)
    }
}

static POLICY: AtomicU8 = AtomicU8::new(0);
static LFU: AtomicBool = AtomicBool::new(false);
static LFU_LOG_FACTOR: AtomicU32 = AtomicU32::new(10);
static LFU_DECAY_TIME: AtomicU32 = AtomicU32::new(1);
/// Keys evicted since start (INFO evicted_keys).
pub static EVICTED_KEYS: AtomicU64 = AtomicU64::new(0);

const POLICIES: [Policy; 8] = [
    Policy::NoEviction,
    Policy::VolatileLru,
    Policy::AllkeysLru,
    Policy::VolatileLfu,
    Policy::AllkeysLfu,
    Policy::VolatileRandom,
    Policy::AllkeysRandom,
    Policy::VolatileTtl,
];

/// The update hooks of `maxmemory-policy`, `lfu-log-factor` and `lfu-decay-time` (their
/// configuration rows call them): the policy and LFU parameters every access reads.
/// `maxmemory-policy`.
pub fn set_policy(value: &str) {
    let p = Policy::parse(value);
    let idx = POLICIES.iter().position(|x| *x == p).unwrap_or(0);
    POLICY.store(idx as u8, Ordering::Relaxed);
    LFU.store(p.is_lfu(), Ordering::Relaxed);
}

/// `lfu-log-factor`.
pub fn set_lfu_log_factor(value: &str) {
    LFU_LOG_FACTOR.store(
        value.parse::<u64>().unwrap_or(10).min(u64::from(u32::MAX)) as u32,
        Ordering::Relaxed,
    );
}

/// `lfu-decay-time`.
pub fn set_lfu_decay_time(value: &str) {
    LFU_DECAY_TIME.store(
        value.parse::<u64>().unwrap_or(1).min(u64::from(u32::MAX)) as u32,
        Ordering::Relaxed,
    );
}

pub fn policy() -> Policy {
    POLICIES[POLICY.load(Ordering::Relaxed) as usize % POLICIES.len()]
}

pub fn lfu_mode() -> bool {
    LFU.load(Ordering::Relaxed)
}

const LRU_BITS_MASK: u32 = (1 << 24) - 1;
/// A new key's LFU counter, so it survives a few samplings before it is seen as cold.
const LFU_INIT_VAL: u32 = 5;

fn unix_secs() -> u64 {
    (crate::clock::unix_ms().max(0) / 1000) as u64
}

fn lru_clock(now_secs: u64) -> u32 {
    (now_secs as u32) & LRU_BITS_MASK
}

fn lfu_minutes(now_secs: u64) -> u32 {
    ((now_secs / 60) & 0xffff) as u32
}

/// The access field of a key created now.
pub fn initial_access() -> u32 {
    let now = unix_secs();
    if lfu_mode() {
        (lfu_minutes(now) << 8) | LFU_INIT_VAL
    } else {
        lru_clock(now)
    }
}

/// The LFU counter after decay for the time since its last decrement.
fn lfu_decayed(access: u32, now_secs: u64) -> u32 {
    let ldt = access >> 8;
    let counter = access & 255;
    let now = lfu_minutes(now_secs);
    let elapsed = if now >= ldt {
        now - ldt
    } else {
        65535 - ldt + now
    };
    let decay = LFU_DECAY_TIME.load(Ordering::Relaxed);
    let periods = elapsed.checked_div(decay).unwrap_or(0);
    counter.saturating_sub(periods)
}

/// Record an access at `now_ms` (the command's clock).
#[inline]
pub fn touch(e: &mut super::Header, now_ms: i64) {
    let now = (now_ms.max(0) / 1000) as u64;
    if lfu_mode() {
        let mut counter = lfu_decayed(e.access(), now);
        if counter < 255 {
            let base = counter.saturating_sub(LFU_INIT_VAL) as f64;
            let p = 1.0 / (base * f64::from(LFU_LOG_FACTOR.load(Ordering::Relaxed)) + 1.0);
            if rand::thread_rng().gen::<f64>() < p {
                counter += 1;
            }
        }
        e.set_access((lfu_minutes(now) << 8) | counter);
    } else {
        e.set_access(lru_clock(now));
    }
}

/// Milliseconds since the entry's last access (LRU mode; OBJECT IDLETIME).
pub fn idle_ms(e: &Entry) -> u64 {
    let clock = lru_clock(unix_secs());
    let idle = if clock >= e.access() {
        clock - e.access()
    } else {
        clock + (LRU_BITS_MASK - e.access())
    };
    u64::from(idle) * 1000
}

/// The LFU counter as OBJECT FREQ reports it (decayed to now).
pub fn frequency(e: &Entry) -> u32 {
    lfu_decayed(e.access(), unix_secs())
}

/// Set by RESTORE ... IDLETIME / FREQ.
pub fn set_idle_secs(e: &mut super::Header, secs: u64) {
    if !lfu_mode() {
        let clock = u64::from(lru_clock(unix_secs()));
        e.set_access(
            ((clock + u64::from(LRU_BITS_MASK) + 1 - (secs & u64::from(LRU_BITS_MASK)))
                & u64::from(LRU_BITS_MASK)) as u32,
        );
    }
}

pub fn set_frequency(e: &mut super::Header, freq: u8) {
    if lfu_mode() {
        e.set_access((lfu_minutes(unix_secs()) << 8) | u32::from(freq));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lfu_counter_decays_by_elapsed_periods() {
        LFU_DECAY_TIME.store(1, Ordering::Relaxed);
        let now = 60 * 1000;
        let access = (lfu_minutes(now) << 8) | 20;
        assert_eq!(lfu_decayed(access, now), 20);
        assert_eq!(lfu_decayed(access, now + 5 * 60), 15);
        assert_eq!(lfu_decayed(access, now + 50 * 60), 0);
    }
}
