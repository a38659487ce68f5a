//! netperf's omni output, so that a netperf command line pasted after `rttlab rr`
//! prints what netperf prints: `-- -o LIST` a line of header names and a line of
//! comma-separated values, `-- -O LIST` aligned columns under four header lines, and
//! with netperf's `-P 0` the values alone.
//!
//! Each selector's header words and value format are netperf's own, and so is the
//! layout, read from netperf 2.7's `src/nettest_omni.c` (`print_omni_init_list`,
//! `print_omni_csv`, `print_omni_human`) and checked against its output on loopback:
//! latencies other than the mean and standard deviation are whole microseconds
//! (`%d`), throughput has two decimals, a value netperf does not have (a brand not
//! given) leaves its field empty with the next field starting with a space, as
//! netperf's buffer arithmetic leaves it. Where netperf prints a sentinel for what was
//! not asked for (no `-I`, no `-T`), so do we. `BURST_SIZE` is netperf's: the initial
//! burst of the test-specific `-b`, which rttlab never sends (0). Our own selectors
//! get header words in the same style.

use super::selectors::{Part, Selectable, Selector, SelectorError, Value};
use crate::stats::Percentile;

/// Which of netperf's two layouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// `-o`: one header line, one line of comma-separated values.
    Csv,
    /// `-O`: columns, four header lines above the values.
    Columns,
}

/// Render `list` of `r` as netperf would; `headers` false is netperf's `-P 0`.
///
/// # Errors
/// A selector does not apply to `r`.
pub fn render<R: Selectable>(
    r: &R,
    list: &[Selector],
    style: Style,
    headers: bool,
) -> Result<String, SelectorError> {
    let mut cols = Vec::with_capacity(list.len());
    for s in list {
        let v = r
            .select(s)
            .ok_or_else(|| SelectorError::NotApplicable(s.name(), R::KIND))?;
        cols.push((header(s), value(s, v)));
    }
    Ok(match style {
        Style::Csv => csv(&cols, headers),
        Style::Columns => columns(&cols, headers),
    })
}

/// `print_omni_csv`: header words joined by spaces; each value followed by a comma,
/// a missing one by a comma and a space, then the last character dropped.
fn csv(cols: &[(Vec<String>, Option<String>)], headers: bool) -> String {
    let mut out = String::new();
    if headers {
        let names: Vec<String> = cols.iter().map(|(h, _)| h.join(" ")).collect();
        out.push_str(&names.join(","));
        out.push('\n');
    }
    let mut line = String::new();
    for (_, v) in cols {
        match v {
            Some(v) => {
                line.push_str(v);
                line.push(',');
            }
            None => line.push_str(", "),
        }
    }
    line.pop();
    out.push_str(&line);
    out.push('\n');
    out
}

/// `print_omni_human`: a column is as wide as its longest header word or its value
/// plus one, and one space more separates it from the next; all four header lines are
/// printed, blank ones too, each padded to the full width.
fn columns(cols: &[(Vec<String>, Option<String>)], headers: bool) -> String {
    let width: Vec<usize> = cols
        .iter()
        .map(|(h, v)| {
            let words = h.iter().map(|w| w.chars().count()).max().unwrap_or(0);
            let value = v.as_ref().map_or(0, |v| v.chars().count() + 1);
            words.max(value)
        })
        .collect();
    let line = |cell: &dyn Fn(usize) -> String| {
        let mut l = String::new();
        for (i, w) in width.iter().enumerate() {
            let c = cell(i);
            l.push_str(&c);
            l.extend(std::iter::repeat_n(' ', w + 1 - c.chars().count()));
        }
        l.push('\n');
        l
    };
    let mut out = String::new();
    if headers {
        for k in 0..4 {
            out.push_str(&line(&|i| cols[i].0.get(k).cloned().unwrap_or_default()));
        }
    }
    out.push_str(&line(&|i| cols[i].1.clone().unwrap_or_default()));
    out
}

/// netperf's header words for `s` (`set_output_elt`'s four lines), ours for our own.
fn header(s: &Selector) -> Vec<String> {
    use Selector::*;
    let words: &[&str] = match s {
        Throughput => &["Throughput"],
        ThroughputUnits => &["Throughput", "Units"],
        MinLatency => &["Minimum", "Latency", "Microseconds"],
        MaxLatency => &["Maximum", "Latency", "Microseconds"],
        MeanLatency => &["Mean", "Latency", "Microseconds"],
        StddevLatency => &["Stddev", "Latency", "Microseconds"],
        PercentileLatency(p) => {
            return owned(&[&ordinal(*p), "Percentile", "Latency", "Microseconds"])
        }
        PartPercentile(part, p) => {
            return owned(&[
                &format!("{} Percentile", ordinal(*p)),
                part_words(*part),
                "Latency",
                "Microseconds",
            ])
        }
        PartMean(part) => return owned(&["Mean", part_words(*part), "Latency", "Microseconds"]),
        RtLatency => &["Round", "Trip", "Latency", "usec/tran"],
        ElapsedTime => &["Elapsed", "Time", "(sec)"],
        LocalTransportRetrans => &["Local", "Transport", "Retransmissions"],
        RemoteTransportRetrans => &["Remote", "Transport", "Retransmissions"],
        ResultBrand => &["Result", "Tag"],
        RequestSize => &["Request", "Size", "Bytes"],
        ResponseSize => &["Response", "Size", "Bytes"],
        Protocol => &["Protocol"],
        BurstSize => &["Initial", "Burst", "Requests"],
        LocalCpuBind => &["Local", "CPU", "Bind"],
        RemoteCpuBind => &["Remote", "CPU", "Bind"],
        LocalCpuUtil => &["Local", "CPU", "Util", "%"],
        RemoteCpuUtil => &["Remote", "CPU", "Util", "%"],
        LocalSd => &["Local", "Service", "Demand"],
        RemoteSd => &["Remote", "Service", "Demand"],
        LocalCpuCount => &["Local", "CPU", "Count"],
        RemoteCpuCount => &["Remote", "CPU", "Count"],
        ConfidenceLevel => &["Confidence", "Level", "Percent"],
        ConfidenceInterval => &["Confidence", "Width", "Target"],
        ConfidenceIteration => &["Confidence", "Iterations", "Run"],
        ThroughputConfid => &["Throughput", "Confidence", "Width (%)"],
        KernelRelease => &["Local", "Release"],
        RemoteKernelRelease => &["Remote", "Release"],
        Test => &["Test"],
        Transactions => &["Transactions"],
        LostTransactions => &["Lost", "Transactions"],
        IntervalUs => &["Interval", "Microseconds"],
        Pacing => &["Pacing"],
        Streams => &["Streams"],
        LocalCpusUsed => &["Local", "CPUs", "Used"],
        RemoteCpusUsed => &["Remote", "CPUs", "Used"],
        LocalTcpRtt => &["Local", "TCP", "RTT", "Microseconds"],
        RemoteTcpRtt => &["Remote", "TCP", "RTT", "Microseconds"],
        ConnectMeanLatency => &["Connect", "Mean", "Latency", "Microseconds"],
        ResponseTimeP99 => &[
            "Response Time",
            "99th Percentile",
            "Latency",
            "Microseconds",
        ],
        ClientCpuPerTran => &["Client", "CPU", "per Tran", "Microseconds"],
        Sent => &["Sent"],
        Received => &["Received"],
        Duplicates => &["Duplicates"],
        Reordered => &["Reordered"],
        RemoteHost => &["Remote", "Host"],
    };
    owned(words)
}

fn owned(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

/// `50th`, `99.9th`.
fn ordinal(p: Percentile) -> String {
    format!("{}th", p.0)
}

fn part_words(part: Part) -> &'static str {
    match part {
        Part::ClientSend => "Client Send",
        Part::Network => "Network",
        Part::ServerRecv => "Server Recv",
        Part::ServerApp => "Server App",
        Part::ClientRecv => "Client Recv",
        Part::TcpAck => "TCP ACK",
    }
}

/// `s`'s value in netperf's format; `None` where netperf would have none.
fn value(s: &Selector, v: Value) -> Option<String> {
    use Selector::*;
    let missing = matches!(&v, Value::Text(t) if t.is_empty());
    if missing {
        // netperf's values for what was not asked for.
        return match s {
            LocalCpuBind | RemoteCpuBind => Some("-1".into()),
            ConfidenceLevel => Some("0".into()),
            ConfidenceInterval => Some("-1.000000".into()),
            ConfidenceIteration => Some("1".into()),
            ThroughputConfid => Some("-1.000".into()),
            _ => None,
        };
    }
    let x = match &v {
        Value::Float(x) => *x,
        Value::Int(n) => *n as f64,
        Value::Text(t) => {
            return Some(match s {
                ResultBrand => format!("\"{t}\""),
                _ => t.clone(),
            })
        }
    };
    Some(match s {
        BurstSize => "0".into(),
        MinLatency | MaxLatency | PercentileLatency(_) | PartPercentile(..) => {
            format!("{}", x.floor() as i64)
        }
        Throughput | MeanLatency | StddevLatency | PartMean(_) | ConnectMeanLatency
        | ElapsedTime | LocalCpuUtil | RemoteCpuUtil => format!("{x:.2}"),
        RtLatency | LocalSd | RemoteSd | ThroughputConfid => format!("{x:.3}"),
        ConfidenceInterval => format!("{x:.6}"),
        _ => v.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A result with fixed values, to compare with what netperf 2.7.1 printed for
    /// the same selectors (`netperf -t TCP_RR -- -o …`/`-O …` on loopback).
    struct Fixed;

    impl Selectable for Fixed {
        const KIND: &'static str = "fixed";
        fn select(&self, s: &Selector) -> Option<Value> {
            Some(match s {
                Selector::Throughput => Value::Float(180.58),
                Selector::ThroughputUnits => Value::Text("Trans/s".into()),
                Selector::MinLatency => Value::Float(36.7),
                Selector::MaxLatency => Value::Float(3980.2),
                Selector::MeanLatency => Value::Float(310.0149),
                Selector::StddevLatency => Value::Float(723.444),
                Selector::PercentileLatency(_) => Value::Float(12.9),
                Selector::LocalCpuBind => Value::Int(0),
                Selector::RemoteCpuBind => Value::Int(1),
                Selector::ResultBrand | Selector::ConfidenceLevel => Value::Text(String::new()),
                Selector::Protocol => Value::Text("TCP".into()),
                _ => return None,
            })
        }
        fn all_selectors() -> Vec<Selector> {
            Vec::new()
        }
    }

    fn list(s: &str) -> Vec<Selector> {
        Selector::parse_list(s).unwrap()
    }

    /// Witness: netperf's own lines for these selectors (the values aside), with the
    /// empty brand's field as netperf leaves it: `, 11,…` first, `…,,` last.
    #[test]
    fn csv_is_netperfs() {
        let l = list("result_brand,MIN_LATENCY,MEAN_LATENCY,P50_LATENCY,P90_LATENCY,P99_LATENCY");
        assert_eq!(
            render(&Fixed, &l, Style::Csv, true).unwrap(),
            "Result Tag,Minimum Latency Microseconds,Mean Latency Microseconds,\
             50th Percentile Latency Microseconds,90th Percentile Latency Microseconds,\
             99th Percentile Latency Microseconds\n, 36,310.01,12,12,12\n"
        );
        assert_eq!(
            render(&Fixed, &l, Style::Csv, false).unwrap(),
            ", 36,310.01,12,12,12\n"
        );
        let last = list("PROTOCOL,RESULT_BRAND");
        assert_eq!(render(&Fixed, &last, Style::Csv, false).unwrap(), "TCP,,\n");
        let sentinel = list("CONFIDENCE_LEVEL,THROUGHPUT");
        assert_eq!(
            render(&Fixed, &sentinel, Style::Csv, false).unwrap(),
            "0,180.58\n"
        );
    }

    /// Witness: netperf 2.7.1's `-O THROUGHPUT,MIN_LATENCY,MAX_LATENCY,MEAN_LATENCY,
    /// STDDEV_LATENCY,LOCAL_CPU_BIND,REMOTE_CPU_BIND,RESULT_BRAND -T 0,1` on loopback,
    /// byte for byte (trailing spaces and the blank fourth header line included).
    #[test]
    fn columns_are_netperfs() {
        let l = list("THROUGHPUT,MIN_LATENCY,MAX_LATENCY,MEAN_LATENCY,STDDEV_LATENCY,LOCAL_CPU_BIND,REMOTE_CPU_BIND,RESULT_BRAND");
        let want = [
            "Throughput Minimum      Maximum      Mean         Stddev       Local Remote Result ",
            "           Latency      Latency      Latency      Latency      CPU   CPU    Tag    ",
            "           Microseconds Microseconds Microseconds Microseconds Bind  Bind          ",
            &" ".repeat(83),
            "180.58     36           3980         310.01       723.44       0     1             ",
        ]
        .map(|l| format!("{l}\n"))
        .concat();
        assert_eq!(render(&Fixed, &l, Style::Columns, true).unwrap(), want);
        let values = render(&Fixed, &l, Style::Columns, false).unwrap();
        assert_eq!(values, want.lines().last().unwrap().to_owned() + "\n");
    }

    #[test]
    fn a_selector_the_result_lacks_is_refused() {
        let e = render(&Fixed, &list("TRANSACTIONS"), Style::Csv, true).unwrap_err();
        assert_eq!(
            e,
            SelectorError::NotApplicable("TRANSACTIONS".into(), "fixed")
        );
    }
}
