//! The libraries Redis embeds in its Lua, written in Rust: `bit` (LuaBitOp), `cjson`
//! (Lua CJSON), `cmsgpack` (lua-cmsgpack) and `struct` (lua-struct). Their state that a script can change (cjson's settings) is put back after
//! every call by the engine ([`LibState::reset`]).

mod bit;
pub(crate) mod cjson;
mod cmsgpack;
mod structlib;

use mlua::{Lua, Table};

/// What the libraries keep between calls.
pub(crate) struct LibState {
    cjson: cjson::Settings,
}

impl LibState {
    /// Back to the defaults: nothing a script configured outlives it.
    pub(crate) fn reset(&self) {
        self.cjson.set(cjson::Config::default());
    }
}

/// Add the libraries to the globals `g` (before the sandbox makes them read-only).
pub(crate) fn register(lua: &Lua, g: &Table) -> mlua::Result<LibState> {
    bit::register(lua, g)?;
    cmsgpack::register(lua, g)?;
    structlib::register(lua, g)?;
    let settings = cjson::Settings::default();
    cjson::register(lua, g, &settings)?;
    Ok(LibState { cjson: settings })
}
