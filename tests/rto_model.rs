//! `rttlab rto model` through the binary: the seed's Theory table in CSV (checked cell
//! by cell against the seed in the model's unit tests), JSON timelines, improvement.

use crate::common::bin;
use std::process::Command;

fn run(args: &[&str]) -> String {
    let o = Command::new(bin())
        .args(["rto", "model"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn csv_has_one_row_per_cell_in_the_documented_columns() {
    let csv = run(&["--flavour", "simple", "--csv"]);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "disruption_ms,rto_min_ms,thin,idle_ms");
    // 24 disruptions × 3 rto_min × thin and thick.
    assert_eq!(lines.len(), 1 + 24 * 6);
    // Seed 001, Theory: 0.2 s, thin, rto_min 50 ms → 200 ms; thick → 350 ms.
    assert!(
        lines.contains(&"200,50,1,200") && lines.contains(&"200,50,0,350"),
        "{csv}"
    );
}

#[test]
fn json_carries_each_cells_timeline_and_improvement() {
    let v: serde_json::Value = serde_json::from_str(&run(&[
        "--hz",
        "250",
        "--rto-min",
        "5ms,200ms",
        "--thin",
        "off",
        "--disruption",
        "100ms",
        "--json",
        "--improvement",
    ]))
    .unwrap();
    let cells = v["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2);
    let c5 = &cells[0];
    // TLP 12–16, RTO1 28–32, RTO2 56–60, RTO3 108–112 ms (docs/ARCHITECTURE.md §11): 110 ms.
    assert_eq!(c5["idle_ms"], 110.0);
    assert_eq!(c5["timeline"].as_array().unwrap().len(), 4);
    assert_eq!(c5["timeline"][0]["kind"], "tlp");
    // Default (thick 200: TLP at 204–208 → 206) minus 110.
    assert_eq!(c5["improvement_ms"], 96.0);
    assert_eq!(cells[1]["improvement_ms"], 0.0);
}

#[test]
fn bad_values_are_named() {
    for (args, needle) in [
        (vec!["--hz", "123"], "HZ 100, 250, 300 or 1000"),
        (vec!["--disruption", "1s..10ms"], "before the start"),
        (vec!["--disruption", "10ms..1s:0"], "step"),
        (vec!["--rto-min", "0"], "more than 0"),
    ] {
        let o = Command::new(bin())
            .args(["rto", "model"])
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains(needle),
            "{args:?}: {err}"
        );
    }
}
