//! `rttlab experiment interval-sweep` (seed 004): ping and TCP_RR at intervals from
//! 1 µs to 1 s, the mean latency of each against the interval. The seed's point: at
//! short intervals the CPUs on the path never go idle and latency stays flat; at long
//! ones every transaction wakes sleeping CPUs (and, on a VM, vCPUs the hypervisor has
//! descheduled), so the same network reads slower — ping's default 1 s interval made
//! it read twice netperf's back-to-back TCP_RR.
//!
//! Both tools keep one transaction in flight: the next request goes once the reply is
//! in and the interval since the last request has passed (netperf's `-w` with `-b 1`).
//! A ping sending on the clock alone would, at intervals below the RTT, put hundreds
//! of requests in flight and measure their queue, not the seed's flat curve.

use super::runner::{Experiment, TrialContext};
use super::testbed::{until_interrupted, LabServer};
use super::ExperimentError;
use crate::kernel::netns;
use crate::probe::pacing::PaceMode;
use crate::probe::ping::{self, PingControl, PingSettings};
use crate::probe::rr::{self, RrSettings, RunControl};
use crate::results::sweep::Point;
use crate::results::{write_file, ResultsError};
use crate::stats::LatencyHistogram;
use serde::{Deserialize, Serialize};
use std::path::Path;

use std::time::Duration;

/// What to run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Settings {
    /// Intervals between transactions, µs.
    pub intervals_us: Vec<f64>,
    /// Transactions per point at most…
    pub count: u64,
    /// …and at most this long, s, but never fewer than `min_samples` intervals.
    pub max_time_s: f64,
    /// Intervals each point runs at least, whatever `max_time_s` says.
    pub min_samples: u64,
    /// The lab: its round-trip delay and how its emulator waits.
    #[serde(flatten)]
    pub lab: crate::results::LabSettings,
    /// TCP_RR paces by spinning (netperf built with --enable-spin, as in the seed).
    pub spin: bool,
    /// Repeats of each tool and interval, and the seed of their order.
    #[serde(flatten)]
    pub repeats: crate::results::Repeats,
}

impl Default for Settings {
    /// 1, 2, 5 per decade from 1 µs to 1 s.
    fn default() -> Self {
        let mut intervals_us = Vec::new();
        let mut d = 1.0;
        while d <= 1e6 {
            for m in [1.0, 2.0, 5.0] {
                if d * m <= 1e6 {
                    intervals_us.push(d * m);
                }
            }
            d *= 10.0;
        }
        Self {
            intervals_us,
            count: 200,
            max_time_s: 3.0,
            min_samples: 10,
            lab: crate::results::LabSettings {
                rtt: Duration::ZERO,
                poll: false,
            },
            spin: true,
            repeats: crate::results::Repeats::default(),
        }
    }
}

fn point(
    (interval_us, tool): &Cell,
    trial: u32,
    r: Result<(&LatencyHistogram, u64, Option<&str>), &dyn std::error::Error>,
    out: &Path,
) -> Point {
    let interval_us = *interval_us;
    let us = |v: Option<u64>| v.map(|x| x as f64 / 1e3);
    match r {
        Ok((h, lost, cut_short)) => {
            let file = if trial == 0 {
                format!("{tool}-{interval_us}us.hist.csv")
            } else {
                format!("{tool}-{interval_us}us-t{trial}.hist.csv")
            };
            let (file, error) = match write_file(out, &file, &h.to_csv()) {
                Ok(()) => (Some(file), None),
                Err(e) => (None, Some(crate::error_chain(&e))),
            };
            // Measured, then cut short: the point keeps its numbers and says why.
            let error = cut_short.map(str::to_string).or(error);
            Point {
                interval_us,
                tool: tool.clone(),
                trial,
                samples: h.count(),
                min_us: us(h.min_ns()),
                mean_us: h.mean_ns().map(|v| v / 1e3),
                p50_us: us(h.quantile_ns(0.5)),
                p90_us: us(h.resolved_quantile_ns(0.9)),
                lost,
                file,
                error,
            }
        }
        Err(e) => Point {
            interval_us,
            tool: tool.clone(),
            trial,
            samples: 0,
            min_us: None,
            mean_us: None,
            p50_us: None,
            p90_us: None,
            lost: 0,
            file: None,
            error: Some(crate::error_chain(e)),
        },
    }
}

/// An interval (µs) and a tool (`icmp` or `tcp_rr`).
pub type Cell = (f64, String);

/// The experiment as the runner drives it.
pub struct IntervalSweep {
    /// The intervals, tools and lab (run.json's settings).
    pub settings: Settings,
    /// The name of the lab built for the run.
    pub lab_name: String,
}

impl Experiment for IntervalSweep {
    const NAME: &'static str = crate::results::names::INTERVAL_SWEEP;
    type Cell = Cell;
    type Record = Point;
    type Testbed = LabServer;
    type Settings = Settings;

    fn settings(&self) -> &Self::Settings {
        &self.settings
    }

    fn cells(&self) -> Vec<Cell> {
        self.settings
            .intervals_us
            .iter()
            .flat_map(|&i| [(i, "icmp".to_string()), (i, "tcp_rr".to_string())])
            .collect()
    }

    fn repeats(&self) -> crate::results::Repeats {
        self.settings.repeats
    }

    fn key(&self, p: &Point) -> (Cell, u32) {
        ((p.interval_us, p.tool.clone()), p.trial)
    }

    fn testbed(&self) -> Result<LabServer, ExperimentError> {
        LabServer::of(&self.lab_name, &self.settings.lab)
    }

    fn trial(
        &self,
        testbed: &LabServer,
        cell: &Cell,
        trial: u32,
        ctx: &TrialContext<'_>,
    ) -> Result<Point, ExperimentError> {
        let (s, out, interrupt) = (&self.settings, ctx.out, ctx.interrupt);
        let (interval_us, tool) = (cell.0, cell.1.as_str());
        let interval = Duration::from_secs_f64(interval_us / 1e6);
        let time = Duration::from_secs_f64(s.max_time_s).max(interval * s.min_samples as u32);
        Ok(netns::run_in(Some(testbed.client_ns()), || {
            if tool == "icmp" {
                let mut p = PingSettings::new(testbed.server.ip());
                p.count = Some(s.count);
                p.duration = Some(time);
                p.interval = interval;
                p.one_in_flight = true;
                let ctl = PingControl::default();
                let r = until_interrupted(interrupt, &ctl.stop, || ping::run(&p, &ctl));
                let r = r
                    .as_ref()
                    .map(|r| (&r.histogram, r.lost, r.error.as_deref()));
                point(cell, trial, r.map_err(|e| e as _), out)
            } else {
                let mut r = RrSettings::new(testbed.server);
                r.count = Some(s.count);
                r.duration = Some(time);
                r.interval = interval;
                r.request_size = 1;
                r.response_size = 1;
                if s.spin {
                    r.pace = PaceMode::Spin;
                }
                let ctl = RunControl::default();
                let res = until_interrupted(interrupt, &ctl.stop, || rr::run(&r, &ctl));
                let res = res.as_ref().map(|r| (&r.histogram, 0, r.error.as_deref()));
                point(cell, trial, res.map_err(|e| e as _), out)
            }
        })
        .unwrap_or_else(|e| point(cell, trial, Err(&e), out)))
    }

    fn describe(&self, p: &Point) -> String {
        format!(
            "{} at {} µs → mean {} µs",
            p.tool,
            p.interval_us,
            p.mean_us.map_or("-".into(), |v| format!("{v:.0}")),
        )
    }

    fn failed(&self, p: &Point) -> bool {
        p.error.is_some()
    }

    fn report(&self, out: &Path, points: &[Point]) -> Result<String, ResultsError> {
        crate::report::sweep::write(out, points)
    }
}
