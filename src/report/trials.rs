//! The "across trials" table every experiment's report adds when a cell ran more than
//! once (`--trials`): per cell, each metric's median over the trials and the 95 %
//! order-statistic interval of that median ([`MedianCi`]).

use super::table::Table;
use crate::stats::{MedianCi, CI_LEVEL};

/// One cell: its label and, per metric, the value of each trial (`None` where a trial
/// has none).
pub type CellValues = (String, Vec<Vec<Option<f64>>>);

/// Group records into cells by `label`, in the order cells first appear, each metric's
/// values (from `values`, one per metric) in record order.
pub fn group<R>(
    records: &[R],
    label: impl Fn(&R) -> String,
    values: impl Fn(&R) -> Vec<Option<f64>>,
) -> Vec<CellValues> {
    let mut cells: Vec<CellValues> = Vec::new();
    for r in records {
        let (l, v) = (label(r), values(r));
        match cells.iter_mut().find(|c| c.0 == l) {
            Some(c) => c.1.iter_mut().zip(v).for_each(|(m, x)| m.push(x)),
            None => cells.push((l, v.into_iter().map(|x| vec![x]).collect())),
        }
    }
    cells
}

/// The table, or an empty string when no cell has more than one trial. `metrics` are
/// column names with their unit (`P50_us`); each gets a `…_CI` column beside it.
pub fn across(title: &str, cell_header: &str, metrics: &[&str], cells: &[CellValues]) -> String {
    if cells
        .iter()
        .all(|(_, m)| m.iter().all(|v| v.iter().flatten().count() < 2))
    {
        return String::new();
    }
    let mut header = vec![cell_header.to_string(), "TRIALS".into()];
    for m in metrics {
        let (name, unit) = m.rsplit_once('_').unwrap_or((m, ""));
        header.push((*m).to_string());
        header.push(format!("{name}_CI_{unit}"));
    }
    let mut t = Table::new(header);
    let mut lowest: f64 = 1.0;
    for (label, values) in cells {
        let mut row = vec![
            label.clone(),
            values.first().map_or(0, Vec::len).to_string(),
        ];
        for v in values {
            let v: Vec<f64> = v.iter().flatten().copied().collect();
            match MedianCi::of(&v, CI_LEVEL) {
                Some(c) if c.n > 1 => {
                    lowest = lowest.min(c.coverage);
                    row.push(format!("{:.1}", c.median));
                    row.push(format!("{:.1}-{:.1}", c.lo, c.hi));
                }
                Some(c) => {
                    row.push(format!("{:.1}", c.median));
                    row.push("-".into());
                }
                None => {
                    row.push("-".into());
                    row.push("-".into());
                }
            }
        }
        t.row(row);
    }
    format!(
        "\n{title}: the median over trials and its interval (order statistics; the lowest coverage here {:.1} %)\n{}",
        100.0 * lowest,
        t.render()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Witness: arithmetic — five trials 1…5 give the median 3 and [min, max] at
    /// 1 − 2/32 = 93.75 %.
    #[test]
    fn a_cell_of_five_trials() {
        let cells = vec![(
            "40ms".to_string(),
            vec![vec![
                Some(5.0),
                Some(1.0),
                None,
                Some(4.0),
                Some(2.0),
                Some(3.0),
            ]],
        )];
        let t = across("By wait", "WAIT", &["P50_us"], &cells);
        assert!(t.contains("P50_CI_us"), "{t}");
        assert!(t.contains("3.0") && t.contains("1.0-5.0"), "{t}");
        assert!(t.contains("93.8 %"), "{t}");
        let one = vec![("x".to_string(), vec![vec![Some(1.0)]])];
        assert_eq!(across("t", "C", &["A_us"], &one), "");
    }
}
