//! Replies written together before a worker thread sleeps, as Redis's `beforeSleep` writes
//! every client's replies after running all the commands an event-loop wake-up reported.
//!
//! A connection that ran its batch waits for its turn ([`WriteTurn`]) before writing; the
//! runtime's park hook calls [`release`] once the ready connections have all run, and they
//! write one after the other. Writing each reply as soon as its command ran put the next
//! client's command between two writes, so a client thread (a load generator's one thread)
//! woken by the first reply had gone back to sleep before the second came, and each reply paid
//! for a full wake-up of it, charged to the sender. Anything that takes a worker's role away
//! from its thread (`block_in_place`) goes through [`block_in_place`], which calls
//! [`hand_off`] first: the waiting connections are
//! this thread's and go on at once, and the thread writes without waiting from then on (a
//! thread that is no longer a worker does not park as one) until it parks as a worker again.
//!
//! Most connections do not wait at all: they leave their replies here ([`defer`], a
//! [`DeferredWrite`]) and go back to waiting for input, and the park hook writes them. Waking
//! each connection for its turn cost a second poll of its task per batch, about 400
//! instructions per request at one request per round trip; a connection is woken only when
//! the hook could not write everything (a full socket, an error) or, under `appendfsync
//! always`, waits for its turn as above since its replies wait for the fsync first.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

/// Whether replies wait for their turn: with one worker thread (see `server::run`).
static DEFER_WRITES: AtomicBool = AtomicBool::new(false);

/// Replies a connection left to be written at its worker's turn (see [`defer`]).
pub(crate) trait DeferredWrite: Send + Sync {
    /// Write them now (the thread's turn came), waking the connection if it has to finish.
    fn write_now(&self);
}

thread_local! {
    /// Connections whose replies wait for this thread's turn to write.
    static WAITING: RefCell<Vec<Waker>> = const { RefCell::new(Vec::new()) };
    /// Replies left for this thread's turn, written by the park hook itself.
    static DEFERRED: RefCell<Vec<std::sync::Arc<dyn DeferredWrite>>> =
        const { RefCell::new(Vec::new()) };
    /// This thread gave its worker role away (see [`hand_off`]) and has not parked as a worker
    /// since: nothing waits here.
    static HANDED_OFF: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Turn deferred writes on or off (before the runtime starts).
pub(crate) fn set_enabled(on: bool) {
    DEFER_WRITES.store(on, Ordering::Relaxed);
}

#[inline]
pub(crate) fn enabled() -> bool {
    DEFER_WRITES.load(Ordering::Relaxed)
}

/// The runtime's park hook: this thread is a worker about to sleep.
pub(crate) fn parking() {
    HANDED_OFF.with(|h| h.set(false));
    release();
}

/// This thread is about to give its worker role to another thread (`block_in_place`).
fn hand_off() {
    HANDED_OFF.with(|h| h.set(true));
    release();
}

/// tokio's `block_in_place`, after [`hand_off`]: every caller that gives its worker's role
/// away goes through here, so no connection is left waiting on a thread that stops parking as
/// a worker.
pub(crate) fn block_in_place<R>(f: impl FnOnce() -> R) -> R {
    hand_off();
    tokio::task::block_in_place(f)
}

/// Whether replies left now would wait for this thread's turn: writes are deferred and this
/// thread is a worker that will park (not one that handed its role away).
#[inline]
pub(crate) fn deferring() -> bool {
    enabled() && !HANDED_OFF.with(|h| h.get())
}

/// Leave replies for this thread's turn (only when [`deferring`]).
pub(crate) fn defer(w: std::sync::Arc<dyn DeferredWrite>) {
    DEFERRED.with(|d| d.borrow_mut().push(w));
}

/// Every connection waiting on this thread goes on to write.
fn release() {
    // Taken out of the thread's list before writing: a write may wake a connection, never
    // run one, but the list is not held across foreign code.
    let mut deferred = DEFERRED.with(|d| std::mem::take(&mut *d.borrow_mut()));
    for w in deferred.drain(..) {
        w.write_now();
    }
    DEFERRED.with(|d| {
        let mut d = d.borrow_mut();
        if d.is_empty() {
            *d = deferred;
        }
    });
    let mut waiting = WAITING.with(|w| std::mem::take(&mut *w.borrow_mut()));
    if waiting.is_empty() {
        return;
    }
    for waker in waiting.drain(..) {
        waker.wake();
    }
    // The list's room is kept for the next round.
    WAITING.with(|w| {
        let mut w = w.borrow_mut();
        if w.is_empty() {
            *w = waiting;
        }
    });
}

/// Waits once for the thread's turn to write: Pending until [`release`] (or any other wake of
/// the connection, such as more input or a kill) wakes it.
#[derive(Default)]
pub(crate) struct WriteTurn {
    waited: bool,
}

impl std::future::Future for WriteTurn {
    type Output = ();

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.waited || HANDED_OFF.with(|h| h.get()) {
            return Poll::Ready(());
        }
        self.waited = true;
        WAITING.with(|w| w.borrow_mut().push(cx.waker().clone()));
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    struct Count(AtomicUsize);
    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A waker that counts its wakes, and the count.
    fn counting_waker() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }

    /// A turn is pending until released, released once, and ready when polled again.
    #[test]
    fn a_turn_waits_for_release() {
        let (count, waker) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        let mut turn = std::pin::pin!(WriteTurn::default());
        assert!(turn.as_mut().poll(&mut cx).is_pending());
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
        parking();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        parking();
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "woken once");
        assert!(turn.as_mut().poll(&mut cx).is_ready());
    }

    /// The counter also stands for a connection's deferred replies: it counts their writes.
    impl DeferredWrite for Count {
        fn write_now(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Deferred replies are written once, at the park hook or at a hand-off, and a thread
    /// that handed its role away takes none until it parks as a worker again.
    #[test]
    fn deferred_replies_are_written_at_the_turn() {
        let (rec, _) = counting_waker();
        defer(rec.clone());
        defer(rec.clone());
        assert_eq!(
            rec.0.load(Ordering::SeqCst),
            0,
            "nothing written before the turn"
        );
        parking();
        assert_eq!(rec.0.load(Ordering::SeqCst), 2);
        parking();
        assert_eq!(rec.0.load(Ordering::SeqCst), 2, "each written once");
        defer(rec.clone());
        hand_off();
        assert_eq!(rec.0.load(Ordering::SeqCst), 3, "written by the hand-off");
        assert!(
            HANDED_OFF.with(|h| h.get()),
            "a thread that handed off writes itself"
        );
        parking();
        assert!(!HANDED_OFF.with(|h| h.get()), "a worker again");
    }

    /// A thread that handed its worker role away releases what waits on it and does not make
    /// anyone wait again until it parks as a worker.
    #[test]
    fn a_thread_that_handed_off_does_not_defer() {
        let (count, waker) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        let mut waiting = std::pin::pin!(WriteTurn::default());
        assert!(waiting.as_mut().poll(&mut cx).is_pending());
        hand_off();
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "released by the hand-off"
        );
        let mut after = std::pin::pin!(WriteTurn::default());
        assert!(
            after.as_mut().poll(&mut cx).is_ready(),
            "no waiting once handed off"
        );
        parking();
        let mut again = std::pin::pin!(WriteTurn::default());
        assert!(again.as_mut().poll(&mut cx).is_pending(), "a worker again");
        parking();
        assert!(again.as_mut().poll(&mut cx).is_ready());
    }
}
