//! The `bit` library Redis embeds (LuaBitOp 1.0 semantics): 32-bit operations on Lua
//! numbers. An argument is reduced to 32 bits as LuaBitOp does (rounded to the nearest
//! integer, ties to even, then taken modulo 2^32) and results are signed 32-bit numbers.

use mlua::{Lua, MultiValue, Table, Value as LuaValue};

/// LuaBitOp's reduction: add 2^52 + 2^51 so the integer part lands in the low mantissa bits.
fn tobit_of(n: f64) -> i32 {
    (n + 6_755_399_441_055_744.0).to_bits() as u32 as i32
}

/// Argument `i` (1-based, for the message) of function `name` as LuaBitOp reads it.
fn arg(lua: &Lua, args: &MultiValue, i: usize, name: &str) -> mlua::Result<i32> {
    let v = args.get(i - 1).cloned().unwrap_or(LuaValue::Nil);
    let got = match &v {
        LuaValue::Nil if args.len() < i => "no value".to_string(),
        other => other.type_name().to_string(),
    };
    match lua.coerce_number(v)? {
        Some(n) => Ok(tobit_of(n)),
        None => Err(mlua::Error::runtime(format!(
            "bad argument #{i} to '{name}' (number expected, got {got})"
        ))),
    }
}

/// A named operation of one, two (a fold) or a value and a shift count.
type Unary = (&'static str, fn(i32) -> i32);
type Fold = (&'static str, fn(i32, i32) -> i32);
type Shift = (&'static str, fn(i32, u32) -> i32);

pub(crate) fn register(lua: &Lua, g: &Table) -> mlua::Result<()> {
    let bit = lua.create_table()?;
    let unary: [Unary; 3] = [
        ("tobit", |x| x),
        ("bnot", |x| !x),
        ("bswap", |x| x.swap_bytes()),
    ];
    for (name, op) in unary {
        bit.raw_set(
            name,
            lua.create_function(move |lua, args: MultiValue| {
                Ok(f64::from(op(arg(lua, &args, 1, name)?)))
            })?,
        )?;
    }
    let folds: [Fold; 3] = [
        ("band", |a, b| a & b),
        ("bor", |a, b| a | b),
        ("bxor", |a, b| a ^ b),
    ];
    for (name, op) in folds {
        bit.raw_set(
            name,
            lua.create_function(move |lua, args: MultiValue| {
                let mut acc = arg(lua, &args, 1, name)?;
                for i in 2..=args.len() {
                    acc = op(acc, arg(lua, &args, i, name)?);
                }
                Ok(f64::from(acc))
            })?,
        )?;
    }
    let shifts: [Shift; 5] = [
        ("lshift", |x, n| ((x as u32) << n) as i32),
        ("rshift", |x, n| ((x as u32) >> n) as i32),
        ("arshift", |x, n| x >> n),
        ("rol", |x, n| (x as u32).rotate_left(n) as i32),
        ("ror", |x, n| (x as u32).rotate_right(n) as i32),
    ];
    for (name, op) in shifts {
        bit.raw_set(
            name,
            lua.create_function(move |lua, args: MultiValue| {
                let x = arg(lua, &args, 1, name)?;
                let n = arg(lua, &args, 2, name)? as u32 & 31;
                Ok(f64::from(op(x, n)))
            })?,
        )?;
    }
    bit.raw_set(
        "tohex",
        lua.create_function(|lua, args: MultiValue| {
            let x = arg(lua, &args, 1, "tohex")? as u32;
            let mut n = match args.get(1) {
                None | Some(LuaValue::Nil) => 8,
                Some(_) => arg(lua, &args, 2, "tohex")?,
            };
            let upper = n < 0;
            if upper {
                n = n.wrapping_neg();
            }
            let n = (n as u32).min(8) as usize;
            let text = if upper {
                format!("{x:08X}")
            } else {
                format!("{x:08x}")
            };
            Ok(text[8 - n..].to_string())
        })?,
    )?;
    g.raw_set("bit", bit)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::tobit_of;

    #[test]
    fn reduction_matches_luabitop() {
        assert_eq!(tobit_of(1.0), 1);
        assert_eq!(tobit_of(4294967295.0), -1);
        assert_eq!(tobit_of(4294967296.0 + 5.0), 5);
        assert_eq!(tobit_of(-1.0), -1);
        assert_eq!(tobit_of(2.5), 2, "ties to even");
        assert_eq!(tobit_of(3.5), 4);
        assert_eq!(tobit_of(2147483648.0), i32::MIN);
    }
}
