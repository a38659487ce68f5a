//! The one thing the emulator needs to know about a frame: its TCP or UDP ports, so a
//! blackout can drop one port only (seed 001 drops the test's data port). Any bytes
//! are accepted; what is not Ethernet/IP/TCP-or-UDP has no ports.

const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88a8;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// (source port, destination port) of a TCP or UDP packet in an Ethernet frame (802.1Q
/// and QinQ tags skipped; IPv4 non-first fragments and IPv6 fragments after the first
/// have no ports).
pub fn ports(frame: &[u8]) -> Option<(u16, u16)> {
    let mut at = 12;
    let mut ethertype = be16(frame, at)?;
    while ethertype == ETH_P_8021Q || ethertype == ETH_P_8021AD {
        at += 4;
        ethertype = be16(frame, at)?;
    }
    let l3 = frame.get(at + 2..)?;
    let (proto, l4) = match ethertype {
        ETH_P_IP => {
            let ihl = usize::from(l3.first()? & 0x0f) * 4;
            let frag_offset = be16(l3, 6)? & 0x1fff;
            if ihl < 20 || frag_offset != 0 {
                return None;
            }
            (*l3.get(9)?, l3.get(ihl..)?)
        }
        ETH_P_IPV6 => {
            let mut next = *l3.get(6)?;
            let mut rest = l3.get(40..)?;
            loop {
                match next {
                    // Hop-by-hop, routing, destination options: length in 8-byte units.
                    0 | 43 | 60 => {
                        let len = (usize::from(*rest.get(1)?) + 1) * 8;
                        next = *rest.first()?;
                        rest = rest.get(len..)?;
                    }
                    // Fragment header: only the first fragment carries the ports.
                    44 => {
                        if be16(rest, 2)? & 0xfff8 != 0 {
                            return None;
                        }
                        next = *rest.first()?;
                        rest = rest.get(8..)?;
                    }
                    _ => break,
                }
            }
            (next, rest)
        }
        _ => return None,
    };
    if proto == IPPROTO_TCP || proto == IPPROTO_UDP {
        Some((be16(l4, 0)?, be16(l4, 2)?))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::ports;

    fn eth(ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn ipv4(proto: u8, frag: u16, l4: &[u8]) -> Vec<u8> {
        let mut h = vec![0x45, 0, 0, 0, 0, 0];
        h.extend_from_slice(&frag.to_be_bytes());
        h.extend_from_slice(&[64, proto, 0, 0]);
        h.extend_from_slice(&[198, 18, 0, 1, 198, 18, 0, 2]);
        h.extend_from_slice(l4);
        h
    }

    #[test]
    fn finds_ports_in_ipv4_ipv6_and_vlan_frames() {
        let l4 = [0x13, 0x89, 0x9c, 0x40, 0, 0, 0, 0];
        assert_eq!(ports(&eth(0x0800, &ipv4(17, 0, &l4))), Some((5001, 40000)));
        // 802.1Q tag in front.
        let mut tagged = vec![0u8; 12];
        tagged.extend_from_slice(&[0x81, 0, 0, 5]);
        tagged.extend_from_slice(&eth(0x0800, &ipv4(6, 0, &l4))[12..]);
        assert_eq!(ports(&tagged), Some((5001, 40000)));
        // Non-first fragment, ICMP: no ports.
        assert_eq!(ports(&eth(0x0800, &ipv4(17, 0x0010, &l4))), None);
        assert_eq!(ports(&eth(0x0800, &ipv4(1, 0, &l4))), None);
        // IPv6 with a hop-by-hop header before TCP.
        let mut v6 = vec![0x60, 0, 0, 0, 0, 16, 0, 64];
        v6.extend_from_slice(&[0u8; 32]);
        v6.extend_from_slice(&[6, 0, 0, 0, 0, 0, 0, 0]);
        v6.extend_from_slice(&l4);
        assert_eq!(ports(&eth(0x86dd, &v6)), Some((5001, 40000)));
    }

    #[test]
    fn never_panics_on_any_prefix() {
        let l4 = [0x13, 0x89, 0x9c, 0x40];
        let f = eth(0x0800, &ipv4(6, 0, &l4));
        for cut in 0..f.len() {
            assert_eq!(ports(&f[..cut]), None);
        }
        assert_eq!(ports(&eth(0x0800, &[0x41; 30])), None);
    }
}
