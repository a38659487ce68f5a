//! How sock_diag entries are shown: a table like `ss -ti` but in columns, CSV rows and
//! JSON lines for time series.

use super::table::Table;
use crate::kernel::sock_diag::SockEntry;
use std::time::Duration;

/// Columns of [`csv_line`].
pub const CSV_HEADER: &str = "t_ms,state,local,remote,cc,rtt_us,rttvar_us,min_rtt_us,rto_us,ato_us,retransmits,total_retrans,lost,unacked,cwnd,delivery_rate_bps,busy_us,rwnd_limited_us,sndbuf_limited_us,recv_q,send_q,rmem_alloc,wmem_queued";

fn o<T: ToString>(v: Option<T>) -> String {
    v.map_or(String::new(), |x| x.to_string())
}

/// One CSV row (no trailing comma), with the sample time if it is a series.
pub fn csv_line(t: Option<Duration>, e: &SockEntry) -> String {
    let ti = e.tcp_info.as_ref();
    let cols = [
        t.map_or(String::new(), |t| format!("{:.3}", t.as_secs_f64() * 1e3)),
        e.state.to_owned(),
        e.local.to_string(),
        e.remote.to_string(),
        e.congestion.clone().unwrap_or_default(),
        o(ti.map(|t| t.rtt_us)),
        o(ti.map(|t| t.rttvar_us)),
        o(ti.and_then(|t| t.min_rtt_us)),
        o(ti.map(|t| t.rto_us)),
        o(ti.map(|t| t.ato_us)),
        o(ti.map(|t| t.retransmits)),
        o(ti.map(|t| t.total_retrans)),
        o(ti.map(|t| t.lost)),
        o(ti.map(|t| t.unacked)),
        o(ti.map(|t| t.snd_cwnd)),
        o(ti.and_then(|t| t.delivery_rate).map(|r| r * 8)),
        o(ti.and_then(|t| t.busy_time_us)),
        o(ti.and_then(|t| t.rwnd_limited_us)),
        o(ti.and_then(|t| t.sndbuf_limited_us)),
        e.recv_q.to_string(),
        e.send_q.to_string(),
        o(e.skmem.as_ref().map(|m| m.rmem_alloc)),
        o(e.skmem.as_ref().map(|m| m.wmem_queued)),
    ];
    // Addresses with a comma never occur (IPv6 uses brackets and colons).
    cols.join(",") + "\n"
}

/// One JSON object per line: the schema, `t_ms` in a series, the entry's fields.
pub fn json_line(t: Option<Duration>, e: &SockEntry) -> String {
    #[derive(serde::Serialize)]
    struct Line<'a> {
        schema: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        t_ms: Option<f64>,
        #[serde(flatten)]
        entry: &'a SockEntry,
    }
    let mut s = serde_json::to_string(&Line {
        schema: crate::results::schema::TCPINFO,
        t_ms: t.map(|t| t.as_secs_f64() * 1e3),
        entry: e,
    })
    .unwrap_or_default();
    s.push('\n');
    s
}

/// The human table.
pub fn table(all: &[SockEntry]) -> String {
    let mut t = Table::new([
        "STATE",
        "LOCAL",
        "REMOTE",
        "CC",
        "RTT_us",
        "RTTVAR_us",
        "MIN_RTT_us",
        "RTO_ms",
        "ATO_ms",
        "RETRANS",
        "LOST",
        "UNACKED",
        "CWND",
        "DELIVERY_Mbps",
    ]);
    for e in all {
        let ti = e.tcp_info.as_ref();
        t.row([
            e.state.to_owned(),
            e.local.to_string(),
            e.remote.to_string(),
            e.congestion.clone().unwrap_or_default(),
            o(ti.map(|t| t.rtt_us)),
            o(ti.map(|t| t.rttvar_us)),
            o(ti.and_then(|t| t.min_rtt_us)),
            o(ti.map(|t| format!("{:.1}", f64::from(t.rto_us) / 1e3))),
            o(ti.map(|t| format!("{:.1}", f64::from(t.ato_us) / 1e3))),
            o(ti.map(|t| format!("{}/{}", t.retransmits, t.total_retrans))),
            o(ti.map(|t| t.lost)),
            o(ti.map(|t| t.unacked)),
            o(ti.map(|t| t.snd_cwnd)),
            o(ti.and_then(|t| t.delivery_rate)
                .map(|r| format!("{:.1}", r as f64 * 8.0 / 1e6))),
        ]);
    }
    format!("{} TCP sockets\n{}", all.len(), t.render())
}
