//! The records of seed 004's interval sweep: one point per tool and interval.

use serde::{Deserialize, Serialize};

/// One tool at one interval (µs).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Point {
    pub interval_us: f64,
    /// `icmp` or `tcp_rr`.
    pub tool: String,
    /// Which repeat of this tool and interval (0 for the first; absent in older results).
    #[serde(default)]
    pub trial: u32,
    pub samples: u64,
    pub min_us: Option<f64>,
    pub mean_us: Option<f64>,
    pub p50_us: Option<f64>,
    pub p90_us: Option<f64>,
    pub lost: u64,
    /// The file (in the results directory) holding the samples.
    pub file: Option<String>,
    pub error: Option<String>,
}
