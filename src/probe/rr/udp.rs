//! UDP_RR transactions: a numbered request, and a read of replies until its own comes
//! or its timeout passes (then it is lost, and a reply after that is late, not lost:
//! it keeps its round trip). `--anatomy` reads the kernel's stamps on the same path.

use super::closed::{Ctx, Ended, Exchange, Tally};
use super::outcome::StreamError;
use super::sequence::{get_seq, put_seq, seq_len, seq_mask, GaveUp};
use super::settings::{POLL_TICK, UDP_TIMEOUT_FLOOR};
use crate::probe::anatomy::{current_cpu, ClientPart, Recorder, Sends};
use crate::probe::io::{is_timeout, recv_with};
use crate::probe::stamps;
use crate::probe::udp_timeout::UdpTimeout;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The stream's UDP socket, connected to the test's data port.
pub(super) fn udp_socket(cx: &Ctx<'_>) -> io::Result<UdpSocket> {
    let sock = Socket::new(
        Domain::for_address(cx.data),
        Type::DGRAM,
        Some(Protocol::UDP),
    )?;
    cx.s.path.data(&sock, cx.data)?;
    sock.connect(&SockAddr::from(cx.data))?;
    let u: UdpSocket = sock.into();
    u.set_read_timeout(Some(cx.s.timeout.min(POLL_TICK)))?;
    Ok(u)
}

/// Closed-loop UDP_RR.
pub(super) struct UdpRr {
    u: UdpSocket,
    fd: RawFd,
    /// Sequence bytes per request.
    k: usize,
    req: Vec<u8>,
    /// One byte longer than a response, so a longer datagram shows.
    resp: Vec<u8>,
    /// The request in flight's number (from 1).
    seq: u64,
    /// Its timeout, and the socket's read timeout now.
    limit: Duration,
    sock_timeout: Duration,
    rto: UdpTimeout,
    gave_up: GaveUp<GivenUp>,
    /// `--anatomy`.
    book: Option<Recorder>,
    /// With it, receive stamping kept on for the whole run.
    _held: Option<crate::probe::stamps::StampingHeld>,
}

impl UdpRr {
    pub(super) fn open(cx: &Ctx<'_>, tally: &mut Tally) -> Result<Self, StreamError> {
        let u = udp_socket(cx).map_err(StreamError::UdpSocket)?;
        tally.out.local_addr = u.local_addr().ok();
        let fd = u.as_raw_fd();
        let (book, held) = if cx.s.anatomy {
            stamps::enable(fd, false).map_err(StreamError::NoStamps)?;
            (Some(cx.recorder()), super::stamped::stamping_held())
        } else {
            (None, None)
        };
        Ok(Self {
            u,
            fd,
            k: seq_len(cx.s),
            req: vec![0u8; cx.s.request_size as usize],
            resp: vec![0u8; cx.s.response_size as usize + 1],
            seq: 0,
            limit: cx.s.timeout,
            sock_timeout: cx.s.timeout.min(POLL_TICK),
            rto: UdpTimeout::new(UDP_TIMEOUT_FLOOR, cx.s.timeout),
            gave_up: GaveUp::default(),
            book,
            _held: held,
        })
    }

    /// One read: with `--anatomy` its RX stamp; without, a plain recv (no control
    /// buffer to fill and parse).
    #[inline]
    fn recv(&mut self, flags: libc::c_int) -> io::Result<(usize, Option<u64>)> {
        if self.book.is_some() {
            stamps::recv(self.fd, &mut self.resp, flags)
        } else {
            recv_with(self.fd, &mut self.resp, flags).map(|n| (n, None))
        }
    }
}

impl Exchange for UdpRr {
    /// Number the request, and wake when it is due to be lost, in whole ms (so that the
    /// socket option changes only when the timeout really moves).
    #[inline]
    fn prepare(&mut self, cx: &Ctx<'_>) {
        self.seq += 1;
        put_seq(&mut self.req, self.seq, self.k);
        self.limit = if cx.s.adaptive_timeout {
            self.rto.current()
        } else {
            cx.s.timeout
        };
        let want = wake_after(self.limit);
        if want != self.sock_timeout && self.u.set_read_timeout(Some(want)).is_ok() {
            self.sock_timeout = want;
        }
    }

    fn exchange(&mut self, cx: &Ctx<'_>, tally: &mut Tally, t0: Instant) -> Result<Instant, Ended> {
        let (seq, k, limit) = (self.seq, self.k, self.limit);
        let mask = seq_mask(k);
        let rlen = cx.s.response_size as usize;
        let flags = cx.recv_flags();
        // CLOCK_REALTIME and the CPU just before `send()`, for the anatomy.
        let (sent, cpu_sent) = match self.book {
            Some(_) => (crate::kernel::realtime_ns(), current_cpu()),
            None => (0, 0),
        };
        if let Err(e) = self.u.send(&self.req) {
            return Err(Some(StreamError::Send(e)));
        }
        loop {
            match self.recv(flags) {
                Ok((n, rx)) if n == rlen && get_seq(&self.resp, k) == seq & mask => {
                    let now = Instant::now();
                    tally.record(cx, t0, now);
                    tally.out.lost_tail = 0;
                    self.rto.sample(now - t0);
                    // Read before the client gave up, but it came after its timeout (a
                    // client woken late finds it waiting): late all the same.
                    let late = arrived_after(rx, sent, now - t0, limit);
                    if late {
                        tally.out.late_replies += 1;
                    }
                    tally.raw_answered(cx, seq, (t0, now), late);
                    if let Some(book) = self.book.as_mut() {
                        let mut part =
                            udp_part(seq, seq & mask, (sent, cpu_sent), rx, Sends::default());
                        // After the part's `returned`: the read is not the round trip's.
                        part.sends = request_sends(self.fd, seq);
                        cx.record_anatomy(book, part, &self.resp);
                    }
                    return Ok(now);
                }
                Ok((n, rx)) => {
                    let reply = (n == rlen).then_some((&self.resp[..n], rx));
                    late_reply(cx, (tally, &mut self.book), &mut self.gave_up, reply, k);
                }
                Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Some(StreamError::Receive(e))),
            }
            // Given up on once its timeout has passed, whatever woke the read (the
            // socket's timeout or another datagram): a reply after that is late.
            let now = Instant::now();
            let waited = now - t0;
            if waited >= limit {
                tally.out.lost += 1;
                tally.out.lost_tail += 1;
                // Its send stamp now, before the next request's read passes it.
                let sends = match self.book {
                    Some(_) => request_sends(self.fd, seq),
                    None => Sends::default(),
                };
                let forgotten = self.gave_up.push(GivenUp {
                    seq,
                    t0,
                    sent,
                    cpu: cpu_sent,
                    sends,
                });
                // No longer answerable late: lost for good.
                if let Some(g) = forgotten {
                    tally.raw_lost(cx, g.seq, g.t0);
                }
                return Ok(now);
            }
            if !cx.keep() {
                return Err(None);
            }
            // Read on until the timeout, not a whole timeout after what woke it.
            let left = wake_after(limit - waited);
            if left != self.sock_timeout && self.u.set_read_timeout(Some(left)).is_ok() {
                self.sock_timeout = left;
            }
        }
    }

    /// Replies to the last requests given up on may still come: one more timeout for
    /// them (the last one carries the part of the transaction before it).
    fn finish(mut self, cx: &Ctx<'_>, tally: &mut Tally) {
        let rlen = cx.s.response_size as usize;
        let flags = cx.recv_flags();
        if tally.out.lost_tail > 0
            && tally.out.error.is_none()
            && !cx.ctl.stop.load(Ordering::Relaxed)
        {
            let until = Instant::now() + self.rto.current().min(cx.s.timeout);
            while tally.out.lost_tail > 0 && Instant::now() < until {
                let _ = self
                    .u
                    .set_read_timeout(Some(wake_after(until - Instant::now())));
                let Ok((n, rx)) = self.recv(flags) else {
                    continue;
                };
                let reply = (n == rlen).then_some((&self.resp[..n], rx));
                late_reply(
                    cx,
                    (tally, &mut self.book),
                    &mut self.gave_up,
                    reply,
                    self.k,
                );
            }
        }
        for g in self.gave_up.drain() {
            tally.raw_lost(cx, g.seq, g.t0);
        }
        tally.out.anatomy = self.book;
    }
}

/// A datagram that is not the reply the loop waits for (`reply`: none when it is the
/// wrong size): the reply to a request given up on, which then counts as a late reply
/// and a transaction with its round trip (and its anatomy), no longer a loss; or a
/// stray.
fn late_reply(
    cx: &Ctx<'_>,
    (tally, book): (&mut Tally, &mut Option<Recorder>),
    gave_up: &mut GaveUp<GivenUp>,
    reply: Option<(&[u8], Option<u64>)>,
    k: usize,
) {
    let mask = seq_mask(k);
    let Some((resp, rx)) = reply else {
        tally.out.stray_replies += 1;
        return;
    };
    let echoed = get_seq(resp, k);
    let Some((g, after)) = gave_up.take_newest(|g| g.seq & mask == echoed) else {
        tally.out.stray_replies += 1;
        return;
    };
    let now = Instant::now();
    tally.record(cx, g.t0, now);
    tally.raw_answered(cx, g.seq, (g.t0, now), true);
    let out = &mut tally.out;
    out.lost = out.lost.saturating_sub(1);
    out.late_replies += 1;
    out.lost_tail = out.lost_tail.min(after);
    if let Some(book) = book.as_mut() {
        let part = udp_part(g.seq, echoed, (g.sent, g.cpu), rx, g.sends);
        cx.record_anatomy(book, part, resp);
    }
}

/// Whether a reply arrived after `limit`: by its kernel RX stamp against the request's
/// `sent` (both CLOCK_REALTIME, `--anatomy`), else by when its read returned, `waited`.
fn arrived_after(rx: Option<u64>, sent: u64, waited: Duration, limit: Duration) -> bool {
    let limit_ns = crate::stats::units::ns(limit);
    rx.map_or(waited >= limit, |rx| rx.saturating_sub(sent) >= limit_ns)
}

/// The socket timeout that wakes a read `left` from now: whole ms rounded up (so that
/// the option changes only when the time really moves), at most [`POLL_TICK`] (the
/// read wakes to see whether the run was stopped).
fn wake_after(left: Duration) -> Duration {
    Duration::from_millis(u64::try_from(left.min(POLL_TICK).as_millis()).unwrap_or(100) + 1)
        .min(POLL_TICK)
}

/// A UDP request the client gave up on (its timeout passed), kept so that a reply
/// arriving later is known as late, not lost, and keeps its round trip and anatomy.
#[derive(Clone, Copy, Debug)]
struct GivenUp {
    seq: u64,
    t0: Instant,
    /// CLOCK_REALTIME just before `send()`, the CPU it was sent from, and the
    /// request's SND stamp (read when it was given up on, with `--anatomy`).
    sent: u64,
    cpu: u32,
    sends: Sends,
}

/// The SND stamp of request `seq` (datagrams are numbered from 0, lost requests
/// included: request `seq` is seq − 1).
fn request_sends(fd: RawFd, seq: u64) -> Sends {
    let mut sends = Sends::default();
    let want = seq.wrapping_sub(1) as u32;
    let _ = stamps::drain_tx(fd, |t| {
        if t.kind == stamps::TxKind::Sent && t.id == want {
            sends.add(t.ns);
        }
        sends.first.is_some()
    });
    sends
}

/// UDP_RR with `--anatomy`: the client's part of transaction `seq` (echoed as
/// `echoed`), whose response was read just now, with its request's SND stamp.
fn udp_part(
    seq: u64,
    echoed: u64,
    (sent, cpu_sent): (u64, u32),
    rx: Option<u64>,
    sends: Sends,
) -> ClientPart {
    let returned = crate::kernel::realtime_ns();
    ClientPart {
        seq: echoed as u32,
        number: seq,
        sent,
        rx,
        returned,
        acked: None,
        sends,
        cpu_sent,
        cpu_returned: current_cpu(),
        // UDP is never retransmitted.
        tlp: false,
        connect_ns: None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::sequence::GAVE_UP_MAX;
    use super::*;

    /// Witness: arithmetic. A reply is matched to the newest request given up on with
    /// its (possibly wrapped) echo, and the ones given up on after it stay; the oldest
    /// are forgotten past [`GAVE_UP_MAX`]. Lateness is by the RX stamp when there is one.
    #[test]
    fn late_replies_find_the_request_given_up_on() {
        let t0 = Instant::now();
        let g = |seq| GivenUp {
            seq,
            t0,
            sent: 0,
            cpu: 0,
            sends: Sends::default(),
        };
        let mut gave = GaveUp::<GivenUp>::default();
        for seq in [3, 259, 260, 300] {
            gave.push(g(seq));
        }
        // One sequence byte: 259 and 3 both echo as 3; the newest is the one.
        let echo = |e: u64, mask: u64| move |g: &GivenUp| g.seq & mask == e;
        let (found, after) = gave.take_newest(echo(3, 0xff)).unwrap();
        assert_eq!((found.seq, after), (259, 2));
        assert_eq!(
            gave.take_newest(echo(300 & 0xff, 0xff))
                .map(|(g, a)| (g.seq, a)),
            Some((300, 0))
        );
        assert!(gave.take_newest(echo(7, 0xff)).is_none());
        for seq in 1000..1000 + GAVE_UP_MAX as u64 {
            gave.push(g(seq));
        }
        assert!(gave.take_newest(echo(3, u64::MAX)).is_none(), "forgotten");
        let ms = Duration::from_millis(1);
        assert!(arrived_after(Some(10_000_001), 0, ms, 10 * ms));
        assert!(!arrived_after(Some(9_999_999), 0, 20 * ms, 10 * ms));
        assert!(arrived_after(None, 0, 10 * ms, 10 * ms));
        assert_eq!(wake_after(Duration::from_micros(5_300)), 6 * ms);
        assert_eq!(wake_after(Duration::from_secs(5)), POLL_TICK);
    }
}
