//! The records of seed 000's request/response interval experiment: one point per wait.

use crate::passive::sampler::Period;
use serde::{Deserialize, Serialize};

/// One wait's results (µs unless named otherwise).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Point {
    /// The wait between a response and the next request (the TCP_RR run's `-w`), ms.
    pub wait_ms: f64,
    /// Parallel TCP_RR streams, their starts spread over the wait.
    pub streams: u32,
    /// Which repeat of this wait (0 for the first; absent in older results).
    #[serde(default)]
    pub trial: u32,
    /// Transactions the TCP_RR run completed (0 if it failed).
    pub transactions: u64,
    /// The shortest TCP_RR round trip; None if the run failed or had none.
    pub min_us: Option<f64>,
    /// The mean TCP_RR round trip; None as for `min_us`.
    pub mean_us: Option<f64>,
    /// The median TCP_RR round trip; None as for `min_us`.
    pub p50_us: Option<f64>,
    /// The 90th percentile of the TCP_RR round trips; None as for `min_us`.
    pub p90_us: Option<f64>,
    /// The 99th percentile of the TCP_RR round trips; None as for `min_us`.
    pub p99_us: Option<f64>,
    /// Medians of the srtt samples (every 10 ms) of the client's and the server's
    /// data sockets.
    pub client_srtt_us: Option<f64>,
    /// The server's: the median of its data sockets' srtt samples; None without any.
    pub server_srtt_us: Option<f64>,
    /// The sampled metric of each end's VM over the whole point: data leaving that
    /// host, ACKs coming back (buckets, interpolated median, exact median).
    pub client_metric: Option<Period>,
    /// The server's VM: the same, from the capture in the server's namespace (its
    /// period with the most samples); None if that capture failed or gave none.
    pub server_metric: Option<Period>,
    /// Segments the client's and the server's data sockets retransmitted, together.
    pub retransmissions: u64,
    /// Frames the two captures' kernel rings dropped for want of space, together.
    pub capture_drops: u64,
    /// Files (in the results directory) holding this point's histograms.
    pub files: Vec<String>,
    /// What failed in this point (run, captures, srtt, files), joined with "; ";
    /// None: nothing did.
    pub error: Option<String>,
}

impl super::Trial for Point {
    type Key = (u64, u32, u32);

    fn key(&self) -> Self::Key {
        (self.wait_ms.to_bits(), self.streams, self.trial)
    }

    fn trial(&self) -> String {
        format!(
            "wait {} ms, {} stream(s), trial {}",
            self.wait_ms, self.streams, self.trial
        )
    }
}
