//! The in-kernel passive engine against the user-space one.
//!
//! Witness of the rules: the user-space engine (`passive::Analyzer`, itself held to
//! pping and tshark in tests/passive.rs) on the same frames. Each corpus capture is
//! fed to both: to the user-space engine as read, and through the kernel's own
//! ingress program (BPF_PROG_TEST_RUN, which builds a real sk_buff) with each frame's
//! capture time as its receive stamp. The two must give the same samples, field for
//! field and nanosecond for nanosecond, and the same per-flow counts.

use crate::common;

use rttlab::capture::{self, Batch, Source};
use rttlab::kernel::passive_bpf::Framing;
use rttlab::passive::flow::FlowEnd;
use rttlab::passive::in_kernel::{Engine, Options};
use rttlab::passive::{Analyzer, Config, Counters, Sample, Sink};
use std::net::IpAddr;
use std::time::Duration;

/// A sample as both engines must give it (pping's arithmetic is checked apart).
type Key = (String, String, String, String, u64, u64, u64);

#[derive(Default)]
struct Collect {
    samples: Vec<Key>,
    flows: Vec<FlowEnd>,
}

impl Sink for Collect {
    fn sample(&mut self, s: &Sample) {
        self.samples.push((
            s.method.name().into(),
            s.host.socket_addr().to_string(),
            s.peer.socket_addr().to_string(),
            format!("{:?}", s.place),
            s.ts_ns,
            s.rtt_ns,
            s.min_ns,
        ));
    }
    fn flow_done(&mut self, f: &FlowEnd) {
        self.flows.push(*f);
    }
}

fn frames(name: &str, mut f: impl FnMut(u64, rttlab::wire::LinkType, &[u8])) {
    let path = common::corpus(name);
    let mut cap = capture::open(&Source::File(path), capture::Options::default()).unwrap();
    while let Batch::More(_) = cap
        .read(Duration::ZERO, 4096, &mut |t, l, b| f(t, l, b))
        .unwrap()
    {}
}

fn user(name: &str, cfg: &Config) -> (Collect, Counters) {
    let mut a = Analyzer::new(cfg.clone());
    let mut out = Collect::default();
    frames(name, |t, l, b| a.packet(t, l, b, &mut out));
    a.finish(&mut out);
    (out, a.counters())
}

fn kernel(name: &str, cfg: &Config) -> (Collect, Counters) {
    let mut e = Engine::load(cfg, &Options::default(), Framing::Ethernet).unwrap();
    let mut out = Collect::default();
    let mut n = 0u64;
    frames(name, |t, l, b| {
        e.replay(l, b, t).unwrap();
        n += 1;
        // The ring buffer holds 4 MiB: read it as it fills.
        if n % 2048 == 0 {
            e.drain(&mut out);
        }
    });
    e.finish(&mut out).unwrap();
    let (c, k) = e.counters().unwrap();
    assert_eq!(k.events_lost, 0, "{name}: the ring buffer overflowed");
    assert_eq!(
        (k.flows_full, k.pending_full, k.bad_records),
        (0, 0, 0),
        "{name}"
    );
    (out, c)
}

fn sorted_flows(v: &[FlowEnd]) -> Vec<String> {
    let mut s: Vec<String> = v
        .iter()
        .map(|f| {
            format!(
                "{:?} {:?} {:?} {:?}",
                f.key, f.first_ns, f.last_ns, f.halves
            )
        })
        .collect();
    s.sort();
    s
}

fn compare(name: &str, cfg: &Config) -> usize {
    let (u, uc) = user(name, cfg);
    let (k, kc) = kernel(name, cfg);
    let what = format!(
        "{name} (ts {}, seq {}, {:?}, {:?})",
        cfg.ts, cfg.seq, cfg.ts_record, cfg.seq_rules
    );
    assert_eq!(u.samples.len(), k.samples.len(), "{what}: sample count");
    for (i, (x, y)) in u.samples.iter().zip(&k.samples).enumerate() {
        assert_eq!(x, y, "{what}: sample {i} differs (user space, then kernel)");
    }
    assert_eq!(
        sorted_flows(&u.flows),
        sorted_flows(&k.flows),
        "{what}: flows"
    );
    for (field, a, b) in [
        ("packets", uc.packets, kc.packets),
        ("tcp", uc.tcp, kc.tcp),
        ("samples_ts", uc.samples_ts, kc.samples_ts),
        ("samples_seq", uc.samples_seq, kc.samples_seq),
        ("no_timestamps", uc.no_timestamps, kc.no_timestamps),
        ("retransmissions", uc.retransmissions, kc.retransmissions),
        ("karn_skipped", uc.karn_skipped, kc.karn_skipped),
        ("sack_timed", uc.sack_timed, kc.sack_timed),
        ("flows created", uc.flows.created, kc.flows.created),
        ("flows closed", uc.flows.closed, kc.flows.closed),
    ] {
        assert_eq!(a, b, "{what}: counter {field}");
    }
    u.samples.len()
}

/// Witness: the user-space aggregation (`passive::aggregate`) of the user-space
/// engine's samples. The kernel's histograms per prefix are the same, bucket for
/// bucket, with the same exact count, sum, minimum and maximum.
#[test]
fn the_kernels_histograms_per_prefix_are_the_user_space_aggregation() {
    let _busy = common::serial::busy();
    use rttlab::kernel::passive_bpf::Aggregation;
    use rttlab::passive::aggregate::{self, Aggregator};
    if !common::privileged("passive_bpf::aggregate") {
        return;
    }
    // The agent's default classic bounds with the native ones.
    let classic: Vec<f64> = [
        1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 0.01, 0.1, 1.0, 10.0,
    ]
    .into();
    let bounds = aggregate::bounds(&classic);
    for (name, v4, v6) in [
        ("crr-gw.pcapng.gz", 24, 48),
        ("rr-v6-gw.pcapng.gz", 32, 64),
        ("rr-v4-host.pcap.gz", 32, 128),
    ] {
        let cfg = Config {
            local: vec!["198.18.0.2".parse().unwrap(), "198.18.1.2".parse().unwrap()],
            ..Config::default()
        };
        let (u, _) = user(name, &cfg);
        let mut agg = Aggregator::new(bounds.clone(), v4, v6);
        struct Feed<'a>(&'a mut Aggregator);
        impl Sink for Feed<'_> {
            fn sample(&mut self, s: &Sample) {
                self.0.sample(s);
            }
        }
        let mut a = Analyzer::new(cfg.clone());
        frames(name, |t, l, b| a.packet(t, l, b, &mut Feed(&mut agg)));
        let expected = agg.take();
        assert_eq!(
            expected.iter().map(|x| x.1.count).sum::<u64>() as usize,
            u.samples.len(),
            "{name}"
        );
        let options = Options {
            events: false,
            flow_events: false,
            aggregate: Some(Aggregation {
                prefix_v4: v4,
                prefix_v6: v6,
                bounds_ns: bounds.clone(),
                watched_only: false,
            }),
            ..Options::default()
        };
        let mut e = Engine::load(&cfg, &options, Framing::Ethernet).unwrap();
        frames(name, |t, l, b| e.replay(l, b, t).unwrap());
        let got = e.aggregates(bounds.len()).unwrap();
        assert_eq!(got.len(), expected.len(), "{name}: histograms");
        for ((gk, gh), (ek, eh)) in got.iter().zip(&expected) {
            assert_eq!(gk, ek, "{name}");
            assert_eq!(gh, eh, "{name}: {ek:?}");
        }
        assert!(expected.len() > 1, "{name}: more than one histogram");
        // Read per interval: the first interval is everything so far, the next empty.
        let first = e.take_aggregates(bounds.len()).unwrap();
        assert_eq!(first, got, "{name}");
        assert!(e.take_aggregates(bounds.len()).unwrap().is_empty());
    }
}

const CORPUS: [&str; 6] = [
    "rr-v4-gw.pcap.gz",
    "rr-v4-host.pcap.gz",
    "rr-v6-gw.pcapng.gz",
    "bulk-loss-gw.pcap.gz",
    "rr-fast-gw.pcap.gz",
    "crr-gw.pcapng.gz",
];

#[test]
fn the_kernel_engine_gives_the_user_space_engines_samples_on_the_corpus() {
    let _busy = common::serial::busy();
    if !common::privileged("passive_bpf::corpus") {
        return;
    }
    for name in CORPUS {
        for (ts, seq) in [(true, false), (false, true), (true, true)] {
            let cfg = Config {
                ts,
                seq,
                ..Config::default()
            };
            let n = compare(name, &cfg);
            eprintln!("{name} ts={ts} seq={seq}: {n} samples");
            assert!(n > 0, "{name}: no samples at all");
        }
    }
}

/// Generated TCP conversations: one client and one server, each with its own
/// sequence space (random, so it wraps) and TS clock, sending data, ACKs with SACK
/// blocks, retransmissions (the same segment, or repacketised with the next), and
/// segments the capture point never saw (gaps, filled later out of order); the frames
/// are then reordered and duplicated a little, as a capture point sees them.
mod gen {
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    pub enum Op {
        /// New data from one side (length), unseen by the capture point if `hidden`.
        Data {
            client: bool,
            len: u16,
            hidden: bool,
        },
        /// A pure ACK: cumulative up to segment `upto` of the other side's (or the
        /// middle of it), with SACK blocks over a few segments above it.
        Ack {
            client: bool,
            upto: u8,
            partial: bool,
            sacks: u8,
        },
        /// One side retransmits an earlier segment, alone or with the next.
        Retransmit {
            client: bool,
            which: u8,
            merge: bool,
        },
        /// A hidden segment finally reaches the capture point.
        Reveal { client: bool },
        /// The side's TS clock ticks this many ms.
        Tick { client: bool, ms: u8 },
        /// The next frame echoes an older TSval of the other side.
        EchoOld { client: bool, back: u8 },
    }

    pub fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (any::<bool>(), 1u16..1500, prop::bool::weighted(0.08))
                .prop_map(|(client, len, hidden)| Op::Data { client, len, hidden }),
            5 => (any::<bool>(), any::<u8>(), prop::bool::weighted(0.1), any::<u8>())
                .prop_map(|(client, upto, partial, sacks)| Op::Ack { client, upto, partial, sacks }),
            1 => (any::<bool>(), any::<u8>(), any::<bool>())
                .prop_map(|(client, which, merge)| Op::Retransmit { client, which, merge }),
            1 => any::<bool>().prop_map(|client| Op::Reveal { client }),
            3 => (any::<bool>(), 0u8..3).prop_map(|(client, ms)| Op::Tick { client, ms }),
            1 => (any::<bool>(), 1u8..4).prop_map(|(client, back)| Op::EchoOld { client, back }),
        ]
    }

    #[derive(Debug, Clone)]
    pub struct Case {
        pub v6: bool,
        pub handshake: bool,
        pub fin: bool,
        pub isn: [u32; 2],
        pub ts0: [u32; 2],
        pub layout: u8,
        pub ops: Vec<Op>,
        pub swaps: Vec<u16>,
        pub dups: Vec<u16>,
        pub gaps_us: Vec<u32>,
    }

    pub fn case() -> impl Strategy<Value = Case> {
        (
            (any::<bool>(), any::<bool>(), any::<bool>()),
            (any::<[u32; 2]>(), any::<[u32; 2]>(), 0u8..4),
            prop::collection::vec(op(), 5..120),
            prop::collection::vec(any::<u16>(), 0..6),
            prop::collection::vec(any::<u16>(), 0..4),
            prop::collection::vec(1u32..30_000, 300),
        )
            .prop_map(
                |((v6, handshake, fin), (isn, ts0, layout), ops, swaps, dups, gaps_us)| Case {
                    v6,
                    handshake,
                    fin,
                    isn,
                    ts0,
                    layout,
                    ops,
                    swaps,
                    dups,
                    gaps_us,
                },
            )
    }

    struct Side {
        nxt: u32,
        /// (seq, len) of every data segment sent, in order.
        sent: Vec<(u32, u32)>,
        /// Segments not yet seen by the capture point.
        hidden: Vec<(u32, u32)>,
        clock: u32,
        /// TSvals of the other side seen, newest last.
        seen_ts: Vec<u32>,
        /// The other side's data acknowledged so far.
        ack: u32,
    }

    /// One TCP segment as bytes from the IP header on (the capture keeps 128 bytes of
    /// it; the lengths are the headers').
    #[allow(clippy::too_many_arguments, reason = "a packet's fields")]
    fn frame(
        v6: bool,
        client: bool,
        seq: u32,
        ack: u32,
        flags: u8,
        len: u32,
        ts: Option<(u32, u32)>,
        sacks: &[(u32, u32)],
        layout: u8,
    ) -> Vec<u8> {
        let mut opts: Vec<u8> = Vec::new();
        let ts_opt = |o: &mut Vec<u8>, nops: bool| {
            if let Some((v, e)) = ts {
                if nops {
                    o.extend_from_slice(&[1, 1]);
                }
                o.extend_from_slice(&[8, 10]);
                o.extend_from_slice(&v.to_be_bytes());
                o.extend_from_slice(&e.to_be_bytes());
            }
        };
        let sack_opt = |o: &mut Vec<u8>| {
            if !sacks.is_empty() {
                o.extend_from_slice(&[1, 1, 5, 2 + 8 * sacks.len() as u8]);
                for (l, r) in sacks {
                    o.extend_from_slice(&l.to_be_bytes());
                    o.extend_from_slice(&r.to_be_bytes());
                }
            }
        };
        match layout {
            // Linux: NOP NOP TS, then SACK.
            0 => {
                ts_opt(&mut opts, true);
                sack_opt(&mut opts);
            }
            // SACK first.
            1 => {
                sack_opt(&mut opts);
                ts_opt(&mut opts, true);
            }
            // TS without NOPs, after a window scale.
            2 => {
                opts.extend_from_slice(&[3, 3, 7]);
                ts_opt(&mut opts, false);
                sack_opt(&mut opts);
            }
            // MSS, then TS, then an EOL that ends the list early (SACK after it is
            // not read by either engine).
            _ => {
                opts.extend_from_slice(&[2, 4, 5, 0xb4]);
                ts_opt(&mut opts, false);
                opts.push(0);
                sack_opt(&mut opts);
            }
        }
        opts.truncate(40);
        while opts.len() % 4 != 0 {
            opts.push(0);
        }
        let tcp_len = 20 + opts.len();
        let mut tcp = Vec::with_capacity(tcp_len);
        let (sp, dp): (u16, u16) = if client { (40000, 80) } else { (80, 40000) };
        tcp.extend_from_slice(&sp.to_be_bytes());
        tcp.extend_from_slice(&dp.to_be_bytes());
        tcp.extend_from_slice(&seq.to_be_bytes());
        tcp.extend_from_slice(&ack.to_be_bytes());
        tcp.push(((tcp_len / 4) as u8) << 4);
        tcp.push(flags);
        tcp.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
        tcp.extend_from_slice(&opts);
        let (c, s) = ([10u8, 0, 0, 1], [10u8, 0, 0, 2]);
        let (src, dst) = if client { (c, s) } else { (s, c) };
        let mut p = Vec::new();
        if v6 {
            let addr = |a: [u8; 4]| {
                let mut x = [0u8; 16];
                x[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
                x[12..].copy_from_slice(&a);
                x
            };
            p.extend_from_slice(&[0x60, 0, 0, 0]);
            p.extend_from_slice(&((tcp_len as u32 + len) as u16).to_be_bytes());
            p.extend_from_slice(&[6, 64]);
            p.extend_from_slice(&addr(src));
            p.extend_from_slice(&addr(dst));
        } else {
            p.extend_from_slice(&[0x45, 0]);
            p.extend_from_slice(&((20 + tcp_len as u32 + len) as u16).to_be_bytes());
            p.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0]);
            p.extend_from_slice(&src);
            p.extend_from_slice(&dst);
        }
        p.extend_from_slice(&tcp);
        // The payload as a snap length would leave it: a few bytes at most.
        p.extend(std::iter::repeat_n(0xab, len.min(8) as usize));
        p
    }

    /// The frames of `c`, each with its capture time (ns).
    pub fn frames(c: &Case) -> Vec<(u64, Vec<u8>)> {
        let mut sides = [0, 1].map(|i| Side {
            nxt: c.isn[i],
            sent: Vec::new(),
            hidden: Vec::new(),
            clock: c.ts0[i] | 1,
            seen_ts: Vec::new(),
            ack: c.isn[1 - i],
        });
        let mut out: Vec<Vec<u8>> = Vec::new();
        let idx = |client: bool| usize::from(!client);
        let mut echo_back = [0u8; 2];
        let ts_of = |sides: &[Side; 2], i: usize, back: u8| -> (u32, u32) {
            let s = &sides[i];
            let n = s.seen_ts.len();
            let e = if n == 0 {
                0
            } else {
                s.seen_ts[n.saturating_sub(1 + usize::from(back)).min(n - 1)]
            };
            (s.clock, e)
        };
        let emit =
            |sides: &mut [Side; 2], out: &mut Vec<Vec<u8>>, i: usize, f: Vec<u8>, tsval: u32| {
                out.push(f);
                sides[1 - i].seen_ts.push(tsval);
            };
        if c.handshake {
            for i in [0, 1] {
                let flags = if i == 0 { 0x02 } else { 0x12 };
                let ts = Some((sides[i].clock, if i == 0 { 0 } else { sides[0].clock }));
                let ack = if i == 0 { 0 } else { sides[0].nxt };
                let f = frame(c.v6, i == 0, sides[i].nxt, ack, flags, 1, ts, &[], c.layout);
                let clock = sides[i].clock;
                emit(&mut sides, &mut out, i, f, clock);
                sides[i].nxt = sides[i].nxt.wrapping_add(1);
                sides[1 - i].ack = sides[i].nxt;
            }
        }
        for op in &c.ops {
            match *op {
                super::gen::Op::Data {
                    client,
                    len,
                    hidden,
                } => {
                    let i = idx(client);
                    let (seq, len) = (sides[i].nxt, u32::from(len));
                    sides[i].nxt = seq.wrapping_add(len);
                    sides[i].sent.push((seq, len));
                    if hidden {
                        sides[i].hidden.push((seq, len));
                        continue;
                    }
                    let (v, e) = ts_of(&sides, i, std::mem::take(&mut echo_back[i]));
                    let f = frame(
                        c.v6,
                        client,
                        seq,
                        sides[i].ack,
                        0x18,
                        len,
                        Some((v, e)),
                        &[],
                        c.layout,
                    );
                    emit(&mut sides, &mut out, i, f, v);
                }
                super::gen::Op::Ack {
                    client,
                    upto,
                    partial,
                    sacks,
                } => {
                    let i = idx(client);
                    let other = &sides[1 - i].sent;
                    if other.is_empty() {
                        continue;
                    }
                    // Mostly one of the newest segments, as a receiver acknowledges;
                    // now and then any (an old, reordered or lying ACK).
                    let k = if upto % 8 == 0 {
                        usize::from(upto / 8) % other.len()
                    } else {
                        other.len() - 1 - (usize::from(upto) % 4).min(other.len() - 1)
                    };
                    let (s, l) = other[k];
                    let ack = if partial && l > 1 {
                        s.wrapping_add(l / 2)
                    } else {
                        s.wrapping_add(l)
                    };
                    // SACK blocks: up to three runs of segments above the ACK.
                    let mut blocks = Vec::new();
                    let mut j = k + 2;
                    for b in 0..3 {
                        if sacks & (1 << b) == 0 || j >= other.len() {
                            break;
                        }
                        let run = 1 + usize::from((sacks >> (3 + b)) & 1);
                        let last = (j + run - 1).min(other.len() - 1);
                        blocks.push((other[j].0, other[last].0.wrapping_add(other[last].1)));
                        j = last + 2;
                    }
                    sides[i].ack = ack;
                    let (v, e) = ts_of(&sides, i, std::mem::take(&mut echo_back[i]));
                    let f = frame(
                        c.v6,
                        client,
                        sides[i].nxt,
                        ack,
                        0x10,
                        0,
                        Some((v, e)),
                        &blocks,
                        c.layout,
                    );
                    emit(&mut sides, &mut out, i, f, v);
                }
                super::gen::Op::Retransmit {
                    client,
                    which,
                    merge,
                } => {
                    let i = idx(client);
                    let sent = &sides[i].sent;
                    if sent.is_empty() {
                        continue;
                    }
                    let k = usize::from(which) % sent.len();
                    let (seq, mut len) = sent[k];
                    if merge && k + 1 < sent.len() {
                        len += sent[k + 1].1;
                    }
                    let (v, e) = ts_of(&sides, i, 0);
                    let f = frame(
                        c.v6,
                        client,
                        seq,
                        sides[i].ack,
                        0x18,
                        len,
                        Some((v, e)),
                        &[],
                        c.layout,
                    );
                    emit(&mut sides, &mut out, i, f, v);
                }
                super::gen::Op::Reveal { client } => {
                    let i = idx(client);
                    if sides[i].hidden.is_empty() {
                        continue;
                    }
                    let (seq, len) = sides[i].hidden.remove(0);
                    let (v, e) = ts_of(&sides, i, 0);
                    let f = frame(
                        c.v6,
                        client,
                        seq,
                        sides[i].ack,
                        0x18,
                        len,
                        Some((v, e)),
                        &[],
                        c.layout,
                    );
                    emit(&mut sides, &mut out, i, f, v);
                }
                super::gen::Op::Tick { client, ms } => {
                    let i = idx(client);
                    sides[i].clock = sides[i].clock.wrapping_add(u32::from(ms));
                }
                super::gen::Op::EchoOld { client, back } => echo_back[idx(client)] = back,
            }
        }
        if c.fin {
            for i in [0, 1] {
                let (v, e) = ts_of(&sides, i, 0);
                let f = frame(
                    c.v6,
                    i == 0,
                    sides[i].nxt,
                    sides[1 - i].nxt,
                    0x11,
                    1,
                    Some((v, e)),
                    &[],
                    c.layout,
                );
                emit(&mut sides, &mut out, i, f, v);
                sides[i].nxt = sides[i].nxt.wrapping_add(1);
            }
            for i in [0, 1] {
                let (v, e) = ts_of(&sides, i, 0);
                let f = frame(
                    c.v6,
                    i == 0,
                    sides[i].nxt,
                    sides[1 - i].nxt,
                    0x10,
                    0,
                    Some((v, e)),
                    &[],
                    c.layout,
                );
                emit(&mut sides, &mut out, i, f, v);
            }
        }
        for &s in &c.swaps {
            if out.len() > 1 {
                let k = usize::from(s) % (out.len() - 1);
                out.swap(k, k + 1);
            }
        }
        for &d in &c.dups {
            if !out.is_empty() {
                let k = usize::from(d) % out.len();
                let f = out[k].clone();
                out.insert(k + 1, f);
            }
        }
        let mut t = 1_700_000_000_000_000_000u64;
        out.into_iter()
            .enumerate()
            .map(|(k, f)| {
                t += u64::from(c.gaps_us[k % c.gaps_us.len()]) * 1000 + k as u64 % 997;
                (t, f)
            })
            .collect()
    }
}

/// The frames of a failing case, one line each, for reading the failure.
fn trace(frames: &[(u64, Vec<u8>)]) -> String {
    trace_of(rttlab::wire::LinkType::Raw, frames)
}

fn trace_of(link: rttlab::wire::LinkType, frames: &[(u64, Vec<u8>)]) -> String {
    use rttlab::wire::{self, TcpOption};
    let mut out = String::new();
    for (t, f) in frames {
        let Ok(Some(s)) = wire::net::decode_tcp(link, f) else {
            out += &format!("{} (not a TCP segment)\n", t % 1_000_000_000);
            continue;
        };
        let tcp = s.tcp;
        let sacks: Vec<(u32, u32)> = tcp
            .options()
            .find_map(|o| match o {
                TcpOption::Sack(b) => Some(b.collect()),
                _ => None,
            })
            .unwrap_or_default();
        let len = s.transport_len - tcp.header_len();
        out += &format!(
            "{} {} seq={} len={len} ack={} flags={:02x} ts={:?} sack={sacks:?}\n",
            t % 1_000_000_000,
            if tcp.src_port() == 40000 { "C>" } else { "S>" },
            tcp.seq(),
            tcp.ack(),
            tcp.flags(),
            tcp.timestamps(),
        );
    }
    out
}

/// Witness: the user-space engine on the same generated frames. Every case must give
/// the same samples, flow counts and engine counters.
#[test]
fn generated_conversations_give_the_same_samples_on_both_engines() {
    let _busy = common::serial::busy();
    use proptest::test_runner::{Config as RunnerConfig, TestRunner};
    use rttlab::wire::LinkType;
    use std::cell::RefCell;
    if !common::privileged("passive_bpf::generated") {
        return;
    }
    // Both rule sets, and rttlab's with ePPing's sampling (a TSval or segment timed per
    // direction at most every 20 ms; the frames are 1 µs to 30 ms apart).
    let configs: Vec<Config> = [
        (
            rttlab::passive::ts::Record::Data,
            rttlab::passive::seq::Rules::RTTLAB,
            0,
        ),
        (
            rttlab::passive::ts::Record::Any,
            rttlab::passive::seq::Rules::WIRESHARK,
            0,
        ),
        (
            rttlab::passive::ts::Record::Data,
            rttlab::passive::seq::Rules::RTTLAB,
            20_000_000,
        ),
    ]
    .into_iter()
    .map(|(ts_record, seq_rules, rate_limit_ns)| Config {
        ts_record,
        seq_rules,
        rate_limit_ns,
        ..Config::default()
    })
    .collect();
    let options = Options {
        max_pending: 4096,
        ..Options::default()
    };
    let engines: Vec<RefCell<Engine>> = configs
        .iter()
        .map(|c| {
            let c = Config {
                max_flows: 256,
                ..c.clone()
            };
            RefCell::new(Engine::load(&c, &options, Framing::Ethernet).unwrap())
        })
        .collect();
    // A fixed seed: a failure here is the same failure on the next run.
    // RTTLAB_PROPTEST_CASES and RTTLAB_PROPTEST_SEED (0-255) explore further.
    let cases = std::env::var("RTTLAB_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let mut runner = TestRunner::new_with_rng(
        RunnerConfig {
            cases,
            failure_persistence: None,
            ..RunnerConfig::default()
        },
        match std::env::var("RTTLAB_PROPTEST_SEED")
            .ok()
            .and_then(|v| v.parse::<u8>().ok())
        {
            Some(seed) => proptest::test_runner::TestRng::from_seed(
                proptest::test_runner::RngAlgorithm::ChaCha,
                &[seed; 32],
            ),
            None => proptest::test_runner::TestRng::deterministic_rng(
                proptest::test_runner::RngAlgorithm::ChaCha,
            ),
        },
    );
    let exact = std::cell::Cell::new(0u32);
    let approximate = std::cell::Cell::new(0u32);
    runner
        .run(&gen::case(), |case| {
            let frames = gen::frames(&case);
            for (cfg, engine) in configs.iter().zip(&engines) {
                let mut a = Analyzer::new(cfg.clone());
                let mut u = Collect::default();
                let mut k = Collect::default();
                let mut e = engine.borrow_mut();
                let before = e.counters().unwrap().1.approximated;
                for (t, f) in &frames {
                    a.packet(*t, LinkType::Raw, f, &mut u);
                    e.replay(LinkType::Raw, f, *t).unwrap();
                }
                a.finish(&mut u);
                e.finish(&mut k).unwrap();
                if e.counters().unwrap().1.approximated == before {
                    exact.set(exact.get() + 1);
                    if u.samples != k.samples || sorted_flows(&u.flows) != sorted_flows(&k.flows) {
                        // The last one written is the smallest case proptest found.
                        let _ = std::fs::write(
                            std::env::temp_dir().join("rttlab-passive-bpf-case.txt"),
                            trace(&frames),
                        );
                    }
                    proptest::prop_assert_eq!(
                        &u.samples,
                        &k.samples,
                        "{:?}, rate limit {} ns",
                        cfg.seq_rules,
                        cfg.rate_limit_ns
                    );
                    proptest::prop_assert_eq!(sorted_flows(&u.flows), sorted_flows(&k.flows));
                } else {
                    // The kernel said its state stood in less exactly: it may give
                    // fewer samples, in order, and no other (its running minimum
                    // then may be larger: it may have missed a smaller one).
                    approximate.set(approximate.get() + 1);
                    let mut it = u.samples.iter();
                    for s in &k.samples {
                        proptest::prop_assert!(
                            it.any(|x| (&x.0, &x.1, &x.2, &x.3, x.4, x.5)
                                == (&s.0, &s.1, &s.2, &s.3, s.4, s.5)
                                && x.6 <= s.6),
                            "{:?}: kernel sample {s:?} is not one of the user-space engine's",
                            cfg.seq_rules
                        );
                    }
                }
            }
            Ok(())
        })
        .unwrap();
    eprintln!(
        "{} runs exact, {} approximated (a subset checked); a failure's frames are in {}",
        exact.get(),
        approximate.get(),
        std::env::temp_dir()
            .join("rttlab-passive-bpf-case.txt")
            .display()
    );
    // The bounded state must be the exception, not the rule, on these conversations.
    assert!(
        approximate.get() * 20 <= exact.get() + approximate.get(),
        "too many approximations: {} of {}",
        approximate.get(),
        exact.get() + approximate.get()
    );
}

/// A corpus capture's frames as Ethernet frames (broadcast, as a replay tool sends
/// them), each with its capture time.
fn ethernet_frames(name: &str) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    frames(name, |t, link, f| {
        if let Ok((version, ip)) = link.network(f) {
            let mut e = vec![0xff; 6];
            e.extend_from_slice(&[0x02, 0, 0, 0, 0, 1]);
            e.extend_from_slice(if version == 4 {
                &[0x08, 0x00]
            } else {
                &[0x86, 0xdd]
            });
            e.extend_from_slice(ip);
            out.push((t, e));
        }
    });
    out
}

/// Send `frames` out of `dev` in namespace `ns` through an AF_PACKET socket, from one
/// CPU (so that the receiving side handles them in order), paced to about 200 000 a
/// second.
fn send_frames(ns: &str, dev: &str, frames: &[Vec<u8>]) {
    let path = format!("/run/netns/{ns}");
    std::thread::scope(|s| {
        s.spawn(|| {
            let f = std::fs::File::open(&path).unwrap();
            // SAFETY: entering a namespace on this thread only; a CPU set of one CPU.
            unsafe {
                use std::os::fd::AsRawFd;
                assert_eq!(libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET), 0);
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(0, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
            }
            // SAFETY: plain socket and bind calls with valid arguments; closed below.
            unsafe {
                let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0);
                assert!(fd >= 0);
                let c = std::ffi::CString::new(dev).unwrap();
                let mut sa: libc::sockaddr_ll = std::mem::zeroed();
                sa.sll_family = libc::AF_PACKET as u16;
                sa.sll_ifindex = libc::if_nametoindex(c.as_ptr()) as i32;
                assert!(sa.sll_ifindex > 0);
                assert_eq!(
                    libc::bind(
                        fd,
                        (&sa as *const libc::sockaddr_ll).cast(),
                        std::mem::size_of_val(&sa) as u32
                    ),
                    0
                );
                for (i, f) in frames.iter().enumerate() {
                    let n = libc::send(fd, f.as_ptr().cast(), f.len(), 0);
                    assert_eq!(n, f.len() as isize, "{}", std::io::Error::last_os_error());
                    if i % 64 == 63 {
                        std::thread::sleep(Duration::from_micros(300));
                    }
                }
                libc::close(fd);
            }
        });
    });
}

/// A running `rttlab passive … --json` whose sample lines are collected as they come.
struct Passive {
    child: std::process::Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

/// A test that fails midway leaves no engine running.
impl Drop for Passive {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Passive {
    fn start(args: &[&str]) -> Self {
        Self::start_with(args, |_| {})
    }

    fn start_with(args: &[&str], setup: impl FnOnce(&mut std::process::Command)) -> Self {
        let mut cmd = std::process::Command::new(common::bin());
        setup(&mut cmd);
        let mut child = cmd
            .arg("passive")
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let l2 = lines.clone();
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                l2.lock().unwrap().push(l);
            }
        });
        Self {
            child,
            lines,
            reader: Some(reader),
        }
    }

    fn count(&self, needle: &str) -> usize {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// The next line on stderr (30 s at most); the rest is left for `stop`.
    fn err_line(&mut self) -> String {
        use std::io::Read;
        let mut e = self.child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (mut line, mut b) = (Vec::new(), [0u8]);
            while let Ok(1) = e.read(&mut b) {
                if b[0] == b'\n' {
                    break;
                }
                line.push(b[0]);
            }
            let _ = tx.send((line, e));
        });
        let (line, e) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("no line on stderr in 30 s");
        self.child.stderr = Some(e);
        String::from_utf8(line).unwrap()
    }

    /// SIGINT, then every line and stderr.
    fn stop(mut self) -> (Vec<String>, String) {
        // SAFETY: signalling the child this test started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let mut err = String::new();
        std::io::Read::read_to_string(self.child.stderr.as_mut().unwrap(), &mut err).unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status:?}: {err}");
        self.reader.take().unwrap().join().unwrap();
        let lines = std::mem::take(&mut *self.lines.lock().unwrap());
        (lines, err)
    }
}

/// A TCP data segment and its ACK between 10.99.0.1:1 and 10.99.0.2:2 (TS on): one
/// TS and one seq/ACK sample each time it is sent, so both engines can be seen to be
/// listening before the replay starts.
fn warm_up_frames(round: u32) -> Vec<Vec<u8>> {
    let seg = |from_a: bool, seq: u32, ack: u32, flags: u8, len: u16, tsval: u32, tsecr: u32| {
        let (src, dst, sp, dp) = if from_a {
            ([10, 99, 0, 1], [10, 99, 0, 2], 1u16, 2u16)
        } else {
            ([10, 99, 0, 2], [10, 99, 0, 1], 2, 1)
        };
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 0x08, 0x00]);
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&(52 + len).to_be_bytes());
        f.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0]);
        f.extend_from_slice(&src);
        f.extend_from_slice(&dst);
        f.extend_from_slice(&sp.to_be_bytes());
        f.extend_from_slice(&dp.to_be_bytes());
        f.extend_from_slice(&seq.to_be_bytes());
        f.extend_from_slice(&ack.to_be_bytes());
        f.extend_from_slice(&[0x80, flags, 0xff, 0xff, 0, 0, 0, 0, 1, 1, 8, 10]);
        f.extend_from_slice(&tsval.to_be_bytes());
        f.extend_from_slice(&tsecr.to_be_bytes());
        f.extend(std::iter::repeat_n(0u8, usize::from(len)));
        f
    };
    let s = 1000 * round;
    vec![
        seg(true, s, 1, 0x18, 10, 100 + round, 50 + round),
        seg(false, 1, s + 10, 0x10, 0, 200 + round, 100 + round),
    ]
}

/// Witness: the ring engine (the user-space engine on frames an AF_PACKET ring copies)
/// attached to the same interface at the same time. The corpus is replayed through a
/// veth pair into a namespace where both `rttlab passive` processes listen; with the
/// kernel's receive stamps on (a socket here asks for them), both time a frame by the
/// same stamp, so their samples must be the same to the nanosecond; and as many as the
/// user-space engine gives on the file (no frame lost on the way).
#[test]
fn both_engines_on_a_live_interface_give_the_same_samples_on_the_replayed_corpus() {
    let _busy = common::serial::busy();
    if !common::privileged("passive_bpf::live_replay") {
        return;
    }
    let pair = common::NetnsPair::new();
    let dev_b = far_end(&pair);
    let _stamps = receive_stamps_on();
    for name in [
        "rr-v4-gw.pcap.gz",
        "rr-v6-gw.pcapng.gz",
        "bulk-loss-gw.pcap.gz",
    ] {
        let frames: Vec<Vec<u8>> = ethernet_frames(name).into_iter().map(|x| x.1).collect();
        let args = |engine: &'static str| {
            vec![
                "-i",
                dev_b.as_str(),
                "--netns",
                pair.b.as_str(),
                "--engine",
                engine,
                "--method",
                "both",
                "--json",
            ]
        };
        let kernel = Passive::start(&args("bpf"));
        let ring = Passive::start(&args("ring"));
        let warm = "10.99.0.2:2";
        let t0 = std::time::Instant::now();
        let mut round = 1;
        while kernel.count(warm) == 0 || ring.count(warm) == 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "{name}: the engines never listened"
            );
            send_frames(&pair.a, &pair.dev_a, &warm_up_frames(round));
            round += 1;
            std::thread::sleep(Duration::from_millis(100));
        }
        send_frames(&pair.a, &pair.dev_a, &frames);
        // Until both have written everything (each wakes at least every 100 ms).
        let mut last = (0, 0);
        let mut still = 0;
        while still < 5 {
            std::thread::sleep(Duration::from_millis(100));
            let now = (kernel.count("rtt_us"), ring.count("rtt_us"));
            still = if now == last { still + 1 } else { 0 };
            last = now;
        }
        let (k, kerr) = kernel.stop();
        let (r, rerr) = ring.stop();
        let keep = |v: Vec<String>| -> Vec<(String, String, String, u64, String, String)> {
            let mut s: Vec<_> = v
                .iter()
                .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
                .filter(|x| !x["host"].as_str().unwrap().starts_with("10.99.0."))
                .map(|x| {
                    (
                        x["method"].as_str().unwrap().to_owned(),
                        x["host"].as_str().unwrap().to_owned(),
                        x["peer"].as_str().unwrap().to_owned(),
                        x["ts_ns"].as_u64().unwrap(),
                        x["rtt_us"].to_string(),
                        x["min_us"].to_string(),
                    )
                })
                .collect();
            s.sort();
            s
        };
        let (k, r) = (keep(k), keep(r));
        assert!(kerr.contains("in-kernel engine (tcx on"), "{kerr}");
        assert!(
            rerr.contains("0 dropped"),
            "{name}: the ring dropped frames: {rerr}"
        );
        assert!(!kerr.contains("lost"), "{name}: {kerr}");
        let cfg = Config::default();
        let (expected, _) = user(name, &cfg);
        assert_eq!(
            r.len(),
            expected.samples.len(),
            "{name}: the ring engine's samples, against the file's"
        );
        assert_eq!(k.len(), r.len(), "{name}: sample count, kernel and ring");
        eprintln!("{name}: {} samples from each engine", k.len());
        for (i, (x, y)) in k.iter().zip(&r).enumerate() {
            assert_eq!(x, y, "{name}: sample {i} differs (kernel, then ring)");
        }
    }
}

/// A socket asking for SO_TIMESTAMPNS: while it is open the kernel stamps every
/// received packet, so the in-kernel engine and the ring time a frame by one stamp.
fn receive_stamps_on() -> std::net::UdpSocket {
    let stamps = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let on: libc::c_int = 1;
    // SAFETY: setsockopt with a valid int option on a socket we own.
    let r = unsafe {
        use std::os::fd::AsRawFd;
        libc::setsockopt(
            stamps.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            4,
        )
    };
    assert_eq!(r, 0, "SO_TIMESTAMPNS: {}", std::io::Error::last_os_error());
    stamps
}

/// The pair's interface in namespace b (its name is the one in a, ending in b).
fn far_end(pair: &common::NetnsPair) -> String {
    format!("{}b", pair.dev_a.trim_end_matches('a'))
}

/// Whether the tuning journal in `state` records nothing (gone, or an empty list).
fn journal_empty(state: &std::path::Path) -> bool {
    let journal = state.join("tune.json");
    !journal.exists() || std::fs::read_to_string(&journal).unwrap().trim() == "[]"
}

/// The in-kernel engine's programs on `dev` in namespace `ns`, as the kernel lists
/// them: clsact filters (rtnetlink, as `tc filter show`) and TCX links (BPF_PROG_QUERY,
/// as `bpftool net`), by program name.
fn attached(ns: &str, dev: &str) -> Vec<String> {
    use aya::programs::{SchedClassifier, TcAttachType};
    let o = common::NetnsPair::exec(ns, &["tc", "filter", "show", "dev", dev, "ingress"])
        .output()
        .unwrap();
    let o2 = common::NetnsPair::exec(ns, &["tc", "filter", "show", "dev", dev, "egress"])
        .output()
        .unwrap();
    // One line a filter: "filter protocol all pref 49152 bpf chain 0 handle 0x1
    // rttlab_ingress direct-action not_in_hw id 42 name rttlab_ingress tag …".
    let mut names: Vec<String> = [o.stdout, o2.stdout]
        .iter()
        .flat_map(|b| {
            String::from_utf8_lossy(b)
                .lines()
                .filter_map(|l| {
                    l.split_whitespace()
                        .find(|w| w.starts_with("rttlab_"))
                        .map(String::from)
                })
                .collect::<Vec<_>>()
        })
        .map(|w| format!("clsact {w}"))
        .collect();
    let path = format!("/run/netns/{ns}");
    let dev = dev.to_owned();
    let tcx = std::thread::spawn(move || {
        let f = std::fs::File::open(path).unwrap();
        // SAFETY: entering a namespace on this thread only.
        unsafe {
            use std::os::fd::AsRawFd;
            assert_eq!(libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET), 0);
        }
        let mut v = Vec::new();
        for dir in [TcAttachType::Ingress, TcAttachType::Egress] {
            if let Ok((_, progs)) = SchedClassifier::query_tcx(&dev, dir) {
                for p in progs {
                    v.push(format!("tcx {}", p.name_as_str().unwrap_or("?")));
                }
            }
        }
        v
    })
    .join()
    .unwrap();
    names.extend(tcx);
    names
}

fn clsact_qdisc(ns: &str, dev: &str) -> bool {
    let o = common::NetnsPair::exec(ns, &["tc", "qdisc", "show", "dev", dev])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).contains("clsact")
}

/// Witness: the kernel's own listings of tc filters and TCX links. A process holding
/// the programs is killed (SIGKILL: no exit handler runs). Attached with TCX, the
/// kernel removes them with the process's last descriptor; attached to a clsact qdisc,
/// they stay, and `rttlab tune revert --all` (the journal) removes them and the qdisc.
/// Nothing is pinned either way.
#[test]
fn a_killed_engine_leaves_nothing_revert_cannot_remove() {
    let _busy = common::serial::busy();
    if !common::privileged("passive_bpf::kill") {
        return;
    }
    let pair = common::NetnsPair::new();
    let dev_b = far_end(&pair);
    let state = tempfile::tempdir().unwrap();
    let pins_before: Vec<_> = std::fs::read_dir("/sys/fs/bpf")
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    for mode in ["clsact", "tcx"] {
        // clsact: started inside the namespace without naming it, as the agent runs
        // inside a lab host; the journal knows the namespace by its identity, so the
        // revert below, from this one, still finds it.
        let ns_arg: &[&str] = if mode == "tcx" {
            &["--netns", &pair.b]
        } else {
            &[]
        };
        let ns_file = std::fs::File::open(format!("/run/netns/{}", pair.b)).unwrap();
        let inside = mode == "clsact";
        let args = [
            &["-i", &dev_b, "--engine", "bpf", "--attach", mode, "--json"],
            ns_arg,
        ]
        .concat();
        let mut p = Passive::start_with(&args, |c| {
            c.env("RTTLAB_STATE_DIR", state.path());
            if inside {
                use std::os::fd::AsRawFd;
                use std::os::unix::process::CommandExt;
                let fd = ns_file.as_raw_fd();
                // SAFETY: only setns, async-signal-safe, between fork and exec.
                unsafe {
                    c.pre_exec(move || {
                        if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
            }
        });
        let t0 = std::time::Instant::now();
        let mut round = 1;
        while p.count("10.99.0.2:2") == 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "{mode}: never listened"
            );
            send_frames(&pair.a, &pair.dev_a, &warm_up_frames(round));
            round += 1;
            std::thread::sleep(Duration::from_millis(100));
        }
        let on = attached(&pair.b, &dev_b);
        assert_eq!(
            on,
            [
                format!("{mode} rttlab_ingress"),
                format!("{mode} rttlab_egress")
            ],
            "{mode}"
        );
        p.child.kill().unwrap();
        p.child.wait().unwrap();
        let left = attached(&pair.b, &dev_b);
        if mode == "tcx" {
            assert!(
                left.is_empty(),
                "TCX links outlived their process: {left:?}"
            );
        } else {
            assert_eq!(
                left.len(),
                2,
                "the clsact filters stay after a kill: {left:?}"
            );
            assert!(clsact_qdisc(&pair.b, &dev_b));
        }
        let o = std::process::Command::new(common::bin())
            .args(["tune", "revert", "--all"])
            .env("RTTLAB_STATE_DIR", state.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(
            attached(&pair.b, &dev_b).is_empty(),
            "{mode}: revert left programs"
        );
        assert!(
            !clsact_qdisc(&pair.b, &dev_b),
            "{mode}: revert left the qdisc it added"
        );
        assert!(journal_empty(state.path()), "a journal entry was left");
    }
    let pins_after: Vec<_> = std::fs::read_dir("/sys/fs/bpf")
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert_eq!(pins_before, pins_after, "something was pinned");
}

/// Witness: the kernel's own listing of the interface's filters (as `tc filter show`)
/// and qdiscs. A reader that closes the pipe early (`| head -1`) ends the run quietly,
/// as tcpdump's, and the clsact filters and the qdisc rttlab added go with it: nothing
/// is left for `tune revert --all`.
#[test]
fn a_closed_pipe_ends_the_run_detached() {
    let _busy = common::serial::busy();
    use std::io::BufRead;
    if !common::privileged("passive_bpf::closed_pipe") {
        return;
    }
    let pair = common::NetnsPair::new();
    let dev_b = far_end(&pair);
    let state = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(common::bin())
        .args([
            "passive", "-i", &dev_b, "--netns", &pair.b, "--engine", "bpf",
        ])
        .args(["--attach", "clsact", "--json"])
        .env("RTTLAB_STATE_DIR", state.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // `head -1`: one line, then the pipe closes.
    let out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut first = String::new();
        std::io::BufReader::new(out).read_line(&mut first).unwrap();
        first
    });
    let t0 = std::time::Instant::now();
    let mut round = 1;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the run never ended on its closed pipe"
        );
        send_frames(&pair.a, &pair.dev_a, &warm_up_frames(round));
        round += 1;
        std::thread::sleep(Duration::from_millis(100));
    };
    let first = reader.join().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(first.contains("rtt_us"), "{first}");
    assert!(status.success(), "{status:?}: {err}");
    assert_eq!(attached(&pair.b, &dev_b), Vec::<String>::new());
    assert!(!clsact_qdisc(&pair.b, &dev_b), "the qdisc it added stayed");
    assert!(journal_empty(state.path()), "a journal entry was left");
}

/// `listening on IF, …` (tcpdump's start line) comes once the capture is open, so a
/// script can wait for it. Witnesses: for the in-kernel engine, the kernel's own
/// listing of the programs on the interface at that moment; for both engines, one
/// TS and seq/ACK exchange sent once right after the line, which each must time (the
/// samples are the proof the frames were seen).
#[test]
fn the_start_line_comes_once_the_engine_listens() {
    let _busy = common::serial::busy();
    if !common::privileged("passive_bpf::start_line") {
        return;
    }
    let pair = common::NetnsPair::new();
    let dev_b = far_end(&pair);
    for (engine, says) in [
        ("bpf", "in-kernel engine (tcx)"),
        ("ring", "ring engine, snapshot length 256 bytes"),
    ] {
        let mut p = Passive::start(&[
            "-i", &dev_b, "--netns", &pair.b, "--engine", engine, "--json", "--method", "both",
        ]);
        let line = p.err_line();
        assert_eq!(
            line,
            format!("listening on {dev_b} in netns {}, {says}", pair.b)
        );
        if engine == "bpf" {
            assert_eq!(attached(&pair.b, &dev_b).len(), 2, "{line}");
        }
        send_frames(&pair.a, &pair.dev_a, &warm_up_frames(1));
        let t0 = std::time::Instant::now();
        while p.count("10.99.0.2:2") == 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "{engine}: the frames sent after the start line were not timed"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        p.stop();
    }
}

/// Witness: the kernel's list of the interface's qdiscs (as `tc qdisc show`). Two
/// runs attach by clsact to one interface; the one that added the qdisc stops first.
/// The other, which found it there, removes it when it stops, and nothing is left for
/// `tune revert --all`.
#[test]
fn two_clsact_runs_leave_no_qdisc_whichever_stops_first() {
    let _busy = common::serial::busy();
    if !common::privileged("passive_bpf::two_clsact") {
        return;
    }
    let pair = common::NetnsPair::new();
    let dev_b = far_end(&pair);
    let state = tempfile::tempdir().unwrap();
    let args = [
        "-i", &dev_b, "--netns", &pair.b, "--engine", "bpf", "--attach", "clsact", "--json",
    ];
    let start = |want: usize| {
        let p = Passive::start_with(&args, |c| {
            c.env("RTTLAB_STATE_DIR", state.path());
        });
        let t0 = std::time::Instant::now();
        while attached(&pair.b, &dev_b).len() < want {
            assert!(t0.elapsed() < Duration::from_secs(20), "never attached");
            std::thread::sleep(Duration::from_millis(50));
        }
        p
    };
    let first = start(2);
    assert!(clsact_qdisc(&pair.b, &dev_b));
    let second = start(4);
    first.stop();
    assert_eq!(
        attached(&pair.b, &dev_b).len(),
        2,
        "the second run's filters"
    );
    assert!(
        clsact_qdisc(&pair.b, &dev_b),
        "removed under the second run"
    );
    second.stop();
    assert_eq!(attached(&pair.b, &dev_b), Vec::<String>::new());
    assert!(
        !clsact_qdisc(&pair.b, &dev_b),
        "the qdisc was left to nobody"
    );
    assert!(journal_empty(state.path()), "a journal entry was left");
}

/// Witness: the kernel's refusal to a root process without CAP_BPF and CAP_SYS_ADMIN
/// (setpriv drops them from the bounding set). The default engine names what is
/// missing in one line and falls back to the ring engine, which still measures; asked
/// for by name, the in-kernel engine is an error before anything is measured (2).
#[test]
fn without_cap_bpf_the_engine_falls_back_to_the_ring_with_one_line() {
    let _busy = common::serial::busy();
    if !common::privileged("passive_bpf::fallback") {
        return;
    }
    let run = |engine: &str| {
        std::process::Command::new("setpriv")
            .args([
                "--bounding-set=-bpf,-sys_admin",
                "--inh-caps=-bpf,-sys_admin",
            ])
            .arg(common::bin())
            .args(["passive", "-i", "lo", "--duration", "1", "--engine", engine])
            .output()
            .expect("setpriv (util-linux)")
    };
    let o = run("auto");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let first = err.lines().next().unwrap_or("");
    assert_eq!(
        first,
        "rttlab: the in-kernel engine needs CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN (run as root); using the ring engine"
    );
    assert!(
        err.contains("packets to the capture socket"),
        "the ring ran: {err}"
    );
    let o = run("bpf");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("--engine bpf: the in-kernel engine needs CAP_BPF"),
        "{err}"
    );
}

/// Witness: the kernel's verifier and tc, for a process that is not root and holds
/// exactly the capabilities the README names (setpriv: user nobody, CAP_BPF,
/// CAP_PERFMON and CAP_NET_ADMIN ambient, nothing else in its bounding set): the
/// engine loads and attaches. Without CAP_PERFMON the verifier would refuse the
/// programs (it checks their map-value arithmetic for Spectre v1), so the engine
/// says so before loading and the ring (given CAP_NET_RAW) runs instead.
#[test]
fn the_named_capabilities_are_enough_for_a_user_that_is_not_root() {
    let _busy = common::serial::busy();
    use std::os::unix::fs::PermissionsExt;
    if !common::privileged("passive_bpf::capabilities") {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    std::fs::set_permissions(state.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    // The binary must be reachable by nobody: a copy in that directory.
    let bin = state.path().join("rttlab");
    std::fs::copy(common::bin(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = |caps: &str| {
        let set = format!("-all,{caps}");
        std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(format!("--inh-caps={set}"))
            .arg(format!("--ambient-caps={set}"))
            .arg(format!("--bounding-set={set}"))
            .arg(&bin)
            .args(["passive", "-i", "lo", "--duration", "1"])
            .env("RTTLAB_STATE_DIR", state.path().join("state"))
            .output()
            .expect("setpriv (util-linux)")
    };
    let o = run("+bpf,+perfmon,+net_admin");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.lines()
            .any(|l| l.starts_with("in-kernel engine (") && l.ends_with(" on lo)")),
        "{err}"
    );
    let o = run("+bpf,+net_admin,+net_raw");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(
        err.lines().next().unwrap_or(""),
        "rttlab: the in-kernel engine needs CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN (run as root); using the ring engine"
    );
}

/// Witness: the user-space engine (its parser fuzzed in fuzz/) on the very same bytes.
/// Generated conversations are damaged as a hostile or broken network would: VLAN
/// tags, IPv6 extension headers, bytes flipped anywhere in the headers, frames cut
/// short, impossible lengths and offsets. Both engines must count every frame under
/// the same reason and give the same samples; the kernel's program must never fail.
#[test]
fn damaged_frames_are_skipped_alike_by_both_engines() {
    let _busy = common::serial::busy();
    use proptest::prelude::*;
    use proptest::test_runner::{Config as RunnerConfig, RngAlgorithm, TestRng, TestRunner};
    use rttlab::wire::LinkType;
    use std::cell::RefCell;
    if !common::privileged("passive_bpf::damaged") {
        return;
    }
    let cfg = Config {
        max_flows: 256,
        ..Config::default()
    };
    let options = Options {
        max_pending: 4096,
        ..Options::default()
    };
    let engine = RefCell::new(Engine::load(&cfg, &options, Framing::Ethernet).unwrap());
    #[derive(Debug, Clone)]
    enum Damage {
        Flip { at: u16, bits: u8 },
        Cut { at: u16 },
        Vlan { tags: u8 },
        Ext { kinds: Vec<u8> },
        Set16 { at: u8, v: u16 },
    }
    let damage = prop_oneof![
        (0u16..120, 1u8..=255).prop_map(|(at, bits)| Damage::Flip { at, bits }),
        (14u16..100).prop_map(|at| Damage::Cut { at }),
        (1u8..4).prop_map(|tags| Damage::Vlan { tags }),
        prop::collection::vec(prop::sample::select(vec![0u8, 43, 60, 44, 51, 6, 17]), 1..4)
            .prop_map(|kinds| Damage::Ext { kinds }),
        (14u8..80, any::<u16>()).prop_map(|(at, v)| Damage::Set16 { at, v }),
    ];
    let strategy = (
        gen::case(),
        prop::collection::vec((any::<u16>(), damage), 1..12),
    );
    let mut runner = TestRunner::new_with_rng(
        RunnerConfig {
            cases: std::env::var("RTTLAB_PROPTEST_CASES")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(200),
            failure_persistence: None,
            ..RunnerConfig::default()
        },
        match std::env::var("RTTLAB_PROPTEST_SEED")
            .ok()
            .and_then(|v| v.parse::<u8>().ok())
        {
            Some(seed) => TestRng::from_seed(RngAlgorithm::ChaCha, &[seed; 32]),
            None => TestRng::deterministic_rng(RngAlgorithm::ChaCha),
        },
    );
    runner
        .run(&strategy, |(case, damages)| {
            let mut frames: Vec<(u64, Vec<u8>)> = gen::frames(&case)
                .into_iter()
                .map(|(t, ip)| {
                    let mut e = vec![0u8; 12];
                    e.extend_from_slice(if ip[0] >> 4 == 4 {
                        &[0x08, 0x00]
                    } else {
                        &[0x86, 0xdd]
                    });
                    e.extend_from_slice(&ip);
                    (t, e)
                })
                .collect();
            for (which, d) in &damages {
                if frames.is_empty() {
                    break;
                }
                let k = usize::from(*which) % frames.len();
                let f = &mut frames[k].1;
                match d {
                    Damage::Flip { at, bits } => {
                        if let Some(b) = f.get_mut(usize::from(*at)) {
                            *b ^= bits;
                        }
                    }
                    Damage::Cut { at } => f.truncate(usize::from(*at).max(14)),
                    Damage::Vlan { tags } => {
                        // The kernel walks four tags at most (QinQ uses two).
                        let present = (0..4)
                            .take_while(|i| {
                                f.get(12 + 4 * i..14 + 4 * i) == Some(&[0x81, 0x00][..])
                            })
                            .count();
                        for _ in 0..usize::from(*tags).min(4 - present) {
                            let t = [f[12], f[13]];
                            f.splice(12..12, [0x81, 0x00, 0x00, 0x07]);
                            f[16] = t[0];
                            f[17] = t[1];
                        }
                    }
                    Damage::Ext { kinds } => {
                        // IPv6 only: headers after the fixed 40 bytes, each 8 bytes
                        // long, chained through their first byte.
                        let at = f.len().min(14 + 40);
                        if f.get(14).is_some_and(|b| b >> 4 == 6) && f.len() >= 54 {
                            let mut next = f[20];
                            let mut ext = Vec::new();
                            for &k in kinds.iter().rev() {
                                ext.splice(0..0, [next, 0, 0, 0, 0, 0, 0, 0]);
                                next = k;
                            }
                            f[20] = next;
                            let plen = u16::from_be_bytes([f[18], f[19]]) + ext.len() as u16;
                            f[18..20].copy_from_slice(&plen.to_be_bytes());
                            f.splice(at..at, ext);
                        }
                    }
                    Damage::Set16 { at, v } => {
                        let at = usize::from(*at);
                        if at + 2 <= f.len() {
                            f[at..at + 2].copy_from_slice(&v.to_be_bytes());
                        }
                    }
                }
            }
            // The frames the kernel's test run can be given (live, it sees the others
            // too, and counts them truncated).
            frames.retain(|(_, f)| rttlab::passive::in_kernel::replayable(f));
            let mut a = Analyzer::new(cfg.clone());
            let mut u = Collect::default();
            let mut k = Collect::default();
            let mut e = engine.borrow_mut();
            let (before, kb) = e.counters().unwrap();
            for (t, f) in &frames {
                a.packet(*t, LinkType::Ethernet, f, &mut u);
                e.replay(LinkType::Ethernet, f, *t).unwrap();
            }
            a.finish(&mut u);
            e.finish(&mut k).unwrap();
            let (after, ka) = e.counters().unwrap();
            let uc = a.counters();
            let skip = |c: &Counters, r: rttlab::wire::Skip| {
                c.skipped.iter().find(|x| x.0 == r).map_or(0, |x| x.1)
            };
            for r in rttlab::wire::Skip::ALL {
                proptest::prop_assert_eq!(
                    skip(&uc, r),
                    skip(&after, r) - skip(&before, r),
                    "{:?}",
                    r
                );
            }
            for (what, x, y) in [
                ("packets", uc.packets, after.packets - before.packets),
                ("tcp", uc.tcp, after.tcp - before.tcp),
                ("not_tcp", uc.not_tcp, after.not_tcp - before.not_tcp),
                (
                    "no_timestamps",
                    uc.no_timestamps,
                    after.no_timestamps - before.no_timestamps,
                ),
                (
                    "unusable",
                    uc.unusable_timestamps,
                    after.unusable_timestamps - before.unusable_timestamps,
                ),
            ] {
                proptest::prop_assert_eq!(x, y, "{}", what);
            }
            if ka.approximated == kb.approximated {
                if u.samples != k.samples {
                    let _ = std::fs::write(
                        std::env::temp_dir().join("rttlab-passive-bpf-case.txt"),
                        trace_of(LinkType::Ethernet, &frames),
                    );
                }
                proptest::prop_assert_eq!(&u.samples, &k.samples);
            } else {
                let mut it = u.samples.iter();
                for s in &k.samples {
                    proptest::prop_assert!(
                        it.any(|x| (&x.0, &x.1, &x.2, &x.3, x.4, x.5)
                            == (&s.0, &s.1, &s.2, &s.3, s.4, s.5)
                            && x.6 <= s.6),
                        "kernel sample {s:?} is not one of the user-space engine's"
                    );
                }
            }
            Ok(())
        })
        .unwrap();
}

/// Witness: the ring engine's `--aggregate` lines on the same file. The kernel's
/// histograms, read per interval of capture time as the file is replayed through the
/// programs, give the same lines but for the engine that made them.
#[test]
fn the_cli_aggregates_a_file_alike_on_both_engines() {
    let _busy = common::serial::busy();
    if !common::privileged("passive_bpf::cli_aggregate") {
        return;
    }
    let file = common::corpus("crr-gw.pcapng.gz");
    let run = |engine: &str| {
        let o = std::process::Command::new(common::bin())
            .args([
                "passive",
                "-r",
                file.to_str().unwrap(),
                "--json",
                "--method",
                "both",
            ])
            .args([
                "--aggregate",
                "1s",
                "--aggregate-prefix",
                "32,128",
                "--engine",
                engine,
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        common::assert_schema_lines(&String::from_utf8(o.stdout).unwrap())
            .into_iter()
            .map(|mut l| {
                assert_eq!(l["engine"], engine);
                l.as_object_mut().unwrap().remove("engine");
                l
            })
            .collect::<Vec<_>>()
    };
    let (ring, bpf) = (run("ring"), run("bpf"));
    assert!(ring.len() > 4, "{ring:?}");
    assert_eq!(ring, bpf);
}

/// An Ethernet frame of a whole IPv4 TCP segment with the timestamp option: `len`
/// payload bytes (real bytes, as a jumbo link or GRO hands them to a capture).
fn whole_frame(client: bool, seq: u32, ack: u32, len: usize, ts: (u32, u32)) -> Vec<u8> {
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&[0x08, 0x00]);
    let total = 20 + 32 + len;
    let (c, s) = ([10u8, 0, 0, 1], [10u8, 0, 0, 2]);
    let (src, dst) = if client { (c, s) } else { (s, c) };
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&u16::try_from(total).unwrap().to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    let (sp, dp): (u16, u16) = if client { (40000, 80) } else { (80, 40000) };
    f.extend_from_slice(&sp.to_be_bytes());
    f.extend_from_slice(&dp.to_be_bytes());
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend_from_slice(&ack.to_be_bytes());
    f.extend_from_slice(&[8 << 4, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
    f.extend_from_slice(&[1, 1, 8, 10]);
    f.extend_from_slice(&ts.0.to_be_bytes());
    f.extend_from_slice(&ts.1.to_be_bytes());
    f.extend(std::iter::repeat_n(0x5a, len));
    f
}

/// Witness: the ring engine on the same file, and arithmetic. A capture of jumbo
/// (8 948-byte) and GRO (60 000-byte) segments, past the 3 700 bytes the kernel's test
/// run builds an sk_buff of: every frame is replayed (cut to its headers) and both
/// engines give the same 40 samples, 1 ms each (the server answers each segment 1 ms
/// after it).
#[test]
fn the_kernel_engine_reads_jumbo_and_gro_captures_as_the_ring_does() {
    let _busy = common::serial::busy();
    if !common::privileged("passive_bpf::jumbo") {
        return;
    }
    let mut pcap = Vec::new();
    for x in [0xa1b2_c3d4u32, 0x0002_0004, 0, 0, 262_144, 1] {
        match x {
            0x0002_0004 => pcap.extend_from_slice(&[2, 0, 4, 0]),
            _ => pcap.extend_from_slice(&x.to_le_bytes()),
        }
    }
    let mut record = |t_us: u64, f: &[u8]| {
        pcap.extend_from_slice(&u32::try_from(t_us / 1_000_000).unwrap().to_le_bytes());
        pcap.extend_from_slice(&u32::try_from(t_us % 1_000_000).unwrap().to_le_bytes());
        let n = u32::try_from(f.len()).unwrap().to_le_bytes();
        pcap.extend_from_slice(&n);
        pcap.extend_from_slice(&n);
        pcap.extend_from_slice(f);
    };
    let (mut c_seq, s_seq) = (1_000u32, 5_000u32);
    let mut t = 1_700_000_000_000_000u64;
    for i in 0..20u32 {
        let len = if i % 2 == 0 { 8_948 } else { 60_000 };
        record(t, &whole_frame(true, c_seq, s_seq, len, (100 + i, 900 + i)));
        c_seq = c_seq.wrapping_add(len as u32);
        record(
            t + 1_000,
            &whole_frame(false, s_seq, c_seq, 0, (1_000 + i, 100 + i)),
        );
        t += 10_000;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jumbo.pcap");
    std::fs::write(&file, &pcap).unwrap();
    let run = |engine: &str| {
        let o = std::process::Command::new(common::bin())
            .args(["passive", "-r", file.to_str().unwrap(), "--method", "both"])
            .args(["--json", "--engine", engine])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{engine}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let mut lines: Vec<serde_json::Value> =
            common::assert_schema_lines(&String::from_utf8(o.stdout).unwrap());
        lines.sort_by_key(|l| l.to_string());
        lines
    };
    let (ring, bpf) = (run("ring"), run("bpf"));
    assert_eq!(ring.len(), 40, "{ring:?}");
    for l in &ring {
        assert_eq!(l["rtt_us"].as_f64(), Some(1000.0), "{l}");
    }
    assert_eq!(ring, bpf);
}

/// A running `rttlab agent --passive-iface` in a namespace, killed when dropped.
struct Agent(std::process::Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `metric{labels} value` lines of an agent's scrape whose name is `name`, as
/// (labels, value).
fn scrape(ns: &str, port: u16, name: &str) -> Vec<(String, f64)> {
    let o = common::NetnsPair::exec(
        ns,
        &[
            "curl",
            "-sf",
            "--max-time",
            "5",
            &format!("http://127.0.0.1:{port}/metrics"),
        ],
    )
    .output()
    .expect("curl");
    let mut out = Vec::new();
    for l in String::from_utf8_lossy(&o.stdout).lines() {
        let Some((series, value)) = l.rsplit_once(' ') else {
            continue;
        };
        let (metric, labels) = series.split_once('{').unwrap_or((series, ""));
        if metric == name {
            let v = value.parse().unwrap_or(f64::NAN);
            out.push((labels.trim_end_matches('}').to_owned(), v));
        }
    }
    out
}

/// The agent's passive layers on either engine count, per peer and layer, the samples
/// the user-space engine takes on the same frames from the file (the witness: `Analyzer`
/// with the agent's rules, only samples a peer answered across the network), and the
/// two engines' sums of those round trips agree (the kernel's receive stamps are on,
/// so both time each frame by the same stamp). The corpus's IPv4 and IPv6
/// request/response captures are replayed once through a veth into a namespace where
/// both agents watch the interface at once.
#[test]
fn the_agents_passive_layers_count_on_both_engines_what_the_file_gives() {
    let _busy = common::serial::busy();
    if !common::privileged("passive_bpf::agent_engines") {
        return;
    }
    let pair = common::NetnsPair::new();
    let dev_b = far_end(&pair);
    let _stamps = receive_stamps_on();
    let captures = ["rr-v4-gw.pcap.gz", "rr-v6-gw.pcapng.gz"];
    let peers: [IpAddr; 4] = [
        "198.18.0.1".parse().unwrap(),
        "198.18.0.2".parse().unwrap(),
        "2001:2::1".parse().unwrap(),
        "2001:2::2".parse().unwrap(),
    ];
    let ports = [12866u16, 44159, 5001, 44489, 37239];
    // The witness, per (peer address, layer).
    let cfg = Config {
        ts: true,
        seq: true,
        filter: rttlab::passive::Filter {
            ports: ports.to_vec(),
            ..Default::default()
        },
        ..Config::default()
    };
    let mut want: std::collections::BTreeMap<(IpAddr, String), u64> = Default::default();
    for name in captures {
        let (u, _) = user(name, &cfg);
        for (method, host, _, place, ..) in u.samples {
            let ip = host.parse::<std::net::SocketAddr>().unwrap().ip();
            if place == "Network" && peers.contains(&ip) {
                *want.entry((ip, format!("passive_{method}"))).or_default() += 1;
            }
        }
    }
    assert!(want.len() >= 4, "the captures' peers answer: {want:?}");
    let state = tempfile::tempdir().unwrap();
    let peers_file = state.path().join("peers.json");
    let targets: Vec<String> = peers
        .iter()
        .map(|a| format!("\"{}\"", std::net::SocketAddr::new(*a, 12866)))
        .collect();
    std::fs::write(
        &peers_file,
        format!("[{{\"targets\": [{}]}}]", targets.join(",")),
    )
    .unwrap();
    let port_list = ports.map(|p| p.to_string()).join(",");
    let start = |engine: &str, metrics: u16| {
        let child = common::NetnsPair::exec(&pair.b, &[common::bin().to_str().unwrap(), "agent"])
            .arg("--peers-file")
            .arg(&peers_file)
            .args(["--probes", "icmp", "--interval", "1s"])
            .args(["--metrics-listen", &format!("127.0.0.1:{metrics}")])
            .args(["--listen", &format!("127.0.0.1:{}", metrics + 10)])
            .args(["--passive-iface", &dev_b, "--passive-port", &port_list])
            .args(["--passive-engine", engine, "--passive-rate-limit", "0"])
            .env("RTTLAB_STATE_DIR", state.path().join(engine))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        Agent(child)
    };
    let engines = [("bpf", 19_901u16), ("ring", 19_902)];
    let _agents: Vec<Agent> = engines.iter().map(|(e, p)| start(e, *p)).collect();
    for (engine, port) in engines {
        let t0 = std::time::Instant::now();
        while !scrape(&pair.b, port, "rttlab_passive_engine_info")
            .iter()
            .any(|(l, v)| l.contains(&format!("engine=\"{engine}\"")) && *v == 1.0)
        {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "{engine}: never ready"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let mut sent = 0u64;
    for name in captures {
        let frames: Vec<Vec<u8>> = ethernet_frames(name).into_iter().map(|x| x.1).collect();
        sent += frames.len() as u64;
        send_frames(&pair.a, &pair.dev_a, &frames);
    }
    // Until each engine has seen every frame (the in-kernel one's counters are read
    // once a second) and its counts stand still.
    let counts = |port: u16| -> std::collections::BTreeMap<(IpAddr, String), (u64, f64)> {
        let mut m = std::collections::BTreeMap::new();
        let sums = scrape(&pair.b, port, "rttlab_rtt_seconds_sum");
        for (labels, n) in scrape(&pair.b, port, "rttlab_rtt_seconds_count") {
            let field = |k: &str| {
                labels
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(&format!("{k}=\"")))
                    .map(|v| v.trim_end_matches('"').to_owned())
            };
            let (Some(peer), Some(layer)) = (field("peer"), field("layer")) else {
                continue;
            };
            if !layer.starts_with("passive_") || n == 0.0 {
                continue;
            }
            let ip = peer.parse::<std::net::SocketAddr>().unwrap().ip();
            let sum = sums
                .iter()
                .find(|(l, _)| *l == labels)
                .map_or(f64::NAN, |x| x.1);
            m.insert((ip, layer), (n as u64, sum));
        }
        m
    };
    let mut got = Vec::new();
    for (engine, port) in engines {
        let t0 = std::time::Instant::now();
        let (mut last, mut still) = (None, 0);
        loop {
            let seen: f64 = scrape(&pair.b, port, "rttlab_passive_packets_total")
                .iter()
                .map(|x| x.1)
                .sum();
            let now = counts(port);
            if seen as u64 >= sent && last.as_ref() == Some(&now) {
                still += 1;
                if still >= 3 {
                    break;
                }
            } else {
                still = 0;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "{engine}: {seen} of {sent} frames seen; {now:?}"
            );
            last = Some(now);
            std::thread::sleep(Duration::from_millis(500));
        }
        let dropped: f64 = scrape(&pair.b, port, "rttlab_passive_dropped_total")
            .iter()
            .map(|x| x.1)
            .sum();
        assert_eq!(dropped, 0.0, "{engine} dropped samples or frames");
        let c = last.unwrap();
        let n: std::collections::BTreeMap<_, _> = c.iter().map(|(k, v)| (k.clone(), v.0)).collect();
        assert_eq!(n, want, "{engine}: per peer and layer, against the file");
        got.push(c);
    }
    for (key, (n, kernel_sum)) in &got[0] {
        let ring_sum = got[1][key].1;
        assert!(
            (kernel_sum - ring_sum).abs() <= 1e-9 * *n as f64 + 1e-12 * ring_sum,
            "{key:?}: sums of {n} round trips, kernel {kernel_sum}, ring {ring_sum}"
        );
    }
}

/// A stderr nobody reads (a pipe already full) does not hold the run before it
/// measures: the start line is left out rather than waited on. Witness: sample lines on
/// stdout for loopback TCP sent while stderr stays full, on either engine (before,
/// the run blocked writing its start line, with the programs attached).
#[test]
fn a_full_stderr_does_not_hold_the_run_before_it_measures() {
    let _busy = common::serial::busy();
    use std::io::{BufRead, Read, Write};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    if !common::privileged("passive_bpf::full_stderr") {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = s;
                let mut b = [0u8; 64];
                while let Ok(n) = s.read(&mut b) {
                    if n == 0 || s.write_all(&b[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    for engine in ["bpf", "ring"] {
        let mut fds = [0; 2];
        // SAFETY: a fresh pipe; both ends owned below.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: the descriptors pipe2 just made, each owned once.
        let (read_end, write_end) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // Filled without blocking, then blocking again (the flag is the description's,
        // which the child shares).
        let w = write_end.as_raw_fd();
        // SAFETY: fcntl and write on our own descriptor and buffer.
        unsafe {
            let flags = libc::fcntl(w, libc::F_GETFL);
            libc::fcntl(w, libc::F_SETFL, flags | libc::O_NONBLOCK);
            let chunk = [b'x'; 4096];
            while libc::write(w, chunk.as_ptr().cast(), chunk.len()) > 0 {}
            libc::fcntl(w, libc::F_SETFL, flags);
        }
        let mut child = std::process::Command::new(common::bin())
            .args(["passive", "-i", "lo", "--engine", engine, "--json"])
            .args(["--port", &port.to_string(), "--duration", "30"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::from(write_end))
            .spawn()
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let t0 = std::time::Instant::now();
        let mut sampled = false;
        while !sampled && t0.elapsed() < Duration::from_secs(20) {
            let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            for _ in 0..5 {
                c.write_all(b"ping").unwrap();
                let mut b = [0u8; 4];
                c.read_exact(&mut b).unwrap();
            }
            sampled = rx.recv_timeout(Duration::from_millis(500)).is_ok();
        }
        // SAFETY: signalling the child this test started.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        // Its last lines go to stderr: read the pipe so it can end.
        let mut drain = std::fs::File::from(read_end);
        let reader = std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = drain.read_to_end(&mut sink);
        });
        let status = child.wait().unwrap();
        reader.join().unwrap();
        assert!(sampled, "{engine}: no sample line while stderr was full");
        assert!(status.success(), "{engine}: {status:?}");
    }
}
