//! The in-kernel engine (`rttlab passive --engine bpf`, the agent's `--passive-iface`):
//! the TS and seq/ACK rules run in tc programs where the packets are
//! ([`crate::kernel::passive_bpf`], bpf/passive_rtt.bpf.c), and only samples, finished
//! flows or per-prefix histograms come up to user space. This module sets the programs
//! up from a [`Config`], turns their records into the [`Sample`]s and [`FlowEnd`]s the
//! user-space engine gives ([`record`]), and their counters into [`Counters`].
//!
//! The rules are the user-space engine's, decision for decision; where the kernel's
//! bounded state can only approximate the user-space queues (more than a few
//! retransmission episodes or gaps in one window, more than 4096 TSvals waiting in
//! one direction) it drops a sample rather than invent one. Replayed through both
//! engines, the test corpus gives the same samples (tests/passive_bpf.rs).

pub mod record;

use super::flow::FlowKey;
use super::{aggregate, Config, Counters, Method, Place, PpingDetail, PpingSample, Sample, Sink};
use crate::kernel::passive_bpf::{
    self, Aggregation, AttachJournal, AttachMode, Framing, PassiveBpf, PassiveBpfError, RawAgg,
    RawAggKey, RawCounters, Settings, Sweep,
};
use crate::wire::{LinkType, Skip};
use record::Record;
use std::time::Duration;

/// What the engine sends up, and how much it may hold; the rules come from
/// [`Config`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Each sample (the CLI's lines, summaries and histograms).
    pub events: bool,
    /// Each finished flow's counts (`--summary`'s retransmission columns, the
    /// engine counters of [`Counters`]).
    pub flow_events: bool,
    /// Histograms per prefix, aggregated in the kernel.
    pub aggregate: Option<Aggregation>,
    /// Most TSvals and segments waiting for their answer, over all flows
    /// (ePPing's `packet_ts` map: 131 072).
    pub max_pending: u32,
    /// Most histograms aggregated (ePPing's: 16 384).
    pub max_aggregates: u32,
    /// The ring buffer's size, bytes.
    pub events_bytes: u32,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            events: true,
            flow_events: true,
            aggregate: None,
            max_pending: 131_072,
            max_aggregates: 16_384,
            events_bytes: 4 << 20,
        }
    }
}

/// The programs' settings for the rules of `cfg` and the outputs of `o`.
pub fn settings(cfg: &Config, o: &Options) -> Settings {
    let addr = |a: &std::net::IpAddr| super::flow::Endpoint::new(*a, 0).addr;
    Settings {
        ts: cfg.ts,
        seq: cfg.seq,
        ts_any: cfg.ts_record == super::ts::Record::Any,
        karn: cfg.seq_rules.karn,
        sack: cfg.seq_rules.sack,
        events: o.events,
        flow_events: o.flow_events,
        aggregate: o.aggregate.clone(),
        rate_limit_ns: cfg.rate_limit_ns,
        idle_ns: cfg.idle_ns,
        max_age_ns: cfg.max_age_ns,
        max_flows: u32::try_from(cfg.max_flows).unwrap_or(u32::MAX),
        max_pending: o.max_pending,
        max_aggregates: o.max_aggregates,
        events_bytes: o.events_bytes,
        hosts: cfg.filter.hosts.iter().map(addr).collect(),
        ports: cfg.filter.ports.clone(),
        flows: cfg
            .filter
            .flows
            .iter()
            .map(|&(a, b)| record::raw_key(&FlowKey::of(a, b).0))
            .collect(),
        local: cfg.local.iter().map(addr).collect(),
    }
}

/// The kernel's own counters: what it dropped for lack of room, and what it chose not
/// to time.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct KernelCounters {
    /// New flows not tracked: the flow map was full (`--max-flows`).
    pub flows_full: u64,
    /// TSvals or segments not timed: the pending map was full (`--max-pending`).
    pub pending_full: u64,
    /// Samples not aggregated: the aggregate map was full.
    pub aggregates_full: u64,
    /// Samples or finished flows lost: the ring buffer was full (user space behind).
    pub events_lost: u64,
    /// Samples not aggregated: answered by a host not watched.
    pub unwatched: u64,
    /// Ring-buffer records user space could not decode.
    pub bad_records: u64,
    /// Times the kernel's bounded per-flow state could not follow the user-space
    /// engine exactly (see `RawCounters::approximated`): those flows may give fewer
    /// samples than the user-space engine would.
    pub approximated: u64,
    /// Replaying: frames the kernel's test run will not build (an untagged IPv4 frame
    /// shorter than an IPv4 header, IPv6 than an IPv6 one); live, the programs count
    /// such a frame as truncated.
    pub unreplayable: u64,
}

/// Whether BPF_PROG_TEST_RUN builds an sk_buff of Ethernet frame `f`: 14 bytes at
/// least, and a whole IP header after an untagged IPv4 or IPv6 EtherType
/// (bpf_prog_test_run_skb refuses less with EINVAL).
pub fn replayable(f: &[u8]) -> bool {
    match f.get(12..14) {
        Some([0x08, 0x00]) => f.len() >= 14 + 20,
        Some([0x86, 0xdd]) => f.len() >= 14 + 40,
        Some(_) => true,
        None => false,
    }
}

/// pping's arithmetic for the kernel's samples (pping's line format).
struct PpingState {
    origin_s: Option<u64>,
    min: crate::passive::flow::FastMap<(FlowKey, usize), f64>,
}

/// The engine, loaded; attached to an interface, or fed frames by [`Engine::replay`].
pub struct Engine {
    bpf: PassiveBpf,
    local: Vec<u128>,
    /// CLOCK_REALTIME minus the programs' clock: added to every time they report.
    report_offset: u64,
    pping: Option<PpingState>,
    retired: Counters,
    bad_records: u64,
    unreplayable: u64,
    generation: u8,
}

/// The most of a frame a replay hands the programs: BPF_PROG_TEST_RUN builds its
/// sk_buff in one page less head- and tailroom (`bpf_test_init`, about 3 700 bytes on
/// x86-64), so a jumbo or GRO frame is refused whole (EINVAL). The programs read only
/// headers, at offsets they bound below 1 100 bytes (Ethernet, VLAN tags, IP and its
/// extension headers masked to 0x3ff, then TCP's 60), and take every length from the IP
/// header: cut here, as a live capture's snap length cuts, a frame gives the same
/// samples.
pub const REPLAY_MAX_BYTES: usize = 2048;

/// The offset the programs get when frames are replayed: a frame's stamp is its capture
/// time plus this, so that the programs' clock reads capture time exactly.
const REPLAY_OFFSET: u64 = 1;

impl Engine {
    /// Load the programs for `cfg`'s rules and `o`'s outputs, for frames of `framing`.
    ///
    /// # Errors
    /// As [`PassiveBpf::load`]: no privilege, or a kernel without what the programs
    /// need ([`PassiveBpfError::is_unavailable`]).
    pub fn load(cfg: &Config, o: &Options, framing: Framing) -> Result<Self, PassiveBpfError> {
        let bpf = PassiveBpf::load(&settings(cfg, o), framing)?;
        let report_offset = bpf.clock()?;
        Ok(Self {
            bpf,
            local: cfg
                .local
                .iter()
                .map(|a| super::flow::Endpoint::new(*a, 0).addr)
                .collect(),
            report_offset,
            pping: (cfg.pping != PpingDetail::Off).then(|| PpingState {
                origin_s: None,
                min: Default::default(),
            }),
            retired: Counters::default(),
            bad_records: 0,
            unreplayable: 0,
            generation: 0,
        })
    }

    /// Attach to `interface` (in `netns`), journalled in `journal`.
    ///
    /// # Errors
    /// As [`PassiveBpf::attach`].
    pub fn attach(
        &mut self,
        interface: &str,
        netns: Option<&str>,
        mode: Option<AttachMode>,
        ingress_only: bool,
        journal: Box<dyn AttachJournal>,
    ) -> Result<AttachMode, PassiveBpfError> {
        self.bpf
            .attach(interface, netns, mode, ingress_only, journal)
    }

    /// How the programs are attached, if they are.
    pub fn attach_mode(&self) -> Option<AttachMode> {
        self.bpf.attach_mode()
    }

    /// Feed one captured frame through the ingress program, timed by its capture time
    /// (`ts_ns`, ns since the epoch) exactly: for replaying files and testing. A frame
    /// is cut to [`REPLAY_MAX_BYTES`]. An Ethernet frame goes as it is (of 14 bytes or
    /// more: shorter is no frame to the kernel); another is given an Ethernet header (the programs' framing) in place
    /// of its own, and one whose link header cannot be read is passed over, as the
    /// user-space engine skips it.
    ///
    /// # Errors
    /// The kernel refused the run.
    pub fn replay(
        &mut self,
        link: LinkType,
        frame: &[u8],
        ts_ns: u64,
    ) -> Result<(), PassiveBpfError> {
        if self.report_offset != 0 {
            self.bpf.set_clock(REPLAY_OFFSET)?;
            self.report_offset = 0;
        }
        let frame = &frame[..frame.len().min(REPLAY_MAX_BYTES)];
        if link == LinkType::Ethernet {
            if replayable(frame) {
                return self.bpf.run_on(true, frame, ts_ns + REPLAY_OFFSET);
            }
            self.unreplayable += 1;
            return Ok(());
        }
        let Ok((version, ip)) = link.network(frame) else {
            return Ok(());
        };
        let mut eth = Vec::with_capacity(14 + ip.len());
        eth.extend_from_slice(&[0; 12]);
        eth.extend_from_slice(if version == 4 {
            &[0x08, 0x00]
        } else {
            &[0x86, 0xdd]
        });
        eth.extend_from_slice(ip);
        self.bpf.run_on(true, &eth, ts_ns + REPLAY_OFFSET)
    }

    /// Wait up to `timeout` for records to read. The kernel wakes this wait early
    /// only when records fill an eighth of the ring: drain after it whatever it
    /// returned for.
    pub fn wait(&self, timeout: Duration) {
        let mut p = libc::pollfd {
            fd: self.bpf.events_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd; an interrupted or failed poll only ends the wait.
        unsafe { libc::poll(&mut p, 1, ms) };
    }

    /// Hand every record waiting in the ring buffer to `sink`; returns how many.
    pub fn drain(&mut self, sink: &mut impl Sink) -> usize {
        let mut n = 0;
        let mut batch: Vec<Record> = Vec::new();
        {
            let events = self.bpf.events();
            while let Some(item) = events.next() {
                match record::decode(&item) {
                    Some(r) => batch.push(r),
                    None => self.bad_records += 1,
                }
                n += 1;
                if batch.len() == 256 {
                    break;
                }
            }
        }
        for r in batch {
            self.deliver(r, sink);
        }
        if n == 256 {
            n += self.drain(sink);
        }
        n
    }

    fn deliver(&mut self, r: Record, sink: &mut impl Sink) {
        match r {
            Record::Sample {
                method,
                ts_ns,
                rtt_ns,
                min_ns,
                key,
                here,
            } => {
                let host = key.sender(here);
                let ts_ns = ts_ns.wrapping_add(self.report_offset);
                let place = if self.local.contains(&host.addr) {
                    Place::LocalHost
                } else {
                    Place::Network
                };
                let pping = match (&mut self.pping, method) {
                    (Some(p), Method::Ts) => Some(p.sample(key, here, ts_ns, rtt_ns)),
                    _ => None,
                };
                sink.sample(&Sample {
                    ts_ns,
                    rtt_ns,
                    min_ns,
                    method,
                    host,
                    peer: key.sender(1 - here),
                    place,
                    pping,
                });
            }
            Record::Flow(mut f) => {
                f.first_ns = f.first_ns.wrapping_add(self.report_offset);
                f.last_ns = f.last_ns.wrapping_add(self.report_offset);
                if let Some(p) = &mut self.pping {
                    p.min.remove(&(f.key, 0));
                    p.min.remove(&(f.key, 1));
                }
                self.retired.retire(&f);
                sink.flow_done(&f);
            }
        }
    }

    /// The periodic work, one map at a time (`what`): flows idle past the timeout
    /// leave the table (their counts come up as records), or stale entries are
    /// dropped; and a step of the system clock (more than 1 ms) is followed.
    ///
    /// # Errors
    /// The kernel refused the sweep.
    pub fn sweep(&mut self, what: Sweep) -> Result<(), PassiveBpfError> {
        if self.report_offset > REPLAY_OFFSET {
            let now = passive_bpf::realtime_minus_monotonic();
            if now.abs_diff(self.report_offset) > 1_000_000 {
                self.bpf.set_clock(now)?;
                self.report_offset = now;
            }
        }
        self.bpf.sweep(what)
    }

    /// The end: detach (no new packets), every flow still held leaves the table, and
    /// every record goes to `sink`.
    ///
    /// # Errors
    /// Detaching or the final sweep failed; the records are handed over anyway.
    pub fn finish(&mut self, sink: &mut impl Sink) -> Result<(), PassiveBpfError> {
        let detached = self.bpf.detach();
        self.drain(sink);
        let swept = self.bpf.sweep(Sweep::Drain);
        self.drain(sink);
        detached.and(swept)
    }

    /// The counters so far, as the user-space engine's, with the kernel's own.
    ///
    /// # Errors
    /// The counters could not be read.
    pub fn counters(&self) -> Result<(Counters, KernelCounters), PassiveBpfError> {
        let r = self.bpf.counters()?;
        Ok((self.engine_counters(&r), self.kernel_counters(&r)))
    }

    fn engine_counters(&self, r: &RawCounters) -> Counters {
        let mut c = self.retired.clone();
        c.packets = r.packets;
        c.tcp = r.tcp;
        c.not_tcp = r.not_tcp;
        c.filtered = r.filtered;
        c.skipped = [
            (Skip::Truncated, r.truncated),
            (Skip::NotIp, r.not_ip),
            (Skip::BadIpHeader, r.bad_ip_header),
            (Skip::Fragment, r.fragment),
            (Skip::BadTcpHeader, r.bad_tcp_header),
        ]
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .collect();
        c.no_timestamps = r.no_timestamps;
        c.unusable_timestamps = r.unusable_timestamps;
        c.one_way = r.one_way;
        c.samples_ts = r.samples_ts;
        c.samples_seq = r.samples_seq;
        c.rate_limited = r.rate_limited;
        c.flows.created = r.flows_created;
        c.flows.expired_idle = r.flows_expired;
        c.flows.closed = r.flows_closed;
        c.flows.reused = r.flows_reused;
        c
    }

    fn kernel_counters(&self, r: &RawCounters) -> KernelCounters {
        KernelCounters {
            flows_full: r.flows_full,
            pending_full: r.pending_full,
            aggregates_full: r.aggregates_full,
            events_lost: r.events_lost,
            unwatched: r.unwatched,
            bad_records: self.bad_records,
            approximated: r.approximated,
            unreplayable: self.unreplayable,
        }
    }

    /// Every histogram aggregated so far (in generation 0: the totals, when
    /// [`Self::take_aggregates`] is never called), as the user-space aggregation
    /// gives them; `n_bounds` is how many bounds the engine was loaded with.
    ///
    /// # Errors
    /// The map could not be read.
    pub fn aggregates(
        &self,
        n_bounds: usize,
    ) -> Result<Vec<(aggregate::Key, aggregate::Hist)>, PassiveBpfError> {
        let mut v: Vec<_> = self
            .bpf
            .aggregates()?
            .iter()
            .map(|(k, a)| hist(k, a, n_bounds))
            .collect();
        v.sort_by_key(|x| x.0);
        Ok(v)
    }

    /// The histograms since the last call (or the start), and a fresh start: samples
    /// go to the other generation from now on, and this one is read and emptied.
    ///
    /// # Errors
    /// The map could not be read or written.
    pub fn take_aggregates(
        &mut self,
        n_bounds: usize,
    ) -> Result<Vec<(aggregate::Key, aggregate::Hist)>, PassiveBpfError> {
        let old = self.generation;
        self.generation ^= 1;
        self.bpf.set_generation(self.generation)?;
        let mut v: Vec<_> = self
            .bpf
            .take_aggregates(old)?
            .iter()
            .map(|(k, a)| hist(k, a, n_bounds))
            .collect();
        v.sort_by_key(|x| x.0);
        Ok(v)
    }

    /// The loaded programs and maps, for what the engine does not wrap.
    pub fn bpf(&mut self) -> &mut PassiveBpf {
        &mut self.bpf
    }
}

/// A kernel histogram as [`aggregate`]'s.
pub fn hist(k: &RawAggKey, a: &RawAgg, n_bounds: usize) -> (aggregate::Key, aggregate::Hist) {
    let prefix = super::flow::Endpoint::from_raw(k.prefix.to_u128(), 0).ip();
    let key = aggregate::Key {
        prefix,
        prefix_len: k.prefix_len,
        method: if k.method == 0 {
            Method::Ts
        } else {
            Method::Seq
        },
        place: if k.place == 0 {
            Place::Network
        } else {
            Place::LocalHost
        },
    };
    let n = n_bounds.min(passive_bpf::MAX_BOUNDS);
    let h = aggregate::Hist {
        count: a.count,
        sum_ns: a.sum_ns,
        min_ns: if a.count == 0 { u64::MAX } else { !a.min_inv },
        max_ns: a.max_ns,
        buckets: a.buckets[..=n].to_vec(),
    };
    (key, h)
}

impl PpingState {
    /// pping's arithmetic for a TS sample closing at `ts_ns` after `rtt_ns`, as the
    /// user-space engine's `pping_sample` computes it (the origin is the first
    /// sample's second rather than the first packet's: only whole seconds move, which
    /// pping's µs truncation does not see).
    fn sample(&mut self, key: FlowKey, here: usize, ts_ns: u64, rtt_ns: u64) -> PpingSample {
        let origin_s = *self.origin_s.get_or_insert(ts_ns / 1_000_000_000);
        let cap_s = PpingSample::cap_time(ts_ns, origin_s);
        let rtt_s = cap_s - PpingSample::cap_time(ts_ns.saturating_sub(rtt_ns), origin_s);
        let m = self.min.entry((key, here)).or_insert(f64::INFINITY);
        if *m > rtt_s {
            *m = rtt_s;
        }
        PpingSample {
            cap_s,
            origin_s,
            rtt_s,
            min_s: *m,
            bytes: None,
        }
    }
}
