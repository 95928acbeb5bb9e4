//! Connection commands: PING ECHO HELLO QUIT SELECT AUTH RESET CLIENT. They read and change
//! the calling client's own state (protocol, selected database, user, name, reply mode) and,
//! for CLIENT LIST/KILL/..., the registry of connected clients.

use super::args::{eq, int, NOT_INT, SYNTAX};
use super::flags::*;
use super::{CmdResult, Ctx, Keys, Spec};
use crate::cmdspec::wrong_arity;
use crate::protocol::{Reply, Resp};
use crate::version::REDIS_VERSION;
use bytes::Bytes;
use std::sync::atomic::Ordering;

#[rustfmt::skip]
pub static COMMANDS: &[Spec] = &[
    Spec::new("ping", -1, FAST | MISCONF_REFUSED, Keys::None, ping, "connection"),
    Spec::new("echo", 2, LOADING | STALE | FAST, Keys::None, echo, "connection"),
    Spec::new("hello", -1, NO_AUTH | FAST | STALE | NOSCRIPT | LOADING | ALLOW_BUSY, Keys::None, hello, "connection"),
    Spec::new("quit", -1, NO_AUTH | FAST | STALE | NOSCRIPT | LOADING | ALLOW_BUSY | NOT_QUEUED, Keys::None, quit, "connection"),
    Spec::new("select", 2, FAST | LOADING | STALE | SWITCHES_DB, Keys::None, select, "connection"),
    Spec::new("auth", -2, NO_AUTH | FAST | STALE | NOSCRIPT | LOADING | ALLOW_BUSY, Keys::None, auth, "connection"),
    Spec::new("reset", 1, NO_AUTH | FAST | STALE | NOSCRIPT | LOADING | ALLOW_BUSY | NOT_QUEUED, Keys::None, reset, "connection"),
    Spec::new("client", -2, ADMIN | NOSCRIPT | LOADING | STALE | KEEPS_CACHING, Keys::None, client, "connection"),
];

fn ping(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    // A RESP2 subscriber gets its pong as a two-element array (it can only read those).
    if a.len() <= 2 && ctx.client.resp == Resp::V2 && ctx.client.subs.total() > 0 {
        let payload = a.get(1).cloned().unwrap_or_default();
        return Ok(Reply::Array(vec![
            Reply::bulk_slice(b"pong"),
            Reply::Bulk(payload),
        ]));
    }
    match a.len() {
        1 => Ok(Reply::Status("PONG")),
        2 => Ok(Reply::Bulk(a[1].clone())),
        _ => {
            let _ = ctx;
            Err(wrong_arity("ping"))
        }
    }
}

fn echo(_: &mut Ctx, a: &[Bytes]) -> CmdResult {
    Ok(Reply::Bulk(a[1].clone()))
}

fn quit(ctx: &mut Ctx, _: &[Bytes]) -> CmdResult {
    ctx.close_after_reply = true;
    Ok(Reply::Ok)
}

fn select(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let Ok(n) = int(&a[1]) else {
        return Err(Reply::error(NOT_INT));
    };
    if n != 0 && crate::cluster::get(ctx.srv).is_some() {
        return Err(Reply::error("ERR SELECT is not allowed in cluster mode"));
    }
    if n < 0 || n as usize >= ctx.srv.keyspace.num_dbs() {
        return Err(Reply::error("ERR DB index is out of range"));
    }
    ctx.client.select(n as usize);
    Ok(Reply::Ok)
}

/// AUTH / HELLO AUTH: switch the connection to `user` (the default user when None) if the
/// password is right (ACL users, see crate::acl); a failure is logged in the ACL LOG under
/// `command` (the name as sent).
fn check_password(
    ctx: &mut Ctx,
    command: &[u8],
    user: Option<&[u8]>,
    pass: &[u8],
) -> Result<(), Reply> {
    if user.is_none() && crate::commands::acl::default_user_nopass(ctx.srv) {
        return Err(Reply::error(
            "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
        ));
    }
    let name = user.unwrap_or(b"default");
    match ctx.srv.acl.authenticate(name, pass) {
        Some(u) => {
            ctx.client.set_user(u);
            ctx.client.authenticated = true;
            Ok(())
        }
        None => {
            crate::commands::acl::log_auth_failure(ctx.srv, ctx.client, command, name);
            Err(Reply::error(
                "WRONGPASS invalid username-password pair or user is disabled.",
            ))
        }
    }
}

fn auth(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let r = match a.len() {
        2 => check_password(ctx, &a[0], None, &a[1]),
        3 => check_password(ctx, &a[0], Some(&a[1]), &a[2]),
        _ => return Err(Reply::error(SYNTAX)),
    };
    r?;
    Ok(Reply::Ok)
}

fn hello(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let mut resp = None;
    let mut i = 1;
    if a.len() > 1 {
        match int(&a[1]) {
            Ok(v) if v == 2 || v == 3 => resp = Some(v),
            Ok(_) => return Err(Reply::error("NOPROTO unsupported protocol version")),
            Err(_) => {
                return Err(Reply::error(
                    "ERR Protocol version is not an integer or out of range",
                ))
            }
        }
        i = 2;
    }
    let mut setname = None;
    while i < a.len() {
        if eq(&a[i], "auth") && i + 2 < a.len() {
            check_password(ctx, &a[0], Some(&a[i + 1]), &a[i + 2])?;
            i += 3;
        } else if eq(&a[i], "setname") && i + 1 < a.len() {
            valid_client_name(&a[i + 1])?;
            setname = Some(a[i + 1].clone());
            i += 2;
        } else {
            return Err(Reply::error(format!(
                "ERR Syntax error in HELLO option '{}'",
                String::from_utf8_lossy(&a[i])
            )));
        }
    }
    if !ctx.client.authenticated {
        return Err(Reply::error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"));
    }
    if let Some(n) = setname {
        *ctx.client.info.name.lock() = if n.is_empty() { None } else { Some(n) };
    }
    if let Some(v) = resp {
        ctx.client.resp = if v == 3 { Resp::V3 } else { Resp::V2 };
        ctx.client.info.resp.store(v as u8, Ordering::Relaxed);
    }
    let proto = if ctx.client.resp == Resp::V3 { 3 } else { 2 };
    Ok(Reply::Map(vec![
        (Reply::bulk_slice(b"server"), Reply::bulk_slice(b"redis")),
        (
            Reply::bulk_slice(b"version"),
            Reply::bulk_slice(REDIS_VERSION.as_bytes()),
        ),
        (Reply::bulk_slice(b"proto"), Reply::Int(proto)),
        (Reply::bulk_slice(b"id"), Reply::Int(ctx.client.id as i64)),
        (Reply::bulk_slice(b"mode"), Reply::bulk_slice(b"standalone")),
        (Reply::bulk_slice(b"role"), Reply::bulk_slice(b"master")),
        (Reply::bulk_slice(b"modules"), Reply::Array(vec![])),
    ]))
}

fn reset(ctx: &mut Ctx, _: &[Bytes]) -> CmdResult {
    ctx.client.multi = None;
    ctx.client.multi_abort = false;
    ctx.client.info.multi.store(false, Ordering::Relaxed);
    super::tx::unwatch_all(ctx.srv, ctx.client);
    let info = ctx.client.info.clone();
    ctx.srv.pubsub.unsubscribe_all(&info, &mut ctx.client.subs);
    ctx.srv.pubsub.remove_monitor(&info);
    ctx.srv.tracking.disable(info.id);
    info.tracking_mem.store(0, Ordering::Relaxed);
    ctx.client.tracking_caching = false;
    // READONLY and ASKING end with the connection's state, as Redis clears them.
    ctx.client.cluster = Default::default();
    ctx.client.select(0);
    ctx.client.resp = Resp::V2;
    ctx.client.info.resp.store(2, Ordering::Relaxed);
    ctx.client.reply_mode = crate::client::ReplyMode::On;
    *ctx.client.info.name.lock() = None;
    ctx.client.info.no_evict.store(false, Ordering::Relaxed);
    ctx.client.set_user(ctx.srv.acl.default_user());
    ctx.client.authenticated = crate::commands::acl::starts_authenticated(ctx.srv);
    Ok(Reply::Status("RESET"))
}

fn valid_client_name(n: &[u8]) -> Result<(), Reply> {
    if n.iter().any(|&c| !(b'!'..=b'~').contains(&c)) {
        return Err(Reply::error(
            "ERR Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    Ok(())
}

fn client(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    let argc = a.len();
    let arity_err = || wrong_arity(&format!("client|{sub}"));
    match sub.as_str() {
        "id" if argc == 2 => Ok(Reply::Int(ctx.client.id as i64)),
        "getname" if argc == 2 => match ctx.client.info.name.lock().clone() {
            Some(n) => Ok(Reply::Bulk(n)),
            None => Ok(Reply::Null),
        },
        "setname" if argc == 3 => {
            valid_client_name(&a[2])?;
            *ctx.client.info.name.lock() = if a[2].is_empty() {
                None
            } else {
                // A copy: a slice would keep the whole read buffer it came in alive.
                Some(Bytes::copy_from_slice(&a[2]))
            };
            Ok(Reply::Ok)
        }
        "info" if argc == 2 => Ok(Reply::Verbatim(
            "txt",
            Bytes::from(ctx.client.info.describe() + "\n"),
        )),
        "list" => {
            // A killed client is gone, as Redis frees one at once; its task may still be
            // winding down (a TLS session's close, a write in flight).
            let clients: Vec<_> = ctx
                .srv
                .clients
                .lock()
                .values()
                .filter(|c| !c.killed.load(std::sync::atomic::Ordering::Relaxed))
                .cloned()
                .collect();
            let mut ids: Option<Vec<u64>> = None;
            let mut type_filter: Option<String> = None;
            let mut i = 2;
            while i < argc {
                if eq(&a[i], "type") && i + 1 < argc {
                    let t = String::from_utf8_lossy(&a[i + 1]).to_ascii_lowercase();
                    if !matches!(
                        t.as_str(),
                        "normal" | "master" | "replica" | "slave" | "pubsub"
                    ) {
                        return Err(Reply::error(format!("ERR Unknown client type '{t}'")));
                    }
                    let t = if t == "slave" {
                        "replica".to_string()
                    } else {
                        t
                    };
                    type_filter = Some(t);
                    i += 2;
                } else if eq(&a[i], "id") && i + 1 < argc {
                    let mut v = Vec::new();
                    for x in &a[i + 1..] {
                        match int(x) {
                            Ok(n) if n > 0 => v.push(n as u64),
                            _ => return Err(Reply::error("ERR Invalid client ID")),
                        }
                    }
                    ids = Some(v);
                    i = argc;
                } else {
                    return Err(Reply::error(SYNTAX));
                }
            }
            let mut s = String::new();
            for c in clients {
                if ids.as_ref().is_some_and(|v| !v.contains(&c.id)) {
                    continue;
                }
                if type_filter.as_ref().is_some_and(|t| c.client_type() != t) {
                    continue;
                }
                s.push_str(&c.describe());
                s.push('\n');
            }
            Ok(Reply::Verbatim("txt", Bytes::from(s)))
        }
        "kill" if argc >= 3 => Ok(client_kill(ctx, a)),
        "no-evict" if argc == 3 => {
            // Client eviction sees the change at the client's next record, made as this
            // command ends.
            if eq(&a[2], "on") {
                ctx.client.info.no_evict.store(true, Ordering::Relaxed);
            } else if eq(&a[2], "off") {
                ctx.client.info.no_evict.store(false, Ordering::Relaxed);
            } else {
                return Err(Reply::error(SYNTAX));
            }
            Ok(Reply::Ok)
        }
        "reply" if argc == 3 => {
            use crate::client::ReplyMode;
            if eq(&a[2], "on") {
                ctx.client.reply_mode = ReplyMode::On;
                Ok(Reply::Ok)
            } else if eq(&a[2], "off") {
                ctx.client.reply_mode = ReplyMode::Off;
                Ok(Reply::NoReply)
            } else if eq(&a[2], "skip") {
                ctx.client.reply_mode = ReplyMode::SkipNext;
                Ok(Reply::NoReply)
            } else {
                Err(Reply::error(SYNTAX))
            }
        }
        "unblock" if argc == 3 || argc == 4 => {
            let Ok(id) = int(&a[2]) else {
                return Err(Reply::error(NOT_INT));
            };
            let with_error = if argc == 4 {
                if eq(&a[3], "error") {
                    true
                } else if eq(&a[3], "timeout") {
                    false
                } else {
                    return Err(Reply::error(
                        "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR",
                    ));
                }
            } else {
                false
            };
            let reply = if with_error {
                Reply::error("UNBLOCKED client unblocked via CLIENT UNBLOCK")
            } else {
                Reply::NullArray
            };
            Ok(Reply::Int(
                ctx.srv
                    .blocking
                    .unblock_client(&ctx.srv.keyspace, id as u64, reply) as i64,
            ))
        }
        "tracking" | "caching" | "getredir" | "trackinginfo" => Ok(client_subcommand(ctx, &sub, a)),
        "pause" => Ok(crate::commands::pause::client_pause(ctx, a)),
        "unpause" => Ok(crate::commands::pause::client_unpause(ctx, a)),
        "help" => Ok(Reply::Array(
            [
                "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "GETNAME",
                "ID",
                "INFO",
                "KILL <ip:port>|<option> <value> [...]",
                "LIST [TYPE <type>] [ID <id> [...]]",
                "NO-EVICT (ON|OFF)",
                "UNPAUSE",
                "    Stop the current client pause, resuming traffic.",
                "PAUSE <timeout> [WRITE|ALL]",
                "    Suspend all, or just write, clients for <timeout> milliseconds.",
                "REPLY (ON|OFF|SKIP)",
                "SETNAME <name>",
                "UNBLOCK <clientid> [TIMEOUT|ERROR]",
                "HELP",
            ]
            .iter()
            .map(|s| Reply::StatusOwned(s.to_string()))
            .collect(),
        )),
        "id" | "getname" | "setname" | "info" | "no-evict" | "reply" | "unblock" | "kill" => {
            Err(arity_err())
        }
        _ => Err(Reply::error(format!(
            "ERR unknown subcommand '{}'. Try CLIENT HELP.",
            String::from_utf8_lossy(&a[1])
        ))),
    }
}

fn client_kill(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    let clients: Vec<_> = ctx.srv.clients.lock().values().cloned().collect();
    if a.len() == 3 {
        let addr = String::from_utf8_lossy(&a[2]).into_owned();
        return match clients
            .iter()
            .find(|c| c.addr == addr && !c.killed.load(std::sync::atomic::Ordering::Relaxed))
        {
            Some(c) => {
                kill_client(ctx, c);
                Reply::Ok
            }
            None => Reply::error("ERR No such client"),
        };
    }
    if !a.len().is_multiple_of(2) {
        return Reply::error(SYNTAX);
    }
    let mut skipme = true;
    let mut filters: Vec<(String, String)> = Vec::new();
    for pair in a[2..].chunks(2) {
        let k = String::from_utf8_lossy(&pair[0]).to_ascii_lowercase();
        let v = String::from_utf8_lossy(&pair[1]).into_owned();
        match k.as_str() {
            "id" => {
                if !v.parse::<i64>().is_ok_and(|id| id > 0) {
                    return Reply::error("ERR client-id should be greater than 0");
                }
            }
            "type" => {
                let t = v.to_ascii_lowercase();
                if !matches!(
                    t.as_str(),
                    "normal" | "master" | "replica" | "slave" | "pubsub"
                ) {
                    return Reply::error(format!("ERR Unknown client type '{v}'"));
                }
            }
            "user" => {
                if !ctx.srv.acl.names().iter().any(|n| n == v.as_bytes()) {
                    return Reply::error(format!("ERR No such user '{v}'"));
                }
            }
            "skipme" => {
                skipme = match v.to_ascii_lowercase().as_str() {
                    "yes" => true,
                    "no" => false,
                    _ => return Reply::error(SYNTAX),
                };
                continue;
            }
            "addr" | "laddr" | "maxage" => {}
            _ => return Reply::error(SYNTAX),
        }
        filters.push((k, v));
    }
    let now = crate::clock::unix_ms();
    let mut killed = 0;
    for c in clients {
        if skipme && c.id == ctx.client.id {
            continue;
        }
        // A client killed before whose connection has not ended yet is gone already, as Redis
        // frees it at once (and CLIENT LIST no longer shows it): it is not killed twice.
        if c.killed.load(std::sync::atomic::Ordering::Relaxed) {
            continue;
        }
        let hit = filters.iter().all(|(k, v)| match k.as_str() {
            "id" => v.parse::<u64>().ok() == Some(c.id),
            "addr" => &c.addr == v,
            "laddr" => &c.laddr == v,
            "user" => c.user_name() == *v,
            "type" => {
                let want = v.to_ascii_lowercase();
                let want = if want == "slave" {
                    "replica"
                } else {
                    want.as_str()
                };
                c.client_type() == want
            }
            "maxage" => v
                .parse::<i64>()
                .is_ok_and(|m| (now - c.created_ms) / 1000 >= m),
            _ => false,
        });
        if hit {
            kill_client(ctx, &c);
            killed += 1;
        }
    }
    Reply::Int(killed)
}

/// Close client `c`: another client at once; the calling one after this reply, so it still
/// gets its answer (as Redis closes itself after replying).
fn kill_client(ctx: &mut Ctx, c: &crate::client::ClientInfo) {
    if c.id == ctx.client.id {
        ctx.close_after_reply = true;
    } else {
        c.kill_and_close();
        // A replica leaves the master's list at once (INFO connected_slaves, WAIT), as Redis
        // frees it synchronously; its connection ends on its own task.
        if c.repl_role.load(std::sync::atomic::Ordering::Relaxed) == crate::client::ROLE_REPLICA {
            crate::persistence::forget_replica(ctx.srv, c.id);
        }
    }
}

/// CLIENT TRACKING / CACHING / GETREDIR / TRACKINGINFO (`sub` is lowercase).
pub(crate) fn client_subcommand(ctx: &mut Ctx, sub: &str, a: &[Bytes]) -> Reply {
    let tr = &ctx.srv.tracking;
    let id = ctx.client.id;
    let current = tr.options(id);
    match (sub, a.len()) {
        ("tracking", n) if n >= 3 => {
            let mut opts = crate::tracking::Options::default();
            let mut j = 3;
            while j < a.len() {
                let more = j + 1 < a.len();
                if eq(&a[j], "redirect") && more {
                    j += 1;
                    if opts.redirect != 0 {
                        return Reply::error(
                            "ERR A client can only redirect to a single other client",
                        );
                    }
                    let Some(r) = crate::util::numtext::parse_i64(&a[j]) else {
                        return Reply::error(NOT_INT);
                    };
                    if r <= 0 || !ctx.srv.clients.lock().contains_key(&(r as u64)) {
                        return Reply::error(
                            "ERR The client ID you want redirect to does not exist",
                        );
                    }
                    opts.redirect = r as u64;
                } else if eq(&a[j], "bcast") {
                    opts.bcast = true;
                } else if eq(&a[j], "optin") {
                    opts.optin = true;
                } else if eq(&a[j], "optout") {
                    opts.optout = true;
                } else if eq(&a[j], "noloop") {
                    opts.noloop = true;
                } else if eq(&a[j], "prefix") && more {
                    j += 1;
                    opts.prefixes.push(a[j].clone());
                } else {
                    return Reply::error(SYNTAX);
                }
                j += 1;
            }
            if eq(&a[2], "on") {
                if !opts.bcast && !opts.prefixes.is_empty() {
                    return Reply::error("ERR PREFIX option requires BCAST mode to be enabled");
                }
                if let Some(cur) = &current {
                    if cur.bcast != opts.bcast {
                        return Reply::error("ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.");
                    }
                }
                if opts.bcast && (opts.optin || opts.optout) {
                    return Reply::error("ERR OPTIN and OPTOUT are not compatible with BCAST");
                }
                if opts.optin && opts.optout {
                    return Reply::error("ERR You can't specify both OPTIN mode and OPTOUT mode");
                }
                if let Some(cur) = &current {
                    if (opts.optin && cur.optout) || (opts.optout && cur.optin) {
                        return Reply::error("ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.");
                    }
                }
                if opts.bcast {
                    if let Some(e) = tr.prefix_collision(id, &opts.prefixes) {
                        return Reply::error(e);
                    }
                }
                let prefixes = tr.enable(id, opts);
                ctx.client
                    .info
                    .tracking_mem
                    .store(prefixes, Ordering::Relaxed);
            } else if eq(&a[2], "off") {
                tr.disable(id);
                ctx.client.info.tracking_mem.store(0, Ordering::Relaxed);
                ctx.client.tracking_caching = false;
            } else {
                return Reply::error(SYNTAX);
            }
            Reply::Ok
        }
        ("caching", 3) => {
            let Some(cur) = current else {
                return Reply::error("ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled");
            };
            if eq(&a[2], "yes") {
                if !cur.optin {
                    return Reply::error("ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.");
                }
            } else if eq(&a[2], "no") {
                if !cur.optout {
                    return Reply::error("ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.");
                }
            } else {
                return Reply::error(SYNTAX);
            }
            ctx.client.tracking_caching = true;
            Reply::Ok
        }
        ("getredir", 2) => Reply::Int(current.map_or(-1, |o| o.redirect as i64)),
        ("trackinginfo", 2) => {
            let caching = ctx.client.tracking_caching;
            let mut flags = vec![if current.is_some() { "on" } else { "off" }];
            if let Some(o) = &current {
                if o.bcast {
                    flags.push("bcast");
                }
                if o.optin {
                    flags.push("optin");
                    if caching {
                        flags.push("caching-yes");
                    }
                }
                if o.optout {
                    flags.push("optout");
                    if caching {
                        flags.push("caching-no");
                    }
                }
                if o.noloop {
                    flags.push("noloop");
                }
                if o.broken {
                    flags.push("broken_redirect");
                }
            }
            let bulk = |s: &str| Reply::Bulk(Bytes::copy_from_slice(s.as_bytes()));
            Reply::Map(vec![
                (
                    bulk("flags"),
                    Reply::Set(flags.into_iter().map(bulk).collect()),
                ),
                (
                    bulk("redirect"),
                    Reply::Int(current.as_ref().map_or(-1, |o| o.redirect as i64)),
                ),
                (
                    bulk("prefixes"),
                    Reply::Array(
                        current
                            .map(|o| o.prefixes.into_iter().map(Reply::Bulk).collect())
                            .unwrap_or_default(),
                    ),
                ),
            ])
        }
        _ => Reply::error(format!(
            "ERR wrong number of arguments for 'client|{sub}' command"
        )),
    }
}
