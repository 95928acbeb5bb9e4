//! A coordinated failover (Redis 6.2+'s FAILOVER command): this master hands its role to one of
//! its replicas without losing a write. It owns the failover's state as INFO replication shows
//! it (`master_failover_state`), the plan (target, deadline, FORCE), and the steps that change
//! the server's role:
//!
//! 1. FAILOVER holds writes back (a pause apart from CLIENT PAUSE's, which CLIENT UNPAUSE does
//!    not lift) and enters `waiting-for-sync`.
//! 2. [`update`], run ten times a second while waiting, looks for the target (or, without
//!    `TO`, any replica) whose acknowledged offset equals ours. Found: `failover-in-progress`,
//!    and this server becomes a replica of the target. Past `TIMEOUT`: with FORCE it fails over
//!    anyway, without it the failover is aborted.
//! 3. The replica link (`crate::replication::replica`) then sends `PSYNC <replid> <offset>
//!    FAILOVER`, which makes the target a master ([`accept_psync_failover`] on its side). A
//!    `+CONTINUE` or `+FULLRESYNC` ends the failover ([`clear`]); any other answer aborts it,
//!    and this server becomes a master again with a new replication ID ([`abort`]).
//!
//! The waiting is a timer task, not a blocked client: FAILOVER itself answers `+OK` at once,
//! as Redis's does.

use crate::state::Server;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// No failover (Redis's NO_FAILOVER).
pub(crate) const NONE: u8 = 0;
/// Writes are held back until a replica has acknowledged everything (FAILOVER_WAIT_FOR_SYNC).
pub(crate) const WAITING: u8 = 1;
/// This server follows the target and asks it to take over (FAILOVER_IN_PROGRESS).
pub(crate) const IN_PROGRESS: u8 = 2;

/// Where the failover goes and until when it may wait.
#[derive(Default)]
struct Plan {
    /// The target as the replica announced itself (None: the first replica to catch up).
    host: Option<String>,
    port: u16,
    /// Unix ms after which waiting stops (0: wait until aborted).
    end_ms: i64,
    force: bool,
}

/// The server's failover state.
#[derive(Default)]
pub(crate) struct Failover {
    /// Read without the plan's lock by INFO, SYNC and REPLICAOF.
    state: AtomicU8,
    plan: Mutex<Plan>,
}

impl Failover {
    pub(crate) fn state(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    /// A failover is waiting or in progress (REPLICAOF and SYNC are refused meanwhile).
    pub(crate) fn active(&self) -> bool {
        self.state() != NONE
    }

    /// INFO replication's `master_failover_state`.
    pub(crate) fn state_name(&self) -> &'static str {
        match self.state() {
            NONE => "no-failover",
            WAITING => "waiting-for-sync",
            _ => "failover-in-progress",
        }
    }

    /// The target's address for the log, `host:port` (Redis prints `(null):0` when none was
    /// chosen yet, which cannot happen once a failover is in progress).
    fn target(&self) -> Option<(String, u16)> {
        let p = self.plan.lock();
        p.host.clone().map(|h| (h, p.port))
    }
}

/// A validated FAILOVER request (see `commands::repl`).
pub(crate) struct Request {
    pub(crate) target: Option<(String, u16)>,
    pub(crate) timeout_ms: i64,
    pub(crate) force: bool,
}

/// Start a failover (every check done by the caller): hold writes back, enter
/// `waiting-for-sync`, and start the task that watches the replicas' offsets.
pub(crate) fn start(srv: &Server, req: Request) {
    match &req.target {
        Some((h, p)) => tracing::info!("FAILOVER requested to {h}:{p}."),
        None => tracing::info!("FAILOVER requested to any replica."),
    }
    {
        let mut plan = srv.failover.plan.lock();
        *plan = Plan {
            port: req.target.as_ref().map_or(0, |t| t.1),
            host: req.target.map(|t| t.0),
            end_ms: if req.timeout_ms > 0 {
                crate::clock::unix_ms().saturating_add(req.timeout_ms)
            } else {
                0
            },
            force: req.force,
        };
    }
    srv.failover.state.store(WAITING, Ordering::Release);
    srv.pause.during_failover(true);
    if let Some(arc) = srv.arc() {
        tokio::spawn(watch(arc));
    }
}

/// Check the failover ten times a second while it waits for a replica. Redis checks once a
/// second in its replication cron; checking more often only ends the wait sooner.
async fn watch(srv: Arc<Server>) {
    let mut every = tokio::time::interval(Duration::from_millis(100));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        if srv.failover.state() != WAITING || srv.shutting_down.load(Ordering::Relaxed) {
            return;
        }
        update(&srv);
    }
}

/// One check of a waiting failover (Redis's updateFailoverStatus): time out, or fail over to a
/// replica that has acknowledged our whole stream.
pub(crate) fn update(srv: &Server) {
    if srv.failover.state() != WAITING {
        return;
    }
    let now = crate::clock::unix_ms();
    let (end_ms, force, wanted) = {
        let p = srv.failover.plan.lock();
        (p.end_ms, p.force, p.host.clone().map(|h| (h, p.port)))
    };
    if end_ms > 0 && end_ms <= now {
        if force {
            let (h, p) = wanted.unwrap_or_default();
            tracing::info!("FAILOVER to {h}:{p} time out exceeded, failing over.");
            srv.failover.state.store(IN_PROGRESS, Ordering::Release);
            crate::state::replica_link::set_master(srv, h, p);
        } else {
            abort(srv, "Replica never caught up before timeout");
        }
        return;
    }
    let offset = srv.repl.offset();
    let replicas = srv.repl.replicas();
    let synced = match &wanted {
        Some((h, p)) => replicas
            .iter()
            .find(|r| r.ip.eq_ignore_ascii_case(h) && r.listening_port == *p)
            .filter(|r| r.ack_offset.load(Ordering::Acquire) == offset)
            .map(|_| (h.clone(), *p)),
        None => replicas
            .iter()
            .find(|r| r.ack_offset.load(Ordering::Acquire) == offset)
            .map(|r| (r.ip.clone(), r.listening_port)),
    };
    if let Some((h, p)) = synced {
        {
            let mut plan = srv.failover.plan.lock();
            plan.host = Some(h.clone());
            plan.port = p;
        }
        srv.failover.state.store(IN_PROGRESS, Ordering::Release);
        tracing::info!("Failover target {h}:{p} is synced, failing over.");
        crate::state::replica_link::set_master(srv, h, p);
    }
}

/// The failover is over (the target took the master's role, or it was aborted): forget the
/// plan and let the held-back writes run (on a replica they now get -READONLY).
pub(crate) fn clear(srv: &Server) {
    *srv.failover.plan.lock() = Plan::default();
    srv.failover.state.store(NONE, Ordering::Release);
    srv.pause.during_failover(false);
}

/// Abort a failover if one is going on (FAILOVER ABORT, a timeout, a refusal by the target).
/// Once in progress this server already follows the target: it becomes a master again.
pub(crate) fn abort(srv: &Server, why: &str) {
    let state = srv.failover.state();
    if state == NONE {
        return;
    }
    match srv.failover.target() {
        Some((h, p)) => tracing::info!("FAILOVER to {h}:{p} aborted: {why}"),
        None => tracing::info!("FAILOVER to any replica aborted: {why}"),
    }
    if state == IN_PROGRESS {
        crate::state::replica_link::unset_master(srv);
    }
    clear(srv);
}

/// The replica link's PSYNC was answered: `accepted` (+CONTINUE or +FULLRESYNC) ends a
/// failover in progress, anything else aborts it. False when the link must stop (aborted:
/// this server is a master again).
pub(crate) fn psync_answered(srv: &Server, accepted: bool) -> bool {
    if srv.failover.state() != IN_PROGRESS {
        return true;
    }
    if accepted {
        clear(srv);
        true
    } else {
        abort(srv, "Failover target rejected psync request");
        false
    }
}

/// `PSYNC <replid> <offset> FAILOVER` reached this replica from its master: with our
/// replication ID, become a master (the PSYNC then continues as any other). Err is the reply.
pub(crate) fn accept_psync_failover(
    srv: &Server,
    replid: &[u8],
    client: &str,
) -> Result<(), &'static str> {
    tracing::warn!(
        "Failover request received for replid {}.",
        String::from_utf8_lossy(replid)
    );
    if !crate::state::replica_link::is_replica(srv) {
        return Err("ERR PSYNC FAILOVER can't be sent to a master.");
    }
    if !replid.eq_ignore_ascii_case(srv.repl.replid().as_bytes()) {
        return Err("ERR PSYNC FAILOVER replid must match my replid.");
    }
    crate::state::replica_link::unset_master(srv);
    tracing::info!("MASTER MODE enabled (failover request from '{client}')");
    Ok(())
}
