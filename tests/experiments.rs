//! The seeds' experiments, shortened, in labs they build and remove: each writes its
//! results directory (raw data, tables, charts, report), resumes instead of redoing,
//! and its numbers are checked against their raw files (arithmetic) and against what
//! the kernel's rules force (the witness named at each check).

use crate::common;

use crate::common::{bin, privileged};
use rttlab::passive::sampler::bucket_percentile;
use rttlab::stats::LatencyHistogram;
use std::path::Path;
use std::process::Command;

fn trials(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("trials.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn hist(dir: &Path, file: &str) -> LatencyHistogram {
    LatencyHistogram::from_csv(&std::fs::read_to_string(dir.join(file)).unwrap()).unwrap()
}

fn run(args: &[&str], dir: &Path) -> String {
    let o = Command::new(bin())
        .args(args)
        .arg("--out")
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn resreq_interval_shows_the_servers_srtt_holding_the_clients_wait() {
    let _busy = common::serial::busy();
    if !privileged("resreq_interval_shows_the_servers_srtt_holding_the_clients_wait") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "experiment",
        "resreq-interval",
        "--interval",
        "0,8ms",
        "--duration",
        "3s",
    ];
    let text = run(&args, dir.path());
    assert!(
        text.contains("MIN_LATENCY") && text.contains("SRTT_SERVER_ms"),
        "{text}"
    );
    let t = trials(dir.path());
    assert_eq!(t.len(), 2);
    for p in &t {
        assert!(p["error"].is_null(), "{p}");
        assert!(p["transactions"].as_u64().unwrap() > 100, "{p}");
        // Arithmetic: the rr row is its histogram file's.
        let w = p["wait_ms"].as_f64().unwrap();
        let rr = hist(dir.path(), &format!("wait-{w}ms.rr.hist.csv"));
        assert_eq!(rr.count(), p["transactions"].as_u64().unwrap());
        assert_eq!(
            rr.quantile_ns(0.5).map(|v| v as f64 / 1e3),
            p["p50_us"].as_f64()
        );
        // Arithmetic: each metric is the median interpolated in its own buckets.
        for who in ["client_metric", "server_metric"] {
            let m = &p[who];
            let buckets: Vec<u64> = serde_json::from_value(m["buckets"].clone()).unwrap();
            assert_eq!(
                bucket_percentile(&buckets, 0.5),
                m["metric_ms"]["p50"].as_f64(),
                "{m}"
            );
        }
    }
    // The kernel's rule (seed 000): at an 8 ms wait the server's response is ACKed by
    // the next request, at least 8 ms later, so every srtt the server computes holds
    // the wait; the client's request is ACKed by the response at once. Lower
    // quartiles: a noisy machine only ever adds delay.
    let srv = hist(dir.path(), "wait-8ms.server_srtt.hist.csv");
    let cli = hist(dir.path(), "wait-8ms.client_srtt.hist.csv");
    let (s25, c25) = (
        srv.quantile_ns(0.25).unwrap(),
        cli.quantile_ns(0.25).unwrap(),
    );
    assert!(s25 >= 6_000_000, "server srtt P25 {s25} ns");
    assert!(
        s25 > c25 + 4_000_000,
        "server P25 {s25} ns, client P25 {c25} ns"
    );
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert_eq!(html.matches("<figure").count(), 3);
    assert!(html.contains("Findings"));
    // Resumed, not redone: the same command finds every wait done.
    let t0 = std::time::Instant::now();
    run(&args, dir.path());
    assert_eq!(trials(dir.path()).len(), 2);
    assert!(t0.elapsed() < std::time::Duration::from_secs(2));
    // Another setting in the same directory is refused.
    let o = Command::new(bin())
        .args([
            "experiment",
            "resreq-interval",
            "--interval",
            "1ms",
            "--out",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("holds a run with other settings"), "{err}");
}

#[test]
fn interval_sweep_records_both_tools_at_every_interval() {
    let _busy = common::serial::busy();
    if !privileged("interval_sweep_records_both_tools_at_every_interval") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let text = run(
        &[
            "experiment",
            "interval-sweep",
            "--emulator",
            "sleep",
            "--interval",
            "10us,5ms",
            "--count",
            "60",
            // A bound, not the property: the run ends at 60 transactions (5 ms here).
            "--max-time",
            "10s",
        ],
        dir.path(),
    );
    assert!(text.contains("INTERVAL_us"), "{text}");
    let t = trials(dir.path());
    assert_eq!(t.len(), 4);
    for p in &t {
        assert!(p["error"].is_null(), "{p}");
        // Count-bounded: 60 transactions each, none lost on a clean lab path. (The
        // last echo once counted lost under a busy CPU: the pinger, late to look,
        // gave it iputils' exit wait of two round trips, not the reply wait every
        // other request of a run one in flight has; pinger's unit test
        // `one_in_flight_waits_for_the_last_reply_as_for_every_other`.)
        assert_eq!(p["samples"].as_u64(), Some(60), "{p}");
        assert_eq!(p["lost"].as_u64(), Some(0), "{p}");
        // Arithmetic: the mean is its histogram file's exact mean.
        let h = hist(dir.path(), p["file"].as_str().unwrap());
        let mean = h.mean_ns().unwrap() / 1e3;
        assert!((mean - p["mean_us"].as_f64().unwrap()).abs() < 1e-6, "{p}");
    }
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert!(html.contains("<figure id=\"mean-latency.svg\"><svg"));
    // `rttlab report` prints the tables and leaves the directory as it was; with
    // --out it renders the same page from the same files elsewhere.
    std::fs::remove_file(dir.path().join("report.html")).unwrap();
    let tables = std::fs::read_to_string(dir.path().join("tables.txt")).unwrap();
    let o = Command::new(bin())
        .arg("report")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with(&tables));
    assert!(!dir.path().join("report.html").exists());
    let elsewhere = tempfile::tempdir().unwrap();
    let o = Command::new(bin())
        .arg("report")
        .arg(dir.path())
        .arg("--out")
        .arg(elsewhere.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read_to_string(elsewhere.path().join("report.html")).unwrap(),
        html
    );
}

#[test]
fn repeated_trials_run_in_a_seeded_order_and_report_each_cells_median_and_interval() {
    let _busy = common::serial::busy();
    if !privileged(
        "repeated_trials_run_in_a_seeded_order_and_report_each_cells_median_and_interval",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "experiment",
        "interval-sweep",
        "--emulator",
        "sleep",
        "--interval",
        "1ms",
        "--count",
        "20",
        "--trials",
        "3",
    ];
    let text = run(&args, dir.path());
    let t = trials(dir.path());
    assert_eq!(t.len(), 6);
    // Every (tool, repeat) once, each with its own histogram file.
    let mut keys: Vec<(String, u64)> = t
        .iter()
        .map(|p| {
            (
                p["tool"].as_str().unwrap().to_string(),
                p["trial"].as_u64().unwrap(),
            )
        })
        .collect();
    let order = keys.clone();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 6);
    let files: std::collections::BTreeSet<&str> =
        t.iter().map(|p| p["file"].as_str().unwrap()).collect();
    assert_eq!(files.len(), 6);
    // Seeded: a second directory with the same seed runs the same order.
    let again = tempfile::tempdir().unwrap();
    run(&args, again.path());
    let order2: Vec<(String, u64)> = trials(again.path())
        .iter()
        .map(|p| {
            (
                p["tool"].as_str().unwrap().to_string(),
                p["trial"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(order, order2);
    // Arithmetic from the raw records: each tool's row is the median of its three
    // trials' means, and with three trials the interval is [min, max].
    for tool in ["icmp", "tcp_rr"] {
        let mut m: Vec<f64> = t
            .iter()
            .filter(|p| p["tool"] == tool)
            .map(|p| p["mean_us"].as_f64().unwrap())
            .collect();
        m.sort_by(f64::total_cmp);
        let row = text
            .lines()
            .find(|l| l.starts_with(&format!("{tool}@1000us")))
            .unwrap_or_else(|| panic!("no across-trials row for {tool}: {text}"));
        let want = format!("3  {:.1}  {:.1}-{:.1}", m[1], m[0], m[2]);
        let squeezed = row.split_whitespace().collect::<Vec<_>>().join("  ");
        assert!(squeezed.contains(&want), "{row:?} lacks {want:?}");
    }
    assert!(text.contains("lowest coverage here 75.0 %"), "{text}");
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert!(
        html.matches("class=\"ci\"").count() >= 2,
        "error bars drawn"
    );
}

#[test]
fn syn_rto_override_cuts_a_lost_syns_second_to_its_jiffies() {
    let _busy = common::serial::busy();
    if !privileged("syn_rto_override_cuts_a_lost_syns_second_to_its_jiffies") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let text = run(
        &[
            "experiment",
            "syn-rto",
            "--connections",
            "5",
            "--syn-rto",
            "40ms",
        ],
        dir.path(),
    );
    assert!(text.contains("PREDICTED_ms"), "{text}");
    let mut t = trials(dir.path());
    assert_eq!(t.len(), 3);
    // The runner shuffles the cases; the records name theirs.
    let order = [
        "no drop",
        "first SYN dropped",
        "first SYN dropped, override",
    ];
    t.sort_by_key(|c| order.iter().position(|o| c["case"] == *o));
    for (c, name) in t.iter().zip(order) {
        assert_eq!(c["case"], name);
        assert!(c["error"].is_null(), "{c}");
        assert_eq!(c["connections"].as_u64(), Some(5), "{c}");
    }
    let ms = |c: &serde_json::Value, k: &str| c[k].as_f64().unwrap();
    // Witness: the kernel's SYN retransmission counter in a — none without the drop,
    // one per connection with it. With a 40 ms RTO a SYN-ACK held back past the
    // backed-off 80 ms on a loaded machine costs one more, which the report names.
    assert_eq!(t[0]["syn_retransmits"].as_u64(), Some(0));
    assert_eq!(t[1]["syn_retransmits"].as_u64(), Some(5));
    let again = t[2]["syn_retransmits"].as_u64().unwrap();
    assert!((5..=10).contains(&again), "{}", t[2]);
    // The kernel's rules: no retransmitted SYN before its RTO (1 s by default; 40 ms
    // is 10 jiffies at HZ 250), plus the lab's 10 ms RTT.
    assert!(ms(&t[1], "min_ms") >= 1010.0, "{}", t[1]);
    assert!(ms(&t[2], "min_ms") >= 50.0, "{}", t[2]);
    assert!(ms(&t[2], "p50_ms") < 500.0, "{}", t[2]);
    // Leaves no trace: the private bpffs is unmounted.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains("rttlab-bpffs"), "{mounts}");
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert!(html.contains("<figure id=\"setup-time.svg\"><svg"));
    // Run again with --json: every trial is done, so the run resumes with nothing to
    // do and prints the run as one document. Witness: trials.jsonl itself, and the
    // document's JSON Schema.
    let text = run(
        &[
            "experiment",
            "syn-rto",
            "--connections",
            "5",
            "--syn-rto",
            "40ms",
            "--json",
        ],
        dir.path(),
    );
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    common::assert_schema(&doc);
    assert_eq!(doc["experiment"], "syn-rto");
    assert_eq!(doc["trials"], 3);
    assert_eq!(doc["failed"], 0);
    assert_eq!(doc["interrupted"], false);
    let mut recorded = trials(dir.path());
    recorded.sort_by_key(|c| order.iter().position(|o| c["case"] == *o));
    let mut printed = doc["records"].as_array().unwrap().clone();
    printed.sort_by_key(|c| order.iter().position(|o| c["case"] == *o));
    assert_eq!(printed, recorded);
}

#[test]
fn passive_vs_active_keeps_tcps_rtt_near_the_path_while_the_application_waits() {
    let _busy = common::serial::busy();
    if !privileged("passive_vs_active_keeps_tcps_rtt_near_the_path_while_the_application_waits") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let text = run(
        &[
            "experiment",
            "passive-vs-active",
            "--scenarios",
            "delay,loss-20",
            "--duration",
            "6s",
            "--delay-step",
            "2s",
            // Five echoes a second: ~60 data segments cross the 20 % loss, so the
            // chance that none is lost (and TCP retransmits nothing) is 0.8⁶⁰ ≈ 2·10⁻⁶;
            // at one a second for 10 s it was 0.8²⁰ ≈ 1 %, and it happened.
            "--interval",
            "200ms",
        ],
        dir.path(),
    );
    assert!(text.contains("tcp_ts"), "{text}");
    let mut t = trials(dir.path());
    assert_eq!(t.len(), 2);
    // The runner shuffles the scenarios; the records name theirs.
    t.sort_by_key(|r| r["scenario"] != "delay");
    let layer = |r: &serde_json::Value, l: &str| -> serde_json::Value {
        r["layers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["layer"] == l)
            .unwrap()
            .clone()
    };
    for r in &t {
        assert!(r["error"].is_null(), "{r}");
        // Arithmetic: the samples file holds every sample the table counts.
        let csv =
            std::fs::read_to_string(dir.path().join(r["samples_file"].as_str().unwrap())).unwrap();
        let counted: u64 = ["icmp", "app", "tcp_ts"]
            .iter()
            .map(|l| layer(r, l)["samples"].as_u64().unwrap())
            .sum();
        assert_eq!(csv.lines().count() as u64 - 1, counted, "{r}");
        for l in ["icmp", "app", "tcp_ts"] {
            let x = layer(r, l);
            assert!(x["samples"].as_u64().unwrap() >= 3, "{l}: {x}");
            // Witness: the lab delays each way by 50 ms; nothing crosses it faster.
            assert!(x["p5_ms"].as_f64().unwrap() >= 99.0, "{l}: {x}");
        }
    }
    // The delay went up by 50 ms and back: ping saw the 150 ms phase.
    assert!(
        layer(&t[0], "icmp")["max_ms"].as_f64().unwrap() >= 145.0,
        "{}",
        t[0]
    );
    // Witness: the kernel retransmitted on the echo connection under 20 % loss, and
    // the application's mean holds the recovery that TCP's RTT samples leave out.
    assert!(
        t[1]["echo_retransmissions"].as_u64().unwrap() > 0,
        "{}",
        t[1]
    );
    let (app, ts) = (
        layer(&t[1], "app")["mean_ms"].as_f64().unwrap(),
        layer(&t[1], "tcp_ts")["mean_ms"].as_f64().unwrap(),
    );
    assert!(app > ts, "app {app} ms, TCP TS {ts} ms");
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert!(html.contains("<figure id=\"loss.svg\"><svg"));
    assert!(html.contains("<figure id=\"delay-cdf.svg\"><svg"));
}
