//! Small shared helpers: Redis-exact number text conversions, glob matching, and OS error text.

pub mod counter;
pub mod numtext;
pub(crate) mod redact;
pub(crate) mod signal;
pub(crate) mod write_turn;

/// An OS error's text as C's strerror gives it (what Redis prints), without Rust's
/// " (os error N)" suffix.
pub(crate) fn strerror(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.rfind(" (os error ") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// `a` in double quotes with C escapes, as Redis's sdscatrepr writes it (MONITOR lines, the
/// command line as CONFIG REWRITE and the config reader see it).
pub(crate) fn sds_repr(a: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &c in a {
        match c {
            b'\\' | b'"' => {
                out.push(b'\\');
                out.push(c);
            }
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x07 => out.extend_from_slice(b"\\a"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x20..=0x7e => out.push(c),
            _ => out.extend_from_slice(format!("\\x{c:02x}").as_bytes()),
        }
    }
    out.push(b'"');
}

/// [`sds_repr`] of a string, as a string (the escapes are ASCII, so it stays UTF-8).
pub(crate) fn sds_repr_str(s: &str) -> String {
    let mut out = Vec::with_capacity(s.len() + 2);
    sds_repr(s.as_bytes(), &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The stack of every runtime thread (`server::run`): Redis's main thread gets the usual
/// 8 MiB, and scripts recurse as deep on Podium's workers as on it (lua-cmsgpack's nesting, a
/// returned table's depth, Lua's 200 C levels of coroutines and metamethods, the pattern
/// matcher's 20,000 levels). Only the pages a thread touches are resident.
pub const WORKER_STACK: usize = 8 << 20;
