//! Shard locks held by one command, and the per-database view commands work through.
//!
//! [`Guards`] acquires shard mutexes in ascending (database, shard) order and keeps them until
//! the command (or the whole EXEC) finishes. [`DbHandle`] is what a command sees of one
//! database: key lookups that delete expired keys on the way (lazy expiry), inserts, removes,
//! TTL changes, and `modified()` which wakes WATCH and blocked clients.

use super::{Entry, Keyspace, RecordRef, Shard, NO_EXPIRE};
use crate::types::Value;
use bytes::Bytes;
use parking_lot::{Mutex, MutexGuard};
use std::sync::atomic::Ordering;

/// How long a command waits for a shard on its worker thread before handing the worker's
/// other clients to another thread: commands hold shards for microseconds, so a longer wait
/// means a long command (a big ZUNIONSTORE, FLUSHALL) holds it.
const SHARD_SPIN: std::time::Duration = std::time::Duration::from_micros(200);

/// Lock `shard`. Uncontended, or freed within [`SHARD_SPIN`], this is a plain lock. Past that,
/// on the multi-threaded runtime, the rest of the wait runs under `block_in_place`, so that a
/// client waiting for a shard a long command holds does not stall every other client of its
/// worker thread (and the I/O driver) for the long command's whole run.
fn lock_shard(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    if let Some(g) = shard.try_lock() {
        return g;
    }
    if let Some(g) = shard.try_lock_for(SHARD_SPIN) {
        return g;
    }
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi_thread {
        crate::util::write_turn::block_in_place(|| shard.lock())
    } else {
        shard.lock()
    }
}

/// Shard locks held by the running command, plus what the command's key accesses produced.
pub struct Guards<'a> {
    pub ks: &'a Keyspace,
    held: Vec<(u32, u32, MutexGuard<'a, Shard>)>,
    /// Clock for this command (Unix ms); expiry decisions use it so a command sees one instant.
    pub now_ms: i64,
    /// Keys deleted by lazy expiry while the locks were held: (db, key). Logged as DEL.
    pub expired: Vec<(usize, Bytes)>,
    /// Keys that changed while clients were blocked on them: (db, key).
    pub ready: Vec<(usize, Bytes)>,
    pub hits: u64,
    pub misses: u64,
    /// False while the AOF loads: as in Redis, nothing expires then (logged times are absolute).
    pub expire_enabled: bool,
    /// True while clients are paused (CLIENT PAUSE): expired keys read as absent but are not
    /// deleted, so the dataset does not change, as in Redis.
    pub(crate) expire_paused: bool,
    /// `notify-keyspace-events` class bits for this command (0: nothing is recorded).
    pub notify_flags: u32,
    /// Keyspace events the command caused, in order, published when it has run.
    pub(crate) events: Vec<super::events::Event>,
    /// Some client tracks keys (client-side caching): changed keys are collected.
    pub tracking: bool,
    /// Keys changed by the command, for tracking invalidations.
    pub(crate) touched: Vec<Bytes>,
    /// The command is a client's write on a replica (not its master's): keys it gives a TTL
    /// are remembered for the replica's own expiry (`Keyspace::replica_ttl_keys`).
    pub replica_write: bool,
    /// The entry a read of a packed record was given (made from the record's bytes; see
    /// `keyspace::record`), kept here so the read can borrow it.
    made: Option<Entry>,
}

impl<'a> Guards<'a> {
    pub fn new(ks: &'a Keyspace) -> Guards<'a> {
        Guards {
            ks,
            held: Vec::new(),
            now_ms: 0,
            expired: Vec::new(),
            ready: Vec::new(),
            hits: 0,
            misses: 0,
            expire_enabled: true,
            expire_paused: false,
            notify_flags: 0,
            events: Vec::new(),
            tracking: false,
            replica_write: false,
            touched: Vec::new(),
            made: None,
        }
    }

    /// Pack again what the command unpacked in the shards it holds, before letting go of them.
    fn settle(&mut self) {
        for (_, _, g) in &mut self.held {
            g.settle();
        }
    }

    /// True if no shard is locked.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Lock the shards that `keys` of database `db` live in (plus any already held).
    pub fn lock_keys<'k>(&mut self, db: usize, keys: impl IntoIterator<Item = &'k [u8]>) {
        let mut want: Vec<(u32, u32)> = keys
            .into_iter()
            .map(|k| (db as u32, self.ks.shard_of(k) as u32))
            .collect();
        self.lock_set(&mut want);
    }

    /// Lock the shard of a single key (the common case; no allocation).
    pub fn lock_one(&mut self, db: usize, key: &[u8]) {
        let want = (db as u32, self.ks.shard_of(key) as u32);
        if self.held.is_empty() {
            let g = lock_shard(&self.ks.dbs[db].shards[want.1 as usize]);
            self.held.push((want.0, want.1, g));
        } else {
            self.lock_set(&mut vec![want]);
        }
    }

    /// Lock every shard of database `db`.
    pub fn lock_db(&mut self, db: usize) {
        let mut want: Vec<(u32, u32)> = (0..self.ks.shards_per_db())
            .map(|s| (db as u32, s as u32))
            .collect();
        self.lock_set(&mut want);
    }

    /// Lock every shard of every database.
    pub fn lock_all(&mut self) {
        let per = self.ks.shards_per_db();
        let mut want: Vec<(u32, u32)> = (0..self.ks.num_dbs())
            .flat_map(|d| (0..per).map(move |s| (d as u32, s as u32)))
            .collect();
        self.lock_set(&mut want);
    }

    fn lock_set(&mut self, want: &mut Vec<(u32, u32)>) {
        want.sort_unstable();
        want.dedup();
        want.retain(|w| {
            self.held
                .binary_search_by(|(d, s, _)| (*d, *s).cmp(w))
                .is_err()
        });
        if want.is_empty() {
            return;
        }
        if self.held.is_empty()
            || self.held.last().map(|(d, s, _)| (*d, *s)) < want.first().copied()
        {
            for &(d, s) in want.iter() {
                let g = lock_shard(&self.ks.dbs[d as usize].shards[s as usize]);
                self.held.push((d, s, g));
            }
            return;
        }
        self.lock_out_of_order(want);
    }

    /// Lock `want` (sorted, none held) when some of it sorts before a shard already held.
    /// Waiting for such a shard while holding a later one could deadlock with a command that
    /// holds it and waits, in order, for ours (EXEC's lock_all against a push that serves a
    /// blocked BLMOVE whose destination sorts first). So each is only tried; if one is busy,
    /// everything is released and re-acquired in the global order. Holding the wanted shards
    /// without ever letting go of the others keeps the command atomic; the release, when it
    /// happens, lets another command run in between (callers lock before they read).
    fn lock_out_of_order(&mut self, want: &[(u32, u32)]) {
        let mut taken = Vec::with_capacity(want.len());
        for &(d, s) in want {
            match self.ks.dbs[d as usize].shards[s as usize].try_lock() {
                Some(g) => taken.push((d, s, g)),
                None => {
                    taken.clear();
                    self.settle();
                    let mut all: Vec<(u32, u32)> =
                        self.held.iter().map(|(d, s, _)| (*d, *s)).collect();
                    all.extend(want.iter().copied());
                    all.sort_unstable();
                    self.held.clear();
                    for (d, s) in all {
                        let g = lock_shard(&self.ks.dbs[d as usize].shards[s as usize]);
                        self.held.push((d, s, g));
                    }
                    return;
                }
            }
        }
        self.held.extend(taken);
        self.held.sort_unstable_by_key(|(d, s, _)| (*d, *s));
    }

    /// Visit every shard of every database, for a figure over the whole keyspace (MEMORY
    /// STATS). Shards this command holds (EXEC holds all) are read in place; the others are
    /// locked one at a time while nothing is held, and only tried when something is (a
    /// script's shards), so the global lock order is never broken: a shard busy then is left
    /// out of the figure.
    pub fn visit_all_shards(&mut self, mut f: impl FnMut(usize, &Shard)) {
        let per = self.ks.shards_per_db();
        for d in 0..self.ks.num_dbs() {
            for s in 0..per {
                let key = (d as u32, s as u32);
                if let Ok(i) = self
                    .held
                    .binary_search_by(|(hd, hs, _)| (*hd, *hs).cmp(&key))
                {
                    f(d, &self.held[i].2);
                } else if self.held.is_empty() {
                    f(d, &self.ks.dbs[d].shards[s].lock());
                } else if let Some(g) = self.ks.dbs[d].shards[s].try_lock() {
                    f(d, &g);
                }
            }
        }
    }

    /// True when the shard holding `key` of database `db` is locked.
    pub fn holds_key(&self, db: usize, key: &[u8]) -> bool {
        let want = (db as u32, self.ks.shard_of(key) as u32);
        self.held
            .binary_search_by(|(d, s, _)| (*d, *s).cmp(&want))
            .is_ok()
    }

    /// Release every lock.
    pub fn release(&mut self) {
        self.settle();
        self.held.clear();
    }

    /// The locked shard `shard` of `db`. A shard the command did not declare is locked on
    /// demand (see [`Guards::lock_out_of_order`] for one that sorts before a held shard);
    /// declared keys are the rule, this is the safety net.
    pub fn shard_mut(&mut self, db: usize, shard: usize) -> &mut Shard {
        let idx = self.shard_index(db, shard);
        &mut self.held[idx].2
    }

    /// Where the locked shard `shard` of `db` is in `held` (locking it as
    /// [`Guards::shard_mut`] does); it stays there until a lock is taken or released.
    fn shard_index(&mut self, db: usize, shard: usize) -> usize {
        let key = (db as u32, shard as u32);
        match self.held.binary_search_by(|(d, s, _)| (*d, *s).cmp(&key)) {
            Ok(i) => i,
            Err(i) if i == self.held.len() => {
                let g = lock_shard(&self.ks.dbs[db].shards[shard]);
                self.held.push((key.0, key.1, g));
                i
            }
            Err(_) => {
                self.lock_out_of_order(&[key]);
                self.held
                    .binary_search_by(|(d, s, _)| (*d, *s).cmp(&key))
                    .unwrap_or_else(|_| unreachable!("lock_out_of_order holds {key:?}"))
            }
        }
    }

    /// The view of database `db`.
    pub fn db(&mut self, db: usize) -> DbHandle<'_, 'a> {
        DbHandle { g: self, db }
    }
}

impl Drop for Guards<'_> {
    fn drop(&mut self) {
        self.settle();
    }
}

/// A live value found by [`DbHandle::string_slot`].
pub enum StrSlot<'s> {
    /// A short string kept packed.
    Packed(PackedStr<'s>),
    /// Any other value, as stored.
    Stored(&'s mut Value),
}

/// A short string kept packed in its record, to read and rewrite in place.
pub struct PackedStr<'s> {
    shard: &'s mut Shard,
    r: RecordRef,
}

impl PackedStr<'_> {
    /// The string.
    pub fn bytes(&self) -> &[u8] {
        self.shard.packed_value(self.r)
    }

    /// Replace the string with `v`, keeping the key's TTL and access word.
    pub fn set(self, v: &[u8]) {
        self.shard.rewrite_packed(self.r, v);
    }
}

/// One database as a command sees it.
pub struct DbHandle<'g, 'a> {
    g: &'g mut Guards<'a>,
    db: usize,
}

impl<'g, 'a> DbHandle<'g, 'a> {
    pub fn index(&self) -> usize {
        self.db
    }

    pub fn now_ms(&self) -> i64 {
        self.g.now_ms
    }

    /// The shard holding `key`, after deleting the key if it has expired.
    pub fn shard(&mut self, key: &[u8]) -> &mut Shard {
        let sid = self.g.ks.shard_of(key);
        let now = self.g.now_ms;
        let db = self.db;
        let expired = self.g.expire_enabled
            && !self.g.expire_paused
            && self.g.shard_mut(db, sid).is_expired(key, now);
        if expired {
            let blocked = self.g.ks.blocked_clients.load(Ordering::Relaxed) > 0;
            let sh = self.g.shard_mut(db, sid);
            if let Some(gone) = sh.remove(key) {
                super::lazyfree::free_if(&super::lazyfree::EXPIRE, gone.value);
            }
            sh.expired_total += 1;
            sh.touch_watched(key);
            let k = Bytes::copy_from_slice(key);
            if blocked {
                self.g.ready.push((db, k.clone()));
            }
            if self.g.notify_flags & super::events::EXPIRED != 0 {
                self.g.events.push((db, "expired", k.clone()));
            }
            self.g.expired.push((db, k));
        }
        self.g.shard_mut(db, sid)
    }

    /// The live entry for `key`, if any: one hash lookup when the key is live or absent.
    pub fn get(&mut self, key: &[u8]) -> Option<&mut Entry> {
        self.lookup(key, false, true)
    }

    /// A read that counts in keyspace_hits / keyspace_misses but leaves the key's access
    /// time (LRU clock, LFU counter) alone: TTL, TYPE, EXISTS, as Redis's LOOKUP_NOTOUCH.
    pub fn read_no_touch(&mut self, key: &[u8]) -> Option<&Entry> {
        self.lookup_read(key, true, false).map(|e| &*e)
    }

    /// The header of the live key `key` (its access word), found without counting or
    /// touching it: RESTORE's IDLETIME and FREQ.
    pub fn header_no_touch(&mut self, key: &[u8]) -> Option<&mut super::Header> {
        let (at, r) = self.lookup_record(key, false, false)?;
        Some(self.g.held[at].2.header_mut(r))
    }

    /// The live entry for `key` to read: as [`lookup`](Self::lookup), but a packed record
    /// is read where it is, not unpacked: the entry returned is then one made from its bytes
    /// (kept in `made`), and a change to it is not kept. Readers that may change what they
    /// read use [`lookup`](Self::lookup) (or [`string_slot`](Self::string_slot)).
    fn lookup_read(&mut self, key: &[u8], count: bool, touch: bool) -> Option<&mut Entry> {
        let (at, r) = self.lookup_record(key, count, touch)?;
        let g = &mut *self.g;
        let shard = &mut g.held[at].2;
        match shard.made_entry(r) {
            Some(e) => Some(g.made.insert(e)),
            None => Some(shard.entry_mut(r)),
        }
    }

    /// The live record of `key` (and where its shard is in `held`), expiring it first if it
    /// has expired, counting the access in keyspace_hits / keyspace_misses when `count`, and
    /// updating its access word when `touch`.
    fn lookup_record(
        &mut self,
        key: &[u8],
        count: bool,
        touch: bool,
    ) -> Option<(usize, RecordRef)> {
        let sid = self.g.ks.shard_of(key);
        let now = self.g.now_ms;
        let enabled = self.g.expire_enabled;
        let db = self.db;
        let held = self.g.shard_index(db, sid);
        let found = self.g.held[held].2.find_with_expire(key);
        match found {
            None => {
                if count {
                    self.note_miss(key);
                }
                None
            }
            Some((r, at)) if !(enabled && at != NO_EXPIRE && at < now) => {
                if count {
                    self.g.hits += 1;
                }
                if touch {
                    super::access::touch(self.g.held[held].2.header_mut(r), now);
                }
                Some((held, r))
            }
            Some(_) => {
                self.shard(key);
                if count {
                    self.note_miss(key);
                }
                None
            }
        }
    }

    /// The live value of `key` to rewrite a string where it is kept (INCR and the like): a
    /// short string stays packed (see `keyspace::record`), anything else is the stored value.
    /// An access as [`value`](Self::value)'s.
    pub fn string_slot(&mut self, key: &[u8]) -> Option<StrSlot<'_>> {
        let (at, r) = self.lookup_record(key, false, true)?;
        let shard = &mut self.g.held[at].2;
        if shard.is_packed(r) {
            Some(StrSlot::Packed(PackedStr { shard, r }))
        } else {
            Some(StrSlot::Stored(&mut shard.entry_mut(r).value))
        }
    }

    fn lookup(&mut self, key: &[u8], count: bool, touch: bool) -> Option<&mut Entry> {
        let (at, r) = self.lookup_record(key, count, touch)?;
        Some(self.g.held[at].2.entry_mut(r))
    }

    /// A read found no key: counted in keyspace_misses and, as Redis's lookupKeyRead does,
    /// published as a `keymiss` event (class `m`).
    fn note_miss(&mut self, key: &[u8]) {
        self.g.misses += 1;
        if self.g.notify_flags & crate::keyspace::events::KEY_MISS != 0 {
            self.g
                .events
                .push((self.db, "keymiss", Bytes::copy_from_slice(key)));
        }
    }

    /// The live entry for `key` without counting as an access (OBJECT, eviction figures).
    /// The entry for `key` as stored, expired or not, without expiring it (DEBUG OBJECT,
    /// which looks at the dictionary itself in Redis).
    pub fn peek_stored(&mut self, key: &[u8]) -> Option<&Entry> {
        let sid = self.g.ks.shard_of(key);
        let at = self.g.shard_index(self.db, sid);
        let g = &mut *self.g;
        match g.held[at].2.raw_get(key)? {
            super::EntryRef::Stored(e) => Some(e),
            super::EntryRef::Made(e) => Some(g.made.insert(e)),
        }
    }

    pub fn peek(&mut self, key: &[u8]) -> Option<&Entry> {
        if self.g.expire_paused && self.g.expire_enabled && self.is_expired_entry(key) {
            return None;
        }
        self.shard(key);
        self.peek_stored(key)
    }

    /// The live value for `key`, if any.
    pub fn value(&mut self, key: &[u8]) -> Option<&mut Value> {
        self.lookup(key, false, true).map(|e| &mut e.value)
    }

    /// The live value for `key` to read, counted in keyspace_hits / keyspace_misses. A short
    /// string is read in place (see [`lookup_read`](Self::lookup_read)): changes to what this
    /// returns are only kept for the other types; code that changes a string uses
    /// [`value`](Self::value) or [`string_slot`](Self::string_slot).
    pub fn read(&mut self, key: &[u8]) -> Option<&mut Value> {
        self.lookup_read(key, true, true).map(|e| &mut e.value)
    }

    /// The live value for `key` to read, as [`read`](Self::read) but not counted in
    /// keyspace_hits / keyspace_misses (DUMP, MEMORY USAGE).
    pub fn read_uncounted(&mut self, key: &[u8]) -> Option<&mut Value> {
        self.lookup_read(key, false, true).map(|e| &mut e.value)
    }

    pub fn exists(&mut self, key: &[u8]) -> bool {
        self.lookup_record(key, false, true).is_some()
    }

    /// Store `value` at `key`, clearing any TTL.
    pub fn insert(&mut self, key: &[u8], value: Value) {
        self.note_new(key);
        self.shard(key).insert(key, value, false);
    }

    /// Store `value` at `key`, keeping an existing TTL.
    pub fn insert_keep_ttl(&mut self, key: &[u8], value: Value) {
        self.note_new(key);
        self.shard(key).insert(key, value, true);
    }

    /// Record the `new` keyspace event when `key` is about to be created.
    fn note_new(&mut self, key: &[u8]) {
        if self.g.notify_flags & super::events::NEW != 0
            && self.lookup_record(key, false, true).is_none()
        {
            self.g
                .events
                .push((self.db, "new", Bytes::copy_from_slice(key)));
        }
    }

    /// Record keyspace event `event` of class `class` on `key` of this database.
    pub fn notify(&mut self, class: u32, event: &'static str, key: &[u8]) {
        if self.g.notify_flags & class != 0 {
            self.g
                .events
                .push((self.db, event, Bytes::copy_from_slice(key)));
        }
    }

    /// Delete `key`; None if it did not exist (or had expired).
    pub fn remove(&mut self, key: &[u8]) -> Option<super::Removed> {
        self.shard(key).remove(key)
    }

    /// Absolute expiry of `key`: None if the key is absent, Some(NO_EXPIRE) if persistent.
    pub fn expire_at(&mut self, key: &[u8]) -> Option<i64> {
        self.lookup_record(key, false, true)?;
        self.shard(key).raw_expire(key)
    }

    /// Set an absolute expiry in Unix ms on an existing key.
    pub fn set_expire(&mut self, key: &[u8], at_ms: i64) -> bool {
        if self.g.replica_write {
            self.g
                .ks
                .replica_ttl_keys
                .lock()
                .insert((self.db, Bytes::copy_from_slice(key)));
        }
        self.shard(key).set_expire(key, at_ms)
    }

    /// Remove a key's TTL; true if it had one.
    pub fn persist(&mut self, key: &[u8]) -> bool {
        self.shard(key).clear_expire(key)
    }

    /// Record that `key` was changed: invalidates WATCHes and wakes clients blocked on it.
    pub fn modified(&mut self, key: &[u8]) {
        let sid = self.g.ks.shard_of(key);
        let db = self.db;
        self.g.shard_mut(db, sid).touch_watched(key);
        if self.g.tracking {
            self.g.touched.push(Bytes::copy_from_slice(key));
        }
        if self.g.ks.blocked_clients.load(Ordering::Relaxed) > 0 {
            self.g.ready.push((db, Bytes::copy_from_slice(key)));
        }
    }

    /// Visit every locked shard of this database (the command must have locked the whole db).
    pub fn for_each_shard(&mut self, mut f: impl FnMut(usize, &mut Shard)) {
        for sid in 0..self.g.ks.shards_per_db() {
            f(sid, self.g.shard_mut(self.db, sid));
        }
    }

    /// Shard `sid` of this database.
    pub fn shard_at(&mut self, sid: usize) -> &mut Shard {
        self.g.shard_mut(self.db, sid)
    }

    /// Number of live keys in this database (expired-but-not-reaped keys included, as Redis).
    pub fn len(&mut self) -> usize {
        let mut n = 0;
        self.for_each_shard(|_, s| n += s.len());
        n
    }

    pub fn is_empty(&mut self) -> bool {
        self.len() == 0
    }

    /// True if `key` is present but expired (without deleting it).
    pub fn is_expired_entry(&mut self, key: &[u8]) -> bool {
        let sid = self.g.ks.shard_of(key);
        let now = self.g.now_ms;
        let db = self.db;
        self.g.shard_mut(db, sid).is_expired(key, now)
    }

    pub fn has_ttl(e: &Entry) -> bool {
        e.has_expire()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::Keyspace;

    fn s(v: &str) -> Value {
        Value::Str(crate::types::compact::CompactBytes::new(v.as_bytes()))
    }

    #[test]
    fn lookups_see_live_keys_and_delete_expired_ones() {
        let ks = Keyspace::new(2, 4);
        let mut g = Guards::new(&ks);
        g.now_ms = 1000;
        g.lock_db(0);
        let mut db = g.db(0);
        db.insert(b"live", s("1"));
        db.insert(b"old", s("2"));
        db.set_expire(b"old", 500);
        db.insert(b"later", s("3"));
        db.set_expire(b"later", 5000);
        assert!(matches!(db.read(b"live"), Some(Value::Str(v)) if &v[..] == b"1"));
        if let Some(Value::Str(v)) = db.value(b"live") {
            *v = crate::types::compact::CompactBytes::new(b"changed");
        }
        assert!(
            matches!(db.get(b"live").map(|e| &e.value), Some(Value::Str(v)) if &v[..] == b"changed")
        );
        assert!(db.read(b"old").is_none());
        assert!(db.get(b"later").is_some());
        assert!(db.read(b"absent").is_none());
        assert_eq!(db.len(), 2, "the expired key was deleted on access");
        assert_eq!(g.hits, 1);
        assert_eq!(g.misses, 2);
        assert_eq!(g.expired.len(), 1);
        // While loading, nothing expires.
        g.expire_enabled = false;
        g.now_ms = 10_000;
        assert!(g.db(0).get(b"later").is_some());
    }

    /// Two commands that each hold a shard the other wants, one of them asking out of order
    /// (a push serving a blocked BLMOVE whose destination sorts first, against EXEC's
    /// lock_all): the out-of-order side must let go instead of waiting. Before this was
    /// handled, the pair deadlocked and both shards stayed locked for good.
    #[test]
    fn a_shard_wanted_out_of_order_never_deadlocks() {
        use std::sync::{mpsc, Arc, Barrier};
        let (done_tx, done_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let ks = Arc::new(Keyspace::new(1, 4));
            let barrier = Arc::new(Barrier::new(2));
            let pusher = {
                let (ks, barrier) = (ks.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let mut g = Guards::new(&ks);
                    g.lock_set(&mut vec![(0, 3)]);
                    barrier.wait();
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    g.shard_mut(0, 1);
                    assert!(g.held.iter().map(|(d, s, _)| (*d, *s)).eq([(0, 1), (0, 3)]));
                })
            };
            let exec = {
                let (ks, barrier) = (ks.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let mut g = Guards::new(&ks);
                    g.lock_set(&mut vec![(0, 1)]);
                    barrier.wait();
                    g.lock_all();
                    assert_eq!(g.held.len(), 4);
                })
            };
            let ok = pusher.join().is_ok() && exec.join().is_ok();
            let _ = done_tx.send(ok);
        });
        let finished = done_rx.recv_timeout(std::time::Duration::from_secs(10));
        assert_eq!(
            finished,
            Ok(true),
            "the two commands deadlocked (or one panicked)"
        );
    }

    #[test]
    fn an_idle_shard_wanted_out_of_order_is_added_without_letting_go() {
        let ks = Keyspace::new(1, 4);
        let mut g = Guards::new(&ks);
        g.lock_set(&mut vec![(0, 2)]);
        g.shard_mut(0, 0);
        assert!(g.held.iter().map(|(d, s, _)| (*d, *s)).eq([(0, 0), (0, 2)]));
        assert!(ks.dbs[0].shards[0].try_lock().is_none());
        assert!(ks.dbs[0].shards[2].try_lock().is_none());
    }
}
