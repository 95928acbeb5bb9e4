//! `redis.register_function`, what a library's top-level code calls while FUNCTION LOAD runs
//! it: the checks and texts of Redis 7.0, and the list of [`Registered`] functions it fills
//! ([`Loading`]). Every Lua state is built with it (by the engine), and FUNCTION LOAD reads the
//! list once the code has run (in `super::functions`, which runs the code through the engine),
//! so it sits below both.

use super::error::CommandError;
use super::shebang_flag;
use bytes::Bytes;
use mlua::{Function, Lua, MultiValue, Value as LuaValue};
use std::cell::RefCell;
use std::rc::Rc;

/// One function a library's code registered (in the Lua state that ran it).
pub(crate) struct Registered {
    pub(crate) name: String,
    pub(crate) callback: Function,
    pub(crate) description: Option<Bytes>,
    pub(crate) flags: u8,
}

/// The functions a library's code registers while FUNCTION LOAD runs it (None otherwise).
pub(super) type Loading = Rc<RefCell<Option<Vec<Registered>>>>;

/// An `ERR` error raised into the library's code, as Redis words them.
fn lua_error(text: &str) -> mlua::Error {
    mlua::Error::external(CommandError(format!("ERR {text}")))
}

/// Redis's rule for library and function names.
pub(super) fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// `redis.register_function`, positional `(name, callback)` or named `{function_name=,
/// callback=, description=, flags={...}}`, with Redis 7.0's checks and texts.
pub(super) fn register_function(lua: &Lua, loading: Loading) -> mlua::Result<Function> {
    lua.create_function(move |lua, args: MultiValue| {
        if loading.borrow().is_none() {
            return Err(lua_error(
                "redis.register_function can only be called on FUNCTION LOAD command",
            ));
        }
        if args.is_empty() || args.len() > 2 {
            return Err(lua_error("wrong number of arguments to redis.register_function"));
        }
        let as_text = |v: &LuaValue| -> Option<String> {
            match v {
                LuaValue::String(s) => Some(String::from_utf8_lossy(&s.as_bytes()).into_owned()),
                LuaValue::Integer(_) | LuaValue::Number(_) => lua
                    .coerce_string(v.clone())
                    .ok()
                    .flatten()
                    .map(|s| String::from_utf8_lossy(&s.as_bytes()).into_owned()),
                _ => None,
            }
        };
        let mut name = None;
        let mut callback = None;
        let mut description = None;
        let mut flags = 0u8;
        if args.len() == 2 {
            name = Some(as_text(&args[0]).ok_or_else(|| {
                lua_error("first argument to redis.register_function must be a string")
            })?);
            match &args[1] {
                LuaValue::Function(f) => callback = Some(f.clone()),
                _ => {
                    return Err(lua_error(
                        "second argument to redis.register_function must be a function",
                    ))
                }
            }
        } else {
            let LuaValue::Table(t) = &args[0] else {
                return Err(lua_error("calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments)."));
            };
            for pair in t.pairs::<LuaValue, LuaValue>() {
                let (k, v) = pair?;
                let Some(key) = as_text(&k) else {
                    return Err(lua_error(
                        "named argument key given to redis.register_function is not a string",
                    ));
                };
                match key.to_ascii_lowercase().as_str() {
                    "function_name" => {
                        name = Some(as_text(&v).ok_or_else(|| {
                            lua_error("function_name argument given to redis.register_function must be a string")
                        })?)
                    }
                    "description" => {
                        description = Some(Bytes::from(as_text(&v).ok_or_else(|| {
                            lua_error("description argument given to redis.register_function must be a string")
                        })?))
                    }
                    "callback" => match v {
                        LuaValue::Function(f) => callback = Some(f),
                        _ => {
                            return Err(lua_error(
                                "callback argument given to redis.register_function must be a function",
                            ))
                        }
                    },
                    "flags" => {
                        let LuaValue::Table(list) = v else {
                            return Err(lua_error("flags argument to redis.register_function must be a table representing function flags"));
                        };
                        for i in 1.. {
                            let item: LuaValue = list.get(i)?;
                            if item.is_nil() {
                                break;
                            }
                            let flag = as_text(&item)
                                .and_then(|f| shebang_flag(&f.to_ascii_lowercase()))
                                .ok_or_else(|| lua_error("unknown flag given"))?;
                            flags |= flag;
                        }
                    }
                    _ => {
                        return Err(lua_error(
                            "unknown argument given to redis.register_function",
                        ))
                    }
                }
            }
        }
        let Some(name) = name else {
            return Err(lua_error(
                "redis.register_function must get a function name argument",
            ));
        };
        let Some(callback) = callback else {
            return Err(lua_error(
                "redis.register_function must get a callback argument",
            ));
        };
        if !valid_name(&name) {
            return Err(lua_error("Library names can only contain letters, numbers, or underscores(_) and must be at least one character long"));
        }
        let mut loading = loading.borrow_mut();
        let Some(list) = loading.as_mut() else {
            return Err(lua_error(
                "redis.register_function can only be called on FUNCTION LOAD command",
            ));
        };
        if list.iter().any(|r| r.name == name) {
            return Err(lua_error("Function already exists in the library"));
        }
        list.push(Registered {
            name,
            callback,
            description,
            flags,
        });
        Ok(())
    })
}
