//! The charts' colours and line patterns. Colour alone does not tell series apart
//! (colour-blind readers, a grey-scale print, two blues side by side): each series
//! also has a dash pattern, and the colours that resemble earlier ones (sky blue next
//! to blue, orange next to vermillion) come with patterns of their own, so no two
//! series share both colour and pattern.

/// Colour-blind-safe palette (Okabe–Ito), in the order series take it.
pub const COLOURS: [&str; 8] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442",
];

/// The dash pattern of the series that takes `COLOURS[i]` first: solid for the four
/// most distinct colours, a pattern apiece for the four that follow (each with its
/// own period, so that two such series drawn over each other still show both).
pub const DASHES: [&str; 8] = ["", "", "", "", "9 3", "5 3", "3 2", "9 3 1.5 3"];

/// Patterns of a second round through the palette (series 8 to 15).
const SECOND_ROUND: [&str; 8] = ["3 3", "12 4", "2 5", "6 2 2 2", "3 5", "12 2", "6 6", "2 2"];

/// Patterns of a series' secondary line (a prediction, a median beside a mean), in the
/// same colour: distinct from that colour's primary patterns.
const SECONDARY: [&str; 8] = ["6 4", "6 4", "6 4", "6 4", "2 3", "1.5 3", "6 3", "2 3"];

/// How a series' line is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Style {
    /// Its colour, `#rrggbb`.
    pub colour: &'static str,
    /// Its SVG `stroke-dasharray` ("" for solid).
    pub dash: &'static str,
    /// A secondary line: thinner, without point markers.
    pub secondary: bool,
}

/// The palette index of a reference line (a configured value the measurements are
/// held against): grey and dashed, apart from every series' colour.
pub const REFERENCE: usize = usize::MAX;

impl Style {
    /// The style of series `k` (its palette index), primary or secondary.
    pub fn of(k: usize, secondary: bool) -> Self {
        if k == REFERENCE {
            return Self {
                colour: "#777777",
                dash: "8 4",
                secondary: true,
            };
        }
        let i = k % COLOURS.len();
        let dash = if secondary {
            SECONDARY[i]
        } else if k < COLOURS.len() {
            DASHES[i]
        } else {
            SECOND_ROUND[i]
        };
        Self {
            colour: COLOURS[i],
            dash,
            secondary,
        }
    }

    /// The line's width, px.
    pub fn width(&self) -> f64 {
        if self.secondary {
            1.5
        } else {
            2.2
        }
    }

    /// The SVG attributes of a line in this style.
    pub fn stroke(&self) -> String {
        let dash = if self.dash.is_empty() {
            String::new()
        } else {
            format!(r#" stroke-dasharray="{}""#, self.dash)
        };
        format!(
            r#"stroke="{}" stroke-width="{}"{dash}"#,
            self.colour,
            self.width()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Witness: the table itself. Sixteen primary series and their secondaries never
    /// share colour and pattern; sky blue and orange differ from blue and vermillion in
    /// pattern.
    #[test]
    fn no_two_series_share_colour_and_pattern() {
        let mut seen = std::collections::BTreeSet::new();
        for k in 0..16 {
            for secondary in [false, true] {
                let s = Style::of(k, secondary);
                if secondary && k >= 8 {
                    continue;
                }
                assert!(seen.insert((s.colour, s.dash)), "{k} {secondary}: {s:?}");
            }
        }
        assert_ne!(Style::of(5, false).dash, Style::of(0, false).dash);
        assert_ne!(Style::of(4, false).dash, Style::of(1, false).dash);
    }
}
