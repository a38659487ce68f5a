//! What one stream measured, and the sum of every stream's.

use super::one_way::Book;
use crate::kernel::cpu::CpuTracker;
use crate::kernel::tcp_info::TcpInfo;
use crate::probe::anatomy::Recorder;
use crate::stats::LatencyHistogram;
use std::io;
use std::net::SocketAddr;

/// What one stream measured; merged, what the run measured.
#[derive(Default)]
pub(super) struct StreamOutcome {
    pub(super) hist: LatencyHistogram,
    /// Transactions already added to the shared progress count.
    pub(super) published: u64,
    pub(super) pacing: LatencyHistogram,
    pub(super) connect: LatencyHistogram,
    pub(super) intended: LatencyHistogram,
    pub(super) transactions: u64,
    pub(super) lost: u64,
    /// UDP_RR: requests lost after the last answered one (no later response says
    /// which way they were lost).
    pub(super) lost_tail: u64,
    pub(super) late_replies: u64,
    /// UDP_RR: datagrams that answer no request given up on (the wrong size, a
    /// duplicate, or later than [`GAVE_UP_MAX`](super::sequence::GAVE_UP_MAX) timeouts).
    pub(super) stray_replies: u64,
    pub(super) unanswered: u64,
    pub(super) late_sends: u64,
    pub(super) retrans: u64,
    /// The kernel's view of the stream's socket at its end (TCP_CRR: its last
    /// connection's); merged, every stream's.
    pub(super) info: Vec<TcpInfo>,
    pub(super) cpus: CpuTracker,
    pub(super) cpu_ns: u64,
    pub(super) local_addr: Option<SocketAddr>,
    pub(super) error: Option<StreamError>,
    /// `--anatomy`: the stream's transactions split into components.
    pub(super) anatomy: Option<Recorder>,
    /// Open-loop UDP_RR: the one-way delays, and the transactions still waiting for
    /// the server's last part (in its report) to be settled.
    pub(super) one_way: Option<Book>,
    /// With `keep_series`: each transaction as (ns from the run's start to its end,
    /// round trip ns), at most [`SERIES_MAX`].
    pub(super) series: Vec<(u64, u64)>,
    /// When the stream finished its last transaction (merged: the last stream's), so
    /// a counted run's elapsed time is not rounded up to the watchdog's tick.
    pub(super) ended: Option<std::time::Instant>,
}

/// Transactions a stream keeps with `keep_series` (16 bytes each: 16 MiB).
pub(super) const SERIES_MAX: usize = 1_000_000;

impl StreamOutcome {
    /// Add another stream's outcome: histograms merged, counts summed, each stream's
    /// `tcp_info` kept, the first error and local address kept.
    pub(super) fn merge(&mut self, o: StreamOutcome) {
        self.ended = self.ended.max(o.ended);
        self.hist.merge(&o.hist);
        self.connect.merge(&o.connect);
        self.intended.merge(&o.intended);
        self.pacing.merge(&o.pacing);
        self.cpus.merge(&o.cpus);
        self.published += o.published;
        self.transactions += o.transactions;
        self.lost += o.lost;
        self.lost_tail += o.lost_tail;
        self.late_replies += o.late_replies;
        self.stray_replies += o.stray_replies;
        self.unanswered += o.unanswered;
        self.late_sends += o.late_sends;
        self.retrans += o.retrans;
        self.cpu_ns += o.cpu_ns;
        self.info.extend(o.info);
        self.error = self.error.take().or(o.error);
        self.local_addr = self.local_addr.or(o.local_addr);
        self.one_way = self.one_way.take().or(o.one_way);
        if let Some(a) = &o.anatomy {
            self.anatomy.get_or_insert_with(Default::default).merge(a);
        }
        self.series.extend(o.series);
    }
}

/// Why a stream stopped measuring before the run's end (the result's `error`, with
/// the numbers measured until then).
#[derive(Debug, thiserror::Error)]
pub(super) enum StreamError {
    #[error("no data connection")]
    NoConnection,
    #[error("--anatomy needs the kernel's software timestamps (SO_TIMESTAMPING)")]
    NoStamps(#[source] io::Error),
    #[error("SO_TIMESTAMPING on a new connection")]
    NoStampsOnConnection(#[source] io::Error),
    #[error("data socket")]
    DataSocket(#[source] io::Error),
    #[error("UDP data socket")]
    UdpSocket(#[source] io::Error),
    #[error("connecting")]
    Connect(#[source] io::Error),
    #[error(
        "connecting: out of local ports (connections in TIME_WAIT; lower the rate or the duration)"
    )]
    OutOfPorts(#[source] io::Error),
    #[error("sending a request")]
    Send(#[source] io::Error),
    #[error("reading a response")]
    Read(#[source] io::Error),
    #[error("receiving a response (is the server still running?)")]
    Receive(#[source] io::Error),
    #[error("the server closed the data connection mid-test")]
    ServerClosed,
    #[error("the server closed the connection before responding")]
    ClosedBeforeResponse,
    #[error("the data connection broke mid-test")]
    Broke,
    #[error("a transaction was still unanswered {} s after the end of the run", .0.as_secs())]
    Unanswered(std::time::Duration),
    #[error("a measuring thread panicked")]
    Panicked,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Witness: arithmetic on two made-up streams' outcomes.
    #[test]
    fn merged_outcomes_add_every_stream_and_keep_the_first_error() {
        let mut a = StreamOutcome {
            transactions: 3,
            lost: 1,
            retrans: 2,
            cpu_ns: 100,
            ..Default::default()
        };
        for ns in [10_000, 20_000, 30_000] {
            a.hist.record_ns(ns);
        }
        let mut b = StreamOutcome {
            transactions: 2,
            late_replies: 1,
            error: Some(StreamError::ServerClosed),
            local_addr: Some("10.0.0.1:5".parse().unwrap()),
            ..Default::default()
        };
        b.hist.record_ns(40_000);
        b.hist.record_ns(50_000);
        let c = StreamOutcome {
            error: Some(StreamError::Broke),
            ..Default::default()
        };
        let mut t = StreamOutcome::default();
        for o in [a, b, c] {
            t.merge(o);
        }
        assert_eq!(
            (t.transactions, t.lost, t.late_replies, t.retrans, t.cpu_ns),
            (5, 1, 1, 2, 100)
        );
        assert_eq!(t.hist.count(), 5);
        assert_eq!(t.hist.min_ns(), Some(10_000));
        assert_eq!(t.hist.max_ns(), Some(50_000));
        assert!(
            matches!(t.error, Some(StreamError::ServerClosed)),
            "the first error"
        );
        assert_eq!(t.local_addr, Some("10.0.0.1:5".parse().unwrap()));
    }
}
