//! `rttlab experiment syn-rto` (seed 001's appendix): how long a TCP connection takes
//! to set up when the first SYN is lost, with the kernel's initial RTO (1 s,
//! `TCP_TIMEOUT_INIT`) and with the eBPF override (`rttlab tune syn-rto`: a sock_ops
//! program that sets `BPF_SOCK_OPS_TIMEOUT_INIT` for destinations in an LPM trie).
//!
//! In the lab, host b drops the first SYN of every connection to its server port (an
//! nftables set remembers each client port's first SYN for 30 s) and lets the
//! retransmitted SYN through; a also connects with no drop, for the set-up time the
//! path alone gives. The kernel's SYN retransmission counter (TcpExt.TCPSynRetrans in
//! a's namespace) counts every SYN that was sent again: the witness that the first
//! one really was lost and the time is the RTO's.

use super::runner::{Experiment, TrialContext};
use super::testbed::{LabServer, Nft};
use super::{ExperimentError, TrialError};
use crate::kernel::syn_rto::{self, SynRto, Tuning};
use crate::kernel::tuning::{self, Journal};
use crate::kernel::{hz, netns, netstat};
use crate::lab::Node;
use crate::results::syn_rto::{Case, CASES};
use crate::results::{write_file, ResultsError};
use crate::stats::LatencyHistogram;
use serde::{Deserialize, Serialize};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What to run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Settings {
    /// Connections per case in each trial.
    pub connections: u32,
    /// The override's initial RTO, ms.
    pub syn_rto_ms: u32,
    /// The lab: its round-trip delay, and its emulator busy-polling instead of
    /// sleeping between frames, so that a SYN-ACK a loaded VM holds back past the
    /// override's backed-off RTO is not sent again.
    #[serde(flatten)]
    pub lab: crate::results::LabSettings,
    /// The kernel's HZ (the override is whole jiffies).
    pub hz: u32,
    /// Repeats of each case, and the seed of their order.
    #[serde(flatten)]
    pub repeats: crate::results::Repeats,
}

/// Drop the first SYN from each client port to `port` (b's input hook).
fn drop_first_syn(port: u16) -> String {
    format!(
        "table inet rttlab_synrto {{\n\
         set seen {{ type ipv4_addr . inet_service; timeout 30s; }}\n\
         chain input {{ type filter hook input priority 0;\n\
         tcp dport {port} tcp flags & (syn | ack) == syn ip saddr . tcp sport @seen accept\n\
         tcp dport {port} tcp flags & (syn | ack) == syn add @seen {{ ip saddr . tcp sport }} drop\n\
         }}\n}}\n"
    )
}

const REMOVE: &str = "table inet rttlab_synrto\ndelete table inet rttlab_synrto\n";

/// A private bpf filesystem for the run's pins, mounted in a fresh directory and
/// unmounted (and the directory removed) on drop, so the run leaves no mount behind
/// and does not depend on /sys/fs/bpf being mounted.
struct PrivateBpfFs(std::path::PathBuf);

impl PrivateBpfFs {
    fn mount() -> Result<Self, TrialError> {
        let dir = std::env::temp_dir().join(format!("rttlab-bpffs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(TrialError::step(dir.display().to_string()))?;
        if let Err(e) = crate::kernel::syn_rto::mount_bpffs(&dir) {
            let _ = std::fs::remove_dir(&dir);
            return Err(TrialError::step(format!(
                "mounting a bpf filesystem at {}",
                dir.display()
            ))(e));
        }
        Ok(Self(dir))
    }
}

impl Drop for PrivateBpfFs {
    fn drop(&mut self) {
        if let Ok(t) = std::ffi::CString::new(self.0.display().to_string()) {
            // SAFETY: a NUL-terminated path.
            unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) };
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// The sock_ops override, attached for the run and detached (and forgotten by the
/// journal, which `rttlab tune revert` replays after a crash) on drop.
struct Override {
    s: SynRto,
    cgroup: std::path::PathBuf,
    journal: Journal,
    _fs: PrivateBpfFs,
}

impl Override {
    fn attach(prefix: std::net::IpAddr, t: Tuning) -> Result<Self, TrialError> {
        let fs = PrivateBpfFs::mount()?;
        let s = SynRto::at(fs.0.join("syn_rto"));
        let cgroup = syn_rto::cgroup2_root().map_err(TrialError::step("the cgroup2 root"))?;
        let journal = Journal::for_run(crate::results::names::SYN_RTO);
        tuning::attach_syn_rto(&journal, &s, &cgroup)
            .map_err(TrialError::step("attaching the SYN's RTO override"))?;
        let o = Self {
            s,
            cgroup,
            journal,
            _fs: fs,
        };
        o.s.add(prefix, 32, t)
            .map_err(TrialError::step(format!("the override for {prefix}")))?;
        Ok(o)
    }
}

impl Drop for Override {
    fn drop(&mut self) {
        let _ = tuning::detach_syn_rto(&self.journal, &self.s, &self.cgroup);
    }
}

/// `n` connections from a to `to`, each timed from connect() to its return.
fn connect_times(
    testbed: &LabServer,
    to: SocketAddr,
    n: u32,
    interrupt: &AtomicBool,
) -> Result<(LatencyHistogram, u32, u64), TrialError> {
    let ns = testbed.client_ns();
    let counters = "the kernel's TCP counters";
    let before = netstat::read(Some(ns)).map_err(TrialError::step(counters))?;
    let (h, failed) = netns::run_in(Some(ns), || {
        let mut h = LatencyHistogram::new();
        let mut failed = 0;
        for _ in 0..n {
            if interrupt.load(Ordering::Acquire) {
                break;
            }
            let t0 = Instant::now();
            match TcpStream::connect_timeout(&to, Duration::from_secs(10)) {
                Ok(c) => {
                    h.record(t0.elapsed());
                    drop(c);
                }
                Err(_) => failed += 1,
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        (h, failed)
    })
    .map_err(TrialError::step("entering the client's namespace"))?;
    let after = netstat::read(Some(ns)).map_err(TrialError::step(counters))?;
    Ok((
        h,
        failed,
        netstat::delta(&before, &after, "TcpExt.TCPSynRetrans"),
    ))
}

/// The experiment as the runner drives it.
pub struct SynRtoExperiment {
    /// The override, the connections and the lab (run.json's settings).
    pub settings: Settings,
    /// The name of the lab built for the run.
    pub lab_name: String,
}

impl Experiment for SynRtoExperiment {
    const NAME: &'static str = crate::results::names::SYN_RTO;
    /// An index into [`CASES`].
    type Cell = usize;
    type Record = Case;
    type Testbed = LabServer;
    type Settings = Settings;

    fn settings(&self) -> &Self::Settings {
        &self.settings
    }

    fn cells(&self) -> Vec<usize> {
        (0..CASES.len()).collect()
    }

    fn repeats(&self) -> crate::results::Repeats {
        self.settings.repeats
    }

    fn key(&self, c: &Case) -> (usize, u32) {
        (
            CASES
                .iter()
                .position(|x| *x == c.case)
                .unwrap_or(usize::MAX),
            c.trial,
        )
    }

    fn testbed(&self) -> Result<LabServer, ExperimentError> {
        LabServer::of(&self.lab_name, &self.settings.lab)
    }

    fn trial(
        &self,
        testbed: &LabServer,
        &k: &usize,
        trial: u32,
        ctx: &TrialContext<'_>,
    ) -> Result<Case, ExperimentError> {
        let s = &self.settings;
        let case = CASES[k];
        let to = testbed.server;
        let jiffies = hz::usecs_to_jiffies(u64::from(s.syn_rto_ms) * 1000, s.hz);
        let rtt = s.lab.rtt.as_secs_f64() * 1e3;
        let nft = |script: &str| Nft::spawn(Some(testbed.lab()), Node::B)?.run(script);
        let predicted_ms = match k {
            0 => rtt,
            1 => 1000.0 + rtt,
            _ => jiffies as f64 * 1000.0 / f64::from(s.hz) + rtt,
        };
        let result = (|| {
            if k > 0 {
                nft(&format!("{REMOVE}{}", drop_first_syn(to.port())))?;
            }
            let guard = if k == 2 {
                let t = Tuning::new(u32::try_from(jiffies).unwrap_or(u32::MAX), 0, 0);
                Some(Override::attach(to.ip(), t)?)
            } else {
                None
            };
            let r = connect_times(testbed, to, s.connections, ctx.interrupt);
            drop(guard);
            if k > 0 {
                nft(REMOVE)?;
            }
            r
        })();
        let file = if trial == 0 {
            format!("case{k}.hist.csv")
        } else {
            format!("case{k}-t{trial}.hist.csv")
        };
        Ok(match result {
            Ok((h, failed, retrans)) => {
                let ms = |v: Option<u64>| v.map(|x| x as f64 / 1e6);
                write_file(ctx.out, &file, &h.to_csv())?;
                Case {
                    case: case.into(),
                    trial,
                    connections: u32::try_from(h.count()).unwrap_or(u32::MAX),
                    failed,
                    min_ms: ms(h.min_ns()),
                    p50_ms: ms(h.quantile_ns(0.5)),
                    p90_ms: ms(h.resolved_quantile_ns(0.9)),
                    max_ms: ms(h.max_ns()),
                    syn_retransmits: retrans,
                    predicted_ms,
                    file: Some(file),
                    error: None,
                }
            }
            Err(e) => Case {
                case: case.into(),
                trial,
                connections: 0,
                failed: 0,
                min_ms: None,
                p50_ms: None,
                p90_ms: None,
                max_ms: None,
                syn_retransmits: 0,
                predicted_ms,
                file: None,
                error: Some(e.chain()),
            },
        })
    }

    fn describe(&self, c: &Case) -> String {
        format!(
            "{} → P50 {} ms",
            c.case,
            c.p50_ms.map_or("-".into(), |v| format!("{v:.1}"))
        )
    }

    fn failed(&self, c: &Case) -> bool {
        c.error.is_some()
    }

    fn report(&self, out: &Path, cases: &[Case]) -> Result<String, ResultsError> {
        crate::report::syn_rto::write(out, cases)
    }
}
