//! `rttlab compare`'s table and its explanations.

use super::html::Page;
use super::svg::{LineChart, Series, StackedBars};
use super::table::Table;
use crate::passive::sampler::BOUNDS_MS;
use crate::results::compare::{CompareResult, Layer};
use crate::results::{self, ResultsError};
use std::path::Path;

/// The layers side by side (µs), then the gaps explained.
pub fn render(r: &CompareResult) -> String {
    let f = |v: Option<f64>| v.map_or_else(|| "-".into(), |x| format!("{x:.1}"));
    let mut t = Table::new([
        "LAYER", "SAMPLES", "MIN_us", "P50_us", "P90_us", "P99_us", "MAX_us", "MEAN_us", "WHAT",
    ]);
    for l in &r.layers {
        t.row([
            l.name.to_string(),
            l.samples.to_string(),
            f(l.min_us),
            f(l.percentiles_us.p50),
            f(l.percentiles_us.p90),
            f(l.percentiles_us.p99),
            f(l.max_us),
            f(l.mean_us),
            l.what.to_string(),
        ]);
    }
    let mut s = format!(
        "RTT at every layer to {} ({} between transactions, {} s; capture on {})\n{}",
        r.server,
        humantime::format_duration(r.settings.interval),
        r.settings.duration.as_secs_f64(),
        r.capture_interface,
        t.render()
    );
    s.push_str("\nWhy they differ:\n");
    for e in &r.explanations {
        s.push_str(&format!("- {}\n", e));
    }
    for e in &r.errors {
        s.push_str(&format!("! {}\n", e));
    }
    s
}

/// Each layer's samples as a cumulative distribution over RTT (µs); the sampled
/// metric's as its buckets give it, which shows how coarse they are.
pub fn cdf_chart(r: &CompareResult) -> String {
    let mut series = Vec::new();
    for l in &r.layers {
        let Some(h) = l.histogram.as_ref().filter(|h| h.count() > 0) else {
            continue;
        };
        let total = h.count() as f64;
        let mut seen = 0u64;
        let points = h
            .hdr()
            .iter_recorded()
            .map(|v| {
                seen += v.count_since_last_iteration();
                (v.value_iterated_to() as f64 / 1e3, seen as f64 / total)
            })
            .collect();
        series.push(Series {
            name: l.name.clone(),
            points,
            dashed: false,
            colour: None,
            intervals: Vec::new(),
        });
    }
    if let Some(p) = r.sampler.iter().max_by_key(|p| p.samples) {
        let total = p.samples.max(1) as f64;
        let mut seen = 0u64;
        let mut points = Vec::new();
        // Bucket i counts samples below BOUNDS_MS[i]; stop once all are counted.
        for (&b, &c) in BOUNDS_MS.iter().zip(&p.buckets) {
            seen += c;
            points.push((b as f64 * 1e3, seen as f64 / total));
            if seen >= p.samples {
                break;
            }
        }
        series.push(Series {
            name: "sampled metric (buckets)".into(),
            points,
            dashed: true,
            colour: None,
            intervals: Vec::new(),
        });
    }
    // The axis spans the measured layers from their fastest sample to their P99.9
    // (the sampled metric's buckets, 0–1–2–4… ms, and a few stragglers would stretch it
    // and crowd the layers into a sliver); within a decade it is linear.
    let (lo, hi) = r
        .layers
        .iter()
        .filter_map(|l| l.histogram.as_ref().filter(|h| h.count() > 0))
        .filter_map(|h| Some((h.min_ns()? as f64 / 1e3, h.quantile_ns(0.999)? as f64 / 1e3)))
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), (a, b)| {
            (lo.min(a), hi.max(b))
        });
    let known = lo.is_finite() && hi > lo;
    let x_log = !known || hi / lo >= 10.0;
    let x_range = known.then(|| {
        if x_log {
            (lo / 1.2, hi * 1.2)
        } else {
            let pad = (hi - lo) * 0.05;
            ((lo - pad).max(0.0), hi + pad)
        }
    });
    LineChart {
        title: "RTT at every layer: cumulative distribution".into(),
        x_label: "RTT (µs)".into(),
        y_label: "fraction of samples ≤ RTT".into(),
        x_log,
        y_log: false,
        x_range,
        y_range: Some((0.0, 1.0)),
        series,
    }
    .render()
}

/// tcp_rr's anatomy at each percentile as stacked bars, with every other layer's
/// value at that percentile across them: what each measures of the transaction.
pub fn anatomy_chart(r: &CompareResult) -> Option<String> {
    let a = r
        .anatomy
        .as_ref()
        .filter(|a| !a.at_percentiles.is_empty())?;
    let names = a.at_percentiles[0]
        .parts_us
        .parts()
        .map(|(n, _)| n.to_string());
    let groups = a
        .at_percentiles
        .iter()
        .map(|c| {
            (
                format!("P{}", c.percentile),
                c.parts_us.parts().iter().map(|(_, v)| **v).collect(),
            )
        })
        .collect();
    let at = |l: &Layer, p: f64| -> Option<f64> {
        match &l.histogram {
            Some(h) if h.count() > 0 => h.quantile_ns(p / 100.0).map(|v| v as f64 / 1e3),
            _ => None,
        }
    };
    let markers = [
        "tcp_rr",
        "udp_rr",
        "icmp",
        "passive_seq",
        "passive_ts",
        "tcp_info_client",
    ]
    .iter()
    .filter_map(|name| r.layers.iter().find(|l| l.name == *name))
    .filter(|l| l.samples > 0)
    .map(|l| {
        (
            l.name.clone(),
            a.at_percentiles
                .iter()
                .map(|c| at(l, c.percentile))
                .collect(),
        )
    })
    .collect();
    Some(
        StackedBars {
            title: "tcp_rr taken apart at each percentile, every layer across it".into(),
            y_label: "µs".into(),
            segments: names.to_vec(),
            groups,
            markers,
        }
        .render(),
    )
}

/// Every layer's median (solid) and P99 (dashed) per time bin on one time axis, each
/// layer in its colour of the CDF: a spike lines up across the layers that saw it.
pub fn timeline_chart(r: &CompareResult) -> Option<String> {
    let tl = r.timeline.as_ref().filter(|t| !t.layers.is_empty())?;
    let mut series = Vec::new();
    for l in &tl.layers {
        let colour = r.layers.iter().position(|x| x.name == l.name);
        for (dashed, what) in [(false, "P50"), (true, "P99")] {
            series.push(Series {
                name: format!("{} {what}", l.name),
                points: l
                    .points
                    .iter()
                    .map(|p| (p.t_s, if dashed { p.p99_us } else { p.p50_us }))
                    .collect(),
                dashed,
                colour,
                intervals: Vec::new(),
            });
        }
    }
    let values = || series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let (lo, hi) = values().fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    Some(
        LineChart {
            title: format!(
                "Every layer over time: median and P99 per {} ms",
                fmt_ms(tl.bin_s)
            ),
            x_label: "time since the start (s)".into(),
            y_label: "RTT (µs)".into(),
            x_log: false,
            y_log: lo > 0.0 && hi / lo >= 10.0,
            x_range: None,
            y_range: None,
            series,
        }
        .render(),
    )
}

fn fmt_ms(s: f64) -> String {
    let ms = s * 1e3;
    if ms.fract() == 0.0 {
        format!("{ms:.0}")
    } else {
        format!("{ms}")
    }
}

/// The comparison as a self-contained page.
pub fn html(run_json: &str, r: &CompareResult, table: &str, cdf: &str) -> String {
    let f = |v: Option<f64>| v.map_or_else(|| "-".into(), |x| format!("{x:.1}"));
    let mut p = Page::new("rttlab compare: RTT at every layer");
    p.para(&format!(
        "To {} with {} between transactions for {} s, all layers at once; the passive engines and the sampled metric read the TCP_RR connection as captured on {}.",
        r.server,
        humantime::format_duration(r.settings.interval),
        r.settings.duration.as_secs_f64(),
        r.capture_interface
    ));
    p.heading("Layers (µs)");
    let rows = r
        .layers
        .iter()
        .map(|l| {
            vec![
                l.name.clone(),
                l.samples.to_string(),
                f(l.min_us),
                f(l.percentiles_us.p50),
                f(l.percentiles_us.p90),
                f(l.percentiles_us.p99),
                f(l.max_us),
                f(l.mean_us),
                l.what.clone(),
                if l.histogram.is_some() {
                    l.histogram_file(r.trial)
                } else {
                    "compare.json: sampler".into()
                },
            ]
        })
        .collect();
    p.table(
        &[
            "layer",
            "samples",
            "min",
            "P50",
            "P90",
            "P99",
            "max",
            "mean",
            "a sample is",
            "data",
        ],
        rows,
    );
    p.heading("Why they differ");
    for e in &r.explanations {
        p.para(e);
    }
    for e in &r.errors {
        p.para(&format!("Could not run: {}", e));
    }
    if let Some(chart) = anatomy_chart(r) {
        p.heading("Anatomy");
        p.para("Each bar is a tcp_rr transaction at that percentile (the mean of those in its round-trip band), split by the kernel's stamps on both ends; each line across it is another layer's value at the same percentile. The wire layers see the network and the server's part; tcp_rr adds the client's send path and wake-up.");
        p.chart("anatomy.svg", "tcp_rr's anatomy per percentile", &chart);
    }
    if let Some(chart) = timeline_chart(r) {
        p.heading("Over time");
        p.chart(
            "timeline.svg",
            "every layer's median and P99 per time bin",
            &chart,
        );
    }
    p.heading("Distributions");
    p.chart("cdf.svg", "each layer's samples, cumulative", cdf);
    p.heading("As printed");
    p.pre(table);
    p.run_facts(run_json);
    p.render()
}

/// Re-render `compare.txt`, `cdf.svg` and `report.html` in `dir` from `compare.json`
/// and the layers' histogram files, recomputing every row from its histogram file;
/// returns the table's text.
///
/// # Errors
/// A file is missing or unreadable, or a histogram file disagrees with compare.json.
pub fn write(dir: &Path) -> Result<String, ResultsError> {
    let (_, run) = results::read_run(dir)?;
    let cp = dir.join("compare.json");
    let text = results::read_file(dir, "compare.json")?;
    let mut r: CompareResult = serde_json::from_str(&text).map_err(results::json(&cp))?;
    for l in &mut r.layers {
        if l.name == "sampled_metric" {
            continue;
        }
        let h = results::read_histogram(dir, &l.histogram_file(r.trial))?;
        let again = Layer::from_histogram(&l.name, &l.what, &h);
        if again.samples != l.samples || again.percentiles_us.p50 != l.percentiles_us.p50 {
            return Err(results::invalid(
                &dir.join(l.histogram_file(r.trial)),
                format!("holds other samples than compare.json's {} row", l.name),
            ));
        }
        *l = again;
    }
    let table = render(&r);
    let cdf = cdf_chart(&r);
    results::write_file(dir, "compare.txt", &table)?;
    results::write_file(dir, "cdf.svg", &cdf)?;
    if let Some(chart) = anatomy_chart(&r) {
        results::write_file(dir, "anatomy.svg", &chart)?;
    }
    if let Some(chart) = timeline_chart(&r) {
        results::write_file(dir, "timeline.svg", &chart)?;
    }
    results::write_file(dir, "report.html", &html(&run, &r, &table, &cdf))?;
    Ok(table)
}

/// Write a comparison of one or more trials: `compare.json` is the first trial (the
/// layout a single comparison has always had) and the tables, charts and report are
/// its, followed by every layer's median over the trials with its interval.
///
/// # Errors
/// As [`write()`]; no trial recorded.
pub fn write_trials(dir: &Path, records: &[CompareResult]) -> Result<String, ResultsError> {
    let first = records
        .iter()
        .min_by_key(|r| r.trial)
        .ok_or_else(|| results::invalid(&dir.join("trials.jsonl"), "no trial recorded"))?;
    let cp = dir.join("compare.json");
    let json =
        results::schema::pretty(results::schema::COMPARE, first).map_err(results::json(&cp))?;
    results::write_file(dir, "compare.json", &json)?;
    let mut text = write(dir)?;
    let mut sorted: Vec<&CompareResult> = records.iter().collect();
    sorted.sort_by_key(|r| r.trial);
    let names: Vec<String> = first
        .layers
        .iter()
        .map(|l| l.name.replace(' ', "_"))
        .collect();
    let cells: Vec<super::trials::CellValues> = names
        .iter()
        .map(|n| {
            let of = |f: fn(&Layer) -> Option<f64>| -> Vec<Option<f64>> {
                sorted
                    .iter()
                    .map(|r| {
                        r.layers
                            .iter()
                            .find(|l| l.name.replace(' ', "_") == *n)
                            .and_then(f)
                    })
                    .collect()
            };
            (
                n.clone(),
                vec![of(|l| l.percentiles_us.p50), of(|l| l.percentiles_us.p99)],
            )
        })
        .collect();
    let across = super::trials::across(
        "Each layer across trials",
        "LAYER",
        &["P50_us", "P99_us"],
        &cells,
    );
    if !across.is_empty() {
        text += &across;
        let mut all = results::read_file(dir, "compare.txt")?;
        all += &across;
        results::write_file(dir, "compare.txt", &all)?;
    }
    Ok(text)
}
