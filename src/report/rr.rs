//! How an rr result is shown.

use super::selectors::{Selectable, Selector, Value};
use super::table::{us, Table};
use super::Report;
use crate::kernel::cpu::Placement;
use crate::kernel::tcp_info::TcpInfo;
use crate::probe::rr::RrResult;
use crate::stats::{LogLinear, Percentile, Summary};
use std::fmt::Write as _;

fn cpus(p: &Placement) -> String {
    let ran: Vec<String> = p.ran_on_cpus.iter().map(ToString::to_string).collect();
    let ran = if ran.is_empty() {
        "?".into()
    } else {
        ran.join("+")
    };
    match p.pinned_cpu {
        Some(c) => format!("pinned to CPU {c}, ran on {ran}"),
        None if p.ran_on_cpus.len() > 1 => {
            format!("unpinned, ran on CPUs {ran} ({} moves)", p.migrations)
        }
        None => format!("unpinned, ran on CPU {ran}"),
    }
}

/// A line of prose, wrapped at 80 columns with a hanging indent (read at a terminal).
fn prose(out: &mut String, text: &str) {
    out.push_str(&super::table::wrap(
        text,
        super::table::TEXT_WIDTH,
        "",
        "  ",
    ));
}

/// One summary as a table row, in the column order every rttlab table with these
/// statistics uses: SAMPLES, MIN, the percentiles, MAX, MEAN, STDDEV.
pub(super) fn summary_row(name: &str, s: &Summary) -> Vec<String> {
    let mut r = vec![name.to_owned(), s.samples.to_string(), us(s.min_us)];
    r.extend(
        s.percentiles_us
            .iter()
            .map(|&(p, v)| super::table::percentile_cell(v, p.0 / 100.0, s.samples, us)),
    );
    r.push(us(s.max_us));
    r.push(us(s.mean_us));
    r.push(us(s.stddev_us));
    r
}

/// Column names matching [`summary_row`]: upper case, no spaces, the unit once after
/// the first column's name (`RTT_us`: every statistic in the row is µs), so that nine
/// statistics fit 80 columns; percentiles with their dot (`P99.9`, `P99.99`).
pub(super) fn summary_header(first: &str, s: &Summary) -> Vec<String> {
    let mut h = vec![format!("{first}_us"), "SAMPLES".into(), "MIN".into()];
    h.extend(s.percentiles_us.iter().map(|(p, _)| format!("P{}", p.0)));
    h.push("MAX".into());
    h.push("MEAN".into());
    h.push("STDDEV".into());
    h
}

fn tcp_row(who: &str, t: &TcpInfo) -> Vec<String> {
    vec![
        who.to_owned(),
        t.rtt_us.to_string(),
        t.rttvar_us.to_string(),
        t.min_rtt_us.map_or("-".into(), |v| v.to_string()),
        format!("{:.1}", f64::from(t.rto_us) / 1e3),
        format!("{:.1}", f64::from(t.ato_us) / 1e3),
        t.total_retrans.to_string(),
        t.lost.to_string(),
    ]
}

/// netperf's `-I` report: the interval reached, and netperf's own warning when it is
/// wider than asked (scripts grep for "!!! WARNING").
fn confidence(out: &mut String, c: &crate::probe::rr::Confidence) {
    let _ = writeln!(
        out,
        "{}% confidence: {:.1} transactions/s ±{:.1}% (asked ±{:.1}%) over {} iterations \
         ({}..{}); the table below is the last iteration's\n",
        c.level_percent,
        c.throughput_tps_mean,
        c.width_percent / 2.0,
        c.width_percent_asked / 2.0,
        c.throughput_tps.len(),
        c.min_iterations,
        c.max_iterations,
    );
    if !c.met {
        let _ = writeln!(
            out,
            "!!! WARNING\n!!! Desired confidence was not achieved within the specified iterations.\n\
             !!! This implies that there was variability in the test environment that\n\
             !!! must be investigated before going further.\n\
             !!! Confidence intervals: Throughput      : {:.1}%\n",
            c.width_percent
        );
    }
}

impl RrResult {
    /// The human output's first lines: what was run, between which ends, where each
    /// ran (netperf's banner, which `-P 0` leaves out).
    fn banner(&self) -> String {
        let s = &self.settings;
        let mut out = String::new();
        let limit = match (s.duration_limit_s, s.count_limit) {
            (_, Some(n)) => format!("{n} transactions"),
            (Some(d), None) => format!("{d} s"),
            (None, None) => "unbounded".into(),
        };
        let interval = if s.interval_us == 0.0 {
            "none".into()
        } else {
            format!("{} µs ({})", s.interval_us, s.pacing)
        };
        // Each line wrapped at 80 columns with a hanging indent: read at a terminal.
        let mut line = |text: String| {
            out.push_str(&super::table::wrap(
                &text,
                super::table::TEXT_WIDTH,
                "",
                "  ",
            ));
        };
        line(format!(
            "{} -r {},{} from {} to {} (data port {}), {} stream{}, wait {interval}, burst {}, {limit}{}",
            s.test,
            s.request_size,
            s.response_size,
            s.local_data_addr.map_or("?".into(), |a| a.ip().to_string()),
            s.server,
            s.remote_data_port,
            s.streams,
            if s.streams == 1 { "" } else { "s" },
            s.burst,
            self.brand.as_ref().map_or(String::new(), |b| format!(" [{b}]")),
        ));
        if let Some(ol) = &s.open_loop {
            line(format!(
                "open loop: {:.0} requests/s per stream, {} schedule, at most {} outstanding",
                ol.rate_per_s,
                ol.schedule.name(),
                ol.max_outstanding
            ));
        }
        let remote_kernel = self
            .remote_host
            .as_ref()
            .map_or("?".into(), |h| h.kernel_release.clone());
        line(format!(
            "client: {}, kernel {}",
            cpus(&self.local_placement),
            self.local_host.kernel_release,
        ));
        line(format!(
            "server: {}, kernel {}{}",
            self.remote_placement.as_ref().map_or("?".into(), cpus),
            remote_kernel,
            s.congestion
                .as_ref()
                .map_or(String::new(), |c| format!("; congestion control {c}")),
        ));
        out
    }

    /// Everything in the human output below [`RrResult::banner`].
    fn body(&self, histogram: bool) -> String {
        let mut out = String::new();
        prose(
            &mut out,
            &format!(
                "{} transactions in {:.3} s: {:.1} transactions/s{}",
                self.transactions,
                self.elapsed_s,
                self.throughput_tps,
                self.client_cpu_us_per_transaction
                    .map_or(String::new(), |c| format!(
                        ", client CPU {c:.2} µs/transaction"
                    )),
            ),
        );
        out.push('\n');
        if let Some(c) = &self.confidence {
            confidence(&mut out, c);
        }
        let mut t = Table::new(summary_header("RTT", &self.latency));
        t.row(summary_row("transaction", &self.latency));
        if let Some(c) = &self.connect {
            t.row(summary_row("connect", c));
        }
        if let Some(ol) = &self.open_loop {
            t.row(summary_row("from_intended", &ol.response_time));
        }
        if let Some(p) = &self.pacing_error {
            t.row(summary_row("pacing_error", p));
        }
        if let Some(w) = &self.one_way {
            t.row(summary_row("send_delay", &w.request));
            t.row(summary_row("receive_delay", &w.response));
            t.row(summary_row("server_processing", &w.server_processing));
            t.row(summary_row("rtt_irtt", &w.rtt_less_server));
            t.row(summary_row("ipdv_send", &w.ipdv_request));
            t.row(summary_row("ipdv_receive", &w.ipdv_response));
        }
        out.push_str(&t.render());
        if self.pacing_error.is_some() {
            prose(&mut out, "(\"pacing error\" is how late each request after a wait left: intended time → just before send)");
        }
        if let Some(ol) = &self.open_loop {
            prose(&mut out, &format!("(\"transaction\" is send → response; \"from intended\" is scheduled send → response, which slow replies cannot hide; {} unanswered, {} sends > 1 ms late)", ol.unanswered, ol.late_sends));
        }
        if let Some(w) = &self.one_way {
            one_way(&mut out, w);
        }
        if let Some(u) = &self.udp {
            let sent = self.transactions + u.lost;
            let pct = if sent == 0 {
                0.0
            } else {
                100.0 * u.lost as f64 / sent as f64
            };
            prose(&mut out, &format!(
                "UDP: {} lost ({pct:.2} %: no reply while the client ran), {} late replies (after their timeout: counted as transactions, not lost), {} stray datagrams, {} dropped by the server on request",
                u.lost, u.late_replies, u.stray_replies, u.dropped_by_server
            ));
        }
        if let Some(a) = &self.anatomy {
            anatomy(&mut out, a, self.udp.as_ref());
        }
        if !self.local_tcp_info.is_empty() || !self.remote_tcp_info.is_empty() {
            out.push_str("\nTCP's own view at the end (tcp_info):\n");
            let mut k = Table::new([
                "SOCKET",
                "RTT_us",
                "RTTVAR_us",
                "MIN_RTT_us",
                "RTO_ms",
                "ATO_ms",
                "RETRANS",
                "LOST",
            ]);
            for (i, ti) in self.local_tcp_info.iter().enumerate() {
                k.row(tcp_row(&format!("client_{i}"), ti));
            }
            for (i, ti) in self.remote_tcp_info.iter().enumerate() {
                k.row(tcp_row(&format!("server_{i}"), ti));
            }
            out.push_str(&k.render());
            if let (Some(c), Some(s)) = (self.local_tcp_info.first(), self.remote_tcp_info.first())
            {
                prose(
                    &mut out,
                    &super::explain::server_srtt(
                        f64::from(c.rtt_us),
                        f64::from(s.rtt_us),
                        self.settings.interval_us,
                        "-w",
                    ),
                );
            }
        }
        if !self.tcpinfo_series.is_empty() {
            let rtts: Vec<u32> = self.tcpinfo_series.iter().map(|x| x.info.rtt_us).collect();
            let _ = writeln!(
                out,
                "tcp_info sampled {} times: client srtt {}–{} µs (series in --json)",
                rtts.len(),
                rtts.iter().min().unwrap_or(&0),
                rtts.iter().max().unwrap_or(&0)
            );
        }
        if histogram {
            out.push('\n');
            out.push_str(&LogLinear::from_histogram(&self.histogram).render());
        }
        let moved = self.local_placement.moved()
            || self.remote_placement.as_ref().is_some_and(Placement::moved);
        if moved {
            out.push('\n');
            prose(&mut out, "warning: an unpinned end moved between CPUs; on small VMs a round trip across vCPUs costs far more than on one (pin both ends with -T LCPU,RCPU)");
        }
        if let Some(e) = &self.error {
            out.push('\n');
            prose(
                &mut out,
                &format!("run cut short: {e} (the numbers above are what was measured before)"),
            );
        }
        out
    }
}

impl Report for RrResult {
    const SCHEMA: &'static str = crate::results::schema::RR;

    fn human(&self, histogram: bool) -> String {
        self.banner() + &self.body(histogram)
    }

    fn human_without_banner(&self, histogram: bool) -> String {
        self.body(histogram)
    }

    /// netperf's banner above its omni output, in its shape: the protocol's test name,
    /// each end's data address, port and family, then the interval, burst, CPU binding
    /// and confidence asked for, each after ` : ` (netperf's own names the addresses it
    /// asked for, 0.0.0.0 port 0; ours the ones the data connection had).
    fn netperf_banner(&self) -> Option<String> {
        let s = &self.settings;
        let family = |a: &std::net::SocketAddr| if a.is_ipv4() { "AF_INET" } else { "AF_INET6" };
        let name = match s.test {
            "TCP_CRR" => "TCP Connect/Request/Response",
            "UDP_RR" => "UDP REQUEST/RESPONSE",
            _ => "TCP REQUEST/RESPONSE",
        };
        let from = s.local_data_addr.map_or("? port 0 ?".into(), |a| {
            format!("{} port {} {}", a.ip(), a.port(), family(&a))
        });
        let mut line = format!(
            "rttlab {name} TEST from {from} to {} port {} {}",
            s.server.ip(),
            s.remote_data_port,
            family(&s.server)
        );
        if s.interval_us > 0.0 {
            let _ = write!(line, " : {} interval {} us", s.pacing, s.interval_us);
        }
        if s.burst > 1 || s.interval_us > 0.0 {
            let _ = write!(line, " : burst {}", s.burst);
        }
        let bound = self.local_placement.pinned_cpu.is_some()
            || self
                .remote_placement
                .as_ref()
                .is_some_and(|p| p.pinned_cpu.is_some());
        if bound {
            line.push_str(" : cpu bind");
        }
        if let Some(c) = &self.confidence {
            let _ = write!(
                line,
                " : +/-{:.1}% @ {}% conf.",
                c.width_percent_asked / 2.0,
                c.level_percent
            );
        }
        Some(line)
    }
}

/// Open-loop UDP_RR's one-way rows, in irtt's words, and its losses by direction.
fn one_way(out: &mut String, w: &crate::probe::anatomy::OneWay) {
    let clock = if w.clock == "same" {
        "one kernel at both ends, one clock: exact"
    } else {
        "two hosts' clocks as they are: only as good as their sync (IPDV and RTT need none)"
    };
    prose(out, &format!(
        "(irtt's one way: send_delay is send → the server's RX stamp, receive_delay the server's TX stamp → the client's RX stamp; {clock}; server_processing the server's RX → TX stamps, on its own clock; rtt_irtt is irtt's RTT, the transaction less server_processing; ipdv is each delay minus the one before it, consecutive transactions only, as a magnitude)"
    ));
    prose(out, &format!(
        "lost by direction: {} requests on the way out (dropped by the server on purpose included), {} responses on the way back, {} after the last response (either way)",
        w.request_lost, w.response_lost, w.unattributed_lost
    ));
    if w.negative > 0 {
        prose(out, &format!(
            "note: {} one-way delays below zero, left out: the client's and the server's clocks are not synchronised (one-way delays need synchronised clocks; RTT and IPDV do not)",
            w.negative
        ));
    }
}

/// `--anatomy`'s table: each component's statistics, then the round trip they add up
/// to, and TCP's request → ACK time beside them. Each protocol shows what it has:
/// TCP its retransmissions and delayed ACKs, UDP_RR (`udp`) its one-way delays, their
/// variation, its losses by direction and its late replies.
fn anatomy(
    out: &mut String,
    a: &crate::probe::anatomy::AnatomyResult,
    udp: Option<&crate::probe::rr::UdpStats>,
) {
    let c = &a.components;
    let _ = writeln!(
        out,
        "\nAnatomy of {} transactions (kernel software stamps on both ends; {} without every stamp, {} with contradicting stamps):",
        a.stamped, a.unstamped, a.inconsistent
    );
    let mut t = Table::new(summary_header("COMPONENT", &c.rtt));
    for (name, s) in c.parts() {
        t.row(summary_row(name, s));
    }
    t.row(summary_row("sum_rtt", &c.rtt));
    if let Some(ack) = &a.tcp_ack {
        t.row(summary_row("tcp_ack", ack));
    }
    if let Some(c) = &a.connect {
        t.row(summary_row("connect", c));
    }
    out.push_str(&t.render());
    if !a.at_percentiles.is_empty() {
        let _ = writeln!(
            out,
            "\nWhat a transaction at each percentile is made of (the mean of those in its round-trip band, µs):"
        );
        let mut t = Table::new([
            "PERCENTILE",
            "TRANSACTIONS",
            "RTT_us",
            "CLIENT_SEND_us",
            "NETWORK_us",
            "SERVER_RECV_us",
            "SERVER_APP_us",
            "CLIENT_RECV_us",
        ]);
        for c in &a.at_percentiles {
            let mut row = vec![
                format!("P{}", c.percentile),
                c.transactions.to_string(),
                format!("{:.1}", c.parts_us.rtt),
            ];
            row.extend(c.parts_us.parts().iter().map(|(_, v)| format!("{v:.1}")));
            t.row(row);
        }
        out.push_str(&t.render());
    }
    let e = &a.events;
    if udp.is_some() {
        let _ = writeln!(
            out,
            "events: the client woke on another CPU in {} transactions and the server in {}",
            e.client_migrated, e.server_migrated
        );
    } else {
        let _ = writeln!(
            out,
            "events: {} transactions retransmitted ({} request and {} response segments sent again: {} tail loss probes, {} RTOs, {} by loss recovery), {} requests ACKed by the server's delayed-ACK timer, the client woke on another CPU in {} and the server in {}",
            e.retransmitted,
            e.request_retransmissions,
            e.response_retransmissions,
            e.tlp,
            e.rto,
            e.recovery,
            e.delayed_ack,
            e.client_migrated,
            e.server_migrated
        );
    }
    if let Some(w) = &a.one_way {
        let _ = writeln!(
            out,
            "\nOne way (UDP_RR; {}; server clock − client clock {:.1} µs):",
            if w.clock == "same" {
                "one kernel at both ends, one clock: exact"
            } else {
                "two clocks: offset estimated from the fastest transaction, taken as symmetric"
            },
            w.offset_us
        );
        let mut t = Table::new(summary_header("DIRECTION", &w.request));
        t.row(summary_row("request", &w.request));
        t.row(summary_row("response", &w.response));
        t.row(summary_row("server_processing", &w.server_processing));
        t.row(summary_row("rtt_irtt", &w.rtt_less_server));
        t.row(summary_row("ipdv_request", &w.ipdv_request));
        t.row(summary_row("ipdv_response", &w.ipdv_response));
        out.push_str(&t.render());
        let _ = writeln!(
            out,
            "lost: {} requests on the way out (dropped by the server on purpose included), {} responses on the way back, {} after the last response (either way); {} late replies, each with its anatomy and one-way delays, are not lost; ipdv is RFC 3393's variation between consecutive transactions, as a magnitude",
            w.request_lost,
            w.response_lost,
            w.unattributed_lost,
            udp.map_or(0, |u| u.late_replies)
        );
    }
    if let Some(tail) = &a.tail {
        let _ = writeln!(
            out,
            "\nThe slowest {} % ({} transactions, from {:.1} µs; the round trip's P{} is {}){}: the component furthest above its median in each",
            tail.share_pct,
            tail.transactions,
            tail.from_rtt_us,
            100.0 - tail.share_pct,
            tail.rtt_percentile_us
                .map_or_else(|| "not recorded".into(), |v| format!("{v:.1} µs")),
            if tail.exact {
                ""
            } else {
                ", of the transactions kept (more than the run keeps: not exact)"
            }
        );
        let mut c = Table::new(["CAUSE", "EVENT", "SHARE_pct", "MEAN_ADDED_us"]);
        for cause in &tail.causes {
            c.row([
                cause.component.clone(),
                cause.event.clone().unwrap_or_else(|| "-".into()),
                format!("{:.1}", cause.share_pct),
                format!("{:.1}", cause.mean_added_us),
            ]);
        }
        out.push_str(&c.render());
    }
    out.push_str("(client_send: send() → request leaves the client's stack; network: the path both ways, what remains of the round trip; server_recv: request arrives → the server's recv() returns (its wake-up); server_app: → response leaves the server's stack; client_recv: response arrives → the client's recv() returns (its wake-up). Each transaction's five add up to its sum_rtt.");
    if udp.is_some() {
        out.push_str(" A cause's event is a wake-up on another CPU (migration) of server_recv or client_recv.)\n");
    } else {
        if a.connect.is_some() {
            out.push_str(" TCP_CRR's connect is what came before the request (connect() → send(): the handshake); its transaction is connect + sum_rtt.");
        }
        out.push_str(" tcp_ack is the request's TX → its ACK, the kernel's own round trip, beside them. A cause's event is one that cost that component its time: in network, a retransmission the transaction waited for (by the RTO, the tail loss probe (tlp) or loss recovery: a message longer than a segment); in client_send, a delayed ACK the request waited for (held ≥ 40 ms for an ACK); in server_recv or client_recv, a wake-up on another CPU (migration).)\n");
    }
}

fn opt_f(v: Option<f64>) -> Value {
    v.map_or(Value::Text(String::new()), Value::Float)
}
fn opt_i(v: Option<u64>) -> Value {
    v.map_or(Value::Text(String::new()), Value::Int)
}
fn cpu_list(p: Option<&Placement>) -> Value {
    Value::Text(p.map_or(String::new(), |p| {
        p.ran_on_cpus
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(" ")
    }))
}

impl RrResult {
    /// One component of `--anatomy`'s, when it was measured.
    fn anatomy_part(&self, part: super::selectors::Part) -> Option<&crate::stats::Summary> {
        use super::selectors::Part;
        let a = self.anatomy.as_ref()?;
        let c = &a.components;
        match part {
            Part::ClientSend => Some(&c.client_send),
            Part::Network => Some(&c.network),
            Part::ServerRecv => Some(&c.server_recv),
            Part::ServerApp => Some(&c.server_app),
            Part::ClientRecv => Some(&c.client_recv),
            Part::TcpAck => a.tcp_ack.as_ref(),
        }
    }
}

impl Selectable for RrResult {
    const KIND: &'static str = "request/response results";

    fn select(&self, s: &Selector) -> Option<Value> {
        let l = &self.latency;
        let st = &self.settings;
        Some(match s {
            Selector::Throughput => Value::Float(self.throughput_tps),
            Selector::ThroughputUnits => Value::Text("Trans/s".into()),
            Selector::MinLatency => opt_f(l.min_us),
            Selector::MaxLatency => opt_f(l.max_us),
            Selector::MeanLatency | Selector::RtLatency => opt_f(l.mean_us),
            Selector::StddevLatency => opt_f(l.stddev_us),
            Selector::PartPercentile(part, p) => opt_f(
                self.anatomy_part(*part)
                    .and_then(|s| s.percentile_us(*p).flatten()),
            ),
            Selector::PartMean(part) => opt_f(self.anatomy_part(*part).and_then(|s| s.mean_us)),
            Selector::PercentileLatency(p) => opt_f(l.percentile_us(*p).unwrap_or_else(|| {
                self.histogram
                    .resolved_quantile_ns(p.0 / 100.0)
                    .map(|v| v as f64 / 1e3)
            })),
            Selector::ElapsedTime => Value::Float(self.elapsed_s),
            Selector::LocalTransportRetrans => opt_i(self.local_retrans),
            Selector::RemoteTransportRetrans => opt_i(self.remote_retrans),
            Selector::ResultBrand => Value::Text(self.brand.clone().unwrap_or_default()),
            Selector::RequestSize => Value::Int(u64::from(st.request_size)),
            Selector::ResponseSize => Value::Int(u64::from(st.response_size)),
            Selector::Protocol => {
                Value::Text(if st.test == "UDP_RR" { "UDP" } else { "TCP" }.into())
            }
            Selector::BurstSize => Value::Int(u64::from(st.burst)),
            Selector::LocalCpuBind => opt_i(self.local_placement.pinned_cpu.map(|c| c as u64)),
            Selector::RemoteCpuBind => opt_i(
                self.remote_placement
                    .as_ref()
                    .and_then(|p| p.pinned_cpu)
                    .map(|c| c as u64),
            ),
            // netperf's -c/-C: each machine's CPU use and service demand (µs/Tran).
            Selector::LocalCpuUtil => opt_f(self.local_cpu.map(|c| c.util_percent)),
            Selector::RemoteCpuUtil => opt_f(self.remote_cpu.map(|c| c.util_percent)),
            Selector::LocalSd => opt_f(self.local_cpu.map(|c| c.service_demand_us)),
            Selector::RemoteSd => opt_f(self.remote_cpu.map(|c| c.service_demand_us)),
            Selector::LocalCpuCount => opt_i(self.local_cpu.map(|c| u64::from(c.cpus))),
            Selector::RemoteCpuCount => opt_i(self.remote_cpu.map(|c| u64::from(c.cpus))),
            // netperf's -I selectors: the level and width asked, the iterations run,
            // and the ± percentage reached.
            Selector::ConfidenceLevel => {
                opt_i(self.confidence.as_ref().map(|c| u64::from(c.level_percent)))
            }
            Selector::ConfidenceInterval => {
                opt_f(self.confidence.as_ref().map(|c| c.width_percent_asked))
            }
            Selector::ConfidenceIteration => opt_i(
                self.confidence
                    .as_ref()
                    .map(|c| c.throughput_tps.len() as u64),
            ),
            Selector::ThroughputConfid => {
                opt_f(self.confidence.as_ref().map(|c| c.width_percent / 2.0))
            }
            Selector::Test => Value::Text(st.test.into()),
            Selector::Transactions => Value::Int(self.transactions),
            Selector::LostTransactions => Value::Int(self.udp.as_ref().map_or(0, |u| u.lost)),
            Selector::IntervalUs => Value::Float(st.interval_us),
            Selector::Pacing => Value::Text(st.pacing.into()),
            Selector::Streams => Value::Int(u64::from(st.streams)),
            Selector::LocalCpusUsed => cpu_list(Some(&self.local_placement)),
            Selector::RemoteCpusUsed => cpu_list(self.remote_placement.as_ref()),
            Selector::LocalTcpRtt => {
                opt_i(self.local_tcp_info.first().map(|t| u64::from(t.rtt_us)))
            }
            Selector::RemoteTcpRtt => {
                opt_i(self.remote_tcp_info.first().map(|t| u64::from(t.rtt_us)))
            }
            Selector::ConnectMeanLatency => opt_f(self.connect.as_ref().and_then(|c| c.mean_us)),
            Selector::ResponseTimeP99 => opt_f(
                self.open_loop
                    .as_ref()
                    .and_then(|o| o.response_time.percentile_us(Percentile(99.0)).flatten()),
            ),
            Selector::ClientCpuPerTran => opt_f(self.client_cpu_us_per_transaction),
            Selector::KernelRelease => Value::Text(self.local_host.kernel_release.clone()),
            Selector::RemoteKernelRelease => Value::Text(
                self.remote_host
                    .as_ref()
                    .map_or(String::new(), |h| h.kernel_release.clone()),
            ),
            Selector::RemoteHost => Value::Text(st.server.to_string()),
            Selector::Sent | Selector::Received | Selector::Duplicates | Selector::Reordered => {
                return None
            }
        })
    }

    fn all_selectors() -> Vec<Selector> {
        use Selector::*;
        vec![
            Test,
            Protocol,
            RequestSize,
            ResponseSize,
            Streams,
            IntervalUs,
            Pacing,
            BurstSize,
            ElapsedTime,
            Transactions,
            Throughput,
            ThroughputUnits,
        ]
        .into_iter()
        .chain(super::selectors::latency_selectors())
        .chain([
            RtLatency,
            LostTransactions,
            LocalTransportRetrans,
            RemoteTransportRetrans,
            LocalTcpRtt,
            RemoteTcpRtt,
            ConnectMeanLatency,
            ResponseTimeP99,
            ClientCpuPerTran,
            LocalCpuBind,
            RemoteCpuBind,
            LocalCpusUsed,
            RemoteCpusUsed,
            KernelRelease,
            RemoteKernelRelease,
            RemoteHost,
            ResultBrand,
        ])
        .collect()
    }
}
