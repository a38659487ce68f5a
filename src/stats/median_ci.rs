//! The median of a few repeated trials with a distribution-free confidence interval
//! from order statistics: with n trials, the interval between the k-th smallest and
//! the k-th largest covers the true median with probability 1 − 2·P(Bin(n, ½) < k),
//! whatever the distribution (the sign-test interval; e.g. Hollander & Wolfe,
//! "Nonparametric Statistical Methods", §3.6). Trials of a lab experiment are few and
//! their distribution unknown (timer slack, steal): no normal approximation is safe.

use serde::{Deserialize, Serialize};

/// A median with its interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MedianCi {
    /// Trials counted (NaNs left out).
    pub n: usize,
    /// Their median (the mean of the middle two for an even count), in the values' unit.
    pub median: f64,
    /// The interval's lower end: the (k+1)-th smallest value.
    pub lo: f64,
    /// The interval's upper end: the (k+1)-th largest value.
    pub hi: f64,
    /// The interval's actual coverage (order statistics give only certain levels; with
    /// fewer than 6 trials even [min, max] is below 95 %, and this says so).
    pub coverage: f64,
}

/// The confidence level the reports ask for.
pub const LEVEL: f64 = 0.95;

/// Past this many trials ½ⁿ is below what a double holds (2⁻¹⁰²² is the smallest
/// normal one): the binomial's terms are carried as logarithms (once, every term was 0,
/// every coverage read 1 and a large grid's intervals collapsed onto its median).
const DIRECT_MAX_TRIALS: usize = 1_000;

impl MedianCi {
    /// The median of `values` (NaNs left out) and the narrowest symmetric
    /// order-statistic interval whose coverage is at least `level`, or [min, max] with
    /// its lower coverage when no interval reaches it. `None` for no values.
    pub fn of(values: &[f64], level: f64) -> Option<Self> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        // [x(k+1), x(n−k)] (1-based; v[k], v[n−1−k] here) misses the median only when
        // k or fewer values lie on one side of it: coverage 1 − 2·P(Bin ≤ k). Take the
        // largest k that still reaches `level`, walking P(Bin = i) = C(n, i)/2ⁿ up
        // from i = 0 (each term the one before times (n − i + 1)/i) and summing as it
        // goes: one pass, where summing afresh for each k took time n².
        let direct = n <= DIRECT_MAX_TRIALS;
        let mut term = 0.5f64.powi(i32::try_from(n).unwrap_or(i32::MAX));
        let mut log_term = -(n as f64) * std::f64::consts::LN_2;
        let mut cdf = if direct { term } else { log_term.exp() };
        let mut k = 0;
        while 2 * (k + 1) < n {
            let i = k + 1;
            let ratio = (n - i + 1) as f64 / i as f64;
            let next_term = if direct {
                term * ratio
            } else {
                (log_term + ratio.ln()).exp()
            };
            let next = cdf + next_term;
            if 1.0 - 2.0 * next < level {
                break;
            }
            (term, log_term, cdf, k) = (next_term, log_term + ratio.ln(), next, i);
        }
        Some(Self {
            n,
            median,
            lo: v[k],
            hi: v[n - 1 - k],
            coverage: 1.0 - 2.0 * cdf,
        })
    }

    /// `median [lo–hi]` with `decimals`, or the median alone for one trial.
    pub fn display(&self, decimals: usize) -> String {
        if self.n < 2 {
            format!("{:.*}", decimals, self.median)
        } else {
            format!(
                "{:.*} [{:.*}–{:.*}]",
                decimals, self.median, decimals, self.lo, decimals, self.hi
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Witness: the sign-test table (Hollander & Wolfe; also the binomial arithmetic by
    /// hand): n = 10 → [x(2), x(9)] at 97.85 %; n = 5 → [x(1), x(5)] at 93.75 %;
    /// n = 20 → [x(6), x(15)] at 95.86 %.
    #[test]
    fn intervals_match_the_sign_test_table() {
        let ten: Vec<f64> = (1..=10).map(f64::from).collect();
        let c = MedianCi::of(&ten, 0.95).unwrap();
        assert_eq!((c.lo, c.hi, c.median), (2.0, 9.0, 5.5));
        assert!((c.coverage - 0.978_515_625).abs() < 1e-9, "{c:?}");
        let five = [5.0, 1.0, 4.0, 2.0, 3.0];
        let c = MedianCi::of(&five, 0.95).unwrap();
        assert_eq!((c.lo, c.hi, c.median), (1.0, 5.0, 3.0));
        assert!((c.coverage - 0.9375).abs() < 1e-12);
        let twenty: Vec<f64> = (1..=20).rev().map(f64::from).collect();
        let c = MedianCi::of(&twenty, 0.95).unwrap();
        assert_eq!((c.lo, c.hi), (6.0, 15.0));
        assert!((c.coverage - 0.958_610_534_667_968_8).abs() < 1e-9, "{c:?}");
        assert_eq!(c.display(1), "10.5 [6.0–15.0]");
    }

    /// Witness: the normal approximation of the sign test's interval, n/2 ∓ 0.98·√n
    /// (z = 1.96), for 5 000 values 1…5 000: 2 431 and 2 570 (1-based), and coverage
    /// just above 95 %. Before, ½ⁿ was 0 past a thousand trials and the interval
    /// collapsed onto the median.
    #[test]
    fn thousands_of_trials_keep_their_interval() {
        let v: Vec<f64> = (1..=5_000).map(f64::from).collect();
        let c = MedianCi::of(&v, 0.95).unwrap();
        assert!((2_428.0..=2_434.0).contains(&c.lo), "{c:?}");
        assert!((2_567.0..=2_573.0).contains(&c.hi), "{c:?}");
        assert!(c.coverage >= 0.95 && c.coverage < 0.955, "{c:?}");
    }

    #[test]
    fn one_value_and_none() {
        assert_eq!(MedianCi::of(&[], 0.95), None);
        assert_eq!(MedianCi::of(&[f64::NAN], 0.95), None);
        let c = MedianCi::of(&[7.0, f64::NAN], 0.95).unwrap();
        assert_eq!(
            (c.n, c.median, c.lo, c.hi, c.coverage),
            (1, 7.0, 7.0, 7.0, 0.0)
        );
        assert_eq!(c.display(0), "7");
    }
}
