//! Per-flow, per-direction summaries of the samples (`--summary`), and totals per
//! method and place.
//!
//! A row holds its first [`FEW`] samples exactly; past that it switches to a
//! 2-significant-digit HDR histogram of µs (10 KiB), so thousands of short flows cost
//! little and a long one is bounded.

use super::flow::{Endpoint, Flow, FlowKey};
use super::{Method, Place, Sample, Sink};
use crate::stats::LatencyHistogram;
use hdrhistogram::Histogram;
use std::collections::HashMap;

/// Exact samples kept per row before it becomes a histogram.
pub const FEW: usize = 256;

enum Recorder {
    Few(Vec<u64>),
    Many(Box<Histogram<u32>>),
}

impl Recorder {
    fn record(&mut self, ns: u64) {
        match self {
            Self::Few(v) if v.len() < FEW => v.push(ns),
            Self::Few(v) => {
                let mut h = Histogram::<u32>::new_with_bounds(1, 3_600_000_000, 2)
                    .expect("valid histogram bounds");
                for &x in v.iter() {
                    h.saturating_record((x / 1000).max(1));
                }
                h.saturating_record((ns / 1000).max(1));
                *self = Self::Many(Box::new(h));
            }
            Self::Many(h) => h.saturating_record((ns / 1000).max(1)),
        }
    }

    /// Nearest-rank quantile in ns.
    fn quantile(&mut self, q: f64) -> u64 {
        match self {
            Self::Few(v) => {
                v.sort_unstable();
                let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
                v[rank - 1]
            }
            Self::Many(h) => h.value_at_quantile(q) * 1000,
        }
    }
}

struct Acc {
    place: Place,
    count: u64,
    min: u64,
    max: u64,
    sum: u128,
    rec: Recorder,
}

/// One flow direction's samples by one method.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// The host whose answers closed the loops.
    pub host: String,
    /// The other end (it sent the data or TSvals being answered).
    pub peer: String,
    pub method: Method,
    pub place: Place,
    pub samples: u64,
    pub min_us: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// Segments the peer sent more than once (seen at the capture point).
    pub retransmissions: u64,
    /// Retransmissions of data the host had already acknowledged.
    pub spurious_retransmissions: u64,
    /// Segments from the peer that arrived behind later ones.
    pub out_of_order: u64,
}

/// Totals over every flow for one method and place.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Total {
    pub method: Method,
    pub place: Place,
    pub samples: u64,
    pub min_us: Option<f64>,
    pub p50_us: Option<f64>,
    pub p90_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub max_us: Option<f64>,
}

/// Collects rows as flows finish, and totals.
#[derive(Default)]
pub struct Summary {
    open: HashMap<(FlowKey, Endpoint, Method), Acc>,
    rows: Vec<Row>,
    totals: HashMap<(Method, Place), LatencyHistogram>,
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

impl Summary {
    /// Rows of finished flows, and totals (call after [`super::Analyzer::finish`]).
    pub fn finish(mut self) -> (Vec<Row>, Vec<Total>) {
        let mut totals: Vec<Total> = self
            .totals
            .drain()
            .map(|((method, place), h)| Total {
                method,
                place,
                samples: h.count(),
                min_us: h.min_ns().map(us),
                p50_us: h.quantile_ns(0.5).map(us),
                p90_us: h.quantile_ns(0.9).map(us),
                p99_us: h.quantile_ns(0.99).map(us),
                max_us: h.max_ns().map(us),
            })
            .collect();
        totals.sort_by_key(|t| (t.method, t.place == Place::LocalHost));
        self.rows
            .sort_by(|a, b| (&a.host, &a.peer, a.method).cmp(&(&b.host, &b.peer, b.method)));
        (self.rows, totals)
    }

    /// The totals' histogram for `method` and `place`.
    pub fn histogram(&self, method: Method, place: Place) -> Option<&LatencyHistogram> {
        self.totals.get(&(method, place))
    }
}

impl Sink for Summary {
    fn sample(&mut self, s: &Sample) {
        let (key, _) = FlowKey::of(s.host, s.peer);
        let a = self
            .open
            .entry((key, s.host, s.method))
            .or_insert_with(|| Acc {
                place: s.place,
                count: 0,
                min: u64::MAX,
                max: 0,
                sum: 0,
                rec: Recorder::Few(Vec::new()),
            });
        a.count += 1;
        a.min = a.min.min(s.rtt_ns);
        a.max = a.max.max(s.rtt_ns);
        a.sum += u128::from(s.rtt_ns);
        a.rec.record(s.rtt_ns);
        self.totals
            .entry((s.method, s.place))
            .or_default()
            .record_ns(s.rtt_ns);
    }

    fn flow_done(&mut self, f: &Flow) {
        for d in 0..2 {
            let host = f.key.sender(d);
            let peer = f.key.sender(1 - d);
            let sent = &f.halves[1 - d].seq;
            for method in [Method::Ts, Method::Seq] {
                let Some(mut a) = self.open.remove(&(f.key, host, method)) else {
                    continue;
                };
                self.rows.push(Row {
                    host: host.to_string(),
                    peer: peer.to_string(),
                    method,
                    place: a.place,
                    samples: a.count,
                    min_us: us(a.min),
                    mean_us: a.sum as f64 / a.count as f64 / 1e3,
                    p50_us: us(a.rec.quantile(0.5)),
                    p90_us: us(a.rec.quantile(0.9)),
                    p99_us: us(a.rec.quantile(0.99)),
                    max_us: us(a.max),
                    retransmissions: sent.retransmissions,
                    spurious_retransmissions: sent.spurious,
                    out_of_order: sent.out_of_order,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn few_samples_are_exact_and_many_stay_within_one_percent() {
        let mut r = Recorder::Few(Vec::new());
        for x in 1..=100u64 {
            r.record(x * 1000);
        }
        assert_eq!(r.quantile(0.5), 50_000);
        assert_eq!(r.quantile(0.99), 99_000);
        let mut r = Recorder::Few(Vec::new());
        for x in 1..=10_000u64 {
            r.record(x * 1000);
        }
        assert!(matches!(r, Recorder::Many(_)));
        let p50 = r.quantile(0.5) as f64;
        assert!((p50 / 5_000_000.0 - 1.0).abs() < 0.01, "{p50}");
    }
}
