//! rttlab: round-trip time at every layer, side by side.
//!
//! See docs/ARCHITECTURE.md for the module map. Data flows one way: sources ([`probe`],
//! [`kernel`], [`capture`]) → samples → [`stats`] → records ([`results`]) → [`report`];
//! [`experiment`] composes sources and hands records to [`report`]. No module imports
//! one above it (checked by tests/structure.rs).

pub mod agent;
pub mod capture;
pub mod experiment;
pub mod kernel;
pub mod lab;
pub mod model;
pub mod passive;
pub mod probe;
pub mod report;
pub mod results;
pub mod service;
pub mod stats;
pub mod wire;

/// What this binary was built from, as `rttlab --version` and the agent's
/// `rttlab_build_info` name it (set by build.rs).
pub mod build {
    /// The crate's version.
    pub const VERSION: &str = env!("CARGO_PKG_VERSION");
    /// The commit, 12 hex digits, `-dirty` when the tree had changes; `unknown`
    /// outside git.
    pub const REVISION: &str = env!("RTTLAB_REVISION");
    /// The build date, YYYY-MM-DD (`SOURCE_DATE_EPOCH`'s when set).
    pub const DATE: &str = env!("RTTLAB_BUILD_DATE");
    /// `0.1.0 (e799eef1a2b3 2026-11-26)`.
    pub const LONG_VERSION: &str = concat!(
        env!("CARGO_PKG_VERSION"),
        " (",
        env!("RTTLAB_REVISION"),
        " ",
        env!("RTTLAB_BUILD_DATE"),
        ")"
    );
}

/// An error and each of its sources, joined by ": " — the text of an error that is
/// kept as a string (a trial's recorded error, a layer that could not run), where the
/// error's own `Display` names only its context and leaves the cause to `source()`.
pub fn error_chain<E: std::error::Error + ?Sized>(e: &E) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        text.push_str(": ");
        text.push_str(&s.to_string());
        next = s.source();
    }
    text
}

/// At most `max_chars` of `text` as a message quotes it: control characters escaped
/// (a file's line or name cannot break the message's line or drive a terminal), and
/// a longer text cut with its length said (a 200 MiB line of a damaged file once
/// went whole into one error message).
pub fn excerpt(text: &str, max_chars: usize) -> String {
    let mut out = String::new();
    for c in text.chars().take(max_chars) {
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    let total = text.chars().count();
    if total > max_chars {
        out.push_str(&format!("… ({total} characters)"));
    }
    out
}

/// Where runs keep state that must outlive them (the tuning journal, labs):
/// `$RTTLAB_STATE_DIR`, else /run/rttlab (tmpfs: gone at reboot, as the kernel state
/// it describes).
pub fn state_dir() -> std::path::PathBuf {
    std::env::var_os("RTTLAB_STATE_DIR").map_or_else(
        || std::path::PathBuf::from("/run/rttlab"),
        std::path::PathBuf::from,
    )
}

#[cfg(test)]
mod tests {
    /// Witness: the excerpt's text and length.
    #[test]
    fn an_excerpt_escapes_and_cuts_what_it_quotes() {
        assert_eq!(
            super::excerpt("a\nb\u{1b}[31m \"q\"", 80),
            "a\\nb\\u{1b}[31m \"q\""
        );
        let long = "x".repeat(1 << 20);
        let e = super::excerpt(&long, 80);
        assert!(
            e.starts_with(&"x".repeat(80)) && e.ends_with("… (1048576 characters)"),
            "{e}"
        );
    }
}
