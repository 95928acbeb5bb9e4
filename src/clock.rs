//! The server's clock: Unix milliseconds as commands, expiry and persistence see them.
//!
//! The wall clock is read once per cron tick and otherwise derived from the monotonic clock
//! the dispatcher already reads for each command ([`unix_ms_at`]). Kept apart from
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

/// The monotonic instant the wall clock is derived from (see [`unix_ms_at`]).
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

/// Measure the wall clock against the monotonic one again, so [`unix_ms_at`] follows a wall
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
}

/// Unix milliseconds at the monotonic instant `at`, without reading the wall clock: the
/// dispatcher reads one clock per command (for the command's duration) and derives the time
/// expiry is judged by from it. Reading `SystemTime` as well cost a third clock call per
/// command, ~3% of a pipelined GET. Between cron ticks the two clocks advance together; a
/// stepped wall clock is picked up at the next tick.
pub fn unix_ms_at(at: Instant) -> i64 {
    let base = WALL_AT_ORIGIN_NS.load(Ordering::Relaxed);
    if base == i64::MIN {
        resync_wall_clock();
        return unix_ms();
    }
    // In i64 (292 years of nanoseconds): the u128 of `as_nanos` cost a wide multiply and a
    // library division per command.
    let since = at.saturating_duration_since(clock_origin());
    let ns = since.as_secs() as i64 * 1_000_000_000 + i64::from(since.subsec_nanos());
    (base + ns) / 1_000_000
}

thread_local! {
    /// The monotonic instant of the last command this thread ran (see [`note_command_start`]).
    static RECENT: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
}

/// The dispatcher's clock reading for a command, kept for [`recent_instant`].
#[inline]
pub fn note_command_start(at: Instant) {
    RECENT.with(|r| r.set(Some(at)));
}

/// A monotonic instant no later than now: when this thread last started a command (or now,
/// if it has run none). Behind the true time by at most as long as the thread went without
/// running a command, so it serves bookkeeping counted in seconds (a connection's last
/// input) without a clock read per request.
#[inline]
pub fn recent_instant() -> Instant {
    RECENT.with(|r| r.get()).unwrap_or_else(Instant::now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recent_instant_follows_the_commands_started() {
        let t = Instant::now();
        note_command_start(t);
        assert_eq!(recent_instant(), t);
        let later = t + std::time::Duration::from_millis(5);
        note_command_start(later);
        assert_eq!(recent_instant(), later);
        let other = std::thread::spawn(recent_instant).join().expect("thread");
        assert!(other >= t, "a thread with no command reads the clock");
    }

    /// The derived time is never behind the wall clock read just before it (a PTTL computed
    /// from it would exceed the TTL a client just set).
    #[test]
    fn derived_time_is_not_behind_the_wall_clock() {
        resync_wall_clock();
        for _ in 0..20_000 {
            let before = unix_ms();
            let derived = unix_ms_at(Instant::now());
            let after = unix_ms();
            assert!(
                derived >= before && derived <= after + 1,
                "{before} {derived} {after}"
            );
        }
    }
}
