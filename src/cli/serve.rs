//! `rttlab serve`.

use super::secret::SecretArgs;
use super::values;
use anyhow::Context;
use clap::Args;
use rttlab::kernel::rlimit::{self, FileLimit};
use rttlab::probe::control::{Limits, PortRange, DEFAULT_CONTROL_PORT};
use rttlab::probe::server::{CongestionPolicy, Server, ServerConfig};
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Args, Debug)]
#[command(after_help = "\
The control port is 12866 (netperf's netserver uses 12865). Data ports come from
--data-ports (default 12867-32767, below Linux's ephemeral range), chosen per test or
fixed by the client's -P inside that range.

Before a client has finished its handshake it holds no test slot: such connections wait
in a pool of --max-handshakes (--max-handshakes-per-source from one address or IPv6
/64), the oldest dropped when it is full (and told so): one of the newcomer's own
address at its limit, else of the address with the most waiting. Each has
--handshake-timeout in all. One address runs at most --max-tests-per-source of the
--max-tests tests. A test's memory, descriptors (2 per TCP_RR stream) and threads are
budgeted against --max-memory, the open-file limit (raised to its hard limit at start)
and --max-threads. A test refused for want of room ends the newest test of the address
running the most, when that address runs at least two more than the newcomer's (its
client is told why), so no few addresses can keep others out. Every refusal names the
limit. docs/SECURITY.md's threat model says what a secret protects.

Examples:
  rttlab serve                                  all addresses, IPv4 and IPv6, port 12866
  rttlab serve -p 12900 --data-ports 13000-13099
  rttlab serve -L 127.0.0.1 -L ::1              loopback only
  rttlab serve --secret-file /etc/rttlab/secret only clients that prove the same secret")]
pub struct ServeArgs {
    /// Control port (netserver's -p).
    #[arg(short = 'p', long, default_value_t = DEFAULT_CONTROL_PORT)]
    pub port: u16,
    /// Address to listen on, ADDR or ADDR:PORT (repeatable; netserver's -L). Default
    /// [::], which also accepts IPv4.
    #[arg(short = 'L', long = "listen", value_name = "ADDR", value_parser = listen_addr)]
    pub listen: Vec<ListenAddr>,
    #[command(flatten)]
    pub secret: SecretArgs,
    /// Ports data connections may use, LOW-HIGH (never below 1024).
    #[arg(long, default_value_t = PortRange::DEFAULT)]
    pub data_ports: PortRange,
    /// Most tests served at once.
    #[arg(long, default_value_t = Limits::default().max_concurrent_tests)]
    pub max_tests: u32,
    /// Most tests served at once to one address (IPv6: one /64). Default: half of
    /// --max-tests, so that one client cannot take every slot.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tests_per_source: Option<u32>,
    /// Longest test a client may ask for.
    #[arg(long, default_value = "1h", value_parser = values::seconds)]
    pub max_duration: Duration,
    /// Largest request or response in bytes.
    #[arg(long, default_value_t = Limits::default().max_payload)]
    pub max_payload: u32,
    /// Most parallel streams per test.
    #[arg(long, default_value_t = Limits::default().max_streams)]
    pub max_streams: u32,
    /// Memory all running tests together may use (estimated per stream: payloads, a
    /// thread stack, socket buffers), e.g. 512MiB.
    #[arg(long, default_value = "512MiB", value_parser = values::bytes)]
    pub max_memory: u64,
    /// Data threads all running tests together may use (one per stream).
    #[arg(long, default_value_t = ServerConfig::default().max_threads)]
    pub max_threads: u64,
    /// Drop a control connection silent this long between messages, and end a test
    /// whose client has sent no data this long (plus the test's interval).
    #[arg(long, default_value = "30s", value_parser = values::seconds)]
    pub idle_timeout: Duration,
    /// Time a new connection has, in all, to finish its handshake and ask for a test.
    #[arg(long, default_value = "5s", value_parser = values::seconds)]
    pub handshake_timeout: Duration,
    /// Connections in the handshake at once (the oldest is dropped beyond).
    #[arg(long, default_value_t = 64)]
    pub max_handshakes: usize,
    /// Connections in the handshake at once from one address (IPv6: one /64).
    #[arg(long, default_value_t = 8)]
    pub max_handshakes_per_source: usize,
    /// Also let clients choose this congestion control (repeatable), beyond
    /// net.ipv4.tcp_allowed_congestion_control; only algorithms the kernel has already
    /// loaded are ever used, so no client can make it load a module.
    #[arg(long = "allow-cc", value_name = "NAME")]
    pub allow_cc: Vec<String>,
    /// Do not log one line per test on stderr.
    #[arg(short, long)]
    pub quiet: bool,
}

/// A listen address with or without its port.
#[derive(Clone, Copy, Debug)]
pub enum ListenAddr {
    Ip(std::net::IpAddr),
    Socket(SocketAddr),
}

fn listen_addr(s: &str) -> Result<ListenAddr, String> {
    s.parse::<SocketAddr>()
        .map(ListenAddr::Socket)
        .or_else(|_| s.trim_matches(['[', ']']).parse().map(ListenAddr::Ip))
        .map_err(|_| format!("{s:?} is not an address (e.g. 127.0.0.1, ::1, 10.0.0.1:12866)"))
}

pub fn run(a: ServeArgs, stage: &super::Stage) -> anyhow::Result<()> {
    let listen: Vec<SocketAddr> = if a.listen.is_empty() {
        vec![SocketAddr::from(([0u16; 8], a.port))]
    } else {
        a.listen
            .iter()
            .map(|l| match *l {
                ListenAddr::Ip(ip) => SocketAddr::new(ip, a.port),
                ListenAddr::Socket(s) => s,
            })
            .collect()
    };
    anyhow::ensure!(
        a.max_tests >= 1 && a.max_streams >= 1 && a.max_payload >= 1,
        "limits must be at least 1"
    );
    let config = ServerConfig {
        listen,
        secret: a.secret.load()?,
        limits: Limits {
            max_payload: a.max_payload,
            max_streams: a.max_streams,
            max_duration_ms: rttlab::stats::units::ms(a.max_duration),
            max_concurrent_tests: a.max_tests,
            data_ports: a.data_ports,
            ..Limits::default()
        },
        idle_timeout: a.idle_timeout,
        handshake_timeout: a.handshake_timeout,
        max_handshakes: a.max_handshakes,
        max_handshakes_per_source: a.max_handshakes_per_source,
        max_tests_per_source: a.max_tests_per_source,
        max_memory_bytes: a.max_memory,
        max_threads: a.max_threads,
        reserved_descriptors: 0,
        congestion: CongestionPolicy::Allowed(a.allow_cc),
        log: !a.quiet,
    };
    let secured = config.secret.is_some();
    let open_files = rlimit::raise_open_files();
    let server = Server::bind(config)?;
    stage.measuring();
    if !server.descriptors_suffice(a.max_streams) {
        eprintln!(
            "rttlab serve: {}",
            few_descriptors(
                &server,
                open_files.ok(),
                "--max-tests tests of --max-streams streams"
            )
        );
    }
    let addrs: Vec<String> = server
        .local_addrs()
        .iter()
        .map(ToString::to_string)
        .collect();
    eprintln!(
        "rttlab serve: listening on {}, data ports {}{}",
        addrs.join(", "),
        a.data_ports,
        if secured { " (secret required)" } else { "" }
    );
    server.run().context("serving")
}

/// One line saying the open-file limit stays low, what it is and what it allows.
pub fn few_descriptors(server: &Server, limit: Option<FileLimit>, tests: &str) -> String {
    let limit = limit.map_or_else(
        || "cannot be read".to_string(),
        |l| format!("is {} (hard limit {})", l.soft, l.hard),
    );
    format!(
        "the open-file limit {limit}: tests may hold {} descriptors together (a TCP_RR stream takes 2), fewer than {tests} need; tests beyond are refused by name (raise it with ulimit -Hn or LimitNOFILE=)",
        server.descriptor_budget()
    )
}
