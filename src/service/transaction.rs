//! One transaction of a watched connection, as the kernel of one end timed it. On the
//! server: the request arriving, waiting to be read, the application thinking, writing
//! its response, and the network and client until the response's last byte is ACKed.
//! On the client: the application writing its request, TCP sending it to the driver,
//! the server (and the network both ways) until the response's first byte is back,
//! the response arriving, and waiting to be read.

use crate::kernel::explain_bpf::{
    RawTxn, SIDE_CLIENT, TXN_ACK_ON_DATA, TXN_PIPELINED, TXN_UNACKED,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Which end of its connection saw a transaction.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// The server: a connection to a watched local port.
    Server,
    /// The client: a connection from this host to a watched remote port.
    Client,
}

impl Side {
    /// Its parts, in the order they happen.
    pub fn parts(self) -> [Part; 5] {
        match self {
            Self::Server => [
                Part::Arrival,
                Part::Wait,
                Part::Think,
                Part::Write,
                Part::Network,
            ],
            Self::Client => [
                Part::Write,
                Part::Send,
                Part::Server,
                Part::Arrival,
                Part::Wait,
            ],
        }
    }

    /// Its name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Self::Server => "server",
            Self::Client => "client",
        }
    }
}

/// A part of a transaction. Arrival, wait and write are the same part on either
/// side, of the message each side receives or sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Part {
    /// The first data segment in to the last, at TCP: how the other end and the
    /// network delivered the message (a server's request, a client's response).
    Arrival,
    /// The last segment in to the application's last read of it: the application's
    /// wait (busy, not scheduled, or reading something else).
    Wait,
    /// A server's read of the request to its response's first write: the
    /// application's own work.
    Think,
    /// The first write out to the last returning: the application writing its message
    /// (and TCP taking it, blocked when the send buffer is full). A client's ends when
    /// the request's last byte went out, if that came before the write returned.
    Write,
    /// A client's last write returning to the request's last byte handed to the
    /// driver: the request held in its kernel (0 when TCP sent it inside the write,
    /// as it does with room in the window).
    Send,
    /// A client's request out to the response's first segment in: the network both
    /// ways and the server.
    Server,
    /// A server's last write returning to the ACK of the response's last byte: the
    /// network and the client (its receiving, its delayed ACK).
    Network,
}

impl Part {
    /// Its name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Self::Arrival => "arrival",
            Self::Wait => "wait",
            Self::Think => "think",
            Self::Write => "write",
            Self::Send => "send",
            Self::Server => "server",
            Self::Network => "network",
        }
    }

    /// What it is on `side`, in a few words.
    pub fn what(self, side: Side) -> &'static str {
        match (self, side) {
            (Self::Arrival, Side::Server) => "the request arriving",
            (Self::Arrival, Side::Client) => "the response arriving",
            (Self::Wait, _) => "waiting to be read",
            (Self::Think, _) => "the application's work",
            (Self::Write, Side::Server) => "writing the response",
            (Self::Write, Side::Client) => "writing the request",
            (Self::Send, _) => "the request to the driver",
            (Self::Server, _) => "network both ways and the server",
            (Self::Network, _) => "network and client to the last ACK",
        }
    }
}

/// One transaction: what one end's kernel saw of it (times in ns).
#[derive(Clone, Debug, PartialEq)]
pub struct Transaction {
    /// The end that saw it.
    pub side: Side,
    /// The connection (its socket's cookie).
    pub connection: u64,
    /// The watched port: the server's (local on the server, remote on the client).
    pub port: u16,
    /// This end's own port (on the client, the one the kernel chose).
    pub local_port: u16,
    /// The other end's address (`None` when the kernel had none to give: the record of
    /// a socket already unhashed).
    pub peer: Option<SocketAddr>,
    /// When the request began (CLOCK_MONOTONIC): its first data segment reached the
    /// server's TCP; the client's first write of it began.
    pub start_ns: u64,
    /// Request bytes (received by the server, written by the client).
    pub request_bytes: u32,
    /// Response bytes (written by the server, received by the client).
    pub response_bytes: u32,
    /// Data segments of the message in: the request on the server, the response on
    /// the client.
    pub segments_in: u32,
    /// The response time this end saw. Server: the request's first segment to the
    /// response's last write returning. Client: the request's first write to the
    /// application's last read of the response (its last segment when no read was
    /// seen).
    pub response_ns: u64,
    /// Each part in [`Side::parts`]' order; `None` where the kernel did not see its
    /// end (no read seen: on the server wait and think are one, counted as think, on
    /// the client the response ends at its last segment; no ACK: network; not seen
    /// at the driver: send, counted in server).
    pub parts: [Option<u64>; 5],
    /// The connection's smoothed RTT at the end, µs.
    pub srtt_us: u32,
    /// Its minimum RTT then, µs (0: none measured yet).
    pub min_rtt_us: u32,
    /// Segments this end retransmitted while it ran.
    pub retransmissions: u32,
    /// The response began with request bytes unread: the client pipelines.
    pub pipelined: bool,
    /// The next request came before the response was ACKed.
    pub unacked: bool,
    /// The ACK of the response rode on the client's next request: the network part is
    /// the client's pause between them (or its delayed-ACK timer's, whichever first).
    pub ack_on_request: bool,
    /// Its retransmissions by cause.
    pub retransmitted_by: Causes,
}

/// Retransmissions by what sent them (the sender's state when `tcp_retransmit_skb`
/// sent them: Loss, Recovery, or neither).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

/// A moment the kernel saw (`Some`), never before `after`: a moment out of order (a
/// read returning after the next segment came) makes no part negative.
fn seen(ns: u64, after: u64) -> Option<u64> {
    (ns != 0).then(|| ns.max(after))
}

impl Transaction {
    /// The transaction of a kernel record: its moments as a chain, each no earlier
    /// than the one before, so that the parts sum to the response time exactly.
    pub fn of(r: &RawTxn) -> Self {
        let side = if r.side == SIDE_CLIENT {
            Side::Client
        } else {
            Side::Server
        };
        let (start_ns, response_ns, parts) = match side {
            Side::Server => {
                let arrived = r.in_last_ns.max(r.in_first_ns);
                let read = seen(r.read_last_ns, arrived);
                let wrote_first = r.write_first_ns.max(read.unwrap_or(arrived));
                let wrote_last = r.write_last_ns.max(wrote_first);
                let acked = seen(r.acked_ns, wrote_last);
                let parts = [
                    Some(arrived - r.in_first_ns),
                    read.map(|t| t - arrived),
                    Some(wrote_first - read.unwrap_or(arrived)),
                    Some(wrote_last - wrote_first),
                    acked.map(|t| t - wrote_last),
                ];
                (r.in_first_ns, wrote_last - r.in_first_ns, parts)
            }
            Side::Client => {
                // The request is out when its last byte went to the driver, which on
                // a short path is inside the write (the server may have it before the
                // write returns): the write part ends there, and the server's part
                // starts there. Not seen at the driver: out when the write returned.
                let wrote_last = r.write_last_ns.max(r.write_first_ns);
                let sent = seen(r.sent_ns, r.write_first_ns);
                let out = sent.unwrap_or(wrote_last);
                let written = wrote_last.min(out);
                let in_first = r.in_first_ns.max(out);
                let in_last = r.in_last_ns.max(in_first);
                let read = seen(r.read_last_ns, in_last);
                let parts = [
                    Some(written - r.write_first_ns),
                    sent.map(|t| t - written),
                    Some(in_first - out),
                    Some(in_last - in_first),
                    read.map(|t| t - in_last),
                ];
                let end = read.unwrap_or(in_last);
                (r.write_first_ns, end - r.write_first_ns, parts)
            }
        };
        let v6 = Ipv6Addr::from(r.remote_v6);
        let peer = if r.remote_v4 != [0; 4] {
            Some(SocketAddr::new(
                Ipv4Addr::from(r.remote_v4).into(),
                r.remote_port,
            ))
        } else if !v6.is_unspecified() {
            // An IPv4 peer of a dual-stack socket is shown as IPv4, as ss shows it.
            let ip = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
            Some(SocketAddr::new(ip, r.remote_port))
        } else {
            None
        };
        let (port, request_bytes, response_bytes) = match side {
            Side::Server => (r.local_port, r.in_bytes, r.out_bytes),
            Side::Client => (r.remote_port, r.out_bytes, r.in_bytes),
        };
        Self {
            side,
            connection: r.cookie,
            port,
            local_port: r.local_port,
            peer,
            start_ns,
            request_bytes,
            response_bytes,
            segments_in: r.in_segments,
            response_ns,
            parts,
            srtt_us: r.srtt_us,
            min_rtt_us: r.min_rtt_us,
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

    /// The part `p` (`None` also when it is not one of this side's parts).
    pub fn part(&self, p: Part) -> Option<u64> {
        let i = self.side.parts().iter().position(|&q| q == p)?;
        self.parts[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw() -> RawTxn {
        RawTxn {
            cookie: 7,
            in_first_ns: 1_000,
            in_last_ns: 1_500,
            read_first_ns: 1_600,
            read_last_ns: 1_700,
            write_first_ns: 51_700,
            write_last_ns: 52_000,
            acked_ns: 60_000,
            in_bytes: 20,
            out_bytes: 7,
            in_segments: 2,
            remote_v4: [127, 0, 0, 1],
            remote_port: 40_000,
            ..RawTxn::default()
        }
    }

    /// Witness: arithmetic on a server's record's moments; the parts sum to the
    /// response.
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
        assert_eq!(t.peer, Some("127.0.0.1:40000".parse().unwrap()));
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

    /// Witness: arithmetic. A client's record: its request out to the driver 200 ns
    /// into its 300 ns write (send 0, the write part ending there: the server may
    /// have it before the write returns), the server's 40.1 µs from then, the response
    /// arriving over 500 ns and read 200 ns later; the parts sum to the first write to
    /// the last read. The driver not seen: out at the write's return, send unknown; no
    /// read seen ends the response at its last segment. Bytes and ports by direction:
    /// the request is what it wrote.
    #[test]
    fn a_clients_parts_run_from_its_write_to_its_read() {
        let client = RawTxn {
            side: SIDE_CLIENT,
            write_first_ns: 1_000,
            write_last_ns: 1_300,
            sent_ns: 1_200,
            in_first_ns: 41_300,
            in_last_ns: 41_800,
            read_first_ns: 41_900,
            read_last_ns: 42_000,
            in_bytes: 7,
            out_bytes: 14,
            local_port: 50_000,
            remote_port: 6379,
            remote_v4: [127, 0, 0, 1],
            ..RawTxn::default()
        };
        let t = Transaction::of(&client);
        assert_eq!(t.side, Side::Client);
        assert_eq!(
            t.parts,
            [Some(200), Some(0), Some(40_100), Some(500), Some(200)]
        );
        assert_eq!(t.response_ns, 41_000);
        assert_eq!(t.parts.iter().flatten().sum::<u64>(), t.response_ns);
        assert_eq!((t.request_bytes, t.response_bytes), (14, 7));
        assert_eq!((t.port, t.local_port), (6379, 50_000));
        assert_eq!(t.part(Part::Server), Some(40_100));
        // Held after the write returned: 1 ms of send.
        let held = Transaction::of(&RawTxn {
            sent_ns: 1_001_300,
            in_first_ns: 1_041_300,
            in_last_ns: 1_041_800,
            read_last_ns: 1_042_000,
            ..client
        });
        assert_eq!(
            held.parts,
            [
                Some(300),
                Some(1_000_000),
                Some(40_000),
                Some(500),
                Some(200)
            ]
        );
        assert_eq!(t.part(Part::Think), None);
        let t = Transaction::of(&RawTxn {
            sent_ns: 0,
            read_last_ns: 0,
            ..client
        });
        assert_eq!(t.parts, [Some(300), None, Some(40_000), Some(500), None]);
        assert_eq!(t.response_ns, 40_800);
    }
}
