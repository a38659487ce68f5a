//! The probes with a thread per peer, since what they time is `connect()` itself,
//! which a blocking call measures as an application sees it: TCP_CRR (the
//! handshake's round trip, layer `tcp_connect`, and a whole short connection with
//! rttlab's server, layer `tcp_crr`) and tcp_connect alone, to any host's port
//! ([`super::connect`]). Not in the default set: a connection a second per peer is
//! what a fleet's conntrack tables and TIME_WAIT lists feel.

use super::metrics::Metrics;
use super::peers::Peer;
use super::prober::{jitter_rng, next_backoff, session_spec, tcp_layers};
use super::prober::{ErrorReason, Probe, ProbeSettings, Resolved, Series};
use crate::probe::rr::{Outcome, Session};
use rand::Rng;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The running TCP_CRR or tcp_connect probe of one peer.
pub struct ThreadedProbe {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

/// Each probe thread's stack: its frames are small, and a fleet may be thousands.
const STACK: usize = 256 * 1024;

impl ThreadedProbe {
    /// Start probing `peer` with `kind` (a [`Probe::threaded`] one); `None` when no
    /// thread could start.
    pub fn start(
        peer: &Peer,
        kind: Probe,
        metrics: &Metrics,
        settings: &ProbeSettings,
    ) -> Option<Self> {
        let series = Series::new(metrics, peer, kind);
        let stop = Arc::new(AtomicBool::new(false));
        let (peer, settings, stop2) = (peer.clone(), settings.clone(), Arc::clone(&stop));
        let lag = metrics.lag.clone();
        let thread = std::thread::Builder::new()
            .name(format!("probe-{}", kind.name()))
            .stack_size(STACK)
            .spawn(move || run(&peer, kind, &series, &settings, &lag, &stop2))
            .ok()?;
        Some(Self { stop, thread })
    }

    /// Ask the thread to stop (it notices at once, or when a probe in flight ends).
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.thread().unpark();
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

fn run(
    peer: &Peer,
    kind: Probe,
    series: &Series,
    s: &ProbeSettings,
    lag: &prometheus_client::metrics::histogram::Histogram,
    stop: &AtomicBool,
) {
    let mut rng = jitter_rng(peer, kind);
    let mut addr = Resolved::default();
    let mut session: Option<Session> = None;
    // Peers start spread over the first interval, not all at once.
    let mut due = Instant::now() + s.interval.mul_f64(rng.random::<f64>());
    let mut backoff = Duration::ZERO;
    while sleep_until(due, stop) {
        let late = due.elapsed();
        lag.observe(late.as_secs_f64());
        if late > s.interval / 10 {
            series.late.inc();
        }
        let ok = match kind {
            Probe::TcpConnect => super::connect::probe(peer, s, series, &mut addr, stop),
            _ => probe(peer, s, series, &mut addr, &mut session),
        };
        backoff = if ok {
            Duration::ZERO
        } else {
            next_backoff(backoff, s.interval)
        };
        due += s.interval.mul_f64(rng.random_range(0.9..1.1)) + backoff;
        // A probe that overran its slot does not make the next ones hurry.
        due = due.max(Instant::now());
    }
}

/// One TCP_CRR connection; false when the peer could not be reached (back off).
fn probe(
    peer: &Peer,
    s: &ProbeSettings,
    series: &Series,
    addr: &mut Resolved,
    session: &mut Option<Session>,
) -> bool {
    // Renew a session before the server's grant runs out under a probe.
    if session
        .as_ref()
        .is_some_and(|x| x.ends <= Instant::now() + s.interval + s.timeout)
    {
        *session = None;
    }
    if session.is_none() {
        let Some(server) = addr.lookup(peer, series) else {
            return false;
        };
        match Session::open(&session_spec(Probe::TcpCrr, server, s)) {
            Ok(x) => *session = Some(x),
            Err(e) => {
                series
                    .errors
                    .fail(ErrorReason::Session, || crate::error_chain(&e));
                addr.set(None);
                return false;
            }
        }
    }
    let Some(x) = session.as_mut() else {
        return false;
    };
    series.sent.inc();
    match x.transact() {
        Ok(Outcome::Answered(t)) => {
            series.rtt.observe(t.rtt.as_secs_f64());
            series.errors.answered();
            if let (Some(c), Some(h)) = (t.connect, &series.connect) {
                h.observe(c.as_secs_f64());
            }
            // Every connection is new: all its retransmissions are new.
            if let Some(info) = &t.tcp_info {
                tcp_layers(series, info, &mut 0);
            }
            true
        }
        Ok(Outcome::TimedOut) => {
            series.timed_out.iter().for_each(|c| {
                c.inc();
            });
            true
        }
        Err(e) => {
            series
                .errors
                .fail(ErrorReason::Receive, || crate::error_chain(&e));
            *session = None;
            false
        }
    }
}
