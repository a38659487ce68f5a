//! Scenarios from the seeds: trial runners that compose the lab, the probes and the
//! kernel knobs, and write results directories (docs/ARCHITECTURE.md: run.json, raw data as JSON
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
/// experiment wrote it, into `dir` itself; returns its tables' text. Derived fields of
/// the raw records (blackout's model prediction and boundary marks) are recomputed, so
/// a directory an older rttlab wrote keeps every conclusion. See [`render_report_to`]
/// to leave the original untouched.
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
        "blackout" => {
            let trials = blackout::recompute(dir, results::read_trials(dir)?)
                .map_err(|e| other(e.to_string()))?;
            blackout::write_report(dir, &trials).map_err(|e| other(e.to_string()))
        }
        "resreq-interval" => resreq::write_report(dir, &results::read_trials(dir)?),
        "interval-sweep" => sweep::write_report(dir, &results::read_trials(dir)?),
        "syn-rto" => synrto::write_report(dir, &results::read_trials(dir)?),
        "passive-vs-active" => passive_active::write_report(dir, &results::read_trials(dir)?),
        _ => Err(other(format!(
            "written by experiment {name:?}, which this rttlab does not know"
        ))),
    }
}

/// Render the report of `dir` into `out` (a copy of `dir`'s files with the report
/// written anew), or, with no `out`, only compute its tables and leave every file as
/// it was; returns the tables' text.
///
/// # Errors
/// As [`render_report`].
pub fn render_report_to(dir: &Path, out: Option<&Path>) -> Result<String, results::ResultsError> {
    results::read_run(dir)?;
    match out {
        Some(out) if same_dir(dir, out) => render_report(dir),
        Some(out) => {
            results::copy_dir(dir, out)?;
            render_report(out)
        }
        None => {
            let scratch = tempdir_for(dir)?;
            results::copy_dir(dir, &scratch)?;
            let text = render_report(&scratch);
            let _ = std::fs::remove_dir_all(&scratch);
            text
        }
    }
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// A fresh directory for a throw-away rendering.
fn tempdir_for(dir: &Path) -> Result<std::path::PathBuf, results::ResultsError> {
    let p = std::env::temp_dir().join(format!(
        "rttlab-report-{}-{}",
        std::process::id(),
        dir.file_name()
            .map_or_else(|| "dir".into(), |n| n.to_string_lossy().into_owned())
    ));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).map_err(|e| results::ResultsError::Io {
        path: p.display().to_string(),
        msg: e.to_string(),
    })?;
    Ok(p)
}
