//! The `struct` library Redis embeds (Roberto Ierusalimschy's lua-struct, as in Redis 7.0):
//! `struct.pack(fmt, ...)`, `struct.unpack(fmt, data [, pos])` and `struct.size(fmt)`, for the
//! x86-64 build Redis ships: little-endian by default, `long` and `size_t` of 8 bytes, `int`
//! of 4, integers up to 32 bytes (`i<n>` / `I<n>`), alignment off until `!` (default 8).
//! Format characters: `>` `<` endianness, `!n` alignment, `x` a zero byte, `b B h H l L T i I`
//! integers (lowercase signed), `f` `d` floats, `s` a zero-terminated string, `c<n>` a
//! fixed-size string (`c0`: the whole string when packing, the preceding number's size when
//! unpacking), spaces ignored. Numbers come back as Lua numbers.

use mlua::{Lua, MultiValue, Table, Value as LuaValue};

/// The largest integer size (lua-struct's MAXINTSIZE).
const MAX_INT_SIZE: usize = 32;
/// `!` without a number: the platform's largest alignment.
const MAX_ALIGN: usize = 8;

fn err(msg: impl Into<String>) -> mlua::Error {
    mlua::Error::runtime(msg.into())
}

fn arg_error(i: usize, name: &str, msg: &str) -> mlua::Error {
    err(format!("bad argument #{i} to '{name}' ({msg})"))
}

#[derive(Clone, Copy, PartialEq)]
enum Endian {
    Big,
    Little,
}

struct Header {
    endian: Endian,
    align: usize,
}

impl Default for Header {
    fn default() -> Header {
        Header {
            endian: Endian::Little,
            align: 1,
        }
    }
}

/// A run of digits at `fmt[*i..]`, or `default`.
fn number(fmt: &[u8], i: &mut usize, default: usize) -> mlua::Result<usize> {
    if !fmt.get(*i).is_some_and(u8::is_ascii_digit) {
        return Ok(default);
    }
    let mut a: usize = 0;
    while let Some(d) = fmt.get(*i).filter(|c| c.is_ascii_digit()) {
        let d = usize::from(d - b'0');
        if a > (i32::MAX as usize) / 10 || a * 10 > i32::MAX as usize - d {
            return Err(err("integral size overflow"));
        }
        a = a * 10 + d;
        *i += 1;
    }
    Ok(a)
}

/// The size option `opt` takes (reading its digits).
fn option_size(opt: u8, fmt: &[u8], i: &mut usize) -> mlua::Result<usize> {
    Ok(match opt {
        b'B' | b'b' | b'x' => 1,
        b'H' | b'h' => 2,
        b'L' | b'l' | b'T' | b'd' => 8,
        b'f' => 4,
        b'c' => number(fmt, i, 1)?,
        b'i' | b'I' => {
            let size = number(fmt, i, 4)?;
            if size > MAX_INT_SIZE {
                return Err(err(format!(
                    "integral size {size} is larger than limit of {MAX_INT_SIZE}"
                )));
            }
            size
        }
        _ => 0,
    })
}

/// Padding before an item of `size` at offset `len` (lua-struct's gettoalign, with its
/// arithmetic for sizes that are not powers of two).
fn padding(len: usize, h: &Header, opt: u8, size: usize) -> usize {
    if size == 0 || opt == b'c' {
        return 0;
    }
    let size = size.min(h.align);
    size.wrapping_sub(len & size.wrapping_sub(1)) & size.wrapping_sub(1)
}

/// Endianness, alignment and spaces; anything else is an invalid option.
fn control(opt: u8, fmt: &[u8], i: &mut usize, h: &mut Header, name: &str) -> mlua::Result<()> {
    match opt {
        b' ' => {}
        b'>' => h.endian = Endian::Big,
        b'<' => h.endian = Endian::Little,
        b'!' => {
            let a = number(fmt, i, MAX_ALIGN)?;
            if !(a > 0 && a & (a - 1) == 0) {
                return Err(err(format!("alignment {a} is not a power of 2")));
            }
            h.align = a;
        }
        other => {
            return Err(arg_error(
                1,
                name,
                &format!("invalid format option '{}'", other as char),
            ))
        }
    }
    Ok(())
}

fn type_name(args: &MultiValue, i: usize, name: &str) -> &'static str {
    match args.get(i - 1) {
        // pack pushes a nil after its arguments (its buffer's start mark), which is what
        // the first missing one reads as.
        None if name == "pack" && i == args.len() + 1 => "nil",
        None => "no value",
        Some(v) => v.type_name(),
    }
}

/// Argument `i` as luaL_checknumber reads it.
fn number_arg(lua: &Lua, args: &MultiValue, i: usize, name: &str) -> mlua::Result<f64> {
    let v = args.get(i - 1).cloned().unwrap_or(LuaValue::Nil);
    lua.coerce_number(v)?.ok_or_else(|| {
        arg_error(
            i,
            name,
            &format!("number expected, got {}", type_name(args, i, name)),
        )
    })
}

/// Argument `i` as luaL_checklstring reads it.
fn string_arg(lua: &Lua, args: &MultiValue, i: usize, name: &str) -> mlua::Result<Vec<u8>> {
    let v = args.get(i - 1).cloned().unwrap_or(LuaValue::Nil);
    match v {
        LuaValue::String(s) => Ok(s.as_bytes().to_vec()),
        n @ (LuaValue::Integer(_) | LuaValue::Number(_)) => Ok(lua
            .coerce_string(n)?
            .map(|s| s.as_bytes().to_vec())
            .unwrap_or_default()),
        _ => Err(arg_error(
            i,
            name,
            &format!("string expected, got {}", type_name(args, i, name)),
        )),
    }
}

/// `n` as lua-struct writes it: through C's long / unsigned long, `size` bytes.
fn put_integer(n: f64, endian: Endian, size: usize, out: &mut Vec<u8>) {
    let mut value: u64 = if n < 0.0 { n as i64 as u64 } else { n as u64 };
    let mut bytes = [0u8; MAX_INT_SIZE];
    for b in bytes.iter_mut().take(size) {
        *b = value as u8;
        value = value.checked_shr(8).unwrap_or(0);
    }
    if endian == Endian::Big {
        bytes[..size].reverse();
    }
    out.extend_from_slice(&bytes[..size]);
}

fn get_integer(data: &[u8], endian: Endian, signed: bool, size: usize) -> f64 {
    let mut l: u64 = 0;
    let mut push = |b: u8| l = (l << 8) | u64::from(b);
    if endian == Endian::Big {
        data[..size].iter().for_each(|&b| push(b));
    } else {
        data[..size].iter().rev().for_each(|&b| push(b));
    }
    if !signed {
        return l as f64;
    }
    // x86-64 takes shift counts modulo 64, as the C code's shift does there.
    let mask = u64::MAX << ((size * 8).wrapping_sub(1) & 63);
    if l & mask != 0 {
        l |= mask;
    }
    l as i64 as f64
}

fn pack(lua: &Lua, args: MultiValue) -> mlua::Result<mlua::String> {
    const NAME: &str = "pack";
    let fmt = string_arg(lua, &args, 1, NAME)?;
    let mut h = Header::default();
    let mut arg = 2;
    let mut out = Vec::new();
    let mut total = 0usize;
    let mut i = 0;
    while i < fmt.len() {
        let opt = fmt[i];
        i += 1;
        let mut size = option_size(opt, &fmt, &mut i)?;
        let pad = padding(total, &h, opt, size);
        total += pad;
        out.resize(out.len() + pad, 0);
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let n = number_arg(lua, &args, arg, NAME)?;
                arg += 1;
                put_integer(n, h.endian, size, &mut out);
            }
            b'x' => out.push(0),
            b'f' => {
                let f = number_arg(lua, &args, arg, NAME)? as f32;
                arg += 1;
                out.extend_from_slice(&match h.endian {
                    Endian::Big => f.to_be_bytes(),
                    Endian::Little => f.to_le_bytes(),
                });
            }
            b'd' => {
                let d = number_arg(lua, &args, arg, NAME)?;
                arg += 1;
                out.extend_from_slice(&match h.endian {
                    Endian::Big => d.to_be_bytes(),
                    Endian::Little => d.to_le_bytes(),
                });
            }
            b'c' | b's' => {
                let s = string_arg(lua, &args, arg, NAME)?;
                arg += 1;
                if size == 0 {
                    size = s.len();
                }
                if s.len() < size {
                    return Err(arg_error(arg, NAME, "string too short"));
                }
                out.extend_from_slice(&s[..size]);
                if opt == b's' {
                    out.push(0);
                    size += 1;
                }
            }
            _ => control(opt, &fmt, &mut i, &mut h, NAME)?,
        }
        total += size;
    }
    lua.create_string(&out)
}

fn unpack(lua: &Lua, args: MultiValue) -> mlua::Result<MultiValue> {
    const NAME: &str = "unpack";
    let fmt = string_arg(lua, &args, 1, NAME)?;
    let data = string_arg(lua, &args, 2, NAME)?;
    let ld = data.len();
    // luaL_optinteger into a size_t: a negative start wraps, and fails the length check.
    let start = match args.get(2) {
        None | Some(LuaValue::Nil) => 1u64,
        Some(_) => number_arg(lua, &args, 3, NAME)? as i64 as u64,
    };
    if start == 0 {
        return Err(arg_error(3, NAME, "offset must be 1 or greater"));
    }
    let mut pos = usize::try_from(start - 1).unwrap_or(usize::MAX);
    let mut h = Header::default();
    let mut results: Vec<LuaValue> = Vec::new();
    let too_short = || arg_error(2, NAME, "data string too short");
    let mut i = 0;
    while i < fmt.len() {
        let opt = fmt[i];
        i += 1;
        let mut size = option_size(opt, &fmt, &mut i)?;
        pos = pos.wrapping_add(padding(pos, &h, opt, size));
        if !(size <= ld && pos <= ld - size) {
            return Err(too_short());
        }
        // Redis's struct checks for two more Lua stack slots (the item and the final
        // position) on every option: the arguments and the results so far stay in its C
        // frame, which may use LUAI_MAXCSTACK (8,000) slots.
        if args.len() + results.len() + 2 > 8000 {
            return Err(err("stack overflow (too many results)"));
        }
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let signed = opt.is_ascii_lowercase();
                let n = get_integer(&data[pos..], h.endian, signed, size);
                results.push(LuaValue::Number(n));
            }
            b'x' => {}
            b'f' => {
                let b: [u8; 4] = data[pos..pos + 4].try_into().map_err(|_| too_short())?;
                let f = match h.endian {
                    Endian::Big => f32::from_be_bytes(b),
                    Endian::Little => f32::from_le_bytes(b),
                };
                results.push(LuaValue::Number(f64::from(f)));
            }
            b'd' => {
                let b: [u8; 8] = data[pos..pos + 8].try_into().map_err(|_| too_short())?;
                let d = match h.endian {
                    Endian::Big => f64::from_be_bytes(b),
                    Endian::Little => f64::from_le_bytes(b),
                };
                results.push(LuaValue::Number(d));
            }
            b'c' => {
                if size == 0 {
                    let previous = match results.last() {
                        Some(v @ (LuaValue::Number(_) | LuaValue::Integer(_))) => {
                            lua.coerce_number(v.clone())?
                        }
                        Some(v @ LuaValue::String(_)) => lua.coerce_number(v.clone())?,
                        _ => None,
                    };
                    let Some(n) = previous else {
                        return Err(err("format 'c0' needs a previous size"));
                    };
                    results.pop();
                    size = n as usize;
                    if !(size <= ld && pos <= ld - size) {
                        return Err(too_short());
                    }
                }
                results.push(LuaValue::String(lua.create_string(&data[pos..pos + size])?));
            }
            b's' => {
                let Some(len) = data[pos..].iter().position(|&b| b == 0) else {
                    return Err(err("unfinished string in data"));
                };
                size = len + 1;
                results.push(LuaValue::String(lua.create_string(&data[pos..pos + len])?));
            }
            _ => control(opt, &fmt, &mut i, &mut h, NAME)?,
        }
        pos = pos.wrapping_add(size);
    }
    results.push(LuaValue::Number(pos.wrapping_add(1) as f64));
    Ok(MultiValue::from_vec(results))
}

fn size(lua: &Lua, args: MultiValue) -> mlua::Result<f64> {
    const NAME: &str = "size";
    let fmt = string_arg(lua, &args, 1, NAME)?;
    let mut h = Header::default();
    let mut pos = 0usize;
    let mut i = 0;
    while i < fmt.len() {
        let opt = fmt[i];
        i += 1;
        let size = option_size(opt, &fmt, &mut i)?;
        pos = pos.wrapping_add(padding(pos, &h, opt, size));
        if opt == b's' {
            return Err(arg_error(1, NAME, "option 's' has no fixed size"));
        } else if opt == b'c' && size == 0 {
            return Err(arg_error(1, NAME, "option 'c0' has no fixed size"));
        }
        if !opt.is_ascii_alphanumeric() {
            control(opt, &fmt, &mut i, &mut h, NAME)?;
        }
        pos = pos.wrapping_add(size);
    }
    Ok(pos as f64)
}

pub(crate) fn register(lua: &Lua, g: &Table) -> mlua::Result<()> {
    let t = lua.create_table()?;
    t.raw_set("pack", lua.create_function(pack)?)?;
    t.raw_set("unpack", lua.create_function(unpack)?)?;
    t.raw_set("size", lua.create_function(size)?)?;
    g.raw_set("struct", t)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each expected value is what redis-server 7.0.15's `struct` gives.
    #[test]
    fn packs_unpacks_and_sizes_as_redis() {
        let lua = Lua::new();
        register(&lua, &lua.globals()).unwrap();
        let hex = |code: &str| -> String {
            let s: mlua::String = lua.load(code).eval().unwrap();
            s.as_bytes().iter().map(|b| format!("{b:02x}")).collect()
        };
        assert_eq!(hex("return struct.pack('>i', 1)"), "00000001");
        assert_eq!(hex("return struct.pack('!4bi', 1, 2)"), "0100000002000000");
        assert_eq!(hex("return struct.pack('c0s', 'ab', 'x')"), "61627800");
        assert_eq!(
            hex("return struct.pack('i16', -1)"),
            "ffffffffffffffff0000000000000000"
        );
        // c0 takes its size from the number before it, which it replaces.
        let (b, next): (String, f64) = lua
            .load("return struct.unpack('bc0', string.char(3) .. 'abcdef')")
            .eval()
            .unwrap();
        assert_eq!((b.as_str(), next), ("abc", 5.0));
        let size: f64 = lua.load("return struct.size('!8bdi')").eval().unwrap();
        assert_eq!(size, 20.0);
        for (code, msg) in [
            ("struct.pack('z', 1)", "invalid format option 'z'"),
            (
                "struct.pack('i40', 1)",
                "integral size 40 is larger than limit of 32",
            ),
            ("struct.pack('!3i', 1)", "alignment 3 is not a power of 2"),
            ("struct.unpack('i', 'ab')", "data string too short"),
            ("struct.unpack('s', 'abc')", "unfinished string in data"),
            ("struct.size('s')", "option 's' has no fixed size"),
            ("struct.pack('i')", "number expected, got nil"),
        ] {
            let e = lua.load(code).exec().unwrap_err().to_string();
            assert!(e.contains(msg), "{code}: {e}");
        }
    }
}
