//! The pcap reader and the packet decoder against tcpdump on the same file (root:
//! traffic in namespaces the test makes). Witness: `tcpdump -r` reading the file it
//! wrote, at the file's own precision.

mod common;

use common::{privileged, NetnsPair};
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
    let mut dumps: Vec<_> = files
        .iter()
        .map(|(f, nano)| {
            let mut args = vec![
                "tcpdump",
                "-i",
                &n.dev_a,
                "-w",
                f.to_str().unwrap(),
                "--immediate-mode",
                "-Z",
                "root",
                "-U",
            ];
            if *nano {
                args.extend(["--time-stamp-precision", "nano"]);
            }
            args.push("icmp");
            NetnsPair::exec(&n.a, &args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(800));
    let p = NetnsPair::exec(&n.a, &["ping", "-q", "-c", "20", "-i", "0.01", n.b4])
        .output()
        .unwrap();
    assert!(p.status.success());
    std::thread::sleep(std::time::Duration::from_millis(300));
    for d in &mut dumps {
        // SAFETY: signalling the tcpdump this test started.
        unsafe { libc::kill(d.id() as i32, libc::SIGINT) };
        d.wait().unwrap();
    }
    for (f, nano) in &files {
        let theirs = tcpdump_read(f, *nano);
        let mine = ours(f);
        assert_eq!(mine.len(), 40, "{f:?}");
        assert_eq!(mine, theirs, "{f:?}");
    }
}
