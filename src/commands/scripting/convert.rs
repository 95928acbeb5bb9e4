//! Values crossing between Redis replies and Lua, by Redis 7.0's rules (script_lua.c).
//!
//! Command replies reach a script as the script's protocol would carry them (RESP2 unless it
//! called `redis.setresp(3)`): the reply is encoded and the wire form pushed as Lua values
//! (`api::push_wire`, on the Lua stack directly), so every reply shape converts the way a
//! client would see it. RESP2: integers as numbers,
//! bulk strings as strings, nil as false, arrays as tables, status as `{ok=}`, errors as
//! `{err=}`. RESP3 adds maps (`{map={...}}`), sets (`{set={member=true}}`), null as nil,
//! booleans, doubles (`{double=n}`), big numbers and verbatim strings.
//!
//! A script's return value goes the other way ([`lua_to_reply`]): numbers truncated to
//! integers, strings as bulk strings, tables as arrays up to the first nil, unless they are
//! `{err=}`, `{ok=}`, `{double=}`, `{big_number=}`, `{verbatim_string=}`, `{map=}` or `{set=}`.

use crate::protocol::Reply;
use bytes::Bytes;
use mlua::Value as LuaValue;

/// Deepest table nesting converted to a reply. Redis walks the table on the Lua stack and
/// stops where it runs out of room, answering the levels it reached and then the error: a
/// script's returned table at depth 7,995 gets "reached lua stack limit" inside 7,995 arrays
/// (measured on redis-server 7.0.15), and so it does here. The recursion fits a worker's stack
/// (crate::util::WORKER_STACK).
pub(super) const MAX_DEPTH: usize = 7_994;

/// Text of a Lua string with CR and LF turned into spaces (status and error lines).
fn one_line(s: &mlua::String) -> String {
    String::from_utf8_lossy(&s.as_bytes()).replace(['\r', '\n'], " ")
}

/// The field names a returned table is looked up by, made once per Lua state: a key given as
/// a Rust `&str` is a fresh Lua string (through a protected call) on every lookup, and a
/// returned table is asked for up to seven of them.
pub(super) struct ReplyKeys {
    err: mlua::String,
    counted: mlua::String,
    ok: mlua::String,
    double: mlua::String,
    big_number: mlua::String,
    verbatim_string: mlua::String,
    format: mlua::String,
    string: mlua::String,
    map: mlua::String,
    set: mlua::String,
}

impl ReplyKeys {
    pub(super) fn new(lua: &mlua::Lua) -> mlua::Result<ReplyKeys> {
        Ok(ReplyKeys {
            err: lua.create_string("err")?,
            counted: lua.create_string(crate::state::scripts::ERROR_COUNTED_FIELD)?,
            ok: lua.create_string("ok")?,
            double: lua.create_string("double")?,
            big_number: lua.create_string("big_number")?,
            verbatim_string: lua.create_string("verbatim_string")?,
            format: lua.create_string("format")?,
            string: lua.create_string("string")?,
            map: lua.create_string("map")?,
            set: lua.create_string("set")?,
        })
    }
}

/// The script's return value as a reply (Redis's luaReplyToRedisReply). `script_resp3`: the
/// script chose RESP3 with `redis.setresp(3)` (booleans then stay booleans); `caller_resp3`:
/// the calling client speaks RESP3 (big numbers and verbatim strings are written natively).
pub(super) fn lua_to_reply(
    keys: &ReplyKeys,
    v: &LuaValue,
    script_resp3: bool,
    caller_resp3: bool,
    depth: usize,
) -> Reply {
    match v {
        LuaValue::String(s) => Reply::Bulk(Bytes::copy_from_slice(&s.as_bytes())),
        LuaValue::Boolean(b) if script_resp3 => Reply::Bool(*b),
        LuaValue::Boolean(true) => Reply::Int(1),
        LuaValue::Integer(i) => Reply::Int(*i),
        // C's (long long) cast truncates toward zero; `as` saturates where C is undefined.
        LuaValue::Number(n) => Reply::Int(*n as i64),
        LuaValue::Table(t) => {
            if depth > MAX_DEPTH {
                return Reply::error("ERR reached lua stack limit");
            }
            let field = |name: &mlua::String| t.raw_get::<LuaValue>(name).unwrap_or(LuaValue::Nil);
            if let LuaValue::String(e) = field(&keys.err) {
                if depth == 0 {
                    crate::state::scripts::set_error_already_counted(matches!(
                        field(&keys.counted),
                        LuaValue::Boolean(true)
                    ));
                }
                let text = one_line(&e);
                return Reply::Error(text.strip_prefix('-').unwrap_or(&text).to_string());
            }
            if let LuaValue::String(s) = field(&keys.ok) {
                return Reply::StatusOwned(one_line(&s));
            }
            match field(&keys.double) {
                LuaValue::Number(d) => return Reply::Double(d),
                LuaValue::Integer(i) => return Reply::Double(i as f64),
                _ => {}
            }
            if let LuaValue::String(s) = field(&keys.big_number) {
                let text = one_line(&s);
                return if caller_resp3 {
                    Reply::Raw(Bytes::from(format!("({text}\r\n")))
                } else {
                    Reply::Bulk(Bytes::from(text))
                };
            }
            if let LuaValue::Table(vt) = field(&keys.verbatim_string) {
                let format = vt
                    .raw_get::<LuaValue>(&keys.format)
                    .unwrap_or(LuaValue::Nil);
                let text = vt
                    .raw_get::<LuaValue>(&keys.string)
                    .unwrap_or(LuaValue::Nil);
                if let (LuaValue::String(f), LuaValue::String(s)) = (format, text) {
                    let s = s.as_bytes();
                    if !caller_resp3 {
                        return Reply::Bulk(Bytes::copy_from_slice(&s));
                    }
                    let f = f.as_bytes();
                    let mut out = format!("={}\r\n", s.len() + 4).into_bytes();
                    let mut fmt = [b' '; 3];
                    for (d, c) in fmt.iter_mut().zip(f.iter()) {
                        *d = *c;
                    }
                    out.extend_from_slice(&fmt);
                    out.push(b':');
                    out.extend_from_slice(&s);
                    out.extend_from_slice(b"\r\n");
                    return Reply::Raw(Bytes::from(out));
                }
            }
            if let LuaValue::Table(m) = field(&keys.map) {
                let mut pairs = Vec::new();
                for (k, v) in m.pairs::<LuaValue, LuaValue>().flatten() {
                    pairs.push((
                        lua_to_reply(keys, &k, script_resp3, caller_resp3, depth + 1),
                        lua_to_reply(keys, &v, script_resp3, caller_resp3, depth + 1),
                    ));
                }
                return Reply::Map(pairs);
            }
            if let LuaValue::Table(s) = field(&keys.set) {
                let mut items = Vec::new();
                for (k, _) in s.pairs::<LuaValue, LuaValue>().flatten() {
                    items.push(lua_to_reply(
                        keys,
                        &k,
                        script_resp3,
                        caller_resp3,
                        depth + 1,
                    ));
                }
                return Reply::Set(items);
            }
            let mut items = Vec::new();
            for i in 1.. {
                match t.raw_get::<LuaValue>(i) {
                    Ok(LuaValue::Nil) | Err(_) => break,
                    Ok(item) => items.push(lua_to_reply(
                        keys,
                        &item,
                        script_resp3,
                        caller_resp3,
                        depth + 1,
                    )),
                }
            }
            Reply::Array(items)
        }
        _ => Reply::Null,
    }
}

/// `x` as C's printf `%.<precision>g` writes it (Redis passes numbers to commands as `%.17g`;
/// cjson encodes them as `%.14g`).
pub(crate) fn format_g(x: f64, precision: usize) -> String {
    if x.is_nan() {
        return if x.is_sign_negative() { "-nan" } else { "nan" }.into();
    }
    if x.is_infinite() {
        return if x < 0.0 { "-inf" } else { "inf" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let p = precision.max(1);
    let sci = format!("{:.*e}", p - 1, x);
    let Some((mantissa, exp)) = sci.split_once('e') else {
        return sci;
    };
    let exp: i32 = exp.parse().unwrap_or(0);
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if exp < -4 || exp >= p as i32 {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exp.abs())
    } else {
        let decimals = (p as i32 - 1 - exp).max(0) as usize;
        trim(&format!("{x:.decimals$}"))
    }
}

#[cfg(test)]
mod tests {
    use super::format_g;

    #[test]
    fn printf_g_formatting() {
        // The texts redis-server 7.0.15 gives for redis.call('set', k, n) then GET.
        assert_eq!(format_g(0.1, 17), "0.10000000000000001");
        assert_eq!(format_g(1e300, 17), "1.0000000000000001e+300");
        assert_eq!(format_g(-0.0, 17), "-0");
        assert_eq!(format_g(1.0 / 3.0, 17), "0.33333333333333331");
        assert_eq!(format_g(9007199254740991.0, 17), "9007199254740991");
        assert_eq!(format_g(3.0, 14), "3");
        assert_eq!(format_g(0.0001, 14), "0.0001");
        assert_eq!(format_g(0.00001, 14), "1e-05");
        assert_eq!(format_g(123456789012345678.0, 14), "1.2345678901235e+17");
        assert_eq!(format_g(f64::INFINITY, 14), "inf");
    }
}
