//! Driving a live passive engine, for `rttlab passive -i` and the agent alike: which
//! engine runs (one choice, one fallback rule), and when the in-kernel engine's maps are
//! swept and its `--aggregate` intervals end ([`Schedule`], a state machine without
//! I/O: the caller's thin loop waits, drains and writes).

use crate::kernel::passive_bpf::{self, PassiveBpfError, Sweep};
use std::time::{Duration, Instant};

/// Which engine times the traffic (`--engine`, the agent's `--passive-engine`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineChoice {
    /// The in-kernel engine where this kernel and these privileges allow it and the
    /// options need nothing only the ring has; else the ring, saying why once.
    Auto,
    /// tc programs in the kernel time the packets where they are; only samples (or
    /// histograms) come up. Needs CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN, and live,
    /// Linux 5.13+.
    Bpf,
    /// Every selected frame's headers are copied up through a packet ring
    /// (CAP_NET_RAW), and timed in user space.
    Ring,
}

/// The engine a run starts with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Engine {
    /// The in-kernel engine.
    Bpf,
    /// The ring; with why the in-kernel engine is not used when it was wanted (for a
    /// line on stderr once the ring runs).
    Ring(Option<String>),
}

/// Why the engine asked for cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ChoiceError {
    /// `bpf` was asked for with an option only the ring engine has.
    #[error("{0}; use the ring engine")]
    NeedsRing(&'static str),
    /// `bpf` was asked for and this kernel or these privileges do not allow it.
    #[error(transparent)]
    Unavailable(#[from] PassiveBpfError),
}

/// The engine for `choice` on a live interface (`live`) or a file, when the run's
/// options need the ring for `ring_only`'s reason (a filter expression, the sampler).
/// A file is read by rttlab unless the kernel is asked for.
///
/// # Errors
/// `bpf` asked for and unavailable here, or with an option only the ring has.
pub fn choose(
    choice: EngineChoice,
    ring_only: Option<&'static str>,
    live: bool,
) -> Result<Engine, ChoiceError> {
    match choice {
        EngineChoice::Ring => Ok(Engine::Ring(None)),
        EngineChoice::Bpf => {
            if let Some(why) = ring_only {
                return Err(ChoiceError::NeedsRing(why));
            }
            passive_bpf::check()?;
            Ok(Engine::Bpf)
        }
        EngineChoice::Auto if !live || ring_only.is_some() => Ok(Engine::Ring(None)),
        EngineChoice::Auto => match passive_bpf::check() {
            Ok(()) => Ok(Engine::Bpf),
            Err(e) => Ok(Engine::Ring(Some(e.to_string()))),
        },
    }
}

/// The one fallback rule, once the in-kernel engine failed to load or attach: `auto`
/// goes on with the ring when the engine is unavailable here (this kernel, these
/// privileges: [`PassiveBpfError::is_unavailable`]), with the reason returned for a
/// line on stderr; anything else, or `bpf` asked for by name, is the run's error.
///
/// # Errors
/// `e`, when the rule does not fall back.
pub fn fall_back(choice: EngineChoice, e: PassiveBpfError) -> Result<String, PassiveBpfError> {
    if choice == EngineChoice::Auto && e.is_unavailable() {
        Ok(e.to_string())
    } else {
        Err(e)
    }
}

/// When a live in-kernel run sweeps its maps and ends its aggregate intervals.
///
/// Each map is swept five times in the shorter of the idle timeout and the maximum
/// age (every 2 s at `rttlab passive`'s defaults; from 1 s to 20 s), the two maps
/// apart: a sweep walks every bucket of its map (131 072 at the default
/// `--max-pending`) and holds a CPU while it does, and flows expire in the kernel on
/// their next packet anyway.
#[derive(Clone, Debug)]
pub struct Schedule {
    sweep_every: Duration,
    next_sweep: Instant,
    sweep_flows: bool,
    aggregate: Option<Duration>,
    next_interval: Option<Instant>,
    interval_start_ns: u64,
}

/// What is due at a tick.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Due {
    /// A map to sweep.
    pub sweep: Option<Sweep>,
    /// An aggregate interval that ended: (start, end), CLOCK_REALTIME ns.
    pub interval: Option<(u64, u64)>,
}

impl Schedule {
    /// A run started at `start` (`start_ns` on CLOCK_REALTIME, the clock intervals are
    /// stamped with), forgetting flows after `idle_timeout` and pending TSvals and
    /// segments after `max_age`, cutting aggregate intervals of `aggregate`.
    pub fn new(
        start: Instant,
        start_ns: u64,
        idle_timeout: Duration,
        max_age: Duration,
        aggregate: Option<Duration>,
    ) -> Self {
        let sweep_every = (idle_timeout.min(max_age) / 10)
            .clamp(Duration::from_millis(500), Duration::from_secs(10));
        Self {
            sweep_every,
            next_sweep: start + sweep_every,
            sweep_flows: true,
            aggregate,
            next_interval: aggregate.map(|d| start + d),
            interval_start_ns: start_ns,
        }
    }

    /// What is due at `now` (`now_ns` on CLOCK_REALTIME). A tick that comes late does
    /// each at most once, and the next sweep and interval keep their cadence.
    pub fn poll(&mut self, now: Instant, now_ns: u64) -> Due {
        let mut due = Due::default();
        if now >= self.next_sweep {
            due.sweep = Some(if self.sweep_flows {
                Sweep::Flows
            } else {
                Sweep::Pending
            });
            self.sweep_flows = !self.sweep_flows;
            self.next_sweep += self.sweep_every;
        }
        if let (Some(at), Some(d)) = (self.next_interval, self.aggregate) {
            if now >= at {
                due.interval = Some((self.interval_start_ns, now_ns));
                self.interval_start_ns = now_ns;
                self.next_interval = Some(at + d);
            }
        }
        due
    }

    /// The last, partial aggregate interval, ending at `now_ns`.
    pub fn last_interval(&self, now_ns: u64) -> Option<(u64, u64)> {
        self.aggregate.map(|_| (self.interval_start_ns, now_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// Witness: the rule by hand. An idle timeout of 20 s and a maximum age of 10 s
    /// sweep every second, flows and pending in turn; the bounds hold at 0.5 and 10 s.
    #[test]
    fn maps_are_swept_in_turn_at_a_tenth_of_the_shorter_timeout() {
        let t0 = Instant::now();
        let mut sch = Schedule::new(t0, 0, s(20), s(10), None);
        assert_eq!(sch.poll(t0 + Duration::from_millis(999), 0), Due::default());
        assert_eq!(sch.poll(t0 + s(1), 0).sweep, Some(Sweep::Flows));
        assert_eq!(sch.poll(t0 + s(1), 0).sweep, None);
        // Late by 1.5 s: one sweep, and the cadence kept.
        assert_eq!(
            sch.poll(t0 + Duration::from_millis(3500), 0).sweep,
            Some(Sweep::Pending)
        );
        assert_eq!(
            sch.poll(t0 + Duration::from_millis(3500), 0).sweep,
            Some(Sweep::Flows)
        );
        assert_eq!(sch.poll(t0 + Duration::from_millis(3500), 0).sweep, None);
        let fast = Schedule::new(t0, 0, s(1), s(1), None);
        assert_eq!(fast.sweep_every, Duration::from_millis(500));
        let slow = Schedule::new(t0, 0, s(600), s(300), None);
        assert_eq!(slow.sweep_every, s(10));
    }

    /// Witness: arithmetic on the clock stamps handed in. Intervals end every
    /// `--aggregate` from the start, each starting where the last ended, and the last,
    /// partial one ends when the run does.
    #[test]
    fn aggregate_intervals_follow_on_from_the_start() {
        let t0 = Instant::now();
        let mut sch = Schedule::new(t0, 1_000, s(600), s(600), Some(s(5)));
        assert_eq!(sch.poll(t0 + s(4), 4_000).interval, None);
        assert_eq!(sch.poll(t0 + s(5), 5_010).interval, Some((1_000, 5_010)));
        assert_eq!(sch.poll(t0 + s(9), 9_000).interval, None);
        assert_eq!(sch.poll(t0 + s(10), 10_020).interval, Some((5_010, 10_020)));
        assert_eq!(sch.last_interval(12_000), Some((10_020, 12_000)));
        assert_eq!(
            Schedule::new(t0, 0, s(1), s(1), None).last_interval(5),
            None
        );
    }

    /// Witness: the rule as the issue and the agent's help state it: only `auto`, and
    /// only for an engine unavailable here, goes on with the ring.
    #[test]
    fn only_auto_falls_back_and_only_when_unavailable() {
        let unavailable = || PassiveBpfError::NotPermitted;
        let why = fall_back(EngineChoice::Auto, unavailable()).expect("auto falls back");
        assert_eq!(why, unavailable().to_string());
        assert!(fall_back(EngineChoice::Bpf, unavailable()).is_err());
        let broken = PassiveBpfError::Map {
            map: "AGGREGATES",
            msg: "E2BIG".into(),
        };
        assert!(fall_back(EngineChoice::Auto, broken).is_err());
        assert_eq!(
            choose(EngineChoice::Auto, None, false).unwrap(),
            Engine::Ring(None)
        );
        assert_eq!(
            choose(EngineChoice::Auto, Some("-m"), true).unwrap(),
            Engine::Ring(None)
        );
        assert!(matches!(
            choose(EngineChoice::Bpf, Some("-m"), true),
            Err(ChoiceError::NeedsRing("-m"))
        ));
    }
}
