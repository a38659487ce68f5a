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

/// The most bytes of transactions.jsonl: past it transactions are counted, not
/// written (at `--json-rate`'s default, 10 000 a second of ~500 bytes, half an hour).
pub const TRANSACTIONS_MAX_BYTES: u64 = 1 << 30;

/// The most bytes of windows.jsonl's interval lines, so that `rttlab report` can
/// read the file whole ([`crate::kernel::fs::RESULTS_MAX_BYTES`]): past it intervals
/// are counted, not written; the whole run's lines are written all the same.
pub const WINDOWS_MAX_BYTES: u64 = 128 << 20;

/// An explain run's results directory being written: windows.jsonl a line per
/// window, transactions.jsonl a line per transaction kept, end.json at the end.
pub struct Writer {
    dir: std::path::PathBuf,
    windows: std::fs::File,
    transactions: std::io::BufWriter<std::fs::File>,
    /// Bytes written to each file.
    windows_bytes: u64,
    transactions_bytes: u64,
    /// Lines not written for their file's bound: intervals and transactions.
    windows_over: u64,
    transactions_over: u64,
}

impl Writer {
    /// Make `dir`, new or empty, and write its run.json. A symbolic link, a file or
    /// a directory holding anything is refused: a run is never merged into another,
    /// nor written through a link.
    ///
    /// # Errors
    /// `dir` is not new or empty, or cannot be written.
    pub fn create(
        dir: &std::path::Path,
        settings: &serde_json::Value,
        facts: &serde_json::Value,
    ) -> Result<Self, super::ResultsError> {
        let refuse = |why: &str| super::invalid(dir, format!("{why}: give --out a new directory"));
        // `link/` would follow the link: the path as components, a trailing `/` gone.
        let named: std::path::PathBuf = dir.components().collect();
        match named.symlink_metadata() {
            Ok(m) if m.file_type().is_symlink() => return Err(refuse("is a symbolic link")),
            Ok(m) if !m.is_dir() => return Err(refuse("is not a directory")),
            Ok(_) => {
                if std::fs::read_dir(dir)
                    .map_err(super::io(dir))?
                    .next()
                    .is_some()
                {
                    return Err(refuse("already exists and is not empty"));
                }
            }
            Err(_) => {}
        }
        super::write_run(dir, super::names::EXPLAIN, settings, facts)?;
        let open = |name: &str| crate::kernel::fs::open_append(&dir.join(name));
        Ok(Self {
            dir: dir.to_owned(),
            windows: open(WINDOWS)?,
            transactions: std::io::BufWriter::new(open(TRANSACTIONS)?),
            windows_bytes: 0,
            transactions_bytes: 0,
            windows_over: 0,
            transactions_over: 0,
        })
    }

    /// Append one window's record (and what the transactions file holds so far); an
    /// interval's past [`WINDOWS_MAX_BYTES`] is counted instead.
    ///
    /// # Errors
    /// A write failed.
    pub fn window(&mut self, w: &WindowRecord) -> Result<(), super::ResultsError> {
        use std::io::Write as _;
        let path = self.dir.join(WINDOWS);
        let mut line =
            super::schema::line(super::schema::EXPLAIN_WINDOW, w).map_err(super::json(&path))?;
        line.push('\n');
        if !w.whole_run && self.windows_bytes + line.len() as u64 > WINDOWS_MAX_BYTES {
            self.windows_over += 1;
        } else {
            self.windows
                .write_all(line.as_bytes())
                .map_err(super::io(&path))?;
            self.windows_bytes += line.len() as u64;
        }
        self.transactions
            .flush()
            .map_err(super::io(&self.dir.join(TRANSACTIONS)))
    }

    /// Append one transaction's JSON line; past [`TRANSACTIONS_MAX_BYTES`], count it.
    ///
    /// # Errors
    /// A write failed.
    pub fn transaction(&mut self, line: &str) -> Result<(), super::ResultsError> {
        use std::io::Write as _;
        let len = line.len() as u64 + 1;
        if self.transactions_bytes + len > TRANSACTIONS_MAX_BYTES {
            self.transactions_over += 1;
            return Ok(());
        }
        self.transactions_bytes += len;
        writeln!(self.transactions, "{line}").map_err(super::io(&self.dir.join(TRANSACTIONS)))
    }

    /// One line for each file that reached its bound: what was counted and not
    /// written.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.transactions_over > 0 {
            notes.push(format!(
                "not written: {} transaction(s) timed and counted, transactions.jsonl at its {} MiB",
                self.transactions_over,
                TRANSACTIONS_MAX_BYTES >> 20
            ));
        }
        if self.windows_over > 0 {
            notes.push(format!(
                "not written: {} interval(s), counted in the whole run's summary, windows.jsonl at its {} MiB (a longer --interval keeps them all)",
                self.windows_over,
                WINDOWS_MAX_BYTES >> 20
            ));
        }
        notes
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
