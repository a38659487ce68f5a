//! `rttlab explain`'s table: a window of a service's transactions, each part's
//! percentiles and its share of the response time, then what they say; and its JSON
//! line of one transaction.

use super::table::{one_decimal, wrap, Table, TEXT_WIDTH};
use crate::service::{Part, Summary, Transaction, PARTS};

/// The table of `s`, a window of `seconds` on local port `port`, with its findings.
pub fn table(port: u16, s: &Summary, seconds: f64) -> String {
    let rate = s.transactions as f64 / seconds.max(1e-9);
    let [p50, p99, max] = s.response_us;
    let mut out = format!(
        "port {port}: {} transaction(s) in {seconds:.1} s ({}/s); response P50 {} µs, P99 {} µs, max {} µs{}\n",
        s.transactions,
        // Whole numbers hide a slow rate: 0.4/s is not 0/s.
        if rate < 10.0 { format!("{rate:.1}") } else { format!("{rate:.0}") },
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

/// A transaction as `--json` prints it, keys in this order.
#[derive(serde::Serialize)]
struct Line {
    time_ns: u64,
    port: u16,
    connection: u64,
    client: Option<String>,
    request_bytes: u32,
    request_segments: u32,
    response_bytes: u32,
    response_us: f64,
    arrival_us: Option<f64>,
    wait_us: Option<f64>,
    think_us: Option<f64>,
    write_us: Option<f64>,
    network_us: Option<f64>,
    srtt_us: u32,
    retransmissions: u32,
    rto_retransmits: u64,
    tail_loss_probes: u64,
    fast_retransmits: u64,
    pipelined: bool,
    unacked: bool,
    ack_on_next_request: bool,
}

/// One line of `--json` (`rttlab.explain-transaction/1`): times in µs, `null`
/// where not seen; `realtime_offset_ns` turns the start into the epoch's time.
pub fn json_line(t: &Transaction, realtime_offset_ns: u64) -> String {
    let us = |ns: u64| ns as f64 / 1e3;
    let part = |p: Part| t.part(p).map(us);
    let line = Line {
        time_ns: t.start_ns + realtime_offset_ns,
        port: t.port,
        connection: t.connection,
        client: t.client.map(|c| c.to_string()),
        request_bytes: t.request_bytes,
        request_segments: t.request_segments,
        response_bytes: t.response_bytes,
        response_us: us(t.response_ns),
        arrival_us: part(Part::Arrival),
        wait_us: part(Part::Wait),
        think_us: part(Part::Think),
        write_us: part(Part::Write),
        network_us: part(Part::Network),
        srtt_us: t.srtt_us,
        retransmissions: t.retransmissions,
        rto_retransmits: t.retransmitted_by.rto,
        tail_loss_probes: t.retransmitted_by.tlp,
        fast_retransmits: t.retransmitted_by.fast,
        pipelined: t.pipelined,
        unacked: t.unacked,
        ack_on_next_request: t.ack_on_request,
    };
    crate::results::schema::line(crate::results::schema::EXPLAIN_TRANSACTION, &line)
        .expect("a struct serialises as an object")
}
