//! `rttlab explain` on redis-server, Debian's, driven command by command.
//!
//! Witnesses: redis's own count of the commands it ran (`INFO commandstats`), the
//! bytes the test sent and redis answered (RESP), the delay redis makes on purpose
//! (`DEBUG SLEEP`), the kernel's own counters (schedstat, ss, nftables' counter), and
//! arithmetic (the parts of every transaction sum to its response time). nginx,
//! memcached and PostgreSQL: `explain_apps`.

use crate::common::service::{installed, num, reply, Service, Watch};
use crate::common::{self, free_port, privileged, two_cpus, NetnsPair};
use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A redis-server on `port` of loopback, nothing saved.
struct Redis(Service);

impl Redis {
    fn start(port: u16) -> Option<Self> {
        Self::start_on(port, None)
    }

    /// On CPU `cpu` only, when given; its timer (serverCron) once a second, so that
    /// nearly every time it wakes is for a request.
    fn start_on(port: u16, cpu: Option<usize>) -> Option<Self> {
        let mut cmd = match cpu {
            Some(c) => {
                let mut t = Command::new("taskset");
                t.args(["-c", &c.to_string(), "redis-server"]);
                t
            }
            None => Command::new("redis-server"),
        };
        let child = cmd
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--hz",
                "1",
            ])
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--enable-debug-command",
                "local",
            ])
            .stdout(Stdio::null())
            .spawn()
            .ok()?;
        Some(Self(Service::listening(child, port, "redis-server")))
    }
}

/// True when redis-server is installed; CI installs it, so there its absence fails.
fn have_redis(test: &str) -> bool {
    installed(test, "redis-server", "redis-server")
}

/// The text of redis's `INFO section`, as redis reports it.
fn info(port: u16, section: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(format!("INFO {section}\r\n").as_bytes())
        .unwrap();
    let mut r = BufReader::new(s);
    let len: usize = reply(&mut r)[1..].trim().parse().unwrap();
    let mut body = vec![0; len + 2];
    r.read_exact(&mut body).unwrap();
    String::from_utf8(body).unwrap()
}

/// `INFO commandstats`' calls of `command`, as redis counts them.
fn calls(port: u16, command: &str) -> u64 {
    let key = format!("cmdstat_{command}:calls=");
    info(port, "commandstats")
        .lines()
        .find_map(|l| l.strip_prefix(&key))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

/// 200 commands on one connection, one at a time: 197 PINGs and three `DEBUG SLEEP
/// 0.1` at commands 51, 121 and 191. explain counts exactly the 200 redis counts, each
/// PING's request and response bytes as sent (6, 7), and the 100 ms redis sleeps as
/// the application's work on exactly those three transactions: at least 100 ms of
/// think each, every other one under 50 ms (a margin a preempted vCPU cannot cross).
/// Every transaction's parts sum to its response time.
#[test]
fn redis_sleeping_shows_as_its_own_work_on_exactly_those_transactions() {
    if !privileged("redis_sleeping_shows") || !have_redis("redis_sleeping_shows") {
        return;
    }
    let port = free_port();
    let _redis = Redis::start(port).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let watch = Watch::start_with(port, &["--out", dir.to_str().unwrap()]);

    let sleeps = [50, 120, 190];
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    for i in 0..200 {
        if sleeps.contains(&i) {
            w.write_all(b"DEBUG SLEEP 0.1\r\n").unwrap();
            assert_eq!(reply(&mut r), "+OK\r\n");
        } else {
            w.write_all(b"PING\r\n").unwrap();
            assert_eq!(reply(&mut r), "+PONG\r\n");
        }
    }
    // The last response's ACK ends its transaction: closing sends it at once.
    drop((w, r));
    std::thread::sleep(Duration::from_millis(300));
    let (txns, rest) = watch.stop();
    let ran = calls(port, "ping") + calls(port, "debug");
    assert_eq!(ran, 200, "redis's own count");
    assert_eq!(txns.len(), 200, "{rest}");
    for (i, t) in txns.iter().enumerate() {
        let f = |k: &str| num(t, k);
        let think = f("think_us");
        if sleeps.contains(&i) {
            assert!(think >= 100_000.0, "transaction {i}: {t}");
            assert_eq!(t["request_bytes"], 17, "{t}");
        } else {
            assert!(think < 50_000.0, "transaction {i}: {t}");
            assert_eq!(
                (&t["request_bytes"], &t["response_bytes"]),
                (&6.into(), &7.into()),
                "{t}"
            );
        }
        let sum = f("arrival_us") + f("wait_us") + f("think_us") + f("write_us");
        assert!((sum - f("response_us")).abs() < 0.01, "{t}");
        assert!(f("network_us") >= 0.0, "{t}");
    }
    assert!(rest.contains("200 transaction(s)"), "{rest}");
    the_results_directory_holds_the_same(&dir, &txns, &rest);
}

/// `--out`'s directory says what the command said: the same transactions in
/// transactions.jsonl, windows whose counts add up to redis's 200 and a whole run
/// whose think time's P99 is a `DEBUG SLEEP` (3 of 200), and a report `rttlab
/// report` draws again byte for byte. Witnesses: redis's count, the sleeps, the
/// command's own JSON lines and summary, and the schema file.
fn the_results_directory_holds_the_same(
    dir: &std::path::Path,
    txns: &[serde_json::Value],
    rest: &str,
) {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    let kept: Vec<serde_json::Value> = common::assert_schema_lines(&read("transactions.jsonl"));
    assert_eq!(kept, txns);
    let windows = common::assert_schema_lines(&read("windows.jsonl"));
    let (whole, each): (Vec<_>, Vec<_>) = windows.iter().partition(|w| w["whole_run"] == true);
    let count = |w: &serde_json::Value| w["transactions"].as_u64().unwrap();
    assert_eq!(each.iter().map(|w| count(w)).sum::<u64>(), 200);
    assert_eq!(whole.len(), 1, "{windows:?}");
    assert_eq!(count(whole[0]), 200);
    let think = &whole[0]["parts"][2];
    assert_eq!(think["part"], "think");
    assert!(num(think, "p99_us") >= 100_000.0, "{think}");
    assert!(num(think, "p50_us") < 50_000.0, "{think}");
    // The summary the command printed at the end, as report.txt has it.
    let text = read("report.txt");
    let table = text.lines().nth(1).unwrap();
    assert!(rest.contains(table), "{table}\nnot in\n{rest}");
    assert!(rest.contains(&format!("report: {}", dir.join("report.html").display())));
    let html = read("report.html");
    let o = Command::new(common::bin())
        .args(["report", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8(o.stdout).unwrap().trim_end(),
        text.trim_end()
    );
    assert_eq!(read("report.html"), html, "drawn again the same");
}

/// The time the kernel says redis's main thread was runnable but not running
/// (/proc/PID/task/PID/schedstat's second field), µs.
fn run_delay_us(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/schedstat")).unwrap();
    s.split_whitespace().nth(1).unwrap().parse::<f64>().unwrap() / 1e3
}

/// Pin the calling thread to `cpu`.
fn pin_to(cpu: usize) {
    // SAFETY: a cpu_set_t we own, zeroed then set, for this thread (0).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set),
            0
        );
    }
}

/// A busy loop at real-time priority on redis's CPU, 20 ms on and 20 ms off for 2 s,
/// while one client on the other CPU pings redis: a request that arrives while the
/// loop runs waits until it stops, and explain counts that as waiting to be read.
/// Witness: the kernel's own account of the time redis's thread was runnable but kept
/// from running (schedstat's run_delay): the transactions' long waits add up to it.
#[test]
fn a_busy_loop_on_the_servers_cpu_shows_as_the_applications_wait() {
    let test = "a_busy_loop_on_the_servers_cpu";
    if !privileged(test) || !have_redis(test) || !two_cpus(test) {
        return;
    }
    let _g = common::serial::machine();
    let port = free_port();
    let redis = Redis::start_on(port, Some(1)).unwrap();
    let pid = redis.0 .0.id();
    let watch = Watch::start(port);
    pin_to(0);
    let before = run_delay_us(pid);
    let mut hog = Command::new("chrt")
        .args(["-f", "1", "taskset", "-c", "1", "python3", "-c"])
        .arg(
            "import time\n\
             end = time.monotonic() + 2\n\
             while time.monotonic() < end:\n\
             \x20   t = time.monotonic() + 0.02\n\
             \x20   while time.monotonic() < t: pass\n\
             \x20   time.sleep(0.02)\n",
        )
        .spawn()
        .unwrap();
    let started = Instant::now();
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    while started.elapsed() < Duration::from_millis(2200) {
        w.write_all(b"PING\r\n").unwrap();
        assert_eq!(reply(&mut r), "+PONG\r\n");
    }
    assert!(hog.wait().unwrap().success());
    drop((w, r, s));
    std::thread::sleep(Duration::from_millis(300));
    let delayed = run_delay_us(pid) - before;
    let (txns, rest) = watch.stop();
    let long: Vec<&serde_json::Value> = txns
        .iter()
        .filter(|t| num(t, "wait_us") >= 1000.0)
        .collect();
    let waited: f64 = long.iter().map(|t| num(t, "wait_us")).sum();
    let figures = format!(
        "{} transactions, {} waited ≥ 1 ms, {waited:.0} µs in all; the kernel's run_delay {delayed:.0} µs\n{rest}",
        txns.len(),
        long.len()
    );
    eprintln!("{figures}");
    // About one request caught by each of the loop's 50 bursts of 20 ms, and most of
    // the burst waited out (the client sends at once: redis is idle when a burst
    // begins, and the next request arrives within µs): at least a quarter of the
    // loop's second of bursts. No wait can be longer than the kernel kept redis
    // runnable and not running, whatever else loads the machine.
    assert!(long.len() >= 20, "{figures}");
    assert!(waited >= 250_000.0, "{figures}");
    assert!(waited <= delayed + 1000.0, "{figures}");
}

/// The client side (`--to`) beside the server side of the same redis on loopback: 30
/// PINGs of the test's own connection, then 2 000 of redis-benchmark's. Witnesses:
/// - causality on the kernel's one clock: for every transaction, seen by both ends
///   (matched by the client's port and their order), the request out at the client
///   (write + send after its first write) comes no later than its first segment in
///   at the server, and the server's first write (arrival + wait + think after that)
///   no later than the response's first segment at the client (write + send +
///   server after the client's start): the client's server part holds the server's
///   time; the bytes each end counts are the same;
/// - redis-benchmark's own latency report: its clock starts before the request's
///   write and stops when its event loop wakes for the reply, before it reads
///   (redis-benchmark.c, `writeHandler` and `readHandler`): each of its latencies
///   holds the kernel's write to the response's last segment in of the same request
///   (explain's response less its wait), so explain's 1 000th and 1 980th smallest of
///   those are at most its P50 and P99 (their ranks in HdrHistogram), within the
///   1.5 µs of its whole-µs clock and its printing. The read itself comes after its
///   clock stopped: a CPU held by another task between the two (a loop beside the
///   suite) lengthens explain's whole response and not redis-benchmark's, and did at
///   P99 (171.2 µs whole against its 167), so the whole is held to its median only,
///   which a few such preemptions cannot move;
/// - ss: the connection's srtt and minimum RTT as the kernel's tcp_info gives them,
///   read before the 31st request, are the 30th transaction's (the turn ends it before
///   any new RTT sample);
/// - redis's own count of its commands.
#[test]
fn a_client_is_timed_from_its_write_to_its_read_around_the_servers_time() {
    let test = "a_client_is_timed";
    if !privileged(test) || !have_redis(test) || !installed(test, "redis-benchmark", "redis-tools")
    {
        return;
    }
    let port = free_port();
    let _redis = Redis::start(port).unwrap();
    let p = port.to_string();
    let (watch, first) = Watch::selecting(&["--port", &p, "--to", &p]);
    assert!(
        first.contains(&format!("clients here of port(s) {port}")),
        "{first}"
    );
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mine = s.local_addr().unwrap().port();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    let mut ss = String::new();
    for i in 0..31 {
        if i == 30 {
            ss = ss_line(mine);
        }
        w.write_all(b"PING\r\n").unwrap();
        assert_eq!(reply(&mut r), "+PONG\r\n");
        std::thread::sleep(Duration::from_millis(2));
    }
    drop((w, r));
    let bench = Command::new("redis-benchmark")
        .args(["-p", &p, "-n", "2000", "-c", "1", "-t", "ping_inline"])
        .args(["--precision", "3"])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&bench.stdout).into_owned();
    assert!(bench.status.success(), "{report}");
    std::thread::sleep(Duration::from_millis(300));
    let (txns, rest) = watch.stop();
    assert_eq!(calls(port, "ping"), 2031, "redis's own count");
    let side = |name: &str| -> Vec<&serde_json::Value> {
        txns.iter().filter(|t| t["side"] == name).collect()
    };
    let (clients, servers) = (side("client"), side("server"));
    // Both ends saw every transaction (redis-benchmark's CONFIG GETs too).
    assert_eq!(clients.len(), servers.len(), "{rest}");
    for c in &clients {
        let cport = num(c, "client_port") as u16;
        let k = clients
            .iter()
            .filter(|o| num(o, "client_port") as u16 == cport)
            .position(|o| std::ptr::eq(*o, *c))
            .unwrap();
        let s = servers
            .iter()
            .filter(|t| {
                let a: std::net::SocketAddr = t["client"].as_str().unwrap().parse().unwrap();
                a.port() == cport
            })
            .nth(k)
            .unwrap_or_else(|| panic!("no server transaction {k} of client port {cport}: {c}"));
        assert_eq!(
            (&c["request_bytes"], &c["response_bytes"]),
            (&s["request_bytes"], &s["response_bytes"]),
            "{c}\n{s}"
        );
        let ns = |t: &serde_json::Value, parts: &[&str]| -> i128 {
            let at = i128::from(t["time_ns"].as_u64().unwrap());
            at + parts
                .iter()
                .map(|p| (num(t, p) * 1e3).round() as i128)
                .sum::<i128>()
        };
        // The request out (to the driver) before it is in at the server.
        assert!(ns(c, &["write_us", "send_us"]) <= ns(s, &[]), "{c}\n{s}");
        assert!(
            ns(s, &["arrival_us", "wait_us", "think_us"])
                <= ns(c, &["write_us", "send_us", "server_us"]),
            "{c}\n{s}"
        );
    }
    // The 30th of the test's own, against ss before the 31st.
    let own: Vec<_> = clients
        .iter()
        .filter(|t| num(t, "client_port") as u16 == mine)
        .collect();
    assert_eq!(own.len(), 31, "{rest}");
    let ss_us = |key: &str| -> f64 {
        let v = ss
            .split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in {ss}"));
        (v.split('/').next().unwrap().parse::<f64>().unwrap() * 1e3).round()
    };
    assert_eq!(num(own[29], "srtt_us"), ss_us("rtt:"), "{ss}\n{}", own[29]);
    assert_eq!(
        num(own[29], "min_rtt_us"),
        ss_us("minrtt:"),
        "{ss}\n{}",
        own[29]
    );
    // redis-benchmark's PINGs: 6 bytes each way on its one connection.
    let benchmarks: Vec<_> = clients
        .iter()
        .filter(|t| num(t, "client_port") as u16 != mine && num(t, "request_bytes") == 6.0)
        .collect();
    assert_eq!(benchmarks.len(), 2000, "{rest}");
    let sorted = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v
    };
    let bench_us = sorted(benchmarks.iter().map(|t| num(t, "response_us")).collect());
    let arrived_us = sorted(
        benchmarks
            .iter()
            .map(|t| num(t, "response_us") - num(t, "wait_us"))
            .collect(),
    );
    let summary = report
        .lines()
        .skip_while(|l| !l.contains("latency summary"))
        .nth(2)
        .unwrap_or_else(|| panic!("no latency summary in {report}"));
    let ms: Vec<f64> = summary
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    let (p50, p99) = (ms[2] * 1e3, ms[4] * 1e3);
    let figures = format!(
        "explain to the response's arrival {:.1} / {:.1} µs (to its read {:.1} / {:.1}), \
         redis-benchmark {p50} / {p99} µs",
        arrived_us[999], arrived_us[1979], bench_us[999], bench_us[1979]
    );
    assert!(arrived_us[999] <= p50 + 1.5, "{figures}");
    assert!(arrived_us[1979] <= p99 + 1.5, "{figures}");
    assert!(bench_us[999] <= p50 + 1.5, "{figures}");
    eprintln!("{figures}");
}

/// Both sides through a slow link: redis in `b`, `redis-cli -x SET` from `a` writing
/// a 200 KiB value, `a`'s veth held to 4 Mbit/s by tbf. On the client, the request's
/// write returns while TCP still holds much of it (in the send buffer and the qdisc):
/// that hold is explain's send part, to the moment the last byte went to the driver.
/// On the server, the request arrives over the 410 ms the link takes: its arrival
/// part. Witnesses: tcpdump on `a`'s veth, which takes each frame at the driver's door
/// as explain does (the request's last data segment at explain's moment, within
/// 1 ms, and the request's bytes on the wire), and on `b`'s (its first and last data
/// segments in, at the server's start and end of arrival, within 1 ms); arithmetic:
/// 200 KiB at 4 Mbit/s take 410 ms, and the socket holds at least its initial 16 KiB
/// send buffer when a write returns (33 ms of the link), so the send part is 30 ms or
/// more, and the arrival all but the first segments' 300 ms or more.
#[test]
fn a_request_over_a_slow_link_is_held_by_the_client_and_arrives_as_the_wire_says() {
    let test = "a_request_over_a_slow_link";
    if !privileged(test) || !have_redis(test) {
        return;
    }
    let pair = NetnsPair::new();
    let port = free_port();
    let p = port.to_string();
    let child = NetnsPair::exec(&pair.b, &["redis-server", "--bind", pair.b4])
        .args(["--port", &p, "--save", "", "--appendonly", "no"])
        .args(["--protected-mode", "no"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let _redis = Service(child);
    common::wait_listening(pair.b4, port, Some(&pair.b));
    let tbf = ["tc", "qdisc", "add", "dev", &pair.dev_a, "root", "tbf"];
    let limit = ["rate", "4mbit", "burst", "16kb", "latency", "2s"];
    let ok = NetnsPair::exec(&pair.a, &[&tbf[..], &limit[..]].concat())
        .status()
        .unwrap();
    assert!(ok.success(), "tc qdisc add … tbf");
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("a.pcap");
    let filter = format!("tcp and src {} and dst port {port}", pair.a4);
    let nano = ["--time-stamp-precision", "nano"];
    let dump = common::Tcpdump::start(
        Some(&pair.a),
        &pair.dev_a,
        &pcap,
        &[&nano[..], &[&filter[..]]].concat(),
    );
    let pcap_b = dir.path().join("b.pcap");
    let dev_b = format!("{}b", pair.dev_a.strip_suffix('a').unwrap());
    let dump_b = common::Tcpdump::start(
        Some(&pair.b),
        &dev_b,
        &pcap_b,
        &[&nano[..], &[&filter[..]]].concat(),
    );
    let watch = Watch::selecting(&["--port", &p, "--to", &p]).0;
    let mut cli = NetnsPair::exec(&pair.a, &["redis-cli", "-h", pair.b4, "-p", &p])
        .args(["-x", "SET", "k"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    cli.stdin
        .take()
        .unwrap()
        .write_all(&vec![b'v'; 200 << 10])
        .unwrap();
    let out = cli.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "OK\n");
    std::thread::sleep(Duration::from_millis(300));
    let (txns, rest) = watch.stop();
    dump.stop();
    dump_b.stop();
    let set = |side: &str| -> &serde_json::Value {
        let of: Vec<_> = txns
            .iter()
            .filter(|t| t["side"] == side && num(t, "request_bytes") > 200_000.0)
            .collect();
        assert_eq!(of.len(), 1, "{side}: {rest}");
        of[0]
    };
    let (t, server) = (set("client"), set("server"));
    let segments = data_segments(&pcap);
    let first = segments.iter().map(|s| s.1).min().unwrap();
    let end = segments.iter().map(|s| s.2).max().unwrap();
    let last_out = segments
        .iter()
        .filter(|s| s.2 == end)
        .map(|s| s.0)
        .fold(0.0, f64::max);
    let sent = (t["time_ns"].as_u64().unwrap() as f64
        + (num(t, "write_us") + num(t, "send_us")) * 1e3)
        / 1e9;
    let figures = format!(
        "explain: write {} µs, send {} µs, server {} µs, out at {sent:.6}; tcpdump: last segment at {last_out:.6}, {} bytes\n{t}",
        num(t, "write_us"),
        num(t, "send_us"),
        num(t, "server_us"),
        end - first
    );
    assert_eq!(num(t, "request_bytes"), (end - first) as f64, "{figures}");
    assert!((sent - last_out).abs() < 1e-3, "{figures}");
    assert!(num(t, "send_us") >= 30_000.0, "{figures}");
    eprintln!("{figures}");
    // The server's side of the same request, against the wire in `b`.
    let arriving = data_segments(&pcap_b);
    let (first_in, last_in) = (
        arriving.iter().map(|s| s.0).fold(f64::MAX, f64::min),
        arriving.iter().map(|s| s.0).fold(0.0, f64::max),
    );
    let start = server["time_ns"].as_u64().unwrap() as f64 / 1e9;
    let arrived = start + num(server, "arrival_us") / 1e6;
    let figures = format!(
        "explain: arrival from {start:.6} to {arrived:.6}; tcpdump in b: {first_in:.6} to {last_in:.6}\n{server}"
    );
    assert_eq!(server["request_bytes"], t["request_bytes"], "{figures}");
    assert!((start - first_in).abs() < 1e-3, "{figures}");
    assert!((arrived - last_in).abs() < 1e-3, "{figures}");
    assert!(num(server, "arrival_us") >= 300_000.0, "{figures}");
    eprintln!("{figures}");
}

/// Every data segment in a capture: (its time in s, its first and its end sequence
/// number, absolute), read by tcpdump itself.
fn data_segments(pcap: &std::path::Path) -> Vec<(f64, u64, u64)> {
    let o = Command::new("tcpdump")
        .args(["-nn", "-tt", "-S", "--time-stamp-precision", "nano", "-r"])
        .arg(pcap)
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let time: f64 = l.split_whitespace().next()?.parse().ok()?;
            let seq = l.split(", seq ").nth(1)?.split(',').next()?;
            let (from, to) = seq.split_once(':')?;
            Some((time, from.parse().ok()?, to.parse().ok()?))
        })
        .collect()
}

/// The value of `key` (`rtt:`) in `ss -ti`'s line of the server socket
/// on `port`: the kernel's tcp_info as ss reads it.
fn ss_field(port: u16, key: &str) -> Option<String> {
    ss_line(port)
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key))
        .map(str::to_owned)
}

/// `ss -ti`'s line of the server socket on `port`.
fn ss_line(port: u16) -> String {
    let o = Command::new("ss")
        .args([
            "-tin",
            "state",
            "established",
            &format!("( sport = :{port} )"),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Counter `name` of the kernel's TCP statistics in namespace `ns` (`/proc/net/snmp`'s
/// `Tcp:` rows, `/proc/net/netstat`'s `TcpExt:` rows): each namespace counts its own.
fn tcp_counter(ns: &str, file: &str, row: &str, name: &str) -> u64 {
    let o = NetnsPair::exec(ns, &["cat", file]).output().unwrap();
    let text = String::from_utf8(o.stdout).unwrap();
    let mut rows = text.lines().filter(|l| l.starts_with(row));
    let (names, values) = (rows.next().unwrap(), rows.next().unwrap());
    let i = names.split_whitespace().position(|n| n == name).unwrap();
    values.split_whitespace().nth(i).unwrap().parse().unwrap()
}

/// Server namespace `b`'s retransmitted segments, tail-loss probes and RTO expiries.
fn retransmit_counters(b: &str) -> [u64; 3] {
    [
        tcp_counter(b, "/proc/net/snmp", "Tcp:", "RetransSegs"),
        tcp_counter(b, "/proc/net/netstat", "TcpExt:", "TCPLossProbes"),
        tcp_counter(b, "/proc/net/netstat", "TcpExt:", "TCPTimeouts"),
    ]
}

/// redis in namespace `b`, redis-cli pinging it 200 times from `a`, and every 40th
/// segment redis sends dropped by nftables as it arrives in `a` (a segment dropped on
/// its way out never left: TCP sends it again at once). Twice: with the tail-loss
/// probe on (Linux's default), each lost response is sent again by a probe; with it
/// off (`tcp_early_retrans=0` in `b`), by the RTO, about 200 ms later. explain puts
/// each retransmission on the transaction it stalled, in its network part (at least
/// 100 ms on exactly those), and names its cause. Witnesses: `b`'s own counters (its
/// namespace holds only the server's sockets: TcpRetransSegs, TCPLossProbes,
/// TCPTimeouts), nftables' count of the drops, redis-cli's 200 answers.
#[test]
fn drops_show_as_retransmission_stalls_by_cause_on_the_transactions_they_hit() {
    let test = "drops_show_as_retransmission_stalls";
    if !privileged(test) || !have_redis(test) {
        return;
    }
    // Which timer sends a lost segment again is timing: kept from busy tests.
    let _g = common::serial::machine();
    let pair = NetnsPair::new();
    let port = free_port();
    let child = NetnsPair::exec(&pair.b, &["redis-server", "--bind", pair.b4])
        .args([
            "--port",
            &port.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        // Bound to b's address, reached from a: not loopback, so not "protected".
        .args(["--protected-mode", "no"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let _redis = Service(child);
    common::wait_listening(pair.b4, port, Some(&pair.b));
    NetnsPair::nft(
        &pair.a,
        &format!(
            "table inet rttlab_drops {{\ncounter dropped {{}}\n\
             chain inp {{ type filter hook input priority 0;\n\
             tcp sport {port} numgen inc mod 40 == 20 counter name dropped drop; }}\n}}\n"
        ),
    );
    let watch = Watch::start(port);
    let mut phases = Vec::new();
    for probes in ["3", "0"] {
        NetnsPair::exec(
            &pair.b,
            &[
                "sysctl",
                "-qw",
                &format!("net.ipv4.tcp_early_retrans={probes}"),
            ],
        )
        .status()
        .unwrap();
        let before = (
            retransmit_counters(&pair.b),
            NetnsPair::nft_counter(&pair.a, "rttlab_drops", "dropped"),
        );
        let o = NetnsPair::exec(
            &pair.a,
            &["redis-cli", "-h", pair.b4, "-p", &port.to_string()],
        )
        .args(["-r", "200", "PING"])
        .output()
        .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(out.lines().filter(|l| *l == "PONG").count(), 200, "{out}");
        // redis-cli has closed: its last answer is ACKed, every transaction ended.
        std::thread::sleep(Duration::from_millis(300));
        let after = (
            retransmit_counters(&pair.b),
            NetnsPair::nft_counter(&pair.a, "rttlab_drops", "dropped"),
        );
        let counted: Vec<u64> = (0..3).map(|i| after.0[i] - before.0[i]).collect();
        phases.push((counted, after.1 - before.1));
    }
    let (txns, rest) = watch.stop();
    assert_eq!(txns.len(), 400, "{rest}");
    for (phase, (counted, dropped)) in phases.iter().enumerate() {
        let ours = &txns[phase * 200..(phase + 1) * 200];
        let sum = |k: &str| ours.iter().map(|t| t[k].as_u64().unwrap()).sum::<u64>();
        let stalled: Vec<String> = ours
            .iter()
            .filter(|t| t["retransmissions"].as_u64() != Some(0))
            .map(ToString::to_string)
            .collect();
        let figures = format!(
            "phase {phase}: nftables dropped {dropped}; the kernel: RetransSegs, TCPLossProbes, TCPTimeouts {counted:?}; explain: {} segments, {} probes, {} after an RTO, {} fast\n{rest}\nthe transactions with retransmissions:\n{}",
            sum("retransmissions"), sum("tail_loss_probes"), sum("rto_retransmits"), sum("fast_retransmits"),
            stalled.join("\n")
        );
        assert!(*dropped >= 4, "{figures}");
        assert_eq!(counted[0], *dropped, "{figures}");
        assert_eq!(sum("retransmissions"), counted[0], "{figures}");
        // The probe's phase is all probes, the other all RTOs: the cause the kernel
        // counted is the one the sysctl left, and explain names no other.
        let (cause, other) = if phase == 0 {
            ("tail_loss_probes", "rto_retransmits")
        } else {
            ("rto_retransmits", "tail_loss_probes")
        };
        assert_eq!(
            counted[if phase == 0 { 1 } else { 2 }],
            *dropped,
            "{figures}"
        );
        assert_eq!(sum(other), 0, "{figures}");
        assert_eq!(sum("fast_retransmits"), 0, "{figures}");
        // Every retransmitted segment named, on its transaction: the causes are
        // counted from the kernel's total_retrans over the interval the
        // transaction's count is (with a loop pinned beside it, a run in three once
        // left one unnamed, when they were counted per event and only once the
        // response had begun).
        assert_eq!(sum(cause), *dropped, "{figures}");
        for t in ours {
            let stall = num(t, "network_us") >= 100_000.0;
            assert_eq!(stall, num(t, "retransmissions") > 0.0, "{t}\n{figures}");
            let causes = ["rto_retransmits", "tail_loss_probes", "fast_retransmits"]
                .iter()
                .map(|k| num(t, k))
                .sum::<f64>();
            assert_eq!(causes, num(t, "retransmissions"), "{t}\n{figures}");
        }
    }
    let words = rest.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("tail-loss probe(s)") && words.contains("sent after an RTO expired"),
        "{rest}"
    );
}

/// The server socket's smoothed RTT (`rtt:SRTT/RTTVAR`, ms).
fn ss_srtt_ms(port: u16) -> f64 {
    let rtt = ss_field(port, "rtt:").unwrap_or_else(|| panic!("no rtt for port {port} in ss"));
    rtt.split('/').next().unwrap().parse().unwrap()
}

/// A client that thinks 10 ms between requests: it ACKs each response with its next
/// request, so the response's network part is its pause, and the server's TCP times
/// that pause as its RTT (Jones, A Brief Look at Round Trip Time), which explain says.
/// Witnesses: the client's own pause (10 ms, the test's sleep), and the kernel's srtt
/// of the server socket (ss).
#[test]
fn a_client_thinking_10_ms_shows_as_the_network_part_and_the_servers_srtt() {
    let test = "a_client_thinking_10_ms";
    if !privileged(test) || !have_redis(test) {
        return;
    }
    let port = free_port();
    let _redis = Redis::start(port).unwrap();
    let watch = Watch::start(port);
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    for _ in 0..50 {
        w.write_all(b"PING\r\n").unwrap();
        assert_eq!(reply(&mut r), "+PONG\r\n");
        std::thread::sleep(Duration::from_millis(10));
    }
    let srtt_ms = ss_srtt_ms(port);
    drop((w, r, s));
    std::thread::sleep(Duration::from_millis(300));
    let (txns, rest) = watch.stop();
    let riding: Vec<f64> = txns
        .iter()
        .filter(|t| t["ack_on_next_request"] == true)
        .map(|t| num(t, "network_us"))
        .collect();
    let figures = format!(
        "{} of {} ACKs on the next request: {riding:?}; ss srtt {srtt_ms} ms\n{rest}",
        riding.len(),
        txns.len()
    );
    assert_eq!(txns.len(), 50, "{figures}");
    assert!(riding.len() >= 40, "{figures}");
    // Each of them waited for the client's 10 ms pause, and none for the delayed-ACK
    // timer (40 ms): the next request came first.
    assert!(
        riding.iter().all(|&n| (10_000.0..40_000.0).contains(&n)),
        "{figures}"
    );
    assert!(srtt_ms >= 5.0, "{figures}");
    assert!(rest.contains("the client's own pause"), "{rest}");
}

/// 100 connections one after another, each one PING, every other one half-closed
/// after its request (`shutdown(Write)`: the server answers a connection already
/// closing), watched at both ends with room for 10 sockets in explain's table: each is
/// its own connection (its own id, its own client port) on each side, each
/// transaction counted once with its 6 and 7 bytes, none lost to the table (a socket's
/// entry goes with it: a new socket at the same kernel address starts afresh). The
/// next connection waits until the kernel has let the last one's sockets go: on a busy
/// machine its last ACK may come many milliseconds late (a suite run saw tail-loss
/// probes and ten sockets alive at once), and a socket still alive rightly holds its
/// entry. Witnesses: the
/// kernel's list of sockets (`/proc/net/tcp`), the client ports it gave the test's
/// sockets, and redis's own count of its commands.
#[test]
fn connections_that_come_and_go_are_each_their_own() {
    let test = "connections_that_come_and_go";
    if !privileged(test) || !have_redis(test) {
        return;
    }
    let port = free_port();
    let _redis = Redis::start(port).unwrap();
    let p = port.to_string();
    let watch = Watch::start_with(port, &["--to", &p, "--max-connections", "10"]);
    let mut ports = std::collections::BTreeSet::new();
    for i in 0..100 {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        ports.insert(s.local_addr().unwrap().port());
        let mut w = s.try_clone().unwrap();
        w.write_all(b"PING\r\n").unwrap();
        if i % 2 == 1 {
            s.shutdown(std::net::Shutdown::Write).unwrap();
        }
        let mut r = BufReader::new(s);
        assert_eq!(reply(&mut r), "+PONG\r\n");
        drop((w, r));
        sockets_gone(port);
    }
    std::thread::sleep(Duration::from_millis(300));
    let (txns, rest) = watch.stop();
    let ran = calls(port, "ping");
    assert_eq!(ran, 100, "redis's own count");
    assert_eq!(txns.len(), 200, "{rest}");
    one_ping_a_connection(&txns, &ports, &rest);
    assert!(!rest.contains("not timed"), "{rest}");
}

/// A keep-alive connection left idle when explain stops: three PINGs answered, the
/// third's transaction not yet ended (its connection neither sent again nor closed),
/// so each side times two and names the third at the end instead of dropping it
/// silently. Witness: the test's own three PINGs, redis's count of them.
#[test]
fn an_idle_connections_last_answer_is_named_at_the_end() {
    let test = "an_idle_connections_last_answer";
    if !privileged(test) || !have_redis(test) {
        return;
    }
    let port = free_port();
    let _redis = Redis::start(port).unwrap();
    let watch = Watch::start_with(port, &["--to", &port.to_string()]);
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    for _ in 0..3 {
        w.write_all(b"PING\r\n").unwrap();
        assert_eq!(reply(&mut r), "+PONG\r\n");
    }
    let (txns, rest) = watch.stop();
    assert_eq!(calls(port, "ping"), 3, "redis's own count");
    for side in ["server", "client"] {
        assert_eq!(
            txns.iter().filter(|t| t["side"] == side).count(),
            2,
            "{rest}"
        );
    }
    assert!(
        rest.contains(
            "not timed: 2 transaction(s) answered, their connections still open at the end"
        ),
        "{rest}"
    );
    drop((w, r));
}

/// A 20 MiB value written and read back: redis writes the GET's answer in many writes
/// as its send buffer drains, and all it wrote is ACKed between them more than once;
/// the transaction still holds every byte of the answer, counted by RESP's own length
/// (`$20971520\r\n`, the value, `\r\n`), and the SET's request every byte it sent, at
/// both ends (the client's request in three writes, its answer in many reads).
#[test]
fn a_large_answer_is_one_transaction_to_its_last_byte() {
    let test = "a_large_answer";
    if !privileged(test) || !have_redis(test) {
        return;
    }
    const LEN: usize = 20 << 20;
    let port = free_port();
    let _redis = Redis::start(port).unwrap();
    let watch = Watch::start_with(port, &["--to", &port.to_string()]);
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let set = format!("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n${LEN}\r\n");
    w.write_all(set.as_bytes()).unwrap();
    w.write_all(&vec![b'v'; LEN]).unwrap();
    w.write_all(b"\r\n").unwrap();
    assert_eq!(reply(&mut r), "+OK\r\n");
    w.write_all(b"GET k\r\n").unwrap();
    let header = reply(&mut r);
    assert_eq!(header, format!("${LEN}\r\n"));
    let mut body = vec![0; LEN + 2];
    r.read_exact(&mut body).unwrap();
    drop((w, r, s));
    std::thread::sleep(Duration::from_millis(300));
    let (txns, rest) = watch.stop();
    assert_eq!(txns.len(), 4, "{rest}");
    for side in ["server", "client"] {
        let of: Vec<_> = txns.iter().filter(|t| t["side"] == side).collect();
        assert_eq!(of.len(), 2, "{rest}");
        assert_eq!(of[0]["request_bytes"], set.len() + LEN + 2, "{}", of[0]);
        assert_eq!(of[1]["request_bytes"], 7, "{}", of[1]);
        assert_eq!(of[1]["response_bytes"], header.len() + LEN + 2, "{}", of[1]);
    }
}

/// The client's port of a transaction, as either end saw it.
fn client_port(t: &serde_json::Value) -> u16 {
    if t["side"] == "client" {
        num(t, "client_port") as u16
    } else {
        let c: std::net::SocketAddr = t["client"].as_str().unwrap().parse().unwrap();
        c.port()
    }
}

/// On each side (explain watching both ends), each transaction its own connection
/// (its own id), from exactly the client `ports` the kernel gave the test's sockets,
/// one PING's 6 and 7 bytes each.
fn one_ping_a_connection(
    txns: &[serde_json::Value],
    ports: &std::collections::BTreeSet<u16>,
    rest: &str,
) {
    for side in ["server", "client"] {
        let of: Vec<&serde_json::Value> = txns.iter().filter(|t| t["side"] == side).collect();
        let ids: std::collections::BTreeSet<u64> = of
            .iter()
            .map(|t| t["connection"].as_u64().unwrap())
            .collect();
        assert_eq!(ids.len(), ports.len(), "{side}: {rest}");
        let seen: std::collections::BTreeSet<u16> = of.iter().map(|t| client_port(t)).collect();
        assert_eq!(&seen, ports, "{side}");
    }
    for t in txns {
        assert_eq!(
            (&t["request_bytes"], &t["response_bytes"]),
            (&6.into(), &7.into()),
            "{t}"
        );
    }
}

/// Waits (at most 10 s) until no full socket of the kernel has `port` at either end
/// but its listener: TIME_WAIT is a mini-socket, the full one destroyed before it
/// (`tcp_time_wait`). Asked of sock_diag with the port filtered in the kernel (what
/// `ss` reads), not read from `/proc/net/tcp`: that file is no snapshot — read in
/// pieces while thousands of sockets close, its reader resumes at an offset in a hash
/// bucket that has shrunk and skips sockets, and an empty list once ended this wait
/// with a thousand still closing. A filtered dump that finds nothing fits one reply:
/// the kernel walks the whole table for it in one go, each bucket under its lock.
fn sockets_gone(port: u16) {
    use rttlab::kernel::sock_diag::{DiagFilter, SockDiag};
    let mut diag = SockDiag::open(None).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut alive = Vec::new();
        for f in [
            DiagFilter {
                sport: Some(port),
                ..DiagFilter::default()
            },
            DiagFilter {
                dport: Some(port),
                ..DiagFilter::default()
            },
        ] {
            diag.dump_tcp(&f, |e| {
                alive.push(format!("{} {} → {}", e.state, e.local, e.remote))
            })
            .unwrap();
        }
        if alive.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "sockets still alive: {} of them, the first {:?}",
            alive.len(),
            alive[0]
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Open files allowed to this process raised to at least `n`, within its hard limit
/// (which may not be raised here): the other tests beside it keep theirs.
fn allow_open_files(n: u64) {
    // SAFETY: getrlimit and setrlimit on a struct we own.
    unsafe {
        let mut l: libc::rlimit = std::mem::zeroed();
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut l), 0);
        assert!(
            l.rlim_max >= n,
            "{n} open files needed, the hard limit is {}",
            l.rlim_max
        );
        if l.rlim_cur < n {
            l.rlim_cur = n;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &l), 0);
        }
    }
}

/// 10 000 connections open at once, each one PING, then all closed together, watched
/// at both ends: explain's table (65 536 by default) holds all 20 000 sockets, and on
/// each side each is its own connection, its one transaction counted once with its 6
/// and 7 bytes; nothing is lost to the ring or the table, once the kernel has let
/// every socket go (`/proc/net/tcp`), and a transaction whose socket's end the kernel
/// skipped is named at the end (two CI runs: 64 and 127 of 20 000, with 384 events
/// skipped in the second). Witnesses: redis's own count of the connections it
/// accepted and of its PINGs, and the client ports the kernel gave the test's sockets.
#[test]
fn ten_thousand_connections_at_once_are_each_counted() {
    let test = "ten_thousand_connections";
    if !privileged(test) || !have_redis(test) {
        return;
    }
    const N: usize = 10_000;
    // 10 000 connects and closes keep both CPUs busy for about 2 s.
    let _g = common::serial::busy();
    // The test's own ends of the connections, and room for the tests beside it.
    allow_open_files(N as u64 + 4096);
    let port = free_port();
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args(["--appendonly", "no", "--maxclients", "10100"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let _redis = Service::listening(child, port, "redis-server");
    let accepted_before = info_stat(port, "total_connections_received");
    let watch = Watch::start_with(port, &["--to", &port.to_string()]);
    let mut open = Vec::with_capacity(N);
    let mut ports = std::collections::BTreeSet::new();
    for _ in 0..N {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        ports.insert(s.local_addr().unwrap().port());
        (&s).write_all(b"PING\r\n").unwrap();
        let mut pong = [0; 7];
        (&s).read_exact(&mut pong).unwrap();
        assert_eq!(&pong, b"+PONG\r\n");
        open.push(s);
    }
    drop(open);
    // Every socket of the test's gone (on a busy machine the last closes come late:
    // redis reads each EOF before it closes its end), then a reader's poll for the
    // last records. (Twice in CI, 64 clients' last transactions were still open with
    // no event skipped, and stayed open through a 3 s wait: an explain defect of
    // issue 43, not a late record.)
    sockets_gone(port);
    std::thread::sleep(Duration::from_millis(300));
    let (txns, rest) = watch.stop();
    // The INFO connection itself is one more accepted, not watched while counted.
    let accepted = info_stat(port, "total_connections_received") - accepted_before - 1;
    assert_eq!((accepted, calls(port, "ping")), (N as u64, N as u64));
    // The kernel may skip a program's event while the same program runs on that CPU
    // (its recursion_misses: a softirq over a process's close); a socket whose end
    // was skipped keeps its entry, and explain names its transaction at the end. So
    // every transaction is timed or named, exactly, and only with skips declared.
    let said = |what: &str| -> usize {
        rest.lines()
            .find_map(|l| {
                l.strip_prefix("not timed: ")?
                    .strip_suffix(what)?
                    .split(' ')
                    .next()?
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    };
    let open = said(" transaction(s) answered, their connections still open at the end (neither sent again nor closed: an idle keep-alive connection's last)");
    let skipped = said(" kernel event(s) skipped, explain's program already running on that CPU (its moments then come from the next event; bytes are counted by sequence number)");
    assert_eq!(txns.len() + open, 2 * N, "{rest}");
    // A socket whose end the kernel skipped keeps its entry: only those are left.
    // (Two CI runs once found 47 and 1 047 entries beyond the skips: the sockets were
    // still closing when a skipping read of /proc/net/tcp listed none; see
    // `sockets_gone`.)
    assert!(open <= skipped, "{rest}");
    for side in ["server", "client"] {
        let of: Vec<&serde_json::Value> = txns.iter().filter(|t| t["side"] == side).collect();
        let ids: std::collections::BTreeSet<u64> = of
            .iter()
            .map(|t| t["connection"].as_u64().unwrap())
            .collect();
        assert_eq!(ids.len(), of.len(), "{side}: {rest}");
        let seen: std::collections::BTreeSet<u16> = of.iter().map(|t| client_port(t)).collect();
        assert_eq!(seen.len(), of.len(), "{side}");
        assert!(seen.is_subset(&ports), "{side}");
        for t in &of {
            assert_eq!(
                (&t["request_bytes"], &t["response_bytes"]),
                (&6.into(), &7.into()),
                "{t}"
            );
        }
    }
    // Nothing lost to the ring or the table.
    assert!(
        !rest.contains("ring buffer was full") && !rest.contains("past --max-connections"),
        "{rest}"
    );
}

/// `INFO stats`' field `name`, as redis counts it.
fn info_stat(port: u16, name: &str) -> u64 {
    let body = info(port, "stats");
    body.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or_else(|| panic!("no {name} in {body}"))
}

/// The agent's service layers (`--explain-port`, `--explain-to`): redis's
/// transactions at both ends of one host as Prometheus histograms. Witnesses: redis's
/// own count of the PINGs it ran, arithmetic (each side's parts' sums make its
/// response time's sum), and promtool on the exposition.
#[test]
fn the_agents_service_layers_count_what_redis_ran_at_both_ends() {
    if !privileged("the_agents_service_layers") || !have_redis("the_agents_service_layers") {
        return;
    }
    const N: u64 = 300;
    let port = free_port();
    let _redis = Redis::start(port).unwrap();
    let metrics_port = free_port();
    let p = port.to_string();
    // Killed when the test ends however it ends: its programs go with it.
    let mut agent = crate::agent::Killed(
        Command::new(common::bin())
            .args(["agent", "--probes", "tcp_rr", "-L"])
            .arg(format!("127.0.0.1:{}", free_port()))
            .arg("--metrics-listen")
            .arg(format!("127.0.0.1:{metrics_port}"))
            .args(["--explain-port", &p, "--explain-to", &p])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    common::wait_listening("127.0.0.1", metrics_port, None);
    let addr = format!("127.0.0.1:{metrics_port}");
    let scrape = || crate::agent::http_get(&addr, "/metrics", None, None).1;
    let value = |text: &str, series: &str| crate::agent::sample(text, series).unwrap_or(-1.0);
    let count = |text: &str, side: &str| {
        value(
            text,
            &format!("rttlab_service_response_seconds_count{{side=\"{side}\",port=\"{p}\"}}"),
        )
    };
    // The series appear, at 0, once the programs are attached (after the endpoint
    // listens).
    let t0 = Instant::now();
    while count(&scrape(), "client") < 0.0 {
        assert!(t0.elapsed() < Duration::from_secs(20), "no service series");
        std::thread::sleep(Duration::from_millis(50));
    }
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    for _ in 0..N {
        w.write_all(b"PING\r\n").unwrap();
        assert_eq!(reply(&mut r), "+PONG\r\n");
    }
    // Closing ends the last transaction at both ends.
    drop((w, r));
    let t0 = Instant::now();
    let mut text = scrape();
    while count(&text, "server") < N as f64 || count(&text, "client") < N as f64 {
        assert!(t0.elapsed() < Duration::from_secs(20), "{text}");
        std::thread::sleep(Duration::from_millis(100));
        text = scrape();
    }
    assert_eq!(calls(port, "ping"), N, "redis's own count");
    assert_eq!(
        (count(&text, "server"), count(&text, "client")),
        (N as f64, N as f64)
    );
    for (side, parts) in [
        ("server", ["arrival", "wait", "think", "write"].as_slice()),
        (
            "client",
            ["write", "send", "server", "arrival", "wait"].as_slice(),
        ),
    ] {
        let response = value(
            &text,
            &format!("rttlab_service_response_seconds_sum{{side=\"{side}\",port=\"{p}\"}}"),
        );
        let parts: f64 = parts
            .iter()
            .map(|part| {
                value(
                    &text,
                    &format!(
                        "rttlab_service_part_seconds_sum{{side=\"{side}\",port=\"{p}\",part=\"{part}\"}}"
                    ),
                )
            })
            .sum();
        assert!(response > 0.0, "{side}: {text}");
        assert!(
            (parts - response).abs() < 1e-6,
            "{side}: parts {parts} s, response {response} s"
        );
    }
    crate::agent::promtool_check(&text);
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(i32::try_from(agent.0.id()).unwrap(), libc::SIGTERM) };
    let mut err = String::new();
    agent
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(agent.0.wait().unwrap().success(), "{err}");
}

/// A tmpfs mounted for a test, unmounted on drop.
struct Tmpfs(std::path::PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// `--out` on a disk that fills: the directory stops being written, said once, and
/// the run goes on to its end, every transaction printed and summed. Witnesses: the
/// kernel's ENOSPC on a 64 KiB tmpfs, and redis's own count of the PINGs.
#[test]
fn a_full_disk_under_out_stops_the_directory_not_the_run() {
    if !privileged("a_full_disk_under_out") || !have_redis("a_full_disk_under_out") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let small = tmp.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&small)
        .status()
        .unwrap();
    assert!(mounted.success());
    let _mount = Tmpfs(small.clone());
    let port = free_port();
    let _redis = Redis::start(port).unwrap();
    let dir = small.join("run");
    let watch = Watch::start_with(port, &["--out", dir.to_str().unwrap()]);
    // 2 000 transactions: about 1 MB of JSON lines, far past 64 KiB.
    const N: usize = 2_000;
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    for _ in 0..N {
        w.write_all(b"PING\r\n").unwrap();
        assert_eq!(reply(&mut r), "+PONG\r\n");
    }
    drop((w, r));
    std::thread::sleep(Duration::from_millis(300));
    let (txns, rest) = watch.stop();
    assert_eq!(calls(port, "ping"), N as u64, "redis's own count");
    assert_eq!(txns.len(), N, "{rest}");
    assert!(rest.contains(&format!("{N} transaction(s)")), "{rest}");
    let said: Vec<&str> = rest
        .lines()
        .filter(|l| l.contains("No space left on device"))
        .collect();
    assert_eq!(said.len(), 1, "said once: {rest}");
    assert!(
        said[0].contains("the run's tables are printed all the same"),
        "{rest}"
    );
    assert!(!rest.contains("report: "), "{rest}");
}

/// A process selected by `--pid` that exits mid-run is said to, once, and the run
/// goes on. Witness: the kernel (the process killed, its /proc entry gone).
#[test]
fn a_selected_process_that_exits_is_said_to() {
    if !privileged("a_selected_process_that_exits") {
        return;
    }
    let port = free_port();
    let mut listener = Command::new("python3")
        .args([
            "-c",
            &format!("import socket,time\ns=socket.socket()\ns.bind(('127.0.0.1',{port}))\ns.listen()\ntime.sleep(60)"),
        ])
        .spawn()
        .unwrap();
    common::wait_listening("127.0.0.1", port, None);
    let pid = listener.id().to_string();
    let (watch, first) = Watch::selecting(&["--pid", &pid, "-i", "0.2"]);
    assert!(first.contains(&format!("PID {pid}: {port}")), "{first}");
    listener.kill().unwrap();
    listener.wait().unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let (_, rest) = watch.stop();
    let said = rest
        .lines()
        .filter(|l| l.contains(&format!("PID {pid} exited")))
        .count();
    assert_eq!(said, 1, "{rest}");
}
