//! The `cmsgpack` library Redis embeds (lua-cmsgpack 0.4.0): `pack`, `unpack`, `unpack_one`,
//! `unpack_limit` and the `_NAME` / `_VERSION` / `_COPYRIGHT` / `_DESCRIPTION` fields,
//! with its encoding choices (checked against redis-server 7.0.15): a number that is a whole
//! int64 takes the smallest integer form, any other the 4-byte float form when that loses
//! nothing, else the 8-byte double; a table whose keys are exactly 1..n is an array (its
//! length from the `#` operator), any other a map in `next` order; tables nested 16 deep
//! are encoded as nil (so circular references end); functions and other values as nil.
//! Decoding gives Lua numbers (an unsigned 64-bit value reads as the signed one, as Redis's
//! 64-bit build does) and refuses the formats 0.4.0 does not know ("Bad data format in
//! input.") or input cut short ("Missing bytes in input.").

use mlua::{Lua, MultiValue, Table, Value as LuaValue};

/// Tables nested this deep are encoded as nil (lua-cmsgpack's LUACMSGPACK_MAX_NESTING).
const MAX_NESTING: usize = 16;

/// Lua 5.1's limit on the stack slots one C function may use (LUAI_MAXCSTACK). Redis's
/// lua-cmsgpack holds its arguments, every top-level value decoded so far, and two slots per
/// level of nesting being decoded (the table and the pending key or index) in its C frame, and
/// fails when the next slot would pass this limit. The decoder keeps the same account, so the
/// same inputs decode or fail as in Redis (a lone array nests 3,999 deep), and its recursion
/// stays bounded.
const LUA_C_STACK_SLOTS: usize = 8000;

const STACK_FULL: &str =
    "stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)";

/// Redis's text when an array nests past the stack (a map past it fails with STACK_FULL).
const ARRAY_TOO_DEEP: &str = "stack overflow (in function mp_decode_to_lua_array)";

fn err(msg: impl Into<String>) -> mlua::Error {
    mlua::Error::runtime(msg.into())
}

/// The number `n` is a whole int64 (C's `(int64_t)n == n` on x86-64: out of range never is).
fn as_int64(n: f64) -> Option<i64> {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    (n.is_finite() && n.trunc() == n && (-TWO_63..TWO_63).contains(&n)).then_some(n as i64)
}

fn encode_int(n: i64, out: &mut Vec<u8>) {
    if n >= 0 {
        if n <= 127 {
            out.push(n as u8);
        } else if n <= 0xff {
            out.extend_from_slice(&[0xcc, n as u8]);
        } else if n <= 0xffff {
            out.push(0xcd);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        } else if n <= 0xffff_ffff {
            out.push(0xce);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        } else {
            out.push(0xcf);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    } else if n >= -32 {
        out.push(n as i8 as u8);
    } else if n >= -128 {
        out.extend_from_slice(&[0xd0, n as i8 as u8]);
    } else if n >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(n as i16).to_be_bytes());
    } else if n >= -2_147_483_648 {
        out.push(0xd2);
        out.extend_from_slice(&(n as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn encode_number(n: f64, out: &mut Vec<u8>) {
    if let Some(i) = as_int64(n) {
        return encode_int(i, out);
    }
    let f = n as f32;
    if f64::from(f) == n {
        out.push(0xca);
        out.extend_from_slice(&f.to_bits().to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&n.to_bits().to_be_bytes());
    }
}

/// A header with a small form (`fix | n` up to `fix_max`) and 16/32-bit forms.
fn encode_header(n: usize, fix: u8, fix_max: usize, codes: [u8; 2], out: &mut Vec<u8>) {
    if n <= fix_max {
        out.push(fix | n as u8);
    } else if n <= 0xffff {
        out.push(codes[0]);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(codes[1]);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

fn encode_bytes(s: &[u8], out: &mut Vec<u8>) {
    let n = s.len();
    if n < 32 {
        out.push(0xa0 | n as u8);
    } else if n <= 0xff {
        out.extend_from_slice(&[0xd9, n as u8]);
    } else if n <= 0xffff {
        out.push(0xda);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
    out.extend_from_slice(s);
}

/// Its keys are exactly 1..n (lua-cmsgpack's table_is_an_array, Lua 5.1 flavour: each key a
/// number that is a positive whole C int).
fn is_array(t: &Table) -> mlua::Result<bool> {
    let (mut count, mut max) = (0i64, 0i64);
    for pair in t.clone().pairs::<LuaValue, LuaValue>() {
        let (k, _) = pair?;
        let n = match k {
            LuaValue::Integer(i) => i as f64,
            LuaValue::Number(n) => n,
            _ => return Ok(false),
        };
        if n <= 0.0 || !(n.trunc() == n && n < 2_147_483_648.0) {
            return Ok(false);
        }
        max = max.max(n as i64);
        count += 1;
    }
    Ok(max == count)
}

fn encode_value(v: &LuaValue, level: usize, out: &mut Vec<u8>) -> mlua::Result<()> {
    match v {
        LuaValue::String(s) => encode_bytes(&s.as_bytes(), out),
        LuaValue::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        LuaValue::Integer(i) => encode_number(*i as f64, out),
        LuaValue::Number(n) => encode_number(*n, out),
        LuaValue::Table(t) if level < MAX_NESTING => {
            if is_array(t)? {
                let len = t.raw_len();
                encode_header(len, 0x90, 15, [0xdc, 0xdd], out);
                for j in 1..=len {
                    encode_value(&t.get::<LuaValue>(j)?, level + 1, out)?;
                }
            } else {
                let len = t.clone().pairs::<LuaValue, LuaValue>().count();
                encode_header(len, 0x80, 15, [0xde, 0xdf], out);
                for pair in t.clone().pairs::<LuaValue, LuaValue>() {
                    let (k, v) = pair?;
                    encode_value(&k, level + 1, out)?;
                    encode_value(&v, level + 1, out)?;
                }
            }
        }
        _ => out.push(0xc0),
    }
    Ok(())
}

/// Why decoding stopped.
enum DecodeError {
    Missing,
    BadFormat,
    Lua(mlua::Error),
}

impl From<mlua::Error> for DecodeError {
    fn from(e: mlua::Error) -> DecodeError {
        DecodeError::Lua(e)
    }
}

struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
    /// Lua stack slots lua-cmsgpack would hold before the value being decoded: the call's
    /// arguments and the top-level values already decoded (see [`LUA_C_STACK_SLOTS`]).
    slots_below: usize,
}

impl<'a> Cursor<'a> {
    fn left(&self) -> usize {
        self.data.len() - self.pos
    }

    /// The next `n` bytes (consumed), or Missing.
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.left() < n {
            return Err(DecodeError::Missing);
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn be(&mut self, n: usize) -> Result<u64, DecodeError> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }
}

/// A container opened at nesting level `depth + 1` needs two more slots; past the limit it
/// fails with the text Redis gives for that kind of container.
fn check_nesting(c: &Cursor, depth: usize, text: &str) -> Result<(), DecodeError> {
    if c.slots_below + 2 * (depth + 1) > LUA_C_STACK_SLOTS {
        return Err(DecodeError::Lua(err(text)));
    }
    Ok(())
}

fn decode_value(lua: &Lua, c: &mut Cursor, depth: usize) -> Result<LuaValue, DecodeError> {
    let code = c.take(1)?[0];
    let number = |n: f64| Ok(LuaValue::Number(n));
    match code {
        0xcc => number(c.be(1)? as f64),
        0xcd => number(c.be(2)? as f64),
        0xce => number(c.be(4)? as f64),
        // Redis's 64-bit build reads it into a signed integer.
        0xcf => number(c.be(8)? as i64 as f64),
        0xd0 => number(f64::from(c.be(1)? as u8 as i8)),
        0xd1 => number(f64::from(c.be(2)? as u16 as i16)),
        0xd2 => number(f64::from(c.be(4)? as u32 as i32)),
        0xd3 => number(c.be(8)? as i64 as f64),
        0xc0 => Ok(LuaValue::Nil),
        0xc3 => Ok(LuaValue::Boolean(true)),
        0xc2 => Ok(LuaValue::Boolean(false)),
        0xca => number(f64::from(f32::from_bits(c.be(4)? as u32))),
        0xcb => number(f64::from_bits(c.be(8)?)),
        0xd9..=0xdb => {
            let n = c.be(match code {
                0xd9 => 1,
                0xda => 2,
                _ => 4,
            })? as usize;
            Ok(LuaValue::String(lua.create_string(c.take(n)?)?))
        }
        0xdc => {
            let n = c.be(2)? as usize;
            decode_array(lua, c, n, depth)
        }
        0xdd => {
            let n = c.be(4)? as usize;
            decode_array(lua, c, n, depth)
        }
        0xde => {
            let n = c.be(2)? as usize;
            decode_map(lua, c, n, depth)
        }
        0xdf => {
            let n = c.be(4)? as usize;
            decode_map(lua, c, n, depth)
        }
        b if b & 0x80 == 0 => number(f64::from(b)),
        b if b & 0xe0 == 0xe0 => number(f64::from(b as i8)),
        b if b & 0xe0 == 0xa0 => {
            let n = usize::from(b & 0x1f);
            Ok(LuaValue::String(lua.create_string(c.take(n)?)?))
        }
        b if b & 0xf0 == 0x90 => decode_array(lua, c, usize::from(b & 0xf), depth),
        b if b & 0xf0 == 0x80 => decode_map(lua, c, usize::from(b & 0xf), depth),
        _ => Err(DecodeError::BadFormat),
    }
}

fn decode_array(
    lua: &Lua,
    c: &mut Cursor,
    n: usize,
    depth: usize,
) -> Result<LuaValue, DecodeError> {
    check_nesting(c, depth, ARRAY_TOO_DEEP)?;
    // No room is reserved from the declared count: the input may be lying.
    let t = lua.create_table()?;
    for i in 1..=n {
        let v = decode_value(lua, c, depth + 1)?;
        t.raw_set(i, v)?;
    }
    Ok(LuaValue::Table(t))
}

fn decode_map(lua: &Lua, c: &mut Cursor, n: usize, depth: usize) -> Result<LuaValue, DecodeError> {
    check_nesting(c, depth, STACK_FULL)?;
    let t = lua.create_table()?;
    for _ in 0..n {
        let k = decode_value(lua, c, depth + 1)?;
        let v = decode_value(lua, c, depth + 1)?;
        // Lua's own table errors: they carry no script position in Redis (the VM raises them
        // inside the C library), as a failed command's error does not.
        let vm_error = |m: &str| {
            DecodeError::Lua(mlua::Error::external(
                crate::commands::scripting::error::CommandError(format!("ERR {m}")),
            ))
        };
        match &k {
            LuaValue::Nil => return Err(vm_error("table index is nil")),
            LuaValue::Number(n) if n.is_nan() => return Err(vm_error("table index is NaN")),
            _ => {}
        }
        t.raw_set(k, v)?;
    }
    Ok(LuaValue::Table(t))
}

/// The input string of an unpack call: a string, or a number in Lua's text form.
fn input(lua: &Lua, args: &MultiValue, name: &str) -> mlua::Result<Vec<u8>> {
    let v = args.front().cloned().unwrap_or(LuaValue::Nil);
    let got = if args.is_empty() {
        "no value"
    } else {
        v.type_name()
    };
    match v {
        LuaValue::String(s) => Ok(s.as_bytes().to_vec()),
        n @ (LuaValue::Integer(_) | LuaValue::Number(_)) => Ok(lua
            .coerce_string(n)?
            .map(|s| s.as_bytes().to_vec())
            .unwrap_or_default()),
        _ => Err(err(format!(
            "bad argument #1 to '{name}' (string expected, got {got})"
        ))),
    }
}

/// Integer argument `i` (1-based) as luaL_checkinteger / luaL_optinteger read it.
fn integer_arg(
    lua: &Lua,
    args: &MultiValue,
    i: usize,
    name: &str,
    default: Option<i64>,
) -> mlua::Result<i64> {
    let v = args.get(i - 1).cloned().unwrap_or(LuaValue::Nil);
    if let (LuaValue::Nil, Some(d)) = (&v, default) {
        return Ok(d);
    }
    let got = if args.len() < i {
        "no value"
    } else {
        v.type_name()
    };
    match lua.coerce_number(v)? {
        Some(n) => Ok(n as i64),
        None => Err(err(format!(
            "bad argument #{i} to '{name}' (number expected, got {got})"
        ))),
    }
}

/// lua-cmsgpack's mp_unpack_full: up to `limit` values from `offset` (both 0: every value,
/// and no offset returned); otherwise the next offset (-1 at the end) comes first. `args` is
/// how many arguments the call was given (they count against the Lua stack, as in Redis).
fn unpack_full(
    lua: &Lua,
    data: &[u8],
    limit: i64,
    offset: i64,
    args: usize,
) -> mlua::Result<MultiValue> {
    if offset < 0 || limit < 0 {
        return Err(err(format!(
            "Invalid request to unpack with offset of {} and limit of {}.",
            offset as i32,
            data.len() as i32
        )));
    }
    if offset as u64 > data.len() as u64 {
        return Err(err(format!(
            "Start offset {} greater than input length {}.",
            offset as i32,
            data.len() as i32
        )));
    }
    let decode_all = limit == 0 && offset == 0;
    let limit = if decode_all {
        i64::from(i32::MAX)
    } else {
        limit
    };
    let mut c = Cursor {
        data,
        pos: offset as usize,
        slots_below: args,
    };
    let mut values = Vec::new();
    while c.left() > 0 && (values.len() as i64) < limit {
        c.slots_below = args + values.len();
        if c.slots_below + 1 > LUA_C_STACK_SLOTS {
            return Err(err(STACK_FULL));
        }
        match decode_value(lua, &mut c, 0) {
            Ok(v) => values.push(v),
            Err(DecodeError::Missing) => return Err(err("Missing bytes in input.")),
            Err(DecodeError::BadFormat) => return Err(err("Bad data format in input.")),
            Err(DecodeError::Lua(e)) => return Err(e),
        }
    }
    if !decode_all {
        let next = if c.left() == 0 { -1 } else { c.pos as i64 };
        values.insert(0, LuaValue::Number(next as f64));
    }
    Ok(MultiValue::from_vec(values))
}

pub(crate) fn register(lua: &Lua, g: &Table) -> mlua::Result<()> {
    let m = lua.create_table()?;
    m.raw_set(
        "pack",
        lua.create_function(|lua, args: MultiValue| {
            if args.is_empty() {
                return Err(err(
                    "bad argument #0 to 'pack' (MessagePack pack needs input.)",
                ));
            }
            // lua-cmsgpack asks for as many stack slots as it has arguments, beside them.
            if 2 * args.len() > LUA_C_STACK_SLOTS {
                return Err(err(
                    "bad argument #0 to 'pack' (Too many arguments for MessagePack pack.)",
                ));
            }
            let mut out = Vec::new();
            for v in args.iter() {
                encode_value(v, 0, &mut out)?;
            }
            lua.create_string(&out)
        })?,
    )?;
    m.raw_set(
        "unpack",
        lua.create_function(|lua, args: MultiValue| {
            let data = input(lua, &args, "unpack")?;
            unpack_full(lua, &data, 0, 0, args.len())
        })?,
    )?;
    m.raw_set(
        "unpack_one",
        lua.create_function(|lua, args: MultiValue| {
            let data = input(lua, &args, "unpack_one")?;
            let offset = integer_arg(lua, &args, 2, "unpack_one", Some(0))?;
            unpack_full(lua, &data, 1, offset, args.len())
        })?,
    )?;
    m.raw_set(
        "unpack_limit",
        lua.create_function(|lua, args: MultiValue| {
            let data = input(lua, &args, "unpack_limit")?;
            let limit = integer_arg(lua, &args, 2, "unpack_limit", None)?;
            let offset = integer_arg(lua, &args, 3, "unpack_limit", Some(0))?;
            unpack_full(lua, &data, limit, offset, args.len())
        })?,
    )?;
    m.raw_set("_NAME", "cmsgpack")?;
    m.raw_set("_VERSION", "lua-cmsgpack 0.4.0")?;
    m.raw_set("_COPYRIGHT", "Copyright (C) 2012, Salvatore Sanfilippo")?;
    m.raw_set("_DESCRIPTION", "MessagePack C implementation for Lua")?;
    g.raw_set("cmsgpack", m)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(v: &[u8]) -> String {
        v.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn numbers_take_redis_forms() {
        // Each expected text is what redis-server 7.0.15's cmsgpack.pack gives.
        for (n, want) in [
            (0.1, "cb3fb999999999999a"),
            (-1_099_511_627_776.0, "d3ffffff0000000000"),
            (9_223_372_036_854_775_808.0, "ca5f000000"),
            (-9_223_372_036_854_775_808.0, "d38000000000000000"),
            (f64::INFINITY, "ca7f800000"),
            (1.5, "ca3fc00000"),
            (2_147_483_648.0, "ce80000000"),
            (-1.0, "ff"),
            (-33.0, "d0df"),
            (200.0, "ccc8"),
        ] {
            let mut out = Vec::new();
            encode_number(n, &mut out);
            assert_eq!(hex(&out), want, "{n}");
        }
    }

    #[test]
    fn packs_and_unpacks_through_lua() {
        let lua = Lua::new();
        let g = lua.globals();
        register(&lua, &g).unwrap();
        let h: String = lua
            .load(
                "local e = cmsgpack.pack({[1]=1,[3]=3}, {a={}}, {1,2,nil,4}, print)
                 return (e:gsub('.', function(c) return string.format('%02x', c:byte()) end))",
            )
            .eval()
            .unwrap();
        // A sparse table is a map; an empty table an array; nil ends `#` at 2 here.
        assert!(
            h.starts_with("8201010303") || h.starts_with("8203030101"),
            "{h}"
        );
        assert!(h.contains("81a16190"), "{h}");
        let (a, b, c): (i64, i64, String) = lua
            .load(
                "local off, v = cmsgpack.unpack_one(cmsgpack.pack(7, 'xy'), 0)
                 local off2, w = cmsgpack.unpack_one(cmsgpack.pack(7, 'xy'), off)
                 return off, off2, w",
            )
            .eval()
            .unwrap();
        assert_eq!((a, b, c.as_str()), (1, -1, "xy"));
        for (input, msg) in [
            ("string.char(0xc1)", "Bad data format in input."),
            ("string.char(0xcd, 1)", "Missing bytes in input."),
            (
                "string.char(0xdd, 0xff, 0xff, 0xff, 0xff)",
                "Missing bytes in input.",
            ),
        ] {
            let e = lua
                .load(format!("return cmsgpack.unpack({input})"))
                .eval::<LuaValue>()
                .unwrap_err();
            assert!(e.to_string().contains(msg), "{input}: {e}");
        }
    }

    /// Deep nesting is refused, not a crash. Run on a thread with the stack a worker gets
    /// (crate::util::WORKER_STACK) in a release build's terms: an unoptimised build's frames
    /// are several times larger, and the 3,999 levels the stack account allows overflow 8 MiB
    /// there.
    #[test]
    fn deep_nesting_is_refused() {
        let stack = if cfg!(debug_assertions) {
            64 << 20
        } else {
            crate::util::WORKER_STACK
        };
        std::thread::Builder::new()
            .stack_size(stack)
            .spawn(|| {
                let lua = Lua::new();
                let g = lua.globals();
                register(&lua, &g).unwrap();
                let e = lua
                    .load("return cmsgpack.unpack(string.rep(string.char(0x91), 100000))")
                    .eval::<LuaValue>()
                    .unwrap_err();
                assert!(e.to_string().contains(ARRAY_TOO_DEEP), "{e}");
                // The deepest array the account allows decodes (3,999 levels, one argument).
                let depth: usize = lua
                    .load(
                        "local t = cmsgpack.unpack(string.rep(string.char(0x91), 3999) .. \
                         string.char(0)) local d = 0 while type(t) == 'table' do \
                         t = t[1] d = d + 1 end return d",
                    )
                    .eval()
                    .unwrap();
                assert_eq!(depth, 3999);
            })
            .expect("spawn the test thread")
            .join()
            .expect("the decoder stopped at its depth limit");
    }
}
