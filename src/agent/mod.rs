//! `rttlab agent`: one long-running process per host that serves probes as
//! `rttlab serve` does, probes its peers at every layer on a paced schedule, and
//! exports what it measures for Prometheus to scrape (smokeping_prober and Pingmesh's
//! job, at all layers at once).
//!
//! Peers come and go without a restart: [`Agent::set_peers`] starts the probes of new
//! peers, stops those of removed ones and drops their series; a peer that stays keeps
//! its counters, so they only ever grow.

pub mod batch;
pub mod connect;
pub mod exposition;
pub mod histogram;
pub mod http;
pub mod levels;
pub mod metrics;
pub mod passive;
pub mod peers;
pub mod prober;
pub mod process;
pub mod service;
pub mod smokeping;
pub mod supervisor;
pub mod threaded;
pub mod wake;
pub mod wheel;

use crate::kernel::sock_diag::{DiagFilter, SockDiag};
use crate::probe::control::PortRange;
use crate::probe::echo::Echoer;
use crate::probe::server::served::ServedStreams;
use batch::Batch;
use metrics::{labels, Metrics, LAYERS};
use peers::{Peer, PeersByIp};
use prober::{Probe, ProbeSettings};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use threaded::ThreadedProbe;

/// Errors starting the agent.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// ICMP is among the probes and no ICMP socket (or its receive timestamps) could be
    /// set up.
    #[error("ICMP probes need an ICMP socket (drop icmp from --probes to run without one)")]
    Icmp(#[source] crate::probe::ping::PingError),
    /// A thread could not be spawned: which one (`probe`, `srtt_server`), and the OS error.
    #[error("starting the agent's {0} thread")]
    Thread(&'static str, #[source] std::io::Error),
}

/// The agent: its metrics and the probes of every peer.
pub struct Agent {
    metrics: Arc<Metrics>,
    settings: ProbeSettings,
    probes: Vec<Probe>,
    /// Every peer's ICMP, TCP_RR and UDP_RR probes.
    batch: Batch,
    /// TCP_CRR probes, by target.
    threaded: BTreeMap<String, ThreadedProbe>,
    running: BTreeMap<String, Peer>,
    /// Peers by address, for naming the clients of our own server.
    by_ip: Arc<PeersByIp>,
    stop: Arc<AtomicBool>,
    /// The passive engine's thread, joined on drop: the in-kernel engine detaches its
    /// programs there.
    passive: Option<passive::Worker>,
    /// The service layers' thread, joined on drop: their programs are detached there.
    service: Option<service::Worker>,
}

impl Agent {
    /// An agent with no peer yet. The `srtt_server` layer samples the TCP_RR streams
    /// of its own server (`served`, whose data connections use `data_ports`) that
    /// belong to peers: no other socket of the host, not the control connections
    /// (their srtt is the control protocol's, delayed ACKs and all), and no client
    /// that is not a peer.
    ///
    /// # Errors
    /// ICMP asked for and no ICMP socket opens; a thread cannot start.
    pub fn new(
        metrics: Arc<Metrics>,
        probes: Vec<Probe>,
        settings: ProbeSettings,
        data_ports: PortRange,
        served: Arc<ServedStreams>,
    ) -> Result<Self, AgentError> {
        let interval = settings.interval;
        let batch = start_batch(&metrics, &probes, &settings)?;
        let stop = Arc::new(AtomicBool::new(false));
        let by_ip = Arc::new(PeersByIp::default());
        {
            let (m, by_ip, stop) = (Arc::clone(&metrics), Arc::clone(&by_ip), Arc::clone(&stop));
            std::thread::Builder::new()
                .name("srtt-server".into())
                .spawn(move || sample_server_srtt(&m, &by_ip, data_ports, &served, interval, &stop))
                .map_err(|e| AgentError::Thread("srtt_server", e))?;
        }
        Ok(Self {
            metrics,
            settings,
            probes,
            batch,
            threaded: BTreeMap::new(),
            running: BTreeMap::new(),
            by_ip,
            stop,
            passive: None,
            service: None,
        })
    }

    /// Run other probes, or the same differently: every peer's probes restart; the
    /// series and counters of the kinds still probed stay, those of kinds no longer
    /// probed go (a frozen series would read as a path that stopped changing).
    ///
    /// # Errors
    /// ICMP newly asked for and no ICMP socket opens.
    pub fn set_probes(
        &mut self,
        probes: Vec<Probe>,
        settings: ProbeSettings,
    ) -> Result<(), AgentError> {
        let batch = start_batch(&self.metrics, &probes, &settings)?;
        let dropped: Vec<&str> = self
            .probes
            .iter()
            .filter(|p| !probes.contains(p))
            .flat_map(|p| p.layers().iter().copied())
            .collect();
        for p in self.running.values() {
            self.forget(p, &dropped);
        }
        let peers: Vec<Peer> = std::mem::take(&mut self.running).into_values().collect();
        for (_, c) in std::mem::take(&mut self.threaded) {
            c.stop();
        }
        // The old loop stops here, its sessions closed.
        self.batch = batch;
        self.probes = probes;
        self.settings = settings;
        let by_ip = self.by_ip.read().clone();
        self.set_peers(peers, by_ip);
        Ok(())
    }

    /// Probe exactly `peers` from now on; `by_ip` names them by address for the
    /// layers that see only an address (`srtt_server`, passive), resolved beforehand
    /// ([`peers::by_address`]) so that nothing here waits on a resolver.
    pub fn set_peers(&mut self, peers: Vec<Peer>, by_ip: HashMap<IpAddr, Peer>) {
        let wanted: BTreeMap<String, Peer> =
            peers.into_iter().map(|p| (p.target.clone(), p)).collect();
        let gone: Vec<String> = self
            .running
            .iter()
            .filter(|(t, p)| wanted.get(*t) != Some(*p))
            .map(|(t, _)| t.clone())
            .collect();
        let mut forgotten = Vec::new();
        for t in gone {
            if let Some(p) = self.running.remove(&t) {
                self.batch.remove(&t);
                if let Some(c) = self.threaded.remove(&t) {
                    c.stop();
                }
                forgotten.push(p);
            }
        }
        let batched: Vec<Probe> = self
            .probes
            .iter()
            .copied()
            .filter(|p| !p.threaded())
            .collect();
        // At most one: the plan refuses TCP_CRR with tcp_connect (both time the
        // connect, into one series).
        let threaded = self.probes.iter().copied().find(|p| p.threaded());
        for (t, p) in wanted {
            if self.running.contains_key(&t) {
                continue;
            }
            self.batch.add(&p, &batched, &self.metrics);
            if let Some(kind) = threaded {
                if let Some(c) = ThreadedProbe::start(&p, kind, &self.metrics, &self.settings) {
                    self.threaded.insert(t.clone(), c);
                }
            }
            self.running.insert(t, p);
        }
        self.metrics.peers.set(self.running.len() as i64);
        // The threads that name series by address see the new peers before the old
        // ones' series go: a series removed first could be made again by a sample
        // named through the old map, and then stay for good.
        self.by_ip.replace(by_ip);
        for p in &forgotten {
            self.forget(p, &LAYERS);
        }
    }

    /// Drop a peer's series of `layers`: all of them for a peer no longer probed.
    fn forget(&self, p: &Peer, layers: &[&str]) {
        let m = &self.metrics;
        for &layer in layers {
            let l = labels(&p.name, layer, &p.labels);
            m.rtt.remove(&l);
            m.sent.remove(&l);
            m.lost.remove(&l);
            m.timed_out.remove(&l);
            for r in prober::ErrorReason::ALL {
                m.errors.remove(&prober::with_reason(&l, r));
            }
            m.retransmissions.remove(&l);
            m.srtt.remove(&l);
            m.min_rtt.remove(&l);
            m.late.remove(&l);
        }
        if let Some(f) = &m.smokeping {
            if layers.contains(&"icmp") {
                f.forget(&p.target);
            }
        }
    }

    /// Watch `settings`' interface for the passive layers.
    ///
    /// # Errors
    /// The interface cannot be watched by the engine that must be used.
    pub fn watch(
        &mut self,
        settings: &passive::PassiveSettings,
    ) -> Result<passive::Started, passive::PassiveError> {
        let (started, worker) = passive::start(
            settings,
            Arc::clone(&self.metrics),
            Arc::clone(&self.by_ip),
            Arc::clone(&self.stop),
        )?;
        self.passive = Some(worker);
        Ok(started)
    }

    /// Time the transactions of `settings`' services.
    ///
    /// # Errors
    /// The kernel's programs cannot be loaded, or no thread starts.
    pub fn explain(
        &mut self,
        settings: &service::ServiceSettings,
    ) -> Result<(), service::ServiceError> {
        let worker = service::start(settings, Arc::clone(&self.metrics), Arc::clone(&self.stop))?;
        self.service = Some(worker);
        Ok(())
    }

    /// The peers probed now.
    pub fn peers(&self) -> impl Iterator<Item = &Peer> {
        self.running.values()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for (_, c) in std::mem::take(&mut self.threaded) {
            c.stop();
        }
        if let Some(w) = self.passive.take() {
            let _ = w.join();
        }
        if let Some(w) = self.service.take() {
            let _ = w.join();
        }
    }
}

/// The loop of every peer's ICMP, TCP_RR and UDP_RR probes, with ICMP sockets when
/// ICMP is probed.
fn start_batch(
    metrics: &Arc<Metrics>,
    probes: &[Probe],
    settings: &ProbeSettings,
) -> Result<Batch, AgentError> {
    let echoer = if probes.contains(&Probe::Icmp) {
        Some(Echoer::new().map_err(AgentError::Icmp)?)
    } else {
        None
    };
    Batch::start(Arc::clone(metrics), settings.clone(), echoer)
        .map_err(|e| AgentError::Thread("probe", e))
}

/// The `srtt_server` layer: TCP's srtt of the streams our own server holds for the
/// peers' TCP_RR probes, read with sock_diag as `ss -ti` does, once an interval.
/// Sockets are known by inode ([`ServedStreams`]); clients that are not peers are
/// left out (their series would be named by nothing Prometheus can join).
fn sample_server_srtt(
    m: &Metrics,
    by_ip: &PeersByIp,
    data_ports: PortRange,
    served: &ServedStreams,
    interval: Duration,
    stop: &AtomicBool,
) {
    let Ok(mut diag) = SockDiag::open(None) else {
        return;
    };
    // The kernel keeps only our server's sockets (inet_diag bytecode): the agent's
    // own client sockets, on ephemeral ports, never reach user space.
    let filter = DiagFilter {
        states: 1 << 1, // ESTABLISHED
        sports: Some((data_ports.low, data_ports.high)),
        ..DiagFilter::default()
    };
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(interval);
        let names = by_ip.read();
        let _ = diag.dump_tcp(&filter, |e| {
            if !served.contains(u64::from(e.inode)) {
                return;
            }
            let Some(info) = e.tcp_info.as_ref().filter(|i| i.rtt_us > 0) else {
                return;
            };
            // sock_diag reports a v4 client of a [::] listener as IPv4 already.
            let Some(p) = names.get(&e.remote.ip()) else {
                return;
            };
            let l = labels(&p.name, "srtt_server", &p.labels);
            let srtt = f64::from(info.rtt_us) / 1e6;
            m.rtt.get_or_create(&l).observe(srtt);
            m.srtt.get_or_create(&l).set(srtt);
            if let Some(min) = info.min_rtt_us {
                m.min_rtt.get_or_create(&l).set(f64::from(min) / 1e6);
            }
        });
    }
}
