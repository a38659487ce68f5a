//! What runs leave behind, below the reports that render it: the results directory and
//! the record types each experiment writes into it (with what is derived from a record
//! alone), so that [`crate::report`] renders and [`crate::experiment`] records without
//! either importing the other (docs/ARCHITECTURE.md, "Data flow").
//!
//! A results directory: `run.json` (settings and host facts), `trials.jsonl` (one line
//! per finished trial, flushed as it is written, so an interrupted run keeps what it
//! measured), and the rendered tables and report. Opening a directory that holds a run
//! with the same settings resumes it.
//!
//! `run.json` names the layout's version in `"schema"` ([`SCHEMA`]); a directory
//! without one was written by rttlab 0.1 (version 1). Reports are always recomputed
//! from the raw files, so a directory of any version this rttlab reads renders with
//! today's derived fields, and one of a newer version is refused by name.

pub mod blackout;
pub mod compare;
pub mod explain;
pub mod names;
pub mod passive_active;
pub mod resreq;
pub mod schema;
pub mod sweep;
pub mod syn_rto;
pub mod tune;

use crate::kernel::fs;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The version of the results layout this rttlab writes.
pub const SCHEMA_VERSION: u32 = 2;
/// Its name in `run.json`.
pub const SCHEMA: &str = "rttlab.results/2";

/// Errors of a results directory.
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    /// Creating, reading or writing the directory or a file in it failed.
    #[error("results directory {}", crate::kernel::fs::shown(.path))]
    Io {
        /// The directory or file involved (appending a trial names the directory).
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A file is not the JSON expected, or a record could not be turned into JSON.
    #[error("{}: not the JSON this rttlab writes", crate::kernel::fs::shown(.path))]
    Json {
        /// The file read or written (appending a trial names the directory).
        path: PathBuf,
        /// serde_json's error, with the line and column when parsing.
        #[source]
        source: serde_json::Error,
    },
    /// A file that parses but says something this rttlab cannot use.
    #[error("{}: {msg}", crate::kernel::fs::shown(.path))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        msg: String,
    },
    /// The directory holds a run of another experiment or with other settings, so it
    /// cannot be resumed.
    #[error(
        "{path} holds a run with other settings ({what} differs); give another --out, or remove it"
    )]
    Mismatch {
        /// The results directory.
        path: String,
        /// The first setting that differs, or "the experiment or a setting".
        what: String,
    },
    /// A file that cannot be read or written safely: not a regular file, too large,
    /// a symlink out of the directory or where a file is to be written.
    #[error(transparent)]
    File(#[from] fs::FileError),
    /// Written by a newer rttlab whose layout this one does not know.
    #[error("{path} was written with results schema version {version}; this rttlab reads versions 1 to {SCHEMA_VERSION}: render it with a newer rttlab")]
    Schema {
        /// The `run.json` that names it.
        path: String,
        /// The version in its `"schema"` (`rttlab.results/N`).
        version: u64,
    },
}

impl ResultsError {
    /// The same error, its paths under `from` named under `to` instead: a report
    /// rendered from a private copy names the original's files.
    #[must_use]
    pub fn moved(self, from: &Path, to: &Path) -> Self {
        let rename = |p: PathBuf| match p.strip_prefix(from) {
            Ok(rest) => to.join(rest),
            Err(_) => p,
        };
        let rename_text = |p: String| rename(PathBuf::from(p)).display().to_string();
        match self {
            Self::Io { path, source } => Self::Io {
                path: rename(path),
                source,
            },
            Self::Json { path, source } => Self::Json {
                path: rename(path),
                source,
            },
            Self::Invalid { path, msg } => Self::Invalid {
                path: rename(path),
                msg,
            },
            Self::Mismatch { path, what } => Self::Mismatch {
                path: rename_text(path),
                what,
            },
            Self::File(e) => Self::File(e.moved(from, to)),
            Self::Schema { path, version } => Self::Schema {
                path: rename_text(path),
                version,
            },
        }
    }
}

/// An open results directory.
pub struct ResultsDir {
    path: PathBuf,
    trials: std::fs::File,
}

pub(crate) fn io(path: &Path) -> impl Fn(std::io::Error) -> ResultsError + '_ {
    move |source| ResultsError::Io {
        path: path.to_owned(),
        source,
    }
}

pub(crate) fn json(path: &Path) -> impl Fn(serde_json::Error) -> ResultsError + '_ {
    move |source| ResultsError::Json {
        path: path.to_owned(),
        source,
    }
}

/// A file of `dir` that says something this rttlab cannot use.
pub(crate) fn invalid(path: &Path, msg: impl Into<String>) -> ResultsError {
    ResultsError::Invalid {
        path: path.to_owned(),
        msg: msg.into(),
    }
}

impl ResultsDir {
    /// Create `path` for a run of `experiment` with `settings` (a JSON object), or reopen
    /// it if it holds a run with the same `settings`; returns the trials already recorded.
    ///
    /// # Errors
    /// Unwritable directory, or a different run in it.
    pub fn open<T: DeserializeOwned>(
        path: &Path,
        experiment: &str,
        settings: &serde_json::Value,
        facts: &serde_json::Value,
    ) -> Result<(Self, Vec<T>), ResultsError> {
        std::fs::create_dir_all(path).map_err(io(path))?;
        let run = path.join("run.json");
        let mut done = Vec::new();
        let old = match read_file(path, "run.json") {
            Ok(text) => Some(text),
            Err(ResultsError::File(e)) if e.is_not_found() => None,
            Err(e) => return Err(e),
        };
        if let Some(text) = old {
            let old: serde_json::Value = serde_json::from_str(&text).map_err(json(&run))?;
            if old["experiment"] != experiment || old["settings"] != *settings {
                let what = settings
                    .as_object()
                    .and_then(|m| m.iter().find(|(k, v)| old["settings"][k.as_str()] != **v))
                    .map_or("the experiment or a setting".into(), |(k, _)| k.clone());
                return Err(ResultsError::Mismatch {
                    path: path.display().to_string(),
                    what,
                });
            }
            done = read_trials(path).unwrap_or_default();
        } else {
            write_run(path, experiment, settings, facts)?;
        }
        let tp = path.join("trials.jsonl");
        let mut trials = fs::open_append(&tp)?;
        // A last line a crash cut: a whole record (the crash fell between it and its
        // newline) is ended, so the next starts on its own line; a fragment is cut
        // away, as its trial runs again — ended, it would read as an unreadable record
        // in the middle of the file.
        if !ends_a_line(&tp)? {
            let text = read_file(path, "trials.jsonl")?;
            let whole = text.rfind('\n').map_or(0, |end| end + 1);
            if serde_json::from_str::<serde_json::Value>(&text[whole..]).is_ok() {
                trials.write_all(b"\n").map_err(io(&tp))?;
            } else {
                trials.set_len(whole as u64).map_err(io(&tp))?;
            }
        }
        Ok((
            Self {
                path: path.to_owned(),
                trials,
            },
            done,
        ))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keep only `kept` in `trials.jsonl` and append `aside` to `failed.jsonl`: failed
    /// trials a resumed run will do again leave the raw data, and nothing is lost.
    /// trials.jsonl is replaced atomically (written beside it, then renamed).
    ///
    /// # Errors
    /// A file could not be written.
    pub fn set_aside<T: Serialize>(&mut self, kept: &[T], aside: &[T]) -> Result<(), ResultsError> {
        if aside.is_empty() {
            return Ok(());
        }
        let lines = |v: &[T], p: &Path| -> Result<Vec<u8>, ResultsError> {
            let mut b = Vec::new();
            for r in v {
                b.extend(serde_json::to_vec(r).map_err(json(p))?);
                b.push(b'\n');
            }
            Ok(b)
        };
        let fp = self.path.join("failed.jsonl");
        let mut failed = fs::open_append(&fp)?;
        failed.write_all(&lines(aside, &fp)?).map_err(io(&fp))?;
        failed.sync_data().map_err(io(&fp))?;
        let tp = self.path.join("trials.jsonl");
        fs::write_replace(&tp, &lines(kept, &tp)?)?;
        self.trials = fs::open_append(&tp)?;
        Ok(())
    }

    /// Append one trial and flush it to the file.
    ///
    /// # Errors
    /// The write failed.
    pub fn record<T: Serialize>(&mut self, trial: &T) -> Result<(), ResultsError> {
        let mut line = serde_json::to_vec(trial).map_err(json(&self.path))?;
        line.push(b'\n');
        self.trials.write_all(&line).map_err(io(&self.path))?;
        self.trials.sync_data().map_err(io(&self.path))
    }
}

/// Whether the file at `path` is empty or ends with a newline (its last byte only is
/// read).
fn ends_a_line(path: &Path) -> Result<bool, ResultsError> {
    let f = fs::RegularFile::open(path, "results file")?;
    let len = f.metadata().len();
    if len == 0 {
        return Ok(true);
    }
    let mut last = [0u8];
    f.file()
        .read_exact_at(&mut last, len - 1)
        .map_err(io(path))?;
    Ok(last[0] == b'\n')
}

/// Write (replace) the file `name` in the results directory `dir`: a fresh temporary
/// renamed over it ([`fs::write_replace`]), so a symlink planted there is refused,
/// never written through.
///
/// # Errors
/// The write failed, or `name` is a symlink.
pub fn write_file(dir: &Path, name: &str, contents: &str) -> Result<(), ResultsError> {
    Ok(fs::write_replace(&dir.join(name), contents.as_bytes())?)
}

/// The text of the file `name` in the results directory `dir`: a regular file of at
/// most [`fs::RESULTS_MAX_BYTES`], a symlink followed only inside `dir`
/// ([`fs::read_text_in`]), so that a directory made by someone else cannot make
/// `report` hang on a FIFO, fill memory from /dev/zero or show a file from elsewhere.
///
/// # Errors
/// Missing, not a regular file, a symlink out of `dir`, too large or not UTF-8.
pub fn read_file(dir: &Path, name: &str) -> Result<String, ResultsError> {
    Ok(fs::read_text_in(
        dir,
        name,
        "results file",
        fs::RESULTS_MAX_BYTES,
    )?)
}

/// Write `run.json` into `path` (created if missing): the tool, the experiment, its
/// settings and the host's facts.
///
/// # Errors
/// The directory or the file cannot be written.
pub fn write_run(
    path: &Path,
    experiment: &str,
    settings: &serde_json::Value,
    facts: &serde_json::Value,
) -> Result<(), ResultsError> {
    std::fs::create_dir_all(path).map_err(io(path))?;
    let run = path.join("run.json");
    let meta = serde_json::json!({
        "schema": SCHEMA,
        "tool": concat!("rttlab ", env!("CARGO_PKG_VERSION")),
        "experiment": experiment,
        "settings": settings,
        "host": facts,
    });
    let text = serde_json::to_vec_pretty(&meta).map_err(json(&run))?;
    Ok(fs::write_replace(&run, &text)?)
}

/// Read the histogram file `name` (written by `LatencyHistogram::to_csv`) in `dir`.
///
/// # Errors
/// The file is missing or is not such a histogram (the message names the line).
pub fn read_histogram(
    dir: &Path,
    name: &str,
) -> Result<crate::stats::LatencyHistogram, ResultsError> {
    let p = dir.join(name);
    let text = read_file(dir, name)?;
    crate::stats::LatencyHistogram::from_csv(&text)
        .map_err(|e| invalid(&p, format!("not a histogram rttlab wrote: {e}")))
}

/// The layout version of a `run.json`: its `"schema"` (`rttlab.results/N`), or 1 for
/// the directories rttlab 0.1 wrote without one.
///
/// # Errors
/// A schema this rttlab does not read (another name, or a newer version).
pub fn schema_version(run: &serde_json::Value, path: &Path) -> Result<u32, ResultsError> {
    let Some(schema) = run.get("schema") else {
        return Ok(1);
    };
    let version = schema
        .as_str()
        .and_then(|s| s.strip_prefix("rttlab.results/"))
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| invalid(path, format!("unknown results schema {schema}")))?;
    match u32::try_from(version) {
        Ok(v) if (1..=SCHEMA_VERSION).contains(&v) => Ok(v),
        _ => Err(ResultsError::Schema {
            path: path.display().to_string(),
            version,
        }),
    }
}

/// The experiment a results directory holds (from its `run.json`), and that file's text.
///
/// # Errors
/// No readable `run.json`, one without an experiment name, or a schema this rttlab does
/// not read.
pub fn read_run(path: &Path) -> Result<(String, String), ResultsError> {
    let run = path.join("run.json");
    let text = read_file(path, "run.json")?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(json(&run))?;
    schema_version(&v, &run)?;
    let name = v["experiment"].as_str().ok_or_else(|| {
        invalid(
            &run,
            "no \"experiment\" field: not a results directory of this rttlab",
        )
    })?;
    Ok((name.to_string(), text))
}

/// A record of trials.jsonl, known by the trial it is: the trial runner records each
/// trial of each cell once (a rerun after a crash measures only the ones missing), so
/// a second record of the same trial is not a record of the run.
pub trait Trial {
    /// Which trial of which cell this is: its cell and number (an `f64` by its bits).
    type Key: std::hash::Hash + Eq;
    /// This record's key.
    fn key(&self) -> Self::Key;
    /// Which trial of which cell this is, in words ("case no drop, trial 2").
    fn trial(&self) -> String;
}

/// A line of `trials.jsonl` (or of explain's windows.jsonl) that is not a record of
/// its experiment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadRecord {
    /// The file it is in (trials.jsonl; explain's windows.jsonl).
    pub file: &'static str,
    /// Its line number, from 1.
    pub line: usize,
    /// Why, naming the field where one is at fault (`layers[2].p50_ms: invalid
    /// type: string "x", expected f64`).
    pub why: String,
}

/// The lines of `trials.jsonl` a report left out: every one's number, and the first
/// [`BadRecords::NAMED`] with why (a file of copies has one per line: held whole, the
/// reasons would take more memory than the report).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BadRecords {
    /// Every such line's number, in the file's order.
    pub lines: Vec<usize>,
    /// The first of them, each with why.
    pub named: Vec<BadRecord>,
}

impl BadRecords {
    /// How many are named with their reason.
    pub const NAMED: usize = 20;

    /// Count `b`, naming it while fewer than [`Self::NAMED`] are.
    pub fn push(&mut self, b: BadRecord) {
        self.lines.push(b.line);
        if self.named.len() < Self::NAMED {
            self.named.push(b);
        }
    }

    /// How many lines were left out.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Whether every line was a record.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
}

impl std::fmt::Display for BadRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} line {}: {}", self.file, self.line, self.why)
    }
}

/// Every record of `trials.jsonl` in `path`, and every line that is not one. The last
/// line when no newline ends it is neither: a crash cut it while it was written, and
/// the trial runner runs that trial again.
///
/// # Errors
/// The file cannot be read.
pub fn read_records<T: DeserializeOwned>(
    path: &Path,
) -> Result<(Vec<T>, Vec<BadRecord>), ResultsError> {
    let (records, bad) = read_numbered(path)?;
    Ok((records.into_iter().map(|(_, r)| r).collect(), bad))
}

/// Records each with its line number (from 1), and the lines that are not records.
pub type Numbered<T> = (Vec<(usize, T)>, Vec<BadRecord>);

/// As [`read_records`], each record with its line number (from 1).
///
/// # Errors
/// The file cannot be read.
pub fn read_numbered<T: DeserializeOwned>(path: &Path) -> Result<Numbered<T>, ResultsError> {
    let mut records = Vec::new();
    let mut bad = Vec::new();
    each_record(path, |line, read| match read {
        Ok(r) => records.push((line, r)),
        Err(why) => bad.push(BadRecord {
            file: "trials.jsonl",
            line,
            why,
        }),
    })?;
    Ok((records, bad))
}

/// The longest line of `trials.jsonl` read as a record: a trial's record is a few KiB;
/// a longer line is named as not one, and never held whole.
const RECORD_MAX_BYTES: u64 = 1 << 20;

/// Each line of `trials.jsonl` in `path`, read one at a time (memory is one line, not
/// the file): `f` is given its number (from 1) and the record, or why it is not one.
/// Blank lines are passed over; the last line when no newline ends it is given only
/// if it parses (see [`read_records`]).
///
/// # Errors
/// The file cannot be opened or read.
pub fn each_record<T: DeserializeOwned>(
    path: &Path,
    f: impl FnMut(usize, Result<T, String>),
) -> Result<(), ResultsError> {
    each_record_of(path, "trials.jsonl", f)
}

/// As [`each_record`], for the JSON-lines file `file` of the results directory
/// `path` (`explain`'s windows.jsonl).
///
/// # Errors
/// The file cannot be opened or read.
pub fn each_record_of<T: DeserializeOwned>(
    path: &Path,
    file: &str,
    mut f: impl FnMut(usize, Result<T, String>),
) -> Result<(), ResultsError> {
    use std::io::{BufRead, Read};
    let name = path.join(file);
    let file = fs::open_in(path, file, "results file")?;
    let mut reader = std::io::BufReader::new(file.file());
    let mut line = Vec::new();
    for number in 1.. {
        line.clear();
        let got = (&mut reader)
            .take(RECORD_MAX_BYTES + 1)
            .read_until(b'\n', &mut line)
            .map_err(io(&name))?;
        if got == 0 {
            break;
        }
        if line.last() != Some(&b'\n') {
            if got as u64 <= RECORD_MAX_BYTES {
                // A crash cut it while it was written; one that still parses (cut
                // between the record and its newline) is a record all the same.
                if let Ok(r) = serde_json::from_slice(&line) {
                    f(number, Ok(r));
                }
                break;
            }
            // Longer than any record: pass over the rest of it.
            let mut rest = 0;
            loop {
                let chunk = reader.fill_buf().map_err(io(&name))?;
                if chunk.is_empty() {
                    break;
                }
                let end = chunk.iter().position(|&b| b == b'\n');
                let used = end.map_or(chunk.len(), |i| i + 1);
                reader.consume(used);
                rest += used;
                if end.is_some() {
                    break;
                }
            }
            f(
                number,
                Err(format!(
                    "a line of {} bytes or more, longer than any record",
                    got + rest
                )),
            );
            continue;
        }
        // Judged without its line end, as a line it is (a string cut by it reads
        // as cut, not as holding a control character).
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        f(number, parse_record(text));
    }
    Ok(())
}

/// One line of trials.jsonl as a record, or why not, naming the field at fault.
fn parse_record<T: DeserializeOwned>(line: &[u8]) -> Result<T, String> {
    let mut de = serde_json::Deserializer::from_slice(line);
    // Anything after the record (`{…} junk`) makes the line no record, as
    // serde_json::from_str would judge it.
    let read = match serde_path_to_error::deserialize(&mut de) {
        Ok(r) => de.end().map(|()| r).map_err(|e| (String::new(), e)),
        Err(e) => Err((e.path().to_string(), e.into_inner())),
    };
    read.map_err(|(field, inner)| {
        // serde_json counts lines within the one line it was given: only the column
        // says anything.
        let what = inner.to_string();
        let what = what.rsplit_once(" at line ").map_or(&*what, |(w, _)| w);
        let what = format!("{} (column {})", crate::excerpt(what, 200), inner.column());
        match field.as_str() {
            "" | "." | "?" => what,
            _ => format!("{field}: {what}"),
        }
    })
}

/// Every record of `trials.jsonl` in `path`, for resuming a run: a line that is not
/// a record is one the runner will write again (see [`read_records`]).
///
/// # Errors
/// The file cannot be read.
pub fn read_trials<T: DeserializeOwned>(path: &Path) -> Result<Vec<T>, ResultsError> {
    Ok(read_records(path)?.0)
}

/// Whether `name` is one of the raw files an experiment writes into its results
/// directory, the ones a report is drawn from: run.json, trials.jsonl, failed.jsonl,
/// compare.json (rttlab 0.1's compare wrote it alone), explain's windows.jsonl and
/// end.json (its transactions.jsonl is the run's detail, not the report's), and the
/// histograms
/// (`*.hist.csv`) and sample series (`*.samples.csv`) its trials name. The tables,
/// charts and report.html are rendered anew; any other file is not the report's.
pub fn is_raw(name: &str) -> bool {
    matches!(
        name,
        "run.json"
            | "trials.jsonl"
            | "failed.jsonl"
            | "compare.json"
            | explain::WINDOWS
            | explain::END
    ) || is_histogram(name)
        || name.ends_with(".samples.csv")
}

/// The raw files of a results directory, copied.
#[derive(Debug, Default)]
pub struct RawCopy {
    /// Each file copied, with its permission bits in the original.
    pub modes: std::collections::BTreeMap<String, u32>,
    /// The histograms and sample series that could not be copied (a symlink, a FIFO,
    /// too large), each by its name and why: the report says which it leaves out.
    pub refused: Vec<(String, ResultsError)>,
}

/// Copy the raw files ([`is_raw`]) of the results directory `from` into the private
/// directory `to`, each read through `from`'s descriptor ([`fs::held::HeldDir`]) and
/// streamed, so that a report is rendered from one consistent copy and the original
/// is never touched. A histogram or sample series that cannot be copied is left out
/// and named in [`RawCopy::refused`]; any other raw file that cannot is an error.
///
/// # Errors
/// Listing `from` failed; run.json, trials.jsonl, failed.jsonl or compare.json is not
/// a regular file, too large or unreadable; a copy cannot be written.
pub fn copy_raw(from: &fs::held::HeldDir, to: &Path) -> Result<RawCopy, ResultsError> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let mut copy = RawCopy::default();
    let mut names: Vec<String> = from
        .names()?
        .into_iter()
        .filter_map(|n| n.into_string().ok())
        .filter(|n| is_raw(n))
        .collect();
    names.sort();
    for name in names {
        let file = match from.open_file(&name, "results file") {
            Ok(f) => f,
            Err(e) if name.ends_with(".csv") => {
                copy.refused.push((name, e.into()));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let mode = file.metadata().mode() & 0o777;
        let dest = to.join(&name);
        let mut w = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(0o600)
            .open(&dest)
            .map_err(io(&dest))?;
        match file.copy_to(&mut w, cap(&name)) {
            Ok(_) => {
                copy.modes.insert(name, mode);
            }
            Err(e) if name.ends_with(".csv") => {
                drop(w);
                std::fs::remove_file(&dest).map_err(io(&dest))?;
                copy.refused.push((name, e.into()));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(copy)
}

/// The largest raw file copied: a histogram file is tens of KiB (a few thousand
/// buckets), as are run.json and compare.json; a samples file a few MiB;
/// trials.jsonl of a long run tens of MiB.
fn cap(name: &str) -> u64 {
    if is_histogram(name) {
        HISTOGRAM_MAX_BYTES
    } else if name.ends_with(".samples.csv") {
        SAMPLES_MAX_BYTES
    } else if name == "run.json" || name == "compare.json" {
        HISTOGRAM_MAX_BYTES
    } else {
        fs::RESULTS_MAX_BYTES
    }
}

/// See [`cap`]: a histogram, run.json and compare.json are read whole to be parsed.
const HISTOGRAM_MAX_BYTES: u64 = 16 << 20;
/// See [`cap`]: a samples file is read whole to be parsed.
const SAMPLES_MAX_BYTES: u64 = 64 << 20;

fn is_histogram(name: &str) -> bool {
    name.ends_with(".hist.csv")
}

/// Every histogram file of the results directory `dir` that cannot be read as one:
/// those named by its trials (a missing one included) and every `*.hist.csv` in it,
/// but those named in `known` (already found unreadable, for a reason of their own).
/// Most reports are drawn from trials.jsonl alone and never open them, so without
/// this a missing or foreign histogram (a symlink to /etc/passwd) would pass unseen.
///
/// # Errors
/// The directory cannot be listed.
pub fn check_histograms(dir: &Path, known: &[&str]) -> Result<Vec<ResultsError>, ResultsError> {
    fn named(v: &serde_json::Value, out: &mut std::collections::BTreeSet<String>) {
        match v {
            serde_json::Value::String(s) if is_histogram(s) && !s.contains('/') => {
                out.insert(s.clone());
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| named(x, out)),
            serde_json::Value::Object(m) => m.values().for_each(|x| named(x, out)),
            _ => {}
        }
    }
    let mut names = std::collections::BTreeSet::new();
    // One line at a time: a trial as a JSON tree is ten times its text.
    let _ = each_record::<serde_json::Value>(dir, |_, t| {
        if let Ok(t) = t {
            named(&t, &mut names);
        }
    });
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        if let Some(n) = entry.file_name().to_str().filter(|n| is_histogram(n)) {
            names.insert(n.to_owned());
        }
    }
    Ok(names
        .iter()
        .filter(|n| !known.contains(&n.as_str()))
        .filter_map(|n| read_histogram(dir, n).err())
        .collect())
}

/// The two-host lab a run builds: its round-trip delay, split evenly between the two
/// directions, and how its emulator waits between frames. Flattened into the settings
/// of every experiment that builds that lab, so run.json keeps `lab_rtt_us` and
/// `lab_poll` as keys of its settings, as it always has; compare's own record spells
/// the delay in seconds (`lab_rtt_s`, with every other duration of compare.json) and
/// hands the lab this struct (`compare::CompareSettings::lab`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabSettings {
    /// The round-trip delay.
    #[serde(rename = "lab_rtt_us", with = "crate::stats::units::micros")]
    pub rtt: std::time::Duration,
    /// The emulator busy-polls one CPU instead of sleeping between frames: its delays
    /// stay within µs when the hypervisor steals time, where a sleeping emulator's
    /// wake-ups stretch to milliseconds.
    #[serde(rename = "lab_poll", default)]
    pub poll: bool,
}

/// How often each cell of an experiment's plan runs, and the seed of the order the
/// runs go in (`--trials`, `--seed`). Part of every experiment's settings (flattened:
/// run.json keeps `trials` and `seed` as keys of its settings), so a rerun with other
/// ones is another run. Files written before `--trials` existed read as one trial,
/// seed 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Repeats {
    /// Runs of each cell (`--trials`).
    #[serde(default = "one_trial")]
    pub trials: u32,
    /// Seed of the runs' shuffled order (`--seed`): one seed, one order.
    #[serde(default = "first_seed")]
    pub seed: u64,
}

impl Default for Repeats {
    /// One trial of each cell, seed 1.
    fn default() -> Self {
        Self {
            trials: one_trial(),
            seed: first_seed(),
        }
    }
}

fn one_trial() -> u32 {
    1
}

fn first_seed() -> u64 {
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_versions_old_current_and_newer() {
        let p = Path::new("run.json");
        assert_eq!(
            schema_version(&serde_json::json!({"experiment": "x"}), p).unwrap(),
            1
        );
        assert_eq!(
            schema_version(&serde_json::json!({"schema": SCHEMA}), p).unwrap(),
            SCHEMA_VERSION
        );
        let e = schema_version(&serde_json::json!({"schema": "rttlab.results/9"}), p)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("schema version 9") && e.contains("newer rttlab"),
            "{e}"
        );
        assert!(schema_version(&serde_json::json!({"schema": "other/1"}), p).is_err());
    }

    #[test]
    fn resumes_the_same_run_and_refuses_another() {
        let dir = tempfile::tempdir().unwrap();
        let s = serde_json::json!({"trials": 3, "cells": [1, 2]});
        let (mut r, done) =
            ResultsDir::open::<u32>(dir.path(), "t", &s, &serde_json::json!({})).unwrap();
        assert!(done.is_empty());
        r.record(&7u32).unwrap();
        r.record(&8u32).unwrap();
        drop(r);
        // A crash mid-line leaves a fragment: it is skipped.
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("trials.jsonl"))
            .unwrap()
            .write_all(b"{\"cut")
            .unwrap();
        let (mut r, done) =
            ResultsDir::open::<u32>(dir.path(), "t", &s, &serde_json::json!({})).unwrap();
        assert_eq!(done, vec![7, 8]);
        r.record(&9u32).unwrap();
        let (_, done) =
            ResultsDir::open::<u32>(dir.path(), "t", &s, &serde_json::json!({})).unwrap();
        assert_eq!(done, vec![7, 8, 9]);
        // The fragment was cut away on resuming, not ended into a line of its own: the
        // report finds no unreadable record. Witness: the file's bytes.
        let text = std::fs::read_to_string(dir.path().join("trials.jsonl")).unwrap();
        assert_eq!(text, "7\n8\n9\n");
        assert!(read_records::<u32>(dir.path()).unwrap().1.is_empty());
        // A whole record the crash left without its newline is kept.
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("trials.jsonl"))
            .unwrap()
            .write_all(b"10")
            .unwrap();
        let (_, done) =
            ResultsDir::open::<u32>(dir.path(), "t", &s, &serde_json::json!({})).unwrap();
        assert_eq!(done, vec![7, 8, 9, 10]);
        let text = std::fs::read_to_string(dir.path().join("trials.jsonl")).unwrap();
        assert_eq!(text, "7\n8\n9\n10\n");
        let other = serde_json::json!({"trials": 5, "cells": [1, 2]});
        let e = ResultsDir::open::<u32>(dir.path(), "t", &other, &serde_json::json!({}))
            .err()
            .unwrap();
        assert!(e.to_string().contains("trials differs"), "{e}");
    }
}
