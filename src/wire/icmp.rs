//! ICMP (RFC 792) and ICMPv6 (RFC 4443) echo messages, and the errors that quote an
//! echo request, as an ICMP socket hands them over: a raw IPv4 socket with the IP
//! header in front, every other socket from the ICMP header on. Like the TCP view, a
//! view borrows the bytes; a datagram that is not an echo reply or an error about an
//! echo says why ([`Unusable`]), for the caller to count.

use super::be16;

/// ICMP echo reply (RFC 792).
pub const ECHO_REPLY_V4: u8 = 0;
/// ICMP echo request (RFC 792).
pub const ECHO_REQUEST_V4: u8 = 8;
/// ICMPv6 echo request (RFC 4443 §4.1).
pub const ECHO_REQUEST_V6: u8 = 128;
/// ICMPv6 echo reply (RFC 4443 §4.2).
pub const ECHO_REPLY_V6: u8 = 129;

/// Why a datagram from an ICMP socket is neither an echo reply nor an error about an
/// echo request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unusable {
    /// Shorter than its headers.
    Truncated,
    /// A raw IPv4 socket's IP header that is not one (version, header length).
    BadIpHeader,
    /// Another ICMP message: a request, a redirect, router or neighbour discovery, or
    /// an error quoting something other than an echo request.
    OtherMessage,
}

/// An echo request or reply: the 8-byte header (type, code, checksum, identifier,
/// sequence number) and the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Echo<'a>(&'a [u8]);

impl<'a> Echo<'a> {
    /// View `icmp` (from the ICMP header on) as an echo message; the type is not checked.
    ///
    /// # Errors
    /// Shorter than the 8-byte header.
    #[inline]
    pub fn new(icmp: &'a [u8]) -> Result<Self, Unusable> {
        if icmp.len() < 8 {
            return Err(Unusable::Truncated);
        }
        Ok(Self(icmp))
    }

    /// ICMP type.
    #[inline]
    pub fn kind(&self) -> u8 {
        self.0[0]
    }

    /// ICMP code.
    #[inline]
    pub fn code(&self) -> u8 {
        self.0[1]
    }

    /// The identifier (a datagram socket's: its bound port).
    #[inline]
    pub fn ident(&self) -> u16 {
        u16::from_be_bytes([self.0[4], self.0[5]])
    }

    /// The sequence number.
    #[inline]
    pub fn seq(&self) -> u16 {
        u16::from_be_bytes([self.0[6], self.0[7]])
    }

    /// The bytes after the header (an error quotes only the first 8 of the request, so
    /// a quoted request's payload is empty or cut short).
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.0[8..]
    }
}

/// What an ICMP socket received that concerns echoes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message<'a> {
    /// An echo reply.
    Reply(Echo<'a>),
    /// An error about an echo request, which it quotes (RFC 792's "Internet Header + 64
    /// bits of Original Data Datagram"; RFC 4443 §2.4 (c)).
    Error {
        /// The error's ICMP type (ICMP: 3, 4, 5, 11, 12; ICMPv6: below 128).
        kind: u8,
        /// The error's code.
        code: u8,
        /// The request it quotes: its header, with whatever of the payload came along.
        request: Echo<'a>,
    },
}

/// An IPv4 header as a raw socket delivers it in front of the ICMP message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Head<'a> {
    /// Time to live.
    pub ttl: u8,
    /// The options after the fixed 20 bytes (record route, timestamps), up to 40.
    pub options: &'a [u8],
    /// The ICMP message after the header.
    pub icmp: &'a [u8],
}

/// Split a raw IPv4 socket's datagram into its IP header and the ICMP message.
///
/// # Errors
/// Not version 4, a header length below 20 bytes, or shorter than its header.
#[inline]
pub fn ipv4_head(datagram: &[u8]) -> Result<Ipv4Head<'_>, Unusable> {
    let first = *datagram.first().ok_or(Unusable::Truncated)?;
    let ihl = usize::from(first & 0x0f) * 4;
    if first >> 4 != 4 || ihl < 20 {
        return Err(Unusable::BadIpHeader);
    }
    let header = datagram.get(..ihl).ok_or(Unusable::Truncated)?;
    Ok(Ipv4Head {
        ttl: header[8],
        options: &header[20..],
        icmp: &datagram[ihl..],
    })
}

/// An ICMP (`v6`: ICMPv6) message, from its header on, as an echo reply or an error
/// quoting an echo request.
///
/// # Errors
/// Truncated headers (its own, or the quoted packet's up to the echo header); any other
/// message.
#[inline]
pub fn message(icmp: &[u8], v6: bool) -> Result<Message<'_>, Unusable> {
    let kind = *icmp.first().ok_or(Unusable::Truncated)?;
    let code = *icmp.get(1).ok_or(Unusable::Truncated)?;
    let (reply, request) = if v6 {
        (ECHO_REPLY_V6, ECHO_REQUEST_V6)
    } else {
        (ECHO_REPLY_V4, ECHO_REQUEST_V4)
    };
    if kind == reply {
        return Echo::new(icmp).map(Message::Reply);
    }
    if !is_error(kind, v6) {
        return Err(Unusable::OtherMessage);
    }
    // The quoted packet starts 8 bytes in: its IP header, then the echo's header.
    let quoted = icmp.get(8..).ok_or(Unusable::Truncated)?;
    let echo = if v6 {
        // A fixed IPv6 header; an extension header in between is not followed.
        let next = *quoted.get(6).ok_or(Unusable::Truncated)?;
        if next != super::net::ICMPV6 {
            return Err(Unusable::OtherMessage);
        }
        quoted.get(40..).ok_or(Unusable::Truncated)?
    } else {
        let ihl = usize::from(quoted.first().ok_or(Unusable::Truncated)? & 0x0f) * 4;
        let proto = *quoted.get(9).ok_or(Unusable::Truncated)?;
        if proto != super::net::ICMP || ihl < 20 {
            return Err(Unusable::OtherMessage);
        }
        quoted.get(ihl..).ok_or(Unusable::Truncated)?
    };
    let echo = Echo::new(echo)?;
    if echo.kind() != request {
        return Err(Unusable::OtherMessage);
    }
    Ok(Message::Error {
        kind,
        code,
        request: echo,
    })
}

/// The error messages, which quote the packet that drew them: ICMP's destination
/// unreachable, source quench, redirect, time exceeded and parameter problem (RFC 792);
/// every ICMPv6 type below 128 (RFC 4443 §2.1).
#[inline]
fn is_error(kind: u8, v6: bool) -> bool {
    if v6 {
        kind < 128
    } else {
        matches!(kind, 3 | 4 | 5 | 11 | 12)
    }
}

/// Write an echo request into `packet` (8 header bytes, then the payload): type,
/// identifier, sequence number, the payload from `payload_byte(i)`, and for ICMP the
/// checksum (ICMPv6's covers a pseudo-header the kernel fills in, RFC 4443 §2.3).
pub fn write_request(
    packet: &mut [u8],
    v6: bool,
    ident: u16,
    seq: u16,
    payload_byte: impl Fn(usize) -> u8,
) {
    packet[0] = if v6 { ECHO_REQUEST_V6 } else { ECHO_REQUEST_V4 };
    packet[1] = 0;
    packet[2..4].fill(0);
    packet[4..6].copy_from_slice(&ident.to_be_bytes());
    packet[6..8].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in packet[8..].iter_mut().enumerate() {
        *b = payload_byte(i);
    }
    if !v6 {
        let c = checksum(packet);
        packet[2..4].copy_from_slice(&c.to_be_bytes());
    }
}

/// The Internet checksum (RFC 1071): the ones' complement of the ones' complement sum
/// of the 16-bit words, an odd last byte padded with zero.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    let mut sum = 0u32;
    for c in data.chunks(2) {
        sum += u32::from(be16(c, 0).unwrap_or(u16::from(c[0]) << 8));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_matches_rfc1071_example() {
        // RFC 1071 §3 example words 0001 f203 f4f5 f6f7 sum to ddf2, complement 220d.
        assert_eq!(
            checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0x220d
        );
        // An odd byte is padded on the right: 0x0100 alone.
        assert_eq!(checksum(&[0x01]), !0x0100);
    }

    /// Witness: a request written here sums to zero with its checksum, as RFC 1071 §1
    /// says a receiver checks it.
    #[test]
    fn a_written_request_checks_out() {
        let mut p = [0u8; 8 + 5];
        write_request(&mut p, false, 0x1234, 7, |i| i as u8 * 3);
        assert_eq!(checksum(&p), 0);
        assert_eq!((p[0], p[4], p[5], p[7], p[12]), (8, 0x12, 0x34, 7, 12));
        write_request(&mut p, true, 0x1234, 7, |_| 0xab);
        assert_eq!((p[0], p[2], p[3], p[8]), (128, 0, 0, 0xab));
    }

    /// Witness: RFC 792's layout, built by hand: an IP header, ICMP type 3 code 1, the
    /// quoted IP header and the first 8 bytes of an echo request.
    #[test]
    fn errors_quoting_a_request_give_it_back() {
        let mut p = vec![0x45u8];
        p.extend_from_slice(&[0; 7]);
        p.push(61);
        p.extend_from_slice(&[0; 11]);
        p.extend_from_slice(&[3, 1, 0, 0, 0, 0, 0, 0]);
        let mut quoted = vec![0x45u8, 0, 0, 0, 0, 0, 0, 0, 64, 1];
        quoted.extend_from_slice(&[0; 10]);
        quoted.extend_from_slice(&[8, 0, 0, 0, 0x12, 0x34, 0, 9]);
        p.extend_from_slice(&quoted);
        let head = ipv4_head(&p).unwrap();
        assert_eq!((head.ttl, head.options.len(), head.icmp.len()), (61, 0, 36));
        let Ok(Message::Error {
            kind: 3,
            code: 1,
            request,
        }) = message(head.icmp, false)
        else {
            panic!("{:?}", message(head.icmp, false));
        };
        assert_eq!((request.ident(), request.seq()), (0x1234, 9));
        let mut other = p.clone();
        other[20 + 8 + 20] = 0;
        assert_eq!(message(&other[20..], false), Err(Unusable::OtherMessage));
        assert_eq!(message(&p[20..30], false), Err(Unusable::Truncated));
        p[20] = 8;
        assert_eq!(message(&p[20..], false), Err(Unusable::OtherMessage));
        // ICMPv6 destination unreachable (1, 3) quoting a 40-byte IPv6 header.
        let mut q = vec![1u8, 3, 0, 0, 0, 0, 0, 0];
        let mut ip6 = vec![0x60u8, 0, 0, 0, 0, 8, 58, 64];
        ip6.extend_from_slice(&[0; 32]);
        q.extend_from_slice(&ip6);
        q.extend_from_slice(&[128, 0, 0, 0, 0x12, 0x34, 0, 2]);
        let Ok(Message::Error { request, .. }) = message(&q, true) else {
            panic!("{:?}", message(&q, true));
        };
        assert_eq!(request.seq(), 2);
        q[8 + 6] = 17;
        assert_eq!(message(&q, true), Err(Unusable::OtherMessage), "quotes UDP");
    }

    #[test]
    fn replies_and_headers_that_are_not() {
        let mut p = vec![0x46u8];
        p.extend_from_slice(&[0; 19]);
        p.extend_from_slice(&[1, 2, 3, 4]);
        p.extend_from_slice(&[0, 0, 0, 0, 0x12, 0x34, 0, 7, 0xaa]);
        let head = ipv4_head(&p).unwrap();
        assert_eq!(head.options, &[1, 2, 3, 4]);
        let Ok(Message::Reply(r)) = message(head.icmp, false) else {
            panic!()
        };
        assert_eq!((r.ident(), r.seq(), r.payload()), (0x1234, 7, &[0xaa][..]));
        assert_eq!(message(&[129, 0, 0, 0], true), Err(Unusable::Truncated));
        assert_eq!(message(&[135, 0, 0, 0], true), Err(Unusable::OtherMessage));
        assert_eq!(ipv4_head(&[0x44; 30]), Err(Unusable::BadIpHeader));
        assert_eq!(ipv4_head(&[0x65; 30]), Err(Unusable::BadIpHeader));
        assert_eq!(ipv4_head(&[0x46; 22]), Err(Unusable::Truncated));
        assert_eq!(ipv4_head(&[]), Err(Unusable::Truncated));
    }
}
