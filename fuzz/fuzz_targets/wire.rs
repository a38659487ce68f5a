//! Captured frames of every link type: the decoder never panics; what it accepts is
//! consistent (TCP data offset inside the bytes, options that parse to the end).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rttlab::wire::{decode, LinkType, Transport};

fuzz_target!(|data: &[u8]| {
    let Some((&which, frame)) = data.split_first() else {
        return;
    };
    let numbers = [0u32, 1, 101, 113, 228, 229, 276];
    let Some(link) = LinkType::from_number(numbers[usize::from(which) % numbers.len()]) else {
        return;
    };
    if let Ok(ip) = decode(link, frame) {
        if let Transport::Tcp(t) = ip.transport {
            assert!(t.payload().len() <= frame.len());
            for o in t.options() {
                let _ = o;
            }
            let _ = t.timestamps();
        }
        let _ = ip.ports();
    }
});
