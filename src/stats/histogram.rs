//! `LatencyHistogram`: an HDR histogram of nanoseconds with exact moments beside it.

use hdrhistogram::Histogram;
use std::time::Duration;

/// Largest value tracked: one hour in nanoseconds. Larger samples saturate at this value
/// (and are counted in [`LatencyHistogram::saturated`]); exact max/mean still see them.
pub const MAX_TRACKABLE_NS: u64 = 3_600 * 1_000_000_000;

/// Significant decimal digits kept by the histogram: a value is known to 0.1 % of itself.
const SIGNIFICANT_DIGITS: u8 = 3;

/// Why a histogram file cannot be read back ([`LatencyHistogram::from_csv`]).
#[derive(Debug, thiserror::Error)]
pub enum CsvError {
    /// A line that is neither a comment, the header nor `value,count`.
    #[error("line {number}: cannot read \"{}\"", crate::excerpt(.text, 80))]
    Line {
        /// 1-based.
        number: usize,
        /// The line.
        text: String,
    },
    /// No moments line: not written by rttlab.
    #[error("no \"# count=…\" line: not an rttlab histogram")]
    NoHeader,
    /// Buckets and header disagree (a cut or edited file).
    #[error("the buckets hold {buckets} samples, the header says {header}")]
    Count {
        /// Samples in the buckets.
        buckets: u64,
        /// The header's count.
        header: u64,
    },
}

/// All samples of one measurement. Recording is O(1) and allocation-free, memory is
/// fixed (~200 KiB) however long the run, and min/max/mean/stddev are exact because
/// they are kept outside the histogram's buckets.
#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    hist: Histogram<u64>,
    count: u64,
    sum_ns: u128,
    sum_sq_ns: u128,
    min_ns: u64,
    max_ns: u64,
    saturated: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    /// An empty histogram covering 1 ns to one hour at 3 significant digits.
    pub fn new() -> Self {
        let hist = Histogram::new_with_bounds(1, MAX_TRACKABLE_NS, SIGNIFICANT_DIGITS)
            .expect("constant bounds are valid");
        Self {
            hist,
            count: 0,
            sum_ns: 0,
            sum_sq_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
            saturated: 0,
        }
    }

    /// Record one sample in nanoseconds.
    #[inline]
    pub fn record_ns(&mut self, ns: u64) {
        self.count += 1;
        self.sum_ns += u128::from(ns);
        // Saturating: a peer's stamp can put a sample near u64::MAX, and four squares
        // of those fill a u128.
        self.sum_sq_ns = self
            .sum_sq_ns
            .saturating_add(u128::from(ns) * u128::from(ns));
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
        let clamped = ns.clamp(1, MAX_TRACKABLE_NS);
        if clamped != ns && ns != 0 {
            self.saturated += 1;
        }
        self.hist.saturating_record(clamped);
    }

    /// Record one sample.
    #[inline]
    pub fn record(&mut self, d: Duration) {
        self.record_ns(crate::stats::units::ns(d));
    }

    /// Add every sample of `other` to this histogram.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        if other.count == 0 {
            return;
        }
        self.count += other.count;
        self.sum_ns += other.sum_ns;
        self.sum_sq_ns = self.sum_sq_ns.saturating_add(other.sum_sq_ns);
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
        self.saturated += other.saturated;
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.hist.add(&other.hist);
    }

    /// Forget every sample, keeping the allocation.
    pub fn reset(&mut self) {
        self.hist.reset();
        self.count = 0;
        self.sum_ns = 0;
        self.sum_sq_ns = 0;
        self.min_ns = u64::MAX;
        self.max_ns = 0;
        self.saturated = 0;
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Samples above [`MAX_TRACKABLE_NS`], counted in the top bucket.
    pub fn saturated(&self) -> u64 {
        self.saturated
    }

    /// Exact smallest sample, if any.
    pub fn min_ns(&self) -> Option<u64> {
        (self.count > 0).then_some(self.min_ns)
    }

    /// Exact largest sample, if any.
    pub fn max_ns(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max_ns)
    }

    /// Exact arithmetic mean in nanoseconds.
    pub fn mean_ns(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum_ns as f64 / self.count as f64)
    }

    /// Exact population standard deviation in nanoseconds (netperf's STDDEV_LATENCY is
    /// the population form too).
    pub fn stddev_ns(&self) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let n = self.count as u128;
        // n·Σx² − (Σx)² is exact in integers and never negative, while it fits; samples
        // of centuries (a peer's stamps are its word) take the floating-point form.
        let exact = n
            .checked_mul(self.sum_sq_ns)
            .zip(self.sum_ns.checked_mul(self.sum_ns))
            .and_then(|(a, b)| a.checked_sub(b));
        let var = match exact {
            Some(num) => num as f64 / (n as f64 * n as f64),
            None => {
                let mean = self.sum_ns as f64 / n as f64;
                (self.sum_sq_ns as f64 / n as f64 - mean * mean).max(0.0)
            }
        };
        Some(var.sqrt())
    }

    /// Whether `count` samples resolve quantile `q`: see [`resolves`].
    pub fn resolves(&self, q: f64) -> bool {
        resolves(q, self.count)
    }

    /// [`quantile_ns`](Self::quantile_ns) where the samples resolve `q`, else `None`:
    /// what every table, JSON document and chart shows.
    pub fn resolved_quantile_ns(&self, q: f64) -> Option<u64> {
        self.quantile_ns(q).filter(|_| self.resolves(q))
    }

    /// Value at quantile `q` in [0, 1] (HDR resolution: within 0.1 %), clamped to the
    /// exact min and max so that P0 and P100 are exact.
    pub fn quantile_ns(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let v = self.hist.value_at_quantile(q.clamp(0.0, 1.0));
        Some(v.clamp(self.min_ns, self.max_ns))
    }

    /// Number of samples in `[lo_ns, hi_ns)` (bucket resolution).
    pub fn count_between(&self, lo_ns: u64, hi_ns: u64) -> u64 {
        if hi_ns <= lo_ns || self.count == 0 {
            return 0;
        }
        let hi_incl = hi_ns - 1;
        let lo = lo_ns.max(1);
        if lo > hi_incl {
            // Only zero-valued samples (clamped to 1) could be here.
            return 0;
        }
        self.hist.count_between(lo, hi_incl)
    }

    /// The underlying HDR histogram, for serialisation.
    pub fn hdr(&self) -> &Histogram<u64> {
        &self.hist
    }

    /// The histogram as text a reader can check: a header with the exact moments, then
    /// `value_ns,count` for each bucket with samples (value: the bucket's highest
    /// equivalent value, so [`LatencyHistogram::from_csv`] restores every quantile).
    pub fn to_csv(&self) -> String {
        let mut o = format!(
            "# rttlab latency histogram (HDR, 3 significant digits): value_ns is the top of a bucket\n\
             # count={} min_ns={} max_ns={} sum_ns={} sum_sq_ns={} saturated={}\nvalue_ns,count\n",
            self.count,
            self.min_ns().unwrap_or(0),
            self.max_ns,
            self.sum_ns,
            self.sum_sq_ns,
            self.saturated
        );
        for v in self.hist.iter_recorded() {
            o += &format!(
                "{},{}\n",
                v.value_iterated_to(),
                v.count_since_last_iteration()
            );
        }
        o
    }

    /// Read what [`LatencyHistogram::to_csv`] wrote.
    ///
    /// # Errors
    /// The text is not such a histogram (the message names the line).
    pub fn from_csv(text: &str) -> Result<Self, CsvError> {
        let mut h = Self::new();
        let mut moments = false;
        for (n, line) in text.lines().enumerate() {
            let bad = || CsvError::Line {
                number: n + 1,
                text: line.into(),
            };
            if line.starts_with("# count=") {
                let field = |k: &str| {
                    line.split(' ')
                        .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
                        .and_then(|v| v.parse::<u128>().ok())
                        .ok_or_else(bad)
                };
                let as64 = |v: u128| u64::try_from(v).map_err(|_| bad());
                h.count = as64(field("count")?)?;
                h.min_ns = if h.count == 0 {
                    u64::MAX
                } else {
                    as64(field("min_ns")?)?
                };
                h.max_ns = as64(field("max_ns")?)?;
                h.sum_ns = field("sum_ns")?;
                h.sum_sq_ns = field("sum_sq_ns")?;
                h.saturated = as64(field("saturated")?)?;
                moments = true;
            } else if line.starts_with('#') || line == "value_ns,count" {
                continue;
            } else {
                let (v, c) = line
                    .split_once(',')
                    .and_then(|(v, c)| Some((v.parse::<u64>().ok()?, c.parse::<u64>().ok()?)))
                    .ok_or_else(bad)?;
                h.hist
                    .record_n(v.clamp(1, MAX_TRACKABLE_NS), c)
                    .map_err(|_| bad())?;
            }
        }
        if !moments {
            return Err(CsvError::NoHeader);
        }
        if h.hist.len() != h.count {
            return Err(CsvError::Count {
                buckets: h.hist.len(),
                header: h.count,
            });
        }
        Ok(h)
    }
}

/// Whether `count` samples resolve quantile `q` (0 to 1): a quantile above the median
/// needs at least one sample above it, `count · (1 − q) ≥ 1` (P90 needs 10 samples,
/// P99 100, P99.9 1 000); with fewer, the nearest rank is the largest sample, and the
/// "P99.9" of 491 samples is their maximum under another name. The median is the
/// middle sample of any count.
pub fn resolves(q: f64, count: u64) -> bool {
    count > 0 && (q <= 0.5 || count as f64 * (1.0 - q) >= 1.0 - 1e-9)
}

/// The fewest samples that resolve quantile `q` ([`resolves`]): 10 for P90, 100 for
/// P99, 1 000 for P99.9.
pub fn samples_to_resolve(q: f64) -> u64 {
    if q <= 0.5 {
        1
    } else {
        (1.0 / (1.0 - q) - 1e-9).ceil() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_moments_match_arithmetic() {
        let mut h = LatencyHistogram::new();
        for v in [10u64, 20, 30, 40] {
            h.record_ns(v * 1000);
        }
        assert_eq!(h.count(), 4);
        assert_eq!(h.min_ns(), Some(10_000));
        assert_eq!(h.max_ns(), Some(40_000));
        assert_eq!(h.mean_ns(), Some(25_000.0));
        // Population stddev of 10,20,30,40 is sqrt(125) = 11.1803…
        let sd = h.stddev_ns().unwrap();
        assert!((sd - 11_180.339_887).abs() < 0.01, "{sd}");
    }

    #[test]
    fn uniform_distribution_percentiles_within_resolution() {
        // 1..=100_000 µs uniformly: Pq is q·100_000 µs.
        let mut h = LatencyHistogram::new();
        for us in 1..=100_000u64 {
            h.record_ns(us * 1000);
        }
        for (q, expect_us) in [
            (0.5, 50_000.0),
            (0.9, 90_000.0),
            (0.99, 99_000.0),
            (0.999, 99_900.0),
        ] {
            let got = h.quantile_ns(q).unwrap() as f64 / 1000.0;
            assert!(
                (got - expect_us).abs() / expect_us < 0.001,
                "q={q} got {got} µs"
            );
        }
        assert_eq!(h.quantile_ns(0.0), Some(1000));
        assert_eq!(h.quantile_ns(1.0), Some(100_000_000));
    }

    #[test]
    fn huge_and_zero_samples_do_not_panic() {
        let mut h = LatencyHistogram::new();
        h.record_ns(0);
        h.record_ns(u64::MAX / 4);
        assert_eq!(h.count(), 2);
        assert_eq!(h.saturated(), 1);
        assert_eq!(h.max_ns(), Some(u64::MAX / 4));
        assert!(h.quantile_ns(1.0).is_some());
        // Samples whose squares overflow the exact sums (a peer's stamps are its word):
        // witness, arithmetic: five equal samples have no spread, and their merge with
        // an equal histogram neither.
        let mut far = LatencyHistogram::new();
        for _ in 0..5 {
            far.record_ns(u64::MAX);
        }
        assert_eq!(far.stddev_ns(), Some(0.0));
        let copy = far.clone();
        far.merge(&copy);
        assert_eq!((far.count(), far.stddev_ns()), (10, Some(0.0)));
    }

    #[test]
    fn csv_round_trip_keeps_every_quantile_and_moment() {
        let mut h = LatencyHistogram::new();
        for i in 0..5000u64 {
            h.record_ns(i * i % 900_001 + 50);
        }
        let back = LatencyHistogram::from_csv(&h.to_csv()).unwrap();
        assert_eq!(back.count(), h.count());
        for q in [0.0, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0] {
            assert_eq!(back.quantile_ns(q), h.quantile_ns(q), "q {q}");
        }
        assert_eq!(back.mean_ns(), h.mean_ns());
        assert_eq!(back.stddev_ns(), h.stddev_ns());
        assert_eq!((back.min_ns(), back.max_ns()), (h.min_ns(), h.max_ns()));
        let empty = LatencyHistogram::from_csv(&LatencyHistogram::new().to_csv()).unwrap();
        assert_eq!(empty.count(), 0);
        assert!(LatencyHistogram::from_csv("value_ns,count\n5,1\n").is_err());
        let mut cut = h.to_csv();
        cut.truncate(cut.len() - 20);
        assert!(LatencyHistogram::from_csv(&cut).is_err());
    }

    #[test]
    fn merge_equals_recording_everything_once() {
        let mut a = LatencyHistogram::new();
        let mut b = LatencyHistogram::new();
        let mut all = LatencyHistogram::new();
        for i in 0..1000u64 {
            let v = i * 37 % 5000 + 1;
            if i % 3 == 0 {
                a.record_ns(v)
            } else {
                b.record_ns(v)
            }
            all.record_ns(v);
        }
        a.merge(&b);
        assert_eq!(a.count(), all.count());
        assert_eq!(a.mean_ns(), all.mean_ns());
        assert_eq!(a.stddev_ns(), all.stddev_ns());
        assert_eq!(a.quantile_ns(0.99), all.quantile_ns(0.99));
    }

    /// Exponential with mean 100 µs: Pq = −100·ln(1−q) µs (P50 69.3, P90 230.3,
    /// P99 460.5, P99.9 690.8), checked by arithmetic on 400 000 draws.
    #[test]
    fn exponential_distribution_has_its_known_percentiles() {
        let mut h = LatencyHistogram::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..400_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            h.record_ns((-100_000.0 * (1.0 - u).ln()) as u64);
        }
        for q in [0.5f64, 0.9, 0.99, 0.999] {
            let want = -100.0 * (1.0 - q).ln();
            let got = h.quantile_ns(q).unwrap() as f64 / 1000.0;
            // Sampling error at P99.9 with 400 draws beyond it is a few per cent.
            assert!(
                (got - want).abs() / want < 0.05,
                "q={q}: {got} µs vs {want} µs"
            );
        }
        let mean = h.mean_ns().unwrap() / 1000.0;
        assert!((mean - 100.0).abs() < 1.0, "{mean}");
    }

    proptest::proptest! {
        /// Any percentile is within the HDR resolution (0.1 %) of the exact
        /// nearest-rank order statistic of the same samples.
        #[test]
        fn quantiles_match_exact_order_statistics(mut v in proptest::collection::vec(1u64..10_000_000_000, 1..2000), q in 0.0f64..=1.0) {
            let mut h = LatencyHistogram::new();
            for &x in &v {
                h.record_ns(x);
            }
            v.sort_unstable();
            let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
            let exact = v[rank - 1] as f64;
            let got = h.quantile_ns(q).unwrap() as f64;
            proptest::prop_assert!((got - exact).abs() <= exact / 1000.0 + 1.0, "q={} exact={} got={}", q, exact, got);
        }
    }

    #[test]
    fn reset_forgets_everything() {
        let mut h = LatencyHistogram::new();
        h.record_ns(5);
        h.reset();
        assert_eq!(h.count(), 0);
        assert_eq!(h.min_ns(), None);
        h.record_ns(7);
        assert_eq!(h.min_ns(), Some(7));
        assert_eq!(h.quantile_ns(0.5), Some(7));
    }
}
