//! `rttlab explain --out DIR`'s results directory: what each window of each watched
//! port said (windows.jsonl, the report's raw data), the run's end (end.json), and
//! the transactions themselves (transactions.jsonl, within `--json-rate`).

use crate::service::Summary;
use serde::{Deserialize, Serialize};

/// One line per window, side and port, then one per side and port for the whole run.
pub const WINDOWS: &str = "windows.jsonl";
/// Written when the run ends: how long it ran and what it did not time.
pub const END: &str = "end.json";
/// One JSON line per transaction (`rttlab.explain-transaction/2`), as `--json`
/// prints them and within the same rate.
pub const TRANSACTIONS: &str = "transactions.jsonl";

/// A line of windows.jsonl: a window of one side of one port, as the live table
/// showed it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WindowRecord {
    /// From the run's start to the window's, s.
    pub start_s: f64,
    /// The window's length, s.
    pub seconds: f64,
    /// The watched port (the server's, on either side).
    pub port: u16,
    /// The whole run, written at its end, not one interval of it.
    pub whole_run: bool,
    /// What the window says.
    #[serde(flatten)]
    pub summary: Summary,
}

/// end.json: the run ended, after `seconds`, and these were not timed or not kept.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct End {
    /// The run's length, s.
    pub seconds: f64,
    /// One line for each kind of transaction not timed or not written, as the
    /// command printed it.
    pub notes: Vec<String>,
}

/// An explain run's results directory being written: windows.jsonl a line per
/// window, transactions.jsonl a line per transaction kept, end.json at the end.
pub struct Writer {
    dir: std::path::PathBuf,
    windows: std::fs::File,
    transactions: std::io::BufWriter<std::fs::File>,
}

impl Writer {
    /// Make `dir` (or use it empty of runs) and write its run.json.
    ///
    /// # Errors
    /// `dir` holds a run already (its run.json), or cannot be written.
    pub fn create(
        dir: &std::path::Path,
        settings: &serde_json::Value,
        facts: &serde_json::Value,
    ) -> Result<Self, super::ResultsError> {
        if dir.join("run.json").symlink_metadata().is_ok() {
            return Err(super::invalid(
                &dir.join("run.json"),
                "holds a run already: give --out a new directory",
            ));
        }
        super::write_run(dir, super::names::EXPLAIN, settings, facts)?;
        let open = |name: &str| crate::kernel::fs::open_append(&dir.join(name));
        Ok(Self {
            dir: dir.to_owned(),
            windows: open(WINDOWS)?,
            transactions: std::io::BufWriter::new(open(TRANSACTIONS)?),
        })
    }

    /// Append one window's record (and what the transactions file holds so far).
    ///
    /// # Errors
    /// A write failed.
    pub fn window(&mut self, w: &WindowRecord) -> Result<(), super::ResultsError> {
        use std::io::Write as _;
        let path = self.dir.join(WINDOWS);
        let mut line =
            super::schema::line(super::schema::EXPLAIN_WINDOW, w).map_err(super::json(&path))?;
        line.push('\n');
        self.windows
            .write_all(line.as_bytes())
            .map_err(super::io(&path))?;
        self.transactions
            .flush()
            .map_err(super::io(&self.dir.join(TRANSACTIONS)))
    }

    /// Append one transaction's JSON line.
    ///
    /// # Errors
    /// A write failed.
    pub fn transaction(&mut self, line: &str) -> Result<(), super::ResultsError> {
        use std::io::Write as _;
        writeln!(self.transactions, "{line}").map_err(super::io(&self.dir.join(TRANSACTIONS)))
    }

    /// Write end.json; returns the directory, for its report
    /// (`report::service_dir::write`).
    ///
    /// # Errors
    /// A write failed.
    pub fn end(mut self, end: &End) -> Result<std::path::PathBuf, super::ResultsError> {
        use std::io::Write as _;
        let path = self.dir.join(END);
        self.transactions
            .flush()
            .map_err(super::io(&self.dir.join(TRANSACTIONS)))?;
        let text = serde_json::to_string_pretty(end).map_err(super::json(&path))?;
        super::write_file(&self.dir, END, &text)?;
        Ok(self.dir)
    }
}
