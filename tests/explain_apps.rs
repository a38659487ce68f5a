//! `rttlab explain` on services nobody here wrote, loaded the way their users load
//! them: nginx under wrk and in front of a slow upstream, memcached's text protocol
//! (pipelined gets and a 1 MiB value), PostgreSQL under pgbench.
//!
//! Witnesses: each load generator's own report (wrk's count and percentiles, pgbench's
//! log of every transaction's latency and script), the applications' own counters
//! (memcached's `stats`: commands, bytes read and written), the delays the test makes
//! on purpose (a slow upstream, `pg_sleep`), causality (the server cannot begin its
//! answer before its request came or after the client had it), and arithmetic.

use crate::common::service::{installed, num, reply, Service, Watch};
use crate::common::{self, free_port, privileged};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// An nginx on `port` of loopback serving one 100-byte file from `dir`, one worker;
/// with `upstream`, `/slow` is passed to that port of loopback.
fn start_nginx(port: u16, dir: &Path, upstream: Option<u16>) -> Service {
    Nginx {
        ports: &[port],
        upstream,
        cgroup: None,
    }
    .start(dir)
}

/// How an nginx is started: the ports of loopback it listens on, the upstream of
/// `/slow`, the cgroup it is started in.
struct Nginx<'a> {
    ports: &'a [u16],
    upstream: Option<u16>,
    cgroup: Option<&'a Path>,
}

impl Nginx<'_> {
    /// Serving one 100-byte file from `dir`, one worker.
    fn start(&self, dir: &Path) -> Service {
        std::fs::write(dir.join("index.html"), "x".repeat(100)).unwrap();
        let slow = self.upstream.map_or(String::new(), |u| {
            format!("location /slow {{ proxy_pass http://127.0.0.1:{u}; }}")
        });
        let listen: String = self
            .ports
            .iter()
            .map(|p| format!("listen 127.0.0.1:{p}; "))
            .collect();
        let conf = dir.join("nginx.conf");
        std::fs::write(
            &conf,
            format!(
                "daemon off; worker_processes 1; pid {d}/nginx.pid; error_log {d}/error.log;\n\
                 events {{ worker_connections 64; }}\n\
                 http {{ access_log off; keepalive_requests 1000000;\n\
                 client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d};\n\
                 uwsgi_temp_path {d}; scgi_temp_path {d};\n\
                 server {{ {listen}root {d}; {slow} }} }}\n",
                d = dir.display()
            ),
        )
        .unwrap();
        let mut cmd = Command::new("nginx");
        cmd.args(["-c", conf.to_str().unwrap(), "-p", dir.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(cg) = self.cgroup {
            born_in(&mut cmd, cg);
        }
        Service::listening(cmd.spawn().unwrap(), self.ports[0], "nginx")
    }
}

/// True when nginx and wrk are installed; CI installs them.
fn have_nginx_and_wrk(test: &str) -> bool {
    installed(test, "wrk", "wrk") && {
        // nginx says its version with -v only.
        let have = Command::new("nginx").arg("-v").output().is_ok();
        let required = std::env::var("RTTLAB_REQUIRE_PRIVILEGED_TESTS").is_ok_and(|v| v == "1");
        assert!(have || !required, "{test}: nginx is not installed");
        have
    }
}

/// wrk's latency percentile `p` ("50%", "99%") in µs, from its `--latency` report.
fn wrk_percentile_us(report: &str, p: &str) -> f64 {
    let line = report
        .lines()
        .find(|l| l.trim_start().starts_with(p))
        .unwrap_or_else(|| panic!("no {p} in {report}"));
    let v = line.split_whitespace().nth(1).unwrap();
    let (n, unit) = v.split_at(v.find(|c: char| c.is_ascii_alphabetic()).unwrap());
    let n: f64 = n.parse().unwrap();
    match unit {
        "us" => n,
        "ms" => n * 1e3,
        "s" => n * 1e6,
        _ => panic!("unit {unit} in {line}"),
    }
}

/// wrk, one thread and one keep-alive connection for 2 s, against nginx: explain
/// counts every request wrk counts (HTTP/1.1 keep-alive, no parser: each request is a
/// turn of direction), each with nginx's 100-byte body and its headers in the response,
/// and its server-side response time is a part of what wrk measures: below wrk's own
/// P50 and P99. Witnesses: wrk's report (its request count, its latency percentiles).
#[test]
fn nginx_under_wrk_is_counted_request_for_request() {
    let test = "nginx_under_wrk";
    if !privileged(test) {
        return;
    }
    if !have_nginx_and_wrk(test) {
        return;
    }
    // wrk and nginx keep both CPUs busy for 2 s.
    let _g = common::serial::busy();
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let _nginx = start_nginx(port, dir.path(), None);
    let watch = Watch::start(port);
    let o = Command::new("wrk")
        .args(["-t1", "-c1", "-d2s", "--latency"])
        .arg(format!("http://127.0.0.1:{port}/index.html"))
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{report}");
    std::thread::sleep(Duration::from_millis(300));
    let (txns, rest) = watch.stop();
    let requests: usize = report
        .lines()
        .find_map(|l| l.trim().split_once(" requests in "))
        .map(|(n, _)| n.trim().parse().unwrap())
        .unwrap_or_else(|| panic!("no request count in {report}"));
    let mut response: Vec<f64> = txns.iter().map(|t| num(t, "response_us")).collect();
    response.sort_by(f64::total_cmp);
    let at = |q: f64| response[((q * (response.len() - 1) as f64).round()) as usize];
    let figures = format!(
        "explain: {} transactions, response P50 {:.1} P99 {:.1} µs; wrk: {requests} requests, P50 {} P99 {} µs\n{rest}",
        txns.len(),
        at(0.5),
        at(0.99),
        wrk_percentile_us(&report, "50%"),
        wrk_percentile_us(&report, "99%")
    );
    eprintln!("{figures}");
    // wrk counts the requests answered; the one in flight when it stopped is answered
    // and counted by the server but not by wrk.
    assert!(
        (requests..=requests + 1).contains(&txns.len()) && requests > 1000,
        "{figures}"
    );
    assert!(
        txns.iter().all(|t| num(t, "response_bytes") > 100.0),
        "{figures}"
    );
    assert!(at(0.5) < wrk_percentile_us(&report, "50%"), "{figures}");
    assert!(at(0.99) < wrk_percentile_us(&report, "99%"), "{figures}");
}

/// An upstream that answers each of `n` connections after sleeping `delay`, then
/// closes it (nginx speaks HTTP/1.0 to its upstreams, a connection a request).
fn slow_upstream(n: usize, delay: Duration) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().take(n) {
            let mut s = s.unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            while reply(&mut r).trim_end() != "" {}
            std::thread::sleep(delay);
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nslow")
                .unwrap();
        }
    });
    port
}

/// One HTTP/1.1 response's body from `r` (its headers read, `Content-Length` bytes).
fn http_body(r: &mut impl BufRead) -> Vec<u8> {
    let status = reply(r);
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let mut len = 0;
    loop {
        let line = reply(r);
        if line.trim_end().is_empty() {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).unwrap();
    body
}

/// nginx in front of an upstream that takes 30 ms: 60 requests on one keep-alive
/// connection, every tenth passed to the upstream. nginx's time waiting on its
/// upstream is its own work as the client sees it: explain puts at least 30 ms of
/// think on exactly those six transactions and under 15 ms on every other (a margin
/// a preempted vCPU cannot cross). Witness: the upstream's sleep, made on purpose.
#[test]
fn a_slow_upstream_behind_nginx_shows_as_nginxs_work_on_those_requests() {
    let test = "a_slow_upstream_behind_nginx";
    if !privileged(test) || !have_nginx_and_wrk(test) {
        return;
    }
    let slow: Vec<usize> = (0..60).filter(|i| i % 10 == 5).collect();
    let upstream = slow_upstream(slow.len(), Duration::from_millis(30));
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let _nginx = start_nginx(port, dir.path(), Some(upstream));
    let watch = Watch::start(port);
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    for i in 0..60 {
        let path = if slow.contains(&i) {
            "/slow"
        } else {
            "/index.html"
        };
        w.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
            .unwrap();
        let body = http_body(&mut r);
        assert_eq!(body.len(), if slow.contains(&i) { 4 } else { 100 });
    }
    drop((w, r));
    std::thread::sleep(Duration::from_millis(300));
    let (txns, rest) = watch.stop();
    assert_eq!(txns.len(), 60, "{rest}");
    for (i, t) in txns.iter().enumerate() {
        let think = num(t, "think_us");
        if slow.contains(&i) {
            assert!(think >= 30_000.0, "transaction {i}: {t}");
        } else {
            assert!(think < 15_000.0, "transaction {i}: {t}");
        }
    }
    assert!(rest.contains("the application's work"), "{rest}");
}

/// A memcached on `port` of loopback: one worker thread, items up to 2 MiB.
fn start_memcached(port: u16) -> Service {
    let child = Command::new("memcached")
        .args(["-l", "127.0.0.1", "-p", &port.to_string(), "-U", "0"])
        .args(["-t", "1", "-I", "2m", "-u", "nobody"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    Service::listening(child, port, "memcached")
}

/// memcached's `stats` on a connection of its own: each counter by name, and the
/// length of the answer (memcached counts its own answer's bytes after it is sent).
fn memcached_stats(port: u16) -> (std::collections::HashMap<String, u64>, usize) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"stats\r\n").unwrap();
    let mut r = BufReader::new(s);
    let (mut stats, mut len) = (std::collections::HashMap::new(), 0);
    loop {
        let line = reply(&mut r);
        len += line.len();
        if line == "END\r\n" {
            return (stats, len);
        }
        let mut f = line.split_whitespace().skip(1);
        let (k, v) = (f.next().unwrap(), f.next().unwrap());
        if let Ok(v) = v.parse() {
            stats.insert(k.to_owned(), v);
        }
    }
}

/// memcached's text protocol on one connection: a 1 MiB value set, 50 small sets and
/// 50 gets one at a time, 10 batches of 5 gets pipelined in one write, and the 1 MiB
/// value read back. explain counts one transaction a turn of direction (a batch is
/// one: no parser splits it), and every byte: what it saw requested and answered is
/// what memcached says it read and wrote between two `stats` (each `stats`
/// connection is watched too: the first's request came before memcached's first
/// count, the second's answer after its second). Witnesses: memcached's own counters
/// (`cmd_get`, `cmd_set`, `bytes_read`, `bytes_written`), the protocol's lengths.
#[test]
fn memcached_is_counted_byte_for_byte_by_its_own_stats() {
    let test = "memcached_is_counted";
    if !privileged(test) || !installed(test, "memcached", "memcached") {
        return;
    }
    const BIG: usize = 1 << 20;
    let port = free_port();
    let _memcached = start_memcached(port);
    let watch = Watch::start(port);
    let (before, first_answer) = memcached_stats(port);
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    // Each command in one write, sent at once: a command split over writes would wait
    // for the ACK of its first part (Nagle's algorithm and memcached's delayed ACK).
    s.set_nodelay(true).unwrap();
    let client_port = s.local_addr().unwrap().port();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    let mut big = format!("set big 0 0 {BIG}\r\n").into_bytes();
    big.extend_from_slice(&[b'v'; BIG]);
    big.extend_from_slice(b"\r\n");
    w.write_all(&big).unwrap();
    assert_eq!(reply(&mut r), "STORED\r\n");
    for i in 0..50 {
        w.write_all(format!("set k{i} 0 0 10\r\n0123456789\r\n").as_bytes())
            .unwrap();
        assert_eq!(reply(&mut r), "STORED\r\n");
    }
    for i in 0..50 {
        w.write_all(format!("get k{i}\r\n").as_bytes()).unwrap();
        assert_eq!(reply(&mut r), format!("VALUE k{i} 0 10\r\n"));
        assert_eq!(reply(&mut r), "0123456789\r\n");
        assert_eq!(reply(&mut r), "END\r\n");
    }
    for b in 0..10 {
        let batch: String = (0..5).map(|j| format!("get k{}\r\n", b * 5 + j)).collect();
        w.write_all(batch.as_bytes()).unwrap();
        for _ in 0..5 {
            assert!(reply(&mut r).starts_with("VALUE"));
            reply(&mut r);
            assert_eq!(reply(&mut r), "END\r\n");
        }
    }
    w.write_all(b"get big\r\n").unwrap();
    let header = reply(&mut r);
    assert_eq!(header, format!("VALUE big 0 {BIG}\r\n"));
    let mut value = vec![0; BIG + 2];
    r.read_exact(&mut value).unwrap();
    assert_eq!(reply(&mut r), "END\r\n");
    drop((w, r));
    std::thread::sleep(Duration::from_millis(300));
    let (after, _) = memcached_stats(port);
    std::thread::sleep(Duration::from_millis(300));
    let (txns, rest) = watch.stop();
    let counted = |k: &str| after[k] - before[k];
    assert_eq!((counted("cmd_set"), counted("cmd_get")), (51, 101));
    let client = |t: &serde_json::Value| {
        let a: std::net::SocketAddr = t["client"].as_str().unwrap().parse().unwrap();
        a.port()
    };
    let ours: Vec<&serde_json::Value> = txns.iter().filter(|t| client(t) == client_port).collect();
    assert_eq!(ours.len(), 1 + 50 + 50 + 10 + 1, "{rest}");
    assert_eq!(
        ours[0]["request_bytes"],
        format!("set big 0 0 {BIG}\r\n").len() + BIG + 2
    );
    let last = ours.last().unwrap();
    assert_eq!(last["response_bytes"], header.len() + BIG + 2 + 5, "{last}");
    // The two stats connections' transactions around ours, in the order they ended.
    assert_eq!(txns.len(), ours.len() + 2, "{rest}");
    let bytes = |k: &str, skip: usize| -> u64 {
        txns.iter()
            .enumerate()
            .filter(|&(i, _)| i != skip)
            .map(|(_, t)| t[k].as_u64().unwrap())
            .sum()
    };
    assert_eq!(bytes("request_bytes", 0), counted("bytes_read"), "{rest}");
    assert_eq!(
        bytes("response_bytes", txns.len() - 1),
        counted("bytes_written"),
        "{rest}"
    );
    assert_eq!(txns[0]["response_bytes"], first_answer);
}

/// PostgreSQL's newest server programs Debian installed (`/usr/lib/postgresql/N/bin`).
fn postgres_bin(test: &str) -> Option<PathBuf> {
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .max();
    let required = std::env::var("RTTLAB_REQUIRE_PRIVILEGED_TESTS").is_ok_and(|v| v == "1");
    assert!(
        newest.is_some() || !required,
        "{test}: PostgreSQL is not installed (apt-get install postgresql)"
    );
    if newest.is_none() {
        eprintln!("skipping {test}: PostgreSQL is not installed");
    }
    Some(PathBuf::from(format!(
        "/usr/lib/postgresql/{}/bin",
        newest?
    )))
}

/// A PostgreSQL server on `port` of loopback, its cluster made afresh in `dir` and
/// run as the `postgres` user (it refuses root), nothing synced to disk.
fn start_postgres(bin: &Path, dir: &Path, port: u16) -> Service {
    let id = |flag: &str| -> u32 {
        let o = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .unwrap();
        String::from_utf8(o.stdout).unwrap().trim().parse().unwrap()
    };
    let (uid, gid) = (id("-u"), id("-g"));
    std::os::unix::fs::chown(dir, Some(uid), Some(gid)).unwrap();
    let data = dir.join("data");
    let o = Command::new(bin.join("initdb"))
        .arg("-D")
        .arg(&data)
        .args([
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
            "--locale=C",
            "-E",
            "UTF8",
        ])
        .uid(uid)
        .gid(gid)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let child = Command::new(bin.join("postgres"))
        .arg("-D")
        .arg(&data)
        .args(["-p", &port.to_string(), "-k"])
        .arg(dir)
        .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
        .uid(uid)
        .gid(gid)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Service::listening(child, port, "postgres")
}

/// pgbench, one client, 300 transactions of two scripts drawn at random: `SELECT 1`
/// (weight 95) and `SELECT pg_sleep(0.02)` (weight 5), each transaction logged with
/// its latency and script. pgbench opens two connections (one checks the server, one
/// runs the benchmark) and ends each with a Terminate message nothing answers.
/// explain times the benchmark connection's startup and then exactly pgbench's 300
/// transactions, in its log's order: each sleeping one with at least 20 ms of
/// PostgreSQL's own work, every other with under 10 ms. The start of the server's
/// answer (arrival, wait and think: it cannot write before its request came, nor
/// after pgbench had the answer) is below pgbench's latency on each sleeping
/// transaction, and summed over all 300 below pgbench's elapsed time (300 over its
/// tps). Not compared on the fast ones one by one: pgbench reads its clock lazily,
/// and its log holds many of them at 0 µs. Witnesses: pgbench's per-transaction log
/// and its rate, the sleep asked on purpose, causality.
#[test]
fn postgres_under_pgbench_is_timed_transaction_for_transaction() {
    let test = "postgres_under_pgbench";
    if !privileged(test) {
        return;
    }
    let Some(bin) = postgres_bin(test) else {
        return;
    };
    // pgbench and PostgreSQL keep both CPUs busy while it runs.
    let _g = common::serial::busy();
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let _postgres = start_postgres(&bin, dir.path(), port);
    std::fs::write(dir.path().join("fast.sql"), "SELECT 1;\n").unwrap();
    std::fs::write(dir.path().join("slow.sql"), "SELECT pg_sleep(0.02);\n").unwrap();
    let watch = Watch::start(port);
    let log = dir.path().join("pgbench_log");
    let o = Command::new(bin.join("pgbench"))
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres"])
        .args(["-n", "-c", "1", "-t", "300", "--random-seed", "7"])
        .arg("-f")
        .arg(format!("{}@95", dir.path().join("fast.sql").display()))
        .arg("-f")
        .arg(format!("{}@5", dir.path().join("slow.sql").display()))
        .arg("-l")
        .arg(format!("--log-prefix={}", log.display()))
        .arg("postgres")
        // No TLS or GSSAPI request before the startup: each would be a turn of its own.
        .env("PGSSLMODE", "disable")
        .env("PGGSSENCMODE", "disable")
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    std::thread::sleep(Duration::from_millis(300));
    let (txns, rest) = watch.stop();
    // pgbench's log: client, transaction, latency µs, script, epoch s, µs.
    let logged: Vec<(f64, u32)> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("pgbench_log.")
        })
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[2].parse().unwrap(), f[3].parse().unwrap())
        })
        .collect();
    assert_eq!(logged.len(), 300, "{report}");
    assert!(
        logged.iter().any(|&(_, s)| s == 1),
        "no sleeping transaction drawn"
    );
    let mut by_connection: std::collections::BTreeMap<u64, Vec<&serde_json::Value>> =
        Default::default();
    for t in &txns {
        by_connection
            .entry(t["connection"].as_u64().unwrap())
            .or_default()
            .push(t);
    }
    // A connection's id is its socket's cookie, numbered as the kernel first asks
    // for it, not as connections open: the benchmark's is the one of 301.
    let mut sizes: Vec<usize> = by_connection.values().map(Vec::len).collect();
    sizes.sort_unstable();
    assert_eq!(sizes, [1, 301], "{rest}");
    assert!(
        rest.contains("2 request(s) whose connection ended before an answer"),
        "{rest}"
    );
    let bench = by_connection.values().find(|c| c.len() == 301).unwrap();
    let answering =
        |t: &serde_json::Value| num(t, "arrival_us") + num(t, "wait_us") + num(t, "think_us");
    for (i, (t, &(latency, script))) in bench[1..].iter().zip(&logged).enumerate() {
        let think = num(t, "think_us");
        if script == 1 {
            assert!(
                think >= 20_000.0 && latency >= 20_000.0,
                "transaction {i}: {t}"
            );
            assert!(
                answering(t) < latency,
                "transaction {i} ({latency} µs): {t}"
            );
        } else {
            assert!(think < 10_000.0, "transaction {i}: {t}");
        }
    }
    let tps: f64 = report
        .lines()
        .find_map(|l| l.strip_prefix("tps = "))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no tps in {report}"));
    let elapsed_us = 300.0 / tps * 1e6;
    let answered_us: f64 = bench[1..].iter().map(|t| answering(t)).sum();
    assert!(
        answered_us < elapsed_us,
        "explain {answered_us} µs in all, pgbench {elapsed_us} µs\n{report}"
    );
}

/// `cmd`'s process started in cgroup `cg`, and with it every process it starts.
fn born_in(cmd: &mut Command, cg: &Path) {
    let procs = std::ffi::CString::new(cg.join("cgroup.procs").to_str().unwrap()).unwrap();
    // SAFETY: between fork and exec only async-signal-safe calls: open, write and
    // close of a path made before the fork. Writing 0 moves the writer.
    unsafe {
        cmd.pre_exec(move || {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
            if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                return Err(std::io::Error::last_os_error());
            }
            libc::close(fd);
            Ok(())
        });
    }
}

/// A cgroup made for one test under the cgroup2 mount, removed when dropped (after
/// the processes in it ended).
struct Cgroup(PathBuf);

impl Cgroup {
    fn new(name: &str) -> Self {
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let mount = info
            .lines()
            .find_map(|l| {
                let (before, after) = l.split_once(" - ")?;
                let at = before.split_whitespace().nth(4)?;
                after.starts_with("cgroup2 ").then(|| PathBuf::from(at))
            })
            .expect("a cgroup2 mount");
        let dir = mount.join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for e in std::fs::read_dir(&self.0).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = std::fs::remove_dir(e.path());
            }
        }
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The ports `ss -ltnp` says a process named `name` listens on among `ports`: the
/// kernel's own account of the sockets each process holds.
fn ss_listening(name: &str, ports: &[u16]) -> Vec<u16> {
    let o = Command::new("ss").args(["-ltnpH"]).output().unwrap();
    let text = String::from_utf8(o.stdout).unwrap();
    let mut found: Vec<u16> = text
        .lines()
        .filter(|l| l.contains(&format!("((\"{name}\"")))
        .filter_map(|l| {
            l.split_whitespace()
                .nth(3)?
                .rsplit(':')
                .next()?
                .parse()
                .ok()
        })
        .filter(|p| ports.contains(p))
        .collect();
    found.sort_unstable();
    found.dedup();
    found
}

/// nginx started in a cgroup of its own, listening on two ports, beside a listener
/// of the test's own on a third: `--cgroup` and `--pid` (nginx's master) each find
/// nginx's two ports and only them, two explains run at once, and each counts the
/// requests made on each port, 20 and 30, and none of the 10 made to the third.
/// Witnesses: `ss -ltnp` (the ports the kernel says nginx holds), the requests the
/// test made on each port.
#[test]
fn a_cgroup_or_a_process_is_watched_on_every_port_it_listens_on() {
    let test = "a_cgroup_or_a_process";
    if !privileged(test) || !have_nginx_and_wrk(test) {
        return;
    }
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let third = other.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let (s, _) = other.accept().unwrap();
        let mut w = s.try_clone().unwrap();
        for line in BufReader::new(s).lines() {
            if line.is_err() || w.write_all(b"ok\n").is_err() {
                break;
            }
        }
    });
    let mut ports = [free_port(), free_port()];
    ports.sort_unstable();
    let cgroup = Cgroup::new("rttlab-explain-test");
    let dir = tempfile::tempdir().unwrap();
    let nginx = Nginx {
        ports: &ports,
        upstream: None,
        cgroup: Some(&cgroup.0),
    }
    .start(dir.path());
    assert_eq!(ss_listening("nginx", &[ports[0], ports[1], third]), ports);
    let (by_cgroup, first) = Watch::selecting(&["--cgroup", cgroup.0.to_str().unwrap()]);
    let master = nginx.0.id().to_string();
    let (by_pid, first_pid) = Watch::selecting(&["--pid", &master]);
    let named = format!(": {}, {} (", ports[0], ports[1]);
    assert!(
        first.contains(&named) && first.contains("cgroup \""),
        "{first}"
    );
    assert!(
        first_pid.contains(&format!("PID {master}{named}")),
        "{first_pid}"
    );
    for (port, n) in [(ports[0], 20), (ports[1], 30)] {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        for _ in 0..n {
            w.write_all(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
                .unwrap();
            assert_eq!(http_body(&mut r).len(), 100);
        }
    }
    let s = TcpStream::connect(("127.0.0.1", third)).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    for _ in 0..10 {
        w.write_all(b"ping\n").unwrap();
        assert_eq!(reply(&mut r), "ok\n");
    }
    drop((w, r));
    std::thread::sleep(Duration::from_millis(300));
    for watch in [by_cgroup, by_pid] {
        let (txns, rest) = watch.stop();
        let on = |p: u16| txns.iter().filter(|t| t["port"] == p).count();
        assert_eq!(
            (on(ports[0]), on(ports[1]), on(third)),
            (20, 30, 0),
            "{rest}"
        );
        assert_eq!(txns.len(), 50, "{rest}");
        assert!(
            rest.contains(&format!("port {}: 20 transaction(s)", ports[0])),
            "{rest}"
        );
        assert!(
            rest.contains(&format!("port {}: 30 transaction(s)", ports[1])),
            "{rest}"
        );
    }
    drop(nginx);
}

/// A dual-stack server (one socket on `[::]`, as Linux makes it by default) answered
/// from an IPv4 and an IPv6 client: each transaction names its client as the kernel
/// gave the client its address, the IPv4 one as IPv4 (not `::ffff:127.0.0.1`), as ss
/// shows it. Witness: the clients' own sockets' addresses.
#[test]
fn ipv4_and_ipv6_clients_are_named_by_their_own_addresses() {
    let test = "ipv4_and_ipv6_clients";
    if !privileged(test) {
        return;
    }
    let server = TcpListener::bind("[::]:0").unwrap();
    let port = server.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in server.incoming().take(2) {
            let s = s.unwrap();
            let mut w = s.try_clone().unwrap();
            let mut r = BufReader::new(s);
            while reply(&mut r) == "ping\n" && w.write_all(b"ok\n").is_ok() {}
        }
    });
    let watch = Watch::start(port);
    let mut clients = Vec::new();
    for host in ["127.0.0.1", "::1"] {
        let s = TcpStream::connect((host, port)).unwrap();
        clients.push(s.local_addr().unwrap().to_string());
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        w.write_all(b"ping\n").unwrap();
        assert_eq!(reply(&mut r), "ok\n");
    }
    std::thread::sleep(Duration::from_millis(300));
    let (txns, rest) = watch.stop();
    let named: Vec<&str> = txns.iter().map(|t| t["client"].as_str().unwrap()).collect();
    assert_eq!(named, clients, "{rest}");
}

/// `rttlab explain ARGS -l 0.2`: its status and stderr.
fn explain_briefly(args: &[&str]) -> (i32, String) {
    let o = Command::new(common::bin())
        .arg("explain")
        .args(args)
        .args(["-l", "0.2"])
        .output()
        .unwrap();
    (
        o.status.code().unwrap(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// What `--pid` and `--cgroup` find and refuse: a process listening in a network
/// namespace of its own (a container's) is found there; a PID typed wrong among good
/// ones, a path with no cgroup, a directory that is not one (even with a planted
/// `cgroup.procs`), and a process listening on nothing are each refused with status 2
/// and one line naming the flag; a threaded cgroup's threads are read. Witnesses: the
/// listener's own port (it printed it), the kernel's refusals.
#[test]
fn selections_are_found_in_containers_and_bad_ones_named() {
    let test = "selections_are_found";
    if !privileged(test) {
        return;
    }
    // A listener in a network namespace of its own, as in a container.
    let mut contained = Command::new("unshare")
        .args(["-n", "python3", "-c"])
        .arg(
            "import socket, sys, time\n\
             s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n\
             print(s.getsockname()[1], flush=True); time.sleep(30)\n",
        )
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let port = reply(&mut BufReader::new(contained.stdout.take().unwrap()));
    let pid = contained.id().to_string();
    let (status, err) = explain_briefly(&["--pid", &pid]);
    let _ = contained.kill();
    let _ = contained.wait();
    assert_eq!(status, 0, "{err}");
    assert!(
        err.contains(&format!("PID {pid}: {}", port.trim())),
        "{err}"
    );

    // A process listening on nothing (not this one: other tests listen in it).
    let mut idle = Command::new("sleep").arg("30").spawn().unwrap();
    let me = idle.id().to_string();
    let me_and_a_typo = format!("{me},4194305");
    let refusals = [
        (
            vec!["--pid", "4194305"],
            "rttlab: --pid: no process 4194305 (is the PID right?)",
        ),
        (
            vec!["--pid", &me_and_a_typo],
            "rttlab: --pid: no process 4194305",
        ),
        (
            vec!["--pid", &me],
            ": no TCP port listened on, nothing of it to watch",
        ),
        (
            vec!["--cgroup", "rttlab-no-such-cgroup"],
            "rttlab: --cgroup: no cgroup at \"",
        ),
    ]
    .map(|(args, says)| (explain_briefly(&args), args, says));
    let _ = idle.kill();
    let _ = idle.wait();
    for ((status, err), args, says) in refusals {
        assert_eq!(status, 2, "{args:?}: {err}");
        assert!(
            err.contains(says) && err.lines().count() == 1,
            "{args:?}: {err}"
        );
    }
    let fake = tempfile::tempdir().unwrap();
    std::fs::write(fake.path().join("cgroup.procs"), format!("{pid}\n")).unwrap();
    let (status, err) = explain_briefly(&["--cgroup", fake.path().to_str().unwrap()]);
    assert_eq!(status, 2, "{err}");
    assert!(err.contains("is not a cgroup"), "{err}");

    // A threaded cgroup below a domain one: its cgroup.procs is refused (EOPNOTSUPP),
    // its threads are read. redis is started in the domain one, and its main thread
    // moved into the threaded one.
    if !installed(test, "redis-server", "redis-server") {
        return;
    }
    let parent = Cgroup::new("rttlab-explain-threaded");
    let threaded = parent.0.join("t");
    std::fs::create_dir(&threaded).unwrap();
    std::fs::write(threaded.join("cgroup.type"), "threaded").unwrap();
    let redis_port = free_port();
    let mut cmd = Command::new("redis-server");
    cmd.args([
        "--port",
        &redis_port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
    ])
    .stdout(Stdio::null());
    born_in(&mut cmd, &parent.0);
    let redis = Service::listening(cmd.spawn().unwrap(), redis_port, "redis-server");
    let main = redis.0.id();
    // redis's main thread into the threaded cgroup (its threads may move there).
    std::fs::write(threaded.join("cgroup.threads"), main.to_string()).unwrap();
    let (status, err) = explain_briefly(&["--cgroup", threaded.to_str().unwrap()]);
    assert_eq!(status, 0, "{err}");
    assert!(err.contains(&format!(": {redis_port} (")), "{err}");
    drop(redis);
}
