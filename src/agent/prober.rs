//! The probes of one peer: a thread per probe kind, each on its own paced and
//! jittered schedule, so that a TCP probe waiting out a retransmission never delays
//! the peer's ICMP echoes (what is measured at one layer does not shape another's).

use super::metrics::{labels, Gauge64, Metrics};
use super::peers::Peer;
use crate::kernel::tcp_info::TcpInfo;
use crate::probe::control::TestKind;
use crate::probe::echo::Echoer;
use crate::probe::rr::{Outcome, Session, SessionSpec};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use rand::{Rng, SeedableRng};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A kind of probe; each feeds one or two layers of `rttlab_rtt_seconds`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Probe {
    /// ICMP echo: layer `icmp`.
    Icmp,
    /// One TCP_RR transaction on a kept connection: `tcp_rr`, and that connection's
    /// srtt as `srtt_client`.
    TcpRr,
    /// One UDP_RR transaction: `udp_rr`.
    UdpRr,
    /// Connect, one transaction, close (TCP_CRR): `tcp_crr` and `tcp_connect`.
    TcpCrr,
}

impl Probe {
    pub const ALL: [Self; 4] = [Self::Icmp, Self::TcpRr, Self::UdpRr, Self::TcpCrr];
    /// The default set: one probe per layer that needs no new connection a second.
    pub const DEFAULT: [Self; 3] = [Self::Icmp, Self::TcpRr, Self::UdpRr];

    pub fn name(self) -> &'static str {
        match self {
            Self::Icmp => "icmp",
            Self::TcpRr => "tcp_rr",
            Self::UdpRr => "udp_rr",
            Self::TcpCrr => "tcp_crr",
        }
    }
}

impl std::str::FromStr for Probe {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("{s:?} is not a probe (icmp, tcp_rr, udp_rr, tcp_crr)"))
    }
}

/// How every probe runs.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeSettings {
    /// Between two probes of one kind to one peer (jittered ±10 %).
    pub interval: Duration,
    /// A TCP probe unanswered this long ends its connection; ICMP and UDP wait at
    /// most this or the interval, whichever is shorter.
    pub timeout: Duration,
    pub secret: Option<Vec<u8>>,
}

/// What every probe thread shares.
pub struct Shared {
    pub metrics: Arc<Metrics>,
    pub echoer: Option<Arc<Echoer>>,
    pub settings: ProbeSettings,
}

/// The running probes of one peer.
pub struct PeerProbes {
    pub peer: Peer,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// Each probe thread's stack: its frames are small, and a fleet is thousands of them.
const STACK: usize = 256 * 1024;
/// Longest wait before trying an unreachable peer again.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

impl PeerProbes {
    /// Start a thread per probe kind.
    pub fn start(peer: Peer, probes: &[Probe], shared: &Arc<Shared>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = probes
            .iter()
            .filter_map(|&probe| {
                // Looked up here, one thread at a time: thousands of new threads
                // creating series at once would queue on each family's lock, and
                // every writer's release wakes every waiting reader.
                let series = Series::new(&shared.metrics, &peer, probe);
                let (peer, shared, stop) = (peer.clone(), Arc::clone(shared), Arc::clone(&stop));
                std::thread::Builder::new()
                    .name(format!("probe-{}", probe.name()))
                    .stack_size(STACK)
                    .spawn(move || run(&peer, probe, &series, &shared, &stop))
                    .ok()
            })
            .collect();
        Self {
            peer,
            stop,
            threads,
        }
    }

    /// Ask every thread to stop (they notice at once, or when a probe in flight ends)
    /// and forget them.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in &self.threads {
            t.thread().unpark();
        }
    }
}

/// Wait until `due` or a stop; false when stopped.
fn sleep_until(due: Instant, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= due {
            return true;
        }
        std::thread::park_timeout(due - now);
    }
}

/// The series one probe thread writes, looked up once: a lookup takes the family's
/// lock, and thousands of threads taking it at every probe queue behind a scrape.
/// The handles share their values with the families, so a thread restarted with new
/// settings continues the same counters.
struct Series {
    rtt: Histogram,
    sent: Counter,
    errors: Counter,
    late: Counter,
    /// ICMP and UDP_RR.
    lost: Option<Counter>,
    /// The TCP probes.
    timed_out: Option<Counter>,
    retransmissions: Option<Counter>,
    /// TCP_CRR: `tcp_connect`.
    connect: Option<Histogram>,
    /// TCP_RR: `srtt_client`, and its last srtt and min_rtt.
    srtt: Option<(Histogram, Gauge64, Gauge64)>,
}

impl Series {
    fn new(m: &Metrics, peer: &Peer, probe: Probe) -> Self {
        let l = labels(&peer.target, probe.name(), &peer.labels);
        let tcp = probe != Probe::Icmp && probe != Probe::UdpRr;
        Self {
            rtt: m.rtt.get_or_create_owned(&l),
            sent: m.sent.get_or_create_owned(&l),
            errors: m.errors.get_or_create_owned(&l),
            late: m.late.get_or_create_owned(&l),
            lost: (!tcp).then(|| m.lost.get_or_create_owned(&l)),
            timed_out: tcp.then(|| m.timed_out.get_or_create_owned(&l)),
            retransmissions: tcp.then(|| m.retransmissions.get_or_create_owned(&l)),
            connect: (probe == Probe::TcpCrr).then(|| {
                m.rtt
                    .get_or_create_owned(&labels(&peer.target, "tcp_connect", &peer.labels))
            }),
            srtt: (probe == Probe::TcpRr).then(|| {
                let l = labels(&peer.target, "srtt_client", &peer.labels);
                (
                    m.rtt.get_or_create_owned(&l),
                    m.srtt.get_or_create_owned(&l),
                    m.min_rtt.get_or_create_owned(&l),
                )
            }),
        }
    }
}

/// One probe kind against one peer until stopped.
fn run(peer: &Peer, probe: Probe, main: &Series, shared: &Shared, stop: &AtomicBool) {
    let s = &shared.settings;
    let m = &shared.metrics;
    let mut rng =
        rand::rngs::SmallRng::seed_from_u64(peer.target.bytes().fold(probe as u64, |h, b| {
            h.wrapping_mul(31).wrapping_add(u64::from(b))
        }));
    let mut state = State::default();
    // Peers and kinds start spread over the first interval, not all at once.
    let mut due = Instant::now() + s.interval.mul_f64(rng.random::<f64>());
    let mut backoff = Duration::ZERO;
    while sleep_until(due, stop) {
        let lag = due.elapsed();
        m.lag.observe(lag.as_secs_f64());
        if lag > s.interval / 10 {
            main.late.inc();
        }
        let ok = match probe {
            Probe::Icmp => icmp(peer, shared, main, &mut state),
            Probe::TcpRr | Probe::UdpRr | Probe::TcpCrr => {
                session_probe(peer, probe, &shared.settings, main, &mut state)
            }
        };
        backoff = if ok {
            Duration::ZERO
        } else {
            (backoff * 2).clamp(s.interval, MAX_BACKOFF)
        };
        due += s.interval.mul_f64(rng.random_range(0.9..1.1)) + backoff;
        // A probe that overran its slot does not make the next ones hurry.
        due = due.max(Instant::now());
    }
}

/// What a probe thread keeps between probes.
#[derive(Default)]
struct State {
    addr: Option<(SocketAddr, Instant)>,
    session: Option<Session>,
    /// total_retrans of the kept connection at its last probe.
    retrans: u32,
    /// The ICMP echo sent at the last probe.
    echo: Option<crate::probe::echo::Echo>,
}

/// How long a resolved address is reused before the name is looked up again.
const RESOLVE_EVERY: Duration = Duration::from_secs(60);

fn resolve(peer: &Peer, state: &mut State) -> Option<SocketAddr> {
    if let Some((a, at)) = state.addr {
        if at.elapsed() < RESOLVE_EVERY {
            return Some(a);
        }
    }
    let a = (peer.host.as_str(), peer.port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut it| it.next());
    state.addr = a.map(|a| (a, Instant::now()));
    a
}

/// Settle the previous echo (its reply, or its loss) and send the next: the thread
/// never waits for a reply, the receiving thread notes it.
fn icmp(peer: &Peer, shared: &Shared, series: &Series, state: &mut State) -> bool {
    let Some(echoer) = &shared.echoer else {
        return false;
    };
    let wait = shared.settings.timeout.min(shared.settings.interval);
    if let Some(prev) = state.echo.take() {
        match prev.rtt(wait) {
            Some(rtt) => series.rtt.observe(rtt.as_secs_f64()),
            None => {
                series.lost.iter().for_each(|c| {
                    c.inc();
                });
            }
        }
    }
    series.sent.inc();
    let Some(addr) = resolve(peer, state) else {
        series.errors.inc();
        return false;
    };
    match echoer.send(addr.ip()) {
        Ok(e) => {
            state.echo = Some(e);
            true
        }
        Err(_) => {
            series.errors.inc();
            state.addr = None;
            false
        }
    }
}

fn test_kind(p: Probe) -> TestKind {
    match p {
        Probe::UdpRr => TestKind::UdpRr,
        Probe::TcpCrr => TestKind::TcpCrr,
        Probe::TcpRr | Probe::Icmp => TestKind::TcpRr,
    }
}

fn session_probe(
    peer: &Peer,
    probe: Probe,
    s: &ProbeSettings,
    series: &Series,
    state: &mut State,
) -> bool {
    let now = Instant::now();
    // Renew a session before the server's grant runs out under a probe.
    if state
        .session
        .as_ref()
        .is_some_and(|x| x.ends <= now + s.interval + s.timeout)
    {
        state.session = None;
    }
    if state.session.is_none() {
        let Some(server) = resolve(peer, state) else {
            series.errors.inc();
            return false;
        };
        let spec = SessionSpec {
            server,
            secret: s.secret.clone(),
            test: test_kind(probe),
            interval: s.interval,
            // UDP's adaptive timeout never waits past the next probe.
            timeout: if probe == Probe::UdpRr {
                s.timeout.min(s.interval)
            } else {
                s.timeout
            },
            length: crate::probe::rr::MAX_RUN,
        };
        match Session::open(&spec) {
            Ok(x) => {
                state.session = Some(x);
                state.retrans = 0;
            }
            Err(_) => {
                series.errors.inc();
                state.addr = None;
                return false;
            }
        }
    }
    let Some(session) = state.session.as_mut() else {
        return false;
    };
    series.sent.inc();
    match session.transact() {
        Ok(Outcome::Answered(t)) => {
            series.rtt.observe(t.rtt.as_secs_f64());
            if let (Some(c), Some(h)) = (t.connect, &series.connect) {
                h.observe(c.as_secs_f64());
            }
            if let Some(info) = &t.tcp_info {
                tcp_layers(probe, series, info, state);
            }
            true
        }
        Ok(Outcome::Lost) => {
            series.lost.iter().for_each(|c| {
                c.inc();
            });
            true
        }
        Ok(Outcome::TimedOut) => {
            series.timed_out.iter().for_each(|c| {
                c.inc();
            });
            // What the kernel retransmitted on the connection given up on still counts.
            if let Some(info) = state.session.as_ref().and_then(Session::tcp_info) {
                tcp_layers(probe, series, &info, state);
            }
            state.session = None;
            true
        }
        Err(_) => {
            series.errors.inc();
            state.session = None;
            false
        }
    }
}

/// TCP's own view of a probe connection: its retransmissions (as a delta of
/// `total_retrans`), and for the kept TCP_RR connection its srtt and min_rtt.
fn tcp_layers(probe: Probe, series: &Series, info: &TcpInfo, state: &mut State) {
    let new = match probe {
        // A TCP_CRR connection is new every time: all its retransmissions are new.
        Probe::TcpCrr => info.total_retrans,
        _ => info.total_retrans.saturating_sub(state.retrans),
    };
    state.retrans = info.total_retrans;
    if let (true, Some(c)) = (new > 0, &series.retransmissions) {
        c.inc_by(u64::from(new));
    }
    let Some((hist, last, min_rtt)) = &series.srtt else {
        return;
    };
    if info.rtt_us == 0 {
        return;
    }
    let srtt = f64::from(info.rtt_us) / 1e6;
    hist.observe(srtt);
    last.set(srtt);
    if let Some(min) = info.min_rtt_us {
        min_rtt.set(f64::from(min) / 1e6);
    }
}

/// Whether `ip` is one of this host's addresses (a peer that is this host is skipped).
pub fn is_local(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}
