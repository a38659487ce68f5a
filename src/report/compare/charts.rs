//! `rttlab compare`'s charts. Most layers agree within a fraction of a millisecond,
//! while one or two sit far off by design (the server's srtt times the client's think
//! time too, the sampled metric's buckets are milliseconds wide): those get a panel of
//! their own, so that the scale of the rest shows how they differ.

use crate::passive::sampler::{bucket_holding, Period, BOUNDS_MS};
use crate::report::svg::palette::REFERENCE;
use crate::report::svg::{self, Anatomy, LineChart, Scale, Series, Unit};
use crate::results::compare::{CompareResult, Layer};
use crate::stats::LatencyHistogram;

/// Stacked panels are this tall, px.
const PANEL: f64 = 330.0;
/// A gap between consecutive layers' medians at least this ratio sets the layers above
/// it apart.
const APART: f64 = 1.3;
/// The sampled metric's name in the charts.
const SAMPLED: &str = "sampled metric (buckets)";

/// A measured layer with samples: its palette index (its row in the table), name and
/// histogram.
struct Measured<'a> {
    colour: usize,
    name: &'a str,
    h: &'a LatencyHistogram,
}

impl Measured<'_> {
    fn q(&self, q: f64) -> f64 {
        self.h.quantile_ns(q).unwrap_or(0) as f64 / 1e3
    }
}

/// The layers with samples, split in two at the widest gap between their medians
/// when it is a ratio of at least [`APART`]: those that agree, and those set apart.
fn split(r: &CompareResult) -> (Vec<Measured<'_>>, Vec<Measured<'_>>) {
    let all: Vec<Measured> = r
        .layers
        .iter()
        .enumerate()
        .filter_map(|(colour, l)| {
            let h = l.histogram.as_ref().filter(|h| h.count() > 0)?;
            Some(Measured {
                colour,
                name: &l.name,
                h,
            })
        })
        .collect();
    let mut medians: Vec<f64> = all.iter().map(|m| m.q(0.5)).collect();
    medians.sort_by(f64::total_cmp);
    // The widest gap: (ratio, the median just above it).
    let gap = medians
        .windows(2)
        .map(|w| (w[1] / w[0].max(1e-9), w[1]))
        .fold((1.0, f64::INFINITY), |a, b| if b.0 > a.0 { b } else { a });
    if gap.0 < APART {
        return (all, Vec::new());
    }
    all.into_iter().partition(|m| m.q(0.5) < gap.1)
}

/// The lab's configured round trip, µs, where the run built the lab (the ground truth
/// the layers are held against), as a reference line from `a` to `b`.
fn configured(r: &CompareResult, a: (f64, f64), b: (f64, f64)) -> Option<Series> {
    r.settings.server.is_none().then(|| Series {
        name: format!(
            "lab RTT as configured ({})",
            svg::text::duration(r.settings.lab_rtt.as_secs_f64())
        ),
        points: vec![a, b],
        secondary: true,
        colour: Some(REFERENCE),
        intervals: Vec::new(),
        markers: false,
    })
}

/// The lab's configured round trip, µs.
fn lab_rtt_us(r: &CompareResult) -> f64 {
    r.settings.lab_rtt.as_secs_f64() * 1e6
}

/// The sampled metric's busiest period and its palette index.
fn sampled(r: &CompareResult) -> Option<(&Period, usize)> {
    let p = r
        .sampler
        .iter()
        .filter(|p| p.samples > 0)
        .max_by_key(|p| p.samples)?;
    let colour = r
        .layers
        .iter()
        .position(|l| l.name == "sampled_metric")
        .unwrap_or(r.layers.len());
    Some((p, colour))
}

/// The apart panel's title: what is in it.
fn apart_title(apart: &[Measured], sampled: bool) -> String {
    let mut names: Vec<&str> = apart.iter().map(|m| m.name).collect();
    if sampled {
        names.push(SAMPLED);
    }
    format!("set apart: {}", names.join(", "))
}

/// A range around `lo`–`hi` (µs): linear and padded 5 %, or log (a factor of 1.2)
/// when it spans a decade or more.
fn x_fit(lo: f64, hi: f64) -> (Scale, Option<(f64, f64)>) {
    if !(lo.is_finite() && hi > lo) {
        return (Scale::Linear, None);
    }
    if hi / lo.max(1e-9) >= 10.0 {
        (Scale::Log, Some((lo / 1.2, hi * 1.2)))
    } else {
        let pad = (hi - lo) * 0.05;
        (Scale::Linear, Some(((lo - pad).max(0.0), hi + pad)))
    }
}

fn cdf_series(m: &Measured) -> Series {
    let total = m.h.count() as f64;
    let mut seen = 0u64;
    let points =
        m.h.hdr()
            .iter_recorded()
            .map(|v| {
                seen += v.count_since_last_iteration();
                (v.value_iterated_to() as f64 / 1e3, seen as f64 / total)
            })
            .collect();
    Series::line(m.name, points, m.colour)
}

/// The sampled metric's distribution as its buckets give it: steps, each bucket's
/// samples counted at its upper bound (where in the bucket they fell the metric does
/// not know), from the first bucket with samples.
fn sampled_cdf(p: &Period, colour: usize) -> Series {
    let total = p.samples.max(1) as f64;
    let first = p.buckets.iter().position(|c| *c > 0).unwrap_or(0);
    let mut seen = 0u64;
    let mut points = vec![(
        if first == 0 {
            0.0
        } else {
            BOUNDS_MS[first - 1] as f64 * 1e3
        },
        0.0,
    )];
    for (&b, &c) in BOUNDS_MS.iter().zip(&p.buckets).skip(first) {
        let x = b as f64 * 1e3;
        points.push((x, seen as f64 / total));
        seen += c;
        points.push((x, seen as f64 / total));
        if seen >= p.samples {
            break;
        }
    }
    Series::line(SAMPLED, points, colour)
}

fn cdf_panel(title: String, series: Vec<Series>, range: (f64, f64)) -> LineChart {
    let (x_scale, x_range) = x_fit(range.0, range.1);
    LineChart {
        title,
        x_label: "RTT".into(),
        y_label: "fraction of samples ≤ RTT".into(),
        x_scale,
        y_scale: Scale::Linear,
        x_unit: Unit::Micros,
        y_unit: Unit::Plain,
        x_range,
        y_range: Some((0.0, 1.0)),
        series,
    }
}

/// Each layer's samples as a cumulative distribution over RTT: the layers that agree
/// from their fastest sample to their P99 (the tail is the percentile chart's), those
/// set apart and the sampled metric's buckets on a panel of their own.
pub fn cdf_chart(r: &CompareResult) -> String {
    let (main, apart) = split(r);
    let span = |ms: &[Measured], q: f64| {
        ms.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), m| {
            (
                lo.min(m.h.min_ns().unwrap_or(0) as f64 / 1e3),
                hi.max(m.q(q)),
            )
        })
    };
    let rtt = lab_rtt_us(r);
    let mut panels = vec![cdf_panel(
        if apart.is_empty() && sampled(r).is_none() {
            "every layer".into()
        } else {
            "the layers that agree".into()
        },
        main.iter()
            .map(cdf_series)
            .chain(configured(r, (rtt, 0.0), (rtt, 1.0)))
            .collect(),
        {
            let (lo, hi) = span(&main, 0.99);
            if r.settings.server.is_none() {
                (lo.min(rtt), hi.max(rtt))
            } else {
                (lo, hi)
            }
        },
    )];
    if !apart.is_empty() || sampled(r).is_some() {
        let mut series: Vec<Series> = apart.iter().map(cdf_series).collect();
        let (mut lo, mut hi) = span(&apart, 0.999);
        if let Some((p, colour)) = sampled(r) {
            let s = sampled_cdf(p, colour);
            lo = s.points.iter().map(|p| p.0).fold(lo, f64::min);
            hi = s.points.iter().map(|p| p.0).fold(hi, f64::max);
            series.push(s);
        }
        panels.push(cdf_panel(
            apart_title(&apart, sampled(r).is_some()),
            series,
            (lo, hi),
        ));
    }
    svg::stack(
        "RTT at every layer: cumulative distribution",
        &panels,
        PANEL,
    )
}

/// Quantile points from P0 to the largest sample, at even steps of −log10(1 − p) (20
/// a decade of the tail), as far into the tail as the samples reach (1 − 1/n).
fn tail_points(n: u64, q: impl Fn(f64) -> Option<f64>) -> Vec<(f64, f64)> {
    let reach = (n.max(1) as f64).log10();
    let steps = (reach * 20.0).floor() as usize;
    let mut out: Vec<(f64, f64)> = (0..=steps)
        .filter_map(|i| {
            let p = 1.0 - 10f64.powf(-(i as f64) / 20.0);
            Some((p, q(p)?))
        })
        .collect();
    if n > 1 {
        if let Some(v) = q(1.0) {
            out.push((1.0 - 1.0 / n as f64, v));
        }
    }
    out
}

fn percentile_panel(title: String, series: Vec<Series>, nines: f64) -> LineChart {
    LineChart {
        title,
        x_label: "percentile".into(),
        y_label: "RTT".into(),
        x_scale: Scale::Tail,
        y_scale: Scale::Linear,
        x_unit: Unit::Plain,
        y_unit: Unit::Micros,
        x_range: Some((0.0, 1.0 - 10f64.powf(-nines))),
        y_range: None,
        series,
    }
}

/// Every layer's RTT by percentile, HdrHistogram's way: percentiles at −log10(1 − p),
/// so 90 %, 99 %, 99.9 % are equally spaced and the tail is as wide as the body; each
/// curve goes as far as its samples reach; the lab's configured RTT across. The layers
/// set apart (and the sampled metric, the steps of its buckets) on a panel of their
/// own.
pub fn percentile_chart(r: &CompareResult) -> Option<String> {
    let (main, apart) = split(r);
    if main.is_empty() {
        return None;
    }
    let most = main
        .iter()
        .chain(&apart)
        .map(|m| m.h.count())
        .max()
        .unwrap_or(1);
    let nines = (most as f64).log10().ceil().clamp(2.0, 5.0);
    let curve = |m: &Measured| {
        let points = tail_points(m.h.count(), |p| m.h.quantile_ns(p).map(|v| v as f64 / 1e3));
        Series::line(m.name, points, m.colour)
    };
    let rtt = lab_rtt_us(r);
    let mut panels = vec![percentile_panel(
        if apart.is_empty() && sampled(r).is_none() {
            "every layer".into()
        } else {
            "the layers that agree".into()
        },
        main.iter()
            .map(curve)
            .chain(configured(r, (0.0, rtt), (1.0 - 10f64.powf(-nines), rtt)))
            .collect(),
        nines,
    )];
    if !apart.is_empty() || sampled(r).is_some() {
        let mut series: Vec<Series> = apart.iter().map(curve).collect();
        if let Some((p, colour)) = sampled(r) {
            // Steps: each percentile at the upper bound of the bucket holding it.
            let points = tail_points(p.samples, |q| {
                bucket_holding(&p.buckets, q).map(|(lo, hi)| hi.unwrap_or(lo) * 1e3)
            });
            series.push(Series::line(SAMPLED, points, colour));
        }
        panels.push(percentile_panel(
            apart_title(&apart, sampled(r).is_some()),
            series,
            nines,
        ));
    }
    Some(svg::stack(
        "RTT at every layer by percentile",
        &panels,
        PANEL,
    ))
}

/// tcp_rr's anatomy at each percentile, every other layer's value at that percentile
/// across its whole bar: what each layer measures of the transaction.
pub fn anatomy_chart(r: &CompareResult) -> Option<String> {
    let a = r
        .anatomy
        .as_ref()
        .filter(|a| !a.at_percentiles.is_empty())?;
    let parts: Vec<String> = a.at_percentiles[0]
        .parts_us
        .parts()
        .map(|(n, _)| n.to_string())
        .to_vec();
    let groups = a
        .at_percentiles
        .iter()
        .map(|c| {
            (
                format!("P{}", c.percentile),
                c.parts_us.parts().iter().map(|(_, v)| **v).collect(),
            )
        })
        .collect();
    let at = |l: &Layer, p: f64| -> Option<f64> {
        match &l.histogram {
            Some(h) if h.count() > 0 => h.quantile_ns(p / 100.0).map(|v| v as f64 / 1e3),
            _ => None,
        }
    };
    let markers = [
        "tcp_rr",
        "udp_rr",
        "icmp",
        "passive_seq",
        "passive_ts",
        "tcp_info_client",
    ]
    .iter()
    .filter_map(|name| r.layers.iter().enumerate().find(|(_, l)| l.name == *name))
    .filter(|(_, l)| l.samples > 0)
    .map(|(colour, l)| {
        (
            l.name.clone(),
            colour,
            a.at_percentiles
                .iter()
                .map(|c| at(l, c.percentile))
                .collect(),
        )
    })
    .chain(r.settings.server.is_none().then(|| {
        (
            format!(
                "lab RTT as configured ({})",
                svg::text::duration(r.settings.lab_rtt.as_secs_f64())
            ),
            REFERENCE,
            vec![Some(lab_rtt_us(r)); a.at_percentiles.len()],
        )
    }))
    .collect();
    Some(
        Anatomy {
            title: "tcp_rr taken apart at each percentile, every layer across it".into(),
            base: parts.iter().position(|p| p == "network").unwrap_or(0),
            parts,
            groups,
            markers,
        }
        .render(),
    )
}

fn time_panel(title: String, series: Vec<Series>) -> LineChart {
    LineChart {
        title,
        x_label: "time since the start".into(),
        y_label: "RTT".into(),
        x_scale: Scale::Linear,
        y_scale: Scale::Linear,
        x_unit: Unit::Seconds,
        y_unit: Unit::Micros,
        x_range: None,
        y_range: None,
        series,
    }
}

/// Every layer's median and largest round trip per time bin on one time axis: the
/// medians of the layers that agree on a panel, their maxima on the next (a spike
/// would flatten the medians), the layers set apart on a third; each layer in its
/// colour of the other charts, so a spike lines up across the layers that saw it. A
/// bin of a few samples resolves no P99 (`stats::resolves`), so the upper line is each
/// bin's maximum, named so; results written before bins kept it draw their P99.
pub fn timeline_chart(r: &CompareResult) -> Option<String> {
    let tl = r.timeline.as_ref().filter(|t| !t.layers.is_empty())?;
    let (_, apart) = split(r);
    let is_apart = |n: &str| apart.iter().any(|m| m.name == n);
    let has_max = tl
        .layers
        .iter()
        .flat_map(|l| &l.points)
        .any(|p| p.max_us.is_some());
    let high = if has_max { "max" } else { "P99" };
    let series = |name: &str, top: bool, secondary: bool| -> Option<Series> {
        let l = tl.layers.iter().find(|l| l.name == name)?;
        let colour = r.layers.iter().position(|x| x.name == l.name);
        Some(Series {
            name: format!("{} {}", l.name, if top { high } else { "P50" }),
            points: l
                .points
                .iter()
                .filter_map(|p| match top {
                    false => Some((p.t_s, p.p50_us)),
                    true => p.max_us.or(p.p99_us).map(|v| (p.t_s, v)),
                })
                .collect(),
            secondary,
            colour,
            intervals: Vec::new(),
            markers: false,
        })
    };
    let names: Vec<&str> = tl.layers.iter().map(|l| l.name.as_str()).collect();
    let main: Vec<&str> = names.iter().copied().filter(|n| !is_apart(n)).collect();
    let off: Vec<&str> = names.iter().copied().filter(|n| is_apart(n)).collect();
    let mut panels = Vec::new();
    if !main.is_empty() {
        let (t0, t1) = tl
            .layers
            .iter()
            .flat_map(|l| &l.points)
            .fold((f64::INFINITY, 0.0f64), |(a, b), p| {
                (a.min(p.t_s), b.max(p.t_s))
            });
        let rtt = lab_rtt_us(r);
        panels.push(time_panel(
            "median per bin".into(),
            main.iter()
                .filter_map(|n| series(n, false, false))
                .chain(configured(r, (t0, rtt), (t1, rtt)))
                .collect(),
        ));
        panels.push(time_panel(
            format!("{high} per bin"),
            main.iter().filter_map(|n| series(n, true, false)).collect(),
        ));
    }
    if !off.is_empty() {
        panels.push(time_panel(
            format!("set apart: {} (P50, and {high} thin)", off.join(", ")),
            off.iter()
                .flat_map(|n| [series(n, false, false), series(n, true, true)])
                .flatten()
                .collect(),
        ));
    }
    Some(svg::stack(
        &format!(
            "Every layer over time: median and {} per {}",
            if has_max { "largest" } else { "P99" },
            svg::text::duration(tl.bin_s)
        ),
        &panels,
        PANEL,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A comparison recorded in a lab (tests/corpus), as a run that built its lab.
    fn lab_run() -> CompareResult {
        let mut r: CompareResult =
            serde_json::from_str(include_str!("../../../tests/corpus/compare-lab.json")).unwrap();
        r.settings.server = None;
        for l in &mut r.layers {
            let mut h = LatencyHistogram::new();
            if let Some(p50) = l.percentiles_us.p50.filter(|_| l.name != "sampled_metric") {
                for _ in 0..l.samples {
                    h.record_ns((p50 * 1e3) as u64);
                }
                l.histogram = Some(h);
            }
        }
        r
    }

    /// Witness: the run's own settings (the lab's 10 ms) and the sampled metric's
    /// recorded buckets (302 samples in 2–4 ms, 1 in 4–8 ms, 162 in 8–16 ms, 1 above).
    #[test]
    fn the_configured_rtt_is_drawn_and_the_metric_in_the_steps_of_its_buckets() {
        let r = lab_run();
        let line = "lab RTT as configured (10 ms)";
        for (name, svg) in [
            ("cdf", cdf_chart(&r)),
            ("percentiles", percentile_chart(&r).unwrap()),
            ("timeline", timeline_chart(&r).unwrap()),
            ("anatomy", anatomy_chart(&r).unwrap()),
        ] {
            assert!(svg.contains(line), "{name} lacks {line}");
        }
        let (p, colour) = sampled(&r).unwrap();
        let steps = sampled_cdf(p, colour).points;
        // Each bucket's samples at its upper bound: a vertical step there, flat between.
        let at = |ms: f64| -> Vec<f64> {
            steps
                .iter()
                .filter(|(x, _)| (*x - ms * 1e3).abs() < 1e-6)
                .map(|(_, y)| *y)
                .collect()
        };
        let n = p.samples as f64;
        assert_eq!(at(4.0), vec![0.0, 302.0 / n]);
        assert_eq!(at(16.0), vec![303.0 / n, 465.0 / n]);
        // Without a lab (a real server), no line claims a configured RTT.
        let mut remote = lab_run();
        remote.settings.server = Some("[2001:2::2]:12866".parse().unwrap());
        assert!(!cdf_chart(&remote).contains("as configured"));
    }

    /// The anatomy's lines across the bars are each layer's colour of the other charts,
    /// not black. Witness: the palette's colour of each layer's row.
    #[test]
    fn the_anatomy_marks_each_layer_in_its_colour() {
        let r = lab_run();
        let svg = anatomy_chart(&r).unwrap();
        for name in ["tcp_rr", "icmp"] {
            let row = r.layers.iter().position(|l| l.name == name).unwrap();
            let colour = svg::palette::Style::of(row, false).colour;
            let marker = svg
                .split(r#"<line class="marker" "#)
                .skip(1)
                .find(|m| m.contains(&format!(": {name} ")))
                .unwrap_or_else(|| panic!("no {name} marker"));
            assert!(
                marker.contains(&format!(r#"stroke="{colour}""#)),
                "{name}: {marker}"
            );
        }
    }
}
