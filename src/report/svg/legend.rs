//! Legends: a swatch and a name per entry, in columns whose width comes from the
//! longest name (as [`text::width`] guesses it, erring wide), so that entries never
//! run into each other or off the chart.

use super::palette::Style;
use super::text::{self, esc, FONT};
use std::fmt::Write;

/// What an entry's swatch shows.
#[derive(Clone, Debug)]
pub enum Swatch {
    /// A line in a series' style.
    Line(Style),
    /// A filled block (a bar segment's colour).
    Block(&'static str),
    /// A line across bars in a layer's style, on a white halo.
    Marker(Style),
}

/// A legend's entries, in order.
#[derive(Clone, Debug, Default)]
pub struct Legend {
    /// (swatch, name).
    pub entries: Vec<(Swatch, String)>,
}

/// Rows are this far apart, px.
const ROW: f64 = 18.0;
/// The swatch's width and the gap after it, px.
const SWATCH: f64 = 24.0;
const GAP: f64 = 6.0;

impl Legend {
    /// One column's width, px.
    fn column(&self) -> f64 {
        let longest = self
            .entries
            .iter()
            .map(|(_, n)| text::width(n, FONT))
            .fold(0.0, f64::max);
        SWATCH + GAP + longest + 10.0
    }

    /// Rows per column within `height` px (at least one).
    fn rows(&self, height: f64) -> usize {
        ((height / ROW).floor() as usize).max(1)
    }

    /// The legend's width when it may be `height` px tall.
    pub fn width(&self, height: f64) -> f64 {
        if self.entries.is_empty() {
            return 0.0;
        }
        self.entries.len().div_ceil(self.rows(height)) as f64 * self.column()
    }

    /// The legend with its top-left corner at (`x`, `y`), at most `height` px tall.
    pub fn render(&self, x: f64, y: f64, height: f64) -> String {
        let (rows, col) = (self.rows(height), self.column());
        let mut o = String::new();
        for (i, (swatch, name)) in self.entries.iter().enumerate() {
            let lx = x + (i / rows) as f64 * col;
            let ly = y + (i % rows) as f64 * ROW + ROW / 2.0;
            let x2 = lx + SWATCH;
            let _ = match swatch {
                Swatch::Line(s) => write!(
                    o,
                    r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{x2:.1}" y2="{ly:.1}" {}/>"#,
                    s.stroke()
                ),
                Swatch::Block(c) => write!(
                    o,
                    r#"<rect x="{lx:.1}" y="{:.1}" width="{SWATCH}" height="10" fill="{c}"/>"#,
                    ly - 5.0
                ),
                Swatch::Marker(s) => write!(
                    o,
                    r##"<line x1="{lx:.1}" y1="{ly:.1}" x2="{x2:.1}" y2="{ly:.1}" stroke="{}" stroke-width="2.5" stroke-dasharray="{}"/>"##,
                    s.colour, s.dash
                ),
            };
            let _ = write!(
                o,
                r#"<text class="legend" x="{:.1}" y="{:.1}">{}</text>"#,
                x2 + GAP,
                ly + FONT * 0.35,
                esc(name)
            );
        }
        o
    }
}
