//! netperf's output selectors (`-o P50_LATENCY,P99_LATENCY,THROUGHPUT`), so the
//! seeds' command lines and existing scripts carry over, plus our own.
//!
//! As with netperf, output is a line of names and a line of comma-separated values.
//! Latencies are microseconds. Names are case-insensitive; `P<digits>_LATENCY` takes
//! any percentile (`P50`, `P999` = 99.9, `P9999` = 99.99).

use crate::stats::Percentile;
use std::fmt::Write as _;

/// One output selector.
#[derive(Clone, Debug, PartialEq)]
pub enum Selector {
    /// `THROUGHPUT`: transactions per second (rr).
    Throughput,
    /// `THROUGHPUT_UNITS`: the unit of `THROUGHPUT`, always `Trans/s`.
    ThroughputUnits,
    /// `MIN_LATENCY`: the fastest round trip, µs (empty when none was measured).
    MinLatency,
    /// `MAX_LATENCY`: the slowest round trip, µs.
    MaxLatency,
    /// `MEAN_LATENCY`: the mean round trip, µs.
    MeanLatency,
    /// `STDDEV_LATENCY`: the round trips' standard deviation, µs.
    StddevLatency,
    /// `P<digits>_LATENCY`: that percentile of the round trips, µs (from the histogram
    /// when the summary does not carry it).
    PercentileLatency(Percentile),
    /// `rr --anatomy`: `P<digits>_<PART>_LATENCY`, e.g. P99_NETWORK_LATENCY.
    PartPercentile(Part, Percentile),
    /// `rr --anatomy`: `MEAN_<PART>_LATENCY`.
    PartMean(Part),
    /// `RT_LATENCY`: netperf's round-trip latency; the same value as `MEAN_LATENCY`, µs.
    RtLatency,
    /// `ELAPSED_TIME`: how long the run took, s.
    ElapsedTime,
    /// `LOCAL_TRANSPORT_RETRANS`: segments the client's data sockets retransmitted (TCP).
    LocalTransportRetrans,
    /// `REMOTE_TRANSPORT_RETRANS`: segments the server's data sockets retransmitted (TCP).
    RemoteTransportRetrans,
    /// `RESULT_BRAND`: the `-B` label; empty without one.
    ResultBrand,
    /// `REQUEST_SIZE`: bytes of each request (ping: of each echo's payload).
    RequestSize,
    /// `RESPONSE_SIZE`: bytes of each response (ping: the same as the request).
    ResponseSize,
    /// `PROTOCOL`: `TCP`, `UDP`, `ICMP` or `ICMPv6`.
    Protocol,
    /// `BURST_SIZE`: transactions back to back per interval (`-b`).
    BurstSize,
    /// `LOCAL_CPU_BIND`: the CPU the client was pinned to (`-T`); empty if none.
    LocalCpuBind,
    /// `REMOTE_CPU_BIND`: the CPU the server was pinned to (`-T`); empty if none.
    RemoteCpuBind,
    /// `LOCAL_CPU_UTIL`: the client machine's busy share of all its CPUs, % (netperf's `-c`).
    LocalCpuUtil,
    /// `REMOTE_CPU_UTIL`: the server machine's busy share, %, as the server measured it
    /// (netperf's `-C`).
    RemoteCpuUtil,
    /// `LOCAL_SD`: the client machine's CPU time per transaction, µs (service demand).
    LocalSd,
    /// `REMOTE_SD`: the server machine's CPU time per transaction, µs.
    RemoteSd,
    /// `LOCAL_CPU_COUNT`: CPUs online on the client's machine.
    LocalCpuCount,
    /// `REMOTE_CPU_COUNT`: CPUs online on the server's machine.
    RemoteCpuCount,
    /// `CONFIDENCE_LEVEL`: the confidence level `-I` asked for, % (95 or 99).
    ConfidenceLevel,
    /// `CONFIDENCE_INTERVAL`: the interval's whole width `-I` asked for, % of the mean.
    ConfidenceInterval,
    /// `CONFIDENCE_ITERATION`: how many iterations `-I` ran.
    ConfidenceIteration,
    /// `THROUGHPUT_CONFID`: ± the half-width reached, % of the mean transactions/s.
    ThroughputConfid,
    // rttlab's own.
    /// `TEST`: the test's name (`TCP_RR`, `UDP_RR`, `TCP_CRR`; ping: `ICMP_ECHO`).
    Test,
    /// `TRANSACTIONS`: transactions completed (ping: as `RECEIVED`).
    Transactions,
    /// `LOST_TRANSACTIONS`: requests that got no reply in time (UDP_RR, ping; 0 for TCP).
    LostTransactions,
    /// `INTERVAL_US`: the wait between a reply and the next request (`-w`), or between
    /// pings, µs.
    IntervalUs,
    /// `PACING`: how the interval was waited: `sleep`, `spin` or `hybrid`.
    Pacing,
    /// `STREAMS`: parallel connections (`--streams`).
    Streams,
    /// `LOCAL_CPUS_USED`: the CPUs the client's measuring threads ran on, space-separated.
    LocalCpusUsed,
    /// `REMOTE_CPUS_USED`: the CPUs the server's threads ran on, space-separated.
    RemoteCpusUsed,
    /// `LOCAL_TCP_RTT`: the client kernel's smoothed RTT (`tcpi_rtt`) of the first
    /// stream's socket at its end, µs.
    LocalTcpRtt,
    /// `REMOTE_TCP_RTT`: the same from the server's side, as the server reported it, µs.
    RemoteTcpRtt,
    /// `CONNECT_MEAN_LATENCY`: TCP_CRR: the mean time of `connect()` alone, µs.
    ConnectMeanLatency,
    /// `RESPONSE_TIME_P99_LATENCY`: open loop (`--rate`): P99 of intended send time →
    /// response, µs.
    ResponseTimeP99,
    /// `CLIENT_CPU_PER_TRAN`: CPU time of the client's measuring threads (only them, unlike
    /// `LOCAL_SD`) per transaction, µs.
    ClientCpuPerTran,
    /// `SENT`: ping: echo requests sent.
    Sent,
    /// `RECEIVED`: ping: replies received in time, duplicates included.
    Received,
    /// `DUPLICATES`: ping: replies to a request already answered.
    Duplicates,
    /// `REORDERED`: ping: replies to a request older than one already answered.
    Reordered,
    /// `KERNEL_RELEASE`: this host's kernel release (`uname -r`).
    KernelRelease,
    /// `REMOTE_KERNEL_RELEASE`: the server's kernel release, as it reported it; empty if
    /// unknown.
    RemoteKernelRelease,
    /// `REMOTE_HOST`: the server's control address (rr) or the ping target.
    RemoteHost,
}

/// A selector's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A number printed with three decimals (latencies in µs, rates, percentages).
    Float(f64),
    /// A count or size, printed as is.
    Int(u64),
    /// Text, quoted as CSV needs; empty when the value applies but was not measured.
    Text(String),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Float(x) => write!(f, "{x:.3}"),
            Value::Int(n) => write!(f, "{n}"),
            Value::Text(s) if s.contains([',', '"', '\n']) => {
                write!(f, "\"{}\"", s.replace('"', "\"\""))
            }
            Value::Text(s) => f.write_str(s),
        }
    }
}

/// Selector problems.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SelectorError {
    /// Not a selector name.
    #[error("unknown output selector {0:?} (`-o ?` lists them)")]
    Unknown(String),
    /// A selector this kind of result has no value for.
    #[error("output selector {0} does not apply to {1}")]
    NotApplicable(String, &'static str),
}

/// A result that answers selectors.
pub trait Selectable {
    /// What kind of result this is, for messages.
    const KIND: &'static str;
    /// The value of `s`, `None` if it does not apply to this kind of result, or an
    /// empty text when it applies but was not measured.
    fn select(&self, s: &Selector) -> Option<Value>;
    /// Every selector `--csv` prints.
    fn all_selectors() -> Vec<Selector>;
}

const FIXED: &[(&str, Selector)] = &[
    ("THROUGHPUT", Selector::Throughput),
    ("THROUGHPUT_UNITS", Selector::ThroughputUnits),
    ("MIN_LATENCY", Selector::MinLatency),
    ("MAX_LATENCY", Selector::MaxLatency),
    ("MEAN_LATENCY", Selector::MeanLatency),
    ("STDDEV_LATENCY", Selector::StddevLatency),
    ("RT_LATENCY", Selector::RtLatency),
    ("ELAPSED_TIME", Selector::ElapsedTime),
    ("LOCAL_TRANSPORT_RETRANS", Selector::LocalTransportRetrans),
    ("REMOTE_TRANSPORT_RETRANS", Selector::RemoteTransportRetrans),
    ("RESULT_BRAND", Selector::ResultBrand),
    ("REQUEST_SIZE", Selector::RequestSize),
    ("RESPONSE_SIZE", Selector::ResponseSize),
    ("PROTOCOL", Selector::Protocol),
    ("BURST_SIZE", Selector::BurstSize),
    ("LOCAL_CPU_BIND", Selector::LocalCpuBind),
    ("REMOTE_CPU_BIND", Selector::RemoteCpuBind),
    ("LOCAL_CPU_UTIL", Selector::LocalCpuUtil),
    ("REMOTE_CPU_UTIL", Selector::RemoteCpuUtil),
    ("LOCAL_SD", Selector::LocalSd),
    ("REMOTE_SD", Selector::RemoteSd),
    ("LOCAL_CPU_COUNT", Selector::LocalCpuCount),
    ("REMOTE_CPU_COUNT", Selector::RemoteCpuCount),
    ("CONFIDENCE_LEVEL", Selector::ConfidenceLevel),
    ("CONFIDENCE_INTERVAL", Selector::ConfidenceInterval),
    ("CONFIDENCE_ITERATION", Selector::ConfidenceIteration),
    ("THROUGHPUT_CONFID", Selector::ThroughputConfid),
    ("TEST", Selector::Test),
    ("TRANSACTIONS", Selector::Transactions),
    ("LOST_TRANSACTIONS", Selector::LostTransactions),
    ("INTERVAL_US", Selector::IntervalUs),
    ("PACING", Selector::Pacing),
    ("STREAMS", Selector::Streams),
    ("LOCAL_CPUS_USED", Selector::LocalCpusUsed),
    ("REMOTE_CPUS_USED", Selector::RemoteCpusUsed),
    ("LOCAL_TCP_RTT", Selector::LocalTcpRtt),
    ("REMOTE_TCP_RTT", Selector::RemoteTcpRtt),
    ("CONNECT_MEAN_LATENCY", Selector::ConnectMeanLatency),
    ("RESPONSE_TIME_P99_LATENCY", Selector::ResponseTimeP99),
    ("CLIENT_CPU_PER_TRAN", Selector::ClientCpuPerTran),
    ("SENT", Selector::Sent),
    ("RECEIVED", Selector::Received),
    ("DUPLICATES", Selector::Duplicates),
    ("REORDERED", Selector::Reordered),
    ("KERNEL_RELEASE", Selector::KernelRelease),
    ("REMOTE_KERNEL_RELEASE", Selector::RemoteKernelRelease),
    ("REMOTE_HOST", Selector::RemoteHost),
];

/// A component of `rr --anatomy` (and TCP's request → ACK time beside them), by its
/// selector name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// `CLIENT_SEND`: the client's `send()` → the request leaves its stack.
    ClientSend,
    /// `NETWORK`: the path both ways, what remains of the round trip.
    Network,
    /// `SERVER_RECV`: the request arrives → the server's `recv()` returns (its wake-up).
    ServerRecv,
    /// `SERVER_APP`: the server's `recv()` returns → the response leaves its stack.
    ServerApp,
    /// `CLIENT_RECV`: the response arrives → the client's `recv()` returns (its wake-up).
    ClientRecv,
    /// `TCP_ACK`: TCP only, the request's TX → its ACK, the kernel's own round trip.
    TcpAck,
}

impl Part {
    /// Every part with its selector name, in the anatomy's order.
    pub const ALL: [(&'static str, Part); 6] = [
        ("CLIENT_SEND", Part::ClientSend),
        ("NETWORK", Part::Network),
        ("SERVER_RECV", Part::ServerRecv),
        ("SERVER_APP", Part::ServerApp),
        ("CLIENT_RECV", Part::ClientRecv),
        ("TCP_ACK", Part::TcpAck),
    ];

    fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, p)| *p == self)
            .map_or("?", |(n, _)| n)
    }

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.iter().find(|(n, _)| *n == s).map(|(_, p)| *p)
    }
}

impl Selector {
    /// Parse one name, case-insensitively.
    ///
    /// # Errors
    /// Not a known name.
    pub fn parse(name: &str) -> Result<Self, SelectorError> {
        let up = name.trim().to_ascii_uppercase();
        if let Some((_, s)) = FIXED.iter().find(|(n, _)| *n == up) {
            return Ok(s.clone());
        }
        if let Some(d) = up
            .strip_prefix('P')
            .and_then(|r| r.strip_suffix("_LATENCY"))
        {
            if let Some(p) = Percentile::from_name(d) {
                return Ok(Selector::PercentileLatency(p));
            }
            if let Some((digits, part)) = d.split_once('_') {
                if let (Some(p), Some(part)) = (Percentile::from_name(digits), Part::parse(part)) {
                    return Ok(Selector::PartPercentile(part, p));
                }
            }
        }
        if let Some(part) = up
            .strip_prefix("MEAN_")
            .and_then(|r| r.strip_suffix("_LATENCY"))
            .and_then(Part::parse)
        {
            return Ok(Selector::PartMean(part));
        }
        Err(SelectorError::Unknown(name.trim().to_owned()))
    }

    /// Parse a comma-separated list (netperf `-o A,B,C`).
    ///
    /// # Errors
    /// Any name unknown, or the list empty.
    pub fn parse_list(list: &str) -> Result<Vec<Self>, SelectorError> {
        let v: Vec<Self> = list
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(Self::parse)
            .collect::<Result<_, _>>()?;
        if v.is_empty() {
            return Err(SelectorError::Unknown(list.to_owned()));
        }
        Ok(v)
    }

    /// The canonical name.
    pub fn name(&self) -> String {
        match self {
            Selector::PercentileLatency(p) => format!("P{}_LATENCY", p.digits()),
            Selector::PartPercentile(part, p) => {
                format!("P{}_{}_LATENCY", p.digits(), part.name())
            }
            Selector::PartMean(part) => format!("MEAN_{}_LATENCY", part.name()),
            s => FIXED
                .iter()
                .find(|(_, x)| x == s)
                .map_or_else(|| format!("{s:?}"), |(n, _)| (*n).to_owned()),
        }
    }

    /// Every selector name, and the forms with a number or part in them (`-o ?`).
    pub fn known_names() -> Vec<String> {
        let mut v: Vec<String> = FIXED.iter().map(|(n, _)| (*n).to_string()).collect();
        v.push("P<pct>_LATENCY (P50, P99, P99.9 or P999, P99.99 or P9999)".to_string());
        v.push(format!(
            "P<pct>_<PART>_LATENCY and MEAN_<PART>_LATENCY (rr --anatomy; PART: {})",
            Part::ALL
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        ));
        v
    }
}

/// The latency statistics every kind of result prints in `--csv`, in netperf's order.
pub fn latency_selectors() -> [Selector; 8] {
    use Selector::*;
    [
        MinLatency,
        MeanLatency,
        PercentileLatency(Percentile(50.0)),
        PercentileLatency(Percentile(90.0)),
        PercentileLatency(Percentile(99.0)),
        PercentileLatency(Percentile(99.9)),
        MaxLatency,
        StddevLatency,
    ]
}

/// Names line and values line.
///
/// # Errors
/// A selector does not apply to `r`.
pub fn render_lines<R: Selectable>(r: &R, list: &[Selector]) -> Result<String, SelectorError> {
    let mut names = Vec::with_capacity(list.len());
    let mut values = Vec::with_capacity(list.len());
    for s in list {
        let v = r
            .select(s)
            .ok_or_else(|| SelectorError::NotApplicable(s.name(), R::KIND))?;
        names.push(s.name());
        values.push(v.to_string());
    }
    let mut out = String::new();
    let _ = writeln!(out, "{}", names.join(","));
    let _ = writeln!(out, "{}", values.join(","));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_case_insensitively_and_round_trip() {
        for (_, s) in FIXED {
            assert_eq!(Selector::parse(&s.name().to_lowercase()).unwrap(), *s);
        }
        assert_eq!(
            Selector::parse("p999_latency").unwrap(),
            Selector::PercentileLatency(Percentile(99.9))
        );
        assert_eq!(
            Selector::parse("P50_LATENCY").unwrap().name(),
            "P50_LATENCY"
        );
        assert!(matches!(
            Selector::parse("P50_LATENC"),
            Err(SelectorError::Unknown(_))
        ));
        assert!(Selector::parse_list("").is_err());
        let l = Selector::parse_list("THROUGHPUT, mean_latency").unwrap();
        assert_eq!(l, vec![Selector::Throughput, Selector::MeanLatency]);
    }

    #[test]
    fn text_values_are_csv_quoted() {
        assert_eq!(Value::Text("a,b".into()).to_string(), "\"a,b\"");
        assert_eq!(Value::Float(1.0).to_string(), "1.000");
    }
}
