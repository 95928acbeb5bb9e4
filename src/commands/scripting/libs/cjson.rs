//! The `cjson` library Redis embeds (Lua CJSON 2.1): `encode`, `decode`, `null` and the
//! configuration functions, with its defaults and texts: numbers as `%.14g`, `/` escaped as
//! `\/`, arrays detected from positive integer keys (an excessively sparse one is an error),
//! 1000 levels of nesting each way, NaN and infinities refused. The configuration belongs to
//! the running script: the engine puts the defaults back after every call.

use crate::commands::scripting::convert::format_g;
use mlua::{LightUserData, Lua, MultiValue, Table, Value as LuaValue};
use std::cell::Cell;
use std::rc::Rc;

/// cjson's settings (Redis's defaults in [`Config::default`]).
#[derive(Clone, Copy)]
pub(crate) struct Config {
    sparse_convert: bool,
    sparse_ratio: i64,
    sparse_safe: i64,
    encode_max_depth: i64,
    decode_max_depth: i64,
    /// 0 refuse, 1 allow ("nan"/"inf"), 2 as null.
    encode_invalid_numbers: u8,
    decode_invalid_numbers: bool,
    keep_buffer: bool,
    precision: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            sparse_convert: false,
            sparse_ratio: 2,
            sparse_safe: 10,
            encode_max_depth: 1000,
            decode_max_depth: 1000,
            encode_invalid_numbers: 0,
            decode_invalid_numbers: true,
            keep_buffer: true,
            precision: 14,
        }
    }
}

/// The running script's cjson settings (reset by the engine after each call).
pub(crate) type Settings = Rc<Cell<Config>>;

fn err(msg: impl Into<String>) -> mlua::Error {
    mlua::Error::runtime(msg.into())
}

fn type_name(v: &LuaValue) -> &'static str {
    match v {
        LuaValue::LightUserData(_) => "userdata",
        other => other.type_name(),
    }
}

fn encode_string(s: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &b in s {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\x08' => out.extend_from_slice(b"\\b"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\x0c' => out.extend_from_slice(b"\\f"),
            b'\r' => out.extend_from_slice(b"\\r"),
            0..=0x1f | 0x7f => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            _ => out.push(b),
        }
    }
    out.push(b'"');
}

fn encode_number(cfg: &Config, n: f64, what: &LuaValue, out: &mut Vec<u8>) -> mlua::Result<()> {
    if n.is_nan() || n.is_infinite() {
        match cfg.encode_invalid_numbers {
            0 => {
                return Err(err(format!(
                    "Cannot serialise {}: must not be NaN or Inf",
                    type_name(what)
                )))
            }
            1 if n.is_nan() => {
                out.extend_from_slice(b"nan");
                return Ok(());
            }
            2 => {
                out.extend_from_slice(b"null");
                return Ok(());
            }
            _ => {}
        }
    }
    out.extend_from_slice(format_g(n, cfg.precision).as_bytes());
    Ok(())
}

fn number_of(v: &LuaValue) -> Option<f64> {
    match v {
        LuaValue::Integer(i) => Some(*i as f64),
        LuaValue::Number(n) => Some(*n),
        _ => None,
    }
}

/// The array length of `t` if it encodes as an array (cjson's lua_array_length), else None.
fn array_length(cfg: &Config, t: &Table) -> mlua::Result<Option<i64>> {
    let mut max = 0i64;
    let mut items = 0i64;
    for pair in t.pairs::<LuaValue, LuaValue>() {
        let (k, _) = pair?;
        match number_of(&k) {
            Some(n) if n != 0.0 && n.floor() == n && n >= 1.0 => {
                if n as i64 > max {
                    max = n as i64;
                }
                items += 1;
            }
            _ => return Ok(None),
        }
    }
    if cfg.sparse_ratio > 0 && max > items * cfg.sparse_ratio && max > cfg.sparse_safe {
        if !cfg.sparse_convert {
            return Err(err("Cannot serialise table: excessively sparse array"));
        }
        return Ok(None);
    }
    Ok(Some(max))
}

fn encode_value(cfg: &Config, v: &LuaValue, depth: i64, out: &mut Vec<u8>) -> mlua::Result<()> {
    match v {
        LuaValue::String(s) => encode_string(&s.as_bytes(), out),
        LuaValue::Integer(_) | LuaValue::Number(_) => {
            encode_number(cfg, number_of(v).unwrap_or(0.0), v, out)?
        }
        LuaValue::Boolean(true) => out.extend_from_slice(b"true"),
        LuaValue::Boolean(false) => out.extend_from_slice(b"false"),
        LuaValue::Nil => out.extend_from_slice(b"null"),
        LuaValue::LightUserData(p) if p.0.is_null() => out.extend_from_slice(b"null"),
        LuaValue::Table(t) => {
            let depth = depth + 1;
            if depth > cfg.encode_max_depth {
                return Err(err(format!(
                    "Cannot serialise, excessive nesting ({depth})"
                )));
            }
            match array_length(cfg, t)? {
                Some(len) if len > 0 => {
                    out.push(b'[');
                    for i in 1..=len {
                        if i > 1 {
                            out.push(b',');
                        }
                        let item: LuaValue = t.raw_get(i)?;
                        encode_value(cfg, &item, depth, out)?;
                    }
                    out.push(b']');
                }
                _ => {
                    out.push(b'{');
                    let mut first = true;
                    for pair in t.pairs::<LuaValue, LuaValue>() {
                        let (k, item) = pair?;
                        if !first {
                            out.push(b',');
                        }
                        first = false;
                        match &k {
                            LuaValue::Integer(_) | LuaValue::Number(_) => {
                                out.push(b'"');
                                encode_number(cfg, number_of(&k).unwrap_or(0.0), &k, out)?;
                                out.extend_from_slice(b"\":");
                            }
                            LuaValue::String(s) => {
                                encode_string(&s.as_bytes(), out);
                                out.push(b':');
                            }
                            other => {
                                return Err(err(format!(
                                    "Cannot serialise {}: table key must be a number or string",
                                    type_name(other)
                                )))
                            }
                        }
                        encode_value(cfg, &item, depth, out)?;
                    }
                    out.push(b'}');
                }
            }
        }
        other => {
            return Err(err(format!(
                "Cannot serialise {}: type not supported",
                type_name(other)
            )))
        }
    }
    Ok(())
}

/// A JSON token (cjson's json_token_t).
enum Token {
    ObjBegin,
    ObjEnd,
    ArrBegin,
    ArrEnd,
    Str(Vec<u8>),
    Num(f64),
    Bool(bool),
    Null,
    Colon,
    Comma,
    End,
    Error(&'static str),
}

impl Token {
    fn name(&self) -> &'static str {
        match self {
            Token::ObjBegin => "T_OBJ_BEGIN",
            Token::ObjEnd => "T_OBJ_END",
            Token::ArrBegin => "T_ARR_BEGIN",
            Token::ArrEnd => "T_ARR_END",
            Token::Str(_) => "T_STRING",
            Token::Num(_) => "T_NUMBER",
            Token::Bool(_) => "T_BOOLEAN",
            Token::Null => "T_NULL",
            Token::Colon => "T_COLON",
            Token::Comma => "T_COMMA",
            Token::End => "T_END",
            Token::Error(e) => e,
        }
    }
}

struct Parser<'d> {
    data: &'d [u8],
    pos: usize,
    depth: i64,
    cfg: Config,
}

impl Parser<'_> {
    fn at(&self, i: usize) -> u8 {
        // The C parser reads a NUL-terminated copy: the end reads as 0.
        self.data.get(i).copied().unwrap_or(0)
    }

    /// strtod's reading of a number at `pos`: the longest prefix it accepts.
    fn number(&mut self) -> Option<f64> {
        let rest = &self.data[self.pos..];
        let mut best = None;
        let mut end = 0;
        while end < rest.len() && rest[end].is_ascii_graphic() && !b",]}:".contains(&rest[end]) {
            end += 1;
        }
        for len in (1..=end).rev() {
            if let Some(v) = crate::util::numtext::parse_f64(&rest[..len]) {
                best = Some((v, len));
                break;
            }
            if let Ok(v) = std::str::from_utf8(&rest[..len])
                .unwrap_or("x")
                .parse::<f64>()
            {
                best = Some((v, len));
                break;
            }
        }
        let (v, len) = best?;
        self.pos += len;
        Some(v)
    }

    fn invalid_number(&self) -> bool {
        let mut p = self.pos;
        if self.at(p) == b'+' {
            return true;
        }
        if self.at(p) == b'-' {
            p += 1;
        }
        if self.at(p) == b'0' {
            let c2 = self.at(p + 1);
            return (c2 | 0x20) == b'x' || c2.is_ascii_digit();
        } else if self.at(p) <= b'9' {
            return false;
        }
        let word = |w: &[u8]| {
            self.data
                .get(p..p + 3)
                .is_some_and(|s| s.eq_ignore_ascii_case(w))
        };
        word(b"inf") || word(b"nan")
    }

    fn next(&mut self) -> (Token, usize) {
        while matches!(self.at(self.pos), b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
        let index = self.pos;
        let c = self.at(self.pos);
        let single = match c {
            b'{' => Some(Token::ObjBegin),
            b'}' => Some(Token::ObjEnd),
            b'[' => Some(Token::ArrBegin),
            b']' => Some(Token::ArrEnd),
            b',' => Some(Token::Comma),
            b':' => Some(Token::Colon),
            _ => None,
        };
        if let Some(t) = single {
            self.pos += 1;
            return (t, index);
        }
        if c == 0 {
            return (Token::End, index);
        }
        let unknown = matches!(
            c,
            b'f' | b'i' | b'I' | b'n' | b'N' | b't' | b'"' | b'+' | b'-'
        ) || c.is_ascii_digit();
        if !unknown {
            return (Token::Error("invalid token"), index);
        }
        if c == b'"' {
            // A bad string is reported where the parser stopped in it.
            let t = self.string();
            let at = if matches!(t, Token::Error(_)) {
                self.pos
            } else {
                index
            };
            return (t, at);
        }
        let starts = |w: &[u8]| self.data[self.pos..].starts_with(w);
        if c == b'-' || c.is_ascii_digit() {
            if !self.cfg.decode_invalid_numbers && self.invalid_number() {
                return (Token::Error("invalid number"), self.pos);
            }
            return match self.number() {
                Some(n) => (Token::Num(n), index),
                None => (Token::Error("invalid number"), self.pos),
            };
        }
        if starts(b"true") {
            self.pos += 4;
            return (Token::Bool(true), index);
        }
        if starts(b"false") {
            self.pos += 5;
            return (Token::Bool(false), index);
        }
        if starts(b"null") {
            self.pos += 4;
            return (Token::Null, index);
        }
        if self.cfg.decode_invalid_numbers && self.invalid_number() {
            return match self.number() {
                Some(n) => (Token::Num(n), index),
                None => (Token::Error("invalid number"), self.pos),
            };
        }
        (Token::Error("invalid token"), index)
    }

    fn string(&mut self) -> Token {
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            let c = self.at(self.pos);
            if c == b'"' {
                self.pos += 1;
                return Token::Str(out);
            }
            if c == 0 && self.pos >= self.data.len() {
                return Token::Error("unexpected end of string");
            }
            if c == b'\\' {
                let e = self.at(self.pos + 1);
                let translated = match e {
                    b'"' => b'"',
                    b'\\' => b'\\',
                    b'/' => b'/',
                    b'b' => 8,
                    b't' => b'\t',
                    b'n' => b'\n',
                    b'f' => 12,
                    b'r' => b'\r',
                    b'u' => {
                        match self.unicode_escape() {
                            Some(ch) => {
                                let mut buf = [0u8; 4];
                                out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                            }
                            None => return Token::Error("invalid unicode escape code"),
                        }
                        continue;
                    }
                    _ => return Token::Error("invalid escape code"),
                };
                out.push(translated);
                self.pos += 2;
                continue;
            }
            out.push(c);
            self.pos += 1;
        }
    }

    /// `\uXXXX` (a surrogate pair as two); advances past it.
    fn unicode_escape(&mut self) -> Option<char> {
        let hex = |p: &Parser, at: usize| -> Option<u32> {
            let s = p.data.get(at..at + 4)?;
            u32::from_str_radix(std::str::from_utf8(s).ok()?, 16).ok()
        };
        let first = hex(self, self.pos + 2)?;
        let mut len = 6;
        let code = if (0xd800..0xdc00).contains(&first) {
            if self.data.get(self.pos + 6..self.pos + 8) != Some(b"\\u") {
                return None;
            }
            let second = hex(self, self.pos + 8)?;
            if !(0xdc00..0xe000).contains(&second) {
                return None;
            }
            len = 12;
            0x10000 + ((first - 0xd800) << 10) + (second - 0xdc00)
        } else if (0xdc00..0xe000).contains(&first) {
            return None;
        } else {
            first
        };
        self.pos += len;
        char::from_u32(code)
    }

    fn fail(&self, expected: &str, token: &Token, index: usize) -> mlua::Error {
        err(format!(
            "Expected {expected} but found {} at character {}",
            token.name(),
            index + 1
        ))
    }

    fn descend(&mut self) -> mlua::Result<()> {
        self.depth += 1;
        if self.depth > self.cfg.decode_max_depth {
            return Err(err(format!(
                "Found too many nested data structures ({}) at character {}",
                self.depth, self.pos
            )));
        }
        Ok(())
    }

    fn value(&mut self, lua: &Lua, token: Token, index: usize) -> mlua::Result<LuaValue> {
        Ok(match token {
            Token::Str(s) => LuaValue::String(lua.create_string(&s)?),
            Token::Num(n) => LuaValue::Number(n),
            Token::Bool(b) => LuaValue::Boolean(b),
            Token::Null => LuaValue::LightUserData(LightUserData(std::ptr::null_mut())),
            Token::ObjBegin => {
                self.descend()?;
                let t = lua.create_table()?;
                let (mut tok, mut at) = self.next();
                if !matches!(tok, Token::ObjEnd) {
                    loop {
                        let Token::Str(key) = tok else {
                            return Err(self.fail("object key string", &tok, at));
                        };
                        let (colon, cat) = self.next();
                        if !matches!(colon, Token::Colon) {
                            return Err(self.fail("colon", &colon, cat));
                        }
                        let (vt, vat) = self.next();
                        let v = self.value(lua, vt, vat)?;
                        t.raw_set(lua.create_string(&key)?, v)?;
                        let (sep, sat) = self.next();
                        match sep {
                            Token::ObjEnd => break,
                            Token::Comma => {}
                            other => return Err(self.fail("comma or object end", &other, sat)),
                        }
                        (tok, at) = self.next();
                    }
                }
                self.depth -= 1;
                LuaValue::Table(t)
            }
            Token::ArrBegin => {
                self.descend()?;
                let t = lua.create_table()?;
                let (mut tok, mut at) = self.next();
                if !matches!(tok, Token::ArrEnd) {
                    let mut i = 1;
                    loop {
                        let v = self.value(lua, tok, at)?;
                        t.raw_set(i, v)?;
                        i += 1;
                        let (sep, sat) = self.next();
                        match sep {
                            Token::ArrEnd => break,
                            Token::Comma => {}
                            other => return Err(self.fail("comma or array end", &other, sat)),
                        }
                        (tok, at) = self.next();
                    }
                }
                self.depth -= 1;
                LuaValue::Table(t)
            }
            other => return Err(self.fail("value", &other, index)),
        })
    }
}

/// An integer setting argument (cjson's json_integer_option).
fn int_option(
    lua: &Lua,
    args: &MultiValue,
    i: usize,
    min: i64,
    max: i64,
    setting: &mut i64,
) -> mlua::Result<()> {
    match args.get(i) {
        None | Some(LuaValue::Nil) => Ok(()),
        Some(v) => {
            let n = lua.coerce_number(v.clone())?.ok_or_else(|| {
                err(format!(
                    "bad argument #{} to '?' (number expected, got {})",
                    i + 1,
                    type_name(v)
                ))
            })? as i64;
            if n < min || n > max {
                return Err(err(format!(
                    "bad argument #1 to '?' (expected integer between {min} and {max})"
                )));
            }
            *setting = n;
            Ok(())
        }
    }
}

/// A boolean ("on"/"off", true/false) setting argument.
fn bool_option(args: &MultiValue, i: usize, setting: &mut bool) -> mlua::Result<()> {
    match args.get(i) {
        None | Some(LuaValue::Nil) => Ok(()),
        Some(LuaValue::Boolean(b)) => {
            *setting = *b;
            Ok(())
        }
        Some(LuaValue::String(s)) if &*s.as_bytes() == b"on" => {
            *setting = true;
            Ok(())
        }
        Some(LuaValue::String(s)) if &*s.as_bytes() == b"off" => {
            *setting = false;
            Ok(())
        }
        Some(LuaValue::String(s)) => Err(err(format!(
            "bad argument #{} to '?' (invalid option '{}')",
            i + 1,
            String::from_utf8_lossy(&s.as_bytes())
        ))),
        Some(v) => Err(err(format!(
            "bad argument #{} to '?' (string expected, got {})",
            i + 1,
            type_name(v)
        ))),
    }
}

pub(crate) fn register(lua: &Lua, g: &Table, settings: &Settings) -> mlua::Result<()> {
    let cjson = lua.create_table()?;
    let s = settings.clone();
    cjson.raw_set(
        "encode",
        lua.create_function(move |lua, args: MultiValue| {
            if args.len() != 1 {
                return Err(err("bad argument #1 to 'encode' (expected 1 argument)"));
            }
            let cfg = s.get();
            let mut out = Vec::new();
            encode_value(&cfg, &args[0], 0, &mut out)?;
            lua.create_string(&out)
        })?,
    )?;
    let s = settings.clone();
    cjson.raw_set(
        "decode",
        lua.create_function(move |lua, args: MultiValue| {
            if args.len() != 1 {
                return Err(err("bad argument #1 to 'decode' (expected 1 argument)"));
            }
            let text = match &args[0] {
                LuaValue::String(t) => t.as_bytes().to_vec(),
                v @ (LuaValue::Integer(_) | LuaValue::Number(_)) => lua
                    .coerce_string(v.clone())?
                    .map(|t| t.as_bytes().to_vec())
                    .unwrap_or_default(),
                v => {
                    return Err(err(format!(
                        "bad argument #1 to '?' (string expected, got {})",
                        type_name(v)
                    )))
                }
            };
            if text.len() >= 2 && (text[0] == 0 || text[1] == 0) {
                return Err(err("JSON parser does not support UTF-16 or UTF-32"));
            }
            // The C parser stops at the first NUL.
            let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
            let mut p = Parser {
                data: &text[..end],
                pos: 0,
                depth: 0,
                cfg: s.get(),
            };
            let (tok, at) = p.next();
            let v = p.value(lua, tok, at)?;
            let (last, lat) = p.next();
            if !matches!(last, Token::End) {
                return Err(p.fail("the end", &last, lat));
            }
            Ok(v)
        })?,
    )?;
    cjson.raw_set("null", LightUserData(std::ptr::null_mut()))?;
    cjson.raw_set("_NAME", "cjson")?;
    cjson.raw_set("_VERSION", "2.1.0")?;
    let s = settings.clone();
    cjson.raw_set(
        "encode_sparse_array",
        lua.create_function(move |lua, args: MultiValue| {
            let mut cfg = s.get();
            bool_option(&args, 0, &mut cfg.sparse_convert)?;
            int_option(lua, &args, 1, 0, i32::MAX as i64, &mut cfg.sparse_ratio)?;
            int_option(lua, &args, 2, 0, i32::MAX as i64, &mut cfg.sparse_safe)?;
            s.set(cfg);
            Ok((cfg.sparse_convert, cfg.sparse_ratio, cfg.sparse_safe))
        })?,
    )?;
    let s = settings.clone();
    cjson.raw_set(
        "encode_max_depth",
        lua.create_function(move |lua, args: MultiValue| {
            let mut cfg = s.get();
            int_option(lua, &args, 0, 1, i32::MAX as i64, &mut cfg.encode_max_depth)?;
            s.set(cfg);
            Ok(cfg.encode_max_depth)
        })?,
    )?;
    let s = settings.clone();
    cjson.raw_set(
        "decode_max_depth",
        lua.create_function(move |lua, args: MultiValue| {
            let mut cfg = s.get();
            int_option(lua, &args, 0, 1, i32::MAX as i64, &mut cfg.decode_max_depth)?;
            s.set(cfg);
            Ok(cfg.decode_max_depth)
        })?,
    )?;
    let s = settings.clone();
    cjson.raw_set(
        "encode_number_precision",
        lua.create_function(move |lua, args: MultiValue| {
            let mut cfg = s.get();
            let mut p = cfg.precision as i64;
            int_option(lua, &args, 0, 1, 14, &mut p)?;
            cfg.precision = p as usize;
            s.set(cfg);
            Ok(p)
        })?,
    )?;
    let s = settings.clone();
    cjson.raw_set(
        "encode_keep_buffer",
        lua.create_function(move |_, args: MultiValue| {
            let mut cfg = s.get();
            bool_option(&args, 0, &mut cfg.keep_buffer)?;
            s.set(cfg);
            Ok(cfg.keep_buffer)
        })?,
    )?;
    let s = settings.clone();
    cjson.raw_set(
        "encode_invalid_numbers",
        lua.create_function(move |lua, args: MultiValue| {
            let mut cfg = s.get();
            match args.front() {
                None | Some(LuaValue::Nil) => {}
                Some(LuaValue::Boolean(b)) => cfg.encode_invalid_numbers = u8::from(*b),
                Some(LuaValue::String(t)) => {
                    cfg.encode_invalid_numbers = match &*t.as_bytes() {
                        b"off" => 0,
                        b"on" => 1,
                        b"null" => 2,
                        other => {
                            return Err(err(format!(
                                "bad argument #1 to '?' (invalid option '{}')",
                                String::from_utf8_lossy(other)
                            )))
                        }
                    }
                }
                Some(v) => {
                    return Err(err(format!(
                        "bad argument #1 to '?' (string expected, got {})",
                        type_name(v)
                    )))
                }
            }
            s.set(cfg);
            Ok(match cfg.encode_invalid_numbers {
                0 => LuaValue::Boolean(false),
                1 => LuaValue::Boolean(true),
                _ => LuaValue::String(lua.create_string("null")?),
            })
        })?,
    )?;
    let s = settings.clone();
    cjson.raw_set(
        "decode_invalid_numbers",
        lua.create_function(move |_, args: MultiValue| {
            let mut cfg = s.get();
            bool_option(&args, 0, &mut cfg.decode_invalid_numbers)?;
            s.set(cfg);
            Ok(cfg.decode_invalid_numbers)
        })?,
    )?;
    g.raw_set("cjson", cjson)?;
    Ok(())
}
