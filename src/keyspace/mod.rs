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
//! Each shard owns, besides the key → entry map:
//! - a slot table giving every key a stable position, which SCAN walks with a cursor so
//!   that keys present for the whole scan are returned even while the shard grows;
//! - the list of keys with a TTL, which the active-expiry reaper samples at random;
//! - the WATCH registrations on its keys.
//!
//! Expiry is lazy (any access to an expired key deletes it first, see [`DbHandle`]) and active
//! (see [`Shard::active_expire`], driven by the server's cron).

pub mod access;
pub mod events;
pub mod guards;

/// A key as the keyspace stores it (short keys inline in the table slot).
pub use crate::types::compact::CompactBytes as Key;
pub use guards::{DbHandle, Guards};

use crate::types::located::Located;
use crate::types::Value;
use bytes::Bytes;
use hashbrown::{DefaultHashBuilder, HashMap, HashSet};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// No expiry.
pub const NO_EXPIRE: i64 = -1;

/// One key's value and metadata.
pub struct Entry {
    pub value: Value,
    /// Absolute expiry in Unix milliseconds, or [`NO_EXPIRE`].
    pub expire_at: i64,
    /// Position in the shard's slot table (SCAN order).
    slot: u32,
    /// Position in the shard's volatile-key list, when `expire_at` is set.
    vol: u32,
    /// Last access (LRU clock) or access frequency (LFU), see [`crate::evict`].
    pub access: u32,
}

impl Entry {
    pub fn has_expire(&self) -> bool {
        self.expire_at != NO_EXPIRE
    }
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
#[derive(Default)]
pub struct Shard {
    /// Allocated through [`Located`] so a pipelined batch can prefetch its keys' table lines
    /// ([`Keyspace::warm_keys`]).
    map: HashMap<Key, Entry, DefaultHashBuilder, Located>,
    /// SCAN order: `slots[i]` is the key at position i, or None if free.
    slots: Vec<Option<Key>>,
    free_slots: Vec<u32>,
    /// Keys that carry a TTL, for random sampling by the reaper.
    volatile: Vec<Key>,
    /// WATCH registrations by key.
    pub watched: HashMap<Bytes, Vec<Watcher>>,
    /// Keys deleted because they expired (lazily or actively), for INFO and the AOF.
    pub expired_total: u64,
}

impl Shard {
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn volatile_len(&self) -> usize {
        self.volatile.len()
    }

    /// Start loading the table lines a lookup of `key` will read first.
    #[inline]
    pub fn prefetch(&self, key: &[u8]) {
        let h = std::hash::BuildHasher::hash_one(self.map.hasher(), key);
        self.map
            .allocator()
            .prefetch(h, std::mem::size_of::<(Key, Entry)>());
    }

    /// Look up without any expiry check.
    pub fn raw_get(&self, key: &[u8]) -> Option<&Entry> {
        self.map.get(key)
    }

    pub fn raw_get_mut(&mut self, key: &[u8]) -> Option<&mut Entry> {
        self.map.get_mut(key)
    }

    /// True if the key exists and its TTL has passed at `now_ms`: as Redis's keyIsExpired, a
    /// key lives through the millisecond its expiry names (`now > when`).
    pub fn is_expired(&self, key: &[u8], now_ms: i64) -> bool {
        matches!(self.map.get(key), Some(e) if e.expire_at != NO_EXPIRE && e.expire_at < now_ms)
    }

    /// Insert or overwrite; the TTL is cleared unless `keep_ttl`.
    pub fn insert(&mut self, key: &[u8], value: Value, keep_ttl: bool) {
        if let Some(e) = self.map.get_mut(key) {
            e.value = value;
            if !keep_ttl && e.expire_at != NO_EXPIRE {
                self.clear_expire(key);
            }
            return;
        }
        let key = Key::new(key);
        let slot = match self.free_slots.pop() {
            Some(s) => {
                self.slots[s as usize] = Some(key.clone());
                s
            }
            None => {
                self.slots.push(Some(key.clone()));
                (self.slots.len() - 1) as u32
            }
        };
        self.map.insert(
            key,
            Entry {
                value,
                expire_at: NO_EXPIRE,
                slot,
                vol: 0,
                access: access::initial_access(),
            },
        );
    }

    /// Remove a key, returning its entry.
    pub fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let (k, e) = self.map.remove_entry(key)?;
        if e.expire_at != NO_EXPIRE {
            self.volatile_remove(e.vol);
        }
        let slot = e.slot as usize;
        self.slots[slot] = None;
        if slot + 1 == self.slots.len() {
            // Trim free positions at the end so the table shrinks as keys go.
            while matches!(self.slots.last(), Some(None)) {
                self.slots.pop();
            }
            let len = self.slots.len() as u32;
            self.free_slots.retain(|&s| s < len);
        } else {
            self.free_slots.push(e.slot);
        }
        drop(k);
        Some(e)
    }

    fn volatile_remove(&mut self, pos: u32) {
        let pos = pos as usize;
        self.volatile.swap_remove(pos);
        if let Some(moved) = self.volatile.get(pos) {
            if let Some(e) = self.map.get_mut(&moved[..]) {
                e.vol = pos as u32;
            }
        }
    }

    /// Set an absolute expiry on an existing key. Returns false if the key is absent.
    pub fn set_expire(&mut self, key: &[u8], at_ms: i64) -> bool {
        let Some((k, e)) = self.map.get_key_value_mut(key) else {
            return false;
        };
        if e.expire_at == NO_EXPIRE {
            e.vol = self.volatile.len() as u32;
            self.volatile.push(k.clone());
        }
        e.expire_at = at_ms;
        true
    }

    /// Remove the TTL. Returns true if there was one.
    pub fn clear_expire(&mut self, key: &[u8]) -> bool {
        let Some(e) = self.map.get_mut(key) else {
            return false;
        };
        if e.expire_at == NO_EXPIRE {
            return false;
        }
        e.expire_at = NO_EXPIRE;
        let vol = e.vol;
        self.volatile_remove(vol);
        true
    }

    /// Remove every key; returns how many there were.
    pub fn clear(&mut self) -> usize {
        let n = self.map.len();
        self.map = HashMap::default();
        self.slots = Vec::new();
        self.free_slots = Vec::new();
        self.volatile = Vec::new();
        n
    }

    /// `key` was changed or deleted (called after the change): its watchers' transactions
    /// fail, except where the key was stale when watched and is now gone or still expired.
    pub fn touch_watched(&mut self, key: &[u8]) {
        let Some(watchers) = self.watched.get(key) else {
            return;
        };
        let now = crate::clock::unix_ms();
        let present = self.map.contains_key(key);
        let expired = self.is_expired(key, now);
        for w in watchers {
            w.touch(present, expired);
        }
    }

    /// The shard is about to be emptied (FLUSHDB, FLUSHALL, loading): watchers of keys that
    /// exist fail, except those that watched them already expired.
    pub fn touch_all_watched(&mut self) {
        for (key, watchers) in &self.watched {
            if !self.map.contains_key(&key[..]) {
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
        let present = self.map.contains_key(key);
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

    /// Walk keys from slot `cursor`, calling `f` for each live key, until `count` slots were
    /// visited. Returns the next cursor, or 0 at the end.
    pub fn scan_slots(
        &self,
        cursor: usize,
        count: usize,
        mut f: impl FnMut(&Key, &Entry),
    ) -> usize {
        let mut i = cursor;
        let mut visited = 0;
        while i < self.slots.len() && visited < count {
            if let Some(k) = &self.slots[i] {
                if let Some(e) = self.map.get(&k[..]) {
                    f(k, e);
                }
                visited += 1;
            }
            i += 1;
        }
        if i >= self.slots.len() {
            0
        } else {
            i
        }
    }

    pub fn keys(&self) -> impl Iterator<Item = (&Key, &Entry)> {
        self.map.iter()
    }

    /// A uniformly random key among those with a TTL, if any (volatile-* eviction).
    pub fn random_volatile_key(&self, rng: &mut impl rand::Rng) -> Option<Bytes> {
        if self.volatile.is_empty() {
            return None;
        }
        Some(self.volatile[rng.gen_range(0..self.volatile.len())].to_bytes())
    }

    /// A uniformly random key of this shard, if any.
    pub fn random_key(&self, rng: &mut impl rand::Rng) -> Option<Bytes> {
        if self.map.is_empty() {
            return None;
        }
        // Slots are dense enough (trailing frees are trimmed, others reused) for rejection sampling;
        // fall back to a walk if we keep hitting holes.
        for _ in 0..64 {
            let i = rng.gen_range(0..self.slots.len());
            if let Some(k) = &self.slots[i] {
                return Some(k.to_bytes());
            }
        }
        self.slots.iter().flatten().next().map(Key::to_bytes)
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
        graveyard: &mut Vec<Entry>,
        ttls: &mut TtlSample,
    ) -> usize {
        let n = self.volatile.len().min(sample);
        for _ in 0..n {
            if self.volatile.is_empty() {
                break;
            }
            let i = rng.gen_range(0..self.volatile.len());
            let key = self.volatile[i].clone();
            if let Some(e) = self.map.get(&key) {
                if e.expire_at >= now_ms {
                    ttls.sum_ms += (e.expire_at - now_ms) as u64;
                    ttls.count += 1;
                }
            }
            if self.is_expired(&key, now_ms) {
                if let Some(e) = self.remove(&key) {
                    graveyard.push(e);
                }
                self.touch_watched(&key);
                self.expired_total += 1;
                expired.push(key.to_bytes());
            }
        }
        n
    }

    /// Bytes of this shard's own tables, what Redis calls the database's overhead: the key
    /// table (with the keys and values stored inline in it) and its SCAN slot table, and the
    /// list of keys with a TTL (MEMORY STATS `overhead.hashtable.main` / `.expires`).
    pub fn table_bytes(&self) -> (usize, usize) {
        let main = self.map.allocation_size()
            + self.slots.capacity() * std::mem::size_of::<Option<Key>>()
            + self.free_slots.capacity() * std::mem::size_of::<u32>();
        let expires = self.volatile.capacity() * std::mem::size_of::<Key>();
        (main, expires)
    }

    /// Give memory back after mass deletions: shrink the tables when they are mostly empty.
    /// Cost is proportional to the live keys, so callers do it for shards that emptied out.
    pub fn maybe_shrink(&mut self) {
        let len = self.map.len();
        if self.map.capacity() > 64 && self.map.capacity() / 8 > len {
            self.map.shrink_to(len);
        }
        if self.volatile.capacity() > 64 && self.volatile.capacity() / 8 > self.volatile.len() {
            self.volatile.shrink_to_fit();
        }
        if self.slots.capacity() > 64 && self.slots.capacity() / 8 > self.slots.len() {
            self.slots.shrink_to_fit();
        }
        if self.free_slots.capacity() > 64 && self.free_slots.capacity() / 8 > self.free_slots.len()
        {
            self.free_slots.shrink_to_fit();
        }
    }

    /// After an eviction, under `maxmemory`: give back a table that could be half its size.
    /// A deleted entry frees nothing of its table (entries live in it), so the one insert
    /// that doubled a shard's table (a jump of several KiB at a few dozen keys per shard)
    /// left memory over the limit whatever was evicted; Redis's keys free their memory one by
    /// one, and it declines to grow a table that would cross the limit. Shrinking the shard
    /// that lost a key once it fits the smaller table gives the jump back.
    pub fn shrink_after_eviction(&mut self) {
        let len = self.map.len();
        if len <= self.map.capacity() / 2 {
            self.map.shrink_to(len);
        }
        if self.volatile.len() <= self.volatile.capacity() / 2 {
            self.volatile.shrink_to(self.volatile.len());
        }
        if self.slots.len() <= self.slots.capacity() / 2 {
            self.slots.shrink_to(self.slots.len());
        }
    }

    /// Move all contents out, leaving an empty shard (SWAPDB, FLUSHALL ASYNC).
    pub fn swap_data(&mut self, other: &mut Shard) {
        std::mem::swap(&mut self.map, &mut other.map);
        std::mem::swap(&mut self.slots, &mut other.slots);
        std::mem::swap(&mut self.free_slots, &mut other.free_slots);
        std::mem::swap(&mut self.volatile, &mut other.volatile);
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
        while sh.map.capacity() < 100 {
            sh.insert(format!("k{n}").as_bytes(), s("v"), false);
            n += 1;
        }
        let grown = sh.table_bytes().0;
        let cap = sh.map.capacity();
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
            cur = sh.scan_slots(cur, 3, |k, _| seen.push(k.clone()));
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
        let size = std::mem::size_of::<(Key, Entry)>();
        let (ctrl, mask) = sh
            .map
            .allocator()
            .table(size)
            .expect("table shape recognised");
        let mut home = 0;
        for i in 0..n {
            let key = format!("k:{i:012}");
            let h = std::hash::BuildHasher::hash_one(sh.map.hasher(), key.as_bytes());
            let (k, _) = sh.map.get_key_value(key.as_bytes()).expect("present");
            // The slot holds the (Key, Entry) pair; the key is its first field or not, so
            // compare the slot ranges.
            let at = k as *const Key as usize;
            let pos = h as usize & mask;
            let slot = ctrl - (pos + 1) * size;
            if at >= slot && at < slot + size {
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
