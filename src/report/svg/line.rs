//! Line charts: x–y axes (linear, log or tail, time axes in their own SI unit), one
//! line per series in a style of its own, a legend beside the plot; several charts can
//! be stacked as panels of one figure, so that a layer far from the others (the
//! server's srtt at twice the RTT) gets its own scale instead of flattening the rest.

use super::axis::{self, Axis, Scale, Tick, Unit};
use super::legend::{Legend, Swatch};
use super::palette::Style;
use super::text::{self, esc, FONT};
use crate::stats::{MedianCi, CI_LEVEL};
use std::fmt::Write;

/// One line of a chart.
#[derive(Clone, Debug)]
pub struct Series {
    /// Its name in the legend and in each point's tooltip.
    pub name: String,
    /// (x, y) in the axes' units, any order (drawn sorted by x); points an axis cannot
    /// show (not finite, not positive on a log axis) are left out.
    pub points: Vec<(f64, f64)>,
    /// A secondary line (a prediction next to a measurement, a median next to a mean):
    /// the colour of its palette index in a pattern of its own, thinner, no markers.
    pub secondary: bool,
    /// Palette index (`None`: the series' position), so that a prediction shares the
    /// colour of what it predicts and a layer keeps its colour from chart to chart.
    pub colour: Option<usize>,
    /// Error bars, (x, low, high): each point's confidence interval over repeated
    /// trials (empty: none).
    pub intervals: Vec<(f64, f64, f64)>,
    /// A dot at each point (a primary series of at most 40 points): for measurements
    /// at chosen x values, not for curves such as a distribution's.
    pub markers: bool,
}

impl Series {
    /// A primary or secondary series of raw (x, y) points where an x may repeat (one
    /// point per trial): each x becomes the median of its ys, with an error bar of the
    /// median's 95 % interval where it has more than one.
    pub fn over_trials(name: &str, raw: &[(f64, f64)], secondary: bool, colour: usize) -> Self {
        let mut xs: Vec<f64> = raw.iter().map(|p| p.0).collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        let cis: Vec<(f64, MedianCi)> = xs
            .into_iter()
            .filter_map(|x| {
                let ys: Vec<f64> = raw.iter().filter(|p| p.0 == x).map(|p| p.1).collect();
                Some((x, MedianCi::of(&ys, CI_LEVEL)?))
            })
            .collect();
        Self::of_medians(name, &cis, secondary, colour)
    }

    /// A series of medians with their intervals, one per x: each point the median,
    /// with an error bar where more than one value made it.
    pub fn of_medians(name: &str, cis: &[(f64, MedianCi)], secondary: bool, colour: usize) -> Self {
        Self {
            name: name.into(),
            points: cis.iter().map(|(x, c)| (*x, c.median)).collect(),
            secondary,
            colour: Some(colour),
            markers: true,
            intervals: cis
                .iter()
                .filter(|(_, c)| c.n > 1)
                .map(|(x, c)| (*x, c.lo, c.hi))
                .collect(),
        }
    }

    /// A primary curve in palette colour `colour`, without markers.
    pub fn line(name: &str, points: Vec<(f64, f64)>, colour: usize) -> Self {
        Self {
            name: name.into(),
            points,
            secondary: false,
            colour: Some(colour),
            intervals: Vec::new(),
            markers: false,
        }
    }
}

/// An x–y line chart.
#[derive(Clone, Debug)]
pub struct LineChart {
    /// The heading above the chart, also its `aria-label`.
    pub title: String,
    /// What the x axis measures, without its unit ("RTT"): a time axis adds the unit
    /// it chooses.
    pub x_label: String,
    /// What the y axis measures, without its unit.
    pub y_label: String,
    /// How x values map to positions.
    pub x_scale: Scale,
    /// How y values map to positions.
    pub y_scale: Scale,
    /// What x values measure (durations are written in the unit that suits the range).
    pub x_unit: Unit,
    /// What y values measure.
    pub y_unit: Unit,
    /// The x axis's range; `None` fits the data.
    pub x_range: Option<(f64, f64)>,
    /// The y axis's range; `None` fits the points inside the x range.
    pub y_range: Option<(f64, f64)>,
    /// The lines, drawn and listed in the legend in this order.
    pub series: Vec<Series>,
}

/// A chart's width, px.
pub const W: f64 = 720.0;
/// A lone chart's height, px.
pub const H: f64 = 440.0;
const TOP: f64 = 38.0;
const BOTTOM: f64 = 52.0;
/// Series with more points than this are drawn without a marker at each.
const MARKED_POINTS: usize = 40;

/// An `<svg>` element's opening: size, font, white background, accessible name.
pub(super) fn open(w: f64, h: f64, title: &str) -> String {
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" font-family="sans-serif" font-size="{FONT}" role="img" aria-label="{t}"><rect width="{w}" height="{h}" fill="white"/>"#,
        t = esc(title)
    )
}

/// A heading centred at `cx`, its size cut until it fits `room` px.
pub(super) fn heading(cx: f64, y: f64, size: f64, room: f64, t: &str) -> String {
    let size = (size * room / text::width(t, size)).min(size).max(9.0);
    format!(
        r#"<text class="title" x="{cx:.1}" y="{y:.1}" text-anchor="middle" font-size="{size:.1}" font-weight="bold">{}</text>"#,
        esc(t)
    )
}

/// Where a panel's plot lies and how its values map there.
struct Frame {
    x: Axis,
    y: Axis,
    left: f64,
    top: f64,
    pw: f64,
    ph: f64,
    xt: Vec<Tick>,
    yt: Vec<Tick>,
}

impl Frame {
    fn px(&self, v: f64) -> f64 {
        self.left + self.x.frac(v) * self.pw
    }
    fn py(&self, v: f64) -> f64 {
        self.top + (1.0 - self.y.frac(v)) * self.ph
    }
}

impl LineChart {
    /// The chart as an `<svg>` element.
    pub fn render(&self) -> String {
        let mut o = open(W, H, &self.title);
        o += &heading(W / 2.0, 22.0, 15.0, W - 20.0, &self.title);
        self.draw(&mut o, 0.0, H, "p", None);
        o + "</svg>"
    }

    /// The axes' ranges: as given, or fitted to the series (y to the points within x).
    fn ranges(&self) -> ((f64, f64), (f64, f64)) {
        let pts = || {
            self.series.iter().flat_map(|s| {
                s.points.iter().copied().chain(
                    s.intervals
                        .iter()
                        .flat_map(|&(x, lo, hi)| [(x, lo), (x, hi)]),
                )
            })
        };
        let xr = self
            .x_range
            .unwrap_or_else(|| axis::fit(pts().map(|p| p.0), self.x_scale));
        let yr = self.y_range.unwrap_or_else(|| {
            axis::fit(
                pts().filter(|p| p.0 >= xr.0 && p.0 <= xr.1).map(|p| p.1),
                self.y_scale,
            )
        });
        (xr, yr)
    }

    /// One entry per series; a series drawn exactly over an earlier one says so
    /// (its line hides the other's but for the gaps in its pattern).
    fn legend(&self) -> Legend {
        Legend {
            entries: self
                .series
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let st = Style::of(s.colour.unwrap_or(i), s.secondary);
                    let same = self.series[..i]
                        .iter()
                        .find(|e| !s.points.is_empty() && e.points == s.points);
                    let name = match same {
                        Some(e) => format!("{} (= {})", s.name, e.name),
                        None => s.name.clone(),
                    };
                    (Swatch::Line(st), name)
                })
                .collect(),
        }
    }

    /// Lay the panel out in `h` px from `y0`: the y ticks' labels set the left margin,
    /// the legend the right one, unless `margins` (left, plot width) are imposed.
    fn frame(&self, y0: f64, h: f64, margins: Option<(f64, f64)>) -> Frame {
        let (xr, yr) = self.ranges();
        let x = Axis::new(xr.0, xr.1, self.x_scale, self.x_unit);
        let y = Axis::new(yr.0, yr.1, self.y_scale, self.y_unit);
        let (top, ph) = (y0 + TOP, h - TOP - BOTTOM);
        let yt = y.ticks(ph, false);
        let widest = yt
            .iter()
            .map(|t| text::width(&t.label, FONT))
            .fold(0.0, f64::max);
        let left = 28.0 + widest + 8.0;
        let pw = (W - left - 16.0 - self.legend().width(ph) - 4.0).max(260.0);
        let (left, pw) = margins.unwrap_or((left, pw));
        let xt = x.ticks(pw, true);
        Frame {
            x,
            y,
            left,
            top,
            pw,
            ph,
            xt,
            yt,
        }
    }

    /// Draw the chart as a panel from `y0`, `h` px tall, its title included; `id`
    /// keeps its clip path apart from other panels'.
    fn draw(&self, o: &mut String, y0: f64, h: f64, id: &str, margins: Option<(f64, f64)>) {
        let f = self.frame(y0, h, margins);
        let (left, top, pw, ph) = (f.left, f.top, f.pw, f.ph);
        let _ = write!(o, r##"<g class="grid" stroke="#ddd">"##);
        for v in f.xt.iter().map(|t| t.value).chain(f.x.minor(&f.xt)) {
            let _ = write!(
                o,
                r#"<line x1="{0:.1}" y1="{top}" x2="{0:.1}" y2="{1:.1}"/>"#,
                f.px(v),
                top + ph
            );
        }
        for v in f.yt.iter().map(|t| t.value).chain(f.y.minor(&f.yt)) {
            let _ = write!(
                o,
                r#"<line x1="{left:.1}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}"/>"#,
                f.py(v),
                left + pw
            );
        }
        let _ = write!(
            o,
            r##"</g><rect class="plot" x="{left:.1}" y="{top}" width="{pw:.1}" height="{ph}" fill="none" stroke="#333"/>"##
        );
        for t in &f.xt {
            let _ = write!(
                o,
                r#"<text class="xtick" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                f.px(t.value),
                top + ph + 20.0,
                esc(&t.label)
            );
        }
        for t in &f.yt {
            let _ = write!(
                o,
                r#"<text class="ytick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                left - 6.0,
                f.py(t.value) + 4.0,
                esc(&t.label)
            );
        }
        let _ = write!(
            o,
            r#"<text class="xlabel" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text class="ylabel" transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            left + pw / 2.0,
            y0 + h - 10.0,
            esc(&f.x.title(&self.x_label)),
            top + ph / 2.0,
            esc(&f.y.title(&self.y_label))
        );
        let clip = format!(
            "clip{id}{:x}",
            self.title
                .bytes()
                .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)))
        );
        let _ = write!(
            o,
            r#"<clipPath id="{clip}"><rect x="{left:.1}" y="{top}" width="{pw:.1}" height="{ph}"/></clipPath>"#
        );
        for (i, s) in self.series.iter().enumerate() {
            self.draw_series(
                o,
                &f,
                s,
                Style::of(s.colour.unwrap_or(i), s.secondary),
                &clip,
            );
        }
        *o += &self.legend().render(left + pw + 16.0, top, ph);
    }

    /// A value in a tooltip, in the axis's terms (a duration in its SI unit).
    fn value(v: f64, a: &Axis) -> String {
        let secs = match a.unit {
            Unit::Plain => None,
            Unit::Micros => Some(1e-6),
            Unit::Millis => Some(1e-3),
            Unit::Seconds => Some(1.0),
        };
        match (a.scale, secs) {
            (Scale::Tail, _) => format!("P{}", text::sig(v * 100.0, 6)),
            (_, Some(s)) => text::duration(v * s),
            (_, None) => text::sig(v, 4),
        }
    }

    fn draw_series(&self, o: &mut String, f: &Frame, s: &Series, st: Style, clip: &str) {
        let mut p: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|&(a, b)| f.x.shows(a) && f.y.shows(b))
            .collect();
        p.sort_by(|a, b| a.0.total_cmp(&b.0));
        let path: Vec<String> = p
            .iter()
            .map(|&(a, b)| format!("{:.1},{:.1}", f.px(a), f.py(b)))
            .collect();
        let _ = write!(
            o,
            r#"<g class="series" clip-path="url(#{clip})"><polyline fill="none" {} stroke-linejoin="round" points="{}"><title>{}</title></polyline>"#,
            st.stroke(),
            path.join(" "),
            esc(&s.name)
        );
        let c = st.colour;
        for &(a, lo, hi) in &s.intervals {
            if f.x.shows(a) && f.y.shows(lo) && f.y.shows(hi) {
                let (xa, y0, y1) = (f.px(a), f.py(lo), f.py(hi));
                let _ = write!(
                    o,
                    r#"<path class="ci" stroke="{c}" stroke-width="1.5" d="M{xa:.1},{y0:.1}V{y1:.1}M{:.1},{y0:.1}h8M{:.1},{y1:.1}h8"><title>{}: {}, 95 % interval {} to {}</title></path>"#,
                    xa - 4.0,
                    xa - 4.0,
                    esc(&s.name),
                    Self::value(a, &f.x),
                    Self::value(lo, &f.y),
                    Self::value(hi, &f.y)
                );
            }
        }
        if s.markers && !s.secondary && p.len() <= MARKED_POINTS {
            for &(a, b) in &p {
                let _ = write!(
                    o,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"><title>{}: {}, {}</title></circle>"#,
                    f.px(a),
                    f.py(b),
                    esc(&s.name),
                    Self::value(a, &f.x),
                    Self::value(b, &f.y)
                );
            }
        }
        *o += "</g>";
    }
}

/// Charts stacked as panels of one figure under `title`, each `panel_height` px tall
/// with its own title and scales, their plots aligned one under another.
pub fn stack(title: &str, panels: &[LineChart], panel_height: f64) -> String {
    let h = 34.0 + panels.len() as f64 * panel_height;
    let frames: Vec<Frame> = panels
        .iter()
        .map(|p| p.frame(0.0, panel_height - 6.0, None))
        .collect();
    let left = frames.iter().map(|f| f.left).fold(0.0, f64::max);
    let right = frames.iter().map(|f| f.left + f.pw).fold(W, f64::min);
    let margins = Some((left, (right - left).max(200.0)));
    let mut o = open(W, h, title);
    o += &heading(W / 2.0, 22.0, 15.0, W - 20.0, title);
    for (i, p) in panels.iter().enumerate() {
        let y0 = 30.0 + i as f64 * panel_height;
        o += &heading(W / 2.0, y0 + 24.0, 13.0, W - 20.0, &p.title);
        p.draw(
            &mut o,
            y0 + 6.0,
            panel_height - 6.0,
            &format!("p{i}"),
            margins,
        );
    }
    o + "</svg>"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart() -> LineChart {
        LineChart {
            title: "idle <by> D".into(),
            x_label: "disruption".into(),
            y_label: "TCP idle".into(),
            x_scale: Scale::Log,
            y_scale: Scale::Log,
            x_unit: Unit::Millis,
            y_unit: Unit::Millis,
            x_range: None,
            y_range: None,
            series: vec![
                Series {
                    markers: true,
                    ..Series::line(
                        "thick 200 ms",
                        vec![(10.0, 204.0), (100.0, 204.0), (1000.0, 1404.0)],
                        0,
                    )
                },
                Series {
                    secondary: true,
                    ..Series::line("model", vec![(10.0, 204.0), (1000.0, 1404.0)], 0)
                },
            ],
        }
    }

    /// Witness: the SVG text.
    #[test]
    fn draws_axes_series_and_legend() {
        let s = chart().render();
        assert!(s.starts_with("<svg") && s.ends_with("</svg>"));
        assert_eq!(s.matches("<polyline").count(), 2);
        assert_eq!(s.matches("<circle").count(), 3);
        assert!(s.contains(">disruption<") && s.contains("idle &lt;by&gt; D"));
        // Log time ticks, each in its own unit.
        assert!(s.contains(">100 ms<") && s.contains(">1 s<"), "{s}");
        // The model in the measurement's colour, in another pattern.
        assert!(s.contains(r##"stroke="#0072B2" stroke-width="1.5" stroke-dasharray="6 4""##));
    }

    /// Witness: the SVG text. Panels keep their own clip paths and scales.
    #[test]
    fn panels_stack_with_their_own_scales() {
        let mut b = chart();
        b.title = "other".into();
        b.x_scale = Scale::Linear;
        let s = stack("both", &[chart(), b], 300.0);
        assert!(s.contains(r#"height="634""#));
        assert_eq!(s.matches("<clipPath").count(), 2);
        assert!(s.contains(">disruption (s)<"), "{s}");
    }
}
