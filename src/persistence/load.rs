//! Loading the AOF at startup: parse each file's RESP commands and run them through the normal
//! dispatcher with a private client, logging suppressed.
//!
//! Files are replayed in manifest order (base, then the incremental files), each with a fresh
//! client (database 0, no transaction), as Redis does. `SELECT` is handled here; `MULTI`/`EXEC`
//! go through the dispatcher, so a transaction is applied as a unit. Lines starting with `#`
//! (Redis's timestamp annotations) are skipped.
//!
//! Damage: if the LAST file ends in the middle of a command (or inside a MULTI without its EXEC)
//! and `aof-load-truncated` is yes, the incomplete tail is cut off (the file is truncated to
//! the last complete command) with a warning naming the offset. A truncated earlier file, or
//! any malformed data that is not a short read at the end of the file, is an error naming the
//! file and the byte offset, and the server refuses to start.

use crate::client::{Client, ClientInfo};
use crate::config::dir;
use crate::state::Server;
use bytes::Bytes;
use std::path::Path;
use std::sync::Arc;

/// Result of parsing one command at an offset.
#[derive(Debug, PartialEq)]
pub enum Parse {
    /// A command and the offset just after it.
    Command(Vec<Bytes>, usize),
    /// The data ends before the command does.
    Truncated,
    /// Malformed data at this offset.
    Bad(usize, &'static str),
}

/// A CRLF-terminated header line starting at `pos`: (its text without CRLF, offset after).
fn line(d: &[u8], pos: usize) -> Result<(&[u8], usize), Parse> {
    // Header lines are short (`*<argc>` or `$<len>`): a missing CRLF within 32 bytes is damage,
    // unless the file simply ends first.
    let end = (pos + 32).min(d.len());
    match d[pos..end].windows(2).position(|w| w == b"\r\n") {
        Some(i) => Ok((&d[pos..pos + i], pos + i + 2)),
        None if end == d.len() => Err(Parse::Truncated),
        None => Err(Parse::Bad(pos, "header line too long")),
    }
}

fn number(s: &[u8]) -> Option<usize> {
    if s.is_empty() || s.len() > 18 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// Parse the command that starts at `pos` (`pos < d.len()`).
pub fn parse_at(d: &[u8], pos: usize) -> Parse {
    if d[pos] != b'*' {
        return Parse::Bad(pos, "expected '*'");
    }
    let (head, mut p) = match line(d, pos + 1) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let Some(argc) = number(head).filter(|&n| n >= 1) else {
        return Parse::Bad(pos, "bad argument count");
    };
    let mut args = Vec::with_capacity(argc.min(1024));
    for _ in 0..argc {
        if p >= d.len() {
            return Parse::Truncated;
        }
        if d[p] != b'$' {
            return Parse::Bad(p, "expected '$'");
        }
        let (head, q) = match line(d, p + 1) {
            Ok(x) => x,
            Err(e) => return e,
        };
        let Some(len) = number(head) else {
            return Parse::Bad(p, "bad bulk length");
        };
        if q + len + 2 > d.len() {
            // A partial CRLF is checked as far as it goes.
            if q + len < d.len() && d[q + len] != b'\r' {
                return Parse::Bad(q + len, "bulk not followed by CRLF");
            }
            return Parse::Truncated;
        }
        if &d[q + len..q + len + 2] != b"\r\n" {
            return Parse::Bad(q + len, "bulk not followed by CRLF");
        }
        args.push(Bytes::copy_from_slice(&d[q..q + len]));
        p = q + len + 2;
    }
    Parse::Command(args, p)
}

fn fake_client(srv: &Server) -> Client {
    let info = Arc::new(ClientInfo::new(
        u64::MAX,
        "AOF-loading".into(),
        String::new(),
        crate::clock::unix_ms(),
    ));
    let _ = srv;
    let mut c = Client::new(u64::MAX, info);
    c.authenticated = true;
    c
}

/// What loading one file found.
#[derive(Debug, Default)]
pub struct FileLoad {
    pub commands: u64,
    pub bytes: u64,
    /// Set when the tail was cut off: the offset the file now ends at.
    pub truncated_at: Option<u64>,
}

/// Replay one file. `last` says whether it is the last file of the AOF (only that one may be
/// truncated); `old_style` that it is a single-file AOF of Redis before 7.0 (named as
/// `appendfilename`), which only changes what the log calls its RDB part.
pub fn load_file(
    srv: &Server,
    path: &Path,
    last: bool,
    old_style: bool,
) -> Result<FileLoad, String> {
    let shown = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let data = match std::fs::read(path) {
        Ok(d) => d,
        Err(e) => {
            return Err(format!(
                "Fatal error: can't open the append log file {shown} for reading: {e}"
            ))
        }
    };
    let mut client = fake_client(srv);
    let mut out = FileLoad {
        bytes: data.len() as u64,
        ..FileLoad::default()
    };
    let mut pos = 0usize;
    if data.starts_with(b"REDIS") {
        // An RDB preamble (a `.base.rdb` file, or a Redis 6 AOF written with
        // aof-use-rdb-preamble yes): the RDB image, checked in full, then any commands after it.
        if old_style {
            tracing::info!("Reading RDB preamble from AOF file...");
        } else {
            tracing::info!("Reading RDB base file on AOF loading...");
        }
        let limits = super::snapshot::limits(srv);
        let parsed = super::snapshot::parse(&data, &shown, &limits, srv.keyspace.num_dbs(), None)
            .map_err(|e| {
                if old_style {
                    format!("Error reading the RDB preamble of the AOF file {shown}, AOF loading aborted: {e}")
                } else {
                    format!("Error reading the RDB base file {shown}, AOF loading aborted: {e}")
                }
            })?;
        pos = parsed.end;
        let keys = super::snapshot::apply(srv, parsed, &shown)?;
        tracing::info!("Loaded {keys} keys from the RDB part of {shown}");
        if old_style {
            tracing::info!("Reading the remaining AOF tail...");
        }
    }
    let mut valid_up_to = pos;
    let mut truncated = false;
    let mut last_cron = std::time::Instant::now();
    let mut delay = srv.config.int(dir::KEY_LOAD_DELAY);
    while pos < data.len() {
        if data[pos] == b'#' {
            // Annotation line.
            match data[pos..].iter().position(|&b| b == b'\n') {
                Some(i) => {
                    pos += i + 1;
                    if client.multi.is_none() {
                        valid_up_to = pos;
                    }
                    continue;
                }
                None => {
                    truncated = true;
                    break;
                }
            }
        }
        let (args, next) = match parse_at(&data, pos) {
            Parse::Command(a, n) => (a, n),
            Parse::Truncated => {
                truncated = true;
                break;
            }
            Parse::Bad(at, why) => {
                return Err(format!(
                    "Bad file format reading the append only file {shown} at offset {at} ({why}): make a backup of \
                     your AOF file, then use ./redis-check-aof --fix <filename.manifest>"
                ));
            }
        };
        run(srv, &mut client, args)
            .map_err(|e| format!("{e} reading the append only file {shown} at offset {pos}"))?;
        out.commands += 1;
        if out.commands.is_multiple_of(LOADING_CRON_EVERY) {
            srv.defrag.while_loading(srv, &mut last_cron);
            // Re-read now and then: tests change it with CONFIG SET while a load runs.
            delay = srv.config.int(dir::KEY_LOAD_DELAY);
        }
        // `key-load-delay`, per command as Redis's AOF loader applies it.
        crate::util::debug_delay(delay);
        pos = next;
        if client.multi.is_none() {
            valid_up_to = pos;
        }
    }
    if !truncated && client.multi.is_some() {
        tracing::warn!("Revert incomplete MULTI/EXEC transaction in AOF file {shown}");
        truncated = true;
    }
    if truncated {
        if !last {
            return Err(format!(
                "Fatal error: the truncated file {shown} (offset {valid_up_to} of {}) is not the last file of the AOF",
                data.len()
            ));
        }
        if !srv.config.flag(dir::AOF_LOAD_TRUNCATED) {
            return Err(format!(
                "Unexpected end of file reading the append only file {shown} (the last complete command ends at \
                 offset {valid_up_to} of {}). You can: 1) Make a backup of your AOF file, then use \
                 ./redis-check-aof --fix <filename.manifest>. 2) Alternatively you can set the \
                 'aof-load-truncated' configuration option to yes and restart the server.",
                data.len()
            ));
        }
        tracing::warn!("!!! Warning: short read while loading the AOF file {shown}!!!");
        tracing::warn!("!!! Truncating the AOF {shown} at offset {valid_up_to} !!!");
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| format!("can't truncate {shown}: {e}"))?;
        f.set_len(valid_up_to as u64)
            .and_then(|_| f.sync_all())
            .map_err(|e| format!("Error truncating the AOF file {shown}: {e}"))?;
        tracing::warn!("AOF {shown} loaded anyway because aof-load-truncated is enabled");
        out.truncated_at = Some(valid_up_to as u64);
    }
    // A transaction cut off at the end left commands queued: drop them.
    client.multi = None;
    Ok(out)
}

/// Commands replayed between two runs of the work due meanwhile (active defrag), as Redis
/// serves its events every 1024 commands of an AOF it loads.
const LOADING_CRON_EVERY: u64 = 1024;

/// Execute one logged command.
fn run(srv: &Server, client: &mut Client, args: Vec<Bytes>) -> Result<(), String> {
    // Inside MULTI a SELECT is queued like the rest (a transaction or a script that changed
    // database), so the commands before it still run in the database they were logged in.
    if args[0].eq_ignore_ascii_case(b"select") && client.multi.is_none() {
        let db = args
            .get(1)
            .and_then(|a| number(a))
            .filter(|&d| d < srv.keyspace.num_dbs());
        let Some(db) = db.filter(|_| args.len() == 2) else {
            return Err("Invalid SELECT".to_string());
        };
        client.select(db);
        return Ok(());
    }
    (super::upcalls().run_logged)(srv, client, args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(parts: &[&str]) -> Vec<u8> {
        let mut v = format!("*{}\r\n", parts.len()).into_bytes();
        for p in parts {
            v.extend_from_slice(format!("${}\r\n{}\r\n", p.len(), p).as_bytes());
        }
        v
    }

    #[test]
    fn parses_commands_and_detects_truncation_everywhere() {
        let mut d = cmd(&["SET", "key", "value"]);
        let first = d.len();
        d.extend(cmd(&["ZADD", "z", "1.5", "member"]));
        match parse_at(&d, 0) {
            Parse::Command(a, n) => {
                assert_eq!(
                    a,
                    vec![Bytes::from("SET"), Bytes::from("key"), Bytes::from("value")]
                );
                assert_eq!(n, first);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(parse_at(&d, first), Parse::Command(_, n) if n == d.len()));
        // Every proper prefix of the second command is a truncation, never damage.
        for cut in first + 1..d.len() {
            assert_eq!(parse_at(&d[..cut], first), Parse::Truncated, "cut at {cut}");
        }
    }

    #[test]
    fn detects_damage() {
        let d = cmd(&["SET", "key", "value"]);
        let mut bad = d.clone();
        bad[0] = b'x';
        assert!(matches!(parse_at(&bad, 0), Parse::Bad(0, _)));
        // A bulk length that no longer matches its data.
        let mut bad = d.clone();
        let i = bad.windows(2).position(|w| w == b"$5").unwrap();
        bad[i + 1] = b'4';
        assert!(matches!(parse_at(&bad, 0), Parse::Bad(_, _)));
        let mut bad = d.clone();
        bad[1] = b'x';
        assert!(matches!(parse_at(&bad, 0), Parse::Bad(0, _)));
    }
}
