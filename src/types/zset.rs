//! The sorted-set value type behind all ZSET commands.
//!
//! # What this owns
//!
//! A `ZSet` maps member bytes to an `f64` score and keeps the members ordered
//! by `(score, member)`, ties broken by memcmp of the member bytes (then
//! length). Scores compare with `<` and `==`, so `-0.0` and `0.0` are the same
//! score; `+inf`/`-inf` are ordinary scores; NaN never gets in (the command
//! layer rejects it). Command semantics (NX/XX/GT/LT/INCR, argument parsing,
//! replies, clamping of ranks) live in the command code; this module only
//! stores and answers ordered queries.
//!
//! # Encodings
//!
//! * `Small` ("listpack"): one exactly sized byte array (a `Counted`: the entry count, then
//!   the entries) of entries `[head: LEB128 varint][score][member bytes]`, sorted by
//!   `(score, member)`, behind one pointer.
//!   The head is the member's length shifted left by one; its low bit says how
//!   the score follows: 1, as the f64's 8 bytes; 0, as a zigzag LEB128
//!   integer, for an integral score below 2^53 in magnitude (what a points
//!   board or a timestamp holds: 100000 takes 3 bytes), as Redis's listpack
//!   keeps such a score as an integer. Everything is a linear walk; with at
//!   most `max_entries` (128) members of at most `max_value` (64) bytes that is
//!   a few cache lines and costs 2-10 bytes of overhead per member. An insert,
//!   update or removal moves the entries after it within the array's block, and
//!   takes a new block only when the array changes size class (see
//!   `ThinBytes::splice`).
//! * `Large` ("skiplist"): `super::skiplist::SkipList`, a skip list with spans
//!   in a u32-indexed arena plus a member -> slot hash index (see that file).
//!
//! A set starts Small when the limits allow it and is converted to Large by
//! the insert that would break a limit. It never goes back by itself;
//! `convert_to_small_if_fits` is for commands that build a destination set.
//!
//! Every range query is expressed as a contiguous block of ranks `[lo, hi)`:
//! `lo` = number of leading elements below the range's minimum, `hi` = number
//! of leading elements not above its maximum (both O(log N) descents on the
//! skip list), then offset/limit/reverse are applied on ranks. Reverse walks
//! use ranks too (the skip list has no backward pointers).

use super::skiplist::{SkipList, NIL};
use super::thin::{may_pass_safety_bound, write_varint, Counted, PACKED_SAFETY_BYTES};

/// Encoding thresholds (`zset-max-listpack-entries` / `zset-max-listpack-value`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZsetLimits {
    pub max_entries: usize,
    pub max_value: usize,
}

impl Default for ZsetLimits {
    fn default() -> Self {
        ZsetLimits {
            max_entries: 128,
            max_value: 64,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScoreBound {
    Inclusive(f64),
    Exclusive(f64),
}

impl ScoreBound {
    pub fn value(self) -> f64 {
        match self {
            ScoreBound::Inclusive(v) | ScoreBound::Exclusive(v) => v,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct ScoreRange {
    pub min: ScoreBound,
    pub max: ScoreBound,
}

impl ScoreRange {
    /// Redis zslIsInRange's first test: min > max, or min == max with an
    /// exclusive side, is empty. NaN bounds are treated as empty.
    pub fn is_empty(&self) -> bool {
        let (a, ax) = match self.min {
            ScoreBound::Inclusive(v) => (v, false),
            ScoreBound::Exclusive(v) => (v, true),
        };
        let (b, bx) = match self.max {
            ScoreBound::Inclusive(v) => (v, false),
            ScoreBound::Exclusive(v) => (v, true),
        };
        a.is_nan() || b.is_nan() || a > b || (a == b && (ax || bx))
    }

    /// zslValueGteMin
    #[inline]
    pub fn gte_min(&self, v: f64) -> bool {
        match self.min {
            ScoreBound::Inclusive(m) => v >= m,
            ScoreBound::Exclusive(m) => v > m,
        }
    }

    /// zslValueLteMax
    #[inline]
    pub fn lte_max(&self, v: f64) -> bool {
        match self.max {
            ScoreBound::Inclusive(m) => v <= m,
            ScoreBound::Exclusive(m) => v < m,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum LexBound {
    NegInf,
    PosInf,
    Inclusive(Vec<u8>),
    Exclusive(Vec<u8>),
}

#[derive(Clone, Debug)]
pub struct LexRange {
    pub min: LexBound,
    pub max: LexBound,
}

impl LexRange {
    /// Redis zslIsInLexRange's first test (`-`/`+` count as exclusive).
    pub fn is_empty(&self) -> bool {
        use LexBound::*;
        match (&self.min, &self.max) {
            (NegInf, NegInf) | (PosInf, PosInf) | (PosInf, _) | (_, NegInf) => true,
            (NegInf, _) | (_, PosInf) => false,
            (Inclusive(a), Inclusive(b)) => a > b,
            (Inclusive(a) | Exclusive(a), Inclusive(b) | Exclusive(b)) => a >= b,
        }
    }

    /// zslLexValueGteMin
    #[inline]
    pub fn gte_min(&self, v: &[u8]) -> bool {
        match &self.min {
            LexBound::NegInf => true,
            LexBound::PosInf => false,
            LexBound::Inclusive(m) => v >= m.as_slice(),
            LexBound::Exclusive(m) => v > m.as_slice(),
        }
    }

    /// zslLexValueLteMax
    #[inline]
    pub fn lte_max(&self, v: &[u8]) -> bool {
        match &self.max {
            LexBound::PosInf => true,
            LexBound::NegInf => false,
            LexBound::Inclusive(m) => v <= m.as_slice(),
            LexBound::Exclusive(m) => v < m.as_slice(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum InsertResult {
    Added,
    Updated { old: f64 },
    Unchanged,
}

// ---------------------------------------------------------------------------
// Small ("listpack") encoding

#[derive(Clone, Default, Debug)]
struct Small {
    bytes: Counted,
}

/// Scores of at most this magnitude convert to i64 and back exactly.
const EXACT_INT_LIMIT: f64 = 9_007_199_254_740_992.0; // 2^53

/// The score as the integer the small form stores, if it is one (not -0, which keeps its sign
/// only as an f64).
#[inline]
fn integral(score: f64) -> Option<i64> {
    (score.fract() == 0.0
        && score.abs() < EXACT_INT_LIMIT
        && (score != 0.0 || score.is_sign_positive()))
    .then_some(score as i64)
}

/// Bytes a LEB128 varint of `n` takes.
#[inline]
fn varint_len(n: u64) -> usize {
    (u64::BITS - (n | 1).leading_zeros()).div_ceil(7) as usize
}

/// Write the entry (`score`, `m`) in the small form's layout to `out`, which is exactly
/// [`encoded_len`] bytes.
fn encode_into(out: &mut [u8], m: &[u8], score: f64) {
    let at = match integral(score) {
        Some(i) => {
            let at = write_varint(out, m.len() << 1);
            let zigzag = ((i << 1) ^ (i >> 63)) as u64;
            at + write_varint(&mut out[at..], zigzag as usize)
        }
        None => {
            let at = write_varint(out, (m.len() << 1) | 1);
            out[at..at + 8].copy_from_slice(&score.to_le_bytes());
            at + 8
        }
    };
    out[at..].copy_from_slice(m);
}

/// Append the entry (`score`, `m`) in the small form's layout to `out` (tests).
#[cfg(test)]
fn encode(out: &mut Vec<u8>, m: &[u8], score: f64) {
    let start = out.len();
    out.resize(start + encoded_len(m, score), 0);
    encode_into(&mut out[start..], m, score);
}

/// Bytes [`encode`] writes for (`score`, `m`).
fn encoded_len(m: &[u8], score: f64) -> usize {
    let score_len = match integral(score) {
        Some(i) => varint_len(((i << 1) ^ (i >> 63)) as u64),
        None => 8,
    };
    varint_len((m.len() << 1) as u64) + score_len + m.len()
}

/// Decode the entry at `pos`: (score, member, position of the next entry).
#[inline]
fn decode(buf: &[u8], pos: usize) -> (f64, &[u8], usize) {
    let (head, mut p) = super::get_varint(buf, pos);
    let score = if head & 1 == 1 {
        let mut sb = [0u8; 8];
        sb.copy_from_slice(&buf[p..p + 8]);
        p += 8;
        f64::from_le_bytes(sb)
    } else {
        let (zigzag, next) = super::get_varint(buf, p);
        p = next;
        let zigzag = zigzag as u64;
        ((zigzag >> 1) as i64 ^ -((zigzag & 1) as i64)) as f64
    };
    let len = head >> 1;
    (score, &buf[p..p + len], p + len)
}

#[inline]
fn key_lt(s1: f64, m1: &[u8], s2: f64, m2: &[u8]) -> bool {
    s1 < s2 || (s1 == s2 && m1 < m2)
}

#[derive(Clone)]
struct SmallIter<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for SmallIter<'a> {
    /// (entry start, score, member, entry end)
    type Item = (usize, f64, &'a [u8], usize);
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.buf.len() {
            return None;
        }
        let start = self.pos;
        let (s, m, end) = decode(self.buf, start);
        self.pos = end;
        Some((start, s, m, end))
    }
}

impl Small {
    fn iter(&self) -> SmallIter<'_> {
        SmallIter {
            buf: self.bytes.body(),
            pos: 0,
        }
    }

    #[inline]
    fn len(&self) -> usize {
        self.bytes.count()
    }

    /// Whether one more member `m` keeps the form within `limits` (and Redis's listpack
    /// safety bound, as its `lpSafeToAdd`).
    fn takes(&self, m: &[u8], limits: &ZsetLimits) -> bool {
        self.len() < limits.max_entries
            && m.len() <= limits.max_value
            && (!may_pass_safety_bound(limits.max_entries, limits.max_value + 20)
                || self.bytes.body().len() + m.len() + 20 <= PACKED_SAFETY_BYTES)
    }

    /// (rank, start, end, score)
    fn find(&self, m: &[u8]) -> Option<(usize, usize, usize, f64)> {
        self.iter()
            .enumerate()
            .find(|(_, (_, _, em, _))| *em == m)
            .map(|(r, (st, s, _, end))| (r, st, end, s))
    }

    /// Add the absent member `m`. The array grows to fit, not doubled: a small set is one
    /// array, like Redis's listpack (a doubled one wasted up to half of it: a 10-member
    /// set's 160 bytes took 256).
    fn insert(&mut self, m: &[u8], score: f64) {
        let pos = self
            .iter()
            .find(|&(_, s, em, _)| !key_lt(s, em, score, m))
            .map_or(self.bytes.body().len(), |e| e.0);
        let count = self.len() + 1;
        encode_into(
            self.bytes.splice(pos..pos, encoded_len(m, score), count),
            m,
            score,
        );
    }

    /// Give `m`, whose entry is at bytes `st..end`, the new `score`: the entry is rewritten
    /// where it is (one resize if its length changes), then rotated to its new place, so the
    /// array is resized at most once (ZINCRBY, ZADD of a present member).
    fn update(&mut self, st: usize, end: usize, m: &[u8], score: f64) {
        let old = end - st;
        // Its place among the others, as an offset in the array without it.
        let place = self
            .iter()
            .filter(|e| e.0 != st)
            .find(|&(_, s, em, _)| !key_lt(s, em, score, m))
            .map(|e| if e.0 > st { e.0 - old } else { e.0 });
        let place = place.unwrap_or(self.bytes.body().len() - old);
        let n = encoded_len(m, score);
        let count = self.len();
        encode_into(self.bytes.splice(st..end, n, count), m, score);
        let body = self.bytes.body_mut();
        if place < st {
            body[place..st + n].rotate_right(n);
        } else if place > st {
            body[st..place + n].rotate_left(n);
        }
    }

    /// Remove the entry at bytes `st..end`.
    fn remove_at(&mut self, st: usize, end: usize) {
        let count = self.len() - 1;
        self.bytes.splice(st..end, 0, count);
    }

    /// Byte offset of the entry with rank `r` (the body's length when r >= len).
    fn offset_of_rank(&self, r: usize) -> usize {
        self.iter().nth(r).map_or(self.bytes.body().len(), |e| e.0)
    }

    fn remove_ranks(&mut self, a: usize, b: usize) -> usize {
        let len = self.len();
        if a > b || a >= len {
            return 0;
        }
        let b = b.min(len - 1);
        let p0 = self.offset_of_rank(a);
        let p1 = self.offset_of_rank(b + 1);
        self.bytes.splice(p0..p1, 0, len - (b - a + 1));
        b - a + 1
    }

    fn count_while(&self, mut pred: impl FnMut(f64, &[u8]) -> bool) -> usize {
        self.iter().take_while(|&(_, s, m, _)| pred(s, m)).count()
    }
}

// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Enc {
    Small(Small),
    Large(Box<SkipList>),
}

/// A sorted set value. `Clone` is a deep copy.
#[derive(Clone, Debug)]
pub struct ZSet {
    enc: Enc,
}

/// Ascending iterator over a `ZSet`.
pub struct Iter<'a> {
    inner: IterInner<'a>,
}

enum IterInner<'a> {
    Small(SmallIter<'a>),
    Large { list: &'a SkipList, x: u32 },
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a [u8], f64);
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.inner {
            IterInner::Small(it) => it.next().map(|(_, s, m, _)| (m, s)),
            IterInner::Large { list, x } => {
                if *x == NIL {
                    return None;
                }
                let cur = *x;
                *x = list.next_of(cur);
                Some(list.entry(cur))
            }
        }
    }
}

impl ZSet {
    /// Active defrag: move the sorted set's blocks that sit in sparse slabs, `from` on, at
    /// most `budget` of them; returns where to go on from, or None when done.
    pub fn defrag(
        &mut self,
        r: &mut crate::alloc::defrag::Relocator,
        from: usize,
        budget: usize,
    ) -> Option<usize> {
        match &mut self.enc {
            Enc::Small(s) => {
                s.bytes.defrag(r);
                None
            }
            Enc::Large(l) => {
                if from == 0 {
                    r.boxed(l);
                }
                l.defrag(r, from, budget)
            }
        }
    }

    /// A new empty set for a command about to add `expected_len` members, the
    /// first of which is `first_member_len` bytes long.
    pub fn new_for(first_member_len: usize, expected_len: usize, limits: &ZsetLimits) -> ZSet {
        if limits.max_entries != 0
            && expected_len <= limits.max_entries
            && first_member_len <= limits.max_value
        {
            ZSet {
                enc: Enc::Small(Small::default()),
            }
        } else {
            ZSet {
                enc: Enc::Large(Box::new(SkipList::with_capacity(expected_len))),
            }
        }
    }

    /// An empty set in the skiplist encoding.
    pub fn new_large() -> ZSet {
        ZSet {
            enc: Enc::Large(Box::default()),
        }
    }

    pub fn len(&self) -> usize {
        match &self.enc {
            Enc::Small(s) => s.len(),
            Enc::Large(l) => l.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The score Redis would store when `score` is written to `member`: its small
    /// (listpack) form keeps scores as text, where -0 reads back as 0, while the skip-list
    /// form keeps -0. `exists` says whether `member` is in the set, when the caller knows;
    /// a new member keeps the small form only if the set stays under both limits.
    pub fn stored_score(
        &self,
        member: &[u8],
        score: f64,
        exists: Option<bool>,
        limits: &ZsetLimits,
    ) -> f64 {
        if score != 0.0 || score.is_sign_positive() || !matches!(self.enc, Enc::Small(_)) {
            return score;
        }
        let exists = exists.unwrap_or_else(|| self.score(member).is_some());
        if exists || (self.len() < limits.max_entries && member.len() <= limits.max_value) {
            0.0
        } else {
            score
        }
    }

    pub fn encoding_name(&self) -> &'static str {
        match &self.enc {
            Enc::Small(_) => "listpack",
            Enc::Large(_) => "skiplist",
        }
    }

    /// Sets smaller than this are not worth warming (see [`ZSet::warm`]): they stay in cache.
    pub const WARM_MIN_LEN: usize = 1 << 16;

    /// Warm the cache for searches toward `scores` (see `SkipList::warm`); a no-op for sets
    /// under [`Self::WARM_MIN_LEN`] members or in the compact encoding.
    pub fn warm(&self, scores: &[f64]) {
        if let Enc::Large(l) = &self.enc {
            if l.len() >= Self::WARM_MIN_LEN {
                l.warm(scores);
            }
        }
    }

    /// Warm the cache for looking up `members` (see `SkipList::warm_lookups`); a no-op for
    /// sets under [`Self::WARM_MIN_LEN`] members or in the compact encoding.
    pub fn warm_lookups(&self, members: &[&[u8]]) {
        if let Enc::Large(l) = &self.enc {
            if l.len() >= Self::WARM_MIN_LEN {
                l.warm_lookups(members);
            }
        }
    }

    pub fn score(&self, member: &[u8]) -> Option<f64> {
        match &self.enc {
            Enc::Small(s) => s.find(member).map(|e| e.3),
            Enc::Large(l) => l.find(member).map(|x| l.score_of(x)),
        }
    }

    /// Upsert. The caller has applied NX/XX/GT/LT/INCR and guarantees `score`
    /// is not NaN. An equal score (`==`, so -0.0 vs 0.0 too) is `Unchanged` and
    /// keeps the stored value.
    pub fn insert(&mut self, member: &[u8], score: f64, limits: &ZsetLimits) -> InsertResult {
        debug_assert!(!score.is_nan());
        if let Enc::Small(s) = &mut self.enc {
            if let Some((_, st, end, old)) = s.find(member) {
                if old == score {
                    return InsertResult::Unchanged;
                }
                s.update(st, end, member, score);
                return InsertResult::Updated { old };
            }
            if s.takes(member, limits) {
                s.insert(member, score);
                return InsertResult::Added;
            }
            self.convert_to_large();
        }
        match &mut self.enc {
            Enc::Large(l) => match l.find(member) {
                Some(x) => {
                    let old = l.score_of(x);
                    if old == score {
                        InsertResult::Unchanged
                    } else {
                        l.update_score(x, score);
                        InsertResult::Updated { old }
                    }
                }
                None => {
                    l.insert_new(member, score);
                    InsertResult::Added
                }
            },
            Enc::Small(_) => unreachable!("converted above"),
        }
    }

    pub fn remove(&mut self, member: &[u8]) -> Option<f64> {
        match &mut self.enc {
            Enc::Small(s) => {
                let (_, st, end, score) = s.find(member)?;
                s.remove_at(st, end);
                Some(score)
            }
            Enc::Large(l) => l.remove(member),
        }
    }

    /// 0-based rank and score; `reverse` counts from the highest.
    pub fn rank(&self, member: &[u8], reverse: bool) -> Option<(usize, f64)> {
        let (r, s) = match &self.enc {
            Enc::Small(s) => s.find(member).map(|e| (e.0, e.3))?,
            Enc::Large(l) => {
                let x = l.find(member)?;
                (l.rank_of(x), l.score_of(x))
            }
        };
        Some((if reverse { self.len() - 1 - r } else { r }, s))
    }

    /// Element at 0-based forward rank.
    pub fn get_by_rank(&self, rank: usize) -> Option<(&[u8], f64)> {
        match &self.enc {
            Enc::Small(s) => s.iter().nth(rank).map(|(_, sc, m, _)| (m, sc)),
            Enc::Large(l) => l.node_at_rank(rank).map(|x| l.entry(x)),
        }
    }

    /// Visit forward ranks a..=b (clamped to the set), ascending, or descending
    /// if `descending`.
    fn for_each_fwd_ranks(
        &self,
        a: usize,
        b: usize,
        descending: bool,
        mut f: impl FnMut(&[u8], f64),
    ) {
        let len = self.len();
        if len == 0 || a > b || a >= len {
            return;
        }
        let b = b.min(len - 1);
        match &self.enc {
            Enc::Small(s) => {
                let it = s.iter().skip(a).take(b - a + 1);
                if descending {
                    let v: Vec<(f64, &[u8])> = it.map(|(_, sc, m, _)| (sc, m)).collect();
                    for &(sc, m) in v.iter().rev() {
                        f(m, sc);
                    }
                } else {
                    for (_, sc, m, _) in it {
                        f(m, sc);
                    }
                }
            }
            Enc::Large(l) => l.for_each_ranks(a, b, descending, f),
        }
    }

    /// Visit ranks start..=end (0-based, start <= end < len; out-of-range parts
    /// are ignored). With `reverse`, ranks count from the top and elements come
    /// highest first.
    pub fn for_each_in_rank_range(
        &self,
        start: usize,
        end: usize,
        reverse: bool,
        f: impl FnMut(&[u8], f64),
    ) {
        let len = self.len();
        if len == 0 || start > end || start >= len {
            return;
        }
        let end = end.min(len - 1);
        if reverse {
            self.for_each_fwd_ranks(len - 1 - end, len - 1 - start, true, f);
        } else {
            self.for_each_fwd_ranks(start, end, false, f);
        }
    }

    fn count_while(&self, pred: impl FnMut(f64, &[u8]) -> bool) -> usize {
        match &self.enc {
            Enc::Small(s) => s.count_while(pred),
            Enc::Large(l) => l.count_while(pred),
        }
    }

    /// `pred` holds below `bound` and fails above it.
    fn count_while_score(&self, bound: f64, mut pred: impl FnMut(f64) -> bool) -> usize {
        match &self.enc {
            Enc::Small(s) => s.count_while(|sc, _| pred(sc)),
            Enc::Large(l) => l.count_while_score(bound, pred),
        }
    }

    /// Forward ranks `lo..hi` of the elements inside a score range. O(log N).
    pub fn score_range_ranks(&self, range: &ScoreRange) -> std::ops::Range<usize> {
        if range.is_empty() || self.is_empty() {
            return 0..0;
        }
        let lo = self.count_while_score(range.min.value(), |s| !range.gte_min(s));
        let hi = self.count_while_score(range.max.value(), |s| range.lte_max(s));
        lo..hi.max(lo)
    }

    /// Forward ranks `lo..hi` of the elements inside a lex range. O(log N).
    /// (Meaningful when all scores are equal, as in Redis.)
    pub fn lex_range_ranks(&self, range: &LexRange) -> std::ops::Range<usize> {
        if range.is_empty() || self.is_empty() {
            return 0..0;
        }
        let lo = self.count_while(|_, m| !range.gte_min(m));
        let hi = self.count_while(|_, m| range.lte_max(m));
        lo..hi.max(lo)
    }

    fn visit_rank_block(
        &self,
        r: std::ops::Range<usize>,
        reverse: bool,
        offset: usize,
        limit: Option<usize>,
        f: impl FnMut(&[u8], f64),
    ) {
        let n = r.end - r.start;
        if offset >= n {
            return;
        }
        let take = (n - offset).min(limit.unwrap_or(usize::MAX));
        if take == 0 {
            return;
        }
        if reverse {
            let hi = r.end - 1 - offset; // inclusive
            self.for_each_fwd_ranks(hi + 1 - take, hi, true, f);
        } else {
            let lo = r.start + offset;
            self.for_each_fwd_ranks(lo, lo + take - 1, false, f);
        }
    }

    /// Elements with score in `range`, ascending (descending if `reverse`),
    /// skipping `offset` matches and visiting at most `limit`.
    pub fn for_each_in_score_range(
        &self,
        range: &ScoreRange,
        reverse: bool,
        offset: usize,
        limit: Option<usize>,
        f: impl FnMut(&[u8], f64),
    ) {
        let r = self.score_range_ranks(range);
        self.visit_rank_block(r, reverse, offset, limit, f);
    }

    /// Same for lex ranges.
    pub fn for_each_in_lex_range(
        &self,
        range: &LexRange,
        reverse: bool,
        offset: usize,
        limit: Option<usize>,
        f: impl FnMut(&[u8], f64),
    ) {
        let r = self.lex_range_ranks(range);
        self.visit_rank_block(r, reverse, offset, limit, f);
    }

    pub fn count_in_score_range(&self, range: &ScoreRange) -> usize {
        self.score_range_ranks(range).len()
    }

    pub fn count_in_lex_range(&self, range: &LexRange) -> usize {
        self.lex_range_ranks(range).len()
    }

    /// Remove forward ranks start..=end (clamped). Returns the number removed.
    pub fn remove_rank_range(&mut self, start: usize, end: usize) -> usize {
        match &mut self.enc {
            Enc::Small(s) => s.remove_ranks(start, end),
            Enc::Large(l) => l.remove_rank_range(start, end, |_, _| {}),
        }
    }

    pub fn remove_score_range(&mut self, range: &ScoreRange) -> usize {
        let r = self.score_range_ranks(range);
        if r.is_empty() {
            return 0;
        }
        self.remove_rank_range(r.start, r.end - 1)
    }

    pub fn remove_lex_range(&mut self, range: &LexRange) -> usize {
        let r = self.lex_range_ranks(range);
        if r.is_empty() {
            return 0;
        }
        self.remove_rank_range(r.start, r.end - 1)
    }

    /// Remove and return up to `count` lowest (highest if `max`) elements, in
    /// pop order (lowest first, or highest first).
    pub fn pop(&mut self, count: usize, max: bool) -> Vec<(Vec<u8>, f64)> {
        let len = self.len();
        let n = count.min(len);
        if n == 0 {
            return Vec::new();
        }
        let (a, b) = if max { (len - n, len - 1) } else { (0, n - 1) };
        let mut out = Vec::with_capacity(n);
        match &mut self.enc {
            Enc::Small(s) => {
                out.extend(
                    s.iter()
                        .skip(a)
                        .take(n)
                        .map(|(_, sc, m, _)| (m.to_vec(), sc)),
                );
                s.remove_ranks(a, b);
            }
            Enc::Large(l) => {
                l.remove_rank_range(a, b, |m, sc| out.push((m.to_vec(), sc)));
            }
        }
        if max {
            out.reverse();
        }
        out
    }

    /// All elements in ascending order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            inner: match &self.enc {
                Enc::Small(s) => IterInner::Small(s.iter()),
                Enc::Large(l) => IterInner::Large {
                    list: l,
                    x: l.first(),
                },
            },
        }
    }

    /// SCAN support. Small: everything, returns 0. Large: walks arena slots
    /// from high to low; the returned cursor is a slot bound (0 = done). Every
    /// element present for the whole scan is returned at least once, even if
    /// the set changes (or is compacted) between calls; duplicates are possible.
    /// Element order is arbitrary.
    pub fn scan(&self, cursor: u64, count: usize, mut f: impl FnMut(&[u8], f64)) -> u64 {
        match &self.enc {
            Enc::Small(s) => {
                for (_, sc, m, _) in s.iter() {
                    f(m, sc);
                }
                0
            }
            Enc::Large(l) => l.scan(cursor, count, f),
        }
    }

    /// Switch a skiplist-encoded set to listpack if it is within `limits`
    /// (Redis zsetConvertToListpackIfNeeded).
    pub fn convert_to_small_if_fits(&mut self, limits: &ZsetLimits) {
        if let Enc::Large(l) = &self.enc {
            if l.len() > limits.max_entries {
                return;
            }
            let mut bytes = 0;
            for (m, sc) in self.iter() {
                if m.len() > limits.max_value {
                    return;
                }
                bytes += encoded_len(m, sc);
            }
            if bytes > PACKED_SAFETY_BYTES {
                return;
            }
            // One exactly sized array, filled in order.
            let mut s = Small::default();
            let out = s.bytes.splice(0..0, bytes, l.len());
            let mut at = 0;
            for (m, sc) in self.iter() {
                let n = encoded_len(m, sc);
                encode_into(&mut out[at..at + n], m, sc);
                at += n;
            }
            self.enc = Enc::Small(s);
        }
    }

    /// Force the skiplist encoding (tests, DEBUG-like commands).
    pub fn convert_to_large(&mut self) {
        if let Enc::Small(s) = &self.enc {
            let mut l = SkipList::with_capacity(s.len() + 1);
            let mut ap = l.appender();
            for (_, score, m, _) in s.iter() {
                l.append_sorted(&mut ap, m, score);
            }
            self.enc = Enc::Large(Box::new(l));
        }
    }

    /// Approximate heap bytes used by this value.
    pub fn heap_bytes(&self) -> usize {
        match &self.enc {
            Enc::Small(s) => s.bytes.heap_bytes(),
            Enc::Large(l) => std::mem::size_of::<SkipList>() + l.heap_bytes(),
        }
    }

    /// Full consistency check, O(N). For tests and debugging.
    pub fn check_invariants(&self) -> Result<(), String> {
        match &self.enc {
            Enc::Small(s) => {
                let mut n = 0;
                let mut prev: Option<(f64, &[u8])> = None;
                for (_, sc, m, _) in s.iter() {
                    if sc.is_nan() {
                        return Err("NaN score".into());
                    }
                    if let Some((ps, pm)) = prev {
                        if !key_lt(ps, pm, sc, m) {
                            return Err(format!("listpack order violated at {n}"));
                        }
                    }
                    prev = Some((sc, m));
                    n += 1;
                }
                if n != s.len() {
                    return Err(format!("listpack has {n} entries, len {}", s.len()));
                }
                let mut seen = std::collections::HashSet::new();
                for (_, _, m, _) in s.iter() {
                    if !seen.insert(m) {
                        return Err("duplicate member in listpack".into());
                    }
                }
                Ok(())
            }
            Enc::Large(l) => l.check_invariants(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: ZsetLimits = ZsetLimits {
        max_entries: 128,
        max_value: 64,
    };
    const LARGE: ZsetLimits = ZsetLimits {
        max_entries: 0,
        max_value: 64,
    };

    fn both(f: impl Fn(&ZsetLimits, &str)) {
        f(&SMALL, "listpack");
        f(&LARGE, "skiplist");
    }

    fn build(lim: &ZsetLimits, items: &[(&str, f64)]) -> ZSet {
        let mut z = ZSet::new_for(1, items.len(), lim);
        for &(m, s) in items {
            z.insert(m.as_bytes(), s, lim);
        }
        z.check_invariants().unwrap();
        z
    }

    fn abc(lim: &ZsetLimits) -> ZSet {
        build(
            lim,
            &[("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 4.0), ("e", 5.0)],
        )
    }

    fn collect(f: impl FnOnce(&mut dyn FnMut(&[u8], f64))) -> Vec<(String, f64)> {
        let mut v = Vec::new();
        f(&mut |m: &[u8], s| v.push((String::from_utf8_lossy(m).into_owned(), s)));
        v
    }

    fn names(v: &[(String, f64)]) -> Vec<&str> {
        v.iter().map(|x| x.0.as_str()).collect()
    }

    fn inc(v: f64) -> ScoreBound {
        ScoreBound::Inclusive(v)
    }
    fn exc(v: f64) -> ScoreBound {
        ScoreBound::Exclusive(v)
    }
    fn sr(min: ScoreBound, max: ScoreBound) -> ScoreRange {
        ScoreRange { min, max }
    }
    fn li(s: &str) -> LexBound {
        LexBound::Inclusive(s.as_bytes().to_vec())
    }
    fn lx(s: &str) -> LexBound {
        LexBound::Exclusive(s.as_bytes().to_vec())
    }
    fn lr(min: LexBound, max: LexBound) -> LexRange {
        LexRange { min, max }
    }

    #[test]
    fn new_for_and_encoding() {
        let z = ZSet::new_for(3, 10, &SMALL);
        assert_eq!(z.encoding_name(), "listpack");
        assert!(z.is_empty());
        assert_eq!(ZSet::new_for(65, 1, &SMALL).encoding_name(), "skiplist");
        assert_eq!(ZSet::new_for(3, 129, &SMALL).encoding_name(), "skiplist");
        assert_eq!(ZSet::new_for(3, 1, &LARGE).encoding_name(), "skiplist");
    }

    #[test]
    fn insert_score_update_unchanged() {
        both(|lim, enc| {
            let mut z = ZSet::new_for(1, 1, lim);
            assert_eq!(z.insert(b"x", 1.0, lim), InsertResult::Added);
            assert_eq!(z.insert(b"x", 1.0, lim), InsertResult::Unchanged);
            assert_eq!(z.insert(b"x", 2.5, lim), InsertResult::Updated { old: 1.0 });
            assert_eq!(z.score(b"x"), Some(2.5));
            assert_eq!(z.score(b"y"), None);
            assert_eq!(z.insert(b"z", 0.0, lim), InsertResult::Added);
            // -0.0 == 0.0: unchanged, keeps the stored value
            assert_eq!(z.insert(b"z", -0.0, lim), InsertResult::Unchanged);
            assert!(z.score(b"z").unwrap().is_sign_positive());
            assert_eq!(z.insert(b"inf", f64::INFINITY, lim), InsertResult::Added);
            assert_eq!(
                z.insert(b"ninf", f64::NEG_INFINITY, lim),
                InsertResult::Added
            );
            assert_eq!(z.len(), 4);
            assert_eq!(z.encoding_name(), enc);
            let v: Vec<_> = z.iter().map(|(m, _)| m.to_vec()).collect();
            assert_eq!(
                v,
                vec![
                    b"ninf".to_vec(),
                    b"z".to_vec(),
                    b"x".to_vec(),
                    b"inf".to_vec()
                ]
            );
            z.check_invariants().unwrap();
        });
    }

    #[test]
    fn tie_break_memcmp_then_length() {
        both(|lim, _| {
            let z = build(
                lim,
                &[("ab", 1.0), ("a", 1.0), ("b", 1.0), ("", 1.0), ("aa", 1.0)],
            );
            let v: Vec<_> = z
                .iter()
                .map(|(m, _)| String::from_utf8_lossy(m).into_owned())
                .collect();
            assert_eq!(v, vec!["", "a", "aa", "ab", "b"]);
        });
    }

    #[test]
    fn long_members() {
        both(|lim, _| {
            let lim = ZsetLimits {
                max_value: 1000,
                ..*lim
            };
            let mut z = ZSet::new_for(1, 1, &lim);
            let long: Vec<Vec<u8>> = (0..40)
                .map(|i| vec![b'a' + (i % 26) as u8; 10 + i])
                .collect();
            for (i, m) in long.iter().enumerate() {
                z.insert(m, i as f64, &lim);
            }
            for (i, m) in long.iter().enumerate() {
                assert_eq!(z.score(m), Some(i as f64));
                assert_eq!(z.rank(m, false), Some((i, i as f64)));
            }
            for m in long.iter().step_by(2) {
                assert!(z.remove(m).is_some());
            }
            z.check_invariants().unwrap();
            assert_eq!(z.len(), 20);
            for (i, m) in long.iter().enumerate() {
                assert_eq!(z.score(m).is_some(), i % 2 == 1);
            }
        });
    }

    #[test]
    fn remove_and_rank() {
        both(|lim, _| {
            let mut z = abc(lim);
            assert_eq!(z.rank(b"a", false), Some((0, 1.0)));
            assert_eq!(z.rank(b"a", true), Some((4, 1.0)));
            assert_eq!(z.rank(b"e", true), Some((0, 5.0)));
            assert_eq!(z.rank(b"q", false), None);
            assert_eq!(z.remove(b"c"), Some(3.0));
            assert_eq!(z.remove(b"c"), None);
            assert_eq!(z.rank(b"d", false), Some((2, 4.0)));
            assert_eq!(z.len(), 4);
            z.check_invariants().unwrap();
        });
    }

    #[test]
    fn get_by_rank_and_rank_ranges() {
        both(|lim, _| {
            let z = abc(lim);
            assert_eq!(z.get_by_rank(0), Some((&b"a"[..], 1.0)));
            assert_eq!(z.get_by_rank(4), Some((&b"e"[..], 5.0)));
            assert_eq!(z.get_by_rank(5), None);
            let v = collect(|f| z.for_each_in_rank_range(1, 3, false, f));
            assert_eq!(names(&v), ["b", "c", "d"]);
            let v = collect(|f| z.for_each_in_rank_range(0, 1, true, f));
            assert_eq!(names(&v), ["e", "d"]);
            let v = collect(|f| z.for_each_in_rank_range(0, 100, true, f));
            assert_eq!(names(&v), ["e", "d", "c", "b", "a"]);
            let v = collect(|f| z.for_each_in_rank_range(5, 6, false, f));
            assert!(v.is_empty());
        });
    }

    #[test]
    fn score_ranges() {
        both(|lim, _| {
            let z = abc(lim);
            let r = sr(inc(2.0), inc(4.0));
            assert_eq!(
                names(&collect(
                    |f| z.for_each_in_score_range(&r, false, 0, None, f)
                )),
                ["b", "c", "d"]
            );
            assert_eq!(
                names(&collect(|f| z.for_each_in_score_range(&r, true, 0, None, f))),
                ["d", "c", "b"]
            );
            assert_eq!(
                names(&collect(|f| z.for_each_in_score_range(
                    &r,
                    false,
                    1,
                    Some(1),
                    f
                ))),
                ["c"]
            );
            assert_eq!(
                names(&collect(|f| z.for_each_in_score_range(
                    &r,
                    true,
                    1,
                    Some(5),
                    f
                ))),
                ["c", "b"]
            );
            assert_eq!(
                names(&collect(|f| z.for_each_in_score_range(&r, true, 3, None, f))),
                Vec::<&str>::new()
            );
            assert_eq!(
                names(&collect(|f| z.for_each_in_score_range(
                    &r,
                    false,
                    0,
                    Some(0),
                    f
                ))),
                Vec::<&str>::new()
            );
            let r = sr(exc(2.0), exc(4.0));
            assert_eq!(
                names(&collect(
                    |f| z.for_each_in_score_range(&r, false, 0, None, f)
                )),
                ["c"]
            );
            assert_eq!(z.count_in_score_range(&r), 1);
            let all = sr(inc(f64::NEG_INFINITY), inc(f64::INFINITY));
            assert_eq!(z.count_in_score_range(&all), 5);
            assert_eq!(z.count_in_score_range(&sr(inc(3.0), inc(3.0))), 1);
            assert_eq!(z.count_in_score_range(&sr(exc(3.0), inc(3.0))), 0);
            assert_eq!(z.count_in_score_range(&sr(inc(4.0), inc(2.0))), 0);
            assert_eq!(z.count_in_score_range(&sr(inc(6.0), inc(f64::INFINITY))), 0);
            assert_eq!(
                z.count_in_score_range(&sr(exc(f64::NEG_INFINITY), exc(1.0))),
                0
            );
        });
    }

    #[test]
    fn infinite_scores_in_ranges() {
        both(|lim, _| {
            let z = build(
                lim,
                &[
                    ("lo", f64::NEG_INFINITY),
                    ("mid", 0.0),
                    ("hi", f64::INFINITY),
                ],
            );
            let pinf = sr(inc(f64::INFINITY), inc(f64::INFINITY));
            assert_eq!(
                names(&collect(
                    |f| z.for_each_in_score_range(&pinf, false, 0, None, f)
                )),
                ["hi"]
            );
            let ninf = sr(inc(f64::NEG_INFINITY), exc(0.0));
            assert_eq!(
                names(&collect(
                    |f| z.for_each_in_score_range(&ninf, false, 0, None, f)
                )),
                ["lo"]
            );
            assert_eq!(
                z.count_in_score_range(&sr(exc(f64::NEG_INFINITY), exc(f64::INFINITY))),
                1
            );
            // -0.0 equals 0.0 in ranges
            assert_eq!(z.count_in_score_range(&sr(inc(-0.0), inc(-0.0))), 1);
        });
    }

    #[test]
    fn lex_ranges() {
        both(|lim, _| {
            let z = build(
                lim,
                &[
                    ("a", 0.0),
                    ("b", 0.0),
                    ("c", 0.0),
                    ("d", 0.0),
                    ("e", 0.0),
                    ("ee", 0.0),
                ],
            );
            let all = lr(LexBound::NegInf, LexBound::PosInf);
            assert_eq!(z.count_in_lex_range(&all), 6);
            let r = lr(li("b"), lx("e"));
            assert_eq!(
                names(&collect(|f| z.for_each_in_lex_range(&r, false, 0, None, f))),
                ["b", "c", "d"]
            );
            assert_eq!(
                names(&collect(|f| z.for_each_in_lex_range(
                    &r,
                    true,
                    0,
                    Some(2),
                    f
                ))),
                ["d", "c"]
            );
            let r = lr(lx("e"), LexBound::PosInf);
            assert_eq!(
                names(&collect(|f| z.for_each_in_lex_range(&r, false, 0, None, f))),
                ["ee"]
            );
            assert_eq!(z.count_in_lex_range(&lr(li("e"), li("e"))), 1);
            assert_eq!(z.count_in_lex_range(&lr(lx("e"), li("e"))), 0);
            assert_eq!(z.count_in_lex_range(&lr(li("z"), li("a"))), 0);
            assert_eq!(
                z.count_in_lex_range(&lr(LexBound::PosInf, LexBound::PosInf)),
                0
            );
            assert_eq!(
                z.count_in_lex_range(&lr(LexBound::NegInf, LexBound::NegInf)),
                0
            );
            assert_eq!(z.count_in_lex_range(&lr(LexBound::PosInf, li("z"))), 0);
            assert_eq!(z.count_in_lex_range(&lr(LexBound::NegInf, li("c"))), 3);
            assert_eq!(z.count_in_lex_range(&lr(li(""), li("a"))), 1);
        });
    }

    #[test]
    fn remove_ranges() {
        both(|lim, _| {
            let mut z = abc(lim);
            assert_eq!(z.remove_rank_range(1, 2), 2);
            assert_eq!(
                names(&collect(|f| z.iter().for_each(|(m, s)| f(m, s)))),
                ["a", "d", "e"]
            );
            assert_eq!(z.remove_rank_range(5, 9), 0);
            assert_eq!(z.remove_rank_range(2, 9), 1);
            z.check_invariants().unwrap();
            let mut z = abc(lim);
            assert_eq!(z.remove_score_range(&sr(exc(1.0), inc(4.0))), 3);
            assert_eq!(
                names(&collect(|f| z.iter().for_each(|(m, s)| f(m, s)))),
                ["a", "e"]
            );
            assert_eq!(z.remove_score_range(&sr(inc(4.0), inc(1.0))), 0);
            z.check_invariants().unwrap();
            let mut z = build(lim, &[("a", 0.0), ("b", 0.0), ("c", 0.0), ("d", 0.0)]);
            assert_eq!(z.remove_lex_range(&lr(lx("a"), li("c"))), 2);
            assert_eq!(
                names(&collect(|f| z.iter().for_each(|(m, s)| f(m, s)))),
                ["a", "d"]
            );
            z.check_invariants().unwrap();
        });
    }

    #[test]
    fn pop_min_max() {
        both(|lim, _| {
            let mut z = abc(lim);
            let p = z.pop(2, false);
            assert_eq!(p, vec![(b"a".to_vec(), 1.0), (b"b".to_vec(), 2.0)]);
            let p = z.pop(2, true);
            assert_eq!(p, vec![(b"e".to_vec(), 5.0), (b"d".to_vec(), 4.0)]);
            assert_eq!(z.pop(0, true), vec![]);
            assert_eq!(z.pop(10, true), vec![(b"c".to_vec(), 3.0)]);
            assert!(z.is_empty());
            assert_eq!(z.pop(1, false), vec![]);
            z.check_invariants().unwrap();
        });
    }

    #[test]
    fn scan_returns_everything() {
        both(|lim, _| {
            let lim = ZsetLimits {
                max_entries: lim.max_entries.max(1) * 1000,
                ..*lim
            };
            let lim = if lim.max_entries == 0 { LARGE } else { lim };
            let mut z = ZSet::new_for(1, 1, &lim);
            for i in 0..500 {
                z.insert(format!("m{i}").as_bytes(), i as f64, &lim);
            }
            let mut seen = std::collections::HashSet::new();
            let mut cursor = 0;
            let mut calls = 0;
            loop {
                cursor = z.scan(cursor, 10, |m, _| {
                    seen.insert(m.to_vec());
                });
                calls += 1;
                // modify between calls: remove/add elements not part of the check
                z.insert(format!("new{calls}").as_bytes(), -1.0, &lim);
                z.remove(format!("new{}", calls.max(2) - 1).as_bytes());
                if cursor == 0 {
                    break;
                }
                assert!(calls < 10_000);
            }
            for i in 0..500 {
                assert!(seen.contains(format!("m{i}").as_bytes()), "missing m{i}");
            }
        });
    }

    #[test]
    fn scan_survives_compaction() {
        let mut z = ZSet::new_for(1, 1, &LARGE);
        for i in 0..20_000 {
            z.insert(format!("m{i}").as_bytes(), i as f64, &LARGE);
        }
        let mut seen = std::collections::HashSet::new();
        let mut cursor = z.scan(0, 100, |m, _| {
            seen.insert(m.to_vec());
        });
        // delete most members (triggers compaction), keep every 10th
        for i in 0..20_000 {
            if i % 10 != 0 {
                z.remove(format!("m{i}").as_bytes());
            }
        }
        z.check_invariants().unwrap();
        while cursor != 0 {
            cursor = z.scan(cursor, 100, |m, _| {
                seen.insert(m.to_vec());
            });
        }
        for i in (0..20_000).step_by(10) {
            assert!(seen.contains(format!("m{i}").as_bytes()));
        }
        assert!(z.heap_bytes() < 400_000, "compacted: {}", z.heap_bytes());
    }

    #[test]
    fn conversion_small_to_large_and_back() {
        let lim = ZsetLimits {
            max_entries: 4,
            max_value: 8,
        };
        let mut z = ZSet::new_for(1, 1, &lim);
        for (i, m) in ["a", "b", "c", "d"].iter().enumerate() {
            z.insert(m.as_bytes(), i as f64, &lim);
        }
        assert_eq!(z.encoding_name(), "listpack");
        // updating an existing member never converts
        z.insert(b"a", 10.0, &lim);
        assert_eq!(z.encoding_name(), "listpack");
        z.insert(b"e", 4.0, &lim);
        assert_eq!(z.encoding_name(), "skiplist");
        z.check_invariants().unwrap();
        z.remove(b"e");
        assert_eq!(z.encoding_name(), "skiplist");
        z.convert_to_small_if_fits(&lim);
        assert_eq!(z.encoding_name(), "listpack");
        assert_eq!(z.rank(b"a", false), Some((3, 10.0)));
        z.check_invariants().unwrap();
        // long member converts
        z.insert(b"123456789", 1.0, &lim);
        assert_eq!(z.encoding_name(), "skiplist");
        z.convert_to_small_if_fits(&lim);
        assert_eq!(z.encoding_name(), "skiplist");
    }

    #[test]
    fn clone_is_deep() {
        both(|lim, _| {
            let mut z = abc(lim);
            let c = z.clone();
            z.remove(b"a");
            z.insert(b"b", 100.0, lim);
            assert_eq!(c.score(b"a"), Some(1.0));
            assert_eq!(c.score(b"b"), Some(2.0));
            c.check_invariants().unwrap();
            assert!(c.heap_bytes() > 0);
        });
    }

    #[test]
    fn rescore_many_large() {
        let mut z = ZSet::new_for(1, 1, &LARGE);
        for i in 0..3000u32 {
            z.insert(format!("m{i}").as_bytes(), (i % 17) as f64, &LARGE);
        }
        for i in 0..3000u32 {
            let s = z.score(format!("m{i}").as_bytes()).unwrap();
            z.insert(
                format!("m{i}").as_bytes(),
                s + ((i * 7) % 13) as f64 - 6.0,
                &LARGE,
            );
        }
        z.check_invariants().unwrap();
        for r in 0..z.len() {
            let (m, _) = z.get_by_rank(r).unwrap();
            let m = m.to_vec();
            assert_eq!(z.rank(&m, false).unwrap().0, r);
        }
    }

    #[test]
    fn grows_past_the_heap_arenas_into_mappings() {
        // Past 64 KiB of nodes (2,048) and of tower links (4,096) the arenas move from the
        // heap to mappings (`types::arena`); removals, re-inserts and a clone then run on
        // mapped arenas.
        let mut z = ZSet::new_for(1, 1, &LARGE);
        for i in 0..40_000u32 {
            let m = format!("member-{:08}", i.wrapping_mul(2_654_435_761) % 100_000);
            z.insert(m.as_bytes(), (i % 1000) as f64, &LARGE);
        }
        z.check_invariants().unwrap();
        for i in (0..40_000u32).step_by(3) {
            let m = format!("member-{:08}", i.wrapping_mul(2_654_435_761) % 100_000);
            z.remove(m.as_bytes());
        }
        for i in 0..5_000u32 {
            z.insert(format!("x{i}").as_bytes(), i as f64, &LARGE);
        }
        z.check_invariants().unwrap();
        let c = z.clone();
        c.check_invariants().unwrap();
        let mut prev: Option<(Vec<u8>, f64)> = None;
        let mut n = 0;
        z.for_each_in_rank_range(0, z.len() - 1, true, |m, s| {
            if let Some((pm, ps)) = &prev {
                assert!(*ps > s || (*ps == s && pm.as_slice() > m));
            }
            prev = Some((m.to_vec(), s));
            n += 1;
        });
        assert_eq!(n, z.len());
    }
}

#[cfg(test)]
mod small_score_tests {
    use super::*;

    /// Integral scores take a few bytes in the small form, every other score its f64, and
    /// both read back exactly (the extremes of the integer range, fractions, infinities, -0).
    #[test]
    fn scores_read_back_exactly_and_integers_are_short() {
        let scores = [
            0.0,
            1.0,
            -1.0,
            100000.0,
            -100000.0,
            1732700000123.0,
            9_007_199_254_740_991.0,
            -9_007_199_254_740_991.0,
            9_007_199_254_740_992.0,
            1e300,
            0.5,
            -2.25,
            f64::INFINITY,
            f64::NEG_INFINITY,
            -0.0,
            f64::MIN_POSITIVE,
        ];
        for &sc in &scores {
            let mut buf = Vec::new();
            encode(&mut buf, b"member", sc);
            assert_eq!(buf.len(), encoded_len(b"member", sc));
            let (back, m, end) = decode(&buf, 0);
            assert_eq!(m, b"member");
            assert_eq!(end, buf.len());
            assert_eq!(back.to_bits(), sc.to_bits(), "{sc}");
        }
        let mut buf = Vec::new();
        encode(&mut buf, b"u123456", 100000.0);
        assert_eq!(buf.len(), 1 + 3 + 7);
    }

    /// Ten members with integral scores (a friends board) fit jemalloc's 112-byte class.
    #[test]
    fn a_friends_board_is_one_small_array() {
        let limits = ZsetLimits::default();
        let mut z = ZSet::new_for(7, 10, &limits);
        for j in 0..10u32 {
            let m = format!("u{}", 100000 + j);
            z.insert(m.as_bytes(), f64::from(j * 7919 % 100000), &limits);
        }
        assert_eq!(z.encoding_name(), "listpack");
        assert!(z.heap_bytes() <= 112, "{}", z.heap_bytes());
        let scores: Vec<f64> = z.iter().map(|(_, s)| s).collect();
        assert!(scores.windows(2).all(|w| w[0] <= w[1]));
    }

    /// Inserts, updates that move an entry down, up or nowhere (and change its encoded
    /// length: integer and fractional scores), removals and range removals keep the small
    /// form equal to a sorted model, exactly sized.
    #[test]
    fn small_edits_agree_with_a_sorted_model() {
        use rand::{Rng, SeedableRng};
        let limits = ZsetLimits::default();
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let mut z = ZSet::new_for(1, 1, &limits);
        let mut model: Vec<(f64, Vec<u8>)> = Vec::new();
        for step in 0..4000 {
            let m = format!("m{}", rng.gen_range(0..60)).into_bytes();
            let score = match rng.gen_range(0..4) {
                0 => f64::from(rng.gen_range(-50..50)),
                1 => f64::from(rng.gen_range(-50..50)) + 0.5,
                2 => f64::from(rng.gen_range(0..3_000_000)),
                _ => f64::from(rng.gen_range(0..4)),
            };
            match rng.gen_range(0..10) {
                0..=6 => {
                    let had = model.iter().position(|(_, x)| *x == m);
                    let r = z.insert(&m, score, &limits);
                    match had {
                        Some(i) if model[i].0 == score => {
                            assert!(matches!(r, InsertResult::Unchanged))
                        }
                        Some(i) => {
                            assert!(
                                matches!(r, InsertResult::Updated { old } if old == model[i].0)
                            );
                            model[i].0 = score;
                        }
                        None => {
                            assert!(matches!(r, InsertResult::Added));
                            model.push((score, m));
                        }
                    }
                }
                7 | 8 => {
                    let had = model.iter().position(|(_, x)| *x == m);
                    assert_eq!(z.remove(&m), had.map(|i| model.remove(i).0));
                }
                _ => {
                    let a = rng.gen_range(0..=model.len());
                    let b = a + rng.gen_range(0..3);
                    model.sort_by(|x, y| x.0.total_cmp(&y.0).then_with(|| x.1.cmp(&y.1)));
                    let want = model.len().min(b + 1).saturating_sub(a);
                    assert_eq!(z.remove_rank_range(a, b), want);
                    if want > 0 {
                        model.drain(a..a + want);
                    }
                }
            }
            model.sort_by(|x, y| x.0.total_cmp(&y.0).then_with(|| x.1.cmp(&y.1)));
            assert_eq!(z.encoding_name(), "listpack");
            z.check_invariants().unwrap();
            let got: Vec<(f64, Vec<u8>)> = z.iter().map(|(m, s)| (s, m.to_vec())).collect();
            assert_eq!(got, model, "step {step}");
            let Enc::Small(s) = &z.enc else {
                unreachable!("listpack")
            };
            let body: usize = model.iter().map(|(sc, m)| encoded_len(m, *sc)).sum();
            assert_eq!(s.bytes.body().len(), body);
            assert_eq!(
                z.heap_bytes(),
                Counted::heap_bytes_for(model.len(), body),
                "exactly sized"
            );
        }
    }
}
