//! Charts as self-contained SVG text, readable offline with no font files (text is left
//! to the viewer's sans-serif): line charts with linear, log or percentile-tail axes
//! (stacked as panels where one series would flatten the rest), and a round trip's
//! anatomy. Small modules: axes and their ticks, the palette, legends, the charts.

pub mod anatomy;
pub mod axis;
pub mod legend;
pub mod line;
pub mod palette;
pub mod text;

pub use anatomy::Anatomy;
pub use axis::{Scale, Unit};
pub use line::{stack, LineChart, Series};
pub use palette::{Style, COLOURS, DASHES};
