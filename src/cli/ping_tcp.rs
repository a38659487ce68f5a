//! `rttlab ping --tcp PORT HOST`: a TCP handshake per probe ([`tcping`]), printed with
//! tcpping's habits (`seq 1: tcp response from HOST (ADDR) [open]  0.063 ms`, a reset
//! `[closed]`) and iputils' statistics block, whose lines its parsers read.

use super::ping::PingArgs;
use super::progress::on_interrupt;
use anyhow::bail;
use rttlab::probe::tcping::{self, Outcome, SocketOptions, Tally};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a handshake is waited for unless -W says: tcping's two seconds (a SYN lost
/// once is sent again after the kernel's one-second initial RTO, and still counts).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// The flags of ICMP's ping that a handshake has no use for, refused by name.
fn refuse_icmp_only(a: &PingArgs) -> anyhow::Result<()> {
    a.refused.check()?;
    let given = [
        (a.duration.is_some(), "--duration (use -w)"),
        (a.verbose, "-v"),
        (a.socket != super::ping::SocketArg::Auto, "--socket"),
        (a.flood, "-f (a SYN flood is not a measurement)"),
        (a.adaptive, "-A"),
        (a.preload.is_some(), "-l"),
        (a.size != 56, "-s (a handshake carries no payload)"),
        (a.pattern.is_some(), "-p (use --tcp PORT for the port)"),
        (a.pmtu.is_some(), "-M"),
        (a.record_route, "-R"),
        (a.ip_timestamp.is_some(), "-T"),
        (a.ident.is_some(), "-e"),
        (a.user_latency, "-U"),
        (a.outstanding, "-O"),
        (a.sndbuf.is_some(), "-S"),
        (a.report_all.is_some(), "-C"),
        (
            a.one_in_flight,
            "--one-in-flight (one handshake is always alone)",
        ),
        (a.spin, "--spin"),
        (a.pace.is_some(), "--pace"),
        (a.dont_route, "-r"),
        (a.no_multicast_loop, "-L"),
        (a.pin_source, "-B"),
        (a.summary, "--summary"),
        (a.out.json, "--json"),
        (a.out.csv, "--csv"),
        (a.out.output.is_some(), "-o"),
        (a.out.histogram, "--histogram"),
        (a.out.percentiles.is_some(), "--percentiles"),
        (a.out.hdr_log.is_some(), "--hdr-log"),
    ];
    if let Some((_, flag)) = given.iter().find(|(g, _)| *g) {
        bail!("--tcp: {flag} is ICMP ping's only; a TCP ping takes -c, -i, -W, -w, -t, -Q, --dscp, -m, -I, --bind, -4, -6, -n, -q, -D and -a");
    }
    if a.hosts.len() > 1 {
        bail!("--tcp pings one host; run one rttlab ping --tcp per host (or the agent's tcp_connect probe for many)");
    }
    Ok(())
}

/// Run it; true when the port answered open (with -w and -c: -c times).
pub fn run(a: &PingArgs, port: u16) -> anyhow::Result<bool> {
    refuse_icmp_only(a)?;
    if a.count == Some(0) {
        bail!("-c must be at least 1");
    }
    let interval = a.interval.unwrap_or(Duration::from_secs(1));
    if interval < Duration::from_millis(2) && !super::ping::is_root() {
        bail!("-i: only root may probe below a 2 ms interval (as iputils); add -i 0.002 or more");
    }
    let timeout = a.timeout.unwrap_or(DEFAULT_TIMEOUT);
    if timeout.is_zero() {
        bail!("-W must be longer than 0");
    }
    let host = &a.hosts[0];
    // An IPv4-mapped address is the IPv4 host; an IPv6 one keeps its scope (fe80::…%eth0).
    let target = match super::rr::resolve(host, port, a.ipv4, a.ipv6)? {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), port),
            None => SocketAddr::V6(v6),
        },
        v4 => v4,
    };
    let (device, bind) = match &a.interface {
        Some(i) => match i.parse() {
            Ok(ip) => (None, Some(ip)),
            Err(_) => (Some(i.clone()), None),
        },
        None => (None, a.bind),
    };
    let options = SocketOptions {
        ttl: a.ttl,
        tos: a.tos.or(a.dscp.map(|d| d << 2)),
        mark: a.mark,
        device,
        bind,
    };
    // Checked once before the first probe: a refused option is a set-up error (2).
    drop(tcping::socket(target, &options).map_err(|e| {
        anyhow::anyhow!("cannot set up the probing socket: {e} (-m and -I IFACE need CAP_NET_ADMIN or CAP_NET_RAW; --bind and -I ADDR an address of this host)")
    })?);
    let stop = Arc::new(AtomicBool::new(false));
    let s = Arc::clone(&stop);
    on_interrupt(move || s.store(true, Ordering::SeqCst));

    let name = if a.numeric || super::ping::is_numeric(host) {
        target.ip().to_string()
    } else {
        format!("{host} ({})", target.ip())
    };
    let mut out = std::io::stdout();
    writeln!(
        out,
        "TCP PING {name} port {port}: a handshake per probe, then a close"
    )?;
    // -w 0 is no deadline, as iputils. With -w, -c counts ports answered open (the
    // run goes on until then or the deadline); without it, probes sent.
    let deadline = a.deadline.filter(|d| !d.is_zero());
    let done = |tally: &Tally, seq: u64| match (a.count, deadline) {
        (Some(c), Some(_)) => tally.open >= c,
        (Some(c), None) => seq >= c,
        (None, _) => false,
    };
    let start = Instant::now();
    let mut tally = Tally::default();
    let mut seq: u64 = 0;
    let mut next = start;
    loop {
        if stop.load(Ordering::SeqCst)
            || done(&tally, seq)
            || deadline.is_some_and(|d| start.elapsed() >= d)
        {
            break;
        }
        let now = Instant::now();
        if next > now {
            // In slices, so that Ctrl-C and -w end the wait.
            std::thread::sleep((next - now).min(Duration::from_millis(50)));
            continue;
        }
        seq += 1;
        let wait = deadline.map_or(timeout, |d| timeout.min(d.saturating_sub(start.elapsed())));
        let o = match tcping::socket(target, &options) {
            Ok(sock) => tcping::handshake(sock, target, wait.max(Duration::from_millis(1)), &stop),
            Err(e) => Outcome::NotSent(e.to_string()),
        };
        tally.record(&o);
        // On the clock while probes are answered in time; after one that overran it,
        // the next goes at once and the clock starts from there: never a burst of the
        // probes the slow one held back.
        let now = Instant::now();
        next = next.checked_add(interval).unwrap_or(now).max(now);
        if matches!(o, Outcome::Interrupted) {
            break;
        }
        if !a.quiet {
            let stamp = if a.timestamps {
                let t = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default();
                format!("[{}.{:06}] ", t.as_secs(), t.subsec_micros())
            } else {
                String::new()
            };
            let bell = if a.audible && matches!(o, Outcome::Open(_)) {
                "\x07"
            } else {
                ""
            };
            writeln!(out, "{stamp}{}{bell}", line(seq, &name, &o))?;
        }
        // A run of -c ends once its last probe is answered, not an interval later.
        if done(&tally, seq) {
            break;
        }
    }
    let elapsed = start.elapsed();
    write!(out, "{}", statistics(&name, port, &tally, elapsed))?;
    out.flush()?;
    Ok(match (a.count, deadline) {
        (Some(c), Some(_)) => tally.open >= c,
        _ => tally.open > 0,
    })
}

/// One probe's line, tcpping's: `seq 1: tcp response from NAME [open]  0.063 ms`.
fn line(seq: u64, name: &str, o: &Outcome) -> String {
    let ms = |t: &Duration| t.as_secs_f64() * 1e3;
    match o {
        Outcome::Open(t) => format!(
            "seq {seq}: tcp response from {name} [open]  {:.3} ms",
            ms(t)
        ),
        Outcome::Closed(t) => {
            format!(
                "seq {seq}: tcp response from {name} [closed]  {:.3} ms",
                ms(t)
            )
        }
        Outcome::Unreachable(t, why) => {
            format!("seq {seq}: {why} ({name}, after {:.3} ms)", ms(t))
        }
        Outcome::TimedOut => format!("seq {seq}: no response (timeout)"),
        Outcome::NotSent(why) => format!("seq {seq}: not sent: {why}"),
        Outcome::Interrupted => format!("seq {seq}: interrupted"),
    }
}

/// iputils' statistics block: the `received` line (with the resets among the
/// answers and iputils' `+N errors` for unreachables and probes not sent) and the
/// `rtt` line last, so that `tail -1` and ping's parsers read it.
fn statistics(name: &str, port: u16, t: &Tally, elapsed: Duration) -> String {
    let host = name.split(' ').next().unwrap_or(name);
    let mut s = format!("\n--- {host} tcp port {port} ping statistics ---\n");
    s += &format!(
        "{} packets transmitted, {} received",
        t.transmitted,
        t.received()
    );
    if t.closed > 0 {
        s += &format!(" ({} open, {} closed)", t.open, t.closed);
    }
    let errors = t.unreachable + t.not_sent;
    if errors > 0 {
        s += &format!(", +{errors} errors");
    }
    s += &format!(
        ", {}% packet loss, time {}ms\n",
        rttlab::report::ping::trim_float(t.loss_percent()),
        elapsed.as_millis()
    );
    if let Some([min, avg, max, mdev]) = t.stats() {
        s += &format!(
            "rtt min/avg/max/mdev = {:.3}/{:.3}/{:.3}/{:.3} ms\n",
            min * 1e3,
            avg * 1e3,
            max * 1e3,
            mdev * 1e3
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Witness: iputils' statistics lines as it prints them (`%g` loss, ms with three
    /// decimals), written out, for 4 answers in 5 (one a reset) and an unreachable.
    #[test]
    fn the_statistics_read_as_iputils_prints_them() {
        let mut t = Tally::default();
        for o in [
            Outcome::Open(Duration::from_micros(1000)),
            Outcome::Open(Duration::from_micros(3000)),
            Outcome::Closed(Duration::from_micros(2000)),
            Outcome::TimedOut,
            Outcome::Unreachable(Duration::from_micros(500), "No route to host".into()),
            Outcome::Open(Duration::from_micros(2000)),
        ] {
            t.record(&o);
        }
        let s = statistics("db (10.0.0.2)", 5432, &t, Duration::from_millis(5004));
        assert_eq!(
            s,
            "\n--- db tcp port 5432 ping statistics ---\n\
             6 packets transmitted, 4 received (3 open, 1 closed), +1 errors, 33.3333% packet loss, time 5004ms\n\
             rtt min/avg/max/mdev = 1.000/2.000/3.000/0.707 ms\n"
        );
    }
}
