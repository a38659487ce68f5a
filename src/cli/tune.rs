//! `rttlab tune`: rto_min (per route or by sysctl), thin linear timeouts, and revert.

use super::values;
use anyhow::{bail, Context};
use clap::{Args, Subcommand, ValueEnum};
use rttlab::kernel::privilege::Capability;
use rttlab::kernel::tuning::{self, sysctl_command, Journal};
use rttlab::kernel::{hz, netns, route, sockopt, syn_rto, sysctl};
use rttlab::results::schema;
use rttlab::results::tune::{
    Probe, RouteRtoMin, RtoMinState, SynRtoPrefix, SynRtoState, ThinState,
};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

const RTO_MIN_US: &str = "net.ipv4.tcp_rto_min_us";
const THIN: &str = "net.ipv4.tcp_thin_linear_timeouts";

#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  rttlab tune rto-min show --probe 198.18.0.2:12866
  rttlab tune rto-min set 5ms --route 198.18.0.0/15      as `ip route replace … rto_min 5ms`
  rttlab tune rto-min set 50ms --sysctl --netns rttlab-demo-a
  rttlab tune thin set on
  rttlab tune revert --all                                undo everything rttlab tune set
Every change is recorded in /run/rttlab/tune.json before it is made.")]
pub struct TuneArgs {
    #[command(subcommand)]
    pub knob: Knob,
}

#[derive(Subcommand, Debug)]
pub enum Knob {
    /// The minimum retransmission timeout (route metric or net.ipv4.tcp_rto_min_us).
    #[command(after_help = "\
Examples:
  rttlab tune rto-min show
  rttlab tune rto-min set 5ms --route 198.18.0.0/15
  rttlab tune rto-min revert")]
    RtoMin {
        #[command(subcommand)]
        action: RtoMinAction,
    },
    /// Thin-stream linear timeouts (net.ipv4.tcp_thin_linear_timeouts).
    #[command(after_help = "\
Examples:
  rttlab tune thin show
  rttlab tune thin set on
  rttlab tune thin revert")]
    Thin {
        #[command(subcommand)]
        action: ThinAction,
    },
    /// The SYN's initial RTO per destination prefix (sock_ops eBPF + LPM trie), and
    /// per-prefix rto_min and delayed-ACK ceiling.
    #[command(after_help = "\
Examples:
  rttlab tune syn-rto add 198.18.0.0/15 200ms
  rttlab tune syn-rto list
  rttlab tune syn-rto detach")]
    SynRto {
        #[command(subcommand)]
        action: SynRtoAction,
    },
    /// Undo recorded changes.
    #[command(after_help = "\
Examples:
  rttlab tune revert --all --dry-run      what would be undone
  rttlab tune revert --all")]
    Revert {
        /// Every recorded change, in every namespace.
        #[arg(long, required = true)]
        all: bool,
        /// Print what would be done.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Args, Debug, Clone)]
pub struct Where {
    /// Network namespace (a name under /run/netns, or a path).
    #[arg(long)]
    pub netns: Option<String>,
    /// Print the equivalent commands instead of changing anything.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Subcommand, Debug)]
pub enum RtoMinAction {
    /// Current values, routes with an rto_min, and what a new connection gets.
    #[command(after_help = "\
Examples:
  rttlab tune rto-min show
  rttlab tune rto-min show --probe 198.18.0.2:12866 --netns rttlab-lab-demo-a
  rttlab tune rto-min show --json")]
    Show {
        /// Network namespace (a name under /run/netns, or a path).
        #[arg(long)]
        netns: Option<String>,
        /// Open a connection to HOST:PORT and report its tcp_info.rto.
        #[arg(long)]
        probe: Option<String>,
        /// One JSON document (schema rttlab.tune-rto-min/1).
        #[arg(long)]
        json: bool,
    },
    /// Set rto_min (e.g. 5ms).
    #[command(after_help = "\
Examples:
  rttlab tune rto-min set 5ms --route 198.18.0.0/15      as `ip route replace … rto_min 5ms`
  rttlab tune rto-min set 5ms --route 127.0.0.1 --dry-run
  rttlab tune rto-min set 50ms --sysctl --probe 127.0.0.1:12866")]
    Set {
        /// The new rto_min (Linux's floor is 1 jiffy; its default 200 ms).
        #[arg(value_parser = values::duration)]
        value: Duration,
        /// On the route to this destination or prefix (locked metric, milliseconds).
        #[arg(long, conflicts_with = "sysctl", required_unless_present = "sysctl")]
        route: Option<String>,
        /// Through net.ipv4.tcp_rto_min_us (Linux ≥ 6.11; new sockets only).
        #[arg(long)]
        sysctl: bool,
        #[command(flatten)]
        at: Where,
        /// Then open a connection to HOST:PORT and check its tcp_info.rto.
        #[arg(long)]
        probe: Option<String>,
    },
    /// Undo what `set` changed here.
    #[command(after_help = "\
Examples:
  rttlab tune rto-min revert
  rttlab tune rto-min revert --netns rttlab-lab-demo-a --dry-run")]
    Revert {
        #[command(flatten)]
        at: Where,
    },
}

#[derive(Args, Debug, Clone)]
pub struct Attachment {
    /// cgroup v2 directory the program is attached to (default: the cgroup2 root).
    #[arg(long)]
    pub cgroup: Option<std::path::PathBuf>,
    /// Where the program and its maps are pinned.
    #[arg(long, default_value = syn_rto::DEFAULT_PIN_DIR)]
    pub pin_dir: std::path::PathBuf,
}

#[derive(Subcommand, Debug)]
pub enum SynRtoAction {
    /// Set the SYN initial RTO (and optionally rto_min, delayed-ACK max) for a prefix;
    /// attaches the program first if needed.
    #[command(after_help = "\
Examples:
  rttlab tune syn-rto add 198.18.0.0/15 200ms
  rttlab tune syn-rto add 2001:2::/48 0 --rto-min 5ms --delack-max 5ms
  rttlab tune syn-rto add 10.0.0.0/8 300ms --dry-run      the bpftool commands")]
    Add {
        /// Destination prefix, IPv4 or IPv6 (e.g. 198.18.0.0/15).
        #[arg(value_parser = cidr)]
        prefix: (std::net::IpAddr, u8),
        /// Initial RTO of the SYN (the kernel's default is 1 s); 0 leaves it.
        #[arg(value_parser = values::duration)]
        syn_rto: Duration,
        /// rto_min for connections to the prefix (TCP_BPF_RTO_MIN).
        #[arg(long, value_parser = values::duration)]
        rto_min: Option<Duration>,
        /// Delayed-ACK ceiling for connections to the prefix (TCP_BPF_DELACK_MAX).
        #[arg(long, value_parser = values::duration)]
        delack_max: Option<Duration>,
        #[command(flatten)]
        at: Attachment,
        /// Print the equivalent bpftool commands.
        #[arg(long)]
        dry_run: bool,
    },
    /// Remove a prefix.
    #[command(after_help = "\
Examples:
  rttlab tune syn-rto del 198.18.0.0/15")]
    Del {
        /// The prefix as it was added (e.g. 198.18.0.0/15).
        #[arg(value_parser = cidr)]
        prefix: (std::net::IpAddr, u8),
        #[command(flatten)]
        at: Attachment,
    },
    /// The prefixes and their settings.
    #[command(
        visible_alias = "show",
        after_help = "\
Examples:
  rttlab tune syn-rto list
  rttlab tune syn-rto list --json"
    )]
    List {
        #[command(flatten)]
        at: Attachment,
        /// One JSON document (schema rttlab.tune-syn-rto/1).
        #[arg(long)]
        json: bool,
    },
    /// Detach the program and remove its pins.
    #[command(
        visible_alias = "revert",
        after_help = "\
Examples:
  rttlab tune syn-rto detach"
    )]
    Detach {
        #[command(flatten)]
        at: Attachment,
    },
}

fn cidr(s: &str) -> Result<(std::net::IpAddr, u8), String> {
    let (ip, len) = tuning::parse_prefix(s)
        .ok_or_else(|| format!("{s:?} is not a prefix like 198.18.0.0/15 or 2001:2::/48"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    if len > max {
        return Err(format!("{s:?}: prefix length must be 0..={max}"));
    }
    Ok((ip, len))
}

impl Attachment {
    fn cgroup(&self) -> anyhow::Result<std::path::PathBuf> {
        Ok(match &self.cgroup {
            Some(c) => c.clone(),
            None => syn_rto::cgroup2_root()?,
        })
    }
}

fn syn_rto(j: &Journal, action: SynRtoAction) -> anyhow::Result<()> {
    match action {
        SynRtoAction::Add {
            prefix,
            syn_rto,
            rto_min,
            delack_max,
            at,
            dry_run,
        } => syn_rto_add(j, prefix, (syn_rto, rto_min, delack_max), &at, dry_run),
        SynRtoAction::Del {
            prefix: (ip, len),
            at,
        } => {
            syn_rto::SynRto::at(&at.pin_dir).del(ip, len)?;
            outln!("removed {ip}/{len}");
            Ok(())
        }
        SynRtoAction::List { at, json } => syn_rto_list(&at, json),
        SynRtoAction::Detach { at } => syn_rto_detach(j, &at),
    }
}

/// `tune syn-rto add`: the program attached (journaled) if it is not yet, then the
/// prefix's entry; with --dry-run, the bpftool commands that would do the same.
fn syn_rto_add(
    j: &Journal,
    (ip, len): (std::net::IpAddr, u8),
    (syn, rto_min, delack_max): (Duration, Option<Duration>, Option<Duration>),
    at: &Attachment,
    dry_run: bool,
) -> anyhow::Result<()> {
    let hz = hz::detect_here()?;
    let t = syn_rto::Tuning::checked(syn, rto_min, delack_max, hz)?;
    let s = syn_rto::SynRto::at(&at.pin_dir);
    if dry_run {
        let pin = at.pin_dir.display();
        if !s.is_attached() {
            outln!("bpftool prog load bpf/syn_rto.bpf.o {pin}/prog type sockops pinmaps {pin}");
            outln!(
                "bpftool cgroup attach {} sock_ops pinned {pin}/prog multi",
                at.cgroup()?.display()
            );
        }
        outln!("{}", syn_rto::bpftool_update(&at.pin_dir, ip, len, t));
        return Ok(());
    }
    if !s.is_attached() {
        let cg = at.cgroup()?;
        tuning::attach_syn_rto(j, &s, &cg)?;
        outln!(
            "attached the sock_ops program to {} (pinned at {})",
            cg.display(),
            at.pin_dir.display()
        );
    }
    s.add(ip, len, t)?;
    outln!(
        "{ip}/{len}: SYN RTO {} jiffies ({} ms at HZ {hz}){}{}",
        t.syn_rto_jiffies,
        u64::from(t.syn_rto_jiffies) * 1000 / u64::from(hz),
        if t.rto_min_us > 0 {
            format!(", rto_min {} µs", t.rto_min_us)
        } else {
            String::new()
        },
        if t.delack_max_us > 0 {
            format!(", delayed-ACK max {} µs", t.delack_max_us)
        } else {
            String::new()
        },
    );
    Ok(())
}

/// `tune syn-rto list`: the prefixes in the pinned map, in ms at this machine's HZ.
fn syn_rto_list(at: &Attachment, json: bool) -> anyhow::Result<()> {
    let s = syn_rto::SynRto::at(&at.pin_dir);
    let attached = s.is_attached();
    // HZ converts jiffies to ms; it is measured, so only when there is a table.
    let hz = if attached {
        Some(hz::detect_here()?)
    } else {
        None
    };
    let prefixes: Vec<SynRtoPrefix> = match hz {
        Some(hz) => s
            .list()?
            .into_iter()
            .map(|(ip, len, v)| SynRtoPrefix {
                prefix: format!("{ip}/{len}"),
                syn_rto_jiffies: v.syn_rto_jiffies,
                syn_rto_ms: u64::from(v.syn_rto_jiffies) * 1000 / u64::from(hz),
                rto_min_us: v.rto_min_us,
                delack_max_us: v.delack_max_us,
            })
            .collect(),
        None => Vec::new(),
    };
    if json {
        let doc = SynRtoState {
            attached,
            pin_dir: &at.pin_dir,
            hz,
            prefixes,
        };
        outln!("{}", schema::pretty(schema::TUNE_SYN_RTO, &doc)?);
        return Ok(());
    }
    if !attached {
        outln!("not attached (nothing pinned at {})", at.pin_dir.display());
        return Ok(());
    }
    let mut t = rttlab::report::table::Table::new([
        "PREFIX",
        "SYN_RTO_jiffies",
        "SYN_RTO_ms",
        "RTO_MIN_us",
        "DELACK_MAX_us",
    ]);
    // 0 is "leave the kernel's value": shown as a dash.
    let dash = |x: u32| {
        if x == 0 {
            "-".to_owned()
        } else {
            x.to_string()
        }
    };
    for p in prefixes {
        t.row([
            p.prefix,
            dash(p.syn_rto_jiffies),
            p.syn_rto_ms.to_string(),
            dash(p.rto_min_us),
            dash(p.delack_max_us),
        ]);
    }
    out!("{}", t.render());
    Ok(())
}

/// `tune syn-rto detach`: the program detached and unpinned (journaled).
fn syn_rto_detach(j: &Journal, at: &Attachment) -> anyhow::Result<()> {
    let cg = at.cgroup()?;
    let s = syn_rto::SynRto::at(&at.pin_dir);
    let was = s.is_attached();
    tuning::detach_syn_rto(j, &s, &cg)?;
    if was {
        outln!(
            "detached from {} and unpinned {}",
            cg.display(),
            at.pin_dir.display()
        );
    } else {
        outln!("not attached (nothing pinned at {})", at.pin_dir.display());
    }
    Ok(())
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

#[derive(Subcommand, Debug)]
pub enum ThinAction {
    /// The sysctl's value here.
    #[command(after_help = "\
Examples:
  rttlab tune thin show
  rttlab tune thin show --netns rttlab-lab-demo-a
  rttlab tune thin show --json")]
    Show {
        /// Network namespace (a name under /run/netns, or a path).
        #[arg(long)]
        netns: Option<String>,
        /// One JSON document (schema rttlab.tune-thin/1).
        #[arg(long)]
        json: bool,
    },
    /// Turn thin-stream linear timeouts on or off (recorded, revertible).
    #[command(after_help = "\
Examples:
  rttlab tune thin set on
  rttlab tune thin set off --netns rttlab-lab-demo-a --dry-run")]
    Set {
        /// on or off.
        #[arg(value_enum)]
        value: OnOff,
        #[command(flatten)]
        at: Where,
    },
    /// Undo what `set` changed here.
    #[command(after_help = "\
Examples:
  rttlab tune thin revert")]
    Revert {
        #[command(flatten)]
        at: Where,
    },
}

pub fn run(a: TuneArgs) -> anyhow::Result<()> {
    let changes = !matches!(
        a.knob,
        Knob::RtoMin {
            action: RtoMinAction::Show { .. }
        } | Knob::Thin {
            action: ThinAction::Show { .. }
        } | Knob::SynRto {
            action: SynRtoAction::List { .. }
        } | Knob::Revert { dry_run: true, .. }
    );
    // SAFETY: geteuid cannot fail.
    if changes && unsafe { libc::geteuid() } != 0 {
        bail!(
            "changing TCP's settings needs root: {} for routes and eBPF ({} too), write access to /proc/sys and to the journal in {}; run it with sudo (`show` and `list` need nothing)",
            Capability::NetAdmin.name(),
            Capability::Bpf.name(),
            rttlab::state_dir().display()
        );
    }
    let j = Journal::default_location();
    match a.knob {
        Knob::RtoMin { action } => rto_min(&j, action),
        Knob::Thin { action } => thin(&j, action),
        Knob::SynRto { action } => syn_rto(&j, action),
        Knob::Revert { all: _, dry_run } => {
            if dry_run {
                for e in j.all_entries()?.iter().rev() {
                    outln!("{}", e.change.revert_command());
                }
                return Ok(());
            }
            report_reverted(j.revert_all()?)
        }
    }
}

fn revert(
    j: &Journal,
    dry_run: bool,
    which: impl Fn(&tuning::Change) -> bool,
) -> anyhow::Result<()> {
    if dry_run {
        for c in j.entries()?.iter().rev().filter(|c| which(c)) {
            outln!("{}", c.revert_command());
        }
        return Ok(());
    }
    report_reverted(j.revert(which)?)
}

fn report_reverted(done: Vec<tuning::Reverted>) -> anyhow::Result<()> {
    let mut failed = 0;
    for (c, r) in done {
        match r {
            Ok(()) => outln!("reverted: {}", c.revert_command()),
            Err(e) if tuning::namespace_gone(&e) => {
                outln!("gone with its namespace: {}", c.revert_command())
            }
            Err(e) => {
                failed += 1;
                eprintln!(
                    "rttlab: could not revert ({}): {}",
                    rttlab::error_chain(&e),
                    c.revert_command()
                );
            }
        }
    }
    if failed > 0 {
        bail!("{failed} change(s) could not be reverted; they stay recorded for the next `rttlab tune revert --all`");
    }
    Ok(())
}

fn probe(netns: Option<&str>, target: &str) -> anyhow::Result<Probe> {
    let addr: SocketAddr = target
        .to_socket_addrs()
        .with_context(|| format!("--probe {target:?}: give HOST:PORT"))?
        .next()
        .context("no address")?;
    let info = netns::run_in(netns, || -> anyhow::Result<_> {
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(3))
            .with_context(|| format!("connecting to {addr} (something must listen there)"))?;
        Ok(sockopt::tcp_info(&s)?)
    })??;
    let (rto_min, _) = hz::rto_min_us(netns)?;
    let hz = netns::run_in(netns, || hz::detect(rto_min))?.ok();
    Ok(Probe {
        addr,
        rto_us: info.rto_us,
        srtt_us: info.rtt_us,
        hz,
    })
}

fn print_probe(p: &Probe) -> anyhow::Result<()> {
    outln!(
        "a new connection to {} has rto {:.1} ms (srtt {} µs){}",
        p.addr,
        f64::from(p.rto_us) / 1e3,
        p.srtt_us,
        p.hz.map_or(String::new(), |h| format!(
            "; kernel HZ {h}: rto is rto_min rounded up to {} ms jiffies, plus one",
            1000 / h
        ))
    );
    Ok(())
}

fn rto_min(j: &Journal, action: RtoMinAction) -> anyhow::Result<()> {
    match action {
        RtoMinAction::Show {
            netns,
            probe: target,
            json,
        } => rto_min_show(netns.as_deref(), target.as_deref(), json),
        RtoMinAction::Set {
            value,
            route: dest,
            sysctl: _,
            at,
            probe: target,
        } => rto_min_set(j, value, dest.as_deref(), &at, target.as_deref()),
        RtoMinAction::Revert { at } => {
            let ns = at.netns.clone();
            revert(j, at.dry_run, move |c| {
                c.netns() == ns.as_deref()
                    && match c {
                        tuning::Change::RouteRtoMin { .. } => true,
                        tuning::Change::Sysctl { key, .. } => key == RTO_MIN_US,
                        tuning::Change::SynRtoAttach { .. }
                        | tuning::Change::NftTable { .. }
                        | tuning::Change::PassiveTc { .. } => false,
                    }
            })
        }
    }
}

/// `tune rto-min show`: the sysctl, every route that sets rto_min, and with --probe
/// what a connection to the target gets.
fn rto_min_show(ns: Option<&str>, target: Option<&str>, json: bool) -> anyhow::Result<()> {
    let (us, has) = hz::rto_min_us(ns)?;
    let routes = route::list(ns)?;
    let with: Vec<RouteRtoMin> = routes
        .iter()
        .filter_map(|r| {
            Some(RouteRtoMin {
                prefix: r.prefix(),
                dev: r.dev.clone(),
                rto_min_ms: r.rto_min_ms()?,
                locked: r.rto_min_locked(),
            })
        })
        .collect();
    let probed = target.map(|t| probe(ns, t)).transpose()?;
    if json {
        let doc = RtoMinState {
            netns: ns,
            sysctl: RTO_MIN_US,
            sysctl_us: has.then_some(us),
            routes: with,
            probe: probed,
        };
        outln!("{}", schema::pretty(schema::TUNE_RTO_MIN, &doc)?);
        return Ok(());
    }
    if has {
        outln!(
            "{RTO_MIN_US} = {us} ({:.1} ms) for new sockets",
            us as f64 / 1e3
        );
    } else {
        outln!("this kernel has no {RTO_MIN_US} (Linux < 6.11): rto_min is 200 ms unless a route sets it, and the delayed-ACK timer stays at 40 ms");
    }
    if with.is_empty() {
        outln!("no route sets rto_min");
    }
    for r in &with {
        outln!(
            "route {} dev {}: rto_min {} ms{}",
            r.prefix,
            r.dev.as_deref().unwrap_or("?"),
            r.rto_min_ms,
            if r.locked {
                " (locked: used by TCP)"
            } else {
                " (not locked: TCP ignores it)"
            }
        );
    }
    if let Some(p) = probed {
        print_probe(&p)?;
    }
    Ok(())
}

/// `tune rto-min set`: on the route to `dest` (locked, as TCP reads it only then), or
/// the sysctl; journaled, or with --dry-run the command that would do it.
fn rto_min_set(
    j: &Journal,
    value: Duration,
    dest: Option<&str>,
    at: &Where,
    target: Option<&str>,
) -> anyhow::Result<()> {
    let ns = at.netns.as_deref();
    tuning::check_rto_min(value)?;
    if let Some(dest) = dest {
        let ms = tuning::route_rto_min_ms(value)?;
        let r = tuning::route_for(ns, dest)?;
        if at.dry_run {
            outln!("{}", r.ip_command(ns, Some(ms)));
            return Ok(());
        }
        let prev = tuning::set_route_rto_min(j, ns, &r, Some(ms))?;
        outln!(
            "route {}: rto_min {} → {ms} ms (locked)",
            r.prefix(),
            prev.map_or("unset".into(), |p| format!(
                "{} ms{}",
                p.ms,
                if p.locked {
                    ""
                } else {
                    " (unlocked, so unused)"
                }
            ))
        );
        if sysctl::read(ns, RTO_MIN_US).is_err() {
            eprintln!("warning: this kernel has no {RTO_MIN_US}; on kernels before 6.11 the delayed-ACK timer stays at 40 ms whatever rto_min is");
        }
    } else {
        let us = value.as_micros().to_string();
        if at.dry_run {
            outln!("{}", sysctl_command(ns, RTO_MIN_US, &us));
            return Ok(());
        }
        let prev = tuning::set_sysctl(j, ns, RTO_MIN_US, &us).map_err(|e| match e {
            tuning::TuneError::Sysctl(sysctl::SysctlError::Missing(_)) => anyhow::anyhow!(
                "this kernel has no {RTO_MIN_US} (Linux < 6.11): use --route, and note the delayed-ACK timer stays at 40 ms"
            ),
            other => other.into(),
        })?;
        outln!(
            "{RTO_MIN_US}: {prev} → {us} (new sockets only; the delayed-ACK ceiling follows it)"
        );
    }
    if let Some(t) = target {
        print_probe(&probe(ns, t)?)?;
    }
    Ok(())
}

fn thin(j: &Journal, action: ThinAction) -> anyhow::Result<()> {
    match action {
        ThinAction::Show { netns, json } => {
            let v = sysctl::read(netns.as_deref(), THIN)?;
            if json {
                let doc = ThinState {
                    netns: netns.as_deref(),
                    sysctl: THIN,
                    on: v == "1",
                };
                outln!("{}", schema::pretty(schema::TUNE_THIN, &doc)?);
                return Ok(());
            }
            outln!(
                "{THIN} = {v} ({})",
                if v == "1" {
                    "on: thin streams back off linearly for 6 RTOs"
                } else {
                    "off"
                }
            );
            Ok(())
        }
        ThinAction::Set { value, at } => {
            let v = match value {
                OnOff::On => "1",
                OnOff::Off => "0",
            };
            if at.dry_run {
                outln!("{}", sysctl_command(at.netns.as_deref(), THIN, v));
                return Ok(());
            }
            let prev = tuning::set_sysctl(j, at.netns.as_deref(), THIN, v)?;
            outln!("{THIN}: {prev} → {v}");
            Ok(())
        }
        ThinAction::Revert { at } => {
            let ns = at.netns.clone();
            revert(j, at.dry_run, move |c| {
                c.netns() == ns.as_deref()
                    && matches!(c, tuning::Change::Sysctl { key, .. } if key == THIN)
            })
        }
    }
}
