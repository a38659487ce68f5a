//! Per-flow, per-direction summaries of the samples (`--summary`), and totals per
//! method and place.
//!
//! A row holds its first [`FEW`] samples exactly; past that it switches to a
//! 2-significant-digit HDR histogram of µs (10 KiB), so thousands of short flows cost
//! little and a long one is bounded.

use super::flow::{Endpoint, FastMap as Map, FlowEnd, FlowKey};
use super::{Method, Place, Sample, Sink};
use crate::stats::{resolves, LatencyHistogram};
use hdrhistogram::Histogram;

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

impl Acc {
    fn new(place: Place) -> Self {
        Self {
            place,
            count: 0,
            min: u64::MAX,
            max: 0,
            sum: 0,
            rec: Recorder::Few(Vec::new()),
        }
    }

    fn record(&mut self, ns: u64) {
        self.count += 1;
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
        self.sum += u128::from(ns);
        self.rec.record(ns);
    }

    fn rtt(&mut self, host: Endpoint, peer: Endpoint, method: Method) -> FlowRtt {
        FlowRtt {
            host: host.socket_addr().to_string(),
            peer: peer.socket_addr().to_string(),
            method,
            place: self.place,
            samples: self.count,
            min_us: us(self.min),
            mean_us: self.sum as f64 / self.count as f64 / 1e3,
            p50_us: us(self.rec.quantile(0.5)),
            p90_us: resolves(0.9, self.count).then(|| us(self.rec.quantile(0.9))),
            p99_us: resolves(0.99, self.count).then(|| us(self.rec.quantile(0.99))),
            max_us: us(self.max),
        }
    }
}

/// One flow direction's samples by one method: over a whole flow (in a [`Row`]) or
/// over one interval (in an [`Interval`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FlowRtt {
    /// The host whose answers closed the loops.
    pub host: String,
    /// The other end (it sent the data or TSvals being answered).
    pub peer: String,
    /// Which loop was timed: TSval → TSecr, or data → ACK.
    pub method: Method,
    /// Whether the loops crossed the network or were the capture host's own answers.
    pub place: Place,
    /// RTT samples counted.
    pub samples: u64,
    /// Smallest RTT, µs (exact).
    pub min_us: f64,
    /// Mean RTT, µs (exact).
    pub mean_us: f64,
    /// Median RTT, µs: exact (nearest rank) up to [`FEW`] samples, from a
    /// 2-significant-digit histogram of µs beyond.
    pub p50_us: f64,
    /// 90th-percentile RTT, µs (exact or from the histogram, as `p50_us`); `None` under
    /// the 10 samples that resolve it (`stats::resolves`).
    pub p90_us: Option<f64>,
    /// 99th-percentile RTT, µs (exact or from the histogram, as `p50_us`); `None` under
    /// 100 samples.
    pub p99_us: Option<f64>,
    /// Largest RTT, µs (exact).
    pub max_us: f64,
}

/// One flow direction's samples by one method over the whole flow, with what the
/// flow's sequence numbers say of the data being answered.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// The RTT statistics; flattened, so their keys sit at the top level of the row's JSON.
    #[serde(flatten)]
    pub rtt: FlowRtt,
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
    /// Which loop was timed: TSval → TSecr, or data → ACK.
    pub method: Method,
    /// Network loops or the capture host's own answers (kept apart).
    pub place: Place,
    /// Samples of this method and place over every flow.
    pub samples: u64,
    /// Smallest RTT, µs (exact); `None` with no sample.
    pub min_us: Option<f64>,
    /// Median RTT, µs, from the totals' HDR histogram; `None` with no sample.
    pub p50_us: Option<f64>,
    /// 90th-percentile RTT, µs, from the totals' HDR histogram; `None` under the 10
    /// samples that resolve it.
    pub p90_us: Option<f64>,
    /// 99th-percentile RTT, µs, from the totals' HDR histogram; `None` under 100.
    pub p99_us: Option<f64>,
    /// Largest RTT, µs (exact); `None` with no sample.
    pub max_us: Option<f64>,
}

/// Collects rows as flows finish, and totals.
#[derive(Default)]
pub struct Summary {
    open: Map<(FlowKey, Endpoint, Method), Acc>,
    rows: Vec<Row>,
    totals: Map<(Method, Place), LatencyHistogram>,
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
                p90_us: h.resolved_quantile_ns(0.9).map(us),
                p99_us: h.resolved_quantile_ns(0.99).map(us),
                max_us: h.max_ns().map(us),
            })
            .collect();
        totals.sort_by_key(|t| (t.method, t.place == Place::LocalHost));
        self.rows.sort_by(|a, b| {
            (&a.rtt.host, &a.rtt.peer, a.rtt.method).cmp(&(&b.rtt.host, &b.rtt.peer, b.rtt.method))
        });
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
        self.open
            .entry((key, s.host, s.method))
            .or_insert_with(|| Acc::new(s.place))
            .record(s.rtt_ns);
        self.totals
            .entry((s.method, s.place))
            .or_default()
            .record_ns(s.rtt_ns);
    }

    fn flow_done(&mut self, f: &FlowEnd) {
        for d in 0..2 {
            let host = f.key.sender(d);
            let peer = f.key.sender(1 - d);
            let sent = &f.halves[1 - d];
            for method in [Method::Ts, Method::Seq] {
                let Some(mut a) = self.open.remove(&(f.key, host, method)) else {
                    continue;
                };
                self.rows.push(Row {
                    rtt: a.rtt(host, peer, method),
                    retransmissions: sent.retransmissions,
                    spurious_retransmissions: sent.spurious,
                    out_of_order: sent.out_of_order,
                });
            }
        }
    }
}

/// The rows of one finished interval `[start_ns, end_ns)` of capture time.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Interval {
    /// Start of the interval, capture time in ns since the epoch (a multiple of the
    /// interval's length).
    pub start_ns: u64,
    /// End of the interval (excluded): `start_ns` plus the interval's length.
    pub end_ns: u64,
    /// One row per host, peer and method with samples in the interval, sorted by them.
    pub rows: Vec<FlowRtt>,
}

/// Per-flow summaries of every interval of capture time (`--summary-interval`, pping's
/// `--sumInt`). Intervals are aligned to multiples of their length since the epoch and
/// driven by the samples' own timestamps (and [`IntervalSummary::tick`] for a live
/// capture that goes quiet), so a file and a live interface give the same intervals;
/// an interval with no sample gives no rows.
pub struct IntervalSummary {
    len_ns: u64,
    /// Start of the interval being collected.
    start_ns: Option<u64>,
    open: Map<(Endpoint, Endpoint, Method), Acc>,
}

impl IntervalSummary {
    /// Intervals of `len_ns` (at least 1).
    pub fn new(len_ns: u64) -> Self {
        Self {
            len_ns: len_ns.max(1),
            start_ns: None,
            open: Map::default(),
        }
    }

    /// Record `s`; returns the interval that ended before it, if one did.
    pub fn sample(&mut self, s: &Sample) -> Option<Interval> {
        let done = self.tick(s.ts_ns);
        let start = s.ts_ns - s.ts_ns % self.len_ns;
        self.start_ns.get_or_insert(start);
        self.open
            .entry((s.host, s.peer, s.method))
            .or_insert_with(|| Acc::new(s.place))
            .record(s.rtt_ns);
        done
    }

    /// The capture clock reads `now_ns`: the interval being collected, if it ended
    /// before `now_ns`, is returned (samples later than `now_ns` start the next).
    pub fn tick(&mut self, now_ns: u64) -> Option<Interval> {
        let start = self.start_ns?;
        (now_ns >= start + self.len_ns).then(|| self.close())
    }

    /// The interval being collected, however far it got (at the end of the input).
    pub fn finish(&mut self) -> Option<Interval> {
        self.start_ns.map(|_| self.close())
    }

    fn close(&mut self) -> Interval {
        let start_ns = self.start_ns.take().unwrap_or(0);
        let mut rows: Vec<FlowRtt> = self
            .open
            .drain()
            .map(|((host, peer, method), mut a)| a.rtt(host, peer, method))
            .collect();
        rows.sort_by(|a, b| (&a.host, &a.peer, a.method).cmp(&(&b.host, &b.peer, b.method)));
        Interval {
            start_ns,
            end_ns: start_ns + self.len_ns,
            rows,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ts_ns: u64, rtt_us: u64, host_port: u16) -> Sample {
        let ep = |port| Endpoint::new("198.18.0.1".parse().unwrap(), port);
        Sample {
            ts_ns,
            rtt_ns: rtt_us * 1000,
            min_ns: rtt_us * 1000,
            method: Method::Ts,
            host: ep(host_port),
            peer: ep(9),
            place: Place::Network,
            pping: None,
        }
    }

    /// Witness: arithmetic on samples placed in known intervals.
    #[test]
    fn intervals_are_aligned_cut_by_sample_time_and_hold_their_own_samples() {
        const S: u64 = 1_000_000_000;
        let mut iv = IntervalSummary::new(S);
        assert_eq!(iv.tick(100 * S), None);
        assert_eq!(iv.sample(&at(100 * S + 10, 100, 1)), None);
        assert_eq!(iv.sample(&at(100 * S + 20, 300, 1)), None);
        assert_eq!(iv.sample(&at(100 * S + 30, 50, 2)), None);
        assert_eq!(iv.tick(101 * S - 1), None);
        // 101.5 s: the interval [100 s, 101 s) is over.
        let done = iv.sample(&at(101 * S + S / 2, 7, 1)).unwrap();
        assert_eq!((done.start_ns, done.end_ns), (100 * S, 101 * S));
        assert_eq!(done.rows.len(), 2);
        let r = &done.rows[0];
        assert_eq!(
            (r.samples, r.min_us, r.max_us, r.mean_us),
            (2, 100.0, 300.0, 200.0)
        );
        assert_eq!(done.rows[1].samples, 1);
        // A quiet capture: a tick past the end closes [101 s, 102 s) with its one sample.
        let done = iv.tick(103 * S).unwrap();
        assert_eq!((done.start_ns, done.rows[0].samples), (101 * S, 1));
        assert_eq!(iv.finish(), None);
        // The gap: the next sample, at 105.2 s, starts [105 s, 106 s).
        iv.sample(&at(105 * S + S / 5, 9, 1));
        let last = iv.finish().unwrap();
        assert_eq!(
            (last.start_ns, last.end_ns, last.rows[0].max_us),
            (105 * S, 106 * S, 9.0)
        );
    }

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
