//! Replication commands: SYNC, PSYNC, REPLCONF, WAIT, ROLE, REPLICAOF / SLAVEOF, FAILOVER.
//!
//! These only check arguments and change state: the stream and the replica registry are
//! [`crate::state::repl`]; the work that needs the client's socket (sending the RDB image,
//! waiting for acknowledgements) is left to the connection as a [`Takeover`] (see
//! [`super::takeover`]), which runs it through [`crate::replication`]; the link to a master
//! (this server as a replica) is started through a hook the server registers.

use super::args::{eq, SYNTAX};
use super::flags::*;
use super::takeover::Takeover;
use super::{CmdResult, Ctx, Keys, Spec};
use crate::config::dir;
use crate::protocol::Reply;
use crate::state::repl::{Replica, Resync, ONLINE, WAIT_BGSAVE_START};
use bytes::Bytes;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

#[rustfmt::skip]
pub static COMMANDS: &[Spec] = &[
    Spec::new("sync", 1, ADMIN | NOSCRIPT | NO_MULTI | NO_ASYNC_LOADING, Keys::None, sync, "server"),
    Spec::new("psync", -3, ADMIN | NOSCRIPT | NO_MULTI | NO_ASYNC_LOADING, Keys::None, sync, "server"),
    Spec::new("replconf", -1, ADMIN | NOSCRIPT | LOADING | STALE | ALLOW_BUSY, Keys::None, replconf, "server"),
    Spec::new("wait", 3, NOSCRIPT, Keys::None, wait, "generic"),
    Spec::new("role", 1, NOSCRIPT | LOADING | STALE | FAST, Keys::None, role, "server"),
    Spec::new("replicaof", 3, ADMIN | NOSCRIPT | STALE | NO_ASYNC_LOADING, Keys::None, replicaof, "server"),
    Spec::new("slaveof", 3, ADMIN | NOSCRIPT | STALE | NO_ASYNC_LOADING, Keys::None, replicaof, "server"),
    Spec::new("failover", -1, ADMIN | NOSCRIPT | STALE, Keys::None, failover, "server"),
];

/// The replica's address as INFO and ROLE show it: what it announced, else its peer address.
fn peer_ip(ctx: &Ctx) -> String {
    if let Some(ip) = &ctx.client.repl.announced_ip {
        return ip.clone();
    }
    let addr = &ctx.client.info.addr;
    match addr.rsplit_once(':') {
        Some((ip, _)) => ip.trim_start_matches('[').trim_end_matches(']').to_string(),
        None => addr.clone(),
    }
}

/// SYNC and PSYNC replid offset.
fn sync(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    if ctx.client.repl.is_replica {
        // A replica asking again is ignored, as Redis ignores it.
        return Ok(Reply::NoReply);
    }
    // `PSYNC <replid> <offset> FAILOVER`: our master hands us its role (state::failover).
    if a.len() > 3 && eq(&a[0], "psync") && eq(&a[3], "failover") {
        let who = format!("id={} addr={}", ctx.client.id, ctx.client.info.addr);
        crate::state::failover::accept_psync_failover(ctx.srv, &a[1], &who)
            .map_err(Reply::error)?;
    }
    if ctx.srv.failover.active() {
        return Err(Reply::error("NOMASTERLINK Can't SYNC while failing over"));
    }
    if let Some(refusal) = crate::state::replica_link::sync_refusal(ctx.srv) {
        return Err(Reply::Error(refusal.into()));
    }
    if ctx.client.info.out_pending.load(Ordering::Relaxed) > 0 {
        return Err(Reply::error(
            "ERR SYNC and PSYNC are invalid with pending output",
        ));
    }
    let srv = ctx.srv;
    let psync = eq(&a[0], "psync");
    let ip = peer_ip(ctx);
    let replica = Arc::new(Replica {
        client_id: ctx.client.id,
        info: ctx.client.info.clone(),
        state: AtomicU8::new(WAIT_BGSAVE_START),
        ready: AtomicBool::new(false),
        initial_offset: AtomicU64::new(0),
        ack_offset: AtomicU64::new(0),
        ack_ms: AtomicI64::new(crate::clock::unix_ms()),
        listening_port: ctx.client.repl.listening_port,
        ip,
        pre_psync: !psync,
        bgsave_outcome: Default::default(),
        changed: Default::default(),
        capa_eof: ctx.client.repl.capa_eof,
        rdb_only: ctx.client.repl.rdb_only,
        asked_ms: crate::clock::unix_ms(),
        rdb_feed: Default::default(),
        cursor: AtomicU64::new(0),
        soft_since_ms: AtomicI64::new(0),
    });
    tracing::info!("Replica {} asks for synchronization", replica.describe());
    let psync_offset = if psync {
        match crate::util::numtext::parse_i64(&a[2]) {
            Some(o) => o,
            None => {
                tracing::warn!(
                    "Replica {} asks for synchronization but with a wrong offset",
                    replica.describe()
                );
                return Err(Reply::error("ERR value is not an integer or out of range"));
            }
        }
    } else {
        -1
    };
    ctx.client.repl.is_replica = true;
    ctx.client
        .info
        .repl_role
        .store(crate::client::ROLE_REPLICA, Ordering::Relaxed);
    if psync {
        let replid = String::from_utf8_lossy(&a[1]).into_owned();
        let offset = psync_offset;
        match srv
            .repl
            .try_partial(&replica, &replid, offset, ctx.client.repl.capa_psync2)
        {
            Resync::Continue { sent, .. } => {
                srv.repl.sync_partial_ok.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    "Partial resynchronization request from {} accepted. Sending {sent} bytes of backlog starting from offset {offset}.",
                    replica.describe()
                );
                return Ok(Reply::NoReply);
            }
            Resync::Full(why) => {
                if let Some(why) = why {
                    tracing::info!("{why}");
                }
                if replid != "?" {
                    srv.repl.sync_partial_err.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
    srv.repl.sync_full.fetch_add(1, Ordering::Relaxed);
    let backlog = srv.config.int(dir::REPL_BACKLOG_SIZE).max(1) as usize;
    srv.repl.add_replica(replica, backlog);
    ctx.takeover = Some(Takeover::FullSync);
    Ok(Reply::NoReply)
}

/// REPLCONF option value [option value ...].
fn replconf(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    if a.len().is_multiple_of(2) {
        return Err(Reply::error(SYNTAX));
    }
    for pair in a[1..].chunks(2) {
        let (opt, val) = (&pair[0], &pair[1]);
        if eq(opt, "listening-port") {
            match crate::util::numtext::parse_i64(val) {
                Some(p) => ctx.client.repl.listening_port = p as u16,
                None => return Err(Reply::error("ERR value is not an integer or out of range")),
            }
        } else if eq(opt, "ip-address") {
            if val.len() >= 46 {
                return Err(Reply::Error(format!(
                    "ERR REPLCONF ip-address provided by replica instance is too long: {} bytes",
                    val.len()
                )));
            }
            ctx.client.repl.announced_ip = Some(String::from_utf8_lossy(val).into_owned());
        } else if eq(opt, "capa") {
            if eq(val, "eof") {
                ctx.client.repl.capa_eof = true;
            } else if eq(val, "psync2") {
                ctx.client.repl.capa_psync2 = true;
            }
        } else if eq(opt, "ack") {
            // From a replica only, and never answered.
            if !ctx.client.repl.is_replica {
                return Ok(Reply::NoReply);
            }
            let Some(off) = crate::util::numtext::parse_i64(val) else {
                return Ok(Reply::NoReply);
            };
            if let Some(r) = ctx.srv.repl.find(ctx.client.id) {
                r.ack_offset.fetch_max(off.max(0) as u64, Ordering::AcqRel);
                r.ack_ms.store(crate::clock::unix_ms(), Ordering::Relaxed);
                ctx.srv.repl.acked.notify_waiters();
                // The first ACK after a diskless transfer starts the stream.
                if r.state() == ONLINE {
                    ctx.client.info.push.release();
                }
            }
            return Ok(Reply::NoReply);
        } else if eq(opt, "getack") {
            // Only the master asks this of us, on the replication link.
            crate::state::replica_link::ack_requested(ctx.srv);
            return Ok(Reply::NoReply);
        } else if eq(opt, "rdb-only") {
            match crate::util::numtext::parse_i64(val) {
                Some(v @ (0 | 1)) => ctx.client.repl.rdb_only = v == 1,
                Some(_) => return Err(Reply::error("ERR value is out of range, must be positive")),
                None => return Err(Reply::error("ERR value is not an integer or out of range")),
            }
        } else if eq(opt, "rdb-filter-only") {
            // The only include filter Redis 7.0 knows; none at all leaves the data out too.
            let text = String::from_utf8_lossy(val);
            for f in text.split_whitespace() {
                if !f.eq_ignore_ascii_case("functions") {
                    return Err(Reply::Error(format!(
                        "ERR Unsupported rdb-filter-only option: {f}"
                    )));
                }
            }
            ctx.client.repl.rdb_functions_only = true;
        } else {
            return Err(Reply::Error(format!(
                "ERR Unrecognized REPLCONF option: {}",
                String::from_utf8_lossy(opt)
            )));
        }
    }
    Ok(Reply::Ok)
}

/// WAIT numreplicas timeout.
fn wait(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    if crate::state::replica_link::is_replica(ctx.srv) {
        return Err(Reply::error("ERR WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a replica is configured to be writable (which is not the default) writes to replicas are just local and are not propagated."));
    }
    let Some(num) = crate::util::numtext::parse_i64(&a[1]) else {
        return Err(Reply::error("ERR value is not an integer or out of range"));
    };
    let Some(timeout) = crate::util::numtext::parse_i64(&a[2]) else {
        return Err(Reply::error(
            "ERR timeout is not an integer or out of range",
        ));
    };
    if timeout < 0 {
        return Err(Reply::error("ERR timeout is negative"));
    }
    let target = ctx.client.repl.woff;
    let acked = ctx.srv.repl.acked_at_least(target) as i64;
    // Inside MULTI (EXEC) a client cannot block: the count as it is now.
    if acked >= num || ctx.in_exec {
        return Ok(Reply::Int(acked));
    }
    let deadline_ms = if timeout > 0 {
        crate::clock::unix_ms().saturating_add(timeout)
    } else {
        0
    };
    ctx.takeover = Some(Takeover::Wait {
        replicas: num,
        offset: target,
        deadline_ms,
    });
    Ok(Reply::NoReply)
}

/// ROLE.
fn role(ctx: &mut Ctx, _: &[Bytes]) -> CmdResult {
    if let Some(r) = crate::state::replica_link::role_reply(ctx.srv) {
        return Ok(r);
    }
    let srv = ctx.srv;
    let replicas = srv
        .repl
        .replicas()
        .into_iter()
        .filter(|r| r.state() == ONLINE)
        .map(|r| {
            Reply::Array(vec![
                Reply::Bulk(Bytes::from(r.ip.clone())),
                Reply::Bulk(Bytes::from(r.listening_port.to_string())),
                Reply::Bulk(Bytes::from(
                    r.ack_offset.load(Ordering::Relaxed).to_string(),
                )),
            ])
        })
        .collect();
    Ok(Reply::Array(vec![
        Reply::bulk_slice(b"master"),
        Reply::Int(srv.repl.offset() as i64),
        Reply::Array(replicas),
    ]))
}

/// REPLICAOF host port | NO ONE.
fn replicaof(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    // In cluster mode a node follows the master CLUSTER REPLICATE names.
    if crate::cluster::get(ctx.srv).is_some() {
        return Err(Reply::error("ERR REPLICAOF not allowed in cluster mode."));
    }
    if ctx.client.repl.is_replica {
        return Err(Reply::error(
            "ERR Command is not valid when client is a replica.",
        ));
    }
    let reply = crate::state::replica_link::replicaof(ctx.srv, ctx.client.id, &a[1], &a[2]);
    // The process's OOM score follows its role (oom-score-adj-values' replica class).
    let _ = super::config_cmd::apply_oom_score_adj(ctx.srv);
    Ok(reply)
}

/// FAILOVER [TO host port [FORCE]] [ABORT] [TIMEOUT ms]: the arguments are checked in Redis's
/// order (syntax and numbers first, then the server's state, then the target); the failover
/// itself is `state::failover`'s. Answers +OK once the failover has started.
fn failover(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    use crate::state::failover as fo;
    let srv = ctx.srv;
    if crate::cluster::get(srv).is_some() {
        return Err(Reply::error(
            "ERR FAILOVER not allowed in cluster mode. Use CLUSTER FAILOVER command instead.",
        ));
    }
    // ABORT only alone: with other arguments it is a syntax error.
    if a.len() == 2 && eq(&a[1], "abort") {
        if srv.failover.state() == fo::NONE {
            return Err(Reply::error("ERR No failover in progress."));
        }
        fo::abort(srv, "Failover manually aborted");
        return Ok(Reply::Ok);
    }
    let not_integer = || Reply::error("ERR value is not an integer or out of range");
    let mut timeout_ms: i64 = 0;
    let mut force = false;
    let mut target: Option<(String, i64)> = None;
    let mut j = 1;
    while j < a.len() {
        if eq(&a[j], "timeout") && j + 1 < a.len() && timeout_ms == 0 {
            let t = crate::util::numtext::parse_i64(&a[j + 1]).ok_or_else(not_integer)?;
            if t <= 0 {
                return Err(Reply::error("ERR FAILOVER timeout must be greater than 0"));
            }
            timeout_ms = t;
            j += 2;
        } else if eq(&a[j], "to") && j + 2 < a.len() && target.is_none() {
            let port = crate::util::numtext::parse_i64(&a[j + 2]).ok_or_else(not_integer)?;
            target = Some((String::from_utf8_lossy(&a[j + 1]).into_owned(), port));
            j += 3;
        } else if eq(&a[j], "force") && !force {
            force = true;
            j += 1;
        } else {
            return Err(Reply::error(SYNTAX));
        }
    }
    if srv.failover.state() != fo::NONE {
        return Err(Reply::error("ERR FAILOVER already in progress."));
    }
    if crate::state::replica_link::is_replica(srv) {
        return Err(Reply::error(
            "ERR FAILOVER is not valid when server is a replica.",
        ));
    }
    let replicas = srv.repl.replicas();
    if replicas.is_empty() {
        return Err(Reply::error("ERR FAILOVER requires connected replicas."));
    }
    if force && (timeout_ms == 0 || target.is_none()) {
        return Err(Reply::error(
            "ERR FAILOVER with force option requires both a timeout and target HOST and IP.",
        ));
    }
    let target = match target {
        Some((host, port)) => {
            let Some(r) = replicas
                .iter()
                .find(|r| r.ip.eq_ignore_ascii_case(&host) && i64::from(r.listening_port) == port)
            else {
                return Err(Reply::error(
                    "ERR FAILOVER target HOST and PORT is not a replica.",
                ));
            };
            if r.state() != ONLINE {
                return Err(Reply::error("ERR FAILOVER target replica is not online."));
            }
            Some((host, r.listening_port))
        }
        None => None,
    };
    fo::start(
        srv,
        fo::Request {
            target,
            timeout_ms,
            force,
        },
    );
    Ok(Reply::Ok)
}
