//! `rttlab rto model`.

use super::values;
use anyhow::{bail, Context};
use clap::{Args, Subcommand, ValueEnum};
use rttlab::kernel::hz;
use rttlab::model::rto::{self, DropAt, Flavour, RtoModel};
use rttlab::report::rto::{Cell, DelackMax, Grid};
use std::time::Duration;

#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  rttlab rto model
  rttlab rto model --rto-min 5ms --thin on --json")]
pub struct RtoArgs {
    #[command(subcommand)]
    pub action: RtoAction,
}

#[derive(Subcommand, Debug)]
pub enum RtoAction {
    /// Predict TCP's idle time during a disruption, as the tables of Hogan and Jones, "A Brief Look at Tuning TCP Retransmission Behaviour".
    #[command(after_help = "\
Examples:
  rttlab rto model                                     Hogan and Jones's grid on this kernel (linux flavour)
  rttlab rto model --flavour simple                    Hogan and Jones's Theory table
  rttlab rto model --rto-min 5ms --thin on --disruption 10ms,20ms,30ms --json
  rttlab rto model --drop-at local --improvement --csv")]
    Model(ModelArgs),
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ThinArg {
    On,
    Off,
    Both,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum FlavourArg {
    Simple,
    Linux,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum DropArg {
    Path,
    Local,
}

#[derive(Args, Debug)]
pub struct ModelArgs {
    /// rto_min values, comma-separated.
    #[arg(long, default_value = "5ms,50ms,200ms", value_delimiter = ',', value_parser = values::duration)]
    pub rto_min: Vec<Duration>,
    /// Thin linear timeouts.
    #[arg(long, value_enum, default_value = "both")]
    pub thin: ThinArg,
    /// Disruptions: a list (10ms,50ms), or A..B for Hogan and Jones's grid points between A and B,
    /// or A..B:STEP.
    #[arg(long, default_value = "10ms..1.5s")]
    pub disruption: String,
    /// simple (Hogan and Jones's theory) or linux (the kernel's rules at this HZ).
    #[arg(long, visible_alias = "flavor", value_enum, default_value = "linux")]
    pub flavour: FlavourArg,
    /// Where packets are dropped: path (switch, lab emulator) or local (nftables on the host).
    #[arg(long, value_enum, default_value = "path")]
    pub drop_at: DropArg,
    /// Kernel HZ (default: detected from this kernel).
    #[arg(long)]
    pub hz: Option<u32>,
    /// Model a kernel without the tail loss probe (net.ipv4.tcp_early_retrans < 3).
    #[arg(long)]
    pub no_tlp: bool,
    /// The RTO cap.
    #[arg(long, default_value = "120s", value_parser = values::seconds)]
    pub rto_max: Duration,
    /// Smoothed RTT before the disruption.
    #[arg(long, default_value = "100us", value_parser = values::duration)]
    pub srtt: Duration,
    /// Show the gain over the default (thick, 200 ms) instead of the idle time.
    #[arg(long)]
    pub improvement: bool,
    /// The grid as one JSON document.
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// The grid as CSV, one row per disruption.
    #[arg(long)]
    pub csv: bool,
}

fn disruptions(s: &str) -> anyhow::Result<Vec<Duration>> {
    if let Some((a, rest)) = s.split_once("..") {
        let (b, step) = rest
            .split_once(':')
            .map_or((rest, None), |(b, st)| (b, Some(st)));
        let (a, b) = (
            values::duration(a).map_err(anyhow::Error::msg)?,
            values::duration(b).map_err(anyhow::Error::msg)?,
        );
        if b < a {
            bail!("--disruption {s}: the end is before the start");
        }
        return Ok(match step {
            None => rto::seed_grid()
                .into_iter()
                .filter(|d| *d >= a && *d <= b)
                .collect(),
            Some(st) => {
                let st = values::duration(st).map_err(anyhow::Error::msg)?;
                if st.is_zero() || (b - a).as_nanos() / st.as_nanos() > 10_000 {
                    bail!("--disruption {s}: the step must be more than 0 and give at most 10000 points");
                }
                std::iter::successors(Some(a), |d| Some(*d + st))
                    .take_while(|d| *d <= b)
                    .collect()
            }
        });
    }
    s.split(',')
        .map(|x| values::duration(x).map_err(anyhow::Error::msg))
        .collect()
}

pub fn run(a: RtoArgs) -> anyhow::Result<()> {
    let RtoAction::Model(m) = a.action;
    let ds = disruptions(&m.disruption)?;
    if ds.is_empty() {
        bail!("--disruption {} selects no durations", m.disruption);
    }
    if m.rto_min
        .iter()
        .any(|r| r.is_zero() || *r > Duration::from_secs(120))
    {
        bail!("--rto-min values must be more than 0 and at most 120 s");
    }
    let hz = match (m.hz, m.flavour) {
        (Some(h), _) if [100, 250, 300, 1000].contains(&h) => h,
        (Some(h), _) => bail!("--hz {h}: Linux is built with HZ 100, 250, 300 or 1000"),
        (None, FlavourArg::Simple) => 1000,
        (None, FlavourArg::Linux) => hz::detect_here()?,
    };
    let flavour = match m.flavour {
        FlavourArg::Simple => Flavour::Simple,
        FlavourArg::Linux => Flavour::Linux,
    };
    let thins: &[bool] = match m.thin {
        ThinArg::On => &[true],
        ThinArg::Off => &[false],
        ThinArg::Both => &[true, false],
    };
    let horizon = *ds.iter().max().expect("non-empty") + Duration::from_secs(1);
    let model = |rto_min: Duration, thin: bool| RtoModel {
        flavour,
        rto_min,
        thin,
        hz,
        srtt: m.srtt,
        tlp: !m.no_tlp,
        rto_max: m.rto_max,
        drop_at: match m.drop_at {
            DropArg::Path => DropAt::Path,
            DropArg::Local => DropAt::Local,
        },
    };
    let default_model = model(Duration::from_millis(200), false);
    let default_events = rto::timeline(&default_model, horizon);
    let mut grid = Grid {
        models: Vec::new(),
        delack_max: Vec::new(),
        cells: Vec::new(),
    };
    for &r in &m.rto_min {
        grid.delack_max.push(DelackMax {
            rto_min_ms: r.as_secs_f64() * 1e3,
            delack_max_us: rto::delack_max_us(r, hz),
        });
        for &thin in thins {
            let md = model(r, thin);
            let ev = rto::timeline(&md, horizon);
            for &d in &ds {
                let e = rto::idle(&ev, &md, d)
                    .context("the timeline ended before the disruption did (a bug)")?;
                let base = rto::idle(&default_events, &default_model, d).map(|e| e.at_us());
                let upto = ev.iter().position(|x| x == e).map_or(ev.len(), |i| i + 1);
                grid.cells.push(Cell {
                    disruption_ms: d.as_secs_f64() * 1e3,
                    rto_min_ms: r.as_secs_f64() * 1e3,
                    thin: u8::from(thin),
                    idle_ms: e.at_us() / 1e3,
                    idle_lo_ms: e.lo_us / 1e3,
                    idle_hi_ms: e.hi_us / 1e3,
                    improvement_ms: if m.improvement {
                        base.map(|b| (b - e.at_us()) / 1e3)
                    } else {
                        None
                    },
                    timeline: ev[..upto].to_vec(),
                });
            }
            grid.models.push(md);
        }
    }
    print_grid(&m, &grid, flavour, hz)
}

/// The grid as --json, --csv, or the table under a line naming the model.
fn print_grid(m: &ModelArgs, grid: &Grid, flavour: Flavour, hz: u32) -> anyhow::Result<()> {
    if m.json {
        outln!(
            "{}",
            rttlab::results::schema::pretty(rttlab::results::schema::RTO_MODEL, grid)?
        );
    } else if m.csv {
        out!("{}", grid.csv(m.improvement));
    } else {
        let model = match flavour {
            Flavour::Simple => "simple (the theory of Hogan and Jones, A Brief Look at Tuning TCP Retransmission Behaviour: no TLP, no jiffies)".to_owned(),
            Flavour::Linux => format!(
                "linux at HZ {hz}, {} drops, TLP {}",
                if matches!(m.drop_at, DropArg::Path) {
                    "path"
                } else {
                    "local (nftables on the host)"
                },
                if m.no_tlp { "off" } else { "on" }
            ),
        };
        outln!(
            "TCP idle duration (ms) vs disruption; model {model}{}",
            if m.improvement {
                "; improvement = default (thick, 200 ms) − cell, positive is better"
            } else {
                ""
            }
        );
        out!("{}", grid.table(m.improvement));
    }
    Ok(())
}
