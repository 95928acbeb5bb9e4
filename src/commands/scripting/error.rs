//! The errors that cross between Lua and the host: [`CommandError`], a command's error reply
//! raised into a script (by `redis.call`, the libraries, the debugger, a SCRIPT KILL), and how
//! an mlua error is read back (its [`command_error`], its [`lua_message`]). Every file of
//! scripting raises or reads them, and the engine that turns them into replies uses the
//! others, so they live here, below all of them.

/// A failed command inside `redis.call` (or a script killed by SCRIPT KILL): raised to Lua as
/// a host error (a Rust callback cannot raise a Lua value), turned back into what Redis gives
/// Lua code by the error handler and the `pcall` / `xpcall` wrappers.
#[derive(Debug)]
pub(super) struct CommandError(pub(super) String);

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CommandError {}

/// The command error inside a Lua error, if that is what it is.
pub(super) fn command_error(e: &mlua::Error) -> Option<&str> {
    match e {
        mlua::Error::CallbackError { cause, .. } => command_error(cause),
        mlua::Error::ExternalError(x) => x.downcast_ref::<CommandError>().map(|c| c.0.as_str()),
        _ => None,
    }
}

/// The message of a Lua error without mlua's decoration.
pub(super) fn lua_message(e: &mlua::Error) -> String {
    match e {
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        mlua::Error::RuntimeError(m) => m.clone(),
        mlua::Error::MemoryError(m) => m.clone(),
        mlua::Error::CallbackError { cause, .. } => lua_message(cause),
        other => other.to_string(),
    }
}
