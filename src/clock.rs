//! The server's clock: Unix milliseconds as commands, expiry and persistence see them.
//!
//! The wall clock is read once per cron tick and otherwise derived from the monotonic clock
//! the dispatcher already reads for each command ([`Stamp::unix_ms`]). Kept apart from
//! `server` so that lower layers (keyspace, persistence, commands) can tell the time without
//! depending on the server's state.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

/// Current Unix time in milliseconds.
pub fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The monotonic instant the wall clock is derived from (see [`Stamp::unix_ms`]).
fn clock_origin() -> Instant {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// Unix nanoseconds at `clock_origin()`, as last measured by [`resync_wall_clock`]. Kept in
/// nanoseconds: two truncations (the wall reading's and the monotonic offset's) put the derived
/// time one unit behind the wall clock near each boundary, which in milliseconds made a key set
/// to expire at a client's `now + 10000` show a PTTL of 10001 (unit/type/string, GETEX PXAT);
/// in microseconds it still happened once per millisecond for a microsecond.
static WALL_AT_ORIGIN_NS: AtomicI64 = AtomicI64::new(i64::MIN);

fn unix_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Measure the wall clock against the monotonic one again, so [`Stamp::unix_ms`] follows a wall
/// clock that was stepped. Called by the cron on every tick.
pub fn resync_wall_clock() {
    let origin = clock_origin();
    // The monotonic clock first: the wall reading after it puts the base ahead by the time
    // between the two reads, never behind. That time is normally well under a microsecond, but
    // a thread preempted between the reads (a loaded machine) would put the clock milliseconds
    // ahead until the next tick, and then step it back: a key set with PX 1 during that tick
    // was still alive 2 ms later (unit/expire, "SCAN: Lazy-expire ..."). So the reads are
    // bracketed by a second monotonic one and the tightest of a few tries is kept.
    let mut best: Option<(i64, i64)> = None; // (window, base)
    for _ in 0..8 {
        let before = Instant::now().saturating_duration_since(origin).as_nanos() as i64;
        let wall = unix_ns();
        let after = Instant::now().saturating_duration_since(origin).as_nanos() as i64;
        let window = after - before;
        if best.is_none_or(|(w, _)| window < w) {
            best = Some((window, wall - before));
        }
        if window < 20_000 {
            break;
        }
    }
    if let Some((_, base)) = best {
        WALL_AT_ORIGIN_NS.store(base, Ordering::Relaxed);
    }
    tsc::recalibrate();
}

/// Now, for the dispatcher's per-command readings (a command's start and its duration): from
/// the CPU's time-stamp counter where the kernel itself keeps time with it (see [`tsc`]),
/// otherwise from the system's monotonic clock. The two are the same clock within a
/// microsecond; the counter costs a third as much to read (18 ns for a start and an end
/// against 44 on this machine), and two clock reads were 5-7% of a pipelined GET's CPU.
#[inline]
pub fn command_stamp() -> Stamp {
    Stamp(tsc::now_ns().unwrap_or_else(monotonic_ns))
}

/// A reading of the dispatcher's clock ([`command_stamp`]): nanoseconds since the clock's
/// origin. A plain integer rather than an `Instant` because a command takes four readings and
/// conversions (its start, its Unix time, its end, its duration), and each `Instant`
/// conversion or subtraction was ~40 instructions, 4% of a pipelined GET.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stamp(u64);

impl Stamp {
    /// Microseconds from this reading to now.
    #[inline]
    pub fn elapsed_us(self) -> u64 {
        command_stamp().0.saturating_sub(self.0) / 1_000
    }

    /// Time from this reading to now.
    #[cfg(test)]
    pub fn elapsed(self) -> std::time::Duration {
        std::time::Duration::from_nanos(command_stamp().0.saturating_sub(self.0))
    }

    /// Unix milliseconds at this reading, without reading the wall clock: the dispatcher
    /// reads one clock per command (for the command's duration) and derives the time expiry
    /// is judged by from it. Reading `SystemTime` as well cost a third clock call per
    /// command, ~3% of a pipelined GET. Between cron ticks the two clocks advance together; a
    /// stepped wall clock is picked up at the next tick.
    #[inline]
    pub fn unix_ms(self) -> i64 {
        let base = WALL_AT_ORIGIN_NS.load(Ordering::Relaxed);
        if base == i64::MIN {
            resync_wall_clock();
            return unix_ms();
        }
        (base + self.0 as i64) / 1_000_000
    }

    /// The reading the monotonic instant `at` corresponds to.
    #[cfg(test)]
    pub fn at(at: Instant) -> Stamp {
        Stamp(at.saturating_duration_since(clock_origin()).as_nanos() as u64)
    }

    /// The monotonic instant of this reading.
    pub fn instant(self) -> Instant {
        clock_origin() + std::time::Duration::from_nanos(self.0)
    }
}

/// Nanoseconds since [`clock_origin`] by the system's monotonic clock.
fn monotonic_ns() -> u64 {
    Instant::now()
        .saturating_duration_since(clock_origin())
        .as_nanos() as u64
}

/// The time-stamp counter as a clock: nanoseconds since [`clock_origin`] are
/// `base_ns + (counter - base_tsc) * ns_per_tick`, with the base taken again against the
/// monotonic clock on every cron tick ([`recalibrate`], from [`resync_wall_clock`]) and the
/// rate measured over about a second, so the mapping follows the monotonic clock (and NTP's
/// slewing of it) to well under a microsecond. The counter is used only where the kernel
/// trusts it (x86-64, `constant_tsc` and `nonstop_tsc`, and `tsc` as the kernel's clock
/// source: the counter runs at one rate on every core, through sleep states), and only once a
/// rate has been measured; until then, elsewhere, or after a recalibration finds the mapping
/// off by more than 100 us (a migrated VM, a stepped counter; the rate is then measured again,
/// and the third time the counter is given up), readers use the monotonic clock.
mod tsc {
    use std::sync::atomic::{fence, AtomicU64, Ordering};

    /// Seqlock over the three values below: odd while the cron rewrites them.
    static SEQ: AtomicU64 = AtomicU64::new(0);
    static BASE_TSC: AtomicU64 = AtomicU64::new(0);
    static BASE_NS: AtomicU64 = AtomicU64::new(0);
    /// Nanoseconds per tick in 32.32 fixed point; 0 while the counter is not used.
    static NS_PER_TICK: AtomicU64 = AtomicU64::new(0);

    /// The calibration's own state (one writer at a time).
    struct Calibration {
        /// Whether the counter can be used at all (decided once).
        usable: Option<bool>,
        /// The reading the current rate is being measured from: (counter, ns).
        since: Option<(u64, u64)>,
        /// Recalibrations that found the mapping off, and whether the counter was given up on
        /// (after three).
        failures: u32,
        disabled: bool,
    }

    static CALIBRATION: parking_lot::Mutex<Calibration> = parking_lot::Mutex::new(Calibration {
        usable: None,
        since: None,
        failures: 0,
        disabled: false,
    });

    /// The rate is measured over at least this long (the first time: 50 ms, for a rate a
    /// server can use soon after it starts), then again every second.
    const FIRST_WINDOW_NS: u64 = 50_000_000;
    const WINDOW_NS: u64 = 1_000_000_000;
    /// A recalibration that finds the mapping further off than this falls back to the monotonic
    /// clock and measures the rate again.
    const MAX_ERROR_NS: u64 = 100_000;

    #[cfg(target_arch = "x86_64")]
    #[inline]
    fn read() -> u64 {
        // SAFETY: RDTSC reads a counter into registers; it has no memory effects and is
        // available on every x86-64 CPU. Covered by `tsc_instants_follow_the_monotonic_clock`.
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    #[cfg(not(target_arch = "x86_64"))]
    #[inline]
    fn read() -> u64 {
        0
    }

    fn usable() -> bool {
        if !cfg!(target_arch = "x86_64") {
            return false;
        }
        let flags = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let has = |flag: &str| flags.split_whitespace().any(|w| w == flag);
        let source = std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .unwrap_or_default();
        has("constant_tsc") && has("nonstop_tsc") && source.trim() == "tsc"
    }

    /// Nanoseconds since the clock's origin by the counter, or None where it is not used.
    #[inline]
    pub(super) fn now_ns() -> Option<u64> {
        loop {
            let seq = SEQ.load(Ordering::Acquire);
            let rate = NS_PER_TICK.load(Ordering::Relaxed);
            let base_tsc = BASE_TSC.load(Ordering::Relaxed);
            let base_ns = BASE_NS.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if seq & 1 == 1 || SEQ.load(Ordering::Relaxed) != seq {
                std::hint::spin_loop();
                continue;
            }
            if rate == 0 {
                return None;
            }
            return Some(map(read(), base_tsc, base_ns, rate));
        }
    }

    /// Nanoseconds at counter reading `tsc` by the mapping (`base_tsc`, `base_ns`, `rate`).
    #[inline]
    fn map(tsc: u64, base_tsc: u64, base_ns: u64, rate: u64) -> u64 {
        let ticks = tsc.saturating_sub(base_tsc);
        base_ns + ((u128::from(ticks) * u128::from(rate)) >> 32) as u64
    }

    fn publish(base_tsc: u64, base_ns: u64, rate: u64) {
        let seq = SEQ.load(Ordering::Relaxed);
        SEQ.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        BASE_TSC.store(base_tsc, Ordering::Relaxed);
        BASE_NS.store(base_ns, Ordering::Relaxed);
        NS_PER_TICK.store(rate, Ordering::Relaxed);
        SEQ.store(seq + 2, Ordering::Release);
    }

    /// A counter reading and the monotonic time at it: the tightest of a few brackets, with
    /// the time at the bracket's end (the mapping errs ahead, by well under a microsecond).
    /// None when every bracket took longer than `MAX_WINDOW_NS` (the thread was preempted
    /// between the reads): such a pair would put the base or the rate off.
    fn paired_reading() -> Option<(u64, u64)> {
        const MAX_WINDOW_NS: u64 = 2_000;
        let mut best: Option<(u64, u64, u64)> = None; // (window, tsc, ns)
        for _ in 0..4 {
            let before = super::monotonic_ns();
            let tsc = read();
            let after = super::monotonic_ns();
            let window = after.saturating_sub(before);
            if best.is_none_or(|(w, _, _)| window < w) {
                best = Some((window, tsc, after));
            }
        }
        best.filter(|&(w, _, _)| w <= MAX_WINDOW_NS)
            .map(|(_, tsc, ns)| (tsc, ns))
    }

    /// Take the base again (every cron tick) and, once a window has passed, the rate.
    pub(super) fn recalibrate() {
        let mut cal = CALIBRATION.lock();
        if cal.disabled {
            return;
        }
        let usable = *cal.usable.get_or_insert_with(usable);
        if !usable {
            return;
        }
        let Some((tsc, ns)) = paired_reading() else {
            return;
        };
        let rate = NS_PER_TICK.load(Ordering::Relaxed);
        if rate != 0 {
            // What the mapping in use says now, against the monotonic clock.
            let mapped = map(
                tsc,
                BASE_TSC.load(Ordering::Relaxed),
                BASE_NS.load(Ordering::Relaxed),
                rate,
            );
            if mapped.abs_diff(ns) > MAX_ERROR_NS {
                // The counter changed rate or jumped (a migrated VM): back to the monotonic
                // clock, and measure the rate again from here. Three times and it stays off.
                cal.failures += 1;
                tracing::warn!(
                    "The CPU's time-stamp counter is {} us off the monotonic clock: command \
                     timing uses the monotonic clock{}.",
                    mapped.abs_diff(ns) / 1000,
                    if cal.failures >= 3 {
                        " from now on"
                    } else {
                        " until it is measured again"
                    }
                );
                cal.disabled = cal.failures >= 3;
                cal.since = Some((tsc, ns));
                publish(0, 0, 0);
                return;
            }
        }
        let mut rate = rate;
        let window = if rate == 0 {
            FIRST_WINDOW_NS
        } else {
            WINDOW_NS
        };
        match cal.since {
            Some((since_tsc, since_ns)) if tsc > since_tsc => {
                if ns >= since_ns + window {
                    let measured = (u128::from(ns - since_ns) << 32) / u128::from(tsc - since_tsc);
                    rate = u64::try_from(measured).unwrap_or(0);
                    cal.since = Some((tsc, ns));
                }
            }
            // No reading yet, or the counter went back: measure from here.
            _ => cal.since = Some((tsc, ns)),
        }
        if rate != 0 {
            publish(tsc, ns, rate);
        }
    }

    #[cfg(test)]
    pub(super) fn usable_here() -> bool {
        usable()
    }

    #[cfg(test)]
    pub(super) fn in_use() -> bool {
        NS_PER_TICK.load(Ordering::Relaxed) != 0
    }
}

thread_local! {
    /// The clock reading of the last command this thread ran (see [`note_command_start`]).
    static RECENT: std::cell::Cell<Option<Stamp>> = const { std::cell::Cell::new(None) };
}

/// The dispatcher's clock reading for a command, kept for [`recent_instant`].
#[inline]
pub fn note_command_start(at: Stamp) {
    RECENT.with(|r| r.set(Some(at)));
}

/// A monotonic instant no later than now: when this thread last started a command (or now,
/// if it has run none). Behind the true time by at most as long as the thread went without
/// running a command, so it serves bookkeeping counted in seconds (a connection's last
/// input) without a clock read per request.
#[inline]
pub fn recent_instant() -> Instant {
    RECENT
        .with(|r| r.get())
        .map_or_else(Instant::now, Stamp::instant)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recent_instant_follows_the_commands_started() {
        let t = command_stamp();
        note_command_start(t);
        assert_eq!(recent_instant(), t.instant());
        let later = Stamp(t.0 + 5_000_000);
        note_command_start(later);
        assert_eq!(recent_instant(), later.instant());
        assert_eq!(
            later.instant() - t.instant(),
            std::time::Duration::from_millis(5)
        );
        let other = std::thread::spawn(recent_instant).join().expect("thread");
        assert!(
            other >= t.instant(),
            "a thread with no command reads the clock"
        );
    }

    /// Where the time-stamp counter is used, its instants sit between monotonic readings taken
    /// around them (within a few microseconds), and they do not go backwards in a thread.
    #[test]
    fn tsc_instants_follow_the_monotonic_clock() {
        // Calibrations a window apart give the counter a rate (where it is usable); other
        // tests calibrate too, so this waits for the window rather than counting on it.
        for _ in 0..40 {
            resync_wall_clock();
            if tsc::in_use() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(30));
        }
        let usable = tsc::in_use();
        // Readings up to ~100 ms after a base (the cron's period): a rate off by 0.01% would
        // be 10 us off by then.
        let slack = std::time::Duration::from_micros(5);
        let mut last = command_stamp().instant();
        for round in 0..10 {
            std::thread::sleep(std::time::Duration::from_millis(10));
            for i in 0..2_000 {
                let before = Instant::now();
                let t = command_stamp().instant();
                let after = Instant::now();
                assert!(
                    t + slack >= before && t <= after + slack,
                    "round {round} reading {i}: {before:?} {t:?} {after:?}"
                );
                assert!(t + slack >= last, "round {round} reading {i} went back");
                last = t;
            }
        }
        let start = command_stamp();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let d = start.elapsed();
        let us = start.elapsed_us();
        assert!(us >= 20_000 && us as u128 >= d.as_micros(), "{us} {d:?}");
        assert!(d >= std::time::Duration::from_millis(20), "{d:?}");
        assert!(d < std::time::Duration::from_millis(500), "{d:?}");
        // On x86-64 Linux with a kernel keeping time by the counter (this project's machines),
        // the counter must be in use: otherwise this test would only check the fallback.
        if cfg!(target_arch = "x86_64") && tsc::usable_here() {
            assert!(usable, "the time-stamp counter was not calibrated");
        }
    }

    /// The derived time is never behind the wall clock read just before it (a PTTL computed
    /// from it would exceed the TTL a client just set).
    #[test]
    fn derived_time_is_not_behind_the_wall_clock() {
        resync_wall_clock();
        for _ in 0..20_000 {
            let before = unix_ms();
            let derived = Stamp::at(Instant::now()).unix_ms();
            let after = unix_ms();
            assert!(
                derived >= before && derived <= after + 1,
                "{before} {derived} {after}"
            );
        }
    }
}
