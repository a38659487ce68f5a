//! `rttlab explain`'s table: a window of a service's transactions, each part's
//! percentiles and its share of the response time, then what they say.

use super::table::{one_decimal, wrap, Table, TEXT_WIDTH};
use crate::service::{Summary, PARTS};

/// The table of `s`, a window of `seconds` on local port `port`, with its findings.
pub fn table(port: u16, s: &Summary, seconds: f64) -> String {
    let rate = s.transactions as f64 / seconds.max(1e-9);
    let [p50, p99, max] = s.response_us;
    let mut out = format!(
        "port {port}: {} transaction(s) in {seconds:.1} s ({rate:.0}/s); response P50 {} µs, P99 {} µs, max {} µs{}\n",
        s.transactions,
        one_decimal(p50),
        one_decimal(p99),
        one_decimal(max),
        if s.sampled as u64 == s.transactions {
            String::new()
        } else {
            format!(" (percentiles from a uniform sample of {})", s.sampled)
        }
    );
    if s.transactions == 0 {
        return out;
    }
    let mut t = Table::new(["PART", "P50_us", "P99_us", "SHARE_P50", "SHARE_P99", "WHAT"]);
    let pct = |v: Option<f64>| v.map_or_else(|| "-".into(), |x| format!("{:.0} %", 100.0 * x));
    for p in PARTS {
        let r = s.part(p);
        t.row([
            p.name().to_string(),
            one_decimal(r.p50_us),
            one_decimal(r.p99_us),
            pct(r.share_median),
            pct(r.share_tail),
            p.what().to_string(),
        ]);
    }
    out += &t.render();
    for f in s.findings() {
        out += &wrap(&f, TEXT_WIDTH, "- ", "  ");
        out.push('\n');
    }
    out
}
