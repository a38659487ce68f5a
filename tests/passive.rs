//! The passive engines on the committed corpus (tests/corpus, made from real Linux TCP
//! traffic by tests/corpus/generate.py), checked against what pping and tshark
//! reported on the same files (their outputs are committed beside the captures).

use crate::common;

use crate::common::{bin, privileged};
use rttlab::capture::CaptureReader;
use rttlab::passive::flow::FlowEnd;
use rttlab::passive::sampler::SamplerConfig;
use rttlab::passive::{seq, ts, Analyzer, Config, Counters, Method, Place, Sample, Sink};
use rttlab::wire::LinkType;
use std::process::Command;

use crate::common::{corpus, corpus_bytes as capture_bytes};

#[derive(Default)]
struct Collect(Vec<Sample>);

impl Sink for Collect {
    fn sample(&mut self, s: &Sample) {
        self.0.push(*s);
    }
    fn flow_done(&mut self, _f: &FlowEnd) {}
}

fn analyse(name: &str, cfg: Config) -> (Vec<Sample>, Counters, Analyzer) {
    let bytes = capture_bytes(name);
    let mut r = CaptureReader::new(&bytes[..]).unwrap();
    let mut a = Analyzer::new(cfg);
    let mut sink = Collect::default();
    while let Some(p) = r.next_packet().unwrap() {
        a.packet(
            p.ts_ns,
            LinkType::from_number(p.link).unwrap(),
            p.data,
            &mut sink,
        );
    }
    a.finish(&mut sink);
    let c = a.counters();
    (sink.0, c, a)
}

fn ts_only(record: ts::Record) -> Config {
    Config {
        ts: true,
        seq: false,
        ts_record: record,
        ..Config::default()
    }
}

fn seq_only(rules: seq::Rules) -> Config {
    Config {
        ts: false,
        seq: true,
        seq_rules: rules,
        ..Config::default()
    }
}

/// "SECONDS.FRACTION" as integer ns, exactly.
fn ns_of(decimal: &str) -> u64 {
    let (s, f) = decimal.split_once('.').unwrap_or((decimal, "0"));
    let mut frac = f.to_string();
    frac.truncate(9);
    while frac.len() < 9 {
        frac.push('0');
    }
    s.parse::<u64>().unwrap() * 1_000_000_000 + frac.parse::<u64>().unwrap()
}

/// pping -m lines: (time µs, rtt µs, flow).
fn pping_samples(name: &str) -> Vec<(u64, u64, String)> {
    std::fs::read_to_string(corpus(name))
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                ns_of(f[0]) / 1000,
                ns_of(f[1]) / 1000,
                f[f.len() - 1].to_string(),
            )
        })
        .collect()
}

const CAPTURES: [&str; 6] = [
    "rr-v4-gw.pcap.gz",
    "rr-v4-host.pcap.gz",
    "rr-v6-gw.pcapng.gz",
    "bulk-loss-gw.pcap.gz",
    "rr-fast-gw.pcap.gz",
    "crr-gw.pcapng.gz",
];

fn stem(capture: &str) -> &str {
    capture.split('.').next().unwrap()
}

#[test]
fn ts_engine_under_pppings_rule_reports_what_pping_reports() {
    let _busy = common::serial::busy();
    for cap in CAPTURES {
        // pping forgets a flow after 300 s of silence (flowMaxIdle), rttlab by default
        // after 10 s: the control connection of crr-gw is silent for 14 s.
        let cfg = Config {
            idle_ns: 300_000_000_000,
            ..ts_only(ts::Record::Any)
        };
        let (samples, c, _) = analyse(cap, cfg);
        assert_eq!(c.samples_ts as usize, samples.len());
        // pping reads through libtins, which drops IPv6 packets the snap length cut:
        // in the IPv6 capture only the control connection's larger messages are cut,
        // so its samples are compared on the test connection alone.
        let kept = |flow: &str| !(cap.starts_with("rr-v6") && flow.contains(":12866"));
        let ours: Vec<(u64, u64, String)> = samples
            .iter()
            .map(|s| {
                (
                    s.ts_ns / 1000,
                    s.rtt_ns / 1000,
                    format!("{}+{}", s.host, s.peer),
                )
            })
            .filter(|o| kept(&o.2))
            .collect();
        let theirs: Vec<_> = pping_samples(&format!("{}.pping.txt", stem(cap)))
            .into_iter()
            .filter(|t| kept(&t.2))
            .collect();
        assert!(
            theirs.len() > 300,
            "{cap}: pping found only {}",
            theirs.len()
        );
        assert_eq!(ours.len(), theirs.len(), "{cap}: sample count");
        for (o, t) in ours.iter().zip(&theirs) {
            // pping keeps capture times as doubles relative to the first packet and
            // prints them truncated: 1 µs either way.
            assert_eq!(o.2, t.2, "{cap}: flow of {o:?} vs {t:?}");
            assert!(o.0.abs_diff(t.0) <= 1, "{cap}: time {o:?} vs {t:?}");
            assert!(o.1.abs_diff(t.1) <= 1, "{cap}: rtt {o:?} vs {t:?}");
        }
    }
}

/// pping's own lines, text and `-m`, character for character: the TS engine under
/// pping's rule printed in pping's arithmetic (capture times as doubles after the
/// first usable packet's second, so 9.99999…µs prints "10.00us" as pping prints it)
/// and with pping's byte counts. Witness: pping itself, its `-r FILE -q` (text, made
/// with TZ=UTC) and `-r FILE -q -m` output on the same captures, committed beside
/// them (tests/corpus/generate.py). The IPv6 capture's control connection is left out
/// as above: libtins dropped its cut packets, so pping's counts there miss them.
#[test]
fn passive_prints_ppings_lines_to_the_character() {
    let _busy = common::serial::busy();
    let flow = |l: &str| l.rsplit(' ').next().unwrap_or("").to_string();
    for cap in CAPTURES {
        let kept = |l: &&str| !(cap.starts_with("rr-v6") && flow(l).contains(":12866"));
        let text =
            String::from_utf8(capture_bytes(&format!("{}.pping-text.txt.gz", stem(cap)))).unwrap();
        let machine = std::fs::read_to_string(corpus(&format!("{}.pping.txt", stem(cap)))).unwrap();
        for (flag, theirs) in [(None, &text), (Some("-m"), &machine)] {
            let path = corpus(cap);
            let mut args = vec![
                "passive",
                "-r",
                path.to_str().unwrap(),
                "--method",
                "ts",
                "--ts-rule",
                "pping",
                // pping forgets a flow after 300 s of silence (flowMaxIdle).
                "--idle-timeout",
                "300s",
            ];
            args.extend(flag);
            let out = Command::new(bin())
                .env("TZ", "UTC")
                .args(&args)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let ours = String::from_utf8(out.stdout).unwrap();
            let ours: Vec<&str> = ours.lines().filter(kept).collect();
            let theirs: Vec<&str> = theirs.lines().filter(kept).collect();
            assert!(
                theirs.len() > 300,
                "{cap}: pping printed only {}",
                theirs.len()
            );
            let differ: Vec<_> = ours
                .iter()
                .zip(&theirs)
                .filter(|(o, t)| o != t)
                .take(5)
                .collect();
            assert!(
                differ.is_empty(),
                "{cap} {flag:?}: ours ≠ pping's: {differ:#?}"
            );
            assert_eq!(ours.len(), theirs.len(), "{cap} {flag:?}: line count");
        }
    }
}

/// tshark's lines: frame time and ack_rtt, both exact in ns.
fn tshark_samples(name: &str) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = std::fs::read_to_string(corpus(name))
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (ns_of(f[1]), ns_of(f[2]))
        })
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn seq_engine_under_wiresharks_rules_reports_what_tshark_reports_to_the_nanosecond() {
    let _busy = common::serial::busy();
    for cap in CAPTURES {
        let (samples, _, _) = analyse(cap, seq_only(seq::Rules::WIRESHARK));
        let mut ours: Vec<(u64, u64)> = samples.iter().map(|s| (s.ts_ns, s.rtt_ns)).collect();
        ours.sort_unstable();
        let theirs = tshark_samples(&format!("{}.tshark.txt", stem(cap)));
        assert!(
            theirs.len() > 300,
            "{cap}: tshark found only {}",
            theirs.len()
        );
        assert_eq!(ours, theirs, "{cap}");
    }
}

#[test]
fn seq_engine_departs_from_wireshark_only_by_karn_and_sack() {
    let _busy = common::serial::busy();
    // The lossy bulk transfer: nftables dropped 3 % of the data on its way into b.
    let cap = "bulk-loss-gw.pcap.gz";
    let (samples, c, _) = analyse(cap, seq_only(seq::Rules::RTTLAB));
    let theirs = tshark_samples(&format!("{}.tshark.txt", stem(cap)));
    assert!(c.retransmissions >= 10, "{c:?}");
    assert!(c.karn_skipped > 0 && c.sack_timed > 0, "{c:?}");
    // Arithmetic: Wireshark's samples, less those Karn's rule or an earlier SACK
    // forbids, plus those taken at SACK blocks.
    assert_eq!(
        samples.len() as u64,
        theirs.len() as u64 - c.karn_skipped - c.sacked_skipped + c.sack_timed
    );
    // Every sample tshark does not have is one taken at a SACK.
    let extra = samples
        .iter()
        .filter(|s| theirs.binary_search(&(s.ts_ns, s.rtt_ns)).is_err())
        .count() as u64;
    assert_eq!(extra, c.sack_timed);
    // Wireshark's worst samples time a retransmitted segment from its first copy
    // (an RTO and more); rttlab's stay near the path RTT.
    let worst_ws = theirs.iter().map(|t| t.1).max().unwrap();
    let worst = samples.iter().map(|s| s.rtt_ns).max().unwrap();
    assert!(worst < worst_ws, "rttlab {worst} vs wireshark {worst_ws}");
    // Without loss both rules agree.
    let (clean, c, _) = analyse("rr-v4-gw.pcap.gz", seq_only(seq::Rules::RTTLAB));
    assert_eq!(c.retransmissions, 0);
    assert_eq!(clean.len(), tshark_samples("rr-v4-gw.tshark.txt").len());
}

#[test]
fn the_data_rule_drops_pure_ack_tsvals_and_never_reports_more_than_pping() {
    let _busy = common::serial::busy();
    // Request/response: where both rules time the same echo, rttlab's TSval is the
    // request's (a data segment), pping's may be an earlier pure ACK's: never longer.
    let (data, _, _) = analyse("rr-v4-gw.pcap.gz", ts_only(ts::Record::Data));
    let (any, _, _) = analyse("rr-v4-gw.pcap.gz", ts_only(ts::Record::Any));
    let mut same = 0;
    for d in &data {
        if let Some(a) = any.iter().find(|a| a.ts_ns == d.ts_ns && a.host == d.host) {
            assert!(d.rtt_ns <= a.rtt_ns, "{d:?} vs {a:?}");
            same += 1;
        }
    }
    assert!(
        same as f64 > 0.98 * data.len() as f64,
        "{same} of {}",
        data.len()
    );
    // The handshake: the SYN's TSval is remembered, so the SYN-ACK gives a sample
    // (one per connection: the control and the data connection).
    let syn_acks = data
        .iter()
        .filter(|d| !any.iter().any(|a| a.ts_ns == d.ts_ns && a.host == d.host))
        .count();
    assert!(syn_acks >= 2, "{syn_acks}");
    // Bulk: the receiver sends only pure ACKs, so the data rule has no samples of
    // the sender (capture → a → capture); pping's rule has them.
    let (data, _, _) = analyse("bulk-loss-gw.pcap.gz", ts_only(ts::Record::Data));
    let (any, _, _) = analyse("bulk-loss-gw.pcap.gz", ts_only(ts::Record::Any));
    let sender = |v: &[Sample]| v.iter().filter(|s| s.host.port != 5001).count();
    assert!(sender(&data) <= 2, "{}", sender(&data));
    assert!(sender(&any) > 100, "{}", sender(&any));
}

fn median_us(v: &mut [u64]) -> f64 {
    v.sort_unstable();
    v[v.len() / 2] as f64 / 1e3
}

#[test]
fn an_end_host_capture_labels_the_hosts_own_answers_as_local() {
    let _busy = common::serial::busy();
    // The same TCP_RR traffic, captured on host a (198.18.0.1) and on the router.
    // The lab delays each direction by 1 ms in the router.
    let a: std::net::IpAddr = "198.18.0.1".parse().unwrap();
    let cfg = Config {
        local: vec![a],
        ..ts_only(ts::Record::Data)
    };
    let (host, _, _) = analyse("rr-v4-host.pcap.gz", cfg.clone());
    let data = |s: &&Sample| s.host.port != 12866 && s.peer.port != 12866;
    let mut net: Vec<u64> = host
        .iter()
        .filter(data)
        .filter(|s| s.place == Place::Network)
        .map(|s| s.rtt_ns)
        .collect();
    let mut local: Vec<u64> = host
        .iter()
        .filter(data)
        .filter(|s| s.place == Place::LocalHost)
        .map(|s| s.rtt_ns)
        .collect();
    assert!(local.len() > 500 && net.len() > 500);
    // Witness: the lab's configured delay, 1 ms each way: no loop through b can be
    // shorter than 2 ms, and the fastest come close to it.
    let n_min = *net.iter().min().unwrap() as f64 / 1e3;
    assert!((2000.0..2300.0).contains(&n_min), "network min {n_min} µs");
    // a's own answers: an immediate ACK takes microseconds, an echo carried by the
    // next request waits out the client's 1 ms pause (`-w 1ms`).
    let l_min = *local.iter().min().unwrap() as f64 / 1e3;
    assert!(l_min < 100.0, "local min {l_min} µs");
    let l = median_us(&mut local);
    let n = median_us(&mut net);
    assert!(l >= 1000.0 && l < n, "local median {l} µs, network {n} µs");
    assert!(host
        .iter()
        .all(|s| (s.place == Place::LocalHost) == (s.host.ip() == a)));
    // On the router nothing is local; each loop holds one emulated direction.
    let (gw, _, _) = analyse("rr-v4-gw.pcap.gz", ts_only(ts::Record::Data));
    assert!(gw.iter().all(|s| s.place == Place::Network));
    let to_b: Vec<u64> = gw
        .iter()
        .filter(data)
        .filter(|s| s.host.ip() != a)
        .map(|s| s.rtt_ns)
        .collect();
    // The router captures before its emulator: its loop to b holds one emulated
    // direction (1 ms) and b's answer.
    let b_min = *to_b.iter().min().unwrap() as f64 / 1e3;
    assert!(
        (1000.0..1300.0).contains(&b_min),
        "router → b → router min {b_min} µs"
    );
}

#[test]
fn the_sampled_metric_reads_a_sub_millisecond_rtt_as_half_a_millisecond() {
    let _busy = common::serial::busy();
    // Seed 000: TCP saw 0.1–0.2 ms, the cloud metric's median said 0.5 ms. Here the
    // "VM" is host a: its requests going out, the responses' ACKs coming back.
    let cfg = Config {
        ts: false,
        seq: true,
        local: vec!["198.18.0.1".parse().unwrap()],
        sampler: Some(SamplerConfig {
            one_in: 2,
            period_ns: 60_000_000_000,
            seed: 1,
        }),
        ..Config::default()
    };
    let (samples, _, a) = analyse("rr-fast-gw.pcap.gz", cfg);
    let mut exact: Vec<u64> = samples
        .iter()
        .filter(|s| s.method == Method::Seq && s.place == Place::Network)
        .map(|s| s.rtt_ns)
        .collect();
    let truth = median_us(&mut exact);
    assert!(truth < 300.0, "true median {truth} µs");
    let p = &a.sampler_periods().unwrap()[0];
    // 1 in 2 data segments and 1 in 2 of their ACKs: about a quarter of 1000.
    assert!((150..350).contains(&p.samples), "{p:?}");
    assert!(p.buckets[0] as f64 > 0.8 * p.samples as f64, "{p:?}");
    let m = p.median_ms.unwrap();
    assert!((0.5..0.65).contains(&m), "metric median {m} ms");
    assert!(p.exact_median_ms.unwrap() < 0.3, "{p:?}");
}

#[test]
fn counters_account_for_every_packet_and_flows_close() {
    let _busy = common::serial::busy();
    let (_, c, a) = analyse("crr-gw.pcapng.gz", Config::default());
    let skipped: u64 = c.skipped.iter().map(|x| x.1).sum();
    assert_eq!(c.packets, c.tcp + c.not_tcp + c.filtered + skipped);
    // 2000 short connections and the control connection, each closed by its FINs.
    // The control connection is silent for 14 s while the connections run, longer
    // than the 10 s idle timeout: forgotten once, then seen again (2002 created).
    assert_eq!(
        (c.flows.created, c.flows.closed, c.flows.expired_idle),
        (2002, 2001, 1),
        "{c:?}"
    );
    assert!(c.flows.peak < 50, "flows held at once: {}", c.flows.peak);
    assert_eq!(a.active_flows(), 0);
}

fn rttlab(args: &[&str]) -> std::process::Output {
    Command::new(bin()).args(args).output().unwrap()
}

#[test]
fn the_cli_reads_gzip_stdin_and_prints_pping_lines_summaries_and_json() {
    let _busy = common::serial::busy();
    let file = corpus("rr-v4-gw.pcap.gz");
    let f = file.to_str().unwrap();
    let o = rttlab(&["passive", "-r", f]);
    assert!(o.status.success());
    let text = String::from_utf8(o.stdout).unwrap();
    let (data, _, _) = analyse("rr-v4-gw.pcap.gz", ts_only(ts::Record::Data));
    assert_eq!(text.lines().count(), data.len());
    // TIME RTT MINRTT FLOW, as pping prints them.
    let first = text.lines().next().unwrap();
    let cols: Vec<&str> = first.split_whitespace().collect();
    assert_eq!(cols.len(), 4, "{first}");
    assert_eq!(cols[0].len(), 8);
    assert!(cols[1].ends_with("s") && cols[3].contains('+'), "{first}");
    // stdin, uncompressed, gives the same lines.
    let raw = capture_bytes("rr-v4-gw.pcap.gz");
    let mut child = Command::new(bin())
        .args(["passive", "-r", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let w = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &raw));
    let o2 = child.wait_with_output().unwrap();
    w.join().unwrap().unwrap();
    assert_eq!(String::from_utf8(o2.stdout).unwrap(), text);
    // JSON lines with both methods; the summary table.
    let o = rttlab(&["passive", "-r", f, "--json", "--method", "both"]);
    let lines: Vec<serde_json::Value> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.iter().any(|v| v["method"] == "ts"));
    assert!(lines.iter().any(|v| v["method"] == "seq"));
    assert!(lines
        .iter()
        .all(|v| v["place"] == "network" && v["rtt_us"].as_f64().unwrap() > 0.0));
    let o = rttlab(&[
        "passive",
        "-r",
        f,
        "-q",
        "--summary",
        "--histogram",
        "--method",
        "both",
        "--port",
        "12866",
    ]);
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(out.contains("P99_us") && out.contains("RETRANS"), "{out}");
    assert!(
        out.contains("Histogram, ts samples, network") && out.contains("Histogram, seq samples"),
        "{out}"
    );
    assert!(
        !out.contains(":44"),
        "the port filter let other flows through: {out}"
    );
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(err.contains("filtered out"), "{err}");
}

#[test]
fn bad_input_is_one_line_keeps_what_was_read_and_fails() {
    let _busy = common::serial::busy();
    let dir = tempfile::tempdir().unwrap();
    // Cut mid-record: the samples before the cut are printed, then where and why.
    let raw = capture_bytes("rr-v4-gw.pcap.gz");
    let cut = dir.path().join("cut.pcap");
    std::fs::write(&cut, &raw[..raw.len() / 2 + 7]).unwrap();
    let o = rttlab(&["passive", "-r", cut.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(err.contains("byte") && err.contains("were read"), "{err}");
    assert!(String::from_utf8(o.stdout).unwrap().lines().count() > 100);
    // Not a capture; a missing file; an unsupported link type (802.11 radiotap).
    let junk = dir.path().join("junk");
    std::fs::write(&junk, b"hello, this is not a capture").unwrap();
    let mut radiotap = Vec::new();
    for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65535, 127] {
        radiotap.extend_from_slice(&v.to_le_bytes());
    }
    radiotap.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 1, 2, 3, 4]);
    let rt = dir.path().join("radiotap.pcap");
    std::fs::write(&rt, radiotap).unwrap();
    for (args, says) in [
        (vec!["passive", "-r", junk.to_str().unwrap()], "not a pcap"),
        (vec!["passive", "-r", "/nonexistent.pcap"], "cannot open"),
        (vec!["passive", "-r", rt.to_str().unwrap()], "link type 127"),
        (vec!["passive", "-i", "no-such-if0"], "no interface named"),
        (vec!["passive", "-r", "x", "--sampler", "1/0"], "1/N"),
    ] {
        let o = rttlab(&args);
        assert!(!o.status.success(), "{args:?}");
        let err = String::from_utf8(o.stderr).unwrap();
        let last = err.lines().last().unwrap_or("");
        assert!(last.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn live_capture_in_a_namespace_matches_the_same_traffic_captured_by_tcpdump() {
    let _busy = common::serial::busy();
    live_matches_tcpdump("ring", "0 dropped");
}

/// The in-kernel engine on the same traffic, in both directions (its egress frames are
/// timed at the tc hook, tcpdump's at its tap: on a veth without a queue, within a
/// µs of each other).
#[test]
fn the_in_kernel_engine_live_matches_the_same_traffic_captured_by_tcpdump() {
    let _busy = common::serial::busy();
    live_matches_tcpdump("bpf", "in-kernel engine (");
}

fn live_matches_tcpdump(engine: &str, stderr_says: &str) {
    if !privileged(&format!("live_matches_tcpdump {engine}")) {
        return;
    }
    let pair = common::NetnsPair::new();
    let _srv = pair.serve_in_b(pair.b4, 12866, &[]);
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("same.pcap");
    let dump_args = [
        "tcpdump",
        "-U",
        "-B",
        "16384",
        "-s",
        "128",
        "--time-stamp-precision",
        "nano",
        "-i",
        &pair.dev_a,
        "-w",
        pcap.to_str().unwrap(),
        "tcp",
    ];
    let mut dump = common::NetnsPair::exec(&pair.a, &dump_args)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // tcpdump says "listening on" once its socket is bound: from then on it sees
    // every frame (a loaded machine can take longer than any fixed wait to get there).
    let mut dump_err = std::io::BufReader::new(dump.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("listening on") {
        line.clear();
        let n = std::io::BufRead::read_line(&mut dump_err, &mut line).unwrap();
        assert!(n > 0, "tcpdump exited before listening");
    }
    let dump_drain = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut dump_err, &mut s).unwrap();
        s
    });
    let live_args = [
        "passive",
        "-i",
        &pair.dev_a,
        "--netns",
        &pair.a,
        "--duration",
        "60",
        "--json",
        "--method",
        "both",
        "--engine",
        engine,
    ];
    let mut live = Command::new(bin())
        .args(live_args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Drain the pipes while the run goes on: a full pipe would stall the reader and
    // the kernel would drop frames for want of ring blocks.
    let drain = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            r.read_to_end(&mut v).unwrap();
            v
        })
    };
    let out = drain(Box::new(live.stdout.take().unwrap()));
    // The engine says where it listens once its programs or ring are attached: from
    // then on it sees every frame (a fixed 700 ms missed the first two samples under a
    // CPU hog).
    let mut live_err = std::io::BufReader::new(live.stderr.take().unwrap());
    let mut said = String::new();
    while !said.contains("listening on") {
        let n = std::io::BufRead::read_line(&mut live_err, &mut said).unwrap();
        assert!(n > 0, "the live engine ended before listening: {said}");
    }
    let err = drain(Box::new(std::io::Read::chain(
        std::io::Cursor::new(said.into_bytes()),
        live_err,
    )));
    let rr = pair.rttlab_in_a(&["rr", "-H", pair.b4, "-n", "500", "-w", "1ms"]);
    assert!(
        rr.status.success(),
        "{}",
        String::from_utf8_lossy(&rr.stderr)
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    // SAFETY: stopping the processes this test started, live capture first, so
    // tcpdump's file covers everything the live capture saw.
    unsafe { libc::kill(live.id() as i32, libc::SIGINT) };
    let status = live.wait().unwrap();
    common::stop_tcpdump_when_written(dump, &pcap);
    let dump_says = dump_drain.join().unwrap();
    let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
    let err = String::from_utf8(stderr).unwrap();
    assert!(status.success(), "{err}");
    assert!(err.contains(stderr_says), "{err}");
    assert!(!err.contains("lost"), "{err}");
    let parse = |out: &[u8]| -> Vec<serde_json::Value> {
        String::from_utf8_lossy(out)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let samples = parse(&stdout);
    // The capture host is the client: its interface address makes its own answers local.
    let local = samples
        .iter()
        .filter(|v| v["place"] == "local_host")
        .count();
    let net = samples.iter().filter(|v| v["place"] == "network").count();
    assert!(local > 400 && net > 400, "local {local} network {net}");
    // Witness: tcpdump's capture of the same traffic (ns stamps), read from its file.
    let o = rttlab(&[
        "passive",
        "-r",
        pcap.to_str().unwrap(),
        "--json",
        "--method",
        "both",
        "--local",
        pair.a4,
    ]);
    let from_file = parse(&o.stdout);
    let key = |v: &serde_json::Value| common::sample_key(v, "place");
    let a: Vec<_> = samples.iter().map(key).collect();
    let b: Vec<_> = from_file.iter().map(key).collect();
    // tcpdump ran before and after the live capture, so it saw at least the same
    // frames; judge both on the time both surely covered, from 50 ms inside the live
    // capture's first sample to 50 ms before its last. Each bound sits in the widest
    // gap between two live samples in the 10 ms after (before) it: the in-kernel
    // engine stamps a frame this host sends earlier than tcpdump does, by its
    // transmit path, so a bound close to a sample could hold it on one side and not
    // the other (1 698 against 1 700 under a CPU hog); the gap between two
    // transactions (rr -w 1ms) is far wider than that path.
    let mut stamps: Vec<u64> = a.iter().map(|x| x.3).collect();
    stamps.sort_unstable();
    let widest_gap = |from: u64, to: u64| {
        stamps
            .windows(2)
            .filter(|w| w[0] >= from && w[1] <= to)
            .max_by_key(|w| w[1] - w[0])
            .map(|w| w[0] + (w[1] - w[0]) / 2)
            .expect("live samples 50 to 60 ms from the edge")
    };
    let (first, last) = (stamps[0], stamps[stamps.len() - 1]);
    let lo = widest_gap(first + 50_000_000, first + 60_000_000);
    let hi = widest_gap(last - 60_000_000, last - 50_000_000);
    let inside = |v: Vec<_>| -> Vec<_> {
        let mut v: Vec<_> = v
            .into_iter()
            .filter(|x: &common::SampleKey| x.3 > lo && x.3 < hi)
            .collect();
        v.sort();
        v
    };
    let (a, b) = (inside(a), inside(b));
    // 500 transactions give about 2 000 samples (TS and seq, network and local_host);
    // most must be judged. With each bound up to 50 ms further in, 1 488 were.
    assert!(a.len() > 1400, "{} samples inside", a.len());
    if engine == "ring" {
        common::assert_same_samples(&a, &b, &format!("tcpdump: {dump_says}"));
        return;
    }
    // The in-kernel engine stamps a frame this host sends at the tc egress hook, as
    // it enters the device's queue; tcpdump at its tap, as it leaves: later by the
    // host's transmit path (tens of µs here; more behind a queue). A frame that
    // arrives both stamp within tcpdump's usual few µs. So, sample by sample: where
    // the peer answered (place network: sent, then arrived), the same stamp and an
    // RTT longer by the transmit path; where this host answered (local_host: arrived,
    // then sent), a stamp and an RTT earlier and shorter by it; never the other way
    // by more than 10 µs, and never by a millisecond.
    let what = format!("tcpdump: {dump_says}");
    assert_eq!(a.len(), b.len(), "{what}");
    let (us10, ms1) = (10_000i64, 1_000_000i64);
    let wrong: Vec<_> = a
        .iter()
        .zip(&b)
        .filter(|(x, y)| {
            let (dt, dr) = (x.3 as i64 - y.3 as i64, x.4 as i64 - y.4 as i64);
            let fits = match x.2.as_str() {
                "network" => dt.abs() <= us10 && (-us10..ms1).contains(&dr),
                _ => (-ms1..=us10).contains(&dt) && (-ms1..=us10).contains(&dr),
            };
            (&x.0, &x.1, &x.2) != (&y.0, &y.1, &y.2) || !fits
        })
        .collect();
    assert!(
        wrong.len() * 100 <= a.len(),
        "{what}: {} of {} out of place; first {:?}",
        wrong.len(),
        a.len(),
        wrong.first()
    );
}

#[test]
fn live_capture_without_cap_net_raw_says_so_in_one_line() {
    let _busy = common::serial::busy();
    if !privileged("live_capture_without_cap_net_raw_says_so_in_one_line") {
        return;
    }
    // Drop to nobody (setpriv from util-linux): no CAP_NET_RAW.
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(bin())
        .args(["passive", "-i", "lo", "--duration", "1"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("CAP_NET_RAW"), "{err}");
}

/// A capture file cut while `rttlab passive` reads it (tcpdump `-C`/`-W` rotation
/// truncates its oldest file): never a signal, and when the cut came before the end
/// of the read, exit 1 with the cut and its offset named and the samples read so far
/// on stdout — for pcap and for pcapng, whose reader once called the zeros past a cut
/// a corrupt block ("block length 0"). The file is a corpus capture's records repeated
/// to 150 MB and the cut made as soon as the reader has it mapped; a read that
/// finished first is tried again, up to 5 times. Witness: the exit status and what was
/// printed.
#[test]
fn a_capture_cut_while_it_is_read_is_reported_not_fatal() {
    let _busy = common::serial::busy();
    let pcap = capture_bytes("rr-v4-gw.pcap.gz");
    assert_eq!(
        &pcap[..4],
        &0xa1b2_c3d4u32.to_le_bytes(),
        "a little-endian pcap"
    );
    cut_while_read(&pcap, 24);
    // pcapng: the section and interface blocks, then packet blocks (type 6) only.
    let ng = capture_bytes("crr-gw.pcapng.gz");
    let mut first_packet = 0;
    while u32::from_le_bytes(ng[first_packet..first_packet + 4].try_into().unwrap()) != 6 {
        first_packet +=
            u32::from_le_bytes(ng[first_packet + 4..first_packet + 8].try_into().unwrap()) as usize;
    }
    cut_while_read(&ng, first_packet);
}

/// The records after `header_len` of `raw` repeated to 150 MB, read, and cut to a
/// quarter while read: see the test above.
fn cut_while_read(raw: &[u8], header_len: usize) {
    let (header, records) = raw.split_at(header_len);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.cap");
    let mut body = header.to_vec();
    while body.len() < 150 << 20 {
        body.extend_from_slice(records);
    }
    for attempt in 0..5 {
        std::fs::write(&path, &body).unwrap();
        let child = Command::new(bin())
            .args(["passive", "-r"])
            .arg(&path)
            .args(["--method", "ts"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Cut once the reader has the file mapped (/proc/PID/maps names it), not at a
        // fixed time: on a busy machine the child may not have opened it yet, and a
        // file cut before it is opened is only a shorter file.
        let maps = format!("/proc/{}/maps", child.id());
        let t0 = std::time::Instant::now();
        while !std::fs::read_to_string(&maps).is_ok_and(|m| m.contains(path.to_str().unwrap()))
            && t0.elapsed() < std::time::Duration::from_secs(10)
        {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(body.len() as u64 / 4)
            .unwrap();
        let o = child.wait_with_output().unwrap();
        assert!(
            o.status.code().is_some(),
            "killed by a signal: {:?}",
            o.status
        );
        if o.status.success() {
            eprintln!("attempt {attempt}: the read ended before the cut; again");
            continue;
        }
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains("was cut to") && err.contains("bytes while it was read"),
            "{err}"
        );
        assert!(!o.stdout.is_empty(), "the samples before the cut were kept");
        return;
    }
    panic!("in 5 attempts the read always finished before the cut");
}

/// Reading a pipe, each sample line leaves as it is made: with the first 100 packets of
/// a capture written into stdin (their lines are far less than the 64 KiB output
/// buffer) and stdin still open, the first line arrives; before, it waited for the
/// input to close. Witness: the line read from the child's stdout while its input is
/// still open, and the same line the whole file gives as its first.
#[test]
fn a_pipe_gets_its_sample_lines_as_they_are_made() {
    let _busy = common::serial::busy();
    use std::io::{BufRead, Write};
    let whole = capture_bytes("rr-v4-gw.pcap.gz");
    // The pcap header and its first 100 records (16-byte record header + caplen).
    let mut end = 24;
    for _ in 0..100 {
        let caplen = u32::from_le_bytes(whole[end + 8..end + 12].try_into().unwrap()) as usize;
        end += 16 + caplen;
    }
    let raw = &whole[..end];
    let first_of_file = {
        let o = Command::new(bin())
            .args(["passive", "-r"])
            .arg(corpus("rr-v4-gw.pcap.gz"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .next()
            .unwrap()
            .to_owned()
    };
    let mut child = Command::new(bin())
        .args(["passive", "-r", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(raw).unwrap();
    stdin.flush().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(std::time::Duration::from_secs(5));
    drop(stdin);
    let _ = child.wait();
    let line = line.expect("no sample line while the input was still open");
    assert_eq!(line.trim_end(), first_of_file);
}

/// `--summary-interval` against pping on the same capture: pping's own samples
/// (tests/corpus/rr-v4-gw.pping.txt), bucketed into the same 200 ms intervals of
/// capture time, give every (interval, flow direction) the same count, minimum and
/// maximum as rttlab's interval rows (pping's rule, so the samples are pping's one for
/// one; pping prints times to 1 µs, so an interval with a sample within 1 µs of its edge
/// is compared on its count across both neighbours only).
#[test]
fn summary_intervals_agree_with_pping_bucketed_by_time() {
    let _busy = common::serial::busy();
    use std::collections::BTreeMap;
    const LEN_US: u64 = 200_000;
    let o = Command::new(bin())
        .args(["passive", "-r"])
        .arg(corpus("rr-v4-gw.pcap.gz"))
        .args(["-q", "--ts-rule", "pping", "--idle-timeout", "300s"])
        .args(["--summary-interval", "200ms", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut ours: BTreeMap<(u64, String), (u64, u64, u64)> = BTreeMap::new();
    for l in String::from_utf8_lossy(&o.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let start_us = v["interval_start_ns"].as_u64().unwrap() / 1000;
        assert_eq!(
            v["interval_end_ns"].as_u64().unwrap() / 1000,
            start_us + LEN_US
        );
        let flow = format!(
            "{}+{}",
            v["host"].as_str().unwrap(),
            v["peer"].as_str().unwrap()
        );
        let row = (
            v["samples"].as_u64().unwrap(),
            v["min_us"].as_f64().unwrap() as u64,
            v["max_us"].as_f64().unwrap() as u64,
        );
        assert!(ours.insert((start_us, flow), row).is_none(), "{l}");
    }
    let mut theirs: BTreeMap<(u64, String), (u64, u64, u64)> = BTreeMap::new();
    let mut near_edge = std::collections::HashSet::new();
    for (ts_us, rtt_us, flow) in pping_samples("rr-v4-gw.pping.txt") {
        let start = ts_us - ts_us % LEN_US;
        if ts_us % LEN_US <= 1 {
            near_edge.insert((start - LEN_US, flow.clone()));
            near_edge.insert((start, flow.clone()));
        } else if ts_us % LEN_US >= LEN_US - 1 {
            near_edge.insert((start, flow.clone()));
            near_edge.insert((start + LEN_US, flow.clone()));
        }
        let e = theirs.entry((start, flow)).or_insert((0, u64::MAX, 0));
        e.0 += 1;
        e.1 = e.1.min(rtt_us);
        e.2 = e.2.max(rtt_us);
    }
    assert!(theirs.len() > 20, "{} intervals × flows", theirs.len());
    let total = |m: &BTreeMap<(u64, String), (u64, u64, u64)>| m.values().map(|r| r.0).sum::<u64>();
    assert_eq!(total(&ours), total(&theirs));
    let mut compared = 0;
    for (key, t) in &theirs {
        if near_edge.contains(key) {
            continue;
        }
        let o = ours
            .get(key)
            .unwrap_or_else(|| panic!("no row for {key:?}"));
        assert_eq!(o.0, t.0, "{key:?}: samples");
        assert!(
            o.1.abs_diff(t.1) <= 1 && o.2.abs_diff(t.2) <= 1,
            "{key:?}: {o:?} vs {t:?}"
        );
        compared += 1;
    }
    assert!(
        compared + near_edge.len() >= theirs.len() && compared > 20,
        "{compared} compared"
    );
}
