//! What a sampled cloud flow-RTT metric reports from the same packets (seed 000,
//! `networking.googleapis.com/vm_flow/rtt`): the sampler keeps 1 packet in N and sees
//! nothing else. A sampled data segment leaving the VM notes the ACK number that will
//! acknowledge it (its end); a sampled packet coming back whose ACK number is exactly
//! that gives an RTT sample (seed: "if it also samples an ACKnowledgement for that
//! sequence when the ACK arrives"), with no idea whether the segment was retransmitted.
//! Exact matching, not "the first ACK that covers it", is what both of the seed's
//! runs show: a request is matched only by its own response (the next one acknowledges
//! the next request), so the netperf VM's metric stays at the RTT at every wait; but a
//! response is acknowledged by the bare ACK *and* by every segment of the next request
//! (no new data in between), so a sampler that misses the bare ACK matches the next
//! request and reads the application's response time ("Beyond the standalone ACK
//! timer"; more request segments, more such samples, as its footnote 7 found). Each RTT
//! lands in a coarse exponential histogram whose first bucket is 0–1 ms. A period's
//! median is interpolated inside the bucket that holds it, so when nearly every
//! sample is in 0–1 ms the metric reads 0.5 ms whatever the true RTT is (the seed's
//! 0.1–0.2 ms RTT shown as 0.5 ms).
//!
//! Bucket bounds past the first are not published; rttlab assumes doubling (0, 1, 2,
//! 4, … 65 536 ms, then overflow), which only matters for RTTs above 1 ms.

use super::flow::{FastMap, FlowKey};
use super::seq::before;
use hdrhistogram::Histogram;
use std::collections::VecDeque;

/// `--sampler 1/N[,period=60s][,seed=S]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct SamplerConfig {
    /// Keep one packet in this many (at random).
    pub one_in: u32,
    /// Length of a reporting period (the metric's alignment period).
    pub period_ns: u64,
    /// Seed of the sampling decisions (the same seed samples the same packets).
    pub seed: u64,
}

/// Upper bounds of the buckets, in ms; a last bucket holds everything above.
pub const BOUNDS_MS: [u64; 17] = [
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536,
];

/// One period of the metric. In JSON its percentiles are an object
/// (`"metric_ms": {"p50": …, "p90": …, "p99": …}`, `"exact_p50_ms"`); results written
/// by rttlab 0.1 with flat `median_ms`, `p90_ms`, `p99_ms`, `exact_median_ms` still read.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(into = "PeriodJson", from = "PeriodForms")]
pub struct Period {
    /// Capture time the period starts at, ns since the epoch.
    pub start_ns: u64,
    /// Packets the sampler kept.
    pub sampled_packets: u64,
    /// RTT samples from matched sampled pairs.
    pub samples: u64,
    /// Samples per bucket (`BOUNDS_MS`, then overflow).
    pub buckets: Vec<u64>,
    /// The metric: the median interpolated within its bucket, in ms.
    pub median_ms: Option<f64>,
    /// The 90th percentile, interpolated within its bucket the same way, in ms; `None`
    /// without samples.
    pub p90_ms: Option<f64>,
    /// The 99th percentile, interpolated within its bucket the same way, in ms; `None`
    /// without samples.
    pub p99_ms: Option<f64>,
    /// The exact median of the same samples (to 2 significant digits), in ms: what the
    /// buckets hide.
    pub exact_median_ms: Option<f64>,
}

/// The metric's interpolated percentiles, ms.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
struct MetricMs {
    p50: Option<f64>,
    p90: Option<f64>,
    p99: Option<f64>,
}

/// [`Period`] as JSON.
#[derive(serde::Serialize, serde::Deserialize)]
struct PeriodJson {
    start_ns: u64,
    sampled_packets: u64,
    samples: u64,
    buckets: Vec<u64>,
    metric_ms: MetricMs,
    exact_p50_ms: Option<f64>,
}

/// [`Period`] as rttlab 0.1 wrote it.
#[derive(serde::Deserialize)]
struct PeriodFlat {
    start_ns: u64,
    sampled_packets: u64,
    samples: u64,
    buckets: Vec<u64>,
    median_ms: Option<f64>,
    p90_ms: Option<f64>,
    p99_ms: Option<f64>,
    exact_median_ms: Option<f64>,
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum PeriodForms {
    Json(PeriodJson),
    Flat(PeriodFlat),
}

impl From<Period> for PeriodJson {
    fn from(p: Period) -> Self {
        Self {
            start_ns: p.start_ns,
            sampled_packets: p.sampled_packets,
            samples: p.samples,
            buckets: p.buckets,
            metric_ms: MetricMs {
                p50: p.median_ms,
                p90: p.p90_ms,
                p99: p.p99_ms,
            },
            exact_p50_ms: p.exact_median_ms,
        }
    }
}

impl From<PeriodForms> for Period {
    fn from(f: PeriodForms) -> Self {
        match f {
            PeriodForms::Json(j) => Self {
                start_ns: j.start_ns,
                sampled_packets: j.sampled_packets,
                samples: j.samples,
                buckets: j.buckets,
                median_ms: j.metric_ms.p50,
                p90_ms: j.metric_ms.p90,
                p99_ms: j.metric_ms.p99,
                exact_median_ms: j.exact_p50_ms,
            },
            PeriodForms::Flat(o) => Self {
                start_ns: o.start_ns,
                sampled_packets: o.sampled_packets,
                samples: o.samples,
                buckets: o.buckets,
                median_ms: o.median_ms,
                p90_ms: o.p90_ms,
                p99_ms: o.p99_ms,
                exact_median_ms: o.exact_median_ms,
            },
        }
    }
}

/// The period being filled. Its exact RTTs go to a 2-significant-digit histogram in
/// ns (12 KiB); a finished period keeps only its [`Period`] summary, so memory does
/// not grow with the number of periods beyond a few hundred bytes each.
struct Acc {
    start_ns: u64,
    sampled_packets: u64,
    buckets: [u64; BOUNDS_MS.len() + 1],
    exact: Histogram<u32>,
}

impl Acc {
    fn new(start_ns: u64) -> Self {
        Self {
            start_ns,
            sampled_packets: 0,
            buckets: [0; BOUNDS_MS.len() + 1],
            exact: Histogram::new_with_bounds(1000, 3_600_000_000_000, 2)
                .expect("valid histogram bounds"),
        }
    }

    fn summary(&self) -> Period {
        let n = self.exact.len();
        Period {
            start_ns: self.start_ns,
            sampled_packets: self.sampled_packets,
            samples: n,
            buckets: self.buckets.to_vec(),
            median_ms: bucket_percentile(&self.buckets, 0.5),
            // Where the period's samples resolve them (P90 needs 10, P99 100).
            p90_ms: bucket_percentile(&self.buckets, 0.9)
                .filter(|_| crate::stats::resolves(0.9, n)),
            p99_ms: bucket_percentile(&self.buckets, 0.99)
                .filter(|_| crate::stats::resolves(0.99, n)),
            exact_median_ms: (n > 0).then(|| self.exact.value_at_quantile(0.5) as f64 / 1e6),
        }
    }
}

/// Where percentile `q` of bucket counts falls: the bucket's bounds in ms (the last
/// bucket's upper one `None`), how far into the bucket its rank goes, and the
/// bucket's count.
fn locate(buckets: &[u64], q: f64) -> Option<(f64, Option<f64>, f64, u64)> {
    let n: u64 = buckets.iter().sum();
    let rank = q * n as f64;
    let mut below = 0u64;
    for (i, &c) in buckets.iter().enumerate() {
        if c > 0 && (below + c) as f64 >= rank {
            let lo = if i == 0 { 0 } else { BOUNDS_MS[i - 1] } as f64;
            let hi = BOUNDS_MS.get(i).map(|&b| b as f64);
            return Some((lo, hi, rank - below as f64, c));
        }
        below += c;
    }
    None
}

/// The bucket holding percentile `q` of bucket counts: its bounds in ms, the last
/// bucket's upper one `None` (it has none).
pub fn bucket_holding(buckets: &[u64], q: f64) -> Option<(f64, Option<f64>)> {
    locate(buckets, q).map(|(lo, hi, ..)| (lo, hi))
}

/// Percentile `q` of bucket counts, interpolated linearly inside its bucket, in ms;
/// the overflow bucket, which has no upper bound, reports its lower one.
pub fn bucket_percentile(buckets: &[u64], q: f64) -> Option<f64> {
    locate(buckets, q).map(|(lo, hi, into, c)| hi.map_or(lo, |hi| lo + (hi - lo) * into / c as f64))
}

/// Which bucket an RTT falls in.
fn bucket_of(rtt_ns: u64) -> usize {
    BOUNDS_MS
        .iter()
        .position(|&b| rtt_ns < b * 1_000_000)
        .unwrap_or(BOUNDS_MS.len())
}

/// The sampler: its own view of the flows, from the packets it kept.
pub struct Sampler {
    cfg: SamplerConfig,
    rng: u64,
    /// Sampled data segments' end sequence numbers and times, per flow and sender.
    pending: FastMap<(FlowKey, usize), VecDeque<(u32, u64)>>,
    first_ns: Option<u64>,
    done: Vec<Period>,
    current: Option<Acc>,
}

/// Outstanding sampled segments per flow direction.
const PENDING_CAP: usize = 64;

impl Sampler {
    /// A sampler that has seen nothing yet; its periods start at the first packet's
    /// time. `cfg.period_ns` must not be 0 (packets are divided into periods by it);
    /// a `one_in` of 0 keeps every packet, as 1 does.
    pub fn new(cfg: SamplerConfig) -> Self {
        Self {
            rng: cfg.seed ^ 0x9e37_79b9_7f4a_7c15,
            cfg,
            pending: FastMap::default(),
            first_ns: None,
            done: Vec::new(),
            current: None,
        }
    }

    /// SplitMix64: one draw per packet.
    fn keep(&mut self) -> bool {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        z % u64::from(self.cfg.one_in.max(1)) == 0
    }

    fn acc(&mut self, now: u64) -> &mut Acc {
        let first = *self.first_ns.get_or_insert(now);
        let start = first + (now.saturating_sub(first) / self.cfg.period_ns) * self.cfg.period_ns;
        if self.current.as_ref().is_none_or(|a| a.start_ns != start) {
            if let Some(a) = self.current.take() {
                self.done.push(a.summary());
            }
            // Flows that ended with segments unmatched: memory stays bounded by the
            // flows that sent sampled data in the last period.
            let horizon = now.saturating_sub(self.cfg.period_ns);
            self.pending
                .retain(|_, q| q.back().is_some_and(|&(_, t)| t >= horizon));
        }
        self.current.get_or_insert_with(|| Acc::new(start))
    }

    /// A TCP packet of flow `key` sent by half `d`: `seglen` of sequence space from
    /// `seq`, and `ack` when the ACK flag is set. `data_watched` and `ack_watched` say whether
    /// the metric looks at this direction's data (leaving the VM) and its ACKs (coming
    /// back).
    #[allow(
        clippy::too_many_arguments,
        reason = "a packet's fields as the passive engine decoded them, passed per packet without building a struct"
    )]
    pub fn packet(
        &mut self,
        now: u64,
        key: FlowKey,
        d: usize,
        seq: u32,
        seglen: u32,
        ack: Option<u32>,
        data_watched: bool,
        ack_watched: bool,
    ) {
        if !self.keep() {
            return;
        }
        self.acc(now).sampled_packets += 1;
        // A kept ACK equal to a kept segment's end gives a sample, timed from its first
        // kept copy; segments it covers are done with (cumulative ACKs only grow), and
        // one older than a period is forgotten unmatched.
        if let Some(a) = ack.filter(|_| ack_watched) {
            if let Some(q) = self.pending.get_mut(&(key, 1 - d)) {
                let mut rtt = None;
                while let Some(&(end, t)) = q.front() {
                    if before(a, end) {
                        break;
                    }
                    q.pop_front();
                    if end == a && now.saturating_sub(t) <= self.cfg.period_ns {
                        rtt.get_or_insert(now.saturating_sub(t));
                    }
                }
                if q.is_empty() {
                    self.pending.remove(&(key, 1 - d));
                }
                if let Some(r) = rtt {
                    let acc = self.acc(now);
                    acc.buckets[bucket_of(r)] += 1;
                    acc.exact.saturating_record(r.max(1000));
                }
            }
        }
        if seglen > 0 && data_watched {
            let q = self.pending.entry((key, d)).or_default();
            if q.len() == PENDING_CAP {
                q.pop_front();
            }
            q.push_back((seq.wrapping_add(seglen), now));
        }
    }

    /// The periods so far.
    pub fn periods(&self) -> Vec<Period> {
        let mut v = self.done.clone();
        v.extend(self.current.as_ref().map(Acc::summary));
        v
    }

    /// The configuration it was made with (`--sampler`).
    pub fn config(&self) -> SamplerConfig {
        self.cfg
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passive::flow::Endpoint;

    fn key() -> FlowKey {
        let e = |p| Endpoint::new([10, 0, 0, 1].into(), p);
        FlowKey::of(e(1), e(2)).0
    }

    #[test]
    fn a_sub_millisecond_rtt_reads_as_half_a_millisecond() {
        // Seed 000: TCP measured 0.1–0.2 ms, the metric said 0.5 ms.
        let mut s = Sampler::new(SamplerConfig {
            one_in: 1,
            period_ns: 60_000_000_000,
            seed: 1,
        });
        let mut t = 0u64;
        for i in 0..1000u32 {
            s.packet(t, key(), 0, i * 10, 10, None, true, true);
            t += 150_000;
            s.packet(t, key(), 1, 0, 0, Some(i * 10 + 10), true, true);
            t += 1_000_000;
        }
        let p = &s.periods()[0];
        assert_eq!(p.samples, 1000);
        assert_eq!(p.median_ms, Some(0.5));
        let exact = p.exact_median_ms.unwrap();
        // 2 significant digits: within 1 %.
        assert!((0.1485..0.1515).contains(&exact), "{exact}");
    }

    #[test]
    fn interpolation_by_arithmetic_and_periods_split_by_capture_time() {
        // 10 samples: 4 in 0–1 ms, 6 in 2–4 ms. Median rank 5 is the 1st of 6 in
        // 2–4 ms: 2 + 2 × 1/6.
        let mut b = vec![0u64; BOUNDS_MS.len() + 1];
        b[0] = 4;
        b[2] = 6;
        let m = bucket_percentile(&b, 0.5).unwrap();
        assert!((m - (2.0 + 2.0 / 6.0)).abs() < 1e-9, "{m}");
        assert_eq!(bucket_of(999_999), 0);
        assert_eq!(bucket_of(1_000_000), 1);
        assert_eq!(bucket_of(u64::MAX), BOUNDS_MS.len());
        let mut s = Sampler::new(SamplerConfig {
            one_in: 1,
            period_ns: 1_000,
            seed: 1,
        });
        s.packet(0, key(), 1, 0, 0, None, true, true);
        s.packet(800, key(), 0, 0, 10, None, true, true);
        s.packet(1_200, key(), 1, 0, 0, Some(10), true, true);
        let p = s.periods();
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].samples, p[1].samples), (0, 1));
        assert_eq!(p[1].start_ns, 1_000);
    }

    #[test]
    fn one_in_n_keeps_about_one_in_n_and_no_karn() {
        let mut s = Sampler::new(SamplerConfig {
            one_in: 10,
            period_ns: u64::MAX,
            seed: 7,
        });
        for i in 0..100_000u64 {
            s.packet(i, key(), 0, 0, 0, None, true, true);
        }
        let kept = s.periods()[0].sampled_packets;
        // Binomial(100 000, 0.1): σ ≈ 95; 4σ.
        assert!((9_620..10_380).contains(&kept), "{kept}");
        // A retransmitted segment's ACK is timed from the first sampled copy.
        let mut s = Sampler::new(SamplerConfig {
            one_in: 1,
            period_ns: u64::MAX,
            seed: 1,
        });
        s.packet(0, key(), 0, 0, 10, None, true, true);
        s.packet(200_000_000, key(), 0, 0, 10, None, true, true);
        s.packet(200_100_000, key(), 1, 0, 0, Some(10), true, true);
        assert_eq!(s.periods()[0].buckets[bucket_of(200_100_000)], 1);
    }

    #[test]
    fn a_missed_bare_ack_leaves_the_next_requests_data_to_match() {
        // Seed 000, beyond the ACK timer: per cycle the server's response (d 0), the
        // client's bare ACK 0.1 ms later, then after a 300 ms wait the next request in
        // two segments (d 1), both carrying the same ACK. A kept response is matched
        // when one of those three is kept: 1 − 0.9³ = 0.271 of 2 000 kept responses,
        // about 542 samples, of which the bare ACK is 0.1 / 0.271 = 37 % (arithmetic),
        // so the median is the wait, not the RTT.
        let mut s = Sampler::new(SamplerConfig {
            one_in: 10,
            period_ns: u64::MAX,
            seed: 3,
        });
        let (mut t, mut server, mut client) = (0u64, 0u32, 0u32);
        for _ in 0..20_000 {
            s.packet(t, key(), 1, client, 1448, Some(server), false, true);
            s.packet(
                t + 1_000,
                key(),
                1,
                client + 1448,
                1,
                Some(server),
                false,
                true,
            );
            client += 1449;
            t += 100_000;
            s.packet(t, key(), 0, server, 2, Some(client), true, false);
            server += 2;
            t += 100_000;
            s.packet(t, key(), 1, client, 0, Some(server), false, true);
            t += 300_000_000;
        }
        let p = &s.periods()[0];
        let fast = p.buckets[0] as f64 / p.samples as f64;
        // The requests, seen from the client: only their own response ACKs them
        // exactly, so every sample is the RTT.
        let mut c = Sampler::new(SamplerConfig {
            one_in: 10,
            period_ns: u64::MAX,
            seed: 3,
        });
        let (mut t, mut server, mut client) = (0u64, 0u32, 0u32);
        for _ in 0..20_000 {
            c.packet(t, key(), 1, client, 1, Some(server), true, false);
            client += 1;
            t += 100_000;
            c.packet(t, key(), 0, server, 2, Some(client), false, true);
            server += 2;
            t += 100_000;
            c.packet(t, key(), 1, client, 0, Some(server), true, false);
            t += 300_000_000;
        }
        let q = &c.periods()[0];
        assert!(q.samples > 100, "{q:?}");
        assert_eq!(q.buckets[0], q.samples, "{q:?}");
        assert!((440..650).contains(&p.samples), "{}", p.samples);
        assert!((0.30..0.44).contains(&fast), "{fast}");
        assert!(p.exact_median_ms.unwrap() >= 300.0, "{p:?}");
        // Segments older than a period are forgotten: nothing pending grows.
        let mut s = Sampler::new(SamplerConfig {
            one_in: 1,
            period_ns: 1_000_000,
            seed: 1,
        });
        for i in 0..1_000u32 {
            let e = |p| Endpoint::new([10, 0, 0, 2].into(), p);
            let k = FlowKey::of(e(1000 + i as u16), e(80)).0;
            s.packet(u64::from(i) * 10_000_000, k, 0, 0, 10, None, true, true);
        }
        assert!(s.pending.len() <= 2, "{}", s.pending.len());
    }
}
