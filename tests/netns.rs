//! Privileged tests: rr and ping between two network namespaces joined by a veth pair,
//! with packet drops made by nftables and counted by nftables — an independent witness
//! of what rttlab reports. Run as root (CI); skipped with a reason otherwise.

use crate::common;

use crate::common::{json, NetnsPair};

#[test]
fn every_test_type_across_namespaces_ipv4_and_ipv6() {
    let _busy = common::serial::busy();
    if !common::privileged("every_test_type_across_namespaces_ipv4_and_ipv6") {
        return;
    }
    let n = NetnsPair::new();
    let srv = n.serve_in_b("::", 12866, &[]);
    for host in [n.b4, n.b6] {
        for test in ["TCP_RR", "UDP_RR", "TCP_CRR"] {
            let v = json(&n.rttlab_in_a(&["rr", "-H", host, "-t", test, "-n", "300", "--json"]));
            assert_eq!(v["transactions"], 300, "{host} {test}");
            assert_eq!(v["remote_transactions"], 300, "{host} {test}");
            let local = v["settings"]["local_data_addr"].as_str().unwrap();
            assert!(
                local.contains(if host.contains(':') { n.a6 } else { n.a4 }),
                "{local}"
            );
        }
    }
    drop(srv);
}

#[test]
fn remote_retransmits_rise_when_the_server_loses_packets() {
    let _busy = common::serial::busy();
    if !common::privileged("remote_retransmits_rise_when_the_server_loses_packets") {
        return;
    }
    let n = NetnsPair::new();
    let srv = n.serve_in_b(n.b4, 12866, &[]);
    // Drop one in five of the server's data segments (fixed data port 20001; PSH marks
    // data, so pure ACKs, which TCP never retransmits, are spared), counted,
    // where they arrive at the client: lost on the path, as far as the server knows.
    // (Dropped in the server's own OUTPUT hook instead, the send fails locally, TCP
    // never counts it as sent and never retransmits it: docs/ARCHITECTURE.md §7.)
    NetnsPair::nft(
        &n.a,
        "table inet rttlab_test {
           counter dropped {}
           chain inp { type filter hook input priority 0; tcp sport 20001 tcp flags & (syn|fin|rst|psh) == psh numgen inc mod 5 == 0 counter name dropped drop; }
         }",
    );
    let v = json(&n.rttlab_in_a(&["rr", "-H", n.b4, "-P", "20001", "-n", "25", "--json"]));
    let dropped = NetnsPair::nft_counter(&n.a, "rttlab_test", "dropped");
    let remote = v["remote_retrans"].as_u64().unwrap();
    assert!(dropped >= 4, "nft dropped {dropped}");
    // Every segment the firewall dropped had to be sent again by the server's TCP.
    assert!(
        remote >= dropped,
        "server retransmitted {remote}, nft dropped {dropped}"
    );
    assert_eq!(v["transactions"], 25);
    // The retransmission timeouts show in the application's tail: ≥ one TLP/RTO (≥ 200 ms rto_min).
    assert!(
        v["rtt"]["max_us"].as_f64().unwrap() > 150_000.0,
        "{}",
        v["rtt"]
    );
    drop(srv);
}

#[test]
fn ping_loss_matches_the_firewalls_count() {
    let _busy = common::serial::busy();
    if !common::privileged("ping_loss_matches_the_firewalls_count") {
        return;
    }
    let n = NetnsPair::new();
    NetnsPair::nft(
        &n.b,
        "table inet rttlab_test {
           counter dropped {}
           chain out { type filter hook output priority 0; icmp type echo-reply numgen inc mod 4 == 0 counter name dropped drop;
                                                           icmpv6 type echo-reply numgen inc mod 4 == 0 counter name dropped drop; }
         }",
    );
    let mut total_dropped = 0;
    for host in [n.b4, n.b6] {
        let v = json(&n.rttlab_in_a(&[
            "ping", host, "-c", "40", "-i", "2ms", "-W", "300ms", "--json",
        ]));
        let dropped = NetnsPair::nft_counter(&n.b, "rttlab_test", "dropped") - total_dropped;
        total_dropped += dropped;
        assert_eq!(v["sent"], 40, "{host}");
        assert_eq!(
            v["lost"].as_u64().unwrap(),
            dropped,
            "{host}: rttlab's loss vs nft's drops"
        );
        assert_eq!(v["received"].as_u64().unwrap(), 40 - dropped);
        assert_eq!(v["duplicates"], 0);
        assert!(v["rtt"]["min_us"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn ping_uses_datagram_sockets_where_ping_group_range_allows() {
    let _busy = common::serial::busy();
    if !common::privileged("ping_uses_datagram_sockets_where_ping_group_range_allows") {
        return;
    }
    let n = NetnsPair::new();
    let o = NetnsPair::exec(
        &n.a,
        &["sysctl", "-qw", "net.ipv4.ping_group_range=0 2147483647"],
    )
    .output()
    .unwrap();
    assert!(o.status.success());
    for host in [n.b4, n.b6] {
        let v = json(&n.rttlab_in_a(&[
            "ping", host, "-c", "10", "-i", "1ms", "--socket", "dgram", "--json",
        ]));
        assert_eq!(v["settings"]["socket"], "dgram");
        assert_eq!(v["received"], 10, "{host}");
    }
    // Raw sockets answer the same.
    let v = json(&n.rttlab_in_a(&[
        "ping", n.b4, "-c", "10", "-i", "0", "--socket", "raw", "--json",
    ]));
    assert_eq!(v["received"], 10);
}

/// rttlab's ICMP round trip next to iputils ping's on the same path: both are
/// microseconds on a veth pair, both time the reply by the kernel's receive stamp, so
/// their medians must agree within noise, from above and from below (an rttlab that
/// timed too little — a stamp taken after the send, a receive stamp compared with
/// itself — reads low). Witness: iputils ping's per-reply `time=`.
#[test]
fn ping_agrees_with_iputils_ping() {
    let _busy = common::serial::busy();
    if !common::privileged("ping_agrees_with_iputils_ping") {
        return;
    }
    let n = NetnsPair::new();
    // Same placement for both (docs/ARCHITECTURE.md: a round trip across idle vCPUs costs tens of
    // µs more than on one), so the comparison is of the tools, not of the scheduler.
    let bin = common::bin();
    let ours = NetnsPair::exec(
        &n.a,
        &[
            "taskset",
            "-c",
            "0",
            bin.to_str().unwrap(),
            "ping",
            n.b4,
            "-c",
            "200",
            "-i",
            "2ms",
            "--json",
        ],
    )
    .output()
    .unwrap();
    let ours = json(&ours);
    let theirs = NetnsPair::exec(
        &n.a,
        &[
            "taskset", "-c", "0", "ping", "-c", "200", "-i", "0.002", n.b4,
        ],
    )
    .output()
    .unwrap();
    let text = String::from_utf8_lossy(&theirs.stdout);
    // "64 bytes from 10.…: icmp_seq=1 ttl=64 time=0.025 ms"
    let mut times: Vec<f64> = text
        .lines()
        .filter_map(|l| l.split("time=").nth(1))
        .map(|t| t.trim_end_matches(" ms").parse::<f64>().unwrap() * 1000.0)
        .collect();
    assert!(times.len() >= 190, "{text}");
    times.sort_by(f64::total_cmp);
    let their_p50_us = times[times.len() / 2];
    // Medians: a mean of a few µs moves by tens with one preempted sample on this VM.
    let our_p50_us = ours["rtt"]["percentiles_us"]["p50"].as_f64().unwrap();
    assert_eq!(ours["received"], 200);
    assert!(
        our_p50_us <= their_p50_us * 1.5 + 20.0 && our_p50_us >= their_p50_us * 0.5 - 10.0,
        "rttlab median {our_p50_us} µs vs ping's median {their_p50_us} µs"
    );
}

#[test]
fn tcpinfo_looks_inside_a_named_namespace() {
    let _busy = common::serial::busy();
    if !common::privileged("tcpinfo_looks_inside_a_named_namespace") {
        return;
    }
    let n = NetnsPair::new();
    let srv = n.serve_in_b(n.b4, 12866, &[]);
    let client = NetnsPair::exec(
        &n.a,
        &[
            common::bin().to_str().unwrap(),
            "rr",
            "-H",
            n.b4,
            "-P",
            "20004",
            "-l",
            "2",
            "-o",
            "TRANSACTIONS",
        ],
    )
    .stdout(std::process::Stdio::null())
    .spawn()
    .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(800));
    // From the root namespace, look into b: the server's data socket, and nothing of a's.
    let o = std::process::Command::new(common::bin())
        .args(["tcpinfo", "--netns", &n.b, "--sport", "20004", "--json"])
        .output()
        .unwrap();
    let _ = client.wait_with_output();
    let text = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert_eq!(lines[0]["local"], format!("{}:20004", n.b4));
    assert!(lines[0]["remote"].as_str().unwrap().starts_with(n.a4));
    assert!(lines[0]["tcp_info"]["rtt_us"].as_u64().unwrap() > 0);
    drop(srv);
}

/// iputils ping's per-reply line and its two summary lines, as scripts parse them.
struct IputilsOutput {
    /// (bytes, from, icmp_seq, ttl, time ms) per reply.
    replies: Vec<(u32, String, u32, u32, f64)>,
    transmitted: u64,
    received: u64,
    loss_percent: f64,
    /// min, avg, max, mdev (ms), when anything came back.
    rtt: Option<[f64; 4]>,
}

fn parse_iputils(text: &str) -> IputilsOutput {
    let reply = regex::Regex::new(
        r"^(\d+) bytes from ([0-9a-f.:]+): icmp_seq=(\d+) ttl=(\d+) time=([\d.]+) ms$",
    )
    .unwrap();
    let counts = regex::Regex::new(
        r"^(\d+) packets transmitted, (\d+) received,(?: \+\d+ duplicates,)? ([\d.]+)% packet loss, time \d+ms$",
    )
    .unwrap();
    let rtt = regex::Regex::new(r"^rtt min/avg/max/mdev = ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms$")
        .unwrap();
    let replies = text
        .lines()
        .filter_map(|l| reply.captures(l))
        .map(|c| {
            (
                c[1].parse().unwrap(),
                c[2].to_string(),
                c[3].parse().unwrap(),
                c[4].parse().unwrap(),
                c[5].parse().unwrap(),
            )
        })
        .collect();
    let c = text
        .lines()
        .find_map(|l| counts.captures(l))
        .unwrap_or_else(|| panic!("no counts line: {text}"));
    IputilsOutput {
        replies,
        transmitted: c[1].parse().unwrap(),
        received: c[2].parse().unwrap(),
        loss_percent: c[3].parse().unwrap(),
        rtt: text
            .lines()
            .find_map(|l| rtt.captures(l))
            .map(|c| [1, 2, 3, 4].map(|i| c[i].parse::<f64>().unwrap())),
    }
}

/// Witnesses: iputils ping, run with the same flags on the same path, and nftables
/// counting on the far side the requests with the asked TOS and TTL. Both outputs are
/// parsed with the same regular expressions (what scripts that parse iputils do); the
/// exit statuses agree when nothing comes back (1) and on an error (2).
#[test]
fn ping_is_a_drop_in_for_iputils() {
    let _busy = common::serial::busy();
    if !common::privileged("ping_is_a_drop_in_for_iputils") {
        return;
    }
    let n = NetnsPair::new();
    NetnsPair::nft(
        &n.b,
        "table inet rttlab_test {
           counter tos {}
           counter ttl {}
           chain in { type filter hook input priority 0;
             ip dscp 0x04 icmp type echo-request counter name tos;
             ip ttl 9 icmp type echo-request counter name ttl; }
         }",
    );
    let bin = common::bin();
    let flags = ["-c", "5", "-i", "0.2", "-Q", "0x10", "-t", "9"];
    let run = |prog: &str| {
        let mut args = vec![prog];
        if prog != "ping" {
            args.push("ping");
        }
        args.push(n.b4);
        args.extend(flags);
        let o = NetnsPair::exec(&n.a, &args).output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).to_string(),
        )
    };
    let (their_code, theirs) = run("ping");
    let (our_code, ours) = run(bin.to_str().unwrap());
    let (t, o) = (parse_iputils(&theirs), parse_iputils(&ours));
    assert_eq!((their_code, our_code), (Some(0), Some(0)));
    for (who, p) in [("iputils", &t), ("rttlab", &o)] {
        assert_eq!(
            (p.transmitted, p.received, p.loss_percent),
            (5, 5, 0.0),
            "{who}"
        );
        let seqs: Vec<u32> = p.replies.iter().map(|r| r.2).collect();
        assert_eq!(seqs, vec![1, 2, 3, 4, 5], "{who}: {theirs}\n{ours}");
        let [min, avg, max, mdev] = p.rtt.unwrap();
        assert!(
            min <= avg && avg <= max && mdev >= 0.0 && mdev <= max - min,
            "{who}"
        );
        let times: Vec<f64> = p.replies.iter().map(|r| r.4).collect();
        let lo = times.iter().copied().fold(f64::MAX, f64::min);
        assert!(
            (lo - min).abs() <= 0.0015,
            "{who}: min {min} vs the lines' {lo}"
        );
    }
    // What scripts read: the last line is the rtt line (`tail -1 | awk -F/ '{print
    // $5}'` is the average), and one line says "received", in both. The summary's min
    // is the smallest reply time, cut as iputils cuts it (never rounded above it).
    for (who, text, p) in [("iputils", &theirs, &t), ("rttlab", &ours, &o)] {
        let last = text.lines().last().unwrap_or("");
        assert!(
            last.starts_with("rtt min/avg/max/mdev = "),
            "{who}: last line {last:?}"
        );
        let avg: f64 = last.split('/').nth(4).unwrap().parse().unwrap();
        assert_eq!(avg, p.rtt.unwrap()[1], "{who}");
        assert_eq!(
            text.lines().filter(|l| l.contains("received")).count(),
            1,
            "{who}: {text}"
        );
        let lo = p.replies.iter().map(|r| r.4).fold(f64::MAX, f64::min);
        assert!(
            p.rtt.unwrap()[0] <= lo,
            "{who}: summary min above a reply's time"
        );
    }
    // Same bytes, source and TTL on every reply line.
    let shape = |p: &IputilsOutput| {
        p.replies
            .iter()
            .map(|r| (r.0, r.1.clone(), r.3))
            .collect::<Vec<_>>()
    };
    assert_eq!(shape(&o), shape(&t));
    // Ten requests carried TOS 0x10 and TTL 9: five from each.
    assert_eq!(NetnsPair::nft_counter(&n.b, "rttlab_test", "tos"), 10);
    assert_eq!(NetnsPair::nft_counter(&n.b, "rttlab_test", "ttl"), 10);

    // Nobody at 198.18.200.77: exit 1, 100 % loss, no rtt line.
    let silent = |prog: &str| {
        let mut args = vec![prog];
        if prog != "ping" {
            args.push("ping");
        }
        args.extend(["198.18.200.77", "-c", "2", "-i", "0.2", "-W", "0.5"]);
        let o = NetnsPair::exec(&n.a, &args).output().unwrap();
        (
            o.status.code(),
            parse_iputils(&String::from_utf8_lossy(&o.stdout)),
        )
    };
    for (code, p) in [silent("ping"), silent(bin.to_str().unwrap())] {
        assert_eq!(code, Some(1));
        assert_eq!((p.transmitted, p.received, p.loss_percent), (2, 0, 100.0));
        assert!(p.rtt.is_none());
    }
    // An interface that does not exist: exit 2.
    for prog in ["ping", bin.to_str().unwrap()] {
        let mut args = vec![prog];
        if prog != "ping" {
            args.push("ping");
        }
        args.extend([n.b4, "-c", "1", "-I", "rttlab-nosuch0"]);
        let o = NetnsPair::exec(&n.a, &args).output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(2),
            "{prog}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// tcpdump on `dev` in `ns` while `f` runs: the lines `tcpdump -r -nn -v` prints of
/// what it captured with `filter`.
fn on_the_wire(ns: &str, dev: &str, filter: &str, f: impl FnOnce()) -> Vec<String> {
    let pcap = tempfile::NamedTempFile::new().unwrap();
    let td = common::Tcpdump::start(Some(ns), dev, pcap.path(), &["-nn", filter]);
    f();
    td.stop();
    let o = std::process::Command::new("tcpdump")
        .args(["-r", pcap.path().to_str().unwrap(), "-nn", "-v"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// `rr --dscp` marks both ends' data (the server answers with the client's class),
/// and `--mark`, `--bind` and `--interface` each choose the second of two links by
/// policy routing. Witness: tcpdump on both links (the TOS byte of every data packet
/// in each direction; which link carried the test).
#[test]
fn rr_traffic_class_and_path_reach_the_wire() {
    let _busy = common::serial::busy();
    if !common::privileged("rr_traffic_class_and_path_reach_the_wire") {
        return;
    }
    let n = NetnsPair::new();
    let _srv = n.serve_in_b("0.0.0.0", 12866, &[]);
    let data = "tcp port 20001 or udp port 20001";
    for test in ["TCP_RR", "UDP_RR"] {
        let lines = on_the_wire(&n.a, &n.dev_a, data, || {
            let o = n.rttlab_in_a(&[
                "rr", "-H", n.b4, "-t", test, "-n", "20", "-P", "20001", "--dscp", "46",
            ]);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        });
        // tcpdump -v: "IP (tos 0xb8, ttl 64, …)" on the line of each IPv4 packet.
        let ip: Vec<&String> = lines.iter().filter(|l| l.contains(" IP (")).collect();
        assert!(ip.len() >= 40, "{test}: {} packets", ip.len());
        for l in &ip {
            assert!(l.contains("tos 0xb8"), "{test}: {l}");
        }
        let back = lines
            .iter()
            .zip(lines.iter().skip(1))
            .filter(|(_, next)| next.contains(&format!("{}.20001 > {}", n.b4, n.a4)))
            .count();
        assert!(back >= 20, "{test}: {back} answers seen");
    }

    // A second link a ⇄ b, and policy routing in a that sends what is marked 7, or
    // comes from a's address on it, or is bound to its device, to b over it.
    let tag = &n.dev_a[3..n.dev_a.len() - 1];
    let (c, d) = (format!("rtw{tag}c"), format!("rtw{tag}d"));
    let sh = common::sh;
    sh(&[
        "ip", "link", "add", &c, "netns", &n.a, "type", "veth", "peer", "name", &d, "netns", &n.b,
    ]);
    sh(&[
        "ip",
        "-n",
        &n.a,
        "addr",
        "add",
        "198.18.201.1/24",
        "dev",
        &c,
    ]);
    sh(&[
        "ip",
        "-n",
        &n.b,
        "addr",
        "add",
        "198.18.201.2/24",
        "dev",
        &d,
    ]);
    sh(&["ip", "-n", &n.a, "link", "set", &c, "up"]);
    sh(&["ip", "-n", &n.b, "link", "set", &d, "up"]);
    sh(&[
        "ip",
        "-n",
        &n.a,
        "route",
        "add",
        n.b4,
        "via",
        "198.18.201.2",
        "dev",
        &c,
        "table",
        "100",
    ]);
    sh(&[
        "ip", "-n", &n.a, "rule", "add", "fwmark", "7", "table", "100",
    ]);
    sh(&[
        "ip",
        "-n",
        &n.a,
        "rule",
        "add",
        "from",
        "198.18.201.1",
        "table",
        "100",
    ]);
    sh(&["ip", "-n", &n.a, "rule", "add", "oif", &c, "table", "100"]);
    let tcp = "tcp port 20001";
    for (extra, second) in [
        (vec![], false),
        (vec!["--mark", "7"], true),
        (vec!["--bind", "198.18.201.1"], true),
        (vec!["--interface", c.as_str()], true),
    ] {
        let mut first_link = Vec::new();
        let second_link = on_the_wire(&n.a, &c, tcp, || {
            first_link = on_the_wire(&n.a, &n.dev_a, tcp, || {
                let mut args = vec!["rr", "-H", n.b4, "-n", "20", "-P", "20001"];
                args.extend(&extra);
                let o = n.rttlab_in_a(&args);
                assert!(
                    o.status.success(),
                    "{extra:?}: {}",
                    String::from_utf8_lossy(&o.stderr)
                );
            });
        });
        let count = |v: &[String]| v.iter().filter(|l| l.contains(" IP (")).count();
        let (one, two) = (count(&first_link), count(&second_link));
        if second {
            assert!(
                one == 0 && two >= 30,
                "{extra:?}: {one} packets on the first link, {two} on the second"
            );
        } else {
            assert!(
                one >= 30 && two == 0,
                "{extra:?}: {one} packets on the first link, {two} on the second"
            );
        }
    }
}
