//! A connection's output buffer limits (`client-output-buffer-limit`), as Redis's
//! `checkClientOutputBufferLimits` applies them: over the hard limit the client is closed at
//! once; over the soft limit it is closed once it has stayed over it for longer than the
//! limit's seconds (dropping back under the soft limit starts the clock again).
//!
//! The connection loop (`crate::connection`) keeps reading and running a client's commands
//! while replies wait for the socket, as Redis keeps filling a client's reply list, so the
//! pending output of a client that pipelines without reading grows, counts in `used_memory`
//! (and so drives eviction) and meets these limits. A subscribed client is in the pubsub
//! class, any other in the normal class.

use crate::config::ObufLimit;
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

#[cfg(test)]
mod tests {
    use super::*;

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
