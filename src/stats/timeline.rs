//! Samples of several layers on one time axis, in bins, with each bin's median and
//! largest: a spike at one layer lines up with what the others saw at the same moment
//! (`compare`'s time series, as Flent plots every test on one time axis). A bin's
//! P99 is kept only where it holds the 100 samples that resolve one
//! (`stats::resolves`): a bin of ten has no P99, only a maximum.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The samples one timeline keeps (8 bytes each: 8 MiB); later ones are counted, not
/// kept.
pub const MAX_SAMPLES: usize = 1_000_000;

/// One layer's samples by time bin.
#[derive(Clone, Debug)]
pub struct Timeline {
    start_unix_ns: u64,
    bin_ns: u64,
    /// Each bin's round trips, ns.
    bins: Vec<Vec<u64>>,
    kept: usize,
    /// Samples past [`MAX_SAMPLES`], or outside `[start, start + bins × bin)`.
    pub dropped: u64,
}

/// One bin of a timeline: its middle (seconds from the start) and its statistics.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimePoint {
    /// The bin's middle, seconds from the timeline's start.
    pub t_s: f64,
    /// Round trips kept in the bin.
    pub samples: u64,
    /// The bin's median round trip, µs (nearest rank).
    pub p50_us: f64,
    /// The bin's P99 round trip, µs (nearest rank); `None` under 100 samples.
    pub p99_us: Option<f64>,
    /// The bin's largest round trip, µs (absent in results written before it).
    #[serde(default)]
    pub max_us: Option<f64>,
}

/// The bin width for a run of `duration` sampled every `interval`: about 60 bins, each
/// holding at least five samples of a layer that samples once per `interval`, at
/// least 10 ms, rounded up to 1, 2 or 5 times a power of ten.
pub fn bin_for(duration: Duration, interval: Duration) -> Duration {
    let want = (duration.as_secs_f64() / 60.0)
        .max(interval.as_secs_f64() * 5.0)
        .max(0.010);
    let mag = 10f64.powf(want.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|&s| s >= want * (1.0 - 1e-9))
        .unwrap_or(mag * 10.0);
    Duration::from_secs_f64(step)
}

impl Timeline {
    /// Bins of `bin` from `start_unix_ns`, enough to hold `span`.
    pub fn new(start_unix_ns: u64, bin: Duration, span: Duration) -> Self {
        let bin_ns = crate::stats::units::ns(bin).max(1);
        let n = crate::stats::units::ns(span).div_ceil(bin_ns);
        Self {
            start_unix_ns,
            bin_ns,
            bins: vec![Vec::new(); usize::try_from(n.max(1)).unwrap_or(1).min(100_000)],
            kept: 0,
            dropped: 0,
        }
    }

    /// A round trip of `rtt_ns` that ended at `at_unix_ns` (CLOCK_REALTIME).
    pub fn record(&mut self, at_unix_ns: u64, rtt_ns: u64) {
        let bin = at_unix_ns
            .checked_sub(self.start_unix_ns)
            .and_then(|d| usize::try_from(d / self.bin_ns).ok())
            .filter(|&i| i < self.bins.len());
        match bin {
            Some(i) if self.kept < MAX_SAMPLES => {
                self.bins[i].push(rtt_ns);
                self.kept += 1;
            }
            _ => self.dropped += 1,
        }
    }

    /// Each bin with samples: its middle, count, median, P99 (nearest rank, where the
    /// bin resolves it) and largest.
    pub fn points(&self) -> Vec<TimePoint> {
        let half = self.bin_ns as f64 / 2e9;
        self.bins
            .iter()
            .enumerate()
            .filter(|(_, b)| !b.is_empty())
            .map(|(i, b)| {
                let mut v = b.clone();
                v.sort_unstable();
                let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
                TimePoint {
                    t_s: i as f64 * self.bin_ns as f64 / 1e9 + half,
                    samples: v.len() as u64,
                    p50_us: rank(0.5) as f64 / 1e3,
                    p99_us: super::resolves(0.99, v.len() as u64).then(|| rank(0.99) as f64 / 1e3),
                    max_us: v.last().map(|&m| m as f64 / 1e3),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_are_round_and_hold_samples() {
        let ms = Duration::from_millis;
        assert_eq!(bin_for(Duration::from_secs(10), ms(10)), ms(200));
        assert_eq!(bin_for(Duration::from_secs(60), ms(10)), ms(1000));
        assert_eq!(bin_for(Duration::from_secs(1), Duration::ZERO), ms(20));
        assert_eq!(bin_for(Duration::from_secs(3), ms(100)), ms(500));
    }

    /// Witness: arithmetic on samples placed by hand.
    #[test]
    fn each_bin_has_its_own_median_and_p99() {
        let start = 1_000_000_000_000;
        let mut t = Timeline::new(start, Duration::from_millis(100), Duration::from_secs(1));
        for i in 1..=100u64 {
            // Bin 0: 1..=100 µs; bin 3: one spike of 5 ms among 99 of 50 µs.
            t.record(start + 10_000_000, i * 1_000);
            let rtt = if i == 50 { 5_000_000 } else { 50_000 };
            t.record(start + 350_000_000, rtt);
        }
        t.record(start - 1, 1);
        t.record(start + 2_000_000_000, 1);
        assert_eq!(t.dropped, 2);
        let p = t.points();
        assert_eq!(p.len(), 2);
        assert_eq!(
            (
                p[0].t_s,
                p[0].samples,
                p[0].p50_us,
                p[0].p99_us,
                p[0].max_us
            ),
            (0.05, 100, 50.0, Some(99.0), Some(100.0))
        );
        assert!((p[1].t_s - 0.35).abs() < 1e-9);
        // The spike is the single largest of 100: above P99 by nearest rank, at the max.
        assert_eq!(
            (p[1].p50_us, p[1].p99_us, p[1].max_us),
            (50.0, Some(50.0), Some(5_000.0))
        );
        // Ten samples resolve no P99: the spike is their maximum, named so.
        let mut ten = Timeline::new(start, Duration::from_millis(100), Duration::from_secs(1));
        for i in 0..10u64 {
            ten.record(start, if i == 9 { 5_000_000 } else { 50_000 });
        }
        assert_eq!(ten.points()[0].p99_us, None);
        assert_eq!(ten.points()[0].max_us, Some(5_000.0));
    }
}
