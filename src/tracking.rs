//! Client-side caching: CLIENT TRACKING and the invalidation messages it asks for.
//!
//! [`Tracking`] holds, for the default mode, which clients read which key (the key names only,
//! across databases, as Redis), and for BCAST mode the registered prefixes. Every client with
//! tracking on has its options here by id, so a writer can find where an invalidation goes.
//!
//! A read-only command of a tracking client remembers its keys ([`Tracking::remember`]); a
//! command that changes keys (they pass through `DbHandle::modified`, expiry included) ends
//! with [`Tracking::invalidate`]: every client that read one of them gets an invalidation and
//! forgets it, and BCAST clients get the keys under their prefixes. Messages go through the
//! target's push mailbox (as RESP3 `invalidate` pushes, or for a RESP2 client redirecting to a
//! subscribed connection as messages on `__redis__:invalidate`); an invalidation for the
//! client running the command comes after its reply, as in Redis. `tracking-table-max-keys`
//! bounds the table: past it, keys are evicted with an invalidation.

use crate::client::ClientInfo;
use crate::config::dir;
use crate::state::tracking::State;
pub(crate) use crate::state::tracking::{Options, Tracking};
use crate::state::Server;
use bytes::Bytes;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What one prefix of a client takes besides its bytes: its handle in the table of prefixes
/// and that entry's share of the table, and the set of clients under it.
const PREFIX_ENTRY: usize = 64;

/// Where one invalidation goes, decided under the lock and sent after it.
struct Delivery {
    /// The tracking client.
    client: u64,
    opts: Options,
    /// The value part, already encoded (an array of keys, or null for a flush).
    value: Vec<u8>,
}

fn key_array(keys: &[&[u8]]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", keys.len()).into_bytes();
    for k in keys {
        v.extend_from_slice(format!("${}\r\n", k.len()).as_bytes());
        v.extend_from_slice(k);
        v.extend_from_slice(b"\r\n");
    }
    v
}

impl Tracking {
    #[inline]
    pub(crate) fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Tracking options of client `id`, if it has tracking on.
    pub(crate) fn options(&self, id: u64) -> Option<Options> {
        if !self.is_active() {
            return None;
        }
        self.state.lock().clients.get(&id).cloned()
    }

    /// Number of clients with tracking on (INFO tracking_clients).
    pub(crate) fn client_count(&self) -> usize {
        self.state.lock().clients.len()
    }

    /// (tracked keys, tracked items, prefixes) for INFO.
    pub(crate) fn totals(&self) -> (usize, usize, usize) {
        let s = self.state.lock();
        (s.keys.len(), s.items, s.prefixes.len())
    }

    /// CLIENT TRACKING ON for `id` with checked options (BCAST prefixes are added to the ones
    /// it already has, as in Redis; an empty list means the empty prefix). Returns the memory
    /// the client's prefixes take (its list and its entries in the table of prefixes), which
    /// is counted as the client's.
    pub(crate) fn enable(&self, id: u64, mut opts: Options) -> usize {
        let mut s = self.state.lock();
        if opts.bcast {
            if opts.prefixes.is_empty() {
                opts.prefixes.push(Bytes::new());
            }
            if let Some(old) = s.clients.get(&id) {
                for p in &old.prefixes {
                    if !opts.prefixes.contains(p) {
                        // A copy, not a slice of the read buffer (which it would keep).
                        opts.prefixes.push(Bytes::copy_from_slice(p));
                    }
                }
            }
            opts.prefixes.sort();
            for p in &opts.prefixes {
                s.prefixes.entry(p.clone()).or_default().clients.insert(id);
            }
        }
        let prefixes = opts.prefixes.capacity() * std::mem::size_of::<Bytes>()
            + opts
                .prefixes
                .iter()
                .map(|p| p.len() + PREFIX_ENTRY)
                .sum::<usize>();
        s.clients.insert(id, opts);
        self.active.store(true, Ordering::Relaxed);
        prefixes
    }

    /// CLIENT TRACKING OFF (and disconnection).
    pub(crate) fn disable(&self, id: u64) {
        if !self.is_active() {
            return;
        }
        let mut s = self.state.lock();
        Self::drop_prefixes(&mut s, id);
        s.clients.remove(&id);
        if s.clients.is_empty() {
            self.active.store(false, Ordering::Relaxed);
        }
    }

    fn drop_prefixes(s: &mut State, id: u64) {
        let Some(old) = s.clients.get(&id) else {
            return;
        };
        for p in old.prefixes.clone() {
            if let Some(pr) = s.prefixes.get_mut(&p) {
                pr.clients.remove(&id);
                if pr.clients.is_empty() {
                    s.prefixes.remove(&p);
                }
            }
        }
    }

    /// Redis's check that no two prefixes of one client (registered or given) overlap.
    pub(crate) fn prefix_collision(&self, id: u64, new: &[Bytes]) -> Option<String> {
        let mine: Vec<Bytes> = self
            .state
            .lock()
            .clients
            .get(&id)
            .map(|o| o.prefixes.clone())
            .unwrap_or_default();
        let overlap = |a: &[u8], b: &[u8]| {
            let n = a.len().min(b.len());
            a[..n] == b[..n]
        };
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        for (i, p) in new.iter().enumerate() {
            if let Some(q) = mine.iter().find(|q| overlap(q, p)) {
                return Some(format!(
                    "ERR Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a single client must not overlap.",
                    text(p),
                    text(q)
                ));
            }
            if let Some(q) = new[i + 1..].iter().find(|q| overlap(p, q)) {
                return Some(format!(
                    "ERR Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a single client must not overlap.",
                    text(p),
                    text(q)
                ));
            }
        }
        None
    }

    /// Remember the keys a read-only command of client `id` (default mode) read.
    pub(crate) fn remember(&self, srv: &Server, id: u64, keys: &[&[u8]], caching: bool) {
        let evicted = {
            let mut s = self.state.lock();
            let Some(o) = s.clients.get(&id) else {
                return;
            };
            if o.bcast || (o.optin && !caching) || (o.optout && caching) {
                return;
            }
            for k in keys {
                let set = s.keys.entry(Bytes::copy_from_slice(k)).or_default();
                if set.insert(id) {
                    s.items += 1;
                }
            }
            self.evict_over_limit(&mut s, srv)
        };
        self.send(srv, evicted, 0, None);
    }

    /// CONFIG SET changed `tracking-table-max-keys`: apply it before the next command.
    pub(crate) fn limit_changed(&self) {
        self.limit_lowered.store(true, Ordering::Relaxed);
    }

    /// Before a command: apply a changed limit (one relaxed load when nothing changed).
    pub(crate) fn before_command(&self, srv: &Server) {
        if self.limit_lowered.load(Ordering::Relaxed)
            && self.limit_lowered.swap(false, Ordering::Relaxed)
        {
            self.enforce_limit(srv);
        }
    }

    /// Apply `tracking-table-max-keys` now (the cron calls this).
    pub(crate) fn enforce_limit(&self, srv: &Server) {
        if !self.is_active() {
            return;
        }
        let evicted = {
            let mut s = self.state.lock();
            self.evict_over_limit(&mut s, srv)
        };
        self.send(srv, evicted, 0, None);
    }

    /// Past `tracking-table-max-keys`, forget keys (each with an invalidation).
    fn evict_over_limit(&self, s: &mut State, srv: &Server) -> Vec<Delivery> {
        let max = srv.config.int(dir::TRACKING_TABLE_MAX_KEYS);
        let mut out = Vec::new();
        if max <= 0 {
            return out;
        }
        while s.keys.len() > max as usize {
            let Some(k) = s.keys.keys().next().cloned() else {
                break;
            };
            out.extend(Self::take_key(s, &k, 0, false));
        }
        out
    }

    /// Forget `key` and return the invalidations it owes (skipping `by` under NOLOOP).
    fn take_key(s: &mut State, key: &[u8], by: u64, _loop_check: bool) -> Vec<Delivery> {
        let Some(ids) = s.keys.remove(key) else {
            return Vec::new();
        };
        s.items -= ids.len();
        let mut out = Vec::new();
        for id in ids {
            let Some(o) = s.clients.get(&id) else {
                continue;
            };
            if o.bcast || (o.noloop && id == by) {
                continue;
            }
            out.push(Delivery {
                client: id,
                opts: o.clone(),
                value: key_array(&[key]),
            });
        }
        out
    }

    /// Keys changed by client `by` (0: the server, e.g. active expiry): invalidate them.
    /// Invalidations for `by` itself are appended to `own_after` (sent after its reply).
    /// BCAST clients get the keys when `broadcast` (not for each command of a transaction
    /// or script: Redis sends those once, after it).
    pub(crate) fn invalidate(
        &self,
        srv: &Server,
        keys: &[Bytes],
        by: u64,
        own_after: Option<&mut Vec<u8>>,
        broadcast: bool,
    ) {
        if !self.is_active() || (keys.is_empty() && !broadcast) {
            return;
        }
        let mut deliveries = Vec::new();
        {
            let mut s = self.state.lock();
            for k in keys {
                deliveries.extend(Self::take_key(&mut s, k, by, true));
                for (p, pr) in s.prefixes.iter_mut() {
                    if k.starts_with(p) {
                        match pr.pending.iter_mut().find(|(pk, _)| pk == k) {
                            // A key changed by two clients is theirs to see (NOLOOP).
                            Some((_, who)) if *who != by => *who = 0,
                            Some(_) => {}
                            None => pr.pending.push((k.clone(), by)),
                        }
                    }
                }
            }
            if broadcast {
                Self::broadcast(&mut s, &mut deliveries);
            }
        }
        self.send(srv, deliveries, by, own_after);
    }

    /// BCAST: one message per prefix and client with the keys changed under it.
    fn broadcast(s: &mut State, deliveries: &mut Vec<Delivery>) {
        {
            let prefixes: Vec<Bytes> = s
                .prefixes
                .iter()
                .filter(|(_, p)| !p.pending.is_empty())
                .map(|(k, _)| k.clone())
                .collect();
            for p in prefixes {
                let Some(pr) = s.prefixes.get_mut(&p) else {
                    continue;
                };
                let pending = std::mem::take(&mut pr.pending);
                let clients: Vec<u64> = pr.clients.iter().copied().collect();
                for id in clients {
                    let Some(o) = s.clients.get(&id) else {
                        continue;
                    };
                    let ks: Vec<&[u8]> = pending
                        .iter()
                        .filter(|(_, who)| !(o.noloop && *who == id))
                        .map(|(k, _)| &k[..])
                        .collect();
                    if ks.is_empty() {
                        continue;
                    }
                    deliveries.push(Delivery {
                        client: id,
                        opts: o.clone(),
                        value: key_array(&ks),
                    });
                }
            }
        }
    }

    /// FLUSHDB/FLUSHALL: every tracking client is told to drop everything (a null key list).
    /// FLUSHALL also empties the table (FLUSHDB leaves it, as Redis).
    pub(crate) fn invalidate_all(
        &self,
        srv: &Server,
        by: u64,
        own_after: Option<&mut Vec<u8>>,
        flushall: bool,
    ) {
        let deliveries: Vec<Delivery> = {
            let mut s = self.state.lock();
            if flushall {
                s.keys.clear();
                s.items = 0;
            }
            s.clients
                .iter()
                .map(|(&id, o)| {
                    let resp3 = srv
                        .clients
                        .lock()
                        .get(&id)
                        .is_some_and(|c| c.resp.load(Ordering::Relaxed) == 3);
                    Delivery {
                        client: id,
                        opts: o.clone(),
                        value: if resp3 {
                            b"_\r\n".to_vec()
                        } else {
                            b"$-1\r\n".to_vec()
                        },
                    }
                })
                .collect()
        };
        self.send(srv, deliveries, by, own_after);
    }

    fn send(
        &self,
        srv: &Server,
        deliveries: Vec<Delivery>,
        by: u64,
        mut own_after: Option<&mut Vec<u8>>,
    ) {
        for d in deliveries {
            let lookup =
                |id: u64| -> Option<Arc<ClientInfo>> { srv.clients.lock().get(&id).cloned() };
            let Some(me) = lookup(d.client) else {
                continue;
            };
            let (target, redirected) = if d.opts.redirect != 0 {
                match lookup(d.opts.redirect) {
                    Some(t) => (t, true),
                    None => {
                        if let Some(o) = self.state.lock().clients.get_mut(&d.client) {
                            o.broken = true;
                        }
                        if me.resp.load(Ordering::Relaxed) == 3 {
                            let id = d.opts.redirect.to_string();
                            let msg = format!(">2\r\n$21\r\ntracking-redir-broken\r\n:{id}\r\n");
                            self.deliver(&me, msg.into_bytes(), by, &mut own_after);
                        }
                        continue;
                    }
                }
            } else {
                (me, false)
            };
            let mut msg = if target.resp.load(Ordering::Relaxed) == 3 {
                b">2\r\n$10\r\ninvalidate\r\n".to_vec()
            } else if redirected
                && target
                    .push
                    .counts
                    .iter()
                    .any(|c| c.load(Ordering::Relaxed) > 0)
            {
                b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n".to_vec()
            } else {
                continue;
            };
            msg.extend_from_slice(&d.value);
            self.deliver(&target, msg, by, &mut own_after);
        }
    }

    fn deliver(
        &self,
        target: &ClientInfo,
        msg: Vec<u8>,
        by: u64,
        own_after: &mut Option<&mut Vec<u8>>,
    ) {
        if target.id == by {
            if let Some(buf) = own_after.as_deref_mut() {
                buf.extend_from_slice(&msg);
                return;
            }
        }
        target.push.push_unlimited(Bytes::from(msg));
        target.record_memory();
    }
}
