//! rttlab: round-trip time at every layer, side by side.
//!
//! See docs/ARCHITECTURE.md for the module map. Data flows one way: sources ([`probe`],
//! [`kernel`], [`capture`]) → samples → [`stats`] → records ([`results`]) → [`report`];
//! [`experiment`] composes sources and hands records to [`report`]. No module imports
//! one above it (checked by tests/structure.rs).

pub mod capture;
pub mod experiment;
pub mod kernel;
pub mod lab;
pub mod model;
pub mod passive;
pub mod probe;
pub mod report;
pub mod results;
pub mod stats;
pub mod wire;

/// Where runs keep state that must outlive them (the tuning journal, labs):
/// `$RTTLAB_STATE_DIR`, else /run/rttlab (tmpfs: gone at reboot, as the kernel state
/// it describes).
pub fn state_dir() -> std::path::PathBuf {
    std::env::var_os("RTTLAB_STATE_DIR").map_or_else(
        || std::path::PathBuf::from("/run/rttlab"),
        std::path::PathBuf::from,
    )
}
