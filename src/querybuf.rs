//! The query buffer's size over a connection's life, as Redis manages it.
//!
//! This module owns the policy of a connection's read buffer (what CLIENT LIST shows as `qbuf`
//! and `qbuf-free`): a read is offered at least 16 KiB of room (Redis's PROTO_IOBUF_LEN),
//! reclaimed in place when the buffer is not shared; an argument of 32 KiB or more
//! (PROTO_MBULK_BIG_ARG) gets a buffer sized exactly for it once its header is read, and after
//! a request with such an argument the next buffer is sized for another one like it, as
//! Redis expects a fat argument to be followed by another; and Redis's client cron rules
//! give memory back: a buffer wasting more than 4 KiB is emptied of its free space when the
//! client has been idle for more than 2 seconds, and one over 32 KiB (PROTO_RESIZE_THRESHOLD)
//! that is more than twice the recent peak shrinks to that peak. The peak is the most the
//! buffer held plus the room a read wanted, reset at each check.
//!
//! As in Redis, the server's cron finds the clients whose buffer may need it
//! ([`wants_check`], from what CLIENT LIST shows of them) and each connection makes the check
//! itself ([`QueryBuf::check`]) when it next waits for input. A timer per connection, armed
//! at every wait for input, cost a timer poll and the timer wheel's upkeep on every request.

use bytes::BytesMut;
use std::time::{Duration, Instant};

/// Room offered to each read (Redis's PROTO_IOBUF_LEN).
pub(crate) const IOBUF_LEN: usize = 16 * 1024;
/// An argument this long gets a buffer of its own size next time (PROTO_MBULK_BIG_ARG).
pub(crate) const BIG_ARG: usize = 32 * 1024;
/// Buffers above this size are shrunk toward their peak (PROTO_RESIZE_THRESHOLD).
const RESIZE_THRESHOLD: usize = 32 * 1024;
/// Less room than this is not worth a read of its own.
const MIN_READ: usize = 4 * 1024;
/// Free space below this is not worth giving back.
const MIN_WASTE: usize = 4 * 1024;
/// How soon a due shrink is made (Redis's client cron visits each client about that often).
const CHECK_DELAY: Duration = Duration::from_millis(100);
/// An idle client's buffer is emptied after this long without input (idle > 2 s).
const IDLE_FREE: Duration = Duration::from_secs(3);

/// One connection's query-buffer bookkeeping.
pub(crate) struct QueryBuf {
    /// The most the buffer needed since the last check.
    peak: usize,
    /// When input last arrived.
    last_input: Instant,
    /// When a due shrink-to-peak check runs (kept across reads, so busy clients get it too).
    check_at: Option<Instant>,
    /// The size of the block the buffer lives in, as last seen when a read grew it.
    /// `BytesMut::capacity` does not tell: once a request is split off the front, the buffer
    /// only reports the room after it, and reclaiming that room in place keeps the whole
    /// block (a 1 MB request grew the buffer to 2 MiB, which then stayed with the connection
    /// at a reported 16 KiB: unit/lazyfree's "Memory is not reclaimed by UNLINK").
    block: usize,
}

impl QueryBuf {
    pub(crate) fn new() -> QueryBuf {
        QueryBuf {
            peak: 0,
            last_input: Instant::now(),
            check_at: None,
            block: 0,
        }
    }

    /// Before waiting for input: make the 16 KiB of room a read is offered where that costs
    /// no allocation (an empty buffer gets its room only once data is readable).
    /// A block that grew past [`RESIZE_THRESHOLD`] is not reused in place but swapped for
    /// one the size of what the buffer holds plus a read's room, so the big one is freed once
    /// the requests taken from it are done.
    pub(crate) fn before_read(&mut self, buf: &mut BytesMut) {
        let room = buf.capacity() - buf.len();
        if room < IOBUF_LEN && self.block > RESIZE_THRESHOLD {
            resize(buf, buf.len() + IOBUF_LEN);
            self.block = buf.capacity();
        } else if buf.capacity() > 0
            && room < IOBUF_LEN
            && !buf.try_reclaim(IOBUF_LEN)
            && room < MIN_READ
        {
            // Shared with requests still running and nearly full: room of its own (the read
            // makes none while any is left).
            buf.reserve(IOBUF_LEN);
        }
    }

    /// Between requests of a stream read as it comes (our master's link): a block grown past
    /// [`RESIZE_THRESHOLD`] for a request that has run is swapped for one the size of what
    /// is left plus a read's room, so the big one is freed with the request (Redis trims its
    /// master's query buffer once a big command is applied). While most of the buffer is a
    /// request still arriving it is left alone: copying it at every read would cost time in
    /// proportion to its size squared.
    pub(crate) fn after_requests(&mut self, buf: &mut BytesMut) {
        if self.block > RESIZE_THRESHOLD && buf.len() < IOBUF_LEN {
            resize(buf, buf.len() + IOBUF_LEN);
            self.block = buf.capacity();
        }
    }

    /// Before waiting for the rest of an argument of 32 KiB or more whose header is read: the
    /// buffer is made exactly `need` bytes long (the request up to the argument's end), as
    /// Redis sizes its query buffer for such an argument, so the argument arrives without the
    /// buffer doubling on its way and takes no more memory than it needs.
    pub(crate) fn for_big_argument(&mut self, buf: &mut BytesMut, need: usize) {
        if buf.capacity() < need {
            resize(buf, need);
            self.block = buf.capacity();
        }
    }

    /// After a read of `n` bytes into `buf`, which held `len_before` bytes before it.
    pub(crate) fn after_read(&mut self, buf: &BytesMut, len_before: usize, n: usize) {
        self.block = self.block.max(buf.capacity());
        self.peak = self.peak.max(len_before + n.max(IOBUF_LEN));
        // The worker's last command clock is recent enough for a check counted in seconds.
        self.last_input = crate::clock::recent_instant();
    }

    /// After a request with an argument of `big` bytes (at least [`BIG_ARG`]) was taken off
    /// an emptied buffer: room for another such argument.
    pub(crate) fn after_big_arg(&mut self, buf: &mut BytesMut, big: usize) {
        if buf.is_empty() && buf.capacity() < big + 2 {
            *buf = BytesMut::with_capacity(big + 2);
        }
    }

    /// When the next check is due, if one is.
    pub(crate) fn next_check(&mut self, buf: &BytesMut) -> Option<Instant> {
        let (cap, len) = (buf.capacity(), buf.len());
        if cap - len <= MIN_WASTE {
            self.check_at = None;
            return None;
        }
        if cap > RESIZE_THRESHOLD && cap / 2 > self.peak {
            let at = *self
                .check_at
                .get_or_insert_with(|| Instant::now() + CHECK_DELAY);
            return Some(at.min(self.last_input + IDLE_FREE));
        }
        self.check_at = None;
        Some(self.last_input + IDLE_FREE)
    }

    /// The check: give back the free space of an idle client's buffer, or shrink a buffer
    /// much larger than its peak to that peak. The buffer's content (a request in progress)
    /// is kept, at the same offsets.
    pub(crate) fn check(&mut self, buf: &mut BytesMut) {
        self.check_at = None;
        let (cap, len) = (buf.capacity(), buf.len());
        if cap - len > MIN_WASTE {
            if self.last_input.elapsed() >= IDLE_FREE {
                resize(buf, len);
                self.block = buf.capacity();
            } else if cap > RESIZE_THRESHOLD && cap / 2 > self.peak {
                resize(buf, len.max(self.peak));
                self.block = buf.capacity();
            }
        }
        self.peak = buf.len();
    }
}

/// Whether the cron should have a connection check its buffer: free space worth giving back
/// and either a client idle for the idle limit or a buffer big enough to shrink. `idle_ms`
/// is the time since the client's last command; the connection judges with its own record
/// of the last input.
pub(crate) fn wants_check(qbuf: usize, qbuf_free: usize, idle_ms: i64) -> bool {
    qbuf_free > MIN_WASTE
        && (idle_ms >= IDLE_FREE.as_millis() as i64 || qbuf + qbuf_free > RESIZE_THRESHOLD)
}

/// Move `buf`'s content into a buffer of `capacity` bytes (none when it is 0).
fn resize(buf: &mut BytesMut, capacity: usize) {
    let mut fresh = BytesMut::with_capacity(capacity);
    fresh.extend_from_slice(buf);
    *buf = fresh;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_buffer_is_emptied_and_a_big_one_shrinks_to_its_peak() {
        let mut q = QueryBuf::new();
        let mut buf = BytesMut::with_capacity(IOBUF_LEN);
        q.after_read(&buf, 0, 40);
        assert_eq!(q.next_check(&buf), Some(q.last_input + IDLE_FREE));
        q.last_input -= IDLE_FREE;
        q.check(&mut buf);
        assert_eq!(buf.capacity(), 0, "idle: the free space goes back");

        let mut buf = BytesMut::with_capacity(400_002);
        let mut q = QueryBuf::new();
        q.after_read(&buf, 0, 50);
        let due = q.next_check(&buf).expect("a shrink is due");
        assert!(due <= Instant::now() + CHECK_DELAY);
        assert_eq!(
            q.next_check(&buf),
            Some(due),
            "the due time holds across reads"
        );
        q.check(&mut buf);
        assert_eq!(buf.capacity(), IOBUF_LEN, "shrunk to the peak");
    }

    #[test]
    fn the_cron_asks_for_idle_clients_and_big_buffers_with_room() {
        let idle = IDLE_FREE.as_millis() as i64;
        assert!(wants_check(0, IOBUF_LEN, idle), "idle with 16 KiB free");
        assert!(!wants_check(0, IOBUF_LEN, idle - 1), "not idle long enough");
        assert!(!wants_check(0, MIN_WASTE, idle), "too little free space");
        assert!(wants_check(30_000, 10_000, 0), "over the resize threshold");
        assert!(!wants_check(20_000, 10_000, 0), "small and busy");
    }

    #[test]
    fn content_survives_a_resize_and_a_big_argument_sizes_the_next_buffer() {
        let mut q = QueryBuf::new();
        let mut buf = BytesMut::with_capacity(100_000);
        buf.extend_from_slice(b"*2\r\n$3\r\nget");
        q.last_input -= IDLE_FREE;
        q.check(&mut buf);
        assert_eq!(&buf[..], b"*2\r\n$3\r\nget");
        assert_eq!(buf.capacity(), buf.len());
        let mut empty = BytesMut::new();
        q.after_big_arg(&mut empty, 400_000);
        assert!(empty.capacity() >= 400_002);
    }

    /// A stream's buffer lets go of a big block once its request ran, not while it arrives.
    #[test]
    fn a_stream_lets_go_of_a_big_block_between_requests() {
        let mut q = QueryBuf::new();
        let mut buf = BytesMut::with_capacity(IOBUF_LEN);
        buf.extend_from_slice(&[b'x'; 100_000]);
        q.after_read(&buf, 0, 100_000);
        q.after_requests(&mut buf);
        assert!(buf.capacity() >= 100_000, "a request still arriving stays");
        let _ = buf.split_to(99_990);
        q.after_requests(&mut buf);
        assert_eq!(buf.capacity(), 10 + IOBUF_LEN);
        assert_eq!(&buf[..], &[b'x'; 10]);
    }

    /// A big argument gets exactly the room it needs, once, and keeps what arrived of it.
    #[test]
    fn a_big_argument_gets_a_buffer_of_its_size() {
        let mut q = QueryBuf::new();
        let mut buf = BytesMut::with_capacity(IOBUF_LEN);
        buf.extend_from_slice(b"*1\r\n$100000\r\nvvv");
        let need = 15 + 100_000 + 2;
        q.for_big_argument(&mut buf, need);
        assert_eq!(buf.capacity(), need);
        assert_eq!(&buf[..], b"*1\r\n$100000\r\nvvv");
        // Already big enough: left alone.
        q.for_big_argument(&mut buf, need - 10);
        assert_eq!(buf.capacity(), need);
    }

    /// A block grown by a big request is freed once its requests are done, although the
    /// buffer then reports only the room after them.
    #[test]
    fn a_grown_block_is_not_kept_behind_a_small_reported_capacity() {
        let mut q = QueryBuf::new();
        let mut buf = BytesMut::with_capacity(IOBUF_LEN);
        let request = vec![b'x'; 1_100_000];
        buf.extend_from_slice(&request);
        q.after_read(&buf, 0, request.len());
        let frame = buf.split_to(request.len()).freeze();
        drop(frame);
        // What reclaiming in place would keep: the whole block, reported as the room asked.
        q.before_read(&mut buf);
        assert!(buf.capacity() >= IOBUF_LEN);
        assert!(buf.capacity() < 2 * IOBUF_LEN, "{}", buf.capacity());
        assert!(q.block < RESIZE_THRESHOLD, "a fresh small block");
        // A small buffer is reclaimed in place as before.
        let mut small = BytesMut::with_capacity(IOBUF_LEN);
        small.extend_from_slice(&[b'y'; IOBUF_LEN - 10]);
        let mut q = QueryBuf::new();
        q.after_read(&small, 0, IOBUF_LEN - 10);
        let _ = small.split_to(IOBUF_LEN - 10);
        q.before_read(&mut small);
        assert!(small.capacity() >= IOBUF_LEN);
    }
}
