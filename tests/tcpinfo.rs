//! `rttlab tcpinfo` against `ss -ti` on the same sockets, and seed 000's first chart:
//! the server's TCP RTT rises with the client's wait up to the delayed-ACK timer.

use crate::common;

use crate::common::{bin, free_port, NetnsPair};
use std::process::{Command, Stdio};
use std::time::Duration;

fn csv_rows(out: &[u8]) -> Vec<Vec<String>> {
    String::from_utf8_lossy(out)
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(str::to_owned).collect())
        .collect()
}

/// `rttlab rr` with its in-process server on fixed data port `port`, waiting `wait`.
fn rr_in_background(port: u16, wait: &str, secs: &str) -> std::process::Child {
    Command::new(bin())
        .args([
            "rr",
            "-P",
            &port.to_string(),
            "-w",
            wait,
            "-l",
            secs,
            "-o",
            "TRANSACTIONS",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

/// Median server-side srtt (µs) while a client in namespace a waits `wait` between
/// transactions with a server in namespace b, sampled from the root namespace.
fn server_srtt(n: &NetnsPair, port: u16, wait: &str) -> f64 {
    let client = NetnsPair::exec(
        &n.a,
        &[
            bin().to_str().unwrap(),
            "rr",
            "-H",
            n.b4,
            "-P",
            &port.to_string(),
            "-w",
            wait,
            "-l",
            "2.5",
            "-o",
            "TRANSACTIONS",
        ],
    )
    .stdout(Stdio::null())
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    // The server's data socket is the one in b whose local port is the data port.
    let o = Command::new(bin())
        .args([
            "tcpinfo",
            "--netns",
            &n.b,
            "--sport",
            &port.to_string(),
            "-i",
            "100ms",
            "-c",
            "10",
            "--csv",
        ])
        .output()
        .unwrap();
    let _ = client.wait_with_output();
    let mut rtts: Vec<f64> = csv_rows(&o.stdout)
        .iter()
        .map(|r| r[5].parse().unwrap())
        .collect();
    assert!(rtts.len() >= 8, "{}", String::from_utf8_lossy(&o.stdout));
    rtts.sort_by(f64::total_cmp);
    rtts[rtts.len() / 2]
}

#[test]
fn server_rtt_rises_with_the_wait_up_to_the_delayed_ack_timer() {
    let _machine = common::serial::machine();
    if !common::privileged("server_rtt_rises_with_the_wait_up_to_the_delayed_ack_timer") {
        return;
    }
    // The server's RTT sample is response → ACK; the ACK rides on the next request, so
    // it waits `w`, until the client's delayed-ACK timer (40 ms, TCP_DELACK_MIN) fires;
    // beyond that Linux leaves pingpong mode and ACKs at once (seed 000, "TCP Computed
    // RTT vs Response/Request Interval").
    let n = NetnsPair::new();
    let srv = n.serve_in_b(n.b4, 12866, &[]);
    // The four waits at once, each on its own data port and connection.
    let n = &n;
    let [r0, r10, r25, r80] = std::thread::scope(|s| {
        [
            (20010, "0"),
            (20011, "10ms"),
            (20012, "25ms"),
            (20013, "80ms"),
        ]
        .map(|(port, wait)| s.spawn(move || server_srtt(n, port, wait)))
        .map(|h| h.join().unwrap())
    });
    drop(srv);
    assert!(r0 < 2_000.0, "w=0: {r0} µs");
    assert!((8_000.0..20_000.0).contains(&r10), "w=10ms: {r10} µs");
    assert!((20_000.0..38_000.0).contains(&r25), "w=25ms: {r25} µs");
    assert!(
        r80 < 10_000.0,
        "w=80ms, past the delayed-ACK timer: {r80} µs"
    );
}

#[test]
fn agrees_with_ss_on_the_same_socket() {
    let _busy = common::serial::busy();
    let port = free_port();
    let client = rr_in_background(port, "200ms", "2");
    std::thread::sleep(Duration::from_millis(700));
    // Both tools read one state: rr (client and its in-process server) is stopped, and
    // once a request or response in flight has been taken and ACKed (the delayed-ACK
    // timer fires within 40 ms, a retransmission within the 200 ms rto_min) the socket
    // changes no more. Reading between transactions alone was not enough under a CPU
    // hog: a transaction came between the two reads (cwnd 14, then 15).
    let pid = client.id() as i32;
    // SAFETY: kill(2) on a child of this test.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(300));
    let ours = Command::new(bin())
        .args(["tcpinfo", "--sport", &port.to_string(), "--csv"])
        .output()
        .unwrap();
    let ss = Command::new("ss")
        .args([
            "-tin",
            "state",
            "established",
            "sport",
            "=",
            &format!(":{port}"),
        ])
        .output()
        .unwrap();
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let _ = client.wait_with_output();
    let row = &csv_rows(&ours.stdout)[0];
    let text = String::from_utf8_lossy(&ss.stdout);
    let field = |name: &str| -> String {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .to_owned()
    };
    let rto_ms: f64 = field("rto").parse().unwrap();
    assert_eq!(row[8].parse::<f64>().unwrap() / 1000.0, rto_ms, "rto");
    assert_eq!(row[14], field("cwnd"), "cwnd");
    // ss prints rtt:SRTT/RTTVAR in ms with 3 decimals.
    let srtt_ms: f64 = field("rtt").split('/').next().unwrap().parse().unwrap();
    let ours_ms = row[5].parse::<f64>().unwrap() / 1000.0;
    assert!(
        (ours_ms - srtt_ms).abs() <= 0.002 + srtt_ms * 0.01,
        "srtt ours {ours_ms} ms, ss {srtt_ms} ms"
    );
    // ss names the congestion control as a bare word (e.g. "bbr", "cubic").
    assert!(
        text.split_whitespace().any(|w| w == row[4]),
        "cc {} not in {text}",
        row[4]
    );
}

#[test]
fn bad_filters_are_named() {
    let _busy = common::serial::busy();
    for (args, needle) in [
        (vec!["tcpinfo", "--src", "10.0.0.0/33"], "prefix must be"),
        (vec!["tcpinfo", "--dst", "nonsense"], "not an address"),
        (vec!["tcpinfo", "-i", "1ms"], "at least 10ms"),
        (vec!["tcpinfo", "-c", "3"], "need --interval"),
        (vec!["tcpinfo", "--netns", "rttlab-no-such-ns"], "not found"),
    ] {
        let o = Command::new(bin()).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains(needle),
            "{args:?}: {err}"
        );
    }
}

/// `tcpinfo -i` without -l or -c is a stream until Ctrl-C: rows arrive while it runs,
/// and SIGINT ends it cleanly. Witness: rows read from the running child, the count of
/// rows against the elapsed intervals, and its exit status.
#[test]
fn an_interval_without_a_length_streams_until_interrupted() {
    let _busy = common::serial::busy();
    use std::io::BufRead;
    let port = free_port();
    let client = rr_in_background(port, "10ms", "4");
    std::thread::sleep(Duration::from_millis(500));
    let mut child = Command::new(bin())
        .args([
            "tcpinfo",
            "--sport",
            &port.to_string(),
            "-i",
            "50ms",
            "--csv",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let header = lines.next().unwrap().unwrap();
    assert!(header.starts_with("t_ms"), "{header}");
    let t0 = std::time::Instant::now();
    let rows: Vec<String> = lines.by_ref().take(10).map(Result::unwrap).collect();
    let took = t0.elapsed();
    assert_eq!(rows.len(), 10);
    // 10 rows of one socket at 50 ms: about half a second, far from a buffer's flush.
    assert!(took < Duration::from_secs(3), "{took:?}");
    // SAFETY: a child we started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let _ = client.wait_with_output();
}
