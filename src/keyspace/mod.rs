//! The keyspace: databases, their shards, entries, expiry and the locking discipline.
//!
//! There are `databases` (default 16) databases. Each database is split into a power-of-two
//! number of shards, each a `parking_lot::Mutex<Shard>`; a key lives in the shard picked by a
//! hash of its bytes. A command locks exactly the shards its keys hash to, in ascending
//! (database, shard) order, before it runs, and holds them until it has finished; so every
//! command is atomic, two commands on different shards run in parallel, and no two commands
//! can deadlock (they acquire in the same global order). Commands that read or write a whole
//! database (KEYS, SCAN, FLUSHDB) lock all its shards, and the few that span databases or
//! must be atomic with respect to everything (FLUSHALL, SWAPDB, EXEC) lock every shard.
//!
//! Each shard owns:
//! - its keys' records (`record`: one allocation per key holding the key and its entry, or,
//!   for a short string, just the key and the string's bytes), in
//!   one table (`table`: 64-byte buckets of seven record pointers, chained when full) that is
//!   both the hash index and what SCAN walks, with Redis's reverse-binary cursor over its
//!   buckets, so that keys present for the whole scan are returned even while the table
//!   grows or shrinks;
//! - the list of keys with a TTL and their expiry times, which the active-expiry reaper
//!   samples at random;
//! - the WATCH registrations on its keys.
//!
//! Values that are big to free go to the lazyfree thread when a command or a
//! `lazyfree-lazy-*` directive asks for it (`lazyfree`).
//!
//! Expiry is lazy (any access to an expired key deletes it first, see [`DbHandle`]) and active
//! (see [`Shard::active_expire`], driven by the server's cron).

pub mod access;
pub mod defrag;
pub mod events;
pub mod guards;
pub mod lazyfree;
pub mod record;
pub mod slots;
pub mod table;

pub use guards::{DbHandle, Guards, PackedStr, StrSlot};

pub use record::{EntryRef, Record, RecordRef};

use crate::types::Value;
use bytes::Bytes;
use hashbrown::{HashMap, HashSet};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use table::Table;

/// No expiry.
pub const NO_EXPIRE: i64 = -1;

/// What every record starts with, in both of its forms (see [`record`]): the key's place in
/// its shard's TTL list and its access word.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Header {
    /// Position in the shard's volatile-key list, or [`NO_VOL`] for a key without a TTL.
    vol: u32,
    /// Low 24 bits: the last access (LRU clock) or access frequency (LFU), see
    /// [`crate::evict`]. Top byte: the record's form and key length tag (see [`record`]).
    meta: u32,
}

impl Header {
    pub fn has_expire(&self) -> bool {
        self.vol != NO_VOL
    }

    /// The access clock or LFU word (24 bits, as Redis's `lru` field).
    #[inline]
    pub fn access(&self) -> u32 {
        self.meta & record::ACCESS_MASK
    }

    /// Set the access word; only its low 24 bits are kept.
    #[inline]
    pub fn set_access(&mut self, access: u32) {
        self.meta = (self.meta & !record::ACCESS_MASK) | (access & record::ACCESS_MASK);
    }
}

/// One key's value and metadata, as a full record stores it (a packed record stands for
/// one, see [`record`]). The key's expiry is not here but in its shard's list of keys with a
/// TTL (most keys have none, and each of them saves the eight bytes), reached through the
/// header's `vol`: read it with [`Shard::expire_of`].
#[repr(C)]
pub struct Entry {
    hdr: Header,
    pub value: Value,
}

/// `Header::vol` of a key without a TTL.
const NO_VOL: u32 = u32::MAX;

impl Entry {
    pub fn has_expire(&self) -> bool {
        self.hdr.has_expire()
    }

    /// The access clock or LFU word (24 bits, as Redis's `lru` field).
    #[inline]
    pub fn access(&self) -> u32 {
        self.hdr.access()
    }

    /// Set the access word; only its low 24 bits are kept.
    #[inline]
    pub fn set_access(&mut self, access: u32) {
        self.hdr.set_access(access)
    }

    /// The header, for the access word (see [`access`]).
    #[inline]
    pub fn header_mut(&mut self) -> &mut Header {
        &mut self.hdr
    }
}

/// A key's value and expiry, taken out of the keyspace ([`Shard::remove`]).
pub struct Removed {
    pub value: Value,
    /// Absolute expiry in Unix milliseconds, or [`NO_EXPIRE`].
    pub expire_at: i64,
}

/// A client's WATCH flag: set to true when a watched key is modified.
pub type WatchFlag = Arc<AtomicBool>;

/// One client's WATCH of one key. `stale` is Redis's `watchedKey.expired`: the key had
/// expired (but was still stored) when watched, or became such a key through SWAPDB; its
/// deletion is then no logical change and does not fail the transaction.
pub struct Watcher {
    pub flag: WatchFlag,
    pub stale: Arc<AtomicBool>,
}

impl Watcher {
    /// The watched key changed; `present` / `expired` say what is stored now. A key that
    /// was stale when watched and is now gone (or still expired) is no logical change.
    fn touch(&self, present: bool, expired: bool) {
        if self.stale.load(Ordering::Acquire) {
            if !present {
                self.stale.store(false, Ordering::Release);
                return;
            }
            if expired {
                return;
            }
        }
        self.flag.store(true, Ordering::Release);
    }
}

/// One shard of one database.
///
/// Its keys live in [`Record`]s, each one allocation holding the key and its entry:
/// - `table` owns the records: a hash table of 64-byte buckets holding their pointers
///   (`keyspace/table.rs`), looked up by hashing the key and comparing it with the record's,
///   and walked by SCAN bucket by bucket.
/// - `volatile` lists the keys with a TTL (copies of their records' pointers), which the
///   active-expiry reaper samples at random, and `expires` their expiry times at the same
///   places; an entry's `vol` is its place in both. A record leaves this list before it is
///   freed, which is what makes following its pointers sound.
#[derive(Default)]
pub struct Shard {
    /// The keys; a pipelined batch prefetches their home buckets ([`Keyspace::warm_keys`]).
    table: Table,
    /// The keys that carry a TTL.
    volatile: Vec<RecordRef>,
    /// `expires[i]`: the absolute expiry (Unix ms) of the key at `volatile[i]`.
    expires: Vec<i64>,
    /// Bytes of all records (jemalloc's size classes), for MEMORY STATS.
    record_bytes: usize,
    /// WATCH registrations by key.
    pub watched: HashMap<Bytes, Vec<Watcher>>,
    /// Keys deleted because they expired (lazily or actively), for INFO and the AOF.
    pub expired_total: u64,
    /// Packed records a writer had unpacked (see `record`), to pack again by [`Shard::settle`]
    /// when the command lets go of the shard. A record leaving the table leaves this list.
    unpacked: Vec<RecordRef>,
    /// In cluster mode, the shard's keys by hash slot (see [`slots`]); None otherwise.
    slot_keys: Option<Box<slots::SlotKeys>>,
}

impl Shard {
    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    pub fn volatile_len(&self) -> usize {
        self.volatile.len()
    }

    /// The table's pointer to the record of `key`.
    #[inline]
    fn find(&self, key: &[u8]) -> Option<RecordRef> {
        self.table.find(key)
    }

    /// Start loading the bucket a lookup of `key` will read first.
    #[inline]
    pub fn prefetch(&self, key: &[u8]) {
        self.table.prefetch(key)
    }

    /// Look up without any expiry check.
    pub fn raw_get(&self, key: &[u8]) -> Option<EntryRef<'_>> {
        self.table.get(key)
    }

    /// The record of `key` and its absolute expiry (or [`NO_EXPIRE`]), without any expiry
    /// check, for a reader that looks at it in place ([`Shard::header_mut`], [`Shard::made_entry`]).
    pub fn find_with_expire(&self, key: &[u8]) -> Option<(RecordRef, i64)> {
        let r = self.find(key)?;
        Some((r, self.expire_at_vol(self.header(r).vol)))
    }

    /// The header of a record of this shard.
    #[inline]
    fn header(&self, r: RecordRef) -> Header {
        // SAFETY: `r` is a record this shard's table owns (the callers found it there under
        // this borrow), alive while `&self` is held.
        unsafe { r.header() }
    }

    /// The header of a record of this shard (found under this borrow), to change the access
    /// word.
    #[inline]
    pub fn header_mut(&mut self, r: RecordRef) -> &mut Header {
        // SAFETY: `r` is a record this shard's table owns, and `&mut self` makes the returned
        // borrow the only one of it.
        unsafe { r.header_mut() }
    }

    /// The entry a packed record of this shard (found under this borrow) stands for, made
    /// from its bytes; None for a full record, whose entry is stored.
    #[inline]
    pub fn made_entry(&self, r: RecordRef) -> Option<Entry> {
        if !self.is_packed(r) {
            return None;
        }
        // SAFETY: `r` is a packed record this shard's table owns, alive and unchanged while
        // `&self` is held.
        Some(unsafe { r.made_entry() })
    }

    /// The entry of `key`, to change it: a packed record is unpacked first (and packed again
    /// by [`Shard::settle`]).
    pub fn raw_get_mut(&mut self, key: &[u8]) -> Option<&mut Entry> {
        let r = self.find(key)?;
        Some(self.entry_mut(r))
    }

    /// True when a record of this shard (found under this borrow) is packed.
    #[inline]
    pub fn is_packed(&self, r: RecordRef) -> bool {
        // SAFETY: `r` is a record this shard's table owns, alive while `&self` is held.
        unsafe { r.is_packed() }
    }

    /// The string of a packed record of this shard (found under this borrow).
    #[inline]
    pub fn packed_value(&self, r: RecordRef) -> &[u8] {
        debug_assert!(self.is_packed(r));
        // SAFETY: `r` is a packed record this shard's table owns, alive and unchanged while
        // `&self` is held.
        unsafe { r.packed_value() }
    }

    /// Replace the string of a packed record of this shard with `v`: in its block when the
    /// size allows, else in a new record (packed, or full for a longer string) in its place.
    pub fn rewrite_packed(&mut self, r: RecordRef, v: &[u8]) {
        debug_assert!(self.is_packed(r));
        // SAFETY: `r` is a packed record this shard's table owns, and `&mut self` makes this
        // the only reference to it.
        if unsafe { r.rewrite_packed_in_place(v) } {
            return;
        }
        let hdr = self.header(r);
        // SAFETY: as above; the key is copied into the new record before `r` is freed.
        let key = unsafe { r.key() };
        let value = Value::Str(crate::types::compact::CompactBytes::new(v));
        let new = Record::new(key, value, hdr.vol, hdr.access());
        drop(self.swap_record(r, new));
    }

    /// The stored entry of a record of this shard, unpacking it first if it is packed.
    pub fn entry_mut(&mut self, r: RecordRef) -> &mut Entry {
        // SAFETY: `r` is a record this shard's table owns, and `&mut self` makes this the only
        // reference to it.
        let r = if unsafe { r.is_packed() } {
            self.unpack(r)
        } else {
            r
        };
        // SAFETY: as above; `r` is now a full record, and the returned borrow is the only one
        // of it for as long as `&mut self` is held.
        match unsafe { r.full_entry_mut() } {
            Some(e) => e,
            None => unreachable!("an unpacked record is full"),
        }
    }

    /// Replace the packed record `r` with a full one holding the same entry, to be packed
    /// again by [`Shard::settle`]; returns the full record.
    fn unpack(&mut self, r: RecordRef) -> RecordRef {
        // SAFETY: `r` is a record this shard's table owns; the made entry is a copy, and the
        // key is read before the record is replaced (it is freed after the copy is made).
        let full = unsafe { record::full_copy(r.key(), r.made_entry()) };
        let (full, _) = self.swap_record(r, full);
        self.unpacked.push(full);
        full
    }

    /// The command that held this shard is done with it: pack the records it unpacked that
    /// still hold a short string.
    pub fn settle(&mut self) {
        for r in std::mem::take(&mut self.unpacked) {
            // SAFETY: `r` is in the table (a record leaves `unpacked` when it leaves the table,
            // and a replaced one is replaced here too), and `&mut self` makes this the only
            // reference to it; the packed copy is made before the full record is freed.
            let packed = unsafe {
                match r.full_entry_mut() {
                    Some(e) => record::packed_copy(r.key(), e),
                    None => None,
                }
            };
            if let Some(p) = packed {
                drop(self.swap_record(r, p));
            }
        }
    }

    /// Put `new` (the same key, TTL place and access word) in the place of the record `old`:
    /// in the table, the TTL list and `unpacked`. Returns `new`'s pointer and `old`, owned.
    fn swap_record(&mut self, old: RecordRef, new: Record) -> (RecordRef, Record) {
        let new_ref = new.as_ref();
        let new_bytes = new.alloc_bytes();
        let vol = self.header(old).vol;
        let Some(old_record) = self.table.replace(old, new) else {
            unreachable!("a record of this shard is in its table");
        };
        self.record_bytes = self.record_bytes - old_record.alloc_bytes() + new_bytes;
        if vol != NO_VOL {
            self.volatile[vol as usize] = new_ref;
        }
        for u in &mut self.unpacked {
            if *u == old {
                *u = new_ref;
            }
        }
        (new_ref, old_record)
    }

    /// The expiry kept at `vol` of the TTL list, or [`NO_EXPIRE`].
    #[inline]
    fn expire_at_vol(&self, vol: u32) -> i64 {
        if vol == NO_VOL {
            NO_EXPIRE
        } else {
            self.expires[vol as usize]
        }
    }

    /// The absolute expiry of an entry of this shard, or [`NO_EXPIRE`].
    #[inline]
    pub fn expire_of(&self, e: &Entry) -> i64 {
        self.expire_at_vol(e.hdr.vol)
    }

    /// The absolute expiry of `key` (or [`NO_EXPIRE`]); None if absent. No expiry check.
    pub fn raw_expire(&self, key: &[u8]) -> Option<i64> {
        self.find(key)
            .map(|r| self.expire_at_vol(self.header(r).vol))
    }

    /// True if the key exists and its TTL has passed at `now_ms`: as Redis's keyIsExpired, a
    /// key lives through the millisecond its expiry names (`now > when`).
    pub fn is_expired(&self, key: &[u8], now_ms: i64) -> bool {
        matches!(self.raw_expire(key), Some(at) if at != NO_EXPIRE && at < now_ms)
    }

    /// Insert or overwrite; the TTL is cleared unless `keep_ttl`.
    pub fn insert(&mut self, key: &[u8], value: Value, keep_ttl: bool) {
        if let Some(r) = self.find(key) {
            let hdr = self.header(r);
            if !keep_ttl && hdr.vol != NO_VOL {
                self.header_mut(r).vol = NO_VOL;
                self.volatile_remove(hdr.vol);
            }
            let full = !self.is_packed(r);
            if full && !record::could_pack(key, &value) {
                // A full record that stays full takes the value in place.
                let old = std::mem::replace(&mut self.entry_mut(r).value, value);
                lazyfree::free_if(&lazyfree::SERVER_DEL, old);
            } else {
                let new = Record::new(key, value, self.header(r).vol, hdr.access());
                let (_, old) = self.swap_record(r, new);
                if full {
                    lazyfree::free_if(&lazyfree::SERVER_DEL, old.into_entry().value);
                }
            }
            return;
        }
        let record = Record::new(key, value, NO_VOL, access::initial_access());
        self.record_bytes += record.alloc_bytes();
        self.table.insert_new(record);
        if let Some(index) = self.slot_keys.as_mut() {
            index.add(key);
        }
    }

    /// Remove a key, returning its value and expiry.
    pub fn remove(&mut self, key: &[u8]) -> Option<Removed> {
        let record = self.table.remove(key)?;
        if let Some(index) = self.slot_keys.as_mut() {
            index.remove(key);
        }
        self.record_bytes -= record.alloc_bytes();
        let gone = record.as_ref();
        self.unpacked.retain(|u| *u != gone);
        let e = record.into_entry();
        let expire_at = self.expire_of(&e);
        if e.hdr.vol != NO_VOL {
            // The freed record's pointer leaves the TTL list here, unfollowed.
            self.volatile_remove(e.hdr.vol);
        }
        Some(Removed {
            value: e.value,
            expire_at,
        })
    }

    fn volatile_remove(&mut self, at: u32) {
        let at = at as usize;
        self.volatile.swap_remove(at);
        self.expires.swap_remove(at);
        if let Some(&moved) = self.volatile.get(at) {
            // SAFETY: every pointer left in the TTL list is to a record the table owns (a
            // record leaves the list before it is freed, and `at` no longer holds the one
            // this call removes), and `&mut self` makes this the only reference to it.
            unsafe { moved.header_mut() }.vol = at as u32;
        }
    }

    /// Set an absolute expiry on an existing key. Returns false if the key is absent.
    pub fn set_expire(&mut self, key: &[u8], at_ms: i64) -> bool {
        let Some(r) = self.find(key) else {
            return false;
        };
        let vol = self.volatile.len() as u32;
        let h = self.header_mut(r);
        if h.vol != NO_VOL {
            let at = h.vol as usize;
            self.expires[at] = at_ms;
        } else {
            h.vol = vol;
            self.volatile.push(r);
            self.expires.push(at_ms);
        }
        true
    }

    /// Remove the TTL. Returns true if there was one.
    pub fn clear_expire(&mut self, key: &[u8]) -> bool {
        let Some(r) = self.find(key) else {
            return false;
        };
        let h = self.header_mut(r);
        if h.vol == NO_VOL {
            return false;
        }
        let vol = std::mem::replace(&mut h.vol, NO_VOL);
        self.volatile_remove(vol);
        true
    }

    /// Remove every key; returns how many there were.
    pub fn clear(&mut self) -> usize {
        let n = self.table.len();
        // The TTL list's pointers go first, then the table frees the records.
        self.volatile = Vec::new();
        self.table = Table::default();
        self.expires = Vec::new();
        self.record_bytes = 0;
        self.unpacked = Vec::new();
        if let Some(index) = self.slot_keys.as_mut() {
            index.clear();
        }
        n
    }

    /// The number of keys of hash slot `slot` (cluster mode; 0 otherwise).
    pub fn count_in_slot(&self, slot: u16) -> usize {
        self.slot_keys.as_ref().map_or(0, |i| i.count(slot))
    }

    /// Up to `max` keys of hash slot `slot` (cluster mode; none otherwise).
    pub fn keys_in_slot(&self, slot: u16, max: usize) -> Vec<Bytes> {
        self.slot_keys
            .as_ref()
            .map_or_else(Vec::new, |i| i.keys(slot, max))
    }

    /// `key` was changed or deleted (called after the change): its watchers' transactions
    /// fail, except where the key was stale when watched and is now gone or still expired.
    pub fn touch_watched(&mut self, key: &[u8]) {
        let Some(watchers) = self.watched.get(key) else {
            return;
        };
        let now = crate::clock::unix_ms();
        let present = self.find(key).is_some();
        let expired = self.is_expired(key, now);
        for w in watchers {
            w.touch(present, expired);
        }
    }

    /// The shard is about to be emptied (FLUSHDB, FLUSHALL, loading): watchers of keys that
    /// exist fail, except those that watched them already expired.
    pub fn touch_all_watched(&mut self) {
        for (key, watchers) in &self.watched {
            if self.find(key).is_none() {
                continue;
            }
            for w in watchers {
                if w.stale.swap(false, Ordering::AcqRel) {
                    continue;
                }
                w.flag.store(true, Ordering::Release);
            }
        }
    }

    /// SWAPDB gave this shard another database's data: `existed_before` says whether `key`
    /// was stored here before (even expired). As Redis's touchAllWatchedKeysInDb.
    pub fn touch_watched_swapped(&mut self, key: &[u8], existed_before: bool) {
        let Some(watchers) = self.watched.get(key) else {
            return;
        };
        let now = crate::clock::unix_ms();
        let present = self.find(key).is_some();
        if !existed_before && !present {
            return;
        }
        let expired = self.is_expired(key, now);
        for w in watchers {
            if existed_before {
                w.touch(present, expired);
            } else if expired {
                // A missing key replaced by an expired one.
                w.stale.store(true, Ordering::Release);
            } else {
                w.flag.store(true, Ordering::Release);
            }
        }
    }

    /// Walk the table's buckets from the bucket cursor `cursor` (see `table`), calling `f`
    /// with each key, its entry and its expiry, until at least `count` keys were visited (a
    /// bucket and its chain are visited whole). Returns the next cursor, below 2^40, or 0
    /// at the end.
    pub fn scan_buckets(
        &self,
        cursor: u64,
        count: usize,
        mut f: impl FnMut(&[u8], &Entry, i64),
    ) -> u64 {
        let mut cursor = cursor;
        let mut visited = 0;
        loop {
            cursor = self.table.scan(cursor, |k, e| {
                visited += 1;
                f(k, e, self.expire_of(e));
            });
            if cursor == 0 || visited >= count {
                return cursor;
            }
        }
    }

    /// Every key, its entry and its expiry, in the table's order.
    pub fn keys(&self) -> impl Iterator<Item = (&[u8], EntryRef<'_>, i64)> {
        self.table.iter().map(|(k, e)| {
            let at = self.expire_of(&e);
            (k, e, at)
        })
    }

    /// A uniformly random key among those with a TTL, if any (volatile-* eviction).
    pub fn random_volatile_key(&self, rng: &mut impl rand::Rng) -> Option<Bytes> {
        if self.volatile.is_empty() {
            return None;
        }
        let r = self.volatile[rng.gen_range(0..self.volatile.len())];
        // SAFETY: the TTL list only holds pointers to records the table owns (see
        // `volatile_remove`), alive and unchanged while `&self` is held.
        Some(Bytes::copy_from_slice(unsafe { r.key() }))
    }

    /// A random key of this shard, if any: close to uniform (see `Table::random_key`).
    pub fn random_key(&self, rng: &mut impl rand::Rng) -> Option<Bytes> {
        self.table.random_key(rng).map(Bytes::copy_from_slice)
    }

    /// One pass of active expiry over this shard: sample up to `sample` keys that carry a TTL and
    /// delete those that expired. Returns how many were sampled; the expired keys are appended
    /// to `expired` and their entries to `graveyard`, so the caller can free the values after
    /// releasing the shard lock.
    pub fn active_expire(
        &mut self,
        now_ms: i64,
        sample: usize,
        rng: &mut impl rand::Rng,
        expired: &mut Vec<Bytes>,
        graveyard: &mut Vec<Removed>,
        ttls: &mut TtlSample,
    ) -> usize {
        let n = self.volatile.len().min(sample);
        for _ in 0..n {
            if self.volatile.is_empty() {
                break;
            }
            let i = rng.gen_range(0..self.volatile.len());
            let at = self.expires[i];
            if at >= now_ms {
                ttls.sum_ms += (at - now_ms) as u64;
                ttls.count += 1;
                continue;
            }
            let r = self.volatile[i];
            // SAFETY: as in `random_volatile_key`; the key is copied before the record goes.
            let key = Bytes::copy_from_slice(unsafe { r.key() });
            if let Some(e) = self.remove(&key) {
                graveyard.push(e);
            }
            self.touch_watched(&key);
            self.expired_total += 1;
            expired.push(key);
        }
        n
    }

    /// Bytes of this shard's own tables, what Redis calls the database's overhead: the
    /// table's buckets and the records (each key with its entry; Redis counts its dictEntry
    /// structs here too), and the list of keys with a TTL (MEMORY STATS
    /// `overhead.hashtable.main` / `.expires`).
    pub fn table_bytes(&self) -> (usize, usize) {
        (self.index_bytes() + self.record_bytes, self.expires_bytes())
    }

    /// The table's buckets (home and child), without the records.
    fn index_bytes(&self) -> usize {
        self.table.alloc_bytes()
    }

    fn expires_bytes(&self) -> usize {
        self.volatile.capacity() * std::mem::size_of::<RecordRef>()
            + self.expires.capacity() * std::mem::size_of::<i64>()
    }

    /// What `key` costs this shard, without its value's own allocations: its record, and its
    /// share of the table's buckets (and of the TTL list, when it has a TTL). None if the key
    /// is absent.
    pub fn key_bytes(&self, key: &[u8]) -> Option<usize> {
        let r = self.find(key)?;
        // SAFETY: `r` is a record this shard's table owns, alive while `&self` is held.
        let record = unsafe { r.alloc_bytes() };
        let mut bytes = record + self.index_bytes() / self.len().max(1);
        if self.header(r).has_expire() {
            bytes += self.expires_bytes() / self.volatile.len().max(1);
        }
        Some(bytes)
    }

    /// Give memory back after mass deletions: shrink the tables when they are mostly empty.
    /// Cost is proportional to the live keys, so callers do it for shards that emptied out.
    pub fn maybe_shrink(&mut self) {
        let len = self.table.len();
        if self.table.capacity() > 64 && self.table.capacity() / 8 > len {
            self.table.shrink_to(len);
        }
        if self.volatile.capacity() > 64 && self.volatile.capacity() / 8 > self.volatile.len() {
            self.volatile.shrink_to_fit();
            self.expires.shrink_to_fit();
        }
    }

    /// After an eviction, under `maxmemory`: give back a table that could be half its size.
    /// Redis's keys free their memory one by one, and it declines to grow a table that would
    /// cross the limit; here the insert that doubled a shard's table (a jump of a few hundred
    /// bytes at a few dozen keys per shard) would otherwise stay over the limit whatever was
    /// evicted. Shrinking the shard that lost a key once it fits the smaller table gives the
    /// jump back.
    pub fn shrink_after_eviction(&mut self) {
        let len = self.table.len();
        if len <= self.table.capacity() / 2 {
            self.table.shrink_to(len);
        }
        if self.volatile.len() <= self.volatile.capacity() / 2 {
            self.volatile.shrink_to(self.volatile.len());
            self.expires.shrink_to(self.expires.len());
        }
    }

    /// Move all contents out, leaving an empty shard (SWAPDB, FLUSHALL ASYNC).
    pub fn swap_data(&mut self, other: &mut Shard) {
        std::mem::swap(&mut self.table, &mut other.table);
        std::mem::swap(&mut self.volatile, &mut other.volatile);
        std::mem::swap(&mut self.expires, &mut other.expires);
        std::mem::swap(&mut self.record_bytes, &mut other.record_bytes);
        std::mem::swap(&mut self.unpacked, &mut other.unpacked);
        if self.slot_keys.is_some() && other.slot_keys.is_some() {
            std::mem::swap(&mut self.slot_keys, &mut other.slot_keys);
        } else {
            // A shard without an index (a detached one being freed) swapped with one that
            // has: each indexing side indexes what it now holds.
            self.reindex_slots();
            other.reindex_slots();
        }
    }

    /// Rebuild the slot index from the table (cluster mode).
    fn reindex_slots(&mut self) {
        let Some(mut index) = self.slot_keys.take() else {
            return;
        };
        index.clear();
        for (key, _, _) in self.keys() {
            index.add(key);
        }
        self.slot_keys = Some(index);
    }
}

/// Remaining TTLs of the keys an active-expiry pass sampled and left alive (Redis estimates
/// INFO keyspace `avg_ttl` from these samples).
#[derive(Clone, Copy, Debug, Default)]
pub struct TtlSample {
    pub sum_ms: u64,
    pub count: u64,
}

/// One database: its shards.
pub struct Db {
    pub shards: Box<[Mutex<Shard>]>,
    /// The running estimate of the TTL left to its keys that have one, in ms (INFO keyspace
    /// `avg_ttl`): each active-expiry sample moves it by 1/50 of the way, as in Redis.
    avg_ttl_ms: std::sync::atomic::AtomicU64,
}

impl Db {
    /// Fold one pass's sample into [`Db::avg_ttl`].
    pub fn record_ttls(&self, sample: TtlSample) {
        if sample.count == 0 {
            return;
        }
        let avg = sample.sum_ms / sample.count;
        let old = self.avg_ttl_ms.load(Ordering::Relaxed);
        let new = if old == 0 {
            avg
        } else {
            (old / 50) * 49 + avg / 50
        };
        self.avg_ttl_ms.store(new, Ordering::Relaxed);
    }

    /// The estimate of the TTL left to the database's keys that carry one; 0 when it has none.
    pub fn avg_ttl(&self, volatile_keys: usize) -> u64 {
        if volatile_keys == 0 {
            self.avg_ttl_ms.store(0, Ordering::Relaxed);
            return 0;
        }
        self.avg_ttl_ms.load(Ordering::Relaxed)
    }
}

/// All databases.
pub struct Keyspace {
    pub dbs: Box<[Db]>,
    shard_mask: usize,
    shard_seed: u64,
    /// Number of clients blocked on keys; when zero, writes skip the ready-key bookkeeping.
    pub blocked_clients: AtomicUsize,
    /// Keys a client of a writable replica gave a TTL (Redis's slaveKeysWithExpire): a replica
    /// leaves expiry to its master's DELs, but no DEL will come for keys the master never had,
    /// so the cron expires these itself (`Server::expire_replica_keys`). A leaf lock: taken
    /// under shard locks, never held while taking one.
    pub replica_ttl_keys: Mutex<HashSet<(usize, Bytes)>>,
    /// Cluster mode: a key's shard is picked by its hash slot, and shards index keys by slot.
    by_slot: bool,
}

impl Keyspace {
    pub fn new(databases: usize, shards_per_db: usize) -> Keyspace {
        Keyspace::with_slots(databases, shards_per_db, false)
    }

    /// A keyspace whose shards follow hash slots when `by_slot` (cluster mode): every key of
    /// a slot lives in one shard, which indexes its keys by slot.
    pub fn with_slots(databases: usize, shards_per_db: usize, by_slot: bool) -> Keyspace {
        // A slot maps to one shard: never more shards than slots.
        let shards = shards_per_db
            .next_power_of_two()
            .clamp(1, if by_slot { slots::SLOTS } else { usize::MAX });
        let shard = || Shard {
            slot_keys: by_slot.then(Box::default),
            ..Shard::default()
        };
        let dbs = (0..databases.max(1))
            .map(|_| Db {
                shards: (0..shards).map(|_| Mutex::new(shard())).collect(),
                avg_ttl_ms: Default::default(),
            })
            .collect();
        Keyspace {
            dbs,
            shard_mask: shards - 1,
            shard_seed: rand::random::<u64>() | 1,
            blocked_clients: AtomicUsize::new(0),
            replica_ttl_keys: Mutex::new(HashSet::default()),
            by_slot,
        }
    }

    /// Whether shards follow hash slots (cluster mode).
    pub fn by_slot(&self) -> bool {
        self.by_slot
    }

    /// The shard holding the keys of hash slot `slot` (cluster mode).
    pub fn shard_of_slot(&self, slot: u16) -> usize {
        slot as usize & self.shard_mask
    }

    /// Delete every key of database `db` in hash slot `slot` (cluster mode: a slot this node
    /// lost to a newer configuration). `each` sees every deleted key while the slot's shard
    /// is still locked, so what it logs (the DEL for replicas and the AOF) comes before any
    /// later write to the key. Returns how many keys there were.
    pub fn delete_keys_in_slot(&self, db: usize, slot: u16, mut each: impl FnMut(Bytes)) -> usize {
        let mut shard = self.dbs[db].shards[self.shard_of_slot(slot)].lock();
        let keys = shard.keys_in_slot(slot, usize::MAX);
        let mut gone = Vec::with_capacity(keys.len());
        let count = keys.len();
        for k in keys {
            if let Some(r) = shard.remove(&k) {
                gone.push(r.value);
            }
            shard.touch_watched(&k);
            each(k);
        }
        drop(shard);
        for v in gone {
            lazyfree::free_if(&lazyfree::SERVER_DEL, v);
        }
        count
    }

    /// The number of keys of database `db` in hash slot `slot` (cluster mode).
    pub fn count_keys_in_slot(&self, db: usize, slot: u16) -> usize {
        self.dbs[db].shards[self.shard_of_slot(slot)]
            .lock()
            .count_in_slot(slot)
    }

    pub fn num_dbs(&self) -> usize {
        self.dbs.len()
    }

    pub fn shards_per_db(&self) -> usize {
        self.shard_mask + 1
    }

    /// The shard a key lives in.
    ///
    /// This must not be derived from the shard maps' own hash function: if it were (or if its
    /// bits were correlated with it), every key of a shard would share some bucket-index bits
    /// in that shard's table, leaving most buckets unreachable and probe chains long. So the
    /// shard comes from a separate multiplicative hash, seeded per process.
    #[inline]
    pub fn shard_of(&self, key: &[u8]) -> usize {
        if self.shard_mask == 0 {
            return 0;
        }
        if self.by_slot {
            return self.shard_of_slot(slots::key_hash_slot(key));
        }
        let mut h = self.shard_seed;
        let mut chunks = key.chunks_exact(8);
        for c in &mut chunks {
            let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            h = (h.rotate_left(5) ^ w).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
        h = (h.rotate_left(5) ^ tail_word(chunks.remainder()) ^ key.len() as u64)
            .wrapping_mul(0x517c_c1b7_2722_0a95);
        // Murmur3 finaliser: spread every input bit over the top bits we use.
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        (h >> 40) as usize & self.shard_mask
    }

    /// Warm the cache for looking up `keys` of database `db` (the keys of a pipelined batch):
    /// prefetch their table lines all at once, so the batch's lookups do not miss one after
    /// another. Only a hint; skipped for shards small enough to stay in cache.
    pub fn warm_keys(&self, db: usize, keys: &[&[u8]]) {
        const WARM_MIN_KEYS: usize = 8_192;
        let Some(d) = self.dbs.get(db) else { return };
        for k in keys {
            let shard = d.shards[self.shard_of(k)].lock();
            if shard.len() >= WARM_MIN_KEYS {
                shard.prefetch(k);
            }
        }
    }

    /// Number of keys and of keys with a TTL in a database (locks shards one at a time).
    pub fn db_sizes(&self, db: usize) -> (usize, usize) {
        let mut keys = 0;
        let mut vol = 0;
        for s in self.dbs[db].shards.iter() {
            let s = s.lock();
            keys += s.len();
            vol += s.volatile_len();
        }
        (keys, vol)
    }

    /// [`Keyspace::db_sizes`] without waiting: the shards another thread holds are left out.
    /// A load holds every shard while it applies a file, and INFO must still answer then
    /// (Redis serves it between loading steps, with the keys loaded so far).
    pub fn db_sizes_without_waiting(&self, db: usize) -> (usize, usize) {
        let (mut keys, mut vol) = (0, 0);
        for s in self.dbs[db].shards.iter() {
            if let Some(s) = s.try_lock() {
                keys += s.len();
                vol += s.volatile_len();
            }
        }
        (keys, vol)
    }

    /// Total expired-key deletions so far.
    pub fn expired_total(&self) -> u64 {
        self.dbs
            .iter()
            .flat_map(|d| d.shards.iter())
            .map(|s| s.lock().expired_total)
            .sum()
    }
}

/// The last 0-7 bytes of a key as one word for [`Keyspace::shard_of`], read in at most two
/// loads rather than a byte at a time (the byte loop was a third of the hash for a typical
/// 12-20 byte key). With the key's length mixed in by the caller, distinct tails of one
/// length give distinct words: 4-7 bytes are two overlapping 4-byte reads, 1-3 bytes their
/// first, middle and last byte.
#[inline]
fn tail_word(rest: &[u8]) -> u64 {
    let n = rest.len();
    if n >= 4 {
        let lo = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
        let hi = u32::from_le_bytes([rest[n - 4], rest[n - 3], rest[n - 2], rest[n - 1]]);
        u64::from(lo) | u64::from(hi) << 32
    } else if n > 0 {
        u64::from(rest[0]) | u64::from(rest[n / 2]) << 8 | u64::from(rest[n - 1]) << 16
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Value {
        Value::Str(crate::types::compact::CompactBytes::new(v.as_bytes()))
    }

    /// The insert that doubled a shard's table is given back by the eviction that brings it
    /// back under half (and no sooner), its keys all kept.
    #[test]
    fn an_eviction_gives_back_a_doubled_table() {
        let mut sh = Shard::default();
        let mut n = 0;
        while sh.table.capacity() < 100 {
            sh.insert(format!("k{n}").as_bytes(), s("v"), false);
            n += 1;
        }
        let grown = sh.table_bytes().0;
        let cap = sh.table.capacity();
        sh.remove(b"k0");
        sh.shrink_after_eviction();
        if sh.len() > cap / 2 {
            assert_eq!(sh.table_bytes().0, grown, "shrunk while over half full");
        }
        let mut i = 1;
        while sh.len() > cap / 2 {
            sh.remove(format!("k{i}").as_bytes());
            i += 1;
        }
        sh.shrink_after_eviction();
        assert!(
            sh.table_bytes().0 < grown,
            "{} >= {grown}",
            sh.table_bytes().0
        );
        for j in i..n {
            assert!(sh.raw_get(format!("k{j}").as_bytes()).is_some());
        }
    }

    #[test]
    fn insert_remove_and_slots() {
        let mut sh = Shard::default();
        for i in 0..10 {
            sh.insert(format!("k{i}").as_bytes(), s("v"), false);
        }
        assert_eq!(sh.len(), 10);
        sh.remove(b"k3");
        sh.remove(b"k9");
        let mut seen = Vec::new();
        let mut cur = 0;
        loop {
            cur = sh.scan_buckets(cur, 3, |k, _, _| seen.push(k.to_vec()));
            if cur == 0 {
                break;
            }
        }
        assert_eq!(seen.len(), 8);
        sh.insert(b"new", s("v"), false);
        assert_eq!(sh.len(), 9);
    }

    #[test]
    fn warming_keys_is_harmless() {
        // Where the prefetch aims is tested in `table`; here: warming present and absent
        // keys, tiny and large shards and a missing database changes nothing.
        let ks = Keyspace::new(1, 1);
        for i in 0..10_000 {
            ks.dbs[0].shards[0]
                .lock()
                .insert(format!("k:{i:012}").as_bytes(), s("v"), false);
        }
        ks.warm_keys(0, &[b"absent", b"k:000000000001"]);
        ks.warm_keys(5, &[b"x"]);
        Keyspace::new(1, 1).warm_keys(0, &[b"absent"]);
        assert_eq!(ks.db_sizes(0), (10_000, 0));
    }

    #[test]
    fn ttl_list_follows_removals_and_overwrites() {
        // The TTL list holds record pointers: removing, overwriting and expiring keys in any
        // order must keep every entry's `vol` pointing at its own place.
        let mut sh = Shard::default();
        for i in 0..200 {
            let k = format!("k{i}");
            sh.insert(k.as_bytes(), s("v"), false);
            assert!(sh.set_expire(k.as_bytes(), 1_000 + i));
        }
        for i in (0..200).step_by(3) {
            sh.remove(format!("k{i}").as_bytes());
        }
        for i in (1..200).step_by(5) {
            sh.insert(format!("k{i}").as_bytes(), s("w"), false);
        }
        for i in (2..200).step_by(7) {
            sh.clear_expire(format!("k{i}").as_bytes());
        }
        for i in 0..200i64 {
            let k = format!("k{i}");
            let want = if i % 5 == 1 {
                Some(NO_EXPIRE)
            } else if i % 3 == 0 {
                None
            } else if i % 7 == 2 {
                Some(NO_EXPIRE)
            } else {
                Some(1_000 + i)
            };
            assert_eq!(sh.raw_expire(k.as_bytes()), want, "{k}");
        }
        let mut rng = rand::thread_rng();
        for _ in 0..50 {
            let k = sh.random_volatile_key(&mut rng).expect("some left");
            assert!(sh.raw_get(&k).is_some_and(|e| e.has_expire()));
        }
        let gone = expire_all(&mut sh, 10_000);
        assert!(!gone.is_empty());
        sh.maybe_shrink();
        let mut other = Shard::default();
        other.swap_data(&mut sh);
        assert!(sh.is_empty());
        assert!(!other.is_empty());
        other.clear();
        assert!(other.is_empty());
    }

    /// Run active expiry at `now_ms` until no key with a TTL is left; the keys it deleted.
    fn expire_all(sh: &mut Shard, now_ms: i64) -> Vec<Bytes> {
        let mut rng = rand::thread_rng();
        let (mut gone, mut dead) = (Vec::new(), Vec::new());
        while sh.volatile_len() > 0 {
            sh.active_expire(
                now_ms,
                20,
                &mut rng,
                &mut gone,
                &mut dead,
                &mut TtlSample::default(),
            );
        }
        gone
    }

    /// The string stored at `k`, read as a reader sees it.
    fn stored(sh: &Shard, k: &str) -> Option<Vec<u8>> {
        match sh.raw_get(k.as_bytes()).as_deref().map(|e| &e.value) {
            Some(Value::Str(v)) => Some(v.to_vec()),
            _ => None,
        }
    }

    fn is_packed(sh: &Shard, k: &str) -> bool {
        sh.find(k.as_bytes()).is_some_and(|r| sh.is_packed(r))
    }

    #[test]
    fn short_strings_are_packed_unpacked_for_writers_and_packed_again() {
        // Every way a record changes form keeps its value, its TTL (the TTL list's pointer)
        // and the shard's byte count.
        let mut sh = Shard::default();
        for i in 0..100 {
            let k = format!("k{i}");
            sh.insert(k.as_bytes(), s("short"), false);
            assert!(sh.set_expire(k.as_bytes(), 5_000 + i));
        }
        let bytes_packed = sh.record_bytes;
        // 9 bytes of header and length, the key and the value: jemalloc's 16-byte class for
        // k0..k9, its 32-byte class for the others.
        assert_eq!(bytes_packed, 10 * 16 + 90 * 32);
        assert!(is_packed(&sh, "k7"));
        // A writer unpacks; the TTL list follows; settle packs again.
        for i in (0..100).step_by(2) {
            let k = format!("k{i}");
            let e = sh.raw_get_mut(k.as_bytes()).expect("present");
            assert!(matches!(&e.value, Value::Str(v) if &v[..] == b"short"));
            e.value = s("longer but short");
        }
        assert!(!is_packed(&sh, "k8") && is_packed(&sh, "k9"));
        // Removing an unpacked record before settle takes it off the list to pack.
        sh.remove(b"k10");
        // Overwriting an unpacked record with a long string keeps it full.
        sh.insert(b"k12", s(&"x".repeat(40)), true);
        sh.settle();
        assert!(is_packed(&sh, "k8") && !is_packed(&sh, "k12"));
        assert_eq!(stored(&sh, "k8").as_deref(), Some(&b"longer but short"[..]));
        assert_eq!(stored(&sh, "k9").as_deref(), Some(&b"short"[..]));
        assert_eq!(stored(&sh, "k12").map(|v| v.len()), Some(40));
        // Overwrites in every direction, with and without the TTL.
        sh.insert(b"k12", s("tiny"), true);
        assert!(is_packed(&sh, "k12"));
        sh.insert(b"k13", Value::List(Default::default()), true);
        assert!(!is_packed(&sh, "k13"));
        sh.insert(b"k13", s("back"), false);
        assert!(is_packed(&sh, "k13"));
        // In-place rewrites, and one that outgrows the block or the packed form.
        let r = sh.find(b"k15").expect("present");
        sh.rewrite_packed(r, b"SHORT");
        assert_eq!(sh.find(b"k15"), Some(r), "same size: rewritten in place");
        sh.rewrite_packed(r, b"a good deal longer");
        assert!(is_packed(&sh, "k15"));
        let r = sh.find(b"k15").expect("present");
        sh.rewrite_packed(r, "y".repeat(60).as_bytes());
        assert!(!is_packed(&sh, "k15"));
        assert_eq!(stored(&sh, "k15").map(|v| v.len()), Some(60));
        for i in 0..100i64 {
            let k = format!("k{i}");
            let want = match i {
                10 => None,
                13 => Some(NO_EXPIRE),
                _ => Some(5_000 + i),
            };
            assert_eq!(sh.raw_expire(k.as_bytes()), want, "{k}");
        }
        // Every pointer of the TTL list leads to a record with that TTL.
        let mut rng = rand::thread_rng();
        for _ in 0..200 {
            let k = sh.random_volatile_key(&mut rng).expect("some");
            assert!(sh.raw_get(&k).is_some_and(|e| e.has_expire()));
        }
        // The byte count follows the records' real sizes.
        let counted: usize = sh
            .table
            .iter()
            .map(|(k, _)| {
                let r = sh.find(k).expect("present");
                // SAFETY: `r` is a record of `sh`, alive while it is borrowed.
                unsafe { r.alloc_bytes() }
            })
            .sum();
        assert_eq!(sh.record_bytes, counted);
        expire_all(&mut sh, 100_000);
        assert_eq!(sh.len(), 1, "only k13 has no TTL");
        assert_eq!(stored(&sh, "k13").as_deref(), Some(&b"back"[..]));
    }

    #[test]
    fn tail_words_tell_apart_every_tail_of_one_length() {
        // Every tail of 1-3 bytes over a small alphabet, and many of 4-7 bytes: no two of one
        // length share a word (the hash mixes the length in separately).
        let alphabet = [0u8, 1, 7, b'a', b'z', 0x80, 0xff];
        for len in 1..=7usize {
            let mut seen = std::collections::HashMap::new();
            let total = alphabet.len().pow(len.min(5) as u32);
            for mut i in 0..total {
                let mut tail = vec![0u8; len];
                for b in tail.iter_mut().take(len.min(5)) {
                    *b = alphabet[i % alphabet.len()];
                    i /= alphabet.len();
                }
                if len > 5 {
                    tail[5] = tail[0] ^ 0x5a;
                }
                if let Some(other) = seen.insert(tail_word(&tail), tail.clone()) {
                    assert_eq!(other, tail, "two tails of length {len} share a word");
                }
            }
        }
    }

    #[test]
    fn shards_are_balanced() {
        let ks = Keyspace::new(1, 16);
        let mut counts = [0usize; 16];
        for i in 0..160_000 {
            counts[ks.shard_of(format!("k:{i:012}").as_bytes())] += 1;
        }
        for c in counts {
            assert!(
                (9_000..11_000).contains(&c),
                "unbalanced shards: {counts:?}"
            );
        }
    }

    #[test]
    fn expiry_bookkeeping() {
        let mut sh = Shard::default();
        sh.insert(b"a", s("1"), false);
        sh.insert(b"b", s("1"), false);
        assert!(sh.set_expire(b"a", 100));
        assert!(sh.set_expire(b"b", 5000));
        assert_eq!(sh.volatile_len(), 2);
        assert!(!sh.is_expired(b"a", 100));
        assert!(sh.is_expired(b"a", 101));
        assert!(!sh.is_expired(b"b", 100));
        // Overwrite without KEEPTTL clears the TTL.
        sh.insert(b"b", s("2"), false);
        assert_eq!(sh.volatile_len(), 1);
        let mut rng = rand::thread_rng();
        let (mut gone, mut dead) = (Vec::new(), Vec::new());
        sh.active_expire(
            200,
            20,
            &mut rng,
            &mut gone,
            &mut dead,
            &mut TtlSample::default(),
        );
        assert_eq!(gone.len(), 1);
        assert_eq!(dead.len(), 1);
        assert_eq!(sh.volatile_len(), 0);
        assert_eq!(sh.len(), 1);
    }
}
