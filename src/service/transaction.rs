//! One transaction of a watched server, as its kernel timed it: the request arriving,
//! waiting to be read, the application thinking, writing its response, and the
//! network and client until the response's last byte is ACKed.

use crate::kernel::explain_bpf::{RawTxn, TXN_ACK_ON_DATA, TXN_PIPELINED, TXN_UNACKED};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// A part of a transaction, in the order they happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The request's first data segment to its last, at TCP: how the client and the
    /// network delivered it.
    Arrival,
    /// Its last segment to the application's last read of it: the application's wait
    /// (busy, not scheduled, or reading something else).
    Wait,
    /// That read to the response's first write: the application's own work.
    Think,
    /// The response's first write to its last returning: the application writing it
    /// (and TCP taking it, blocked when the send buffer is full).
    Write,
    /// The last write to the ACK of the response's last byte: the network and the
    /// client (its receiving, its delayed ACK).
    Network,
}

/// Every part, in order.
pub const PARTS: [Part; 5] = [
    Part::Arrival,
    Part::Wait,
    Part::Think,
    Part::Write,
    Part::Network,
];

impl Part {
    /// Its name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Self::Arrival => "arrival",
            Self::Wait => "wait",
            Self::Think => "think",
            Self::Write => "write",
            Self::Network => "network",
        }
    }

    /// What it is, in a few words.
    pub fn what(self) -> &'static str {
        match self {
            Self::Arrival => "the request arriving",
            Self::Wait => "waiting to be read",
            Self::Think => "the application's work",
            Self::Write => "writing the response",
            Self::Network => "network and client to the last ACK",
        }
    }
}

/// One transaction: what the server's kernel saw of it (times in ns).
#[derive(Clone, Debug, PartialEq)]
pub struct Transaction {
    /// The connection (its socket's cookie).
    pub connection: u64,
    /// The server's port (one of those watched).
    pub port: u16,
    /// The client's address (`None` when the kernel had none to give: the record of
    /// a socket already unhashed).
    pub client: Option<SocketAddr>,
    /// When the request's first data segment reached TCP (CLOCK_MONOTONIC).
    pub start_ns: u64,
    /// Request bytes and segments; response bytes.
    pub request_bytes: u32,
    /// Data segments of the request.
    pub request_segments: u32,
    /// Response bytes written.
    pub response_bytes: u32,
    /// The request's first segment to the response's last write returning: the
    /// server's response time.
    pub response_ns: u64,
    /// Each part in [`PARTS`]' order; `None` where the kernel did not see its end (no
    /// read seen: wait and think are one, counted as think; no ACK: network).
    pub parts: [Option<u64>; 5],
    /// The connection's smoothed RTT at the end, µs.
    pub srtt_us: u32,
    /// Segments retransmitted while it ran.
    pub retransmissions: u32,
    /// The response began with request bytes unread: the client pipelines.
    pub pipelined: bool,
    /// The next request came before the response was ACKed.
    pub unacked: bool,
    /// The ACK of the response rode on the client's next request: the network part is
    /// the client's pause between them (or its delayed-ACK timer's, whichever first).
    pub ack_on_request: bool,
    /// Its response's retransmissions by cause.
    pub retransmitted_by: Causes,
}

/// Retransmissions by what sent them (the sender's state when `tcp_retransmit_skb`
/// sent them: Loss, Recovery, or neither).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Causes {
    /// After an RTO expiry (`tcp_retransmit_timer`).
    pub rto: u64,
    /// Tail-loss probes (`tcp_send_loss_probe`).
    pub tlp: u64,
    /// Fast retransmissions (RACK, duplicate ACKs).
    pub fast: u64,
}

impl std::ops::AddAssign for Causes {
    fn add_assign(&mut self, o: Self) {
        self.rto += o.rto;
        self.tlp += o.tlp;
        self.fast += o.fast;
    }
}

impl Transaction {
    /// The transaction of a kernel record: its moments as a chain, each no earlier
    /// than the one before, so that the parts sum to the response time exactly.
    pub fn of(r: &RawTxn) -> Self {
        let arrived = r.req_last_ns.max(r.req_first_ns);
        let read = (r.read_last_ns != 0).then(|| r.read_last_ns.max(arrived));
        let wrote_first = r.write_first_ns.max(read.unwrap_or(arrived));
        let wrote_last = r.write_last_ns.max(wrote_first);
        let acked = (r.acked_ns != 0).then(|| r.acked_ns.max(wrote_last));
        let parts = [
            Some(arrived - r.req_first_ns),
            read.map(|t| t - arrived),
            Some(wrote_first - read.unwrap_or(arrived)),
            Some(wrote_last - wrote_first),
            acked.map(|t| t - wrote_last),
        ];
        let v6 = Ipv6Addr::from(r.client_v6);
        let client = if r.client_v4 != [0; 4] {
            Some(SocketAddr::new(
                Ipv4Addr::from(r.client_v4).into(),
                r.client_port,
            ))
        } else if !v6.is_unspecified() {
            // An IPv4 client of a dual-stack socket is shown as IPv4, as ss shows it.
            let ip = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
            Some(SocketAddr::new(ip, r.client_port))
        } else {
            None
        };
        Self {
            connection: r.cookie,
            port: r.port,
            client,
            start_ns: r.req_first_ns,
            request_bytes: r.req_bytes,
            request_segments: r.req_segments,
            response_bytes: r.resp_bytes,
            response_ns: wrote_last - r.req_first_ns,
            parts,
            srtt_us: r.srtt_us,
            retransmissions: r.retrans,
            pipelined: r.flags & TXN_PIPELINED != 0,
            unacked: r.flags & TXN_UNACKED != 0,
            ack_on_request: r.flags & TXN_ACK_ON_DATA != 0,
            retransmitted_by: Causes {
                rto: r.rto.into(),
                tlp: r.tlp.into(),
                fast: r.fast.into(),
            },
        }
    }

    /// The part `p`, ns.
    pub fn part(&self, p: Part) -> Option<u64> {
        self.parts[p as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw() -> RawTxn {
        RawTxn {
            cookie: 7,
            req_first_ns: 1_000,
            req_last_ns: 1_500,
            read_first_ns: 1_600,
            read_last_ns: 1_700,
            write_first_ns: 51_700,
            write_last_ns: 52_000,
            acked_ns: 60_000,
            req_bytes: 20,
            resp_bytes: 7,
            req_segments: 2,
            client_v4: [127, 0, 0, 1],
            client_port: 40_000,
            ..RawTxn::default()
        }
    }

    /// Witness: arithmetic on the record's moments; the parts sum to the response.
    #[test]
    fn parts_are_the_gaps_between_the_kernels_moments_and_sum_to_the_response() {
        let t = Transaction::of(&raw());
        assert_eq!(
            t.parts,
            [Some(500), Some(200), Some(50_000), Some(300), Some(8_000)]
        );
        assert_eq!(t.response_ns, 51_000);
        let sum: u64 = t.parts[..4].iter().flatten().sum();
        assert_eq!(sum, t.response_ns);
        assert_eq!(t.client, Some("127.0.0.1:40000".parse().unwrap()));
    }

    /// A read the kernel did not see (not through tcp_recvmsg) folds wait into think;
    /// an ACK not seen leaves the network part unknown; a moment out of order (a read
    /// of the first segment only) never makes a part negative.
    #[test]
    fn moments_not_seen_or_out_of_order_keep_the_sum() {
        let t = Transaction::of(&RawTxn {
            read_first_ns: 0,
            read_last_ns: 0,
            acked_ns: 0,
            ..raw()
        });
        assert_eq!(t.parts, [Some(500), None, Some(50_200), Some(300), None]);
        let t = Transaction::of(&RawTxn {
            read_last_ns: 1_200,
            ..raw()
        });
        assert_eq!(t.part(Part::Wait), Some(0));
        assert_eq!(t.parts[..4].iter().flatten().sum::<u64>(), t.response_ns);
    }
}
