//! What `rttlab tune … --json` prints: the state of each knob as the kernel holds it.

use serde::Serialize;
use std::net::SocketAddr;

/// A new connection's RTO as the kernel reports it (`--probe`).
#[derive(Serialize)]
pub struct Probe {
    pub addr: SocketAddr,
    pub rto_us: u32,
    pub srtt_us: u32,
    /// The kernel's HZ, when it can be told from rto_min and this RTO.
    pub hz: Option<u32>,
}

/// `tune rto-min show --json`.
#[derive(Serialize)]
pub struct RtoMinState<'a> {
    pub netns: Option<&'a str>,
    pub sysctl: &'static str,
    /// None on kernels without the sysctl (before 6.11).
    pub sysctl_us: Option<u64>,
    pub routes: Vec<RouteRtoMin>,
    pub probe: Option<Probe>,
}

/// A route that carries an rto_min metric.
#[derive(Serialize)]
pub struct RouteRtoMin {
    pub prefix: String,
    pub dev: Option<String>,
    pub rto_min_ms: u32,
    /// Only a locked metric is used by TCP (tcp_rto_min(): dst_metric_locked).
    pub locked: bool,
}

/// `tune thin show --json`.
#[derive(Serialize)]
pub struct ThinState<'a> {
    pub netns: Option<&'a str>,
    pub sysctl: &'static str,
    pub on: bool,
}

/// `tune syn-rto list --json`.
#[derive(Serialize)]
pub struct SynRtoState<'a> {
    pub attached: bool,
    pub pin_dir: &'a std::path::Path,
    /// The kernel's HZ (measured only when attached).
    pub hz: Option<u32>,
    pub prefixes: Vec<SynRtoPrefix>,
}

/// One prefix of the sock_ops program's trie; 0 leaves the kernel's value.
#[derive(Serialize)]
pub struct SynRtoPrefix {
    pub prefix: String,
    pub syn_rto_jiffies: u32,
    pub syn_rto_ms: u64,
    pub rto_min_us: u32,
    pub delack_max_us: u32,
}
