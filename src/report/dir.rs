//! Rendering a results directory again from its raw data, whatever experiment wrote
//! it: `rttlab report`, and every experiment's last step.

use crate::kernel::fs::held::{HeldDir, NewDir};
use crate::kernel::fs::ScratchDir;
use crate::results::names::{
    BLACKOUT, COMPARE, EXPLAIN, INTERVAL_SWEEP, PASSIVE_VS_ACTIVE, RESREQ_INTERVAL, SYN_RTO,
};
use crate::results::{self, BadRecord, BadRecords, ResultsError, Trial};
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

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
pub fn render(dir: &Path) -> Result<(String, BadRecords), ResultsError> {
    let (name, _) = results::read_run(dir)?;
    let mut bad = BadRecords::default();
    let text = match name.as_str() {
        // trials.jsonl: written by the trial runner; before it, compare.json alone.
        COMPARE if dir.join("trials.jsonl").exists() => {
            let mut trials = super::compare::Trials::default();
            each(dir, &mut bad, |r| trials.add(r))?;
            super::compare::write_trials(dir, trials)
        }
        COMPARE => super::compare::write(dir),
        BLACKOUT => {
            let recompute = results::blackout::Recompute::of(dir)?;
            let mut cells = results::blackout::Cells::default();
            each(dir, &mut bad, |r| cells.add(&recompute.apply(r)))?;
            super::blackout::write(dir, cells)
        }
        // One row per trial: the records are the report.
        RESREQ_INTERVAL => super::resreq::write(dir, &rows(dir, &mut bad)?),
        INTERVAL_SWEEP => super::sweep::write(dir, &rows(dir, &mut bad)?),
        SYN_RTO => super::syn_rto::write(dir, &rows(dir, &mut bad)?),
        PASSIVE_VS_ACTIVE => super::passive_active::write(dir, &rows(dir, &mut bad)?),
        // Its windows, not trials: windows.jsonl's lines that are not records.
        EXPLAIN => super::service_dir::write(dir, &mut bad),
        _ => Err(results::invalid(
            &dir.join("run.json"),
            format!("written by experiment {name:?}, which this rttlab does not know"),
        )),
    }?;
    Ok((text, bad))
}

/// Each record of `dir`'s trials.jsonl given to `fold` as it is read (memory is what
/// `fold` keeps, never the file), the lines that are not records added to `bad`: a
/// line that is no record of the experiment, or a second record of a trial already
/// read (a copy would count it twice).
fn each<T: serde::de::DeserializeOwned + Trial>(
    dir: &Path,
    bad: &mut BadRecords,
    mut fold: impl FnMut(T),
) -> Result<(), ResultsError> {
    // Each trial's first line, by key (its words only for the few named).
    let mut seen: HashMap<T::Key, usize> = HashMap::new();
    results::each_record(dir, |line, read: Result<T, String>| match read {
        Ok(r) => match seen.entry(r.key()) {
            Entry::Vacant(v) => {
                v.insert(line);
                fold(r);
            }
            Entry::Occupied(o) => bad.push(BadRecord {
                file: "trials.jsonl",
                line,
                why: format!(
                    "a second record of {} (the first on line {}): each trial is recorded once",
                    r.trial(),
                    o.get()
                ),
            }),
        },
        Err(why) => bad.push(BadRecord {
            file: "trials.jsonl",
            line,
            why,
        }),
    })
}

/// Every record of `dir`'s trials.jsonl, as [`each`] reads them.
fn rows<T: serde::de::DeserializeOwned + Trial>(
    dir: &Path,
    bad: &mut BadRecords,
) -> Result<Vec<T>, ResultsError> {
    let mut rows = Vec::new();
    each(dir, bad, |r| rows.push(r))?;
    Ok(rows)
}

/// A rendered report: its tables, and the histogram files of the directory that
/// could not be read as histograms (missing, foreign, refused), each naming the file
/// and why. The report is written all the same; whoever asked must say it is
/// incomplete.
#[derive(Debug)]
pub struct Rendered {
    /// The experiment that wrote the directory, as run.json names it.
    pub experiment: String,
    /// run.json's text, as the report read it.
    pub run: String,
    /// The report's tables, as `rttlab report` prints them.
    pub text: String,
    /// One error per histogram file that could not be read; empty when the report is
    /// complete.
    pub unreadable: Vec<ResultsError>,
    /// The lines of trials.jsonl that are not records of the experiment, left out.
    pub bad_records: BadRecords,
    /// Every record the report read, in the file's order, when asked for
    /// ([`Records::Keep`]); empty for a directory without trials.jsonl.
    pub records: Vec<serde_json::Value>,
}

/// Whether [`render_to`] hands back the trial records it read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Records {
    /// Only the tables.
    Skip,
    /// The records too (`report --json`).
    Keep,
}

/// Render the report of the results directory `dir` from one private copy of its
/// raw files ([`results::copy_raw`]: read through one descriptor of `dir`, never
/// following a link, so nothing swapped in while it runs is read), and, given `out`,
/// write that copy and the report as a new directory at `out`, put in place only
/// when all of it is written ([`NewDir`]): every file with the narrowest mode of the
/// raw files, `out` with `dir`'s. `dir` itself is
/// never changed. Errors name `dir`'s files, never the copy's.
///
/// # Errors
/// As [`render`]; a raw file of `dir` that is not a regular file or is too large;
/// `out` is `dir` itself, a symlink, or already holds anything.
pub fn render_to(
    dir: &Path,
    out: Option<&Path>,
    records: Records,
) -> Result<Rendered, ResultsError> {
    if let Some(out) = out {
        refuse_out(dir, out)?;
    }
    let source = HeldDir::open(dir, "results directory")?;
    let scratch = ScratchDir::new("rttlab-report")?;
    let copy = scratch.path();
    let named = |e: ResultsError| e.moved(copy, dir);
    let raw = results::copy_raw(&source, copy)?;
    let (experiment, run) = results::read_run(copy).map_err(named)?;
    let known: Vec<&str> = raw.refused.iter().map(|(n, _)| n.as_str()).collect();
    let mut unreadable: Vec<ResultsError> = results::check_histograms(copy, &known)
        .map_err(named)?
        .into_iter()
        .map(named)
        .collect();
    let refused = raw.refused.into_iter().map(|(_, e)| e);
    unreadable.splice(0..0, refused);
    let (text, bad_records) = match render(copy) {
        Ok(rendered) => rendered,
        // A report that needs a histogram left out of the copy fails on it; the
        // reason worth saying is why the original could not be read.
        Err(_) if !unreadable.is_empty() => return Err(unreadable.remove(0)),
        Err(e) => return Err(named(e)),
    };
    let records = match records {
        Records::Keep if copy.join(records_file(&experiment)).exists() => {
            // The lines the report read as records, and only those (in order: the
            // left-out ones are sorted).
            let left_out = &bad_records.lines;
            let mut kept = Vec::new();
            let file = records_file(&experiment);
            results::each_record_of(
                copy,
                file,
                |line, read: Result<serde_json::Value, String>| {
                    if let (Ok(r), Err(_)) = (read, left_out.binary_search(&line)) {
                        kept.push(r);
                    }
                },
            )
            .map_err(named)?;
            kept
        }
        _ => Vec::new(),
    };
    if let Some(out) = out {
        place(copy, &raw.modes, source.mode()?, out)?;
    }
    Ok(Rendered {
        experiment,
        run,
        text,
        unreadable,
        bad_records,
        records,
    })
}

/// The file of `experiment`'s records: trials.jsonl, or explain's windows.jsonl.
fn records_file(experiment: &str) -> &'static str {
    if experiment == EXPLAIN {
        results::explain::WINDOWS
    } else {
        "trials.jsonl"
    }
}

/// `--out` refused by name before anything is read: written through, a symlink would
/// put the report wherever it points, and DIR itself is never changed.
fn refuse_out(dir: &Path, out: &Path) -> Result<(), ResultsError> {
    // `link/` would follow the link: the path as components, trailing `/` gone.
    let named: PathBuf = out.components().collect();
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
    let parent = named
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if let (Ok(d), Ok(p)) = (dir.canonicalize(), parent.canonicalize()) {
        if p.starts_with(&d) {
            return Err(results::invalid(
                out,
                "--out is inside the results directory, which report never changes: give a directory elsewhere",
            ));
        }
    }
    Ok(())
}

/// Write every file of the rendered copy into a new directory put in place at `out`,
/// each with the narrowest mode of the raw files, no execute bit (a report of private
/// trials is private; compare.json is both raw and rendered anew from trials.jsonl),
/// the directory with `dir_mode`.
fn place(
    copy: &Path,
    raw_modes: &BTreeMap<String, u32>,
    dir_mode: u32,
    out: &Path,
) -> Result<(), ResultsError> {
    let mode = raw_modes.values().fold(0o666, |m, r| m & r);
    let mut new = NewDir::beside(out)?;
    let mut names: Vec<String> = std::fs::read_dir(copy)
        .map_err(results::io(copy))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    for name in names {
        let mut to = new.create(&name, mode)?;
        let from = std::fs::File::open(copy.join(&name)).map_err(results::io(copy))?;
        std::io::copy(&mut &from, &mut to).map_err(results::io(&out.join(&name)))?;
    }
    Ok(new.place(dir_mode)?)
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
