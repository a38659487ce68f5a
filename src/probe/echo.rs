//! ICMP echoes to many targets over one socket per address family, for `rttlab agent`.
//!
//! A raw ICMP socket receives every echo reply the host gets (`raw_v4_input` delivers
//! a copy to each raw socket), so a socket per peer would cost N² deliveries a second
//! with N peers; and the datagram sockets that the kernel demultiplexes are refused
//! to root's group by the default `net.ipv4.ping_group_range`. One socket per family
//! keeps the cost at one delivery per reply. Nothing here waits: the owner sends,
//! polls the sockets for readiness with its other probes, and drains the replies in
//! a batch; each reply is timed by the kernel's receive stamp (`SO_TIMESTAMPNS`), so
//! when the owner gets round to reading it is not measured.

use super::ping::{enable_timestamps, open, pattern, recv_with_ts};
use super::ping::{PingError, SocketKind};
use crate::wire::icmp::{self, Message};
use socket2::{SockAddr, Socket};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};

/// ICMP payload bytes of the agent's echoes (ping's default is 56; a probe needs no
/// more than its pattern).
const PAYLOAD: usize = 16;

/// An echo request sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sent {
    /// Sent on the IPv6 socket (ICMPv6 echo); each family numbers its own echoes.
    pub v6: bool,
    /// The ICMP echo sequence number, from 0 per family, wrapping.
    pub seq: u16,
    /// CLOCK_REALTIME just before `sendto()`, the clock of the receive stamps.
    pub sent_ns: u64,
}

/// An intact echo reply to one of our requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    /// Received on the IPv6 socket.
    pub v6: bool,
    /// The sequence number of the request it answers ([`Sent::seq`] of the same family).
    pub seq: u16,
    /// The address the reply came from.
    pub from: IpAddr,
    /// The kernel's receive stamp (CLOCK_REALTIME).
    pub received_ns: u64,
}

struct Family {
    sock: Socket,
    raw: bool,
    v6: bool,
    ident: u16,
    next_seq: u16,
}

/// Echoes to any number of targets, owned by one thread.
pub struct Echoer {
    v4: Option<Family>,
    v6: Option<Family>,
    buf: Vec<u8>,
    /// ICMP payload bytes of every echo.
    payload: usize,
    /// A request, reused.
    pkt: Vec<u8>,
}

impl Echoer {
    /// Open a non-blocking socket per family (either may fail: then only the other
    /// works).
    ///
    /// # Errors
    /// Neither family's socket could be opened.
    pub fn new() -> Result<Self, PingError> {
        Self::with_payload(PAYLOAD)
    }

    /// [`Echoer::new`] with `payload` ICMP payload bytes in every echo (fping's -b).
    ///
    /// # Errors
    /// As [`Echoer::new`], or a payload over 65000 bytes.
    pub fn with_payload(payload: usize) -> Result<Self, PingError> {
        if payload > 65_000 {
            return Err(PingError::Size(payload));
        }
        let open_family = |target: IpAddr| -> Result<Family, PingError> {
            let (sock, kind) = open(target, SocketKind::Auto)?;
            enable_timestamps(&sock)?;
            sock.set_nonblocking(true).map_err(PingError::Socket)?;
            Ok(Family {
                sock,
                raw: kind == SocketKind::Raw,
                v6: target.is_ipv6(),
                ident: (std::process::id() as u16) ^ 0x6167,
                next_seq: 0,
            })
        };
        let v4 = open_family(IpAddr::from([127, 0, 0, 1]));
        let v6 = open_family(IpAddr::from(std::net::Ipv6Addr::LOCALHOST));
        match (v4, v6) {
            (Err(e), Err(_)) => Err(e),
            (v4, v6) => Ok(Self {
                v4: v4.ok(),
                v6: v6.ok(),
                buf: vec![0; payload + 2048],
                payload,
                pkt: vec![0; 8 + payload],
            }),
        }
    }

    /// The sockets to poll for readiness.
    pub fn fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        self.v4
            .iter()
            .chain(self.v6.iter())
            .map(|f| f.sock.as_raw_fd())
    }

    /// Send one echo request to `target`.
    ///
    /// # Errors
    /// The request could not be sent (no route, no socket for the family, the
    /// socket's buffer full).
    pub fn send(&mut self, target: IpAddr) -> io::Result<Sent> {
        let f = match target {
            IpAddr::V4(_) => self.v4.as_mut(),
            IpAddr::V6(_) => self.v6.as_mut(),
        }
        .ok_or_else(|| io::Error::other("no ICMP socket for this address family"))?;
        let seq = f.next_seq;
        f.next_seq = f.next_seq.wrapping_add(1);
        let pkt = &mut self.pkt;
        icmp::write_request(pkt, f.v6, f.ident, seq, |i| pattern(seq, i));
        let sent_ns = crate::kernel::realtime_ns();
        f.sock
            .send_to(pkt, &SockAddr::from(SocketAddr::new(target, 0)))?;
        Ok(Sent {
            v6: f.v6,
            seq,
            sent_ns,
        })
    }

    /// Hand every intact reply to us that has arrived to `each`, without waiting
    /// (both sockets are read until they are empty, as an edge-triggered poll needs).
    pub fn drain(&mut self, mut each: impl FnMut(Reply)) {
        let buf = &mut self.buf;
        let payload = self.payload;
        for f in self.v4.iter().chain(self.v6.iter()) {
            loop {
                let mut from: libc::sockaddr_storage =
                    // SAFETY: plain data, zero is a valid value.
                    unsafe { std::mem::zeroed() };
                let r = match recv_with_ts(f.sock.as_raw_fd(), buf, true, Some(&mut from)) {
                    Ok(r) => r,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    // Empty (or an error queued by an unreachable target: read and
                    // gone, the echo is counted lost at its deadline).
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => continue,
                };
                let Some(seq) = intact_reply(&buf[..r.len], f, payload) else {
                    continue;
                };
                // SAFETY: the kernel filled `from` with a sockaddr of the socket's family.
                let src = unsafe { SockAddr::new(from, std::mem::size_of_val(&from) as u32) }
                    .as_socket()
                    .map(|s| s.ip());
                if let Some(from) = src {
                    each(Reply {
                        v6: f.v6,
                        seq,
                        from,
                        received_ns: r.ts_ns.unwrap_or_else(crate::kernel::realtime_ns),
                    });
                }
            }
        }
    }
}

/// The sequence number of `datagram` when it is an intact echo reply to `family`'s
/// requests: a raw IPv4 socket's IP header skipped, a raw socket's identifier checked
/// (a datagram socket's replies are the kernel's to filter), the payload `payload`
/// bytes of [`pattern`].
fn intact_reply(datagram: &[u8], family: &Family, payload: usize) -> Option<u16> {
    let icmp = if family.raw && !family.v6 {
        icmp::ipv4_head(datagram).ok()?.icmp
    } else {
        datagram
    };
    let Ok(Message::Reply(echo)) = icmp::message(icmp, family.v6) else {
        return None;
    };
    let seq = echo.seq();
    let intact = echo.code() == 0
        && (!family.raw || echo.ident() == family.ident)
        && echo.payload().len() == payload
        && echo
            .payload()
            .iter()
            .enumerate()
            .all(|(i, &b)| b == pattern(seq, i));
    intact.then_some(seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Witness: the loopback's own echo replies, each matched by sequence number, and
    /// the kernel's stamp against the send time (arithmetic: after it, and within the
    /// wait).
    #[test]
    fn echoes_to_loopback_come_back_stamped() {
        let Ok(mut e) = Echoer::new() else {
            eprintln!("skipped: no ICMP socket (needs root or ping_group_range)");
            return;
        };
        let target = IpAddr::from([127, 0, 0, 1]);
        let sent: Vec<Sent> = (0..5).map(|_| e.send(target).unwrap()).collect();
        let mut got = Vec::new();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while got.len() < sent.len() && std::time::Instant::now() < until {
            e.drain(|r| got.push(r));
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(got.len(), 5, "{got:?}");
        for s in &sent {
            let r = got.iter().find(|r| r.seq == s.seq && !r.v6).unwrap();
            assert_eq!(r.from, target);
            assert!(r.received_ns >= s.sent_ns, "{r:?} {s:?}");
            assert!(r.received_ns - s.sent_ns < 2_000_000_000, "{r:?} {s:?}");
        }
    }
}
