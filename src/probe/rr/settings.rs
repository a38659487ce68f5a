//! What an rr run is asked to do, how it is stopped, and why it can fail.

use crate::probe::control::{ControlError, TestKind};
use crate::probe::pacing::{PaceMode, Schedule};
use crate::stats::Percentile;
use serde::Serialize;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

/// How often a blocked socket call wakes up to look at the stop flag and deadline.
pub(super) const POLL_TICK: Duration = Duration::from_millis(100);
/// Transactions between looks at the CPU and updates of the shared progress count.
pub(super) const SAMPLE_EVERY: u64 = 64;
/// How long the server has to send its report at the end.
pub(super) const REPORT_WAIT: Duration = Duration::from_secs(10);
/// The same after the run was cut off because the server stopped answering.
pub(super) const REPORT_WAIT_CUT: Duration = Duration::from_secs(2);
/// How often the watchdog looks at the stop flag and the hard deadline.
pub(super) const WATCH_TICK: Duration = Duration::from_millis(50);
/// Time allowed to connect the control and data connections.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a transaction in flight at the end of the run may still complete.
pub(super) const IN_FLIGHT_GRACE: Duration = Duration::from_secs(5);
/// The adaptive UDP timeout's floor: a reply later than this on a sub-millisecond path
/// is a scheduling stall more often than a loss, and is still counted late if it comes.
pub const UDP_TIMEOUT_FLOOR: Duration = Duration::from_millis(10);
/// A run bounded only by count still ends after this.
pub const MAX_RUN: Duration = Duration::from_secs(3600);
/// Cap on the `--tcpinfo-interval` series kept in memory.
pub(super) const MAX_TCPINFO_SAMPLES: usize = 100_000;

/// Open-loop settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct OpenLoop {
    /// Requests per second per stream.
    pub rate_per_s: f64,
    /// `--schedule`: fixed or Poisson gaps between the intended send times.
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
    /// The shared secret the control handshake proves (`--secret-file` or
    /// `RTTLAB_SECRET`); `None`: run only against a server that asks for none.
    pub secret: Option<Vec<u8>>,
    /// `-t`: TCP_RR, UDP_RR or TCP_CRR.
    pub test: TestKind,
    /// `-r REQ,RESP`: bytes of each request.
    pub request_size: u32,
    /// `-r REQ,RESP`: bytes of each response (raised to the anatomy's minimum with
    /// `--anatomy`).
    pub response_size: u32,
    /// `-l`: run this long.
    pub duration: Option<Duration>,
    /// `-n`: run this many transactions in all (split across streams).
    pub count: Option<u64>,
    /// `-w`: wait between receipt of a response and the next request.
    pub interval: Duration,
    /// `--pace` or `--spin`: how the interval is waited (sleep, spin or hybrid).
    pub pace: PaceMode,
    /// `-b`: transactions back to back per interval.
    pub burst: u32,
    /// `--streams`: parallel connections, each with its own thread.
    pub streams: u32,
    /// Start stream i at i/streams of `interval`, so that many streams' requests do
    /// not leave in one burst every interval (seed 000 started its netperfs 50 ms apart).
    pub spread_starts: bool,
    /// `-P`: fixed server data port (0: any).
    pub data_port: u16,
    /// `--thin-linear-timeouts`: TCP_THIN_LINEAR_TIMEOUTS on both ends' data sockets.
    pub thin_linear_timeouts: bool,
    /// `--cc`: congestion control (TCP_CONGESTION) of both ends' data sockets;
    /// `None`: the system's default.
    pub congestion: Option<String>,
    /// `-T LCPU,`: pin the client's stream threads to this CPU; `None`: not pinned.
    pub local_cpu: Option<usize>,
    /// `-T ,RCPU`: the CPU the server is asked to pin its side to; `None`: not pinned.
    pub remote_cpu: Option<usize>,
    /// UDP: a request without a reply after this is lost; with `adaptive_timeout`, the
    /// ceiling of the adaptive timeout.
    pub timeout: Duration,
    /// UDP_RR (closed loop): the timeout follows the measured round trips as TCP's RTO
    /// does ([`crate::probe::udp_timeout`]): SRTT + max(4·RTTVAR, [`UDP_TIMEOUT_FLOOR`]), at most
    /// `timeout`.
    pub adaptive_timeout: bool,
    /// `--rate`: send on a schedule whatever the replies do; `None`: closed loop.
    pub open_loop: Option<OpenLoop>,
    /// `--tcpinfo-interval`: sample the client's tcp_info this often during the run;
    /// `None`: no series.
    pub tcpinfo_interval: Option<Duration>,
    /// Tell the server to drop one UDP request in N (tests loss accounting).
    pub udp_drop_one_in: Option<u32>,
    /// `--percentiles`: the latency percentiles the result carries.
    pub percentiles: Vec<Percentile>,
    /// `--hdr-log`: write the latencies here as an HdrHistogram interval log (a tag
    /// per stream, an interval per second).
    pub hdr_log: Option<PathBuf>,
    /// Traffic class, interface, source address, mark and socket buffers.
    pub path: crate::probe::path::PathOptions,
    /// `--anatomy`: split every transaction into its components from the kernel's
    /// stamps on both ends (`probe::anatomy`).
    pub anatomy: bool,
    /// `--server-delay`: the server waits this long before answering each request.
    pub server_delay: Duration,
    /// Keep every transaction's time and round trip (`RrResult::series`), for a caller
    /// that lines them up with other layers' (`compare`'s time series).
    pub keep_series: bool,
    /// `--slow-log FILE`: slow transactions' anatomies as JSON lines.
    pub slow_log: Option<PathBuf>,
    /// `--raw-log FILE`: every transaction as a JSON line, written as the run goes.
    pub raw_log: Option<PathBuf>,
    /// `--tail PCT`: the share of the slowest transactions the anatomy's tail and the
    /// end-of-run slow log hold, parts per million (1 %: 10 000).
    pub tail_ppm: u32,
    /// `--slow THRESHOLD`: log every transaction at least this slow (without it, the
    /// slowest share at the end).
    pub slow: Option<Duration>,
    /// `--recv spin`: wait for responses by reading without blocking (`MSG_DONTWAIT`)
    /// until the response is in, instead of sleeping in `recv()`, so the client's
    /// wake-up is not in the round trip. Requests are still sent by blocking writes.
    pub recv_spin: bool,
    /// `--split-request`: TCP_RR writes each request in two `send()` calls (its first
    /// byte, then the rest) on a socket with Nagle's algorithm on (no TCP_NODELAY):
    /// the header-then-body pattern whose second write waits for the first's ACK
    /// (RFC 1122 §4.2.3.4; `tcp_nagle_check`, `tcp_minshall_check`), which the
    /// server's delayed-ACK timer sends (RFC 1122 §4.2.3.2, `tcp_send_delayed_ack`).
    pub split_request: bool,
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
            path: crate::probe::path::PathOptions::default(),
            anatomy: false,
            keep_series: false,
            server_delay: Duration::ZERO,
            slow_log: None,
            raw_log: None,
            slow: None,
            tail_ppm: crate::probe::anatomy::TAIL_PPM,
            recv_spin: false,
            split_request: false,
        }
    }
}

impl RrSettings {
    /// Whether the run measures irtt's one-way delays without `--anatomy`: open-loop
    /// UDP_RR with one stream (the server's stamps of its one socket are numbered
    /// across streams) and responses long enough to carry the server's stamps
    /// ([`MIN_RESPONSE`](crate::probe::anatomy::MIN_RESPONSE); the command line
    /// raises them). The server is asked for its stamps as `--anatomy` asks.
    pub fn one_way(&self) -> bool {
        self.test == TestKind::UdpRr
            && self.open_loop.is_some()
            && self.streams == 1
            && self.response_size >= crate::probe::anatomy::MIN_RESPONSE
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
    /// This end could not take the path asked for (bind, interface, mark).
    #[error("the client's end of the path")]
    LocalPath(#[source] io::Error),
    /// The server accepted the connection and never greeted.
    #[error("{0} accepted the connection but sent no rttlab greeting in 10 s: is it `rttlab serve`? (netserver listens on 12865, rttlab serve on 12866)")]
    NoGreeting(SocketAddr),
    /// The control connection could not be made.
    #[error("cannot reach the rttlab server at {addr} (is `rttlab serve` running there?)")]
    Connect {
        /// The server's control address.
        addr: SocketAddr,
        /// Why the connection failed.
        #[source]
        source: io::Error,
    },
    /// The control conversation failed.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The server closed the connection before answering the handshake: a server
    /// that drops a client says why in an Error first, so this is one that could not
    /// (out of descriptors or threads) or not an rttlab server at all.
    #[error("the server at {0} closed the connection during the handshake (busy or refusing connections); try again later")]
    ClosedInHandshake(SocketAddr),
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
        /// The data port the server announced.
        port: u16,
        /// Why the connection or socket setup failed.
        #[source]
        source: io::Error,
    },
    /// An output file (`--hdr-log`, `--slow-log`, `--raw-log`) could not be created.
    #[error("{flag}")]
    Output {
        /// The flag that named the file, e.g. `--hdr-log`.
        flag: &'static str,
        /// Why the file could not be created.
        #[source]
        source: crate::kernel::fs::FileError,
    },
    /// `--hdr-log`'s header could not be written.
    #[error("--hdr-log: writing the header")]
    HdrLog(#[source] io::Error),
    /// A setting the server's limits forbid, caught before asking.
    #[error("{0}")]
    Limit(String),
}
