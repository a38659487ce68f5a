//! Latency statistics: every sample into an HDR histogram (bounded memory, any
//! percentile) plus exact min/max/mean/stddev, and the renderings people read.
//!
//! Percentile names follow netperf's output selectors (`P50_LATENCY`, …), so the
//! seeds' command lines (seed 000, 001, 004) translate one to one.

pub mod confidence;
mod hdr_log;
mod histogram;
mod loglinear;
mod median_ci;
mod summary;
pub mod timeline;
pub mod units;

pub use hdr_log::{HdrLogWriter, IntervalRecorder};
pub use histogram::{resolves, samples_to_resolve, LatencyHistogram, MAX_TRACKABLE_NS};
pub use loglinear::{LogLinear, LogLinearRow};
pub use median_ci::{MedianCi, LEVEL as CI_LEVEL};
pub use summary::{Percentile, Summary, DEFAULT_PERCENTILES};
