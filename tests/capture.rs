//! The pcap reader and the packet decoder against tcpdump on the same file (root:
//! traffic in namespaces the test makes). Witness: `tcpdump -r` reading the file it
//! wrote, at the file's own precision.

use crate::common::{self, privileged, NetnsPair};
use rttlab::capture::CaptureReader;
use rttlab::wire::{decode, LinkType, Transport};
use std::process::{Command, Stdio};

/// (ns timestamp, ICMP type, sequence) of every packet, as tcpdump prints them.
fn tcpdump_read(file: &std::path::Path, nano: bool) -> Vec<(u64, u8, u16)> {
    let mut c = Command::new("tcpdump");
    c.args(["-r", file.to_str().unwrap(), "-n", "-tt"]);
    if nano {
        c.args(["--time-stamp-precision", "nano"]);
    }
    let o = c.stderr(Stdio::null()).output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| {
            let (ts, rest) = l.split_once(' ').unwrap();
            let (s, frac) = ts.split_once('.').unwrap();
            let scale = if nano { 1 } else { 1000 };
            let ns =
                s.parse::<u64>().unwrap() * 1_000_000_000 + frac.parse::<u64>().unwrap() * scale;
            let kind = if rest.contains("echo request") { 8 } else { 0 };
            let seq = rest
                .split("seq ")
                .nth(1)
                .and_then(|x| x.split(',').next())
                .and_then(|x| x.parse().ok())
                .unwrap();
            (ns, kind, seq)
        })
        .collect()
}

fn ours(file: &std::path::Path) -> Vec<(u64, u8, u16)> {
    let f = std::fs::File::open(file).unwrap();
    let mut r = CaptureReader::new(std::io::BufReader::new(f)).unwrap();
    let mut v = Vec::new();
    while let Some(p) = r.next_packet().unwrap() {
        let link = LinkType::from_number(p.link).unwrap();
        let ip = decode(link, p.data).unwrap();
        if let Transport::Icmp { kind, body, .. } = ip.transport {
            v.push((p.ts_ns, kind, u16::from_be_bytes([body[2], body[3]])));
        }
    }
    v
}

#[test]
fn reads_what_tcpdump_wrote_at_both_precisions() {
    if !privileged("reads_what_tcpdump_wrote_at_both_precisions") {
        return;
    }
    let n = NetnsPair::new();
    let tmp = tempfile::tempdir().unwrap();
    let files = [
        (tmp.path().join("nano.pcap"), true),
        (tmp.path().join("micro.pcap"), false),
    ];
    let dumps: Vec<_> = files
        .iter()
        .map(|(f, nano)| {
            let args: &[&str] = if *nano {
                &["--time-stamp-precision", "nano", "icmp"]
            } else {
                &["icmp"]
            };
            common::Tcpdump::start(Some(&n.a), &n.dev_a, f, args)
        })
        .collect();
    let p = NetnsPair::exec(&n.a, &["ping", "-q", "-c", "20", "-i", "0.01", n.b4])
        .output()
        .unwrap();
    assert!(p.status.success());
    for d in dumps {
        d.stop();
    }
    for (f, nano) in &files {
        let theirs = tcpdump_read(f, *nano);
        let mine = ours(f);
        assert_eq!(mine.len(), 40, "{f:?}");
        assert_eq!(mine, theirs, "{f:?}");
    }
}

/// Each packet of a corpus file as (timestamp ns, link type, frame).
fn frames(file: &std::path::Path) -> Vec<(u64, LinkType, Vec<u8>)> {
    let f = std::fs::File::open(file).unwrap();
    let mut r = CaptureReader::new(std::io::BufReader::new(f)).unwrap();
    let mut v = Vec::new();
    while let Some(p) = r.next_packet().unwrap() {
        v.push((
            p.ts_ns,
            LinkType::from_number(p.link).unwrap(),
            p.data.to_vec(),
        ));
    }
    v
}

/// The live capture's kernel filter (`capture::filter::program`, run as the kernel
/// runs it) keeps, packet for packet, what libpcap's compiler keeps for the same
/// selection. Witness: tcpdump writing the filtered packets of the same corpus file.
/// Ethernet frames run the Ethernet program; cooked (SLL) frames, which a live socket
/// never sees, run the raw-IP program on their IP packet.
#[test]
fn the_socket_filter_keeps_what_tcpdump_keeps_on_the_corpus() {
    use rttlab::capture::filter::{program, run, Selection};
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    let cases: [(&str, Vec<std::net::IpAddr>, Vec<u16>, &str); 5] = [
        (
            "crr-gw.pcapng.gz",
            vec![],
            vec![46144],
            "tcp and (port 46144)",
        ),
        (
            "crr-gw.pcapng.gz",
            vec![ip("198.18.0.1")],
            vec![12866, 1],
            "tcp and (host 198.18.0.1) and (port 12866 or port 1)",
        ),
        (
            "crr-gw.pcapng.gz",
            vec![ip("192.0.2.9")],
            vec![],
            "tcp and (host 192.0.2.9)",
        ),
        (
            "rr-v6-gw.pcapng.gz",
            vec![ip("2001:2::2"), ip("192.0.2.9")],
            vec![54190],
            "tcp and (host 2001:2::2 or host 192.0.2.9) and (port 54190)",
        ),
        (
            "rr-v4-host.pcap.gz",
            vec![],
            vec![47240, 9],
            "tcp and (port 47240 or port 9)",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (file, hosts, ports, expr) in cases {
        let plain = dir.path().join(file.trim_end_matches(".gz"));
        let gz = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/corpus")
                .join(file),
        )
        .unwrap();
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut raw).unwrap();
        std::fs::write(&plain, raw).unwrap();
        let sel = Selection { hosts, ports };
        let kept: Vec<u64> = frames(&plain)
            .into_iter()
            .filter(|(_, link, f)| match link {
                LinkType::Ethernet => run(&program(LinkType::Ethernet, &sel, 96), f) == 96,
                _ => {
                    let (_, ipkt) = link.network(f).unwrap();
                    run(&program(LinkType::Raw, &sel, 0), ipkt) > 0
                }
            })
            .map(|(ts, _, _)| ts)
            .collect();
        let out = dir.path().join("filtered.pcap");
        let st = Command::new("tcpdump")
            .args([
                "-r",
                plain.to_str().unwrap(),
                "--time-stamp-precision",
                "nano",
                "-w",
            ])
            .arg(&out)
            .arg(expr)
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "tcpdump {expr}");
        let theirs: Vec<u64> = frames(&out).into_iter().map(|(ts, _, _)| ts).collect();
        assert_eq!(kept, theirs, "{file}: {expr}");
        if expr != "tcp and (host 192.0.2.9)" {
            assert!(!kept.is_empty(), "{file}: {expr} selects something");
        }
    }
}
