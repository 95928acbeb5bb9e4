//! SLOWLOG: the commands that took longer than `slowlog-log-slower-than` microseconds.
//!
//! [`SlowLog`] keeps the newest `slowlog-max-len` entries, newest first, each with Redis's
//! fields: a sequence id, the Unix time it was logged, its duration, its arguments (at most 32,
//! each cut to 128 bytes, as Redis trims them), the client's address and name. [`record`] is
//! called after every command the dispatcher runs (inside EXEC each command is logged, not
//! EXEC itself, as Redis); secrets are redacted the way Redis redacts them (AUTH, HELLO AUTH,
//! CONFIG SET requirepass/masterauth).

use super::flags::*;
use super::{Cmd, CmdResult, Ctx, Keys, Spec};
use crate::client::Client;
use crate::protocol::Reply;
use crate::state::slowlog::Entry;
pub use crate::state::slowlog::SlowLog;
use crate::state::Server;
use bytes::Bytes;
use std::sync::atomic::Ordering;

pub static COMMANDS: &[Spec] = &[Spec::new(
    "slowlog",
    -2,
    ADMIN | LOADING | STALE,
    Keys::None,
    slowlog,
    "server",
)];

/// Arguments kept per entry, and bytes kept per argument (Redis's limits).
const MAX_ARGC: usize = 32;
const MAX_ARG_BYTES: usize = 128;

/// What an entry keeps of a command's arguments: Redis's trimming and redaction.
fn logged_args(args: &[Bytes]) -> Vec<Bytes> {
    let redacted = Bytes::from_static(b"(redacted)");
    let secret = crate::util::redact::secret_positions(args);
    let n = args.len().min(MAX_ARGC);
    let mut out = Vec::with_capacity(n);
    for (i, a) in args.iter().enumerate().take(n) {
        if i == MAX_ARGC - 1 && args.len() > MAX_ARGC {
            out.push(Bytes::from(format!(
                "... ({} more arguments)",
                args.len() - MAX_ARGC + 1
            )));
            break;
        }
        if secret.contains(&i) {
            out.push(redacted.clone());
        } else if a.len() > MAX_ARG_BYTES {
            let mut s = a[..MAX_ARG_BYTES].to_vec();
            s.extend_from_slice(format!("... ({} more bytes)", a.len() - MAX_ARG_BYTES).as_bytes());
            out.push(Bytes::from(s));
        } else {
            // A copy: the argument is a slice of the connection's read buffer, which a clone
            // would keep allocated for as long as the entry is in the log (a 100,000-argument
            // SADD's 1 MB buffer, in unit/lazyfree).
            out.push(Bytes::copy_from_slice(a));
        }
    }
    out
}

impl SlowLog {
    fn push(&self, client: &Client, args: &[Bytes], duration_us: u64, max_len: usize) {
        let entry = Entry {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            time: crate::clock::unix_ms() / 1000,
            duration_us,
            args: logged_args(args),
            addr: client.info.addr.clone(),
            name: client.info.name.lock().clone().unwrap_or_default(),
        };
        let mut e = self.entries.lock();
        e.push_front(entry);
        e.truncate(max_len);
    }

    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// After a command ran for `duration_us`: log it if it was slow enough (and the per-command
/// latency figures, see [`super::latency::after_command`]).
#[inline]
pub fn record(srv: &Server, client: &Client, spec: &Cmd, args: &[Bytes], duration_us: u64) {
    let hot = &srv.config.hot;
    let threshold = hot.slowlog_slower_than.load(Ordering::Relaxed);
    if threshold >= 0 && duration_us >= threshold as u64 && spec.name != "exec" {
        let max_len = hot.slowlog_max_len.load(Ordering::Relaxed).max(0) as usize;
        srv.slowlog.push(client, args, duration_us, max_len);
    }
    super::latency::after_command(srv, spec, args, duration_us);
}

fn slowlog(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    let log = &ctx.srv.slowlog;
    match (sub.as_str(), a.len()) {
        ("help", 2) => Ok(Reply::Array(
            [
                "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "GET [<count>]",
                "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
                "    Entries are made of:",
                "    id, timestamp, time in microseconds, arguments array, client IP and port,",
                "    client name",
                "LEN",
                "    Return the length of the slowlog.",
                "RESET",
                "    Reset the slowlog.",
                "HELP",
                "    Prints this help.",
            ]
            .iter()
            .map(|s| Reply::StatusOwned(s.to_string()))
            .collect(),
        )),
        ("reset", 2) => {
            log.entries.lock().clear();
            Ok(Reply::Ok)
        }
        ("len", 2) => Ok(Reply::Int(log.len() as i64)),
        ("get", 2 | 3) => {
            let count = if a.len() == 3 {
                match crate::util::numtext::parse_i64(&a[2]) {
                    Some(n) if n >= -1 => n,
                    Some(_) => {
                        return Err(Reply::error(
                            "ERR count should be greater than or equal to -1",
                        ))
                    }
                    None => return Err(Reply::error(super::args::NOT_INT)),
                }
            } else {
                10
            };
            let entries = log.entries.lock();
            let n = if count == -1 {
                entries.len()
            } else {
                (count as usize).min(entries.len())
            };
            Ok(Reply::Array(
                entries
                    .iter()
                    .take(n)
                    .map(|e| {
                        Reply::Array(vec![
                            Reply::Int(e.id as i64),
                            Reply::Int(e.time),
                            Reply::Int(e.duration_us as i64),
                            Reply::Array(e.args.iter().cloned().map(Reply::Bulk).collect()),
                            Reply::bulk(e.addr.clone().into_bytes()),
                            Reply::Bulk(e.name.clone()),
                        ])
                    })
                    .collect(),
            ))
        }
        ("help" | "reset" | "len" | "get", _) => {
            Err(crate::cmdspec::wrong_arity(&format!("slowlog|{sub}")))
        }
        _ => Err(Reply::error(format!(
            "ERR unknown subcommand '{}'. Try SLOWLOG HELP.",
            String::from_utf8_lossy(&a[1])
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(v: &[&str]) -> Vec<Bytes> {
        v.iter().map(|s| Bytes::from(s.to_string())).collect()
    }

    #[test]
    fn arguments_are_trimmed_and_secrets_redacted() {
        let many: Vec<String> = (0..35).map(|i| i.to_string()).collect();
        let mut args = vec![Bytes::from_static(b"sadd")];
        args.extend(many.iter().map(|s| Bytes::from(s.clone())));
        let out = logged_args(&args);
        assert_eq!(out.len(), 32);
        assert_eq!(&out[31][..], b"... (5 more arguments)");
        let long = "A".repeat(129);
        let out = logged_args(&b(&["set", "k", &long]));
        assert_eq!(out[2].len(), 128 + "... (1 more bytes)".len());
        assert!(out[2].ends_with(b"... (1 more bytes)"));
        let out = logged_args(&b(&["acl", "SETUSER", "u", ">pw", "+get"]));
        assert_eq!(
            out,
            b(&["acl", "SETUSER", "(redacted)", "(redacted)", "(redacted)"])
        );
        let out = logged_args(&b(&["AUTH", "user", "pw"]));
        assert_eq!(out, b(&["AUTH", "(redacted)", "(redacted)"]));
        let out = logged_args(&b(&["config", "set", "masterauth", "x", "maxmemory", "1"]));
        assert_eq!(
            out,
            b(&[
                "config",
                "set",
                "masterauth",
                "(redacted)",
                "maxmemory",
                "1"
            ])
        );
        let out = logged_args(&b(&["hello", "3", "AUTH", "u", "p", "SETNAME", "n"]));
        assert_eq!(
            out,
            b(&[
                "hello",
                "3",
                "AUTH",
                "(redacted)",
                "(redacted)",
                "SETNAME",
                "n"
            ])
        );
    }
}
