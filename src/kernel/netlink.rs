//! A minimal synchronous netlink socket: send a request, walk the (multipart) replies
//! without copying them. Used for sock_diag dumps, where parsing speed matters (a dump
//! of thousands of sockets every 10 ms), and for route metrics.

use super::SyscallError;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const NLMSG_HDRLEN: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// Receive buffer: the kernel sizes dump messages to what the reader can take (up to 32 KiB).
const RECV_BUF: usize = 64 * 1024;

/// An open netlink socket of one protocol.
pub struct NetlinkSocket {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

/// Round up to netlink's 4-byte alignment.
pub const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

impl NetlinkSocket {
    /// Open a socket of `protocol` (NETLINK_SOCK_DIAG, NETLINK_ROUTE) in the caller's
    /// network namespace.
    ///
    /// # Errors
    /// `socket` or `bind` failed.
    pub fn open(protocol: libc::c_int) -> Result<Self, SyscallError> {
        // SAFETY: plain socket(2); the fd is owned below.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                protocol,
            )
        };
        if fd < 0 {
            return Err(SyscallError::last("socket(AF_NETLINK)"));
        }
        // SAFETY: fd is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_nl is plain data.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as u16;
        // SAFETY: binding a valid sockaddr_nl of its own size.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sa as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if rc != 0 {
            return Err(SyscallError::last("bind(AF_NETLINK)"));
        }
        Ok(Self {
            fd,
            seq: 0,
            buf: vec![0; RECV_BUF],
        })
    }

    /// Send one request; returns its sequence number.
    ///
    /// # Errors
    /// `send` failed.
    pub fn send(&mut self, msg_type: u16, flags: u16, payload: &[u8]) -> Result<u32, SyscallError> {
        self.seq = self.seq.wrapping_add(1);
        let len = NLMSG_HDRLEN + payload.len();
        let mut msg = Vec::with_capacity(align4(len));
        msg.extend_from_slice(&(len as u32).to_ne_bytes());
        msg.extend_from_slice(&msg_type.to_ne_bytes());
        msg.extend_from_slice(&(flags | libc::NLM_F_REQUEST as u16).to_ne_bytes());
        msg.extend_from_slice(&self.seq.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(payload);
        // SAFETY: msg is valid for its length.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
        if n < 0 {
            return Err(SyscallError::last("send(netlink)"));
        }
        Ok(self.seq)
    }

    /// Read the replies to request `seq`, calling `f(type, payload)` for each message
    /// until NLMSG_DONE (dumps) or the ACK (requests with NLM_F_ACK).
    ///
    /// # Errors
    /// `recv` failed, or the kernel answered with an error (its errno).
    pub fn replies(&mut self, seq: u32, mut f: impl FnMut(u16, &[u8])) -> Result<(), SyscallError> {
        loop {
            // SAFETY: buf is valid for its length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    0,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(SyscallError {
                    call: "recv(netlink)",
                    source: e,
                });
            }
            let mut data = &self.buf[..n as usize];
            while data.len() >= NLMSG_HDRLEN {
                let len = u32::from_ne_bytes([data[0], data[1], data[2], data[3]]) as usize;
                let ty = u16::from_ne_bytes([data[4], data[5]]);
                let mseq = u32::from_ne_bytes([data[8], data[9], data[10], data[11]]);
                if len < NLMSG_HDRLEN || len > data.len() {
                    return Err(SyscallError {
                        call: "recv(netlink)",
                        source: io::Error::new(
                            io::ErrorKind::InvalidData,
                            "truncated netlink message",
                        ),
                    });
                }
                let payload = &data[NLMSG_HDRLEN..len];
                data = &data[align4(len).min(data.len())..];
                if mseq != seq {
                    continue;
                }
                match ty {
                    NLMSG_DONE => return Ok(()),
                    NLMSG_ERROR => {
                        let errno = payload
                            .get(..4)
                            .map_or(0, |b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
                        if errno == 0 {
                            return Ok(());
                        }
                        return Err(SyscallError {
                            call: "netlink request",
                            source: io::Error::from_raw_os_error(-errno),
                        });
                    }
                    _ => f(ty, payload),
                }
            }
        }
    }
}

/// An address as the kernel lays it out for `family` (AF_INET: 4 bytes, AF_INET6: 16);
/// `None` for another family or a short buffer. Extra bytes are ignored (inet_diag pads
/// IPv4 addresses to 16).
pub fn ip_from(family: u8, b: &[u8]) -> Option<std::net::IpAddr> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    match i32::from(family) {
        libc::AF_INET => Some(IpAddr::V4(Ipv4Addr::new(
            *b.first()?,
            *b.get(1)?,
            *b.get(2)?,
            *b.get(3)?,
        ))),
        libc::AF_INET6 => Some(IpAddr::V6(Ipv6Addr::from(
            <[u8; 16]>::try_from(b.get(..16)?).ok()?,
        ))),
        _ => None,
    }
}

/// Netlink attributes (`struct rtattr`/`nlattr`: u16 length, u16 type, data) in `buf`.
pub struct Attrs<'a>(pub &'a [u8]);

impl<'a> Iterator for Attrs<'a> {
    type Item = (u16, &'a [u8]);
    fn next(&mut self) -> Option<Self::Item> {
        if self.0.len() < 4 {
            return None;
        }
        let len = usize::from(u16::from_ne_bytes([self.0[0], self.0[1]]));
        let ty = u16::from_ne_bytes([self.0[2], self.0[3]]) & 0x3fff;
        if len < 4 || len > self.0.len() {
            self.0 = &[];
            return None;
        }
        let data = &self.0[4..len];
        self.0 = &self.0[align4(len).min(self.0.len())..];
        Some((ty, data))
    }
}

/// Append one attribute, padded to 4 bytes.
pub fn push_attr(buf: &mut Vec<u8>, ty: u16, data: &[u8]) {
    let len = 4 + data.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&ty.to_ne_bytes());
    buf.extend_from_slice(data);
    buf.resize(buf.len() + align4(len) - len, 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_round_trip_and_survive_garbage() {
        let mut b = Vec::new();
        push_attr(&mut b, 2, &[1, 2, 3]);
        push_attr(&mut b, 4, b"cubic\0");
        let v: Vec<_> = Attrs(&b).collect();
        assert_eq!(v, vec![(2, &[1u8, 2, 3][..]), (4, &b"cubic\0"[..])]);
        for cut in 0..b.len() {
            let _ = Attrs(&b[..cut]).count();
        }
        assert_eq!(Attrs(&[0xff, 0xff, 1, 0]).count(), 0);
    }
}
