//! How a ping result is shown.

use super::selectors::{Selectable, Selector, Value};
use super::Report;
use crate::probe::ping::{PingResult, ReplyEvent};
use crate::stats::LogLinear;
use std::fmt::Write as _;

impl Report for PingResult {
    const SCHEMA: &'static str = crate::results::schema::PING;

    fn human(&self, histogram: bool) -> String {
        let s = &self.settings;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "ICMP echo to {}: {} bytes, interval {} µs ({}), {:?} socket, timeout {} ms, timestamps: {}; kernel {}",
            s.target,
            s.size,
            s.interval_us,
            s.pacing,
            s.socket,
            s.timeout_ms,
            s.timestamps,
            self.local_host.kernel_release
        );
        let pct = if self.sent == 0 {
            0.0
        } else {
            100.0 * self.lost as f64 / self.sent as f64
        };
        let _ = writeln!(
            out,
            "{} sent, {} answered, {} lost ({pct:.2} %), {} duplicates, {} reordered, {} corrupted, {:.3} s\n",
            self.sent, self.received, self.lost, self.duplicates, self.reordered, self.corrupted, self.elapsed_s
        );
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
            Selector::PercentileLatency(p) => f(r.percentile_us(*p).or_else(|| {
                self.histogram
                    .quantile_ns(p.0 / 100.0)
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

/// iputils ping's first line: `PING host (addr) 56(84) bytes of data.` (IPv6: `56 data
/// bytes`).
pub fn iputils_header(host: &str, r: &crate::probe::ping::PingSettings) -> String {
    if r.target.is_ipv6() {
        format!("PING {host} ({}) {} data bytes\n", r.target, r.size)
    } else {
        format!(
            "PING {host} ({}) {}({}) bytes of data.\n",
            r.target,
            r.size,
            r.size + 28
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

/// iputils ping's line for one reply; `-D` puts the arrival time first.
pub fn iputils_reply(ev: &ReplyEvent, timestamp: bool) -> String {
    let mut out = String::new();
    if timestamp {
        let _ = write!(
            out,
            "[{}.{:06}] ",
            ev.received_ns / 1_000_000_000,
            ev.received_ns % 1_000_000_000 / 1000
        );
    }
    let _ = write!(
        out,
        "{} bytes from {}: icmp_seq={}",
        ev.bytes, ev.from, ev.icmp_seq
    );
    if let Some(t) = ev.ttl {
        let _ = write!(out, " ttl={t}");
    }
    let _ = writeln!(out, " time={} ms", iputils_ms(ev.rtt_ns));
    out
}

/// iputils ping's two summary lines, which scripts parse: counts, loss and time, then
/// `rtt min/avg/max/mdev` (mdev: the population standard deviation, as iputils
/// computes it) when anything came back.
pub fn iputils_summary(host: &str, r: &PingResult) -> String {
    let mut out = format!("\n--- {host} ping statistics ---\n");
    let loss = if r.sent == 0 {
        0.0
    } else {
        100.0 * r.lost as f64 / r.sent as f64
    };
    let dups = if r.duplicates > 0 {
        format!(", +{} duplicates", r.duplicates)
    } else {
        String::new()
    };
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
        let _ = writeln!(
            out,
            "rtt min/avg/max/mdev = {}/{}/{}/{} ms",
            truncated_ms(h.min_ns().unwrap_or(0) as f64),
            truncated_ms(h.mean_ns().unwrap_or(0.0)),
            truncated_ms(h.max_ns().unwrap_or(0) as f64),
            truncated_ms(h.stddev_ns().unwrap_or(0.0))
        );
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

/// `%g`-like: 0, 20, 33.3333.
fn trim_float(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        let s = format!("{x:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
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
        };
        assert_eq!(
            iputils_reply(&ev, false),
            "64 bytes from 127.0.0.1: icmp_seq=1 ttl=64 time=0.045 ms\n"
        );
        assert_eq!(
            iputils_reply(&ev, true),
            "[1700000000.123456] 64 bytes from 127.0.0.1: icmp_seq=1 ttl=64 time=0.045 ms\n"
        );
        assert_eq!(iputils_ms(1_234_000), "1.23");
        assert_eq!(iputils_ms(12_345_000), "12.3");
        assert_eq!(iputils_ms(123_456_000), "123");
        assert_eq!(trim_float(100.0 / 3.0), "33.3333");
        assert_eq!(trim_float(20.0), "20");
        // 36.9 µs is 0.036 ms in iputils' summary, as in its reply line.
        assert_eq!(truncated_ms(36_900.0), "0.036");
        assert_eq!(truncated_ms(12_345_678.0), "12.345");
    }
}
