//! What `rttlab tune … --json` prints: the state of each knob as the kernel holds it.

use serde::Serialize;
use std::net::SocketAddr;

/// A new connection's RTO as the kernel reports it (`--probe`).
#[derive(Serialize)]
pub struct Probe {
    /// The address connected to: the first one `--probe HOST:PORT` resolves to.
    pub addr: SocketAddr,
    /// `tcpi_rto` of the new connection: its retransmission timeout, µs.
    pub rto_us: u32,
    /// `tcpi_rtt` of the new connection: its smoothed RTT (from the handshake), µs.
    pub srtt_us: u32,
    /// The kernel's HZ, when it can be told from rto_min and this RTO.
    pub hz: Option<u32>,
}

/// `tune rto-min show --json`.
#[derive(Serialize)]
pub struct RtoMinState<'a> {
    /// The namespace looked at (`--netns`); `None` for rttlab's own.
    pub netns: Option<&'a str>,
    /// The sysctl's name, `net.ipv4.tcp_rto_min_us`.
    pub sysctl: &'static str,
    /// None on kernels without the sysctl (before 6.11).
    pub sysctl_us: Option<u64>,
    /// The main table's routes that carry an rto_min metric.
    pub routes: Vec<RouteRtoMin>,
    /// What a new connection to `--probe` got; `None` without `--probe`.
    pub probe: Option<Probe>,
}

/// A route that carries an rto_min metric.
#[derive(Serialize)]
pub struct RouteRtoMin {
    /// The route's destination, `ADDR/LEN`.
    pub prefix: String,
    /// Its output device; `None` when the route names none.
    pub dev: Option<String>,
    /// The route's rto_min metric (`RTAX_RTO_MIN`), ms.
    pub rto_min_ms: u32,
    /// Only a locked metric is used by TCP (tcp_rto_min(): dst_metric_locked).
    pub locked: bool,
}

/// `tune thin show --json`.
#[derive(Serialize)]
pub struct ThinState<'a> {
    /// The namespace looked at (`--netns`); `None` for rttlab's own.
    pub netns: Option<&'a str>,
    /// The sysctl's name, `net.ipv4.tcp_thin_linear_timeouts`.
    pub sysctl: &'static str,
    /// Whether it reads 1: thin streams then back off linearly for 6 RTOs.
    pub on: bool,
}

/// `tune syn-rto list --json`.
#[derive(Serialize)]
pub struct SynRtoState<'a> {
    /// Whether the sock_ops program is pinned (and so attached) under `pin_dir`.
    pub attached: bool,
    /// Where the program and its maps are pinned (`--pin-dir`).
    pub pin_dir: &'a std::path::Path,
    /// The kernel's HZ (measured only when attached).
    pub hz: Option<u32>,
    /// The trie's prefixes and their settings; empty when not attached.
    pub prefixes: Vec<SynRtoPrefix>,
}

/// One prefix of the sock_ops program's trie; 0 leaves the kernel's value.
#[derive(Serialize)]
pub struct SynRtoPrefix {
    /// The destination prefix, `ADDR/LEN`.
    pub prefix: String,
    /// The SYN's initial RTO, jiffies: the program's reply to BPF_SOCK_OPS_TIMEOUT_INIT.
    pub syn_rto_jiffies: u32,
    /// The same in ms, by the measured HZ (rounded down).
    pub syn_rto_ms: u64,
    /// rto_min for connections to the prefix, µs (TCP_BPF_RTO_MIN).
    pub rto_min_us: u32,
    /// The delayed-ACK ceiling for connections to the prefix, µs (TCP_BPF_DELACK_MAX).
    pub delack_max_us: u32,
}
