//! Criterion benches for the request/reply hot paths: parsing pipelined requests and encoding
//! replies (a top-100 WITHSCORES range in RESP2 and RESP3, bulk strings, integers).

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use podium::protocol::{parse_request, ParseLimits, Parsed, Reply, Resp};
use std::hint::black_box;

fn parse(c: &mut Criterion) {
    let mut one = Vec::new();
    for i in 0..16 {
        one.extend_from_slice(
            format!(
                "*4\r\n$7\r\nZINCRBY\r\n$2\r\nlb\r\n$1\r\n7\r\n$14\r\nm:{:012}\r\n",
                i
            )
            .as_bytes(),
        );
    }
    let limits = ParseLimits::default();
    let mut g = c.benchmark_group("parse");
    g.throughput(Throughput::Elements(16));
    g.bench_function("pipeline_16_zincrby", |b| {
        b.iter(|| {
            let mut buf = BytesMut::from(&one[..]);
            let mut n = 0;
            while let Ok(Parsed::Command(args)) = parse_request(&mut buf, &limits) {
                n += args.len();
            }
            black_box(n)
        })
    });
    let inline = b"SET key value\r\n".repeat(16);
    g.bench_function("inline_16_set", |b| {
        b.iter(|| {
            let mut buf = BytesMut::from(&inline[..]);
            let mut n = 0;
            while let Ok(Parsed::Command(args)) = parse_request(&mut buf, &limits) {
                n += args.len();
            }
            black_box(n)
        })
    });
    g.finish();
}

fn encode(c: &mut Criterion) {
    let top: Vec<(Bytes, f64)> = (0..100)
        .map(|i| {
            (
                Bytes::from(format!("m:{:012}", i)),
                1_000_000.0 - i as f64 * 1.5,
            )
        })
        .collect();
    let reply = Reply::ScoredMembers(top.iter().map(|(m, s)| (&m[..], *s)).collect());
    let mut g = c.benchmark_group("encode");
    let mut out = Vec::with_capacity(1 << 16);
    g.bench_function("top100_withscores_resp2", |b| {
        b.iter(|| {
            out.clear();
            reply.encode(Resp::V2, &mut out);
            black_box(out.len())
        })
    });
    g.bench_function("top100_withscores_resp3", |b| {
        b.iter(|| {
            out.clear();
            reply.encode(Resp::V3, &mut out);
            black_box(out.len())
        })
    });
    let bulk = Reply::Bulk(Bytes::from_static(b"a value of moderate length"));
    g.bench_function("bulk", |b| {
        b.iter(|| {
            out.clear();
            bulk.encode(Resp::V2, &mut out);
            black_box(out.len())
        })
    });
    g.bench_function("int", |b| {
        b.iter(|| {
            out.clear();
            Reply::Int(black_box(1234567)).encode(Resp::V2, &mut out);
            black_box(out.len())
        })
    });
    g.finish();
}

criterion_group!(benches, parse, encode);
criterion_main!(benches);
