//! Criterion benches for one keyspace shard holding 1M string keys (the shape of a cache or a
//! counter store): a lookup of a random present key, of an absent key, and an overwrite. A
//! lookup misses the cache on the index and the record at this size, so these figures move
//! with the table layout (`src/keyspace/mod.rs`), which is what they are for.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use podium::keyspace::Shard;
use podium::types::compact::CompactBytes;
use podium::types::Value;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const KEYS: usize = 1_000_000;

fn key(i: usize) -> Vec<u8> {
    format!("key:{i:08}").into_bytes()
}

fn benches(c: &mut Criterion) {
    let mut shard = Shard::default();
    for i in 0..KEYS {
        shard.insert(&key(i), Value::Str(CompactBytes::new(b"v000000001")), false);
    }
    let keys: Vec<Vec<u8>> = (0..KEYS).map(key).collect();
    let mut rng = SmallRng::seed_from_u64(7);
    let mut g = c.benchmark_group("keyspace_1M");
    g.bench_function("get_random_present", |b| {
        b.iter(|| {
            let k = &keys[rng.gen_range(0..KEYS)];
            black_box(shard.raw_get(k).is_some())
        })
    });
    g.bench_function("get_absent", |b| {
        b.iter(|| {
            let k = key(KEYS + rng.gen_range(0..KEYS));
            black_box(shard.raw_get(&k).is_some())
        })
    });
    g.bench_function("overwrite_random", |b| {
        b.iter(|| {
            let k = &keys[rng.gen_range(0..KEYS)];
            shard.insert(k, Value::Str(CompactBytes::new(b"v000000002")), false);
        })
    });
    g.finish();
}

criterion_group!(keyspace, benches);
criterion_main!(keyspace);
