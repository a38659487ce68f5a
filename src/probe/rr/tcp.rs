//! TCP_RR and TCP_CRR transactions: the data sockets, and the two [`Exchange`]s (one
//! connection for the stream; a connection of its own per transaction). What a
//! transaction does besides being timed is its [`Hook`]: nothing ([`Plain`]), or
//! `--anatomy`'s stamps (`super::stamped`).

use super::closed::{Ctx, Ended, Exchange, Tally};
use super::outcome::{StreamError, StreamOutcome};
use super::settings::{RrSettings, CONNECT_TIMEOUT, IN_FLIGHT_GRACE, POLL_TICK};
use crate::kernel::sockopt;
use crate::probe::io::{is_timeout, recv_with, write_full};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// A connected data socket. Closed-loop TCP_RR sockets block without a timeout: a
/// finite `SO_RCVTIMEO` makes every blocking `recv` arm and cancel a kernel timer,
/// which cost TCP_RR ~15 % of its transactions/s at one vCPU (bench/RESULTS-rr.md);
/// the watchdog shuts them down instead when the run must end.
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

/// What a TCP transaction does besides being timed, called at its stamp points in
/// order: `begin`, (a new connection:) `connected`, `sending`, `recv` until the
/// response is whole, `received`, then, after the round trip is recorded, `answered`.
/// [`Plain`]'s are empty and compile to nothing.
pub(super) trait Hook: Sized {
    /// The hook for a stream about to start.
    ///
    /// # Errors
    /// What the stream's error says (the kernel refused what the hook needs).
    fn open(cx: &Ctx<'_>) -> Result<Self, StreamError>;

    /// A connection was made: TCP_RR's one, before the first transaction; TCP_CRR's
    /// each, after `begin`.
    ///
    /// # Errors
    /// What the stream's error says.
    #[inline]
    fn connected(&mut self, _fd: RawFd) -> Result<(), StreamError> {
        Ok(())
    }

    /// A transaction begins (before TCP_CRR's connection).
    #[inline]
    fn begin(&mut self) {}

    /// Just before the request's first `send()`.
    #[inline]
    fn sending(&mut self) {}

    /// One read of the response: the bytes read, and the RX stamp the kernel gave.
    ///
    /// # Errors
    /// As `recv`.
    fn recv(fd: RawFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<(usize, Option<u64>)>;

    /// The response was read whole; `rx`: its last packet's RX stamp.
    #[inline]
    fn received(&mut self, _rx: Option<u64>) {}

    /// After the transaction's round trip was recorded as transaction `number` of the
    /// stream; `resp` the response.
    #[inline]
    fn answered(&mut self, _cx: &Ctx<'_>, _sock: &mut TcpStream, _number: u64, _resp: &[u8]) {}

    /// The stream ended after `out.transactions`; `fd` its connection (TCP_RR).
    #[inline]
    fn finish(self, _fd: Option<RawFd>, _out: &mut StreamOutcome) {}
}

/// No hook: the transaction timed and nothing else.
pub(super) struct Plain;

impl Hook for Plain {
    fn open(_cx: &Ctx<'_>) -> Result<Self, StreamError> {
        Ok(Plain)
    }

    /// A plain `recv`: no control buffer to fill and parse.
    #[inline]
    fn recv(fd: RawFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<(usize, Option<u64>)> {
        recv_with(fd, buf, flags).map(|n| (n, None))
    }
}

/// How a read of a whole response ended.
enum Read {
    /// Filled, with the RX stamp of its last packet when the hook read one.
    Full(Option<u64>),
    Stopped,
    Closed,
}

/// Read the whole response, waiting on after timeouts (and `--recv spin`'s empty
/// reads) while the run goes on.
#[inline]
fn read_response<H: Hook>(cx: &Ctx<'_>, fd: RawFd, buf: &mut [u8]) -> io::Result<Read> {
    let flags = cx.recv_flags();
    let mut got = 0;
    let mut rx = None;
    while got < buf.len() {
        match H::recv(fd, &mut buf[got..], flags) {
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

/// Send a request: in one write, or with `--split-request` its first byte and then
/// the rest ([`RrSettings::split_request`]).
pub(super) fn write_request(cx: &Ctx<'_>, sock: &mut TcpStream, req: &[u8]) -> io::Result<()> {
    if cx.s.split_request && req.len() > 1 {
        write_full(sock, &req[..1], || cx.keep())?;
        write_full(sock, &req[1..], || cx.keep())
    } else {
        write_full(sock, req, || cx.keep())
    }
}

/// Send `req` and read the whole of `resp` with the hook at its points; `unread` says
/// what a response not read in full (closed, or the read's error) means for this
/// test. Returns when the response was read.
#[inline]
fn request<H: Hook>(
    cx: &Ctx<'_>,
    hook: &mut H,
    sock: &mut TcpStream,
    (req, resp): (&[u8], &mut [u8]),
    unread: impl FnOnce(Option<io::Error>) -> Ended,
) -> Result<Instant, Ended> {
    hook.sending();
    write_request(cx, sock, req).map_err(|e| Some(StreamError::Send(e)))?;
    match read_response::<H>(cx, sock.as_raw_fd(), resp) {
        Ok(Read::Full(rx)) => hook.received(rx),
        Ok(Read::Stopped) => return Err(None),
        Ok(Read::Closed) => return Err(unread(None)),
        Err(e) => return Err(unread(Some(e))),
    }
    Ok(Instant::now())
}

/// TCP_RR: every transaction on the stream's one connection.
pub(super) struct TcpRr<H> {
    sock: TcpStream,
    req: Vec<u8>,
    resp: Vec<u8>,
    hook: H,
}

impl<H: Hook> TcpRr<H> {
    /// The stream on its connection (made before timing started).
    pub(super) fn open(
        cx: &Ctx<'_>,
        conn: Option<TcpStream>,
        out: &mut StreamOutcome,
    ) -> Result<Self, StreamError> {
        let sock = conn.ok_or(StreamError::NoConnection)?;
        out.local_addr = sock.local_addr().ok();
        let mut hook = H::open(cx)?;
        hook.connected(sock.as_raw_fd())?;
        Ok(Self {
            sock,
            req: vec![0u8; cx.s.request_size as usize],
            resp: vec![0u8; cx.s.response_size as usize],
            hook,
        })
    }
}

impl<H: Hook> Exchange for TcpRr<H> {
    #[inline]
    fn exchange(&mut self, cx: &Ctx<'_>, tally: &mut Tally, t0: Instant) -> Result<Instant, Ended> {
        let t1 = request(
            cx,
            &mut self.hook,
            &mut self.sock,
            (&self.req, &mut self.resp),
            |e| why_unread(cx, e),
        )?;
        tally.record(cx, t0, t1);
        tally.raw_answered(cx, tally.out.transactions, (t0, t1), false);
        self.hook
            .answered(cx, &mut self.sock, tally.out.transactions, &self.resp);
        Ok(t1)
    }

    fn finish(self, _cx: &Ctx<'_>, tally: &mut Tally) {
        self.hook
            .finish(Some(self.sock.as_raw_fd()), &mut tally.out);
        if let Ok(ti) = sockopt::tcp_info(&self.sock) {
            tally.out.retrans = u64::from(ti.total_retrans);
            tally.out.info = vec![ti];
        }
    }
}

/// What ended a TCP_RR stream whose response was not read in full: the server closed
/// the connection (`failed` is none) or the socket failed. When the watchdog shut the
/// socket at the run's end, that is what it was, and an error only if the run was
/// not stopped by the user.
fn why_unread(cx: &Ctx<'_>, failed: Option<io::Error>) -> Ended {
    if cx.cutoff.load(Ordering::SeqCst) {
        return (!cx.ctl.stop.load(Ordering::Relaxed))
            .then_some(StreamError::Unanswered(IN_FLIGHT_GRACE));
    }
    Some(failed.map_or(StreamError::ServerClosed, StreamError::Read))
}

/// TCP_CRR: a connection per transaction, its handshake timed on its own (netperf's
/// TCP_CRR). The client closes first, so it holds TIME_WAIT.
pub(super) struct TcpCrr<H> {
    req: Vec<u8>,
    resp: Vec<u8>,
    hook: H,
}

impl<H: Hook> TcpCrr<H> {
    pub(super) fn open(cx: &Ctx<'_>) -> Result<Self, StreamError> {
        Ok(Self {
            req: vec![0u8; cx.s.request_size as usize],
            resp: vec![0u8; cx.s.response_size as usize],
            hook: H::open(cx)?,
        })
    }
}

impl<H: Hook> Exchange for TcpCrr<H> {
    fn exchange(&mut self, cx: &Ctx<'_>, tally: &mut Tally, t0: Instant) -> Result<Instant, Ended> {
        self.hook.begin();
        let mut sock = connect(cx)?;
        let tc = Instant::now();
        self.hook.connected(sock.as_raw_fd()).map_err(Some)?;
        let t1 = request(
            cx,
            &mut self.hook,
            &mut sock,
            (&self.req, &mut self.resp),
            |e| Some(e.map_or(StreamError::ClosedBeforeResponse, StreamError::Read)),
        )?;
        let out = &mut tally.out;
        out.connect.record_ns(crate::stats::units::ns(tc - t0));
        tally.record(cx, t0, t1);
        tally.raw_answered(cx, tally.out.transactions, (t0, t1), false);
        self.hook
            .answered(cx, &mut sock, tally.out.transactions, &self.resp);
        // The connection's own view: its retransmissions, and the last one's tcp_info.
        let out = &mut tally.out;
        if let Ok(ti) = sockopt::tcp_info(&sock) {
            out.retrans += u64::from(ti.total_retrans);
            out.info = vec![ti];
        }
        out.local_addr = out.local_addr.or(sock.local_addr().ok());
        Ok(t1)
    }

    fn finish(self, _cx: &Ctx<'_>, tally: &mut Tally) {
        self.hook.finish(None, &mut tally.out);
    }
}

/// TCP_CRR's connection for one transaction.
fn connect(cx: &Ctx<'_>) -> Result<TcpStream, Ended> {
    tcp_socket(cx.s, cx.data, true).map_err(|e| {
        Some(if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) {
            StreamError::OutOfPorts(e)
        } else {
            StreamError::Connect(e)
        })
    })
}
