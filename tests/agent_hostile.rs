//! `rttlab agent` against clients that attack it, on loopback. Each attack runs
//! next to the agent's ordinary work, which must go on: a peer (`rttlab serve`) is
//! probed throughout, and a legitimate scrape must keep being answered.
//!
//! Witnesses: curl (an independent HTTP and TLS client) for every scrape judged; the
//! agent process's liveness, RSS, thread and descriptor counts from /proc; the
//! agent's own counters (which must never go back) read before and after; a
//! `rttlab rr` run against the agent's probe server.

mod common;

use common::{bin, free_port, tls_files, wait_listening, ServeChild};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// An agent on loopback probing one `rttlab serve` peer, killed on drop.
struct Agent {
    child: Child,
    metrics: u16,
    probe_port: u16,
    _peer: ServeChild,
}

impl Agent {
    fn start(extra: &[&str]) -> Self {
        let peer = ServeChild::start(&[]);
        let metrics = free_port();
        let probe_port = free_port();
        let child = Command::new(bin())
            .args(["agent", "--probes", "tcp_rr,udp_rr", "--interval", "100ms"])
            .arg("--peer")
            .arg(format!("127.0.0.1:{}", peer.port))
            .arg("-L")
            .arg(format!("127.0.0.1:{probe_port}"))
            .arg("--metrics-listen")
            .arg(format!("127.0.0.1:{metrics}"))
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_listening("127.0.0.1", metrics, None);
        wait_listening("127.0.0.1", probe_port, None);
        Self {
            child,
            metrics,
            probe_port,
            _peer: peer,
        }
    }

    fn url(&self, scheme: &str, path: &str) -> String {
        format!("{scheme}://127.0.0.1:{}{path}", self.metrics)
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// VmRSS in KiB, threads and open descriptors, from /proc.
    fn footprint(&self) -> (u64, u64, usize) {
        let pid = self.child.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap()
        };
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .count();
        (field("VmRSS:"), field("Threads:"), fds)
    }

    /// The agent's probe server still serves: a TCP_RR test against it completes.
    fn probe_server_serves(&self) -> bool {
        let o = Command::new(bin())
            .args(["rr", "-H", "127.0.0.1", "-p"])
            .arg(self.probe_port.to_string())
            .args(["-n", "20", "--json"])
            .output()
            .unwrap();
        o.status.success()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// curl's answer: (status code, seconds taken, body).
fn curl(args: &[&str]) -> (u16, f64, String) {
    let o: Output = Command::new("curl")
        .args(["-s", "-m", "5", "-w", "\n%{http_code} %{time_total}"])
        .args(args)
        .output()
        .expect("curl (apt-get install curl)");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let (body, tail) = text.rsplit_once('\n').unwrap_or(("", &text));
    let mut it = tail.split_whitespace();
    let code = it.next().and_then(|c| c.parse().ok()).unwrap_or(0);
    let secs = it.next().and_then(|c| c.parse().ok()).unwrap_or(f64::NAN);
    (code, secs, body.to_owned())
}

const SENT: &str = "rttlab_probes_sent_total{peer=\"127.0.0.1:";

/// The agent's probes sent so far to its peer over TCP_RR, by a scrape with curl
/// (waiting until there is one).
fn probes_sent(a: &Agent) -> f64 {
    let t0 = Instant::now();
    loop {
        let (code, _, body) = curl(&[&a.url("http", "/metrics")]);
        if code == 200 {
            if let Some(v) = body
                .lines()
                .filter(|l| l.starts_with(SENT) && l.contains("layer=\"tcp_rr\""))
                .find_map(|l| l.rsplit(' ').next()?.parse().ok())
                .filter(|&v: &f64| v > 0.0)
            {
                return v;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no tcp_rr probe counted"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn connect(port: u16) -> TcpStream {
    TcpStream::connect(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).unwrap()
}

/// A TCP connection to `port` from 127.0.0.`from`.
fn connect_from(from: u8, port: u16) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Protocol, SockAddr, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    s.bind(&SockAddr::from(SocketAddr::from((
        Ipv4Addr::new(127, 0, 0, from),
        0,
    ))))?;
    s.connect(&SockAddr::from(SocketAddr::from(([127, 0, 0, 1], port))))?;
    Ok(s.into())
}

/// Let this process hold the thousands of sockets of a flood.
fn raise_fd_limit() {
    // SAFETY: plain struct filled and read by the kernel.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur = r.rlim_max.min(16384);
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
    }
}

/// Witnesses: the agent's 413, its process still alive, its probe server serving a
/// `rttlab rr` run, and its probe counter (read by curl) not reset. Before, tiny_http
/// allocated the announced 99 999 999 999 bytes when it dropped the request and the
/// process aborted, taking the probe server and every counter with it.
#[test]
fn a_huge_content_length_is_refused_and_kills_nothing() {
    let mut a = Agent::start(&[]);
    let before = probes_sent(&a);
    for path in ["/metrics", "/", "/nope"] {
        let mut s = connect(a.metrics);
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n"
        )
        .unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut reply = String::new();
        let _ = s.read_to_string(&mut reply);
        assert!(reply.starts_with("HTTP/1.1 413 "), "{path}: {reply:?}");
    }
    // Chunked bodies are refused the same way.
    let mut s = connect(a.metrics);
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffff\r\n"
    )
    .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    assert!(reply.starts_with("HTTP/1.1 413 "), "{reply:?}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(a.alive(), "the agent died");
    assert!(a.probe_server_serves(), "the probe server stopped");
    let after = probes_sent(&a);
    assert!(after >= before, "counters reset: {before} → {after}");
}

/// Witnesses: the agent's 431 and its RSS from /proc. A 64 MiB and a 512 MiB header
/// (sent until the agent closes the connection) leave RSS within 16 MiB of where it
/// was; before, 512 MiB of header took it from 20 MB to 540 MB.
#[test]
fn huge_headers_are_cut_at_the_limit() {
    let mut a = Agent::start(&[]);
    probes_sent(&a);
    let (rss0, _, _) = a.footprint();
    for mib in [64usize, 512] {
        let mut s = connect(a.metrics);
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: ")
            .unwrap();
        let chunk = vec![b'a'; 1 << 20];
        let mut sent = 0;
        for _ in 0..mib {
            match s.write_all(&chunk) {
                Ok(()) => sent += 1,
                Err(_) => break,
            }
        }
        assert!(sent < mib, "the agent read all {mib} MiB of one header");
        let mut reply = Vec::new();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.read_to_end(&mut reply);
        let reply = String::from_utf8_lossy(&reply);
        // The kernel may reset the connection before the 431 is read, as the agent
        // closes with unread bytes in its buffer: either way nothing was kept.
        assert!(
            reply.is_empty() || reply.starts_with("HTTP/1.1 431 "),
            "{reply:?}"
        );
    }
    let (rss1, _, _) = a.footprint();
    assert!(
        rss1 < rss0 + 16 * 1024,
        "RSS grew from {rss0} KiB to {rss1} KiB"
    );
    assert!(a.alive());
    let (code, _, _) = curl(&[&a.url("http", "/metrics")]);
    assert_eq!(code, 200);
}

/// Witness: curl, scraping while the attacks hold their connections, within 1 s
/// each time. Two connections that pipeline 10 `GET /metrics` each and never read
/// (before: every scrape timed out, both workers stuck), then 3 000 connections with
/// unfinished heads from 200 source addresses (before: 3 013 threads and 6 016
/// descriptors); the agent's threads and descriptors stay bounded by its connection
/// cap, read from /proc.
#[test]
fn scrapes_are_answered_while_clients_misbehave() {
    raise_fd_limit();
    let a = Agent::start(&[]);
    probes_sent(&a);
    let (_, threads0, fds0) = a.footprint();
    let mut held = Vec::new();
    for _ in 0..2 {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.set_recv_buffer_size(4096).unwrap();
        s.connect(&SocketAddr::from((Ipv4Addr::LOCALHOST, a.metrics)).into())
            .unwrap();
        let mut s: TcpStream = s.into();
        for _ in 0..10 {
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
        }
        held.push(s);
    }
    for _ in 0..3 {
        let (code, secs, _) = curl(&[&a.url("http", "/metrics")]);
        assert_eq!(code, 200, "scrape beside the pipelining non-readers");
        assert!(secs < 1.0, "scrape took {secs} s beside the non-readers");
    }
    for i in 0..3000u32 {
        let from = 2 + (i % 200) as u8;
        if let Ok(mut s) = connect_from(from, a.metrics) {
            let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost");
            held.push(s);
        }
    }
    for _ in 0..3 {
        let (code, secs, _) = curl(&[&a.url("http", "/metrics")]);
        assert_eq!(code, 200, "scrape beside 3 000 unfinished heads");
        assert!(
            secs < 1.0,
            "scrape took {secs} s beside 3 000 unfinished heads"
        );
    }
    let (_, threads1, fds1) = a.footprint();
    assert!(
        threads1 <= threads0 + 4,
        "threads grew from {threads0} to {threads1}"
    );
    // The cap is 64 connections; the rest were closed as they came.
    assert!(
        fds1 <= fds0 + 64 + 8,
        "descriptors grew from {fds0} to {fds1}"
    );
    drop(held);
}

/// Witnesses: the attacker's socket and the agent's descriptors in /proc. The agent
/// closes a connection whose head is still unfinished after the header deadline
/// (10 s), however slowly it trickles (one byte a second): end-of-file or a reset on
/// the attacker's side within 10 s plus a margin a busy machine cannot break (8 s);
/// and connections that pipeline 2 000 requests and never read the answers are gone
/// from the agent after the write deadline (10 s) by then.
#[test]
fn trickled_heads_and_stalled_readers_are_cut_at_their_deadlines() {
    let a = Agent::start(&[]);
    probes_sent(&a);
    let (_, _, fds0) = a.footprint();
    let mut stalled = Vec::new();
    for _ in 0..4 {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.set_recv_buffer_size(4096).unwrap();
        s.connect(&SocketAddr::from((Ipv4Addr::LOCALHOST, a.metrics)).into())
            .unwrap();
        let mut s: TcpStream = s.into();
        // Answers far beyond what the socket buffers hold, so the agent's writes stall.
        let requests = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(2000);
        s.set_nonblocking(true).unwrap();
        let _ = s.write(&requests);
        stalled.push(s);
    }
    let t0 = Instant::now();
    let mut trickle = connect(a.metrics);
    trickle.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    let closed = loop {
        std::thread::sleep(Duration::from_secs(1));
        if trickle.write_all(b"X").is_err() {
            break t0.elapsed();
        }
        let mut b = [0u8; 256];
        trickle.set_nonblocking(true).unwrap();
        let r = trickle.read(&mut b);
        trickle.set_nonblocking(false).unwrap();
        if r.is_ok() || matches!(&r, Err(e) if e.kind() != std::io::ErrorKind::WouldBlock) {
            break t0.elapsed();
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "never closed");
    };
    assert!(
        closed >= Duration::from_secs(9) && closed < Duration::from_secs(18),
        "a trickled head was closed after {closed:?}"
    );
    // The stalled readers' connections are gone from the agent by then too.
    let (_, _, fds1) = a.footprint();
    assert!(
        fds1 <= fds0 + 1,
        "the agent still holds {} more descriptors than before the stalled readers",
        fds1 - fds0
    );
    drop(stalled);
}

/// Witness: curl verifying the agent's certificate against the CA openssl made, with
/// and without the basic-auth password; the hash in the file is bcrypt's, as
/// `htpasswd -B` makes it. Plain HTTP to the TLS port gets no answer.
#[test]
fn tls_and_basic_auth_as_the_exporter_toolkit_configures_them() {
    let dir = tempfile::tempdir().unwrap();
    let (web, password) = tls_files(dir.path());
    let a = Agent::start(&["--web-config", web.to_str().unwrap()]);
    let ca = dir.path().join("ca.crt");
    let ca = ca.to_str().unwrap();
    let url = a.url("https", "/metrics");
    let login = format!("prometheus:{password}");
    let t0 = Instant::now();
    let (code, _, body) = loop {
        let r = curl(&["--cacert", ca, "-u", &login, &url]);
        if r.0 == 200 && r.2.contains(SENT) || t0.elapsed() > Duration::from_secs(10) {
            break r;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(SENT), "{body}");
    let (code, _, _) = curl(&["--cacert", ca, &url]);
    assert_eq!(code, 401, "no credentials");
    let (code, _, _) = curl(&["--cacert", ca, "-u", "prometheus:guess", &url]);
    assert_eq!(code, 401, "a wrong password");
    let (code, _, _) = curl(&["--cacert", ca, "-u", &format!("root:{password}"), &url]);
    assert_eq!(code, 401, "a wrong user");
    for path in ["/-/healthy", "/-/ready"] {
        let (code, _, _) = curl(&["--cacert", ca, "-u", &login, &a.url("https", path)]);
        assert_eq!(code, 200, "{path}");
    }
    let o = Command::new("curl")
        .args([
            "-s",
            "-D",
            "-",
            "-o",
            "/dev/null",
            "--cacert",
            ca,
            "-u",
            &login,
            &url,
        ])
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&o.stdout).to_lowercase();
    assert!(head.contains("x-content-type-options: nosniff"), "{head}");
    let (code, _, _) = curl(&[&a.url("http", "/metrics")]);
    assert_eq!(code, 0, "plain HTTP to the TLS port was answered");
}

/// Witness: the agent's exit status and the message it prints, for web config files
/// the toolkit would refuse too (a typo'd key, a missing certificate).
#[test]
fn a_broken_web_config_stops_the_start_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    for (text, says) in [
        (
            "basic_auth_user:\n  a: b\n",
            "unknown field `basic_auth_user`",
        ),
        (
            "tls_server_config:\n  cert_file: nope.crt\n  key_file: nope.key\n",
            "nope.crt",
        ),
    ] {
        let web = dir.path().join("web.yml");
        std::fs::write(&web, text).unwrap();
        let o = Command::new(bin())
            .args(["agent", "--probes", "tcp_rr", "-L", "127.0.0.1:0"])
            .arg("--metrics-listen")
            .arg(format!("127.0.0.1:{}", free_port()))
            .arg("--web-config")
            .arg(&web)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains(says), "{err}");
    }
}
