//! What one direction of the emulated link does to a frame, as a pure function of the
//! frame's arrival time: the blackout, loss, queue and rate decisions and the time the
//! frame leaves. No sockets here, so every rule is tested with synthetic clocks.
//!
//! The link is modelled as netem + tbf on a router, as in seeds 002/003: a frame is
//! (1) dropped if it arrives inside a blackout window, (2) lost with the configured
//! probability (Bernoulli, or Gilbert–Elliott bursts as netem's `gemodel`), (3) dropped
//! if the drop-tail queue in front of the rate limiter is full, (4) serialised at the
//! configured rate after the frames queued before it, then (5) held for the one-way
//! delay plus jitter. Without `reorder`, jitter never lets a frame overtake the one
//! before it (its release is at least the previous release), as a real FIFO link.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::time::Duration;

/// How frames are lost at random.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "model", rename_all = "snake_case")]
pub enum Loss {
    /// No random loss.
    #[default]
    None,
    /// Each frame lost independently with probability `p`.
    Bernoulli {
        /// The probability a frame is lost, 0 to 1 (`--loss`).
        p: f64,
    },
    /// Gilbert–Elliott (netem `loss gemodel p r 1-h 1-k`): a good and a bad state;
    /// `p` = P(good→bad), `r` = P(bad→good) per frame; a frame is lost with
    /// probability `loss_bad` in the bad state and `loss_good` in the good one.
    GilbertElliott {
        /// Probability, per frame, of moving from the good state to the bad, 0 to 1.
        p: f64,
        /// Probability, per frame, of moving from the bad state to the good, 0 to 1.
        r: f64,
        /// Probability a frame is lost in the bad state (netem's 1-h; `--gemodel`
        /// gives 1 when it is left out).
        loss_bad: f64,
        /// Probability a frame is lost in the good state (netem's 1-k; `--gemodel`
        /// gives 0 when it is left out).
        loss_good: f64,
    },
}

impl Loss {
    /// The long-run loss rate.
    pub fn mean(&self) -> f64 {
        match *self {
            Loss::None => 0.0,
            Loss::Bernoulli { p } => p,
            Loss::GilbertElliott {
                p,
                r,
                loss_bad,
                loss_good,
            } => {
                if p + r == 0.0 {
                    loss_good
                } else {
                    let bad = p / (p + r);
                    bad * loss_bad + (1.0 - bad) * loss_good
                }
            }
        }
    }
}

/// The drop-tail limit of the queue in front of the rate limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueLimit {
    /// At most this many bytes queued (frame lengths, the frame in service included).
    Bytes(u64),
    /// At most this many frames queued.
    Packets(u64),
}

impl Default for QueueLimit {
    /// 1000 frames: netem's and a veth's default `limit`/txqueuelen.
    fn default() -> Self {
        QueueLimit::Packets(1000)
    }
}

/// How jitter is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum JitterDist {
    /// Uniform in delay ± jitter (netem's default).
    #[default]
    Uniform,
    /// Normal with standard deviation `jitter`, cut at delay ± 3·jitter.
    Normal,
}

/// The impairments of one direction. All times in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Impairments {
    /// One-way delay.
    pub delay_ns: u64,
    /// Jitter around the delay (never below zero total delay).
    pub jitter_ns: u64,
    /// How the jitter is drawn (`--jitter-dist`).
    pub jitter_dist: JitterDist,
    /// Let jittered frames overtake each other.
    pub reorder: bool,
    /// How frames are lost at random (`--loss` or `--gemodel`).
    pub loss: Loss,
    /// Serialisation rate in bit/s (`None`: as fast as frames come).
    pub rate_bps: Option<u64>,
    /// The drop-tail queue in front of the rate limiter (`--queue`); it applies only
    /// with a rate.
    pub queue: QueueLimit,
}

/// A change to some impairments; fields left `None` keep their value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct ImpairmentPatch {
    /// New one-way delay, ns (`--delay`).
    pub delay_ns: Option<u64>,
    /// New jitter around the delay, ns (`--jitter`).
    pub jitter_ns: Option<u64>,
    /// New jitter distribution (`--jitter-dist`).
    pub jitter_dist: Option<JitterDist>,
    /// Whether jittered frames may now overtake each other (`--reorder`).
    pub reorder: Option<bool>,
    /// New random loss (`--loss`, `--gemodel`; `--loss 0` gives [`Loss::None`]).
    pub loss: Option<Loss>,
    /// `Some(None)` removes the rate limit.
    pub rate_bps: Option<Option<u64>>,
    /// New queue limit in front of the rate limiter (`--queue`).
    pub queue: Option<QueueLimit>,
}

impl ImpairmentPatch {
    /// Apply to `imp`.
    pub fn apply(&self, imp: &mut Impairments) {
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = self.$f { imp.$f = v; } )* };
        }
        set!(
            delay_ns,
            jitter_ns,
            jitter_dist,
            reorder,
            loss,
            rate_bps,
            queue
        );
    }

    /// True if nothing changes.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Invalid impairment values.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ImpairError {
    /// A loss probability is below 0 or above 1.
    #[error("{what} {value} is outside 0–100 %")]
    Probability {
        /// Which probability: `loss`, `gemodel p`, `gemodel r`, or a gemodel state's
        /// loss.
        what: &'static str,
        /// The value given, in percent.
        value: f64,
    },
    /// A rate of 0 bit/s.
    #[error("a rate of 0 bit/s forwards nothing; give a positive rate or none")]
    ZeroRate,
    /// A queue limit of 0 bytes or 0 frames.
    #[error("a queue limit of 0 drops everything; use a blackout for that")]
    ZeroQueue,
    /// Delay plus jitter is over [`MAX_DELAY_NS`]; holds the delay alone, ms.
    #[error("delay {0} ms is over the 60 s the emulator holds frames")]
    DelayTooLong(f64),
}

/// The longest delay (plus jitter) the emulator accepts.
pub const MAX_DELAY_NS: u64 = 60_000_000_000;

impl Impairments {
    /// A path of round-trip delay `rtt`, split evenly between the two directions (each
    /// direction's emulator delays by half; an odd nanosecond goes to neither), and no
    /// other impairment. Every `--lab-rtt` becomes the lab's delay here and only here.
    pub fn with_rtt(rtt: Duration) -> Self {
        Self {
            delay_ns: u64::try_from(rtt.as_nanos() / 2).unwrap_or(u64::MAX),
            ..Self::default()
        }
    }

    /// Check every value.
    ///
    /// # Errors
    /// A probability outside [0, 1], a zero rate or queue, a delay over a minute.
    pub fn validate(&self) -> Result<(), ImpairError> {
        let prob = |what, v: f64| {
            if (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err(ImpairError::Probability {
                    what,
                    value: v * 100.0,
                })
            }
        };
        match self.loss {
            Loss::None => {}
            Loss::Bernoulli { p } => prob("loss", p)?,
            Loss::GilbertElliott {
                p,
                r,
                loss_bad,
                loss_good,
            } => {
                prob("gemodel p", p)?;
                prob("gemodel r", r)?;
                prob("gemodel loss in the bad state", loss_bad)?;
                prob("gemodel loss in the good state", loss_good)?;
            }
        }
        if self.rate_bps == Some(0) {
            return Err(ImpairError::ZeroRate);
        }
        if matches!(self.queue, QueueLimit::Bytes(0) | QueueLimit::Packets(0)) {
            return Err(ImpairError::ZeroQueue);
        }
        if self.delay_ns.saturating_add(self.jitter_ns) > MAX_DELAY_NS {
            return Err(ImpairError::DelayTooLong(self.delay_ns as f64 / 1e6));
        }
        Ok(())
    }
}

/// A window in which frames are dropped: all of them, or those of one TCP/UDP port
/// (source or destination). Times are CLOCK_REALTIME nanoseconds, the clock of packet
/// captures, so a blackout can be lined up with a pcap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blackout {
    /// The first instant dropped (the request's time, or later with `lab set --at`).
    pub start_ns: u64,
    /// The end, not included: the start plus the blackout's length (`--blackout`).
    pub end_ns: u64,
    /// The TCP/UDP port whose frames are dropped (`--port`); None: every frame. With a
    /// port, frames without ports are forwarded.
    pub port: Option<u16>,
}

impl Blackout {
    /// Whether a frame arriving at `t` with `ports` falls inside.
    pub fn drops(&self, t: u64, ports: Option<(u16, u16)>) -> bool {
        t >= self.start_ns
            && t < self.end_ns
            && self
                .port
                .is_none_or(|p| ports.is_some_and(|(s, d)| s == p || d == p))
    }
}

/// Why a frame was not forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// The frame arrived inside a blackout window.
    Blackout,
    /// Random loss took it (the [`Loss`] model).
    Loss,
    /// The queue in front of the rate limiter was full.
    Queue,
}

impl DropReason {
    /// The name used in counters and the event log.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Blackout => "blackout",
            DropReason::Loss => "loss",
            DropReason::Queue => "queue",
        }
    }
}

/// The decision for one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Send at this time (CLOCK_REALTIME ns).
    Forward {
        /// Serialisation end plus delay and jitter; without `reorder`, never before
        /// the previous frame's release.
        release_ns: u64,
    },
    /// Do not forward the frame, for this reason.
    Drop(DropReason),
}

/// The state of one direction: loss chain, queue backlog, last departure.
pub struct LinkModel {
    imp: Impairments,
    rng: SmallRng,
    bad_state: bool,
    /// Frames admitted and not yet serialised: (serialisation end, length).
    backlog: VecDeque<(u64, u32)>,
    backlog_bytes: u64,
    last_finish_ns: u64,
    last_release_ns: u64,
}

impl LinkModel {
    /// A direction with impairments `imp` and a random stream from `seed`.
    pub fn new(imp: Impairments, seed: u64) -> Self {
        Self {
            imp,
            rng: SmallRng::seed_from_u64(seed),
            bad_state: false,
            backlog: VecDeque::new(),
            backlog_bytes: 0,
            last_finish_ns: 0,
            last_release_ns: 0,
        }
    }

    /// The impairments in force.
    pub fn impairments(&self) -> &Impairments {
        &self.imp
    }

    /// Change the impairments; frames already admitted keep their release times.
    pub fn set(&mut self, imp: Impairments) {
        self.imp = imp;
    }

    /// Bytes and frames waiting for serialisation at time `t`.
    pub fn backlog(&mut self, t: u64) -> (u64, usize) {
        self.drain(t);
        (self.backlog_bytes, self.backlog.len())
    }

    fn drain(&mut self, t: u64) {
        while let Some(&(finish, len)) = self.backlog.front() {
            if finish > t {
                break;
            }
            self.backlog.pop_front();
            self.backlog_bytes -= u64::from(len);
        }
    }

    fn lost(&mut self) -> bool {
        match self.imp.loss {
            Loss::None => false,
            Loss::Bernoulli { p } => p > 0.0 && self.rng.random::<f64>() < p,
            Loss::GilbertElliott {
                p,
                r,
                loss_bad,
                loss_good,
            } => {
                let flip = if self.bad_state { r } else { p };
                if self.rng.random::<f64>() < flip {
                    self.bad_state = !self.bad_state;
                }
                let l = if self.bad_state { loss_bad } else { loss_good };
                l > 0.0 && self.rng.random::<f64>() < l
            }
        }
    }

    fn jitter(&mut self) -> i64 {
        let j = self.imp.jitter_ns as f64;
        if j == 0.0 {
            return 0;
        }
        let x = match self.imp.jitter_dist {
            JitterDist::Uniform => self.rng.random_range(-j..=j),
            JitterDist::Normal => Normal::new(0.0, j)
                .map_or(0.0, |n| n.sample(&mut self.rng))
                .clamp(-3.0 * j, 3.0 * j),
        };
        x.round() as i64
    }

    /// Decide the fate of a frame of `len` bytes arriving at `t` (ns), with its TCP/UDP
    /// `ports` if it has them, given the blackout windows.
    pub fn admit(
        &mut self,
        t: u64,
        len: u32,
        ports: Option<(u16, u16)>,
        blackouts: &[Blackout],
    ) -> Verdict {
        if blackouts.iter().any(|b| b.drops(t, ports)) {
            return Verdict::Drop(DropReason::Blackout);
        }
        if self.lost() {
            return Verdict::Drop(DropReason::Loss);
        }
        let serialised = match self.imp.rate_bps {
            None => t,
            Some(rate) => {
                self.drain(t);
                let full = match self.imp.queue {
                    QueueLimit::Bytes(b) => self.backlog_bytes + u64::from(len) > b,
                    QueueLimit::Packets(p) => self.backlog.len() as u64 >= p,
                };
                if full {
                    return Verdict::Drop(DropReason::Queue);
                }
                let start = t.max(self.last_finish_ns);
                let tx_ns = (u128::from(len) * 8 * 1_000_000_000 / u128::from(rate)) as u64;
                let finish = start + tx_ns;
                self.last_finish_ns = finish;
                self.backlog.push_back((finish, len));
                self.backlog_bytes += u64::from(len);
                finish
            }
        };
        let delay = (self.imp.delay_ns as i64 + self.jitter()).max(0) as u64;
        let mut release = serialised + delay;
        if !self.imp.reorder {
            release = release.max(self.last_release_ns);
        }
        self.last_release_ns = self.last_release_ns.max(release);
        Verdict::Forward {
            release_ns: release,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(v: Verdict) -> u64 {
        match v {
            Verdict::Forward { release_ns } => release_ns,
            Verdict::Drop(r) => panic!("dropped: {r:?}"),
        }
    }

    #[test]
    fn constant_delay_adds_exactly() {
        let mut m = LinkModel::new(
            Impairments {
                delay_ns: 50_000_000,
                ..Default::default()
            },
            1,
        );
        assert_eq!(release(m.admit(1_000, 100, None, &[])), 50_001_000);
    }

    #[test]
    fn rate_serialises_back_to_back_frames() {
        // 1500 bytes at 12 Mbit/s = 1 ms each (arithmetic).
        let mut m = LinkModel::new(
            Impairments {
                delay_ns: 10_000_000,
                rate_bps: Some(12_000_000),
                ..Default::default()
            },
            1,
        );
        let r: Vec<u64> = (0..3)
            .map(|_| release(m.admit(0, 1500, None, &[])))
            .collect();
        assert_eq!(r, vec![11_000_000, 12_000_000, 13_000_000]);
        assert_eq!(m.backlog(0), (4500, 3));
        assert_eq!(m.backlog(1_000_000), (3000, 2));
        // A frame arriving after the queue drained starts at once.
        assert_eq!(release(m.admit(20_000_000, 1500, None, &[])), 31_000_000);
    }

    #[test]
    fn byte_queue_drops_tail_and_bounds_the_delay() {
        // 10 kB queue at 8 Mbit/s: 1000-byte frames take 1 ms; 10 fit.
        let mut m = LinkModel::new(
            Impairments {
                rate_bps: Some(8_000_000),
                queue: QueueLimit::Bytes(10_000),
                ..Default::default()
            },
            1,
        );
        let v: Vec<Verdict> = (0..12).map(|_| m.admit(0, 1000, None, &[])).collect();
        assert_eq!(
            v.iter()
                .filter(|x| matches!(x, Verdict::Forward { .. }))
                .count(),
            10
        );
        assert_eq!(v[10], Verdict::Drop(DropReason::Queue));
        // The worst queueing delay is queue ÷ rate = 10 ms.
        assert_eq!(release(v[9]), 10_000_000);
        let mut p = LinkModel::new(
            Impairments {
                rate_bps: Some(8_000_000),
                queue: QueueLimit::Packets(3),
                ..Default::default()
            },
            1,
        );
        let kept = (0..5)
            .filter(|_| matches!(p.admit(0, 1000, None, &[]), Verdict::Forward { .. }))
            .count();
        assert_eq!(kept, 3);
    }

    #[test]
    fn blackout_window_is_half_open_and_port_specific() {
        let b = [Blackout {
            start_ns: 100,
            end_ns: 200,
            port: Some(5001),
        }];
        let mut m = LinkModel::new(Impairments::default(), 1);
        let port = Some((40000, 5001));
        assert!(matches!(m.admit(99, 60, port, &b), Verdict::Forward { .. }));
        assert_eq!(
            m.admit(100, 60, port, &b),
            Verdict::Drop(DropReason::Blackout)
        );
        assert_eq!(
            m.admit(199, 60, Some((5001, 1)), &b),
            Verdict::Drop(DropReason::Blackout)
        );
        assert!(matches!(
            m.admit(200, 60, port, &b),
            Verdict::Forward { .. }
        ));
        assert!(matches!(
            m.admit(150, 60, Some((1, 2)), &b),
            Verdict::Forward { .. }
        ));
        assert!(matches!(
            m.admit(150, 60, None, &b),
            Verdict::Forward { .. }
        ));
        let all = [Blackout { port: None, ..b[0] }];
        assert_eq!(
            m.admit(150, 60, None, &all),
            Verdict::Drop(DropReason::Blackout)
        );
    }

    /// The loss rate over many frames lies inside the 99.9 % binomial interval
    /// (arithmetic: ±3.3 σ with σ = √(np(1−p))).
    #[test]
    fn bernoulli_and_gilbert_elliott_loss_rates() {
        let n = 200_000u32;
        for loss in [
            Loss::Bernoulli { p: 0.05 },
            Loss::GilbertElliott {
                p: 0.01,
                r: 0.1,
                loss_bad: 1.0,
                loss_good: 0.0,
            },
        ] {
            let mut m = LinkModel::new(
                Impairments {
                    loss,
                    ..Default::default()
                },
                7,
            );
            let lost = (0..n)
                .filter(|&i| {
                    m.admit(u64::from(i), 60, None, &[]) == Verdict::Drop(DropReason::Loss)
                })
                .count() as f64;
            let mean = loss.mean() * f64::from(n);
            // Bursts inflate the variance by (1 + ρ)/(1 − ρ), ρ = 1 − p − r.
            let burst = match loss {
                Loss::GilbertElliott { p, r, .. } => (2.0 - p - r) / (p + r),
                _ => 1.0,
            };
            let sigma = (mean * (1.0 - loss.mean()) * burst).sqrt();
            assert!(
                (lost - mean).abs() < 3.3 * sigma,
                "{loss:?}: {lost} lost, expected {mean} ± {}",
                3.3 * sigma
            );
        }
    }

    #[test]
    fn jitter_keeps_order_unless_reordering_is_allowed() {
        for reorder in [false, true] {
            let mut m = LinkModel::new(
                Impairments {
                    delay_ns: 10_000_000,
                    jitter_ns: 5_000_000,
                    reorder,
                    ..Default::default()
                },
                3,
            );
            let r: Vec<u64> = (0..1000)
                .map(|i| release(m.admit(i * 100_000, 100, None, &[])))
                .collect();
            let inversions = r.windows(2).filter(|w| w[1] < w[0]).count();
            assert_eq!(inversions == 0, !reorder, "reorder={reorder}");
            for (i, x) in r.iter().enumerate() {
                let sent = i as u64 * 100_000;
                assert!(*x >= sent + 5_000_000 && (reorder || *x <= sent + 15_000_000 + 5_000_000));
            }
        }
    }

    #[test]
    fn a_change_keeps_what_is_queued() {
        let mut m = LinkModel::new(
            Impairments {
                delay_ns: 50_000_000,
                ..Default::default()
            },
            1,
        );
        let first = release(m.admit(0, 100, None, &[]));
        let mut imp = *m.impairments();
        ImpairmentPatch {
            delay_ns: Some(10_000_000),
            ..Default::default()
        }
        .apply(&mut imp);
        m.set(imp);
        // The next frame may not overtake the first (no reordering).
        assert_eq!(first, 50_000_000);
        assert_eq!(release(m.admit(1_000, 100, None, &[])), 50_000_000);
        assert_eq!(release(m.admit(60_000_000, 100, None, &[])), 70_000_000);
    }

    #[test]
    fn impossible_values_are_refused() {
        let bad = |imp: Impairments| imp.validate().is_err();
        assert!(bad(Impairments {
            loss: Loss::Bernoulli { p: 1.5 },
            ..Default::default()
        }));
        assert!(bad(Impairments {
            rate_bps: Some(0),
            ..Default::default()
        }));
        assert!(bad(Impairments {
            queue: QueueLimit::Bytes(0),
            ..Default::default()
        }));
        assert!(bad(Impairments {
            delay_ns: MAX_DELAY_NS + 1,
            ..Default::default()
        }));
        assert!(Impairments::default().validate().is_ok());
    }
}
