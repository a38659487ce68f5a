//! Reports render in a real browser: headless Chromium (Debian's `chromium`) opens a
//! results directory's report.html from disk, offline, and takes a screenshot. The
//! witness is the pixels the browser drew: the charts' lines must be on the screenshot
//! in the palette's colours, and the same page with its charts taken out must not
//! have them. Curves of layers that agree lie on top of each other (tcp_rr under
//! udp_rr and passive on a quiet run), so one colour's count says little; the legend
//! gives every series a swatch of its own, and the curves together cover the plot.

mod common;

use common::{bin, privileged};
use std::path::Path;
use std::process::Command;

/// The charts' palette as RGB, without its black, which text shares.
fn palette() -> Vec<[u8; 3]> {
    rttlab::report::svg::COLOURS
        .iter()
        .filter(|c| **c != "#000000")
        .map(|c| {
            let v = u32::from_str_radix(&c[1..], 16).unwrap();
            [(v >> 16) as u8, (v >> 8) as u8, v as u8]
        })
        .collect()
}

/// A legend swatch is 48 pixels of its colour at this window size.
const SWATCH: usize = 40;

/// Chromium's screenshot of `html`, 1200 px wide, as RGB pixels.
fn screenshot(html: &Path, height: u32) -> Vec<[u8; 3]> {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("shot.png");
    let o = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
        ])
        .arg(format!(
            "--user-data-dir={}",
            dir.path().join("profile").display()
        ))
        .arg(format!("--window-size=1200,{height}"))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", html.display()))
        .output()
        .expect("chromium (apt-get install chromium) must be installed for this test");
    assert!(
        png.exists(),
        "chromium wrote no screenshot: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let decoder = png::Decoder::new(std::fs::File::open(&png).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let step = info.color_type.samples();
    buf[..info.buffer_size()]
        .chunks(step)
        .map(|p| [p[0], p[1], p[2]])
        .collect()
}

/// Pixels within a small distance of `c` (anti-aliasing blends the edges).
fn count(pixels: &[[u8; 3]], c: [u8; 3]) -> usize {
    pixels
        .iter()
        .filter(|p| p.iter().zip(c).all(|(&a, b)| a.abs_diff(b) <= 24))
        .count()
}

#[test]
fn a_compare_report_shows_its_charts_in_headless_chromium() {
    if !privileged("a_compare_report_shows_its_charts_in_headless_chromium") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(bin())
        .args([
            "compare",
            "--lab-rtt",
            "2ms",
            "-w",
            "2ms",
            "-l",
            "2s",
            "--out",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report = dir.path().join("report.html");
    let html = std::fs::read_to_string(&report).unwrap();
    // Self-contained: nothing to fetch.
    assert!(!html.contains("src=\"http") && !html.contains("href=\"http"));
    // The whole page renders; the CDF alone, each series in its colour: icmp, tcp_rr,
    // udp_rr, both tcp_info ends and passive ts.
    screenshot(&report, 1600);
    let page = dir.path().join("cdf.html");
    std::fs::write(&page, only_figure(&html, Some("cdf.svg"))).unwrap();
    let shot = screenshot(&page, 1600);
    let counts: Vec<usize> = palette().iter().map(|&c| count(&shot, c)).collect();
    assert!(
        counts[..6].iter().all(|&n| n >= SWATCH),
        "a series without its colour: {counts:?}"
    );
    // The swatches are ~330 pixels; the curves, drawn over one another, cover at
    // the least one 2-pixel column of the plot's 344-pixel height (a quiet run with
    // the layers apart draws ~4500 in all).
    let total: usize = counts.iter().sum();
    assert!(total > 800, "the curves drew {total} pixels: {counts:?}");
    // The control: the same page without its figures has (almost) none of them.
    let bare = dir.path().join("bare.html");
    std::fs::write(&bare, only_figure(&html, None)).unwrap();
    let shot = screenshot(&bare, 1600);
    let bare: usize = palette().iter().map(|&c| count(&shot, c)).sum();
    assert!(bare < 50, "without charts: {bare} pixels of the palette");

    // The anatomy alone: a stacked bar per percentile with every component's colour,
    // each more than its legend swatch (240 pixels) shows: in every one of the four
    // bars, even a component of a few µs under a 4 ms round trip is drawn 4 pixels tall
    // (~230 pixels a bar).
    let page = dir.path().join("anatomy.html");
    std::fs::write(&page, only_figure(&html, Some("anatomy.svg"))).unwrap();
    let shot = screenshot(&page, 2400);
    let counts: Vec<usize> = palette()[..5].iter().map(|&c| count(&shot, c)).collect();
    assert!(
        counts.iter().all(|&n| n >= 240 + 500),
        "a component without its bars: {counts:?}"
    );
    // The time series alone: every layer in the legend in its colour, and the lines
    // across the 450-pixel plot (layers that agree, such as passive ts and seq, hide
    // one another, so the lines are counted together: the legend alone is ~500 pixels,
    // the lines of a quiet 2 s run 3 000–7 000).
    let page = dir.path().join("timeline.html");
    std::fs::write(&page, only_figure(&html, Some("timeline.svg"))).unwrap();
    let shot = screenshot(&page, 2400);
    let counts: Vec<usize> = palette()[..6].iter().map(|&c| count(&shot, c)).collect();
    assert!(
        counts.iter().all(|&n| n >= SWATCH),
        "a layer missing over time: {counts:?}"
    );
    let total: usize = counts.iter().sum();
    assert!(
        total >= 6 * 300,
        "the lines over time drew {total} pixels: {counts:?}"
    );
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
