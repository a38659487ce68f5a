//! The `passive_ts` layer: RTT from the TCP timestamps of real traffic between this
//! host and its peers (pping's method, `passive::ts`), on a live interface, for the
//! ports the admin names. Only samples a peer answered are kept, under that peer's
//! name: any other host on the wire would be a label value nobody bounded.

use super::metrics::{labels, Metrics};
use super::peers::Peer;
use crate::capture::filter::Selection;
use crate::capture::{self, Options, Source};
use crate::passive::{Analyzer, Config, Filter, Place, Sample, Sink};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Bytes kept of each frame: headers with every TCP option.
const SNAPLEN: u32 = 256;

/// What to watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassiveSettings {
    /// The interface captured on (`--passive-iface`).
    pub interface: String,
    /// TCP ports watched, at either end (`--passive-port`); empty would be every port.
    pub ports: Vec<u16>,
}

struct PeerSink<'a> {
    metrics: &'a Metrics,
    peers: &'a RwLock<HashMap<IpAddr, Peer>>,
}

impl Sink for PeerSink<'_> {
    fn sample(&mut self, s: &Sample) {
        if s.place != Place::Network {
            return;
        }
        let names = self
            .peers
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(p) = names.get(&s.host.ip()) {
            self.metrics
                .rtt
                .get_or_create(&labels(&p.name, "passive_ts", &p.labels))
                .observe(s.rtt_ns as f64 / 1e9);
        }
    }
}

/// Open the interface (so a bad name or a missing privilege is an error at start),
/// then analyse in a thread until `stop`. The capture is opened in that thread: a
/// source is not `Send`.
///
/// # Errors
/// The interface cannot be captured on.
pub fn start(
    settings: &PassiveSettings,
    metrics: Arc<Metrics>,
    peers: Arc<RwLock<HashMap<IpAddr, Peer>>>,
    stop: Arc<AtomicBool>,
) -> Result<(), capture::SourceError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let settings = settings.clone();
    let thread = std::thread::Builder::new()
        .name("passive-ts".into())
        .spawn(move || {
            let opened = capture::open(
                &Source::Interface {
                    name: settings.interface.clone(),
                    netns: None,
                },
                Options {
                    select: Selection {
                        hosts: Vec::new(),
                        ports: settings.ports.clone(),
                    },
                    expression: None,
                    snaplen: SNAPLEN,
                    before_wait: None,
                },
            );
            let mut cap = match opened {
                Ok(c) => {
                    let _ = tx.send(Ok(()));
                    c
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let mut analyzer = Analyzer::new(Config {
                ts: true,
                seq: false,
                filter: Filter {
                    ports: settings.ports.clone(),
                    ..Filter::default()
                },
                ..Config::default()
            });
            let mut sink = PeerSink {
                metrics: &metrics,
                peers: &peers,
            };
            while !stop.load(Ordering::Relaxed) {
                let r = cap.read(Duration::from_millis(200), 4096, &mut |ts, link, frame| {
                    analyzer.packet(ts, link, frame, &mut sink);
                });
                if let Err(e) = r {
                    eprintln!(
                        "rttlab agent: passive_ts stopped: {}",
                        crate::error_chain(&e)
                    );
                    return;
                }
            }
        });
    let thread_err = |e: std::io::Error| capture::SourceError::Open {
        path: "passive-ts thread".into(),
        source: e,
    };
    thread.map_err(thread_err)?;
    rx.recv()
        .map_err(|_| thread_err(std::io::Error::other("the capture thread died")))?
}
