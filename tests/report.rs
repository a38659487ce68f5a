//! Reports render in a real browser: headless Chromium (Debian's `chromium`) opens a
//! results directory's report.html from disk, offline. Two witnesses, both the
//! browser's own:
//!
//! - its layout: a copy of the page with a script appended (the reports themselves
//!   have none) measures every chart's `<text>` elements, plot frames and bars with
//!   `getBoundingClientRect`, and `--dump-dom` prints what it measured;
//! - its pixels: a screenshot, in which each series' colour is counted inside the plot
//!   frame it is drawn in (the legend's swatches are outside every frame).

use crate::common;
use crate::common::{bin, privileged};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Chromium, headless, with a profile of its own in `dir`.
fn chromium(dir: &Path, args: &[String]) -> Output {
    Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .args(args)
        .output()
        .expect("chromium (apt-get install chromium) must be installed for this test")
}

/// Whether chromium can run here; without it the tests that need only it are skipped,
/// unless RTTLAB_REQUIRE_PRIVILEGED_TESTS=1 (CI) makes that a failure.
fn have_chromium(test: &str) -> bool {
    let ok = Command::new("chromium")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let required = std::env::var("RTTLAB_REQUIRE_PRIVILEGED_TESTS").is_ok_and(|v| v == "1");
    assert!(ok || !required, "{test}: chromium is not installed");
    if !ok {
        eprintln!("skipping {test}: chromium is not installed");
    }
    ok
}

/// Chromium's screenshot of `html`, 1200 px wide, as RGB pixels in rows of 1200.
fn screenshot(html: &Path, height: u32) -> Vec<[u8; 3]> {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("shot.png");
    let o = chromium(
        dir.path(),
        &[
            format!("--window-size=1200,{height}"),
            format!("--screenshot={}", png.display()),
            format!("file://{}", html.display()),
        ],
    );
    assert!(
        png.exists(),
        "chromium wrote no screenshot: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let decoder = png::Decoder::new(std::fs::File::open(&png).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(info.width, 1200);
    let step = info.color_type.samples();
    buf[..info.buffer_size()]
        .chunks(step)
        .map(|p| [p[0], p[1], p[2]])
        .collect()
}

/// A box the browser laid out, CSS px from the page's top left.
#[derive(Clone, Copy, Debug)]
struct Box {
    x: f64,
    y: f64,
    w: f64,
    h: f64,
}

impl Box {
    /// Whether the two overlap by more than half a pixel both ways.
    fn overlaps(&self, o: &Box) -> bool {
        let ov = |a: f64, aw: f64, b: f64, bw: f64| (a + aw).min(b + bw) - a.max(b);
        ov(self.x, self.w, o.x, o.w) > 0.5 && ov(self.y, self.h, o.y, o.h) > 0.5
    }
    fn inside(&self, o: &Box) -> bool {
        self.x >= o.x - 0.5
            && self.y >= o.y - 0.5
            && self.x + self.w <= o.x + o.w + 0.5
            && self.y + self.h <= o.y + o.h + 0.5
    }
}

/// What the browser measured in one figure.
#[derive(Debug, Default)]
struct Figure {
    svg: Option<Box>,
    /// (box, text) of every `<text>`.
    texts: Vec<(Box, String)>,
    /// Plot frames, in document order (one per panel).
    plots: Vec<Box>,
    /// (class, part, group, box) of the anatomy's bars.
    bars: Vec<(String, String, String, Box)>,
}

/// Appended to a copy of the page: measures each figure and writes the result into
/// the DOM, which `--dump-dom` prints.
const MEASURE: &str = r#"<script>
const out = [];
const r = e => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.width, b.height].map(v => v.toFixed(2)).join('\t'); };
document.querySelectorAll('figure').forEach(f => {
  out.push(['S', f.id, r(f.querySelector('svg'))].join('\t'));
  f.querySelectorAll('svg text').forEach(t => out.push(['T', f.id, r(t), t.textContent].join('\t')));
  f.querySelectorAll('rect.plot').forEach(p => out.push(['P', f.id, r(p)].join('\t')));
  f.querySelectorAll('rect.part, rect.segment').forEach(p => out.push(['B', f.id, r(p), p.getAttribute('class'), p.dataset.part, p.dataset.group].join('\t')));
});
const pre = document.createElement('pre');
pre.textContent = 'MEASURE-BEGIN\n' + out.join('\n') + '\nMEASURE-END';
document.body.appendChild(pre);
</script>"#;

/// Every figure of `html` as the browser laid it out, by figure id.
fn measure(html: &Path) -> BTreeMap<String, Figure> {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("measure.html");
    let text = std::fs::read_to_string(html).unwrap();
    assert!(!text.contains("<script"), "a report with a script");
    std::fs::write(&page, text.replace("</body>", &format!("{MEASURE}</body>"))).unwrap();
    let o = chromium(
        dir.path(),
        &[
            // The screenshots' width: the same layout.
            "--window-size=1200,2400".into(),
            "--dump-dom".into(),
            "--virtual-time-budget=2000".into(),
            format!("file://{}", page.display()),
        ],
    );
    let dom = String::from_utf8_lossy(&o.stdout);
    // The script's own text names the markers too: its output is in the last <pre>.
    let start = dom.find("<pre>MEASURE-BEGIN").expect("the script's output") + 19;
    let end = dom.rfind("MEASURE-END").unwrap();
    let unescape = |s: &str| {
        s.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&amp;", "&")
    };
    let mut out: BTreeMap<String, Figure> = BTreeMap::new();
    for line in dom[start..end].lines().filter(|l| !l.is_empty()) {
        let f: Vec<&str> = line.split('\t').collect();
        let n = |i: usize| f[i].parse::<f64>().unwrap();
        let b = Box {
            x: n(2),
            y: n(3),
            w: n(4),
            h: n(5),
        };
        let fig = out.entry(unescape(f[1])).or_default();
        match f[0] {
            "S" => fig.svg = Some(b),
            "T" => fig.texts.push((b, unescape(f.get(6).unwrap_or(&"")))),
            "P" => fig.plots.push(b),
            "B" => fig.bars.push((f[6].into(), f[7].into(), f[8].into(), b)),
            other => panic!("{other}"),
        }
    }
    out
}

/// A number in exponent form: a digit, `e` or `E`, an optional sign, a digit.
fn scientific(s: &str) -> bool {
    let c: Vec<char> = s.chars().collect();
    (1..c.len()).any(|i| {
        let j = if c.get(i + 1).is_some_and(|x| *x == '+' || *x == '-') {
            i + 2
        } else {
            i + 1
        };
        c[i - 1].is_ascii_digit()
            && (c[i] == 'e' || c[i] == 'E')
            && c.get(j).is_some_and(char::is_ascii_digit)
    })
}

/// Every figure's labels, as the browser laid them out: none in exponent form, none
/// overlapping another, none outside its chart. Returns the number of labels checked.
fn check_labels(figures: &BTreeMap<String, Figure>) -> usize {
    let mut checked = 0;
    for (id, f) in figures {
        let svg = f.svg.unwrap();
        let texts: Vec<&(Box, String)> =
            f.texts.iter().filter(|t| !t.1.trim().is_empty()).collect();
        for (i, (a, ta)) in texts.iter().enumerate() {
            assert!(!scientific(ta), "{id}: {ta:?} is in exponent form");
            assert!(
                a.inside(&svg),
                "{id}: {ta:?} {a:?} leaves the chart {svg:?}"
            );
            for (b, tb) in &texts[i + 1..] {
                assert!(!a.overlaps(b), "{id}: {ta:?} {a:?} overlaps {tb:?} {b:?}");
            }
            checked += 1;
        }
    }
    checked
}

#[test]
fn the_checks_can_fail() {
    assert!(scientific("1.016e4 µs") && scientific("2E-3") && scientific("x 1e+06"));
    assert!(!scientific("10.08 ms") && !scientific("P99.9 (11.65 ms)") && !scientific("time"));
    let a = Box {
        x: 0.0,
        y: 0.0,
        w: 10.0,
        h: 10.0,
    };
    assert!(a.overlaps(&Box { x: 9.0, ..a }) && !a.overlaps(&Box { x: 10.2, ..a }));
    assert!(!a.inside(&Box { w: 5.0, ..a }));
}

/// `html` with only the figure whose id is `keep` (none with `None`).
fn only_figure(html: &str, keep: Option<&str>) -> String {
    let mut out = String::new();
    let mut rest = html;
    while let Some(start) = rest.find("<figure") {
        let end = rest[start..].find("</figure>").unwrap() + start + "</figure>".len();
        out.push_str(&rest[..start]);
        let figure = &rest[start..end];
        if keep.is_some_and(|id| figure.starts_with(&format!("<figure id=\"{id}\""))) {
            out.push_str(figure);
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// The series of each panel of an SVG, read from its text: (colour, name) in the order
/// the panels' plot frames come.
fn panel_series(svg: &str) -> Vec<Vec<([u8; 3], String, String)>> {
    svg.split(r#"<rect class="plot""#)
        .skip(1)
        .map(|panel| {
            panel
                .split(r#"<g class="series""#)
                .skip(1)
                .map(|s| {
                    let at = s.find("stroke=\"#").unwrap() + 9;
                    let v = u32::from_str_radix(&s[at..at + 6], 16).unwrap();
                    let t = s.find("<title>").unwrap() + 7;
                    let name = s[t..t + s[t..].find('<').unwrap()].to_string();
                    // The drawn line itself: series drawn over one another share it.
                    let drawn = s.find("points=\"").map_or(String::new(), |p| {
                        let rest = &s[p + 8..];
                        rest[..rest.find('"').unwrap()].to_string()
                    });
                    ([(v >> 16) as u8, (v >> 8) as u8, v as u8], name, drawn)
                })
                .collect()
        })
        .collect()
}

/// Pixels within a small distance of `c` (anti-aliasing blends the edges) inside `b`
/// shrunk by 2 px (the frame's own line).
fn count_in(pixels: &[[u8; 3]], b: &Box, c: [u8; 3]) -> usize {
    let (x0, x1) = ((b.x + 2.0) as usize, (b.x + b.w - 2.0) as usize);
    let (y0, y1) = ((b.y + 2.0) as usize, (b.y + b.h - 2.0) as usize);
    (y0..y1)
        .flat_map(|y| (x0..x1).map(move |x| y * 1200 + x))
        .filter(|i| {
            pixels
                .get(*i)
                .is_some_and(|p| p.iter().zip(c).all(|(&a, b)| a.abs_diff(b) <= 24))
        })
        .count()
}

/// Every series of figure `id` shows at least `least` pixels of its colour inside its
/// own panel's plot frame, on a page holding that figure alone (a series the legend
/// marks as equal to another together with it); returns the counts.
fn every_series_shows(dir: &Path, html: &str, id: &str, least: usize) -> Vec<(String, usize)> {
    let page = dir.join(format!("{id}.html"));
    std::fs::write(&page, only_figure(html, Some(id))).unwrap();
    let figure = measure(&page).remove(id).unwrap();
    let svg = std::fs::read_to_string(dir.join(id)).unwrap();
    let panels = panel_series(&svg);
    assert_eq!(panels.len(), figure.plots.len(), "{id}");
    let bottom = figure.plots.iter().map(|p| p.y + p.h).fold(0.0, f64::max);
    let shot = screenshot(&page, bottom as u32 + 50);
    let mut out = Vec::new();
    // Series whose drawn lines are the same (passive_seq on passive_ts when the two
    // engines agree exactly; the legend says "(= passive_ts)") cannot be told apart by
    // pixels: they are held to the floor together, each one's colour counting.
    let mut held: Vec<(String, String, usize)> = Vec::new();
    for (series, plot) in panels.iter().zip(&figure.plots) {
        for (colour, name, drawn) in series {
            let n = count_in(&shot, plot, *colour);
            out.push((name.clone(), n));
            match held
                .iter_mut()
                .find(|(_, d, _)| !drawn.is_empty() && d == drawn)
            {
                Some(h) => {
                    h.0 = format!("{} + {name}", h.0);
                    h.2 += n;
                }
                None => held.push((name.clone(), drawn.clone(), n)),
            }
        }
    }
    for (name, _, n) in &held {
        assert!(*n >= least, "{id}: {name} shows {n} pixels: {out:?}");
    }
    out
}

/// One compare run in the default lab (10 ms round trip, 10 ms between
/// transactions), shared by the tests that look at it.
fn compare_run() -> &'static Path {
    static RUN: OnceLock<PathBuf> = OnceLock::new();
    RUN.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        let o = Command::new(bin())
            .args(["compare", "-l", "3s", "-q", "--out"])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        dir
    })
}

/// The compare report's charts in the browser. Witnesses: the browser's pixels (every
/// layer's colour inside its panel's plot frame, in the CDF, the percentile plot and
/// the time series; the page without its figures has none) and its layout (the
/// anatomy's bars: every part at P50 at least 3 px tall on the parts panel, and the
/// whole bar at P99 taller than at P50, one scale for all, and no P99.9 bar, which a
/// few hundred transactions cannot resolve). The report is the committed compare run
/// (docs/results/compare) rendered by this build: fixed data, so what is judged is the
/// drawing. A live run's data depend on the machine: under a CPU hog every layer rode
/// the emulator's lateness, and tcp_rr's median, truly equal to udp_rr's and the
/// passive layers' there, showed 13 pixels between them.
#[test]
fn a_compare_report_shows_every_layer_apart_in_headless_chromium() {
    let _busy = common::serial::busy();
    if !have_chromium("a_compare_report_shows_every_layer_apart_in_headless_chromium") {
        return;
    }
    let rendered = tempfile::tempdir().unwrap();
    let dir = rendered.path().join("compare");
    let o = Command::new(bin())
        .arg("report")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/results/compare"))
        .arg("--out")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report = dir.join("report.html");
    let html = std::fs::read_to_string(&report).unwrap();
    // Self-contained: nothing to fetch, no script.
    assert!(!html.contains("src=\"http") && !html.contains("href=\"http"));
    assert!(!html.contains("<script"));
    let work = tempfile::tempdir().unwrap();
    for f in ["cdf.svg", "percentiles.svg", "timeline.svg"] {
        std::fs::copy(dir.join(f), work.path().join(f)).unwrap();
    }
    // Every layer in the percentile plot, apart: a series hidden under others would
    // show a handful of pixels at most (its curve is ~400 px long, 2 px wide; one
    // drawn exactly over another keeps the gaps in its pattern, ~150 pixels).
    let p = every_series_shows(work.path(), &html, "percentiles.svg", 60);
    assert!(p.len() >= 7, "{p:?}");
    every_series_shows(work.path(), &html, "cdf.svg", 40);
    // The time series of a 3 s run are short, and where layers' medians meet they
    // cross. Hidden, a series would show a handful of pixels.
    every_series_shows(work.path(), &html, "timeline.svg", 20);
    // The control: the same page without its figures has (almost) none of the palette.
    let bare = work.path().join("bare.html");
    std::fs::write(&bare, only_figure(&html, None)).unwrap();
    let shot = screenshot(&bare, 2400);
    let page = Box {
        x: 0.0,
        y: 0.0,
        w: 1200.0,
        h: 2400.0,
    };
    let none: usize = rttlab::report::svg::COLOURS
        .iter()
        .filter(|c| **c != "#000000")
        .map(|c| {
            let v = u32::from_str_radix(&c[1..], 16).unwrap();
            count_in(&shot, &page, [(v >> 16) as u8, (v >> 8) as u8, v as u8])
        })
        .sum();
    assert!(none < 50, "without charts: {none} pixels of the palette");
    // The anatomy, as laid out.
    let figures = measure(&report);
    let anatomy = &figures["anatomy.svg"];
    let parts: Vec<_> = anatomy
        .bars
        .iter()
        .filter(|b| b.0 == "part" && b.2 == "P50")
        .collect();
    assert_eq!(parts.len(), 5, "{:?}", anatomy.bars);
    for (_, part, _, b) in &parts {
        assert!(b.h >= 3.0, "{part} at P50 is {} px tall", b.h);
    }
    let whole = |g: &str| -> f64 {
        let seg = anatomy.bars.iter().filter(|b| b.0 == "segment" && b.2 == g);
        let top = seg.clone().map(|b| b.3.y).fold(f64::INFINITY, f64::min);
        let foot = seg.map(|b| b.3.y + b.3.h).fold(0.0, f64::max);
        foot - top
    };
    // A 3 s run's few hundred transactions resolve P99 but not P99.9, whose bar
    // would be the slowest transaction under its name: it is left out.
    assert!(
        whole("P99") > whole("P50"),
        "P50 {} px, P99 {} px",
        whole("P50"),
        whole("P99")
    );
    assert!(
        anatomy.bars.iter().all(|b| b.2 != "P99.9"),
        "a P99.9 bar of a few hundred transactions"
    );
}

/// The compare report's labels as the browser laid them out (its layout): none in
/// exponent form, none overlapping another, none outside its chart.
#[test]
fn a_compare_reports_labels_keep_apart_in_headless_chromium() {
    // Pixels and layout, not times; its compare run is checked for leftovers only by
    // compare's own tests, which hold the machine.
    let _busy = common::serial::busy();
    if !privileged("a_compare_reports_labels_keep_apart_in_headless_chromium") {
        return;
    }
    let figures = measure(&compare_run().join("report.html"));
    assert_eq!(figures.len(), 4, "{:?}", figures.keys());
    assert!(check_labels(&figures) > 150);
}

/// Every experiment's charts, re-rendered from the recorded runs in docs/results (no
/// privilege needed), as the browser lays them out (its layout): no label in exponent
/// form, none overlapping another, none outside its chart.
#[test]
fn every_experiments_labels_keep_apart_in_headless_chromium() {
    // Pixels and layout, not times; its compare run is checked for leftovers only by
    // compare's own tests, which hold the machine.
    let _busy = common::serial::busy();
    if !have_chromium("every_experiments_labels_keep_apart_in_headless_chromium") {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/results");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("run.json").exists())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 5, "{dirs:?}");
    let work = tempfile::tempdir().unwrap();
    for d in dirs {
        let out = work.path().join(d.file_name().unwrap());
        let o = Command::new(bin())
            .arg("report")
            .arg(&d)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let figures = measure(&out.join("report.html"));
        assert!(!figures.is_empty(), "{}", d.display());
        let n = check_labels(&figures);
        assert!(n > 10 * figures.len(), "{}: {n} labels", d.display());
    }
}
