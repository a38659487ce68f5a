//! The in-kernel engine's ring-buffer records (`struct ev_sample`, `struct ev_flow` in
//! bpf/passive_rtt.bpf.c), decoded without trusting their length: a record of an
//! unknown kind or a wrong size is skipped and counted, never read past.

use super::super::flow::{Endpoint, FlowEnd, FlowKey, HalfEnd};
use super::super::Method;
use crate::kernel::passive_bpf::{RawAddr, RawFlowKey};

/// `EV_SAMPLE`.
const KIND_SAMPLE: u8 = 1;
/// `EV_FLOW`.
const KIND_FLOW: u8 = 2;
/// `sizeof(struct ev_sample)` (checked against the C source's `_Static_assert`).
pub const SAMPLE_LEN: usize = 72;
/// `sizeof(struct ev_flow)`.
pub const FLOW_LEN: usize = 160;
/// `sizeof(struct flow_key)`.
pub const KEY_LEN: usize = 40;

/// One record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// A sample: the half `here`'s sender closed a loop.
    Sample {
        /// How it was measured.
        method: Method,
        /// The closing packet's time, CLOCK_MONOTONIC ns.
        ts_ns: u64,
        /// The RTT, ns.
        rtt_ns: u64,
        /// The smallest so far by this method to this host in this flow, ns.
        min_ns: u64,
        /// The flow.
        key: FlowKey,
        /// 0: the lower endpoint closed the loop; 1: the higher.
        here: usize,
    },
    /// A flow left the table; its first and last times are CLOCK_MONOTONIC.
    Flow(FlowEnd),
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_ne_bytes(w)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

/// A `struct flow_key` at the start of `b` (at least [`KEY_LEN`] bytes).
pub fn key_at(b: &[u8]) -> FlowKey {
    let a = RawAddr {
        hi: u64_at(b, 0),
        lo: u64_at(b, 8),
    };
    let z = RawAddr {
        hi: u64_at(b, 16),
        lo: u64_at(b, 24),
    };
    FlowKey {
        lo: Endpoint::from_raw(a.to_u128(), u16_at(b, 32)),
        hi: Endpoint::from_raw(z.to_u128(), u16_at(b, 34)),
    }
}

/// The program's key of `k`.
pub fn raw_key(k: &FlowKey) -> RawFlowKey {
    RawFlowKey {
        a: RawAddr::from_u128(k.lo.addr),
        b: RawAddr::from_u128(k.hi.addr),
        a_port: k.lo.port,
        b_port: k.hi.port,
        pad: 0,
    }
}

fn half_at(b: &[u8]) -> HalfEnd {
    let n = |i: usize| u64::from(u32_at(b, 16 + 4 * i));
    HalfEnd {
        packets: u64_at(b, 0),
        bytes: u64_at(b, 8),
        retransmissions: n(0),
        spurious: n(1),
        out_of_order: n(2),
        karn_skipped: n(3),
        sacked_skipped: n(4),
        sack_timed: n(5),
        untracked: n(6),
        rate_limited: n(7),
    }
}

/// Decode one record; `None` for one of another kind or size (counted by the caller).
pub fn decode(b: &[u8]) -> Option<Record> {
    match *b.first()? {
        KIND_SAMPLE if b.len() == SAMPLE_LEN => {
            let method = match b[1] {
                0 => Method::Ts,
                1 => Method::Seq,
                _ => return None,
            };
            Some(Record::Sample {
                method,
                here: usize::from(b[2] & 1),
                ts_ns: u64_at(b, 8),
                rtt_ns: u64_at(b, 16),
                min_ns: u64_at(b, 24),
                key: key_at(&b[32..]),
            })
        }
        KIND_FLOW if b.len() == FLOW_LEN => Some(Record::Flow(FlowEnd {
            first_ns: u64_at(b, 8),
            last_ns: u64_at(b, 16),
            key: key_at(&b[24..]),
            halves: [half_at(&b[64..112]), half_at(&b[112..160])],
        })),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes_in_source() -> Vec<(String, usize)> {
        let src = include_str!("../../../bpf/passive_rtt.bpf.c");
        src.lines()
            .filter_map(|l| {
                let rest = l.trim().strip_prefix("_Static_assert(sizeof(struct ")?;
                let (name, rest) = rest.split_once(')')?;
                let n = rest.trim().strip_prefix("==")?.trim();
                let n: String = n.chars().take_while(char::is_ascii_digit).collect();
                Some((name.to_owned(), n.parse().ok()?))
            })
            .collect()
    }

    /// Witness: the C source's own compile-time assertions of its records' sizes.
    #[test]
    fn the_record_sizes_are_the_programs() {
        let sizes = sizes_in_source();
        let of = |n: &str| sizes.iter().find(|(x, _)| x == n).map(|x| x.1);
        assert_eq!(of("ev_sample"), Some(SAMPLE_LEN));
        assert_eq!(of("ev_flow"), Some(FLOW_LEN));
        assert_eq!(of("flow_key"), Some(KEY_LEN));
        assert_eq!(of("flow_key"), Some(std::mem::size_of::<RawFlowKey>()));
        assert_eq!(
            of("counters"),
            Some(std::mem::size_of::<crate::kernel::passive_bpf::RawCounters>())
        );
        assert_eq!(
            of("agg"),
            Some(std::mem::size_of::<crate::kernel::passive_bpf::RawAgg>())
        );
        assert_eq!(
            of("agg_key"),
            Some(std::mem::size_of::<crate::kernel::passive_bpf::RawAggKey>())
        );
    }

    /// Witness: a sample record written out by hand in the C struct's layout.
    #[test]
    fn a_sample_record_decodes_field_by_field() {
        let mut b = vec![0u8; SAMPLE_LEN];
        b[0] = 1;
        b[1] = 1;
        b[2] = 1;
        b[8..16].copy_from_slice(&7u64.to_ne_bytes());
        b[16..24].copy_from_slice(&1500u64.to_ne_bytes());
        b[24..32].copy_from_slice(&900u64.to_ne_bytes());
        // 10.0.0.1:40000 (mapped) then 10.0.0.2:80.
        b[40..48].copy_from_slice(&0xffff_0a00_0001u64.to_ne_bytes());
        b[56..64].copy_from_slice(&0xffff_0a00_0002u64.to_ne_bytes());
        b[64..66].copy_from_slice(&40000u16.to_ne_bytes());
        b[66..68].copy_from_slice(&80u16.to_ne_bytes());
        let Some(Record::Sample {
            method,
            ts_ns,
            rtt_ns,
            min_ns,
            key,
            here,
        }) = decode(&b)
        else {
            panic!("not a sample")
        };
        assert_eq!(
            (method, ts_ns, rtt_ns, min_ns, here),
            (Method::Seq, 7, 1500, 900, 1)
        );
        assert_eq!(key.lo.to_string(), "10.0.0.1:40000");
        assert_eq!(key.hi.to_string(), "10.0.0.2:80");
        assert_eq!(raw_key(&key).a.lo, 0xffff_0a00_0001);
    }

    #[test]
    fn records_of_another_size_or_kind_are_refused() {
        assert_eq!(decode(&[]), None);
        assert_eq!(decode(&[1; 71]), None);
        assert_eq!(decode(&[2; 72]), None);
        assert_eq!(decode(&[9; 160]), None);
        let mut b = vec![0u8; SAMPLE_LEN];
        b[0] = 1;
        b[1] = 7;
        assert_eq!(decode(&b), None, "an unknown method");
    }
}
