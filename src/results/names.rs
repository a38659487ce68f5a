//! Each experiment's name, in one place: `run.json` records it, `rttlab report`
//! dispatches on it, the experiment's runner writes it and the command line names its
//! default results directory after it.

/// Seed 001: TCP's idle time after a blackout.
pub const BLACKOUT: &str = "blackout";
/// Every layer side by side.
pub const COMPARE: &str = "compare";
/// Seed 000: srtt and TCP_RR against the wait between transactions.
pub const RESREQ_INTERVAL: &str = "resreq-interval";
/// Seed 004: latency against the interval.
pub const INTERVAL_SWEEP: &str = "interval-sweep";
/// Seed 001's appendix: the SYN's initial RTO.
pub const SYN_RTO: &str = "syn-rto";
/// Seeds 002/003: passive against active.
pub const PASSIVE_VS_ACTIVE: &str = "passive-vs-active";
/// `rttlab explain --out`: a live service's transactions, window by window.
pub const EXPLAIN: &str = "explain";
