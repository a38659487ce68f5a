//! ICMP datagrams from the network: the reply parser never panics, and a reply it
//! accepts carries the identifier asked for (raw sockets) and a sequence number.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rttlab::probe::ping::parse_reply;

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let (flags, ident, pkt) = (
        data[0],
        u16::from(data[1]) << 8 | u16::from(data[2]),
        &data[3..],
    );
    let (v6, raw) = (flags & 1 == 1, flags & 2 == 2);
    let size = usize::from(flags >> 2);
    if let Some(r) = parse_reply(pkt, v6, raw, ident, size) {
        let icmp = if !v6 && raw {
            &pkt[usize::from(pkt[0] & 0x0f) * 4..]
        } else {
            pkt
        };
        assert_eq!(icmp[0], if v6 { 129 } else { 0 });
        if raw {
            assert_eq!(u16::from_be_bytes([icmp[4], icmp[5]]), ident);
        }
        assert_eq!(u16::from_be_bytes([icmp[6], icmp[7]]), r.seq);
        assert!(!r.intact || icmp.len() - 8 == size);
    }
});
