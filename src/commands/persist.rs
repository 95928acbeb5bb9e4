//! Persistence commands: SAVE, BGSAVE [SCHEDULE], LASTSAVE, BGREWRITEAOF, and the save that
//! SHUTDOWN does ([`shutdown_save`]) and DEBUG RELOAD ([`debug_reload`], for a DEBUG
//! dispatcher to call). The work is in [`crate::persistence::snapshot`]; this file holds the
//! replies and the checks Redis makes before starting it.

use super::args::{eq, SYNTAX};
use super::flags::*;
use super::{Ctx, Keys, Spec};
use crate::persistence::snapshot;
use crate::protocol::Reply;
use bytes::Bytes;
use std::sync::atomic::Ordering;

pub static COMMANDS: &[Spec] = &[
    Spec::new(
        "lastsave",
        1,
        FAST | LOADING | STALE,
        Keys::None,
        lastsave,
        "server",
    ),
    Spec::new(
        "bgrewriteaof",
        1,
        ADMIN | NOSCRIPT,
        Keys::None,
        bgrewriteaof,
        "server",
    ),
    Spec::new(
        "save",
        1,
        ADMIN | NOSCRIPT | NO_MULTI,
        Keys::None,
        save,
        "server",
    ),
    Spec::new("bgsave", -1, ADMIN | NOSCRIPT, Keys::None, bgsave, "server"),
];

fn lastsave(ctx: &mut Ctx, _: &[Bytes]) -> Reply {
    Reply::Int(ctx.srv.lastsave.load(Ordering::Relaxed))
}

fn bgrewriteaof(ctx: &mut Ctx, _: &[Bytes]) -> Reply {
    let srv = ctx.srv;
    if srv.aof.inner.rewriting.load(Ordering::SeqCst) {
        return Reply::error("ERR Background append only file rewriting already in progress");
    }
    if snapshot::bgsave_running(srv) || ctx.in_exec {
        // As Redis with another child active (or inside EXEC, which holds every shard): the
        // rewrite starts from the cron once the BGSAVE is over.
        srv.aof
            .inner
            .snap
            .rewrite_scheduled
            .store(true, Ordering::SeqCst);
        srv.aof.inner.state.lock().consecutive_failures = 0;
        return Reply::Status("Background append only file rewriting scheduled");
    }
    crate::persistence::bgrewriteaof(srv)
}

fn save(ctx: &mut Ctx, _: &[Bytes]) -> Reply {
    let srv = ctx.srv;
    if snapshot::bgsave_running(srv) {
        return Reply::error("ERR Background save already in progress");
    }
    srv.aof.inner.snap.saves.fetch_add(1, Ordering::Relaxed);
    match snapshot::save(srv) {
        Ok(()) => Reply::Ok,
        Err(_) => Reply::error("ERR"),
    }
}

fn bgsave(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    let srv = ctx.srv;
    let schedule = match a.len() {
        1 => false,
        2 if eq(&a[1], "schedule") => true,
        _ => return Reply::error(SYNTAX),
    };
    if snapshot::bgsave_running(srv) {
        return Reply::error("ERR Background save already in progress");
    }
    // An AOF rewrite counts as Redis's other active child; inside EXEC every shard is held by
    // this very command, so the fork's all-shard lock must wait for the cron.
    if srv.aof.inner.rewriting.load(Ordering::SeqCst) || ctx.in_exec {
        if schedule || ctx.in_exec {
            srv.aof.inner.snap.scheduled.store(true, Ordering::SeqCst);
            return Reply::Status("Background saving scheduled");
        }
        return Reply::error(
            "ERR Another child process is active (AOF?): can't BGSAVE right now. Use BGSAVE SCHEDULE in \
             order to schedule a BGSAVE whenever possible.",
        );
    }
    match snapshot::bgsave_start(srv) {
        Ok(()) => Reply::Status("Background saving started"),
        Err(_) => Reply::error("ERR"),
    }
}

/// SHUTDOWN's save step, before the server stops: with SAVE, or when save points exist and
/// NOSAVE was not given, save in the foreground. Err is the reply refusing the shutdown
/// (the save failed and FORCE was not given).
pub(crate) fn shutdown_save(
    ctx: &mut Ctx,
    save: bool,
    nosave: bool,
    force: bool,
) -> Result<(), Reply> {
    let srv = ctx.srv;
    let r = snapshot::shutdown_save(srv, save, nosave);
    if r.is_err() && !force {
        return Err(Reply::error("ERR Errors trying to SHUTDOWN. Check logs."));
    }
    srv.aof
        .inner
        .snap
        .shutdown_handled
        .store(true, Ordering::SeqCst);
    Ok(())
}

/// DEBUG RELOAD: save the dataset to the RDB file, empty every database and load the file
/// back (as Redis's `DEBUG RELOAD`; `NOSAVE` skips the save, `NOFLUSH` the emptying).
/// Runs with every shard of the server idle from the caller's point of view: the caller must
/// not hold shard locks (a DEBUG command is `Keys::None`).
pub fn debug_reload(ctx: &mut Ctx, options: &[Bytes]) -> Reply {
    let srv = ctx.srv;
    let (mut do_save, mut flush) = (true, true);
    for o in options {
        if eq(o, "merge") {
            return Reply::error("ERR DEBUG RELOAD MERGE is not supported: Podium has no function libraries to merge");
        } else if eq(o, "nosave") {
            do_save = false;
        } else if eq(o, "noflush") {
            flush = false;
        } else {
            return Reply::error(
                "ERR DEBUG RELOAD only supports the MERGE, NOFLUSH and NOSAVE options.",
            );
        }
    }
    if do_save {
        snapshot::kill_child(srv);
        if snapshot::save(srv).is_err() {
            return Reply::error("ERR Error trying to save the DB");
        }
    }
    match snapshot::reload(srv, flush) {
        Ok(()) => {
            tracing::info!("DB reloaded by DEBUG RELOAD");
            Reply::Ok
        }
        Err(e) => Reply::Error(format!("ERR Error trying to load the RDB dump: {e}")),
    }
}
