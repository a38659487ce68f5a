//! `rttlab serve`: one process serving many concurrent request/response tests.
//!
//! Each control connection gets a thread; a test's data sockets get one thread per
//! stream. A peer can make the server do nothing but what the limits allow: frames are
//! bounded ([`super::control::MAX_FRAME`]), payloads, streams, durations and concurrent
//! tests are checked before any data socket opens, the control connection has an idle
//! timeout and, during a test, a deadline of the test's announced length plus a grace
//! (after which the test's data sockets are shut down), data connections are accepted
//! only from the control connection's address, and any rule broken gets an Error
//! message and the connection dropped. Nothing a peer sends
//! can panic or stop the server.

use super::control::{
    self, ClientMsg, ControlError, Limits, ServerMsg, ServerReport, TestKind, TestSpec, MAGIC,
    PROTOCOL_VERSION,
};
use super::io::{read_full, write_full, ReadEnd};
use crate::kernel::cpu::{self, CpuTracker};
use crate::kernel::host::HostFacts;
use crate::kernel::sockopt;
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often blocked data threads look at their stop flag.
const POLL_TICK: Duration = Duration::from_millis(100);
/// Time a client gets to connect its data streams after Ready.
const CONNECT_GRACE: Duration = Duration::from_secs(10);
/// Extra time after a test's announced length before the server ends it.
const END_GRACE: Duration = Duration::from_secs(30);

/// How to run a server.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Control addresses to listen on (IPv4 and/or IPv6).
    pub listen: Vec<SocketAddr>,
    /// Shared secret for the HMAC challenge; `None` serves anyone.
    pub secret: Option<Vec<u8>>,
    pub limits: Limits,
    /// A control or data connection silent for this long is dropped.
    pub idle_timeout: Duration,
    /// Log one line per test on stderr.
    pub log: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: vec![SocketAddr::from((
                [0, 0, 0, 0, 0, 0, 0, 0],
                control::DEFAULT_CONTROL_PORT,
            ))],
            secret: None,
            limits: Limits::default(),
            idle_timeout: Duration::from_secs(30),
            log: false,
        }
    }
}

/// Errors starting a server (a running server reports nothing fatal).
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A listen address could not be bound.
    #[error("cannot listen on {addr}: {source} (is another server running there? pick another port with --listen)")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
}

/// Counters of a running server.
#[derive(Debug, Default)]
pub struct ServerCounters {
    pub tests_started: AtomicU64,
    pub tests_completed: AtomicU64,
    pub rejected: AtomicU64,
    pub auth_failures: AtomicU64,
    pub protocol_errors: AtomicU64,
}

struct Shared {
    config: ServerConfig,
    host: HostFacts,
    active: AtomicU32,
    stop: AtomicBool,
    counters: ServerCounters,
}

/// A bound, not yet running server.
pub struct Server {
    listeners: Vec<TcpListener>,
    shared: Arc<Shared>,
}

/// A server running on background threads; stops when dropped.
pub struct ServerHandle {
    shared: Arc<Shared>,
    addrs: Vec<SocketAddr>,
    listener_fds: Vec<i32>,
    threads: Vec<JoinHandle<()>>,
    _listeners: Vec<TcpListener>,
}

fn listen_socket(addr: SocketAddr) -> io::Result<TcpListener> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    if addr.is_ipv6() {
        // An explicit [::] listens to IPv6 and IPv4-mapped both, like netserver -6.
        s.set_only_v6(false)?;
    }
    s.bind(&addr.into())?;
    s.listen(1024)?;
    Ok(s.into())
}

impl Server {
    /// Bind every listen address.
    ///
    /// # Errors
    /// An address is in use or not available.
    pub fn bind(config: ServerConfig) -> Result<Self, ServerError> {
        let listeners = config
            .listen
            .iter()
            .map(|&addr| listen_socket(addr).map_err(|source| ServerError::Bind { addr, source }))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            listeners,
            shared: Arc::new(Shared {
                config,
                host: HostFacts::collect(),
                active: AtomicU32::new(0),
                stop: AtomicBool::new(false),
                counters: ServerCounters::default(),
            }),
        })
    }

    /// The addresses actually bound (port 0 resolved).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect()
    }

    /// Serve on background threads.
    ///
    /// # Errors
    /// A thread could not be started.
    pub fn spawn(self) -> io::Result<ServerHandle> {
        let addrs = self.local_addrs();
        let mut threads = Vec::new();
        let mut fds = Vec::new();
        let mut kept = Vec::new();
        for l in self.listeners {
            fds.push(l.as_raw_fd());
            let mine = l.try_clone()?;
            kept.push(l);
            let shared = Arc::clone(&self.shared);
            threads.push(
                std::thread::Builder::new()
                    .name("serve-accept".into())
                    .spawn(move || accept_loop(&mine, &shared))?,
            );
        }
        Ok(ServerHandle {
            shared: self.shared,
            addrs,
            listener_fds: fds,
            threads,
            _listeners: kept,
        })
    }

    /// Serve on the calling thread until the process ends.
    ///
    /// # Errors
    /// A thread could not be started.
    pub fn run(self) -> io::Result<()> {
        let mut handle = self.spawn()?;
        for t in std::mem::take(&mut handle.threads) {
            let _ = t.join();
        }
        Ok(())
    }
}

impl ServerHandle {
    /// Addresses the server listens on.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The server's counters.
    pub fn counters(&self) -> &ServerCounters {
        &self.shared.counters
    }

    /// Stop accepting and wait for the accept threads. Tests under way end on their own
    /// (their sockets time out or the client finishes).
    pub fn shutdown(mut self) {
        self.stop_threads();
    }

    fn stop_threads(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for &fd in &self.listener_fds {
            // SAFETY: the listeners are still open (owned by self); shutdown wakes accept().
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    loop {
        match listener.accept() {
            Ok((stream, peer)) => {
                if shared.stop.load(Ordering::SeqCst) {
                    return;
                }
                let shared = Arc::clone(shared);
                let spawned = std::thread::Builder::new()
                    .name("serve-control".into())
                    .spawn(move || {
                        handle_control(stream, peer, &shared);
                    });
                if spawned.is_err() {
                    shared_log_err("cannot start a thread for a control connection");
                }
            }
            Err(_) if shared.stop.load(Ordering::SeqCst) => return,
            // EMFILE and friends: back off instead of spinning; never exit.
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn shared_log_err(msg: &str) {
    eprintln!("rttlab serve: {msg}");
}

/// Decrements the active-test count when a control connection ends, however it ends.
struct ActiveGuard<'a>(&'a AtomicU32);
impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn handle_control(mut ctl: TcpStream, peer: SocketAddr, shared: &Shared) {
    let _ = ctl.set_nodelay(true);
    let _ = ctl.set_read_timeout(Some(shared.config.idle_timeout));
    let _ = ctl.set_write_timeout(Some(shared.config.idle_timeout));
    let active = shared.active.fetch_add(1, Ordering::SeqCst) + 1;
    let _guard = ActiveGuard(&shared.active);
    let result = if active > shared.config.limits.max_concurrent_tests {
        shared.counters.rejected.fetch_add(1, Ordering::Relaxed);
        Err(ControlError::Remote(format!(
            "server busy: {} tests running, the limit is {}",
            active - 1,
            shared.config.limits.max_concurrent_tests
        )))
    } else {
        converse(&mut ctl, peer, shared)
    };
    if let Err(e) = result {
        let message = match &e {
            ControlError::Remote(m) => m.clone(),
            other => other.to_string(),
        };
        if !matches!(e, ControlError::Io(_)) {
            shared
                .counters
                .protocol_errors
                .fetch_add(1, Ordering::Relaxed);
            let _ = control::write_msg(
                &mut ctl,
                &ServerMsg::Error {
                    message: message.clone(),
                },
            );
        }
        if shared.config.log {
            shared_log_err(&format!("{peer}: {message}"));
        }
    }
}

fn reject(msg: impl Into<String>) -> ControlError {
    ControlError::Remote(msg.into())
}

fn converse(ctl: &mut TcpStream, peer: SocketAddr, shared: &Shared) -> Result<(), ControlError> {
    match control::read_msg::<_, ClientMsg>(ctl)? {
        ClientMsg::Hello { magic, version } => {
            if magic != MAGIC {
                return Err(ControlError::NotRttlab);
            }
            if version != PROTOCOL_VERSION {
                return Err(ControlError::Version {
                    ours: PROTOCOL_VERSION,
                    theirs: version,
                });
            }
        }
        other => return Err(ControlError::Unexpected(format!("{other:?} before Hello"))),
    }
    if let Some(secret) = &shared.config.secret {
        let mut nonce = [0u8; 32];
        getrandom::getrandom(&mut nonce).map_err(|e| reject(format!("no randomness: {e}")))?;
        control::write_msg(
            ctl,
            &ServerMsg::Challenge {
                nonce_hex: control::to_hex(&nonce),
            },
        )?;
        let ok = match control::read_msg::<_, ClientMsg>(ctl)? {
            ClientMsg::Auth { mac_hex } => control::from_hex(&mac_hex)
                .is_some_and(|mac| control::auth_verify(secret, &nonce, &mac)),
            _ => false,
        };
        if !ok {
            shared
                .counters
                .auth_failures
                .fetch_add(1, Ordering::Relaxed);
            // Slow down guessing.
            std::thread::sleep(Duration::from_millis(200));
            return Err(reject(
                "authentication failed: the client's secret does not match the server's",
            ));
        }
    }
    control::write_msg(
        ctl,
        &ServerMsg::Welcome {
            version: PROTOCOL_VERSION,
            host: shared.host.clone(),
            limits: shared.config.limits.clone(),
        },
    )?;
    let spec = match control::read_msg::<_, ClientMsg>(ctl)? {
        ClientMsg::Start { spec } => spec,
        other => {
            return Err(ControlError::Unexpected(format!(
                "{other:?} instead of Start"
            )))
        }
    };
    validate(&spec, &shared.config.limits).map_err(reject)?;
    shared
        .counters
        .tests_started
        .fetch_add(1, Ordering::Relaxed);
    let local_ip = ctl.local_addr()?.ip();
    let test = DataTest::open(&spec, local_ip, peer.ip(), shared.config.idle_timeout)
        .map_err(|e| reject(format!("cannot open data port {}: {e}", spec.data_port)))?;
    control::write_msg(
        ctl,
        &ServerMsg::Ready {
            data_port: test.port,
        },
    )?;
    let started = Instant::now();
    let running = test
        .run()
        .map_err(|e| reject(format!("data connection: {e}")))?;
    // The control socket waits for Done as long as the test may last.
    let limit = Duration::from_millis(spec.max_duration_ms)
        + Duration::from_millis(spec.interval_ms)
        + END_GRACE;
    let _ = ctl.set_read_timeout(Some(limit));
    let done = control::read_msg::<_, ClientMsg>(ctl);
    let mut report = running.finish();
    report.host = Some(shared.host.clone());
    match done {
        Ok(ClientMsg::Done) => {
            control::write_msg(
                ctl,
                &ServerMsg::Result {
                    report: Box::new(report.clone()),
                },
            )?;
            shared
                .counters
                .tests_completed
                .fetch_add(1, Ordering::Relaxed);
            if shared.config.log {
                shared_log_err(&format!(
                    "{peer}: {} {},{} streams {} done: {} transactions in {:.1} s",
                    spec.test.name(),
                    spec.request_size,
                    spec.response_size,
                    spec.streams,
                    report.transactions,
                    started.elapsed().as_secs_f64()
                ));
            }
            Ok(())
        }
        Ok(other) => Err(ControlError::Unexpected(format!(
            "{other:?} instead of Done"
        ))),
        Err(e) => Err(e),
    }
}

/// Check a spec against the limits before anything is opened.
///
/// # Errors
/// A one-line reason naming the value and the limit.
pub fn validate(spec: &TestSpec, limits: &Limits) -> Result<(), String> {
    for (what, v) in [
        ("request size", spec.request_size),
        ("response size", spec.response_size),
    ] {
        if v == 0 || v > limits.max_payload {
            return Err(format!(
                "{what} {v} bytes is outside 1..={} (server limit)",
                limits.max_payload
            ));
        }
    }
    if spec.test == TestKind::UdpRr {
        let max_udp = 65_507;
        if spec.request_size > max_udp || spec.response_size > max_udp {
            return Err(format!(
                "UDP_RR sizes must be at most {max_udp} bytes (one datagram)"
            ));
        }
    }
    if spec.streams == 0 || spec.streams > limits.max_streams {
        return Err(format!(
            "{} streams is outside 1..={} (server limit)",
            spec.streams, limits.max_streams
        ));
    }
    if spec.max_duration_ms == 0 || spec.max_duration_ms > limits.max_duration_ms {
        return Err(format!(
            "test length {} ms is outside 1..={} ms (server limit)",
            spec.max_duration_ms, limits.max_duration_ms
        ));
    }
    if spec.interval_ms > limits.max_duration_ms {
        return Err(format!(
            "interval {} ms is longer than the longest test",
            spec.interval_ms
        ));
    }
    if spec.congestion.as_ref().is_some_and(|c| {
        c.is_empty() || c.len() > 15 || !c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    }) {
        return Err("congestion control name must be 1–15 letters, digits or _".into());
    }
    if let Some(cpu) = spec.server_cpu {
        let n = std::thread::available_parallelism().map_or(1, usize::from);
        if cpu >= n {
            return Err(format!(
                "server CPU {cpu} does not exist (the server has {n})"
            ));
        }
    }
    if spec.udp_drop_one_in == Some(0) {
        return Err("udp_drop_one_in must be at least 1".into());
    }
    Ok(())
}

enum DataSock {
    Tcp(TcpListener),
    Udp(UdpSocket),
}

struct DataTest {
    spec: TestSpec,
    sock: DataSock,
    port: u16,
    peer_ip: IpAddr,
    idle: Duration,
}

/// Counters one data thread returns.
#[derive(Default)]
struct ThreadCounters {
    transactions: u64,
    bytes_in: u64,
    bytes_out: u64,
    connections: u64,
    dropped: u64,
    retrans: u64,
    last_info: Option<crate::kernel::tcp_info::TcpInfo>,
    cpus: CpuTracker,
}

struct RunningTest {
    stop: Arc<AtomicBool>,
    streams: Vec<TcpStream>,
    listener_fd: Option<i32>,
    threads: Vec<JoinHandle<ThreadCounters>>,
    congestion: Option<String>,
    server_cpu: Option<usize>,
}

fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    let canon = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    canon(a) == canon(b)
}

impl DataTest {
    fn open(
        spec: &TestSpec,
        local_ip: IpAddr,
        peer_ip: IpAddr,
        idle: Duration,
    ) -> io::Result<Self> {
        let addr = SocketAddr::new(local_ip, spec.data_port);
        let sock = match spec.test {
            TestKind::TcpRr | TestKind::TcpCrr => {
                let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
                s.set_reuse_address(true)?;
                s.bind(&addr.into())?;
                s.listen(1024)?;
                DataSock::Tcp(s.into())
            }
            TestKind::UdpRr => {
                let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
                s.set_reuse_address(true)?;
                s.bind(&addr.into())?;
                DataSock::Udp(s.into())
            }
        };
        let port = match &sock {
            DataSock::Tcp(l) => l.local_addr()?.port(),
            DataSock::Udp(u) => u.local_addr()?.port(),
        };
        let idle = idle + Duration::from_millis(spec.interval_ms);
        Ok(Self {
            spec: spec.clone(),
            sock,
            port,
            peer_ip,
            idle,
        })
    }

    fn configure(&self, s: &TcpStream) -> io::Result<()> {
        s.set_nodelay(self.spec.nodelay)?;
        if self.spec.thin_linear_timeouts {
            sockopt::set_thin_linear_timeouts(s, true).map_err(|e| e.source)?;
        }
        if let Some(cc) = &self.spec.congestion {
            sockopt::set_congestion(s, cc).map_err(|e| {
                io::Error::new(
                    e.source.kind(),
                    format!("congestion control {cc}: {}", e.source),
                )
            })?;
        }
        Ok(())
    }

    /// Accept the client's streams (TCP_RR) or start the workers (UDP_RR, TCP_CRR).
    fn run(self) -> io::Result<RunningTest> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let mut streams = Vec::new();
        let mut listener_fd = None;
        let spec = self.spec.clone();
        let this = Arc::new(self);
        match &this.sock {
            DataSock::Tcp(l) if spec.test == TestKind::TcpRr => {
                let deadline = Instant::now() + CONNECT_GRACE;
                while streams.len() < spec.streams as usize {
                    let s = accept_until(l, deadline)?;
                    if !same_ip(s.peer_addr()?.ip(), this.peer_ip) {
                        continue;
                    }
                    this.configure(&s)?;
                    // No receive timeout: a finite one arms a kernel timer on every
                    // blocking recv (~15 % of TCP_RR's rate at one vCPU). `finish`
                    // shuts these sockets down; the control connection's timeout
                    // bounds a client that vanished.
                    streams.push(s.try_clone()?);
                    let (t, st) = (Arc::clone(&this), Arc::clone(&stop));
                    threads.push(
                        std::thread::Builder::new()
                            .name("serve-rr".into())
                            .spawn(move || t.serve_rr(s, &st))?,
                    );
                }
            }
            DataSock::Tcp(l) => {
                l.set_nonblocking(false)?;
                listener_fd = Some(l.as_raw_fd());
                for _ in 0..spec.streams {
                    let (t, st) = (Arc::clone(&this), Arc::clone(&stop));
                    threads.push(
                        std::thread::Builder::new()
                            .name("serve-crr".into())
                            .spawn(move || t.serve_crr(&st))?,
                    );
                }
            }
            DataSock::Udp(u) => {
                u.set_read_timeout(Some(POLL_TICK))?;
                for _ in 0..spec.streams {
                    let (t, st) = (Arc::clone(&this), Arc::clone(&stop));
                    threads.push(
                        std::thread::Builder::new()
                            .name("serve-udp".into())
                            .spawn(move || t.serve_udp(&st))?,
                    );
                }
            }
        }
        let congestion = streams
            .first()
            .and_then(|s| sockopt::congestion(s).ok())
            .or(spec.congestion.clone());
        Ok(RunningTest {
            stop,
            streams,
            listener_fd,
            threads,
            congestion,
            server_cpu: spec.server_cpu,
        })
    }

    fn pin(&self) {
        if let Some(c) = self.spec.server_cpu {
            let _ = cpu::pin_current_thread(c);
        }
    }

    fn serve_rr(&self, mut s: TcpStream, stop: &AtomicBool) -> ThreadCounters {
        self.pin();
        let mut c = ThreadCounters::default();
        let mut req = vec![0u8; self.spec.request_size as usize];
        let resp = vec![0u8; self.spec.response_size as usize];
        while let Ok(ReadEnd::Full) = read_full(&mut s, &mut req, || !stop.load(Ordering::Relaxed))
        {
            if write_full(&mut s, &resp, || !stop.load(Ordering::Relaxed)).is_err() {
                break;
            }
            c.transactions += 1;
            if c.transactions % 64 == 1 {
                c.cpus.sample();
            }
        }
        c.bytes_in = c.transactions * u64::from(self.spec.request_size);
        c.bytes_out = c.transactions * u64::from(self.spec.response_size);
        c
    }

    fn serve_crr(&self, stop: &AtomicBool) -> ThreadCounters {
        self.pin();
        let mut c = ThreadCounters::default();
        let DataSock::Tcp(l) = &self.sock else {
            return c;
        };
        let mut req = vec![0u8; self.spec.request_size as usize];
        let resp = vec![0u8; self.spec.response_size as usize];
        while !stop.load(Ordering::Relaxed) {
            let Ok((mut s, peer)) = l.accept() else { break };
            if !same_ip(peer.ip(), self.peer_ip) || self.configure(&s).is_err() {
                continue;
            }
            c.connections += 1;
            let _ = s.set_read_timeout(Some(POLL_TICK));
            let _ = s.set_write_timeout(Some(POLL_TICK));
            let t0 = Instant::now();
            let keep = || !stop.load(Ordering::Relaxed) && t0.elapsed() < self.idle;
            if !matches!(read_full(&mut s, &mut req, keep), Ok(ReadEnd::Full)) {
                continue;
            }
            if write_full(&mut s, &resp, || !stop.load(Ordering::Relaxed)).is_err() {
                continue;
            }
            c.transactions += 1;
            if c.transactions % 64 == 1 {
                c.cpus.sample();
            }
            // Wait for the client's close so the client, not the server, holds TIME_WAIT.
            let mut one = [0u8; 1];
            let _ = read_full(&mut s, &mut one, || {
                !stop.load(Ordering::Relaxed) && t0.elapsed() < self.idle
            });
            if let Ok(ti) = sockopt::tcp_info(&s) {
                c.retrans += u64::from(ti.total_retrans);
                c.last_info = Some(ti);
            }
        }
        c.bytes_in = c.transactions * u64::from(self.spec.request_size);
        c.bytes_out = c.transactions * u64::from(self.spec.response_size);
        c
    }

    fn serve_udp(&self, stop: &AtomicBool) -> ThreadCounters {
        self.pin();
        let mut c = ThreadCounters::default();
        let DataSock::Udp(u) = &self.sock else {
            return c;
        };
        let mut buf = vec![0u8; self.spec.request_size as usize + 1];
        let mut resp = vec![0u8; self.spec.response_size as usize];
        let echo = (self.spec.request_size.min(self.spec.response_size) as usize).min(8);
        let mut idle_since = Instant::now();
        let mut seen = 0u64;
        while !stop.load(Ordering::Relaxed) && idle_since.elapsed() < self.idle {
            let (n, from) = match u.recv_from(&mut buf) {
                Ok(x) => x,
                Err(_) => continue,
            };
            if n != self.spec.request_size as usize || !same_ip(from.ip(), self.peer_ip) {
                continue;
            }
            idle_since = Instant::now();
            seen += 1;
            if self
                .spec
                .udp_drop_one_in
                .is_some_and(|k| seen % u64::from(k) == 0)
            {
                c.dropped += 1;
                continue;
            }
            // Echo the client's sequence number so late replies are told apart.
            resp[..echo].copy_from_slice(&buf[..echo]);
            if u.send_to(&resp, from).is_ok() {
                c.transactions += 1;
                if c.transactions % 64 == 1 {
                    c.cpus.sample();
                }
            }
        }
        c.bytes_in = (c.transactions + c.dropped) * u64::from(self.spec.request_size);
        c.bytes_out = c.transactions * u64::from(self.spec.response_size);
        c
    }
}

fn accept_until(l: &TcpListener, deadline: Instant) -> io::Result<TcpStream> {
    l.set_nonblocking(true)?;
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)?;
                return Ok(s);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client did not connect its data streams",
                    ));
                }
                let mut pfd = libc::pollfd {
                    fd: l.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(&mut pfd, 1, 50) };
            }
            Err(e) => return Err(e),
        }
    }
}

impl RunningTest {
    /// Snapshot `tcp_info`, stop every thread and add up the counters.
    fn finish(self) -> ServerReport {
        let mut report = ServerReport {
            congestion: self.congestion,
            ..ServerReport::default()
        };
        for s in &self.streams {
            if let Ok(ti) = sockopt::tcp_info(s) {
                report.total_retrans += u64::from(ti.total_retrans);
                report.tcp_info.push(ti);
            }
        }
        self.stop.store(true, Ordering::SeqCst);
        for s in &self.streams {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        if let Some(fd) = self.listener_fd {
            // SAFETY: the listener is owned by the worker threads' Arc and still open; wakes accept().
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        }
        let mut cpus = CpuTracker::default();
        let mut crr_info = None;
        for t in self.threads {
            if let Ok(c) = t.join() {
                report.transactions += c.transactions;
                report.bytes_received += c.bytes_in;
                report.bytes_sent += c.bytes_out;
                report.connections += c.connections;
                report.dropped_on_purpose += c.dropped;
                report.total_retrans += c.retrans;
                cpus.merge(&c.cpus);
                crr_info = c.last_info.or(crr_info);
            }
        }
        if let Some(ti) = crr_info {
            report.tcp_info.push(ti);
        }
        report.placement = cpus.placement(self.server_cpu);
        report
    }
}
