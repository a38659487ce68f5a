//! One measuring stream of TCP_RR, UDP_RR or TCP_CRR in a closed loop, and the
//! watchdog that samples and stops them.

use super::result::TcpInfoSample;
use super::settings::{
    RrSettings, RunControl, CONNECT_TIMEOUT, IN_FLIGHT_GRACE, MAX_TCPINFO_SAMPLES, POLL_TICK,
    SAMPLE_EVERY, UDP_TIMEOUT_FLOOR, WATCH_TICK,
};
use crate::kernel::cpu::CpuTracker;
use crate::kernel::sockopt;
use crate::kernel::tcp_info::TcpInfo;
use crate::probe::anatomy::Sends;
use crate::probe::io::{read_full, write_full, ReadEnd};
use crate::probe::pacing::{self};
use crate::probe::udp_timeout::UdpTimeout;
use crate::stats::{IntervalRecorder, LatencyHistogram};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
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
    /// duplicate, or later than [`GAVE_UP_MAX`] timeouts).
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
    pub(super) error: Option<String>,
    /// `--anatomy`: the stream's transactions split into components.
    pub(super) anatomy: Option<crate::probe::anatomy::Recorder>,
    /// With `keep_series`: each transaction as (ns from the run's start to its end,
    /// round trip ns), at most [`SERIES_MAX`].
    pub(super) series: Vec<(u64, u64)>,
}

/// Transactions a stream keeps with `keep_series` (16 bytes each: 16 MiB).
pub(super) const SERIES_MAX: usize = 1_000_000;

impl StreamOutcome {
    /// Add another stream's outcome: histograms merged, counts summed, each stream's
    /// `tcp_info` kept, the first error and local address kept.
    pub(super) fn merge(&mut self, o: &StreamOutcome) {
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
        self.info.extend(o.info.iter().cloned());
        self.error = self.error.take().or_else(|| o.error.clone());
        self.local_addr = self.local_addr.or(o.local_addr);
        if let Some(a) = &o.anatomy {
            self.anatomy.get_or_insert_with(Default::default).merge(a);
        }
        self.series.extend_from_slice(&o.series);
    }
}

pub(super) struct Ctx<'a> {
    pub(super) s: &'a RrSettings,
    pub(super) data: SocketAddr,
    pub(super) ctl: &'a RunControl,
    pub(super) start: Instant,
    pub(super) deadline: Instant,
    pub(super) hard_deadline: Instant,
    pub(super) quota: u64,
    /// Set by the watchdog when it shut the sockets down (stop or hard deadline).
    pub(super) cutoff: &'a AtomicBool,
    /// This stream's number (0, 1, …).
    pub(super) stream: u32,
    /// `--slow-log`.
    pub(super) slow_log: Option<&'a crate::probe::anatomy::SlowLog>,
}

impl Ctx<'_> {
    /// `--anatomy`'s recorder for this stream.
    pub(super) fn anatomy(&self) -> crate::probe::anatomy::Recorder {
        use crate::probe::anatomy::{slowest::runs_at_most, TailPlan};
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let n_max = runs_at_most(
            self.s.count,
            ns(self.deadline.saturating_duration_since(self.start)),
            self.s.streams,
            self.s.burst,
            ns(self.s.interval),
        );
        crate::probe::anatomy::Recorder::new(
            TailPlan::new(self.s.tail_ppm, n_max, self.s.streams),
            self.s.test == crate::probe::control::TestKind::UdpRr,
        )
    }

    /// Record a transaction's anatomy, and log it if it is slow.
    pub(super) fn anatomy_record(
        &self,
        book: &mut crate::probe::anatomy::Recorder,
        part: crate::probe::anatomy::ClientPart,
        resp: &[u8],
    ) {
        let joined = book.record(
            part,
            crate::probe::anatomy::ServerPart::read(resp),
            self.stream,
        );
        if let (Some(l), Some(log)) = (joined, self.slow_log) {
            log.offer(&l);
        }
    }
}

impl Ctx<'_> {
    pub(super) fn keep(&self) -> bool {
        !self.ctl.stop.load(Ordering::Relaxed) && Instant::now() < self.hard_deadline
    }
    pub(super) fn more(&self, done: u64, now: Instant) -> bool {
        done < self.quota && now < self.deadline && !self.ctl.stop.load(Ordering::Relaxed)
    }
}

pub(super) fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A connected data socket. Closed-loop TCP_RR sockets block without a timeout: a
/// finite `SO_RCVTIMEO` makes every blocking `recv` arm and cancel a kernel timer,
/// which cost TCP_RR ~15 % of its transactions/s at one vCPU (bench/RESULTS-rr.md);
/// the watchdog in [`run`] shuts them down instead when the run must end.
pub(super) fn tcp_socket(
    s: &RrSettings,
    addr: SocketAddr,
    timeouts: bool,
) -> io::Result<TcpStream> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.path.data(&sock, addr)?;
    sock.set_nodelay(!s.split_request)?;
    if s.thin_linear_timeouts {
        sockopt::set_thin_linear_timeouts(&sock, true).map_err(|e| e.source)?;
    }
    if let Some(cc) = &s.congestion {
        sockopt::set_congestion(&sock, cc).map_err(|e| {
            io::Error::new(
                e.source.kind(),
                format!("congestion control {cc}: {}", e.source),
            )
        })?;
    }
    sock.connect_timeout(&SockAddr::from(addr), CONNECT_TIMEOUT)?;
    if timeouts {
        sock.set_read_timeout(Some(POLL_TICK))?;
        sock.set_write_timeout(Some(POLL_TICK))?;
    }
    Ok(sock.into())
}

/// The main thread while the streams run: samples the client's data sockets every
/// `--tcpinfo-interval`, and when the user stops the run or the hard deadline passes,
/// shuts the blocking sockets down so the streams' `recv` returns.
pub(super) fn watch<T>(
    s: &RrSettings,
    socks: &[TcpStream],
    ctl: &RunControl,
    cutoff: &AtomicBool,
    hard_deadline: Instant,
    handles: &[std::thread::ScopedJoinHandle<'_, T>],
) -> Vec<TcpInfoSample> {
    let mut series = Vec::new();
    let t0 = Instant::now();
    let mut next_sample = t0;
    while !handles.iter().all(|h| h.is_finished()) {
        let now = Instant::now();
        if !cutoff.load(Ordering::Relaxed)
            && (ctl.stop.load(Ordering::Relaxed) || now >= hard_deadline)
        {
            cutoff.store(true, Ordering::SeqCst);
            for sock in socks {
                let _ = sock.shutdown(std::net::Shutdown::Both);
            }
        }
        let mut wake = now + WATCH_TICK;
        if let Some(every) = s.tcpinfo_interval {
            if now >= next_sample {
                for (stream, sock) in socks.iter().enumerate() {
                    if series.len() >= MAX_TCPINFO_SAMPLES {
                        break;
                    }
                    if let Ok(info) = sockopt::tcp_info(sock) {
                        series.push(TcpInfoSample {
                            t_ms: t0.elapsed().as_secs_f64() * 1e3,
                            stream,
                            info,
                        });
                    }
                }
                next_sample = (next_sample + every).max(now);
            }
            wake = wake.min(next_sample);
        }
        std::thread::sleep(wake.saturating_duration_since(Instant::now()));
    }
    series
}

#[inline]
pub(super) fn record(
    out: &mut StreamOutcome,
    rec: &mut Option<IntervalRecorder>,
    cx: &Ctx<'_>,
    t0: Instant,
    t1: Instant,
) {
    let ctl = cx.ctl;
    let ns = u64::try_from((t1 - t0).as_nanos()).unwrap_or(u64::MAX);
    out.hist.record_ns(ns);
    if cx.s.keep_series && out.series.len() < SERIES_MAX {
        let at = t1.saturating_duration_since(cx.start).as_nanos();
        out.series.push((u64::try_from(at).unwrap_or(u64::MAX), ns));
    }
    if let Some(r) = rec.as_mut() {
        r.record(t1, ns);
    }
    out.transactions += 1;
    // Where the thread runs and the shared progress count change slowly: look and
    // publish every 64 transactions (each costs a few tens of ns on a VM).
    if out.transactions % SAMPLE_EVERY == 1 {
        out.cpus.sample();
        ctl.transactions
            .fetch_add(out.transactions - out.published, Ordering::Relaxed);
        out.published = out.transactions;
    }
}

/// Publish the transactions not yet counted in [`RunControl::transactions`].
pub(super) fn publish(out: &mut StreamOutcome, ctl: &RunControl) {
    ctl.transactions
        .fetch_add(out.transactions - out.published, Ordering::Relaxed);
    out.published = out.transactions;
}

/// Wait `-w` after `after`; returns the intended send time of the next request.
pub(super) fn pause(cx: &Ctx<'_>, after: Instant) -> Option<Instant> {
    if cx.s.interval.is_zero() {
        return None;
    }
    let target = after + cx.s.interval;
    pacing::wait_until(cx.s.pace, target, || !cx.ctl.stop.load(Ordering::Relaxed));
    Some(target)
}

/// How late the request after a wait left: intended time → just before `send()`.
#[inline]
pub(super) fn note_pacing(out: &mut StreamOutcome, target: &mut Option<Instant>, t0: Instant) {
    if let Some(t) = target.take() {
        out.pacing.record_ns(
            u64::try_from(t0.saturating_duration_since(t).as_nanos()).unwrap_or(u64::MAX),
        );
    }
}

pub(super) fn tcp_rr(
    cx: &Ctx<'_>,
    conn: Option<TcpStream>,
    mut rec: Option<IntervalRecorder>,
) -> StreamOutcome {
    let mut out = StreamOutcome::default();
    let Some(mut sock) = conn else {
        out.error = Some("no data connection".into());
        return out;
    };
    // `--recv spin`: every read returns at once, and read_full tries again.
    if cx.s.recv_spin {
        if let Err(e) = sock.set_nonblocking(true) {
            out.error = Some(format!("--recv spin: {e}"));
            return out;
        }
    }
    out.local_addr = sock.local_addr().ok();
    let req = vec![0u8; cx.s.request_size as usize];
    let mut resp = vec![0u8; cx.s.response_size as usize];
    let mut now = cx.start;
    let mut target = None;
    'run: while cx.more(out.transactions, now) {
        for _ in 0..cx.s.burst {
            let t0 = Instant::now();
            note_pacing(&mut out, &mut target, t0);
            if let Err(e) = write_request(cx, &mut sock, &req) {
                out.error = Some(format!("sending a request: {}", crate::error_chain(&e)));
                break 'run;
            }
            match read_full(&mut sock, &mut resp, || cx.keep()) {
                Ok(ReadEnd::Full) => {}
                Ok(ReadEnd::Stopped { .. }) => break 'run,
                Ok(ReadEnd::Closed { .. }) => {
                    out.error = why_unread(cx, None);
                    break 'run;
                }
                Err(e) => {
                    out.error = why_unread(cx, Some(&e));
                    break 'run;
                }
            }
            now = Instant::now();
            record(&mut out, &mut rec, cx, t0, now);
            if !cx.more(out.transactions, now) {
                break 'run;
            }
        }
        target = pause(cx, now);
        now = Instant::now();
    }
    note_tcp_info(&mut out, &sock);
    out
}

/// Send a TCP_RR request: in one write, or with `--split-request` its first byte and
/// then the rest ([`RrSettings::split_request`]).
pub(super) fn write_request(cx: &Ctx<'_>, sock: &mut TcpStream, req: &[u8]) -> io::Result<()> {
    if cx.s.split_request && req.len() > 1 {
        write_full(sock, &req[..1], || cx.keep())?;
        write_full(sock, &req[1..], || cx.keep())
    } else {
        write_full(sock, req, || cx.keep())
    }
}

/// What ended a TCP stream whose response was not read in full: the server closed the
/// connection (`failed` is none) or the socket failed. When the watchdog shut the
/// socket at the run's end, that is what it was, and an error only if the run was
/// not stopped by the user.
pub(super) fn why_unread(cx: &Ctx<'_>, failed: Option<&io::Error>) -> Option<String> {
    if cx.cutoff.load(Ordering::SeqCst) {
        return (!cx.ctl.stop.load(Ordering::Relaxed)).then(|| {
            format!(
                "a transaction was still unanswered {} s after the end of the run",
                IN_FLIGHT_GRACE.as_secs()
            )
        });
    }
    Some(match failed {
        Some(e) => format!("reading a response: {}", crate::error_chain(e)),
        None => "the server closed the data connection mid-test".into(),
    })
}

/// The stream's data socket's own view at its end.
pub(super) fn note_tcp_info(out: &mut StreamOutcome, sock: &TcpStream) {
    if let Ok(ti) = sockopt::tcp_info(sock) {
        out.retrans = u64::from(ti.total_retrans);
        out.info = vec![ti];
    }
}

/// The bits of a sequence number that `k` sequence bytes carry.
pub(super) fn seq_mask(k: usize) -> u64 {
    if k >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * k)) - 1
    }
}

/// Sequence bytes carried at the start of a UDP request and echoed by the server.
pub(super) fn seq_len(s: &RrSettings) -> usize {
    (s.request_size.min(s.response_size) as usize).min(8)
}

pub(super) fn put_seq(buf: &mut [u8], seq: u64, k: usize) {
    buf[..k].copy_from_slice(&seq.to_le_bytes()[..k]);
}

pub(super) fn get_seq(buf: &[u8], k: usize) -> u64 {
    let mut b = [0u8; 8];
    b[..k].copy_from_slice(&buf[..k]);
    u64::from_le_bytes(b)
}

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

pub(super) fn udp_rr(cx: &Ctx<'_>, mut rec: Option<IntervalRecorder>) -> StreamOutcome {
    let mut out = StreamOutcome::default();
    let u = match udp_socket(cx) {
        Ok(u) => u,
        Err(e) => {
            out.error = Some(format!("UDP data socket: {}", crate::error_chain(&e)));
            return out;
        }
    };
    out.local_addr = u.local_addr().ok();
    let k = seq_len(cx.s);
    let mask = seq_mask(k);
    let mut req = vec![0u8; cx.s.request_size as usize];
    let mut resp = vec![0u8; cx.s.response_size as usize + 1];
    let mut seq = 0u64;
    let mut now = cx.start;
    let mut target = None;
    let mut rto = UdpTimeout::new(UDP_TIMEOUT_FLOOR, cx.s.timeout);
    let mut gave_up = GaveUp::<GivenUp>::default();
    let mut sock_timeout = cx.s.timeout.min(POLL_TICK);
    let fd = std::os::fd::AsRawFd::as_raw_fd(&u);
    let mut book = if cx.s.anatomy {
        if let Err(e) = crate::probe::stamps::enable(fd, false) {
            out.error = Some(no_stamps(&e));
            return out;
        }
        Some(cx.anatomy())
    } else {
        None
    };
    let recv_flags = recv_flags(cx);
    'run: while cx.more(out.transactions + out.lost, now) {
        for _ in 0..cx.s.burst {
            seq += 1;
            put_seq(&mut req, seq, k);
            let limit = if cx.s.adaptive_timeout {
                rto.current()
            } else {
                cx.s.timeout
            };
            // Wake when the request is due to be lost, in whole ms (so that the
            // socket option changes only when the timeout really moves).
            let want = wake_after(limit);
            if want != sock_timeout && u.set_read_timeout(Some(want)).is_ok() {
                sock_timeout = want;
            }
            let t0 = Instant::now();
            let sent = crate::kernel::realtime_ns();
            let cpu_sent = book
                .as_ref()
                .map_or(0, |_| crate::probe::anatomy::current_cpu());
            note_pacing(&mut out, &mut target, t0);
            if let Err(e) = u.send(&req) {
                out.error = Some(format!("sending a request: {}", crate::error_chain(&e)));
                break 'run;
            }
            loop {
                // Without --anatomy, a plain recv: no control buffer to fill and parse.
                let got = if book.is_some() {
                    crate::probe::stamps::recv(fd, &mut resp, recv_flags)
                } else {
                    crate::probe::io::recv_with(fd, &mut resp, recv_flags).map(|n| (n, None))
                };
                match got {
                    Ok((n, rx))
                        if n == cx.s.response_size as usize && get_seq(&resp, k) == seq & mask =>
                    {
                        now = Instant::now();
                        record(&mut out, &mut rec, cx, t0, now);
                        out.lost_tail = 0;
                        rto.sample(now - t0);
                        // Read before the client gave up, but it came after its timeout
                        // (a client woken late finds it waiting): late all the same.
                        if arrived_after(rx, sent, now - t0, limit) {
                            out.late_replies += 1;
                        }
                        if let Some(book) = book.as_mut() {
                            let mut part =
                                udp_part(seq, seq & mask, (sent, cpu_sent), rx, Sends::default());
                            // After the part's `returned`: the read is not the round trip's.
                            part.sends = request_sends(fd, seq);
                            cx.anatomy_record(book, part, &resp);
                        }
                        break;
                    }
                    Ok((n, rx)) => {
                        let reply = (n == cx.s.response_size as usize).then_some((&resp[..n], rx));
                        late_reply(cx, (&mut out, &mut rec, &mut book), &mut gave_up, reply, k);
                    }
                    Err(e)
                        if crate::probe::io::is_timeout(&e)
                            || e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        out.error = Some(format!(
                            "receiving a response: {e} (is the server still running?)"
                        ));
                        break 'run;
                    }
                }
                // Given up on once its timeout has passed, whatever woke the read (the
                // socket's timeout or another datagram): a reply after that is late.
                now = Instant::now();
                let waited = now - t0;
                if waited >= limit {
                    out.lost += 1;
                    out.lost_tail += 1;
                    // Its send stamp now, before the next request's read passes it.
                    let sends = if book.is_some() {
                        request_sends(fd, seq)
                    } else {
                        Sends::default()
                    };
                    gave_up.push(GivenUp {
                        seq,
                        t0,
                        sent,
                        cpu: cpu_sent,
                        sends,
                    });
                    break;
                }
                if !cx.keep() {
                    break 'run;
                }
                // Read on until the timeout, not a whole timeout after what woke it.
                let left = wake_after(limit - waited);
                if left != sock_timeout && u.set_read_timeout(Some(left)).is_ok() {
                    sock_timeout = left;
                }
            }
            if !cx.more(out.transactions + out.lost, now) {
                break 'run;
            }
        }
        target = pause(cx, now);
        now = Instant::now();
    }
    // Replies to the last requests given up on may still come: one more timeout for
    // them (the last one carries the part of the transaction before it).
    if out.lost_tail > 0 && out.error.is_none() && !cx.ctl.stop.load(Ordering::Relaxed) {
        let until = Instant::now() + rto.current().min(cx.s.timeout);
        while out.lost_tail > 0 && Instant::now() < until {
            let _ = u.set_read_timeout(Some(wake_after(until - Instant::now())));
            let got = if book.is_some() {
                crate::probe::stamps::recv(fd, &mut resp, recv_flags)
            } else {
                crate::probe::io::recv_with(fd, &mut resp, recv_flags).map(|n| (n, None))
            };
            let Ok((n, rx)) = got else { continue };
            let reply = (n == cx.s.response_size as usize).then_some((&resp[..n], rx));
            late_reply(cx, (&mut out, &mut rec, &mut book), &mut gave_up, reply, k);
        }
    }
    out.anatomy = book;
    out
}

/// A datagram that is not the reply the loop waits for (`reply`: none when it is the
/// wrong size): the reply to a request given up on, which then counts as a late reply
/// and a transaction with its round trip (and its anatomy), no longer a loss; or a
/// stray.
fn late_reply(
    cx: &Ctx<'_>,
    (out, rec, book): (
        &mut StreamOutcome,
        &mut Option<IntervalRecorder>,
        &mut Option<crate::probe::anatomy::Recorder>,
    ),
    gave_up: &mut GaveUp<GivenUp>,
    reply: Option<(&[u8], Option<u64>)>,
    k: usize,
) {
    let mask = seq_mask(k);
    let Some((resp, rx)) = reply else {
        out.stray_replies += 1;
        return;
    };
    let echoed = get_seq(resp, k);
    let Some((g, after)) = gave_up.take_newest(|g| g.seq & mask == echoed) else {
        out.stray_replies += 1;
        return;
    };
    record(out, rec, cx, g.t0, Instant::now());
    out.lost = out.lost.saturating_sub(1);
    out.late_replies += 1;
    out.lost_tail = out.lost_tail.min(after);
    if let Some(book) = book.as_mut() {
        let part = udp_part(g.seq, echoed, (g.sent, g.cpu), rx, g.sends);
        cx.anatomy_record(book, part, resp);
    }
}

/// Whether a reply arrived after `limit`: by its kernel RX stamp against the request's
/// `sent` (both CLOCK_REALTIME, `--anatomy`), else by when its read returned, `waited`.
fn arrived_after(rx: Option<u64>, sent: u64, waited: Duration, limit: Duration) -> bool {
    let limit_ns = u64::try_from(limit.as_nanos()).unwrap_or(u64::MAX);
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

/// The UDP requests given up on most recently, at most [`GAVE_UP_MAX`], oldest first:
/// a reply later than that many more timeouts is a stray. Closed loop keeps
/// [`GivenUp`]s, open loop its pending requests.
pub(super) struct GaveUp<T>(std::collections::VecDeque<T>);

impl<T> Default for GaveUp<T> {
    fn default() -> Self {
        Self(std::collections::VecDeque::new())
    }
}

/// Requests given up on that a late reply can still be matched to.
pub(super) const GAVE_UP_MAX: usize = 64;

impl<T> GaveUp<T> {
    pub(super) fn push(&mut self, g: T) {
        if self.0.len() == GAVE_UP_MAX {
            self.0.pop_front();
        }
        self.0.push_back(g);
    }

    /// The newest request a reply answers (`is`: the sequence bytes may wrap, so the
    /// newest with that echo), taken out, and how many given up on after it are still
    /// unanswered.
    pub(super) fn take_newest(&mut self, is: impl Fn(&T) -> bool) -> Option<(T, u64)> {
        let i = self.0.iter().rposition(is)?;
        let g = self.0.remove(i)?;
        Some((g, (self.0.len() - i) as u64))
    }
}

/// The SND stamp of request `seq` (datagrams are numbered from 0, lost requests
/// included: request `seq` is seq − 1).
fn request_sends(fd: std::os::fd::RawFd, seq: u64) -> Sends {
    let mut sends = Sends::default();
    let want = seq.wrapping_sub(1) as u32;
    let _ = crate::probe::stamps::drain_tx(fd, |t| {
        if t.kind == crate::probe::stamps::TxKind::Sent && t.id == want {
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
) -> crate::probe::anatomy::ClientPart {
    use crate::probe::anatomy::{current_cpu, ClientPart};
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

/// The error of a kernel that refuses the stamps `--anatomy` needs.
pub(super) fn no_stamps(e: &io::Error) -> String {
    format!("--anatomy needs the kernel's software timestamps (SO_TIMESTAMPING): {e}")
}

/// `--recv spin`: every read returns at once (`MSG_DONTWAIT`), and the loop reads again.
pub(super) fn recv_flags(cx: &Ctx<'_>) -> libc::c_int {
    if cx.s.recv_spin {
        libc::MSG_DONTWAIT
    } else {
        0
    }
}

/// TCP_CRR's connection for one transaction; none when connecting failed, and the
/// stream's error says why.
pub(super) fn connect_one(cx: &Ctx<'_>, out: &mut StreamOutcome) -> Option<TcpStream> {
    tcp_socket(cx.s, cx.data, true)
        .map_err(|e| {
            let hint = if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) {
                " (out of local ports: connections in TIME_WAIT; lower the rate or the duration)"
            } else {
                ""
            };
            out.error = Some(format!("connecting: {}{hint}", crate::error_chain(&e)));
        })
        .ok()
}

/// A TCP_CRR transaction begun at `t0`, connected at `tc`, answered at `t1`: its
/// connect time and its round trip.
pub(super) fn record_crr(
    out: &mut StreamOutcome,
    rec: &mut Option<IntervalRecorder>,
    cx: &Ctx<'_>,
    [t0, tc, t1]: [Instant; 3],
) {
    out.connect
        .record_ns(u64::try_from((tc - t0).as_nanos()).unwrap_or(u64::MAX));
    record(out, rec, cx, t0, t1);
}

/// After a TCP_CRR transaction: its connection's retransmissions and tcp_info.
pub(super) fn note_crr_connection(out: &mut StreamOutcome, sock: &TcpStream) {
    if let Ok(ti) = sockopt::tcp_info(sock) {
        out.retrans += u64::from(ti.total_retrans);
        out.info = vec![ti];
    }
    out.local_addr = out.local_addr.or(sock.local_addr().ok());
}

pub(super) fn tcp_crr(cx: &Ctx<'_>, mut rec: Option<IntervalRecorder>) -> StreamOutcome {
    let mut out = StreamOutcome::default();
    let req = vec![0u8; cx.s.request_size as usize];
    let mut resp = vec![0u8; cx.s.response_size as usize];
    let mut now = cx.start;
    let mut target = None;
    'run: while cx.more(out.transactions, now) {
        for _ in 0..cx.s.burst {
            let t0 = Instant::now();
            note_pacing(&mut out, &mut target, t0);
            let Some(mut sock) = connect_one(cx, &mut out) else {
                break 'run;
            };
            let tc = Instant::now();
            if let Err(e) = write_full(&mut sock, &req, || cx.keep()) {
                out.error = Some(format!("sending a request: {}", crate::error_chain(&e)));
                break 'run;
            }
            match read_full(&mut sock, &mut resp, || cx.keep()) {
                Ok(ReadEnd::Full) => {}
                Ok(ReadEnd::Stopped { .. }) => break 'run,
                Ok(ReadEnd::Closed { .. }) => {
                    out.error = Some("the server closed the connection before responding".into());
                    break 'run;
                }
                Err(e) => {
                    out.error = Some(format!("reading a response: {}", crate::error_chain(&e)));
                    break 'run;
                }
            }
            now = Instant::now();
            record_crr(&mut out, &mut rec, cx, [t0, tc, now]);
            note_crr_connection(&mut out, &sock);
            drop(sock);
            if !cx.more(out.transactions, now) {
                break 'run;
            }
        }
        target = pause(cx, now);
        now = Instant::now();
    }
    out
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
            error: Some("second".into()),
            local_addr: Some("10.0.0.1:5".parse().unwrap()),
            ..Default::default()
        };
        b.hist.record_ns(40_000);
        b.hist.record_ns(50_000);
        let c = StreamOutcome {
            error: Some("third".into()),
            ..Default::default()
        };
        let mut t = StreamOutcome::default();
        for o in [a, b, c] {
            t.merge(&o);
        }
        assert_eq!(
            (t.transactions, t.lost, t.late_replies, t.retrans, t.cpu_ns),
            (5, 1, 1, 2, 100)
        );
        assert_eq!(t.hist.count(), 5);
        assert_eq!(t.hist.min_ns(), Some(10_000));
        assert_eq!(t.hist.max_ns(), Some(50_000));
        assert_eq!(t.error.as_deref(), Some("second"));
        assert_eq!(t.local_addr, Some("10.0.0.1:5".parse().unwrap()));
    }

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

    /// Witness: the bytes written and read back (the sequence number rides in the
    /// first bytes of a request, little-endian, as many as the shorter message holds, up
    /// to 8).
    #[test]
    fn sequence_numbers_round_trip_through_a_request() {
        let mut buf = [0u8; 8];
        put_seq(&mut buf, 0x0102_0304_0506_0708, 8);
        assert_eq!(buf, [8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(get_seq(&buf, 8), 0x0102_0304_0506_0708);
        let mut short = [0u8; 3];
        put_seq(&mut short, 0x0a0b_0c0d, 3);
        assert_eq!(short, [0x0d, 0x0c, 0x0b]);
        assert_eq!(get_seq(&short, 3), 0x0b_0c0d);
        let mut s = RrSettings::new("127.0.0.1:1".parse().unwrap());
        (s.request_size, s.response_size) = (1, 2);
        assert_eq!(seq_len(&s), 1);
        (s.request_size, s.response_size) = (100, 64);
        assert_eq!(seq_len(&s), 8);
    }
}
