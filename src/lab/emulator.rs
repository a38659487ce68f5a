//! The link emulator: one thread in the router namespace forwarding frames between its
//! two interfaces through a [`LinkModel`] per direction, like mahimahi's shells or
//! netem + tbf on a forwarding host.
//!
//! Frames are stamped by the kernel when they reach the router (the receive ring's
//! CLOCK_REALTIME stamp), and every decision — blackout window, loss, queue, release
//! time — is taken on that stamp, so the emulator's own wake-up latency delays a
//! frame's *release* at most, never the clock its delay is measured from. In `poll`
//! mode the thread spins and releases frames within a microsecond or two of their
//! time; otherwise it sleeps in ppoll(2) until the next release or arrival (timer
//! slack 1 ns) and pays the vCPU's wake-up time.

use super::impair::{Blackout, DropReason, Impairments, LinkModel, Verdict};
use super::ring::{RxRing, TxSocket};
use crate::kernel::realtime_ns;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// A direction of the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Dir {
    /// Host A to host B.
    A2b,
    /// Host B to host A.
    B2a,
}

impl Dir {
    /// Both directions, in index order.
    pub const BOTH: [Dir; 2] = [Dir::A2b, Dir::B2a];

    /// 0 or 1.
    pub fn index(self) -> usize {
        self as usize
    }

    /// `a2b` or `b2a`.
    pub fn name(self) -> &'static str {
        match self {
            Dir::A2b => "a2b",
            Dir::B2a => "b2a",
        }
    }
}

/// Frames held at most (about 128 MiB of buffers): beyond this the emulator drops and
/// counts `overflow` rather than grow without bound.
pub const MAX_HELD_FRAMES: usize = 65_536;

/// Counters of one direction; read while the emulator runs.
#[derive(Debug, Default)]
pub struct DirCounters {
    /// Frames taken off the receive ring, dropped ones included.
    pub rx_frames: AtomicU64,
    /// Bytes of those frames as the ring holds them (a stripped VLAN tag not counted).
    pub rx_bytes: AtomicU64,
    /// Frames sent on at their release time.
    pub tx_frames: AtomicU64,
    /// Bytes of those frames (a VLAN tag put back counted).
    pub tx_bytes: AtomicU64,
    /// Frames dropped because they arrived inside a blackout window.
    pub drop_blackout: AtomicU64,
    /// Frames dropped by the loss model.
    pub drop_loss: AtomicU64,
    /// Frames dropped because the queue in front of the rate limiter was full.
    pub drop_queue: AtomicU64,
    /// Held-frame limit reached, or a frame longer than a ring slot.
    pub drop_overflow: AtomicU64,
    /// The kernel refused to send a frame on.
    pub tx_errors: AtomicU64,
    /// Frames the kernel dropped before the emulator saw them (receive ring full).
    pub ring_drops: AtomicU64,
    /// The largest backlog seen waiting for the rate limiter, bytes (sampled once per
    /// pass of the emulator's loop).
    pub max_backlog_bytes: AtomicU64,
    /// The kernel's receive stamp (CLOCK_REALTIME ns) of the latest frame a blackout
    /// dropped: a witness, independent of the window's own arithmetic, that drops fall
    /// inside the window.
    pub last_blackout_drop_ns: AtomicU64,
}

/// A snapshot of [`DirCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterSnapshot {
    /// [`DirCounters::rx_frames`]: frames received, dropped ones included.
    pub rx_frames: u64,
    /// [`DirCounters::rx_bytes`]: bytes received.
    pub rx_bytes: u64,
    /// [`DirCounters::tx_frames`]: frames sent on.
    pub tx_frames: u64,
    /// [`DirCounters::tx_bytes`]: bytes sent on.
    pub tx_bytes: u64,
    /// [`DirCounters::drop_blackout`]: frames dropped in a blackout window.
    pub drop_blackout: u64,
    /// [`DirCounters::drop_loss`]: frames dropped by the loss model.
    pub drop_loss: u64,
    /// [`DirCounters::drop_queue`]: frames dropped by a full queue.
    pub drop_queue: u64,
    /// [`DirCounters::drop_overflow`]: held-frame limit reached or frame too long.
    pub drop_overflow: u64,
    /// [`DirCounters::tx_errors`]: sends the kernel refused.
    pub tx_errors: u64,
    /// [`DirCounters::ring_drops`]: frames the kernel dropped with the ring full.
    pub ring_drops: u64,
    /// [`DirCounters::max_backlog_bytes`]: the largest rate-limiter backlog, bytes.
    pub max_backlog_bytes: u64,
    /// [`DirCounters::last_blackout_drop_ns`]: receive stamp of the latest blackout
    /// drop, CLOCK_REALTIME ns; 0 if none (and when absent from older JSON).
    #[serde(default)]
    pub last_blackout_drop_ns: u64,
}

impl DirCounters {
    /// Read every counter.
    pub fn snapshot(&self) -> CounterSnapshot {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CounterSnapshot {
            rx_frames: r(&self.rx_frames),
            rx_bytes: r(&self.rx_bytes),
            tx_frames: r(&self.tx_frames),
            tx_bytes: r(&self.tx_bytes),
            drop_blackout: r(&self.drop_blackout),
            drop_loss: r(&self.drop_loss),
            drop_queue: r(&self.drop_queue),
            drop_overflow: r(&self.drop_overflow),
            tx_errors: r(&self.tx_errors),
            ring_drops: r(&self.ring_drops),
            max_backlog_bytes: r(&self.max_backlog_bytes),
            last_blackout_drop_ns: r(&self.last_blackout_drop_ns),
        }
    }
}

/// Single writer: a plain load + store, no locked instruction on the fast path.
fn bump(c: &AtomicU64, by: u64) {
    c.store(c.load(Ordering::Relaxed) + by, Ordering::Relaxed);
}

/// What the controlling side changes; the emulator picks it up at its next wake-up.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// The impairments of each direction, indexed by [`Dir::index`].
    pub impairments: [Impairments; 2],
    /// Blackout windows per direction (expired ones are pruned).
    pub blackouts: [Vec<Blackout>; 2],
    /// Events for the log, written by the emulator thread in order.
    pending_events: Vec<String>,
}

/// State shared between the emulator thread and its controller.
pub struct Shared {
    settings: Mutex<Settings>,
    generation: AtomicU64,
    stop: AtomicBool,
    wake: std::os::fd::OwnedFd,
    /// The counters of each direction, indexed by [`Dir::index`].
    pub counters: [DirCounters; 2],
    /// Why the emulator stopped on its own, if it did.
    pub failure: Mutex<Option<String>>,
    /// True from the moment [`run`] starts until it returns.
    pub running: AtomicBool,
}

impl Shared {
    /// New shared state with `impairments` per direction.
    ///
    /// # Errors
    /// eventfd failed.
    pub fn new(impairments: [Impairments; 2]) -> std::io::Result<Self> {
        // SAFETY: eventfd(2) with valid flags; owned below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self {
            settings: Mutex::new(Settings {
                impairments,
                ..Default::default()
            }),
            generation: AtomicU64::new(1),
            stop: AtomicBool::new(false),
            // SAFETY: fresh fd.
            wake: unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) },
            counters: Default::default(),
            failure: Mutex::new(None),
            running: AtomicBool::new(false),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Settings> {
        self.settings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The settings in force.
    pub fn settings(&self) -> Settings {
        self.lock().clone()
    }

    /// Change the settings with `f`, log `event` (a JSON object without its time), and
    /// wake the emulator.
    pub fn update(&self, event: String, f: impl FnOnce(&mut Settings)) {
        {
            let mut s = self.lock();
            f(&mut s);
            s.pending_events.push(event);
        }
        self.generation.fetch_add(1, Ordering::Release);
        self.kick();
    }

    fn kick(&self) {
        let one = 1u64;
        // SAFETY: writing 8 bytes to our eventfd.
        unsafe {
            libc::write(
                std::os::fd::AsRawFd::as_raw_fd(&self.wake),
                (&one as *const u64).cast(),
                8,
            )
        };
    }

    /// Ask the emulator to stop.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.kick();
    }
}

/// The emulator's sockets: receive ring and transmit socket per direction (`rx[d]` on
/// the interface towards the sender, `tx[d]` towards the receiver).
pub struct Ports {
    /// The receive ring of each direction, indexed by [`Dir::index`].
    pub rx: [RxRing; 2],
    /// The transmit socket of each direction, indexed by [`Dir::index`].
    pub tx: [TxSocket; 2],
}

/// A frame waiting for its release time.
struct Held {
    release_ns: u64,
    seq: u64,
    frame: Vec<u8>,
}

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        (self.release_ns, self.seq) == (o.release_ns, o.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.release_ns, self.seq).cmp(&(o.release_ns, o.seq))
    }
}

/// The event log: JSON lines with CLOCK_REALTIME stamps, flushed every 100 ms.
pub struct EventLog {
    out: Option<std::io::BufWriter<std::fs::File>>,
    last_flush: u64,
}

impl EventLog {
    /// Log to `path` (appending; a symlink or anything but a regular file is
    /// refused), or nowhere.
    ///
    /// # Errors
    /// The file cannot be opened.
    pub fn open(path: Option<&std::path::Path>) -> Result<Self, crate::kernel::fs::FileError> {
        let out = match path {
            Some(p) => Some(std::io::BufWriter::with_capacity(
                1 << 16,
                crate::kernel::fs::open_append(p)?,
            )),
            None => None,
        };
        Ok(Self { out, last_flush: 0 })
    }

    fn line(&mut self, t: u64, body: std::fmt::Arguments<'_>) {
        if let Some(o) = &mut self.out {
            let _ = writeln!(o, "{{\"t_ns\":{t},{body}}}");
        }
    }

    fn drop_event(
        &mut self,
        t: u64,
        d: Dir,
        why: DropReason,
        len: usize,
        ports: Option<(u16, u16)>,
    ) {
        match ports {
            Some((s, p)) => self.line(
                t,
                format_args!(
                    "\"event\":\"drop\",\"dir\":\"{}\",\"reason\":\"{}\",\"len\":{len},\"sport\":{s},\"dport\":{p}",
                    d.name(),
                    why.name()
                ),
            ),
            None => self.line(
                t,
                format_args!(
                    "\"event\":\"drop\",\"dir\":\"{}\",\"reason\":\"{}\",\"len\":{len}",
                    d.name(),
                    why.name()
                ),
            ),
        }
    }

    fn flush_every(&mut self, now: u64, period_ns: u64) {
        if now.saturating_sub(self.last_flush) >= period_ns {
            self.last_flush = now;
            if let Some(o) = &mut self.out {
                let _ = o.flush();
            }
        }
    }
}

/// Give the emulator thread the CPU when it needs it. A normal thread on this 2-vCPU
/// machine waits up to a scheduler slice (3 ms) behind the hosts' processes, which
/// shows as millisecond tails in the emulated delay. Sleeping between frames, the
/// thread runs SCHED_FIFO: it is idle most of the time, and a release preempts
/// whatever runs. Busy-polling, it stays a normal thread that yields whenever it has
/// nothing to do: a spinning high-priority thread would starve ksoftirqd on its CPU,
/// and with it the delivery of the very frames it sends (measured: 70 ms tails at
/// nice −20), or, as SCHED_FIFO, meet the kernel's RT throttling (50 ms stalls a
/// second). Best effort: the policy obtained is returned and logged.
fn raise_priority(poll: bool) -> &'static str {
    if poll {
        return "normal, yielding";
    }
    let p = libc::sched_param { sched_priority: 10 };
    // SAFETY: sets the calling thread's policy.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) } == 0 {
        "fifo"
    } else {
        "normal"
    }
}

/// The emulator between frames: the settings in force, and per direction its link
/// model and the frames it holds until their release.
struct Router {
    settings: Settings,
    models: [LinkModel; 2],
    /// The settings' generation [`Router::settings`] is from.
    generation: u64,
    /// Whether a direction has a port-specific blackout (recomputed with the settings).
    port_blackout: [bool; 2],
    held: [BinaryHeap<Reverse<Held>>; 2],
    /// Frame buffers released, for the next frames held.
    free: Vec<Vec<u8>>,
    /// Frames held so far: the tie-break between frames released at the same time.
    seq: u64,
    /// When the kernel's ring drops were last read, ns.
    last_stats: u64,
}

impl Router {
    fn new(shared: &Shared, seed: u64) -> Self {
        let settings = shared.settings();
        let models = [
            LinkModel::new(settings.impairments[0], seed),
            LinkModel::new(settings.impairments[1], seed ^ 0x9e37_79b9_7f4a_7c15),
        ];
        Self {
            settings,
            models,
            generation: 0,
            port_blackout: [false; 2],
            held: Default::default(),
            free: Vec::new(),
            seq: 0,
            last_stats: 0,
        }
    }

    /// Take the settings `lab set` changed since the last look, and log the events it
    /// queued with them.
    fn reload_settings(&mut self, shared: &Shared, log: &mut EventLog) {
        let g = shared.generation.load(Ordering::Acquire);
        if g == self.generation {
            return;
        }
        self.generation = g;
        let events = {
            let mut l = shared.lock();
            self.settings = l.clone();
            std::mem::take(&mut l.pending_events)
        };
        let now = realtime_ns();
        for e in events {
            log.line(now, format_args!("{e}"));
        }
        for d in Dir::BOTH {
            let i = d.index();
            self.models[i].set(self.settings.impairments[i]);
            self.port_blackout[i] = self.settings.blackouts[i].iter().any(|b| b.port.is_some());
        }
    }

    /// Take up to 256 frames from direction `d`'s ring through its link model: held
    /// for their release, or dropped and counted. Whether any frame came.
    fn admit(&mut self, d: Dir, shared: &Shared, ports: &mut Ports, log: &mut EventLog) -> bool {
        let i = d.index();
        let c = &shared.counters[i];
        let mut worked = false;
        for _ in 0..256 {
            let got = ports.rx[i].next(|f| {
                bump(&c.rx_frames, 1);
                bump(&c.rx_bytes, f.data.len() as u64);
                if f.truncated || self.held[i].len() >= MAX_HELD_FRAMES {
                    bump(&c.drop_overflow, 1);
                    return;
                }
                // Ports (fragments have none: the first is not dropped either,
                // which loses the datagram all the same) are decoded only when a
                // port blackout needs them, or below for a drop's log line.
                let ports = || {
                    crate::wire::decode(crate::wire::LinkType::Ethernet, f.data)
                        .ok()
                        .and_then(|ip| ip.ports())
                };
                let ports_of = self.port_blackout[i].then(ports).flatten();
                let len = f.data.len() + if f.vlan.is_some() { 4 } else { 0 };
                let blackouts = &self.settings.blackouts[i];
                match self.models[i].admit(f.ts_ns, len as u32, ports_of, blackouts) {
                    Verdict::Forward { release_ns } => {
                        let mut buf = self.free.pop().unwrap_or_default();
                        f.copy_to(&mut buf);
                        self.seq += 1;
                        self.held[i].push(Reverse(Held {
                            release_ns,
                            seq: self.seq,
                            frame: buf,
                        }));
                    }
                    Verdict::Drop(why) => {
                        if why == DropReason::Blackout {
                            c.last_blackout_drop_ns.store(f.ts_ns, Ordering::Relaxed);
                        }
                        bump(
                            match why {
                                DropReason::Blackout => &c.drop_blackout,
                                DropReason::Loss => &c.drop_loss,
                                DropReason::Queue => &c.drop_queue,
                            },
                            1,
                        );
                        log.drop_event(f.ts_ns, d, why, len, ports_of.or_else(ports));
                    }
                }
            });
            if got.is_none() {
                break;
            }
            worked = true;
        }
        worked
    }

    /// Send direction `d`'s frames due by `now`. Whether any was due.
    fn release_due(&mut self, now: u64, d: Dir, shared: &Shared, ports: &mut Ports) -> bool {
        let i = d.index();
        let c = &shared.counters[i];
        let mut worked = false;
        while self.held[i].peek().is_some_and(|h| h.0.release_ns <= now) {
            let Some(Reverse(h)) = self.held[i].pop() else {
                break;
            };
            match ports.tx[i].send(&h.frame) {
                Ok(()) => {
                    bump(&c.tx_frames, 1);
                    bump(&c.tx_bytes, h.frame.len() as u64);
                }
                Err(_) => bump(&c.tx_errors, 1),
            }
            self.free.push(h.frame);
            worked = true;
        }
        let (backlog, _) = self.models[i].backlog(now);
        if backlog > c.max_backlog_bytes.load(Ordering::Relaxed) {
            c.max_backlog_bytes.store(backlog, Ordering::Relaxed);
        }
        worked
    }

    /// Once a second: the kernel's ring drops into the counters, past blackouts gone.
    fn housekeeping(&mut self, now: u64, shared: &Shared, ports: &Ports) {
        if now.saturating_sub(self.last_stats) <= 1_000_000_000 {
            return;
        }
        self.last_stats = now;
        for d in Dir::BOTH {
            let lost = ports.rx[d.index()].kernel_drops();
            bump(&shared.counters[d.index()].ring_drops, lost);
        }
        self.settings
            .blackouts
            .iter_mut()
            .for_each(|b| b.retain(|w| w.end_ns > now));
    }

    /// When the next held frame is due, ns.
    fn next_release(&self) -> Option<u64> {
        self.held
            .iter()
            .filter_map(|h| h.peek().map(|x| x.0.release_ns))
            .min()
    }
}

/// Sleep until a frame arrives on either port, `wake_fd` is written (new settings,
/// stop), or `wait_ns` passes.
///
/// # Errors
/// `ppoll` failed, or a port went away: the emulator ends with this reason.
fn wait_for_work(ports: &Ports, wake_fd: std::os::fd::RawFd, wait_ns: u64) -> Result<(), String> {
    let mut fds = [ports.rx[0].fd(), ports.rx[1].fd(), wake_fd].map(|fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    });
    let ts = libc::timespec {
        tv_sec: (wait_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (wait_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: valid pollfd array and timespec.
    let rc = unsafe { libc::ppoll(fds.as_mut_ptr(), 3, &ts, std::ptr::null()) };
    if rc < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
        return Err(format!("ppoll failed: {}", std::io::Error::last_os_error()));
    }
    if fds[..2]
        .iter()
        .any(|f| f.revents & (libc::POLLERR | libc::POLLNVAL) != 0)
    {
        return Err("an interface of the router went away (lab torn down?)".into());
    }
    if fds[2].revents & libc::POLLIN != 0 {
        let mut v = 0u64;
        // SAFETY: reading 8 bytes from our eventfd.
        unsafe { libc::read(wake_fd, (&mut v as *mut u64).cast(), 8) };
    }
    Ok(())
}

/// Run the emulator until [`Shared::stop`]; errors end it and are recorded in
/// `shared.failure`.
pub fn run(shared: &Shared, ports: &mut Ports, mut log: EventLog, poll: bool, seed: u64) {
    // SAFETY: prctl on this thread only: sleep with 1 ns timer slack (default 50 µs).
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0u64, 0u64, 0u64) };
    let sched = raise_priority(poll);
    shared.running.store(true, Ordering::Release);
    let mut router = Router::new(shared, seed);
    let wake_fd = std::os::fd::AsRawFd::as_raw_fd(&shared.wake);
    log.line(
        realtime_ns(),
        format_args!("\"event\":\"start\",\"poll\":{poll},\"scheduling\":\"{sched}\""),
    );
    let failure = loop {
        if shared.stop.load(Ordering::Acquire) {
            break None;
        }
        router.reload_settings(shared, &mut log);
        let mut worked = false;
        for d in Dir::BOTH {
            worked |= router.admit(d, shared, ports, &mut log);
        }
        let now = realtime_ns();
        for d in Dir::BOTH {
            worked |= router.release_due(now, d, shared, ports);
        }
        router.housekeeping(now, shared, ports);
        log.flush_every(now, 100_000_000);
        if worked {
            continue;
        }
        if poll {
            // Let whatever else is runnable here (ksoftirqd, which delivers the frames
            // this thread sends on, above all) run now rather than at the end of a
            // scheduler slice.
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
            continue;
        }
        // Sleep until the next release, or at most 100 ms (then look at the clock-driven
        // housekeeping again).
        let wait_ns = router
            .next_release()
            .map_or(100_000_000, |t| t.saturating_sub(now).min(100_000_000));
        if let Err(e) = wait_for_work(ports, wake_fd, wait_ns) {
            break Some(e);
        }
    };
    let now = realtime_ns();
    match &failure {
        Some(f) => log.line(
            now,
            format_args!("\"event\":\"failed\",\"error\":{}", serde_json::json!(f)),
        ),
        None => log.line(now, format_args!("\"event\":\"stop\"")),
    }
    log.flush_every(now, 0);
    if failure.is_some() {
        *shared
            .failure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = failure;
    }
    shared.running.store(false, Ordering::Release);
}
