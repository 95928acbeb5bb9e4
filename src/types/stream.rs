//! Stream values (XADD, XRANGE, consumer groups ...), laid out as Redis 7.0 lays them out.
//!
//! Entries are grouped in nodes, kept in a `BTreeMap` keyed by the ID of the node's first
//! (master) entry, exactly as Redis keeps listpacks in a radix tree: a new node starts when the
//! last one holds `stream-node-max-entries` entries (deleted ones included) or its listpack
//! would reach `stream-node-max-bytes`, deleted entries stay in their node as tombstones until
//! the node empties, and approximate trimming (`MAXLEN ~`, `MINID ~`) only drops whole nodes.
//! Keeping Redis's node boundaries is what makes XLEN after an approximate trim, XINFO's node
//! figures and the RDB listpacks come out as Redis's; the size a node's listpack would have
//! is tracked incrementally with the listpack encoding rules. Inside a node each entry is one
//! allocation (its ID, a tombstone flag and its field/value strings packed with length
//! prefixes), so an entry costs its payload plus about 40 bytes instead of an allocation per
//! field. Consumer groups, their pending-entries lists (PEL) and consumers are ordered maps,
//! as Redis's radix trees are ordered (XPENDING, XINFO and the RDB walk them in order).

use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};

/// A 128-bit stream entry ID, `ms-seq`. Orders as Redis compares IDs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId {
    pub ms: u64,
    pub seq: u64,
}

impl StreamId {
    pub const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    pub const MAX: StreamId = StreamId {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    pub const fn new(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    pub fn is_zero(&self) -> bool {
        self.ms == 0 && self.seq == 0
    }

    /// The next ID, None past the last possible one (Redis's streamIncrID).
    pub fn incr(self) -> Option<StreamId> {
        if self.seq == u64::MAX {
            if self.ms == u64::MAX {
                return None;
            }
            Some(StreamId::new(self.ms + 1, 0))
        } else {
            Some(StreamId::new(self.ms, self.seq + 1))
        }
    }

    /// The previous ID, None before 0-0 (Redis's streamDecrID).
    pub fn decr(self) -> Option<StreamId> {
        if self.seq == 0 {
            if self.ms == 0 {
                return None;
            }
            Some(StreamId::new(self.ms - 1, u64::MAX))
        } else {
            Some(StreamId::new(self.ms, self.seq - 1))
        }
    }

    /// The 16 big-endian bytes Redis uses as the radix-tree key.
    pub fn encode(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.ms.to_be_bytes());
        b[8..].copy_from_slice(&self.seq.to_be_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Option<StreamId> {
        if b.len() != 16 {
            return None;
        }
        let mut ms = [0u8; 8];
        let mut seq = [0u8; 8];
        ms.copy_from_slice(&b[..8]);
        seq.copy_from_slice(&b[8..]);
        Some(StreamId::new(
            u64::from_be_bytes(ms),
            u64::from_be_bytes(seq),
        ))
    }

    pub fn to_bytes(&self) -> Bytes {
        Bytes::from(format!("{}-{}", self.ms, self.seq))
    }
}

impl std::fmt::Display for StreamId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// One entry: its ID, whether it is a tombstone, and its fields and values packed as
/// `u32` little-endian length + bytes, field, value, field, value ...
#[derive(Clone)]
pub struct Entry {
    pub id: StreamId,
    pub deleted: bool,
    data: Box<[u8]>,
}

impl Entry {
    fn new(id: StreamId, fields: &[Bytes]) -> Entry {
        Entry {
            id,
            deleted: false,
            data: pack(fields),
        }
    }

    /// The field/value strings, alternating.
    pub fn items(&self) -> Items<'_> {
        Items { rest: &self.data }
    }

    /// Number of field/value pairs.
    pub fn num_fields(&self) -> usize {
        self.items().count() / 2
    }
}

fn pack(items: &[Bytes]) -> Box<[u8]> {
    let total: usize = items.iter().map(|i| i.len() + 4).sum();
    let mut v = Vec::with_capacity(total);
    for i in items {
        v.extend_from_slice(&(i.len() as u32).to_le_bytes());
        v.extend_from_slice(i);
    }
    v.into_boxed_slice()
}

/// Iterator over an entry's packed strings.
pub struct Items<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Items<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.rest.len() < 4 {
            return None;
        }
        let mut n = [0u8; 4];
        n.copy_from_slice(&self.rest[..4]);
        let n = u32::from_le_bytes(n) as usize;
        let item = self.rest.get(4..4 + n)?;
        self.rest = &self.rest[4 + n..];
        Some(item)
    }
}

/// A node: what Redis keeps in one listpack.
#[derive(Clone)]
pub struct Node {
    /// The master entry's fields (those of the node's first entry).
    master_fields: Box<[u8]>,
    pub entries: Vec<Entry>,
    /// Live (not deleted) entries.
    pub live: u64,
    /// Size of the node's listpack without the live and deleted counters.
    lp_bytes_rest: usize,
}

impl Node {
    /// The master ID (the radix-tree key).
    pub fn master_id(&self) -> StreamId {
        self.entries.first().map_or(StreamId::MIN, |e| e.id)
    }

    pub fn deleted(&self) -> u64 {
        self.entries.len() as u64 - self.live
    }

    pub fn master_fields(&self) -> Items<'_> {
        Items {
            rest: &self.master_fields,
        }
    }

    /// Bytes of this node's listpack, as Redis would encode it.
    pub fn lp_bytes(&self) -> usize {
        self.lp_bytes_rest + lp_int_size(self.live as i64) + lp_int_size(self.deleted() as i64)
    }

    /// Whether `e` has the master entry's fields (Redis's SAMEFIELDS flag).
    pub fn same_fields(&self, e: &Entry) -> bool {
        let mut m = self.master_fields();
        let mut it = e.items();
        loop {
            match (m.next(), it.next()) {
                (None, None) => return true,
                (Some(f), Some(g)) => {
                    if f != g {
                        return false;
                    }
                    if it.next().is_none() {
                        return false;
                    }
                }
                _ => return false,
            }
        }
    }

    /// The listpack bytes of entry `e` (flags, deltas, fields, lp-count, with backlens).
    fn entry_lp_bytes(&self, e: &Entry) -> usize {
        let master = self.master_id();
        let mut n = lp_int_size(0)
            + lp_int_size(e.id.ms.wrapping_sub(master.ms) as i64)
            + lp_int_size(e.id.seq.wrapping_sub(master.seq) as i64);
        let count = if self.same_fields(e) {
            let mut values = 0;
            for (i, item) in e.items().enumerate() {
                if i % 2 == 1 {
                    n += lp_str_size(item);
                    values += 1;
                }
            }
            3 + values
        } else {
            let pairs = e.num_fields();
            n += lp_int_size(pairs as i64);
            for item in e.items() {
                n += lp_str_size(item);
            }
            4 + pairs * 2
        };
        n + lp_int_size(count as i64)
    }
}

/// Bytes a listpack element holding integer `v` takes (encoding, data and back-length).
pub fn lp_int_size(v: i64) -> usize {
    let enc = if (0..=127).contains(&v) {
        1
    } else if (-4096..=4095).contains(&v) {
        2
    } else if (-32768..=32767).contains(&v) {
        3
    } else if (-8388608..=8388607).contains(&v) {
        4
    } else if (-2147483648..=2147483647).contains(&v) {
        5
    } else {
        9
    };
    enc + lp_backlen_size(enc)
}

/// Bytes a listpack element holding string `s` takes (strings that read as integers are stored
/// as integers, as listpacks do).
pub fn lp_str_size(s: &[u8]) -> usize {
    if let Some(v) = lp_string_as_int(s) {
        return lp_int_size(v);
    }
    let enc = if s.len() < 64 {
        1 + s.len()
    } else if s.len() < 4096 {
        2 + s.len()
    } else {
        5 + s.len()
    };
    enc + lp_backlen_size(enc)
}

/// The integer a listpack stores `s` as, if any (Redis's lpStringToInt64: canonical decimal,
/// at most 20 characters).
pub fn lp_string_as_int(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let v = crate::util::numtext::parse_i64(s)?;
    // Only the canonical spelling (no '+', no leading zeros, "-0" excluded).
    if v.to_string().as_bytes() == s {
        Some(v)
    } else {
        None
    }
}

pub fn lp_backlen_size(l: usize) -> usize {
    if l <= 127 {
        1
    } else if l < 16383 {
        2
    } else if l < 2097151 {
        3
    } else if l < 268435455 {
        4
    } else {
        5
    }
}

/// The node-size limits (`stream-node-max-bytes`, `stream-node-max-entries`).
#[derive(Clone, Copy, Debug)]
pub struct NodeLimits {
    pub max_bytes: usize,
    pub max_entries: usize,
}

/// Redis's cap on one listpack (STREAM_LISTPACK_MAX_SIZE).
pub const LISTPACK_MAX_SIZE: usize = 1 << 30;

/// A pending entry: delivered to `consumer`, not yet acknowledged.
#[derive(Clone, Debug)]
pub struct Nack {
    pub delivery_time: i64,
    pub delivery_count: u64,
    pub consumer: Bytes,
}

#[derive(Clone, Debug, Default)]
pub struct Consumer {
    pub seen_time: i64,
    pub pel: BTreeSet<StreamId>,
}

/// The entries-read counter's "unknown" value (SCG_INVALID_ENTRIES_READ).
pub const INVALID_ENTRIES_READ: i64 = -1;

#[derive(Clone, Debug)]
pub struct Group {
    pub last_id: StreamId,
    pub entries_read: i64,
    pub pel: BTreeMap<StreamId, Nack>,
    pub consumers: BTreeMap<Bytes, Consumer>,
}

impl Group {
    pub fn new(last_id: StreamId, entries_read: i64) -> Group {
        Group {
            last_id,
            entries_read,
            pel: BTreeMap::new(),
            consumers: BTreeMap::new(),
        }
    }

    /// Create consumer `name` if absent; true if it was created.
    pub fn create_consumer(&mut self, name: &[u8], now_ms: i64) -> bool {
        if self.consumers.contains_key(name) {
            return false;
        }
        self.consumers.insert(
            Bytes::copy_from_slice(name),
            Consumer {
                seen_time: now_ms,
                pel: BTreeSet::new(),
            },
        );
        true
    }

    /// Delete consumer `name` and its pending entries; the number of pending entries it had.
    pub fn delete_consumer(&mut self, name: &[u8]) -> Option<usize> {
        let c = self.consumers.remove(name)?;
        for id in &c.pel {
            self.pel.remove(id);
        }
        Some(c.pel.len())
    }

    /// Remove pending entry `id` from the group and its consumer; true if it was pending.
    pub fn ack(&mut self, id: &StreamId) -> bool {
        match self.pel.remove(id) {
            Some(n) => {
                if let Some(c) = self.consumers.get_mut(&n.consumer) {
                    c.pel.remove(id);
                }
                true
            }
            None => false,
        }
    }

    /// Assign pending entry `id` (created if absent) to consumer `name`.
    pub fn assign(&mut self, id: StreamId, name: &Bytes, time: i64, count: Option<u64>) {
        let nack = self.pel.entry(id).or_insert_with(|| Nack {
            delivery_time: time,
            delivery_count: 1,
            consumer: name.clone(),
        });
        if nack.consumer != *name {
            if let Some(old) = self.consumers.get_mut(&nack.consumer) {
                old.pel.remove(&id);
            }
            nack.consumer = name.clone();
        }
        nack.delivery_time = time;
        if let Some(c) = count {
            nack.delivery_count = c;
        }
        if let Some(c) = self.consumers.get_mut(name) {
            c.pel.insert(id);
        }
    }
}

/// A stream value.
#[derive(Clone, Default)]
pub struct Stream {
    nodes: BTreeMap<StreamId, Node>,
    pub length: u64,
    pub last_id: StreamId,
    pub first_id: StreamId,
    pub max_deleted_entry_id: StreamId,
    pub entries_added: u64,
    pub groups: BTreeMap<Bytes, Group>,
}

/// How XADD/XTRIM trim.
#[derive(Clone, Copy, Debug)]
pub enum Trim {
    MaxLen(u64),
    MinId(StreamId),
}

impl Stream {
    /// Active defrag: move the stream's blocks that sit in sparse slabs (each node's entry
    /// vector, master fields and entries' data), nodes `from` on, at most `budget` entries'
    /// worth; returns where to go on from, or None when done. The tree's own nodes stay.
    pub fn defrag(
        &mut self,
        r: &mut crate::alloc::defrag::Relocator,
        from: usize,
        budget: usize,
    ) -> Option<usize> {
        let mut done = 0usize;
        for (at, node) in (from..).zip(self.nodes.values_mut().skip(from)) {
            if done >= budget {
                return Some(at);
            }
            r.boxed_bytes(&mut node.master_fields);
            r.vec(&mut node.entries);
            for e in &mut node.entries {
                r.boxed_bytes(&mut e.data);
            }
            done += node.entries.len().max(1);
        }
        None
    }

    pub fn new() -> Stream {
        Stream::default()
    }

    pub fn nodes(&self) -> impl DoubleEndedIterator<Item = &Node> {
        self.nodes.values()
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Add a node as loaded from an RDB file (entries in order, after every existing node).
    pub fn push_loaded_node(
        &mut self,
        master_fields: &[Bytes],
        entries: Vec<(StreamId, bool, Vec<Bytes>)>,
    ) {
        let mut node = Node {
            master_fields: pack(master_fields),
            entries: Vec::with_capacity(entries.len()),
            live: 0,
            lp_bytes_rest: 0,
        };
        let mut master_bytes = 7 + lp_int_size(master_fields.len() as i64) + lp_int_size(0);
        for f in master_fields {
            master_bytes += lp_str_size(f);
        }
        for (id, deleted, fields) in entries {
            let mut e = Entry::new(id, &fields);
            e.deleted = deleted;
            if !deleted {
                node.live += 1;
            }
            node.entries.push(e);
        }
        let mut rest = master_bytes;
        for e in &node.entries {
            rest += node.entry_lp_bytes(e);
        }
        node.lp_bytes_rest = rest;
        if let Some(first) = node.entries.first() {
            self.nodes.insert(first.id, node);
        }
    }

    /// The ID XADD would give an entry: `given` (with its sequence, or `ms-*` when
    /// `seq_given` is false), or the next one after `last_id` from the clock. None when no
    /// greater ID exists or the given ID is not above the last one.
    pub fn next_id(
        &self,
        given: Option<StreamId>,
        seq_given: bool,
        now_ms: u64,
    ) -> Option<StreamId> {
        let id = match given {
            Some(id) if seq_given => id,
            Some(id) => {
                if self.last_id.ms == id.ms {
                    if self.last_id.seq == u64::MAX {
                        return None;
                    }
                    StreamId::new(id.ms, self.last_id.seq + 1)
                } else {
                    id
                }
            }
            None => {
                if now_ms > self.last_id.ms {
                    StreamId::new(now_ms, 0)
                } else {
                    self.last_id.incr()?
                }
            }
        };
        (id > self.last_id).then_some(id)
    }

    /// Append an entry with an ID above `last_id` (checked by the caller).
    pub fn append(&mut self, id: StreamId, fields: &[Bytes], limits: NodeLimits) {
        let entry = Entry::new(id, fields);
        let total: usize = fields.iter().map(|f| f.len()).sum();
        let max_bytes = if limits.max_bytes == 0 || limits.max_bytes > LISTPACK_MAX_SIZE {
            LISTPACK_MAX_SIZE
        } else {
            limits.max_bytes
        };
        let new_node = match self.nodes.values().next_back() {
            None => true,
            Some(last) => {
                last.lp_bytes() + total >= max_bytes
                    || (limits.max_entries != 0 && last.entries.len() >= limits.max_entries)
            }
        };
        if new_node {
            let master: Vec<Bytes> = fields.iter().step_by(2).cloned().collect();
            let mut master_bytes = 7 + lp_int_size(master.len() as i64) + lp_int_size(0);
            for f in &master {
                master_bytes += lp_str_size(f);
            }
            let node = Node {
                master_fields: pack(&master),
                entries: Vec::new(),
                live: 0,
                lp_bytes_rest: master_bytes,
            };
            self.nodes.insert(id, node);
        }
        let Some(node) = self.nodes.values_mut().next_back() else {
            return;
        };
        // The first entry's deltas are computed against itself.
        let size = if node.entries.is_empty() {
            node.entries.push(entry);
            node.entry_lp_bytes(&node.entries[0])
        } else {
            let s = node.entry_lp_bytes(&entry);
            node.entries.push(entry);
            s
        };
        node.lp_bytes_rest += size;
        node.live += 1;
        self.length += 1;
        self.last_id = id;
        self.entries_added = self.entries_added.wrapping_add(1);
        if self.length == 1 {
            self.first_id = id;
        }
    }

    /// The key of the node that would hold `id`.
    fn node_key_for(&self, id: StreamId) -> Option<StreamId> {
        self.nodes.range(..=id).next_back().map(|(k, _)| *k)
    }

    /// Visit live entries with `start <= id <= end` in order (reverse when `rev`), until `f`
    /// returns false.
    pub fn for_each(
        &self,
        start: StreamId,
        end: StreamId,
        rev: bool,
        mut f: impl FnMut(&Entry) -> bool,
    ) {
        if start > end {
            return;
        }
        if !rev {
            let from = self.node_key_for(start).unwrap_or(start);
            for node in self.nodes.range(from..).map(|(_, n)| n) {
                if node.master_id() > end {
                    return;
                }
                let i = node.entries.partition_point(|e| e.id < start);
                for e in &node.entries[i..] {
                    if e.id > end {
                        return;
                    }
                    if !e.deleted && !f(e) {
                        return;
                    }
                }
            }
        } else {
            for node in self.nodes.range(..=end).rev().map(|(_, n)| n) {
                let i = node.entries.partition_point(|e| e.id <= end);
                for e in node.entries[..i].iter().rev() {
                    if e.id < start {
                        return;
                    }
                    if !e.deleted && !f(e) {
                        return;
                    }
                }
            }
        }
    }

    /// The live entry `id`.
    pub fn get(&self, id: StreamId) -> Option<&Entry> {
        let node = self.nodes.get(&self.node_key_for(id)?)?;
        let i = node.entries.binary_search_by(|e| e.id.cmp(&id)).ok()?;
        let e = &node.entries[i];
        (!e.deleted).then_some(e)
    }

    /// First (or last) live entry's ID.
    pub fn edge_id(&self, last: bool) -> Option<StreamId> {
        let mut found = None;
        self.for_each(StreamId::MIN, StreamId::MAX, last, |e| {
            found = Some(e.id);
            false
        });
        found
    }

    /// Delete entry `id` (XDEL); true if it was live. A node left with no live entry goes.
    pub fn delete(&mut self, id: StreamId) -> bool {
        let Some(key) = self.node_key_for(id) else {
            return false;
        };
        let Some(node) = self.nodes.get_mut(&key) else {
            return false;
        };
        let Ok(i) = node.entries.binary_search_by(|e| e.id.cmp(&id)) else {
            return false;
        };
        if node.entries[i].deleted {
            return false;
        }
        node.entries[i].deleted = true;
        node.live -= 1;
        if node.live == 0 {
            self.nodes.remove(&key);
        }
        self.length -= 1;
        true
    }

    /// XDEL of several IDs with Redis's bookkeeping (max deleted ID, first ID); the count.
    pub fn delete_ids(&mut self, ids: &[StreamId]) -> u64 {
        let mut deleted = 0;
        let mut first_entry = false;
        for id in ids {
            if self.delete(*id) {
                if *id == self.first_id {
                    first_entry = true;
                }
                if *id > self.max_deleted_entry_id {
                    self.max_deleted_entry_id = *id;
                }
                deleted += 1;
            }
        }
        if deleted > 0 {
            if self.length == 0 {
                self.first_id = StreamId::MIN;
            } else if first_entry {
                self.first_id = self.edge_id(false).unwrap_or_default();
            }
        }
        deleted
    }

    /// Trim as Redis's streamTrim: whole nodes while they qualify, then (unless `approx`)
    /// entries of the first node left. `limit` 0 means no limit. Returns the entries removed.
    pub fn trim(&mut self, how: Trim, approx: bool, limit: u64) -> u64 {
        let mut deleted: u64 = 0;
        loop {
            if let Trim::MaxLen(max) = how {
                if self.length <= max {
                    break;
                }
            }
            let Some((&key, node)) = self.nodes.iter().next() else {
                break;
            };
            let entries = node.live;
            if limit != 0 && deleted + entries > limit {
                break;
            }
            let remove_node = match how {
                Trim::MaxLen(max) => self.length - entries >= max,
                Trim::MinId(min) => node.entries.last().is_some_and(|e| e.id < min),
            };
            if remove_node {
                self.nodes.remove(&key);
                self.length -= entries;
                deleted += entries;
                continue;
            }
            if approx {
                break;
            }
            let Some(node) = self.nodes.get_mut(&key) else {
                break;
            };
            let mut from_node = 0;
            for e in node.entries.iter_mut() {
                let stop = match how {
                    Trim::MaxLen(max) => self.length <= max,
                    Trim::MinId(min) => e.id >= min,
                };
                if stop {
                    break;
                }
                if !e.deleted {
                    e.deleted = true;
                    from_node += 1;
                    self.length -= 1;
                }
            }
            node.live -= from_node;
            deleted += from_node;
            break;
        }
        if self.length == 0 {
            self.first_id = StreamId::MIN;
        } else if deleted > 0 {
            self.first_id = self.edge_id(false).unwrap_or_default();
        }
        deleted
    }

    /// Redis's streamRangeHasTombstones.
    pub fn range_has_tombstones(&self, start: Option<StreamId>, end: Option<StreamId>) -> bool {
        if self.length == 0 || self.max_deleted_entry_id.is_zero() {
            return false;
        }
        if self.first_id > self.max_deleted_entry_id {
            return false;
        }
        let s = start.unwrap_or(StreamId::MIN);
        let e = end.unwrap_or(StreamId::MAX);
        s <= self.max_deleted_entry_id && self.max_deleted_entry_id <= e
    }

    /// Redis's streamEstimateDistanceFromFirstEverEntry: the logical read counter of `id`, or
    /// [`INVALID_ENTRIES_READ`].
    pub fn estimate_distance(&self, id: StreamId) -> i64 {
        if self.entries_added == 0 {
            return 0;
        }
        if self.length == 0 && id <= self.last_id {
            return self.entries_added as i64;
        }
        if id == self.last_id {
            return self.entries_added as i64;
        } else if id > self.last_id {
            return INVALID_ENTRIES_READ;
        }
        if self.max_deleted_entry_id.is_zero() || self.max_deleted_entry_id < self.first_id {
            if id < self.first_id {
                return (self.entries_added - self.length) as i64;
            } else if id == self.first_id {
                return (self.entries_added - self.length + 1) as i64;
            }
        }
        INVALID_ENTRIES_READ
    }

    /// A group's lag (XINFO), None when it cannot be known.
    pub fn group_lag(&self, g: &Group) -> Option<i64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if g.entries_read != INVALID_ENTRIES_READ
            && !self.range_has_tombstones(Some(g.last_id), None)
        {
            return Some((self.entries_added as i64).wrapping_sub(g.entries_read));
        }
        let read = self.estimate_distance(g.last_id);
        (read != INVALID_ENTRIES_READ).then(|| (self.entries_added as i64).wrapping_sub(read))
    }

    /// Advance group `g`'s last delivered ID to `id` (delivered now), updating its read
    /// counter as Redis's streamReplyWithRange does.
    pub fn advance_group(&self, g: &mut Group, id: StreamId) {
        if id <= g.last_id {
            return;
        }
        if g.entries_read != INVALID_ENTRIES_READ && !self.range_has_tombstones(Some(id), None) {
            g.entries_read = g.entries_read.wrapping_add(1);
        } else if self.entries_added != 0 {
            g.entries_read = self.estimate_distance(id);
        }
        g.last_id = id;
    }

    /// The number of nodes of the radix tree Redis would have for these node keys: a
    /// compressed trie over the 16-byte keys (a node per branching point and per key end, and
    /// one per compressed run), computed from the sorted keys.
    pub fn radix_tree_nodes(&self) -> u64 {
        let keys: Vec<[u8; 16]> = self.nodes.keys().map(|k| k.encode()).collect();
        if keys.is_empty() {
            return 1;
        }
        rax_nodes(&keys, 0)
    }

    /// Approximate heap bytes (MEMORY USAGE, maxmemory accounting).
    pub fn heap_bytes(&self) -> usize {
        let mut n = std::mem::size_of::<Stream>();
        for node in self.nodes.values() {
            n += 64
                + node.master_fields.len()
                + node.entries.capacity() * std::mem::size_of::<Entry>();
            for e in &node.entries {
                n += e.data.len();
            }
        }
        for (name, g) in &self.groups {
            n += 64 + name.len() + g.pel.len() * (48 + 16);
            for (c, cons) in &g.consumers {
                n += 64 + c.len() + cons.pel.len() * 24;
            }
        }
        n
    }
}

/// Nodes of a Redis rax holding `keys` (sorted, distinct, all of equal length) below a node at
/// depth `depth` (the node itself included). Redis's rax stores a run of single-child bytes as
/// one compressed node, a branching point as one node with its children, and a key's end as a
/// node of its own.
fn rax_nodes(keys: &[[u8; 16]], depth: usize) -> u64 {
    // A run of bytes every key shares becomes one compressed node.
    let mut d = depth;
    while d < 16 && keys.iter().all(|k| k[d] == keys[0][d]) {
        d += 1;
    }
    if d == 16 {
        // Compressed run (if any) then the key's leaf node.
        return if d > depth { 2 } else { 1 };
    }
    let mut n = if d > depth { 2 } else { 1 };
    // The branching node's children, one subtree per distinct byte at depth d.
    let mut i = 0;
    while i < keys.len() {
        let b = keys[i][d];
        let mut j = i;
        while j < keys.len() && keys[j][d] == b {
            j += 1;
        }
        n += rax_nodes(&keys[i..j], d + 1);
        i = j;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(v: &[&str]) -> Vec<Bytes> {
        v.iter()
            .map(|s| Bytes::copy_from_slice(s.as_bytes()))
            .collect()
    }

    const LIM: NodeLimits = NodeLimits {
        max_bytes: 4096,
        max_entries: 100,
    };

    #[test]
    fn append_range_delete_and_trim() {
        let mut s = Stream::new();
        for i in 1..=1000u64 {
            s.append(StreamId::new(i, 0), &f(&["item", &i.to_string()]), LIM);
        }
        assert_eq!(s.length, 1000);
        assert_eq!(s.node_count(), 10);
        let mut seen = Vec::new();
        s.for_each(StreamId::new(99, 0), StreamId::new(102, 0), false, |e| {
            seen.push(e.id.ms);
            true
        });
        assert_eq!(seen, vec![99, 100, 101, 102]);
        assert!(s.delete(StreamId::new(100, 0)));
        assert!(!s.delete(StreamId::new(100, 0)));
        assert_eq!(s.length, 999);
        // Approximate: whole nodes only.
        assert_eq!(s.trim(Trim::MaxLen(555), true, 0), 399);
        assert_eq!(s.length, 600);
        assert_eq!(s.trim(Trim::MaxLen(555), false, 0), 45);
        assert_eq!(s.first_id, StreamId::new(446, 0));
        assert_eq!(s.edge_id(true), Some(StreamId::new(1000, 0)));
    }

    #[test]
    fn listpack_sizes_follow_the_encoding() {
        assert_eq!(lp_int_size(0), 2);
        assert_eq!(lp_int_size(1000), 3);
        assert_eq!(lp_str_size(b"abc"), 5);
        assert_eq!(lp_str_size(b"123"), 2);
        assert_eq!(lp_str_size(b"1000"), 3);
        assert_eq!(lp_str_size(b"0123"), 6);
    }

    #[test]
    fn rax_node_count_of_one_key() {
        let mut s = Stream::new();
        s.append(StreamId::new(1, 0), &f(&["a", "b"]), LIM);
        assert_eq!(s.radix_tree_nodes(), 2);
    }
}
