//! Transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH.
//!
//! Between MULTI and EXEC the connection queues commands (after checking name and arity, as
//! Redis does; an error there makes EXEC answer EXECABORT). EXEC locks every shard of every
//! database, so the queued commands run with no other client's command in between, then
//! checks WATCH: a watched key modified since WATCH (its shard flagged the client) or expired
//! since then aborts with a null reply. Errors inside EXEC do not roll anything back.

use super::{lookup, run_locked, CmdResult, Keys, ReplyExtras, Spec};
use crate::client::Client;
use crate::keyspace::Guards;
use crate::protocol::Reply;
use crate::state::Server;
use bytes::Bytes;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::flags::*;

pub static COMMANDS: &[Spec] = &[
    Spec::session(
        "multi",
        1,
        NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY | NOT_QUEUED,
        Keys::None,
        multi,
        "transactions",
    ),
    Spec::session(
        "exec",
        1,
        NOSCRIPT | LOADING | STALE | SKIP_SLOWLOG | RUNS_QUEUE | NOT_QUEUED,
        Keys::None,
        exec_command,
        "transactions",
    ),
    Spec::session(
        "discard",
        1,
        NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY | NOT_QUEUED,
        Keys::None,
        discard,
        "transactions",
    ),
    Spec::session(
        "watch",
        -2,
        NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY | NOT_QUEUED,
        Keys::Range(1, -1, 1),
        watch_command,
        "transactions",
    ),
    Spec::session(
        "unwatch",
        1,
        NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY,
        Keys::None,
        unwatch,
        "transactions",
    ),
];

const SKIP_SLOWLOG: u32 = 0;

fn multi(_: &Server, client: &mut Client, _: &[Bytes], _: &mut ReplyExtras) -> CmdResult {
    if client.multi.is_some() {
        return Err(Reply::error("ERR MULTI calls can not be nested"));
    }
    client.start_multi();
    client.multi_abort = false;
    client.info.multi.store(true, Ordering::Relaxed);
    Ok(Reply::Ok)
}

fn discard(srv: &Server, client: &mut Client, _: &[Bytes], _: &mut ReplyExtras) -> CmdResult {
    if client.multi.is_none() {
        return Err(Reply::error("ERR DISCARD without MULTI"));
    }
    reset_multi(client);
    unwatch_all(srv, client);
    Ok(Reply::Ok)
}

fn watch_command(
    srv: &Server,
    client: &mut Client,
    args: &[Bytes],
    _: &mut ReplyExtras,
) -> CmdResult {
    if client.multi.is_some() {
        return Err(Reply::error("ERR WATCH inside MULTI is not allowed"));
    }
    watch(srv, client, &args[1..]);
    Ok(Reply::Ok)
}

fn unwatch(srv: &Server, client: &mut Client, _: &[Bytes], _: &mut ReplyExtras) -> CmdResult {
    unwatch_all(srv, client);
    Ok(Reply::Ok)
}

/// EXEC, and what follows it for client-side caching: CLIENT CACHING applied to the whole
/// transaction, and the invalidations its writes caused go out (Redis sends them after EXEC).
fn exec_command(
    srv: &Server,
    client: &mut Client,
    _: &[Bytes],
    extras: &mut ReplyExtras,
) -> CmdResult {
    let reply = exec(srv, client, extras);
    client.tracking_caching = false;
    if srv.tracking.is_active() {
        let id = client.id;
        srv.tracking
            .invalidate(srv, &[], id, Some(&mut extras.after), true);
    }
    Ok(reply)
}

/// [`crate::cluster::routing::recheck_migrating`] for a transaction's queued commands (every
/// key of them is in one slot: the dispatcher refused the EXEC otherwise). None outside
/// cluster mode, for our master's link and the AOF loader, and when the slot is not moving.
fn recheck_queue_routing(
    srv: &Server,
    client: &Client,
    queue: &[Vec<Bytes>],
    g: &mut Guards<'_>,
) -> Option<Reply> {
    crate::cluster::get(srv)?;
    if client.obeys() {
        return None;
    }
    let mut keys: Vec<&[u8]> = Vec::new();
    let mut writes = false;
    for args in queue {
        let Some(spec) = lookup(&args[0]) else {
            continue;
        };
        writes |=
            crate::commands::scripting::effective_command_flags(srv, spec.name, args, spec.flags)
                & crate::commands::flags::WRITE
                != 0;
        keys.extend(spec.key_positions(args).into_iter().map(|i| &args[i][..]));
    }
    super::recheck_migrating_keys(srv, &keys, writes, client.cluster.on_tls, g)
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
        // A copy: the argument is a slice of the connection's read buffer, which a clone would
        // keep allocated for as long as the key is watched.
        let key = &Bytes::copy_from_slice(key);
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

/// Drop every WATCH of this client, under guards that hold every shard's lock.
fn unwatch_locked(client: &mut Client, g: &mut Guards) {
    client.watched_expiry.clear();
    for (db, key) in std::mem::take(&mut client.watched) {
        let sid = g.ks.shard_of(&key);
        let shard = g.shard_mut(db, sid);
        if let Some(v) = shard.watched.get_mut(&key) {
            v.retain(|w| !Arc::ptr_eq(&w.flag, &client.watch_flag));
            if v.is_empty() {
                shard.watched.remove(&key);
            }
        }
    }
    client.watch_flag.store(false, Ordering::Release);
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
pub fn exec(srv: &Server, client: &mut Client, extras: &mut ReplyExtras) -> Reply {
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
    // Cluster mode: the queued commands' routing again, now under the locks (a MIGRATE may
    // have moved one of their keys, or the slot may have left, since the dispatcher routed the
    // EXEC). As Redis answers a redirected EXEC: the transaction is discarded.
    if let Some(redirect) = recheck_queue_routing(srv, client, &queue, &mut g) {
        drop(g);
        unwatch_all(srv, client);
        return redirect;
    }
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
    // As Redis, the WATCHes go before the queue runs: its own writes need not flag this
    // client, and an UNWATCH it queued has nothing left to do.
    unwatch_locked(client, &mut g);
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
        let started = crate::clock::command_stamp();
        let ran = run_locked(srv, client, spec, &args, &mut g, true, started);
        extras.absorb(ran.extras);
        let reply = ran.reply;
        srv.stats.commands.add(1);
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
