//! `rttlab compare` in a lab it builds and removes: every layer measured, each checked
//! against the lab's configured delay (the independent witness) and against the other
//! layers where the seeds say how they must relate.

use crate::common;

use crate::common::{bin, privileged};
use std::process::Command;
use std::time::{Duration, Instant};

fn layer<'a>(v: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    v["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == name)
        .unwrap_or_else(|| panic!("no layer {name}"))
}

fn num(l: &serde_json::Value, k: &str) -> f64 {
    l[k].as_f64()
        .unwrap_or_else(|| panic!("{k} missing in {l}"))
}

/// Namespaces of compare labs still present.
fn compare_labs() -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("rttlab-lab-cmp"))
                .collect()
        })
        .unwrap_or_default()
}

/// `rttlab compare ARGS --out DIR` in its own lab; its stdout, after checking it
/// succeeded.
fn compare_in_lab(args: &[&str], dir: &std::path::Path) -> String {
    let o = Command::new(bin())
        .arg("compare")
        .args(args)
        .arg("--out")
        .arg(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn every_layer_is_measured_and_the_gaps_follow_the_seeds() {
    if !privileged("every_layer_is_measured_and_the_gaps_follow_the_seeds") {
        return;
    }
    let _g = common::serial::machine();
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let stdout = compare_in_lab(
        &["--lab-rtt", "4ms", "-w", "2ms", "-l", "3s", "--json"],
        dir.path(),
    );
    assert!(t0.elapsed() < Duration::from_secs(60));
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    // Witness of the JSON's shape: docs/schema/compare.json (stdout and the file alike).
    common::assert_schema(&v);
    assert!(
        v["errors"].as_array().unwrap().is_empty(),
        "{}",
        v["errors"]
    );
    for name in [
        "icmp",
        "tcp_rr",
        "udp_rr",
        "tcp_info_client",
        "tcp_info_server",
        "passive_ts",
        "passive_seq",
        "sampled_metric",
    ] {
        assert!(
            layer(&v, name)["samples"].as_u64().unwrap() > 50,
            "{name}: {}",
            layer(&v, name)
        );
    }
    // Witness: the lab delays each direction by 2 ms; nothing measured through it can be
    // faster, and the medians stay near it.
    for name in [
        "icmp",
        "tcp_rr",
        "udp_rr",
        "tcp_info_client",
        "passive_ts",
        "passive_seq",
    ] {
        let l = layer(&v, name);
        assert!(num(l, "min_us") >= 4000.0, "{name}: {l}");
        assert!(num(&l["percentiles_us"], "p50") < 6000.0, "{name}: {l}");
    }
    // User space sits above the wire: tcp_rr is timed around the same packets the
    // passive engine sees on the client's interface.
    assert!(
        num(&layer(&v, "tcp_rr")["percentiles_us"], "p50")
            >= num(&layer(&v, "passive_seq")["percentiles_us"], "p50")
    );
    // Seed 000: the server's response is ACKed by the client's next request, 2 ms later,
    // so the server's srtt holds the client's wait; the client's does not.
    let (c, s) = (
        num(&layer(&v, "tcp_info_client")["percentiles_us"], "p50"),
        num(&layer(&v, "tcp_info_server")["percentiles_us"], "p50"),
    );
    assert!(s > c + 1500.0, "server srtt {s} µs, client {c} µs");
    let why = v["explanations"].to_string();
    assert!(
        why.contains("delayed ACK") && why.contains("anatomy:"),
        "{why}"
    );
    // The client's own answers, seen on its interface, are counted apart.
    assert!(v["passive_local_samples"].as_u64().unwrap() > 50);
    assert_eq!(v["capture_drops"], 0);
    // The results directory, and nothing left of the lab.
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("compare.json")).unwrap()).unwrap();
    assert_eq!(saved["layers"], v["layers"]);
    common::assert_schema(&saved);
    let txt = std::fs::read_to_string(dir.path().join("compare.txt")).unwrap();
    assert!(txt.contains("Why they differ"));
    // Every row is traceable to its layer's histogram file (arithmetic: the CSV's
    // buckets give the same count and median), and the report renders again from them.
    for l in v["layers"].as_array().unwrap() {
        if l["name"] == "sampled_metric" {
            continue;
        }
        let file = format!("{}.hist.csv", l["name"].as_str().unwrap().replace(' ', "_"));
        let csv = std::fs::read_to_string(dir.path().join(&file)).unwrap();
        let counted: u64 = csv
            .lines()
            .skip(3)
            .map(|r| r.split_once(',').unwrap().1.parse::<u64>().unwrap())
            .sum();
        assert_eq!(counted, l["samples"].as_u64().unwrap(), "{file}");
    }
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    for figure in ["cdf.svg", "anatomy.svg", "timeline.svg", "percentiles.svg"] {
        assert!(
            html.contains(&format!("<figure id=\"{figure}\"><svg")),
            "{figure}"
        );
    }
    // tcp_rr taken apart. Witnesses: arithmetic (the parts of the median transaction add
    // up to it), rr's own histogram of the same transactions (its median within 5 % of
    // the median band's mean), and the lab's 4 ms RTT (the network part of it, within
    // 10 %: what the hosts do is not the network's).
    let p50 = &v["anatomy"]["at_percentiles"][0];
    assert_eq!(p50["percentile"], 50.0, "{}", v["anatomy"]);
    let parts = &p50["parts_us"];
    let sum: f64 = [
        "client_send",
        "network",
        "server_recv",
        "server_app",
        "client_recv",
    ]
    .iter()
    .map(|k| parts[k].as_f64().unwrap())
    .sum();
    assert!(
        (sum - parts["rtt"].as_f64().unwrap()).abs() < 0.01,
        "{parts}"
    );
    let rr = num(&layer(&v, "tcp_rr")["percentiles_us"], "p50");
    assert!(
        (parts["rtt"].as_f64().unwrap() / rr - 1.0).abs() < 0.05,
        "{parts} vs {rr}"
    );
    // The emulator's 4 ms is the floor; above it, a busy machine delays the polling
    // emulator's frames (5.46 ms once with one core held busy), so the bound is twice
    // the round trip, which no preemption of a 2 ms slice reaches at the median.
    let net = parts["network"].as_f64().unwrap();
    assert!(
        (4_000.0..8_000.0).contains(&net),
        "network {net} µs at a 4 ms RTT"
    );
    // Re-rendered elsewhere, the page is the same page.
    let elsewhere = tempfile::tempdir().unwrap();
    let again = Command::new(bin())
        .arg("report")
        .arg(dir.path())
        .arg("--out")
        .arg(elsewhere.path())
        .output()
        .unwrap();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(elsewhere.path().join("report.html")).unwrap(),
        html
    );
    // A histogram this report reads, made a symlink out of the directory to nothing:
    // the refusal names the file in the directory given and why, never the private
    // scratch copy the report is rendered in (once: "/tmp/rttlab-report-…: No such
    // file or directory"). Witness: report's stderr.
    let copy = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), copy.path().join(e.file_name())).unwrap();
    }
    let hist = copy.path().join("tcp_rr.hist.csv");
    std::fs::remove_file(&hist).unwrap();
    std::os::unix::fs::symlink("/nonexistent/tcp_rr.hist.csv", &hist).unwrap();
    let o = Command::new(bin())
        .arg("report")
        .arg(copy.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{}: a symbolic link, not a regular file",
            hist.display()
        )) && !err.contains("rttlab-report"),
        "{err}"
    );
    assert_eq!(compare_labs(), Vec::<String>::new());
}

#[test]
fn a_sub_millisecond_path_shows_the_sampled_metrics_bucketing() {
    if !privileged("a_sub_millisecond_path_shows_the_sampled_metrics_bucketing") {
        return;
    }
    let _g = common::serial::machine();
    let dir = tempfile::tempdir().unwrap();
    let stdout = compare_in_lab(
        &["--lab-rtt", "0ms", "-w", "1ms", "-l", "2s", "--json"],
        dir.path(),
    );
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let wire = num(&layer(&v, "passive_seq")["percentiles_us"], "p50");
    let metric = num(&layer(&v, "sampled_metric")["percentiles_us"], "p50");
    // The metric's own period: its buckets and the exact median of the same samples.
    let period = v["sampler"]
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|p| p["samples"].as_u64().unwrap())
        .unwrap();
    let buckets: Vec<u64> = serde_json::from_value(period["buckets"].clone()).unwrap();
    let n: u64 = buckets.iter().sum();
    let exact_us = period["exact_p50_ms"].as_f64().unwrap() * 1e3;
    // On a 0 ms path the samples' exact median is far below the first bucket's 1 ms…
    assert!(exact_us < 1000.0, "exact median {exact_us} µs");
    // …so more than half the samples sit in the 0–1 ms bucket, and the interpolated
    // median is 1 ms × ½ / (that bucket's share): at least 0.5 ms whatever the true RTT
    // (seed 000). Witness: arithmetic on the buckets, against the exact median.
    let share = buckets[0] as f64 / n as f64;
    assert!(share > 0.5, "{buckets:?}");
    assert!(
        (metric - 500.0 / share).abs() < 0.5,
        "metric {metric} µs, {buckets:?}"
    );
    assert!(
        metric >= 500.0 && metric > exact_us,
        "metric {metric}, exact {exact_us} µs"
    );
    // The explanation names the bucketing exactly when the numbers show it.
    let explained = v["explanations"].to_string();
    assert_eq!(
        explained.contains("bucketing:"),
        metric > 1.5 * wire,
        "metric {metric} µs, wire {wire} µs: {explained}"
    );
    assert_eq!(compare_labs(), Vec::<String>::new());
}

/// `compare -H` against a real `rttlab serve` that requires a secret, between two
/// namespaces the test made: the secret from `--secret-file` reaches every layer that
/// talks to the server (TCP_RR and UDP_RR measure, no layer reports an error), and is
/// not written into the results. Witness: the server's refusal of the same run without
/// the secret, and each request/response layer's sample count.
#[test]
fn against_a_server_with_a_secret_every_layer_is_measured() {
    if !privileged("against_a_server_with_a_secret_every_layer_is_measured") {
        return;
    }
    let _g = common::serial::machine();
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("secret");
    std::fs::write(&key, "compare secret\n").unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let key = key.to_str().unwrap().to_owned();
    let pair = common::NetnsPair::new();
    let _server = pair.serve_in_b(pair.b4, 12866, &["--secret-file", &key]);
    let out = dir.path().join("run");
    let run = |extra: &[&str]| {
        let mut args = vec!["compare", "-H", pair.b4, "-l", "2s", "-w", "5ms", "--json"];
        args.extend_from_slice(extra);
        args.extend(["--out", out.to_str().unwrap()]);
        pair.rttlab_in_a(&args)
    };
    let without = run(&[]);
    let said = String::from_utf8_lossy(&without.stdout).to_string()
        + &String::from_utf8_lossy(&without.stderr);
    assert!(said.contains("requires a secret"), "{said}");
    let o = run(&["--secret-file", &key]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["errors"].as_array().unwrap().is_empty(),
        "{}",
        v["errors"]
    );
    for name in ["tcp_rr", "udp_rr"] {
        assert!(layer(&v, name)["samples"].as_u64().unwrap() > 50, "{name}");
    }
    // The capture listened where the kernel routes the server: iproute2's own lookup.
    let route = common::NetnsPair::exec(&pair.a, &["ip", "route", "get", pair.b4])
        .output()
        .unwrap();
    let route = String::from_utf8_lossy(&route.stdout).to_string();
    let dev = route
        .split_whitespace()
        .skip_while(|w| *w != "dev")
        .nth(1)
        .unwrap_or_else(|| panic!("no dev in {route}"));
    assert_eq!(v["capture_interface"], dev, "{route}");
    for f in std::fs::read_dir(&out).unwrap() {
        let text = std::fs::read(f.unwrap().path()).unwrap();
        assert!(!String::from_utf8_lossy(&text).contains("compare secret"));
    }
}

/// `compare --trials 2`: two comparisons in one lab, each recorded with its own
/// histogram files, compare.json the first, and each layer's median over the two with
/// its interval. Witness: arithmetic on the trials' own records (with two trials the
/// median is their mean and the interval [min, max]), and each layer file's count.
#[test]
fn repeated_comparisons_report_each_layers_median_over_the_trials() {
    if !privileged("repeated_comparisons_report_each_layers_median_over_the_trials") {
        return;
    }
    let _g = common::serial::machine();
    let dir = tempfile::tempdir().unwrap();
    let text = compare_in_lab(
        &["--lab-rtt", "2ms", "-w", "5ms", "-l", "1s", "--trials", "2"],
        dir.path(),
    );
    let trials: Vec<serde_json::Value> = std::fs::read_to_string(dir.path().join("trials.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(trials.len(), 2);
    let mut p50: Vec<f64> = trials
        .iter()
        .map(|t| num(&layer(t, "tcp_rr")["percentiles_us"], "p50"))
        .collect();
    p50.sort_by(f64::total_cmp);
    let row = text
        .lines()
        .skip_while(|l| !l.starts_with("Each layer across trials"))
        .find(|l| l.starts_with("tcp_rr "))
        .unwrap_or_else(|| panic!("{text}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[1], "2", "{row}");
    assert_eq!(cols[2], format!("{:.1}", (p50[0] + p50[1]) / 2.0), "{row}");
    assert_eq!(cols[3], format!("{:.1}-{:.1}", p50[0], p50[1]), "{row}");
    for t in &trials {
        let k = t["trial"].as_u64().unwrap();
        let file = if k == 0 {
            "tcp_rr.hist.csv".to_string()
        } else {
            format!("tcp_rr-t{k}.hist.csv")
        };
        let h = rttlab::stats::LatencyHistogram::from_csv(
            &std::fs::read_to_string(dir.path().join(file)).unwrap(),
        )
        .unwrap();
        assert_eq!(h.count(), layer(t, "tcp_rr")["samples"].as_u64().unwrap());
    }
    let first: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("compare.json")).unwrap())
            .unwrap();
    assert_eq!(first["trial"], 0);
    assert_eq!(compare_labs(), Vec::<String>::new());
}

/// The time series puts every layer on one clock. Witness: the test's own change of the
/// lab's delay mid-run (1 → 6 ms each way: 2 → 12 ms RTT) at a moment it notes. Each
/// layer's first bin with a median above 7 ms lies within one bin of every other
/// layer's (tcp_info's srtt, a moving average over the round trips, within three bins
/// after them), and within half a second of when the test changed the delay.
#[test]
fn a_delay_step_lines_up_across_the_layers_over_time() {
    if !privileged("a_delay_step_lines_up_across_the_layers_over_time") {
        return;
    }
    let _g = common::serial::machine();
    let lab = common::Lab::up("st", &["--delay", "1ms"]);
    let launched = Instant::now();
    let name = lab.name.clone();
    let changer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(2500));
        let at = launched.elapsed();
        let o = std::process::Command::new(common::bin())
            .args(["lab", "set", "--name", &name, "--delay", "6ms"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        at
    });
    let v = lab.in_a(&["compare", "-H", "b", "-l", "5s", "-w", "5ms", "--json"]);
    let changed_at = changer.join().unwrap().as_secs_f64();
    common::assert_schema(&v);
    let tl = &v["timeline"];
    let bin = tl["bin_s"].as_f64().unwrap();
    let step = |name: &str| -> f64 {
        let l = tl["layers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {tl}"));
        // The step is where the median rises for good: the first bin from which every
        // later bin's median is above 7 ms. One bin above it earlier is a stall (a
        // preempted vCPU holds a transaction for a bin; once, in CI, TCP_RR's bin at
        // 0.45 s), not the path's delay, which never falls back after the change.
        let points = l["points"].as_array().unwrap();
        let above = |p: &serde_json::Value| p["p50_us"].as_f64().unwrap() > 7_000.0;
        let from = points.iter().rposition(|p| !above(p)).map_or(0, |i| i + 1);
        points
            .get(from)
            .unwrap_or_else(|| panic!("{name} never saw the step: {l}"))["t_s"]
            .as_f64()
            .unwrap()
    };
    let wire: Vec<(&str, f64)> = ["icmp", "tcp_rr", "udp_rr", "passive_ts", "passive_seq"]
        .iter()
        .map(|&n| (n, step(n)))
        .collect();
    let first = wire.iter().map(|w| w.1).fold(f64::INFINITY, f64::min);
    let last = wire.iter().map(|w| w.1).fold(0.0, f64::max);
    assert!(
        last - first <= bin * 1.01,
        "the layers saw the step apart: {wire:?} (bins of {bin} s)"
    );
    let srtt = step("tcp_info_client");
    eprintln!("steps: {wire:?}, srtt {srtt} s, changed {changed_at} s, bins {bin} s");
    assert!(
        srtt >= first - bin * 1.01 && srtt <= first + 3.01 * bin,
        "srtt stepped at {srtt} s, the wire at {first} s"
    );
    assert!(
        (first - changed_at).abs() <= 0.5,
        "the layers stepped at {first} s, the delay changed {changed_at} s after the launch"
    );
}

/// `compare -H` against a server at this host's own address (127.0.0.1, in a namespace
/// of the test's own): the probes measure, but the capture cannot tell the server's
/// answers from the client's, so the passive layers and the sampled metric say why
/// they are empty and the run exits 1 (measured, but not every layer). Witness:
/// iproute2's `ip route get`, which names the route "local", and the exit-status
/// contract.
#[test]
fn against_this_hosts_own_address_the_empty_layers_say_why_and_the_run_exits_1() {
    if !privileged("against_this_hosts_own_address_the_empty_layers_say_why_and_the_run_exits_1") {
        return;
    }
    let _g = common::serial::machine();
    let pair = common::NetnsPair::new();
    let route = common::NetnsPair::exec(&pair.b, &["ip", "route", "get", "127.0.0.1"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&route.stdout).starts_with("local "),
        "{}",
        String::from_utf8_lossy(&route.stdout)
    );
    let _server = pair.serve_in_b("127.0.0.1", 12866, &[]);
    let o = common::NetnsPair::exec(
        &pair.b,
        &[
            bin().to_str().unwrap(),
            "compare",
            "-H",
            "127.0.0.1",
            "-l",
            "1s",
            "--json",
            "--out",
            tempfile::tempdir()
                .unwrap()
                .path()
                .join("run")
                .to_str()
                .unwrap(),
        ],
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("3 of 8 layers measured nothing (passive_ts, passive_seq, sampled_metric)"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["capture_interface"], "none");
    for name in ["passive_ts", "passive_seq", "sampled_metric"] {
        let l = layer(&v, name);
        assert_eq!(l["samples"], 0, "{name}");
        let why = l["why_empty"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: {l}"));
        assert!(why.contains("this host's own address"), "{name}: {why}");
    }
    for name in ["icmp", "tcp_rr", "udp_rr"] {
        let l = layer(&v, name);
        assert!(l["samples"].as_u64().unwrap() > 20, "{name}: {l}");
        assert!(l.get("why_empty").is_none(), "{name}: {l}");
    }
}
