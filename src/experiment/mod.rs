//! Scenarios from the seeds: trial runners that compose the lab, the probes and the
//! kernel knobs, and write results directories (DESIGN.md: run.json, raw data as JSON
//! lines written as each trial finishes, tables and report).

pub mod bench;
pub mod blackout;
pub mod compare;
pub mod passive_active;
pub mod resreq;
pub mod results;
pub mod sweep;
pub mod synrto;

use std::path::Path;

/// Errors that stop an experiment (a point or trial that fails is recorded with its
/// error instead, and the run goes on).
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    #[error(transparent)]
    Lab(#[from] crate::lab::LabError),
    #[error(transparent)]
    Results(#[from] results::ResultsError),
    /// Settings that cannot run (the message says which and what to use).
    #[error("{0}")]
    Invalid(String),
}

/// Render the report of the results directory `dir` again from its raw data, whatever
/// experiment wrote it; returns its tables' text.
///
/// # Errors
/// Not a results directory, an experiment this rttlab does not know, or a file that
/// cannot be read or written.
pub fn render_report(dir: &Path) -> Result<String, results::ResultsError> {
    let (name, _) = results::read_run(dir)?;
    let other = |e: String| results::ResultsError::Io {
        path: dir.display().to_string(),
        msg: e,
    };
    match name.as_str() {
        "compare" => compare::render_report(dir),
        "resreq-interval" => resreq::write_report(dir, &results::read_trials(dir)?),
        "interval-sweep" => sweep::write_report(dir, &results::read_trials(dir)?),
        "syn-rto" => synrto::write_report(dir, &results::read_trials(dir)?),
        "passive-vs-active" => passive_active::write_report(dir, &results::read_trials(dir)?),
        "blackout" => blackout::write_report(dir, &results::read_trials(dir)?)
            .map_err(|e| other(e.to_string())),
        _ => Err(other(format!(
            "written by experiment {name:?}, which this rttlab does not know"
        ))),
    }
}
