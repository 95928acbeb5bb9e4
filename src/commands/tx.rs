//! Transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH.
//!
//! Between MULTI and EXEC the connection queues commands (after checking name and arity, as
//! Redis does; an error there makes EXEC answer EXECABORT). EXEC locks every shard of every
//! database, so the queued commands run with no other client's command in between, then
//! checks WATCH: a watched key modified since WATCH (its shard flagged the client) or expired
//! since then aborts with a null reply. Errors inside EXEC do not roll anything back.

use super::{lookup, run_locked, CmdResult, Keys, Spec};
use crate::client::Client;
use crate::keyspace::Guards;
use crate::protocol::Reply;
use crate::state::Server;
use bytes::Bytes;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::flags::*;

fn placeholder(_: &mut super::Ctx, _: &[Bytes]) -> CmdResult {
    // MULTI/EXEC/DISCARD/WATCH/UNWATCH are intercepted by `dispatch`; this is never reached.
    Err(Reply::error("ERR transaction command outside dispatch"))
}

pub static COMMANDS: &[Spec] = &[
    Spec::new(
        "multi",
        1,
        NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY,
        Keys::None,
        placeholder,
        "transactions",
    ),
    Spec::new(
        "exec",
        1,
        NOSCRIPT | LOADING | STALE | SKIP_SLOWLOG,
        Keys::None,
        placeholder,
        "transactions",
    ),
    Spec::new(
        "discard",
        1,
        NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY,
        Keys::None,
        placeholder,
        "transactions",
    ),
    Spec::new(
        "watch",
        -2,
        NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY,
        Keys::Range(1, -1, 1),
        placeholder,
        "transactions",
    ),
    Spec::new(
        "unwatch",
        1,
        NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY,
        Keys::None,
        placeholder,
        "transactions",
    ),
];

const SKIP_SLOWLOG: u32 = 0;

/// MULTI, DISCARD, WATCH, UNWATCH.
pub fn control(srv: &Server, client: &mut Client, name: &str, args: &[Bytes]) -> Reply {
    match name {
        "multi" => {
            if client.multi.is_some() {
                return Reply::error("ERR MULTI calls can not be nested");
            }
            client.multi = Some(Vec::new());
            client.multi_abort = false;
            client.info.multi.store(true, Ordering::Relaxed);
            Reply::Ok
        }
        "discard" => {
            if client.multi.is_none() {
                return Reply::error("ERR DISCARD without MULTI");
            }
            reset_multi(client);
            unwatch_all(srv, client);
            Reply::Ok
        }
        "watch" => {
            if client.multi.is_some() {
                return Reply::error("ERR WATCH inside MULTI is not allowed");
            }
            watch(srv, client, &args[1..]);
            Reply::Ok
        }
        _ => {
            unwatch_all(srv, client);
            Reply::Ok
        }
    }
}

/// Leave MULTI without running it (an EXEC refused while a script is busy).
pub fn discard_for(srv: &Server, client: &mut Client) {
    reset_multi(client);
    unwatch_all(srv, client);
}

fn reset_multi(client: &mut Client) {
    client.multi = None;
    client.multi_abort = false;
    client.info.multi.store(false, Ordering::Relaxed);
}

fn watch(srv: &Server, client: &mut Client, keys: &[Bytes]) {
    let mut g = Guards::new(&srv.keyspace);
    g.now_ms = crate::clock::unix_ms();
    g.lock_keys(client.db, keys.iter().map(|k| &k[..]));
    for key in keys {
        if client
            .watched
            .iter()
            .any(|(d, k)| *d == client.db && k == key)
        {
            continue;
        }
        let sid = srv.keyspace.shard_of(key);
        let now = g.now_ms;
        let shard = g.shard_mut(client.db, sid);
        let stale = Arc::new(std::sync::atomic::AtomicBool::new(
            shard.is_expired(key, now),
        ));
        shard
            .watched
            .entry(key.clone())
            .or_default()
            .push(crate::keyspace::Watcher {
                flag: client.watch_flag.clone(),
                stale: stale.clone(),
            });
        client.watched.push((client.db, key.clone()));
        client.watched_expiry.push((client.db, key.clone(), stale));
    }
}

/// Drop every WATCH of this client.
pub fn unwatch_all(srv: &Server, client: &mut Client) {
    if client.watched.is_empty() {
        client.watch_flag.store(false, Ordering::Release);
        return;
    }
    let watched = std::mem::take(&mut client.watched);
    client.watched_expiry.clear();
    for (db, key) in watched {
        let mut shard = srv.keyspace.dbs[db].shards[srv.keyspace.shard_of(&key)].lock();
        if let Some(v) = shard.watched.get_mut(&key) {
            v.retain(|w| !Arc::ptr_eq(&w.flag, &client.watch_flag));
            if v.is_empty() {
                shard.watched.remove(&key);
            }
        }
    }
    client.watch_flag.store(false, Ordering::Release);
}

/// EXEC.
pub fn exec(srv: &Server, client: &mut Client) -> Reply {
    let Some(queue) = client.multi.take() else {
        return Reply::error("ERR EXEC without MULTI");
    };
    let abort = client.multi_abort;
    reset_multi(client);
    if abort {
        unwatch_all(srv, client);
        return Reply::error("EXECABORT Transaction discarded because of previous errors.");
    }
    let mut g = Guards::new(&srv.keyspace);
    g.lock_all();
    g.now_ms = crate::clock::unix_ms();
    // A replica deletes no expired key itself (its master's DELs do): its master's commands
    // see every key, other clients see expired keys as absent without deleting them.
    let following = srv.repl.is_following();
    g.expire_enabled = !(srv.aof.loading() || following && client.repl.is_master);
    g.expire_paused = srv.pause.is_active() || following;
    // A watched key that expired after WATCH counts as modified.
    let mut dirty = client.watch_flag.load(Ordering::Acquire);
    for (db, key, stale) in &client.watched_expiry {
        if !stale.load(Ordering::Acquire) && g.db(*db).is_expired_entry(key) {
            dirty = true;
        }
    }
    if dirty {
        drop(g);
        unwatch_all(srv, client);
        return Reply::NullArray;
    }
    let mut replies = Vec::with_capacity(queue.len());
    // What the transaction logs is collected and goes out in one piece at the end, wrapped
    // in MULTI/EXEC when it is more than one command (as Redis 7.0: a transaction with one
    // write is logged as that write, one that changed nothing is not logged).
    let collecting = crate::state::scripts::start_script_feed();
    for args in queue {
        let Some(spec) = lookup(&args[0]) else {
            replies.push(super::unknown_command(&args));
            continue;
        };
        // ACL rules may have changed since the command was queued (Redis checks again).
        if let Err((denied, pos, id)) = crate::commands::acl::check(client, spec, &args) {
            crate::commands::acl::log_denial(srv, client, denied, pos, id, &args, "multi");
            let reason = match denied {
                crate::acl::Denied::Command => "no permission to execute the command or subcommand",
                crate::acl::Denied::Key => "no permission to touch the specified keys",
                _ => "no permission to access one of the channels used as arguments",
            };
            replies.push(Reply::Error(format!("NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: {reason}")));
            continue;
        }
        let started = std::time::Instant::now();
        let (reply, _block, _close) = run_locked(srv, client, spec, &args, &mut g, true, started);
        srv.stats.commands.fetch_add(1, Ordering::Relaxed);
        super::slowlog::record(srv, client, spec, &args, client.last_duration_us);
        replies.push(reply);
    }
    if collecting {
        let logged = crate::state::scripts::take_script_feed();
        srv.propagate_script(logged, true);
    }
    super::serve_blocked(srv, &mut g);
    if srv.repl.is_active() {
        client.repl.woff = srv.repl.offset();
    }
    drop(g);
    unwatch_all(srv, client);
    Reply::Array(replies)
}
