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
    Throughput,
    ThroughputUnits,
    MinLatency,
    MaxLatency,
    MeanLatency,
    StddevLatency,
    PercentileLatency(Percentile),
    /// `rr --anatomy`: `P<digits>_<PART>_LATENCY`, e.g. P99_NETWORK_LATENCY.
    PartPercentile(Part, Percentile),
    /// `rr --anatomy`: `MEAN_<PART>_LATENCY`.
    PartMean(Part),
    RtLatency,
    ElapsedTime,
    LocalTransportRetrans,
    RemoteTransportRetrans,
    ResultBrand,
    RequestSize,
    ResponseSize,
    Protocol,
    BurstSize,
    LocalCpuBind,
    RemoteCpuBind,
    LocalCpuUtil,
    RemoteCpuUtil,
    LocalSd,
    RemoteSd,
    LocalCpuCount,
    RemoteCpuCount,
    ConfidenceLevel,
    ConfidenceInterval,
    ConfidenceIteration,
    ThroughputConfid,
    // rttlab's own.
    Test,
    Transactions,
    LostTransactions,
    IntervalUs,
    Pacing,
    Streams,
    LocalCpusUsed,
    RemoteCpusUsed,
    LocalTcpRtt,
    RemoteTcpRtt,
    ConnectMeanLatency,
    ResponseTimeP99,
    ClientCpuPerTran,
    Sent,
    Received,
    Duplicates,
    Reordered,
    KernelRelease,
    RemoteKernelRelease,
    RemoteHost,
}

/// A selector's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Float(f64),
    Int(u64),
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
    #[error("unknown output selector {0:?} (known: {known})", known = Selector::known_names())]
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
    ClientSend,
    Network,
    ServerRecv,
    ServerApp,
    ClientRecv,
    TcpAck,
}

impl Part {
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
            if let Some(p) = Percentile::from_digits(d) {
                return Ok(Selector::PercentileLatency(p));
            }
            if let Some((digits, part)) = d.split_once('_') {
                if let (Some(p), Some(part)) = (Percentile::from_digits(digits), Part::parse(part))
                {
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

    fn known_names() -> String {
        let mut v: Vec<&str> = FIXED.iter().map(|(n, _)| *n).collect();
        v.push("P<digits>_LATENCY");
        v.push("P<digits>_<PART>_LATENCY, MEAN_<PART>_LATENCY (rr --anatomy; PART: CLIENT_SEND, NETWORK, SERVER_RECV, SERVER_APP, CLIENT_RECV, TCP_ACK)");
        v.join(", ")
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
