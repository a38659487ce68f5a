//! The flow table: TCP connections by 5-tuple, both directions in one entry, with an
//! idle timeout and a cap that evicts the least recently seen flow.
//!
//! Memory is O(active flows): an entry is [`Flow`] (a fixed ~300 bytes) plus what its
//! engines hold outstanding, each capped ([`crate::passive::ts::TsHalf::CAP`],
//! [`crate::passive::seq::SeqHalf::CAP`]); closed (RST, or both FINs acknowledged)
//! and idle flows are dropped as the capture clock passes them.

use super::seq::SeqHalf;
use super::ts::TsHalf;
use lru::LruCache;
use std::net::{IpAddr, Ipv6Addr};

/// One end of a connection. IPv4 addresses are kept IPv4-mapped, so one key type
/// serves both families and compares as two integers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    pub addr: u128,
    pub port: u16,
}

impl Endpoint {
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

    /// The address as it was on the wire (IPv4 again for mapped addresses).
    pub fn ip(&self) -> IpAddr {
        Ipv6Addr::from(self.addr).to_canonical()
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    pub lo: Endpoint,
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
    pub packets: u64,
    /// IP bytes (as the IP header says).
    pub bytes: u64,
    pub ts: TsHalf,
    pub seq: SeqHalf,
    /// Sequence number just past this half's FIN, once one is seen.
    pub fin_end: Option<u32>,
    /// The initial sequence number of this half's SYN, once one is seen.
    pub syn_seq: Option<u32>,
}

/// One TCP connection.
#[derive(Debug)]
pub struct Flow {
    pub key: FlowKey,
    pub first_ns: u64,
    pub last_ns: u64,
    /// Indexed by the sending endpoint: 0 = `key.lo`, 1 = `key.hi`.
    pub halves: [Half; 2],
    /// Smallest RTT so far to the endpoint that closed the loop, per method, indexed
    /// by that endpoint (pping's per-flow minimum).
    pub min_ns: [[u64; 2]; 2],
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

/// Flow-table counters.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct FlowCounters {
    pub created: u64,
    pub expired_idle: u64,
    pub evicted_full: u64,
    pub closed: u64,
    /// A SYN on a key whose previous connection had not been forgotten yet.
    pub reused: u64,
    /// Most flows held at once.
    pub peak: u64,
}

/// Flows by key, least recently seen last.
pub struct FlowTable {
    map: LruCache<FlowKey, Flow>,
    idle_ns: u64,
    cap: usize,
    pub counters: FlowCounters,
}

impl FlowTable {
    /// Forget flows silent for `idle_ns`; hold at most `cap` (evicting the least
    /// recently seen).
    pub fn new(idle_ns: u64, cap: usize) -> Self {
        Self {
            map: LruCache::unbounded(),
            idle_ns,
            cap: cap.max(1),
            counters: FlowCounters::default(),
        }
    }

    /// The flow of `key`, created if new (evicting the least recently seen into
    /// `gone` when full), marked as seen at `now`.
    pub fn touch(&mut self, key: FlowKey, now: u64, gone: impl FnOnce(Flow)) -> &mut Flow {
        if !self.map.contains(&key) {
            if self.map.len() >= self.cap {
                if let Some((_, f)) = self.map.pop_lru() {
                    gone(f);
                }
                self.counters.evicted_full += 1;
            }
            self.map.put(key, Flow::new(key, now));
            self.counters.created += 1;
            self.counters.peak = self.counters.peak.max(self.map.len() as u64);
        }
        let f = self
            .map
            .get_mut(&key)
            .expect("the flow was just looked up or inserted");
        f.last_ns = f.last_ns.max(now);
        f
    }

    /// Start `key` over (a new connection on the same 5-tuple); the old one goes
    /// to `gone`.
    pub fn restart(&mut self, key: FlowKey, now: u64, gone: impl FnOnce(Flow)) -> &mut Flow {
        if let Some(f) = self.map.pop(&key) {
            gone(f);
        }
        self.counters.reused += 1;
        self.counters.created += 1;
        self.map.put(key, Flow::new(key, now));
        self.map.get_mut(&key).expect("the flow was just inserted")
    }

    /// Remove a finished flow.
    pub fn close(&mut self, key: &FlowKey) -> Option<Flow> {
        let f = self.map.pop(key);
        if f.is_some() {
            self.counters.closed += 1;
        }
        f
    }

    /// Drop flows not seen since `now - idle`, oldest first; returns them so their
    /// summaries can be finished.
    pub fn expire(&mut self, now: u64, mut gone: impl FnMut(Flow)) {
        while let Some((_, f)) = self.map.peek_lru() {
            if now.saturating_sub(f.last_ns) <= self.idle_ns {
                break;
            }
            if let Some((_, f)) = self.map.pop_lru() {
                self.counters.expired_idle += 1;
                gone(f);
            }
        }
    }

    /// Remove every flow (the input ended), least recently seen first.
    pub fn drain(&mut self, mut gone: impl FnMut(Flow)) {
        while let Some((_, f)) = self.map.pop_lru() {
            gone(f);
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Every flow still held, most recently seen first.
    pub fn iter(&self) -> impl Iterator<Item = &Flow> {
        self.map.iter().map(|(_, f)| f)
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
