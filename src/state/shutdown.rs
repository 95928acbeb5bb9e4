//! The state a signal-initiated shutdown keeps (scheduled, the cron held by DEBUG
//! PAUSE-CRON), the state of a shutdown waiting for its replicas (`shutdown-timeout`), and
//! their data-level operations. [`crate::shutdown`], above, serves the signals and carries the
//! shutdown out.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

/// The state a signal-initiated shutdown shares with SHUTDOWN ABORT and DEBUG PAUSE-CRON.
#[derive(Default)]
pub(crate) struct SignalShutdown {
    /// A signal asked for a shutdown that has not started yet.
    pub(crate) scheduled: AtomicBool,
    /// DEBUG PAUSE-CRON 1: the cron does nothing (a scheduled shutdown waits).
    pub(crate) cron_paused: AtomicBool,
    /// Wakes the waiting shutdown when one of the above changes.
    pub(crate) changed: tokio::sync::Notify,
}

impl SignalShutdown {
    /// SHUTDOWN ABORT: cancel a scheduled shutdown; false when none is scheduled.
    pub(crate) fn abort(&self) -> bool {
        if self.scheduled.swap(false, Ordering::SeqCst) {
            tracing::warn!("Shutdown manually aborted.");
            self.changed.notify_one();
            true
        } else {
            false
        }
    }

    /// DEBUG PAUSE-CRON.
    pub(crate) fn pause_cron(&self, paused: bool) {
        self.cron_paused.store(paused, Ordering::SeqCst);
        self.changed.notify_one();
    }

    /// Whether the cron is held by DEBUG PAUSE-CRON.
    pub(crate) fn cron_paused(&self) -> bool {
        self.cron_paused.load(Ordering::Relaxed)
    }
}

/// A shutdown waiting for its replicas to catch up before it saves and exits (Redis's
/// `shutdown_mstime`): SHUTDOWN clients block on it, SHUTDOWN ABORT cancels it, INFO shows
/// its time left (`shutdown_in_milliseconds`).
#[derive(Default)]
pub(crate) struct ReplicaWait {
    /// Unix ms when the wait stops waiting for lagging replicas; 0 when none is under way.
    deadline_ms: AtomicI64,
    /// SHUTDOWN ABORT cancelled the wait.
    aborted: AtomicBool,
    /// Counts the waits that ended without exiting (aborted, or the save failed): the
    /// SHUTDOWN clients blocked on one are answered with an error when it moves.
    failures: AtomicU64,
    /// Wakes the wait (an abort) and the clients blocked on it (a failure).
    pub(crate) changed: tokio::sync::Notify,
}

impl ReplicaWait {
    /// Start a wait ending at `deadline_ms`; false if one is already under way (the caller
    /// joins it).
    pub(crate) fn start(&self, deadline_ms: i64) -> bool {
        self.deadline_ms
            .compare_exchange(0, deadline_ms.max(1), Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// A wait is under way.
    pub(crate) fn in_progress(&self) -> bool {
        self.deadline_ms.load(Ordering::SeqCst) != 0
    }

    /// When the wait stops waiting (Unix ms; 0 when none is under way).
    pub(crate) fn deadline_ms(&self) -> i64 {
        self.deadline_ms.load(Ordering::SeqCst)
    }

    /// INFO `shutdown_in_milliseconds`.
    pub(crate) fn remaining_ms(&self, now_ms: i64) -> i64 {
        match self.deadline_ms() {
            0 => 0,
            d => (d - now_ms).max(0),
        }
    }

    /// SHUTDOWN ABORT: cancel the wait; false when none is under way.
    pub(crate) fn abort(&self) -> bool {
        if !self.in_progress() || self.aborted.swap(true, Ordering::SeqCst) {
            return false;
        }
        self.changed.notify_waiters();
        true
    }

    /// The wait was cancelled.
    pub(crate) fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::SeqCst)
    }

    /// The failures counted so far (a blocked SHUTDOWN client notes it, then waits for it to
    /// move).
    pub(crate) fn failures(&self) -> u64 {
        self.failures.load(Ordering::SeqCst)
    }

    /// The wait ended without exiting: its clients get their error.
    pub(crate) fn failed(&self) {
        // Cleared here, not by the next start: a SHUTDOWN joining a wait just aborted must not
        // cancel the abort.
        self.aborted.store(false, Ordering::SeqCst);
        self.deadline_ms.store(0, Ordering::SeqCst);
        self.failures.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abort_cancels_only_a_scheduled_shutdown() {
        let s = SignalShutdown::default();
        assert!(!s.abort(), "nothing to abort");
        s.scheduled.store(true, Ordering::SeqCst);
        assert!(s.abort());
        assert!(!s.scheduled.load(Ordering::SeqCst));
        s.pause_cron(true);
        assert!(s.cron_paused());
        s.pause_cron(false);
        assert!(!s.cron_paused());
    }

    #[test]
    fn a_replica_wait_is_joined_aborted_once_and_answers_its_clients() {
        let w = ReplicaWait::default();
        assert!(!w.abort(), "nothing to abort");
        assert_eq!(w.remaining_ms(1_000), 0);
        assert!(w.start(5_000));
        assert!(
            !w.start(9_000),
            "a second SHUTDOWN joins the wait under way"
        );
        assert_eq!(w.remaining_ms(1_000), 4_000);
        assert_eq!(w.remaining_ms(6_000), 0);
        let seen = w.failures();
        assert!(w.abort());
        assert!(!w.abort(), "aborted once");
        assert!(!w.start(9_000), "joins the aborted wait");
        assert!(
            w.is_aborted(),
            "a SHUTDOWN joining does not cancel the abort"
        );
        w.failed();
        assert!(!w.in_progress());
        assert_ne!(w.failures(), seen, "blocked clients see the failure");
        assert!(w.start(7_000), "a new wait may start");
        assert!(!w.is_aborted());
    }
}
