//! CLIENT PAUSE / CLIENT UNPAUSE: holding clients' commands back for a while.
//!
//! This module owns the server's pause state (none, WRITE or ALL, and when it ends) and the
//! rules Redis 7.0 applies to it. While a pause is in force, a client whose next command is
//! held back (every command under ALL; under WRITE, commands that write or may replicate:
//! PUBLISH, EVAL/FCALL of scripts that may write, EXEC of a transaction holding one) does not
//! run it: the dispatcher hands the request back (`Outcome::postponed`) and the connection
//! waits, counted in INFO `blocked_clients`, until the pause ends (CLIENT UNPAUSE, or its
//! timeout passes), then runs the request from the start, as Redis re-processes a postponed
//! client. Commands are checked where Redis checks them: after the command lookup, arity,
//! authentication and ACL checks (so a wrong-arity command is answered at once), before MULTI
//! queueing; commands run by scripts or inside EXEC are never held back, so a pause given
//! inside a transaction starts when the transaction ends. While a pause is in force the
//! dataset is static: lazy expiry treats expired keys as absent without deleting them, and
//! the active expiry cycle and eviction do not run.

use crate::client::Client;
use crate::clock::unix_ms;
use crate::commands::{flags, Ctx};
use crate::protocol::Reply;
use crate::state::Server;
use bytes::Bytes;
use std::sync::atomic::{AtomicU8, Ordering};

/// No pause.
const OFF: u8 = 0;
/// Commands that write or may replicate are held back.
const WRITE: u8 = 1;
/// Every command is held back.
const ALL: u8 = 2;

/// The pause in force: its kind and its end (Unix ms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct State {
    kind: u8,
    end_ms: i64,
}

/// The server's pause state.
pub(crate) struct Pause {
    /// The kind in force, read by every command (a relaxed load while no pause exists).
    kind: AtomicU8,
    /// The kind and end, published to waiting clients: any change wakes them to re-check.
    state: tokio::sync::watch::Sender<State>,
}

impl Default for Pause {
    fn default() -> Pause {
        Pause {
            kind: AtomicU8::new(OFF),
            state: tokio::sync::watch::Sender::new(State {
                kind: OFF,
                end_ms: 0,
            }),
        }
    }
}

impl Pause {
    /// Pause until `end_ms` (Unix ms) with `kind`; an existing pause is extended to the later
    /// end and the more restrictive kind, as Redis merges pauses.
    fn pause(&self, end_ms: i64, kind: u8) {
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
    fn unpause(&self) {
        self.state.send_modify(|s| {
            *s = State {
                kind: OFF,
                end_ms: 0,
            };
            self.kind.store(OFF, Ordering::SeqCst);
        });
    }

    /// The kind in force now; a pause whose end has passed is cleared (and its waiters woken).
    fn current(&self) -> u8 {
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
        let left = (end_ms - unix_ms()).max(0) as u64;
        // One more millisecond: the pause ends once its end is in the past.
        let until_end = tokio::time::sleep(std::time::Duration::from_millis(left + 1));
        tokio::select! {
            _ = rx.changed() => true,
            _ = until_end => true,
            _ = killed.notified() => false,
        }
    }
}

/// True when `client`'s request `args` (command `spec`) must wait for the pause to end.
pub(crate) fn holds_back(
    srv: &Server,
    client: &Client,
    spec: &crate::commands::Spec,
    args: &[Bytes],
) -> bool {
    // Internal clients (AOF loading) and commands run by scripts are never paused.
    if client.user.is_none() || client.in_script {
        return false;
    }
    match srv.pause.current() {
        OFF => false,
        ALL => true,
        _ => may_replicate(srv, client, spec, args),
    }
}

/// Redis's "may replicate" test for a WRITE pause: the command writes or may propagate
/// something (PUBLISH, scripts that may write); EXEC asks it of its queued commands.
fn may_replicate(
    srv: &Server,
    client: &Client,
    spec: &crate::commands::Spec,
    args: &[Bytes],
) -> bool {
    match spec.name {
        "exec" => client.multi.as_ref().is_some_and(|queued| {
            queued.iter().any(|q| {
                crate::commands::lookup(&q[0])
                    .is_some_and(|s| s.name != "exec" && may_replicate(srv, client, s, q))
            })
        }),
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro" => {
            match crate::scripting::declared_writes(srv, spec.name, args) {
                Some(writes) => writes,
                None => spec.flags & (flags::WRITE | flags::MAY_REPLICATE) != 0,
            }
        }
        // FUNCTION's subcommands that change the libraries are write commands in Redis.
        "function" => args.get(1).is_some_and(|sub| {
            ["load", "delete", "flush", "restore"]
                .iter()
                .any(|w| sub.eq_ignore_ascii_case(w.as_bytes()))
        }),
        _ => spec.flags & (flags::WRITE | flags::MAY_REPLICATE) != 0,
    }
}

/// CLIENT PAUSE timeout [WRITE|ALL].
pub(crate) fn client_pause(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    if a.len() != 3 && a.len() != 4 {
        return crate::commands::wrong_arity("client|pause");
    }
    let kind = match a.get(3) {
        None => ALL,
        Some(m) if m.eq_ignore_ascii_case(b"write") => WRITE,
        Some(m) if m.eq_ignore_ascii_case(b"all") => ALL,
        Some(_) => return Reply::error("ERR CLIENT PAUSE mode must be WRITE or ALL"),
    };
    let Some(timeout) = crate::util::numtext::parse_i64(&a[2]) else {
        return Reply::error("ERR timeout is not an integer or out of range");
    };
    if timeout < 0 {
        return Reply::error("ERR timeout is negative");
    }
    // A zero timeout is a pause that has already ended, as in Redis.
    let end_ms = if timeout > 0 {
        timeout.saturating_add(unix_ms())
    } else {
        0
    };
    ctx.srv.pause.pause(end_ms, kind);
    Reply::Ok
}

/// CLIENT UNPAUSE.
pub(crate) fn client_unpause(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    if a.len() != 2 {
        return crate::commands::wrong_arity("client|unpause");
    }
    ctx.srv.pause.unpause();
    Reply::Ok
}

#[cfg(test)]
mod tests {
    use super::*;

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
