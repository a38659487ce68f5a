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

use super::runner::{Experiment, TrialContext};
use super::testbed::{LabServer, Nft};
use super::{ExperimentError, TrialError};
use crate::kernel::tuning::{self, Journal};
use crate::kernel::{netns, netstat, realtime_ns, route, sysctl};
use crate::lab::emulator::Dir;
use crate::lab::impair::Impairments;
use crate::lab::socket::Start;
use crate::lab::{Lab, LabSpec, Node};
use crate::probe::rr::{self, RrSettings, RunControl};
use crate::results::blackout::{
    path_of, predict, BlackoutBy, Cell, Cells, Mechanism, Recompute, Settings, TrialRecord,
};
use crate::results::ResultsError;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

/// Where trials run: the lab (hosts a and b, both tuned), or this host against a
/// remote server (this host tuned, every change journalled and reverted at the end).
pub struct Testbed {
    lab: Option<LabServer>,
    server: SocketAddr,
    /// (namespace, peer) of each host whose knobs the run sets.
    hosts: Vec<(Option<String>, IpAddr)>,
    journal: Option<Journal>,
}

impl Testbed {
    fn lab(&self) -> Option<&Lab> {
        self.lab.as_ref().map(LabServer::lab)
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
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

fn setup_err<E: Into<Box<dyn std::error::Error + Send + Sync>>>(
    step: &'static str,
) -> impl FnOnce(E) -> ExperimentError {
    move |e| ExperimentError::Setup {
        step: step.into(),
        source: e.into(),
    }
}

fn lab_testbed(name: &str, poll: bool) -> Result<Testbed, ExperimentError> {
    let mut spec = LabSpec::new(name, Impairments::default());
    spec.poll = poll;
    let testbed = LabServer::up_spec(&spec)?;
    let lab = testbed.lab();
    for n in [Node::A, Node::B] {
        sysctl::write(Some(lab.netns(n)), "net.ipv4.tcp_no_metrics_save", "1")
            .map_err(setup_err("tcp_no_metrics_save"))?;
    }
    let (a, b) = (IpAddr::V4(lab.info().a.ipv4), IpAddr::V4(lab.info().b.ipv4));
    let hosts = vec![
        (Some(lab.netns(Node::A).to_string()), b),
        (Some(lab.netns(Node::B).to_string()), a),
    ];
    Ok(Testbed {
        server: testbed.server,
        lab: Some(testbed),
        hosts,
        journal: None,
    })
}

fn remote_testbed(server: SocketAddr, s: &Settings) -> Result<Testbed, ExperimentError> {
    // Asked once before anything is changed: a server that refuses the settings (a
    // congestion control it does not allow, a missing secret) would refuse every
    // trial, and the run would end with no trial measured and empty tables.
    let mut asked = rr_settings(server, s, false, 0, Duration::from_millis(100));
    asked.duration = None;
    asked.count = Some(1);
    rr::run(&asked, &RunControl::default())
        .map_err(setup_err("a first transaction with the server"))?;
    let journal = Journal::for_run(crate::results::names::BLACKOUT);
    // Journalled before it exists, so that after a crash `rttlab tune revert --all`
    // removes it.
    tuning::record_nft_table(&journal, None, "inet", NFT_TABLE).map_err(setup_err("journal"))?;
    nft_here(None, REMOVE_TABLE).map_err(setup_err("nftables"))?;
    Ok(Testbed {
        lab: None,
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
) -> Result<(), TrialError> {
    let step = || format!("rto_min {ms} ms on the route to {peer}");
    match mech {
        Mechanism::Route => {
            // The route the kernel uses for the peer (`ip route get fibmatch`).
            let r = route::lookup(ns, peer).map_err(TrialError::step(step()))?;
            match j {
                Some(j) => tuning::set_route_rto_min(j, ns, &r, Some(ms))
                    .map(drop)
                    .map_err(TrialError::step(step())),
                None => route::set_rto_min(ns, &r, Some(route::RtoMin { ms, locked: true }))
                    .map_err(TrialError::step(step())),
            }
        }
        Mechanism::Sysctl => set_knob(ns, KNOBS[0], &(u64::from(ms) * 1000).to_string(), j),
    }
}

fn set_knob(
    ns: Option<&str>,
    key: &str,
    value: &str,
    j: Option<&Journal>,
) -> Result<(), TrialError> {
    let step = || format!("{key} = {value}");
    match j {
        Some(j) => tuning::set_sysctl(j, ns, key, value)
            .map(drop)
            .map_err(TrialError::step(step())),
        None => sysctl::write(ns, key, value).map_err(TrialError::step(step())),
    }
}

/// Run an nftables script in the lab's host a, or on this host (`None`).
fn nft_here(lab: Option<&Lab>, script: &str) -> Result<(), TrialError> {
    Nft::spawn(lab, Node::A)?.run(script)
}

/// TCP_RR `-r 1,2` on `port` for `run_for`, thin per socket too (so a remote server's
/// end is thin as well), with the sweep's congestion control.
fn rr_settings(
    server: SocketAddr,
    s: &Settings,
    thin: bool,
    port: u16,
    run_for: Duration,
) -> RrSettings {
    let mut rs = RrSettings::new(server);
    rs.secret.clone_from(&s.secret);
    rs.thin_linear_timeouts = thin;
    rs.request_size = 1;
    rs.response_size = 2;
    rs.duration = Some(run_for);
    rs.data_port = port;
    rs.congestion = Some(s.cc.clone());
    rs.percentiles = vec![];
    rs
}

/// Black out `port` for `d`, `warmup` from now: the lab's emulator (both directions, in
/// the path) or nftables on host a. Returns when it began and ended (CLOCK_REALTIME ns).
fn black_out(
    b: &Testbed,
    by: BlackoutBy,
    warmup: Duration,
    d: Duration,
    port: u16,
) -> Result<(u64, u64), TrialError> {
    match (by, b.lab()) {
        (BlackoutBy::Emulator, Some(lab)) => {
            let w = lab
                .blackout(
                    &Dir::BOTH,
                    d,
                    Some(port),
                    Start::After {
                        ns: crate::stats::units::ns(warmup),
                    },
                )
                .map_err(TrialError::step("the emulator's blackout"))?;
            Ok((w.start_ns, w.end_ns))
        }
        (BlackoutBy::Emulator, None) => Err(TrialError::EmulatorBlackoutNeedsLab),
        (BlackoutBy::Nftables, lab) => {
            let (add, del) = (Nft::spawn(lab, Node::A)?, Nft::spawn(lab, Node::A)?);
            std::thread::sleep(warmup);
            add.run(&format!(
                "table inet rttlab_blackout {{\n chain input {{ type filter hook input priority 0; tcp sport {port} drop; tcp dport {port} drop; }}\n chain output {{ type filter hook output priority 0; tcp sport {port} drop; tcp dport {port} drop; }}\n}}\n"
            ))?;
            let start = realtime_ns();
            std::thread::sleep(d);
            del.run("delete table inet rttlab_blackout\n")?;
            Ok((start, realtime_ns()))
        }
    }
}

/// Run one trial.
fn trial(
    b: &Testbed,
    s: &Settings,
    (rto_min_ms, thin, d_ms): Cell,
    k: u32,
    port: u16,
    hz: u32,
) -> TrialRecord {
    let drop_at = s.blackout_by.drop_at();
    let (predicted_ms, boundary_ms) = predict(rto_min_ms, thin, d_ms, hz, drop_at);
    let mut rec = TrialRecord::new((rto_min_ms, thin, d_ms), k, realtime_ns());
    (rec.predicted_ms, rec.boundary_ms) = (predicted_ms, boundary_ms);
    let t0 = Instant::now();
    let j = b.journal.as_ref();
    let prep = || -> Result<(), TrialError> {
        for (ns, peer) in &b.hosts {
            set_rto_min(ns.as_deref(), *peer, s.mechanism, rto_min_ms, j)?;
            set_knob(ns.as_deref(), KNOBS[1], if thin { "1" } else { "0" }, j)?;
        }
        Ok(())
    };
    if let Err(e) = prep() {
        rec.error = Some(e.chain());
        return rec;
    }
    let counters = || -> Vec<_> {
        b.hosts
            .iter()
            .map(|(ns, _)| netstat::read(ns.as_deref()))
            .collect()
    };
    let drops = || {
        b.lab().map_or(0, |l| {
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
    let rs = rr_settings(b.server, s, thin, port, run_for);
    let ctl = RunControl::default();
    let result = std::thread::scope(|sc| {
        let blackout = sc.spawn(|| black_out(b, s.blackout_by, warmup, d, port));
        let r = netns::run_in(client_ns, || rr::run(&rs, &ctl));
        (r, blackout.join())
    });
    let after = counters();
    rec.dropped_frames = drops().saturating_sub(dropped0);
    if rec.dropped_frames > 0 {
        rec.last_drop_ns = b.lab().map_or(0, |l| {
            let st = l.status();
            st.a2b
                .counters
                .last_blackout_drop_ns
                .max(st.b2a.counters.last_blackout_drop_ns)
        });
    }
    match result.1 {
        Ok(Ok((s0, s1))) => {
            rec.blackout_start_ns = s0;
            rec.blackout_end_ns = s1;
        }
        Ok(Err(e)) => rec.error = Some(format!("blackout: {}", e.chain())),
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
            rec.error.get_or_insert(crate::error_chain(&e));
        }
        Err(e) => {
            rec.error.get_or_insert(crate::error_chain(&e));
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

/// The blackout sweep as the runner drives it.
pub struct Blackout {
    /// The grid, the trials and where they run (run.json's settings).
    pub settings: Settings,
    /// The kernel's HZ (the model's jiffies; also in run.json's host facts).
    pub hz: u32,
}

impl Experiment for Blackout {
    const NAME: &'static str = crate::results::names::BLACKOUT;
    type Cell = Cell;
    type Record = TrialRecord;
    type Testbed = Testbed;
    type Settings = Settings;

    fn settings(&self) -> &Self::Settings {
        &self.settings
    }

    /// rto_min × thin × D, in the seed script's nesting.
    fn cells(&self) -> Vec<Cell> {
        let s = &self.settings;
        let mut v = Vec::new();
        for &r in &s.rto_min_ms {
            for &t in &s.thin {
                for &d in &s.disruption_ms {
                    v.push((r, t, d));
                }
            }
        }
        v
    }

    fn repeats(&self) -> crate::results::Repeats {
        self.settings.repeats
    }

    fn key(&self, r: &TrialRecord) -> (Cell, u32) {
        ((r.rto_min_ms, r.thin, r.disruption_ms), r.trial)
    }

    fn builds_a_lab(&self) -> bool {
        self.settings.remote.is_none()
    }

    fn testbed(&self) -> Result<Testbed, ExperimentError> {
        match self.settings.remote {
            Some(server) => remote_testbed(server, &self.settings),
            None => lab_testbed(
                &format!("blackout-{}", std::process::id() % 100_000),
                self.settings.lab_poll,
            ),
        }
    }

    fn trial(
        &self,
        b: &Testbed,
        &cell: &Cell,
        k: u32,
        ctx: &TrialContext<'_>,
    ) -> Result<TrialRecord, ExperimentError> {
        // Inside `rttlab serve`'s default data ports (12867-32767).
        let port = 20_000 + (ctx.index % 10_000) as u16;
        Ok(trial(b, &self.settings, cell, k, port, self.hz))
    }

    fn describe(&self, l: &TrialRecord) -> String {
        format!(
            "rto_min {} ms {} D {} ms → idle {} ms ({})",
            l.rto_min_ms,
            if l.thin { "thin" } else { "thick" },
            l.disruption_ms,
            l.idle_ms.map_or("-".into(), |x| format!("{x:.1}")),
            l.path
        )
    }

    fn failed(&self, r: &TrialRecord) -> bool {
        r.error.is_some()
    }

    /// The model's prediction and each trial's path recomputed from run.json, then the
    /// tables: an older rttlab's trials show today's model.
    fn report(&self, out: &Path, records: &[TrialRecord]) -> Result<String, ResultsError> {
        let recompute = Recompute::of(out)?;
        let mut cells = Cells::default();
        for r in records {
            cells.add(&recompute.apply(r.clone()));
        }
        crate::report::blackout::write(out, cells)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_grid_has_every_cell_once() {
        let b = Blackout {
            settings: Settings::seed_grid(),
            hz: 250,
        };
        let mut c = b.cells();
        assert_eq!(c.len(), 3 * 2 * 12);
        c.sort_by_key(|&(r, t, d)| (r, t, d));
        c.dedup();
        assert_eq!(c.len(), 72);
        assert_eq!(b.repeats().trials, 3);
    }
}
