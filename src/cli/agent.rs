//! `rttlab agent`.

use super::secret::SecretArgs;
use super::values;
use anyhow::{bail, Context};
use clap::Args;
use rttlab::agent::exposition::write_textfile;
use rttlab::agent::http::{HttpLimits, MetricsServer};
use rttlab::agent::metrics::{Buckets, BucketsError, Metrics};
use rttlab::agent::passive::PassiveSettings;
use rttlab::agent::peers::{self, ConfigFile, Mesh, Peer};
use rttlab::agent::prober::{self, Probe, ProbeSettings};
use rttlab::agent::Agent;
use rttlab::kernel::rlimit;
use rttlab::passive::live::EngineChoice;
use rttlab::probe::control::{Limits, PortRange, DEFAULT_CONTROL_PORT};
use rttlab::probe::server::{CongestionPolicy, Server, ServerConfig};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime};

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
  rttlab agent --peers-file peers.json --passive-iface eth0 --passive-port 5432,443")]
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
    /// Probes to run, comma-separated: icmp, tcp_rr, udp_rr, tcp_crr [default:
    /// icmp,tcp_rr,udp_rr].
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
    /// file_sd label), random:K, or group:LABEL,random:K [default: full].
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

/// Everything that a reload may change, resolved from the flags and the config file.
#[derive(Clone, Debug, PartialEq)]
struct Plan {
    peers: Vec<Peer>,
    /// The peers by the addresses their names resolve to, resolved with the plan (on
    /// the reload thread, never on the loop that must notice a stop).
    by_ip: HashMap<IpAddr, Peer>,
    peers_file: Option<PathBuf>,
    /// The peers file's identity just before it was read: a change after that, even
    /// one made while the agent was starting, is a change to read.
    peers_stamp: Option<(SystemTime, u64, u64)>,
    probes: Vec<Probe>,
    settings: ProbeSettings,
    buckets: Buckets,
}

fn plan(a: &AgentArgs, secret: Option<Vec<u8>>, own_port: u16) -> anyhow::Result<Plan> {
    let file = match &a.config {
        Some(p) => peers::read_config(p)?,
        None => ConfigFile::default(),
    };
    let at = |key: &str| {
        a.config
            .as_ref()
            .map_or(String::new(), |p| format!("{}: {key}: ", p.display()))
    };
    let probes = if !a.probes.is_empty() {
        a.probes.clone()
    } else if let Some(list) = &file.probes {
        list.iter()
            .map(|s| s.parse())
            .collect::<Result<Vec<Probe>, _>>()
            .map_err(|e| anyhow::anyhow!("{}{e}", at("probes")))?
    } else {
        Probe::DEFAULT.to_vec()
    };
    let duration = |flag: Option<Duration>, key: &str, v: &Option<String>, default: &str| {
        flag.map_or_else(
            || {
                values::seconds(v.as_deref().unwrap_or(default))
                    .map_err(|e| anyhow::anyhow!("{}{e}", at(key)))
            },
            Ok,
        )
    };
    let interval = duration(a.interval, "interval", &file.interval, "1s")?;
    let timeout = duration(a.timeout, "timeout", &file.timeout, "10s")?;
    if interval < Duration::from_millis(10) || interval > Duration::from_secs(60) {
        bail!("{}the interval must be within 10ms..60s", at("interval"));
    }
    let mesh = match (&a.mesh, &file.mesh) {
        (Some(m), _) => m.clone(),
        (None, Some(m)) => m
            .parse()
            .map_err(|e| anyhow::anyhow!("{}{e}", at("mesh")))?,
        (None, None) => Mesh::default(),
    };
    let buckets = match (&a.buckets, &file.buckets) {
        (Some(b), _) => b.clone(),
        (None, Some(b)) => b
            .parse()
            .map_err(|e: BucketsError| anyhow::anyhow!("{}{e}", at("buckets")))?,
        (None, None) => "10us:10s:3".parse()?,
    };
    let peers_file = a.peers_file.clone().or(file.peers_file.clone());
    let mut all = Vec::new();
    for t in a.peers.iter().chain(file.peers.iter().flatten()) {
        all.push(Peer::parse(t, Vec::new()).context("--peer")?);
    }
    let peers_stamp = stamp(&peers_file);
    if let Some(f) = &peers_file {
        all.extend(peers::read_file_sd(f)?);
    }
    // Before anything is done per peer (is_me resolves names).
    if all.len() > a.max_peers {
        bail!(
            "{} peers named (--peer, the config file and the peers file together), more than --max-peers {}",
            all.len(),
            a.max_peers
        );
    }
    let me = match a.self_target.as_ref().or(file.self_target.as_ref()) {
        Some(t) => {
            let p = Peer::parse(t, Vec::new()).context("--self")?;
            Some(
                all.iter()
                    .find(|x| x.target == p.target)
                    .cloned()
                    .unwrap_or(p),
            )
        }
        None => all.iter().find(|p| is_me(p, own_port)).cloned(),
    };
    let metrics_port = a.metrics_listen.port();
    let peers: Vec<Peer> = mesh
        .select(&all, me.as_ref())?
        .into_iter()
        .map(|p| p.named_as_instance(own_port, metrics_port))
        .collect();
    check_descriptors(peers.len(), &probes, a.metrics_max_connections)?;
    Ok(Plan {
        by_ip: peers::by_address(&peers),
        peers,
        peers_file,
        peers_stamp,
        probes,
        settings: ProbeSettings {
            interval,
            timeout,
            secret,
        },
        buckets,
    })
}

/// Descriptors one peer's probes hold: a TCP_RR or UDP_RR session is a control
/// connection and a data socket, TCP_CRR a control connection and its connection of
/// the moment; ICMP shares one socket among all peers.
fn descriptors_per_peer(probes: &[Probe]) -> u64 {
    probes
        .iter()
        .map(|p| if *p == Probe::Icmp { 0 } else { 2 })
        .sum()
}

/// Refuse a peer list whose probes would not fit the agent's half of the open-file
/// limit (the other half is its server's, `reserved_descriptors`), less the metrics
/// endpoint's connections and a reserve for the process: past it, sockets fail one
/// by one and the endpoint can no longer accept.
fn check_descriptors(
    peers: usize,
    probes: &[Probe],
    metrics_connections: usize,
) -> anyhow::Result<()> {
    let Ok(limit) = rlimit::open_files() else {
        return Ok(());
    };
    let per_peer = descriptors_per_peer(probes);
    let need = peers as u64 * per_peer;
    let budget = (limit.soft / 2).saturating_sub(metrics_connections as u64 + 32);
    if need > budget {
        bail!(
            "{peers} peers × {per_peer} descriptors ({}) need {need}, more than the {budget} the agent's probes may hold (half of ulimit -n {}, less the metrics endpoint's {metrics_connections} connections): raise the limit (LimitNOFILE= in the unit, ulimit -n) or probe fewer peers (--mesh, --probes)",
            probes
                .iter()
                .filter(|p| **p != Probe::Icmp)
                .map(|p| p.name())
                .collect::<Vec<_>>()
                .join(", "),
            limit.soft
        );
    }
    Ok(())
}

/// A target that is this host: one of its addresses, on the agent's own port.
fn is_me(p: &Peer, own_port: u16) -> bool {
    p.port == own_port
        && (p.host.as_str(), p.port)
            .to_socket_addrs()
            .is_ok_and(|mut it| it.any(|a| prober::is_local(a.ip())))
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

/// The peers file's identity, to notice it changed (also replaced by a rename).
fn stamp(p: &Option<PathBuf>) -> Option<(SystemTime, u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p.as_ref()?).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
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

/// Reloads, off the main loop: reading and parsing a large or hostile peers file and
/// resolving its names can take seconds, and the main loop must notice SIGTERM within
/// its tick whatever a reload is doing. The loop asks with [`Reloader::request`] and
/// polls [`Reloader::poll`]; the thread is never joined, so a reload still running at
/// exit ends with the process.
struct Reloader {
    ask: mpsc::Sender<()>,
    done: mpsc::Receiver<anyhow::Result<Plan>>,
    /// A reload is running.
    busy: bool,
    /// Another was asked for while it ran (the file may have changed after it read it).
    again: bool,
}

impl Reloader {
    fn start(a: Arc<AgentArgs>, secret: Option<Vec<u8>>, own_port: u16) -> anyhow::Result<Self> {
        let (ask, asked) = mpsc::channel::<()>();
        let (tell, done) = mpsc::channel();
        std::thread::Builder::new()
            .name("reload".into())
            .spawn(move || {
                for () in asked {
                    if tell.send(plan(&a, secret.clone(), own_port)).is_err() {
                        break;
                    }
                }
            })
            .context("starting the reload thread")?;
        Ok(Self {
            ask,
            done,
            busy: false,
            again: false,
        })
    }

    /// Read the config and peers files again, now or after the reload running.
    fn request(&mut self) {
        if self.busy {
            self.again = true;
        } else {
            self.busy = self.ask.send(()).is_ok();
        }
    }

    /// The result of the reload asked for, once it is there.
    fn poll(&mut self) -> Option<anyhow::Result<Plan>> {
        let r = self.done.try_recv().ok()?;
        self.busy = false;
        if std::mem::take(&mut self.again) {
            self.request();
        }
        Some(r)
    }
}

pub fn run(a: AgentArgs, stage: &super::Stage) -> anyhow::Result<()> {
    keep_large_buffers_out_of_the_heap();
    let a = Arc::new(a);
    let secret = a.secret.load()?;
    let listen = listen_addrs(&a)?;
    let own_port = listen[0].port();
    // Raised before the first plan, which checks the peers' descriptors against it.
    let open_files = rlimit::raise_open_files();
    let mut current = plan(&a, secret.clone(), own_port)?;

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
    if !server.descriptors_suffice() {
        eprintln!(
            "rttlab agent: {}",
            super::serve::few_descriptors(&server, open_files.ok())
        );
    }
    let served: Vec<String> = server
        .local_addrs()
        .iter()
        .map(ToString::to_string)
        .collect();
    let server = server.spawn().context("starting the probe server")?;

    let metrics = Arc::new(Metrics::new(&current.buckets));
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
    metrics.reload_ok.set(1);
    stage.measuring();

    let stop = Arc::new(AtomicBool::new(false));
    stop_on_signal(&stop)?;
    let hup = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&hup))
        .context("installing the SIGHUP handler")?;
    eprintln!(
        "rttlab agent: serving probes on {}, metrics on {scheme}://{}/metrics, probing {} peer(s) with {}",
        served.join(", "),
        http_addr,
        current.peers.len(),
        current.probes.iter().map(|p| p.name()).collect::<Vec<_>>().join(",")
    );

    let mut reloader = Reloader::start(Arc::clone(&a), secret.clone(), own_port)?;
    std::thread::scope(|s| -> anyhow::Result<()> {
        s.spawn(|| {
            if let Err(e) = http.serve(&metrics, &stop) {
                eprintln!("rttlab agent: the metrics endpoint stopped: {e}");
            }
        });
        let mut seen = current.peers_stamp;
        let mut next_textfile = Instant::now();
        let mut textfile_failing: Option<String> = None;
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(200));
            let changed = stamp(&current.peers_file) != seen;
            if hup.swap(false, Ordering::Relaxed) || changed {
                seen = stamp(&current.peers_file);
                reloader.request();
            }
            if let Some(result) = reloader.poll() {
                match result {
                    Ok(next) => {
                        reload(&mut agent, &mut current, next);
                        metrics
                            .reloads
                            .get_or_create(&vec![("result".into(), "success".into())])
                            .inc();
                        metrics.reload_ok.set(1);
                    }
                    Err(e) => {
                        // The running peers keep being probed.
                        eprintln!("rttlab agent: reload failed, keeping the previous peers: {e:#}");
                        metrics
                            .reloads
                            .get_or_create(&vec![("result".into(), "failure".into())])
                            .inc();
                        metrics.reload_ok.set(0);
                    }
                }
            }
            if let Some(path) = &a.textfile {
                if Instant::now() >= next_textfile {
                    next_textfile = Instant::now() + current.settings.interval;
                    // Said once when it starts failing (or fails anew), not every
                    // interval, and once when it is written again.
                    match write_textfile(path, &metrics) {
                        Err(e) => {
                            let why = rttlab::error_chain(&e);
                            if textfile_failing.as_ref() != Some(&why) {
                                eprintln!("rttlab agent: --textfile {}: {why}", path.display());
                                textfile_failing = Some(why);
                            }
                        }
                        Ok(()) => {
                            if textfile_failing.take().is_some() {
                                eprintln!(
                                    "rttlab agent: --textfile {}: written again",
                                    path.display()
                                );
                            }
                        }
                    }
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        Ok(())
    })?;
    drop(agent);
    eprintln!("rttlab agent: stopped");
    Ok(())
}

/// Set `stop` on SIGTERM or SIGINT; a second one ends the process at once, by the
/// signal's default action. The stop is honoured within a second whatever the agent
/// is doing: the main loop notices it within its 200 ms tick (a reload's names are
/// resolved on the reload thread, which is not waited for), the metrics endpoint
/// within its 100 ms tick and at most 100 ms more for scrapes in progress
/// (`MetricsServer::serve`), and the in-kernel passive engine detaches its programs
/// within 200 ms (`agent::passive`). Witness: tests/agent_hostile.rs, SIGTERM to exit
/// under a reload of 200 000 peers and of /dev/zero.
fn stop_on_signal(stop: &Arc<AtomicBool>) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    for signal in [SIGINT, SIGTERM] {
        // The order matters: the first handler sees the flag as the previous signal
        // left it, then the second sets it.
        signal_hook::flag::register_conditional_default(signal, Arc::clone(stop))
            .and_then(|_| signal_hook::flag::register(signal, Arc::clone(stop)))
            .context("installing the SIGTERM and SIGINT handlers")?;
    }
    Ok(())
}

/// Apply a reloaded plan: new probe settings restart every peer's probes (their
/// series and counters stay); otherwise only peers added, removed or relabelled change.
fn reload(agent: &mut Agent, current: &mut Plan, next: Plan) {
    if next.buckets != current.buckets {
        eprintln!("rttlab agent: new histogram buckets take effect at the next start");
    }
    if next.probes != current.probes || next.settings != current.settings {
        if let Err(e) = agent.set_probes(next.probes.clone(), next.settings.clone()) {
            eprintln!(
                "rttlab agent: keeping the previous probes: {}",
                rttlab::error_chain(&e)
            );
        }
    }
    agent.set_peers(next.peers.clone(), next.by_ip.clone());
    eprintln!(
        "rttlab agent: reloaded, probing {} peer(s)",
        next.peers.len()
    );
    *current = Plan {
        buckets: current.buckets.clone(),
        ..next
    };
}
