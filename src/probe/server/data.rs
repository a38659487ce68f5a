//! A test's data service: its data socket (a TCP listener or a UDP socket in the
//! server's port range), the threads that answer its streams (each runs
//! `serving::serve` on its transport, with `--anatomy`'s hook from `stamped` or none),
//! and the report they add up to when the test ends. The conversation decides when a test starts and ends; this module only
//! serves it.

use super::refusal::Refusal;
use super::served::{Held, ServedStreams};
use super::serving::{
    same_ip, serve, Accepting, Connection, Datagrams, Plain, Service, ThreadCounters, POLL_TICK,
};
use super::stamped::{CrrStamps, RrStamps, UdpStamps};
use crate::kernel::sockopt;
use crate::probe::control::{PortRange, ServerReport, TestKind, TestSpec};
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
/// Time a client gets to connect its data streams after Ready.
const CONNECT_GRACE: Duration = Duration::from_secs(10);
/// Stack of a data thread: its buffers live on the heap, so this is ample.
pub(super) const DATA_THREAD_STACK: usize = 256 * 1024;

enum DataSock {
    Tcp(TcpListener),
    Udp(UdpSocket),
}

pub(super) struct DataTest {
    service: Service,
    sock: DataSock,
    pub(super) port: u16,
}

pub(super) struct RunningTest {
    test: Arc<DataTest>,
    /// Its TCP_RR streams, known by inode while they are held.
    held: Held,
    stop: Arc<AtomicBool>,
    streams: Vec<TcpStream>,
    listener_fd: Option<i32>,
    threads: Vec<JoinHandle<ThreadCounters>>,
    congestion: Option<String>,
    server_cpu: Option<usize>,
    /// The machine's CPU ticks when the test started, and when that was.
    machine_start: Option<(crate::kernel::cpu::MachineTicks, Instant)>,
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
            service: Service {
                spec: spec.clone(),
                peer_ip,
                idle,
                started: Instant::now(),
                last_activity_ms: AtomicU64::new(0),
            },
            sock,
            port,
        })
    }

    /// Accept the client's streams (TCP_RR) or start the workers (UDP_RR, TCP_CRR).
    /// When that fails part way, what was started is stopped and joined before the
    /// error returns: no thread outlives its test (and its place in the budgets).
    pub(super) fn run(self, served: &Arc<ServedStreams>) -> io::Result<RunningTest> {
        let spec = self.service.spec.clone();
        let mut test = RunningTest {
            test: Arc::new(self),
            held: Held::new(served),
            stop: Arc::new(AtomicBool::new(false)),
            streams: Vec::new(),
            listener_fd: None,
            threads: Vec::new(),
            congestion: None,
            server_cpu: spec.server_cpu,
            machine_start: None,
        };
        if let Err(e) = test.start(&spec) {
            let _ = test.finish();
            return Err(e);
        }
        test.congestion = test
            .streams
            .first()
            .and_then(|s| sockopt::congestion(s).ok())
            .or(spec.congestion.clone());
        test.machine_start = crate::kernel::cpu::MachineTicks::now()
            .ok()
            .map(|t| (t, Instant::now()));
        Ok(test)
    }

    /// TCP_RR: one of the client's streams, stamped with `--anatomy` (served plain
    /// if the kernel refuses the stamps: the client counts it unstamped).
    fn serve_stream(&self, s: TcpStream, stop: &AtomicBool) -> ThreadCounters {
        let (svc, conn) = (&self.service, Connection(s));
        match svc
            .spec
            .anatomy
            .then(|| RrStamps::open(&conn, svc))
            .flatten()
        {
            Some(stamps) => serve(svc, conn, stamps, stop),
            None => serve(svc, conn, Plain, stop),
        }
    }

    /// TCP_CRR: a connection per transaction from the test's listener.
    fn serve_connections(&self, stop: &AtomicBool) -> ThreadCounters {
        let DataSock::Tcp(listener) = &self.sock else {
            return ThreadCounters::default();
        };
        let svc = &self.service;
        let t = Accepting {
            listener,
            conn: None,
        };
        if svc.spec.anatomy {
            let stamps = CrrStamps::open(&t, svc);
            serve(svc, t, stamps, stop)
        } else {
            serve(svc, t, Plain, stop)
        }
    }

    /// UDP_RR: the test's socket, shared with its other threads.
    fn serve_datagrams(&self, stop: &AtomicBool) -> ThreadCounters {
        let DataSock::Udp(sock) = &self.sock else {
            return ThreadCounters::default();
        };
        let svc = &self.service;
        let t = Datagrams::new(sock, &svc.spec);
        match svc.spec.anatomy.then(|| UdpStamps::open(&t)).flatten() {
            Some(stamps) => serve(svc, t, stamps, stop),
            None => serve(svc, t, Plain, stop),
        }
    }
}

/// A data thread with its name and the data threads' stack.
fn spawn(
    name: &str,
    f: impl FnOnce() -> ThreadCounters + Send + 'static,
) -> io::Result<JoinHandle<ThreadCounters>> {
    std::thread::Builder::new()
        .name(name.into())
        .stack_size(DATA_THREAD_STACK)
        .spawn(f)
}

/// The next connection to the listener, and its peer, by `deadline`.
fn accept_until(l: &TcpListener, deadline: Instant) -> io::Result<(TcpStream, SocketAddr)> {
    l.set_nonblocking(true)?;
    loop {
        match l.accept() {
            Ok((s, peer)) => {
                s.set_nonblocking(false)?;
                return Ok((s, peer));
            }
            // A connection reset before it was accepted: nobody's stream; the next.
            Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => {}
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
    /// Start the test's threads: a thread per TCP_RR stream as the client connects it
    /// (from its own address; anyone else's connection is dropped), or the TCP_CRR and
    /// UDP_RR workers.
    fn start(&mut self, spec: &TestSpec) -> io::Result<()> {
        let this = Arc::clone(&self.test);
        match &this.sock {
            DataSock::Tcp(l) if spec.test == TestKind::TcpRr => {
                let deadline = Instant::now() + CONNECT_GRACE;
                while self.streams.len() < spec.streams as usize {
                    // The address accept() gave: a stranger's connection reset before
                    // it was accepted can no longer name its peer.
                    let (s, peer) = accept_until(l, deadline)?;
                    if !same_ip(peer.ip(), this.service.peer_ip) {
                        continue;
                    }
                    this.service.configure(&s)?;
                    // No receive timeout: a finite one arms a kernel timer on every
                    // blocking recv (~15 % of TCP_RR's rate at one vCPU). `finish`
                    // shuts these sockets down; the control connection's timeout
                    // bounds a client that vanished.
                    self.streams.push(s.try_clone()?);
                    self.held.add(&s);
                    let (t, st) = (Arc::clone(&this), Arc::clone(&self.stop));
                    self.threads
                        .push(spawn("serve-rr", move || t.serve_stream(s, &st))?);
                }
            }
            DataSock::Tcp(l) => {
                l.set_nonblocking(false)?;
                self.listener_fd = Some(l.as_raw_fd());
                for _ in 0..spec.streams {
                    let (t, st) = (Arc::clone(&this), Arc::clone(&self.stop));
                    self.threads
                        .push(spawn("serve-crr", move || t.serve_connections(&st))?);
                }
            }
            DataSock::Udp(u) => {
                u.set_read_timeout(Some(POLL_TICK))?;
                for _ in 0..spec.streams {
                    let (t, st) = (Arc::clone(&this), Arc::clone(&self.stop));
                    self.threads
                        .push(spawn("serve-udp", move || t.serve_datagrams(&st))?);
                }
            }
        }
        Ok(())
    }

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
        let svc = &self.test.service;
        let last = Duration::from_millis(svc.last_activity_ms.load(Ordering::Relaxed));
        svc.started.elapsed().checked_sub(last)
    }

    /// Snapshot `tcp_info`, stop every thread and add up the counters.
    pub(super) fn finish(self) -> ServerReport {
        let machine_end = crate::kernel::cpu::MachineTicks::now().ok();
        let window = self.machine_start.zip(machine_end);
        let mut report = ServerReport {
            congestion: self.congestion,
            machine_ticks: window.map(|((a, _), b)| [a, b]),
            machine_elapsed_ns: window.map(|((_, at), _)| crate::stats::units::ns(at.elapsed())),
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
