//! Results directories written by earlier rttlab versions keep their conclusions when
//! `rttlab report` renders them, and the directory itself is left as it was.
//!
//! Witnesses: the committed blackout grid of docs/results/blackout-route, written by
//! rttlab 0.1 before trials carried `boundary_ms`: its committed tables.txt (rendered
//! by the version that ran it, which still knew the boundaries) marks 7 cells with `b`;
//! the files' bytes before and after; for every experiment, a committed run's tables as
//! the version that ran it printed them, and its run.json's settings as it wrote them.

use crate::common::bin;
use std::path::Path;
use std::process::Command;

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// The boundary marks of a blackout table: "+1.0b", "-48.9*b", … in the error table.
fn boundary_marks(tables: &str) -> usize {
    tables
        .split("Measured − predicted")
        .nth(1)
        .unwrap_or("")
        .split("Cells the model misses")
        .next()
        .unwrap()
        .split_whitespace()
        .filter(|w| w.ends_with('b') && w.starts_with(['+', '-']))
        .count()
}

#[test]
fn an_old_blackout_grid_keeps_its_boundary_marks_and_is_not_rewritten() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/results/blackout-route");
    let committed = std::fs::read_to_string(src.join("tables.txt")).unwrap();
    assert_eq!(boundary_marks(&committed), 7);
    let trials = std::fs::read_to_string(src.join("trials.jsonl")).unwrap();
    assert!(
        !trials.contains("boundary_ms"),
        "the witness must be an old grid"
    );
    let before = files(&src);

    let o = Command::new(bin())
        .arg("report")
        .arg(&src)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let printed = String::from_utf8_lossy(&o.stdout);
    assert_eq!(boundary_marks(&printed), 7, "{printed}");
    assert!(
        files(&src) == before,
        "rttlab report changed {}",
        src.display()
    );

    let out = tempfile::tempdir().unwrap();
    let o = Command::new(bin())
        .arg("report")
        .arg(&src)
        .arg("--out")
        .arg(out.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rendered = std::fs::read_to_string(out.path().join("tables.txt")).unwrap();
    assert_eq!(boundary_marks(&rendered), 7);
    assert!(out.path().join("report.html").exists());
    assert!(files(&src) == before);
}

#[test]
fn a_results_directory_of_a_newer_schema_is_refused_by_name() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/results/blackout-route");
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in files(&src) {
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    let run = dir.path().join("run.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&run).unwrap()).unwrap();
    v["schema"] = "rttlab.results/9".into();
    std::fs::write(&run, v.to_string()).unwrap();
    let o = Command::new(bin())
        .arg("report")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("schema version 9") && e.contains("newer rttlab"),
        "{e}"
    );
}

/// The committed runs in docs/results, with the experiment each ran.
fn committed_runs() -> Vec<(std::path::PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/results");
    let mut runs: Vec<_> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("run.json").is_file())
        .map(|p| {
            let run: serde_json::Value =
                serde_json::from_slice(&std::fs::read(p.join("run.json")).unwrap()).unwrap();
            let name = run["experiment"].as_str().unwrap().to_string();
            (p, name)
        })
        .collect();
    runs.sort();
    runs
}

/// Every experiment has a committed run, so each check below covers all of them.
fn assert_every_experiment_has_a_run(runs: &[(std::path::PathBuf, String)]) {
    use rttlab::results::names;
    let have: std::collections::BTreeSet<&str> = runs.iter().map(|(_, n)| n.as_str()).collect();
    for name in [
        names::BLACKOUT,
        names::COMPARE,
        names::RESREQ_INTERVAL,
        names::INTERVAL_SWEEP,
        names::SYN_RTO,
        names::PASSIVE_VS_ACTIVE,
    ] {
        assert!(
            have.contains(name),
            "no committed run of {name} in docs/results"
        );
    }
}

#[test]
fn every_experiments_committed_run_re_renders_the_tables_it_printed() {
    let runs = committed_runs();
    assert_every_experiment_has_a_run(&runs);
    for (dir, name) in &runs {
        let tables = if name == rttlab::results::names::COMPARE {
            "compare.txt"
        } else {
            "tables.txt"
        };
        let committed = std::fs::read_to_string(dir.join(tables)).unwrap();
        let o = Command::new(bin()).arg("report").arg(dir).output().unwrap();
        assert!(
            o.status.success(),
            "{}: {}",
            dir.display(),
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            committed,
            "{} re-rendered differs from its {tables}",
            dir.display()
        );
    }
}

/// Settings read back and written again: every key the run wrote keeps its value (keys
/// added since, `trials`, `seed` and `lab_poll`, take their defaults), so a rerun of an
/// old directory with the same flags resumes it.
fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(
    dir: &Path,
    written: &serde_json::Value,
) {
    let read: T = serde_json::from_value(written.clone())
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let again = serde_json::to_value(read).unwrap();
    let (w, a) = (written.as_object().unwrap(), again.as_object().unwrap());
    for (k, v) in w {
        assert_eq!(a.get(k), Some(v), "{}: settings key {k}", dir.display());
    }
    for k in a.keys().filter(|k| !w.contains_key(*k)) {
        assert!(
            ["trials", "seed", "lab_poll"].contains(&k.as_str()),
            "{}: settings gained {k}",
            dir.display()
        );
    }
}

#[test]
fn every_experiments_committed_settings_read_back_as_written() {
    use rttlab::experiment::{passive_active, resreq, sweep, syn_rto};
    use rttlab::results::{blackout, compare, names};
    let runs = committed_runs();
    assert_every_experiment_has_a_run(&runs);
    for (dir, name) in &runs {
        let run: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("run.json")).unwrap()).unwrap();
        let written = &run["settings"];
        match name.as_str() {
            names::BLACKOUT => round_trip::<blackout::Settings>(dir, written),
            names::COMPARE => round_trip::<compare::CompareSettings>(dir, written),
            names::RESREQ_INTERVAL => round_trip::<resreq::Settings>(dir, written),
            names::INTERVAL_SWEEP => round_trip::<sweep::Settings>(dir, written),
            names::SYN_RTO => round_trip::<syn_rto::Settings>(dir, written),
            names::PASSIVE_VS_ACTIVE => round_trip::<passive_active::Settings>(dir, written),
            other => panic!("{}: unknown experiment {other}", dir.display()),
        }
    }
}

/// Witness: the committed blackout grid's own lines, three of them spoiled by the test
/// (a field of the wrong type, a line cut mid-object, words after the record) and one
/// cut at the file's end as a crash leaves it. The report names the three by number
/// (and field), keeps every other record (`--json`'s count is the file's records less
/// the three), and exits
/// 1; the crash-cut last line is passed over without a word, as the runner reruns it.
#[test]
fn a_record_that_cannot_be_read_is_named_and_the_rest_reported() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/results/blackout-route");
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in files(&src) {
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    let text = std::fs::read_to_string(src.join("trials.jsonl")).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let total = lines.len();
    lines[2] = lines[2].replacen("\"transactions\":", "\"transactions\":\"many\",\"x\":", 1);
    lines[5] = lines[5][..40].to_owned();
    lines[8] += " junk";
    let spoiled = lines.join("\n") + "\n{\"rto_min_ms\":5,\"thi";
    std::fs::write(dir.path().join("trials.jsonl"), spoiled).unwrap();

    let o = Command::new(bin())
        .args(["report", "--json"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["records"].as_array().unwrap().len(), total - 3);
    let named: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("trials.jsonl line"))
        .collect();
    assert_eq!(named.len(), 3, "{stderr}");
    assert!(
        named[0].contains("line 3: transactions: invalid type: string \"many\""),
        "{stderr}"
    );
    assert!(named[1].contains("line 6: EOF while parsing"), "{stderr}");
    assert!(named[2].contains("line 9: trailing characters"), "{stderr}");
    assert!(stderr.contains("3 record(s)"), "{stderr}");
}

/// `cmd`'s output and its peak resident memory (KiB) as GNU time reports it (`%M`,
/// the last line of stderr, taken off): time forks the command itself, so the figure
/// is the command's alone, not this test process's (which a child spawned from here
/// would inherit across exec).
fn run_measured(program: &Path, args: &[&std::ffi::OsStr]) -> (std::process::Output, u64) {
    let mut o = Command::new("/usr/bin/time")
        .args(["-f", "%M"])
        .arg(program)
        .args(args)
        .output()
        .expect("GNU time (Debian's package time)");
    let stderr = String::from_utf8(o.stderr).unwrap();
    let (rest, peak) = stderr
        .trim_end()
        .rsplit_once('\n')
        .unwrap_or(("", stderr.trim_end()));
    let peak = peak
        .parse()
        .unwrap_or_else(|_| panic!("time printed {stderr}"));
    o.stderr = rest.as_bytes().to_vec();
    (o, peak)
}

/// A trials file of 60 MB: the committed blackout grid's 216 trials renumbered 360
/// times over (77 760 distinct trials), then the same again, copied. The report
/// streams it: every distinct trial counted once (each cell's n is 360 times the
/// committed grid's, its median the same: repeating a multiset leaves its median
/// where it was), every copy left out and counted, the first 20 named, and its peak
/// memory less than 0.6 × the file (it was more than the file itself when records
/// were held whole: 95 MB for 100 MB of copies).
///
/// Witnesses: GNU time's peak RSS of the report (the kernel's own account), the committed
/// grid's own summary rendered by the same command, and arithmetic.
#[test]
fn a_trials_file_of_many_trials_and_copies_is_reported_in_the_memory_of_its_report() {
    // Reports of hundreds of trials: a CPU kept busy for seconds.
    let _busy = crate::common::serial::busy();
    const RENUMBERED: u32 = 360;
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/results/blackout-route");
    let original = tempfile::tempdir().unwrap();
    let o = Command::new(bin())
        .arg("report")
        .arg(&src)
        .arg("--out")
        .arg(original.path().join("r"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary = |dir: &Path| -> Vec<serde_json::Value> {
        serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap()
    };
    let committed = summary(&original.path().join("r"));

    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in files(&src) {
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    let text = std::fs::read_to_string(src.join("trials.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut distinct = String::new();
    for k in 0..RENUMBERED {
        for l in &lines {
            let mut r = l.clone();
            let trial = r["trial"].as_u64().unwrap_or(0);
            r["trial"] = (trial + u64::from(k) * 100).into();
            distinct += &r.to_string();
            distinct.push('\n');
        }
    }
    let file = distinct.repeat(2);
    std::fs::write(dir.path().join("trials.jsonl"), &file).unwrap();
    let out = original.path().join("big");

    let copies = lines.len() * RENUMBERED as usize;
    drop((distinct, lines));
    let (o, peak_kib) = run_measured(
        &bin(),
        &[
            "report".as_ref(),
            dir.path().as_os_str(),
            "--out".as_ref(),
            out.as_os_str(),
        ],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    let named: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains(": trials.jsonl line "))
        .collect();
    assert_eq!(named.len(), 20, "{stderr}");
    assert!(
        named[0].contains(&format!("line {}: a second record of", copies + 1))
            && named[0].contains("(the first on line 1)"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("and {} more line(s) left out", copies - 20)),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("{copies} record(s)")), "{stderr}");

    let big = summary(&out);
    assert_eq!(big.len(), committed.len());
    for (b, c) in big.iter().zip(&committed) {
        for k in ["rto_min_ms", "thin", "disruption_ms", "path", "median_ms"] {
            assert_eq!(b[k], c[k], "{k}: {b} against {c}");
        }
        assert_eq!(
            b["n"].as_u64().unwrap(),
            c["n"].as_u64().unwrap() * u64::from(RENUMBERED)
        );
    }
    let limit_kib = (file.len() as f64 * 0.6 / 1024.0) as u64;
    assert!(
        peak_kib < limit_kib,
        "peak RSS {peak_kib} KiB for a {} KiB file (limit {limit_kib})",
        file.len() / 1024
    );
}

/// A record renumbered as another trial, naming the first trial's own histogram or
/// samples file: each trial writes its own, so reading it for both would count its
/// samples twice. The report refuses it, naming the file (status 2).
///
/// Witness: the committed syn-rto and passive-vs-active runs, rendered as they are
/// (status 0), then with the one renumbered line appended.
#[test]
fn a_file_named_by_two_trials_is_refused_by_name() {
    for (run, field) in [("syn-rto", "file"), ("passive-vs-active", "samples_file")] {
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("docs/results")
            .join(run);
        let dir = tempfile::tempdir().unwrap();
        for (name, bytes) in files(&src) {
            std::fs::write(dir.path().join(name), bytes).unwrap();
        }
        let text = std::fs::read_to_string(src.join("trials.jsonl")).unwrap();
        let mut again: serde_json::Value =
            serde_json::from_str(text.lines().next().unwrap()).unwrap();
        let named = again[field].as_str().unwrap().to_owned();
        again["trial"] = 99.into();
        let o = Command::new(bin())
            .arg("report")
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{run}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        std::fs::write(dir.path().join("trials.jsonl"), format!("{text}{again}\n")).unwrap();
        let o = Command::new(bin())
            .arg("report")
            .arg(dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{run}: {stderr}");
        assert!(
            stderr.contains(&named) && stderr.contains("named by two trials' records"),
            "{run}: {stderr}"
        );
    }
}
