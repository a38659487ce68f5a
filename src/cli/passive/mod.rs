//! `rttlab passive`.

mod bpf;
mod out;

use super::progress::on_interrupt;
use super::values;
use anyhow::bail;
use bpf::BpfRun;
use clap::{ArgAction, Args, ValueEnum};
use out::{write_failed, FmtIo, Out, SharedOut};
use rttlab::capture::expression::Expression;
use rttlab::capture::{self, Batch, Source, SourceError};
use rttlab::passive::flow::Endpoint;
use rttlab::passive::live::{self, ChoiceError, Engine, EngineChoice};
use rttlab::passive::sampler::SamplerConfig;
use rttlab::passive::summary::{IntervalSummary, Summary};
use rttlab::passive::PpingDetail;
use rttlab::passive::{aggregate, ts, Analyzer, Config, Filter, Method, Place};
use rttlab::report::passive::{self as render, LineFormat, LineWriter};
use rttlab::stats::LogLinear;
use std::cell::RefCell;
use std::io::{BufWriter, Write};
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MethodArg {
    /// TCP timestamps: TSval → TSecr (pping, Strowes).
    Ts,
    /// Sequence numbers: data segment → covering ACK (tcptrace, Wireshark).
    Seq,
    Both,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TsRuleArg {
    /// Remember TSvals of segments that carry data, SYN or FIN (rttlab's default).
    Data,
    /// pping's rule: every packet's TSval, once the reverse direction was seen.
    Pping,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AttachArg {
    /// TCX where the kernel has it (6.6+), else clsact.
    Auto,
    /// A TCX link: the kernel removes it when rttlab ends, however it ends.
    Tcx,
    /// A filter on a clsact qdisc: removed when rttlab ends, and by
    /// `rttlab tune revert --all` after a crash.
    Clsact,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SeqRuleArg {
    /// Karn's rule and SACK-aware (rttlab's default).
    Rttlab,
    /// Wireshark's tcp.analysis.ack_rtt: retransmitted segments timed from the first
    /// copy, SACK ignored.
    Wireshark,
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["read", "interface"])))]
#[command(after_help = "\
Output (one line per RTT sample, pping's format):
  TIME RTT MINRTT HOST:PORT+PEER:PORT [METHOD] [local]
  RTT is capture point → HOST → capture point; MINRTT the smallest so far to HOST in
  this flow. `local` marks samples answered by the capture host itself (its own
  think time or delayed ACK, not the network). METHOD appears with --method both.

Examples:
  rttlab passive -r trace.pcap                          TS samples, as pping prints them
  rttlab passive -r trace.pcapng --method both --summary -q
  tcpdump -i eth0 -w - | rttlab passive -r - --json     streaming from stdin
  rttlab passive -i eth0 'tcp port 443'                 live, tcpdump's filter (run by the kernel)
  rttlab passive -i eth0 -n -s 0 tcp and not port 22    whole frames; -n as tcpdump (never resolves)
  rttlab passive -r trace.pcap host 10.0.0.1 or ip6     the same filter on a file's packets
  rttlab passive -i eth0 --method seq --port 443        live, seq/ACK, one port
  rttlab passive -i to-a --netns rttlab-lab-demo-r --duration 10 --summary
  rttlab passive -r trace.pcap --sampler 1/10,period=60s   what a sampled cloud metric reports
  rttlab passive -i eth0 --method both --aggregate 10s    per /24 and /48, every 10 s, in the kernel
  rttlab passive -i eth0 --rate-limit 100ms --json        ePPing's sampling: a sample a flow per 100 ms

Engines (--engine): live, the TS and seq/ACK rules run in the kernel (tc programs; only
samples or histograms reach rttlab) where the kernel and the privileges allow it, and in
rttlab on frames copied through a packet ring otherwise, or when an option needs every
frame (a filter expression, --sampler, -m, -c); both give the same samples.")]
pub struct PassiveArgs {
    /// Read a pcap or pcapng file (`-` for stdin).
    #[arg(
        short = 'r',
        long = "read",
        conflicts_with = "interface",
        value_name = "FILE"
    )]
    pub read: Option<String>,
    /// Capture live on this interface.
    #[arg(short = 'i', long)]
    pub interface: Option<String>,
    /// The interface is inside this network namespace (a name under /run/netns).
    #[arg(long, requires = "interface")]
    pub netns: Option<String>,
    /// Where the rules run (see below).
    #[arg(long, value_enum, default_value = "auto")]
    pub engine: EngineChoice,
    /// How the in-kernel engine attaches to the interface.
    #[arg(long, value_enum, default_value = "auto")]
    pub attach: AttachArg,
    /// Per flow direction, the least time between two TSvals or two segments timed
    /// (ePPing's sampling: 100ms is its default); 0 times every one.
    #[arg(long, default_value = "0", value_parser = values::duration)]
    pub rate_limit: Duration,
    /// The in-kernel engine's room for TSvals and segments waiting for their answer,
    /// over all flows; past it they are counted, not timed.
    #[arg(long, default_value_t = 131_072, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_pending: u32,
    /// Every INTERVAL, a histogram per prefix of the answering host, method and place,
    /// instead of sample lines (ePPing's --aggregate); the in-kernel engine keeps them
    /// in the kernel, so no sample reaches rttlab.
    #[arg(long, value_name = "INTERVAL", value_parser = values::duration)]
    pub aggregate: Option<Duration>,
    /// The prefix lengths --aggregate uses, IPv4,IPv6.
    #[arg(long, value_name = "V4,V6", default_value = "24,48", value_parser = prefix_lens)]
    pub aggregate_prefix: (u8, u8),
    /// Snap length, as tcpdump's -s: live, the bytes kept of each frame, enough for the
    /// headers the engines read (0: whole frames). The kernel cuts the frame before
    /// copying it to the capture. A file is read as it was captured (as tcpdump -r).
    #[arg(short = 's', long, value_name = "SNAPLEN", default_value_t = 256)]
    pub snaplen: u32,
    /// Accepted as tcpdump's -n and -nn: rttlab never resolves addresses or ports.
    #[arg(short = 'n', action = ArgAction::Count)]
    pub numeric: u8,
    /// Which engine(s).
    #[arg(long, value_enum, default_value = "ts")]
    pub method: MethodArg,
    /// Which packets' TSvals the TS engine remembers.
    #[arg(long, value_enum, default_value = "data")]
    pub ts_rule: TsRuleArg,
    /// How the seq/ACK engine treats retransmissions and SACK.
    #[arg(long, value_enum, default_value = "rttlab")]
    pub seq_rule: SeqRuleArg,
    /// Addresses of the capture host (samples they answer are labelled local);
    /// live, the interface's addresses are used unless this is given.
    #[arg(long, value_delimiter = ',')]
    pub local: Vec<IpAddr>,
    /// Only flows with this host at either end (repeatable).
    #[arg(long, value_delimiter = ',')]
    pub host: Vec<IpAddr>,
    /// Only flows with this port at either end (repeatable).
    #[arg(long, value_delimiter = ',')]
    pub port: Vec<u16>,
    /// Only this flow, `ADDR:PORT+ADDR:PORT` either way round (repeatable).
    #[arg(long, value_parser = flow_arg)]
    pub flow: Vec<(Endpoint, Endpoint)>,
    /// Sample lines as JSON objects.
    #[arg(long, conflicts_with = "machine")]
    pub json: bool,
    /// Sample lines as pping -m: epoch seconds, RTT and MINRTT in seconds, then
    /// pping's byte counts (bytes through the capture point up to the timed packet,
    /// the reverse direction's at its last sample, and since this direction's last
    /// sample), then the flow. The seq method's lines show "-" for the counts.
    #[arg(short = 'm', long)]
    pub machine: bool,
    /// No sample lines (with --summary, --histogram or --sampler).
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// At the end, per flow and direction: samples, min, P50, P90, P99, max, retransmissions.
    #[arg(long)]
    pub summary: bool,
    /// At the end, a log-linear histogram per method and place.
    #[arg(long)]
    pub histogram: bool,
    /// Every INTERVAL of capture time, per flow and direction: samples, min, P50, P90,
    /// P99, max (pping's --sumInt); JSON lines with --json.
    #[arg(long, value_name = "INTERVAL", value_parser = values::duration)]
    pub summary_interval: Option<Duration>,
    /// Emulate a sampled flow metric: `1/N[,period=60s][,seed=S]`.
    #[arg(long, value_parser = sampler_arg)]
    pub sampler: Option<SamplerConfig>,
    /// Forget flows idle this long.
    #[arg(long, default_value = "10s", value_parser = values::duration)]
    pub idle_timeout: Duration,
    /// Most flows held: past it the ring engine evicts the least recently seen eighth,
    /// the in-kernel engine counts new flows (flows_full) and does not follow them.
    #[arg(long, default_value_t = 100_000)]
    pub max_flows: usize,
    /// A TSval or segment older than this gives no sample (pping's tsvalMaxAge).
    #[arg(long, default_value = "10s", value_parser = values::duration)]
    pub max_age: Duration,
    /// Stop after this many packets (1 or more, as tcpdump's -c).
    #[arg(short = 'c', long, value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// Live: stop after this long (a bare number is seconds; pping's -s, a long name
    /// only here, where -s is tcpdump's snap length).
    #[arg(long = "duration", alias = "seconds", value_name = "DURATION", value_parser = values::seconds)]
    pub seconds: Option<Duration>,
    /// A filter in tcpdump's language (pcap-filter(7)), its words joined by spaces as
    /// tcpdump joins them: `tcp port 443` or `'tcp port 443'`. Compiled by libpcap for
    /// the capture's link type; live, the kernel runs it on the socket; for files, it
    /// runs on each packet. Combined (and) with --host, --port and --flow.
    #[arg(value_name = "EXPRESSION")]
    pub expression: Vec<String>,
}

fn prefix_lens(s: &str) -> Result<(u8, u8), String> {
    let (a, b) = s
        .split_once(',')
        .ok_or_else(|| format!("{s:?}: give V4,V6 prefix lengths, e.g. 24,48"))?;
    let v4: u8 = a
        .trim()
        .parse()
        .map_err(|_| format!("{a:?} is not a prefix length"))?;
    let v6: u8 = b
        .trim()
        .parse()
        .map_err(|_| format!("{b:?} is not a prefix length"))?;
    if v4 > 32 || v6 > 128 {
        return Err(format!("{s:?}: IPv4 prefixes are 0–32 bits, IPv6 0–128"));
    }
    Ok((v4, v6))
}

fn flow_arg(s: &str) -> Result<(Endpoint, Endpoint), String> {
    let ep = |x: &str| -> Result<Endpoint, String> {
        let sa: std::net::SocketAddr = x
            .parse()
            .or_else(|_| {
                let (a, p) = x.rsplit_once(':').ok_or(())?;
                Ok::<_, ()>(std::net::SocketAddr::new(
                    a.parse().map_err(|_| ())?,
                    p.parse().map_err(|_| ())?,
                ))
            })
            .map_err(|()| format!("{x:?} is not ADDR:PORT"))?;
        Ok(Endpoint::new(sa.ip(), sa.port()))
    };
    let (a, b) = s
        .split_once('+')
        .ok_or_else(|| format!("{s:?} is not ADDR:PORT+ADDR:PORT"))?;
    Ok((ep(a)?, ep(b)?))
}

fn sampler_arg(s: &str) -> Result<SamplerConfig, String> {
    let mut parts = s.split(',');
    let one_in = values::one_in(parts.next().unwrap_or(""))?;
    let mut cfg = SamplerConfig {
        one_in,
        period_ns: 60_000_000_000,
        seed: 1,
    };
    for p in parts {
        match p.split_once('=') {
            Some(("period", v)) => {
                let d = values::duration(v)?;
                if d.is_zero() {
                    return Err("the sampler's period must be positive".into());
                }
                cfg.period_ns = rttlab::stats::units::ns(d);
            }
            Some(("seed", v)) => {
                cfg.seed = v.parse().map_err(|_| format!("{v:?} is not a seed"))?;
            }
            _ => return Err(format!("{p:?}: expected period=DURATION or seed=N")),
        }
    }
    Ok(cfg)
}

/// A filter expression's error is the command line's: exit 2, libpcap's message.
fn usage_or(e: SourceError) -> anyhow::Error {
    let usage = e.expression().is_some();
    let e = anyhow::Error::new(e);
    if usage {
        e.context(super::Exit(2))
    } else {
        e
    }
}

/// What an option needs that only the ring engine gives, if any.
fn needs_ring(a: &PassiveArgs) -> Option<&'static str> {
    if !a.expression.is_empty() {
        Some("a filter expression runs on the ring's socket")
    } else if a.sampler.is_some() {
        Some("--sampler emulates sampling packets, so it needs every packet")
    } else if a.machine {
        Some("-m prints pping's byte counts, which only the ring engine keeps")
    } else if a.count.is_some() && a.read.is_none() {
        Some("-c counts packets one by one (use --duration)")
    } else {
        None
    }
}

/// The engine `a` asks for, by [`live::choose`]; `--attach` only with the in-kernel one.
fn choose_engine(a: &PassiveArgs) -> anyhow::Result<Engine> {
    if a.engine == EngineChoice::Ring && a.attach != AttachArg::Auto {
        bail!("--attach is for the in-kernel engine (--engine bpf)");
    }
    match live::choose(a.engine, needs_ring(a), a.interface.is_some()) {
        Ok(engine) => Ok(engine),
        Err(ChoiceError::NeedsRing(why)) => bail!("--engine bpf: {why}; use --engine ring"),
        Err(e) => bail!("--engine bpf: {e}"),
    }
}

/// `--duration`, `--aggregate`, `--summary-interval` and `--max-flows` that cannot
/// work, refused before anything opens.
fn check(a: &PassiveArgs) -> anyhow::Result<()> {
    if a.seconds.is_some() && a.read.is_some() {
        bail!(
            "--duration is for a live capture (-i); a file (-r) is read to its end, or -c packets"
        );
    }
    if a.aggregate.is_some_and(|d| d.is_zero()) {
        bail!("--aggregate must be more than 0");
    }
    if a.summary_interval.is_some_and(|d| d.is_zero()) {
        bail!("--summary-interval must be more than 0");
    }
    if a.max_flows == 0 {
        bail!("--max-flows must be 1 or more");
    }
    Ok(())
}

/// The in-kernel engine's maps sized within what the kernel allocates.
fn check_map_sizes(a: &PassiveArgs) -> anyhow::Result<()> {
    // A BPF hash map's buckets are a power of two the kernel allocates up front
    // (htab_map_alloc): past this it refuses the map (E2BIG) or the memory.
    const MAX_ENTRIES: usize = 1 << 24;
    for (flag, n) in [
        ("--max-flows", a.max_flows),
        ("--max-pending", a.max_pending as usize),
    ] {
        if n > MAX_ENTRIES {
            bail!("{flag} {n}: the in-kernel engine holds at most {MAX_ENTRIES} (or use --engine ring)");
        }
    }
    Ok(())
}

/// The engines' configuration `a` asks for.
fn config(a: &PassiveArgs, methods: &[Method]) -> Config {
    Config {
        ts: methods.contains(&Method::Ts),
        seq: methods.contains(&Method::Seq),
        ts_record: match a.ts_rule {
            TsRuleArg::Data => ts::Record::Data,
            TsRuleArg::Pping => ts::Record::Any,
        },
        seq_rules: match a.seq_rule {
            SeqRuleArg::Rttlab => rttlab::passive::seq::Rules::RTTLAB,
            SeqRuleArg::Wireshark => rttlab::passive::seq::Rules::WIRESHARK,
        },
        idle_ns: rttlab::stats::units::ns(a.idle_timeout),
        max_flows: a.max_flows,
        max_age_ns: rttlab::stats::units::ns(a.max_age),
        rate_limit_ns: rttlab::stats::units::ns(a.rate_limit),
        local: a.local.clone(),
        filter: Filter {
            hosts: a.host.clone(),
            ports: a.port.clone(),
            flows: a.flow.clone(),
        },
        sampler: a.sampler,
        pping: match (a.json, a.machine) {
            (true, _) => PpingDetail::Off,
            (false, true) => PpingDetail::TimesAndBytes,
            (false, false) => PpingDetail::Times,
        },
    }
}

/// Where the run's lines, summaries and intervals go: one buffered stdout.
fn outputs(a: &PassiveArgs, methods: usize) -> (Out<SharedOut>, SharedOut) {
    let format = if a.json {
        LineFormat::Json
    } else if a.machine {
        LineFormat::Machine
    } else {
        LineFormat::Pping
    };
    let shared = SharedOut(Rc::new(RefCell::new(BufWriter::with_capacity(
        1 << 16,
        std::io::stdout().lock(),
    ))));
    let out = Out {
        // --aggregate reports histograms instead of samples.
        lines: (!a.quiet && a.aggregate.is_none())
            .then(|| LineWriter::new(shared.clone(), format, methods == 2)),
        summary: (a.summary || a.histogram).then(Summary::default),
        intervals: a.summary_interval.map(|d| {
            (
                IntervalSummary::new(rttlab::stats::units::ns(d)),
                shared.clone(),
                a.json,
            )
        }),
        // Set by the ring engine when it runs: the in-kernel engine keeps its own.
        aggregate: None,
        aggregate_out: a.aggregate.map(|_| (shared.clone(), a.json)),
        error: None,
    };
    (out, shared)
}

pub fn run(a: PassiveArgs, stage: &super::Stage) -> anyhow::Result<()> {
    check(&a)?;
    let expression = Expression::from_words(&a.expression)?;
    let engine = choose_engine(&a)?;
    if engine == Engine::Bpf {
        check_map_sizes(&a)?;
    }
    let methods: Vec<Method> = match a.method {
        MethodArg::Ts => vec![Method::Ts],
        MethodArg::Seq => vec![Method::Seq],
        MethodArg::Both => vec![Method::Ts, Method::Seq],
    };
    let cfg = config(&a, &methods);
    let (mut out, shared) = outputs(&a, methods.len());
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    on_interrupt(move || s2.store(true, Ordering::Release));

    let (bpf_ended, why_not_bpf) = match engine {
        Engine::Ring(why) => (None, why),
        Engine::Bpf => match bpf::run_bpf(&a, cfg.clone(), &mut out, &stop, stage)? {
            BpfRun::Ended(ended) => (Some(*ended), None),
            BpfRun::Unstarted(e) => (None, Some(live::fall_back(a.engine, e)?)),
        },
    };
    let ended = match bpf_ended {
        Some(ended) => ended,
        None => run_ring(
            &a,
            cfg,
            expression,
            why_not_bpf,
            &mut out,
            &shared,
            &stop,
            stage,
        )?,
    };
    report(&a, &methods, out, ended)
}

/// What follows the samples: the last intervals, the summary or histograms, the
/// sampled metric's periods, then the counters and notes on stderr, and the run's
/// failure if it had one.
fn report(
    a: &PassiveArgs,
    methods: &[Method],
    mut out: Out<SharedOut>,
    ended: Ended,
) -> anyhow::Result<()> {
    let Ended {
        counters,
        notes,
        failure,
    } = ended;
    let last = out.intervals.as_mut().and_then(|(iv, _, _)| iv.finish());
    if let Some(l) = out.lines.as_mut() {
        let _ = l.flush();
    }
    out.interval(last);
    if let Some(agg) = out.aggregate.as_mut() {
        let last = agg.finish();
        let bounds = agg.bounds().to_vec();
        out.aggregated(last, &bounds, "ring");
    }
    if let Some(e) = out.error.take() {
        return write_failed(e);
    }
    if let Some(mut l) = out.lines.take() {
        if let Err(e) = l.flush() {
            return write_failed(e);
        }
    }
    let mut o = std::io::stdout().lock();
    if let Some(summary) = out.summary.take() {
        if a.histogram {
            histograms(&mut o, a.json, methods, &summary)?;
        }
        if a.summary {
            let (rows, totals) = summary.finish();
            let mut w = FmtIo {
                w: std::io::BufWriter::new(&mut o),
                error: None,
            };
            let written = if a.json {
                render::summary_json(&mut w.w, &rows, &totals).map_err(|e| {
                    w.error = Some(e);
                    std::fmt::Error
                })
            } else {
                render::summary(&mut w, &rows, &totals)
                    .and_then(|()| std::fmt::Write::write_char(&mut w, '\n'))
            };
            if let Some(e) = w.error.take().or_else(|| w.w.flush().err()) {
                return write_failed(e);
            }
            written?;
        }
    }
    if let Some((periods, sc)) = ended_sampler(&notes, a.sampler) {
        if a.json {
            writeln!(o, "{}", render::sampler_json(&periods, sc.one_in))?;
        } else {
            writeln!(o, "{}", render::sampler(&periods, sc.one_in))?;
        }
    }
    o.flush()?;
    eprintln!("{}", render::counters(&counters, methods));
    for n in &notes.lines {
        eprintln!("{n}");
    }
    if let Some(f) = failure {
        return Err(f);
    }
    Ok(())
}

/// `--histogram`: each method's and place's samples as a log-linear histogram.
fn histograms(
    o: &mut impl Write,
    json: bool,
    methods: &[Method],
    summary: &Summary,
) -> std::io::Result<()> {
    for m in methods {
        for place in [Place::Network, Place::LocalHost] {
            if let Some(h) = summary.histogram(*m, place) {
                if json {
                    writeln!(o, "{}", render::histogram_json(*m, place, h))?;
                } else {
                    writeln!(
                        o,
                        "Histogram, {} samples, {}:\n{}",
                        m.name(),
                        render::place_name(place),
                        LogLinear::from_histogram(h).render()
                    )?;
                }
            }
        }
    }
    Ok(())
}

/// The interface a live run listens on, as its start line names it (tcpdump's
/// `listening on IF, …`, so a script knows the capture is open).
fn listening_place(name: &str, netns: Option<&str>) -> String {
    match netns {
        Some(ns) => format!("{name} in netns {ns}"),
        None => name.to_owned(),
    }
}

/// A line on stderr before the run measures (the fallback's reason, the start line), in
/// one write(2), and only if that write cannot block: a stderr nobody reads (a full
/// pipe) must not hold the run before it measures, with the programs attached and
/// Ctrl-C unheard. A line a full pipe had no room for is left out; so is one a closed
/// pipe refuses (`eprintln!` would panic there).
fn say_now(line: &str) {
    let mut pfd = libc::pollfd {
        fd: libc::STDERR_FILENO,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    let ready = unsafe { libc::poll(&mut pfd, 1, 0) } == 1 && pfd.revents & libc::POLLOUT != 0;
    if ready {
        let text = format!("{line}\n");
        // SAFETY: writing our own buffer to fd 2; a pipe with room for a write below
        // PIPE_BUF takes it whole, at once.
        let _ = unsafe { libc::write(libc::STDERR_FILENO, text.as_ptr().cast(), text.len()) };
    }
}

/// What a run left to print after its output.
struct Ended {
    counters: rttlab::passive::Counters,
    notes: Notes,
    failure: Option<anyhow::Error>,
}

/// Lines for stderr after the counters, and the sampled metric's periods.
#[derive(Default)]
struct Notes {
    lines: Vec<String>,
    sampler: Option<Vec<rttlab::passive::sampler::Period>>,
}

fn ended_sampler(
    notes: &Notes,
    sc: Option<SamplerConfig>,
) -> Option<(Vec<rttlab::passive::sampler::Period>, SamplerConfig)> {
    Some((notes.sampler.clone()?, sc?))
}

/// The ring engine (and files): frames through a capture source into the user-space
/// engine.
#[expect(
    clippy::too_many_arguments,
    reason = "the run's arguments, its capture, its output and its two run-wide flags"
)]
fn run_ring(
    a: &PassiveArgs,
    mut cfg: Config,
    expression: Option<Expression>,
    why_not_bpf: Option<String>,
    out: &mut Out<SharedOut>,
    shared: &SharedOut,
    stop: &AtomicBool,
    stage: &super::Stage,
) -> anyhow::Result<Ended> {
    let source = match (&a.interface, &a.read) {
        (Some(name), _) => Source::Interface {
            name: name.clone(),
            netns: a.netns.clone(),
        },
        (None, path) => Source::File(path.as_deref().unwrap_or("-").into()),
    };
    // Live, the kernel keeps only frames the host and port selections may match (a
    // flow's endpoints are both), and only their headers.
    let mut select = capture::filter::Selection {
        hosts: a.host.clone(),
        ports: a.port.clone(),
    };
    if select.hosts.is_empty() && select.ports.is_empty() {
        for (x, y) in &a.flow {
            for e in [x, y] {
                select.hosts.push(e.ip());
                select.ports.push(e.port);
            }
        }
    }
    let mut flush_first = shared.clone();
    let mut cap = capture::open(
        &source,
        capture::Options {
            select,
            expression,
            snaplen: a.snaplen,
            before_wait: Some(Box::new(move || {
                // A failed flush is left for the next write of a line to report.
                let _ = flush_first.flush();
            })),
        },
    )?;
    stage.measuring();
    // Said once the ring runs: had it failed too, its own reason is the one line.
    if let Some(why) = why_not_bpf {
        say_now(&format!("rttlab: {why}; using the ring engine"));
    }
    if let Some(name) = &a.interface {
        let bytes = match a.snaplen {
            0 => "whole frames".to_owned(),
            n => format!("snapshot length {n} bytes"),
        };
        say_now(&format!(
            "listening on {}, ring engine, {bytes}",
            listening_place(name, a.netns.as_deref())
        ));
    }
    if cfg.local.is_empty() {
        cfg.local = cap.addresses().to_vec();
    }
    let (v4, v6) = a.aggregate_prefix;
    out.aggregate = a.aggregate.map(|d| {
        aggregate::Intervals::new(
            aggregate::Aggregator::new(aggregate::bounds(&[]), v4, v6),
            rttlab::stats::units::ns(d),
        )
    });
    let mut analyzer = Analyzer::new(cfg);
    let t0 = Instant::now();
    let mut seen = 0u64;
    let mut failure = None;
    while !stop.load(Ordering::Acquire)
        && a.seconds.is_none_or(|s| t0.elapsed() < s)
        && a.count.is_none_or(|c| seen < c)
    {
        let batch = cap.read(Duration::from_millis(100), 4096, &mut |ts, link, frame| {
            if a.count.is_none_or(|c| seen < c) {
                seen += 1;
                analyzer.packet(ts, link, frame, out);
            }
        });
        if cap.is_live() {
            // A quiet interface still ends its intervals on time.
            out.tick(rttlab::kernel::realtime_ns());
            out.flush_lines();
        }
        if let Some(e) = out.error.take() {
            return write_failed(e);
        }
        match batch {
            Ok(Batch::More(_)) => {}
            Ok(Batch::End) => break,
            Err(e) => {
                failure = Some(usage_or(e));
                break;
            }
        }
    }
    let mut notes = Notes::default();
    if let Some(st) = cap.live_stats() {
        notes.lines.push(format!(
            "kernel: {} packets to the capture socket, {} dropped (ring full)",
            st.packets, st.drops
        ));
    }
    analyzer.finish(out);
    notes.sampler = analyzer.sampler_periods();
    Ok(Ended {
        counters: analyzer.counters(),
        notes,
        failure,
    })
}
