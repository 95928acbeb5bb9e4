//! Pub/Sub commands: (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE, PUBLISH, SPUBLISH and PUBSUB.
//!
//! The registry and delivery are in [`crate::pubsub`]. Subscribe and unsubscribe confirmations
//! are pushes: one per channel, written even under CLIENT REPLY OFF/SKIP (the handler returns
//! them pre-encoded and marks the reply as a push).

use super::flags::*;
use super::{CmdResult, Ctx, Keys, Spec};
use crate::client::Kind;
use crate::protocol::Reply;
use bytes::Bytes;

pub static COMMANDS: &[Spec] = &[
    Spec::new(
        "subscribe",
        -2,
        PUBSUB | NOSCRIPT | LOADING | STALE,
        Keys::None,
        subscribe,
        "pubsub",
    ),
    Spec::new(
        "unsubscribe",
        -1,
        PUBSUB | NOSCRIPT | LOADING | STALE,
        Keys::None,
        unsubscribe,
        "pubsub",
    ),
    Spec::new(
        "psubscribe",
        -2,
        PUBSUB | NOSCRIPT | LOADING | STALE,
        Keys::None,
        psubscribe,
        "pubsub",
    ),
    Spec::new(
        "punsubscribe",
        -1,
        PUBSUB | NOSCRIPT | LOADING | STALE,
        Keys::None,
        punsubscribe,
        "pubsub",
    ),
    Spec::new(
        "ssubscribe",
        -2,
        PUBSUB | NOSCRIPT | LOADING | STALE,
        Keys::None,
        ssubscribe,
        "pubsub",
    ),
    Spec::new(
        "sunsubscribe",
        -1,
        PUBSUB | NOSCRIPT | LOADING | STALE,
        Keys::None,
        sunsubscribe,
        "pubsub",
    ),
    Spec::new(
        "publish",
        3,
        PUBSUB | LOADING | STALE | FAST | MAY_REPLICATE,
        Keys::None,
        publish,
        "pubsub",
    ),
    Spec::new(
        "spublish",
        3,
        PUBSUB | LOADING | STALE | FAST | MAY_REPLICATE,
        Keys::None,
        spublish,
        "pubsub",
    ),
    Spec::new(
        "monitor",
        1,
        ADMIN | NOSCRIPT | LOADING | STALE,
        Keys::None,
        monitor,
        "server",
    ),
    Spec::new(
        "pubsub",
        -2,
        PUBSUB | LOADING | STALE,
        Keys::None,
        pubsub,
        "pubsub",
    ),
];

fn do_subscribe(ctx: &mut Ctx, a: &[Bytes], kind: Kind) -> Reply {
    let mut out = Vec::new();
    let info = ctx.client.info.clone();
    let resp = ctx.client.resp;
    ctx.srv
        .pubsub
        .subscribe(&info, &mut ctx.client.subs, kind, &a[1..], resp, &mut out);
    ctx.extras.push = true;
    Reply::Raw(Bytes::from(out))
}

fn do_unsubscribe(ctx: &mut Ctx, a: &[Bytes], kind: Kind) -> Reply {
    let mut out = Vec::new();
    let info = ctx.client.info.clone();
    let resp = ctx.client.resp;
    ctx.srv.pubsub.unsubscribe(
        &info,
        &mut ctx.client.subs,
        kind,
        &a[1..],
        resp,
        Some(&mut out),
    );
    ctx.extras.push = true;
    Reply::Raw(Bytes::from(out))
}

fn subscribe(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    Ok(do_subscribe(ctx, a, Kind::Channel))
}

fn psubscribe(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    Ok(do_subscribe(ctx, a, Kind::Pattern))
}

fn ssubscribe(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    // Inside a transaction a client expects one reply per command (Redis's DENY BLOCKING
    // rule; SUBSCRIBE and PSUBSCRIBE are exempt there for compatibility, SSUBSCRIBE is not).
    if ctx.in_exec {
        return Err(Reply::error(
            "ERR SSUBSCRIBE isn't allowed for a DENY BLOCKING client",
        ));
    }
    Ok(do_subscribe(ctx, a, Kind::Shard))
}

fn unsubscribe(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    Ok(do_unsubscribe(ctx, a, Kind::Channel))
}

fn punsubscribe(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    Ok(do_unsubscribe(ctx, a, Kind::Pattern))
}

fn sunsubscribe(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    Ok(do_unsubscribe(ctx, a, Kind::Shard))
}

/// MONITOR: from now on every command the server runs is sent to this client as a line.
fn monitor(ctx: &mut Ctx, _: &[Bytes]) -> CmdResult {
    // Inside EXEC a client expects one reply per command (Redis's DENY BLOCKING rule).
    if ctx.in_exec {
        return Err(Reply::error(
            "ERR MONITOR isn't allowed for DENY BLOCKING client",
        ));
    }
    let info = ctx.client.info.clone();
    if ctx.srv.pubsub.add_monitor(&info) {
        Ok(Reply::Ok)
    } else {
        // Already monitoring: ignored without a reply, as Redis.
        Ok(Reply::NoReply)
    }
}

/// PUBLISH and SPUBLISH reach the replicas (their subscribers get the message too), not the
/// AOF, as Redis forces their propagation to replicas only.
fn replicate_publish(ctx: &mut Ctx, a: &[Bytes]) {
    if ctx.srv.repl.is_active() {
        let db = ctx.client.db;
        crate::state::scripts::without_targets(crate::state::repl::TO_AOF, || {
            ctx.srv.propagate(db, a.to_vec())
        });
    }
}

fn publish(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    // In cluster mode the message reaches every node over the bus instead (Redis replicates
    // PUBLISH only outside cluster mode).
    if crate::cluster::get(ctx.srv).is_none() {
        replicate_publish(ctx, a);
    }
    let limit = ctx.srv.config.hot.obuf.pubsub();
    let n = ctx
        .srv
        .pubsub
        .publish(&a[1], &a[2], false, limit, ctx.now_ms());
    crate::cluster::propagate_publish(ctx.srv, &a[1], &a[2], false);
    Ok(Reply::Int(n as i64))
}

fn spublish(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    if crate::cluster::get(ctx.srv).is_none() {
        replicate_publish(ctx, a);
    }
    let limit = ctx.srv.config.hot.obuf.pubsub();
    let n = ctx
        .srv
        .pubsub
        .publish(&a[1], &a[2], true, limit, ctx.now_ms());
    crate::cluster::propagate_publish(ctx.srv, &a[1], &a[2], true);
    Ok(Reply::Int(n as i64))
}

fn pubsub(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    let ps = &ctx.srv.pubsub;
    match (sub.as_str(), a.len()) {
        ("help", 2) => Ok(Reply::Array(
            [
                "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "CHANNELS [<pattern>]",
                "    Return the currently active channels matching a <pattern> (default: '*').",
                "NUMPAT",
                "    Return number of subscriptions to patterns.",
                "NUMSUB [<channel> ...]",
                "    Return the number of subscribers for the specified channels, excluding",
                "    pattern subscriptions(default: no channels).",
                "SHARDCHANNELS [<pattern>]",
                "    Return the currently active shard level channels matching a <pattern> (default: '*').",
                "SHARDNUMSUB [<shardchannel> ...]",
                "    Return the number of subscribers for the specified shard level channel(s)",
                "HELP",
                "    Prints this help.",
            ]
            .iter()
            .map(|s| Reply::Status(s))
            .collect(),
        )),
        ("channels", 2 | 3) | ("shardchannels", 2 | 3) => {
            let kind = if sub == "channels" {
                Kind::Channel
            } else {
                Kind::Shard
            };
            let pat = a.get(2).map(|p| &p[..]);
            Ok(Reply::Array(ps.active(kind, pat).into_iter().map(Reply::Bulk).collect()))
        }
        ("numsub", _) | ("shardnumsub", _) => {
            let kind = if sub == "numsub" {
                Kind::Channel
            } else {
                Kind::Shard
            };
            let mut v = Vec::with_capacity((a.len() - 2) * 2);
            for c in &a[2..] {
                v.push(Reply::Bulk(c.clone()));
                v.push(Reply::Int(ps.subscriber_count(kind, c) as i64));
            }
            Ok(Reply::Array(v))
        }
        ("numpat", 2) => Ok(Reply::Int(ps.len(Kind::Pattern) as i64)),
        ("help" | "channels" | "shardchannels" | "numpat", _) => Err(Reply::error(format!(
            "ERR wrong number of arguments for 'pubsub|{sub}' command"
        ))),
        _ => Err(Reply::error(format!(
            "ERR unknown subcommand '{}'. Try PUBSUB HELP.",
            String::from_utf8_lossy(&a[1])
        ))),
    }
}
