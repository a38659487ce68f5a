//! What every prober shares: the kinds of probe, their settings, the series each
//! probe of a peer writes, and the session a TCP or UDP probe asks the server for.
//! [`super::batch`] runs the probes that keep a session or a socket (ICMP, TCP_RR,
//! UDP_RR) in one loop; [`super::crr`] runs TCP_CRR, whose `connect()` it times.

use super::metrics::RttHistogram as Histogram;
use super::metrics::{labels, Gauge64, Labels, Metrics};
use super::peers::Peer;
use crate::kernel::tcp_info::TcpInfo;
use crate::probe::control::TestKind;
use crate::probe::rr::SessionSpec;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use rand::SeedableRng;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
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
    /// Connect to the target's port and close, no payload: `tcp_connect`, to any
    /// host (one that runs no rttlab: a web server's 443, a database's 5432).
    TcpConnect,
}

impl Probe {
    /// Every kind of probe, as `--probes` may name them.
    pub const ALL: [Self; 5] = [
        Self::Icmp,
        Self::TcpRr,
        Self::UdpRr,
        Self::TcpCrr,
        Self::TcpConnect,
    ];
    /// The default set: one probe per layer that needs no new connection a second.
    pub const DEFAULT: [Self; 3] = [Self::Icmp, Self::TcpRr, Self::UdpRr];

    /// The probe's name in `--probes` and the `layer` label of its main series (`icmp`,
    /// `tcp_rr`, `udp_rr`, `tcp_crr`, `tcp_connect`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Icmp => "icmp",
            Self::TcpRr => "tcp_rr",
            Self::UdpRr => "udp_rr",
            Self::TcpCrr => "tcp_crr",
            Self::TcpConnect => "tcp_connect",
        }
    }

    /// The layers this kind of probe writes: its own and the one it measures beside
    /// it (TCP_RR's connection srtt, TCP_CRR's connect).
    pub fn layers(self) -> &'static [&'static str] {
        match self {
            Self::Icmp => &["icmp"],
            Self::TcpRr => &["tcp_rr", "srtt_client"],
            Self::UdpRr => &["udp_rr"],
            Self::TcpCrr => &["tcp_crr", "tcp_connect"],
            Self::TcpConnect => &["tcp_connect"],
        }
    }

    /// Whether it runs on a thread of its own per peer (what it times is a blocking
    /// `connect()`), not in the batch loop.
    pub fn threaded(self) -> bool {
        matches!(self, Self::TcpCrr | Self::TcpConnect)
    }

    /// The reasons its errors are counted by: a connect alone fails by how the host
    /// refused it; a probe of rttlab's server by the step of its session.
    pub fn error_reasons(self) -> &'static [ErrorReason] {
        match self {
            Self::TcpConnect => &[
                ErrorReason::Resolve,
                ErrorReason::Refused,
                ErrorReason::Unreachable,
                ErrorReason::Send,
            ],
            _ => &[
                ErrorReason::Resolve,
                ErrorReason::Session,
                ErrorReason::Send,
                ErrorReason::Receive,
            ],
        }
    }
}

/// A probe name that is none of [`Probe::ALL`].
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a probe (icmp, tcp_rr, udp_rr, tcp_crr, tcp_connect)")]
pub struct NotAProbe(pub String);

impl std::str::FromStr for Probe {
    type Err = NotAProbe;
    fn from_str(s: &str) -> Result<Self, NotAProbe> {
        Self::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| NotAProbe(s.into()))
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
    /// The shared secret for the peers' servers (`--secret-file` or `RTTLAB_SECRET`); `None`
    /// when none is set.
    pub secret: Option<Vec<u8>>,
}

/// The series one probe of a peer writes, looked up once when it starts: a lookup
/// takes the family's lock, which a scrape holds for tens of milliseconds. The
/// handles share their values with the families, so a probe restarted with new
/// settings continues the same counters.
pub struct Series {
    /// `rttlab_rtt_seconds` at the probe's own layer.
    pub rtt: Histogram,
    /// `rttlab_probes_sent_total`.
    pub sent: Counter,
    /// `rttlab_probe_errors_total` by reason, and the log of failing and recovering.
    pub errors: ProbeErrors,
    /// `rttlab_agent_late_probes_total`.
    pub late: Counter,
    /// ICMP and UDP_RR.
    pub lost: Option<Counter>,
    /// The TCP probes.
    pub timed_out: Option<Counter>,
    /// The TCP probes: `rttlab_tcp_retransmissions_total`, fed by [`tcp_layers`].
    pub retransmissions: Option<Counter>,
    /// TCP_CRR: `tcp_connect`.
    pub connect: Option<Histogram>,
    /// TCP_RR: `srtt_client`, and its last srtt and min_rtt.
    pub srtt: Option<SrttSeries>,
}

/// Why a probe failed: `rttlab_probe_errors_total`'s `reason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorReason {
    /// The peer's name did not resolve.
    Resolve,
    /// No session: the peer refused or could not be reached, or its server rejected
    /// the request (a wrong secret, its limits).
    Session,
    /// The request could not be sent.
    Send,
    /// The answer could not be read (the connection broke).
    Receive,
    /// tcp_connect: the host answered the SYN with a reset (nothing listens there).
    Refused,
    /// tcp_connect: the host or its network is unreachable (an ICMP unreachable, no
    /// route).
    Unreachable,
}

impl ErrorReason {
    /// Every reason, in the order of their counters.
    pub const ALL: [ErrorReason; 6] = [
        Self::Resolve,
        Self::Session,
        Self::Send,
        Self::Receive,
        Self::Refused,
        Self::Unreachable,
    ];

    /// The `reason` label's value.
    pub fn name(self) -> &'static str {
        match self {
            Self::Resolve => "resolve",
            Self::Session => "session",
            Self::Send => "send",
            Self::Receive => "receive",
            Self::Refused => "refused",
            Self::Unreachable => "unreachable",
        }
    }
}

/// The shortest time between two "failing" lines of one probe: a peer that fails and
/// answers by turns is said once a minute, not at every probe.
const FAILING_SAID_EVERY: Duration = Duration::from_secs(60);

/// A probe's errors: a counter per reason, present at 0 from the probe's start, and
/// the log an operator reads: the first error of a run of them said once, with its
/// reason and the error, and the first answer after them said once, with how many
/// there were.
pub struct ProbeErrors {
    /// By [`ErrorReason`]: the probe's reasons ([`Probe::error_reasons`]).
    counters: [Option<Counter>; 6],
    /// `peer NAME LAYER`.
    who: String,
    /// Whether the probe is failing: the one check an answer pays.
    failing: AtomicBool,
    log: Mutex<FailureLog>,
}

#[derive(Default)]
struct FailureLog {
    /// The first error of the current run of them.
    since: Option<Instant>,
    errors: u64,
    /// The current run was said (its end will be too).
    said: bool,
    last_said: Option<Instant>,
}

impl ProbeErrors {
    fn new(m: &Metrics, l: &Labels, probe: Probe, who: String) -> Self {
        let reasons = probe.error_reasons();
        Self {
            counters: ErrorReason::ALL.map(|r| {
                reasons
                    .contains(&r)
                    .then(|| m.errors.get_or_create_owned(&with_reason(l, r)))
            }),
            who,
            failing: AtomicBool::new(false),
            log: Mutex::new(FailureLog::default()),
        }
    }

    /// One probe failed for `reason`; `detail` (the error) is made only when said.
    pub fn fail(&self, reason: ErrorReason, detail: impl FnOnce() -> String) {
        if let Some(c) = &self.counters[reason as usize] {
            c.inc();
        }
        let mut l = self
            .log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        l.errors += 1;
        if l.since.is_some() {
            return;
        }
        let now = Instant::now();
        l.since = Some(now);
        l.errors = 1;
        self.failing.store(true, Ordering::Relaxed);
        l.said = l
            .last_said
            .is_none_or(|t| now.duration_since(t) >= FAILING_SAID_EVERY)
            && LOG.say(now, || {
                format!(
                    "rttlab agent: {}: failing: {} (counted in rttlab_probe_errors_total{{reason=\"{}\"}}; another line follows when it answers again)",
                    self.who,
                    detail(),
                    reason.name()
                )
            });
        if l.said {
            l.last_said = Some(now);
        }
    }

    /// One probe was answered. A plain load first: an answer after an answer, every
    /// probe of a healthy peer, pays no atomic write.
    pub fn answered(&self) {
        if !self.failing.load(Ordering::Relaxed) || !self.failing.swap(false, Ordering::Relaxed) {
            return;
        }
        let mut l = self
            .log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let (Some(since), true) = (l.since.take(), l.said) {
            LOG.say(Instant::now(), || {
                format!(
                    "rttlab agent: {}: answering again after {} error(s) over {:.1} s",
                    self.who,
                    l.errors,
                    since.elapsed().as_secs_f64()
                )
            });
        }
    }
}

/// The probes' lines the agent says in one window at most: a rack going dark fails a
/// thousand probes at once, and its log should say so in a screenful, not a thousand
/// lines (the counters have every error).
const LINES_A_WINDOW: u32 = 20;
const LOG_WINDOW: Duration = Duration::from_secs(10);

/// The probes' log, shared by every probe of the agent: at most [`LINES_A_WINDOW`]
/// lines in each [`LOG_WINDOW`], the rest counted and the count said with the next.
static LOG: ProbeLog = ProbeLog(Mutex::new(LogWindow {
    start: None,
    said: 0,
    held: 0,
}));

struct ProbeLog(Mutex<LogWindow>);

struct LogWindow {
    start: Option<Instant>,
    said: u32,
    held: u64,
}

impl ProbeLog {
    /// Say `line` unless the window's lines are spent; whether it was said.
    fn say(&self, now: Instant, line: impl FnOnce() -> String) -> bool {
        let mut w = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if w.start.is_none_or(|s| now.duration_since(s) >= LOG_WINDOW) {
            w.start = Some(now);
            w.said = 0;
        }
        if w.said >= LINES_A_WINDOW {
            w.held += 1;
            return false;
        }
        w.said += 1;
        let held = std::mem::take(&mut w.held);
        if held > 0 {
            eprintln!(
                "rttlab agent: {held} more line(s) about probes failing or answering again were not said (at most {LINES_A_WINDOW} every {} s; rttlab_probe_errors_total counts every error)",
                LOG_WINDOW.as_secs()
            );
        }
        eprintln!("{}", line());
        true
    }
}

/// `l` with the `reason` label of `r`.
pub fn with_reason(l: &Labels, r: ErrorReason) -> Labels {
    let mut l = l.clone();
    l.push(("reason".into(), r.name().into()));
    l
}

/// TCP_RR's `srtt_client`: every sample in the histogram, and the last srtt and
/// min_rtt as gauges made at their first sample, so that a peer that never answered
/// exports neither (a 0 would read as the fastest path on a graph).
pub struct SrttSeries {
    hist: Histogram,
    labels: Labels,
    srtt: Family<Labels, Gauge64>,
    min_rtt: Family<Labels, Gauge64>,
    last: OnceLock<Gauge64>,
    min: OnceLock<Gauge64>,
}

impl SrttSeries {
    /// Record one reading of TCP's srtt and, when the kernel has one, min_rtt (s).
    fn record(&self, srtt: f64, min_rtt: Option<f64>) {
        self.hist.observe(srtt);
        self.last
            .get_or_init(|| self.srtt.get_or_create_owned(&self.labels))
            .set(srtt);
        if let Some(min) = min_rtt {
            self.min
                .get_or_init(|| self.min_rtt.get_or_create_owned(&self.labels))
                .set(min);
        }
    }
}

impl Series {
    /// Look up (creating them) the series `probe` writes for `peer`: labels are its
    /// target, the layer and the peer's own labels. Series this kind does not write are
    /// `None`.
    pub fn new(m: &Metrics, peer: &Peer, probe: Probe) -> Self {
        let l = labels(&peer.name, probe.name(), &peer.labels);
        let tcp = probe != Probe::Icmp && probe != Probe::UdpRr;
        Self {
            rtt: m.rtt.get_or_create_owned(&l),
            sent: m.sent.get_or_create_owned(&l),
            errors: ProbeErrors::new(m, &l, probe, format!("peer {} {}", peer.name, probe.name())),
            late: m.late.get_or_create_owned(&l),
            lost: (!tcp).then(|| m.lost.get_or_create_owned(&l)),
            timed_out: tcp.then(|| m.timed_out.get_or_create_owned(&l)),
            // A connect alone reads no tcp_info.
            retransmissions: (tcp && probe != Probe::TcpConnect)
                .then(|| m.retransmissions.get_or_create_owned(&l)),
            connect: (probe == Probe::TcpCrr).then(|| {
                m.rtt
                    .get_or_create_owned(&labels(&peer.name, "tcp_connect", &peer.labels))
            }),
            srtt: (probe == Probe::TcpRr).then(|| {
                let l = labels(&peer.name, "srtt_client", &peer.labels);
                SrttSeries {
                    hist: m.rtt.get_or_create_owned(&l),
                    labels: l,
                    srtt: m.srtt.clone(),
                    min_rtt: m.min_rtt.clone(),
                    last: OnceLock::new(),
                    min: OnceLock::new(),
                }
            }),
        }
    }
}

/// A probe's generator of jitter, seeded by its peer and kind, so that a restarted
/// agent spreads its probes as before.
pub fn jitter_rng(peer: &Peer, probe: Probe) -> rand::rngs::SmallRng {
    rand::rngs::SmallRng::seed_from_u64(peer.target.bytes().fold(probe as u64, |h, b| {
        h.wrapping_mul(31).wrapping_add(u64::from(b))
    }))
}

/// Longest wait before trying an unreachable peer again.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The wait after a failure that followed `backoff`: doubling from one interval.
pub fn next_backoff(backoff: Duration, interval: Duration) -> Duration {
    (backoff * 2).clamp(interval, MAX_BACKOFF)
}

/// How long a resolved address is reused before the name is looked up again.
pub const RESOLVE_EVERY: Duration = Duration::from_secs(60);

/// A peer's address: at once for a literal one, else by the resolver (which may
/// block: callers that must not wait ask a helper thread).
pub fn resolve(peer: &Peer) -> Option<SocketAddr> {
    if let Ok(ip) = peer.host.parse::<IpAddr>() {
        return Some(SocketAddr::new(ip, peer.port));
    }
    (peer.host.as_str(), peer.port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut it| it.next())
}

/// An address and when it was looked up.
#[derive(Clone, Copy, Debug, Default)]
pub struct Resolved(Option<(SocketAddr, Instant)>);

impl Resolved {
    /// The address while it is fresh.
    pub fn fresh(&self) -> Option<SocketAddr> {
        self.0
            .filter(|(_, at)| at.elapsed() < RESOLVE_EVERY)
            .map(|(a, _)| a)
    }
    /// The address however old (used while a new lookup is under way).
    pub fn any(&self) -> Option<SocketAddr> {
        self.0.map(|(a, _)| a)
    }
    /// Keep a lookup's result, stamped now; `None` forgets the address.
    pub fn set(&mut self, a: Option<SocketAddr>) {
        self.0 = a.map(|a| (a, Instant::now()));
    }

    /// `peer`'s address, looked up (blocking: for the probes with a thread of their
    /// own) when none is fresh; a name that does not resolve is counted in `series`.
    pub fn lookup(&mut self, peer: &Peer, series: &Series) -> Option<SocketAddr> {
        if self.fresh().is_none() {
            self.set(resolve(peer));
        }
        let found = self.fresh();
        if found.is_none() {
            series.errors.fail(ErrorReason::Resolve, || {
                format!("{} does not resolve", peer.host)
            });
        }
        found
    }
}

/// The test a TCP or UDP probe keeps open on `server`.
pub fn session_spec(probe: Probe, server: SocketAddr, s: &ProbeSettings) -> SessionSpec {
    SessionSpec {
        server,
        secret: s.secret.clone(),
        test: match probe {
            Probe::UdpRr => TestKind::UdpRr,
            Probe::TcpCrr => TestKind::TcpCrr,
            // ICMP and tcp_connect open no session.
            Probe::TcpRr | Probe::Icmp | Probe::TcpConnect => TestKind::TcpRr,
        },
        interval: s.interval,
        // UDP's adaptive timeout never waits past the next probe.
        timeout: if probe == Probe::UdpRr {
            s.timeout.min(s.interval)
        } else {
            s.timeout
        },
        length: crate::probe::rr::MAX_RUN,
    }
}

/// TCP's own view of a probe connection: its retransmissions (as a delta of
/// `total_retrans`), and for the kept TCP_RR connection its srtt and min_rtt.
/// `retrans`: `total_retrans` at the connection's last probe (0 for a new one).
pub fn tcp_layers(series: &Series, info: &TcpInfo, retrans: &mut u32) {
    let new = info.total_retrans.saturating_sub(*retrans);
    *retrans = info.total_retrans;
    if let (true, Some(c)) = (new > 0, &series.retransmissions) {
        c.inc_by(u64::from(new));
    }
    let Some(s) = &series.srtt else {
        return;
    };
    if info.rtt_us == 0 {
        return;
    }
    s.record(
        f64::from(info.rtt_us) / 1e6,
        info.min_rtt_us.map(|min| f64::from(min) / 1e6),
    );
}

/// Whether `ip` is one of this host's addresses (a peer that is this host is skipped).
pub fn is_local(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Witness: arithmetic on a window of 20 lines: 25 asked at once, 20 said; the
    /// next window says again and owes the 5 held.
    #[test]
    fn the_probes_log_says_a_screenful_a_window() {
        let log = ProbeLog(Mutex::new(LogWindow {
            start: None,
            said: 0,
            held: 0,
        }));
        let t0 = Instant::now();
        let said = (0..25).filter(|_| log.say(t0, String::new)).count();
        assert_eq!(said, LINES_A_WINDOW as usize);
        assert_eq!(log.0.lock().unwrap().held, 5);
        assert!(!log.say(t0 + LOG_WINDOW / 2, String::new));
        assert!(log.say(t0 + LOG_WINDOW, String::new));
        assert_eq!(log.0.lock().unwrap().held, 0);
    }
}
