//! Every command's `--json` output validated against its JSON Schema in `docs/schema/`
//! (witness: the committed schema files, read by the `jsonschema` crate; the schemas
//! are written by hand from the conventions in `rttlab::results::schema`, not generated
//! from the types they check). The schemas forbid keys they do not name, so a renamed
//! or added field fails here until its schema says so. `compare --json` is validated by
//! `tests/compare.rs`, which already runs a comparison.

use crate::common;

use crate::common::{assert_schema, assert_schema_lines, bin, corpus_bytes};
use std::io::Write;
use std::process::{Command, Stdio};

/// stdout of `rttlab ARGS`, which must succeed, with `input` on stdin.
fn run(args: &[&str], input: Option<&[u8]>) -> String {
    let mut child = Command::new(bin())
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(bytes) = input {
        let mut stdin = child.stdin.take().unwrap();
        let bytes = bytes.to_vec();
        std::thread::spawn(move || {
            let _ = stdin.write_all(&bytes);
        });
    }
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "rttlab {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn every_schema_kind_has_a_file_and_every_file_a_kind() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/schema");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|f| f != "common.json")
        .collect();
    files.sort();
    let mut kinds: Vec<String> = rttlab::results::schema::ALL
        .iter()
        .map(|n| {
            let kind = n
                .strip_prefix("rttlab.")
                .unwrap()
                .split('/')
                .next()
                .unwrap();
            format!("{kind}.json")
        })
        .collect();
    kinds.sort();
    assert_eq!(files, kinds);
}

#[test]
fn rr_documents_and_lines_follow_their_schema() {
    for args in [
        &[
            "rr",
            "-l",
            "0.3",
            "--json",
            "-c",
            "-C",
            "--tcpinfo-interval",
            "50ms",
        ][..],
        &["rr", "-l", "0.3", "--json", "-t", "UDP_RR"],
        &["rr", "-l", "0.3", "--json", "-t", "TCP_CRR"],
        &[
            "rr",
            "-l",
            "0.3",
            "--json",
            "--rate",
            "500",
            "--percentiles",
            "50,99.99",
        ],
        &["rr", "-l", "0.2", "--json", "-w", "1ms"],
        &["rr", "-l", "0.2", "--json", "-I", "99,50", "-i", "3,2"],
    ] {
        let text = run(args, None);
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_schema(&doc);
        assert!(doc["rtt"]["samples"].as_u64().unwrap() > 0, "{args:?}");
    }
    // Open-loop UDP_RR's one-way delays, top level.
    let doc: serde_json::Value = serde_json::from_str(&run(
        &["rr", "-l", "0.3", "--json", "-t", "UDP_RR", "--rate", "300"],
        None,
    ))
    .unwrap();
    assert_schema(&doc);
    assert_eq!(doc["one_way"]["clock"], "same", "{doc}");
    // --raw-log's lines, closed and open loop (the open loop's with the server's
    // stamps and a loss by direction).
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("raw.jsonl");
    for args in [
        &["rr", "-n", "50", "-t", "UDP_RR"][..],
        &[
            "rr",
            "-l",
            "0.3",
            "-t",
            "UDP_RR",
            "--rate",
            "300",
            "--udp-drop",
            "1/10",
            "--timeout",
            "30ms",
        ],
    ] {
        run(
            &[args, &["--raw-log", raw.to_str().unwrap()]].concat(),
            None,
        );
        let lines = assert_schema_lines(&std::fs::read_to_string(&raw).unwrap());
        assert!(lines.len() >= 50, "{args:?}");
    }
    // Interim lines, then the result as one more line: pure JSON lines.
    let lines = assert_schema_lines(&run(&["rr", "-l", "0.5", "-D", "0.1", "--json"], None));
    let kinds: Vec<&str> = lines
        .iter()
        .map(|l| l["schema"].as_str().unwrap())
        .collect();
    assert!(kinds.len() >= 3, "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"rttlab.rr/1"));
    assert!(
        kinds[..kinds.len() - 1]
            .iter()
            .all(|k| *k == "rttlab.rr-interim/1"),
        "{kinds:?}"
    );
}

#[test]
fn ping_follows_its_schema_on_both_families() {
    if !common::privileged("ping_follows_its_schema_on_both_families") {
        return;
    }
    for target in ["127.0.0.1", "::1"] {
        let text = run(&["ping", target, "-c", "3", "-i", "0.01", "--json"], None);
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_schema(&doc);
        assert_eq!(doc["received"], 3, "{doc}");
    }
}

#[test]
fn tcpinfo_lines_follow_their_schema() {
    // A connection of our own, so there is a socket to report (IPv6: brackets).
    for addr in ["127.0.0.1:0", "[::1]:0"] {
        let listener = std::net::TcpListener::bind(addr).unwrap();
        let port = listener.local_addr().unwrap().port().to_string();
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let _server = listener.accept().unwrap();
        let lines = assert_schema_lines(&run(&["tcpinfo", "--sport", &port, "--json"], None));
        assert!(!lines.is_empty(), "no socket on port {port}");
        let series = assert_schema_lines(&run(
            &[
                "tcpinfo", "--sport", &port, "--json", "-i", "10ms", "-c", "2",
            ],
            None,
        ));
        assert!(series.iter().all(|l| l["t_ms"].is_number()), "{series:?}");
    }
}

#[test]
fn passive_lines_follow_their_schemas_on_both_families() {
    for name in ["rr-v4-gw.pcap.gz", "rr-v6-gw.pcapng.gz"] {
        let bytes = corpus_bytes(name);
        let text = run(
            &[
                "passive",
                "-r",
                "-",
                "--json",
                "--method",
                "both",
                "--summary",
                "--histogram",
                "--sampler",
                "1/2",
                "--summary-interval",
                "1s",
            ],
            Some(&bytes),
        );
        let lines = assert_schema_lines(&text);
        let kinds: std::collections::BTreeSet<&str> = lines
            .iter()
            .map(|l| l["schema"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds.into_iter().collect::<Vec<_>>(),
            [
                "rttlab.passive-histogram/1",
                "rttlab.passive-interval/1",
                "rttlab.passive-sample/1",
                "rttlab.passive-sampler/1",
                "rttlab.passive-summary/1",
            ],
            "{name}"
        );
        if name.contains("v6") {
            let sample = lines
                .iter()
                .find(|l| l["schema"] == "rttlab.passive-sample/1")
                .unwrap();
            assert!(
                sample["host"].as_str().unwrap().starts_with('['),
                "{sample}"
            );
        }
    }
}

/// `--aggregate`'s lines, per prefix and interval of capture time, on both families;
/// their counts add up to the samples the per-sample lines give (witness: the same
/// file read without --aggregate).
#[test]
fn passive_aggregate_lines_follow_their_schema() {
    for name in ["rr-v4-gw.pcap.gz", "rr-v6-gw.pcapng.gz"] {
        let bytes = corpus_bytes(name);
        let text = run(
            &[
                "passive",
                "-r",
                "-",
                "--json",
                "--method",
                "both",
                "--aggregate",
                "1s",
            ],
            Some(&bytes),
        );
        let lines = assert_schema_lines(&text);
        assert!(lines.len() > 2, "{name}: {text}");
        assert!(lines
            .iter()
            .all(|l| l["schema"] == "rttlab.passive-aggregate/1" && l["engine"] == "ring"));
        let total: u64 = lines.iter().map(|l| l["samples"].as_u64().unwrap()).sum();
        let samples = run(
            &["passive", "-r", "-", "--json", "--method", "both"],
            Some(&bytes),
        );
        assert_eq!(total as usize, samples.lines().count(), "{name}");
    }
}

#[test]
fn rto_model_follows_its_schema() {
    for args in [
        &["rto", "model", "--json"][..],
        &[
            "rto",
            "model",
            "--json",
            "--flavour",
            "simple",
            "--improvement",
        ],
        &[
            "rto",
            "model",
            "--json",
            "--drop-at",
            "local",
            "--disruption",
            "10ms,2s",
        ],
    ] {
        let doc: serde_json::Value = serde_json::from_str(&run(args, None)).unwrap();
        assert_schema(&doc);
    }
}

#[test]
fn lab_list_follows_its_schema() {
    if !common::privileged("lab_list_follows_its_schema") {
        return;
    }
    let name = format!("js{}", std::process::id() % 10_000);
    let up = run(
        &[
            "lab",
            "up",
            "--name",
            &name,
            "--emulator",
            "sleep",
            "--delay",
            "1ms",
            "--json",
        ],
        None,
    );
    let text = run(&["lab", "list", "--json"], None);
    run(&["lab", "down", "--name", &name], None);
    // `lab up --json` prints the lab as `lab list` shows it.
    let up = assert_schema_lines(&up);
    assert_eq!(up.len(), 1, "{up:?}");
    assert_eq!(up[0]["info"]["name"], name.as_str());
    assert_eq!(up[0]["a2b"]["impairments"]["delay_ns"], 1_000_000);
    let lines = assert_schema_lines(&text);
    let ours = lines
        .iter()
        .find(|l| l["info"]["name"] == name.as_str())
        .unwrap();
    assert_eq!(ours["a2b"]["impairments"]["delay_ns"], 1_000_000, "{ours}");
}

/// `tune … show --json`. Witness: the sysctls read from /proc/sys by the test, and the
/// listener the probe connects to.
#[test]
fn tune_states_follow_their_schemas() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let doc: serde_json::Value = serde_json::from_str(&run(
        &["tune", "rto-min", "show", "--json", "--probe", &addr],
        None,
    ))
    .unwrap();
    assert_schema(&doc);
    let sysctl = |k: &str| {
        std::fs::read_to_string(format!("/proc/sys/net/ipv4/{k}"))
            .ok()
            .map(|v| v.trim().parse::<u64>().unwrap())
    };
    assert_eq!(doc["sysctl_us"].as_u64(), sysctl("tcp_rto_min_us"), "{doc}");
    assert_eq!(doc["probe"]["addr"], addr.as_str());
    // A new connection's RTO is at least rto_min (tcp_init_transfer → tcp_set_rto).
    if let Some(min) = doc["sysctl_us"].as_u64() {
        assert!(doc["probe"]["rto_us"].as_u64().unwrap() >= min, "{doc}");
    }
    let doc: serde_json::Value =
        serde_json::from_str(&run(&["tune", "thin", "show", "--json"], None)).unwrap();
    assert_schema(&doc);
    assert_eq!(
        doc["on"].as_bool(),
        sysctl("tcp_thin_linear_timeouts").map(|v| v == 1)
    );
    let nowhere = tempfile::tempdir().unwrap();
    let doc: serde_json::Value = serde_json::from_str(&run(
        &[
            "tune",
            "syn-rto",
            "list",
            "--json",
            "--pin-dir",
            nowhere.path().join("none").to_str().unwrap(),
        ],
        None,
    ))
    .unwrap();
    assert_schema(&doc);
    assert_eq!(doc["attached"], false);
    assert_eq!(doc["prefixes"], serde_json::json!([]));
}

/// `report DIR --json` on every committed results directory. Witness: each directory's
/// trials.jsonl (the records, line for line) and run.json (the experiment's name).
#[test]
fn report_documents_follow_their_schema() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/results");
    let mut seen = 0;
    for entry in std::fs::read_dir(&root).unwrap() {
        let dir = entry.unwrap().path();
        let doc: serde_json::Value =
            serde_json::from_str(&run(&["report", dir.to_str().unwrap(), "--json"], None)).unwrap();
        assert_schema(&doc);
        let run_json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
        assert_eq!(
            doc["experiment"],
            run_json["experiment"],
            "{}",
            dir.display()
        );
        assert_eq!(doc["settings"], run_json["settings"], "{}", dir.display());
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(dir.join("trials.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(doc["records"], serde_json::Value::from(lines.clone()));
        assert_eq!(doc["trials"], lines.len());
        seen += 1;
    }
    assert!(seen >= 5, "{seen} results directories");
}

/// The schemas can fail: the shape this issue replaced (percentiles as pairs, serde's
/// `{"secs", "nanos"}` durations, an endpoint without brackets) is refused.
#[test]
fn the_schemas_refuse_the_old_shapes() {
    let mut doc: serde_json::Value =
        serde_json::from_str(&run(&["rr", "-l", "0.2", "--json"], None)).unwrap();
    assert_schema(&doc);
    let refused = |d: serde_json::Value| std::panic::catch_unwind(|| assert_schema(&d)).is_err();
    let mut pairs = doc.clone();
    pairs["rtt"]["percentiles_us"] = serde_json::json!([["p50", 10.0]]);
    assert!(refused(pairs));
    let mut secs = doc.clone();
    secs["settings"]["duration_limit_s"] = serde_json::json!({"secs": 0, "nanos": 200_000_000});
    assert!(refused(secs));
    let mut latency = doc.clone();
    latency["latency"] = latency["rtt"].take();
    assert!(refused(latency));
    doc["settings"]["server"] = "fd00::1:12866".into();
    assert!(refused(doc));
}
