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
//! - its keys' records (`record`: one allocation per key holding the key and its entry), in
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
pub mod events;
pub mod guards;
pub mod lazyfree;
pub mod record;
pub mod table;

pub use guards::{DbHandle, Guards};

pub use record::{Record, RecordRef};

use crate::types::Value;
use bytes::Bytes;
use hashbrown::{HashMap, HashSet};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use table::Table;

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
    pub fn raw_get(&self, key: &[u8]) -> Option<&Entry> {
        self.table.get(key)
    }

    pub fn raw_get_mut(&mut self, key: &[u8]) -> Option<&mut Entry> {
        self.table.get_mut(key)
    }

    /// The entry of `key` and its absolute expiry (or [`NO_EXPIRE`]), without any expiry check.
    pub fn raw_get_mut_with_expire(&mut self, key: &[u8]) -> Option<(&mut Entry, i64)> {
        let e = self.table.get_mut(key)?;
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
        if let Some(e) = self.table.get_mut(key) {
            let old = std::mem::replace(&mut e.value, value);
            lazyfree::free_if(&lazyfree::SERVER_DEL, old);
            if !keep_ttl && e.vol != NO_VOL {
                let vol = std::mem::replace(&mut e.vol, NO_VOL);
                self.volatile_remove(vol);
            }
            return;
        }
        let record = Record::new(key, value, NO_VOL, access::initial_access());
        self.record_bytes += Record::alloc_bytes(key.len());
        self.table.insert_new(record);
    }

    /// Remove a key, returning its value and expiry.
    pub fn remove(&mut self, key: &[u8]) -> Option<Removed> {
        let record = self.table.remove(key)?;
        self.record_bytes -= Record::alloc_bytes(key.len());
        let e = record.into_entry();
        let expire_at = self.expire_of(&e);
        if e.vol != NO_VOL {
            // The freed record's pointer leaves the TTL list here, unfollowed.
            self.volatile_remove(e.vol);
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
            unsafe { moved.entry_mut() }.vol = at as u32;
        }
    }

    /// Set an absolute expiry on an existing key. Returns false if the key is absent.
    pub fn set_expire(&mut self, key: &[u8], at_ms: i64) -> bool {
        let Some(r) = self.find(key) else {
            return false;
        };
        let vol = self.volatile.len() as u32;
        // SAFETY: `r` is to a record the table owns, and `&mut self` makes this the only
        // reference to it while `e` is used.
        let e = unsafe { r.entry_mut() };
        if e.vol != NO_VOL {
            self.expires[e.vol as usize] = at_ms;
        } else {
            e.vol = vol;
            self.volatile.push(r);
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
        let n = self.table.len();
        // The TTL list's pointers go first, then the table frees the records.
        self.volatile = Vec::new();
        self.table = Table::default();
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
    pub fn keys(&self) -> impl Iterator<Item = (&[u8], &Entry, i64)> {
        self.table.iter().map(|(k, e)| (k, e, self.expire_of(e)))
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
        let e = self.raw_get(key)?;
        let mut bytes = Record::alloc_bytes(key.len()) + self.index_bytes() / self.len().max(1);
        if e.has_expire() {
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
        let (mut gone, mut dead) = (Vec::new(), Vec::new());
        while sh.volatile_len() > 0 {
            sh.active_expire(
                10_000,
                20,
                &mut rng,
                &mut gone,
                &mut dead,
                &mut TtlSample::default(),
            );
        }
        assert!(!gone.is_empty());
        sh.maybe_shrink();
        let mut other = Shard::default();
        other.swap_data(&mut sh);
        assert!(sh.is_empty());
        assert!(!other.is_empty());
        other.clear();
        assert!(other.is_empty());
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
