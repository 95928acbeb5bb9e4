//! The crash report: what the log gets when the process dies of a fatal signal.
//!
//! This module owns the handlers of SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT. As
//! redis-server does (under `crash-log-enabled yes`, the default), the handler writes a bug
//! report to the log: the signal, its code and address or sender, and a stack trace of the
//! thread that received it, between Redis's START and END markers. It then lets the signal
//! take its default action (the handler is installed with SA_RESETHAND and the signal raised
//! again), so the process still dies of that signal, with a core dump where the system keeps
//! them. Like Redis's, the report is best effort: it allocates and symbolises while the
//! process is in an unknown state. `crash-log-enabled no` leaves the report out.

use std::sync::atomic::{AtomicBool, Ordering};

/// `crash-log-enabled`, as the cron last read it.
static ENABLED: AtomicBool = AtomicBool::new(true);

const FATAL_SIGNALS: [libc::c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGABRT,
];

/// Install the handlers; `enabled` is `crash-log-enabled`.
pub(crate) fn install(enabled: bool) {
    set_enabled(enabled);
    for sig in FATAL_SIGNALS {
        // SAFETY: a zeroed sigaction is a valid starting point; the handler is an
        // `extern "C"` function with the three-argument signature SA_SIGINFO requires, and
        // sigaction only reads the struct we pass.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                on_fatal_signal;
            action.sa_sigaction = handler as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESETHAND | libc::SA_NODEFER;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// Follow `crash-log-enabled` (CONFIG SET takes effect at the cron's next tick).
pub(crate) fn set_enabled(enabled: bool) {
    ENABLED.store(enabled, Ordering::Relaxed);
}

fn signal_name(sig: libc::c_int) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        _ => "signal",
    }
}

/// The report's lines about the signal: its number, code, and the faulting address or the
/// process that sent it.
fn signal_lines(
    sig: libc::c_int,
    code: libc::c_int,
    addr: usize,
    sender: Option<(i32, u32)>,
) -> Vec<String> {
    let mut lines = vec![format!(
        "Podium {} crashed by signal: {sig} ({}), si_code: {code}",
        env!("CARGO_PKG_VERSION"),
        signal_name(sig)
    )];
    if matches!(
        sig,
        libc::SIGSEGV | libc::SIGBUS | libc::SIGFPE | libc::SIGILL
    ) && sender.is_none()
    {
        lines.push(format!("Accessing address: {addr:#x}"));
    }
    if let Some((pid, uid)) = sender {
        lines.push(format!("Killed by PID: {pid}, UID: {uid}"));
    }
    lines
}

extern "C" fn on_fatal_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    if ENABLED.load(Ordering::Relaxed) {
        // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler; its fields are
        // only read. si_pid/si_uid are meaningful when the signal was sent by a process
        // (si_code <= 0: SI_USER, SI_TKILL ...), si_addr for faults.
        let (code, addr, sender) = unsafe {
            let i = &*info;
            let sender = (i.si_code <= 0).then(|| (i.si_pid(), i.si_uid()));
            (i.si_code, i.si_addr() as usize, sender)
        };
        report(sig, code, addr, sender);
    }
    // SAFETY: SA_RESETHAND restored the default action; raising the signal again ends the
    // process the way the signal would have.
    unsafe {
        libc::raise(sig);
    }
}

fn report(sig: libc::c_int, code: libc::c_int, addr: usize, sender: Option<(i32, u32)>) {
    use crate::log::write_crash;
    write_crash(
        "\n\n=== REDIS BUG REPORT START: Cut & paste starting from here ===\n",
        true,
    );
    for line in signal_lines(sig, code, addr, sender) {
        write_crash(&line, false);
    }
    let trace = std::backtrace::Backtrace::force_capture();
    let thread = std::thread::current();
    write_crash(
        &format!(
            "\n------ STACK TRACE ------\n\nBacktrace of thread {}:\n{trace}\n",
            thread.name().unwrap_or("unnamed")
        ),
        true,
    );
    write_crash(
        "\n=== REDIS BUG REPORT END. Make sure to include from START to END. ===\n\n",
        true,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_names_the_signal_and_its_origin() {
        let fault = signal_lines(libc::SIGSEGV, 1, 0x10, None);
        assert!(fault[0].contains("crashed by signal: 11 (SIGSEGV), si_code: 1"));
        assert_eq!(fault[1], "Accessing address: 0x10");
        let killed = signal_lines(libc::SIGABRT, 0, 0, Some((42, 0)));
        assert!(killed[0].contains("crashed by signal: 6 (SIGABRT)"));
        assert_eq!(killed[1], "Killed by PID: 42, UID: 0");
    }
}
