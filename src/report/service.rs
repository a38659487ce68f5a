//! `rttlab explain`'s table: a window of a service's transactions, each part's
//! percentiles and its share of the response time, then what they say; and its JSON
//! line of one transaction.

use super::table::{one_decimal, wrap, Table, TEXT_WIDTH};
use crate::service::{Part, Side, Summary, Transaction};

/// The table of `s`, a window of `seconds` of the server's port `port` (on this host,
/// or its clients here), with its findings.
pub fn table(port: u16, s: &Summary, seconds: f64) -> String {
    let rate = s.transactions as f64 / seconds.max(1e-9);
    let [p50, p99, max] = s.response_us;
    let mut out = format!(
        "{}port {port}: {} transaction(s) in {seconds:.1} s ({}/s); response P50 {} µs, P99 {} µs, max {} µs{}\n",
        match s.side {
            Side::Server => "",
            Side::Client => "to ",
        },
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
    for r in &s.parts {
        t.row([
            r.part.name().to_string(),
            one_decimal(r.p50_us),
            one_decimal(r.p99_us),
            pct(r.share_median),
            pct(r.share_tail),
            r.part.what(s.side).to_string(),
        ]);
    }
    out += &t.render();
    for f in s.findings() {
        out += &wrap(&f, TEXT_WIDTH, "- ", "  ");
        out.push('\n');
    }
    out
}

/// The connection's figures every line ends with.
#[derive(serde::Serialize)]
struct Tcp {
    srtt_us: u32,
    min_rtt_us: u32,
    retransmissions: u32,
    rto_retransmits: u64,
    tail_loss_probes: u64,
    fast_retransmits: u64,
}

/// A server's transaction as `--json` prints it, keys in this order.
#[derive(serde::Serialize)]
struct ServerLine {
    time_ns: u64,
    side: &'static str,
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
    #[serde(flatten)]
    tcp: Tcp,
    pipelined: bool,
    unacked: bool,
    ack_on_next_request: bool,
}

/// A client's transaction as `--json` prints it, keys in this order.
#[derive(serde::Serialize)]
struct ClientLine {
    time_ns: u64,
    side: &'static str,
    port: u16,
    connection: u64,
    server: Option<String>,
    client_port: u16,
    request_bytes: u32,
    response_bytes: u32,
    response_segments: u32,
    response_us: f64,
    write_us: Option<f64>,
    send_us: Option<f64>,
    server_us: Option<f64>,
    arrival_us: Option<f64>,
    wait_us: Option<f64>,
    #[serde(flatten)]
    tcp: Tcp,
}

/// One line of `--json` (`rttlab.explain-transaction/2`): times in µs, `null`
/// where not seen; `realtime_offset_ns` turns the start into the epoch's time.
pub fn json_line(t: &Transaction, realtime_offset_ns: u64) -> String {
    use crate::results::schema::{line, EXPLAIN_TRANSACTION};
    let us = |ns: u64| ns as f64 / 1e3;
    let part = |p: Part| t.part(p).map(us);
    let time_ns = t.start_ns + realtime_offset_ns;
    let peer = t.peer.map(|c| c.to_string());
    let tcp = Tcp {
        srtt_us: t.srtt_us,
        min_rtt_us: t.min_rtt_us,
        retransmissions: t.retransmissions,
        rto_retransmits: t.retransmitted_by.rto,
        tail_loss_probes: t.retransmitted_by.tlp,
        fast_retransmits: t.retransmitted_by.fast,
    };
    let written = match t.side {
        Side::Server => line(
            EXPLAIN_TRANSACTION,
            &ServerLine {
                time_ns,
                side: t.side.name(),
                port: t.port,
                connection: t.connection,
                client: peer,
                request_bytes: t.request_bytes,
                request_segments: t.segments_in,
                response_bytes: t.response_bytes,
                response_us: us(t.response_ns),
                arrival_us: part(Part::Arrival),
                wait_us: part(Part::Wait),
                think_us: part(Part::Think),
                write_us: part(Part::Write),
                network_us: part(Part::Network),
                tcp,
                pipelined: t.pipelined,
                unacked: t.unacked,
                ack_on_next_request: t.ack_on_request,
            },
        ),
        Side::Client => line(
            EXPLAIN_TRANSACTION,
            &ClientLine {
                time_ns,
                side: t.side.name(),
                port: t.port,
                connection: t.connection,
                server: peer,
                client_port: t.local_port,
                request_bytes: t.request_bytes,
                response_bytes: t.response_bytes,
                response_segments: t.segments_in,
                response_us: us(t.response_ns),
                write_us: part(Part::Write),
                send_us: part(Part::Send),
                server_us: part(Part::Server),
                arrival_us: part(Part::Arrival),
                wait_us: part(Part::Wait),
                tcp,
            },
        ),
    };
    written.expect("a struct serialises as an object")
}
