//! `rttlab compare`'s table and its explanations.

mod charts;

pub use charts::{anatomy_chart, cdf_chart, percentile_chart, timeline_chart};

use super::html::Page;
use super::table::{wrap, Table, TEXT_WIDTH};
use crate::results::compare::{CompareResult, Layer};
use crate::results::{self, ResultsError};
use std::path::Path;

/// A layer's name, sample count and numbers (µs, one decimal; `-` where it has none,
/// `n<100` for a percentile its samples cannot resolve), as the text table and the
/// report's table both show them.
fn row(l: &Layer) -> [String; 8] {
    row_in(l, 1.0, super::table::one_decimal)
}

/// How a table writes a value.
type Cell = fn(Option<f64>) -> String;

/// [`row`] with every value divided by `per` (1 000: ms) and written by `f`.
fn row_in(l: &Layer, per: f64, f: Cell) -> [String; 8] {
    let f = |v: Option<f64>| f(v.map(|x| x / per));
    let p = |v: Option<f64>, q: f64| super::table::percentile_cell(v, q, l.samples, f);
    [
        l.name.clone(),
        l.samples.to_string(),
        f(l.min_us),
        p(l.percentiles_us.p50, 0.5),
        p(l.percentiles_us.p90, 0.9),
        p(l.percentiles_us.p99, 0.99),
        f(l.max_us),
        f(l.mean_us),
    ]
}

/// The layers side by side (µs), what a sample of each is, then the gaps explained,
/// the prose wrapped to `width` columns (the table is 78 wide whatever the width).
pub fn render(r: &CompareResult, width: usize) -> String {
    let mut t = Table::new([
        "LAYER", "SAMPLES", "MIN_us", "P50_us", "P90_us", "P99_us", "MAX_us", "MEAN_us",
    ]);
    for l in &r.layers {
        t.row(row(l));
    }
    let mut s = wrap(
        &format!(
            "RTT at every layer to {} ({} between transactions, {} s; capture on {})",
            r.server,
            humantime::format_duration(r.settings.interval),
            r.settings.duration.as_secs_f64(),
            r.capture_interface,
        ),
        width,
        "",
        "",
    );
    s += &t.render();
    s.push_str("\nA sample is:\n");
    let name_w = r
        .layers
        .iter()
        .map(|l| l.name.chars().count())
        .max()
        .unwrap_or(0);
    for l in &r.layers {
        let first = format!("  {:name_w$}  ", l.name);
        let what = match &l.why_empty {
            Some(_) => format!("{} (none here: why below)", l.what),
            None => l.what.clone(),
        };
        s += &wrap(&what, width, &first, &" ".repeat(first.chars().count()));
    }
    s.push_str("\nWhy they differ:\n");
    for e in &r.explanations {
        s += &wrap(e, width, "- ", "  ");
    }
    for e in &r.errors {
        s += &wrap(e, width, "! ", "  ");
    }
    s
}

/// The comparison as a self-contained page.
pub fn html(run_json: &str, r: &CompareResult, table: &str, cdf: &str) -> String {
    let mut p = Page::new("rttlab compare: RTT at every layer");
    p.para(&format!(
        "To {} with {} between transactions for {} s, all layers at once; the passive engines and the sampled metric read the TCP_RR connection as captured on {}.",
        r.server,
        humantime::format_duration(r.settings.interval),
        r.settings.duration.as_secs_f64(),
        r.capture_interface
    ));
    // One unit for the page's table and charts: the charts' axes write round trips
    // that reach a millisecond in ms, so the table does too.
    let widest = r
        .layers
        .iter()
        .filter_map(|l| l.percentiles_us.p99.or(l.percentiles_us.p50))
        .fold(0.0, f64::max);
    let (unit, per, f): (&str, f64, Cell) = if widest >= 1000.0 {
        ("ms", 1000.0, |v| {
            v.map_or_else(|| "-".into(), |x| format!("{x:.3}"))
        })
    } else {
        ("µs", 1.0, super::table::one_decimal)
    };
    p.heading(&format!("Layers ({unit})"));
    let rows = r
        .layers
        .iter()
        .map(|l| {
            let mut cells = row_in(l, per, f).to_vec();
            cells.extend([
                l.what.clone(),
                match (&l.why_empty, &l.histogram) {
                    (Some(why), _) => format!("none: {why}"),
                    (None, Some(_)) => l.histogram_file(r.trial),
                    (None, None) => "compare.json: sampler".into(),
                },
            ]);
            cells
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
        p.para(e);
    }
    if let Some(chart) = anatomy_chart(r) {
        p.heading("Anatomy");
        p.para("Each bar is a tcp_rr transaction at that percentile (the mean of those in its round-trip band), split by the kernel's stamps on both ends. On the left the whole round trip, the network at the bottom (cut by a break where it is most of the bar), every percentile on one scale, each line across a bar another layer's value at the same percentile: the wire layers see the network and the server's part; tcp_rr adds the client's send path and wake-up. On the right each part on its own, on one log scale, so the hosts' microseconds show next to the network's milliseconds.");
        p.chart("anatomy.svg", "tcp_rr's anatomy per percentile", &chart);
    }
    if let Some(chart) = percentile_chart(r) {
        p.heading("By percentile");
        p.para("Each layer's RTT at every percentile, the tail spread out: 90 %, 99 % and 99.9 % are equally far apart (HdrHistogram's plot). Each curve ends at its largest sample.");
        p.chart("percentiles.svg", "every layer's RTT by percentile", &chart);
    }
    if let Some(chart) = timeline_chart(r) {
        p.heading("Over time");
        p.chart(
            "timeline.svg",
            "every layer's median and largest round trip per time bin",
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
    let r = load(dir)?;
    let table = render(&r, TEXT_WIDTH);
    let cdf = cdf_chart(&r);
    results::write_file(dir, "compare.txt", &table)?;
    results::write_file(dir, "cdf.svg", &cdf)?;
    if let Some(chart) = anatomy_chart(&r) {
        results::write_file(dir, "anatomy.svg", &chart)?;
    }
    if let Some(chart) = timeline_chart(&r) {
        results::write_file(dir, "timeline.svg", &chart)?;
    }
    if let Some(chart) = percentile_chart(&r) {
        results::write_file(dir, "percentiles.svg", &chart)?;
    }
    results::write_file(dir, "report.html", &html(&run, &r, &table, &cdf))?;
    Ok(table)
}

/// `compare.json` in `dir`, every row recomputed from its histogram file.
///
/// # Errors
/// As [`write()`].
fn load(dir: &Path) -> Result<CompareResult, ResultsError> {
    let cp = dir.join("compare.json");
    let text = results::read_file(dir, "compare.json")?;
    let mut r: CompareResult = serde_json::from_str(&text).map_err(results::json(&cp))?;
    for l in &mut r.layers {
        if l.name == "sampled_metric" {
            continue;
        }
        let h = results::read_histogram(dir, &l.histogram_file(r.trial))?;
        let mut again = Layer::from_histogram(&l.name, &l.what, &h);
        again.why_empty = l.why_empty.take();
        if again.samples != l.samples || again.percentiles_us.p50 != l.percentiles_us.p50 {
            return Err(results::invalid(
                &dir.join(l.histogram_file(r.trial)),
                format!("holds other samples than compare.json's {} row", l.name),
            ));
        }
        *l = again;
    }
    Ok(r)
}

/// Write a comparison of one or more trials: `compare.json` is the first trial (the
/// layout a single comparison has always had) and the tables, charts and report are
/// its, followed by every layer's median over the trials with its interval.
///
/// # Errors
/// As [`write()`]; no trial recorded.
pub fn write_trials(dir: &Path, trials: Trials) -> Result<String, ResultsError> {
    let first = trials
        .first
        .as_ref()
        .ok_or_else(|| results::invalid(&dir.join("trials.jsonl"), "no trial recorded"))?;
    let cp = dir.join("compare.json");
    let json =
        results::schema::pretty(results::schema::COMPARE, first).map_err(results::json(&cp))?;
    results::write_file(dir, "compare.json", &json)?;
    let mut text = write(dir)?;
    let across = across(&trials);
    if !across.is_empty() {
        text += &across;
        let mut all = results::read_file(dir, "compare.txt")?;
        all += &across;
        results::write_file(dir, "compare.txt", &all)?;
    }
    Ok(text)
}

/// A comparison's trials folded as they are read: the first trial whole (its tables
/// and compare.json), of every trial only each layer's P50 and P99 (the table across
/// trials), so a report's memory is its own, not trials.jsonl's.
#[derive(Debug, Default)]
pub struct Trials {
    /// The trial numbered lowest.
    first: Option<CompareResult>,
    /// Each trial's number and, per layer (its name, spaces as `_`), its P50 and P99.
    layers: Vec<(u32, Vec<LayerPercentiles>)>,
}

/// A layer's name (spaces as `_`), P50 and P99 (µs) in one trial.
type LayerPercentiles = (String, Option<f64>, Option<f64>);

impl Trials {
    /// The trials of `records`.
    pub fn of(records: &[CompareResult]) -> Self {
        let mut t = Self::default();
        records.iter().cloned().for_each(|r| t.add(r));
        t
    }

    /// Fold in one trial.
    pub fn add(&mut self, r: CompareResult) {
        let layers = r
            .layers
            .iter()
            .map(|l| {
                let p = &l.percentiles_us;
                (l.name.replace(' ', "_"), p.p50, p.p99)
            })
            .collect();
        self.layers.push((r.trial, layers));
        if self.first.as_ref().is_none_or(|f| r.trial < f.trial) {
            self.first = Some(r);
        }
    }
}

/// Every layer's median and P99 over the trials, with their intervals ("" with one
/// trial).
fn across(trials: &Trials) -> String {
    let mut sorted: Vec<&(u32, Vec<LayerPercentiles>)> = trials.layers.iter().collect();
    sorted.sort_by_key(|(trial, _)| *trial);
    let Some((_, first)) = sorted.first() else {
        return String::new();
    };
    let cells: Vec<super::trials::CellValues> = first
        .iter()
        .map(|(n, _, _)| {
            let of = |f: fn(&LayerPercentiles) -> Option<f64>| -> Vec<Option<f64>> {
                sorted
                    .iter()
                    .map(|(_, layers)| layers.iter().find(|l| l.0 == *n).and_then(f))
                    .collect()
            };
            (n.clone(), vec![of(|l| l.1), of(|l| l.2)])
        })
        .collect();
    super::trials::across(
        "Each layer across trials",
        "LAYER",
        &["P50_us", "P99_us"],
        &cells,
    )
}

/// What `rttlab compare` prints for the results in `dir`: compare.txt's text with its
/// prose wrapped to `width` columns (compare.txt itself is wrapped to 80).
///
/// # Errors
/// As [`write()`].
pub fn human(dir: &Path, records: &[CompareResult], width: usize) -> Result<String, ResultsError> {
    Ok(render(&load(dir)?, width) + &across(&Trials::of(records)))
}
