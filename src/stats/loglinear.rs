//! netperf's log-linear histogram for humans: ten buckets per decade from 1 µs.
//!
//! netperf prints rows `UNIT_USEC`, `TEN_USEC`, … `TEN_SEC`, each with ten columns
//! (0–1, 1–2, … 9–10 units of the row), then `>100_SECS` (seed 000 reads its 40 ms
//! delayed-ACK bump off such a histogram). We derive it from the HDR histogram, so the
//! bucket edges are exact to the HDR resolution (0.1 %).

use super::LatencyHistogram;
use serde::Serialize;

/// One decade: its name, its unit in nanoseconds, and ten counts.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LogLinearRow {
    /// netperf's row name, `UNIT_USEC` … `TEN_SEC`.
    pub name: &'static str,
    /// The row's unit, ns: column i counts samples in [i, i+1) units.
    pub unit_ns: u64,
    /// Samples per column; column 0 is empty in every row but the first, whose column 0
    /// holds every sample under 1 µs.
    pub counts: [u64; 10],
}

/// The whole log-linear view.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LogLinear {
    /// One row per decade, from 1 µs (`UNIT_USEC`) to 10 s (`TEN_SEC`).
    pub rows: Vec<LogLinearRow>,
    /// Samples of 100 s or more.
    pub above_100s: u64,
    /// Samples in the histogram, all rows and `above_100s` included.
    pub total: u64,
}

const DECADES: [(&str, u64); 8] = [
    ("UNIT_USEC", 1_000),
    ("TEN_USEC", 10_000),
    ("HUNDRED_USEC", 100_000),
    ("UNIT_MSEC", 1_000_000),
    ("TEN_MSEC", 10_000_000),
    ("HUNDRED_MSEC", 100_000_000),
    ("UNIT_SEC", 1_000_000_000),
    ("TEN_SEC", 10_000_000_000),
];

impl LogLinear {
    /// Bucket every sample of `h`. Samples under 1 µs fall in UNIT_USEC's first column,
    /// as netperf puts them.
    pub fn from_histogram(h: &LatencyHistogram) -> Self {
        let rows = DECADES
            .iter()
            .map(|&(name, unit_ns)| {
                let mut counts = [0u64; 10];
                // netperf's HIST_add: a value goes to the first decade it is below ten
                // units of, column value/unit; so column 0 of every decade but the first
                // stays empty, and the first decade's column 0 holds everything < 1 µs.
                for (i, c) in counts
                    .iter_mut()
                    .enumerate()
                    .skip(usize::from(unit_ns > 1_000))
                {
                    let i = i as u64;
                    let lo = if i == 0 { 0 } else { unit_ns * i };
                    *c = h.count_between(lo, unit_ns * (i + 1));
                }
                LogLinearRow {
                    name,
                    unit_ns,
                    counts,
                }
            })
            .collect();
        Self {
            rows,
            above_100s: h.count_between(100_000_000_000, u64::MAX),
            total: h.count(),
        }
    }

    /// netperf's text layout.
    pub fn render(&self) -> String {
        let mut out = String::from("Histogram of round-trip times (ten buckets per decade)\n");
        for r in &self.rows {
            out.push_str(&format!("{:<14}:", r.name));
            for c in r.counts {
                out.push_str(&format!(" {c:>6}:"));
            }
            out.pop();
            out.push('\n');
        }
        out.push_str(&format!(
            ">100_SECS: {}\nHIST_TOTAL:      {}\n",
            self.above_100s, self.total
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_follow_netperf_layout() {
        let mut h = LatencyHistogram::new();
        h.record_ns(500); // 0.5 µs → UNIT_USEC col 0
        h.record_ns(5_500); // 5.5 µs → UNIT_USEC col 5
        h.record_ns(12_000); // 12 µs → TEN_USEC col 1 (10–20 µs)
        h.record_ns(95_000); // 95 µs → TEN_USEC col 9 (90–100 µs)
        h.record_ns(40_500_000); // 40.5 ms → TEN_MSEC col 4 (40–50 ms)
        h.record_ns(200_000_000_000); // 200 s → >100 s
        let l = LogLinear::from_histogram(&h);
        assert_eq!(l.rows[0].counts[0], 1);
        assert_eq!(l.rows[0].counts[5], 1);
        assert_eq!(l.rows[1].counts[1], 1);
        assert_eq!(l.rows[1].counts[9], 1);
        assert_eq!(l.rows[4].counts[4], 1);
        assert!(l.rows.iter().skip(1).all(|r| r.counts[0] == 0));
        assert_eq!(l.above_100s, 1);
        let in_rows: u64 = l.rows.iter().flat_map(|r| r.counts).sum();
        assert_eq!(in_rows + l.above_100s, l.total);
        assert!(l.render().contains("TEN_MSEC"));
    }
}
