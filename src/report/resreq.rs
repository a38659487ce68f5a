//! `experiment resreq-interval`'s tables (the seed's layout), charts and report.

use super::html::Page;
use super::svg::{LineChart, Scale, Series, Unit};
use super::table::Table;
use crate::results::resreq::Point;
use crate::results::{read_run, write_file, ResultsError};
use std::path::Path;

fn f3(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.3}"))
}

/// Seed 000's netperf table (µs), then the TCP srtt of both ends and each end's
/// sampled metric (ms).
pub fn tables(points: &[Point]) -> String {
    let mut t = Table::new([
        "WAIT_ms",
        "STREAMS",
        "TRANS",
        "MIN_LATENCY",
        "MEAN_LATENCY",
        "P50_LATENCY",
        "P90_LATENCY",
        "P99_LATENCY",
    ]);
    for p in points {
        t.row([
            format!("{}", p.wait_ms),
            p.streams.to_string(),
            p.transactions.to_string(),
            super::table::one_decimal(p.min_us),
            super::table::one_decimal(p.mean_us),
            super::table::one_decimal(p.p50_us),
            super::table::one_decimal(p.p90_us),
            super::table::one_decimal(p.p99_us),
        ]);
    }
    let mut k = Table::new([
        "WAIT_ms",
        "SRTT_CLIENT_ms",
        "SRTT_SERVER_ms",
        "METRIC_CLIENT_ms",
        "EXACT_CLIENT_ms",
        "METRIC_SERVER_ms",
        "EXACT_SERVER_ms",
        "RETRANS",
        "NOTE",
    ]);
    for p in points {
        let m = |x: &Option<crate::passive::sampler::Period>| {
            (
                f3(x.as_ref().and_then(|p| p.median_ms)),
                f3(x.as_ref().and_then(|p| p.exact_median_ms)),
            )
        };
        let (mc, ec) = m(&p.client_metric);
        let (ms, es) = m(&p.server_metric);
        k.row([
            format!("{}", p.wait_ms),
            f3(p.client_srtt_us.map(|v| v / 1e3)),
            f3(p.server_srtt_us.map(|v| v / 1e3)),
            mc,
            ec,
            ms,
            es,
            p.retransmissions.to_string(),
            p.error.clone().unwrap_or_default(),
        ]);
    }
    let cells = super::trials::group(
        points,
        |p| format!("{}ms", p.wait_ms),
        |p| vec![p.p50_us, p.p99_us, p.client_srtt_us, p.server_srtt_us],
    );
    let across = super::trials::across(
        "By wait, across trials",
        "WAIT",
        &["P50_us", "P99_us", "SRTT_CLIENT_us", "SRTT_SERVER_us"],
        &cells,
    );
    let text = format!(
        "TCP_RR latency (µs) by the wait between a response and the next request (Jones, A Brief Look at Round Trip Time, its table)\n{}\n\
         TCP's srtt on each end (median of samples every 10 ms) and the sampled metric of each end's VM\n\
         (median interpolated in the 0-1-2-4… ms buckets, next to the exact median of the same samples)\n{}",
        t.render(),
        k.render()
    );
    text + &across
}

fn series(
    name: &str,
    points: &[Point],
    f: impl Fn(&Point) -> Option<f64>,
    secondary: bool,
    colour: usize,
) -> Series {
    let raw: Vec<(f64, f64)> = points
        .iter()
        .filter_map(|p| Some((p.wait_ms, f(p)?)))
        .collect();
    Series::over_trials(name, &raw, secondary, colour)
}

/// (file, caption, SVG) of each chart: the seed's two charts and the rr percentiles.
pub fn charts(points: &[Point]) -> Vec<(String, String, String)> {
    let chart = |title: &str, y: &str, series: Vec<Series>| LineChart {
        title: title.into(),
        x_label: "wait between response and next request".into(),
        y_label: y.into(),
        x_scale: Scale::Linear,
        y_scale: Scale::Linear,
        x_unit: Unit::Millis,
        y_unit: Unit::Millis,
        x_range: None,
        y_range: None,
        series,
    };
    let metric = |x: &Option<crate::passive::sampler::Period>, exact: bool| {
        x.as_ref().and_then(|p| {
            if exact {
                p.exact_median_ms
            } else {
                p.median_ms
            }
        })
    };
    vec![
        (
            "tcp-rtt.svg".into(),
            "TCP computed RTT (srtt) of each end against the wait".into(),
            chart(
                "TCP computed RTT vs response/request interval",
                "srtt, median",
                vec![
                    series(
                        "client (netperf side)",
                        points,
                        |p| p.client_srtt_us.map(|v| v / 1e3),
                        false,
                        0,
                    ),
                    series(
                        "server (netserver side)",
                        points,
                        |p| p.server_srtt_us.map(|v| v / 1e3),
                        false,
                        1,
                    ),
                ],
            )
            .render(),
        ),
        (
            "metric.svg".into(),
            "the sampled cloud metric of each end's VM, and the exact median it hides".into(),
            chart(
                "Sampled metric RTT vs response/request interval",
                "median RTT",
                vec![
                    series(
                        "client VM metric",
                        points,
                        |p| metric(&p.client_metric, false),
                        false,
                        0,
                    ),
                    series(
                        "client VM exact",
                        points,
                        |p| metric(&p.client_metric, true),
                        true,
                        0,
                    ),
                    series(
                        "server VM metric",
                        points,
                        |p| metric(&p.server_metric, false),
                        false,
                        1,
                    ),
                    series(
                        "server VM exact",
                        points,
                        |p| metric(&p.server_metric, true),
                        true,
                        1,
                    ),
                ],
            )
            .render(),
        ),
        (
            "rr-latency.svg".into(),
            "what the application saw: TCP_RR percentiles".into(),
            chart(
                "TCP_RR latency vs response/request interval",
                "latency",
                vec![
                    series("P50", points, |p| p.p50_us.map(|v| v / 1e3), false, 2),
                    series("P90", points, |p| p.p90_us.map(|v| v / 1e3), false, 3),
                    series("P99", points, |p| p.p99_us.map(|v| v / 1e3), false, 4),
                    series("mean", points, |p| p.mean_us.map(|v| v / 1e3), true, 6),
                ],
            )
            .render(),
        ),
    ]
}

/// The seed's findings next to ours, each from the points.
pub fn findings(all: &[Point]) -> Vec<String> {
    let (points, beyond): (Vec<Point>, Vec<Point>) = all
        .iter()
        .cloned()
        .partition(|p| p.wait_ms < BEYOND_ACK_TIMER_MS);
    let mut out = Vec::new();
    let first = points.first();
    let last = points.last();
    let client: Vec<f64> = points.iter().filter_map(|p| p.client_srtt_us).collect();
    if !client.is_empty() {
        out.push(format!(
            "The study: the netserver side's TCP RTT climbs with the wait until the 40 ms standalone-ACK timer, while the netperf side's stays at 0.1–0.2 ms. Here the client's srtt stays within {:.3}–{:.3} ms at every wait.",
            client.iter().copied().fold(f64::MAX, f64::min) / 1e3,
            client.iter().copied().fold(f64::MIN, f64::max) / 1e3
        ));
    }
    let peak = points
        .iter()
        .filter(|p| p.server_srtt_us.is_some())
        .max_by(|a, b| {
            a.server_srtt_us
                .unwrap_or(0.0)
                .total_cmp(&b.server_srtt_us.unwrap_or(0.0))
        });
    if let Some(p) = peak {
        let s = p.server_srtt_us.unwrap_or(0.0);
        out.push(format!(
            "The server's srtt peaks at {:.1} ms at a {} ms wait: the wait plus the network RTT, as the ACK of each response rides on the next request.",
            s / 1e3,
            p.wait_ms
        ));
        if let Some(after) = points
            .iter()
            .filter(|q| q.wait_ms > p.wait_ms)
            .filter_map(|q| Some((q.wait_ms, q.server_srtt_us?)))
            .find(|&(_, v)| v < s / 4.0)
        {
            out.push(format!(
                "At a {} ms wait it falls back to {:.2} ms: the client's delayed-ACK timer (TCP_DELACK_MIN, 40 ms; at HZ 250 it fires 36–40 ms after it is armed, on a jiffy boundary) wins the race with the next request, and on firing in ping-pong mode it takes the socket out of that mode (tcp_delack_timer_handler → inet_csk_exit_pingpong_mode); with requests then more than the ACK timeout after each response it never re-enters it (tcp_event_data_sent), so every response is ACKed at once. The study saw both kinds of ACK at a 40 ms wait.",
                after.0,
                after.1 / 1e3
            ));
        }
    }
    let metrics: Vec<f64> = points
        .iter()
        .filter_map(|p| p.client_metric.as_ref()?.median_ms)
        .collect();
    let exact: Vec<f64> = points
        .iter()
        .filter_map(|p| p.client_metric.as_ref()?.exact_median_ms)
        .collect();
    if !metrics.is_empty() && !exact.is_empty() {
        let (lo, hi) = metrics
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), &v| (l.min(v), h.max(v)));
        let (elo, ehi) = exact
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), &v| (l.min(v), h.max(v)));
        out.push(format!(
            "The study: the netperf VM's metric reads 0.5 ms while its TCP RTT is 0.1–0.2 ms, because the first bucket is 0–1 ms. Here: the client VM's metric reads {lo:.3}–{hi:.3} ms while the exact median of the same samples is {elo:.3}–{ehi:.3} ms."
        ));
    }
    if let (Some(a), Some(b)) = (first, last) {
        if let (Some(pa), Some(pb)) = (a.p50_us, b.p50_us) {
            out.push(format!(
                "Jones, A Brief Look at Round Trip Time: netperf's P50 rises only from 95 to 186 µs between no wait and 41 ms (the interval effect of Phanekham and Jones, What a trip!), nothing like the server's TCP RTT. Here: {pa:.0} → {pb:.0} µs from {} to {} ms.",
                a.wait_ms, b.wait_ms
            ));
        }
    }
    out.extend(beyond_findings(&beyond));
    out
}

/// Waits from here on are seed 000's second run, "beyond the standalone ACK timer".
const BEYOND_ACK_TIMER_MS: f64 = 100.0;

/// Seed 000's second run: TCP keeps the network's RTT (responses are ACKed at once),
/// while a sparse sampler matches a response with the next request's data.
fn beyond_findings(points: &[Point]) -> Vec<String> {
    let mut out = Vec::new();
    let srtt: Vec<f64> = points.iter().filter_map(|p| p.server_srtt_us).collect();
    if srtt.is_empty() {
        return out;
    }
    let ms = |v: Option<f64>| v.map_or_else(|| "-".into(), |x| format!("{x:.1}"));
    let by_wait: Vec<String> = points
        .iter()
        .map(|p| {
            let m = p.server_metric.as_ref();
            format!(
                "{} ms → {} ms (exact {} ms)",
                p.wait_ms,
                ms(m.and_then(|m| m.median_ms)),
                ms(m.and_then(|m| m.exact_median_ms))
            )
        })
        .collect();
    out.push(format!(
        "The study, beyond the standalone-ACK timer (waits 100 ms…5 s, two-segment requests, more streams as the wait grows): TCP's RTT stays at the network's, because every response is ACKed at once, while the netserver VM's sampled metric reads roughly the application's response time up through 1 s, as the sampler mostly misses the bare ACK and matches the response with the next request's data; near 3 s it changes, still above the network RTT. Here: the server's srtt stays within {:.2}–{:.2} ms; its sampled metric's median by wait: {}.",
        srtt.iter().copied().fold(f64::MAX, f64::min) / 1e3,
        srtt.iter().copied().fold(f64::MIN, f64::max) / 1e3,
        by_wait.join(", ")
    ));
    out
}

/// The report page.
pub fn html(
    run_json: &str,
    points: &[Point],
    tables_text: &str,
    charts: &[(String, String, String)],
) -> String {
    let mut p = Page::new("Res/Req interval: what TCP, a sampled metric and the application see");
    p.para("The experiment of Jones, \"A Brief Look at Round Trip Time\", run by `rttlab experiment resreq-interval` in the lab (two network namespaces through the built-in emulator instead of two cloud VMs; kernel and HZ as in the host facts below). TCP_RR with a wait between each response and the next request; TCP's srtt sampled on both ends through sock_diag every 10 ms; each end's interface captured and fed to the sampled-metric emulation watching that end.");
    p.para("Every number comes from trials.jsonl (one line per wait) and the wait-*.hist.csv files (the samples behind each median and percentile).");
    p.heading("Findings: the study's next to ours");
    for f in findings(points) {
        p.para(&f);
    }
    p.heading("Charts");
    for (name, caption, svg) in charts {
        p.chart(name, caption, svg);
    }
    p.heading("Tables").pre(tables_text).run_facts(run_json);
    p.render()
}

/// Write `tables.txt`, the charts and `report.html` from the points; returns the
/// tables' text.
///
/// # Errors
/// A file could not be written.
pub fn write(out: &Path, points: &[Point]) -> Result<String, ResultsError> {
    let mut points = points.to_vec();
    points.sort_by(|a, b| a.wait_ms.total_cmp(&b.wait_ms).then(a.trial.cmp(&b.trial)));
    let text = tables(&points);
    let charts = charts(&points);
    write_file(out, "tables.txt", &text)?;
    for (name, _, svg) in &charts {
        write_file(out, name, svg)?;
    }
    let (_, run) = read_run(out)?;
    write_file(out, "report.html", &html(&run, &points, &text, &charts))?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(wait_ms: f64, server_srtt_us: f64, metric_ms: f64) -> Point {
        serde_json::from_value(serde_json::json!({
            "wait_ms": wait_ms, "streams": 1, "transactions": 10,
            "min_us": null, "mean_us": null, "p50_us": 100.0, "p90_us": null, "p99_us": null,
            "client_srtt_us": 150.0, "server_srtt_us": server_srtt_us,
            "client_metric": null,
            "server_metric": {"start_ns": 0, "sampled_packets": 9, "samples": 3,
                "buckets": [], "median_ms": metric_ms, "p90_ms": null, "p99_ms": null,
                "exact_median_ms": metric_ms},
            "retransmissions": 0, "capture_drops": 0, "files": [], "error": null
        }))
        .unwrap()
    }

    #[test]
    fn waits_past_the_ack_timer_get_the_second_runs_finding_only() {
        // Arithmetic: the srtt range is the min and max of the points' medians.
        let long = [point(100.0, 300.0, 90.0), point(1000.0, 500.0, 950.0)];
        let f = findings(&long);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].contains("within 0.30–0.50 ms"), "{}", f[0]);
        assert!(f[0].contains("1000 ms → 950.0 ms"), "{}", f[0]);
        let short = [point(0.0, 300.0, 0.5), point(32.0, 32_000.0, 0.5)];
        let f = findings(&short);
        assert!(f.iter().any(|x| x.contains("peaks at 32.0 ms")), "{f:?}");
        assert!(
            !f.iter().any(|x| x.contains("beyond the standalone")),
            "{f:?}"
        );
    }
}
