//! The flow table: TCP connections by 5-tuple, both directions in one entry, with an
//! idle timeout and a cap that evicts the least recently seen flows.
//!
//! Memory is O(active flows): an entry is [`Flow`] (a fixed ~300 bytes) plus what its
//! engines hold outstanding, each capped ([`crate::passive::ts::TsHalf::CAP`],
//! [`crate::passive::seq::SeqHalf::CAP`]); closed (RST, or both FINs acknowledged)
//! and idle flows are dropped as the capture clock passes them.

use super::seq::SeqHalf;
use super::ts::TsHalf;
use std::collections::HashMap;

/// The passive engines' maps, looked up per packet or per sample: foldhash, not std's
/// SipHash (3–4 % of a TS run with 250 000 samples went to SipHash in the summaries).
/// Nothing reaches the output in a map's order: rows are sorted first.
pub type FastMap<K, V> = HashMap<K, V, foldhash::fast::FixedState>;
use std::net::{IpAddr, Ipv6Addr};

/// One end of a connection. IPv4 addresses are kept IPv4-mapped, so one key type
/// serves both families and compares as two integers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    /// The IP address as one integer: IPv6, or IPv4-mapped (`::ffff:a.b.c.d`).
    pub addr: u128,
    /// The TCP port.
    pub port: u16,
}

impl Endpoint {
    /// The endpoint `addr`:`port`, an IPv4 address kept IPv4-mapped.
    pub fn new(addr: IpAddr, port: u16) -> Self {
        let v6 = match addr {
            IpAddr::V4(a) => a.to_ipv6_mapped(),
            IpAddr::V6(a) => a,
        };
        Self {
            addr: u128::from(v6),
            port,
        }
    }

    /// From an address already in this form (see [`crate::wire::net::TcpSegment`]).
    #[inline]
    pub fn from_raw(addr: u128, port: u16) -> Self {
        Self { addr, port }
    }

    /// The address as it was on the wire (IPv4 again for mapped addresses).
    pub fn ip(&self) -> IpAddr {
        Ipv6Addr::from(self.addr).to_canonical()
    }

    /// `v4:port` or `[v6]:port`: unambiguous, as rttlab's tables and JSON print
    /// endpoints (`Display` is pping's bracketless form, for pping's formats only).
    pub fn socket_addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::new(self.ip(), self.port)
    }
}

impl std::fmt::Display for Endpoint {
    /// `addr:port`, as pping prints it (IPv6 without brackets).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.ip(), self.port)
    }
}

/// A connection's key: its two endpoints, lower first, so both directions find the
/// same entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// The lower endpoint (by address, then port): the sender of half 0.
    pub lo: Endpoint,
    /// The higher endpoint: the sender of half 1.
    pub hi: Endpoint,
}

impl FlowKey {
    /// The key of a packet from `src` to `dst`, and which half it travels in
    /// (0: from `lo`, 1: from `hi`).
    pub fn of(src: Endpoint, dst: Endpoint) -> (Self, usize) {
        if src <= dst {
            (Self { lo: src, hi: dst }, 0)
        } else {
            (Self { lo: dst, hi: src }, 1)
        }
    }

    /// The sender of half `d`.
    pub fn sender(&self, d: usize) -> Endpoint {
        if d == 0 {
            self.lo
        } else {
            self.hi
        }
    }
}

/// What one direction of a flow carries: packets sent by one endpoint.
#[derive(Debug, Default)]
pub struct Half {
    /// TCP packets this endpoint sent that passed the filter.
    pub packets: u64,
    /// IP bytes (as the IP header says).
    pub bytes: u64,
    /// The TS engine's state: TSvals this endpoint sent, not yet echoed.
    pub ts: TsHalf,
    /// The seq/ACK engine's state: segments this endpoint sent, not yet acknowledged,
    /// and their retransmission counts.
    pub seq: SeqHalf,
    /// Sequence number just past this half's FIN, once one is seen.
    pub fin_end: Option<u32>,
    /// The initial sequence number of this half's SYN, once one is seen.
    pub syn_seq: Option<u32>,
    /// pping's byte accounting for its `-m` columns (`flowRec` in pping.cpp).
    pub pping: PpingBytes,
}

/// pping's per-direction byte counts: frames this direction sent through the capture
/// point once both directions were seen (`bytesSnt`), their total at this
/// direction's last sample (`lstBytesSnt`), and the reverse direction's total at the
/// TSval this direction's last sample echoed (`bytesDep`).
#[derive(Debug, Default, Clone, Copy)]
pub struct PpingBytes {
    /// `bytesSnt`: frame bytes of this direction's timestamped packets once both
    /// directions were seen; counted only for pping's output formats.
    pub sent: u64,
    /// `lstBytesSnt`: `sent` when this direction's last RTT sample was taken.
    pub at_last_sample: u64,
    /// `bytesDep`: this direction's `sent` when it sent the TSval that the reverse
    /// direction's latest sample echoed (set by that sample, as pping.cpp does).
    pub departed: u64,
}

/// One TCP connection.
#[derive(Debug)]
pub struct Flow {
    /// The connection's two endpoints.
    pub key: FlowKey,
    /// Capture time of the flow's first packet, ns since the epoch.
    pub first_ns: u64,
    /// Capture time of its latest packet, ns since the epoch (never moves back).
    pub last_ns: u64,
    /// Indexed by the sending endpoint: 0 = `key.lo`, 1 = `key.hi`.
    pub halves: [Half; 2],
    /// Smallest RTT so far to the endpoint that closed the loop, per method, indexed
    /// by that endpoint (pping's per-flow minimum).
    pub min_ns: [[u64; 2]; 2],
    /// The TS engine's minimum in pping's arithmetic (seconds as doubles), per
    /// endpoint that closed the loop.
    pub min_pping: [f64; 2],
    /// An RST was seen: the flow is finished.
    pub reset: bool,
}

impl Flow {
    fn new(key: FlowKey, now: u64) -> Self {
        Self {
            key,
            first_ns: now,
            last_ns: now,
            halves: Default::default(),
            min_ns: [[u64::MAX; 2]; 2],
            min_pping: [f64::INFINITY; 2],
            reset: false,
        }
    }

    /// Both FINs sent and each acknowledged by the other end, or reset: nothing more
    /// can be measured.
    pub fn finished(&self) -> bool {
        self.reset
            || (0..2).all(|d| {
                self.halves[d].fin_end.is_some_and(|f| {
                    self.halves[d]
                        .seq
                        .acked
                        .is_some_and(|a| !super::seq::before(a, f))
                })
            })
    }
}

/// What one direction of a flow came to when the flow left the table: the counts both
/// engines keep (the in-kernel one has no queues to hand over).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct HalfEnd {
    /// TCP packets this endpoint sent that passed the filter.
    pub packets: u64,
    /// Their IP bytes.
    pub bytes: u64,
    /// Segments that covered data seen before (see [`SeqHalf`]).
    pub retransmissions: u64,
    /// Retransmissions of data the receiver had already acknowledged.
    pub spurious: u64,
    /// Segments below the highest sequence seen but never seen themselves.
    pub out_of_order: u64,
    /// ACKs that ended at a retransmitted segment (Karn): no sample.
    pub karn_skipped: u64,
    /// ACKs that ended at a segment already timed at its SACK: no sample.
    pub sacked_skipped: u64,
    /// Samples taken at a SACK block.
    pub sack_timed: u64,
    /// Segments and TSvals not tracked (a per-flow limit).
    pub untracked: u64,
    /// TSvals and segments not timed for the rate limit.
    pub rate_limited: u64,
}

/// A flow that left the table (closed, idle, evicted, restarted, or the input
/// ended): its key, its first and last packet's capture times, and each direction's
/// counts, indexed as [`Flow::halves`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowEnd {
    /// The connection's two endpoints.
    pub key: FlowKey,
    /// Capture time of its first packet, ns since the epoch.
    pub first_ns: u64,
    /// Capture time of its latest packet, ns since the epoch.
    pub last_ns: u64,
    /// Indexed by the sending endpoint: 0 = `key.lo`, 1 = `key.hi`.
    pub halves: [HalfEnd; 2],
}

impl FlowEnd {
    /// What `f` came to.
    pub fn of(f: &Flow) -> Self {
        let half = |h: &Half| HalfEnd {
            packets: h.packets,
            bytes: h.bytes,
            retransmissions: h.seq.retransmissions,
            spurious: h.seq.spurious,
            out_of_order: h.seq.out_of_order,
            karn_skipped: h.seq.karn_skipped,
            sacked_skipped: h.seq.sacked_skipped,
            sack_timed: h.seq.sack_timed,
            untracked: h.seq.untracked + h.ts.overflow,
            rate_limited: h.seq.rate_limited + h.ts.rate_limited,
        };
        Self {
            key: f.key,
            first_ns: f.first_ns,
            last_ns: f.last_ns,
            halves: [half(&f.halves[0]), half(&f.halves[1])],
        }
    }
}

/// Flow-table counters.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct FlowCounters {
    /// Flows entered in the table, those restarted by a new SYN included.
    pub created: u64,
    /// Flows dropped after no packet for `--idle-timeout` of capture time.
    pub expired_idle: u64,
    /// Flows evicted to make room when the table held `--max-flows`.
    pub evicted_full: u64,
    /// Flows removed as finished: reset, or both FINs acknowledged.
    pub closed: u64,
    /// A SYN on a key whose previous connection had not been forgotten yet.
    pub reused: u64,
    /// Most flows held at once.
    pub peak: u64,
}

/// Flows by key.
///
/// Flows live in a slab indexed through a hash map, and the last flow used is
/// remembered: a bulk transfer's data and ACKs, back to back, skip the hash lookup.
/// No recency list is kept per packet (that costs a linked-list update on every
/// packet, 10 % of a whole run): idle flows are found by a sweep once per second of
/// capture time, and when the table is full the least recently seen eighth is
/// evicted at once, so eviction costs O(1) per new flow amortised.
pub struct FlowTable {
    index: FastMap<FlowKey, u32>,
    slab: Vec<Option<Flow>>,
    free: Vec<u32>,
    last: Option<(FlowKey, u32)>,
    idle_ns: u64,
    cap: usize,
    /// Flows created, expired, evicted, closed and restarted so far, and the most held.
    pub counters: FlowCounters,
}

impl FlowTable {
    /// Forget flows silent for `idle_ns`; hold at most `cap` (evicting the least
    /// recently seen).
    pub fn new(idle_ns: u64, cap: usize) -> Self {
        Self {
            index: FastMap::default(),
            slab: Vec::new(),
            free: Vec::new(),
            last: None,
            idle_ns,
            cap: cap.max(1),
            counters: FlowCounters::default(),
        }
    }

    fn slot(&mut self, i: u32) -> &mut Flow {
        self.slab[i as usize]
            .as_mut()
            .expect("indexed slots hold a flow")
    }

    fn insert(&mut self, f: Flow) -> u32 {
        let key = f.key;
        let i = match self.free.pop() {
            Some(i) => {
                self.slab[i as usize] = Some(f);
                i
            }
            None => {
                self.slab.push(Some(f));
                (self.slab.len() - 1) as u32
            }
        };
        self.index.insert(key, i);
        self.counters.created += 1;
        self.counters.peak = self.counters.peak.max(self.index.len() as u64);
        i
    }

    fn remove(&mut self, key: &FlowKey) -> Option<Flow> {
        let i = self.index.remove(key)?;
        if self.last.is_some_and(|(_, l)| l == i) {
            self.last = None;
        }
        self.free.push(i);
        self.slab[i as usize].take()
    }

    /// The flow of `key`, created if new (when the table is full, the least recently
    /// seen eighth goes to `gone` first), marked as seen at `now`.
    #[inline]
    pub fn touch(&mut self, key: FlowKey, now: u64, gone: impl FnMut(Flow)) -> &mut Flow {
        let i = match self.last {
            Some((k, i)) if k == key => i,
            _ => {
                let i = match self.index.get(&key) {
                    Some(&i) => i,
                    None => {
                        if self.index.len() >= self.cap {
                            self.evict_oldest(gone);
                        }
                        self.insert(Flow::new(key, now))
                    }
                };
                self.last = Some((key, i));
                i
            }
        };
        let f = self.slot(i);
        f.last_ns = f.last_ns.max(now);
        f
    }

    fn evict_oldest(&mut self, mut gone: impl FnMut(Flow)) {
        let mut seen: Vec<u64> = self.slab.iter().flatten().map(|f| f.last_ns).collect();
        let k = (seen.len() / 8).max(1);
        let (_, &mut cut, _) = seen.select_nth_unstable(k - 1);
        let old: Vec<FlowKey> = self
            .slab
            .iter()
            .flatten()
            .filter(|f| f.last_ns <= cut)
            .map(|f| f.key)
            .take(k)
            .collect();
        for key in old {
            if let Some(f) = self.remove(&key) {
                self.counters.evicted_full += 1;
                gone(f);
            }
        }
    }

    /// Start `key` over (a new connection on the same 5-tuple); the old one goes
    /// to `gone`.
    pub fn restart(&mut self, key: FlowKey, now: u64, gone: impl FnOnce(Flow)) -> &mut Flow {
        if let Some(f) = self.remove(&key) {
            gone(f);
        }
        self.counters.reused += 1;
        let i = self.insert(Flow::new(key, now));
        self.last = Some((key, i));
        self.slot(i)
    }

    /// Remove a finished flow.
    pub fn close(&mut self, key: &FlowKey) -> Option<Flow> {
        let f = self.remove(key);
        if f.is_some() {
            self.counters.closed += 1;
        }
        f
    }

    /// Drop flows not seen since `now - idle` into `gone`, oldest first.
    pub fn expire(&mut self, now: u64, mut gone: impl FnMut(Flow)) {
        let idle = self.idle_ns;
        let mut old: Vec<(u64, FlowKey)> = self
            .slab
            .iter()
            .flatten()
            .filter(|f| now.saturating_sub(f.last_ns) > idle)
            .map(|f| (f.last_ns, f.key))
            .collect();
        old.sort_unstable_by_key(|x| x.0);
        for (_, key) in old {
            if let Some(f) = self.remove(&key) {
                self.counters.expired_idle += 1;
                gone(f);
            }
        }
    }

    /// Remove every flow (the input ended), least recently seen first.
    pub fn drain(&mut self, mut gone: impl FnMut(Flow)) {
        let mut all: Vec<Flow> = self.slab.drain(..).flatten().collect();
        self.index.clear();
        self.free.clear();
        self.last = None;
        all.sort_unstable_by_key(|f| f.last_ns);
        for f in all {
            gone(f);
        }
    }

    /// Flows held now.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no flow is held.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Every flow still held.
    pub fn iter(&self) -> impl Iterator<Item = &Flow> {
        self.slab.iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(last: u8, port: u16) -> Endpoint {
        Endpoint::new(IpAddr::from([10, 0, 0, last]), port)
    }

    #[test]
    fn both_directions_share_a_key_and_addresses_print_as_captured() {
        let (a, b) = (ep(1, 40000), ep(2, 80));
        let (k1, d1) = FlowKey::of(a, b);
        let (k2, d2) = FlowKey::of(b, a);
        assert_eq!(k1, k2);
        assert_ne!(d1, d2);
        assert_eq!(k1.sender(d1), a);
        assert_eq!(a.to_string(), "10.0.0.1:40000");
        let v6 = Endpoint::new("2001:db8::1".parse().unwrap(), 443);
        assert_eq!(v6.to_string(), "2001:db8::1:443");
    }

    #[test]
    fn idle_flows_expire_and_a_full_table_evicts_the_least_recently_seen() {
        let mut t = FlowTable::new(10, 2);
        let k = |p| FlowKey::of(ep(1, p), ep(2, 80)).0;
        t.touch(k(1), 0, drop);
        t.touch(k(2), 5, drop);
        t.touch(k(1), 6, drop);
        // Full: the third flow pushes out k(2), seen least recently.
        t.touch(k(3), 7, drop);
        assert_eq!(t.counters.evicted_full, 1);
        assert!(t.iter().all(|f| f.key != k(2)));
        let mut gone = Vec::new();
        t.expire(17, |f| gone.push(f.key));
        assert_eq!(gone, vec![k(1)]);
        t.expire(18, |f| gone.push(f.key));
        assert_eq!(gone, vec![k(1), k(3)]);
        assert!(t.is_empty());
        assert_eq!(t.counters.expired_idle, 2);
        assert_eq!(t.counters.peak, 2);
    }
}
