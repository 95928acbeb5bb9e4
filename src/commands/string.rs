//! string commands.

use super::Spec;

pub static COMMANDS: &[Spec] = &[];
