//! The agent's metrics and their exposition, in the Prometheus protobuf format (the
//! only one that carries native histograms), OpenMetrics 1.0 and the Prometheus text
//! format 0.0.4, chosen by the scraper's `Accept` header as Prometheus servers
//! negotiate it (with `--enable-feature=native-histograms` they ask for protobuf
//! first, else OpenMetrics; curl and node_exporter's textfile collector read the
//! older text format).
//!
//! Cardinality is bounded by peers × layers: no port, connection or sequence number is
//! ever a label value.

pub use super::histogram::{RttHistogram, NATIVE_MAX_BUCKETS, NATIVE_SCHEMA};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, NativeHistogramConfig};
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A series' labels: `peer`, `layer`, then the peer's own labels from file_sd.
pub type Labels = Vec<(String, String)>;

/// The reasons of `rttlab_agent_http_refused_total`.
pub const HTTP_REFUSALS: [&str; 9] = [
    "displaced",
    "slow_reader",
    "busy",
    "body",
    "method",
    "unauthorized",
    "login_throttled",
    "rate_limit",
    "web_config",
];

/// Label names the agent sets itself; file_sd may not reuse them.
pub const OWN_LABELS: [&str; 2] = ["peer", "layer"];

/// The layers `rttlab_rtt_seconds` is measured at.
pub const LAYERS: [&str; 9] = [
    "icmp",
    "tcp_rr",
    "udp_rr",
    "tcp_crr",
    "tcp_connect",
    "srtt_client",
    "srtt_server",
    "passive_ts",
    "passive_seq",
];

/// The reasons of `rttlab_passive_dropped_total`: what the passive engine could not
/// keep for lack of room.
pub const PASSIVE_DROPS: [&str; 4] = [
    "flow_map_full",
    "pending_map_full",
    "aggregate_map_full",
    "ring_buffer_full",
];

/// Histogram bounds that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BucketsError {
    /// Not 0 < min < max, or no bucket per decade.
    #[error("buckets need 0 < min < max and at least one per decade (got {min:?}, {max:?}, {per_decade})")]
    Range {
        /// The lowest bound asked for.
        min: Duration,
        /// The highest.
        max: Duration,
        /// Buckets per power of ten.
        per_decade: u32,
    },
    /// More buckets than series a peer and layer may have.
    #[error("{0} buckets is too many (at most 100)")]
    TooMany(usize),
    /// Not `MIN:MAX:PER_DECADE`.
    #[error("{0:?}: give MIN:MAX:PER_DECADE, e.g. 10us:10s:3")]
    Syntax(String),
    /// A bound that is not a duration. humantime's reason is in the message, not a
    /// source: clap prints a value parser's error without its sources.
    #[error("{text:?} is not a duration: {why}")]
    Duration {
        /// The bound as given.
        text: String,
        /// humantime's reason.
        why: humantime::DurationError,
    },
    /// A count per decade that is not a number.
    #[error("{0:?} is not a number of buckets per decade")]
    PerDecade(String),
}

/// Log-spaced histogram bounds: `per_decade` per power of ten from `min` to `max`.
#[derive(Clone, Debug, PartialEq)]
pub struct Buckets(Arc<Vec<f64>>);

impl Buckets {
    /// # Errors
    /// Bounds not positive, `min` not below `max`, no bucket per decade, or more than
    /// 100 buckets (each is a series per peer and layer).
    pub fn log(min: Duration, max: Duration, per_decade: u32) -> Result<Self, BucketsError> {
        let (lo, hi) = (min.as_secs_f64(), max.as_secs_f64());
        if lo <= 0.0 || hi <= lo || per_decade == 0 {
            return Err(BucketsError::Range {
                min,
                max,
                per_decade,
            });
        }
        let decades = (hi / lo).log10();
        let n = (decades * f64::from(per_decade)).round() as usize + 1;
        if n > 100 {
            return Err(BucketsError::TooMany(n));
        }
        let step = decades / (n - 1).max(1) as f64;
        // Rounded to 6 significant digits: `le` values stay readable and stable.
        let v = (0..n)
            .map(|i| {
                let x = lo * 10f64.powf(step * i as f64);
                let mag = 10f64.powi(5 - x.log10().floor() as i32);
                (x * mag).round() / mag
            })
            .collect();
        Ok(Self(Arc::new(v)))
    }

    /// The upper bounds, ascending.
    pub fn bounds(&self) -> &[f64] {
        &self.0
    }
}

impl std::str::FromStr for Buckets {
    type Err = BucketsError;
    /// `MIN:MAX:PER_DECADE`, e.g. `10us:10s:3`.
    fn from_str(s: &str) -> Result<Self, BucketsError> {
        let parts: Vec<&str> = s.split(':').collect();
        let [min, max, per] = parts[..] else {
            return Err(BucketsError::Syntax(s.into()));
        };
        let d = |x: &str| {
            humantime::parse_duration(x).map_err(|why| BucketsError::Duration {
                text: x.into(),
                why,
            })
        };
        let per = per
            .parse()
            .map_err(|_| BucketsError::PerDecade(per.into()))?;
        Self::log(d(min)?, d(max)?, per)
    }
}

impl MetricConstructor<Histogram> for Buckets {
    /// Classic buckets for the text formats and scrapers without native histograms,
    /// and native ones in the protobuf exposition.
    fn new_metric(&self) -> Histogram {
        Histogram::new_classic_and_native(
            self.0.iter().copied(),
            NativeHistogramConfig::with_schema(NATIVE_SCHEMA).max_buckets(NATIVE_MAX_BUCKETS),
        )
    }
}

impl MetricConstructor<RttHistogram> for Buckets {
    /// An observed series (a kernel-fed one is made so by [`RttHistogram::set_kernel`]).
    fn new_metric(&self) -> RttHistogram {
        RttHistogram::observed(MetricConstructor::<Histogram>::new_metric(self))
    }
}

/// A gauge of seconds.
pub type Gauge64 = Gauge<f64, AtomicU64>;

/// Every metric the agent exports.
pub struct Metrics {
    registry: Registry,
    /// `rttlab_rtt_seconds`: one observation per probe, by peer and layer (see
    /// [`LAYERS`]), in the bounds of `--buckets`; the passive layers on the in-kernel
    /// engine are the kernel's histograms, read at each scrape.
    pub rtt: Family<Labels, RttHistogram, Buckets>,
    /// The classic bounds of `rtt` (`--buckets`).
    pub buckets: Buckets,
    /// `rttlab_passive_packets_total`: frames the passive engine looked at.
    pub passive_packets: Counter,
    /// `rttlab_passive_samples_total`: passive samples by layer, every host's (those
    /// not a peer's are counted, not kept).
    pub passive_samples: Family<Labels, Counter>,
    /// `rttlab_passive_dropped_total`: what the passive engine could not keep, by
    /// reason ([`PASSIVE_DROPS`]).
    pub passive_dropped: Family<Labels, Counter>,
    /// `rttlab_passive_rate_limited_total`: TSvals and segments not timed for the
    /// per-flow rate limit (`--passive-rate-limit`).
    pub passive_rate_limited: Counter,
    /// `rttlab_passive_engine_info`: 1, labelled with the engine (`bpf`, `ring`) and
    /// how it attached; absent without `--passive-iface`.
    pub passive_engine: Family<Labels, Gauge>,
    /// `rttlab_service_response_seconds`: each transaction of a watched service's
    /// response time, by side (`server`, `client`) and port (`--explain-port`,
    /// `--explain-to`), in the bounds of `--buckets`.
    pub service_response: Family<Labels, Histogram, Buckets>,
    /// `rttlab_service_part_seconds`: each part of those transactions, by side, port
    /// and part.
    pub service_part: Family<Labels, Histogram, Buckets>,
    /// `rttlab_service_retransmissions_total`: segments retransmitted during them, by
    /// side, port and cause (`rto`, `tlp`, `fast`).
    pub service_retransmissions: Family<Labels, Counter>,
    /// `rttlab_service_untimed_total`: what the service layers did not time, by reason
    /// ([`super::service::UNTIMED`]).
    pub service_untimed: Family<Labels, Counter>,
    /// `rttlab_probes_sent_total`: probe transactions started, by peer and layer.
    pub sent: Family<Labels, Counter>,
    /// `rttlab_probes_lost_total`: ICMP and UDP_RR probes unanswered within the timeout;
    /// TCP probes count in `timed_out` instead.
    pub lost: Family<Labels, Counter>,
    /// `rttlab_probes_timed_out_total`: TCP probes unanswered within the timeout (the
    /// connection is then opened anew).
    pub timed_out: Family<Labels, Counter>,
    /// `rttlab_probe_errors_total`: probes that failed, by `reason`: `resolve` (the
    /// peer's name did not resolve), `session` (refused, unreachable, rejected by the
    /// peer's server), `send`, `receive`.
    pub errors: Family<Labels, Counter>,
    /// `rttlab_tcp_retransmissions_total`: segments the kernel retransmitted on TCP probe
    /// connections, the growth of `tcp_info`'s `total_retrans` from probe to probe.
    pub retransmissions: Family<Labels, Counter>,
    /// `rttlab_tcp_srtt_seconds`: `tcpi_rtt` (TCP's smoothed RTT), in seconds, at the last
    /// sample; layers `srtt_client` (each TCP_RR probe) and `srtt_server` (each interval).
    pub srtt: Family<Labels, Gauge64>,
    /// `rttlab_tcp_min_rtt_seconds`: `tcpi_min_rtt` (TCP's windowed minimum RTT), in
    /// seconds, at the last sample; never set when the kernel does not report it.
    pub min_rtt: Family<Labels, Gauge64>,
    /// `rttlab_agent_peers`: how many peers are probed now, set at each change of peers.
    pub peers: Gauge,
    /// `rttlab_agent_probe_lag_seconds`: how late each probe started against its paced
    /// schedule, all peers and layers in one unlabelled histogram (the `rtt` bounds).
    pub lag: Histogram,
    /// `rttlab_agent_late_probes_total`: probes that started more than a tenth of the
    /// interval late, by peer and layer.
    pub late: Family<Labels, Counter>,
    /// `rttlab_agent_scrape_duration_seconds`: how long the previous [`Metrics::expose`]
    /// took.
    pub scrape_duration: Gauge64,
    /// `rttlab_agent_config_reloads_total`: reloads of the configuration and peers file, by
    /// label `result` (`success` or `failure`).
    pub reloads: Family<Labels, Counter>,
    /// `rttlab_agent_config_last_reload_successful`: 1 when the last reload succeeded (and
    /// at start), 0 after a failed one.
    pub reload_ok: Gauge,
    /// Connections and requests the metrics endpoint refused, by reason.
    pub http_refused: Family<Labels, Counter>,
    /// smokeping_prober's names for the ICMP layer (`--smokeping-names`).
    pub smokeping: Option<super::smokeping::Families>,
    /// Bytes of the last exposition.
    last_len: AtomicUsize,
}

impl Metrics {
    /// Register every metric.
    pub fn new(buckets: &Buckets) -> Self {
        let mut registry = Registry::default();
        let rtt = Family::new_with_constructor(buckets.clone());
        let lag = Histogram::new(buckets.bounds().iter().copied());
        let m = Self {
            rtt,
            buckets: buckets.clone(),
            passive_packets: Counter::default(),
            passive_samples: Family::default(),
            passive_dropped: Family::default(),
            passive_rate_limited: Counter::default(),
            passive_engine: Family::default(),
            service_response: Family::new_with_constructor(buckets.clone()),
            service_part: Family::new_with_constructor(buckets.clone()),
            service_retransmissions: Family::default(),
            service_untimed: Family::default(),
            sent: Family::default(),
            lost: Family::default(),
            timed_out: Family::default(),
            errors: Family::default(),
            retransmissions: Family::default(),
            srtt: Family::default(),
            min_rtt: Family::default(),
            peers: Gauge::default(),
            lag,
            late: Family::default(),
            scrape_duration: Gauge::default(),
            reloads: Family::default(),
            reload_ok: Gauge::default(),
            http_refused: Family::default(),
            smokeping: None,
            last_len: AtomicUsize::new(0),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register(
            "rttlab_rtt_seconds",
            "Round-trip time to a peer at one layer (icmp, tcp_rr, udp_rr, tcp_crr, tcp_connect: one probe transaction; srtt_client, srtt_server: TCP's smoothed RTT of the probe connection, sampled once a probe; passive_ts, passive_seq: from TCP timestamps and from data and its ACK on the wire)",
            m.rtt.clone(),
        );
        r.register(
            "rttlab_passive_packets",
            "Frames the passive engine (--passive-iface) looked at",
            m.passive_packets.clone(),
        );
        r.register(
            "rttlab_passive_samples",
            "Passive RTT samples by layer, of every host (only peers' are kept in rttlab_rtt_seconds)",
            m.passive_samples.clone(),
        );
        r.register(
            "rttlab_passive_dropped",
            "What the passive engine could not keep for lack of room: flow_map_full (packets of flows not tracked, --passive-max-flows), pending_map_full (TSvals and segments not timed, --passive-max-pending), aggregate_map_full (samples not aggregated), ring_buffer_full (samples lost on the way to the agent)",
            m.passive_dropped.clone(),
        );
        r.register(
            "rttlab_passive_rate_limited",
            "TSvals and segments the passive engine did not time, for --passive-rate-limit",
            m.passive_rate_limited.clone(),
        );
        r.register(
            "rttlab_passive_engine_info",
            "1, labelled with the passive engine (bpf: in the kernel; ring: frames copied to the agent) and how it attached (tcx, clsact, ring)",
            m.passive_engine.clone(),
        );
        r.register(
            "rttlab_service_response_seconds",
            "Response time of each transaction of a watched TCP service (--explain-port: this host the server, from the request's first segment in to the response's last write; --explain-to: this host the client, from the request's first write to the response's last read), from the kernel, by side and port",
            m.service_response.clone(),
        );
        r.register(
            "rttlab_service_part_seconds",
            "Each part of those transactions (server: arrival, wait, think, write, network; client: write, send, server, arrival, wait; as rttlab explain names them), by side, port and part",
            m.service_part.clone(),
        );
        r.register(
            "rttlab_service_retransmissions",
            "Segments retransmitted during a watched service's transactions, by side, port and cause (rto: after an RTO expiry; tlp: tail-loss probes; fast: fast retransmissions)",
            m.service_retransmissions.clone(),
        );
        r.register(
            "rttlab_service_untimed",
            "What the service layers did not time: ring_buffer_full (transactions lost on the way to the agent), table_full (segments of connections past --explain-max-connections), unanswered (requests whose connection ended first), kernel_events_skipped (a program already running on that CPU), malformed (records too short to read)",
            m.service_untimed.clone(),
        );
        r.register(
            "rttlab_probes_sent",
            "Probe transactions started",
            m.sent.clone(),
        );
        r.register(
            "rttlab_probes_lost",
            "ICMP and UDP probes whose reply never came within the timeout",
            m.lost.clone(),
        );
        r.register(
            "rttlab_probes_timed_out",
            "TCP probes unanswered within the timeout (the connection is then opened anew)",
            m.timed_out.clone(),
        );
        r.register(
            "rttlab_probe_errors",
            "Probes that failed, by reason: resolve (the peer's name did not resolve), session (refused, unreachable, rejected by the peer's server), send, receive; tcp_connect's: resolve, refused (a reset: nothing listens), unreachable (an ICMP unreachable, no route), send",
            m.errors.clone(),
        );
        r.register(
            "rttlab_tcp_retransmissions",
            "Segments the kernel retransmitted on probe connections (tcp_info total_retrans)",
            m.retransmissions.clone(),
        );
        r.register(
            "rttlab_tcp_srtt_seconds",
            "TCP's smoothed RTT of the probe connection at its last probe",
            m.srtt.clone(),
        );
        r.register(
            "rttlab_tcp_min_rtt_seconds",
            "TCP's windowed minimum RTT of the probe connection at its last probe",
            m.min_rtt.clone(),
        );
        r.register(
            "rttlab_agent_peers",
            "Peers this agent probes",
            m.peers.clone(),
        );
        r.register(
            "rttlab_agent_probe_lag_seconds",
            "How late probes started against their paced schedule (the probe loop's own delay)",
            m.lag.clone(),
        );
        r.register(
            "rttlab_agent_late_probes",
            "Probes that started more than a tenth of the interval late, per peer",
            m.late.clone(),
        );
        r.register(
            "rttlab_agent_scrape_duration_seconds",
            "Time the previous scrape took to encode",
            m.scrape_duration.clone(),
        );
        // Both results present at 0 from the start, so that increase() sees the
        // first failure.
        for result in ["success", "failure"] {
            let _ = m
                .reloads
                .get_or_create(&vec![("result".into(), result.into())]);
        }
        r.register(
            "rttlab_agent_config_reloads",
            "Reloads of the configuration and peers file, by result",
            m.reloads.clone(),
        );
        // Present at 0 from the start, so that rate() sees the first refusal.
        for reason in HTTP_REFUSALS {
            let _ = m
                .http_refused
                .get_or_create(&vec![("reason".into(), reason.into())]);
        }
        r.register(
            "rttlab_agent_http_refused",
            "Connections and requests the metrics endpoint refused: displaced (a connection closed for a newer one at the connection cap: one not answering, as a head left unfinished or a keep-alive between scrapes, or one whose client had left its answer unread for 250 ms), slow_reader (a client reading an exposition too slowly to finish it in 10 s, closed when more than four expositions were being sent), busy (a new connection closed: every one was answering), body, method, unauthorized (requests answered 413, 405, 401), rate_limit (answered 429 past the web config's rate_limit), web_config (a changed web config file that could not be used)",
            m.http_refused.clone(),
        );
        r.register(
            "rttlab_agent_config_last_reload_successful",
            "1 when the last reload of the configuration and peers file succeeded",
            m.reload_ok.clone(),
        );
        let build: Family<Labels, Gauge> = Family::default();
        build
            .get_or_create(&vec![
                ("version".into(), crate::build::VERSION.into()),
                ("revision".into(), crate::build::REVISION.into()),
                ("build_date".into(), crate::build::DATE.into()),
            ])
            .set(1);
        r.register(
            "rttlab_build_info",
            "1, labelled with the version, commit and build date of this agent",
            build,
        );
        r.register_collector(Box::new(super::process::ProcessCollector::default()));
        Self { registry, ..m }
    }

    /// These metrics with smokeping_prober's names for the ICMP layer too.
    #[must_use]
    pub fn with_smokeping_names(mut self) -> Self {
        let f = super::smokeping::Families::default();
        f.register(&mut self.registry);
        self.smokeping = Some(f);
        self
    }

    /// The exposition in `format`; the time it took is the next scrape's
    /// `rttlab_agent_scrape_duration_seconds`.
    pub fn expose(&self, format: Format) -> Vec<u8> {
        let t0 = std::time::Instant::now();
        let out = match format {
            // The registry holds nothing the protobuf encoder refuses (it refuses
            // only native-only histograms in the text formats).
            Format::Protobuf => {
                prometheus_client::encoding::prometheus_protobuf::encode_to_vec(&self.registry)
                    .unwrap_or_default()
            }
            Format::OpenMetrics | Format::Text => self.expose_text(format).into_bytes(),
        };
        self.last_len.store(out.len(), Ordering::Relaxed);
        self.scrape_duration.set(t0.elapsed().as_secs_f64());
        out
    }

    /// The exposition in one of the text formats.
    fn expose_text(&self, format: Format) -> String {
        // Sized by the last exposition: a 10 MB one grown by doubling would peak at
        // twice that.
        let mut w = Text004 {
            out: String::with_capacity(self.last_len.load(Ordering::Relaxed) + (1 << 16)),
            comment: None,
            line_start: true,
            convert: format == Format::Text,
        };
        // Writing into a String cannot fail.
        let _ = encode(&mut w, &self.registry);
        w.out
    }

    /// The text format 0.0.4, for node_exporter's textfile collector and for reading.
    pub fn text(&self) -> String {
        let t0 = std::time::Instant::now();
        let out = self.expose_text(Format::Text);
        self.scrape_duration.set(t0.elapsed().as_secs_f64());
        out
    }
}

/// The exposition formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus protobuf format (`io.prometheus.client.MetricFamily`, length
    /// delimited): classic and native histograms both.
    Protobuf,
    /// OpenMetrics 1.0: counters' samples end in `_total`, the exposition in `# EOF`.
    OpenMetrics,
    /// The Prometheus text format 0.0.4: counter families named with `_total`, no
    /// `# UNIT` or `# EOF` lines.
    Text,
}

/// The protobuf format's media type and parameters, as Prometheus asks for it.
const PROTOBUF: &str = "application/vnd.google.protobuf";

impl Format {
    /// The format the `Accept` header prefers (highest `q`, the first listed among
    /// equals; text/plain and `*/*` count for the text format): protobuf when it asks
    /// for `io.prometheus.client.MetricFamily` delimited (Prometheus with native
    /// histograms on does, first), OpenMetrics when it lists it (Prometheus ≥ 2.5),
    /// else the text format 0.0.4.
    pub fn negotiate(accept: Option<&str>) -> Self {
        let mut best = (0.0, Self::Text);
        for part in accept.unwrap_or("").split(',') {
            let mut fields = part.split(';').map(str::trim);
            let ty = fields.next().unwrap_or("");
            let params: Vec<String> = fields.map(str::to_ascii_lowercase).collect();
            // RFC 9110's qvalue: 0 to 1, three decimals at most; anything else is
            // not a preference.
            let q = match params.iter().find_map(|f| f.strip_prefix("q=")) {
                None => 1.0,
                Some(q) => match q.parse::<f64>() {
                    Ok(q) if (0.0..=1.0).contains(&q) => q,
                    _ => continue,
                },
            };
            let has = |p: &str| params.iter().any(|x| x == p);
            let format = if ty.eq_ignore_ascii_case(PROTOBUF)
                && has("proto=io.prometheus.client.metricfamily")
                && has("encoding=delimited")
            {
                Self::Protobuf
            } else if ty.eq_ignore_ascii_case("application/openmetrics-text") {
                Self::OpenMetrics
            } else if ty.eq_ignore_ascii_case("text/plain") || ty == "*/*" {
                Self::Text
            } else {
                continue;
            };
            if q > best.0 {
                best = (q, format);
            }
        }
        best.1
    }

    /// The `Content-Type` of this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Protobuf => "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited",
            Self::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Self::Text => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// The encoder's output, as OpenMetrics or converted on the fly to the text format
/// 0.0.4 (no second copy of a 10 MB exposition): a counter's family is named with its
/// `_total` (0.0.4 has no separate sample suffix), `# UNIT` and `# EOF` do not exist,
/// and everything else (samples, label escaping, histograms) is the same text. Only
/// comment lines change, and the registry's counter families are known by name.
struct Text004 {
    out: String,
    /// A comment line being written (held until its end).
    comment: Option<String>,
    line_start: bool,
    convert: bool,
}

impl std::fmt::Write for Text004 {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if !self.convert {
            self.out.push_str(s);
            return Ok(());
        }
        // Almost every piece is part of a sample line, or ends one.
        if self.comment.is_none() && !(self.line_start && s.starts_with('#')) {
            match s.find('\n') {
                None => {
                    self.out.push_str(s);
                    self.line_start = s.is_empty() && self.line_start;
                    return Ok(());
                }
                Some(i) if i + 1 == s.len() => {
                    self.out.push_str(s);
                    self.line_start = true;
                    return Ok(());
                }
                Some(_) => {}
            }
        }
        for seg in s.split_inclusive('\n') {
            if self.line_start && self.comment.is_none() && seg.starts_with('#') {
                self.comment = Some(String::new());
            }
            match &mut self.comment {
                Some(c) => {
                    c.push_str(seg);
                    if seg.ends_with('\n') {
                        let line = std::mem::take(c);
                        self.comment = None;
                        comment_004(&line, &mut self.out);
                    }
                }
                None => self.out.push_str(seg),
            }
            self.line_start = seg.ends_with('\n');
        }
        Ok(())
    }
}

/// One OpenMetrics comment line in the text format 0.0.4.
fn comment_004(line: &str, out: &mut String) {
    let Some(rest) = line.strip_prefix("# ") else {
        out.push_str(line);
        return;
    };
    if rest.starts_with("EOF") || rest.starts_with("UNIT ") {
        return;
    }
    let kind = rest.split(' ').next().unwrap_or("");
    let name = rest.split(' ').nth(1).unwrap_or("");
    if (kind == "HELP" || kind == "TYPE") && COUNTERS.contains(&name) {
        out.push_str("# ");
        out.push_str(kind);
        out.push(' ');
        out.push_str(name);
        out.push_str("_total");
        out.push_str(&rest[kind.len() + 1 + name.len()..]);
    } else {
        out.push_str(line);
    }
}

/// The counter families [`Metrics::new`] registers (checked by a test).
const COUNTERS: [&str; 17] = [
    "process_cpu_seconds",
    "rttlab_probes_sent",
    "rttlab_probes_lost",
    "rttlab_probes_timed_out",
    "rttlab_probe_errors",
    "rttlab_tcp_retransmissions",
    "rttlab_agent_late_probes",
    "rttlab_agent_config_reloads",
    "rttlab_agent_http_refused",
    "rttlab_passive_packets",
    "rttlab_passive_samples",
    "rttlab_passive_dropped",
    "rttlab_passive_rate_limited",
    "rttlab_service_retransmissions",
    "rttlab_service_untimed",
    "smokeping_requests",
    "smokeping_send_errors",
];

/// The labels of one series.
pub fn labels(peer: &str, layer: &str, extra: &[(String, String)]) -> Labels {
    let mut l = Vec::with_capacity(2 + extra.len());
    l.push(("peer".to_string(), peer.to_string()));
    l.push(("layer".to_string(), layer.to_string()));
    l.extend(extra.iter().cloned());
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Metrics {
        Metrics::new(&"1ms:100ms:1".parse().unwrap())
    }

    /// Witness: arithmetic — 10 µs to 10 s at 3 a decade is 19 bounds, 10^(1/3) apart.
    #[test]
    fn buckets_are_log_spaced_from_min_to_max() {
        let b: Buckets = "10us:10s:3".parse().unwrap();
        let v = b.bounds();
        assert_eq!(v.len(), 19);
        assert_eq!((v[0], v[18]), (1e-5, 10.0));
        assert_eq!(v[3], 1e-4);
        assert!((v[1] / v[0] - 10f64.powf(1.0 / 3.0)).abs() < 1e-4, "{v:?}");
        for bad in [
            "10s:10us:3",
            "0s:1s:3",
            "1ms:1s:0",
            "1ms:1s",
            "1ns:1000s:10",
        ] {
            assert!(bad.parse::<Buckets>().is_err(), "{bad}");
        }
    }

    /// Witness: the OpenMetrics 1.0 and text 0.0.4 grammars, written out by hand for
    /// one observation of each kind.
    #[test]
    fn both_formats_match_their_golden_text() {
        let m = small();
        let l = labels("b:12866", "tcp_rr", &[("zone".into(), "z1".into())]);
        m.rtt.get_or_create(&l).observe(0.005);
        m.sent.get_or_create(&l).inc();
        m.peers.set(1);
        let om = String::from_utf8(m.expose(Format::OpenMetrics)).unwrap();
        let want_hist = "# HELP rttlab_rtt_seconds Round-trip time";
        assert!(om.contains(want_hist), "{om}");
        assert!(om.contains("# TYPE rttlab_rtt_seconds histogram\n"), "{om}");
        assert!(om.contains(
            "rttlab_rtt_seconds_bucket{le=\"0.001\",peer=\"b:12866\",layer=\"tcp_rr\",zone=\"z1\"} 0\n"
        ), "{om}");
        assert!(om.contains(
            "rttlab_rtt_seconds_bucket{le=\"0.01\",peer=\"b:12866\",layer=\"tcp_rr\",zone=\"z1\"} 1\n"
        ), "{om}");
        assert!(om.contains(
            "rttlab_rtt_seconds_bucket{le=\"+Inf\",peer=\"b:12866\",layer=\"tcp_rr\",zone=\"z1\"} 1\n"
        ), "{om}");
        assert!(om.contains("# TYPE rttlab_probes_sent counter\n"), "{om}");
        assert!(
            om.contains(
                "rttlab_probes_sent_total{peer=\"b:12866\",layer=\"tcp_rr\",zone=\"z1\"} 1\n"
            ),
            "{om}"
        );
        assert!(om.ends_with("# EOF\n"), "{om}");

        let text = m.text();
        assert!(
            text.contains("# TYPE rttlab_probes_sent_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("# HELP rttlab_probes_sent_total Probe transactions started.\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "rttlab_probes_sent_total{peer=\"b:12866\",layer=\"tcp_rr\",zone=\"z1\"} 1\n"
            ),
            "{text}"
        );
        assert!(!text.contains("# EOF") && !text.contains("# TYPE rttlab_probes_sent counter"));
        assert!(text.contains("rttlab_agent_peers 1\n"), "{text}");
    }

    /// Witness: the histogram's definition — every bucket counts all observations at
    /// or below its bound, so counts never fall as `le` rises, and `+Inf` is `_count`.
    #[test]
    fn buckets_are_cumulative_and_inf_is_the_count() {
        let m = small();
        let l = labels("p", "icmp", &[]);
        for v in [0.0005, 0.002, 0.002, 0.05, 3.0] {
            m.rtt.get_or_create(&l).observe(v);
        }
        let text = m.text();
        let counts: Vec<u64> = text
            .lines()
            .filter(|l| l.starts_with("rttlab_rtt_seconds_bucket"))
            .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(counts, vec![1, 3, 4, 5]);
        assert!(text.contains("rttlab_rtt_seconds_count{peer=\"p\",layer=\"icmp\"} 5\n"));
    }

    /// Witness: the exposition formats' escaping rules (backslash, double quote and
    /// newline in label values).
    #[test]
    fn label_values_are_escaped() {
        let m = small();
        let l = labels("a\"b\\c\nd", "icmp", &[]);
        m.sent.get_or_create(&l).inc();
        let text = m.text();
        assert!(
            text.contains(r#"rttlab_probes_sent_total{peer="a\"b\\c\nd",layer="icmp"} 1"#),
            "{text}"
        );
    }

    /// Witness: the OpenMetrics exposition's own TYPE lines name every counter family.
    #[test]
    fn every_counter_family_is_renamed_in_the_text_format() {
        let m = small().with_smokeping_names();
        if let Some(f) = &m.smokeping {
            let peer = super::super::smokeping::Pinged {
                target: "p:12866",
                host: "p",
                labels: &[],
            };
            let s = f.series(&peer, "127.0.0.2".parse().unwrap());
            s.requests.inc();
            s.send_errors.inc();
        }
        let l = labels("p", "icmp", &[]);
        for f in [
            &m.sent,
            &m.lost,
            &m.timed_out,
            &m.errors,
            &m.retransmissions,
            &m.late,
            &m.reloads,
            &m.passive_samples,
            &m.passive_dropped,
            &m.service_retransmissions,
            &m.service_untimed,
        ] {
            f.get_or_create(&l).inc();
        }
        let om = String::from_utf8(m.expose(Format::OpenMetrics)).unwrap();
        let mut counters: Vec<&str> = om
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
            .collect();
        counters.sort_unstable();
        let mut known = COUNTERS.to_vec();
        known.sort_unstable();
        assert_eq!(counters, known);
    }

    #[test]
    fn prometheus_gets_openmetrics_and_curl_gets_text() {
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prom)), Format::OpenMetrics);
        assert_eq!(Format::negotiate(Some("*/*")), Format::Text);
        assert_eq!(Format::negotiate(None), Format::Text);
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text;q=0")),
            Format::Text
        );
        // Prometheus 2.42 with --enable-feature=native-histograms (scrape/scrape.go's
        // scrapeAcceptHeaderWithProtobuf).
        let native = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(native)), Format::Protobuf);
        // Another message type, or not delimited, is not what we write.
        assert_eq!(
            Format::negotiate(Some(
                "application/vnd.google.protobuf;proto=other.Thing;encoding=delimited"
            )),
            Format::Text
        );
        assert_eq!(
            Format::negotiate(Some("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text,application/openmetrics-text;q=0.2")),
            Format::OpenMetrics
        );
        // The text format's own preference counts; a q that is no qvalue does not.
        let pb = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited";
        assert_eq!(
            Format::negotiate(Some(&format!("text/plain;q=0.9,{pb};q=0.1"))),
            Format::Text
        );
        for bad in ["1e309", "inf", "NaN", "-1", "", "0x1"] {
            assert_eq!(
                Format::negotiate(Some(&format!("{pb};q={bad}"))),
                Format::Text,
                "{bad}"
            );
        }
    }

    proptest::proptest! {
        /// Witness: RFC 9110's Accept grammar, reduced to what matters here — any
        /// header a client sends (bytes the endpoint reads from strangers) picks a
        /// format without panicking, and a header naming neither protobuf nor
        /// OpenMetrics gets the text format.
        #[test]
        fn any_accept_header_picks_a_format(accept in ".{0,300}") {
            let f = Format::negotiate(Some(&accept));
            let lower = accept.to_ascii_lowercase();
            if !lower.contains("application/vnd.google.protobuf")
                && !lower.contains("application/openmetrics-text")
            {
                proptest::prop_assert_eq!(f, Format::Text);
            }
        }
    }
}
