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
    /// How long every layer runs (`--duration`); `duration_s` in the JSON, seconds.
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
    #[serde(flatten)]
    pub repeats: crate::results::Repeats,
    /// The secret shared with the server (never written to a results file).
    #[serde(skip)]
    pub secret: Option<Vec<u8>>,
}

impl CompareSettings {
    /// The lab a run without `server` builds.
    pub fn lab(&self) -> super::LabSettings {
        super::LabSettings {
            rtt: self.lab_rtt,
            poll: self.lab_poll,
        }
    }
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
            repeats: super::Repeats::default(),
            secret: None,
        }
    }
}

/// A layer's P50, P90 and P99 in µs (`None` without samples).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LayerPercentiles {
    /// The median, µs.
    pub p50: Option<f64>,
    /// The 90th percentile, µs.
    pub p90: Option<f64>,
    /// The 99th percentile, µs.
    pub p99: Option<f64>,
}

/// One layer's numbers, µs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Layer {
    /// The layer: `icmp`, `tcp_rr`, `udp_rr`, `tcp_info_client`, `tcp_info_server`,
    /// `passive_ts`, `passive_seq` or `sampled_metric`.
    pub name: String,
    /// What a sample is.
    pub what: String,
    /// Samples behind the numbers (`sampled_metric`: those of its busiest period).
    pub samples: u64,
    /// The smallest sample, µs; `None` without samples, and for `sampled_metric`.
    pub min_us: Option<f64>,
    /// The largest sample, µs; `None` without samples, and for `sampled_metric`.
    pub max_us: Option<f64>,
    /// The mean, µs; `None` without samples, and for `sampled_metric`.
    pub mean_us: Option<f64>,
    /// P50, P90 and P99, µs (`sampled_metric`: interpolated within its buckets, as the
    /// metric does).
    pub percentiles_us: LayerPercentiles,
    /// The samples behind the numbers (written to `<name>.hist.csv` with `--out`).
    #[serde(skip)]
    pub histogram: Option<LatencyHistogram>,
    /// Why a layer has no samples (its probe failed, the capture could not tell the
    /// server's answers, …); `None` for a layer with samples, and in older results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why_empty: Option<String>,
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
                p50: us(h.resolved_quantile_ns(0.5)),
                p90: us(h.resolved_quantile_ns(0.9)),
                p99: us(h.resolved_quantile_ns(0.99)),
            },
            histogram: Some(h.clone()),
            why_empty: None,
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
    /// The settings the comparison ran with (the secret left out).
    pub settings: CompareSettings,
    /// The address of the `rttlab serve` probed: `--host`, or the lab's server.
    pub server: SocketAddr,
    /// The interface the passive layers captured on: `--interface`, the lab's `eth0`, or
    /// the one the kernel routes the server's address through (`none` when it has no
    /// route, or the server is this host's own address: nothing is captured then).
    pub capture_interface: String,
    /// Every layer's row, all eight each time, in the order of [`Layer::name`]; a layer
    /// without samples has an empty row, its reason in [`Layer::why_empty`], and an
    /// entry in `errors`.
    pub layers: Vec<Layer>,
    /// Segments the client's TCP_RR data sockets retransmitted; `None` when tcp_rr
    /// failed.
    pub tcp_retransmissions_client: Option<u64>,
    /// Segments the server's TCP_RR data sockets retransmitted, as the server reported;
    /// `None` when tcp_rr failed or the server sent no report.
    pub tcp_retransmissions_server: Option<u64>,
    /// ICMP echo requests without a reply within the timeout (a late reply counts as lost,
    /// as with ping -W); 0 when icmp failed.
    pub ping_lost: u64,
    /// UDP_RR requests whose response never came while the client ran (a late one is not
    /// lost); 0 when udp_rr failed.
    pub udp_lost: u64,
    /// Passive samples answered by the client itself (its own time to answer).
    pub passive_local_samples: u64,
    /// Frames the kernel dropped from the capture's ring for want of space.
    pub capture_drops: u64,
    /// The sampled metric's periods; the one with the most samples is the `sampled_metric`
    /// row.
    pub sampler: Vec<Period>,
    /// The gaps between layers the numbers support, each a sentence citing them.
    pub explanations: Vec<String>,
    /// Every layer without samples, and why (the others are still reported).
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

/// Every layer's median, P99 (where a bin resolves it) and largest per time bin, on one axis from the comparison's start.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompareTimeline {
    /// The width of a bin, seconds: about 60 bins over the run, each at least five
    /// intervals and 10 ms wide.
    pub bin_s: f64,
    /// The layers that have samples in some bin (`sampled_metric` never has a timeline).
    pub layers: Vec<LayerTimeline>,
}

/// One layer's bins (those with samples).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LayerTimeline {
    /// The layer, named as in [`Layer::name`].
    pub name: String,
    /// Its bins with samples: each one's middle (seconds from the start), sample count,
    /// P50 and P99 (µs).
    pub points: Vec<crate::stats::timeline::TimePoint>,
}

/// What compare keeps of tcp_rr's anatomy: what a transaction at each percentile is
/// made of, what touched the transactions, and the slowest ones' causes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompareAnatomy {
    /// tcp_rr transactions whose stamps split them into components.
    pub stamped: u64,
    /// What a transaction at each reported percentile is made of.
    pub at_percentiles: Vec<crate::probe::anatomy::Composition>,
    /// What touched the stamped transactions: retransmissions by kind, delayed ACKs, CPU
    /// migrations.
    pub events: crate::probe::anatomy::EventCounts,
    /// The slowest transactions' causes; `None` when no transaction was taken apart.
    pub tail: Option<crate::probe::anatomy::Tail>,
}

impl super::Trial for CompareResult {
    type Key = u32;

    fn key(&self) -> Self::Key {
        self.trial
    }

    fn trial(&self) -> String {
        format!("trial {}", self.trial)
    }
}
