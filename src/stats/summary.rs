//! `Summary`: the numbers a result reports, in microseconds (netperf's unit).

use super::LatencyHistogram;
use serde::Serialize;
use std::fmt;

/// A percentile such as 99.9, named the way netperf's selectors name it (`P999`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Percentile(pub f64);

/// Percentiles every summary carries: P50, P90, P99, P99.9.
pub const DEFAULT_PERCENTILES: [Percentile; 4] = [
    Percentile(50.0),
    Percentile(90.0),
    Percentile(99.0),
    Percentile(99.9),
];

impl Percentile {
    /// The digits of the percentile without the dot: 50 → "50", 99.9 → "999", 99.99 → "9999".
    pub fn digits(self) -> String {
        let s = format!("{}", self.0);
        s.replace('.', "")
    }

    /// A percentile as a selector names it: the digits form ([`from_digits`]) or with its
    /// dot, "99.99" (0 to 100).
    ///
    /// [`from_digits`]: Percentile::from_digits
    pub fn from_name(name: &str) -> Option<Percentile> {
        if name.contains('.') {
            let v: f64 = name.parse().ok()?;
            return (0.0..=100.0).contains(&v).then_some(Percentile(v));
        }
        Self::from_digits(name)
    }

    /// Parse the digits form back: "50" → 50, "999" → 99.9, "9999" → 99.99.
    ///
    /// A leading "99" followed by more digits is read as 99.x, as netperf's P99 and our
    /// P999 are; one- and two-digit forms are whole percentiles.
    pub fn from_digits(digits: &str) -> Option<Percentile> {
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let v: f64 = if digits.len() <= 2 || digits == "100" {
            digits.parse().ok()?
        } else {
            format!("{}.{}", &digits[..2], &digits[2..]).parse().ok()?
        };
        (0.0..=100.0).contains(&v).then_some(Percentile(v))
    }
}

impl fmt::Display for Percentile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "P{}", self.0)
    }
}

impl Serialize for Percentile {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("p{}", self.digits()))
    }
}

/// Statistics of one set of samples, in microseconds. `None` when there were no samples.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Summary {
    /// How many samples were recorded.
    pub samples: u64,
    /// The smallest sample, exact, µs.
    pub min_us: Option<f64>,
    /// The largest sample, exact, µs.
    pub max_us: Option<f64>,
    /// The arithmetic mean, exact, µs.
    pub mean_us: Option<f64>,
    /// The population standard deviation (netperf's STDDEV_LATENCY form), µs.
    pub stddev_us: Option<f64>,
    /// (percentile, value in µs) for each requested percentile, `None` where the
    /// samples cannot resolve it (`histogram::resolves`: P99 needs 100); in JSON an
    /// object keyed by name (`{"p50": 78.1, "p999": null}`), in the order asked for;
    /// empty without samples.
    #[serde(serialize_with = "percentile_object")]
    pub percentiles_us: Vec<(Percentile, Option<f64>)>,
}

/// Percentiles as one JSON object, so `jq .rtt.percentiles_us.p99` reads one.
fn percentile_object<S: serde::Serializer>(
    v: &[(Percentile, Option<f64>)],
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(Some(v.len()))?;
    for (p, value) in v {
        m.serialize_entry(p, value)?;
    }
    m.end()
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

impl Summary {
    /// Summarise `h` with the given percentiles.
    pub fn from_histogram(h: &LatencyHistogram, percentiles: &[Percentile]) -> Self {
        Self {
            samples: h.count(),
            min_us: h.min_ns().map(us),
            max_us: h.max_ns().map(us),
            mean_us: h.mean_ns().map(|v| v / 1000.0),
            stddev_us: h.stddev_ns().map(|v| v / 1000.0),
            percentiles_us: if h.count() == 0 {
                Vec::new()
            } else {
                percentiles
                    .iter()
                    .map(|&p| (p, h.resolved_quantile_ns(p.0 / 100.0).map(us)))
                    .collect()
            },
        }
    }

    /// The value of percentile `p`: `None` if it was not asked for, `Some(None)` if
    /// the samples cannot resolve it.
    pub fn percentile_us(&self, p: Percentile) -> Option<Option<f64>> {
        self.percentiles_us
            .iter()
            .find(|(q, _)| (q.0 - p.0).abs() < 1e-9)
            .map(|&(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_names_round_trip() {
        for (p, d) in [
            (50.0, "50"),
            (90.0, "90"),
            (99.0, "99"),
            (99.9, "999"),
            (99.99, "9999"),
            (100.0, "100"),
            (5.0, "5"),
        ] {
            assert_eq!(Percentile(p).digits(), d);
            assert_eq!(Percentile::from_digits(d), Some(Percentile(p)), "{d}");
        }
        assert_eq!(Percentile::from_digits("x9"), None);
        assert_eq!(Percentile::from_digits(""), None);
    }

    #[test]
    fn summary_in_microseconds() {
        let mut h = LatencyHistogram::new();
        for v in 1..=1000u64 {
            h.record_ns(v * 1000);
        }
        let s = Summary::from_histogram(&h, &DEFAULT_PERCENTILES);
        assert_eq!(s.samples, 1000);
        assert_eq!(s.min_us, Some(1.0));
        assert_eq!(s.max_us, Some(1000.0));
        assert_eq!(s.mean_us, Some(500.5));
        let p99 = s.percentile_us(Percentile(99.0)).flatten().unwrap();
        assert!((p99 - 990.0).abs() <= 1.0, "{p99}");
        // 1 000 samples resolve P99.9; 999 do not (its nearest rank is their maximum).
        assert!(s.percentile_us(Percentile(99.9)).flatten().is_some());
        h = LatencyHistogram::new();
        for v in 1..=999u64 {
            h.record_ns(v * 1000);
        }
        let s = Summary::from_histogram(&h, &DEFAULT_PERCENTILES);
        assert_eq!(s.percentile_us(Percentile(99.9)), Some(None));
        assert!(s.percentile_us(Percentile(99.0)).flatten().is_some());
        assert_eq!(s.percentile_us(Percentile(12.0)), None);
        let empty = Summary::from_histogram(&LatencyHistogram::new(), &DEFAULT_PERCENTILES);
        assert_eq!(empty.samples, 0);
        assert!(empty.mean_us.is_none() && empty.percentiles_us.is_empty());
    }
}
