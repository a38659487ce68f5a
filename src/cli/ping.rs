//! `rttlab ping`.

use super::output::{self, OutputArgs};
use super::progress::{on_interrupt, ProgressLine};
use super::values;
use anyhow::bail;
use clap::{Args, ValueEnum};
use rttlab::probe::fping::{self, FpingEvent, FpingSettings};
use rttlab::probe::ping::{self, IpOption, PingControl, PingEvent, PingSettings, Pmtu, SocketKind};
use rttlab::report::ping as ping_report;
use rttlab::report::OutputFormat;
use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
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
As iputils ping: a line per reply (-q: none), rttlab's percentiles, then the
`--- host ping statistics ---` block with its two summary lines last
(`N packets transmitted, …` and `rtt min/avg/max/mdev = …`): `tail -1` is the
rtt line. Bare numbers for -i, -W and -w are seconds, as in iputils.

Several targets are probed in one loop as fping does: a line per reply
(`A : [0], 64 bytes, 0.045 ms (…)`), then per target `xmt/rcv/%loss = …` (-c)
or every round trip (-C) on stderr; without -c or -C, `A is alive` or
`A is unreachable`.

Exit status: 0 when a reply came back (several targets: from every one); 1
when none did (with -w and -c: fewer than -c; several targets: one never
answered); 2 on a usage or set-up error (a bad flag or value, a host that does
not resolve, a missing privilege).

Examples:
  rttlab ping 127.0.0.1
      an echo a second until Ctrl-C, as iputils
  rttlab ping -c 100 -i 0.2 --summary 127.0.0.1
      and rttlab's counts and percentiles before iputils' statistics
  rttlab ping -c 3 -i 0.2 -w 5 127.0.0.1
      until 3 replies are in, for at most 5 s
  rttlab ping ::1 -c 1000 -i 1ms --histogram
  rttlab ping 127.0.0.1 -i 0.2 -c 10 -t 3 -Q 0xb8 -M do
  rttlab ping 127.0.0.1 -A --duration 2
      the next echo once the last reply is in, for 2 s
  rttlab ping -C 3 -q 127.0.0.1 ::1
      fping's per-target round trips
  rttlab ping 127.0.0.1 -i 100us --spin -c 10000 -o P50_LATENCY,P99_LATENCY
  rttlab ping --tcp 443 -c 5 example.internal
      a TCP handshake a second to port 443, tcpping's lines (`[open]`, a
      reset `[closed]`); exit 0 once the port answered open")]
pub struct PingArgs {
    /// Ping a TCP port instead: a handshake per probe (SYN → SYN/ACK, or the host's
    /// reset), then a close, no payload; to any host, through firewalls that drop
    /// ICMP (tcpping's and hping3 -S's measurement). Default -W 2.
    #[arg(long = "tcp", value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    pub tcp: Option<u16>,
    /// Host(s) to ping (IPv4 or IPv6); several are probed in one loop, as fping.
    #[arg(value_name = "HOST", required = true, num_args = 1..)]
    pub hosts: Vec<String>,
    /// Number of echo requests (without it, or --duration or -w, until interrupted, as
    /// iputils; several targets: per target, with fping's output).
    #[arg(short = 'c', long = "count")]
    pub count: Option<u64>,
    /// fping's -C: this many requests per target, then every round trip per target.
    #[arg(
        short = 'C',
        long = "report-all",
        value_name = "N",
        conflicts_with = "count"
    )]
    pub report_all: Option<u64>,
    /// Stop sending after this long (a bare number is seconds), then wait for the
    /// replies still due.
    #[arg(long = "duration", alias = "length", value_name = "DURATION", value_parser = values::seconds)]
    pub duration: Option<Duration>,
    /// iputils' deadline: end the run this long after the start, whatever is
    /// outstanding; with -c, send until -c replies are in (a bare number is seconds).
    #[arg(short = 'w', long = "deadline", value_name = "DEADLINE", value_parser = values::seconds)]
    pub deadline: Option<Duration>,
    /// Send this many requests back to back at the start, not waiting for replies
    /// (at most 3 unless root, as iputils).
    #[arg(short = 'l', long = "preload", value_name = "N")]
    pub preload: Option<u64>,
    /// Interval between requests (a bare number is seconds, as in iputils: -i 0.2); 0
    /// sends the next as soon as the last reply is in.
    #[arg(short = 'i', long = "interval", value_parser = values::seconds, allow_negative_numbers = true)]
    pub interval: Option<Duration>,
    /// Keep one request in flight: send the next once the last is answered and the
    /// interval since it has passed (netperf TCP_RR's -w pacing); the last request
    /// too waits for its reply up to -W.
    #[arg(long)]
    pub one_in_flight: bool,
    /// iputils' adaptive ping: the next request once the last is answered (or timed
    /// out), no sooner than 200 ms after the last one unless root.
    #[arg(short = 'A', long = "adaptive", conflicts_with = "flood")]
    pub adaptive: bool,
    /// iputils' flood: no interval unless -i is given (root only below 2 ms), the next
    /// request once the last is answered or after 10 ms; a dot per request sent, a
    /// backspace per reply.
    #[arg(short = 'f', long = "flood")]
    pub flood: bool,
    /// Busy-wait between requests (for sub-millisecond intervals).
    #[arg(long, conflicts_with = "pace")]
    pub spin: bool,
    /// sleep, spin or hybrid (sleep, then spin the last 200 µs).
    #[arg(long, value_enum)]
    pub pace: Option<super::rr::PaceArg>,
    /// ICMP payload bytes.
    #[arg(short = 's', long = "size", default_value_t = 56)]
    pub size: usize,
    /// Fill the payload with these bytes repeated, up to 16 in hex (-p ff: all ones).
    #[arg(short = 'p', long = "pattern", value_name = "HEX", value_parser = pad_pattern)]
    pub pattern: Option<Pad>,
    /// A request without a reply after this is lost (a bare number is seconds; 0 waits
    /// for ever, as iputils).
    /// (Default 2 s; several targets: fping's, 500 ms alive, else the period up to 2 s.)
    #[arg(short = 'W', long = "timeout", value_parser = values::seconds, allow_negative_numbers = true)]
    pub timeout: Option<Duration>,
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
    /// Keep the source address the kernel picks at the start, whatever the routes do
    /// later (iputils' -B).
    #[arg(short = 'B', long = "pin-source")]
    pub pin_source: bool,
    /// Firewall mark of the requests, for policy routing (SO_MARK; iputils' -m).
    #[arg(short = 'm', long = "mark")]
    pub mark: Option<u32>,
    /// Path MTU discovery: do (set DF), dont, want.
    #[arg(short = 'M', value_enum, value_name = "do|dont|want")]
    pub pmtu: Option<PmtuArg>,
    /// The socket's send buffer, bytes (SO_SNDBUF).
    #[arg(short = 'S', long = "sndbuf", value_name = "BYTES")]
    pub sndbuf: Option<usize>,
    /// Only to a host on an attached network, bypassing the routing table
    /// (SO_DONTROUTE).
    #[arg(short = 'r', long = "dont-route")]
    pub dont_route: bool,
    /// Do not loop multicast requests back to this host.
    #[arg(short = 'L', long = "no-multicast-loop")]
    pub no_multicast_loop: bool,
    /// The echo identifier (a datagram socket binds it as its port; 0 is refused there).
    #[arg(short = 'e', long = "ident")]
    pub ident: Option<u16>,
    /// Time each reply when rttlab reads it, the wake-up included (iputils' "user to
    /// user" latency), not by the kernel's receive stamp.
    #[arg(short = 'U', long = "user-latency")]
    pub user_latency: bool,
    /// Print each reply's arrival time (UNIX seconds) before it.
    #[arg(short = 'D')]
    pub timestamps: bool,
    /// Print "no answer yet for icmp_seq=N" when a request goes before the last is
    /// answered.
    #[arg(short = 'O', long = "outstanding")]
    pub outstanding: bool,
    /// Ring the terminal's bell on each reply.
    #[arg(short = 'a', long = "audible")]
    pub audible: bool,
    /// Verbose: each reply's echo identifier.
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
    /// IPv4: record the route in each request (the RR option, nine hops at most; many
    /// routers drop or ignore it). Needs a raw socket (CAP_NET_RAW).
    #[arg(short = 'R', long = "record-route", conflicts_with = "ip_timestamp")]
    pub record_route: bool,
    /// IPv4: the timestamp option, `tsonly` or `tsandaddr` (iputils' `tsprespec`,
    /// which names the hops, is not taken). Needs a raw socket (CAP_NET_RAW).
    #[arg(short = 'T', long = "ip-timestamp", value_name = "tsonly|tsandaddr", value_parser = ip_timestamp)]
    pub ip_timestamp: Option<IpOption>,
    /// Numeric output only: rttlab never looks a reply's address up when -n is given
    /// (without it, a target given by name is shown as `name (address)`, as iputils).
    #[arg(short = 'n', long = "numeric")]
    pub numeric: bool,
    /// No line per reply: the summary only.
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,
    /// rttlab's own summary before iputils' statistics: the settings, every count
    /// (duplicates, reordered, corrupted) and the percentile table (-o, --percentiles
    /// and --histogram ask for it too).
    #[arg(long)]
    pub summary: bool,
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
    pub refused: RefusedArgs,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// iputils flags rttlab does not do: taken so that the refusal can say why and what to
/// use instead, not "unexpected argument".
#[derive(Args, Debug)]
pub struct RefusedArgs {
    /// (iputils' broadcast ping: refused, list the hosts instead.)
    #[arg(short = 'b', hide = true)]
    broadcast: bool,
    /// (iputils' ICMPv6 node information query: refused.)
    #[arg(short = 'N', hide = true, value_name = "OPTION")]
    node_info: Option<String>,
    /// (iputils' IPv6 flow label: refused.)
    #[arg(short = 'F', hide = true, value_name = "LABEL")]
    flow_label: Option<String>,
    /// (iputils' SO_DEBUG: refused.)
    #[arg(short = 'd', hide = true)]
    debug: bool,
}

impl RefusedArgs {
    /// The first refused flag given, as one line: what it is and what to use instead.
    pub(super) fn check(&self) -> anyhow::Result<()> {
        if self.broadcast {
            bail!("-b: rttlab does not ping broadcast addresses (one request, many repliers, no round trip per host): list the hosts, `rttlab ping A B C`");
        }
        if self.node_info.is_some() {
            bail!("-N: rttlab sends echo requests only, not ICMPv6 node information queries; use iputils' `ping -N`");
        }
        if self.flow_label.is_some() {
            bail!("-F: rttlab does not set IPv6 flow labels; use iputils' `ping -F`");
        }
        if self.debug {
            bail!("-d: SO_DEBUG does nothing on Linux sockets, and rttlab does not set it");
        }
        Ok(())
    }
}

/// ping -T's option.
fn ip_timestamp(s: &str) -> Result<IpOption, String> {
    match s {
        "tsonly" => Ok(IpOption::Timestamps),
        "tsandaddr" => Ok(IpOption::TimestampsAndAddresses),
        "tsprespec" => Err("tsprespec (timestamps from hops named in advance) is not taken: use tsandaddr, or iputils' ping -T tsprespec".into()),
        _ => Err(format!("{s:?}: tsonly or tsandaddr")),
    }
}

/// ping -p's pattern: up to 16 bytes in hex (`ff`, `abcd`; an odd digit count takes a
/// leading 0, as iputils' sscanf of `%2x` pairs would not, so it is refused).
fn pad_pattern(s: &str) -> Result<Pad, String> {
    let h = s.strip_prefix("0x").unwrap_or(s);
    if h.is_empty() || h.len() % 2 != 0 || h.len() > 32 || !h.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return Err(format!(
            "{s:?} is not a pattern: 1 to 16 bytes in hex, e.g. ff or 0a1b"
        ));
    }
    Ok(Pad((0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).expect("checked hex"))
        .collect()))
}

/// ping -p's bytes (a type of its own: clap reads a bare `Vec` as many values).
#[derive(Clone, Debug)]
pub struct Pad(Vec<u8>);

pub(super) fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

pub fn run(a: PingArgs, stage: &super::Stage) -> anyhow::Result<()> {
    // iputils: 2 for an error (before anything was measured, as every subcommand), 1
    // when nothing (or, with -w and -c, too little) came back; fping: 1 when some
    // target never answered.
    let all_answered = if let Some(port) = a.tcp {
        super::ping_tcp::run(&a, port)
    } else if a.hosts.len() > 1 || a.report_all.is_some() {
        run_fping(a, stage)
    } else {
        run_ping(a, stage)
    }?;
    if !all_answered {
        return Err(super::Exit(1).into());
    }
    Ok(())
}

/// The settings every form shares, checked as iputils checks them.
fn check_common(a: &PingArgs) -> anyhow::Result<()> {
    a.refused.check()?;
    if a.count == Some(0) || a.report_all == Some(0) {
        bail!("-c must be at least 1");
    }
    if a.preload == Some(0) {
        bail!("-l 0: the preload is 1 or more requests (as iputils)");
    }
    if let Some(p) = a.preload {
        if p > 3 && !is_root() {
            bail!("-l {p}: only root may preload more than 3 (as iputils)");
        }
    }
    if a.flood && !is_root() && a.interval.is_none_or(|i| i < Duration::from_millis(2)) {
        bail!("-f: only root may flood below a 2 ms interval (as iputils); add -i 0.002 or more");
    }
    if a.ident == Some(0) && a.socket == SocketArg::Dgram {
        bail!("-e 0: a datagram socket's identifier is its port, never 0; use --socket raw (needs CAP_NET_RAW)");
    }
    Ok(())
}

/// One target, iputils' output. True when the replies asked for came back.
fn run_ping(a: PingArgs, stage: &super::Stage) -> anyhow::Result<bool> {
    let format = a.out.format()?;
    check_common(&a)?;
    let host = &a.hosts[0];
    // An IPv4-mapped IPv6 address is the IPv4 host: ICMP, not ICMPv6 towards ::ffff:….
    let target = super::rr::resolve(host, 0, a.ipv4, a.ipv6)?
        .ip()
        .to_canonical();
    let s = ping_settings(&a, target)?;
    let ctl = Arc::new(PingControl::default());
    let c = Arc::clone(&ctl);
    on_interrupt(move || c.stop.store(true, Ordering::SeqCst));
    // iputils' lines only in the human format: --json and --csv stay pure.
    let lines = matches!(format, OutputFormat::Human { .. });
    let flood_marks = lines && a.flood && !a.quiet;
    let per_reply = lines && !a.quiet && !a.flood;
    // iputils names a target given by name as `name (address)` unless -n.
    let named = !a.numeric && !is_numeric(host);
    let names = ReplyNames::new(named);
    let mut stdout = std::io::stdout();
    // The per-reply lines are the progress; without them, a progress line on a TTY.
    let progress = (!per_reply && !flood_marks).then(|| {
        let expected = s.duration.or(s.deadline).or_else(|| {
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
    let mut printer = EventLines {
        a: &a,
        host,
        s: &s,
        names,
        last_route: Vec::new(),
        lines,
        flood_marks,
        per_reply,
    };
    let result = ping::run_each(&s, &ctl, &mut |ev| {
        if let Some(text) = printer.text(ev) {
            let _ = stdout.write_all(text.as_bytes());
            let _ = stdout.flush();
        }
    });
    drop(progress);
    let result = result?;
    stage.measuring();
    if lines {
        // iputils' lines alone unless rttlab's own block is asked for; then it goes
        // first and iputils' statistics last: scripts read ping's last line
        // (`tail -1 | awk -F/`) and grep its "received" line.
        if a.summary || a.out.asks_for_tables() {
            writeln!(stdout)?;
            output::print(&result, &format)?;
        }
        let ipg_ewma = s.interval.is_zero() || a.flood || a.adaptive;
        write!(
            stdout,
            "{}",
            ping_report::iputils_summary(host, &result, ipg_ewma)
        )?;
    } else {
        output::print(&result, &format)?;
    }
    if let Some(e) = &result.error {
        bail!("{e}");
    }
    // iputils: with -w and -c, fewer than -c replies is a failure too.
    let enough = match (a.deadline, a.count) {
        (Some(_), Some(c)) => result.received >= c,
        _ => result.received > 0,
    };
    Ok(enough)
}

/// What `a` asks of one target's probe loop, with iputils' defaults and rules.
fn ping_settings(a: &PingArgs, target: std::net::IpAddr) -> anyhow::Result<PingSettings> {
    let mut s = PingSettings::new(target);
    s.count = match (a.count, a.duration, a.deadline) {
        (Some(c), _, _) => Some(c),
        (None, _, _) => None,
    };
    s.duration = a.duration;
    // iputils: -w 0 is no deadline.
    s.deadline = a.deadline.filter(|d| !d.is_zero());
    s.preload = a.preload.unwrap_or(0);
    // -f and -A choose no interval unless -i does; -A waits for each reply, as does a
    // zero interval.
    s.interval = match (a.interval, a.flood || a.adaptive) {
        (Some(i), _) => i,
        (None, true) => Duration::ZERO,
        (None, false) => Duration::from_secs(1),
    };
    if a.adaptive {
        s.one_in_flight = true;
        if !is_root() {
            s.interval = s.interval.max(Duration::from_millis(200));
        }
    }
    s.one_in_flight |= a.one_in_flight;
    s.short_wait = a.flood || (a.adaptive && is_root());
    s.pace = super::rr::PaceArg::mode(a.spin, a.pace);
    s.size = a.size;
    s.pad = a.pattern.clone().map(|p| p.0).unwrap_or_default();
    s.timeout = wait_for_reply(a.timeout.unwrap_or(Duration::from_secs(2)));
    s.socket = match a.socket {
        SocketArg::Auto if a.ident == Some(0) => SocketKind::Raw,
        SocketArg::Auto => SocketKind::Auto,
        SocketArg::Dgram => SocketKind::Dgram,
        SocketArg::Raw => SocketKind::Raw,
    };
    s.ttl = a.ttl;
    s.tos = a.tos.or(a.dscp.map(rttlab::probe::path::tos_of_dscp));
    s.mark = a.mark;
    s.source = a.bind;
    s.pin_source = a.pin_source;
    s.sndbuf = a.sndbuf;
    s.dont_route = a.dont_route;
    s.no_multicast_loop = a.no_multicast_loop;
    s.ident = a.ident;
    s.user_latency = a.user_latency;
    s.ip_option = a
        .ip_timestamp
        .or(a.record_route.then_some(IpOption::RecordRoute));
    if s.ip_option.is_some() && target.is_ipv6() {
        // iputils pings an IPv6 target without them, as "ping only" options.
        eprintln!("rttlab: note: -R and -T are IPv4 options; {target} is pinged without them");
        s.ip_option = None;
    }
    if s.ip_option.is_some() {
        // The options come back in the reply's IP header, which a raw socket hands over.
        if a.socket == SocketArg::Dgram {
            bail!("-R and -T read the reply's IP header: use --socket raw (or auto)");
        }
        s.socket = SocketKind::Raw;
    }
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
    Ok(s)
}

/// -W as iputils reads it: 0 waits for ever (a day here, past any run's end).
fn wait_for_reply(w: Duration) -> Duration {
    if w.is_zero() {
        Duration::from_secs(86_400)
    } else {
        w
    }
}

/// A target written as an address (inet_aton's forms too: `127.1`, `0x7f000001`), which
/// iputils never looks up by name.
pub(super) fn is_numeric(host: &str) -> bool {
    if host.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    // inet_aton(3): one to four parts split by dots, each decimal, 0x hex or 0 octal.
    let part = |p: &str| {
        let (digits, radix) = match p.strip_prefix("0x").or_else(|| p.strip_prefix("0X")) {
            Some(h) => (h, 16),
            None if p.len() > 1 && p.starts_with('0') => (&p[1..], 8),
            None => (p, 10),
        };
        !digits.is_empty() && u32::from_str_radix(digits, radix).is_ok()
    };
    let parts: Vec<&str> = host.split('.').collect();
    parts.len() <= 4 && parts.iter().all(|p| part(p))
}

/// What iputils prints before the first reply: -p's pattern, then `PING host (addr) …`.
fn top_lines(a: &PingArgs, host: &str, s: &PingSettings, names: &mut ReplyNames) -> String {
    let mut out = String::new();
    if let Some(p) = &a.pattern {
        out.push_str(&ping_report::iputils_pattern(&p.0));
    }
    // Looked up only where printed: IPv6's header and reply lines.
    let shown = if s.target.is_ipv6() {
        names.shown(s.target)
    } else {
        s.target.to_string()
    };
    let from = ping::chosen_source(s);
    out.push_str(&ping_report::iputils_header(host, &shown, from, s));
    out
}

/// The lines iputils prints as a run goes: the header, flood's marks, each reply,
/// error and (with -O) unanswered request.
struct EventLines<'a> {
    a: &'a PingArgs,
    host: &'a str,
    s: &'a PingSettings,
    names: ReplyNames,
    /// -R: the option bytes of the route last printed (iputils prints a repeated
    /// one as "(same route)").
    last_route: Vec<u8>,
    /// iputils' lines at all (the human format).
    lines: bool,
    /// -f: a dot per request, a backspace per reply.
    flood_marks: bool,
    /// A line per reply and error (neither -q nor -f).
    per_reply: bool,
}

impl EventLines<'_> {
    /// The text `ev` prints, if any.
    fn text(&mut self, ev: &PingEvent) -> Option<String> {
        let a = self.a;
        let stamp = || a.timestamps.then(rttlab::kernel::realtime_ns);
        Some(match ev {
            PingEvent::Ready if self.lines => top_lines(a, self.host, self.s, &mut self.names),
            PingEvent::Sending { .. } if self.flood_marks => ".".to_string(),
            PingEvent::Sending {
                unanswered: Some(seq),
                ..
            } if self.per_reply && a.outstanding => ping_report::iputils_no_answer(*seq, stamp()),
            PingEvent::Reply(_) if self.flood_marks => "\u{8} \u{8}".to_string(),
            PingEvent::Error {
                from,
                icmp_seq,
                what,
            } if self.per_reply => ping_report::iputils_error(*from, *icmp_seq, what, stamp()),
            PingEvent::Reply(r) if self.per_reply => {
                let style = ping_report::ReplyStyle {
                    timestamp: a.timestamps,
                    ident: a.verbose,
                    audible: a.audible,
                };
                let line = ping_report::iputils_reply(r, style, &self.names.shown(r.from));
                match &r.options {
                    // -R/-T: what the hops wrote goes after the time, as iputils.
                    Some(o) => {
                        let names = &mut self.names;
                        let opts =
                            ping_report::iputils_options(o, &mut self.last_route, &mut |a| {
                                names.shown(a)
                            });
                        format!("{}{opts}\n", line.trim_end_matches('\n'))
                    }
                    None => line,
                }
            }
            _ => return None,
        })
    }
}

/// How reply lines name their sender: the address, or `name (address)` with the name
/// the address looks up to (once per address), as iputils does for a target it was
/// given by name.
struct ReplyNames {
    named: bool,
    seen: std::collections::HashMap<std::net::IpAddr, String>,
}

impl ReplyNames {
    fn new(named: bool) -> Self {
        Self {
            named,
            seen: std::collections::HashMap::new(),
        }
    }

    fn shown(&mut self, addr: std::net::IpAddr) -> String {
        if !self.named {
            return addr.to_string();
        }
        self.seen
            .entry(addr)
            .or_insert_with(|| match dns_lookup::lookup_addr(&addr) {
                Ok(name) if name != addr.to_string() => format!("{name} ({addr})"),
                _ => addr.to_string(),
            })
            .clone()
    }
}

/// The settings several targets take (fping's), the others refused by name.
fn check_fping(a: &PingArgs) -> anyhow::Result<()> {
    check_common(a)?;
    if !matches!(
        a.out.format()?,
        OutputFormat::Human {
            histogram: false,
            ..
        }
    ) {
        bail!("--json, --csv, -o and --histogram take one target; run one rttlab ping per target");
    }
    for (flag, given) in [
        ("-w", a.deadline.is_some()),
        ("--duration", a.duration.is_some()),
        ("-l", a.preload.is_some()),
        ("-f", a.flood),
        ("-A", a.adaptive),
        ("-p", a.pattern.is_some()),
        ("-t", a.ttl.is_some()),
        ("-Q", a.tos.is_some() || a.dscp.is_some()),
        ("-I", a.interface.is_some() || a.bind.is_some()),
        ("-m", a.mark.is_some()),
        ("-M", a.pmtu.is_some()),
        ("-e", a.ident.is_some()),
        ("-U", a.user_latency),
        ("-D", a.timestamps),
        ("-O", a.outstanding),
        ("-R", a.record_route),
        ("-T", a.ip_timestamp.is_some()),
        ("--hdr-log", a.out.hdr_log.is_some()),
    ] {
        if given {
            bail!("{flag} takes one target; run one rttlab ping per target (several targets: -c, -C, -i, -s, -W, -q)");
        }
    }
    Ok(())
}

/// What `a` asks of fping's loop over `targets`, with fping's timeouts.
fn fping_settings(a: &PingArgs, targets: Vec<std::net::IpAddr>) -> FpingSettings {
    FpingSettings {
        targets,
        count: a.report_all.or(a.count),
        period: a.interval.unwrap_or(Duration::from_secs(1)),
        // fping's: 500 ms for "is it alive", else the period up to 2 s.
        timeout: wait_for_reply(a.timeout.unwrap_or(if a.report_all.or(a.count).is_none() {
            Duration::from_millis(500)
        } else {
            a.interval
                .unwrap_or(Duration::from_secs(1))
                .min(Duration::from_secs(2))
        })),
        size: a.size,
    }
}

/// fping's lines after the run: alive mode's unreachable targets on stdout, or each
/// target's counts (-c) or every round trip (-C) on stderr.
fn fping_end(
    a: &PingArgs,
    s: &FpingSettings,
    hosts: &[&str],
    names: &[String],
    results: &[fping::TargetResult],
) -> std::io::Result<()> {
    let mut stdout = std::io::stdout();
    let mut stderr = std::io::stderr();
    match s.count {
        None if a.quiet => {}
        None => {
            for (name, r) in hosts.iter().zip(results) {
                if r.received() == 0 {
                    writeln!(stdout, "{name} is unreachable")?;
                }
            }
        }
        Some(_) => {
            stdout.flush()?;
            if !a.quiet {
                writeln!(stderr)?;
            }
            for (name, r) in names.iter().zip(results) {
                let line = if a.report_all.is_some() {
                    ping_report::fping_all(name, r)
                } else {
                    ping_report::fping_counts(name, r)
                };
                write!(stderr, "{line}")?;
            }
        }
    }
    Ok(())
}

/// Several targets (or -C), fping's output. True when every target answered.
fn run_fping(a: PingArgs, stage: &super::Stage) -> anyhow::Result<bool> {
    check_fping(&a)?;
    // As fping: a name that does not resolve is named on stderr, the others are
    // probed, and the status is 2 at the end.
    let mut hosts = Vec::new();
    let mut targets = Vec::new();
    for h in &a.hosts {
        match super::rr::resolve(h, 0, a.ipv4, a.ipv6) {
            Ok(addr) => {
                hosts.push(h.as_str());
                targets.push(addr.ip().to_canonical());
            }
            Err(e) => eprintln!("rttlab: {}", rttlab::error_chain(&*e)),
        }
    }
    let unresolved = hosts.len() < a.hosts.len();
    if targets.is_empty() {
        bail!("no target resolves");
    }
    let width = hosts.iter().map(|h| h.chars().count()).max().unwrap_or(0);
    let names: Vec<String> = hosts
        .iter()
        .map(|h| ping_report::fping_name(h, width))
        .collect();
    let s = fping_settings(&a, targets);
    let ctl = Arc::new(PingControl::default());
    let c = Arc::clone(&ctl);
    on_interrupt(move || c.stop.store(true, Ordering::SeqCst));
    let per_reply = s.count.is_some() && !a.quiet;
    // Each reply's line needs its target's average and loss so far.
    let mut so_far = vec![fping::TargetResult::default(); s.targets.len()];
    let mut stdout = std::io::stdout();
    let results = fping::run(&s, &ctl, &mut |ev| {
        let FpingEvent::Reply {
            target,
            index,
            rtt_ns,
            bytes,
        } = *ev;
        let r = &mut so_far[target];
        while r.rtts_ns.len() as u64 <= index {
            r.rtts_ns.push(None);
        }
        r.rtts_ns[index as usize] = Some(rtt_ns);
        r.sent = r.sent.max(index + 1);
        if per_reply {
            let _ = write!(
                stdout,
                "{}",
                ping_report::fping_reply(&names[target], index, bytes, rtt_ns, r)
            );
            let _ = stdout.flush();
        }
        // Alive: said as soon as the first reply is in, as fping does.
        if s.count.is_none() && !a.quiet && r.received() == 1 {
            let _ = writeln!(stdout, "{} is alive", hosts[target]);
            let _ = stdout.flush();
        }
    })?;
    stage.measuring();
    fping_end(&a, &s, &hosts, &names, &results)?;
    if unresolved {
        return Err(super::Exit(2).into());
    }
    Ok(results.iter().all(|r| r.received() > 0))
}
