//! ping as iputils and fping users type it (issue 31, item 1). Witnesses: iputils ping
//! and fping, run with the same flags on the same path, their output compared with
//! rttlab's line for line once the times (which differ run to run) are masked; and
//! nftables, dropping chosen requests by ICMP sequence number in a namespace.
//!
//! rttlab prints iputils' lines and nothing else unless asked (`--summary`, `-o`,
//! `--percentiles`, `--histogram`): its own block (settings, counts and the percentile
//! table) then sits between the replies and iputils' statistics, checked there, so the
//! last lines are iputils' own.

use crate::common;

use crate::common::NetnsPair;
use regex::Regex;
use std::process::Command;

/// Times masked: per-reply `time=`, the summary's `time Nms` and rtt numbers, -D's
/// stamps, and what iputils -v prints that rttlab does not (its socket and resolver
/// lines).
fn masked(text: &str) -> Vec<String> {
    let rules = [
        (r"time=[\d.]+ ms", "time=T ms"),
        (r"time \d+ms", "time Tms"),
        (r"^\[\d+\.\d{6}\] ", "[S] "),
        (r"= [\d.]+/[\d.]+/[\d.]+/[\d.]+ ms", "= A/B/C/D ms"),
        (r"ipg/ewma [\d.]+/[\d.]+ ms", "ipg/ewma G/E ms"),
        // -T's stamps (ms since midnight UTC, then differences).
        (r"\t-?\d+( absolute)?$", "\tN$1"),
    ]
    .map(|(re, to)| (Regex::new(re).unwrap(), to));
    text.lines()
        .filter(|l| !l.starts_with("ai->ai_family") && !l.starts_with("ping: sock4.fd"))
        .map(|l| {
            rules.iter().fold(l.to_string(), |l, (re, to)| {
                re.replace_all(&l, *to).to_string()
            })
        })
        .collect()
}

/// rttlab's output without its own block: from "ICMP echo to" down to the line before
/// the blank line that opens "--- … ping statistics ---", and one blank line.
fn without_rttlab_block(lines: &[String]) -> Vec<String> {
    let Some(start) = lines.iter().position(|l| l.starts_with("ICMP echo to")) else {
        return lines.to_vec();
    };
    let stats = lines
        .iter()
        .position(|l| l.starts_with("--- ") && l.ends_with(" ping statistics ---"))
        .expect("a statistics line");
    assert!(
        stats > start,
        "rttlab's block after iputils' statistics: {lines:#?}"
    );
    // The block goes with one blank line: the one before it after reply lines, the
    // one after it after -f's marks (whose line the block's start ends).
    let (cut_from, cut_to) = if start > 0 && lines[start - 1].is_empty() {
        (start - 1, stats - 1)
    } else {
        (start, stats)
    };
    let mut out = lines[..cut_from].to_vec();
    out.extend_from_slice(&lines[cut_to..]);
    out
}

/// Run `prog` (iputils' `ping` or rttlab's) with `args`, in namespace `ns` if given.
fn run(ns: Option<&str>, prog: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let bin = common::bin();
    let mut argv: Vec<&str> = Vec::new();
    if prog == "rttlab" {
        argv.extend([bin.to_str().unwrap(), "ping"]);
    } else {
        argv.push(prog);
    }
    argv.extend(args);
    let o = match ns {
        Some(ns) => NetnsPair::exec(ns, &argv).output().unwrap(),
        None => Command::new(argv[0]).args(&argv[1..]).output().unwrap(),
    };
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// iputils and rttlab with the same flags, side by side (each takes only the replies
/// to its own identifier, as it must beside any other ping; one after the other when
/// `-e` gives both the same): the same status and, times masked and rttlab's block
/// cut, the same lines in the same order, the same last line.
fn same_as_iputils(ns: Option<&str>, args: &[&str]) {
    let ((their_code, theirs, their_err), (our_code, ours, our_err)) = if args.contains(&"-e") {
        (run(ns, "ping", args), run(ns, "rttlab", args))
    } else {
        std::thread::scope(|s| {
            let iputils = s.spawn(|| run(ns, "ping", args));
            let ours = run(ns, "rttlab", args);
            (iputils.join().unwrap(), ours)
        })
    };
    let (mut t, mut o) = (masked(&theirs), masked(&ours));
    // -f and -A send the next request once a reply is in (or 10 ms later): a reply
    // slower than that on a loaded machine puts a `, pipe 2` on either tool's line.
    if args.contains(&"-f") || args.contains(&"-A") {
        let pipe = Regex::new(r", pipe \d+").unwrap();
        for l in t.iter_mut().chain(o.iter_mut()) {
            *l = pipe.replace(l, "").to_string();
        }
    }
    assert_eq!(
        their_code, our_code,
        "{args:?}: exit status\niputils: {theirs}{their_err}\nrttlab: {ours}{our_err}"
    );
    assert_eq!(o, t, "{args:?}\niputils:\n{theirs}\nrttlab:\n{ours}");
}

/// `--summary` adds rttlab's block and changes nothing else: cut out, the lines are
/// iputils' (witness: iputils ping with the same flags), and the block sits before the
/// statistics, so the last line is still iputils' rtt line.
#[test]
fn the_summary_sits_before_iputils_statistics() {
    let _busy = common::serial::busy();
    if !common::privileged("the_summary_sits_before_iputils_statistics") {
        return;
    }
    let args = ["-c", "3", "-i", "0.2", "127.0.0.1"];
    let ((_, theirs, _), (code, ours, _)) = std::thread::scope(|s| {
        let iputils = s.spawn(|| run(None, "ping", &args));
        let ours = run(None, "rttlab", &[&["--summary"][..], &args].concat());
        (iputils.join().unwrap(), ours)
    });
    assert_eq!(code, Some(0));
    assert!(ours.contains("\nICMP echo to 127.0.0.1"), "{ours}");
    assert!(ours.contains("\nRTT_us "), "{ours}");
    // Three replies resolve the median, not P90 (nearest rank ⌈0.9 · 3⌉ = 3, their
    // maximum) nor above: each is shown as the samples it needs. Witness: arithmetic.
    let header = ours.lines().find(|l| l.starts_with("RTT_us ")).unwrap();
    let row: Vec<&str> = ours
        .lines()
        .find(|l| l.starts_with("icmp "))
        .unwrap()
        .split_whitespace()
        .collect();
    let cell = |name: &str| {
        let i = header.split_whitespace().position(|h| h == name).unwrap();
        row[i]
    };
    assert!(cell("P50").parse::<f64>().is_ok(), "{header}\n{row:?}");
    assert_eq!(
        [cell("P90"), cell("P99"), cell("P99.9")],
        ["n<10", "n<100", "n<1000"],
        "{header}\n{row:?}"
    );
    assert_eq!(
        without_rttlab_block(&masked(&ours)),
        masked(&theirs),
        "{ours}"
    );
}

/// Without -c, -w or --duration both run until interrupted, as at the prompt: SIGINT
/// after a second ends each with its statistics and status 0. Witness: iputils ping
/// under the same signal; the counts may differ by the request one of them had just
/// sent.
#[test]
fn without_a_count_it_runs_until_interrupted() {
    let _busy = common::serial::busy();
    if !common::privileged("without_a_count_it_runs_until_interrupted") {
        return;
    }
    let bin = common::bin();
    let start = |argv: &[&str]| {
        Command::new(argv[0])
            .args(&argv[1..])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let children = [
        start(&["ping", "-i", "0.2", "127.0.0.1"]),
        start(&[bin.to_str().unwrap(), "ping", "-i", "0.2", "127.0.0.1"]),
    ];
    // Well past the 5 requests the old default stopped at.
    std::thread::sleep(std::time::Duration::from_millis(1_500));
    let stats = Regex::new(
        r"(?m)^--- 127\.0\.0\.1 ping statistics ---\n(\d+) packets transmitted, (\d+) received, 0% packet loss",
    )
    .unwrap();
    let mut sent = Vec::new();
    for c in children {
        // SAFETY: kill(2) on a child of this test.
        unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
        let o = c.wait_with_output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert_eq!(o.status.code(), Some(0), "{out}");
        let caps = stats.captures(&out).unwrap_or_else(|| panic!("{out}"));
        assert_eq!(caps[1], caps[2], "{out}");
        assert!(!out.contains("ICMP echo to"), "{out}");
        sent.push(caps[1].parse::<u64>().unwrap());
    }
    assert!(sent[1] >= 6, "rttlab sent {} in 1.5 s at 0.2 s", sent[1]);
    assert!(
        sent[0].abs_diff(sent[1]) <= 1,
        "iputils {}, rttlab {}",
        sent[0],
        sent[1]
    );
}

/// Loopback as root, both families: every flag both implement, alone or together.
#[test]
fn ping_prints_what_iputils_prints_on_loopback() {
    let _busy = common::serial::busy();
    if !common::privileged("ping_prints_what_iputils_prints_on_loopback") {
        return;
    }
    for host in ["127.0.0.1", "::1"] {
        for flags in [
            &["-c", "3", "-i", "0.2"][..],
            &["-c", "3", "-i", "0.2", "-q"],
            &["-c", "3", "-i", "0.2", "-D", "-a", "-s", "32", "-p", "a5"],
            &[
                "-c", "3", "-i", "0.2", "-n", "-U", "-S", "65536", "-r", "-B",
            ],
            &["-c", "3", "-i", "0.2", "-e", "4242", "-v"],
            &["-c", "4", "-i", "0.2", "-l", "3"],
            &["-c", "3", "-i", "0.2", "-t", "9", "-Q", "0x10", "-W", "1"],
            &["-c", "3", "-w", "5", "-i", "0.2", "-O"],
            &["-c", "3", "-A"],
            &["-c", "3", "-f"],
            &["-c", "3", "-i", "0.2", "-M", "do", "-m", "7", "-L"],
            &["-c", "2", "-i", "0.2", "-I", "lo"],
            &["-c", "3", "-i", "0.2", "-R"],
            &["-c", "2", "-i", "0.2", "-T", "tsonly"],
            &["-c", "2", "-i", "0.2", "-T", "tsandaddr"],
        ] {
            // -R and -T on ::1: iputils pings without them, as rttlab does.
            let mut args = flags.to_vec();
            args.push(host);
            same_as_iputils(None, &args);
        }
    }
    // A target given by name: iputils names each reply's sender `name (address)`
    // unless -n.
    same_as_iputils(None, &["-c", "2", "-i", "0.2", "localhost"]);
    same_as_iputils(None, &["-c", "2", "-i", "0.2", "-n", "localhost"]);
}

/// A namespace whose peer drops echo requests 2 and 4 (nftables, by ICMP sequence
/// number): -O names each unanswered request before the next goes, -w with -c sends
/// on until 3 replies are in (5 requests, 40 % loss), and a silent host with -w and -c
/// ends at the deadline with status 1.
#[test]
fn ping_loses_what_iputils_loses() {
    let _busy = common::serial::busy();
    if !common::privileged("ping_loses_what_iputils_loses") {
        return;
    }
    let n = NetnsPair::new();
    NetnsPair::nft(
        &n.b,
        "table inet rttlab_test {
           chain in { type filter hook input priority 0;
             icmp type echo-request icmp sequence { 2, 4 } drop;
             icmpv6 type echo-request icmpv6 sequence { 2, 4 } drop; }
         }",
    );
    for host in [n.b4, n.b6] {
        same_as_iputils(Some(&n.a), &["-c", "3", "-w", "5", "-i", "0.2", "-O", host]);
        same_as_iputils(
            Some(&n.a),
            &["-c", "5", "-i", "0.2", "-W", "0.5", "-D", "-O", host],
        );
        // -A after a loss: the next request goes once the last is answered, not after
        // the lost one's timeout (6 requests well inside -w 1).
        same_as_iputils(Some(&n.a), &["-c", "6", "-A", "-w", "1", host]);
        let (_, ours, _) = run(
            Some(&n.a),
            "rttlab",
            &["-c", "3", "-w", "5", "-i", "0.2", host],
        );
        assert!(
            ours.contains("5 packets transmitted, 3 received, 40% packet loss"),
            "{ours}"
        );
    }
    same_as_iputils(
        Some(&n.a),
        &["-c", "3", "-w", "1", "-i", "0.2", "198.18.200.77"],
    );
}

/// A peer that rejects echo request 2 with an ICMP error (nftables' reject, both
/// families): iputils prints `From ADDR icmp_seq=2 Destination Host Unreachable` (v6:
/// `Destination unreachable: Address unreachable`) and `+1 errors`; so does rttlab.
#[test]
fn ping_reports_the_errors_iputils_reports() {
    let _busy = common::serial::busy();
    if !common::privileged("ping_reports_the_errors_iputils_reports") {
        return;
    }
    let n = NetnsPair::new();
    NetnsPair::nft(
        &n.b,
        "table inet rttlab_test {
           chain in { type filter hook input priority 0;
             icmp type echo-request icmp sequence 2 reject with icmp type host-unreachable;
             icmpv6 type echo-request icmpv6 sequence 2 reject with icmpv6 type addr-unreachable; }
         }",
    );
    for host in [n.b4, n.b6] {
        same_as_iputils(Some(&n.a), &["-c", "3", "-i", "0.2", host]);
        same_as_iputils(Some(&n.a), &["-c", "3", "-i", "0.2", "-D", host]);
        let (_, ours, _) = run(Some(&n.a), "rttlab", &["-c", "3", "-i", "0.2", host]);
        assert!(ours.contains("icmp_seq=2 Destination"), "{ours}");
        assert!(ours.contains("+1 errors"), "{ours}");
    }
}

/// A raw socket hears only what concerns its requests: on a namespace's own loopback,
/// where nothing else talks, not one datagram ignored (without the kernel's ICMP filter
/// it hears each of its own echo requests too: "ignored 20 datagrams … 20 other ICMP
/// messages"). Witness: the kernel's delivery to the socket, counted by rttlab's
/// summary; errors still come through (`ping_reports_the_errors_iputils_reports`).
#[test]
fn a_raw_socket_hears_no_echo_requests() {
    let _busy = common::serial::busy();
    if !common::privileged("a_raw_socket_hears_no_echo_requests") {
        return;
    }
    let n = NetnsPair::new();
    for host in ["127.0.0.1", "::1"] {
        let args = [
            "--socket",
            "raw",
            "--summary",
            "-c",
            "20",
            "-i",
            "0.002",
            host,
        ];
        let (code, ours, err) = run(Some(&n.a), "rttlab", &args);
        assert_eq!(code, Some(0), "{ours}{err}");
        assert!(ours.contains("20 sent, 20 answered"), "{ours}");
        assert!(!ours.contains("ignored"), "{host}: {ours}");
    }
}

/// Beside another program's flood, a raw socket is handed only its own replies (and
/// errors): the kernel drops the other identifier's replies before they are queued, as
/// iputils' filter does, so none is read, ignored or crowds out one of ours. Without
/// the filter rttlab says "ignored … another program's echoes" here, and with it
/// attached but the queue not emptied first it ignored the ~20 queued before the
/// attachment. Witness: the kernel's delivery to the socket, counted by rttlab's
/// summary, with iputils' ping flooding the same address (bounded: 2 s, 100 000).
#[test]
fn a_raw_socket_beside_another_flood_hears_only_its_own_replies() {
    let _busy = common::serial::busy();
    if !common::privileged("a_raw_socket_beside_another_flood_hears_only_its_own_replies") {
        return;
    }
    let n = NetnsPair::new();
    for host in ["127.0.0.1", "::1"] {
        let flood = NetnsPair::exec(&n.a, &["ping", "-q", "-f", "-c", "100000", "-w", "2", host])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let args = [
            "--socket",
            "raw",
            "--summary",
            "-c",
            "50",
            "-i",
            "0.005",
            host,
        ];
        let (code, ours, err) = run(Some(&n.a), "rttlab", &args);
        let flooded = flood.wait_with_output().unwrap();
        let theirs = String::from_utf8_lossy(&flooded.stdout);
        // The flood ran across the whole of rttlab's run (its own count says so).
        assert!(theirs.contains(" received"), "{host}: {theirs}");
        assert_eq!(code, Some(0), "{host}: {ours}{err}");
        assert!(ours.contains("50 sent, 50 answered"), "{host}: {ours}");
        assert!(!ours.contains("ignored"), "{host}: {ours}");
    }
}

/// Scripts: `tail -1 | awk -F/ '{print $5}'` is the average, as iputils'; one line
/// says "received".
#[test]
fn the_last_line_is_the_rtt_line() {
    let _busy = common::serial::busy();
    if !common::privileged("the_last_line_is_the_rtt_line") {
        return;
    }
    let (code, out, _) = run(None, "rttlab", &["-c", "3", "-i", "0.01", "127.0.0.1"]);
    assert_eq!(code, Some(0));
    let last = out.lines().last().unwrap();
    let avg: f64 = last.split('/').nth(4).unwrap().parse().unwrap();
    let rtt = Regex::new(r"rtt min/avg/max/mdev = [\d.]+/([\d.]+)/").unwrap();
    assert_eq!(avg, rtt.captures(last).unwrap()[1].parse::<f64>().unwrap());
    assert_eq!(out.lines().filter(|l| l.contains("received")).count(), 1);
}

/// Flags rttlab does not do: one line saying why and what to use, status 2, nothing
/// sent.
#[test]
fn refused_flags_say_why() {
    let _busy = common::serial::busy();
    for (flags, says) in [
        (&["-b"][..], "broadcast"),
        (&["-T", "tsprespec"], "tsandaddr"),
        (&["-N", "name"], "node information"),
        (&["-F", "1"], "flow label"),
        (&["-p", "xyz"], "hex"),
        (&["-i", "-1"], "negative"),
    ] {
        let mut args = flags.to_vec();
        args.extend(["-c", "1", "127.0.0.1"]);
        let (code, out, err) = run(None, "rttlab", &args);
        assert_eq!(code, Some(2), "{flags:?}: {err}");
        assert!(out.is_empty(), "{flags:?}: {out}");
        assert_eq!(err.lines().count(), 1, "{flags:?}: {err}");
        assert!(err.contains(says), "{flags:?}: {err}");
    }
}

/// fping's output for several targets: the same lines for `-c 3` and `-C 3 -q`
/// (per-reply lines on stdout, summaries on stderr), times masked; the status of a
/// run where one target never answers.
#[test]
fn several_targets_print_what_fping_prints() {
    let _busy = common::serial::busy();
    if !common::privileged("several_targets_print_what_fping_prints") {
        return;
    }
    let fmask = |text: &str| -> Vec<String> {
        let t = Regex::new(r"\d+\.\d+|NaN").unwrap();
        text.lines()
            .map(|l| t.replace_all(l, "T").to_string())
            .collect()
    };
    let targets = ["127.0.0.1", "::1", "127.0.0.2"];
    for (theirs, ours) in [
        (&["-c", "3", "-p", "200"][..], &["-c", "3", "-i", "0.2"][..]),
        (
            &["-C", "3", "-q", "-p", "200"],
            &["-C", "3", "-q", "-i", "0.2"],
        ),
        (&["-C", "2", "-p", "200"], &["-C", "2", "-i", "0.2"]),
    ] {
        let mut fa = theirs.to_vec();
        fa.extend(targets);
        let mut oa = ours.to_vec();
        oa.extend(targets);
        let (fc, fout, ferr) = run(None, "fping", &fa);
        let (oc, oout, oerr) = run(None, "rttlab", &oa);
        assert_eq!(fc, oc, "{oa:?}");
        // Replies may interleave differently between targets: compare each target's
        // lines in order.
        for t in targets {
            let of = |s: &str| -> Vec<String> {
                fmask(s)
                    .into_iter()
                    .filter(|l| l.split(' ').next() == Some(t))
                    .collect()
            };
            assert_eq!(
                of(&oout),
                of(&fout),
                "{oa:?} stdout\nfping:\n{fout}\nrttlab:\n{oout}"
            );
            assert_eq!(
                of(&oerr),
                of(&ferr),
                "{oa:?} stderr\nfping:\n{ferr}\nrttlab:\n{oerr}"
            );
        }
        assert_eq!(
            fmask(&oerr).iter().filter(|l| l.is_empty()).count(),
            fmask(&ferr).iter().filter(|l| l.is_empty()).count(),
            "{oa:?}: blank lines on stderr"
        );
    }
    // Alive or not, and fping's status 1 when one target is silent.
    let n = NetnsPair::new();
    let silent = "198.18.200.77";
    let (fc, fout, _) = run(Some(&n.a), "fping", &[n.b4, silent]);
    let (oc, oout, _) = run(Some(&n.a), "rttlab", &["-W", "0.5", n.b4, silent]);
    assert_eq!((fc, oc), (Some(1), Some(1)));
    assert_eq!(oout, fout);
}

/// `--tcp PORT`: a handshake per probe, tcpping's lines and iputils' statistics, in a
/// lab whose path has 4 ms each way. Witnesses: the emulator's delay (every answer,
/// a SYN/ACK or a reset, is at least its 8 ms round trip away), the SYNs counted on
/// the wire by an nftables counter in the probed host (as many as "packets
/// transmitted"), and a port whose SYNs that host drops (nothing answers: timeouts,
/// 100 % loss, no rtt line).
#[test]
fn a_tcp_ping_times_the_handshake_and_tells_open_closed_and_silent_ports() {
    if !common::privileged("a_tcp_ping_times_the_handshake") {
        return;
    }
    let lab = common::Lab::up("tcpg", &["--delay", "4ms"]);
    let b = common::bin();
    let b = b.to_str().unwrap();
    let in_host = |host: &str, args: &[&str]| {
        let o = Command::new(b)
            .args(["lab", "exec", "--name", &lab.name, host, "--"])
            .args(args)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).to_string(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("tcpg.nft");
    std::fs::write(
        &rules,
        "table inet rttlab_tcpg {\n chain input {\n  type filter hook input priority 0;\n  \
         tcp dport 12866 tcp flags & (syn|ack) == syn counter\n  tcp dport 7 drop\n }\n}\n",
    )
    .unwrap();
    let (code, _, err) = in_host("b", &["nft", "-f", rules.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let times = |out: &str, state: &str| -> Vec<f64> {
        out.lines()
            .filter(|l| l.contains(&format!("[{state}]")))
            .map(|l| {
                l.rsplit("  ")
                    .next()
                    .unwrap()
                    .trim_end_matches(" ms")
                    .parse()
                    .unwrap()
            })
            .collect()
    };

    let (code, out, err) = in_host(
        "a",
        &[b, "ping", "--tcp", "12866", "-c", "5", "-i", "0.1", "b"],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let open = times(&out, "open");
    assert_eq!(open.len(), 5, "{out}");
    assert!(open.iter().all(|t| *t >= 8.0), "{out}");
    assert!(
        out.contains("5 packets transmitted, 5 received, 0% packet loss"),
        "{out}"
    );
    assert!(
        out.lines()
            .last()
            .unwrap()
            .starts_with("rtt min/avg/max/mdev = "),
        "{out}"
    );
    let (_, table, _) = in_host("b", &["nft", "list", "table", "inet", "rttlab_tcpg"]);
    assert!(
        table.contains("counter packets 5 "),
        "SYNs on the wire: {table}"
    );

    let (code, out, err) = in_host("a", &[b, "ping", "--tcp", "9", "-c", "2", "-i", "0.1", "b"]);
    assert_eq!(code, Some(1), "a closed port is no open one: {out}{err}");
    let closed = times(&out, "closed");
    assert_eq!(closed.len(), 2, "{out}");
    assert!(
        closed.iter().all(|t| *t >= 8.0),
        "the reset crosses the path too: {out}"
    );
    assert!(
        out.contains("2 packets transmitted, 2 received (0 open, 2 closed), 0% packet loss"),
        "{out}"
    );

    let (code, out, err) = in_host(
        "a",
        &[
            b, "ping", "--tcp", "7", "-c", "2", "-i", "0.1", "-W", "0.3", "-n", "b",
        ],
    );
    assert_eq!(code, Some(1), "{out}{err}");
    assert_eq!(out.matches("no response (timeout)").count(), 2, "{out}");
    assert!(
        out.contains("2 packets transmitted, 0 received, 100% packet loss"),
        "{out}"
    );
    assert!(!out.contains("rtt min/avg/max/mdev"), "{out}");
}
