//! `rttlab rr`.

use super::output::{self, OutputArgs};
use super::progress::{on_interrupt, ProgressLine};
use super::values;
use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use rttlab::kernel::privilege::Capability;
use rttlab::probe::control::{Limits, TestKind, DEFAULT_CONTROL_PORT};
use rttlab::probe::pacing::{PaceMode, Schedule};
use rttlab::probe::rr::{self, OpenLoop, RrSettings, RunControl};
use rttlab::probe::server::{Server, ServerConfig};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Copy, Debug, ValueEnum)]
#[value(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TestArg {
    TcpRr,
    UdpRr,
    TcpCrr,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum PaceArg {
    Sleep,
    Spin,
    Hybrid,
}

impl PaceArg {
    /// `--spin` or `--pace`: how to wait (sleep when neither is given).
    pub fn mode(spin: bool, pace: Option<PaceArg>) -> PaceMode {
        match (spin, pace) {
            (true, _) | (false, Some(PaceArg::Spin)) => PaceMode::Spin,
            (false, Some(PaceArg::Hybrid)) => PaceMode::Hybrid {
                margin: PaceMode::HYBRID_MARGIN,
            },
            _ => PaceMode::Sleep,
        }
    }
}

/// How the client waits for a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RecvArg {
    /// Sleep in recv() until the response wakes the thread (netperf, sockperf).
    Block,
    /// Poll a non-blocking socket: the client's wake-up leaves the round trip, at the
    /// cost of a CPU (sockperf --busy-poll's idea, in user space).
    Spin,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ScheduleArg {
    Fixed,
    Poisson,
}

#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  rttlab rr
      1-byte TCP_RR for 10 s against an in-process server
  rttlab rr -n 10000 -T 0,0
      10000 transactions, both ends on CPU 0
  rttlab rr -t UDP_RR -r 64,64 --timeout 50ms
  rttlab rr -t TCP_CRR -l 5
      a connection per transaction; connect time reported apart
  rttlab rr -w 10ms --pace hybrid -b 4
      4 back-to-back transactions every 10 ms
  rttlab rr --rate 2000/s --schedule poisson
      open loop: service time and time from intended send
  rttlab rr -t UDP_RR --rate 100/s -l 60 -H 192.0.2.7
      irtt's fixed schedule: one-way delays, IPDV, loss by way
  rttlab rr -t UDP_RR --rate 50/s --raw-log rr.jsonl
      every transaction as a JSON line (irtt -o, sockperf --full-log)
  rttlab rr -H 192.0.2.7 -o MIN_LATENCY,P50_LATENCY,P99_LATENCY,THROUGHPUT
  rttlab rr -I 99,5 -i 10,3 -l 5
      repeat until transactions/s is known ±2.5 % (netperf's CIs)
  rttlab rr -H 192.0.2.7 --dscp 46
      EF both ways (the server answers in kind)
  rttlab rr -H 192.0.2.7 --mark 7
      the uplink `ip rule add fwmark 7 …` picks
  rttlab rr --anatomy -T 0,1
      where each µs went: stacks, wake-ups, the path
  rttlab rr --anatomy --recv spin -T 0,1
      the same without the client's wake-up
  rttlab rr --anatomy --server-delay 2ms
      a server that thinks 2 ms per request
  rttlab rr --anatomy --slow-log slow.jsonl
      the slowest 1 % of transactions, each taken apart
  rttlab rr -H server -t TCP_RR -- -r 1,2 -o MIN_LATENCY,P99_LATENCY -P ,13500
      a netperf line pasted: netperf's options either side of --, its output
  rttlab rr -P 0 -H server -t UDP_RR -w 10ms -b 1 -- -r 64 -O THROUGHPUT
      netperf's -P 0 (no banner, no header lines) and -O (columns)")]
pub struct RrArgs {
    /// Server running `rttlab serve`; without it an in-process server on loopback is used.
    #[arg(short = 'H', long = "host")]
    pub host: Option<String>,
    /// Server control port.
    #[arg(short = 'p', long = "port", default_value_t = DEFAULT_CONTROL_PORT)]
    pub port: u16,
    /// Use IPv4 only when resolving the host.
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Use IPv6 only when resolving the host.
    #[arg(short = '6')]
    pub ipv6: bool,
    /// Test type.
    #[arg(
        short = 't',
        long = "test",
        value_enum,
        default_value = "TCP_RR",
        ignore_case = true
    )]
    pub test: TestArg,
    /// Request and response sizes in bytes, REQ,RESP.
    #[arg(short = 'r', long = "sizes", value_name = "REQ,RESP", default_value = "1,1", value_parser = values::sizes)]
    pub sizes: (u32, u32),
    /// Run length (a bare number is seconds; negative, as netperf's -l -N: N
    /// transactions). Default 10 s unless -n is given.
    #[arg(short = 'l', long = "duration", alias = "length", value_name = "DURATION", value_parser = run_length, allow_negative_numbers = true)]
    pub length: Option<RunLength>,
    /// Number of transactions in all (split over the streams).
    #[arg(short = 'n', long = "count")]
    pub count: Option<u64>,
    /// Wait between a response and the next request (e.g. 10ms, 250us).
    #[arg(short = 'w', long = "interval", alias = "wait", value_name = "INTERVAL", default_value = "0", value_parser = values::duration)]
    pub wait: Duration,
    /// Busy-wait the interval (same as --pace spin).
    #[arg(long, conflicts_with = "pace")]
    pub spin: bool,
    /// How to wait: sleep, spin, or hybrid (sleep, then spin the last 200 µs).
    #[arg(long, value_enum)]
    pub pace: Option<PaceArg>,
    /// Transactions back to back per interval.
    #[arg(short = 'b', long = "burst", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub burst: u32,
    /// Parallel connections.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub streams: u32,
    /// Fixed server data port (Hogan and Jones's blackout drops one port).
    #[arg(short = 'P', long = "data-port", default_value_t = 0)]
    pub data_port: u16,
    /// Turn on thin-stream linear timeouts on both ends' data sockets.
    #[arg(long)]
    pub thin_linear_timeouts: bool,
    /// Congestion control for both ends' data sockets (e.g. cubic).
    #[arg(long = "cc")]
    pub congestion: Option<String>,
    /// Pin client and server to CPUs: LCPU,RCPU (either may be empty).
    #[arg(short = 'T', value_name = "LCPU,RCPU", value_parser = values::cpu_pair)]
    pub cpus: Option<(Option<usize>, Option<usize>)>,
    /// UDP: a request with no reply after this is lost. Without it, UDP_RR's timeout
    /// follows the round trips as TCP's RTO does (smoothed RTT + 4 deviations, the
    /// deviations' part at least 10 ms, the whole at most 1 s), so a loss costs about a
    /// round trip, not a second.
    #[arg(long, value_parser = values::duration)]
    pub timeout: Option<Duration>,
    /// Open loop: send at this rate per stream whatever the replies do (e.g. 1000/s).
    /// UDP_RR with one stream also gives irtt's one-way delays (send: the client's
    /// send → the server's receive; receive: the server's send → the client's
    /// receive), their IPDV (each delay minus the one before it; no clock sync needed)
    /// and losses by direction, from the server's kernel stamps that ride back in the
    /// responses (which grow to 40 bytes to carry them). One-way delays between two
    /// hosts are only as good as their clocks' sync (NTP: ms, PTP: µs); on one host or
    /// in the lab they are exact. RTT and IPDV need no sync.
    #[arg(long, value_parser = values::rate)]
    pub rate: Option<f64>,
    /// Open-loop arrival schedule.
    #[arg(long, value_enum, default_value = "fixed", requires = "rate")]
    pub schedule: ScheduleArg,
    /// Open loop: most requests without a reply before the sender waits.
    #[arg(long, default_value_t = 1000, requires = "rate")]
    pub max_outstanding: u32,
    /// Sample the client's tcp_info this often during the run (e.g. 10ms).
    #[arg(long, value_parser = values::duration)]
    pub tcpinfo_interval: Option<Duration>,
    /// Ask the server to drop one UDP request in N (to check loss accounting), e.g. 1/10.
    #[arg(long, value_parser = values::one_in, value_name = "1/N")]
    pub udp_drop: Option<u32>,
    /// netperf's -I: repeat the test (see -i) until the mean transactions/s is known
    /// to within ±WIDTH/2 % at LEVEL % confidence (95 or 99), e.g. 99,5.
    #[arg(short = 'I', value_name = "LEVEL,WIDTH", value_parser = confidence_arg)]
    pub confidence: Option<(u32, f64)>,
    /// netperf's -c: show the client machine's CPU use and service demand (µs of CPU,
    /// all CPUs, per transaction); --json and the selectors always have it.
    #[arg(short = 'c', long = "local-cpu")]
    pub local_cpu: bool,
    /// netperf's -C: the same for the server's machine, as the server measured it.
    #[arg(short = 'C', long = "remote-cpu")]
    pub remote_cpu: bool,
    /// netperf's -D: an interim result every INTERVAL on stdout while the test runs
    /// (under --json a JSON line each, and the final result as one line too).
    #[arg(short = 'D', long = "interim", value_name = "INTERVAL", value_parser = values::seconds)]
    pub interim: Option<Duration>,
    /// netperf's -i: at most MAX and at least MIN iterations for -I (default 10,3).
    #[arg(short = 'i', value_name = "MAX,MIN", value_parser = iterations_arg, requires = "confidence")]
    pub iterations: Option<(usize, usize)>,
    /// TOS byte (IPv6: traffic class) of both ends' data, decimal or 0x hex: the server
    /// answers with the same (ECN's two bits left to the kernel).
    #[arg(long, value_parser = values::tos_byte, conflicts_with = "dscp")]
    pub tos: Option<u8>,
    /// DSCP (0-63) of both ends' data: --dscp 46 is --tos 0xb8 (EF).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..64))]
    pub dscp: Option<u8>,
    /// Send through this interface only (SO_BINDTODEVICE), control and data.
    #[arg(long, value_name = "IFACE")]
    pub interface: Option<String>,
    /// Send from this local address (netperf's -L), control and data.
    #[arg(short = 'L', long, value_name = "ADDR")]
    pub bind: Option<std::net::IpAddr>,
    /// The client's data socket source port (netperf's test-specific `-P LPORT,`; the
    /// server's is -P/--data-port): TCP_RR or UDP_RR over one stream.
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    pub local_data_port: Option<u16>,
    /// netperf's test-specific -o as netperf prints it: a line of netperf's column
    /// names ("Minimum Latency Microseconds") and a line of values in its formats,
    /// after its banner line (what `rr … -- -o LIST` becomes).
    #[arg(long, value_name = "LIST", conflicts_with_all = ["json", "csv", "output", "netperf_columns"])]
    pub netperf_csv: Option<String>,
    /// netperf's test-specific -O: the same as aligned columns under four header
    /// lines (what `rr … -- -O LIST` becomes).
    #[arg(long, value_name = "LIST", conflicts_with_all = ["json", "csv", "output"])]
    pub netperf_columns: Option<String>,
    /// netperf's -P 0: no banner (the settings lines above the tables; with
    /// --netperf-csv/--netperf-columns the banner and the header lines: values only).
    #[arg(long, conflicts_with_all = ["json", "csv", "output"])]
    pub no_banner: bool,
    /// Firewall mark of the client's sockets, for policy routing (SO_MARK, needs
    /// CAP_NET_ADMIN): `ip rule add fwmark N table T` picks the uplink.
    #[arg(long)]
    pub mark: Option<u32>,
    /// The client's data socket send buffer (SO_SNDBUF; the kernel doubles it), e.g. 64KiB.
    #[arg(long, value_parser = values::bytes, value_name = "BYTES")]
    pub sndbuf: Option<u64>,
    /// The client's data socket receive buffer (SO_RCVBUF), e.g. 64KiB.
    #[arg(long, value_parser = values::bytes, value_name = "BYTES")]
    pub rcvbuf: Option<u64>,
    /// Split every transaction into client send path, network, server receive and
    /// wake-up, server application and send, client receive and wake-up, from the
    /// kernel's software stamps on both ends (TCP_RR and UDP_RR; responses grow to 40
    /// bytes to carry the server's stamps). TCP adds the kernel's request → ACK time;
    /// UDP_RR adds one-way delays, their jitter and losses by direction.
    #[arg(long)]
    pub anatomy: bool,
    /// The server waits this long between reading each request and answering it (a
    /// server that thinks), e.g. 2ms; at most 1 s.
    #[arg(long, value_parser = values::duration, value_name = "DURATION")]
    pub server_delay: Option<Duration>,
    /// With --anatomy: write slow transactions' anatomies here as JSON lines
    /// (rttlab.rr-slow/1): the slowest 1 % at the end, or with --slow every one over it.
    #[arg(long, value_name = "FILE", requires = "anatomy")]
    pub slow_log: Option<std::path::PathBuf>,
    /// Write every transaction as a JSON line (rttlab.rr-raw/1) while the run goes, as
    /// irtt -o or sockperf --full-log: stream, seq, sent_unix_ns (client clock), rtt_ns,
    /// received_unix_ns (= sent + rtt), the stamps the run has (open-loop UDP_RR:
    /// client_rx_unix_ns, server_rx_unix_ns, server_tx_unix_ns and irtt's
    /// send_delay_ns / receive_delay_ns), lost, late and lost_way ("request",
    /// "response" or null). Lines come as transactions settle, not in seq order (a
    /// lost one once it can no longer be answered late). See docs/schema/rr-raw.json.
    #[arg(long, value_name = "FILE")]
    pub raw_log: Option<std::path::PathBuf>,
    /// With --anatomy: the share of slowest transactions the tail table and the
    /// end-of-run --slow-log hold, %, e.g. 0.1 (exactly the top ceil(n × PCT/100)).
    #[arg(long, value_name = "PCT", requires = "anatomy", default_value = "1", value_parser = tail_pct)]
    pub tail: u32,
    /// With --slow-log: log every transaction at least this slow as it happens, e.g. 1ms.
    #[arg(long, value_parser = values::duration, value_name = "THRESHOLD", requires = "slow_log")]
    pub slow: Option<Duration>,
    /// TCP_RR: write each request in two send() calls, its first byte then the rest,
    /// with Nagle's algorithm on: the header-then-body pattern whose second write
    /// waits for the first's ACK, which the server's delayed-ACK timer sends.
    #[arg(long)]
    pub split_request: bool,
    /// How the client waits for each response: block in recv() or spin on a
    /// non-blocking socket (no wake-up in the round trip).
    #[arg(long, value_enum, default_value = "block")]
    pub recv: RecvArg,
    #[command(flatten)]
    pub secret: super::secret::SecretArgs,
    #[command(flatten)]
    pub out: OutputArgs,
    /// A label carried in the result (netperf's -B).
    #[arg(short = 'B', long = "brand", value_name = "TEXT")]
    pub brand: Option<String>,
}

/// `-l` as netperf reads it: a time, or with a minus sign a count of transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunLength {
    /// Run this long.
    Time(Duration),
    /// Run this many transactions (netperf's `-l -N`).
    Transactions(u64),
}

fn run_length(s: &str) -> Result<RunLength, String> {
    match s.trim().strip_prefix('-') {
        Some(n) => n
            .parse::<u64>()
            .ok()
            .filter(|&n| n > 0)
            .map(RunLength::Transactions)
            .ok_or_else(|| {
                format!(
                    "{s:?}: a negative -l is a count of transactions, e.g. -l -1000 (as netperf)"
                )
            }),
        None => values::seconds(s).map(RunLength::Time),
    }
}

/// `--tail PCT` as parts per million: above 0 and at most 100, to 0.0001 %.
fn tail_pct(s: &str) -> Result<u32, String> {
    let pct: f64 = s
        .trim_end_matches('%')
        .parse()
        .map_err(|e| format!("{s:?}: {e}"))?;
    let ppm = (pct * 1e4).round();
    if !(1.0..=1e6).contains(&ppm) {
        return Err(format!("{s:?}: a share above 0 and at most 100 %"));
    }
    Ok(ppm as u32)
}

fn confidence_arg(s: &str) -> Result<(u32, f64), String> {
    let (l, w) = s
        .split_once(',')
        .ok_or_else(|| format!("{s:?}: LEVEL,WIDTH, e.g. 99,5"))?;
    let level: u32 = l
        .trim()
        .parse()
        .map_err(|_| format!("{l:?} is not a level"))?;
    rttlab::stats::confidence::Level::from_percent(level).map_err(|e| e.to_string())?;
    let width: f64 = w
        .trim()
        .parse()
        .map_err(|_| format!("{w:?} is not a width in %"))?;
    if !(width > 0.0 && width < 100.0) {
        return Err(format!("width {width}%: between 0 and 100"));
    }
    Ok((level, width))
}

fn iterations_arg(s: &str) -> Result<(usize, usize), String> {
    let (a, b) = s.split_once(',').unwrap_or((s, s));
    let max: usize = a
        .trim()
        .parse()
        .map_err(|_| format!("{a:?} is not a count"))?;
    let min: usize = b
        .trim()
        .parse()
        .map_err(|_| format!("{b:?} is not a count"))?;
    if !(1..=30).contains(&max) || min > max || min < 1 {
        return Err(format!(
            "-i {s}: MAX,MIN with 1 ≤ MIN ≤ MAX ≤ 30, as netperf's"
        ));
    }
    Ok((max, min))
}

/// Resolve `host:port`, honouring -4/-6.
pub fn resolve(host: &str, port: u16, v4: bool, v6: bool) -> anyhow::Result<SocketAddr> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve host {host:?}: check the name or use an address"))?
        .collect();
    addrs
        .iter()
        .copied()
        .find(|a| (!v4 || a.is_ipv4()) && (!v6 || a.is_ipv6()))
        .with_context(|| {
            format!(
                "host {host:?} has no {} address",
                if v4 { "IPv4" } else { "IPv6" }
            )
        })
}

impl RrArgs {
    fn settings(&self, server: SocketAddr) -> anyhow::Result<RrSettings> {
        let mut s = RrSettings::new(server);
        s.test = match self.test {
            TestArg::TcpRr => TestKind::TcpRr,
            TestArg::UdpRr => TestKind::UdpRr,
            TestArg::TcpCrr => TestKind::TcpCrr,
        };
        (s.request_size, s.response_size) = self.sizes;
        // Against -H the server's own limits decide (checked once it announces them).
        let limits = Limits::own_run();
        for v in [s.request_size, s.response_size] {
            if self.host.is_none() && v > limits.max_payload {
                bail!(
                    "size {v} bytes is over the limit of {} bytes",
                    limits.max_payload
                );
            }
        }
        if s.test == TestKind::UdpRr && (s.request_size > 65_507 || s.response_size > 65_507) {
            bail!("UDP_RR sizes must fit one datagram (at most 65507 bytes)");
        }
        let (length, count) = match self.length {
            Some(RunLength::Transactions(n)) if self.count.is_some_and(|c| c != n) => {
                bail!(
                    "-l -{n} and -n {} ask for two counts: give one",
                    self.count.unwrap_or(0)
                )
            }
            Some(RunLength::Transactions(n)) => (None, Some(n)),
            Some(RunLength::Time(d)) => (Some(d), self.count),
            None => (None, self.count),
        };
        s.duration = match (length, count) {
            (Some(l), _) => Some(l),
            (None, Some(_)) => None,
            (None, None) => Some(Duration::from_secs(10)),
        };
        if s.duration.is_some_and(|d| d.is_zero() || d > rr::MAX_RUN) {
            bail!(
                "run length must be more than 0 and at most {} s",
                rr::MAX_RUN.as_secs()
            );
        }
        if count == Some(0) {
            bail!("-n must be at least 1");
        }
        s.count = count;
        s.interval = self.wait;
        s.pace = PaceArg::mode(self.spin, self.pace);
        s.burst = self.burst;
        s.streams = self.streams;
        s.data_port = self.data_port;
        s.thin_linear_timeouts = self.thin_linear_timeouts;
        s.congestion = self.congestion.clone();
        if let Some((l, r)) = self.cpus {
            let n = std::thread::available_parallelism().map_or(1, usize::from);
            if let Some(c) = l.filter(|&c| c >= n) {
                bail!("CPU {c} does not exist here (this machine has {n})");
            }
            (s.local_cpu, s.remote_cpu) = (l, r);
        }
        if self.timeout.is_some_and(|t| t.is_zero()) {
            bail!("--timeout must be more than 0");
        }
        if let Some(t) = self.timeout {
            s.timeout = t;
            s.adaptive_timeout = false;
        }
        s.open_loop = self.rate.map(|rate_per_s| OpenLoop {
            rate_per_s,
            schedule: match self.schedule {
                ScheduleArg::Fixed => Schedule::Fixed,
                ScheduleArg::Poisson => Schedule::Poisson,
            },
            max_outstanding: self.max_outstanding.max(1),
        });
        if s.open_loop.is_some() && s.test == TestKind::TcpCrr {
            bail!("--rate (open loop) works with TCP_RR and UDP_RR, not TCP_CRR");
        }
        if self
            .tcpinfo_interval
            .is_some_and(|d| d < Duration::from_millis(1))
        {
            bail!("--tcpinfo-interval must be at least 1ms");
        }
        s.tcpinfo_interval = self.tcpinfo_interval;
        s.udp_drop_one_in = self.udp_drop;
        s.path = rttlab::probe::path::PathOptions {
            tos: self.tos.or(self.dscp.map(rttlab::probe::path::tos_of_dscp)),
            interface: self.interface.clone(),
            bind: self.bind,
            mark: self.mark,
            sndbuf: self.sndbuf.map(|b| b as usize),
            rcvbuf: self.rcvbuf.map(|b| b as usize),
            data_source_port: self.local_data_port,
        };
        if self.local_data_port.is_some() {
            if s.test == TestKind::TcpCrr {
                bail!("--local-data-port works with TCP_RR and UDP_RR: TCP_CRR connects anew for every transaction, and a fixed source port would wait out its own TIME_WAIT");
            }
            if s.streams > 1 {
                bail!("--local-data-port takes one stream: parallel streams cannot share a source port");
            }
        }
        s.percentiles = self.out.percentiles()?;
        s.hdr_log = self.out.hdr_log.clone();
        s.secret = self.secret.load()?;
        s.recv_spin = self.recv == RecvArg::Spin;
        if let Some(d) = self.server_delay {
            if d > Duration::from_micros(rttlab::probe::control::MAX_SERVER_DELAY_US) {
                bail!("--server-delay must be at most 1 s");
            }
            s.server_delay = d;
        }
        s.anatomy = self.anatomy;
        s.slow_log = self.slow_log.clone();
        s.raw_log = self.raw_log.clone();
        s.slow = self.slow;
        s.tail_ppm = self.tail;
        s.split_request = self.split_request;
        // Responses carry the server's stamps: --anatomy's, and open-loop UDP_RR's
        // one-way delays (RrSettings::one_way).
        let one_way = s.test == TestKind::UdpRr && s.open_loop.is_some() && s.streams == 1;
        if s.anatomy || one_way {
            use rttlab::probe::anatomy::MIN_RESPONSE;
            if s.response_size < MIN_RESPONSE {
                s.response_size = MIN_RESPONSE;
            }
        }
        Ok(s)
    }
}

/// The output format: `--netperf-csv`/`--netperf-columns` (netperf's test-specific
/// `-o`/`-O`) or the shared output options; `--no-banner` (netperf's `-P 0`) on either.
fn format(a: &RrArgs) -> anyhow::Result<rttlab::report::OutputFormat> {
    use rttlab::report::{omni::Style, OutputFormat, Selector};
    let netperf = match (&a.netperf_csv, &a.netperf_columns) {
        (Some(l), _) => Some((Style::Csv, l)),
        (None, Some(l)) => Some((Style::Columns, l)),
        (None, None) => None,
    };
    Ok(match (netperf, a.out.format()?) {
        (Some((style, list)), _) => OutputFormat::Netperf {
            style,
            selectors: Selector::parse_list(list)?,
            headers: !a.no_banner,
        },
        (None, OutputFormat::Human { histogram, .. }) => OutputFormat::Human {
            histogram,
            banner: !a.no_banner,
        },
        (None, other) => other,
    })
}

/// Options the kernel grants only with CAP_NET_ADMIN, refused before any connection
/// with the capability and the fix named.
fn check_privilege(a: &RrArgs) -> anyhow::Result<()> {
    let admin = Capability::NetAdmin;
    if admin.held() {
        return Ok(());
    }
    if let Some(mark) = a.mark {
        bail!(
            "--mark {mark}: SO_MARK needs {}: run as root or `{}`",
            admin.name(),
            admin.setcap()
        );
    }
    if let Some(cc) = &a.congestion {
        let allowed = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
            .unwrap_or_default();
        let available =
            std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
                .unwrap_or_default();
        if !available.split_whitespace().any(|a| a == cc) {
            bail!(
                "--cc {cc}: the kernel has no such congestion control loaded (net.ipv4.tcp_available_congestion_control: \"{}\"); loading its module needs {}: `sudo modprobe tcp_{cc}`",
                available.trim(),
                admin.name()
            );
        }
        if !allowed.split_whitespace().any(|a| a == cc) {
            bail!(
                "--cc {cc}: net.ipv4.tcp_allowed_congestion_control is \"{}\", and any other needs {}: run as root, `{}`, or `sudo sysctl -w net.ipv4.tcp_allowed_congestion_control=\"{} {cc}\"`",
                allowed.trim(),
                admin.name(),
                admin.setcap(),
                allowed.trim()
            );
        }
    }
    Ok(())
}

pub fn run(a: RrArgs, stage: &super::Stage) -> anyhow::Result<()> {
    // Errors until the result is in exit 2 (a bad value, a missing privilege, a host
    // name that does not resolve): `stage.measuring()` is only called once it is.
    let format = format(&a)?;
    check_privilege(&a)?;
    // Validate everything against a placeholder address before touching the network.
    a.settings(SocketAddr::from(([127, 0, 0, 1], a.port)))?;
    let (server_addr, local_server) = match &a.host {
        Some(h) => (resolve(h, a.port, a.ipv4, a.ipv6)?, None),
        None => {
            let ip: std::net::IpAddr = if a.ipv6 {
                "::1".parse()?
            } else {
                "127.0.0.1".parse()?
            };
            let server = Server::bind(ServerConfig {
                secret: a.secret.load()?,
                ..ServerConfig::for_own_run(SocketAddr::new(ip, 0))
            })?;
            let handle = server.spawn().context("starting the in-process server")?;
            (handle.addrs()[0], Some(handle))
        }
    };
    let settings = a.settings(server_addr)?;
    if settings.response_size != a.sizes.1 {
        let why = if settings.anatomy {
            "--anatomy"
        } else {
            "open-loop UDP_RR's one-way delays"
        };
        eprintln!(
            "rttlab: note: {why}: responses are {} bytes (asked {}), to carry the server's stamps",
            settings.response_size, a.sizes.1
        );
    }
    let ctl = Arc::new(RunControl::default());
    let c = Arc::clone(&ctl);
    on_interrupt(move || c.stop.store(true, Ordering::SeqCst));
    let c = Arc::clone(&ctl);
    let progress = ProgressLine::start(
        move || c.transactions.load(Ordering::Relaxed),
        "transactions",
        settings.duration,
    );
    let interim = a
        .interim
        .map(|every| Interim::start(every, Arc::clone(&ctl), a.out.json));
    let result = match a.confidence {
        None => rr::run(&settings, &ctl),
        Some((level, width)) => {
            let (max, min) = a.iterations.unwrap_or((10, 3));
            iterate(&settings, &ctl, level, width, max, min)
        }
    };
    drop(progress);
    drop(interim);
    drop(local_server);
    let mut result = result?;
    stage.measuring();
    result.brand = a.brand.clone();
    if matches!(format, rttlab::report::OutputFormat::Human { .. }) && (a.local_cpu || a.remote_cpu)
    {
        cpu_lines(&result, a.local_cpu, a.remote_cpu)?;
    }
    if a.interim.is_some() && a.out.json {
        // After JSON lines, the result as one more line: stdout stays JSON lines.
        outln!(
            "{}",
            rttlab::results::schema::line(rttlab::results::schema::RR, &result)?
        );
    } else {
        output::print(&result, &format)?;
    }
    if let Some(e) = &result.error {
        bail!("{e}");
    }
    // Measured, and the server answered nothing (UDP_RR with every datagram lost): 1,
    // as ping with no reply.
    if result.transactions == 0 {
        bail!("no transaction completed: every request went unanswered");
    }
    Ok(())
}

/// netperf's `-I`/`-i`: run the test again until the mean transactions/s of the
/// iterations is known to within ±`width`/2 % at `level` % (Student's t), at least
/// `min` and at most `max` times; an interrupt ends the iterations too.
fn iterate(
    settings: &RrSettings,
    ctl: &RunControl,
    level: u32,
    width: f64,
    max: usize,
    min: usize,
) -> Result<rttlab::probe::rr::RrResult, rttlab::probe::rr::RrError> {
    use rttlab::stats::confidence::{Interval, Level};
    let lvl =
        Level::from_percent(level).map_err(|e| rttlab::probe::rr::RrError::Limit(e.to_string()))?;
    let (mut tps, mut lat) = (Vec::new(), Vec::new());
    loop {
        let mut r = rr::run(settings, ctl)?;
        tps.push(r.throughput_tps);
        lat.push(r.latency.mean_us.unwrap_or(f64::NAN));
        let ci = Interval::of(&tps, lvl);
        let reached = ci.map_or(f64::INFINITY, |c| c.width_percent());
        let n = tps.len();
        let done = n >= max
            || (n >= min.max(2) && reached <= width)
            || r.error.is_some()
            || ctl.stop.load(Ordering::SeqCst);
        if done {
            r.confidence = Some(rttlab::probe::rr::Confidence {
                level_percent: level,
                width_percent_asked: width,
                width_percent: reached,
                met: reached <= width,
                min_iterations: min,
                max_iterations: max,
                throughput_tps_mean: tps.iter().sum::<f64>() / n as f64,
                throughput_tps: tps,
                mean_latency_us: lat,
            });
            return Ok(r);
        }
    }
}

/// netperf's `-D`: the transactions/s of each interval while the test runs, on stdout
/// as netperf prints them ("Interim result: … Trans/s over … seconds ending at …"),
/// or as JSON lines.
struct Interim {
    done: Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Interim {
    fn start(every: Duration, ctl: Arc<RunControl>, json: bool) -> Self {
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d = Arc::clone(&done);
        let handle = std::thread::spawn(move || {
            let mut last = (std::time::Instant::now(), 0u64);
            while !d.load(Ordering::Relaxed) {
                std::thread::park_timeout(every.saturating_sub(last.0.elapsed()));
                if d.load(Ordering::Relaxed) {
                    break;
                }
                let now = std::time::Instant::now();
                if now - last.0 < every {
                    continue;
                }
                let n = ctl.transactions.load(Ordering::Relaxed);
                // A new iteration (-I) starts its count again.
                let delta = n.checked_sub(last.1).unwrap_or(n);
                let secs = (now - last.0).as_secs_f64();
                let end = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_secs_f64();
                let rate = delta as f64 / secs;
                let line = if json {
                    format!(
                        "{{\"schema\":\"{}\",\"interim\":{{\"transactions\":{delta},\"throughput_tps\":{rate:.2},\"interval_s\":{secs:.3},\"end_unix_s\":{end:.3}}}}}",
                        rttlab::results::schema::RR_INTERIM
                    )
                } else {
                    format!(
                        "Interim result: {rate:7.2} Trans/s over {secs:.3} seconds ending at {end:.3}"
                    )
                };
                // A closed stdout ends the interim lines; the run's own output reports it.
                if std::io::Write::write_fmt(
                    &mut std::io::stdout().lock(),
                    format_args!("{line}\n"),
                )
                .is_err()
                {
                    break;
                }
                last = (now, n);
            }
        });
        Self {
            done,
            handle: Some(handle),
        }
    }
}

impl Drop for Interim {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

/// netperf's `-c`/`-C` in words, before the result's tables.
fn cpu_lines(r: &rttlab::probe::rr::RrResult, local: bool, remote: bool) -> anyhow::Result<()> {
    for (show, name, cpu) in [
        (local, "client", r.local_cpu),
        (remote, "server", r.remote_cpu),
    ] {
        if !show {
            continue;
        }
        match cpu {
            Some(c) => outln!(
                "{name} machine CPU: {:.1} % of {} CPUs, service demand {:.2} µs/transaction",
                c.util_percent,
                c.cpus,
                c.service_demand_us
            ),
            None => outln!("{name} machine CPU: not measured"),
        }
    }
    Ok(())
}
