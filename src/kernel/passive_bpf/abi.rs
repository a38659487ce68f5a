//! The records the programs and this process share through the maps and the ring
//! buffer, laid out as bpf/passive_rtt.bpf.c declares them (`repr(C)`, no padding).

use super::MAX_BOUNDS;

/// An address as the program keys it: the 128-bit address (IPv4 kept IPv4-mapped) as
/// its two halves, each a number, so that `(hi, lo)` orders as the address does.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RawAddr {
    /// Bits 127..64.
    pub hi: u64,
    /// Bits 63..0.
    pub lo: u64,
}

// SAFETY: repr(C), two u64, no padding; any bit pattern is valid.
unsafe impl aya::Pod for RawAddr {}

impl RawAddr {
    /// From the address as one number.
    pub fn from_u128(a: u128) -> Self {
        Self {
            hi: (a >> 64) as u64,
            lo: a as u64,
        }
    }

    /// The address as one number.
    pub fn to_u128(self) -> u128 {
        (u128::from(self.hi) << 64) | u128::from(self.lo)
    }
}

/// A connection as the program keys it: its lower endpoint first.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RawFlowKey {
    /// The lower endpoint's address (address, then port, order).
    pub a: RawAddr,
    /// The higher endpoint's address.
    pub b: RawAddr,
    /// The lower endpoint's port.
    pub a_port: u16,
    /// The higher endpoint's port.
    pub b_port: u16,
    /// Zero.
    pub pad: u32,
}

// SAFETY: repr(C): 32 bytes of addresses, two u16 and a u32, no padding.
unsafe impl aya::Pod for RawFlowKey {}

/// The key of one aggregated histogram.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RawAggKey {
    /// The answering host's address, masked to `prefix_len` bits (of the mapped
    /// address's last 32 for IPv4).
    pub prefix: RawAddr,
    /// The prefix's length as the user gave it (IPv4: 0–32, IPv6: 0–128).
    pub prefix_len: u8,
    /// 0 TS, 1 seq/ACK.
    pub method: u8,
    /// 0 the network, 1 the capture host itself.
    pub place: u8,
    /// The generation the samples came in ([`PassiveBpf::set_generation`]).
    pub generation: u8,
    /// Zero.
    pub pad: [u8; 4],
}

// SAFETY: repr(C): 16 + 3 + 5 bytes, no padding.
unsafe impl aya::Pod for RawAggKey {}

/// One aggregated histogram as the program keeps it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RawAgg {
    /// Samples.
    pub count: u64,
    /// Their sum, ns.
    pub sum_ns: u64,
    /// The smallest sample, bitwise inverted (0: none yet).
    pub min_inv: u64,
    /// The largest sample, ns.
    pub max_ns: u64,
    /// Samples in (bounds[k-1], bounds[k]]; the one after the last bound holds
    /// those above every bound.
    pub buckets: [u64; MAX_BOUNDS + 1],
}

// SAFETY: repr(C), u64 fields and an array of u64; any bit pattern is valid.
unsafe impl aya::Pod for RawAgg {}

/// The program's counters (`struct counters`), summed over CPUs.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RawCounters {
    /// Frames the programs saw.
    pub packets: u64,
    /// TCP segments that passed the filter.
    pub tcp: u64,
    /// IP packets of another transport.
    pub not_tcp: u64,
    /// TCP segments the filter left out.
    pub filtered: u64,
    /// Skipped: shorter than their headers say.
    pub truncated: u64,
    /// Skipped: not IPv4 or IPv6.
    pub not_ip: u64,
    /// Skipped: an impossible IP header.
    pub bad_ip_header: u64,
    /// Skipped: fragments.
    pub fragment: u64,
    /// Skipped: an impossible TCP data offset.
    pub bad_tcp_header: u64,
    /// TCP packets without the timestamps option.
    pub no_timestamps: u64,
    /// Timestamps the TS rule must ignore.
    pub unusable_timestamps: u64,
    /// `--ts-rule pping`: packets of a direction whose reverse was not seen yet.
    pub one_way: u64,
    /// TS samples.
    pub samples_ts: u64,
    /// Seq/ACK samples.
    pub samples_seq: u64,
    /// Flows entered in the table.
    pub flows_created: u64,
    /// Flows forgotten after the idle timeout.
    pub flows_expired: u64,
    /// Flows removed as finished.
    pub flows_closed: u64,
    /// A SYN on a key whose previous connection was still held.
    pub flows_reused: u64,
    /// New flows not tracked: the flow map was full.
    pub flows_full: u64,
    /// TSvals or segments not timed: the pending map was full.
    pub pending_full: u64,
    /// Samples not aggregated: the aggregate map was full.
    pub aggregates_full: u64,
    /// Samples or finished flows lost: the ring buffer was full.
    pub events_lost: u64,
    /// TSvals or segments not timed: the flow direction's rate limit.
    pub rate_limited: u64,
    /// Samples not aggregated: the answering host is not watched.
    pub unwatched: u64,
    /// Times the bounded per-flow state stood in for the user-space engine's queues
    /// less exactly (a retransmission or SACK range merged with others, a gap not
    /// kept): from then on that flow may give fewer samples, never others.
    pub approximated: u64,
}

// SAFETY: repr(C), 25 u64, no padding.
unsafe impl aya::Pod for RawCounters {}

impl std::ops::AddAssign for RawCounters {
    fn add_assign(&mut self, o: Self) {
        let a: &mut [u64; 25] = bytemuck_u64s_mut(self);
        let b: &[u64; 25] = bytemuck_u64s(&o);
        for (x, y) in a.iter_mut().zip(b) {
            *x += y;
        }
    }
}

fn bytemuck_u64s(c: &RawCounters) -> &[u64; 25] {
    // SAFETY: RawCounters is repr(C) with exactly 25 u64 fields and no padding.
    unsafe { &*(c as *const RawCounters).cast::<[u64; 25]>() }
}

fn bytemuck_u64s_mut(c: &mut RawCounters) -> &mut [u64; 25] {
    // SAFETY: as above, and the borrow is unique.
    unsafe { &mut *(c as *mut RawCounters).cast::<[u64; 25]>() }
}
