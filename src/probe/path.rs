//! Which path a probe takes and how its packets are marked: the traffic class (the
//! TOS byte, DSCP in its upper six bits), the interface (`SO_BINDTODEVICE`), the
//! source address, the firewall mark (`SO_MARK`, which policy routing can match) and
//! the socket buffers. Latency per traffic class or per uplink is measured by asking
//! for these, as netperf's `-Y`/`-L` and iputils ping's `-Q`/`-I`/`-m` do.

use socket2::{SockAddr, Socket};
use std::io;
use std::net::{IpAddr, SocketAddr};

/// How a probe's sockets are routed and marked; the default changes nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PathOptions {
    /// The TOS byte (IPv4) or traffic class (IPv6) of what the probe sends.
    pub tos: Option<u8>,
    /// Send through this interface only.
    pub interface: Option<String>,
    /// Source address.
    pub bind: Option<IpAddr>,
    /// Firewall mark, for policy routing (`ip rule add fwmark N …`).
    pub mark: Option<u32>,
    /// Send buffer of data sockets, bytes (`SO_SNDBUF`, `--sndbuf`; the kernel doubles it).
    pub sndbuf: Option<usize>,
    /// Receive buffer of data sockets, bytes (`SO_RCVBUF`, `--rcvbuf`; doubled likewise).
    pub rcvbuf: Option<usize>,
    /// Source port of data sockets (`--local-data-port`, netperf's test-specific
    /// `-P LPORT,`), bound with `SO_REUSEADDR` as netperf binds its own so that a run
    /// right after another finds the port free of its TIME_WAIT.
    pub data_source_port: Option<u16>,
}

/// The TOS byte of DSCP `dscp` (its upper six bits; the lower two are ECN's, which
/// TCP sets itself).
pub fn tos_of_dscp(dscp: u8) -> u8 {
    dscp << 2
}

impl PathOptions {
    /// Interface, source address and mark, before `connect()` (control and data
    /// sockets alike: the whole test takes the path asked for).
    ///
    /// # Errors
    /// The kernel refused an option (a missing interface, an address not on this
    /// host, `--mark` without CAP_NET_ADMIN), named in the message.
    pub fn route(&self, sock: &Socket, peer: SocketAddr) -> io::Result<()> {
        self.route_from(sock, peer, 0)
    }

    /// [`PathOptions::route`] with the source port `port` (0: the kernel's choice).
    fn route_from(&self, sock: &Socket, peer: SocketAddr, port: u16) -> io::Result<()> {
        if let Some(dev) = &self.interface {
            sock.bind_device(Some(dev.as_bytes()))
                .map_err(|e| named(e, &format!("--interface {dev}")))?;
        }
        if let Some(mark) = self.mark {
            sock.set_mark(mark)
                .map_err(|e| named(e, &format!("--mark {mark} (needs CAP_NET_ADMIN)")))?;
        }
        if let Some(ip) = self.bind {
            if ip.is_ipv4() != peer.is_ipv4() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("--bind {ip} is not of the server's address family ({peer})"),
                ));
            }
            sock.bind(&SockAddr::from(SocketAddr::new(ip, port)))
                .map_err(|e| named(e, &format!("--bind {ip}")))?;
        } else if port != 0 {
            let any: IpAddr = if peer.is_ipv4() {
                std::net::Ipv4Addr::UNSPECIFIED.into()
            } else {
                std::net::Ipv6Addr::UNSPECIFIED.into()
            };
            sock.bind(&SockAddr::from(SocketAddr::new(any, port)))
                .map_err(|e| named(e, &format!("--local-data-port {port}")))?;
        }
        Ok(())
    }

    /// [`PathOptions::route`], then the traffic class and buffers (data sockets).
    ///
    /// # Errors
    /// As [`PathOptions::route`], or a refused TOS or buffer size.
    pub fn data(&self, sock: &Socket, peer: SocketAddr) -> io::Result<()> {
        let port = self.data_source_port.unwrap_or(0);
        if port != 0 {
            sock.set_reuse_address(true)
                .map_err(|e| named(e, &format!("--local-data-port {port}")))?;
        }
        self.route_from(sock, peer, port)?;
        if let Some(tos) = self.tos {
            set_tos(sock, peer.is_ipv6(), tos)
                .map_err(|e| named(e, &format!("--tos {tos:#04x}")))?;
        }
        if let Some(n) = self.sndbuf {
            sock.set_send_buffer_size(n)
                .map_err(|e| named(e, &format!("--sndbuf {n}")))?;
        }
        if let Some(n) = self.rcvbuf {
            sock.set_recv_buffer_size(n)
                .map_err(|e| named(e, &format!("--rcvbuf {n}")))?;
        }
        Ok(())
    }
}

/// `IP_TOS` (IPv4) or `IPV6_TCLASS` (IPv6).
///
/// # Errors
/// The kernel's refusal.
pub fn set_tos(sock: &Socket, v6: bool, tos: u8) -> io::Result<()> {
    if v6 {
        sock.set_tclass_v6(u32::from(tos))
    } else {
        sock.set_tos(u32::from(tos))
    }
}

fn named(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use socket2::{Domain, Type};

    /// Witness: the kernel's own answer (getsockopt) for what was set, and its refusal
    /// of a source address that is not on this host.
    #[test]
    fn options_reach_the_socket() {
        let peer: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let p = PathOptions {
            tos: Some(tos_of_dscp(46)),
            bind: Some("127.0.0.1".parse().unwrap()),
            sndbuf: Some(65536),
            ..PathOptions::default()
        };
        let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        p.data(&s, peer).unwrap();
        assert_eq!(s.tos().unwrap(), 0xb8);
        assert_eq!(
            s.local_addr().unwrap().as_socket().unwrap().ip(),
            p.bind.unwrap()
        );
        // The kernel doubles SO_SNDBUF for its bookkeeping (socket(7)).
        assert_eq!(s.send_buffer_size().unwrap(), 2 * 65536);
        let v6 = Socket::new(Domain::IPV6, Type::DGRAM, None).unwrap();
        set_tos(&v6, true, 0x20).unwrap();
        assert_eq!(v6.tclass_v6().unwrap(), 0x20);
        let elsewhere = PathOptions {
            bind: Some("192.0.2.1".parse().unwrap()),
            ..PathOptions::default()
        };
        let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        let e = elsewhere.route(&s, peer).unwrap_err();
        assert!(e.to_string().starts_with("--bind 192.0.2.1: "), "{e}");
    }

    /// A data socket's source port is the one asked for, with or without a source
    /// address; a control socket keeps the kernel's choice. Witness: getsockname.
    #[test]
    fn data_sockets_take_the_source_port_asked_for() {
        let peer: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let port = {
            let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        for bind in [None, Some("127.0.0.1".parse().unwrap())] {
            let p = PathOptions {
                bind,
                data_source_port: Some(port),
                ..PathOptions::default()
            };
            let s = Socket::new(Domain::IPV4, Type::DGRAM, None).unwrap();
            p.data(&s, peer).unwrap();
            assert_eq!(s.local_addr().unwrap().as_socket().unwrap().port(), port);
            let control = Socket::new(Domain::IPV4, Type::DGRAM, None).unwrap();
            p.route(&control, peer).unwrap();
            let kept = control.local_addr().unwrap().as_socket();
            assert!(kept.is_none_or(|a| a.port() != port), "{kept:?}");
        }
    }
}
