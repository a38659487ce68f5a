//! pcap and pcapng files: the reader never panics or allocates without bound; every
//! packet it lends fits its file; the decoder takes whatever it lends.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rttlab::capture::CaptureReader;
use rttlab::wire::{decode, LinkType};

fuzz_target!(|data: &[u8]| {
    let Ok(mut r) = CaptureReader::new(data) else {
        return;
    };
    for _ in 0..10_000 {
        match r.next_packet() {
            Ok(Some(p)) => {
                assert!(p.data.len() <= data.len());
                if let Some(l) = LinkType::from_number(p.link) {
                    let _ = decode(l, p.data);
                }
            }
            _ => break,
        }
    }
});
