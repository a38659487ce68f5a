//! A test's data service: its data socket (a TCP listener or a UDP socket in the
//! server's port range), the threads that answer its streams (TCP_RR, TCP_CRR, UDP_RR,
//! each with and without `--anatomy`'s stamps), and the report they add up to when the
//! test ends. The conversation decides when a test starts and ends; this module only
//! serves it.

use super::refusal::Refusal;
use crate::kernel::cpu::{self, CpuTracker};
use crate::kernel::sockopt;
use crate::probe::control::{PortRange, ServerReport, TestKind, TestSpec};
use crate::probe::io::{read_full, write_full, ReadEnd};
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often blocked data threads look at their stop flag.
const POLL_TICK: Duration = Duration::from_millis(100);
/// Time a client gets to connect its data streams after Ready.
const CONNECT_GRACE: Duration = Duration::from_secs(10);
/// Stack of a data thread: its buffers live on the heap, so this is ample.
pub(super) const DATA_THREAD_STACK: usize = 256 * 1024;

enum DataSock {
    Tcp(TcpListener),
    Udp(UdpSocket),
}

pub(super) struct DataTest {
    spec: TestSpec,
    sock: DataSock,
    pub(super) port: u16,
    peer_ip: IpAddr,
    /// How long the client may send nothing before the test is ended.
    idle: Duration,
    started: Instant,
    /// When the client was last heard from, in ms since `started`.
    last_activity_ms: AtomicU64,
}

/// Counters one data thread returns.
#[derive(Default)]
struct ThreadCounters {
    transactions: u64,
    bytes_in: u64,
    bytes_out: u64,
    connections: u64,
    dropped: u64,
    retrans: u64,
    last_info: Option<crate::kernel::tcp_info::TcpInfo>,
    cpus: CpuTracker,
    /// `--anatomy`: the server's part of the stream's last transaction (merged: every
    /// stream's).
    last_parts: Vec<crate::probe::anatomy::LastPart>,
}

impl ThreadCounters {
    /// Add another thread's counts: sums, every stream's last part, the CPUs; a
    /// TCP_CRR connection's `tcp_info` from the later thread that has one.
    fn merge(&mut self, o: ThreadCounters) {
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

pub(super) struct RunningTest {
    test: Arc<DataTest>,
    stop: Arc<AtomicBool>,
    streams: Vec<TcpStream>,
    listener_fd: Option<i32>,
    threads: Vec<JoinHandle<ThreadCounters>>,
    congestion: Option<String>,
    server_cpu: Option<usize>,
    /// The machine's CPU ticks when the test started, and when that was.
    machine_start: Option<(crate::kernel::cpu::MachineTicks, Instant)>,
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
pub(super) fn canon(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    canon(a) == canon(b)
}

/// Bind a data socket on `port`. TCP listeners set `SO_REUSEADDR` only so that a test
/// can reuse a port whose earlier connections are in `TIME_WAIT`: Linux still refuses
/// the bind when another socket listens there (`inet_csk_bind_conflict`), and
/// established connections are matched before listeners, so no traffic is taken from
/// anyone. UDP sockets never set it: two UDP sockets sharing a port would split its
/// datagrams.
///
/// `tos`: the client's traffic class, set on the socket (accepted connections
/// inherit a listener's, `inet_csk_clone_lock`), so responses carry it.
fn bind_data(test: TestKind, addr: SocketAddr, tos: Option<u8>) -> io::Result<DataSock> {
    let class = |s: &Socket| match tos {
        Some(t) => crate::probe::path::set_tos(s, addr.is_ipv6(), t & 0xfc),
        None => Ok(()),
    };
    Ok(match test {
        TestKind::TcpRr | TestKind::TcpCrr => {
            let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
            class(&s)?;
            s.set_reuse_address(true)?;
            s.bind(&addr.into())?;
            s.listen(1024)?;
            DataSock::Tcp(s.into())
        }
        TestKind::UdpRr => {
            let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
            class(&s)?;
            s.bind(&addr.into())?;
            DataSock::Udp(s.into())
        }
    })
}

/// Ports of `range` in the order to try them, starting at a random one so that
/// concurrent tests rarely race for the same port.
fn candidate_ports(range: PortRange) -> impl Iterator<Item = u16> {
    let span = u32::from(range.high - range.low) + 1;
    let start = rand::random::<u32>() % span;
    (0..span.min(256)).map(move |i| (u32::from(range.low) + (start + i) % span) as u16)
}

impl DataTest {
    pub(super) fn open(
        spec: &TestSpec,
        local_ip: IpAddr,
        peer_ip: IpAddr,
        idle: Duration,
        ports: PortRange,
    ) -> Result<Self, Refusal> {
        let sock = if spec.data_port != 0 {
            bind_data(
                spec.test,
                SocketAddr::new(local_ip, spec.data_port),
                spec.tos,
            )
            .map_err(|e| Refusal::DataPort {
                port: spec.data_port,
                why: e.to_string(),
                range: ports,
            })?
        } else {
            candidate_ports(ports)
                .find_map(|p| bind_data(spec.test, SocketAddr::new(local_ip, p), spec.tos).ok())
                .ok_or(Refusal::NoDataPort(ports))?
        };
        let port = match &sock {
            DataSock::Tcp(l) => l.local_addr(),
            DataSock::Udp(u) => u.local_addr(),
        }
        .map_err(|e| Refusal::DataSocket(e.to_string()))?
        .port();
        let idle = idle + Duration::from_millis(spec.interval_ms);
        Ok(Self {
            spec: spec.clone(),
            sock,
            port,
            peer_ip,
            idle,
            started: Instant::now(),
            last_activity_ms: AtomicU64::new(0),
        })
    }

    /// Note that the client was heard from (UDP and TCP_CRR threads; TCP_RR's activity
    /// is read from its sockets' `tcp_info`, to keep the clock off its hot path).
    fn heard(&self) {
        self.last_activity_ms
            .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    fn configure(&self, s: &TcpStream) -> io::Result<()> {
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

    /// Accept the client's streams (TCP_RR) or start the workers (UDP_RR, TCP_CRR).
    pub(super) fn run(self) -> io::Result<RunningTest> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let mut streams = Vec::new();
        let mut listener_fd = None;
        let spec = self.spec.clone();
        let this = Arc::new(self);
        match &this.sock {
            DataSock::Tcp(l) if spec.test == TestKind::TcpRr => {
                let deadline = Instant::now() + CONNECT_GRACE;
                while streams.len() < spec.streams as usize {
                    let s = accept_until(l, deadline)?;
                    if !same_ip(s.peer_addr()?.ip(), this.peer_ip) {
                        continue;
                    }
                    this.configure(&s)?;
                    // No receive timeout: a finite one arms a kernel timer on every
                    // blocking recv (~15 % of TCP_RR's rate at one vCPU). `finish`
                    // shuts these sockets down; the control connection's timeout
                    // bounds a client that vanished.
                    streams.push(s.try_clone()?);
                    let (t, st) = (Arc::clone(&this), Arc::clone(&stop));
                    threads.push(
                        std::thread::Builder::new()
                            .name("serve-rr".into())
                            .stack_size(DATA_THREAD_STACK)
                            .spawn(move || t.serve_rr(s, &st))?,
                    );
                }
            }
            DataSock::Tcp(l) => {
                l.set_nonblocking(false)?;
                listener_fd = Some(l.as_raw_fd());
                for _ in 0..spec.streams {
                    let (t, st) = (Arc::clone(&this), Arc::clone(&stop));
                    threads.push(
                        std::thread::Builder::new()
                            .name("serve-crr".into())
                            .stack_size(DATA_THREAD_STACK)
                            .spawn(move || t.serve_crr(&st))?,
                    );
                }
            }
            DataSock::Udp(u) => {
                u.set_read_timeout(Some(POLL_TICK))?;
                for _ in 0..spec.streams {
                    let (t, st) = (Arc::clone(&this), Arc::clone(&stop));
                    threads.push(
                        std::thread::Builder::new()
                            .name("serve-udp".into())
                            .stack_size(DATA_THREAD_STACK)
                            .spawn(move || t.serve_udp(&st))?,
                    );
                }
            }
        }
        let congestion = streams
            .first()
            .and_then(|s| sockopt::congestion(s).ok())
            .or(spec.congestion.clone());
        Ok(RunningTest {
            test: this,
            stop,
            streams,
            listener_fd,
            threads,
            congestion,
            server_cpu: spec.server_cpu,
            machine_start: crate::kernel::cpu::MachineTicks::now()
                .ok()
                .map(|t| (t, Instant::now())),
        })
    }

    fn pin(&self) {
        if let Some(c) = self.spec.server_cpu {
            let _ = cpu::pin_current_thread(c);
        }
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

    /// TCP_RR with `--anatomy`: every request read with its RX stamp, every response
    /// carrying the server's part of the transaction before it (`probe::anatomy`).
    fn serve_rr_stamped(&self, s: TcpStream, stop: &AtomicBool) -> ThreadCounters {
        use crate::probe::{anatomy, stamps};
        let mut c = ThreadCounters::default();
        let fd = s.as_raw_fd();
        if stamps::enable(fd, false).is_err() {
            return c;
        }
        let resp_len = u64::from(self.spec.response_size);
        let mut req = vec![0u8; self.spec.request_size as usize];
        let mut resp = vec![0u8; self.spec.response_size as usize];
        let mut book = anatomy::ServerStamps::default();
        book.tlp = anatomy::probes_tail_loss(fd);
        let mut retrans = anatomy::RetransCounters::new(fd, resp_len);
        let mut w = &s;
        while let Some(rx) = read_stamped(fd, &mut req, || !stop.load(Ordering::Relaxed)) {
            let returned = crate::kernel::realtime_ns();
            let cpu = anatomy::current_cpu();
            self.think(stop);
            // The previous response's SND stamps: its last byte's offset from 0.
            let want = (c.transactions * resp_len).wrapping_sub(1) as u32;
            let mut sends = previous_sends(fd, want, rx);
            retrans.note(fd, &mut sends);
            let seq = u32::try_from(c.transactions + 1).unwrap_or(u32::MAX);
            match book.next(seq, rx, returned, cpu, sends, seq) {
                Some(p) => p.write(&mut resp),
                None => {
                    resp[anatomy::TRAILER_AT..anatomy::TRAILER_AT + anatomy::TRAILER_LEN].fill(0)
                }
            }
            if write_full(&mut w, &resp, || !stop.load(Ordering::Relaxed)).is_err() {
                break;
            }
            c.transactions += 1;
            if c.transactions % 64 == 1 {
                c.cpus.sample();
            }
        }
        // The last response's stamps have long come (the client read it before ending).
        let want = (c.transactions * resp_len).wrapping_sub(1) as u32;
        let mut sends = previous_sends(fd, want, None);
        retrans.note(fd, &mut sends);
        let answered = u32::try_from(c.transactions).unwrap_or(u32::MAX);
        c.last_parts.extend(
            book.last(sends, answered)
                .zip(s.peer_addr().ok())
                .map(|(p, peer)| anatomy::LastPart::new(peer, &p)),
        );
        c
    }

    fn serve_rr(&self, mut s: TcpStream, stop: &AtomicBool) -> ThreadCounters {
        self.pin();
        if self.spec.anatomy {
            let mut c = self.serve_rr_stamped(s, stop);
            c.bytes_in = c.transactions * u64::from(self.spec.request_size);
            c.bytes_out = c.transactions * u64::from(self.spec.response_size);
            return c;
        }
        let mut c = ThreadCounters::default();
        let mut req = vec![0u8; self.spec.request_size as usize];
        let resp = vec![0u8; self.spec.response_size as usize];
        while let Ok(ReadEnd::Full) = read_full(&mut s, &mut req, || !stop.load(Ordering::Relaxed))
        {
            self.think(stop);
            if write_full(&mut s, &resp, || !stop.load(Ordering::Relaxed)).is_err() {
                break;
            }
            c.transactions += 1;
            if c.transactions % 64 == 1 {
                c.cpus.sample();
            }
        }
        c.bytes_in = c.transactions * u64::from(self.spec.request_size);
        c.bytes_out = c.transactions * u64::from(self.spec.response_size);
        c
    }

    fn serve_crr(&self, stop: &AtomicBool) -> ThreadCounters {
        self.pin();
        let mut c = ThreadCounters::default();
        let DataSock::Tcp(l) = &self.sock else {
            return c;
        };
        let mut req = vec![0u8; self.spec.request_size as usize];
        let resp = vec![0u8; self.spec.response_size as usize];
        // --anatomy: the listener's stamping keeps the kernel's receive stamps on
        // between connections (it turns them on lazily, for every socket at once);
        // without it the first responses only would lack their stamps.
        let stamped = self.spec.anatomy;
        if stamped {
            let _ = crate::probe::stamps::hold_rx(l.as_raw_fd());
        }
        let mut tlp = None;
        while !stop.load(Ordering::Relaxed) {
            let Ok((mut s, peer)) = l.accept() else { break };
            if !same_ip(peer.ip(), self.peer_ip) || self.configure(&s).is_err() {
                continue;
            }
            c.connections += 1;
            self.heard();
            let _ = s.set_read_timeout(Some(POLL_TICK));
            let _ = s.set_write_timeout(Some(POLL_TICK));
            if stamped {
                if self.serve_crr_stamped(&s, stop, (&mut req, &resp), &mut tlp) {
                    c.transactions += 1;
                    self.await_close(&mut s, stop, &mut c);
                }
                continue;
            }
            let t0 = Instant::now();
            let keep = || !stop.load(Ordering::Relaxed) && t0.elapsed() < self.idle;
            if !matches!(read_full(&mut s, &mut req, keep), Ok(ReadEnd::Full)) {
                continue;
            }
            if write_full(&mut s, &resp, || !stop.load(Ordering::Relaxed)).is_err() {
                continue;
            }
            c.transactions += 1;
            self.await_close(&mut s, stop, &mut c);
        }
        c.bytes_in = c.transactions * u64::from(self.spec.request_size);
        c.bytes_out = c.transactions * u64::from(self.spec.response_size);
        c
    }

    /// After a TCP_CRR transaction: wait for the client's close, so the client, not the
    /// server, holds TIME_WAIT, and count what the connection retransmitted.
    fn await_close(&self, s: &mut TcpStream, stop: &AtomicBool, c: &mut ThreadCounters) {
        if c.transactions % 64 == 1 {
            c.cpus.sample();
        }
        let t0 = Instant::now();
        let mut one = [0u8; 1];
        let _ = read_full(s, &mut one, || {
            !stop.load(Ordering::Relaxed) && t0.elapsed() < self.idle
        });
        if let Ok(ti) = sockopt::tcp_info(&*s) {
            c.retrans += u64::from(ti.total_retrans);
            c.last_info = Some(ti);
        }
    }

    /// TCP_CRR with `--anatomy`: the request read with its RX stamp, the response, and
    /// after it, once the response is acknowledged (every copy of it sent by then), the
    /// server's part of this one transaction in a message of
    /// [`MIN_RESPONSE`](crate::probe::anatomy::MIN_RESPONSE) bytes (a connection has no
    /// next response to carry it). True when answered.
    fn serve_crr_stamped(
        &self,
        s: &TcpStream,
        stop: &AtomicBool,
        (req, resp): (&mut [u8], &[u8]),
        tlp: &mut Option<bool>,
    ) -> bool {
        use crate::probe::{anatomy, stamps};
        let fd = s.as_raw_fd();
        // Numbers this connection's bytes from 0 (OPT_ID counts from the setsockopt);
        // TX ACK: the response's ACK says no copy of it will follow.
        if stamps::enable(fd, true).is_err() {
            return false;
        }
        // The handshake's retransmissions (a SYN-ACK sent again) are not the response's.
        let mut retrans = anatomy::RetransCounters::new(fd, resp.len() as u64);
        let t0 = Instant::now();
        let keep = || !stop.load(Ordering::Relaxed) && t0.elapsed() < self.idle;
        let Some(rx) = read_stamped(fd, req, keep) else {
            return false;
        };
        let returned = crate::kernel::realtime_ns();
        let cpu = anatomy::current_cpu();
        self.think(stop);
        let mut w = s;
        if write_full(&mut w, resp, || !stop.load(Ordering::Relaxed)).is_err() {
            return false;
        }
        let Some(mut sends) = acked_sends(fd, (resp.len() as u32).wrapping_sub(1), keep) else {
            return false;
        };
        retrans.note(fd, &mut sends);
        let mut book = anatomy::ServerStamps::default();
        // Every connection from the same client negotiates the same: asked once.
        book.tlp = *tlp.get_or_insert_with(|| anatomy::probes_tail_loss(fd));
        book.next(1, rx, returned, cpu, anatomy::Sends::default(), 1);
        let mut part = [0u8; anatomy::MIN_RESPONSE as usize];
        if let Some(p) = book.next(2, None, returned, cpu, sends, 1) {
            p.write(&mut part);
        }
        write_full(&mut w, &part, || !stop.load(Ordering::Relaxed)).is_ok()
    }

    fn serve_udp(&self, stop: &AtomicBool) -> ThreadCounters {
        self.pin();
        let mut c = ThreadCounters::default();
        let DataSock::Udp(u) = &self.sock else {
            return c;
        };
        let mut buf = vec![0u8; self.spec.request_size as usize + 1];
        let mut resp = vec![0u8; self.spec.response_size as usize];
        let echo = (self.spec.request_size.min(self.spec.response_size) as usize).min(8);
        let mut idle_since = Instant::now();
        let mut seen = 0u64;
        let stamped =
            self.spec.anatomy && crate::probe::stamps::enable(u.as_raw_fd(), false).is_ok();
        let mut book = crate::probe::anatomy::ServerStamps::default();
        let mut last_peer = None;
        // SAFETY: sockaddr_storage is plain data.
        let mut from_addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        while !stop.load(Ordering::Relaxed) && idle_since.elapsed() < self.idle {
            let (n, from, rx) = if stamped {
                match recv_from_stamped(u.as_raw_fd(), &mut buf, &mut from_addr) {
                    Ok(x) => x,
                    Err(_) => continue,
                }
            } else {
                match u.recv_from(&mut buf) {
                    Ok((n, from)) => (n, from, None),
                    Err(_) => continue,
                }
            };
            let (returned, cpu) = if stamped {
                (
                    crate::kernel::realtime_ns(),
                    crate::probe::anatomy::current_cpu(),
                )
            } else {
                (0, 0)
            };
            if n != self.spec.request_size as usize || !same_ip(from.ip(), self.peer_ip) {
                continue;
            }
            idle_since = Instant::now();
            self.heard();
            seen += 1;
            if self
                .spec
                .udp_drop_one_in
                .is_some_and(|k| seen % u64::from(k) == 0)
            {
                c.dropped += 1;
                continue;
            }
            // Echo the client's sequence number so late replies are told apart.
            resp[..echo].copy_from_slice(&buf[..echo]);
            self.think(stop);
            if stamped {
                use crate::probe::anatomy;
                // The previous response's SND stamp: datagrams are numbered from 0.
                let want = c.transactions.wrapping_sub(1) as u32;
                let sends = previous_sends(u.as_raw_fd(), want, rx);
                let mut seq = [0u8; 8];
                seq[..echo].copy_from_slice(&buf[..echo]);
                let seq = u64::from_le_bytes(seq) as u32;
                let answered = u32::try_from(c.transactions + 1).unwrap_or(u32::MAX);
                match book.next(seq, rx, returned, cpu, sends, answered) {
                    Some(p) => p.write(&mut resp),
                    None => resp[anatomy::TRAILER_AT..anatomy::TRAILER_AT + anatomy::TRAILER_LEN]
                        .fill(0),
                }
            }
            if u.send_to(&resp, from).is_ok() {
                c.transactions += 1;
                last_peer = Some(from);
                if c.transactions % 64 == 1 {
                    c.cpus.sample();
                }
            }
        }
        if stamped {
            // The last response's SND stamp: datagrams are numbered from 0.
            let want = c.transactions.wrapping_sub(1) as u32;
            let sends = previous_sends(u.as_raw_fd(), want, None);
            let answered = u32::try_from(c.transactions).unwrap_or(u32::MAX);
            c.last_parts.extend(
                book.last(sends, answered)
                    .zip(last_peer)
                    .map(|(p, peer)| crate::probe::anatomy::LastPart::new(peer, &p)),
            );
        }
        c.bytes_in = (c.transactions + c.dropped) * u64::from(self.spec.request_size);
        c.bytes_out = c.transactions * u64::from(self.spec.response_size);
        c
    }
}

/// Read a whole request with the RX stamp of its last packet; `None` when the
/// connection closed or `keep` said stop.
fn read_stamped(
    fd: std::os::fd::RawFd,
    buf: &mut [u8],
    keep: impl Fn() -> bool,
) -> Option<Option<u64>> {
    let mut got = 0;
    let mut rx = None;
    while got < buf.len() {
        match crate::probe::stamps::recv(fd, &mut buf[got..], 0) {
            Ok((0, _)) => return None,
            Ok((n, ts)) => {
                got += n;
                rx = ts.or(rx);
            }
            Err(e) if crate::probe::io::is_timeout(&e) => {
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

/// The SND stamps of byte `want` of a message just sent, read until its ACK stamp:
/// every copy of it the kernel sent (a retransmission comes before the ACK it earns).
/// `None` when `keep` stops the wait first (the client went quiet or the run ended).
fn acked_sends(
    fd: std::os::fd::RawFd,
    want: u32,
    keep: impl Fn() -> bool,
) -> Option<crate::probe::anatomy::Sends> {
    use crate::probe::{anatomy, stamps};
    let mut sends = anatomy::Sends::default();
    let mut acked = false;
    loop {
        let _ = stamps::drain_tx(fd, |t| {
            if t.id == want {
                match t.kind {
                    stamps::TxKind::Sent => sends.add(t.ns),
                    stamps::TxKind::Acked => acked = true,
                }
            }
            acked
        });
        if acked {
            return Some(sends);
        }
        if !keep() {
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
    }
}

/// The SND stamps of the previous response (OPT_ID `want`), read once the request
/// after it arrived (RX stamp `rx`): its first, and any retransmission, which comes
/// only from a timer and so only when that request came
/// [`NO_RETRANSMISSION_WITHIN_NS`](crate::probe::anatomy::NO_RETRANSMISSION_WITHIN_NS)
/// or later after the response left.
fn previous_sends(
    fd: std::os::fd::RawFd,
    want: u32,
    rx: Option<u64>,
) -> crate::probe::anatomy::Sends {
    use crate::probe::{anatomy, stamps};
    let mut sends = anatomy::Sends::default();
    let _ = stamps::drain_tx(fd, |t| {
        if t.kind == stamps::TxKind::Sent && t.id == want {
            sends.add(t.ns);
        }
        sends.first.is_some_and(|first| {
            rx.is_some_and(|rx| rx.saturating_sub(first) < anatomy::NO_RETRANSMISSION_WITHIN_NS)
        })
    });
    sends
}

fn recv_from_stamped(
    fd: std::os::fd::RawFd,
    buf: &mut [u8],
    from: &mut libc::sockaddr_storage,
) -> io::Result<(usize, SocketAddr, Option<u64>)> {
    let (n, rx) = crate::probe::stamps::recv_from(fd, buf, 0, Some(from))?;
    // SAFETY: the kernel wrote a sockaddr of its family into `from`.
    let sa = unsafe {
        socket2::SockAddr::new(
            *from,
            std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t,
        )
    }
    .as_socket()
    .ok_or_else(|| io::Error::other("a datagram without a sender"))?;
    Ok((n, sa, rx))
}

fn accept_until(l: &TcpListener, deadline: Instant) -> io::Result<TcpStream> {
    l.set_nonblocking(true)?;
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)?;
                return Ok(s);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client did not connect its data streams",
                    ));
                }
                let mut pfd = libc::pollfd {
                    fd: l.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(&mut pfd, 1, 50) };
            }
            Err(e) => return Err(e),
        }
    }
}

impl RunningTest {
    /// How long the client has sent nothing: TCP_RR from its sockets' `tcp_info`
    /// (`tcpi_last_data_recv`, the most recently active stream), the others from the
    /// data threads' last note. `None` before anything can be said.
    pub(super) fn quiet_for(&self) -> Option<Duration> {
        if !self.streams.is_empty() {
            return self
                .streams
                .iter()
                .filter_map(|s| sockopt::tcp_info(s).ok())
                .map(|ti| Duration::from_millis(u64::from(ti.last_data_recv_ms)))
                .min();
        }
        let last = Duration::from_millis(self.test.last_activity_ms.load(Ordering::Relaxed));
        self.test.started.elapsed().checked_sub(last)
    }

    /// Snapshot `tcp_info`, stop every thread and add up the counters.
    pub(super) fn finish(self) -> ServerReport {
        let machine_end = crate::kernel::cpu::MachineTicks::now().ok();
        let window = self.machine_start.zip(machine_end);
        let mut report = ServerReport {
            congestion: self.congestion,
            machine_ticks: window.map(|((a, _), b)| [a, b]),
            machine_elapsed_ns: window
                .map(|((_, at), _)| u64::try_from(at.elapsed().as_nanos()).unwrap_or(u64::MAX)),
            ..ServerReport::default()
        };
        for s in &self.streams {
            if let Ok(ti) = sockopt::tcp_info(s) {
                report.total_retrans += u64::from(ti.total_retrans);
                report.tcp_info.push(ti);
            }
        }
        self.stop.store(true, Ordering::SeqCst);
        for s in &self.streams {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        if let Some(fd) = self.listener_fd {
            // SAFETY: the listener is owned by the worker threads' Arc and still open; wakes accept().
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        }
        let mut all = ThreadCounters::default();
        for t in self.threads {
            if let Ok(c) = t.join() {
                all.merge(c);
            }
        }
        report.transactions = all.transactions;
        report.bytes_received = all.bytes_in;
        report.bytes_sent = all.bytes_out;
        report.connections = all.connections;
        report.dropped_on_purpose = all.dropped;
        report.total_retrans += all.retrans;
        report.last_parts = all.last_parts;
        report.tcp_info.extend(all.last_info);
        report.placement = all.cpus.placement(self.server_cpu);
        report
    }
}
