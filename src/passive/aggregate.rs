//! Samples aggregated into histograms per prefix of the host that answered (ePPing's
//! `--aggregate`: /24 and /48 by default), by method and place. The in-kernel engine
//! keeps them in a map and user space reads them; the user-space engine builds the
//! same here from its samples, so both report per prefix alike and can be compared
//! bucket for bucket.
//!
//! The buckets' upper bounds ([`bounds`]) are Prometheus' native histogram bounds of
//! schema 4 (2^(1/16) apart, 4.4 %) from 1 µs to 100 s, merged with any classic bounds
//! the caller also exports: every bucket then lies inside exactly one native bucket and
//! one classic bucket, so both exports are exact sums of these counts.

use super::flow::Endpoint;
use super::{Method, Place, Sample};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// The native histogram schema the bounds follow (the agent's `NATIVE_SCHEMA`).
pub const SCHEMA: i32 = 4;
/// The lowest bound: samples at or below it share the first bucket.
pub const MIN_NS: u64 = 1_000;
/// The highest: samples above it are counted in the overflow bucket.
pub const MAX_NS: u64 = 100_000_000_000;

/// The native index of a value of `ns` at [`SCHEMA`]: the `i` with
/// 2^((i-1)/16) < ns·1e-9 ≤ 2^(i/16).
pub fn native_index(ns: u64) -> i32 {
    let x = (ns as f64 * 1e-9).log2() * f64::from(1 << SCHEMA);
    let i = x.ceil() as i32;
    // Against the rounding of log2: settle on the bound itself.
    if ns <= native_bound(i - 1) {
        i - 1
    } else if ns > native_bound(i) {
        i + 1
    } else {
        i
    }
}

/// The largest integer ns in native bucket `i` at [`SCHEMA`]: floor(1e9 · 2^(i/16)).
pub fn native_bound(i: i32) -> u64 {
    (1e9 * (f64::from(i) / f64::from(1 << SCHEMA)).exp2()).floor() as u64
}

/// A classic bound of `s` seconds as the largest integer ns at or below it.
fn classic_bound(s: f64) -> u64 {
    let x = s * 1e9;
    let r = x.round();
    // 1e-5 s is 10000.000000000002 ns in binary: the decimal the user wrote counts.
    if (x - r).abs() < 1e-6 * r.max(1.0) {
        r as u64
    } else {
        x.floor() as u64
    }
}

/// The buckets' upper bounds, ns, ascending: the native bounds from [`MIN_NS`] to
/// [`MAX_NS`] and each of `classic` (seconds) in that range.
pub fn bounds(classic: &[f64]) -> Vec<u64> {
    let mut v: Vec<u64> = (native_index(MIN_NS)..=native_index(MAX_NS))
        .map(native_bound)
        .chain(classic.iter().map(|&s| classic_bound(s)))
        .filter(|&b| (MIN_NS..=MAX_NS).contains(&b))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The bucket of `ns` in `bounds`: the first bound at or above it, or `bounds.len()`.
pub fn bucket(bounds: &[u64], ns: u64) -> usize {
    bounds.partition_point(|&b| b < ns)
}

/// Which histogram a sample goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Key {
    /// The answering host's address masked to `prefix_len` bits.
    pub prefix: IpAddr,
    /// The prefix length.
    pub prefix_len: u8,
    /// How the samples were measured.
    pub method: Method,
    /// Whether the loop crossed the network or was the capture host's own time.
    pub place: Place,
}

impl Key {
    /// `ADDR/LEN`.
    pub fn prefix_text(&self) -> String {
        format!("{}/{}", self.prefix, self.prefix_len)
    }
}

/// One histogram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hist {
    /// Samples.
    pub count: u64,
    /// Their sum, ns.
    pub sum_ns: u64,
    /// The smallest, ns.
    pub min_ns: u64,
    /// The largest, ns.
    pub max_ns: u64,
    /// Counts per bucket of the bounds (one more: above them all).
    pub buckets: Vec<u64>,
}

impl Hist {
    fn new(n: usize) -> Self {
        Self {
            count: 0,
            sum_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
            buckets: vec![0; n + 1],
        }
    }

    /// The bucket holding the `q`-quantile (0–1), as its upper bound in ns clamped to
    /// the exact minimum and maximum: within one bucket (4.4 %) of the sample.
    pub fn quantile(&self, bounds: &[u64], q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let upper = bounds.get(i).copied().unwrap_or(self.max_ns);
                return upper.clamp(self.min_ns, self.max_ns);
            }
        }
        self.max_ns
    }

    /// The mean, ns.
    pub fn mean_ns(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.count as f64
        }
    }
}

/// The prefix of `host` at the given lengths.
pub fn prefix_of(host: Endpoint, prefix_v4: u8, prefix_v6: u8) -> (IpAddr, u8) {
    match host.ip() {
        IpAddr::V4(a) => {
            let len = prefix_v4.min(32);
            let mask = if len == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(len))
            };
            (IpAddr::from((u32::from(a) & mask).to_be_bytes()), len)
        }
        IpAddr::V6(a) => {
            let len = prefix_v6.min(128);
            let mask = if len == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(len))
            };
            (IpAddr::from((u128::from(a) & mask).to_be_bytes()), len)
        }
    }
}

/// Histograms per prefix, built from samples.
#[derive(Debug, Clone)]
pub struct Aggregator {
    bounds: Vec<u64>,
    prefix_v4: u8,
    prefix_v6: u8,
    hists: BTreeMap<Key, Hist>,
}

impl Aggregator {
    /// Aggregate per /`prefix_v4` and /`prefix_v6` into buckets of `bounds`.
    pub fn new(bounds: Vec<u64>, prefix_v4: u8, prefix_v6: u8) -> Self {
        Self {
            bounds,
            prefix_v4,
            prefix_v6,
            hists: BTreeMap::new(),
        }
    }

    /// One sample.
    pub fn sample(&mut self, s: &Sample) {
        let (prefix, prefix_len) = prefix_of(s.host, self.prefix_v4, self.prefix_v6);
        let key = Key {
            prefix,
            prefix_len,
            method: s.method,
            place: s.place,
        };
        let n = self.bounds.len();
        let h = self.hists.entry(key).or_insert_with(|| Hist::new(n));
        h.count += 1;
        h.sum_ns += s.rtt_ns;
        h.min_ns = h.min_ns.min(s.rtt_ns);
        h.max_ns = h.max_ns.max(s.rtt_ns);
        h.buckets[bucket(&self.bounds, s.rtt_ns)] += 1;
    }

    /// The histograms so far, sorted by key, leaving none.
    pub fn take(&mut self) -> Vec<(Key, Hist)> {
        std::mem::take(&mut self.hists).into_iter().collect()
    }

    /// The bounds.
    pub fn bounds(&self) -> &[u64] {
        &self.bounds
    }
}

/// One interval's histograms, `[start_ns, end_ns)` of capture time.
#[derive(Debug, Clone, PartialEq)]
pub struct Interval {
    /// Start, ns since the epoch (a multiple of the interval's length).
    pub start_ns: u64,
    /// End (excluded).
    pub end_ns: u64,
    /// The histograms, sorted by key.
    pub rows: Vec<(Key, Hist)>,
}

/// Histograms per prefix cut into intervals of capture time (`--aggregate`): a sample
/// past the current interval ends it; a quiet live capture ends it by [`Self::tick`].
#[derive(Debug, Clone)]
pub struct Intervals {
    agg: Aggregator,
    len_ns: u64,
    start_ns: Option<u64>,
}

impl Intervals {
    /// Intervals of `len_ns` (at least 1), aggregating with `agg`'s settings.
    pub fn new(agg: Aggregator, len_ns: u64) -> Self {
        Self {
            agg,
            len_ns: len_ns.max(1),
            start_ns: None,
        }
    }

    fn close(&mut self, now_ns: u64) -> Option<Interval> {
        let start = self.start_ns?;
        if now_ns < start + self.len_ns {
            return None;
        }
        self.start_ns = Some(now_ns - now_ns % self.len_ns);
        Some(Interval {
            start_ns: start,
            end_ns: start + self.len_ns,
            rows: self.agg.take(),
        })
    }

    /// One sample; the interval it ended, if any (the sample belongs to the next).
    pub fn sample(&mut self, s: &Sample) -> Option<Interval> {
        let done = self.close(s.ts_ns);
        if self.start_ns.is_none() {
            self.start_ns = Some(s.ts_ns - s.ts_ns % self.len_ns);
        }
        self.agg.sample(s);
        done
    }

    /// The clock reads `now_ns`: the interval it ended, if any.
    pub fn tick(&mut self, now_ns: u64) -> Option<Interval> {
        self.close(now_ns)
    }

    /// The input ended: the last interval, if it holds anything.
    pub fn finish(&mut self) -> Option<Interval> {
        let start = self.start_ns.take()?;
        let rows = self.agg.take();
        (!rows.is_empty()).then_some(Interval {
            start_ns: start,
            end_ns: start + self.len_ns,
            rows,
        })
    }

    /// The buckets' bounds.
    pub fn bounds(&self) -> &[u64] {
        self.agg.bounds()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Witness: Prometheus' definition of schema 4's buckets, evaluated in f64 at
    /// values far from any bound.
    #[test]
    fn native_indices_are_prometheus_schema_4() {
        for ns in [
            1_000u64,
            10_000,
            123_456,
            1_000_000,
            9_999_999,
            1_000_000_000,
        ] {
            let i = native_index(ns);
            let v = ns as f64 * 1e-9;
            assert!(
                2f64.powf(f64::from(i - 1) / 16.0) < v && v <= 2f64.powf(f64::from(i) / 16.0),
                "{ns}"
            );
        }
        // 1 s is exactly bound 0 of every schema.
        assert_eq!(native_index(1_000_000_000), 0);
        assert_eq!(native_bound(0), 1_000_000_000);
        assert_eq!(native_index(1_000_000_001), 1);
    }

    /// Witness: arithmetic. Every classic bound is a bound, so a classic bucket is a
    /// sum of these; every native bound too.
    #[test]
    fn classic_bounds_are_among_the_bounds() {
        let classic = [1e-5, 2e-5, 5e-5, 1e-4, 1e-3, 0.01, 0.1, 1.0, 10.0];
        let b = bounds(&classic);
        assert!(b.windows(2).all(|w| w[0] < w[1]));
        for c in classic {
            assert!(b.contains(&classic_bound(c)), "{c}");
        }
        assert!(b.contains(&10_000));
        assert_eq!(
            bucket(&b, 10_000),
            b.iter().position(|&x| x == 10_000).unwrap()
        );
        assert_eq!(bucket(&b, 10_001), bucket(&b, 10_000) + 1);
        assert_eq!(bucket(&b, MAX_NS + 1), b.len());
        // Native bounds from 1 µs to 100 s, 16 a factor of two: indices -318
        // (1.02 µs) to 106 (98.3 s); 107 (102.6 s) is past 100 s.
        assert_eq!(bounds(&[]).len(), 425);
    }

    #[test]
    fn prefixes_mask_the_answering_host() {
        let e = |a: &str| Endpoint::new(a.parse().unwrap(), 80);
        assert_eq!(
            prefix_of(e("10.1.2.3"), 24, 48),
            ("10.1.2.0".parse().unwrap(), 24)
        );
        assert_eq!(
            prefix_of(e("10.1.2.3"), 32, 48),
            ("10.1.2.3".parse().unwrap(), 32)
        );
        assert_eq!(
            prefix_of(e("2001:db8:1:2::5"), 24, 48),
            ("2001:db8:1::".parse().unwrap(), 48)
        );
        assert_eq!(
            prefix_of(e("2001:db8::5"), 24, 0),
            ("::".parse().unwrap(), 0)
        );
    }

    /// Witness: a hand-made set of samples with known quantiles.
    #[test]
    fn quantiles_are_within_a_bucket_and_clamped_to_the_extremes() {
        let b = bounds(&[]);
        let mut h = Hist::new(b.len());
        for ns in [10_000u64, 20_000, 30_000, 40_000, 1_000_000] {
            h.count += 1;
            h.sum_ns += ns;
            h.min_ns = h.min_ns.min(ns);
            h.max_ns = h.max_ns.max(ns);
            h.buckets[bucket(&b, ns)] += 1;
        }
        let p50 = h.quantile(&b, 0.5);
        assert!((30_000..=30_000 * 1045 / 1000).contains(&p50), "{p50}");
        let p0 = h.quantile(&b, 0.0);
        assert!((10_000..=10_000 * 1045 / 1000).contains(&p0), "{p0}");
        assert_eq!(h.quantile(&b, 1.0), 1_000_000);
        assert_eq!(h.mean_ns(), 220_000.0);
    }
}
