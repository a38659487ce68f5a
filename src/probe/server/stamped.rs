//! `--anatomy`'s hooks on the serving loop (`super::serving`): every request read with
//! its RX stamp, and the server's part of each transaction sent to the client: in the
//! next response (TCP_RR, UDP_RR; the last one's in the server's report), or after the
//! response once it is acknowledged (TCP_CRR, whose connection has no next response).

use super::serving::{
    Accepting, Connection, Datagrams, Hook, Service, ThreadCounters, Transport, POLL_TICK,
};
use crate::probe::anatomy::{
    current_cpu, probes_tail_loss, LastPart, RetransCounters, Sends, ServerStamps, MIN_RESPONSE,
    NO_RETRANSMISSION_WITHIN_NS, TRAILER_AT, TRAILER_LEN,
};
use crate::probe::io::write_full;
use crate::probe::stamps::{self, TxKind};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// A request's arrival on the server's clock.
#[derive(Default)]
struct Arrival {
    /// The RX stamp of its last packet.
    rx: Option<u64>,
    /// `recv()` returned it whole.
    returned: u64,
    cpu: u32,
}

impl Arrival {
    #[inline]
    fn now(rx: Option<u64>) -> Self {
        Self {
            rx,
            returned: crate::kernel::realtime_ns(),
            cpu: current_cpu(),
        }
    }
}

/// Write the server's part into a response, or zeros where there is none (the
/// client counts the transaction unstamped).
fn carry(part: Option<crate::probe::anatomy::ServerPart>, resp: &mut [u8]) {
    match part {
        Some(p) => p.write(resp),
        None => resp[TRAILER_AT..TRAILER_AT + TRAILER_LEN].fill(0),
    }
}

/// TCP_RR: the stream's connection stamped; each response carries the server's part
/// of the transaction before it.
pub(super) struct RrStamps {
    book: ServerStamps,
    /// The client's end, read while the connection is up: once the client has closed
    /// it and the test's end has shut it down, the socket can no longer name it.
    peer: Option<std::net::SocketAddr>,
    retrans: RetransCounters,
    arrival: Arrival,
    resp_len: u64,
}

impl RrStamps {
    /// Stamps on `c`'s connection; `None` when the kernel refuses them (the stream is
    /// then served plain, and the client counts its transactions unstamped).
    pub(super) fn open(c: &Connection, svc: &Service) -> Option<Self> {
        let fd = c.0.as_raw_fd();
        stamps::enable(fd, false).ok()?;
        let resp_len = u64::from(svc.spec.response_size);
        let mut book = ServerStamps::default();
        book.tlp = probes_tail_loss(fd);
        Some(Self {
            book,
            peer: c.0.peer_addr().ok(),
            retrans: RetransCounters::new(fd, resp_len),
            arrival: Arrival::default(),
            resp_len,
        })
    }

    /// The SND stamps of response `n` (its last byte's offset from 0), read once the
    /// request after it arrived at `rx`.
    fn sends(&mut self, fd: RawFd, n: u64, rx: Option<u64>) -> Sends {
        let want = (n * self.resp_len).wrapping_sub(1) as u32;
        let mut sends = previous_sends(fd, want, rx);
        self.retrans.note(fd, &mut sends);
        sends
    }
}

impl Hook<Connection> for RrStamps {
    const STAMPED: bool = true;

    #[inline]
    fn arrived(&mut self, rx: Option<u64>) {
        self.arrival = Arrival::now(rx);
    }

    fn fill(&mut self, t: &Connection, _req: &[u8], resp: &mut [u8], answered: u64) {
        let a = &self.arrival;
        let (rx, returned, cpu) = (a.rx, a.returned, a.cpu);
        let sends = self.sends(t.fd(), answered, rx);
        let seq = u32::try_from(answered + 1).unwrap_or(u32::MAX);
        carry(self.book.next(seq, rx, returned, cpu, sends, seq), resp);
    }

    /// The last response's stamps have long come (the client read it before ending).
    fn finish(mut self, t: &Connection, c: &mut ThreadCounters) {
        let sends = self.sends(t.fd(), c.transactions, None);
        let answered = u32::try_from(c.transactions).unwrap_or(u32::MAX);
        c.last_parts.extend(
            self.book
                .last(sends, answered)
                .zip(self.peer)
                .map(|(p, peer)| LastPart::new(peer, &p)),
        );
    }
}

/// UDP_RR: the socket stamped; each response carries the server's part of the
/// transaction before it.
pub(super) struct UdpStamps {
    book: ServerStamps,
    arrival: Arrival,
}

impl UdpStamps {
    /// Stamps on the test's socket; `None` when the kernel refuses them (served plain).
    pub(super) fn open(d: &Datagrams<'_>) -> Option<Self> {
        stamps::enable(d.fd(), false).ok()?;
        Some(Self {
            book: ServerStamps::default(),
            arrival: Arrival::default(),
        })
    }
}

impl Hook<Datagrams<'_>> for UdpStamps {
    const STAMPED: bool = true;

    #[inline]
    fn arrived(&mut self, rx: Option<u64>) {
        self.arrival = Arrival::now(rx);
    }

    fn fill(&mut self, t: &Datagrams<'_>, req: &[u8], resp: &mut [u8], answered: u64) {
        let a = &self.arrival;
        // The previous response's SND stamp: datagrams are numbered from 0.
        let sends = previous_sends(t.fd(), answered.wrapping_sub(1) as u32, a.rx);
        let mut seq = [0u8; 8];
        seq[..t.echo].copy_from_slice(&req[..t.echo]);
        let seq = u64::from_le_bytes(seq) as u32;
        let answered = u32::try_from(answered + 1).unwrap_or(u32::MAX);
        let part = self
            .book
            .next(seq, a.rx, a.returned, a.cpu, sends, answered);
        carry(part, resp);
    }

    fn finish(mut self, t: &Datagrams<'_>, c: &mut ThreadCounters) {
        // The last response's SND stamp: datagrams are numbered from 0.
        let sends = previous_sends(t.fd(), c.transactions.wrapping_sub(1) as u32, None);
        let answered = u32::try_from(c.transactions).unwrap_or(u32::MAX);
        c.last_parts.extend(
            self.book
                .last(sends, answered)
                .zip(t.last_peer)
                .map(|(p, peer)| LastPart::new(peer, &p)),
        );
    }
}

/// TCP_CRR: each connection stamped; after the response, once it is acknowledged
/// (every copy of it sent by then), the server's part of this one transaction in a
/// message of [`MIN_RESPONSE`] bytes.
pub(super) struct CrrStamps {
    /// Every connection from the same client negotiates the same: asked once.
    tlp: Option<bool>,
    retrans: Option<RetransCounters>,
    arrival: Arrival,
    arrived_at: Instant,
    resp_len: u32,
}

impl CrrStamps {
    /// The listener's stamping keeps the kernel's receive stamps on between
    /// connections (it turns them on lazily, for every socket at once); without it
    /// the first responses only would have their stamps.
    pub(super) fn open(t: &Accepting<'_>, svc: &Service) -> Self {
        let _ = stamps::hold_rx(t.listener.as_raw_fd());
        Self {
            tlp: None,
            retrans: None,
            arrival: Arrival::default(),
            arrived_at: Instant::now(),
            resp_len: svc.spec.response_size,
        }
    }
}

impl Hook<Accepting<'_>> for CrrStamps {
    const STAMPED: bool = true;

    /// Numbers this connection's bytes from 0 (OPT_ID counts from the setsockopt);
    /// TX ACK: the response's ACK says no copy of it will follow.
    fn connected(&mut self, fd: RawFd) -> bool {
        if stamps::enable(fd, true).is_err() {
            return false;
        }
        // The handshake's retransmissions (a SYN-ACK sent again) are not the response's.
        self.retrans = Some(RetransCounters::new(fd, u64::from(self.resp_len)));
        self.tlp.get_or_insert_with(|| probes_tail_loss(fd));
        true
    }

    #[inline]
    fn arrived(&mut self, rx: Option<u64>) {
        self.arrival = Arrival::now(rx);
        self.arrived_at = Instant::now();
    }

    fn responded(&mut self, t: &mut Accepting<'_>, svc: &Service, stop: &AtomicBool) -> bool {
        let fd = t.fd();
        let at = self.arrived_at;
        let keep = || !stop.load(Ordering::Relaxed) && at.elapsed() < svc.idle;
        let Some(mut sends) = acked_sends(fd, self.resp_len.wrapping_sub(1), keep) else {
            return false;
        };
        if let Some(r) = self.retrans.as_mut() {
            r.note(fd, &mut sends);
        }
        let a = &self.arrival;
        let mut book = ServerStamps::default();
        book.tlp = self.tlp.unwrap_or(false);
        book.next(1, a.rx, a.returned, a.cpu, Sends::default(), 1);
        let mut part = [0u8; MIN_RESPONSE as usize];
        if let Some(p) = book.next(2, None, a.returned, a.cpu, sends, 1) {
            p.write(&mut part);
        }
        let Some(s) = t.conn.as_mut() else {
            return false;
        };
        write_full(s, &part, || !stop.load(Ordering::Relaxed)).is_ok()
    }
}

/// The SND stamps of byte `want` of a message just sent, read until its ACK stamp:
/// every copy of it the kernel sent (a retransmission comes before the ACK it earns).
/// `None` when `keep` stops the wait first (the client went quiet or the run ended),
/// or the connection hung up (a reset) before the ACK came.
fn acked_sends(fd: RawFd, want: u32, keep: impl Fn() -> bool) -> Option<Sends> {
    let mut sends = Sends::default();
    let mut acked = false;
    let mut hung_up = false;
    loop {
        let _ = stamps::drain_tx(fd, |t| {
            if t.id == want {
                match t.kind {
                    TxKind::Sent => sends.add(t.ns),
                    TxKind::Acked => acked = true,
                }
            }
            acked
        });
        if acked {
            return Some(sends);
        }
        // Hung up (tcp_poll: reset, or shut both ways): every stamp it will ever have
        // was in the queue just drained, so the ACK's will not come; and poll() would
        // return at once from here on, spinning.
        if hung_up || !keep() {
            return None;
        }
        // An error-queue entry shows as POLLERR.
        let mut p = libc::pollfd {
            fd,
            events: 0,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the call's duration.
        unsafe { libc::poll(&mut p, 1, POLL_TICK.as_millis() as libc::c_int) };
        hung_up = p.revents & libc::POLLHUP != 0;
    }
}

/// The SND stamps of the previous response (OPT_ID `want`), read once the request
/// after it arrived (RX stamp `rx`): its first, and any retransmission, which comes
/// only from a timer and so only when that request came
/// [`NO_RETRANSMISSION_WITHIN_NS`] or later after the response left.
fn previous_sends(fd: RawFd, want: u32, rx: Option<u64>) -> Sends {
    let mut sends = Sends::default();
    let _ = stamps::drain_tx(fd, |t| {
        if t.kind == TxKind::Sent && t.id == want {
            sends.add(t.ns);
        }
        sends.first.is_some_and(|first| {
            rx.is_some_and(|rx| rx.saturating_sub(first) < NO_RETRANSMISSION_WITHIN_NS)
        })
    });
    sends
}
