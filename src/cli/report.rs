//! `rttlab report DIR`: render a results directory's report again from its raw data.

use anyhow::Context;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
#[command(after_help = "\
Reads run.json to learn which experiment wrote DIR (and its results schema: directories
of any earlier rttlab are read; a newer one is refused by name), recomputes the tables
and every derived field from the raw files (trials.jsonl, <layer>.hist.csv, …) and
prints the tables. DIR itself is never changed: with --out the raw files are copied
there and the tables, SVG charts and report.html are written beside them (--out is
neither DIR itself nor a symbolic link). A line of trials.jsonl that is not a record of the experiment
is named on stderr (its line and field) and left out: the rest is reported and the
status is 1.

Examples:
  rttlab report results/compare-1763800000
  rttlab report docs/results/blackout-route --out /tmp/blackout-route
  rttlab report docs/results/blackout-route --json | jq '.records | length'")]
pub struct ReportArgs {
    /// A results directory written by `rttlab compare` or `rttlab experiment`.
    pub dir: PathBuf,
    /// Write the re-rendered results directory here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print the run as one JSON document (schema rttlab.experiment/1) instead of the
    /// tables: its settings and every trial's record as trials.jsonl holds it.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: ReportArgs) -> anyhow::Result<()> {
    let rendered = rttlab::report::dir::render_to(&a.dir, a.out.as_deref())
        .with_context(|| format!("rendering the report of {}", a.dir.display()))?;
    for e in &rendered.unreadable {
        eprintln!("rttlab report: {}", rttlab::error_chain(e));
    }

    if a.json {
        let dir = a.out.as_deref().unwrap_or(&a.dir);
        let (experiment, run) = rttlab::results::read_run(dir)?;
        let run: serde_json::Value = serde_json::from_str(&run)?;
        // Before the trial runner, compare wrote compare.json alone: no records.
        // The records the report read: not the lines it named as unreadable.
        let records: Vec<serde_json::Value> = if dir.join("trials.jsonl").exists() {
            let bad: Vec<usize> = rendered.bad_records.iter().map(|b| b.line).collect();
            let (numbered, _) = rttlab::results::read_numbered(dir)?;
            numbered
                .into_iter()
                .filter(|(line, _)| !bad.contains(line))
                .map(|(_, r)| r)
                .collect()
        } else {
            Vec::new()
        };
        let doc = super::experiment::RunDocument {
            experiment: &experiment,
            dir,
            settings: run["settings"].clone(),
            trials: records.len(),
            failed: None,
            interrupted: None,
            report: dir.join("report.html"),
            records: &records,
        };
        let schema = rttlab::results::schema::EXPERIMENT;
        outln!("{}", rttlab::results::schema::pretty(schema, &doc)?);
    } else {
        out!("{}", rendered.text);
        if let Some(out) = &a.out {
            outln!("Report: {}", out.join("report.html").display());
        }
    }
    if !rendered.unreadable.is_empty() {
        anyhow::bail!(
            "{} histogram file(s) of {} could not be read: the report leaves them out",
            rendered.unreadable.len(),
            a.dir.display()
        );
    }
    if !rendered.bad_records.is_empty() {
        // Everything else is reported: the run measured, but not all of it is here.
        for b in &rendered.bad_records {
            eprintln!("rttlab report: {}: {b}", a.dir.display());
        }
        return Err(anyhow::Error::new(super::Exit(1)).context(format!(
            "{} record(s) of {} could not be read: the report leaves them out (fix or remove those lines)",
            rendered.bad_records.len(),
            a.dir.join("trials.jsonl").display()
        )));
    }
    Ok(())
}
