//! The records of seed 002's passive-vs-active experiment: each scenario's per-layer
//! statistics (trials.jsonl) and its samples file, read back for the report.

use super::ResultsError;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A scenario, parsed from its name.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scenario {
    /// `delay`: the RTT alternates between 100 and 150 ms.
    Delay,
    /// `loss-N`: 100 ms RTT and N % random loss both ways.
    Loss {
        /// N, below 100.
        percent: u32,
    },
    /// `queue-NKB`: 100 ms RTT, 10 Mbit/s and an N KB drop-tail queue both ways, filled
    /// by a bulk flow.
    Queue {
        /// N, KB (above 0).
        kbytes: u32,
    },
}

impl Scenario {
    /// `delay`, `loss-N` (percent) or `queue-NKB`.
    pub fn parse(s: &str) -> Option<Self> {
        if s == "delay" {
            return Some(Self::Delay);
        }
        if let Some(p) = s.strip_prefix("loss-") {
            return p
                .parse()
                .ok()
                .filter(|&p| p < 100)
                .map(|percent| Self::Loss { percent });
        }
        s.strip_prefix("queue-")?
            .strip_suffix("KB")?
            .parse()
            .ok()
            .filter(|&k| k > 0)
            .map(|kbytes| Self::Queue { kbytes })
    }

    /// Where a scenario named `name` sorts in tables: delay, then loss and queue
    /// scenarios by size, then names this rttlab does not know.
    pub fn order(name: &str) -> (u8, u32) {
        match Self::parse(name) {
            Some(Self::Delay) => (0, 0),
            Some(Self::Loss { percent }) => (1, percent),
            Some(Self::Queue { kbytes }) => (2, kbytes),
            None => (3, 0),
        }
    }

    /// The seed's scenarios, in its order.
    pub fn seed_names() -> Vec<String> {
        ["delay", "loss-5", "loss-10", "loss-15", "loss-20"]
            .into_iter()
            .map(String::from)
            .chain([10, 100, 200, 300].map(|k| format!("queue-{k}KB")))
            .collect()
    }
}

/// One layer's RTTs in a scenario (ms).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LayerStats {
    /// `icmp` (ping), `app` (the timestamp echo) or `tcp_ts` (the echo connection's
    /// passive TS RTT).
    pub layer: String,
    /// RTT samples of the layer.
    pub samples: u64,
    /// Probes with no answer: pings lost, echoes still outstanding at the end.
    pub unanswered: u64,
    /// Mean RTT, ms; `None` without samples.
    pub mean_ms: Option<f64>,
    /// 5th percentile, ms (sorted index round(0.05·(n−1))); `None` without samples.
    pub p5_ms: Option<f64>,
    /// Median, ms (sorted index round(0.5·(n−1))); `None` without samples.
    pub p50_ms: Option<f64>,
    /// 95th percentile, ms (sorted index round(0.95·(n−1))); `None` without samples.
    pub p95_ms: Option<f64>,
    /// Largest RTT, ms; `None` without samples.
    pub max_ms: Option<f64>,
}

/// A scenario's results.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ScenarioResult {
    /// The scenario's name: `delay`, `loss-N` or `queue-NKB` ([`Scenario::parse`]).
    pub scenario: String,
    /// Which repeat of this scenario (0 for the first; absent in older results).
    #[serde(default)]
    pub trial: u32,
    /// The `icmp`, `app` and `tcp_ts` layers; empty when the trial could not run.
    pub layers: Vec<LayerStats>,
    /// TCP retransmissions of the echo connection (client side, tcp_info).
    pub echo_retransmissions: Option<u32>,
    /// Bytes the bulk flow moved (queue scenarios).
    pub bulk_bytes: u64,
    /// Frames the kernel dropped from the capture ring for want of space.
    pub capture_drops: u64,
    /// Every sample: `t_s,layer,rtt_ms` (seconds since the scenario started).
    pub samples_file: String,
    /// What failed, `; `-separated (`echo: …`, `ping: …`, `capture: …`, `bulk: …`), or
    /// why the trial could not run; `None` when all went well.
    pub error: Option<String>,
}

/// Summary of one layer's samples (exact percentiles by rank).
pub fn stats(layer: &str, series: &[(f64, f64)], unanswered: u64) -> LayerStats {
    let mut v: Vec<f64> = series.iter().map(|&(_, r)| r).collect();
    v.sort_by(f64::total_cmp);
    let q = |p: f64| -> Option<f64> {
        (!v.is_empty()).then(|| v[((p * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)])
    };
    LayerStats {
        layer: layer.into(),
        samples: v.len() as u64,
        unanswered,
        mean_ms: (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64),
        p5_ms: q(0.05),
        p50_ms: q(0.5),
        p95_ms: q(0.95),
        max_ms: v.last().copied(),
    }
}

/// The layers a samples file holds, in the order the experiment writes them.
pub const SAMPLE_LAYERS: [&str; 3] = ["icmp", "app", "tcp_ts"];

/// The header of a samples file.
pub const SAMPLES_HEADER: &str = "t_s,layer,rtt_ms";

/// Read a scenario's samples file back: (layer, t_s, rtt_ms) rows.
///
/// # Errors
/// The file is missing, has not the header the experiment writes, or a row is not
/// a sample: three fields, a time and an RTT that are finite and not negative, one
/// of [`SAMPLE_LAYERS`] (the line and the field are named).
pub fn read_samples(out: &Path, file: &str) -> Result<Vec<(String, f64, f64)>, ResultsError> {
    let p = out.join(file);
    let text = super::read_file(out, file)?;
    let mut lines = text.lines();
    let header = lines.next().unwrap_or("");
    if header != SAMPLES_HEADER {
        return Err(super::invalid(
            &p,
            format!(
                "line 1: \"{}\" is not the header {SAMPLES_HEADER}",
                crate::excerpt(header, 80)
            ),
        ));
    }
    lines
        .enumerate()
        .map(|(k, l)| {
            sample(l).map_err(|why| {
                super::invalid(
                    &p,
                    format!("line {}: {why} in \"{}\"", k + 2, crate::excerpt(l, 80)),
                )
            })
        })
        .collect()
}

/// One row of a samples file, or which field is wrong.
fn sample(line: &str) -> Result<(String, f64, f64), &'static str> {
    let f: Vec<&str> = line.split(',').collect();
    let [t, layer, rtt] = f[..] else {
        return Err("not three fields");
    };
    // Finite, not negative, and below 10⁹ (s or ms: 30 years, 11 days).
    let number = |v: &str| v.parse::<f64>().ok().filter(|x| (0.0..1e9).contains(x));
    let t = number(t).ok_or("t_s is not a time in seconds")?;
    if !SAMPLE_LAYERS.contains(&layer) {
        return Err("layer is not icmp, app or tcp_ts");
    }
    let rtt = number(rtt).ok_or("rtt_ms is not an RTT in ms")?;
    Ok((layer.to_string(), t, rtt))
}

impl super::Trial for ScenarioResult {
    type Key = (String, u32);

    fn key(&self) -> Self::Key {
        (self.scenario.clone(), self.trial)
    }

    fn trial(&self) -> String {
        format!("scenario {}, trial {}", self.scenario, self.trial)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Witness: the rows the experiment writes, and rows that are not samples, each
    /// named by its line and field (before, an empty or garbage file gave a trial of
    /// no samples, NaN and negative RTTs were printed, an unknown layer was dropped).
    #[test]
    fn a_samples_file_is_read_whole_or_named_where_it_is_not_one() {
        let dir = tempfile::tempdir().unwrap();
        let write = |text: &str| std::fs::write(dir.path().join("s.samples.csv"), text).unwrap();
        let read = || read_samples(dir.path(), "s.samples.csv").map_err(|e| e.to_string());
        write("t_s,layer,rtt_ms\n0.000100,icmp,0.250000\n1.5,tcp_ts,0\n");
        assert_eq!(
            read().unwrap(),
            [("icmp".into(), 0.0001, 0.25), ("tcp_ts".into(), 1.5, 0.0)]
        );
        for (text, says) in [
            ("", "line 1: \"\" is not the header t_s,layer,rtt_ms"),
            ("garbage\n", "line 1: \"garbage\" is not the header"),
            (
                "t_s,layer,rtt_ms\n1,icmp,NaN\n",
                "line 2: rtt_ms is not an RTT in ms in \"1,icmp,NaN\"",
            ),
            (
                "t_s,layer,rtt_ms\n1,icmp,0.2\n1,app,-3\n",
                "line 3: rtt_ms is not an RTT",
            ),
            (
                "t_s,layer,rtt_ms\n1,app,1e308\n",
                "line 2: rtt_ms is not an RTT in ms",
            ),
            (
                "t_s,layer,rtt_ms\ninf,app,1\n",
                "line 2: t_s is not a time in seconds",
            ),
            (
                "t_s,layer,rtt_ms\n1,udp,1\n",
                "line 2: layer is not icmp, app or tcp_ts",
            ),
            ("t_s,layer,rtt_ms\n1,app,1,2\n", "line 2: not three fields"),
        ] {
            write(text);
            let e = read().unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }
}
