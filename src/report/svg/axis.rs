//! Axes: where a value lies along a plot, which ticks get a label, and how a label
//! reads. A time axis picks its own unit (µs, ms or s) from its range, so its labels
//! are one to three digits; ticks fall at 1-2-5 steps (decades on a log axis) and
//! are thinned until their labels do not touch; no label is ever in exponent form.

use super::text::{self, FONT};

/// What an axis's numbers measure, which decides how its ticks read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Plain numbers (a fraction, a percentage, KB): the axis label says what they are.
    Plain,
    /// Durations, given in µs.
    Micros,
    /// Durations, given in ms.
    Millis,
    /// Durations, given in s.
    Seconds,
}

impl Unit {
    /// Seconds per data unit, for durations.
    fn seconds(self) -> Option<f64> {
        match self {
            Self::Plain => None,
            Self::Micros => Some(1e-6),
            Self::Millis => Some(1e-3),
            Self::Seconds => Some(1.0),
        }
    }
}

/// How values map to positions along an axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// Equal differences, equal distances.
    Linear,
    /// Equal ratios, equal distances (values ≤ 0 are left out).
    Log,
    /// Percentiles, given as fractions p in [0, 1), at −log10(1 − p): 0 %, 90 %, 99 %,
    /// 99.9 % equally spaced, as HdrHistogram plots latency by percentile, so that
    /// the tail gets as much room as the body.
    Tail,
}

/// A tick with a label.
#[derive(Clone, Debug, PartialEq)]
pub struct Tick {
    /// Where, in data units.
    pub value: f64,
    /// What it reads.
    pub label: String,
}

/// An axis from `lo` to `hi` (data units): positions and labelled ticks.
#[derive(Clone, Copy, Debug)]
pub struct Axis {
    /// The value at the axis's start.
    pub lo: f64,
    /// The value at its end.
    pub hi: f64,
    /// How values map to positions.
    pub scale: Scale,
    /// What the values measure.
    pub unit: Unit,
}

/// Decimal places of a 1-2-5 step (0.05 → 2, 20 → 0).
fn decimals(step: f64) -> usize {
    (-(step.log10() + 1e-9).floor()).max(0.0) as usize
}

impl Axis {
    /// An axis over `lo`–`hi`, widened where it would be empty or invalid (a log
    /// axis over at least one positive decade's worth, a tail axis within [0, 1)).
    pub fn new(lo: f64, hi: f64, scale: Scale, unit: Unit) -> Self {
        let (lo, hi) = match scale {
            Scale::Log => {
                let lo = if lo > 0.0 { lo } else { hi.max(1e-9) / 10.0 };
                (lo, if hi > lo { hi } else { lo * 10.0 })
            }
            Scale::Tail => {
                let lo = lo.clamp(0.0, 0.999_999);
                (lo, hi.clamp(lo + 1e-9, 1.0 - 1e-9))
            }
            Scale::Linear if hi > lo => (lo, hi),
            Scale::Linear => (lo - 1.0, hi + 1.0),
        };
        Self {
            lo,
            hi,
            scale,
            unit,
        }
    }

    /// The position a value maps to before scaling (log10, −log10(1 − p), or itself).
    fn t(&self, v: f64) -> f64 {
        match self.scale {
            Scale::Linear => v,
            Scale::Log => v.max(f64::MIN_POSITIVE).log10(),
            Scale::Tail => -(1.0 - v.clamp(0.0, 1.0 - 1e-12)).log10(),
        }
    }

    /// Where `v` lies, 0 at `lo` and 1 at `hi`.
    pub fn frac(&self, v: f64) -> f64 {
        (self.t(v) - self.t(self.lo)) / (self.t(self.hi) - self.t(self.lo))
    }

    /// Whether `v` can be drawn on this axis at all.
    pub fn shows(&self, v: f64) -> bool {
        v.is_finite()
            && match self.scale {
                Scale::Linear => true,
                Scale::Log => v > 0.0,
                Scale::Tail => (0.0..1.0).contains(&v),
            }
    }

    /// On a linear time axis, the unit its ticks are written in (the largest in which
    /// the end furthest from 0 counts at least 1) and its size in data units; `None`
    /// elsewhere (a log time axis writes each tick in its own unit).
    fn linear_unit(&self) -> Option<(&'static str, f64)> {
        let s = self
            .unit
            .seconds()
            .filter(|_| self.scale == Scale::Linear)?;
        let (name, size) = text::time_unit(self.lo.abs().max(self.hi.abs()) * s);
        Some((name, size / s))
    }

    /// The axis title: `label`, with the unit its ticks are written in where they share
    /// one ("RTT (ms)").
    pub fn title(&self, label: &str) -> String {
        match self.linear_unit() {
            Some((u, _)) => format!("{label} ({u})"),
            None => label.to_string(),
        }
    }

    /// Labelled ticks spaced so that their labels keep apart along `length` px:
    /// horizontally (labels side by side) or vertically (labels one above another).
    pub fn ticks(&self, length: f64, horizontal: bool) -> Vec<Tick> {
        let fits = |t: &[Tick]| {
            t.windows(2).all(|w| {
                let gap = (self.frac(w[1].value) - self.frac(w[0].value)).abs() * length;
                let need = if horizontal {
                    (text::width(&w[0].label, FONT) + text::width(&w[1].label, FONT)) / 2.0 + 8.0
                } else {
                    FONT + 4.0
                };
                gap >= need
            })
        };
        let candidates = match self.scale {
            Scale::Linear => self.linear_candidates(),
            Scale::Log => self.log_candidates(),
            Scale::Tail => self.tail_candidates(),
        };
        let mut best = Vec::new();
        for c in candidates {
            if c.len() >= 2 && fits(&c) {
                return c;
            }
            if best.is_empty() && !c.is_empty() && fits(&c) {
                best = c;
            }
        }
        best
    }

    /// Linear ticks at 1-2-5 steps, finest first (at most 9 ticks: more is clutter).
    fn linear_candidates(&self) -> Vec<Vec<Tick>> {
        let size = self.linear_unit().map_or(1.0, |u| u.1);
        let span = (self.hi - self.lo) / size;
        if !(span.is_finite() && span > 0.0) {
            return Vec::new();
        }
        let mut mag = 10f64.powf((span / 10.0).log10().floor());
        let mut out = Vec::new();
        while out.len() < 12 {
            for m in [1.0, 2.0, 5.0] {
                let step = m * mag;
                if span / step > 8.0 {
                    continue;
                }
                let d = decimals(step);
                let first = (self.lo / size / step - 1e-9).ceil() as i64;
                let last = (self.hi / size / step + 1e-9).floor() as i64;
                out.push(
                    (first..=last)
                        .map(|k| Tick {
                            value: k as f64 * step * size,
                            label: text::fixed(k as f64 * step, d),
                        })
                        .collect(),
                );
            }
            mag *= 10.0;
        }
        out
    }

    /// A log tick's label: the value in its own time unit ("200 µs", "1 ms"), or plain.
    fn log_label(&self, v: f64) -> String {
        match self.unit.seconds() {
            Some(s) => {
                let (u, size) = text::time_unit(v * s);
                format!("{} {u}", text::sig(v * s / size, 3))
            }
            None => text::sig(v, 3),
        }
    }

    /// Log ticks: 1, 2 and 5 in each decade; then decades; then every 2nd, 3rd…
    /// decade. A range within one decade falls back to linear steps.
    fn log_candidates(&self) -> Vec<Vec<Tick>> {
        let (a, b) = (
            self.lo.log10().floor() as i32,
            self.hi.log10().ceil() as i32,
        );
        let inside = |v: f64| v >= self.lo * 0.999 && v <= self.hi * 1.001;
        let tick = |v: f64| Tick {
            value: v,
            label: self.log_label(v),
        };
        let mut out = vec![(a..=b)
            .flat_map(|e| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(e)))
            .filter(|v| inside(*v))
            .map(tick)
            .collect::<Vec<_>>()];
        for every in 1..=6 {
            out.push(
                (a..=b)
                    .filter(|e| e.rem_euclid(every) == 0)
                    .map(|e| 10f64.powi(e))
                    .filter(|v| inside(*v))
                    .map(tick)
                    .collect(),
            );
        }
        if out.iter().all(|c| c.len() < 2) {
            let lin = Self {
                scale: Scale::Linear,
                unit: Unit::Plain,
                ..*self
            };
            out = lin
                .linear_candidates()
                .into_iter()
                .map(|c| c.into_iter().map(|t| tick(t.value)).collect())
                .collect();
        }
        out
    }

    /// Tail ticks at 0, 90, 99, 99.9 … %; then every 2nd of them.
    fn tail_candidates(&self) -> Vec<Vec<Tick>> {
        let nines = (self.t(self.hi) + 1e-9).floor() as i32;
        let first = (self.t(self.lo) - 1e-9).ceil() as i32;
        let tick = |k: i32| {
            let p = 1.0 - 10f64.powi(-k);
            Tick {
                value: p,
                label: format!("{} %", text::fixed(p * 100.0, (k - 2).max(0) as usize)),
            }
        };
        (1..=3)
            .map(|every| {
                (first..=nines)
                    .filter(|k| k % every == 0)
                    .map(tick)
                    .collect()
            })
            .collect()
    }

    /// Unlabelled grid values between the labelled ticks: a log axis's 2s and 5s when
    /// only decades are labelled.
    pub fn minor(&self, labelled: &[Tick]) -> Vec<f64> {
        if self.scale != Scale::Log {
            return Vec::new();
        }
        let (a, b) = (
            self.lo.log10().floor() as i32,
            self.hi.log10().ceil() as i32,
        );
        (a..=b)
            .flat_map(|e| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(e)))
            .filter(|v| *v >= self.lo && *v <= self.hi)
            .filter(|v| !labelled.iter().any(|t| (t.value / v - 1.0).abs() < 1e-6))
            .collect()
    }
}

/// The range that fits `values` (non-finite ones, and those a log or tail axis cannot
/// show, left out), padded 5 % (a factor of 1.2 on a log axis); a linear range of
/// non-negative values stays at or above 0.
pub fn fit(values: impl Iterator<Item = f64>, scale: Scale) -> (f64, f64) {
    let probe = Axis::new(0.0, 1.0, scale, Unit::Plain);
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| probe.shows(*v)) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return match scale {
            Scale::Log => (1.0, 10.0),
            Scale::Tail => (0.0, 0.99),
            Scale::Linear => (0.0, 10.0),
        };
    }
    match scale {
        Scale::Log => (lo / 1.2, hi * 1.2),
        Scale::Tail => (lo, hi),
        Scale::Linear => {
            let pad = (hi - lo).max(hi.abs() * 0.01).max(1e-9) * 0.05;
            let low = if lo >= 0.0 {
                (lo - pad).max(0.0)
            } else {
                lo - pad
            };
            (low, hi + pad)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(a: &Axis, len: f64, horizontal: bool) -> Vec<String> {
        a.ticks(len, horizontal)
            .into_iter()
            .map(|t| t.label)
            .collect()
    }

    /// Witness: arithmetic on the labels the axis chooses.
    #[test]
    fn time_axes_pick_their_unit_and_1_2_5_steps() {
        let a = Axis::new(10_000.0, 20_300.0, Scale::Linear, Unit::Micros);
        assert_eq!(a.title("RTT"), "RTT (ms)");
        assert_eq!(
            labels(&a, 400.0, false),
            ["10", "12", "14", "16", "18", "20"]
        );
        let a = Axis::new(0.0, 0.000_8, Scale::Linear, Unit::Seconds);
        assert_eq!(a.title("t"), "t (µs)");
        let a = Axis::new(1000.0, 1500.0, Scale::Linear, Unit::Millis);
        assert_eq!(a.title("D"), "D (s)");
        assert_eq!(
            labels(&a, 400.0, true),
            ["1.0", "1.1", "1.2", "1.3", "1.4", "1.5"]
        );
        // Log: each tick in its own unit, thinned to decades when 1-2-5 would touch.
        let a = Axis::new(1.0, 2e6, Scale::Log, Unit::Micros);
        assert_eq!(a.title("RTT"), "RTT");
        assert_eq!(
            labels(&a, 400.0, true),
            ["1 µs", "10 µs", "100 µs", "1 ms", "10 ms", "100 ms", "1 s"]
        );
        assert!(labels(&a, 1000.0, false).contains(&"200 µs".to_string()));
        // Within a decade, linear steps on the log axis.
        let a = Axis::new(10.0, 11.7, Scale::Log, Unit::Millis);
        assert!(labels(&a, 400.0, true).len() >= 3);
        // Tail: nines.
        let a = Axis::new(0.0, 0.9999, Scale::Tail, Unit::Plain);
        assert_eq!(
            labels(&a, 400.0, true),
            ["0 %", "90 %", "99 %", "99.9 %", "99.99 %"]
        );
        assert!((a.frac(0.99) - 0.5).abs() < 1e-9);
        // Never an exponent, over many ranges.
        for (lo, hi) in [(0.0, 1e7), (1e-3, 2e-3), (0.0, 1.0), (5e4, 5.5e4)] {
            for u in [Unit::Plain, Unit::Micros, Unit::Millis] {
                for s in [Scale::Linear, Scale::Log] {
                    let a = Axis::new(lo, hi, s, u);
                    let l = labels(&a, 300.0, true);
                    assert!(!l.is_empty(), "{lo} {hi} {u:?} {s:?}");
                    assert!(
                        l.iter().all(|t| !t.contains('e')),
                        "{lo} {hi} {u:?} {s:?}: {l:?}"
                    );
                }
            }
        }
    }
}
