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
pub mod passive_active;
pub mod resreq;
pub mod schema;
pub mod sweep;
pub mod synrto;

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The version of the results layout this rttlab writes.
pub const SCHEMA_VERSION: u32 = 2;
/// Its name in `run.json`.
pub const SCHEMA: &str = "rttlab.results/2";

/// Errors of a results directory.
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    #[error("results directory {}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not the JSON this rttlab writes", .path.display())]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A file that parses but says something this rttlab cannot use.
    #[error("{}: {msg}", .path.display())]
    Invalid { path: PathBuf, msg: String },
    #[error(
        "{path} holds a run with other settings ({what} differs); give another --out, or remove it"
    )]
    Mismatch { path: String, what: String },
    /// Written by a newer rttlab whose layout this one does not know.
    #[error("{path} was written with results schema version {version}; this rttlab reads versions 1 to {SCHEMA_VERSION}: render it with a newer rttlab")]
    Schema { path: String, version: u64 },
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
        if let Ok(b) = std::fs::read(&run) {
            let old: serde_json::Value = serde_json::from_slice(&b).map_err(json(&run))?;
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
        let mut trials = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&tp)
            .map_err(io(&tp))?;
        // End a line a crash cut, so the next record starts on its own line.
        if std::fs::read(&tp).is_ok_and(|b| b.last().is_some_and(|&c| c != b'\n')) {
            trials.write_all(b"\n").map_err(io(&tp))?;
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
        let mut failed = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&fp)
            .map_err(io(&fp))?;
        failed.write_all(&lines(aside, &fp)?).map_err(io(&fp))?;
        failed.sync_data().map_err(io(&fp))?;
        let tp = self.path.join("trials.jsonl");
        let tmp = self.path.join("trials.jsonl.new");
        std::fs::write(&tmp, lines(kept, &tp)?).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &tp).map_err(io(&tp))?;
        self.trials = std::fs::OpenOptions::new()
            .append(true)
            .open(&tp)
            .map_err(io(&tp))?;
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

/// Write (replace) the file `name` in the results directory `dir`.
///
/// # Errors
/// The write failed.
pub fn write_file(dir: &Path, name: &str, contents: &str) -> Result<(), ResultsError> {
    let p = dir.join(name);
    std::fs::write(&p, contents).map_err(io(&p))
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
    std::fs::write(&run, text).map_err(io(&run))
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
    let text = std::fs::read_to_string(&p).map_err(io(&p))?;
    crate::stats::LatencyHistogram::from_csv(&text).map_err(|msg| invalid(&p, msg))
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
    let text = std::fs::read_to_string(&run).map_err(io(&run))?;
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

/// Every record of `trials.jsonl` in `path` (a line cut by a crash is skipped).
///
/// # Errors
/// The file cannot be read.
pub fn read_trials<T: DeserializeOwned>(path: &Path) -> Result<Vec<T>, ResultsError> {
    let tp = path.join("trials.jsonl");
    let text = std::fs::read_to_string(&tp).map_err(io(&tp))?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

/// Copy the results directory `from` into `to` (created; files only, one level), so
/// that a report can be rendered there without touching the original.
///
/// # Errors
/// A file cannot be read or written.
pub fn copy_dir(from: &Path, to: &Path) -> Result<(), ResultsError> {
    std::fs::create_dir_all(to).map_err(io(to))?;
    for entry in std::fs::read_dir(from).map_err(io(from))? {
        let entry = entry.map_err(io(from))?;
        if entry.file_type().map_err(io(from))?.is_file() {
            let dest = to.join(entry.file_name());
            std::fs::copy(entry.path(), &dest).map_err(io(&dest))?;
        }
    }
    Ok(())
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
        let other = serde_json::json!({"trials": 5, "cells": [1, 2]});
        let e = ResultsDir::open::<u32>(dir.path(), "t", &other, &serde_json::json!({}))
            .err()
            .unwrap();
        assert!(e.to_string().contains("trials differs"), "{e}");
    }
}
