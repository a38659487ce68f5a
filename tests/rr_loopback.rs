//! `rttlab rr` and `rttlab serve` against each other on loopback, as separate
//! processes. Counts are checked against the server's own count (a second process),
//! latencies against the kernel's tcp_info of the same connection.

use crate::common;

use crate::common::{bin, json, ServeChild};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn every_test_type_runs_exactly_n_transactions() {
    let _busy = common::serial::busy();
    let s = ServeChild::start(&[]);
    for test in ["TCP_RR", "UDP_RR", "TCP_CRR"] {
        let v = json(&s.rr(&["-t", test, "-n", "500", "--json"]));
        assert_eq!(v["transactions"], 500, "{test}");
        // The server counted the same transactions on its side.
        assert_eq!(v["remote_transactions"], 500, "{test}");
        assert_eq!(v["settings"]["test"], test);
        let lat = &v["rtt"];
        assert_eq!(lat["samples"], 500);
        let (min, mean, max) = (
            lat["min_us"].as_f64().unwrap(),
            lat["mean_us"].as_f64().unwrap(),
            lat["max_us"].as_f64().unwrap(),
        );
        assert!(0.0 < min && min <= mean && mean <= max, "{test}: {lat}");
        assert!(mean < 50_000.0, "{test}: loopback mean {mean} µs");
        assert!(v["local_host"]["kernel_release"].as_str().unwrap().len() > 3);
    }
}

#[test]
fn tcp_rr_latency_is_bounded_below_by_the_kernels_rtt() {
    let _busy = common::serial::busy();
    let s = ServeChild::start(&[]);
    let v = json(&s.rr(&["-n", "2000", "--json"]));
    // tcp_info.min_rtt is the kernel's lowest send→ACK time on this socket; a
    // request/response through both stacks and user space cannot be faster.
    let min_rtt = v["local_tcp_info"][0]["min_rtt_us"].as_f64().unwrap();
    let min = v["rtt"]["min_us"].as_f64().unwrap();
    assert!(
        min >= min_rtt,
        "application min {min} µs below TCP's min_rtt {min_rtt} µs"
    );
    assert!(
        v["remote_tcp_info"][0]["rtt_us"].as_u64().is_some(),
        "server's tcp_info comes back"
    );
    assert_eq!(v["local_retrans"], 0);
    assert_eq!(v["remote_retrans"], 0);
}

#[test]
fn streams_split_the_count() {
    let _busy = common::serial::busy();
    let s = ServeChild::start(&[]);
    for test in ["TCP_RR", "UDP_RR", "TCP_CRR"] {
        let v = json(&s.rr(&["-t", test, "-n", "1000", "--streams", "3", "--json"]));
        assert_eq!(v["transactions"], 1000, "{test}");
        assert_eq!(v["settings"]["streams"], 3);
    }
}

#[test]
fn selectors_print_in_the_order_given() {
    let _busy = common::serial::busy();
    let s = ServeChild::start(&[]);
    let o = s.rr(&[
        "-n",
        "100",
        "-r",
        "7,9",
        "-o",
        "throughput,P50_LATENCY,Transactions,REQUEST_SIZE,response_size,p999_latency",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "THROUGHPUT,P50_LATENCY,TRANSACTIONS,REQUEST_SIZE,RESPONSE_SIZE,P999_LATENCY"
    );
    let vals: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(vals.len(), 6);
    assert_eq!(&vals[2..5], ["100", "7", "9"]);
    assert!(vals[0].parse::<f64>().unwrap() > 0.0);
}

#[test]
fn csv_has_a_value_for_every_name() {
    let _busy = common::serial::busy();
    let s = ServeChild::start(&[]);
    let o = s.rr(&["-n", "50", "--csv"]);
    let text = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0].split(',').count(), lines[1].split(',').count());
    assert!(lines[0].starts_with("TEST,PROTOCOL,REQUEST_SIZE"));
}

#[test]
fn udp_loss_is_counted_when_the_server_drops() {
    let _busy = common::serial::busy();
    let s = ServeChild::start(&[]);
    let v = json(&s.rr(&[
        "-t",
        "UDP_RR",
        "-n",
        "500",
        "--udp-drop",
        "1/5",
        "--timeout",
        "50ms",
        "--json",
    ]));
    let n = |k: &str| v["udp"][k].as_u64().unwrap();
    let (lost, dropped) = (n("lost"), n("dropped_by_server"));
    let done = v["transactions"].as_u64().unwrap();
    // Witness: the server's own count. It drops requests 5, 10, 15, … of those it
    // receives: exactly one in five. A reply slower than the timeout (a stalled vCPU)
    // is late, not lost: a transaction, as the server counts it.
    assert_eq!((dropped, lost, done), (100, 100, 400), "{v}");
    assert_eq!(v["remote_transactions"].as_u64().unwrap(), done, "{v}");
}

/// Without `--timeout`, UDP_RR's timeout follows the round trips (RFC 6298, floor
/// 10 ms): the server drops one request in ten on purpose, and each loss costs about
/// the floor, not a second. Witnesses: the server's own drop count, and the run's
/// length against the ≥ 40 s that 40 one-second timeouts would take.
#[test]
fn udp_rr_timeout_adapts_so_a_loss_costs_a_round_trip() {
    let _busy = common::serial::busy();
    let s = ServeChild::start(&[]);
    let v = json(&s.rr(&["-t", "UDP_RR", "-n", "400", "--udp-drop", "1/10", "--json"]));
    let n = |k: &str| v["udp"][k].as_u64().unwrap();
    let (lost, dropped) = (n("lost"), n("dropped_by_server"));
    assert!(dropped >= 40, "{v}");
    // A late reply is not a loss: only what the server dropped is.
    assert_eq!(lost, dropped, "{v}");
    assert_eq!(v["settings"]["timeout_adaptive"], true);
    let elapsed = v["elapsed_s"].as_f64().unwrap();
    assert!(elapsed < 10.0, "{dropped} losses took {elapsed} s");
}

#[test]
fn pacing_excludes_the_wait_from_latency() {
    let _busy = common::serial::busy();
    let s = ServeChild::start(&[]);
    for pace in ["sleep", "hybrid", "spin"] {
        let v = json(&s.rr(&["-n", "50", "-w", "5ms", "--pace", pace, "--json"]));
        let elapsed = v["elapsed_s"].as_f64().unwrap();
        // 49 waits of 5 ms between 50 transactions: at least 245 ms in all.
        assert!(elapsed >= 0.245, "{pace}: {elapsed}");
        // Had the 5 ms wait leaked into the timing, every sample would be ≥ 5 ms; the
        // minimum and median stay far below it even on a preempted VM.
        let min = v["rtt"]["min_us"].as_f64().unwrap();
        let p50 = v["rtt"]["percentiles_us"]["p50"].as_f64().unwrap();
        assert!(
            min < 1_000.0 && p50 < 4_000.0,
            "{pace}: the wait leaked into the latency: min {min} µs, P50 {p50} µs"
        );
        assert_eq!(v["settings"]["interval_us"], 5000.0);
        assert_eq!(v["settings"]["pacing"], pace);
    }
    // A burst of 4 per interval: 20 transactions take 4 intervals.
    let v = json(&s.rr(&["-n", "20", "-w", "20ms", "-b", "4", "--json"]));
    let e = v["elapsed_s"].as_f64().unwrap();
    assert!((0.08..0.5).contains(&e), "{e}");
}

/// Every closed loop (each protocol, with and without `--anatomy`, reading blocked or
/// spinning) paces, counts and stamps alike. Witnesses: the server's own count (a
/// second process); the wall clock (29 waits of 3 ms between 30 transactions take at
/// least 87 ms, whatever the scheduler does); the pacing error's sample count (one per
/// transaction after a wait, arithmetic); and the anatomy's stamped count, which only
/// the kernel's stamps and the server's trailers can raise.
#[test]
fn every_closed_loop_paces_counts_and_stamps_alike() {
    let _busy = common::serial::busy();
    let s = ServeChild::start(&[]);
    for test in ["TCP_RR", "UDP_RR", "TCP_CRR"] {
        for anatomy in [false, true] {
            for recv in ["block", "spin"] {
                let what = format!("{test} anatomy={anatomy} --recv {recv}");
                let mut args = vec!["-t", test, "-n", "30", "-w", "3ms", "--recv", recv];
                args.extend(["--json"]);
                if anatomy {
                    args.push("--anatomy");
                }
                let o = s.rr(&args);
                assert!(o.status.success(), "{what}: {}", stderr(&o));
                let v = json(&o);
                assert_eq!(v["transactions"], 30, "{what}");
                assert_eq!(v["remote_transactions"], 30, "{what}");
                assert_eq!(v["settings"]["recv"], recv, "{what}");
                let elapsed = v["elapsed_s"].as_f64().unwrap();
                assert!(elapsed >= 0.087, "{what}: {elapsed} s");
                assert_eq!(v["pacing_error"]["samples"], 29, "{what}");
                let a = &v["anatomy"];
                if anatomy {
                    // Receive stamps may start late on a busy machine: most, not all.
                    let stamped = a["stamped"].as_u64().unwrap_or(0);
                    assert!(stamped >= 20, "{what}: {stamped} stamped: {a}");
                    assert_eq!(
                        a["connect"].is_object(),
                        test == "TCP_CRR",
                        "{what}: only TCP_CRR times a handshake: {a}"
                    );
                } else {
                    assert!(a.is_null(), "{what}: {a}");
                }
            }
        }
    }
}

#[test]
fn open_loop_reports_service_and_intended_times() {
    let _busy = common::serial::busy();
    let s = ServeChild::start(&[]);
    for test in ["TCP_RR", "UDP_RR"] {
        let v = json(&s.rr(&["-t", test, "--rate", "2000/s", "-l", "1", "--json"]));
        let n = v["transactions"].as_u64().unwrap();
        // A fixed schedule of 2000/s for 1 s: 2000 sends.
        assert!((1900..=2001).contains(&n), "{test}: {n}");
        let rt = &v["open_loop"]["response_time"];
        assert_eq!(rt["samples"].as_u64().unwrap(), n);
        // Time from the intended send can only be longer than from the actual send.
        assert!(rt["mean_us"].as_f64().unwrap() >= v["rtt"]["mean_us"].as_f64().unwrap());
    }
}

#[test]
fn histogram_and_hdr_log() {
    let _busy = common::serial::busy();
    let s = ServeChild::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("rr.hlog");
    let o = s.rr(&[
        "-l",
        "1.5",
        "--histogram",
        "--hdr-log",
        log.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("UNIT_USEC") && text.contains("HIST_TOTAL"));
    let hlog = std::fs::read_to_string(&log).unwrap();
    assert!(hlog.contains("#[StartTime:"));
    // 1.5 s at one interval per second: two interval lines.
    let intervals = hlog
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('"') && !l.is_empty())
        .count();
    assert_eq!(intervals, 2, "{hlog}");
}

#[test]
fn without_host_an_in_process_server_is_used() {
    let _busy = common::serial::busy();
    let o = Command::new(bin())
        .args([
            "rr",
            "-n",
            "200",
            "-o",
            "TRANSACTIONS,REMOTE_TRANSPORT_RETRANS",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        String::from_utf8(o.stdout).unwrap().lines().nth(1),
        Some("200,0")
    );
    let o = Command::new(bin())
        .args([
            "rr",
            "-6",
            "-t",
            "UDP_RR",
            "-n",
            "100",
            "-o",
            "TRANSACTIONS",
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8(o.stdout).unwrap().lines().nth(1),
        Some("100")
    );
}

fn fails_with(args: &[&str], needle: &str) {
    let o = Command::new(bin()).args(args).output().unwrap();
    let err = stderr(&o);
    assert!(!o.status.success(), "{args:?} succeeded");
    assert!(err.contains(needle), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
}

#[test]
fn bad_input_gets_one_clear_line() {
    let _busy = common::serial::busy();
    fails_with(
        &["rr", "-n", "5", "-o", "P50_LATENCY,BOGUS"],
        "unknown output selector \"BOGUS\"",
    );
    fails_with(&["rr", "-w", "10"], "needs a unit");
    fails_with(&["rr", "-w", "ten"], "not a duration");
    fails_with(&["rr", "-l=-0"], "negative");
    fails_with(&["rr", "-r", "2000000,1"], "over the limit");
    fails_with(&["rr", "-r", "0,1"], "not a size");
    fails_with(&["rr", "-H", "no-such-host.invalid"], "cannot resolve host");
    let port = common::free_port().to_string();
    fails_with(
        &["rr", "-H", "127.0.0.1", "-p", &port],
        "cannot reach the rttlab server",
    );
    fails_with(
        &["rr", "-T", "0,999"],
        "server CPU 999 is not one the server may run on",
    );
    fails_with(&["rr", "-t", "TCP_CRR", "--rate", "10/s"], "not TCP_CRR");
    fails_with(&["ping", "127.0.0.1", "-c", "0"], "at least 1");
}

/// A fake server speaking protocol version 99.
#[test]
fn version_mismatch_is_named() {
    let _busy = common::serial::busy();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let fake = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut len = [0u8; 4];
        s.read_exact(&mut len).unwrap();
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        s.read_exact(&mut body).unwrap();
        let reply = br#"{"type":"welcome","version":99,"host":{"hostname":"x","kernel_release":"y","machine":"z","cpus":1},"limits":{"max_payload":1,"max_streams":1,"max_duration_ms":1,"max_concurrent_tests":1}}"#;
        s.write_all(&(reply.len() as u32).to_be_bytes()).unwrap();
        s.write_all(reply).unwrap();
    });
    fails_with(
        &["rr", "-H", "127.0.0.1", "-p", &port.to_string(), "-n", "1"],
        "protocol version mismatch",
    );
    fake.join().unwrap();

    // And the real server refuses a client of another version with a message.
    let srv = ServeChild::start(&[]);
    let mut c = TcpStream::connect(("127.0.0.1", srv.port)).unwrap();
    // An rttlab 0.1 client's Hello (protocol 1: no nonce).
    let hello = br#"{"type":"hello","magic":"rttlab","version":1}"#;
    c.write_all(&(hello.len() as u32).to_be_bytes()).unwrap();
    c.write_all(hello).unwrap();
    let mut reply = Vec::new();
    c.read_to_end(&mut reply).unwrap();
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.contains("we speak 2, the peer 1"), "{reply}");
}

#[test]
fn a_server_killed_mid_test_leaves_a_partial_result_and_an_error() {
    let _busy = common::serial::busy();
    let mut srv = ServeChild::start(&[]);
    let client = srv.spawn_rr(&["-l", "10", "-o", "TRANSACTIONS"]);
    std::thread::sleep(Duration::from_millis(800));
    srv.child.kill().unwrap();
    let o = client.wait_with_output().unwrap();
    assert!(!o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    let n: u64 = out
        .lines()
        .nth(1)
        .and_then(|l| l.parse().ok())
        .unwrap_or_else(|| panic!("no partial result: {out}"));
    assert!(n > 0);
    assert!(stderr(&o).contains("rttlab:"), "{}", stderr(&o));
}

#[test]
fn ctrl_c_prints_what_was_measured() {
    let _busy = common::serial::busy();
    let srv = ServeChild::start(&[]);
    let client = srv.spawn_rr(&["-l", "30", "-o", "TRANSACTIONS,ELAPSED_TIME"]);
    std::thread::sleep(Duration::from_millis(700));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(client.id() as i32, libc::SIGINT) };
    let o = client.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let vals: Vec<f64> = out
        .lines()
        .nth(1)
        .unwrap()
        .split(',')
        .map(|x| x.parse().unwrap())
        .collect();
    assert!(vals[0] > 0.0);
    assert!(vals[1] < 5.0, "stopped long before the 30 s: {}", vals[1]);
}

#[test]
fn completions_and_help() {
    let _busy = common::serial::busy();
    let o = Command::new(bin())
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("rttlab"));
    let o = Command::new(bin()).args(["rr", "--help"]).output().unwrap();
    let h = String::from_utf8_lossy(&o.stdout);
    assert!(h.contains("Examples:") && h.contains("--interval"));
}

#[test]
fn broken_pipe_exits_quietly() {
    let _busy = common::serial::busy();
    let o = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "{} rr -n 2000 --histogram | head -c 10 >/dev/null; echo ${{PIPESTATUS[0]}}",
            bin().display()
        ))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "0",
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_frozen_server_cannot_hang_the_client() {
    let _busy = common::serial::busy();
    let srv = ServeChild::start(&[]);
    let client = srv.spawn_rr(&["-l", "1", "-o", "TRANSACTIONS"]);
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(srv.child.id() as i32, libc::SIGSTOP) };
    let t0 = std::time::Instant::now();
    let o = client.wait_with_output().unwrap();
    // SAFETY: as above.
    unsafe { libc::kill(srv.child.id() as i32, libc::SIGCONT) };
    // 1 s run + 5 s for the transaction in flight, then the watchdog cuts it off.
    assert!(t0.elapsed() < Duration::from_secs(12), "{:?}", t0.elapsed());
    assert!(!o.status.success());
    assert!(stderr(&o).contains("unanswered"), "{}", stderr(&o));
    let n: u64 = String::from_utf8_lossy(&o.stdout)
        .lines()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(n > 0, "the transactions before the freeze are reported");
}

/// An error names its context once and its cause once: the chain the binary prints is
/// one line, and the kernel's refusal appears in it exactly once. Witness: connect(2)
/// on a port nothing listens on, whose error text comes from the kernel (std's own
/// `io::Error` for the same connect).
#[test]
fn a_refused_connection_is_one_line_naming_the_cause_once() {
    let _busy = common::serial::busy();
    // A port nothing listens on: bound and held without listen(), so that no test
    // running beside this one can take it (a port bound and closed could be reused).
    let hold = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    hold.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    let port = hold.local_addr().unwrap().as_socket().unwrap().port();
    let cause = TcpStream::connect(("127.0.0.1", port))
        .unwrap_err()
        .to_string();
    let o = Command::new(bin())
        .args(["rr", "-H", "127.0.0.1", "-p", &port.to_string(), "-l", "1s"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert_eq!(e.matches(cause.as_str()).count(), 1, "{e}");
    assert!(e.contains("cannot reach the rttlab server"), "{e}");
}

/// netperf's `-I LEVEL,WIDTH -i MAX,MIN`: the iterations stop as soon as the interval
/// is narrow enough (at least MIN), or at MAX with netperf's warning. Witness:
/// arithmetic from the reported iterations, with Student's t from a textbook table
/// (95 %, 2–4 degrees of freedom: 4.303, 3.182, 2.776).
#[test]
fn confidence_iterations_follow_netperfs_rule() {
    let _busy = common::serial::busy();
    let s = ServeChild::start(&[]);
    let v = json(&s.rr(&["-n", "300", "-I", "95,50", "-i", "5,3", "--json"]));
    let c = &v["confidence"];
    let tps: Vec<f64> = c["throughput_tps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    let n = tps.len();
    assert!((3..=5).contains(&n), "{c}");
    let width_of = |xs: &[f64]| {
        let k = xs.len();
        let mean = xs.iter().sum::<f64>() / k as f64;
        let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (k - 1) as f64).sqrt();
        let t = [4.303, 3.182, 2.776][k - 3];
        (mean, 200.0 * t * sd / (k as f64).sqrt() / mean)
    };
    let (mean, width) = width_of(&tps);
    let reported = c["width_percent"].as_f64().unwrap();
    assert!(
        (reported - width).abs() < 1e-6 * width.max(1.0),
        "{reported} vs {width}"
    );
    assert!((c["throughput_tps_mean"].as_f64().unwrap() - mean).abs() < 1e-6 * mean);
    // netperf's rule: stop early only when narrow enough; at MAX either way.
    assert_eq!(c["met"], width <= 50.0);
    assert!(n == 5 || width <= 50.0, "{c}");
    // …and not before: every earlier count from MIN on was still too wide.
    for k in 3..n {
        assert!(width_of(&tps[..k]).1 > 50.0, "stopped late at {n}: {c}");
    }

    // netperf's selectors for it: the level and width asked, the iterations run.
    let o = s.rr(&[
        "-n",
        "100",
        "-I",
        "99,0.0001",
        "-i",
        "3,3",
        "-o",
        "CONFIDENCE_LEVEL,CONFIDENCE_INTERVAL,CONFIDENCE_ITERATION",
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(text.lines().nth(1), Some("99,0.000,3"), "{text}");

    // An interval no run can reach: all MAX iterations, then netperf's warning.
    let o = s.rr(&["-n", "100", "-I", "99,0.0001", "-i", "3,3"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("over 3 iterations") && text.contains("!!! WARNING"),
        "{text}"
    );
}

/// netperf's `-D`: an interim line a second while the run lasts; under `--json` every
/// stdout line is a JSON object (the interim ones, then the result). Witness:
/// arithmetic against the final count (the intervals' transactions add up to at most
/// the run's, and to more than half of it over a 3 s run with 1 s intervals).
#[test]
fn interim_results_every_interval_and_pure_json_lines() {
    let _busy = common::serial::busy();
    let s = ServeChild::start(&[]);
    let o = s.rr(&["-l", "3", "-w", "1ms", "-D", "1", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let (result, interim) = lines.split_last().unwrap();
    assert!(interim.len() >= 2, "{} interim lines", interim.len());
    let total = result["transactions"].as_u64().unwrap();
    let mut sum = 0;
    for i in interim {
        let i = &i["interim"];
        let (n, secs) = (
            i["transactions"].as_u64().unwrap(),
            i["interval_s"].as_f64().unwrap(),
        );
        assert!((0.9..1.5).contains(&secs), "{i}");
        let rate = i["throughput_tps"].as_f64().unwrap();
        assert!((rate - n as f64 / secs).abs() < 0.01 + rate * 1e-3, "{i}");
        sum += n;
    }
    assert!(sum <= total && sum * 2 > total, "interim {sum} of {total}");
    let human = s.rr(&["-l", "2", "-D", "0.5"]);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.lines()
            .filter(|l| l.starts_with("Interim result: "))
            .count()
            >= 2,
        "{text}"
    );
}

/// netperf's `-c`/`-C`: each machine's CPU use over the data phase and its service
/// demand. Witnesses: the client threads' own CPU time per transaction (thread CPU
/// clocks, `client_cpu_us_per_transaction`) can only be part of what the whole machine
/// spent per transaction (/proc/stat); and on loopback the server reads the same
/// machine over nearly the same window, so the two utilisations agree.
#[test]
fn cpu_utilisation_and_service_demand_as_netperf_reports_them() {
    let _busy = common::serial::busy();
    let s = ServeChild::start(&[]);
    let v = json(&s.rr(&["-l", "2", "-c", "-C", "--json"]));
    let (l, r) = (&v["local_cpu"], &v["remote_cpu"]);
    let util = l["util_percent"].as_f64().unwrap();
    assert!(util > 0.0 && util <= 100.0, "{l}");
    let sd = l["service_demand_us"].as_f64().unwrap();
    let own = v["client_cpu_us_per_transaction"].as_f64().unwrap();
    // /proc/stat counts in 10 ms ticks: 5 % slack for where the window's edges fall.
    assert!(
        sd >= 0.95 * own,
        "machine {sd} µs/transaction < client threads' {own}"
    );
    // netperf's definition (calc_service_demand_internal): util × CPUs ÷ throughput.
    let cpus = l["cpus"].as_f64().unwrap();
    let tps = v["throughput_tps"].as_f64().unwrap();
    let netperf_sd = util / 100.0 * cpus / tps * 1e6;
    assert!(
        (sd / netperf_sd - 1.0).abs() < 1e-6,
        "{sd} µs/transaction, netperf's formula gives {netperf_sd}"
    );
    let remote = r["util_percent"].as_f64().unwrap();
    // The server's window is the client's data phase plus its own set-up and end.
    assert!(
        (remote - util).abs() < 15.0,
        "client {util} % vs server {remote} %"
    );
    assert_eq!(l["cpus"], r["cpus"]);
    let text = String::from_utf8_lossy(&s.rr(&["-l", "1", "-c", "-C"]).stdout).to_string();
    assert!(
        text.contains("client machine CPU: ") && text.contains("server machine CPU: "),
        "{text}"
    );
}

/// `--raw-log FILE`'s lines, parsed.
fn raw_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// `--raw-log`: a line per request sent, whatever the loop and the protocol, each
/// transaction once, and each line's round trip what its stamps say. Witnesses: the
/// server's own count of the requests it received (a second process: on loopback
/// every one), the result's exact min and max round trip, and in open-loop UDP_RR
/// the server's kernel stamps, which must fall inside the client's round trip.
#[test]
fn the_raw_log_has_a_line_per_request_sent_and_its_arithmetic_holds() {
    let _busy = common::serial::busy();
    let s = ServeChild::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("raw.jsonl");
    let path = log.to_str().unwrap();
    for args in [
        &["-t", "TCP_RR", "-n", "3000"][..],
        &["-t", "TCP_RR", "-n", "3000", "--streams", "2"],
        &["-t", "TCP_CRR", "-n", "300"],
        &["-t", "UDP_RR", "-n", "3000", "--udp-drop", "1/50"],
        &["-t", "TCP_RR", "--rate", "2000/s", "-l", "0.5"],
        &[
            "-t",
            "UDP_RR",
            "--rate",
            "2000/s",
            "-l",
            "0.5",
            "--udp-drop",
            "1/20",
            "--timeout",
            "50ms",
        ],
    ] {
        let v = json(&s.rr(&[args, &["--json", "--raw-log", path]].concat()));
        let lines = raw_lines(&log);
        let received = v["remote_transactions"].as_u64().unwrap()
            + v["udp"]["dropped_by_server"].as_u64().unwrap_or(0);
        assert_eq!(lines.len() as u64, received, "{args:?}");
        let mut seqs: Vec<(u64, u64)> = lines
            .iter()
            .map(|l| (l["stream"].as_u64().unwrap(), l["seq"].as_u64().unwrap()))
            .collect();
        seqs.sort_unstable();
        seqs.dedup();
        assert_eq!(seqs.len(), lines.len(), "{args:?}: a transaction twice");
        let lost = lines.iter().filter(|l| l["lost"] == true).count() as u64;
        assert_eq!(lost, v["udp"]["lost"].as_u64().unwrap_or(0), "{args:?}");
        let mut rtts = Vec::new();
        for l in lines.iter().filter(|l| l["lost"] == false) {
            let n = |k: &str| l[k].as_u64().unwrap_or_else(|| panic!("{k} in {l}"));
            let rtt = n("rtt_ns");
            assert_eq!(n("received_unix_ns") - n("sent_unix_ns"), rtt, "{l}");
            rtts.push(rtt);
            if l["server_rx_unix_ns"].is_null() {
                continue;
            }
            let d = |k: &str| l[k].as_i64().unwrap();
            let (sent, crx) = (n("sent_unix_ns"), n("client_rx_unix_ns"));
            let (srx, stx) = (n("server_rx_unix_ns"), n("server_tx_unix_ns"));
            assert_eq!(d("send_delay_ns"), srx as i64 - sent as i64, "{l}");
            assert_eq!(d("receive_delay_ns"), crx as i64 - stx as i64, "{l}");
            // One clock (loopback): send → server RX ≤ server TX → client RX ≤ read.
            assert!(sent <= srx && srx <= stx && stx <= crx, "{l}");
            assert!(crx <= n("received_unix_ns"), "{l}");
        }
        let us = |ns: u64| ns as f64 / 1e3;
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
        let (min, max) = (*rtts.iter().min().unwrap(), *rtts.iter().max().unwrap());
        assert!(
            close(us(min), v["rtt"]["min_us"].as_f64().unwrap()),
            "{args:?}"
        );
        assert!(
            close(us(max), v["rtt"]["max_us"].as_f64().unwrap()),
            "{args:?}"
        );
        assert_eq!(rtts.len() as u64, v["transactions"].as_u64().unwrap());
        if args.contains(&"--rate") && args.contains(&"UDP_RR") {
            let w = &v["one_way"];
            assert_eq!(w["clock"], "same", "{w}");
            // The server dropped every 20th request: lost on the way there, each.
            let ways: Vec<&serde_json::Value> = lines
                .iter()
                .filter(|l| l["lost"] == true)
                .map(|l| &l["lost_way"])
                .collect();
            assert!(
                !ways.is_empty() && ways.iter().all(|w| *w == "request"),
                "{ways:?}"
            );
            assert_eq!(w["request_lost"], v["udp"]["dropped_by_server"], "{w}");
            assert_eq!(
                (w["response_lost"].as_u64(), w["unattributed_lost"].as_u64()),
                (Some(0), Some(0))
            );
            // Every answered one has its one-way delays but the first few, read before
            // the kernel's receive stamping was on (it starts lazily).
            assert!(
                w["request"]["samples"].as_u64().unwrap() + 5 >= rtts.len() as u64,
                "{w}"
            );
        }
    }
}

/// `--raw-log` where no file can be made: one line naming the flag, the path and why,
/// exit 2 (a set-up error), before any connection: no data connection is blamed and
/// the run never starts. Witness: the file system (the FIFO is still one) and the
/// clock (a 5 s run that ends at once).
#[test]
fn a_raw_log_that_cannot_be_made_is_one_line_and_exit_2() {
    let _busy = common::serial::busy();
    use std::os::unix::fs::FileTypeExt;
    let s = ServeChild::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let status = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success());
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let d = dir.path().to_str().unwrap();
    for (path, why) in [
        (d.to_owned(), "a directory"),
        (format!("{d}/none/raw.jsonl"), "No such file or directory"),
        (format!("{d}/file/raw.jsonl"), "Not a directory"),
        (fifo.to_str().unwrap().to_owned(), "a FIFO"),
    ] {
        for test in ["TCP_RR", "UDP_RR"] {
            let t0 = std::time::Instant::now();
            let o = s.rr(&["-t", test, "--rate", "100/s", "-l", "5", "--raw-log", &path]);
            let e = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{path}: {e}");
            assert!(
                t0.elapsed() < Duration::from_secs(3),
                "{path}: the run started"
            );
            let lines: Vec<&str> = e.lines().filter(|l| !l.contains("note:")).collect();
            assert_eq!(lines.len(), 1, "{e}");
            assert!(
                lines[0].starts_with("rttlab: --raw-log")
                    && lines[0].contains(&path)
                    && lines[0].contains(why),
                "{path}: {e}"
            );
            assert!(!e.contains("data connection") && !e.contains("port"), "{e}");
            assert!(o.stdout.is_empty());
        }
    }
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
}

/// `rr -w 20ms` explains the server's srtt as compare does: its response is ACKed by
/// the next request, 20 ms later, or by the delayed-ACK timer, so the server's TCP
/// times the client's think time. Witness: the server's own kernel (its tcp_info's
/// srtt, tens of ms where the client's is µs on loopback), and the wait.
#[test]
fn rr_explains_a_server_srtt_that_includes_the_clients_wait() {
    let _busy = common::serial::busy();
    let s = ServeChild::start(&[]);
    let o = s.rr(&["-w", "20ms", "-n", "40"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let srtt = |who: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(who))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or_else(|| panic!("no {who} row: {text}"))
    };
    let (client, server) = (srtt("client_0"), srtt("server_0"));
    assert!(server >= 10_000.0 && client < 5_000.0, "{text}");
    let said = format!("delayed ACK: the server's srtt ({server:.0} µs)");
    assert!(
        text.replace("\n  ", " ").contains(&said) && text.contains("20 ms later"),
        "{text}"
    );
}
