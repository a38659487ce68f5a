//! `rr --anatomy`: each transaction split into client send path, network, server
//! receive and wake-up, server application and send, client receive and wake-up. The
//! witness is named at each check: arithmetic on every logged transaction, rr's own
//! round-trip histogram (a different clock and code path), a delay the server is told
//! to add, CPU placement, and the lab's emulator delay.

mod common;

use common::{assert_schema, assert_schema_lines, bin, json, privileged, ServeChild};
use std::process::{Command, Stdio};

const PARTS: [&str; 5] = [
    "client_send",
    "network",
    "server_recv",
    "server_app",
    "client_recv",
];

/// The median of a component, µs.
fn p50(doc: &serde_json::Value, part: &str) -> f64 {
    doc["anatomy"]["components"][part]["percentiles_us"]["p50"]
        .as_f64()
        .unwrap_or_else(|| panic!("no {part} in {doc}"))
}

fn anatomy(s: &ServeChild, args: &[&str]) -> serde_json::Value {
    let o = s.rr(&[&["--anatomy", "--json"], args].concat());
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let doc = json(&o);
    assert_schema(&doc);
    doc
}

/// Witness: arithmetic on every transaction (`--slow 0` logs each one): its five
/// components add up to its round trip to the nanosecond. And rr's own histogram of
/// the same run, on the monotonic clock, has the anatomy's median round trip.
#[test]
fn components_add_up_to_every_transactions_round_trip() {
    let s = ServeChild::start(&[]);
    for test in ["TCP_RR", "UDP_RR"] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("all.jsonl");
        let doc = anatomy(
            &s,
            &[
                "-t",
                test,
                "-n",
                "3000",
                "-T",
                "0,0",
                "--slow-log",
                log.to_str().unwrap(),
                "--slow",
                "0",
            ],
        );
        let a = &doc["anatomy"];
        let stamped = a["stamped"].as_u64().unwrap();
        // Every transaction but the last (its server part never comes back) and a few
        // the kernel had not started stamping yet.
        assert!(stamped >= 2_900, "{test}: {a}");
        assert_eq!(
            stamped + a["unstamped"].as_u64().unwrap() + a["inconsistent"].as_u64().unwrap(),
            doc["transactions"].as_u64().unwrap() - 1,
            "{test}: every transaction but the last is accounted for"
        );
        let lines = assert_schema_lines(&std::fs::read_to_string(&log).unwrap());
        assert_eq!(lines.len() as u64, stamped, "{test}");
        for l in &lines {
            let sum: u64 = PARTS
                .iter()
                .map(|p| l[format!("{p}_ns")].as_u64().unwrap())
                .sum();
            assert_eq!(sum, l["rtt_ns"].as_u64().unwrap(), "{test}: {l}");
        }
        if test == "TCP_RR" {
            assert!(lines.iter().all(|l| l["tcp_ack_ns"].is_u64()), "{test}");
        } else {
            assert!(a["tcp_ack"].is_null(), "{test}: {a}");
        }
        let rr = doc["rtt"]["percentiles_us"]["p50"].as_f64().unwrap();
        let own = p50(&doc, "rtt");
        assert!(
            (own - rr).abs() <= (0.1 * rr).max(3.0),
            "{test}: anatomy median {own} µs, rr's {rr} µs"
        );
        // Selectors read the same numbers.
        let o = s.rr(&[
            "-t",
            test,
            "-l",
            "0.3",
            "--anatomy",
            "-o",
            "P50_NETWORK_LATENCY,MEAN_SERVER_APP_LATENCY",
        ]);
        let text = String::from_utf8_lossy(&o.stdout).to_string();
        let values: Vec<f64> = text
            .lines()
            .nth(1)
            .unwrap()
            .split(',')
            .map(|v| v.parse().unwrap())
            .collect();
        assert!(values.iter().all(|v| *v > 0.0), "{text}");
    }
}

/// Witness: the delay the server is told to add. A server that thinks 2 ms moves the
/// server-application component by 2 ms and no other component by more than 0.3 ms.
#[test]
fn a_thinking_server_moves_only_the_server_application() {
    let s = ServeChild::start(&[]);
    for test in ["TCP_RR", "UDP_RR"] {
        let quick = anatomy(&s, &["-t", test, "-l", "1", "-T", "0,0"]);
        let slow = anatomy(
            &s,
            &["-t", test, "-l", "1", "-T", "0,0", "--server-delay", "2ms"],
        );
        assert_eq!(slow["settings"]["server_delay_us"], 2000.0);
        let moved = p50(&slow, "server_app") - p50(&quick, "server_app");
        assert!(
            (1_950.0..2_300.0).contains(&moved),
            "{test}: server_app moved {moved} µs"
        );
        for part in ["client_send", "network", "server_recv", "client_recv"] {
            let d = p50(&slow, part) - p50(&quick, part);
            assert!(d.abs() < 300.0, "{test}: {part} moved {d} µs");
        }
        // The tail's causes name the server when it is the one that is slow.
        let causes = &slow["anatomy"]["tail"]["causes"];
        assert!(causes.is_array(), "{slow}");
    }
}

/// Witness: CPU placement. With the client and server on different vCPUs, the
/// transactions' extra time is in the wake-ups (server_recv + client_recv), and
/// spinning on the receive removes the client's. On a machine where crossing CPUs
/// costs little (< 20 µs), there is nothing to attribute and only the spin is checked.
#[test]
fn wake_ups_carry_the_cost_of_crossing_cpus() {
    if std::thread::available_parallelism().map_or(1, usize::from) < 2 {
        eprintln!("skipped: one CPU");
        return;
    }
    let s = ServeChild::start(&[]);
    let same = anatomy(&s, &["-l", "1", "-T", "0,0"]);
    let cross = anatomy(&s, &["-l", "1", "-T", "0,1"]);
    let spin = anatomy(&s, &["-l", "1", "-T", "0,1", "--recv", "spin"]);
    assert_eq!(spin["settings"]["recv"], "spin");
    let extra = p50(&cross, "rtt") - p50(&same, "rtt");
    let wake = (p50(&cross, "server_recv") + p50(&cross, "client_recv"))
        - (p50(&same, "server_recv") + p50(&same, "client_recv"));
    if extra > 20.0 {
        assert!(
            wake >= 0.5 * extra,
            "crossing CPUs adds {extra} µs, of which {wake} µs in the wake-ups"
        );
        assert!(
            p50(&spin, "client_recv") < 0.5 * p50(&cross, "client_recv"),
            "client_recv: spinning {} µs, blocking {} µs",
            p50(&spin, "client_recv"),
            p50(&cross, "client_recv")
        );
    } else {
        eprintln!("crossing CPUs costs {extra} µs here: no wake-up to attribute");
        assert!(p50(&spin, "client_recv") <= p50(&cross, "client_recv") + 5.0);
    }
}

/// Witness: the lab's emulator delay. At 5 ms one way (10 ms RTT) the network
/// component's median is 10 ms within 100 µs; at 10 ms one way it moves by 10 ms and
/// the hosts' components do not move by more than 100 µs.
#[test]
fn the_network_component_is_the_labs_path() {
    if !privileged("the_network_component_is_the_labs_path") {
        return;
    }
    let name = format!("an{}", std::process::id() % 10_000);
    let lab = |args: &[&str]| {
        let o = Command::new(bin()).arg("lab").args(args).output().unwrap();
        assert!(
            o.status.success(),
            "lab {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    lab(&[
        "up",
        "--name",
        &name,
        "--delay",
        "5ms",
        "--emulator",
        "poll",
    ]);
    struct Down(String);
    impl Drop for Down {
        fn drop(&mut self) {
            let _ = Command::new(bin())
                .args(["lab", "down", "--name", &self.0])
                .output();
        }
    }
    let _down = Down(name.clone());
    let bin = bin();
    let bin = bin.to_str().unwrap();
    let _server = common::KillOnDrop(
        Command::new(bin)
            .args([
                "lab", "exec", "--name", &name, "b", "--", bin, "serve", "-q",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let run = || {
        // The server may take a moment to listen: try a few times.
        for _ in 0..50 {
            let o = Command::new(bin)
                .args(["lab", "exec", "--name", &name, "a", "--", bin])
                .args(["rr", "-H", "b", "--anatomy", "--json", "-l", "2"])
                .output()
                .unwrap();
            if o.status.success() {
                let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
                assert_schema(&doc);
                return doc;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("rr in the lab never ran");
    };
    let near = run();
    let net = p50(&near, "network");
    assert!(
        (net - 10_000.0).abs() < 100.0,
        "network {net} µs at 10 ms RTT"
    );
    lab(&["set", "--name", &name, "--delay", "10ms"]);
    let far = run();
    let moved = p50(&far, "network") - net;
    assert!(
        (moved - 10_000.0).abs() < 200.0,
        "network moved {moved} µs for 10 ms more RTT"
    );
    for part in ["client_send", "server_recv", "server_app", "client_recv"] {
        let d = p50(&far, part) - p50(&near, part);
        assert!(d.abs() < 100.0, "{part} moved {d} µs");
    }
}
