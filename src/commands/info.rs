//! INFO: the text report of the server's state, section by section, in Redis's field names
//! and order ([`info_text`] builds it).

use super::flags::*;
use super::{table, CmdResult, Ctx, Keys, Spec};
use crate::config::dir;
use crate::protocol::Reply;
use crate::util::human;
use crate::version::REDIS_VERSION;
use bytes::Bytes;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;

#[rustfmt::skip]
pub static COMMANDS: &[Spec] = &[
    Spec::new("info", -1, LOADING | STALE, Keys::None, info, "server"),
];

/// (system, user) CPU seconds of this process (`who` RUSAGE_SELF) or of its children that
/// have ended and been waited for (RUSAGE_CHILDREN: the BGSAVE and BGREWRITEAOF children).
fn cpu_times(who: libc::c_int) -> (f64, f64) {
    // SAFETY: getrusage only writes into the zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage struct.
    unsafe { libc::getrusage(who, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (t(ru.ru_stime), t(ru.ru_utime))
}

/// The INFO text for the requested sections.
pub fn info_text(srv: &crate::state::Server, sections: &[String]) -> String {
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
                let mode = if crate::cluster::get(srv).is_some() {
                    "cluster"
                } else {
                    "standalone"
                };
                kv("redis_mode", mode.into());
                kv("podium_version", env!("CARGO_PKG_VERSION").into());
                kv("os", std::env::consts::OS.into());
                kv("arch_bits", "64".into());
                kv("multiplexing_api", "epoll".into());
                kv("process_id", std::process::id().to_string());
                kv("run_id", srv.run_id.clone());
                kv("tcp_port", srv.port.load(Ordering::Relaxed).to_string());
                kv(
                    "server_time_usec",
                    (crate::clock::unix_ms() * 1000).to_string(),
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
                // Redis's I/O threads: never started here (each worker does its own clients'
                // I/O), which Redis reports as 0.
                kv("io_threads_active", "0".into());
                kv(
                    "config_file",
                    srv.config
                        .config_file
                        .as_ref()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default(),
                );
                // Only while a shutdown waits for its replicas, as in Redis.
                if srv.shutdown_wait.in_progress() {
                    kv(
                        "shutdown_in_milliseconds",
                        srv.shutdown_wait
                            .remaining_ms(crate::clock::unix_ms())
                            .to_string(),
                    );
                }
            }
            "clients" => {
                let clients = srv.clients.lock();
                let blocked = clients
                    .values()
                    .filter(|c| c.blocked.load(Ordering::Relaxed))
                    .count();
                let postponed = clients
                    .values()
                    .filter(|c| c.postponed.load(Ordering::Relaxed))
                    .count();
                // Replicas are not counted (connected_slaves counts them), as in Redis; nor
                // are killed clients whose connection has not ended yet (Redis frees a client
                // another one kills before CLIENT KILL returns).
                let uncounted = clients
                    .values()
                    .filter(|c| {
                        c.repl_role.load(Ordering::Relaxed) == crate::client::ROLE_REPLICA
                            || c.killed.load(Ordering::Relaxed)
                    })
                    .count();
                kv("connected_clients", (clients.len() - uncounted).to_string());
                kv("cluster_connections", "0".into());
                kv("maxclients", srv.config.int(dir::MAXCLIENTS).to_string());
                kv("client_recent_max_input_buffer", "0".into());
                kv("client_recent_max_output_buffer", "0".into());
                kv("blocked_clients", (blocked + postponed).to_string());
                kv("tracking_clients", srv.tracking.client_count().to_string());
                kv("clients_in_timeout_table", blocked.to_string());
            }
            "memory" => {
                let (before, after) = crate::commands::memory::info_fields(srv);
                for (k, v) in before {
                    kv(k, v);
                }
                let maxmemory = srv.config.hot.maxmemory.load(Ordering::Relaxed);
                kv("maxmemory", maxmemory.to_string());
                kv("maxmemory_human", human(maxmemory.max(0) as usize));
                kv("maxmemory_policy", srv.config.text(dir::MAXMEMORY_POLICY));
                for (k, v) in after {
                    kv(k, v);
                }
                kv(
                    "active_defrag_running",
                    srv.defrag.stats().running.to_string(),
                );
                kv(
                    "lazyfree_pending_objects",
                    crate::keyspace::lazyfree::pending().to_string(),
                );
                kv(
                    "lazyfreed_objects",
                    crate::keyspace::lazyfree::freed().to_string(),
                );
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
                kv("total_commands_processed", st.commands.get().to_string());
                let (ops, input, output) = srv.instant.rates();
                kv("instantaneous_ops_per_sec", ops.to_string());
                kv(
                    "total_net_input_bytes",
                    st.net_input_bytes.get().to_string(),
                );
                kv(
                    "total_net_output_bytes",
                    st.net_output_bytes.get().to_string(),
                );
                kv(
                    "instantaneous_input_kbps",
                    format!("{:.2}", input as f64 / 1024.0),
                );
                kv(
                    "instantaneous_output_kbps",
                    format!("{:.2}", output as f64 / 1024.0),
                );
                kv(
                    "rejected_connections",
                    st.rejected_connections.load(Ordering::Relaxed).to_string(),
                );
                let r = &srv.repl;
                kv("sync_full", r.sync_full.load(Ordering::Relaxed).to_string());
                kv(
                    "sync_partial_ok",
                    r.sync_partial_ok.load(Ordering::Relaxed).to_string(),
                );
                kv(
                    "sync_partial_err",
                    r.sync_partial_err.load(Ordering::Relaxed).to_string(),
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
                    "evicted_clients",
                    crate::client_evict::EVICTED_CLIENTS
                        .load(Ordering::Relaxed)
                        .to_string(),
                );
                kv("keyspace_hits", st.keyspace_hits.get().to_string());
                kv("keyspace_misses", st.keyspace_misses.get().to_string());
                {
                    use crate::client::Kind;
                    let ps = &srv.pubsub;
                    kv("pubsub_channels", ps.len(Kind::Channel).to_string());
                    kv("pubsub_patterns", ps.len(Kind::Pattern).to_string());
                    kv("pubsubshard_channels", ps.len(Kind::Shard).to_string());
                }
                let snap = &srv.aof.inner.snap;
                kv(
                    "latest_fork_usec",
                    snap.latest_fork_usec.load(Ordering::Relaxed).to_string(),
                );
                kv(
                    "total_forks",
                    snap.total_forks.load(Ordering::Relaxed).to_string(),
                );
                kv(
                    "migrate_cached_sockets",
                    super::migrate::cached_sockets().to_string(),
                );
                kv(
                    "slave_expires_tracked_keys",
                    srv.keyspace.replica_ttl_keys.lock().len().to_string(),
                );
                let d = srv.defrag.stats();
                for (k, v) in [
                    ("active_defrag_hits", d.hits),
                    ("active_defrag_misses", d.misses),
                    ("active_defrag_key_hits", d.key_hits),
                    ("active_defrag_key_misses", d.key_misses),
                    ("total_active_defrag_time", d.total_ms),
                    ("current_active_defrag_time", d.current_ms),
                ] {
                    kv(k, v.to_string());
                }
                let (tk, ti, tp) = srv.tracking.totals();
                kv("tracking_total_keys", tk.to_string());
                kv("tracking_total_items", ti.to_string());
                kv("tracking_total_prefixes", tp.to_string());
                kv(
                    "unexpected_error_replies",
                    st.unexpected_error_replies
                        .load(Ordering::Relaxed)
                        .to_string(),
                );
                kv(
                    "total_error_replies",
                    st.error_replies.load(Ordering::Relaxed).to_string(),
                );
                kv(
                    "dump_payload_sanitizations",
                    crate::persistence::rdb::DUMP_PAYLOAD_SANITIZATIONS
                        .load(Ordering::Relaxed)
                        .to_string(),
                );
                kv(
                    "total_reads_processed",
                    st.reads_processed.get().to_string(),
                );
                kv(
                    "total_writes_processed",
                    st.writes_processed.get().to_string(),
                );
                // Redis's I/O threads are not used (see io_threads_active).
                kv("io_threaded_reads_processed", "0".into());
                kv("io_threaded_writes_processed", "0".into());
            }
            "replication" => {
                let mut fields = Vec::new();
                if crate::state::replica_link::is_replica(srv) {
                    kv("role", "slave".into());
                    crate::state::replica_link::info_replica(srv, &mut fields);
                } else {
                    kv("role", "master".into());
                }
                srv.repl.info_master(&mut fields, srv.failover.state_name());
                for (k, v) in fields {
                    kv(&k, v);
                }
            }
            "cpu" => {
                let (sys, user) = cpu_times(libc::RUSAGE_SELF);
                kv("used_cpu_sys", format!("{sys:.6}"));
                kv("used_cpu_user", format!("{user:.6}"));
                let (sys, user) = cpu_times(libc::RUSAGE_CHILDREN);
                kv("used_cpu_sys_children", format!("{sys:.6}"));
                kv("used_cpu_user_children", format!("{user:.6}"));
            }
            "commandstats" => {
                // Each command, and each subcommand of a container as `name|sub`.
                let mut cmds: Vec<(String, &crate::commands::CmdStats)> = Vec::new();
                for c in table().values() {
                    cmds.push((c.name.to_string(), &c.own));
                    for (sub, s) in c.subs.iter() {
                        cmds.push((format!("{}|{sub}", c.name), s));
                    }
                }
                cmds.retain(|(_, c)| {
                    c.calls.get()
                        + c.rejected.load(Ordering::Relaxed)
                        + c.failed.load(Ordering::Relaxed)
                        > 0
                });
                cmds.sort_by(|a, b| a.0.cmp(&b.0));
                for (name, c) in cmds {
                    let calls = c.calls.get();
                    let usec = c.usec.get();
                    kv(
                        &format!("cmdstat_{name}"),
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
            "cluster" => kv(
                "cluster_enabled",
                if crate::cluster::get(srv).is_some() {
                    "1"
                } else {
                    "0"
                }
                .into(),
            ),
            "keyspace" => {
                for db in 0..srv.keyspace.num_dbs() {
                    let (keys, vol) = if srv.aof.loading() {
                        srv.keyspace.db_sizes_without_waiting(db)
                    } else {
                        srv.keyspace.db_sizes(db)
                    };
                    if keys > 0 {
                        kv(
                            &format!("db{db}"),
                            format!(
                                "keys={keys},expires={vol},avg_ttl={}",
                                srv.keyspace.dbs[db].avg_ttl(vol)
                            ),
                        );
                    }
                }
            }
            _ => {}
        }
    }
    out
}

fn info(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let sections: Vec<String> = a[1..]
        .iter()
        .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase())
        .collect();
    Ok(Reply::Verbatim(
        "txt",
        Bytes::from(info_text(ctx.srv, &sections)),
    ))
}
