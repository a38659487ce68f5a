//! `rttlab report DIR`: render a results directory's report again from its raw data.

use anyhow::Context;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
#[command(after_help = "\
Reads run.json to learn which experiment wrote DIR, recomputes the tables from the raw
files (trials.jsonl, <layer>.hist.csv, …) and writes the tables, the SVG charts and
report.html again.

Example:
  rttlab report results/compare-1763800000")]
pub struct ReportArgs {
    /// A results directory written by `rttlab compare` or `rttlab experiment`.
    pub dir: PathBuf,
}

pub fn run(a: ReportArgs) -> anyhow::Result<()> {
    let text = rttlab::experiment::render_report(&a.dir)
        .with_context(|| format!("rendering the report of {}", a.dir.display()))?;
    print!("{text}");
    println!("Report: {}", a.dir.join("report.html").display());
    Ok(())
}
