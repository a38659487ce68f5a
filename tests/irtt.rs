//! irtt's measurements in rttlab's open loop, in the lab (root). The one-way delays:
//! open-loop UDP_RR and `irtt client` (installed) on the same fixed schedule at the
//! same time, from host a to host b, over a path whose emulator delays the two
//! directions differently; witnesses: irtt's own send and receive delays (a second
//! implementation, with user-space stamps at both ends), and the emulator's configured
//! delays; irtt's RTT (the round trip less the server's processing) against rttlab's
//! `rtt_irtt` and the two delays added. The losses by direction: a blackout of the data port each way; witness: the
//! emulator's count of the frames it dropped in each.

use crate::common;

use crate::common::{bin, privileged, KillOnDrop, Lab};
use std::path::Path;
use std::process::{Command, Stdio};

/// How far rttlab's fastest one-way delays may be from the emulator's, µs. Its
/// medians were 2–10 µs off with the machine quiet and up to 43 µs with a CPU hog
/// beside the lab (bench/RESULTS-irtt.md), but 600 µs with a hog and a second load:
/// a preempted emulator really holds frames longer than its delay, and rttlab
/// measures that truly. So each tool is judged by its minimum of some 300 transactions,
/// which only needs one frame each way released and stamped on time; a wrong clock or
/// a swapped direction moves the minimum as much as the median. 100 µs is a thirtieth
/// of the 3 ms between the two directions.
const RTTLAB_MARGIN_US: f64 = 100.0;
/// How far irtt's fastest one-way delays may be from rttlab's and from the emulator's,
/// µs. irtt stamps in user space at both ends, after wake-ups the kernel's stamps
/// rttlab reads leave out: its medians ran 16–54 µs above the emulator's delays on
/// this 2-vCPU VM when quiet, 100–160 µs on a busier day, and a CPU hog beside the lab
/// once put one 1.5 ms off (rttlab's stayed within 43 µs). So irtt is judged by its
/// minimum of some 300 round trips, which only needs one of them not to be preempted,
/// and rttlab likewise; 250 µs still tells the two directions (3 ms apart) and a
/// wrong clock offset apart.
const IRTT_MARGIN_US: f64 = 250.0;
/// The emulator's delays, µs: a → b (the requests) and b → a (the responses).
const A2B_US: f64 = 2_000.0;
const B2A_US: f64 = 5_000.0;

/// Whether irtt is installed; without it the test is skipped, unless
/// RTTLAB_REQUIRE_PRIVILEGED_TESTS=1 (CI, which installs it) makes that a failure.
fn have_irtt(test: &str) -> bool {
    let ok = Command::new("irtt")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    let required = std::env::var("RTTLAB_REQUIRE_PRIVILEGED_TESTS").is_ok_and(|v| v == "1");
    assert!(
        ok || !required,
        "{test}: irtt is not installed (apt-get install irtt)"
    );
    if !ok {
        eprintln!("skipping {test}: irtt is not installed (apt-get install irtt)");
    }
    ok
}

/// The median of `v`.
fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty());
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One run of both tools at once: (rttlab's send and receive delays and irtt RTT,
/// irtt's of the same three: each the minimum, then each the median), µs.
/// rttlab's delays come from its raw log, each line checked against the result.
fn both_at_once(lab: &Lab, dir: &Path) -> [[f64; 3]; 4] {
    let bin = bin();
    let bin = bin.to_str().unwrap();
    let out = dir.join("irtt.json");
    let irtt_client = Command::new(bin)
        .args(["lab", "exec", "--name", &lab.name, "a", "--"])
        .args([
            "irtt",
            "client",
            "-i",
            "10ms",
            "-d",
            "3s",
            "--fill=rand",
            // Replies late at the end (a preempted vCPU) still count: irtt's default
            // wait is three of its largest round trips, a few ms here.
            "--wait=1s",
            "-Q",
        ])
        .args([
            "-o",
            out.to_str().unwrap(),
            &format!("{}:2112", lab.ipv4("b")),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // 3 s at 100/s, every transaction in the raw log.
    let raw = dir.join("raw.jsonl");
    let v = lab.in_a(&[
        "rr",
        "-H",
        "b",
        "-t",
        "UDP_RR",
        "--rate",
        "100/s",
        "-l",
        "3",
        "--json",
        "--raw-log",
        raw.to_str().unwrap(),
    ]);
    let o = irtt_client.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "irtt client: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let w = &v["one_way"];
    assert_eq!(w["clock"], "same", "the lab's hosts share one kernel: {w}");
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&raw)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let sent = v["transactions"].as_u64().unwrap() + v["udp"]["lost"].as_u64().unwrap();
    assert_eq!(lines.len() as u64, sent);
    assert!(sent >= 290, "{sent} transactions in 3 s at 100/s");
    let delays = |key: &str| -> Vec<f64> {
        lines
            .iter()
            .filter_map(|l| l[key].as_i64())
            .map(|ns| ns as f64 / 1e3)
            .collect()
    };
    let (r_send, r_recv) = (delays("send_delay_ns"), delays("receive_delay_ns"));
    // irtt's RTT, per transaction: the round trip less the server's processing (its
    // receive to its send stamp), as the result's rtt_less_server counts it.
    let us = |l: &serde_json::Value, k: &str| l[k].as_u64().map(|v| v as f64 / 1e3);
    let r_rtts: Vec<f64> = lines
        .iter()
        .filter_map(|l| {
            let held = us(l, "server_tx_unix_ns")? - us(l, "server_rx_unix_ns")?;
            Some(us(l, "rtt_ns")? - held)
        })
        .collect();
    assert!(
        r_send.len() as u64 >= sent - 2,
        "{} of {sent}",
        r_send.len()
    );
    // No frame leaves the emulator before its delay.
    let min = |v: &[f64]| v.iter().copied().fold(f64::MAX, f64::min);
    assert!(min(&r_send) >= A2B_US && min(&r_recv) >= B2A_US, "{w}");
    let r_mins = [min(&r_send), min(&r_recv), min(&r_rtts)];
    let (r_send, r_recv) = (median(r_send), median(r_recv));
    // The JSON's median is the same, within its histogram's 3 significant digits.
    let p50 = |k: &str| w[k]["percentiles_us"]["p50"].as_f64().unwrap();
    assert!((p50("request") - r_send).abs() <= r_send * 2e-3, "{w}");
    assert!((p50("response") - r_recv).abs() <= r_recv * 2e-3, "{w}");

    let irtt: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let stat = |k: &str, of: &str| irtt["stats"][k][of].as_f64().unwrap_or(f64::NAN) / 1e3;
    // irtt skips a send its timer was late for (a preempted vCPU: `timer_misses`), so
    // what it sent plus what it skipped is the 300 asked for; of what it sent, the
    // emulator loses nothing.
    let count = |k: &str| irtt["stats"][k].as_u64().unwrap();
    let irtt_n = irtt["stats"]["send_delay"]["n"].as_u64().unwrap();
    let (sent_by_irtt, missed) = (count("packets_sent"), count("timer_misses"));
    assert!(
        sent_by_irtt + missed >= 290 && sent_by_irtt >= 200,
        "irtt sent {sent_by_irtt} and skipped {missed} of 300 requests"
    );
    assert!(
        irtt_n + 2 >= sent_by_irtt,
        "irtt timed {irtt_n} of the {sent_by_irtt} requests it sent"
    );
    // irtt's RTT is the round trip less the server's processing: rttlab's `rtt_irtt`
    // row, beside the server's processing it leaves out.
    let r_rtt = p50("rtt_less_server");
    assert!((median(r_rtts) - r_rtt).abs() <= r_rtt * 2e-3, "{w}");
    assert!(
        w["server_processing"]["samples"].as_u64().unwrap() >= sent - 2,
        "{w}"
    );
    let irtt_of = |of| {
        [
            stat("send_delay", of),
            stat("receive_delay", of),
            stat("rtt", of),
        ]
    };
    [
        r_mins,
        irtt_of("min"),
        [r_send, r_recv, r_rtt],
        irtt_of("median"),
    ]
}

#[test]
fn open_loop_one_way_delays_match_irtt_and_the_emulator() {
    let test = "open_loop_one_way_delays_match_irtt_and_the_emulator";
    if !privileged(test) || !have_irtt(test) {
        return;
    }
    let _g = common::serial::machine();
    let lab = Lab::up("irtt", &["--delay", "2ms"]);
    lab.set(&["--dir", "b2a", "--delay", "5ms"]);
    let bin = bin();
    let _irtt_server = KillOnDrop(
        Command::new(&bin)
            .args(["lab", "exec", "--name", &lab.name, "b", "--"])
            .args(["irtt", "server", "-b", &format!("{}:2112", lab.ipv4("b"))])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    // Until rttlab's server in b answers (which gives irtt's the same time).
    lab.in_a(&["rr", "-H", "b", "-n", "1", "--json"]);
    let [[r_send, r_recv, r_rtt], [i_send, i_recv, i_rtt], r_med, i_med] =
        both_at_once(&lab, dir.path());
    let figures = format!(
        "one-way, µs, minimum (median): send rttlab {r_send:.1} ({:.1}) irtt {i_send:.1} ({:.1}) (emulator {A2B_US}); \
         receive rttlab {r_recv:.1} ({:.1}) irtt {i_recv:.1} ({:.1}) (emulator {B2A_US}); \
         irtt's RTT rttlab {r_rtt:.1} ({:.1}) irtt {i_rtt:.1} ({:.1}) (emulator {})",
        r_med[0],
        i_med[0],
        r_med[1],
        i_med[1],
        r_med[2],
        i_med[2],
        A2B_US + B2A_US
    );
    eprintln!("{figures}");
    // Nothing leaves the emulator before its delay, in either tool's stamps.
    assert!(i_send >= A2B_US && i_recv >= B2A_US, "{figures}");
    assert!((r_send - A2B_US).abs() <= RTTLAB_MARGIN_US, "{figures}");
    assert!((r_recv - B2A_US).abs() <= RTTLAB_MARGIN_US, "{figures}");
    assert!((i_send - r_send).abs() <= IRTT_MARGIN_US, "{figures}");
    assert!((i_recv - r_recv).abs() <= IRTT_MARGIN_US, "{figures}");
    // irtt's RTT, the round trip less the server's processing, is the path's: both
    // tools' within their margins of the emulator's two delays, and of each other.
    assert!(i_rtt >= A2B_US + B2A_US, "{figures}");
    assert!(
        (r_rtt - (A2B_US + B2A_US)).abs() <= 2.0 * RTTLAB_MARGIN_US,
        "{figures}"
    );
    assert!((i_rtt - r_rtt).abs() <= 2.0 * IRTT_MARGIN_US, "{figures}");
}

/// Which way each loss went, as irtt's upstream/downstream loss: the emulator blacks
/// out the test's data port for 200 ms one way, then 300 ms the other. Witness: the
/// emulator's count of the datagrams it dropped in each direction's blackout, against
/// the result's counts and each raw-log line's `lost_way`.
#[test]
fn open_loop_losses_are_told_apart_by_direction() {
    if !privileged("open_loop_losses_are_told_apart_by_direction") {
        return;
    }
    let _g = common::serial::machine();
    let lab = Lab::up("owloss", &["--delay", "1ms"]);
    let port = "20001";
    lab.set(&[
        "--dir",
        "a2b",
        "--blackout",
        "200ms",
        "--port",
        port,
        "--at",
        "+1s",
    ]);
    lab.set(&[
        "--dir",
        "b2a",
        "--blackout",
        "300ms",
        "--port",
        port,
        "--at",
        "+2s",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("raw.jsonl");
    let v = lab.in_a(&[
        "rr",
        "-H",
        "b",
        "-t",
        "UDP_RR",
        "--rate",
        "100/s",
        "-l",
        "3.5",
        "-P",
        port,
        "--timeout",
        "500ms",
        "--json",
        "--raw-log",
        raw.to_str().unwrap(),
    ]);
    let list = lab.cmd(&["list", "--json"]);
    let st: serde_json::Value = list
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|l| l["info"]["name"] == lab.name.as_str())
        .unwrap();
    let dropped = |d: &str| st[d]["counters"]["drop_blackout"].as_u64().unwrap();
    let (out, back) = (dropped("a2b"), dropped("b2a"));
    // 200 ms and 300 ms at 100/s is 20 and 30, when the open loop keeps its pace; a
    // busy machine delays the sender, and fewer fall inside a window (20 and 22 were
    // seen with a busy loop beside the test). Each blackout must have caught several.
    assert!(out >= 5 && back >= 5, "{out}, {back}");
    let w = &v["one_way"];
    assert_eq!(
        (w["request_lost"].as_u64(), w["response_lost"].as_u64()),
        (Some(out), Some(back)),
        "{w}"
    );
    assert_eq!(w["unattributed_lost"], 0);
    assert_eq!(v["udp"]["lost"].as_u64(), Some(out + back));
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&raw)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let way = |w: &str| lines.iter().filter(|l| l["lost_way"] == w).count() as u64;
    assert_eq!((way("request"), way("response")), (out, back));
    // One window each, the requests' first: each way's losses are consecutive
    // transactions (one stream), all of the requests' before any of the responses'.
    let seqs = |w: &str| -> Vec<u64> {
        let mut s: Vec<u64> = lines
            .iter()
            .filter(|l| l["lost_way"] == w)
            .map(|l| l["seq"].as_u64().unwrap())
            .collect();
        s.sort_unstable();
        assert!(s.windows(2).all(|p| p[1] == p[0] + 1), "{w}: {s:?}");
        s
    };
    let (requests, responses) = (seqs("request"), seqs("response"));
    assert!(
        requests.last() < responses.first(),
        "{requests:?} {responses:?}"
    );
    // The last response lost in the run carried none, but the server's part of its
    // request came back on the next reply: that one's send delay is known.
    let sends: Vec<i64> = lines
        .iter()
        .filter(|l| l["lost_way"] == "response")
        .filter_map(|l| l["send_delay_ns"].as_i64())
        .collect();
    assert!(
        !sends.is_empty() && sends.iter().all(|&d| d >= 1_000_000),
        "{sends:?}"
    );
}
