//! `rttlab rr`: application round-trip time, as netperf's TCP_RR, UDP_RR and TCP_CRR
//! measure it (seeds 000, 001, 004).
//!
//! A transaction is timed from just before the request's `send()` to just after the
//! last byte of the response is read. Waits between transactions (`-w`) are never part
//! of a transaction's time, so paced runs report the latency of the transactions, not
//! elapsed/transactions (netperf's RT_LATENCY counts the wait when pacing).
//!
//! Open-loop mode sends on a schedule whatever the replies do and records each
//! transaction twice: service time (actual send → response) and response time
//! (intended send → response). A slow reply delays the next sends in a closed loop and
//! hides its own effect (coordinated omission); the response time shows it.

use super::control::{
    self, ClientMsg, ControlError, Limits, Role, ServerMsg, ServerReport, Session, TestKind,
    TestSpec, MAGIC, PROTOCOL_VERSION,
};
use super::io::{read_full, write_full, ReadEnd};
use super::pacing::{self, Arrivals, PaceMode, Schedule};
use super::udp_timeout::UdpTimeout;
use crate::kernel::cpu::{self, CpuTracker, Placement};
use crate::kernel::host::HostFacts;
use crate::kernel::sockopt;
use crate::kernel::tcp_info::TcpInfo;
use crate::stats::{HdrLogWriter, IntervalRecorder, LatencyHistogram, Percentile, Summary};
use serde::Serialize;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::collections::VecDeque;
use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

/// How often a blocked socket call wakes up to look at the stop flag and deadline.
const POLL_TICK: Duration = Duration::from_millis(100);
/// Transactions between looks at the CPU and updates of the shared progress count.
const SAMPLE_EVERY: u64 = 64;
/// How long the server has to send its report at the end.
const REPORT_WAIT: Duration = Duration::from_secs(10);
/// The same after the run was cut off because the server stopped answering.
const REPORT_WAIT_CUT: Duration = Duration::from_secs(2);
/// How often the watchdog looks at the stop flag and the hard deadline.
const WATCH_TICK: Duration = Duration::from_millis(50);
/// Time allowed to connect the control and data connections.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a transaction in flight at the end of the run may still complete.
const IN_FLIGHT_GRACE: Duration = Duration::from_secs(5);
/// The adaptive UDP timeout's floor: a reply later than this on a sub-millisecond path
/// is a scheduling stall more often than a loss, and is still counted late if it comes.
pub const UDP_TIMEOUT_FLOOR: Duration = Duration::from_millis(10);
/// A run bounded only by count still ends after this.
pub const MAX_RUN: Duration = Duration::from_secs(3600);
/// Cap on the `--tcpinfo-interval` series kept in memory.
const MAX_TCPINFO_SAMPLES: usize = 100_000;

/// Open-loop settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct OpenLoop {
    /// Requests per second per stream.
    pub rate_per_s: f64,
    pub schedule: Schedule,
    /// Requests without a reply after which the sender waits (the intended times keep
    /// their schedule, so the wait shows in the response time).
    pub max_outstanding: u32,
}

/// Everything that shapes an rr run.
#[derive(Clone, Debug)]
pub struct RrSettings {
    /// The server's control address.
    pub server: SocketAddr,
    pub secret: Option<Vec<u8>>,
    pub test: TestKind,
    pub request_size: u32,
    pub response_size: u32,
    /// `-l`: run this long.
    pub duration: Option<Duration>,
    /// `-n`: run this many transactions in all (split across streams).
    pub count: Option<u64>,
    /// `-w`: wait between receipt of a response and the next request.
    pub interval: Duration,
    pub pace: PaceMode,
    /// `-b`: transactions back to back per interval.
    pub burst: u32,
    pub streams: u32,
    /// Start stream i at i/streams of `interval`, so that many streams' requests do
    /// not leave in one burst every interval (seed 000 started its netperfs 50 ms apart).
    pub spread_starts: bool,
    /// `-P`: fixed server data port (0: any).
    pub data_port: u16,
    pub thin_linear_timeouts: bool,
    pub congestion: Option<String>,
    pub local_cpu: Option<usize>,
    pub remote_cpu: Option<usize>,
    /// UDP: a request without a reply after this is lost; with `adaptive_timeout`, the
    /// ceiling of the adaptive timeout.
    pub timeout: Duration,
    /// UDP_RR (closed loop): the timeout follows the measured round trips as TCP's RTO
    /// does ([`super::udp_timeout`]), between [`UDP_TIMEOUT_FLOOR`] and `timeout`.
    pub adaptive_timeout: bool,
    pub open_loop: Option<OpenLoop>,
    pub tcpinfo_interval: Option<Duration>,
    /// Tell the server to drop one UDP request in N (tests loss accounting).
    pub udp_drop_one_in: Option<u32>,
    pub percentiles: Vec<Percentile>,
    pub hdr_log: Option<PathBuf>,
}

impl RrSettings {
    /// netperf's defaults: TCP_RR, 1-byte request and response, 10 s, one stream.
    pub fn new(server: SocketAddr) -> Self {
        Self {
            server,
            secret: None,
            test: TestKind::TcpRr,
            request_size: 1,
            response_size: 1,
            duration: Some(Duration::from_secs(10)),
            count: None,
            interval: Duration::ZERO,
            pace: PaceMode::Sleep,
            burst: 1,
            streams: 1,
            spread_starts: false,
            data_port: 0,
            thin_linear_timeouts: false,
            congestion: None,
            local_cpu: None,
            remote_cpu: None,
            timeout: Duration::from_secs(1),
            adaptive_timeout: true,
            open_loop: None,
            tcpinfo_interval: None,
            udp_drop_one_in: None,
            percentiles: crate::stats::DEFAULT_PERCENTILES.to_vec(),
            hdr_log: None,
        }
    }
}

/// Shared between a run and whoever watches it (progress line, Ctrl-C).
#[derive(Debug, Default)]
pub struct RunControl {
    /// Set to end the run early; what was measured is kept.
    pub stop: AtomicBool,
    /// Transactions completed so far.
    pub transactions: AtomicU64,
}

/// Errors that end a run before anything was measured.
#[derive(Debug, thiserror::Error)]
pub enum RrError {
    /// The control connection could not be made.
    #[error("cannot reach the rttlab server at {addr} (is `rttlab serve` running there?)")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    /// The control conversation failed.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The server wants a secret and we have none.
    #[error("the server requires a secret: pass --secret-file PATH or set RTTLAB_SECRET")]
    SecretRequired,
    /// We have a secret and the server did not ask for it: it cannot prove it is the
    /// server we share the secret with.
    #[error("the server at {0} did not ask for the secret, so it cannot prove it knows it (a server started without one, or not the server you meant); refusing to run unauthenticated")]
    ServerUnauthenticated(SocketAddr),
    /// The data connections could not be set up.
    #[error("data connection to port {port}")]
    Data {
        port: u16,
        #[source]
        source: io::Error,
    },
    /// A setting the server's limits forbid, caught before asking.
    #[error("{0}")]
    Limit(String),
}

/// A client's control connection.
pub struct ControlClient {
    stream: TcpStream,
    /// Seals every frame after the handshake when a secret is shared.
    session: Option<Session>,
    /// The server's host facts.
    pub server_host: HostFacts,
    /// The server's limits.
    pub limits: Limits,
}

impl ControlClient {
    /// Connect, check the version, and with a secret prove it and check the server's
    /// proof (a Welcome sealed under the session key only the secret's holder can
    /// derive).
    ///
    /// # Errors
    /// Unreachable, not rttlab, another version, authentication refused either way.
    pub fn connect(addr: SocketAddr, secret: Option<&[u8]>) -> Result<Self, RrError> {
        let mut stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
            .map_err(|source| RrError::Connect { addr, source })?;
        let _ = stream.set_nodelay(true);
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(ControlError::Io)?;
        let client_nonce = control::nonce()?;
        control::write_msg(
            &mut stream,
            &ClientMsg::Hello {
                magic: MAGIC.into(),
                version: PROTOCOL_VERSION,
                nonce_hex: control::to_hex(&client_nonce),
            },
        )?;
        let first = control::read_first_server_msg(&mut stream)?;
        let (msg, session) = match (first, secret) {
            (ServerMsg::Challenge { nonce_hex }, Some(secret)) => {
                let server_nonce = control::from_hex(&nonce_hex)
                    .filter(|n| n.len() == control::NONCE_LEN)
                    .ok_or_else(|| ControlError::Malformed("bad nonce".into()))?;
                let mac_hex =
                    control::to_hex(&control::client_proof(secret, &client_nonce, &server_nonce));
                control::write_msg(&mut stream, &ClientMsg::Auth { mac_hex })?;
                let mut session =
                    Session::derive(secret, &client_nonce, &server_nonce, Role::Client);
                // A refusal comes as a plain Error; a Welcome must be sealed.
                let frame = read_sealed_or_error(&mut stream, &mut session)?;
                (frame, Some(session))
            }
            (ServerMsg::Challenge { .. }, None) => return Err(RrError::SecretRequired),
            (ServerMsg::Welcome { .. }, Some(_)) => {
                return Err(RrError::ServerUnauthenticated(addr))
            }
            (other, _) => (other, None),
        };
        match msg {
            ServerMsg::Welcome {
                version,
                host,
                limits,
            } => {
                if version != PROTOCOL_VERSION {
                    return Err(ControlError::Version {
                        ours: PROTOCOL_VERSION,
                        theirs: version,
                    }
                    .into());
                }
                Ok(Self {
                    stream,
                    session,
                    server_host: host,
                    limits,
                })
            }
            ServerMsg::Error { message } => Err(ControlError::Remote(message).into()),
            other => Err(ControlError::Unexpected(format!("{other:?}")).into()),
        }
    }

    fn send(&mut self, msg: &ClientMsg) -> Result<(), ControlError> {
        match &mut self.session {
            Some(s) => s.write(&mut self.stream, msg),
            None => control::write_msg(&mut self.stream, msg),
        }
    }

    fn recv(&mut self) -> Result<ServerMsg, ControlError> {
        match &mut self.session {
            Some(s) => s.read(&mut self.stream),
            None => control::read_msg(&mut self.stream),
        }
    }

    /// Ask for a test; returns the data port.
    ///
    /// # Errors
    /// The server refused the test or the connection failed.
    pub fn start(&mut self, spec: &TestSpec) -> Result<u16, RrError> {
        self.send(&ClientMsg::Start { spec: spec.clone() })?;
        match self.recv()? {
            ServerMsg::Ready { data_port } => Ok(data_port),
            ServerMsg::Error { message } => Err(ControlError::Remote(message).into()),
            other => Err(ControlError::Unexpected(format!("{other:?}")).into()),
        }
    }

    /// Say the test is over and collect the server's report, waiting at most `wait`.
    ///
    /// # Errors
    /// The server went away, did not answer in time, or answered with an error.
    pub fn finish(&mut self, wait: Duration) -> Result<ServerReport, RrError> {
        self.stream
            .set_read_timeout(Some(wait))
            .map_err(ControlError::Io)?;
        self.send(&ClientMsg::Done)?;
        match self.recv()? {
            ServerMsg::Result { report } => Ok(*report),
            ServerMsg::Error { message } => Err(ControlError::Remote(message).into()),
            other => Err(ControlError::Unexpected(format!("{other:?}")).into()),
        }
    }
}

/// The frame after Auth: a sealed Welcome, or a plain Error when the server refused
/// our proof (it has no session to seal with then). Anything else is forged.
fn read_sealed_or_error(
    stream: &mut TcpStream,
    session: &mut Session,
) -> Result<ServerMsg, ControlError> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let n = u32::from_be_bytes(len);
    if n > control::MAX_FRAME {
        return Err(ControlError::TooLarge(n));
    }
    let mut body = vec![0u8; n as usize];
    stream.read_exact(&mut body)?;
    if let Ok(ServerMsg::Error { message }) = control::decode::<ServerMsg>(&body) {
        return Err(ControlError::Remote(message));
    }
    let mut frame = len.to_vec();
    frame.extend_from_slice(&body);
    session.read(&mut &frame[..]).map_err(|e| match e {
        ControlError::Forged => ControlError::Remote(
            "the server could not prove it knows the secret (a different secret, or a relay in the middle)".into(),
        ),
        other => other,
    })
}

/// The settings as a result reports them.
#[derive(Clone, Debug, Serialize)]
pub struct RrReportSettings {
    pub test: &'static str,
    pub request_size: u32,
    pub response_size: u32,
    pub interval_us: f64,
    pub burst: u32,
    pub pacing: &'static str,
    pub streams: u32,
    pub duration_limit_s: Option<f64>,
    pub count_limit: Option<u64>,
    pub server: SocketAddr,
    pub local_data_addr: Option<SocketAddr>,
    pub remote_data_port: u16,
    pub nodelay: bool,
    pub thin_linear_timeouts: bool,
    pub congestion: Option<String>,
    pub timeout_ms: Option<f64>,
    /// The UDP timeout adapts to the round trips (`timeout_ms` is then its ceiling).
    pub timeout_adaptive: bool,
    pub open_loop: Option<OpenLoop>,
}

/// Open-loop results.
#[derive(Clone, Debug, Serialize)]
pub struct OpenLoopStats {
    /// Intended send time → response: what a user of the schedule saw.
    pub response_time: Summary,
    /// Requests with no response at the end.
    pub unanswered: u64,
    /// Sends that happened more than 1 ms after their intended time.
    pub late_sends: u64,
}

/// UDP_RR results.
#[derive(Clone, Debug, Serialize)]
pub struct UdpStats {
    /// Requests whose reply did not arrive within the timeout.
    pub lost: u64,
    /// Replies that arrived after their request had been declared lost.
    pub late_replies: u64,
    /// Requests the server dropped on purpose (`--udp-drop-one-in`).
    pub dropped_by_server: u64,
}

/// One `--tcpinfo-interval` sample of a client data socket.
#[derive(Clone, Debug, Serialize)]
pub struct TcpInfoSample {
    pub t_ms: f64,
    pub stream: usize,
    pub info: TcpInfo,
}

/// Everything an rr run measured, with the settings that shaped it.
#[derive(Clone, Debug, Serialize)]
pub struct RrResult {
    pub settings: RrReportSettings,
    pub brand: Option<String>,
    pub local_host: HostFacts,
    pub remote_host: Option<HostFacts>,
    pub elapsed_s: f64,
    pub transactions: u64,
    pub throughput_tps: f64,
    /// Round-trip time of each transaction (actual send → last byte of the response).
    pub latency: Summary,
    #[serde(skip)]
    pub histogram: LatencyHistogram,
    /// TCP_CRR: time of the connect() alone.
    pub connect: Option<Summary>,
    /// With `-w`: how late each request after a wait left (intended time → just before
    /// `send()`), the pacing's own error.
    pub pacing_error: Option<Summary>,
    pub open_loop: Option<OpenLoopStats>,
    pub udp: Option<UdpStats>,
    /// Transactions the server counted.
    pub remote_transactions: Option<u64>,
    pub local_tcp_info: Vec<TcpInfo>,
    pub remote_tcp_info: Vec<TcpInfo>,
    /// Segments retransmitted by the client's data sockets.
    pub local_retrans: Option<u64>,
    /// Segments retransmitted by the server's data sockets.
    pub remote_retrans: Option<u64>,
    pub local_placement: Placement,
    pub remote_placement: Option<Placement>,
    /// CPU time of the client's measuring threads per transaction.
    pub client_cpu_us_per_transaction: Option<f64>,
    pub tcpinfo_series: Vec<TcpInfoSample>,
    /// What cut the run short, if anything; the numbers above are what was measured.
    pub error: Option<String>,
}

#[derive(Default)]
struct StreamOutcome {
    hist: LatencyHistogram,
    /// Transactions already added to the shared progress count.
    published: u64,
    pacing: LatencyHistogram,
    connect: LatencyHistogram,
    intended: LatencyHistogram,
    transactions: u64,
    lost: u64,
    late_replies: u64,
    unanswered: u64,
    late_sends: u64,
    retrans: u64,
    info: Option<TcpInfo>,
    cpus: CpuTracker,
    cpu_ns: u64,
    local_addr: Option<SocketAddr>,
    error: Option<String>,
}

struct Ctx<'a> {
    s: &'a RrSettings,
    data: SocketAddr,
    ctl: &'a RunControl,
    start: Instant,
    deadline: Instant,
    hard_deadline: Instant,
    quota: u64,
    /// Set by the watchdog when it shut the sockets down (stop or hard deadline).
    cutoff: &'a AtomicBool,
}

impl Ctx<'_> {
    fn keep(&self) -> bool {
        !self.ctl.stop.load(Ordering::Relaxed) && Instant::now() < self.hard_deadline
    }
    fn more(&self, done: u64, now: Instant) -> bool {
        done < self.quota && now < self.deadline && !self.ctl.stop.load(Ordering::Relaxed)
    }
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A connected data socket. Closed-loop TCP_RR sockets block without a timeout: a
/// finite `SO_RCVTIMEO` makes every blocking `recv` arm and cancel a kernel timer,
/// which cost TCP_RR ~15 % of its transactions/s at one vCPU (bench/RESULTS-rr.md);
/// the watchdog in [`run`] shuts them down instead when the run must end.
fn tcp_socket(s: &RrSettings, addr: SocketAddr, timeouts: bool) -> io::Result<TcpStream> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_nodelay(true)?;
    if s.thin_linear_timeouts {
        sockopt::set_thin_linear_timeouts(&sock, true).map_err(|e| e.source)?;
    }
    if let Some(cc) = &s.congestion {
        sockopt::set_congestion(&sock, cc).map_err(|e| {
            io::Error::new(
                e.source.kind(),
                format!("congestion control {cc}: {}", e.source),
            )
        })?;
    }
    sock.connect_timeout(&SockAddr::from(addr), CONNECT_TIMEOUT)?;
    if timeouts {
        sock.set_read_timeout(Some(POLL_TICK))?;
        sock.set_write_timeout(Some(POLL_TICK))?;
    }
    Ok(sock.into())
}

/// Run one rr test against a running server.
///
/// # Errors
/// Nothing could be measured (server unreachable, test refused, data port closed).
/// Failures after measuring began are reported in [`RrResult::error`] with the partial
/// numbers.
pub fn run(s: &RrSettings, ctl: &RunControl) -> Result<RrResult, RrError> {
    let mut client = ControlClient::connect(s.server, s.secret.as_deref())?;
    for (what, v) in [
        ("request size", s.request_size),
        ("response size", s.response_size),
    ] {
        if v == 0 || v > client.limits.max_payload {
            return Err(RrError::Limit(format!(
                "{what} {v} is outside the server's limit 1..={}",
                client.limits.max_payload
            )));
        }
    }
    // A run bounded only by count asks for as long as the server allows.
    let server_max = Duration::from_millis(client.limits.max_duration_ms);
    let run_for = s.duration.unwrap_or(server_max.min(MAX_RUN)).min(MAX_RUN);
    let spec = TestSpec {
        test: s.test,
        request_size: s.request_size,
        response_size: s.response_size,
        // The server adds its own grace for transactions in flight at the end.
        max_duration_ms: run_for.as_millis() as u64,
        interval_ms: s.interval.as_millis() as u64 + s.timeout.as_millis() as u64,
        data_port: s.data_port,
        streams: s.streams,
        nodelay: true,
        thin_linear_timeouts: s.thin_linear_timeouts,
        congestion: s.congestion.clone(),
        server_cpu: s.remote_cpu,
        udp_drop_one_in: s.udp_drop_one_in,
    };
    let port = client.start(&spec)?;
    let data = SocketAddr::new(s.server.ip(), port);

    let mut hdr = match &s.hdr_log {
        Some(p) => Some(
            HdrLogWriter::create(
                p,
                s.streams as usize,
                Duration::from_secs(1),
                &format!(
                    "{} -r {},{} -w {:?}",
                    s.test.name(),
                    s.request_size,
                    s.response_size,
                    s.interval
                ),
            )
            .map_err(|source| RrError::Data { port, source })?,
        ),
        None => None,
    };

    // TCP_RR connects every stream before timing starts, so a refused data port is an
    // error rather than an empty result.
    let mut conns: Vec<Option<TcpStream>> = Vec::new();
    if s.test == TestKind::TcpRr {
        for _ in 0..s.streams {
            conns.push(Some(
                tcp_socket(s, data, s.open_loop.is_some())
                    .map_err(|source| RrError::Data { port, source })?,
            ));
        }
    } else {
        conns.resize_with(s.streams as usize, || None);
    }
    let watched: Vec<TcpStream> = conns
        .iter()
        .flatten()
        .filter_map(|c| c.try_clone().ok())
        .collect();

    let cutoff = AtomicBool::new(false);
    let barrier = Arc::new(Barrier::new(s.streams as usize + 1));
    let start_cell: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let (outcomes, tcpinfo_series) = std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for (i, conn) in conns.into_iter().enumerate() {
            let quota = s.count.map_or(u64::MAX, |n| {
                n / u64::from(s.streams) + u64::from((i as u64) < n % u64::from(s.streams))
            });
            let barrier = Arc::clone(&barrier);
            let start_cell = Arc::clone(&start_cell);
            let recorder = hdr.as_mut().map(HdrLogWriter::recorder);
            let cutoff = &cutoff;
            handles.push(scope.spawn(move || {
                if let Some(c) = s.local_cpu {
                    let _ = cpu::pin_current_thread(c);
                }
                pacing::tighten_timer_slack();
                barrier.wait();
                let start = start_cell
                    .lock()
                    .map(|g| g.unwrap_or_else(Instant::now))
                    .unwrap_or_else(|_| Instant::now());
                if s.spread_starts {
                    let phase = s.interval.mul_f64(i as f64 / f64::from(s.streams.max(1)));
                    std::thread::sleep((start + phase).saturating_duration_since(Instant::now()));
                }
                let cx = Ctx {
                    s,
                    data,
                    ctl,
                    start,
                    deadline: start + run_for,
                    hard_deadline: start + run_for + IN_FLIGHT_GRACE,
                    quota,
                    cutoff,
                };
                let cpu0 = thread_cpu_ns();
                let mut out = match (s.test, s.open_loop) {
                    (TestKind::TcpRr, None) => tcp_rr(&cx, conn, recorder),
                    (TestKind::UdpRr, None) => udp_rr(&cx, recorder),
                    (TestKind::TcpCrr, _) => tcp_crr(&cx, recorder),
                    (TestKind::TcpRr, Some(ol)) => {
                        open_loop(&cx, ol, Endpoint::Tcp(conn), recorder)
                    }
                    (TestKind::UdpRr, Some(ol)) => open_loop(&cx, ol, Endpoint::Udp, recorder),
                };
                out.cpu_ns = thread_cpu_ns().saturating_sub(cpu0);
                publish(&mut out, ctl);
                out
            }));
        }
        let start = Instant::now();
        *start_cell.lock().unwrap_or_else(|p| p.into_inner()) = Some(start);
        barrier.wait();
        let hard_deadline = start + run_for + IN_FLIGHT_GRACE;
        let series = watch(s, &watched, ctl, &cutoff, hard_deadline, &handles);
        let outs: Vec<StreamOutcome> = handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| StreamOutcome {
                    error: Some("a measuring thread panicked".into()),
                    ..Default::default()
                })
            })
            .collect();
        (outs, series)
    });
    let started = *start_cell.lock().unwrap_or_else(|p| p.into_inner());
    let elapsed = started.map_or(Duration::ZERO, |t| t.elapsed());
    if let Some(h) = hdr.take() {
        let _ = h.finish();
    }

    let mut hist = LatencyHistogram::new();
    let mut connect = LatencyHistogram::new();
    let mut intended = LatencyHistogram::new();
    let mut pacing_err = LatencyHistogram::new();
    let mut cpus = CpuTracker::default();
    let (
        mut transactions,
        mut lost,
        mut late,
        mut unanswered,
        mut late_sends,
        mut retrans,
        mut cpu_ns,
    ) = (0, 0, 0, 0, 0, 0, 0);
    let mut local_info = Vec::new();
    let mut error = None;
    let mut local_addr = None;
    for o in &outcomes {
        hist.merge(&o.hist);
        connect.merge(&o.connect);
        intended.merge(&o.intended);
        pacing_err.merge(&o.pacing);
        cpus.merge(&o.cpus);
        transactions += o.transactions;
        lost += o.lost;
        late += o.late_replies;
        unanswered += o.unanswered;
        late_sends += o.late_sends;
        retrans += o.retrans;
        cpu_ns += o.cpu_ns;
        local_info.extend(o.info.clone());
        error = error.or(o.error.clone());
        local_addr = local_addr.or(o.local_addr);
    }
    // A server that let the watchdog cut the run off is unlikely to answer promptly.
    let wait = if cutoff.load(Ordering::SeqCst) && !ctl.stop.load(Ordering::Relaxed) {
        REPORT_WAIT_CUT
    } else {
        REPORT_WAIT
    };
    let server = match client.finish(wait) {
        Ok(r) => Some(r),
        Err(e) => {
            error = error.or(Some(format!(
                "collecting the server's report: {}",
                crate::error_chain(&e)
            )));
            None
        }
    };
    let tcp = s.test != TestKind::UdpRr;
    Ok(RrResult {
        settings: RrReportSettings {
            test: s.test.name(),
            request_size: s.request_size,
            response_size: s.response_size,
            interval_us: s.interval.as_secs_f64() * 1e6,
            burst: s.burst,
            pacing: s.pace.name(),
            streams: s.streams,
            duration_limit_s: s.duration.map(|d| d.as_secs_f64()),
            count_limit: s.count,
            server: s.server,
            local_data_addr: local_addr,
            remote_data_port: port,
            nodelay: true,
            thin_linear_timeouts: s.thin_linear_timeouts,
            congestion: s
                .congestion
                .clone()
                .or_else(|| server.as_ref().and_then(|r| r.congestion.clone())),
            timeout_ms: (s.test == TestKind::UdpRr).then_some(s.timeout.as_secs_f64() * 1e3),
            timeout_adaptive: s.test == TestKind::UdpRr
                && s.adaptive_timeout
                && s.open_loop.is_none(),
            open_loop: s.open_loop,
        },
        brand: None,
        local_host: HostFacts::collect(),
        remote_host: server
            .as_ref()
            .and_then(|r| r.host.clone())
            .or(Some(client.server_host.clone())),
        elapsed_s: elapsed.as_secs_f64(),
        transactions,
        throughput_tps: if elapsed.is_zero() {
            0.0
        } else {
            transactions as f64 / elapsed.as_secs_f64()
        },
        latency: Summary::from_histogram(&hist, &s.percentiles),
        histogram: hist,
        connect: (s.test == TestKind::TcpCrr)
            .then(|| Summary::from_histogram(&connect, &s.percentiles)),
        pacing_error: (!s.interval.is_zero() && s.open_loop.is_none())
            .then(|| Summary::from_histogram(&pacing_err, &s.percentiles)),
        open_loop: s.open_loop.map(|_| OpenLoopStats {
            response_time: Summary::from_histogram(&intended, &s.percentiles),
            unanswered,
            late_sends,
        }),
        udp: (s.test == TestKind::UdpRr).then(|| UdpStats {
            lost,
            late_replies: late,
            dropped_by_server: server.as_ref().map_or(0, |r| r.dropped_on_purpose),
        }),
        remote_transactions: server.as_ref().map(|r| r.transactions),
        local_tcp_info: local_info,
        remote_tcp_info: server
            .as_ref()
            .map(|r| r.tcp_info.clone())
            .unwrap_or_default(),
        local_retrans: tcp.then_some(retrans),
        remote_retrans: if tcp {
            server.as_ref().map(|r| r.total_retrans)
        } else {
            None
        },
        local_placement: cpus.placement(s.local_cpu),
        remote_placement: server.as_ref().map(|r| r.placement.clone()),
        client_cpu_us_per_transaction: (transactions > 0)
            .then(|| cpu_ns as f64 / 1e3 / transactions as f64),
        tcpinfo_series,
        error,
    })
}

/// The main thread while the streams run: samples the client's data sockets every
/// `--tcpinfo-interval`, and when the user stops the run or the hard deadline passes,
/// shuts the blocking sockets down so the streams' `recv` returns.
fn watch<T>(
    s: &RrSettings,
    socks: &[TcpStream],
    ctl: &RunControl,
    cutoff: &AtomicBool,
    hard_deadline: Instant,
    handles: &[std::thread::ScopedJoinHandle<'_, T>],
) -> Vec<TcpInfoSample> {
    let mut series = Vec::new();
    let t0 = Instant::now();
    let mut next_sample = t0;
    while !handles.iter().all(|h| h.is_finished()) {
        let now = Instant::now();
        if !cutoff.load(Ordering::Relaxed)
            && (ctl.stop.load(Ordering::Relaxed) || now >= hard_deadline)
        {
            cutoff.store(true, Ordering::SeqCst);
            for sock in socks {
                let _ = sock.shutdown(std::net::Shutdown::Both);
            }
        }
        let mut wake = now + WATCH_TICK;
        if let Some(every) = s.tcpinfo_interval {
            if now >= next_sample {
                for (stream, sock) in socks.iter().enumerate() {
                    if series.len() >= MAX_TCPINFO_SAMPLES {
                        break;
                    }
                    if let Ok(info) = sockopt::tcp_info(sock) {
                        series.push(TcpInfoSample {
                            t_ms: t0.elapsed().as_secs_f64() * 1e3,
                            stream,
                            info,
                        });
                    }
                }
                next_sample = (next_sample + every).max(now);
            }
            wake = wake.min(next_sample);
        }
        std::thread::sleep(wake.saturating_duration_since(Instant::now()));
    }
    series
}

#[inline]
fn record(
    out: &mut StreamOutcome,
    rec: &mut Option<IntervalRecorder>,
    ctl: &RunControl,
    t0: Instant,
    t1: Instant,
) {
    let ns = u64::try_from((t1 - t0).as_nanos()).unwrap_or(u64::MAX);
    out.hist.record_ns(ns);
    if let Some(r) = rec.as_mut() {
        r.record(t1, ns);
    }
    out.transactions += 1;
    // Where the thread runs and the shared progress count change slowly: look and
    // publish every 64 transactions (each costs a few tens of ns on a VM).
    if out.transactions % SAMPLE_EVERY == 1 {
        out.cpus.sample();
        ctl.transactions
            .fetch_add(out.transactions - out.published, Ordering::Relaxed);
        out.published = out.transactions;
    }
}

/// Publish the transactions not yet counted in [`RunControl::transactions`].
fn publish(out: &mut StreamOutcome, ctl: &RunControl) {
    ctl.transactions
        .fetch_add(out.transactions - out.published, Ordering::Relaxed);
    out.published = out.transactions;
}

/// Wait `-w` after `after`; returns the intended send time of the next request.
fn pause(cx: &Ctx<'_>, after: Instant) -> Option<Instant> {
    if cx.s.interval.is_zero() {
        return None;
    }
    let target = after + cx.s.interval;
    pacing::wait_until(cx.s.pace, target, || !cx.ctl.stop.load(Ordering::Relaxed));
    Some(target)
}

/// How late the request after a wait left: intended time → just before `send()`.
#[inline]
fn note_pacing(out: &mut StreamOutcome, target: &mut Option<Instant>, t0: Instant) {
    if let Some(t) = target.take() {
        out.pacing.record_ns(
            u64::try_from(t0.saturating_duration_since(t).as_nanos()).unwrap_or(u64::MAX),
        );
    }
}

fn tcp_rr(
    cx: &Ctx<'_>,
    conn: Option<TcpStream>,
    mut rec: Option<IntervalRecorder>,
) -> StreamOutcome {
    let mut out = StreamOutcome::default();
    let Some(mut sock) = conn else {
        out.error = Some("no data connection".into());
        return out;
    };
    out.local_addr = sock.local_addr().ok();
    let req = vec![0u8; cx.s.request_size as usize];
    let mut resp = vec![0u8; cx.s.response_size as usize];
    let mut now = cx.start;
    let mut target = None;
    'run: while cx.more(out.transactions, now) {
        for _ in 0..cx.s.burst {
            let t0 = Instant::now();
            note_pacing(&mut out, &mut target, t0);
            if let Err(e) = write_full(&mut sock, &req, || cx.keep()) {
                out.error = Some(format!("sending a request: {}", crate::error_chain(&e)));
                break 'run;
            }
            match read_full(&mut sock, &mut resp, || cx.keep()) {
                Ok(ReadEnd::Full) => {}
                Ok(ReadEnd::Stopped { .. }) => break 'run,
                Ok(ReadEnd::Closed { .. }) | Err(_) if cx.cutoff.load(Ordering::SeqCst) => {
                    if !cx.ctl.stop.load(Ordering::Relaxed) {
                        out.error = Some(format!(
                            "a transaction was still unanswered {} s after the end of the run",
                            IN_FLIGHT_GRACE.as_secs()
                        ));
                    }
                    break 'run;
                }
                Ok(ReadEnd::Closed { .. }) => {
                    out.error = Some("the server closed the data connection mid-test".into());
                    break 'run;
                }
                Err(e) => {
                    out.error = Some(format!("reading a response: {}", crate::error_chain(&e)));
                    break 'run;
                }
            }
            now = Instant::now();
            record(&mut out, &mut rec, cx.ctl, t0, now);
            if !cx.more(out.transactions, now) {
                break 'run;
            }
        }
        target = pause(cx, now);
        now = Instant::now();
    }
    if let Ok(ti) = sockopt::tcp_info(&sock) {
        out.retrans = u64::from(ti.total_retrans);
        out.info = Some(ti);
    }
    out
}

/// Sequence bytes carried at the start of a UDP request and echoed by the server.
fn seq_len(s: &RrSettings) -> usize {
    (s.request_size.min(s.response_size) as usize).min(8)
}

fn put_seq(buf: &mut [u8], seq: u64, k: usize) {
    buf[..k].copy_from_slice(&seq.to_le_bytes()[..k]);
}

fn get_seq(buf: &[u8], k: usize) -> u64 {
    let mut b = [0u8; 8];
    b[..k].copy_from_slice(&buf[..k]);
    u64::from_le_bytes(b)
}

fn udp_socket(cx: &Ctx<'_>) -> io::Result<UdpSocket> {
    let bind: SocketAddr = if cx.data.is_ipv4() {
        "0.0.0.0:0".parse().expect("literal")
    } else {
        "[::]:0".parse().expect("literal")
    };
    let u = UdpSocket::bind(bind)?;
    u.connect(cx.data)?;
    u.set_read_timeout(Some(cx.s.timeout.min(POLL_TICK)))?;
    Ok(u)
}

fn udp_rr(cx: &Ctx<'_>, mut rec: Option<IntervalRecorder>) -> StreamOutcome {
    let mut out = StreamOutcome::default();
    let u = match udp_socket(cx) {
        Ok(u) => u,
        Err(e) => {
            out.error = Some(format!("UDP data socket: {}", crate::error_chain(&e)));
            return out;
        }
    };
    out.local_addr = u.local_addr().ok();
    let k = seq_len(cx.s);
    let mask = if k >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * k)) - 1
    };
    let mut req = vec![0u8; cx.s.request_size as usize];
    let mut resp = vec![0u8; cx.s.response_size as usize + 1];
    let mut seq = 0u64;
    let mut now = cx.start;
    let mut target = None;
    let mut rto = UdpTimeout::new(UDP_TIMEOUT_FLOOR, cx.s.timeout);
    let mut sock_timeout = cx.s.timeout.min(POLL_TICK);
    'run: while cx.more(out.transactions + out.lost, now) {
        for _ in 0..cx.s.burst {
            seq += 1;
            put_seq(&mut req, seq, k);
            let limit = if cx.s.adaptive_timeout {
                rto.current()
            } else {
                cx.s.timeout
            };
            // Wake when the request is due to be lost, in whole ms (so that the
            // socket option changes only when the timeout really moves).
            let want = Duration::from_millis(
                u64::try_from(limit.min(POLL_TICK).as_millis()).unwrap_or(100) + 1,
            )
            .min(POLL_TICK);
            if want != sock_timeout && u.set_read_timeout(Some(want)).is_ok() {
                sock_timeout = want;
            }
            let t0 = Instant::now();
            note_pacing(&mut out, &mut target, t0);
            if let Err(e) = u.send(&req) {
                out.error = Some(format!("sending a request: {}", crate::error_chain(&e)));
                break 'run;
            }
            loop {
                match u.recv(&mut resp) {
                    Ok(n)
                        if n == cx.s.response_size as usize && get_seq(&resp, k) == seq & mask =>
                    {
                        now = Instant::now();
                        record(&mut out, &mut rec, cx.ctl, t0, now);
                        rto.sample(now - t0);
                        break;
                    }
                    Ok(_) => out.late_replies += 1,
                    Err(e)
                        if super::io::is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted =>
                    {
                        now = Instant::now();
                        if now - t0 >= limit {
                            out.lost += 1;
                            break;
                        }
                        if !cx.keep() {
                            break 'run;
                        }
                    }
                    Err(e) => {
                        out.error = Some(format!(
                            "receiving a response: {e} (is the server still running?)"
                        ));
                        break 'run;
                    }
                }
            }
            if !cx.more(out.transactions + out.lost, now) {
                break 'run;
            }
        }
        target = pause(cx, now);
        now = Instant::now();
    }
    out
}

fn tcp_crr(cx: &Ctx<'_>, mut rec: Option<IntervalRecorder>) -> StreamOutcome {
    let mut out = StreamOutcome::default();
    let req = vec![0u8; cx.s.request_size as usize];
    let mut resp = vec![0u8; cx.s.response_size as usize];
    let mut now = cx.start;
    let mut target = None;
    'run: while cx.more(out.transactions, now) {
        for _ in 0..cx.s.burst {
            let t0 = Instant::now();
            note_pacing(&mut out, &mut target, t0);
            let mut sock = match tcp_socket(cx.s, cx.data, true) {
                Ok(s) => s,
                Err(e) => {
                    let hint = if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) {
                        " (out of local ports: connections in TIME_WAIT; lower the rate or the duration)"
                    } else {
                        ""
                    };
                    out.error = Some(format!("connecting: {}{hint}", crate::error_chain(&e)));
                    break 'run;
                }
            };
            let tc = Instant::now();
            if let Err(e) = write_full(&mut sock, &req, || cx.keep()) {
                out.error = Some(format!("sending a request: {}", crate::error_chain(&e)));
                break 'run;
            }
            match read_full(&mut sock, &mut resp, || cx.keep()) {
                Ok(ReadEnd::Full) => {}
                Ok(ReadEnd::Stopped { .. }) => break 'run,
                Ok(ReadEnd::Closed { .. }) => {
                    out.error = Some("the server closed the connection before responding".into());
                    break 'run;
                }
                Err(e) => {
                    out.error = Some(format!("reading a response: {}", crate::error_chain(&e)));
                    break 'run;
                }
            }
            now = Instant::now();
            out.connect
                .record_ns(u64::try_from((tc - t0).as_nanos()).unwrap_or(u64::MAX));
            record(&mut out, &mut rec, cx.ctl, t0, now);
            if let Ok(ti) = sockopt::tcp_info(&sock) {
                out.retrans += u64::from(ti.total_retrans);
                out.info = Some(ti);
            }
            out.local_addr = out.local_addr.or(sock.local_addr().ok());
            drop(sock);
            if !cx.more(out.transactions, now) {
                break 'run;
            }
        }
        target = pause(cx, now);
        now = Instant::now();
    }
    out
}

enum Endpoint {
    Tcp(Option<TcpStream>),
    Udp,
}

struct Pending {
    seq: u64,
    intended: Instant,
    sent: Instant,
}

/// Open loop: a sender thread sends on the schedule; this thread receives and matches
/// replies (TCP: in order; UDP: by the echoed sequence number).
fn open_loop(
    cx: &Ctx<'_>,
    ol: OpenLoop,
    ep: Endpoint,
    mut rec: Option<IntervalRecorder>,
) -> StreamOutcome {
    let mut out = StreamOutcome::default();
    let (mut tx_tcp, mut rx_tcp, udp) = match ep {
        Endpoint::Tcp(Some(s)) => match s.try_clone() {
            Ok(c) => (Some(c), Some(s), None),
            Err(e) => {
                out.error = Some(format!("data socket: {}", crate::error_chain(&e)));
                return out;
            }
        },
        Endpoint::Tcp(None) => {
            out.error = Some("no data connection".into());
            return out;
        }
        Endpoint::Udp => match udp_socket(cx) {
            Ok(u) => (None, None, Some(u)),
            Err(e) => {
                out.error = Some(format!("UDP data socket: {}", crate::error_chain(&e)));
                return out;
            }
        },
    };
    out.local_addr = rx_tcp
        .as_ref()
        .and_then(|s| s.local_addr().ok())
        .or(udp.as_ref().and_then(|u| u.local_addr().ok()));
    let k = seq_len(cx.s);
    let mask = if k >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * k)) - 1
    };
    let pending: Mutex<VecDeque<Pending>> = Mutex::new(VecDeque::new());
    let sender_done = AtomicBool::new(false);
    let send_error: Mutex<Option<String>> = Mutex::new(None);
    let late_sends = std::thread::scope(|scope| {
        let sender = scope.spawn(|| {
            if let Some(c) = cx.s.local_cpu {
                let _ = cpu::pin_current_thread(c);
            }
            pacing::tighten_timer_slack();
            let mut arrivals = Arrivals::new(
                ol.rate_per_s,
                ol.schedule,
                0x9e37_79b9 ^ cx.start.elapsed().as_nanos() as u64,
            );
            let mut req = vec![0u8; cx.s.request_size as usize];
            let (mut seq, mut late) = (0u64, 0u64);
            while seq < cx.quota && !cx.ctl.stop.load(Ordering::Relaxed) {
                let intended = cx.start + arrivals.next_offset();
                if intended >= cx.deadline {
                    break;
                }
                if !pacing::wait_until(cx.s.pace, intended, || !cx.ctl.stop.load(Ordering::Relaxed))
                {
                    break;
                }
                while pending.lock().map_or(0, |p| p.len()) >= ol.max_outstanding as usize
                    && cx.keep()
                {
                    std::thread::sleep(Duration::from_micros(50));
                }
                seq += 1;
                put_seq(&mut req, seq, k);
                let sent = Instant::now();
                if sent - intended > Duration::from_millis(1) {
                    late += 1;
                }
                if let Ok(mut p) = pending.lock() {
                    p.push_back(Pending {
                        seq,
                        intended,
                        sent,
                    });
                }
                let r = match (&mut tx_tcp, &udp) {
                    (Some(t), _) => write_full(t, &req, || cx.keep()),
                    (None, Some(u)) => u.send(&req).map(|_| ()),
                    (None, None) => Ok(()),
                };
                if let Err(e) = r {
                    *send_error.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(format!("sending a request: {}", crate::error_chain(&e)));
                    break;
                }
            }
            sender_done.store(true, Ordering::Release);
            late
        });
        let mut resp = vec![0u8; cx.s.response_size as usize + 1];
        let rlen = cx.s.response_size as usize;
        loop {
            let idle = sender_done.load(Ordering::Acquire)
                && pending.lock().map_or(true, |p| p.is_empty());
            if idle || !cx.keep() {
                break;
            }
            if let Some(s) = rx_tcp.as_mut() {
                match read_full(s, &mut resp[..rlen], || {
                    cx.keep()
                        && !(sender_done.load(Ordering::Acquire)
                            && pending.lock().map_or(true, |p| p.is_empty()))
                }) {
                    Ok(ReadEnd::Full) => {
                        let t1 = Instant::now();
                        let front = pending.lock().ok().and_then(|mut p| p.pop_front());
                        if let Some(p) = front {
                            record(&mut out, &mut rec, cx.ctl, p.sent, t1);
                            out.intended.record_ns(
                                u64::try_from((t1 - p.intended).as_nanos()).unwrap_or(u64::MAX),
                            );
                        }
                    }
                    Ok(ReadEnd::Stopped { .. }) => break,
                    Ok(ReadEnd::Closed { .. }) | Err(_) => {
                        out.error = Some("the data connection broke mid-test".into());
                        break;
                    }
                }
            } else if let Some(u) = &udp {
                match u.recv(&mut resp) {
                    Ok(n) if n == rlen => {
                        let t1 = Instant::now();
                        let got = get_seq(&resp, k);
                        let matched = pending.lock().ok().and_then(|mut p| {
                            p.iter()
                                .position(|x| x.seq & mask == got)
                                .and_then(|i| p.remove(i))
                        });
                        match matched {
                            Some(p) => {
                                record(&mut out, &mut rec, cx.ctl, p.sent, t1);
                                out.intended.record_ns(
                                    u64::try_from((t1 - p.intended).as_nanos()).unwrap_or(u64::MAX),
                                );
                            }
                            None => out.late_replies += 1,
                        }
                    }
                    Ok(_) => out.late_replies += 1,
                    Err(e) if super::io::is_timeout(&e) => {}
                    Err(e) => {
                        out.error =
                            Some(format!("receiving a response: {}", crate::error_chain(&e)));
                        break;
                    }
                }
                // Requests older than the timeout are lost.
                let now = Instant::now();
                if let Ok(mut p) = pending.lock() {
                    while p.front().is_some_and(|x| now - x.sent >= cx.s.timeout) {
                        p.pop_front();
                        out.lost += 1;
                    }
                }
            }
        }
        sender.join().unwrap_or(0)
    });
    out.late_sends = late_sends;
    out.unanswered = pending.lock().map_or(0, |p| p.len() as u64);
    if out.error.is_none() {
        out.error = send_error.into_inner().unwrap_or_else(|p| p.into_inner());
    }
    if let Some(s) = &rx_tcp {
        if let Ok(ti) = sockopt::tcp_info(s) {
            out.retrans = u64::from(ti.total_retrans);
            out.info = Some(ti);
        }
    }
    out
}
