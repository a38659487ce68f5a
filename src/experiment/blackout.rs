//! Seed 001's experiment: how long a request/response connection stays idle when the
//! network drops everything for a disruption D, for each rto_min and thin/thick, and
//! what the `linux` retransmission model predicts for the same cell.
//!
//! Each trial, in the lab: set rto_min (route metric or sysctl) and
//! tcp_thin_linear_timeouts on both hosts, run TCP_RR `-r 1,2` from a to b with the
//! chosen congestion control on a fixed data port, black the port out for D about one
//! second in, and record the largest transaction latency (the idle: the transaction in
//! flight when the blackout began waits for the first retransmission after it ends),
//! both ends' retransmissions, and the kernel's TcpExt counters, which name the path
//! the recovery took. The blackout is the emulator's (exact, in the path: the TLP/RTO
//! schedule applies) or, as in the seed's script, nftables rules on host a (the
//! refused send may fall back to the zero-window-probe timer).
//!
//! The hosts never save TCP metrics (`net.ipv4.tcp_no_metrics_save = 1`), which is
//! the seed's per-trial `ip tcp_metrics flush` made permanent: a cached RTT would
//! change a new connection's first RTO.

use super::bench::Nft;
use super::results::{ResultsDir, ResultsError};
use crate::kernel::tuning::{self, Journal};
use crate::kernel::{netns, netstat, realtime_ns, route, sysctl};
use crate::lab::control::Start;
use crate::lab::emulator::Dir;
use crate::lab::impair::Impairments;
use crate::lab::{Lab, LabError, LabSpec, Node};
use crate::model::rto::{self, DropAt, Flavour, RtoModel};
use crate::probe::rr::{self, RrSettings, RunControl};
use crate::probe::server::{Server, ServerConfig};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

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
    pub rto_min_ms: Vec<u32>,
    pub thin: Vec<bool>,
    pub disruption_ms: Vec<u32>,
    pub trials: u32,
    pub mechanism: Mechanism,
    pub blackout_by: BlackoutBy,
    /// Congestion control of both data sockets.
    pub cc: String,
    /// Time from the start of TCP_RR to the blackout.
    pub warmup_ms: u32,
    /// Seed of the trial order.
    pub seed: u64,
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
            trials: 3,
            mechanism: Mechanism::Route,
            blackout_by: BlackoutBy::Emulator,
            cc: "cubic".into(),
            warmup_ms: 1000,
            seed: 1,
            remote: None,
            lab_poll: false,
            secret: None,
        }
    }
}

/// One trial's outcome (a line of trials.jsonl).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrialRecord {
    pub rto_min_ms: u32,
    pub thin: bool,
    pub disruption_ms: u32,
    pub trial: u32,
    /// Largest transaction latency (ms): the TCP idle duration.
    pub idle_ms: Option<f64>,
    /// The `linux` model's idle for this cell.
    pub predicted_ms: f64,
    /// A (re)transmission the model schedules within a jiffy of the end of the
    /// disruption (see [`predict`]): the cell may go either way.
    #[serde(default)]
    pub boundary_ms: Option<f64>,
    pub transactions: u64,
    pub client_retrans: Option<u64>,
    pub server_retrans: Option<u64>,
    /// TcpExt deltas summed over both hosts.
    pub loss_probes: u64,
    pub timeouts: u64,
    pub retrans_fail: u64,
    /// `tlp_rto`, `probe0`, `no_drop` or `none` (see [`path_of`]).
    pub path: String,
    /// When the blackout began and ended (CLOCK_REALTIME ns): the emulator's window, or
    /// the moments the nftables rules were in place and gone.
    pub blackout_start_ns: u64,
    pub blackout_end_ns: u64,
    /// Frames the emulator dropped for the blackout (0 with nftables).
    pub dropped_frames: u64,
    /// When the trial began (CLOCK_REALTIME ns) and how long it took (s).
    pub started_ns: u64,
    pub elapsed_s: f64,
    pub error: Option<String>,
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

/// Errors of the experiment.
#[derive(Debug, thiserror::Error)]
pub enum BlackoutError {
    #[error(transparent)]
    Lab(#[from] LabError),
    #[error(transparent)]
    Results(#[from] ResultsError),
    #[error("{0}")]
    Setup(String),
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

/// Trials in the seed script's randomised order (a Fisher–Yates shuffle of every
/// cell × trial, from `seed`).
pub fn plan(s: &Settings) -> Vec<(u32, bool, u32, u32)> {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    let mut v = Vec::new();
    for &r in &s.rto_min_ms {
        for &t in &s.thin {
            for &d in &s.disruption_ms {
                for k in 0..s.trials {
                    v.push((r, t, d, k));
                }
            }
        }
    }
    v.shuffle(&mut rand::rngs::SmallRng::seed_from_u64(s.seed));
    v
}

const SERVER_PORT: u16 = 12866;

/// Where trials run: the lab (hosts a and b, both tuned), or this host against a
/// remote server (this host tuned, every change journalled and reverted at the end).
struct Bench {
    lab: Option<Lab>,
    server_handle: Option<crate::probe::server::ServerHandle>,
    server: SocketAddr,
    /// (namespace, peer) of each host whose knobs the run sets.
    hosts: Vec<(Option<String>, IpAddr)>,
    journal: Option<Journal>,
}

impl Drop for Bench {
    fn drop(&mut self) {
        if let Some(s) = self.server_handle.take() {
            s.shutdown();
        }
        // This run's own journal entries only (its nftables table, the knobs it set,
        // each back to what it found): a value the user set earlier with `rttlab
        // tune` stays, recorded under the user's own entry.
        if let Some(j) = &self.journal {
            let _ = j.revert(|_| true);
        }
    }
}

const KNOBS: [&str; 2] = [
    "net.ipv4.tcp_rto_min_us",
    "net.ipv4.tcp_thin_linear_timeouts",
];
/// The nftables table of a host blackout.
const NFT_TABLE: &str = "rttlab_blackout";
/// Adding the (empty) table first makes the delete succeed whether or not it existed.
const REMOVE_TABLE: &str = "table inet rttlab_blackout\ndelete table inet rttlab_blackout\n";

fn setup_err(what: &str) -> impl FnOnce(String) -> BlackoutError + '_ {
    move |e| BlackoutError::Setup(format!("{what}: {e}"))
}

fn lab_bench(name: &str, poll: bool) -> Result<Bench, BlackoutError> {
    let mut spec = LabSpec::new(name, Impairments::default());
    spec.poll = poll;
    let lab = Lab::up(&spec)?;
    for n in [Node::A, Node::B] {
        sysctl::write(Some(lab.netns(n)), "net.ipv4.tcp_no_metrics_save", "1")
            .map_err(|e| setup_err("tcp_no_metrics_save")(e.to_string()))?;
    }
    let (a, b) = (IpAddr::V4(lab.info().a.ipv4), IpAddr::V4(lab.info().b.ipv4));
    let server = SocketAddr::new(b, SERVER_PORT);
    let handle = netns::run_in(Some(lab.netns(Node::B)), || {
        Server::bind(ServerConfig::for_own_run(server))
            .map_err(|e| e.to_string())?
            .spawn()
            .map_err(|e| e.to_string())
    })
    .map_err(|e| setup_err("server")(e.to_string()))?
    .map_err(setup_err("server"))?;
    lab.wait_quiet(Duration::from_millis(1200), Duration::from_secs(6));
    let hosts = vec![
        (Some(lab.netns(Node::A).to_string()), b),
        (Some(lab.netns(Node::B).to_string()), a),
    ];
    Ok(Bench {
        lab: Some(lab),
        server_handle: Some(handle),
        server,
        hosts,
        journal: None,
    })
}

fn remote_bench(server: SocketAddr) -> Result<Bench, BlackoutError> {
    let journal = Journal::for_run("blackout");
    // Journalled before it exists, so that after a crash `rttlab tune revert --all`
    // removes it.
    tuning::record_nft_table(&journal, None, "inet", NFT_TABLE)
        .map_err(|e| setup_err("journal")(e.to_string()))?;
    nft_here(None, REMOVE_TABLE).map_err(setup_err("nftables"))?;
    Ok(Bench {
        lab: None,
        server_handle: None,
        server,
        hosts: vec![(None, server.ip())],
        journal: Some(journal),
    })
}

/// Set rto_min on host `ns` for its route to `peer`, or by sysctl; through the journal
/// when one is given (this host's own knobs).
fn set_rto_min(
    ns: Option<&str>,
    peer: IpAddr,
    mech: Mechanism,
    ms: u32,
    j: Option<&Journal>,
) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    match mech {
        Mechanism::Route => {
            // The route the kernel uses for the peer (`ip route get fibmatch`).
            let r = route::lookup(ns, peer).map_err(|x| e(&x))?;
            match j {
                Some(j) => tuning::set_route_rto_min(j, ns, &r, Some(ms))
                    .map(drop)
                    .map_err(|x| e(&x)),
                None => route::set_rto_min(ns, &r, Some(route::RtoMin { ms, locked: true }))
                    .map_err(|x| e(&x)),
            }
        }
        Mechanism::Sysctl => set_knob(ns, KNOBS[0], &(u64::from(ms) * 1000).to_string(), j),
    }
}

fn set_knob(ns: Option<&str>, key: &str, value: &str, j: Option<&Journal>) -> Result<(), String> {
    match j {
        Some(j) => tuning::set_sysctl(j, ns, key, value)
            .map(drop)
            .map_err(|e| e.to_string()),
        None => sysctl::write(ns, key, value).map_err(|e| e.to_string()),
    }
}

/// Run an nftables script in the lab's host a, or on this host (`None`).
fn nft_here(lab: Option<&Lab>, script: &str) -> Result<(), String> {
    Nft::spawn(lab, Node::A)?.run(script)
}

/// Run one trial.
fn trial(
    b: &Bench,
    s: &Settings,
    (rto_min_ms, thin, d_ms, k): (u32, bool, u32, u32),
    port: u16,
    hz: u32,
) -> TrialRecord {
    let drop_at = s.blackout_by.drop_at();
    let (predicted_ms, boundary_ms) = predict(rto_min_ms, thin, d_ms, hz, drop_at);
    let mut rec = TrialRecord {
        rto_min_ms,
        thin,
        disruption_ms: d_ms,
        trial: k,
        idle_ms: None,
        predicted_ms,
        boundary_ms,
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
        started_ns: realtime_ns(),
        elapsed_s: 0.0,
        error: None,
    };
    let t0 = Instant::now();
    let j = b.journal.as_ref();
    let prep = || -> Result<(), String> {
        for (ns, peer) in &b.hosts {
            set_rto_min(ns.as_deref(), *peer, s.mechanism, rto_min_ms, j)?;
            set_knob(ns.as_deref(), KNOBS[1], if thin { "1" } else { "0" }, j)?;
        }
        Ok(())
    };
    if let Err(e) = prep() {
        rec.error = Some(e);
        return rec;
    }
    let counters = || -> Vec<_> {
        b.hosts
            .iter()
            .map(|(ns, _)| netstat::read(ns.as_deref()))
            .collect()
    };
    let drops = || {
        b.lab.as_ref().map_or(0, |l| {
            let st = l.status();
            st.a2b.counters.drop_blackout + st.b2a.counters.drop_blackout
        })
    };
    let client_ns = b.hosts[0].0.as_deref();
    let before = counters();
    let dropped0 = drops();
    let warmup = Duration::from_millis(u64::from(s.warmup_ms));
    let d = Duration::from_millis(u64::from(d_ms));
    let run_for = warmup
        + d.max(Duration::from_secs_f64(predicted_ms.max(0.0) / 1e3))
        + match s.blackout_by {
            BlackoutBy::Emulator => Duration::from_millis(250),
            // nft's own time to change the ruleset delays the blackout's real start.
            BlackoutBy::Nftables => Duration::from_millis(1000),
        };
    let mut rs = RrSettings::new(b.server);
    rs.secret.clone_from(&s.secret);
    // Per socket too, so a remote server's end is thin as well.
    rs.thin_linear_timeouts = thin;
    rs.request_size = 1;
    rs.response_size = 2;
    rs.duration = Some(run_for);
    rs.data_port = port;
    rs.congestion = Some(s.cc.clone());
    rs.percentiles = vec![];
    let ctl = RunControl::default();
    let result = std::thread::scope(|sc| {
        let blackout = sc.spawn(|| -> Result<(u64, u64), String> {
            match (s.blackout_by, &b.lab) {
                (BlackoutBy::Emulator, Some(lab)) => {
                    let w = lab
                        .blackout(&Dir::BOTH, d, Some(port), Start::After { ns: warmup.as_nanos() as u64 })
                        .map_err(|e| e.to_string())?;
                    Ok((w.start_ns, w.end_ns))
                }
                (BlackoutBy::Emulator, None) => {
                    Err("the emulator's blackout needs the lab; with a remote server use nftables".into())
                }
                (BlackoutBy::Nftables, lab) => {
                    let (add, del) = (
                        Nft::spawn(lab.as_ref(), Node::A)?,
                        Nft::spawn(lab.as_ref(), Node::A)?,
                    );
                    std::thread::sleep(warmup);
                    add.run(
                        &format!(
                            "table inet rttlab_blackout {{\n chain input {{ type filter hook input priority 0; tcp sport {port} drop; tcp dport {port} drop; }}\n chain output {{ type filter hook output priority 0; tcp sport {port} drop; tcp dport {port} drop; }}\n}}\n"
                        ),
                    )?;
                    let start = realtime_ns();
                    std::thread::sleep(d);
                    del.run("delete table inet rttlab_blackout\n")?;
                    Ok((start, realtime_ns()))
                }
            }
        });
        let r = netns::run_in(client_ns, || rr::run(&rs, &ctl));
        (r, blackout.join())
    });
    let after = counters();
    rec.dropped_frames = drops().saturating_sub(dropped0);
    match result.1 {
        Ok(Ok((s0, s1))) => {
            rec.blackout_start_ns = s0;
            rec.blackout_end_ns = s1;
        }
        Ok(Err(e)) => rec.error = Some(format!("blackout: {e}")),
        Err(_) => rec.error = Some("blackout thread panicked".into()),
    }
    match result.0 {
        Ok(Ok(r)) => {
            rec.idle_ms = r.latency.max_us.map(|x| x / 1e3);
            rec.transactions = r.transactions;
            rec.client_retrans = r.local_retrans;
            rec.server_retrans = r.remote_retrans;
            if let Some(e) = r.error {
                rec.error.get_or_insert(e);
            }
        }
        Ok(Err(e)) => {
            rec.error.get_or_insert(e.to_string());
        }
        Err(e) => {
            rec.error.get_or_insert(e.to_string());
        }
    }
    for (b0, b1) in before.iter().zip(&after) {
        if let (Ok(x), Ok(y)) = (b0, b1) {
            rec.loss_probes += netstat::delta(x, y, "TcpExt.TCPLossProbes");
            rec.timeouts += netstat::delta(x, y, "TcpExt.TCPTimeouts");
            rec.retrans_fail += netstat::delta(x, y, "TcpExt.TCPRetransFail");
        }
    }
    let dropped = (s.blackout_by == BlackoutBy::Emulator).then_some(rec.dropped_frames);
    rec.path = path_of(rec.loss_probes, rec.timeouts, rec.idle_ms, d_ms, dropped).into();
    rec.elapsed_s = t0.elapsed().as_secs_f64();
    rec
}

/// What the runner reports after each trial.
pub struct Progress<'a> {
    pub done: usize,
    pub total: usize,
    pub eta: Duration,
    pub last: &'a TrialRecord,
}

/// Run the sweep into `out` (resuming what it holds), calling `progress` after each
/// trial; stop early when `stop` returns true. Returns every trial of the run.
///
/// # Errors
/// The lab or results directory could not be set up. Failed trials are recorded with
/// their error, not returned.
pub fn run(
    s: &Settings,
    out: &Path,
    hz: u32,
    facts: &serde_json::Value,
    stop: &dyn Fn() -> bool,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Vec<TrialRecord>, BlackoutError> {
    let settings = serde_json::to_value(s).map_err(|e| BlackoutError::Setup(e.to_string()))?;
    let (mut dir, mut done) = ResultsDir::open::<TrialRecord>(out, "blackout", &settings, facts)?;
    // Tables always show this version's model, also for trials an older one recorded.
    let drop_at = s.blackout_by.drop_at();
    for r in &mut done {
        (r.predicted_ms, r.boundary_ms) =
            predict(r.rto_min_ms, r.thin, r.disruption_ms, hz, drop_at);
    }
    let todo: Vec<_> = plan(s)
        .into_iter()
        .filter(|&(r, t, d, k)| {
            !done
                .iter()
                .any(|x| (x.rto_min_ms, x.thin, x.disruption_ms, x.trial) == (r, t, d, k))
        })
        .collect();
    if todo.is_empty() {
        return Ok(done);
    }
    let b = match s.remote {
        Some(server) => remote_bench(server)?,
        None => lab_bench(
            &format!("blackout-{}", std::process::id() % 100_000),
            s.lab_poll,
        )?,
    };
    let total = todo.len();
    let t0 = Instant::now();
    for (i, cell) in todo.into_iter().enumerate() {
        if stop() {
            break;
        }
        // Inside `rttlab serve`'s default data ports (12867-32767).
        let port = 20_000 + (i % 10_000) as u16;
        let rec = trial(&b, s, cell, port, hz);
        dir.record(&rec)?;
        let per = t0.elapsed() / (i as u32 + 1);
        progress(Progress {
            done: i + 1,
            total,
            eta: per * (total - i - 1) as u32,
            last: &rec,
        });
        done.push(rec);
    }
    Ok(done)
}

/// The median of each cell by path: (rto_min, thin, D, path) → (n, median idle ms,
/// predicted ms).
#[derive(Clone, Debug, Serialize)]
pub struct CellSummary {
    pub rto_min_ms: u32,
    pub thin: bool,
    pub disruption_ms: u32,
    pub path: String,
    pub n: usize,
    pub median_ms: f64,
    pub predicted_ms: f64,
    /// |median − predicted| ≤ max(5 ms, 5 %).
    pub within: bool,
    /// See [`TrialRecord::boundary_ms`].
    pub boundary_ms: Option<f64>,
    /// Every trial's idle (ms), sorted.
    pub idles_ms: Vec<f64>,
}

/// Summarise trials per cell and path (failed trials left out).
pub fn summarise(trials: &[TrialRecord]) -> Vec<CellSummary> {
    let mut keys: Vec<(u32, bool, u32, String)> = trials
        .iter()
        .filter(|t| t.error.is_none() && t.idle_ms.is_some())
        .map(|t| (t.rto_min_ms, t.thin, t.disruption_ms, t.path.clone()))
        .collect();
    keys.sort_by(|a, b| (a.0, a.1, a.2, &a.3).cmp(&(b.0, b.1, b.2, &b.3)));
    keys.dedup();
    keys.into_iter()
        .map(|(r, t, d, p)| {
            let mut v: Vec<f64> = trials
                .iter()
                .filter(|x| {
                    x.error.is_none()
                        && (x.rto_min_ms, x.thin, x.disruption_ms) == (r, t, d)
                        && x.path == p
                })
                .filter_map(|x| x.idle_ms)
                .collect();
            v.sort_by(f64::total_cmp);
            let median = if v.len() % 2 == 1 {
                v[v.len() / 2]
            } else {
                (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
            };
            let first = trials
                .iter()
                .find(|x| (x.rto_min_ms, x.thin, x.disruption_ms) == (r, t, d));
            let predicted = first.map_or(f64::NAN, |x| x.predicted_ms);
            CellSummary {
                rto_min_ms: r,
                thin: t,
                disruption_ms: d,
                path: p,
                n: v.len(),
                median_ms: median,
                predicted_ms: predicted,
                within: (median - predicted).abs() <= (0.05 * predicted).max(5.0),
                boundary_ms: first.and_then(|x| x.boundary_ms),
                idles_ms: v,
            }
        })
        .collect()
}

/// The raw trials of the results directory `dir` with their derived fields (the model's
/// prediction and boundary, the recovery path) recomputed by this rttlab from the
/// settings and HZ in `run.json` and each trial's own counters: a directory an older
/// version wrote (without `boundary_ms`, or before `no_drop`) renders with every
/// conclusion today's would draw.
///
/// # Errors
/// `run.json` cannot be read or lacks the settings.
pub fn recompute(
    dir: &Path,
    mut trials: Vec<TrialRecord>,
) -> Result<Vec<TrialRecord>, BlackoutError> {
    let text = std::fs::read_to_string(dir.join("run.json"))
        .map_err(|e| BlackoutError::Setup(format!("{}: {e}", dir.display())))?;
    let run: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| BlackoutError::Setup(e.to_string()))?;
    let s: Settings = serde_json::from_value(run["settings"].clone())
        .map_err(|e| BlackoutError::Setup(format!("run.json settings: {e}")))?;
    let hz = run["host"]["hz"]
        .as_u64()
        .and_then(|h| u32::try_from(h).ok())
        .ok_or_else(|| BlackoutError::Setup("run.json has no host.hz".into()))?;
    let drop_at = s.blackout_by.drop_at();
    for r in &mut trials {
        (r.predicted_ms, r.boundary_ms) =
            predict(r.rto_min_ms, r.thin, r.disruption_ms, hz, drop_at);
        if r.error.is_none() {
            let dropped = (s.blackout_by == BlackoutBy::Emulator).then_some(r.dropped_frames);
            r.path = path_of(
                r.loss_probes,
                r.timeouts,
                r.idle_ms,
                r.disruption_ms,
                dropped,
            )
            .into();
        }
    }
    Ok(trials)
}

/// Write the tables, charts and report of `trials` into the results directory `out`
/// (summary.json, tables.txt, *.svg, report.html), returning the tables' text.
///
/// # Errors
/// A write failed.
pub fn write_report(out: &Path, trials: &[TrialRecord]) -> Result<String, BlackoutError> {
    let cells = summarise(trials);
    let text = crate::report::blackout::tables(&cells);
    let fail = |e: std::io::Error| BlackoutError::Setup(format!("{}: {e}", out.display()));
    let json =
        serde_json::to_string_pretty(&cells).map_err(|e| BlackoutError::Setup(e.to_string()))?;
    std::fs::write(out.join("summary.json"), json).map_err(fail)?;
    std::fs::write(out.join("tables.txt"), &text).map_err(fail)?;
    let measured: Vec<CellSummary> = cells
        .iter()
        .filter(|c| c.path != NO_DROP)
        .cloned()
        .collect();
    let charts = crate::report::blackout::charts(&measured);
    for (name, svg) in &charts {
        std::fs::write(out.join(name), svg).map_err(fail)?;
    }
    let run = std::fs::read_to_string(out.join("run.json")).unwrap_or_default();
    std::fs::write(
        out.join("report.html"),
        crate::report::blackout::html(&run, &text, &charts),
    )
    .map_err(fail)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_covers_every_cell_once_in_a_seeded_order() {
        let s = Settings::seed_grid();
        let p = plan(&s);
        assert_eq!(p.len(), 3 * 2 * 12 * 3);
        let mut q = p.clone();
        q.sort();
        q.dedup();
        assert_eq!(q.len(), p.len());
        assert_eq!(p, plan(&s));
        assert_ne!(p, {
            let mut x = p.clone();
            x.sort();
            x
        });
    }

    #[test]
    fn paths_and_medians() {
        assert_eq!(path_of(1, 0, Some(300.0), 200, Some(3)), "tlp_rto");
        assert_eq!(path_of(0, 0, Some(300.0), 200, None), "probe0");
        assert_eq!(path_of(0, 0, Some(1.0), 200, None), "none");
        // The emulator's window met no frame: whatever the counters, not a recovery.
        assert_eq!(path_of(0, 0, Some(160.0), 30, Some(0)), NO_DROP);
        assert_eq!(path_of(1, 0, Some(160.0), 30, Some(0)), NO_DROP);
        let t = |idle: f64, path: &str| TrialRecord {
            rto_min_ms: 5,
            thin: false,
            disruption_ms: 100,
            trial: 0,
            idle_ms: Some(idle),
            predicted_ms: 100.0,
            boundary_ms: None,
            transactions: 1,
            client_retrans: None,
            server_retrans: None,
            loss_probes: 0,
            timeouts: 0,
            retrans_fail: 0,
            path: path.into(),
            blackout_start_ns: 0,
            blackout_end_ns: 0,
            dropped_frames: 0,
            started_ns: 0,
            elapsed_s: 0.0,
            error: None,
        };
        let s = summarise(&[t(104.0, "tlp_rto"), t(98.0, "tlp_rto"), t(300.0, "probe0")]);
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
