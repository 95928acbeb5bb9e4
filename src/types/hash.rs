//! Hash values, and the scan-stable slot table that large hashes and sets are built on.
//!
//! A [`Hash`] starts in a compact form (a vector of field/value pairs in insertion order, what
//! Redis calls a listpack) while it has at most `hash-max-listpack-entries` fields and every
//! field and value is at most `hash-max-listpack-value` bytes; past either limit it converts,
//! for good, to a hash table. The table is a [`Table`]: entries live in a slot vector (stable
//! positions, holes reused by later inserts) indexed by a `hashbrown::HashTable` of slot
//! numbers. HSCAN/SSCAN walk the slot vector with the position as cursor, which gives Redis's
//! guarantee: an element present for the whole scan is returned at least once. When a table
//! becomes very sparse it is compacted and its epoch (kept in the cursor's high bits) changes;
//! a cursor from an older epoch restarts the walk, so the guarantee survives compaction
//! (elements may then be returned twice, which SCAN allows).

use super::thin::{may_pass_safety_bound, varint_len, write_varint, Counted, PACKED_SAFETY_BYTES};
use crate::alloc::defrag::Relocator;
use hashbrown::HashTable;
use rand::Rng;
use std::hash::BuildHasher;

/// Limits for the compact hash form (`hash-max-listpack-entries` / `-value`).
#[derive(Clone, Copy, Debug)]
pub struct HashLimits {
    pub max_entries: usize,
    pub max_value: usize,
}

impl Default for HashLimits {
    fn default() -> Self {
        HashLimits {
            max_entries: 128,
            max_value: 64,
        }
    }
}

/// An element of a [`Table`]: something with a byte-string key.
pub trait Keyed {
    fn key(&self) -> &[u8];
}

impl Keyed for Box<[u8]> {
    fn key(&self) -> &[u8] {
        self
    }
}

impl Keyed for (Box<[u8]>, Box<[u8]>) {
    fn key(&self) -> &[u8] {
        &self.0
    }
}

/// Bits of a scan cursor holding the slot position; the bits above hold the table's epoch.
const POS_BITS: u32 = 40;
const POS_MASK: u64 = (1 << POS_BITS) - 1;

/// The hash function of every [`Table`]: seeded at random once per process, as Redis seeds
/// its dict hash once at startup. One per table cost each small set and hash its seed.
pub(crate) static TABLE_HASHER: std::sync::LazyLock<hashbrown::DefaultHashBuilder> =
    std::sync::LazyLock::new(hashbrown::DefaultHashBuilder::default);

/// Below this many slots the slot vector grows one slot at a time, so a small set or hash
/// holds no spare slots; past it, it doubles as usual.
const EXACT_GROWTH_BELOW: usize = 8;

/// A hash table with stable slot positions (see the module documentation).
#[derive(Clone)]
pub struct Table<T> {
    index: HashTable<u32>,
    slots: Vec<Option<T>>,
    free: Vec<u32>,
    /// Elements present (slots are u32 positions, so this fits too).
    len: u32,
    epoch: u32,
}

impl<T: Keyed> Default for Table<T> {
    fn default() -> Self {
        Table::with_capacity(0)
    }
}

impl<T: Keyed> Table<T> {
    pub fn with_capacity(n: usize) -> Table<T> {
        Table {
            index: HashTable::with_capacity(n),
            slots: Vec::with_capacity(n),
            free: Vec::new(),
            len: 0,
            epoch: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Slots allocated (tests of the growth policy).
    pub fn slot_capacity(&self) -> usize {
        self.slots.capacity()
    }

    /// Active defrag: the slot vector and free list (at the first call), then `f` on each
    /// element of slots `from..` up to `budget` slots; returns where to go on from, or None
    /// when done. The index (one block of its own, rebuilt by resizes) stays.
    pub(crate) fn defrag_slots(
        &mut self,
        r: &mut Relocator,
        from: usize,
        budget: usize,
        mut f: impl FnMut(&mut Relocator, &mut T),
    ) -> Option<usize> {
        if from == 0 {
            r.vec(&mut self.slots);
            r.vec(&mut self.free);
            // hashbrown gives no way to move its block, so a table in a sparse slab is
            // rebuilt as a copy (through the allocator's cache: a block of a dense slab).
            let first = self
                .index
                .iter()
                .next()
                .map(|e| (e as *const u32).cast::<u8>());
            if first.is_some_and(|p| r.picks(p)) {
                self.index = self.index.clone();
            }
        }
        let end = self.slots.len().min(from.saturating_add(budget));
        for t in self.slots[from.min(end)..end].iter_mut().flatten() {
            f(r, t);
        }
        (end < self.slots.len()).then_some(end)
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn hash(&self, key: &[u8]) -> u64 {
        TABLE_HASHER.hash_one(key)
    }

    /// Slot of `key`, if present.
    pub fn find(&self, key: &[u8]) -> Option<usize> {
        let h = self.hash(key);
        let slots = &self.slots;
        self.index
            .find(h, |&i| {
                slots[i as usize].as_ref().is_some_and(|e| e.key() == key)
            })
            .map(|&i| i as usize)
    }

    pub fn get(&self, key: &[u8]) -> Option<&T> {
        self.find(key).and_then(|i| self.slots[i].as_ref())
    }

    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut T> {
        let i = self.find(key)?;
        self.slots[i].as_mut()
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        self.find(key).is_some()
    }

    /// Insert an element whose key is known to be absent.
    pub fn insert_new(&mut self, e: T) {
        let h = self.hash(e.key());
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = Some(e);
                s
            }
            None => {
                if self.slots.len() == self.slots.capacity()
                    && self.slots.len() < EXACT_GROWTH_BELOW
                {
                    self.slots.reserve_exact(1);
                }
                self.slots.push(Some(e));
                (self.slots.len() - 1) as u32
            }
        };
        let hasher = &*TABLE_HASHER;
        let Table { index, slots, .. } = self;
        index.insert_unique(h, slot, |&i| {
            slots[i as usize]
                .as_ref()
                .map_or(0, |e| hasher.hash_one(e.key()))
        });
        self.len += 1;
    }

    /// Remove the element with `key`.
    pub fn remove(&mut self, key: &[u8]) -> Option<T> {
        let h = self.hash(key);
        let slots = &self.slots;
        let entry = self
            .index
            .find_entry(h, |&i| {
                slots[i as usize].as_ref().is_some_and(|e| e.key() == key)
            })
            .ok()?;
        let (slot, _) = entry.remove();
        let e = self.slots[slot as usize].take();
        self.len -= 1;
        if slot as usize + 1 == self.slots.len() {
            while matches!(self.slots.last(), Some(None)) {
                self.slots.pop();
            }
            let n = self.slots.len() as u32;
            self.free.retain(|&s| s < n);
        } else {
            self.free.push(slot);
        }
        if self.slots.len() > 64 && self.len() * 4 < self.slots.len() {
            self.compact();
        }
        e
    }

    /// Rewrite the slot vector densely. Positions change, so the epoch does too.
    fn compact(&mut self) {
        let old = std::mem::take(&mut self.slots);
        self.slots = old.into_iter().flatten().map(Some).collect();
        self.free.clear();
        self.free.shrink_to_fit();
        self.index = HashTable::with_capacity(self.slots.len());
        let hasher = &*TABLE_HASHER;
        let Table { index, slots, .. } = self;
        for (i, e) in slots.iter().enumerate() {
            if let Some(e) = e {
                let h = hasher.hash_one(e.key());
                index.insert_unique(h, i as u32, |&j| {
                    slots[j as usize]
                        .as_ref()
                        .map_or(0, |e| hasher.hash_one(e.key()))
                });
            }
        }
        self.epoch = (self.epoch + 1) & 0xff_ffff;
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.slots.iter().flatten()
    }

    /// A uniformly random element's slot (the table must not be empty).
    pub fn random_slot(&self, rng: &mut impl Rng) -> usize {
        debug_assert!(self.len > 0);
        loop {
            let i = rng.gen_range(0..self.slots.len());
            if self.slots[i].is_some() {
                return i;
            }
        }
    }

    pub fn at(&self, slot: usize) -> Option<&T> {
        self.slots.get(slot).and_then(|e| e.as_ref())
    }

    /// Slots of `count` distinct random elements (`count` < len).
    pub fn random_distinct_slots(&self, count: usize, rng: &mut impl Rng) -> Vec<usize> {
        if count * 3 > self.len() {
            // Many of them: shuffle the live slots partially.
            let live: Vec<usize> = (0..self.slots.len())
                .filter(|&i| self.slots[i].is_some())
                .collect();
            super::distinct_indices(live.len(), count.min(live.len()), rng)
                .into_iter()
                .map(|i| live[i])
                .collect()
        } else {
            let mut seen = hashbrown::HashSet::with_capacity(count);
            let mut out = Vec::with_capacity(count);
            while out.len() < count {
                let i = self.random_slot(rng);
                if seen.insert(i) {
                    out.push(i);
                }
            }
            out
        }
    }

    /// One step of a scan: visit elements from `cursor` until `count` were found (or 10 times
    /// that many slots were looked at). Returns the next cursor, 0 when done.
    pub fn scan(&self, cursor: u64, count: usize, mut f: impl FnMut(&T)) -> u64 {
        let mut pos = if (cursor >> POS_BITS) as u32 == self.epoch {
            (cursor & POS_MASK) as usize
        } else {
            0
        };
        let count = count.max(1);
        let mut found = 0;
        let mut budget = count.saturating_mul(10);
        while pos < self.slots.len() && found < count && budget > 0 {
            if let Some(e) = &self.slots[pos] {
                f(e);
                found += 1;
            }
            budget -= 1;
            pos += 1;
        }
        if pos >= self.slots.len() {
            0
        } else {
            ((self.epoch as u64) << POS_BITS) | pos as u64
        }
    }

    /// Approximate heap bytes used by the table itself (not the elements' contents).
    pub fn overhead_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Option<T>>()
            + self.index.capacity() * 5
            + self.free.capacity() * 4
    }
}

type Pair = (Box<[u8]>, Box<[u8]>);

/// The compact form: every field and value in one exactly sized byte array, in insertion
/// order, each as a LEB128 length followed by its bytes, after the number of pairs (a
/// [`Counted`]: what Redis's listpack is for a small hash, one allocation instead of one per
/// field and value, and one pointer inside the value). Lookups walk it, as Redis walks its
/// listpack; the form holds at most `hash-max-listpack-entries` pairs.
#[derive(Clone, Default)]
pub struct Packed {
    bytes: Counted,
}

/// The bytes of the item at `pos`, and the position after it.
fn item(bytes: &[u8], pos: usize) -> (&[u8], usize) {
    let (len, start) = super::get_varint(bytes, pos);
    (&bytes[start..start + len], start + len)
}

/// The pairs of a packed array, with each pair's start and end offsets.
struct PackedIter<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for PackedIter<'a> {
    type Item = (&'a [u8], &'a [u8], std::ops::Range<usize>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.bytes.len() {
            return None;
        }
        let start = self.pos;
        let (field, after_field) = item(self.bytes, start);
        let (value, end) = item(self.bytes, after_field);
        self.pos = end;
        Some((field, value, start..end))
    }
}

impl Packed {
    fn iter(&self) -> PackedIter<'_> {
        PackedIter {
            bytes: self.bytes.body(),
            pos: 0,
        }
    }

    fn find(&self, field: &[u8]) -> Option<(&[u8], std::ops::Range<usize>)> {
        self.iter()
            .find(|(f, _, _)| *f == field)
            .map(|(_, v, range)| (v, range))
    }

    fn nth(&self, i: usize) -> Option<(&[u8], &[u8])> {
        self.iter().nth(i).map(|(f, v, _)| (f, v))
    }

    fn pairs(&self) -> usize {
        self.bytes.count()
    }

    /// Replace `range` of the pairs' bytes with the pair (`field`, `value`), or with nothing,
    /// leaving `pairs` pairs: the array is resized in place and the pair encoded straight
    /// into it.
    fn splice(
        &mut self,
        range: std::ops::Range<usize>,
        pair: Option<(&[u8], &[u8])>,
        pairs: usize,
    ) {
        let added = pair.map_or(0, |(f, v)| {
            varint_len(f.len()) + f.len() + varint_len(v.len()) + v.len()
        });
        let out = self.bytes.splice(range, added, pairs);
        if let Some((field, value)) = pair {
            let mut at = write_varint(out, field.len());
            out[at..at + field.len()].copy_from_slice(field);
            at += field.len();
            at += write_varint(&mut out[at..], value.len());
            out[at..].copy_from_slice(value);
        }
    }
}

/// A hash value.
#[derive(Clone)]
pub enum Hash {
    /// Compact form (see [`Packed`]).
    Small(Packed),
    /// Hash-table form, boxed so that a hash stays as small as a keyspace slot's value.
    Large(Box<Table<Pair>>),
}

impl Default for Hash {
    fn default() -> Self {
        Hash::Small(Packed::default())
    }
}

impl Hash {
    pub fn new() -> Hash {
        Hash::default()
    }

    /// Active defrag: move the hash's blocks that sit in sparse slabs, fields `from` on, at
    /// most `budget` of them; returns where to go on from, or None when done.
    pub fn defrag(&mut self, r: &mut Relocator, from: usize, budget: usize) -> Option<usize> {
        match self {
            Hash::Small(p) => {
                p.bytes.defrag(r);
                None
            }
            Hash::Large(t) => {
                if from == 0 {
                    r.boxed(t);
                }
                t.defrag_slots(r, from, budget, |r, (field, value)| {
                    r.boxed_bytes(field);
                    r.boxed_bytes(value);
                })
            }
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Hash::Small(p) => p.pairs(),
            Hash::Large(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What OBJECT ENCODING reports.
    pub fn encoding_name(&self) -> &'static str {
        match self {
            Hash::Small(_) => "listpack",
            Hash::Large(_) => "hashtable",
        }
    }

    pub fn get(&self, field: &[u8]) -> Option<&[u8]> {
        match self {
            Hash::Small(p) => p.find(field).map(|(v, _)| v),
            Hash::Large(t) => t.get(field).map(|(_, v)| &v[..]),
        }
    }

    pub fn contains(&self, field: &[u8]) -> bool {
        self.get(field).is_some()
    }

    /// Convert to the hash-table form (no-op if already there).
    pub fn convert_to_large(&mut self) {
        if let Hash::Small(p) = self {
            let mut t = Table::with_capacity(p.pairs());
            for (f, v, _) in p.iter() {
                t.insert_new((f.into(), v.into()));
            }
            *self = Hash::Large(Box::new(t));
        }
    }

    /// Set `field` to `value`; returns true if the field is new.
    pub fn set(&mut self, field: &[u8], value: &[u8], limits: &HashLimits) -> bool {
        if let Hash::Small(p) = self {
            if field.len() > limits.max_value
                || value.len() > limits.max_value
                || (may_pass_safety_bound(limits.max_entries, 2 * limits.max_value + 20)
                    && p.bytes.body().len() + field.len() + value.len() + 20 > PACKED_SAFETY_BYTES)
            {
                self.convert_to_large();
            }
        }
        match self {
            Hash::Small(p) => {
                if let Some((old, range)) = p.find(field) {
                    if old != value {
                        p.splice(range, Some((field, value)), p.pairs());
                    }
                    return false;
                }
                let (end, pairs) = (p.bytes.body().len(), p.pairs() + 1);
                p.splice(end..end, Some((field, value)), pairs);
                if pairs > limits.max_entries {
                    self.convert_to_large();
                }
                true
            }
            Hash::Large(t) => {
                if let Some(p) = t.get_mut(field) {
                    p.1 = value.into();
                    return false;
                }
                t.insert_new((field.into(), value.into()));
                true
            }
        }
    }

    /// Remove `field`; true if it was there.
    pub fn remove(&mut self, field: &[u8]) -> bool {
        match self {
            Hash::Small(p) => match p.find(field) {
                Some((_, range)) => {
                    let pairs = p.pairs() - 1;
                    p.splice(range, None, pairs);
                    true
                }
                None => false,
            },
            Hash::Large(t) => t.remove(field).is_some(),
        }
    }

    /// Every field/value pair (insertion order for the compact form).
    pub fn iter(&self) -> Box<dyn Iterator<Item = (&[u8], &[u8])> + '_> {
        match self {
            Hash::Small(p) => Box::new(p.iter().map(|(f, v, _)| (f, v))),
            Hash::Large(t) => Box::new(t.iter().map(|(f, v)| (&f[..], &v[..]))),
        }
    }

    /// A uniformly random pair (None if empty).
    pub fn random(&self, rng: &mut impl Rng) -> Option<(&[u8], &[u8])> {
        if self.is_empty() {
            return None;
        }
        match self {
            Hash::Small(p) => p.nth(rng.gen_range(0..p.pairs())),
            Hash::Large(t) => t.at(t.random_slot(rng)).map(|(f, v)| (&f[..], &v[..])),
        }
    }

    /// `count` distinct random pairs (all of them, in order, if count >= len).
    pub fn random_distinct(&self, count: usize, rng: &mut impl Rng) -> Vec<(&[u8], &[u8])> {
        let n = self.len();
        if count >= n {
            return self.iter().collect();
        }
        match self {
            Hash::Small(p) => {
                let all: Vec<(&[u8], &[u8])> = p.iter().map(|(f, v, _)| (f, v)).collect();
                super::distinct_indices(n, count, rng)
                    .into_iter()
                    .map(|i| all[i])
                    .collect()
            }
            Hash::Large(t) => t
                .random_distinct_slots(count, rng)
                .into_iter()
                .filter_map(|s| t.at(s))
                .map(|(f, v)| (&f[..], &v[..]))
                .collect(),
        }
    }

    /// HSCAN step: the compact form returns everything with cursor 0.
    pub fn scan(&self, cursor: u64, count: usize, mut f: impl FnMut(&[u8], &[u8])) -> u64 {
        match self {
            Hash::Small(p) => {
                for (k, v, _) in p.iter() {
                    f(k, v);
                }
                0
            }
            Hash::Large(t) => t.scan(cursor, count, |(k, v)| f(k, v)),
        }
    }

    /// Heap bytes (MEMORY USAGE): the compact form's one array; the table's slots and index
    /// with every field and value (each boxed slice's allocation).
    pub fn heap_bytes(&self) -> usize {
        match self {
            Hash::Small(p) => p.bytes.heap_bytes(),
            Hash::Large(t) => {
                let contents: usize = t
                    .iter()
                    .map(|(f, v)| {
                        crate::alloc::size_class(f.len()) + crate::alloc::size_class(v.len())
                    })
                    .sum();
                std::mem::size_of::<Table<Pair>>() + contents + t.overhead_bytes()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lim(e: usize, v: usize) -> HashLimits {
        HashLimits {
            max_entries: e,
            max_value: v,
        }
    }

    #[test]
    fn small_then_large_by_count() {
        let l = lim(4, 64);
        let mut h = Hash::new();
        for i in 0..4 {
            assert!(h.set(format!("f{i}").as_bytes(), b"v", &l));
        }
        assert_eq!(h.encoding_name(), "listpack");
        assert!(!h.set(b"f0", b"w", &l));
        assert_eq!(h.get(b"f0"), Some(&b"w"[..]));
        assert!(h.set(b"f4", b"v", &l));
        assert_eq!(h.encoding_name(), "hashtable");
        assert_eq!(h.len(), 5);
        assert_eq!(h.get(b"f0"), Some(&b"w"[..]));
        assert!(h.remove(b"f0"));
        assert!(!h.remove(b"f0"));
        assert_eq!(h.len(), 4);
        // Never converts back.
        assert_eq!(h.encoding_name(), "hashtable");
    }

    /// The packed form keeps insertion order through replacements and removals, and lengths
    /// that need more than one varint byte.
    #[test]
    fn packed_pairs_survive_edits() {
        let l = lim(128, 1000);
        let mut h = Hash::new();
        let long = vec![b'x'; 300];
        assert!(h.set(b"a", b"1", &l));
        assert!(h.set(&long, b"2", &l));
        assert!(h.set(b"c", &long, &l));
        assert!(!h.set(b"a", b"one", &l));
        assert!(!h.set(b"c", b"", &l));
        assert_eq!(h.encoding_name(), "listpack");
        let pairs: Vec<(Vec<u8>, Vec<u8>)> =
            h.iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect();
        assert_eq!(
            pairs,
            vec![
                (b"a".to_vec(), b"one".to_vec()),
                (long.clone(), b"2".to_vec()),
                (b"c".to_vec(), Vec::new()),
            ]
        );
        assert!(h.remove(&long));
        assert!(!h.remove(&long));
        assert_eq!(h.len(), 2);
        assert_eq!(h.get(b"c"), Some(&b""[..]));
        assert_eq!(h.get(b"a"), Some(&b"one"[..]));
        assert!(h.remove(b"a") && h.remove(b"c"));
        assert!(h.is_empty());
        assert_eq!(h.heap_bytes(), 0);
    }

    #[test]
    fn large_by_value_length() {
        let l = lim(128, 8);
        let mut h = Hash::new();
        h.set(b"abcdefgh", b"12345678", &l);
        assert_eq!(h.encoding_name(), "listpack");
        h.set(b"x", b"123456789", &l);
        assert_eq!(h.encoding_name(), "hashtable");
        let mut h = Hash::new();
        h.set(b"abcdefghi", b"1", &l);
        assert_eq!(h.encoding_name(), "hashtable");
    }

    #[test]
    fn scan_survives_shrink() {
        let mut t: Table<Box<[u8]>> = Table::default();
        for i in 0..2000 {
            t.insert_new(format!("{i}").into_bytes().into());
        }
        let mut seen = hashbrown::HashSet::new();
        let mut cur = 0;
        let mut steps = 0;
        loop {
            cur = t.scan(cur, 10, |e| {
                seen.insert(e.clone());
            });
            steps += 1;
            if steps == 3 {
                for i in 100..2000 {
                    assert!(t.remove(format!("{i}").as_bytes()).is_some());
                }
            }
            if cur == 0 {
                break;
            }
        }
        for i in 0..100 {
            assert!(seen.contains(format!("{i}").as_bytes()), "missing {i}");
        }
        assert_eq!(t.len(), 100);
        for i in 0..100 {
            assert!(t.contains(format!("{i}").as_bytes()));
        }
    }

    #[test]
    fn random_distinct_is_distinct() {
        let l = lim(0, 64);
        let mut h = Hash::new();
        for i in 0..50 {
            h.set(format!("f{i}").as_bytes(), b"v", &l);
        }
        let mut rng = rand::thread_rng();
        for count in [1, 5, 20, 49] {
            let got = h.random_distinct(count, &mut rng);
            let set: hashbrown::HashSet<_> = got.iter().map(|(f, _)| f.to_vec()).collect();
            assert_eq!(set.len(), count);
        }
    }
}
