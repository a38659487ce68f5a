//! Passive RTT from packet headers: the TS engine ([`ts`]), the seq/ACK engine
//! ([`seq`]), both fed by one [`Analyzer`] that keeps the [`flow`] table, and the
//! emulation of a sampled cloud flow metric ([`sampler`], seed 000).
//!
//! Either engine works wherever the capture sees both directions of a flow: on an
//! end host or on a gateway. A sample is a loop from the capture point to the host
//! that answered and back. When that host is the capture point itself (a capture on
//! an end host), the "RTT" is the host's own time to answer — think time or delayed
//! ACK, pping's known flaw — so every sample says which it is ([`Place`]).

pub mod aggregate;
pub mod flow;
pub mod in_kernel;
pub mod live;
pub mod sampler;
pub mod seq;
pub mod summary;
pub mod ts;

use crate::wire::{self, tcp, LinkType, Skip};
use flow::{Endpoint, Flow, FlowCounters, FlowEnd, FlowKey, FlowTable};
use std::net::IpAddr;

/// How a sample was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// TSval → the TSecr that echoes it.
    Ts,
    /// Data segment → the ACK that covers it.
    Seq,
}

impl Method {
    /// `ts` or `seq`: the method as text reports, summaries and histograms name it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ts => "ts",
            Self::Seq => "seq",
        }
    }
}

/// What a sample's loop went through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Place {
    /// Capture point → a remote host → capture point.
    Network,
    /// The answering host is the capture point's own: the time it took to answer.
    LocalHost,
}

/// One RTT sample.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Capture time of the packet that closed the loop, ns since the epoch.
    pub ts_ns: u64,
    /// The RTT: this packet's capture time minus that of the packet it answers (the TSval's
    /// first sighting, or the data segment's), ns.
    pub rtt_ns: u64,
    /// The smallest RTT so far by this method to this host in this flow.
    pub min_ns: u64,
    /// Which engine gave the sample.
    pub method: Method,
    /// The host whose answer closed the loop (the source of the echo or ACK).
    pub host: Endpoint,
    /// The other end.
    pub peer: Endpoint,
    /// Whether the loop crossed the network, or is `host`'s own time to answer (when
    /// `host` is one of [`Config::local`]).
    pub place: Place,
    /// TS samples: the same sample in pping's arithmetic, for its output formats.
    pub pping: Option<PpingSample>,
}

/// A TS sample as pping computes it (pping.cpp, `process_packet`): capture times are
/// doubles in seconds since the first usable packet's whole second, truncated to the
/// microsecond, and the RTT their difference. Printed from these, rttlab's lines are
/// pping's to the character (rounding included: 9.9999…µs prints "10.00us").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PpingSample {
    /// `capTm`: the capture time, seconds after `origin_s`.
    pub cap_s: f64,
    /// `offTm`: the whole second of the first packet with usable timestamps.
    pub origin_s: u64,
    /// The RTT in pping's arithmetic: `cap_s` minus the echoed TSval's capture time, each
    /// truncated to the µs, in seconds.
    pub rtt_s: f64,
    /// The flow's minimum so far, in the same arithmetic.
    pub min_s: f64,
    /// `fBytes`, `dBytes`, `pBytes` of pping's `-m` lines, when kept
    /// ([`PpingDetail::TimesAndBytes`]).
    pub bytes: Option<[u64; 3]>,
}

impl PpingSample {
    /// pping's capture time of `ns` (since the epoch) after `origin_s`.
    pub fn cap_time(ns: u64, origin_s: u64) -> f64 {
        let (s, us) = (ns / 1_000_000_000, ns % 1_000_000_000 / 1000);
        (s as i64 - origin_s as i64) as f64 + us as f64 * 1e-6
    }
}

/// Where samples and finished flows go.
pub trait Sink {
    /// One RTT sample, as soon as an engine gives it.
    fn sample(&mut self, s: &Sample);
    /// A flow left the table (closed, idle, evicted, or the input ended).
    fn flow_done(&mut self, _f: &FlowEnd) {}
}

/// Which packets to look at: a packet must match every list that is not empty (hosts,
/// ports, flows), and any one entry of a list; empty lists match everything.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Addresses (`--host`): a packet matches with one of them at either end.
    pub hosts: Vec<IpAddr>,
    /// Ports (`--port`): a packet matches with one of them at either end.
    pub ports: Vec<u16>,
    /// Flows between two endpoints, either way round.
    pub flows: Vec<(Endpoint, Endpoint)>,
}

impl Filter {
    fn is_empty(&self) -> bool {
        self.hosts.is_empty() && self.ports.is_empty() && self.flows.is_empty()
    }

    /// `hosts`: [`Self::hosts`] in [`Endpoint`]'s form, converted once, not per packet.
    fn matches(&self, hosts: &[u128], src: Endpoint, dst: Endpoint) -> bool {
        let host = |e: Endpoint| hosts.contains(&e.addr);
        (self.hosts.is_empty() || host(src) || host(dst))
            && (self.ports.is_empty()
                || self.ports.contains(&src.port)
                || self.ports.contains(&dst.port))
            && (self.flows.is_empty()
                || self
                    .flows
                    .iter()
                    .any(|&(a, b)| (a, b) == (src, dst) || (a, b) == (dst, src)))
    }
}

/// Settings of an analysis.
#[derive(Debug, Clone)]
pub struct Config {
    /// Run the TS engine (`--method ts` or `both`).
    pub ts: bool,
    /// Run the seq/ACK engine (`--method seq` or `both`). Off, ACKs are still followed to
    /// see a flow's FINs acknowledged.
    pub seq: bool,
    /// Which segments' TSvals the TS engine remembers (`--ts-rule`).
    pub ts_record: ts::Record,
    /// How the seq/ACK engine treats retransmissions and SACK (`--seq-rule`).
    pub seq_rules: seq::Rules,
    /// Forget a flow silent this long (default 10 s).
    pub idle_ns: u64,
    /// Most flows held (default 100 000).
    pub max_flows: usize,
    /// A TSval or segment older than this gives no sample (pping's tsvalMaxAge, 10 s).
    pub max_age_ns: u64,
    /// Per flow direction, the least time between two TSvals or two segments given an
    /// entry to time (ePPing's `--rate-limit`, its default 100 ms); 0: every one. A
    /// TSval or segment not given one is still followed (the flow's state, the
    /// retransmission rules), only never timed.
    pub rate_limit_ns: u64,
    /// The capture point's own addresses: samples answered by them are local.
    pub local: Vec<IpAddr>,
    /// Which packets reach the engines; the others count as `filtered`.
    pub filter: Filter,
    /// Emulate a sampled flow metric alongside the engines.
    pub sampler: Option<sampler::SamplerConfig>,
    /// What of pping's own arithmetic the TS samples carry, for its output formats:
    /// none (the engine alone: ~60 ns a sample of divisions and doubles saved), its
    /// times, or its times and byte counts (`-m`: a second queue beside the TSvals).
    pub pping: PpingDetail,
}

/// See [`Config::pping`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PpingDetail {
    /// No pping arithmetic: [`Sample::pping`] is `None` (`--json`, and the agent).
    #[default]
    Off,
    /// pping's times and minimum (pping's default lines).
    Times,
    /// pping's times and its byte counts too (`-m`, `--machine`).
    TimesAndBytes,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            ts: true,
            seq: true,
            ts_record: ts::Record::Data,
            seq_rules: seq::Rules::RTTLAB,
            idle_ns: 10_000_000_000,
            max_flows: 100_000,
            max_age_ns: 10_000_000_000,
            rate_limit_ns: 0,
            local: Vec::new(),
            filter: Filter::default(),
            sampler: None,
            pping: PpingDetail::Off,
        }
    }
}

/// Packet counters: every packet read is in exactly one of `tcp`, `not_tcp`,
/// `filtered` or a `skipped` reason.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Counters {
    /// Every frame given to [`Analyzer::packet`].
    pub packets: u64,
    /// TCP segments that passed the filter and reached the engines.
    pub tcp: u64,
    /// IP packets of another transport (UDP, ICMP, ...).
    pub not_tcp: u64,
    /// TCP segments the [`Filter`] left out.
    pub filtered: u64,
    /// Packets not decoded, by reason (see [`Skip`]).
    pub skipped: Vec<(Skip, u64)>,
    /// TCP packets without the timestamps option.
    pub no_timestamps: u64,
    /// TCP packets with timestamps the TS engine must ignore (TSval 0, or TSecr 0
    /// outside a SYN).
    pub unusable_timestamps: u64,
    /// With `--ts-rule pping`: packets of a direction whose reverse was not seen yet.
    pub one_way: u64,
    /// Samples the TS engine gave.
    pub samples_ts: u64,
    /// Samples the seq/ACK engine gave (those within [`Config::max_age_ns`]).
    pub samples_seq: u64,
    /// Seq/ACK engine, over flows that left the table: see [`seq::SeqHalf`].
    pub retransmissions: u64,
    /// Retransmissions of data the receiver had already acknowledged (also counted in
    /// `retransmissions`).
    pub spurious_retransmissions: u64,
    /// Segments below the highest sequence seen but never seen themselves.
    pub out_of_order: u64,
    /// ACKs that ended at a retransmitted segment, so gave no sample (Karn's rule).
    pub karn_skipped: u64,
    /// ACKs that ended at a segment already timed at its SACK, so gave no sample.
    pub sacked_skipped: u64,
    /// Seq/ACK samples taken at a SACK block.
    pub sack_timed: u64,
    /// Segments and TSvals not tracked because a flow had too many outstanding.
    pub untracked: u64,
    /// TSvals and segments not timed because their direction had given one an entry
    /// less than [`Config::rate_limit_ns`] before (ePPing's sampling).
    pub rate_limited: u64,
    /// The flow table's counters (created, expired, evicted, closed, reused, peak).
    pub flows: FlowCounters,
}

impl Counters {
    /// Add a departing flow's engine counts.
    pub fn retire(&mut self, f: &FlowEnd) {
        for h in &f.halves {
            self.retransmissions += h.retransmissions;
            self.spurious_retransmissions += h.spurious;
            self.out_of_order += h.out_of_order;
            self.karn_skipped += h.karn_skipped;
            self.sacked_skipped += h.sacked_skipped;
            self.sack_timed += h.sack_timed;
            self.untracked += h.untracked;
            self.rate_limited += h.rate_limited;
        }
    }
}

/// The two engines, the flow table and the counters, fed one packet at a time.
pub struct Analyzer {
    cfg: Config,
    local: Vec<u128>,
    filtering: bool,
    filter_hosts: Vec<u128>,
    flows: FlowTable,
    counters: Counters,
    skipped: [u64; Skip::ALL.len()],
    next_expire_ns: u64,
    sampler: Option<sampler::Sampler>,
    /// pping's time origin: the whole second of the first packet with usable
    /// timestamps.
    origin_s: Option<u64>,
}

/// How often (capture time) idle flows are swept.
const EXPIRE_EVERY_NS: u64 = 1_000_000_000;

impl Analyzer {
    /// An analyzer with an empty flow table, set up as `cfg` says.
    pub fn new(cfg: Config) -> Self {
        let local = cfg
            .local
            .iter()
            .map(|&a| Endpoint::new(a, 0).addr)
            .collect();
        let filter_hosts = cfg
            .filter
            .hosts
            .iter()
            .map(|&h| Endpoint::new(h, 0).addr)
            .collect();
        Self {
            filtering: !cfg.filter.is_empty(),
            filter_hosts,
            sampler: cfg.sampler.map(sampler::Sampler::new),
            flows: FlowTable::new(cfg.idle_ns, cfg.max_flows),
            cfg,
            local,
            counters: Counters::default(),
            skipped: [0; Skip::ALL.len()],
            next_expire_ns: 0,
            origin_s: None,
        }
    }

    /// One captured frame of `link` type, captured at `now` (ns since the epoch).
    pub fn packet(&mut self, now: u64, link: LinkType, frame: &[u8], sink: &mut impl Sink) {
        self.counters.packets += 1;
        let seg = match wire::net::decode_tcp(link, frame) {
            Ok(Some(seg)) => seg,
            Ok(None) => {
                self.counters.not_tcp += 1;
                return;
            }
            Err(s) => {
                self.skipped[s.index()] += 1;
                return;
            }
        };
        let t = seg.tcp;
        let src = Endpoint::from_raw(seg.src, t.src_port());
        let dst = Endpoint::from_raw(seg.dst, t.dst_port());
        if self.filtering && !self.cfg.filter.matches(&self.filter_hosts, src, dst) {
            self.counters.filtered += 1;
            return;
        }
        self.counters.tcp += 1;
        self.expire_idle(now, sink);
        let flags = t.flags();
        let payload = seg.transport_len.saturating_sub(t.header_len());
        let seglen = payload + u32::from(flags & tcp::SYN != 0) + u32::from(flags & tcp::FIN != 0);
        let (key, d) = FlowKey::of(src, dst);
        if let Some(s) = self.sampler.as_mut() {
            // The metric watches a VM: its data going out, ACKs coming in. Without
            // --local every host is watched.
            let watched = |e: Endpoint| self.local.is_empty() || self.local.contains(&e.addr);
            s.packet(
                now,
                key,
                d,
                t.seq(),
                seglen,
                (flags & tcp::ACK != 0).then(|| t.ack()),
                watched(src),
                watched(dst),
            );
        }
        let c = &mut self.counters;
        let mut flow = self.flows.touch(key, now, |f| retire(c, sink, &f));
        if flags & (tcp::SYN | tcp::ACK) == tcp::SYN {
            match flow.halves[d].syn_seq {
                Some(s) if s == t.seq() => {}
                None if flow.halves[d].packets == 0 => {}
                _ => flow = self.flows.restart(key, now, |f| retire(c, sink, &f)),
            }
            flow.halves[d].syn_seq = Some(t.seq());
        }
        let here = d;
        flow.halves[here].packets += 1;
        flow.halves[here].bytes += u64::from(seg.ip_len);
        let place = if self.local.contains(&src.addr) {
            Place::LocalHost
        } else {
            Place::Network
        };
        let from = SampleSource {
            now,
            here,
            host: src,
            peer: dst,
            place,
        };
        if self.cfg.ts {
            let origin = &mut self.origin_s;
            let c = &mut self.counters;
            ts_sample(
                &self.cfg,
                c,
                origin,
                flow,
                &from,
                &t,
                frame.len(),
                seglen,
                sink,
            );
        }
        seq_sample(&self.cfg, &mut self.counters, flow, &from, &t, seglen, sink);
        if flags & tcp::FIN != 0 {
            flow.halves[here].fin_end = Some(t.seq().wrapping_add(seglen));
        }
        if flags & tcp::RST != 0 {
            flow.reset = true;
        }
        if flow.finished() {
            if let Some(f) = self.flows.close(&key) {
                retire(&mut self.counters, sink, &f);
            }
        }
    }

    /// Once a second of capture time: flows idle too long go to the sink.
    fn expire_idle(&mut self, now: u64, sink: &mut impl Sink) {
        if now < self.next_expire_ns {
            return;
        }
        let c = &mut self.counters;
        self.flows.expire(now, |f| retire(c, sink, &f));
        self.next_expire_ns = now + EXPIRE_EVERY_NS;
    }

    /// The input ended: every flow still held goes to the sink.
    pub fn finish(&mut self, sink: &mut impl Sink) {
        let c = &mut self.counters;
        self.flows.drain(|f| retire(c, sink, &f));
    }

    /// Counters so far.
    pub fn counters(&self) -> Counters {
        let mut c = self.counters.clone();
        c.skipped = Skip::ALL
            .iter()
            .map(|&s| (s, self.skipped[s.index()]))
            .filter(|&(_, n)| n > 0)
            .collect();
        c.flows = self.flows.counters;
        c
    }

    /// The sampled metric's periods, when `--sampler` is on.
    pub fn sampler_periods(&self) -> Option<Vec<sampler::Period>> {
        self.sampler.as_ref().map(sampler::Sampler::periods)
    }

    /// Flows held now.
    pub fn active_flows(&self) -> usize {
        self.flows.len()
    }
}

/// A flow leaves the table: its engine counts into the run's, its end to the sink.
fn retire(counters: &mut Counters, sink: &mut impl Sink, f: &Flow) {
    let end = FlowEnd::of(f);
    counters.retire(&end);
    sink.flow_done(&end);
}

/// Where a packet's samples come from: its capture time, its direction in its flow,
/// the host that sent it and the one it went to.
struct SampleSource {
    now: u64,
    here: usize,
    host: Endpoint,
    peer: Endpoint,
    place: Place,
}

impl SampleSource {
    /// Hand the sink a sample of `method` taken at this packet, the flow's minimum
    /// for that method and direction brought down to it first.
    fn emit(
        &self,
        flow: &mut Flow,
        method: Method,
        rtt: u64,
        pping: Option<PpingSample>,
        sink: &mut impl Sink,
    ) {
        let m = &mut flow.min_ns[method as usize][self.here];
        *m = (*m).min(rtt);
        sink.sample(&Sample {
            ts_ns: self.now,
            rtt_ns: rtt,
            min_ns: *m,
            method,
            host: self.host,
            peer: self.peer,
            place: self.place,
            pping,
        });
    }
}

/// The TS engine's part of a packet: time the TSecr it echoes against the other
/// direction's recorded TSval, then record its own TSval (pping's rules).
#[expect(
    clippy::too_many_arguments,
    reason = "the engine's parts a packet touches, kept apart so the flow stays borrowed"
)]
fn ts_sample(
    cfg: &Config,
    counters: &mut Counters,
    origin_s: &mut Option<u64>,
    flow: &mut Flow,
    from: &SampleSource,
    t: &tcp::Tcp<'_>,
    frame_len: usize,
    seglen: u32,
    sink: &mut impl Sink,
) {
    let (here, there, now) = (from.here, 1 - from.here, from.now);
    let flags = t.flags();
    let (val, ecr) = match t.timestamps() {
        None => {
            counters.no_timestamps += 1;
            return;
        }
        // pping's test: TSval 0 is "no timestamp", and only a SYN may carry TSecr 0
        // (RFC 7323 §3.2).
        Some((val, ecr)) if val == 0 || (ecr == 0 && flags != tcp::SYN) => {
            counters.unusable_timestamps += 1;
            return;
        }
        Some(stamps) => stamps,
    };
    let detail = cfg.pping;
    let origin_s = if detail == PpingDetail::Off {
        0
    } else {
        *origin_s.get_or_insert(now / 1_000_000_000)
    };
    flow.halves[here].ts.seen = true;
    let any = cfg.ts_record == ts::Record::Any;
    if any && !flow.halves[there].ts.seen {
        counters.one_way += 1;
        return;
    }
    // pping counts a frame's bytes once both directions were seen (only its own
    // formats show them).
    let half = &mut flow.halves[here].pping;
    if detail != PpingDetail::Off {
        half.sent += frame_len as u64;
    }
    let sent = half.sent;
    if let Some((rtt, at)) = flow.halves[there].ts.echo(ecr, now, cfg.max_age_ns) {
        counters.samples_ts += 1;
        let pping =
            (detail != PpingDetail::Off).then(|| pping_sample(flow, here, now, rtt, origin_s, at));
        from.emit(flow, Method::Ts, rtt, pping, sink);
    }
    if any || seglen > 0 {
        let bytes = detail == PpingDetail::TimesAndBytes;
        let at = bytes.then(|| ts::PpingBytesAt {
            sent,
            departed: flow.halves[here].pping.departed,
        });
        flow.halves[here].ts.record(val, now, at, cfg.rate_limit_ns);
    }
}

/// The seq/ACK engine's part of a packet: time the data its ACK (or SACK)
/// covers, then record its own data. With seq off, only the acknowledged sequence is
/// kept: a flow's end is judged by acknowledged FINs.
fn seq_sample(
    cfg: &Config,
    counters: &mut Counters,
    flow: &mut Flow,
    from: &SampleSource,
    t: &tcp::Tcp<'_>,
    seglen: u32,
    sink: &mut impl Sink,
) {
    let (here, there) = (from.here, 1 - from.here);
    let acks = t.flags() & tcp::ACK != 0;
    if !cfg.seq {
        let a = &mut flow.halves[there].seq.acked;
        if acks && a.is_none_or(|x| seq::before(x, t.ack())) {
            *a = Some(t.ack());
        }
        return;
    }
    if acks {
        let sacks = t.options().find_map(|o| match o {
            wire::TcpOption::Sack(b) => Some(b),
            _ => None,
        });
        let sacked = sacks.into_iter().flatten();
        let timed = flow.halves[there]
            .seq
            .ack(t.ack(), sacked, cfg.seq_rules, from.now);
        if let Some(rtt) = timed.filter(|&rtt| rtt <= cfg.max_age_ns) {
            counters.samples_seq += 1;
            from.emit(flow, Method::Seq, rtt, None, sink);
        }
    }
    if seglen > 0 {
        flow.halves[here]
            .seq
            .segment(t.seq(), seglen, from.now, cfg.rate_limit_ns);
    }
}

/// A TS sample in pping's arithmetic; `at`: pping's byte counts kept with the
/// echoed TSval. Updates the flow's pping minimum and byte marks as pping does.
fn pping_sample(
    flow: &mut Flow,
    here: usize,
    now: u64,
    rtt: u64,
    origin_s: u64,
    at: Option<ts::PpingBytesAt>,
) -> PpingSample {
    let cap_s = PpingSample::cap_time(now, origin_s);
    let rtt_s = cap_s - PpingSample::cap_time(now - rtt, origin_s);
    let min = &mut flow.min_pping[here];
    if *min > rtt_s {
        *min = rtt_s;
    }
    let bytes = at.map(|at| {
        let h = &mut flow.halves[here].pping;
        let since_last = h.sent - h.at_last_sample;
        h.at_last_sample = h.sent;
        flow.halves[1 - here].pping.departed = at.sent;
        [at.sent, at.departed, since_last]
    });
    PpingSample {
        cap_s,
        origin_s,
        rtt_s,
        min_s: flow.min_pping[here],
        bytes,
    }
}
