//! Output of `rttlab passive`: sample lines in pping's formats or JSON, the per-flow
//! summary, the sampled metric's periods, and the counters.

use super::table::{one_decimal, percentile_cell, write_aligned, Table};
use crate::passive::in_kernel::KernelCounters;
use crate::passive::sampler::{Period, BOUNDS_MS};
use crate::passive::summary::{FlowRtt, Interval, Row, Total};
use crate::passive::{aggregate, Counters, Method, Place, Sample};
use crate::results::schema;
use crate::stats::{LatencyHistogram, LogLinear};
use serde::Serialize;
use std::io::{self, Write};

/// pping's way of printing a duration in seconds: 3 significant digits with an SI
/// prefix (`fmtTimeDiff` in pping.cpp): " 152us", "1.52ms", " 152ms", "2.01s". The
/// digits are those of C's `%.Nf` (Rust's formatting rounds the exact binary value
/// the same way).
///
/// A `Display` value, so a sample line writes it without a `String` of its own.
#[derive(Debug, Clone, Copy)]
pub struct PpingDuration(pub f64);

impl std::fmt::Display for PpingDuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut dt = self.0;
        let prefix = if dt < 1e-3 {
            dt *= 1e6;
            "u"
        } else if dt < 1.0 {
            dt *= 1e3;
            "m"
        } else {
            ""
        };
        if dt < 10.0 {
            write!(f, "{dt:.2}{prefix}s")
        } else if dt < 100.0 {
            write!(f, "{dt:.1}{prefix}s")
        } else {
            write!(f, " {dt:.0}{prefix}s")
        }
    }
}

/// Nanoseconds as microseconds with three decimals, the digits `{:.3}` gives for
/// `ns as f64 / 1e3` (below 2^50 ns, 13 days, the quotient is below 2^41 and its
/// double lies within 2^-12 of `ns / 1000`, well inside half the last digit), from
/// integers: float formatting takes its slow exact path on values like these.
#[derive(Debug, Clone, Copy)]
pub struct Micros(pub u64);

impl std::fmt::Display for Micros {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0 >= 1 << 50 {
            return write!(f, "{:.3}", self.0 as f64 / 1e3);
        }
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}

/// The wall-clock time of day of `ts_ns` in the local time zone, as pping prints it.
pub struct ClockCache {
    sec: i64,
    text: String,
}

impl Default for ClockCache {
    fn default() -> Self {
        Self {
            sec: i64::MIN,
            text: String::new(),
        }
    }
}

impl ClockCache {
    fn hms(&mut self, ts_ns: u64) -> &str {
        let sec = (ts_ns / 1_000_000_000) as i64;
        if sec != self.sec {
            self.sec = sec;
            // SAFETY: localtime_r writes into the tm we own; time_t from our value.
            let tm = unsafe {
                let t: libc::time_t = sec as libc::time_t;
                let mut tm: libc::tm = std::mem::zeroed();
                libc::localtime_r(&t, &mut tm);
                tm
            };
            self.text = format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec);
        }
        &self.text
    }
}

/// How sample lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineFormat {
    /// pping's default: `HH:MM:SS RTT MINRTT FLOW`.
    Pping,
    /// pping -m: `EPOCH.USEC RTT_S MIN_S FLOW` (pping's byte columns are not kept).
    Machine,
    /// One JSON object per line.
    Json,
}

/// Writes sample lines. A method column is added when both methods run, and a
/// `local` column marks samples answered by the capture host itself.
pub struct LineWriter<W: Write> {
    out: W,
    /// One line, made here and handed to `out` whole: `out` (a shared, buffered
    /// stdout) is borrowed once a line, not once a formatting piece.
    line: String,
    format: LineFormat,
    both: bool,
    clock: ClockCache,
}

impl<W: Write> LineWriter<W> {
    /// Lines in `format` to `out`; `both`: both methods run, so each line names its own.
    pub fn new(out: W, format: LineFormat, both: bool) -> Self {
        Self {
            out,
            line: String::with_capacity(256),
            format,
            both,
            clock: ClockCache::default(),
        }
    }

    /// Write one sample.
    ///
    /// # Errors
    /// The writer's.
    pub fn write(&mut self, s: &Sample) -> io::Result<()> {
        self.line.clear();
        // Formatting into a String cannot fail.
        let _ = self.format_line(s);
        self.out.write_all(self.line.as_bytes())
    }

    /// `s`'s line, newline included, into `self.line`.
    fn format_line(&mut self, s: &Sample) -> std::fmt::Result {
        use std::fmt::Write as _;
        match self.format {
            LineFormat::Json => {
                writeln!(
                    self.line,
                    "{{\"schema\":\"{}\",\"ts_ns\":{},\"rtt_us\":{},\"min_us\":{},\"method\":\"{}\",\"host\":\"{}\",\"peer\":\"{}\",\"place\":\"{}\"}}",
                    schema::PASSIVE_SAMPLE,
                    s.ts_ns,
                    Micros(s.rtt_ns),
                    Micros(s.min_ns),
                    s.method.name(),
                    s.host.socket_addr(),
                    s.peer.socket_addr(),
                    place_name(s.place),
                )?;
                return Ok(());
            }
            LineFormat::Pping => {
                let (rtt, min) = match &s.pping {
                    Some(p) => (p.rtt_s, p.min_s),
                    None => (s.rtt_ns as f64 / 1e9, s.min_ns as f64 / 1e9),
                };
                let hms = self.clock.hms(s.ts_ns);
                write!(
                    self.line,
                    "{} {} {} {}+{}",
                    hms,
                    PpingDuration(rtt),
                    PpingDuration(min),
                    s.host,
                    s.peer
                )?;
            }
            LineFormat::Machine => match &s.pping {
                // pping -m: "%d.%06d %.6f %.6f %.0f %.0f %.0f FLOW", the time as
                // int64(capTm + offTm) and int((capTm - floor(capTm)) * 1e6).
                Some(p) => {
                    let [f, d, b] = p.bytes.unwrap_or_default();
                    write!(
                        self.line,
                        "{}.{:06} {:.6} {:.6} {f} {d} {b} {}+{}",
                        (p.cap_s + p.origin_s as f64) as i64,
                        ((p.cap_s - p.cap_s.floor()) * 1e6) as i32,
                        p.rtt_s,
                        p.min_s,
                        s.host,
                        s.peer
                    )?;
                }
                // The seq engine's samples, which pping does not make: the same
                // columns, without pping's byte counts.
                None => {
                    write!(
                        self.line,
                        "{}.{:06} {:.6} {:.6} - - - {}+{}",
                        s.ts_ns / 1_000_000_000,
                        s.ts_ns % 1_000_000_000 / 1000,
                        s.rtt_ns as f64 / 1e9,
                        s.min_ns as f64 / 1e9,
                        s.host,
                        s.peer
                    )?;
                }
            },
        }
        if self.both {
            write!(self.line, " {}", s.method.name())?;
        }
        if s.place == Place::LocalHost {
            self.line.push_str(" local");
        }
        self.line.push('\n');
        Ok(())
    }

    /// Flush what was written.
    ///
    /// # Errors
    /// The writer's.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// A place as tables and JSON name it: `network` or `local_host`.
pub fn place_name(p: Place) -> &'static str {
    match p {
        Place::Network => "network",
        Place::LocalHost => "local_host",
    }
}

fn f1(v: f64) -> String {
    one_decimal(Some(v))
}

/// One finished interval of `--summary-interval`, as a table: a heading with the
/// interval (capture time, seconds since the epoch) and one row per flow direction and
/// method that had samples in it.
///
/// # Errors
/// The writer's.
pub fn interval(out: &mut impl std::fmt::Write, iv: &Interval) -> std::fmt::Result {
    writeln!(
        out,
        "Interval {:.3}–{:.3} s: {} flow direction(s)",
        iv.start_ns as f64 / 1e9,
        iv.end_ns as f64 / 1e9,
        iv.rows.len()
    )?;
    write_aligned(
        out,
        &[
            "HOST", "PEER", "METHOD", "PLACE", "SAMPLES", "MIN_us", "P50_us", "P90_us", "P99_us",
            "MAX_us",
        ],
        || iv.rows.iter().map(rtt_cells),
    )
}

/// The cells of a flow direction's RTT columns, shared by `--summary` and
/// `--summary-interval`: HOST PEER METHOD PLACE SAMPLES MIN P50 P90 P99 MAX.
fn rtt_cells(r: &FlowRtt) -> [String; 10] {
    [
        r.host.clone(),
        r.peer.clone(),
        r.method.name().into(),
        place_name(r.place).into(),
        r.samples.to_string(),
        f1(r.min_us),
        f1(r.p50_us),
        percentile_cell(r.p90_us, 0.9, r.samples, one_decimal),
        percentile_cell(r.p99_us, 0.99, r.samples, one_decimal),
        f1(r.max_us),
    ]
}

/// One `--aggregate` interval: a title line, then a row per prefix, method and place.
/// `engine` says where the histograms were kept (`bpf`: in the kernel).
pub fn aggregate_interval(
    out: &mut impl std::fmt::Write,
    iv: &aggregate::Interval,
    bounds: &[u64],
    engine: &str,
) -> std::fmt::Result {
    writeln!(
        out,
        "Interval {:.3}–{:.3} s: {} prefix(es), aggregated {}",
        iv.start_ns as f64 / 1e9,
        iv.end_ns as f64 / 1e9,
        iv.rows.len(),
        if engine == "bpf" {
            "in the kernel"
        } else {
            "by rttlab"
        }
    )?;
    let us = |ns: u64| f1(ns as f64 / 1e3);
    write_aligned(
        out,
        &[
            "PREFIX", "METHOD", "PLACE", "SAMPLES", "MIN_us", "MEAN_us", "P50_us", "P90_us",
            "P99_us", "MAX_us",
        ],
        || {
            iv.rows.iter().map(|(k, h)| {
                [
                    k.prefix_text(),
                    k.method.name().into(),
                    place_name(k.place).into(),
                    h.count.to_string(),
                    us(h.min_ns),
                    f1(h.mean_ns() / 1e3),
                    us(h.quantile(bounds, 0.5)),
                    percentile_cell(resolved(h, bounds, 0.9), 0.9, h.count, one_decimal),
                    percentile_cell(resolved(h, bounds, 0.99), 0.99, h.count, one_decimal),
                    us(h.max_ns),
                ]
            })
        },
    )
}

/// An aggregate's quantile `q`, µs, where its count resolves it (`stats::resolves`).
fn resolved(h: &aggregate::Hist, bounds: &[u64], q: f64) -> Option<f64> {
    crate::stats::resolves(q, h.count).then(|| h.quantile(bounds, q) as f64 / 1e3)
}

/// One `--aggregate` interval as JSON lines, one per prefix, method and place.
pub fn aggregate_interval_json(iv: &aggregate::Interval, bounds: &[u64], engine: &str) -> String {
    #[derive(Serialize)]
    struct Line<'a> {
        interval_start_ns: u64,
        interval_end_ns: u64,
        prefix: String,
        method: &'static str,
        place: &'static str,
        samples: u64,
        min_us: f64,
        mean_us: f64,
        max_us: f64,
        percentiles_us: Percentiles,
        engine: &'a str,
    }
    iv.rows
        .iter()
        .map(|(k, h)| {
            let us = |ns: u64| ns as f64 / 1e3;
            let line = Line {
                interval_start_ns: iv.start_ns,
                interval_end_ns: iv.end_ns,
                prefix: k.prefix_text(),
                method: k.method.name(),
                place: place_name(k.place),
                samples: h.count,
                min_us: us(h.min_ns),
                mean_us: h.mean_ns() / 1e3,
                max_us: us(h.max_ns),
                percentiles_us: Percentiles {
                    p50: Some(us(h.quantile(bounds, 0.5))),
                    p90: resolved(h, bounds, 0.9),
                    p99: resolved(h, bounds, 0.99),
                },
                engine,
            };
            schema::line(schema::PASSIVE_AGGREGATE, &line).unwrap_or_default() + "\n"
        })
        .collect()
}

/// The in-kernel engine's own counters, one line: where it ran, what it dropped for
/// lack of room and what its bounded state approximated (nothing shown is zero).
pub fn kernel_counters(k: &KernelCounters, place: &str) -> String {
    let mut s = format!("in-kernel engine ({place})");
    for (name, n) in [
        (
            "packets of flows not tracked (flow map full: --max-flows)",
            k.flows_full,
        ),
        (
            "TSvals or segments not timed (pending map full: --max-pending)",
            k.pending_full,
        ),
        (
            "samples not aggregated (aggregate map full)",
            k.aggregates_full,
        ),
        ("samples or flows lost (ring buffer full)", k.events_lost),
        (
            "times the per-flow state approximated the queues (fewer samples)",
            k.approximated,
        ),
        ("unreadable records", k.bad_records),
        (
            "frames the kernel would not replay (shorter than their IP header)",
            k.unreplayable,
        ),
    ] {
        if n > 0 {
            s.push_str(&format!(", {n} {name}"));
        }
    }
    s
}

/// P50, P90 and P99 as one JSON object (`crate::results::schema`'s convention); null
/// where the samples cannot resolve one (P90 needs 10, P99 100).
#[derive(Serialize)]
struct Percentiles {
    p50: Option<f64>,
    p90: Option<f64>,
    p99: Option<f64>,
}

/// A flow direction's RTT statistics in JSON (`FlowRtt` with its percentiles as an
/// object).
#[derive(Serialize)]
struct FlowRttJson<'a> {
    host: &'a str,
    peer: &'a str,
    method: &'static str,
    place: &'static str,
    samples: u64,
    min_us: f64,
    mean_us: f64,
    max_us: f64,
    percentiles_us: Percentiles,
}

impl<'a> From<&'a FlowRtt> for FlowRttJson<'a> {
    fn from(r: &'a FlowRtt) -> Self {
        Self {
            host: &r.host,
            peer: &r.peer,
            method: r.method.name(),
            place: place_name(r.place),
            samples: r.samples,
            min_us: r.min_us,
            mean_us: r.mean_us,
            max_us: r.max_us,
            percentiles_us: Percentiles {
                p50: Some(r.p50_us),
                p90: r.p90_us,
                p99: r.p99_us,
            },
        }
    }
}

/// One finished interval as JSON lines, one per row, each with its interval.
pub fn interval_json(iv: &Interval) -> String {
    #[derive(Serialize)]
    struct Line<'a> {
        interval_start_ns: u64,
        interval_end_ns: u64,
        #[serde(flatten)]
        rtt: FlowRttJson<'a>,
    }
    iv.rows
        .iter()
        .map(|r| {
            let line = Line {
                interval_start_ns: iv.start_ns,
                interval_end_ns: iv.end_ns,
                rtt: r.into(),
            };
            schema::line(schema::PASSIVE_INTERVAL, &line).unwrap_or_default() + "\n"
        })
        .collect()
}

/// The per-flow summary and the totals as one JSON line.
///
/// # Errors
/// The writer's.
pub fn summary_json(out: &mut impl Write, rows: &[Row], totals: &[Total]) -> io::Result<()> {
    #[derive(Serialize)]
    struct Flow<'a> {
        #[serde(flatten)]
        rtt: FlowRttJson<'a>,
        retransmissions: u64,
        spurious_retransmissions: u64,
        out_of_order: u64,
    }
    #[derive(Serialize)]
    struct TotalJson {
        method: &'static str,
        place: &'static str,
        samples: u64,
        min_us: Option<f64>,
        max_us: Option<f64>,
        percentiles_us: Option<Percentiles>,
    }
    #[derive(Serialize)]
    struct Doc<'a> {
        flows: Vec<Flow<'a>>,
        totals: Vec<TotalJson>,
    }
    let doc = Doc {
        flows: rows
            .iter()
            .map(|r| Flow {
                rtt: (&r.rtt).into(),
                retransmissions: r.retransmissions,
                spurious_retransmissions: r.spurious_retransmissions,
                out_of_order: r.out_of_order,
            })
            .collect(),
        totals: totals
            .iter()
            .map(|t| TotalJson {
                method: t.method.name(),
                place: place_name(t.place),
                samples: t.samples,
                min_us: t.min_us,
                max_us: t.max_us,
                percentiles_us: t.p50_us.map(|p50| Percentiles {
                    p50: Some(p50),
                    p90: t.p90_us,
                    p99: t.p99_us,
                }),
            })
            .collect(),
    };
    serde_json::to_writer(
        &mut *out,
        &schema::Tagged {
            schema: schema::PASSIVE_SUMMARY,
            body: &doc,
        },
    )?;
    out.write_all(b"\n")
}

/// One method's histogram at one place as a JSON line: netperf's log-linear buckets
/// (ten a decade, 1 µs to 100 s) that hold samples, each with its bounds.
pub fn histogram_json(method: Method, place: Place, h: &LatencyHistogram) -> String {
    #[derive(Serialize)]
    struct Bucket {
        from_us: f64,
        to_us: f64,
        count: u64,
    }
    #[derive(Serialize)]
    struct Doc {
        method: &'static str,
        place: &'static str,
        samples: u64,
        buckets: Vec<Bucket>,
        above_100s: u64,
    }
    let ll = LogLinear::from_histogram(h);
    let buckets = ll
        .rows
        .iter()
        .flat_map(|row| {
            row.counts
                .iter()
                .enumerate()
                .map(move |(i, &count)| Bucket {
                    from_us: (i as u64 * row.unit_ns) as f64 / 1e3,
                    to_us: ((i as u64 + 1) * row.unit_ns) as f64 / 1e3,
                    count,
                })
        })
        .filter(|b| b.count > 0)
        .collect();
    let doc = Doc {
        method: method.name(),
        place: place_name(place),
        samples: ll.total,
        buckets,
        above_100s: ll.above_100s,
    };
    schema::line(schema::PASSIVE_HISTOGRAM, &doc).unwrap_or_default()
}

/// The sampled metric's periods as one JSON line.
pub fn sampler_json(periods: &[Period], one_in: u32) -> String {
    #[derive(Serialize)]
    struct Doc<'a> {
        one_in: u32,
        /// `buckets` of each period: one per bound, then one above them all.
        bucket_upper_bounds_ms: &'static [u64],
        periods: &'a [Period],
    }
    let doc = Doc {
        one_in,
        bucket_upper_bounds_ms: &BOUNDS_MS,
        periods,
    };
    schema::line(schema::PASSIVE_SAMPLER, &doc).unwrap_or_default()
}

/// The per-flow summary and the totals, as tables, written row by row (a capture of
/// many short flows has tens of thousands of rows).
pub fn summary(out: &mut impl std::fmt::Write, rows: &[Row], totals: &[Total]) -> std::fmt::Result {
    out.write_str(
        "Per flow and direction: the host's answers to the peer, timed at the capture point\n",
    )?;
    let cells = |r: &Row| {
        let [host, peer, method, place, samples, min, p50, p90, p99, max] = rtt_cells(&r.rtt);
        [
            host,
            peer,
            method,
            place,
            samples,
            min,
            p50,
            p90,
            p99,
            max,
            r.retransmissions.to_string(),
            r.spurious_retransmissions.to_string(),
            r.out_of_order.to_string(),
        ]
    };
    write_aligned(
        out,
        &[
            "HOST", "PEER", "METHOD", "PLACE", "SAMPLES", "MIN_us", "P50_us", "P90_us", "P99_us",
            "MAX_us", "RETRANS", "SPURIOUS", "OOO",
        ],
        || rows.iter().map(cells),
    )?;
    let mut t = Table::new([
        "METHOD", "PLACE", "SAMPLES", "MIN_us", "P50_us", "P90_us", "P99_us", "MAX_us",
    ]);
    for x in totals {
        t.row([
            x.method.name().into(),
            place_name(x.place).into(),
            x.samples.to_string(),
            super::table::one_decimal(x.min_us),
            one_decimal(x.p50_us),
            percentile_cell(x.p90_us, 0.9, x.samples, one_decimal),
            percentile_cell(x.p99_us, 0.99, x.samples, one_decimal),
            super::table::one_decimal(x.max_us),
        ]);
    }
    out.write_str("\nAll flows (network: capture point → remote host → back; local_host: the capture host's own time to answer)\n")?;
    out.write_str(&t.render())
}

/// The sampled metric, one row per period.
pub fn sampler(periods: &[Period], one_in: u32) -> String {
    let mut t = Table::new([
        "PERIOD_START",
        "SAMPLED_PKTS",
        "SAMPLES",
        "METRIC_P50_ms",
        "EXACT_P50_ms",
        "METRIC_P90_ms",
        "METRIC_P99_ms",
    ]);
    let ms = |v: Option<f64>| v.map_or_else(|| "-".into(), |x| format!("{x:.3}"));
    for p in periods {
        t.row([
            format!(
                "{}.{:03}",
                p.start_ns / 1_000_000_000,
                p.start_ns % 1_000_000_000 / 1_000_000
            ),
            p.sampled_packets.to_string(),
            p.samples.to_string(),
            ms(p.median_ms),
            ms(p.exact_median_ms),
            ms(p.p90_ms),
            ms(p.p99_ms),
        ]);
    }
    format!(
        "Sampled flow metric (1 in {one_in} packets, seq/ACK without Karn, buckets 0-1-2-4… ms; METRIC_* interpolated in the bucket)\n{}",
        t.render()
    )
}

/// One line of counters for stderr (pping's summary line, and what was skipped).
pub fn counters(c: &Counters, methods: &[Method]) -> String {
    let mut s = format!(
        "{} packets, {} TCP, {} flows",
        c.packets, c.tcp, c.flows.created
    );
    for m in methods {
        let n = match m {
            Method::Ts => c.samples_ts,
            Method::Seq => c.samples_seq,
        };
        s.push_str(&format!(", {n} {} samples", m.name()));
    }
    for (name, n) in [
        ("not TCP", c.not_tcp),
        ("filtered out", c.filtered),
        ("without TCP timestamps", c.no_timestamps),
        ("with unusable timestamps", c.unusable_timestamps),
        ("one-way (reverse not seen yet)", c.one_way),
        ("not timed for --rate-limit", c.rate_limited),
        ("flows evicted by the flow cap", c.flows.evicted_full),
    ] {
        if n > 0 && (name != "without TCP timestamps" || methods.contains(&Method::Ts)) {
            s.push_str(&format!(", {n} {name}"));
        }
    }
    for (reason, n) in &c.skipped {
        s.push_str(&format!(
            ", {n} skipped ({})",
            serde_json::to_value(reason)
                .ok()
                .and_then(|v| v.as_str().map(|x| x.replace('_', " ")))
                .unwrap_or_default()
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passive::PpingSample;

    /// Witness: the standard library's float formatting, `{:.3}` of `ns / 1e3`, on
    /// edges and a million values of every magnitude below 2^53 ns (a fixed xorshift).
    #[test]
    fn microseconds_from_integers_are_the_float_formattings_digits() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut values = vec![
            0,
            1,
            499,
            500,
            501,
            999,
            1000,
            1_000_500,
            (1 << 50) - 1,
            1 << 50,
        ];
        for _ in 0..1_000_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Every magnitude, not only the large ones a uniform draw gives.
            values.push(x >> (11 + x % 53));
        }
        for ns in values {
            assert_eq!(
                Micros(ns).to_string(),
                format!("{:.3}", ns as f64 / 1e3),
                "{ns}"
            );
        }
    }

    #[test]
    fn durations_print_as_pping_prints_them() {
        assert_eq!(PpingDuration(152e-6).to_string(), " 152us");
        assert_eq!(PpingDuration(1.52e-3).to_string(), "1.52ms");
        assert_eq!(PpingDuration(15.2e-3).to_string(), "15.2ms");
        assert_eq!(PpingDuration(0.152).to_string(), " 152ms");
        assert_eq!(PpingDuration(2.01).to_string(), "2.01s");
        assert_eq!(PpingDuration(9e-6).to_string(), "9.00us");
        // pping's doubles: a difference of capture times a hair under 10 µs or 1 ms
        // prints in the lower unit's widest form.
        let (a, b) = (
            PpingSample::cap_time(5_000_010_000, 0),
            PpingSample::cap_time(5_000_000_000, 0),
        );
        assert_eq!(
            PpingDuration(a - b).to_string(),
            format!("{:.2}us", (a - b) * 1e6)
        );
        assert_eq!(PpingDuration(0.000_999_999_999).to_string(), " 1000us");
    }
}
