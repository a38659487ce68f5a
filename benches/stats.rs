//! Per-sample costs on the measuring hot path: recording into the histogram (every
//! transaction does it once) and summarising (once per result).

#![allow(
    missing_docs,
    reason = "criterion_group! generates the bench's public entry point, undocumented"
)]

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use rttlab::stats::{LatencyHistogram, Summary, DEFAULT_PERCENTILES};

fn samples() -> Vec<u64> {
    // Round trips from 5 µs to ~50 ms, log-spread, like a loopback-to-WAN mix.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            5_000u64 << (x % 14)
        })
        .collect()
}

fn record(c: &mut Criterion) {
    let s = samples();
    let mut g = c.benchmark_group("histogram");
    g.throughput(Throughput::Elements(s.len() as u64));
    g.bench_function("record_4096", |b| {
        let mut h = LatencyHistogram::new();
        b.iter(|| {
            for &v in &s {
                h.record_ns(black_box(v));
            }
        });
    });
    g.finish();
    let mut h = LatencyHistogram::new();
    for &v in &s {
        h.record_ns(v);
    }
    c.bench_function("summary_default_percentiles", |b| {
        b.iter(|| Summary::from_histogram(black_box(&h), &DEFAULT_PERCENTILES))
    });
}

criterion_group!(benches, record);
criterion_main!(benches);
