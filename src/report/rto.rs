//! The retransmission model's grid, in seed 001's table layout, CSV and JSON.

use super::table::Table;
use crate::model::rto::{Event, RtoModel};
use serde::Serialize;

/// One cell: a configuration at one disruption.
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    /// Length of the disruption, ms.
    pub disruption_ms: f64,
    /// The configuration's rto_min, ms.
    pub rto_min_ms: f64,
    /// 1 with thin-stream linear timeouts, 0 without (thick).
    pub thin: u8,
    /// Predicted TCP idle duration (the middle of `idle_lo_ms..idle_hi_ms`).
    pub idle_ms: f64,
    /// Earliest the idle can end, ms (the ending transmission's earliest time).
    pub idle_lo_ms: f64,
    /// Latest the idle can end, ms (the ending transmission's latest time).
    pub idle_hi_ms: f64,
    /// Default (thick, 200 ms) minus this cell: positive is better.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub improvement_ms: Option<f64>,
    /// The (re)transmissions up to the one that ends the idle.
    pub timeline: Vec<Event>,
}

/// The whole grid with the model's settings.
#[derive(Clone, Debug, Serialize)]
pub struct Grid {
    /// The model of each (rto_min, thin) configuration, in the order of the cells.
    pub models: Vec<RtoModel>,
    /// The delayed-ACK ceiling each rto_min implies (`tcp_delack_max`).
    pub delack_max: Vec<DelackMax>,
    /// Every configuration at every disruption, by rto_min, then thin, then disruption.
    pub cells: Vec<Cell>,
}

/// The delayed-ACK ceiling at one rto_min.
#[derive(Clone, Debug, Serialize)]
pub struct DelackMax {
    /// The rto_min the ceiling follows from, ms.
    pub rto_min_ms: f64,
    /// The delayed-ACK ceiling, µs.
    pub delack_max_us: u64,
}

fn ms(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Seed 001's table layout: a row per disruption (in seconds), a column per
/// (rto_min, thick/thin) named "`what` Thick rto_min 5ms"; `cells` are (disruption
/// ms, rto_min ms, thin 0/1, text); rows and columns are sorted.
pub fn seed_layout(what: &str, cells: &[(f64, f64, u8, String)]) -> String {
    let mut configs: Vec<(f64, u8)> = Vec::new();
    let mut ds: Vec<f64> = Vec::new();
    for c in cells {
        if !configs.contains(&(c.1, c.2)) {
            configs.push((c.1, c.2));
        }
        if !ds.contains(&c.0) {
            ds.push(c.0);
        }
    }
    configs.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    ds.sort_by(f64::total_cmp);
    let mut header = vec!["Disruption Duration (s)".to_owned()];
    header.extend(configs.iter().map(|&(r, t)| {
        format!(
            "{what} {} rto_min {}ms",
            if t == 1 { "Thin" } else { "Thick" },
            ms(r)
        )
    }));
    let mut t = Table::new(header);
    for d in ds {
        let mut row = vec![format!("{}", d / 1000.0)];
        for &(r, th) in &configs {
            let cell = cells.iter().find(|c| c.0 == d && c.1 == r && c.2 == th);
            row.push(cell.map_or("-".into(), |c| c.3.clone()));
        }
        t.row(row);
    }
    t.render()
}

impl Grid {
    /// Seed 001's layout: a row per disruption, a column per (rto_min, thin/thick).
    pub fn table(&self, improvement: bool) -> String {
        let what = if improvement {
            "Improvement"
        } else {
            "TCP Idle"
        };
        let cells: Vec<(f64, f64, u8, String)> = self
            .cells
            .iter()
            .map(|c| {
                let v = if improvement {
                    c.improvement_ms.unwrap_or(0.0)
                } else {
                    c.idle_ms
                };
                (c.disruption_ms, c.rto_min_ms, c.thin, ms(v))
            })
            .collect();
        seed_layout(what, &cells)
    }

    /// One row per cell: disruption_ms,rto_min_ms,thin,idle_ms\[,improvement_ms\].
    pub fn csv(&self, improvement: bool) -> String {
        let mut out = String::from(if improvement {
            "disruption_ms,rto_min_ms,thin,idle_ms,improvement_ms\n"
        } else {
            "disruption_ms,rto_min_ms,thin,idle_ms\n"
        });
        for c in &self.cells {
            out += &format!(
                "{},{},{},{}",
                ms(c.disruption_ms),
                ms(c.rto_min_ms),
                c.thin,
                ms(c.idle_ms)
            );
            if improvement {
                out += &format!(",{}", ms(c.improvement_ms.unwrap_or(0.0)));
            }
            out.push('\n');
        }
        out
    }
}
