//! ICMP echoes to many targets over one socket per address family, for `rttlab agent`.
//!
//! A raw ICMP socket receives every echo reply the host gets (`raw_v4_input` delivers
//! a copy to each raw socket), so a socket per peer would cost N² deliveries a second
//! with N peers; and the datagram sockets that the kernel demultiplexes are refused
//! to root's group by the default `net.ipv4.ping_group_range`. One socket per family
//! and one receiving thread that hands each reply to the caller waiting for it keep
//! the cost at one delivery per reply. The sender does not wait for its reply (a
//! thread woken per reply would double the context switches, the agent's main cost):
//! it looks at the outcome when it is next due.

use super::ping::{checksum, enable_timestamps, open, parse_reply, pattern, recv_with_ts};
use super::ping::{PingError, SocketKind};
use socket2::{SockAddr, Socket};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// ICMP payload bytes of every echo (ping's default is 56; a probe needs no more than
/// its pattern).
const PAYLOAD: usize = 16;

/// Where the receiving thread leaves the kernel's receive time of a reply (0: none
/// yet).
#[derive(Default)]
struct Slot {
    received_ns: AtomicU64,
}

/// An echo request in flight.
pub struct Echo {
    family: Arc<Family>,
    seq: u16,
    sent_ns: u64,
    slot: Arc<Slot>,
}

impl Echo {
    /// The round trip if the reply has come, and came within `timeout`.
    pub fn rtt(&self, timeout: Duration) -> Option<Duration> {
        match self.slot.received_ns.load(Ordering::Acquire) {
            0 => None,
            rx => Some(Duration::from_nanos(rx.saturating_sub(self.sent_ns)))
                .filter(|rtt| *rtt <= timeout),
        }
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        lock(&self.family.waiting).remove(&self.seq);
    }
}

struct Family {
    sock: Socket,
    raw: bool,
    v6: bool,
    ident: u16,
    next_seq: AtomicU16,
    /// Echoes in flight by sequence number, with their target.
    waiting: Mutex<HashMap<u16, (IpAddr, Arc<Slot>)>>,
}

/// Echoes to any number of targets; cheap to share between threads.
pub struct Echoer {
    v4: Option<Arc<Family>>,
    v6: Option<Arc<Family>>,
    stop: Arc<AtomicBool>,
}

impl Echoer {
    /// Open a socket per family (either may fail: then only the other works) and
    /// start their receiving threads.
    ///
    /// # Errors
    /// Neither family's socket could be opened.
    pub fn new() -> Result<Self, PingError> {
        let stop = Arc::new(AtomicBool::new(false));
        let open_family = |target: IpAddr| -> Result<Arc<Family>, PingError> {
            let (sock, kind) = open(target, SocketKind::Auto)?;
            enable_timestamps(&sock)?;
            // Wake now and then to notice the stop flag.
            sock.set_read_timeout(Some(Duration::from_millis(200)))
                .map_err(PingError::Socket)?;
            let f = Arc::new(Family {
                sock,
                raw: kind == SocketKind::Raw,
                v6: target.is_ipv6(),
                ident: (std::process::id() as u16) ^ 0x6167,
                next_seq: AtomicU16::new(0),
                waiting: Mutex::new(HashMap::new()),
            });
            let (f2, stop) = (Arc::clone(&f), Arc::clone(&stop));
            std::thread::Builder::new()
                .name(if f.v6 { "echo-v6" } else { "echo-v4" }.into())
                .spawn(move || receive(&f2, &stop))
                .map_err(PingError::Socket)?;
            Ok(f)
        };
        let v4 = open_family(IpAddr::from([127, 0, 0, 1]));
        let v6 = open_family(IpAddr::from(std::net::Ipv6Addr::LOCALHOST));
        match (v4, v6) {
            (Err(e), Err(_)) => Err(e),
            (v4, v6) => Ok(Self {
                v4: v4.ok(),
                v6: v6.ok(),
                stop,
            }),
        }
    }

    /// Send one echo request to `target`; its reply is looked up with [`Echo::rtt`].
    ///
    /// # Errors
    /// The request could not be sent (no route, no socket for the family).
    pub fn send(&self, target: IpAddr) -> io::Result<Echo> {
        let f = match target {
            IpAddr::V4(_) => self.v4.as_ref(),
            IpAddr::V6(_) => self.v6.as_ref(),
        }
        .ok_or_else(|| io::Error::other("no ICMP socket for this address family"))?;
        let seq = f.next_seq.fetch_add(1, Ordering::Relaxed);
        let mut pkt = [0u8; 8 + PAYLOAD];
        pkt[0] = if f.v6 { 128 } else { 8 };
        pkt[4..6].copy_from_slice(&f.ident.to_be_bytes());
        pkt[6..8].copy_from_slice(&seq.to_be_bytes());
        for (i, b) in pkt[8..].iter_mut().enumerate() {
            *b = pattern(seq, i);
        }
        if !f.v6 {
            let c = checksum(&pkt);
            pkt[2..4].copy_from_slice(&c.to_be_bytes());
        }
        let mut echo = Echo {
            family: Arc::clone(f),
            seq,
            sent_ns: 0,
            slot: Arc::new(Slot::default()),
        };
        lock(&f.waiting).insert(seq, (target, Arc::clone(&echo.slot)));
        echo.sent_ns = crate::kernel::realtime_ns();
        f.sock
            .send_to(&pkt, &SockAddr::from(SocketAddr::new(target, 0)))?;
        Ok(echo)
    }
}

impl Drop for Echoer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Hand every intact reply from the right address to the caller waiting for it.
fn receive(f: &Family, stop: &AtomicBool) {
    let mut buf = vec![0u8; 2048];
    let fd = f.sock.as_raw_fd();
    while !stop.load(Ordering::Relaxed) {
        let mut from: libc::sockaddr_storage =
            // SAFETY: plain data, zero is a valid value.
            unsafe { std::mem::zeroed() };
        let (n, ts) = match recv_with_ts(fd, &mut buf, false, Some(&mut from)) {
            Ok(r) => (r.len, r.ts_ns),
            Err(_) => continue,
        };
        let Some(reply) = parse_reply(&buf[..n], f.v6, f.raw, f.ident, PAYLOAD) else {
            continue;
        };
        let rx = ts.unwrap_or_else(crate::kernel::realtime_ns);
        // SAFETY: the kernel filled `from` with a sockaddr of the socket's family.
        let src = unsafe { SockAddr::new(from, std::mem::size_of_val(&from) as u32) }
            .as_socket()
            .map(|s| s.ip());
        let waiting = lock(&f.waiting);
        if let Some((target, slot)) = waiting.get(&reply.seq) {
            if reply.intact && src == Some(*target) {
                slot.received_ns.store(rx.max(1), Ordering::Release);
            }
        }
    }
}
