//! A long-lived rr test paced by its caller: one transaction per call, for as long as
//! the server keeps the test. `rttlab agent` keeps one per peer and layer and times a
//! transaction a second on it (Pingmesh's probes, on netperf's TCP_RR, UDP_RR and
//! TCP_CRR), where `rr` runs a test flat out or on its own schedule.

use super::settings::{RrError, CONNECT_TIMEOUT, UDP_TIMEOUT_FLOOR};
use super::stream::{get_seq, put_seq};
use super::ControlClient;
use crate::kernel::sockopt;
use crate::kernel::tcp_info::TcpInfo;
use crate::probe::control::{TestKind, TestSpec};
use crate::probe::io::{is_timeout, read_full, write_full, ReadEnd};
use crate::probe::udp_timeout::UdpTimeout;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

/// Bytes of every request and response: room for a whole 64-bit sequence number, so
/// a late UDP reply is never taken for the current one.
pub const SESSION_PAYLOAD: u32 = 8;

/// What a session asks of the server.
#[derive(Clone, Debug)]
pub struct SessionSpec {
    pub server: SocketAddr,
    pub secret: Option<Vec<u8>>,
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

/// What one call of [`Session::transact`] came to.
#[derive(Clone, Debug)]
pub enum Outcome {
    Answered(Transaction),
    /// UDP: no reply within the timeout (the session goes on).
    Lost,
    /// TCP: no reply within the timeout; the session is over (open a new one).
    TimedOut,
}

/// A running test on a server.
pub struct Session {
    spec: SessionSpec,
    /// Kept open: closing it ends the test.
    _control: ControlClient,
    data: SocketAddr,
    tcp: Option<TcpStream>,
    udp: Option<UdpSocket>,
    req: Vec<u8>,
    resp: Vec<u8>,
    seq: u64,
    rto: UdpTimeout,
    /// The UDP socket's receive timeout now.
    udp_timeout: Option<Duration>,
    /// When the server's grant runs out (open a new session before).
    pub ends: Instant,
}

impl Session {
    /// Connect, ask for the test, and for TCP_RR connect its data connection.
    ///
    /// # Errors
    /// The server is unreachable, refused the test, or its data port is closed.
    pub fn open(spec: &SessionSpec) -> Result<Self, RrError> {
        let mut control = ControlClient::connect(spec.server, spec.secret.as_deref())?;
        let max = Duration::from_millis(control.limits.max_duration_ms);
        let length = spec.length.min(max);
        let port = control.start(&TestSpec {
            interval_ms: (spec.interval + spec.timeout).as_millis() as u64,
            ..TestSpec::basic(
                spec.test,
                SESSION_PAYLOAD,
                SESSION_PAYLOAD,
                length.as_millis() as u64,
            )
        })?;
        let data = SocketAddr::new(spec.server.ip(), port);
        let data_err = |source| RrError::Data { port, source };
        let (tcp, udp) = match spec.test {
            TestKind::TcpRr => {
                let s = connect(data, spec.timeout).map_err(data_err)?;
                // Set once: a transaction never waits longer than the timeout.
                set_timeouts(&s, spec.timeout).map_err(data_err)?;
                (Some(s), None)
            }
            TestKind::UdpRr => (None, Some(udp_socket(data).map_err(data_err)?)),
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
            udp_timeout: None,
            // The server's own grace for transactions in flight is not ours to use.
            ends: Instant::now() + length,
        })
    }

    /// Time one transaction.
    ///
    /// # Errors
    /// The data connection failed (refused, reset, closed by the server): the session
    /// is over.
    pub fn transact(&mut self) -> io::Result<Outcome> {
        match self.spec.test {
            TestKind::TcpRr => self.tcp_rr(),
            TestKind::UdpRr => self.udp_rr(),
            TestKind::TcpCrr => self.tcp_crr(),
        }
    }

    /// The kept TCP_RR connection's `tcp_info`.
    pub fn tcp_info(&self) -> Option<TcpInfo> {
        self.tcp.as_ref().and_then(|s| sockopt::tcp_info(s).ok())
    }

    fn tcp_rr(&mut self) -> io::Result<Outcome> {
        let sock = self
            .tcp
            .as_mut()
            .ok_or_else(|| io::Error::other("no data connection"))?;
        let t0 = Instant::now();
        exchange(
            sock,
            &self.req,
            &mut self.resp[..SESSION_PAYLOAD as usize],
            t0,
            self.spec.timeout,
        )?
        .map_or(Ok(Outcome::TimedOut), |rtt| {
            Ok(Outcome::Answered(Transaction {
                rtt,
                connect: None,
                tcp_info: sockopt::tcp_info(sock).ok().map(Box::new),
            }))
        })
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

    fn udp_rr(&mut self) -> io::Result<Outcome> {
        let u = self
            .udp
            .as_ref()
            .ok_or_else(|| io::Error::other("no data socket"))?;
        self.seq += 1;
        put_seq(&mut self.req, self.seq, 8);
        let limit = self.rto.current();
        // In whole milliseconds, so the option changes only when the timeout moves.
        let want = Duration::from_millis(limit.as_millis().max(1) as u64);
        if self.udp_timeout != Some(want) {
            u.set_read_timeout(Some(want))?;
            self.udp_timeout = Some(want);
        }
        let t0 = Instant::now();
        u.send(&self.req)?;
        loop {
            match u.recv(&mut self.resp) {
                Ok(n) if n == SESSION_PAYLOAD as usize && get_seq(&self.resp, 8) == self.seq => {
                    let rtt = t0.elapsed();
                    self.rto.sample(rtt);
                    return Ok(Outcome::Answered(Transaction {
                        rtt,
                        connect: None,
                        tcp_info: None,
                    }));
                }
                // A late reply to an earlier request, or not ours.
                Ok(_) => {}
                Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {
                    let waited = t0.elapsed();
                    if waited >= limit {
                        return Ok(Outcome::Lost);
                    }
                    let rest = (limit - waited).max(Duration::from_millis(1));
                    u.set_read_timeout(Some(rest))?;
                    self.udp_timeout = Some(rest);
                }
                Err(e) => return Err(e),
            }
        }
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
