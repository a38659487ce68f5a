//! How a ping result is shown.

use super::selectors::{Selectable, Selector, Value};
use super::Report;
use crate::probe::fping::TargetResult;
use crate::probe::ping::{Ignored, PingResult, ReplyEvent, ReplyOptions};
use crate::stats::LogLinear;
use std::fmt::Write as _;
use std::net::IpAddr;

impl Report for PingResult {
    const SCHEMA: &'static str = crate::results::schema::PING;

    fn human(&self, histogram: bool) -> String {
        let s = &self.settings;
        let mut out = String::new();
        // Wrapped at 80 columns with a hanging indent: read at a terminal.
        out.push_str(&super::table::wrap(
            &format!(
                "ICMP echo to {}: {} bytes, interval {} µs ({}), {:?} socket, timeout {} ms, timestamps: {}; kernel {}",
                s.target,
                s.size,
                s.interval_us,
                s.pacing,
                s.socket,
                s.timeout_ms,
                s.timestamps,
                self.local_host.kernel_release
            ),
            super::table::TEXT_WIDTH,
            "",
            "  ",
        ));
        let pct = if self.sent == 0 {
            0.0
        } else {
            100.0 * self.lost as f64 / self.sent as f64
        };
        out.push_str(&super::table::wrap(
            &format!(
                "{} sent, {} answered, {} lost ({pct:.2} %), {} duplicates, {} reordered, {} corrupted, {:.3} s",
                self.sent, self.received, self.lost, self.duplicates, self.reordered, self.corrupted, self.elapsed_s
            ),
            super::table::TEXT_WIDTH,
            "",
            "  ",
        ));
        let ignored: u64 = self.ignored.iter().sum();
        if ignored > 0 {
            let why: Vec<String> = Ignored::ALL
                .iter()
                .zip(self.ignored)
                .filter(|(_, n)| *n > 0)
                .map(|(why, n)| format!("{n} {}", why.name()))
                .collect();
            out.push_str(&super::table::wrap(
                &format!(
                    "ignored {ignored} datagrams not about this run's requests: {}",
                    why.join(", ")
                ),
                super::table::TEXT_WIDTH,
                "",
                "  ",
            ));
        }
        out.push('\n');
        out.push_str(&super::summary_table("icmp", &self.rtt));
        if histogram {
            out.push('\n');
            out.push_str(&LogLinear::from_histogram(&self.histogram).render());
        }
        if let Some(e) = &self.error {
            let _ = writeln!(out, "\nrun cut short: {e}");
        }
        out
    }
}

impl Selectable for PingResult {
    const KIND: &'static str = "ping results";

    fn select(&self, s: &Selector) -> Option<Value> {
        let r = &self.rtt;
        let f = |v: Option<f64>| v.map_or(Value::Text(String::new()), Value::Float);
        Some(match s {
            Selector::MinLatency => f(r.min_us),
            Selector::MaxLatency => f(r.max_us),
            Selector::MeanLatency | Selector::RtLatency => f(r.mean_us),
            Selector::StddevLatency => f(r.stddev_us),
            Selector::PercentileLatency(p) => f(r.percentile_us(*p).unwrap_or_else(|| {
                self.histogram
                    .resolved_quantile_ns(p.0 / 100.0)
                    .map(|v| v as f64 / 1e3)
            })),
            Selector::ElapsedTime => Value::Float(self.elapsed_s),
            Selector::Test => Value::Text("ICMP_ECHO".into()),
            Selector::Protocol => Value::Text(
                if self.settings.target.is_ipv4() {
                    "ICMP"
                } else {
                    "ICMPv6"
                }
                .into(),
            ),
            Selector::RequestSize | Selector::ResponseSize => Value::Int(self.settings.size as u64),
            Selector::IntervalUs => Value::Float(self.settings.interval_us),
            Selector::Pacing => Value::Text(self.settings.pacing.into()),
            Selector::Transactions | Selector::Received => Value::Int(self.received),
            Selector::Sent => Value::Int(self.sent),
            Selector::LostTransactions => Value::Int(self.lost),
            Selector::Duplicates => Value::Int(self.duplicates),
            Selector::Reordered => Value::Int(self.reordered),
            Selector::KernelRelease => Value::Text(self.local_host.kernel_release.clone()),
            Selector::RemoteHost => Value::Text(self.settings.target.to_string()),
            _ => return None,
        })
    }

    fn all_selectors() -> Vec<Selector> {
        use Selector::*;
        vec![
            Test,
            Protocol,
            RequestSize,
            IntervalUs,
            Pacing,
            ElapsedTime,
            Sent,
            Received,
            LostTransactions,
            Duplicates,
            Reordered,
        ]
        .into_iter()
        .chain(super::selectors::latency_selectors())
        .chain([KernelRelease, RemoteHost])
        .collect()
    }
}

/// iputils ping's first line: `PING host (addr) 56(84) bytes of data.`; IPv6: `PING
/// host(addr) 56 data bytes`, where `shown` is the address, or `name (address)` for a
/// target given by name (ping6_common.c prints `pr_addr` there, without the space).
///
/// `from`: the source address when one was chosen (-I, -B), with the interface's name
/// when -I named one, which iputils puts before the sizes (`from 10.0.0.1 eth0: `).
pub fn iputils_header(
    host: &str,
    shown: &str,
    from: Option<IpAddr>,
    r: &crate::probe::ping::PingSettings,
) -> String {
    let from = from.map_or(String::new(), |a| {
        format!("from {a} {}: ", r.device.as_deref().unwrap_or(""))
    });
    if r.target.is_ipv6() {
        format!("PING {host}({shown}) {from}{} data bytes\n", r.size)
    } else {
        format!(
            "PING {host} ({}) {from}{}({}) bytes of data.\n",
            r.target,
            r.size,
            r.size + 28 + if r.ip_option.is_some() { 40 } else { 0 }
        )
    }
}

/// iputils' time of a reply: three significant decimals below 1 ms … none from 100 ms
/// (`ping_common.c`, the `triptime` formats).
fn iputils_ms(rtt_ns: u64) -> String {
    let us = rtt_ns / 1000;
    if us >= 100_000 - 50 {
        format!("{}", (us + 500) / 1000)
    } else if us >= 10_000 - 5 {
        format!("{:.1}", us as f64 / 1e3)
    } else if us >= 1000 {
        format!("{:.2}", us as f64 / 1e3)
    } else {
        format!("{:.3}", us as f64 / 1e3)
    }
}

/// ping -D's prefix: `[1700000000.123456] `, UNIX seconds to the µs.
fn stamp(ns: u64) -> String {
    format!("[{}.{:06}] ", ns / 1_000_000_000, ns % 1_000_000_000 / 1000)
}

/// What iputils' flags add to a reply line.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReplyStyle {
    /// `-D`: the arrival time first.
    pub timestamp: bool,
    /// `-v`: the echo identifier after the sequence number.
    pub ident: bool,
    /// `-a`: a bell before the line's end.
    pub audible: bool,
}

/// iputils ping's line for one reply; `from` is how the sender is named (the address,
/// or `name (address)` when the target was given as a name, as iputils without -n).
pub fn iputils_reply(ev: &ReplyEvent, style: ReplyStyle, from: &str) -> String {
    let mut out = if style.timestamp {
        stamp(ev.received_ns)
    } else {
        String::new()
    };
    let _ = write!(
        out,
        "{} bytes from {from}: icmp_seq={}",
        ev.bytes, ev.icmp_seq
    );
    if style.ident {
        let _ = write!(out, " ident={}", ev.ident);
    }
    if let Some(t) = ev.ttl {
        let _ = write!(out, " ttl={t}");
    }
    let _ = write!(out, " time={} ms", iputils_ms(ev.rtt_ns));
    if ev.duplicate {
        out.push_str(" (DUP!)");
    }
    if style.audible {
        out.push('\u{7}');
    }
    out.push('\n');
    out
}

/// What iputils prints of a reply's IPv4 options (ping.c's `pr_options`), to go
/// between the reply's time and its newline: `\nRR: \t10.0.0.1\n\t…\n` (the
/// addresses, then the blank line that follows), or `\t(same route)` when the route is
/// the one printed last (`last_route`); timestamps as `\nTS: \t84682273 absolute\n\t0…`,
/// each after the first as its difference from the one before. `name` shows an
/// address as the reply lines do.
pub fn iputils_options(
    o: &ReplyOptions,
    last_route: &mut Vec<u8>,
    name: &mut dyn FnMut(IpAddr) -> String,
) -> String {
    let b = &o.bytes[..usize::from(o.len)];
    let mut out = String::new();
    let addr = |c: &[u8]| IpAddr::from([c[0], c[1], c[2], c[3]]);
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            0 => break,
            1 => {
                i += 1;
                continue;
            }
            _ => {}
        }
        let (Some(&len), Some(&ptr)) = (b.get(i + 1), b.get(i + 2)) else {
            break;
        };
        let len = usize::from(len).max(2);
        let end = (i + len).min(b.len());
        match b[i] {
            7 => {
                let n = usize::from(ptr.min(len as u8)).saturating_sub(4);
                let route = b.get(i + 3..(i + 3 + n).min(end)).unwrap_or(&[]);
                if route.len() >= 4 {
                    if route == last_route.as_slice() {
                        out.push_str("\t(same route)");
                    } else {
                        *last_route = route.to_vec();
                        let hops: Vec<String> = route
                            .chunks_exact(4)
                            .map(|c| format!("\t{}", name(addr(c))))
                            .collect();
                        let _ = write!(out, "\nRR: {}\n", hops.join("\n"));
                    }
                }
            }
            68 => {
                let n = usize::from(ptr.min(len as u8)).saturating_sub(5);
                let flags = b.get(i + 3).copied().unwrap_or(0);
                let with_addr = flags & 0xf != 0;
                let step = if with_addr { 8 } else { 4 };
                // iputils reads whole entries while any of the pointer's bytes remain
                // (a full tsandaddr option points one past its 36 bytes: 31 → 4 pairs).
                let n = n.div_ceil(step) * step;
                let data = b.get(i + 4..(i + 4 + n).min(end)).unwrap_or(&[]);
                let (mut std_t, mut nonstd_t) = (0u32, 0u32);
                let mut items = Vec::new();
                for c in data.chunks_exact(step) {
                    let mut item = String::new();
                    let t = if with_addr {
                        let _ = write!(item, "\t{}", name(addr(c)));
                        &c[4..8]
                    } else {
                        &c[..4]
                    };
                    let l = u32::from_be_bytes([t[0], t[1], t[2], t[3]]);
                    if l & 0x8000_0000 != 0 {
                        let v = l & 0x7fff_ffff;
                        if nonstd_t == 0 {
                            let _ = write!(item, "\t{v} absolute not-standard");
                        } else {
                            let _ = write!(
                                item,
                                "\t{} not-standard",
                                i64::from(v) - i64::from(nonstd_t)
                            );
                        }
                        nonstd_t = v;
                    } else {
                        if std_t == 0 {
                            let _ = write!(item, "\t{l} absolute");
                        } else {
                            let _ = write!(item, "\t{}", i64::from(l) - i64::from(std_t));
                        }
                        std_t = l;
                    }
                    items.push(item);
                }
                if !items.is_empty() {
                    let _ = write!(out, "\nTS: {}\n", items.join("\n"));
                    if flags >> 4 != 0 {
                        let _ = writeln!(out, "Unrecorded hops: {}", flags >> 4);
                    }
                }
            }
            _ => {}
        }
        i += len;
    }
    out
}

/// ping -p's line before the first: `PATTERN: 0x` and the bytes in hex.
pub fn iputils_pattern(pad: &[u8]) -> String {
    let hex: String = pad.iter().map(|b| format!("{b:02x}")).collect();
    format!("PATTERN: 0x{hex}\n")
}

/// iputils' line for an ICMP error a request drew: `From 10.0.0.1 icmp_seq=3
/// Destination Host Unreachable`.
pub fn iputils_error(from: IpAddr, icmp_seq: u16, what: &str, timestamp_ns: Option<u64>) -> String {
    let mut out = timestamp_ns.map_or(String::new(), stamp);
    let _ = writeln!(out, "From {from} icmp_seq={icmp_seq} {what}");
    out
}

/// ping -O's line when a request goes out before the last one was answered.
pub fn iputils_no_answer(icmp_seq: u16, timestamp_ns: Option<u64>) -> String {
    let mut out = timestamp_ns.map_or(String::new(), stamp);
    let _ = writeln!(out, "no answer yet for icmp_seq={icmp_seq}");
    out
}

/// iputils ping's two summary lines, which scripts parse: counts, loss and time, then
/// `rtt min/avg/max/mdev` (mdev: the population standard deviation, as iputils
/// computes it) when anything came back.
///
/// `ipg_ewma`: the run sent without waiting an interval (-i 0, -f, -A), so the rtt line
/// ends with the mean gap between requests and the smoothed round trip, as iputils'
/// (`, ipg/ewma 0.033/0.010 ms`); `, pipe N` comes whenever more than one request was
/// in flight at a reply.
pub fn iputils_summary(host: &str, r: &PingResult, ipg_ewma: bool) -> String {
    let mut out = format!("\n--- {host} ping statistics ---\n");
    let loss = if r.sent == 0 {
        0.0
    } else {
        100.0 * r.lost as f64 / r.sent as f64
    };
    let mut dups = if r.duplicates > 0 {
        format!(", +{} duplicates", r.duplicates)
    } else {
        String::new()
    };
    if r.errors > 0 {
        let _ = write!(dups, ", +{} errors", r.errors);
    }
    let _ = writeln!(
        out,
        "{} packets transmitted, {} received{dups}, {}% packet loss, time {}ms",
        r.sent,
        r.received,
        trim_float(loss),
        (r.elapsed_s * 1e3).round()
    );
    if r.received > 0 {
        let h = &r.histogram;
        let _ = write!(
            out,
            "rtt min/avg/max/mdev = {}/{}/{}/{} ms",
            truncated_ms(h.min_ns().unwrap_or(0) as f64),
            truncated_ms(h.mean_ns().unwrap_or(0.0)),
            truncated_ms(h.max_ns().unwrap_or(0) as f64),
            truncated_ms(h.stddev_ns().unwrap_or(0.0))
        );
        if r.pipe > 1 {
            let _ = write!(out, ", pipe {}", r.pipe);
        }
        if ipg_ewma && r.sent > 1 {
            let ipg_us = (r.elapsed_s * 1e6) as u64 / (r.sent - 1);
            let ewma_us = r.ewma_us8 / 8;
            let _ = write!(
                out,
                ", ipg/ewma {}.{:03}/{}.{:03} ms",
                ipg_us / 1000,
                ipg_us % 1000,
                ewma_us / 1000,
                ewma_us % 1000
            );
        }
        out.push('\n');
    } else {
        // iputils ends the block with a blank line when nothing came back.
        out.push('\n');
    }
    out
}

/// Milliseconds with three decimals, cut at the µs as iputils' summary does
/// (`%ld.%03ld` of whole µs, ping_common.c), so the summary's min never reads above the
/// smallest reply's time.
fn truncated_ms(ns: f64) -> String {
    let us = (ns / 1e3).floor().max(0.0) as u64;
    format!("{}.{:03}", us / 1000, us % 1000)
}

/// `%g`-like: 0, 20, 33.3333 (iputils' loss).
pub fn trim_float(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        let s = format!("{x:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// fping's time in ms: three decimals below 1 ms, two below 10, one below 100, none
/// above (fping's `sprint_tm`).
pub fn fping_ms(ns: u64) -> String {
    let t = ns as f64 / 1e6;
    if t < 1.0 {
        format!("{t:.3}")
    } else if t < 10.0 {
        format!("{t:.2}")
    } else if t < 100.0 {
        format!("{t:.1}")
    } else {
        format!("{t:.0}")
    }
}

/// A target's name padded to the longest, as fping lines its targets up.
pub fn fping_name(name: &str, width: usize) -> String {
    format!("{name:<width$}")
}

/// fping -c/-C's line for one reply: `host : [0], 64 bytes, 0.045 ms (0.045 avg, 0% loss)`
/// (the average and loss of that target so far).
pub fn fping_reply(name: &str, index: u64, bytes: usize, rtt_ns: u64, r: &TargetResult) -> String {
    let (_, avg, _) = r.min_avg_max_ns().unwrap_or((0, rtt_ns, 0));
    let loss = (r.sent - r.received().min(r.sent)) * 100 / r.sent.max(1);
    format!(
        "{name} : [{index}], {bytes} bytes, {} ms ({} avg, {loss}% loss)\n",
        fping_ms(rtt_ns),
        fping_ms(avg)
    )
}

/// fping -c's summary of a target: `host : xmt/rcv/%loss = 3/3/0%, min/avg/max = …`.
pub fn fping_counts(name: &str, r: &TargetResult) -> String {
    let rcv = r.received();
    let loss = (r.sent - rcv.min(r.sent)) * 100 / r.sent.max(1);
    let mut out = format!("{name} : xmt/rcv/%loss = {}/{rcv}/{loss}%", r.sent);
    if let Some((min, avg, max)) = r.min_avg_max_ns() {
        let _ = write!(
            out,
            ", min/avg/max = {}/{}/{}",
            fping_ms(min),
            fping_ms(avg),
            fping_ms(max)
        );
    }
    out.push('\n');
    out
}

/// fping -C's summary of a target: every round trip, `-` for a request lost.
pub fn fping_all(name: &str, r: &TargetResult) -> String {
    let mut out = format!("{name} :");
    for t in &r.rtts_ns {
        match t {
            Some(ns) => {
                let _ = write!(out, " {}", fping_ms(*ns));
            }
            None => out.push_str(" -"),
        }
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Witness: iputils ping's output on this machine (`ping -c 1 127.0.0.1`, `ping -D`).
    #[test]
    fn reply_lines_are_iputils_lines() {
        let ev = ReplyEvent {
            bytes: 64,
            from: "127.0.0.1".parse().unwrap(),
            icmp_seq: 1,
            ttl: Some(64),
            rtt_ns: 45_400,
            received_ns: 1_700_000_000_123_456_789,
            ident: 77,
            duplicate: false,
            options: None,
        };
        let plain = ReplyStyle::default();
        assert_eq!(
            iputils_reply(&ev, plain, "127.0.0.1"),
            "64 bytes from 127.0.0.1: icmp_seq=1 ttl=64 time=0.045 ms\n"
        );
        let d = ReplyStyle {
            timestamp: true,
            ..plain
        };
        assert_eq!(
            iputils_reply(&ev, d, "127.0.0.1"),
            "[1700000000.123456] 64 bytes from 127.0.0.1: icmp_seq=1 ttl=64 time=0.045 ms\n"
        );
        // `ping -e 77 -v -a -c 1 127.0.0.1`, through od -c: ident after icmp_seq, the
        // bell before the newline.
        let va = ReplyStyle {
            ident: true,
            audible: true,
            ..plain
        };
        assert_eq!(
            iputils_reply(&ev, va, "localhost (127.0.0.1)"),
            "64 bytes from localhost (127.0.0.1): icmp_seq=1 ident=77 ttl=64 time=0.045 ms\u{7}\n"
        );
        assert_eq!(iputils_pattern(&[0xab, 0xcd]), "PATTERN: 0xabcd\n");
        // `ping -R -c 2 127.0.0.1` and `ping -T tsonly`, through cat -A: the route,
        // then "(same route)"; the first stamp absolute, the rest differences.
        let mut rr = [0u8; 40];
        rr[..4].copy_from_slice(&[1, 7, 39, 20]);
        for k in 0..4 {
            rr[4 + 4 * k..8 + 4 * k].copy_from_slice(&[127, 0, 0, 1]);
        }
        let o = ReplyOptions { len: 40, bytes: rr };
        let (mut last, mut name) = (Vec::new(), |a: IpAddr| a.to_string());
        assert_eq!(
            iputils_options(&o, &mut last, &mut name),
            "\nRR: \t127.0.0.1\n\t127.0.0.1\n\t127.0.0.1\n\t127.0.0.1\n"
        );
        assert_eq!(iputils_options(&o, &mut last, &mut name), "\t(same route)");
        let mut ts = [0u8; 40];
        ts[..4].copy_from_slice(&[68, 40, 21, 0]);
        ts[4..8].copy_from_slice(&84_682_273u32.to_be_bytes());
        ts[8..12].copy_from_slice(&84_682_273u32.to_be_bytes());
        ts[12..16].copy_from_slice(&84_682_275u32.to_be_bytes());
        ts[16..20].copy_from_slice(&84_682_275u32.to_be_bytes());
        let o = ReplyOptions { len: 40, bytes: ts };
        assert_eq!(
            iputils_options(&o, &mut last, &mut name),
            "\nTS: \t84682273 absolute\n\t0\n\t2\n\t0\n"
        );
        let dup = ReplyEvent {
            duplicate: true,
            ..ev
        };
        assert_eq!(
            iputils_reply(&dup, plain, "127.0.0.1"),
            "64 bytes from 127.0.0.1: icmp_seq=1 ttl=64 time=0.045 ms (DUP!)\n"
        );
        assert_eq!(iputils_no_answer(3, None), "no answer yet for icmp_seq=3\n");
        assert_eq!(iputils_ms(1_234_000), "1.23");
        assert_eq!(iputils_ms(12_345_000), "12.3");
        assert_eq!(iputils_ms(123_456_000), "123");
        assert_eq!(trim_float(100.0 / 3.0), "33.3333");
        assert_eq!(trim_float(20.0), "20");
        // 36.9 µs is 0.036 ms in iputils' summary, as in its reply line.
        assert_eq!(truncated_ms(36_900.0), "0.036");
        assert_eq!(truncated_ms(12_345_678.0), "12.345");
    }

    /// Witness: fping 5.1's lines on this machine (`fping -c 3 -p 200 127.0.0.1 ::1`,
    /// `fping -C 3 -q`), the numbers put in by hand.
    #[test]
    fn fping_lines_are_fping_lines() {
        let r = TargetResult {
            sent: 3,
            rtts_ns: vec![Some(19_400), None, Some(43_000)],
        };
        let name = fping_name("::1", 9);
        assert_eq!(name, "::1      ");
        assert_eq!(
            fping_reply(&name, 2, 64, 43_000, &r),
            "::1       : [2], 64 bytes, 0.043 ms (0.031 avg, 33% loss)\n"
        );
        assert_eq!(
            fping_counts(&name, &r),
            "::1       : xmt/rcv/%loss = 3/2/33%, min/avg/max = 0.019/0.031/0.043\n"
        );
        assert_eq!(fping_all(&name, &r), "::1       : 0.019 - 0.043\n");
        let none = TargetResult {
            sent: 2,
            rtts_ns: vec![None, None],
        };
        assert_eq!(fping_counts("h", &none), "h : xmt/rcv/%loss = 2/0/100%\n");
        assert_eq!(fping_ms(1_234_567), "1.23");
        assert_eq!(fping_ms(12_345_678), "12.3");
        assert_eq!(fping_ms(123_456_789), "123");
    }
}
