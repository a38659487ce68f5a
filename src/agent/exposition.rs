//! Metrics written to a file for node_exporter's textfile collector, replaced
//! atomically (written beside it, then renamed) so the collector never reads half of
//! one. The HTTP endpoint is [`super::http`].

use super::metrics::{Format, Metrics};
use std::io;
use std::path::Path;

/// Write the text-format exposition to `path` atomically.
///
/// # Errors
/// The directory is not writable.
pub fn write_textfile(path: &Path, metrics: &Metrics) -> io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::other("--textfile needs a file name"))?;
    // node_exporter reads only *.prom: the temporary name must not end so.
    let tmp = path.with_file_name(format!(".{}.tmp", name.to_string_lossy()));
    std::fs::write(&tmp, metrics.expose(Format::Text))?;
    std::fs::rename(&tmp, path)
}
