//! A connection's output buffer: its limits and the size of its reply buffer.
//!
//! The limits (`client-output-buffer-limit`) are applied as Redis's
//! `checkClientOutputBufferLimits` applies them: over the hard limit the client is closed at
//! once; over the soft limit it is closed once it has stayed over it for longer than the
//! limit's seconds (dropping back under the soft limit starts the clock again).
//!
//! The connection loop (`crate::connection`) keeps reading and running a client's commands
//! while replies wait for the socket, as Redis keeps filling a client's reply list, so the
//! pending output of a client that pipelines without reading grows, counts in `used_memory`
//! (and so drives eviction) and meets these limits. A subscribed client is in the pubsub
//! class, any other in the normal class. A replica's output is the part of the shared
//! replication buffer it has not read yet: its limit is checked there (`state::repl`), with a
//! hard limit below `repl-backlog-size` taken as that size, as Redis takes it.
//!
//! The reply buffer ([`ReplyBuf`]) is the room a connection keeps for its replies between
//! batches, sized as Redis 7.0 sizes a client's reply buffer: 16 KiB at first, and on each
//! cron visit halved down to its recent peak (at least 1 KiB) when the peak used less than
//! half of it, or doubled (up to 16 KiB) when a reply filled it; the peak is reset every
//! `DEBUG REPLYBUFFER PEAK-RESET-TIME` ms (5 s), and `DEBUG REPLYBUFFER RESIZING 0` stops
//! the resizing. CLIENT LIST shows its size and peak as `rbs` and `rbp`.

use crate::config::ObufLimit;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// When a client went over its soft limit (None: it is not over it).
#[derive(Debug, Default)]
pub(crate) struct SoftClock {
    since: Option<Instant>,
}

impl SoftClock {
    /// True if a client with `used` bytes of pending output must be closed under `limit` at
    /// `now`; starts or resets the soft-limit clock as needed.
    pub(crate) fn over(&mut self, used: u64, limit: ObufLimit, now: Instant) -> bool {
        if limit.hard > 0 && used >= limit.hard {
            return true;
        }
        if limit.soft > 0 && used >= limit.soft {
            match self.since {
                None => {
                    self.since = Some(now);
                    false
                }
                Some(t) => now.duration_since(t) > Duration::from_secs(limit.soft_secs),
            }
        } else {
            self.since = None;
            false
        }
    }

    /// When the client will have been over its soft limit for too long, if it is over it:
    /// the connection checks again then even if nothing else happens.
    pub(crate) fn deadline(&self, limit: ObufLimit) -> Option<Instant> {
        let since = self.since?;
        (limit.soft > 0)
            .then(|| since + Duration::from_secs(limit.soft_secs) + Duration::from_millis(1))
    }
}

/// The reply buffer's first and largest size (Redis's PROTO_REPLY_CHUNK_BYTES).
pub(crate) const REPLY_CHUNK: usize = 16 * 1024;
/// Its smallest size (PROTO_REPLY_MIN_BYTES).
const REPLY_MIN: usize = 1024;
/// How often the peak is reset by default, in ms.
const PEAK_RESET_DEFAULT_MS: i64 = 5000;

/// DEBUG REPLYBUFFER PEAK-RESET-TIME (ms; negative: never) and RESIZING.
static PEAK_RESET_MS: AtomicI64 = AtomicI64::new(PEAK_RESET_DEFAULT_MS);
static RESIZING: AtomicBool = AtomicBool::new(true);

/// DEBUG REPLYBUFFER PEAK-RESET-TIME `ms` (negative: never; None: the default).
pub(crate) fn set_peak_reset_time(ms: Option<i64>) {
    PEAK_RESET_MS.store(ms.unwrap_or(PEAK_RESET_DEFAULT_MS), Ordering::Relaxed);
}

/// DEBUG REPLYBUFFER RESIZING.
pub(crate) fn set_resizing(on: bool) {
    RESIZING.store(on, Ordering::Relaxed);
}

/// One connection's reply buffer: its size and the most it held since the peak was reset.
#[derive(Debug)]
pub(crate) struct ReplyBuf {
    size: AtomicUsize,
    peak: AtomicUsize,
    /// Unix ms of the peak's last reset (0: not yet visited).
    peak_reset_at: AtomicI64,
}

impl Default for ReplyBuf {
    fn default() -> ReplyBuf {
        ReplyBuf {
            size: AtomicUsize::new(REPLY_CHUNK),
            peak: AtomicUsize::new(0),
            peak_reset_at: AtomicI64::new(0),
        }
    }
}

impl ReplyBuf {
    /// The buffer's size (CLIENT LIST rbs).
    pub(crate) fn size(&self) -> usize {
        self.size.load(Ordering::Relaxed)
    }

    /// The most it held since the last reset (CLIENT LIST rbp).
    pub(crate) fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// `pending` bytes of replies wait in the connection's output: the buffer holds as much
    /// of them as fits (the rest is, in Redis's terms, the reply list).
    #[inline]
    pub(crate) fn holds(&self, pending: usize) {
        let used = pending.min(self.size());
        if used > self.peak.load(Ordering::Relaxed) {
            self.peak.fetch_max(used, Ordering::Relaxed);
        }
    }

    /// The cron's visit at `now_ms` (Redis's clientsCronResizeOutputBuffer), with `pending`
    /// bytes waiting: the new size if the buffer is resized.
    pub(crate) fn cron(&self, now_ms: i64, pending: usize) -> Option<usize> {
        if !RESIZING.load(Ordering::Relaxed) {
            return None;
        }
        let size = self.size();
        let peak = self.peak();
        let new = if size / 2 >= REPLY_MIN && peak < size / 2 {
            Some(REPLY_MIN.max(peak + 1))
        } else if size * 2 < REPLY_CHUNK * 2 && peak == size {
            Some(REPLY_CHUNK.min(size * 2))
        } else {
            None
        };
        let reset_ms = PEAK_RESET_MS.load(Ordering::Relaxed);
        let last = self.peak_reset_at.load(Ordering::Relaxed);
        if last == 0 {
            self.peak_reset_at.store(now_ms, Ordering::Relaxed);
        } else if reset_ms >= 0 && now_ms - last >= reset_ms {
            self.peak
                .store(pending.min(new.unwrap_or(size)), Ordering::Relaxed);
            self.peak_reset_at.store(now_ms, Ordering::Relaxed);
        }
        if let Some(n) = new {
            self.size.store(n, Ordering::Relaxed);
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An idle buffer shrinks to 1 KiB at the first visit; one that replies fill doubles
    /// back to 16 KiB, a step a visit, and no further; with the peak reset, a buffer whose
    /// client went quiet shrinks again.
    #[test]
    fn the_reply_buffer_is_resized_as_redis_resizes_it() {
        let rb = ReplyBuf::default();
        rb.holds(5);
        assert_eq!(rb.cron(1000, 0), Some(REPLY_MIN));
        assert_eq!(rb.cron(1100, 0), None, "already at its least");
        let mut sizes = Vec::new();
        for t in 0..6 {
            rb.holds(40_000);
            sizes.push(rb.cron(1200 + t, 0));
        }
        assert_eq!(
            sizes,
            [Some(2048), Some(4096), Some(8192), Some(16384), None, None]
        );
        assert_eq!(rb.peak(), REPLY_CHUNK);
        // The default peak reset (5 s): the old peak holds until then.
        assert_eq!(rb.cron(3000, 0), None);
        assert_eq!(rb.cron(7000, 0), None, "the peak is reset here");
        assert_eq!(rb.cron(7100, 0), Some(REPLY_MIN));
    }

    #[test]
    fn hard_limit_closes_at_once_and_soft_limit_after_its_seconds() {
        let t0 = Instant::now();
        let limit = ObufLimit {
            hard: 1000,
            soft: 100,
            soft_secs: 2,
        };
        let mut c = SoftClock::default();
        assert!(!c.over(50, limit, t0));
        assert!(c.over(1000, limit, t0));
        assert!(!c.over(200, limit, t0));
        assert!(!c.over(200, limit, t0 + Duration::from_secs(2)));
        assert!(c.over(200, limit, t0 + Duration::from_millis(2001)));
        // Dropping under the soft limit restarts the clock.
        let mut c = SoftClock::default();
        assert!(!c.over(200, limit, t0));
        assert!(!c.over(10, limit, t0 + Duration::from_secs(1)));
        assert!(!c.over(200, limit, t0 + Duration::from_secs(3)));
        assert!(c.deadline(limit).is_some());
        assert!(!c.over(200, limit, t0 + Duration::from_secs(5)));
        // No limits: never closed.
        let mut c = SoftClock::default();
        assert!(!c.over(u64::MAX, ObufLimit::default(), t0));
        assert_eq!(c.deadline(ObufLimit::default()), None);
    }
}
