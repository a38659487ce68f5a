//! What the lab experiments share: a lab with `rttlab serve` in namespace b, a live
//! capture of one TCP port with the passive engines and the sampled metric, and the
//! kernel's srtt of one port sampled through sock_diag.

use super::{ExperimentError, TrialError};
use crate::capture::live::LiveCapture;
use crate::kernel::netns;
use crate::kernel::sock_diag::{self, DiagFilter, SockDiag};
use crate::lab::impair::Impairments;
use crate::lab::{Lab, LabSpec, Node};
use crate::passive::sampler::{Period, SamplerConfig};
use crate::passive::{self, Analyzer, Config, Sink};
use crate::probe::server::{Server, ServerConfig, ServerHandle};
use crate::results::LabSettings;
use crate::stats::LatencyHistogram;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The control port of the server in the lab.
pub const SERVER_PORT: u16 = 12866;

/// How long the lab must have carried no frame, beyond its round trip's delay, before
/// a measurement starts. The hosts are quiet from the start (`lab::topology`'s IPv6
/// settings: no duplicate-address detection, MLD's reports repeated within a jiffy),
/// so this only has to outlast the emulator's delay line and the server's start; with
/// the kernel's defaults a neighbour solicitation or MLD report came up to a second
/// apart, and the wait was 1.2 s.
const QUIET: Duration = Duration::from_millis(150);

/// A lab (a ↔ r ↔ b) with an rttlab server listening in b; both go on drop.
pub struct LabServer {
    /// The server's control address (b's IPv4 address).
    pub server: SocketAddr,
    handle: Option<ServerHandle>,
    lab: Lab,
}

impl LabServer {
    /// Build a lab named `name` with `imp` both ways, start the server in b, and wait
    /// for the lab's own start-up traffic to settle.
    ///
    /// # Errors
    /// The lab or the server could not be set up.
    pub fn up(name: &str, imp: Impairments) -> Result<Self, ExperimentError> {
        Self::up_spec(&LabSpec::new(name, imp))
    }

    /// The lab `lab` describes, named `name`, with the server in b: every lab
    /// experiment's testbed.
    ///
    /// # Errors
    /// The lab or the server could not be set up.
    pub fn of(name: &str, lab: &LabSettings) -> Result<Self, ExperimentError> {
        let mut spec = LabSpec::new(name, Impairments::with_rtt(lab.rtt));
        spec.poll = lab.poll;
        Self::up_spec(&spec)
    }

    /// As [`LabServer::up`] with a full lab spec.
    ///
    /// # Errors
    /// The lab or the server could not be set up.
    pub fn up_spec(spec: &LabSpec) -> Result<Self, ExperimentError> {
        let lab = Lab::up(spec)?;
        let server = SocketAddr::new(IpAddr::V4(lab.info().b.ipv4), SERVER_PORT);
        let handle = netns::run_in(Some(lab.netns(Node::B)), || {
            Server::bind(ServerConfig::for_own_run(server))
                .map_err(ExperimentError::Server)?
                .spawn()
                .map_err(ExperimentError::ServerThreads)
        })??;
        let delay_ns: u64 = spec
            .impairments
            .iter()
            .map(|i| i.delay_ns + i.jitter_ns)
            .sum();
        lab.wait_quiet(
            QUIET + Duration::from_nanos(delay_ns),
            Duration::from_secs(6),
        );
        Ok(Self {
            server,
            handle: Some(handle),
            lab,
        })
    }

    /// The lab the server runs in.
    pub fn lab(&self) -> &Lab {
        &self.lab
    }

    /// The client's namespace (a).
    pub fn client_ns(&self) -> &str {
        self.lab.netns(Node::A)
    }

    /// The server's namespace (b).
    pub fn server_ns(&self) -> &str {
        self.lab.netns(Node::B)
    }
}

impl Drop for LabServer {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.shutdown();
        }
    }
}

/// What a capture of one port gave.
pub struct Captured<S> {
    /// The sink after the capture: what it kept of the samples.
    pub sink: S,
    /// The sampled metric's periods (the watched host: the capture host's addresses).
    pub periods: Vec<Period>,
    /// Frames the kernel dropped for want of ring space.
    pub drops: u64,
}

/// Capture TCP `port` on `iface` (in `ns`) until `stop`, feeding the passive engines
/// into `sink` and the sampled metric (one packet in `one_in`, periods of `period`)
/// watching the capture host's own addresses.
///
/// # Errors
/// The capture could not be opened or read.
pub fn capture_port<S: Sink>(
    iface: &str,
    ns: Option<&str>,
    port: u16,
    one_in: u32,
    period: Duration,
    stop: &AtomicBool,
    mut sink: S,
) -> Result<Captured<S>, TrialError> {
    let what = || format!("capturing port {port} on {iface}");
    let mut cap = LiveCapture::open(iface, ns).map_err(TrialError::step(what()))?;
    let link = cap.link();
    let mut a = Analyzer::new(Config {
        local: cap.addresses.clone(),
        filter: passive::Filter {
            ports: vec![port],
            ..Default::default()
        },
        sampler: Some(SamplerConfig {
            one_in,
            period_ns: crate::stats::units::ns(period),
            seed: 1,
        }),
        ..Config::default()
    });
    while !stop.load(Ordering::Acquire) {
        cap.poll(50, |ts, frame| a.packet(ts, link, frame, &mut sink))
            .map_err(TrialError::step(what()))?;
    }
    // What is still in the ring.
    cap.poll(0, |ts, frame| a.packet(ts, link, frame, &mut sink))
        .map_err(TrialError::step(what()))?;
    a.finish(&mut sink);
    Ok(Captured {
        sink,
        periods: a.sampler_periods().unwrap_or_default(),
        drops: cap.stats().drops,
    })
}

/// The srtt of every TCP socket with local port `port` in `ns`, sampled through
/// sock_diag every 10 ms until `until` or `stop`: their histogram, and each sample as
/// (CLOCK_REALTIME ns, srtt ns).
///
/// # Errors
/// sock_diag could not be opened or a dump failed.
pub fn port_srtt(
    ns: Option<&str>,
    port: u16,
    until: Duration,
    stop: &AtomicBool,
) -> Result<(LatencyHistogram, Vec<(u64, u64)>), TrialError> {
    let what = || format!("the kernel's srtt of port {port} (sock_diag)");
    let mut d = SockDiag::open(ns).map_err(TrialError::step(what()))?;
    let mut h = LatencyHistogram::new();
    let mut series = Vec::new();
    let f = DiagFilter {
        sport: Some(port),
        ..Default::default()
    };
    sock_diag::sample_every(
        &mut d,
        &f,
        Duration::from_millis(10),
        None,
        Some(until),
        stop,
        |_, e| {
            if let Some(rtt) = e.tcp_info.and_then(|t| (t.rtt_us > 0).then_some(t.rtt_us)) {
                let ns = u64::from(rtt) * 1000;
                h.record_ns(ns);
                if series.len() < crate::stats::timeline::MAX_SAMPLES {
                    series.push((crate::kernel::realtime_ns(), ns));
                }
            }
        },
    )
    .map_err(TrialError::step(what()))?;
    Ok((h, series))
}

/// An `nft -f -` started ahead of time, waiting for its script on stdin: starting a
/// process takes milliseconds (hundreds on a loaded VM), which would otherwise land
/// inside the blackout's timing.
pub struct Nft(std::process::Child);

impl Nft {
    /// Start nft in the lab's `node`, or on this host (`None`).
    pub fn spawn(lab: Option<&Lab>, node: Node) -> Result<Self, TrialError> {
        let mut cmd = match lab {
            Some(l) => l.command(node, "nft"),
            None => std::process::Command::new("nft"),
        };
        cmd.args(["-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map(Nft)
            .map_err(TrialError::step("starting nft (apt-get install nftables)"))
    }

    /// Hand it `script` and wait until the ruleset is changed.
    pub fn run(mut self, script: &str) -> Result<(), TrialError> {
        use std::io::Write;
        if let Some(mut i) = self.0.stdin.take() {
            i.write_all(script.as_bytes())
                .map_err(TrialError::step("handing nft its script"))?;
        }
        let o = self
            .0
            .wait_with_output()
            .map_err(TrialError::step("waiting for nft"))?;
        if o.status.success() {
            Ok(())
        } else {
            Err(TrialError::Nft(
                String::from_utf8_lossy(&o.stderr).trim().to_owned(),
            ))
        }
    }
}

/// Run `f` while a watcher turns an interrupt into `stop`.
pub fn until_interrupted<T>(interrupt: &AtomicBool, stop: &AtomicBool, f: impl FnOnce() -> T) -> T {
    let finished = AtomicBool::new(false);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            while !finished.load(Ordering::Acquire) {
                if interrupt.load(Ordering::Acquire) {
                    stop.store(true, Ordering::Release);
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let r = f();
        finished.store(true, Ordering::Release);
        r
    })
}
