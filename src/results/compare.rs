//! The record of `rttlab compare` (compare.json): every layer's numbers, the facts the
//! explanations rest on, and the settings.

use crate::passive::sampler::Period;
use crate::stats::LatencyHistogram;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::time::Duration;

/// What to compare and how.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompareSettings {
    /// `rttlab serve` on the far host; `None`: a lab built for the run.
    pub server: Option<SocketAddr>,
    /// The lab's round-trip delay (split evenly between the two directions).
    #[serde(
        rename = "lab_rtt_s",
        alias = "lab_rtt",
        with = "crate::stats::units::seconds"
    )]
    pub lab_rtt: Duration,
    /// Wait between a response and the next request (and between pings).
    #[serde(
        rename = "interval_s",
        alias = "interval",
        with = "crate::stats::units::seconds"
    )]
    pub interval: Duration,
    #[serde(
        rename = "duration_s",
        alias = "duration",
        with = "crate::stats::units::seconds"
    )]
    pub duration: Duration,
    /// The TCP_RR data port (fixed so the capture and sock_diag find the connection).
    pub data_port: u16,
    /// The sampled metric keeps one packet in this many.
    pub sampler_one_in: u32,
    /// Capture interface on the client (`None`: the route's, or the lab's eth0).
    pub interface: Option<String>,
    /// The lab's emulator busy-polls one CPU instead of sleeping between frames: its
    /// delays stay within µs even when the hypervisor steals time, where a sleeping
    /// emulator's wake-ups stretch to milliseconds.
    #[serde(default)]
    pub lab_poll: bool,
    /// Repeats of the whole comparison, and the seed of their order.
    #[serde(default = "one")]
    pub trials: u32,
    #[serde(default = "one_u64")]
    pub seed: u64,
    /// The secret shared with the server (never written to a results file).
    #[serde(skip)]
    pub secret: Option<Vec<u8>>,
}

impl Default for CompareSettings {
    fn default() -> Self {
        Self {
            server: None,
            lab_rtt: Duration::from_millis(10),
            interval: Duration::from_millis(10),
            duration: Duration::from_secs(10),
            data_port: 12867,
            sampler_one_in: 1,
            interface: None,
            lab_poll: true,
            trials: 1,
            seed: 1,
            secret: None,
        }
    }
}

/// A layer's P50, P90 and P99 in µs (`None` without samples).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LayerPercentiles {
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
}

/// One layer's numbers, µs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Layer {
    pub name: String,
    /// What a sample is.
    pub what: String,
    pub samples: u64,
    pub min_us: Option<f64>,
    pub max_us: Option<f64>,
    pub mean_us: Option<f64>,
    pub percentiles_us: LayerPercentiles,
    /// The samples behind the numbers (written to `<name>.hist.csv` with `--out`).
    #[serde(skip)]
    pub histogram: Option<LatencyHistogram>,
}

impl Layer {
    /// A layer's row from its samples.
    pub fn from_histogram(name: &str, what: &str, h: &LatencyHistogram) -> Self {
        let us = |v: Option<u64>| v.map(|x| x as f64 / 1e3);
        Self {
            name: name.into(),
            what: what.into(),
            samples: h.count(),
            min_us: us(h.min_ns()),
            max_us: us(h.max_ns()),
            mean_us: h.mean_ns().map(|v| v / 1e3),
            percentiles_us: LayerPercentiles {
                p50: us(h.quantile_ns(0.5)),
                p90: us(h.quantile_ns(0.9)),
                p99: us(h.quantile_ns(0.99)),
            },
            histogram: Some(h.clone()),
        }
    }

    /// The file, in a results directory, that holds this layer's samples.
    pub fn histogram_file(&self, trial: u32) -> String {
        let stem = self.name.replace(' ', "_");
        if trial == 0 {
            format!("{stem}.hist.csv")
        } else {
            format!("{stem}-t{trial}.hist.csv")
        }
    }
}

/// The result: the layers, facts the explanations rest on, and the explanations.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompareResult {
    pub settings: CompareSettings,
    pub server: SocketAddr,
    pub capture_interface: String,
    pub layers: Vec<Layer>,
    pub tcp_retransmissions_client: Option<u64>,
    pub tcp_retransmissions_server: Option<u64>,
    pub ping_lost: u64,
    pub udp_lost: u64,
    /// Passive samples answered by the client itself (its own time to answer).
    pub passive_local_samples: u64,
    pub capture_drops: u64,
    pub sampler: Vec<Period>,
    pub explanations: Vec<String>,
    /// Errors of layers that could not run (the others are still reported).
    pub errors: Vec<String>,
    /// Which repeat of the comparison (0 for the first; absent in older results).
    #[serde(default)]
    pub trial: u32,
    /// tcp_rr's transactions taken apart (`rr --anatomy`; absent in older results).
    #[serde(default)]
    pub anatomy: Option<CompareAnatomy>,
    /// Every layer on one time axis (absent in older results).
    #[serde(default)]
    pub timeline: Option<CompareTimeline>,
}

/// Every layer's median and P99 per time bin, on one axis from the comparison's start.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompareTimeline {
    pub bin_s: f64,
    pub layers: Vec<LayerTimeline>,
}

/// One layer's bins (those with samples).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LayerTimeline {
    pub name: String,
    pub points: Vec<crate::stats::timeline::TimePoint>,
}

/// What compare keeps of tcp_rr's anatomy: what a transaction at each percentile is
/// made of, what touched the transactions, and the slowest ones' causes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompareAnatomy {
    pub stamped: u64,
    pub at_percentiles: Vec<crate::probe::anatomy::Composition>,
    pub events: crate::probe::anatomy::EventCounts,
    pub tail: Option<crate::probe::anatomy::Tail>,
}

/// Serde's defaults for settings written before `--trials` existed.
fn one() -> u32 {
    1
}

fn one_u64() -> u64 {
    1
}
