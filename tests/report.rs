//! Reports render in a real browser: headless Chromium (Debian's `chromium`) opens a
//! results directory's report.html from disk, offline, and takes a screenshot. The
//! witness is the pixels the browser drew: the charts' lines must be on the screenshot
//! in the palette's colours, and the same page with its charts taken out must not
//! have them.

mod common;

use common::{bin, privileged};
use std::path::Path;
use std::process::Command;

/// The first two colours of the charts' palette (Okabe–Ito blue and vermillion).
const BLUE: [u8; 3] = [0x00, 0x72, 0xB2];
const VERMILLION: [u8; 3] = [0xD5, 0x5E, 0x00];

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
    let shot = screenshot(&report, 1600);
    let (blue, red) = (count(&shot, BLUE), count(&shot, VERMILLION));
    assert!(blue > 300 && red > 300, "blue {blue}, vermillion {red}");
    // The control: the same page without its figures has (almost) none of them.
    let start = html.find("<figure").unwrap();
    let end = html.rfind("</figure>").unwrap() + "</figure>".len();
    let bare = dir.path().join("bare.html");
    std::fs::write(&bare, format!("{}{}", &html[..start], &html[end..])).unwrap();
    let shot = screenshot(&bare, 1600);
    let (b, r) = (count(&shot, BLUE), count(&shot, VERMILLION));
    assert!(b < 50 && r < 50, "without charts: blue {b}, vermillion {r}");
}
