//! DEBUG: the subcommands Redis's own test suites rely on, behind `enable-debug-command`.
//!
//! Refused unless `enable-debug-command` is `yes`, or `local` and the client is on a loopback
//! address or the Unix socket (Redis's rule for protected commands). SLEEP stops the whole
//! server for its length, as it stops Redis's only thread: the worker it runs on sleeps, and
//! every other worker waits before its next command ([`wait_while_stopped`]), so a client of
//! another worker gets no reply meanwhile (Redis's tests time MIGRATE and replication links
//! out that way). SET-ACTIVE-EXPIRE switches the
//! active-expiry cron. The dataset subcommands (DIGEST, DIGEST-VALUE, POPULATE, RELOAD) are in
//! [`super::debug_data`].

use super::flags::*;
use super::{CmdResult, Ctx, Keys, Spec};
use crate::config::dir;
use crate::protocol::Reply;
use bytes::Bytes;
use std::sync::atomic::{AtomicBool, Ordering};

pub static COMMANDS: &[Spec] = &[Spec::new(
    "debug",
    -2,
    ADMIN | NOSCRIPT | LOADING | STALE,
    Keys::None,
    debugCommand,
    "server",
)];

/// False after `DEBUG SET-ACTIVE-EXPIRE 0`: the cron then expires no key.
static ACTIVE_EXPIRE: AtomicBool = AtomicBool::new(true);

/// True while a DEBUG SLEEP runs: other commands wait for it to end.
static STOPPED: AtomicBool = AtomicBool::new(false);

/// Before a command runs: wait while a DEBUG SLEEP has the server stopped. Only read on the
/// command path (a flag no other time written, so it costs a load from a shared cache line);
/// the wait blocks the worker thread, as Redis's thread is blocked.
#[inline]
pub fn wait_while_stopped() {
    if STOPPED.load(Ordering::Relaxed) {
        while STOPPED.load(Ordering::Acquire) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// The same wait for a task rather than a command: what Redis's cron would do on its thread
/// (a replica reconnecting to its master) waits for a DEBUG SLEEP to end, without holding a
/// worker thread meanwhile.
pub async fn resumed() {
    while STOPPED.load(Ordering::Acquire) {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

pub fn active_expire_enabled() -> bool {
    ACTIVE_EXPIRE.load(Ordering::Relaxed)
}

/// Whether `enable-debug-command` lets this client run DEBUG.
fn allowed(ctx: &Ctx) -> bool {
    match ctx.srv.config.text(dir::ENABLE_DEBUG_COMMAND).as_str() {
        "yes" => true,
        "local" => {
            let addr = &ctx.client.info.addr;
            addr.starts_with("127.") || addr.starts_with("[::1]") || addr.starts_with('/')
        }
        _ => false,
    }
}

/// DEBUG's handler. Named as Redis names it: a stack trace taken while DEBUG runs (the
/// software watchdog's, a crash report's) shows this frame, and what looks for DEBUG in such a
/// trace (Redis's integration/logging test, an operator's grep) looks for `debugCommand`.
#[allow(non_snake_case)]
fn debugCommand(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    if !allowed(ctx) {
        return Err(Reply::error(
            "ERR DEBUG command not allowed. If the enable-debug-command option is set to \"local\", \
             you can run it from a local connection, otherwise you need to set this option in the \
             configuration file, and then restart the server.",
        ));
    }
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    if let Some(reply) = super::debug_data::dispatch(ctx, &sub, a) {
        return Ok(reply);
    }
    match (sub.as_str(), a.len()) {
        ("sleep", 3) => {
            let secs = match crate::util::numtext::parse_f64(&a[2]) {
                Some(s) if s.is_finite() && s >= 0.0 => s,
                _ => return Err(Reply::error(super::args::NOT_FLOAT)),
            };
            STOPPED.store(true, Ordering::Release);
            std::thread::sleep(std::time::Duration::from_secs_f64(secs.min(3600.0)));
            STOPPED.store(false, Ordering::Release);
            Ok(Reply::Ok)
        }
        ("aof-flush-sleep", 3) => {
            // Redis reads the microseconds with atoi: anything else counts as 0.
            let usec = crate::util::numtext::parse_i64(&a[2]).unwrap_or(0).max(0) as u64;
            ctx.srv.aof.set_flush_sleep(usec);
            Ok(Reply::Ok)
        }
        ("change-repl-id", 2) => {
            // A new replication ID and no secondary one: replicas must resynchronize in full.
            ctx.srv.repl.change_id();
            tracing::info!("Changing replication IDs after receiving DEBUG change-repl-id");
            Ok(Reply::Ok)
        }
        ("drop-cluster-packet-filter", 3) => match crate::util::numtext::parse_i64(&a[2]) {
            // Cluster bus messages of this type are dropped as they arrive (-1: none).
            Some(t) => {
                crate::cluster::nodes::DROP_FILTER.store(
                    t.clamp(-1, i64::from(i32::MAX)) as i32,
                    Ordering::Relaxed,
                );
                Ok(Reply::Ok)
            }
            None => Err(Reply::error(super::args::NOT_INT)),
        },
        ("clusterlink", 5) if a[2].eq_ignore_ascii_case(b"kill") => cluster_link_kill(ctx, a),
        ("set-active-expire", 3) => match crate::util::numtext::parse_i64(&a[2]) {
            Some(n) => {
                ACTIVE_EXPIRE.store(n != 0, Ordering::Relaxed);
                Ok(Reply::Ok)
            }
            None => Err(Reply::error(super::args::NOT_INT)),
        },
        ("set-skip-checksum-validation", 3) => {
            // Redis reads the flag with atoi: anything else counts as 0.
            let on = crate::util::numtext::parse_i64(&a[2]).unwrap_or(0) != 0;
            crate::persistence::rdb::SKIP_CHECKSUM.store(on, Ordering::Relaxed);
            Ok(Reply::Ok)
        }
        ("quicklist-packed-threshold", 3) => {
            // Redis keeps list elements of at least this size in quicklist nodes of their own
            // ("plain nodes"). A Podium list (`types::list`) holds every element in its own
            // allocation whatever its size, which is what a plain node gives, so no layout
            // changes: the size is checked as Redis checks it.
            let size = std::str::from_utf8(&a[2])
                .ok()
                .and_then(crate::config::parse_memory);
            match size {
                Some(n) if (0..=(1i64 << 32) - (1 << 20)).contains(&n) => Ok(Reply::Ok),
                _ => Err(Reply::error(
                    "ERR argument must be a memory value bigger than 1 and smaller than 4gb",
                )),
            }
        }
        ("set-disable-deny-scripts", 3) => match crate::util::numtext::parse_i64(&a[2]) {
            Some(n) => {
                crate::commands::scripting::set_deny_script_disabled(n != 0);
                Ok(Reply::Ok)
            }
            None => Err(Reply::error(super::args::NOT_INT)),
        },
        ("config-rewrite-force-all", 2) => {
            match crate::config_rewrite::rewrite_with(
                &ctx.srv.config,
                true,
                &crate::state::replica_link::followed_master(ctx.srv),
            ) {
                Ok(()) => Ok(Reply::Ok),
                Err(e) => Err(Reply::Error(format!(
                    "ERR CONFIG-REWRITE-FORCE-ALL failed: {}",
                    e.trim_start_matches("ERR ")
                ))),
            }
        }
        ("mallctl", n) if n >= 3 => {
            let name = mallctl_name(&a[2]);
            let new = match a.get(3) {
                Some(v) => match crate::util::numtext::parse_i64(v) {
                    Some(n) => Some(n),
                    None => return Err(Reply::error(super::args::NOT_INT)),
                },
                None => None,
            };
            match crate::alloc::mallctl_int(&name, new) {
                Ok(Some(old)) => Ok(Reply::Int(old)),
                Ok(None) => Ok(Reply::Ok),
                Err(e) => Err(errno_reply(e)),
            }
        }
        ("mallctl-str", n) if n >= 3 => {
            let name = mallctl_name(&a[2]);
            match crate::alloc::mallctl_str(&name, a.get(3).map(|v| &v[..])) {
                Ok(Some(old)) => Ok(Reply::Bulk(Bytes::from(old))),
                Ok(None) => Ok(Reply::Ok),
                Err(e) => Err(errno_reply(e)),
            }
        }
        ("pause-cron", 3) => match crate::util::numtext::parse_i64(&a[2]) {
            Some(n) => {
                ctx.srv.signal_shutdown.pause_cron(n != 0);
                Ok(Reply::Ok)
            }
            None => Err(Reply::error(super::args::NOT_INT)),
        },
        (sub, n) if sub == "replicate" && n >= 3 => {
            // The command goes to the replicas only, in the database they last selected, and
            // does not run here (Redis's test of what replicas do with a command that fails).
            ctx.srv
                .repl
                .feed(None, &a[2..], ctx.srv.replica_obuf_limit());
            Ok(Reply::Ok)
        }
        ("protocol", 3) => Ok(protocol_sample(ctx, &a[2])),
        ("replybuffer", 4) => {
            let what = String::from_utf8_lossy(&a[2]).to_ascii_lowercase();
            match what.as_str() {
                "peak-reset-time" => {
                    if super::args::eq(&a[3], "never") {
                        crate::obuf::set_peak_reset_time(Some(-1));
                    } else if super::args::eq(&a[3], "reset") {
                        crate::obuf::set_peak_reset_time(None);
                    } else {
                        match crate::util::numtext::parse_i64(&a[3]) {
                            Some(ms) => crate::obuf::set_peak_reset_time(Some(ms)),
                            None => return Err(Reply::error(super::args::NOT_INT)),
                        }
                    }
                }
                // Redis reads the flag with atoi: anything else counts as 0.
                "resizing" => crate::obuf::set_resizing(
                    crate::util::numtext::parse_i64(&a[3]).unwrap_or(0) != 0,
                ),
                _ => return Err(replybuffer_syntax_error(&a[1])),
            }
            Ok(Reply::Ok)
        }
        ("replybuffer", _) => Err(replybuffer_syntax_error(&a[1])),
        ("segfault", 2) => {
            // SAFETY: raise() only sends the signal to this thread; the crash handler writes
            // the report and the process ends, as Redis's DEBUG SEGFAULT makes it. Covered by
            // integration/logging ("Crash report generated on DEBUG SEGFAULT").
            unsafe {
                libc::raise(libc::SIGSEGV);
            }
            Ok(Reply::NoReply)
        }
        ("help", 2) => Ok(Reply::Array(
            [
                "DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "SLEEP <seconds>",
                "    Stop the server's worker thread for <seconds> (a decimal number).",
                "SET-ACTIVE-EXPIRE <0|1>",
                "    Turn the active expiry of keys off or on.",
                "DROP-CLUSTER-PACKET-FILTER <packet-type>",
                "    Drop all packets that match the filtered type. Set to -1 allow all packets.",
                "CLUSTERLINK KILL <to|from|all> <node-id>",
                "    Close the cluster bus link to and/or from the node; the cron opens it again.",
                "SET-DISABLE-DENY-SCRIPTS <0|1>",
                "    Let scripts run commands normally refused to them (testing only).",
                "QUICKLIST-PACKED-THRESHOLD <size>",
                "    Check a list plain-node threshold: Podium stores every list element on its own.",
                "SET-SKIP-CHECKSUM-VALIDATION <0|1>",
                "    Skip the CRC-64 check of RESTORE payloads (they are still validated in full).",
                "RELOAD",
                "    Save the dataset and load it again.",
                "CONFIG-REWRITE-FORCE-ALL",
                "    Like CONFIG REWRITE but writes every directive, defaults included.",
                "MALLCTL <key> [<val>]",
                "    Get or set a malloc tuning integer.",
                "MALLCTL-STR <key> [<val>]",
                "    Get or set a malloc tuning string.",
                "PAUSE-CRON <0|1>",
                "    Stop the server's cron (active expiry, save points, scheduled shutdowns) or resume it.",
                "PROTOCOL <type>",
                "    Reply with a sample of a protocol type: string, integer, double, bignum, null,",
                "    array, set, map, attrib, push, verbatim, true, false.",
                "REPLYBUFFER PEAK-RESET-TIME <NEVER|RESET|time>",
                "    How often (ms) the cron forgets the peak of each client's reply buffer; NEVER keeps it,",
                "    RESET goes back to the default (5000).",
                "REPLYBUFFER RESIZING <0|1>",
                "    Stop or resume the cron's resizing of the clients' reply buffers.",
                "REPLICATE <command> [<arg> ...]",
                "    Send a command to the replicas only, without running it here.",
                "SEGFAULT",
                "    Crash the server with a segmentation fault (the crash report goes to the log).",
                "HELP",
                "    Prints this help.",
            ]
            .iter()
            .chain(super::debug_data::HELP)
            .map(|s| Reply::StatusOwned(s.to_string()))
            .collect(),
        )),
        _ => Err(Reply::error(format!(
            "ERR DEBUG {} is not supported by Podium. Try DEBUG HELP.",
            String::from_utf8_lossy(&a[1])
        ))),
    }
}

/// DEBUG CLUSTERLINK KILL <to|from|all> <node-id>: close the bus link this node opened to
/// the node (`to`), the one the node opened here (`from`), or both, as Redis's
/// freeClusterLink does; a message sent meanwhile on that link is lost, and the cron
/// reconnects. Redis's tests lose a shard message this way.
fn cluster_link_kill(ctx: &Ctx, a: &[Bytes]) -> CmdResult {
    let Some(cluster) = crate::cluster::get(ctx.srv) else {
        return Err(Reply::error(
            "ERR Debug option only available for cluster mode enabled setup!",
        ));
    };
    let direction = String::from_utf8_lossy(&a[3]).to_ascii_lowercase();
    let found = cluster.event(ctx.srv, |st, _| {
        let Some(id) = st.lookup(&a[4]) else {
            return Some(false);
        };
        let (to, from) = (st.node(id).link, st.node(id).inbound_link);
        let links = match direction.as_str() {
            "to" => vec![to],
            "from" => vec![from],
            "all" => vec![to, from],
            _ => return None,
        };
        for link in links.into_iter().flatten() {
            st.free_link(link);
        }
        Some(true)
    });
    match found {
        Some(true) => Ok(Reply::Ok),
        Some(false) => Err(Reply::error(format!(
            "ERR Unknown node {}",
            String::from_utf8_lossy(&a[4])
        ))),
        None => Err(Reply::error(format!(
            "ERR Unknown direction {}",
            String::from_utf8_lossy(&a[3])
        ))),
    }
}

/// Redis's error for a DEBUG REPLYBUFFER it does not understand (`sub` as the client wrote it).
fn replybuffer_syntax_error(sub: &[u8]) -> Reply {
    Reply::error(format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try DEBUG HELP.",
        String::from_utf8_lossy(sub)
    ))
}

/// DEBUG PROTOCOL <type>: a fixed sample reply of each RESP type, as Redis's (clients and
/// scripts test their parsers with it). The same values as Redis's, so replies compare byte
/// for byte.
fn protocol_sample(ctx: &Ctx, name: &[u8]) -> Reply {
    let resp3 = ctx.client.resp == crate::protocol::Resp::V3;
    let text = |s: &'static str| Reply::Bulk(Bytes::from_static(s.as_bytes()));
    let kind = String::from_utf8_lossy(name).to_ascii_lowercase();
    match kind.as_str() {
        "string" => text("Hello World"),
        "integer" => Reply::Int(12345),
        // Redis's sample value (not pi: it is 3.141 exactly as Redis writes it).
        #[allow(clippy::approx_constant)]
        "double" => Reply::Double(3.141),
        "bignum" => Reply::BigNumber(Bytes::from_static(b"1234567999999999999999999999999999999")),
        "null" => Reply::Null,
        "array" => Reply::Array((0..3).map(Reply::Int).collect()),
        "set" => Reply::Set((0..3).map(Reply::Int).collect()),
        "map" => Reply::Map((0..3).map(|j| (Reply::Int(j), Reply::Bool(j == 1))).collect()),
        "attrib" => Reply::Attributed(
            vec![(
                text("key-popularity"),
                Reply::Array(vec![text("key:123"), Reply::Int(90)]),
            )],
            Box::new(text("Some real reply following the attribute")),
        ),
        "push" if !resp3 => Reply::error("ERR RESP2 is not supported by this command"),
        // A push message, then the command's own reply (a client discarding pushes still
        // gets one), written together as Redis writes them.
        "push" => {
            let mut wire = Vec::new();
            Reply::Push(vec![text("server-cpu-usage"), Reply::Int(42)])
                .encode(crate::protocol::Resp::V3, &mut wire);
            text("Some real reply following the push reply")
                .encode(crate::protocol::Resp::V3, &mut wire);
            Reply::Raw(Bytes::from(wire))
        }
        "true" => Reply::Bool(true),
        "false" => Reply::Bool(false),
        "verbatim" => Reply::Verbatim("txt", Bytes::from_static(b"This is a verbatim\nstring")),
        _ => Reply::error(
            "ERR Wrong protocol type name. Please use one of the following: string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|true|false",
        ),
    }
}

/// A jemalloc control's name as Redis hands it to mallctl: the argument up to its first NUL.
fn mallctl_name(a: &[u8]) -> std::ffi::CString {
    let name = crate::util::c_str(a);
    // No NUL is left in `name`; an empty CString on the impossible failure names no control.
    std::ffi::CString::new(name).unwrap_or_default()
}

/// Redis's reply to a failed mallctl: the error number's text.
fn errno_reply(e: i32) -> Reply {
    Reply::Error(format!(
        "ERR {}",
        crate::util::strerror(&std::io::Error::from_raw_os_error(e))
    ))
}
