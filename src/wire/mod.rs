//! Zero-copy views of packet headers (smoltcp's pattern: a view borrows the bytes and
//! reads fields on demand). Nothing here allocates or panics on any input; a packet
//! that cannot be used says why ([`Skip`]), and callers count the reasons.

pub mod icmp;
pub mod link;
pub mod net;
pub mod tcp;

pub use link::LinkType;
pub use net::{decode, Ip, Transport};
pub use tcp::{Tcp, TcpOption};

/// Why a packet was not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Skip {
    /// Shorter than its headers say (or than the capture's snap length kept).
    Truncated,
    /// A link type this decoder does not know.
    UnknownLinkType,
    /// Not IPv4 or IPv6 (ARP, LLDP, ...).
    NotIp,
    /// An IP header that is not valid (version, header length).
    BadIpHeader,
    /// A fragment (only whole packets carry transport headers worth matching).
    Fragment,
    /// A TCP header whose data offset is impossible.
    BadTcpHeader,
}

impl Skip {
    /// Every reason, in counter order.
    pub const ALL: [Skip; 6] = [
        Skip::Truncated,
        Skip::UnknownLinkType,
        Skip::NotIp,
        Skip::BadIpHeader,
        Skip::Fragment,
        Skip::BadTcpHeader,
    ];

    /// Index into a counter array.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Big-endian u16 at `at`, if there.
#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Big-endian u32 at `at`, if there.
#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 4)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}
