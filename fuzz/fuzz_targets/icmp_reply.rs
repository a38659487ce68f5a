//! ICMP datagrams from the network, as a ping socket hands them over: the parser and
//! the pinger never panic, and what the parser accepts is what the bytes say (a reply
//! of the family's type, an error quoting an echo request).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rttlab::probe::ping::{PingSettings, Pinger};
use rttlab::wire::icmp::{self, Message};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Mutex;
use std::time::Instant;

/// One pinger per socket kind and family, each with three requests out, fed every input.
static PINGERS: Mutex<Vec<Pinger>> = Mutex::new(Vec::new());

fuzz_target!(|data: &[u8]| {
    let Some((&flags, datagram)) = data.split_first() else {
        return;
    };
    let (v6, raw) = (flags & 1 == 1, flags & 2 == 2);
    let icmp_bytes = if raw && !v6 {
        match icmp::ipv4_head(datagram) {
            Ok(head) => head.icmp,
            Err(_) => datagram,
        }
    } else {
        datagram
    };
    match icmp::message(icmp_bytes, v6) {
        Ok(Message::Reply(echo)) => {
            assert_eq!(echo.kind(), if v6 { 129 } else { 0 });
            assert_eq!(echo.seq(), u16::from_be_bytes([icmp_bytes[6], icmp_bytes[7]]));
        }
        Ok(Message::Error { kind, request, .. }) => {
            assert_eq!(kind, icmp_bytes[0]);
            assert_eq!(request.kind(), if v6 { 128 } else { 8 });
        }
        Err(_) => {}
    }
    let mut pingers = PINGERS.lock().unwrap();
    if pingers.is_empty() {
        let now = Instant::now();
        for i in 0..4u8 {
            let target = if i & 1 == 1 {
                IpAddr::V6(Ipv6Addr::LOCALHOST)
            } else {
                IpAddr::V4(Ipv4Addr::LOCALHOST)
            };
            let mut settings = PingSettings::new(target);
            settings.preload = 3;
            let mut p = Pinger::new(&settings, i & 2 == 2, 0x1234, now);
            while p.poll_transmit(now).is_some() {
                p.on_sent(0, now);
            }
            pingers.push(p);
        }
    }
    let p = &mut pingers[usize::from(flags & 3)];
    let _ = p.on_datagram(Instant::now(), datagram, 1_000, IpAddr::V4(Ipv4Addr::LOCALHOST), None);
    let _ = p.poll_timeout(Instant::now());
});
