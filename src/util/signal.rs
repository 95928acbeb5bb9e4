//! A one-waiter wake-up with a stored permit: what a connection task waits on for pushes and
//! kills while it also waits for input.
//!
//! `tokio::sync::Notify` does the same job for any number of waiters, and a connection paid
//! for that generality on every pass of its loop: a `Notified` future links itself into the
//! waiter list under a lock when polled and unlinks itself when dropped, about 400
//! instructions per request at one request per round trip (callgrind, GET P=1). Here there is
//! one waiter (the connection's own task), so a flag and the task's waker do: polling is an
//! atomic swap plus, when the flag is clear, a waker compare under an uncontended lock; the
//! future holds nothing, so dropping it is free. A notification with nobody waiting is kept
//! (the flag) for the next wait, as `Notify::notify_one` keeps a permit.

use parking_lot::Mutex;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub(crate) struct Signal {
    /// A notification not yet taken by a wait.
    set: AtomicBool,
    /// The waiting task's waker, kept after a wake so the next wait need not clone it again.
    waker: Mutex<Option<Waker>>,
}

impl Signal {
    /// Wake the waiter, or leave the notification for the next wait.
    pub(crate) fn notify(&self) {
        self.set.store(true, Ordering::Release);
        if let Some(w) = self.waker.lock().as_ref() {
            w.wake_by_ref();
        }
    }

    /// Leave the notification without waking the waiter: its waker, for the caller to wake
    /// later (an eviction round wakes its notices' connections once it is over, see
    /// `client::eviction_round`).
    pub(crate) fn notify_later(&self) -> Option<Waker> {
        self.set.store(true, Ordering::Release);
        self.waker.lock().clone()
    }

    /// Ready once a notification is (or was) given; takes it.
    pub(crate) fn wait(&self) -> Wait<'_> {
        Wait { signal: self }
    }

    /// Forget the waiter's waker (its task is ending), so the task can be freed.
    pub(crate) fn forget_waker(&self) {
        self.waker.lock().take();
    }
}

/// The future of [`Signal::wait`]. Dropping it before it completes loses nothing: a
/// notification given meanwhile stays for the next wait.
pub(crate) struct Wait<'a> {
    signal: &'a Signal,
}

impl Future for Wait<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.signal.poll_wait(cx)
    }
}

impl Signal {
    /// [`Signal::wait`] as a poll function, for a caller that polls it beside other sources
    /// in one `poll_fn` (`connection::serve_client`'s idle wait) rather than in a `select!`.
    pub(crate) fn poll_wait(&self, cx: &mut Context<'_>) -> Poll<()> {
        let s = self;
        if s.set.swap(false, Ordering::AcqRel) {
            return Poll::Ready(());
        }
        {
            let mut w = s.waker.lock();
            match w.as_ref() {
                Some(old) if old.will_wake(cx.waker()) => {}
                _ => *w = Some(cx.waker().clone()),
            }
        }
        // A notification that came before the waker was in place found none to wake: the flag
        // is looked at again now that any later one will find it.
        if s.set.swap(false, Ordering::AcqRel) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    use std::task::Wake;

    struct CountingWaker(AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn poll_once(f: &mut Wait<'_>, waker: &Waker) -> Poll<()> {
        Pin::new(f).poll(&mut Context::from_waker(waker))
    }

    #[test]
    fn a_later_notification_wakes_only_when_its_caller_says() {
        let s = Signal::default();
        let counter = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let waker = Waker::from(counter.clone());
        assert!(poll_once(&mut s.wait(), &waker).is_pending());
        let later = s.notify_later().expect("the waiting task's waker");
        assert_eq!(counter.0.load(Ordering::SeqCst), 0);
        later.wake();
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        assert!(poll_once(&mut s.wait(), &waker).is_ready());
    }

    #[test]
    fn a_notification_before_the_wait_is_kept_once() {
        let s = Signal::default();
        let counter = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let waker = Waker::from(counter.clone());
        s.notify();
        s.notify();
        assert!(poll_once(&mut s.wait(), &waker).is_ready());
        // Two notifications with nobody waiting are one permit, as Notify::notify_one's.
        assert!(poll_once(&mut s.wait(), &waker).is_pending());
    }

    #[test]
    fn a_waiting_task_is_woken_and_a_dropped_wait_loses_nothing() {
        let s = Signal::default();
        let counter = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let waker = Waker::from(counter.clone());
        {
            let mut w = s.wait();
            assert!(poll_once(&mut w, &waker).is_pending());
        }
        s.notify();
        assert_eq!(
            counter.0.load(Ordering::SeqCst),
            1,
            "the registered task is woken"
        );
        // The wait that registered was dropped (a select! took another branch): the
        // notification is still there for the next one.
        assert!(poll_once(&mut s.wait(), &waker).is_ready());
        // Waiting again with the same task does not replace (clone) the kept waker.
        assert!(poll_once(&mut s.wait(), &waker).is_pending());
        assert!(s.waker.lock().as_ref().is_some_and(|w| w.will_wake(&waker)));
        s.forget_waker();
        s.notify();
        assert_eq!(
            counter.0.load(Ordering::SeqCst),
            1,
            "a forgotten waker is not woken"
        );
    }

    #[test]
    fn a_notification_from_another_thread_wakes_the_waiter() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .expect("runtime");
        let s = Arc::new(Signal::default());
        for _ in 0..200 {
            let waiter = {
                let s = s.clone();
                rt.spawn(async move { s.wait().await })
            };
            let s2 = s.clone();
            std::thread::spawn(move || s2.notify());
            rt.block_on(async {
                tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
                    .await
                    .expect("woken")
                    .expect("task");
            });
        }
    }
}
