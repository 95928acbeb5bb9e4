//! Server commands: DBSIZE FLUSHDB FLUSHALL SWAPDB TIME SHUTDOWN MEMORY READONLY READWRITE.
//! The connection commands are in `client.rs`, COMMAND in `command.rs`, INFO in `info.rs`,
//! CONFIG in `config_cmd.rs`, the persistence commands in `persist.rs`, FUNCTION in scripting.

use super::args::{eq, int, SYNTAX};
use super::flags::*;
use super::{CmdResult, Ctx, Keys, Spec};
use crate::protocol::Reply;
use bytes::Bytes;
use std::sync::atomic::Ordering;

#[rustfmt::skip]
pub static COMMANDS: &[Spec] = &[
    Spec::new("dbsize", 1, READONLY | FAST, Keys::Db, dbsize, "server"),
    Spec::new("flushdb", -1, WRITE, Keys::Db, flushdb, "server"),
    Spec::new("flushall", -1, WRITE, Keys::All, flushall, "server"),
    Spec::new("swapdb", 3, WRITE | FAST, Keys::All, swapdb, "server"),
    Spec::new("time", 1, FAST | LOADING | STALE, Keys::None, time, "server"),
    Spec::new("shutdown", -1, ADMIN | NOSCRIPT | LOADING | STALE | NO_MULTI | ALLOW_BUSY, Keys::None, shutdown, "server"),
    Spec::new("memory", -2, READONLY, super::memory::MEMORY_KEYS, super::memory::memory, "server"),
];

fn dbsize(ctx: &mut Ctx, _: &[Bytes]) -> CmdResult {
    Ok(Reply::Int(ctx.db().len() as i64))
}

/// Whether a FLUSHDB / FLUSHALL frees in the background: ASYNC, or no mode with
/// `lazyfree-lazy-user-flush` on.
fn flush_mode(a: &[Bytes]) -> Result<bool, Reply> {
    match a.len() {
        1 => Ok(crate::keyspace::lazyfree::USER_FLUSH.load(std::sync::atomic::Ordering::Relaxed)),
        2 if eq(&a[1], "async") => Ok(true),
        2 if eq(&a[1], "sync") => Ok(false),
        _ => Err(Reply::error(SYNTAX)),
    }
}

/// Empty database `db` (all its shards must be locked), freeing its keys on the lazyfree
/// thread when `lazy`. Returns the number of keys removed.
pub(super) fn empty_db(ctx: &mut Ctx, db: usize, lazy: bool) -> usize {
    let mut removed = 0;
    let mut old = Vec::new();
    let mut h = ctx.db_at(db);
    h.for_each_shard(|_, sh| {
        sh.touch_all_watched();
        if lazy {
            removed += sh.len();
            let mut taken = crate::keyspace::Shard::default();
            sh.swap_data(&mut taken);
            old.push(taken);
        } else {
            removed += sh.clear();
        }
    });
    if lazy && removed > 0 {
        crate::keyspace::lazyfree::free_shards(old, removed);
    }
    // Clients blocked on the database's keys learn about it (an XREADGROUP waiter is told
    // its stream is gone, as Redis's signalFlushedDb does).
    for k in ctx.srv.blocking.keys_in_db(db) {
        ctx.db_at(db).modified(&k);
    }
    removed
}

fn flushdb(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let lazy = flush_mode(a)?;
    let db = ctx.client.db;
    let removed = empty_db(ctx, db, lazy);
    if !lazy {
        crate::alloc::after_mass_free(removed);
    }
    let id = ctx.client.id;
    ctx.srv
        .tracking
        .invalidate_all(ctx.srv, id, Some(&mut ctx.extras.after), false);
    ctx.dirty += 1;
    Ok(Reply::Ok)
}

fn flushall(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let lazy = flush_mode(a)?;
    let mut removed = 0;
    for db in 0..ctx.srv.keyspace.num_dbs() {
        removed += empty_db(ctx, db, lazy);
    }
    if !lazy {
        crate::alloc::after_mass_free(removed);
    }
    let id = ctx.client.id;
    ctx.srv
        .tracking
        .invalidate_all(ctx.srv, id, Some(&mut ctx.extras.after), true);
    crate::persistence::snapshot::after_flushall(ctx.srv);
    ctx.dirty += 1;
    Ok(Reply::Ok)
}

fn swapdb(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    if crate::cluster::get(ctx.srv).is_some() {
        return Err(Reply::error("ERR SWAPDB is not allowed in cluster mode"));
    }
    let Ok(x) = int(&a[1]) else {
        return Err(Reply::error("ERR invalid first DB index"));
    };
    let Ok(y) = int(&a[2]) else {
        return Err(Reply::error("ERR invalid second DB index"));
    };
    let n = ctx.srv.keyspace.num_dbs() as i64;
    if x < 0 || x >= n || y < 0 || y >= n {
        return Err(Reply::error("ERR DB index is out of range"));
    }
    let (x, y) = (x as usize, y as usize);
    if x != y {
        let shards = ctx.srv.keyspace.shards_per_db();
        for sid in 0..shards {
            let mut tmp = crate::keyspace::Shard::default();
            ctx.db_at(x).shard_at(sid).swap_data(&mut tmp);
            ctx.db_at(y).shard_at(sid).swap_data(&mut tmp);
            ctx.db_at(x).shard_at(sid).swap_data(&mut tmp);
            // What each database held before the swap is now in the other one.
            for (db, other) in [(x, y), (y, x)] {
                let keys: Vec<Bytes> = ctx
                    .db_at(db)
                    .shard_at(sid)
                    .watched
                    .keys()
                    .cloned()
                    .collect();
                for k in keys {
                    let existed = ctx.db_at(other).shard_at(sid).raw_get(&k).is_some();
                    ctx.db_at(db)
                        .shard_at(sid)
                        .touch_watched_swapped(&k, existed);
                }
            }
        }
        // Clients blocked on keys of either database may now be served.
        for db in [x, y] {
            for k in ctx.srv.blocking.keys_in_db(db) {
                ctx.db_at(db).modified(&k);
            }
        }
    }
    ctx.dirty += 1;
    Ok(Reply::Ok)
}

fn time(_: &mut Ctx, _: &[Bytes]) -> CmdResult {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Ok(Reply::Array(vec![
        Reply::bulk(d.as_secs().to_string().into_bytes()),
        Reply::bulk(d.subsec_micros().to_string().into_bytes()),
    ]))
}

fn shutdown(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    for w in &a[1..] {
        let ok = ["nosave", "save", "now", "force", "abort"]
            .iter()
            .any(|o| eq(w, o));
        if !ok {
            return Err(Reply::error(SYNTAX));
        }
    }
    let has = |o: &str| a[1..].iter().any(|w| eq(w, o));
    let other_flags = ["nosave", "save", "now", "force"].iter().any(|o| has(o));
    if (has("abort") && other_flags) || (has("save") && has("nosave")) {
        return Err(Reply::error(SYNTAX));
    }
    if has("abort") {
        let scheduled = ctx.srv.signal_shutdown.abort();
        if ctx.srv.shutdown_wait.abort() {
            if !scheduled {
                tracing::warn!("Shutdown manually aborted.");
            }
            return Ok(Reply::Ok);
        }
        return if scheduled {
            Ok(Reply::Ok)
        } else {
            Err(Reply::error("ERR No shutdown in progress."))
        };
    }
    // A client that may not block (inside EXEC or a script, where SHUTDOWN's flags keep it
    // out anyway) could not wait for the replicas: Redis refuses it unless NOW is given.
    if !has("now") && (ctx.in_exec || ctx.client.in_script) {
        return Err(Reply::error(
            "ERR SHUTDOWN without NOW or ABORT isn't allowed for DENY BLOCKING client",
        ));
    }
    // With lagging replicas the shutdown waits for them (`shutdown-timeout`), apart from this
    // connection, which blocks until the process exits or the shutdown fails; a second
    // SHUTDOWN joins the wait under way.
    if ctx.srv.shutdown_wait.in_progress()
        || crate::shutdown::must_wait_for_replicas(ctx.srv, has("now"))
    {
        let offset = ctx.srv.repl.offset();
        let srv = ctx
            .srv
            .arc()
            .ok_or_else(|| Reply::error("ERR server is stopping"))?;
        if crate::shutdown::begin_replica_wait(ctx.srv) {
            tokio::spawn(crate::shutdown::finish_after_replicas(
                srv,
                offset,
                has("save"),
                has("nosave"),
                has("force"),
            ));
        }
        // Counted in INFO's blocked_clients from now, not from when the connection gets to it.
        ctx.client.info.blocked.store(true, Ordering::Relaxed);
        ctx.takeover = Some(super::takeover::Takeover::AwaitShutdown {
            failures: ctx.srv.shutdown_wait.failures(),
        });
        return Ok(Reply::NoReply);
    }
    super::persist::shutdown_save(ctx, has("save"), has("nosave"), has("force"))?;
    crate::listeners::stop_all(ctx.srv);
    ctx.srv.request_shutdown();
    ctx.close_after_reply = true;
    Ok(Reply::NoReply)
}
