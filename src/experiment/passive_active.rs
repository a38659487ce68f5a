//! `rttlab experiment passive-vs-active` (seeds 002/003, Strowes): ping, an
//! application timestamp echo over TCP and the passive TS RTT of that echo's
//! connection, run together through the lab for each scenario:
//!
//! - `delay`: the RTT alternates between 100 and 150 ms (one-way delay 50 ↔ 75 ms
//!   both ways every `delay_step_s`); the seed found all three layers' means within 1 %.
//! - `loss-N`: 100 ms RTT and N % random loss both ways; the application's RTT
//!   includes TCP's recovery and head-of-line blocking, the passive TS RTT does not
//!   (seed: app mean 196.4 ms at 5 %, 400.3 ms at 10 %, 1.2 s at 15 %, 17.7 s at 20 %).
//! - `queue-NKB`: 100 ms RTT, 10 Mbit/s, a drop-tail queue of N KB both ways and a
//!   bulk TCP flow from a to b filling it (the seed's netcat); every layer is inflated
//!   alike (seed: within 2 ms of each other at 300 KB, 100 to ~250 ms).
//!
//! The echo client is the seed's: one thread sends a 16-byte message (sequence number
//! and send time) every second with TCP_NODELAY, another reads the echoes and times
//! them, so a message held behind a lost one waits in the receive buffer.

use super::runner::{Experiment, TrialContext};
use super::testbed::{capture_port, LabServer};
use super::{ExperimentError, TrialError};
use crate::kernel::{netns, realtime_ns, sockopt};
use crate::lab::emulator::Dir;
use crate::lab::impair::{ImpairmentPatch, Impairments, Loss, QueueLimit};
use crate::passive::{Method, Place, Sample, Sink};
use crate::probe::ping::{self, PingControl, PingSettings};
use crate::results::passive_active::{
    stats, Scenario, ScenarioResult, SAMPLES_HEADER, SAMPLE_LAYERS,
};
use crate::results::{write_file, ResultsError};
use crate::stats::units::ns;
use serde::{Deserialize, Serialize};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const ECHO_PORT: u16 = 12870;
const BULK_PORT: u16 = 12871;

/// What to run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Settings {
    /// The scenarios to run, by name (`delay`, `loss-N`, `queue-NKB`; `--scenarios`).
    pub scenarios: Vec<String>,
    /// How long each scenario sends echoes, s (the seed: 180).
    pub duration_s: f64,
    /// The lab's round-trip delay before any scenario adds to it (the seed: 100 ms).
    #[serde(rename = "base_rtt_ms", with = "crate::stats::units::millis")]
    pub base_rtt: Duration,
    /// `delay`: the round-trip delay added and removed.
    #[serde(rename = "delay_step_ms", with = "crate::stats::units::millis")]
    pub delay_step: Duration,
    /// `delay`: how often the RTT switches between the base and the base plus
    /// `delay_step`, s (`--delay-step`).
    pub delay_step_s: f64,
    /// `queue-*`: the bottleneck's rate, bit/s (the seed: 10 Mbit/s).
    pub rate_bps: u64,
    /// Time between echoes and pings, s (the seed: 1).
    pub interval_s: f64,
    /// How long to wait for the last echoes after the last send, s.
    pub grace_s: f64,
    /// Congestion control of the echo and bulk connections (both ends). The seed's
    /// kernel defaulted to cubic, which fills a drop-tail queue; this one defaults to
    /// bbr, which keeps it nearly empty and would hide the seed's queue scenarios.
    pub congestion: String,
    /// Repeats of each scenario, and the seed of their order.
    #[serde(flatten)]
    pub repeats: crate::results::Repeats,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            scenarios: Scenario::seed_names(),
            duration_s: 60.0,
            base_rtt: Duration::from_millis(100),
            delay_step: Duration::from_millis(50),
            delay_step_s: 10.0,
            rate_bps: 10_000_000,
            interval_s: 1.0,
            grace_s: 20.0,
            congestion: "cubic".into(),
            repeats: crate::results::Repeats::default(),
        }
    }
}

/// (seconds since the start, RTT ms) of one layer.
type Series = Vec<(f64, f64)>;

/// The passive TS samples answered by the server (network RTT seen from a).
struct TsSink {
    t0_realtime_ns: u64,
    series: Series,
}

impl Sink for TsSink {
    fn sample(&mut self, s: &Sample) {
        if s.method == Method::Ts && s.place == Place::Network {
            let t = s.ts_ns.saturating_sub(self.t0_realtime_ns) as f64 / 1e9;
            self.series.push((t, s.rtt_ns as f64 / 1e6));
        }
    }
}

/// The echo server in b: echoes every byte back on each accepted connection until
/// `stop`.
fn echo_server(l: TcpListener, stop: &AtomicBool) {
    l.set_nonblocking(true).ok();
    std::thread::scope(|sc| {
        while !stop.load(Ordering::Acquire) {
            match l.accept() {
                Ok((mut c, _)) => {
                    sc.spawn(move || {
                        c.set_nonblocking(false).ok();
                        c.set_nodelay(true).ok();
                        c.set_read_timeout(Some(Duration::from_millis(200))).ok();
                        let mut buf = [0u8; 4096];
                        while !stop.load(Ordering::Acquire) {
                            match c.read(&mut buf) {
                                Ok(0) => break,
                                Ok(n) => {
                                    if c.write_all(&buf[..n]).is_err() {
                                        break;
                                    }
                                }
                                Err(e)
                                    if matches!(
                                        e.kind(),
                                        std::io::ErrorKind::WouldBlock
                                            | std::io::ErrorKind::TimedOut
                                    ) => {}
                                Err(_) => break,
                            }
                        }
                    });
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    });
}

/// The bulk sink in b: reads and discards until `stop`; returns the bytes read.
fn bulk_sink(l: TcpListener, stop: &AtomicBool) -> u64 {
    l.set_nonblocking(true).ok();
    let mut total = 0u64;
    while !stop.load(Ordering::Acquire) {
        let Ok((mut c, _)) = l.accept() else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        c.set_nonblocking(false).ok();
        c.set_read_timeout(Some(Duration::from_millis(200))).ok();
        let mut buf = vec![0u8; 1 << 16];
        while !stop.load(Ordering::Acquire) {
            match c.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => total += n as u64,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break,
            }
        }
    }
    total
}

/// A TCP connection to `to` with congestion control `cc`.
fn connect(to: SocketAddr, cc: &str, timeout: Duration) -> Result<TcpStream, TrialError> {
    let sock = Socket::new(Domain::for_address(to), Type::STREAM, Some(Protocol::TCP))
        .map_err(TrialError::step("a TCP socket"))?;
    sockopt::set_congestion(&sock, cc)
        .map_err(TrialError::step(format!("congestion control {cc}")))?;
    sock.connect_timeout(&SockAddr::from(to), timeout)
        .map_err(TrialError::step(format!("connecting to {to}")))?;
    Ok(sock.into())
}

/// A listener on `at` whose connections use congestion control `cc`.
fn listen(at: SocketAddr, cc: &str) -> Result<TcpListener, TrialError> {
    let sock = Socket::new(Domain::for_address(at), Type::STREAM, Some(Protocol::TCP))
        .map_err(TrialError::step("a TCP socket"))?;
    sockopt::set_congestion(&sock, cc)
        .map_err(TrialError::step(format!("congestion control {cc}")))?;
    let listening = || format!("listening on {at}");
    sock.set_reuse_address(true)
        .map_err(TrialError::step(listening()))?;
    sock.bind(&SockAddr::from(at))
        .map_err(TrialError::step(listening()))?;
    sock.listen(16).map_err(TrialError::step(listening()))?;
    Ok(sock.into())
}

/// The bulk sender in a: writes as fast as TCP takes it until `stop`.
fn bulk_send(to: SocketAddr, cc: &str, stop: &AtomicBool) -> Result<(), TrialError> {
    let mut c = connect(to, cc, Duration::from_secs(10))?;
    c.set_write_timeout(Some(Duration::from_millis(200))).ok();
    let buf = vec![0x5au8; 1 << 16];
    while !stop.load(Ordering::Acquire) {
        match c.write(&buf) {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(TrialError::step("sending the bulk flow")(e)),
        }
    }
    Ok(())
}

/// The seed's echo client: a sender thread (one message per interval) and a reader
/// thread timing each echo. Returns the echo RTTs, the messages never echoed, and
/// the connection's retransmissions.
fn echo_client(
    to: SocketAddr,
    s: &Settings,
    t0: Instant,
    interrupt: &AtomicBool,
) -> Result<(Series, u64, Option<u32>), TrialError> {
    let c = connect(to, &s.congestion, Duration::from_secs(30))?;
    c.set_nodelay(true)
        .map_err(TrialError::step("TCP_NODELAY on the echo connection"))?;
    let mut rx = c
        .try_clone()
        .map_err(TrialError::step("the echo connection's reader"))?;
    rx.set_read_timeout(Some(Duration::from_millis(200))).ok();
    let sent = std::sync::atomic::AtomicU64::new(0);
    let done_sending = AtomicBool::new(false);
    let series = Mutex::new(Series::new());
    let interval = Duration::from_secs_f64(s.interval_s);
    let n = (s.duration_s / s.interval_s).floor().max(1.0) as u64;
    let result = std::thread::scope(|sc| {
        let reader = sc.spawn(|| {
            let mut got = 0u64;
            let mut buf = [0u8; 16];
            let mut have = 0usize;
            let mut deadline: Option<Instant> = None;
            loop {
                if done_sending.load(Ordering::Acquire) {
                    let d = *deadline
                        .get_or_insert_with(|| Instant::now() + Duration::from_secs_f64(s.grace_s));
                    if got >= sent.load(Ordering::Acquire) || Instant::now() > d {
                        break;
                    }
                }
                if interrupt.load(Ordering::Acquire) {
                    break;
                }
                match rx.read(&mut buf[have..]) {
                    Ok(0) => break,
                    Ok(k) => {
                        have += k;
                        if have == 16 {
                            have = 0;
                            got += 1;
                            let sent_ns = u64::from_be_bytes(buf[8..].try_into().expect("8 bytes"));
                            let now = t0.elapsed();
                            let rtt = crate::stats::units::ns(now) - sent_ns;
                            series
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .push((sent_ns as f64 / 1e9, rtt as f64 / 1e6));
                        }
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(_) => break,
                }
            }
            got
        });
        let mut tx = &c;
        for k in 0..n {
            let due = interval * u32::try_from(k).unwrap_or(u32::MAX);
            while t0.elapsed() < due {
                if interrupt.load(Ordering::Acquire) {
                    break;
                }
                std::thread::sleep((due - t0.elapsed()).min(Duration::from_millis(50)));
            }
            if interrupt.load(Ordering::Acquire) {
                break;
            }
            let mut m = [0u8; 16];
            m[..8].copy_from_slice(&k.to_be_bytes());
            m[8..].copy_from_slice(&(crate::stats::units::ns(t0.elapsed())).to_be_bytes());
            if tx.write_all(&m).is_err() {
                break;
            }
            sent.fetch_add(1, Ordering::AcqRel);
        }
        done_sending.store(true, Ordering::Release);
        reader.join().unwrap_or(0)
    });
    let retrans = crate::kernel::sockopt::tcp_info(&c)
        .ok()
        .map(|i| i.total_retrans);
    let unanswered = sent.load(Ordering::Acquire).saturating_sub(result);
    Ok((series.into_inner().unwrap_or_default(), unanswered, retrans))
}

/// The lab's impairments for a scenario (the `delay` scenario starts at the base).
fn impairments(sc: Scenario, s: &Settings) -> Impairments {
    let mut imp = Impairments::with_rtt(s.base_rtt);
    match sc {
        Scenario::Delay => {}
        Scenario::Loss { percent } => {
            imp.loss = Loss::Bernoulli {
                p: f64::from(percent) / 100.0,
            }
        }
        Scenario::Queue { kbytes } => {
            imp.rate_bps = Some(s.rate_bps);
            imp.queue = QueueLimit::Bytes(u64::from(kbytes) * 1000);
        }
    }
    imp
}

/// The scenario's delay, loss, rate and queue set on both directions of the lab.
fn set_impairments(
    testbed: &LabServer,
    s: &Settings,
    name: &str,
    sc: Scenario,
) -> Result<Impairments, TrialError> {
    let imp = impairments(sc, s);
    testbed
        .lab()
        .set(
            &Dir::BOTH,
            &ImpairmentPatch {
                delay_ns: Some(imp.delay_ns),
                loss: Some(imp.loss),
                rate_bps: Some(imp.rate_bps),
                queue: Some(imp.queue),
                ..ImpairmentPatch::default()
            },
        )
        .map_err(TrialError::step(format!(
            "the scenario's impairments ({name})"
        )))?;
    Ok(imp)
}

/// The delay scenario's changes: every `delay_step_s` from `t0`, the one-way delay
/// goes up by half the step, then back, until `stop` or an interrupt.
fn alternate_delay(
    testbed: &LabServer,
    s: &Settings,
    base_ns: u64,
    t0: Instant,
    stop: &AtomicBool,
    interrupt: &AtomicBool,
) {
    let step = Duration::from_secs_f64(s.delay_step_s);
    let (lo, hi) = (base_ns, base_ns + ns(s.delay_step) / 2);
    let mut k = 1u32;
    while !stop.load(Ordering::Acquire) && !interrupt.load(Ordering::Acquire) {
        if t0.elapsed() >= step * k {
            let d = if k % 2 == 1 { hi } else { lo };
            let _ = testbed.lab().set(
                &Dir::BOTH,
                &ImpairmentPatch {
                    delay_ns: Some(d),
                    ..ImpairmentPatch::default()
                },
            );
            k += 1;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// ICMP echo from a to b at the scenario's interval for its duration, every reply
/// kept.
fn ping_server(testbed: &LabServer, s: &Settings) -> Result<ping::PingResult, TrialError> {
    netns::run_in(Some(testbed.client_ns()), || {
        let mut p = PingSettings::new(testbed.server.ip());
        p.count = Some((s.duration_s / s.interval_s).floor().max(1.0) as u64);
        p.interval = Duration::from_secs_f64(s.interval_s);
        p.timeout = Duration::from_secs(5);
        p.keep_series = true;
        let ctl = PingControl::default();
        ping::run(&p, &ctl).map_err(TrialError::step("ping"))
    })
    .map_err(TrialError::step("entering a's namespace"))
    .and_then(|x| x)
}

/// Every layer's samples in one CSV (`t_s,layer,rtt_ms`), `NAME.samples.csv` or
/// `NAME-tN.samples.csv` for a repeat; its file name.
fn write_samples(
    out: &Path,
    name: &str,
    trial: u32,
    layers: [(&str, &Series); 3],
) -> Result<String, TrialError> {
    let mut csv = format!("{SAMPLES_HEADER}\n");
    for (layer, series) in layers {
        for (t, r) in series {
            csv += &format!("{t:.6},{layer},{r:.6}\n");
        }
    }
    let samples_file = if trial == 0 {
        format!("{name}.samples.csv")
    } else {
        format!("{name}-t{trial}.samples.csv")
    };
    write_file(out, &samples_file, &csv).map_err(TrialError::step(samples_file.clone()))?;
    Ok(samples_file)
}

/// What one scenario's layers brought back: the echo client's series, ping's, the
/// TS samples of the capture on a, the bulk sender's outcome and the bytes the bulk
/// sink took.
struct Measured {
    echo: Result<(Series, u64, Option<u32>), TrialError>,
    ping: Result<ping::PingResult, TrialError>,
    cap: Result<super::testbed::Captured<TsSink>, TrialError>,
    sent: Option<Result<(), TrialError>>,
    bulk_bytes: u64,
}

/// The scenario's traffic at once: the echo server and bulk sink on b, the capture on
/// a, the bulk flow (queue scenario, started 2 s ahead), the delay changes (delay
/// scenario), ping, and the echo client, which sets the scenario's length.
fn measure(
    testbed: &LabServer,
    s: &Settings,
    sc: Scenario,
    base_delay_ns: u64,
    (echo_l, bulk_l): (TcpListener, TcpListener),
    interrupt: &AtomicBool,
) -> Measured {
    let lab = testbed.lab();
    let b_ip = testbed.server.ip();
    let stop = AtomicBool::new(false);
    let stop_bulk = AtomicBool::new(false);
    let bulk = matches!(sc, Scenario::Queue { .. });
    let t0 = Instant::now();
    let t0_rt = realtime_ns();
    std::thread::scope(|th| {
        let server = th.spawn(|| echo_server(echo_l, &stop));
        let sink = th.spawn(|| bulk_sink(bulk_l, &stop));
        let cap = th.spawn(|| {
            let sink = TsSink {
                t0_realtime_ns: t0_rt,
                series: Series::new(),
            };
            let (ifname, ns) = (&lab.info().a.ifname, Some(testbed.client_ns()));
            capture_port(
                ifname,
                ns,
                ECHO_PORT,
                1,
                Duration::from_secs(3600),
                &stop,
                sink,
            )
        });
        let sender = bulk.then(|| {
            th.spawn(|| {
                netns::run_in(Some(testbed.client_ns()), || {
                    bulk_send(SocketAddr::new(b_ip, BULK_PORT), &s.congestion, &stop_bulk)
                })
                .map_err(TrialError::step("entering a's namespace"))?
            })
        });
        if bulk {
            // Let the bulk flow fill the queue first, as the seed started netcat first.
            std::thread::sleep(Duration::from_secs(2));
        }
        let changer = matches!(sc, Scenario::Delay)
            .then(|| th.spawn(|| alternate_delay(testbed, s, base_delay_ns, t0, &stop, interrupt)));
        let pinger = th.spawn(|| ping_server(testbed, s));
        let echo = netns::run_in(Some(testbed.client_ns()), || {
            echo_client(
                SocketAddr::new(b_ip, ECHO_PORT),
                s,
                Instant::now(),
                interrupt,
            )
        })
        .map_err(TrialError::step("entering a's namespace"))
        .and_then(|x| x);
        let ping = pinger
            .join()
            .unwrap_or_else(|_| Err(TrialError::Panicked("ping")));
        stop_bulk.store(true, Ordering::Release);
        let sent = sender.map(|h| {
            h.join()
                .unwrap_or_else(|_| Err(TrialError::Panicked("the bulk sender")))
        });
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::Release);
        if let Some(c) = changer {
            let _ = c.join();
        }
        let _ = server.join();
        let bulk_bytes = sink.join().unwrap_or(0);
        let cap = cap
            .join()
            .unwrap_or_else(|_| Err(TrialError::Panicked("capture")));
        Measured {
            echo,
            ping,
            cap,
            sent,
            bulk_bytes,
        }
    })
}

/// Run one scenario in the lab.
fn scenario(
    testbed: &LabServer,
    s: &Settings,
    name: &str,
    sc: Scenario,
    trial: u32,
    out: &Path,
    interrupt: &AtomicBool,
) -> Result<ScenarioResult, TrialError> {
    let imp = set_impairments(testbed, s, name, sc)?;
    let b_ip = testbed.server.ip();
    let (echo_l, bulk_l) = netns::run_in(Some(testbed.server_ns()), || {
        Ok::<_, TrialError>((
            listen(SocketAddr::new(b_ip, ECHO_PORT), &s.congestion)?,
            listen(SocketAddr::new(b_ip, BULK_PORT), &s.congestion)?,
        ))
    })
    .map_err(TrialError::step("entering b's namespace"))??;
    let Measured {
        echo,
        ping,
        cap,
        sent,
        bulk_bytes,
    } = measure(testbed, s, sc, imp.delay_ns, (echo_l, bulk_l), interrupt);
    let mut errors = Vec::new();
    let mut kept = |what: &str, e: TrialError| errors.push(format!("{what}: {}", e.chain()));
    let (app, app_unanswered, retrans) = echo.unwrap_or_else(|e| {
        kept("echo", e);
        (Series::new(), 0, None)
    });
    let (icmp, lost) = ping.map_or_else(
        |e| {
            kept("ping", e);
            (Series::new(), 0)
        },
        |p| {
            (
                p.series.iter().map(|&(t, r)| (t, r as f64 / 1e6)).collect(),
                p.lost,
            )
        },
    );
    let (ts, drops) = cap.map_or_else(
        |e| {
            kept("capture", e);
            (Series::new(), 0)
        },
        |c| (c.sink.series, c.drops),
    );
    if let Some(Err(e)) = sent {
        kept("bulk", e);
    }
    let samples_file = write_samples(
        out,
        name,
        trial,
        [
            (SAMPLE_LAYERS[0], &icmp),
            (SAMPLE_LAYERS[1], &app),
            (SAMPLE_LAYERS[2], &ts),
        ],
    )?;
    Ok(ScenarioResult {
        scenario: name.into(),
        trial,
        layers: vec![
            stats("icmp", &icmp, lost),
            stats("app", &app, app_unanswered),
            stats("tcp_ts", &ts, 0),
        ],
        echo_retransmissions: retrans,
        bulk_bytes,
        capture_drops: drops,
        samples_file,
        error: (!errors.is_empty()).then(|| errors.join("; ")),
    })
}

/// The experiment as the runner drives it.
pub struct PassiveVsActive {
    /// The scenarios and how they run (run.json's settings).
    pub settings: Settings,
    /// The name of the lab built for the run.
    pub lab_name: String,
    scenarios: Vec<(String, Scenario)>,
}

impl PassiveVsActive {
    /// # Errors
    /// An unknown scenario name.
    pub fn new(settings: Settings, lab_name: &str) -> Result<Self, ExperimentError> {
        let scenarios = settings
            .scenarios
            .iter()
            .map(|n| {
                Scenario::parse(n)
                    .map(|sc| (n.clone(), sc))
                    .ok_or_else(|| ExperimentError::UnknownScenario(n.clone()))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            settings,
            lab_name: lab_name.into(),
            scenarios,
        })
    }
}

impl Experiment for PassiveVsActive {
    const NAME: &'static str = crate::results::names::PASSIVE_VS_ACTIVE;
    /// A scenario's name.
    type Cell = String;
    type Record = ScenarioResult;
    type Testbed = LabServer;
    type Settings = Settings;

    fn settings(&self) -> &Self::Settings {
        &self.settings
    }

    fn cells(&self) -> Vec<String> {
        self.scenarios.iter().map(|(n, _)| n.clone()).collect()
    }

    fn repeats(&self) -> crate::results::Repeats {
        self.settings.repeats
    }

    fn key(&self, r: &ScenarioResult) -> (String, u32) {
        (r.scenario.clone(), r.trial)
    }

    fn testbed(&self) -> Result<LabServer, ExperimentError> {
        LabServer::up(&self.lab_name, Impairments::default())
    }

    fn trial(
        &self,
        testbed: &LabServer,
        name: &String,
        trial: u32,
        ctx: &TrialContext<'_>,
    ) -> Result<ScenarioResult, ExperimentError> {
        let sc = self
            .scenarios
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, sc)| *sc)
            .ok_or_else(|| ExperimentError::UnknownScenario(name.into()))?;
        Ok(scenario(
            testbed,
            &self.settings,
            name,
            sc,
            trial,
            ctx.out,
            ctx.interrupt,
        )
        .unwrap_or_else(|e| ScenarioResult {
            scenario: name.clone(),
            trial,
            layers: Vec::new(),
            echo_retransmissions: None,
            bulk_bytes: 0,
            capture_drops: 0,
            samples_file: String::new(),
            error: Some(e.chain()),
        }))
    }

    fn describe(&self, r: &ScenarioResult) -> String {
        let mean = |l: &str| {
            r.layers
                .iter()
                .find(|x| x.layer == l)
                .and_then(|x| x.mean_ms)
                .map_or("-".into(), |v| format!("{v:.1}"))
        };
        format!(
            "{} (trial {}) → mean icmp {} ms, app {} ms, TCP TS {} ms",
            r.scenario,
            r.trial + 1,
            mean("icmp"),
            mean("app"),
            mean("tcp_ts")
        )
    }

    fn failed(&self, r: &ScenarioResult) -> bool {
        r.error.is_some()
    }

    fn report(&self, out: &Path, records: &[ScenarioResult]) -> Result<String, ResultsError> {
        crate::report::passive_active::write(out, records)
    }
}
