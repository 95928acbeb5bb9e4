//! Streams in RDB files and DUMP payloads (Redis 7.0's RDB_TYPE_STREAM_LISTPACKS_2), and a
//! stream's commands in an AOF rewrite.
//!
//! Each node is written as Redis writes it: its master ID as a 16-byte big-endian key and its
//! entries as one listpack (master entry, then each entry's flags, ID deltas, fields or values
//! when they match the master's, and element count), followed by the stream's counters and its
//! consumer groups with their PELs and consumers. Loading checks everything a forged file can
//! get wrong before the stream is used: every listpack element (and, when `sanitize-dump-payload`
//! asks for deep sanitization, every back-length), the node layout and counts, IDs increasing across nodes, the stream length against the live entries,
//! the last ID against the entries, and every consumer's PEL against its group's.

use super::rdb_encoding::{
    fail, listpack_checked, put_len, put_string, put_string_lzf, Elem, Reader,
};
use crate::types::stream::{Group, Nack, Node, Stream, StreamId};
use bytes::Bytes;

/// Redis 7.0's stream type byte.
pub(crate) const TYPE_STREAM_LISTPACKS_2: u8 = 19;
/// The stream type of Redis 5 and 6 (no first ID, tombstone ID or added count).
pub(crate) const TYPE_STREAM_LISTPACKS: u8 = 15;

const FLAG_DELETED: i64 = 1;
const FLAG_SAMEFIELDS: i64 = 2;

/// Listpack writer (Redis's listpack.c encodings).
struct Listpack {
    buf: Vec<u8>,
    count: usize,
}

impl Listpack {
    fn new() -> Listpack {
        Listpack {
            buf: vec![0; 6],
            count: 0,
        }
    }

    fn backlen(&mut self, l: usize) {
        let l = l as u64;
        let groups: &[u64] = match l {
            0..=127 => &[0],
            128..=16382 => &[7, 0],
            16383..=2097150 => &[14, 7, 0],
            2097151..=268435454 => &[21, 14, 7, 0],
            _ => &[28, 21, 14, 7, 0],
        };
        for (k, shift) in groups.iter().enumerate() {
            let b = ((l >> shift) & 127) as u8;
            self.buf.push(if k == 0 { b } else { b | 128 });
        }
    }

    fn int(&mut self, v: i64) {
        let start = self.buf.len();
        if (0..=127).contains(&v) {
            self.buf.push(v as u8);
        } else if (-4096..=4095).contains(&v) {
            let u = (v as u64) & 0x1fff;
            self.buf.push(0xC0 | (u >> 8) as u8);
            self.buf.push(u as u8);
        } else if (-32768..=32767).contains(&v) {
            self.buf.push(0xF1);
            self.buf.extend_from_slice(&(v as i16).to_le_bytes());
        } else if (-8388608..=8388607).contains(&v) {
            self.buf.push(0xF2);
            self.buf.extend_from_slice(&(v as i32).to_le_bytes()[..3]);
        } else if (-2147483648..=2147483647).contains(&v) {
            self.buf.push(0xF3);
            self.buf.extend_from_slice(&(v as i32).to_le_bytes());
        } else {
            self.buf.push(0xF4);
            self.buf.extend_from_slice(&v.to_le_bytes());
        }
        let l = self.buf.len() - start;
        self.backlen(l);
        self.count += 1;
    }

    fn str(&mut self, s: &[u8]) {
        if let Some(v) = crate::types::stream::lp_string_as_int(s) {
            return self.int(v);
        }
        let start = self.buf.len();
        let n = s.len();
        if n < 64 {
            self.buf.push(0x80 | n as u8);
        } else if n < 4096 {
            self.buf.push(0xE0 | (n >> 8) as u8);
            self.buf.push(n as u8);
        } else {
            self.buf.push(0xF0);
            self.buf.extend_from_slice(&(n as u32).to_le_bytes());
        }
        self.buf.extend_from_slice(s);
        let l = self.buf.len() - start;
        self.backlen(l);
        self.count += 1;
    }

    fn finish(mut self) -> Vec<u8> {
        self.buf.push(0xFF);
        let total = self.buf.len() as u32;
        self.buf[..4].copy_from_slice(&total.to_le_bytes());
        let n = self.count.min(u16::MAX as usize) as u16;
        self.buf[4..6].copy_from_slice(&n.to_le_bytes());
        self.buf
    }
}

/// A node's listpack, as Redis lays it out.
pub(crate) fn node_listpack(node: &Node) -> Vec<u8> {
    let mut lp = Listpack::new();
    let master = node.master_id();
    lp.int(node.live as i64);
    lp.int(node.deleted() as i64);
    let master_fields: Vec<&[u8]> = node.master_fields().collect();
    lp.int(master_fields.len() as i64);
    for f in &master_fields {
        lp.str(f);
    }
    lp.int(0);
    for e in &node.entries {
        let same = node.same_fields(e);
        let mut flags = 0;
        if e.deleted {
            flags |= FLAG_DELETED;
        }
        if same {
            flags |= FLAG_SAMEFIELDS;
        }
        lp.int(flags);
        lp.int(e.id.ms.wrapping_sub(master.ms) as i64);
        lp.int(e.id.seq.wrapping_sub(master.seq) as i64);
        let items: Vec<&[u8]> = e.items().collect();
        let pairs = items.len() / 2;
        if same {
            for v in items.iter().skip(1).step_by(2) {
                lp.str(v);
            }
            lp.int(pairs as i64 + 3);
        } else {
            lp.int(pairs as i64);
            for i in &items {
                lp.str(i);
            }
            lp.int(pairs as i64 * 2 + 4);
        }
    }
    lp.finish()
}

/// Write stream `s` as an RDB object body (after its type byte).
pub(crate) fn put_stream(out: &mut Vec<u8>, s: &Stream, lzf: bool) {
    let put = |out: &mut Vec<u8>, b: &[u8]| {
        if lzf {
            put_string_lzf(out, b)
        } else {
            put_string(out, b)
        }
    };
    put_len(out, s.node_count() as u64);
    for node in s.nodes() {
        put(out, &node.master_id().encode());
        put(out, &node_listpack(node));
    }
    put_len(out, s.length);
    put_len(out, s.last_id.ms);
    put_len(out, s.last_id.seq);
    put_len(out, s.first_id.ms);
    put_len(out, s.first_id.seq);
    put_len(out, s.max_deleted_entry_id.ms);
    put_len(out, s.max_deleted_entry_id.seq);
    put_len(out, s.entries_added);
    put_len(out, s.groups.len() as u64);
    for (name, g) in &s.groups {
        put(out, name);
        put_len(out, g.last_id.ms);
        put_len(out, g.last_id.seq);
        put_len(out, g.entries_read as u64);
        put_len(out, g.pel.len() as u64);
        for (id, nack) in &g.pel {
            out.extend_from_slice(&id.encode());
            out.extend_from_slice(&nack.delivery_time.to_le_bytes());
            put_len(out, nack.delivery_count);
        }
        put_len(out, g.consumers.len() as u64);
        for (cname, c) in &g.consumers {
            put(out, cname);
            out.extend_from_slice(&c.seen_time.to_le_bytes());
            put_len(out, c.pel.len() as u64);
            for id in &c.pel {
                out.extend_from_slice(&id.encode());
            }
        }
    }
}

fn int_of(e: &Elem) -> Option<i64> {
    match e {
        Elem::Int(v) => Some(*v),
        // Redis reads these fields with lpGetInteger, which accepts integer strings too.
        Elem::Str(s) => crate::util::numtext::parse_i64(s),
    }
}

fn bytes_of(e: &Elem) -> Bytes {
    Bytes::from(e.to_vec())
}

/// Decode and check one node's listpack; its master fields and entries.
#[allow(clippy::type_complexity)]
fn parse_node(
    master: StreamId,
    lp: &[u8],
    deep: bool,
) -> Option<(Vec<Bytes>, Vec<(StreamId, bool, Vec<Bytes>)>)> {
    let elems = listpack_checked(lp, deep)?;
    let mut it = elems.iter();
    let count = int_of(it.next()?)?;
    let deleted = int_of(it.next()?)?;
    let nfields = int_of(it.next()?)?;
    if count < 0 || deleted < 0 || nfields < 0 || nfields as usize > elems.len() {
        return None;
    }
    let mut master_fields = Vec::with_capacity(nfields as usize);
    for _ in 0..nfields {
        master_fields.push(bytes_of(it.next()?));
    }
    if int_of(it.next()?)? != 0 {
        return None;
    }
    let total = (count as u64).checked_add(deleted as u64)?;
    if total > elems.len() as u64 {
        return None;
    }
    let mut entries = Vec::with_capacity(total as usize);
    let mut live = 0;
    for _ in 0..total {
        let flags = int_of(it.next()?)?;
        let ms = master.ms.wrapping_add(int_of(it.next()?)? as u64);
        let seq = master.seq.wrapping_add(int_of(it.next()?)? as u64);
        let id = StreamId::new(ms, seq);
        let mut items = Vec::new();
        let lp_count = if flags & FLAG_SAMEFIELDS != 0 {
            for f in &master_fields {
                items.push(f.clone());
                items.push(bytes_of(it.next()?));
            }
            master_fields.len() as i64 + 3
        } else {
            let n = int_of(it.next()?)?;
            if n < 0 || n as usize > elems.len() {
                return None;
            }
            for _ in 0..n * 2 {
                items.push(bytes_of(it.next()?));
            }
            n * 2 + 4
        };
        if int_of(it.next()?)? != lp_count {
            return None;
        }
        let del = flags & FLAG_DELETED != 0;
        if !del {
            live += 1;
        }
        if let Some((prev, _, _)) = entries.last() {
            if id <= *prev {
                return None;
            }
        } else if id != master {
            return None;
        }
        entries.push((id, del, items));
    }
    if it.next().is_some() || live != count {
        return None;
    }
    Some((master_fields, entries))
}

/// Read a stream object body of type `t` (19, or 15 from Redis 5/6); None if anything is
/// malformed or inconsistent. `deep`: each node's listpack is sanitized in depth (and counted
/// in INFO's dump_payload_sanitizations, as Redis counts it).
pub(crate) fn read_stream(r: &mut Reader<'_>, t: u8, deep: bool) -> Option<Stream> {
    let mut s = Stream::new();
    // Each node takes at least its two strings' length bytes.
    let nodes = r.count_items(2)?;
    let mut last_seen: Option<StreamId> = None;
    let mut live_total: u64 = 0;
    for _ in 0..nodes {
        let key = r.string()?;
        let master = StreamId::decode(&key)?;
        let lp = r.string()?;
        if deep {
            super::rdb_encoding::count_sanitization();
        }
        let (fields, entries) = parse_node(master, &lp, deep)?;
        if entries.is_empty() {
            return None;
        }
        if let Some(prev) = last_seen {
            if master <= prev {
                return None;
            }
        }
        last_seen = entries.last().map(|e| e.0);
        live_total += entries.iter().filter(|e| !e.1).count() as u64;
        s.push_loaded_node(&fields, entries);
    }
    s.length = r.len()?;
    s.last_id = StreamId::new(r.len()?, r.len()?);
    if t == TYPE_STREAM_LISTPACKS_2 {
        s.first_id = StreamId::new(r.len()?, r.len()?);
        s.max_deleted_entry_id = StreamId::new(r.len()?, r.len()?);
        s.entries_added = r.len()?;
    } else {
        s.first_id = s.edge_id(false).unwrap_or_default();
        s.entries_added = s.length;
    }
    if s.length != live_total || s.entries_added < s.length {
        return None;
    }
    if let Some(last) = last_seen {
        if s.last_id < last {
            return None;
        }
    }
    let ngroups = r.count_items(3)?;
    for _ in 0..ngroups {
        let name = Bytes::from(r.string()?);
        let last_id = StreamId::new(r.len()?, r.len()?);
        let entries_read = if t == TYPE_STREAM_LISTPACKS_2 {
            r.len()? as i64
        } else {
            s.estimate_distance(last_id)
        };
        if entries_read < -1 {
            return None;
        }
        let mut g = Group::new(last_id, entries_read);
        let npel = r.count_items(16 + 8 + 1)?;
        for _ in 0..npel {
            let id = StreamId::decode(r.take(16)?)?;
            let delivery_time = i64::from_le_bytes(r.array()?);
            let delivery_count = r.len()?;
            let nack = Nack {
                delivery_time,
                delivery_count,
                consumer: Bytes::new(),
            };
            if g.pel.insert(id, nack).is_some() {
                return None;
            }
        }
        let nconsumers = r.count_items(1 + 8 + 1)?;
        for _ in 0..nconsumers {
            let cname = Bytes::from(r.string()?);
            let seen_time = i64::from_le_bytes(r.array()?);
            if !g.create_consumer(&cname, seen_time) {
                return fail("Duplicate stream consumer detected.");
            }
            let n = r.count_items(16)?;
            for _ in 0..n {
                let id = StreamId::decode(r.take(16)?)?;
                let nack = g.pel.get_mut(&id)?;
                if !nack.consumer.is_empty() {
                    return None;
                }
                nack.consumer = cname.clone();
                g.consumers.get_mut(&cname[..])?.pel.insert(id);
            }
        }
        // Every pending entry belongs to a consumer (Redis's deep sanitization).
        if g.pel.values().any(|n| n.consumer.is_empty()) {
            return None;
        }
        if s.groups.insert(name, g).is_some() {
            return None;
        }
    }
    Some(s)
}

/// The commands that rebuild stream `s` at `key` in an AOF rewrite, as Redis's
/// rewriteStreamObject: XADD of every entry (or an XADD + XDEL pair creating an empty stream
/// with its last ID), XSETID with the counters, XGROUP CREATE per group with ENTRIESREAD,
/// XGROUP CREATECONSUMER for consumers with nothing pending, and an XCLAIM per pending entry
/// (consumer by consumer).
pub(crate) fn rewrite_commands(key: &[u8], s: &Stream) -> Vec<Vec<Bytes>> {
    let k = Bytes::copy_from_slice(key);
    let mut cmds = Vec::new();
    if s.length > 0 {
        s.for_each(StreamId::MIN, StreamId::MAX, false, |e| {
            let mut c = vec![Bytes::from_static(b"XADD"), k.clone(), e.id.to_bytes()];
            c.extend(e.items().map(Bytes::copy_from_slice));
            cmds.push(c);
            true
        });
    } else {
        // An empty stream: XADD MAXLEN 0 of an entry at 0-1 creates it empty (the XSETID
        // below then sets its real last ID, 0-0 included).
        cmds.push(vec![
            Bytes::from_static(b"XADD"),
            k.clone(),
            Bytes::from_static(b"MAXLEN"),
            Bytes::from_static(b"0"),
            Bytes::from_static(b"0-1"),
            Bytes::from_static(b"x"),
            Bytes::from_static(b"y"),
        ]);
    }
    cmds.push(vec![
        Bytes::from_static(b"XSETID"),
        k.clone(),
        s.last_id.to_bytes(),
        Bytes::from_static(b"ENTRIESADDED"),
        Bytes::from(s.entries_added.to_string()),
        Bytes::from_static(b"MAXDELETEDID"),
        s.max_deleted_entry_id.to_bytes(),
    ]);
    for (gname, g) in &s.groups {
        cmds.push(vec![
            Bytes::from_static(b"XGROUP"),
            Bytes::from_static(b"CREATE"),
            k.clone(),
            gname.clone(),
            g.last_id.to_bytes(),
            Bytes::from_static(b"ENTRIESREAD"),
            Bytes::from(g.entries_read.to_string()),
        ]);
        for (cname, c) in &g.consumers {
            if c.pel.is_empty() {
                cmds.push(vec![
                    Bytes::from_static(b"XGROUP"),
                    Bytes::from_static(b"CREATECONSUMER"),
                    k.clone(),
                    gname.clone(),
                    cname.clone(),
                ]);
                continue;
            }
            for id in &c.pel {
                let Some(nack) = g.pel.get(id) else { continue };
                cmds.push(vec![
                    Bytes::from_static(b"XCLAIM"),
                    k.clone(),
                    gname.clone(),
                    cname.clone(),
                    Bytes::from_static(b"0"),
                    id.to_bytes(),
                    Bytes::from_static(b"TIME"),
                    Bytes::from(nack.delivery_time.to_string()),
                    Bytes::from_static(b"RETRYCOUNT"),
                    Bytes::from(nack.delivery_count.to_string()),
                    Bytes::from_static(b"JUSTID"),
                    Bytes::from_static(b"FORCE"),
                ]);
            }
        }
    }
    cmds
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::stream::NodeLimits;

    fn f(v: &[&str]) -> Vec<Bytes> {
        v.iter()
            .map(|s| Bytes::copy_from_slice(s.as_bytes()))
            .collect()
    }

    #[test]
    fn a_stream_round_trips_and_node_sizes_match_the_listpack() {
        let mut s = Stream::new();
        let lim = NodeLimits {
            max_bytes: 4096,
            max_entries: 100,
        };
        for i in 1..=250u64 {
            let fields = if i % 7 == 0 {
                f(&["other", "x", "z", &"long".repeat(40)])
            } else {
                f(&["item", &i.to_string()])
            };
            s.append(StreamId::new(i, 0), &fields, lim);
        }
        s.delete_ids(&[StreamId::new(5, 0), StreamId::new(120, 0)]);
        let mut g = Group::new(StreamId::new(10, 0), 10);
        g.create_consumer(b"alice", 7);
        g.assign(
            StreamId::new(3, 0),
            &Bytes::from_static(b"alice"),
            9,
            Some(2),
        );
        s.groups.insert(Bytes::from_static(b"g"), g);
        for node in s.nodes() {
            assert_eq!(node_listpack(node).len(), node.lp_bytes());
        }
        let mut out = Vec::new();
        put_stream(&mut out, &s, true);
        let mut r = Reader { buf: &out, pos: 0 };
        let back = read_stream(&mut r, TYPE_STREAM_LISTPACKS_2, true).expect("loads");
        assert_eq!(r.pos, out.len());
        let mut again = Vec::new();
        put_stream(&mut again, &back, true);
        assert_eq!(out, again);
        assert_eq!(back.length, 248);
    }

    #[test]
    fn truncated_payloads_are_refused() {
        let mut s = Stream::new();
        let lim = NodeLimits {
            max_bytes: 4096,
            max_entries: 100,
        };
        s.append(StreamId::new(1, 0), &f(&["a", "b"]), lim);
        let mut out = Vec::new();
        put_stream(&mut out, &s, false);
        for cut in 0..out.len() {
            let mut r = Reader {
                buf: &out[..cut],
                pos: 0,
            };
            assert!(read_stream(&mut r, TYPE_STREAM_LISTPACKS_2, true).is_none());
        }
    }
}
