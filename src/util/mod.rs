//! Small shared helpers: Redis-exact number text conversions, glob matching, OS error text,
//! and the few text views and forms Redis applies everywhere (an argument as a C string, byte
//! counts as INFO writes them). They live here, below every module that uses them, so that
//! two modules of one folder that both need one do not import each other for it.

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

/// An argument as C code sees it: up to its first NUL byte. Redis reads option names,
/// cursors and the names in its error texts as C strings, so `"nx\0junk"` is `NX` to it.
pub(crate) fn c_str(a: &[u8]) -> &[u8] {
    match a.iter().position(|&b| b == 0) {
        Some(n) => &a[..n],
        None => a,
    }
}

/// A byte count as INFO and MEMORY write it (Redis's bytesToHuman): `512B`, `1.50K`, `2.00M`,
/// `3.25G`.
pub(crate) fn human(n: usize) -> String {
    let n = n as f64;
    if n < 1024.0 {
        format!("{n}B")
    } else if n < 1024.0 * 1024.0 {
        format!("{:.2}K", n / 1024.0)
    } else if n < 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2}M", n / 1024.0 / 1024.0)
    } else {
        format!("{:.2}G", n / 1024.0 / 1024.0 / 1024.0)
    }
}

/// Redis's debugDelay, the pause per key of `rdb-key-save-delay` and `key-load-delay`: `usec`
/// microseconds, or for a negative -N one microsecond once in N calls on average (a sleep of
/// any length costs a system call and a context switch, so shorter pauses are statistical).
pub(crate) fn debug_delay(usec: i64) {
    let usec = match usec {
        0 => return,
        n if n > 0 => n as u64,
        n => u64::from(rand::random::<u64>().is_multiple_of(n.unsigned_abs())),
    };
    if usec > 0 {
        std::thread::sleep(std::time::Duration::from_micros(usec));
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
