//! The records of seed 003's SYN-RTO experiment: one case per drop and override.

use serde::{Deserialize, Serialize};

/// The three cases, in the order they run.
pub const CASES: [&str; 3] = [
    "no drop",
    "first SYN dropped",
    "first SYN dropped, override",
];

/// One case's connection set-up times (ms).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Case {
    pub case: String,
    /// Which repeat of this case (0 for the first; absent in older results).
    #[serde(default)]
    pub trial: u32,
    pub connections: u32,
    pub failed: u32,
    pub min_ms: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p90_ms: Option<f64>,
    pub max_ms: Option<f64>,
    /// SYNs a sent again during the case (TcpExt.TCPSynRetrans in a).
    pub syn_retransmits: u64,
    /// What the kernel's rule predicts for the median: the path's RTT, plus the
    /// initial RTO in whole jiffies when the first SYN is lost.
    pub predicted_ms: f64,
    pub file: Option<String>,
    pub error: Option<String>,
}
