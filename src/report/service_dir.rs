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
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
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
    // Each record's first line, by side, port and start (a whole run's: by side and
    // port): a copy would count its window twice, or replace the run's summary.
    let mut first: HashMap<(Side, u16, bool, u64), usize> = HashMap::new();
    results::each_record_of(dir, WINDOWS, |n, read: Result<Line, String>| {
        let why = match read {
            Ok(l) if l.schema == EXPLAIN_WINDOW => {
                let r = l.record;
                let key = (r.summary.side, r.port);
                let start = if r.whole_run { 0 } else { r.start_s.to_bits() };
                match first.entry((key.0, key.1, r.whole_run, start)) {
                    Entry::Occupied(o) => format!(
                        "a second record of {} port {}'s {} (the first on line {}): each is written once",
                        key.0.name(),
                        key.1,
                        if r.whole_run {
                            "whole run".to_string()
                        } else {
                            format!("window at {:.3} s", r.start_s)
                        },
                        o.get()
                    ),
                    Entry::Vacant(v) => {
                        v.insert(n);
                        if r.whole_run {
                            run.whole.insert(key, r);
                        } else {
                            run.windows.entry(key).or_default().push(r);
                        }
                        return;
                    }
                }
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
            None => page.para(&unfinished(
                run.windows.get(key).map_or(&[][..], Vec::as_slice),
            )),
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

/// What is said of a run with no whole-run record (killed, or its last lines lost):
/// its windows, which hold what it timed until then.
fn unfinished(windows: &[WindowRecord]) -> String {
    let n: u64 = windows.iter().map(|w| w.summary.transactions).sum();
    let seconds: f64 = windows.iter().map(|w| w.seconds).sum();
    format!(
        "The run did not end (no summary of the whole run in windows.jsonl): {} window(s), {n} transaction(s) in {seconds:.1} s, drawn below.",
        windows.len()
    )
}

/// The report's text: each side and port's whole run (or what its windows hold
/// when the run did not end), and what was not timed.
fn text(run: &Run) -> String {
    let mut out = String::new();
    if !run.whole.is_empty() {
        let seconds = run.end.as_ref().map_or_else(
            || run.whole.values().map(|w| w.seconds).fold(0.0, f64::max),
            |e| e.seconds,
        );
        out += &format!("Over the whole run ({seconds:.1} s):\n");
    }
    let keys: BTreeSet<&(Side, u16)> = run.windows.keys().chain(run.whole.keys()).collect();
    for key in keys {
        match run.whole.get(key) {
            Some(w) => out += &table(w.port, &w.summary, w.seconds),
            None => {
                let windows = run.windows.get(key).map_or(&[][..], Vec::as_slice);
                out += &format!("{}: {}\n", heading(key.0, key.1), unfinished(windows));
            }
        }
    }
    if run.windows.is_empty() && run.whole.is_empty() {
        out += "No window: the run ended before its first interval, or windows.jsonl lost its lines.\n";
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
    // A dot at each window (the chart draws them up to 40 a line): a run of one
    // window with transactions has one point, which a line alone would not show.
    for s in &mut series {
        s.markers = true;
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
    fn a_directory_holding_anything_or_a_link_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let none = serde_json::json!({});
        let refused = |dir: &std::path::Path| -> String {
            Writer::create(dir, &none, &none)
                .err()
                .expect("refused")
                .to_string()
        };
        // New, or empty: taken.
        let empty = tmp.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        Writer::create(&empty, &none, &none).unwrap();
        Writer::create(&tmp.path().join("new"), &none, &none).unwrap();
        // A run's directory, or one holding anything, is never merged into.
        assert!(refused(&empty).contains("already exists and is not empty"));
        let other = tmp.path().join("other");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("important.txt"), "precious\n").unwrap();
        assert!(refused(&other).contains("already exists and is not empty"));
        assert_eq!(std::fs::read_dir(&other).unwrap().count(), 1);
        // A file, a link to a directory (with or without a trailing slash).
        let file = tmp.path().join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(refused(&file).contains("is not a directory"));
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(refused(&link).contains("is a symbolic link"));
        let slash = std::path::PathBuf::from(format!("{}/", link.display()));
        assert!(refused(&slash).contains("is a symbolic link"));
        assert_eq!(
            std::fs::read_dir(&real).unwrap().count(),
            0,
            "nothing written through"
        );
    }

    /// A second record of a window or of the whole run is left out by name (the
    /// first stands); a run without a whole-run record says so and what its windows
    /// hold, in the text and the page alike. Witness: the records the test wrote.
    #[test]
    fn copies_are_left_out_and_an_unfinished_run_says_so() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        let none = serde_json::json!({});
        let mut w = Writer::create(&dir, &none, &none).unwrap();
        w.window(&record(0.0, false, &[1_000, 2_000])).unwrap();
        w.window(&record(0.0, false, &[1_000])).unwrap();
        let mut bad = BadRecords::default();
        let text = write(&dir, &mut bad).unwrap();
        assert_eq!(bad.lines, [2]);
        assert!(
            bad.named[0].why.contains(
                "a second record of server port 6379's window at 0.000 s (the first on line 1)"
            ),
            "{:?}",
            bad.named
        );
        assert!(
            text.starts_with("Port 6379: the server on this host: The run did not end (no summary of the whole run in windows.jsonl): 1 window(s), 2 transaction(s) in 1.0 s"),
            "{text}"
        );
        let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
        assert!(html.contains("The run did not end"), "the page says it too");

        let mut w = Writer::create(&tmp.path().join("twice"), &none, &none).unwrap();
        w.window(&record(0.0, true, &[1_000])).unwrap();
        w.window(&record(0.0, true, &[1_000, 2_000, 3_000]))
            .unwrap();
        let dir = w
            .end(&End {
                seconds: 1.0,
                notes: Vec::new(),
            })
            .unwrap();
        let mut bad = BadRecords::default();
        let text = write(&dir, &mut bad).unwrap();
        assert_eq!(bad.lines, [2]);
        assert!(
            text.contains("port 6379: 1 transaction(s)"),
            "the first stands: {text}"
        );
    }
}
