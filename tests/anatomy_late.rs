//! UDP_RR's late replies: a reply that arrives after its request's timeout is a late
//! reply in every count, a transaction with its round trip and its anatomy, and not
//! a loss in either direction. The witness is the wire: tcpdump in both hosts.

use crate::common;
use crate::common::{assert_schema, privileged, Lab, Tcpdump};
use std::time::Duration;

/// tcpdump on `host`'s eth0 in the lab, UDP only, to `pcap`.
fn start_dump(lab: &Lab, host: &str, pcap: &std::path::Path) -> Tcpdump {
    let ns = format!("rttlab-lab-{}-{host}", lab.name);
    Tcpdump::start(Some(&ns), "eth0", pcap, &["udp"])
}

/// Each UDP datagram in `pcap`: (time s, payload length, its first 8 payload bytes as
/// the little-endian sequence rr puts there).
fn datagrams(pcap: &std::path::Path) -> Vec<(f64, usize, u64)> {
    let o = std::process::Command::new("tcpdump")
        .args(["-nn", "-tt", "-x", "-r"])
        .arg(pcap)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let mut out = Vec::new();
    let mut head: Option<(f64, usize)> = None;
    let mut bytes: Vec<u8> = Vec::new();
    let mut flush = |head: &mut Option<(f64, usize)>, bytes: &mut Vec<u8>| {
        // IPv4 (20 bytes, no options) or IPv6 (40) + UDP (8), then the payload.
        if let Some((t, len)) = head.take() {
            let at = if bytes.first().is_some_and(|b| b >> 4 == 6) {
                48
            } else {
                28
            };
            if bytes.len() >= at + 8 {
                let mut b = [0u8; 8];
                b.copy_from_slice(&bytes[at..at + 8]);
                out.push((t, len, u64::from_le_bytes(b)));
            }
        }
        bytes.clear();
    };
    for l in text.lines() {
        if let Some(hex) = l.trim_start().strip_prefix("0x") {
            // "0x0010:  4500 0024 ..." : the words after the offset.
            for w in hex.split_whitespace().skip(1) {
                for i in (0..w.len()).step_by(2) {
                    bytes.push(u8::from_str_radix(&w[i..i + 2], 16).unwrap());
                }
            }
        } else {
            flush(&mut head, &mut bytes);
            let t: f64 = l.split_whitespace().next().unwrap().parse().unwrap();
            let len = l
                .rsplit_once("length ")
                .and_then(|(_, n)| n.trim().parse().ok())
                .unwrap_or_else(|| panic!("no length in {l}"));
            head = Some((t, len));
        }
    }
    flush(&mut head, &mut bytes);
    out
}

/// UDP_RR with every reply later than a fixed 10 ms timeout and no loss: the server
/// thinks 5 ms and the way back takes 9 ± 1 ms, so each reply takes 15–17 ms, well
/// clear of the timeout (no reply can be judged either way by a few µs of stack).
/// Witnesses: tcpdump in both hosts. In b, every request arrived and every response
/// left; in a, every response arrived, each more than 10 ms after its request left
/// (the wire's late replies). rr counts each as a late reply and a transaction, none
/// as lost on the way back; the only reply it may miss is the last, which comes after
/// it stopped (an unattributed loss). Every transaction keeps its anatomy, and its
/// one-way delays are the configured path's.
#[test]
fn late_udp_replies_are_late_not_lost() {
    let _machine = common::serial::machine();
    if !privileged("late_udp_replies_are_late_not_lost") {
        return;
    }
    let lab = Lab::up("ul", &["--delay", "1ms"]);
    lab.set(&[
        "--delay",
        "9ms",
        "--jitter",
        "1ms",
        "--reorder",
        "false",
        "--dir",
        "b2a",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (dir.path().join("a.pcap"), dir.path().join("b.pcap"));
    let (da, db) = (start_dump(&lab, "a", &pa), start_dump(&lab, "b", &pb));
    let n = 150u64;
    let count = n.to_string();
    let doc = lab.in_a(&[
        "rr",
        "-H",
        "b",
        "--anatomy",
        "--json",
        "-t",
        "UDP_RR",
        "-r",
        "8,40",
        "--timeout",
        "10ms",
        "--server-delay",
        "5ms",
        "-n",
        &count,
    ]);
    assert_schema(&doc);
    da.stop();
    db.stop();
    let (at_a, at_b) = (datagrams(&pa), datagrams(&pb));
    let requests = |v: &[(f64, usize, u64)]| v.iter().filter(|d| d.1 == 8).count() as u64;
    let responses = |v: &[(f64, usize, u64)]| v.iter().filter(|d| d.1 == 40).count() as u64;
    // Nothing lost on the path: the same datagrams at both ends.
    assert_eq!(
        (requests(&at_a), requests(&at_b)),
        (n, n),
        "requests on the wire"
    );
    assert_eq!(
        (responses(&at_a), responses(&at_b)),
        (n, n),
        "responses on the wire"
    );
    // At a: each response's time after its request left.
    let sent_at: std::collections::HashMap<u64, f64> = at_a
        .iter()
        .filter(|d| d.1 == 8)
        .map(|d| (d.2, d.0))
        .collect();
    let waits: Vec<f64> = at_a
        .iter()
        .filter(|d| d.1 == 40)
        .map(|d| d.0 - sent_at[&d.2])
        .collect();
    let wire_late = waits.iter().filter(|&&w| w > 0.010).count() as u64;
    let udp = &doc["udp"];
    let w = &doc["anatomy"]["one_way"];
    let a = &doc["anatomy"];
    let got = |v: &serde_json::Value| v.as_u64().unwrap();
    let fastest = waits.iter().copied().fold(f64::MAX, f64::min);
    eprintln!(
        "wire: {wire_late} of {n} replies after 10 ms (fastest {:.3} ms); rr: {udp}; one way lost: {} {} {}",
        fastest * 1e3,
        w["request_lost"],
        w["response_lost"],
        w["unattributed_lost"]
    );
    assert_eq!(
        wire_late, n,
        "every reply later than the timeout on the wire"
    );
    let (late, lost) = (got(&udp["late_replies"]), got(&udp["lost"]));
    assert!(lost <= 1, "only the last may come after rr stopped: {udp}");
    assert_eq!(late + lost, wire_late, "{udp}");
    assert_eq!(got(&udp["stray_replies"]), 0, "{udp}");
    assert_eq!(got(&w["response_lost"]), 0, "{w}");
    assert_eq!(got(&w["request_lost"]), 0, "{w}");
    assert_eq!(got(&w["unattributed_lost"]), lost, "{w}");
    // Every answered transaction, late or not, counted and taken apart (the first
    // may lack a stamp: receive stamping starts lazily). Were the last reply missed,
    // the part of the transaction before it, which rides on that reply, would be too.
    assert_eq!(got(&doc["transactions"]), late, "{doc}");
    assert_eq!(
        got(&a["stamped"]) + got(&a["unstamped"]) + got(&a["inconsistent"]),
        late - lost,
        "{a}"
    );
    assert!(got(&a["stamped"]) + 2 >= late, "{a}");
    // Their one-way delays are the path's: 1 ms out, 9 ± 1 ms back.
    let med = |k: &str| w[k]["percentiles_us"]["p50"].as_f64().unwrap();
    assert!((med("request") - 1_000.0).abs() < 300.0, "{w}");
    assert!((med("response") - 9_000.0).abs() < 1_100.0, "{w}");
    assert_eq!(got(&w["request"]["samples"]), got(&a["stamped"]), "{w}");
}

/// RFC 6298's estimator as rr's adaptive UDP timeout uses it (its 10 ms floor in
/// place of the clock granularity G), by hand: the limit a request had, given the
/// round trips answered in time before it.
struct Rfc6298 {
    srtt: Option<f64>,
    rttvar: f64,
}

impl Rfc6298 {
    fn limit(&self) -> f64 {
        self.srtt
            .map_or(1.0, |s| s + (4.0 * self.rttvar).max(0.010))
    }

    fn sample(&mut self, r: f64) {
        match self.srtt {
            None => (self.srtt, self.rttvar) = (Some(r), r / 2.0),
            Some(s) => {
                self.rttvar = 0.75 * self.rttvar + 0.25 * (s - r).abs();
                self.srtt = Some(0.875 * s + 0.125 * r);
            }
        }
    }
}

/// UDP_RR under the adaptive timeout (no `--timeout`), no loss: 1.4 s into a 3 s
/// run the way back steps from 1 ms to 100 ms: far above what a loaded machine adds to
/// rr's own samples (rr learns from when it woke, which a preempted vCPU stretches by
/// tens of ms, and one stretched sample before a step to 30 ms once lifted its limit
/// past the new round trip under a CPU hog). The timeout, adapted to the 2 ms round
/// trip, stays there (late replies do not feed it, as Karn's rule keeps retransmitted
/// segments out of TCP's estimate), so from then on the replies come late; the run
/// goes on to its end and its last replies come after it stopped. Witnesses: tcpdump
/// in both hosts, and RFC 6298's arithmetic on the wire's own round trips. Every
/// request and response is seen at both ends (nothing lost). At a, each response's
/// wait after its request is judged against the limit its request had, computed from
/// the wire's earlier on-time round trips. rr's clock stands a little off the wire's
/// (its send stamp is taken before `send()`, and a preempted vCPU can stretch that),
/// so a wait within 1 ms of its limit (an emulator hiccup landing there: a few per
/// run on a busy machine) could be judged either way and is counted apart; every
/// other one is judged by the wire alone. rr counts the wire's late replies as late
/// or, for the last in flight, as lost at the end and unattributed; neither
/// direction loses any; every answered transaction is taken apart.
#[test]
fn replies_pushed_past_the_adaptive_timeout_are_late_not_lost() {
    let _machine = common::serial::machine();
    if !privileged("replies_pushed_past_the_adaptive_timeout_are_late_not_lost") {
        return;
    }
    let lab = Lab::up("ua", &["--delay", "1ms"]);
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (dir.path().join("a.pcap"), dir.path().join("b.pcap"));
    let (da, db) = (start_dump(&lab, "a", &pa), start_dump(&lab, "b", &pb));
    let doc = std::thread::scope(|s| {
        let run = s.spawn(|| {
            lab.in_a(&[
                "rr",
                "-H",
                "b",
                "--anatomy",
                "--json",
                "-t",
                "UDP_RR",
                "-r",
                "8,40",
                "-l",
                "3",
            ])
        });
        std::thread::sleep(Duration::from_millis(1400));
        lab.set(&["--delay", "100ms", "--dir", "b2a"]);
        run.join().unwrap()
    });
    assert_schema(&doc);
    assert_eq!(
        doc["settings"]["timeout_adaptive"], true,
        "{}",
        doc["settings"]
    );
    da.stop();
    db.stop();
    let (at_a, at_b) = (datagrams(&pa), datagrams(&pb));
    let count = |v: &[(f64, usize, u64)], len: usize| v.iter().filter(|d| d.1 == len).count();
    let n = count(&at_a, 8);
    assert_eq!(
        (count(&at_b, 8), count(&at_a, 40), count(&at_b, 40)),
        (n, n, n),
        "{n} requests left a: nothing lost on the path"
    );
    // Requests in the order sent, each with its response's arrival at a.
    let back: std::collections::HashMap<u64, f64> = at_a
        .iter()
        .filter(|d| d.1 == 40)
        .map(|d| (d.2, d.0))
        .collect();
    let mut estimator = Rfc6298 {
        srtt: None,
        rttvar: 0.0,
    };
    let (mut wire_late, mut close) = (0u64, Vec::new());
    for d in at_a.iter().filter(|d| d.1 == 8) {
        let (wait, limit) = (back[&d.2] - d.0, estimator.limit());
        if (wait - limit).abs() < 0.001 {
            close.push((wait, limit));
        } else if wait > limit {
            wire_late += 1;
        }
        if wait < limit {
            estimator.sample(wait);
        }
    }
    let got = |v: &serde_json::Value| v.as_u64().unwrap();
    let (udp, w, a) = (&doc["udp"], &doc["anatomy"]["one_way"], &doc["anatomy"]);
    eprintln!(
        "wire: {wire_late} of {n} replies past their limit, {} within 1 ms of it; rr: {udp}",
        close.len()
    );
    assert!(wire_late >= 20, "the step made {wire_late} late replies");
    assert!(
        wire_late < n as u64 / 2,
        "most replies on time: {wire_late} of {n}"
    );
    // The requests still on their way when the last one left a: rr stopped before
    // their replies came.
    let last_sent = at_a
        .iter()
        .filter(|d| d.1 == 8)
        .map(|d| d.0)
        .fold(f64::MIN, f64::max);
    let in_flight = at_a
        .iter()
        .filter(|d| d.1 == 8 && back[&d.2] > last_sent)
        .count() as u64;
    let (late, lost) = (got(&udp["late_replies"]), got(&udp["lost"]));
    assert!(
        lost <= in_flight,
        "only the {in_flight} in flight at the end may come after rr stopped: {udp}"
    );
    assert!(
        close.len() as u64 * 10 <= wire_late,
        "too many waits within 1 ms of their limit to judge: {close:?}"
    );
    let judged = wire_late..=wire_late + close.len() as u64;
    assert!(
        judged.contains(&(late + lost)),
        "the wire says {judged:?} late (within 1 ms: {close:?}): {udp}"
    );
    assert_eq!(got(&udp["stray_replies"]), 0, "{udp}");
    assert_eq!(got(&w["request_lost"]), 0, "{w}");
    assert_eq!(got(&w["response_lost"]), 0, "{w}");
    assert_eq!(got(&w["unattributed_lost"]), lost, "{w}");
    let answered = n as u64 - lost;
    assert_eq!(got(&doc["transactions"]), answered, "{doc}");
    // The last reply missed carries the part of the transaction before it.
    let parts = got(&a["stamped"]) + got(&a["unstamped"]) + got(&a["inconsistent"]);
    assert!(
        parts + lost.min(1) == answered,
        "{parts} of {answered}: {a}"
    );
    assert!(got(&a["stamped"]) + 2 + lost >= answered, "{a}");
}
