//! The kernel's SNMP-style counters (/proc/net/netstat, /proc/net/snmp) of one network
//! namespace: TcpExt's TCPLossProbes, TCPTimeouts, TCPRetransFail tell which
//! retransmission path a connection took (docs/ARCHITECTURE.md §7).

use super::netns;
use std::collections::HashMap;

/// Counters by `Group.Name` (e.g. `TcpExt.TCPTimeouts`, `Tcp.RetransSegs`).
pub type Counters = HashMap<String, u64>;

/// Parse the two-line-per-group layout of /proc/net/netstat and /proc/net/snmp.
pub fn parse(text: &str) -> Counters {
    let mut out = Counters::new();
    let lines: Vec<&str> = text.lines().collect();
    for pair in lines.chunks(2) {
        let [names, values] = pair else { continue };
        let (Some((g1, names)), Some((g2, values))) =
            (names.split_once(':'), values.split_once(':'))
        else {
            continue;
        };
        if g1 != g2 {
            continue;
        }
        for (n, v) in names.split_whitespace().zip(values.split_whitespace()) {
            if let Ok(v) = v.parse::<u64>() {
                out.insert(format!("{g1}.{n}"), v);
            }
        }
    }
    out
}

/// The counters of namespace `ns` (this one when `None`). Read through
/// /proc/thread-self: /proc/net follows the thread group leader's namespace, not the
/// reading thread's.
///
/// # Errors
/// No such namespace, or the files cannot be read.
pub fn read(ns: Option<&str>) -> Result<Counters, NetstatError> {
    netns::run_in(ns, || {
        let mut c = Counters::new();
        for f in [
            "/proc/thread-self/net/netstat",
            "/proc/thread-self/net/snmp",
        ] {
            let text = std::fs::read_to_string(f)
                .map_err(|source| NetstatError::Read { file: f, source })?;
            c.extend(parse(&text));
        }
        Ok(c)
    })?
}

/// Why the counters could not be read.
#[derive(Debug, thiserror::Error)]
pub enum NetstatError {
    /// The namespace could not be entered.
    #[error(transparent)]
    Netns(#[from] netns::NetnsError),
    /// A counters file could not be read.
    #[error("{file}")]
    Read {
        /// The file under /proc.
        file: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// `after − before` for `key` (0 when missing).
pub fn delta(before: &Counters, after: &Counters, key: &str) -> u64 {
    after
        .get(key)
        .copied()
        .unwrap_or(0)
        .saturating_sub(before.get(key).copied().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_groups_and_reads_this_namespace() {
        let c = parse(
            "TcpExt: SyncookiesSent TCPTimeouts\nTcpExt: 0 17\nIpExt: InNoRoutes\nIpExt: 3\n",
        );
        assert_eq!(c["TcpExt.TCPTimeouts"], 17);
        assert_eq!(c["IpExt.InNoRoutes"], 3);
        let here = read(None).unwrap();
        assert!(here.contains_key("TcpExt.TCPLossProbes") && here.contains_key("Tcp.RetransSegs"));
        assert_eq!(delta(&here, &here, "TcpExt.TCPTimeouts"), 0);
    }
}
