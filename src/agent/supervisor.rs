//! The agent's supervisor: the plan (peers, probes and their settings, from the flags,
//! the config file and the peers file), reloads read off the main loop, the textfile's
//! cadence, and the main loop that applies them until SIGTERM. `cli/agent.rs` only
//! parses the flags into [`Flags`] and starts the servers.

use super::exposition::write_textfile;
use super::http::MetricsServer;
use super::metrics::{Buckets, BucketsError, Metrics};
use super::peers::{self, ConfigFile, Mesh, Peer, PeerError};
use super::prober::{self, NotAProbe, Probe, ProbeSettings};
use super::Agent;
use crate::kernel::fs::FileStamp;
use crate::kernel::rlimit;
use std::collections::HashMap;
use std::net::{IpAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// What the command line sets that a reload reads again with the files.
#[derive(Clone, Debug, Default)]
pub struct Flags {
    /// `--config`: the TOML file read again on SIGHUP.
    pub config: Option<PathBuf>,
    /// `--peer`, each `HOST[:PORT]`.
    pub peers: Vec<String>,
    /// `--peers-file`: Prometheus file_sd JSON, read again when it changes.
    pub peers_file: Option<PathBuf>,
    /// `--probes`; empty: the config file's, or [`Probe::DEFAULT`].
    pub probes: Vec<Probe>,
    /// `--interval`; `None`: the config file's, or 1 s.
    pub interval: Option<Duration>,
    /// `--timeout`; `None`: the config file's, or 10 s.
    pub timeout: Option<Duration>,
    /// `--mesh`; `None`: the config file's, or the full mesh.
    pub mesh: Option<Mesh>,
    /// `--self`.
    pub self_target: Option<String>,
    /// `--buckets`; `None`: the config file's, or 10us:10s:3.
    pub buckets: Option<Buckets>,
    /// `--max-peers`.
    pub max_peers: usize,
    /// The probe server's port: a peer on it at one of this host's addresses is this
    /// host.
    pub own_port: u16,
    /// The metrics endpoint's port (a peer's `instance` label names it).
    pub metrics_port: u16,
    /// `--metrics-max-connections`: descriptors the endpoint may hold.
    pub metrics_max_connections: usize,
    /// The control connections' secret.
    pub secret: Option<Vec<u8>>,
}

/// Everything that a reload may change, resolved from the flags and the config file.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The peers probed (the mesh's choice, this host left out).
    pub peers: Vec<Peer>,
    /// The peers by the addresses their names resolve to, resolved with the plan (on
    /// the reload thread, never on the loop that must notice a stop).
    pub by_ip: HashMap<IpAddr, Peer>,
    /// The peers file, from the flag or the config file.
    pub peers_file: Option<PathBuf>,
    /// The peers file's identity just before it was read: a change after that, even
    /// one made while the agent was starting, is a change to read.
    pub peers_stamp: Option<FileStamp>,
    /// The probes every peer gets.
    pub probes: Vec<Probe>,
    /// Their interval, timeout and secret.
    pub settings: ProbeSettings,
    /// The histograms' buckets (taking effect at the next start).
    pub buckets: Buckets,
    /// A rotating mesh and the epoch this plan chose for: the plan is made again
    /// when the epoch moves on.
    pub rotation: Option<(Mesh, u64)>,
    /// A peer left out because it is this host (one of its addresses, on the agent's
    /// own port), found so rather than named by `--self`: said at start and at a
    /// reload that changes it, so that a `--peer 127.0.0.1` never vanishes unsaid.
    pub this_host: Option<String>,
}

impl Plan {
    /// The rotating mesh's epoch now (`None`: it does not rotate).
    pub fn epoch_now(&self) -> Option<u64> {
        self.rotation.as_ref().map(|(mesh, _)| {
            let unix_s = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            mesh.epoch(unix_s)
        })
    }

    /// What the agent says of a peer it leaves out as this host.
    pub fn this_host_line(&self, own_port: u16) -> Option<String> {
        self.this_host.as_ref().map(|t| {
            format!(
                "rttlab agent: peer {t} is this host (one of its addresses, on the agent's port {own_port}): not probed; --self names which peer this host is"
            )
        })
    }
}

/// Why a plan could not be made: at start, the agent's error; at a reload, the running
/// peers stay.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The config file, the peers file, or the mesh.
    #[error(transparent)]
    Peers(#[from] PeerError),
    /// A `--peer` or `--self` target, or one of the config file's peers.
    #[error("{flag}")]
    Target {
        /// `--peer` or `--self`.
        flag: &'static str,
        /// What is wrong with it.
        #[source]
        source: PeerError,
    },
    /// A value in the config file.
    #[error("{}: {key}: {what}", file.display())]
    Value {
        /// The config file.
        file: PathBuf,
        /// Its key.
        key: &'static str,
        /// What is wrong with the value.
        what: String,
    },
    /// Buckets the agent cannot make.
    #[error(transparent)]
    Buckets(#[from] BucketsError),
    /// The interval outside 10 ms..60 s.
    #[error("{at}the interval must be within 10ms..60s")]
    Interval {
        /// The config file and key, or empty for the flag.
        at: String,
    },
    /// More peers than `--max-peers`.
    #[error("{named} peers named (--peer, the config file and the peers file together), more than --max-peers {max}")]
    TooManyPeers {
        /// Peers named.
        named: usize,
        /// `--max-peers`.
        max: usize,
    },
    /// The peers' probes would not fit the open-file limit.
    #[error("{peers} peers × {per_peer} descriptors ({probes}) need {need}, more than the {budget} the agent's probes may hold (half of ulimit -n {soft}, less the metrics endpoint's {metrics_connections} connections): raise the limit (LimitNOFILE= in the unit, ulimit -n) or probe fewer peers (--mesh, --probes)")]
    Descriptors {
        /// Peers probed.
        peers: usize,
        /// Descriptors each holds.
        per_peer: u64,
        /// The probes that hold them.
        probes: String,
        /// Descriptors needed.
        need: u64,
        /// Descriptors the probes may hold.
        budget: u64,
        /// The soft open-file limit.
        soft: u64,
        /// `--metrics-max-connections`.
        metrics_connections: usize,
    },
}

/// The plan `flags` and the files they name give now.
///
/// # Errors
/// A file that cannot be read or parsed, a value out of range, too many peers.
pub fn plan(flags: &Flags) -> Result<Plan, PlanError> {
    let file = match &flags.config {
        Some(p) => peers::read_config(p)?,
        None => ConfigFile::default(),
    };
    let (probes, interval, timeout) = probing(flags, &file)?;
    let mesh = match (&flags.mesh, &file.mesh) {
        (Some(m), _) => m.clone(),
        (None, Some(m)) => m
            .parse()
            .map_err(|e: PeerError| bad_value(flags, "mesh", e.to_string()))?,
        (None, None) => Mesh::default(),
    };
    let buckets = match (&flags.buckets, &file.buckets) {
        (Some(b), _) => b.clone(),
        (None, Some(b)) => b
            .parse()
            .map_err(|e: BucketsError| bad_value(flags, "buckets", e.to_string()))?,
        (None, None) => Buckets::log(Duration::from_micros(10), Duration::from_secs(10), 3)?,
    };
    let peers_file = flags.peers_file.clone().or(file.peers_file.clone());
    let peers_stamp = stamp(peers_file.as_deref());
    let all = named_peers(flags, &file, peers_file.as_deref())?;
    let named_self = flags.self_target.is_some() || file.self_target.is_some();
    let me = match flags.self_target.as_ref().or(file.self_target.as_ref()) {
        Some(t) => {
            let p = target("--self", t)?;
            Some(
                all.iter()
                    .find(|x| x.target == p.target)
                    .cloned()
                    .unwrap_or(p),
            )
        }
        None => all.iter().find(|p| is_me(p, flags.own_port)).cloned(),
    };
    let unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let epoch = mesh.epoch(unix_s);
    let peers: Vec<Peer> = mesh
        .select(&all, me.as_ref(), epoch)?
        .into_iter()
        .map(|p| p.named_as_instance(flags.own_port, flags.metrics_port))
        .collect();
    check_descriptors(peers.len(), &probes, flags.metrics_max_connections)?;
    let this_host = me
        .as_ref()
        .filter(|_| !named_self)
        .map(|m| m.target.clone());
    Ok(Plan {
        rotation: mesh.rotate.is_some().then(|| (mesh.clone(), epoch)),
        this_host,
        by_ip: peers::by_address(&peers),
        peers,
        peers_file,
        peers_stamp,
        probes,
        settings: ProbeSettings {
            interval,
            timeout,
            secret: flags.secret.clone(),
        },
        buckets,
    })
}

/// A value of the config file's `key` that is not what it should be.
fn bad_value(flags: &Flags, key: &'static str, what: String) -> PlanError {
    PlanError::Value {
        file: flags.config.clone().unwrap_or_default(),
        key,
        what,
    }
}

/// A target given by `flag` (or its config key).
fn target(flag: &'static str, t: &str) -> Result<Peer, PlanError> {
    Peer::parse(t, Vec::new()).map_err(|source| PlanError::Target { flag, source })
}

/// The probes, interval and timeout: each flag first, else the config file's key,
/// else the default (every probe, 1 s, 10 s); the interval within 10 ms–60 s.
fn probing(
    flags: &Flags,
    file: &ConfigFile,
) -> Result<(Vec<Probe>, Duration, Duration), PlanError> {
    let probes = if !flags.probes.is_empty() {
        flags.probes.clone()
    } else if let Some(list) = &file.probes {
        list.iter()
            .map(|s| s.parse())
            .collect::<Result<Vec<Probe>, NotAProbe>>()
            .map_err(|e| bad_value(flags, "probes", e.to_string()))?
    } else {
        Probe::DEFAULT.to_vec()
    };
    let duration = |flag: Option<Duration>, key: &'static str, v: &Option<String>, default| {
        flag.map_or_else(
            || {
                crate::stats::units::parse_seconds(v.as_deref().unwrap_or(default))
                    .map_err(|e| bad_value(flags, key, e))
            },
            Ok,
        )
    };
    if probes.contains(&Probe::TcpCrr) && probes.contains(&Probe::TcpConnect) {
        return Err(bad_value(
            flags,
            "probes",
            "tcp_crr already times the connect (layer tcp_connect) of rttlab's server: give tcp_crr or tcp_connect, not both".into(),
        ));
    }
    let interval = duration(flags.interval, "interval", &file.interval, "1s")?;
    let timeout = duration(flags.timeout, "timeout", &file.timeout, "10s")?;
    if interval < Duration::from_millis(10) || interval > Duration::from_secs(60) {
        return Err(PlanError::Interval {
            at: match (&flags.config, flags.interval) {
                (Some(p), None) => format!("{}: interval: ", p.display()),
                _ => String::new(),
            },
        });
    }
    Ok((probes, interval, timeout))
}

/// Every peer named: --peer and the config's peers, then the peers file's; at most
/// --max-peers, checked before anything is done per peer (finding this host among
/// them resolves names).
fn named_peers(
    flags: &Flags,
    file: &ConfigFile,
    peers_file: Option<&std::path::Path>,
) -> Result<Vec<Peer>, PlanError> {
    let mut all = Vec::new();
    for t in flags.peers.iter().chain(file.peers.iter().flatten()) {
        all.push(target("--peer", t)?);
    }
    if let Some(f) = peers_file {
        all.extend(peers::read_file_sd(f)?);
    }
    if all.len() > flags.max_peers {
        return Err(PlanError::TooManyPeers {
            named: all.len(),
            max: flags.max_peers,
        });
    }
    Ok(all)
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
) -> Result<(), PlanError> {
    let Ok(limit) = rlimit::open_files() else {
        return Ok(());
    };
    let per_peer = descriptors_per_peer(probes);
    let need = peers as u64 * per_peer;
    let budget = (limit.soft / 2).saturating_sub(metrics_connections as u64 + 32);
    if need > budget {
        return Err(PlanError::Descriptors {
            peers,
            per_peer,
            probes: probes
                .iter()
                .filter(|p| **p != Probe::Icmp)
                .map(|p| p.name())
                .collect::<Vec<_>>()
                .join(", "),
            need,
            budget,
            soft: limit.soft,
            metrics_connections,
        });
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

/// The peers file's identity, to notice it changed (also replaced by a rename).
fn stamp(p: Option<&Path>) -> Option<FileStamp> {
    crate::kernel::fs::stamp(p?)
}

/// Reloads, off the main loop: reading and parsing a large or hostile peers file and
/// resolving its names can take seconds, and the main loop must notice SIGTERM within
/// its tick whatever a reload is doing. The loop asks with [`Reloader::request`] and
/// polls [`Reloader::poll`]; the thread is never joined, so a reload still running at
/// exit ends with the process.
struct Reloader {
    ask: mpsc::Sender<()>,
    done: mpsc::Receiver<Result<Plan, PlanError>>,
    /// A reload is running.
    busy: bool,
    /// Another was asked for while it ran (the file may have changed after it read it).
    again: bool,
}

impl Reloader {
    fn start(flags: Arc<Flags>) -> std::io::Result<Self> {
        let (ask, asked) = mpsc::channel::<()>();
        let (tell, done) = mpsc::channel();
        std::thread::Builder::new()
            .name("reload".into())
            .spawn(move || {
                for () in asked {
                    if tell.send(plan(&flags)).is_err() {
                        break;
                    }
                }
            })?;
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
    fn poll(&mut self) -> Option<Result<Plan, PlanError>> {
        let r = self.done.try_recv().ok()?;
        self.busy = false;
        if std::mem::take(&mut self.again) {
            self.request();
        }
        Some(r)
    }
}

/// Set `stop` on SIGTERM or SIGINT; a second one ends the process at once, by the
/// signal's default action. The stop is honoured within a second whatever the agent
/// is doing: the main loop and the metrics endpoint are woken by it at once
/// ([`super::wake`]; a reload's names are resolved on the reload thread, which is not
/// waited for), the endpoint gives scrapes in progress at most 100 ms more
/// (`MetricsServer::serve`), and the in-kernel passive engine detaches its programs
/// within 200 ms (`agent::passive`). Witness: tests/agent_hostile.rs, SIGTERM to exit
/// under a reload of 200 000 peers and of /dev/zero.
///
/// # Errors
/// A handler could not be installed.
pub fn stop_on_signal(stop: &Arc<AtomicBool>) -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    for signal in [SIGINT, SIGTERM] {
        // The order matters: the first handler sees the flag as the previous signal
        // left it, then the second sets it.
        signal_hook::flag::register_conditional_default(signal, Arc::clone(stop))?;
        signal_hook::flag::register(signal, Arc::clone(stop))?;
    }
    Ok(())
}

/// The agent, running: its plan, how to make the next, and where its metrics go.
pub struct Supervisor {
    /// The probing agent.
    pub agent: Agent,
    /// The plan it runs.
    pub current: Plan,
    /// The flags the next plan is made from.
    pub flags: Arc<Flags>,
    /// Its metrics.
    pub metrics: Arc<Metrics>,
    /// `--textfile`: the metrics written there every interval.
    pub textfile: Option<PathBuf>,
}

impl Supervisor {
    /// Serve the metrics on `http` and supervise until `stop`: SIGHUP or a changed
    /// peers file reloads (off this loop), the textfile is written every interval.
    ///
    /// # Errors
    /// The SIGHUP handler or the reload thread could not be set up.
    pub fn run(mut self, http: MetricsServer, stop: &Arc<AtomicBool>) -> std::io::Result<()> {
        let hup = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&hup))?;
        // After the flags' handlers: a signal sets its flag, then ends the sleep.
        let wake = super::wake::SignalWake::new(&[
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGHUP,
        ])?;
        let mut reloader = Reloader::start(Arc::clone(&self.flags))?;
        let metrics = Arc::clone(&self.metrics);
        std::thread::scope(|s| {
            s.spawn(|| {
                if let Err(e) = http.serve(&metrics, stop) {
                    eprintln!("rttlab agent: the metrics endpoint stopped: {e}");
                }
            });
            let mut seen = self.current.peers_stamp;
            let mut epoch_seen = self.current.rotation.as_ref().map(|r| r.1);
            let mut next_textfile = Instant::now();
            let mut textfile_failing: Option<String> = None;
            while !stop.load(Ordering::Relaxed) {
                // A signal is seen at once, a changed peers file within half a second.
                wake.wait(Duration::from_millis(500));
                let changed = stamp(self.current.peers_file.as_deref()) != seen;
                // A new epoch asks for one reload (a failing one is not asked again
                // every tick).
                let epoch = self.current.epoch_now();
                let rotated = epoch != epoch_seen;
                epoch_seen = epoch;
                if hup.swap(false, Ordering::Relaxed) || changed || rotated {
                    seen = stamp(self.current.peers_file.as_deref());
                    reloader.request();
                }
                if let Some(result) = reloader.poll() {
                    self.reloaded(result);
                }
                if Instant::now() >= next_textfile {
                    next_textfile = Instant::now() + self.current.settings.interval;
                    self.write_textfile(&mut textfile_failing);
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
        Ok(())
    }

    /// A reload's result: applied and counted, or counted and said, the running peers
    /// kept.
    fn reloaded(&mut self, result: Result<Plan, PlanError>) {
        let outcome = match result {
            Ok(next) => {
                self.apply(next);
                "success"
            }
            Err(e) => {
                eprintln!(
                    "rttlab agent: reload failed, keeping the previous peers: {}",
                    crate::error_chain(&e)
                );
                "failure"
            }
        };
        self.metrics
            .reloads
            .get_or_create(&vec![("result".into(), outcome.into())])
            .inc();
        self.metrics.reload_ok.set(i64::from(outcome == "success"));
    }

    /// Apply a reloaded plan: new probe settings restart every peer's probes (their
    /// series and counters stay); otherwise only peers added, removed or relabelled
    /// change.
    fn apply(&mut self, next: Plan) {
        if next.buckets != self.current.buckets {
            eprintln!("rttlab agent: new histogram buckets take effect at the next start");
        }
        if next.probes != self.current.probes || next.settings != self.current.settings {
            if let Err(e) = self
                .agent
                .set_probes(next.probes.clone(), next.settings.clone())
            {
                eprintln!(
                    "rttlab agent: keeping the previous probes: {}",
                    crate::error_chain(&e)
                );
            }
        }
        self.agent.set_peers(next.peers.clone(), next.by_ip.clone());
        eprintln!(
            "rttlab agent: reloaded, probing {} peer(s)",
            next.peers.len()
        );
        if next.this_host != self.current.this_host {
            if let Some(line) = next.this_host_line(self.flags.own_port) {
                eprintln!("{line}");
            }
        }
        self.current = Plan {
            buckets: self.current.buckets.clone(),
            ..next
        };
    }

    /// `--textfile`: said once when it starts failing (or fails anew), not every
    /// interval, and once when it is written again.
    fn write_textfile(&self, failing: &mut Option<String>) {
        let Some(path) = &self.textfile else {
            return;
        };
        match write_textfile(path, &self.metrics) {
            Err(e) => {
                let why = crate::error_chain(&e);
                if failing.as_ref() != Some(&why) {
                    eprintln!("rttlab agent: --textfile {}: {why}", path.display());
                    *failing = Some(why);
                }
            }
            Ok(()) => {
                if failing.take().is_some() {
                    eprintln!("rttlab agent: --textfile {}: written again", path.display());
                }
            }
        }
    }
}
