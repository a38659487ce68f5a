//! The service layers: where each transaction of this host's own TCP services (redis
//! on 6379, nginx on 80: `--explain-port`) and of its calls to others'
//! (`--explain-to`) spends its time, from the kernel, by `rttlab explain`'s programs
//! ([`crate::kernel::explain_bpf`]): histograms by side, port and part,
//! `rttlab_service_response_seconds` and `rttlab_service_part_seconds`. Their labels
//! are the ports given at start and the parts of a side: a bound the admin chose, as
//! the peers are; the clients' and servers' addresses are never labels.

use super::metrics::{Labels, Metrics};
use crate::kernel::explain_bpf::{Counts, ExplainBpf, ExplainBpfError};
use crate::service::{Side, Transaction};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The most ports of each side: each adds six histograms.
pub const MAX_PORTS: usize = 32;

/// What to watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceSettings {
    /// Local ports: connections to this host's services (`--explain-port`).
    pub ports: Vec<u16>,
    /// Remote ports: this host's connections to others' (`--explain-to`).
    pub to: Vec<u16>,
    /// Most connections watched at once (`--explain-max-connections`).
    pub max_connections: u32,
}

/// The reasons of `rttlab_service_untimed_total`: as [`Counts`] counts them, events
/// the kernel skipped ([`ExplainBpf::skipped`]), and records too short to read.
pub const UNTIMED: [&str; 5] = [
    "ring_buffer_full",
    "table_full",
    "unanswered",
    "kernel_events_skipped",
    "malformed",
];

/// Why the service layers could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The kernel's programs.
    #[error(transparent)]
    Kernel(#[from] ExplainBpfError),
    /// The draining thread.
    #[error("starting the agent's service thread")]
    Thread(#[source] std::io::Error),
}

/// The thread that drains the kernel's transactions: it ends within 100 ms of `stop`,
/// the programs detached as it drops them.
pub type Worker = std::thread::JoinHandle<()>;

fn side_port(side: Side, port: u16) -> Labels {
    vec![
        ("side".into(), side.name().into()),
        ("port".into(), port.to_string()),
    ]
}

fn with(mut l: Labels, key: &str, value: &str) -> Labels {
    l.push((key.into(), value.into()));
    l
}

/// Attach the programs for `settings` and start draining them into `metrics` until
/// `stop`.
///
/// # Errors
/// No privilege, no BTF, a kernel that refuses the programs, or no thread.
pub fn start(
    settings: &ServiceSettings,
    metrics: Arc<Metrics>,
    stop: Arc<AtomicBool>,
) -> Result<Worker, ServiceError> {
    let kernel = ExplainBpf::attach(&settings.ports, &settings.to, settings.max_connections)?;
    // Every series made now, at zero (a service not yet called reads as idle, not as
    // unknown), and its handle kept: a family's lookup allocates its labels and takes
    // its lock, which a scrape holds for tens of ms, and a busy service has 100 000
    // transactions a second.
    let sides = settings
        .ports
        .iter()
        .map(|&p| (Side::Server, p))
        .chain(settings.to.iter().map(|&p| (Side::Client, p)));
    let series: HashMap<(Side, u16), PortSeries> = sides
        .map(|(side, port)| ((side, port), PortSeries::new(&metrics, side, port)))
        .collect();
    let untimed = UNTIMED.map(|reason| {
        metrics
            .service_untimed
            .get_or_create_owned(&vec![("reason".into(), reason.into())])
    });
    std::thread::Builder::new()
        .name("service".into())
        .spawn(move || drain(kernel, &series, &untimed, &stop))
        .map_err(ServiceError::Thread)
}

/// The series of one side of one port.
struct PortSeries {
    response: Histogram,
    /// In [`Side::parts`]' order.
    parts: [Histogram; 5],
    /// rto, tlp, fast.
    retransmissions: [Counter; 3],
}

impl PortSeries {
    fn new(metrics: &Metrics, side: Side, port: u16) -> Self {
        let l = side_port(side, port);
        Self {
            response: metrics.service_response.get_or_create_owned(&l),
            parts: side.parts().map(|p| {
                metrics
                    .service_part
                    .get_or_create_owned(&with(l.clone(), "part", p.name()))
            }),
            retransmissions: ["rto", "tlp", "fast"].map(|c| {
                metrics
                    .service_retransmissions
                    .get_or_create_owned(&with(l.clone(), "cause", c))
            }),
        }
    }

    fn observe(&self, t: &Transaction) {
        let s = |ns: u64| ns as f64 / 1e9;
        self.response.observe(s(t.response_ns));
        for (h, ns) in self.parts.iter().zip(t.parts) {
            if let Some(ns) = ns {
                h.observe(s(ns));
            }
        }
        let by = t.retransmitted_by;
        for (c, n) in self.retransmissions.iter().zip([by.rto, by.tlp, by.fast]) {
            if n > 0 {
                c.inc_by(n);
            }
        }
    }
}

/// Each transaction into its histograms as it comes; the kernel's counts every
/// second.
fn drain(
    mut kernel: ExplainBpf,
    series: &HashMap<(Side, u16), PortSeries>,
    untimed: &[Counter; 5],
    stop: &AtomicBool,
) {
    let mut last = (Counts::default(), 0u64);
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        kernel.wait(Duration::from_millis(100));
        let malformed = kernel.drain(|r| {
            let t = Transaction::of(&r);
            // Only the ports given reach the ring; any other is not this run's.
            if let Some(s) = series.get(&(t.side, t.port)) {
                s.observe(&t);
            }
        });
        untimed[4].inc_by(malformed);
        if Instant::now() >= next {
            next += Duration::from_secs(1);
            if let Ok(c) = kernel.counts() {
                let now = (c, kernel.skipped());
                export(untimed, &last, &now);
                last = now;
            }
        }
    }
}

/// The growth of the kernel's counts since `last`.
fn export(untimed: &[Counter; 5], last: &(Counts, u64), now: &(Counts, u64)) {
    let grew = [
        now.0.lost.saturating_sub(last.0.lost),
        now.0.table_full.saturating_sub(last.0.table_full),
        now.0.unanswered.saturating_sub(last.0.unanswered),
        now.1.saturating_sub(last.1),
    ];
    for (c, n) in untimed.iter().zip(grew) {
        c.inc_by(n);
    }
}
