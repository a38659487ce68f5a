//! Presentation: human tables, JSON, CSV and netperf-style output selectors. Nothing
//! outside this module formats results.

pub mod blackout;
pub mod compare;
pub mod dir;
pub mod explain;
pub mod html;
pub mod lab;
pub mod omni;
pub mod passive;
pub mod passive_active;
pub mod ping;
pub mod resreq;
mod rr;
pub mod rto;
pub mod selectors;
pub mod service;
pub mod service_dir;
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
        /// The first lines that say what was run; netperf's `-P 0` leaves them out.
        banner: bool,
    },
    /// One JSON object.
    Json,
    /// A line of selector names and a line of values, for every selector the result has.
    Csv,
    /// netperf's `-o`: the chosen selectors, names then values.
    Selectors(Vec<Selector>),
    /// netperf's test-specific `-o`/`-O` as netperf prints them (its omni output):
    /// its banner, its header names and its value formats.
    Netperf {
        /// CSV (`-o`) or aligned columns (`-O`).
        style: omni::Style,
        /// The selectors, in their order.
        selectors: Vec<Selector>,
        /// netperf's `-P 1` (the default): the banner and the header lines; `-P 0`
        /// prints the values alone.
        headers: bool,
    },
}

/// A result that can be printed in every format.
pub trait Report: Serialize + Selectable {
    /// The name of its JSON document (`crate::results::schema`).
    const SCHEMA: &'static str;
    /// Tables for people.
    fn human(&self, histogram: bool) -> String;
    /// [`Report::human`] without the first lines that say what was run (netperf's
    /// `-P 0`); all of it when it has no such lines.
    fn human_without_banner(&self, histogram: bool) -> String {
        self.human(histogram)
    }
    /// The line netperf prints above its omni output naming the test and its ends;
    /// `None` when the result has no netperf counterpart.
    fn netperf_banner(&self) -> Option<String> {
        None
    }
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
        OutputFormat::Human {
            histogram,
            banner: true,
        } => Ok(r.human(*histogram)),
        OutputFormat::Human {
            histogram,
            banner: false,
        } => Ok(r.human_without_banner(*histogram)),
        OutputFormat::Json => Ok(crate::results::schema::pretty(R::SCHEMA, r)
            .unwrap_or_else(|e| format!("{{\"error\":\"{}\"}}", crate::error_chain(&e)))
            + "\n"),
        OutputFormat::Csv => selectors::render_lines(r, &R::all_selectors()),
        OutputFormat::Selectors(list) => selectors::render_lines(r, list),
        OutputFormat::Netperf {
            style,
            selectors,
            headers,
        } => {
            let table = omni::render(r, selectors, *style, *headers)?;
            Ok(match r.netperf_banner().filter(|_| *headers) {
                Some(banner) => format!("{banner}\n{table}"),
                None => table,
            })
        }
    }
}
