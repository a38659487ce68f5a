//! Line charts as self-contained SVG text: linear or log axes with labelled ticks and
//! units, one polyline (and markers) per series, a legend. Small on purpose: the
//! reports need x–y line charts only, readable offline, with no font files (text is
//! left to the viewer's sans-serif).

use crate::stats::{MedianCi, CI_LEVEL};
use std::fmt::Write;

/// One line of a chart.
#[derive(Clone, Debug)]
pub struct Series {
    /// Its name in the legend and in each point's tooltip.
    pub name: String,
    /// (x, y) in the axes' units, any order (drawn sorted by x); points that are not
    /// finite, or not positive on a log axis, are left out.
    pub points: Vec<(f64, f64)>,
    /// Dashed, no markers (predictions next to measurements).
    pub dashed: bool,
    /// Palette index (`None`: the series' position), so a prediction can share the
    /// colour of what it predicts.
    pub colour: Option<usize>,
    /// Error bars, (x, low, high): each point's confidence interval over repeated
    /// trials (empty: none).
    pub intervals: Vec<(f64, f64, f64)>,
}

impl Series {
    /// A solid or dashed series of raw (x, y) points where an x may repeat (one point
    /// per trial): each x becomes the median of its ys, with an error bar of the
    /// median's 95 % interval where it has more than one.
    pub fn over_trials(name: &str, raw: &[(f64, f64)], dashed: bool, colour: usize) -> Self {
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
        Self {
            name: name.into(),
            points: cis.iter().map(|(x, c)| (*x, c.median)).collect(),
            dashed,
            colour: Some(colour),
            intervals: cis
                .iter()
                .filter(|(_, c)| c.n > 1)
                .map(|(x, c)| (*x, c.lo, c.hi))
                .collect(),
        }
    }
}

/// An x–y line chart.
#[derive(Clone, Debug)]
pub struct LineChart {
    /// The heading above the chart, also its `aria-label`.
    pub title: String,
    /// Axis labels, with their unit, e.g. "disruption (ms)".
    pub x_label: String,
    /// The y axis's label, with its unit.
    pub y_label: String,
    /// A base-10 logarithmic x axis (points with x ≤ 0 are left out).
    pub x_log: bool,
    /// A base-10 logarithmic y axis (points with y ≤ 0 are left out).
    pub y_log: bool,
    /// Axis ranges; `None` fits the data.
    pub x_range: Option<(f64, f64)>,
    /// The y axis's range; `None` fits the points inside the x range.
    pub y_range: Option<(f64, f64)>,
    /// The lines, drawn and listed in the legend in this order.
    pub series: Vec<Series>,
}

const W: f64 = 720.0;
const H: f64 = 440.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 200.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 55.0;
/// Colour-blind-safe palette (Okabe–Ito), in the order series take it.
pub const COLOURS: [&str; 8] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn fmt_tick(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 1e4 || v.abs() < 1e-2 {
        format!("{v:e}")
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Axis: maps data to pixels, and chooses ticks.
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
}

impl Axis {
    fn new(lo: f64, hi: f64, log: bool) -> Self {
        let (lo, hi) = if log {
            (lo.max(f64::MIN_POSITIVE), hi.max(lo * 10.0))
        } else if hi <= lo {
            (lo - 1.0, hi + 1.0)
        } else {
            (lo, hi)
        };
        Self { lo, hi, log }
    }

    fn frac(&self, v: f64) -> f64 {
        if self.log {
            (v.max(f64::MIN_POSITIVE).log10() - self.lo.log10())
                / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }

    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let (a, b) = (
                self.lo.log10().floor() as i32,
                self.hi.log10().ceil() as i32,
            );
            let mut t = Vec::new();
            for e in a..=b {
                for m in [1.0, 2.0, 5.0] {
                    let v = m * 10f64.powi(e);
                    if v >= self.lo * 0.999 && v <= self.hi * 1.001 {
                        t.push(v);
                    }
                }
            }
            t
        } else {
            let span = self.hi - self.lo;
            let raw = span / 6.0;
            let mag = 10f64.powf(raw.log10().floor());
            let step = [1.0, 2.0, 5.0, 10.0]
                .iter()
                .map(|m| m * mag)
                .find(|s| *s >= raw)
                .unwrap_or(mag * 10.0);
            let mut v = (self.lo / step).ceil() * step;
            let mut t = Vec::new();
            while v <= self.hi + step * 1e-9 {
                t.push(v);
                v += step;
            }
            t
        }
    }
}

fn range(points: impl Iterator<Item = f64>, log: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in points.filter(|v| v.is_finite() && (!log || *v > 0.0)) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (if log { 1.0 } else { 0.0 }, 10.0);
    }
    if log {
        (lo / 1.2, hi * 1.2)
    } else {
        let pad = (hi - lo).max(hi.abs() * 0.05).max(1e-9) * 0.05;
        (
            if lo >= 0.0 {
                (lo - pad).max(0.0)
            } else {
                lo - pad
            },
            hi + pad,
        )
    }
}

impl LineChart {
    /// The chart as an `<svg>` element.
    pub fn render(&self) -> String {
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
            .unwrap_or_else(|| range(pts().map(|p| p.0), self.x_log));
        let in_x = |p: &(f64, f64)| p.0 >= xr.0 && p.0 <= xr.1;
        let yr = self
            .y_range
            .unwrap_or_else(|| range(pts().filter(in_x).map(|p| p.1), self.y_log));
        let (x, y) = (
            Axis::new(xr.0, xr.1, self.x_log),
            Axis::new(yr.0, yr.1, self.y_log),
        );
        let pw = W - LEFT - RIGHT;
        let ph = H - TOP - BOTTOM;
        let px = |v: f64| LEFT + x.frac(v) * pw;
        let py = |v: f64| TOP + (1.0 - y.frac(v)) * ph;
        // Unique per chart, so several charts inline in one page keep their own clip.
        let clip = format!(
            "clip{:x}",
            self.title
                .bytes()
                .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)))
        );
        let mut o = String::new();
        let _ = write!(
            o,
            r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" font-family="sans-serif" font-size="12" role="img" aria-label="{t}"><rect width="{W}" height="{H}" fill="white"/><text x="{cx}" y="22" text-anchor="middle" font-size="15" font-weight="bold">{t}</text>"#,
            t = esc(&self.title),
            cx = LEFT + pw / 2.0
        );
        let _ = write!(o, r##"<g class="grid" stroke="#ddd">"##);
        for t in x.ticks() {
            let _ = write!(
                o,
                r#"<line x1="{0:.1}" y1="{TOP}" x2="{0:.1}" y2="{1:.1}"/>"#,
                px(t),
                TOP + ph
            );
        }
        for t in y.ticks() {
            let _ = write!(
                o,
                r#"<line x1="{LEFT}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}"/>"#,
                py(t),
                LEFT + pw
            );
        }
        o += "</g>";
        let _ = write!(
            o,
            r##"<rect class="plot" x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>"##
        );
        for t in x.ticks() {
            let _ = write!(
                o,
                r#"<text class="xtick" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                px(t),
                TOP + ph + 16.0,
                fmt_tick(t)
            );
        }
        for t in y.ticks() {
            let _ = write!(
                o,
                r#"<text class="ytick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                LEFT - 6.0,
                py(t) + 4.0,
                fmt_tick(t)
            );
        }
        let _ = write!(
            o,
            r#"<text class="xlabel" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text class="ylabel" transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            LEFT + pw / 2.0,
            H - 12.0,
            esc(&self.x_label),
            TOP + ph / 2.0,
            esc(&self.y_label)
        );
        let _ = write!(
            o,
            r#"<clipPath id="{clip}"><rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}"/></clipPath>"#
        );
        for (i, s) in self.series.iter().enumerate() {
            let c = COLOURS[s.colour.unwrap_or(i) % COLOURS.len()];
            let mut p: Vec<(f64, f64)> = s
                .points
                .iter()
                .copied()
                .filter(|&(a, b)| {
                    a.is_finite()
                        && b.is_finite()
                        && (!self.y_log || b > 0.0)
                        && (!self.x_log || a > 0.0)
                })
                .collect();
            p.sort_by(|a, b| a.0.total_cmp(&b.0));
            let path: Vec<String> = p
                .iter()
                .map(|&(a, b)| format!("{:.1},{:.1}", px(a), py(b)))
                .collect();
            let dash = if s.dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            let _ = write!(
                o,
                r#"<g class="series" clip-path="url(#{clip})"><polyline fill="none" stroke="{c}" stroke-width="2"{dash} points="{}"><title>{}</title></polyline>"#,
                path.join(" "),
                esc(&s.name)
            );
            let shown = |v: f64| v.is_finite() && (!self.y_log || v > 0.0);
            for &(a, lo, hi) in &s.intervals {
                if a.is_finite() && (!self.x_log || a > 0.0) && shown(lo) && shown(hi) {
                    let (xa, y0, y1) = (px(a), py(lo), py(hi));
                    let _ = write!(
                        o,
                        r#"<path class="ci" stroke="{c}" stroke-width="1.5" d="M{xa:.1},{y0:.1}V{y1:.1}M{:.1},{y0:.1}h8M{:.1},{y1:.1}h8"><title>{}: {}, 95 % interval {}–{}</title></path>"#,
                        xa - 4.0,
                        xa - 4.0,
                        esc(&s.name),
                        fmt_tick(a),
                        fmt_tick((lo * 10.0).round() / 10.0),
                        fmt_tick((hi * 10.0).round() / 10.0)
                    );
                }
            }
            if !s.dashed {
                for &(a, b) in &p {
                    let _ = write!(
                        o,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"><title>{}: {}, {}</title></circle>"#,
                        px(a),
                        py(b),
                        esc(&s.name),
                        fmt_tick(a),
                        fmt_tick((b * 10.0).round() / 10.0)
                    );
                }
            }
            o += "</g>";
            let ly = TOP + 10.0 + i as f64 * 18.0;
            let _ = write!(
                o,
                r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{c}" stroke-width="2"{dash}/><text class="legend" x="{:.1}" y="{:.1}">{}</text>"#,
                LEFT + pw + 10.0,
                LEFT + pw + 34.0,
                LEFT + pw + 40.0,
                ly + 4.0,
                esc(&s.name)
            );
        }
        o += "</svg>";
        o
    }
}

/// Stacked bars, one panel per group with its own linear axis from 0 (a P99.9 ten
/// times the P50 would flatten the P50's bar on a shared one), and markers across
/// each bar, beneath it: measurements drawn against the segments they contain.
pub struct StackedBars {
    /// The heading above the chart, also its `aria-label`.
    pub title: String,
    /// The label of the panels' y axes (tooltips give values in µs whatever it says).
    pub y_label: String,
    /// The segments' names, bottom first; segment `i` takes `COLOURS[i]`.
    pub segments: Vec<String>,
    /// (group label, its segments' values).
    pub groups: Vec<(String, Vec<f64>)>,
    /// (name, value in each group): a black line across that group's bar (drawn
    /// beneath it, so it shows either side), each marker with its own dash pattern.
    pub markers: Vec<(String, Vec<Option<f64>>)>,
}

/// Dash patterns of [`StackedBars`]' markers, in the order markers take them.
const MARKER_DASHES: [&str; 6] = ["", "6 3", "2 2", "8 2 2 2", "1 3", "10 4"];
/// A segment thinner than this is drawn this tall, so that its colour shows (its
/// value is in its tooltip and the legend's order).
const MIN_SEGMENT_PX: f64 = 4.0;

impl StackedBars {
    /// The chart as an `<svg>` element.
    pub fn render(&self) -> String {
        let n = self.groups.len().max(1) as f64;
        let pw = (W - LEFT - RIGHT) / n;
        let ph = H - TOP - BOTTOM;
        let mut o = String::new();
        let _ = write!(
            o,
            r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" font-family="sans-serif" font-size="12" role="img" aria-label="{t}"><rect width="{W}" height="{H}" fill="white"/><text x="{cx}" y="22" text-anchor="middle" font-size="15" font-weight="bold">{t}</text><text class="ylabel" transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            TOP + ph / 2.0,
            esc(&self.y_label),
            t = esc(&self.title),
            cx = (W - RIGHT) / 2.0,
        );
        for (g, (label, values)) in self.groups.iter().enumerate() {
            let x0 = LEFT + g as f64 * pw;
            let total: f64 = values.iter().sum();
            let top = self
                .markers
                .iter()
                .filter_map(|(_, v)| v.get(g).copied().flatten())
                .fold(total, f64::max);
            let axis = Axis::new(0.0, (top * 1.1).max(1e-3), false);
            let py = |v: f64| TOP + (1.0 - axis.frac(v)) * ph;
            let _ = write!(
                o,
                r##"<g class="panel"><rect x="{x0:.1}" y="{TOP}" width="{:.1}" height="{ph}" fill="none" stroke="#333"/>"##,
                pw - 30.0
            );
            for t in axis.ticks() {
                let _ = write!(
                    o,
                    r##"<line x1="{x0:.1}" y1="{y:.1}" x2="{x2:.1}" y2="{y:.1}" stroke="#ddd"/><text class="ytick" x="{tx:.1}" y="{ty:.1}" text-anchor="end" font-size="10">{t}</text>"##,
                    y = py(t),
                    x2 = x0 + pw - 30.0,
                    tx = x0 - 3.0,
                    ty = py(t) + 3.0,
                    t = fmt_tick(t)
                );
            }
            let (bx, bw) = (x0 + 12.0, pw - 54.0);
            // Markers first, the bar over them: a line across a 4-pixel segment would
            // hide most of it; beneath, each shows on both sides of the bar.
            for (m, (name, at)) in self.markers.iter().enumerate() {
                let Some(v) = at.get(g).copied().flatten() else {
                    continue;
                };
                let dash = MARKER_DASHES[m % MARKER_DASHES.len()];
                let _ = write!(
                    o,
                    r##"<line class="marker" x1="{x1:.1}" y1="{y:.1}" x2="{x2:.1}" y2="{y:.1}" stroke="#000" stroke-width="1.5" stroke-dasharray="{dash}"><title>{label}: {name} {value} µs</title></line>"##,
                    x1 = bx - 8.0,
                    y = py(v),
                    x2 = bx + bw + 8.0,
                    name = esc(name),
                    value = fmt_tick((v * 10.0).round() / 10.0)
                );
            }
            let mut y = py(0.0);
            for (i, &v) in values.iter().enumerate() {
                if v <= 0.0 {
                    continue;
                }
                let h = (py(0.0) - py(v)).max(MIN_SEGMENT_PX);
                y -= h;
                let name = self.segments.get(i).map_or("", String::as_str);
                let _ = write!(
                    o,
                    r#"<rect class="segment" x="{bx:.1}" y="{y:.1}" width="{bw:.1}" height="{h:.1}" fill="{}"><title>{label}: {} {} µs</title></rect>"#,
                    COLOURS[i % COLOURS.len()],
                    esc(name),
                    fmt_tick((v * 10.0).round() / 10.0)
                );
            }
            let _ = write!(
                o,
                r#"<text class="xtick" x="{:.1}" y="{:.1}" text-anchor="middle">{} ({} µs)</text></g>"#,
                bx + bw / 2.0,
                TOP + ph + 16.0,
                esc(label),
                fmt_tick(total.round())
            );
        }
        let lx = W - RIGHT + 10.0;
        for (i, name) in self.segments.iter().enumerate().rev() {
            let ly = TOP + 10.0 + (self.segments.len() - 1 - i) as f64 * 18.0;
            let _ = write!(
                o,
                r#"<rect x="{lx:.1}" y="{:.1}" width="24" height="10" fill="{}"/><text class="legend" x="{:.1}" y="{:.1}">{}</text>"#,
                ly - 5.0,
                COLOURS[i % COLOURS.len()],
                lx + 30.0,
                ly + 4.0,
                esc(name)
            );
        }
        for (m, (name, _)) in self.markers.iter().enumerate() {
            let ly = TOP + 20.0 + (self.segments.len() + m) as f64 * 18.0;
            let _ = write!(
                o,
                r##"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="#000" stroke-width="1.5" stroke-dasharray="{}"/><text class="legend" x="{:.1}" y="{:.1}">{}</text>"##,
                lx + 24.0,
                MARKER_DASHES[m % MARKER_DASHES.len()],
                lx + 30.0,
                ly + 4.0,
                esc(name)
            );
        }
        o += "</svg>";
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_axes_series_and_legend() {
        let c = LineChart {
            title: "idle <by> D".into(),
            x_label: "disruption (ms)".into(),
            y_label: "TCP idle (ms)".into(),
            x_log: true,
            y_log: true,
            x_range: None,
            y_range: None,
            series: vec![
                Series {
                    name: "thick 200 ms".into(),
                    points: vec![(10.0, 204.0), (100.0, 204.0), (1000.0, 1404.0)],
                    dashed: false,
                    colour: None,
                    intervals: Vec::new(),
                },
                Series {
                    name: "model".into(),
                    points: vec![(10.0, 204.0), (1000.0, 1404.0)],
                    dashed: true,
                    colour: Some(0),
                    intervals: Vec::new(),
                },
            ],
        };
        let s = c.render();
        assert!(s.starts_with("<svg") && s.ends_with("</svg>"));
        assert_eq!(s.matches("<polyline").count(), 2);
        assert_eq!(s.matches("<circle").count(), 3);
        assert!(s.contains("disruption (ms)") && s.contains("idle &lt;by&gt; D"));
        // Log ticks at 1-2-5 steps.
        assert!(s.contains(">100<") && s.contains(">1000<"));
        let lin = Axis::new(0.0, 1500.0, false).ticks();
        assert_eq!(lin.first(), Some(&0.0));
        assert!(lin.len() >= 4 && lin.len() <= 12, "{lin:?}");
    }

    #[test]
    fn stacks_every_segment_with_markers_on_each_panel() {
        let c = StackedBars {
            title: "anatomy".into(),
            y_label: "µs".into(),
            segments: vec!["a".into(), "b".into(), "c".into()],
            groups: vec![
                ("P50".into(), vec![1.0, 100.0, 0.01]),
                ("P99".into(), vec![2.0, 900.0, 50.0]),
            ],
            markers: vec![("wire".into(), vec![Some(100.5), None])],
        };
        let s = c.render();
        assert_eq!(s.matches(r#"class="segment""#).count(), 6);
        assert_eq!(s.matches(r#"class="marker""#).count(), 1);
        // The marker lies beneath its panel's bar: drawn before its first segment.
        assert!(
            s.find(r#"class="marker""#) < s.find(r#"class="segment""#),
            "{s}"
        );
        // Each segment in its colour, however thin.
        for colour in &COLOURS[..3] {
            assert_eq!(s.matches(&format!(r#"fill="{colour}"><title>"#)).count(), 2);
        }
        assert!(
            s.contains("P50 (101 µs)") && s.contains("P99 (952 µs)"),
            "{s}"
        );
    }
}
