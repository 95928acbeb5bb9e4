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
//! - its keys' records (`record`: one allocation per key holding the key and its entry), in a
//!   SCAN vector that gives every key a stable position, which SCAN walks with a cursor so
//!   that keys present for the whole scan are returned even while the shard grows;
//! - a hash index of pointers to those records;
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
pub mod events;
pub mod guards;
pub mod lazyfree;
pub mod record;

pub use guards::{DbHandle, Guards};

pub use record::{Record, RecordRef};

use crate::types::located::Located;
use crate::types::Value;
use bytes::Bytes;
use hashbrown::{DefaultHashBuilder, HashMap, HashSet, HashTable};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// No expiry.
pub const NO_EXPIRE: i64 = -1;

/// One key's value and metadata, as its record stores it. The key's expiry is not here but in
/// its shard's list of keys with a TTL (most keys have none, and each of them saves the
/// eight bytes), reached through `vol`: read it with [`Shard::expire_of`].
pub struct Entry {
    pub value: Value,
    /// Position in the shard's volatile-key list, or [`NO_VOL`] for a key without a TTL.
    vol: u32,
    /// Low 24 bits: the last access (LRU clock) or access frequency (LFU), see
    /// [`crate::evict`]. Top byte: the record's key length tag (see [`record`]).
    meta: u32,
}

/// `Entry::vol` of a key without a TTL.
const NO_VOL: u32 = u32::MAX;

impl Entry {
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
/// Its keys live in [`Record`]s, each one allocation holding the key and its entry. The
/// shard's own tables only point at them:
/// - `records` is the SCAN order: position i holds a record or is free. Freed positions are
///   reused and trailing ones trimmed, so a key keeps its position for its whole life, and a
///   cursor that walks positions returns every key present for the whole scan.
/// - `index` is the hash index: a hashbrown table of pointers to the records (copies of the
///   ones `records` owns), looked up by hashing the key and comparing it with the record's.
///   A record leaves the index before it is freed, which is what makes following an index
///   pointer sound.
/// - `volatile` lists the positions of the keys with a TTL, which the active-expiry reaper
///   samples at random, and `expires` their expiry times at the same places; an entry's `vol`
///   is its place in both.
pub struct Shard {
    /// Allocated through [`Located`] so a pipelined batch can prefetch its keys' index lines
    /// ([`Keyspace::warm_keys`]).
    index: HashTable<RecordRef, Located>,
    hasher: DefaultHashBuilder,
    records: Vec<Option<Record>>,
    free_slots: Vec<u32>,
    /// Positions of the keys that carry a TTL.
    volatile: Vec<u32>,
    /// `expires[i]`: the absolute expiry (Unix ms) of the key at `volatile[i]`.
    expires: Vec<i64>,
    /// Bytes of all records (jemalloc's size classes), for MEMORY STATS.
    record_bytes: usize,
    /// WATCH registrations by key.
    pub watched: HashMap<Bytes, Vec<Watcher>>,
    /// Keys deleted because they expired (lazily or actively), for INFO and the AOF.
    pub expired_total: u64,
}

impl Default for Shard {
    fn default() -> Shard {
        Shard {
            index: HashTable::new_in(Located::default()),
            hasher: DefaultHashBuilder::default(),
            records: Vec::new(),
            free_slots: Vec::new(),
            volatile: Vec::new(),
            expires: Vec::new(),
            record_bytes: 0,
            watched: HashMap::default(),
            expired_total: 0,
        }
    }
}

impl Shard {
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    pub fn volatile_len(&self) -> usize {
        self.volatile.len()
    }

    #[inline]
    fn hash(&self, key: &[u8]) -> u64 {
        std::hash::BuildHasher::hash_one(&self.hasher, key)
    }

    /// The index's pointer to the record of `key`.
    #[inline]
    fn find(&self, key: &[u8]) -> Option<RecordRef> {
        self.index
            .find(self.hash(key), |r| {
                // SAFETY: every index pointer is to a record `self.records` owns (a record
                // leaves the index before it is freed), and `&self` keeps them all alive
                // and unchanged for this call.
                unsafe { r.key() == key }
            })
            .copied()
    }

    /// Start loading the index lines a lookup of `key` will read first.
    #[inline]
    pub fn prefetch(&self, key: &[u8]) {
        self.index
            .allocator()
            .prefetch(self.hash(key), std::mem::size_of::<RecordRef>());
    }

    /// Look up without any expiry check.
    pub fn raw_get(&self, key: &[u8]) -> Option<&Entry> {
        let r = self.find(key)?;
        // SAFETY: `r` is to a record `self` owns (see `find`); the entry borrow is bounded by
        // the borrow of self, which no write can happen under.
        Some(unsafe { r.entry() })
    }

    pub fn raw_get_mut(&mut self, key: &[u8]) -> Option<&mut Entry> {
        let r = self.find(key)?;
        // SAFETY: `r` is to a record `self` owns, and `&mut self` makes this the only
        // reference to it for the borrow's length.
        Some(unsafe { r.entry_mut() })
    }

    /// The entry of `key` and its absolute expiry (or [`NO_EXPIRE`]), without any expiry check.
    pub fn raw_get_mut_with_expire(&mut self, key: &[u8]) -> Option<(&mut Entry, i64)> {
        let r = self.find(key)?;
        // SAFETY: as raw_get_mut.
        let e = unsafe { r.entry_mut() };
        let at = if e.vol == NO_VOL {
            NO_EXPIRE
        } else {
            self.expires[e.vol as usize]
        };
        Some((e, at))
    }

    /// The absolute expiry of an entry of this shard, or [`NO_EXPIRE`].
    #[inline]
    pub fn expire_of(&self, e: &Entry) -> i64 {
        if e.vol == NO_VOL {
            NO_EXPIRE
        } else {
            self.expires[e.vol as usize]
        }
    }

    /// The absolute expiry of `key` (or [`NO_EXPIRE`]); None if absent. No expiry check.
    pub fn raw_expire(&self, key: &[u8]) -> Option<i64> {
        self.raw_get(key).map(|e| self.expire_of(e))
    }

    /// True if the key exists and its TTL has passed at `now_ms`: as Redis's keyIsExpired, a
    /// key lives through the millisecond its expiry names (`now > when`).
    pub fn is_expired(&self, key: &[u8], now_ms: i64) -> bool {
        matches!(self.raw_expire(key), Some(at) if at != NO_EXPIRE && at < now_ms)
    }

    /// Insert or overwrite; the TTL is cleared unless `keep_ttl`.
    pub fn insert(&mut self, key: &[u8], value: Value, keep_ttl: bool) {
        if let Some(r) = self.find(key) {
            // SAFETY: as raw_get_mut.
            let e = unsafe { r.entry_mut() };
            let old = std::mem::replace(&mut e.value, value);
            lazyfree::free_if(&lazyfree::SERVER_DEL, old);
            if !keep_ttl && e.vol != NO_VOL {
                let vol = std::mem::replace(&mut e.vol, NO_VOL);
                self.volatile_remove(vol);
            }
            return;
        }
        let pos = match self.free_slots.pop() {
            Some(p) => p,
            None => {
                self.records.push(None);
                (self.records.len() - 1) as u32
            }
        };
        let record = Record::new(key, value, NO_VOL, access::initial_access(), pos);
        let r = record.as_ref();
        self.records[pos as usize] = Some(record);
        self.record_bytes += Record::alloc_bytes(key.len());
        let hash = self.hash(key);
        let hasher = &self.hasher;
        self.index.insert_unique(hash, r, |r| {
            // SAFETY: as in `find`: a rehash only reads records `self.records` owns.
            std::hash::BuildHasher::hash_one(hasher, unsafe { r.key() })
        });
    }

    /// Remove a key, returning its value and expiry.
    pub fn remove(&mut self, key: &[u8]) -> Option<Removed> {
        let hash = self.hash(key);
        let found = self
            .index
            // SAFETY: as in `find`.
            .find_entry(hash, |r| unsafe { r.key() == key })
            .ok()?;
        let (r, _) = found.remove();
        // SAFETY: the record is still owned by `self.records` (it only just left the index).
        let pos = unsafe { r.pos() };
        let record = self.records[pos as usize].take()?;
        debug_assert!(r.is(&record));
        self.record_bytes -= Record::alloc_bytes(key.len());
        let e = record.into_entry();
        let expire_at = self.expire_of(&e);
        if e.vol != NO_VOL {
            self.volatile_remove(e.vol);
        }
        if pos as usize + 1 == self.records.len() {
            // Trim free positions at the end so the table shrinks as keys go.
            while matches!(self.records.last(), Some(None)) {
                self.records.pop();
            }
            let len = self.records.len() as u32;
            self.free_slots.retain(|&s| s < len);
        } else {
            self.free_slots.push(pos);
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
            if let Some(r) = &mut self.records[moved as usize] {
                r.entry_mut().vol = at as u32;
            }
        }
    }

    /// Set an absolute expiry on an existing key. Returns false if the key is absent.
    pub fn set_expire(&mut self, key: &[u8], at_ms: i64) -> bool {
        let Some(r) = self.find(key) else {
            return false;
        };
        let vol = self.volatile.len() as u32;
        // SAFETY: as raw_get_mut.
        let e = unsafe { r.entry_mut() };
        // SAFETY: as raw_get_mut; the record is owned by `self.records`.
        let pos = unsafe { r.pos() };
        if e.vol != NO_VOL {
            self.expires[e.vol as usize] = at_ms;
        } else {
            e.vol = vol;
            self.volatile.push(pos);
            self.expires.push(at_ms);
        }
        true
    }

    /// Remove the TTL. Returns true if there was one.
    pub fn clear_expire(&mut self, key: &[u8]) -> bool {
        let Some(e) = self.raw_get_mut(key) else {
            return false;
        };
        if e.vol == NO_VOL {
            return false;
        }
        let vol = std::mem::replace(&mut e.vol, NO_VOL);
        self.volatile_remove(vol);
        true
    }

    /// Remove every key; returns how many there were.
    pub fn clear(&mut self) -> usize {
        let n = self.index.len();
        self.index = HashTable::new_in(Located::default());
        self.records = Vec::new();
        self.free_slots = Vec::new();
        self.volatile = Vec::new();
        self.expires = Vec::new();
        self.record_bytes = 0;
        n
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

    /// Walk keys from position `cursor`, calling `f` with each live key, its entry and its
    /// expiry, until `count` keys were visited. Returns the next cursor, or 0 at the end.
    pub fn scan_slots(
        &self,
        cursor: usize,
        count: usize,
        mut f: impl FnMut(&[u8], &Entry, i64),
    ) -> usize {
        let mut i = cursor;
        let mut visited = 0;
        while i < self.records.len() && visited < count {
            if let Some(r) = &self.records[i] {
                f(r.key(), r.entry(), self.expire_of(r.entry()));
                visited += 1;
            }
            i += 1;
        }
        if i >= self.records.len() {
            0
        } else {
            i
        }
    }

    /// Every key, its entry and its expiry, in SCAN order.
    pub fn keys(&self) -> impl Iterator<Item = (&[u8], &Entry, i64)> {
        self.records
            .iter()
            .flatten()
            .map(|r| (r.key(), r.entry(), self.expire_of(r.entry())))
    }

    /// A uniformly random key among those with a TTL, if any (volatile-* eviction).
    pub fn random_volatile_key(&self, rng: &mut impl rand::Rng) -> Option<Bytes> {
        if self.volatile.is_empty() {
            return None;
        }
        let pos = self.volatile[rng.gen_range(0..self.volatile.len())];
        self.records[pos as usize]
            .as_ref()
            .map(|r| Bytes::copy_from_slice(r.key()))
    }

    /// A uniformly random key of this shard, if any.
    pub fn random_key(&self, rng: &mut impl rand::Rng) -> Option<Bytes> {
        if self.index.is_empty() {
            return None;
        }
        // Positions are dense enough (trailing frees are trimmed, others reused) for rejection
        // sampling; fall back to a walk if we keep hitting holes.
        for _ in 0..64 {
            let i = rng.gen_range(0..self.records.len());
            if let Some(r) = &self.records[i] {
                return Some(Bytes::copy_from_slice(r.key()));
            }
        }
        self.keys()
            .next()
            .map(|(k, _, _)| Bytes::copy_from_slice(k))
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
            let Some(r) = &self.records[self.volatile[i] as usize] else {
                continue;
            };
            let key = Bytes::copy_from_slice(r.key());
            if let Some(e) = self.remove(&key) {
                graveyard.push(e);
            }
            self.touch_watched(&key);
            self.expired_total += 1;
            expired.push(key);
        }
        n
    }

    /// Bytes of this shard's own tables, what Redis calls the database's overhead: the key
    /// index, the SCAN positions and the records (each key with its entry; Redis counts its
    /// dictEntry structs here too), and the list of keys with a TTL (MEMORY STATS
    /// `overhead.hashtable.main` / `.expires`).
    pub fn table_bytes(&self) -> (usize, usize) {
        (self.index_bytes() + self.record_bytes, self.expires_bytes())
    }

    /// The index, the SCAN positions and the free list, without the records.
    fn index_bytes(&self) -> usize {
        self.index.allocation_size()
            + self.records.capacity() * std::mem::size_of::<Option<Record>>()
            + self.free_slots.capacity() * std::mem::size_of::<u32>()
    }

    fn expires_bytes(&self) -> usize {
        self.volatile.capacity() * std::mem::size_of::<u32>()
            + self.expires.capacity() * std::mem::size_of::<i64>()
    }

    /// What `key` costs this shard, without its value's own allocations: its record, and its
    /// share of the index and SCAN positions (and of the TTL list, when it has a TTL). None if
    /// the key is absent.
    pub fn key_bytes(&self, key: &[u8]) -> Option<usize> {
        let e = self.raw_get(key)?;
        let mut bytes = Record::alloc_bytes(key.len()) + self.index_bytes() / self.len().max(1);
        if e.has_expire() {
            bytes += self.expires_bytes() / self.volatile.len().max(1);
        }
        Some(bytes)
    }

    fn shrink_index_to(&mut self, len: usize) {
        let hasher = &self.hasher;
        self.index.shrink_to(len, |r| {
            // SAFETY: as in `find`: a rehash only reads records `self.records` owns.
            std::hash::BuildHasher::hash_one(hasher, unsafe { r.key() })
        });
    }

    /// Give memory back after mass deletions: shrink the tables when they are mostly empty.
    /// Cost is proportional to the live keys, so callers do it for shards that emptied out.
    pub fn maybe_shrink(&mut self) {
        let len = self.index.len();
        if self.index.capacity() > 64 && self.index.capacity() / 8 > len {
            self.shrink_index_to(len);
        }
        if self.volatile.capacity() > 64 && self.volatile.capacity() / 8 > self.volatile.len() {
            self.volatile.shrink_to_fit();
            self.expires.shrink_to_fit();
        }
        if self.records.capacity() > 64 && self.records.capacity() / 8 > self.records.len() {
            self.records.shrink_to_fit();
        }
        if self.free_slots.capacity() > 64 && self.free_slots.capacity() / 8 > self.free_slots.len()
        {
            self.free_slots.shrink_to_fit();
        }
    }

    /// After an eviction, under `maxmemory`: give back a table that could be half its size.
    /// Redis's keys free their memory one by one, and it declines to grow a table that would
    /// cross the limit; here the insert that doubled a shard's index (a jump of a few hundred
    /// bytes at a few dozen keys per shard) would otherwise stay over the limit whatever was
    /// evicted. Shrinking the shard that lost a key once it fits the smaller table gives the
    /// jump back.
    pub fn shrink_after_eviction(&mut self) {
        let len = self.index.len();
        if len <= self.index.capacity() / 2 {
            self.shrink_index_to(len);
        }
        if self.volatile.len() <= self.volatile.capacity() / 2 {
            self.volatile.shrink_to(self.volatile.len());
            self.expires.shrink_to(self.expires.len());
        }
        if self.records.len() <= self.records.capacity() / 2 {
            self.records.shrink_to(self.records.len());
        }
    }

    /// Move all contents out, leaving an empty shard (SWAPDB, FLUSHALL ASYNC).
    pub fn swap_data(&mut self, other: &mut Shard) {
        std::mem::swap(&mut self.index, &mut other.index);
        std::mem::swap(&mut self.hasher, &mut other.hasher);
        std::mem::swap(&mut self.records, &mut other.records);
        std::mem::swap(&mut self.free_slots, &mut other.free_slots);
        std::mem::swap(&mut self.volatile, &mut other.volatile);
        std::mem::swap(&mut self.expires, &mut other.expires);
        std::mem::swap(&mut self.record_bytes, &mut other.record_bytes);
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
}

impl Keyspace {
    pub fn new(databases: usize, shards_per_db: usize) -> Keyspace {
        let shards = shards_per_db.next_power_of_two().max(1);
        let dbs = (0..databases.max(1))
            .map(|_| Db {
                shards: (0..shards).map(|_| Mutex::new(Shard::default())).collect(),
                avg_ttl_ms: Default::default(),
            })
            .collect();
        Keyspace {
            dbs,
            shard_mask: shards - 1,
            shard_seed: rand::random::<u64>() | 1,
            blocked_clients: AtomicUsize::new(0),
            replica_ttl_keys: Mutex::new(HashSet::default()),
        }
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
        let mut h = self.shard_seed;
        let mut chunks = key.chunks_exact(8);
        for c in &mut chunks {
            let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            h = (h.rotate_left(5) ^ w).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
        let mut tail = 0u64;
        for (i, &b) in chunks.remainder().iter().enumerate() {
            tail |= u64::from(b) << (8 * i);
        }
        h = (h.rotate_left(5) ^ tail ^ key.len() as u64).wrapping_mul(0x517c_c1b7_2722_0a95);
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

    /// Total expired-key deletions so far.
    pub fn expired_total(&self) -> u64 {
        self.dbs
            .iter()
            .flat_map(|d| d.shards.iter())
            .map(|s| s.lock().expired_total)
            .sum()
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
        while sh.index.capacity() < 100 {
            sh.insert(format!("k{n}").as_bytes(), s("v"), false);
            n += 1;
        }
        let grown = sh.table_bytes().0;
        let cap = sh.index.capacity();
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
            cur = sh.scan_slots(cur, 3, |k, _, _| seen.push(k.to_vec()));
            if cur == 0 {
                break;
            }
        }
        assert_eq!(seen.len(), 8);
        sh.insert(b"new", s("v"), false);
        assert_eq!(sh.len(), 9);
    }

    #[test]
    fn prefetch_targets_the_entries_home_slot() {
        // The keyspace prefetch (`Shard::prefetch`) must aim where hashbrown keeps the entry:
        // check the predicted home slot against the entry's real address for every key.
        let mut sh = Shard::default();
        let n = 20_000;
        for i in 0..n {
            sh.insert(format!("k:{i:012}").as_bytes(), s("v"), false);
        }
        let size = std::mem::size_of::<RecordRef>();
        let (ctrl, mask) = sh
            .index
            .allocator()
            .table(size)
            .expect("table shape recognised");
        let mut home = 0;
        for i in 0..n {
            let key = format!("k:{i:012}");
            let h = sh.hash(key.as_bytes());
            let at = sh
                .index
                // SAFETY: the shard owns every record its index points at.
                .find(h, |r| unsafe { r.key() == key.as_bytes() })
                .expect("present") as *const RecordRef as usize;
            let pos = h as usize & mask;
            if at == ctrl - (pos + 1) * size {
                home += 1;
            }
            sh.prefetch(key.as_bytes());
        }
        assert!(
            home > n / 2,
            "only {home} of {n} keys in their predicted slot"
        );
        // Warming absent keys, tiny shards and a missing database is harmless.
        let ks = Keyspace::new(1, 1);
        ks.warm_keys(0, &[b"absent", b"k:000000000001"]);
        ks.warm_keys(5, &[b"x"]);
        sh.prefetch(b"absent");
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
