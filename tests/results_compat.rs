//! Results directories written by earlier rttlab versions keep their conclusions when
//! `rttlab report` renders them, and the directory itself is left as it was.
//!
//! Witnesses: the committed blackout grid of docs/results/blackout-route, written by
//! rttlab 0.1 before trials carried `boundary_ms`: its committed tables.txt (rendered
//! by the version that ran it, which still knew the boundaries) marks 7 cells with `b`;
//! the files' bytes before and after.

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
