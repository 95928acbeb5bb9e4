//! Connection and server commands: PING ECHO HELLO QUIT SELECT AUTH RESET CLIENT COMMAND
//! INFO CONFIG DBSIZE FLUSHDB FLUSHALL TIME SHUTDOWN SWAPDB FUNCTION (the persistence commands
//! are in `persist.rs`).

use super::args::{eq, int, NOT_INT, SYNTAX};
use super::flags::*;
use super::{table, wrong_arity, Ctx, Keys, Spec};
use crate::protocol::{Reply, Resp};
use bytes::Bytes;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;

/// The Redis version Podium reports (clients feature-detect on it).
pub const REDIS_VERSION: &str = "7.0.15";

pub static COMMANDS: &[Spec] = &[
    Spec::new("ping", -1, FAST | STALE, Keys::None, ping, "connection"),
    Spec::new("echo", 2, FAST, Keys::None, echo, "connection"),
    Spec::new(
        "hello",
        -1,
        NO_AUTH | FAST | STALE | NOSCRIPT | LOADING | ALLOW_BUSY,
        Keys::None,
        hello,
        "connection",
    ),
    Spec::new(
        "quit",
        -1,
        NO_AUTH | FAST | STALE | NOSCRIPT | LOADING | ALLOW_BUSY,
        Keys::None,
        quit,
        "connection",
    ),
    Spec::new(
        "select",
        2,
        FAST | LOADING | STALE,
        Keys::None,
        select,
        "connection",
    ),
    Spec::new(
        "auth",
        -2,
        NO_AUTH | FAST | STALE | NOSCRIPT | LOADING | ALLOW_BUSY,
        Keys::None,
        auth,
        "connection",
    ),
    Spec::new(
        "reset",
        1,
        NO_AUTH | FAST | STALE | NOSCRIPT | LOADING | ALLOW_BUSY,
        Keys::None,
        reset,
        "connection",
    ),
    Spec::new(
        "client",
        -2,
        ADMIN | NOSCRIPT | LOADING | STALE,
        Keys::None,
        client,
        "connection",
    ),
    Spec::new(
        "command",
        -1,
        LOADING | STALE,
        Keys::None,
        command,
        "server",
    ),
    Spec::new("info", -1, LOADING | STALE, Keys::None, info, "server"),
    Spec::new(
        "config",
        -2,
        ADMIN | NOSCRIPT | LOADING | STALE,
        Keys::None,
        config,
        "server",
    ),
    Spec::new("dbsize", 1, READONLY | FAST, Keys::Db, dbsize, "server"),
    Spec::new("flushdb", -1, WRITE, Keys::Db, flushdb, "server"),
    Spec::new("flushall", -1, WRITE, Keys::All, flushall, "server"),
    Spec::new("swapdb", 3, WRITE | FAST, Keys::All, swapdb, "server"),
    Spec::new(
        "time",
        1,
        FAST | LOADING | STALE,
        Keys::None,
        time,
        "server",
    ),
    Spec::new(
        "shutdown",
        -1,
        ADMIN | NOSCRIPT | LOADING | STALE | NO_MULTI | ALLOW_BUSY,
        Keys::None,
        shutdown,
        "server",
    ),
    Spec::new(
        "readonly",
        1,
        FAST | LOADING | STALE,
        Keys::None,
        ok,
        "cluster",
    ),
    Spec::new(
        "readwrite",
        1,
        FAST | LOADING | STALE,
        Keys::None,
        ok,
        "cluster",
    ),
    Spec::new(
        "memory",
        -2,
        READONLY,
        Keys::Custom(memory_keys),
        memory,
        "server",
    ),
];

fn ok(_: &mut Ctx, _: &[Bytes]) -> Reply {
    Reply::Ok
}

fn ping(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    // A RESP2 subscriber gets its pong as a two-element array (it can only read those).
    if a.len() <= 2 && ctx.client.resp == Resp::V2 && ctx.client.subs.total() > 0 {
        let payload = a.get(1).cloned().unwrap_or_default();
        return Reply::Array(vec![Reply::bulk_slice(b"pong"), Reply::Bulk(payload)]);
    }
    match a.len() {
        1 => Reply::Status("PONG"),
        2 => Reply::Bulk(a[1].clone()),
        _ => {
            let _ = ctx;
            wrong_arity("ping")
        }
    }
}

fn echo(_: &mut Ctx, a: &[Bytes]) -> Reply {
    Reply::Bulk(a[1].clone())
}

fn quit(ctx: &mut Ctx, _: &[Bytes]) -> Reply {
    ctx.close_after_reply = true;
    Reply::Ok
}

fn select(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    let Ok(n) = int(&a[1]) else {
        return Reply::error(NOT_INT);
    };
    if n < 0 || n as usize >= ctx.srv.keyspace.num_dbs() {
        return Reply::error("ERR DB index is out of range");
    }
    ctx.client.select(n as usize);
    Reply::Ok
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
    if user.is_none() && crate::acl::default_user_nopass(ctx.srv) {
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
            crate::acl::log_auth_failure(ctx.srv, ctx.client, command, name);
            Err(Reply::error(
                "WRONGPASS invalid username-password pair or user is disabled.",
            ))
        }
    }
}

fn auth(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    let r = match a.len() {
        2 => check_password(ctx, &a[0], None, &a[1]),
        3 => check_password(ctx, &a[0], Some(&a[1]), &a[2]),
        _ => return Reply::error(SYNTAX),
    };
    match r {
        Ok(()) => Reply::Ok,
        Err(e) => e,
    }
}

fn hello(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    let mut resp = None;
    let mut i = 1;
    if a.len() > 1 {
        match int(&a[1]) {
            Ok(v) if v == 2 || v == 3 => resp = Some(v),
            Ok(_) => return Reply::error("NOPROTO unsupported protocol version"),
            Err(_) => {
                return Reply::error("ERR Protocol version is not an integer or out of range")
            }
        }
        i = 2;
    }
    let mut setname = None;
    while i < a.len() {
        if eq(&a[i], "auth") && i + 2 < a.len() {
            if let Err(e) = check_password(ctx, &a[0], Some(&a[i + 1]), &a[i + 2]) {
                return e;
            }
            i += 3;
        } else if eq(&a[i], "setname") && i + 1 < a.len() {
            if let Err(e) = valid_client_name(&a[i + 1]) {
                return e;
            }
            setname = Some(a[i + 1].clone());
            i += 2;
        } else {
            return Reply::error(format!(
                "ERR Syntax error in HELLO option '{}'",
                String::from_utf8_lossy(&a[i])
            ));
        }
    }
    if !ctx.client.authenticated {
        return Reply::error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time");
    }
    if let Some(n) = setname {
        *ctx.client.info.name.lock() = if n.is_empty() { None } else { Some(n) };
    }
    if let Some(v) = resp {
        ctx.client.resp = if v == 3 { Resp::V3 } else { Resp::V2 };
        ctx.client.info.resp.store(v as u8, Ordering::Relaxed);
    }
    let proto = if ctx.client.resp == Resp::V3 { 3 } else { 2 };
    Reply::Map(vec![
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
    ])
}

fn reset(ctx: &mut Ctx, _: &[Bytes]) -> Reply {
    ctx.client.multi = None;
    ctx.client.multi_abort = false;
    ctx.client.info.multi.store(false, Ordering::Relaxed);
    super::tx::unwatch_all(ctx.srv, ctx.client);
    let info = ctx.client.info.clone();
    ctx.srv.pubsub.unsubscribe_all(&info, &mut ctx.client.subs);
    ctx.srv.pubsub.remove_monitor(&info);
    ctx.srv.tracking.disable(info.id);
    ctx.client.tracking_caching = false;
    ctx.client.select(0);
    ctx.client.resp = Resp::V2;
    ctx.client.info.resp.store(2, Ordering::Relaxed);
    ctx.client.reply_mode = crate::connection::ReplyMode::On;
    *ctx.client.info.name.lock() = None;
    ctx.client.info.no_evict.store(false, Ordering::Relaxed);
    ctx.client.set_user(ctx.srv.acl.default_user());
    ctx.client.authenticated = crate::acl::starts_authenticated(ctx.srv);
    Reply::Status("RESET")
}

fn valid_client_name(n: &[u8]) -> Result<(), Reply> {
    if n.iter().any(|&c| !(b'!'..=b'~').contains(&c)) {
        return Err(Reply::error(
            "ERR Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    Ok(())
}

fn client(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    let argc = a.len();
    let arity_err = || wrong_arity(&format!("client|{sub}"));
    match sub.as_str() {
        "id" if argc == 2 => Reply::Int(ctx.client.id as i64),
        "getname" if argc == 2 => match ctx.client.info.name.lock().clone() {
            Some(n) => Reply::Bulk(n),
            None => Reply::Null,
        },
        "setname" if argc == 3 => {
            if let Err(e) = valid_client_name(&a[2]) {
                return e;
            }
            *ctx.client.info.name.lock() = if a[2].is_empty() {
                None
            } else {
                Some(a[2].clone())
            };
            Reply::Ok
        }
        "setinfo" if argc == 4 => {
            if eq(&a[2], "lib-name") || eq(&a[2], "lib-ver") {
                *ctx.client.info.lib_name.lock() =
                    Some(String::from_utf8_lossy(&a[3]).into_owned());
                Reply::Ok
            } else {
                Reply::error(format!(
                    "ERR Unrecognized option '{}'",
                    String::from_utf8_lossy(&a[2])
                ))
            }
        }
        "info" if argc == 2 => {
            Reply::Verbatim("txt", Bytes::from(ctx.client.info.describe() + "\n"))
        }
        "list" => {
            let clients: Vec<_> = ctx.srv.clients.lock().values().cloned().collect();
            let mut ids: Option<Vec<u64>> = None;
            let mut i = 2;
            while i < argc {
                if eq(&a[i], "type") && i + 1 < argc {
                    let t = String::from_utf8_lossy(&a[i + 1]).to_ascii_lowercase();
                    if !matches!(
                        t.as_str(),
                        "normal" | "master" | "replica" | "slave" | "pubsub"
                    ) {
                        return Reply::error(format!("ERR Unknown client type '{t}'"));
                    }
                    if t != "normal" {
                        ids = Some(Vec::new());
                    }
                    i += 2;
                } else if eq(&a[i], "id") && i + 1 < argc {
                    let mut v = Vec::new();
                    for x in &a[i + 1..] {
                        match int(x) {
                            Ok(n) if n > 0 => v.push(n as u64),
                            _ => return Reply::error("ERR Invalid client ID"),
                        }
                    }
                    ids = Some(v);
                    i = argc;
                } else {
                    return Reply::error(SYNTAX);
                }
            }
            let mut s = String::new();
            for c in clients {
                if ids.as_ref().is_some_and(|v| !v.contains(&c.id)) {
                    continue;
                }
                s.push_str(&c.describe());
                s.push('\n');
            }
            Reply::Verbatim("txt", Bytes::from(s))
        }
        "kill" => client_kill(ctx, a),
        "no-evict" if argc == 3 => {
            if eq(&a[2], "on") {
                ctx.client.info.no_evict.store(true, Ordering::Relaxed);
            } else if eq(&a[2], "off") {
                ctx.client.info.no_evict.store(false, Ordering::Relaxed);
            } else {
                return Reply::error(SYNTAX);
            }
            Reply::Ok
        }
        "no-touch" if argc == 3 => Reply::Ok,
        "reply" if argc == 3 => {
            use crate::connection::ReplyMode;
            if eq(&a[2], "on") {
                ctx.client.reply_mode = ReplyMode::On;
                Reply::Ok
            } else if eq(&a[2], "off") {
                ctx.client.reply_mode = ReplyMode::Off;
                Reply::NoReply
            } else if eq(&a[2], "skip") {
                ctx.client.reply_mode = ReplyMode::SkipNext;
                Reply::NoReply
            } else {
                Reply::error(SYNTAX)
            }
        }
        "unblock" if argc == 3 || argc == 4 => {
            let Ok(id) = int(&a[2]) else {
                return Reply::error(NOT_INT);
            };
            let with_error = if argc == 4 {
                if eq(&a[3], "error") {
                    true
                } else if eq(&a[3], "timeout") {
                    false
                } else {
                    return Reply::error("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR");
                }
            } else {
                false
            };
            let reply = if with_error {
                Reply::error("UNBLOCKED client unblocked via CLIENT UNBLOCK")
            } else {
                Reply::NullArray
            };
            Reply::Int(
                ctx.srv
                    .blocking
                    .unblock_client(&ctx.srv.keyspace, id as u64, reply) as i64,
            )
        }
        "tracking" | "caching" | "getredir" | "trackinginfo" => {
            crate::tracking::client_subcommand(ctx, &sub, a)
        }
        "pause" | "unpause" => Reply::error(format!(
            "ERR CLIENT {} is not available in Podium",
            sub.to_ascii_uppercase()
        )),
        "help" => Reply::Array(
            [
                "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "GETNAME",
                "ID",
                "INFO",
                "KILL <ip:port>|<option> <value> [...]",
                "LIST [TYPE <type>] [ID <id> [...]]",
                "NO-EVICT (ON|OFF)",
                "REPLY (ON|OFF|SKIP)",
                "SETNAME <name>",
                "SETINFO <option> <value>",
                "UNBLOCK <clientid> [TIMEOUT|ERROR]",
                "HELP",
            ]
            .iter()
            .map(|s| Reply::StatusOwned(s.to_string()))
            .collect(),
        ),
        "id" | "getname" | "setname" | "info" | "no-evict" | "reply" | "unblock" | "setinfo"
        | "no-touch" => arity_err(),
        _ => Reply::error(format!(
            "ERR unknown subcommand '{}'. Try CLIENT HELP.",
            String::from_utf8_lossy(&a[1])
        )),
    }
}

fn client_kill(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    let clients: Vec<_> = ctx.srv.clients.lock().values().cloned().collect();
    if a.len() == 3 {
        let addr = String::from_utf8_lossy(&a[2]).into_owned();
        return match clients.iter().find(|c| c.addr == addr) {
            Some(c) => {
                c.kill();
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
                if v.parse::<u64>().is_err() {
                    return Reply::error("ERR client-id should be greater than 0");
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
            "user" => {
                if ctx.srv.acl.get(v.as_bytes()).is_none() {
                    return Reply::error(format!("ERR No such user '{v}'"));
                }
            }
            "addr" | "laddr" | "type" | "maxage" => {}
            _ => return Reply::error(SYNTAX),
        }
        filters.push((k, v));
    }
    let now = crate::server::unix_ms();
    let mut killed = 0;
    for c in clients {
        if skipme && c.id == ctx.client.id {
            continue;
        }
        let hit = filters.iter().all(|(k, v)| match k.as_str() {
            "id" => v.parse::<u64>().ok() == Some(c.id),
            "addr" => &c.addr == v,
            "laddr" => &c.laddr == v,
            "user" => c.user_name() == *v,
            "type" => v.eq_ignore_ascii_case("normal"),
            "maxage" => v
                .parse::<i64>()
                .is_ok_and(|m| (now - c.created_ms) / 1000 >= m),
            _ => false,
        });
        if hit {
            c.kill();
            killed += 1;
        }
    }
    Reply::Int(killed)
}

fn spec_flags(spec: &Spec) -> Vec<Reply> {
    let names = [
        (WRITE, "write"),
        (READONLY, "readonly"),
        (DENYOOM, "denyoom"),
        (ADMIN, "admin"),
        (NOSCRIPT, "noscript"),
        (BLOCKING, "blocking"),
        (LOADING, "loading"),
        (STALE, "stale"),
        (FAST, "fast"),
        (NO_AUTH, "no_auth"),
        (NO_MULTI, "no_multi"),
        (ALLOW_BUSY, "allow_busy"),
        (MOVABLE_KEYS, "movablekeys"),
    ];
    names
        .iter()
        .filter(|(f, _)| spec.flags & f != 0)
        .map(|(_, n)| Reply::Status(n))
        .collect()
}

fn command_info(spec: &Spec) -> Reply {
    let (first, last, step) = match spec.keys {
        Keys::Range(f, l, s) => (f, l, s),
        Keys::DbNamed(_) => (1, 1, 1),
        _ => (0, 0, 0),
    };
    let mut flags = spec_flags(spec);
    if matches!(spec.keys, Keys::Custom(_) | Keys::DbNamed(_)) {
        flags.push(Reply::Status("movablekeys"));
    }
    Reply::Array(vec![
        Reply::bulk_slice(spec.name.as_bytes()),
        Reply::Int(spec.arity as i64),
        Reply::Set(flags),
        Reply::Int(first as i64),
        Reply::Int(last as i64),
        Reply::Int(step as i64),
        Reply::Set(
            crate::acl::view::categories_of(spec.name)
                .into_iter()
                .map(|c| Reply::StatusOwned(format!("@{c}")))
                .collect(),
        ),
        Reply::Set(vec![]),
        Reply::Array(vec![]),
        Reply::Array(vec![]),
    ])
}

fn command(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    let t = table();
    if a.len() == 1 {
        let mut names: Vec<_> = t.keys().collect();
        names.sort();
        return Reply::Array(names.into_iter().map(|n| command_info(t[n])).collect());
    }
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    match sub.as_str() {
        "count" if a.len() == 2 => Reply::Int(t.len() as i64),
        "list" => {
            let mut names: Vec<_> = t.keys().copied().collect();
            if a.len() == 5 && eq(&a[2], "filterby") && eq(&a[3], "pattern") {
                names.retain(|n| crate::util::numtext::glob_match(&a[4], n.as_bytes(), true));
            } else if a.len() != 2 {
                return Reply::error(SYNTAX);
            }
            names.sort();
            Reply::Array(
                names
                    .into_iter()
                    .map(|n| Reply::bulk_slice(n.as_bytes()))
                    .collect(),
            )
        }
        "info" => {
            if a.len() == 2 {
                let mut names: Vec<_> = t.keys().collect();
                names.sort();
                return Reply::Array(names.into_iter().map(|n| command_info(t[n])).collect());
            }
            Reply::Array(
                a[2..]
                    .iter()
                    .map(|n| match super::lookup(n) {
                        Some(c) => command_info(c),
                        None => Reply::NullArray,
                    })
                    .collect(),
            )
        }
        "docs" => {
            let names: Vec<&'static str> = if a.len() == 2 {
                let mut v: Vec<_> = t.keys().copied().collect();
                v.sort();
                v
            } else {
                a[2..]
                    .iter()
                    .filter_map(|n| super::lookup(n).map(|c| c.name))
                    .collect()
            };
            Reply::Map(
                names
                    .into_iter()
                    .map(|n| {
                        let c = t[n];
                        (
                            Reply::bulk_slice(n.as_bytes()),
                            Reply::Map(vec![
                                (
                                    Reply::bulk_slice(b"summary"),
                                    Reply::bulk_slice(
                                        format!("The {} command", n.to_uppercase()).as_bytes(),
                                    ),
                                ),
                                (Reply::bulk_slice(b"since"), Reply::bulk_slice(b"1.0.0")),
                                (
                                    Reply::bulk_slice(b"group"),
                                    Reply::bulk_slice(c.group.as_bytes()),
                                ),
                            ]),
                        )
                    })
                    .collect(),
            )
        }
        "getkeys" if a.len() >= 3 => {
            let Some(c) = super::lookup(&a[2]) else {
                return Reply::error("ERR Invalid command specified");
            };
            if !super::arity_ok(c.arity, a.len() - 2) {
                return Reply::error("ERR Invalid number of arguments specified for command");
            }
            let pos = c.key_positions(&a[2..]);
            if pos.is_empty() {
                return Reply::error("ERR The command has no key arguments");
            }
            Reply::Array(
                pos.into_iter()
                    .map(|i| Reply::Bulk(a[2 + i].clone()))
                    .collect(),
            )
        }
        "help" => Reply::Array(
            [
                "COMMAND <subcommand>",
                "COUNT",
                "DOCS [<command-name> ...]",
                "GETKEYS <full-command>",
                "INFO [<command-name> ...]",
                "LIST [FILTERBY (MODULE|ACLCAT|PATTERN) <filter>]",
                "HELP",
            ]
            .iter()
            .map(|s| Reply::StatusOwned(s.to_string()))
            .collect(),
        ),
        "count" | "getkeys" => wrong_arity(&format!("command|{sub}")),
        _ => {
            let _ = ctx;
            Reply::error(format!(
                "ERR unknown subcommand '{}'. Try COMMAND HELP.",
                String::from_utf8_lossy(&a[1])
            ))
        }
    }
}

fn cpu_times() -> (f64, f64) {
    // SAFETY: getrusage only writes into the zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage struct.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (t(ru.ru_stime), t(ru.ru_utime))
}

/// The INFO text for the requested sections.
pub fn info_text(srv: &crate::server::Server, sections: &[String]) -> String {
    let all_sections = [
        "server",
        "clients",
        "memory",
        "persistence",
        "stats",
        "replication",
        "cpu",
        "modules",
        "commandstats",
        "errorstats",
        "latencystats",
        "cluster",
        "keyspace",
    ];
    let default = [
        "server",
        "clients",
        "memory",
        "persistence",
        "stats",
        "replication",
        "cpu",
        "modules",
        "errorstats",
        "cluster",
        "keyspace",
    ];
    let mut want: Vec<&str> = Vec::new();
    if sections.is_empty() {
        want.extend(default);
    }
    for s in sections {
        match s.as_str() {
            "all" | "everything" => want.extend(all_sections),
            "default" => want.extend(default),
            other => {
                if let Some(x) = all_sections.iter().find(|x| **x == other) {
                    want.push(x);
                }
            }
        }
    }
    let mut out = String::new();
    let mut emitted: Vec<&str> = Vec::new();
    for sec in all_sections {
        if !want.contains(&sec) || emitted.contains(&sec) {
            continue;
        }
        emitted.push(sec);
        if !out.is_empty() {
            out.push_str("\r\n");
        }
        let mut title = sec.to_string();
        title[..1].make_ascii_uppercase();
        let _ = write!(out, "# {title}\r\n");
        let mut kv = |k: &str, v: String| {
            let _ = write!(out, "{k}:{v}\r\n");
        };
        let st = &srv.stats;
        match sec {
            "server" => {
                let up = srv.started.elapsed().as_secs();
                kv("redis_version", REDIS_VERSION.into());
                kv("redis_git_sha1", "00000000".into());
                kv("redis_git_dirty", "0".into());
                kv("redis_build_id", "0".into());
                kv("redis_mode", "standalone".into());
                kv("podium_version", env!("CARGO_PKG_VERSION").into());
                kv("os", std::env::consts::OS.into());
                kv("arch_bits", "64".into());
                kv("multiplexing_api", "epoll".into());
                kv("process_id", std::process::id().to_string());
                kv("run_id", srv.run_id.clone());
                kv("tcp_port", srv.port.load(Ordering::Relaxed).to_string());
                kv(
                    "server_time_usec",
                    (crate::server::unix_ms() * 1000).to_string(),
                );
                kv("uptime_in_seconds", up.to_string());
                kv("uptime_in_days", (up / 86400).to_string());
                kv("hz", srv.config.hot.hz.load(Ordering::Relaxed).to_string());
                kv(
                    "configured_hz",
                    srv.config.hot.hz.load(Ordering::Relaxed).to_string(),
                );
                kv(
                    "executable",
                    std::env::current_exe()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default(),
                );
                kv(
                    "config_file",
                    srv.config
                        .config_file
                        .as_ref()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default(),
                );
            }
            "clients" => {
                let clients = srv.clients.lock();
                let blocked = clients
                    .values()
                    .filter(|c| c.blocked.load(Ordering::Relaxed))
                    .count();
                kv("connected_clients", clients.len().to_string());
                kv("cluster_connections", "0".into());
                kv("maxclients", srv.config.get_i64("maxclients").to_string());
                kv("client_recent_max_input_buffer", "0".into());
                kv("client_recent_max_output_buffer", "0".into());
                kv("blocked_clients", blocked.to_string());
                kv("tracking_clients", srv.tracking.client_count().to_string());
                kv("clients_in_timeout_table", blocked.to_string());
            }
            "memory" => {
                let used = crate::alloc::used_memory();
                let rss = crate::alloc::rss_bytes();
                kv("used_memory", used.to_string());
                kv("used_memory_human", human(used));
                kv("used_memory_rss", rss.to_string());
                kv("used_memory_rss_human", human(rss));
                kv("used_memory_peak", used.to_string());
                kv("used_memory_dataset", used.to_string());
                kv(
                    "maxmemory",
                    srv.config.hot.maxmemory.load(Ordering::Relaxed).to_string(),
                );
                kv(
                    "maxmemory_human",
                    human(srv.config.hot.maxmemory.load(Ordering::Relaxed).max(0) as usize),
                );
                kv(
                    "maxmemory_policy",
                    srv.config.get("maxmemory-policy").unwrap_or_default(),
                );
                kv(
                    "mem_fragmentation_ratio",
                    format!(
                        "{:.2}",
                        if used > 0 {
                            rss as f64 / used as f64
                        } else {
                            0.0
                        }
                    ),
                );
                kv("mem_allocator", crate::alloc::allocator_name());
                kv("lazyfree_pending_objects", "0".into());
            }
            "persistence" => {
                for (k, v) in crate::persistence::info_fields(srv) {
                    kv(&k, v);
                }
            }
            "stats" => {
                kv(
                    "total_connections_received",
                    st.connections.load(Ordering::Relaxed).to_string(),
                );
                kv(
                    "total_commands_processed",
                    st.commands.load(Ordering::Relaxed).to_string(),
                );
                kv("instantaneous_ops_per_sec", "0".into());
                kv(
                    "total_net_input_bytes",
                    st.net_input_bytes.load(Ordering::Relaxed).to_string(),
                );
                kv(
                    "total_net_output_bytes",
                    st.net_output_bytes.load(Ordering::Relaxed).to_string(),
                );
                kv(
                    "rejected_connections",
                    st.rejected_connections.load(Ordering::Relaxed).to_string(),
                );
                kv(
                    "expired_keys",
                    st.expired_keys.load(Ordering::Relaxed).to_string(),
                );
                kv(
                    "expired_stale_perc",
                    format!(
                        "{:.2}",
                        st.expired_stale_perc.load(Ordering::Relaxed) as f64
                    ),
                );
                kv(
                    "expired_time_cap_reached_count",
                    st.expired_time_cap_reached
                        .load(Ordering::Relaxed)
                        .to_string(),
                );
                kv(
                    "evicted_keys",
                    crate::evict::EVICTED_KEYS
                        .load(Ordering::Relaxed)
                        .to_string(),
                );
                kv(
                    "keyspace_hits",
                    st.keyspace_hits.load(Ordering::Relaxed).to_string(),
                );
                kv(
                    "keyspace_misses",
                    st.keyspace_misses.load(Ordering::Relaxed).to_string(),
                );
                {
                    use crate::pubsub::Kind;
                    let ps = &srv.pubsub;
                    kv("pubsub_channels", ps.len(Kind::Channel).to_string());
                    kv("pubsub_patterns", ps.len(Kind::Pattern).to_string());
                    kv("pubsubshard_channels", ps.len(Kind::Shard).to_string());
                }
                let (tk, ti, tp) = srv.tracking.totals();
                kv("tracking_total_keys", tk.to_string());
                kv("tracking_total_items", ti.to_string());
                kv("tracking_total_prefixes", tp.to_string());
                kv(
                    "total_error_replies",
                    st.error_replies.load(Ordering::Relaxed).to_string(),
                );
            }
            "replication" => {
                kv("role", "master".into());
                kv("connected_slaves", "0".into());
                kv("master_failover_state", "no-failover".into());
                kv("master_replid", srv.run_id.clone());
                kv(
                    "master_replid2",
                    "0000000000000000000000000000000000000000".into(),
                );
                kv("master_repl_offset", "0".into());
                kv("second_repl_offset", "-1".into());
                kv("repl_backlog_active", "0".into());
            }
            "cpu" => {
                let (sys, user) = cpu_times();
                kv("used_cpu_sys", format!("{sys:.6}"));
                kv("used_cpu_user", format!("{user:.6}"));
                kv("used_cpu_sys_children", "0.000000".into());
                kv("used_cpu_user_children", "0.000000".into());
            }
            "commandstats" => {
                let mut cmds: Vec<_> = table()
                    .values()
                    .filter(|c| {
                        c.calls.load(Ordering::Relaxed) + c.rejected.load(Ordering::Relaxed) > 0
                    })
                    .collect();
                cmds.sort_by_key(|c| c.name);
                for c in cmds {
                    let calls = c.calls.load(Ordering::Relaxed);
                    let usec = c.usec.load(Ordering::Relaxed);
                    kv(
                        &format!("cmdstat_{}", c.name),
                        format!(
                            "calls={calls},usec={usec},usec_per_call={:.2},rejected_calls={},failed_calls={}",
                            if calls > 0 { usec as f64 / calls as f64 } else { 0.0 },
                            c.rejected.load(Ordering::Relaxed),
                            c.failed.load(Ordering::Relaxed)
                        ),
                    );
                }
            }
            "errorstats" => {
                for (k, v) in srv.errorstats.info_lines() {
                    kv(&k, v);
                }
            }
            "latencystats" => {
                for (k, v) in crate::commands::latency::info_lines(srv) {
                    kv(&k, v);
                }
            }
            "cluster" => kv("cluster_enabled", "0".into()),
            "keyspace" => {
                for db in 0..srv.keyspace.num_dbs() {
                    let (keys, vol) = srv.keyspace.db_sizes(db);
                    if keys > 0 {
                        kv(
                            &format!("db{db}"),
                            format!("keys={keys},expires={vol},avg_ttl=0"),
                        );
                    }
                }
            }
            _ => {}
        }
    }
    out
}

fn human(n: usize) -> String {
    let n = n as f64;
    if n < 1024.0 {
        format!("{n}B")
    } else if n < 1024.0 * 1024.0 {
        format!("{:.2}K", n / 1024.0)
    } else if n < 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2}M", n / 1024.0 / 1024.0)
    } else {
        format!("{:.2}G", n / 1024.0 / 1024.0 / 1024.0)
    }
}

fn info(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    let sections: Vec<String> = a[1..]
        .iter()
        .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase())
        .collect();
    Reply::Verbatim("txt", Bytes::from(info_text(ctx.srv, &sections)))
}

fn config(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    match sub.as_str() {
        "get" if a.len() >= 3 => {
            let pats: Vec<Vec<u8>> = a[2..].iter().map(|p| p.to_vec()).collect();
            Reply::Map(
                ctx.srv
                    .config
                    .matching(&pats)
                    .into_iter()
                    .map(|(k, v)| (Reply::bulk(k.into_bytes()), Reply::bulk(v.into_bytes())))
                    .collect(),
            )
        }
        "set" if a.len() >= 4 && a.len().is_multiple_of(2) => {
            let pairs: Vec<(String, String)> = a[2..]
                .chunks(2)
                .map(|p| {
                    (
                        String::from_utf8_lossy(&p[0]).into_owned(),
                        String::from_utf8_lossy(&p[1]).into_owned(),
                    )
                })
                .collect();
            let was_aof = ctx.srv.config.get_bool("appendonly");
            let local = crate::net::is_local_peer(&ctx.client.info.addr);
            match ctx.srv.config.set_runtime_checked(&pairs, local) {
                Ok(names) => {
                    if names.contains(&"requirepass") {
                        let pass = ctx.srv.config.get("requirepass").unwrap_or_default();
                        ctx.srv.acl.set_requirepass(&pass);
                    }
                    if names.contains(&"appendonly") {
                        let now = ctx.srv.config.get_bool("appendonly");
                        if now != was_aof {
                            if let Err(e) = crate::persistence::set_appendonly(ctx.srv, now) {
                                let _ = ctx.srv.config.set_runtime(&[(
                                    "appendonly".into(),
                                    if was_aof { "yes" } else { "no" }.into(),
                                )]);
                                return Reply::error(format!("ERR CONFIG SET failed (possibly related to argument 'appendonly') - {e}"));
                            }
                        }
                    }
                    Reply::Ok
                }
                Err(e) => Reply::Error(e),
            }
        }
        "resetstat" if a.len() == 2 => {
            let st = &ctx.srv.stats;
            for c in [
                &st.commands,
                &st.connections,
                &st.rejected_connections,
                &st.error_replies,
                &st.expired_keys,
                &st.expired_time_cap_reached,
                &st.keyspace_hits,
                &st.keyspace_misses,
                &st.net_input_bytes,
                &st.net_output_bytes,
            ] {
                c.store(0, Ordering::Relaxed);
            }
            ctx.srv.errorstats.reset();
            crate::evict::EVICTED_KEYS.store(0, Ordering::Relaxed);
            for h in crate::commands::latency::histograms().values() {
                h.reset();
            }
            for c in table().values() {
                c.calls.store(0, Ordering::Relaxed);
                c.usec.store(0, Ordering::Relaxed);
                c.rejected.store(0, Ordering::Relaxed);
                c.failed.store(0, Ordering::Relaxed);
            }
            Reply::Ok
        }
        "rewrite" if a.len() == 2 => match crate::config_rewrite::rewrite(&ctx.srv.config) {
            Ok(()) => Reply::Ok,
            Err(e) => Reply::Error(e),
        },
        "help" => Reply::Array(
            [
                "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "GET <pattern>",
                "SET <directive> <value>",
                "RESETSTAT",
                "REWRITE",
                "HELP",
            ]
            .iter()
            .map(|s| Reply::StatusOwned(s.to_string()))
            .collect(),
        ),
        "get" | "set" | "resetstat" | "rewrite" => wrong_arity(&format!("config|{sub}")),
        _ => Reply::error(format!(
            "ERR unknown subcommand '{}'. Try CONFIG HELP.",
            String::from_utf8_lossy(&a[1])
        )),
    }
}

fn dbsize(ctx: &mut Ctx, _: &[Bytes]) -> Reply {
    Reply::Int(ctx.db().len() as i64)
}

fn flush_mode(a: &[Bytes]) -> Result<(), Reply> {
    match a.len() {
        1 => Ok(()),
        2 if eq(&a[1], "async") || eq(&a[1], "sync") => Ok(()),
        _ => Err(Reply::error(SYNTAX)),
    }
}

/// Empty database `db` (all its shards must be locked). Returns the number of keys removed.
fn empty_db(ctx: &mut Ctx, db: usize) -> usize {
    let mut removed = 0;
    let mut h = ctx.db_at(db);
    h.for_each_shard(|_, sh| {
        let keys: Vec<Bytes> = sh
            .watched
            .keys()
            .filter(|k| sh.raw_get(k).is_some())
            .cloned()
            .collect();
        for k in keys {
            sh.touch_watched(&k);
        }
        removed += sh.clear();
    });
    removed
}

fn flushdb(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    if let Err(e) = flush_mode(a) {
        return e;
    }
    let db = ctx.client.db;
    empty_db(ctx, db);
    let id = ctx.client.id;
    ctx.srv
        .tracking
        .invalidate_all(ctx.srv, id, Some(&mut ctx.client.after_reply), false);
    ctx.dirty += 1;
    Reply::Ok
}

fn flushall(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    if let Err(e) = flush_mode(a) {
        return e;
    }
    for db in 0..ctx.srv.keyspace.num_dbs() {
        empty_db(ctx, db);
    }
    let id = ctx.client.id;
    ctx.srv
        .tracking
        .invalidate_all(ctx.srv, id, Some(&mut ctx.client.after_reply), true);
    crate::persistence::snapshot::after_flushall(ctx.srv);
    ctx.dirty += 1;
    Reply::Ok
}

fn swapdb(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    let Ok(x) = int(&a[1]) else {
        return Reply::error("ERR invalid first DB index");
    };
    let Ok(y) = int(&a[2]) else {
        return Reply::error("ERR invalid second DB index");
    };
    let n = ctx.srv.keyspace.num_dbs() as i64;
    if x < 0 || x >= n || y < 0 || y >= n {
        return Reply::error("ERR DB index is out of range");
    }
    let (x, y) = (x as usize, y as usize);
    if x != y {
        let shards = ctx.srv.keyspace.shards_per_db();
        for sid in 0..shards {
            let mut tmp = crate::keyspace::Shard::default();
            ctx.db_at(x).shard_at(sid).swap_data(&mut tmp);
            ctx.db_at(y).shard_at(sid).swap_data(&mut tmp);
            ctx.db_at(x).shard_at(sid).swap_data(&mut tmp);
            for db in [x, y] {
                let mut h = ctx.db_at(db);
                let sh = h.shard_at(sid);
                let keys: Vec<Bytes> = sh.watched.keys().cloned().collect();
                for k in keys {
                    sh.touch_watched(&k);
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
    Reply::Ok
}

fn time(_: &mut Ctx, _: &[Bytes]) -> Reply {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Reply::Array(vec![
        Reply::bulk(d.as_secs().to_string().into_bytes()),
        Reply::bulk(d.subsec_micros().to_string().into_bytes()),
    ])
}

fn shutdown(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    for w in &a[1..] {
        let ok = ["nosave", "save", "now", "force", "abort"]
            .iter()
            .any(|o| eq(w, o));
        if !ok {
            return Reply::error(SYNTAX);
        }
    }
    if a[1..].iter().any(|w| eq(w, "abort")) {
        return Reply::error("ERR No shutdown in progress.");
    }
    let has = |o: &str| a[1..].iter().any(|w| eq(w, o));
    if let Err(refusal) =
        super::persist::shutdown_save(ctx, has("save"), has("nosave"), has("force"))
    {
        return refusal;
    }
    ctx.srv.request_shutdown();
    ctx.close_after_reply = true;
    Reply::NoReply
}

fn memory_keys(a: &[Bytes]) -> Vec<usize> {
    if a.len() >= 3 && eq(&a[1], "usage") {
        vec![2]
    } else {
        vec![]
    }
}

fn memory(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    match sub.as_str() {
        "usage" if a.len() >= 3 => {
            let key = a[2].clone();
            let mut h = ctx.db();
            match h.value(&key) {
                None => Reply::Null,
                Some(v) => {
                    Reply::Int((crate::commands::keys::value_heap_bytes(v) + key.len() + 64) as i64)
                }
            }
        }
        "stats" | "doctor" | "malloc-stats" | "purge" => Reply::Ok,
        _ => Reply::error(format!(
            "ERR unknown subcommand '{}'. Try MEMORY HELP.",
            String::from_utf8_lossy(&a[1])
        )),
    }
}
