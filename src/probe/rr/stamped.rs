//! `--anatomy`'s hooks on the TCP transactions (`super::tcp`): each read with the
//! kernel's stamps and joined to the server's part of it (`probe::anatomy`). TCP_RR's
//! server part rides in the next response; TCP_CRR's follows the response on the same
//! connection.

use super::closed::Ctx;
use super::outcome::{StreamError, StreamOutcome};
use super::tcp::Hook;
use crate::probe::anatomy::{
    current_cpu, probes_tail_loss, ClientPart, Recorder, RetransCounters, Sends, ServerPart,
    MIN_RESPONSE,
};
use crate::probe::io::{read_full, ReadEnd};
use crate::probe::stamps::{self, TxKind};
use std::io;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};

/// The client's side of one request → response, on its own clock.
#[derive(Default)]
pub(super) struct Clock {
    cpu_sent: u32,
    /// Just before `send()`.
    sent: u64,
    /// The RX stamp of the response's last packet.
    rx: Option<u64>,
    /// `recv()` returned the whole response.
    returned: u64,
    cpu_returned: u32,
}

impl Clock {
    #[inline]
    fn sending(&mut self) {
        self.cpu_sent = current_cpu();
        self.sent = crate::kernel::realtime_ns();
    }

    #[inline]
    fn received(&mut self, rx: Option<u64>) {
        self.rx = rx;
        self.returned = crate::kernel::realtime_ns();
        self.cpu_returned = current_cpu();
    }

    /// The transaction as the anatomy keeps it, its request's stamps still to read.
    fn part(&self, seq: u32, number: u64, tlp: bool, connect_ns: Option<u64>) -> ClientPart {
        ClientPart {
            seq,
            number,
            sent: self.sent,
            rx: self.rx,
            returned: self.returned,
            acked: None,
            sends: Sends::default(),
            cpu_sent: self.cpu_sent,
            cpu_returned: self.cpu_returned,
            tlp,
            connect_ns,
        }
    }
}

/// `--anatomy` on a TCP test: every response read with its RX stamp, the client's
/// clock at each stamp point, and what the test `K` does with them.
pub(super) struct Stamps<K> {
    clock: Clock,
    kind: K,
}

/// What a TCP test does with its stamps: where the server's part of a transaction
/// comes from, and how a connection is set up for stamping.
pub(super) trait Kind: Sized {
    /// The stream's state before its first transaction.
    ///
    /// # Errors
    /// The kernel refused what the stamps need.
    fn open(cx: &Ctx<'_>) -> Result<Self, StreamError>;

    /// A new connection, stamped from here.
    ///
    /// # Errors
    /// The kernel refused the stamps on it.
    fn connected(&mut self, fd: RawFd) -> Result<(), StreamError>;

    /// A transaction begins (before TCP_CRR's connection).
    #[inline]
    fn begin(&mut self) {}

    /// The transaction `number`, its response `resp` read whole at `clock`.
    fn answered(
        &mut self,
        clock: &Clock,
        cx: &Ctx<'_>,
        sock: &mut TcpStream,
        number: u64,
        resp: &[u8],
    );

    /// The stream ended after `out.transactions`.
    fn finish(self, fd: Option<RawFd>, out: &mut StreamOutcome);
}

impl<K: Kind> Hook for Stamps<K> {
    fn open(cx: &Ctx<'_>) -> Result<Self, StreamError> {
        Ok(Self {
            clock: Clock::default(),
            kind: K::open(cx)?,
        })
    }

    fn connected(&mut self, fd: RawFd) -> Result<(), StreamError> {
        self.kind.connected(fd)
    }

    #[inline]
    fn begin(&mut self) {
        self.kind.begin();
    }

    #[inline]
    fn sending(&mut self) {
        self.clock.sending();
    }

    #[inline]
    fn recv(fd: RawFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<(usize, Option<u64>)> {
        stamps::recv(fd, buf, flags)
    }

    #[inline]
    fn received(&mut self, rx: Option<u64>) {
        self.clock.received(rx);
    }

    fn answered(&mut self, cx: &Ctx<'_>, sock: &mut TcpStream, number: u64, resp: &[u8]) {
        self.kind.answered(&self.clock, cx, sock, number, resp);
    }

    fn finish(self, fd: Option<RawFd>, out: &mut StreamOutcome) {
        self.kind.finish(fd, out);
    }
}

/// TCP_RR: the stream's one connection stamped; each transaction's server part comes
/// in the next response, the last one's with the server's report.
pub(super) struct RrStamps {
    /// Receive stamping kept on for the whole run (`None` where loopback is down).
    _held: Option<stamps::StampingHeld>,
    book: Recorder,
    req_len: u64,
    /// The connection probes tail loss (`probe::anatomy::probes_tail_loss`).
    tlp: bool,
    retrans: Option<RetransCounters>,
}

impl RrStamps {
    /// OPT_ID numbers a TCP send's last byte from 0: request `n`'s.
    fn last_byte(&self, n: u64) -> u32 {
        (n * self.req_len).wrapping_sub(1) as u32
    }
}

/// Receive stamping held on, and on before the first transaction (a second at most:
/// past it the run goes on, its first transactions unstamped as the kernel leaves
/// them); `None` where this namespace has no loopback to hold it with.
pub(super) fn stamping_held() -> Option<stamps::StampingHeld> {
    stamps::StampingHeld::on(STAMPING_WAIT).ok()
}

/// The longest a run waits for the kernel to turn receive stamping on.
const STAMPING_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

impl Kind for RrStamps {
    fn open(cx: &Ctx<'_>) -> Result<Self, StreamError> {
        Ok(Self {
            _held: stamping_held(),
            book: cx.recorder(),
            req_len: u64::from(cx.s.request_size),
            tlp: false,
            retrans: None,
        })
    }

    fn connected(&mut self, fd: RawFd) -> Result<(), StreamError> {
        stamps::enable(fd, true).map_err(StreamError::NoStamps)?;
        self.tlp = probes_tail_loss(fd);
        self.retrans = Some(RetransCounters::new(fd, self.req_len));
        Ok(())
    }

    fn answered(
        &mut self,
        clock: &Clock,
        cx: &Ctx<'_>,
        sock: &mut TcpStream,
        seq: u64,
        resp: &[u8],
    ) {
        let fd = sock.as_raw_fd();
        let mut part = clock.part(seq as u32, seq, self.tlp, None);
        let (this, previous) = (self.last_byte(seq), self.last_byte(seq - 1));
        let mut late_ack = None;
        // Due: this request's SND stamps (more than one when it was retransmitted: they
        // all come before its ACK) and, usually by now, its ACK (piggybacked on the
        // response); a late one is read with the next transaction's.
        let _ = stamps::drain_tx(fd, |t| {
            match t.kind {
                TxKind::Sent if t.id == this => part.sends.add(t.ns),
                TxKind::Acked if t.id == this => part.acked = Some(t.ns),
                TxKind::Acked if t.id == previous => late_ack = Some(t.ns),
                _ => {}
            }
            part.sends.first.is_some() && part.acked.is_some()
        });
        if let Some(r) = self.retrans.as_mut() {
            r.note(fd, &mut part.sends);
        }
        if let Some(ns) = late_ack {
            self.book.late_ack((seq - 1) as u32, ns);
        }
        cx.record_anatomy(&mut self.book, part, resp);
    }

    /// The last request's ACK stamp, when it came after its transaction was set aside
    /// (no next transaction reads it); its server part comes with the server's report.
    fn finish(mut self, fd: Option<RawFd>, out: &mut StreamOutcome) {
        let last = out.transactions;
        let want = self.last_byte(last);
        if let Some(fd) = fd {
            let _ = stamps::drain_tx(fd, |t| {
                let ours = t.kind == TxKind::Acked && t.id == want;
                if ours {
                    self.book.late_ack(last as u32, t.ns);
                }
                ours
            });
        }
        out.anatomy = Some(self.book);
    }
}

/// TCP_CRR: a connection per transaction. The handshake (`connect()`) is timed on its
/// own; the rest is TCP_RR's anatomy, and the server's part of it comes after the
/// response on the same connection. A socket stamping receives is held open for the
/// run: the kernel turns receive stamps on lazily and off with the last socket that
/// wants them, which would leave each new connection's response unstamped.
pub(super) struct CrrStamps {
    book: Recorder,
    _held: stamps::StampingHeld,
    req_len: u64,
    /// Every connection between the same hosts negotiates the same: asked once.
    tlp: Option<bool>,
    retrans: Option<RetransCounters>,
    /// CLOCK_REALTIME when the transaction began, before its connection.
    before: u64,
    /// The server's part, after the response.
    trailer: Vec<u8>,
}

impl Kind for CrrStamps {
    fn open(cx: &Ctx<'_>) -> Result<Self, StreamError> {
        let held = stamps::StampingHeld::on(STAMPING_WAIT).map_err(StreamError::NoStamps)?;
        Ok(Self {
            book: cx.recorder(),
            _held: held,
            req_len: u64::from(cx.s.request_size),
            tlp: None,
            retrans: None,
            before: 0,
            trailer: vec![0u8; MIN_RESPONSE as usize],
        })
    }

    #[inline]
    fn begin(&mut self) {
        self.before = crate::kernel::realtime_ns();
    }

    fn connected(&mut self, fd: RawFd) -> Result<(), StreamError> {
        // Numbers this connection's bytes from 0 (OPT_ID counts from here).
        stamps::enable(fd, true).map_err(StreamError::NoStampsOnConnection)?;
        // The handshake's retransmissions (a lost SYN) are not the request's.
        self.retrans = Some(RetransCounters::new(fd, self.req_len));
        self.tlp.get_or_insert_with(|| probes_tail_loss(fd));
        Ok(())
    }

    fn answered(
        &mut self,
        clock: &Clock,
        cx: &Ctx<'_>,
        sock: &mut TcpStream,
        number: u64,
        _resp: &[u8],
    ) {
        let fd = sock.as_raw_fd();
        let last_byte = (self.req_len as u32).wrapping_sub(1);
        // connect_ns: the handshake and the new socket's set-up; with the rest, exactly
        // the transaction on this clock.
        let mut part = clock.part(
            1,
            number,
            self.tlp.unwrap_or(false),
            Some(clock.sent.saturating_sub(self.before)),
        );
        // The server's part follows the response, once its SND stamp was in.
        let Ok(ReadEnd::Full) = read_full(sock, &mut self.trailer, || cx.keep()) else {
            return;
        };
        let _ = stamps::drain_tx(fd, |t| {
            match t.kind {
                TxKind::Sent if t.id == last_byte => part.sends.add(t.ns),
                TxKind::Acked if t.id == last_byte => part.acked = Some(t.ns),
                _ => {}
            }
            part.sends.first.is_some() && part.acked.is_some()
        });
        if let Some(r) = self.retrans.as_mut() {
            r.note(fd, &mut part.sends);
        }
        match ServerPart::read(&self.trailer) {
            Some(server) => {
                let joined = self.book.record_joined(part, server, cx.stream);
                if let (Some(l), Some(log)) = (joined, cx.slow_log) {
                    log.offer(&l);
                }
            }
            None => self.book.unstamped += 1,
        }
    }

    fn finish(self, _fd: Option<RawFd>, out: &mut StreamOutcome) {
        out.anatomy = Some(self.book);
    }
}
