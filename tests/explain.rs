//! `rttlab explain` on a real service nobody here wrote: Debian's redis-server.
//!
//! Witnesses: redis's own count of the commands it ran (`INFO commandstats`), the
//! bytes the test sent and redis answered (RESP), the delay redis makes on purpose
//! (`DEBUG SLEEP`), and arithmetic (the parts of every transaction sum to its response
//! time).

use crate::common::{bin, free_port, privileged};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A redis-server on `port` of loopback, nothing saved, killed when dropped.
struct Redis(Child);

impl Redis {
    fn start(port: u16) -> Option<Self> {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
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
        let redis = Self(child);
        // A retry only for "not listening yet".
        for _ in 0..100 {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(redis);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("redis-server on port {port} did not listen within 5 s");
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// True when redis-server is installed; CI installs it, so there its absence fails.
fn have_redis(test: &str) -> bool {
    if Command::new("redis-server")
        .arg("--version")
        .output()
        .is_ok()
    {
        return true;
    }
    let required = std::env::var("RTTLAB_REQUIRE_PRIVILEGED_TESTS").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "{test}: redis-server is not installed (apt-get install redis-server)"
    );
    eprintln!("skipping {test}: redis-server is not installed");
    false
}

/// One RESP reply line from `r`.
fn reply(r: &mut impl BufRead) -> String {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    line
}

/// `INFO commandstats`' calls of `command`, as redis counts them.
fn calls(port: u16, command: &str) -> u64 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"INFO commandstats\r\n").unwrap();
    let mut r = BufReader::new(s);
    let len: usize = reply(&mut r)[1..].trim().parse().unwrap();
    let mut body = vec![0; len + 2];
    r.read_exact(&mut body).unwrap();
    let body = String::from_utf8(body).unwrap();
    let key = format!("cmdstat_{command}:calls=");
    body.lines()
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
    let mut explain = Command::new(bin())
        .args(["explain", "--port", &port.to_string(), "--json", "-l", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(explain.stderr.take().unwrap());
    let first = reply(&mut err);
    assert!(first.contains("watching TCP port"), "{first}");

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
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(i32::try_from(explain.id()).unwrap(), libc::SIGINT) };
    let mut out = String::new();
    explain
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert!(explain.wait().unwrap().success(), "{rest}");

    let txns: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ran = calls(port, "ping") + calls(port, "debug");
    assert_eq!(ran, 200, "redis's own count");
    assert_eq!(txns.len(), 200, "{rest}");
    for (i, t) in txns.iter().enumerate() {
        let f = |k: &str| t[k].as_f64().unwrap_or_else(|| panic!("{k} in {t}"));
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
}
