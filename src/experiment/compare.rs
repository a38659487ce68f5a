//! `rttlab compare`: every layer's RTT between two endpoints in one run, at one
//! interval, under the same conditions — ICMP echo, TCP_RR, UDP_RR, the kernel's
//! srtt on both ends, the passive TS and seq/ACK engines on the TCP_RR connection
//! captured at the client, and the sampled cloud metric (seed 000) — and the gaps
//! between them explained from the data.

use super::runner::{Experiment, TrialContext};
use super::testbed::{capture_port, port_srtt, Captured, LabServer};
use super::{ExperimentError, TrialError};
use crate::kernel::{netns, route};
use crate::lab::Node;
use crate::passive::sampler::Period;
use crate::passive::{Method, Place, Sample, Sink};
use crate::probe::control::TestKind;
use crate::probe::ping::{self, PingControl, PingSettings};
use crate::probe::rr::{self, RrResult, RrSettings, RunControl};
use crate::results::compare::{
    CompareAnatomy, CompareResult, CompareSettings, CompareTimeline, Layer, LayerTimeline,
};
use crate::results::{self, ResultsError};
use crate::stats::timeline::{self, Timeline, MAX_SAMPLES};
use crate::stats::LatencyHistogram;
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Passive samples of the TCP_RR connection, by method and place.
#[derive(Default)]
struct PassiveSink {
    ts_net: LatencyHistogram,
    seq_net: LatencyHistogram,
    /// (capture time, RTT) of each, ns, for the time series.
    ts_series: Vec<(u64, u64)>,
    seq_series: Vec<(u64, u64)>,
    local: u64,
}

impl Sink for PassiveSink {
    fn sample(&mut self, s: &Sample) {
        match (s.method, s.place) {
            (_, Place::LocalHost) => self.local += 1,
            (Method::Ts, Place::Network) => {
                self.ts_net.record_ns(s.rtt_ns);
                if self.ts_series.len() < MAX_SAMPLES {
                    self.ts_series.push((s.ts_ns, s.rtt_ns));
                }
            }
            (Method::Seq, Place::Network) => {
                self.seq_net.record_ns(s.rtt_ns);
                if self.seq_series.len() < MAX_SAMPLES {
                    self.seq_series.push((s.ts_ns, s.rtt_ns));
                }
            }
        }
    }
}

/// The lab a comparison runs in, with its server; `None` against a real server.
///
/// # Errors
/// The lab or its server could not be set up.
pub fn lab_for(s: &CompareSettings, lab_name: &str) -> Result<Option<LabServer>, ExperimentError> {
    if s.server.is_some() {
        return Ok(None);
    }
    LabServer::of(lab_name, &s.lab()).map(Some)
}

/// Every layer at once, against the lab's server or `s.server`, and the gaps between
/// them explained; trial `trial` of the run. A layer that fails is reported in
/// [`CompareResult::errors`], the others still are. Setting `interrupt` (Ctrl-C) ends
/// every layer early; what was measured is kept.
pub fn measure(
    s: &CompareSettings,
    testbed: Option<&LabServer>,
    trial: u32,
    interrupt: &AtomicBool,
) -> CompareResult {
    let ends = Endpoints::of(s, testbed);
    let started_unix_ns = crate::kernel::realtime_ns();
    let p = probe(s, &ends, interrupt);
    let mut errors = Vec::new();
    let mut layers = Vec::new();
    push_layer(
        &mut layers,
        "icmp",
        "echo request → reply",
        p.icmp.as_ref().map(|p| &p.histogram),
    );
    push_layer(
        &mut layers,
        "tcp_rr",
        "send() of a request → last byte of the response",
        p.tcp.as_ref().map(|r| &r.histogram),
    );
    push_layer(
        &mut layers,
        "udp_rr",
        "send() of a request → its response",
        p.udp.as_ref().map(|r| &r.histogram),
    );
    let client_srtt = srtt_histogram(
        p.tcp
            .iter()
            .flat_map(|r| r.tcpinfo_series.iter().map(|t| t.info.rtt_us)),
    );
    layers.push(Layer::from_histogram(
        "tcp_info_client",
        "srtt, sampled every 10 ms",
        &client_srtt,
    ));
    let mut server_why = None;
    let (server_srtt, server_series) = match &p.srv {
        Some(Ok((h, series))) => (h.clone(), series.clone()),
        Some(Err(e)) => {
            server_why = Some(e.chain());
            (LatencyHistogram::new(), Vec::new())
        }
        // A remote server: the srtt it reported at the end of the run.
        None => (
            srtt_histogram(
                p.tcp
                    .iter()
                    .flat_map(|r| r.remote_tcp_info.iter().map(|t| t.rtt_us)),
            ),
            Vec::new(),
        ),
    };
    let mut server = Layer::from_histogram(
        "tcp_info_server",
        if ends.server_ns.is_some() {
            "srtt, sampled every 10 ms"
        } else {
            "srtt at the end of the run"
        },
        &server_srtt,
    );
    server.why_empty = server_why;
    layers.push(server);
    for (name, what, h) in [
        (
            "passive_ts",
            "TSval → echo, capture → server → capture",
            p.pas.as_ref().map(|p| &p.sink.ts_net),
        ),
        (
            "passive_seq",
            "data → covering ACK, capture → server → capture",
            p.pas.as_ref().map(|p| &p.sink.seq_net),
        ),
    ] {
        push_layer(&mut layers, name, what, h);
    }
    let (sampler, local, drops) = p.pas.as_ref().map_or((Vec::new(), 0, 0), |p| {
        (p.periods.clone(), p.sink.local, p.drops)
    });
    let mut metric = metric_layer(sampler.iter().max_by_key(|p| p.samples));
    if let Err(e) = &p.pas {
        metric.why_empty = Some(crate::error_chain(e));
    }
    layers.push(metric);
    explain_empty(&mut layers, &mut errors, &p, &ends, s.data_port);
    let timeline = timeline(s, started_unix_ns, &p, server_series);
    let tcp = p.tcp.as_ref().ok();
    let mut result = CompareResult {
        settings: s.clone(),
        server: ends.server,
        capture_interface: ends.capture.clone().unwrap_or_else(|_| "none".into()),
        layers,
        tcp_retransmissions_client: tcp.and_then(|r| r.local_retrans),
        tcp_retransmissions_server: tcp.and_then(|r| r.remote_retrans),
        ping_lost: p.icmp.as_ref().map_or(0, |p| p.lost),
        udp_lost: p
            .udp
            .as_ref()
            .ok()
            .and_then(|r| r.udp.as_ref())
            .map_or(0, |u| u.lost),
        passive_local_samples: local,
        capture_drops: drops,
        sampler,
        explanations: Vec::new(),
        errors,
        trial,
        anatomy: tcp
            .and_then(|r| r.anatomy.as_ref())
            .map(|a| CompareAnatomy {
                stamped: a.stamped,
                at_percentiles: a.at_percentiles.clone(),
                events: a.events,
                tail: a.tail.clone(),
            }),
        timeline,
    };
    result.explanations = explain(&result);
    result
}

/// Where a comparison runs: the server, the namespaces of the lab's two hosts (none
/// against a real server) and the interface the capture listens on, or why nothing is
/// captured.
struct Endpoints {
    server: std::net::SocketAddr,
    client_ns: Option<String>,
    server_ns: Option<String>,
    capture: Result<String, String>,
}

impl Endpoints {
    fn of(s: &CompareSettings, testbed: Option<&LabServer>) -> Self {
        let lab = testbed.map(LabServer::lab);
        let server = match (testbed, s.server) {
            (Some(b), _) => b.server,
            (None, Some(a)) => a,
            (None, None) => unreachable!("a lab is built when no server is given"),
        };
        let capture = match &lab {
            Some(_) => Ok(s.interface.clone().unwrap_or_else(|| "eth0".into())),
            None => Self::capture_toward(server.ip(), s.interface.as_deref()),
        };
        Self {
            server,
            client_ns: lab.as_ref().map(|l| l.netns(Node::A).to_string()),
            server_ns: lab.as_ref().map(|l| l.netns(Node::B).to_string()),
            capture,
        }
    }

    /// The interface to capture a real server's connection on: `chosen`, else the one
    /// the kernel routes `server` through (`ip route get`: every table, policy rules
    /// first, `route::lookup`). A server at one of this host's own addresses is
    /// refused: both ends' packets are then this host's, and the passive engines tell
    /// the answering end by its address, so the client's think time would pass for the
    /// server's answers.
    fn capture_toward(server: IpAddr, chosen: Option<&str>) -> Result<String, String> {
        let route = route::lookup(None, server)
            .map_err(|e| format!("not captured: {}", crate::error_chain(&e)))?;
        // RTN_LOCAL: the kernel delivers to this host (`ip route get` says "local").
        if route.route_type == libc::RTN_LOCAL {
            return Err(format!(
                "not captured: the server ({server}) is this host's own address, so the capture sees both ends' packets as this host's and cannot tell the server's answers from the client's; compare against a server on another host, or without -H in the built-in lab"
            ));
        }
        match (chosen, route.dev) {
            (Some(i), _) => Ok(i.to_string()),
            (None, Some(dev)) => Ok(dev),
            (None, None) => Err(format!(
                "not captured: the kernel's route to {server} names no interface; give one with --interface"
            )),
        }
    }
}

/// Why a probed layer has no numbers.
#[derive(Debug, thiserror::Error)]
enum LayerError {
    #[error(transparent)]
    Rr(#[from] rr::RrError),
    #[error(transparent)]
    Ping(#[from] ping::PingError),
    #[error(transparent)]
    Namespace(#[from] netns::NetnsError),
    #[error(transparent)]
    Trial(#[from] TrialError),
    #[error("{0} panicked")]
    Panicked(&'static str),
    /// The capture did not start, and why.
    #[error("{0}")]
    NotCaptured(String),
}

/// The server's srtt: its histogram, and each sample as (CLOCK_REALTIME ns, srtt ns).
type ServerSrtt = (LatencyHistogram, Vec<(u64, u64)>);

/// Every layer's raw measurement of one trial.
struct Probed {
    tcp: Result<RrResult, LayerError>,
    udp: Result<RrResult, LayerError>,
    icmp: Result<ping::PingResult, LayerError>,
    /// The server's srtt samples (its namespace's sock_diag; none against a real
    /// server).
    srv: Option<Result<ServerSrtt, TrialError>>,
    pas: Result<Captured<PassiveSink>, LayerError>,
}

/// Probe every layer at once: the capture and the server's srtt first, then TCP_RR
/// (taken apart), UDP_RR and ICMP side by side for the duration.
fn probe(s: &CompareSettings, ends: &Endpoints, interrupt: &AtomicBool) -> Probed {
    let (server, client_ns) = (ends.server, ends.client_ns.as_deref());
    let stop = AtomicBool::new(false);
    let (tcp_ctl, udp_ctl, ping_ctl) = (
        RunControl::default(),
        RunControl::default(),
        PingControl::default(),
    );
    let rr_in_client = |test: TestKind, port: u16, ctl: &RunControl| {
        netns::run_in(client_ns, || {
            rr::run(&rr_settings(s, server, test, port), ctl)
        })?
        .map_err(LayerError::from)
    };
    std::thread::scope(|sc| {
        let pas = sc.spawn(|| match &ends.capture {
            Ok(iface) => capture_port(
                iface,
                client_ns,
                s.data_port,
                s.sampler_one_in,
                s.duration + Duration::from_secs(5),
                &stop,
                PassiveSink::default(),
            )
            .map_err(LayerError::from),
            Err(why) => Err(LayerError::NotCaptured(why.clone())),
        });
        let srv = ends.server_ns.as_ref().map(|ns| {
            let stop = &stop;
            sc.spawn(move || {
                port_srtt(
                    Some(ns),
                    s.data_port,
                    s.duration + Duration::from_secs(2),
                    stop,
                )
            })
        });
        // An interrupt stops the probes; the capture and sampler stop after them.
        sc.spawn(|| {
            while !stop.load(Ordering::Acquire) {
                if interrupt.load(Ordering::Acquire) {
                    tcp_ctl.stop.store(true, Ordering::Release);
                    udp_ctl.stop.store(true, Ordering::Release);
                    ping_ctl.stop.store(true, Ordering::Release);
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        // Let the capture start before the traffic.
        std::thread::sleep(Duration::from_millis(300));
        let udp = sc.spawn(|| rr_in_client(TestKind::UdpRr, s.data_port + 1, &udp_ctl));
        let icmp = sc.spawn(|| {
            netns::run_in(client_ns, || {
                let mut p = PingSettings::new(server.ip());
                p.count = None;
                p.duration = Some(s.duration);
                p.interval = s.interval;
                p.keep_series = true;
                ping::run(&p, &ping_ctl)
            })?
            .map_err(LayerError::from)
        });
        let tcp = rr_in_client(TestKind::TcpRr, s.data_port, &tcp_ctl);
        let udp = udp
            .join()
            .unwrap_or_else(|_| Err(LayerError::Panicked("UDP_RR")));
        let icmp = icmp
            .join()
            .unwrap_or_else(|_| Err(LayerError::Panicked("ping")));
        std::thread::sleep(Duration::from_millis(200));
        stop.store(true, Ordering::Release);
        let srv = srv.map(|h| {
            h.join()
                .unwrap_or_else(|_| Err(TrialError::Panicked("sock_diag")))
        });
        let pas = pas
            .join()
            .unwrap_or_else(|_| Err(LayerError::Panicked("capture")));
        Probed {
            tcp,
            udp,
            icmp,
            srv,
            pas,
        }
    })
}

/// The rr settings of a layer: 1-byte requests, 2-byte responses, at the run's
/// interval; TCP_RR taken apart and its `tcp_info` sampled every 10 ms.
fn rr_settings(
    s: &CompareSettings,
    server: std::net::SocketAddr,
    test: TestKind,
    port: u16,
) -> RrSettings {
    let mut r = RrSettings::new(server);
    r.secret.clone_from(&s.secret);
    r.test = test;
    r.request_size = 1;
    r.response_size = 2;
    r.duration = Some(s.duration);
    r.interval = s.interval;
    r.data_port = port;
    r.keep_series = true;
    if test == TestKind::TcpRr {
        r.tcpinfo_interval = Some(Duration::from_millis(10));
        // Taken apart, so the explanations can say where its time went; the
        // responses carry the server's stamps.
        r.anatomy = true;
        r.response_size = crate::probe::anatomy::MIN_RESPONSE;
    }
    r
}

/// Every layer's per-bin median, P99 (where a bin resolves it) and largest on one time axis from `started_unix_ns`.
fn timeline(
    s: &CompareSettings,
    started_unix_ns: u64,
    p: &Probed,
    server_series: Vec<(u64, u64)>,
) -> Option<CompareTimeline> {
    let bin = timeline::bin_for(s.duration, s.interval);
    // The probes start 300 ms in and may overrun their duration by a little.
    let span = s.duration + Duration::from_secs(2);
    let from = |start: u64, t_s: f64| start + (t_s * 1e9) as u64;
    let rr_series = |r: &Result<RrResult, LayerError>| -> Vec<(u64, u64)> {
        r.iter()
            .flat_map(|r| {
                r.series
                    .iter()
                    .map(|&(t, ns)| (from(r.started_unix_ns, t), ns))
            })
            .collect()
    };
    let sources: [(&str, Vec<(u64, u64)>); 7] = [
        (
            "icmp",
            p.icmp
                .iter()
                .flat_map(|p| {
                    p.series
                        .iter()
                        .map(|&(t, ns)| (from(p.started_unix_ns, t), ns))
                })
                .collect(),
        ),
        ("tcp_rr", rr_series(&p.tcp)),
        ("udp_rr", rr_series(&p.udp)),
        (
            "tcp_info_client",
            p.tcp
                .iter()
                .flat_map(|r| {
                    r.tcpinfo_series
                        .iter()
                        .filter(|x| x.info.rtt_us > 0)
                        .map(|x| {
                            (
                                from(r.started_unix_ns, x.t_ms / 1e3),
                                u64::from(x.info.rtt_us) * 1000,
                            )
                        })
                })
                .collect(),
        ),
        ("tcp_info_server", server_series),
        (
            "passive_ts",
            p.pas
                .as_ref()
                .map(|p| p.sink.ts_series.clone())
                .unwrap_or_default(),
        ),
        (
            "passive_seq",
            p.pas
                .as_ref()
                .map(|p| p.sink.seq_series.clone())
                .unwrap_or_default(),
        ),
    ];
    let layers: Vec<LayerTimeline> = sources
        .into_iter()
        .filter_map(|(name, samples)| {
            let mut t = Timeline::new(started_unix_ns, bin, span);
            for (at, ns) in samples {
                t.record(at, ns);
            }
            let points = t.points();
            (!points.is_empty()).then(|| LayerTimeline {
                name: name.into(),
                points,
            })
        })
        .collect();
    (!layers.is_empty()).then_some(CompareTimeline {
        bin_s: bin.as_secs_f64(),
        layers,
    })
}

/// tcp_info srtt values (µs; 0: no sample yet) as a histogram.
fn srtt_histogram(rtt_us: impl Iterator<Item = u32>) -> LatencyHistogram {
    let mut h = LatencyHistogram::new();
    for us in rtt_us.filter(|&us| us > 0) {
        h.record_ns(u64::from(us) * 1000);
    }
    h
}

/// The sampled metric's row: its busiest period's interpolated percentiles (it has no
/// histogram of its own, only buckets).
fn metric_layer(metric: Option<&Period>) -> Layer {
    let us = |ms: Option<f64>| ms.map(|v| v * 1e3);
    Layer {
        name: "sampled_metric".into(),
        what: "1-in-N seq/ACK, bucketed 0-1-2-4… ms, interpolated".into(),
        samples: metric.map_or(0, |p| p.samples),
        min_us: None,
        percentiles_us: crate::results::compare::LayerPercentiles {
            p50: us(metric.and_then(|p| p.median_ms)),
            p90: us(metric.and_then(|p| p.p90_ms)),
            p99: us(metric.and_then(|p| p.p99_ms)),
        },
        max_us: None,
        mean_us: None,
        histogram: None,
        why_empty: None,
    }
}

/// A layer's row, or an empty row with the error that kept it from running.
fn push_layer(
    layers: &mut Vec<Layer>,
    name: &'static str,
    what: &'static str,
    r: Result<&LatencyHistogram, &LayerError>,
) {
    match r {
        Ok(h) => layers.push(Layer::from_histogram(name, what, h)),
        Err(e) => {
            let mut l = Layer::from_histogram(name, what, &LatencyHistogram::new());
            l.why_empty = Some(crate::error_chain(e));
            layers.push(l);
        }
    }
}

/// Give every layer without samples its reason, from what kept it empty, and list it
/// in `errors`: a row of dashes must never pass for a measurement (the run then exits
/// 1, measured but failed).
fn explain_empty(
    layers: &mut [Layer],
    errors: &mut Vec<String>,
    p: &Probed,
    ends: &Endpoints,
    port: u16,
) {
    for l in layers.iter_mut().filter(|l| l.samples == 0) {
        let why = l.why_empty.take().unwrap_or_else(|| match l.name.as_str() {
            "icmp" => {
                let lost = p.icmp.as_ref().map_or(0, |r| r.lost);
                format!("no echo request was answered ({lost} sent and lost)")
            }
            "tcp_rr" => "no transaction completed".into(),
            "udp_rr" => {
                let lost = p
                    .udp
                    .as_ref()
                    .ok()
                    .and_then(|r| r.udp.as_ref())
                    .map_or(0, |u| u.lost);
                format!("no response came ({lost} requests lost)")
            }
            "tcp_info_client" => match &p.tcp {
                Err(_) => "tcp_rr did not run, so there was no connection to read".into(),
                Ok(_) => "no srtt was read from tcp_rr's connection".into(),
            },
            "tcp_info_server" => match (&p.tcp, &ends.server_ns) {
                (Err(_), _) => "tcp_rr did not run, so there was no connection to read".into(),
                (Ok(_), Some(_)) => "no srtt was read from the server's end".into(),
                (Ok(_), None) => "the server sent no report of its connection's tcp_info".into(),
            },
            _ => match &p.pas {
                Ok(c) if c.sink.local > 0 => format!(
                    "the capture on {} saw {} samples of tcp port {port}, every one answered by this host, none by the server",
                    ends.capture.as_deref().unwrap_or("-"),
                    c.sink.local
                ),
                _ => format!(
                    "the capture on {} saw no packet of tcp port {port} answered by the server",
                    ends.capture.as_deref().unwrap_or("-"),
                ),
            },
        });
        l.why_empty = Some(why);
    }
    // One line for the layers one cause emptied (the capture's three, tcp_rr's pair).
    let mut causes: Vec<(Vec<&str>, &str)> = Vec::new();
    for l in layers.iter() {
        if let Some(why) = &l.why_empty {
            match causes.iter_mut().find(|(_, w)| *w == why.as_str()) {
                Some((names, _)) => names.push(&l.name),
                None => causes.push((vec![&l.name], why)),
            }
        }
    }
    for (names, why) in causes {
        errors.push(format!("{}: no samples: {why}", names.join(", ")));
    }
}

fn p50(r: &CompareResult, name: &str) -> Option<f64> {
    r.layers
        .iter()
        .find(|l| l.name == name)
        .and_then(|l| l.percentiles_us.p50)
}

/// The gaps the data supports, each with the numbers it rests on.
pub fn explain(r: &CompareResult) -> Vec<String> {
    let mut out = Vec::new();
    let (icmp, tcp, udp) = (p50(r, "icmp"), p50(r, "tcp_rr"), p50(r, "udp_rr"));
    let (seq, ts) = (p50(r, "passive_seq"), p50(r, "passive_ts"));
    let (cli, srv) = (p50(r, "tcp_info_client"), p50(r, "tcp_info_server"));
    // An anatomy with no stamped transaction (the kernel gave no stamps) explains
    // nothing: the layers' medians still do.
    if let Some(a) = r.anatomy.as_ref().filter(|a| a.stamped > 0) {
        out.extend(explain_anatomy(a, seq, icmp, r.settings.server.is_none()));
    } else if let (Some(i), Some(t)) = (icmp, tcp) {
        let wire = seq.unwrap_or(i);
        out.push(format!(
            "user-space overhead: tcp_rr's median is {:.0} µs above the passive seq/ACK median on the wire ({t:.0} vs {wire:.0} µs): two trips through the sockets and the scheduler on each host; icmp ({i:.0} µs) has no application on the far side.",
            t - wire
        ));
    }
    if let (Some(u), Some(t)) = (udp, tcp) {
        out.push(format!(
            "udp_rr vs tcp_rr: {u:.0} vs {t:.0} µs at the median; the same path without TCP's ACKs and timers."
        ));
    }
    if let (Some(c), Some(s)) = (cli, srv) {
        let iv = r.settings.interval.as_secs_f64() * 1e6;
        out.push(crate::report::explain::server_srtt(
            c,
            s,
            iv,
            "the interval",
        ));
    }
    if let (Some(sq), Some(t)) = (seq, ts) {
        out.push(format!(
            "passive: seq/ACK {sq:.0} µs and TS {t:.0} µs at the median, from the client's interface; {} samples answered by the client itself (its own time to answer) are kept apart.",
            r.passive_local_samples
        ));
    }
    let metric = p50(r, "sampled_metric");
    if let (Some(m), Some(sq)) = (metric, seq) {
        if m > sq * 1.5 && sq < 1000.0 {
            out.push(format!(
                "bucketing: the sampled metric reads {m:.0} µs where the wire says {sq:.0} µs: its first bucket is 0–1 ms and the median is interpolated inside it, so any sub-millisecond RTT reads about 0.5 ms (Jones, A Brief Look at Round Trip Time)."
            ));
        } else {
            let busiest = r.sampler.iter().max_by_key(|p| p.samples);
            let bucket = busiest
                .and_then(|p| crate::passive::sampler::bucket_holding(&p.buckets, 0.5))
                .map_or(String::new(), |(lo, hi)| match hi {
                    Some(hi) => format!(
                        ": its median falls in the {lo}–{hi} ms bucket and is interpolated inside it (the bucket's middle is {:.1} ms), so it can be off by half the bucket's width",
                        (lo + hi) / 2.0
                    ),
                    None => format!(": its median falls in the last bucket, from {lo} ms up, and reads as that bucket's lower bound"),
                });
            out.push(format!("sampled metric: {m:.0} µs vs the wire's {sq:.0} µs at the median{bucket}; the metric's buckets are 0–1–2–4… ms (Jones, A Brief Look at Round Trip Time)."));
        }
    }
    let retr =
        r.tcp_retransmissions_client.unwrap_or(0) + r.tcp_retransmissions_server.unwrap_or(0);
    if retr > 0 {
        out.push(format!(
            "retransmission: {retr} TCP segments were retransmitted; tcp_rr's tail includes the recovery, the kernel's srtt and the passive seq/ACK engine (Karn's rule) do not."
        ));
    }
    if r.ping_lost > 0 || r.udp_lost > 0 {
        out.push(format!(
            "loss: {} pings and {} UDP requests lost (not in their latencies).",
            r.ping_lost, r.udp_lost
        ));
    }
    if r.settings.interval >= Duration::from_millis(1) {
        let n = |name: &str| {
            r.layers
                .iter()
                .find(|l| l.name == name)
                .map_or(0, |l| l.samples)
        };
        let ms = r.settings.interval.as_secs_f64() * 1e3;
        out.push(format!(
            "interval: icmp sends an echo every {ms} ms ({} answered); tcp_rr and udp_rr wait {ms} ms after each response before the next request, so each of their transactions takes its round trip plus {ms} ms ({} and {} transactions). Idle CPUs sleep in between, and waking them adds tens of µs to each layer measured from user space (Phanekham and Jones, What a trip!).",
            n("icmp"),
            n("tcp_rr"),
            n("udp_rr")
        ));
    }
    out
}

/// The explanations tcp_rr's anatomy gives: what its median transaction is made of
/// and which part of it each other layer sees, where its tail grows, and what made the
/// slowest transactions slow.
fn explain_anatomy(
    a: &CompareAnatomy,
    seq: Option<f64>,
    icmp: Option<f64>,
    lab: bool,
) -> Vec<String> {
    let mut out = Vec::new();
    let at = |p: f64| {
        a.at_percentiles
            .iter()
            .find(|c| (c.percentile - p).abs() < 1e-9)
    };
    if let Some(c) = at(50.0) {
        let v = &c.parts_us;
        let server = v.server_recv + v.server_app;
        let mut s = format!(
            "anatomy: tcp_rr's median transaction ({:.0} µs, the mean of the {} in its band) is {:.0} µs of client send path, {:.0} µs of network, {:.0} µs of server wake-up, {:.0} µs of server application and send and {:.0} µs of client wake-up (each transaction's kernel stamps on both ends, adding up exactly before each is rounded to the µs).",
            v.rtt, c.transactions, v.client_send, v.network, v.server_recv, v.server_app, v.client_recv
        );
        if let Some(w) = seq {
            s += &format!(
                " The wire's seq/ACK median ({w:.0} µs, at the client's interface) spans the network and the server's part ({:.0} µs); tcp_rr adds the client's send path and wake-up ({:.0} µs) on top.",
                v.network + server,
                v.client_send + v.client_recv
            );
        }
        if let Some(i) = icmp {
            s += &format!(
                " icmp ({i:.0} µs) crosses the same network with no application on either end."
            );
        }
        out.push(s);
    }
    if let (Some(m), Some(t)) = (at(50.0), at(99.0)) {
        let grown = m
            .parts_us
            .parts()
            .iter()
            .zip(t.parts_us.parts())
            .map(|(&(name, a), (_, b))| (name, b - a))
            .max_by(|x, y| x.1.total_cmp(&y.1));
        let growth = t.parts_us.rtt - m.parts_us.rtt;
        if let Some((name, d)) = grown.filter(|_| growth > 0.0) {
            // In the built-in lab the network is the emulator's delay line: a late
            // frame there is this machine's load, not a path's.
            let lab_network = if lab && name == "network" {
                " (in the built-in lab the network is rttlab's own emulator between veths: its lateness is this machine's load, see --emulator)"
            } else {
                ""
            };
            out.push(format!(
                "tail: from P50 to P99 tcp_rr grows by {growth:.0} µs ({:.0} → {:.0} µs); {:.0} % of the growth is in {name} (+{d:.0} µs), the part that grew most{lab_network}.",
                m.parts_us.rtt,
                t.parts_us.rtt,
                100.0 * d / growth
            ));
        }
    }
    if let Some(tail) = &a.tail {
        if let Some(c) = tail.causes.first() {
            let event = c.event.as_deref().map_or(String::new(), |e| {
                format!(" with a {}", e.replace('_', " "))
            });
            out.push(format!(
                "slowest {} % ({} transactions from {:.0} µs{}): {:.0} % of them were slowest in {}{event}, which added {:.0} µs on average.",
                tail.share_pct,
                tail.transactions,
                tail.from_rtt_us,
                tail.rtt_percentile_us.map_or(String::new(), |v| format!(
                    ", tcp_rr's stamped P{} being {v:.0} µs",
                    100.0 - tail.share_pct
                )),
                c.share_pct,
                c.component,
                c.mean_added_us
            ));
        }
    }
    let e = &a.events;
    if e.retransmitted > 0 {
        let recovery = if e.recovery > 0 {
            format!(", {} by loss recovery", e.recovery)
        } else {
            String::new()
        };
        out.push(format!(
            "{} tcp_rr transactions waited for a retransmission ({} request and {} response segments sent again: {} by the tail loss probe, {} by the RTO timer{recovery}).",
            e.retransmitted, e.request_retransmissions, e.response_retransmissions, e.tlp, e.rto
        ));
    }
    out
}

/// `rttlab compare` as the runner drives it: one cell, `--trials` repeats in one lab.
pub struct Compare {
    /// What to compare and how (run.json's settings).
    pub settings: CompareSettings,
    /// The name of the lab built for the run when no server is given.
    pub lab_name: String,
}

impl Experiment for Compare {
    const NAME: &'static str = crate::results::names::COMPARE;
    type Cell = ();
    type Record = CompareResult;
    type Testbed = Option<LabServer>;
    type Settings = CompareSettings;

    fn settings(&self) -> &Self::Settings {
        &self.settings
    }

    fn cells(&self) -> Vec<()> {
        vec![()]
    }

    fn repeats(&self) -> crate::results::Repeats {
        self.settings.repeats
    }

    fn key(&self, r: &CompareResult) -> ((), u32) {
        ((), r.trial)
    }

    fn builds_a_lab(&self) -> bool {
        self.settings.server.is_none()
    }

    fn testbed(&self) -> Result<Option<LabServer>, ExperimentError> {
        lab_for(&self.settings, &self.lab_name)
    }

    fn trial(
        &self,
        testbed: &Option<LabServer>,
        (): &(),
        trial: u32,
        ctx: &TrialContext<'_>,
    ) -> Result<CompareResult, ExperimentError> {
        let r = measure(&self.settings, testbed.as_ref(), trial, ctx.interrupt);
        for l in &r.layers {
            if let Some(h) = &l.histogram {
                results::write_file(ctx.out, &l.histogram_file(trial), &h.to_csv())?;
            }
        }
        Ok(r)
    }

    fn trial_length(&self) -> Option<std::time::Duration> {
        Some(self.settings.duration)
    }

    fn describe(&self, r: &CompareResult) -> String {
        let p50 = |n: &str| p50(r, n).map_or("-".into(), |v| format!("{v:.0}"));
        format!(
            "trial {}: icmp {} µs, tcp_rr {} µs, passive seq {} µs at the median",
            r.trial + 1,
            p50("icmp"),
            p50("tcp_rr"),
            p50("passive_seq")
        )
    }

    fn failed(&self, r: &CompareResult) -> bool {
        !r.errors.is_empty()
    }

    fn report(&self, out: &Path, records: &[CompareResult]) -> Result<String, ResultsError> {
        crate::report::compare::write_trials(out, crate::report::compare::Trials::of(records))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A comparison on the built-in lab (10 ms RTT), as its trials.jsonl line holds it.
    fn committed() -> CompareResult {
        serde_json::from_str(include_str!("../../tests/corpus/compare-lab.json")).unwrap()
    }

    /// Witness: the record's own layers. With stamped transactions the median's
    /// composition is explained (its sum is the band's round trip); with none, the
    /// gap between tcp_rr's median and the wire's is, quoting both medians.
    #[test]
    fn the_anatomy_explains_only_when_it_stamped_transactions() {
        let mut r = committed();
        let a = r.anatomy.as_ref().unwrap();
        assert!(a.stamped > 0);
        let said = explain(&r);
        assert!(said.iter().any(|s| s.starts_with("anatomy: ")), "{said:?}");
        assert!(!said.iter().any(|s| s.starts_with("user-space overhead")));
        if let Some(a) = r.anatomy.as_mut() {
            a.stamped = 0;
            a.at_percentiles.clear();
            a.tail = None;
        }
        let said = explain(&r);
        let (t, w) = (p50(&r, "tcp_rr").unwrap(), p50(&r, "passive_seq").unwrap());
        let overhead = said
            .iter()
            .find(|s| s.starts_with("user-space overhead"))
            .unwrap_or_else(|| panic!("{said:?}"));
        assert!(
            overhead.contains(&format!("({t:.0} vs {w:.0} µs)")),
            "{overhead}"
        );
        assert!(!said.iter().any(|s| s.starts_with("anatomy: ")), "{said:?}");
    }
}
