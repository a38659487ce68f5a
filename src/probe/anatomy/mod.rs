//! `rr --anatomy`: each transaction split into what each host did and what the path
//! took, from the kernel's software stamps on both ends (`probe::stamps`).
//!
//! ```text
//! client:  send() ──client_send──▶ TX ······················· RX ──client_recv──▶ recv() returns
//! server:                      RX ──server_recv──▶ recv() ──server_app──▶ TX
//! ```
//!
//! The client's two intervals are on its clock, the server's two on its own, and the
//! network is what remains of the round trip: (client RX − client TX) − (server_recv +
//! server_app). The five add up to the round trip exactly and no clock is compared
//! with another (docs/ARCHITECTURE.md, "one transaction's anatomy").
//!
//! The server learns a response's TX stamp only after sending it, so each response
//! carries the server's two intervals of the *previous* transaction in a trailer after
//! the sequence bytes; the client joins them to what it kept of that transaction.

use crate::stats::{LatencyHistogram, Percentile, Summary};
use serde::{Deserialize, Serialize};

pub mod slowest;

use slowest::{tail_count, Slowest, PPM_PER_PCT};

/// Where the trailer starts in a response (after UDP_RR's echoed sequence bytes).
pub const TRAILER_AT: usize = 8;
/// The trailer, little-endian: the transaction's number plus one (u32; 0: no
/// transaction, as in the first response), server_recv ns (u32), server_app ns (u32)
/// (`u32::MAX` for a stamp the kernel did not give), the requests the server has
/// answered including this one (u32), the request's RX stamp on the server's clock
/// (u64 ns, 0 when missing; the response's TX stamp is RX + server_recv + server_app),
/// the response's retransmissions (u8), flags (u8: bit 0, the server handled the
/// request on another CPU than the one before; bit 1, the server's first
/// retransmission is a tail loss probe; bit 2, the next byte is its kernel's count),
/// how many of the retransmissions the RTO timer sent (u8), how many loss recovery
/// sent (u8, [`Sends::recovery`]), and µs from the response's first send to its last
/// segment's last retransmission (u32; `u32::MAX`: that segment was sent once).
pub const TRAILER_LEN: usize = 32;
/// The smallest response that carries a trailer.
pub const MIN_RESPONSE: u32 = (TRAILER_AT + TRAILER_LEN) as u32;
const MISSING: u32 = u32::MAX;

/// What the server measured of one transaction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerPart {
    /// TCP: the transaction's number from 1; UDP: the low 32 bits of its sequence.
    pub seq: u32,
    /// Request arrived (RX stamp) → the server's `recv()` returned.
    pub recv_ns: Option<u32>,
    /// `recv()` returned → the response left the stack (TX stamp).
    pub app_ns: Option<u32>,
    /// Requests the server answered, the one this response answers included.
    pub answered: u32,
    /// The request's RX stamp and the response's TX stamp, server's CLOCK_REALTIME.
    pub rx_ns: Option<u64>,
    pub tx_ns: Option<u64>,
    /// The response's retransmissions, and when its last segment's last one left after
    /// the first send.
    pub retransmissions: u8,
    pub retransmitted_after_us: Option<u32>,
    /// The server read this request on another CPU than the request before it.
    pub migrated: bool,
    /// The server's kernel probes a tail loss first ([`probes_tail_loss`]).
    pub tlp: bool,
    /// Of the retransmissions, those the server's RTO timer sent ([`RetransCounters`]).
    pub rtos: Option<u8>,
    /// Of the retransmissions, those the server's loss recovery sent ([`Sends::recovery`]).
    pub recovery: u8,
}

impl ServerPart {
    /// Write into `resp` (at least [`MIN_RESPONSE`] bytes).
    pub fn write(&self, resp: &mut [u8]) {
        let t = &mut resp[TRAILER_AT..TRAILER_AT + TRAILER_LEN];
        t[0..4].copy_from_slice(&self.seq.wrapping_add(1).to_le_bytes());
        t[4..8].copy_from_slice(&self.recv_ns.unwrap_or(MISSING).to_le_bytes());
        t[8..12].copy_from_slice(&self.app_ns.unwrap_or(MISSING).to_le_bytes());
        t[12..16].copy_from_slice(&self.answered.to_le_bytes());
        t[16..24].copy_from_slice(&self.rx_ns.unwrap_or(0).to_le_bytes());
        t[24] = self.retransmissions;
        t[25] = u8::from(self.migrated)
            | (u8::from(self.tlp) << 1)
            | (u8::from(self.rtos.is_some()) << 2);
        t[26] = self.rtos.unwrap_or(0);
        t[27] = self.recovery;
        t[28..32].copy_from_slice(&self.retransmitted_after_us.unwrap_or(MISSING).to_le_bytes());
    }

    /// Read from a response; `None` when it is too short or carries no transaction
    /// (the first response has nothing before it).
    pub fn read(resp: &[u8]) -> Option<Self> {
        let t = resp.get(TRAILER_AT..TRAILER_AT + TRAILER_LEN)?;
        let word = |i: usize| u32::from_le_bytes([t[i], t[i + 1], t[i + 2], t[i + 3]]);
        let long = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&t[i..i + 8]);
            Some(u64::from_le_bytes(b)).filter(|&v| v != 0)
        };
        let opt = |v: u32| (v != MISSING).then_some(v);
        let seq = word(0);
        let (recv_ns, app_ns, rx_ns) = (opt(word(4)), opt(word(8)), long(16));
        let retransmissions = t[24];
        (seq != 0).then(|| Self {
            seq: seq - 1,
            recv_ns,
            app_ns,
            answered: word(12),
            rx_ns,
            tx_ns: rx_ns
                .zip(recv_ns.zip(app_ns))
                .and_then(|(rx, (r, a))| rx.checked_add(u64::from(r))?.checked_add(u64::from(a))),
            retransmissions,
            retransmitted_after_us: (retransmissions > 0).then(|| word(28)).and_then(opt),
            migrated: t[25] & 1 != 0,
            tlp: t[25] & 2 != 0,
            rtos: (t[25] & 4 != 0).then_some(t[26]),
            recovery: t[27],
        })
    }
}

/// ns between two CLOCK_REALTIME stamps as a trailer field (saturating).
pub fn interval_u32(from: u64, to: u64) -> Option<u32> {
    to.checked_sub(from)
        .map(|d| u32::try_from(d).unwrap_or(MISSING - 1))
}

/// The SND stamps of one message's last byte: the first says when it left the stack;
/// every later one is a retransmission of the segment holding that byte (the kernel
/// stamps each transmission of a stamped skb, `tcp_transmit_skb` → `skb_tx_timestamp`).
/// A message of one segment (an RR request or response) is counted whole by them; a
/// longer one's earlier segments are not stamped, so its retransmissions are the
/// kernel's count instead ([`RetransCounters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sends {
    pub first: Option<u64>,
    pub again: u8,
    pub last: Option<u64>,
    /// Of the retransmissions, those the RTO timer sent, as the sender's kernel
    /// counted them ([`RetransCounters`]); none where it does not count.
    pub rtos: Option<u8>,
    /// Of the retransmissions of a message longer than a segment, those loss recovery
    /// sent: all but the RTO timer's (`tcp_xmit_retransmit_queue` after SACKs or
    /// duplicate ACKs, RACK, the rest of the window after an RTO, a tail loss probe;
    /// tcp_info does not tell these apart). Zero for a message of one segment, whose
    /// copies only a timer sends.
    pub recovery: u8,
}

impl Sends {
    /// Sent once, at `ns`.
    pub fn once(ns: u64) -> Self {
        Self {
            first: Some(ns),
            ..Self::default()
        }
    }

    /// One more SND stamp of the byte.
    pub fn add(&mut self, ns: u64) {
        if self.first.is_none() {
            self.first = Some(ns);
        } else {
            self.again = self.again.saturating_add(1);
            self.last = Some(ns);
        }
    }

    /// µs from the first send to the last retransmission of the last segment.
    pub fn retransmitted_after_us(&self) -> Option<u32> {
        let us = self.last?.checked_sub(self.first?)? / 1_000;
        Some(u32::try_from(us).unwrap_or(u32::MAX))
    }
}

/// A connection's retransmissions as its kernel counts them (tcp_info): RTO timer
/// firings (`tcpi_total_rto`, incremented by `tcp_retransmit_timer`, Linux 6.7+) and
/// segments sent again (`tcpi_total_retrans`, `tcp_retransmit_skb`). One message is in
/// flight at a time, and the one before it was wholly acknowledged when this one was
/// sent (the peer answered it), so the counts' growth over a message is that message's.
///
/// A message of one segment is read only after its stamps showed a copy (a system call
/// saved per transaction): its firings are its RTOs, its other retransmissions the tail
/// loss probe. Which timer sends a lone segment's first copy is the kernel's to decide:
/// no probe while an earlier probe is unresolved (`tcp_send_loss_probe`: at most one
/// outstanding, `tlp_high_seq`) or after an RTO until the connection is Open again
/// (`tcp_schedule_loss_probe`), so it cannot be told from the settings alone. A message
/// longer than a segment (the connection's `tcpi_snd_mss` when it was opened) is read
/// after every send: only its last byte is stamped, so a lost earlier segment shows in
/// the kernel's count alone.
#[derive(Clone, Copy, Debug, Default)]
pub struct RetransCounters {
    /// (RTO firings, segments retransmitted) at the last read.
    seen: (Option<u16>, Option<u32>),
    /// The messages are longer than a segment: read after each.
    every: bool,
}

impl RetransCounters {
    /// The counts now on `fd`'s connection, whose messages are `len` bytes (on kernels
    /// without `tcpi_total_rto`, no RTO count).
    pub fn new(fd: std::os::fd::RawFd, len: u64) -> Self {
        let info = crate::kernel::sockopt::tcp_info_fd(fd).ok();
        Self {
            seen: info
                .as_ref()
                .map_or((None, None), |t| (t.total_rto, Some(t.total_retrans))),
            every: info.is_some_and(|t| len > u64::from(t.snd_mss)),
        }
    }

    /// After a message was acknowledged: how many times `sends` were retransmitted
    /// and which by the RTO timer.
    pub fn note(&mut self, fd: std::os::fd::RawFd, sends: &mut Sends) {
        if sends.again == 0 && !self.every {
            return;
        }
        let Ok(now) = crate::kernel::sockopt::tcp_info_fd(fd) else {
            return;
        };
        let (rto_before, retrans_before) = self.seen;
        self.seen = (now.total_rto.or(rto_before), Some(now.total_retrans));
        if self.every {
            if let Some(before) = retrans_before {
                let again = now.total_retrans.wrapping_sub(before);
                sends.again = sends.again.max(u8::try_from(again).unwrap_or(u8::MAX));
            }
        }
        sends.rtos = rto_before
            .zip(now.total_rto)
            .and_then(|(before, now)| u8::try_from(now.wrapping_sub(before)).ok())
            .map(|r| r.min(sends.again));
        if self.every {
            sends.recovery = sends.again - sends.rtos.unwrap_or(0);
        }
    }
}

/// Whether `again` timer retransmissions of one message began with a tail loss probe:
/// all but the kernel's RTOs, when it counted them (at most one probe per message:
/// after the first RTO the connection is in Loss); otherwise the first, when the
/// sender probes at all.
fn probed(again: u8, rtos: Option<u8>, probes: bool) -> bool {
    again > 0 && rtos.map_or(probes, |r| again > r)
}

/// The kernel sends a lone segment again only from a timer (TLP, RTO; no duplicate
/// ACKs can come with one segment in flight), and no timer fires within a jiffy of the
/// send, at least 1 ms at HZ ≤ 1000. A request that arrived sooner after the response
/// left found that response sent once, so the server stops reading stamps at its first
/// (saving a read that finds the queue empty, a system call per transaction).
pub const NO_RETRANSMISSION_WITHIN_NS: u64 = 1_000_000;

/// Whether the kernel sends a tail loss probe before the RTO on `fd`'s connection
/// (`tcp_schedule_loss_probe`: net.ipv4.tcp_early_retrans 3 or 4, and SACK on the
/// connection). Then a lone segment's first retransmission is the probe and every
/// later one an RTO (no probe after the first RTO: the state is Loss; KERNEL_RTO §5–6);
/// without it every retransmission is an RTO.
pub fn probes_tail_loss(fd: std::os::fd::RawFd) -> bool {
    /// `TCPI_OPT_SACK` (include/uapi/linux/tcp.h).
    const SACK: u8 = 2;
    let early = crate::kernel::sysctl::read(None, "net.ipv4.tcp_early_retrans")
        .ok()
        .and_then(|v| v.parse::<u8>().ok());
    let sack = crate::kernel::sockopt::tcp_info_fd(fd).is_ok_and(|t| t.options & SACK != 0);
    matches!(early, Some(3 | 4)) && sack
}

/// The server's bookkeeping for one data socket: the transaction in hand becomes the
/// previous one once its response is sent.
#[derive(Default)]
pub struct ServerStamps {
    /// The connection's first retransmissions are tail loss probes.
    pub tlp: bool,
    /// (number, RX stamp, when recv() returned, read on another CPU) of the last
    /// transaction answered.
    prev: Option<(u32, Option<u64>, u64, bool)>,
    /// The CPU the last request was read on.
    cpu: Option<u32>,
}

impl ServerStamps {
    /// Before sending the response to transaction `seq` (received at `rx`, read at
    /// `returned` on `cpu`): the previous transaction's part, given the SND stamps of
    /// its response, and remember this one.
    pub fn next(
        &mut self,
        seq: u32,
        rx: Option<u64>,
        returned: u64,
        cpu: u32,
        prev_sends: Sends,
        answered: u32,
    ) -> Option<ServerPart> {
        let part = self.prev.map(|(pseq, prx, pret, migrated)| ServerPart {
            seq: pseq,
            recv_ns: prx.and_then(|r| interval_u32(r, pret)),
            app_ns: prev_sends.first.and_then(|t| interval_u32(pret, t)),
            answered,
            rx_ns: prx,
            tx_ns: prev_sends.first,
            retransmissions: prev_sends.again,
            retransmitted_after_us: prev_sends.retransmitted_after_us(),
            migrated,
            tlp: self.tlp,
            rtos: prev_sends.rtos,
            recovery: prev_sends.recovery,
        });
        let migrated = self.cpu.is_some_and(|c| c != cpu);
        self.cpu = Some(cpu);
        self.prev = Some((seq, rx, returned, migrated));
        part
    }

    /// At the end of the stream: the last transaction's part, which no response will
    /// carry (it goes back with the server's report), given its response's SND stamps.
    pub fn last(&mut self, sends: Sends, answered: u32) -> Option<ServerPart> {
        let part = self.next(0, None, 0, self.cpu.unwrap_or(0), sends, answered);
        self.prev = None;
        part
    }
}

/// The server's part of a stream's last transaction, in the server's report: the
/// trailer bytes a response would have carried, and which client stream it belongs to.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LastPart {
    /// The client's end of the stream, as the server saw it.
    pub peer: std::net::SocketAddr,
    /// [`MIN_RESPONSE`] bytes, the trailer where [`ServerPart::write`] puts it.
    pub trailer: Vec<u8>,
}

impl LastPart {
    pub fn new(peer: std::net::SocketAddr, part: &ServerPart) -> Self {
        let mut trailer = vec![0u8; MIN_RESPONSE as usize];
        part.write(&mut trailer);
        Self { peer, trailer }
    }

    /// The part, when the bytes hold one (a report is untrusted input).
    pub fn part(&self) -> Option<ServerPart> {
        (self.trailer.len() >= MIN_RESPONSE as usize)
            .then(|| ServerPart::read(&self.trailer))
            .flatten()
    }
}

/// The CPU the calling thread runs on (`getcpu`, a vDSO call: no system call).
pub fn current_cpu() -> u32 {
    // SAFETY: no arguments; returns -1 only where getcpu is unsupported.
    u32::try_from(unsafe { libc::sched_getcpu() }).unwrap_or(u32::MAX)
}

/// What the client kept of one transaction, all CLOCK_REALTIME ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientPart {
    /// What the server's part names it by (UDP: the echoed, possibly wrapped, sequence).
    pub seq: u32,
    /// The client's own number of the transaction, from 1.
    pub number: u64,
    /// Just before `send()`.
    pub sent: u64,
    /// The response arrived (RX stamp of its last packet).
    pub rx: Option<u64>,
    /// `recv()` returned the whole response.
    pub returned: u64,
    /// TCP: the request's last byte was acknowledged (TX ACK stamp).
    pub acked: Option<u64>,
    /// The request's SND stamps: the first says when it left the stack, more are its
    /// retransmissions.
    pub sends: Sends,
    /// The CPU the client sent from and the one `recv()` returned on.
    pub cpu_sent: u32,
    pub cpu_returned: u32,
    /// The client's kernel probes a tail loss first ([`probes_tail_loss`]).
    pub tlp: bool,
    /// TCP_CRR: `connect()` was called → it returned (the handshake), before `sent`.
    pub connect_ns: Option<u64>,
}

/// What touched one transaction besides how long each component took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Events {
    /// Segments of the request the client sent again. A request of one segment: a tail
    /// loss probe (when the kernel sent one), then RTOs (KERNEL_RTO §5–6); a lost
    /// response also makes the client send its request again, whose ACK rode on that
    /// response. A longer one: RTOs and loss recovery ([`Sends::recovery`]).
    pub request_retransmissions: u8,
    /// µs from the request's first send to its last segment's last retransmission.
    pub request_retransmitted_after_us: Option<u32>,
    /// The first of them was the client's tail loss probe; the others were RTOs and
    /// loss recovery ([`RetransCounters`]).
    pub request_tlp: bool,
    /// Of them, those loss recovery sent (a request longer than a segment).
    #[serde(default)]
    pub request_recovery: u8,
    /// The same of the response, sent again by the server.
    pub response_retransmissions: u8,
    pub response_retransmitted_after_us: Option<u32>,
    pub response_tlp: bool,
    #[serde(default)]
    pub response_recovery: u8,
    /// TCP: the server's delayed-ACK timer touched the request: its ACK came alone,
    /// [`DELACK_MIN_NS`] or more after the request left and before the response
    /// (which cost the round trip nothing: the client waits for the response); or
    /// its last byte was held [`DELACK_MIN_NS`] or more in the client's stack, which
    /// only an ACK that late releases (it cost `client_send`, [`Events::cause`]).
    pub delayed_ack: bool,
    /// The client's `recv()` returned on another CPU than `send()` was called on.
    pub client_migrated: bool,
    /// The server read the request on another CPU than the request before it.
    pub server_migrated: bool,
}

impl Events {
    /// The retransmissions of both ends by kind: (tail loss probes, RTOs, loss
    /// recovery).
    pub fn by_kind(&self) -> (u8, u8, u8) {
        self.kinds_of(true, true)
    }

    /// The retransmissions of the request (when `request`) and of the response (when
    /// `response`) by kind: (tail loss probes, RTOs, loss recovery). A message's
    /// first retransmission may be its probe, loss recovery sent those it counts, and
    /// the RTO timer the rest.
    fn kinds_of(&self, request: bool, response: bool) -> (u8, u8, u8) {
        let side = |on: bool, again: u8, tlp: bool, recovery: u8| {
            let (again, tlp, recovery) = if on {
                (again, u8::from(tlp), recovery)
            } else {
                (0, 0, 0)
            };
            (
                tlp,
                again.saturating_sub(tlp).saturating_sub(recovery),
                recovery,
            )
        };
        let a = side(
            request,
            self.request_retransmissions,
            self.request_tlp,
            self.request_recovery,
        );
        let b = side(
            response,
            self.response_retransmissions,
            self.response_tlp,
            self.response_recovery,
        );
        (
            a.0.saturating_add(b.0),
            a.1.saturating_add(b.1),
            a.2.saturating_add(b.2),
        )
    }

    /// The event that cost the `component`-th of [`Components::parts`] of `t` its
    /// time: one on the transaction's critical path whose time lies inside that
    /// component, or none (an event that happened beside the wait names nothing).
    ///
    /// - **network** (client TX → server RX, server TX → client RX): a retransmission
    ///   the transaction waited for. The copy that got through left `after` µs after
    ///   the first send (RFC 6298 §5, `tcp_retransmit_timer`; RFC 8985 §7,
    ///   `tcp_send_loss_probe`), so waiting for it makes the network part at least
    ///   `after`: a network part shorter than that got an earlier copy through and the
    ///   retransmission was spurious (an ACK lost or late). A message whose last
    ///   segment went once but earlier ones again (loss recovery,
    ///   `tcp_xmit_retransmit_queue`) was complete only with them. By kind, an RTO
    ///   first, then the tail loss probe, then loss recovery.
    /// - **client_send** (send() → the request's last byte leaves the stack): a
    ///   delayed ACK, when that byte waited at least [`DELACK_MIN_NS`] in the client's
    ///   stack. A written byte is held that long only for an ACK — Nagle's algorithm
    ///   (RFC 1122 §4.2.3.4, RFC 896; `tcp_nagle_check` with Minshall's variant,
    ///   `tcp_minshall_check`: a short segment waits while an earlier short one is
    ///   unacknowledged) or a closed window — and an ACK that late is the receiver's
    ///   delayed-ACK timer's (RFC 1122 §4.2.3.2; `tcp_send_delayed_ack`, at least
    ///   TCP_DELACK_MIN). A delayed ACK of a request the server is answering anyway
    ///   (its think time past 40 ms, seed 000) delays nothing: the client waits for
    ///   the response, not the ACK.
    /// - **server_recv**, **client_recv** (a packet's arrival → its reader's `recv()`
    ///   returns): a wake-up on another CPU than the reader last ran on (the
    ///   scheduler's `try_to_wake_up`: a migration, a cold cache, an IPI).
    /// - **server_app**: nothing the kernels report; the server's own time.
    ///
    /// UDP (`tcp` false) has no ACKs and no retransmissions: only the wake-ups.
    pub fn cause(&self, component: usize, t: &Transaction, tcp: bool) -> Option<&'static str> {
        match component {
            0 if tcp => {
                (self.delayed_ack && t.client_send_ns >= DELACK_MIN_NS).then_some("delayed_ack")
            }
            1 if tcp => self.waited_retransmission(t.network_ns),
            2 => self.server_migrated.then_some("migration"),
            4 => self.client_migrated.then_some("migration"),
            _ => None,
        }
    }

    /// The kind of the retransmissions a transaction whose network part took
    /// `network_ns` waited for (see [`Self::cause`]).
    fn waited_retransmission(&self, network_ns: u64) -> Option<&'static str> {
        let waited = |again: u8, after_us: Option<u32>| {
            again > 0 && after_us.is_none_or(|us| network_ns >= u64::from(us) * 1_000)
        };
        let (tlp, rto, recovery) = self.kinds_of(
            waited(
                self.request_retransmissions,
                self.request_retransmitted_after_us,
            ),
            waited(
                self.response_retransmissions,
                self.response_retransmitted_after_us,
            ),
        );
        if rto > 0 {
            Some("rto")
        } else if tlp > 0 {
            Some("tlp")
        } else if recovery > 0 {
            Some("recovery")
        } else {
            None
        }
    }
}

/// Joined transactions grouped by round trip in bands 1/64 of an octave wide (≤ 1.1 %,
/// 110 µs at 10 ms), with each band's sums of the round trip and the five components.
#[derive(Clone, Debug, Default)]
struct Bands(std::collections::BTreeMap<u16, (u64, [u64; 6])>);

impl Bands {
    /// A round trip's band: its binary exponent and the next six bits.
    fn band(ns: u64) -> u16 {
        let ns = ns.max(64);
        let msb = 63 - u64::from(ns.leading_zeros());
        (msb * 64 + ((ns >> (msb - 6)) & 63)) as u16
    }

    fn add(&mut self, t: &Transaction) {
        let e = self.0.entry(Self::band(t.rtt_ns)).or_default();
        e.0 += 1;
        let v = [
            t.rtt_ns,
            t.client_send_ns,
            t.network_ns,
            t.server_recv_ns,
            t.server_app_ns,
            t.client_recv_ns,
        ];
        for (sum, x) in e.1.iter_mut().zip(v) {
            *sum += x;
        }
    }

    fn merge(&mut self, o: &Self) {
        for (&k, (n, sums)) in &o.0 {
            let e = self.0.entry(k).or_default();
            e.0 += n;
            for (a, b) in e.1.iter_mut().zip(sums) {
                *a += b;
            }
        }
    }

    /// The mean transaction of the band holding percentile `p` of the round trips.
    fn composition(&self, p: Percentile) -> Option<Composition> {
        let total: u64 = self.0.values().map(|(n, _)| n).sum();
        let rank = ((p.0 / 100.0 * total as f64).ceil() as u64).clamp(1, total.max(1));
        let mut seen = 0;
        let (n, sums) = self.0.values().find(|(n, _)| {
            seen += n;
            seen >= rank
        })?;
        let mean = |i: usize| sums[i] as f64 / *n as f64 / 1e3;
        Some(Composition {
            percentile: p.0,
            transactions: *n,
            parts_us: Components {
                rtt: mean(0),
                client_send: mean(1),
                network: mean(2),
                server_recv: mean(3),
                server_app: mean(4),
                client_recv: mean(5),
            },
        })
    }
}

/// What a transaction at one percentile of the round trip is made of: the mean of the
/// transactions whose round trip falls in the same band (≤ 1.1 % wide) as that
/// percentile's, so the parts add up to `parts_us.rtt` (as each transaction's do) where
/// the components' own percentiles would not.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Composition {
    pub percentile: f64,
    /// Transactions in the band.
    pub transactions: u64,
    pub parts_us: Components<f64>,
}

/// How many joined transactions each event touched, and the retransmissions in them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventCounts {
    /// Transactions whose request or response was retransmitted.
    pub retransmitted: u64,
    /// Segments the client and the server sent again, summed over transactions.
    pub request_retransmissions: u64,
    pub response_retransmissions: u64,
    /// Those retransmissions by kind: tail loss probes, RTOs and loss recovery.
    pub tlp: u64,
    pub rto: u64,
    #[serde(default)]
    pub recovery: u64,
    pub delayed_ack: u64,
    pub client_migrated: u64,
    pub server_migrated: u64,
}

impl EventCounts {
    fn add(&mut self, e: &Events) {
        let (req, resp) = (e.request_retransmissions, e.response_retransmissions);
        let (tlp, rto, recovery) = e.by_kind();
        self.merge(&Self {
            retransmitted: u64::from(req > 0 || resp > 0),
            request_retransmissions: u64::from(req),
            response_retransmissions: u64::from(resp),
            tlp: u64::from(tlp),
            rto: u64::from(rto),
            recovery: u64::from(recovery),
            delayed_ack: u64::from(e.delayed_ack),
            client_migrated: u64::from(e.client_migrated),
            server_migrated: u64::from(e.server_migrated),
        });
    }

    fn merge(&mut self, o: &Self) {
        self.retransmitted += o.retransmitted;
        self.request_retransmissions += o.request_retransmissions;
        self.response_retransmissions += o.response_retransmissions;
        self.tlp += o.tlp;
        self.rto += o.rto;
        self.recovery += o.recovery;
        self.delayed_ack += o.delayed_ack;
        self.client_migrated += o.client_migrated;
        self.server_migrated += o.server_migrated;
    }
}

/// TCP_DELACK_MIN (include/net/tcp.h: HZ/25, 40 ms): the shortest delayed-ACK timer.
pub const DELACK_MIN_NS: u64 = 40_000_000;

/// One transaction's anatomy, ns; the five components add up to `rtt`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transaction {
    pub rtt_ns: u64,
    pub client_send_ns: u64,
    pub network_ns: u64,
    pub server_recv_ns: u64,
    pub server_app_ns: u64,
    pub client_recv_ns: u64,
    /// TCP: request sent → its ACK came back (the kernel's own per-request round trip).
    pub tcp_ack_ns: Option<u64>,
    /// TCP_CRR: the handshake before the request (`connect()` → it returned); the
    /// transaction is this plus `rtt_ns`.
    pub connect_ns: Option<u64>,
    pub events: Events,
}

/// Why a transaction has no anatomy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    /// A stamp the kernel did not give (receive stamping starts lazily).
    Unstamped,
    /// Stamps out of order (a clock stepped mid-transaction).
    Inconsistent,
}

/// Join the client's and the server's parts of one transaction.
///
/// # Errors
/// A stamp is missing, or the stamps contradict each other.
pub fn join(c: &ClientPart, s: &ServerPart) -> Result<Transaction, Missing> {
    let (Some(tx), Some(rx), Some(srecv), Some(sapp)) = (c.sends.first, c.rx, s.recv_ns, s.app_ns)
    else {
        return Err(Missing::Unstamped);
    };
    let rtt = c.returned.checked_sub(c.sent);
    let send = tx.checked_sub(c.sent);
    let recv = c.returned.checked_sub(rx);
    let wire = rx.checked_sub(tx);
    let server = u64::from(srecv) + u64::from(sapp);
    let (Some(rtt), Some(send), Some(recv), Some(network)) =
        (rtt, send, recv, wire.and_then(|w| w.checked_sub(server)))
    else {
        return Err(Missing::Inconsistent);
    };
    Ok(Transaction {
        rtt_ns: rtt,
        client_send_ns: send,
        network_ns: network,
        server_recv_ns: u64::from(srecv),
        server_app_ns: u64::from(sapp),
        client_recv_ns: recv,
        tcp_ack_ns: c.acked.and_then(|a| a.checked_sub(tx)),
        connect_ns: c.connect_ns,
        events: Events {
            request_retransmissions: c.sends.again,
            request_retransmitted_after_us: c.sends.retransmitted_after_us(),
            request_tlp: probed(
                c.sends.again.saturating_sub(c.sends.recovery),
                c.sends.rtos,
                c.tlp,
            ),
            request_recovery: c.sends.recovery,
            response_retransmissions: s.retransmissions,
            response_retransmitted_after_us: s.retransmitted_after_us,
            response_tlp: probed(s.retransmissions.saturating_sub(s.recovery), s.rtos, s.tlp),
            response_recovery: s.recovery,
            // With a retransmission, an ACK alone answers the copy (a duplicate
            // request, the server's probe), not a timer. Or the request's last byte
            // was held for an ACK that long (TCP only: it has an ACK stamp).
            delayed_ack: (c.sends.again == 0
                && s.retransmissions == 0
                && c.acked
                    .is_some_and(|a| a < rx && a.saturating_sub(tx) >= DELACK_MIN_NS))
                || (c.acked.is_some() && send >= DELACK_MIN_NS),
            client_migrated: c.cpu_sent != c.cpu_returned,
            server_migrated: s.migrated,
        },
    })
}

/// The client's side of a stream: the transaction waiting for the server's part, and
/// every joined transaction's components.
pub struct Recorder {
    pending: Option<ClientPart>,
    pub hist: Components<LatencyHistogram>,
    pub tcp_ack: LatencyHistogram,
    /// TCP_CRR's handshakes.
    pub connect: LatencyHistogram,
    pub stamped: u64,
    pub unstamped: u64,
    pub inconsistent: u64,
    pub events: EventCounts,
    /// Transactions by round trip (log bands), each band's component sums: what a
    /// transaction at a given percentile is made of.
    bands: Bands,
    /// The slowest transactions so far: a superset of the run's slowest share
    /// ([`slowest`] says why it is exact).
    tail: Slowest<Logged>,
    /// The share the tail holds, parts per million.
    tail_ppm: u32,
    /// UDP_RR: each joined transaction's (number, raw forward, raw backward) one-way
    /// delays, ns, each on the far clock minus the near one (at most [`ONE_WAY_MAX`]).
    one_way: Option<Vec<(u64, i64, i64)>>,
    /// UDP_RR: (the client's number, requests the server had answered) at the last
    /// response: requests not answered before it were lost on the way there.
    answered: Option<(u64, u32)>,
}

/// Transactions whose one-way delays a run keeps (16 bytes each: 32 MiB).
pub const ONE_WAY_MAX: usize = 2_000_000;

/// The share of transactions the tail analysis and `--slow-log` keep unless told
/// otherwise (`--tail`): the slowest 1 %, in parts per million.
pub const TAIL_PPM: u32 = PPM_PER_PCT;

/// The tail a recorder keeps: its share of the run, and how many transactions to keep
/// so that the run's share is among them ([`slowest::keep_for`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TailPlan {
    pub ppm: u32,
    pub keep: u64,
}

impl TailPlan {
    /// The tail of `ppm` of a run of at most `n_max` transactions over `streams`
    /// streams (each keeps its own, within its share of the memory bound).
    pub fn new(ppm: u32, n_max: u64, streams: u32) -> Self {
        Self {
            ppm,
            keep: slowest::keep_for(n_max, ppm, streams),
        }
    }
}

impl Default for TailPlan {
    /// 1 % of a run of unknown length: as many kept as the memory bound allows.
    fn default() -> Self {
        Self::new(TAIL_PPM, u64::MAX, 1)
    }
}

/// A joined transaction with where it came from, ordered by its round trip.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Logged {
    pub sent_unix_ns: u64,
    /// The stream's transaction number, from 1.
    pub seq: u64,
    pub stream: u32,
    #[serde(flatten)]
    pub t: Transaction,
}

impl Ord for Logged {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.t.rtt_ns, self.sent_unix_ns, self.stream, self.seq).cmp(&(
            o.t.rtt_ns,
            o.sent_unix_ns,
            o.stream,
            o.seq,
        ))
    }
}

impl PartialOrd for Logged {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new(TailPlan::default(), false)
    }
}

impl Recorder {
    /// For one stream of a run whose tail is `tail` (the whole run's: every stream
    /// keeps as many as the run's share can hold); with `one_way`, keep what one-way
    /// delays need.
    pub fn new(tail: TailPlan, one_way: bool) -> Self {
        Self {
            one_way: one_way.then(Vec::new),
            answered: None,
            pending: None,
            hist: Components::default(),
            tcp_ack: LatencyHistogram::new(),
            connect: LatencyHistogram::new(),
            stamped: 0,
            unstamped: 0,
            inconsistent: 0,
            events: EventCounts::default(),
            bands: Bands::default(),
            tail: Slowest::new(tail.keep),
            tail_ppm: tail.ppm,
        }
    }

    /// A transaction the client finished, and the server's part that came with its
    /// response (of the transaction before it); returns the transaction that part
    /// completed, when it could be joined.
    pub fn record(
        &mut self,
        done: ClientPart,
        server: Option<ServerPart>,
        stream: u32,
    ) -> Option<Logged> {
        // The latest response's count: a late one (an older number) says less.
        if let Some(s) = server.filter(|_| self.answered.is_none_or(|(n, _)| done.number > n)) {
            self.answered = Some((done.number, s.answered));
        }
        let joined = match (self.pending, server) {
            (Some(p), Some(s)) => self.join_part(p, s, stream),
            _ => None,
        };
        self.pending = Some(done);
        joined
    }

    /// The server's part of the stream's last transaction, from its report: no
    /// response came after that transaction's to carry it.
    pub fn record_last(&mut self, server: ServerPart, stream: u32) -> Option<Logged> {
        let p = self.pending.take()?;
        self.join_part(p, server, stream)
    }

    /// TCP_CRR: a transaction and the server's part of it, which came on its own
    /// connection after the response.
    pub fn record_joined(
        &mut self,
        done: ClientPart,
        server: ServerPart,
        stream: u32,
    ) -> Option<Logged> {
        self.join_part(done, server, stream)
    }

    /// Join the client's part `p` with the server's `s`, if they are one transaction's.
    fn join_part(&mut self, p: ClientPart, s: ServerPart, stream: u32) -> Option<Logged> {
        if p.seq != s.seq {
            return None;
        }
        if let Some(v) = self.one_way.as_mut() {
            if let (Some(ctx), Some(crx), Some(srx), Some(stx)) =
                (p.sends.first, p.rx, s.rx_ns, s.tx_ns)
            {
                if v.len() < ONE_WAY_MAX {
                    let d = |a: u64, b: u64| (a as i128 - b as i128) as i64;
                    v.push((p.number, d(srx, ctx), d(crx, stx)));
                }
            }
        }
        match join(&p, &s) {
            Ok(t) => {
                self.add(&t);
                let l = Logged {
                    sent_unix_ns: p.sent,
                    seq: p.number,
                    stream,
                    t,
                };
                self.tail.offer(l);
                Some(l)
            }
            Err(Missing::Unstamped) => {
                self.unstamped += 1;
                None
            }
            Err(Missing::Inconsistent) => {
                self.inconsistent += 1;
                None
            }
        }
    }

    /// A TCP ACK stamp that came after its transaction was set aside.
    pub fn late_ack(&mut self, seq: u32, ns: u64) {
        if let Some(p) = self.pending.as_mut().filter(|p| p.seq == seq) {
            p.acked.get_or_insert(ns);
        }
    }

    fn add(&mut self, t: &Transaction) {
        self.stamped += 1;
        self.hist.rtt.record_ns(t.rtt_ns);
        self.hist.client_send.record_ns(t.client_send_ns);
        self.hist.network.record_ns(t.network_ns);
        self.hist.server_recv.record_ns(t.server_recv_ns);
        self.hist.server_app.record_ns(t.server_app_ns);
        self.hist.client_recv.record_ns(t.client_recv_ns);
        if let Some(a) = t.tcp_ack_ns {
            self.tcp_ack.record_ns(a);
        }
        if let Some(c) = t.connect_ns {
            self.connect.record_ns(c);
        }
        self.events.add(&t.events);
        self.bands.add(t);
    }

    /// Add another stream's.
    pub fn merge(&mut self, o: &Self) {
        self.hist.rtt.merge(&o.hist.rtt);
        self.hist.client_send.merge(&o.hist.client_send);
        self.hist.network.merge(&o.hist.network);
        self.hist.server_recv.merge(&o.hist.server_recv);
        self.hist.server_app.merge(&o.hist.server_app);
        self.hist.client_recv.merge(&o.hist.client_recv);
        self.tcp_ack.merge(&o.tcp_ack);
        self.connect.merge(&o.connect);
        self.stamped += o.stamped;
        self.unstamped += o.unstamped;
        self.inconsistent += o.inconsistent;
        self.events.merge(&o.events);
        self.bands.merge(&o.bands);
        self.tail.merge(&o.tail);
        self.tail_ppm = o.tail_ppm;
        if let (Some(v), Some(w)) = (self.one_way.as_mut(), o.one_way.as_ref()) {
            v.extend_from_slice(w);
        } else if self.one_way.is_none() {
            self.one_way.clone_from(&o.one_way);
        }
        self.answered = self.answered.or(o.answered);
    }

    /// UDP_RR's one-way delays, jitter and loss by direction. With `same_clock` (both
    /// ends on one kernel) the delays are exact; otherwise the clocks' offset is
    /// estimated from the transaction with the shortest network time, taken to be
    /// symmetric (NTP's assumption), and the result says so. `lost` is every request
    /// the client gave up on, `lost_tail` those after the last response (which no
    /// response's count can place).
    pub fn one_way(
        &self,
        same_clock: bool,
        lost: u64,
        lost_tail: u64,
        p: &[Percentile],
    ) -> Option<OneWay> {
        let v = self.one_way.as_ref().filter(|v| !v.is_empty())?;
        let offset = if same_clock {
            0
        } else {
            let &(_, f, b) = v.iter().min_by_key(|&&(_, f, b)| f.saturating_add(b))?;
            f.saturating_sub(b) / 2
        };
        let mut req = LatencyHistogram::new();
        let mut resp = LatencyHistogram::new();
        let mut ipdv_req = LatencyHistogram::new();
        let mut ipdv_resp = LatencyHistogram::new();
        let mut negative = 0u64;
        let mut prev: Option<(u64, i64, i64)> = None;
        for &(n, f, b) in v {
            // Saturating: the server's stamps are its word, and may be anything.
            let (f, b) = (f.saturating_sub(offset), b.saturating_add(offset));
            for (h, x) in [(&mut req, f), (&mut resp, b)] {
                match u64::try_from(x) {
                    Ok(x) => h.record_ns(x),
                    Err(_) => negative += 1,
                }
            }
            // RFC 3393: the variation between consecutive packets, as a magnitude.
            if let Some((_, pf, pb)) = prev.filter(|&(pn, _, _)| pn + 1 == n) {
                ipdv_req.record_ns(f.abs_diff(pf));
                ipdv_resp.record_ns(b.abs_diff(pb));
            }
            prev = Some((n, f, b));
        }
        let s = |h: &LatencyHistogram| Summary::from_histogram(h, p);
        let request_lost = self
            .answered
            .map_or(0, |(n, answered)| n.saturating_sub(u64::from(answered)));
        Some(OneWay {
            clock: if same_clock { "same" } else { "estimated" }.into(),
            offset_us: offset as f64 / 1e3,
            request: s(&req),
            response: s(&resp),
            ipdv_request: s(&ipdv_req),
            ipdv_response: s(&ipdv_resp),
            negative,
            request_lost,
            response_lost: lost.saturating_sub(lost_tail).saturating_sub(request_lost),
            unattributed_lost: lost_tail,
        })
    }

    /// The run's slowest share of transactions (after [`Self::merge`]ing every
    /// stream): the top ⌈stamped·P⌉ by round trip, in the order they were sent, and
    /// whether they are exactly those (false only past [`slowest::KEEP_MAX`]).
    pub fn slowest(&self) -> (Vec<Logged>, bool) {
        let (mut v, exact) = self.tail.top(tail_count(self.stamped, self.tail_ppm));
        v.sort_unstable_by_key(|l| (l.sent_unix_ns, l.stream, l.seq));
        (v, exact)
    }

    /// The result: each component's statistics, and what made the slowest transactions
    /// slow.
    pub fn result(&self, p: &[Percentile], tcp: bool) -> AnatomyResult {
        let s = |h: &LatencyHistogram| Summary::from_histogram(h, p);
        AnatomyResult {
            one_way: None,
            tail: self.tail(),
            stamped: self.stamped,
            unstamped: self.unstamped,
            inconsistent: self.inconsistent,
            events: self.events,
            at_percentiles: p
                .iter()
                .filter_map(|&q| self.bands.composition(q))
                .collect(),
            components: Components {
                rtt: s(&self.hist.rtt),
                client_send: s(&self.hist.client_send),
                network: s(&self.hist.network),
                server_recv: s(&self.hist.server_recv),
                server_app: s(&self.hist.server_app),
                client_recv: s(&self.hist.client_recv),
            },
            tcp_ack: tcp.then(|| s(&self.tcp_ack)),
            connect: (self.connect.count() > 0).then(|| s(&self.connect)),
        }
    }
}

impl Recorder {
    /// Each slow transaction's cause is its component furthest above that component's
    /// median (the delay it added); the table gives each cause's share of the tail and
    /// the mean delay it added.
    fn tail(&self) -> Option<Tail> {
        let (slow, exact) = self.slowest();
        let tcp = self.one_way.is_none();
        let first = slow.iter().map(|l| l.t.rtt_ns).min()?;
        let median = |h: &LatencyHistogram| h.quantile_ns(0.5).unwrap_or(0);
        let h = &self.hist;
        let medians = [
            median(&h.client_send),
            median(&h.network),
            median(&h.server_recv),
            median(&h.server_app),
            median(&h.client_recv),
        ];
        // (component, event) → (transactions, added ns)
        type Key = (usize, Option<&'static str>);
        let mut by_cause: Vec<(Key, (u64, u64))> = Vec::new();
        for l in &slow {
            let t = &l.t;
            let values = [
                t.client_send_ns,
                t.network_ns,
                t.server_recv_ns,
                t.server_app_ns,
                t.client_recv_ns,
            ];
            let (i, extra) = values
                .iter()
                .zip(medians)
                .map(|(v, m)| v.saturating_sub(m))
                .enumerate()
                .max_by_key(|&(_, extra)| extra)
                .unwrap_or((0, 0));
            let key = (i, t.events.cause(i, t, tcp));
            match by_cause.iter_mut().find(|(k, _)| *k == key) {
                Some((_, (n, a))) => {
                    *n += 1;
                    *a += extra;
                }
                None => by_cause.push((key, (1, extra))),
            }
        }
        let n = slow.len() as f64;
        let names = self.hist.parts().map(|(name, _)| name);
        let mut causes: Vec<Cause> = by_cause
            .into_iter()
            .map(|((i, event), (count, added))| Cause {
                component: names[i].into(),
                event: event.map(Into::into),
                share_pct: 100.0 * count as f64 / n,
                mean_added_us: added as f64 / count as f64 / 1e3,
            })
            .collect();
        causes.sort_by(|a, b| b.share_pct.total_cmp(&a.share_pct));
        let share_pct = f64::from(self.tail_ppm) / f64::from(PPM_PER_PCT);
        let q = 1.0 - f64::from(self.tail_ppm) / 1e6;
        Some(Tail {
            transactions: slow.len() as u64,
            share_pct,
            from_rtt_us: first as f64 / 1e3,
            rtt_percentile_us: self.hist.rtt.quantile_ns(q).map(|v| v as f64 / 1e3),
            exact,
            causes,
        })
    }
}

/// UDP_RR's one-way delays (irtt's view): each direction's delay, its variation
/// between consecutive transactions (IPDV, RFC 3393, as a magnitude) and its losses.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OneWay {
    /// "same": both ends read one clock (one kernel), the delays are exact;
    /// "estimated": the offset between the clocks is estimated (see `offset_us`).
    pub clock: String,
    /// Server clock minus client clock, as used.
    pub offset_us: f64,
    pub request: Summary,
    pub response: Summary,
    pub ipdv_request: Summary,
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
    /// the transactions a run keeps, [`slowest::KEEP_MAX`], and in records before it,
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

/// The kind of `--slow-log`'s lines (`results::schema::RR_SLOW` names it with the
/// others; it is defined here, below them, because the probe writes the file).
pub const SLOW_SCHEMA: &str = "rttlab.rr-slow/1";

/// `--slow-log FILE`: slow transactions' anatomies as JSON lines (`rttlab.rr-slow/1`),
/// every one over a threshold as it happens, or the run's slowest share at the end.
pub struct SlowLog {
    /// Log every transaction at least this slow as it is joined; without one, the
    /// run's slowest share is written at its end.
    pub threshold_ns: Option<u64>,
    out: std::sync::Mutex<std::io::BufWriter<std::fs::File>>,
}

impl SlowLog {
    /// Create `path` anew (a fresh file renamed into place: never one a symlink
    /// points to).
    ///
    /// # Errors
    /// The file cannot be created, or `path` is a symlink.
    pub fn create(
        path: &std::path::Path,
        threshold_ns: Option<u64>,
    ) -> Result<Self, crate::kernel::fs::FileError> {
        Ok(Self {
            threshold_ns,
            out: std::sync::Mutex::new(std::io::BufWriter::new(crate::kernel::fs::create_replace(
                path,
            )?)),
        })
    }

    /// Log `l` if it is over the threshold.
    pub fn offer(&self, l: &Logged) {
        if self.threshold_ns.is_some_and(|t| l.t.rtt_ns >= t) {
            self.write(l);
        }
    }

    /// Write one line (a full disk loses lines, never the run).
    pub fn write(&self, l: &Logged) {
        use std::io::Write;
        #[derive(Serialize)]
        struct Line<'a> {
            schema: &'static str,
            #[serde(flatten)]
            l: &'a Logged,
        }
        if let Ok(line) = serde_json::to_string(&Line {
            schema: SLOW_SCHEMA,
            l,
        }) {
            if let Ok(mut o) = self.out.lock() {
                let _ = writeln!(o, "{line}");
            }
        }
    }

    /// Flush what is buffered.
    ///
    /// # Errors
    /// The file could not be written.
    pub fn finish(&self) -> std::io::Result<()> {
        use std::io::Write;
        match self.out.lock() {
            Ok(mut o) => o.flush(),
            Err(_) => Err(std::io::Error::other("the slow log's writer panicked")),
        }
    }
}

/// One value per component, in the order a transaction passes through them (`rtt`,
/// their sum, first).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Components<T> {
    /// The round trip the components add up to (CLOCK_REALTIME, send() → recv()).
    pub rtt: T,
    pub client_send: T,
    pub network: T,
    pub server_recv: T,
    pub server_app: T,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn part_of(seq: u32) -> ServerPart {
        ServerPart {
            seq,
            recv_ns: None,
            app_ns: None,
            answered: seq,
            ..ServerPart::default()
        }
    }

    /// Witness: arithmetic on stamps written by hand.
    #[test]
    fn components_add_up_to_the_round_trip() {
        let c = ClientPart {
            seq: 7,
            number: 7,
            sent: 1_000,
            sends: Sends::once(1_010),
            rx: Some(1_500),
            returned: 1_530,
            acked: Some(1_480),
            ..ClientPart::default()
        };
        let s = ServerPart {
            seq: 7,
            recv_ns: Some(40),
            app_ns: Some(60),
            ..part_of(7)
        };
        let t = join(&c, &s).unwrap();
        assert_eq!(t.rtt_ns, 530);
        assert_eq!(
            (
                t.client_send_ns,
                t.network_ns,
                t.server_recv_ns,
                t.server_app_ns,
                t.client_recv_ns
            ),
            (10, 390, 40, 60, 30)
        );
        assert_eq!(
            t.client_send_ns + t.network_ns + t.server_recv_ns + t.server_app_ns + t.client_recv_ns,
            t.rtt_ns
        );
        assert_eq!(t.tcp_ack_ns, Some(470));
        let unstamped = ClientPart { rx: None, ..c };
        assert_eq!(join(&unstamped, &s), Err(Missing::Unstamped));
        // The server says it held the request longer than the path took: a clock moved.
        let long = ServerPart {
            app_ns: Some(600),
            ..s
        };
        assert_eq!(join(&c, &long), Err(Missing::Inconsistent));
    }

    #[test]
    fn the_trailer_round_trips_and_the_first_response_carries_none() {
        let mut resp = vec![0u8; MIN_RESPONSE as usize];
        assert_eq!(ServerPart::read(&resp), None);
        let p = ServerPart {
            seq: 3,
            recv_ns: Some(12),
            app_ns: None,
            answered: 4,
            rx_ns: Some(1_795_000_000_000_000_000),
            tx_ns: None,
            retransmissions: 2,
            retransmitted_after_us: Some(600_000),
            migrated: true,
            tlp: true,
            rtos: Some(1),
            recovery: 0,
        };
        p.write(&mut resp);
        assert_eq!(ServerPart::read(&resp), Some(p));
        // A long response: its loss recovery's count, and its last segment sent once.
        let long = ServerPart {
            retransmissions: 7,
            retransmitted_after_us: None,
            recovery: 6,
            ..p
        };
        long.write(&mut resp);
        assert_eq!(ServerPart::read(&resp), Some(long));
        // A kernel that counts no RTOs: none said, not zero.
        let uncounted = ServerPart { rtos: None, ..p };
        uncounted.write(&mut resp);
        assert_eq!(ServerPart::read(&resp), Some(uncounted));
        // UDP_RR's echoed sequence wraps through 0 (one byte for 1-byte requests).
        let zero = ServerPart { seq: 0, ..p };
        zero.write(&mut resp);
        assert_eq!(ServerPart::read(&resp), Some(zero));
        assert_eq!(ServerPart::read(&resp[..10]), None);
        // A server whose RX stamp sits at the clock's end: its TX stamp would lie past
        // it, so there is none (witness: arithmetic, u64::MAX + 12 does not fit).
        let end = ServerPart {
            rx_ns: Some(u64::MAX),
            recv_ns: Some(12),
            app_ns: Some(0),
            ..p
        };
        end.write(&mut resp);
        assert_eq!(ServerPart::read(&resp).map(|p| p.tx_ns), Some(None));
    }

    #[test]
    fn the_server_reports_the_previous_transaction() {
        let mut s = ServerStamps::default();
        assert_eq!(s.next(1, Some(100), 130, 0, Sends::default(), 1), None);
        let mut sends = Sends::once(190);
        sends.add(210_190);
        let p = s.next(2, Some(500), 520, 1, sends, 2).unwrap();
        assert_eq!(
            p,
            ServerPart {
                seq: 1,
                recv_ns: Some(30),
                app_ns: Some(60),
                answered: 2,
                rx_ns: Some(100),
                tx_ns: Some(190),
                retransmissions: 1,
                retransmitted_after_us: Some(210),
                // Transaction 1 was the first: nothing to have migrated from.
                migrated: false,
                tlp: false,
                rtos: None,
                recovery: 0,
            }
        );
        // At the end, transaction 2's part (read on CPU 1 after 0: migrated), once.
        let last = s.last(Sends::once(580), 2).unwrap();
        assert_eq!(
            (last.seq, last.recv_ns, last.app_ns, last.migrated),
            (2, Some(20), Some(60), true)
        );
        assert_eq!(s.last(Sends::default(), 2), None);
        // In the report: the trailer's bytes, and nothing from too few of them.
        let peer = "127.0.0.1:40000".parse().unwrap();
        assert_eq!(LastPart::new(peer, &last).part(), Some(last));
        let short = LastPart {
            peer,
            trailer: vec![1; 12],
        };
        assert_eq!(short.part(), None);
    }

    #[test]
    fn the_recorder_joins_by_number_and_counts_what_it_cannot() {
        let mut r = Recorder::default();
        let part = |seq: u32, sent| ClientPart {
            seq,
            number: u64::from(seq),
            sent,
            sends: Sends::once(sent + 5),
            rx: Some(sent + 95),
            returned: sent + 100,
            acked: None,
            ..ClientPart::default()
        };
        r.record(part(1, 0), None, 0);
        r.record(
            part(2, 1_000),
            Some(ServerPart {
                seq: 1,
                recv_ns: Some(10),
                app_ns: Some(20),
                ..part_of(0)
            }),
            0,
        );
        assert_eq!(r.stamped, 1);
        assert_eq!(r.hist.network.count(), 1);
        // A part for another transaction (UDP: the one before was lost) joins nothing.
        r.record(
            part(3, 2_000),
            Some(ServerPart {
                seq: 1,
                recv_ns: Some(10),
                app_ns: Some(20),
                ..part_of(0)
            }),
            0,
        );
        assert_eq!(r.stamped, 1);
        r.record(
            part(4, 3_000),
            Some(ServerPart {
                seq: 3,
                recv_ns: None,
                app_ns: Some(20),
                ..part_of(3)
            }),
            0,
        );
        assert_eq!(r.unstamped, 1);
    }

    /// Witness: arithmetic. Two clocks 1 s apart, a path of 3 ms out and 7 ms back:
    /// with the clocks taken as one the delays carry the offset; estimated from the
    /// fastest transaction (whose path is taken as symmetric) the offset is found.
    /// One request lost on the way out, one response on the way back.
    #[test]
    fn one_way_delays_and_loss_by_direction() {
        let offset: u64 = 1_000_000_000;
        let mut r = Recorder::new(TailPlan::default(), true);
        let mut server = None;
        let mut answered = 0;
        for n in 1..=50u64 {
            if n == 20 {
                continue; // request lost: never answered
            }
            answered += 1;
            let sent = n * 100_000_000;
            let (out, back) = if n == 10 {
                (5_000_000, 5_000_000)
            } else {
                (3_000_000 + n, 7_000_000)
            };
            let srx = sent + 100 + out + offset;
            let stx = srx + 1_000;
            let part = ClientPart {
                seq: n as u32,
                number: n,
                sent,
                sends: Sends::once(sent + 100),
                rx: Some(stx - offset + back),
                returned: stx - offset + back + 50,
                acked: None,
                ..ClientPart::default()
            };
            let s = server.map(|p: ServerPart| ServerPart { answered, ..p });
            r.record(part, s, 0);
            server = Some(ServerPart {
                seq: n as u32,
                recv_ns: Some(500),
                app_ns: Some(500),
                answered,
                rx_ns: Some(srx),
                tx_ns: Some(stx),
                ..ServerPart::default()
            });
        }
        let p = [Percentile(50.0)];
        let same = r.one_way(true, 2, 0, &p).unwrap();
        assert_eq!(same.negative, 48, "every response 'arrives before it left'");
        let w = r.one_way(false, 2, 0, &p).unwrap();
        assert_eq!(w.clock, "estimated");
        // The fastest transaction is n = 10 (5 + 5 ms): symmetric, so the offset is exact.
        assert_eq!(w.offset_us, 1_000_000.0);
        assert!((w.request.percentile_us(Percentile(50.0)).unwrap() - 3_000.0).abs() < 5.0);
        assert!((w.response.percentile_us(Percentile(50.0)).unwrap() - 7_000.0).abs() < 10.0);
        // Consecutive forward delays differ by 1 ns (3 ms + n).
        assert!(w.ipdv_request.percentile_us(Percentile(50.0)).unwrap() < 0.01);
        assert_eq!((w.request_lost, w.response_lost), (1, 1));
    }

    /// Witness: arithmetic on stamps written by hand, and the kernel's rules the
    /// events stand for (a second SND stamp of a byte is its retransmission; an ACK
    /// alone ≥ 40 ms after the request is the delayed-ACK timer's).
    #[test]
    fn events_say_what_touched_a_transaction() {
        let mut sends = Sends::once(1_000);
        sends.add(201_000_000);
        sends.add(601_000_000);
        let c = ClientPart {
            seq: 1,
            number: 1,
            sent: 900,
            rx: Some(700_000_000),
            returned: 700_000_100,
            acked: Some(650_000_000),
            sends,
            cpu_sent: 0,
            cpu_returned: 1,
            tlp: false,
            connect_ns: None,
        };
        let s = ServerPart {
            seq: 1,
            recv_ns: Some(100),
            app_ns: Some(100),
            retransmissions: 1,
            retransmitted_after_us: Some(200_000),
            ..part_of(1)
        };
        let e = join(&c, &s).unwrap().events;
        assert_eq!(
            (e.request_retransmissions, e.request_retransmitted_after_us),
            (2, Some(600_999))
        );
        assert_eq!(
            (
                e.response_retransmissions,
                e.response_retransmitted_after_us
            ),
            (1, Some(200_000))
        );
        assert!(e.client_migrated && !e.server_migrated);
        // The ACK came alone, but after the request was sent again: not the timer's.
        assert!(!e.delayed_ack);
        // Without tail loss probes (the parts say none), every one was an RTO.
        assert_eq!(e.by_kind(), (0, 3, 0));
        // Waited for: the network part (~700 ms) outlasts the last copies (601, 200 ms).
        let t = join(&c, &s).unwrap();
        assert_eq!(e.cause(1, &t, true), Some("rto"));
        // The client's wake-up, on another CPU: a migration, not the retransmission.
        assert_eq!(e.cause(4, &t, true), Some("migration"));
        assert_eq!(e.cause(3, &t, true), None, "the server's own time");
        // A copy sent after the response was on its way (an ACK lost): spurious, it
        // cost nothing.
        let quick = Transaction {
            network_ns: 150_000_000,
            ..t
        };
        assert_eq!(e.cause(1, &quick, true), None);
        // A request held 45 ms in the client's stack waited for an ACK (Nagle, a
        // window): the peer's delayed-ACK timer's. Not on UDP, which has none.
        let held = join(
            &ClientPart {
                sends: Sends::once(45_000_900),
                acked: Some(46_000_000),
                ..c
            },
            &ServerPart {
                retransmissions: 0,
                retransmitted_after_us: None,
                ..s
            },
        )
        .unwrap();
        assert!(held.events.delayed_ack);
        assert_eq!(held.events.cause(0, &held, true), Some("delayed_ack"));
        assert_eq!(held.events.cause(0, &held, false), None);
        assert_eq!(e.cause(0, &t, true), None, "sent at once");
        let probed = join(
            &ClientPart { tlp: true, ..c },
            &ServerPart { tlp: true, ..s },
        )
        .unwrap()
        .events;
        assert_eq!((probed.request_tlp, probed.response_tlp), (true, true));
        assert_eq!(probed.by_kind(), (2, 1, 0));
        // Where the kernels counted their RTOs, the counts decide: a client that
        // probes but whose two retransmissions were both RTOs (an earlier probe still
        // unresolved), a server whose one was not.
        let counted = join(
            &ClientPart {
                tlp: true,
                sends: Sends {
                    rtos: Some(2),
                    ..c.sends
                },
                ..c
            },
            &ServerPart {
                tlp: false,
                rtos: Some(0),
                ..s
            },
        )
        .unwrap()
        .events;
        assert_eq!((counted.request_tlp, counted.response_tlp), (false, true));
        assert_eq!(counted.by_kind(), (1, 2, 0));
        // Long messages: the kernel counted 5 request segments sent again, one by the
        // RTO timer, and 3 response segments, none by it; the rest were loss recovery,
        // and no probe is claimed (tcp_info does not tell one apart).
        let long = join(
            &ClientPart {
                tlp: true,
                sends: Sends {
                    again: 5,
                    rtos: Some(1),
                    recovery: 4,
                    ..c.sends
                },
                ..c
            },
            &ServerPart {
                tlp: true,
                retransmissions: 3,
                rtos: Some(0),
                recovery: 3,
                ..s
            },
        )
        .unwrap()
        .events;
        assert_eq!((long.request_tlp, long.response_tlp), (false, false));
        assert_eq!(long.by_kind(), (0, 1, 7));
        let recovered = Events {
            response_retransmissions: 2,
            response_recovery: 2,
            ..Events::default()
        };
        assert_eq!(recovered.by_kind(), (0, 0, 2));
        // The last segment went once (no time known): the message waited for the rest.
        assert_eq!(recovered.cause(1, &t, true), Some("recovery"));
        let quiet = Events {
            client_migrated: true,
            ..Events::default()
        };
        assert_eq!(quiet.cause(4, &t, false), Some("migration"));
        assert_eq!(quiet.cause(2, &t, true), None, "the server did not move");
        assert_eq!(quiet.cause(1, &t, true), None, "nothing sent again");
        // Sent once, its ACK alone 650 ms later, before the response: the timer's.
        let once = ClientPart {
            sends: Sends::once(1_000),
            ..c
        };
        let alone = ServerPart {
            retransmissions: 0,
            retransmitted_after_us: None,
            ..s
        };
        assert!(join(&once, &alone).unwrap().events.delayed_ack);
        // The piggybacked ACK (with the response) is no delayed ACK.
        let piggy = ClientPart {
            acked: Some(700_000_000),
            ..once
        };
        assert!(!join(&piggy, &alone).unwrap().events.delayed_ack);
        let mut counts = EventCounts::default();
        counts.add(&e);
        counts.add(&quiet);
        assert_eq!(
            (
                counts.retransmitted,
                counts.request_retransmissions,
                counts.response_retransmissions,
                counts.client_migrated
            ),
            (1, 2, 1, 2)
        );
    }

    /// Witness: arithmetic. 200 transactions, two of them slow, one by its server's
    /// think time and one by its network: the tail is those two, one cause each.
    #[test]
    fn the_tail_names_each_slow_transactions_cause() {
        let mut r = Recorder::new(TailPlan::default(), false);
        let mut server = None;
        for seq in 1..=201u32 {
            let sent = u64::from(seq) * 10_000;
            let (net, app) = match seq {
                50 => (90, 5_000),
                120 => (8_000, 20),
                _ => (90, 20),
            };
            let part = ClientPart {
                seq,
                number: u64::from(seq),
                sent,
                sends: Sends::once(sent + 5),
                rx: Some(sent + 5 + net + 10 + app),
                returned: sent + 5 + net + 10 + app + 7,
                acked: None,
                ..ClientPart::default()
            };
            r.record(part, server, 0);
            server = Some(ServerPart {
                seq,
                recv_ns: Some(10),
                app_ns: Some(app as u32),
                // Transaction 120's response was sent again.
                retransmissions: u8::from(seq == 120),
                ..part_of(seq)
            });
        }
        assert_eq!(r.stamped, 200);
        assert_eq!(r.events.retransmitted, 1);
        let (slow, exact) = r.slowest();
        assert!(exact);
        assert_eq!(slow.iter().map(|l| l.seq).collect::<Vec<_>>(), [50, 120]);
        let tail = r.tail().unwrap();
        assert_eq!(tail.transactions, 2);
        let names: Vec<_> = tail.causes.iter().map(|c| c.component.as_str()).collect();
        assert!(
            names.contains(&"server_app") && names.contains(&"network"),
            "{names:?}"
        );
        let app = tail
            .causes
            .iter()
            .find(|c| c.component == "server_app")
            .unwrap();
        assert_eq!(app.share_pct, 50.0);
        assert!((app.mean_added_us - 4.98).abs() < 0.01, "{app:?}");
        assert_eq!(app.event, None);
        let net = tail.causes.iter().find(|c| c.component == "network");
        assert_eq!(net.unwrap().event.as_deref(), Some("rto"));
        // Witness: arithmetic. P50 is one of the 198 ordinary transactions (145 ns:
        // 5 + 90 + 10 + 20 + 7 + the server's 10 + 3 of rounding in the hand-made
        // stamps); P99.9 is the slowest band, transaction 120 alone.
        let c = r.bands.composition(Percentile(50.0)).unwrap();
        assert_eq!(c.transactions, 198);
        assert!((c.parts_us.network * 1e3 - 90.0).abs() < 1e-9, "{c:?}");
        let top = r.bands.composition(Percentile(99.9)).unwrap();
        assert_eq!(top.transactions, 1);
        assert!(
            (top.parts_us.network * 1e3 - 8_000.0).abs() < 1e-9,
            "{top:?}"
        );
        for c in [&c, &top] {
            let sum: f64 = c.parts_us.parts().iter().map(|(_, v)| **v).sum();
            assert!((sum - c.parts_us.rtt).abs() < 1e-9, "{c:?}");
        }
    }
}
