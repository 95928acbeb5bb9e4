//! Sorted sets (interim model implementation; the compact skip list replaces it).

use std::collections::{BTreeSet, HashMap};

#[derive(Clone, Copy, Debug)]
pub struct ZsetLimits {
    pub max_entries: usize,
    pub max_value: usize,
}
impl Default for ZsetLimits {
    fn default() -> Self {
        ZsetLimits { max_entries: 128, max_value: 64 }
    }
}
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScoreBound {
    Inclusive(f64),
    Exclusive(f64),
}
#[derive(Clone, Copy, Debug)]
pub struct ScoreRange {
    pub min: ScoreBound,
    pub max: ScoreBound,
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
#[derive(Debug, PartialEq)]
pub enum InsertResult {
    Added,
    Updated { old: f64 },
    Unchanged,
}

impl ScoreRange {
    fn gte_min(&self, v: f64) -> bool {
        match self.min {
            ScoreBound::Inclusive(m) => v >= m,
            ScoreBound::Exclusive(m) => v > m,
        }
    }
    fn lte_max(&self, v: f64) -> bool {
        match self.max {
            ScoreBound::Inclusive(m) => v <= m,
            ScoreBound::Exclusive(m) => v < m,
        }
    }
    fn contains(&self, v: f64) -> bool {
        self.gte_min(v) && self.lte_max(v)
    }
}
impl LexRange {
    fn gte_min(&self, m: &[u8]) -> bool {
        match &self.min {
            LexBound::NegInf => true,
            LexBound::PosInf => false,
            LexBound::Inclusive(b) => m >= &b[..],
            LexBound::Exclusive(b) => m > &b[..],
        }
    }
    fn lte_max(&self, m: &[u8]) -> bool {
        match &self.max {
            LexBound::NegInf => false,
            LexBound::PosInf => true,
            LexBound::Inclusive(b) => m <= &b[..],
            LexBound::Exclusive(b) => m < &b[..],
        }
    }
    fn contains(&self, m: &[u8]) -> bool {
        self.gte_min(m) && self.lte_max(m)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Score(f64);
impl Eq for Score {}
impl PartialOrd for Score {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Score {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.partial_cmp(&o.0).unwrap_or(std::cmp::Ordering::Equal)
    }
}

#[derive(Clone, Default)]
pub struct ZSet {
    order: BTreeSet<(Score, Vec<u8>)>,
    scores: HashMap<Vec<u8>, f64>,
    large: bool,
}

impl ZSet {
    pub fn new_for(first_member_len: usize, expected_len: usize, limits: &ZsetLimits) -> ZSet {
        let large = limits.max_entries == 0 || first_member_len > limits.max_value || expected_len > limits.max_entries;
        ZSet { large, ..ZSet::default() }
    }
    pub fn len(&self) -> usize {
        self.order.len()
    }
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
    pub fn encoding_name(&self) -> &'static str {
        if self.large {
            "skiplist"
        } else {
            "listpack"
        }
    }
    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.scores.get(member).copied()
    }
    pub fn insert(&mut self, member: &[u8], score: f64, limits: &ZsetLimits) -> InsertResult {
        if let Some(&old) = self.scores.get(member) {
            if old == score {
                return InsertResult::Unchanged;
            }
            self.order.remove(&(Score(old), member.to_vec()));
            self.order.insert((Score(score), member.to_vec()));
            self.scores.insert(member.to_vec(), score);
            return InsertResult::Updated { old };
        }
        if member.len() > limits.max_value || self.len() + 1 > limits.max_entries {
            self.large = true;
        }
        self.order.insert((Score(score), member.to_vec()));
        self.scores.insert(member.to_vec(), score);
        InsertResult::Added
    }
    pub fn remove(&mut self, member: &[u8]) -> Option<f64> {
        let s = self.scores.remove(member)?;
        self.order.remove(&(Score(s), member.to_vec()));
        Some(s)
    }
    pub fn rank(&self, member: &[u8], reverse: bool) -> Option<(usize, f64)> {
        let s = self.score(member)?;
        let r = self.order.range(..(Score(s), member.to_vec())).count();
        Some((if reverse { self.len() - 1 - r } else { r }, s))
    }
    pub fn get_by_rank(&self, rank: usize) -> Option<(&[u8], f64)> {
        self.order.iter().nth(rank).map(|(s, m)| (&m[..], s.0))
    }
    pub fn for_each_in_rank_range(&self, start: usize, end: usize, reverse: bool, mut f: impl FnMut(&[u8], f64)) {
        if reverse {
            for (s, m) in self.order.iter().rev().skip(start).take(end + 1 - start) {
                f(m, s.0);
            }
        } else {
            for (s, m) in self.order.iter().skip(start).take(end + 1 - start) {
                f(m, s.0);
            }
        }
    }
    fn visit<'s>(
        it: Box<dyn Iterator<Item = &'s (Score, Vec<u8>)> + 's>,
        pred: impl Fn(&[u8], f64) -> bool,
        offset: usize,
        limit: Option<usize>,
        mut f: impl FnMut(&[u8], f64),
    ) {
        let mut skipped = 0;
        let mut taken = 0;
        for (s, m) in it {
            if !pred(m, s.0) {
                continue;
            }
            if skipped < offset {
                skipped += 1;
                continue;
            }
            if limit.is_some_and(|l| taken >= l) {
                break;
            }
            f(m, s.0);
            taken += 1;
        }
    }
    pub fn for_each_in_score_range(&self, range: &ScoreRange, reverse: bool, offset: usize, limit: Option<usize>, f: impl FnMut(&[u8], f64)) {
        let it: Box<dyn Iterator<Item = _>> = if reverse { Box::new(self.order.iter().rev()) } else { Box::new(self.order.iter()) };
        Self::visit(it, |_, s| range.contains(s), offset, limit, f);
    }
    pub fn for_each_in_lex_range(&self, range: &LexRange, reverse: bool, offset: usize, limit: Option<usize>, f: impl FnMut(&[u8], f64)) {
        let it: Box<dyn Iterator<Item = _>> = if reverse { Box::new(self.order.iter().rev()) } else { Box::new(self.order.iter()) };
        Self::visit(it, |m, _| range.contains(m), offset, limit, f);
    }
    pub fn count_in_score_range(&self, range: &ScoreRange) -> usize {
        self.order.iter().filter(|(s, _)| range.contains(s.0)).count()
    }
    pub fn count_in_lex_range(&self, range: &LexRange) -> usize {
        self.order.iter().filter(|(_, m)| range.contains(m)).count()
    }
    fn remove_where(&mut self, mut pred: impl FnMut(usize, &[u8], f64) -> bool) -> usize {
        let doomed: Vec<Vec<u8>> =
            self.order.iter().enumerate().filter(|(i, (s, m))| pred(*i, m, s.0)).map(|(_, (_, m))| m.clone()).collect();
        for m in &doomed {
            self.remove(m);
        }
        doomed.len()
    }
    pub fn remove_rank_range(&mut self, start: usize, end: usize) -> usize {
        self.remove_where(|i, _, _| i >= start && i <= end)
    }
    pub fn remove_score_range(&mut self, range: &ScoreRange) -> usize {
        self.remove_where(|_, _, s| range.contains(s))
    }
    pub fn remove_lex_range(&mut self, range: &LexRange) -> usize {
        let r = range.clone();
        self.remove_where(|_, m, _| r.contains(m))
    }
    pub fn pop(&mut self, count: usize, max: bool) -> Vec<(Vec<u8>, f64)> {
        let mut out = Vec::new();
        for _ in 0..count {
            let e = if max { self.order.iter().next_back().cloned() } else { self.order.iter().next().cloned() };
            let Some((s, m)) = e else { break };
            self.remove(&m);
            out.push((m, s.0));
        }
        out
    }
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], f64)> + '_ {
        self.order.iter().map(|(s, m)| (&m[..], s.0))
    }
    pub fn scan(&self, _cursor: u64, _count: usize, mut f: impl FnMut(&[u8], f64)) -> u64 {
        for (m, s) in self.iter() {
            f(m, s);
        }
        0
    }
    pub fn convert_to_small_if_fits(&mut self, limits: &ZsetLimits) {
        if self.len() <= limits.max_entries && self.order.iter().all(|(_, m)| m.len() <= limits.max_value) {
            self.large = false;
        }
    }
    pub fn heap_bytes(&self) -> usize {
        self.order.iter().map(|(_, m)| m.len() * 2 + 64).sum()
    }
}
