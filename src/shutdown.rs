//! Shutting down on SIGTERM and SIGINT, as redis-server does.
//!
//! This module owns the signal-initiated shutdown. A signal schedules the shutdown (Redis's
//! `shutdown_asap`), which the cron then carries out: the final save as `shutdown-on-sigterm`
//! / `shutdown-on-sigint` say (`default`: save when save points exist; `save`, `nosave`;
//! `force`: exit even if the save fails; `now` has nothing to skip, as SHUTDOWN does not wait for replicas).
//! Until then SHUTDOWN ABORT cancels it ("Shutdown manually aborted"); DEBUG PAUSE-CRON holds
//! the cron, and with it a scheduled shutdown. When the save fails without `force`, the server
//! logs "Error trying to save the DB, can't exit" and keeps running. A second SIGINT while the
//! shutdown is under way exits at once, removing the temporary RDB file, as Redis's "You
//! insist" does.

use crate::config::dir;
use crate::state::Server;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::signal::unix::{signal, SignalKind};

/// Serve signals until the server must exit: returns once SHUTDOWN has run, or a signal's
/// shutdown has made its final save (the caller then flushes the AOF and exits).
pub(crate) async fn wait_for_exit(srv: &Arc<Server>) -> Result<(), String> {
    let mut sigterm = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
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
