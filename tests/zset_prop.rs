//! Property tests: random operation sequences against a simple sorted-Vec model,
//! for both encodings and across the listpack -> skiplist conversion.

use podium::types::zset::{
    InsertResult, LexBound, LexRange, ScoreBound, ScoreRange, ZSet, ZsetLimits,
};
use proptest::prelude::*;

type Model = Vec<(Vec<u8>, f64)>; // sorted by (score, member)

fn key_lt(a: &(Vec<u8>, f64), b: &(Vec<u8>, f64)) -> bool {
    a.1 < b.1 || (a.1 == b.1 && a.0 < b.0)
}

fn model_insert(m: &mut Model, member: &[u8], score: f64) -> InsertResult {
    let res = if let Some(i) = m.iter().position(|e| e.0 == member) {
        let old = m[i].1;
        if old == score {
            return InsertResult::Unchanged;
        }
        m.remove(i);
        InsertResult::Updated { old }
    } else {
        InsertResult::Added
    };
    let e = (member.to_vec(), score);
    let pos = m.iter().position(|x| !key_lt(x, &e)).unwrap_or(m.len());
    m.insert(pos, e);
    res
}

fn score_in(r: &ScoreRange, s: f64) -> bool {
    let lo = match r.min {
        ScoreBound::Inclusive(v) => s >= v,
        ScoreBound::Exclusive(v) => s > v,
    };
    let hi = match r.max {
        ScoreBound::Inclusive(v) => s <= v,
        ScoreBound::Exclusive(v) => s < v,
    };
    lo && hi
}

fn lex_in(r: &LexRange, m: &[u8]) -> bool {
    let lo = match &r.min {
        LexBound::NegInf => true,
        LexBound::PosInf => false,
        LexBound::Inclusive(v) => m >= &v[..],
        LexBound::Exclusive(v) => m > &v[..],
    };
    let hi = match &r.max {
        LexBound::NegInf => false,
        LexBound::PosInf => true,
        LexBound::Inclusive(v) => m <= &v[..],
        LexBound::Exclusive(v) => m < &v[..],
    };
    lo && hi
}

#[derive(Debug, Clone)]
enum Op {
    Insert(Vec<u8>, f64),
    Remove(Vec<u8>),
    RemoveRank(usize, usize),
    RemoveScore(ScoreRange),
    RemoveLex(LexRange),
    Pop(usize, bool),
    ConvertSmall,
}

#[derive(Debug, Clone)]
struct Query {
    start: usize,
    end: usize,
    rev: bool,
    score: ScoreRange,
    lex: LexRange,
    offset: usize,
    limit: Option<usize>,
    probe: Vec<u8>,
}

fn member() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::collection::vec(prop::sample::select(vec![b'a', b'b', b'c']), 0..4),
        1 => prop::collection::vec(prop::sample::select(vec![b'a', b'b']), 14..18),
    ]
}

fn score() -> impl Strategy<Value = f64> {
    prop_oneof![
        6 => (-4i32..5).prop_map(f64::from),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
        1 => Just(-0.0),
        1 => Just(0.5),
        // Distinct scores that share the skip list's 32-bit score hint (only the low bits of
        // the mantissa differ), so descents must fall back to exact comparisons.
        2 => (0u64..4, any::<bool>()).prop_map(|(k, neg)| {
            let v = f64::from_bits(2.0f64.to_bits() + k);
            if neg { -v } else { v }
        }),
    ]
}

fn zero_score() -> impl Strategy<Value = f64> {
    prop_oneof![Just(0.0), Just(-0.0)]
}

fn score_bound() -> impl Strategy<Value = ScoreBound> {
    (score(), any::<bool>()).prop_map(|(s, ex)| {
        if ex {
            ScoreBound::Exclusive(s)
        } else {
            ScoreBound::Inclusive(s)
        }
    })
}

fn score_range() -> impl Strategy<Value = ScoreRange> {
    (score_bound(), score_bound()).prop_map(|(min, max)| ScoreRange { min, max })
}

fn lex_bound() -> impl Strategy<Value = LexBound> {
    prop_oneof![
        1 => Just(LexBound::NegInf),
        1 => Just(LexBound::PosInf),
        3 => member().prop_map(LexBound::Inclusive),
        3 => member().prop_map(LexBound::Exclusive),
    ]
}

fn lex_range() -> impl Strategy<Value = LexRange> {
    (lex_bound(), lex_bound()).prop_map(|(min, max)| LexRange { min, max })
}

fn op(sc: BoxedStrategy<f64>) -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (member(), sc).prop_map(|(m, s)| Op::Insert(m, s)),
        3 => member().prop_map(Op::Remove),
        1 => (0usize..30, 0usize..30).prop_map(|(a, b)| Op::RemoveRank(a, b)),
        1 => score_range().prop_map(Op::RemoveScore),
        1 => lex_range().prop_map(Op::RemoveLex),
        1 => (0usize..5, any::<bool>()).prop_map(|(c, m)| Op::Pop(c, m)),
        1 => Just(Op::ConvertSmall),
    ]
}

fn query() -> impl Strategy<Value = Query> {
    (
        (0usize..40, 0usize..40, any::<bool>()),
        score_range(),
        lex_range(),
        0usize..6,
        prop::option::of(0usize..8),
        member(),
    )
        .prop_map(
            |((start, end, rev), score, lex, offset, limit, probe)| Query {
                start,
                end,
                rev,
                score,
                lex,
                offset,
                limit,
                probe,
            },
        )
}

fn limits() -> impl Strategy<Value = ZsetLimits> {
    prop::sample::select(vec![
        ZsetLimits {
            max_entries: 0,
            max_value: 64,
        },
        ZsetLimits {
            max_entries: 128,
            max_value: 64,
        },
        ZsetLimits {
            max_entries: 6,
            max_value: 15,
        },
    ])
}

fn visit(f: impl FnOnce(&mut dyn FnMut(&[u8], f64))) -> Model {
    let mut v = Vec::new();
    f(&mut |m: &[u8], s| v.push((m.to_vec(), s)));
    v
}

fn same(a: &Model, b: &Model) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.0 == y.0 && x.1.to_bits() == y.1.to_bits())
}

fn window(v: Vec<(Vec<u8>, f64)>, rev: bool, offset: usize, limit: Option<usize>) -> Model {
    let it: Box<dyn Iterator<Item = (Vec<u8>, f64)>> = if rev {
        Box::new(v.into_iter().rev())
    } else {
        Box::new(v.into_iter())
    };
    it.skip(offset).take(limit.unwrap_or(usize::MAX)).collect()
}

fn check(z: &ZSet, m: &Model, q: &Query) -> Result<(), TestCaseError> {
    z.check_invariants().map_err(TestCaseError::fail)?;
    prop_assert_eq!(z.len(), m.len());
    prop_assert_eq!(z.is_empty(), m.is_empty());
    let all: Model = z.iter().map(|(a, b)| (a.to_vec(), b)).collect();
    prop_assert!(same(&all, m), "iter {:?} != model {:?}", all, m);
    let n = m.len();
    for (r, (mem, s)) in m.iter().enumerate() {
        prop_assert_eq!(z.score(mem), Some(*s));
        prop_assert_eq!(z.rank(mem, false), Some((r, *s)));
        prop_assert_eq!(z.rank(mem, true), Some((n - 1 - r, *s)));
        let (gm, gs) = z.get_by_rank(r).unwrap();
        prop_assert_eq!(gm, &mem[..]);
        prop_assert_eq!(gs, *s);
    }
    prop_assert!(z.get_by_rank(n).is_none());
    let present = m.iter().any(|e| e.0 == q.probe);
    prop_assert_eq!(z.score(&q.probe).is_some(), present);
    // rank range
    if n > 0 {
        let start = q.start.min(n - 1);
        let end = q.end.min(n - 1);
        let got = visit(|f| z.for_each_in_rank_range(start, end, q.rev, f));
        let want: Model = if start > end {
            vec![]
        } else if q.rev {
            m.iter()
                .rev()
                .skip(start)
                .take(end - start + 1)
                .cloned()
                .collect()
        } else {
            m[start..=end].to_vec()
        };
        prop_assert!(
            same(&got, &want),
            "rank range {}..={} rev={}: {:?} vs {:?}",
            start,
            end,
            q.rev,
            got,
            want
        );
        let top = visit(|f| z.for_each_in_rank_range(0, n - 1, true, f));
        let want: Model = m.iter().rev().cloned().collect();
        prop_assert!(same(&top, &want));
    }
    // score range
    let filt: Model = m
        .iter()
        .filter(|e| score_in(&q.score, e.1))
        .cloned()
        .collect();
    prop_assert_eq!(z.count_in_score_range(&q.score), filt.len());
    for rev in [false, true] {
        let got = visit(|f| z.for_each_in_score_range(&q.score, rev, q.offset, q.limit, f));
        let want = window(filt.clone(), rev, q.offset, q.limit);
        prop_assert!(
            same(&got, &want),
            "score {:?} rev={} off={} lim={:?}: {:?} vs {:?}",
            q.score,
            rev,
            q.offset,
            q.limit,
            got,
            want
        );
    }
    // lex range: only defined when all scores are equal
    let filt: Model = m.iter().filter(|e| lex_in(&q.lex, &e.0)).cloned().collect();
    let uniform = m.windows(2).all(|w| w[0].1 == w[1].1);
    let cnt = z.count_in_lex_range(&q.lex);
    for rev in [false, true] {
        let got = visit(|f| z.for_each_in_lex_range(&q.lex, rev, q.offset, q.limit, f));
        if uniform {
            let want = window(filt.clone(), rev, q.offset, q.limit);
            prop_assert!(
                same(&got, &want),
                "lex {:?} rev={}: {:?} vs {:?}",
                q.lex,
                rev,
                got,
                want
            );
        }
    }
    if uniform {
        prop_assert_eq!(cnt, filt.len());
    }
    Ok(())
}

fn apply(z: &mut ZSet, m: &mut Model, op: &Op, lim: &ZsetLimits) -> Result<(), TestCaseError> {
    match op {
        Op::Insert(mem, s) => {
            let a = z.insert(mem, *s, lim);
            let b = model_insert(m, mem, *s);
            prop_assert_eq!(a, b);
            if mem.len() > lim.max_value || m.len() > lim.max_entries {
                prop_assert_eq!(z.encoding_name(), "skiplist");
            }
        }
        Op::Remove(mem) => {
            let want = m.iter().position(|e| &e.0 == mem).map(|i| m.remove(i).1);
            prop_assert_eq!(z.remove(mem), want);
        }
        Op::RemoveRank(a, b) => {
            let n = m.len();
            let want = if n == 0 || a > b || *a >= n {
                0
            } else {
                let e = (*b).min(n - 1);
                m.drain(*a..=e).count()
            };
            prop_assert_eq!(z.remove_rank_range(*a, *b), want);
        }
        Op::RemoveScore(r) => {
            let before = m.len();
            m.retain(|e| !score_in(r, e.1));
            prop_assert_eq!(z.remove_score_range(r), before - m.len());
        }
        Op::RemoveLex(r) => {
            let uniform = m.windows(2).all(|w| w[0].1 == w[1].1);
            if uniform {
                let before = m.len();
                m.retain(|e| !lex_in(r, &e.0));
                prop_assert_eq!(z.remove_lex_range(r), before - m.len());
            }
        }
        Op::Pop(c, max) => {
            let n = (*c).min(m.len());
            let want: Model = if *max {
                let v: Model = m.drain(m.len() - n..).rev().collect();
                v
            } else {
                m.drain(..n).collect()
            };
            let got = z.pop(*c, *max);
            prop_assert!(same(&got, &want), "pop {:?} vs {:?}", got, want);
        }
        Op::ConvertSmall => {
            z.convert_to_small_if_fits(lim);
            let fits = m.len() <= lim.max_entries && m.iter().all(|e| e.0.len() <= lim.max_value);
            prop_assert_eq!(
                z.encoding_name() == "listpack",
                fits || z.encoding_name() == "listpack"
            );
            if fits {
                prop_assert_eq!(z.encoding_name(), "listpack");
            }
        }
    }
    Ok(())
}

fn run(lim: ZsetLimits, ops: Vec<(Op, Query)>) -> Result<(), TestCaseError> {
    let mut z = ZSet::new_for(1, 1, &lim);
    let mut m: Model = Vec::new();
    for (op, q) in &ops {
        apply(&mut z, &mut m, op, &lim)?;
        check(&z, &m, q)?;
    }
    let c = z.clone();
    check(&c, &m, &ops[0].1)?;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn ops_mixed_scores(lim in limits(), ops in prop::collection::vec((op(score().boxed()), query()), 1..60)) {
        run(lim, ops)?;
    }

    #[test]
    fn ops_equal_scores_lex(lim in limits(), ops in prop::collection::vec((op(zero_score().boxed()), query()), 1..60)) {
        run(lim, ops)?;
    }
}

/// Larger deterministic-seed run on the skiplist only (deeper towers).
#[test]
fn big_random_skiplist_against_model() {
    use rand::{rngs::SmallRng, Rng, SeedableRng};
    let lim = ZsetLimits {
        max_entries: 0,
        max_value: 64,
    };
    let mut rng = SmallRng::seed_from_u64(7);
    let mut z = ZSet::new_for(1, 1, &lim);
    let mut m: Model = Vec::new();
    for step in 0..6000 {
        let mem = format!("k{}", rng.gen_range(0..800)).into_bytes();
        match rng.gen_range(0..10) {
            0..=6 => {
                let s = f64::from(rng.gen_range(-50..50));
                assert_eq!(z.insert(&mem, s, &lim), model_insert(&mut m, &mem, s));
            }
            7 | 8 => {
                let want = m.iter().position(|e| e.0 == mem).map(|i| m.remove(i).1);
                assert_eq!(z.remove(&mem), want);
            }
            _ => {
                if !m.is_empty() {
                    let a = rng.gen_range(0..m.len());
                    let b = (a + rng.gen_range(0..5)).min(m.len() - 1);
                    m.drain(a..=b);
                    z.remove_rank_range(a, b);
                }
            }
        }
        if step % 500 == 0 {
            z.check_invariants().unwrap();
            let all: Model = z.iter().map(|(a, b)| (a.to_vec(), b)).collect();
            assert!(same(&all, &m));
            for (r, e) in m.iter().enumerate() {
                assert_eq!(z.rank(&e.0, false), Some((r, e.1)));
            }
        }
    }
}
