//! `rttlab agent`.

use super::secret::SecretArgs;
use super::values;
use anyhow::{bail, Context};
use clap::Args;
use rttlab::agent::http::{HttpLimits, MetricsServer};
use rttlab::agent::metrics::{Buckets, Metrics};
use rttlab::agent::passive::PassiveSettings;
use rttlab::agent::peers::Mesh;
use rttlab::agent::prober::Probe;
use rttlab::agent::service::{ServiceSettings, MAX_PORTS};
use rttlab::agent::supervisor::{self, Flags, Supervisor};
use rttlab::agent::Agent;
use rttlab::kernel::rlimit;
use rttlab::passive::live::EngineChoice;
use rttlab::probe::control::{Limits, PortRange, DEFAULT_CONTROL_PORT};
use rttlab::probe::server::{CongestionPolicy, Server, ServerConfig};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args, Debug)]
#[command(after_help = "\
Serves probes as `rttlab serve` does (same hardened server, port 12866), probes every
peer at every layer about once a second each (jittered, spread over the interval; an
unreachable peer is retried with a growing back-off), and exports the results on
http://ADDR/metrics (default port 9812) in the Prometheus text format or OpenMetrics,
as the scraper asks:
  rttlab_rtt_seconds{peer,layer}   histogram; layers icmp, tcp_rr, udp_rr, tcp_crr,
                                   tcp_connect, srtt_client, srtt_server, passive_ts,
                                   passive_seq
  rttlab_probes_{sent,lost,timed_out}_total, rttlab_probe_errors_total,
  rttlab_tcp_retransmissions_total{peer,layer}, rttlab_tcp_{srtt,min_rtt}_seconds,
  rttlab_agent_*                   the agent's own health (peers, probe lag, reloads)
With --explain-port (this host's services) or --explain-to (its calls to others'),
each transaction of those TCP services, timed from the kernel as `rttlab explain`
times it (no parser, no change to the application):
  rttlab_service_response_seconds{side,port}        histogram
  rttlab_service_part_seconds{side,port,part}       histogram; server parts arrival,
                                   wait, think, write, network; client parts write,
                                   send, server, arrival, wait
  rttlab_service_retransmissions_total{side,port,cause}, rttlab_service_untimed_total
Their labels are the ports given (at most 32 a side) and the parts: six histograms a
port, never an address.
Labels of a file_sd group pass through to its peers' series. The peers file is read
again when it changes; SIGHUP reads the config file and the peers file again. A peer
that is this host (one of its addresses, on the agent's own port) is skipped.
Peers and config files must be regular files (a symlink is followed to one) of at most
16 MiB, naming at most --max-peers peers; a reload that fails keeps the running peers.
Reloads are read off the probe loop: probing, /metrics and SIGTERM never wait on one.

Examples:
  rttlab agent --peer db1 --peer db2:12866
  rttlab agent --peers-file /etc/prometheus/rttlab_peers.json --secret-file /etc/rttlab/secret
  rttlab agent --config /etc/rttlab/agent.toml --mesh group:rack,random:3
  rttlab agent --peer 10.0.0.2 --textfile /var/lib/node_exporter/textfile/rttlab.prom
  rttlab agent --peers-file peers.json --passive-iface eth0 --passive-port 5432,443
  rttlab agent --peers-file peers.json --explain-port 6379 --explain-to 5432")]
pub struct AgentArgs {
    /// A peer to probe, HOST[:PORT] (repeatable; the port defaults to 12866).
    #[arg(long = "peer", value_name = "HOST[:PORT]")]
    pub peers: Vec<String>,
    /// Peers in Prometheus file_sd JSON; re-read when it changes.
    #[arg(long, value_name = "FILE")]
    pub peers_file: Option<PathBuf>,
    /// TOML file with any of: peers, peers_file, probes, interval, timeout, mesh,
    /// buckets, self (flags given here win); re-read on SIGHUP.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Probes to run, comma-separated: icmp, tcp_rr, udp_rr, tcp_crr, tcp_connect (a
    /// handshake to the target's own port and a close: any host, one without rttlab
    /// too; not with tcp_crr) [default: icmp,tcp_rr,udp_rr].
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub probes: Vec<Probe>,
    /// Between two probes of one kind to one peer [default: 1s].
    #[arg(long, value_parser = values::seconds)]
    pub interval: Option<Duration>,
    /// A TCP probe unanswered this long ends its connection (a new one is opened);
    /// ICMP and UDP probes are lost after this or the interval, whichever is shorter
    /// [default: 10s].
    #[arg(long, value_parser = values::seconds)]
    pub timeout: Option<Duration>,
    /// Which peers to probe: full, group:LABEL (the peers with this host's value of a
    /// file_sd label), random:K, group:LABEL,random:K, or
    /// levels:RACK/ZONE/…[,per-group:K][,rotate:DURATION] (every peer of this host's
    /// innermost group, and K of each sibling group at each outer level; see
    /// docs/AGENT.md) [default: full].
    #[arg(long)]
    pub mesh: Option<Mesh>,
    /// This host's target in the peers list (for --mesh group:…); default: the
    /// target that is one of this host's addresses on the agent's port.
    #[arg(long = "self", value_name = "TARGET")]
    pub self_target: Option<String>,
    /// Histogram buckets, MIN:MAX:PER_DECADE, log-spaced [default: 10us:10s:3].
    #[arg(long)]
    pub buckets: Option<Buckets>,
    /// Address of the probe server (repeatable), ADDR or ADDR:PORT [default: [::]:12866].
    #[arg(short = 'L', long = "listen", value_name = "ADDR")]
    pub listen: Vec<String>,
    /// Where /metrics, /-/healthy and /-/ready are served, ADDR:PORT.
    #[arg(long, alias = "web.listen-address", default_value = "[::]:9812")]
    pub metrics_listen: SocketAddr,
    /// TLS and basic authentication for the metrics endpoint, in the Prometheus
    /// exporters' web-config.yml format (tls_server_config, basic_auth_users,
    /// http_server_config.headers): the file node_exporter or smokeping_prober takes
    /// with --web.config.file works unchanged.
    #[arg(long, alias = "web.config.file", value_name = "FILE")]
    pub web_config: Option<PathBuf>,
    /// Most connections the metrics endpoint holds open (a quarter of them per
    /// client address); at the limit the oldest idle one makes room.
    #[arg(long, default_value_t = HttpLimits::default().max_connections)]
    pub metrics_max_connections: usize,
    /// Time a client of the metrics endpoint has from its first byte to a request's
    /// complete head (Go's ReadHeaderTimeout); a head trickled slower is cut then.
    #[arg(long, default_value = "10s", value_parser = values::duration, value_name = "DURATION")]
    pub metrics_header_timeout: Duration,
    /// Time a write of an answer may wait for the client to read; a client that
    /// stops reading is cut then.
    #[arg(long, default_value = "10s", value_parser = values::duration, value_name = "DURATION")]
    pub metrics_write_timeout: Duration,
    /// Also export the ICMP layer under smokeping_prober's names, labels and buckets
    /// (smokeping_requests_total, smokeping_response_duration_seconds{ip,host,source,tos},
    /// smokeping_send_errors_total), so that its dashboards and alerts keep working.
    #[arg(long)]
    pub smokeping_names: bool,
    /// Also write the metrics to this file every interval (atomically), for
    /// node_exporter's textfile collector.
    #[arg(long, value_name = "PATH")]
    pub textfile: Option<PathBuf>,
    /// Also measure RTT passively on this interface, of the traffic on --passive-port
    /// between this host and its peers: layers passive_ts (TCP timestamps) and
    /// passive_seq (data and its ACK).
    #[arg(long, value_name = "IF", requires = "passive_ports")]
    pub passive_iface: Option<String>,
    /// The ports whose traffic the passive layers watch (repeatable or comma-separated).
    #[arg(long = "passive-port", value_name = "PORT", value_delimiter = ',')]
    pub passive_ports: Vec<u16>,
    /// Where the passive rules run: bpf (in the kernel, which aggregates each peer's
    /// samples; needs CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN and Linux 5.13+), ring (frames copied to
    /// the agent; CAP_NET_RAW), or auto (bpf where it can run, else ring, saying why).
    #[arg(long, value_enum, default_value = "auto", value_name = "ENGINE")]
    pub passive_engine: EngineChoice,
    /// Per flow direction, the least time between two TSvals or segments the passive
    /// layers time (ePPing's sampling; 0 times every one).
    #[arg(long, default_value = "100ms", value_parser = values::duration, value_name = "DURATION")]
    pub passive_rate_limit: Duration,
    /// The passive layers forget a flow silent this long.
    #[arg(long, default_value = "10s", value_parser = values::duration, value_name = "DURATION")]
    pub passive_idle_timeout: Duration,
    /// Most flows the passive layers follow at once (at most 16777216); past it the
    /// packets of new flows are counted in
    /// rttlab_passive_dropped_total{reason="flow_map_full"}, not followed.
    #[arg(long, default_value_t = 16_384, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=16_777_216))]
    pub passive_max_flows: u32,
    /// The in-kernel engine's room for TSvals and segments waiting for their answer (at
    /// most 16777216); past it they are counted (reason="pending_map_full"), not timed.
    #[arg(long, default_value_t = 16_384, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=16_777_216))]
    pub passive_max_pending: u32,
    /// Time each transaction of this host's TCP services on these local ports
    /// (redis 6379, nginx 80), from the kernel: the rttlab_service_* series (needs
    /// CAP_BPF and CAP_PERFMON).
    #[arg(long = "explain-port", value_name = "PORT", value_delimiter = ',',
          value_parser = clap::value_parser!(u16).range(1..))]
    pub explain_ports: Vec<u16>,
    /// Time each transaction of this host's connections to these remote ports (its
    /// calls to a database or cache), from the kernel, as the client sees it.
    #[arg(long = "explain-to", value_name = "PORT", value_delimiter = ',',
          value_parser = clap::value_parser!(u16).range(1..))]
    pub explain_to: Vec<u16>,
    /// Most connections the service layers watch at once (past it, counted:
    /// rttlab_service_untimed_total{reason="table_full"}).
    #[arg(long, default_value_t = 65_536, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=4_194_304))]
    pub explain_max_connections: u32,
    #[command(flatten)]
    pub secret: SecretArgs,
    /// Ports the probe server's data connections may use, LOW-HIGH.
    #[arg(long, default_value_t = PortRange::DEFAULT)]
    pub data_ports: PortRange,
    /// Most tests the probe server runs at once (each peer probing this host holds
    /// one per TCP_RR, UDP_RR and TCP_CRR probe).
    #[arg(long, default_value_t = 1024)]
    pub max_tests: u32,
    /// Most tests the probe server runs at once for one address (IPv6: one /64).
    /// Default: half of --max-tests.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tests_per_source: Option<u32>,
    /// Memory the probe server's tests may use together.
    #[arg(long, default_value = "1GiB", value_parser = values::bytes)]
    pub max_memory: u64,
    /// Most peers the flags, the config file and the peers file may name together:
    /// more is an error at start and a failed reload (the running peers stay).
    /// Every peer costs sockets, series and scrape time (20 000 peers: a 125 MB
    /// exposition).
    #[arg(long, default_value_t = 5000, value_name = "N")]
    pub max_peers: usize,
}

fn listen_addrs(a: &AgentArgs) -> anyhow::Result<Vec<SocketAddr>> {
    if a.listen.is_empty() {
        return Ok(vec![SocketAddr::from(([0u16; 8], DEFAULT_CONTROL_PORT))]);
    }
    a.listen
        .iter()
        .map(|s| {
            s.parse::<SocketAddr>()
                .or_else(|_| {
                    s.trim_matches(['[', ']'])
                        .parse()
                        .map(|ip| SocketAddr::new(ip, DEFAULT_CONTROL_PORT))
                })
                .map_err(|_| anyhow::anyhow!("--listen {s:?} is not an address"))
        })
        .collect()
}

/// Expositions (megabytes each, several alive while slow clients read them) are
/// mapped and unmapped on their own, never carved from glibc's heap: its dynamic
/// mmap threshold would otherwise rise to 32 MiB after the first one is freed, and
/// the small allocations of the next scrape, placed around the reused space, keep
/// whole freed expositions resident (`tests/agent_hostile.rs`'s slow readers: one
/// exposition more of RSS with the native histograms' per-series snapshots).
fn keep_large_buffers_out_of_the_heap() {
    // SAFETY: mallopt only tunes the allocator; glibc accepts the parameter at any
    // time (musl has no mallopt: the libc crate declares it for gnu targets only).
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

pub fn run(a: AgentArgs, stage: &super::Stage) -> anyhow::Result<()> {
    keep_large_buffers_out_of_the_heap();
    let secret = a.secret.load()?;
    let listen = listen_addrs(&a)?;
    let flags = Arc::new(Flags {
        config: a.config.clone(),
        peers: a.peers.clone(),
        peers_file: a.peers_file.clone(),
        probes: a.probes.clone(),
        interval: a.interval,
        timeout: a.timeout,
        mesh: a.mesh.clone(),
        self_target: a.self_target.clone(),
        buckets: a.buckets.clone(),
        max_peers: a.max_peers,
        own_port: listen[0].port(),
        metrics_port: a.metrics_listen.port(),
        metrics_max_connections: a.metrics_max_connections,
        secret: secret.clone(),
    });
    // Raised before the first plan, which checks the peers' descriptors against it.
    let open_files = rlimit::raise_open_files();
    let current = supervisor::plan(&flags)?;
    if a.smokeping_names && !current.probes.contains(&Probe::Icmp) {
        bail!("--smokeping-names exports the icmp probe's echoes: add icmp to --probes");
    }

    let server = Server::bind(ServerConfig {
        listen,
        secret: secret.clone(),
        limits: Limits {
            max_concurrent_tests: a.max_tests,
            data_ports: a.data_ports,
            ..Limits::default()
        },
        max_tests_per_source: a.max_tests_per_source,
        max_memory_bytes: a.max_memory,
        // Half the descriptors stay with the agent's own probes, sessions and metrics
        // connections, whatever its server's peers ask.
        reserved_descriptors: open_files.as_ref().map_or(512, |l| l.soft / 2),
        congestion: CongestionPolicy::Allowed(Vec::new()),
        log: false,
        ..ServerConfig::default()
    })?;
    // Its peers' probes are one stream each.
    if !server.descriptors_suffice(1) {
        eprintln!(
            "rttlab agent: {}",
            super::serve::few_descriptors(
                &server,
                open_files.ok(),
                "--max-tests tests of one stream (a peer's probe)"
            )
        );
    }
    let served: Vec<String> = server
        .local_addrs()
        .iter()
        .map(ToString::to_string)
        .collect();
    let server = server.spawn().context("starting the probe server")?;

    let metrics = Metrics::new(&current.buckets);
    let metrics = Arc::new(if a.smokeping_names {
        metrics.with_smokeping_names()
    } else {
        metrics
    });
    if a.metrics_max_connections == 0 {
        bail!("--metrics-max-connections must be at least 1");
    }
    if a.metrics_header_timeout.is_zero() || a.metrics_write_timeout.is_zero() {
        bail!("--metrics-header-timeout and --metrics-write-timeout must be longer than 0 (every connection would be cut at once)");
    }
    let http = MetricsServer::bind(
        a.metrics_listen,
        a.web_config.as_deref(),
        HttpLimits {
            max_connections: a.metrics_max_connections,
            header_timeout: a.metrics_header_timeout,
            write_timeout: a.metrics_write_timeout,
            ..HttpLimits::default()
        },
    )?;
    let scheme = if http.tls() { "https" } else { "http" };
    let http_addr = http.addr;
    let mut agent = Agent::new(
        Arc::clone(&metrics),
        current.probes.clone(),
        current.settings.clone(),
        a.data_ports,
        server.served(),
    )?;
    agent.set_peers(current.peers.clone(), current.by_ip.clone());
    if let Some(iface) = &a.passive_iface {
        let started = agent
            .watch(&PassiveSettings {
                interface: iface.clone(),
                ports: a.passive_ports.clone(),
                engine: a.passive_engine,
                rate_limit: a.passive_rate_limit,
                idle_timeout: a.passive_idle_timeout,
                max_flows: a.passive_max_flows as usize,
                max_pending: a.passive_max_pending,
            })
            .with_context(|| format!("--passive-iface {iface}"))?;
        if let Some(why) = started.fallback {
            eprintln!("rttlab agent: {why}; the passive layers use the ring engine");
        }
    }
    if !a.explain_ports.is_empty() || !a.explain_to.is_empty() {
        let distinct = |v: &[u16]| -> Vec<u16> {
            let set: std::collections::BTreeSet<u16> = v.iter().copied().collect();
            set.into_iter().collect()
        };
        let settings = ServiceSettings {
            ports: distinct(&a.explain_ports),
            to: distinct(&a.explain_to),
            max_connections: a.explain_max_connections,
        };
        if settings.ports.len().max(settings.to.len()) > MAX_PORTS {
            anyhow::bail!(
                "--explain-port and --explain-to take at most {MAX_PORTS} ports each (six series a port): watch the busiest, or run `rttlab explain` for a look at more"
            );
        }
        agent
            .explain(&settings)
            .context("--explain-port/--explain-to")?;
    }
    metrics.reload_ok.set(1);
    stage.measuring();

    let stop = Arc::new(AtomicBool::new(false));
    supervisor::stop_on_signal(&stop).context("installing the SIGTERM and SIGINT handlers")?;
    eprintln!(
        "rttlab agent: serving probes on {}, metrics on {scheme}://{}/metrics, probing {} peer(s) with {}",
        served.join(", "),
        http_addr,
        current.peers.len(),
        current.probes.iter().map(|p| p.name()).collect::<Vec<_>>().join(",")
    );
    if let Some(line) = current.this_host_line(flags.own_port) {
        eprintln!("{line}");
    }
    if !a.explain_ports.is_empty() || !a.explain_to.is_empty() {
        let list = |v: &[u16]| v.iter().map(u16::to_string).collect::<Vec<_>>().join(",");
        eprintln!(
            "rttlab agent: timing the transactions of TCP port(s) [{}] served here and [{}] called from here (rttlab_service_*)",
            list(&a.explain_ports),
            list(&a.explain_to)
        );
    }
    Supervisor {
        agent,
        current,
        flags,
        metrics,
        textfile: a.textfile.clone(),
    }
    .run(http, &stop)
    .context("supervising the agent")?;
    eprintln!("rttlab agent: stopped");
    Ok(())
}
