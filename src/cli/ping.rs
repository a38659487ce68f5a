//! `rttlab ping`.

use super::output::{self, OutputArgs};
use super::progress::{on_interrupt, ProgressLine};
use super::values;
use anyhow::bail;
use clap::{Args, ValueEnum};
use rttlab::probe::ping::{self, PingControl, PingSettings, Pmtu, SocketKind};
use rttlab::report::ping as ping_report;
use rttlab::report::OutputFormat;
use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum SocketArg {
    Auto,
    Dgram,
    Raw,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum PmtuArg {
    Do,
    Dont,
    Want,
}

#[derive(Args, Debug)]
#[command(after_help = "\
As iputils ping: a line per reply (-q: none), then its two summary lines (`N packets
transmitted, …` and `rtt min/avg/max/mdev = …`) for scripts, then rttlab's percentiles.
Exit status 1 when no reply came back, 2 on an error. Bare numbers for -i and -W are
seconds, as in iputils.

Examples:
  rttlab ping 127.0.0.1                   5 echoes, 1 s apart
  rttlab ping ::1 -c 1000 -i 1ms --histogram
  rttlab ping 127.0.0.1 -i 0.2 -c 10 -t 3 -Q 0xb8 -M do
  rttlab ping 127.0.0.1 -i 0 -l 2         next echo as soon as the last reply is in, for 2 s
  rttlab ping 127.0.0.1 -i 100us --spin -c 10000 -o P50_LATENCY,P99_LATENCY")]
pub struct PingArgs {
    /// Host to ping (IPv4 or IPv6).
    pub host: String,
    /// Number of echo requests (default 5 unless -l is given).
    #[arg(short = 'c', long = "count")]
    pub count: Option<u64>,
    /// Run length (a bare number is seconds).
    #[arg(short = 'l', long = "duration", alias = "length", value_name = "DURATION", value_parser = values::seconds)]
    pub length: Option<Duration>,
    /// Interval between requests (a bare number is seconds, as in iputils: -i 0.2); 0
    /// sends the next as soon as the last reply is in.
    #[arg(short = 'i', long = "interval", default_value = "1s", value_parser = values::seconds)]
    pub interval: Duration,
    /// Keep one request in flight: send the next once the last is answered and the
    /// interval since it has passed (netperf TCP_RR's -w pacing).
    #[arg(long)]
    pub one_in_flight: bool,
    /// Busy-wait between requests (for sub-millisecond intervals).
    #[arg(long, conflicts_with = "pace")]
    pub spin: bool,
    /// sleep, spin or hybrid (sleep, then spin the last 200 µs).
    #[arg(long, value_enum)]
    pub pace: Option<super::rr::PaceArg>,
    /// ICMP payload bytes.
    #[arg(short = 's', long = "size", default_value_t = 56)]
    pub size: usize,
    /// A request without a reply after this is lost (a bare number is seconds).
    #[arg(short = 'W', long = "timeout", default_value = "2s", value_parser = values::seconds)]
    pub timeout: Duration,
    /// IP time to live (IPv6: hop limit) of the requests.
    #[arg(short = 't', long = "ttl", value_parser = clap::value_parser!(u8).range(1..))]
    pub ttl: Option<u8>,
    /// TOS byte (IPv6: traffic class), decimal or 0x hex: 0xb8 is DSCP EF.
    #[arg(short = 'Q', long = "tos", value_parser = values::tos_byte, conflicts_with = "dscp")]
    pub tos: Option<u8>,
    /// DSCP (0-63): the TOS byte's upper six bits (46 is EF, i.e. --tos 0xb8).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..64))]
    pub dscp: Option<u8>,
    /// Send through this interface, or from this address.
    #[arg(short = 'I', long = "interface", value_name = "IFACE|ADDR")]
    pub interface: Option<String>,
    /// Send from this address (as -I ADDR).
    #[arg(long, conflicts_with = "interface")]
    pub bind: Option<std::net::IpAddr>,
    /// Firewall mark of the requests, for policy routing (SO_MARK; iputils' -m).
    #[arg(short = 'm', long = "mark")]
    pub mark: Option<u32>,
    /// Path MTU discovery: do (set DF), dont, want.
    #[arg(short = 'M', value_enum, value_name = "do|dont|want")]
    pub pmtu: Option<PmtuArg>,
    /// Print each reply's arrival time (UNIX seconds) before it.
    #[arg(short = 'D')]
    pub timestamps: bool,
    /// No line per reply: the summary only.
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,
    /// Socket type: dgram needs ping_group_range, raw needs CAP_NET_RAW.
    #[arg(long, value_enum, default_value = "auto")]
    pub socket: SocketArg,
    /// IPv4 only (a name resolves to its IPv4 address).
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// IPv6 only.
    #[arg(short = '6')]
    pub ipv6: bool,
    #[command(flatten)]
    pub out: OutputArgs,
}

pub fn run(a: PingArgs) -> anyhow::Result<()> {
    // iputils: 2 for an error, 1 when nothing came back.
    let received = run_ping(a).map_err(|e| e.context(super::Exit(2)))?;
    if received == 0 {
        return Err(super::Exit(1).into());
    }
    Ok(())
}

fn run_ping(a: PingArgs) -> anyhow::Result<u64> {
    let format = a.out.format()?;
    if a.count == Some(0) {
        bail!("-c must be at least 1");
    }
    if a.timeout.is_zero() {
        bail!("-W must be more than 0");
    }
    let target = super::rr::resolve(&a.host, 0, a.ipv4, a.ipv6)?.ip();
    let mut s = PingSettings::new(target);
    s.count = match (a.count, a.length) {
        (Some(c), _) => Some(c),
        (None, Some(_)) => None,
        (None, None) => Some(5),
    };
    s.duration = a.length;
    s.interval = a.interval;
    s.one_in_flight = a.one_in_flight;
    s.pace = super::rr::PaceArg::mode(a.spin, a.pace);
    s.size = a.size;
    s.timeout = a.timeout;
    s.socket = match a.socket {
        SocketArg::Auto => SocketKind::Auto,
        SocketArg::Dgram => SocketKind::Dgram,
        SocketArg::Raw => SocketKind::Raw,
    };
    s.ttl = a.ttl;
    s.tos = a.tos.or(a.dscp.map(rttlab::probe::path::tos_of_dscp));
    s.mark = a.mark;
    s.source = a.bind;
    match a
        .interface
        .as_deref()
        .map(|i| (i, i.parse::<std::net::IpAddr>()))
    {
        Some((_, Ok(addr))) => s.source = Some(addr),
        Some((name, Err(_))) => s.device = Some(name.to_string()),
        None => {}
    }
    s.pmtu = a.pmtu.map(|m| match m {
        PmtuArg::Do => Pmtu::Do,
        PmtuArg::Dont => Pmtu::Dont,
        PmtuArg::Want => Pmtu::Want,
    });
    s.percentiles = a.out.percentiles()?;
    s.hdr_log = a.out.hdr_log.clone();
    let ctl = Arc::new(PingControl::default());
    let c = Arc::clone(&ctl);
    on_interrupt(move || c.stop.store(true, Ordering::SeqCst));
    // iputils' lines only in the human format: --json and --csv stay pure.
    let lines = matches!(format, OutputFormat::Human { .. });
    let per_reply = lines && !a.quiet;
    let mut stdout = std::io::stdout();
    if lines {
        write!(stdout, "{}", ping_report::iputils_header(&a.host, &s))?;
        stdout.flush()?;
    }
    // The per-reply lines are the progress; without them, a progress line on a TTY.
    let progress = (!per_reply).then(|| {
        let expected = s.duration.or_else(|| {
            s.count
                .map(|n| s.interval * n.min(u64::from(u32::MAX)) as u32)
        });
        let c = Arc::clone(&ctl);
        ProgressLine::start(
            move || c.received.load(Ordering::Relaxed),
            "replies",
            expected,
        )
    });
    let result = ping::run_each(&s, &ctl, &mut |ev| {
        if per_reply {
            let _ = write!(stdout, "{}", ping_report::iputils_reply(ev, a.timestamps));
            let _ = stdout.flush();
        }
    });
    drop(progress);
    let result = result?;
    if lines {
        // rttlab's own block first, iputils' statistics last: scripts read ping's
        // last line (`tail -1 | awk -F/`) and grep its "received" line.
        writeln!(stdout)?;
        output::print(&result, &format)?;
        write!(stdout, "{}", ping_report::iputils_summary(&a.host, &result))?;
    } else {
        output::print(&result, &format)?;
    }
    if let Some(e) = &result.error {
        bail!("{e}");
    }
    Ok(result.received)
}
