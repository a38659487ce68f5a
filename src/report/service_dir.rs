//! The report of `rttlab explain --out DIR`, drawn from its windows.jsonl and
//! end.json: each watched port's whole run as the command printed it, and its
//! response time and parts window by window; `rttlab report DIR` draws it again.

use super::html::Page;
use super::service::table;
use super::svg::axis::{Scale, Unit};
use super::svg::line::{LineChart, Series};
use crate::results::explain::{End, WindowRecord, END, WINDOWS};
use crate::results::schema::EXPLAIN_WINDOW;
use crate::results::{self, read_run, write_file, BadRecord, BadRecords, ResultsError};
use crate::service::Side;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A line of windows.jsonl as written: its schema, then the record.
#[derive(serde::Deserialize)]
struct Line {
    schema: String,
    #[serde(flatten)]
    record: WindowRecord,
}

/// What a results directory of `explain` holds, read.
#[derive(Debug, Default)]
struct Run {
    /// Each side and port's windows, in the file's order.
    windows: BTreeMap<(Side, u16), Vec<WindowRecord>>,
    /// Each side and port's whole run (absent when the run did not end).
    whole: BTreeMap<(Side, u16), WindowRecord>,
    end: Option<End>,
}

/// `dir`'s windows and end, the lines of windows.jsonl that are no records added to
/// `bad`.
fn read(dir: &Path, bad: &mut BadRecords) -> Result<Run, ResultsError> {
    let mut run = Run::default();
    results::each_record_of(dir, WINDOWS, |n, read: Result<Line, String>| {
        let why = match read {
            Ok(l) if l.schema == EXPLAIN_WINDOW => {
                let r = l.record;
                let key = (r.summary.side, r.port);
                if r.whole_run {
                    run.whole.insert(key, r);
                } else {
                    run.windows.entry(key).or_default().push(r);
                }
                return;
            }
            Ok(l) => format!(
                "a record of {:?}, where this rttlab reads {EXPLAIN_WINDOW}",
                l.schema
            ),
            Err(why) => why,
        };
        bad.push(BadRecord {
            file: WINDOWS,
            line: n,
            why,
        });
    })?;
    run.end = match results::read_file(dir, END) {
        Ok(text) => Some(serde_json::from_str(&text).map_err(results::json(&dir.join(END)))?),
        Err(ResultsError::File(e)) if e.is_not_found() => None,
        Err(e) => return Err(e),
    };
    Ok(run)
}

/// Render `dir`'s report.txt, report.html and one chart per side and port; returns
/// the text. The lines of windows.jsonl that are not records are left out, added to
/// `bad` and named in report.html.
///
/// # Errors
/// windows.jsonl or end.json cannot be read, or a file cannot be written.
pub fn write(dir: &Path, bad: &mut BadRecords) -> Result<String, ResultsError> {
    let run = read(dir, bad)?;
    let (_, run_json) = read_run(dir)?;
    let text = text(&run);
    write_file(dir, "report.txt", &text)?;
    let mut page = Page::new("rttlab explain");
    page.para(&format!(
        "Where each transaction of the watched TCP services spent its time, from the kernel of this host: {}.",
        watched(&run_json)
    ));
    let keys: BTreeSet<&(Side, u16)> = run.windows.keys().chain(run.whole.keys()).collect();
    for key in keys {
        let (side, port) = *key;
        page.heading(&heading(side, port));
        match run.whole.get(key) {
            Some(w) => page.pre(&table(port, &w.summary, w.seconds)),
            None => {
                page.para("The run did not end: no summary of the whole run, only its windows.")
            }
        };
        let windows = run.windows.get(key).map_or(&[][..], Vec::as_slice);
        if windows.iter().any(|w| w.summary.transactions > 0) {
            let name = format!("{}-{port}.svg", side.name());
            let svg = chart(side, port, windows);
            write_file(dir, &name, &svg)?;
            page.chart(
                &name,
                "the response time's P50 and P99 and each part's P50, window by window (log scale: a part of 0 is not drawn)",
                &svg,
            );
        }
    }
    if let Some(end) = &run.end {
        if !end.notes.is_empty() {
            page.heading("Not timed");
            for n in &end.notes {
                page.para(n);
            }
        }
    }
    if !bad.is_empty() {
        page.heading("Left out");
        for b in &bad.named {
            page.para(&b.to_string());
        }
        if bad.len() > bad.named.len() {
            page.para(&format!(
                "and {} more line(s), not named",
                bad.len() - bad.named.len()
            ));
        }
    }
    page.run_facts(&run_json);
    write_file(dir, "report.html", &page.render())?;
    Ok(text)
}

fn heading(side: Side, port: u16) -> String {
    match side {
        Side::Server => format!("Port {port}: the server on this host"),
        Side::Client => format!("To port {port}: this host's clients of it"),
    }
}

/// What run.json says was watched, in words.
fn watched(run_json: &str) -> String {
    serde_json::from_str::<serde_json::Value>(run_json)
        .ok()
        .and_then(|v| v["settings"]["watched"].as_str().map(String::from))
        .unwrap_or_else(|| "as run.json records".into())
}

/// The report's text: each side and port's whole run, and what was not timed.
fn text(run: &Run) -> String {
    let mut out = String::new();
    match &run.end {
        Some(end) => out += &format!("Over the whole run ({:.1} s):\n", end.seconds),
        None => out += "The run did not end (no end.json): no summary of the whole run.\n",
    }
    for w in run.whole.values() {
        out += &table(w.port, &w.summary, w.seconds);
    }
    for n in run.end.iter().flat_map(|e| &e.notes) {
        out += n;
        out.push('\n');
    }
    out
}

/// The response time's P50 and P99 and each part's P50 at each window's middle.
fn chart(side: Side, port: u16, windows: &[WindowRecord]) -> String {
    let at = |w: &WindowRecord| w.start_s + w.seconds / 2.0;
    let points = |f: &dyn Fn(&WindowRecord) -> Option<f64>| -> Vec<(f64, f64)> {
        windows
            .iter()
            .filter_map(|w| Some((at(w), f(w)?)))
            .collect()
    };
    let mut series = vec![
        Series::line("response P50", points(&|w| w.summary.response_us[0]), 0),
        Series::line("response P99", points(&|w| w.summary.response_us[1]), 1),
    ];
    for (i, part) in side.parts().iter().enumerate() {
        let p = points(&|w| w.summary.part(*part).and_then(|r| r.p50_us));
        series.push(Series::line(&format!("{} P50", part.name()), p, i + 2));
    }
    LineChart {
        title: format!("{}: response time and its parts", heading(side, port)),
        x_label: "time since the start".into(),
        y_label: "time".into(),
        x_scale: Scale::Linear,
        y_scale: Scale::Log,
        x_unit: Unit::Seconds,
        y_unit: Unit::Micros,
        x_range: None,
        y_range: None,
        series,
    }
    .render()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::explain_bpf::RawTxn;
    use crate::results::explain::{Writer, TRANSACTIONS};
    use crate::service::{Transaction, Window};

    /// A server's transaction of `think_ns` of the application's work, 13 µs more.
    fn txn(think_ns: u64) -> Transaction {
        Transaction::of(&RawTxn {
            in_first_ns: 1_000,
            in_last_ns: 1_000,
            read_first_ns: 2_000,
            read_last_ns: 2_000,
            write_first_ns: 2_000 + think_ns,
            write_last_ns: 3_000 + think_ns,
            acked_ns: 13_000 + think_ns,
            local_port: 6379,
            ..RawTxn::default()
        })
    }

    fn record(start_s: f64, whole_run: bool, thinks: &[u64]) -> WindowRecord {
        let mut w = Window::new(Side::Server);
        for &t in thinks {
            w.add(&txn(t));
        }
        WindowRecord {
            start_s,
            seconds: 1.0,
            port: 6379,
            whole_run,
            summary: w.summary(),
        }
    }

    /// A run written as the command writes it is read back whole, drawn again the
    /// same by `rttlab report`, and a line that is no record is left out by name
    /// while the rest is drawn. Witness: the windows the test made (arithmetic: 2 + 1
    /// transactions, a 50 ms think in the second window).
    #[test]
    fn a_run_is_read_back_and_drawn_again_the_same() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        let settings = serde_json::json!({ "watched": "port(s) given: 6379" });
        let mut w = Writer::create(&dir, &settings, &serde_json::json!({})).unwrap();
        w.window(&record(0.0, false, &[1_000, 2_000])).unwrap();
        w.window(&record(1.0, false, &[50_000_000])).unwrap();
        w.window(&record(0.0, true, &[1_000, 2_000, 50_000_000]))
            .unwrap();
        w.transaction("{\"a\":1}").unwrap();
        let end = End {
            seconds: 2.0,
            notes: vec!["not timed: 1 request(s) whose connection ended before an answer".into()],
        };
        let dir = w.end(&end).unwrap();
        write(&dir, &mut BadRecords::default()).unwrap();
        let text = std::fs::read_to_string(dir.join("report.txt")).unwrap();
        assert!(
            text.starts_with("Over the whole run (2.0 s):\nport 6379: 3 transaction(s)"),
            "{text}"
        );
        assert!(text.contains("max 50002.0 µs"), "{text}");
        assert!(text.ends_with("before an answer\n"), "{text}");
        assert_eq!(
            std::fs::read_to_string(dir.join(TRANSACTIONS)).unwrap(),
            "{\"a\":1}\n"
        );
        let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
        assert!(html.contains("server-6379.svg"), "the chart of the port");
        let (again, bad) = crate::report::dir::render(&dir).unwrap();
        assert_eq!((again, bad.len()), (text, 0));
        assert_eq!(
            std::fs::read_to_string(dir.join("report.html")).unwrap(),
            html
        );

        // A later version's record, then no JSON.
        let first = std::fs::read_to_string(dir.join(WINDOWS)).unwrap();
        let later = first
            .lines()
            .next()
            .unwrap()
            .replace("window/1", "window/9");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join(WINDOWS))
            .unwrap();
        std::io::Write::write_all(&mut f, format!("{later}\nnot json\n").as_bytes()).unwrap();
        let (text, bad) = crate::report::dir::render(&dir).unwrap();
        assert!(text.contains("port 6379: 3 transaction(s)"), "{text}");
        let named: Vec<String> = bad.named.iter().map(ToString::to_string).collect();
        assert_eq!(bad.lines, [4, 5], "{named:?}");
        assert!(
            named[0].starts_with("windows.jsonl line 4: a record of \"rttlab.explain-window/9\""),
            "{named:?}"
        );
    }

    /// `--out` on a directory holding a run, or whose windows.jsonl is a planted
    /// symlink, is refused, and nothing is written through the link.
    #[test]
    fn a_directory_holding_a_run_or_a_planted_link_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let none = serde_json::json!({});
        let used = tmp.path().join("used");
        Writer::create(&used, &none, &none).unwrap();
        let e = Writer::create(&used, &none, &none)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("holds a run already"), "{e}");

        let planted = tmp.path().join("planted");
        std::fs::create_dir(&planted).unwrap();
        let target = tmp.path().join("elsewhere");
        std::fs::write(&target, "kept\n").unwrap();
        std::os::unix::fs::symlink(&target, planted.join(WINDOWS)).unwrap();
        assert!(Writer::create(&planted, &none, &none).is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "kept\n");
    }
}
