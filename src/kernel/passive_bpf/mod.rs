//! The in-kernel passive RTT engine's kernel side: bpf/passive_rtt.bpf.c, loaded with
//! aya, attached to an interface's ingress and egress (TCX on 6.6 and later, else a
//! clsact qdisc), and read through its maps: the ring buffer of samples and finished
//! flows, the per-CPU counters, the histograms aggregated per prefix. What the records
//! mean is `passive::in_kernel`'s business; this module moves bytes.
//!
//! Nothing is pinned: the programs and maps live as long as this process holds them.
//! A TCX attachment is a BPF link, which the kernel removes when its last descriptor
//! closes, so even a killed process leaves nothing behind. A clsact filter outlives
//! its process, so every attachment is journalled ([`super::tuning`]) before it is
//! made and `rttlab tune revert --all` removes what a crash left.
//!
//! # Privileges
//! CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN (root has them). Without CAP_PERFMON the
//! verifier checks the programs' map-value arithmetic for Spectre v1
//! (`bpf_bypass_spec_v1` in include/linux/bpf.h is perfmon_capable) and refuses them.
//!
//! # Minimum kernel
//! 5.13 (bpf_for_each_map_elem; the BPF ring buffer is 5.8, atomic compare-and-
//! exchange 5.12); TCX needs 6.6, older kernels get a clsact qdisc.

mod abi;
mod error;

use super::netns::{self, NetnsError};
pub use abi::{RawAddr, RawAgg, RawAggKey, RawCounters, RawFlowKey};
use aya::maps::{Array, HashMap as BpfMap, MapData, PerCpuArray, RingBuf};
use aya::programs::links::LinkOrder;
use aya::programs::tc::{self, NlOptions, SchedClassifierLinkId, TcAttachOptions};
use aya::programs::{SchedClassifier, TcAttachType};
use aya::{Ebpf, EbpfLoader};
pub use error::PassiveBpfError;
use std::os::fd::{AsFd, AsRawFd, RawFd};

/// The compiled programs, committed beside their source.
static OBJECT: &[u8] = aya::include_bytes_aligned!("../../../bpf/passive_rtt.bpf.o");

/// Most histogram bounds the program takes (`MAX_BOUNDS` in the C source).
pub const MAX_BOUNDS: usize = 640;

const PROG_INGRESS: &str = "rttlab_ingress";
const PROG_EGRESS: &str = "rttlab_egress";
const PROG_SWEEP: &str = "rttlab_sweep";
/// The names the programs carry in the kernel (16 bytes at most), by which a revert
/// finds what a crashed run left.
pub const PROGRAM_NAMES: [&str; 2] = [PROG_INGRESS, PROG_EGRESS];

/// Histograms per prefix, aggregated in the kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Aggregation {
    /// IPv4 prefix length, 0–32 (ePPing's default: 24).
    pub prefix_v4: u8,
    /// IPv6 prefix length, 0–128 (ePPing's default: 48).
    pub prefix_v6: u8,
    /// The buckets' upper bounds, ns, ascending, at most [`MAX_BOUNDS`].
    pub bounds_ns: Vec<u64>,
    /// Aggregate only samples answered by the addresses given to [`PassiveBpf::watch`].
    pub watched_only: bool,
}

/// What the programs do, fixed when they are loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The TS rule.
    pub ts: bool,
    /// The seq/ACK rule.
    pub seq: bool,
    /// Record every packet's TSval once the reverse direction was seen (pping's rule).
    pub ts_any: bool,
    /// Karn's rule.
    pub karn: bool,
    /// Time SACKed segments at their SACK.
    pub sack: bool,
    /// Send each sample to the ring buffer.
    pub events: bool,
    /// Send each finished flow's counts to the ring buffer.
    pub flow_events: bool,
    /// Aggregate samples into histograms per prefix.
    pub aggregate: Option<Aggregation>,
    /// Per flow direction, the least time between two TSvals or segments timed (ePPing's
    /// `--rate-limit`); 0: every one.
    pub rate_limit_ns: u64,
    /// Forget a flow silent this long.
    pub idle_ns: u64,
    /// A TSval or segment older than this gives no sample.
    pub max_age_ns: u64,
    /// Most flows held.
    pub max_flows: u32,
    /// Most TSvals and segments waiting for their answer, over all flows.
    pub max_pending: u32,
    /// Most aggregated histograms.
    pub max_aggregates: u32,
    /// The ring buffer's size, bytes (a power of two, a multiple of the page size).
    pub events_bytes: u32,
    /// Only flows with one of these hosts at either end (empty: any).
    pub hosts: Vec<u128>,
    /// Only flows with one of these ports at either end (empty: any).
    pub ports: Vec<u16>,
    /// Only these flows (empty: any).
    pub flows: Vec<RawFlowKey>,
    /// The capture host's own addresses.
    pub local: Vec<u128>,
}

/// What a sweep walks ([`PassiveBpf::sweep`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sweep {
    /// The flow table: idle flows leave it.
    Flows,
    /// The TSvals and segments waiting: those past the maximum age go.
    Pending,
    /// Both, and everything in them goes (the end of a run).
    Drain,
}

/// Where frames start, as the interface delivers them to tc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// At an Ethernet header (Ethernet, veth, loopback, bridges, VLAN devices).
    Ethernet,
    /// At the IP header (tun, WireGuard, PPP and other layer-3 devices).
    Ip,
}

/// How the programs are attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AttachMode {
    /// TCX links (6.6+): removed by the kernel with the last descriptor.
    Tcx,
    /// Filters on a clsact qdisc: they outlive the process until removed.
    Clsact,
}

impl AttachMode {
    /// `tcx` or `clsact`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tcx => "tcx",
            Self::Clsact => "clsact",
        }
    }
}

/// An attachment as a journal records it before it is made, so that a crash leaves
/// enough to undo it ([`revert`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttachRecord {
    /// The interface's network namespace; None: rttlab's own.
    pub netns: Option<String>,
    /// The interface.
    pub interface: String,
    /// How the programs were attached.
    pub mode: AttachMode,
    /// Whether this run added the clsact qdisc (and so removes it).
    pub created_qdisc: bool,
    /// The process holding the programs.
    pub pid: u32,
}

/// Where attachments are recorded (the tuning journal, `kernel::tuning::Journal`).
pub trait AttachJournal: Send {
    /// Record `a` before it is made.
    ///
    /// # Errors
    /// The journal could not be written: the attachment is not made.
    fn record(&self, a: &AttachRecord) -> Result<(), String>;
    /// `a` was undone (or never made): forget it.
    fn forget(&self, a: &AttachRecord);
    /// Whether another run journalled adding the clsact qdisc `a` attaches to: a run
    /// that finds that qdisc there shares its removal, so whichever detaches last
    /// removes it (else two runs, the first to add it stopping first, would leave it
    /// to nobody).
    fn qdisc_added_by_another_run(&self, a: &AttachRecord) -> bool;
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}

/// `(major, minor)` of the running kernel.
fn kernel_version() -> Option<(u32, u32)> {
    let r = kernel_release();
    let mut it = r.split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// Whether the error (a chain ending in an errno) is a refusal for privilege.
fn refused(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(x) = cur {
        if let Some(io) = x.downcast_ref::<std::io::Error>() {
            if super::privilege::is_refusal(io) {
                return true;
            }
        }
        cur = x.source();
    }
    false
}

/// Whether the engine can run here, checked before anything is loaded: the kernel's
/// version and this process's capabilities. Loading checks the rest (the verifier).
///
/// # Errors
/// [`PassiveBpfError::NotPermitted`] or [`PassiveBpfError::Unsupported`].
pub fn check() -> Result<(), PassiveBpfError> {
    if let Some(v) = kernel_version() {
        if v < (5, 13) {
            return Err(PassiveBpfError::Unsupported {
                release: kernel_release(),
                what: "no bpf_for_each_map_elem".into(),
            });
        }
    }
    use super::privilege::Capability;
    let bpf = (Capability::Bpf.held() && Capability::Perfmon.held()) || Capability::SysAdmin.held();
    if !bpf || !Capability::NetAdmin.held() {
        return Err(PassiveBpfError::NotPermitted);
    }
    Ok(())
}

/// The engine's programs and maps, loaded; attached to at most one interface.
pub struct PassiveBpf {
    ebpf: Ebpf,
    events: RingBuf<MapData>,
    counters: PerCpuArray<MapData, RawCounters>,
    aggregates: BpfMap<MapData, RawAggKey, RawAgg>,
    watched: BpfMap<MapData, RawAddr, u8>,
    clock: Array<MapData, u64>,
    generation: Array<MapData, u32>,
    attached: Option<Attached>,
}

struct Attached {
    record: AttachRecord,
    links: Vec<(&'static str, SchedClassifierLinkId)>,
    journal: Box<dyn AttachJournal>,
}

fn load_err<E: std::error::Error + Send + Sync + 'static>(
    step: &'static str,
) -> impl FnOnce(E) -> PassiveBpfError {
    move |e| {
        if refused(&e) {
            return PassiveBpfError::NotPermitted;
        }
        PassiveBpfError::Load {
            step,
            source: Box::new(e),
        }
    }
}

fn map_err<E: std::error::Error + 'static>(map: &'static str) -> impl FnOnce(E) -> PassiveBpfError {
    move |e| PassiveBpfError::Map {
        map,
        msg: crate::error_chain(&e),
    }
}

/// The programs' `cfg_flags`: one bit per engine choice and filter (the bits
/// `bpf/passive.bpf.c` tests).
fn config_flags(s: &Settings, framing: Framing) -> u32 {
    let mut flags: u32 = 0;
    for (on, bit) in [
        (s.ts, 0),
        (s.seq, 1),
        (s.ts_any, 2),
        (s.karn, 3),
        (s.sack, 4),
        (framing == Framing::Ip, 5),
        (!s.hosts.is_empty(), 6),
        (!s.ports.is_empty(), 7),
        (!s.flows.is_empty(), 8),
        (s.events, 9),
        (s.flow_events, 10),
        (s.aggregate.is_some(), 11),
        (s.aggregate.as_ref().is_some_and(|a| a.watched_only), 12),
    ] {
        if on {
            flags |= 1 << bit;
        }
    }
    flags
}

/// `--aggregate`'s globals: the histogram bounds (zero-padded), how many there are,
/// and the prefixes that group addresses (24 and 48 bits without aggregation).
fn histogram_globals(s: &Settings) -> Result<([u64; MAX_BOUNDS], u32, u32, u32), PassiveBpfError> {
    let mut bounds = [0u64; MAX_BOUNDS];
    let (mut n_bounds, mut v4, mut v6) = (0u32, 24u32, 48u32);
    if let Some(a) = &s.aggregate {
        if a.bounds_ns.len() > MAX_BOUNDS {
            return Err(PassiveBpfError::Load {
                step: "setting the histogram bounds",
                source: format!("{} bounds, at most {MAX_BOUNDS}", a.bounds_ns.len()).into(),
            });
        }
        bounds[..a.bounds_ns.len()].copy_from_slice(&a.bounds_ns);
        n_bounds = a.bounds_ns.len() as u32;
        v4 = u32::from(a.prefix_v4.min(32));
        v6 = u32::from(a.prefix_v6.min(128));
    }
    Ok((bounds, n_bounds, v4, v6))
}

/// Load the ingress, egress and sweep programs into the kernel: the verifier's
/// refusal named with its last line.
fn load_programs(ebpf: &mut Ebpf) -> Result<(), PassiveBpfError> {
    for name in [PROG_INGRESS, PROG_EGRESS, PROG_SWEEP] {
        let prog: &mut SchedClassifier = ebpf
            .program_mut(name)
            .ok_or_else(|| PassiveBpfError::Load {
                step: "finding a program in the object (rebuild it with bpf/build.sh)",
                source: name.into(),
            })?
            .try_into()
            .map_err(load_err("finding a tc program"))?;
        prog.load().map_err(|e| {
            if refused(&e) {
                PassiveBpfError::NotPermitted
            } else {
                PassiveBpfError::Unsupported {
                    release: kernel_release(),
                    what: format!(
                        "the verifier refused {name}: {}",
                        last_line(&verifier_log(&e))
                    ),
                }
            }
        })?;
    }
    Ok(())
}

/// Attach the programs of `directions` to `interface` (in the current namespace) in
/// `mode`; on a failure the ones attached are detached again, and the clsact qdisc
/// removed if this run `created_qdisc`.
fn attach_links(
    ebpf: &mut Ebpf,
    interface: &str,
    mode: AttachMode,
    directions: &[(&'static str, TcAttachType)],
    created_qdisc: bool,
) -> Result<Vec<(&'static str, SchedClassifierLinkId)>, PassiveBpfError> {
    let mut links = Vec::new();
    for &(name, dir) in directions {
        let options = match mode {
            AttachMode::Tcx => TcAttachOptions::TcxOrder(LinkOrder::default()),
            AttachMode::Clsact => TcAttachOptions::Netlink(NlOptions::default()),
        };
        let r = classifier(ebpf, name)?.attach_with_options(interface, dir, options);
        match r {
            Ok(id) => links.push((name, id)),
            Err(e) => {
                for (n, id) in links.drain(..) {
                    if let Ok(p) = classifier(ebpf, n) {
                        let _ = p.detach(id);
                    }
                }
                if created_qdisc {
                    remove_clsact_if_unused(interface);
                }
                if refused(&e) {
                    return Err(PassiveBpfError::NotPermitted);
                }
                return Err(PassiveBpfError::Attach {
                    interface: interface.into(),
                    msg: crate::error_chain(&e),
                });
            }
        }
    }
    Ok(links)
}

impl PassiveBpf {
    /// Load the programs with `s` for frames of `framing`; nothing is attached yet.
    ///
    /// # Errors
    /// No privilege, a kernel without what the programs need (the verifier refused
    /// them), or bounds past [`MAX_BOUNDS`].
    pub fn load(s: &Settings, framing: Framing) -> Result<Self, PassiveBpfError> {
        check()?;
        let flags = config_flags(s, framing);
        let (bounds, n_bounds, v4, v6) = histogram_globals(s)?;
        let events_bytes = s.events_bytes.max(4096).next_power_of_two();
        // Past an eighth of the ring, a record wakes the reader before its next poll.
        let wake_bytes = u64::from(events_bytes / 8);
        let mut loader = EbpfLoader::new();
        loader
            .set_global("cfg_flags", &flags, true)
            .set_global("cfg_rate_limit_ns", &s.rate_limit_ns, true)
            .set_global("cfg_idle_ns", &s.idle_ns, true)
            .set_global("cfg_max_age_ns", &s.max_age_ns, true)
            .set_global("cfg_wake_bytes", &wake_bytes, true)
            .set_global("cfg_prefix_v4", &v4, true)
            .set_global("cfg_prefix_v6", &v6, true)
            .set_global("cfg_n_bounds", &n_bounds, true)
            .set_global("cfg_bounds", &bounds, true)
            .set_max_entries("rttlab_flows", s.max_flows.max(1))
            .set_max_entries("rttlab_pending", s.max_pending.max(1))
            .set_max_entries("rttlab_aggregates", s.max_aggregates.max(1))
            .set_max_entries("rttlab_events", events_bytes);
        let mut ebpf = loader.load(OBJECT).map_err(|e| {
            if refused(&e) {
                PassiveBpfError::NotPermitted
            } else {
                PassiveBpfError::Unsupported {
                    release: kernel_release(),
                    what: last_line(&crate::error_chain(&e)),
                }
            }
        })?;
        load_programs(&mut ebpf)?;
        fill_set(
            &mut ebpf,
            "rttlab_hosts",
            s.hosts.iter().map(|&a| RawAddr::from_u128(a)),
        )?;
        fill_set(&mut ebpf, "rttlab_ports", s.ports.iter().copied())?;
        fill_set(&mut ebpf, "rttlab_flow_filter", s.flows.iter().copied())?;
        fill_set(
            &mut ebpf,
            "rttlab_local",
            s.local.iter().map(|&a| RawAddr::from_u128(a)),
        )?;
        let take = |ebpf: &mut Ebpf, name: &'static str| {
            ebpf.take_map(name).ok_or_else(|| PassiveBpfError::Map {
                map: name,
                msg: "not in the object (rebuild it with bpf/build.sh)".into(),
            })
        };
        let events = RingBuf::try_from(take(&mut ebpf, "rttlab_events")?)
            .map_err(map_err("rttlab_events"))?;
        let counters = PerCpuArray::try_from(take(&mut ebpf, "rttlab_counters")?)
            .map_err(map_err("rttlab_counters"))?;
        let aggregates = BpfMap::try_from(take(&mut ebpf, "rttlab_aggregates")?)
            .map_err(map_err("rttlab_aggregates"))?;
        let watched = BpfMap::try_from(take(&mut ebpf, "rttlab_watched")?)
            .map_err(map_err("rttlab_watched"))?;
        let clock =
            Array::try_from(take(&mut ebpf, "rttlab_clock")?).map_err(map_err("rttlab_clock"))?;
        let generation = Array::try_from(take(&mut ebpf, "rttlab_generation")?)
            .map_err(map_err("rttlab_generation"))?;
        let mut me = Self {
            ebpf,
            events,
            counters,
            aggregates,
            watched,
            clock,
            generation,
            attached: None,
        };
        me.set_clock(realtime_minus_monotonic())?;
        Ok(me)
    }

    /// Attach to `interface` (in network namespace `netns`) on ingress and egress, or
    /// ingress only (`ingress_only`: loopback, where every frame crosses both). `mode`
    /// `None` picks TCX where the kernel has it. The attachment is journalled in
    /// `journal` first, and undone by [`Self::detach`] or on drop.
    ///
    /// # Errors
    /// No such interface, no privilege, or the kernel refused the attachment.
    pub fn attach(
        &mut self,
        interface: &str,
        netns: Option<&str>,
        mode: Option<AttachMode>,
        ingress_only: bool,
        journal: Box<dyn AttachJournal>,
    ) -> Result<AttachMode, PassiveBpfError> {
        let place = netns
            .map(|n| format!(" in network namespace {n}"))
            .unwrap_or_default();
        let tcx = kernel_version().is_some_and(|v| v >= (6, 6));
        let mode = match mode {
            Some(AttachMode::Tcx) if !tcx => {
                return Err(PassiveBpfError::Unsupported {
                    release: kernel_release(),
                    what: "no TCX before Linux 6.6 (use the clsact attachment)".into(),
                })
            }
            Some(m) => m,
            None if tcx => AttachMode::Tcx,
            None => AttachMode::Clsact,
        };
        let mut record = AttachRecord {
            netns: netns.map(Into::into),
            interface: interface.into(),
            mode,
            // Recorded as ours until known otherwise: a crash between adding the
            // qdisc and rewriting the entry must not leave it behind. A revert
            // removes it only if no other filter hangs on it.
            created_qdisc: mode == AttachMode::Clsact,
            pid: std::process::id(),
        };
        journal.record(&record).map_err(PassiveBpfError::Journal)?;
        let directions: &[(&'static str, TcAttachType)] = if ingress_only {
            &[(PROG_INGRESS, TcAttachType::Ingress)]
        } else {
            &[
                (PROG_INGRESS, TcAttachType::Ingress),
                (PROG_EGRESS, TcAttachType::Egress),
            ]
        };
        let ebpf = &mut self.ebpf;
        let attached = netns::run_in(netns, || -> Result<_, PassiveBpfError> {
            // SAFETY: if_nametoindex reads a NUL-terminated string.
            let exists = std::ffi::CString::new(interface)
                .is_ok_and(|c| unsafe { libc::if_nametoindex(c.as_ptr()) } != 0);
            if !exists {
                return Err(PassiveBpfError::NoInterface {
                    name: interface.into(),
                    place: place.clone(),
                });
            }
            let mut created_qdisc = false;
            if mode == AttachMode::Clsact {
                match tc::qdisc_add_clsact(interface) {
                    Ok(()) => created_qdisc = true,
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) if super::privilege::is_refusal(&e) => {
                        return Err(PassiveBpfError::NotPermitted)
                    }
                    Err(e) => {
                        return Err(PassiveBpfError::Attach {
                            interface: interface.into(),
                            msg: format!("adding a clsact qdisc: {e}"),
                        })
                    }
                }
            }
            let links = attach_links(ebpf, interface, mode, directions, created_qdisc)?;
            Ok((links, created_qdisc))
        });
        let (links, mut created_qdisc) =
            match attached.map_err(PassiveBpfError::from).and_then(|r| r) {
                Ok(x) => x,
                Err(e) => {
                    journal.forget(&record);
                    return Err(e);
                }
            };
        if mode == AttachMode::Clsact && !created_qdisc {
            created_qdisc = journal.qdisc_added_by_another_run(&record);
        }
        if record.created_qdisc != created_qdisc {
            // The qdisc was there before: not ours to remove.
            let was = record.clone();
            record.created_qdisc = created_qdisc;
            if journal.record(&record).is_ok() {
                journal.forget(&was);
            }
        }
        self.attached = Some(Attached {
            record,
            links,
            journal,
        });
        Ok(mode)
    }

    /// Detach from the interface (and remove the clsact qdisc this run added, if no
    /// other filter uses it), and forget the journal entry. Nothing happens if not
    /// attached.
    ///
    /// # Errors
    /// The interface's namespace could not be entered.
    pub fn detach(&mut self) -> Result<(), PassiveBpfError> {
        let Some(a) = self.attached.take() else {
            return Ok(());
        };
        let ebpf = &mut self.ebpf;
        let links = a.links;
        let (interface, created) = (a.record.interface.clone(), a.record.created_qdisc);
        let r = netns::run_in(a.record.netns.as_deref(), move || {
            for (name, id) in links {
                if let Ok(p) = classifier(ebpf, name) {
                    let _ = p.detach(id);
                }
            }
            if created {
                remove_clsact_if_unused(&interface);
            }
        });
        match r {
            // Undone, or the namespace went and took its interfaces with it.
            Ok(()) | Err(NetnsError::NotFound { .. }) => {
                a.journal.forget(&a.record);
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// How the programs are attached, if they are.
    pub fn attach_mode(&self) -> Option<AttachMode> {
        self.attached.as_ref().map(|a| a.record.mode)
    }

    /// The ring buffer of samples and finished flows.
    pub fn events(&mut self) -> &mut RingBuf<MapData> {
        &mut self.events
    }

    /// The ring buffer's descriptor, to wait on: readable when records are in, but
    /// the programs wake a waiter only once an eighth of the ring is waiting (a
    /// wakeup per record costs the packets' CPU an interrupt), so wait with a
    /// timeout and read what is there when it ends.
    pub fn events_fd(&self) -> RawFd {
        self.events.as_raw_fd()
    }

    /// The counters, summed over CPUs.
    ///
    /// # Errors
    /// The map could not be read.
    pub fn counters(&self) -> Result<RawCounters, PassiveBpfError> {
        let per_cpu = self
            .counters
            .get(&0, 0)
            .map_err(map_err("rttlab_counters"))?;
        let mut sum = RawCounters::default();
        for c in per_cpu.iter() {
            sum += *c;
        }
        Ok(sum)
    }

    /// Run the sweep once over `what`: flows idle past the timeout leave the table
    /// (their counts to the ring buffer), TSvals and segments past the maximum age are
    /// dropped; or everything goes. The kernel walks every bucket of the map under
    /// RCU: about 10 ns a bucket, so a map of 131 072 entries holds its CPU for some
    /// 1.3 ms.
    ///
    /// # Errors
    /// The kernel refused the test run.
    pub fn sweep(&self, what: Sweep) -> Result<(), PassiveBpfError> {
        // A minimum Ethernet frame of the local experimental EtherType (the kernel
        // refuses to build an IPv4 sk_buff shorter than its header); the mode byte
        // follows the header.
        let mut frame = [0u8; 60];
        frame[12] = 0x88;
        frame[13] = 0xb5;
        frame[14] = match what {
            Sweep::Flows => 0,
            Sweep::Drain => 1,
            Sweep::Pending => 2,
        };
        self.test_run(PROG_SWEEP, &frame, 0).map(drop)
    }

    /// Run the ingress (or egress) program on `frame`, an Ethernet frame stamped
    /// `tstamp_ns` (CLOCK_REALTIME, as the kernel stamps received frames; only the
    /// ingress program reads it): the engine sees exactly what it would see on the
    /// wire, with the time given. For replaying captures through the engine.
    ///
    /// # Errors
    /// The kernel refused the test run.
    pub fn run_on(
        &self,
        ingress: bool,
        frame: &[u8],
        tstamp_ns: u64,
    ) -> Result<(), PassiveBpfError> {
        let name = if ingress { PROG_INGRESS } else { PROG_EGRESS };
        self.test_run(name, frame, tstamp_ns).map(drop)
    }

    fn test_run(
        &self,
        name: &'static str,
        frame: &[u8],
        tstamp_ns: u64,
    ) -> Result<u32, PassiveBpfError> {
        let prog: &SchedClassifier = self
            .ebpf
            .program(name)
            .and_then(|p| p.try_into().ok())
            .ok_or_else(|| PassiveBpfError::Load {
                step: "finding a program in the object",
                source: name.into(),
            })?;
        let fd = prog.fd().map_err(load_err("the program's descriptor"))?;
        Ok(super::bpf_sys::test_run_tc(fd.as_fd(), frame, tstamp_ns)?)
    }

    /// Set CLOCK_REALTIME minus CLOCK_MONOTONIC, ns: how the programs turn a received
    /// frame's stamp into their clock, and how samples' times turn back.
    ///
    /// # Errors
    /// The map could not be written.
    pub fn set_clock(&mut self, realtime_minus_monotonic_ns: u64) -> Result<(), PassiveBpfError> {
        self.clock
            .set(0, realtime_minus_monotonic_ns, 0)
            .map_err(map_err("rttlab_clock"))
    }

    /// The offset [`Self::set_clock`] last set.
    ///
    /// # Errors
    /// The map could not be read.
    pub fn clock(&self) -> Result<u64, PassiveBpfError> {
        self.clock.get(&0, 0).map_err(map_err("rttlab_clock"))
    }

    /// Every aggregated histogram.
    ///
    /// # Errors
    /// The map could not be read.
    pub fn aggregates(&self) -> Result<Vec<(RawAggKey, RawAgg)>, PassiveBpfError> {
        self.aggregates
            .iter()
            .collect::<Result<Vec<_>, _>>()
            .map_err(map_err("rttlab_aggregates"))
    }

    /// One aggregated histogram, if any sample reached it.
    ///
    /// # Errors
    /// The map could not be read.
    pub fn aggregate(&self, key: &RawAggKey) -> Result<Option<RawAgg>, PassiveBpfError> {
        match self.aggregates.get(key, 0) {
            Ok(v) => Ok(Some(v)),
            Err(aya::maps::MapError::KeyNotFound) => Ok(None),
            Err(e) => Err(map_err("rttlab_aggregates")(e)),
        }
    }

    /// Aggregate samples from now on into generation `g` (0 or 1).
    ///
    /// # Errors
    /// The map could not be written.
    pub fn set_generation(&mut self, g: u8) -> Result<(), PassiveBpfError> {
        self.generation
            .set(0, u32::from(g), 0)
            .map_err(map_err("rttlab_generation"))
    }

    /// Read and remove every histogram of generation `g`.
    ///
    /// # Errors
    /// The map could not be read.
    pub fn take_aggregates(&mut self, g: u8) -> Result<Vec<(RawAggKey, RawAgg)>, PassiveBpfError> {
        let all = self.aggregates()?;
        let mut out = Vec::new();
        for (k, v) in all {
            if k.generation == g {
                self.forget_aggregate(&k)?;
                out.push((k, v));
            }
        }
        Ok(out)
    }

    /// Remove one aggregated histogram (its host is no longer watched).
    ///
    /// # Errors
    /// The map could not be written.
    pub fn forget_aggregate(&mut self, key: &RawAggKey) -> Result<(), PassiveBpfError> {
        match self.aggregates.remove(key) {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(e) => Err(map_err("rttlab_aggregates")(e)),
        }
    }

    /// Aggregate (or stop aggregating) samples answered by `addr`, with
    /// [`Aggregation::watched_only`].
    ///
    /// # Errors
    /// The map is full or could not be written.
    pub fn watch(&mut self, addr: u128, on: bool) -> Result<(), PassiveBpfError> {
        let k = RawAddr::from_u128(addr);
        let r = if on {
            self.watched.insert(k, 1, 0)
        } else {
            match self.watched.remove(&k) {
                Err(aya::maps::MapError::KeyNotFound) => Ok(()),
                r => r,
            }
        };
        r.map_err(map_err("rttlab_watched"))
    }
}

impl Drop for PassiveBpf {
    fn drop(&mut self) {
        if let Err(e) = self.detach() {
            eprintln!(
                "rttlab: detaching the in-kernel engine: {}",
                crate::error_chain(&e)
            );
        }
    }
}

fn classifier<'a>(
    ebpf: &'a mut Ebpf,
    name: &'static str,
) -> Result<&'a mut SchedClassifier, PassiveBpfError> {
    ebpf.program_mut(name)
        .and_then(|p| p.try_into().ok())
        .ok_or_else(|| PassiveBpfError::Load {
            step: "finding a program in the object (rebuild it with bpf/build.sh)",
            source: name.into(),
        })
}

fn fill_set<K: aya::Pod>(
    ebpf: &mut Ebpf,
    name: &'static str,
    keys: impl Iterator<Item = K>,
) -> Result<(), PassiveBpfError> {
    let map = ebpf.map_mut(name).ok_or_else(|| PassiveBpfError::Map {
        map: name,
        msg: "not in the object (rebuild it with bpf/build.sh)".into(),
    })?;
    let mut set: BpfMap<_, K, u8> = BpfMap::try_from(map).map_err(map_err(name))?;
    for k in keys {
        set.insert(k, 1, 0).map_err(map_err(name))?;
    }
    Ok(())
}

/// The last non-empty line of a message (a verifier log's verdict).
fn last_line(s: &str) -> String {
    s.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(s)
        .trim()
        .chars()
        .take(200)
        .collect()
}

/// The verifier's log in a program load error, else the error's chain.
fn verifier_log(e: &aya::programs::ProgramError) -> String {
    match e {
        aya::programs::ProgramError::LoadError { verifier_log, .. } => {
            let s = verifier_log.to_string();
            let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
            // The verdict is the line before the statistics ("processed N insns").
            lines
                .iter()
                .rev()
                .find(|l| !l.starts_with("processed ") && !l.starts_with("verification time"))
                .map(|l| (*l).to_owned())
                .unwrap_or(s)
        }
        other => crate::error_chain(other),
    }
}

/// CLOCK_REALTIME minus CLOCK_MONOTONIC, ns: the smallest of a few readings' gaps, so
/// that the error is the two reads' own cost (tens of ns).
pub fn realtime_minus_monotonic() -> u64 {
    let read = |clock| {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec out-pointer.
        unsafe { libc::clock_gettime(clock, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    };
    let mut best = (u64::MAX, 0);
    for _ in 0..5 {
        let m0 = read(libc::CLOCK_MONOTONIC);
        let r = read(libc::CLOCK_REALTIME);
        let m1 = read(libc::CLOCK_MONOTONIC);
        if m1 - m0 < best.0 {
            best = (m1 - m0, r.wrapping_sub(m0 + (m1 - m0) / 2));
        }
    }
    best.1
}

/// Remove the clsact qdisc of `interface` if no filter is left on it (this run added
/// it; another tool's filters keep it). In the caller's namespace.
fn remove_clsact_if_unused(interface: &str) {
    let others = [TcAttachType::Ingress, TcAttachType::Egress]
        .iter()
        .any(|&d| tc_filters(interface, d) > 0);
    if !others {
        let _ = super::interface::delete_clsact(interface);
    }
}

/// How many tc filters `interface` has on `dir` of its clsact qdisc.
fn tc_filters(interface: &str, dir: TcAttachType) -> usize {
    super::interface::clsact_filters(interface, dir == TcAttachType::Ingress)
        .map(|v| v.len())
        .unwrap_or(0)
}

/// Undo an attachment a run left ([`AttachRecord`]): its programs detached from the
/// interface (found by name), and the clsact qdisc removed if the run added it and
/// nothing else uses it. TCX links go with their process, so after a crash there is
/// nothing to do; while the run is alive its links stay, and this says so.
///
/// # Errors
/// The namespace could not be entered, a detach was refused, or the run is alive.
/// A missing interface or namespace took the programs with it: not an error.
pub fn revert(a: &AttachRecord) -> Result<(), String> {
    let interface = a.interface.as_str();
    let r = netns::run_in(a.netns.as_deref(), || -> Result<(), String> {
        let c = std::ffi::CString::new(interface).map_err(|e| e.to_string())?;
        // SAFETY: if_nametoindex reads a NUL-terminated string.
        if unsafe { libc::if_nametoindex(c.as_ptr()) } == 0 {
            return Ok(());
        }
        if a.mode == AttachMode::Tcx {
            // A TCX link dies with its last descriptor: a process that is gone left
            // nothing, and programs of our names there are another run's.
            if !std::path::Path::new(&format!("/proc/{}", a.pid)).exists() {
                return Ok(());
            }
            let mut left = Vec::new();
            for dir in [TcAttachType::Ingress, TcAttachType::Egress] {
                if let Ok((_, progs)) = SchedClassifier::query_tcx(interface, dir) {
                    for p in progs {
                        if p.name_as_str().is_some_and(|n| PROGRAM_NAMES.contains(&n)) {
                            left.push(p.id());
                        }
                    }
                }
            }
            if left.is_empty() {
                return Ok(());
            }
            return Err(format!(
                "the in-kernel engine (program ids {left:?}) is still attached to {interface} by a running rttlab (pid {}): its links go when it stops",
                a.pid
            ));
        }
        for dir in [TcAttachType::Ingress, TcAttachType::Egress] {
            for name in PROGRAM_NAMES {
                match tc::qdisc_detach_program(interface, dir, name) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(format!("detaching {name} from {interface}: {e}")),
                }
            }
        }
        if a.created_qdisc {
            remove_clsact_if_unused(interface);
        }
        Ok(())
    });
    match r {
        Ok(r) => r,
        Err(NetnsError::NotFound { .. }) => Ok(()),
        Err(e) => Err(crate::error_chain(&e)),
    }
}
