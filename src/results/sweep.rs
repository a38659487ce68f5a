//! The records of seed 004's interval sweep: one point per tool and interval.

use serde::{Deserialize, Serialize};

/// One tool at one interval (µs).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Point {
    /// The interval between transactions: TCP_RR's `-w`, or the ping interval with
    /// one request in flight at a time.
    pub interval_us: f64,
    /// `icmp` or `tcp_rr`.
    pub tool: String,
    /// Which repeat of this tool and interval (0 for the first; absent in older results).
    #[serde(default)]
    pub trial: u32,
    /// Round trips measured (0 if the run failed).
    pub samples: u64,
    /// The shortest round trip; None if the run failed or measured none.
    pub min_us: Option<f64>,
    /// The mean round trip; None as for `min_us`.
    pub mean_us: Option<f64>,
    /// The median round trip; None as for `min_us`.
    pub p50_us: Option<f64>,
    /// The 90th percentile of the round trips; None as for `min_us`.
    pub p90_us: Option<f64>,
    /// `icmp`: echo requests without a reply; always 0 for `tcp_rr`.
    pub lost: u64,
    /// The file (in the results directory) holding the samples.
    pub file: Option<String>,
    /// Why the run or writing its file failed; None: neither did.
    pub error: Option<String>,
}

impl super::Trial for Point {
    type Key = (u64, String, u32);

    fn key(&self) -> Self::Key {
        (self.interval_us.to_bits(), self.tool.clone(), self.trial)
    }

    fn trial(&self) -> String {
        format!(
            "interval {} µs, {}, trial {}",
            self.interval_us, self.tool, self.trial
        )
    }
}
