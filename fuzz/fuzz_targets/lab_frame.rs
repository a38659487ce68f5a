//! Frames the lab's hosts send: the emulator's port classifier never panics, and a
//! frame it finds ports in is Ethernet carrying IPv4 or IPv6 (after any VLAN tags).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rttlab::lab::frame::ports;

fuzz_target!(|data: &[u8]| {
    if ports(data).is_some() {
        let mut at = 12;
        while matches!(&data[at..at + 2], [0x81, 0x00] | [0x88, 0xa8]) {
            at += 4;
        }
        assert!(matches!(&data[at..at + 2], [0x08, 0x00] | [0x86, 0xdd]));
    }
});
