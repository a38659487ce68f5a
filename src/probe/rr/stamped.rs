//! TCP_RR and TCP_CRR with `--anatomy`: the closed loops of [`super::stream`], reading
//! with the kernel's stamps and joining each transaction to the server's part of it
//! (`probe::anatomy`).

use super::stream::{
    connect_one, no_stamps, note_crr_connection, note_pacing, note_tcp_info, pause, record,
    record_crr, recv_flags, why_unread, write_request, Ctx, StreamOutcome,
};
use crate::probe::anatomy::{current_cpu, ClientPart, Sends};
use crate::probe::io::is_timeout;
use crate::probe::stamps::{self, TxKind};
use crate::stats::IntervalRecorder;
use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::Instant;

/// How a stamped read of a whole response ended.
enum Read {
    /// Filled, with the RX stamp of its last packet when the kernel gave one.
    Full(Option<u64>),
    Stopped,
    Closed,
}

fn read_response(cx: &Ctx<'_>, fd: i32, buf: &mut [u8], flags: libc::c_int) -> io::Result<Read> {
    let mut got = 0;
    let mut rx = None;
    while got < buf.len() {
        match stamps::recv(fd, &mut buf[got..], flags) {
            Ok((0, _)) => return Ok(Read::Closed),
            Ok((n, ts)) => {
                got += n;
                rx = ts.or(rx);
            }
            Err(e) if is_timeout(&e) => {
                if !cx.keep() {
                    return Ok(Read::Stopped);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Read::Full(rx))
}

/// The client's side of one stamped request → response, on its own clock.
struct Exchange {
    cpu_sent: u32,
    /// Just before `send()`.
    sent: u64,
    /// The RX stamp of the response's last packet.
    rx: Option<u64>,
    /// `recv()` returned the whole response.
    returned: u64,
    cpu_returned: u32,
}

impl Exchange {
    /// Send `req` and read the whole of `resp`. `Err(None)`: the run was stopped;
    /// `Err(Some(why))`: the stream ends with that error, where `unread` says what a
    /// response not read in full (closed, or the read's error) means for this test.
    fn run(
        cx: &Ctx<'_>,
        sock: &mut TcpStream,
        (req, resp): (&[u8], &mut [u8]),
        spin: libc::c_int,
        unread: impl FnOnce(Option<&io::Error>) -> Option<String>,
    ) -> Result<Self, Option<String>> {
        let cpu_sent = current_cpu();
        let sent = crate::kernel::realtime_ns();
        if let Err(e) = write_request(cx, sock, req) {
            return Err(Some(format!(
                "sending a request: {}",
                crate::error_chain(&e)
            )));
        }
        let rx = match read_response(cx, sock.as_raw_fd(), resp, spin) {
            Ok(Read::Full(rx)) => rx,
            Ok(Read::Stopped) => return Err(None),
            Ok(Read::Closed) => return Err(unread(None)),
            Err(e) => return Err(unread(Some(&e))),
        };
        Ok(Self {
            cpu_sent,
            sent,
            rx,
            returned: crate::kernel::realtime_ns(),
            cpu_returned: current_cpu(),
        })
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

pub(super) fn tcp_rr(
    cx: &Ctx<'_>,
    conn: Option<TcpStream>,
    mut rec: Option<IntervalRecorder>,
) -> StreamOutcome {
    let Some(mut sock) = conn else {
        return StreamOutcome {
            error: Some("no data connection".into()),
            ..StreamOutcome::default()
        };
    };
    let mut out = StreamOutcome {
        local_addr: sock.local_addr().ok(),
        ..StreamOutcome::default()
    };
    let fd = sock.as_raw_fd();
    if let Err(e) = stamps::enable(fd, true) {
        out.error = Some(no_stamps(&e));
        return out;
    }
    let spin = recv_flags(cx);
    let req_len = u64::from(cx.s.request_size);
    let req = vec![0u8; cx.s.request_size as usize];
    let mut resp = vec![0u8; cx.s.response_size as usize];
    let mut book = cx.anatomy();
    let tlp = crate::probe::anatomy::probes_tail_loss(fd);
    let mut retrans = crate::probe::anatomy::RetransCounters::new(fd, req_len);
    // OPT_ID numbers a TCP send's last byte from 0.
    let last_byte = |n: u64| (n * req_len).wrapping_sub(1) as u32;
    let mut now = cx.start;
    let mut target = None;
    'run: while cx.more(out.transactions, now) {
        for _ in 0..cx.s.burst {
            let seq = out.transactions + 1;
            let t0 = Instant::now();
            note_pacing(&mut out, &mut target, t0);
            let done = match Exchange::run(cx, &mut sock, (&req, &mut resp), spin, |e| {
                why_unread(cx, e)
            }) {
                Ok(x) => x,
                Err(why) => {
                    out.error = why;
                    break 'run;
                }
            };
            now = Instant::now();
            record(&mut out, &mut rec, cx, t0, now);
            let mut part = done.part(seq as u32, seq, tlp, None);
            let mut late_ack = None;
            // Due: this request's SND stamps (more than one when it was retransmitted:
            // they all come before its ACK) and, usually by now, its ACK (piggybacked on
            // the response); a late one is read with the next transaction's.
            let _ = stamps::drain_tx(fd, |t| {
                match t.kind {
                    TxKind::Sent if t.id == last_byte(seq) => part.sends.add(t.ns),
                    TxKind::Acked if t.id == last_byte(seq) => part.acked = Some(t.ns),
                    TxKind::Acked if t.id == last_byte(seq - 1) => late_ack = Some(t.ns),
                    _ => {}
                }
                part.sends.first.is_some() && part.acked.is_some()
            });
            retrans.note(fd, &mut part.sends);
            if let Some(ns) = late_ack {
                book.late_ack((seq - 1) as u32, ns);
            }
            cx.anatomy_record(&mut book, part, &resp);
            if !cx.more(out.transactions, now) {
                break 'run;
            }
        }
        target = pause(cx, now);
        now = Instant::now();
    }
    // The last request's ACK stamp, when it came after its transaction was set aside
    // (no next transaction reads it); its server part comes with the server's report.
    let last = out.transactions;
    let _ = stamps::drain_tx(fd, |t| {
        let ours = t.kind == TxKind::Acked && t.id == last_byte(last);
        if ours {
            book.late_ack(last as u32, t.ns);
        }
        ours
    });
    note_tcp_info(&mut out, &sock);
    out.anatomy = Some(book);
    out
}

/// TCP_CRR: a connection per transaction. The handshake (`connect()`) is timed on its
/// own; the rest is TCP_RR's anatomy, and the server's part of it comes after the
/// response on the same connection. A socket stamping receives is held open for the
/// run: the kernel turns receive stamps on lazily and off with the last socket that
/// wants them, which would leave each new connection's response unstamped.
pub(super) fn tcp_crr(cx: &Ctx<'_>, mut rec: Option<IntervalRecorder>) -> StreamOutcome {
    use crate::probe::anatomy::{probes_tail_loss, RetransCounters, ServerPart, MIN_RESPONSE};
    use crate::probe::io::{read_full, ReadEnd};
    let mut out = StreamOutcome::default();
    let hold = std::net::UdpSocket::bind(("127.0.0.1", 0))
        .and_then(|u| stamps::hold_rx(u.as_raw_fd()).map(|()| u));
    if let Err(e) = hold {
        out.error = Some(no_stamps(&e));
        return out;
    }
    let spin = recv_flags(cx);
    let req = vec![0u8; cx.s.request_size as usize];
    let mut resp = vec![0u8; cx.s.response_size as usize];
    let mut trailer = vec![0u8; MIN_RESPONSE as usize];
    let mut book = cx.anatomy();
    // Every connection between the same hosts negotiates the same: asked once.
    let mut tlp = None;
    let mut now = cx.start;
    let mut target = None;
    'run: while cx.more(out.transactions, now) {
        for _ in 0..cx.s.burst {
            let t0 = Instant::now();
            let before = crate::kernel::realtime_ns();
            note_pacing(&mut out, &mut target, t0);
            let Some(mut sock) = connect_one(cx, &mut out) else {
                break 'run;
            };
            let tc = Instant::now();
            let fd = sock.as_raw_fd();
            // Numbers this connection's bytes from 0 (OPT_ID counts from here).
            if let Err(e) = stamps::enable(fd, true) {
                out.error = Some(format!("SO_TIMESTAMPING on a new connection: {e}"));
                break 'run;
            }
            // The handshake's retransmissions (a lost SYN) are not the request's.
            let mut retrans = RetransCounters::new(fd, req.len() as u64);
            let unread = |e: Option<&io::Error>| {
                Some(e.map_or_else(
                    || "the server closed the connection before responding".into(),
                    |e| format!("reading a response: {}", crate::error_chain(e)),
                ))
            };
            let done = match Exchange::run(cx, &mut sock, (&req, &mut resp), spin, unread) {
                Ok(x) => x,
                Err(why) => {
                    out.error = why;
                    break 'run;
                }
            };
            now = Instant::now();
            record_crr(&mut out, &mut rec, cx, [t0, tc, now]);
            let last_byte = (req.len() as u32).wrapping_sub(1);
            // connect_ns: the handshake and the new socket's set-up; with the rest,
            // exactly the transaction on this clock.
            let mut part = done.part(
                1,
                out.transactions,
                *tlp.get_or_insert_with(|| probes_tail_loss(fd)),
                Some(done.sent.saturating_sub(before)),
            );
            // The server's part follows the response, once its SND stamp was in.
            if let Ok(ReadEnd::Full) = read_full(&mut sock, &mut trailer, || cx.keep()) {
                let _ = stamps::drain_tx(fd, |t| {
                    match t.kind {
                        TxKind::Sent if t.id == last_byte => part.sends.add(t.ns),
                        TxKind::Acked if t.id == last_byte => part.acked = Some(t.ns),
                        _ => {}
                    }
                    part.sends.first.is_some() && part.acked.is_some()
                });
                retrans.note(fd, &mut part.sends);
                if let Some(server) = ServerPart::read(&trailer) {
                    let joined = book.record_joined(part, server, cx.stream);
                    if let (Some(l), Some(log)) = (joined, cx.slow_log) {
                        log.offer(&l);
                    }
                } else {
                    book.unstamped += 1;
                }
            }
            note_crr_connection(&mut out, &sock);
            drop(sock);
            if !cx.more(out.transactions, now) {
                break 'run;
            }
        }
        target = pause(cx, now);
        now = Instant::now();
    }
    out.anatomy = Some(book);
    out
}
