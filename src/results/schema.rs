//! The names of rttlab's JSON documents and lines. Every JSON object rttlab prints
//! carries `"schema": "rttlab.<kind>/<version>"` first, so a consumer reading a mixed
//! stream (`passive --json --summary`, `rr -D --json`) knows each line's shape, and a
//! version bump is visible. The JSON Schema of each kind is `docs/schema/<kind>.json`;
//! `tests/json_schema.rs` validates every command's `--json` output against it.
//!
//! Conventions every kind follows: numbers carry their unit in the key (`rtt_us`,
//! `elapsed_s`, `interval_us`), never `{"secs", "nanos"}`; percentiles are an object
//! (`{"p50": …, "p999": …}`); endpoints are `"v4:port"` or `"[v6]:port"`; a round
//! trip is `rtt`, whatever layer measured it.

use serde::Serialize;

/// `rttlab rr --json`.
pub const RR: &str = "rttlab.rr/1";
/// `rttlab rr -D … --json`: an interim line.
pub const RR_INTERIM: &str = "rttlab.rr-interim/1";
/// `rttlab rr --anatomy --slow-log FILE`: one line per slow transaction.
pub const RR_SLOW: &str = crate::probe::anatomy::SLOW_SCHEMA;
/// `rttlab rr --raw-log FILE`: one line per transaction.
pub const RR_RAW: &str = crate::probe::rr::RAW_SCHEMA;
/// `rttlab ping --json`.
pub const PING: &str = "rttlab.ping/1";
/// `rttlab tcpinfo --json`: one line per socket (and sample time).
pub const TCPINFO: &str = "rttlab.tcpinfo/1";
/// `rttlab passive --json`: one line per RTT sample.
pub const PASSIVE_SAMPLE: &str = "rttlab.passive-sample/1";
/// `rttlab passive --json --summary-interval`: one line per interval.
pub const PASSIVE_INTERVAL: &str = "rttlab.passive-interval/1";
/// `rttlab passive --json --summary`: per-flow and total statistics.
pub const PASSIVE_SUMMARY: &str = "rttlab.passive-summary/1";
/// `rttlab passive --json --histogram`: one line per method and place.
pub const PASSIVE_HISTOGRAM: &str = "rttlab.passive-histogram/1";
/// `rttlab passive --json --sampler`: the sampled metric's periods.
pub const PASSIVE_SAMPLER: &str = "rttlab.passive-sampler/1";
/// `rttlab passive --json --aggregate`: one line per prefix, method and place in
/// each interval.
pub const PASSIVE_AGGREGATE: &str = "rttlab.passive-aggregate/1";
/// `rttlab compare --json` (and `compare.json` in its results directory).
pub const COMPARE: &str = "rttlab.compare/1";
/// `rttlab rto model --json`.
pub const RTO_MODEL: &str = "rttlab.rto-model/1";
/// `rttlab lab list --json`: one line per lab (and `lab up --json`, the lab built).
pub const LAB: &str = "rttlab.lab/1";
/// `rttlab tune rto-min show --json`.
pub const TUNE_RTO_MIN: &str = "rttlab.tune-rto-min/1";
/// `rttlab tune thin show --json`.
pub const TUNE_THIN: &str = "rttlab.tune-thin/1";
/// `rttlab tune syn-rto list --json`.
pub const TUNE_SYN_RTO: &str = "rttlab.tune-syn-rto/1";
/// `rttlab experiment … --json` and `rttlab report --json`: where a run's results are.
pub const EXPERIMENT: &str = "rttlab.experiment/1";

/// `rttlab explain --json`: one transaction of a watched service (or of a client of one)
/// per line.
pub const EXPLAIN_TRANSACTION: &str = "rttlab.explain-transaction/2";

/// `rttlab explain --out DIR`'s windows.jsonl: what one window of one side of one port
/// said (and the whole run's, at its end): a file's lines, not printed on stdout.
pub const EXPLAIN_WINDOW: &str = "rttlab.explain-window/1";

/// Every kind rttlab writes (on stdout, and explain's windows.jsonl), for the schema
/// files' test.
pub const ALL: [&str; 21] = [
    RR,
    RR_INTERIM,
    RR_SLOW,
    RR_RAW,
    PING,
    TCPINFO,
    PASSIVE_SAMPLE,
    PASSIVE_INTERVAL,
    PASSIVE_SUMMARY,
    PASSIVE_HISTOGRAM,
    PASSIVE_SAMPLER,
    PASSIVE_AGGREGATE,
    COMPARE,
    RTO_MODEL,
    LAB,
    TUNE_RTO_MIN,
    TUNE_THIN,
    TUNE_SYN_RTO,
    EXPERIMENT,
    EXPLAIN_TRANSACTION,
    EXPLAIN_WINDOW,
];

/// A value serialised with `"schema"` as its first key (the value must serialise as
/// a JSON object).
#[derive(Serialize)]
pub struct Tagged<'a, T: Serialize + ?Sized> {
    /// The document's kind and version, `rttlab.<kind>/<version>` (one of the
    /// constants above); the `schema` key.
    pub schema: &'static str,
    /// The value whose keys follow `schema` in the same object.
    #[serde(flatten)]
    pub body: &'a T,
}

/// `body` as one JSON line (no newline) tagged with `schema`.
///
/// # Errors
/// `body` does not serialise as an object.
pub fn line<T: Serialize + ?Sized>(schema: &'static str, body: &T) -> serde_json::Result<String> {
    serde_json::to_string(&Tagged { schema, body })
}

/// `body` as an indented JSON document tagged with `schema`.
///
/// # Errors
/// `body` does not serialise as an object.
pub fn pretty<T: Serialize + ?Sized>(schema: &'static str, body: &T) -> serde_json::Result<String> {
    serde_json::to_string_pretty(&Tagged { schema, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tag comes first and the body's keys follow in their order. Witness: the
    /// bytes serde_json writes for a literal.
    #[test]
    fn the_schema_key_comes_first() {
        #[derive(Serialize)]
        struct B {
            z: u8,
            a: &'static str,
        }
        let t = line(RR, &B { z: 1, a: "x" }).unwrap();
        assert_eq!(t, r#"{"schema":"rttlab.rr/1","z":1,"a":"x"}"#);
    }

    /// Names follow `rttlab.<kind>/<version>` and are all different.
    #[test]
    fn names_are_distinct_and_well_formed() {
        let mut seen = std::collections::HashSet::new();
        for n in ALL {
            let (kind, version) = n
                .strip_prefix("rttlab.")
                .and_then(|r| r.split_once('/'))
                .unwrap();
            assert!(
                kind.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'),
                "{n}"
            );
            assert!(version.parse::<u32>().is_ok(), "{n}");
            assert!(seen.insert(kind), "{n}");
        }
    }
}
