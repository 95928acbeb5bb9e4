//! MIGRATE and RESTORE-ASKING: moving keys to another server.
//!
//! MIGRATE is DUMP here and RESTORE there, then DEL here for each key the target acknowledged
//! (unless COPY). It speaks to the target as any client would: an optional AUTH, a SELECT
//! when the cached connection last used another database, then one RESTORE per key with its
//! remaining time to live (keys that expired meanwhile are skipped), all written at once and
//! answered line by line, as Redis's migrateCommand does. Connections are cached per
//! `host:port` (64 at most, a random one dropped when full) and closed by the cron after 10
//! seconds unused; INFO's `migrate_cached_sockets` counts them.
//!
//! The command keeps its keys' shard locks for the whole exchange, so what it moves is exactly
//! what it deletes; other keys' clients are served meanwhile (it runs off the I/O thread,
//! `long.rs`), where Redis blocks the whole server for it. The timeout bounds connecting and
//! each read and write. A socket error before the first reply retries once on a fresh
//! connection (a cached one may have been closed by the target), except after a timeout.
//!
//! In cluster mode the target gets RESTORE-ASKING, as from Redis: it counts as asked, so a
//! node importing the slot takes the keys before the slot is its own. RESTORE-ASKING itself
//! is RESTORE with that flag (the dispatcher's routing treats it as asked).

use super::args::{eq, int, NOT_INT, SYNTAX};
use super::flags::*;
use super::{CmdResult, Ctx, Keys, Spec};
use crate::protocol::Reply;
use bytes::Bytes;
use parking_lot::Mutex;
use rand::Rng;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

pub static COMMANDS: &[Spec] = &[Spec::new(
    "migrate",
    -6,
    WRITE,
    Keys::Custom(migrate_keys),
    migrate,
    "generic",
)];

/// Cached connections at most (Redis's MIGRATE_SOCKET_CACHE_ITEMS).
const CACHE_ITEMS: usize = 64;
/// A cached connection unused this long is closed by the cron.
const CACHE_TTL: Duration = Duration::from_secs(10);
/// Longest reply line read back (Redis reads into 1 KiB buffers).
const MAX_LINE: usize = 1024;

/// A connection to the target: TCP, or TLS over it (`tls-cluster yes`, as Redis's MIGRATE
/// connects with the cluster's connection type).
enum Stream {
    Plain(TcpStream),
    Tls(Box<openssl::ssl::SslStream<TcpStream>>),
}

impl Stream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.get_ref(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(data),
            Stream::Tls(s) => s.write(data),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

struct Cached {
    conn: BufReader<Stream>,
    /// The database the target connection has selected (-1: unknown, SELECT next time).
    last_db: i64,
    last_use: Instant,
}

static CACHE: Mutex<Option<HashMap<Vec<u8>, Cached>>> = Mutex::new(None);

/// INFO's `migrate_cached_sockets`.
pub(crate) fn cached_sockets() -> usize {
    CACHE.lock().as_ref().map_or(0, HashMap::len)
}

/// Close the connections unused for longer than [`CACHE_TTL`] (called by the cron).
pub(crate) fn close_idle() {
    if let Some(m) = CACHE.lock().as_mut() {
        m.retain(|_, c| c.last_use.elapsed() <= CACHE_TTL);
    }
}

/// Key positions: argument 3, or everything after KEYS when argument 3 is empty (Redis's
/// migrateGetKeys, which takes the first KEYS from argument 6 on).
/// MIGRATE's keys: the key argument, or those after KEYS (found past the options, skipping
/// AUTH's and AUTH2's values, which could read "keys"). KEYS with a non-empty key argument is
/// a syntax error the command reports: no keys then.
fn migrate_keys(a: &[Bytes]) -> Vec<usize> {
    let mut i = 6;
    while i < a.len() {
        if eq(&a[i], "keys") {
            return if a[3].is_empty() {
                (i + 1..a.len()).collect()
            } else {
                Vec::new()
            };
        }
        if eq(&a[i], "auth") {
            i += 1;
        } else if eq(&a[i], "auth2") {
            i += 2;
        }
        i += 1;
    }
    vec![3]
}

struct Options<'a> {
    copy: bool,
    replace: bool,
    user: Option<&'a [u8]>,
    password: Option<&'a [u8]>,
    keys: &'a [Bytes],
}

fn parse_options(a: &[Bytes]) -> Result<Options<'_>, Reply> {
    let mut o = Options {
        copy: false,
        replace: false,
        user: None,
        password: None,
        keys: &a[3..4],
    };
    let mut j = 6;
    while j < a.len() {
        let more = a.len() - 1 - j;
        if eq(&a[j], "copy") {
            o.copy = true;
        } else if eq(&a[j], "replace") {
            o.replace = true;
        } else if eq(&a[j], "auth") {
            if more == 0 {
                return Err(Reply::error(SYNTAX));
            }
            j += 1;
            o.password = Some(&a[j]);
        } else if eq(&a[j], "auth2") {
            if more < 2 {
                return Err(Reply::error(SYNTAX));
            }
            o.user = Some(&a[j + 1]);
            o.password = Some(&a[j + 2]);
            j += 2;
        } else if eq(&a[j], "keys") {
            if !a[3].is_empty() {
                return Err(Reply::error(
                    "ERR When using MIGRATE KEYS option, the key argument must be set to the empty string",
                ));
            }
            o.keys = &a[j + 1..];
            break;
        } else {
            return Err(Reply::error(SYNTAX));
        }
        j += 1;
    }
    Ok(o)
}

/// One key to send: its name, DUMP payload and absolute expiry (if any).
struct Item {
    key: Bytes,
    payload: Vec<u8>,
    expire_at: Option<i64>,
}

fn bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(b.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

fn array_header(out: &mut Vec<u8>, n: usize) {
    out.push(b'*');
    out.extend_from_slice(n.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Why an exchange with the target failed at the socket level.
#[derive(Clone, Copy)]
struct SocketError {
    writing: bool,
    timed_out: bool,
}

fn io_error(writing: bool, e: &std::io::Error) -> SocketError {
    SocketError {
        writing,
        timed_out: matches!(
            e.kind(),
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
        ),
    }
}

/// One reply line without its CRLF; an empty line, end of file or an over-long line is an error.
fn read_line(conn: &mut BufReader<Stream>) -> Result<Vec<u8>, SocketError> {
    let mut line = Vec::new();
    let n = conn
        .by_ref()
        .take(MAX_LINE as u64)
        .read_until(b'\n', &mut line)
        .map_err(|e| io_error(false, &e))?;
    let failed = SocketError {
        writing: false,
        timed_out: false,
    };
    if n == 0 || line.last() != Some(&b'\n') {
        return Err(failed);
    }
    line.pop();
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    if line.is_empty() {
        return Err(failed);
    }
    Ok(line)
}

/// A connection to `host:port` within `timeout`, from the cache or new, over TLS with a
/// session from `tls` when it is given (`tls-cluster yes`; no session, no connection). Taken
/// out of the cache while in use; [`give_back`] returns it.
fn connect(
    name: &[u8],
    host: &[u8],
    port: &[u8],
    timeout: Duration,
    tls: Option<&crate::tls::TlsState>,
) -> Option<Cached> {
    if let Some(mut c) = CACHE.lock().as_mut().and_then(|m| m.remove(name)) {
        c.last_use = Instant::now();
        return Some(c);
    }
    // Redis reads the port with atoi: what is not a number is port 0, which fails to connect.
    let port: u16 = std::str::from_utf8(port)
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    let host = std::str::from_utf8(host).ok()?;
    let addr = (host, port).to_socket_addrs().ok()?.next()?;
    let stream = TcpStream::connect_timeout(&addr, timeout).ok()?;
    let _ = stream.set_nodelay(true);
    let stream = match tls {
        None => Stream::Plain(stream),
        Some(tls) => {
            let ssl = tls.connecting().ok()?;
            stream.set_read_timeout(Some(timeout)).ok()?;
            stream.set_write_timeout(Some(timeout)).ok()?;
            Stream::Tls(Box::new(ssl.connect(stream).ok()?))
        }
    };
    Some(Cached {
        conn: BufReader::new(stream),
        last_db: -1,
        last_use: Instant::now(),
    })
}

fn give_back(name: Vec<u8>, c: Cached) {
    let mut guard = CACHE.lock();
    let m = guard.get_or_insert_with(HashMap::new);
    if m.len() >= CACHE_ITEMS && !m.contains_key(&name) {
        let victim = rand::thread_rng().gen_range(0..m.len());
        if let Some(k) = m.keys().nth(victim).cloned() {
            m.remove(&k);
        }
    }
    m.insert(name, c);
}

/// MIGRATE host port key|"" destination-db timeout [COPY] [REPLACE] [AUTH password]
/// [AUTH2 username password] [KEYS key ...]
fn migrate(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let o = parse_options(a)?;
    let (Ok(timeout), Ok(db)) = (int(&a[5]), int(&a[4])) else {
        return Err(Reply::error(NOT_INT));
    };
    let timeout = Duration::from_millis(if timeout <= 0 { 1000 } else { timeout as u64 });
    // The keys that are here (an expired one counts as missing).
    let mut present: Vec<Bytes> = Vec::new();
    {
        let mut h = ctx.db();
        for k in o.keys {
            if h.value(k).is_some() {
                present.push(k.clone());
            }
        }
    }
    if present.is_empty() {
        return Ok(Reply::Status("NOKEY"));
    }
    let mut items = Vec::with_capacity(present.len());
    {
        let mut h = ctx.db();
        for key in present {
            let Some(v) = h.value(&key) else { continue };
            let payload = crate::persistence::rdb::dump(v);
            let expire_at = h
                .expire_at(&key)
                .filter(|&t| t != crate::keyspace::NO_EXPIRE);
            items.push(Item {
                key,
                payload,
                expire_at,
            });
        }
    }
    let name = [&a[1][..], b":", &a[2][..]].concat();
    let mut may_retry = true;
    loop {
        let tls = ctx
            .srv
            .config
            .flag(crate::config::dir::TLS_CLUSTER)
            .then_some(&ctx.srv.tls);
        let Some(mut conn) = connect(&name, &a[1], &a[2], timeout, tls) else {
            return Err(Reply::error(
                "IOERR error or timeout connecting to the client",
            ));
        };
        match exchange(ctx, &o, db, timeout, &items, &mut conn) {
            Exchange::Done { reply, acked, keep } => {
                if acked.len() > 1 {
                    ctx.propagate_as(vec![acked]);
                }
                if keep {
                    give_back(name, conn);
                }
                return Ok(reply);
            }
            Exchange::Failed {
                err,
                acked,
                replies_read,
            } => {
                // The connection is dropped (closed), so the next MIGRATE starts afresh.
                drop(conn);
                if acked.len() > 1 {
                    ctx.propagate_as(vec![acked]);
                }
                // Retry only when no RESTORE was answered: nothing can have happened there.
                if replies_read == 0 && may_retry && !err.timed_out {
                    may_retry = false;
                    continue;
                }
                return Err(Reply::error(format!(
                    "IOERR error or timeout {} to target instance",
                    if err.writing { "writing" } else { "reading" }
                )));
            }
        }
    }
}

enum Exchange {
    /// The target answered every request (with successes or an error, already in `reply`);
    /// `keep`: the connection can be cached (false after a socket error that followed an
    /// error reply, which is then what the client gets).
    Done {
        reply: Reply,
        acked: Vec<Bytes>,
        keep: bool,
    },
    /// A socket error; `acked` holds DEL and the keys already moved (and deleted here).
    Failed {
        err: SocketError,
        acked: Vec<Bytes>,
        /// RESTORE replies read before the error.
        replies_read: usize,
    },
}

/// Send the requests for `items` and read the replies, deleting each acknowledged key here
/// (unless COPY). `acked` starts with "DEL": the command to log in MIGRATE's place.
fn exchange(
    ctx: &mut Ctx,
    o: &Options<'_>,
    db: i64,
    timeout: Duration,
    items: &[Item],
    conn: &mut Cached,
) -> Exchange {
    let mut acked = vec![Bytes::from_static(b"DEL")];
    let fail = |writing: bool, e: &std::io::Error, acked: Vec<Bytes>| Exchange::Failed {
        err: io_error(writing, e),
        acked,
        replies_read: 0,
    };
    let stream = conn.conn.get_ref().tcp();
    if let Err(e) = stream
        .set_write_timeout(Some(timeout))
        .and_then(|()| stream.set_read_timeout(Some(timeout)))
    {
        return fail(true, &e, acked);
    }
    let mut out = Vec::new();
    if let Some(p) = o.password {
        array_header(&mut out, if o.user.is_some() { 3 } else { 2 });
        bulk(&mut out, b"AUTH");
        if let Some(u) = o.user {
            bulk(&mut out, u);
        }
        bulk(&mut out, p);
    }
    let select = conn.last_db != db;
    if select {
        array_header(&mut out, 2);
        bulk(&mut out, b"SELECT");
        bulk(&mut out, db.to_string().as_bytes());
    }
    let now = ctx.now_ms();
    let restore: &[u8] = if crate::cluster::get(ctx.srv).is_some() {
        b"RESTORE-ASKING"
    } else {
        b"RESTORE"
    };
    let mut sent: Vec<&Item> = Vec::with_capacity(items.len());
    for it in items {
        let ttl = match it.expire_at {
            Some(at) if at - now < 0 => continue,
            Some(at) => (at - now).max(1),
            None => 0,
        };
        sent.push(it);
        array_header(&mut out, if o.replace { 5 } else { 4 });
        bulk(&mut out, restore);
        bulk(&mut out, &it.key);
        bulk(&mut out, ttl.to_string().as_bytes());
        bulk(&mut out, &it.payload);
        if o.replace {
            bulk(&mut out, b"REPLACE");
        }
    }
    for chunk in out.chunks(64 * 1024) {
        if let Err(e) = conn.conn.get_mut().write_all(chunk) {
            return fail(true, &e, acked);
        }
    }
    let auth_reply = match o.password {
        Some(_) => match read_line(&mut conn.conn) {
            Ok(l) => Some(l),
            Err(err) => {
                return Exchange::Failed {
                    err,
                    acked,
                    replies_read: 0,
                }
            }
        },
        None => None,
    };
    let select_reply = if select {
        match read_line(&mut conn.conn) {
            Ok(l) => Some(l),
            Err(err) => {
                return Exchange::Failed {
                    err,
                    acked,
                    replies_read: 0,
                }
            }
        }
    } else {
        None
    };
    let mut target_error: Option<Reply> = None;
    for (read, it) in sent.into_iter().enumerate() {
        let line = match read_line(&mut conn.conn) {
            Ok(l) => l,
            Err(_) if target_error.is_some() => {
                let reply = target_error.unwrap_or(Reply::Ok);
                return Exchange::Done {
                    reply,
                    acked,
                    keep: false,
                };
            }
            Err(err) => {
                return Exchange::Failed {
                    err,
                    acked,
                    replies_read: read,
                }
            }
        };
        // An error to AUTH or SELECT fails every RESTORE after it: report the first cause.
        let failed = [
            auth_reply.as_deref(),
            select_reply.as_deref(),
            Some(&line[..]),
        ]
        .into_iter()
        .flatten()
        .find(|l| l.first() == Some(&b'-'));
        if let Some(err) = failed {
            if target_error.is_none() {
                conn.last_db = -1;
                target_error = Some(Reply::error(format!(
                    "ERR Target instance replied with error: {}",
                    String::from_utf8_lossy(&err[1..])
                )));
            }
        } else if !o.copy {
            let mut h = ctx.db();
            h.remove(&it.key);
            h.modified(&it.key);
            h.notify(crate::notify::GENERIC, "del", &it.key);
            ctx.dirty += 1;
            acked.push(it.key.clone());
        }
    }
    let reply = match target_error {
        Some(e) => e,
        None => {
            conn.last_db = db;
            Reply::Ok
        }
    };
    Exchange::Done {
        reply,
        acked,
        keep: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<Bytes> {
        v.iter()
            .map(|s| Bytes::copy_from_slice(s.as_bytes()))
            .collect()
    }

    #[test]
    fn keys_are_argument_three_or_after_keys() {
        assert_eq!(
            migrate_keys(&args(&["migrate", "h", "1", "k", "0", "10"])),
            vec![3]
        );
        assert_eq!(
            migrate_keys(&args(&[
                "migrate", "h", "1", "", "0", "10", "COPY", "KEYS", "a", "b"
            ])),
            vec![8, 9]
        );
        // KEYS with a non-empty key argument is an error the command reports: no keys.
        assert!(
            migrate_keys(&args(&["migrate", "h", "1", "k", "0", "10", "KEYS", "a"])).is_empty()
        );
        // AUTH's password may read "keys": it is skipped, as AUTH2's user and password are.
        assert_eq!(
            migrate_keys(&args(&[
                "migrate", "h", "1", "", "0", "10", "AUTH", "keys", "AUTH2", "keys", "keys",
                "KEYS", "a"
            ])),
            vec![12]
        );
    }

    #[test]
    fn options_are_checked_as_redis_does() {
        let err = |v: &[&str]| match parse_options(&args(v)) {
            Err(Reply::Error(e)) => e,
            _ => String::new(),
        };
        assert_eq!(err(&["migrate", "h", "1", "k", "0", "10", "AUTH"]), SYNTAX);
        assert_eq!(
            err(&["migrate", "h", "1", "k", "0", "10", "AUTH2", "u"]),
            SYNTAX
        );
        assert_eq!(err(&["migrate", "h", "1", "k", "0", "10", "NOPE"]), SYNTAX);
        assert!(err(&["migrate", "h", "1", "k", "0", "10", "KEYS", "a"]).contains("empty string"));
        let a = args(&[
            "migrate", "h", "1", "", "0", "10", "COPY", "REPLACE", "KEYS", "a",
        ]);
        let o = parse_options(&a).map_err(|_| ()).expect("valid options");
        assert!(o.copy && o.replace && o.keys.len() == 1);
    }
}
