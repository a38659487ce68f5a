//! `rttlab report DIR`: render a results directory's report again from its raw data.

use anyhow::Context;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
#[command(after_help = "\
Reads run.json to learn which experiment wrote DIR (and its results schema: directories
of any earlier rttlab are read; a newer one is refused by name), recomputes the tables
and every derived field from the raw files (trials.jsonl, <layer>.hist.csv, …) and
prints the tables (explain's are drawn from its windows.jsonl as the run summarised
each window: its transactions.jsonl is the run's detail, not copied). DIR itself is never changed, and is read through one descriptor
without following a link inside it. With --out, DIR's raw files and the tables, SVG
charts and report.html are written as a new directory, put in place only when all of it
is written: OUT must not exist or be empty, and is neither DIR, inside it, nor a
symbolic link. Every file takes the narrowest mode of DIR's raw files (a report of
private trials is private). A line of trials.jsonl (explain's windows.jsonl) that is not a
record of the experiment is named on stderr (its line and field) and left out, as is a second record of a trial
already read (the runner records each trial once) and a histogram file that
cannot be read (missing, not a regular file, not a histogram): the rest is reported
and the status is 1. A last line cut short (no newline: the run was killed while
writing it) is a trial that never finished, left out without a word: the experiment
run again with the same --out resumes and measures it. compare's and syn-rto's reports are drawn from their histograms:
one they cannot read is named and nothing is rendered (status 2).

Examples:
  rttlab report results/compare-1763800000
  rttlab report docs/results/blackout-route --out /tmp/blackout-route
  rttlab report docs/results/blackout-route --json | jq '.records | length'")]
pub struct ReportArgs {
    /// A results directory written by `rttlab compare`, `rttlab experiment` or
    /// `rttlab explain --out`.
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
    use rttlab::report::dir::Records;
    let records = if a.json { Records::Keep } else { Records::Skip };
    let rendered = rttlab::report::dir::render_to(&a.dir, a.out.as_deref(), records)
        .with_context(|| format!("rendering the report of {}", a.dir.display()))?;
    for e in &rendered.unreadable {
        eprintln!("rttlab report: {}", rttlab::error_chain(e));
    }

    if a.json {
        let dir = a.out.as_deref().unwrap_or(&a.dir);
        let run: serde_json::Value = serde_json::from_str(&rendered.run)?;
        let doc = super::experiment::RunDocument {
            experiment: &rendered.experiment,
            dir,
            settings: run["settings"].clone(),
            trials: rendered.records.len(),
            failed: None,
            interrupted: None,
            report: dir.join("report.html"),
            records: &rendered.records,
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
        // As a record that cannot be read: the run measured, the rest is reported.
        return Err(anyhow::Error::new(super::Exit(1)).context(format!(
            "{} histogram file(s) of {} could not be read: the report leaves them out",
            rendered.unreadable.len(),
            a.dir.display()
        )));
    }
    if !rendered.bad_records.is_empty() {
        // Everything else is reported: the run measured, but not all of it is here.
        // Named up to a screenful: a file of copies would otherwise print one line each.
        let bad = &rendered.bad_records;
        for b in &bad.named {
            eprintln!("rttlab report: {}: {b}", a.dir.display());
        }
        if bad.len() > bad.named.len() {
            eprintln!(
                "rttlab report: {}: and {} more line(s) left out, not named",
                a.dir.display(),
                bad.len() - bad.named.len()
            );
        }
        return Err(anyhow::Error::new(super::Exit(1)).context(format!(
            "{} record(s) of {} could not be read or repeat a trial: the report leaves them out (fix or remove those lines)",
            rendered.bad_records.len(),
            a.dir.join(bad.named[0].file).display()
        )));
    }
    Ok(())
}
