//! A round trip taken apart at several percentiles, in two panels on scales shared by
//! every percentile (so that a P99.9 twice the P50 is drawn twice as tall):
//!
//! - the whole round trip: a stacked bar per percentile on one linear axis, the
//!   dominant part (the network) at the bottom and cut by a break where it is most of
//!   the height, so the axis spans what differs; other layers' values are lines across
//!   the bars;
//! - each part on its own: per percentile a bar per part on one log axis, so a host's
//!   8 µs stands tens of pixels tall next to a 10 ms network.

use super::axis::{self, Axis, Scale, Unit};
use super::legend::{Legend, Swatch};
use super::line::{heading, open};
use super::palette::{Style, COLOURS};
use super::text::{self, esc, FONT};
use std::fmt::Write;

/// A round trip's parts at several percentiles, with other layers' values beside them.
#[derive(Clone, Debug)]
pub struct Anatomy {
    /// The heading above the chart, also its `aria-label`.
    pub title: String,
    /// The parts' names, in the order they happen; part `i` takes `COLOURS[i]`.
    pub parts: Vec<String>,
    /// The part at the bottom of each whole bar, where the break goes (the network).
    pub base: usize,
    /// (group label such as "P50", each part's value in µs).
    pub groups: Vec<(String, Vec<f64>)>,
    /// (name, palette index, value in µs in each group): a line across that group's
    /// whole bar in the layer's colour and pattern of the other charts (`Style::of`),
    /// on a white halo so that it stands out of the bar's colours, drawn beneath the
    /// bar so that it shows either side.
    pub markers: Vec<(String, usize, Vec<Option<f64>>)>,
}
const TOP: f64 = 64.0;
const H: f64 = 470.0;
/// The bottom margin: two lines of group labels and the axis title.
const BOTTOM: f64 = 62.0;
/// The height standing for 0 up to the break, px.
const STUB: f64 = 28.0;
const WHOLE_W: f64 = 250.0;
const PARTS_W: f64 = 290.0;

/// The whole bars' linear axis: from the break's value (or 0) to the top.
struct Whole {
    axis: Axis,
    broken: bool,
}

impl Anatomy {
    fn total(v: &[f64]) -> f64 {
        v.iter().filter(|x| **x > 0.0).sum()
    }

    /// The whole bars' axis: broken when the lowest value it must show (the base
    /// part's, a marker's) is over 40 % of the highest.
    fn whole_axis(&self) -> Whole {
        let marks = self
            .markers
            .iter()
            .flat_map(|(_, _, v)| v.iter().flatten().copied());
        let bases = self
            .groups
            .iter()
            .map(|(_, v)| v.get(self.base).copied().unwrap_or(0.0));
        let lo = bases.chain(marks.clone()).fold(f64::INFINITY, f64::min);
        let hi = self
            .groups
            .iter()
            .map(|(_, v)| Self::total(v))
            .chain(marks)
            .fold(0.0, f64::max);
        if lo.is_finite() && lo > 0.4 * hi {
            let (a, b) = axis::fit([lo, hi].into_iter(), Scale::Linear);
            Whole {
                axis: Axis::new(a, b, Scale::Linear, Unit::Micros),
                broken: true,
            }
        } else {
            Whole {
                axis: Axis::new(0.0, (hi * 1.05).max(1.0), Scale::Linear, Unit::Micros),
                broken: false,
            }
        }
    }

    /// The parts' log axis: from a decade at or below half the smallest part (so the
    /// smallest bar is at least a third of a decade tall) to above the largest.
    fn parts_axis(&self) -> Axis {
        let vals = || {
            self.groups
                .iter()
                .flat_map(|(_, v)| v.iter().copied())
                .filter(|v| *v > 0.0)
        };
        let lo = vals().fold(f64::INFINITY, f64::min);
        let hi = vals().fold(0.0, f64::max);
        let lo = if lo.is_finite() {
            10f64.powf((lo / 2.0).log10().floor())
        } else {
            1.0
        };
        Axis::new(lo, (hi * 1.5).max(lo * 10.0), Scale::Log, Unit::Micros)
    }

    fn legend(&self) -> Legend {
        let mut order: Vec<usize> = (0..self.parts.len()).filter(|i| *i != self.base).collect();
        order.reverse();
        order.push(self.base);
        let mut entries: Vec<(Swatch, String)> = order
            .into_iter()
            .map(|i| {
                (
                    Swatch::Block(COLOURS[i % COLOURS.len()]),
                    self.parts[i].clone(),
                )
            })
            .collect();
        for (name, colour, _) in &self.markers {
            entries.push((Swatch::Marker(Style::of(*colour, false)), name.clone()));
        }
        Legend { entries }
    }

    /// The chart as an `<svg>` element.
    pub fn render(&self) -> String {
        let ph = H - TOP - BOTTOM;
        let whole = self.whole_axis();
        let parts = self.parts_axis();
        let wt = whole
            .axis
            .ticks(ph - if whole.broken { STUB } else { 0.0 }, false);
        let pt = parts.ticks(ph, false);
        let widest = |t: &[axis::Tick]| {
            t.iter()
                .map(|t| text::width(&t.label, FONT))
                .fold(0.0, f64::max)
        };
        // The legend between the panels: the layers' lines are the whole bars' (left),
        // the parts' colours both panels'.
        let l1 = 28.0 + widest(&wt) + 8.0;
        let legend = self.legend();
        let lx = l1 + WHOLE_W + 16.0;
        let l2 = lx + legend.width(ph) + 24.0 + 28.0 + widest(&pt) + 8.0;
        let w = (l2 + PARTS_W + 12.0).ceil();
        let mut o = open(w, H, &self.title);
        o += &heading(w / 2.0, 22.0, 15.0, w - 20.0, &self.title);
        o += &heading(
            l1 + WHOLE_W / 2.0,
            48.0,
            13.0,
            WHOLE_W,
            "the whole round trip",
        );
        o += &heading(
            l2 + PARTS_W / 2.0,
            48.0,
            13.0,
            PARTS_W,
            "each part, log scale",
        );
        self.draw_whole(&mut o, &whole, &wt, l1, ph);
        self.draw_parts(&mut o, &parts, &pt, l2, ph);
        o += &legend.render(lx, TOP, ph);
        o + "</svg>"
    }

    /// A panel's frame, grid, y ticks and y title.
    fn frame(o: &mut String, x0: f64, pw: f64, ph: f64, ticks: &[(f64, String)], title: &str) {
        let _ = write!(o, r##"<g class="grid" stroke="#ddd">"##);
        for (y, _) in ticks {
            let _ = write!(
                o,
                r#"<line x1="{x0:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}"/>"#,
                x0 + pw
            );
        }
        let _ = write!(
            o,
            r##"</g><rect class="plot" x="{x0:.1}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>"##
        );
        for (y, label) in ticks {
            let _ = write!(
                o,
                r#"<text class="ytick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                x0 - 6.0,
                y + 4.0,
                esc(label)
            );
        }
        let _ = write!(
            o,
            r#"<text class="ylabel" transform="translate({:.1} {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            x0 - 20.0
                - ticks
                    .iter()
                    .map(|t| text::width(&t.1, FONT))
                    .fold(0.0, f64::max),
            TOP + ph / 2.0,
            esc(title)
        );
    }

    /// Two lines of group label under a slot centred at `cx`, cut in size to fit `room`.
    fn group_label(o: &mut String, cx: f64, room: f64, first: &str, second: Option<&str>) {
        let longest = text::width(first, 11.0).max(second.map_or(0.0, |s| text::width(s, 11.0)));
        let size = (11.0 * (room - 4.0) / longest).min(11.0);
        let y = TOP + (H - TOP - BOTTOM) + 18.0;
        let _ = write!(
            o,
            r#"<text class="xtick" x="{cx:.1}" y="{y:.1}" text-anchor="middle" font-size="{size:.1}">{}"#,
            esc(first)
        );
        if let Some(s) = second {
            let _ = write!(o, r#"<tspan x="{cx:.1}" dy="1.2em">{}</tspan>"#, esc(s));
        }
        *o += "</text>";
    }

    /// The whole bars: the base part first (from the stub's foot when the axis is
    /// broken), the others stacked on it in their order; markers beneath.
    fn draw_whole(&self, o: &mut String, w: &Whole, ticks: &[axis::Tick], x0: f64, ph: f64) {
        let foot = TOP + ph;
        let span = ph - if w.broken { STUB } else { 0.0 };
        let py = |v: f64| TOP + (1.0 - w.axis.frac(v)) * span;
        let mut t: Vec<(f64, String)> = ticks
            .iter()
            .map(|t| (py(t.value), t.label.clone()))
            .collect();
        if w.broken {
            t.push((foot, "0".into()));
        }
        Self::frame(o, x0, WHOLE_W, ph, &t, &w.axis.title("round trip"));
        let slot = WHOLE_W / self.groups.len().max(1) as f64;
        let bw = (slot * 0.5).min(60.0);
        for (g, (label, values)) in self.groups.iter().enumerate() {
            let cx = x0 + slot * (g as f64 + 0.5);
            let bx = cx - bw / 2.0;
            for (name, colour, at) in &self.markers {
                let Some(v) = at.get(g).copied().flatten() else {
                    continue;
                };
                let style = Style::of(*colour, false);
                let _ = write!(
                    o,
                    r##"<line class="halo" x1="{x1:.1}" y1="{y:.1}" x2="{x2:.1}" y2="{y:.1}" stroke="#fff" stroke-width="5"/><line class="marker" x1="{x1:.1}" y1="{y:.1}" x2="{x2:.1}" y2="{y:.1}" stroke="{}" stroke-width="2.5" stroke-dasharray="{}"><title>{}: {} {}</title></line>"##,
                    style.colour,
                    style.dash,
                    esc(label),
                    esc(name),
                    text::duration(v * 1e-6),
                    x1 = bx - 12.0,
                    x2 = bx + bw + 12.0,
                    y = py(v),
                );
            }
            let order =
                std::iter::once(self.base).chain((0..values.len()).filter(|i| *i != self.base));
            let (mut below, mut sum) = (foot, 0.0);
            for i in order {
                let v = values.get(i).copied().unwrap_or(0.0);
                if v <= 0.0 {
                    continue;
                }
                sum += v;
                let top = py(sum).min(below);
                let _ = write!(
                    o,
                    r#"<rect class="segment" data-part="{n}" data-group="{g}" x="{bx:.1}" y="{top:.2}" width="{bw:.1}" height="{:.2}" fill="{}"><title>{g}: {n} {}</title></rect>"#,
                    below - top,
                    COLOURS[i % COLOURS.len()],
                    text::duration(v * 1e-6),
                    n = esc(self.parts.get(i).map_or("", String::as_str)),
                    g = esc(label),
                );
                below = top;
            }
            Self::group_label(
                o,
                cx,
                slot,
                label,
                Some(&text::duration(Self::total(values) * 1e-6)),
            );
        }
        if w.broken {
            Self::break_mark(o, x0, WHOLE_W, foot - STUB / 2.0);
        }
    }

    /// The break: a white zigzag band across the panel and its bars, with its edges drawn.
    fn break_mark(o: &mut String, x0: f64, pw: f64, y: f64) {
        let mut pts = Vec::new();
        let mut x = x0 - 6.0;
        let mut up = true;
        while x <= x0 + pw + 6.0 {
            pts.push(format!("{x:.1},{:.1}", if up { y - 3.0 } else { y + 3.0 }));
            x += 6.0;
            up = !up;
        }
        let p = pts.join(" ");
        let _ = write!(
            o,
            r##"<g class="break"><polyline fill="none" stroke="white" stroke-width="7" points="{p}"/><polyline fill="none" stroke="#333" stroke-width="1" transform="translate(0 -4)" points="{p}"/><polyline fill="none" stroke="#333" stroke-width="1" transform="translate(0 4)" points="{p}"/></g>"##
        );
    }

    /// Each part on its own at each percentile: a bar per part on the shared log axis.
    fn draw_parts(&self, o: &mut String, a: &Axis, ticks: &[axis::Tick], x0: f64, ph: f64) {
        let py = |v: f64| TOP + (1.0 - a.frac(v)) * ph;
        let mut t: Vec<(f64, String)> = ticks
            .iter()
            .map(|t| (py(t.value), t.label.clone()))
            .collect();
        t.extend(a.minor(ticks).into_iter().map(|v| (py(v), String::new())));
        Self::frame(o, x0, PARTS_W, ph, &t, "duration");
        let slot = PARTS_W / self.groups.len().max(1) as f64;
        let k = self.parts.len().max(1) as f64;
        let bw = slot * 0.8 / k;
        for (g, (label, values)) in self.groups.iter().enumerate() {
            let x = x0 + slot * g as f64 + slot * 0.1;
            for (i, &v) in values.iter().enumerate() {
                if v <= a.lo {
                    continue;
                }
                let top = py(v);
                let _ = write!(
                    o,
                    r#"<rect class="part" data-part="{n}" data-group="{g}" x="{:.1}" y="{top:.2}" width="{:.1}" height="{:.2}" fill="{}"><title>{g}: {n} {}</title></rect>"#,
                    x + i as f64 * bw,
                    bw - 1.0,
                    TOP + ph - top,
                    COLOURS[i % COLOURS.len()],
                    text::duration(v * 1e-6),
                    n = esc(self.parts.get(i).map_or("", String::as_str)),
                    g = esc(label),
                );
            }
            Self::group_label(o, x0 + slot * (g as f64 + 0.5), slot, label, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart() -> Anatomy {
        Anatomy {
            title: "anatomy".into(),
            parts: [
                "client_send",
                "network",
                "server_recv",
                "server_app",
                "client_recv",
            ]
            .map(String::from)
            .to_vec(),
            base: 1,
            groups: vec![
                ("P50".into(), vec![9.0, 10_005.0, 31.0, 8.0, 27.0]),
                ("P90".into(), vec![10.0, 10_010.0, 40.0, 9.0, 30.0]),
                ("P99".into(), vec![12.0, 10_020.0, 400.0, 9.0, 300.0]),
                ("P99.9".into(), vec![15.0, 10_030.0, 1500.0, 10.0, 60.0]),
            ],
            markers: vec![(
                "icmp".into(),
                0,
                vec![Some(10_019.0), Some(10_027.0), None, None],
            )],
        }
    }

    /// (part, group, height) of every rect of `class`, from the SVG text.
    fn rects(s: &str, class: &str) -> Vec<(String, String, f64)> {
        s.split(&format!(r#"<rect class="{class}" "#))
            .skip(1)
            .map(|r| {
                let attr = |k: &str| {
                    let at = r.find(&format!(r#"{k}=""#)).unwrap() + k.len() + 2;
                    r[at..at + r[at..].find('"').unwrap()].to_string()
                };
                (
                    attr("data-part"),
                    attr("data-group"),
                    attr("height").parse().unwrap(),
                )
            })
            .collect()
    }

    /// Witness: the geometry in the SVG text (arithmetic on its rects). One scale for
    /// every percentile: P99.9's whole bar is taller than P50's; every part at P50 is
    /// at least 3 px on the log panel; the break keeps the axis off 0.
    #[test]
    fn one_scale_for_every_percentile_and_every_part_visible() {
        let s = chart().render();
        let whole = rects(&s, "segment");
        let height = |g: &str| whole.iter().filter(|r| r.1 == g).map(|r| r.2).sum::<f64>();
        assert!(height("P99.9") > height("P50") + 100.0, "{}", height("P50"));
        let parts = rects(&s, "part");
        assert_eq!(parts.len(), 20);
        for r in parts.iter().filter(|r| r.1 == "P50") {
            assert!(r.2 >= 3.0, "{r:?}");
        }
        assert!(s.contains(r#"class="break""#));
        assert!(s.contains(">round trip (ms)<"), "{s}");
        assert!(!s.contains("e4") && s.contains("10.08 ms"), "{s}");
    }
}
