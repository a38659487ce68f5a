//! Link layers: where the network-layer packet starts in a captured frame, and which
//! protocol it is. Ethernet II with any number of 802.1Q/802.1ad tags, Linux cooked
//! capture v1 (SLL) and v2 (SLL2), raw IP, and BSD loopback (DLT_NULL).

use super::{be16, Skip};

/// EtherType of IPv4.
pub const ETH_P_IP: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88a8;
const ETH_P_QINQ1: u16 = 0x9100;

/// A capture's link type (the pcap LINKTYPE_ numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkType {
    /// LINKTYPE_NULL (0): a 4-byte host-order address family first.
    Null,
    /// LINKTYPE_ETHERNET (1).
    Ethernet,
    /// LINKTYPE_RAW (101, and DLT_RAW's 12/14): the IP header first.
    Raw,
    /// LINKTYPE_LINUX_SLL (113): 16-byte cooked header.
    LinuxSll,
    /// LINKTYPE_IPV4 (228).
    Ipv4,
    /// LINKTYPE_IPV6 (229).
    Ipv6,
    /// LINKTYPE_LINUX_SLL2 (276): 20-byte cooked header.
    LinuxSll2,
}

impl LinkType {
    /// From the number in a pcap header or pcapng IDB; `None` if unsupported.
    pub fn from_number(n: u32) -> Option<Self> {
        Some(match n {
            0 => LinkType::Null,
            1 => LinkType::Ethernet,
            12 | 14 | 101 => LinkType::Raw,
            113 => LinkType::LinuxSll,
            228 => LinkType::Ipv4,
            229 => LinkType::Ipv6,
            276 => LinkType::LinuxSll2,
            _ => return None,
        })
    }

    /// The IP packet in `frame` and its version (4 or 6).
    ///
    /// # Errors
    /// Truncated link header, or not IP.
    pub fn network(self, frame: &[u8]) -> Result<(u8, &[u8]), Skip> {
        fn by_type(t: u16, rest: &[u8]) -> Result<(u8, &[u8]), Skip> {
            match t {
                ETH_P_IP => Ok((4, rest)),
                ETH_P_IPV6 => Ok((6, rest)),
                _ => Err(Skip::NotIp),
            }
        }
        match self {
            LinkType::Ethernet => {
                let mut at = 12;
                let mut t = be16(frame, at).ok_or(Skip::Truncated)?;
                while matches!(t, ETH_P_8021Q | ETH_P_8021AD | ETH_P_QINQ1) {
                    at += 4;
                    t = be16(frame, at).ok_or(Skip::Truncated)?;
                }
                by_type(t, frame.get(at + 2..).ok_or(Skip::Truncated)?)
            }
            LinkType::LinuxSll => {
                let t = be16(frame, 14).ok_or(Skip::Truncated)?;
                by_type(t, frame.get(16..).ok_or(Skip::Truncated)?)
            }
            LinkType::LinuxSll2 => {
                let t = be16(frame, 0).ok_or(Skip::Truncated)?;
                by_type(t, frame.get(20..).ok_or(Skip::Truncated)?)
            }
            LinkType::Null => {
                let fam = frame.get(..4).ok_or(Skip::Truncated)?;
                let f = u32::from_ne_bytes([fam[0], fam[1], fam[2], fam[3]]);
                // AF_INET is 2 everywhere; AF_INET6 is 10, 24, 28 or 30 by OS; either
                // byte order, since the capture may come from another machine.
                let f = if f > 0xffff { f.swap_bytes() } else { f };
                match f {
                    2 => Ok((4, &frame[4..])),
                    10 | 24 | 28 | 30 => Ok((6, &frame[4..])),
                    _ => Err(Skip::NotIp),
                }
            }
            LinkType::Raw => match frame.first().map(|b| b >> 4) {
                Some(4) => Ok((4, frame)),
                Some(6) => Ok((6, frame)),
                Some(_) => Err(Skip::NotIp),
                None => Err(Skip::Truncated),
            },
            LinkType::Ipv4 => Ok((4, frame)),
            LinkType::Ipv6 => Ok((6, frame)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_ip_behind_every_link_header() {
        let ip = [0x45u8, 0, 0, 20];
        let mut eth = vec![0u8; 12];
        eth.extend_from_slice(&[0x81, 0, 0, 1, 0x88, 0xa8, 0, 2, 0x08, 0]);
        eth.extend_from_slice(&ip);
        assert_eq!(LinkType::Ethernet.network(&eth), Ok((4, &ip[..])));
        let mut sll = vec![0u8; 14];
        sll.extend_from_slice(&[0x86, 0xdd]);
        sll.extend_from_slice(&ip);
        assert_eq!(LinkType::LinuxSll.network(&sll).map(|x| x.0), Ok(6));
        let mut sll2 = vec![0x08, 0];
        sll2.extend_from_slice(&[0u8; 18]);
        sll2.extend_from_slice(&ip);
        assert_eq!(LinkType::LinuxSll2.network(&sll2), Ok((4, &ip[..])));
        let mut null = 2u32.to_le_bytes().to_vec();
        null.extend_from_slice(&ip);
        assert_eq!(LinkType::Null.network(&null), Ok((4, &ip[..])));
        let mut null_be = 2u32.to_be_bytes().to_vec();
        null_be.extend_from_slice(&ip);
        assert_eq!(LinkType::Null.network(&null_be), Ok((4, &ip[..])));
        assert_eq!(LinkType::Raw.network(&ip), Ok((4, &ip[..])));
        assert_eq!(LinkType::Ethernet.network(&eth[..13]), Err(Skip::Truncated));
        let mut arp = vec![0u8; 12];
        arp.extend_from_slice(&[0x08, 0x06, 0, 1]);
        assert_eq!(LinkType::Ethernet.network(&arp), Err(Skip::NotIp));
        assert_eq!(LinkType::from_number(147), None);
        assert_eq!(LinkType::from_number(276), Some(LinkType::LinuxSll2));
    }
}
