//! The blackout experiment's tables: measured median idle, the `linux` model's
//! prediction and the error per cell, laid out as the tables of Hogan and Jones, "A
//! Brief Look at Tuning TCP Retransmission Behaviour", one set per recovery path.

use super::rto::seed_layout;
use super::svg::{LineChart, Scale, Series, Unit};
use crate::results::blackout::{CellSummary, Cells, NO_DROP};
use crate::results::{write_file, ResultsError};
use std::path::Path;

/// Every table, each with a title line.
pub fn tables(cells: &[CellSummary]) -> String {
    let mut paths: Vec<&str> = cells.iter().map(|c| c.path.as_str()).collect();
    paths.sort_unstable();
    paths.dedup();
    let mut out = String::new();
    for p in paths {
        if p == NO_DROP {
            out += &no_drop(cells);
            continue;
        }
        out += &path_tables(cells, p);
        out += &misses(cells, p);
        out.push('\n');
    }
    out
}

/// Recovery path `p`'s tables in Hogan and Jones's layout: measured median idle, its
/// interval, the model's prediction and the error.
fn path_tables(cells: &[CellSummary], p: &str) -> String {
    let mut out = String::new();
    let sorted = |f: &dyn Fn(&CellSummary) -> String, p: &str| -> Vec<(f64, f64, u8, String)> {
        cells
            .iter()
            .filter(|c| c.path == p)
            .map(|c| {
                (
                    f64::from(c.disruption_ms),
                    f64::from(c.rto_min_ms),
                    u8::from(c.thin),
                    f(c),
                )
            })
            .collect()
    };
    let n: usize = cells.iter().filter(|c| c.path == p).map(|c| c.n).sum();
    let within = cells.iter().filter(|c| c.path == p && c.within).count();
    let total = cells.iter().filter(|c| c.path == p).count();
    out += &format!(
        "Recovery path {p}: {n} trials; the linux model is within max(5 ms, 5 %) of the median in {within} of {total} cells ({:.0} %)\n\n",
        100.0 * within as f64 / total.max(1) as f64
    );
    out += "Measured median TCP idle (ms)\n";
    out += &seed_layout("Practice", &sorted(&|c| format!("{:.1}", c.median_ms), p));
    if cells.iter().any(|c| c.path == p && c.n > 1) {
        let lowest = cells
            .iter()
            .filter(|c| c.path == p && c.n > 1)
            .map(|c| c.ci_coverage)
            .fold(1.0, f64::min);
        out += &format!(
            "\nInterval of the median (ms; order statistics, 95 % where the cell's trials allow; the lowest coverage here is {:.1} %: with n trials [min, max] covers 1 − 2⁻⁽ⁿ⁻¹⁾)\n",
            100.0 * lowest
        );
        out += &seed_layout(
            "Interval",
            &sorted(
                &|c| {
                    if c.n > 1 {
                        format!("{:.1}–{:.1}", c.ci_low_ms, c.ci_high_ms)
                    } else {
                        "-".into()
                    }
                },
                p,
            ),
        );
    }
    out += "\nPredicted by the linux model (ms)\n";
    out += &seed_layout("Model", &sorted(&|c| format!("{:.1}", c.predicted_ms), p));
    out += "\nMeasured − predicted (ms; * outside max(5 ms, 5 %), b: a retransmission is due within a jiffy of D)\n";
    out += &seed_layout(
        "Error",
        &sorted(
            &|c| {
                format!(
                    "{:+.1}{}",
                    c.median_ms - c.predicted_ms,
                    match (c.within, c.boundary_ms.is_some()) {
                        (true, false) => "",
                        (true, true) => "b",
                        (false, false) => "*",
                        (false, true) => "*b",
                    }
                )
            },
            p,
        ),
    );
    out
}

/// The cells of path `p` the model misses, each with its trials and the likely cause.
fn misses(cells: &[CellSummary], p: &str) -> String {
    let mut out = String::new();
    let misses: Vec<&CellSummary> = cells.iter().filter(|c| c.path == p && !c.within).collect();
    if !misses.is_empty() {
        out += "\nCells the model misses:\n";
        for c in misses {
            let idles: Vec<String> = c.idles_ms.iter().map(|x| format!("{x:.1}")).collect();
            let why = match c.boundary_ms {
                Some(b) => format!(
                    "a (re)transmission is due at {b:.1} ms, within a jiffy of D: the lost packet left up to an RTT before the blackout and timers fire up to a jiffy late, so it lands on either side of the end (bimodal)"
                ),
                None => "no retransmission is due near D: timer and scheduling latency on this host (see the trials' spread)".into(),
            };
            out += &format!(
                "- {} rto_min {} ms, D {} ms: measured {:.1} (trials {}), model {:.1}: {why}\n",
                if c.thin { "thin" } else { "thick" },
                c.rto_min_ms,
                c.disruption_ms,
                c.median_ms,
                idles.join(", "),
                c.predicted_ms
            );
        }
    }
    out
}

/// Trials whose blackout dropped nothing, one line per cell: not compared with the
/// model (see [`crate::results::blackout::path_of`]).
fn no_drop(cells: &[CellSummary]) -> String {
    let stalled: Vec<&CellSummary> = cells.iter().filter(|c| c.path == NO_DROP).collect();
    let n: usize = stalled.iter().map(|c| c.n).sum();
    let mut out = format!(
        "Blackout met no frame: {n} trials. The emulator dropped nothing in its window although TCP_RR sends thousands of frames a second, so the hosts or the emulator were stalled (scheduling, other load) for all of D; these trials did not test the blackout and are left out of the model's tables and charts:\n"
    );
    for c in stalled {
        let idles: Vec<String> = c.idles_ms.iter().map(|x| format!("{x:.1}")).collect();
        out += &format!(
            "- {} rto_min {} ms, D {} ms: idle {} ms\n",
            if c.thin { "thin" } else { "thick" },
            c.rto_min_ms,
            c.disruption_ms,
            idles.join(", ")
        );
    }
    out.push('\n');
    out
}

fn config_name(rto_min_ms: u32, thin: bool) -> String {
    format!("{} {rto_min_ms} ms", if thin { "thin" } else { "thick" })
}

fn configs(cells: &[CellSummary]) -> Vec<(u32, bool)> {
    let mut c: Vec<(u32, bool)> = cells.iter().map(|c| (c.rto_min_ms, c.thin)).collect();
    c.sort_unstable();
    c.dedup();
    c
}

/// The measured median (one series per configuration and path) and the model (dashed,
/// one per configuration).
fn idle_series(cells: &[CellSummary]) -> Vec<Series> {
    let mut paths: Vec<&str> = cells.iter().map(|c| c.path.as_str()).collect();
    paths.sort_unstable();
    paths.dedup();
    let mut out = Vec::new();
    for (k, (r, t)) in configs(cells).into_iter().enumerate() {
        for p in &paths {
            let mine = || {
                cells
                    .iter()
                    .filter(move |c| (c.rto_min_ms, c.thin) == (r, t) && c.path == *p)
            };
            let points: Vec<(f64, f64)> = mine()
                .map(|c| (f64::from(c.disruption_ms), c.median_ms))
                .collect();
            let intervals = mine()
                .filter(|c| c.n > 1)
                .map(|c| (f64::from(c.disruption_ms), c.ci_low_ms, c.ci_high_ms))
                .collect();
            if !points.is_empty() {
                let suffix = if paths.len() > 1 {
                    format!(" ({p})")
                } else {
                    String::new()
                };
                out.push(Series {
                    name: format!("{}{suffix}", config_name(r, t)),
                    points,
                    secondary: false,
                    colour: Some(k),
                    intervals,
                    markers: true,
                });
            }
        }
    }
    for (k, (r, t)) in configs(cells).into_iter().enumerate() {
        let mut points: Vec<(f64, f64)> = cells
            .iter()
            .filter(|c| (c.rto_min_ms, c.thin) == (r, t))
            .map(|c| (f64::from(c.disruption_ms), c.predicted_ms))
            .collect();
        points.dedup_by(|a, b| a.0 == b.0);
        out.push(Series {
            name: format!("model {}", config_name(r, t)),
            points,
            secondary: true,
            colour: Some(k),
            intervals: Vec::new(),
            markers: false,
        });
    }
    out
}

/// Seed 001's charts: log-log overall, the three linear regions, and the improvement
/// over the default (thick, 200 ms). Returns (file name, SVG).
pub fn charts(cells: &[CellSummary]) -> Vec<(String, String)> {
    let series = idle_series(cells);
    let chart = |title: &str, log: bool, x: Option<(f64, f64)>| LineChart {
        title: title.into(),
        x_label: "disruption D".into(),
        y_label: "TCP idle, median".into(),
        x_scale: if log { Scale::Log } else { Scale::Linear },
        y_scale: if log { Scale::Log } else { Scale::Linear },
        x_unit: Unit::Millis,
        y_unit: Unit::Millis,
        x_range: x,
        y_range: None,
        series: series.clone(),
    };
    let mut out = vec![(
        "idle-loglog.svg".to_string(),
        chart("TCP idle after a blackout of D (log-log)", true, None).render(),
    )];
    for (name, lo, hi) in [
        ("idle-10-100ms.svg", 10.0, 100.0),
        ("idle-100ms-1s.svg", 100.0, 1000.0),
        ("idle-1-1.5s.svg", 1000.0, 1500.0),
    ] {
        out.push((
            name.into(),
            chart(
                &format!("TCP idle, D from {lo} to {hi} ms"),
                false,
                Some((lo, hi)),
            )
            .render(),
        ));
    }
    let default = |d: u32| {
        cells
            .iter()
            .filter(|c| (c.rto_min_ms, c.thin, c.disruption_ms) == (200, false, d))
            .max_by_key(|c| c.n)
            .map(|c| c.median_ms)
    };
    let improvement: Vec<Series> = configs(cells)
        .into_iter()
        .enumerate()
        .filter(|&(_, c)| c != (200, false))
        .map(|(k, (r, t))| Series {
            name: config_name(r, t),
            points: cells
                .iter()
                .filter(|c| (c.rto_min_ms, c.thin) == (r, t))
                .filter_map(|c| {
                    Some((
                        f64::from(c.disruption_ms),
                        default(c.disruption_ms)? - c.median_ms,
                    ))
                })
                .collect(),
            secondary: false,
            colour: Some(k),
            intervals: Vec::new(),
            markers: true,
        })
        .collect();
    out.push((
        "improvement.svg".into(),
        LineChart {
            title: "Improvement over the default (thick, rto_min 200 ms)".into(),
            x_label: "disruption D".into(),
            y_label: "idle saved".into(),
            x_scale: Scale::Log,
            y_scale: Scale::Linear,
            x_unit: Unit::Millis,
            y_unit: Unit::Millis,
            x_range: None,
            y_range: None,
            series: improvement,
        }
        .render(),
    ));
    out
}

/// A self-contained report: settings, tables, charts inline.
pub fn html(run_json: &str, tables_text: &str, charts: &[(String, String)]) -> String {
    let mut p =
        super::html::Page::new("TCP idle after a blackout: practice next to the linux model");
    p.para("The experiment of Hogan and Jones, \"A Brief Look at Tuning TCP Retransmission Behaviour\", run by `rttlab experiment blackout`. Every number comes from trials.jsonl (one line per trial) in this directory; medians per cell and path are in summary.json.");
    p.heading("Charts");
    for (name, svg) in charts {
        p.chart(name, "", svg);
    }
    p.heading("Tables").pre(tables_text).run_facts(run_json);
    p.render()
}

/// Write the tables, charts and report of `trials` into the results directory `out`
/// (summary.json, tables.txt, *.svg, report.html), returning the tables' text.
///
/// # Errors
/// A write failed.
pub fn write(out: &Path, trials: Cells) -> Result<String, ResultsError> {
    let cells = trials.summaries();
    let text = tables(&cells);
    let json = serde_json::to_string_pretty(&cells)
        .map_err(crate::results::json(&out.join("summary.json")))?;
    write_file(out, "summary.json", &json)?;
    write_file(out, "tables.txt", &text)?;
    let measured: Vec<CellSummary> = cells
        .iter()
        .filter(|c| c.path != NO_DROP)
        .cloned()
        .collect();
    let charts = charts(&measured);
    for (name, svg) in &charts {
        write_file(out, name, svg)?;
    }
    let (_, run) = crate::results::read_run(out)?;
    write_file(out, "report.html", &html(&run, &text, &charts))?;
    Ok(text)
}
