//! Forked children, the part BGSAVE and AOF rewrites share: the one-child rule, forking with
//! every shard locked, the child's progress reports over a pipe, waiting for it, and stopping
//! it.
//!
//! Redis runs at most one child at a time, so a BGSAVE and a rewrite each refuse to start
//! while the other's child runs ([`bgsave_running`], and `rewriting` in the AOF state), under
//! one fork lock. Both fork the same way ([`fork_child`]: the shards locked by the caller for
//! the fork's instant, the child's title and OOM score, a report pipe, `_exit` at the end),
//! and both are stopped the same way (SIGUSR1, then waiting for the waiter thread:
//! [`kill_bgsave`], [`kill_rewrite`]). The snapshot and rewrite modules build on this; the
//! rewrite also writes RDB images through the snapshot module, so this sits below both and
//! neither has to import the other for it.

use crate::config::dir;
use crate::keyspace::Shard;
use crate::state::Server;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// True while a BGSAVE child runs.
pub(crate) fn bgsave_running(srv: &Server) -> bool {
    srv.aof.inner.snap.child.load(Ordering::SeqCst) != 0
}

/// Lock every shard in the global order; `dbs[i]` gets database i's guards.
pub(crate) fn lock_all(srv: &Server) -> Vec<Vec<parking_lot::MutexGuard<'_, Shard>>> {
    srv.keyspace
        .dbs
        .iter()
        .map(|d| d.shards.iter().map(|s| s.lock()).collect())
        .collect()
}

/// The copy-on-write bytes of this process (Private_Dirty), as Redis's child reports it.
pub(crate) fn private_dirty() -> u64 {
    let Ok(t) = std::fs::read_to_string("/proc/self/smaps_rollup") else {
        return 0;
    };
    t.lines()
        .filter(|l| l.starts_with("Private_Dirty:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum::<u64>()
        * 1024
}

/// Fork a child, titled `title` (Redis's child names, for `{title}` in `proc-title-template`),
/// that runs `work` and exits: 0 when it returns Ok, 1 when it fails (its message
/// goes to the server log as the child's warning) or panics. `work` gets the write end of the report pipe (see
/// [`child_report`]); the parent gets the child's pid and the read end, for [`wait_child`].
/// Counts the fork (INFO latest_fork_usec, total_forks). The caller holds the shard guards
/// `work` reads, and drops them once this returns.
pub(crate) fn fork_child(
    srv: &Server,
    title: &str,
    work: impl FnOnce(i32) -> Result<(), String>,
) -> std::io::Result<(i32, i32)> {
    let child_oom = child_oom_score(srv);
    let child_title = srv.config.proc_title(Some(title));
    let (read_fd, write_fd) = report_pipe()?;
    let started = Instant::now();
    // SAFETY: fork(2) duplicates the process with only this thread running in the child. The
    // child runs `work`, which only reads the shards whose guards this thread holds and what
    // was read before the fork, allocates through jemalloc (made fork-safe by its atfork
    // handlers) and uses plain file system calls; then it ends with _exit, running no
    // destructor and touching no lock another thread may have held. Covered by tests/rdb.rs
    // (BGSAVE while clients write, point-in-time check) and tests/persistence.rs (a rewrite
    // child killed, then a restart compares every key).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: closing the child's copy of the read end, which it never reads: with the
        // parent's copy the only one left, a parent that dies (killed, say by the OOM killer)
        // makes the child's next report fail with EPIPE, and the child exits with it
        // (`child_report`), as Redis's child closes its reading end for the same reason.
        unsafe {
            libc::close(read_fd);
        }
        if let Some(score) = child_oom {
            crate::process::set_child_oom_score(score);
        }
        if let Some(t) = &child_title {
            crate::proctitle::set_after_fork(t);
        }
        let code = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(write_fd))) {
            Ok(Ok(())) => 0,
            Ok(Err(msg)) => {
                // To the server log as a child's warning line (Redis's serverLog from the
                // child), never to standard error: supervisors and Redis's own test harnesses
                // treat anything on stderr as a fault.
                crate::log::child_warning(&msg);
                1
            }
            Err(_) => 1,
        };
        // SAFETY: _exit(2) ends the child without running any destructor (the guards'
        // memory is only our copy of it).
        unsafe {
            libc::_exit(code);
        }
    }
    // SAFETY: closing our copy of the child's end of the pipe.
    unsafe {
        libc::close(write_fd);
    }
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        // SAFETY: closing the read end we still own.
        unsafe {
            libc::close(read_fd);
        }
        return Err(e);
    }
    let snap = &srv.aof.inner.snap;
    snap.latest_fork_usec
        .store(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    snap.total_forks.fetch_add(1, Ordering::Relaxed);
    Ok((pid, read_fd))
}

/// A close-on-exec pipe for a child's reports: (read end, write end).
fn report_pipe() -> std::io::Result<(i32, i32)> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2(2) writes two descriptors into the array we pass; nothing else is touched.
    // Close-on-exec, so nothing but a fork ever holds the write end.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((fds[0], fds[1]))
}

/// A fork child's OOM score (oom-score-adj-values' third value), computed before the fork.
fn child_oom_score(srv: &Server) -> Option<i32> {
    crate::process::oom_score_for_child(
        &srv.config.text(dir::OOM_SCORE_ADJ),
        crate::config::directives::oom_score_adj_values(
            &srv.config.text(dir::OOM_SCORE_ADJ_VALUES),
        )
        .unwrap_or([0, 200, 800]),
    )
}

/// Wait for a fork child: its wait status (-1 when it could not be had) and the
/// copy-on-write bytes of its last report.
pub(crate) fn wait_child(pid: i32, read_fd: i32) -> (i32, u64) {
    wait_child_reporting(pid, read_fd, &mut |_, _, _| {})
}

/// [`wait_child`], passing each report (kind, keys, copy-on-write bytes) to `on_report`.
pub(super) fn wait_child_reporting(
    pid: i32,
    read_fd: i32,
    on_report: &mut dyn FnMut(u64, u64, u64),
) -> (i32, u64) {
    let mut last_cow = 0;
    // The child's reports until it exits (end of file on the pipe).
    let mut msg = [0u8; 24];
    let mut have = 0usize;
    loop {
        // SAFETY: read(2) into the unfilled tail of a local buffer.
        let n = unsafe { libc::read(read_fd, msg[have..].as_mut_ptr().cast(), msg.len() - have) };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        if n <= 0 {
            break;
        }
        have += n as usize;
        if have < msg.len() {
            continue;
        }
        have = 0;
        let word = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&msg[i * 8..i * 8 + 8]);
            u64::from_le_bytes(b)
        };
        let (kind, keys, cow) = (word(0), word(1), word(2));
        last_cow = cow;
        on_report(kind, keys, cow);
    }
    // SAFETY: closing our read end of the pipe.
    unsafe {
        libc::close(read_fd);
    }
    let mut status = 0i32;
    loop {
        // SAFETY: waitpid(2) on our own child, writing its status into a local.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            status = -1;
            break;
        }
    }
    (status, last_cow)
}

pub(super) const REPORT_PROGRESS: u64 = 1;
pub(crate) const REPORT_FINAL: u64 = 2;

/// In the BGSAVE child: one 24-byte report (kind, keys written, copy-on-write bytes) to the
/// parent. A write of at most PIPE_BUF bytes to a pipe is atomic: the reader gets whole ones.
pub(crate) fn child_report(fd: i32, kind: u64, keys: u64, cow: u64) {
    let mut msg = [0u8; 24];
    msg[..8].copy_from_slice(&kind.to_le_bytes());
    msg[8..16].copy_from_slice(&keys.to_le_bytes());
    msg[16..].copy_from_slice(&cow.to_le_bytes());
    // SAFETY: write(2) of a local buffer to our end of the pipe; a failure only loses a report.
    let n = unsafe { libc::write(fd, msg.as_ptr().cast(), msg.len()) };
    // No reader: the parent is gone (killed), and the child follows it, as Redis's child
    // exits when it cannot write its report.
    if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EPIPE) {
        // SAFETY: _exit(2) in the forked child, running no destructor.
        unsafe {
            libc::_exit(1);
        }
    }
}

/// Ask a running BGSAVE to stop (SIGUSR1, as Redis's killRDBChild) without waiting for it: its
/// reaper records the end.
pub(crate) fn signal_bgsave(srv: &Server) {
    let pid = srv.aof.inner.snap.child.load(Ordering::SeqCst);
    if pid != 0 {
        // SAFETY: kill(2) of our own child process, which its reaper has not waited for yet
        // (it clears `child` only after waitpid).
        unsafe {
            libc::kill(pid, libc::SIGUSR1);
        }
    }
}

/// Stop a running BGSAVE (SHUTDOWN, DEBUG RELOAD): SIGUSR1 as Redis, then wait for the reaper.
pub(crate) fn kill_bgsave(srv: &Server) {
    let pid = srv.aof.inner.snap.child.load(Ordering::SeqCst);
    if pid == 0 {
        return;
    }
    tracing::info!("There is a child saving an .rdb. Killing it!");
    // SAFETY: kill(2) of our own child process.
    unsafe {
        libc::kill(pid, libc::SIGUSR1);
    }
    for _ in 0..500 {
        if !bgsave_running(srv) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Stop a running rewrite (appendonly turned off, SHUTDOWN): SIGUSR1 as Redis, then wait for
/// the waiter thread to clean up after it.
pub(crate) fn kill_rewrite(srv: &Server) {
    let inner = &srv.aof.inner;
    let pid = inner.rewrite_child.load(Ordering::SeqCst);
    if pid == 0 {
        return;
    }
    tracing::info!("Killing running AOF rewrite child: {pid}");
    inner.rewrite_cancel.store(true, Ordering::SeqCst);
    // SAFETY: kill(2) of our own child process.
    unsafe {
        libc::kill(pid, libc::SIGUSR1);
    }
    for _ in 0..500 {
        if !inner.rewriting.load(Ordering::SeqCst) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
