//! List values: a double-ended queue of byte strings.
//!
//! Redis 7.0 reports every list as a `quicklist` (a linked list of listpack chunks); Podium
//! keeps the elements in one `VecDeque`, which gives the same O(1) pushes and pops at both
//! ends and O(1) indexing. Commands reach the elements through `items` and the helpers below
//! (index normalisation follows Redis: negative indexes count from the tail).

use std::collections::VecDeque;

#[derive(Clone, Default)]
pub struct List {
    pub items: VecDeque<Vec<u8>>,
}

impl List {
    pub fn new() -> List {
        List::default()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// What OBJECT ENCODING reports (Redis 7.0: always quicklist).
    pub fn encoding_name(&self) -> &'static str {
        "quicklist"
    }

    /// Resolve a Redis index (negative = from the tail) to a position, if in range.
    pub fn index(&self, i: i64) -> Option<usize> {
        let n = self.items.len() as i64;
        let i = if i < 0 { n + i } else { i };
        if (0..n).contains(&i) {
            Some(i as usize)
        } else {
            None
        }
    }

    /// Resolve LRANGE/LTRIM-style `start`/`stop` to an inclusive position range, or None if empty.
    pub fn range(&self, start: i64, stop: i64) -> Option<(usize, usize)> {
        let n = self.items.len() as i64;
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

    /// Approximate heap bytes (MEMORY USAGE).
    pub fn heap_bytes(&self) -> usize {
        // Each element's own allocation, and the ring of element headers.
        self.items
            .iter()
            .map(|e| crate::alloc::size_class(e.capacity()))
            .sum::<usize>()
            + crate::alloc::size_class(self.items.capacity() * std::mem::size_of::<Vec<u8>>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        let mut l = List::new();
        for i in 0..5 {
            l.items.push_back(vec![b'0' + i]);
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
}
