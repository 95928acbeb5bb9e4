//! Set values.
//!
//! A [`Set`] is an integer set (an [`IntSet`]: sorted i64s in one exactly sized array, Redis's
//! intset) while every member is
//! the canonical text of a 64-bit integer (Redis's `string2ll` rules: no sign on zero, no
//! leading zeros, no spaces, no `+`) and it has at most `set-max-intset-entries` members;
//! otherwise a hash table, as in Redis 7.0 (which has no listpack sets): while it has at most
//! 128 members of at most 64 bytes a [`SmallSet`] (a hash table in one allocation), past that
//! a [`Table`] (shared with hashes, which gives SSCAN its guarantee). A set never converts
//! back to a smaller form. Members of an intset are handed out as [`Member`]s holding their
//! formatted text. Every form is one pointer and a tag, so a set is 16 bytes inside `Value`.

use super::hash::Table;
use super::small_set::SmallSet;
use super::thin::ThinBytes;
use crate::alloc::defrag::Relocator;
use rand::Rng;
use std::ops::Deref;

/// Parse `s` as Redis's `string2ll` does: the canonical decimal text of an i64 only.
pub fn canonical_i64(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (neg, digits) = match s[0] {
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !(b'1'..=b'9').contains(&digits[0]) {
        return None;
    }
    let mut v: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    if neg {
        if v > i64::MAX as u64 + 1 {
            return None;
        }
        Some((v as i64).wrapping_neg())
    } else {
        i64::try_from(v).ok()
    }
}

/// A member as the set hands it out: borrowed text, or an integer formatted on the spot.
/// Dereferences to `[u8]`.
#[derive(Clone, Copy)]
pub enum Member<'a> {
    Str(&'a [u8]),
    Int { buf: [u8; 20], len: u8 },
}

impl<'a> Member<'a> {
    pub fn from_int(v: i64) -> Member<'a> {
        // Digits are written from the end of the buffer, then moved to the front.
        let mut buf = [0u8; 20];
        let mut n = v.unsigned_abs();
        let mut i = buf.len();
        loop {
            i -= 1;
            buf[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        if v < 0 {
            i -= 1;
            buf[i] = b'-';
        }
        let len = buf.len() - i;
        buf.copy_within(i.., 0);
        Member::Int {
            buf,
            len: len as u8,
        }
    }
}

impl Deref for Member<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Member::Str(s) => s,
            Member::Int { buf, len } => &buf[..*len as usize],
        }
    }
}

impl AsRef<[u8]> for Member<'_> {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::fmt::Debug for Member<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self))
    }
}

/// Sorted, distinct integers, each as its 8 little-endian bytes, in one [`ThinBytes`] (Redis's
/// intset with its widest encoding; the RDB writer picks the narrowest width itself). An
/// insert or removal resizes the array in place and moves the integers after it.
#[derive(Clone, Default)]
pub struct IntSet {
    bytes: ThinBytes,
}

impl IntSet {
    /// The integers' byte groups (the array is always a whole number of them).
    #[inline]
    fn words(&self) -> &[[u8; 8]] {
        self.bytes.as_chunks::<8>().0
    }

    pub fn len(&self) -> usize {
        self.bytes.len() / 8
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The integer at position `i` (below `len`).
    #[inline]
    pub fn get(&self, i: usize) -> i64 {
        i64::from_le_bytes(self.words()[i])
    }

    /// The integers, ascending.
    pub fn iter(&self) -> impl Iterator<Item = i64> + '_ {
        self.words().iter().map(|w| i64::from_le_bytes(*w))
    }

    /// `v`'s position (Ok), or where it would go (Err), as `slice::binary_search`.
    #[inline]
    pub fn search(&self, v: i64) -> Result<usize, usize> {
        self.words()
            .binary_search_by(|w| i64::from_le_bytes(*w).cmp(&v))
    }

    /// Insert `v` at `pos` (from [`IntSet::search`]).
    pub fn insert_at(&mut self, pos: usize, v: i64) {
        self.bytes
            .splice(pos * 8..pos * 8, 8)
            .copy_from_slice(&v.to_le_bytes());
    }

    /// Remove the integer at `pos`.
    pub fn remove_at(&mut self, pos: usize) {
        self.bytes.splice(pos * 8..pos * 8 + 8, 0);
    }

    /// The array's allocation (MEMORY USAGE).
    pub fn heap_bytes(&self) -> usize {
        self.bytes.heap_bytes()
    }
}

/// The most integers an intset holds (1 GiB of them), whatever `set-max-intset-entries`
/// allows: its array's length is a u32 of bytes ([`super::thin::ThinBytes`]), and Redis
/// likewise keeps a listpack or intset below 1 GiB.
pub const INTSET_MAX_ENTRIES: usize = (1 << 30) / 8;

/// A set value.
#[derive(Clone)]
pub enum Set {
    /// Sorted, distinct integers.
    Ints(IntSet),
    /// Hash-table form for a few short members, in one allocation.
    Small(SmallSet),
    /// Hash-table form, boxed so that a set stays as small as a keyspace slot's value.
    Table(Box<Table<Box<[u8]>>>),
}

impl Set {
    /// Active defrag: move the set's blocks that sit in sparse slabs, members `from` on, at
    /// most `budget` of them; returns where to go on from, or None when done.
    pub fn defrag(&mut self, r: &mut Relocator, from: usize, budget: usize) -> Option<usize> {
        match self {
            Set::Ints(i) => {
                i.bytes.defrag(r);
                None
            }
            Set::Small(s) => {
                s.defrag(r);
                None
            }
            Set::Table(t) => {
                if from == 0 {
                    r.boxed(t);
                }
                t.defrag_slots(r, from, budget, |r, m| {
                    r.boxed_bytes(m);
                })
            }
        }
    }
}

impl Default for Set {
    fn default() -> Self {
        Set::Ints(IntSet::default())
    }
}

impl Set {
    /// An empty set in the form Redis would create for a first member `m` (SADD, SMOVE).
    pub fn for_member(m: &[u8]) -> Set {
        if canonical_i64(m).is_some() {
            Set::Ints(IntSet::default())
        } else {
            Set::Small(SmallSet::default())
        }
    }

    /// An empty integer set (the *STORE commands start from one, as Redis does).
    pub fn new_intset() -> Set {
        Set::Ints(IntSet::default())
    }

    /// Every member, in no particular order (used by ZUNIONSTORE & co, which take sets as
    /// inputs). Items dereference to `&[u8]`.
    pub fn iter(&self) -> Box<dyn Iterator<Item = Member<'_>> + '_> {
        match self {
            Set::Ints(v) => Box::new(v.iter().map(Member::from_int)),
            Set::Small(s) => Box::new(s.iter().map(Member::Str)),
            Set::Table(t) => Box::new(t.iter().map(|m| Member::Str(m))),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Set::Ints(v) => v.len(),
            Set::Small(s) => s.len(),
            Set::Table(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn contains(&self, m: &[u8]) -> bool {
        match self {
            Set::Ints(v) => canonical_i64(m).is_some_and(|i| v.search(i).is_ok()),
            Set::Small(s) => s.contains(m),
            Set::Table(t) => t.contains(m),
        }
    }

    /// What OBJECT ENCODING reports.
    pub fn encoding_name(&self) -> &'static str {
        match self {
            Set::Ints(_) => "intset",
            Set::Small(_) | Set::Table(_) => "hashtable",
        }
    }

    /// About how many allocations freeing the set takes (lazyfree's effort).
    pub fn free_effort(&self) -> usize {
        match self {
            Set::Ints(_) | Set::Small(_) => 1,
            Set::Table(t) => t.len(),
        }
    }

    /// Convert to a hash-table form that can take `next` as one more member: the small one
    /// if it fits, else the full table (no-op if already in a form that takes it).
    fn make_room_for(&mut self, next: &[u8]) {
        let count = self.len() + 1;
        let small = match self {
            Set::Table(_) => return,
            Set::Small(_) => {
                if SmallSet::fits(count, next) {
                    return;
                }
                false
            }
            Set::Ints(_) => SmallSet::fits(count, next),
        };
        let members: Vec<Vec<u8>> = self.iter().map(|m| m.to_vec()).collect();
        *self = if small {
            let mut s = SmallSet::default();
            for m in &members {
                s.insert_new(m);
            }
            Set::Small(s)
        } else {
            let mut t = Table::with_capacity(count);
            for m in members {
                t.insert_new(m.into_boxed_slice());
            }
            Set::Table(Box::new(t))
        };
    }

    /// Convert to the full hash-table form (no-op if already there).
    pub fn convert_to_table(&mut self) {
        if !matches!(self, Set::Table(_)) {
            let mut t = Table::with_capacity(self.len() + 1);
            for m in self.iter() {
                t.insert_new(m.to_vec().into_boxed_slice());
            }
            *self = Set::Table(Box::new(t));
        }
    }

    /// Add `m`; true if it was not there. `max_intset` is `set-max-intset-entries` (past
    /// [`INTSET_MAX_ENTRIES`] the set is a hash table whatever it says).
    pub fn add(&mut self, m: &[u8], max_intset: usize) -> bool {
        if let Set::Ints(v) = self {
            match canonical_i64(m) {
                Some(i) => {
                    return match v.search(i) {
                        Ok(_) => false,
                        Err(pos) => {
                            if v.len() >= max_intset.min(INTSET_MAX_ENTRIES) {
                                // One more than the intset may hold: a hash table, as Redis.
                                self.make_room_for(m);
                                return self.add(m, max_intset);
                            }
                            v.insert_at(pos, i);
                            true
                        }
                    };
                }
                None => self.make_room_for(m),
            }
        }
        if self.contains(m) {
            return false;
        }
        self.make_room_for(m);
        match self {
            Set::Small(s) => s.insert_new(m),
            Set::Table(t) => t.insert_new(m.into()),
            Set::Ints(_) => unreachable!("made room above"),
        }
        true
    }

    /// Remove `m`; true if it was there.
    pub fn remove(&mut self, m: &[u8]) -> bool {
        match self {
            Set::Ints(v) => match canonical_i64(m).map(|i| v.search(i)) {
                Some(Ok(pos)) => {
                    v.remove_at(pos);
                    true
                }
                _ => false,
            },
            Set::Small(s) => s.remove(m),
            Set::Table(t) => t.remove(m).is_some(),
        }
    }

    /// A uniformly random member (None if empty).
    pub fn random(&self, rng: &mut impl Rng) -> Option<Member<'_>> {
        if self.is_empty() {
            return None;
        }
        Some(match self {
            Set::Ints(v) => Member::from_int(v.get(rng.gen_range(0..v.len()))),
            Set::Small(s) => Member::Str(s.nth(rng.gen_range(0..s.len()))?),
            Set::Table(t) => Member::Str(t.at(t.random_slot(rng))?),
        })
    }

    /// `count` distinct random members (all of them if count >= len).
    pub fn random_distinct(&self, count: usize, rng: &mut impl Rng) -> Vec<Member<'_>> {
        let n = self.len();
        if count >= n {
            return self.iter().collect();
        }
        match self {
            Set::Ints(v) => super::distinct_indices(n, count, rng)
                .into_iter()
                .map(|i| Member::from_int(v.get(i)))
                .collect(),
            Set::Small(s) => {
                let all: Vec<&[u8]> = s.iter().collect();
                super::distinct_indices(n, count, rng)
                    .into_iter()
                    .map(|i| Member::Str(all[i]))
                    .collect()
            }
            Set::Table(t) => t
                .random_distinct_slots(count, rng)
                .into_iter()
                .filter_map(|s| t.at(s))
                .map(|m| Member::Str(m))
                .collect(),
        }
    }

    /// Remove and return `count` distinct random members (all if count >= len).
    pub fn pop_random(&mut self, count: usize, rng: &mut impl Rng) -> Vec<Vec<u8>> {
        let picked: Vec<Vec<u8>> = self
            .random_distinct(count, rng)
            .into_iter()
            .map(|m| m.to_vec())
            .collect();
        for m in &picked {
            self.remove(m);
        }
        picked
    }

    /// SSCAN step: the intset and small forms return everything with cursor 0 (as Redis's
    /// intset and listpack do: they are too small for a cursor to matter).
    pub fn scan(&self, cursor: u64, count: usize, mut f: impl FnMut(&[u8])) -> u64 {
        match self {
            Set::Ints(v) => {
                for i in v.iter() {
                    f(&Member::from_int(i));
                }
                0
            }
            Set::Small(s) => {
                s.iter().for_each(f);
                0
            }
            Set::Table(t) => t.scan(cursor, count, |m| f(m)),
        }
    }

    /// Approximate heap bytes (MEMORY USAGE).
    pub fn heap_bytes(&self) -> usize {
        match self {
            Set::Ints(v) => v.heap_bytes(),
            Set::Small(s) => s.heap_bytes(),
            Set::Table(t) => {
                t.iter()
                    .map(|m| crate::alloc::size_class(m.len()))
                    .sum::<usize>()
                    + t.overhead_bytes()
                    + crate::alloc::size_class(std::mem::size_of::<Table<Box<[u8]>>>())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A set is held inline in the keyspace entry (two words of the value's three), and five
    /// short tags take one allocation of jemalloc's 48-byte class; an intset of five takes
    /// 4 + 40 bytes, the 48-byte class too.
    #[test]
    fn small_sets_are_lean() {
        assert_eq!(std::mem::size_of::<Set>(), 16);
        let mut ints = Set::new_intset();
        for m in ["5", "-3", "9000000000", "0", "12"] {
            assert!(ints.add(m.as_bytes(), 512));
        }
        assert_eq!(ints.heap_bytes(), 48);
        assert_eq!(
            ints.iter().map(|m| m.to_vec()).collect::<Vec<_>>(),
            ["-3", "0", "5", "12", "9000000000"].map(|m| m.as_bytes().to_vec())
        );
        for m in ["5", "-3", "9000000000", "0", "12"] {
            assert!(ints.remove(m.as_bytes()));
        }
        assert!(ints.is_empty() && ints.heap_bytes() == 0);
        let mut s = Set::for_member(b"t1001");
        for m in ["t1001", "t1002", "t1003", "t1004", "t1005"] {
            assert!(s.add(m.as_bytes(), 512));
        }
        assert!(matches!(s, Set::Small(_)));
        assert_eq!(s.encoding_name(), "hashtable");
        assert_eq!(s.heap_bytes(), 48);
    }

    /// The small form holds 128 members of up to 64 bytes; one more, or a longer one, makes
    /// the full table, and nothing converts back.
    #[test]
    fn small_set_grows_into_a_table() {
        let mut s = Set::for_member(b"a");
        for i in 0..128 {
            assert!(s.add(format!("m{i}").as_bytes(), 512));
        }
        assert!(matches!(s, Set::Small(_)));
        assert!(!s.add(b"m7", 512));
        assert!(s.add(b"m128", 512));
        assert!(matches!(s, Set::Table(_)));
        assert_eq!(s.len(), 129);
        assert!((0..129).all(|i| s.contains(format!("m{i}").as_bytes())));
        for i in 0..129 {
            assert!(s.remove(format!("m{i}").as_bytes()));
        }
        assert!(matches!(s, Set::Table(_)) && s.is_empty());

        let mut s = Set::for_member(b"a");
        s.add(b"a", 512);
        s.add(&[b'x'; 65], 512);
        assert!(matches!(s, Set::Table(_)) && s.contains(&[b'x'; 65]) && s.contains(b"a"));

        // An intset that takes a string member becomes the small form, one past its limit
        // the full table.
        let mut s = Set::new_intset();
        for i in 0..3 {
            s.add(i.to_string().as_bytes(), 3);
        }
        s.add(b"x", 3);
        assert!(matches!(s, Set::Small(_)) && s.len() == 4);
        let mut s = Set::new_intset();
        for i in 0..200 {
            s.add(i.to_string().as_bytes(), 200);
        }
        assert!(matches!(s, Set::Ints(_)));
        s.add(b"200", 200);
        assert!(matches!(s, Set::Table(_)) && s.len() == 201);
    }

    #[test]
    fn small_set_random_picks_and_scan() {
        let mut s = Set::for_member(b"a");
        for m in ["a", "b", "c", "d"] {
            s.add(m.as_bytes(), 512);
        }
        let mut rng = rand::thread_rng();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            seen.insert(s.random(&mut rng).map(|m| m.to_vec()));
        }
        assert_eq!(seen.len(), 4);
        let picked = s.random_distinct(3, &mut rng);
        let distinct: std::collections::HashSet<Vec<u8>> =
            picked.iter().map(|m| m.to_vec()).collect();
        assert_eq!(distinct.len(), 3);
        let mut scanned = Vec::new();
        assert_eq!(s.scan(0, 1, |m| scanned.push(m.to_vec())), 0);
        scanned.sort();
        assert_eq!(
            scanned,
            vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]
        );
        assert_eq!(s.pop_random(10, &mut rng).len(), 4);
        assert!(s.is_empty());
    }

    #[test]
    fn canonical_ints() {
        assert_eq!(canonical_i64(b"0"), Some(0));
        assert_eq!(canonical_i64(b"-1"), Some(-1));
        assert_eq!(canonical_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(canonical_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b"-0"[..],
            b"01",
            b"+1",
            b" 1",
            b"1 ",
            b"",
            b"-",
            b"9223372036854775808",
            b"1a",
            b"-9223372036854775809",
        ] {
            assert_eq!(
                canonical_i64(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn member_text() {
        for v in [0, 7, -7, 10, 1234567890, i64::MAX, i64::MIN] {
            assert_eq!(&*Member::from_int(v), v.to_string().as_bytes());
        }
    }

    #[test]
    fn intset_then_table() {
        let mut s = Set::for_member(b"17");
        assert!(s.add(b"17", 3));
        assert!(s.add(b"-5", 3));
        assert!(!s.add(b"17", 3));
        assert!(s.add(b"100", 3));
        assert_eq!(s.encoding_name(), "intset");
        let mut all: Vec<Vec<u8>> = s.iter().map(|m| m.to_vec()).collect();
        all.sort();
        assert_eq!(all, vec![b"-5".to_vec(), b"100".to_vec(), b"17".to_vec()]);
        assert!(s.contains(b"-5") && !s.contains(b"-05"));
        assert!(s.add(b"101", 3));
        assert_eq!(s.encoding_name(), "hashtable");
        assert!(s.contains(b"17") && s.contains(b"101"));
        assert!(s.remove(b"17"));
        assert_eq!(s.len(), 3);
        let mut s = Set::for_member(b"1");
        s.add(b"1", 512);
        s.add(b"a", 512);
        assert_eq!(s.encoding_name(), "hashtable");
        assert!(s.contains(b"1") && s.contains(b"a"));
    }

    #[test]
    fn pop_random_removes() {
        let mut s = Set::new_intset();
        for i in 0..20 {
            s.add(i.to_string().as_bytes(), 512);
        }
        let mut rng = rand::thread_rng();
        let p = s.pop_random(5, &mut rng);
        assert_eq!(p.len(), 5);
        assert_eq!(s.len(), 15);
        for m in &p {
            assert!(!s.contains(m));
        }
        let rest = s.pop_random(100, &mut rng);
        assert_eq!(rest.len(), 15);
        assert!(s.is_empty());
    }
}
