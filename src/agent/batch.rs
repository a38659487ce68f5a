//! The probes that keep a socket between probes (ICMP echoes, TCP_RR and UDP_RR
//! transactions on a kept session), every peer's, in one loop.
//!
//! Why one loop: a thread per peer and probe kind sleeps and wakes twice a probe
//! (its timer, then its reply), and on a VM those context switches were most of the
//! agent's CPU — 67 µs a probe, 21 % of a core at 1 000 peers (bench/RESULTS-agent.md).
//! This loop wakes at most once a [`SLOT`] (less often at fewer probes a second:
//! `Loop::gap`), sends every probe that is due, and reads
//! every reply that has come with one readiness poll; replies are timed by the
//! kernel's receive stamps (`SO_TIMESTAMPNS`), so the batching is not measured: a
//! round trip runs from just before the request's `send()` to the stamp of its
//! response's arrival, the client's wake-up excluded (which is the agent's own
//! scheduling, not the path's).
//!
//! Nothing in the loop blocks: sessions are opened (and names resolved) by
//! [`OPENERS`] helper threads, so that one unreachable peer's 5 s connect timeout
//! delays no one else's probes.

use super::metrics::Metrics;
use super::peers::Peer;
use super::prober::{jitter_rng, next_backoff, resolve, session_spec, tcp_layers};
use super::prober::{ErrorReason, Probe, ProbeSettings, Resolved, Series};
use super::smokeping;
use super::wheel::Wheel;
use crate::probe::echo::{Echoer, Reply};
use crate::probe::rr::{Session, SessionSpec};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use rand::rngs::SmallRng;
use rand::Rng;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The loop wakes at most this often: 3 000 probes/s are sent and read in batches of
/// about six, and a probe leaves at most this late (its jitter is ±10 % of a second).
pub const SLOT: Duration = Duration::from_millis(2);
/// Probes a wake-up should find due, where the rate allows: fewer peers wake the loop
/// less often, not once a probe. A wake-up costs 40–80 µs of CPU on a VM (the timer,
/// the switch, the hypervisor's exits): at 100 peers, one a probe was 1.65 a probe and
/// most of the agent's CPU (bench/RESULTS-agent-vs-smokeping.md).
const PER_WAKE: f64 = 4.0;
/// The longest a probe waits for its wake-up, as a share of the interval: a
/// twentieth, half the ±10 % jitter every probe has anyway.
const MOST_LATE: f64 = 0.05;
/// Longest sleep with nothing due. New peers and the openers' results wake the loop
/// at once (they unpark it), so an agent with few peers, or none, wakes for its probes
/// alone: each wake-up costs tens of µs of CPU on a VM, and at 20 a second they were
/// most of an idle agent's 0.3 % of a core (bench/RESULTS-agent-vs-smokeping.md).
const IDLE: Duration = Duration::from_secs(1);
/// Threads opening sessions and resolving names for the loop.
pub const OPENERS: usize = 4;
/// Tokens of the two ICMP sockets (probe ids count up from 0).
const ECHO_TOKEN: usize = usize::MAX - 1;

/// The loop's handle: add and remove peers; dropping it stops the loop.
pub struct Batch {
    tx: Sender<Command>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

enum Command {
    Add(Peer, Vec<(Probe, Series)>),
    Remove(String),
}

impl Batch {
    /// Start the loop and its openers. `echoer`: the ICMP sockets, when ICMP is
    /// probed.
    ///
    /// # Errors
    /// A thread could not start, or the readiness poll could not be made.
    pub fn start(
        metrics: Arc<Metrics>,
        settings: ProbeSettings,
        echoer: Option<Echoer>,
    ) -> std::io::Result<Self> {
        let poll = Poll::new()?;
        if let Some(e) = &echoer {
            for fd in e.fds() {
                poll.registry().register(
                    &mut SourceFd(&fd),
                    Token(ECHO_TOKEN),
                    Interest::READABLE,
                )?;
            }
        }
        let (jobs_tx, jobs_rx) = mpsc::channel::<Job>();
        let (done_tx, done_rx) = mpsc::channel::<Done>();
        let jobs_rx = Arc::new(Mutex::new(jobs_rx));
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let mut state = Loop {
            metrics,
            settings,
            echoer,
            poll,
            commands: rx,
            jobs: jobs_tx,
            done: done_rx,
            probes: Slab::default(),
            by_target: HashMap::new(),
            echoes: HashMap::default(),
            wheel: Wheel::new(SLOT),
            ready: Vec::new(),
            echo_got: Vec::new(),
        };
        let stop2 = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("probe-batch".into())
            .spawn(move || state.run(&stop2))?;
        for _ in 0..OPENERS {
            let (rx, tx) = (Arc::clone(&jobs_rx), done_tx.clone());
            let waker = thread.thread().clone();
            std::thread::Builder::new()
                .name("probe-opener".into())
                .spawn(move || open_sessions(&rx, &tx, &waker))?;
        }
        Ok(Self {
            tx,
            stop,
            thread: Some(thread),
        })
    }

    /// Probe `peer` with `probes` (its series made here, on the caller's thread).
    pub fn add(&self, peer: &Peer, probes: &[Probe], metrics: &Metrics) {
        let series = probes
            .iter()
            .map(|&p| (p, Series::new(metrics, peer, p)))
            .collect();
        let _ = self.tx.send(Command::Add(peer.clone(), series));
        self.wake();
    }

    /// Stop probing the peer named `target`.
    pub fn remove(&self, target: &str) {
        let _ = self.tx.send(Command::Remove(target.to_string()));
        self.wake();
    }

    /// Have the loop read its commands now, not at its next probe.
    fn wake(&self) {
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// Work for the openers.
enum Job {
    /// Resolve the peer's name (ICMP, whose socket is shared).
    Resolve(u64, Peer),
    /// Resolve and open a session; `spec.server` is filled in by the opener.
    Open(u64, Peer, Box<SessionSpec>),
}

enum Done {
    Resolved(u64, Option<SocketAddr>),
    /// The session, or why there is none.
    Opened(
        u64,
        Option<SocketAddr>,
        Result<Box<Session>, (ErrorReason, String)>,
    ),
}

fn open_sessions(jobs: &Mutex<Receiver<Job>>, done: &Sender<Done>, waker: &std::thread::Thread) {
    loop {
        let job = {
            let rx = jobs
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            rx.recv()
        };
        let sent = match job {
            Err(_) => return, // the loop is gone
            Ok(Job::Resolve(id, peer)) => done.send(Done::Resolved(id, resolve(&peer))),
            Ok(Job::Open(id, peer, mut spec)) => {
                let addr = resolve(&peer);
                let session = match addr {
                    None => Err((
                        ErrorReason::Resolve,
                        format!("{} does not resolve", peer.host),
                    )),
                    Some(a) => {
                        spec.server = a;
                        Session::open(&spec)
                            .map(Box::new)
                            .map_err(|e| (ErrorReason::Session, crate::error_chain(&e)))
                    }
                };
                done.send(Done::Opened(id, addr, session))
            }
        };
        if sent.is_err() {
            return;
        }
        waker.unpark();
    }
}

/// One probe kind of one peer.
struct Probing {
    peer: Peer,
    probe: Probe,
    series: Series,
    rng: SmallRng,
    due: Instant,
    backoff: Duration,
    addr: Resolved,
    /// A resolve or open job is under way.
    asked: bool,
    session: Option<Box<Session>>,
    /// A renewal's new session, waiting for the old one's request in flight.
    next: Option<Box<Session>>,
    in_flight: Option<InFlight>,
    /// `total_retrans` of the kept TCP connection at its last probe.
    retrans: u32,
    /// ICMP with `--smokeping-names`: smokeping_prober's series at the address pinged.
    smokeping: Option<smokeping::Series>,
    /// Heap entries of an older version are stale.
    version: u32,
}

#[derive(Clone, Copy, Debug)]
struct InFlight {
    /// Unanswered by then: lost (ICMP, UDP) or timed out (TCP).
    deadline: Instant,
    /// The longest round trip still counted as an answer.
    limit: Duration,
    /// ICMP: the echo's family and sequence number, and when it left.
    echo: Option<crate::probe::echo::Sent>,
}

struct Loop {
    metrics: Arc<Metrics>,
    settings: ProbeSettings,
    echoer: Option<Echoer>,
    poll: Poll,
    commands: Receiver<Command>,
    jobs: Sender<Job>,
    done: Receiver<Done>,
    probes: Slab,
    by_target: HashMap<String, Vec<u64>>,
    /// Echoes in flight: (IPv6, sequence number) → probe.
    echoes: HashMap<(bool, u16), u64, foldhash::fast::RandomState>,
    /// (probe, version): the next thing each probe has to do, by when.
    wheel: Wheel<(u64, u32)>,
    /// Scratch of each tick, kept so that a tick allocates nothing: the ready tokens
    /// and the echo replies drained.
    ready: Vec<usize>,
    echo_got: Vec<Reply>,
}

/// The probes by key: a slot index and the slot's generation, so that a key of a
/// removed probe (in a finished job, or a stale wheel entry) never finds the probe
/// that took its slot. Each probe is boxed: taking it out to work on it and putting
/// it back moves a pointer.
#[derive(Default)]
struct Slab {
    slots: Vec<(u32, Option<Box<Probing>>)>,
    free: Vec<u32>,
}

impl Slab {
    /// Probes held.
    fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    fn insert(&mut self, p: Probing) -> u64 {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push((0, None));
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.1 = Some(Box::new(p));
        (u64::from(slot.0) << 32) | u64::from(index)
    }

    fn slot(&mut self, key: u64) -> Option<&mut Option<Box<Probing>>> {
        let (generation, index) = ((key >> 32) as u32, key as u32);
        self.slots
            .get_mut(index as usize)
            .filter(|s| s.0 == generation)
            .map(|s| &mut s.1)
    }

    /// Take the probe out to work on it; [`Slab::put`] puts it back.
    fn take(&mut self, key: u64) -> Option<Box<Probing>> {
        self.slot(key)?.take()
    }

    fn put(&mut self, key: u64, p: Box<Probing>) {
        if let Some(s) = self.slot(key) {
            *s = Some(p);
        }
    }

    fn get_mut(&mut self, key: u64) -> Option<&mut Probing> {
        self.slot(key)?.as_deref_mut()
    }

    /// Remove the probe for good; its key is never valid again.
    fn remove(&mut self, key: u64) -> Option<Box<Probing>> {
        let p = self.take(key)?;
        let index = key as u32;
        let slot = &mut self.slots[index as usize];
        slot.0 = slot.0.wrapping_add(1);
        self.free.push(index);
        Some(p)
    }
}

impl Loop {
    fn run(&mut self, stop: &AtomicBool) {
        let mut events = Events::with_capacity(1024);
        let mut due = Vec::new();
        let mut last = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            self.commands();
            self.finished_jobs();
            self.replies(&mut events);
            self.due(Instant::now(), &mut due);
            // Sleep to the next thing due, but never wake twice in one slot.
            let now = Instant::now();
            let horizon = (IDLE.as_nanos() / SLOT.as_nanos()) as usize;
            let next = self
                .wheel
                .next_due(horizon)
                .unwrap_or(now + IDLE)
                .min(now + IDLE)
                .max(last + self.gap());
            if next > now {
                std::thread::park_timeout(next - now);
            }
            last = Instant::now();
        }
    }

    /// The least time between two wake-ups: long enough that one finds [`PER_WAKE`]
    /// probes due at this many probes per interval, at most [`MOST_LATE`] of the
    /// interval, at least a [`SLOT`].
    fn gap(&self) -> Duration {
        let interval = self.settings.interval.as_secs_f64();
        let probes = self.probes.len().max(1) as f64;
        let gap = (PER_WAKE * interval / probes).min(MOST_LATE * interval);
        Duration::from_secs_f64(gap).max(SLOT)
    }

    fn schedule(&mut self, id: u64) {
        let Some(p) = self.probes.get_mut(id) else {
            return;
        };
        p.version = p.version.wrapping_add(1);
        let at = p.in_flight.map_or(p.due, |f| f.deadline);
        let version = p.version;
        self.wheel.push(at, (id, version));
    }

    fn commands(&mut self) {
        while let Ok(c) = self.commands.try_recv() {
            match c {
                Command::Add(peer, series) => {
                    let mut ids = Vec::new();
                    for (probe, series) in series {
                        let mut rng = jitter_rng(&peer, probe);
                        // Peers and kinds start spread over the first interval.
                        let due =
                            Instant::now() + self.settings.interval.mul_f64(rng.random::<f64>());
                        let id = self.probes.insert(Probing {
                            peer: peer.clone(),
                            probe,
                            series,
                            rng,
                            due,
                            backoff: Duration::ZERO,
                            addr: Resolved::default(),
                            asked: false,
                            session: None,
                            next: None,
                            in_flight: None,
                            retrans: 0,
                            smokeping: None,
                            version: 0,
                        });
                        ids.push(id);
                        self.schedule(id);
                    }
                    self.by_target.entry(peer.target).or_default().extend(ids);
                }
                Command::Remove(target) => {
                    for id in self.by_target.remove(&target).unwrap_or_default() {
                        if let Some(mut p) = self.probes.remove(id) {
                            self.close(&mut p);
                            if let Some(e) = p.in_flight.and_then(|f| f.echo) {
                                self.echoes.remove(&(e.v6, e.seq));
                            }
                        }
                    }
                }
            }
        }
    }

    /// Drop a probe's session (out of the poll first).
    fn close(&self, p: &mut Probing) {
        if let Some(s) = p.session.take() {
            if let Some(fd) = s.data_fd() {
                let _ = self.poll.registry().deregister(&mut SourceFd(&fd));
            }
        }
    }

    fn finished_jobs(&mut self) {
        while let Ok(d) = self.done.try_recv() {
            match d {
                Done::Resolved(id, addr) => {
                    if let Some(p) = self.probes.get_mut(id) {
                        p.asked = false;
                        p.addr.set(addr);
                    }
                }
                Done::Opened(id, addr, r) => self.opened(id, addr, r),
            }
        }
    }

    fn opened(
        &mut self,
        id: u64,
        addr: Option<SocketAddr>,
        session: Result<Box<Session>, (ErrorReason, String)>,
    ) {
        let Some(mut p) = self.probes.take(id) else {
            return; // removed meanwhile: the session closes here
        };
        p.asked = false;
        p.addr.set(addr);
        match session {
            Ok(s) => {
                p.next = Some(s);
                p.backoff = Duration::ZERO;
                self.install(id, &mut p);
            }
            Err((reason, why)) => {
                p.series.errors.fail(reason, || why);
                p.backoff = next_backoff(p.backoff, self.settings.interval);
                p.due = Instant::now() + p.backoff;
            }
        }
        self.probes.put(id, p);
        self.schedule(id);
    }

    /// Put the new session in place of the old, unless a request is in flight on
    /// the old one (then at the next probe).
    fn install(&self, id: u64, p: &mut Probing) {
        if p.in_flight.is_some() {
            return;
        }
        let Some(next) = p.next.take() else {
            return;
        };
        self.close(p);
        p.session = self.watch(id, next);
        p.retrans = 0;
    }

    /// Put a new session's data socket in the poll.
    fn watch(&self, id: u64, s: Box<Session>) -> Option<Box<Session>> {
        let fd = s.data_fd()?;
        self.poll
            .registry()
            .register(&mut SourceFd(&fd), Token(id as usize), Interest::READABLE)
            .ok()?;
        Some(s)
    }

    /// Read every reply that has arrived.
    fn replies(&mut self, events: &mut Events) {
        if self.poll.poll(events, Some(Duration::ZERO)).is_err() {
            return;
        }
        let mut ready = std::mem::take(&mut self.ready);
        ready.clear();
        ready.extend(events.iter().map(|e| e.token().0));
        for &token in &ready {
            if token == ECHO_TOKEN {
                self.echo_replies();
            } else {
                self.session_replies(token as u64);
            }
        }
        self.ready = ready;
    }

    fn echo_replies(&mut self) {
        let Some(echoer) = self.echoer.as_mut() else {
            return;
        };
        let mut got = std::mem::take(&mut self.echo_got);
        got.clear();
        echoer.drain(|r| got.push(r));
        for r in got.drain(..) {
            let Some(id) = self.echoes.get(&(r.v6, r.seq)).copied() else {
                continue; // late, or another agent's
            };
            let Some(p) = self.probes.get_mut(id) else {
                continue;
            };
            let Some((f, sent)) = p.in_flight.and_then(|f| Some((f, f.echo?))) else {
                continue;
            };
            if sent.seq != r.seq || sent.v6 != r.v6 || p.addr.any().map(|a| a.ip()) != Some(r.from)
            {
                continue;
            }
            self.echoes.remove(&(r.v6, r.seq));
            let rtt = Duration::from_nanos(r.received_ns.saturating_sub(sent.sent_ns));
            if rtt <= f.limit {
                p.series.rtt.observe(rtt.as_secs_f64());
                if let Some(s) = &p.smokeping {
                    s.duration.observe(rtt.as_secs_f64());
                }
                p.series.errors.answered();
            } else {
                count(&p.series.lost);
            }
            p.in_flight = None;
            self.schedule(id);
        }
        self.echo_got = got;
    }

    fn session_replies(&mut self, id: u64) {
        let Some(mut p) = self.probes.take(id) else {
            return;
        };
        match p.session.as_mut().map(|s| s.receive()) {
            None | Some(Ok(None)) => {}
            // The answer: nothing else is asked, so nothing else is read now (a TCP
            // close or a stray datagram behind it raises the next readiness, or fails
            // the next send).
            Some(Ok(Some(rtt))) => {
                if p.in_flight.is_some_and(|f| rtt > f.limit) {
                    self.unanswered(&mut p);
                } else if p.in_flight.take().is_some() {
                    p.series.rtt.observe(rtt.as_secs_f64());
                    p.series.errors.answered();
                    if let Some(info) = p.session.as_ref().and_then(|s| s.tcp_info()) {
                        tcp_layers(&p.series, &info, &mut p.retrans);
                    }
                }
            }
            Some(Err(e)) => {
                p.series
                    .errors
                    .fail(ErrorReason::Receive, || crate::error_chain(&e));
                p.in_flight = None;
                self.close(&mut p);
            }
        }
        self.probes.put(id, p);
        self.schedule(id);
    }

    /// A request unanswered within its limit: lost (ICMP, UDP; the session goes on),
    /// or timed out (TCP: its retransmissions counted, the session closed and opened
    /// anew at the next probe).
    fn unanswered(&mut self, p: &mut Probing) {
        p.in_flight = None;
        match p.probe {
            Probe::TcpRr | Probe::TcpCrr | Probe::TcpConnect => {
                count(&p.series.timed_out);
                if let Some(info) = p.session.as_ref().and_then(|s| s.tcp_info()) {
                    tcp_layers(&p.series, &info, &mut p.retrans);
                }
                self.close(p);
            }
            Probe::Icmp | Probe::UdpRr => count(&p.series.lost),
        }
    }

    /// Everything due by `now`: deadlines passed, probes to send.
    fn due(&mut self, now: Instant, due: &mut Vec<(u64, u32)>) {
        due.clear();
        self.wheel.expire(now, due);
        for &(id, version) in due.iter() {
            let Some(mut p) = self.probes.take(id) else {
                continue;
            };
            if p.version != version {
                self.probes.put(id, p);
                continue;
            }
            if let Some(f) = p.in_flight.filter(|f| f.deadline <= now) {
                if let Some(e) = f.echo {
                    self.echoes.remove(&(e.v6, e.seq));
                }
                self.unanswered(&mut p);
            }
            if p.due <= now && p.in_flight.is_none() {
                self.probe(id, &mut p, now);
            }
            self.probes.put(id, p);
            self.schedule(id);
        }
    }

    /// Send one probe (or ask for what it needs first), and set the next one's time.
    fn probe(&mut self, id: u64, p: &mut Probing, now: Instant) {
        let interval = self.settings.interval;
        let late = now - p.due;
        self.metrics.lag.observe(late.as_secs_f64());
        if late > interval / 10 {
            p.series.late.inc();
        }
        let sent = match p.probe {
            Probe::Icmp => self.echo(id, p, now),
            _ => self.transaction(id, p, now),
        };
        let wait = match sent {
            Some(true) => {
                p.backoff = Duration::ZERO;
                Duration::ZERO
            }
            Some(false) => {
                p.backoff = next_backoff(p.backoff, interval);
                p.backoff
            }
            // Waiting for the openers, which set the back-off should they fail.
            None => Duration::ZERO,
        };
        p.due += interval.mul_f64(p.rng.random_range(0.9..1.1)) + wait;
        // A probe that overran its slot does not make the next ones hurry.
        p.due = p.due.max(now);
    }

    /// Ask the openers for `p`'s address or session, once.
    fn ask(&self, id: u64, p: &mut Probing) {
        if p.asked {
            return;
        }
        let job = match p.probe {
            Probe::Icmp => Job::Resolve(id, p.peer.clone()),
            probe => Job::Open(
                id,
                p.peer.clone(),
                Box::new(session_spec(
                    probe,
                    SocketAddr::from(([0, 0, 0, 0], 0)),
                    &self.settings,
                )),
            ),
        };
        p.asked = self.jobs.send(job).is_ok();
    }

    /// `Some(true)`: sent; `Some(false)`: failed (back off); `None`: waiting for an
    /// address.
    fn echo(&mut self, id: u64, p: &mut Probing, now: Instant) -> Option<bool> {
        if p.addr.fresh().is_none() {
            // A literal address needs no resolver.
            match p.peer.host.parse::<std::net::IpAddr>() {
                Ok(ip) => p.addr.set(Some(SocketAddr::new(ip, p.peer.port))),
                Err(_) => self.ask(id, p),
            }
        }
        let target = p.addr.any()?.ip();
        let echoer = self.echoer.as_mut()?;
        p.series.sent.inc();
        if let Some(f) = &self.metrics.smokeping {
            if p.smokeping.as_ref().map(|s| s.ip) != Some(target) {
                let pinged = smokeping::Pinged {
                    target: &p.peer.target,
                    host: &p.peer.host,
                    labels: &p.peer.labels,
                };
                p.smokeping = Some(f.series(&pinged, target));
            }
        }
        match echoer.send(target) {
            Ok(sent) => {
                if let Some(s) = &p.smokeping {
                    s.requests.inc();
                }
                let limit = self.settings.timeout.min(self.settings.interval);
                self.echoes.insert((sent.v6, sent.seq), id);
                p.in_flight = Some(InFlight {
                    deadline: now + limit,
                    limit,
                    echo: Some(sent),
                });
                Some(true)
            }
            Err(e) => {
                if let Some(s) = &p.smokeping {
                    s.send_errors.inc();
                }
                p.series
                    .errors
                    .fail(ErrorReason::Send, || format!("echo request: {e}"));
                p.addr.set(None);
                Some(false)
            }
        }
    }

    /// A TCP_RR or UDP_RR request on the kept session (opened and renewed by the
    /// openers ahead of its end).
    fn transaction(&mut self, id: u64, p: &mut Probing, now: Instant) -> Option<bool> {
        self.install(id, p);
        let s = &self.settings;
        let renew_by = now + 2 * (s.interval + s.timeout);
        if p.session.as_ref().is_none_or(|x| x.ends <= renew_by) {
            self.ask(id, p);
        }
        // Past its end the server may close it under a probe: wait for the new one.
        if p.session
            .as_ref()
            .is_some_and(|x| x.ends <= now + s.timeout)
        {
            self.close(p);
        }
        let session = p.session.as_mut()?;
        p.series.sent.inc();
        match session.send() {
            Ok(()) => {
                let limit = session.reply_timeout();
                p.in_flight = Some(InFlight {
                    deadline: now + limit,
                    limit,
                    echo: None,
                });
                Some(true)
            }
            Err(e) => {
                p.series
                    .errors
                    .fail(ErrorReason::Send, || crate::error_chain(&e));
                self.close(p);
                Some(false)
            }
        }
    }
}

fn count(c: &Option<prometheus_client::metrics::counter::Counter>) {
    if let Some(c) = c {
        c.inc();
    }
}
