//! `Table`: a shard's one table of keys, a hash table of cache-line buckets that owns the
//! shard's records and that SCAN walks directly.
//!
//! A shard used to keep two tables per key: a hashbrown index of record pointers (an 8-byte
//! slot and a control byte, at a load of 0.44-0.875) and a SCAN vector of the same pointers
//! that gave each key a stable position for SCAN's cursor, with a free list beside it: about
//! 24 bytes per key. This table is both, in the manner of Valkey 8.1's hashtable:
//!
//! ```text
//! bucket (64 bytes, one cache line, 64-byte aligned):
//! [ meta: u8 | tags: [u8; 7] | slots: [record pointer; 7] ]
//! meta: bits 0-6 say which slots hold a record, bit 7 says the bucket is chained
//! tags: 8 bits of each record's hash (the top byte), so a lookup compares keys only on a
//!       tag match
//! ```
//!
//! A key's home bucket is `hash & (buckets - 1)`, the bucket count a power of two. When a
//! home bucket and its chain are full, the last slot of the chain's last bucket is turned
//! into a pointer to a new child bucket (separately allocated), its record moving there; a
//! chained bucket holds six records and the link. The chain stays compact: every bucket but
//! the last of a chain is full (a removal refills its hole from the last bucket, and an empty
//! last child is freed), so an insert only looks at free slots of the chain's last bucket.
//! A key is only ever in its home bucket or that bucket's chain.
//!
//! The table grows (doubles) at eight keys per bucket on average, one past a bucket's seven
//! slots, so that it runs dense and the fuller buckets chain (a lookup of a key in a child
//! reads a second cache line), and is shrunk by its shard (`shrink_to`) when it has become
//! sparse; a resize rehashes every key at once (no incremental rehashing: a resize never runs
//! while a SCAN is in a call). With 4 to 8 keys per bucket, plus the child buckets of the
//! fuller ones, the table costs about 8-18 bytes per key, 12 on average over a doubling.
//!
//! SCAN walks the buckets with Redis's reverse-binary cursor: the cursor is a bucket index
//! whose bits are incremented from the top down (`scan`). Doubling the table splits bucket
//! `i` into `i` and `i + n`, which that order visits one right after the other, and halving
//! it merges them into the one bucket the cursor names next; so a key present for a whole
//! scan is returned at least once, however the table was resized between the calls (a
//! merged bucket may return some keys twice, as in Redis). Each call visits whole chains,
//! which the cursor cannot point inside.
//!
//! Following a record pointer is `unsafe` (see `record`); the table is where they are
//! owned: every pointer in a slot is a record made by [`Record::into_ref`] and owned by this
//! table, freed by `remove` (which hands it back as a [`Record`]) or by the table's drop.
//! Every block says why it holds, and the tests below exercise each.

use super::record::{EntryRef, Record, RecordRef};
use crate::alloc::defrag::Relocator;
use hashbrown::DefaultHashBuilder;
use std::alloc::Layout;
use std::hash::BuildHasher;
use std::ptr::NonNull;

/// Slots of a bucket.
const SLOTS: usize = 7;
/// Keys per bucket, on average, at which the table doubles: past a bucket's seven slots, so
/// that the fuller buckets chain (see the module's description).
const FILL: usize = 8;
/// The slot of a chained bucket that holds its child's pointer.
const CHILD: usize = SLOTS - 1;
/// `meta` bits of the slots that hold a record.
const PRESENT: u8 = 0x7f;
/// `meta` bit of a bucket whose last slot links a child bucket.
const CHAINED: u8 = 0x80;
/// `meta` bits of the slots a chained bucket may use for records.
const CHAINED_USABLE: u8 = PRESENT & !(1 << CHILD);
/// The bucket count never goes beyond 2^40, so a bucket cursor fits in 40 bits (SCAN puts
/// the shard above them). Tables that large (64 TiB of buckets) cannot be allocated anyway;
/// past it the buckets would only chain further.
const MAX_BUCKETS: u64 = 1 << 40;

/// One cache line of the table (see the module's description).
#[repr(C, align(64))]
struct Bucket {
    meta: u8,
    tags: [u8; SLOTS],
    /// A record's head for a present slot; the child bucket in slot `CHILD` of a chained one.
    slots: [Option<NonNull<u8>>; SLOTS],
}

const _: () = assert!(std::mem::size_of::<Bucket>() == 64);

impl Bucket {
    const EMPTY: Bucket = Bucket {
        meta: 0,
        tags: [0; SLOTS],
        slots: [None; SLOTS],
    };

    #[inline]
    fn present(&self) -> u8 {
        self.meta & PRESENT
    }

    /// Present slots whose tag is `tag`.
    #[inline]
    fn matching(&self, tag: u8) -> u8 {
        let mut m = 0u8;
        for (i, &t) in self.tags.iter().enumerate() {
            m |= u8::from(t == tag) << i;
        }
        m & self.present()
    }

    /// The child bucket of a chained bucket.
    #[inline]
    fn child(&self) -> Option<NonNull<Bucket>> {
        if self.meta & CHAINED == 0 {
            return None;
        }
        self.slots[CHILD].map(NonNull::cast)
    }

    #[inline]
    fn record(&self, slot: usize) -> RecordRef {
        match self.slots[slot] {
            Some(p) => RecordRef::from_raw(p),
            // A present slot always holds a pointer (`put` writes both together).
            None => unreachable!("present slot without a record"),
        }
    }

    #[inline]
    fn put(&mut self, slot: usize, tag: u8, r: RecordRef) {
        self.slots[slot] = Some(r.raw());
        self.tags[slot] = tag;
        self.meta |= 1 << slot;
    }

    #[inline]
    fn take(&mut self, slot: usize) -> (u8, RecordRef) {
        let r = self.record(slot);
        self.slots[slot] = None;
        self.meta &= !(1 << slot);
        (self.tags[slot], r)
    }
}

/// The tag a bucket keeps of a hash: its top byte (the bucket index comes from the low bits).
#[inline]
fn tag_of(hash: u64) -> u8 {
    (hash >> 56) as u8
}

/// Buckets for `len` keys at the most of seven per bucket: 0 for none.
fn buckets_for(len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    len.div_ceil(FILL)
        .next_power_of_two()
        .min(MAX_BUCKETS as usize)
}

fn array_layout(n: usize) -> Layout {
    // n <= 2^40 buckets of 64 bytes stays far below isize::MAX on the 64-bit targets Podium
    // builds for; this cannot fail.
    Layout::array::<Bucket>(n).unwrap_or_else(|_| panic!("keyspace table of {n} buckets"))
}

/// A shard's keys: owns their records (see the module's description).
pub struct Table<S = DefaultHashBuilder> {
    /// `n` buckets, or dangling when `n` is 0.
    buckets: NonNull<Bucket>,
    /// Bucket count: 0 or a power of two.
    n: usize,
    /// Records held.
    len: usize,
    /// Child buckets allocated.
    children: usize,
    hasher: S,
}

// SAFETY: a Table owns its bucket array, its child buckets and its records outright (like a
// Vec<Box<Bucket>> of Box<Record>s); nothing else points into them except RecordRef copies
// its shard keeps, which are followed only under the same shard. Records are Send and Sync
// (record.rs), so moving or sharing the table is as safe as moving or sharing those boxes.
unsafe impl<S: Send> Send for Table<S> {}
// SAFETY: see Send: `&Table` only gives out `&[u8]` and entries of its records.
unsafe impl<S: Sync> Sync for Table<S> {}

impl Default for Table<DefaultHashBuilder> {
    fn default() -> Self {
        Table::with_hasher(DefaultHashBuilder::default())
    }
}

impl<S: BuildHasher> Table<S> {
    pub fn with_hasher(hasher: S) -> Self {
        Table {
            buckets: NonNull::dangling(),
            n: 0,
            len: 0,
            children: 0,
            hasher,
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keys the table holds before it grows: [`FILL`] per bucket on average.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.n * FILL
    }

    /// Bytes allocated for the buckets, home and child (jemalloc's size classes).
    pub fn alloc_bytes(&self) -> usize {
        crate::alloc::size_class(self.n * std::mem::size_of::<Bucket>())
            + self.children * crate::alloc::size_class(std::mem::size_of::<Bucket>())
    }

    #[inline]
    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The home bucket of `hash`; the table must have buckets.
    #[inline]
    fn home(&self, hash: u64) -> NonNull<Bucket> {
        debug_assert!(self.n > 0);
        let i = hash as usize & (self.n - 1);
        // SAFETY: i < n, and `buckets` is an array of n buckets when n > 0.
        unsafe { self.buckets.add(i) }
    }

    /// The record of `key`, if present.
    #[inline]
    pub fn find(&self, key: &[u8]) -> Option<RecordRef> {
        if self.n == 0 {
            return None;
        }
        let hash = self.hash(key);
        let tag = tag_of(hash);
        let mut at = self.home(hash);
        loop {
            // SAFETY: `at` is the home bucket (inside the array) or a child linked from its
            // chain; the table owns both, alive and unchanged while `&self` is held.
            let b = unsafe { at.as_ref() };
            let mut m = b.matching(tag);
            while m != 0 {
                let slot = m.trailing_zeros() as usize;
                m &= m - 1;
                let r = b.record(slot);
                // SAFETY: a present slot holds a record this table owns, alive while `&self`
                // is held, and nothing borrows it mutably meanwhile.
                if unsafe { r.key() } == key {
                    return Some(r);
                }
            }
            at = b.child()?;
        }
    }

    /// The entry of `key`, if present, as a reader sees it (see `record::EntryRef`).
    #[inline]
    pub fn get(&self, key: &[u8]) -> Option<EntryRef<'_>> {
        let r = self.find(key)?;
        // SAFETY: `r` is a record this table owns; the borrow of self keeps it alive and
        // unchanged for the returned borrow.
        Some(unsafe { r.entry() })
    }

    /// Put `new` where `old` is (the same key's record, in another form), handing `old` back
    /// to the caller. False, and `new` dropped, if `old` is not in the table.
    pub fn replace(&mut self, old: RecordRef, new: Record) -> Option<Record> {
        // SAFETY: `old` is followed only if the table holds it (the caller's copy of a record
        // this table owns); its key is read before anything changes.
        let hash = self.hash(unsafe { old.key() });
        let mut at = self.home(hash);
        loop {
            // SAFETY: `at` is a bucket of this table (see `find`), and `&mut self` makes this
            // the only reference to it.
            let b = unsafe { at.as_mut() };
            let mut m = b.present();
            while m != 0 {
                let slot = m.trailing_zeros() as usize;
                m &= m - 1;
                if b.record(slot) == old {
                    b.slots[slot] = Some(new.into_ref().raw());
                    // SAFETY: `old` came from `Record::into_ref` when it was inserted and has
                    // just left the table, so it is owned once again.
                    return Some(unsafe { Record::from_ref(old) });
                }
            }
            at = b.child()?;
        }
    }

    /// Start loading the bucket a lookup of `key` reads first. Only a hint.
    #[inline]
    pub fn prefetch(&self, key: &[u8]) {
        if self.n > 0 {
            let at = self.home(self.hash(key));
            crate::types::located::prefetch_addr(at.as_ptr() as usize);
        }
    }

    /// Add a record whose key is not in the table (the caller has looked), growing it when
    /// it is full on average.
    pub fn insert_new(&mut self, record: Record) {
        if self.len >= self.capacity() && (self.n as u64) < MAX_BUCKETS {
            self.resize((self.n * 2).max(1));
        }
        let hash = self.hash(record.key());
        self.place(hash, record.into_ref());
        self.len += 1;
    }

    /// Put `r` in the chain of `hash`'s home bucket, chaining a child if the chain is full.
    fn place(&mut self, hash: u64, r: RecordRef) {
        let tag = tag_of(hash);
        let mut at = self.home(hash);
        loop {
            // SAFETY: `at` is a bucket of this table (see `find`), and `&mut self` makes this
            // the only reference to it.
            let b = unsafe { at.as_mut() };
            let usable = if b.meta & CHAINED != 0 {
                CHAINED_USABLE
            } else {
                PRESENT
            };
            let free = !b.meta & usable;
            if free != 0 {
                b.put(free.trailing_zeros() as usize, tag, r);
                return;
            }
            if let Some(child) = b.child() {
                at = child;
                continue;
            }
            // The chain's last bucket is full: its last record moves to a new child, whose
            // link takes the slot.
            let mut child = Box::new(Bucket::EMPTY);
            let (moved_tag, moved) = b.take(CHILD);
            child.put(0, moved_tag, moved);
            child.put(1, tag, r);
            b.slots[CHILD] = Some(NonNull::from(Box::leak(child)).cast());
            b.meta |= CHAINED;
            self.children += 1;
            return;
        }
    }

    /// Take `key`'s record out of the table, if present.
    pub fn remove(&mut self, key: &[u8]) -> Option<Record> {
        if self.n == 0 {
            return None;
        }
        let hash = self.hash(key);
        let tag = tag_of(hash);
        // Find the bucket and slot, and the bucket before it in the chain.
        let mut parent: Option<NonNull<Bucket>> = None;
        let mut at = self.home(hash);
        let slot = 'found: loop {
            // SAFETY: as in `find`; nothing is changed during the search.
            let b = unsafe { at.as_ref() };
            let mut m = b.matching(tag);
            while m != 0 {
                let slot = m.trailing_zeros() as usize;
                m &= m - 1;
                // SAFETY: as in `find`.
                if unsafe { b.record(slot).key() } == key {
                    break 'found slot;
                }
            }
            parent = Some(at);
            at = b.child()?;
        };
        // SAFETY: `at` is a bucket of this table, and `&mut self` makes this the only
        // reference to it.
        let (_, r) = unsafe { at.as_mut() }.take(slot);
        // Keep the chain compact: refill the hole from the chain's last bucket, and free
        // that bucket if it is an empty child.
        let mut last = at;
        // SAFETY: as above; each link is a child bucket of this chain.
        while let Some(child) = unsafe { last.as_ref() }.child() {
            parent = Some(last);
            last = child;
        }
        if last != at {
            // SAFETY: `last` and `at` are distinct buckets of this table; the references
            // are used one after the other.
            let l = unsafe { last.as_mut() };
            let from = l.present().trailing_zeros() as usize;
            if from < SLOTS {
                let (t, moved) = l.take(from);
                // SAFETY: as above.
                unsafe { at.as_mut() }.put(slot, t, moved);
            }
        }
        // SAFETY: as above.
        let last_empty = unsafe { last.as_ref() }.present() == 0;
        if last_empty {
            if let Some(mut p) = parent {
                // SAFETY: `p` links `last`, a child this table allocated with Box::new and
                // owns; it is unlinked here and freed once.
                unsafe {
                    let p = p.as_mut();
                    p.slots[CHILD] = None;
                    p.meta &= !CHAINED;
                    drop(Box::from_raw(last.as_ptr()));
                }
                self.children -= 1;
            }
        }
        self.len -= 1;
        // SAFETY: `r` came from `Record::into_ref` when it was inserted, was owned by this
        // table alone and has just left it, so it is owned once again.
        Some(unsafe { Record::from_ref(r) })
    }

    /// Rebuild the table with `n` buckets (0 or a power of two), rehashing every key.
    fn resize(&mut self, n: usize) {
        debug_assert!(n == 0 || n.is_power_of_two());
        let (old, old_n) = (self.buckets, self.n);
        self.buckets = if n == 0 {
            NonNull::dangling()
        } else {
            let layout = array_layout(n);
            // SAFETY: the layout has a non-zero size (n > 0 buckets of 64 bytes).
            let p = unsafe { std::alloc::alloc_zeroed(layout) };
            // All-zero bytes are an empty bucket: no meta bits, no tags, `None` slots.
            match NonNull::new(p.cast::<Bucket>()) {
                Some(p) => p,
                None => std::alloc::handle_alloc_error(layout),
            }
        };
        self.n = n;
        self.children = 0;
        debug_assert!(n > 0 || self.len == 0, "resize to nothing with keys left");
        // SAFETY: `old` is the array of `old_n` buckets this table held until just now, with
        // its chains; nothing else reaches it, and each record moves to the new buckets.
        unsafe {
            take_apart(old, old_n, |r| {
                // SAFETY: the record is owned by this table (it moves from the old buckets to
                // the new), alive and not borrowed elsewhere.
                let hash = self.hash(r.key());
                if n > 0 {
                    self.place(hash, r);
                }
            })
        };
    }

    /// Shrink to the fewest buckets that hold `len` keys (at least the current count), if
    /// that is fewer than now.
    pub fn shrink_to(&mut self, len: usize) {
        let n = buckets_for(len.max(self.len));
        if n < self.n {
            self.resize(n);
        }
    }

    /// Visit the chain the bucket cursor `cursor` names, calling `f` with each key and entry,
    /// and return the next cursor, 0 after the last bucket. The cursor is Redis's: the bucket
    /// index's bits are incremented from the top down, which is what keeps keys present for a
    /// whole scan from being missed across resizes (see the module's description). The
    /// cursors this returns stay below 2^40.
    pub fn scan(&self, cursor: u64, mut f: impl FnMut(&[u8], &EntryRef<'_>)) -> u64 {
        if self.n == 0 {
            return 0;
        }
        let mask = (self.n - 1) as u64;
        let mut at = Some(self.home(cursor));
        while let Some(p) = at {
            // SAFETY: as in `find`.
            let b = unsafe { p.as_ref() };
            let mut m = b.present();
            while m != 0 {
                let slot = m.trailing_zeros() as usize;
                m &= m - 1;
                let r = b.record(slot);
                // SAFETY: as in `get`.
                unsafe { f(r.key(), &r.entry()) };
            }
            at = b.child();
        }
        // Set the bits above the mask so the increment carries through them, then add one
        // to the reversed cursor.
        let v = (cursor | !mask).reverse_bits().wrapping_add(1);
        v.reverse_bits()
    }

    /// Active defrag of the chain the bucket cursor `cursor` names (the order of [`scan`]):
    /// each child bucket of the chain moves if the relocator picks it, and `f` is shown each
    /// record, returning its moved copy (the slot then points at it) or None. Returns the next
    /// cursor, 0 after the last bucket.
    ///
    /// [`scan`]: Table::scan
    pub fn defrag_chain(
        &mut self,
        cursor: u64,
        r: &mut Relocator,
        mut f: impl FnMut(RecordRef, &mut Relocator) -> Option<RecordRef>,
    ) -> u64 {
        if self.n == 0 {
            return 0;
        }
        let mask = (self.n - 1) as u64;
        let mut at = Some(self.home(cursor));
        while let Some(mut p) = at {
            // SAFETY: `p` is a bucket of this table (see `find`), and `&mut self` makes this
            // the only reference to it.
            let b = unsafe { p.as_mut() };
            let mut m = b.present();
            while m != 0 {
                let slot = m.trailing_zeros() as usize;
                m &= m - 1;
                if let Some(moved) = f(b.record(slot), r) {
                    b.slots[slot] = Some(moved.raw());
                }
            }
            at = b.child();
            if let Some(child) = at {
                // SAFETY: a child bucket is this table's own Box<Bucket> block, reached only
                // through this link, which is replaced by the moved block's address at once.
                if let Some(moved) = unsafe { r.relocate(child.cast(), Layout::new::<Bucket>()) } {
                    b.slots[CHILD] = Some(moved);
                    at = Some(moved.cast());
                }
            }
        }
        let v = (cursor | !mask).reverse_bits().wrapping_add(1);
        v.reverse_bits()
    }

    /// Every key and entry, bucket by bucket.
    pub fn iter(&self) -> Iter<'_, S> {
        Iter {
            table: self,
            next_home: 0,
            at: None,
            left: 0,
        }
    }

    /// A key picked at random, close to uniformly: from a random bucket on, the chains are
    /// walked until at least 15 keys were seen, and one of those is picked uniformly
    /// (reservoir sampling), so a key in a crowded bucket is about as likely as one alone.
    pub fn random_key(&self, rng: &mut impl rand::Rng) -> Option<&[u8]> {
        const SEEN: usize = 15;
        if self.len == 0 {
            return None;
        }
        let start = rng.gen_range(0..self.n);
        let mut seen = 0usize;
        let mut pick = None;
        for step in 0..self.n {
            let mut at = Some(self.home((start + step) as u64));
            while let Some(p) = at {
                // SAFETY: as in `find`.
                let b = unsafe { p.as_ref() };
                let mut m = b.present();
                while m != 0 {
                    let slot = m.trailing_zeros() as usize;
                    m &= m - 1;
                    seen += 1;
                    if rng.gen_range(0..seen) == 0 {
                        pick = Some(b.record(slot));
                    }
                }
                at = b.child();
            }
            if seen >= SEEN {
                break;
            }
        }
        // SAFETY: as in `get`: the record is owned by this table, borrowed through &self.
        pick.map(|r| unsafe { r.key() })
    }

    /// Chains longer than one bucket, and the longest (tests).
    #[cfg(test)]
    fn chain_stats(&self) -> (usize, usize) {
        let mut chained = 0;
        let mut longest = 0;
        for i in 0..self.n {
            let mut len = 0;
            let mut at = Some(self.home(i as u64));
            while let Some(p) = at {
                len += 1;
                // SAFETY: as in `find`.
                at = unsafe { p.as_ref() }.child();
            }
            chained += usize::from(len > 1);
            longest = longest.max(len);
        }
        (chained, longest)
    }
}

impl<S> Drop for Table<S> {
    fn drop(&mut self) {
        // SAFETY: the table's own array and chains, finished with; each present slot's record
        // is owned by this table alone and is freed once, here.
        unsafe { take_apart(self.buckets, self.n, |r| drop(Record::from_ref(r))) };
    }
}

/// Hand every record of the `n` buckets at `buckets` (and of their chains) to `f`, free the
/// child buckets, then the array: what a resize (the records move on) and a drop (they are
/// freed) share.
///
/// # Safety
/// `buckets` must be an array of `n` buckets allocated by `resize` (dangling if `n` is 0),
/// with child buckets made by `Box::new`, owned by the caller and not used after this call;
/// `f` takes over each record.
unsafe fn take_apart(buckets: NonNull<Bucket>, n: usize, mut f: impl FnMut(RecordRef)) {
    for i in 0..n {
        // SAFETY: i < n, inside the array.
        let mut at = unsafe { buckets.add(i) };
        let mut is_child = false;
        loop {
            // SAFETY: a bucket of the array or of its chain, visited once.
            let b = unsafe { at.as_ref() };
            let mut m = b.present();
            while m != 0 {
                let slot = m.trailing_zeros() as usize;
                m &= m - 1;
                f(b.record(slot));
            }
            let next = b.child();
            if is_child {
                // SAFETY: a child allocated with Box::new, freed once, after its last use.
                drop(unsafe { Box::from_raw(at.as_ptr()) });
            }
            match next {
                Some(c) => {
                    at = c;
                    is_child = true;
                }
                None => break,
            }
        }
    }
    if n > 0 {
        // SAFETY: the array was allocated in `resize` with this layout, and its buckets and
        // their children are finished with.
        unsafe { std::alloc::dealloc(buckets.as_ptr().cast::<u8>(), array_layout(n)) };
    }
}

/// Iterator over a table's keys and entries ([`Table::iter`]).
pub struct Iter<'a, S> {
    table: &'a Table<S>,
    next_home: usize,
    at: Option<NonNull<Bucket>>,
    /// Present slots of `at` not yielded yet.
    left: u8,
}

impl<'a, S> Iterator for Iter<'a, S> {
    type Item = (&'a [u8], EntryRef<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(p) = self.at {
                // SAFETY: a bucket of the table, which `'a` keeps borrowed and unchanged.
                let b = unsafe { p.as_ref() };
                if self.left != 0 {
                    let slot = self.left.trailing_zeros() as usize;
                    self.left &= self.left - 1;
                    let r = b.record(slot);
                    // SAFETY: the record is owned by the table, borrowed for `'a`.
                    return Some(unsafe { (r.key(), r.entry()) });
                }
                self.at = b.child();
            }
            if self.at.is_none() {
                if self.next_home >= self.table.n {
                    return None;
                }
                // SAFETY: next_home < n, inside the array.
                self.at = Some(unsafe { self.table.buckets.add(self.next_home) });
                self.next_home += 1;
            }
            if let Some(p) = self.at {
                // SAFETY: as above.
                self.left = unsafe { p.as_ref() }.present();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Value;
    use rand::SeedableRng;
    use std::collections::HashSet;

    fn record(key: &[u8]) -> Record {
        let v = Value::Str(crate::types::compact::CompactBytes::new(key));
        Record::new(key, v, u32::MAX, 0)
    }

    fn key(i: usize) -> Vec<u8> {
        format!("key:{i:08}").into_bytes()
    }

    /// A hasher that keeps only a few bits of the key's hash, so keys collide in crowds.
    #[derive(Clone, Default)]
    struct Crowded {
        bits: u32,
    }
    struct CrowdedHasher {
        inner: std::collections::hash_map::DefaultHasher,
        bits: u32,
    }
    impl std::hash::Hasher for CrowdedHasher {
        fn write(&mut self, b: &[u8]) {
            self.inner.write(b)
        }
        fn finish(&self) -> u64 {
            let h = self.inner.finish();
            // Low bits (the bucket) from `bits` bits of the hash; the tag keeps varying.
            (h & ((1u64 << self.bits) - 1)) | (h & 0xff00_0000_0000_0000)
        }
    }
    impl BuildHasher for Crowded {
        type Hasher = CrowdedHasher;
        fn build_hasher(&self) -> CrowdedHasher {
            CrowdedHasher {
                inner: Default::default(),
                bits: self.bits,
            }
        }
    }

    fn check<S: BuildHasher>(t: &Table<S>, live: &HashSet<Vec<u8>>) {
        assert_eq!(t.len(), live.len());
        for k in live {
            let e = t.get(k).expect("present");
            assert!(matches!(&e.value, Value::Str(s) if s[..] == k[..]));
        }
        let all: Vec<&[u8]> = t.iter().map(|(k, _)| k).collect();
        assert_eq!(all.len(), live.len());
        let distinct: HashSet<&[u8]> = all.iter().copied().collect();
        assert_eq!(distinct.len(), live.len());
        // Chains are compact: every bucket but a chain's last is full.
        for i in 0..t.n {
            let mut at = Some(t.home(i as u64));
            while let Some(p) = at {
                // SAFETY: a bucket of `t`, borrowed through `&t`.
                let b = unsafe { p.as_ref() };
                at = b.child();
                if at.is_some() {
                    assert_eq!(b.present(), CHAINED_USABLE, "a chained bucket is full");
                }
            }
        }
    }

    #[test]
    fn bucket_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Bucket>(), 64);
        assert_eq!(std::mem::align_of::<Bucket>(), 64);
    }

    fn grow_and_shrink<S: BuildHasher>(mut t: Table<S>, n: usize) {
        let mut live = HashSet::new();
        for i in 0..n {
            t.insert_new(record(&key(i)));
            live.insert(key(i));
            assert!(t.len() <= t.capacity());
        }
        check(&t, &live);
        assert!(t.get(b"absent").is_none());
        assert!(t.remove(b"absent").is_none());
        // Remove most, in an order unrelated to insertion, shrinking now and then.
        for i in (0..n).filter(|i| i % 10 != 3) {
            let r = t.remove(&key(i)).expect("present");
            assert_eq!(r.key(), &key(i)[..]);
            live.remove(&key(i));
            if i % 97 == 0 {
                t.shrink_to(t.len());
            }
        }
        check(&t, &live);
        let before = t.alloc_bytes();
        t.shrink_to(t.len());
        assert!(t.alloc_bytes() <= before);
        assert!(t.capacity() >= t.len());
        check(&t, &live);
        for k in live.clone() {
            assert!(t.remove(&k).is_some());
            live.remove(&k);
        }
        check(&t, &live);
        assert_eq!(t.children, 0, "empty chains are freed");
        t.shrink_to(0);
        assert_eq!(t.n, 0);
        assert_eq!(t.alloc_bytes(), 0);
        // Usable again after shrinking to nothing.
        t.insert_new(record(b"again"));
        assert!(t.get(b"again").is_some());
    }

    #[test]
    fn insert_lookup_remove_with_growth_and_shrink() {
        grow_and_shrink(Table::default(), 50_000);
    }

    #[test]
    fn child_chains_under_collisions() {
        // 4 home buckets' worth of hash bits: long chains everywhere.
        let mut t = Table::with_hasher(Crowded { bits: 2 });
        for i in 0..500 {
            t.insert_new(record(&key(i)));
        }
        let (chained, longest) = t.chain_stats();
        assert!(chained > 0 && longest > 5, "{chained} {longest}");
        assert!(t.children > 0);
        grow_and_shrink(Table::with_hasher(Crowded { bits: 2 }), 3_000);
        // Every key in one chain.
        grow_and_shrink(Table::with_hasher(Crowded { bits: 0 }), 300);
    }

    #[test]
    fn drop_frees_records_and_buckets() {
        // Under the counting allocator the bytes come back (checked loosely: other tests run
        // in parallel threads with their own counts); mainly this runs drop over chains for
        // the sanitiser-free build to walk every path.
        let mut t = Table::with_hasher(Crowded { bits: 1 });
        for i in 0..100 {
            t.insert_new(record(&key(i)));
        }
        drop(t);
        let mut t = Table::default();
        for i in 0..10_000 {
            t.insert_new(record(&key(i)));
        }
        assert!(t.alloc_bytes() >= t.n * 64);
        drop(t);
    }

    /// Scan `t` to the end, calling `between` before each step; returns the keys seen.
    fn scan_all<S: BuildHasher>(
        t: &mut Table<S>,
        mut between: impl FnMut(&mut Table<S>, usize),
    ) -> HashSet<Vec<u8>> {
        let mut seen = HashSet::new();
        let mut cursor = 0u64;
        let mut step = 0;
        loop {
            between(t, step);
            step += 1;
            cursor = t.scan(cursor, |k, _| {
                seen.insert(k.to_vec());
            });
            assert!(cursor < 1 << 40);
            if cursor == 0 {
                return seen;
            }
        }
    }

    fn scan_guarantee<S: BuildHasher>(mut t: Table<S>) {
        // Keys 0..2000 stay for the whole scan; others come and go, making the table grow to
        // several times its size and shrink back between the steps.
        for i in 0..2_000 {
            t.insert_new(record(&key(i)));
        }
        let mut extra = 2_000usize;
        let mut grown = 0;
        let mut shrunk = 0;
        let seen = scan_all(&mut t, |t, step| match step % 6 {
            1 => {
                let n = t.n;
                while t.n < n * 4 {
                    t.insert_new(record(&key(extra)));
                    extra += 1;
                }
                grown += 1;
            }
            4 => {
                for i in 2_000..extra {
                    t.remove(&key(i));
                }
                extra = 2_000;
                let n = t.n;
                t.shrink_to(t.len());
                if t.n < n {
                    shrunk += 1;
                }
            }
            _ => {}
        });
        assert!(grown > 2 && shrunk > 2, "{grown} {shrunk}");
        for i in 0..2_000 {
            assert!(seen.contains(&key(i)), "key {i} missed");
        }
    }

    #[test]
    fn scan_returns_every_key_present_throughout_across_resizes() {
        scan_guarantee(Table::default());
        scan_guarantee(Table::with_hasher(Crowded { bits: 12 }));
        // A plain scan returns each key exactly once.
        let mut t = Table::default();
        for i in 0..10_000 {
            t.insert_new(record(&key(i)));
        }
        let mut count = 0;
        let mut cursor = 0;
        loop {
            cursor = t.scan(cursor, |_, _| count += 1);
            if cursor == 0 {
                break;
            }
        }
        assert_eq!(count, 10_000);
        // An empty table ends a scan at once, whatever the cursor.
        let empty = Table::default();
        assert_eq!(empty.scan(12345, |_, _| panic!("no keys")), 0);
    }

    #[test]
    fn random_key_reaches_every_key() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        for (n, bits) in [(1usize, 64u32), (40, 64), (300, 64), (300, 3)] {
            let mut t = Table::with_hasher(Crowded { bits: bits.min(63) });
            for i in 0..n {
                t.insert_new(record(&key(i)));
            }
            let mut hits = std::collections::HashMap::<Vec<u8>, usize>::new();
            let draws = n * 200;
            for _ in 0..draws {
                let k = t.random_key(&mut rng).expect("non-empty");
                *hits.entry(k.to_vec()).or_default() += 1;
            }
            assert_eq!(hits.len(), n, "every key drawn ({n} keys)");
            // Fair enough under a real hash: no key drawn more than 4 times its share. (When
            // a hasher crowds the keys into a few chains, the chain after a run of empty
            // buckets is favoured, as in Redis's sampling.)
            let most = hits.values().copied().max().unwrap_or(0);
            assert!(
                bits < 63 || most <= 4 * 200,
                "{n}: a key drawn {most} times"
            );
        }
        assert!(Table::default().random_key(&mut rng).is_none());
        // A sparse table (most keys removed, not shrunk) still finds its few keys.
        let mut t = Table::default();
        for i in 0..5_000 {
            t.insert_new(record(&key(i)));
        }
        for i in 1..5_000 {
            t.remove(&key(i));
        }
        for _ in 0..100 {
            assert_eq!(t.random_key(&mut rng), Some(&key(0)[..]));
        }
    }

    #[test]
    fn prefetch_aims_at_the_home_bucket() {
        let mut t = Table::default();
        for i in 0..20_000 {
            t.insert_new(record(&key(i)));
        }
        for i in 0..20_000 {
            let k = key(i);
            let home = t.home(t.hash(&k));
            // SAFETY: a bucket of `t`, borrowed through `&t`.
            let b = unsafe { home.as_ref() };
            let r = t.find(&k).expect("present");
            let in_home =
                (0..SLOTS).any(|s| b.present() & (1 << s) != 0 && b.slots[s] == Some(r.raw()));
            let in_chain = b.child().is_some();
            assert!(in_home || in_chain, "key {i} outside its home chain");
            t.prefetch(&k);
        }
        t.prefetch(b"absent");
        Table::default().prefetch(b"empty");
    }

    #[test]
    fn memory_per_key_is_about_a_dozen_bytes() {
        // Over a doubling, the table's bytes per key stay within 8-22 and average 10-16.
        let mut t = Table::default();
        let mut sum = 0.0;
        let mut samples = 0;
        for i in 0..(1 << 16) {
            t.insert_new(record(&key(i)));
            if i >= 1 << 15 && i % 64 == 0 {
                let per = t.alloc_bytes() as f64 / t.len() as f64;
                assert!((8.0..22.0).contains(&per), "{per} B/key at {}", t.len());
                sum += per;
                samples += 1;
            }
        }
        let avg = sum / samples as f64;
        eprintln!("average {avg:.2} B/key");
        assert!((10.0..16.0).contains(&avg), "average {avg} B/key");
    }
}
