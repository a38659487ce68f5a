//! Scenarios from the seeds: trial runners that compose the lab, the probes and the
//! kernel knobs, and write results directories (DESIGN.md: run.json, raw data as JSON
//! lines written as each trial finishes, tables and report).

pub mod blackout;
pub mod compare;
pub mod results;
