//! The process around the server: daemonizing, the pidfile, the supervisor (systemd, upstart),
//! transparent huge pages, the OOM killer's score, and the listening sockets with their backlog.
//!
//! These follow redis-server's startup order: fork (`daemonize yes`) before any thread exists,
//! so the child is a full copy; write the pidfile before the data loads and remove it at exit;
//! tell systemd READY=1 once clients are accepted and STOPPING=1 when shutdown begins.

use std::io;
use std::os::unix::net::UnixDatagram;

/// The score the process had before `oom-score-adj` first changed it (None: never changed),
/// so that turning the setting off puts it back, as Redis does.
static OOM_BASE: parking_lot::Mutex<Option<i32>> = parking_lot::Mutex::new(None);

const OOM_SCORE_FILE: &str = "/proc/self/oom_score_adj";

/// The score `oom-score-adj` asks for, for process class `class` (0 server, 2 BGSAVE child):
/// relative modes add the value to the score the process started with, clamped to the
/// kernel's -1000..1000. None when the setting is off.
fn oom_target(mode: &str, values: [i32; 3], class: usize, base: i32) -> Option<i32> {
    let v = values[class];
    let v = match mode {
        "no" => return None,
        "absolute" => v,
        _ => v + base,
    };
    Some(v.clamp(-1000, 1000))
}

fn read_oom_score() -> io::Result<i32> {
    let text = std::fs::read_to_string(OOM_SCORE_FILE)?;
    Ok(text.trim().parse().unwrap_or(0))
}

/// Apply `oom-score-adj` / `oom-score-adj-values` to this process (at startup, after CONFIG
/// SET of either, and when it becomes or stops being a replica): `class` 0 for a master, 1 for
/// a replica. Err carries the OS error, for the log.
pub fn apply_oom_score_adj(mode: &str, values: [i32; 3], class: usize) -> Result<(), String> {
    let mut base = OOM_BASE.lock();
    let target = if mode == "no" {
        // Off: restore the score from before our first change, if we made one.
        match base.take() {
            Some(b) => b,
            None => return Ok(()),
        }
    } else {
        let b = match *base {
            Some(b) => b,
            None => {
                let b = read_oom_score().map_err(|e| {
                    format!(
                        "Unable to read oom_score_adj: {}",
                        crate::util::strerror(&e)
                    )
                })?;
                *base = Some(b);
                b
            }
        };
        oom_target(mode, values, class, b).unwrap_or(b)
    };
    std::fs::write(OOM_SCORE_FILE, format!("{target}\n")).map_err(|e| {
        format!(
            "Unable to write oom_score_adj: {}",
            crate::util::strerror(&e)
        )
    })
}

/// The score a BGSAVE child should take, computed before the fork (None: leave it).
pub fn oom_score_for_child(mode: &str, values: [i32; 3]) -> Option<i32> {
    let base = (*OOM_BASE.lock()).unwrap_or(0);
    oom_target(mode, values, 2, base)
}

/// In a forked child: set its score with plain system calls (no allocation).
pub fn set_child_oom_score(score: i32) {
    // Formatted into a stack buffer through io::Write on a slice: no allocation.
    let mut buf = [0u8; 16];
    let mut cur = io::Cursor::new(&mut buf[..]);
    if io::Write::write_fmt(&mut cur, format_args!("{score}\n")).is_err() {
        return;
    }
    let n = cur.position() as usize;
    // SAFETY: open/write/close on a NUL-terminated constant path and a stack buffer of `n`
    // initialised bytes; no memory is shared with other code.
    unsafe {
        let fd = libc::open(c"/proc/self/oom_score_adj".as_ptr(), libc::O_WRONLY);
        if fd >= 0 {
            libc::write(fd, buf.as_ptr().cast(), n);
            libc::close(fd);
        }
    }
}

/// Redis's pidfile when `daemonize yes` names none.
const DEFAULT_PIDFILE: &str = "/var/run/redis.pid";

/// Fork into the background: the parent exits 0, the child leaves the terminal's session and
/// points its standard streams at /dev/null. Must run before any thread is started.
pub fn daemonize() -> Result<(), String> {
    // SAFETY: called from main's thread before the runtime (or any other thread) exists, so
    // the child is a complete copy of the process; fork has no memory-safety preconditions.
    match unsafe { libc::fork() } {
        -1 => return Err(format!("fork failed: {}", io::Error::last_os_error())),
        0 => {}
        _ => std::process::exit(0),
    }
    // SAFETY: setsid and the dup2 calls only manipulate this process's session and descriptor
    // table; the path is a valid NUL-terminated string.
    unsafe {
        libc::setsid();
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::dup2(null, 1);
            libc::dup2(null, 2);
            if null > 2 {
                libc::close(null);
            }
        }
    }
    Ok(())
}

/// The pidfile to write: `pidfile`, or Redis's default when daemonized without one.
pub fn pidfile_path(configured: &str, daemonized: bool) -> Option<String> {
    if !configured.is_empty() {
        Some(configured.to_string())
    } else if daemonized {
        Some(DEFAULT_PIDFILE.to_string())
    } else {
        None
    }
}

/// Holds the pidfile while the server runs; removing it on drop (at exit).
pub struct Pidfile(Option<String>);

impl Pidfile {
    /// Write our pid. A failure is logged, not fatal, as in Redis.
    pub fn create(path: Option<String>) -> Pidfile {
        if let Some(p) = &path {
            if let Err(e) = std::fs::write(p, format!("{}\n", std::process::id())) {
                eprintln!("podium: failed to write PID file {p}: {e}");
                return Pidfile(None);
            }
        }
        Pidfile(path)
    }
}

impl Drop for Pidfile {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Which supervisor to talk to, resolved from `supervised` and the environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Supervisor {
    None,
    Systemd,
    Upstart,
}

pub fn supervisor(mode: &str) -> Supervisor {
    let systemd = std::env::var_os("NOTIFY_SOCKET").is_some();
    let upstart = std::env::var_os("UPSTART_JOB").is_some();
    match mode {
        "systemd" if systemd => Supervisor::Systemd,
        "upstart" if upstart => Supervisor::Upstart,
        "auto" if systemd => Supervisor::Systemd,
        "auto" if upstart => Supervisor::Upstart,
        "systemd" | "upstart" => {
            tracing::warn!(
                "supervised {mode} requested, but {} is not set",
                if mode == "systemd" {
                    "NOTIFY_SOCKET"
                } else {
                    "UPSTART_JOB"
                }
            );
            Supervisor::None
        }
        _ => Supervisor::None,
    }
}

/// Send an sd_notify message (`READY=1\n` ...) to $NOTIFY_SOCKET; a leading '@' names an
/// abstract socket.
pub fn sd_notify(message: &str) -> io::Result<()> {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(());
    };
    let sock = UnixDatagram::unbound()?;
    let bytes = path.as_encoded_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
        sock.send_to_addr(message.as_bytes(), &addr)?;
    } else {
        sock.send_to(message.as_bytes(), path)?;
    }
    Ok(())
}

/// Tell the supervisor the server accepts connections.
pub fn notify_ready(sup: Supervisor) {
    match sup {
        Supervisor::Systemd => {
            if let Err(e) = sd_notify("STATUS=Ready to accept connections\nREADY=1\n") {
                tracing::warn!("failed to notify systemd: {e}");
            }
        }
        Supervisor::Upstart => {
            // Upstart's `expect stop`: the job is ready when the process stops itself.
            // SAFETY: raising a signal at ourselves has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGSTOP) };
            std::env::remove_var("UPSTART_JOB");
        }
        Supervisor::None => {}
    }
}

/// Tell the supervisor shutdown has begun.
pub fn notify_stopping(sup: Supervisor) {
    if sup == Supervisor::Systemd {
        let _ = sd_notify("STOPPING=1\n");
    }
}

/// `disable-thp yes`: no transparent huge pages for this process (their copy-on-write and
/// compaction stalls are what Redis avoids by it).
pub fn disable_thp() {
    // SAFETY: prctl with PR_SET_THP_DISABLE takes plain integers.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

#[cfg(test)]
mod tests {
    #[test]
    fn oom_targets_follow_the_mode() {
        let v = [10, 20, 30];
        assert_eq!(super::oom_target("no", v, 0, 5), None);
        assert_eq!(super::oom_target("yes", v, 0, 5), Some(15));
        assert_eq!(super::oom_target("relative", v, 2, 5), Some(35));
        assert_eq!(super::oom_target("absolute", v, 0, 5), Some(10));
        assert_eq!(
            super::oom_target("absolute", [2000, 0, 0], 0, 0),
            Some(1000)
        );
        assert_eq!(
            super::oom_target("relative", [-2000, 0, 0], 0, 500),
            Some(-1000)
        );
    }

    #[test]
    fn child_score_writer_writes_the_number() {
        // Writing the score the process already has changes nothing (raising it needs no
        // privilege, lowering it may).
        let Ok(now) = super::read_oom_score() else {
            return;
        };
        super::set_child_oom_score(now);
        assert_eq!(super::read_oom_score().ok(), Some(now));
        if now < 1000 {
            super::set_child_oom_score(now + 1);
            assert_eq!(super::read_oom_score().ok(), Some(now + 1));
            super::set_child_oom_score(now);
        }
    }

    use super::*;

    #[test]
    fn pidfile_is_written_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.pid").display().to_string();
        {
            let _g = Pidfile::create(Some(p.clone()));
            let text = std::fs::read_to_string(&p).unwrap();
            assert_eq!(text.trim(), std::process::id().to_string());
        }
        assert!(!std::path::Path::new(&p).exists());
        assert_eq!(pidfile_path("", true).as_deref(), Some(DEFAULT_PIDFILE));
        assert_eq!(pidfile_path("", false), None);
    }

    #[test]
    fn sd_notify_reaches_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        std::env::set_var("NOTIFY_SOCKET", &path);
        sd_notify("READY=1\n").unwrap();
        std::env::remove_var("NOTIFY_SOCKET");
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\n");
    }
}
