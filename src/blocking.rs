//! Clients blocked on keys (BZPOPMIN, BZMPOP, BLPOP ...), served in arrival order.
//!
//! A blocking command that finds nothing to pop registers a [`Waiter`] under each of its keys
//! while it still holds the keys' shard locks, so no write can slip between its check and its
//! registration. Every write that touches a key while anyone is blocked records the key as
//! ready ([`crate::keyspace::DbHandle::modified`]); right after that command (or EXEC), still
//! under its locks, [`serve_ready`] hands the key's elements to its waiters in the order they
//! blocked, by running each waiter's serve function on the key, exactly as Redis does after
//! each command. A waiter that times out or disconnects removes itself.

use crate::keyspace::{DbHandle, Guards};
use crate::protocol::Reply;
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::oneshot;

/// Tries to serve a waiter from a key that became ready. Returns the reply and the commands to
/// log in the AOF (the pops that happened), or None to keep waiting.
pub type ServeFn = fn(&mut DbHandle, &Waiter, &[u8]) -> Option<(Reply, Vec<Vec<Bytes>>)>;

pub struct Waiter {
    pub client_id: u64,
    pub db: usize,
    pub keys: Vec<Bytes>,
    /// The blocking command's arguments, for the serve function.
    pub args: Vec<Bytes>,
    pub serve: ServeFn,
    /// Try the waiters queued behind this one even when it cannot be served (stream readers
    /// wait for different IDs); list and sorted-set pops stop at the first that cannot.
    pub serve_each: bool,
    /// Cluster mode: a READONLY client's read (XREAD BLOCK), which a replica serves for its
    /// master's slots; a slot moving away does not redirect it while that master owns it.
    pub replica_read: bool,
    /// The client's connection is TLS (the port a cluster redirect names).
    pub on_tls: bool,
    /// Set when the client was unblocked because the server stopped being a master: its
    /// connection closes once the error reply is written, as Redis's does.
    pub close_after_reply: std::sync::atomic::AtomicBool,
    tx: Mutex<Option<oneshot::Sender<Reply>>>,
}

impl Waiter {
    /// Take the reply channel; only one of timeout and serve gets it.
    fn take(&self) -> Option<oneshot::Sender<Reply>> {
        self.tx.lock().take()
    }
}

/// A blocked client's side: await `rx`, or give up with [`Registry::cancel`].
pub struct Blocked {
    pub waiter: Arc<Waiter>,
    pub rx: oneshot::Receiver<Reply>,
}

/// Waiters in arrival order, by (database, key).
type WaitersByKey = HashMap<(usize, Bytes), VecDeque<Arc<Waiter>>>;

#[derive(Default)]
pub struct Registry {
    by_key: Mutex<WaitersByKey>,
}

impl Registry {
    /// Register a waiter on `keys` of `db`. Call while holding the keys' shard locks.
    #[allow(clippy::too_many_arguments)] // one call site, each argument a field of the waiter
    pub fn block(
        &self,
        guards: &Guards,
        client_id: u64,
        db: usize,
        keys: Vec<Bytes>,
        args: Vec<Bytes>,
        serve: ServeFn,
        serve_each: bool,
        replica_read: bool,
        on_tls: bool,
    ) -> Blocked {
        let (tx, rx) = oneshot::channel();
        let w = Arc::new(Waiter {
            client_id,
            db,
            keys,
            args,
            serve,
            serve_each,
            replica_read,
            on_tls,
            close_after_reply: std::sync::atomic::AtomicBool::new(false),
            tx: Mutex::new(Some(tx)),
        });
        let mut map = self.by_key.lock();
        for k in &w.keys {
            let q = map.entry((db, k.clone())).or_default();
            if !q.iter().any(|x| Arc::ptr_eq(x, &w)) {
                q.push_back(w.clone());
            }
        }
        guards.ks.blocked_clients.fetch_add(1, Ordering::Relaxed);
        Blocked { waiter: w, rx }
    }

    fn unlink(map: &mut WaitersByKey, w: &Arc<Waiter>) {
        for k in &w.keys {
            let key = (w.db, k.clone());
            if let Some(q) = map.get_mut(&key) {
                q.retain(|x| !Arc::ptr_eq(x, w));
                if q.is_empty() {
                    map.remove(&key);
                }
            }
        }
    }

    /// Give up waiting (timeout, disconnect, CLIENT UNBLOCK). Returns true if the waiter was
    /// still pending; false means it was served and its reply is in the channel.
    pub fn cancel(&self, ks: &crate::keyspace::Keyspace, w: &Arc<Waiter>) -> bool {
        let mut map = self.by_key.lock();
        let pending = w.take().is_some();
        if pending {
            Self::unlink(&mut map, w);
            ks.blocked_clients.fetch_sub(1, Ordering::Relaxed);
        }
        pending
    }

    /// Unblock a client with a given reply (CLIENT UNBLOCK). True if it was blocked.
    pub fn unblock_client(
        &self,
        ks: &crate::keyspace::Keyspace,
        client_id: u64,
        reply: Reply,
    ) -> bool {
        let mut map = self.by_key.lock();
        let found = map
            .values()
            .flat_map(|q| q.iter())
            .find(|w| w.client_id == client_id)
            .cloned();
        let Some(w) = found else { return false };
        if let Some(tx) = w.take() {
            Self::unlink(&mut map, &w);
            ks.blocked_clients.fetch_sub(1, Ordering::Relaxed);
            let _ = tx.send(reply);
            return true;
        }
        false
    }

    /// Unblock every blocked client with `error`, each to be disconnected after it (a master
    /// turning into a replica, as Redis's `disconnectAllBlockedClients`: a client left blocked
    /// would pop what the new master's stream pushes, and the two would no longer hold the
    /// same data). Returns how many were unblocked.
    pub fn unblock_all(&self, ks: &crate::keyspace::Keyspace, error: &str) -> usize {
        let mut map = self.by_key.lock();
        let mut all: Vec<Arc<Waiter>> = Vec::new();
        for w in map.drain().flat_map(|(_, q)| q) {
            if !all.iter().any(|x| Arc::ptr_eq(x, &w)) {
                all.push(w);
            }
        }
        let mut n = 0;
        for w in all {
            if let Some(tx) = w.take() {
                ks.blocked_clients.fetch_sub(1, Ordering::Relaxed);
                w.close_after_reply.store(true, Ordering::Release);
                let _ = tx.send(Reply::error(error));
                n += 1;
            }
        }
        n
    }

    /// Unblock each waiter `verdict` gives a reply for (an error: cluster mode's redirect of a
    /// client whose keys' slot went away, Redis's clusterRedirectBlockedClientIfNeeded), with
    /// that reply; it stays connected. Returns how many were unblocked.
    pub fn unblock_with(
        &self,
        ks: &crate::keyspace::Keyspace,
        verdict: impl Fn(&Waiter) -> Option<Reply>,
    ) -> usize {
        let mut map = self.by_key.lock();
        if map.is_empty() {
            return 0;
        }
        let mut chosen: Vec<(Arc<Waiter>, Reply)> = Vec::new();
        for w in map.values().flat_map(|q| q.iter()) {
            if chosen.iter().any(|(x, _)| Arc::ptr_eq(x, w)) {
                continue;
            }
            if let Some(reply) = verdict(w) {
                chosen.push((w.clone(), reply));
            }
        }
        let mut n = 0;
        for (w, reply) in chosen {
            if let Some(tx) = w.take() {
                Self::unlink(&mut map, &w);
                ks.blocked_clients.fetch_sub(1, Ordering::Relaxed);
                let _ = tx.send(reply);
                n += 1;
            }
        }
        n
    }

    /// The destinations of the BLMOVE / BRPOPLPUSH waiters on `keys` of `db`, and of those
    /// waiting on these destinations in turn: every key that serving `keys` can write to.
    /// Serving must find their shards locked already (see [`Registry::serve_ready`]).
    pub fn move_destinations<'k>(
        &self,
        db: usize,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> Vec<Bytes> {
        let map = self.by_key.lock();
        let mut frontier: Vec<Bytes> = keys.into_iter().map(Bytes::copy_from_slice).collect();
        let mut found: Vec<Bytes> = Vec::new();
        while let Some(key) = frontier.pop() {
            let Some(q) = map.get(&(db, key)) else {
                continue;
            };
            for w in q {
                let moves = w.args[0].eq_ignore_ascii_case(b"blmove")
                    || w.args[0].eq_ignore_ascii_case(b"brpoplpush");
                if let (true, Some(dst)) = (moves, w.args.get(2)) {
                    if !found.contains(dst) {
                        found.push(dst.clone());
                        frontier.push(dst.clone());
                    }
                }
            }
        }
        found
    }

    /// Keys of `db` that have waiters (SWAPDB and FLUSHALL wake them).
    pub fn keys_in_db(&self, db: usize) -> Vec<Bytes> {
        self.by_key
            .lock()
            .keys()
            .filter(|(d, _)| *d == db)
            .map(|(_, k)| k.clone())
            .collect()
    }

    /// Serve waiters on every key the last command made ready. Runs under that command's locks.
    /// Returns the commands to propagate to the AOF, per database.
    pub fn serve_ready(&self, guards: &mut Guards) -> Vec<(usize, Vec<Bytes>)> {
        let mut propagate = Vec::new();
        if guards.ready.is_empty() {
            return propagate;
        }
        // The clock is read again, as Redis's handleClientsBlockedOnKeys does: a key that
        // expired while the command (an EXEC with DEBUG SLEEP, a long script) ran is gone for
        // its waiters, who stay blocked.
        guards.now_ms = crate::clock::unix_ms();
        while !guards.ready.is_empty() {
            let ready = std::mem::take(&mut guards.ready);
            for (db, key) in ready {
                // Serving a BLMOVE writes to its destination: that shard is locked first, with
                // the map unlocked. A thread registering a waiter holds its shard and then
                // takes the map, so waiting for a shard while holding the map could deadlock.
                // (The command's own locking took these already, see commands::run_locked;
                // this only matters for a waiter that came after.)
                let dsts = self.move_destinations(db, [&key[..]]);
                if !dsts.is_empty() {
                    guards.lock_keys(db, dsts.iter().map(|k| &k[..]));
                }
                // The map lock is held across serving so a timing-out waiter cannot cancel
                // between its element being popped and its reply being sent.
                let mut map = self.by_key.lock();
                // Waiters passed over (they could not be served and let later ones try).
                let mut skipped = 0;
                loop {
                    let Some(w) = map
                        .get(&(db, key.clone()))
                        .and_then(|q| q.get(skipped).cloned())
                    else {
                        break;
                    };
                    let served = {
                        let mut h = guards.db(db);
                        (w.serve)(&mut h, &w, &key)
                    };
                    let Some((reply, cmds)) = served else {
                        if w.serve_each {
                            skipped += 1;
                            continue;
                        }
                        break;
                    };
                    Self::unlink(&mut map, &w);
                    if let Some(tx) = w.take() {
                        guards.ks.blocked_clients.fetch_sub(1, Ordering::Relaxed);
                        let _ = tx.send(reply);
                        propagate.extend(cmds.into_iter().map(|c| (db, c)));
                    }
                }
            }
        }
        propagate
    }
}
