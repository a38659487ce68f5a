//! Rendering a results directory again from its raw data, whatever experiment wrote
//! it: `rttlab report`, and every experiment's last step.

use crate::kernel::fs::ScratchDir;
use crate::results::names::{
    BLACKOUT, COMPARE, INTERVAL_SWEEP, PASSIVE_VS_ACTIVE, RESREQ_INTERVAL, SYN_RTO,
};
use crate::results::{self, BadRecord, ResultsError};
use std::path::Path;

/// Render the report of the results directory `dir` again from its raw data, whatever
/// experiment wrote it, into `dir` itself; returns its tables' text and the lines of
/// trials.jsonl that are not records (left out, and named). Derived fields of the raw
/// records (blackout's model prediction and boundary marks) are recomputed, so a
/// directory an older rttlab wrote keeps every conclusion. See [`render_to`] to leave
/// the original untouched.
///
/// # Errors
/// Not a results directory, an experiment this rttlab does not know, or a file that
/// cannot be read or written.
pub fn render(dir: &Path) -> Result<(String, Vec<BadRecord>), ResultsError> {
    let (name, _) = results::read_run(dir)?;
    let mut bad = Vec::new();
    let text = match name.as_str() {
        // trials.jsonl: written by the trial runner; before it, compare.json alone.
        COMPARE if dir.join("trials.jsonl").exists() => {
            super::compare::write_trials(dir, &records(dir, &mut bad)?)
        }
        COMPARE => super::compare::write(dir),
        BLACKOUT => {
            let trials = results::blackout::recompute(dir, records(dir, &mut bad)?)?;
            super::blackout::write(dir, &trials)
        }
        RESREQ_INTERVAL => super::resreq::write(dir, &records(dir, &mut bad)?),
        INTERVAL_SWEEP => super::sweep::write(dir, &records(dir, &mut bad)?),
        SYN_RTO => super::syn_rto::write(dir, &records(dir, &mut bad)?),
        PASSIVE_VS_ACTIVE => super::passive_active::write(dir, &records(dir, &mut bad)?),
        _ => Err(results::invalid(
            &dir.join("run.json"),
            format!("written by experiment {name:?}, which this rttlab does not know"),
        )),
    }?;
    Ok((text, bad))
}

/// The records of `dir`'s trials.jsonl, the lines that are not records added to `bad`.
fn records<T: serde::de::DeserializeOwned>(
    dir: &Path,
    bad: &mut Vec<BadRecord>,
) -> Result<Vec<T>, ResultsError> {
    let (records, mut not) = results::read_records(dir)?;
    bad.append(&mut not);
    Ok(records)
}

/// A rendered report: its tables, and the histogram files of the directory that
/// could not be read as histograms (missing, foreign, refused), each naming the file
/// and why. The report is written all the same; whoever asked must say it is
/// incomplete.
#[derive(Debug)]
pub struct Rendered {
    /// The report's tables, as `rttlab report` prints them.
    pub text: String,
    /// One error per histogram file that could not be read; empty when the report is
    /// complete.
    pub unreadable: Vec<ResultsError>,
    /// The lines of trials.jsonl that are not records of the experiment, left out.
    pub bad_records: Vec<BadRecord>,
}

/// Render the report of `dir` into `out` (a copy of `dir`'s files with the report
/// written anew; neither `dir` itself nor a symlink), or, with no `out`, only compute its tables (in a private scratch
/// directory) and leave every file as it was.
///
/// # Errors
/// As [`render`]; a file of `dir` that is not a regular file inside it or is too
/// large; a file of `out` that is a symlink.
pub fn render_to(dir: &Path, out: Option<&Path>) -> Result<Rendered, ResultsError> {
    results::read_run(dir)?;
    if let Some(out) = out {
        // Written through, a link would put the report (and a copy of DIR's files)
        // wherever it points; DIR itself is never changed.
        // `link/` would follow the link: the path as components, trailing `/` gone.
        let named: std::path::PathBuf = out.components().collect();
        if named
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
        {
            return Err(results::invalid(
                out,
                "--out is a symbolic link: refusing to write through it; give the directory's own path",
            ));
        }
        if same_dir(dir, out) {
            return Err(results::invalid(
                out,
                "--out is the results directory itself, which report never changes: give another directory",
            ));
        }
    }
    let mut unreadable = results::check_histograms(dir)?;
    let rendered = match out {
        Some(out) => results::copy_dir(dir, out).and_then(|()| render(out)),
        None => {
            let scratch = ScratchDir::new("rttlab-report")?;
            results::copy_dir(dir, scratch.path()).and_then(|()| render(scratch.path()))
        }
    };
    let (text, bad_records) = match rendered {
        Ok(rendered) => rendered,
        // A report that needs a histogram left out of the copy fails on the copy's
        // path; the reason worth saying is why the original could not be read.
        Err(_) if !unreadable.is_empty() => return Err(unreadable.remove(0)),
        Err(e) => return Err(e),
    };
    Ok(Rendered {
        text,
        unreadable,
        bad_records,
    })
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
