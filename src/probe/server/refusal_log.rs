//! The server's log of refused and failed conversations, quiet under attack: at most
//! one line per source per interval, and once an interval is over, one summary line of
//! what was not written (how many, from how many sources, why). A Hello flood from
//! 249 addresses wrote 43 134 lines in 30 s when every refusal had its line; peers
//! without the secret could fill the disk of whoever kept the log.
//!
//! Time comes in as an argument; the summary of an interval is written with the first
//! line after it ends (a quiet server has nothing to summarise).

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// The interval one source may have one line in.
pub const INTERVAL: Duration = Duration::from_secs(10);
/// Most sources remembered per interval: beyond, refusals are only counted.
const SOURCES_MAX: usize = 4096;

/// Refusals of the current interval.
pub struct RefusalLog {
    started: Instant,
    /// Sources that have had their line this interval.
    lined: HashSet<IpAddr>,
    /// Refusals this interval, their line written or not.
    refused: u64,
    /// Refusals not written, by why.
    unwritten: BTreeMap<&'static str, u64>,
}

impl RefusalLog {
    /// An empty log whose first interval starts at `now`.
    pub fn new(now: Instant) -> Self {
        Self {
            started: now,
            lined: HashSet::new(),
            refused: 0,
            unwritten: BTreeMap::new(),
        }
    }

    /// A refusal at `now` of a connection from `source` (its address, or its /64),
    /// of kind `why`, saying `line`: the lines to write (none, the line, and before
    /// it the summary of the interval just over).
    pub fn note(
        &mut self,
        now: Instant,
        source: IpAddr,
        why: &'static str,
        line: String,
    ) -> Vec<String> {
        let mut out = Vec::new();
        out.extend(self.roll(now));
        self.refused += 1;
        if self.lined.len() < SOURCES_MAX && self.lined.insert(source) {
            out.push(line);
        } else {
            *self.unwritten.entry(why).or_default() += 1;
        }
        out
    }

    /// The summary of the interval, when it is over at `now` and had unwritten lines;
    /// a new interval starts.
    pub fn roll(&mut self, now: Instant) -> Option<String> {
        let over = now.saturating_duration_since(self.started);
        if over < INTERVAL {
            return None;
        }
        let summary = (!self.unwritten.is_empty()).then(|| {
            let reasons: Vec<String> = self
                .unwritten
                .iter()
                .map(|(why, n)| format!("{n} {why}"))
                .collect();
            let sources = match self.lined.len() {
                n if n >= SOURCES_MAX => format!("{SOURCES_MAX} or more sources"),
                1 => "1 source".to_owned(),
                n => format!("{n} sources"),
            };
            let connections = match self.refused {
                1 => "1 connection".to_owned(),
                n => format!("{n} connections"),
            };
            format!(
                "{connections} refused from {sources} in the last {} s ({}; one line per source per {} s)",
                over.as_secs(),
                reasons.join(", "),
                INTERVAL.as_secs()
            )
        });
        *self = Self::new(now);
        summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u32) -> IpAddr {
        IpAddr::from((0x7f00_0000 + n).to_be_bytes())
    }

    #[test]
    fn one_line_per_source_per_interval_then_a_summary() {
        let t0 = Instant::now();
        let mut log = RefusalLog::new(t0);
        let mut lines = Vec::new();
        // 249 sources, 40 000 refusals in 9 s.
        for i in 0..40_000u32 {
            let at = t0 + Duration::from_micros(u64::from(i) * 225);
            lines.extend(log.note(at, ip(i % 249), "protocol errors", format!("{i}")));
        }
        assert_eq!(lines.len(), 249);
        let after = log.note(t0 + INTERVAL, ip(1), "dropped", "again".into());
        assert_eq!(after.len(), 2, "{after:?}");
        assert_eq!(
            after[0],
            "40000 connections refused from 249 sources in the last 10 s (39751 protocol errors; one line per source per 10 s)"
        );
        assert_eq!(after[1], "again");
    }

    /// Witness: the counts fed in. One source is "1 source", not "1 sources".
    #[test]
    fn one_source_is_said_in_the_singular() {
        let t0 = Instant::now();
        let mut log = RefusalLog::new(t0);
        for i in 0..3 {
            log.note(t0, ip(1), "dropped", format!("{i}"));
        }
        let s = log.roll(t0 + INTERVAL).unwrap();
        assert!(
            s.starts_with("3 connections refused from 1 source in the last"),
            "{s}"
        );
    }

    #[test]
    fn a_quiet_interval_has_no_summary_and_the_table_is_bounded() {
        let t0 = Instant::now();
        let mut log = RefusalLog::new(t0);
        assert_eq!(log.note(t0, ip(1), "x", "a".into()), vec!["a".to_string()]);
        assert_eq!(log.roll(t0 + INTERVAL), None);
        let mut written = 0;
        for i in 0..(SOURCES_MAX as u32 + 100) {
            written += log.note(t0 + INTERVAL, ip(i), "x", String::new()).len();
        }
        assert_eq!(written, SOURCES_MAX);
        assert!(log.lined.len() <= SOURCES_MAX);
        let s = log.roll(t0 + 2 * INTERVAL).unwrap();
        assert!(s.contains("from 4096 or more sources"), "{s}");
        assert!(s.contains("(100 x;"), "{s}");
    }
}
