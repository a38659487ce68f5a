//! The agent's exposition: one scrape of 1 000 peers at the default probes (five
//! histograms per peer: icmp, tcp_rr, udp_rr, srtt_client, srtt_server) and buckets,
//! in both formats. The target is a scrape under 100 ms.

#![allow(
    missing_docs,
    reason = "criterion_group! generates the bench's public entry point, undocumented"
)]

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rttlab::agent::metrics::{labels, Buckets, Format, Metrics};

fn fleet() -> Metrics {
    let m = Metrics::new(&"10us:10s:3".parse::<Buckets>().unwrap());
    for i in 0..1000 {
        let peer = format!("127.0.{}.{}:12866", 1 + i / 254, 1 + i % 254);
        for layer in ["icmp", "tcp_rr", "udp_rr", "srtt_client", "srtt_server"] {
            let l = labels(&peer, layer, &[("zone".into(), "z1".into())]);
            m.rtt.get_or_create(&l).observe(50e-6 * (1 + i % 7) as f64);
            m.sent.get_or_create(&l).inc_by(1000);
            m.errors.get_or_create(&l).inc();
        }
    }
    m
}

fn expose(c: &mut Criterion) {
    let m = fleet();
    let size = m.expose(Format::Text).len() as u64;
    let mut g = c.benchmark_group("exposition_1000_peers");
    g.throughput(Throughput::Bytes(size));
    g.sample_size(20);
    g.bench_function("openmetrics", |b| b.iter(|| m.expose(Format::OpenMetrics)));
    g.bench_function("text_0.0.4", |b| b.iter(|| m.expose(Format::Text)));
    g.bench_function("protobuf", |b| b.iter(|| m.expose(Format::Protobuf)));
    g.finish();
}

criterion_group!(benches, expose);
criterion_main!(benches);
