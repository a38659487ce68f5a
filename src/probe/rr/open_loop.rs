//! Open loop: a sender thread sends on the schedule whatever the replies do, and
//! the stream's thread matches the replies (coordinated omission shows in the
//! response time). UDP_RR with one stream also measures irtt's one-way delays from
//! the server's stamps (`super::one_way`), read with each response's RX stamp.

use super::closed::{Ctx, Tally};
use super::one_way::{Book, Lost, Reply};
use super::outcome::StreamError;
use super::raw_log::RawLine;
use super::sequence::{get_seq, put_seq, seq_len, seq_mask};
use super::settings::OpenLoop;
use super::udp::udp_socket;
use crate::kernel::cpu::{self};
use crate::kernel::sockopt;
use crate::probe::anatomy::ServerPart;
use crate::probe::io::{read_full, write_full, ReadEnd};
use crate::probe::pacing::{self, Arrivals};
use crate::probe::stamps;
use std::collections::VecDeque;
use std::net::{TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
pub(super) enum Endpoint {
    Tcp(Option<TcpStream>),
    Udp,
}

pub(super) struct Pending {
    pub(super) seq: u64,
    pub(super) intended: Instant,
    pub(super) sent: Instant,
}

/// Open loop: a sender thread sends on the schedule; this thread receives and matches
/// replies (TCP: in order; UDP: by the echoed sequence number).
pub(super) fn open_loop(cx: &Ctx<'_>, ol: OpenLoop, ep: Endpoint, tally: &mut Tally) {
    // One-way delays need the kernel's receive stamps from the first request on, at
    // both ends: the first socket to ask turns them on lazily (net_enable_timestamp
    // defers it to a work item a busy machine runs late), so they are held on, and
    // seen on, before anything is sent (a loaded run lost its first stamps).
    let _held = (matches!(ep, Endpoint::Udp) && cx.s.one_way())
        .then(super::stamped::stamping_held)
        .flatten();
    let (tx, rx) = match open(cx, ep) {
        Ok(ends) => ends,
        Err(e) => {
            tally.out.error = Some(e);
            return;
        }
    };
    tally.out.local_addr = match &rx {
        Receiver::Tcp(s) => s.local_addr().ok(),
        Receiver::Udp(u) => u.local_addr().ok(),
    };
    let shared = Shared {
        pending: Mutex::new(VecDeque::new()),
        sender_done: AtomicBool::new(false),
        send_error: Mutex::new(None),
    };
    let (book, (late_sends, sent)) = std::thread::scope(|scope| {
        let sender = scope.spawn(|| send_on_schedule(cx, ol, tx, &shared));
        let book = match &rx {
            Receiver::Tcp(s) => {
                receive_tcp(cx, s, &shared, tally);
                None
            }
            Receiver::Udp(u) => Some(receive_udp(cx, u, &shared, tally)),
        };
        (book, sender.join().unwrap_or((0, 0)))
    });
    tally.out.late_sends = late_sends;
    // Still unanswered when the run was cut short: no reply came while it listened.
    let unanswered: Vec<Pending> = shared
        .pending
        .lock()
        .map(|mut p| p.drain(..).collect())
        .unwrap_or_default();
    tally.out.unanswered = unanswered.len() as u64;
    for p in &unanswered {
        tally.raw_lost(cx, p.seq, p.sent);
    }
    tally.out.one_way = book.map(|b| b.sent(sent));
    if tally.out.error.is_none() {
        tally.out.error = shared
            .send_error
            .into_inner()
            .unwrap_or_else(|p| p.into_inner());
    }
    if let Receiver::Tcp(s) = &rx {
        if let Ok(ti) = sockopt::tcp_info(s) {
            tally.out.retrans = u64::from(ti.total_retrans);
            tally.out.info = vec![ti];
        }
    }
}

/// Where the sender writes requests.
enum Sender {
    Tcp(TcpStream),
    Udp(UdpSocket),
}

/// Where this thread reads replies (the same socket as the sender's).
enum Receiver {
    Tcp(TcpStream),
    Udp(UdpSocket),
}

/// The stream's two ends: TCP_RR's connection cloned, UDP_RR's socket cloned.
fn open(cx: &Ctx<'_>, ep: Endpoint) -> Result<(Sender, Receiver), StreamError> {
    match ep {
        Endpoint::Tcp(Some(s)) => {
            let tx = s.try_clone().map_err(StreamError::DataSocket)?;
            Ok((Sender::Tcp(tx), Receiver::Tcp(s)))
        }
        Endpoint::Tcp(None) => Err(StreamError::NoConnection),
        Endpoint::Udp => {
            let u = udp_socket(cx).map_err(StreamError::UdpSocket)?;
            let tx = u.try_clone().map_err(StreamError::UdpSocket)?;
            Ok((Sender::Udp(tx), Receiver::Udp(u)))
        }
    }
}

/// What the sender and the receiver share: the requests sent and not yet answered
/// (oldest first), whether the sender is done, and why it stopped early.
struct Shared {
    pending: Mutex<VecDeque<Pending>>,
    sender_done: AtomicBool,
    send_error: Mutex<Option<StreamError>>,
}

impl Shared {
    /// The sender is done and every request it sent was answered or given up on.
    fn idle(&self) -> bool {
        self.sender_done.load(Ordering::Acquire)
            && self.pending.lock().map_or(true, |p| p.is_empty())
    }
}

/// The sender: requests at the schedule's times whatever the replies do (at most
/// `max_outstanding` unanswered). Returns how many left more than 1 ms late, and how
/// many were sent.
fn send_on_schedule(cx: &Ctx<'_>, ol: OpenLoop, mut tx: Sender, shared: &Shared) -> (u64, u64) {
    if let Some(c) = cx.s.local_cpu {
        let _ = cpu::pin_current_thread(c);
    }
    pacing::tighten_timer_slack();
    let mut arrivals = Arrivals::new(
        ol.rate_per_s,
        ol.schedule,
        0x9e37_79b9 ^ crate::stats::units::ns(cx.start.elapsed()),
    );
    let k = seq_len(cx.s);
    let mut req = vec![0u8; cx.s.request_size as usize];
    let (mut seq, mut late) = (0u64, 0u64);
    while seq < cx.quota && !cx.ctl.stop.load(Ordering::Relaxed) {
        let intended = cx.start + arrivals.next_offset();
        if intended >= cx.deadline {
            break;
        }
        if !pacing::wait_until(cx.s.pace, intended, || !cx.ctl.stop.load(Ordering::Relaxed)) {
            break;
        }
        while shared.pending.lock().map_or(0, |p| p.len()) >= ol.max_outstanding as usize
            && cx.keep()
        {
            std::thread::sleep(Duration::from_micros(50));
        }
        seq += 1;
        put_seq(&mut req, seq, k);
        let sent = Instant::now();
        if sent - intended > Duration::from_millis(1) {
            late += 1;
        }
        if let Ok(mut p) = shared.pending.lock() {
            p.push_back(Pending {
                seq,
                intended,
                sent,
            });
        }
        let r = match &mut tx {
            Sender::Tcp(t) => write_full(t, &req, || cx.keep()),
            Sender::Udp(u) => u.send(&req).map(|_| ()),
        };
        if let Err(e) = r {
            *shared.send_error.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(StreamError::Send(e));
            break;
        }
    }
    shared.sender_done.store(true, Ordering::Release);
    (late, seq)
}

/// A reply to `p` read at `t1`: its service time (actual send → reply) and its
/// response time (intended send → reply).
fn record(cx: &Ctx<'_>, tally: &mut Tally, p: &Pending, t1: Instant) {
    tally.record(cx, p.sent, t1);
    tally
        .out
        .intended
        .record_ns(crate::stats::units::ns(t1 - p.intended));
}

/// TCP_RR's replies, in order: each answers the oldest request pending.
fn receive_tcp(cx: &Ctx<'_>, s: &TcpStream, shared: &Shared, tally: &mut Tally) {
    let mut resp = vec![0u8; cx.s.response_size as usize];
    let mut s = s;
    while !shared.idle() && cx.keep() {
        match read_full(&mut s, &mut resp, || cx.keep() && !shared.idle()) {
            Ok(ReadEnd::Full) => {
                let t1 = Instant::now();
                let front = shared.pending.lock().ok().and_then(|mut p| p.pop_front());
                if let Some(p) = front {
                    record(cx, tally, &p, t1);
                    tally.raw_answered(cx, p.seq, (p.sent, t1), false);
                }
            }
            Ok(ReadEnd::Stopped { .. }) => break,
            Ok(ReadEnd::Closed { .. }) | Err(_) => {
                tally.out.error = Some(StreamError::Broke);
                break;
            }
        }
    }
}

/// UDP_RR's replies, matched by their echoed sequence number; a request older than
/// the timeout is lost, and a reply to it later is late, not lost. With one-way delays
/// (`RrSettings::one_way`), each response is read with its RX stamp and the server's
/// part it carries goes to the book, which settles `--raw-log`'s lines either way.
fn receive_udp(cx: &Ctx<'_>, u: &UdpSocket, shared: &Shared, tally: &mut Tally) -> Book {
    let k = seq_len(cx.s);
    let mask = seq_mask(k);
    let rlen = cx.s.response_size as usize;
    let mut resp = vec![0u8; rlen + 1];
    let one_way = cx.s.one_way() && stamps::hold_rx(u.as_raw_fd()).is_ok();
    let mut book = Book::new(cx.stream, one_way, k);
    let mut expired: Vec<Pending> = Vec::new();
    while !shared.idle() && cx.keep() {
        let got = if one_way {
            stamps::recv(u.as_raw_fd(), &mut resp, 0)
        } else {
            u.recv(&mut resp).map(|n| (n, None))
        };
        match got {
            Ok((n, rx)) if n == rlen => {
                let t1 = Instant::now();
                let got = get_seq(&resp, k);
                let part = if one_way {
                    ServerPart::read(&resp[..n])
                } else {
                    None
                };
                let matched = shared.pending.lock().ok().and_then(|mut p| {
                    p.iter()
                        .position(|x| x.seq & mask == got)
                        .and_then(|i| p.remove(i))
                });
                let answers = match matched {
                    Some(p) => Some((p, false, None)),
                    // Else a request given up on: late, not lost, a transaction with
                    // its round trip.
                    None => book.take_late(|seq| seq & mask == got).map(|g| {
                        tally.out.lost = tally.out.lost.saturating_sub(1);
                        tally.out.late_replies += 1;
                        let p = Pending {
                            seq: g.seq,
                            intended: g.intended,
                            sent: g.sent,
                        };
                        (p, true, g.part())
                    }),
                };
                match answers {
                    Some((p, late, known)) => {
                        record(cx, tally, &p, t1);
                        let r = Reply {
                            seq: p.seq,
                            sent_unix_ns: cx.unix_ns(p.sent),
                            rtt_ns: crate::stats::units::ns(t1 - p.sent),
                            rx_unix_ns: rx,
                            late,
                        };
                        book.reply(r, part, known, &mut |l: &RawLine| tally.raw(cx, || *l));
                    }
                    None => tally.out.stray_replies += 1,
                }
            }
            Ok(_) => tally.out.stray_replies += 1,
            Err(e) if crate::probe::io::is_timeout(&e) => {}
            Err(e) => {
                tally.out.error = Some(StreamError::Receive(e));
                break;
            }
        }
        // Requests older than the timeout are lost (taken out under the lock, settled
        // after it: the sender waits on it).
        let now = Instant::now();
        if let Ok(mut p) = shared.pending.lock() {
            while p.front().is_some_and(|x| now - x.sent >= cx.s.timeout) {
                expired.extend(p.pop_front());
            }
        }
        for x in expired.drain(..) {
            tally.out.lost += 1;
            let g = Lost::new(x.seq, x.intended, x.sent, cx.unix_ns(x.sent));
            book.give_up(g, &mut |l: &RawLine| tally.raw(cx, || *l));
        }
    }
    book
}
