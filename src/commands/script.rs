//! Lua scripting: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT (LOAD, EXISTS, FLUSH, KILL).
//!
//! `EVAL script numkeys [key ...] [arg ...]` runs a Lua 5.1 script (Redis's language version)
//! with `KEYS` and `ARGV` set, atomically: EVAL locks every shard, as EXEC does, so no other
//! command runs in between, and the clock is frozen for the whole script (Redis judges expiry
//! by the script's start time too). Inside, `redis.call` / `redis.pcall` run commands through
//! the normal dispatcher with the locks already held; replies reach Lua as a RESP2 client
//! would see them (integers as numbers, bulk strings as strings, nil as false, arrays as
//! tables, status as `{ok=...}`, errors as `{err=...}`), and the script's return value goes
//! back the other way (numbers truncated to integers, `false` as nil, tables as arrays up to
//! the first nil, `{ok=}` / `{err=}` as status / error). `redis.call` raises a command's
//! error; `redis.pcall` returns it. SELECT inside a script changes only the script's database.
//!
//! Errors read as Redis 7.0's: a runtime error is `ERR user_script:LINE: <message> script:
//! <sha>, on @user_script:LINE.`; a failing `redis.call` gives the command's own error with
//! the same suffix; a script that does not compile is `ERR Error compiling script (new
//! function): user_script:LINE: <message>`. Globals are protected as in Redis 7.0: reading an
//! undefined one or assigning one is an error.
//!
//! Logging: the commands a script ran, not the script, are written to the AOF (Redis 7.0's
//! effects replication), wrapped in MULTI/EXEC once it wrote anything, so a replay applies
//! them as a unit and does not depend on the script's determinism.
//!
//! Each call runs in a fresh Lua state (the standard base, string, table and math libraries
//! plus `redis`), so nothing a script does outlives it. Scripts are cached by SHA1 for EVALSHA
//! (every EVAL'd script too, as Redis does) until SCRIPT FLUSH. The `cjson`, `cmsgpack`,
//! `bit` and `struct` libraries Redis bundles are not provided, nor `redis.setresp` and
//! `redis.set_repl`.
//!
//! A long script: once it has run for `busy-reply-threshold` (`lua-time-limit`) ms, other
//! clients' commands get -BUSY (the dispatcher checks [`Scripts::busy`]) except those Redis
//! allows then (SCRIPT KILL, SHUTDOWN, MULTI/DISCARD, AUTH, HELLO ...); SCRIPT KILL stops a
//! script that has not written yet (its caller gets an error), through a Lua hook that looks
//! every 10,000 instructions. Commands sent before the threshold wait for the script, as in
//! Redis. This needs the multi-threaded runtime (the default with two or more cores): with one
//! thread nothing else is served until the script returns.

use super::args::{eq, int};
use super::flags::*;
use super::{lookup, Ctx, Keys, Spec};
use crate::protocol::{Reply, Resp};
use bytes::Bytes;
use mlua::{Lua, LuaOptions, MultiValue, StdLib, Value as LuaValue};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub static COMMANDS: &[Spec] = &[
    Spec::new(
        "eval",
        -3,
        NOSCRIPT | MAY_REPLICATE | MOVABLE_KEYS,
        Keys::All,
        eval,
        "scripting",
    ),
    Spec::new(
        "evalsha",
        -3,
        NOSCRIPT | MAY_REPLICATE | MOVABLE_KEYS,
        Keys::All,
        eval,
        "scripting",
    ),
    Spec::new(
        "eval_ro",
        -3,
        NOSCRIPT | READONLY | MOVABLE_KEYS,
        Keys::All,
        eval,
        "scripting",
    ),
    Spec::new(
        "evalsha_ro",
        -3,
        NOSCRIPT | READONLY | MOVABLE_KEYS,
        Keys::All,
        eval,
        "scripting",
    ),
    Spec::new("script", -2, NOSCRIPT, Keys::None, script, "scripting"),
];

/// The server's scripting state.
#[derive(Default)]
pub struct Scripts {
    /// Script bodies by lowercase hex SHA1.
    cache: Mutex<HashMap<String, Bytes>>,
    /// A script is running (SCRIPT KILL has something to stop).
    running: AtomicBool,
    /// SCRIPT KILL asked the running script to stop (shared with the script's Lua hook).
    kill: Arc<AtomicBool>,
    /// The running script has written (it can no longer be killed).
    wrote: AtomicBool,
    /// When the running script started.
    started: Mutex<Option<std::time::Instant>>,
}

/// What other clients get while a script has run past `busy-reply-threshold`.
pub const BUSY: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";

impl Scripts {
    /// True when a script has been running for `threshold_ms` or longer: other clients'
    /// commands are then refused with -BUSY (see the dispatcher) instead of waiting for it.
    pub fn busy(&self, threshold_ms: i64) -> bool {
        if !self.running.load(Ordering::Acquire) {
            return false;
        }
        self.started
            .lock()
            .is_some_and(|t| t.elapsed().as_millis() as i64 >= threshold_ms)
    }
}

/// SCRIPT KILL (which a busy server still serves).
pub fn is_script_kill(args: &[Bytes]) -> bool {
    args.len() == 2 && eq(&args[0], "script") && eq(&args[1], "kill")
}

/// Lowercase hex SHA1 of `data` (script names, `redis.sha1hex`).
pub fn sha1_hex(data: &[u8]) -> String {
    sha1_smol::Sha1::from(data).digest().to_string()
}

/// Run by Podium before the user's script (chunk `=podium`, called with the user's function
/// and the error unwrapper): the user's code gets a read-only view of the globals, as Redis 7.0
/// makes the global table read-only while a script runs (reading an undefined global is an
/// error too), and `pcall` / `xpcall` hand a failed `redis.call`'s error to Lua code as Redis
/// 7.0 does (pcall: the error's text; an xpcall handler: the `{err=...}` table), not as the
/// host error object it travels as.
const PRELUDE: &str = r#"
local user_fn, unwrap = ...
local G = _G
local raw_pcall, raw_xpcall = pcall, xpcall
local select, unpack, error, tostring, rawget = select, unpack, error, tostring, rawget
local function pack(...) return {n = select('#', ...), ...} end
G.pcall = function(...)
  local r = pack(raw_pcall(...))
  if not r[1] then r[2] = unwrap(r[2], false) end
  return unpack(r, 1, r.n)
end
G.xpcall = function(f, handler)
  return raw_xpcall(f, function(e) return handler(unwrap(e, true)) end)
end
local env = setmetatable({}, {
  __index = function(_, name)
    local v = rawget(G, name)
    if v == nil then
      error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
    end
    return v
  end,
  __newindex = function()
    error("Attempt to modify a readonly table", 2)
  end,
  __metatable = false,
})
setfenv(user_fn, env)
"#;

/// A failed command inside `redis.call`: raised to Lua as a host error (a Rust callback cannot
/// raise a Lua value), turned back into what Redis gives Lua code by the error handler and the
/// `pcall` / `xpcall` wrappers.
#[derive(Debug)]
struct CommandError(String);

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CommandError {}

/// The command error inside a Lua error, if that is what it is.
fn command_error(e: &mlua::Error) -> Option<&str> {
    match e {
        mlua::Error::CallbackError { cause, .. } => command_error(cause),
        mlua::Error::ExternalError(x) => x.downcast_ref::<CommandError>().map(|c| c.0.as_str()),
        _ => None,
    }
}

/// An error value as Lua code catching it sees it: a failed command's error as `{err=...}`
/// (`as_table`, an xpcall handler) or as its text (pcall); another host error as its text;
/// anything else unchanged.
fn unwrap_error(lua: &Lua, (v, as_table): (LuaValue, bool)) -> mlua::Result<LuaValue> {
    match &v {
        LuaValue::Error(e) => match command_error(e) {
            Some(msg) if as_table => {
                let t = lua.create_table()?;
                t.set("err", msg)?;
                Ok(LuaValue::Table(t))
            }
            Some(msg) => Ok(LuaValue::String(lua.create_string(msg)?)),
            None => Ok(LuaValue::String(lua.create_string(lua_message(e))?)),
        },
        _ => Ok(v),
    }
}

/// Numbers of keys and arguments, as EVAL validates them.
fn parse_numkeys(a: &[Bytes]) -> Result<usize, Reply> {
    let n = int(&a[2]).map_err(|_| Reply::error(super::args::NOT_INT))?;
    if n < 0 {
        return Err(Reply::error("ERR Number of keys can't be negative"));
    }
    if n as u64 > (a.len() - 3) as u64 {
        return Err(Reply::error(
            "ERR Number of keys can't be greater than number of args",
        ));
    }
    Ok(n as usize)
}

fn eval(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    let by_sha = eq(&a[0], "evalsha") || eq(&a[0], "evalsha_ro");
    let read_only = eq(&a[0], "eval_ro") || eq(&a[0], "evalsha_ro");
    let numkeys = match parse_numkeys(a) {
        Ok(n) => n,
        Err(e) => return e,
    };
    let scripts = &ctx.srv.scripts;
    let (sha, body) = if by_sha {
        let sha = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
        match scripts.cache.lock().get(&sha) {
            Some(b) => (sha, b.clone()),
            None => return Reply::error("NOSCRIPT No matching script. Please use EVAL."),
        }
    } else {
        let sha = sha1_hex(&a[1]);
        (sha, a[1].clone())
    };
    let keys = &a[3..3 + numkeys];
    let argv = &a[3 + numkeys..];
    let saved_db = ctx.client.db;
    scripts.kill.store(false, Ordering::Relaxed);
    scripts.wrote.store(false, Ordering::Relaxed);
    *scripts.started.lock() = Some(std::time::Instant::now());
    scripts.running.store(true, Ordering::Release);
    let mut multi_logged = false;
    let mut run = || run_script(ctx, &sha, &body, keys, argv, read_only, &mut multi_logged);
    // On the multi-threaded runtime the worker hands its other tasks (and the I/O driver) to
    // another thread while the script runs, so the server keeps answering: -BUSY after
    // `busy-reply-threshold`, SCRIPT KILL. (A single-threaded runtime waits for the script.)
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    let reply = if multi_thread {
        tokio::task::block_in_place(run)
    } else {
        run()
    };
    scripts.running.store(false, Ordering::Release);
    *scripts.started.lock() = None;
    if multi_logged {
        ctx.srv
            .propagate(ctx.client.db, vec![Bytes::from_static(b"EXEC")]);
    }
    if ctx.client.db != saved_db {
        ctx.client.select(saved_db);
    }
    // A script that compiled is remembered for EVALSHA, as Redis caches every EVAL'd body.
    if !by_sha && !matches!(&reply, Reply::Error(e) if e.starts_with("ERR Error compiling script"))
    {
        scripts
            .cache
            .lock()
            .entry(sha)
            .or_insert_with(|| a[1].clone());
    }
    reply
}

/// Compile and run one script; its reply or error.
fn run_script(
    ctx: &mut Ctx,
    sha: &str,
    body: &[u8],
    keys: &[Bytes],
    argv: &[Bytes],
    read_only: bool,
    multi_logged: &mut bool,
) -> Reply {
    let lua = match Lua::new_with(
        StdLib::STRING | StdLib::TABLE | StdLib::MATH,
        LuaOptions::default(),
    ) {
        Ok(l) => l,
        Err(e) => return Reply::error(format!("ERR can't start Lua: {e}")),
    };
    let killed = ctx.srv.scripts.kill.clone();
    // SCRIPT KILL from another connection: checked every 10,000 instructions.
    lua.set_hook(
        mlua::HookTriggers::new().every_nth_instruction(10_000),
        move |_, _| {
            if killed.load(Ordering::Relaxed) {
                Err(mlua::Error::external(CommandError(
                    "ERR Script killed by user with SCRIPT KILL...".into(),
                )))
            } else {
                Ok(mlua::VmState::Continue)
            }
        },
    );
    let setup = || -> mlua::Result<()> {
        let g = lua.globals();
        let redis = lua.create_table()?;
        redis.set(
            "sha1hex",
            lua.create_function(|_, s: mlua::String| Ok(sha1_hex(&s.as_bytes())))?,
        )?;
        redis.set(
            "error_reply",
            lua.create_function(|lua, s: mlua::String| {
                let t = lua.create_table()?;
                t.set("err", lua.create_string(error_reply_text(&s.as_bytes()))?)?;
                Ok(t)
            })?,
        )?;
        redis.set(
            "status_reply",
            lua.create_function(|lua, s: mlua::String| {
                let t = lua.create_table()?;
                t.set("ok", s)?;
                Ok(t)
            })?,
        )?;
        redis.set(
            "log",
            lua.create_function(|lua, args: MultiValue| {
                let mut it = args.into_iter();
                let level = match it.next() {
                    Some(LuaValue::Integer(i)) => i,
                    Some(LuaValue::Number(n)) => n as i64,
                    _ => 2,
                };
                let mut text = Vec::new();
                for v in it {
                    if let Some(s) = lua.coerce_string(v)? {
                        if !text.is_empty() {
                            text.push(b' ');
                        }
                        text.extend_from_slice(&s.as_bytes());
                    }
                }
                let text = String::from_utf8_lossy(&text);
                match level {
                    0 => tracing::debug!("{text}"),
                    3 => tracing::warn!("{text}"),
                    _ => tracing::info!("{text}"),
                }
                Ok(())
            })?,
        )?;
        redis.set("replicate_commands", lua.create_function(|_, ()| Ok(true))?)?;
        for (name, level) in [
            ("LOG_DEBUG", 0),
            ("LOG_VERBOSE", 1),
            ("LOG_NOTICE", 2),
            ("LOG_WARNING", 3),
        ] {
            redis.set(name, level)?;
        }
        redis.set("REDIS_VERSION", super::server::REDIS_VERSION)?;
        redis.set("REDIS_VERSION_NUM", redis_version_num())?;
        g.set("redis", redis)?;
        let to_table = |items: &[Bytes]| -> mlua::Result<mlua::Table> {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, v) in items.iter().enumerate() {
                t.raw_set(i + 1, lua.create_string(&v[..])?)?;
            }
            Ok(t)
        };
        g.set("KEYS", to_table(keys)?)?;
        g.set("ARGV", to_table(argv)?)?;
        Ok(())
    };
    if let Err(e) = setup() {
        return Reply::error(format!("ERR can't set up the script: {e}"));
    }
    // The user's code, compiled under the name Redis gives it (so errors say `user_script:N`).
    let function = match lua.load(body).set_name("@user_script").into_function() {
        Ok(f) => f,
        Err(e) => {
            return Reply::error(format!(
                "ERR Error compiling script (new function): {}",
                lua_message(&e)
            ))
        }
    };
    let in_exec = ctx.in_exec;
    // redis.call and redis.pcall share the command path; `ctx` is borrowed by both.
    let ctx = std::cell::RefCell::new(ctx);
    let multi_logged = std::cell::RefCell::new(multi_logged);
    let result = lua.scope(|scope| {
        let run = |lua: &Lua, args: MultiValue| -> mlua::Result<Reply> {
            let mut argv = Vec::with_capacity(args.len());
            for v in args {
                match lua.coerce_string(v)? {
                    Some(s) => argv.push(Bytes::copy_from_slice(&s.as_bytes())),
                    None => {
                        return Ok(Reply::error(
                            "ERR Lua redis lib command arguments must be strings or integers",
                        ))
                    }
                }
            }
            let mut ctx = ctx.borrow_mut();
            let mut logged = multi_logged.borrow_mut();
            Ok(call_command(
                &mut ctx,
                argv,
                read_only,
                in_exec,
                &mut logged,
            ))
        };
        let call = scope.create_function(move |lua, args: MultiValue| match run(lua, args)? {
            Reply::Error(e) => Err(mlua::Error::external(CommandError(e))),
            r => reply_to_lua(lua, &r),
        })?;
        let pcall = scope.create_function(move |lua, args: MultiValue| {
            let r = run(lua, args)?;
            reply_to_lua(lua, &r)
        })?;
        let redis: mlua::Table = lua.globals().raw_get("redis")?;
        redis.raw_set("call", call)?;
        redis.raw_set("pcall", pcall)?;
        let xpcall: mlua::Function = lua.globals().raw_get("xpcall")?;
        let unwrap = lua.create_function(unwrap_error)?;
        lua.load(PRELUDE)
            .set_name("=podium")
            .call::<()>((function.clone(), unwrap))?;
        xpcall.call::<MultiValue>((function, error_handler(&lua)?))
    });
    let values = match result {
        Ok(v) => v,
        Err(e) => return Reply::error(format!("ERR Error running script {}", lua_message(&e))),
    };
    let mut it = values.into_iter();
    let ok = matches!(it.next(), Some(LuaValue::Boolean(true)));
    let value = it.next().unwrap_or(LuaValue::Nil);
    if ok {
        return lua_to_reply(&value, 0);
    }
    // The handler's table: {err=..., source=..., line=...}.
    match &value {
        LuaValue::Table(t) => {
            let msg: Option<mlua::String> = t.raw_get("err").ok();
            let msg = msg
                .map(|m| String::from_utf8_lossy(&m.as_bytes()).into_owned())
                .unwrap_or_else(|| "ERR execution failure".into());
            let source: Option<String> = t.raw_get("source").ok();
            let line: Option<i64> = t.raw_get("line").ok();
            match (source, line) {
                (Some(s), Some(l)) => Reply::Error(format!("{msg} script: {sha}, on {s}:{l}.")),
                _ => Reply::Error(msg),
            }
        }
        other => Reply::error(format!(
            "ERR Error running script {sha}, {}",
            lua_display(other)
        )),
    }
}

/// The xpcall handler (Redis's `__redis__err__handler`): a plain error becomes `{err='ERR
/// <message>'}`, and the position in the user's script where it happened is added as
/// `source` and `line`.
fn error_handler(lua: &Lua) -> mlua::Result<mlua::Function> {
    lua.create_function(|lua, err: LuaValue| {
        let t = match err {
            LuaValue::Table(t) => t,
            other => {
                if let LuaValue::Error(e) = &other {
                    if let Some(msg) = command_error(e) {
                        let t = lua.create_table()?;
                        t.set("err", msg)?;
                        return with_position(lua, t);
                    }
                }
                let text = match &other {
                    LuaValue::Error(e) => lua_message(e),
                    v => lua
                        .coerce_string(v.clone())?
                        .map(|s| String::from_utf8_lossy(&s.as_bytes()).into_owned())
                        .unwrap_or_else(|| lua_display(v)),
                };
                let t = lua.create_table()?;
                t.set("err", format!("ERR {text}"))?;
                t
            }
        };
        with_position(lua, t)
    })
}

/// Add where in the user's script the error happened (its innermost frame) to `t`.
fn with_position(lua: &Lua, t: mlua::Table) -> mlua::Result<mlua::Table> {
    for level in 0..200 {
        let Some(frame) = lua.inspect_stack(level) else {
            break;
        };
        if frame.source().source.as_deref() == Some("@user_script") {
            t.set("source", "@user_script")?;
            t.set("line", frame.curr_line())?;
            break;
        }
    }
    Ok(t)
}

/// What `redis.error_reply(s)` makes of its argument (Redis 7.0: a leading `-` is dropped; a
/// text without a space gets the generic `ERR` code).
fn error_reply_text(s: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(s);
    let text = text.trim_end_matches(['\r', '\n']);
    let body = text.strip_prefix('-').unwrap_or(text);
    if body.contains(' ') {
        body.as_bytes().to_vec()
    } else {
        format!("ERR {body}").into_bytes()
    }
}

/// REDIS_VERSION as Redis's packed number (0x00MMmmpp).
fn redis_version_num() -> i64 {
    let mut parts = super::server::REDIS_VERSION
        .split('.')
        .map(|p| p.parse::<i64>().unwrap_or(0));
    let (a, b, c) = (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    );
    (a << 16) | (b << 8) | c
}

/// The message of a Lua error without mlua's decoration.
fn lua_message(e: &mlua::Error) -> String {
    match e {
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        mlua::Error::RuntimeError(m) => m.clone(),
        mlua::Error::CallbackError { cause, .. } => lua_message(cause),
        other => other.to_string(),
    }
}

fn lua_display(v: &LuaValue) -> String {
    match v {
        LuaValue::String(s) => String::from_utf8_lossy(&s.as_bytes()).into_owned(),
        other => format!("{other:?}"),
    }
}

/// Run one command for the script: the checks Redis makes for scripts, then the dispatcher.
fn call_command(
    ctx: &mut Ctx,
    argv: Vec<Bytes>,
    read_only: bool,
    in_exec: bool,
    multi_logged: &mut bool,
) -> Reply {
    if argv.is_empty() {
        return Reply::error("ERR Please specify at least one argument for this redis lib call");
    }
    let Some(spec) = lookup(&argv[0]) else {
        return Reply::error("ERR Unknown Redis command called from script");
    };
    if !super::arity_ok(spec.arity, argv.len()) {
        return Reply::error("ERR Wrong number of args calling Redis command from script");
    }
    if spec.flags & NOSCRIPT != 0 {
        return Reply::error("ERR This Redis command is not allowed from script");
    }
    if let Err((denied, pos, id)) = crate::acl::check(ctx.client, spec, &argv) {
        crate::acl::log_denial(ctx.srv, ctx.client, denied, pos, id, &argv, "lua");
        return Reply::Error(format!(
            "ERR The user executing the script {}",
            crate::acl::script_denial_text(denied)
        ));
    }
    if spec.is_write() {
        if read_only {
            return Reply::error("ERR Write commands are not allowed from read-only scripts.");
        }
        if let Some(e) = super::write_refusal(ctx.srv, spec) {
            return e;
        }
        // Inside EXEC the transaction's own MULTI/EXEC already wraps the effects.
        if !*multi_logged && !in_exec && ctx.srv.aof.is_enabled() {
            ctx.srv
                .propagate(ctx.client.db, vec![Bytes::from_static(b"MULTI")]);
            *multi_logged = true;
        }
        ctx.srv.scripts.wrote.store(true, Ordering::Relaxed);
    }
    let started = std::time::Instant::now();
    ctx.client.in_script = true;
    let (reply, _block, _close) =
        super::run_locked(ctx.srv, ctx.client, spec, &argv, ctx.g, true, started);
    ctx.client.in_script = false;
    ctx.srv.stats.commands.fetch_add(1, Ordering::Relaxed);
    reply
}

/// A command's reply as a RESP2 client sees it, converted for Lua.
fn reply_to_lua(lua: &Lua, r: &Reply) -> mlua::Result<LuaValue> {
    let mut wire = Vec::new();
    r.encode(Resp::V2, &mut wire);
    let mut pos = 0;
    resp2_to_lua(lua, &wire, &mut pos, 0)
}

/// Parse one RESP2 value from `wire` at `pos` into a Lua value.
fn resp2_to_lua(lua: &Lua, wire: &[u8], pos: &mut usize, depth: usize) -> mlua::Result<LuaValue> {
    let bad = || mlua::Error::runtime("ERR reply could not be converted for the script");
    let line_end = wire[*pos..]
        .windows(2)
        .position(|w| w == b"\r\n")
        .ok_or_else(bad)?
        + *pos;
    let kind = wire[*pos];
    let line = &wire[*pos + 1..line_end];
    *pos = line_end + 2;
    let number = |l: &[u8]| -> mlua::Result<i64> {
        std::str::from_utf8(l)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)
    };
    Ok(match kind {
        b'+' => {
            let t = lua.create_table()?;
            t.set("ok", lua.create_string(line)?)?;
            LuaValue::Table(t)
        }
        b'-' => {
            let t = lua.create_table()?;
            t.set("err", lua.create_string(line)?)?;
            LuaValue::Table(t)
        }
        b':' => LuaValue::Number(number(line)? as f64),
        b'$' => {
            let n = number(line)?;
            if n < 0 {
                LuaValue::Boolean(false)
            } else {
                let n = n as usize;
                let s = wire.get(*pos..*pos + n).ok_or_else(bad)?;
                *pos += n + 2;
                LuaValue::String(lua.create_string(s)?)
            }
        }
        b'*' => {
            let n = number(line)?;
            if n < 0 {
                LuaValue::Boolean(false)
            } else {
                if depth > 64 {
                    return Err(bad());
                }
                let t = lua.create_table_with_capacity(n as usize, 0)?;
                for i in 0..n as usize {
                    t.raw_set(i + 1, resp2_to_lua(lua, wire, pos, depth + 1)?)?;
                }
                LuaValue::Table(t)
            }
        }
        _ => return Err(bad()),
    })
}

/// The script's return value as a reply (Redis's luaReplyToRedisReply, RESP2 script client).
fn lua_to_reply(v: &LuaValue, depth: usize) -> Reply {
    match v {
        LuaValue::String(s) => Reply::Bulk(Bytes::copy_from_slice(&s.as_bytes())),
        LuaValue::Boolean(true) => Reply::Int(1),
        LuaValue::Integer(i) => Reply::Int(*i),
        // C's (long long) cast truncates toward zero; `as` saturates where C is undefined.
        LuaValue::Number(n) => Reply::Int(*n as i64),
        LuaValue::Table(t) => {
            if let Ok(LuaValue::String(e)) = t.raw_get::<LuaValue>("err") {
                return Reply::Error(
                    String::from_utf8_lossy(&e.as_bytes()).replace(['\r', '\n'], " "),
                );
            }
            if let Ok(LuaValue::String(s)) = t.raw_get::<LuaValue>("ok") {
                return Reply::StatusOwned(
                    String::from_utf8_lossy(&s.as_bytes()).replace(['\r', '\n'], " "),
                );
            }
            if depth > 64 {
                return Reply::error("ERR reached lua stack limit");
            }
            let mut items = Vec::new();
            for i in 1.. {
                match t.raw_get::<LuaValue>(i) {
                    Ok(LuaValue::Nil) | Err(_) => break,
                    Ok(item) => items.push(lua_to_reply(&item, depth + 1)),
                }
            }
            Reply::Array(items)
        }
        _ => Reply::Null,
    }
}

/// SCRIPT LOAD | EXISTS | FLUSH | KILL | HELP.
fn script(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    let scripts = &ctx.srv.scripts;
    match sub.as_str() {
        "load" if a.len() == 3 => {
            let lua = match Lua::new_with(StdLib::NONE, LuaOptions::default()) {
                Ok(l) => l,
                Err(e) => return Reply::error(format!("ERR can't start Lua: {e}")),
            };
            if let Err(e) = lua.load(&a[2][..]).set_name("@user_script").into_function() {
                return Reply::error(format!(
                    "ERR Error compiling script (new function): {}",
                    lua_message(&e)
                ));
            }
            let sha = sha1_hex(&a[2]);
            scripts
                .cache
                .lock()
                .entry(sha.clone())
                .or_insert_with(|| a[2].clone());
            Reply::Bulk(Bytes::from(sha))
        }
        "exists" if a.len() >= 3 => {
            let cache = scripts.cache.lock();
            Reply::Array(
                a[2..]
                    .iter()
                    .map(|s| {
                        let sha = String::from_utf8_lossy(s).to_ascii_lowercase();
                        Reply::Int(i64::from(cache.contains_key(&sha)))
                    })
                    .collect(),
            )
        }
        "flush" if a.len() <= 3 => {
            if a.len() == 3 && !(eq(&a[2], "async") || eq(&a[2], "sync")) {
                return Reply::error("ERR SCRIPT FLUSH only support SYNC|ASYNC option");
            }
            scripts.cache.lock().clear();
            Reply::Ok
        }
        "kill" if a.len() == 2 => {
            if !scripts.running.load(Ordering::Acquire) {
                Reply::error("NOTBUSY No scripts in execution right now.")
            } else if scripts.wrote.load(Ordering::Acquire) {
                Reply::error("UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.")
            } else {
                scripts.kill.store(true, Ordering::Release);
                Reply::Ok
            }
        }
        "help" if a.len() == 2 => Reply::Array(
            [
                "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "EXISTS <sha1> [<sha1> ...]",
                "    Return information about the existence of the scripts in the script cache.",
                "FLUSH [ASYNC|SYNC]",
                "    Flush the Lua scripts cache. Very dangerous on replicas.",
                "KILL",
                "    Kill the currently executing Lua script.",
                "LOAD <script>",
                "    Load a script into the scripts cache without executing it.",
                "HELP",
                "    Prints this help.",
            ]
            .iter()
            .map(|s| Reply::StatusOwned(s.to_string()))
            .collect(),
        ),
        "load" | "exists" | "flush" | "kill" | "help" => {
            super::wrong_arity(&format!("script|{sub}"))
        }
        _ => Reply::error(format!(
            "ERR unknown subcommand '{}'. Try SCRIPT HELP.",
            String::from_utf8_lossy(&a[1])
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_matches_redis() {
        // SCRIPT LOAD "return 1" on redis-server 7.0.
        assert_eq!(
            sha1_hex(b"return 1"),
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
        );
    }

    #[test]
    fn error_reply_codes() {
        assert_eq!(error_reply_text(b"My Error"), b"My Error");
        assert_eq!(error_reply_text(b"-ERR x y"), b"ERR x y");
        assert_eq!(error_reply_text(b"oops"), b"ERR oops");
    }
}
