//! The records of seed 000's request/response interval experiment: one point per wait.

use crate::passive::sampler::Period;
use serde::{Deserialize, Serialize};

/// One wait's results (µs unless named otherwise).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Point {
    pub wait_ms: f64,
    pub streams: u32,
    /// Which repeat of this wait (0 for the first; absent in older results).
    #[serde(default)]
    pub trial: u32,
    pub transactions: u64,
    pub min_us: Option<f64>,
    pub mean_us: Option<f64>,
    pub p50_us: Option<f64>,
    pub p90_us: Option<f64>,
    pub p99_us: Option<f64>,
    /// Medians of the srtt samples (every 10 ms) of the client's and the server's
    /// data sockets.
    pub client_srtt_us: Option<f64>,
    pub server_srtt_us: Option<f64>,
    /// The sampled metric of each end's VM over the whole point: data leaving that
    /// host, ACKs coming back (buckets, interpolated median, exact median).
    pub client_metric: Option<Period>,
    pub server_metric: Option<Period>,
    pub retransmissions: u64,
    pub capture_drops: u64,
    /// Files (in the results directory) holding this point's histograms.
    pub files: Vec<String>,
    pub error: Option<String>,
}
