//! List values: a sequence of byte strings with pushes and pops at both ends.
//!
//! Redis 7.0 keeps every list as a `quicklist`, a linked list of listpack chunks, so a short
//! list is one small array of length-prefixed elements, and OBJECT ENCODING says
//! `quicklist` for all of them. Podium has two forms behind the same API:
//! - **packed**, for lists of up to [`PACKED_MAX_LEN`] elements and [`PACKED_MAX_BYTES`]
//!   bytes: one exactly sized array (a [`Counted`]: the element count, then the elements,
//!   each a LEB128 length and its bytes; the shape of one quicklist node). A five-element
//!   activity feed costs one allocation instead of six. A push or pop moves the bytes after
//!   it within the array's block, and takes a new block only when the array changes size
//!   class (see `ThinBytes::splice`), which at this size costs less than the allocation the
//!   deque form makes per element; indexing walks it.
//! - **deque**, past either bound: a boxed `VecDeque` of elements, with O(1) pushes and pops
//!   at both ends and O(1) indexing. A list that grew past the bounds stays a deque.
//!
//! Either form is one pointer and a tag, so a list is 16 bytes inside `Value`.
//!
//! Both report `quicklist`, which is what Redis 7.0 reports for any list. Index
//! normalisation follows Redis: negative indexes count from the tail.

use super::get_varint;
use super::thin::{write_varint, Counted};
use crate::alloc::defrag::Relocator;
use std::collections::VecDeque;

/// Most elements a packed list holds.
pub const PACKED_MAX_LEN: usize = 128;
/// Most bytes a packed list's array holds (prefixes included).
pub const PACKED_MAX_BYTES: usize = 1024;

/// Move a deque's buffer if it is a small block in a sparse slab: the deque is turned into
/// a vector (no copy when its elements start the buffer, as they do unless it wrapped) and
/// back (never a copy).
fn defrag_small_deque<T>(r: &mut Relocator, d: &mut VecDeque<T>) {
    if d.capacity().saturating_mul(std::mem::size_of::<T>()) > crate::types::thin::SMALL_MAX {
        return;
    }
    let mut v = Vec::from(std::mem::take(d));
    r.vec(&mut v);
    *d = VecDeque::from(v);
}

#[derive(Clone)]
enum Store {
    /// The elements, each a LEB128 length then its bytes, back to back, after their count.
    Packed(Counted),
    /// Boxed, so that a list stays two words (a `VecDeque` is four) and `Value` three: the
    /// extra allocation is one per large list, beside one per element.
    #[allow(clippy::box_collection)]
    Deque(Box<VecDeque<Vec<u8>>>),
}

#[derive(Clone)]
pub struct List {
    store: Store,
}

impl Default for List {
    fn default() -> List {
        List::new()
    }
}

/// The elements of a list in order (see [`List::iter`]).
pub enum Iter<'a> {
    Packed { buf: &'a [u8], pos: usize },
    Deque(std::collections::vec_deque::Iter<'a, Vec<u8>>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        match self {
            Iter::Packed { buf, pos } => {
                if *pos >= buf.len() {
                    return None;
                }
                let (n, at) = get_varint(buf, *pos);
                *pos = at + n;
                Some(&buf[at..at + n])
            }
            Iter::Deque(it) => it.next().map(|v| &v[..]),
        }
    }
}

fn prefixed_len(n: usize) -> usize {
    let mut bytes = 1;
    let mut n = n >> 7;
    while n > 0 {
        bytes += 1;
        n >>= 7;
    }
    bytes
}

impl List {
    pub fn new() -> List {
        List {
            store: Store::Packed(Counted::new()),
        }
    }

    pub fn len(&self) -> usize {
        match &self.store {
            Store::Packed(c) => c.count(),
            Store::Deque(d) => d.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Active defrag: move the list's blocks that sit in sparse slabs, elements `from` on,
    /// at most `budget` of them; returns where to go on from, or None when done. The
    /// elements' bytes and order are unchanged.
    pub fn defrag(&mut self, r: &mut Relocator, from: usize, budget: usize) -> Option<usize> {
        match &mut self.store {
            Store::Packed(c) => {
                c.defrag(r);
                None
            }
            Store::Deque(d) => {
                if from == 0 {
                    r.boxed(d);
                    defrag_small_deque(r, d);
                }
                let end = d.len().min(from.saturating_add(budget));
                for i in from..end {
                    if let Some(e) = d.get_mut(i) {
                        r.vec(e);
                    }
                }
                (end < d.len()).then_some(end)
            }
        }
    }

    /// What OBJECT ENCODING reports (Redis 7.0: always quicklist).
    pub fn encoding_name(&self) -> &'static str {
        "quicklist"
    }

    /// Whether the list is in its packed form (tests, DEBUG).
    pub fn is_packed(&self) -> bool {
        matches!(self.store, Store::Packed(_))
    }

    pub fn iter(&self) -> Iter<'_> {
        match &self.store {
            Store::Packed(c) => Iter::Packed {
                buf: c.body(),
                pos: 0,
            },
            Store::Deque(d) => Iter::Deque(d.iter()),
        }
    }

    /// The element at position `p` (0-based from the head).
    pub fn get(&self, p: usize) -> Option<&[u8]> {
        match &self.store {
            Store::Packed(_) => self.iter().nth(p),
            Store::Deque(d) => d.get(p).map(|v| &v[..]),
        }
    }

    /// Elements `a..=b` (positions from [`List::range`]).
    pub fn range_iter(&self, a: usize, b: usize) -> impl Iterator<Item = &[u8]> {
        self.iter().skip(a).take(b + 1 - a)
    }

    /// The deque form, converting a packed list (for edits in the middle).
    pub fn deque_mut(&mut self) -> &mut VecDeque<Vec<u8>> {
        if let Store::Packed(_) = self.store {
            let d: VecDeque<Vec<u8>> = self.iter().map(<[u8]>::to_vec).collect();
            self.store = Store::Deque(Box::new(d));
        }
        match &mut self.store {
            Store::Deque(d) => d,
            Store::Packed(_) => unreachable!("converted above"),
        }
    }

    /// Whether the packed form can take `more` elements of `more_bytes` prefixed bytes.
    fn packed_fits(&self, more: usize, more_bytes: usize) -> bool {
        match &self.store {
            Store::Packed(c) => {
                c.count() + more <= PACKED_MAX_LEN
                    && c.body().len() + more_bytes <= PACKED_MAX_BYTES
            }
            Store::Deque(_) => false,
        }
    }

    pub fn push_back(&mut self, v: &[u8]) {
        let add = prefixed_len(v.len()) + v.len();
        if self.packed_fits(1, add) {
            if let Store::Packed(c) = &mut self.store {
                let (end, n) = (c.body().len(), c.count());
                let out = c.splice(end..end, add, n + 1);
                let at = write_varint(out, v.len());
                out[at..].copy_from_slice(v);
                return;
            }
        }
        self.deque_mut().push_back(v.to_vec());
    }

    pub fn push_front(&mut self, v: &[u8]) {
        let add = prefixed_len(v.len()) + v.len();
        if self.packed_fits(1, add) {
            if let Store::Packed(c) = &mut self.store {
                let n = c.count();
                let out = c.splice(0..0, add, n + 1);
                let at = write_varint(out, v.len());
                out[at..].copy_from_slice(v);
                return;
            }
        }
        self.deque_mut().push_front(v.to_vec());
    }

    pub fn pop_front(&mut self) -> Option<Vec<u8>> {
        match &mut self.store {
            Store::Packed(c) => {
                let count = c.count();
                if count == 0 {
                    return None;
                }
                let body = c.body();
                let (n, at) = get_varint(body, 0);
                let e = body[at..at + n].to_vec();
                c.splice(0..at + n, 0, count - 1);
                Some(e)
            }
            Store::Deque(d) => d.pop_front(),
        }
    }

    pub fn pop_back(&mut self) -> Option<Vec<u8>> {
        match &mut self.store {
            Store::Packed(c) => {
                let count = c.count();
                if count == 0 {
                    return None;
                }
                let body = c.body();
                let mut start = 0;
                let mut pos = 0;
                while pos < body.len() {
                    start = pos;
                    let (n, at) = get_varint(body, pos);
                    pos = at + n;
                }
                let (n, at) = get_varint(body, start);
                let e = body[at..at + n].to_vec();
                c.splice(start..body.len(), 0, count - 1);
                Some(e)
            }
            Store::Deque(d) => d.pop_back(),
        }
    }

    /// Keep only positions `a..=b` (LTRIM); a packed list stays packed.
    pub fn keep_range(&mut self, a: usize, b: usize) {
        match &mut self.store {
            Store::Packed(c) => {
                let count = c.count();
                if a > b || a >= count {
                    *c = Counted::new();
                    return;
                }
                let b = b.min(count - 1);
                // Byte offsets of element a and of the end of element b.
                let body = c.body();
                let (mut from, mut to) = (0, 0);
                for i in 0..=b {
                    if i == a {
                        from = to;
                    }
                    let (n, at) = get_varint(body, to);
                    to = at + n;
                }
                let kept = b + 1 - a;
                let end = body.len();
                c.splice(to..end, 0, kept);
                c.splice(0..from, 0, kept);
            }
            Store::Deque(d) => {
                d.truncate(b + 1);
                d.drain(..a);
            }
        }
    }

    /// Remove every element.
    pub fn clear(&mut self) {
        *self = List::new();
    }

    /// Resolve a Redis index (negative = from the tail) to a position, if in range.
    pub fn index(&self, i: i64) -> Option<usize> {
        let n = self.len() as i64;
        let i = if i < 0 { n + i } else { i };
        if (0..n).contains(&i) {
            Some(i as usize)
        } else {
            None
        }
    }

    /// Resolve LRANGE/LTRIM-style `start`/`stop` to an inclusive position range, or None if empty.
    pub fn range(&self, start: i64, stop: i64) -> Option<(usize, usize)> {
        let n = self.len() as i64;
        let mut start = if start < 0 { n + start } else { start };
        let mut stop = if stop < 0 { n + stop } else { stop };
        if start < 0 {
            start = 0;
        }
        if start > stop || start >= n {
            return None;
        }
        if stop >= n {
            stop = n - 1;
        }
        Some((start as usize, stop as usize))
    }

    /// Heap bytes (MEMORY USAGE), by jemalloc's size classes.
    pub fn heap_bytes(&self) -> usize {
        match &self.store {
            Store::Packed(c) => c.heap_bytes(),
            // Each element's own allocation, the ring of element headers, and its box.
            Store::Deque(d) => {
                d.iter()
                    .map(|e| crate::alloc::size_class(e.capacity()))
                    .sum::<usize>()
                    + crate::alloc::size_class(d.capacity() * std::mem::size_of::<Vec<u8>>())
                    + crate::alloc::size_class(std::mem::size_of::<VecDeque<Vec<u8>>>())
            }
        }
    }
}

impl<'a> FromIterator<&'a [u8]> for List {
    fn from_iter<I: IntoIterator<Item = &'a [u8]>>(items: I) -> List {
        let mut l = List::new();
        for e in items {
            l.push_back(e);
        }
        l
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(l: &List) -> Vec<Vec<u8>> {
        l.iter().map(<[u8]>::to_vec).collect()
    }

    #[test]
    fn ranges() {
        let mut l = List::new();
        for i in 0..5 {
            l.push_back(&[b'0' + i]);
        }
        assert_eq!(l.index(-1), Some(4));
        assert_eq!(l.index(5), None);
        assert_eq!(l.index(-6), None);
        assert_eq!(l.range(0, -1), Some((0, 4)));
        assert_eq!(l.range(-100, 100), Some((0, 4)));
        assert_eq!(l.range(3, 1), None);
        assert_eq!(l.range(5, 10), None);
        assert_eq!(l.range(-2, -1), Some((3, 4)));
    }

    /// Every operation gives the same elements in both forms, and a packed list turns into a
    /// deque exactly when it passes a bound.
    #[test]
    fn packed_and_deque_agree() {
        let mut packed = List::new();
        let mut deque = List::new();
        deque.deque_mut();
        let mut model: VecDeque<Vec<u8>> = VecDeque::new();
        let elem = |i: usize| format!("e{}", i * 37 % 101).into_bytes();
        for i in 0..40 {
            let e = if i % 9 == 0 { vec![b'x'; 200] } else { elem(i) };
            for l in [&mut packed, &mut deque] {
                if i % 3 == 0 {
                    l.push_front(&e);
                } else {
                    l.push_back(&e);
                }
            }
            if i % 3 == 0 {
                model.push_front(e);
            } else {
                model.push_back(e);
            }
            if i % 5 == 4 {
                assert_eq!(packed.pop_back(), model.back().cloned());
                assert_eq!(deque.pop_back(), model.pop_back());
                assert_eq!(packed.pop_front(), model.front().cloned());
                assert_eq!(deque.pop_front(), model.pop_front());
            }
            let want: Vec<Vec<u8>> = model.iter().cloned().collect();
            assert_eq!(items(&packed), want);
            assert_eq!(items(&deque), want);
            assert_eq!(packed.len(), model.len());
            for (p, e) in model.iter().enumerate() {
                assert_eq!(packed.get(p), Some(&e[..]));
            }
            let bytes: usize = model.iter().map(|e| prefixed_len(e.len()) + e.len()).sum();
            if packed.is_packed() {
                assert!(bytes <= PACKED_MAX_BYTES && model.len() <= PACKED_MAX_LEN);
            }
        }
        packed.push_back(&[b'y'; PACKED_MAX_BYTES]);
        assert!(!packed.is_packed(), "an element past the byte bound");
        assert_eq!(packed.len(), model.len() + 1);
        assert_eq!(packed.get(model.len()), Some(&[b'y'; PACKED_MAX_BYTES][..]));
        let mut small: List = [&b"a"[..], b"b", b"c", b"d", b"e"].into_iter().collect();
        assert!(small.is_packed());
        small.keep_range(1, 3);
        assert!(small.is_packed());
        assert_eq!(
            items(&small),
            vec![b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]
        );
        assert_eq!(small.range_iter(1, 2).collect::<Vec<_>>(), vec![b"c", b"d"]);
        assert_eq!(small.pop_back(), Some(b"d".to_vec()));
        assert_eq!(small.pop_back(), Some(b"c".to_vec()));
        assert_eq!(small.pop_back(), Some(b"b".to_vec()));
        assert_eq!(small.pop_back(), None);
        // LTRIM of every range of a packed list keeps it packed and exactly sized.
        let five: Vec<Vec<u8>> = (0..5).map(|i| format!("event{i}").into_bytes()).collect();
        for a in 0..5 {
            for b in a..7 {
                let mut l: List = five.iter().map(|e| &e[..]).collect();
                l.keep_range(a, b);
                let want: Vec<Vec<u8>> = five[a..(b + 1).min(5)].to_vec();
                assert!(l.is_packed());
                assert_eq!(items(&l), want);
                let body: usize = want.iter().map(|e| 1 + e.len()).sum();
                assert_eq!(l.heap_bytes(), Counted::heap_bytes_for(want.len(), body));
            }
        }
        // A five-element feed: 4 + 1 + 5 * 7 bytes, jemalloc's 48-byte class.
        let feed: List = five.iter().map(|e| &e[..]).collect();
        assert_eq!(feed.heap_bytes(), 48);
        let many: List = (0..PACKED_MAX_LEN + 1).map(|_| &b"z"[..]).collect();
        assert!(!many.is_packed(), "more than PACKED_MAX_LEN elements");
        assert_eq!(many.len(), PACKED_MAX_LEN + 1);
    }
}
