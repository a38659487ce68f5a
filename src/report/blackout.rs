//! The blackout experiment's tables: measured median idle, the `linux` model's
//! prediction and the error per cell, in seed 001's layout, one set per recovery path.

use super::rto::seed_layout;
use crate::experiment::blackout::CellSummary;

/// Every table, each with a title line.
pub fn tables(cells: &[CellSummary]) -> String {
    let mut paths: Vec<&str> = cells.iter().map(|c| c.path.as_str()).collect();
    paths.sort_unstable();
    paths.dedup();
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
    for p in paths {
        let n: usize = cells.iter().filter(|c| c.path == p).map(|c| c.n).sum();
        let within = cells.iter().filter(|c| c.path == p && c.within).count();
        let total = cells.iter().filter(|c| c.path == p).count();
        out += &format!(
            "Recovery path {p}: {n} trials; the linux model is within max(5 ms, 5 %) of the median in {within} of {total} cells ({:.0} %)\n\n",
            100.0 * within as f64 / total.max(1) as f64
        );
        out += "Measured median TCP idle (ms)\n";
        out += &seed_layout("Practice", &sorted(&|c| format!("{:.1}", c.median_ms), p));
        out += "\nPredicted by the linux model (ms)\n";
        out += &seed_layout("Model", &sorted(&|c| format!("{:.1}", c.predicted_ms), p));
        out += "\nMeasured − predicted (ms; * outside max(5 ms, 5 %))\n";
        out += &seed_layout(
            "Error",
            &sorted(
                &|c| {
                    format!(
                        "{:+.1}{}",
                        c.median_ms - c.predicted_ms,
                        if c.within { "" } else { "*" }
                    )
                },
                p,
            ),
        );
        out.push('\n');
    }
    out
}
