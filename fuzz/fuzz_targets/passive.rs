//! The passive engines on arbitrary packets: a stream of records, each a 2-byte
//! length, a 4-byte time step (µs) and that many bytes of frame, fed to an analyzer
//! with both engines and the sampler. Nothing panics; every sample is consistent.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rttlab::passive::sampler::SamplerConfig;
use rttlab::passive::{Analyzer, Config, Sample, Sink};
use rttlab::wire::LinkType;

struct Check;

impl Sink for Check {
    fn sample(&mut self, s: &Sample) {
        assert!(s.min_ns <= s.rtt_ns);
        assert!(
            s.rtt_ns <= 10_000_000_000,
            "older than max_age: {}",
            s.rtt_ns
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut rest)) = data.split_first() else {
        return;
    };
    let mut a = Analyzer::new(Config {
        ts_record: if mode & 1 == 0 {
            rttlab::passive::ts::Record::Data
        } else {
            rttlab::passive::ts::Record::Any
        },
        seq_rules: if mode & 2 == 0 {
            rttlab::passive::seq::Rules::RTTLAB
        } else {
            rttlab::passive::seq::Rules::WIRESHARK
        },
        max_flows: 4,
        idle_ns: 50_000_000,
        sampler: Some(SamplerConfig {
            one_in: 1 + u32::from(mode >> 4),
            period_ns: 1_000_000,
            seed: 1,
        }),
        ..Config::default()
    });
    let link = if mode & 4 == 0 {
        LinkType::Ethernet
    } else {
        LinkType::Raw
    };
    let mut now = 1_000_000_000u64;
    while rest.len() >= 6 {
        let len = usize::from(u16::from_le_bytes([rest[0], rest[1]]));
        let step = u32::from_le_bytes([rest[2], rest[3], rest[4], rest[5]]);
        rest = &rest[6..];
        let frame = &rest[..len.min(rest.len())];
        rest = &rest[frame.len()..];
        now = now.saturating_add(u64::from(step) * 1000);
        a.packet(now, link, frame, &mut Check);
    }
    a.finish(&mut Check);
    let _ = a.sampler_periods();
});
