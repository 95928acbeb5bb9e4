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

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

/// Whether replies wait for their turn: with one worker thread (see `server::run`).
static DEFER_WRITES: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Connections whose replies wait for this thread's turn to write.
    static WAITING: RefCell<Vec<Waker>> = const { RefCell::new(Vec::new()) };
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

/// Every connection waiting on this thread goes on to write.
fn release() {
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
