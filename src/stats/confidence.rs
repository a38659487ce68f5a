//! netperf's confidence intervals (`-I LEVEL,WIDTH -i MAX,MIN`): repeat a run until the
//! mean of its iterations is known to within ±WIDTH/2 % at LEVEL % confidence, or MAX
//! iterations have run. The interval is Student's t over the iterations' results, as
//! netperf's `calculate_confidence` computes it; netperf offers the 95 % and 99 %
//! levels only, and so does this.

/// Two-sided Student t quantiles, 1 to 30 degrees of freedom (textbook tables).
const T95: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];
const T99: [f64; 30] = [
    63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499, 3.355, 3.250, 3.169, 3.106, 3.055, 3.012,
    2.977, 2.947, 2.921, 2.898, 2.878, 2.861, 2.845, 2.831, 2.819, 2.807, 2.797, 2.787, 2.779,
    2.771, 2.763, 2.756, 2.750,
];

/// A confidence level netperf offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Level {
    /// 95 % (`-I 95,…`); `"95"` in JSON.
    #[serde(rename = "95")]
    P95,
    /// 99 % (`-I 99,…`); `"99"` in JSON.
    #[serde(rename = "99")]
    P99,
}

/// A confidence level other than netperf's two.
#[derive(Debug, thiserror::Error)]
#[error("confidence level {0}: 95 or 99, as netperf's -I")]
pub struct UnknownLevel(pub u32);

impl Level {
    /// 95 or 99.
    ///
    /// # Errors
    /// Any other level (netperf's are these two).
    pub fn from_percent(p: u32) -> Result<Self, UnknownLevel> {
        match p {
            95 => Ok(Self::P95),
            99 => Ok(Self::P99),
            _ => Err(UnknownLevel(p)),
        }
    }

    /// The level in percent, 95 or 99: the inverse of [`Level::from_percent`].
    pub fn percent(self) -> u32 {
        match self {
            Self::P95 => 95,
            Self::P99 => 99,
        }
    }

    /// The two-sided t quantile for `df` degrees of freedom (≥ 1); beyond the table,
    /// its last row (the normal's 1.96 and 2.576 are within 4 % of it).
    pub fn t(self, df: usize) -> f64 {
        let table = match self {
            Self::P95 => &T95,
            Self::P99 => &T99,
        };
        table[df.clamp(1, table.len()) - 1]
    }
}

/// The mean of some iterations' results and its confidence interval.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Interval {
    /// The mean of the iterations' results, in their unit (rr: transactions/s).
    pub mean: f64,
    /// Half the interval's width, in the results' unit.
    pub half_width: f64,
    /// How many results it was computed from (at least two).
    pub iterations: usize,
}

impl Interval {
    /// Student's t interval of the mean of `xs` (at least two).
    pub fn of(xs: &[f64], level: Level) -> Option<Self> {
        let n = xs.len();
        if n < 2 {
            return None;
        }
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        Some(Self {
            mean,
            half_width: level.t(n - 1) * (var / n as f64).sqrt(),
            iterations: n,
        })
    }

    /// The whole interval's width as a percentage of the mean (netperf's `-I` WIDTH).
    pub fn width_percent(&self) -> f64 {
        if self.mean == 0.0 {
            return f64::INFINITY;
        }
        200.0 * self.half_width / self.mean.abs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Witness: the t interval by hand. 10, 12, 14: mean 12, s = 2, t(0.975, 2) =
    /// 4.303, half-width 4.303 · 2 / √3 = 4.9687; at 99 %, 9.925 · 2 / √3 = 11.460.
    #[test]
    fn a_t_interval_by_hand() {
        let i = Interval::of(&[10.0, 12.0, 14.0], Level::P95).unwrap();
        assert_eq!(i.mean, 12.0);
        assert!((i.half_width - 4.9687).abs() < 1e-3, "{i:?}");
        assert!(
            (i.width_percent() - 82.81).abs() < 0.01,
            "{}",
            i.width_percent()
        );
        let j = Interval::of(&[10.0, 12.0, 14.0], Level::P99).unwrap();
        assert!((j.half_width - 11.460).abs() < 1e-3, "{j:?}");
        assert_eq!(Interval::of(&[5.0], Level::P95), None);
        // Identical iterations: no width at all.
        assert_eq!(
            Interval::of(&[7.0; 4], Level::P99).unwrap().width_percent(),
            0.0
        );
        assert_eq!(Level::P95.t(100), 2.042);
        assert!(Level::from_percent(90).is_err());
    }
}
