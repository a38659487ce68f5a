//! The passive layers: RTT of the real traffic between this host and its peers on a
//! live interface, for the ports the admin names: `passive_ts` (TCP timestamps, pping's
//! method) and `passive_seq` (data and the ACK that covers it, for hosts without
//! timestamps). Only samples a peer answered are kept, under that peer's name: any
//! other host on the wire would be a label value nobody bounded.
//!
//! On the in-kernel engine (the default where the kernel and the unit's capabilities
//! allow it) the rules run in tc programs and the kernel aggregates each peer's samples
//! into a histogram ([`crate::passive::in_kernel`]); `rttlab_rtt_seconds` reads it at
//! each scrape ([`super::histogram`]), so the link's packets and samples cost the
//! agent nothing. On the ring engine, frames are copied to the agent and timed here.

use super::histogram::{KernelSnapshot, KernelSource, Layout};
use super::metrics::{labels, Metrics, PASSIVE_DROPS};
use super::peers::{Peer, PeersByIp};
use crate::capture::filter::Selection;
use crate::capture::{self, Options as CaptureOptions, Source};
use crate::kernel::passive_bpf::{
    Aggregation, Framing, PassiveBpfError, RawAddr, RawAggKey, RawCounters,
};
use crate::passive::flow::Endpoint;
use crate::passive::in_kernel::{Engine, Options};
use crate::passive::live::{self, ChoiceError, EngineChoice};
use crate::passive::{Analyzer, Config, Filter, Method, Place, Sample, Sink};
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

/// Bytes kept of each frame on the ring engine: headers with every TCP option.
const SNAPLEN: u32 = 256;

/// What to watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassiveSettings {
    /// The interface captured on (`--passive-iface`).
    pub interface: String,
    /// TCP ports watched, at either end (`--passive-port`); empty would be every port.
    pub ports: Vec<u16>,
    /// Which engine (`--passive-engine`).
    pub engine: EngineChoice,
    /// Per flow direction, the least time between two TSvals or segments timed
    /// (`--passive-rate-limit`, ePPing's 100 ms by default; zero: every one).
    pub rate_limit: Duration,
    /// Forget a flow silent this long (`--passive-idle-timeout`).
    pub idle_timeout: Duration,
    /// Most flows held (`--passive-max-flows`).
    pub max_flows: usize,
    /// The in-kernel engine's room for TSvals and segments waiting for their answer
    /// (`--passive-max-pending`).
    pub max_pending: u32,
}

/// Why passive measurement could not start.
#[derive(Debug, thiserror::Error)]
pub enum PassiveError {
    /// The ring engine could not capture on the interface.
    #[error(transparent)]
    Capture(#[from] capture::SourceError),
    /// The interface could not be looked at.
    #[error(transparent)]
    Interface(#[from] capture::live::LiveError),
    /// The in-kernel engine (asked for by name, or failing past its checks).
    #[error(transparent)]
    Kernel(#[from] PassiveBpfError),
    /// The engine asked for cannot run here.
    #[error(transparent)]
    Choice(#[from] ChoiceError),
}

/// How passive measurement started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Started {
    /// `bpf` or `ring`.
    pub engine: &'static str,
    /// `tcx`, `clsact` or `ring`.
    pub attach: &'static str,
    /// Why the in-kernel engine was not used, when it was wanted.
    pub fallback: Option<String>,
}

/// The engine's thread: it ends within 200 ms of `stop`, the in-kernel engine's
/// programs detached and their journal entries gone.
pub type Worker = std::thread::JoinHandle<()>;

fn config(settings: &PassiveSettings, local: Vec<IpAddr>) -> Config {
    Config {
        ts: true,
        seq: true,
        filter: Filter {
            ports: settings.ports.clone(),
            ..Filter::default()
        },
        rate_limit_ns: crate::stats::units::ns(settings.rate_limit),
        idle_ns: crate::stats::units::ns(settings.idle_timeout),
        max_flows: settings.max_flows,
        local,
        ..Config::default()
    }
}

fn layer(m: Method) -> &'static str {
    match m {
        Method::Ts => "passive_ts",
        Method::Seq => "passive_seq",
    }
}

/// Start the passive layers on `settings`' interface until `stop`: on the engine asked
/// for, or the in-kernel one where it can run.
///
/// # Errors
/// The interface cannot be watched by the engine that must be used.
pub fn start(
    settings: &PassiveSettings,
    metrics: Arc<Metrics>,
    peers: Arc<PeersByIp>,
    stop: Arc<AtomicBool>,
) -> Result<(Started, Worker), PassiveError> {
    for layer in ["passive_ts", "passive_seq"] {
        let _ = metrics
            .passive_samples
            .get_or_create(&vec![("layer".into(), layer.into())]);
    }
    for reason in PASSIVE_DROPS {
        let _ = metrics
            .passive_dropped
            .get_or_create(&vec![("reason".into(), reason.into())]);
    }
    let fallback = match live::choose(settings.engine, None, true) {
        Ok(live::Engine::Ring(why)) => why,
        Ok(live::Engine::Bpf) => {
            match start_bpf(settings, metrics.clone(), peers.clone(), stop.clone()) {
                Ok(s) => return Ok(s),
                Err(PassiveError::Kernel(e)) => Some(live::fall_back(settings.engine, e)?),
                Err(e) => return Err(e),
            }
        }
        Err(e) => return Err(e.into()),
    };
    let worker = start_ring(settings, metrics, peers, stop)?;
    let started = Started {
        engine: "ring",
        attach: "ring",
        fallback,
    };
    Ok((started, worker))
}

/// The in-kernel engine's state the agent shares between its sweeping thread and the
/// series that read the kernel's histograms at each scrape.
struct KernelView {
    engine: Mutex<Engine>,
    /// Each watched peer's addresses (as the engine keys them), by peer name.
    addresses: RwLock<HashMap<String, Vec<u128>>>,
    layout: Arc<Layout>,
}

impl KernelView {
    /// The histogram of `method` over every address of peer `name`.
    fn read(&self, name: &str, method: u8) -> KernelSnapshot {
        let addrs = self
            .addresses
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(name)
            .cloned()
            .unwrap_or_default();
        let mut snap = KernelSnapshot {
            count: 0,
            sum_ns: 0,
            buckets: vec![0; self.layout.bounds().len() + 1],
        };
        let mut engine = self
            .engine
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for a in addrs {
            let Ok(Some(h)) = engine.bpf().aggregate(&key(a, method)) else {
                continue;
            };
            snap.count += h.count;
            snap.sum_ns += h.sum_ns;
            for (x, y) in snap.buckets.iter_mut().zip(&h.buckets) {
                *x += y;
            }
        }
        snap
    }
}

/// The kernel's key of a peer address's histogram (the engine aggregates per /32 and
/// /128: per host).
fn key(addr: u128, method: u8) -> RawAggKey {
    let v4 = (addr >> 32) == 0xffff;
    RawAggKey {
        prefix: RawAddr::from_u128(addr),
        prefix_len: if v4 { 32 } else { 128 },
        method,
        ..RawAggKey::default()
    }
}

fn start_bpf(
    settings: &PassiveSettings,
    metrics: Arc<Metrics>,
    peers: Arc<PeersByIp>,
    stop: Arc<AtomicBool>,
) -> Result<(Started, Worker), PassiveError> {
    let facts = capture::live::interface_facts(&settings.interface, None)?;
    let cfg = config(settings, facts.addresses.clone());
    let layout = Arc::new(Layout::new(metrics.buckets.bounds()));
    let options = Options {
        events: false,
        flow_events: false,
        aggregate: Some(Aggregation {
            prefix_v4: 32,
            prefix_v6: 128,
            bounds_ns: layout.bounds().to_vec(),
            watched_only: true,
        }),
        max_pending: settings.max_pending,
        ..Options::default()
    };
    let framing = if facts.link == crate::wire::LinkType::Ethernet {
        Framing::Ethernet
    } else {
        Framing::Ip
    };
    let (idle_timeout, max_age) = (settings.idle_timeout, Duration::from_nanos(cfg.max_age_ns));
    let mut engine = Engine::load(&cfg, &options, framing)?;
    let mode = engine.attach(
        &settings.interface,
        None,
        None,
        facts.loopback,
        Box::new(crate::kernel::tuning::Journal::for_run("agent")),
    )?;
    let view = Arc::new(KernelView {
        engine: Mutex::new(engine),
        addresses: RwLock::new(HashMap::new()),
        layout,
    });
    metrics
        .passive_engine
        .get_or_create(&vec![
            ("engine".into(), "bpf".into()),
            ("attach".into(), mode.name().into()),
        ])
        .set(1);
    sync_peers(&view, &metrics, &peers);
    let thread = std::thread::Builder::new()
        .name("passive-bpf".into())
        .spawn(move || sweep_and_export(&view, &metrics, &peers, &stop, (idle_timeout, max_age)));
    let worker = thread.map_err(|e| {
        PassiveError::Capture(capture::SourceError::Open {
            path: "passive-bpf thread".into(),
            source: e,
        })
    })?;
    let started = Started {
        engine: "bpf",
        attach: mode.name(),
        fallback: None,
    };
    Ok((started, worker))
}

/// The in-kernel engine's worker: every second, flows swept on the schedule, the
/// kernel's counters exported and the peers' addresses synced, until `stop`; then the
/// programs detached (a clsact attachment would outlive the process).
fn sweep_and_export(
    view: &Arc<KernelView>,
    metrics: &Metrics,
    peers: &PeersByIp,
    stop: &AtomicBool,
    (idle_timeout, max_age): (Duration, Duration),
) {
    let mut last = RawCounters::default();
    let mut schedule = live::Schedule::new(
        std::time::Instant::now(),
        crate::kernel::realtime_ns(),
        idle_timeout,
        max_age,
        None,
    );
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..10 {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let due = schedule.poll(std::time::Instant::now(), crate::kernel::realtime_ns());
        let counters = {
            let mut e = view
                .engine
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(what) = due.sweep {
                if let Err(err) = e.sweep(what) {
                    eprintln!("rttlab agent: passive sweep: {}", crate::error_chain(&err));
                }
            }
            e.bpf().counters()
        };
        if let Ok(c) = counters {
            export_counters(metrics, &last, &c);
            last = c;
        }
        sync_peers(view, metrics, peers);
    }
    // Detach now: a clsact attachment would outlive the process.
    let mut e = view
        .engine
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Err(err) = e.bpf().detach() {
        eprintln!("rttlab agent: {}", crate::error_chain(&err));
    }
}

/// The growth of the kernel's counters since `last`, added to the agent's.
fn export_counters(m: &Metrics, last: &RawCounters, now: &RawCounters) {
    let d = |a: u64, b: u64| b.saturating_sub(a);
    m.passive_packets.inc_by(d(last.packets, now.packets));
    m.passive_rate_limited
        .inc_by(d(last.rate_limited, now.rate_limited));
    for (layer, a, b) in [
        ("passive_ts", last.samples_ts, now.samples_ts),
        ("passive_seq", last.samples_seq, now.samples_seq),
    ] {
        m.passive_samples
            .get_or_create(&vec![("layer".into(), layer.into())])
            .inc_by(d(a, b));
    }
    for (reason, a, b) in [
        ("flow_map_full", last.flows_full, now.flows_full),
        ("pending_map_full", last.pending_full, now.pending_full),
        (
            "aggregate_map_full",
            last.aggregates_full,
            now.aggregates_full,
        ),
        ("ring_buffer_full", last.events_lost, now.events_lost),
    ] {
        m.passive_dropped
            .get_or_create(&vec![("reason".into(), reason.into())])
            .inc_by(d(a, b));
    }
}

/// Watch the peers' addresses and give each peer its kernel-fed series; stop watching
/// the addresses of peers gone (their series went with them, `Agent::forget`).
///
/// The peers stay read-locked throughout: `Agent::set_peers` replaces them before it
/// removes the series of peers gone, so a series made here from the old peers is made
/// before that removal, never after it.
fn sync_peers(view: &Arc<KernelView>, m: &Metrics, peers: &PeersByIp) {
    let peers = peers.read();
    let mut wanted: HashMap<String, (Vec<u128>, Peer)> = HashMap::new();
    for (ip, p) in peers.iter() {
        let e = wanted
            .entry(p.name.clone())
            .or_insert_with(|| (Vec::new(), p.clone()));
        e.0.push(Endpoint::new(*ip, 0).addr);
    }
    let mut known = view
        .addresses
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let before: HashSet<u128> = known.values().flatten().copied().collect();
    let after: HashSet<u128> = wanted.values().flat_map(|x| x.0.iter()).copied().collect();
    {
        let mut engine = view
            .engine
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for &a in after.difference(&before) {
            if let Err(e) = engine.bpf().watch(a, true) {
                eprintln!("rttlab agent: passive: {}", crate::error_chain(&e));
            }
        }
        for &a in before.difference(&after) {
            let _ = engine.bpf().watch(a, false);
            for method in [0, 1] {
                let _ = engine.bpf().forget_aggregate(&key(a, method));
            }
        }
    }
    let mut new = Vec::new();
    for (name, (addrs, peer)) in &wanted {
        if known.insert(name.clone(), addrs.clone()).is_none() {
            new.push((name, peer));
        }
    }
    known.retain(|name, _| wanted.contains_key(name));
    // Not under `known`'s lock: a scrape holds the family's lock while a series reads
    // `known`, and the family's lock is what making a series takes.
    drop(known);
    for (name, peer) in new {
        for (method, code) in [(Method::Ts, 0u8), (Method::Seq, 1)] {
            let (v, n) = (Arc::clone(view), name.clone());
            m.rtt
                .get_or_create(&labels(&peer.name, layer(method), &peer.labels))
                .set_kernel(KernelSource {
                    read: Arc::new(move || v.read(&n, code)),
                    layout: Arc::clone(&view.layout),
                    created: SystemTime::now(),
                });
        }
    }
}

/// Most addresses [`PeerSink`] remembers: past it, it forgets them all (a flood of
/// source addresses costs lookups, never memory).
const SERIES_CACHE: usize = 4096;

/// The ring engine's samples into the peers' series. The series a sample lands in is
/// looked up once per address and method while the peers stay as they are, not built
/// from labels per sample: that lookup (label strings, the family's lock and hash)
/// cost more than the frame's analysis.
struct PeerSink<'a> {
    metrics: &'a Metrics,
    peers: &'a PeersByIp,
    /// `rttlab_passive_samples_total` per method (ts, seq).
    samples: [prometheus_client::metrics::counter::Counter; 2],
    /// The peer series of each address seen since the peers last changed; `None`: not
    /// a peer.
    series: HashMap<(IpAddr, Method), Option<super::histogram::RttHistogram>>,
    /// The peers' version `series` was looked up in.
    version: u64,
}

impl<'a> PeerSink<'a> {
    fn new(metrics: &'a Metrics, peers: &'a PeersByIp) -> Self {
        let counter = |m| {
            metrics
                .passive_samples
                .get_or_create(&vec![("layer".into(), layer(m).into())])
                .clone()
        };
        Self {
            metrics,
            peers,
            samples: [counter(Method::Ts), counter(Method::Seq)],
            series: HashMap::new(),
            version: peers.version(),
        }
    }
}

impl Sink for PeerSink<'_> {
    fn sample(&mut self, s: &Sample) {
        self.samples[usize::from(s.method == Method::Seq)].inc();
        if s.place != Place::Network {
            return;
        }
        // A renamed, removed or new peer counts from its next sample.
        let version = self.peers.version();
        if version != self.version || self.series.len() >= SERIES_CACHE {
            self.series.clear();
            self.version = version;
        }
        let key = (s.host.ip(), s.method);
        if !self.series.contains_key(&key) {
            let names = self.peers.read();
            let found = names.get(&key.0).map(|p| {
                self.metrics
                    .rtt
                    .get_or_create(&labels(&p.name, layer(s.method), &p.labels))
                    .clone()
            });
            self.series.insert(key, found);
        }
        if let Some(Some(h)) = self.series.get(&key) {
            h.observe(s.rtt_ns as f64 / 1e9);
        }
    }
}

/// The ring engine: open the interface (so a bad name or a missing privilege is an
/// error at start), then analyse in a thread until `stop`. The capture is opened in
/// that thread: a source is not `Send`.
fn start_ring(
    settings: &PassiveSettings,
    metrics: Arc<Metrics>,
    peers: Arc<PeersByIp>,
    stop: Arc<AtomicBool>,
) -> Result<Worker, capture::SourceError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let settings = settings.clone();
    let thread = std::thread::Builder::new()
        .name("passive-ring".into())
        .spawn(move || {
            let opened = capture::open(
                &Source::Interface {
                    name: settings.interface.clone(),
                    netns: None,
                },
                CaptureOptions {
                    select: Selection {
                        hosts: Vec::new(),
                        ports: settings.ports.clone(),
                    },
                    expression: None,
                    snaplen: SNAPLEN,
                    before_wait: None,
                },
            );
            let mut cap = match opened {
                Ok(c) => {
                    let _ = tx.send(Ok(()));
                    c
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            metrics
                .passive_engine
                .get_or_create(&vec![
                    ("engine".into(), "ring".into()),
                    ("attach".into(), "ring".into()),
                ])
                .set(1);
            let mut analyzer = Analyzer::new(config(&settings, cap.addresses().to_vec()));
            let mut sink = PeerSink::new(&metrics, &peers);
            let (mut packets, mut drops, mut limited) = (0u64, 0u64, 0u64);
            let mut next_sync = std::time::Instant::now();
            while !stop.load(Ordering::Relaxed) {
                if std::time::Instant::now() >= next_sync {
                    // Every peer's passive series, present at 0 from when it is added
                    // (as the in-kernel engine's are).
                    for p in peers.read().values() {
                        for m in [Method::Ts, Method::Seq] {
                            let _ =
                                metrics
                                    .rtt
                                    .get_or_create(&labels(&p.name, layer(m), &p.labels));
                        }
                    }
                    next_sync += Duration::from_secs(1);
                }
                let r = cap.read(Duration::from_millis(200), 4096, &mut |ts, link, frame| {
                    analyzer.packet(ts, link, frame, &mut sink);
                });
                let c = analyzer.counters();
                metrics.passive_packets.inc_by(c.packets - packets);
                packets = c.packets;
                metrics
                    .passive_rate_limited
                    .inc_by(c.rate_limited - limited);
                limited = c.rate_limited;
                if let Some(st) = cap.live_stats() {
                    metrics
                        .passive_dropped
                        .get_or_create(&vec![("reason".into(), "ring_buffer_full".into())])
                        .inc_by(st.drops.saturating_sub(drops));
                    drops = st.drops;
                }
                if let Err(e) = r {
                    eprintln!(
                        "rttlab agent: passive layers stopped: {}",
                        crate::error_chain(&e)
                    );
                    return;
                }
            }
        });
    let thread_err = |e: std::io::Error| capture::SourceError::Open {
        path: "passive-ring thread".into(),
        source: e,
    };
    let worker = thread.map_err(thread_err)?;
    rx.recv()
        .map_err(|_| thread_err(std::io::Error::other("the capture thread died")))??;
    Ok(worker)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(target: &str) -> Peer {
        Peer::parse(target, Vec::new()).unwrap()
    }

    fn sample(host: IpAddr) -> Sample {
        Sample {
            ts_ns: 0,
            rtt_ns: 2_000_000,
            min_ns: 2_000_000,
            method: Method::Ts,
            host: Endpoint::new(host, 5001),
            peer: Endpoint::new("10.0.0.9".parse().unwrap(), 40_000),
            place: Place::Network,
            pping: None,
        }
    }

    /// `rttlab_rtt_seconds_count` of `name`'s passive_ts series in the exposition, if
    /// it has one.
    fn count(m: &Metrics, name: &str) -> Option<u64> {
        let want = format!("rttlab_rtt_seconds_count{{peer=\"{name}\",layer=\"passive_ts\"}} ");
        m.text()
            .lines()
            .find_map(|l| l.strip_prefix(&want).map(|v| v.parse().unwrap()))
    }

    /// Witness: the agent's own exposition (what Prometheus scrapes). The ring
    /// engine's cache of series follows the peers from the next sample after they
    /// change, as the agent changes them (`Agent::set_peers`: the peers replaced, then
    /// the series of the peers gone removed): a renamed peer's samples go to its new
    /// series, the old one is not made again, an address seen before it was a peer
    /// counts once it is one, and a removed peer's samples go nowhere.
    #[test]
    fn the_series_cache_follows_the_peers_from_the_next_sample() {
        let m = Metrics::new(&"1ms:100ms:1".parse().unwrap());
        let by_ip = PeersByIp::default();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        by_ip.replace(HashMap::from([(a, peer("10.0.0.1:12866"))]));
        let mut sink = PeerSink::new(&m, &by_ip);
        sink.sample(&sample(a));
        sink.sample(&sample(b));
        assert_eq!(count(&m, "10.0.0.1:12866"), Some(1));
        // Renamed, and b made a peer: the agent's order of changes.
        by_ip.replace(HashMap::from([
            (a, peer("10.0.0.1:12867")),
            (b, peer("10.0.0.2:12866")),
        ]));
        m.rtt.remove(&labels("10.0.0.1:12866", "passive_ts", &[]));
        sink.sample(&sample(a));
        sink.sample(&sample(b));
        sink.sample(&sample(b));
        assert_eq!(count(&m, "10.0.0.1:12866"), None, "the old name came back");
        assert_eq!(count(&m, "10.0.0.1:12867"), Some(1));
        assert_eq!(count(&m, "10.0.0.2:12866"), Some(2));
        by_ip.replace(HashMap::new());
        m.rtt.remove(&labels("10.0.0.1:12867", "passive_ts", &[]));
        m.rtt.remove(&labels("10.0.0.2:12866", "passive_ts", &[]));
        sink.sample(&sample(a));
        let text = m.text();
        assert!(
            !text
                .lines()
                .any(|l| l.starts_with("rttlab_rtt_seconds_count{") && l.contains("passive_ts")),
            "{text}"
        );
    }
}
