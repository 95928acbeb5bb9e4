//! The Lua debugger (Redis's LDB): `SCRIPT DEBUG YES|SYNC|NO`, then one EVAL that stops at
//! each line of the script and takes commands from the client until the script ends.
//!
//! As in Redis, the session talks to the client's socket directly from the Lua line hook:
//! the connection hands over its descriptor and any input it had not run yet before the EVAL
//! is dispatched ([`DebugIo`]); each batch of log lines is written as one array of status
//! lines; commands are read with Redis's forgiving multi-bulk reader (and, as Redis does, the
//! whole input buffer is dropped once a command was read from it). The session ends with an
//! `<endsession>` line, then the EVAL's own reply, then the connection closes.
//!
//! SYNC runs the script in the server, holding every database's locks for the whole session
//! (the debugger's `redis` command may touch any key): other clients' commands on keys wait,
//! as Redis's whole server waits, and the script's changes stay. YES forks first: the child
//! runs the session on its copy of the data and exits, the server closes its side of the
//! connection and goes on, and nothing the script does reaches the real dataset. The fork
//! happens with every shard locked by the forking thread, so the child owns every lock it
//! needs; commands a session runs in the child are not logged anywhere (the AOF and replica
//! streams of a child are memory that dies with it).
//!
//! The session state is per thread ([`SESSION`]): a script runs on one thread from start to
//! end, and `redis.call`, `redis.debug` and `redis.breakpoint` reach the same state from
//! their callbacks.

use super::convert::format_g;
use crate::net::ClientSocket;
use crate::protocol::{Reply, Resp};
use bytes::Bytes;
use mlua::{ffi, Lua, MultiValue, Value as LuaValue};
use std::cell::{Cell, RefCell};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most breakpoints a session keeps (Redis's LDB_BREAKPOINTS_MAX).
const MAX_BREAKPOINTS: usize = 64;
/// Default cut-off of logged replies and values (LDB_MAX_LEN_DEFAULT).
const DEFAULT_MAXLEN: usize = 256;
/// Unread debugger input past this ends the script with an error.
const MAX_INPUT: usize = 1 << 20;
/// How long a write to the debugging client may wait for room (Redis's send timeout).
const SEND_TIMEOUT: Duration = Duration::from_millis(5000);
/// How often (in instructions) the hook looks at the clock while the script runs freely.
const TIMEOUT_CHECK_EVERY: u32 = 100_000;
/// How deep `print` and `eval` results go into nested tables (LUA_MINSTACK / 2).
const MAX_VALUE_DEPTH: usize = 10;

pub use crate::client::{DebugIo, DebugMode};

/// One debugging session.
struct Session {
    sock: Arc<ClientSocket>,
    /// Input not yet taken as a command.
    input: Vec<u8>,
    /// Log lines not yet sent.
    logs: Vec<Vec<u8>>,
    breakpoints: Vec<i32>,
    /// Stop at the next line whatever the breakpoints say.
    step: bool,
    /// Stop at the next line: the script called `redis.breakpoint()`.
    lua_breakpoint: bool,
    /// The script's lines, for listings.
    source: Vec<Vec<u8>>,
    current_line: i32,
    /// Cut-off of logged replies and values (0: none).
    maxlen: usize,
    maxlen_hint_sent: bool,
    /// When the script last resumed (the timeout that stops an endless loop counts from it).
    resumed: Instant,
}

thread_local! {
    static SESSION: RefCell<Option<Session>> = const { RefCell::new(None) };
    /// Mirrors `SESSION.is_some()` for the checks on every `redis.call`.
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
}

/// Set in a forked debugging child: it must not hand its thread to the (absent) runtime.
static IN_FORKED_CHILD: AtomicBool = AtomicBool::new(false);

/// True in a forked debugging session's process.
pub(super) fn in_forked_child() -> bool {
    IN_FORKED_CHILD.load(Ordering::Relaxed)
}

/// A session runs on this thread.
pub(super) fn active() -> bool {
    ACTIVE.with(|a| a.get())
}

fn with_session<R>(f: impl FnOnce(&mut Session) -> R) -> Option<R> {
    if !active() {
        return None;
    }
    SESSION.with(|s| s.try_borrow_mut().ok()?.as_mut().map(f))
}

/// Redis's `ldbIsEnabled`: a session runs and is stepping (what `redis.call` logs under).
fn logging() -> bool {
    with_session(|s| s.step).unwrap_or(false)
}

impl Session {
    fn log(&mut self, line: impl Into<Vec<u8>>) {
        self.logs.push(line.into());
    }

    /// Log a reply or value, cut at `maxlen` (with a one-time hint about `maxlen 0`).
    fn log_trimmed(&mut self, mut line: Vec<u8>) {
        let mut trimmed = false;
        if self.maxlen > 0 && line.len() > self.maxlen {
            line.truncate(self.maxlen);
            line.extend_from_slice(b" ...");
            trimmed = true;
        }
        self.log(line);
        if trimmed && !self.maxlen_hint_sent {
            self.maxlen_hint_sent = true;
            self.log("<hint> The above reply was trimmed. Use 'maxlen 0' to disable trimming.");
        }
    }

    /// Send the pending log lines as one array of status lines (newlines become spaces).
    fn send_logs(&mut self) {
        let mut out = format!("*{}\r\n", self.logs.len()).into_bytes();
        for line in self.logs.drain(..) {
            out.push(b'+');
            out.extend(line.iter().map(|&b| match b {
                b'\r' | b'\n' => b' ',
                b => b,
            }));
            out.extend_from_slice(b"\r\n");
        }
        // A failed write is noticed by the next read, which ends the interaction.
        let _ = write_all(&self.sock, &out);
    }

    fn source_line(&self, line: i32) -> &[u8] {
        match usize::try_from(line - 1)
            .ok()
            .and_then(|i| self.source.get(i))
        {
            Some(l) => l,
            None => b"<out of range source code line>",
        }
    }

    fn is_breakpoint(&self, line: i32) -> bool {
        self.breakpoints.contains(&line)
    }

    fn log_source_line(&mut self, line: i32) {
        let prefix = match (self.current_line == line, self.is_breakpoint(line)) {
            (true, true) => "->#",
            (true, false) => "-> ",
            (false, true) => "  #",
            (false, false) => "   ",
        };
        let mut text = format!("{prefix}{line:<3} ").into_bytes();
        text.extend_from_slice(self.source_line(line));
        self.log(text);
    }

    /// The lines within `context` of `around` (every line when `around` is 0).
    fn list(&mut self, around: i32, context: i32) {
        for line in 1..=self.source.len() as i32 {
            if around != 0 && (around - line).abs() > context {
                continue;
            }
            self.log_source_line(line);
        }
    }

    fn break_command(&mut self, args: &[Vec<u8>]) {
        if args.len() == 1 {
            if self.breakpoints.is_empty() {
                self.log("No breakpoints set. Use 'b <line>' to add one.");
            } else {
                self.log(format!("{} breakpoints set:", self.breakpoints.len()));
                for line in self.breakpoints.clone() {
                    self.log_source_line(line);
                }
            }
            return;
        }
        for arg in &args[1..] {
            let Some(line) = crate::util::numtext::parse_i64(arg) else {
                let mut text = b"Invalid argument:'".to_vec();
                text.extend_from_slice(arg);
                text.push(b'\'');
                self.log(text);
                continue;
            };
            if line == 0 {
                self.breakpoints.clear();
                self.log("All breakpoints removed.");
            } else if line > 0 {
                if self.breakpoints.len() == MAX_BREAKPOINTS {
                    self.log("Too many breakpoints set.");
                } else if line <= self.source.len() as i64 && !self.is_breakpoint(line as i32) {
                    self.breakpoints.push(line as i32);
                    self.list(line as i32, 1);
                } else {
                    self.log("Wrong line number.");
                }
            } else {
                let line = -line;
                match self.breakpoints.iter().position(|&b| i64::from(b) == line) {
                    Some(i) => {
                        self.breakpoints.remove(i);
                        self.log("Breakpoint removed.");
                    }
                    None => self.log("No breakpoint in the specified line."),
                }
            }
        }
    }

    fn maxlen_command(&mut self, args: &[Vec<u8>]) {
        if args.len() == 2 {
            let mut value = atoi(&args[1]);
            self.maxlen_hint_sent = true;
            if value != 0 && value <= 60 {
                value = 60;
            }
            self.maxlen = value.max(0) as usize;
        }
        if self.maxlen > 0 {
            self.log(format!(
                "<value> replies are truncated at {} bytes.",
                self.maxlen
            ));
        } else {
            self.log("<value> replies are unlimited.");
        }
    }

    /// Take the next command from the input, reading more when it is incomplete. Err: a
    /// protocol error or an overlong input (the script stops with it); Ok(None): the client
    /// went away.
    fn read_command(&mut self) -> Result<Option<Vec<Vec<u8>>>, &'static str> {
        loop {
            match parse_command(&self.input) {
                Parsed::Command(args) => {
                    // As Redis, whatever else was in the buffer goes with it.
                    self.input.clear();
                    return Ok(Some(args));
                }
                Parsed::ProtocolError => return Err("protocol error"),
                Parsed::Incomplete => {}
            }
            let mut chunk = [0u8; 1024];
            let n = match read_some(&self.sock, &mut chunk) {
                Some(n) if n > 0 => n,
                _ => {
                    // The client is gone: the script runs on without stopping (until the
                    // timeout finds it looping, see `hook`).
                    self.step = false;
                    self.breakpoints.clear();
                    return Ok(None);
                }
            };
            self.input.extend_from_slice(&chunk[..n]);
            if self.input.len() > MAX_INPUT {
                self.input.clear();
                return Err("max client buffer reached");
            }
        }
    }
}

/// What the debugger's command reader made of its input.
enum Parsed {
    Command(Vec<Vec<u8>>),
    Incomplete,
    ProtocolError,
}

/// C's atoi: optional blanks and sign, then digits, stopping at anything else.
fn atoi(text: &[u8]) -> i64 {
    let text = match text.iter().position(|b| !b.is_ascii_whitespace()) {
        Some(i) => &text[i..],
        None => return 0,
    };
    let (negative, digits) = match text.first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let mut n: i64 = 0;
    for &b in digits.iter().take_while(|b| b.is_ascii_digit()) {
        n = n.saturating_mul(10).saturating_add(i64::from(b - b'0'));
    }
    if negative {
        -n
    } else {
        n
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Redis's debugger reader (ldbReplParseCommand): skip to the first `*`, then a count of 1 to
/// 1024 bulk strings of 1 to 1024 bytes each.
fn parse_command(input: &[u8]) -> Parsed {
    if input.is_empty() {
        return Parsed::Incomplete;
    }
    let Some(star) = input.iter().position(|&b| b == b'*') else {
        return Parsed::ProtocolError;
    };
    // A header line at `p` (its type byte is checked by the caller): its number, 1 to 1024,
    // and where the next line starts.
    let header = |p: usize| -> Result<(usize, usize), Parsed> {
        let eol = find(&input[p..], b"\r\n").ok_or(Parsed::Incomplete)?;
        match atoi(&input[p + 1..p + eol]) {
            n @ 1..=1024 => Ok((n as usize, p + eol + 2)),
            _ => Err(Parsed::ProtocolError),
        }
    };
    let (count, mut p) = match header(star) {
        Ok(h) => h,
        Err(e) => return e,
    };
    let mut args = Vec::with_capacity(count);
    while args.len() < count {
        if p >= input.len() {
            return Parsed::Incomplete;
        }
        if input[p] != b'$' {
            return Parsed::ProtocolError;
        }
        let len;
        (len, p) = match header(p) {
            Ok(h) => h,
            Err(e) => return e,
        };
        if p + len + 2 > input.len() {
            return Parsed::Incomplete;
        }
        args.push(input[p..p + len].to_vec());
        p += len;
        if &input[p..p + 2] != b"\r\n" {
            return Parsed::ProtocolError;
        }
        p += 2;
    }
    Parsed::Command(args)
}

/// Wait until `fd` is ready for `events` (or `timeout` passed; None waits for ever).
fn wait_ready(fd: RawFd, events: i16, timeout: Option<Duration>) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as i32);
    loop {
        // SAFETY: poll(2) on one pollfd we own.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return r > 0;
    }
}

/// Read what the (non-blocking) socket has, waiting for something first; None on an error.
fn read_some(sock: &ClientSocket, buf: &mut [u8]) -> Option<usize> {
    loop {
        match sock.read_now(buf) {
            Ok(n) => return Some(n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if !blocking(|| wait_ready(sock.raw_fd(), libc::POLLIN, None)) {
                    return None;
                }
            }
            Err(_) => return None,
        }
    }
}

/// Write all of `data`, waiting for room at most [`SEND_TIMEOUT`] at a time.
fn write_all(sock: &ClientSocket, mut data: &[u8]) -> bool {
    while !data.is_empty() {
        match sock.try_write(data) {
            Ok(0) => return false,
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if !wait_ready(sock.raw_fd(), libc::POLLOUT, Some(SEND_TIMEOUT)) {
                    return false;
                }
            }
            Err(_) => return false,
        }
    }
    true
}

/// Run `f`, which waits for the client, off the runtime's worker pool when on a worker (as
/// a long script does; see engine::hand_off_worker), so the worker's other clients go on.
fn blocking<R>(f: impl FnOnce() -> R) -> R {
    let on_workers = !in_forked_child()
        && tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if on_workers {
        crate::util::write_turn::block_in_place(f)
    } else {
        f()
    }
}

/// Start a session on this thread for script `body`.
pub(super) fn start(io: DebugIo, body: &[u8]) {
    let mut text = body;
    while let Some((&last, rest)) = text.split_last() {
        if last == b'\n' || last == b'\r' {
            text = rest;
        } else {
            break;
        }
    }
    let source = text.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
    let session = Session {
        sock: io.sock,
        input: io.input,
        logs: Vec::new(),
        breakpoints: Vec::new(),
        step: true,
        lua_breakpoint: false,
        source,
        current_line: 0,
        maxlen: DEFAULT_MAXLEN,
        maxlen_hint_sent: false,
        resumed: Instant::now(),
    };
    SESSION.with(|s| *s.borrow_mut() = Some(session));
    ACTIVE.with(|a| a.set(true));
}

/// End this thread's session: the last log lines and `<endsession>` go out.
pub(super) fn end() -> Option<Arc<ClientSocket>> {
    ACTIVE.with(|a| a.set(false));
    let mut session = SESSION.with(|s| s.borrow_mut().take())?;
    session.log("<endsession>");
    session.send_logs();
    Some(session.sock)
}

/// Write a reply to the debugging client (a forked session's final EVAL reply).
pub(super) fn write_reply(sock: &ClientSocket, reply: &Reply, resp: Resp) {
    let mut out = Vec::new();
    reply.encode(resp, &mut out);
    let _ = write_all(sock, &out);
}

/// Mark this process as a forked debugging session.
pub(super) fn mark_forked_child() {
    IN_FORKED_CHILD.store(true, Ordering::Relaxed);
}

/// `redis.call` is about to run `argv`: log it while stepping (at most ten words).
pub(super) fn log_call(argv: &[Bytes]) {
    if !logging() {
        return;
    }
    let mut text = b"<redis>".to_vec();
    for (j, arg) in argv.iter().enumerate() {
        if j == 10 {
            text.extend_from_slice(format!(" ... ({} more)", argv.len() - j - 1).as_bytes());
            break;
        }
        text.push(b' ');
        text.extend_from_slice(arg);
    }
    with_session(|s| s.log(text));
}

/// A `redis.call` was refused before it ran (`error`: the reply's text): logged while
/// stepping, as Redis logs the error it hands the script.
pub(super) fn log_refusal(error: &str) {
    if !logging() {
        return;
    }
    let text = match error.strip_prefix("ERR ") {
        Some(plain) => plain.to_string(),
        None => format!("-{error}"),
    };
    with_session(|s| s.log(format!("<error> {text}")));
}

/// The reply of a `redis.call` (as the script's protocol `resp` has it): logged while
/// stepping, in the debugger's human form.
pub(super) fn log_reply(reply: &Reply, resp: Resp) {
    if !logging() {
        return;
    }
    let mut wire = Vec::new();
    reply.encode(resp, &mut wire);
    let mut text = b"<reply> ".to_vec();
    protocol_to_human(&wire, &mut text);
    with_session(|s| {
        if let Reply::Error(e) = reply {
            s.log(format!("<error> -{e}"));
        }
        s.log_trimmed(text)
    });
}

/// `redis.breakpoint()`: stop at the next line; false outside a session.
pub(super) fn breakpoint() -> bool {
    with_session(|s| s.lua_breakpoint = true).is_some()
}

/// `redis.debug(...)`: log the values at the current line.
pub(super) fn debug_values(values: &MultiValue) {
    let Some(line) = with_session(|s| s.current_line) else {
        return;
    };
    let mut text = format!("<debug> line {line}: ").into_bytes();
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            text.extend_from_slice(b", ");
        }
        cat_value(&mut text, v, 0);
    }
    with_session(|s| s.log(text));
}

/// A Lua value as the debugger shows it (Redis's ldbCatStackValue).
fn cat_value(out: &mut Vec<u8>, v: &LuaValue, level: usize) {
    if level == MAX_VALUE_DEPTH {
        out.extend_from_slice(b"<max recursion level reached! Nested table?>");
        return;
    }
    match v {
        LuaValue::String(s) => crate::util::sds_repr(&s.as_bytes(), out),
        LuaValue::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        LuaValue::Integer(i) => out.extend_from_slice(format_g(*i as f64, 6).as_bytes()),
        LuaValue::Number(n) => out.extend_from_slice(format_g(*n, 6).as_bytes()),
        LuaValue::Nil => out.extend_from_slice(b"nil"),
        LuaValue::Table(t) => {
            let mut is_array = true;
            let mut as_array = Vec::new();
            let mut as_map = Vec::new();
            let entries = t.pairs::<LuaValue, LuaValue>().flatten();
            for (expected, (k, v)) in (1i64..).zip(entries) {
                let index = match &k {
                    LuaValue::Integer(i) => Some(*i as f64),
                    LuaValue::Number(n) => Some(*n),
                    _ => None,
                };
                if is_array && index != Some(expected as f64) {
                    is_array = false;
                }
                if !as_array.is_empty() {
                    as_array.extend_from_slice(b"; ");
                    as_map.extend_from_slice(b"; ");
                }
                cat_value(&mut as_array, &v, level + 1);
                as_map.push(b'[');
                cat_value(&mut as_map, &k, level + 1);
                as_map.extend_from_slice(b"]=");
                cat_value(&mut as_map, &v, level + 1);
            }
            out.push(b'{');
            out.extend_from_slice(if is_array { &as_array } else { &as_map });
            out.push(b'}');
        }
        other => {
            let kind = match other {
                LuaValue::Function(_) => "function",
                LuaValue::UserData(_) => "userdata",
                LuaValue::Thread(_) => "thread",
                LuaValue::LightUserData(_) => "light-userdata",
                _ => {
                    out.extend_from_slice(b"\"<unknown-lua-type>\"");
                    return;
                }
            };
            out.extend_from_slice(format!("\"{kind}@{:p}\"", other.to_pointer()).as_bytes());
        }
    }
}

/// Append the human form of the RESP reply at the start of `wire` to `out`; the rest of
/// `wire` (Redis's ldbRedisProtocolToHuman).
fn protocol_to_human<'w>(wire: &'w [u8], out: &mut Vec<u8>) -> &'w [u8] {
    let Some(&kind) = wire.first() else {
        return wire;
    };
    let eol = find(wire, b"\r\n").unwrap_or(wire.len());
    let header = &wire[1..eol];
    let rest = wire.get(eol + 2..).unwrap_or_default();
    let count = atoi(header);
    match kind {
        b':' => {
            out.extend_from_slice(header);
            rest
        }
        b'$' => {
            if count < 0 {
                out.extend_from_slice(b"NULL");
                return rest;
            }
            let len = (count as usize).min(rest.len());
            crate::util::sds_repr(&rest[..len], out);
            rest.get(len + 2..).unwrap_or_default()
        }
        b'+' | b'-' => {
            crate::util::sds_repr(&wire[..eol], out);
            rest
        }
        b'*' | b'~' => {
            if kind == b'*' && count < 0 {
                out.extend_from_slice(b"NULL");
                return rest;
            }
            out.extend_from_slice(if kind == b'*' { b"[" } else { b"~(" });
            let mut p = rest;
            for j in 0..count.max(0) {
                p = protocol_to_human(p, out);
                if j != count - 1 {
                    out.push(b',');
                }
            }
            out.push(if kind == b'*' { b']' } else { b')' });
            p
        }
        b'%' => {
            out.push(b'{');
            let mut p = rest;
            for j in 0..count.max(0) {
                p = protocol_to_human(p, out);
                out.extend_from_slice(b" => ");
                p = protocol_to_human(p, out);
                if j != count - 1 {
                    out.push(b',');
                }
            }
            out.push(b'}');
            p
        }
        b'_' => {
            out.extend_from_slice(b"(null)");
            rest
        }
        b'#' => {
            out.extend_from_slice(if header.first() == Some(&b't') {
                b"#true"
            } else {
                b"#false"
            });
            rest
        }
        b',' => {
            out.extend_from_slice(b"(double) ");
            out.extend_from_slice(header);
            rest
        }
        // Redis leaves other types (big numbers, verbatim strings) out of the log.
        _ => rest,
    }
}

/// Why the hook stops the script: raised as the script's error.
fn stop_error(text: &str) -> mlua::Error {
    mlua::Error::external(super::error::CommandError(format!("ERR {text}")))
}

/// The line / count hook of a debugging run (Redis's luaLdbLineHook).
pub(super) fn hook(lua: &Lua, debug: &mlua::Debug, timeout_ms: i64) -> mlua::Result<()> {
    let line = debug.curr_line();
    let in_script = debug
        .source()
        .short_src
        .is_some_and(|s| s.contains("user_script"));
    let count_event = matches!(debug.event(), mlua::DebugEvent::Count);
    let Some((stop, reason)) = with_session(|s| {
        s.current_line = line;
        let bp = s.is_breakpoint(line) || s.lua_breakpoint;
        if !in_script {
            return (false, "");
        }
        let mut timed_out = false;
        if count_event && !s.step && !bp {
            let limit = if timeout_ms > 0 { timeout_ms } else { 5000 };
            if s.resumed.elapsed().as_millis() as i64 >= limit {
                timed_out = true;
                s.step = true;
            } else {
                return (false, "");
            }
        }
        if !(s.step || bp) {
            return (false, "");
        }
        let reason = if bp {
            if s.lua_breakpoint {
                "redis.breakpoint() called"
            } else {
                "break point"
            }
        } else if timed_out {
            "timeout reached, infinite loop?"
        } else {
            "step over"
        };
        (true, reason)
    }) else {
        return Ok(());
    };
    if !stop {
        return Ok(());
    }
    let timed_out = reason.starts_with("timeout");
    with_session(|s| {
        s.step = false;
        s.lua_breakpoint = false;
        s.log(format!("* Stopped at {line}, stop reason = {reason}"));
        s.log_source_line(line);
        s.send_logs();
    });
    let gone = repl(lua)?;
    if gone && timed_out {
        return Err(stop_error(
            "timeout during Lua debugging with client closing connection",
        ));
    }
    with_session(|s| s.resumed = Instant::now());
    Ok(())
}

/// Take debugger commands until one resumes the script. Ok(true): the client went away.
fn repl(lua: &Lua) -> mlua::Result<bool> {
    loop {
        let args = match with_session(|s| s.read_command()) {
            Some(Ok(Some(args))) => args,
            Some(Ok(None)) | None => return Ok(true),
            Some(Err(e)) => return Err(stop_error(e)),
        };
        let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
        match name.as_str() {
            "h" | "help" => with_session(|s| {
                for line in HELP {
                    s.log(*line);
                }
                s.send_logs();
            })
            .unwrap_or(()),
            "s" | "step" | "n" | "next" => {
                with_session(|s| s.step = true);
                return Ok(false);
            }
            "c" | "continue" => return Ok(false),
            "t" | "trace" => {
                trace(lua);
                with_session(Session::send_logs);
            }
            "m" | "maxlen" => {
                with_session(|s| {
                    s.maxlen_command(&args);
                    s.send_logs()
                });
            }
            "b" | "break" => {
                with_session(|s| {
                    s.break_command(&args);
                    s.send_logs()
                });
            }
            "e" | "eval" => {
                eval(lua, &args);
                with_session(Session::send_logs);
            }
            "a" | "abort" => return Err(stop_error("script aborted for user request")),
            "r" | "redis" if args.len() > 1 => {
                redis_command(lua, &args);
                with_session(Session::send_logs);
            }
            "p" | "print" => {
                if args.len() == 2 {
                    print_variable(lua, &args[1]);
                } else {
                    print_all(lua);
                }
                with_session(Session::send_logs);
            }
            "l" | "list" => {
                with_session(|s| {
                    let mut around = s.current_line;
                    let mut context = 5;
                    if args.len() > 1 {
                        let n = atoi(&args[1]);
                        if n > 0 {
                            around = n as i32;
                        }
                    }
                    if args.len() > 2 {
                        context = atoi(&args[2]) as i32;
                    }
                    s.list(around, context);
                    s.send_logs();
                });
            }
            "w" | "whole" => {
                with_session(|s| {
                    s.list(1, 1_000_000);
                    s.send_logs();
                });
            }
            _ => {
                with_session(|s| {
                    s.log(
                        "<error> Unknown Redis Lua debugger command or wrong number of arguments.",
                    );
                    s.send_logs();
                });
            }
        }
    }
}

const HELP: &[&str] = &[
    "Redis Lua debugger help:",
    "[h]elp               Show this help.",
    "[s]tep               Run current line and stop again.",
    "[n]ext               Alias for step.",
    "[c]ontinue           Run till next breakpoint.",
    "[l]ist               List source code around current line.",
    "[l]ist [line]        List source code around [line].",
    "                     line = 0 means: current position.",
    "[l]ist [line] [ctx]  In this form [ctx] specifies how many lines",
    "                     to show before/after [line].",
    "[w]hole              List all source code. Alias for 'list 1 1000000'.",
    "[p]rint              Show all the local variables.",
    "[p]rint <var>        Show the value of the specified variable.",
    "                     Can also show global vars KEYS and ARGV.",
    "[b]reak              Show all breakpoints.",
    "[b]reak <line>       Add a breakpoint to the specified line.",
    "[b]reak -<line>      Remove breakpoint from the specified line.",
    "[b]reak 0            Remove all breakpoints.",
    "[t]race              Show a backtrace.",
    "[e]val <code>        Execute some Lua code (in a different callframe).",
    "[r]edis <cmd>        Execute a Redis command.",
    "[m]axlen [len]       Trim logged Redis replies and Lua var dumps to len.",
    "                     Specifying zero as <len> means unlimited.",
    "[a]bort              Stop the execution of the script. In sync",
    "                     mode dataset changes will be retained.",
    "",
    "Debugger functions you can call from Lua scripts:",
    "redis.debug()        Produce logs in the debugger console.",
    "redis.breakpoint()   Stop execution like if there was a breakpoint in the",
    "                     next line of code.",
];

/// `trace`: the script's frames from the current one outwards.
fn trace(lua: &Lua) {
    let mut level = 0;
    let mut lines = Vec::new();
    while let Some(frame) = lua.inspect_stack(level) {
        let in_script = frame
            .source()
            .short_src
            .is_some_and(|s| s.contains("user_script"));
        if in_script {
            let name = frame
                .names()
                .name
                .map(|n| n.into_owned())
                .unwrap_or_else(|| "top level".to_string());
            lines.push((
                format!("{} {name}:", if level == 0 { "In" } else { "From" }),
                frame.curr_line(),
            ));
        }
        level += 1;
    }
    with_session(|s| {
        for (text, line) in lines {
            s.log(text);
            s.log_source_line(line);
        }
        if level == 0 {
            s.log("<error> Can't retrieve Lua stack.");
        }
    });
}

/// `eval <code>`: run a fragment (as an expression first, else as statements) and log what
/// it returned.
fn eval(lua: &Lua, args: &[Vec<u8>]) {
    let code = args[1..].join(&b' ');
    let mut expr = b"return ".to_vec();
    expr.extend_from_slice(&code);
    let compiled = lua
        .load(&expr[..])
        .set_name("@ldb_eval")
        .set_mode(mlua::ChunkMode::Text)
        .into_function()
        .or_else(|_| {
            lua.load(&code[..])
                .set_name("@ldb_eval")
                .set_mode(mlua::ChunkMode::Text)
                .into_function()
        });
    let text = match compiled.and_then(|f| f.call::<LuaValue>(())) {
        Ok(v) => {
            let mut text = b"<retval> ".to_vec();
            cat_value(&mut text, &v, 0);
            with_session(|s| s.log_trimmed(text));
            return;
        }
        Err(e) => {
            // Lua's own text, without the traceback mlua adds to it.
            let message = super::error::lua_message(&e);
            let message = message
                .split("\nstack traceback:")
                .next()
                .unwrap_or_default()
                .to_string();
            format!("<error> {message}")
        }
    };
    with_session(|s| s.log(text));
}

/// `redis <command ...>`: run it through `redis.call` with logging on, so the command and its
/// reply are logged; an error is logged and otherwise ignored.
fn redis_command(lua: &Lua, args: &[Vec<u8>]) {
    let call = lua
        .globals()
        .get::<mlua::Table>("redis")
        .and_then(|r| r.get::<mlua::Function>("call"));
    let Ok(call) = call else {
        return;
    };
    let mut values = MultiValue::new();
    for arg in &args[1..] {
        match lua.create_string(arg) {
            Ok(s) => values.push_back(LuaValue::String(s)),
            Err(_) => return,
        }
    }
    with_session(|s| s.step = true);
    let _ = call.call::<LuaValue>(values);
    with_session(|s| s.step = false);
}

/// The locals of the running Lua function (the innermost frame that is not a C function)
/// and, with `outer`, of every frame around it, innermost first, as (name, value).
fn locals(lua: &Lua, outer: bool) -> Vec<(Vec<u8>, LuaValue)> {
    // SAFETY: exec_raw runs the closure inside a protected call on the running thread's
    // state; the closure only reads the call stack (lua_getstack / lua_getinfo) and pushes
    // each local's name and value after making room with lua_checkstack.
    let values: mlua::Result<MultiValue> = unsafe {
        lua.exec_raw((), |state| {
            let mut ar: ffi::lua_Debug = std::mem::zeroed();
            let mut level = 0;
            let mut found_lua = false;
            while ffi::lua_getstack(state, level, &mut ar) != 0 {
                level += 1;
                if ffi::lua_getinfo(state, c"S".as_ptr(), &mut ar) == 0 {
                    continue;
                }
                let is_c = !ar.what.is_null() && std::ffi::CStr::from_ptr(ar.what) == c"C";
                if is_c && !found_lua {
                    // exec_raw's own frame (and any C function the hook fired under).
                    continue;
                }
                found_lua = true;
                let mut i = 1;
                loop {
                    if ffi::lua_checkstack(state, 3) == 0 {
                        return;
                    }
                    let name = ffi::lua_getlocal(state, &ar, i);
                    if name.is_null() {
                        break;
                    }
                    ffi::lua_pushstring(state, name);
                    ffi::lua_insert(state, -2);
                    i += 1;
                }
                if !outer {
                    break;
                }
            }
        })
    };
    let Ok(values) = values else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut it = values.into_iter();
    while let (Some(LuaValue::String(name)), Some(value)) = (it.next(), it.next()) {
        out.push((name.as_bytes().to_vec(), value));
    }
    out
}

/// `print <var>`: the innermost local of that name, else the globals KEYS and ARGV.
fn print_variable(lua: &Lua, name: &[u8]) {
    let found = locals(lua, true).into_iter().find(|(n, _)| n == name);
    let value = match found {
        Some((_, v)) => Some(v),
        None if name == b"KEYS" || name == b"ARGV" => {
            let key = String::from_utf8_lossy(name).into_owned();
            Some(lua.globals().get::<LuaValue>(key).unwrap_or(LuaValue::Nil))
        }
        None => None,
    };
    match value {
        Some(v) => {
            let mut text = b"<value> ".to_vec();
            cat_value(&mut text, &v, 0);
            with_session(|s| s.log_trimmed(text));
        }
        None => {
            with_session(|s| s.log("No such variable."));
        }
    }
}

/// `print`: every local of the current frame.
fn print_all(lua: &Lua) {
    let mut lines = Vec::new();
    for (name, value) in locals(lua, false) {
        if find(&name, b"(*temporary)").is_some() {
            continue;
        }
        let mut text = b"<value> ".to_vec();
        text.extend_from_slice(&name);
        text.extend_from_slice(b" = ");
        cat_value(&mut text, &value, 0);
        lines.push(text);
    }
    with_session(|s| {
        if lines.is_empty() {
            s.log("No local variables in the current context.");
        }
        for line in lines {
            s.log_trimmed(line);
        }
    });
}

/// How often the debugging hook looks at the clock between lines.
pub(super) const fn timeout_check_every() -> u32 {
    TIMEOUT_CHECK_EVERY
}

/// Forked sessions still running (Redis kills them at shutdown).
static CHILDREN: parking_lot::Mutex<Vec<i32>> = parking_lot::Mutex::new(Vec::new());

/// Keep track of forked session `pid` until it exits (a thread waits for it, so it never
/// lingers as a zombie).
pub(super) fn watch_child(pid: i32) {
    CHILDREN.lock().push(pid);
    let spawned = std::thread::Builder::new()
        .name("ldb-child-wait".into())
        .spawn(move || {
            let mut status = 0;
            loop {
                // SAFETY: waitpid(2) on our own child, into a local.
                let r = unsafe { libc::waitpid(pid, &mut status, 0) };
                if r == pid
                    || (r < 0
                        && std::io::Error::last_os_error().kind()
                            != std::io::ErrorKind::Interrupted)
                {
                    break;
                }
            }
            CHILDREN.lock().retain(|&p| p != pid);
        });
    if let Err(e) = spawned {
        tracing::warn!("can't start the debugging session's waiter thread: {e}");
    }
}

/// End every forked session (at shutdown), as Redis's ldbKillForkedSessions.
pub fn kill_forked_sessions() {
    for pid in CHILDREN.lock().drain(..) {
        tracing::warn!("Killing debugging session {pid}");
        // SAFETY: kill(2) of a child process we forked.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_commands_as_redis_does() {
        assert!(matches!(parse_command(b""), Parsed::Incomplete));
        assert!(matches!(parse_command(b"hello"), Parsed::ProtocolError));
        assert!(matches!(
            parse_command(b"*1\r\n$4\r\nst"),
            Parsed::Incomplete
        ));
        assert!(matches!(parse_command(b"*0\r\n"), Parsed::ProtocolError));
        assert!(matches!(
            parse_command(b"*1\r\n$0\r\n\r\n"),
            Parsed::ProtocolError
        ));
        assert!(matches!(
            parse_command(b"*1\r\n$4\r\nstepX\n"),
            Parsed::ProtocolError
        ));
        match parse_command(b"junk*2\r\n$1\r\nb\r\n$2\r\n10\r\n") {
            Parsed::Command(args) => assert_eq!(args, vec![b"b".to_vec(), b"10".to_vec()]),
            _ => panic!("a command was expected"),
        }
    }

    #[test]
    fn shows_replies_in_human_form() {
        let cases: &[(&[u8], &str)] = &[
            (b":12\r\n", "12"),
            (b"$3\r\nfoo\r\n", "\"foo\""),
            (b"$-1\r\n", "NULL"),
            (b"+OK\r\n", "\"+OK\""),
            (b"-ERR bad\r\n", "\"-ERR bad\""),
            (b"*2\r\n$1\r\na\r\n:1\r\n", "[\"a\",1]"),
            (b"*-1\r\n", "NULL"),
            (b"%1\r\n$1\r\nk\r\n$1\r\nv\r\n", "{\"k\" => \"v\"}"),
            (b"~1\r\n$1\r\nm\r\n", "~(\"m\")"),
            (b"_\r\n", "(null)"),
            (b"#t\r\n", "#true"),
            (b",1.5\r\n", "(double) 1.5"),
        ];
        for (wire, human) in cases {
            let mut out = Vec::new();
            let rest = protocol_to_human(wire, &mut out);
            assert_eq!(String::from_utf8_lossy(&out), *human);
            assert!(rest.is_empty());
        }
    }

    #[test]
    fn atoi_reads_like_c() {
        assert_eq!(atoi(b"12abc"), 12);
        assert_eq!(atoi(b"  -7"), -7);
        assert_eq!(atoi(b"x"), 0);
    }
}
