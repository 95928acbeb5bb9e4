//! Shutting down on SIGTERM and SIGINT, as redis-server does.
//!
//! This module owns the signal-initiated shutdown. A signal schedules the shutdown (Redis's
//! `shutdown_asap`), which the cron then carries out: the final save as `shutdown-on-sigterm`
//! / `shutdown-on-sigint` say (`default`: save when save points exist; `save`, `nosave`;
//! `force`: exit even if the save fails; `now`: do not wait for the replicas).
//! Until then SHUTDOWN ABORT cancels it ("Shutdown manually aborted"); DEBUG PAUSE-CRON holds
//! the cron, and with it a scheduled shutdown. When the save fails without `force`, the server
//! logs "Error trying to save the DB, can't exit" and keeps running. A second SIGINT while the
//! shutdown is under way exits at once, removing the temporary RDB file, as Redis's "You
//! insist" does.
//!
//! With replicas attached and `shutdown-timeout` set, a shutdown (SHUTDOWN without NOW, or a
//! signal's) first waits for them, as Redis 7.0 does: writes are held back, the replicas are
//! asked for their offsets (REPLCONF GETACK), and the save and exit follow once every replica
//! has acknowledged all the master had sent, or when the timeout passes; each replica still
//! behind is logged ("Lagging replica ..."), then "N of M replicas are in sync when shutting
//! down.". Meanwhile INFO shows `shutdown_in_milliseconds`, further SHUTDOWN calls block on the
//! same wait, and SHUTDOWN ABORT ends it; the blocked callers of a shutdown that is aborted or
//! whose save fails get "Errors trying to SHUTDOWN. Check logs.".

use crate::config::dir;
use crate::state::Server;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::signal::unix::{signal, SignalKind};

/// SIGTERM and SIGINT, caught from [`catch_signals`] on; a signal that arrives before
/// [`wait_for_exit`] reads them waits in its stream.
pub(crate) struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

/// Catch SIGTERM and SIGINT. Called before the server accepts its first client, as Redis sets
/// its handlers up before it listens: a client's SET followed at once by SIGTERM otherwise
/// met the default action (the process killed, nothing saved) while the startup was still
/// on its way to [`wait_for_exit`] (`rdb::shutdown_saves_as_redis` lost its write so, under
/// load).
pub(crate) fn catch_signals() -> Result<Signals, String> {
    Ok(Signals {
        term: signal(SignalKind::terminate()).map_err(|e| e.to_string())?,
        int: signal(SignalKind::interrupt()).map_err(|e| e.to_string())?,
    })
}

/// Serve signals until the server must exit: returns once SHUTDOWN has run, or a signal's
/// shutdown has made its final save (the caller then flushes the AOF and exits).
pub(crate) async fn wait_for_exit(srv: &Arc<Server>, signals: Signals) -> Result<(), String> {
    let Signals {
        term: mut sigterm,
        int: mut sigint,
    } = signals;
    let state = &srv.signal_shutdown;
    loop {
        let (name, directive) = tokio::select! {
            _ = srv.shutdown.notified() => return Ok(()),
            _ = sigint.recv() => ("SIGINT", dir::SHUTDOWN_ON_SIGINT),
            _ = sigterm.recv() => ("SIGTERM", dir::SHUTDOWN_ON_SIGTERM),
        };
        tracing::warn!("Received {name} scheduling shutdown...");
        state.scheduled.store(true, Ordering::SeqCst);
        // The cron carries the shutdown out: wait while DEBUG PAUSE-CRON holds it, unless
        // SHUTDOWN ABORT cancels it meanwhile.
        while state.cron_paused() && state.scheduled.load(Ordering::SeqCst) {
            tokio::select! {
                _ = state.changed.notified() => {}
                _ = srv.shutdown.notified() => return Ok(()),
                _ = sigterm.recv() => {}
                _ = sigint.recv() => insist(),
            }
        }
        if !state.scheduled.swap(false, Ordering::SeqCst) {
            continue;
        }
        let flags =
            crate::directives::shutdown_flags(&srv.config.text(directive)).unwrap_or_default();
        if must_wait_for_replicas(srv, flags.now) {
            let offset = srv.repl.offset();
            if !begin_replica_wait(srv) {
                // A SHUTDOWN command's wait is under way: it carries the shutdown out.
                continue;
            }
            let caught_up = tokio::select! {
                r = wait_for_replicas(srv, offset) => r,
                _ = sigint.recv() => insist(),
            };
            if !caught_up {
                end_replica_wait(srv);
                continue;
            }
        }
        srv.shutting_down.store(true, Ordering::SeqCst);
        let saver = srv.clone();
        let save = tokio::task::spawn_blocking(move || {
            crate::persistence::snapshot::shutdown_save(
                &saver,
                flags.save,
                flags.nosave,
                flags.force,
            )
        });
        let saved = tokio::select! {
            r = save => r.map_err(|e| e.to_string()).and_then(|r| r),
            _ = sigint.recv() => insist(),
        };
        match saved {
            Err(_) if !flags.force => {
                tracing::warn!(
                    "Errors trying to shut down the server. Check the logs for more information."
                );
                srv.shutting_down.store(false, Ordering::SeqCst);
                if srv.shutdown_wait.in_progress() {
                    end_replica_wait(srv);
                }
            }
            _ => {
                srv.aof
                    .inner
                    .snap
                    .shutdown_handled
                    .store(true, Ordering::SeqCst);
                return Ok(());
            }
        }
    }
}

/// A second SIGINT during the shutdown: exit now, without the temporary RDB file.
fn insist() -> ! {
    tracing::warn!("You insist... exiting now.");
    let _ = std::fs::remove_file(format!("temp-{}.rdb", std::process::id()));
    std::process::exit(1)
}

/// Whether a shutdown waits for replicas first: `shutdown-timeout` is set, the caller did not
/// say NOW, and some replica has not acknowledged all the master sent.
pub(crate) fn must_wait_for_replicas(srv: &Server, now: bool) -> bool {
    !now && srv.config.int(dir::SHUTDOWN_TIMEOUT) > 0 && lagging(srv, srv.repl.offset()) > 0
}

/// Replicas that have not acknowledged `offset` (every replica counts, whatever its state).
fn lagging(srv: &Server, offset: u64) -> usize {
    srv.repl
        .replicas()
        .iter()
        .filter(|r| r.ack_offset.load(Ordering::Acquire) < offset)
        .count()
}

/// Start the wait for replicas: writes are held back and the replicas asked for their
/// offsets. False if a wait is already under way (the caller joins it).
pub(crate) fn begin_replica_wait(srv: &Server) -> bool {
    let timeout_ms = srv.config.int(dir::SHUTDOWN_TIMEOUT).saturating_mul(1000);
    if !srv
        .shutdown_wait
        .start(crate::clock::unix_ms().saturating_add(timeout_ms))
    {
        return false;
    }
    srv.pause.during_shutdown(true);
    tracing::warn!("Waiting for replicas before shutting down.");
    srv.repl.feed(
        None,
        &[
            bytes::Bytes::from_static(b"REPLCONF"),
            bytes::Bytes::from_static(b"GETACK"),
            bytes::Bytes::from_static(b"*"),
        ],
        srv.replica_obuf_limit(),
    );
    true
}

/// Wait until every replica has acknowledged `offset` (what the master had sent when the
/// shutdown began) or the timeout passes, then log the replicas as Redis does. False if
/// SHUTDOWN ABORT ended the wait.
pub(crate) async fn wait_for_replicas(srv: &Server, offset: u64) -> bool {
    let wait = &srv.shutdown_wait;
    loop {
        let acked = srv.repl.acked.notified();
        let changed = wait.changed.notified();
        tokio::pin!(acked, changed);
        acked.as_mut().enable();
        changed.as_mut().enable();
        if wait.is_aborted() {
            return false;
        }
        let left = wait.deadline_ms() - crate::clock::unix_ms();
        if lagging(srv, offset) == 0 || left <= 0 {
            break;
        }
        tokio::select! {
            _ = acked => {}
            _ = changed => {}
            _ = tokio::time::sleep(std::time::Duration::from_millis(left as u64)) => {}
        }
    }
    let replicas = srv.repl.replicas();
    let now = crate::clock::unix_ms();
    let mut behind = 0;
    for r in &replicas {
        let acked = r.ack_offset.load(Ordering::Acquire);
        if acked < offset {
            behind += 1;
            let online = r.state() == crate::state::repl::ONLINE;
            let lag = if online {
                (now - r.ack_ms.load(Ordering::Relaxed)).max(0) / 1000
            } else {
                0
            };
            tracing::warn!(
                "Lagging replica {} reported offset {} behind master, lag={lag}, state={}.",
                r.describe(),
                offset - acked,
                r.state_name()
            );
        }
    }
    if !replicas.is_empty() {
        tracing::info!(
            "{} of {} replicas are in sync when shutting down.",
            replicas.len() - behind,
            replicas.len()
        );
    }
    true
}

/// A wait that ends without exiting (aborted, or the save failed): writes run again and the
/// blocked SHUTDOWN callers get their error.
pub(crate) fn end_replica_wait(srv: &Server) {
    srv.pause.during_shutdown(false);
    srv.shutdown_wait.failed();
}

/// SHUTDOWN that waits for replicas: the wait, then the save and exit (or the error for the
/// blocked callers), carried out apart from the calling connection, which blocks on it.
pub(crate) async fn finish_after_replicas(
    srv: Arc<Server>,
    offset: u64,
    save: bool,
    nosave: bool,
    force: bool,
) {
    if wait_for_replicas(&srv, offset).await {
        let saver = srv.clone();
        let saved = tokio::task::spawn_blocking(move || {
            crate::persistence::snapshot::shutdown_save(&saver, save, nosave, force)
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r);
        if saved.is_ok() || force {
            srv.aof
                .inner
                .snap
                .shutdown_handled
                .store(true, Ordering::SeqCst);
            crate::listeners::stop_all(&srv);
            srv.request_shutdown();
            return;
        }
        tracing::warn!(
            "Errors trying to shut down the server. Check the logs for more information."
        );
    }
    end_replica_wait(&srv);
}
