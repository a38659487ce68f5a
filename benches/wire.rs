//! Per-packet costs of the passive path: decoding a frame down to TCP timestamps, and
//! reading a pcap from memory and decoding every packet (the page-cache case of the
//! issue's ≥ 10 M packets/s target).

#![allow(
    missing_docs,
    reason = "criterion_group! generates the bench's public entry point, undocumented"
)]

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use rttlab::capture::CaptureReader;
use rttlab::wire::{decode, LinkType, Transport};

/// An Ethernet/IPv4/TCP frame with Linux's timestamp option layout and 8 bytes of data.
fn frame(seq: u32) -> Vec<u8> {
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 60, 0, 0, 0x40, 0, 64, 6, 0, 0]);
    f.extend_from_slice(&[198, 18, 0, 1, 198, 18, 0, 2]);
    f.extend_from_slice(&[0x9c, 0x40, 0x13, 0x89]);
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 1, 0x80, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
    f.extend_from_slice(&[1, 1, 8, 10]);
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend_from_slice(&7u32.to_be_bytes());
    f.extend_from_slice(b"payload!");
    f
}

fn pcap(n: u32) -> Vec<u8> {
    let mut f = Vec::new();
    for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 128, 1] {
        f.extend_from_slice(&v.to_le_bytes());
    }
    for i in 0..n {
        let p = frame(i);
        for v in [i / 1000, i % 1000, p.len() as u32, p.len() as u32] {
            f.extend_from_slice(&v.to_le_bytes());
        }
        f.extend_from_slice(&p);
    }
    f
}

fn ts_of(data: &[u8]) -> u32 {
    match decode(LinkType::Ethernet, data) {
        Ok(ip) => match ip.transport {
            Transport::Tcp(t) => t.timestamps().map_or(0, |x| x.0),
            _ => 0,
        },
        Err(_) => 0,
    }
}

fn wire(c: &mut Criterion) {
    let f = frame(42);
    let mut g = c.benchmark_group("wire");
    g.throughput(Throughput::Elements(1));
    g.bench_function("decode_tcp_timestamps", |b| b.iter(|| ts_of(black_box(&f))));
    g.finish();
    let n = 100_000;
    let file = pcap(n);
    let mut g = c.benchmark_group("capture");
    g.throughput(Throughput::Elements(u64::from(n)));
    g.bench_function("pcap_read_and_decode_100k", |b| {
        b.iter(|| {
            let mut r = CaptureReader::new(black_box(&file[..])).unwrap();
            let mut sum = 0u64;
            while let Some(p) = r.next_packet().unwrap() {
                sum += u64::from(ts_of(p.data));
            }
            sum
        })
    });
    g.finish();
}

criterion_group!(benches, wire);
criterion_main!(benches);
