//! The CLIENT PAUSE state: the kind in force (none, WRITE or ALL) and when it ends, with the
//! rules for merging pauses and for waiting on a change. The commands and the dispatcher's
//! check that act on it are [`crate::commands::pause`], above.

use crate::clock::unix_ms;
use std::sync::atomic::{AtomicU8, Ordering};

/// No pause.
pub(crate) const OFF: u8 = 0;
/// Commands that write or may replicate are held back.
pub(crate) const WRITE: u8 = 1;
/// Every command is held back.
pub(crate) const ALL: u8 = 2;

/// The pause in force: its kind and its end (Unix ms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct State {
    kind: u8,
    end_ms: i64,
}

/// The server's pause state.
pub(crate) struct Pause {
    /// The kind in force, read by every command (a relaxed load while no pause exists).
    kind: AtomicU8,
    /// The kind and end, published to waiting clients: any change wakes them to re-check.
    state: tokio::sync::watch::Sender<State>,
    /// A shutdown waiting for its replicas holds writes back (Redis's PAUSE_DURING_SHUTDOWN),
    /// apart from CLIENT PAUSE: CLIENT UNPAUSE does not end it, and it has no end time.
    during_shutdown: std::sync::atomic::AtomicBool,
    /// FAILOVER holds writes back while a replica catches up (Redis's PAUSE_DURING_FAILOVER):
    /// like the shutdown's, CLIENT UNPAUSE does not end it, and it has no end time.
    during_failover: std::sync::atomic::AtomicBool,
}

impl Default for Pause {
    fn default() -> Pause {
        Pause {
            kind: AtomicU8::new(OFF),
            state: tokio::sync::watch::Sender::new(State {
                kind: OFF,
                end_ms: 0,
            }),
            during_shutdown: std::sync::atomic::AtomicBool::new(false),
            during_failover: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl Pause {
    /// Pause until `end_ms` (Unix ms) with `kind`; an existing pause is extended to the later
    /// end and the more restrictive kind, as Redis merges pauses.
    pub(crate) fn pause(&self, end_ms: i64, kind: u8) {
        let now = unix_ms();
        self.state.send_modify(|s| {
            if s.kind == OFF || s.end_ms < now {
                *s = State { kind, end_ms };
            } else {
                s.kind = s.kind.max(kind);
                s.end_ms = s.end_ms.max(end_ms);
            }
            if s.end_ms < now {
                s.kind = OFF;
            }
            self.kind.store(s.kind, Ordering::SeqCst);
        });
    }

    /// End the pause (CLIENT UNPAUSE); held-back clients run their commands.
    pub(crate) fn unpause(&self) {
        self.state.send_modify(|s| {
            *s = State {
                kind: OFF,
                end_ms: 0,
            };
            self.kind.store(OFF, Ordering::SeqCst);
        });
    }

    /// Hold writes back while a shutdown waits for its replicas (`on`), or stop (the held
    /// clients run their commands).
    pub(crate) fn during_shutdown(&self, on: bool) {
        self.during_shutdown.store(on, Ordering::SeqCst);
        // Wake the waiting clients to look again.
        self.state.send_modify(|_| {});
    }

    /// Hold writes back while a failover waits for its target (`on`), or stop.
    pub(crate) fn during_failover(&self, on: bool) {
        self.during_failover.store(on, Ordering::SeqCst);
        self.state.send_modify(|_| {});
    }

    /// The kind in force now (CLIENT PAUSE's, or WRITE during a shutdown's or a failover's
    /// wait).
    pub(crate) fn current(&self) -> u8 {
        let kind = self.client_pause();
        if kind == OFF
            && (self.during_shutdown.load(Ordering::Relaxed)
                || self.during_failover.load(Ordering::Relaxed))
        {
            return WRITE;
        }
        kind
    }

    /// CLIENT PAUSE's kind in force now; a pause whose end has passed is cleared (and its
    /// waiters woken).
    fn client_pause(&self) -> u8 {
        let kind = self.kind.load(Ordering::Relaxed);
        if kind == OFF {
            return OFF;
        }
        let now = unix_ms();
        if self.state.borrow().end_ms >= now {
            return kind;
        }
        self.state.send_if_modified(|s| {
            if s.kind != OFF && s.end_ms < now {
                s.kind = OFF;
                self.kind.store(OFF, Ordering::SeqCst);
                true
            } else {
                false
            }
        });
        self.kind.load(Ordering::SeqCst)
    }

    /// A pause is in force: the dataset must not change by expiry or eviction.
    pub(crate) fn is_active(&self) -> bool {
        self.current() != OFF
    }

    /// Wait until the pause state changes or the pause's end passes (the caller then tries
    /// its command again); false if `killed` fired first.
    pub(crate) async fn wait_change(&self, killed: &tokio::sync::Notify) -> bool {
        let mut rx = self.state.subscribe();
        let end_ms = rx.borrow_and_update().end_ms;
        if self.current() == OFF {
            return true;
        }
        let until_end = async {
            if self.client_pause() == OFF {
                // Only the shutdown's or the failover's pause: it ends by a change.
                return std::future::pending::<()>().await;
            }
            let left = (end_ms - unix_ms()).max(0) as u64;
            // One more millisecond: the pause ends once its end is in the past.
            tokio::time::sleep(std::time::Duration::from_millis(left + 1)).await
        };
        tokio::select! {
            _ = rx.changed() => true,
            _ = until_end => true,
            _ = killed.notified() => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shutdown_holds_writes_back_until_it_ends_whatever_client_unpause_does() {
        let p = Pause::default();
        p.during_shutdown(true);
        assert_eq!(p.current(), WRITE);
        p.pause(unix_ms() + 60_000, ALL);
        assert_eq!(p.current(), ALL);
        p.unpause();
        assert_eq!(
            p.current(),
            WRITE,
            "CLIENT UNPAUSE leaves the shutdown's pause"
        );
        p.during_shutdown(false);
        assert_eq!(p.current(), OFF);
    }

    #[test]
    fn pauses_merge_to_the_later_end_and_the_stricter_kind() {
        let p = Pause::default();
        assert_eq!(p.current(), OFF);
        let now = unix_ms();
        p.pause(now + 60_000, WRITE);
        assert_eq!(p.current(), WRITE);
        p.pause(now + 1_000, ALL);
        assert_eq!(p.current(), ALL);
        assert_eq!(p.state.borrow().end_ms, now + 60_000);
        p.pause(now + 120_000, WRITE);
        assert_eq!(
            p.current(),
            ALL,
            "a WRITE pause does not relax an ALL pause"
        );
        assert_eq!(p.state.borrow().end_ms, now + 120_000);
        p.unpause();
        assert_eq!(p.current(), OFF);
    }

    #[test]
    fn a_pause_ends_when_its_time_has_passed() {
        let p = Pause::default();
        p.pause(unix_ms() + 30, ALL);
        assert!(p.is_active());
        std::thread::sleep(std::time::Duration::from_millis(60));
        assert!(!p.is_active());
        assert_eq!(p.kind.load(Ordering::SeqCst), OFF);
        p.pause(0, WRITE);
        assert!(!p.is_active(), "a zero timeout has already ended");
    }

    #[tokio::test]
    async fn waiters_wake_on_unpause() {
        let p = std::sync::Arc::new(Pause::default());
        p.pause(unix_ms() + 60_000, ALL);
        let killed = std::sync::Arc::new(tokio::sync::Notify::new());
        let (p2, k2) = (p.clone(), killed.clone());
        let waiter = tokio::spawn(async move { p2.wait_change(&k2).await });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        p.unpause();
        let woke = tokio::time::timeout(std::time::Duration::from_secs(5), waiter).await;
        assert!(matches!(woke, Ok(Ok(true))));
    }
}
