//! `SmallSet`: a set of up to [`MAX_MEMBERS`] short strings as one hash table in one allocation.
//!
//! A leaderboard application keeps many small sets (tags, a player's badges, who liked a post).
//! Redis 7.0 keeps a set of strings in a dict from its first member: a dictEntry and an sds
//! per member, about 460 bytes for five short tags (Valkey 8 and Redis 7.2 moved small sets to
//! a listpack). A [`super::hash::Table`] per small set cost Podium as much. This form keeps
//! what makes a set a hash table (a member is found by hashing it and probing a few slots,
//! not by walking every member) and drops everything else:
//!
//! ```text
//! [ count: u16 | slot bits: u8 | slot width: u8 | slots: width bytes each | members ]
//! ```
//!
//! Members are stored in insertion order, each as a LEB128 length and its bytes. A slot holds
//! 0 (empty) or 1 + the offset of a member in that area; slots are probed linearly from the
//! member's hash, and there are always more slots than members (load at most 7/8), so a probe
//! ends at an empty slot. Slots are one byte wide while the members take at most 255 bytes, two
//! bytes otherwise. Five 5-byte tags take 4 + 8 + 30 = 42 bytes, 46 with the array's length
//! ([`ThinBytes`]), jemalloc's 48-byte class.
//!
//! Every change writes a new exactly sized array, as Redis rewrites a listpack; with at most
//! [`MAX_MEMBERS`] members of at most [`MAX_MEMBER_LEN`] bytes that is a copy of a few KiB at
//! worst. Past either limit the set becomes a full [`super::hash::Table`] (see `set.rs`).
//! OBJECT ENCODING reports both as "hashtable": each is one.

use super::thin::ThinBytes;
use std::hash::BuildHasher;

/// Most members a small set holds (Redis 7.2's `set-max-listpack-entries` default).
pub const MAX_MEMBERS: usize = 128;
/// Longest member a small set holds (Redis 7.2's `set-max-listpack-value` default).
pub const MAX_MEMBER_LEN: usize = 64;

const HEADER: usize = 4;

/// A small set (see the module documentation). The empty set holds no allocation. The array
/// is a [`ThinBytes`], so the set is one pointer (its length is in the block, ahead of it).
#[derive(Clone, Default)]
pub struct SmallSet {
    bytes: ThinBytes,
}

/// Bytes a LEB128 length prefix of `n` takes.
fn prefix_len(n: usize) -> usize {
    (usize::BITS - (n | 1).leading_zeros()).div_ceil(7) as usize
}

/// The member starting at `pos` of `data`, and the position after it.
fn member_at(data: &[u8], pos: usize) -> (&[u8], usize) {
    let (len, start) = super::get_varint(data, pos);
    (&data[start..start + len], start + len)
}

fn hash_of(m: &[u8]) -> u64 {
    super::hash::TABLE_HASHER.hash_one(m)
}

/// Slot-table shape for `count` members in `data_len` bytes: (slot bits, slot width).
fn shape(count: usize, data_len: usize) -> (u8, usize) {
    // At least one free slot, and a load of at most 7/8.
    let slots = (count + count / 8 + 1).next_power_of_two();
    let width = if data_len <= 255 { 1 } else { 2 };
    (slots.trailing_zeros() as u8, width)
}

/// Members of a data area, in order.
struct Members<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for Members<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.pos >= self.data.len() {
            return None;
        }
        let (m, next) = member_at(self.data, self.pos);
        self.pos = next;
        Some(m)
    }
}

impl SmallSet {
    /// Active defrag: move the one block if it sits in a sparse slab.
    pub fn defrag(&mut self, r: &mut crate::alloc::defrag::Relocator) -> bool {
        self.bytes.defrag(r)
    }

    /// Whether a set holding `count` members, one of them `m`, may take this form.
    pub fn fits(count: usize, m: &[u8]) -> bool {
        count <= MAX_MEMBERS && m.len() <= MAX_MEMBER_LEN
    }

    pub fn len(&self) -> usize {
        if self.bytes.is_empty() {
            0
        } else {
            usize::from(u16::from_le_bytes([self.bytes[0], self.bytes[1]]))
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn slot_bits(&self) -> u32 {
        u32::from(self.bytes[2])
    }

    fn width(&self) -> usize {
        usize::from(self.bytes[3])
    }

    fn data_start(&self) -> usize {
        HEADER + (self.width() << self.slot_bits())
    }

    fn data(&self) -> &[u8] {
        if self.bytes.is_empty() {
            &[]
        } else {
            &self.bytes[self.data_start()..]
        }
    }

    /// Slot `i`: 0 for empty, else 1 + a member's offset in the data area.
    fn slot(&self, i: usize) -> usize {
        let at = HEADER + i * self.width();
        if self.width() == 1 {
            usize::from(self.bytes[at])
        } else {
            usize::from(u16::from_le_bytes([self.bytes[at], self.bytes[at + 1]]))
        }
    }

    /// The offset in the data area of member `m`, if present.
    fn find(&self, m: &[u8]) -> Option<usize> {
        if self.bytes.is_empty() {
            return None;
        }
        let mask = (1usize << self.slot_bits()) - 1;
        let data = self.data();
        let mut i = hash_of(m) as usize & mask;
        loop {
            let s = self.slot(i);
            if s == 0 {
                return None;
            }
            if member_at(data, s - 1).0 == m {
                return Some(s - 1);
            }
            i = (i + 1) & mask;
        }
    }

    pub fn contains(&self, m: &[u8]) -> bool {
        self.find(m).is_some()
    }

    /// Every member, in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        Members {
            data: self.data(),
            pos: 0,
        }
    }

    /// Member `i` in insertion order.
    pub fn nth(&self, i: usize) -> Option<&[u8]> {
        self.iter().nth(i)
    }

    /// The array holding `count` members whose encoded data is `data`.
    fn build(count: usize, data: &[u8]) -> ThinBytes {
        if count == 0 {
            return ThinBytes::new();
        }
        let (bits, width) = shape(count, data.len());
        let slots = 1usize << bits;
        let start = HEADER + slots * width;
        let mut out = ThinBytes::zeroed(start + data.len());
        // count <= MAX_MEMBERS, far below u16::MAX.
        out[..2].copy_from_slice(&(count as u16).to_le_bytes());
        out[2] = bits;
        out[3] = width as u8;
        out[start..].copy_from_slice(data);
        let mask = slots - 1;
        let mut pos = 0;
        while pos < data.len() {
            let (m, next) = member_at(data, pos);
            let mut i = hash_of(m) as usize & mask;
            loop {
                let at = HEADER + i * width;
                let empty = out[at..at + width].iter().all(|&b| b == 0);
                if empty {
                    let tag = pos + 1;
                    if width == 1 {
                        out[at] = tag as u8;
                    } else {
                        out[at..at + 2].copy_from_slice(&(tag as u16).to_le_bytes());
                    }
                    break;
                }
                i = (i + 1) & mask;
            }
            pos = next;
        }
        out
    }

    /// Add `m`, which the caller checked is absent and fits ([`SmallSet::fits`]).
    pub fn insert_new(&mut self, m: &[u8]) {
        debug_assert!(!self.contains(m) && Self::fits(self.len() + 1, m));
        let old = self.data();
        let mut data = Vec::with_capacity(old.len() + prefix_len(m.len()) + m.len());
        data.extend_from_slice(old);
        super::put_varint(&mut data, m.len());
        data.extend_from_slice(m);
        self.bytes = Self::build(self.len() + 1, &data);
    }

    /// Remove `m`; true if it was there.
    pub fn remove(&mut self, m: &[u8]) -> bool {
        let Some(at) = self.find(m) else {
            return false;
        };
        let old = self.data();
        let end = member_at(old, at).1;
        let mut data = Vec::with_capacity(old.len() - (end - at));
        data.extend_from_slice(&old[..at]);
        data.extend_from_slice(&old[end..]);
        self.bytes = Self::build(self.len() - 1, &data);
        true
    }

    /// The allocation's size (its length header included).
    pub fn heap_bytes(&self) -> usize {
        self.bytes.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_tags_take_one_small_allocation() {
        let mut s = SmallSet::default();
        assert_eq!(s.heap_bytes(), 0);
        for m in ["t1001", "t1002", "t1003", "t1004", "t1005"] {
            s.insert_new(m.as_bytes());
        }
        assert_eq!(s.len(), 5);
        assert_eq!(s.bytes.len(), 42);
        assert_eq!(s.heap_bytes(), 48);
    }

    #[test]
    fn add_find_remove_up_to_the_limit() {
        let mut s = SmallSet::default();
        let members: Vec<Vec<u8>> = (0..MAX_MEMBERS)
            .map(|i| format!("member-{i}-{}", "x".repeat(i % 40)).into_bytes())
            .collect();
        for (n, m) in members.iter().enumerate() {
            assert!(!s.contains(m));
            assert!(SmallSet::fits(n + 1, m));
            s.insert_new(m);
            assert_eq!(s.len(), n + 1);
            // Every member so far is found, and the order is insertion order.
            assert!(members[..=n].iter().all(|x| s.contains(x)));
            assert!(s.iter().eq(members[..=n].iter().map(|m| &m[..])));
        }
        assert_eq!(s.width(), 2, "past 255 bytes the slots are two bytes wide");
        assert!(!s.contains(b"member-"));
        assert!(!s.contains(b""));
        for (n, m) in members.iter().enumerate().rev() {
            assert!(s.remove(m));
            assert!(!s.remove(m));
            assert_eq!(s.len(), n);
            assert!(members[..n].iter().all(|x| s.contains(x)));
        }
        assert!(s.bytes.is_empty(), "an emptied set frees its array");
    }

    #[test]
    fn empty_and_long_members() {
        let mut s = SmallSet::default();
        s.insert_new(b"");
        let long = vec![b'z'; MAX_MEMBER_LEN];
        s.insert_new(&long);
        assert!(s.contains(b"") && s.contains(&long));
        assert_eq!(s.nth(1), Some(&long[..]));
        assert!(!SmallSet::fits(3, &[b'z'; MAX_MEMBER_LEN + 1]));
        assert!(!SmallSet::fits(MAX_MEMBERS + 1, b"a"));
        assert!(s.remove(b""));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![&long[..]]);
    }
}
