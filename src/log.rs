//! The server log, in redis-server's line format.
//!
//! Operators' tools, `docker logs` readers and Redis's own test harness read the log as Redis
//! writes it: one line per message, `<pid>:<role> <dd Mon yyyy HH:MM:SS.mmm> <level> <text>`,
//! where the role is `M` (this process) or `C` (a child writing a snapshot) and the level mark
//! is `.` debug, `-` verbose, `*` notice, `#` warning. There are no colour codes, whether the
//! output is a terminal or not. `logfile` empty means standard output; otherwise the file is
//! opened in append mode for each line, as Redis does, so a rotated file is followed at once.
//!
//! The code logs through `tracing`'s macros; [`LogLayer`] maps tracing's levels onto Redis's
//! four (`error!`/`warn!` warning, `info!` notice, `debug!` verbose, `trace!` debug) and filters
//! with the `loglevel` directive, which CONFIG SET can change at run time ([`set_level`]).

use parking_lot::RwLock;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// Redis's verbosity levels, in increasing order of severity.
pub const DEBUG: u8 = 0;
pub const VERBOSE: u8 = 1;
pub const NOTICE: u8 = 2;
pub const WARNING: u8 = 3;
/// `loglevel nothing`: no line passes.
pub const NOTHING: u8 = 4;

static LEVEL: AtomicU8 = AtomicU8::new(NOTICE);
static LOGFILE: RwLock<String> = RwLock::new(String::new());
/// Set in a forked child (snapshot writer): its lines carry the role `C`.
static IN_CHILD: AtomicBool = AtomicBool::new(false);

/// The `loglevel` directive's value as a level; unknown names leave the level unchanged.
pub fn set_level(name: &str) {
    let level = match name {
        "debug" => DEBUG,
        "verbose" => VERBOSE,
        "notice" => NOTICE,
        "warning" => WARNING,
        "nothing" => NOTHING,
        _ => return,
    };
    LEVEL.store(level, Ordering::Relaxed);
}

/// The log goes to a file (`logfile` set), not to standard output.
pub fn to_file() -> bool {
    !LOGFILE.read().is_empty()
}

/// The `logfile` directive: empty means standard output.
pub fn set_logfile(path: &str) {
    *LOGFILE.write() = path.to_string();
}

/// Set while this server follows a master: its lines carry the role `S`, as a Redis replica's.
static AS_REPLICA: AtomicBool = AtomicBool::new(false);

/// This server follows a master (or no longer does), for the role character of its lines.
pub fn set_replica(on: bool) {
    AS_REPLICA.store(on, Ordering::Relaxed);
}

/// Mark this process as a forked child, for the role character of its lines.
pub fn mark_child() {
    IN_CHILD.store(true, Ordering::Relaxed);
}

/// A warning from a forked child (a snapshot or rewrite that failed), with the role `C`.
/// Written as the crash report writes (no wait on a lock a thread of the parent may have held
/// at the fork), to the log file or standard output, never standard error.
pub(crate) fn child_warning(msg: &str) {
    mark_child();
    if enabled(WARNING) {
        write_crash(msg, false);
    }
}

/// A crash report (see [`crate::crash`]) written at once, without the standard output's lock
/// (the crashing thread may hold it): each text is a warning line with Redis's prefix, or raw
/// when `raw` is set.
pub(crate) fn write_crash(text: &str, raw: bool) {
    let text = if raw {
        text.to_string()
    } else {
        format_line(WARNING, text)
    };
    let path = LOGFILE.try_read().map(|p| p.clone()).unwrap_or_default();
    if path.is_empty() {
        let mut bytes = text.as_bytes();
        while !bytes.is_empty() {
            // SAFETY: writes from a valid buffer of `bytes.len()` bytes to standard output's
            // descriptor, which the process never closes; a failed write ends the loop.
            let n = unsafe { libc::write(1, bytes.as_ptr().cast(), bytes.len()) };
            if n <= 0 {
                break;
            }
            bytes = &bytes[n as usize..];
        }
    } else if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        let _ = f.write_all(text.as_bytes());
    }
}

/// Whether a line of `level` would be written now.
pub fn enabled(level: u8) -> bool {
    level < NOTHING && level >= LEVEL.load(Ordering::Relaxed)
}

fn redis_level(level: &Level) -> u8 {
    match *level {
        Level::ERROR | Level::WARN => WARNING,
        Level::INFO => NOTICE,
        Level::DEBUG => VERBOSE,
        Level::TRACE => DEBUG,
    }
}

/// `dd Mon yyyy HH:MM:SS.mmm` in local time, as Redis's log stamps lines.
fn timestamp() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs() as libc::time_t;
    let millis = now.subsec_millis();
    if IN_CHILD.load(Ordering::Relaxed) {
        // A forked child must not call localtime_r: another thread of the parent may have held
        // the C library's time-zone lock at the fork, and the child would wait for it forever.
        // It uses the offset the parent last saw instead.
        return child_timestamp(secs as i64 + UTC_OFFSET.load(Ordering::Relaxed), millis);
    }
    let mut buf = [0u8; 64];
    // SAFETY: `tm` is plain data fully written by localtime_r before it is read; strftime writes
    // at most `buf.len()` bytes into `buf` and returns how many it wrote (0 on overflow). The
    // format string is NUL-terminated. Covered by the `line_format` test.
    let n = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&secs, &mut tm).is_null() {
            return format!("{secs}.{millis:03}");
        }
        UTC_OFFSET.store(tm.tm_gmtoff, Ordering::Relaxed);
        libc::strftime(
            buf.as_mut_ptr() as *mut libc::c_char,
            buf.len(),
            c"%d %b %Y %H:%M:%S".as_ptr(),
            &tm,
        )
    };
    format!("{}.{millis:03}", String::from_utf8_lossy(&buf[..n]))
}

/// The local time's offset from UTC in seconds, as the last stamp in the parent found it.
static UTC_OFFSET: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// [`timestamp`]'s text for `local` seconds since the epoch in local time, computed without
/// the C library (days to a civil date by the proleptic Gregorian calendar's 400-year cycle).
fn child_timestamp(local: i64, millis: u32) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = local.div_euclid(86_400);
    let of_day = local.rem_euclid(86_400);
    // Days since 0000-03-01, so that a leap day ends its year.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{day:02} {} {year} {:02}:{:02}:{:02}.{millis:03}",
        MONTHS[(month - 1) as usize],
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// One formatted line (with its newline).
fn format_line(level: u8, msg: &str) -> String {
    let role = if IN_CHILD.load(Ordering::Relaxed) {
        'C'
    } else if AS_REPLICA.load(Ordering::Relaxed) {
        'S'
    } else {
        'M'
    };
    let mark = [b'.', b'-', b'*', b'#'][level.min(WARNING) as usize] as char;
    format!(
        "{}:{role} {} {mark} {msg}\n",
        std::process::id(),
        timestamp()
    )
}

fn write_out(text: &str) {
    let path = LOGFILE.read().clone();
    if path.is_empty() {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    } else if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        let _ = f.write_all(text.as_bytes());
    }
}

/// Write one line at `level` if the current verbosity lets it through.
pub fn line(level: u8, msg: &str) {
    if enabled(level) {
        write_out(&format_line(level, msg));
    }
}

/// Write text as it is, without the line prefix (Redis's raw mode, used for the banner), at
/// notice level.
pub fn raw(text: &str) {
    if enabled(NOTICE) {
        write_out(text);
    }
}

/// The `tracing` layer that writes events as Redis log lines.
pub struct LogLayer;

struct Message(String);

impl Visit for Message {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            self.0.push_str(&format!(" {}={value}", field.name()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0.push_str(&format!("{value:?}"));
        } else {
            self.0.push_str(&format!(" {}={value:?}", field.name()));
        }
    }
}

impl<S: Subscriber> Layer<S> for LogLayer {
    fn register_callsite(
        &self,
        _metadata: &'static Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        // The level can change at run time (CONFIG SET loglevel): ask every time.
        tracing::subscriber::Interest::sometimes()
    }

    fn enabled(&self, metadata: &Metadata<'_>, _ctx: Context<'_, S>) -> bool {
        enabled(redis_level(metadata.level()))
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let level = redis_level(event.metadata().level());
        if !enabled(level) {
            return;
        }
        let mut msg = Message(String::new());
        event.record(&mut msg);
        write_out(&format_line(level, &msg.0));
    }
}

/// Install the layer as the process's tracing subscriber (once; later calls do nothing).
pub fn install() {
    use tracing_subscriber::layer::SubscriberExt;
    let subscriber = tracing_subscriber::registry().with(LogLayer);
    let _ = tracing::subscriber::set_global_default(subscriber);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_format() {
        let l = format_line(NOTICE, "Ready to accept connections");
        let (pid, rest) = l.split_once(':').expect("pid");
        assert_eq!(pid, std::process::id().to_string());
        assert!(rest.starts_with("M "), "{l}");
        // "M dd Mon yyyy HH:MM:SS.mmm * text\n"
        let parts: Vec<&str> = rest.trim_end().splitn(7, ' ').collect();
        assert_eq!(parts.len(), 7, "{l}");
        assert_eq!(parts[1].len(), 2, "day: {l}");
        assert_eq!(parts[2].len(), 3, "month: {l}");
        assert_eq!(parts[3].len(), 4, "year: {l}");
        assert_eq!(parts[4].len(), 12, "time: {l}");
        assert_eq!(parts[5], "*");
        assert_eq!(parts[6], "Ready to accept connections");
        assert!(l.ends_with('\n'));
        assert!(!l.contains('\x1b'), "no colour codes");
        assert!(format_line(WARNING, "x").contains(" # x"));
        assert!(format_line(VERBOSE, "x").contains(" - x"));
        assert!(format_line(DEBUG, "x").contains(" . x"));
    }

    /// A child's stamp, computed without the C library, is the one localtime_r and strftime
    /// give for the same instant and offset (UTC here, so the offset is 0), across leap days,
    /// century rules and the epoch.
    #[test]
    fn child_stamps_match_the_c_library() {
        for secs in [
            0i64,
            951_782_400,   // 2000-02-29
            951_868_799,   // 2000-02-29 23:59:59
            4_107_456_000, // 2100-02-28
            4_107_542_400, // 2100-03-01
            1_795_000_123,
            1_700_000_000,
        ] {
            let mut buf = [0u8; 64];
            // SAFETY: as in `timestamp`: `tm` is written by gmtime_r before strftime reads it,
            // and strftime writes at most `buf.len()` bytes.
            let n = unsafe {
                let mut tm: libc::tm = std::mem::zeroed();
                assert!(!libc::gmtime_r(&(secs as libc::time_t), &mut tm).is_null());
                libc::strftime(
                    buf.as_mut_ptr() as *mut libc::c_char,
                    buf.len(),
                    c"%d %b %Y %H:%M:%S".as_ptr(),
                    &tm,
                )
            };
            let want = format!("{}.042", String::from_utf8_lossy(&buf[..n]));
            assert_eq!(child_timestamp(secs, 42), want, "{secs}");
        }
    }

    #[test]
    fn levels_filter() {
        set_level("warning");
        assert!(!enabled(NOTICE));
        assert!(enabled(WARNING));
        set_level("nothing");
        assert!(!enabled(WARNING));
        set_level("debug");
        assert!(enabled(DEBUG));
        set_level("bogus");
        assert!(enabled(DEBUG), "unknown names leave the level alone");
        set_level("notice");
    }
}
