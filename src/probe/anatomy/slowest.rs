//! The run's slowest share of transactions, exactly, in bounded memory.
//!
//! The tail a run reports is the top ⌈n·P⌉ of its n transactions by round trip (ties
//! broken by the items' own order). n is only known at the end, and a transaction
//! cannot be fetched again once it is dropped, so what is kept during the run must
//! already hold the final top ⌈n·P⌉.
//!
//! **Why a fixed capacity.** Keep the largest `keep` items offered so far, dropping
//! an item only when `keep` larger ones are held. Every dropped item then has at least
//! `keep` items above it for the rest of the run (items are only ever added), so it
//! ranks below `keep` at the end; and every kept item ranks within the top `keep` of
//! all offered, since anything above it that arrived was kept as well. The kept set is
//! therefore exactly the top min(seen, keep), and the final top ⌈n·P⌉ is inside it
//! whenever ⌈n·P⌉ ≤ `keep` ([`Slowest::top`] says when it is not).
//!
//! A capacity that grows with the running count (⌈seen·P⌉, the rule this replaced)
//! is not sound: no item can be dropped safely while n may still grow, since an item
//! with r items above it enters the final tail as soon as ⌈n·P⌉ > r. A run ended by
//! count has n ≤ the count; one ended by time has n ≤ its length over the shortest time
//! a transaction can take ([`runs_at_most`]); `keep` is ⌈n_max·P⌉ of that bound, capped
//! by the run's share of [`KEEP_MAX`] (the memory bound, divided among its streams:
//! each stream keeps its own), so the memory a run holds is at most
//! min(seen, streams·⌈n_max·P⌉, [`KEEP_MAX`]) items. A tail larger than a stream's
//! share is reported as not exact ([`Slowest::top`]).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The most items a run's tail keeps, all its streams together (a transaction's anatomy
/// is ~140 bytes: ~28 MiB). A 1 % tail of one stream is exact for runs of up to 20
/// million transactions; of 64 streams, up to 312 500.
pub const KEEP_MAX: u64 = 200_000;

/// The fewest ns a closed-loop transaction takes: two system calls and a trip through
/// each end's stack. The fastest measured here is ~5 µs (both ends on one vCPU,
/// bench/RESULTS-rr.md); 1 µs leaves a factor of five.
pub const TRANSACTION_FLOOR_NS: u64 = 1_000;

/// Parts per million in one percent.
pub const PPM_PER_PCT: u32 = 10_000;

/// ⌈n·ppm / 10⁶⌉: how many of `n` transactions a tail of `ppm` parts per million holds,
/// in integers (⌈300 × 0.07⌉ in floating point is 22).
pub fn tail_count(n: u64, ppm: u32) -> u64 {
    let top = u128::from(n) * u128::from(ppm);
    u64::try_from(top.div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// An upper bound on the transactions of a run of `streams` streams ended by `count`
/// (the whole run's) or by `length_ns`, each stream making at most `burst`
/// transactions per `interval_ns` (0: back to back), none faster than
/// [`TRANSACTION_FLOOR_NS`].
pub fn runs_at_most(
    count: Option<u64>,
    length_ns: u64,
    streams: u32,
    burst: u32,
    interval_ns: u64,
) -> u64 {
    let by_floor = length_ns / TRANSACTION_FLOOR_NS + 1;
    let per_stream = match length_ns.checked_div(interval_ns) {
        None => by_floor,
        Some(waits) => by_floor.min((waits + 1).saturating_mul(u64::from(burst.max(1)))),
    };
    let by_time = per_stream.saturating_mul(u64::from(streams.max(1)));
    count.map_or(by_time, |c| c.min(by_time))
}

/// How many items each of `streams` streams keeps for a tail of `ppm` of a run of at
/// most `n_max` transactions: all of the run's tail, within its share of [`KEEP_MAX`].
pub fn keep_for(n_max: u64, ppm: u32, streams: u32) -> u64 {
    tail_count(n_max, ppm).clamp(1, (KEEP_MAX / u64::from(streams.max(1))).max(1))
}

/// The largest `keep` items offered, and how many were offered.
#[derive(Clone, Debug)]
pub struct Slowest<T: Ord> {
    heap: BinaryHeap<Reverse<T>>,
    keep: usize,
    seen: u64,
}

impl<T: Ord + Copy> Slowest<T> {
    /// Keep the largest `keep` (at least one).
    pub fn new(keep: u64) -> Self {
        Self {
            heap: BinaryHeap::new(),
            keep: usize::try_from(keep.max(1)).unwrap_or(usize::MAX),
            seen: 0,
        }
    }

    /// One more item: kept when there is room or when it beats the smallest kept.
    #[inline]
    pub fn offer(&mut self, x: T) {
        self.seen += 1;
        if self.heap.len() < self.keep {
            self.heap.push(Reverse(x));
        } else if let Some(mut min) = self.heap.peek_mut() {
            if x > min.0 {
                *min = Reverse(x);
            }
        }
    }

    /// Another selector's items (another stream's), as if offered here. Each
    /// stream's kept set holds its own top `keep`; an item of the merged top `keep`
    /// has fewer than `keep` items above it in its own stream, so it was kept there.
    pub fn merge(&mut self, o: &Self) {
        self.keep = self.keep.max(o.keep);
        let seen = self.seen + o.seen;
        for Reverse(x) in o.heap.iter() {
            self.offer(*x);
        }
        self.seen = seen;
    }

    /// The largest `k`, largest first, and whether they are exactly those of every
    /// item offered: false only when `k` exceeds what was kept while more were offered.
    pub fn top(&self, k: u64) -> (Vec<T>, bool) {
        let mut v: Vec<T> = self.heap.iter().map(|r| r.0).collect();
        v.sort_unstable_by(|a, b| b.cmp(a));
        let k = usize::try_from(k).unwrap_or(usize::MAX);
        let exact = k <= v.len() || self.seen == v.len() as u64;
        v.truncate(k);
        (v, exact)
    }

    /// Items offered.
    pub fn seen(&self) -> u64 {
        self.seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Witness: a full sort of every item. Whatever the order they come in (rising,
    /// falling, the slowest first then many fast ones: the order that broke the
    /// running-count rule), the top ⌈n·P⌉ is the sort's, for several P.
    #[test]
    fn the_tail_is_the_sorts_top_whatever_the_order() {
        let n = 10_000u64;
        let mut orders: Vec<Vec<u64>> = vec![
            (0..n).collect(),
            (0..n).rev().collect(),
            // Slow ones first, then a long fast stretch, then a few middling.
            (0..n)
                .map(|i| if i < 50 { 1_000_000 + i } else { i % 997 })
                .collect(),
        ];
        // A pseudo-random order (an LCG: deterministic).
        let mut x = 12_345u64;
        orders.push(
            (0..n)
                .map(|_| {
                    x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    x >> 40
                })
                .collect(),
        );
        for ppm in [10_000u32, 1_000, 50_000, 70_000] {
            for items in &orders {
                // Tag each with its position: a total order like the recorder's.
                let tagged: Vec<(u64, u64)> = items
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| (v, i as u64))
                    .collect();
                let bound = runs_at_most(Some(n), u64::MAX, 1, 1, 0);
                let mut s = Slowest::new(keep_for(bound, ppm, 1));
                for &t in &tagged {
                    s.offer(t);
                }
                let k = tail_count(n, ppm);
                let (got, exact) = s.top(k);
                let mut all = tagged.clone();
                all.sort_unstable_by(|a, b| b.cmp(a));
                all.truncate(k as usize);
                assert!(exact);
                assert_eq!(got, all, "ppm {ppm}");
            }
        }
    }

    /// Witness: arithmetic. ⌈n·P⌉ in integers; the bounds of a run by count, by time
    /// and paced.
    #[test]
    fn counts_and_bounds() {
        assert_eq!(tail_count(600, 10_000), 6);
        assert_eq!(tail_count(601, 10_000), 7);
        assert_eq!(tail_count(300, 70_000), 21);
        assert_eq!(tail_count(0, 10_000), 0);
        // 1 s back to back: at most 10⁶ + 1 per stream.
        assert_eq!(runs_at_most(None, 1_000_000_000, 2, 1, 0), 2_000_002);
        assert_eq!(runs_at_most(Some(500), 1_000_000_000, 2, 1, 0), 500);
        // Paced at 10 ms, bursts of 3, for 1 s: 101 bursts.
        assert_eq!(runs_at_most(None, 1_000_000_000, 1, 3, 10_000_000), 303);
        assert_eq!(keep_for(600, 10_000, 1), 6);
        assert_eq!(keep_for(600, 10_000, 64), 6);
        assert_eq!(keep_for(u64::MAX, 10_000, 1), KEEP_MAX);
        // 64 streams share the memory bound.
        assert_eq!(keep_for(u64::MAX, 10_000, 64), KEEP_MAX / 64);
    }

    /// Witness: a full sort of both streams' items together.
    #[test]
    fn merged_streams_keep_the_runs_top() {
        let (mut a, mut b) = (Slowest::new(5), Slowest::new(5));
        for i in 0..100u64 {
            a.offer((i * 7 % 101, 0u8));
            b.offer((i * 13 % 103, 1u8));
        }
        let mut all: Vec<(u64, u8)> = (0..100u64)
            .flat_map(|i| [(i * 7 % 101, 0), (i * 13 % 103, 1)])
            .collect();
        all.sort_unstable_by(|x, y| y.cmp(x));
        a.merge(&b);
        assert_eq!(a.seen(), 200);
        let (top, exact) = a.top(5);
        assert!(exact);
        assert_eq!(top, all[..5]);
        // Asking for more than was kept: said, not hidden.
        assert!(!a.top(6).1);
    }
}
