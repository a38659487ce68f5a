//! `rttlab lab`: build, change, use, list and remove labs.

use super::values;
use anyhow::{bail, Context};
use clap::{Args, Subcommand, ValueEnum};
use rttlab::lab::emulator::Dir;
use rttlab::lab::impair::{ImpairmentPatch, Impairments, JitterDist, Loss, QueueLimit};
use rttlab::lab::socket::{self, Reply, Request, Start};
use rttlab::lab::{topology, Lab, LabError, LabInfo, LabSpec};
use std::io::{BufRead, Write};
use std::time::Duration;

#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  rttlab lab up --name demo --delay 50ms --loss 1%
  rttlab lab exec --name demo a -- ping -c 3 b
  rttlab lab list
  rttlab lab down --name demo")]
pub struct LabArgs {
    #[command(subcommand)]
    pub command: LabCommand,
}

#[derive(Subcommand, Debug)]
pub enum LabCommand {
    /// Build a lab (hosts a and b, router r running the emulator) and leave it running.
    #[command(after_help = "\
Examples:
  rttlab lab up --name demo --delay 50ms                   100 ms RTT between a and b
  rttlab lab up --name demo --delay 50ms --jitter 1ms --loss 1% --rate 10mbit --queue 100kB
  rttlab lab up --name demo --delay 10ms --dir a2b         one direction only
  rttlab lab up --name fleet --hosts 4 --delay 2ms,5ms,10ms,20ms   a star: RTT(i,j) = 2(di+dj)
  rttlab lab up --name dc --fleet 2x5x10 --delay 1ms,5ms   100 hosts in 10 racks in 2 zones:
                                          RTT 4 ms between racks, 24 ms between zones
  rttlab lab up --name fast --emulator poll --seed 7      busy-polling, reproducible draws
  rttlab lab up --name demo --delay 5ms --json            the lab as `lab list --json` shows it")]
    Up(UpArgs),
    /// Change a running lab's impairments, or schedule a blackout.
    #[command(after_help = "\
Examples:
  rttlab lab set --name demo --delay 75ms                  both directions
  rttlab lab set --name demo --loss 5% --dir a2b
  rttlab lab set --name demo --blackout 200ms --port 5001 --at +1s
  rttlab lab set --name fleet --link d --blackout 3s       one link of a star
  rttlab lab set --name dc --link rack3 --delay 3ms --loss 5%   one rack's uplink")]
    Set(SetArgs),
    /// Run a command on host a, b or the router r, with `a` and `b` resolving to the hosts.
    #[command(after_help = "\
Examples:
  rttlab lab exec --name demo a -- ping -c 3 b
  rttlab lab exec --name demo b -- rttlab serve
  rttlab lab exec --name demo r -- tcpdump -ni to-b")]
    Exec(ExecArgs),
    /// The labs on this machine: hosts, impairments, counters.
    #[command(after_help = "\
Examples:
  rttlab lab list
  rttlab lab list --json")]
    List {
        /// One JSON object per lab.
        #[arg(long)]
        json: bool,
    },
    /// Remove a lab (namespaces, links, processes, files), also one left by a crash.
    #[command(after_help = "\
Examples:
  rttlab lab down --name demo
  rttlab lab down --all --force        also labs of running experiments")]
    Down(DownArgs),
    /// Run the emulator of a lab built by `lab up` (started by `lab up` itself).
    #[command(hide = true)]
    Daemon {
        #[arg(long)]
        spec: String,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq)]
pub enum DirArg {
    A2b,
    B2a,
    Both,
}

impl DirArg {
    fn dirs(self) -> Vec<Dir> {
        match self {
            DirArg::A2b => vec![Dir::A2b],
            DirArg::B2a => vec![Dir::B2a],
            DirArg::Both => Dir::BOTH.to_vec(),
        }
    }
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq)]
pub enum Dist {
    Uniform,
    Normal,
}

/// Impairments of one or both directions.
#[derive(Args, Debug, Default)]
pub struct ImpairArgs {
    /// One-way delay (so 50ms gives a 100 ms RTT when set both ways); with `lab up
    /// --hosts N`, one per host's link, comma-separated (or one for all); with `lab up
    /// --fleet`, the racks' uplinks' and the zones' (RACK,ZONE); `lab set` takes one.
    #[arg(long, value_parser = values::duration, value_delimiter = ',')]
    pub delay: Vec<Duration>,
    /// Jitter around the delay.
    #[arg(long, value_parser = values::duration)]
    pub jitter: Option<Duration>,
    /// Jitter distribution: uniform in ±jitter, or normal with σ = jitter.
    #[arg(long, value_enum)]
    pub jitter_dist: Option<Dist>,
    /// Let jittered frames overtake each other (`--reorder false` to stop).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub reorder: Option<bool>,
    /// Random (Bernoulli) loss, e.g. 1% (0 for none).
    #[arg(long, value_parser = values::percent, conflicts_with = "gemodel")]
    pub loss: Option<f64>,
    /// Bursty Gilbert–Elliott loss P,R[,LOSS_BAD[,LOSS_GOOD]] as netem's gemodel, e.g. 1%,10%.
    #[arg(long, value_parser = values::gemodel)]
    pub gemodel: Option<Loss>,
    /// Serialisation rate: 10mbit, 500kbit, 1gbit; none for no limit.
    #[arg(long, value_parser = link_rate)]
    pub rate: Option<LinkRate>,
    /// Drop-tail queue in front of the rate limiter: bytes (100kB, 64KiB) or packets (1000p).
    #[arg(long, value_parser = values::queue)]
    pub queue: Option<QueueLimit>,
}

/// A rate limit, or none (clap reads a bare `Option<Option<_>>` as an optional value).
#[derive(Clone, Copy, Debug)]
pub struct LinkRate(pub Option<u64>);

fn link_rate(s: &str) -> Result<LinkRate, String> {
    values::bitrate(s).map(LinkRate)
}

impl ImpairArgs {
    fn patch(&self) -> ImpairmentPatch {
        ImpairmentPatch {
            delay_ns: self.delay.first().copied().map(rttlab::stats::units::ns),
            jitter_ns: self.jitter.map(rttlab::stats::units::ns),
            jitter_dist: self.jitter_dist.map(|d| match d {
                Dist::Uniform => JitterDist::Uniform,
                Dist::Normal => JitterDist::Normal,
            }),
            reorder: self.reorder,
            loss: self
                .loss
                .map(|p| {
                    if p == 0.0 {
                        Loss::None
                    } else {
                        Loss::Bernoulli { p }
                    }
                })
                .or(self.gemodel),
            rate_bps: self.rate.map(|r| r.0),
            queue: self.queue,
        }
    }
}

#[derive(Args, Debug)]
pub struct UpArgs {
    /// Lab name (namespaces rttlab-lab-NAME-a, -r, -b; a fleet's -h001, …).
    #[arg(long, default_value = "default")]
    pub name: String,
    #[command(flatten)]
    pub impair: ImpairArgs,
    /// Apply the impairments to one direction only (the other has none).
    #[arg(long, value_enum, default_value = "both")]
    pub dir: DirArg,
    /// A star of N hosts (a, b, c, …; 2–16) around the router instead of a and b,
    /// each on its own link: `--delay` and the other impairments apply to every
    /// link both ways, `--delay D1,D2,…` gives each host's link its own, so the RTT
    /// between hosts i and j is 2·(Di + Dj).
    #[arg(long, value_name = "N", conflicts_with = "fleet")]
    pub hosts: Option<usize>,
    /// A fleet of ZONES×RACKS×HOSTS (racks in each zone, hosts in each rack; at most
    /// 250 hosts, named h001, h002, … rack by rack, and 40 racks and zones): each
    /// rack's hosts on one bridge, each rack's uplink into its zone and each zone's
    /// into the core through the emulator (16 MiB each). `--delay RACK,ZONE` sets every
    /// rack's and every zone's uplink (both ways); the other impairments apply to every
    /// rack's uplink each way, so a round trip between racks crosses four (5 % loss
    /// loses about 19 %); `lab set` changes every rack's, `lab set --link rackN` or
    /// `zoneN` one. `lab list --json` gives each host's rack and zone.
    #[arg(long, value_name = "ZxRxH", value_parser = fleet_shape)]
    pub fleet: Option<topology::FleetShape>,
    /// How the lab's emulator waits between frames.
    #[arg(long, value_enum, default_value_t = values::Emulator::Auto)]
    pub emulator: values::Emulator,
    /// Seed for loss and jitter draws (reproducible runs).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Write the event log (every change and drop, JSON lines) here instead of the lab's state directory.
    #[arg(long, value_name = "FILE")]
    pub events: Option<std::path::PathBuf>,
    /// Print the lab once it is up as one JSON line, as `lab list --json` does.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct SetArgs {
    /// The lab to change.
    #[arg(long, default_value = "default")]
    pub name: String,
    /// Change only this link: a star's host (a2b: from the host into the hub, b2a:
    /// back to it), a fleet's rackN or zoneN (a2b: towards the core); without it,
    /// every link (a fleet's every rack uplink).
    #[arg(long, alias = "host", value_name = "LINK")]
    pub link: Option<String>,
    #[command(flatten)]
    pub impair: ImpairArgs,
    /// Direction to change.
    #[arg(long, value_enum, default_value = "both")]
    pub dir: DirArg,
    /// Drop everything (or --port only) for exactly this long.
    #[arg(long, value_parser = values::duration)]
    pub blackout: Option<Duration>,
    /// Black out only TCP/UDP packets with this source or destination port.
    #[arg(long, requires = "blackout")]
    pub port: Option<u16>,
    /// Start the blackout later: +1s, +250ms.
    #[arg(long, requires = "blackout", value_parser = at)]
    pub at: Option<Duration>,
}

/// `ZxRxH`: zones, racks in each, hosts in each rack, each at least 1.
fn fleet_shape(s: &str) -> Result<topology::FleetShape, String> {
    let n: Vec<usize> = s
        .split(['x', 'X', '×'])
        .map(|p| p.trim().parse().ok().filter(|&n| n > 0))
        .collect::<Option<_>>()
        .filter(|n: &Vec<usize>| n.len() == 3)
        .ok_or_else(|| format!("{s:?}: give ZONESxRACKSxHOSTS, e.g. 2x5x10, each at least 1"))?;
    Ok(topology::FleetShape {
        zones: n[0],
        racks: n[1],
        hosts: n[2],
    })
}

fn at(s: &str) -> Result<Duration, String> {
    let t = s
        .strip_prefix('+')
        .ok_or_else(|| format!("{s:?}: give a delay from now, e.g. +1s"))?;
    values::duration(t)
}

#[derive(Args, Debug)]
pub struct ExecArgs {
    /// The lab to run in.
    #[arg(long, default_value = "default")]
    pub name: String,
    /// A host (a, b, a star's c, d, …, a fleet's h001, h002, …) or the router r.
    pub node: String,
    /// The command and its arguments (after --).
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct DownArgs {
    /// The lab to remove.
    #[arg(long, conflicts_with = "all")]
    pub name: Option<String>,
    /// Every lab on this machine.
    #[arg(long)]
    pub all: bool,
    /// Also labs held by a running experiment or test (their owner is killed).
    #[arg(long)]
    pub force: bool,
}

pub fn run(a: LabArgs) -> anyhow::Result<()> {
    match a.command {
        LabCommand::Up(u) => up(u),
        LabCommand::Set(s) => set(s),
        LabCommand::Exec(e) => exec(e),
        LabCommand::List { json } => list(json),
        LabCommand::Down(d) => down(d),
        LabCommand::Daemon { spec } => daemon(&spec),
    }
}

fn up(u: UpArgs) -> anyhow::Result<()> {
    let mut imp = Impairments::default();
    u.impair.patch().apply(&mut imp);
    imp.validate()?;
    topology::check_name(&u.name)?;
    let impairments = match u.dir {
        DirArg::Both => [imp, imp],
        DirArg::A2b => [imp, Impairments::default()],
        DirArg::B2a => [Impairments::default(), imp],
    };
    let star = star_links(&u, imp)?;
    let fleet = fleet_links(&u, imp)?;
    let links = fleet.map_or(star.len().max(1), |f| f.shape.total_racks() + f.shape.zones);
    let spec = LabSpec {
        star: star.clone(),
        fleet,
        name: u.name.clone(),
        impairments,
        poll: u.emulator.polls(links),
        seed: u.seed,
        events: u.events.map(|p| std::path::absolute(&p).unwrap_or(p)),
        daemon: true,
    };
    let info = start_daemon(&spec)?;
    let mut o = std::io::stdout().lock();
    if u.json {
        let status = match socket::request(&info.socket, &Request::Status)? {
            Reply::Status(s) => s,
            _ => bail!(
                "lab {}: the emulator answered its status request with something else",
                info.name
            ),
        };
        writeln!(
            o,
            "{}",
            rttlab::results::schema::line(rttlab::results::schema::LAB, &status)?
        )?;
        return Ok(());
    }
    writeln!(
        o,
        "lab {} is up: emulator pid {}, {}",
        info.name,
        info.owner_pid,
        if info.poll {
            "busy-polling"
        } else {
            "sleeping between frames"
        }
    )?;
    write!(o, "{}", rttlab::report::lab::hosts(&info))?;
    if let Some(f) = &fleet {
        for (level, i) in [("rack", &f.rack), ("zone", &f.zone)] {
            writeln!(
                o,
                "each {level}'s uplink (both ways): {}",
                rttlab::report::lab::impairments(i)
            )?;
        }
    } else if star.is_empty() {
        for (d, i) in [("a2b", &impairments[0]), ("b2a", &impairments[1])] {
            writeln!(o, "{d}: {}", rttlab::report::lab::impairments(i))?;
        }
    } else {
        for (h, i) in info.all_hosts().iter().zip(&star) {
            writeln!(
                o,
                "link {} (both ways): {}",
                h.name,
                rttlab::report::lab::impairments(i)
            )?;
        }
    }
    // A fleet's hint crosses every uplink: its first host to its last.
    let to = info.all_hosts().last().map_or(&info.b.name, |h| &h.name);
    writeln!(
        o,
        "try: rttlab lab exec --name {} {} -- ping -c 3 {to}",
        info.name, info.a.name
    )?;
    Ok(())
}

/// `--fleet`: every rack's uplink `imp`, every zone's uplink without impairments but
/// its delay; `--delay RACK,ZONE` sets both.
fn fleet_links(u: &UpArgs, imp: Impairments) -> anyhow::Result<Option<rttlab::lab::Fleet>> {
    let Some(shape) = u.fleet else {
        return Ok(None);
    };
    if u.dir != DirArg::Both {
        bail!("--dir applies to the two-host lab; a fleet's uplinks are impaired both ways")
    }
    let hosts = shape.total_hosts();
    let links = shape.total_racks().saturating_add(shape.zones);
    if links > topology::MAX_FLEET_LINKS {
        bail!(
            "--fleet: {} racks and {} zones; a fleet has at most {} together (each uplink's emulator holds 16 MiB of rings)",
            shape.total_racks(),
            shape.zones,
            topology::MAX_FLEET_LINKS
        )
    }
    if !(2..=topology::MAX_FLEET_HOSTS).contains(&hosts) {
        let said = if hosts == usize::MAX {
            "more".to_string()
        } else {
            hosts.to_string()
        };
        bail!(
            "--fleet: {said} hosts; a fleet has 2 to {} (zones × racks × hosts)",
            topology::MAX_FLEET_HOSTS
        )
    }
    let delays = &u.impair.delay;
    if delays.len() > 2 {
        bail!("--fleet takes --delay RACK or --delay RACK,ZONE: the uplinks' one-way delays")
    }
    let ns = |d: Option<&Duration>| d.map_or(0, |d| rttlab::stats::units::ns(*d));
    let mut rack = imp;
    rack.delay_ns = ns(delays.first());
    let zone = Impairments {
        delay_ns: ns(delays.get(1)),
        ..Impairments::default()
    };
    Ok(Some(rttlab::lab::Fleet { shape, rack, zone }))
}

/// `--hosts N`: each host's link to the router, `imp` with the host's own `--delay`
/// where one per host is given; empty for the two-host lab.
fn star_links(u: &UpArgs, imp: Impairments) -> anyhow::Result<Vec<Impairments>> {
    Ok(match u.hosts {
        None if u.impair.delay.len() > 1 && u.fleet.is_none() => {
            bail!("--delay takes one value per host only with --hosts N")
        }
        None => Vec::new(),
        Some(n) if !(2..=topology::MAX_HOSTS).contains(&n) => {
            bail!("--hosts {n}: a lab has 2 to {} hosts", topology::MAX_HOSTS)
        }
        Some(_) if u.dir != DirArg::Both => {
            bail!("--dir applies to the two-host lab; a star's links are impaired both ways")
        }
        Some(n) => {
            let delays = &u.impair.delay;
            if delays.len() > 1 && delays.len() != n {
                bail!(
                    "--delay gives {} values for {n} hosts: give one, or one per host",
                    delays.len()
                );
            }
            (0..n)
                .map(|i| {
                    let mut link = imp;
                    if let Some(d) = delays.get(i).or(delays.first()) {
                        link.delay_ns = rttlab::stats::units::ns(*d);
                    }
                    link
                })
                .collect()
        }
    })
}

/// Start the `lab daemon` that builds the lab and runs its emulator, out of this
/// session, and wait for its first line: the lab's facts, or its error.
fn start_daemon(spec: &LabSpec) -> anyhow::Result<LabInfo> {
    let exe = std::env::current_exe().context("finding the rttlab binary")?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["lab", "daemon", "--spec", &serde_json::to_string(spec)?])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    // SAFETY: setsid between fork and exec: the daemon leaves our session, so the
    // terminal's Ctrl-C and hang-up do not reach it.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("starting the lab daemon")?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        std::io::BufReader::new(out).read_line(&mut line)?;
    }
    if let Some(err) = line.strip_prefix("error: ") {
        let _ = child.wait();
        bail!("{}", err.trim());
    }
    serde_json::from_str(&line).map_err(|_| {
        let _ = child.wait();
        anyhow::anyhow!("the lab daemon exited before the lab was up")
    })
}

/// The `lab up` daemon: build, report on stdout, serve until `lab down` or a signal.
fn daemon(spec: &str) -> anyhow::Result<()> {
    // It lives as long as the lab: nothing of its caller's (a lock, an open file) may
    // live with it. Its stdin and stderr are /dev/null (see `up`); stdout goes there
    // once it has told `up` the lab's details.
    rttlab::kernel::descriptors::close_inherited().context("closing inherited descriptors")?;
    let spec: LabSpec = serde_json::from_str(spec).context("bad lab spec")?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let _ = ctrlc::set_handler(move || s2.store(true, std::sync::atomic::Ordering::Release));
    let lab = match Lab::up(&spec) {
        Ok(l) => l,
        Err(e) => {
            outln!("error: {}", rttlab::error_chain(&e));
            return Err(super::Exit(1).into());
        }
    };
    outln!("{}", serde_json::to_string(lab.info())?);
    std::io::stdout().flush()?;
    // Nobody reads stdout any more.
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        // SAFETY: dup2 onto fd 1 of a descriptor `null` keeps open across the call; fd 1
        // is only written through std's stdout, which stays valid on /dev/null.
        unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), 1) };
    }
    while !stop.load(std::sync::atomic::Ordering::Acquire) && !lab.shutdown_requested() {
        std::thread::sleep(Duration::from_millis(50));
    }
    lab.down()?;
    Ok(())
}

fn find(name: &str) -> anyhow::Result<LabInfo> {
    topology::check_name(name)?;
    let f = topology::find_all()
        .into_iter()
        .find(|f| f.name == name)
        .ok_or_else(|| LabError::NoSuchLab(name.into()))?;
    match (f.info, f.live) {
        (Some(i), true) => Ok(i),
        _ => Err(LabError::Unreachable {
            path: topology::state_dir(name)
                .join("lab.sock")
                .display()
                .to_string(),
            source: "the process that owns the lab has gone".into(),
        }
        .into()),
    }
}

fn set(s: SetArgs) -> anyhow::Result<()> {
    let info = find(&s.name)?;
    let dirs = s.dir.dirs();
    let patch = s.impair.patch();
    if s.impair.delay.len() > 1 {
        bail!("lab set takes one --delay (use --link to change one link of a star or a fleet)");
    }
    if patch.is_empty() && s.blackout.is_none() {
        bail!("nothing to change: give an impairment (--delay, --loss, ...) or --blackout");
    }
    if !patch.is_empty() {
        socket::request(
            &info.socket,
            &Request::Set {
                link: s.link.clone(),
                dirs: dirs.clone(),
                patch,
            },
        )?;
        outln!(
            "lab {}: {} changed",
            info.name,
            s.dir
                .dirs()
                .iter()
                .map(|d| d.name())
                .collect::<Vec<_>>()
                .join(" and ")
        );
    }
    if let Some(d) = s.blackout {
        let start = s.at.map_or(Start::Now, |a| Start::After {
            ns: rttlab::stats::units::ns(a),
        });
        let r = socket::request(
            &info.socket,
            &Request::Blackout {
                link: s.link.clone(),
                dirs,
                duration_ns: rttlab::stats::units::ns(d),
                port: s.port,
                start,
            },
        )?;
        if let Reply::Blackout { window } = r {
            outln!(
                "lab {}: blackout {} ms{} from {} to {} (CLOCK_REALTIME ns)",
                info.name,
                d.as_secs_f64() * 1e3,
                s.port.map(|p| format!(" of port {p}")).unwrap_or_default(),
                window.start_ns,
                window.end_ns
            );
        }
    }
    Ok(())
}

fn exec(e: ExecArgs) -> anyhow::Result<()> {
    let info = find(&e.name)?;
    let ns = match e.node.as_str() {
        "r" => info.router_netns.clone(),
        n => match info.host(n) {
            Some(h) => h.netns.clone(),
            None => {
                let hosts = info.all_hosts();
                let names = match (info.fleet, hosts.last()) {
                    (Some(_), Some(last)) => format!("{}–{}", hosts[0].name, last.name),
                    _ => hosts
                        .iter()
                        .map(|h| h.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                };
                bail!("no node {n:?} in lab {}: use {names} or r", info.name)
            }
        },
    };
    let mut cmd = rttlab::lab::exec::command(&ns, &e.command[0]);
    cmd.args(&e.command[1..]);
    let err = std::os::unix::process::CommandExt::exec(&mut cmd);
    bail!("running {:?} in {ns}: {err}", e.command[0])
}

fn list(json: bool) -> anyhow::Result<()> {
    use rttlab::results::schema;
    let labs: Vec<(String, Result<socket::Status, LabError>)> = topology::find_all()
        .into_iter()
        .map(|f| {
            let st = match (&f.info, f.live) {
                (Some(i), true) => match socket::request(&i.socket, &Request::Status) {
                    Ok(Reply::Status(s)) => Ok(*s),
                    Ok(_) => Err(LabError::UnexpectedReply),
                    Err(e) => Err(e),
                },
                _ => Err(LabError::Abandoned),
            };
            (f.name, st)
        })
        .collect();
    let mut o = std::io::stdout().lock();
    if json {
        for (name, st) in &labs {
            let v = match st {
                Ok(s) => schema::line(schema::LAB, s)?,
                Err(e) => schema::line(
                    schema::LAB,
                    &serde_json::json!({"name": name, "error": rttlab::error_chain(e)}),
                )?,
            };
            writeln!(o, "{v}")?;
        }
    } else {
        write!(o, "{}", rttlab::report::lab::list(&labs))?;
    }
    Ok(())
}

fn down(d: DownArgs) -> anyhow::Result<()> {
    // A lab being created looks dead until its lab.json is written.
    let _registry = topology::lock_registry()?;
    let found = topology::find_all();
    let targets: Vec<_> = match (&d.name, d.all) {
        (Some(n), _) => {
            topology::check_name(n)?;
            let t: Vec<_> = found.into_iter().filter(|f| &f.name == n).collect();
            if t.is_empty() {
                return Err(LabError::NoSuchLab(n.clone()).into());
            }
            t
        }
        (None, true) => found,
        (None, false) => bail!("say which lab: --name NAME, or --all"),
    };
    let mut failed = Vec::new();
    for f in targets {
        if let (Some(i), true) = (&f.info, f.live) {
            if i.daemon {
                let _ = socket::request(&i.socket, &Request::Shutdown);
                let t0 = std::time::Instant::now();
                while topology::alive(i.owner_pid) && t0.elapsed() < Duration::from_secs(5) {
                    std::thread::sleep(Duration::from_millis(20));
                }
            } else if !d.force {
                failed.push(format!(
                    "lab {} is held by process {} (an experiment or test); stop it, or add --force",
                    f.name, i.owner_pid
                ));
                continue;
            }
        }
        match topology::remove(&f.name) {
            Ok(()) => outln!("lab {} removed", f.name),
            Err(e) => failed.push(format!("lab {}: {}", f.name, rttlab::error_chain(&e))),
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        bail!("{}", failed.join("; "))
    }
}
