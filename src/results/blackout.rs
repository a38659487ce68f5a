//! The records of seed 001's blackout experiment (trials.jsonl lines, the settings in
//! run.json) and what is derived from them alone: the `linux` model's prediction for a
//! cell, the recovery path the kernel's counters name, and each cell's median.

use super::ResultsError;
use crate::model::rto::{self, DropAt, Flavour, RtoModel};
use crate::stats::{MedianCi, CI_LEVEL};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// How rto_min is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// The route to the peer carries a locked rto_min metric.
    Route,
    /// net.ipv4.tcp_rto_min_us in each host's namespace.
    Sysctl,
}

/// Where the blackout drops packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlackoutBy {
    /// The lab's emulator, in the path.
    Emulator,
    /// nftables on host a, input and output, as seed 001's script.
    Nftables,
}

/// The sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// rto_min values, ms (`--rto-min`).
    pub rto_min_ms: Vec<u32>,
    /// Thin-stream linear timeouts off (thick), on, or both (`--thin`).
    pub thin: Vec<bool>,
    /// Blackout lengths D, ms (`--disruption`).
    pub disruption_ms: Vec<u32>,
    /// Trials per cell (`--trials`, default 3) and the seed of their order.
    #[serde(flatten)]
    pub repeats: crate::results::Repeats,
    /// How rto_min is set (`--mechanism`).
    pub mechanism: Mechanism,
    /// What drops the packets (`--blackout-by`; always nftables with `-H`).
    pub blackout_by: BlackoutBy,
    /// Congestion control of both data sockets.
    pub cc: String,
    /// Time from the start of TCP_RR to the blackout.
    pub warmup_ms: u32,
    /// A real server (`rttlab serve`) instead of the lab; the blackout is then nftables
    /// on this host and rto_min and thin are set here (thin also per socket at the server).
    pub remote: Option<SocketAddr>,
    /// The lab's emulator busy-polls one CPU instead of sleeping between frames.
    /// Sleeping, its wake-ups stretch by tens of ms under hypervisor steal, and a late
    /// frame before the blackout can lift rttvar (4·mdev, `tcp_rtt_estimator`) past
    /// rto_min and with it the RTO; polling, it leaves client, server and their timers
    /// one vCPU of two here. Full grids on this VM: sleeping, 69 (route) and 68 (sysctl)
    /// of 72 cells within the bound; polling, the route grid twice, 65 and 61 (the
    /// second in docs/results/blackout-route-poll). So sleeping stays the default.
    #[serde(default)]
    pub lab_poll: bool,
    /// The secret shared with a remote server (never written to a results file).
    #[serde(skip)]
    pub secret: Option<Vec<u8>>,
}

impl BlackoutBy {
    /// Where the model puts the drop.
    pub fn drop_at(self) -> DropAt {
        match self {
            BlackoutBy::Emulator => DropAt::Path,
            BlackoutBy::Nftables => DropAt::Local,
        }
    }
}

impl Settings {
    /// Seed 001's grid: rto_min 5/50/200 ms × thick/thin × 12 disruptions, 3 trials.
    pub fn seed_grid() -> Self {
        Self {
            rto_min_ms: vec![5, 50, 200],
            thin: vec![false, true],
            disruption_ms: vec![10, 20, 30, 50, 70, 100, 200, 300, 500, 700, 1000, 1500],
            repeats: super::Repeats { trials: 3, seed: 1 },
            mechanism: Mechanism::Route,
            blackout_by: BlackoutBy::Emulator,
            cc: "cubic".into(),
            warmup_ms: 1000,
            remote: None,
            lab_poll: false,
            secret: None,
        }
    }
}

/// One trial's outcome (a line of trials.jsonl).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrialRecord {
    /// The cell's rto_min, ms.
    pub rto_min_ms: u32,
    /// Whether the cell has thin-stream linear timeouts on.
    pub thin: bool,
    /// The cell's blackout length D, ms.
    pub disruption_ms: u32,
    /// Which trial of the cell, from 0.
    pub trial: u32,
    /// Largest transaction latency (ms): the TCP idle duration.
    pub idle_ms: Option<f64>,
    /// The `linux` model's idle for this cell.
    pub predicted_ms: f64,
    /// A (re)transmission the model schedules within a jiffy of the end of the
    /// disruption (see [`predict`]): the cell may go either way.
    #[serde(default)]
    pub boundary_ms: Option<f64>,
    /// Transactions TCP_RR completed in the trial.
    pub transactions: u64,
    /// Segments the client's data sockets retransmitted; `None` when the run gave no
    /// result.
    pub client_retrans: Option<u64>,
    /// Segments the server's data sockets retransmitted (its report); `None` when the
    /// server sent no report.
    pub server_retrans: Option<u64>,
    /// TcpExt deltas summed over both hosts.
    pub loss_probes: u64,
    /// `TcpExt.TCPTimeouts` delta (retransmission timeouts), summed over both hosts.
    pub timeouts: u64,
    /// `TcpExt.TCPRetransFail` delta (retransmissions the local stack failed to send),
    /// summed over both hosts.
    pub retrans_fail: u64,
    /// `tlp_rto`, `probe0`, `no_drop` or `none` (see [`path_of`]).
    pub path: String,
    /// When the blackout began and ended (CLOCK_REALTIME ns): the emulator's window, or
    /// the moments the nftables rules were in place and gone.
    pub blackout_start_ns: u64,
    /// When the blackout ended (CLOCK_REALTIME ns); 0 when it failed.
    pub blackout_end_ns: u64,
    /// Frames the emulator dropped for the blackout (0 with nftables).
    pub dropped_frames: u64,
    /// The kernel's receive stamp (CLOCK_REALTIME ns) of the last frame the emulator
    /// dropped for this blackout (0: none, or nftables).
    #[serde(default)]
    pub last_drop_ns: u64,
    /// When the trial began (CLOCK_REALTIME ns) and how long it took (s).
    pub started_ns: u64,
    /// How long the trial took, s.
    pub elapsed_s: f64,
    /// Why the trial failed, if it did; failed trials are left out of the summaries.
    pub error: Option<String>,
}

impl super::Trial for TrialRecord {
    type Key = (u32, bool, u32, u32);

    fn key(&self) -> Self::Key {
        (self.rto_min_ms, self.thin, self.disruption_ms, self.trial)
    }

    fn trial(&self) -> String {
        format!(
            "rto_min {} ms{}, D {} ms, trial {}",
            self.rto_min_ms,
            if self.thin { " thin" } else { "" },
            self.disruption_ms,
            self.trial
        )
    }
}

impl TrialRecord {
    /// A trial of `cell` (rto_min ms, thin, D ms) begun at `started_ns`, nothing
    /// measured yet.
    pub fn new(
        (rto_min_ms, thin, disruption_ms): (u32, bool, u32),
        trial: u32,
        started_ns: u64,
    ) -> Self {
        Self {
            rto_min_ms,
            thin,
            disruption_ms,
            trial,
            idle_ms: None,
            predicted_ms: f64::NAN,
            boundary_ms: None,
            transactions: 0,
            client_retrans: None,
            server_retrans: None,
            loss_probes: 0,
            timeouts: 0,
            retrans_fail: 0,
            path: "none".into(),
            blackout_start_ns: 0,
            blackout_end_ns: 0,
            dropped_frames: 0,
            last_drop_ns: 0,
            started_ns,
            elapsed_s: 0.0,
            error: None,
        }
    }
}

/// The path of a trial whose blackout (the emulator's) dropped no frame at all.
pub const NO_DROP: &str = "no_drop";

/// The recovery path from the kernel's counters: any loss probe or timeout is the
/// TLP/RTO schedule; a stall with neither is the zero-window-probe timer of a send the
/// local hook refused (never counted as sent, so never retransmitted: docs/ARCHITECTURE.md §7).
/// An emulator's window that dropped nothing (`dropped` `Some(0)`) met no frame
/// although TCP_RR sends thousands a second: the hosts, or the emulator itself, were
/// stalled for all of D, so whatever TCP did was not recovering from this blackout —
/// [`NO_DROP`], kept out of the comparison.
pub fn path_of(
    loss_probes: u64,
    timeouts: u64,
    idle_ms: Option<f64>,
    d_ms: u32,
    dropped: Option<u64>,
) -> &'static str {
    if dropped == Some(0) {
        NO_DROP
    } else if loss_probes + timeouts > 0 {
        "tlp_rto"
    } else if idle_ms.is_some_and(|i| i >= f64::from(d_ms)) {
        "probe0"
    } else {
        "none"
    }
}

/// The model's idle for a cell (ms), and the (re)transmission scheduled closest to the
/// end of the disruption when it is within one jiffy of it (ms): such a cell is a coin
/// toss, since the lost packet left up to an RTT before the blackout began and timers
/// fire up to a jiffy late, so that packet may land on either side of the end.
pub fn predict(
    rto_min_ms: u32,
    thin: bool,
    d_ms: u32,
    hz: u32,
    drop_at: DropAt,
) -> (f64, Option<f64>) {
    let mut m = RtoModel::new(
        Flavour::Linux,
        Duration::from_millis(u64::from(rto_min_ms)),
        thin,
        hz,
    );
    m.drop_at = drop_at;
    let d = Duration::from_millis(u64::from(d_ms));
    let ev = rto::timeline(&m, d + Duration::from_secs(130));
    let idle = rto::idle(&ev, &m, d).map_or(f64::NAN, |e| e.at_us() / 1e3);
    let jiffy_ms = crate::kernel::hz::jiffy_us(hz) as f64 / 1e3;
    let boundary = ev
        .iter()
        .map(|e| e.at_us() / 1e3)
        .find(|t| (t - f64::from(d_ms)).abs() <= jiffy_ms);
    (idle, boundary)
}

/// The median of each cell by path: (rto_min, thin, D, path) → (n, median idle ms,
/// predicted ms).
#[derive(Clone, Debug, Serialize)]
pub struct CellSummary {
    /// The cell's rto_min, ms.
    pub rto_min_ms: u32,
    /// Whether the cell has thin-stream linear timeouts on.
    pub thin: bool,
    /// The cell's blackout length D, ms.
    pub disruption_ms: u32,
    /// The recovery path of these trials (see [`path_of`]).
    pub path: String,
    /// Trials of the cell with this path and an idle, failed ones left out.
    pub n: usize,
    /// Median idle of those trials, ms.
    pub median_ms: f64,
    /// The `linux` model's idle for the cell, ms (as the cell's first trial recorded it).
    pub predicted_ms: f64,
    /// |median − predicted| ≤ max(5 ms, 5 %).
    pub within: bool,
    /// See [`TrialRecord::boundary_ms`].
    pub boundary_ms: Option<f64>,
    /// Every trial's idle (ms), sorted.
    pub idles_ms: Vec<f64>,
    /// The median's 95 % interval over the trials (order statistics; its coverage).
    pub ci_low_ms: f64,
    /// Upper end of that interval, ms.
    pub ci_high_ms: f64,
    /// The interval's actual coverage (see [`MedianCi::coverage`]).
    pub ci_coverage: f64,
}

/// A cell of the grid: (rto_min ms, thin, disruption ms).
pub type Cell = (u32, bool, u32);

/// Trials folded into their cells as they are read: what a cell's summary needs (each
/// trial's idle, the model's prediction), never the records, so a report's memory is
/// its own size (every idle is in summary.json), not trials.jsonl's.
#[derive(Debug, Default)]
pub struct Cells {
    /// Each (cell, path)'s idles, ms, in the order read.
    idles: BTreeMap<(Cell, String), Vec<f64>>,
    /// Each cell's prediction and boundary, as its first trial (of any path) has them.
    model: BTreeMap<Cell, (f64, Option<f64>)>,
}

impl Cells {
    /// Fold in one trial; a failed one or one without an idle counts only for the
    /// cell's prediction.
    pub fn add(&mut self, t: &TrialRecord) {
        let cell = (t.rto_min_ms, t.thin, t.disruption_ms);
        self.model
            .entry(cell)
            .or_insert((t.predicted_ms, t.boundary_ms));
        if let (None, Some(idle)) = (&t.error, t.idle_ms) {
            self.idles
                .entry((cell, t.path.clone()))
                .or_default()
                .push(idle);
        }
    }

    /// One summary per cell and path (failed trials left out), in (rto_min, thin, D,
    /// path) order.
    pub fn summaries(self) -> Vec<CellSummary> {
        self.idles
            .into_iter()
            .map(|(((r, t, d), p), mut v)| {
                v.sort_by(f64::total_cmp);
                let ci = MedianCi::of(&v, CI_LEVEL).expect("a cell holds a trial's idle");
                let median = ci.median;
                let (predicted, boundary) = self.model[&(r, t, d)];
                CellSummary {
                    rto_min_ms: r,
                    thin: t,
                    disruption_ms: d,
                    path: p,
                    n: v.len(),
                    median_ms: median,
                    predicted_ms: predicted,
                    within: (median - predicted).abs() <= (0.05 * predicted).max(5.0),
                    boundary_ms: boundary,
                    idles_ms: v,
                    ci_low_ms: ci.lo,
                    ci_high_ms: ci.hi,
                    ci_coverage: ci.coverage,
                }
            })
            .collect()
    }
}

/// The derived fields of a trial (the model's prediction and boundary, the recovery
/// path) as this rttlab computes them from the settings and HZ in `run.json` and each
/// trial's own counters: a directory an older version wrote (without `boundary_ms`, or
/// before `no_drop`) renders with every conclusion today's would draw.
#[derive(Clone, Copy, Debug)]
pub struct Recompute {
    hz: u32,
    by: BlackoutBy,
}

impl Recompute {
    /// The rules of the run in the results directory `dir`.
    ///
    /// # Errors
    /// `run.json` cannot be read or lacks the settings or HZ.
    pub fn of(dir: &Path) -> Result<Self, ResultsError> {
        let path = dir.join("run.json");
        let text = super::read_file(dir, "run.json")?;
        let run: serde_json::Value = serde_json::from_str(&text).map_err(super::json(&path))?;
        let s: Settings =
            serde_json::from_value(run["settings"].clone()).map_err(super::json(&path))?;
        let hz = run["host"]["hz"]
            .as_u64()
            .and_then(|h| u32::try_from(h).ok())
            .ok_or_else(|| super::invalid(&path, "no host.hz"))?;
        Ok(Self {
            hz,
            by: s.blackout_by,
        })
    }

    /// `r` with its derived fields recomputed.
    pub fn apply(&self, mut r: TrialRecord) -> TrialRecord {
        (r.predicted_ms, r.boundary_ms) = predict(
            r.rto_min_ms,
            r.thin,
            r.disruption_ms,
            self.hz,
            self.by.drop_at(),
        );
        if r.error.is_none() {
            let dropped = (self.by == BlackoutBy::Emulator).then_some(r.dropped_frames);
            r.path = path_of(
                r.loss_probes,
                r.timeouts,
                r.idle_ms,
                r.disruption_ms,
                dropped,
            )
            .into();
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_medians() {
        assert_eq!(path_of(1, 0, Some(300.0), 200, Some(3)), "tlp_rto");
        assert_eq!(path_of(0, 0, Some(300.0), 200, None), "probe0");
        assert_eq!(path_of(0, 0, Some(1.0), 200, None), "none");
        // The emulator's window met no frame: whatever the counters, not a recovery.
        assert_eq!(path_of(0, 0, Some(160.0), 30, Some(0)), NO_DROP);
        assert_eq!(path_of(1, 0, Some(160.0), 30, Some(0)), NO_DROP);
        let t = |idle: f64, path: &str| TrialRecord {
            idle_ms: Some(idle),
            predicted_ms: 100.0,
            transactions: 1,
            path: path.into(),
            ..TrialRecord::new((5, false, 100), 0, 0)
        };
        let mut cells = Cells::default();
        for trial in [t(104.0, "tlp_rto"), t(98.0, "tlp_rto"), t(300.0, "probe0")] {
            cells.add(&trial);
        }
        let s = cells.summaries();
        assert_eq!(s.len(), 2);
        let probe0 = s.iter().find(|c| c.path == "probe0").unwrap();
        assert_eq!(
            (probe0.n, probe0.median_ms, probe0.within),
            (1, 300.0, false)
        );
        let rto = s.iter().find(|c| c.path == "tlp_rto").unwrap();
        assert_eq!((rto.n, rto.median_ms, rto.within), (2, 101.0, true));
    }
}
