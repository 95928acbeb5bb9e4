//! The shapes of one row of the COMMAND DOCS table: [`CommandDoc`] for a command or
//! subcommand, [`DocArg`] for an argument of its syntax. The table itself is generated into
//! `super::command_docs` and read by `super::docs`, which builds the replies; the shapes sit
//! below both, so the generated data names no code that reads it.

/// One command's or subcommand's documentation, as Redis's commands.c holds it.
pub(crate) struct CommandDoc {
    /// Full name: `get`, or `config|get` for a subcommand.
    pub name: &'static str,
    pub summary: Option<&'static str>,
    pub since: Option<&'static str>,
    pub group: &'static str,
    pub complexity: Option<&'static str>,
    /// `deprecated` and/or `syscmd`, in that order.
    pub doc_flags: &'static [&'static str],
    pub deprecated_since: Option<&'static str>,
    pub replaced_by: Option<&'static str>,
    /// (version, change) pairs; empty when Redis has none (the field is then left out).
    pub history: &'static [(&'static str, &'static str)],
    /// Empty when the command takes no arguments (the field is then left out).
    pub arguments: &'static [DocArg],
    /// How many `name|sub` entries follow this one in the table
    /// (`super::command_docs::DOCS`); 0 for a plain command.
    pub subcommands: usize,
}

/// One argument in a command's documented syntax.
pub(crate) struct DocArg {
    pub name: &'static str,
    /// `string`, `integer`, `double`, `key`, `pattern`, `unix-time`, `pure-token`, `oneof`, `block`.
    pub kind: &'static str,
    pub key_spec_index: Option<i64>,
    pub token: Option<&'static str>,
    pub summary: Option<&'static str>,
    pub since: Option<&'static str>,
    pub deprecated_since: Option<&'static str>,
    /// `optional`, `multiple`, `multiple_token`, in that order.
    pub flags: &'static [&'static str],
    /// The nested arguments of a `oneof` or `block` (always present for those two kinds).
    pub arguments: Option<&'static [DocArg]>,
}
