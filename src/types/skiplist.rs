//! The "skiplist" encoding of a sorted set: a Pugh skip list with spans plus a
//! member -> node hash index, laid out for memory density.
//!
//! # What this owns
//!
//! `SkipList` owns every element of a large sorted set: the member bytes, the
//! score, the ordering by `(score, member)` (ties broken by memcmp, then length)
//! and an O(1) member lookup. It knows nothing about Redis commands; `super::zset`
//! wraps it together with the compact "listpack" encoding.
//!
//! # Layout
//!
//! * `nodes` is an arena addressed by `u32` slot numbers. Slot 0 is the header; `NIL`
//!   (`u32::MAX`) is the null link. A node is 32 bytes: score (8), member key (16), level-0
//!   forward link (4) and the next node of its member-index chain (4). Freed slots are
//!   chained through their `next` field (intrusive free list), so slots never move while the
//!   list is in use; this is what makes the SCAN cursor (a slot number) stable.
//! * The member key is a 16-byte small string: byte 0 is the length (0..=15)
//!   followed by the bytes inline, or `TAG_LONG` with a `u32` index into
//!   `longs: Vec<Box<[u8]>>` for longer members (one heap allocation each).
//! * The level-0 span is always 1 and is not stored. Levels 1.. of a node of height `h` live
//!   in `towers` as `h - 1` consecutive links (next node, span, the next node's tower and a
//!   prefix of its score, see [`Link`]) starting at the node's tower, which 3/4 of the nodes
//!   (height 1, p = 1/4) do not have. A node does not record its own tower: every path to a
//!   node on a level >= 1 arrives through a link, and the link records the tower of the node
//!   it leads to, so searches carry (node, tower) pairs ([`Path`]). Freed towers are kept in
//!   one intrusive free list per height. The header owns a full 31-link tower at 0.
//! * There is no backward pointer and no tail: reverse walks are done on ranks
//!   (find the forward start of a block of ranks in O(log N), walk it forward,
//!   emit it reversed), in blocks of `REV_CHUNK` so no allocation is needed.
//! * Spans follow Redis: `span(x, i)` is the number of level-0 steps from `x` to
//!   `next(x, i)`, or, when that is `NIL`, the number of nodes after `x`.
//! * The member index is chained hashing through the nodes themselves: `heads` holds, per
//!   bucket, the first node of a chain continued by each node's `chain` field, so the index
//!   costs 4 bytes per bucket and nothing per member beyond the node's own 4. The bucket
//!   count is any number (the hash's high bits are scaled to it), kept at 2.25 to 3 members
//!   per bucket: 1.33-1.78 bytes per member, where a hash table of slot numbers at the usual
//!   load costs 5-10. A lookup reads the bucket, then the chain's nodes (about 2.3 for a
//!   member present), comparing the 16-byte keys directly. The hash is a folded-multiply
//!   hash keyed by per-set random seeds. A pipelined batch prefetches its buckets, then the
//!   chains' nodes ([`SkipList::warm_lookups`]).
//! * When the set shrinks below a quarter of its slots the arena is compacted in
//!   slot order (stable), which keeps SCAN's guarantee because SCAN walks slots
//!   from high to low (an element can only move to a lower slot).

/// Maximum height of a node (Redis: ZSKIPLIST_MAXLEVEL).
pub const MAX_LEVEL: usize = 32;
/// Null link.
pub const NIL: u32 = u32::MAX;
/// Members of at most this many bytes are stored inline in the node.
pub const INLINE_MAX: usize = 15;

const HEAD: u32 = 0;
const TAG_LONG: u8 = 0x80;
const TAG_FREE: u8 = 0xFF;
const REV_CHUNK: usize = 128;
/// Compaction is considered only above this many slots.
const COMPACT_MIN_SLOTS: usize = 4096;
/// Tower of the header (its 31 links come first in the tower arena).
const HEAD_TOWER: u32 = 0;
/// The member index is rebuilt with `len * 4 / 9` buckets (2.25 members per bucket) when
/// `len` exceeds 3 per bucket: chains hold 2.25 to 3 nodes on average, so the index costs
/// 1.33-1.78 bytes per member, and a lookup of a member present reads about 2.3 nodes.
const INDEX_LOAD_MAX: usize = 3;
const INDEX_MIN_BUCKETS: usize = 8;

/// Buckets of a member index rebuilt for `n` members.
fn buckets_for(n: usize) -> usize {
    (n / 9).saturating_mul(4).max(INDEX_MIN_BUCKETS)
}

/// Bucket of hash `h` among `buckets` (the high bits of `h` scaled: any bucket count works).
#[inline]
fn bucket(h: u64, buckets: usize) -> usize {
    ((h as u128 * buckets as u128) >> 64) as usize
}

#[derive(Clone, Copy, Debug)]
struct Node {
    score: f64,
    key: [u8; 16],
    next: u32,
    /// Next node in this node's member-index bucket (NIL at the end of the chain).
    chain: u32,
}

const _: () = assert!(std::mem::size_of::<Node>() == 32);

/// A link of level >= 1. Besides the next node it records that node's tower and a 32-bit
/// order-preserving prefix of its score (`score_hint`), so a search on the upper levels moves
/// from tower to tower without loading any node: the hint decides the comparison unless it
/// ties with the target's, and only then is the next node's exact score (and member) read.
/// This halves the cache misses of a descent in a large set, where almost every step misses.
#[derive(Clone, Copy, Debug)]
struct Link {
    next: u32,
    span: u32,
    /// Tower of `next` (NIL when `next` is NIL; `next` is never a height-1 node here).
    next_tower: u32,
    /// `score_hint(score of next)` (0 when `next` is NIL).
    next_hint: u32,
}

const EMPTY_LINK: Link = Link {
    next: NIL,
    span: 0,
    next_tower: NIL,
    next_hint: 0,
};

/// The high 32 bits of the order-preserving integer image of `s` (not NaN): if
/// `score_hint(a) < score_hint(b)` then `a < b`, and equal scores have equal hints (-0 and +0
/// included), so a hint comparison is exact unless the hints tie.
#[inline]
fn score_hint(s: f64) -> u32 {
    let b = (s + 0.0).to_bits(); // -0.0 + 0.0 == +0.0
    let k = if b >> 63 == 1 { !b } else { b | 1 << 63 };
    (k >> 32) as u32
}

#[derive(Clone, Copy, Debug)]
struct Seeds {
    s0: u64,
    s1: u64,
    s2: u64,
}

#[inline]
fn fold(a: u64, b: u64) -> u64 {
    let p = (a as u128).wrapping_mul(b as u128);
    (p as u64) ^ ((p >> 64) as u64)
}

/// Little-endian load of up to 8 bytes, zero padded.
#[inline]
fn load(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    let n = b.len().min(8);
    a[..n].copy_from_slice(&b[..n]);
    u64::from_le_bytes(a)
}

impl Seeds {
    fn random() -> Seeds {
        Seeds {
            s0: rand::random::<u64>() | 1,
            s1: rand::random::<u64>() | 1,
            s2: rand::random::<u64>() | 1,
        }
    }

    #[inline]
    fn hash_inline(&self, k: &[u8; 16]) -> u64 {
        let h = fold(load(&k[..8]) ^ self.s0, load(&k[8..]) ^ self.s1);
        fold(h ^ self.s2, 0x9E37_79B9_7F4A_7C15)
    }

    fn hash_long(&self, m: &[u8]) -> u64 {
        let mut h = (m.len() as u64).wrapping_mul(0xA076_1D64_78BD_642F) ^ self.s2;
        let mut chunks = m.chunks_exact(16);
        for c in &mut chunks {
            h = fold(load(&c[..8]) ^ self.s0 ^ h, load(&c[8..]) ^ self.s1);
        }
        let r = chunks.remainder();
        if !r.is_empty() {
            let b = if r.len() > 8 { load(&r[8..]) } else { 0 };
            h = fold(load(r) ^ self.s0 ^ h, b ^ self.s1);
        }
        fold(h ^ self.s2, 0x9E37_79B9_7F4A_7C15)
    }
}

#[inline]
fn inline_key(m: &[u8]) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[0] = m.len() as u8;
    k[1..1 + m.len()].copy_from_slice(m);
    k
}

#[inline]
fn long_idx(k: &[u8; 16]) -> usize {
    u32::from_le_bytes([k[4], k[5], k[6], k[7]]) as usize
}

#[inline]
fn key_bytes<'a>(k: &'a [u8; 16], longs: &'a [Box<[u8]>]) -> &'a [u8] {
    let t = k[0];
    if (t as usize) <= INLINE_MAX {
        &k[1..1 + t as usize]
    } else if t == TAG_LONG {
        longs.get(long_idx(k)).map_or(&[][..], |b| &b[..])
    } else {
        &[]
    }
}

#[inline]
fn node_hash(nodes: &NodeArena, longs: &[Box<[u8]>], seeds: &Seeds, i: u32) -> u64 {
    let k = &nodes[i as usize].key;
    if k[0] == TAG_LONG {
        seeds.hash_long(key_bytes(k, longs))
    } else {
        seeds.hash_inline(k)
    }
}

/// Hint the CPU to start loading `x` (a link the next search step will probably read).
#[inline(always)]
fn prefetch<T>(x: &T) {
    super::located::prefetch_addr(x as *const T as usize);
}

/// The nodes, by slot (see [`super::arena`]: one load per slot followed).
type NodeArena = super::arena::Arena<Node>;
/// The towers' links, by tower index.
type TowerArena = super::arena::Arena<Link>;

/// A search path: per level, the last node before the position sought, its tower (levels
/// >= 1) and its 1-based rank (0 = header).
struct Path {
    node: [u32; MAX_LEVEL],
    tower: [u32; MAX_LEVEL],
    rank: [usize; MAX_LEVEL],
}

impl Path {
    fn new() -> Path {
        Path {
            node: [HEAD; MAX_LEVEL],
            tower: [HEAD_TOWER; MAX_LEVEL],
            rank: [0; MAX_LEVEL],
        }
    }
}

/// State for appending elements in ascending order to an initially empty list.
pub struct Appender {
    last: [u32; MAX_LEVEL],
    /// Tower of `last[i]` (levels >= 1).
    last_tower: [u32; MAX_LEVEL],
    rank: [usize; MAX_LEVEL],
}

#[derive(Clone)]
pub struct SkipList {
    nodes: NodeArena,
    towers: TowerArena,
    longs: Vec<Box<[u8]>>,
    free_longs: Vec<u32>,
    /// The member index: bucket -> first node of its chain (NIL: empty), see `bucket`.
    heads: super::arena::Arena<u32>,
    free_node: u32,
    /// Free towers by height (index = node height, 2..=MAX_LEVEL).
    free_towers: [u32; MAX_LEVEL + 1],
    len: usize,
    level: usize,
    seeds: Seeds,
    rng: u64,
}

impl Default for SkipList {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for SkipList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkipList")
            .field("len", &self.len)
            .field("level", &self.level)
            .finish_non_exhaustive()
    }
}

impl SkipList {
    /// Active defrag: the long members' blocks (`longs`, members past the nodes' inline
    /// 16 bytes), `from` on, at most `budget`; returns where to go on from, or None when
    /// done. The node and tower arenas are large blocks or mappings of their own.
    pub fn defrag(
        &mut self,
        r: &mut crate::alloc::defrag::Relocator,
        from: usize,
        budget: usize,
    ) -> Option<usize> {
        if from == 0 {
            r.vec(&mut self.longs);
            r.vec(&mut self.free_longs);
        }
        let end = self.longs.len().min(from.saturating_add(budget));
        for b in &mut self.longs[from.min(end)..end] {
            r.boxed_bytes(b);
        }
        (end < self.longs.len()).then_some(end)
    }

    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    pub fn with_capacity(n: usize) -> Self {
        let mut nodes = NodeArena::with_capacity(n.saturating_add(1));
        nodes.push(Node {
            score: 0.0,
            key: [TAG_FREE; 16],
            next: NIL,
            chain: NIL,
        });
        let seeds = Seeds::random();
        let mut towers = TowerArena::with_capacity(MAX_LEVEL - 1 + n / 3);
        for _ in 0..MAX_LEVEL - 1 {
            towers.push(EMPTY_LINK);
        }
        SkipList {
            nodes,
            towers,
            longs: Vec::new(),
            free_longs: Vec::new(),
            heads: super::arena::Arena::filled(buckets_for(n), NIL),
            free_node: NIL,
            free_towers: [NIL; MAX_LEVEL + 1],
            len: 0,
            level: 1,
            seeds,
            rng: seeds.s0 ^ seeds.s1.rotate_left(17),
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

    /// Number of arena slots (including the header and free slots).
    pub fn slots(&self) -> usize {
        self.nodes.len()
    }

    // ----- raw accessors -------------------------------------------------

    /// Link of level `i >= 1` of the node whose tower is `t`.
    #[inline]
    fn link(&self, t: u32, i: usize) -> Link {
        self.towers[t as usize + i - 1]
    }

    #[inline]
    fn link_mut(&mut self, t: u32, i: usize) -> &mut Link {
        &mut self.towers[t as usize + i - 1]
    }

    /// (s, member(n)) < (score, m), with `s` the known score of `n`.
    #[inline]
    fn lt_with(&self, n: u32, s: f64, score: f64, m: &[u8]) -> bool {
        s < score || (s == score && self.member(n) < m)
    }

    /// (s, member(n)) <= (score, m), with `s` the known score of `n`.
    #[inline]
    fn le_with(&self, n: u32, s: f64, score: f64, m: &[u8]) -> bool {
        s < score || (s == score && self.member(n) <= m)
    }

    /// Member bytes of node `x`.
    #[inline]
    pub fn member(&self, x: u32) -> &[u8] {
        key_bytes(&self.nodes[x as usize].key, &self.longs)
    }

    #[inline]
    pub fn score_of(&self, x: u32) -> f64 {
        self.nodes[x as usize].score
    }

    #[inline]
    pub fn entry(&self, x: u32) -> (&[u8], f64) {
        (self.member(x), self.nodes[x as usize].score)
    }

    /// First node in order (NIL if empty).
    #[inline]
    pub fn first(&self) -> u32 {
        self.nodes[HEAD as usize].next
    }

    /// Level-0 successor of `x` (NIL at the end).
    #[inline]
    pub fn next_of(&self, x: u32) -> u32 {
        self.nodes[x as usize].next
    }

    /// (score(x), member(x)) < (score, m)
    #[inline]
    fn lt_key(&self, x: u32, score: f64, m: &[u8]) -> bool {
        let s = self.nodes[x as usize].score;
        s < score || (s == score && self.member(x) < m)
    }

    /// (score(x), member(x)) <= (score, m)
    #[inline]
    fn le_key(&self, x: u32, score: f64, m: &[u8]) -> bool {
        let s = self.nodes[x as usize].score;
        s < score || (s == score && self.member(x) <= m)
    }

    fn random_level(&mut self) -> usize {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        // P(level > k) = 4^-k
        (1 + z.trailing_zeros() as usize / 2).min(MAX_LEVEL)
    }

    // ----- allocation ----------------------------------------------------

    fn alloc_tower(&mut self, height: usize) -> u32 {
        let f = self.free_towers[height];
        if f != NIL {
            self.free_towers[height] = self.towers[f as usize].next;
            for l in f as usize..f as usize + height - 1 {
                self.towers[l] = EMPTY_LINK;
            }
            return f;
        }
        let t = self.towers.len();
        assert!(t + height < NIL as usize, "zset tower arena overflow");
        for _ in 0..height - 1 {
            self.towers.push(EMPTY_LINK);
        }
        t as u32
    }

    fn make_key(&mut self, m: &[u8]) -> [u8; 16] {
        if m.len() <= INLINE_MAX {
            return inline_key(m);
        }
        let boxed: Box<[u8]> = m.into();
        let i = match self.free_longs.pop() {
            Some(i) => {
                self.longs[i as usize] = boxed;
                i
            }
            None => {
                super::arena::grow_heap(&mut self.longs, 1);
                self.longs.push(boxed);
                (self.longs.len() - 1) as u32
            }
        };
        let mut k = [0u8; 16];
        k[0] = TAG_LONG;
        k[4..8].copy_from_slice(&i.to_le_bytes());
        k
    }

    /// A new unlinked node and its tower (NIL for height 1).
    fn alloc_node(&mut self, key: [u8; 16], score: f64, height: usize) -> (u32, u32) {
        let tower = if height > 1 {
            self.alloc_tower(height)
        } else {
            NIL
        };
        let node = Node {
            score,
            key,
            next: NIL,
            chain: NIL,
        };
        let x = if self.free_node != NIL {
            let i = self.free_node;
            self.free_node = self.nodes[i as usize].next;
            self.nodes[i as usize] = node;
            i
        } else {
            assert!(self.nodes.len() < NIL as usize, "zset node arena overflow");
            self.nodes.push(node);
            (self.nodes.len() - 1) as u32
        };
        (x, tower)
    }

    /// Free slot `x` (unlinked, out of the index) and its tower `tower` of `height`.
    fn free_slot(&mut self, x: u32, height: usize, tower: u32) {
        let n = self.nodes[x as usize];
        if n.key[0] == TAG_LONG {
            let i = long_idx(&n.key);
            if let Some(b) = self.longs.get_mut(i) {
                *b = Box::default();
                self.free_longs.push(i as u32);
            }
        }
        if height > 1 && tower != NIL {
            self.towers[tower as usize].next = self.free_towers[height];
            self.free_towers[height] = tower;
        }
        self.nodes[x as usize] = Node {
            score: 0.0,
            key: [TAG_FREE; 16],
            next: self.free_node,
            chain: NIL,
        };
        self.free_node = x;
    }

    fn index_insert(&mut self, idx: u32) {
        let h = node_hash(&self.nodes, &self.longs, &self.seeds, idx);
        let b = bucket(h, self.heads.len());
        self.nodes[idx as usize].chain = self.heads[b];
        self.heads[b] = idx;
        if self.len > self.heads.len() * INDEX_LOAD_MAX {
            self.rebuild_index(buckets_for(self.len));
        }
    }

    fn index_remove(&mut self, idx: u32) {
        let h = node_hash(&self.nodes, &self.longs, &self.seeds, idx);
        let b = bucket(h, self.heads.len());
        let after = self.nodes[idx as usize].chain;
        if self.heads[b] == idx {
            self.heads[b] = after;
            return;
        }
        let mut p = self.heads[b];
        while p != NIL {
            let n = self.nodes[p as usize].chain;
            if n == idx {
                self.nodes[p as usize].chain = after;
                return;
            }
            p = n;
        }
        debug_assert!(false, "zset index out of sync");
    }

    /// Rebuild the member index with `buckets` buckets from the live slots.
    fn rebuild_index(&mut self, buckets: usize) {
        let mut heads = super::arena::Arena::filled(buckets.max(1), NIL);
        for x in 1..self.nodes.len() {
            if self.nodes[x].key[0] == TAG_FREE {
                continue;
            }
            let h = node_hash(&self.nodes, &self.longs, &self.seeds, x as u32);
            let b = bucket(h, heads.len());
            self.nodes[x].chain = heads[b];
            heads[b] = x as u32;
        }
        self.heads = heads;
    }

    // ----- core algorithms ----------------------------------------------

    /// Node of member `m`, if present. O(1).
    pub fn find(&self, m: &[u8]) -> Option<u32> {
        self.find_hashed(m, self.member_hash(m))
    }

    /// The index's hash of member `m`.
    #[inline]
    fn member_hash(&self, m: &[u8]) -> u64 {
        if m.len() <= INLINE_MAX {
            self.seeds.hash_inline(&inline_key(m))
        } else {
            self.seeds.hash_long(m)
        }
    }

    /// `find` with the member's hash already computed.
    #[inline]
    fn find_hashed(&self, m: &[u8], h: u64) -> Option<u32> {
        let mut x = self.heads[bucket(h, self.heads.len())];
        if m.len() <= INLINE_MAX {
            let k = inline_key(m);
            while x != NIL {
                let n = &self.nodes[x as usize];
                if n.key == k {
                    return Some(x);
                }
                x = n.chain;
            }
        } else {
            while x != NIL {
                if self.member(x) == m {
                    return Some(x);
                }
                x = self.nodes[x as usize].chain;
            }
        }
        None
    }

    /// Warm the cache for looking up `members` (the members of a pipelined batch): prefetch
    /// the index buckets of all of them at once, then the first node of each bucket's chain,
    /// then, round by round, the next node of each chain whose node so far is not the member.
    /// Each lookup in a large set otherwise misses on the bucket, then on each node of the
    /// chain, one member after another; this puts the misses of the whole batch in flight
    /// together, one round per chain step. Read-only, and only a hint: the lookups that follow
    /// give the answers.
    pub fn warm_lookups(&self, members: &[&[u8]]) {
        /// Chain steps warmed at most (chains hold 2.25-3 nodes on average).
        const ROUNDS: usize = 4;
        let buckets: Vec<usize> = members
            .iter()
            .map(|m| {
                let b = bucket(self.member_hash(m), self.heads.len());
                prefetch(&self.heads[b]);
                b
            })
            .collect();
        let mut at: Vec<u32> = buckets
            .iter()
            .map(|&b| {
                let x = self.heads[b];
                if x != NIL {
                    prefetch(&self.nodes[x as usize]);
                }
                x
            })
            .collect();
        for _ in 0..ROUNDS {
            let mut pending = false;
            for (m, x) in members.iter().zip(at.iter_mut()) {
                if *x == NIL || self.member(*x) == *m {
                    *x = NIL;
                    continue;
                }
                *x = self.nodes[*x as usize].chain;
                if *x != NIL {
                    prefetch(&self.nodes[*x as usize]);
                    pending = true;
                }
            }
            if !pending {
                break;
            }
        }
    }

    /// path.node[i]: last node at level i strictly before (score, m); path.tower[i]: its
    /// tower (levels >= 1); path.rank[i]: its 1-based rank (0 = header).
    fn search(&self, score: f64, m: &[u8], path: &mut Path) {
        self.descend(
            score,
            |n, s| self.lt_with(n, s, score, m),
            |i, x, xt, r| {
                path.node[i] = x;
                path.tower[i] = xt;
                path.rank[i] = r;
            },
        );
    }

    /// The skip-list descent shared by searches and counts: from the top level down, move right
    /// while the next element goes before the sought position, then call
    /// `level_done(level, node, tower, rank)` (the tower is the node's on levels >= 1; on level
    /// 0 it is NIL). Returns the 1-based rank of the last node reached (0 = header).
    ///
    /// `go_right(next, next_score)` decides, and must be true for every score below `target`
    /// and false for every score above it (it is free to decide equal scores, e.g. by member).
    /// On levels >= 1 it is called only when the link's score hint ties with `target`'s; the
    /// other steps read nothing but towers.
    #[inline]
    fn descend(
        &self,
        target: f64,
        mut go_right: impl FnMut(u32, f64) -> bool,
        mut level_done: impl FnMut(usize, u32, u32, usize),
    ) -> usize {
        let th = score_hint(target);
        let mut x = HEAD;
        let mut xt = HEAD_TOWER as usize;
        let mut r = 0;
        for i in (1..self.level).rev() {
            loop {
                let l = self.towers[xt + i - 1];
                if l.next == NIL {
                    break;
                }
                let right = match l.next_hint.cmp(&th) {
                    std::cmp::Ordering::Less => true,
                    std::cmp::Ordering::Greater => false,
                    std::cmp::Ordering::Equal => {
                        go_right(l.next, self.nodes[l.next as usize].score)
                    }
                };
                if !right {
                    break;
                }
                r += l.span as usize;
                x = l.next;
                xt = l.next_tower as usize;
                if i == 1 {
                    // Level 0 starts from x's node: start loading it now.
                    prefetch(&self.nodes[x as usize]);
                }
            }
            level_done(i, x, xt as u32, r);
        }
        loop {
            let n = self.nodes[x as usize].next;
            if n == NIL || !go_right(n, self.nodes[n as usize].score) {
                break;
            }
            r += 1;
            x = n;
        }
        level_done(0, x, NIL, r);
        r
    }

    /// Descent by position: from the top level down, move right while the 1-based rank stays
    /// `<= target`, calling `level_done(level, node, tower, rank)` after each level (tower as
    /// in `descend`); it returns false to stop early. Only towers are read above level 0.
    /// Returns the last node and its rank.
    #[inline]
    fn descend_rank(
        &self,
        target: usize,
        mut level_done: impl FnMut(usize, u32, u32, usize) -> bool,
    ) -> (u32, usize) {
        let mut x = HEAD;
        let mut xt = HEAD_TOWER as usize;
        let mut r = 0;
        for i in (1..self.level).rev() {
            loop {
                let l = self.towers[xt + i - 1];
                if l.next == NIL || r + l.span as usize > target {
                    break;
                }
                r += l.span as usize;
                x = l.next;
                xt = l.next_tower as usize;
            }
            if !level_done(i, x, xt as u32, r) {
                return (x, r);
            }
        }
        while r < target {
            let n = self.nodes[x as usize].next;
            if n == NIL {
                break;
            }
            r += 1;
            x = n;
        }
        level_done(0, x, NIL, r);
        (x, r)
    }

    /// Warm the cache for searches about to be made for `scores` (a pipelined batch of
    /// ZADD/ZINCRBY/ZRANK on this set): the upper-level descents toward all of them run
    /// interleaved, one step per search per round, each move prefetching the tower the next
    /// step of that search will read. In a large set nearly every step of a lone descent is a
    /// cache miss that the next step depends on; interleaved, the misses of up to `LANES`
    /// descents are in flight together. Read-only, and approximate (ties of score hints stop
    /// early), which only makes it warm a little less.
    pub fn warm(&self, scores: &[f64]) {
        const LANES: usize = 32;
        #[derive(Clone, Copy)]
        struct Lane {
            hint: u32,
            x: u32,
            tower: usize,
            level: usize,
        }
        if self.level <= 1 {
            return;
        }
        let head_tower = HEAD_TOWER as usize;
        for chunk in scores.chunks(LANES) {
            let mut lanes = [Lane {
                hint: 0,
                x: HEAD,
                tower: head_tower,
                level: self.level - 1,
            }; LANES];
            for (lane, &s) in lanes.iter_mut().zip(chunk) {
                lane.hint = score_hint(s);
            }
            let lanes = &mut lanes[..chunk.len()];
            let mut active = lanes.len();
            while active > 0 {
                for lane in lanes.iter_mut() {
                    if lane.level == 0 {
                        continue;
                    }
                    let l = self.towers[lane.tower + lane.level - 1];
                    if l.next != NIL && l.next_hint < lane.hint {
                        lane.x = l.next;
                        lane.tower = l.next_tower as usize;
                        prefetch(&self.towers[lane.tower + lane.level - 1]);
                    } else {
                        lane.level -= 1;
                        if lane.level == 0 {
                            // The level-0 walk starts by reading this node.
                            prefetch(&self.nodes[lane.x as usize]);
                            active -= 1;
                        }
                    }
                }
            }
            // ...and continues with its successor.
            for lane in lanes.iter() {
                let n = self.nodes[lane.x as usize].next;
                if n != NIL {
                    prefetch(&self.nodes[n as usize]);
                }
            }
        }
    }

    /// Search path for the node itself (it must be linked).
    fn path_to(&self, x: u32, path: &mut Path) {
        let score = self.nodes[x as usize].score;
        self.search(score, self.member(x), path);
    }

    /// Link an allocated, unlinked node of the given height (and tower) into place.
    fn link_node(&mut self, idx: u32, height: usize, idx_tower: u32) {
        let mut path = Path::new();
        let score = self.nodes[idx as usize].score;
        self.search(score, self.member(idx), &mut path);
        if height > self.level {
            for i in self.level..height {
                path.node[i] = HEAD;
                path.tower[i] = HEAD_TOWER;
                path.rank[i] = 0;
                self.link_mut(HEAD_TOWER, i).span = self.len as u32;
            }
            self.level = height;
        }
        let idx_hint = score_hint(score);
        let u = path.node[0];
        self.nodes[idx as usize].next = self.nodes[u as usize].next;
        self.nodes[u as usize].next = idx;
        for i in 1..height {
            let ut = path.tower[i];
            let ul = self.link(ut, i);
            let d = path.rank[0] - path.rank[i];
            *self.link_mut(idx_tower, i) = Link {
                span: (ul.span as usize - d) as u32,
                ..ul
            };
            *self.link_mut(ut, i) = Link {
                next: idx,
                span: (d + 1) as u32,
                next_tower: idx_tower,
                next_hint: idx_hint,
            };
        }
        for i in height..self.level {
            self.link_mut(path.tower[i], i).span += 1;
        }
        self.len += 1;
    }

    /// Unlink `x` given its search path; returns its height and tower. Does not free it.
    fn unlink(&mut self, x: u32, path: &Path) -> (usize, u32) {
        let mut height = 1;
        let mut tower = NIL;
        let u = path.node[0];
        if self.nodes[u as usize].next == x {
            self.nodes[u as usize].next = self.nodes[x as usize].next;
        }
        for i in 1..self.level {
            let ut = path.tower[i];
            let ul = self.link(ut, i);
            if ul.next == x {
                tower = ul.next_tower;
                let xl = self.link(tower, i);
                *self.link_mut(ut, i) = Link {
                    span: ul.span + xl.span - 1,
                    ..xl
                };
                height = i + 1;
            } else {
                self.link_mut(ut, i).span -= 1;
            }
        }
        while self.level > 1 && self.link(HEAD_TOWER, self.level - 1).next == NIL {
            self.level -= 1;
        }
        self.len -= 1;
        (height, tower)
    }

    /// Insert a member known to be absent.
    pub fn insert_new(&mut self, m: &[u8], score: f64) -> u32 {
        let h = self.random_level();
        let key = self.make_key(m);
        let (idx, tower) = self.alloc_node(key, score, h);
        self.link_node(idx, h, tower);
        self.index_insert(idx);
        idx
    }

    /// Change the score of node `idx`; returns the old score.
    pub fn update_score(&mut self, idx: u32, new: f64) -> f64 {
        let old = self.nodes[idx as usize].score;
        let mut path = Path::new();
        self.path_to(idx, &mut path);
        let in_place = {
            let m = self.member(idx);
            let prev = path.node[0];
            let next = self.nodes[idx as usize].next;
            (prev == HEAD || self.lt_key(prev, new, m))
                && (next == NIL || !self.le_key(next, new, m))
        };
        if in_place {
            self.nodes[idx as usize].score = new;
            let hint = score_hint(new);
            for i in 1..self.level {
                let l = self.link_mut(path.tower[i], i);
                if l.next != idx {
                    break;
                }
                l.next_hint = hint;
            }
            return old;
        }
        let (h, tower) = self.unlink(idx, &path);
        self.nodes[idx as usize].score = new;
        self.link_node(idx, h, tower);
        old
    }

    /// Remove node `idx` (must be live); returns its score.
    pub fn remove_node(&mut self, idx: u32) -> f64 {
        let score = self.nodes[idx as usize].score;
        let mut path = Path::new();
        self.path_to(idx, &mut path);
        let (h, tower) = self.unlink(idx, &path);
        self.index_remove(idx);
        self.free_slot(idx, h, tower);
        self.maybe_compact();
        score
    }

    pub fn remove(&mut self, m: &[u8]) -> Option<f64> {
        let idx = self.find(m)?;
        Some(self.remove_node(idx))
    }

    /// 0-based forward rank of live node `idx`.
    pub fn rank_of(&self, idx: u32) -> usize {
        let score = self.nodes[idx as usize].score;
        let m = self.member(idx);
        let r = self.descend(score, |n, s| self.le_with(n, s, score, m), |_, _, _, _| {});
        debug_assert!(r > 0, "rank_of: node not linked");
        r.saturating_sub(1)
    }

    /// Node at 0-based rank.
    pub fn node_at_rank(&self, r: usize) -> Option<u32> {
        if r >= self.len {
            return None;
        }
        let target = r + 1;
        let (x, t) = self.descend_rank(target, |_, _, _, t| t != target);
        (t == target).then_some(x)
    }

    /// Number of leading elements (in order) for which `pred` holds, found by a
    /// skip-list descent. `pred` must be monotone (true then false) along the order.
    pub fn count_while(&self, mut pred: impl FnMut(f64, &[u8]) -> bool) -> usize {
        let mut r = 0;
        let mut x = HEAD;
        let mut xt = HEAD_TOWER;
        for i in (1..self.level).rev() {
            loop {
                let l = self.link(xt, i);
                if l.next == NIL || !pred(self.nodes[l.next as usize].score, self.member(l.next)) {
                    break;
                }
                r += l.span as usize;
                x = l.next;
                xt = l.next_tower;
            }
        }
        loop {
            let n = self.nodes[x as usize].next;
            if n == NIL || !pred(self.nodes[n as usize].score, self.member(n)) {
                break;
            }
            r += 1;
            x = n;
        }
        r
    }

    /// Like `count_while` but the predicate sees only the score, and must hold for every score
    /// below `bound` and fail for every score above it (it decides `bound` itself).
    pub fn count_while_score(&self, bound: f64, mut pred: impl FnMut(f64) -> bool) -> usize {
        self.descend(bound, |_, s| pred(s), |_, _, _, _| {})
    }

    /// Visit forward ranks a..=b (clamped), ascending or, if `descending`, b down to a.
    pub fn for_each_ranks(
        &self,
        a: usize,
        b: usize,
        descending: bool,
        mut f: impl FnMut(&[u8], f64),
    ) {
        if self.len == 0 || a > b || a >= self.len {
            return;
        }
        let b = b.min(self.len - 1);
        if !descending {
            let mut x = match self.node_at_rank(a) {
                Some(x) => x,
                None => return,
            };
            for _ in a..=b {
                if x == NIL {
                    break;
                }
                let (m, s) = self.entry(x);
                f(m, s);
                x = self.nodes[x as usize].next;
            }
            return;
        }
        let mut buf = [NIL; REV_CHUNK];
        let mut hi = b;
        loop {
            let lo = if hi - a + 1 > REV_CHUNK {
                hi + 1 - REV_CHUNK
            } else {
                a
            };
            let n = hi - lo + 1;
            let mut x = self.node_at_rank(lo).unwrap_or(NIL);
            for slot in buf.iter_mut().take(n) {
                *slot = x;
                if x != NIL {
                    x = self.nodes[x as usize].next;
                }
            }
            for &x in buf[..n].iter().rev() {
                if x != NIL {
                    let (m, s) = self.entry(x);
                    f(m, s);
                }
            }
            if lo == a {
                break;
            }
            hi = lo - 1;
        }
    }

    /// Remove forward ranks start..=end (0-based, clamped), calling `on_removed`
    /// for each in ascending order. Returns the number removed.
    pub fn remove_rank_range(
        &mut self,
        start: usize,
        end: usize,
        mut on_removed: impl FnMut(&[u8], f64),
    ) -> usize {
        if self.len == 0 || start > end || start >= self.len {
            return 0;
        }
        let end = end.min(self.len - 1);
        let mut path = Path::new();
        let (x, _) = self.descend_rank(start, |i, x, xt, _| {
            path.node[i] = x;
            path.tower[i] = xt;
            true
        });
        let want = end - start + 1;
        let mut cur = self.nodes[x as usize].next;
        let mut removed = 0;
        while cur != NIL && removed < want {
            let next = self.nodes[cur as usize].next;
            {
                let (m, s) = self.entry(cur);
                on_removed(m, s);
            }
            let (h, tower) = self.unlink(cur, &path);
            self.index_remove(cur);
            self.free_slot(cur, h, tower);
            removed += 1;
            cur = next;
        }
        self.maybe_compact();
        removed
    }

    /// State for `append_sorted`; only valid on an empty list.
    pub fn appender(&self) -> Appender {
        debug_assert!(self.len == 0);
        Appender {
            last: [HEAD; MAX_LEVEL],
            last_tower: [HEAD_TOWER; MAX_LEVEL],
            rank: [0; MAX_LEVEL],
        }
    }

    /// Append an element greater than every element present (bulk load in O(1)).
    pub fn append_sorted(&mut self, ap: &mut Appender, m: &[u8], score: f64) {
        let h = self.random_level();
        if h > self.level {
            for i in self.level..h {
                ap.last[i] = HEAD;
                ap.last_tower[i] = HEAD_TOWER;
                ap.rank[i] = 0;
                self.link_mut(HEAD_TOWER, i).span = self.len as u32;
            }
            self.level = h;
        }
        let key = self.make_key(m);
        let (idx, tower) = self.alloc_node(key, score, h);
        let r = self.len + 1;
        self.nodes[ap.last[0] as usize].next = idx;
        ap.last[0] = idx;
        ap.rank[0] = r;
        let hint = score_hint(score);
        for i in 1..h {
            let span = (r - ap.rank[i]) as u32;
            *self.link_mut(ap.last_tower[i], i) = Link {
                next: idx,
                span,
                next_tower: tower,
                next_hint: hint,
            };
            self.link_mut(tower, i).span = 0;
            ap.last[i] = idx;
            ap.last_tower[i] = tower;
            ap.rank[i] = r;
        }
        for i in h.max(1)..self.level {
            self.link_mut(ap.last_tower[i], i).span += 1;
        }
        self.len += 1;
        self.index_insert(idx);
    }

    /// SCAN: visits slots from high to low. Cursor 0 starts; returns 0 when done.
    pub fn scan(&self, cursor: u64, count: usize, mut f: impl FnMut(&[u8], f64)) -> u64 {
        let slots = self.nodes.len();
        let mut pos = if cursor == 0 {
            slots
        } else {
            usize::try_from(cursor).unwrap_or(usize::MAX).min(slots)
        };
        let count = count.max(1);
        let max_probe = count.saturating_mul(16);
        let mut visited = 0;
        let mut probed = 0;
        while pos > 1 && visited < count && probed < max_probe {
            pos -= 1;
            probed += 1;
            if self.nodes[pos].key[0] != TAG_FREE {
                let (m, s) = self.entry(pos as u32);
                f(m, s);
                visited += 1;
            }
        }
        if pos <= 1 {
            0
        } else {
            pos as u64
        }
    }

    fn maybe_compact(&mut self) {
        let slots = self.nodes.len();
        if slots > COMPACT_MIN_SLOTS && self.len * 4 < slots {
            self.compact();
        }
    }

    /// Height and tower of every linked node (indexed by slot; height 0 for free slots),
    /// found by walking each level from the header: a node's tower is recorded only in the
    /// links that lead to it.
    fn heights_and_towers(&self) -> (Vec<u8>, Vec<u32>) {
        let n = self.nodes.len();
        let mut height = vec![0u8; n];
        let mut tower = vec![NIL; n];
        height[HEAD as usize] = MAX_LEVEL as u8;
        tower[HEAD as usize] = HEAD_TOWER;
        let mut x = self.first();
        while x != NIL {
            height[x as usize] = 1;
            x = self.nodes[x as usize].next;
        }
        for i in 1..self.level {
            let mut t = HEAD_TOWER;
            loop {
                let l = self.link(t, i);
                if l.next == NIL {
                    break;
                }
                height[l.next as usize] = (i + 1) as u8;
                tower[l.next as usize] = l.next_tower;
                t = l.next_tower;
            }
        }
        (height, tower)
    }

    /// Rebuild the arenas densely, keeping the relative order of slots.
    pub fn compact(&mut self) {
        let n = self.nodes.len();
        let (height, old_tower) = self.heights_and_towers();
        let mut map = vec![NIL; n];
        let mut live = 0u32;
        let mut tower_links = MAX_LEVEL - 1;
        for (i, slot) in map.iter_mut().enumerate() {
            if i == 0 || self.nodes[i].key[0] != TAG_FREE {
                *slot = live;
                live += 1;
                if i != 0 && height[i] > 1 {
                    tower_links += height[i] as usize - 1;
                }
            }
        }
        let remap = |x: u32| if x == NIL { NIL } else { map[x as usize] };
        let mut nodes = NodeArena::with_capacity(live as usize);
        let mut towers = TowerArena::with_capacity(tower_links);
        let mut new_tower = vec![NIL; live as usize];
        let mut longs: Vec<Box<[u8]>> =
            Vec::with_capacity(self.longs.len() - self.free_longs.len());
        for i in 0..n {
            if map[i] == NIL {
                continue;
            }
            let old = self.nodes[i];
            let h = height[i] as usize;
            if h > 1 {
                new_tower[map[i] as usize] = towers.len() as u32;
                for l in 0..h - 1 {
                    let lk = self.towers[old_tower[i] as usize + l];
                    towers.push(Link {
                        next: remap(lk.next),
                        span: lk.span,
                        next_tower: NIL,
                        next_hint: 0,
                    });
                }
            }
            let mut key = old.key;
            if key[0] == TAG_LONG {
                let b = self
                    .longs
                    .get_mut(long_idx(&key))
                    .map(std::mem::take)
                    .unwrap_or_default();
                key[4..8].copy_from_slice(&(longs.len() as u32).to_le_bytes());
                longs.push(b);
            }
            nodes.push(Node {
                score: old.score,
                key,
                next: remap(old.next),
                chain: NIL,
            });
        }
        self.nodes = nodes;
        self.towers = towers;
        self.longs = longs;
        // Towers moved: refresh every link's record of its next node's tower.
        for i in 1..self.level {
            let mut t = HEAD_TOWER;
            loop {
                let n = self.link(t, i).next;
                if n == NIL {
                    break;
                }
                let nt = new_tower[n as usize];
                let hint = score_hint(self.nodes[n as usize].score);
                let l = self.link_mut(t, i);
                l.next_tower = nt;
                l.next_hint = hint;
                t = nt;
            }
        }
        self.free_longs = Vec::new();
        self.free_node = NIL;
        self.free_towers = [NIL; MAX_LEVEL + 1];
        self.rebuild_index(buckets_for(self.len));
    }

    /// Approximate heap bytes owned.
    pub fn heap_bytes(&self) -> usize {
        self.nodes.bytes()
            + self.towers.bytes()
            + self.longs.capacity() * std::mem::size_of::<Box<[u8]>>()
            + self.longs.iter().map(|b| b.len()).sum::<usize>()
            + self.free_longs.capacity() * 4
            + self.heads.bytes()
    }

    /// Full structural check (O(N)); for tests and debugging.
    pub fn check_invariants(&self) -> Result<(), String> {
        let n = self.nodes.len();
        let mut rank = vec![usize::MAX; n];
        rank[0] = 0;
        // level 0: order, count
        let mut x = self.first();
        let mut r = 0;
        let mut prev: Option<u32> = None;
        while x != NIL {
            if self.nodes[x as usize].key[0] == TAG_FREE {
                return Err(format!("free slot {x} linked"));
            }
            r += 1;
            if r > self.len {
                return Err("level 0 longer than len (cycle?)".into());
            }
            if rank[x as usize] != usize::MAX {
                return Err(format!("node {x} linked twice"));
            }
            rank[x as usize] = r;
            if let Some(p) = prev {
                let (pm, ps) = self.entry(p);
                if !self.lt_key(p, self.score_of(x), self.member(x)) {
                    return Err(format!(
                        "order violated at rank {r}: {:?}/{ps} !< {:?}/{}",
                        pm,
                        self.member(x),
                        self.score_of(x)
                    ));
                }
                if self.score_of(x).is_nan() {
                    return Err("NaN score".into());
                }
            }
            prev = Some(x);
            x = self.nodes[x as usize].next;
        }
        if r != self.len {
            return Err(format!("level 0 has {r} nodes, len {}", self.len));
        }
        // heights from level lists; levels ordered; spans; towers recorded consistently
        let mut height = vec![1usize; n];
        let mut tower_of = vec![NIL; n];
        for i in 1..self.level {
            let mut x = HEAD;
            let mut xt = HEAD_TOWER;
            loop {
                let l = self.link(xt, i);
                let nx = l.next;
                let span = l.span as usize;
                let rx = rank[x as usize];
                if nx == NIL {
                    if span != self.len - rx {
                        return Err(format!(
                            "level {i}: NIL span of {x} is {span}, want {}",
                            self.len - rx
                        ));
                    }
                    break;
                }
                let rn = rank[nx as usize];
                if rn == usize::MAX || rn <= rx {
                    return Err(format!("level {i}: bad link {x}->{nx}"));
                }
                if i == 1 {
                    if l.next_tower == NIL || l.next_tower as usize >= self.towers.len() {
                        return Err(format!("level 1: link {x}->{nx} has no tower"));
                    }
                    tower_of[nx as usize] = l.next_tower;
                } else if tower_of[nx as usize] != l.next_tower {
                    return Err(format!("level {i}: link {x}->{nx} records the wrong tower"));
                }
                if l.next_hint != score_hint(self.nodes[nx as usize].score) {
                    return Err(format!("level {i}: link {x}->{nx} has a stale score hint"));
                }
                if height[nx as usize] != i {
                    return Err(format!("level {i}: node {nx} not on level {}", i - 1));
                }
                height[nx as usize] = i + 1;
                if span != rn - rx {
                    return Err(format!(
                        "level {i}: span {x}->{nx} is {span}, want {}",
                        rn - rx
                    ));
                }
                x = nx;
                xt = l.next_tower;
            }
        }
        if self.level > 1 && self.link(HEAD_TOWER, self.level - 1).next == NIL {
            return Err("top level empty".into());
        }
        for i in self.level.max(1)..MAX_LEVEL {
            if self.link(HEAD_TOWER, i).next != NIL {
                return Err(format!("header level {i} above list level is linked"));
            }
        }
        // towers do not overlap each other or the header's
        let mut spans: Vec<(u32, usize)> = (1..n)
            .filter(|&i| tower_of[i] != NIL)
            .map(|i| (tower_of[i], height[i] - 1))
            .collect();
        spans.push((HEAD_TOWER, MAX_LEVEL - 1));
        spans.sort_unstable();
        for w in spans.windows(2) {
            if w[0].0 as usize + w[0].1 > w[1].0 as usize {
                return Err(format!("towers at {} and {} overlap", w[0].0, w[1].0));
            }
        }
        // index: every live node is found, and the chains hold exactly the live nodes
        let mut chained = 0usize;
        for &head in self.heads.as_slice() {
            let mut x = head;
            while x != NIL {
                chained += 1;
                if chained > self.len {
                    return Err("index chains longer than len (cycle?)".into());
                }
                x = self.nodes[x as usize].chain;
            }
        }
        if chained != self.len {
            return Err(format!("index has {chained} entries, len {}", self.len));
        }
        let mut x = self.first();
        while x != NIL {
            if self.find(self.member(x)) != Some(x) {
                return Err(format!("index lookup of node {x} failed"));
            }
            x = self.nodes[x as usize].next;
        }
        // free list
        let mut free = 0;
        let mut f = self.free_node;
        while f != NIL {
            free += 1;
            if free > n {
                return Err("free list cycle".into());
            }
            if self.nodes[f as usize].key[0] != TAG_FREE {
                return Err("live node on free list".into());
            }
            f = self.nodes[f as usize].next;
        }
        if free + self.len + 1 != n {
            return Err(format!("slots {n} != free {free} + live {} + 1", self.len));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Inserts, rescoring, removals by member and by rank, compaction and index rebuilds
    /// (growth and after compaction) keep every invariant: towers reached only through the
    /// links that record them, and the member index chained through the nodes.
    #[test]
    fn index_and_towers_survive_growth_removal_and_compaction() {
        let mut l = SkipList::new();
        let n = 30_000u32;
        for i in 0..n {
            let m = format!("member:{i}");
            let m = if i % 7 == 0 { m.repeat(3) } else { m }; // some long members
            l.insert_new(
                m.as_bytes(),
                f64::from(i.wrapping_mul(2_654_435_761) % 1000),
            );
        }
        l.check_invariants().unwrap();
        assert!(l.heads.len() * INDEX_LOAD_MAX >= l.len());
        for i in (0..n).step_by(3) {
            let m = format!("member:{i}");
            let m = if i % 7 == 0 { m.repeat(3) } else { m };
            let x = l.find(m.as_bytes()).expect("present");
            l.update_score(x, f64::from(i % 17) - 8.0);
        }
        l.check_invariants().unwrap();
        let mut removed = 0;
        for i in 0..n {
            if i % 5 != 0 {
                let m = format!("member:{i}");
                let m = if i % 7 == 0 { m.repeat(3) } else { m };
                assert!(l.remove(m.as_bytes()).is_some());
                removed += 1;
                if removed % 5000 == 0 {
                    l.check_invariants().unwrap();
                }
            }
        }
        // Below a quarter of the slots: compacted, index rebuilt for the smaller set.
        assert!(l.slots() < n as usize / 2, "compacted: {} slots", l.slots());
        l.check_invariants().unwrap();
        assert!(l.find(b"member:5").is_some() && l.find(b"member:6").is_none());
        let before = l.len();
        let mut seen = 0;
        l.remove_rank_range(10, 1009, |_, _| seen += 1);
        assert_eq!((seen, l.len()), (1000, before - 1000));
        l.check_invariants().unwrap();
        // Bulk load in order.
        let mut b = SkipList::with_capacity(10_000);
        let mut ap = b.appender();
        for i in 0..10_000u32 {
            b.append_sorted(&mut ap, format!("m{i:06}").as_bytes(), f64::from(i));
        }
        b.check_invariants().unwrap();
        assert_eq!(b.rank_of(b.find(b"m004321").expect("present")), 4321);
        assert_eq!(
            b.node_at_rank(9999).map(|x| b.member(x).to_vec()),
            Some(b"m009999".to_vec())
        );
    }

    #[test]
    fn warm_reads_only_and_handles_every_score() {
        let mut l = SkipList::new();
        for i in 0..20_000u32 {
            let m = format!("m:{i:08}");
            l.insert_new(m.as_bytes(), f64::from(i % 5000) - 2500.0);
        }
        let before: Vec<(Vec<u8>, f64)> = {
            let mut v = Vec::new();
            l.for_each_ranks(0, l.len() - 1, false, |m, s| v.push((m.to_vec(), s)));
            v
        };
        let scores: Vec<f64> = (0..100)
            .map(|i| f64::from(i) * 61.0 - 3000.0)
            .chain([f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.0, 1e300, -1e300])
            .collect();
        l.warm(&scores);
        l.warm(&[]);
        l.warm(&scores[..1]);
        l.check_invariants().unwrap();
        let mut after = Vec::new();
        l.for_each_ranks(0, l.len() - 1, false, |m, s| after.push((m.to_vec(), s)));
        assert_eq!(before, after);
        // An empty list and a one-level list are fine too.
        SkipList::new().warm(&scores);
        let mut one = SkipList::new();
        one.insert_new(b"a", 1.0);
        one.warm(&scores);
    }
}
