//! CONFIG GET/SET/RESETSTAT/REWRITE/HELP: the command face of the directive table in
//! `crate::config` (the table, its checks and CONFIG REWRITE's file editing live there and in
//! `crate::config_rewrite`).

use super::flags::*;
use super::{table, CmdResult, Ctx, Keys, Spec};
use crate::cmdspec::wrong_arity;
use crate::protocol::Reply;
use bytes::Bytes;
use std::sync::atomic::Ordering;

#[rustfmt::skip]
pub static COMMANDS: &[Spec] = &[
    Spec::new("config", -2, ADMIN | NOSCRIPT | LOADING | STALE, Keys::None, config, "server"),
];

fn config(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    match sub.as_str() {
        "get" if a.len() >= 3 => {
            let pats: Vec<Vec<u8>> = a[2..].iter().map(|p| p.to_vec()).collect();
            Ok(Reply::Map(
                ctx.srv
                    .config
                    .matching(&pats)
                    .into_iter()
                    .map(|(k, v)| (Reply::bulk(k.into_bytes()), Reply::bulk(v.into_bytes())))
                    .collect(),
            ))
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
            let oom_before = (
                ctx.srv.config.get("oom-score-adj").unwrap_or_default(),
                ctx.srv
                    .config
                    .get("oom-score-adj-values")
                    .unwrap_or_default(),
            );
            let before = crate::listeners::values_before(ctx.srv, &pairs);
            let local = crate::net::is_local_peer(&ctx.client.info.addr);
            match ctx
                .srv
                .config
                .set_runtime_checked(&pairs, local, ctx.srv.aof.loading())
            {
                Ok(names) => {
                    if let Err(e) = crate::listeners::apply_config_set(ctx.srv, &names, &before) {
                        return Err(Reply::Error(e));
                    }
                    if names.contains(&"requirepass") {
                        let pass = ctx.srv.config.get("requirepass").unwrap_or_default();
                        ctx.srv.acl.set_requirepass(&pass);
                    }
                    if let Some(name) = names
                        .iter()
                        .find(|n| **n == "oom-score-adj" || **n == "oom-score-adj-values")
                    {
                        if let Err(e) = apply_oom_score_adj(ctx.srv) {
                            tracing::warn!("{e}");
                            let _ = ctx.srv.config.set_runtime(&[
                                ("oom-score-adj".into(), oom_before.0),
                                ("oom-score-adj-values".into(), oom_before.1),
                            ]);
                            let _ = apply_oom_score_adj(ctx.srv);
                            return Err(Reply::error(format!("ERR CONFIG SET failed (possibly related to argument '{name}') - Failed to set current oom_score_adj. Check server logs.")));
                        }
                    }
                    if names.contains(&"tracking-table-max-keys") {
                        ctx.srv.tracking.limit_changed();
                    }
                    if names.contains(&"maxmemory") || names.contains(&"maxmemory-clients") {
                        crate::client_evict::configure(ctx.srv);
                    }
                    if names.contains(&"maxmemory") {
                        crate::evict::after_maxmemory_set(ctx.srv, !ctx.in_exec);
                    }
                    if names.contains(&"repl-backlog-size") {
                        let size = ctx.srv.config.get_i64("repl-backlog-size").max(1) as usize;
                        ctx.srv.repl.resize_backlog(size);
                    }
                    if names.contains(&"aof-timestamp-enabled") {
                        ctx.srv.aof.config_changed(&ctx.srv.config);
                    }
                    let aof_now = ctx.srv.config.get_bool("appendonly");
                    if names.contains(&"appendonly")
                        && aof_now != was_aof
                        && crate::persistence::set_appendonly(ctx.srv, aof_now, ctx.in_exec)
                            .is_err()
                    {
                        // The reason is in the log, as Redis words it.
                        let _ = ctx.srv.config.set_runtime(&[(
                            "appendonly".into(),
                            if was_aof { "yes" } else { "no" }.into(),
                        )]);
                        return Err(Reply::error("ERR CONFIG SET failed (possibly related to argument 'appendonly') - Unable to turn on AOF. Check server logs."));
                    }
                    if names.contains(&"proc-title-template") {
                        ctx.srv.config.show_proc_title();
                    }
                    if names.contains(&"aof-disable-auto-gc")
                        && !ctx.srv.config.get_bool("aof-disable-auto-gc")
                    {
                        crate::persistence::rewrite::delete_history(ctx.srv);
                    }
                    Ok(Reply::Ok)
                }
                Err(e) => Err(Reply::Error(e)),
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
            crate::client_evict::EVICTED_CLIENTS.store(0, Ordering::Relaxed);
            for h in crate::commands::latency::histograms().values() {
                h.reset();
            }
            for c in table().values() {
                c.own.reset();
                for (_, s) in c.subs.iter() {
                    s.reset();
                }
            }
            Ok(Reply::Ok)
        }
        "rewrite" if a.len() == 2 => match crate::config_rewrite::rewrite(&ctx.srv.config) {
            Ok(()) => Ok(Reply::Ok),
            Err(e) => Err(Reply::Error(e)),
        },
        "help" => Ok(Reply::Array(
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
        )),
        "get" | "set" | "resetstat" | "rewrite" => Err(wrong_arity(&format!("config|{sub}"))),
        _ => Err(Reply::error(format!(
            "ERR unknown subcommand '{}'. Try CONFIG HELP.",
            String::from_utf8_lossy(&a[1])
        ))),
    }
}

/// Apply the configured `oom-score-adj` to the process (the replica class while it is one).
pub(crate) fn apply_oom_score_adj(srv: &crate::state::Server) -> Result<(), String> {
    let mode = srv.config.get("oom-score-adj").unwrap_or_default();
    let values = crate::config::directives::oom_score_adj_values(
        &srv.config.get("oom-score-adj-values").unwrap_or_default(),
    )?;
    let class = usize::from(crate::state::replica_link::is_replica(srv));
    crate::process::apply_oom_score_adj(&mode, values, class)
}
