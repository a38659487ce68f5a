//! Per-packet costs of the passive engines on real traffic: the committed corpus
//! (request/response, bulk with loss, 2000 short connections), read from memory so
//! only parsing and the engines are timed. The whole-file comparison with pping,
//! tcptrace and tshark is `bench/passive_peers.py`.

#![allow(
    missing_docs,
    reason = "criterion_group! generates the bench's public entry point, undocumented"
)]

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use rttlab::capture::CaptureReader;
use rttlab::passive::{Analyzer, Config, Sample, Sink};
use rttlab::wire::LinkType;

struct Count(u64);

impl Sink for Count {
    fn sample(&mut self, s: &Sample) {
        self.0 += s.rtt_ns & 1;
    }
}

/// Every corpus capture, decompressed, as (pcap or pcapng bytes).
fn corpus() -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.ok()?.path();
            // The captures, not the peers' outputs beside them (pping's text is gzipped).
            let name = p.to_str()?;
            (name.ends_with(".pcap.gz") || name.ends_with(".pcapng.gz")).then_some(p)
        })
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| {
            let mut v = Vec::new();
            std::io::Read::read_to_end(
                &mut flate2::read::GzDecoder::new(std::fs::File::open(p).unwrap()),
                &mut v,
            )
            .unwrap();
            v
        })
        .collect()
}

/// Parse every file and feed every packet to a fresh analyzer; packets seen.
fn run(files: &[Vec<u8>], cfg: &Config) -> u64 {
    let mut n = 0;
    let mut sink = Count(0);
    for f in files {
        let mut a = Analyzer::new(cfg.clone());
        let mut r = CaptureReader::new(&f[..]).unwrap();
        while let Some(p) = r.next_packet().unwrap() {
            a.packet(
                p.ts_ns,
                LinkType::from_number(p.link).unwrap(),
                p.data,
                &mut sink,
            );
            n += 1;
        }
        a.finish(&mut sink);
    }
    black_box(sink.0);
    n
}

fn engines(c: &mut Criterion) {
    let files = corpus();
    let packets = run(&files, &Config::default());
    let mut g = c.benchmark_group("passive_corpus");
    g.throughput(Throughput::Elements(packets));
    for (name, ts, seq) in [
        ("ts", true, false),
        ("seq", false, true),
        ("both", true, true),
    ] {
        let cfg = Config {
            ts,
            seq,
            ..Config::default()
        };
        g.bench_function(name, |b| b.iter(|| run(&files, &cfg)));
    }
    g.finish();
}

criterion_group!(benches, engines);
criterion_main!(benches);
