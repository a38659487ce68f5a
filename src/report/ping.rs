//! How a ping result is shown.

use super::rr::{summary_header, summary_row};
use super::selectors::{Selectable, Selector, Value};
use super::Report;
use crate::probe::ping::PingResult;
use crate::stats::LogLinear;
use std::fmt::Write as _;

impl Report for PingResult {
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
            "{} sent, {} received, {} lost ({pct:.2} %), {} duplicates, {} reordered, {} corrupted, {:.3} s\n",
            self.sent, self.received, self.lost, self.duplicates, self.reordered, self.corrupted, self.elapsed_s
        );
        let mut t = super::table::Table::new(summary_header("round trip", &self.rtt));
        t.row(summary_row("icmp", &self.rtt));
        out.push_str(&t.render());
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
