//! COMMAND and its subcommands (COUNT, LIST, INFO, DOCS, GETKEYS, ...): introspection of the
//! command table, answered from the same `Spec` rows the dispatcher runs.

use super::args::{eq, SYNTAX};
use super::flags::*;
use super::{table, Ctx, Keys, Spec};
use crate::cmdspec::wrong_arity;
use crate::protocol::Reply;
use bytes::Bytes;

#[rustfmt::skip]
pub static COMMANDS: &[Spec] = &[
    Spec::new("command", -1, LOADING | STALE, Keys::None, command, "server"),
];

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
    // A container's keys are its subcommands' (MEMORY USAGE's are at a fixed place).
    if matches!(spec.keys, Keys::Custom(_) | Keys::DbNamed(_))
        && !super::latency::is_container(spec.name)
    {
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
                        return Reply::error(SYNTAX);
                    }
                }
                _ => return Reply::error(SYNTAX),
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
        "docs" if a.len() == 2 => super::docs::all_docs(),
        "docs" => Reply::Map(
            a[2..]
                .iter()
                .filter_map(|n| super::docs::docs_for(n))
                .collect(),
        ),
        "getkeys" if a.len() >= 3 => {
            let Some(c) = super::lookup(&a[2]) else {
                return Reply::error("ERR Invalid command specified");
            };
            if !crate::cmdspec::arity_ok(c.arity, a.len() - 2) {
                return Reply::error("ERR Invalid number of arguments specified for command");
            }
            let pos = c.key_positions(&a[2..]);
            // A command that can take keys but was given none (EVAL ... 0) has an empty list;
            // one that never takes keys is an error, as in Redis.
            if pos.is_empty() && matches!(c.keys, super::Keys::None) {
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
