//! Output options shared by every measuring subcommand.

use anyhow::Context;
use clap::Args;
use rttlab::report::{self, OutputFormat, Report, Selector};
use std::io::Write;
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
pub struct OutputArgs {
    /// Print one JSON object with every setting and measurement.
    #[arg(long, conflicts_with_all = ["csv", "output"])]
    pub json: bool,
    /// Print a CSV header line and a value line with every selector.
    #[arg(long, conflicts_with = "output")]
    pub csv: bool,
    /// netperf output selectors, comma-separated (e.g. P50_LATENCY,P99.9_LATENCY,
    /// THROUGHPUT); `-o ?` lists them.
    #[arg(short = 'o', long = "output", value_name = "LIST")]
    pub output: Option<String>,
    /// Add netperf's log-linear histogram (ten buckets per decade) to the human output.
    #[arg(long)]
    pub histogram: bool,
    /// Percentiles to compute, comma-separated (default 50,90,99,99.9).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub percentiles: Option<Vec<f64>>,
    /// Write the latencies as an HdrHistogram interval log (one interval per second).
    #[arg(long, value_name = "FILE")]
    pub hdr_log: Option<PathBuf>,
}

impl OutputArgs {
    /// The chosen format, with selectors checked. `-o ?` (or `-o help`) prints the
    /// selectors, wrapped at the terminal's width, and ends the run (status 0).
    pub fn format(&self) -> anyhow::Result<OutputFormat> {
        if matches!(self.output.as_deref().map(str::trim), Some("?" | "help")) {
            let names = Selector::known_names();
            let (fixed, forms) = names.split_at(names.len() - 2);
            let mut text = report::table::wrap(&fixed.join(" "), super::term_width(), "", "");
            for f in forms {
                text.push_str(&report::table::wrap(f, super::term_width(), "", "  "));
            }
            print!("{text}");
            return Err(super::Exit(0).into());
        }
        Ok(if self.json {
            OutputFormat::Json
        } else if self.csv {
            OutputFormat::Csv
        } else if let Some(list) = &self.output {
            OutputFormat::Selectors(Selector::parse_list(list)?)
        } else {
            OutputFormat::Human {
                histogram: self.histogram,
                banner: true,
            }
        })
    }

    /// Whether a table beyond a command's usual lines is asked for: selectors (`-o`),
    /// percentiles or the histogram.
    pub fn asks_for_tables(&self) -> bool {
        self.output.is_some() || self.percentiles.is_some() || self.histogram
    }

    /// The percentiles to compute.
    pub fn percentiles(&self) -> anyhow::Result<Vec<rttlab::stats::Percentile>> {
        match &self.percentiles {
            None => Ok(rttlab::stats::DEFAULT_PERCENTILES.to_vec()),
            Some(v) => v
                .iter()
                .map(|&p| {
                    anyhow::ensure!(
                        (0.0..=100.0).contains(&p),
                        "percentile {p} is outside 0..100"
                    );
                    Ok(rttlab::stats::Percentile(p))
                })
                .collect(),
        }
    }
}

/// Print a result on stdout in the chosen format.
pub fn print<R: Report>(r: &R, format: &OutputFormat) -> anyhow::Result<()> {
    let text = report::render(r, format)?;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .context("writing the result")?;
    out.flush().context("writing the result")?;
    Ok(())
}
