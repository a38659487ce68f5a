//! A results directory: `run.json` (settings and host facts), `trials.jsonl` (one line
//! per finished trial, flushed as it is written, so an interrupted run keeps what it
//! measured), and the rendered tables and report. Opening a directory that holds a run
//! with the same settings resumes it.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Errors of a results directory.
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    #[error("results directory {path}: {msg}")]
    Io { path: String, msg: String },
    #[error(
        "{path} holds a run with other settings ({what} differs); give another --out, or remove it"
    )]
    Mismatch { path: String, what: String },
}

/// An open results directory.
pub struct ResultsDir {
    path: PathBuf,
    trials: std::fs::File,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> ResultsError + '_ {
    move |e| ResultsError::Io {
        path: path.display().to_string(),
        msg: e.to_string(),
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
            let old: serde_json::Value =
                serde_json::from_slice(&b).map_err(|e| ResultsError::Io {
                    path: run.display().to_string(),
                    msg: e.to_string(),
                })?;
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

    /// Append one trial and flush it to the file.
    ///
    /// # Errors
    /// The write failed.
    pub fn record<T: Serialize>(&mut self, trial: &T) -> Result<(), ResultsError> {
        let mut line = serde_json::to_vec(trial).map_err(|e| ResultsError::Io {
            path: self.path.display().to_string(),
            msg: e.to_string(),
        })?;
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
        "tool": concat!("rttlab ", env!("CARGO_PKG_VERSION")),
        "experiment": experiment,
        "settings": settings,
        "host": facts,
    });
    let text = serde_json::to_vec_pretty(&meta).map_err(|e| ResultsError::Io {
        path: run.display().to_string(),
        msg: e.to_string(),
    })?;
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
    crate::stats::LatencyHistogram::from_csv(&text).map_err(|msg| ResultsError::Io {
        path: p.display().to_string(),
        msg,
    })
}

/// The experiment a results directory holds (from its `run.json`), and that file's text.
///
/// # Errors
/// No readable `run.json`, or one without an experiment name.
pub fn read_run(path: &Path) -> Result<(String, String), ResultsError> {
    let run = path.join("run.json");
    let text = std::fs::read_to_string(&run).map_err(io(&run))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| ResultsError::Io {
        path: run.display().to_string(),
        msg: e.to_string(),
    })?;
    let name = v["experiment"].as_str().ok_or_else(|| ResultsError::Io {
        path: run.display().to_string(),
        msg: "no \"experiment\" field: not a results directory of this rttlab".into(),
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

#[cfg(test)]
mod tests {
    use super::*;

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
