//! A TCP handshake as a ping: SYN → SYN/ACK (or the host's reset), then a close, no
//! payload, to any host and port, one that runs no rttlab too. It is TCPing's and
//! `hping3 -S`'s measurement, which Phanekham and Jones ("What a trip!") list beside
//! ping among TCP latency tools; `rttlab ping --tcp PORT` prints it with tcpping's
//! habits, and the agent's `tcp_connect` probe exports it. The time is `connect()`'s,
//! as an application waits for it: the handshake's round trip and both kernels' work.
//! A SYN unanswered for a second is sent again (the kernel's initial RTO, RFC 6298),
//! so a timeout longer than that can measure a retransmitted handshake, as an
//! application would wait it.

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How a handshake that did not complete ended, from `connect()`'s error (connect(2)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// ECONNREFUSED: the host answered the SYN with a reset (nothing listens there).
    Reset,
    /// EHOSTUNREACH, ENETUNREACH, EHOSTDOWN: an ICMP unreachable, or no route.
    Unreachable,
    /// ETIMEDOUT (the kernel gave up its SYN retransmissions), or the caller's own
    /// timeout: no answer at all.
    TimedOut,
    /// Anything else: the SYN was not sent (no local address, no buffer).
    NotSent,
}

impl Refusal {
    /// What `e`, a failed connect's error, says.
    pub fn of(e: &std::io::Error) -> Self {
        match e.raw_os_error() {
            Some(libc::ECONNREFUSED) => Self::Reset,
            Some(libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EHOSTDOWN) => Self::Unreachable,
            Some(libc::ETIMEDOUT) => Self::TimedOut,
            _ if e.kind() == std::io::ErrorKind::TimedOut => Self::TimedOut,
            _ => Self::NotSent,
        }
    }
}

/// What one handshake came to.
#[derive(Debug)]
pub enum Outcome {
    /// A SYN/ACK: the port is open; the time `connect()` took.
    Open(Duration),
    /// A reset: the host is there, the port closed; the time until it came.
    Closed(Duration),
    /// An ICMP unreachable or no route, after this long; the kernel's words.
    Unreachable(Duration, String),
    /// No answer within the timeout.
    TimedOut,
    /// The SYN could not be sent; why.
    NotSent(String),
    /// Stopped (Ctrl-C) while waiting: sent, not answered, and not a timeout.
    Interrupted,
}

/// Options of the probing socket, as ping's flags set them.
#[derive(Clone, Debug, Default)]
pub struct SocketOptions {
    /// IP_TTL / IPV6_UNICAST_HOPS.
    pub ttl: Option<u8>,
    /// IP_TOS / IPV6_TCLASS.
    pub tos: Option<u8>,
    /// SO_MARK.
    pub mark: Option<u32>,
    /// SO_BINDTODEVICE.
    pub device: Option<String>,
    /// The source address.
    pub bind: Option<IpAddr>,
}

/// A socket for one handshake to `target`, its options set.
///
/// # Errors
/// An option the kernel refuses (SO_MARK and SO_BINDTODEVICE need CAP_NET_ADMIN or
/// CAP_NET_RAW), a source address not of this host.
pub fn socket(target: SocketAddr, o: &SocketOptions) -> std::io::Result<Socket> {
    let s = Socket::new(
        Domain::for_address(target),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    if let Some(ttl) = o.ttl {
        if target.is_ipv4() {
            s.set_ttl(u32::from(ttl))?;
        } else {
            s.set_unicast_hops_v6(u32::from(ttl))?;
        }
    }
    if let Some(tos) = o.tos {
        if target.is_ipv4() {
            s.set_tos(u32::from(tos))?;
        } else {
            s.set_tclass_v6(u32::from(tos))?;
        }
    }
    if let Some(mark) = o.mark {
        s.set_mark(mark)?;
    }
    if let Some(dev) = &o.device {
        s.bind_device(Some(dev.as_bytes()))?;
    }
    if let Some(ip) = o.bind {
        s.bind(&SockAddr::from(SocketAddr::new(ip, 0)))?;
    }
    s.set_nonblocking(true)?;
    Ok(s)
}

/// One handshake on `s` (from [`socket`]) to `target`, waiting at most `timeout` (or
/// until `stop` is set), then a close: a FIN after a SYN/ACK, nothing after a reset or
/// a timeout (a socket still sending its SYN is dropped without a word, tcp_close in
/// SYN_SENT).
pub fn handshake(s: Socket, target: SocketAddr, timeout: Duration, stop: &AtomicBool) -> Outcome {
    let start = Instant::now();
    match s.connect(&SockAddr::from(target)) {
        Ok(()) => return Outcome::Open(start.elapsed()),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return refused(&e, start.elapsed()),
    }
    let mut pfd = libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    let deadline = start.checked_add(timeout);
    loop {
        if stop.load(Ordering::SeqCst) {
            return Outcome::Interrupted;
        }
        let left = deadline.map_or(STOP_CHECK, |d| d.saturating_duration_since(Instant::now()));
        if left.is_zero() {
            return Outcome::TimedOut;
        }
        // Rounded up: a poll of 0 ms would spin the last millisecond.
        let ms = i32::try_from(left.min(STOP_CHECK).as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
        // SAFETY: one pollfd, valid for the call.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        let took = start.elapsed();
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Outcome::NotSent(e.to_string());
        }
        if n == 0 {
            continue;
        }
        return match s.take_error() {
            Ok(None) => Outcome::Open(took),
            Ok(Some(e)) => refused(&e, took),
            Err(e) => Outcome::NotSent(e.to_string()),
        };
    }
}

/// How often a wait looks at its stop flag: Ctrl-C ends a run within this.
const STOP_CHECK: Duration = Duration::from_millis(100);

fn refused(e: &std::io::Error, took: Duration) -> Outcome {
    match Refusal::of(e) {
        Refusal::Reset => Outcome::Closed(took),
        Refusal::Unreachable => Outcome::Unreachable(took, e.to_string()),
        Refusal::TimedOut => Outcome::TimedOut,
        Refusal::NotSent => Outcome::NotSent(e.to_string()),
    }
}

/// What a run of handshakes came to, as ping's statistics count it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally {
    /// SYNs sent (probes not sent are not counted, as iputils counts only what left).
    pub transmitted: u64,
    /// Answered with a SYN/ACK.
    pub open: u64,
    /// Answered with a reset.
    pub closed: u64,
    /// An ICMP unreachable or no route (iputils' "errors").
    pub unreachable: u64,
    /// Not answered in time.
    pub timed_out: u64,
    /// Not sent at all.
    pub not_sent: u64,
    /// Each answer's time (open and closed), seconds, in order.
    pub times: Vec<f64>,
}

impl Tally {
    /// Count `o`.
    pub fn record(&mut self, o: &Outcome) {
        match o {
            Outcome::Open(t) => {
                self.open += 1;
                self.times.push(t.as_secs_f64());
            }
            Outcome::Closed(t) => {
                self.closed += 1;
                self.times.push(t.as_secs_f64());
            }
            Outcome::Unreachable(..) => self.unreachable += 1,
            Outcome::TimedOut => self.timed_out += 1,
            Outcome::NotSent(_) => self.not_sent += 1,
            // Sent and not answered, as iputils counts a request Ctrl-C cut short.
            Outcome::Interrupted => {}
        }
        if !matches!(o, Outcome::NotSent(_)) {
            self.transmitted += 1;
        }
    }

    /// Answers of the host: a SYN/ACK or a reset.
    pub fn received(&self) -> u64 {
        self.open + self.closed
    }

    /// iputils' loss: the share of transmitted probes not answered, in percent.
    pub fn loss_percent(&self) -> f64 {
        if self.transmitted == 0 {
            return 0.0;
        }
        100.0 * (self.transmitted - self.received()) as f64 / self.transmitted as f64
    }

    /// min, avg, max, mdev of the answers' times, seconds, as iputils computes them
    /// (mdev = √(mean of squares − square of mean)); None without an answer.
    pub fn stats(&self) -> Option<[f64; 4]> {
        let n = self.times.len() as f64;
        if self.times.is_empty() {
            return None;
        }
        let min = self.times.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.times.iter().copied().fold(0.0, f64::max);
        let avg = self.times.iter().sum::<f64>() / n;
        let sq = self.times.iter().map(|t| t * t).sum::<f64>() / n;
        Some([min, avg, max, (sq - avg * avg).max(0.0).sqrt()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Witness: the kernel's own answers on loopback: a listening port completes the
    /// handshake, a port where nothing listens resets it.
    #[test]
    fn an_open_port_answers_and_a_closed_one_resets() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let open = l.local_addr().unwrap();
        let o = handshake(
            socket(open, &SocketOptions::default()).unwrap(),
            open,
            Duration::from_secs(5),
            &AtomicBool::new(false),
        );
        assert!(matches!(o, Outcome::Open(_)), "{o:?}");
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let closed = free.local_addr().unwrap();
        drop(free);
        let o = handshake(
            socket(closed, &SocketOptions::default()).unwrap(),
            closed,
            Duration::from_secs(5),
            &AtomicBool::new(false),
        );
        assert!(matches!(o, Outcome::Closed(_)), "{o:?}");
    }

    /// Witness: the kernel drops a SYN to a listener whose accept queue is full
    /// (tcp_conn_request), so nothing answers: Ctrl-C's flag ends the 10 s wait.
    #[test]
    fn a_wait_nothing_answers_ends_when_stopped() {
        let l = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        l.bind(&SockAddr::from(SocketAddr::from(([127, 0, 0, 1], 0))))
            .unwrap();
        l.listen(0).unwrap();
        let full = l.local_addr().unwrap().as_socket().unwrap();
        let _queued: Vec<_> = (0..2)
            .filter_map(|_| {
                std::net::TcpStream::connect_timeout(&full, Duration::from_millis(300)).ok()
            })
            .collect();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let s2 = std::sync::Arc::clone(&stop);
        let setter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            s2.store(true, Ordering::SeqCst);
        });
        let t0 = Instant::now();
        let o = handshake(
            socket(full, &SocketOptions::default()).unwrap(),
            full,
            Duration::from_secs(10),
            &stop,
        );
        setter.join().unwrap();
        assert!(matches!(o, Outcome::Interrupted), "{o:?}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    }

    /// Witness: connect(2)'s errors, made by the kernel and written out.
    #[test]
    fn each_refusal_is_told_by_its_error() {
        let of = |errno| Refusal::of(&std::io::Error::from_raw_os_error(errno));
        assert_eq!(of(libc::ECONNREFUSED), Refusal::Reset);
        assert_eq!(of(libc::EHOSTUNREACH), Refusal::Unreachable);
        assert_eq!(of(libc::ENETUNREACH), Refusal::Unreachable);
        assert_eq!(of(libc::ETIMEDOUT), Refusal::TimedOut);
        assert_eq!(of(libc::EADDRNOTAVAIL), Refusal::NotSent);
        let timeout = std::io::Error::new(std::io::ErrorKind::TimedOut, "connection timed out");
        assert_eq!(Refusal::of(&timeout), Refusal::TimedOut);
    }

    /// Witness: arithmetic. Answers of 1, 2 and 3 ms (one a reset), a timeout and a
    /// probe not sent: 4 transmitted, 3 received, 25 % loss; mean 2 ms, mdev
    /// √(14/3 − 4) ms = 0.8165 ms, as iputils' formula gives.
    #[test]
    fn the_statistics_are_iputils() {
        let mut t = Tally::default();
        for o in [
            Outcome::Open(Duration::from_millis(1)),
            Outcome::Closed(Duration::from_millis(2)),
            Outcome::Open(Duration::from_millis(3)),
            Outcome::TimedOut,
            Outcome::NotSent("no buffer".into()),
        ] {
            t.record(&o);
        }
        assert_eq!(
            (t.transmitted, t.received(), t.open, t.closed),
            (4, 3, 2, 1)
        );
        assert_eq!(t.loss_percent(), 25.0);
        let [min, avg, max, mdev] = t.stats().unwrap();
        assert_eq!((min, max), (0.001, 0.003));
        assert!((avg - 0.002).abs() < 1e-12);
        assert!(
            (mdev - (14.0f64 / 3.0 - 4.0).sqrt() * 1e-3).abs() < 1e-9,
            "{mdev}"
        );
        assert_eq!(Tally::default().stats(), None);
    }
}
