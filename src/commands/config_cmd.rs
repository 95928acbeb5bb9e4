//! CONFIG GET/SET/RESETSTAT/REWRITE/HELP: the command face of the directive table in
//! `crate::config` (the table, its checks and CONFIG REWRITE's file editing live there and in
//! `crate::config_rewrite`).

use super::flags::*;
use super::{table, CmdResult, Ctx, Keys, Spec};
use crate::cmdspec::wrong_arity;
use crate::config::dir;
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
            let was_aof = ctx.srv.config.flag(dir::APPENDONLY);
            let oom_before = (
                ctx.srv.config.text(dir::OOM_SCORE_ADJ),
                ctx.srv.config.text(dir::OOM_SCORE_ADJ_VALUES),
            );
            let before = crate::listeners::values_before(ctx.srv, &pairs);
            let local = crate::net::is_local_peer(&ctx.client.info.addr);
            match ctx.srv.config.set_runtime_checked(
                &pairs,
                local,
                ctx.srv.aof.loading() || ctx.srv.aof.async_loading(),
            ) {
                Ok(changed) => {
                    if let Err(e) = crate::listeners::apply_config_set(ctx.srv, &changed, &before) {
                        return Err(Reply::Error(e));
                    }
                    if changed.contains(dir::REQUIREPASS) {
                        let pass = ctx.srv.config.text(dir::REQUIREPASS);
                        ctx.srv.acl.set_requirepass(&pass);
                    }
                    if let Some(id) =
                        changed.first_of(&[dir::OOM_SCORE_ADJ, dir::OOM_SCORE_ADJ_VALUES])
                    {
                        let name = id.name();
                        if let Err(e) = apply_oom_score_adj(ctx.srv) {
                            tracing::warn!("{e}");
                            let _ = ctx.srv.config.set_runtime(&[
                                dir::OOM_SCORE_ADJ.with(oom_before.0),
                                dir::OOM_SCORE_ADJ_VALUES.with(oom_before.1),
                            ]);
                            let _ = apply_oom_score_adj(ctx.srv);
                            return Err(Reply::error(format!("ERR CONFIG SET failed (possibly related to argument '{name}') - Failed to set current oom_score_adj. Check server logs.")));
                        }
                    }
                    if changed.contains(dir::TRACKING_TABLE_MAX_KEYS) {
                        ctx.srv.tracking.limit_changed();
                    }
                    if changed.contains(dir::MAXMEMORY) || changed.contains(dir::MAXMEMORY_CLIENTS)
                    {
                        crate::client_evict::configure(ctx.srv);
                    }
                    if changed.contains(dir::MAXMEMORY) {
                        crate::evict::after_maxmemory_set(ctx.srv, !ctx.in_exec);
                    }
                    if changed.contains(dir::REPL_BACKLOG_SIZE) {
                        let size = ctx.srv.config.int(dir::REPL_BACKLOG_SIZE).max(1) as usize;
                        ctx.srv.repl.resize_backlog(size);
                    }
                    if changed.contains(dir::AOF_TIMESTAMP_ENABLED) {
                        ctx.srv.aof.config_changed(&ctx.srv.config);
                    }
                    let aof_now = ctx.srv.config.flag(dir::APPENDONLY);
                    if changed.contains(dir::APPENDONLY)
                        && aof_now != was_aof
                        && crate::persistence::set_appendonly(ctx.srv, aof_now, ctx.in_exec)
                            .is_err()
                    {
                        // The reason is in the log, as Redis words it.
                        let _ = ctx
                            .srv
                            .config
                            .set_runtime(&[dir::APPENDONLY.with(if was_aof {
                                "yes"
                            } else {
                                "no"
                            })]);
                        return Err(Reply::error("ERR CONFIG SET failed (possibly related to argument 'appendonly') - Unable to turn on AOF. Check server logs."));
                    }
                    if changed.contains(dir::PROC_TITLE_TEMPLATE) {
                        ctx.srv.config.show_proc_title();
                    }
                    if changed.contains(dir::AOF_DISABLE_AUTO_GC)
                        && !ctx.srv.config.flag(dir::AOF_DISABLE_AUTO_GC)
                    {
                        crate::persistence::rewrite::delete_history(ctx.srv);
                    }
                    // What this node tells the cluster about itself, and how it answers
                    // (cluster-preferred-endpoint-type, the barrier ...).
                    if changed.names().any(|n| n.starts_with("cluster-")) {
                        // My own entry and the cluster's settings take the new values now
                        // (the cluster's event reads them), as Redis's setters update its
                        // state at once.
                        if let Some(cluster) = crate::cluster::get(ctx.srv) {
                            cluster.event(ctx.srv, |_, _| ());
                        }
                    }
                    Ok(Reply::Ok)
                }
                Err(e) => Err(Reply::Error(e)),
            }
        }
        "resetstat" if a.len() == 2 => {
            let st = &ctx.srv.stats;
            for c in [
                &st.connections,
                &st.rejected_connections,
                &st.error_replies,
                &st.expired_keys,
                &st.expired_time_cap_reached,
            ] {
                c.store(0, Ordering::Relaxed);
            }
            for c in [
                &st.commands,
                &st.keyspace_hits,
                &st.keyspace_misses,
                &st.net_input_bytes,
                &st.net_output_bytes,
                &st.reads_processed,
                &st.writes_processed,
            ] {
                c.reset();
            }
            ctx.srv.errorstats.reset();
            let repl = &ctx.srv.repl;
            for c in [
                &repl.sync_full,
                &repl.sync_partial_ok,
                &repl.sync_partial_err,
            ] {
                c.store(0, Ordering::Relaxed);
            }
            crate::evict::EVICTED_KEYS.store(0, Ordering::Relaxed);
            crate::persistence::rdb::DUMP_PAYLOAD_SANITIZATIONS.store(0, Ordering::Relaxed);
            crate::keyspace::lazyfree::reset_stats();
            ctx.srv.defrag.reset_stats();
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
        // In cluster mode nodes.conf records whom this node follows, and Redis writes no
        // replicaof (a restart would refuse it: "replicaof directive not allowed").
        "rewrite" if a.len() == 2 => match crate::config_rewrite::rewrite(
            &ctx.srv.config,
            &if ctx.srv.config.flag(dir::CLUSTER_ENABLED) {
                String::new()
            } else {
                crate::state::replica_link::followed_master(ctx.srv)
            },
        ) {
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
    let mode = srv.config.text(dir::OOM_SCORE_ADJ);
    let values = crate::config::directives::oom_score_adj_values(
        &srv.config.text(dir::OOM_SCORE_ADJ_VALUES),
    )?;
    let class = usize::from(crate::state::replica_link::is_replica(srv));
    crate::process::apply_oom_score_adj(&mode, values, class)
}
