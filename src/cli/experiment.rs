//! `rttlab experiment`: the seeds' experiments, each into a results directory.

use super::progress::{on_interrupt, TrialLine};
use super::values;
use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use rttlab::experiment::blackout;
use rttlab::experiment::runner::{self, Experiment};
use rttlab::experiment::{passive_active, resreq, sweep, syn_rto};
use rttlab::results::blackout::{BlackoutBy, Mechanism, Settings};
use rttlab::results::{schema, Repeats};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often each cell of an experiment runs, and in which order (every experiment).
#[derive(Args, Debug)]
pub struct TrialArgs {
    /// Repeats of each cell, run in a seeded random order; tables and charts show each
    /// cell's median with its 95 % interval (default: 3 for blackout, else 1).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub trials: Option<u32>,
    /// Seed of the randomised trial order.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

impl TrialArgs {
    /// The settings' repeats: `--trials` (else the experiment's `default`) and `--seed`.
    pub fn repeats(&self, default: u32) -> Repeats {
        Repeats {
            trials: self.trials.unwrap_or(default),
            seed: self.seed,
        }
    }
}

/// Where a run goes and how it is repeated (every experiment).
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Results directory; an existing one with the same settings is resumed.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub trials: TrialArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The lab an experiment builds: its round-trip delay and how its emulator waits,
/// spelt alike in every command that builds one. `R` is the command's default RTT
/// (its study's).
#[derive(Args, Debug)]
pub struct LabArgs<R: LabRtt> {
    /// The lab's round-trip delay.
    #[arg(long, default_value = R::DEFAULT, value_parser = values::duration)]
    pub lab_rtt: Duration,
    /// How the lab's emulator waits between frames.
    #[arg(long, value_enum, default_value_t = values::Emulator::Auto)]
    pub emulator: values::Emulator,
    #[arg(skip)]
    rtt: std::marker::PhantomData<R>,
}

impl<R: LabRtt> LabArgs<R> {
    /// The lab these flags describe.
    pub fn settings(&self) -> rttlab::results::LabSettings {
        rttlab::results::LabSettings {
            rtt: self.lab_rtt,
            poll: self.emulator.polls(1),
        }
    }
}

/// A command's default lab RTT.
pub trait LabRtt: Clone + std::fmt::Debug + Send + Sync + 'static {
    /// As `--lab-rtt` takes it.
    const DEFAULT: &'static str;
}

/// 10 ms: `compare` and `syn-rto`.
#[derive(Clone, Debug)]
pub struct Rtt10ms;
impl LabRtt for Rtt10ms {
    const DEFAULT: &'static str = "10ms";
}

/// 100 µs: the lab for `resreq-interval` (after Jones, "A Brief Look at Round Trip Time").
#[derive(Clone, Debug)]
pub struct Rtt100us;
impl LabRtt for Rtt100us {
    const DEFAULT: &'static str = "100us";
}

/// None: `interval-sweep` measures the tools, not a path.
#[derive(Clone, Debug)]
pub struct NoRtt;
impl LabRtt for NoRtt {
    const DEFAULT: &'static str = "0s";
}

#[derive(Args, Debug)]
pub struct OutputArgs {
    /// Print the run as one JSON document (schema rttlab.experiment/1) instead of the
    /// tables: its settings, every trial's record and where its files are.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  rttlab experiment blackout --out runs/blackout
  rttlab experiment resreq-interval --trials 3
  rttlab experiment interval-sweep --out runs/sweep
  rttlab experiment syn-rto -n 20
  rttlab experiment passive-vs-active --scenarios delay,loss-5
  rttlab experiment syn-rto -n 20 --json | jq '.records[] | {case, p50_ms}'
Every experiment writes a results directory that resumes where it stopped; `rttlab
report DIR` renders it again.")]
pub struct ExperimentArgs {
    #[command(subcommand)]
    pub command: ExperimentCommand,
}

#[derive(Subcommand, Debug)]
pub enum ExperimentCommand {
    /// Hogan and Jones, "A Brief Look at Tuning TCP Retransmission Behaviour": TCP idle time after a blackout of D, per rto_min and thin/thick, next to the model.
    Blackout(BlackoutArgs),
    /// Jones, "A Brief Look at Round Trip Time": TCP's srtt on both ends, a sampled metric and TCP_RR against the wait between transactions.
    ResreqInterval(ResreqArgs),
    /// Phanekham and Jones, "What a trip! Measuring network latency in the cloud": ping and TCP_RR latency against the interval between transactions, 1 µs to 1 s.
    IntervalSweep(SweepArgs),
    /// Hogan and Jones, "A Brief Look at Tuning TCP Retransmission Behaviour", appendix: connection set-up time when the first SYN is lost, with and without the eBPF initial-RTO override.
    SynRto(SynRtoArgs),
    /// Strowes, "Passively Measuring TCP Round-trip Times": ping, an application echo over TCP and passive TS RTT together, under changing delay, loss and a filled queue.
    PassiveVsActive(PvaArgs),
}

#[derive(Args, Debug)]
#[command(after_help = "\
Scenarios: delay (RTT alternating 100 ↔ 150 ms), loss-N (N % random loss both ways),
queue-NKB (10 Mbit/s, an N KB drop-tail queue both ways, a bulk TCP flow filling it).
Writes run.json, trials.jsonl, <scenario>.samples.csv (every sample), tables.txt,
delay-cdf.svg, delay-timeline.svg, loss.svg, queue.svg, queue-timeline.svg and
report.html.

Examples:
  rttlab experiment passive-vs-active                         Strowes's nine scenarios, 60 s each
  rttlab experiment passive-vs-active --scenarios loss-10 --duration 180s")]
pub struct PvaArgs {
    /// Scenarios to run (default: delay, loss-5…20, queue-10…300KB).
    #[arg(long, value_delimiter = ',')]
    pub scenarios: Vec<String>,
    /// How long each scenario sends its probes (Strowes: 180 s).
    #[arg(short = 'l', long, default_value = "60s", value_parser = values::seconds)]
    pub duration: Duration,
    /// The delay scenario switches between the base RTT and 50 ms more this often.
    #[arg(long, default_value = "10s", value_parser = values::duration)]
    pub delay_step: Duration,
    /// Time between probes (Strowes: 1 s).
    #[arg(short = 'w', long, default_value = "1s", value_parser = values::duration)]
    pub interval: Duration,
    /// Congestion control of the echo and bulk connections (Strowes's kernel: cubic;
    /// bbr keeps the bottleneck's queue nearly empty).
    #[arg(long, default_value = "cubic")]
    pub cc: String,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Args, Debug)]
#[command(after_help = "\
Three cases in one lab: no drop, the first SYN of each connection dropped by host b
(nftables), and the same with the sock_ops override of the SYN's initial RTO for b
(attached to the cgroup2 root for b's address only, journalled, detached at the end;
`rttlab tune revert` removes it after a crash). Writes run.json, trials.jsonl,
case*.hist.csv, tables.txt, setup-time.svg and report.html.

Examples:
  rttlab experiment syn-rto --syn-rto 50ms --connections 20 --trials 5")]
pub struct SynRtoArgs {
    /// Connections per case in each trial.
    #[arg(short = 'n', long, default_value_t = 20)]
    pub connections: u32,
    /// The override's initial RTO (whole jiffies; at least 2).
    #[arg(long, default_value = "50ms", value_parser = values::duration)]
    pub syn_rto: Duration,
    #[command(flatten)]
    pub lab: LabArgs<Rtt10ms>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Args, Debug)]
#[command(after_help = "\
Writes run.json, trials.jsonl (one line per tool and interval), <tool>-<interval>us.hist.csv,
tables.txt, mean-latency.svg and report.html into the results directory.

Examples:
  rttlab experiment interval-sweep                         1, 2, 5 per decade from 1 µs to 1 s
  rttlab experiment interval-sweep --interval 1us,1ms,100ms --count 100")]
pub struct SweepArgs {
    /// Intervals between transactions (default 1, 2, 5 per decade, 1 µs … 1 s).
    #[arg(long, value_delimiter = ',', value_parser = values::duration)]
    pub interval: Vec<Duration>,
    /// Transactions per tool and interval at most.
    #[arg(short = 'n', long, default_value_t = 200)]
    pub count: u64,
    /// Time per tool and interval at most (but at least 10 intervals).
    #[arg(long, default_value = "3s", value_parser = values::duration)]
    pub max_time: Duration,
    /// Pace TCP_RR by sleeping instead of spinning.
    #[arg(long)]
    pub sleep: bool,
    #[command(flatten)]
    pub lab: LabArgs<NoRtt>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Args, Debug)]
#[command(after_help = "\
Writes run.json, trials.jsonl (one line per wait), wait-*.hist.csv (the samples),
tables.txt (Jones's table, then srtt and metric by wait), tcp-rtt.svg, metric.svg,
rr-latency.svg and report.html into the results directory.

Examples:
  rttlab experiment resreq-interval                       Jones's waits 0…41 ms, 6 s each
  rttlab experiment resreq-interval --long                100 ms…5 s, two-segment requests, more streams
  rttlab experiment resreq-interval --interval 0,40ms --duration 3s --out results/rr")]
pub struct ResreqArgs {
    /// Waits between a response and the next request (default: Jones's).
    #[arg(short = 'w', long = "interval", alias = "wait", value_delimiter = ',', value_parser = values::duration)]
    pub wait: Vec<Duration>,
    /// Jones's second run: waits 100 ms…5 s, a two-segment request, 1 + 15 streams per 100 ms of wait.
    #[arg(long)]
    pub long: bool,
    /// Cap on parallel streams with --long (Jones ran up to 751).
    #[arg(long, default_value_t = 200)]
    pub max_streams: u32,
    /// How long each wait runs (default 6 s; 30 s with --long).
    #[arg(short = 'l', long, value_parser = values::seconds)]
    pub duration: Option<Duration>,
    #[command(flatten)]
    pub lab: LabArgs<Rtt100us>,
    /// The sampled metric keeps one packet in N (default 1/1; 1/10 with --long, so that
    /// a response's bare ACK is often missed and the next request's data matched).
    #[arg(long, value_name = "1/N", value_parser = values::one_in)]
    pub sampler: Option<u32>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq)]
pub enum ThinArg {
    Off,
    On,
    Both,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq)]
pub enum MechanismArg {
    Route,
    Sysctl,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq)]
pub enum ByArg {
    Emulator,
    Nftables,
}

#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  rttlab experiment blackout                             Hogan and Jones's grid in a lab, 3 trials
  rttlab experiment blackout --rto-min 5ms,200ms --thin on --trials 3 --out runs/b
  rttlab experiment blackout -H server.example --blackout-by nftables   on a real path")]
pub struct BlackoutArgs {
    /// rto_min values.
    #[arg(long, value_delimiter = ',', value_parser = values::duration, default_value = "5ms,50ms,200ms")]
    pub rto_min: Vec<Duration>,
    /// tcp_thin_linear_timeouts off ("thick"), on ("thin"), or both.
    #[arg(long, value_enum, default_value = "both")]
    pub thin: ThinArg,
    /// Disruption lengths.
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = values::duration,
        default_value = "10ms,20ms,30ms,50ms,70ms,100ms,200ms,300ms,500ms,700ms,1s,1.5s"
    )]
    pub disruption: Vec<Duration>,
    /// How rto_min is set on both hosts: a locked route metric, or net.ipv4.tcp_rto_min_us.
    #[arg(long, value_enum, default_value = "route")]
    pub mechanism: MechanismArg,
    /// Where packets are dropped: the lab's emulator (in the path; the default in the lab),
    /// or nftables on the client host (Hogan and Jones's script; always with -H).
    #[arg(long, value_enum)]
    pub blackout_by: Option<ByArg>,
    /// Run against `rttlab serve` on this host instead of the lab: rto_min and thin are set
    /// here (journalled, reverted at the end; thin also per socket at the server).
    #[arg(short = 'H', long = "host", value_name = "HOST")]
    pub host: Option<String>,
    /// The server's control port (with -H).
    #[arg(short = 'p', long, default_value_t = 12866, requires = "host")]
    pub port: u16,
    /// Congestion control of the data connection (bbr keeps thin timeouts from ever applying).
    #[arg(long, default_value = "cubic")]
    pub cc: String,
    #[command(flatten)]
    pub run: RunArgs,
    /// The kernel's HZ for the model (detected when not given).
    #[arg(long)]
    pub hz: Option<u32>,
    /// How the lab's emulator waits between frames.
    #[arg(long, value_enum, default_value_t = values::Emulator::Auto, conflicts_with = "host")]
    pub emulator: values::Emulator,
    #[command(flatten)]
    pub secret: super::secret::SecretArgs,
}

pub fn run(a: ExperimentArgs, stage: &super::Stage) -> anyhow::Result<()> {
    match a.command {
        ExperimentCommand::Blackout(b) => run_blackout(b, stage),
        ExperimentCommand::ResreqInterval(r) => run_resreq(r, stage),
        ExperimentCommand::IntervalSweep(w) => run_sweep(w, stage),
        ExperimentCommand::SynRto(y) => run_syn_rto(y, stage),
        ExperimentCommand::PassiveVsActive(p) => run_pva(p, stage),
    }
}

fn ms(d: Duration) -> anyhow::Result<u32> {
    u32::try_from(d.as_millis())
        .ok()
        .filter(|&m| m > 0 && Duration::from_millis(u64::from(m)) == d)
        .with_context(|| format!("{d:?} is not a positive whole number of milliseconds"))
}

fn run_blackout(a: BlackoutArgs, stage: &super::Stage) -> anyhow::Result<()> {
    let s = Settings {
        rto_min_ms: a
            .rto_min
            .iter()
            .map(|&d| ms(d))
            .collect::<anyhow::Result<_>>()?,
        thin: match a.thin {
            ThinArg::Off => vec![false],
            ThinArg::On => vec![true],
            ThinArg::Both => vec![false, true],
        },
        disruption_ms: a
            .disruption
            .iter()
            .map(|&d| ms(d))
            .collect::<anyhow::Result<_>>()?,
        repeats: a.run.trials.repeats(3),
        mechanism: match a.mechanism {
            MechanismArg::Route => Mechanism::Route,
            MechanismArg::Sysctl => Mechanism::Sysctl,
        },
        blackout_by: match (a.blackout_by, &a.host) {
            (Some(ByArg::Emulator), Some(_)) => anyhow::bail!(
                "--blackout-by emulator needs the lab; with -H the blackout is nftables on this host"
            ),
            (Some(ByArg::Emulator) | None, None) => BlackoutBy::Emulator,
            (Some(ByArg::Nftables), _) | (None, Some(_)) => BlackoutBy::Nftables,
        },
        remote: match &a.host {
            None => None,
            Some(h) => Some(
                std::net::ToSocketAddrs::to_socket_addrs(&(h.as_str(), a.port))
                    .with_context(|| format!("resolving {h}"))?
                    .next()
                    .with_context(|| format!("{h} has no address"))?,
            ),
        },
        cc: a.cc.clone(),
        warmup_ms: 1000,
        lab_poll: a.emulator.polls(1),
        secret: a.secret.load()?,
    };
    if s.cc == "bbr" && s.thin.contains(&true) {
        eprintln!(
            "rttlab: note: under bbr, thin linear timeouts never apply to request/response traffic (BBR never sets ssthresh, so the connection counts as in initial slow start and tcp_stream_is_thin() is false); the thin columns will read like thick ones"
        );
    }
    let hz = match a.hz {
        Some(h) => h,
        None => rttlab::kernel::hz::detect_here()?,
    };
    let mechanism = match s.mechanism {
        Mechanism::Route => "route",
        Mechanism::Sysctl => "sysctl",
    };
    let out = out_dir(
        a.run.out,
        &format!("{}-{mechanism}", blackout::Blackout::NAME),
    );
    let facts = serde_json::json!({
        "host": rttlab::kernel::host::HostFacts::collect(),
        "hz": hz,
    });
    drive(
        &blackout::Blackout { settings: s, hz },
        &out,
        &facts,
        &a.run.output,
        stage,
    )
}

/// Run an experiment on the trial runner with a progress line on a terminal, print its
/// tables and where its report is; fail when interrupted or when trials failed (what
/// was measured stays in `out`, and a rerun with the same `--out` resumes).
fn drive<E: Experiment>(
    e: &E,
    out: &Path,
    facts: &serde_json::Value,
    output: &OutputArgs,
    stage: &super::Stage,
) -> anyhow::Result<()> {
    let stop = interrupt_flag();
    eprintln!(
        "rttlab: {} into {} (interrupt and rerun with --out {} to resume)",
        E::NAME,
        out.display(),
        out.display()
    );
    let mut line = TrialLine::new(false);
    // The first trial's progress ends the set-up (the lab built, the server reached);
    // the set-up's own announcement does not.
    let o = runner::run(e, out, facts, &stop, &mut |p| {
        if !matches!(p.phase, runner::Phase::Setup) {
            stage.measuring();
        }
        line.show(p)
    })?;
    line.clear();
    if output.json {
        let doc = RunDocument {
            experiment: E::NAME,
            dir: out,
            settings: serde_json::to_value(e.settings())?,
            trials: o.records.len(),
            failed: Some(o.failed),
            interrupted: Some(o.interrupted),
            report: out.join("report.html"),
            records: &o.records,
        };
        outln!("{}", schema::pretty(schema::EXPERIMENT, &doc)?);
    } else {
        out!("{}", o.text);
        outln!(
            "{} trials ({} failed); report: {}",
            o.records.len(),
            o.failed,
            out.join("report.html").display()
        );
    }
    if o.interrupted {
        anyhow::bail!("interrupted; rerun with --out {} to finish", out.display());
    }
    if o.failed > 0 {
        anyhow::bail!("{} trial(s) failed: see NOTE in the tables", o.failed);
    }
    Ok(())
}

/// `experiment … --json` and `report --json`: a results directory's run.
#[derive(serde::Serialize)]
pub struct RunDocument<'a, R: serde::Serialize> {
    pub experiment: &'a str,
    pub dir: &'a Path,
    /// As run.json records them.
    pub settings: serde_json::Value,
    /// Trials recorded, earlier runs' included.
    pub trials: usize,
    /// Known to the run that measured them (`report` reads records of any experiment).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<bool>,
    pub report: std::path::PathBuf,
    /// Every trial's record, as trials.jsonl holds it.
    pub records: &'a [R],
}

/// `out`, or `results/NAME-<unix time>`.
pub(super) fn out_dir(out: Option<PathBuf>, name: &str) -> PathBuf {
    out.unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        PathBuf::from(format!("results/{name}-{t}"))
    })
}

fn host_facts() -> serde_json::Value {
    serde_json::json!({ "host": rttlab::kernel::host::HostFacts::collect() })
}

/// A flag set by Ctrl-C.
fn interrupt_flag() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    on_interrupt(move || s2.store(true, Ordering::SeqCst));
    stop
}

fn lab_name(prefix: &str) -> String {
    format!("{prefix}{}", std::process::id() % 100_000)
}

fn run_resreq(a: ResreqArgs, stage: &super::Stage) -> anyhow::Result<()> {
    let mut s = if a.long {
        resreq::Settings::seed_long(a.max_streams.max(1))
    } else {
        resreq::Settings::seed_short()
    };
    if !a.wait.is_empty() {
        s.waits_ms = a.wait.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        let streams = s.streams[0];
        s.streams = vec![streams; s.waits_ms.len()];
    }
    if let Some(d) = a.duration {
        s.duration_s = d.as_secs_f64();
    }
    s.lab = a.lab.settings();
    if let Some(n) = a.sampler {
        s.sampler_one_in = n;
    }
    s.repeats = a.run.trials.repeats(1);
    let e = resreq::ResreqInterval {
        settings: s,
        lab_name: lab_name("rq"),
    };
    drive(
        &e,
        &out_dir(a.run.out, resreq::ResreqInterval::NAME),
        &host_facts(),
        &a.run.output,
        stage,
    )
}

fn run_sweep(a: SweepArgs, stage: &super::Stage) -> anyhow::Result<()> {
    let mut s = sweep::Settings::default();
    if !a.interval.is_empty() {
        s.intervals_us = a.interval.iter().map(|d| d.as_secs_f64() * 1e6).collect();
    }
    s.count = a.count.max(1);
    s.max_time_s = a.max_time.as_secs_f64();
    s.lab = a.lab.settings();
    s.spin = !a.sleep;
    s.repeats = a.run.trials.repeats(1);
    let e = sweep::IntervalSweep {
        settings: s,
        lab_name: lab_name("sw"),
    };
    drive(
        &e,
        &out_dir(a.run.out, sweep::IntervalSweep::NAME),
        &host_facts(),
        &a.run.output,
        stage,
    )
}

fn run_syn_rto(a: SynRtoArgs, stage: &super::Stage) -> anyhow::Result<()> {
    let hz = rttlab::kernel::hz::detect_here()?;
    let us = rttlab::stats::units::us(a.syn_rto);
    if us > 120_000_000 || rttlab::kernel::hz::usecs_to_jiffies(us, hz) < 2 {
        anyhow::bail!(
            "--syn-rto must be at least 2 jiffies ({} ms at HZ {hz}) and at most 120 s",
            2000 / hz
        );
    }
    let s = syn_rto::Settings {
        connections: a.connections.max(1),
        syn_rto_ms: ms(a.syn_rto)?,
        lab: a.lab.settings(),
        hz,
        repeats: a.run.trials.repeats(1),
    };
    let e = syn_rto::SynRtoExperiment {
        settings: s,
        lab_name: lab_name("sy"),
    };
    drive(
        &e,
        &out_dir(a.run.out, syn_rto::SynRtoExperiment::NAME),
        &host_facts(),
        &a.run.output,
        stage,
    )
}

fn run_pva(a: PvaArgs, stage: &super::Stage) -> anyhow::Result<()> {
    let mut s = passive_active::Settings::default();
    if !a.scenarios.is_empty() {
        s.scenarios = a.scenarios.clone();
    }
    s.duration_s = a.duration.as_secs_f64();
    s.delay_step_s = a.delay_step.as_secs_f64();
    s.interval_s = a.interval.as_secs_f64().max(0.01);
    s.congestion = a.cc;
    s.repeats = a.run.trials.repeats(1);
    let e = passive_active::PassiveVsActive::new(s, &lab_name("pa"))?;
    drive(
        &e,
        &out_dir(a.run.out, passive_active::PassiveVsActive::NAME),
        &host_facts(),
        &a.run.output,
        stage,
    )
}
