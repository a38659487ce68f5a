//! Joining the client's and the server's parts of each transaction
//! ([`join`] → [`Transaction`]) and recording them: the components' histograms, the
//! events and the causes they name, the bands of the round trip, the slowest share
//! ([`Recorder`]).

use super::counters::{probed, Sends};
use super::result::{AnatomyResult, Cause, Components, Composition, EventCounts, OneWay, Tail};
use super::slowest::{self, tail_count, Slowest, PPM_PER_PCT};
use super::trailer::ServerPart;
use crate::stats::{LatencyHistogram, Percentile, Summary};
use serde::{Deserialize, Serialize};

/// What the client kept of one transaction, all CLOCK_REALTIME ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientPart {
    /// What the server's part names it by (UDP: the echoed, possibly wrapped, sequence).
    pub seq: u32,
    /// The client's own number of the transaction, from 1.
    pub number: u64,
    /// Just before `send()`.
    pub sent: u64,
    /// The response arrived (RX stamp of its last packet).
    pub rx: Option<u64>,
    /// `recv()` returned the whole response.
    pub returned: u64,
    /// TCP: the request's last byte was acknowledged (TX ACK stamp).
    pub acked: Option<u64>,
    /// The request's SND stamps: the first says when it left the stack, more are its
    /// retransmissions.
    pub sends: Sends,
    /// The CPU the client sent from and the one `recv()` returned on.
    pub cpu_sent: u32,
    /// The CPU `recv()` returned on (differs from `cpu_sent`: [`Events::client_migrated`]).
    pub cpu_returned: u32,
    /// The client's kernel probes a tail loss first ([`probes_tail_loss`](super::probes_tail_loss)).
    pub tlp: bool,
    /// TCP_CRR: `connect()` was called → it returned (the handshake), before `sent`.
    pub connect_ns: Option<u64>,
}

/// What touched one transaction besides how long each component took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Events {
    /// Segments of the request the client sent again. A request of one segment: a tail
    /// loss probe (when the kernel sent one), then RTOs (KERNEL_RTO §5–6); a lost
    /// response also makes the client send its request again, whose ACK rode on that
    /// response. A longer one: RTOs and loss recovery ([`Sends::recovery`]).
    pub request_retransmissions: u8,
    /// µs from the request's first send to its last segment's last retransmission.
    pub request_retransmitted_after_us: Option<u32>,
    /// The first of them was the client's tail loss probe; the others were RTOs and
    /// loss recovery ([`RetransCounters`](super::RetransCounters)).
    pub request_tlp: bool,
    /// Of them, those loss recovery sent (a request longer than a segment).
    #[serde(default)]
    pub request_recovery: u8,
    /// The same of the response, sent again by the server.
    pub response_retransmissions: u8,
    /// µs from the response's first send to its last segment's last retransmission;
    /// `None` when that segment went once.
    pub response_retransmitted_after_us: Option<u32>,
    /// The first of the response's retransmissions was the server's tail loss probe.
    pub response_tlp: bool,
    /// Of the response's retransmissions, those the server's loss recovery sent (a
    /// response longer than a segment).
    #[serde(default)]
    pub response_recovery: u8,
    /// TCP: the server's delayed-ACK timer touched the request: its ACK came alone,
    /// [`DELACK_MIN_NS`] or more after the request left and before the response
    /// (which cost the round trip nothing: the client waits for the response); or
    /// its last byte was held [`DELACK_MIN_NS`] or more in the client's stack, which
    /// only an ACK that late releases (it cost `client_send`, [`Events::cause`]).
    pub delayed_ack: bool,
    /// The client's `recv()` returned on another CPU than `send()` was called on.
    pub client_migrated: bool,
    /// The server read the request on another CPU than the request before it.
    pub server_migrated: bool,
}

impl Events {
    /// The retransmissions of both ends by kind: (tail loss probes, RTOs, loss
    /// recovery).
    pub fn by_kind(&self) -> (u8, u8, u8) {
        self.kinds_of(true, true)
    }

    /// The retransmissions of the request (when `request`) and of the response (when
    /// `response`) by kind: (tail loss probes, RTOs, loss recovery). A message's
    /// first retransmission may be its probe, loss recovery sent those it counts, and
    /// the RTO timer the rest.
    fn kinds_of(&self, request: bool, response: bool) -> (u8, u8, u8) {
        let side = |on: bool, again: u8, tlp: bool, recovery: u8| {
            let (again, tlp, recovery) = if on {
                (again, u8::from(tlp), recovery)
            } else {
                (0, 0, 0)
            };
            (
                tlp,
                again.saturating_sub(tlp).saturating_sub(recovery),
                recovery,
            )
        };
        let a = side(
            request,
            self.request_retransmissions,
            self.request_tlp,
            self.request_recovery,
        );
        let b = side(
            response,
            self.response_retransmissions,
            self.response_tlp,
            self.response_recovery,
        );
        (
            a.0.saturating_add(b.0),
            a.1.saturating_add(b.1),
            a.2.saturating_add(b.2),
        )
    }

    /// The event that cost the `component`-th of [`Components::parts`] of `t` its
    /// time: one on the transaction's critical path whose time lies inside that
    /// component, or none (an event that happened beside the wait names nothing).
    ///
    /// - **network** (client TX → server RX, server TX → client RX): a retransmission
    ///   the transaction waited for. The copy that got through left `after` µs after
    ///   the first send (RFC 6298 §5, `tcp_retransmit_timer`; RFC 8985 §7,
    ///   `tcp_send_loss_probe`), so waiting for it makes the network part at least
    ///   `after`: a network part shorter than that got an earlier copy through and the
    ///   retransmission was spurious (an ACK lost or late). A message whose last
    ///   segment went once but earlier ones again (loss recovery,
    ///   `tcp_xmit_retransmit_queue`) was complete only with them. By kind, an RTO
    ///   first, then the tail loss probe, then loss recovery.
    /// - **client_send** (send() → the request's last byte leaves the stack): a
    ///   delayed ACK, when that byte waited at least [`DELACK_MIN_NS`] in the client's
    ///   stack. A written byte is held that long only for an ACK — Nagle's algorithm
    ///   (RFC 1122 §4.2.3.4, RFC 896; `tcp_nagle_check` with Minshall's variant,
    ///   `tcp_minshall_check`: a short segment waits while an earlier short one is
    ///   unacknowledged) or a closed window — and an ACK that late is the receiver's
    ///   delayed-ACK timer's (RFC 1122 §4.2.3.2; `tcp_send_delayed_ack`, at least
    ///   TCP_DELACK_MIN). A delayed ACK of a request the server is answering anyway
    ///   (its think time past 40 ms, seed 000) delays nothing: the client waits for
    ///   the response, not the ACK.
    /// - **server_recv**, **client_recv** (a packet's arrival → its reader's `recv()`
    ///   returns): a wake-up on another CPU than the reader last ran on (the
    ///   scheduler's `try_to_wake_up`: a migration, a cold cache, an IPI).
    /// - **server_app**: nothing the kernels report; the server's own time.
    ///
    /// UDP (`tcp` false) has no ACKs and no retransmissions: only the wake-ups.
    pub fn cause(&self, component: usize, t: &Transaction, tcp: bool) -> Option<&'static str> {
        match component {
            0 if tcp => {
                (self.delayed_ack && t.client_send_ns >= DELACK_MIN_NS).then_some("delayed_ack")
            }
            1 if tcp => self.waited_retransmission(t.network_ns),
            2 => self.server_migrated.then_some("migration"),
            4 => self.client_migrated.then_some("migration"),
            _ => None,
        }
    }

    /// The kind of the retransmissions a transaction whose network part took
    /// `network_ns` waited for (see [`Self::cause`]).
    fn waited_retransmission(&self, network_ns: u64) -> Option<&'static str> {
        let waited = |again: u8, after_us: Option<u32>| {
            again > 0 && after_us.is_none_or(|us| network_ns >= u64::from(us) * 1_000)
        };
        let (tlp, rto, recovery) = self.kinds_of(
            waited(
                self.request_retransmissions,
                self.request_retransmitted_after_us,
            ),
            waited(
                self.response_retransmissions,
                self.response_retransmitted_after_us,
            ),
        );
        if rto > 0 {
            Some("rto")
        } else if tlp > 0 {
            Some("tlp")
        } else if recovery > 0 {
            Some("recovery")
        } else {
            None
        }
    }
}

/// Joined transactions grouped by round trip in bands 1/64 of an octave wide (≤ 1.1 %,
/// 110 µs at 10 ms), with each band's sums of the round trip and the five components.
#[derive(Clone, Debug, Default)]
pub(super) struct Bands(std::collections::BTreeMap<u16, (u64, [u64; 6])>);

impl Bands {
    /// A round trip's band: its binary exponent and the next six bits.
    fn band(ns: u64) -> u16 {
        let ns = ns.max(64);
        let msb = 63 - u64::from(ns.leading_zeros());
        (msb * 64 + ((ns >> (msb - 6)) & 63)) as u16
    }

    fn add(&mut self, t: &Transaction) {
        let e = self.0.entry(Self::band(t.rtt_ns)).or_default();
        e.0 += 1;
        let v = [
            t.rtt_ns,
            t.client_send_ns,
            t.network_ns,
            t.server_recv_ns,
            t.server_app_ns,
            t.client_recv_ns,
        ];
        for (sum, x) in e.1.iter_mut().zip(v) {
            *sum += x;
        }
    }

    fn merge(&mut self, o: &Self) {
        for (&k, (n, sums)) in &o.0 {
            let e = self.0.entry(k).or_default();
            e.0 += n;
            for (a, b) in e.1.iter_mut().zip(sums) {
                *a += b;
            }
        }
    }

    /// The mean transaction of the band holding percentile `p` of the round trips.
    pub(super) fn composition(&self, p: Percentile) -> Option<Composition> {
        let total: u64 = self.0.values().map(|(n, _)| n).sum();
        let rank = ((p.0 / 100.0 * total as f64).ceil() as u64).clamp(1, total.max(1));
        let mut seen = 0;
        let (n, sums) = self.0.values().find(|(n, _)| {
            seen += n;
            seen >= rank
        })?;
        let mean = |i: usize| sums[i] as f64 / *n as f64 / 1e3;
        Some(Composition {
            percentile: p.0,
            transactions: *n,
            parts_us: Components {
                rtt: mean(0),
                client_send: mean(1),
                network: mean(2),
                server_recv: mean(3),
                server_app: mean(4),
                client_recv: mean(5),
            },
        })
    }
}

impl EventCounts {
    pub(super) fn add(&mut self, e: &Events) {
        let (req, resp) = (e.request_retransmissions, e.response_retransmissions);
        let (tlp, rto, recovery) = e.by_kind();
        self.merge(&Self {
            retransmitted: u64::from(req > 0 || resp > 0),
            request_retransmissions: u64::from(req),
            response_retransmissions: u64::from(resp),
            tlp: u64::from(tlp),
            rto: u64::from(rto),
            recovery: u64::from(recovery),
            delayed_ack: u64::from(e.delayed_ack),
            client_migrated: u64::from(e.client_migrated),
            server_migrated: u64::from(e.server_migrated),
        });
    }

    fn merge(&mut self, o: &Self) {
        self.retransmitted += o.retransmitted;
        self.request_retransmissions += o.request_retransmissions;
        self.response_retransmissions += o.response_retransmissions;
        self.tlp += o.tlp;
        self.rto += o.rto;
        self.recovery += o.recovery;
        self.delayed_ack += o.delayed_ack;
        self.client_migrated += o.client_migrated;
        self.server_migrated += o.server_migrated;
    }
}

/// TCP_DELACK_MIN (include/net/tcp.h: HZ/25, 40 ms): the shortest delayed-ACK timer.
pub const DELACK_MIN_NS: u64 = 40_000_000;

/// One transaction's anatomy, ns; the five components add up to `rtt`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transaction {
    /// The round trip: the client's `send()` → its `recv()` returned the whole response.
    pub rtt_ns: u64,
    /// `send()` → the request's last byte left the client's stack (its first SND stamp).
    pub client_send_ns: u64,
    /// The request leaving the client → the response arriving there (RX stamp), less
    /// the server's two parts: both ways across the network.
    pub network_ns: u64,
    /// The request arrived at the server (RX stamp) → the server's `recv()` returned.
    pub server_recv_ns: u64,
    /// The server's `recv()` returned → the response left its stack (first SND stamp).
    pub server_app_ns: u64,
    /// The response arrived (RX stamp of its last packet) → the client's `recv()` returned.
    pub client_recv_ns: u64,
    /// TCP: request sent → its ACK came back (the kernel's own per-request round trip).
    pub tcp_ack_ns: Option<u64>,
    /// TCP_CRR: the handshake before the request (`connect()` → it returned); the
    /// transaction is this plus `rtt_ns`.
    pub connect_ns: Option<u64>,
    /// Retransmissions, delayed ACKs and CPU migrations that touched it.
    pub events: Events,
}

/// Why a transaction has no anatomy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    /// A stamp the kernel did not give (receive stamping starts lazily).
    Unstamped,
    /// Stamps out of order (a clock stepped mid-transaction).
    Inconsistent,
}

/// Join the client's and the server's parts of one transaction.
///
/// # Errors
/// A stamp is missing, or the stamps contradict each other.
pub fn join(c: &ClientPart, s: &ServerPart) -> Result<Transaction, Missing> {
    let (Some(tx), Some(rx), Some(srecv), Some(sapp)) = (c.sends.first, c.rx, s.recv_ns, s.app_ns)
    else {
        return Err(Missing::Unstamped);
    };
    let rtt = c.returned.checked_sub(c.sent);
    let send = tx.checked_sub(c.sent);
    let recv = c.returned.checked_sub(rx);
    let wire = rx.checked_sub(tx);
    let server = u64::from(srecv) + u64::from(sapp);
    let (Some(rtt), Some(send), Some(recv), Some(network)) =
        (rtt, send, recv, wire.and_then(|w| w.checked_sub(server)))
    else {
        return Err(Missing::Inconsistent);
    };
    Ok(Transaction {
        rtt_ns: rtt,
        client_send_ns: send,
        network_ns: network,
        server_recv_ns: u64::from(srecv),
        server_app_ns: u64::from(sapp),
        client_recv_ns: recv,
        tcp_ack_ns: c.acked.and_then(|a| a.checked_sub(tx)),
        connect_ns: c.connect_ns,
        events: Events {
            request_retransmissions: c.sends.again,
            request_retransmitted_after_us: c.sends.retransmitted_after_us(),
            request_tlp: probed(
                c.sends.again.saturating_sub(c.sends.recovery),
                c.sends.rtos,
                c.tlp,
            ),
            request_recovery: c.sends.recovery,
            response_retransmissions: s.retransmissions,
            response_retransmitted_after_us: s.retransmitted_after_us,
            response_tlp: probed(s.retransmissions.saturating_sub(s.recovery), s.rtos, s.tlp),
            response_recovery: s.recovery,
            // With a retransmission, an ACK alone answers the copy (a duplicate
            // request, the server's probe), not a timer. Or the request's last byte
            // was held for an ACK that long (TCP only: it has an ACK stamp).
            delayed_ack: (c.sends.again == 0
                && s.retransmissions == 0
                && c.acked
                    .is_some_and(|a| a < rx && a.saturating_sub(tx) >= DELACK_MIN_NS))
                || (c.acked.is_some() && send >= DELACK_MIN_NS),
            client_migrated: c.cpu_sent != c.cpu_returned,
            server_migrated: s.migrated,
        },
    })
}

/// The client's side of a stream: the transaction waiting for the server's part, and
/// every joined transaction's components.
pub struct Recorder {
    pending: Option<ClientPart>,
    /// Each component's histogram over the joined transactions (recorded in ns).
    pub hist: Components<LatencyHistogram>,
    /// TCP: request sent → its ACK came back, for joined transactions with an ACK stamp.
    pub tcp_ack: LatencyHistogram,
    /// TCP_CRR's handshakes.
    pub connect: LatencyHistogram,
    /// Transactions joined and recorded.
    pub stamped: u64,
    /// Transactions not joined for a missing stamp ([`Missing::Unstamped`]).
    pub unstamped: u64,
    /// Transactions not joined because their stamps contradict ([`Missing::Inconsistent`]).
    pub inconsistent: u64,
    /// What touched the joined transactions, counted.
    pub events: EventCounts,
    /// Transactions by round trip (log bands), each band's component sums: what a
    /// transaction at a given percentile is made of.
    pub(super) bands: Bands,
    /// The slowest transactions so far: a superset of the run's slowest share
    /// ([`slowest`] says why it is exact).
    tail: Slowest<Logged>,
    /// The share the tail holds, parts per million.
    tail_ppm: u32,
    /// UDP_RR: each joined transaction's (number, raw forward, raw backward) one-way
    /// delays, ns, each on the far clock minus the near one, and the server's hold
    /// (its TX stamp minus its RX stamp) (at most [`ONE_WAY_MAX`]).
    one_way: Option<Vec<(u64, i64, i64, i64)>>,
    /// UDP_RR: (the client's number, requests the server had answered) at the last
    /// response: requests not answered before it were lost on the way there.
    answered: Option<(u64, u32)>,
}

/// Transactions whose one-way delays a run keeps (16 bytes each: 32 MiB).
pub const ONE_WAY_MAX: usize = 2_000_000;

/// The share of transactions the tail analysis and `--slow-log` keep unless told
/// otherwise (`--tail`): the slowest 1 %, in parts per million.
pub const TAIL_PPM: u32 = PPM_PER_PCT;

/// The tail a recorder keeps: its share of the run, and how many transactions to keep
/// so that the run's share is among them ([`slowest::keep_for`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TailPlan {
    /// The run's slowest share, parts per million (`--tail`; [`TAIL_PPM`] is 1 %).
    pub ppm: u32,
    /// Transactions each stream keeps so that the run's share is among them.
    pub keep: u64,
}

impl TailPlan {
    /// The tail of `ppm` of a run of at most `n_max` transactions over `streams`
    /// streams (each keeps its own, within its share of the memory bound).
    pub fn new(ppm: u32, n_max: u64, streams: u32) -> Self {
        Self {
            ppm,
            keep: slowest::keep_for(n_max, ppm, streams),
        }
    }
}

impl Default for TailPlan {
    /// 1 % of a run of unknown length: as many kept as the memory bound allows.
    fn default() -> Self {
        Self::new(TAIL_PPM, u64::MAX, 1)
    }
}

/// A joined transaction with where it came from, ordered by its round trip.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Logged {
    /// When the client called `send()`, CLOCK_REALTIME ns since the Unix epoch.
    pub sent_unix_ns: u64,
    /// The stream's transaction number, from 1.
    pub seq: u64,
    /// The stream (connection) it came from, numbered from 0.
    pub stream: u32,
    /// The transaction; in JSON its fields sit in the same object, not under `t`.
    #[serde(flatten)]
    pub t: Transaction,
}

impl Ord for Logged {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.t.rtt_ns, self.sent_unix_ns, self.stream, self.seq).cmp(&(
            o.t.rtt_ns,
            o.sent_unix_ns,
            o.stream,
            o.seq,
        ))
    }
}

impl PartialOrd for Logged {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new(TailPlan::default(), false)
    }
}

impl Recorder {
    /// For one stream of a run whose tail is `tail` (the whole run's: every stream
    /// keeps as many as the run's share can hold); with `one_way`, keep what one-way
    /// delays need.
    pub fn new(tail: TailPlan, one_way: bool) -> Self {
        Self {
            one_way: one_way.then(Vec::new),
            answered: None,
            pending: None,
            hist: Components::default(),
            tcp_ack: LatencyHistogram::new(),
            connect: LatencyHistogram::new(),
            stamped: 0,
            unstamped: 0,
            inconsistent: 0,
            events: EventCounts::default(),
            bands: Bands::default(),
            tail: Slowest::new(tail.keep),
            tail_ppm: tail.ppm,
        }
    }

    /// A transaction the client finished, and the server's part that came with its
    /// response (of the transaction before it); returns the transaction that part
    /// completed, when it could be joined.
    pub fn record(
        &mut self,
        done: ClientPart,
        server: Option<ServerPart>,
        stream: u32,
    ) -> Option<Logged> {
        // The latest response's count: a late one (an older number) says less.
        if let Some(s) = server.filter(|_| self.answered.is_none_or(|(n, _)| done.number > n)) {
            self.answered = Some((done.number, s.answered));
        }
        let joined = match (self.pending, server) {
            (Some(p), Some(s)) => self.join_part(p, s, stream),
            _ => None,
        };
        self.pending = Some(done);
        joined
    }

    /// The server's part of the stream's last transaction, from its report: no
    /// response came after that transaction's to carry it.
    pub fn record_last(&mut self, server: ServerPart, stream: u32) -> Option<Logged> {
        let p = self.pending.take()?;
        self.join_part(p, server, stream)
    }

    /// TCP_CRR: a transaction and the server's part of it, which came on its own
    /// connection after the response.
    pub fn record_joined(
        &mut self,
        done: ClientPart,
        server: ServerPart,
        stream: u32,
    ) -> Option<Logged> {
        self.join_part(done, server, stream)
    }

    /// Join the client's part `p` with the server's `s`, if they are one transaction's.
    fn join_part(&mut self, p: ClientPart, s: ServerPart, stream: u32) -> Option<Logged> {
        if p.seq != s.seq {
            return None;
        }
        if let Some(v) = self.one_way.as_mut() {
            if let (Some(ctx), Some(crx), Some(srx), Some(stx)) =
                (p.sends.first, p.rx, s.rx_ns, s.tx_ns)
            {
                if v.len() < ONE_WAY_MAX {
                    let d = |a: u64, b: u64| (a as i128 - b as i128) as i64;
                    v.push((p.number, d(srx, ctx), d(crx, stx), d(stx, srx)));
                }
            }
        }
        match join(&p, &s) {
            Ok(t) => {
                self.add(&t);
                let l = Logged {
                    sent_unix_ns: p.sent,
                    seq: p.number,
                    stream,
                    t,
                };
                self.tail.offer(l);
                Some(l)
            }
            Err(Missing::Unstamped) => {
                self.unstamped += 1;
                None
            }
            Err(Missing::Inconsistent) => {
                self.inconsistent += 1;
                None
            }
        }
    }

    /// A TCP ACK stamp that came after its transaction was set aside.
    pub fn late_ack(&mut self, seq: u32, ns: u64) {
        if let Some(p) = self.pending.as_mut().filter(|p| p.seq == seq) {
            p.acked.get_or_insert(ns);
        }
    }

    fn add(&mut self, t: &Transaction) {
        self.stamped += 1;
        self.hist.rtt.record_ns(t.rtt_ns);
        self.hist.client_send.record_ns(t.client_send_ns);
        self.hist.network.record_ns(t.network_ns);
        self.hist.server_recv.record_ns(t.server_recv_ns);
        self.hist.server_app.record_ns(t.server_app_ns);
        self.hist.client_recv.record_ns(t.client_recv_ns);
        if let Some(a) = t.tcp_ack_ns {
            self.tcp_ack.record_ns(a);
        }
        if let Some(c) = t.connect_ns {
            self.connect.record_ns(c);
        }
        self.events.add(&t.events);
        self.bands.add(t);
    }

    /// Add another stream's.
    pub fn merge(&mut self, o: &Self) {
        self.hist.rtt.merge(&o.hist.rtt);
        self.hist.client_send.merge(&o.hist.client_send);
        self.hist.network.merge(&o.hist.network);
        self.hist.server_recv.merge(&o.hist.server_recv);
        self.hist.server_app.merge(&o.hist.server_app);
        self.hist.client_recv.merge(&o.hist.client_recv);
        self.tcp_ack.merge(&o.tcp_ack);
        self.connect.merge(&o.connect);
        self.stamped += o.stamped;
        self.unstamped += o.unstamped;
        self.inconsistent += o.inconsistent;
        self.events.merge(&o.events);
        self.bands.merge(&o.bands);
        self.tail.merge(&o.tail);
        self.tail_ppm = o.tail_ppm;
        if let (Some(v), Some(w)) = (self.one_way.as_mut(), o.one_way.as_ref()) {
            v.extend_from_slice(w);
        } else if self.one_way.is_none() {
            self.one_way.clone_from(&o.one_way);
        }
        self.answered = self.answered.or(o.answered);
    }

    /// UDP_RR's one-way delays, jitter and loss by direction. With `same_clock` (both
    /// ends on one kernel) the delays are exact; otherwise the clocks' offset is
    /// estimated from the transaction with the shortest network time, taken to be
    /// symmetric (NTP's assumption), and the result says so. `lost` is every request
    /// the client gave up on, `lost_tail` those after the last response (which no
    /// response's count can place).
    pub fn one_way(
        &self,
        same_clock: bool,
        lost: u64,
        lost_tail: u64,
        p: &[Percentile],
    ) -> Option<OneWay> {
        let v = self.one_way.as_ref().filter(|v| !v.is_empty())?;
        let offset = if same_clock {
            0
        } else {
            let &(_, f, b, _) = v.iter().min_by_key(|&&(_, f, b, _)| f.saturating_add(b))?;
            f.saturating_sub(b) / 2
        };
        let mut req = LatencyHistogram::new();
        let mut resp = LatencyHistogram::new();
        let mut ipdv_req = LatencyHistogram::new();
        let mut ipdv_resp = LatencyHistogram::new();
        let mut held_h = LatencyHistogram::new();
        let mut rest = LatencyHistogram::new();
        let mut negative = 0u64;
        let mut prev: Option<(u64, i64, i64)> = None;
        for &(n, f, b, held) in v {
            // irtt's RTT: the two raw delays added, the clocks' offset cancelling.
            if let (Ok(h), Ok(r)) = (u64::try_from(held), u64::try_from(f.saturating_add(b))) {
                held_h.record_ns(h);
                rest.record_ns(r);
            }
            // Saturating: the server's stamps are its word, and may be anything.
            let (f, b) = (f.saturating_sub(offset), b.saturating_add(offset));
            for (h, x) in [(&mut req, f), (&mut resp, b)] {
                match u64::try_from(x) {
                    Ok(x) => h.record_ns(x),
                    Err(_) => negative += 1,
                }
            }
            // RFC 3393: the variation between consecutive packets, as a magnitude.
            if let Some((_, pf, pb)) = prev.filter(|&(pn, _, _)| pn + 1 == n) {
                ipdv_req.record_ns(f.abs_diff(pf));
                ipdv_resp.record_ns(b.abs_diff(pb));
            }
            prev = Some((n, f, b));
        }
        let s = |h: &LatencyHistogram| Summary::from_histogram(h, p);
        let request_lost = self
            .answered
            .map_or(0, |(n, answered)| n.saturating_sub(u64::from(answered)));
        Some(OneWay {
            clock: if same_clock { "same" } else { "estimated" }.into(),
            offset_us: offset as f64 / 1e3,
            request: s(&req),
            response: s(&resp),
            server_processing: s(&held_h),
            rtt_less_server: s(&rest),
            ipdv_request: s(&ipdv_req),
            ipdv_response: s(&ipdv_resp),
            negative,
            request_lost,
            response_lost: lost.saturating_sub(lost_tail).saturating_sub(request_lost),
            unattributed_lost: lost_tail,
        })
    }

    /// The run's slowest share of transactions (after [`Self::merge`]ing every
    /// stream): the top ⌈stamped·P⌉ by round trip, in the order they were sent, and
    /// whether they are exactly those (false only past [`slowest::KEEP_MAX`]).
    pub fn slowest(&self) -> (Vec<Logged>, bool) {
        let (mut v, exact) = self.tail.top(tail_count(self.stamped, self.tail_ppm));
        v.sort_unstable_by_key(|l| (l.sent_unix_ns, l.stream, l.seq));
        (v, exact)
    }

    /// The result: each component's statistics, and what made the slowest transactions
    /// slow.
    pub fn result(&self, p: &[Percentile], tcp: bool) -> AnatomyResult {
        let s = |h: &LatencyHistogram| Summary::from_histogram(h, p);
        AnatomyResult {
            one_way: None,
            tail: self.tail(),
            stamped: self.stamped,
            unstamped: self.unstamped,
            inconsistent: self.inconsistent,
            events: self.events,
            // Only where the round trips resolve the percentile (P99.9 needs 1 000):
            // a band above that would be the slowest transaction under its name.
            at_percentiles: p
                .iter()
                .filter(|q| self.hist.rtt.resolves(q.0 / 100.0))
                .filter_map(|&q| self.bands.composition(q))
                .collect(),
            components: Components {
                rtt: s(&self.hist.rtt),
                client_send: s(&self.hist.client_send),
                network: s(&self.hist.network),
                server_recv: s(&self.hist.server_recv),
                server_app: s(&self.hist.server_app),
                client_recv: s(&self.hist.client_recv),
            },
            tcp_ack: tcp.then(|| s(&self.tcp_ack)),
            connect: (self.connect.count() > 0).then(|| s(&self.connect)),
        }
    }
}

impl Recorder {
    /// Each slow transaction's cause is its component furthest above that component's
    /// median (the delay it added); the table gives each cause's share of the tail and
    /// the mean delay it added.
    pub(super) fn tail(&self) -> Option<Tail> {
        let (slow, exact) = self.slowest();
        let tcp = self.one_way.is_none();
        let first = slow.iter().map(|l| l.t.rtt_ns).min()?;
        let median = |h: &LatencyHistogram| h.quantile_ns(0.5).unwrap_or(0);
        let h = &self.hist;
        let medians = [
            median(&h.client_send),
            median(&h.network),
            median(&h.server_recv),
            median(&h.server_app),
            median(&h.client_recv),
        ];
        // (component, event) → (transactions, added ns)
        type Key = (usize, Option<&'static str>);
        let mut by_cause: Vec<(Key, (u64, u64))> = Vec::new();
        for l in &slow {
            let t = &l.t;
            let values = [
                t.client_send_ns,
                t.network_ns,
                t.server_recv_ns,
                t.server_app_ns,
                t.client_recv_ns,
            ];
            let (i, extra) = values
                .iter()
                .zip(medians)
                .map(|(v, m)| v.saturating_sub(m))
                .enumerate()
                .max_by_key(|&(_, extra)| extra)
                .unwrap_or((0, 0));
            let key = (i, t.events.cause(i, t, tcp));
            match by_cause.iter_mut().find(|(k, _)| *k == key) {
                Some((_, (n, a))) => {
                    *n += 1;
                    *a += extra;
                }
                None => by_cause.push((key, (1, extra))),
            }
        }
        let n = slow.len() as f64;
        let names = self.hist.parts().map(|(name, _)| name);
        let mut causes: Vec<Cause> = by_cause
            .into_iter()
            .map(|((i, event), (count, added))| Cause {
                component: names[i].into(),
                event: event.map(Into::into),
                share_pct: 100.0 * count as f64 / n,
                mean_added_us: added as f64 / count as f64 / 1e3,
            })
            .collect();
        causes.sort_by(|a, b| b.share_pct.total_cmp(&a.share_pct));
        let share_pct = f64::from(self.tail_ppm) / f64::from(PPM_PER_PCT);
        let q = 1.0 - f64::from(self.tail_ppm) / 1e6;
        Some(Tail {
            transactions: slow.len() as u64,
            share_pct,
            from_rtt_us: first as f64 / 1e3,
            rtt_percentile_us: self.hist.rtt.quantile_ns(q).map(|v| v as f64 / 1e3),
            exact,
            causes,
        })
    }
}
