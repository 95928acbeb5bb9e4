//! COMMAND and its subcommands (COUNT, LIST, INFO, DOCS, GETKEYS, ...): introspection of the
//! command table, answered from the same `Spec` rows the dispatcher runs.

use super::args::{eq, SYNTAX};
use super::flags::*;
use super::{table, CmdResult, Ctx, Keys, Spec};
use crate::cmdspec::{wrong_arity, AclCommand, Begin, Find, KeySpec};
use crate::protocol::Reply;
use bytes::Bytes;

#[rustfmt::skip]
pub static COMMANDS: &[Spec] = &[
    Spec::new("command", -1, LOADING | STALE, Keys::None, command, "server"),
];

/// COMMAND INFO's flags, in Redis's order. Those Podium's dispatcher acts on come from the
/// command's own `Spec`; the purely descriptive ones Podium has no bit for (pubsub,
/// skip_monitor, skip_slowlog, asking, no_mandatory_keys, no_async_loading) from Redis's row;
/// `movable` is worked out by the caller.
fn spec_flags(spec: &Spec, row: Option<&AclCommand>, movable: bool) -> Vec<Reply> {
    let from_row = |name: &str| row.is_some_and(|r| r.flags.contains(&name));
    let names: [(bool, &'static str); 20] = [
        (spec.flags & WRITE != 0, "write"),
        (spec.flags & READONLY != 0, "readonly"),
        (spec.flags & DENYOOM != 0, "denyoom"),
        (false, "module"),
        (spec.flags & ADMIN != 0, "admin"),
        (from_row("pubsub"), "pubsub"),
        (spec.flags & NOSCRIPT != 0, "noscript"),
        (spec.flags & BLOCKING != 0, "blocking"),
        (spec.flags & LOADING != 0, "loading"),
        (spec.flags & STALE != 0, "stale"),
        (from_row("skip_monitor"), "skip_monitor"),
        (from_row("skip_slowlog"), "skip_slowlog"),
        (from_row("asking"), "asking"),
        (spec.flags & FAST != 0, "fast"),
        (spec.flags & NO_AUTH != 0, "no_auth"),
        (from_row("no_mandatory_keys"), "no_mandatory_keys"),
        (from_row("no_async_loading"), "no_async_loading"),
        (spec.flags & NO_MULTI != 0, "no_multi"),
        (movable, "movablekeys"),
        (spec.flags & ALLOW_BUSY != 0, "allow_busy"),
    ];
    names
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, n)| Reply::Status(n))
        .collect()
}

fn status_set(names: &[&'static str]) -> Reply {
    Reply::Set(names.iter().map(|n| Reply::Status(n)).collect())
}

/// Tips are bulk strings in Redis's reply, flags status strings.
fn bulk_set(names: &[&'static str]) -> Reply {
    Reply::Set(
        names
            .iter()
            .map(|n| Reply::bulk_slice(n.as_bytes()))
            .collect(),
    )
}

fn int_field(name: &'static str, v: i32) -> (Reply, Reply) {
    (Reply::bulk_slice(name.as_bytes()), Reply::Int(i64::from(v)))
}

fn search_map(kind: &'static str, spec: Vec<(Reply, Reply)>) -> Reply {
    Reply::Map(vec![
        (
            Reply::bulk_slice(b"type"),
            Reply::bulk_slice(kind.as_bytes()),
        ),
        (Reply::bulk_slice(b"spec"), Reply::Map(spec)),
    ])
}

/// One key spec as COMMAND INFO shows it: notes, flags, begin_search, find_keys.
fn key_spec_reply(k: &KeySpec) -> Reply {
    let mut m = Vec::with_capacity(4);
    if let Some(notes) = k.notes {
        m.push((
            Reply::bulk_slice(b"notes"),
            Reply::bulk_slice(notes.as_bytes()),
        ));
    }
    m.push((Reply::bulk_slice(b"flags"), status_set(k.flags)));
    let begin = match k.begin {
        Begin::Index(i) => search_map("index", vec![int_field("index", i)]),
        Begin::Keyword(kw, from) => search_map(
            "keyword",
            vec![
                (Reply::bulk_slice(b"keyword"), Reply::bulk_slice(kw)),
                int_field("startfrom", from),
            ],
        ),
        Begin::Unknown => search_map("unknown", vec![]),
    };
    m.push((Reply::bulk_slice(b"begin_search"), begin));
    let find = match k.find {
        Find::Range(last, step, limit) => search_map(
            "range",
            vec![
                int_field("lastkey", last),
                int_field("keystep", step),
                int_field("limit", limit),
            ],
        ),
        Find::Keynum(idx, first, step) => search_map(
            "keynum",
            vec![
                int_field("keynumidx", idx),
                int_field("firstkey", first),
                int_field("keystep", step),
            ],
        ),
        Find::Unknown => search_map("unknown", vec![]),
    };
    m.push((Reply::bulk_slice(b"find_keys"), find));
    Reply::Map(m)
}

fn categories(name: &str) -> Reply {
    Reply::Set(
        crate::acl::view::categories_of(name)
            .into_iter()
            .map(|c| Reply::StatusOwned(format!("@{c}")))
            .collect(),
    )
}

/// A subcommand's COMMAND INFO entry, from Redis's table row (Podium runs it through its
/// container's handler, so the row is what describes it).
fn subcommand_info(row: &AclCommand) -> Reply {
    let (first, last, step) = row.legacy_range;
    Reply::Array(vec![
        Reply::bulk_slice(row.name.as_bytes()),
        Reply::Int(i64::from(row.arity)),
        status_set(row.flags),
        Reply::Int(i64::from(first)),
        Reply::Int(i64::from(last)),
        Reply::Int(i64::from(step)),
        categories(row.name),
        bulk_set(row.tips),
        Reply::Set(row.keys.iter().map(key_spec_reply).collect()),
        Reply::Set(vec![]),
    ])
}

fn command_info(spec: &Spec) -> Reply {
    let row = crate::acl::view::command_row(spec.name);
    let (first, last, step) = match (row, spec.keys) {
        (Some(r), _) => r.legacy_range,
        (None, Keys::Range(f, l, s)) => (f, l, s),
        (None, Keys::DbNamed(_)) => (1, 1, 1),
        _ => (0, 0, 0),
    };
    // Whether a command's keys move is Redis's derivation from its key specs where Redis has
    // the command; otherwise, whether Podium finds its keys by a function. A container's
    // keys are its subcommands'.
    let movable = match row {
        Some(r) => r.flags.contains(&"movablekeys"),
        None => {
            matches!(spec.keys, Keys::Custom(_) | Keys::DbNamed(_))
                && !super::latency::is_container(spec.name)
        }
    };
    // A container's flags are its subcommands' (Redis shows none for it).
    let flags = match row {
        Some(r) if r.subcommands > 0 => vec![],
        _ => spec_flags(spec, row, movable),
    };
    // Only the subcommands Podium runs, as COMMAND DOCS and LIST show them.
    let subs: Vec<Reply> = crate::acl::view::subcommand_rows(spec.name)
        .iter()
        .filter(|r| super::latency::histograms().contains_key(r.name))
        .map(subcommand_info)
        .collect();
    Reply::Array(vec![
        Reply::bulk_slice(spec.name.as_bytes()),
        Reply::Int(spec.arity as i64),
        Reply::Set(flags),
        Reply::Int(first as i64),
        Reply::Int(last as i64),
        Reply::Int(step as i64),
        categories(spec.name),
        bulk_set(row.map_or(&[], |r| r.tips)),
        Reply::Set(
            row.map_or(&[][..], |r| r.keys)
                .iter()
                .map(key_spec_reply)
                .collect(),
        ),
        if subs.is_empty() {
            Reply::Set(subs)
        } else {
            Reply::Array(subs)
        },
    ])
}

/// COMMAND GETKEYS and GETKEYSANDFLAGS: the keys of the command in `a[2..]`, as its key specs
/// (and, where those are incomplete, Podium's own key finder) place them.
fn get_keys(a: &[Bytes], with_flags: bool) -> Reply {
    let Some(c) = super::lookup(&a[2]) else {
        return Reply::error("ERR Invalid command specified");
    };
    let args = &a[2..];
    if matches!(c.keys, super::Keys::None) {
        return Reply::error("ERR The command has no key arguments");
    }
    if !crate::cmdspec::arity_ok(c.arity, args.len()) {
        return Reply::error("ERR Invalid number of arguments specified for command");
    }
    let pos = c.key_positions(args);
    if pos.is_empty() {
        // A command that may be given no keys (EVAL ... 0) has an empty list.
        let optional = crate::acl::view::command_row(c.spec.name)
            .is_some_and(|r| r.flags.contains(&"no_mandatory_keys"));
        return if optional {
            Reply::Array(vec![])
        } else {
            Reply::error("ERR Invalid arguments specified for command")
        };
    }
    if !with_flags {
        return Reply::Array(
            pos.into_iter()
                .map(|i| Reply::Bulk(args[i].clone()))
                .collect(),
        );
    }
    let row_name = match args.get(1) {
        Some(sub) if super::latency::is_container(c.spec.name) => format!(
            "{}|{}",
            c.spec.name,
            String::from_utf8_lossy(sub).to_ascii_lowercase()
        ),
        _ => c.spec.name.to_string(),
    };
    let flags = crate::acl::view::key_flags(&row_name, args, &pos);
    Reply::Array(
        pos.into_iter()
            .zip(flags)
            .map(|(i, f)| {
                // Redis finds an incomplete spec's keys with the command's own finder, whose
                // flags leave `incomplete` out.
                let f: Vec<&'static str> =
                    f.iter().copied().filter(|n| *n != "incomplete").collect();
                Reply::Array(vec![Reply::Bulk(args[i].clone()), status_set(&f)])
            })
            .collect(),
    )
}

fn command(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let t = table();
    if a.len() == 1 {
        let mut names: Vec<_> = t.keys().collect();
        names.sort();
        return Ok(Reply::Array(
            names.into_iter().map(|n| command_info(t[n])).collect(),
        ));
    }
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    match sub.as_str() {
        "count" if a.len() == 2 => Ok(Reply::Int(t.len() as i64)),
        "list" => {
            // Every command, and each container's subcommands as `name|sub`.
            let mut names: Vec<String> = t.keys().map(|n| n.to_string()).collect();
            names.extend(
                super::latency::histograms()
                    .keys()
                    .filter(|n| n.contains('|'))
                    .filter(|n| n.split('|').next().is_some_and(|c| t.contains_key(c)))
                    .cloned(),
            );
            match a.len() {
                2 => {}
                5 if eq(&a[2], "filterby") => {
                    let filter = String::from_utf8_lossy(&a[4]).to_ascii_lowercase();
                    if eq(&a[3], "pattern") {
                        names.retain(|n| {
                            crate::util::numtext::glob_match(&a[4], n.as_bytes(), true)
                        });
                    } else if eq(&a[3], "aclcat") {
                        let members = crate::acl::view::category(&filter).unwrap_or_default();
                        names.retain(|n| members.contains(&n.as_str()));
                    } else if eq(&a[3], "module") {
                        // No modules are loaded: no command comes from one.
                        names.clear();
                    } else {
                        return Err(Reply::error(SYNTAX));
                    }
                }
                _ => return Err(Reply::error(SYNTAX)),
            }
            names.sort();
            Ok(Reply::Array(
                names
                    .into_iter()
                    .map(|n| Reply::bulk_slice(n.as_bytes()))
                    .collect(),
            ))
        }
        "info" => {
            if a.len() == 2 {
                let mut names: Vec<_> = t.keys().collect();
                names.sort();
                return Ok(Reply::Array(
                    names.into_iter().map(|n| command_info(t[n])).collect(),
                ));
            }
            Ok(Reply::Array(
                a[2..]
                    .iter()
                    .map(|n| match super::lookup(n) {
                        Some(c) => command_info(c),
                        None => Reply::NullArray,
                    })
                    .collect(),
            ))
        }
        "docs" if a.len() == 2 => Ok(super::docs::all_docs()),
        "docs" => Ok(Reply::Map(
            a[2..]
                .iter()
                .filter_map(|n| super::docs::docs_for(n))
                .collect(),
        )),
        "getkeys" | "getkeysandflags" if a.len() >= 4 => Ok(get_keys(a, sub == "getkeysandflags")),
        "help" if a.len() == 2 => Ok(Reply::Array(
            [
                "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "(no subcommand)",
                "    Return details about all Redis commands.",
                "COUNT",
                "    Return the total number of commands in this Redis server.",
                "LIST",
                "    Return a list of all commands in this Redis server.",
                "INFO [<command-name> ...]",
                "    Return details about multiple Redis commands.",
                "    If no command names are given, documentation details for all",
                "    commands are returned.",
                "DOCS [<command-name> ...]",
                "    Return documentation details about multiple Redis commands.",
                "    If no command names are given, documentation details for all",
                "    commands are returned.",
                "GETKEYS <full-command>",
                "    Return the keys from a full Redis command.",
                "GETKEYSANDFLAGS <full-command>",
                "    Return the keys and the access flags from a full Redis command.",
                "HELP",
                "    Prints this help.",
            ]
            .iter()
            .map(|s| Reply::StatusOwned(s.to_string()))
            .collect(),
        )),
        "count" | "getkeys" | "getkeysandflags" | "help" => {
            Err(wrong_arity(&format!("command|{sub}")))
        }
        _ => {
            let _ = ctx;
            Err(Reply::error(format!(
                "ERR unknown subcommand '{}'. Try COMMAND HELP.",
                String::from_utf8_lossy(&a[1])
            )))
        }
    }
}
