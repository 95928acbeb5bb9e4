//! The process title, as `ps`, `top` and /proc/<pid>/cmdline show it (Redis's
//! `proc-title-template` and setproctitle).
//!
//! Linux shows a process's command line straight from its memory: the argument strings, and,
//! when the last argument's terminating NUL has been overwritten, on into the environment
//! strings that follow them. Setting a title longer than the original command line therefore
//! means reusing both areas. [`init`] (first thing in `main`, before any thread exists) copies
//! the environment strings to the heap and points `environ` at the copies, and keeps a copy of
//! the original `argv[0]` (the `{title}` variable); from then on [`set`] may write the title
//! over both areas, NUL-padded. Nothing else reads the original strings afterwards: clap has
//! parsed the arguments before the first title is set, and `std::env::var` goes through
//! `environ`. When the areas cannot be found (no /proc, or its addresses do not hold the
//! arguments this process was given), titles are not set and the reason is logged once.
//!
//! Templates ([`expand`], Redis's sdstemplate): `{name}` is replaced by the variable's value,
//! `{{` is a literal `{`, an unknown name or an unclosed `{` makes the template invalid; the
//! result is trimmed of spaces and must not be empty.

use parking_lot::Mutex;
use std::ffi::{c_char, OsString};
use std::sync::OnceLock;

/// The writable area holding the command line (then the old environment): its start address
/// and length in bytes.
struct Area {
    start: usize,
    len: usize,
}

static AREA: Mutex<Option<Area>> = Mutex::new(None);
static ARGV0: OnceLock<String> = OnceLock::new();
/// Why titles cannot be set, when they cannot.
static UNAVAILABLE: OnceLock<String> = OnceLock::new();

extern "C" {
    static mut environ: *mut *mut c_char;
}

/// The variables a template may name.
pub const VARIABLES: &[&str] = &[
    "title",
    "listen-addr",
    "server-mode",
    "config-file",
    "port",
    "tls-port",
    "unixsocket",
];

/// Expand `template` with `var` giving each variable's value (None: unknown name); trimmed of
/// spaces. None when the template is malformed or names an unknown variable.
pub fn expand(template: &str, var: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        if after.is_empty() {
            return None;
        }
        if let Some(quoted) = after.strip_prefix('{') {
            out.push('{');
            rest = quoted;
            continue;
        }
        let close = after.find('}')?;
        out.push_str(&var(&after[..close])?);
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Some(out.trim_matches(' ').to_string())
}

/// Whether `template` is one Redis accepts for `proc-title-template`: well formed, only known
/// variables, and not empty once expanded with an empty `{title}` (and no server mode or
/// socket, the values that may be empty).
pub fn validate(template: &str) -> bool {
    let sample = |name: &str| -> Option<String> {
        match name {
            "title" | "server-mode" | "unixsocket" => Some(String::new()),
            n if VARIABLES.contains(&n) => Some("x".into()),
            _ => None,
        }
    };
    expand(template, &sample).is_some_and(|t| !t.is_empty())
}

/// The program name the process was started as (`argv[0]`), for `{title}`.
pub fn argv0() -> &'static str {
    ARGV0.get().map(String::as_str).unwrap_or("podium")
}

/// Field `n` (1-based, as proc(5) numbers them) of /proc/self/stat.
fn stat_field(stat: &str, n: usize) -> Option<usize> {
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    let after = &stat[stat.rfind(')')? + 1..];
    after
        .split_whitespace()
        .nth(n.checked_sub(3)?)?
        .parse()
        .ok()
}

/// Prepare the command line area for titles. Call once, first thing in `main`, while no other
/// thread exists (it replaces `environ`).
pub fn init() {
    let args: Vec<OsString> = std::env::args_os().collect();
    let _ = ARGV0.set(
        args.first()
            .map(|a| a.to_string_lossy().into_owned())
            .unwrap_or_default(),
    );
    match find_area(&args) {
        Ok(area) => *AREA.lock() = Some(area),
        Err(why) => {
            let _ = UNAVAILABLE.set(why);
        }
    }
}

fn find_area(args: &[OsString]) -> Result<Area, String> {
    let stat = std::fs::read_to_string("/proc/self/stat")
        .map_err(|e| format!("can't read /proc/self/stat: {e}"))?;
    let field = |n| stat_field(&stat, n).ok_or("/proc/self/stat has no command line addresses");
    let (arg_start, arg_end, env_start, env_end) = (field(48)?, field(49)?, field(50)?, field(51)?);
    // The arguments must be where the kernel says, as this process received them.
    let mut expected = Vec::new();
    for a in args {
        expected.extend_from_slice(std::os::unix::ffi::OsStrExt::as_bytes(a.as_os_str()));
        expected.push(0);
    }
    if arg_end <= arg_start || arg_end - arg_start != expected.len() || env_start != arg_end {
        return Err("the command line is not laid out as expected".into());
    }
    // SAFETY: [arg_start, arg_end) is this process's own argument area (the kernel's record,
    // checked just above to be as long as the arguments), mapped and readable for the whole
    // life of the process.
    let current =
        unsafe { std::slice::from_raw_parts(arg_start as *const u8, arg_end - arg_start) };
    if current != expected.as_slice() {
        return Err("the command line in memory is not the one this process was given".into());
    }
    // Move the environment out of the way: copies on the heap, kept for good.
    // SAFETY: no other thread exists yet (init's contract), so nothing reads or changes
    // `environ` meanwhile; each entry is a NUL-terminated string until the null pointer that
    // ends the array; strdup copies it; the new array is leaked, so it stays valid.
    unsafe {
        let mut copies: Vec<*mut c_char> = Vec::new();
        let mut p = environ;
        if !p.is_null() {
            while !(*p).is_null() {
                let copy = libc::strdup(*p);
                if copy.is_null() {
                    return Err("out of memory copying the environment".into());
                }
                copies.push(copy);
                p = p.add(1);
            }
        }
        copies.push(std::ptr::null_mut());
        environ = Box::leak(copies.into_boxed_slice()).as_mut_ptr();
    }
    // The last byte of the environment stays NUL: the end of the title.
    Ok(Area {
        start: arg_start,
        len: env_end.max(arg_end) - arg_start - 1,
    })
}

/// Show `title` as the process's command line (cut to the room there is). Err says why it
/// cannot be set (logged by the caller).
pub fn set(title: &str) -> Result<(), String> {
    write_title(&AREA.lock(), title)
}

/// [`set`] in a forked child: another thread of the parent may have held the lock at the
/// fork, and it would never be released here, so the title is skipped rather than waited for.
pub fn set_after_fork(title: &str) {
    if let Some(area) = AREA.try_lock() {
        let _ = write_title(&area, title);
    }
}

fn write_title(area: &Option<Area>, title: &str) -> Result<(), String> {
    let Some(a) = area.as_ref() else {
        return Err(UNAVAILABLE
            .get()
            .cloned()
            .unwrap_or_else(|| "the process title area was not prepared".into()));
    };
    let bytes = title.as_bytes();
    let n = bytes.len().min(a.len);
    // SAFETY: [start, start + len) is the argument and old environment area found by `init`:
    // this process's own writable memory, which nothing reads any more (see the module doc);
    // the AREA lock makes this the only writer.
    unsafe {
        let dst = std::slice::from_raw_parts_mut(a.start as *mut u8, a.len);
        dst[..n].copy_from_slice(&bytes[..n]);
        dst[n..].fill(0);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(name: &str) -> Option<String> {
        match name {
            "title" => Some("/usr/bin/redis-server".into()),
            "listen-addr" => Some("*:6379".into()),
            "server-mode" => Some(String::new()),
            "port" => Some("6379".into()),
            _ => None,
        }
    }

    #[test]
    fn templates_expand_as_redis_expands_them() {
        assert_eq!(
            expand("{title} {listen-addr} {server-mode}", &vars).as_deref(),
            Some("/usr/bin/redis-server *:6379")
        );
        assert_eq!(expand("{{x} {port}}", &vars).as_deref(), Some("{x} 6379}"));
        assert_eq!(expand("  plain  ", &vars).as_deref(), Some("plain"));
        assert_eq!(expand("{unknown}", &vars), None);
        assert_eq!(expand("{port", &vars), None);
        assert_eq!(expand("abc{", &vars), None);
    }

    #[test]
    fn validation_refuses_what_redis_refuses() {
        assert!(validate("{title} {listen-addr} {server-mode}"));
        assert!(validate(
            "TEST {title} {listen-addr} {port} {tls-port} {unixsocket} {config-file}"
        ));
        assert!(!validate("{invalid-var}"));
        assert!(!validate("{title}"));
        assert!(!validate("   "));
        assert!(!validate("{title"));
    }

    #[test]
    fn stat_fields_are_counted_past_a_command_name_with_spaces() {
        let stat = "123 (a b) c) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 \
                    24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46";
        assert_eq!(stat_field(stat, 4), Some(1));
        assert_eq!(stat_field(stat, 49), Some(46));
        assert_eq!(stat_field(stat, 50), None);
    }
}
