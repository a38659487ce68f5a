//! Transactions folded into what a window of them says: how many, the response time's
//! percentiles, each part's percentiles and its share of the response at the median
//! and in the tail, and the sentences that follow from them.

use super::transaction::{Causes, Part, Side, Transaction};

/// The most transactions a window holds whole; past it, a uniform sample of this many
/// (reservoir sampling, Vitter's algorithm R) stands for them, and the summary says so.
pub const HELD: usize = 200_000;

/// One transaction as a window keeps it: its response time, its parts (ns; `u64::MAX`
/// for a part not seen), and the connection's srtt and min RTT at its end (µs).
type Kept = [u64; 8];

const UNSEEN: u64 = u64::MAX;

/// A window of one side's transactions, folded as they come.
#[derive(Debug)]
pub struct Window {
    side: Side,
    kept: Vec<Kept>,
    /// Every transaction seen, kept or not.
    seen: u64,
    pipelined: u64,
    unacked: u64,
    ack_on_request: u64,
    retransmitted: u64,
    retransmissions: u64,
    retransmitted_by: Causes,
    waited: Waited,
    /// The reservoir's own generator (xorshift64*), seeded fixed: a window's summary
    /// is a function of its transactions.
    rng: u64,
}

impl Window {
    /// An empty window of `side`'s transactions.
    pub fn new(side: Side) -> Self {
        Self {
            side,
            kept: Vec::new(),
            seen: 0,
            pipelined: 0,
            unacked: 0,
            ack_on_request: 0,
            retransmitted: 0,
            retransmissions: 0,
            retransmitted_by: Causes::default(),
            waited: Waited::default(),
            rng: 0x9E37_79B9_7F4A_7C15,
        }
    }
}

/// The wait a window's applications made their requests feel: how many waited
/// [`LONG_WAIT_NS`] or more to be read, and the longest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Waited {
    /// Transactions that waited that long.
    pub long: u64,
    /// The longest wait, ns.
    pub longest_ns: u64,
}

/// A wait to be read long enough to be the application's doing, not its event loop
/// waking (tens of µs): 1 ms.
pub const LONG_WAIT_NS: u64 = 1_000_000;

/// One part's row: its percentiles (µs) and its share of the response time among the
/// transactions around the median and among the slowest 1 %.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PartRow {
    /// The part.
    pub part: Part,
    /// Transactions where the kernel saw it.
    pub seen: u64,
    /// Its median, µs.
    pub p50_us: Option<f64>,
    /// Its 99th percentile, µs.
    pub p99_us: Option<f64>,
    /// Its share of the response time of the transactions ranked 45–55 % by
    /// response time (the mean of each one's share).
    pub share_median: Option<f64>,
    /// Its share among the slowest 1 %.
    pub share_tail: Option<f64>,
}

/// What a window of transactions says.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    /// The end that saw them.
    pub side: Side,
    /// Transactions in the window.
    pub transactions: u64,
    /// How many the percentiles were computed from (all, or [`HELD`]).
    pub sampled: usize,
    /// Pipelined (the response began with request bytes unread).
    pub pipelined: u64,
    /// Answered by a next request before their ACK.
    pub unacked: u64,
    /// Whose ACK rode on the client's next request.
    pub ack_on_request: u64,
    /// The connections' smoothed RTT at the transactions' ends, median, µs.
    pub srtt_p50_us: Option<f64>,
    /// Their minimum RTT then, median, µs (of those that had one).
    pub min_rtt_p50_us: Option<f64>,
    /// Transactions during which the server retransmitted, and the segments.
    pub retransmitted: u64,
    /// Segments retransmitted during them.
    pub retransmissions: u64,
    /// Those retransmissions by cause.
    pub retransmitted_by: Causes,
    /// Requests that waited long to be read.
    pub waited: Waited,
    /// The response time's median, 99th percentile and maximum, µs.
    #[serde(with = "percentiles")]
    pub response_us: [Option<f64>; 3],
    /// Each part, in [`Side::parts`]' order.
    pub parts: Vec<PartRow>,
}

/// The response time's `[P50, P99, max]` in JSON as every rttlab document writes
/// percentiles: an object (`{"p50": …, "p99": …, "max": …}`).
mod percentiles {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Named {
        p50: Option<f64>,
        p99: Option<f64>,
        max: Option<f64>,
    }

    pub fn serialize<S: Serializer>(v: &[Option<f64>; 3], s: S) -> Result<S::Ok, S::Error> {
        let [p50, p99, max] = *v;
        Named { p50, p99, max }.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[Option<f64>; 3], D::Error> {
        let n = Named::deserialize(d)?;
        Ok([n.p50, n.p99, n.max])
    }
}

impl Window {
    /// Fold in one transaction.
    pub fn add(&mut self, t: &Transaction) {
        self.seen += 1;
        self.pipelined += u64::from(t.pipelined);
        self.unacked += u64::from(t.unacked);
        self.ack_on_request += u64::from(t.ack_on_request);
        self.retransmitted += u64::from(t.retransmissions > 0);
        self.retransmissions += u64::from(t.retransmissions);
        self.retransmitted_by += t.retransmitted_by;
        if let Some(w) = t.part(Part::Wait) {
            self.waited.long += u64::from(w >= LONG_WAIT_NS);
            self.waited.longest_ns = self.waited.longest_ns.max(w);
        }
        let mut k = [UNSEEN; 8];
        k[0] = t.response_ns;
        for (i, p) in t.parts.iter().enumerate() {
            k[i + 1] = p.unwrap_or(UNSEEN);
        }
        k[6] = u64::from(t.srtt_us);
        k[7] = u64::from(t.min_rtt_us);
        if self.kept.len() < HELD {
            self.kept.push(k);
        } else {
            // Algorithm R: the n-th replaces a random one with probability HELD/n.
            self.rng ^= self.rng >> 12;
            self.rng ^= self.rng << 25;
            self.rng ^= self.rng >> 27;
            let r = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) % self.seen;
            if let Ok(i) = usize::try_from(r) {
                if i < HELD {
                    self.kept[i] = k;
                }
            }
        }
    }

    /// Transactions folded in.
    pub fn len(&self) -> u64 {
        self.seen
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.seen == 0
    }

    /// What the window says.
    pub fn summary(&self) -> Summary {
        let mut by_response: Vec<&Kept> = self.kept.iter().collect();
        by_response.sort_unstable_by_key(|k| k[0]);
        let n = by_response.len();
        let us = |ns: u64| ns as f64 / 1e3;
        let rank = |q: f64| ((q * (n as f64 - 1.0)).round() as usize).min(n.saturating_sub(1));
        let response_us = if n == 0 {
            [None; 3]
        } else {
            [
                Some(us(by_response[rank(0.5)][0])),
                Some(us(by_response[rank(0.99)][0])),
                Some(us(by_response[n - 1][0])),
            ]
        };
        // The median band (ranks 45–55 %) and the tail (the slowest 1 %), each at least
        // one transaction.
        let band = |lo: f64, hi: f64| -> &[&Kept] {
            if n == 0 {
                return &[];
            }
            let a = ((lo * n as f64) as usize).min(n - 1);
            let b = ((hi * n as f64).ceil() as usize).clamp(a + 1, n);
            &by_response[a..b]
        };
        let (median, tail) = (band(0.45, 0.55), band(0.99, 1.0));
        // The mean of each transaction's own share: a few very slow ones do not stand
        // for the rest of the band.
        let share = |set: &[&Kept], i: usize| -> Option<f64> {
            let shares: Vec<f64> = set
                .iter()
                .filter(|k| k[i] != UNSEEN && k[0] > 0)
                .map(|k| k[i] as f64 / k[0] as f64)
                .collect();
            (!shares.is_empty()).then(|| shares.iter().sum::<f64>() / shares.len() as f64)
        };
        let parts = self
            .side
            .parts()
            .iter()
            .enumerate()
            .map(|(j, &part)| {
                let i = j + 1;
                let mut v: Vec<u64> = self
                    .kept
                    .iter()
                    .map(|k| k[i])
                    .filter(|&x| x != UNSEEN)
                    .collect();
                v.sort_unstable();
                let q = |q: f64| -> Option<f64> {
                    (!v.is_empty()).then(|| {
                        us(v[((q * (v.len() as f64 - 1.0)).round() as usize).min(v.len() - 1)])
                    })
                };
                PartRow {
                    part,
                    seen: v.len() as u64,
                    p50_us: q(0.5),
                    p99_us: q(0.99),
                    // The network part is not in the response time: no share of it.
                    share_median: (part != Part::Network).then(|| share(median, i)).flatten(),
                    share_tail: (part != Part::Network).then(|| share(tail, i)).flatten(),
                }
            })
            .collect();
        let middle = |i: usize| -> Option<f64> {
            let mut v: Vec<u64> = self.kept.iter().map(|k| k[i]).filter(|&x| x > 0).collect();
            v.sort_unstable();
            (!v.is_empty()).then(|| v[(v.len() - 1) / 2] as f64)
        };
        Summary {
            side: self.side,
            transactions: self.seen,
            sampled: n,
            pipelined: self.pipelined,
            unacked: self.unacked,
            ack_on_request: self.ack_on_request,
            srtt_p50_us: middle(6),
            min_rtt_p50_us: middle(7),
            retransmitted: self.retransmitted,
            retransmissions: self.retransmissions,
            retransmitted_by: self.retransmitted_by,
            waited: self.waited,
            response_us,
            parts,
        }
    }
}

impl Summary {
    /// The row of part `p` (`None` when it is not one of this side's parts).
    pub fn part(&self, p: Part) -> Option<&PartRow> {
        self.parts.iter().find(|r| r.part == p)
    }

    /// What the window says in words: which part the tail is made of, a stall by
    /// retransmission, pipelining.
    pub fn findings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let [Some(p50), Some(p99), _] = self.response_us {
            let grows = self
                .parts
                .iter()
                .filter_map(|r| Some((r, r.share_tail?, r.share_median?)))
                .max_by(|a, b| a.1.total_cmp(&b.1));
            if let Some((row, tail, median)) = grows {
                if p99 >= 2.0 * p50 && tail >= 0.5 {
                    out.push(format!(
                        "The tail is {}: the slowest 1 % (P99 {p99:.0} µs, {:.1}× the median) spend {:.0} % of their response in it, against {:.0} % at the median.",
                        row.part.what(self.side),
                        p99 / p50.max(f64::MIN_POSITIVE),
                        100.0 * tail,
                        100.0 * median
                    ));
                }
            }
            if self.waited.long > 0 {
                let (what, busy) = match self.side {
                    Side::Server => ("request(s)", "busy with other clients"),
                    Side::Client => ("response(s)", "busy"),
                };
                out.push(format!(
                    "{} {what} waited 1 ms or more in the socket before the application read them (the longest {:.1} ms): it was {busy}, or not running (CPU contention, a blocking call).",
                    self.waited.long,
                    self.waited.longest_ns as f64 / 1e6
                ));
            }
        }
        let send = self.part(Part::Send).and_then(|r| r.p50_us);
        if let Some(send) = send.filter(|&us| us >= 1000.0) {
            out.push(format!(
                "The send part (P50 {:.1} ms) is the request held in this host's kernel after the write returned: the congestion or the server's receive window, Nagle's algorithm holding a small write while data is unacknowledged, or a queueing discipline's rate.",
                send / 1e3
            ));
        }
        let server = self.part(Part::Server).and_then(|r| r.p50_us);
        if let (Some(server), Some(min_rtt)) = (server, self.min_rtt_p50_us) {
            out.push(format!(
                "The server part (P50 {server:.0} µs) is the network both ways and the server: the connections' minimum RTT (P50 {min_rtt:.0} µs) is the network's round trip, the rest the server's stack and application (`rttlab explain --port` on the server splits it)."
            ));
        }
        let network = self.part(Part::Network).and_then(|r| r.p50_us);
        if let (Some(net), Some(srtt)) = (network, self.srtt_p50_us) {
            // Worth saying past a millisecond, or when it dwarfs the response (on
            // loopback: a 16 µs response, a 600 µs network part).
            let dwarfs = self.response_us[0].is_some_and(|r| net > 2.0 * r);
            if (net >= 1000.0 || dwarfs) && 2 * self.ack_on_request > self.transactions {
                out.push(format!(
                    "The network part (P50 {net:.0} µs) is mostly the client's own pause: it ACKs each response with its next request ({} of {}), or with its delayed-ACK timer (40 ms on Linux) when that comes first, so the server's TCP times the client's think time too: the connections' srtt reads {srtt:.0} µs (Jones, A Brief Look at Round Trip Time).",
                    self.ack_on_request, self.transactions
                ));
            }
        }
        if self.retransmitted > 0 {
            let c = self.retransmitted_by;
            let mut by = Vec::new();
            for (n, what) in [
                (c.tlp, "tail-loss probe(s)"),
                (c.rto, "sent after an RTO expired"),
                (c.fast, "fast retransmission(s)"),
            ] {
                if n > 0 {
                    by.push(format!("{n} {what}"));
                }
            }
            out.push(format!(
                "{} transaction(s) were stalled by {} retransmitted segment(s) ({}): loss between {} (the kernel counts them too: TcpRetransSegs, TCPLossProbes, TCPTimeouts, TCPFastRetrans).",
                self.retransmitted,
                self.retransmissions,
                by.join(", "),
                match self.side {
                    Side::Server => "the server and its clients",
                    Side::Client => "this client and its server",
                }
            ));
        }
        if self.pipelined > 0 {
            out.push(format!(
                "{} transaction(s) were pipelined: the client sent the next request before the response, so their wait includes the requests ahead of them.",
                self.pipelined
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::explain_bpf::RawTxn;

    fn txn(think_ns: u64) -> Transaction {
        Transaction::of(&raw(think_ns))
    }

    /// A server's transaction's record: 2 µs plus `think_ns` of response, then
    /// 10 µs to the ACK.
    fn raw(think_ns: u64) -> RawTxn {
        RawTxn {
            in_first_ns: 1_000,
            in_last_ns: 1_000,
            read_first_ns: 2_000,
            read_last_ns: 2_000,
            write_first_ns: 2_000 + think_ns,
            write_last_ns: 3_000 + think_ns,
            acked_ns: 13_000 + think_ns,
            ..RawTxn::default()
        }
    }

    /// 95 quick transactions (1 µs think) and five of 50 ms: the median is quick, the
    /// tail is think time, said in words. Witness: arithmetic on the transactions made.
    #[test]
    fn a_slow_transaction_makes_the_tail_and_its_part_is_named() {
        let mut w = Window::new(Side::Server);
        for i in 0..100 {
            w.add(&txn(if i % 20 == 7 { 50_000_000 } else { 1_000 }));
        }
        let s = w.summary();
        assert_eq!(s.transactions, 100);
        assert_eq!(s.response_us[0], Some(3.0));
        assert_eq!(s.response_us[2], Some(50_002.0));
        let think = s.part(Part::Think).unwrap();
        assert_eq!(think.p50_us, Some(1.0));
        assert!(think.share_tail.unwrap() > 0.99);
        assert!((think.share_median.unwrap() - 1.0 / 3.0).abs() < 1e-9);
        let f = s.findings();
        assert!(
            f[0].starts_with("The tail is the application's work"),
            "{f:?}"
        );
    }

    /// A transaction whose request waited `wait_ns` to be read.
    fn waiting(wait_ns: u64) -> Transaction {
        Transaction::of(&RawTxn {
            in_first_ns: 1_000,
            in_last_ns: 1_000,
            read_first_ns: 1_000 + wait_ns,
            read_last_ns: 1_000 + wait_ns,
            write_first_ns: 2_000 + wait_ns,
            write_last_ns: 3_000 + wait_ns,
            ..RawTxn::default()
        })
    }

    /// Waits of tens of µs are an event loop waking, not the application's doing:
    /// nothing said, however large their share. One request of 23 kept 76 ms behind
    /// another client's command is said, with its wait, though the slowest 1 % is
    /// another transaction. Witness: arithmetic on the transactions made.
    #[test]
    fn only_a_long_wait_is_said_and_it_is_said_however_few() {
        let mut w = Window::new(Side::Server);
        for _ in 0..10 {
            w.add(&waiting(60_000));
        }
        assert!(
            !w.summary().findings().iter().any(|f| f.contains("waited")),
            "{:?}",
            w.summary().findings()
        );
        let mut w = Window::new(Side::Server);
        for _ in 0..21 {
            w.add(&waiting(20_000));
        }
        w.add(&waiting(76_493_689));
        w.add(&txn(100_000_000));
        let f = w.summary().findings();
        assert!(
            f.iter()
                .any(|l| l.starts_with("1 request(s) waited 1 ms or more")
                    && l.contains("(the longest 76.5 ms)")),
            "{f:?}"
        );
    }

    /// A client's transaction: its request held `send_ns` after the write returned,
    /// 40 µs of server, the response read 2 ms after it came.
    fn client(send_ns: u64) -> Transaction {
        use crate::kernel::explain_bpf::SIDE_CLIENT;
        Transaction::of(&RawTxn {
            side: SIDE_CLIENT,
            write_first_ns: 1_000,
            write_last_ns: 2_000,
            sent_ns: 2_000 + send_ns,
            in_first_ns: 42_000 + send_ns,
            in_last_ns: 42_000 + send_ns,
            read_last_ns: 2_042_000 + send_ns,
            min_rtt_us: 15,
            ..RawTxn::default()
        })
    }

    /// A client's window says its own things: the request held in its kernel (send),
    /// the server part against the minimum RTT, the responses waiting for the client
    /// to read them; its table's parts are the client's. Witness: arithmetic on the
    /// transactions made.
    #[test]
    fn a_clients_window_names_its_own_parts() {
        let mut w = Window::new(Side::Client);
        for _ in 0..10 {
            w.add(&client(5_000_000));
        }
        let s = w.summary();
        let parts: Vec<Part> = s.parts.iter().map(|r| r.part).collect();
        assert_eq!(parts, Side::Client.parts());
        assert_eq!(s.part(Part::Send).unwrap().p50_us, Some(5_000.0));
        assert_eq!(s.part(Part::Server).unwrap().p50_us, Some(40.0));
        assert_eq!(s.min_rtt_p50_us, Some(15.0));
        assert!(s.part(Part::Think).is_none());
        let f = s.findings();
        let says = |start: &str| f.iter().any(|l| l.starts_with(start));
        assert!(
            says("The send part (P50 5.0 ms) is the request held"),
            "{f:?}"
        );
        assert!(says("The server part (P50 40 µs)"), "{f:?}");
        assert!(says("10 response(s) waited 1 ms or more"), "{f:?}");
        // Sent inside the write: no send finding.
        let mut w = Window::new(Side::Client);
        w.add(&client(0));
        let f = w.summary().findings();
        assert!(!f.iter().any(|l| l.contains("send part")), "{f:?}");
    }

    /// Past HELD transactions the window keeps a sample of HELD and counts them all.
    #[test]
    fn a_window_past_its_hold_samples_and_counts_every_one() {
        let mut w = Window::new(Side::Server);
        for i in 0..(HELD as u64 + 1000) {
            w.add(&txn(if i % 10 < 6 { 5_000 } else { 1_000_000 }));
        }
        let s = w.summary();
        assert_eq!((s.transactions, s.sampled), (HELD as u64 + 1000, HELD));
        // 60 % think 5 µs: the sample's median is theirs whatever it drew.
        assert_eq!(s.part(Part::Think).unwrap().p50_us, Some(5.0));
    }

    /// The network part explained as the client's pause when the client ACKs with
    /// its next request and the part dwarfs the response, even under a millisecond
    /// (loopback); not when the ACKs came on their own. Witness: arithmetic on the
    /// transactions made (response 3 µs, network 10 µs).
    #[test]
    fn a_network_part_that_dwarfs_the_response_is_explained() {
        let findings = |flags: u32| {
            let mut w = Window::new(Side::Server);
            for _ in 0..10 {
                w.add(&Transaction::of(&RawTxn {
                    flags,
                    srtt_us: 12,
                    ..raw(1_000)
                }));
            }
            w.summary().findings()
        };
        let pause = |f: &[String]| f.iter().any(|l| l.contains("the client's own pause"));
        let with_ack = findings(crate::kernel::explain_bpf::TXN_ACK_ON_DATA);
        assert!(pause(&with_ack), "{with_ack:?}");
        assert!(!pause(&findings(0)));
    }
}
