//! The slow log: the slowest transactions' anatomies, one JSON line each
//! ([`SLOW_SCHEMA`]).

use super::recorder::Logged;
use serde::Serialize;

/// The kind of `--slow-log`'s lines (`results::schema::RR_SLOW` names it with the
/// others; it is defined here, below them, because the probe writes the file).
pub const SLOW_SCHEMA: &str = "rttlab.rr-slow/1";

/// `--slow-log FILE`: slow transactions' anatomies as JSON lines (`rttlab.rr-slow/1`),
/// every one over a threshold as it happens, or the run's slowest share at the end.
pub struct SlowLog {
    /// Log every transaction at least this slow as it is joined; without one, the
    /// run's slowest share is written at its end.
    pub threshold_ns: Option<u64>,
    out: std::sync::Mutex<std::io::BufWriter<std::fs::File>>,
}

impl SlowLog {
    /// Create `path` anew (a fresh file renamed into place: never one a symlink
    /// points to).
    ///
    /// # Errors
    /// The file cannot be created, or `path` is a symlink.
    pub fn create(
        path: &std::path::Path,
        threshold_ns: Option<u64>,
    ) -> Result<Self, crate::kernel::fs::FileError> {
        Ok(Self {
            threshold_ns,
            out: std::sync::Mutex::new(std::io::BufWriter::new(crate::kernel::fs::create_replace(
                path,
            )?)),
        })
    }

    /// Log `l` if it is over the threshold.
    pub fn offer(&self, l: &Logged) {
        if self.threshold_ns.is_some_and(|t| l.t.rtt_ns >= t) {
            self.write(l);
        }
    }

    /// Write one line (a full disk loses lines, never the run).
    pub fn write(&self, l: &Logged) {
        use std::io::Write;
        #[derive(Serialize)]
        struct Line<'a> {
            schema: &'static str,
            #[serde(flatten)]
            l: &'a Logged,
        }
        if let Ok(line) = serde_json::to_string(&Line {
            schema: SLOW_SCHEMA,
            l,
        }) {
            if let Ok(mut o) = self.out.lock() {
                let _ = writeln!(o, "{line}");
            }
        }
    }

    /// Flush what is buffered.
    ///
    /// # Errors
    /// The file could not be written.
    pub fn finish(&self) -> std::io::Result<()> {
        use std::io::Write;
        match self.out.lock() {
            Ok(mut o) => o.flush(),
            Err(_) => Err(std::io::Error::other("the slow log's writer panicked")),
        }
    }
}
