//! What an rr run reports: its settings, every layer's numbers, and both hosts' facts.

use super::settings::OpenLoop;
use crate::kernel::cpu::Placement;
use crate::kernel::host::HostFacts;
use crate::kernel::tcp_info::TcpInfo;
use crate::stats::{LatencyHistogram, Summary};
use serde::Serialize;
use std::net::SocketAddr;
/// The settings as a result reports them.
#[derive(Clone, Debug, Serialize)]
pub struct RrReportSettings {
    /// `-t`: "TCP_RR", "UDP_RR" or "TCP_CRR".
    pub test: &'static str,
    /// `-r REQ,RESP`: bytes of each request.
    pub request_size: u32,
    /// Bytes of each response, after `--anatomy` raised it to its minimum.
    pub response_size: u32,
    /// `-w`: the wait between a response and the next request, µs (0: back to back).
    pub interval_us: f64,
    /// `-b`: transactions back to back per interval.
    pub burst: u32,
    /// How the interval was waited (`--pace`, `--spin`): "sleep", "spin" or "hybrid".
    pub pacing: &'static str,
    /// `--streams`: parallel connections, each with its own thread.
    pub streams: u32,
    /// `-l`: the run's length asked for, s; None: no time limit.
    pub duration_limit_s: Option<f64>,
    /// `-n`: the transactions asked for, all streams together; None: no count limit.
    pub count_limit: Option<u64>,
    /// The server's control address.
    pub server: SocketAddr,
    /// The local address of a client data socket (the first stream's to have one;
    /// TCP_CRR: a connection's); None when no data socket was opened.
    pub local_data_addr: Option<SocketAddr>,
    /// The data port the server opened for the run (fixed with `-P`).
    pub remote_data_port: u16,
    /// The client's data sockets set TCP_NODELAY (not with `--split-request`).
    pub nodelay: bool,
    /// `--split-request`: each request written in two `send()` calls.
    pub split_request: bool,
    /// `--thin-linear-timeouts`: TCP_THIN_LINEAR_TIMEOUTS on both ends' data sockets.
    pub thin_linear_timeouts: bool,
    /// The data sockets' congestion control: `--cc`, else the one the server reported
    /// using; None when neither is known.
    pub congestion: Option<String>,
    /// UDP_RR: the time after which a request without a reply is lost, ms
    /// (`--timeout`); None for the TCP tests.
    pub timeout_ms: Option<f64>,
    /// The UDP timeout adapts to the round trips (`timeout_ms` is then its ceiling).
    pub timeout_adaptive: bool,
    /// `--rate`: the open-loop schedule; None: closed loop.
    pub open_loop: Option<OpenLoop>,
    /// `--anatomy`.
    pub anatomy: bool,
    /// `--server-delay`, µs.
    pub server_delay_us: f64,
    /// `--recv`: how the client waited for responses ("block" or "spin").
    pub recv: &'static str,
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
    /// Requests whose reply never arrived while the client ran (a reply after its
    /// timeout is late, not lost).
    pub lost: u64,
    /// Replies that arrived after their request's timeout: each is a transaction,
    /// counted with its round trip (and its anatomy), and not lost.
    pub late_replies: u64,
    /// Datagrams that answered no request (the wrong size, a duplicate, or a reply
    /// later than 64 more timeouts).
    #[serde(default)]
    pub stray_replies: u64,
    /// Requests the server dropped on purpose (`--udp-drop-one-in`).
    pub dropped_by_server: u64,
}

/// One `--tcpinfo-interval` sample of a client data socket.
#[derive(Clone, Debug, Serialize)]
pub struct TcpInfoSample {
    /// When it was read, ms after the data phase began.
    pub t_ms: f64,
    /// Which data socket: its index among the client's TCP_RR connections (0-based).
    pub stream: usize,
    /// The socket's `tcp_info` at that moment.
    pub info: TcpInfo,
}

/// Everything an rr run measured, with the settings that shaped it.
#[derive(Clone, Debug, Serialize)]
pub struct RrResult {
    /// What the run was asked to do, as reported.
    pub settings: RrReportSettings,
    /// `-B`/`--brand`: a label the user gave the run (netperf's -B), shown in its
    /// report's heading line.
    pub brand: Option<String>,
    /// The client's machine and kernel.
    pub local_host: HostFacts,
    /// The server's machine and kernel: from its end-of-run report, else from the
    /// control handshake.
    pub remote_host: Option<HostFacts>,
    /// The data phase's length, s: from the streams' common start to the last one's
    /// end.
    pub elapsed_s: f64,
    /// Transactions completed, all streams together (UDP_RR: late replies included).
    pub transactions: u64,
    /// `transactions` / `elapsed_s` (0 when nothing elapsed).
    pub throughput_tps: f64,
    /// Round-trip time of each transaction (actual send → last byte of the response);
    /// `rtt` in JSON, as every layer's round trip is.
    #[serde(rename = "rtt")]
    pub latency: Summary,
    /// Every transaction's round trip, all streams: what `latency` summarises. Not
    /// serialized.
    #[serde(skip)]
    pub histogram: LatencyHistogram,
    /// TCP_CRR: time of the connect() alone.
    pub connect: Option<Summary>,
    /// With `-w`: how late each request after a wait left (intended time → just before
    /// `send()`), the pacing's own error.
    pub pacing_error: Option<Summary>,
    /// `--rate`: response times against the schedule, and what was left unanswered;
    /// None: closed loop.
    pub open_loop: Option<OpenLoopStats>,
    /// UDP_RR: lost, late and stray replies; None for the TCP tests.
    pub udp: Option<UdpStats>,
    /// Transactions the server counted.
    pub remote_transactions: Option<u64>,
    /// The client's data sockets' `tcp_info` at the end, one per stream (TCP_CRR: the
    /// stream's last connection's); empty for UDP_RR.
    pub local_tcp_info: Vec<TcpInfo>,
    /// The server's data sockets' `tcp_info` at the end, from its report; empty when
    /// it had none or its report could not be collected.
    pub remote_tcp_info: Vec<TcpInfo>,
    /// Segments retransmitted by the client's data sockets.
    pub local_retrans: Option<u64>,
    /// Segments retransmitted by the server's data sockets.
    pub remote_retrans: Option<u64>,
    /// Where the client's stream threads ran: pinning (`-T LCPU,`), allowed and
    /// seen CPUs, migrations.
    pub local_placement: Placement,
    /// The same for the server's threads, from its report; None when it could not be
    /// collected.
    pub remote_placement: Option<Placement>,
    /// CPU time of the client's measuring threads per transaction.
    pub client_cpu_us_per_transaction: Option<f64>,
    /// `--tcpinfo-interval`: the client's TCP_RR data sockets sampled during the run,
    /// in time order; empty without it.
    pub tcpinfo_series: Vec<TcpInfoSample>,
    /// What cut the run short, if anything; the numbers above are what was measured.
    pub error: Option<String>,
    /// With netperf's `-I`/`-i`: the iterations run and the interval they reached (the
    /// rest of the result is the last iteration's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confidence: Option<Confidence>,
    /// netperf's -c: the client machine's CPU use over the data phase (all CPUs,
    /// everything on them) and its service demand.
    pub local_cpu: Option<crate::kernel::cpu::CpuUse>,
    /// netperf's -C: the server machine's, as the server measured it.
    pub remote_cpu: Option<crate::kernel::cpu::CpuUse>,
    /// `--anatomy`: every transaction split into what each host and the path took.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anatomy: Option<crate::probe::anatomy::AnatomyResult>,
    /// Open-loop UDP_RR (one stream): irtt's one-way delays, from the server's stamps
    /// that ride back in the responses: `request` is the send delay (the client's
    /// `send()` → the request's RX stamp on the server), `response` the receive delay
    /// (the response's TX stamp on the server → its RX stamp on the client), their
    /// IPDV, and the losses by direction. Exact on one kernel (`clock` "same"); between
    /// hosts ("separate") only as good as the clocks' sync. Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub one_way: Option<crate::probe::anatomy::OneWay>,
    /// With `keep_series`: every transaction as (seconds from the start, round trip
    /// ns), in time order; `tcpinfo_series` counts from the same start.
    #[serde(skip)]
    pub series: Vec<(f64, u64)>,
    /// The start, CLOCK_REALTIME ns: where the series sit among other clocks' samples.
    #[serde(skip)]
    pub started_unix_ns: u64,
}

/// netperf's `-I LEVEL,WIDTH -i MAX,MIN`: iterations of the same test until the mean
/// transactions/s is known to within ±WIDTH/2 % at LEVEL % confidence, or MAX ran.
#[derive(Clone, Debug, Serialize)]
pub struct Confidence {
    /// `-I LEVEL,`: the confidence level asked for, percent (95 or 99).
    pub level_percent: u32,
    /// The interval's whole width asked for, as a percentage of the mean.
    pub width_percent_asked: f64,
    /// The width reached (Student's t over the iterations' transactions/s).
    pub width_percent: f64,
    /// Whether the width reached is within the width asked for.
    pub met: bool,
    /// `-i ,MIN`: iterations to run before the width may end the test (the code
    /// waits for 2 at least, whatever MIN says).
    pub min_iterations: usize,
    /// `-i MAX,`: iterations after which the test ends, width met or not.
    pub max_iterations: usize,
    /// The mean of the iterations' transactions/s.
    pub throughput_tps_mean: f64,
    /// Each iteration's transactions/s and mean round trip.
    pub throughput_tps: Vec<f64>,
    /// Each iteration's mean round trip, µs (`mean_rtt_us` in JSON).
    #[serde(rename = "mean_rtt_us")]
    pub mean_latency_us: Vec<f64>,
}
