//! `experiment syn-rto`'s table, chart and report.

use super::html::Page;
use super::svg::{LineChart, Scale, Series, Unit};
use super::table::Table;
use crate::results::syn_rto::{Case, CASES};
use crate::results::{read_histogram, read_run, write_file, ResultsError};
use crate::stats::LatencyHistogram;
use std::path::Path;

/// One row per case (ms).
pub fn table(cases: &[Case]) -> String {
    let mut t = Table::new([
        "CASE",
        "CONNECTIONS",
        "FAILED",
        "SYN_RETRANS",
        "MIN_ms",
        "P50_ms",
        "P90_ms",
        "MAX_ms",
        "PREDICTED_ms",
        "NOTE",
    ]);
    for c in cases {
        t.row([
            c.case.clone(),
            c.connections.to_string(),
            c.failed.to_string(),
            c.syn_retransmits.to_string(),
            super::table::one_decimal(c.min_ms),
            super::table::one_decimal(c.p50_ms),
            super::table::one_decimal(c.p90_ms),
            super::table::one_decimal(c.max_ms),
            format!("{:.1}", c.predicted_ms),
            c.error.clone().unwrap_or_default(),
        ]);
    }
    let cells = super::trials::group(
        cases,
        |c| c.case.replace(' ', "_"),
        |c| vec![c.p50_ms, c.p90_ms],
    );
    format!(
        "Connection set-up time (connect() to its return) when the first SYN is lost (Hogan and Jones, A Brief Look at Tuning TCP Retransmission Behaviour, appendix)\n{}",
        t.render()
    ) + &super::trials::across(
        "By case, across trials",
        "CASE",
        &["P50_ms", "P90_ms"],
        &cells,
    )
}

/// Each case's set-up times as a cumulative distribution (log ms axis).
pub fn chart(hists: &[(String, LatencyHistogram)]) -> String {
    let series = hists
        .iter()
        .enumerate()
        .filter(|(_, (_, h))| h.count() > 0)
        .map(|(k, (name, h))| {
            let total = h.count() as f64;
            let mut seen = 0u64;
            Series {
                name: name.clone(),
                points: h
                    .hdr()
                    .iter_recorded()
                    .map(|v| {
                        seen += v.count_since_last_iteration();
                        (v.value_iterated_to() as f64 / 1e6, seen as f64 / total)
                    })
                    .collect(),
                secondary: false,
                colour: Some(k),
                intervals: Vec::new(),
                markers: false,
            }
        })
        .collect();
    LineChart {
        title: "Connection set-up time, first SYN lost".into(),
        x_label: "connect() time".into(),
        y_label: "fraction of connections ≤ time".into(),
        x_scale: Scale::Log,
        y_scale: Scale::Linear,
        x_unit: Unit::Millis,
        y_unit: Unit::Plain,
        x_range: None,
        y_range: Some((0.0, 1.0)),
        series,
    }
    .render()
}

/// The report page.
pub fn html(run_json: &str, cases: &[Case], table: &str, chart: &str) -> String {
    let mut p = Page::new("SYN initial RTO: connection set-up when the first SYN is lost");
    p.para("The appendix of Hogan and Jones, \"A Brief Look at Tuning TCP Retransmission Behaviour\", run by `rttlab experiment syn-rto` in the lab: host b drops the first SYN of every connection (nftables, a set of client ports already seen), a connects again and again; first with the kernel's initial RTO, then with rttlab's sock_ops override for b's address. TcpExt.TCPSynRetrans in a's namespace counts the SYNs sent again. Every number comes from trials.jsonl and the case*.hist.csv files.");
    p.heading("Findings: the study's next to ours");
    let med = |k: usize| {
        cases
            .iter()
            .find(|c| c.case == CASES[k])
            .and_then(|c| c.p50_ms)
    };
    if let (Some(clean), Some(lost), Some(fixed)) = (med(0), med(1), med(2)) {
        p.para(&format!(
            "The study: a lost SYN costs the kernel's 1 s initial RTO (TCP_TIMEOUT_INIT), and a sock_ops program setting BPF_SOCK_OPS_TIMEOUT_INIT for chosen destinations cuts it to what the program says. Here: {clean:.1} ms with no loss, {lost:.1} ms with the first SYN lost, {fixed:.1} ms with the override ({:.0}× faster).",
            lost / fixed.max(1e-9)
        ));
    }
    for c in cases
        .iter()
        .filter(|c| c.syn_retransmits > u64::from(c.connections))
    {
        p.para(&format!(
            "{}: {} SYNs sent again for {} connections: some SYN-ACKs came back later than the backed-off RTO (it doubles after each retransmission, tcp_retransmit_timer), so the kernel sent the SYN a third time.",
            c.case, c.syn_retransmits, c.connections
        ));
    }
    p.para("The override is whole jiffies (HZ in run.json), and the timer fires on the next tick of the timer wheel, so a set-up time can exceed the prediction by up to a jiffy.");
    p.heading("Chart");
    p.chart(
        "setup-time.svg",
        "set-up times of each case, cumulative",
        chart,
    );
    p.heading("Table").pre(table).run_facts(run_json);
    p.render()
}

/// Write `tables.txt`, `setup-time.svg` and `report.html`; returns the table.
///
/// # Errors
/// A file could not be written or read.
pub fn write(out: &Path, cases: &[Case]) -> Result<String, ResultsError> {
    // The cases in the order they are defined (trials ran shuffled), trials in turn.
    let mut cases = cases.to_vec();
    cases.sort_by_key(|c| (CASES.iter().position(|x| *x == c.case), c.trial));
    let cases = &cases[..];
    // One distribution per case: its trials' connections together.
    let mut hists: Vec<(String, LatencyHistogram)> = Vec::new();
    let mut files = std::collections::HashSet::new();
    for c in cases {
        if let Some(f) = &c.file {
            // Each trial writes its own: one named twice would be counted twice.
            if !files.insert(f) {
                return Err(crate::results::invalid(
                    &out.join(f),
                    format!(
                        "named by two trials' records (again by case {} trial {}): each trial writes its own",
                        c.case, c.trial
                    ),
                ));
            }
            let h = read_histogram(out, f)?;
            match hists.iter_mut().find(|(n, _)| *n == c.case) {
                Some((_, all)) => all.merge(&h),
                None => hists.push((c.case.clone(), h)),
            }
        }
    }
    let text = table(cases);
    let chart = chart(&hists);
    write_file(out, "tables.txt", &text)?;
    write_file(out, "setup-time.svg", &chart)?;
    let (_, run) = read_run(out)?;
    write_file(out, "report.html", &html(&run, cases, &text, &chart))?;
    Ok(text)
}
