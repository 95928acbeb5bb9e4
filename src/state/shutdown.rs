//! The state a signal-initiated shutdown keeps (scheduled, the cron held by DEBUG
//! PAUSE-CRON) and its data-level operations. [`crate::shutdown`], above, serves the signals
//! and carries the shutdown out.

use std::sync::atomic::{AtomicBool, Ordering};

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
}
