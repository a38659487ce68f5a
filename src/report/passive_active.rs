//! `experiment passive-vs-active`'s tables, charts (the seeds' figures) and report.

use super::html::Page;
use super::svg::{LineChart, Scale, Series, Unit};
use super::table::Table;
use crate::results::passive_active::{read_samples, stats, LayerStats, Scenario, ScenarioResult};
use crate::results::{read_run, write_file, ResultsError};
use crate::stats::{MedianCi, CI_LEVEL};
use std::path::Path;

/// A scenario and its samples: (layer, t_s, rtt_ms).
pub type WithSamples = (ScenarioResult, Vec<(String, f64, f64)>);

const LAYERS: [(&str, &str); 3] = [
    ("icmp", "icmp (ping)"),
    ("app", "app echo"),
    ("tcp_ts", "TCP TS, passive"),
];

fn layer_series(rows: &[(String, f64, f64)], layer: &str) -> Vec<(f64, f64)> {
    rows.iter()
        .filter(|r| r.0 == layer)
        .map(|r| (r.1, r.2))
        .collect()
}

/// Each layer's statistics recomputed from the samples, with the unanswered counts
/// recorded at the time.
fn layer_stats(r: &WithSamples) -> Vec<LayerStats> {
    LAYERS
        .iter()
        .map(|(l, _)| {
            let unanswered =
                r.0.layers
                    .iter()
                    .find(|x| x.layer == *l)
                    .map_or(0, |x| x.unanswered);
            stats(l, &layer_series(&r.1, l), unanswered)
        })
        .collect()
}

/// One block per scenario: each layer's samples and RTT statistics (ms).
pub fn tables(results: &[WithSamples]) -> String {
    let mut t = Table::new([
        "SCENARIO",
        "LAYER",
        "SAMPLES",
        "UNANSWERED",
        "MEAN_ms",
        "P5_ms",
        "P50_ms",
        "P95_ms",
        "MAX_ms",
        "NOTE",
    ]);
    let several = results.iter().any(|r| r.0.trial > 0);
    for r in results {
        for (k, l) in layer_stats(r).iter().enumerate() {
            t.row([
                if k == 0 && several {
                    format!("{}#{}", r.0.scenario, r.0.trial + 1)
                } else if k == 0 {
                    r.0.scenario.clone()
                } else {
                    String::new()
                },
                l.layer.clone(),
                l.samples.to_string(),
                l.unanswered.to_string(),
                super::table::one_decimal(l.mean_ms),
                super::table::one_decimal(l.p5_ms),
                super::table::one_decimal(l.p50_ms),
                super::table::one_decimal(l.p95_ms),
                super::table::one_decimal(l.max_ms),
                if k == 0 {
                    let mut n = r.0.error.clone().unwrap_or_default();
                    if let Some(x) = r.0.echo_retransmissions {
                        n = format!("{n} echo retransmissions {x}").trim().to_string();
                    }
                    if r.0.bulk_bytes > 0 {
                        n = format!("{n} bulk {:.1} MB", r.0.bulk_bytes as f64 / 1e6);
                    }
                    n
                } else {
                    String::new()
                },
            ]);
        }
    }
    let mut text = format!(
        "RTT by layer, measured together through the lab (Strowes, Passively Measuring TCP Round-trip Times){}\n{}",
        if several { ", each trial (#k)" } else { "" },
        t.render()
    );
    if several {
        text += &across_table(results);
    }
    text
}

/// The scenarios in the order they first appear, each with its trials in trial order.
fn by_scenario(results: &[WithSamples]) -> Vec<(String, Vec<&WithSamples>)> {
    let mut out: Vec<(String, Vec<&WithSamples>)> = Vec::new();
    for r in results {
        match out.iter_mut().find(|(n, _)| *n == r.0.scenario) {
            Some((_, v)) => v.push(r),
            None => out.push((r.0.scenario.clone(), vec![r])),
        }
    }
    for (_, v) in &mut out {
        v.sort_by_key(|r| r.0.trial);
    }
    out
}

/// A layer statistic over a scenario's trials: its median and 95 % interval.
fn across(
    trials: &[&WithSamples],
    layer: &str,
    f: fn(&LayerStats) -> Option<f64>,
) -> Option<MedianCi> {
    let v: Vec<f64> = trials
        .iter()
        .filter_map(|r| f(&stats(layer, &layer_series(&r.1, layer), 0)))
        .collect();
    MedianCi::of(&v, CI_LEVEL)
}

/// Each scenario's layers over its trials: the median of the trials' means and
/// medians, with 95 % order-statistic intervals.
fn across_table(results: &[WithSamples]) -> String {
    let mut t = Table::new([
        "SCENARIO",
        "LAYER",
        "TRIALS",
        "MEAN_ms",
        "MEAN_CI_ms",
        "P50_ms",
        "P50_CI_ms",
        "CI_COVERAGE_pct",
    ]);
    let ci = |c: &Option<MedianCi>| {
        c.filter(|c| c.n > 1)
            .map_or("-".into(), |c| format!("{:.1}-{:.1}", c.lo, c.hi))
    };
    for (name, trials) in by_scenario(results) {
        for (k, (l, _)) in LAYERS.iter().enumerate() {
            let mean = across(&trials, l, |s| s.mean_ms);
            let p50 = across(&trials, l, |s| s.p50_ms);
            t.row([
                if k == 0 { name.clone() } else { String::new() },
                (*l).to_string(),
                trials.len().to_string(),
                super::table::one_decimal(mean.map(|c| c.median)),
                ci(&mean),
                super::table::one_decimal(p50.map(|c| c.median)),
                ci(&p50),
                mean.filter(|c| c.n > 1)
                    .map_or("-".into(), |c| format!("{:.1}", 100.0 * c.coverage)),
            ]);
        }
    }
    format!(
        "\nAcross trials: the median of each trial's mean and median RTT, with the interval of that median (order statistics)\n{}",
        t.render()
    )
}

/// The samples' RTT axis (ms).
const RTT: AxisOf = ("RTT", Unit::Millis, Scale::Linear);
/// A cumulative distribution's axis.
const FRACTION: AxisOf = ("fraction of samples ≤ RTT", Unit::Plain, Scale::Linear);
/// Time since the scenario started (s).
const TIME: AxisOf = ("time", Unit::Seconds, Scale::Linear);

/// An axis: what it measures (without unit), its unit, its scale.
type AxisOf<'a> = (&'a str, Unit, Scale);

fn chart(title: &str, x: AxisOf, y: AxisOf, series: Vec<Series>) -> String {
    LineChart {
        title: title.into(),
        x_label: x.0.into(),
        y_label: y.0.into(),
        x_unit: x.1,
        y_unit: y.1,
        x_scale: x.2,
        y_scale: y.2,
        x_range: None,
        y_range: None,
        series,
    }
    .render()
}

/// Every sample of each layer over time, a line per layer.
fn timeline(rows: &[(String, f64, f64)]) -> Vec<Series> {
    LAYERS
        .iter()
        .enumerate()
        .map(|(k, (l, name))| Series::line(name, layer_series(rows, l), k))
        .collect()
}

/// Each layer's samples as a CDF.
fn distribution(rows: &[(String, f64, f64)]) -> Vec<Series> {
    LAYERS
        .iter()
        .enumerate()
        .map(|(k, (l, name))| {
            let mut v: Vec<f64> = layer_series(rows, l).into_iter().map(|x| x.1).collect();
            v.sort_by(f64::total_cmp);
            let n = v.len().max(1) as f64;
            let points = v
                .iter()
                .enumerate()
                .map(|(i, &r)| (r, (i + 1) as f64 / n))
                .collect();
            Series::line(name, points, k)
        })
        .collect()
}

/// Each layer's mean (or median) against a scenario's parameter: each point the median
/// over the scenario's trials, with its interval.
fn against(pts: &[(f64, Vec<&WithSamples>)], median: bool) -> Vec<Series> {
    LAYERS
        .iter()
        .enumerate()
        .map(|(k, (l, name))| {
            let f: fn(&LayerStats) -> Option<f64> =
                if median { |s| s.p50_ms } else { |s| s.mean_ms };
            let cis: Vec<(f64, MedianCi)> = pts
                .iter()
                .filter_map(|(x, trials)| Some((*x, across(trials, l, f)?)))
                .collect();
            let what = if median { "median" } else { "mean" };
            Series::of_medians(&format!("{name} {what}"), &cis, median, k)
        })
        .collect()
}

/// (file, caption, SVG) for each figure the scenarios allow.
pub fn charts(results: &[WithSamples]) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    if let Some(d) = results
        .iter()
        .filter(|r| r.0.scenario == "delay")
        .min_by_key(|r| r.0.trial)
    {
        out.push((
            "delay-cdf.svg".into(),
            "RTT alternating between 100 and 150 ms: each layer's distribution (the study's figure 2)".into(),
            chart("Changing delay: RTT distribution by layer", RTT, FRACTION, distribution(&d.1)),
        ));
        out.push((
            "delay-timeline.svg".into(),
            "every sample over time in the delay scenario".into(),
            chart("Changing delay: RTT over time", TIME, RTT, timeline(&d.1)),
        ));
    }
    let groups = by_scenario(results);
    let by = |f: fn(Scenario) -> Option<f64>| -> Vec<(f64, Vec<&WithSamples>)> {
        let mut v: Vec<_> = groups
            .iter()
            .filter_map(|(n, t)| Some((f(Scenario::parse(n)?)?, t.clone())))
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    };
    let loss = by(|s| match s {
        Scenario::Loss { percent } => Some(f64::from(percent)),
        _ => None,
    });
    let queue = by(|s| match s {
        Scenario::Queue { kbytes } => Some(f64::from(kbytes)),
        _ => None,
    });
    if !loss.is_empty() {
        let mut s = against(&loss, false);
        s.extend(against(&loss, true));
        out.push((
            "loss.svg".into(),
            "mean (solid) and median (dashed) RTT of each layer against the loss rate, each the median over the scenario's trials with its 95 % interval (the study's figure 3)".into(),
            chart("RTT under random loss", ("loss (%)", Unit::Plain, Scale::Linear), ("RTT", Unit::Millis, Scale::Log), s),
        ));
    }
    if !queue.is_empty() {
        let mut s = against(&queue, false);
        s.extend(against(&queue, true));
        out.push((
            "queue.svg".into(),
            "mean (solid) and median (dashed) RTT against the bottleneck's queue, with a bulk flow, each the median over the scenario's trials with its 95 % interval (the study's figure 4)".into(),
            chart("RTT with a filled queue at 10 Mbit/s", ("queue (KB)", Unit::Plain, Scale::Linear), RTT, s),
        ));
        if let Some((kb, r)) = queue.last().and_then(|(kb, t)| Some((kb, *t.first()?))) {
            out.push((
                "queue-timeline.svg".into(),
                format!("every sample over time with a {kb} KB queue (the study's figure 5)"),
                chart(
                    &format!("{kb} KB queue: RTT over time"),
                    TIME,
                    RTT,
                    timeline(&r.1),
                ),
            ));
        }
    }
    out
}

/// The seed's findings next to ours, each computed from the samples.
pub fn findings(results: &[WithSamples]) -> Vec<String> {
    let mut out = Vec::new();
    let groups = by_scenario(results);
    let mean = |t: &[&WithSamples], l: &str| across(t, l, |s| s.mean_ms).map(|c| c.median);
    for (name, trials) in &groups {
        let (i, a, t) = (
            mean(trials, "icmp"),
            mean(trials, "app"),
            mean(trials, "tcp_ts"),
        );
        let (Some(i), Some(a), Some(t)) = (i, a, t) else {
            continue;
        };
        let spread = |x: f64, y: f64| 100.0 * (x - y).abs() / y.max(1e-9);
        match Scenario::parse(name) {
            Some(Scenario::Delay) => out.push(format!(
                "Changing delay — the study: the three layers' means within 1 %. Here: icmp {i:.1}, app {a:.1}, TCP TS {t:.1} ms (app {:.1} %, TS {:.1} % from icmp).",
                spread(a, i),
                spread(t, i)
            )),
            Some(Scenario::Loss { percent }) => {
                let seed = match percent {
                    5 => " (study: app mean 196.4 ms, 92.4 ms above TCP's)",
                    10 => " (study: app mean 400.3 ms)",
                    15 => " (study: app mean 1.2 s)",
                    20 => " (study: app mean 17.7 s)",
                    _ => "",
                };
                out.push(format!(
                    "{percent} % loss — app mean {a:.1} ms{seed}, TCP TS mean {t:.1} ms, icmp {i:.1} ms: the application waits {:.1} ms more than TCP measures.",
                    a - t
                ));
                let app_median = across(trials, "app", |s| s.p50_ms).map(|c| c.median);
                if let (20, Some(m)) = (percent, app_median) {
                    let here = if m < 1000.0 {
                        format!("Here the median is {m:.1} ms: no backlog formed, the connection recovering from each loss within the second (this kernel has RACK-TLP loss detection, the study's was of 2016; the cause is not isolated here).")
                    } else {
                        format!("Here too a backlog formed: median {:.1} s.", m / 1e3)
                    };
                    out.push(format!(
                        "At 20 % the study's application median was about 12 s: its echo connection fell behind one message per second and the backlog grew through the 180 s run. {here}"
                    ));
                }
            }
            Some(Scenario::Queue { kbytes }) => out.push(format!(
                "{kbytes} KB queue — icmp {i:.1}, app {a:.1}, TCP TS {t:.1} ms: all inflated alike by the queue (study, 300 KB: all within 2 ms of each other, 100 to ~250 ms)."
            )),
            None => {}
        }
    }
    if let Some(trend) = loss_trend(&groups) {
        out.push(trend);
    }
    out
}

/// Whether the application's mean RTT grows with the loss rate across the loss
/// scenarios, from the medians over trials and their intervals: a rise is called one
/// only where the neighbours' intervals do not overlap.
fn loss_trend(groups: &[(String, Vec<&WithSamples>)]) -> Option<String> {
    let mut pts: Vec<(u32, MedianCi)> = groups
        .iter()
        .filter_map(|(n, t)| match Scenario::parse(n)? {
            Scenario::Loss { percent } => Some((percent, across(t, "app", |s| s.mean_ms)?)),
            _ => None,
        })
        .collect();
    pts.sort_by_key(|p| p.0);
    if pts.len() < 2 || pts.iter().all(|(_, c)| c.n < 2) {
        return None;
    }
    let list: Vec<String> = pts
        .iter()
        .map(|(p, c)| format!("{p} % {} ms (n {})", c.display(1), c.n))
        .collect();
    let steps: Vec<String> = pts
        .windows(2)
        .map(|w| {
            let ((p0, a), (p1, b)) = (&w[0], &w[1]);
            let verdict = if b.lo > a.hi {
                "rises (intervals apart)"
            } else if b.hi < a.lo {
                "falls (intervals apart)"
            } else if b.median >= a.median {
                "rises, within the intervals' overlap"
            } else {
                "falls, within the intervals' overlap"
            };
            format!("{p0}→{p1} % {verdict}")
        })
        .collect();
    Some(format!(
        "Application mean RTT against loss, the median over trials [95 % interval]: {}. Step by step: {}.",
        list.join(", "),
        steps.join("; ")
    ))
}

/// The report page.
pub fn html(
    run_json: &str,
    results: &[WithSamples],
    tables: &str,
    charts: &[(String, String, String)],
) -> String {
    let mut p = Page::new("Passive vs active RTT: ICMP, application echo and TCP timestamps");
    p.para("The experiments of Strowes, \"Passively Measuring TCP Round-trip Times\", run by `rttlab experiment passive-vs-active` in the lab (two network namespaces and the built-in emulator instead of three VMs with tc): ping once per second, the study's two-thread timestamp echo over TCP (TCP_NODELAY) once per second, and the TCP timestamp RTT of the echo connection from a live capture on the client, all at once, for each scenario. The passive samples are each RTT, not a smoothed one, as in the study.");
    p.para("Every number comes from the <scenario>.samples.csv files (t_s, layer, rtt_ms: every sample) and trials.jsonl; the tables and charts are recomputed from the samples.");
    p.heading("Findings: the study's next to ours");
    for f in findings(results) {
        p.para(&f);
    }
    p.heading("Charts");
    for (name, caption, svg) in charts {
        p.chart(name, caption, svg);
    }
    p.heading("Tables").pre(tables).run_facts(run_json);
    p.render()
}

/// Write `tables.txt`, the charts and `report.html`, recomputing every layer's
/// statistics from the samples files; returns the tables' text.
///
/// # Errors
/// A file could not be read or written.
pub fn write(out: &Path, results: &[ScenarioResult]) -> Result<String, ResultsError> {
    // The seed's order (trials ran shuffled), each scenario's trials in turn.
    let mut results = results.to_vec();
    results.sort_by_key(|r| (Scenario::order(&r.scenario), r.trial));
    let mut series = Vec::new();
    let mut files = std::collections::HashSet::new();
    for r in &results {
        // Each trial writes its own file: one named twice would be read, and counted,
        // once per record naming it.
        if !r.samples_file.is_empty() && !files.insert(&r.samples_file) {
            return Err(crate::results::invalid(
                &out.join(&r.samples_file),
                format!(
                    "named by two trials' records (again by scenario {} trial {}): each trial writes its own",
                    r.scenario, r.trial
                ),
            ));
        }
        let rows = if r.samples_file.is_empty() {
            Vec::new()
        } else {
            read_samples(out, &r.samples_file)?
        };
        // The file holds what the record counted, layer by layer (a file cut to its
        // header once showed a trial of no samples beside a record of sixty).
        for l in &r.layers {
            let n = rows
                .iter()
                .filter(|(layer, _, _)| *layer == l.layer)
                .count() as u64;
            if n != l.samples {
                return Err(crate::results::invalid(
                    &out.join(&r.samples_file),
                    format!(
                        "{n} {} samples, where trials.jsonl counts {} for scenario {} trial {}",
                        l.layer, l.samples, r.scenario, r.trial
                    ),
                ));
            }
        }
        series.push((r.clone(), rows));
    }
    let text = tables(&series);
    let charts = charts(&series);
    write_file(out, "tables.txt", &text)?;
    for (name, _, svg) in &charts {
        write_file(out, name, svg)?;
    }
    let (_, run) = read_run(out)?;
    write_file(out, "report.html", &html(&run, &series, &text, &charts))?;
    Ok(text)
}
