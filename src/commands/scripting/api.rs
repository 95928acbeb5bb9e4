//! The `redis` table scripts see: `call` / `pcall` (commands through the dispatcher, with the
//! checks Redis 7.0 makes for scripts), `sha1hex`, `error_reply` / `status_reply`, `log`,
//! `setresp`, `set_repl`, `replicate_commands`, `breakpoint` / `debug` (for the debugger,
//! [`super::debugger`]; outside a session they do nothing, `breakpoint` answering false),
//! `acl_check_cmd`, and the constants (`LOG_*`, `REPL_*`, `REDIS_VERSION[_NUM]`).
//!
//! Errors raised by these functions are Redis's `{err=...}` errors: they travel as a
//! [`CommandError`] and reach Lua code (pcall, xpcall handlers) and the client as Redis's do.

use super::error::CommandError;
use super::{error_reply_text, redis_version_num, sha1_hex, Invocation};
use crate::cmdspec::arity_ok;
use crate::commands::flags::{MAY_REPLICATE, NOSCRIPT};
use crate::commands::lookup;
use crate::protocol::Reply;
use crate::protocol::Resp;
use bytes::Bytes;
use mlua::{ffi, Lua, MultiValue, Table, Value as LuaValue};
use std::cell::Cell;
use std::ffi::c_int;
use std::rc::Rc;
use std::sync::atomic::Ordering;

/// `redis.set_repl` flags (Redis's PROPAGATE_AOF / PROPAGATE_REPL).
pub(super) const REPL_AOF: u8 = 1;
pub(super) const REPL_REPLICA: u8 = 2;
pub(super) const REPL_ALL: u8 = REPL_AOF | REPL_REPLICA;

type Current = Rc<Cell<*mut Invocation<'static, 'static, 'static>>>;

/// A `{err=...}` error for Lua, as Redis's luaPushError builds it (a text without an error
/// code gets `ERR`).
fn lua_error(text: &str) -> mlua::Error {
    let text = match text.strip_prefix('-') {
        Some(coded) => coded.to_string(),
        None => format!("ERR {text}"),
    };
    mlua::Error::external(CommandError(text))
}

/// Run `f` with the running script's invocation, or raise `outside` when none runs.
fn with_invocation<R>(
    current: &Current,
    outside: &str,
    f: impl FnOnce(&mut Invocation<'static, 'static, 'static>) -> mlua::Result<R>,
) -> mlua::Result<R> {
    let inv = current.get();
    if inv.is_null() {
        return Err(lua_error(outside));
    }
    // SAFETY: non-null only while Engine::run executes the script on this thread, pointing
    // at that run's Invocation, which outlives the call; Lua is single-threaded and redis.*
    // functions are not re-entered while this borrow lives (commands they run cannot call
    // back into Lua: EVAL and FCALL are NOSCRIPT).
    f(unsafe { &mut *inv })
}

pub(super) fn register(lua: &Lua, g: &Table, current: &Current) -> mlua::Result<()> {
    let redis = lua.create_table()?;
    // SAFETY: the two functions keep to the Lua C API's contract (see call_from_lua).
    unsafe {
        redis.raw_set("call", lua.create_c_function(redis_call)?)?;
        redis.raw_set("pcall", lua.create_c_function(redis_pcall)?)?;
    }
    redis.raw_set(
        "sha1hex",
        lua.create_function(|_, args: MultiValue| {
            if args.len() != 1 {
                return Err(lua_error("wrong number of arguments"));
            }
            let bytes = match &args[0] {
                LuaValue::String(s) => s.as_bytes().to_vec(),
                LuaValue::Integer(_) | LuaValue::Number(_) => {
                    let v = args[0].to_string().unwrap_or_default();
                    v.into_bytes()
                }
                _ => Vec::new(),
            };
            Ok(sha1_hex(&bytes))
        })?,
    )?;
    redis.raw_set(
        "error_reply",
        lua.create_function(|lua, args: MultiValue| {
            let t = lua.create_table()?;
            match (args.len(), args.front()) {
                (1, Some(LuaValue::String(s))) => {
                    t.raw_set("err", lua.create_string(error_reply_text(&s.as_bytes()))?)?
                }
                _ => t.raw_set("err", "ERR wrong number or type of arguments")?,
            }
            Ok(t)
        })?,
    )?;
    redis.raw_set(
        "status_reply",
        lua.create_function(|lua, args: MultiValue| {
            let t = lua.create_table()?;
            match (args.len(), args.front()) {
                (1, Some(LuaValue::String(s))) => t.raw_set("ok", s.clone())?,
                _ => t.raw_set("err", "ERR wrong number or type of arguments")?,
            }
            Ok(t)
        })?,
    )?;
    redis.raw_set("log", lua.create_function(log)?)?;
    for (name, level) in [
        ("LOG_DEBUG", 0),
        ("LOG_VERBOSE", 1),
        ("LOG_NOTICE", 2),
        ("LOG_WARNING", 3),
    ] {
        redis.raw_set(name, level)?;
    }
    let setresp_current = current.clone();
    redis.raw_set(
        "setresp",
        lua.create_function(move |_, args: MultiValue| {
            with_invocation(
                &setresp_current,
                "redis.setresp can only be called inside a script invocation",
                |inv| {
                    if args.len() != 1 {
                        return Err(lua_error("redis.setresp() requires one argument."));
                    }
                    match lua_number(&args[0]) as i64 {
                        2 => inv.resp3 = false,
                        3 => inv.resp3 = true,
                        _ => return Err(lua_error("RESP version must be 2 or 3.")),
                    }
                    Ok(())
                },
            )
        })?,
    )?;
    let repl_current = current.clone();
    redis.raw_set(
        "set_repl",
        lua.create_function(move |_, args: MultiValue| {
            with_invocation(
                &repl_current,
                "redis.set_repl can only be called inside a script invocation",
                |inv| {
                    if args.len() != 1 {
                        return Err(lua_error("redis.set_repl() requires two arguments."));
                    }
                    let flags = lua_number(&args[0]) as i64;
                    if flags & !i64::from(REPL_ALL) != 0 {
                        return Err(lua_error("Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE."));
                    }
                    inv.repl = flags as u8;
                    Ok(())
                },
            )
        })?,
    )?;
    for (name, value) in [
        ("REPL_NONE", 0),
        ("REPL_AOF", REPL_AOF),
        ("REPL_SLAVE", REPL_REPLICA),
        ("REPL_REPLICA", REPL_REPLICA),
        ("REPL_ALL", REPL_ALL),
    ] {
        redis.raw_set(name, value)?;
    }
    redis.raw_set(
        "replicate_commands",
        lua.create_function(|_, _: MultiValue| Ok(true))?,
    )?;
    // Outside a debugging session breakpoint answers false and debug does nothing.
    redis.raw_set(
        "breakpoint",
        lua.create_function(|_, _: MultiValue| Ok(super::debugger::breakpoint()))?,
    )?;
    redis.raw_set(
        "debug",
        lua.create_function(|_, args: MultiValue| {
            super::debugger::debug_values(&args);
            Ok(())
        })?,
    )?;
    let acl_current = current.clone();
    redis.raw_set(
        "acl_check_cmd",
        lua.create_function(move |lua, args: MultiValue| {
            let argv = command_args(lua, args)?;
            with_invocation(
                &acl_current,
                "redis.acl_check_cmd can only be called inside a script invocation",
                |inv| {
                    let Some(spec) = lookup(&argv[0]) else {
                        return Err(lua_error("Invalid command passed to redis.acl_check_cmd()"));
                    };
                    // Whether the script's user may run it (keys and channels included).
                    Ok(crate::commands::acl::check(inv.ctx.client, spec, &argv).is_ok())
                },
            )
        })?,
    )?;
    // The sandbox's pcall / xpcall ask this after catching an error: a script being killed
    // must not be able to swallow the kill.
    let killed_current = current.clone();
    g.raw_set(
        "__podium_killed",
        lua.create_function(move |_, ()| {
            let inv = killed_current.get();
            // SAFETY: as in with_invocation (non-null only during the script's run).
            Ok(!inv.is_null() && unsafe { (*inv).killed() })
        })?,
    )?;
    redis.raw_set("REDIS_VERSION", crate::version::REDIS_VERSION)?;
    redis.raw_set("REDIS_VERSION_NUM", redis_version_num())?;
    g.raw_set("redis", redis)?;
    Ok(())
}

thread_local! {
    /// The running script's invocation, for `redis.call` / `redis.pcall` (set by Engine::run
    /// for the length of a run, null otherwise).
    pub(super) static RUNNING: Cell<*mut Invocation<'static, 'static, 'static>> =
        const { Cell::new(std::ptr::null_mut()) };
    /// What a call's Rust part hands its Lua part: the reply to convert, or the error to raise.
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

#[derive(Default)]
struct Scratch {
    reply: Option<Reply>,
    /// The reply as RESP (kept between calls for its capacity).
    wire: Vec<u8>,
    error: String,
    resp3: bool,
}

/// What `redis.call` does once its Rust part is done.
#[derive(Clone, Copy)]
enum Next {
    Push,
    Raise,
}

/// `redis.call`: a failed command raises its error.
unsafe extern "C-unwind" fn redis_call(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: called by Lua with a valid state (see call_from_lua).
    unsafe { call_from_lua(state, true) }
}

/// `redis.pcall`: a failed command's error is returned as `{err=...}`.
unsafe extern "C-unwind" fn redis_pcall(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: as redis_call.
    unsafe { call_from_lua(state, false) }
}

/// `redis.call` / `redis.pcall` as a plain Lua C function. Going through mlua's callbacks
/// cost a protected call with two fresh C closures for every value crossing over (Lua 5.1
/// allocates a closure per pushed C function), so a script calling one command produced
/// garbage enough for the collector to take a tenth of the time.
///
/// Two parts, because a Lua error (memory, or the raised command error) leaves the function by
/// `longjmp`, which must not cross a frame owning anything with a destructor: [`prepare`] does
/// all the Rust work (arguments, the command, the reply) and leaves its result in the thread's
/// [`SCRATCH`], returning only a `Copy` value; the pushes below then read the scratch through a
/// raw pointer, so the frames a `longjmp` may skip hold references only.
///
/// # Safety
/// Called by Lua as a C function, with its arguments on `state`'s stack.
unsafe fn call_from_lua(state: *mut ffi::lua_State, raise: bool) -> c_int {
    // SAFETY: prepare reads the arguments on the stack of the calling Lua function.
    let next = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
        prepare(state, raise)
    }))
    .unwrap_or_else(|_| {
        SCRATCH.with(|s| {
            if let Ok(mut s) = s.try_borrow_mut() {
                s.error = "ERR internal error while running the command".into();
            }
        });
        Next::Raise
    });
    let scratch: *mut Scratch = SCRATCH.with(|s| s.as_ptr());
    // SAFETY: the scratch is this thread's and no borrow of it is alive (prepare ended);
    // nothing below re-enters prepare. The pushes may raise a Lua memory error (longjmp),
    // which skips only frames without destructors (references into the scratch).
    unsafe {
        let scratch = &mut *scratch;
        // The arguments were copied: dropping them leaves room on this C call's stack, which
        // Lua limits to 8,000 slots (a script may pass that many through unpack).
        ffi::lua_settop(state, 0);
        match next {
            Next::Raise => {
                push_error_table(state, scratch.error.as_bytes());
                ffi::lua_error(state)
            }
            Next::Push => {
                ffi::luaL_checkstack(state, 4, c"redis.call reply".as_ptr());
                let resp3 = scratch.resp3;
                match scratch.reply.as_ref() {
                    Some(Reply::Int(i)) => ffi::lua_pushnumber(state, *i as f64),
                    Some(Reply::Bulk(b)) => {
                        ffi::lua_pushlstring(state, b.as_ptr().cast(), b.len());
                    }
                    Some(Reply::BulkShort(b)) => {
                        let b = b.as_bytes();
                        ffi::lua_pushlstring(state, b.as_ptr().cast(), b.len());
                    }
                    // A RESP2 double is a bulk string of its text (ZINCRBY, ZSCORE).
                    Some(Reply::Double(d)) if !resp3 => {
                        use crate::util::numtext;
                        // A whole-number score (the usual leaderboard one) is written on the
                        // stack; the general %.17g text is for the rest.
                        if let Some((negative, u)) = numtext::small_whole(*d) {
                            let mut text = [0u8; 24];
                            let start = usize::from(negative);
                            let end = start + numtext::digit_count(u);
                            text[0] = b'-';
                            numtext::write_digits(u, &mut text[start..end]);
                            ffi::lua_pushlstring(state, text.as_ptr().cast(), end);
                        } else {
                            let t = numtext::f64_text(*d);
                            let t = t.as_bytes();
                            ffi::lua_pushlstring(state, t.as_ptr().cast(), t.len());
                        }
                    }
                    Some(Reply::Ok) => push_field_table(state, b"ok", |s| {
                        ffi::lua_pushlstring(s, c"OK".as_ptr(), 2);
                    }),
                    Some(r) => {
                        scratch.wire.clear();
                        r.encode(if resp3 { Resp::V3 } else { Resp::V2 }, &mut scratch.wire);
                        let mut pos = 0;
                        if !push_wire(state, &scratch.wire, &mut pos, 0) {
                            ffi::lua_pushnil(state);
                        }
                    }
                    None => ffi::lua_pushnil(state),
                }
                scratch.reply = None;
                if scratch.wire.capacity() > 64 * 1024 {
                    scratch.wire = Vec::new();
                }
                1
            }
        }
    }
}

/// The Rust part of a call: read the arguments (strings, and numbers as Redis writes them),
/// run the command for the running script, and leave the reply (or the error to raise) in
/// the scratch.
///
/// # Safety
/// `state` is the calling Lua function's state; only its arguments are read.
unsafe fn prepare(state: *mut ffi::lua_State, raise: bool) -> Next {
    let fail = |text: String| {
        SCRATCH.with(|s| s.borrow_mut().error = text);
        Next::Raise
    };
    // SAFETY: reading this C function's own arguments (1..=argc).
    let argv = match unsafe { read_args(state) } {
        Ok(a) => a,
        Err(text) => return fail(text),
    };
    let inv = RUNNING.get();
    if inv.is_null() {
        return fail("ERR redis.call/pcall can only be called inside a script invocation".into());
    }
    // SAFETY: non-null only while Engine::run executes the script on this thread, pointing at
    // that run's Invocation; commands run here cannot call back into Lua (EVAL and FCALL are
    // NOSCRIPT), so this is the only reference to it while it lives.
    let inv = unsafe { &mut *inv };
    let reply = call_command(inv, argv);
    match reply {
        Reply::Error(e) if raise => fail(e),
        r => {
            SCRATCH.with(|s| {
                let mut s = s.borrow_mut();
                s.reply = Some(r);
                s.resp3 = inv.resp3;
            });
            Next::Push
        }
    }
}

/// The arguments of redis.call as a command: strings, and numbers written as Redis writes
/// them (`%.17g`, integers plainly); anything else refused with Redis's error.
///
/// # Safety
/// `state` is a C function's state; its arguments are read, nothing is pushed.
unsafe fn read_args(state: *mut ffi::lua_State) -> Result<Vec<Bytes>, String> {
    // SAFETY: indexes 1..=argc are this call's arguments.
    unsafe {
        let argc = ffi::lua_gettop(state);
        if argc == 0 {
            return Err("ERR Please specify at least one argument for this redis lib call".into());
        }
        let mut argv = Vec::with_capacity(argc as usize);
        for i in 1..=argc {
            match ffi::lua_type(state, i) {
                ffi::LUA_TSTRING => {
                    let mut len = 0usize;
                    let p = ffi::lua_tolstring(state, i, &mut len);
                    argv.push(Bytes::copy_from_slice(std::slice::from_raw_parts(
                        p.cast::<u8>(),
                        len,
                    )));
                }
                ffi::LUA_TNUMBER => {
                    let n = ffi::lua_tonumber(state, i);
                    // Not Lua's own %.14g: Redis writes numbers with %.17g so none loses
                    // precision.
                    argv.push(Bytes::from(super::convert::format_g(n, 17)));
                }
                _ => {
                    return Err(
                        "ERR Lua redis lib command arguments must be strings or integers".into(),
                    )
                }
            }
        }
        Ok(argv)
    }
}

/// Push `{err=<text>, <counted>=true}`: a failed command's error as Redis hands it to Lua (the
/// command already counted it in errorstats).
///
/// # Safety
/// Pushes one value on `state` (may raise a memory error).
unsafe fn push_error_table(state: *mut ffi::lua_State, text: &[u8]) {
    // SAFETY: plain pushes onto a state with room (checked).
    unsafe {
        ffi::luaL_checkstack(state, 3, c"redis.call error".as_ptr());
        ffi::lua_createtable(state, 0, 2);
        ffi::lua_pushlstring(state, c"err".as_ptr(), 3);
        ffi::lua_pushlstring(state, text.as_ptr().cast(), text.len());
        ffi::lua_rawset(state, -3);
        let counted = crate::state::scripts::ERROR_COUNTED_FIELD;
        ffi::lua_pushlstring(state, counted.as_ptr().cast(), counted.len());
        ffi::lua_pushboolean(state, 1);
        ffi::lua_rawset(state, -3);
    }
}

/// Push `{<field>=<value pushed by push_value>}`.
///
/// # Safety
/// `push_value` pushes exactly one value.
unsafe fn push_field_table(
    state: *mut ffi::lua_State,
    field: &[u8],
    push_value: impl FnOnce(*mut ffi::lua_State),
) {
    // SAFETY: plain pushes onto a state with room (checked by the callers).
    unsafe {
        ffi::lua_createtable(state, 0, 1);
        ffi::lua_pushlstring(state, field.as_ptr().cast(), field.len());
        push_value(state);
        ffi::lua_rawset(state, -3);
    }
}

/// Push the RESP2 / RESP3 value at `pos` of `wire` as Redis converts replies for Lua (see
/// `convert::wire_to_lua`, the same rules through mlua); false when it is malformed (nothing
/// is then left pushed for it).
///
/// # Safety
/// Pushes onto `state` (may raise a memory error); holds no owned values.
unsafe fn push_wire(
    state: *mut ffi::lua_State,
    wire: &[u8],
    pos: &mut usize,
    depth: usize,
) -> bool {
    // Command replies nest a few levels; the bound only keeps a malformed one finite.
    const MAX_WIRE_DEPTH: usize = 1000;
    if depth > MAX_WIRE_DEPTH {
        return false;
    }
    let Some(line_end) = wire
        .get(*pos..)
        .and_then(|rest| rest.windows(2).position(|w| w == b"\r\n"))
        .map(|i| i + *pos)
    else {
        return false;
    };
    let kind = wire[*pos];
    let line = &wire[*pos + 1..line_end];
    *pos = line_end + 2;
    let number = |l: &[u8]| -> Option<i64> { std::str::from_utf8(l).ok()?.parse().ok() };
    let push_str = |s: &[u8]| {
        // SAFETY: a plain push.
        unsafe {
            ffi::lua_pushlstring(state, s.as_ptr().cast(), s.len());
        }
    };
    // SAFETY: every push below follows a checkstack of this level; nested values go through
    // this function again.
    unsafe {
        ffi::luaL_checkstack(state, 6, c"redis.call reply".as_ptr());
        let base = ffi::lua_gettop(state);
        let ok = match kind {
            b'+' => {
                push_field_table(state, b"ok", |_| push_str(line));
                true
            }
            b'-' => {
                push_error_table(state, line);
                true
            }
            b':' => match number(line) {
                Some(n) => {
                    ffi::lua_pushnumber(state, n as f64);
                    true
                }
                None => false,
            },
            b'$' => match number(line) {
                Some(n) if n < 0 => {
                    ffi::lua_pushboolean(state, 0);
                    true
                }
                Some(n) => match wire.get(*pos..*pos + n as usize) {
                    Some(s) => {
                        push_str(s);
                        *pos += n as usize + 2;
                        true
                    }
                    None => false,
                },
                None => false,
            },
            b'*' | b'>' => match number(line) {
                Some(n) if n < 0 => {
                    ffi::lua_pushboolean(state, 0);
                    true
                }
                Some(n) => {
                    ffi::lua_createtable(state, n.min(1024) as c_int, 0);
                    let mut all = true;
                    for i in 0..n {
                        if !push_wire(state, wire, pos, depth + 1) {
                            all = false;
                            break;
                        }
                        let Ok(index) = c_int::try_from(i + 1) else {
                            all = false;
                            break;
                        };
                        ffi::lua_rawseti_(state, -2, index);
                    }
                    all
                }
                None => false,
            },
            b'%' | b'~' => match number(line) {
                Some(n) => {
                    ffi::lua_createtable(state, 0, 1);
                    ffi::lua_pushlstring(
                        state,
                        if kind == b'%' { c"map" } else { c"set" }.as_ptr(),
                        3,
                    );
                    ffi::lua_createtable(state, 0, n.clamp(0, 1024) as c_int);
                    let mut all = true;
                    for _ in 0..n {
                        if !push_wire(state, wire, pos, depth + 1) {
                            all = false;
                            break;
                        }
                        if kind == b'%' {
                            if !push_wire(state, wire, pos, depth + 1) {
                                all = false;
                                break;
                            }
                        } else {
                            ffi::lua_pushboolean(state, 1);
                        }
                        ffi::lua_rawset(state, -3);
                    }
                    if all {
                        ffi::lua_rawset(state, -3);
                    }
                    all
                }
                None => false,
            },
            b'_' => {
                ffi::lua_pushnil(state);
                true
            }
            b'#' => {
                ffi::lua_pushboolean(state, c_int::from(line == b"t"));
                true
            }
            b',' => {
                let d = match std::str::from_utf8(line) {
                    Ok("inf") => Some(f64::INFINITY),
                    Ok("-inf") => Some(f64::NEG_INFINITY),
                    Ok("nan") => Some(f64::NAN),
                    Ok(t) => t.parse().ok(),
                    Err(_) => None,
                };
                match d {
                    Some(d) => {
                        push_field_table(state, b"double", |s| ffi::lua_pushnumber(s, d));
                        true
                    }
                    None => false,
                }
            }
            b'(' => {
                push_field_table(state, b"big_number", |_| push_str(line));
                true
            }
            b'=' => match number(line).and_then(|n| wire.get(*pos..*pos + n.max(0) as usize)) {
                Some(s) => {
                    *pos += s.len() + 2;
                    let (format, text) = if s.len() >= 4 {
                        (&s[..3], &s[4..])
                    } else {
                        (&s[..0], s)
                    };
                    ffi::lua_createtable(state, 0, 1);
                    ffi::lua_pushlstring(state, c"verbatim_string".as_ptr(), 15);
                    ffi::lua_createtable(state, 0, 2);
                    ffi::lua_pushlstring(state, c"format".as_ptr(), 6);
                    push_str(format);
                    ffi::lua_rawset(state, -3);
                    ffi::lua_pushlstring(state, c"string".as_ptr(), 6);
                    push_str(text);
                    ffi::lua_rawset(state, -3);
                    ffi::lua_rawset(state, -3);
                    true
                }
                None => false,
            },
            b'|' => match number(line) {
                // An attribute map precedes the value it describes; scripts get the value only.
                Some(n) => {
                    let mut all = true;
                    for _ in 0..2 * n {
                        if !push_wire(state, wire, pos, depth + 1) {
                            all = false;
                            break;
                        }
                        ffi::lua_settop(state, base);
                    }
                    all && push_wire(state, wire, pos, depth + 1)
                }
                None => false,
            },
            _ => false,
        };
        if !ok {
            ffi::lua_settop(state, base);
        }
        ok
    }
}

/// A Lua value as `lua_tonumber` reads it (0 when it is not a number).
fn lua_number(v: &LuaValue) -> f64 {
    match v {
        LuaValue::Integer(i) => *i as f64,
        LuaValue::Number(n) => *n,
        LuaValue::String(s) => std::str::from_utf8(&s.as_bytes())
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0.0),
        _ => 0.0,
    }
}

/// `redis.log(level, ...)`: Redis's checks and texts; the message goes to the server log.
fn log(lua: &Lua, args: MultiValue) -> mlua::Result<()> {
    if args.len() < 2 {
        return Err(lua_error("redis.log() requires two arguments or more."));
    }
    let level = match &args[0] {
        LuaValue::Integer(_) | LuaValue::Number(_) => lua_number(&args[0]) as i64,
        LuaValue::String(_) if lua.coerce_number(args[0].clone())?.is_some() => {
            lua_number(&args[0]) as i64
        }
        _ => return Err(lua_error("First argument must be a number (log level).")),
    };
    if !(0..=3).contains(&level) {
        return Err(lua_error("Invalid debug level."));
    }
    let mut text = Vec::new();
    for (i, v) in args.into_iter().enumerate().skip(1) {
        if let Some(s) = lua.coerce_string(v)? {
            if i != 1 {
                text.push(b' ');
            }
            text.extend_from_slice(&s.as_bytes());
        }
    }
    let text = String::from_utf8_lossy(&text);
    match level {
        0 => tracing::debug!("{text}"),
        1 => tracing::info!("{text}"),
        2 => tracing::info!("{text}"),
        _ => tracing::warn!("{text}"),
    }
    Ok(())
}

/// The arguments of redis.call as a command: strings and numbers (in Lua's `%.14g`), anything
/// else refused with Redis's error.
fn command_args(_lua: &Lua, args: MultiValue) -> mlua::Result<Vec<Bytes>> {
    if args.is_empty() {
        return Err(lua_error(
            "Please specify at least one argument for this redis lib call",
        ));
    }
    let mut argv = Vec::with_capacity(args.len());
    for v in args {
        match v {
            LuaValue::String(s) => argv.push(Bytes::copy_from_slice(&s.as_bytes())),
            // Not Lua's own %.14g: Redis writes numbers with %.17g so none loses precision.
            LuaValue::Integer(i) => argv.push(Bytes::from(i.to_string())),
            LuaValue::Number(n) => argv.push(Bytes::from(super::convert::format_g(n, 17))),
            _ => return Err(non_string_argument()),
        }
    }
    Ok(argv)
}

fn non_string_argument() -> mlua::Error {
    lua_error("Lua redis lib command arguments must be strings or integers")
}

/// Run one command for the script: the checks Redis makes for scripts (scriptCall), then the
/// dispatcher with the script's locks.
/// Why `spec` may not run from this script now (Redis's scriptCall checks, in its order), if
/// it may not.
fn script_refusal(
    inv: &mut Invocation,
    spec: &'static crate::commands::Cmd,
    argv: &[Bytes],
) -> Option<Reply> {
    if !arity_ok(spec.arity, argv.len())
        || crate::commands::subcommand_arity_error(spec, argv).is_some()
    {
        return Some(Reply::error(
            "ERR Wrong number of args calling Redis command from script",
        ));
    }
    // A container's subcommands carry their own flag (CLUSTER RESET may not run from a script,
    // CLUSTER INFO may); Podium's container row holds the flag for all of them.
    let noscript = match argv
        .get(1)
        .filter(|_| crate::commands::latency::is_container(spec.name))
    {
        Some(sub) => {
            let full = format!(
                "{}|{}",
                spec.name,
                String::from_utf8_lossy(sub).to_ascii_lowercase()
            );
            crate::acl::view::command_row(&full).map_or(spec.flags & NOSCRIPT != 0, |r| {
                r.flags.contains(&"noscript")
            })
        }
        None => spec.flags & NOSCRIPT != 0,
    };
    if noscript && super::deny_script_commands() {
        return Some(Reply::error(
            "ERR This Redis command is not allowed from script",
        ));
    }
    if let Err((denied, pos, id)) = crate::commands::acl::check(inv.ctx.client, spec, argv) {
        crate::commands::acl::log_denial(inv.ctx.srv, inv.ctx.client, denied, pos, id, argv, "lua");
        return Some(Reply::Error(format!(
            "ERR The user executing the script {}",
            crate::acl::script_denial_text(denied)
        )));
    }
    // Cluster mode: the keys a script reaches must be served here (Redis's
    // scriptVerifyClusterState), whatever the script declared.
    if !inv.ctx.client.obeys() && crate::cluster::get(inv.ctx.srv).is_some() {
        let positions = spec.key_positions(argv);
        let slots: Vec<u16> = positions
            .iter()
            .map(|&i| crate::keyspace::slots::key_hash_slot(&argv[i]))
            .collect();
        // One command's keys in two slots is a cross-slot query: not served here.
        if slots.windows(2).any(|w| w[0] != w[1]) {
            return Some(Reply::error(
                "ERR Script attempted to access a non local key in a cluster node",
            ));
        }
        for i in positions {
            if let Some(e) = crate::cluster::routing::script_key_refusal(
                inv.ctx.srv,
                &argv[i],
                spec.is_write(),
                inv.ctx.client.cluster.readonly,
            ) {
                return Some(Reply::error(format!("ERR {e}")));
            }
        }
        // Then the script's own slot (checked after the keys are known to be served, as
        // Redis's scriptVerifyClusterState does): every command in the declared keys' slot,
        // or the first reached one's, unless the script may cross slots.
        if let (Some(&slot), false) = (slots.first(), inv.cross_slot) {
            match inv.slot {
                None => inv.slot = Some(slot),
                Some(s) if s != slot => {
                    return Some(Reply::error(
                        "ERR Script attempted to access keys that do not hash to the same slot",
                    ))
                }
                Some(_) => {}
            }
        }
    }
    // Safety net for the lock scope: a script judged to stay in one database holds only its
    // shards, so it must not reach another (stays_in_one_db rules these out beforehand).
    if inv.one_db
        && (spec.flags & crate::commands::flags::SWITCHES_DB != 0
            || matches!(spec.keys, crate::commands::Keys::All))
    {
        return Some(Reply::error(
            "ERR this script was judged to stay in one database; it cannot call this command",
        ));
    }
    // The same for a script judged to touch only its KEYS (see scope.rs): a key outside the
    // locked shards would be a race, so it is refused instead.
    if inv.declared_keys_only {
        let db = inv.ctx.client.db;
        let refused = match spec.keys {
            crate::commands::Keys::None => false,
            crate::commands::Keys::Range(first, last, step) => {
                crate::commands::range_positions(first, last, step, argv.len())
                    .any(|i| !inv.ctx.g.holds_key(db, &argv[i]))
            }
            _ => true,
        };
        if refused {
            return Some(Reply::error(
                "ERR this script was judged to touch only its declared keys; it cannot reach this key",
            ));
        }
    }
    if inv.read_only && (spec.is_write() || spec.flags & MAY_REPLICATE != 0) {
        return Some(Reply::error(
            "ERR Write commands are not allowed from read-only scripts.",
        ));
    }
    let srv = inv.ctx.srv;
    if spec.flags & crate::commands::flags::STALE == 0
        && crate::state::replica_link::running_stale(srv)
    {
        return Some(Reply::error(
            "ERR Can not execute the command on a stale replica",
        ));
    }
    if spec.is_write() && !inv.wrote {
        // Refused only before the script's first write: it cannot stop half way.
        if let Some(e) = crate::commands::write_refusal(srv, spec) {
            let oom = e.is_error() && matches!(&e, Reply::Error(t) if t.starts_with("OOM"));
            if !(oom && inv.allow_oom) {
                return Some(e);
            }
        }
    }
    None
}

fn call_command(inv: &mut Invocation, argv: Vec<Bytes>) -> Reply {
    // A debugging session logs the command, then what came of it.
    super::debugger::log_call(&argv);
    let Some(spec) = lookup(&argv[0]) else {
        let e = "ERR Unknown Redis command called from script";
        super::debugger::log_refusal(e);
        return Reply::error(e);
    };
    // A command refused before it ran counts in its rejected_calls, as Redis's scriptCall
    // counts it.
    if let Some(refusal) = script_refusal(inv, spec, &argv) {
        if let Reply::Error(e) = &refusal {
            super::debugger::log_refusal(e);
        }
        spec.stats(&argv).rejected.fetch_add(1, Ordering::Relaxed);
        let srv = inv.ctx.srv;
        srv.stats.error_replies.fetch_add(1, Ordering::Relaxed);
        srv.errorstats.count_reply(&refusal);
        return refusal;
    }
    let srv = inv.ctx.srv;
    if spec.is_write() {
        if !inv.wrote {
            srv.scripts.mark_wrote(inv.run_id);
        }
        inv.wrote = true;
    }
    let started = crate::clock::command_stamp();
    let ctx = &mut *inv.ctx;
    // redis.set_repl keeps the command's effects away from the targets it leaves out (the
    // flags share the values of the log targets).
    let suppressed = crate::state::repl::TO_ALL & !inv.repl;
    ctx.client.in_script = true;
    let ran = crate::state::scripts::without_targets(suppressed, || {
        crate::commands::run_locked(srv, ctx.client, spec, &argv, ctx.g, true, started)
    });
    ctx.extras.absorb(ran.extras);
    let reply = ran.reply;
    ctx.client.in_script = false;
    srv.stats.commands.add(1);
    // A failed command counts in errorstats now, as in Redis (run_locked counted it in
    // total_error_replies): the script may catch it with pcall, and if it ends the script the
    // script's reply does not count it again.
    if reply.is_error() {
        srv.errorstats.count_reply(&reply);
    }
    let resp = if inv.resp3 {
        crate::protocol::Resp::V3
    } else {
        crate::protocol::Resp::V2
    };
    super::debugger::log_reply(&reply, resp);
    reply
}
