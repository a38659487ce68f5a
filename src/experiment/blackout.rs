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
use crate::kernel::tuning::{self, Journal};
use crate::kernel::{netns, netstat, realtime_ns, route, sysctl};
use crate::lab::control::Start;
use crate::lab::emulator::Dir;
use crate::lab::impair::Impairments;
use crate::lab::{Lab, LabError, LabSpec, Node};
use crate::probe::rr::{self, RrSettings, RunControl};
use crate::probe::server::{Server, ServerConfig};
use crate::results::blackout::{path_of, predict, BlackoutBy, Mechanism, Settings, TrialRecord};
use crate::results::{ResultsDir, ResultsError};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

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
}
