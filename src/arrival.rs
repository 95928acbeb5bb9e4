//! Arrival order across connections: requests that reach an idle server together run in the
//! order they arrived, as Redis's single thread runs them.
//!
//! Redis serves the connections an event-loop wake-up reports one after another, in the order
//! the kernel reported them, so a request sent on one connection and, a few microseconds later,
//! another sent on a second connection run in that order. Clients rely on it without knowing:
//! Redis's own tests send UNSUBSCRIBE on one connection and PUBLISH on another without waiting
//! in between, or EXEC on one and a push that serves a blocked client on another. Podium's
//! worker threads can split such a pair: the I/O driver wakes both connections' tasks in
//! arrival order, and another worker takes the second one and runs it while the first still
//! waits to be picked up (measured: a WATCH/EXEC lost to the later push 227 times in 1,000
//! when the two were sent back to back; 0 in 4,000 with this module).
//!
//! How:
//! - every readiness wake of a client socket draws a number from one global counter
//!   ([`Stamp`], installed as the socket's read waker), so numbers follow the driver's order;
//!   the wake is noted in a ring of recent wakes until a read consumes it;
//! - wakes form bursts: a burst starts with a wake that finds no request outstanding (woken
//!   and not yet past its first command), and goes on while any is;
//! - the read that consumes a wake publishes its number in its thread's slot ([`Ticket`])
//!   until the first request of that read has run;
//! - before its first request runs, a connection waits while an earlier wake of its burst is
//!   still queued or being run by another thread, for at most [`WAIT_LIMIT`] after that wake.
//!
//! This is an idle server's guarantee, which is where clients and tests observe it: only the
//! first [`BURST_ORDERED`] wakes of a burst are ordered. On a loaded server requests are always
//! outstanding, bursts do not end, and each thread takes the next request without waiting, as
//! before: ordering them all would serialise the threads, and requests that arrive together on
//! a busy server can not be told apart from requests that arrived the other way round. Nothing
//! is held while waiting. With one worker thread the runtime already serves wake-ups in order
//! and none of this is switched on.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};

/// How long an earlier request can hold a later one back, from the earlier one's wake.
pub const WAIT_LIMIT: Duration = Duration::from_millis(2);

/// How many wakes at the start of a burst are kept in order.
pub const BURST_ORDERED: u64 = 2;

/// Recent wakes by number (number modulo the ring's size): the number while no read has
/// consumed it yet (0 once one has), when it was drawn, and where its burst started.
const RING: usize = 4096;
struct Woken {
    stamp: AtomicU64,
    at: AtomicU64,
    burst: AtomicU64,
}
static RECENT: [Woken; RING] = [const {
    Woken {
        stamp: AtomicU64::new(0),
        at: AtomicU64::new(0),
        burst: AtomicU64::new(0),
    }
}; RING];

/// Wakes not yet past their first command (or their socket's end).
static OUTSTANDING: AtomicI64 = AtomicI64::new(0);
/// The first wake of the current burst.
static BURST_START: AtomicU64 = AtomicU64::new(0);

/// Slots for the threads that run connections (worker threads, and the threads that take a
/// worker's place after `block_in_place`). Threads beyond this share slots, which only weakens
/// the ordering between the two sharing one, never correctness.
const SLOTS: usize = 64;

#[repr(align(64))]
struct Slot {
    /// The number of the wake whose first request this thread is running (0: none).
    stamp: AtomicU64,
    /// When that wake was drawn, in nanoseconds since [`epoch`].
    at: AtomicU64,
}

static IN_FLIGHT: [Slot; SLOTS] = [const {
    Slot {
        stamp: AtomicU64::new(0),
        at: AtomicU64::new(0),
    }
}; SLOTS];
static SLOTS_USED: AtomicUsize = AtomicUsize::new(0);
static NEXT_STAMP: AtomicU64 = AtomicU64::new(1);
static ENABLED: AtomicBool = AtomicBool::new(false);

thread_local! {
    static MY_SLOT: usize = SLOTS_USED.fetch_add(1, Ordering::Relaxed) % SLOTS;
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ns() -> u64 {
    epoch().elapsed().as_nanos() as u64
}

/// Switch ordering on (the server does, when it runs more than one worker thread).
pub fn enable(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// A socket's read waker: numbers each wake, then wakes the connection's task.
#[derive(Default)]
pub struct Stamp {
    /// The task to wake (the one that last polled the socket for reading).
    task: Mutex<Option<Waker>>,
    /// The number of the first wake not yet consumed by a read (0: none).
    at: AtomicU64,
}

impl Stamp {
    /// A waker for the socket that numbers each wake and passes it on to the task.
    pub fn waker(self: &Arc<Self>) -> Waker {
        Waker::from(self.clone())
    }

    /// Remember the task to wake; cheap when it is the same task as last time.
    pub fn register(&self, task: &Waker) {
        let mut slot = self.task.lock();
        match slot.as_ref() {
            Some(w) if w.will_wake(task) => {}
            _ => *slot = Some(task.clone()),
        }
    }

    /// Take the unconsumed wake, if any, off the ring; `claim` runs first, so that a waiter
    /// never sees the wake neither queued nor claimed.
    fn consume(&self, claim: impl FnOnce(u64, u64)) -> Option<(u64, u64, u64)> {
        let stamp = self.at.swap(0, Ordering::AcqRel);
        if stamp == 0 {
            return None;
        }
        let w = &RECENT[stamp as usize % RING];
        let (at, burst) = (
            w.at.load(Ordering::Relaxed),
            w.burst.load(Ordering::Relaxed),
        );
        claim(stamp, at);
        let _ = w
            .stamp
            .compare_exchange(stamp, 0, Ordering::AcqRel, Ordering::Relaxed);
        Some((stamp, at, burst))
    }

    /// After a read that returned data: the ticket for the wake it consumed, if there was one.
    pub fn take_ticket(&self) -> Option<Ticket> {
        let slot = MY_SLOT.with(|s| *s);
        let (stamp, at, burst) = self.consume(|stamp, at| {
            IN_FLIGHT[slot].at.store(at, Ordering::Relaxed);
            IN_FLIGHT[slot].stamp.store(stamp, Ordering::Release);
        })?;
        Some(Ticket {
            slot,
            stamp,
            at,
            burst,
        })
    }

    /// The socket is going away: a wake no read consumed stops counting as outstanding.
    pub fn retire(&self) {
        if self.consume(|_, _| {}).is_some() {
            OUTSTANDING.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Wake for Stamp {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // The earliest unconsumed wake is the one that counts (its data arrived first).
        if self.at.load(Ordering::Relaxed) == 0 {
            let n = NEXT_STAMP.fetch_add(1, Ordering::Relaxed);
            if self
                .at
                .compare_exchange(0, n, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                let burst = if OUTSTANDING.fetch_add(1, Ordering::AcqRel) == 0 {
                    BURST_START.store(n, Ordering::Release);
                    n
                } else {
                    BURST_START.load(Ordering::Acquire)
                };
                let w = &RECENT[n as usize % RING];
                w.at.store(now_ns(), Ordering::Relaxed);
                w.burst.store(burst, Ordering::Relaxed);
                w.stamp.store(n, Ordering::Release);
            }
        }
        if let Some(w) = self.task.lock().as_ref() {
            w.wake_by_ref();
        }
    }
}

/// A consumed wake, held until the first request of its read has run.
pub struct Ticket {
    slot: usize,
    stamp: u64,
    at: u64,
    burst: u64,
}

impl Ticket {
    /// Wait while an earlier wake of this one's burst is still queued or being run by another
    /// thread (see the module note), at most [`WAIT_LIMIT`] after that wake.
    pub fn wait_turn(&self) {
        if self.stamp.saturating_sub(self.burst) >= BURST_ORDERED || self.burst == 0 {
            return;
        }
        let limit = WAIT_LIMIT.as_nanos() as u64;
        let mut spins = 0u32;
        loop {
            // Read each time: the thread running the earlier request may have just taken its
            // first ticket, and with it a slot.
            let used = SLOTS_USED.load(Ordering::Relaxed).min(SLOTS);
            let now = now_ns();
            let fresh = |at: u64| now.saturating_sub(at) <= limit;
            if !fresh(self.at) {
                // Everything earlier was woken before this, so it is all past the limit too.
                return;
            }
            let queued = (self.burst..self.stamp).any(|n| {
                let w = &RECENT[n as usize % RING];
                w.stamp.load(Ordering::Acquire) == n && fresh(w.at.load(Ordering::Relaxed))
            });
            let running = IN_FLIGHT[..used].iter().any(|s| {
                let other = s.stamp.load(Ordering::Acquire);
                other >= self.burst && other < self.stamp && fresh(s.at.load(Ordering::Relaxed))
            });
            if !queued && !running {
                return;
            }
            // A short spin covers an earlier request that is running; past that, the thread
            // gives its core away between looks (on a machine with few cores the client or the
            // thread that has the earlier request may be waiting for it).
            spins += 1;
            if spins > 16 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let _ = IN_FLIGHT[self.slot].stamp.compare_exchange(
            self.stamp,
            0,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
        OUTSTANDING.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbering is process-wide: these tests take turns, each starting from an idle
    /// server (nothing outstanding).
    static SERIAL: Mutex<()> = Mutex::new(());

    fn stamps(n: usize) -> Vec<Arc<Stamp>> {
        (0..n).map(|_| Arc::new(Stamp::default())).collect()
    }

    struct Flag(std::sync::atomic::AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_wake_is_numbered_once_and_passed_on() {
        let _turn = SERIAL.lock();
        let stamp = Arc::new(Stamp::default());
        let woken = Arc::new(Flag(false.into()));
        stamp.register(&Waker::from(woken.clone()));
        assert!(stamp.take_ticket().is_none(), "no wake, no ticket");
        let w = stamp.waker();
        w.wake_by_ref();
        let first = stamp.at.load(Ordering::SeqCst);
        w.wake_by_ref();
        assert_eq!(
            stamp.at.load(Ordering::SeqCst),
            first,
            "the earliest wake counts"
        );
        assert!(woken.0.load(Ordering::SeqCst));
        let t = stamp.take_ticket().expect("a ticket for the wake");
        assert_eq!((t.stamp, t.burst), (first, first), "it starts a burst");
        assert!(stamp.take_ticket().is_none(), "consumed");
        drop(t);
        assert_eq!(OUTSTANDING.load(Ordering::SeqCst), 0);
    }

    /// The later of two requests woken together waits while the earlier is queued (not yet
    /// read) and while another thread runs it, and goes on once it has run.
    #[test]
    fn a_later_request_waits_for_an_earlier_one_of_its_burst() {
        let _turn = SERIAL.lock();
        let s = stamps(2);
        for x in &s {
            x.waker().wake_by_ref();
        }
        let late = s[1].take_ticket().expect("ticket");
        let early = s[0].clone();
        let other = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_micros(20));
            let t = early.take_ticket();
            std::thread::sleep(Duration::from_micros(20));
            let done = Instant::now();
            drop(t);
            done
        });
        late.wait_turn();
        let went_on = Instant::now();
        let done = other.join().expect("other thread");
        // Went on once the earlier one had run, or once its wake was WAIT_LIMIT old (when this
        // machine's scheduler let the other thread's short sleeps overrun that).
        let early_at = RECENT[(late.stamp - 1) as usize % RING]
            .at
            .load(Ordering::SeqCst);
        let waited_out = went_on.duration_since(epoch()).as_nanos() as u64 - early_at
            > WAIT_LIMIT.as_nanos() as u64;
        assert!(
            went_on >= done || waited_out,
            "went on {:?} before the earlier request had run ({} ns after its wake, burst {} stamp {})",
            done.duration_since(went_on),
            went_on.duration_since(epoch()).as_nanos() as u64 - early_at,
            late.burst,
            late.stamp
        );
        drop(late);
        assert_eq!(OUTSTANDING.load(Ordering::SeqCst), 0);
    }

    /// Deep into a burst (a busy server), and past the limit, nobody waits.
    #[test]
    fn a_busy_server_and_a_stale_wake_do_not_hold_anyone_back() {
        let _turn = SERIAL.lock();
        let s = stamps(BURST_ORDERED as usize + 1);
        for x in &s {
            x.waker().wake_by_ref();
        }
        let last = s[BURST_ORDERED as usize].take_ticket().expect("ticket");
        let start = Instant::now();
        last.wait_turn();
        assert!(start.elapsed() < WAIT_LIMIT, "waited deep into a burst");
        drop(last);
        for x in &s {
            x.retire();
        }
        assert_eq!(OUTSTANDING.load(Ordering::SeqCst), 0);

        let s = stamps(2);
        for x in &s {
            x.waker().wake_by_ref();
        }
        std::thread::sleep(WAIT_LIMIT * 2);
        let late = s[1].take_ticket().expect("ticket");
        let start = Instant::now();
        late.wait_turn();
        assert!(start.elapsed() < WAIT_LIMIT, "waited for a stale wake");
        drop(late);
        s[0].retire();
        assert_eq!(OUTSTANDING.load(Ordering::SeqCst), 0);
    }
}
