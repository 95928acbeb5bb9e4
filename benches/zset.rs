//! Criterion benches for the 1M-member skiplist encoding, plus a bytes/member report
//! (allocated bytes counted by a GlobalAlloc wrapper around System, and RSS delta).

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use podium::types::zset::{ScoreBound, ScoreRange, ZSet, ZsetLimits};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

struct Counting;
static ALLOCATED: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards every call to System unchanged; only keeps a byte counter.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        ALLOCATED.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCATED.fetch_add(n as isize - l.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const N: usize = 1_000_000;
const LARGE: ZsetLimits = ZsetLimits {
    max_entries: 0,
    max_value: 64,
};

fn members(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| format!("m:{i:012}").into_bytes()).collect()
}

fn input(n: usize, seed: u64) -> Vec<(Vec<u8>, f64)> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut v: Vec<(Vec<u8>, f64)> = members(n)
        .into_iter()
        .map(|m| (m, rng.gen_range(0.0..1e9f64).floor()))
        .collect();
    v.shuffle(&mut rng);
    v
}

fn build(inp: &[(Vec<u8>, f64)]) -> ZSet {
    let mut z = ZSet::new_for(inp[0].0.len(), 1, &LARGE);
    for (m, s) in inp {
        z.insert(m, *s, &LARGE);
    }
    z
}

fn rss_bytes() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|x| x.parse::<usize>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

fn report_memory() {
    for &n in &[100_000usize, 1_000_000] {
        let inp = input(n, 1);
        let a0 = ALLOCATED.load(Ordering::Relaxed);
        let r0 = rss_bytes();
        let z = build(&inp);
        let a1 = ALLOCATED.load(Ordering::Relaxed);
        let r1 = rss_bytes();
        println!(
            "memory n={n}: allocated {:.1} B/member, RSS delta {:.1} B/member, heap_bytes() {:.1} B/member",
            (a1 - a0) as f64 / n as f64,
            (r1 as f64 - r0 as f64) / n as f64,
            z.heap_bytes() as f64 / n as f64
        );
        drop(z);
    }
}

fn benches(c: &mut Criterion) {
    report_memory();
    let inp = input(N, 2);
    let mut g = c.benchmark_group("zset_1M");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(15));
    g.bench_function("insert_1M_random", |b| {
        b.iter_batched(|| (), |_| build(&inp), BatchSize::PerIteration)
    });
    g.finish();

    let mut z = build(&inp);
    let mut g = c.benchmark_group("zset_1M_ops");
    g.measurement_time(Duration::from_secs(4));
    let mut rng = SmallRng::seed_from_u64(3);
    let order: Vec<usize> = (0..N).map(|_| rng.gen_range(0..N)).collect();
    let mut i = 0usize;
    g.bench_function("rescore_zincrby", |b| {
        b.iter(|| {
            i = (i + 1) % N;
            let (m, _) = &inp[order[i]];
            let s = z.score(m).unwrap_or(0.0);
            let delta = ((i * 7919) % 2_000_001) as f64 - 1_000_000.0;
            black_box(z.insert(m, s + delta, &LARGE));
        })
    });
    g.bench_function("score_lookup", |b| {
        b.iter(|| {
            i = (i + 1) % N;
            black_box(z.score(&inp[order[i]].0));
        })
    });
    g.bench_function("rank", |b| {
        b.iter(|| {
            i = (i + 1) % N;
            black_box(z.rank(&inp[order[i]].0, false));
        })
    });
    g.bench_function("top100_reverse_range", |b| {
        b.iter(|| {
            let mut acc = 0.0;
            z.for_each_in_rank_range(0, 99, true, |m, s| {
                acc += s + m.len() as f64;
            });
            black_box(acc)
        })
    });
    g.bench_function("range_11_around_rank_500000", |b| {
        b.iter(|| {
            let mut acc = 0.0;
            z.for_each_in_rank_range(499_995, 500_005, false, |m, s| {
                acc += s + m.len() as f64;
            });
            black_box(acc)
        })
    });
    let r = ScoreRange {
        min: ScoreBound::Inclusive(5e8),
        max: ScoreBound::Inclusive(f64::INFINITY),
    };
    g.bench_function("zrangebyscore_limit_10", |b| {
        b.iter(|| {
            let mut acc = 0.0;
            z.for_each_in_score_range(&r, false, 0, Some(10), |_, s| acc += s);
            black_box(acc)
        })
    });
    g.bench_function("zcount_score", |b| {
        b.iter(|| black_box(z.count_in_score_range(&r)))
    });
    g.finish();
}

criterion_group!(zset, benches);
criterion_main!(zset);
