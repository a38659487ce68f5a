//! IPv4 (options skipped, fragments recognised) and IPv6 (extension-header chain
//! walked), down to the transport header.

use super::link::LinkType;
use super::tcp::Tcp;
use super::{be16, Skip};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// IPPROTO_TCP.
pub const TCP: u8 = 6;
/// IPPROTO_UDP.
pub const UDP: u8 = 17;
/// IPPROTO_ICMP.
pub const ICMP: u8 = 1;
/// IPPROTO_ICMPV6.
pub const ICMPV6: u8 = 58;

/// The transport payload of an IP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport<'a> {
    /// The TCP segment: header, options and payload.
    Tcp(Tcp<'a>),
    /// Source and destination port; the UDP payload.
    Udp {
        /// Source port.
        sport: u16,
        /// Destination port.
        dport: u16,
        /// The bytes after the UDP header, up to the IP packet's end or the capture's.
        payload: &'a [u8],
    },
    /// ICMP or ICMPv6: type, code, the rest.
    Icmp {
        /// ICMP or ICMPv6 type.
        kind: u8,
        /// ICMP or ICMPv6 code.
        code: u8,
        /// The bytes after the type, code and checksum (from byte 4 on).
        body: &'a [u8],
    },
    /// Another protocol number and its bytes.
    Other {
        /// The IP protocol number.
        proto: u8,
        /// The payload after the IP headers, up to the packet's end or the capture's.
        bytes: &'a [u8],
    },
}

/// A decoded IP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ip<'a> {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: u8,
    /// The IP packet's length as its header says (total / 40 + payload length).
    pub len: u32,
    /// The transport header and payload's length as the IP header says (what was sent,
    /// however much the capture kept).
    pub transport_len: u32,
    /// The decoded transport header and payload.
    pub transport: Transport<'a>,
}

/// The network header's fields and what follows it. Addresses are IPv6, IPv4 ones
/// mapped (::ffff:a.b.c.d), so the fast path never builds an `IpAddr`.
struct Network<'a> {
    v4: bool,
    src: u128,
    dst: u128,
    ttl: u8,
    len: u32,
    transport_len: u32,
    proto: u8,
    payload: &'a [u8],
}

fn v4(p: &[u8]) -> Result<Network<'_>, Skip> {
    let ihl = usize::from(p.first().ok_or(Skip::Truncated)? & 0x0f) * 4;
    if p[0] >> 4 != 4 || ihl < 20 {
        return Err(Skip::BadIpHeader);
    }
    let h = p.get(..ihl).ok_or(Skip::Truncated)?;
    let total = be16(h, 2).ok_or(Skip::Truncated)?;
    let frag = be16(h, 6).ok_or(Skip::Truncated)?;
    // More fragments, or a non-zero offset.
    if frag & 0x3fff != 0 {
        return Err(Skip::Fragment);
    }
    let addr = |at: usize| {
        0xffff_0000_0000u128
            | u128::from(u32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]))
    };
    // The payload ends where the header says, or where the capture ended (snaplen):
    // the transport parser decides what it can use.
    let end = usize::from(total).clamp(ihl, p.len());
    Ok(Network {
        v4: true,
        src: addr(12),
        dst: addr(16),
        ttl: h[8],
        len: u32::from(total),
        transport_len: u32::from(total).saturating_sub(ihl as u32),
        proto: h[9],
        payload: &p[ihl..end],
    })
}

fn v6(p: &[u8]) -> Result<Network<'_>, Skip> {
    let h = p.get(..40).ok_or(Skip::Truncated)?;
    if h[0] >> 4 != 6 {
        return Err(Skip::BadIpHeader);
    }
    let plen = be16(h, 4).ok_or(Skip::Truncated)?;
    let addr = |at: usize| {
        let mut a = [0u8; 16];
        a.copy_from_slice(&h[at..at + 16]);
        u128::from_be_bytes(a)
    };
    let end = (40 + usize::from(plen)).min(p.len());
    let mut rest = &p[40..end];
    let mut next = h[6];
    loop {
        match next {
            // Hop-by-hop, routing, destination options: (len + 1) × 8 bytes.
            0 | 43 | 60 => {
                let len = (usize::from(*rest.get(1).ok_or(Skip::Truncated)?) + 1) * 8;
                next = rest[0];
                rest = rest.get(len..).ok_or(Skip::Truncated)?;
            }
            // Fragment header: any fragment is skipped (an atomic one, offset 0 and no
            // more fragments, is a whole packet).
            44 => {
                let off = be16(rest, 2).ok_or(Skip::Truncated)?;
                if off & 0xfff9 != 0 {
                    return Err(Skip::Fragment);
                }
                next = rest[0];
                rest = rest.get(8..).ok_or(Skip::Truncated)?;
            }
            // Authentication header: (len + 2) × 4 bytes.
            51 => {
                let len = (usize::from(*rest.get(1).ok_or(Skip::Truncated)?) + 2) * 4;
                next = rest[0];
                rest = rest.get(len..).ok_or(Skip::Truncated)?;
            }
            _ => break,
        }
    }
    // Extension headers consumed: what the payload length says minus what is left of it.
    let ext = (end - 40 - rest.len()) as u32;
    Ok(Network {
        v4: false,
        src: addr(8),
        dst: addr(24),
        ttl: h[7],
        len: 40 + u32::from(plen),
        transport_len: u32::from(plen).saturating_sub(ext),
        proto: next,
        payload: rest,
    })
}

/// Decode a captured frame of `link` type down to its transport header.
///
/// # Errors
/// Why the packet cannot be used.
pub fn decode(link: LinkType, frame: &[u8]) -> Result<Ip<'_>, Skip> {
    let (ver, p) = link.network(frame)?;
    let Network {
        v4,
        src,
        dst,
        ttl,
        len,
        transport_len,
        proto,
        payload,
    } = match ver {
        4 => v4(p)?,
        _ => v6(p)?,
    };
    let transport = match proto {
        TCP => Transport::Tcp(Tcp::new(payload)?),
        UDP => Transport::Udp {
            sport: be16(payload, 0).ok_or(Skip::Truncated)?,
            dport: be16(payload, 2).ok_or(Skip::Truncated)?,
            payload: payload.get(8..).unwrap_or(&[]),
        },
        ICMP | ICMPV6 => Transport::Icmp {
            kind: *payload.first().ok_or(Skip::Truncated)?,
            code: *payload.get(1).ok_or(Skip::Truncated)?,
            body: payload.get(4..).unwrap_or(&[]),
        },
        _ => Transport::Other {
            proto,
            bytes: payload,
        },
    };
    let ip = |a: u128| {
        if v4 {
            IpAddr::V4(Ipv4Addr::from(a as u32))
        } else {
            IpAddr::V6(Ipv6Addr::from(a))
        }
    };
    Ok(Ip {
        src: ip(src),
        dst: ip(dst),
        ttl,
        len,
        transport_len,
        transport,
    })
}

/// A TCP segment's fields the passive engines need, decoded without building
/// `IpAddr`s: addresses as IPv6 integers (IPv4 mapped, as
/// [`crate::passive::flow::Endpoint`] keeps them).
#[derive(Debug, Clone, Copy)]
pub struct TcpSegment<'a> {
    /// Source address as a `u128`: IPv6, or IPv4 mapped (::ffff:a.b.c.d).
    pub src: u128,
    /// Destination address, in the same form.
    pub dst: u128,
    /// The IP packet's length as its header says.
    pub ip_len: u32,
    /// The TCP header and payload's length as the IP header says.
    pub transport_len: u32,
    /// The TCP header and payload.
    pub tcp: Tcp<'a>,
}

/// Decode a frame down to TCP: `Ok(None)` for another transport.
///
/// # Errors
/// Why the packet cannot be used (as [`decode`]).
#[inline]
pub fn decode_tcp(link: LinkType, frame: &[u8]) -> Result<Option<TcpSegment<'_>>, Skip> {
    let (ver, p) = link.network(frame)?;
    let n = match ver {
        4 => v4(p)?,
        _ => v6(p)?,
    };
    if n.proto != TCP {
        return Ok(None);
    }
    Ok(Some(TcpSegment {
        src: n.src,
        dst: n.dst,
        ip_len: n.len,
        transport_len: n.transport_len,
        tcp: Tcp::new(n.payload)?,
    }))
}

impl Ip<'_> {
    /// (source port, destination port) of TCP and UDP.
    pub fn ports(&self) -> Option<(u16, u16)> {
        match self.transport {
            Transport::Tcp(t) => Some((t.src_port(), t.dst_port())),
            Transport::Udp { sport, dport, .. } => Some((sport, dport)),
            _ => None,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An Ethernet frame carrying IPv4 with `proto` and `l4`.
    pub fn eth_v4(proto: u8, frag: u16, l4: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
        f.extend_from_slice(&(20 + l4.len() as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(&frag.to_be_bytes());
        f.extend_from_slice(&[64, proto, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2]);
        f.extend_from_slice(l4);
        f
    }

    #[test]
    fn ipv4_udp_icmp_and_fragments() {
        let udp = [0x13, 0x89, 0x9c, 0x40, 0, 12, 0, 0, b'a', b'b', b'c', b'd'];
        let f = eth_v4(UDP, 0x4000, &udp);
        let ip = decode(LinkType::Ethernet, &f).unwrap();
        assert_eq!(ip.src, "198.18.0.1".parse::<IpAddr>().unwrap());
        assert_eq!((ip.ttl, ip.len), (64, 32));
        assert_eq!(ip.ports(), Some((5001, 40000)));
        assert!(matches!(
            ip.transport,
            Transport::Udp {
                payload: b"abcd",
                ..
            }
        ));
        assert_eq!(
            decode(LinkType::Ethernet, &eth_v4(UDP, 0x2000, &udp)),
            Err(Skip::Fragment)
        );
        assert_eq!(
            decode(LinkType::Ethernet, &eth_v4(UDP, 0x0010, &udp)),
            Err(Skip::Fragment)
        );
        let echo = eth_v4(ICMP, 0, &[8, 0, 0, 0, 1, 2, 3, 4]);
        let icmp = decode(LinkType::Ethernet, &echo).unwrap();
        assert!(matches!(
            icmp.transport,
            Transport::Icmp {
                kind: 8,
                code: 0,
                ..
            }
        ));
        // Ethernet padding past the IP total length is not payload.
        let mut padded = eth_v4(UDP, 0, &udp);
        padded.extend_from_slice(&[0; 6]);
        assert!(matches!(
            decode(LinkType::Ethernet, &padded).unwrap().transport,
            Transport::Udp {
                payload: b"abcd",
                ..
            }
        ));
    }

    #[test]
    fn ipv6_extension_chain() {
        let mut p = vec![0x60, 0, 0, 0, 0, 24, 0, 64];
        p.extend_from_slice(&[0u8; 15]);
        p.push(1);
        p.extend_from_slice(&[0u8; 15]);
        p.push(2);
        // Hop-by-hop (8 bytes) then a destination-options header (8) then UDP.
        p.extend_from_slice(&[60, 0, 0, 0, 0, 0, 0, 0]);
        p.extend_from_slice(&[UDP, 0, 0, 0, 0, 0, 0, 0]);
        p.extend_from_slice(&[0, 53, 0, 54, 0, 8, 0, 0]);
        let ip = decode(LinkType::Raw, &p).unwrap();
        assert_eq!(ip.dst, "::2".parse::<IpAddr>().unwrap());
        assert_eq!(ip.ports(), Some((53, 54)));
        // A real fragment.
        let mut f = p.clone();
        f[6] = 44;
        f[40..48].copy_from_slice(&[UDP, 0, 0, 8, 0, 0, 0, 1]);
        assert_eq!(decode(LinkType::Raw, &f), Err(Skip::Fragment));
    }

    #[test]
    fn any_prefix_is_an_error_not_a_panic() {
        let tcp = [0u8; 20];
        let mut t = tcp;
        t[12] = 0x50;
        let f = eth_v4(TCP, 0, &t);
        assert!(decode(LinkType::Ethernet, &f).is_ok());
        for cut in 0..f.len() {
            assert!(decode(LinkType::Ethernet, &f[..cut]).is_err(), "{cut}");
        }
        let mut bad = f.clone();
        bad[14] = 0x43;
        assert_eq!(decode(LinkType::Ethernet, &bad), Err(Skip::BadIpHeader));
        // Found by fuzzing: an IPv6 payload length of 0xffff overflowed a u16 total.
        let mut big = vec![0u8; 12];
        big.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0xff, 0xff, 17, 64]);
        big.extend_from_slice(&[0u8; 32]);
        big.extend_from_slice(&[0, 1, 0, 2, 0, 8, 0, 0]);
        assert_eq!(decode(LinkType::Ethernet, &big).unwrap().len, 40 + 0xffff);
    }
}
