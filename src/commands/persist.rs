//! Persistence commands: SAVE, BGSAVE [SCHEDULE], LASTSAVE, BGREWRITEAOF, and the save that
//! SHUTDOWN does ([`shutdown_save`]) and DEBUG RELOAD ([`debug_reload`], for a DEBUG
//! dispatcher to call). The work is in [`crate::persistence::snapshot`]; this file holds the
//! replies and the checks Redis makes before starting it.

use super::args::{eq, SYNTAX};
use super::flags::*;
use super::{CmdResult, Ctx, Keys, Spec};
use crate::persistence::{child, snapshot};
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
        ADMIN | NOSCRIPT | NO_ASYNC_LOADING,
        Keys::None,
        bgrewriteaof,
        "server",
    ),
    Spec::new(
        "save",
        1,
        ADMIN | NOSCRIPT | NO_MULTI | NO_ASYNC_LOADING,
        Keys::None,
        save,
        "server",
    ),
    Spec::new(
        "bgsave",
        -1,
        ADMIN | NOSCRIPT | NO_ASYNC_LOADING,
        Keys::None,
        bgsave,
        "server",
    ),
];

fn lastsave(ctx: &mut Ctx, _: &[Bytes]) -> CmdResult {
    Ok(Reply::Int(ctx.srv.lastsave.load(Ordering::Relaxed)))
}

fn bgrewriteaof(ctx: &mut Ctx, _: &[Bytes]) -> CmdResult {
    let srv = ctx.srv;
    if srv.aof.inner.rewriting.load(Ordering::SeqCst) {
        return Err(Reply::error(
            "ERR Background append only file rewriting already in progress",
        ));
    }
    if child::bgsave_running(srv) || ctx.in_exec {
        // As Redis with another child active (or inside EXEC, which holds every shard): the
        // rewrite starts from the cron once the BGSAVE is over. Asked for by hand, it is not
        // held back by earlier failures.
        srv.aof
            .inner
            .snap
            .rewrite_scheduled
            .store(true, Ordering::SeqCst);
        srv.aof.inner.state.lock().consecutive_failures = 0;
        return Ok(Reply::Status(
            "Background append only file rewriting scheduled",
        ));
    }
    Ok(crate::persistence::bgrewriteaof(srv))
}

fn save(ctx: &mut Ctx, _: &[Bytes]) -> CmdResult {
    let srv = ctx.srv;
    if child::bgsave_running(srv) {
        return Err(Reply::error("ERR Background save already in progress"));
    }
    srv.aof.inner.snap.saves.fetch_add(1, Ordering::Relaxed);
    match snapshot::save(srv) {
        Ok(()) => Ok(Reply::Ok),
        Err(_) => Err(Reply::error("ERR")),
    }
}

fn bgsave(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let srv = ctx.srv;
    let schedule = match a.len() {
        1 => false,
        2 if eq(&a[1], "schedule") => true,
        _ => return Err(Reply::error(SYNTAX)),
    };
    if child::bgsave_running(srv) {
        return Err(Reply::error("ERR Background save already in progress"));
    }
    // An AOF rewrite counts as Redis's other active child; inside EXEC every shard is held by
    // this very command, so the fork's all-shard lock must wait for the cron.
    if srv.aof.inner.rewriting.load(Ordering::SeqCst) || ctx.in_exec {
        if schedule || ctx.in_exec {
            srv.aof.inner.snap.scheduled.store(true, Ordering::SeqCst);
            return Ok(Reply::Status("Background saving scheduled"));
        }
        return Err(Reply::error(
            "ERR Another child process is active (AOF?): can't BGSAVE right now. Use BGSAVE SCHEDULE in \
             order to schedule a BGSAVE whenever possible.",
        ));
    }
    match snapshot::bgsave_start(srv) {
        Ok(()) => Ok(Reply::Status("Background saving started")),
        Err(_) => Err(Reply::error("ERR")),
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
    let r = snapshot::shutdown_save(srv, save, nosave, force);
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
/// A DEBUG dispatcher calls it as `persist::debug_reload(ctx.srv, &args[2..])`; it must hold
/// no shard lock (DEBUG is `Keys::None`): the save and the load take every shard themselves.
pub fn debug_reload(srv: &crate::state::Server, options: &[Bytes]) -> Reply {
    let (mut do_save, mut flush, mut merge) = (true, true, false);
    for o in options {
        if eq(o, "merge") {
            merge = true;
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
        child::kill_bgsave(srv);
        if snapshot::save(srv).is_err() {
            return Reply::error("ERR Error trying to save the DB");
        }
    }
    match snapshot::reload(srv, flush, merge) {
        Ok(()) => {
            tracing::info!("DB reloaded by DEBUG RELOAD");
            Reply::Ok
        }
        Err(e) => Reply::Error(format!("ERR Error trying to load the RDB dump: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::compact::CompactBytes;
    use crate::types::Value;

    fn server(dir: &std::path::Path) -> std::sync::Arc<crate::state::Server> {
        let config = crate::config::Config::new();
        config
            .set_startup("dir", &[dir.to_string_lossy().into_owned()])
            .expect("dir");
        crate::commands::install_hooks();
        crate::state::Server::new(config).into_arc()
    }

    fn set(srv: &crate::state::Server, db: usize, key: &str, value: &str) {
        let ks = &srv.keyspace;
        ks.dbs[db].shards[ks.shard_of(key.as_bytes())]
            .lock()
            .insert(
                key.as_bytes(),
                Value::Str(CompactBytes::new(value.as_bytes())),
                false,
            );
    }

    fn get(srv: &crate::state::Server, db: usize, key: &str) -> Option<Vec<u8>> {
        let ks = &srv.keyspace;
        let shard = ks.dbs[db].shards[ks.shard_of(key.as_bytes())].lock();
        match shard.raw_get(key.as_bytes()).as_deref().map(|e| &e.value) {
            Some(Value::Str(s)) => Some(s.to_vec()),
            _ => None,
        }
    }

    #[test]
    fn debug_reload_saves_empties_and_loads_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let srv = server(dir.path());
        set(&srv, 0, "a", "1");
        set(&srv, 5, "b", "2");
        assert!(matches!(debug_reload(&srv, &[]), Reply::Ok));
        assert!(dir.path().join("dump.rdb").exists());
        assert_eq!(get(&srv, 0, "a").as_deref(), Some(&b"1"[..]));
        assert_eq!(get(&srv, 5, "b").as_deref(), Some(&b"2"[..]));
        // NOSAVE: what is loaded is the file, not the memory; a key added since is gone.
        set(&srv, 0, "c", "3");
        assert!(matches!(
            debug_reload(&srv, &[Bytes::from("nosave")]),
            Reply::Ok
        ));
        assert_eq!(get(&srv, 0, "c"), None);
        assert_eq!(get(&srv, 0, "a").as_deref(), Some(&b"1"[..]));
        // NOFLUSH over the same keys: a duplicate, refused, and nothing stays half-loaded.
        let r = debug_reload(&srv, &[Bytes::from("nosave"), Bytes::from("noflush")]);
        assert!(
            matches!(r, Reply::Error(ref e) if e.contains("duplicated key")),
            "{r:?}"
        );
        assert_eq!(get(&srv, 0, "a"), None);
        // NOFLUSH MERGE: the file's values replace the keys already there.
        assert!(matches!(
            debug_reload(&srv, &[Bytes::from("nosave")]),
            Reply::Ok
        ));
        set(&srv, 0, "a", "changed");
        set(&srv, 0, "c", "3");
        let r = debug_reload(
            &srv,
            &[
                Bytes::from("nosave"),
                Bytes::from("noflush"),
                Bytes::from("merge"),
            ],
        );
        assert!(matches!(r, Reply::Ok), "{r:?}");
        assert_eq!(get(&srv, 0, "a").as_deref(), Some(&b"1"[..]));
        assert_eq!(get(&srv, 0, "c").as_deref(), Some(&b"3"[..]));
    }
}
