//! Metrics written to a file for node_exporter's textfile collector, replaced
//! atomically (written beside it, then renamed) so the collector never reads half of
//! one. The HTTP endpoint is [`super::http`].

use super::metrics::Metrics;
use std::path::Path;

/// Write the text-format exposition to `path` atomically: a fresh temporary with an
/// unpredictable name (`.NAME.<random>.tmp`: node_exporter reads only `*.prom`)
/// renamed over it, so a symlink at `path` is refused, never written through.
///
/// # Errors
/// The directory is not writable, or `path` is a symlink.
pub fn write_textfile(path: &Path, metrics: &Metrics) -> Result<(), crate::kernel::fs::FileError> {
    crate::kernel::fs::write_replace(path, metrics.text().as_bytes())
}
