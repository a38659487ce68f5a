//! What a run's anatomy reports: each component's summary, the events, the tail and
//! its causes, the one-way delays ([`AnatomyResult`]).

use crate::stats::Summary;
use serde::{Deserialize, Serialize};

/// UDP_RR's one-way delays (irtt's view): each direction's delay, its variation
/// between consecutive transactions (IPDV, RFC 3393, as a magnitude) and its losses.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OneWay {
    /// "same": both ends read one clock (one kernel), the delays are exact;
    /// "estimated": the offset between the clocks is estimated (see `offset_us`);
    /// "separate": two hosts' clocks taken as they are (open loop, as irtt), the
    /// delays only as good as their sync.
    pub clock: String,
    /// Server clock minus client clock, as used.
    pub offset_us: f64,
    /// The request's delay, client TX stamp → server RX stamp, after the offset.
    pub request: Summary,
    /// The response's delay, server TX stamp → client RX stamp, after the offset.
    pub response: Summary,
    /// The server's processing: its RX stamp of the request → its TX stamp of the
    /// response, on its own clock (no sync needed).
    pub server_processing: Summary,
    /// irtt's RTT: the round trip less the server's processing, the request's and the
    /// response's delays added (the clocks' offset cancels).
    pub rtt_less_server: Summary,
    /// How much the request's delay changed from one transaction to the next (only
    /// consecutive numbers are compared).
    pub ipdv_request: Summary,
    /// The same of the response's delay.
    pub ipdv_response: Summary,
    /// Delays below zero after the offset (left out of the statistics).
    pub negative: u64,
    /// Requests that never reached the server (or that it dropped on purpose).
    pub request_lost: u64,
    /// Responses that never came back (a late one came back: it is not lost).
    pub response_lost: u64,
    /// Requests lost after the last response: which way is not known.
    pub unattributed_lost: u64,
}

/// What made the slowest share of transactions slow.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tail {
    /// ⌈stamped × share⌉: the slowest transactions by round trip.
    pub transactions: u64,
    /// The share, % (`--tail`, 1 unless told; records before it: 1).
    #[serde(default = "one_pct")]
    pub share_pct: f64,
    /// The fastest of them: the tail starts here.
    pub from_rtt_us: f64,
    /// The round trip's percentile 100 − share of the same transactions, from their
    /// histogram (3 significant digits): the tail starts at or above it, within that
    /// precision, so the two side by side show a contradiction (none in records
    /// before it).
    #[serde(default)]
    pub rtt_percentile_us: Option<f64>,
    /// The tail is exactly the run's slowest share (false when that share exceeds
    /// the transactions a run keeps, [`slowest::KEEP_MAX`](super::slowest::KEEP_MAX), and in records before it,
    /// whose tail could miss transactions).
    #[serde(default)]
    pub exact: bool,
    /// By share of the tail, largest first.
    pub causes: Vec<Cause>,
}

fn one_pct() -> f64 {
    1.0
}

/// One component as the cause of slow transactions, with the event that touched them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cause {
    /// The component furthest above its median in these transactions: "client_send",
    /// "network", "server_recv", "server_app" or "client_recv".
    pub component: String,
    /// "rto", "tlp" (a retransmission by that timer), "recovery" (by loss recovery),
    /// "delayed_ack" or "migration" (of the component's host), or none: the component
    /// was slow with nothing the kernel reported.
    pub event: Option<String>,
    /// Of the tail's transactions, the share this component slowed most.
    pub share_pct: f64,
    /// How far above its median it was in them, on average.
    pub mean_added_us: f64,
}

/// One value per component, in the order a transaction passes through them (`rtt`,
/// their sum, first).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Components<T> {
    /// The round trip the components add up to (CLOCK_REALTIME, send() → recv()).
    pub rtt: T,
    /// The client's `send()` → the request's last byte left its stack (SND stamp).
    pub client_send: T,
    /// Client TX → client RX of the response, less the server's two parts: both ways
    /// across the network.
    pub network: T,
    /// The request arrived at the server (RX stamp) → the server's `recv()` returned.
    pub server_recv: T,
    /// The server's `recv()` returned → the response left its stack (SND stamp).
    pub server_app: T,
    /// The response arrived at the client (RX stamp) → the client's `recv()` returned.
    pub client_recv: T,
}

impl<T> Components<T> {
    /// (name, value) of the five components, in order, without `rtt`.
    pub fn parts(&self) -> [(&'static str, &T); 5] {
        [
            ("client_send", &self.client_send),
            ("network", &self.network),
            ("server_recv", &self.server_recv),
            ("server_app", &self.server_app),
            ("client_recv", &self.client_recv),
        ]
    }
}

/// `rr --anatomy`'s result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AnatomyResult {
    /// Transactions split into components.
    pub stamped: u64,
    /// Transactions without every stamp (the first of a connection usually).
    pub unstamped: u64,
    /// Transactions whose stamps contradict each other.
    pub inconsistent: u64,
    /// What touched the stamped transactions.
    pub events: EventCounts,
    /// Each component's statistics over the stamped transactions.
    pub components: Components<Summary>,
    /// What a transaction at each reported percentile is made of.
    pub at_percentiles: Vec<Composition>,
    /// TCP: the kernel's request → ACK time, beside the components (not one of them).
    pub tcp_ack: Option<Summary>,
    /// TCP_CRR: the handshake before each request (its transaction is this plus `rtt`).
    pub connect: Option<Summary>,
    /// The slowest transactions' causes (none before the first joined transaction).
    pub tail: Option<Tail>,
    /// UDP_RR: one-way delays, jitter and loss by direction.
    pub one_way: Option<OneWay>,
}

/// What a transaction at one percentile of the round trip is made of: the mean of the
/// transactions whose round trip falls in the same band (≤ 1.1 % wide) as that
/// percentile's, so the parts add up to `parts_us.rtt` (as each transaction's do) where
/// the components' own percentiles would not.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Composition {
    /// The round trip's percentile, e.g. 99.9 (one of `--percentiles`).
    pub percentile: f64,
    /// Transactions in the band.
    pub transactions: u64,
    /// The band's mean round trip and mean components, µs.
    pub parts_us: Components<f64>,
}

/// How many joined transactions each event touched, and the retransmissions in them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventCounts {
    /// Transactions whose request or response was retransmitted.
    pub retransmitted: u64,
    /// Segments the client and the server sent again, summed over transactions.
    pub request_retransmissions: u64,
    /// The server's: segments of responses sent again, summed over transactions.
    pub response_retransmissions: u64,
    /// Those retransmissions by kind: tail loss probes, RTOs and loss recovery.
    pub tlp: u64,
    /// Retransmissions the RTO timer sent.
    pub rto: u64,
    /// Retransmissions loss recovery sent (messages longer than a segment); 0 when
    /// reading records that lack it.
    #[serde(default)]
    pub recovery: u64,
    /// Transactions the server's delayed-ACK timer touched (see `Events::delayed_ack`).
    pub delayed_ack: u64,
    /// Transactions whose client `recv()` returned on another CPU than `send()` ran on.
    pub client_migrated: u64,
    /// Transactions whose request the server read on another CPU than the one before.
    pub server_migrated: u64,
}
