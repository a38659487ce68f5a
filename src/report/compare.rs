//! `rttlab compare`'s table and its explanations.

use super::table::Table;
use crate::experiment::compare::CompareResult;

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
            f(l.p50_us),
            f(l.p90_us),
            f(l.p99_us),
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
        s.push_str(&format!("- {e}\n"));
    }
    for e in &r.errors {
        s.push_str(&format!("! {e}\n"));
    }
    s
}
