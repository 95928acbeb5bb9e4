//! Cache-miss probe for the skip list, meant to run under cachegrind (which counts simulated
//! misses deterministically, unlike wall-clock timings on a shared machine):
//!
//! ```text
//! cargo bench --bench zset_probe --no-run
//! for mode in none rank rescore; do
//!   valgrind --tool=cachegrind --cache-sim=yes --LL=2097152,16,64 \
//!     target/release/deps/zset_probe-<hash> $mode
//! done
//! ```
//!
//! Every mode builds the same 1M-member set (random scores, fixed seed); `rank` then runs
//! 100,000 ZREVRANK lookups and `rescore` 100,000 ZADD score changes of random members.
//! (misses(mode) - misses(none)) / 100,000 is the cost per operation.

use podium::types::zset::{ZSet, ZsetLimits};

fn main() {
    let lim = ZsetLimits {
        max_entries: 0,
        max_value: 64,
    };
    let n = 1_000_000usize;
    let mut x: u64 = 88_172_645_463_325_252;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut z = ZSet::new_for(14, 1, &lim);
    for i in 0..n {
        let s = (rnd() % 1_000_000_000) as f64;
        z.insert(format!("m:{i:012}").as_bytes(), s, &lim);
    }
    let mode = std::env::args().nth(1).unwrap_or_default();
    let k = 100_000;
    let t = std::time::Instant::now();
    let mut acc = 0usize;
    for _ in 0..k {
        let i = rnd() as usize % n;
        let m = format!("m:{i:012}");
        match mode.as_str() {
            "rank" => acc += z.rank(m.as_bytes(), true).map_or(0, |r| r.0),
            "rescore" => {
                let s = (rnd() % 1_000_000_000) as f64;
                z.insert(m.as_bytes(), s, &lim);
            }
            _ => {}
        }
    }
    eprintln!("{mode}: {:?} per op ({acc})", t.elapsed() / k as u32);
}
