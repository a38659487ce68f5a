//! `rr --anatomy`'s tail: the slowest share it reports is exactly the run's top
//! ⌈n × share⌉ by round trip. The witness is the run's own log of every joined
//! transaction (`--slow 0`), sorted by the test: the tail holds as many as the log's
//! top 1 %, starts at the log's ⌈n/100⌉-th largest round trip to the nanosecond, and no
//! other logged transaction has that round trip, so the two sets are the same; and the
//! rr histogram's P99 of the same transactions is at or below the tail's start (3
//! significant digits).

use crate::common;

use crate::common::{assert_schema, assert_schema_lines, privileged, Lab};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// `rttlab rr -H b --anatomy --json --slow 0 --slow-log LOG ARGS` in the lab's host a:
/// the result and every joined transaction's round trip, ns.
fn logged_run(lab: &Lab, args: &[&str]) -> (serde_json::Value, Vec<u64>) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("all.jsonl");
    let log_arg = log.to_str().unwrap();
    let doc = lab.in_a(
        &[
            &[
                "rr",
                "-H",
                "b",
                "--anatomy",
                "--json",
                "--slow",
                "0",
                "--slow-log",
                log_arg,
            ],
            args,
        ]
        .concat(),
    );
    assert_schema(&doc);
    let lines = assert_schema_lines(&std::fs::read_to_string(&log).unwrap());
    let rtts = lines
        .iter()
        .map(|l| l["rtt_ns"].as_u64().unwrap())
        .collect();
    (doc, rtts)
}

/// The tail of `doc` against every transaction's round trip, `rtts`; returns (the
/// tail's start, the P99 it is printed beside), µs.
fn assert_tail_is_the_logs_top(
    what: &str,
    doc: &serde_json::Value,
    mut rtts: Vec<u64>,
) -> (f64, f64) {
    let old = running_count_rule(&rtts);
    let a = &doc["anatomy"];
    let stamped = a["stamped"].as_u64().unwrap();
    assert_eq!(
        rtts.len() as u64,
        stamped,
        "{what}: every joined transaction is logged"
    );
    let tail = &a["tail"];
    assert_eq!(tail["share_pct"], 1.0, "{what}: {tail}");
    assert_eq!(tail["exact"], true, "{what}: {tail}");
    let k = stamped.div_ceil(100);
    assert_eq!(tail["transactions"].as_u64(), Some(k), "{what}: {tail}");
    rtts.sort_unstable_by(|x, y| y.cmp(x));
    let kth = rtts[k as usize - 1];
    let from = tail["from_rtt_us"].as_f64().unwrap();
    assert_eq!(
        (from * 1e3).round() as u64,
        kth,
        "{what}: the tail starts at {from} µs, the log's {k}-th slowest is {kth} ns (top: {:?})",
        &rtts[..k as usize]
    );
    // No tie at the boundary: k transactions at or above it, so the sets are one.
    assert_eq!(
        rtts.iter().filter(|&&r| r >= kth).count() as u64,
        k,
        "{what}: a tie at {kth} ns"
    );
    let p99 = tail["rtt_percentile_us"].as_f64().unwrap();
    assert!(
        from >= p99 * (1.0 - 1e-3),
        "{what}: the tail starts at {from} µs, below the histogram's P99 {p99} µs"
    );
    eprintln!(
        "{what}: {stamped} stamped, tail {k} from {from} µs, P99 {p99} µs; the running-count rule on the same log: from {} µs",
        old as f64 / 1e3
    );
    (from, p99)
}

/// The start of the tail the rule this replaced kept, replayed over `rtts` in the
/// order they were joined: a heap of ⌈joined × 1 %⌉, refilled as the count grew.
fn running_count_rule(rtts: &[u64]) -> u64 {
    let mut heap = std::collections::BinaryHeap::new();
    for (i, &r) in rtts.iter().enumerate() {
        let room = (i as u64 + 1).div_ceil(100).max(1) as usize;
        heap.push(std::cmp::Reverse(r));
        while heap.len() > room {
            heap.pop();
        }
    }
    heap.peek().map_or(0, |r| r.0)
}

/// Loss (3 % each way on a 2 ms path): the slow transactions are a few retransmitted
/// ones (≥ 200 ms each), many of them early in the run, which the running-count rule
/// discarded. By count and by time.
#[test]
fn the_tail_under_loss_is_the_logs_top_one_percent() {
    if !privileged("the_tail_under_loss_is_the_logs_top_one_percent") {
        return;
    }
    let lab = Lab::counting("tl", &["--delay", "1ms", "--loss", "3%"]);
    let (doc, rtts) = logged_run(&lab, &["-n", "600"]);
    assert_tail_is_the_logs_top("loss, -n 600", &doc, rtts);
    let (doc, rtts) = logged_run(&lab, &["-l", "4"]);
    assert_tail_is_the_logs_top("loss, -l 4", &doc, rtts);
}

/// A busy loop on the server's CPU (`-T 0,1`, the hog pinned to CPU 1 for the run):
/// the server waits for its CPU now and then, a few ms each time. By count and by time.
#[test]
fn the_tail_under_a_cpu_hog_is_the_logs_top_one_percent() {
    let _machine = common::serial::machine();
    if !privileged("the_tail_under_a_cpu_hog_is_the_logs_top_one_percent") {
        return;
    }
    if !common::two_cpus("the_tail_under_a_cpu_hog_is_the_logs_top_one_percent") {
        return;
    }
    let lab = Lab::up("th", &["--delay", "1ms"]);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: a zeroed cpu_set_t with CPU 1 set, for this thread (0).
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(1, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
            }
            // Bounded: 60 s at most, whatever happens to the runs.
            let until = Instant::now() + Duration::from_secs(60);
            while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                std::hint::spin_loop();
            }
        });
        let (doc, rtts) = logged_run(&lab, &["-T", "0,1", "-n", "1000"]);
        let (doc2, rtts2) = logged_run(&lab, &["-T", "0,1", "-l", "2"]);
        stop.store(true, Ordering::Relaxed);
        assert_tail_is_the_logs_top("hog, -n 1000", &doc, rtts);
        assert_tail_is_the_logs_top("hog, -l 2", &doc2, rtts2);
    });
}
