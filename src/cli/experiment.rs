//! `rttlab experiment`: the seeds' experiments, each into a results directory.

use super::progress::on_interrupt;
use super::values;
use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use rttlab::experiment::blackout::{self, BlackoutBy, Mechanism, Settings};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct ExperimentArgs {
    #[command(subcommand)]
    pub command: ExperimentCommand,
}

#[derive(Subcommand, Debug)]
pub enum ExperimentCommand {
    /// Seed 001: TCP idle time after a blackout of D, per rto_min and thin/thick, next to the model.
    Blackout(BlackoutArgs),
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
    /// Trials per cell (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub trials: u32,
    /// How rto_min is set on both hosts: a locked route metric, or net.ipv4.tcp_rto_min_us.
    #[arg(long, value_enum, default_value = "route")]
    pub mechanism: MechanismArg,
    /// Where packets are dropped: the lab's emulator (in the path; the default in the lab),
    /// or nftables on the client host (seed 001's script; always with -H).
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
    /// Results directory; an existing one with the same settings is resumed.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Seed of the randomised trial order.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The kernel's HZ for the model (detected when not given).
    #[arg(long)]
    pub hz: Option<u32>,
}

pub fn run(a: ExperimentArgs) -> anyhow::Result<()> {
    match a.command {
        ExperimentCommand::Blackout(b) => run_blackout(b),
    }
}

fn ms(d: Duration) -> anyhow::Result<u32> {
    u32::try_from(d.as_millis())
        .ok()
        .filter(|&m| m > 0 && Duration::from_millis(u64::from(m)) == d)
        .with_context(|| format!("{d:?} is not a positive whole number of milliseconds"))
}

fn run_blackout(a: BlackoutArgs) -> anyhow::Result<()> {
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
        trials: a.trials.max(1),
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
        seed: a.seed,
    };
    if s.cc == "bbr" && s.thin.contains(&true) {
        eprintln!(
            "rttlab: note: under bbr, thin linear timeouts never apply to request/response traffic (BBR never sets ssthresh, so the connection counts as in initial slow start and tcp_stream_is_thin() is false); the thin columns will read like thick ones"
        );
    }
    let hz = match a.hz {
        Some(h) => h,
        None => {
            let rto_min = rttlab::kernel::sysctl::read(None, "net.ipv4.tcp_rto_min_us")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(200_000);
            rttlab::kernel::hz::detect(rto_min).context("detecting this kernel's HZ (pass --hz)")?
        }
    };
    let out = a.out.unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        PathBuf::from(format!(
            "results/blackout-{}-{t}",
            match s.mechanism {
                Mechanism::Route => "route",
                Mechanism::Sysctl => "sysctl",
            }
        ))
    });
    let facts = serde_json::json!({
        "host": rttlab::kernel::host::HostFacts::collect(),
        "hz": hz,
    });
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    on_interrupt(move || s2.store(true, Ordering::SeqCst));
    let tty = std::io::stderr().is_terminal();
    eprintln!(
        "rttlab: blackout sweep into {} (interrupt and rerun with --out {} to resume)",
        out.display(),
        out.display()
    );
    let trials = blackout::run(
        &s,
        &out,
        hz,
        &facts,
        &|| stop.load(Ordering::SeqCst),
        &mut |p| {
            if tty {
                let l = p.last;
                eprint!(
                    "\r\x1b[K{}/{} trials, {:.0} s left; last: rto_min {} ms {} D {} ms → idle {} ms ({})",
                    p.done,
                    p.total,
                    p.eta.as_secs_f64(),
                    l.rto_min_ms,
                    if l.thin { "thin" } else { "thick" },
                    l.disruption_ms,
                    l.idle_ms.map_or("-".into(), |x| format!("{x:.1}")),
                    l.path
                );
            }
        },
    )?;
    if tty {
        eprint!("\r\x1b[K");
    }
    let failed = trials.iter().filter(|t| t.error.is_some()).count();
    let text = blackout::write_report(&out, &trials)?;
    print!("{text}");
    println!(
        "{} trials ({} failed) in {}: run.json, trials.jsonl, summary.json, tables.txt, *.svg, report.html",
        trials.len(),
        failed,
        out.display()
    );
    if stop.load(Ordering::SeqCst) {
        anyhow::bail!("interrupted; rerun with --out {} to finish", out.display());
    }
    Ok(())
}
