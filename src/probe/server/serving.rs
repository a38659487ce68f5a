//! The loop every data thread runs, whatever the test: read a request, think
//! (`--server-delay`), answer, count. Where requests come from is a [`Transport`]
//! (TCP_RR's connection, TCP_CRR's listener with a connection per transaction, UDP_RR's
//! socket); what a transaction does besides being answered is its [`Hook`]: nothing
//! ([`Plain`]), or `--anatomy`'s stamps (`super::stamped`).

use crate::kernel::cpu::{self, CpuTracker};
use crate::kernel::sockopt;
use crate::kernel::tcp_info::TcpInfo;
use crate::probe::anatomy::LastPart;
use crate::probe::control::TestSpec;
use crate::probe::io::{is_timeout, read_full, write_full, ReadEnd};
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often blocked data threads look at their stop flag.
pub(super) const POLL_TICK: Duration = Duration::from_millis(100);

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
pub(super) fn canon(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

pub(super) fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    canon(a) == canon(b)
}

/// What every data thread of a test shares: what the client asked for, who it is,
/// and when it was last heard from.
pub(super) struct Service {
    pub(super) spec: TestSpec,
    pub(super) peer_ip: IpAddr,
    /// How long the client may send nothing before the test is ended.
    pub(super) idle: Duration,
    pub(super) started: Instant,
    /// When the client was last heard from, in ms since `started`.
    pub(super) last_activity_ms: AtomicU64,
}

impl Service {
    /// Note that the client was heard from (UDP and TCP_CRR threads; TCP_RR's activity
    /// is read from its sockets' `tcp_info`, to keep the clock off its hot path).
    fn heard(&self) {
        self.last_activity_ms.store(
            crate::stats::units::ms(self.started.elapsed()),
            Ordering::Relaxed,
        );
    }

    /// A data connection set up as the client asked.
    pub(super) fn configure(&self, s: &TcpStream) -> io::Result<()> {
        s.set_nodelay(self.spec.nodelay)?;
        if self.spec.thin_linear_timeouts {
            sockopt::set_thin_linear_timeouts(s, true).map_err(|e| e.source)?;
        }
        if let Some(cc) = &self.spec.congestion {
            sockopt::set_congestion(s, cc).map_err(|e| {
                io::Error::new(
                    e.source.kind(),
                    format!("congestion control {cc}: {}", e.source),
                )
            })?;
        }
        Ok(())
    }

    /// `--server-delay`: wait before answering (sleep, then spin the last 200 µs, so
    /// the delay is what was asked, not what the timer slack makes of it).
    fn think(&self, stop: &AtomicBool) {
        if self.spec.server_delay_us > 0 {
            let until = Instant::now() + Duration::from_micros(self.spec.server_delay_us);
            crate::probe::pacing::wait_until(
                crate::probe::pacing::PaceMode::Hybrid {
                    margin: Duration::from_micros(200),
                },
                until,
                || !stop.load(Ordering::Relaxed),
            );
        }
    }
}

/// Counters one data thread returns.
#[derive(Default)]
pub(super) struct ThreadCounters {
    pub(super) transactions: u64,
    pub(super) bytes_in: u64,
    pub(super) bytes_out: u64,
    pub(super) connections: u64,
    pub(super) dropped: u64,
    pub(super) retrans: u64,
    pub(super) last_info: Option<TcpInfo>,
    pub(super) cpus: CpuTracker,
    /// `--anatomy`: the server's part of the stream's last transaction (merged: every
    /// stream's).
    pub(super) last_parts: Vec<LastPart>,
}

impl ThreadCounters {
    /// Add another thread's counts: sums, every stream's last part, the CPUs; a
    /// TCP_CRR connection's `tcp_info` from the later thread that has one.
    pub(super) fn merge(&mut self, o: ThreadCounters) {
        self.transactions += o.transactions;
        self.bytes_in += o.bytes_in;
        self.bytes_out += o.bytes_out;
        self.connections += o.connections;
        self.dropped += o.dropped;
        self.retrans += o.retrans;
        self.last_info = o.last_info.or(self.last_info.take());
        self.cpus.merge(&o.cpus);
        self.last_parts.extend(o.last_parts);
    }
}

/// What reading the next request gave.
pub(super) enum Next {
    /// A request, read whole, with its last packet's RX stamp when stamped.
    Request(Option<u64>),
    /// Nothing to answer (a stranger's datagram, one dropped on purpose, a connection
    /// that closed or went quiet before its request): read the next.
    Skip,
    /// The thread is done.
    End,
}

/// Where a data thread's requests come from and its responses go.
pub(super) trait Transport {
    /// The request buffer's length for `spec` (UDP's is one longer, so that a longer
    /// datagram shows).
    fn request_len(spec: &TestSpec) -> usize {
        spec.request_size as usize
    }

    /// Read the next request whole into `req` (with the kernel's RX stamp when the
    /// hook is stamped; a new connection shown to the hook before it is read).
    fn next<H: Hook<Self>>(
        &mut self,
        svc: &Service,
        stop: &AtomicBool,
        req: &mut [u8],
        hook: &mut H,
        c: &mut ThreadCounters,
    ) -> Next
    where
        Self: Sized;

    /// The socket the request came on.
    fn fd(&self) -> RawFd;

    /// Send `resp` (UDP: with the request's sequence number, echoed from `req`).
    /// `Err(())`: not sent; [`Transport::respond_failed`] says what it ends.
    fn respond(&mut self, req: &[u8], resp: &mut [u8], stop: &AtomicBool) -> Result<(), ()>;

    /// Whether a response that could not be sent ends the thread (TCP_RR's one
    /// connection) rather than only this transaction.
    const RESPOND_FAILED_ENDS: bool;

    /// After a transaction was answered and counted.
    #[inline]
    fn answered(&mut self, _svc: &Service, _stop: &AtomicBool, _c: &mut ThreadCounters) {}

    /// The bytes the thread's transactions moved.
    fn finish(&mut self, spec: &TestSpec, c: &mut ThreadCounters) {
        c.bytes_in = c.transactions * u64::from(spec.request_size);
        c.bytes_out = c.transactions * u64::from(spec.response_size);
    }
}

/// What a transaction does besides being answered, at its stamp points in order:
/// (a new connection:) `connected`, `arrived`, `fill` the response, and after it was
/// sent, `responded`. [`Plain`]'s are empty and compile to nothing.
pub(super) trait Hook<T: Transport> {
    /// Whether requests are read with their RX stamps.
    const STAMPED: bool;

    /// A new connection (TCP_CRR), before its request is read: false drops it.
    #[inline]
    fn connected(&mut self, _fd: RawFd) -> bool {
        true
    }

    /// The request was read whole; `rx`: its RX stamp.
    #[inline]
    fn arrived(&mut self, _rx: Option<u64>) {}

    /// Write what the response carries (the server's part of the transaction before
    /// it) into `resp`; `req`: the request; `answered`: transactions answered so far.
    #[inline]
    fn fill(&mut self, _t: &T, _req: &[u8], _resp: &mut [u8], _answered: u64) {}

    /// The response was sent: false when what follows it failed (TCP_CRR's part after
    /// the response), and the transaction is not counted.
    #[inline]
    fn responded(&mut self, _t: &mut T, _svc: &Service, _stop: &AtomicBool) -> bool {
        true
    }

    /// The thread is done after `c.transactions`.
    #[inline]
    fn finish(self, _t: &T, _c: &mut ThreadCounters)
    where
        Self: Sized,
    {
    }
}

/// No hook: requests answered and nothing else.
pub(super) struct Plain;

impl<T: Transport> Hook<T> for Plain {
    const STAMPED: bool = false;
}

/// Answer requests until the transport ends or the test stops.
pub(super) fn serve<T: Transport, H: Hook<T>>(
    svc: &Service,
    mut t: T,
    mut hook: H,
    stop: &AtomicBool,
) -> ThreadCounters {
    if let Some(c) = svc.spec.server_cpu {
        let _ = cpu::pin_current_thread(c);
    }
    let mut c = ThreadCounters::default();
    let mut req = vec![0u8; T::request_len(&svc.spec)];
    let mut resp = vec![0u8; svc.spec.response_size as usize];
    loop {
        let rx = match t.next(svc, stop, &mut req, &mut hook, &mut c) {
            Next::Request(rx) => rx,
            Next::Skip => continue,
            Next::End => break,
        };
        hook.arrived(rx);
        svc.think(stop);
        hook.fill(&t, &req, &mut resp, c.transactions);
        if t.respond(&req, &mut resp, stop).is_err() {
            if T::RESPOND_FAILED_ENDS {
                break;
            }
            continue;
        }
        if !hook.responded(&mut t, svc, stop) {
            continue;
        }
        c.transactions += 1;
        if c.transactions % 64 == 1 {
            c.cpus.sample();
        }
        t.answered(svc, stop, &mut c);
    }
    hook.finish(&t, &mut c);
    t.finish(&svc.spec, &mut c);
    c
}

/// Read a whole request; with `stamped`, with the RX stamp of its last packet. `None`
/// when the connection closed, failed, or `keep` said stop.
fn read_request(
    s: &mut TcpStream,
    buf: &mut [u8],
    stamped: bool,
    keep: impl Fn() -> bool,
) -> Option<Option<u64>> {
    if !stamped {
        return matches!(read_full(s, buf, keep), Ok(ReadEnd::Full)).then_some(None);
    }
    let fd = s.as_raw_fd();
    let mut got = 0;
    let mut rx = None;
    while got < buf.len() {
        match crate::probe::stamps::recv(fd, &mut buf[got..], 0) {
            Ok((0, _)) => return None,
            Ok((n, ts)) => {
                got += n;
                rx = ts.or(rx);
            }
            Err(e) if is_timeout(&e) => {
                if !keep() {
                    return None;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(rx)
}

/// TCP_RR: one of the client's streams, its connection accepted before the test ran.
/// It has no receive timeout: a finite one arms a kernel timer on every blocking recv
/// (~15 % of TCP_RR's rate at one vCPU); the test's end shuts it down.
pub(super) struct Connection(pub(super) TcpStream);

impl Transport for Connection {
    const RESPOND_FAILED_ENDS: bool = true;

    #[inline]
    fn next<H: Hook<Self>>(
        &mut self,
        _svc: &Service,
        stop: &AtomicBool,
        req: &mut [u8],
        _hook: &mut H,
        _c: &mut ThreadCounters,
    ) -> Next {
        match read_request(&mut self.0, req, H::STAMPED, || {
            !stop.load(Ordering::Relaxed)
        }) {
            Some(rx) => Next::Request(rx),
            None => Next::End,
        }
    }

    fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    #[inline]
    fn respond(&mut self, _req: &[u8], resp: &mut [u8], stop: &AtomicBool) -> Result<(), ()> {
        write_full(&mut self.0, resp, || !stop.load(Ordering::Relaxed)).map_err(|_| ())
    }
}

/// TCP_CRR: the test's listener, a connection accepted per transaction.
pub(super) struct Accepting<'a> {
    pub(super) listener: &'a TcpListener,
    /// The connection of the transaction under way.
    pub(super) conn: Option<TcpStream>,
}

impl Transport for Accepting<'_> {
    const RESPOND_FAILED_ENDS: bool = false;

    fn next<H: Hook<Self>>(
        &mut self,
        svc: &Service,
        stop: &AtomicBool,
        req: &mut [u8],
        hook: &mut H,
        c: &mut ThreadCounters,
    ) -> Next {
        self.conn = None;
        if stop.load(Ordering::Relaxed) {
            return Next::End;
        }
        let Ok((mut s, peer)) = self.listener.accept() else {
            return Next::End;
        };
        if !same_ip(peer.ip(), svc.peer_ip) || svc.configure(&s).is_err() {
            return Next::Skip;
        }
        c.connections += 1;
        svc.heard();
        let _ = s.set_read_timeout(Some(POLL_TICK));
        let _ = s.set_write_timeout(Some(POLL_TICK));
        if !hook.connected(s.as_raw_fd()) {
            return Next::Skip;
        }
        let t0 = Instant::now();
        let keep = || !stop.load(Ordering::Relaxed) && t0.elapsed() < svc.idle;
        let got = read_request(&mut s, req, H::STAMPED, keep);
        self.conn = Some(s);
        got.map_or(Next::Skip, Next::Request)
    }

    fn fd(&self) -> RawFd {
        self.conn.as_ref().map_or(-1, AsRawFd::as_raw_fd)
    }

    fn respond(&mut self, _req: &[u8], resp: &mut [u8], stop: &AtomicBool) -> Result<(), ()> {
        let s = self.conn.as_mut().ok_or(())?;
        write_full(s, resp, || !stop.load(Ordering::Relaxed)).map_err(|_| ())
    }

    /// Wait for the client's close, so the client, not the server, holds TIME_WAIT,
    /// and count what the connection retransmitted.
    fn answered(&mut self, svc: &Service, stop: &AtomicBool, c: &mut ThreadCounters) {
        let Some(s) = self.conn.as_mut() else { return };
        let t0 = Instant::now();
        let mut one = [0u8; 1];
        let _ = read_full(s, &mut one, || {
            !stop.load(Ordering::Relaxed) && t0.elapsed() < svc.idle
        });
        if let Ok(ti) = sockopt::tcp_info(&*s) {
            c.retrans += u64::from(ti.total_retrans);
            c.last_info = Some(ti);
        }
    }
}

/// UDP_RR: the test's socket, shared by its threads; replies go to each request's
/// sender, which must be the client's host.
pub(super) struct Datagrams<'a> {
    pub(super) sock: &'a UdpSocket,
    /// Sequence bytes a request carries and its response echoes.
    pub(super) echo: usize,
    /// When the client was last heard from by this thread.
    pub(super) idle_since: Instant,
    /// Requests from the client seen (for `--udp-drop-one-in`).
    pub(super) seen: u64,
    /// The sender of the request under way.
    pub(super) from: Option<SocketAddr>,
    /// The sender of the last answered request.
    pub(super) last_peer: Option<SocketAddr>,
}

impl<'a> Datagrams<'a> {
    pub(super) fn new(sock: &'a UdpSocket, spec: &TestSpec) -> Self {
        Self {
            sock,
            echo: (spec.request_size.min(spec.response_size) as usize).min(8),
            idle_since: Instant::now(),
            seen: 0,
            from: None,
            last_peer: None,
        }
    }
}

impl Transport for Datagrams<'_> {
    const RESPOND_FAILED_ENDS: bool = false;

    fn request_len(spec: &TestSpec) -> usize {
        spec.request_size as usize + 1
    }

    #[inline]
    fn next<H: Hook<Self>>(
        &mut self,
        svc: &Service,
        stop: &AtomicBool,
        req: &mut [u8],
        _hook: &mut H,
        c: &mut ThreadCounters,
    ) -> Next {
        if stop.load(Ordering::Relaxed) || self.idle_since.elapsed() >= svc.idle {
            return Next::End;
        }
        let got = if H::STAMPED {
            recv_from_stamped(self.sock.as_raw_fd(), req)
        } else {
            self.sock.recv_from(req).map(|(n, from)| (n, from, None))
        };
        let Ok((n, from, rx)) = got else {
            return Next::Skip;
        };
        if n != svc.spec.request_size as usize || !same_ip(from.ip(), svc.peer_ip) {
            return Next::Skip;
        }
        self.idle_since = Instant::now();
        svc.heard();
        self.seen += 1;
        if svc
            .spec
            .udp_drop_one_in
            .is_some_and(|k| self.seen % u64::from(k) == 0)
        {
            c.dropped += 1;
            return Next::Skip;
        }
        self.from = Some(from);
        Next::Request(rx)
    }

    fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Echo the client's sequence number so late replies are told apart.
    #[inline]
    fn respond(&mut self, req: &[u8], resp: &mut [u8], _stop: &AtomicBool) -> Result<(), ()> {
        let from = self.from.ok_or(())?;
        resp[..self.echo].copy_from_slice(&req[..self.echo]);
        self.sock.send_to(resp, from).map_err(|_| ())?;
        self.last_peer = Some(from);
        Ok(())
    }

    /// Requests dropped on purpose were received too.
    fn finish(&mut self, spec: &TestSpec, c: &mut ThreadCounters) {
        c.bytes_in = (c.transactions + c.dropped) * u64::from(spec.request_size);
        c.bytes_out = c.transactions * u64::from(spec.response_size);
    }
}

/// A datagram with its sender and RX stamp.
fn recv_from_stamped(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, SocketAddr, Option<u64>)> {
    // SAFETY: sockaddr_storage is plain data.
    let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let (n, rx) = crate::probe::stamps::recv_from(fd, buf, 0, Some(&mut from))?;
    // SAFETY: the kernel wrote a sockaddr of its family into `from`.
    let sa = unsafe {
        socket2::SockAddr::new(
            from,
            std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t,
        )
    }
    .as_socket()
    .ok_or_else(|| io::Error::other("a datagram without a sender"))?;
    Ok((n, sa, rx))
}
