//! The scripting commands' entry in the command table; the implementation is
//! [`crate::scripting`].

pub use crate::scripting::{is_script_kill, sha1_hex, Scripts, BUSY, BUSY_FUNCTION, COMMANDS};
