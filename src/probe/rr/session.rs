//! A long-lived rr test paced by its caller: one transaction per call, for as long as
//! the server keeps the test. `rttlab agent` keeps one per peer and layer and times a
//! transaction a second on it (Pingmesh's probes, on netperf's TCP_RR, UDP_RR and
//! TCP_CRR), where `rr` runs a test flat out or on its own schedule.

use super::sequence::{get_seq, put_seq};
use super::settings::{RrError, CONNECT_TIMEOUT, UDP_TIMEOUT_FLOOR};
use super::ControlClient;
use crate::kernel::sockopt;
use crate::kernel::tcp_info::TcpInfo;
use crate::probe::control::{TestKind, TestSpec};
use crate::probe::io::{is_timeout, read_full, write_full, ReadEnd};
use crate::probe::ping::recv_with_ts;
use crate::probe::udp_timeout::UdpTimeout;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

/// Bytes of every request and response: room for a whole 64-bit sequence number, so
/// a late UDP reply is never taken for the current one.
pub const SESSION_PAYLOAD: u32 = 8;

/// What a session asks of the server.
#[derive(Clone, Debug)]
pub struct SessionSpec {
    /// The server's control address; the data port it grants is taken at the same IP.
    pub server: SocketAddr,
    /// The shared secret the control handshake proves; `None` for a server that asks for
    /// none.
    pub secret: Option<Vec<u8>>,
    /// The test asked for: TCP_RR, UDP_RR or TCP_CRR.
    pub test: TestKind,
    /// The caller's pace: the server ends a test whose client is silent longer than
    /// its idle timeout plus this.
    pub interval: Duration,
    /// A TCP transaction unanswered this long ends the session; a UDP request
    /// unanswered this long (at most; the timeout adapts below it) is lost.
    pub timeout: Duration,
    /// How long to ask the server for (it may grant less).
    pub length: Duration,
}

/// One answered transaction.
#[derive(Clone, Debug)]
pub struct Transaction {
    /// From just before the request's `send()` to the last byte of the response.
    pub rtt: Duration,
    /// TCP_CRR: the `connect()` alone (the handshake's round trip).
    pub connect: Option<Duration>,
    /// TCP: the data socket's `tcp_info` just after the response.
    pub tcp_info: Option<Box<TcpInfo>>,
}

/// What one TCP_CRR transaction ([`Session::transact`]) came to.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// The response came: the times of the exchange and its `connect()`, and `tcp_info`.
    Answered(Transaction),
    /// No reply within the timeout.
    TimedOut,
}

/// A running test on a server.
pub struct Session {
    spec: SessionSpec,
    /// Kept open: closing it ends the test.
    _control: ControlClient,
    data: SocketAddr,
    /// TCP_RR's data connection, non-blocking.
    tcp: Option<TcpStream>,
    /// UDP_RR's data socket, non-blocking.
    udp: Option<UdpSocket>,
    req: Vec<u8>,
    resp: Vec<u8>,
    seq: u64,
    rto: UdpTimeout,
    /// The request sent and not yet answered.
    pending: Option<Pending>,
    /// When the server's grant runs out (open a new session before).
    pub ends: Instant,
}

/// A request in flight on a kept TCP_RR or UDP_RR session.
#[derive(Clone, Copy, Debug)]
struct Pending {
    seq: u64,
    /// CLOCK_REALTIME just before the request's `send()`: the clock of the kernel's
    /// receive stamps.
    sent_ns: u64,
    /// Response bytes read so far (TCP may deliver them in pieces).
    got: usize,
}

impl Session {
    /// Connect, ask for the test, and for TCP_RR connect its data connection.
    ///
    /// # Errors
    /// The server is unreachable, refused the test, or its data port is closed.
    pub fn open(spec: &SessionSpec) -> Result<Self, RrError> {
        let mut control = ControlClient::connect(
            spec.server,
            spec.secret.as_deref(),
            &crate::probe::path::PathOptions::default(),
        )?;
        let max = Duration::from_millis(control.limits.max_duration_ms);
        let length = spec.length.min(max);
        let port = control.start(&TestSpec {
            interval_ms: crate::stats::units::ms(spec.interval + spec.timeout),
            ..TestSpec::basic(
                spec.test,
                SESSION_PAYLOAD,
                SESSION_PAYLOAD,
                crate::stats::units::ms(length),
            )
        })?;
        let data = SocketAddr::new(spec.server.ip(), port);
        let data_err = |source| RrError::Data { port, source };
        let (tcp, udp) = match spec.test {
            TestKind::TcpRr => {
                let s = connect(data, spec.timeout).map_err(data_err)?;
                stamped(&s).map_err(data_err)?;
                s.set_nonblocking(true).map_err(data_err)?;
                (Some(s), None)
            }
            TestKind::UdpRr => {
                let u = udp_socket(data).map_err(data_err)?;
                stamped(&u).map_err(data_err)?;
                u.set_nonblocking(true).map_err(data_err)?;
                (None, Some(u))
            }
            TestKind::TcpCrr => (None, None),
        };
        Ok(Self {
            spec: spec.clone(),
            _control: control,
            data,
            tcp,
            udp,
            req: vec![0; SESSION_PAYLOAD as usize],
            resp: vec![0; SESSION_PAYLOAD as usize + 1],
            seq: 0,
            rto: UdpTimeout::new(UDP_TIMEOUT_FLOOR, spec.timeout),
            pending: None,
            // The server's own grace for transactions in flight is not ours to use.
            ends: Instant::now() + length,
        })
    }

    /// Time one TCP_CRR transaction: connect, request, response, close (blocking).
    ///
    /// # Errors
    /// The connection was refused or reset, or the session is not TCP_CRR.
    pub fn transact(&mut self) -> io::Result<Outcome> {
        match self.spec.test {
            TestKind::TcpCrr => self.tcp_crr(),
            _ => Err(io::Error::other(
                "a kept session sends and receives instead",
            )),
        }
    }

    /// The kept TCP_RR connection's `tcp_info`.
    pub fn tcp_info(&self) -> Option<TcpInfo> {
        self.tcp.as_ref().and_then(|s| sockopt::tcp_info(s).ok())
    }

    /// The kept data socket (TCP_RR, UDP_RR), for the caller's readiness poll.
    pub fn data_fd(&self) -> Option<RawFd> {
        self.tcp
            .as_ref()
            .map(AsRawFd::as_raw_fd)
            .or_else(|| self.udp.as_ref().map(AsRawFd::as_raw_fd))
    }

    /// How long the request just sent may stay unanswered: UDP's adaptive timeout
    /// (smoothed round trip plus four deviations, between its floor and the spec's
    /// timeout), TCP's fixed one.
    pub fn reply_timeout(&self) -> Duration {
        match self.spec.test {
            TestKind::UdpRr => self.rto.current(),
            _ => self.spec.timeout,
        }
    }

    /// Send the next request of a kept TCP_RR or UDP_RR session without waiting; its
    /// response is collected by [`Session::receive`]. A request still unanswered is
    /// given up (UDP: its late reply is recognised by sequence number and dropped).
    ///
    /// # Errors
    /// The socket refused the request (TCP: the server stopped reading, or reset):
    /// the session is over.
    pub fn send(&mut self) -> io::Result<()> {
        self.seq += 1;
        put_seq(&mut self.req, self.seq, 8);
        let sent_ns = crate::kernel::realtime_ns();
        let n = match (&self.tcp, &self.udp) {
            (Some(t), _) => {
                let n = send_now(t.as_raw_fd(), &self.req)?;
                // The server times our ACK of its response (its srtt): acknowledge at
                // once, not after the 40 ms delayed-ACK timer an interactive
                // connection otherwise waits for.
                let _ = sockopt::set_quickack(t);
                n
            }
            (None, Some(u)) => send_now(u.as_raw_fd(), &self.req)?,
            (None, None) => return Err(io::Error::other("no kept data socket")),
        };
        if n != self.req.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "the data socket took part of a request: the server is not reading",
            ));
        }
        self.pending = Some(Pending {
            seq: self.seq,
            sent_ns,
            got: 0,
        });
        Ok(())
    }

    /// Read what has arrived, without waiting: the round trip of the request in
    /// flight once its whole response is in, from just before its `send()` to the
    /// kernel's receive stamp of the response's last segment (`SO_TIMESTAMPNS`), so
    /// that when the caller gets round to reading it is not measured.
    ///
    /// # Errors
    /// The server closed or reset the connection, or sent more than it was asked.
    pub fn receive(&mut self) -> io::Result<Option<Duration>> {
        if let Some(t) = &self.tcp {
            return self.receive_tcp(t.as_raw_fd());
        }
        let Some(u) = &self.udp else {
            return Err(io::Error::other("no kept data socket"));
        };
        let fd = u.as_raw_fd();
        loop {
            let r = match recv_with_ts(fd, &mut self.resp, true, None) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let Some(p) = self.pending else { continue };
            // A late reply to an earlier request, or not ours.
            if r.len != SESSION_PAYLOAD as usize || get_seq(&self.resp, 8) != p.seq {
                continue;
            }
            self.pending = None;
            let rtt = since(p.sent_ns, r.ts_ns);
            self.rto.sample(rtt);
            return Ok(Some(rtt));
        }
    }

    fn receive_tcp(&mut self, fd: RawFd) -> io::Result<Option<Duration>> {
        loop {
            let Some(p) = self.pending.as_mut() else {
                // Nothing asked: anything readable is the server closing, or a
                // protocol error either way.
                let mut probe = [0u8; 1];
                return match recv_with_ts(fd, &mut probe, true, None) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
                    Err(e) => Err(e),
                    Ok(_) => Err(closed_or_extra()),
                };
            };
            let want = SESSION_PAYLOAD as usize;
            let r = match recv_with_ts(fd, &mut self.resp[p.got..want], true, None) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if r.len == 0 {
                return Err(closed_or_extra());
            }
            p.got += r.len;
            if p.got == want {
                let rtt = since(p.sent_ns, r.ts_ns);
                self.pending = None;
                return Ok(Some(rtt));
            }
        }
    }

    fn tcp_crr(&mut self) -> io::Result<Outcome> {
        let t0 = Instant::now();
        let mut sock = match connect(self.data, self.spec.timeout) {
            Ok(s) => s,
            Err(e) if is_timeout(&e) => return Ok(Outcome::TimedOut),
            Err(e) => return Err(e),
        };
        let connected = t0.elapsed();
        set_timeouts(&sock, self.spec.timeout)?;
        let r = exchange(
            &mut sock,
            &self.req,
            &mut self.resp[..SESSION_PAYLOAD as usize],
            t0,
            self.spec.timeout,
        )?;
        Ok(r.map_or(Outcome::TimedOut, |rtt| {
            Outcome::Answered(Transaction {
                rtt,
                connect: Some(connected),
                tcp_info: sockopt::tcp_info(&sock).ok().map(Box::new),
            })
        }))
    }
}

/// Send `req` and read a whole response, giving up `timeout` after `t0`. `None`:
/// timed out.
fn exchange(
    sock: &mut TcpStream,
    req: &[u8],
    resp: &mut [u8],
    t0: Instant,
    timeout: Duration,
) -> io::Result<Option<Duration>> {
    let keep = || t0.elapsed() < timeout;
    match write_full(sock, req, keep) {
        Ok(()) => {}
        Err(e) if is_timeout(&e) => return Ok(None),
        Err(e) => return Err(e),
    }
    // The server times our ACK of its response (its srtt): acknowledge at once, not
    // after the 40 ms delayed-ACK timer an interactive connection otherwise waits for.
    let _ = sockopt::set_quickack(sock);
    match read_full(sock, resp, keep) {
        Ok(ReadEnd::Full) => Ok(Some(t0.elapsed())),
        Ok(ReadEnd::Stopped { .. }) => Ok(None),
        Ok(ReadEnd::Closed { .. }) => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the server closed the data connection",
        )),
        Err(e) if is_timeout(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The round trip from `sent_ns` to the kernel's receive stamp (or now, should a
/// kernel give none); never negative, should the clock be stepped in between.
fn since(sent_ns: u64, rx_ns: Option<u64>) -> Duration {
    let rx = rx_ns.unwrap_or_else(crate::kernel::realtime_ns);
    Duration::from_nanos(rx.saturating_sub(sent_ns))
}

fn closed_or_extra() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the server closed the data connection, or answered what was not asked",
    )
}

/// One `send()` that never blocks (and never raises SIGPIPE).
fn send_now(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is valid for its length for the duration of the call.
        let n = unsafe {
            libc::send(
                fd,
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Have the kernel stamp what the socket receives.
fn stamped(s: &impl AsRawFd) -> io::Result<()> {
    crate::kernel::sockopt::set(
        s.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_TIMESTAMPNS,
        &(1 as libc::c_int),
        "setsockopt(SO_TIMESTAMPNS)",
    )
    .map_err(|e| e.source)
}

fn set_timeouts(s: &TcpStream, timeout: Duration) -> io::Result<()> {
    s.set_write_timeout(Some(timeout))?;
    s.set_read_timeout(Some(timeout))
}

fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_nodelay(true)?;
    sock.connect_timeout(&SockAddr::from(addr), timeout.min(CONNECT_TIMEOUT))?;
    Ok(sock.into())
}

fn udp_socket(data: SocketAddr) -> io::Result<UdpSocket> {
    let bind: SocketAddr = if data.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let u = UdpSocket::bind(bind)?;
    u.connect(data)?;
    Ok(u)
}
