//! The human formats, by snapshot (insta; `cargo insta review` after an intended
//! change) on inputs that give the same bytes every run: captures from the corpus, the
//! retransmission model. What they witness: the table style (upper-case headers with the
//! unit after an underscore, no spaces in headers or row labels, numbers right-aligned,
//! the same statistics in the same column order) and that the numbers do not move
//! unnoticed. The header style is also checked for every table the sources build.

use crate::common::{bin, corpus};
use std::process::Command;

fn stdout_of(args: &[&str]) -> String {
    let o = Command::new(bin()).args(args).output().unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// A header of rttlab's style: upper case, digits and underscores (a dot only inside a
/// percentile's number: `P99.9`), then optionally a unit after an underscore
/// (`P50_us`, `MAX_BACKLOG_B`, `DELIVERY_Mbps`).
fn header_ok(h: &str) -> bool {
    let name = ["_us", "_ms", "_s", "_ns", "_B", "_Mbps", "_pct", "_jiffies"]
        .iter()
        .find_map(|u| h.strip_suffix(u))
        .unwrap_or(h);
    let b = name.as_bytes();
    let dot_ok = |i: usize| {
        name.starts_with('P')
            && i > 1
            && b[i - 1].is_ascii_digit()
            && b.get(i + 1).is_some_and(u8::is_ascii_digit)
    };
    !name.is_empty()
        && b.iter().enumerate().all(|(i, &c)| {
            c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_' || (c == b'.' && dot_ok(i))
        })
}

#[test]
fn the_header_style_test_can_fail() {
    for good in [
        "MIN_us",
        "P999_us",
        "P99.9_us",
        "P99.99",
        "HOST",
        "MAX_BACKLOG_B",
        "DELIVERY_Mbps",
        "TX_ERR",
    ] {
        assert!(header_ok(good), "{good}");
    }
    for bad in [
        "min µs",
        "rtt µs",
        "Mbit/s",
        "round trip",
        "host",
        "P.9",
        "P99._us",
        "MIN.5",
    ] {
        assert!(!header_ok(bad), "{bad}");
    }
}

/// Every `Table::new([...])` literal in src/ (reports and the CLI's own tables) has
/// headers in the house style. Witness: the source text itself.
#[test]
fn every_table_header_in_the_sources_follows_the_style() {
    fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    rust_files(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let mut checked = 0;
    let mut in_cli = 0;
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        // Tests build tables of their own (`Table::new(["name", "value"])`).
        let text = text.split("#[cfg(test)]").next().unwrap();
        for (at, _) in text.match_indices("Table::new([") {
            let rest = &text[at + "Table::new([".len()..];
            let list = &rest[..rest.find(']').unwrap()];
            for h in list.split(',').map(str::trim).filter(|h| !h.is_empty()) {
                let h = h.trim_matches('"');
                assert!(header_ok(h), "{}: header {h:?}", path.display());
                checked += 1;
                in_cli += usize::from(path.components().any(|c| c.as_os_str() == "cli"));
            }
        }
    }
    assert!(checked > 50, "only {checked} headers found");
    assert!(in_cli > 0, "no table of the CLI's own found");
}

#[test]
fn passive_summary_and_sampler_tables() {
    let text = stdout_of(&[
        "passive",
        "-r",
        corpus("rr-v6-gw.pcapng.gz").to_str().unwrap(),
        "-q",
        "--method",
        "both",
        "--summary",
        "--sampler",
        "1/2",
    ]);
    insta::assert_snapshot!(text);
}

#[test]
fn passive_histogram() {
    let text = stdout_of(&[
        "passive",
        "-r",
        corpus("rr-v4-gw.pcap.gz").to_str().unwrap(),
        "-q",
        "--histogram",
    ]);
    insta::assert_snapshot!(text);
}

#[test]
fn rto_model_table() {
    let text = stdout_of(&[
        "rto",
        "model",
        "--hz",
        "250",
        "--disruption",
        "10ms,100ms,1s",
    ]);
    insta::assert_snapshot!(text);
}

/// rr's and ping's table: the summary columns in the shared order, for a fixed set of
/// samples (1 … 1000 µs; arithmetic: P50 500, P90 900, max 1000, mean 500.5).
#[test]
fn rr_and_ping_summary_columns() {
    let mut h = rttlab::stats::LatencyHistogram::new();
    for us in 1..=1000u64 {
        h.record_ns(us * 1000);
    }
    let s = rttlab::stats::Summary::from_histogram(&h, &rttlab::stats::DEFAULT_PERCENTILES);
    let text = rttlab::report::summary_table("transaction", &s);
    // Read at 80 columns, with ms-range values and the longest row label too.
    for l in text.lines() {
        assert!(l.chars().count() <= 80, "{l:?}");
    }
    let mut wide = rttlab::stats::LatencyHistogram::new();
    for us in 1..=20_000u64 {
        wide.record_ns(us * 1000);
    }
    let w = rttlab::report::summary_table(
        "from_intended",
        &rttlab::stats::Summary::from_histogram(&wide, &rttlab::stats::DEFAULT_PERCENTILES),
    );
    for l in w.lines() {
        assert!(l.chars().count() <= 80, "{l:?}");
    }
    insta::assert_snapshot!(text);
}

/// compare's text at 80 and 60 columns, from the committed lab record. Witness: the
/// text's own lines: none wider than the width (the table is 78 wide at any width),
/// no padding runs (the WHAT column once pushed its cells 40 spaces right), every
/// explanation a bullet with a hanging indent.
#[test]
fn compare_text_fits_the_width() {
    let r: rttlab::results::compare::CompareResult =
        serde_json::from_str(&std::fs::read_to_string(corpus("compare-lab.json")).unwrap())
            .unwrap();
    for width in [80, 60] {
        let text = rttlab::report::compare::render(&r, width);
        let (table, prose) = text.split_once("\nA sample is:").unwrap();
        for l in table.lines() {
            assert!(l.chars().count() <= 80, "{l:?}");
        }
        for l in prose.lines() {
            assert!(l.chars().count() <= width, "{width}: {l:?}");
            // Names are aligned (15 wide); nothing is pushed far right.
            assert!(!l.contains(&" ".repeat(20)), "{width}: padding in {l:?}");
        }
        let why = prose.split_once("Why they differ:\n").unwrap().1;
        assert!(why
            .lines()
            .all(|l| l.starts_with("- ") || l.starts_with("  ")));
        assert!(why.lines().filter(|l| l.starts_with("- ")).count() == r.explanations.len());
    }
}

/// `--help` wraps to the terminal: 80 columns through a pipe (clap alone would take
/// 100), COLUMNS when set. Witness: the help text's own lines (a word longer than the
/// room, such as a value list, may stand alone).
#[test]
fn help_wraps_to_the_terminal() {
    for (columns, width) in [(None, 80), (Some("60"), 60)] {
        for sub in [&[][..], &["compare"], &["rr"], &["experiment"]] {
            let mut c = Command::new(bin());
            c.args(sub).arg("--help").env_remove("COLUMNS");
            if let Some(v) = columns {
                c.env("COLUMNS", v);
            }
            let o = c.output().unwrap();
            let text = String::from_utf8(o.stdout).unwrap();
            for l in text.lines() {
                let words = l.split_whitespace().count();
                assert!(
                    l.chars().count() <= width || words == 1,
                    "{sub:?} at {width}: {l:?}"
                );
            }
        }
    }
}
