//! `rttlab experiment resreq-interval` (seed 000): TCP_RR `-r 1,2` with a wait between
//! a response and the next request of 0, 1, 2, 4, 8, 16, 32, 39, 40, 41 ms; for each
//! wait the rr latency percentiles (the seed's netperf table), the kernel's srtt on
//! both ends, and the sampled cloud metric as each end's VM would report it.
//!
//! Why the server's srtt climbs: the server's response is ACKed by the client's next
//! request, which leaves after the wait, or by the client's delayed-ACK timer (40 ms,
//! `TCP_DELACK_MIN`, `tcp_send_delayed_ack`), whichever comes first, and the server's
//! TCP times its response to that ACK. The client's request is ACKed at once by the
//! response, so the client's srtt stays at the network's RTT.
//!
//! `--long` is the seed's "beyond the standalone ACK timer" run: waits 100 ms … 5 s,
//! a two-segment request, and more parallel streams as the wait grows so that the
//! packet rate stays roughly the same.

use super::runner::{Experiment, TrialContext};
use super::testbed::{capture_port, port_srtt, until_interrupted, LabServer};
use super::{ExperimentError, TrialError};
use crate::kernel::netns;
use crate::passive::{Sample, Sink};
use crate::probe::rr::{self, RrSettings, RunControl};
use crate::results::resreq::Point;
use crate::results::ResultsError;
use crate::stats::LatencyHistogram;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The TCP_RR data port the captures and sock_diag follow.
const DATA_PORT: u16 = 12868;

/// What to run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Settings {
    /// Waits between a response and the next request, ms (netperf's `-w`).
    pub waits_ms: Vec<f64>,
    /// Parallel TCP_RR streams at each wait.
    pub streams: Vec<u32>,
    /// How long each wait runs, s.
    pub duration_s: f64,
    /// The lab: its round-trip delay, and its emulator busy-polling (one CPU
    /// spinning, µs-steady delays) instead of sleeping between frames (whose wake-ups
    /// a loaded VM stretches to milliseconds).
    #[serde(flatten)]
    pub lab: crate::results::LabSettings,
    /// Bytes of each request (the seed's long run: two segments' worth).
    pub request_size: u32,
    /// Bytes of each response.
    pub response_size: u32,
    /// The sampled metric keeps one packet in this many.
    pub sampler_one_in: u32,
    /// Repeats of each wait, and the seed of their order.
    #[serde(flatten)]
    pub repeats: crate::results::Repeats,
}

/// The seed's lab: 100 µs round trip, the emulator polling.
const SEED_LAB: crate::results::LabSettings = crate::results::LabSettings {
    rtt: Duration::from_micros(100),
    poll: true,
};

impl Settings {
    /// Seed 000's first run: one stream, `-r 1,2`, waits 0…41 ms.
    pub fn seed_short() -> Self {
        let waits_ms = vec![0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 39.0, 40.0, 41.0];
        Self {
            streams: vec![1; waits_ms.len()],
            waits_ms,
            duration_s: 6.0,
            lab: SEED_LAB,
            request_size: 1,
            response_size: 2,
            sampler_one_in: 1,
            repeats: crate::results::Repeats::default(),
        }
    }

    /// Seed 000's second run: waits 100 ms…5 s with 1 + 15·(wait / 100 ms) streams
    /// (capped at `max_streams`), and a request one byte over the lab's MSS (1448) so
    /// that it takes two segments, as the seed's 1409 bytes did on its VMs. The
    /// metric keeps 1 packet in 10: a sampler that kept every packet would always see
    /// the response's bare ACK, where the seed's sparse one mostly matched the
    /// response with the next request's data.
    pub fn seed_long(max_streams: u32) -> Self {
        let waits_ms = vec![100.0, 300.0, 500.0, 1000.0, 3000.0, 5000.0];
        Self {
            streams: waits_ms
                .iter()
                .map(|w| (1 + 15 * (*w as u32 / 100)).min(max_streams))
                .collect(),
            waits_ms,
            duration_s: 30.0,
            lab: SEED_LAB,
            request_size: 1449,
            response_size: 2,
            sampler_one_in: 10,
            repeats: crate::results::Repeats::default(),
        }
    }
}

/// The metric needs no per-sample output.
struct Ignore;

impl Sink for Ignore {
    fn sample(&mut self, _: &Sample) {}
}

fn median_us(h: &LatencyHistogram) -> Option<f64> {
    h.quantile_ns(0.5).map(|v| v as f64 / 1e3)
}

/// A scoped thread's result, a panic as an error.
fn joined<T>(h: std::thread::ScopedJoinHandle<'_, Result<T, TrialError>>) -> Result<T, TrialError> {
    h.join()
        .unwrap_or_else(|_| Err(TrialError::Panicked("a thread")))
}

/// The files of one trial: `wait-40ms`, `wait-40ms-t1` for its second repeat.
fn stem(wait_ms: f64, trial: u32) -> String {
    if trial == 0 {
        format!("wait-{wait_ms}ms")
    } else {
        format!("wait-{wait_ms}ms-t{trial}")
    }
}

/// What one wait's run brought back: rr's result, the server's srtt of the data port,
/// and the sampled metric at each host's capture.
struct Measured {
    rr: Result<rr::RrResult, String>,
    server_srtt: Result<(LatencyHistogram, Vec<(u64, u64)>), TrialError>,
    client_capture: Result<super::testbed::Captured<Ignore>, TrialError>,
    server_capture: Result<super::testbed::Captured<Ignore>, TrialError>,
}

/// TCP_RR for one wait: request and response sizes from the settings, one
/// transaction every `wait_ms` on each of `streams` connections, the kernel's srtt
/// every 10 ms.
fn rr_settings(testbed: &LabServer, s: &Settings, (wait_ms, streams): Cell) -> RrSettings {
    let mut r = RrSettings::new(testbed.server);
    r.request_size = s.request_size;
    r.response_size = s.response_size;
    r.duration = Some(Duration::from_secs_f64(s.duration_s));
    r.interval = Duration::from_secs_f64(wait_ms / 1e3);
    r.streams = streams;
    r.spread_starts = true;
    r.data_port = DATA_PORT;
    r.tcpinfo_interval = Some(Duration::from_millis(10));
    r
}

/// Run `r` from the client host while both hosts capture the data port and the
/// server's side reads its srtt; the watchers start 300 ms before and stop 300 ms after.
fn measure(testbed: &LabServer, s: &Settings, r: &RrSettings, interrupt: &AtomicBool) -> Measured {
    let duration = Duration::from_secs_f64(s.duration_s);
    let stop = AtomicBool::new(false);
    let ctl = RunControl::default();
    let period = duration + Duration::from_secs(60);
    std::thread::scope(|sc| {
        let capture = |host: &crate::lab::HostInfo, ns| {
            let ifname = host.ifname.clone();
            let stop = &stop;
            sc.spawn(move || {
                capture_port(
                    &ifname,
                    Some(ns),
                    DATA_PORT,
                    s.sampler_one_in,
                    period,
                    stop,
                    Ignore,
                )
            })
        };
        let info = testbed.lab().info();
        let cli_cap = capture(&info.a, testbed.client_ns());
        let srv_cap = capture(&info.b, testbed.server_ns());
        let srv = sc.spawn(|| {
            port_srtt(
                Some(testbed.server_ns()),
                DATA_PORT,
                duration + Duration::from_secs(10),
                &stop,
            )
        });
        std::thread::sleep(Duration::from_millis(300));
        let rr = netns::run_in(Some(testbed.client_ns()), || {
            until_interrupted(interrupt, &ctl.stop, || rr::run(r, &ctl))
                .map_err(|e| crate::error_chain(&e))
        })
        .map_err(|e| crate::error_chain(&e))
        .and_then(|x| x);
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::Release);
        Measured {
            rr,
            server_srtt: joined(srv),
            client_capture: joined(cli_cap),
            server_capture: joined(srv_cap),
        }
    })
}

/// One wait in the lab.
fn point(
    testbed: &LabServer,
    s: &Settings,
    (wait_ms, streams): Cell,
    trial: u32,
    out: &Path,
    interrupt: &AtomicBool,
) -> Point {
    let r = rr_settings(testbed, s, (wait_ms, streams));
    let Measured {
        rr,
        server_srtt: srv,
        client_capture: cli_cap,
        server_capture: srv_cap,
    } = measure(testbed, s, &r, interrupt);
    let mut errors = Vec::new();
    let server_srtt = srv.map(|(h, _)| h).unwrap_or_else(|e| {
        errors.push(format!("server srtt: {}", e.chain()));
        LatencyHistogram::new()
    });
    let mut metric = |c: Result<super::testbed::Captured<Ignore>, TrialError>, who: &str| match c {
        Ok(c) => (c.periods.into_iter().max_by_key(|p| p.samples), c.drops),
        Err(e) => {
            errors.push(format!("{who} capture: {}", e.chain()));
            (None, 0)
        }
    };
    let (client_metric, d1) = metric(cli_cap, "client");
    let (server_metric, d2) = metric(srv_cap, "server");
    let mut client_srtt = LatencyHistogram::new();
    for t in rr.iter().flat_map(|r| &r.tcpinfo_series) {
        if t.info.rtt_us > 0 {
            client_srtt.record_ns(u64::from(t.info.rtt_us) * 1000);
        }
    }
    let mut files = Vec::new();
    let hists = [
        ("rr", rr.as_ref().ok().map(|r| &r.histogram)),
        ("client_srtt", Some(&client_srtt)),
        ("server_srtt", Some(&server_srtt)),
    ];
    for (name, h) in hists {
        let Some(h) = h else { continue };
        let f = format!("{}.{name}.hist.csv", stem(wait_ms, trial));
        match crate::results::write_file(out, &f, &h.to_csv()) {
            Ok(()) => files.push(f),
            Err(e) => errors.push(format!("{f}: {}", crate::error_chain(&e))),
        }
    }
    let (h, transactions, retr) = match &rr {
        Ok(r) => {
            // Measured, then cut short: the point keeps its numbers and says why.
            if let Some(e) = &r.error {
                errors.push(format!("TCP_RR: {e}"));
            }
            (
                Some(&r.histogram),
                r.transactions,
                r.local_retrans.unwrap_or(0) + r.remote_retrans.unwrap_or(0),
            )
        }
        Err(e) => {
            errors.push(format!("TCP_RR: {}", e));
            (None, 0, 0)
        }
    };
    let q = |x: f64| {
        h.and_then(|h| h.resolved_quantile_ns(x))
            .map(|v| v as f64 / 1e3)
    };
    Point {
        wait_ms,
        streams,
        trial,
        transactions,
        min_us: h.and_then(LatencyHistogram::min_ns).map(|v| v as f64 / 1e3),
        mean_us: h.and_then(LatencyHistogram::mean_ns).map(|v| v / 1e3),
        p50_us: q(0.5),
        p90_us: q(0.9),
        p99_us: q(0.99),
        client_srtt_us: median_us(&client_srtt),
        server_srtt_us: median_us(&server_srtt),
        client_metric,
        server_metric,
        retransmissions: retr,
        capture_drops: d1 + d2,
        files,
        error: (!errors.is_empty()).then(|| errors.join("; ")),
    }
}

/// A wait (ms) and its number of streams.
pub type Cell = (f64, u32);

/// The experiment as the runner drives it.
pub struct ResreqInterval {
    /// The waits, streams and lab (run.json's settings).
    pub settings: Settings,
    /// The name of the lab built for the run.
    pub lab_name: String,
}

impl Experiment for ResreqInterval {
    const NAME: &'static str = crate::results::names::RESREQ_INTERVAL;
    type Cell = Cell;
    type Record = Point;
    type Testbed = LabServer;
    type Settings = Settings;

    fn settings(&self) -> &Self::Settings {
        &self.settings
    }

    fn cells(&self) -> Vec<Cell> {
        let s = &self.settings;
        s.waits_ms
            .iter()
            .copied()
            .zip(s.streams.iter().copied())
            .collect()
    }

    fn repeats(&self) -> crate::results::Repeats {
        self.settings.repeats
    }

    fn key(&self, p: &Point) -> (Cell, u32) {
        ((p.wait_ms, p.streams), p.trial)
    }

    fn testbed(&self) -> Result<LabServer, ExperimentError> {
        LabServer::of(&self.lab_name, &self.settings.lab)
    }

    fn trial(
        &self,
        testbed: &LabServer,
        &cell: &Cell,
        trial: u32,
        ctx: &TrialContext<'_>,
    ) -> Result<Point, ExperimentError> {
        Ok(point(
            testbed,
            &self.settings,
            cell,
            trial,
            ctx.out,
            ctx.interrupt,
        ))
    }

    fn describe(&self, p: &Point) -> String {
        format!(
            "wait {} ms → P50 {} µs, server srtt {} ms",
            p.wait_ms,
            p.p50_us.map_or("-".into(), |v| format!("{v:.0}")),
            p.server_srtt_us
                .map_or("-".into(), |v| format!("{:.1}", v / 1e3)),
        )
    }

    fn failed(&self, p: &Point) -> bool {
        p.error.is_some()
    }

    fn report(&self, out: &Path, points: &[Point]) -> Result<String, ResultsError> {
        crate::report::resreq::write(out, points)
    }
}
