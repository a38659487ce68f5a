//! Presentation: human tables, JSON, CSV and netperf-style output selectors. Nothing
//! outside this module formats results.

pub mod blackout;
pub mod compare;
pub mod dir;
pub mod html;
pub mod lab;
pub mod passive;
pub mod passive_active;
pub mod ping;
pub mod resreq;
mod rr;
pub mod rto;
pub mod selectors;
pub mod svg;
pub mod sweep;
pub mod syn_rto;
pub mod table;
pub mod tcpinfo;
pub mod trials;

pub use selectors::{Selectable, Selector, SelectorError, Value};

use serde::Serialize;

/// How a result is printed.
#[derive(Clone, Debug, PartialEq)]
pub enum OutputFormat {
    /// Aligned tables for people.
    Human {
        /// Add netperf's log-linear histogram to the tables (`--histogram`).
        histogram: bool,
    },
    /// One JSON object.
    Json,
    /// A line of selector names and a line of values, for every selector the result has.
    Csv,
    /// netperf's `-o`: the chosen selectors, names then values.
    Selectors(Vec<Selector>),
}

/// A result that can be printed in every format.
pub trait Report: Serialize + Selectable {
    /// The name of its JSON document (`crate::results::schema`).
    const SCHEMA: &'static str;
    /// Tables for people.
    fn human(&self, histogram: bool) -> String;
}

/// One set of round trips as rr's and ping's table: a row labelled `label` under
/// `RTT SAMPLES MIN_us P50_us … MAX_us MEAN_us STDDEV_us`.
pub fn summary_table(label: &str, s: &crate::stats::Summary) -> String {
    let mut t = table::Table::new(rr::summary_header("RTT", s));
    t.row(rr::summary_row(label, s));
    t.render()
}

/// Render `r` in `format`.
///
/// # Errors
/// A selector does not apply to this kind of result.
pub fn render<R: Report>(r: &R, format: &OutputFormat) -> Result<String, SelectorError> {
    match format {
        OutputFormat::Human { histogram } => Ok(r.human(*histogram)),
        OutputFormat::Json => Ok(crate::results::schema::pretty(R::SCHEMA, r)
            .unwrap_or_else(|e| format!("{{\"error\":\"{}\"}}", crate::error_chain(&e)))
            + "\n"),
        OutputFormat::Csv => selectors::render_lines(r, &R::all_selectors()),
        OutputFormat::Selectors(list) => selectors::render_lines(r, list),
    }
}
