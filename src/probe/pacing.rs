//! Waiting between transactions (`-w`), the setting seeds 000 and 004 show changes the
//! answer.
//!
//! Three ways to wait, because each is wrong somewhere:
//! - `Sleep` gives the vCPU back; the wake-up costs an idle vCPU tens of µs, so the
//!   wait overshoots by that much (the measured latency is not affected: it is timed
//!   from just before the request).
//! - `Spin` is exact to well under a µs but owns a vCPU for the whole interval; on a
//!   2-vCPU machine that pushes the server onto the other, halted vCPU (netperf's spin
//!   build reports 179 µs at `-w 10ms` here for this reason).
//! - `Hybrid` sleeps until a margin before the deadline, then spins: exact like `Spin`,
//!   and the vCPU is free for all but the margin.

use std::time::{Duration, Instant};

/// Longest single sleep, so a stop request is seen within this.
const SLEEP_SLICE: Duration = Duration::from_millis(100);

/// How to wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PaceMode {
    /// Sleep until the deadline (slices of at most 100 ms): the vCPU is free, the wait
    /// overshoots by the wake-up time.
    Sleep,
    /// Busy-wait the whole interval (`rr --spin`, `--pace spin`): exact, but holds a vCPU.
    Spin,
    /// Sleep until `margin` before the deadline, then spin.
    Hybrid {
        /// How long before the deadline spinning starts ([`PaceMode::HYBRID_MARGIN`] from `rr`).
        margin: Duration,
    },
}

impl PaceMode {
    /// Default margin of hybrid pacing: several times an idle vCPU's wake-up time.
    pub const HYBRID_MARGIN: Duration = Duration::from_micros(200);

    /// A short name for tables.
    pub fn name(&self) -> &'static str {
        match self {
            PaceMode::Sleep => "sleep",
            PaceMode::Spin => "spin",
            PaceMode::Hybrid { .. } => "hybrid",
        }
    }
}

/// Ask the kernel for exact sleeps on this thread: the default timer slack of 50 µs
/// would add up to 50 µs to every wait.
pub fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

/// Wait until `target` the way `mode` says; returns early (false) when `keep_going`
/// turns false.
pub fn wait_until(mode: PaceMode, target: Instant, mut keep_going: impl FnMut() -> bool) -> bool {
    let spin_from = match mode {
        PaceMode::Sleep => target,
        PaceMode::Spin => Instant::now(),
        PaceMode::Hybrid { margin } => target.checked_sub(margin).unwrap_or(target),
    };
    loop {
        let now = Instant::now();
        if now >= spin_from {
            break;
        }
        if !keep_going() {
            return false;
        }
        std::thread::sleep((spin_from - now).min(SLEEP_SLICE));
    }
    let mut n = 0u32;
    while Instant::now() < target {
        std::hint::spin_loop();
        n = n.wrapping_add(1);
        if n % 4096 == 0 && !keep_going() {
            return false;
        }
    }
    true
}

/// Arrival schedule of the open-loop mode.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Schedule {
    /// Exactly every 1/rate.
    Fixed,
    /// Exponential gaps with mean 1/rate (a Poisson process).
    Poisson,
}

impl Schedule {
    /// A short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Schedule::Fixed => "fixed",
            Schedule::Poisson => "poisson",
        }
    }
}

/// Intended send times of an open-loop run: t₀ + Σ gaps. Deterministic for a seed, so
/// a run can be repeated.
pub struct Arrivals {
    gap_ns: f64,
    schedule: Schedule,
    next_ns: f64,
    rng: u64,
}

impl Arrivals {
    /// Arrivals at `rate_per_s` following `schedule`.
    pub fn new(rate_per_s: f64, schedule: Schedule, seed: u64) -> Self {
        Self {
            gap_ns: 1e9 / rate_per_s,
            schedule,
            next_ns: 0.0,
            rng: seed | 1,
        }
    }

    /// Offset of the next intended send from the start.
    pub fn next_offset(&mut self) -> Duration {
        let now = self.next_ns;
        let gap = match self.schedule {
            Schedule::Fixed => self.gap_ns,
            Schedule::Poisson => {
                // xorshift64*: plenty for spacing requests.
                self.rng ^= self.rng >> 12;
                self.rng ^= self.rng << 25;
                self.rng ^= self.rng >> 27;
                let u = (self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64
                    / (1u64 << 53) as f64;
                -self.gap_ns * (1.0 - u).ln()
            }
        };
        self.next_ns += gap;
        Duration::from_nanos(now as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spin_and_hybrid_are_not_early() {
        for mode in [
            PaceMode::Spin,
            PaceMode::Hybrid {
                margin: PaceMode::HYBRID_MARGIN,
            },
            PaceMode::Sleep,
        ] {
            let start = Instant::now();
            let target = start + Duration::from_millis(2);
            assert!(wait_until(mode, target, || true));
            assert!(Instant::now() >= target, "{mode:?}");
        }
    }

    #[test]
    fn stop_interrupts_a_long_wait() {
        let start = Instant::now();
        assert!(!wait_until(
            PaceMode::Sleep,
            start + Duration::from_secs(30),
            || start.elapsed() < Duration::from_millis(50)
        ));
        assert!(start.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn arrivals_have_the_requested_mean_rate() {
        // Checked by arithmetic: n arrivals at rate r span about n/r seconds.
        for schedule in [Schedule::Fixed, Schedule::Poisson] {
            let mut a = Arrivals::new(1000.0, schedule, 42);
            let mut last = Duration::ZERO;
            for _ in 0..100_000 {
                last = a.next_offset();
            }
            let secs = last.as_secs_f64();
            assert!((secs - 100.0).abs() < 1.5, "{schedule:?}: {secs}");
        }
        let mut f = Arrivals::new(4.0, Schedule::Fixed, 1);
        assert_eq!(f.next_offset(), Duration::ZERO);
        assert_eq!(f.next_offset(), Duration::from_millis(250));
    }
}
