//! The software watchdog (`watchdog-period`): a debugging aid that logs the stack of a thread
//! stuck in one command for longer than the period.
//!
//! Redis arms a one-shot SIGALRM timer from its cron and re-arms it on every tick, so the
//! signal only fires when the event loop has not come back for a whole period; its handler
//! logs the stack of the (only) thread, which is inside the slow command. Podium runs commands
//! on several worker threads, so the equivalent is per thread: while the watchdog is on, each
//! worker notes when its current command started ([`busy`]), and a watchdog thread looks, a
//! few times per cron period, for one that has been inside a command for longer than
//! `watchdog-period`. It interrupts that thread with SIGALRM (tgkill). The handler only walks
//! the stack into a fixed buffer: the thread may have been stopped anywhere, inside the
//! allocator too, so it takes no lock and allocates nothing. The watchdog thread then
//! symbolises the frames and logs them between Redis's markers (`--- WATCHDOG TIMER EXPIRED
//! ---` ... `--------`). A stalled command is reported once, as Redis's timer fires once
//! until the next cron tick re-arms it.
//!
//! With the watchdog off (`watchdog-period 0`, the default) a command costs one relaxed load.

use parking_lot::Mutex;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// `watchdog-period` in milliseconds as applied (0: off).
static PERIOD_MS: AtomicU64 = AtomicU64::new(0);

/// How often the watchdog thread looks, in milliseconds (half the cron period).
static TICK_MS: AtomicU64 = AtomicU64::new(50);

/// A worker thread's record: its kernel thread id and when its current command started.
struct Slot {
    tid: i32,
    name: String,
    /// Milliseconds since [`origin`] plus one at the start of the current command; 0 when
    /// the thread is not in a command.
    started: AtomicU64,
    /// Incremented per command, so a stalled command is reported once.
    command: AtomicU64,
    reported: AtomicU64,
}

fn slots() -> &'static Mutex<Vec<Arc<Slot>>> {
    static SLOTS: OnceLock<Mutex<Vec<Arc<Slot>>>> = OnceLock::new();
    SLOTS.get_or_init(|| Mutex::new(Vec::new()))
}

fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

fn now_ms() -> u64 {
    origin().elapsed().as_millis() as u64
}

thread_local! {
    static SLOT: Arc<Slot> = register();
    /// Nested commands (a script's) keep the outer command's start.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

fn register() -> Arc<Slot> {
    // SAFETY: gettid has no preconditions and cannot fail.
    let tid = unsafe { libc::gettid() };
    let slot = Arc::new(Slot {
        tid,
        name: std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .to_string(),
        started: AtomicU64::new(0),
        command: AtomicU64::new(0),
        reported: AtomicU64::new(0),
    });
    slots().lock().push(slot.clone());
    slot
}

/// Marks the calling thread as inside a command until dropped.
pub struct Busy(());

/// Note that the calling thread is starting a command (None while the watchdog is off).
#[inline]
pub fn busy() -> Option<Busy> {
    if PERIOD_MS.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let outer = DEPTH.with(|d| {
        d.set(d.get() + 1);
        d.get() == 1
    });
    if outer {
        SLOT.with(|s| {
            s.command.fetch_add(1, Ordering::Relaxed);
            s.started.store(now_ms() + 1, Ordering::Release);
        });
    }
    Some(Busy(()))
}

impl Drop for Busy {
    fn drop(&mut self) {
        let outer = DEPTH.with(|d| {
            d.set(d.get().saturating_sub(1));
            d.get() == 0
        });
        if outer {
            SLOT.with(|s| s.started.store(0, Ordering::Release));
        }
    }
}

/// Apply `watchdog-period` (ms; 0 turns it off) with the server's `hz`. As Redis, a period
/// shorter than two cron periods is raised to that; returns the period in effect.
pub fn apply(period_ms: u64, hz: u64) -> u64 {
    let tick = 1000 / hz.clamp(1, 500);
    TICK_MS.store((tick / 2).max(5), Ordering::Relaxed);
    let period = if period_ms == 0 {
        0
    } else {
        period_ms.max(tick * 2)
    };
    if period > 0 {
        start();
    }
    PERIOD_MS.store(period, Ordering::Relaxed);
    period
}

// --- the capture, shared by the signal handler and the watchdog thread ------------------------

const MAX_FRAMES: usize = 64;
static FRAMES: [AtomicUsize; MAX_FRAMES] = [const { AtomicUsize::new(0) }; MAX_FRAMES];
static FRAME_COUNT: AtomicUsize = AtomicUsize::new(0);
/// 0: no capture asked; 1: asked of thread `CAPTURE_TID`; 2: its frames are in `FRAMES`.
static CAPTURE: AtomicU8 = AtomicU8::new(0);
static CAPTURE_TID: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_sigalrm(_: libc::c_int) {
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() };
    if CAPTURE.load(Ordering::Acquire) != 1 || CAPTURE_TID.load(Ordering::Relaxed) != me {
        return;
    }
    let mut n = 0;
    // SAFETY: the unwinder is only read from here (no allocation, no lock: the walk of the
    // current stack through the unwind tables, which the watchdog thread loaded before asking
    // for this capture); the closure stores into atomics.
    unsafe {
        backtrace::trace_unsynchronized(|frame| {
            FRAMES[n].store(frame.ip() as usize, Ordering::Relaxed);
            n += 1;
            n < MAX_FRAMES
        });
    }
    FRAME_COUNT.store(n, Ordering::Relaxed);
    CAPTURE.store(2, Ordering::Release);
}

fn install_handler() {
    // SAFETY: a zeroed sigaction is a valid start; the handler is an `extern "C" fn(c_int)`
    // as a handler without SA_SIGINFO takes; SA_RESTART keeps interrupted system calls going.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        let handler: extern "C" fn(libc::c_int) = on_sigalrm;
        action.sa_sigaction = handler as *const () as usize;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGALRM, &action, std::ptr::null_mut());
    }
}

/// Start the watchdog thread once.
fn start() {
    static STARTED: AtomicBool = AtomicBool::new(false);
    if STARTED.swap(true, Ordering::AcqRel) {
        return;
    }
    install_handler();
    // The first walk loads the unwinder's tables; done here, not first in a signal handler.
    backtrace::trace(|_| false);
    let _ = std::thread::Builder::new()
        .name("watchdog".into())
        .spawn(watch);
}

fn watch() {
    loop {
        std::thread::sleep(Duration::from_millis(TICK_MS.load(Ordering::Relaxed)));
        let period = PERIOD_MS.load(Ordering::Relaxed);
        if period == 0 {
            continue;
        }
        let now = now_ms() + 1;
        let stalled: Vec<(Arc<Slot>, u64)> = slots()
            .lock()
            .iter()
            .filter_map(|s| {
                let started = s.started.load(Ordering::Acquire);
                let command = s.command.load(Ordering::Relaxed);
                (started != 0
                    && now.saturating_sub(started) >= period
                    && s.reported.load(Ordering::Relaxed) != command)
                    .then(|| (s.clone(), command))
            })
            .collect();
        for (slot, command) in stalled {
            slot.reported.store(command, Ordering::Relaxed);
            if let Some(frames) = capture(slot.tid) {
                report(&slot.name, &frames);
            }
        }
    }
}

/// Interrupt thread `tid` and wait (up to a second) for its frames.
fn capture(tid: i32) -> Option<Vec<usize>> {
    CAPTURE_TID.store(tid, Ordering::Relaxed);
    CAPTURE.store(1, Ordering::Release);
    // SAFETY: tgkill sends SIGALRM to one thread of this process; our handler is installed.
    let sent = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, libc::SIGALRM) } == 0;
    let deadline = Instant::now() + Duration::from_secs(1);
    while sent && Instant::now() < deadline {
        if CAPTURE.load(Ordering::Acquire) == 2 {
            let n = FRAME_COUNT.load(Ordering::Relaxed);
            let frames = FRAMES[..n]
                .iter()
                .map(|f| f.load(Ordering::Relaxed))
                .collect();
            CAPTURE.store(0, Ordering::Release);
            return Some(frames);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    CAPTURE.store(0, Ordering::Release);
    None
}

fn report(thread: &str, frames: &[usize]) {
    // The marker goes out first, on its own: symbolising the frames reads the binary's debug
    // information, which takes up to seconds the first time (more on a loaded machine), and
    // Redis's signal handler writes it at once (integration/replication's EINTR test expects
    // it while the stalled load is still running).
    crate::log::write_crash("\n--- WATCHDOG TIMER EXPIRED ---\n", true);
    let mut text = format!("Backtrace of thread {thread}:\n");
    for (i, &ip) in frames.iter().enumerate() {
        let mut named = false;
        backtrace::resolve(ip as *mut std::ffi::c_void, |sym| {
            let name = sym
                .name()
                .map(|n| format!("{n:#}"))
                .unwrap_or_else(|| "<unknown>".into());
            text.push_str(&format!("{i:4}: {name}"));
            if let (Some(file), Some(line)) = (sym.filename(), sym.lineno()) {
                text.push_str(&format!(" at {}:{line}", file.display()));
            }
            text.push('\n');
            named = true;
        });
        if !named {
            text.push_str(&format!("{i:4}: {ip:#x}\n"));
        }
    }
    text.push_str("--------\n");
    crate::log::write_crash(&text, true);
}
