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
    /// Which case: one of [`CASES`].
    pub case: String,
    /// Which repeat of this case (0 for the first; absent in older results).
    #[serde(default)]
    pub trial: u32,
    /// Connections made and timed (connect() → it returned).
    pub connections: u32,
    /// Connections that failed (refused, or not made within 10 s).
    pub failed: u32,
    /// The fastest set-up; `None` when no connection was made.
    pub min_ms: Option<f64>,
    /// The median set-up; `None` when no connection was made.
    pub p50_ms: Option<f64>,
    /// The 90th percentile of the set-up times; `None` when no connection was made.
    pub p90_ms: Option<f64>,
    /// The slowest set-up; `None` when no connection was made.
    pub max_ms: Option<f64>,
    /// SYNs a sent again during the case (TcpExt.TCPSynRetrans in a).
    pub syn_retransmits: u64,
    /// What the kernel's rule predicts for the median: the path's RTT, plus the
    /// initial RTO in whole jiffies when the first SYN is lost.
    pub predicted_ms: f64,
    /// The set-up times' histogram, a CSV file in the run's directory (`caseK.hist.csv`,
    /// `caseK-tN.hist.csv` for trial N > 0); `None` when the case failed.
    pub file: Option<String>,
    /// Why the case failed (the error and its causes); `None` when it ran.
    pub error: Option<String>,
}

impl super::Trial for Case {
    type Key = (String, u32);

    fn key(&self) -> Self::Key {
        (self.case.clone(), self.trial)
    }

    fn trial(&self) -> String {
        format!("case {}, trial {}", self.case, self.trial)
    }
}
