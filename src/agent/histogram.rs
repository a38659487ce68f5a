//! A series of `rttlab_rtt_seconds`: observed by the agent one probe at a time, or —
//! for the passive layers on the in-kernel engine — read at each scrape from the
//! histogram the kernel keeps, so that no sample costs user space anything.
//!
//! The kernel's buckets ([`crate::passive::aggregate::bounds`]) are the native
//! histogram's buckets of schema 4 merged with the classic bounds, so each lies inside
//! one bucket of each: the classic counts and the native counts exported are exact sums
//! of the kernel's, and the sum and count are the kernel's own.

use crate::passive::aggregate;
use prometheus_client::encoding::{
    EncodeMetric, MetricEncoder, NativeHistogram, NativeHistogramBuckets, NoLabelSet,
};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::{MetricType, TypedMetric};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

/// The native histograms' schema: buckets 2^(1/16) apart (4.4 %), so that
/// `histogram_quantile`'s interpolation inside one bucket is off by at most that much,
/// and by half of it for a peak within one bucket. A native histogram stores only the
/// buckets observations fell in: a path whose RTT spreads ±10 % fills about five.
pub const NATIVE_SCHEMA: i8 = aggregate::SCHEMA as i8;

/// Most native buckets a series keeps (a spread from 10 µs to 10 s fills 320 at
/// [`NATIVE_SCHEMA`]): past it the histogram halves its resolution, as client_golang's
/// `NativeHistogramMaxBucketNumber` does, rather than grow without bound.
pub const NATIVE_MAX_BUCKETS: usize = 160;

/// What the kernel's histogram holds, read at a scrape.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelSnapshot {
    /// Samples.
    pub count: u64,
    /// Their sum, ns.
    pub sum_ns: u64,
    /// Counts per bucket of the layout's bounds, the last above them all (empty: none
    /// yet).
    pub buckets: Vec<u64>,
}

/// Where a kernel-fed series reads its histogram.
pub type KernelReader = Arc<dyn Fn() -> KernelSnapshot + Send + Sync>;

/// How the kernel's buckets map onto the exported ones.
#[derive(Debug)]
pub struct Layout {
    /// The classic upper bounds, seconds (the agent's `--buckets`), then +Inf.
    classic: Vec<f64>,
    /// For each kernel bucket (the overflow one last), its classic bucket.
    classic_of: Vec<usize>,
    /// For each kernel bucket, its native index at [`aggregate::SCHEMA`].
    native_of: Vec<i32>,
    /// The kernel's bounds, ns.
    bounds: Vec<u64>,
}

impl Layout {
    /// The layout for the classic bounds `classic` (seconds, ascending).
    pub fn new(classic: &[f64]) -> Self {
        let bounds = aggregate::bounds(classic);
        let mut le: Vec<f64> = classic.to_vec();
        le.push(f64::INFINITY);
        let classic_of = bounds
            .iter()
            .map(|&b| {
                let s = b as f64 * 1e-9;
                // The first classic bound at or above the kernel bound (the classic
                // bounds are among the kernel's, so this is exact up to the
                // rounding of a decimal bound to whole ns).
                le.iter()
                    .position(|&c| c >= s * (1.0 - 1e-12))
                    .unwrap_or(le.len() - 1)
            })
            .chain(std::iter::once(le.len() - 1))
            .collect();
        let native_of = bounds
            .iter()
            .map(|&b| aggregate::native_index(b))
            .chain(std::iter::once(
                aggregate::native_index(aggregate::MAX_NS) + 1,
            ))
            .collect();
        Self {
            classic: le,
            classic_of,
            native_of,
            bounds,
        }
    }

    /// The kernel's bounds, ns (what the in-kernel engine is loaded with).
    pub fn bounds(&self) -> &[u64] {
        &self.bounds
    }
}

/// A kernel-fed series: its reader and layout, and when it began (the native
/// histogram's start time).
#[derive(Clone)]
pub struct KernelSource {
    /// Reads the histogram now.
    pub read: KernelReader,
    /// The buckets' mapping.
    pub layout: Arc<Layout>,
    /// When the series began counting.
    pub created: SystemTime,
}

impl std::fmt::Debug for KernelSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelSource")
            .field("created", &self.created)
            .finish_non_exhaustive()
    }
}

/// One series of `rttlab_rtt_seconds`.
#[derive(Clone, Debug)]
pub struct RttHistogram {
    observed: Histogram,
    kernel: Arc<RwLock<Option<KernelSource>>>,
}

impl RttHistogram {
    /// A series that records observations into `h`.
    pub fn observed(h: Histogram) -> Self {
        Self {
            observed: h,
            kernel: Arc::new(RwLock::new(None)),
        }
    }

    /// Record one value, seconds.
    pub fn observe(&self, v: f64) {
        self.observed.observe(v);
    }

    /// From now on the series is the kernel's histogram `k` (the passive layers on the
    /// in-kernel engine).
    pub fn set_kernel(&self, k: KernelSource) {
        *self
            .kernel
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(k);
    }

    fn encode_kernel(k: &KernelSource, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let snap = (k.read)();
        let l = &k.layout;
        let mut classic: Vec<(f64, u64)> = l.classic.iter().map(|&b| (b, 0)).collect();
        let mut native: BTreeMap<i32, u64> = BTreeMap::new();
        for (i, &n) in snap.buckets.iter().enumerate().filter(|x| *x.1 > 0) {
            if let (Some(&c), Some(&x)) = (l.classic_of.get(i), l.native_of.get(i)) {
                classic[c].1 += n;
                *native.entry(x).or_default() += n;
            }
        }
        let mut schema = aggregate::SCHEMA;
        while native.len() > NATIVE_MAX_BUCKETS && schema > -4 {
            // Halve the resolution as client_golang does past its bucket limit:
            // bucket i of schema s lies in bucket ceil(i/2) of schema s-1.
            let mut coarser = BTreeMap::new();
            for (i, n) in native {
                *coarser
                    .entry(i.div_euclid(2) + i.rem_euclid(2))
                    .or_default() += n;
            }
            native = coarser;
            schema -= 1;
        }
        let (spans, deltas) = spans_and_deltas(&native);
        encoder.encode_histogram_with_native::<NoLabelSet>(
            snap.sum_ns as f64 * 1e-9,
            snap.count,
            &classic,
            None,
            NativeHistogram {
                schema,
                zero_threshold:
                    prometheus_client::metrics::histogram::DEFAULT_NATIVE_HISTOGRAM_ZERO_THRESHOLD,
                zero_count: 0,
                negative: NativeHistogramBuckets {
                    spans: &[],
                    deltas: &[],
                },
                positive: NativeHistogramBuckets {
                    spans: &spans,
                    deltas: &deltas,
                },
                created: Some(k.created),
            },
        )
    }
}

/// Prometheus' sparse encoding of native buckets: spans of consecutive indices (a
/// span's offset from the previous span's end; gaps of one or two buckets are filled
/// with zeros rather than a new span), and each bucket's count as the difference from
/// the one before.
pub fn spans_and_deltas(buckets: &BTreeMap<i32, u64>) -> (Vec<(i32, u32)>, Vec<i64>) {
    let mut spans: Vec<(i32, u32)> = Vec::new();
    let mut deltas = Vec::new();
    let (mut previous, mut next) = (0i64, 0i32);
    for (n, (&i, &count)) in buckets.iter().enumerate() {
        let gap = i - next;
        if n == 0 || gap > 2 {
            spans.push((gap, 0));
        } else {
            for _ in 0..gap {
                deltas.push(-previous);
                previous = 0;
                if let Some(s) = spans.last_mut() {
                    s.1 += 1;
                }
            }
        }
        let c = i64::try_from(count).unwrap_or(i64::MAX);
        deltas.push(c - previous);
        previous = c;
        if let Some(s) = spans.last_mut() {
            s.1 += 1;
        }
        next = i + 1;
    }
    (spans, deltas)
}

impl TypedMetric for RttHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for RttHistogram {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let kernel = self
            .kernel
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        match kernel {
            Some(k) => Self::encode_kernel(&k, encoder),
            None => self.observed.encode(encoder),
        }
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Witness: Prometheus' span encoding worked by hand for buckets 3, 4, 6 and 10.
    #[test]
    fn spans_fill_short_gaps_and_start_anew_past_two() {
        let b: BTreeMap<i32, u64> = [(3, 2), (4, 5), (6, 1), (10, 4)].into();
        let (spans, deltas) = spans_and_deltas(&b);
        assert_eq!(spans, vec![(3, 4), (3, 1)]);
        assert_eq!(deltas, vec![2, 3, -5, 1, 3]);
        let (s, d) = spans_and_deltas(&[(-5, 1)].into());
        assert_eq!((s, d), (vec![(-5, 1)], vec![1]));
    }

    /// Witness: arithmetic over the agent's default classic bounds. Each kernel bucket
    /// lands in the classic bucket whose bound is the first at or above it.
    #[test]
    fn kernel_buckets_fall_in_the_classic_bucket_above_them() {
        let classic = [1e-5, 1e-4, 1e-3];
        let l = Layout::new(&classic);
        for (i, &b) in l.bounds.iter().enumerate() {
            let c = l.classic_of[i];
            assert!(
                b as f64 * 1e-9 <= l.classic[c] * (1.0 + 1e-12),
                "{b} → {}",
                l.classic[c]
            );
            if c > 0 {
                assert!(b as f64 * 1e-9 > l.classic[c - 1] * (1.0 + 1e-12), "{b}");
            }
        }
        assert_eq!(*l.classic_of.last().unwrap(), 3, "overflow is +Inf");
        let ten_us = l.bounds.iter().position(|&b| b == 10_000).unwrap();
        assert_eq!(l.classic_of[ten_us], 0);
        assert_eq!(l.classic_of[ten_us + 1], 1);
    }
}
