//! Open-loop UDP_RR's one-way delays, as irtt reports them: the send delay (the
//! client's `send()` → the request's RX stamp on the server) and the receive delay (the
//! response's TX stamp on the server → its RX stamp on the client), their IPDV, and
//! which way each lost transaction was lost.
//!
//! The server's stamps come back as `--anatomy`'s do (`probe::anatomy::trailer`): it
//! learns a response's TX stamp only after sending it, so each response carries the
//! server's part of the request it received *before*, with its count of requests
//! answered; the last one's comes in its report. A part of request q riding on the
//! response to request r also says the server received nothing between q and r (one
//! stream, one server thread, in the order they came): the requests in between were
//! lost on the way there, and q, if the client got no reply to it, on the way back.
//! Where a run of responses was lost with the parts they carried, the server's counts
//! on the replies either side say it: none of the requests between them answered (all
//! lost on the way there) or every one (all lost on the way back).
//!
//! IPDV is irtt's (and RFC 3393's): for each direction, one transaction's delay minus
//! the one before it, for consecutive numbers only; the statistics are of its
//! magnitude. It needs no synchronised clocks (an offset cancels), the delays do: on
//! one kernel (the lab) they are exact, between hosts only as good as the clocks'
//! sync, and a delay below zero says the clocks disagree by more than the delay. No
//! offset is estimated (irtt estimates none either).
//!
//! Sans-IO: replies, losses and parts come in with their times; lines go out to the
//! caller's sink as each transaction settles.

use super::raw_log::{RawLine, Way};
use super::sequence::GaveUp;
use crate::probe::anatomy::{OneWay, ServerPart};
use crate::stats::{LatencyHistogram, Percentile, Summary};
use std::collections::VecDeque;
use std::time::Instant;

/// Answered transactions kept waiting for the server's part; past it the oldest is
/// settled without one (a server that sends none).
const WAITING_MAX: usize = 4096;
/// What the server said of requests the client had not settled yet (received ones'
/// parts, ranges it did not receive), kept for when they are given up on.
const EVIDENCE_MAX: usize = 256;

/// A reply to request `seq`, as the book needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Reply {
    pub(super) seq: u64,
    /// Just before the request's `send()`, client CLOCK_REALTIME.
    pub(super) sent_unix_ns: u64,
    pub(super) rtt_ns: u64,
    /// The response's RX stamp, client CLOCK_REALTIME.
    pub(super) rx_unix_ns: Option<u64>,
    /// After the request's timeout.
    pub(super) late: bool,
}

/// A request given up on, which a late reply may still answer.
#[derive(Clone, Copy, Debug)]
pub(super) struct Lost {
    pub(super) seq: u64,
    pub(super) intended: Instant,
    pub(super) sent: Instant,
    pub(super) sent_unix_ns: u64,
    way: Option<Way>,
    /// The server's part of it (it received the request).
    part: Option<ServerPart>,
}

impl Lost {
    pub(super) fn new(seq: u64, intended: Instant, sent: Instant, sent_unix_ns: u64) -> Self {
        Self {
            seq,
            intended,
            sent,
            sent_unix_ns,
            way: None,
            part: None,
        }
    }

    /// The server's part of it, if one came.
    pub(super) fn part(&self) -> Option<ServerPart> {
        self.part
    }
}

/// One stream's book: what waits for the server's parts, the requests given up on,
/// and the delays' statistics.
pub(super) struct Book {
    stream: u32,
    /// The server stamps (one-way delays measured); without, the book only settles
    /// `--raw-log`'s lines and the late replies.
    stamps: bool,
    /// How far a part's sequence number goes before it wraps (the echoed bytes).
    modulus: u64,
    /// Replies waiting for their part, by number.
    waiting: VecDeque<Reply>,
    lost: GaveUp<Lost>,
    /// Parts of requests not answered yet, and ranges of numbers (first, last,
    /// inclusive) the server received none of or every one of; newest last.
    received: VecDeque<(u64, ServerPart)>,
    ranges: VecDeque<(u64, u64, Way)>,
    send: LatencyHistogram,
    receive: LatencyHistogram,
    ipdv_send: LatencyHistogram,
    ipdv_receive: LatencyHistogram,
    /// The server's RX → TX, and the round trip less it (irtt's RTT).
    server_processing: LatencyHistogram,
    rtt_less_server: LatencyHistogram,
    negative: u64,
    prev_send: Option<(u64, i64)>,
    prev_receive: Option<(u64, i64)>,
    /// The newest reply's number and the server's count of requests answered then.
    latest: Option<(u64, u32)>,
    /// Requests the stream sent (known once its sender is done).
    sent: u64,
    /// The server's count of requests answered in all, from its report's last part.
    answered_in_all: Option<u32>,
}

/// `a − b` for two clocks' ns, saturating.
fn minus(a: u64, b: u64) -> i64 {
    let d = i128::from(a) - i128::from(b);
    i64::try_from(d).unwrap_or(if d < 0 { i64::MIN } else { i64::MAX })
}

/// The full number of a part's `seq` (its low bits, wrapped at `modulus`), received by
/// the server before request `after`: the newest such number before `after`.
fn unwrap(after: u64, seq: u32, modulus: u64) -> Option<u64> {
    let low = after % modulus;
    let seq = u64::from(seq) % modulus;
    let back = match (low + modulus - seq) % modulus {
        0 => modulus,
        d => d,
    };
    after.checked_sub(back).filter(|&q| q > 0)
}

impl Book {
    /// A stream's book; `stamps`: the server was asked for its stamps; `seq_bytes`:
    /// the sequence bytes each request carries.
    pub(super) fn new(stream: u32, stamps: bool, seq_bytes: usize) -> Self {
        Self {
            stream,
            stamps,
            modulus: if seq_bytes >= 4 {
                1 << 32
            } else {
                1 << (8 * seq_bytes)
            },
            waiting: VecDeque::new(),
            lost: GaveUp::default(),
            received: VecDeque::new(),
            ranges: VecDeque::new(),
            send: LatencyHistogram::new(),
            receive: LatencyHistogram::new(),
            ipdv_send: LatencyHistogram::new(),
            ipdv_receive: LatencyHistogram::new(),
            server_processing: LatencyHistogram::new(),
            rtt_less_server: LatencyHistogram::new(),
            negative: 0,
            prev_send: None,
            prev_receive: None,
            latest: None,
            sent: 0,
            answered_in_all: None,
        }
    }

    /// The stream sent `n` requests in all.
    pub(super) fn sent(mut self, n: u64) -> Self {
        self.sent = n;
        self
    }

    /// A request given up on (its timeout passed); the oldest given up on before it,
    /// if it can no longer be answered late, is settled.
    pub(super) fn give_up(&mut self, mut g: Lost, out: &mut impl FnMut(&RawLine)) {
        if let Some(i) = self.received.iter().position(|&(q, _)| q == g.seq) {
            g.part = self.received.remove(i).map(|(_, p)| p);
            g.way = Some(Way::Response);
        } else if let Some(&(_, _, way)) = self
            .ranges
            .iter()
            .find(|&&(lo, hi, _)| (lo..=hi).contains(&g.seq))
        {
            g.way = Some(way);
        }
        if let Some(old) = self.lost.push(g) {
            out(&lost_line(self.stream, &old));
        }
    }

    /// The newest request given up on that `is` says a reply answers, taken out.
    pub(super) fn take_late(&mut self, is: impl Fn(u64) -> bool) -> Option<Lost> {
        self.lost.take_newest(|g| is(g.seq)).map(|(g, _)| g)
    }

    /// Reply `r`, whose response carried `part` (the server's part of the request it
    /// received before `r`'s); `known`: the part of `r` itself, when it came first (a
    /// late reply's, kept while it was given up on).
    pub(super) fn reply(
        &mut self,
        r: Reply,
        part: Option<ServerPart>,
        known: Option<ServerPart>,
        out: &mut impl FnMut(&RawLine),
    ) {
        if let Some(s) = part {
            self.part_before(r.seq, s, out);
        }
        if !self.stamps {
            out(&self.line(&r));
            return;
        }
        let known = known.or_else(|| {
            let i = self.received.iter().position(|&(q, _)| q == r.seq)?;
            self.received.remove(i).map(|(_, p)| p)
        });
        if let Some(s) = known {
            let l = self.join(&r, s);
            out(&l);
            return;
        }
        let i = self
            .waiting
            .iter()
            .rposition(|w| w.seq < r.seq)
            .map_or(0, |i| i + 1);
        self.waiting.insert(i, r);
        if self.waiting.len() > WAITING_MAX {
            if let Some(w) = self.waiting.pop_front() {
                out(&self.line(&w));
            }
        }
    }

    /// The server's part `s` of the request it received before request `after`.
    fn part_before(&mut self, after: u64, s: ServerPart, out: &mut impl FnMut(&RawLine)) {
        // The newest reply's count: a late one (an older number) says less.
        if self.latest.is_none_or(|(n, _)| after > n) {
            if let Some((n, answered)) = self.latest {
                // Answered between the two newest replies, the newer not counted.
                let between = u64::from(s.answered.wrapping_sub(answered)).checked_sub(1);
                let gap = after - n - 1;
                match between {
                    _ if gap == 0 => {}
                    Some(0) => self.evidence(n + 1, after - 1, Way::Request),
                    Some(b) if b == gap => self.evidence(n + 1, after - 1, Way::Response),
                    _ => {}
                }
            }
            self.latest = Some((after, s.answered));
        }
        if let Some(q) = unwrap(after, s.seq, self.modulus) {
            self.settle(q, Some(after), s, out);
        }
    }

    /// The server received request `q` (its part `s`) and nothing after it before
    /// `after` (`None`: nothing after it at all, the server's report's last part).
    fn settle(
        &mut self,
        q: u64,
        after: Option<u64>,
        s: ServerPart,
        out: &mut impl FnMut(&RawLine),
    ) {
        // Replies before q: their parts rode on responses that never came.
        while self.waiting.front().is_some_and(|w| w.seq < q) {
            if let Some(w) = self.waiting.pop_front() {
                out(&self.line(&w));
            }
        }
        let mut used = false;
        if self.waiting.front().is_some_and(|w| w.seq == q) {
            if let Some(w) = self.waiting.pop_front() {
                let l = self.join(&w, s);
                out(&l);
                used = true;
            }
        }
        if let Some(g) = self.lost.iter_mut().find(|g| g.seq == q) {
            g.way = Some(Way::Response);
            g.part = Some(s);
            used = true;
        }
        // For requests not settled yet: given up on later, or answered late.
        if !used {
            push_bounded(&mut self.received, (q, s));
        }
        match after {
            Some(a) if a > q + 1 => self.evidence(q + 1, a - 1, Way::Request),
            Some(_) => {}
            None => self.evidence(q + 1, u64::MAX, Way::Request),
        }
    }

    /// The server received none (`Way::Request`: lost on the way there) or every one
    /// (`Way::Response`: lost on the way back) of requests `lo..=hi`: the losses among
    /// them already given up on, and those given up on later.
    fn evidence(&mut self, lo: u64, hi: u64, way: Way) {
        for g in self.lost.iter_mut() {
            if (lo..=hi).contains(&g.seq) && g.way.is_none() {
                g.way = Some(way);
            }
        }
        push_bounded(&mut self.ranges, (lo, hi, way));
    }

    /// At the stream's end: the server's last part, from its report, then every
    /// transaction still unsettled.
    pub(super) fn finish(&mut self, last: Option<ServerPart>, out: &mut impl FnMut(&RawLine)) {
        if let Some(s) = last {
            self.answered_in_all = Some(s.answered);
            if let Some(q) = unwrap(self.sent.saturating_add(1), s.seq, self.modulus) {
                self.settle(q, None, s, out);
            }
        }
        while let Some(w) = self.waiting.pop_front() {
            out(&self.line(&w));
        }
        let stream = self.stream;
        for g in self.lost.drain() {
            out(&lost_line(stream, &g));
        }
    }

    /// A reply's line without the server's part.
    fn line(&self, r: &Reply) -> RawLine {
        let mut l = RawLine::answered(self.stream, r.seq, r.sent_unix_ns, r.rtt_ns);
        l.client_rx_unix_ns = r.rx_unix_ns;
        l.late = r.late;
        l
    }

    /// Reply `r` joined with the server's part of it: its one-way delays and their
    /// variation from the transaction before.
    fn join(&mut self, r: &Reply, s: ServerPart) -> RawLine {
        let mut l = self.line(r);
        l.server_rx_unix_ns = s.rx_ns;
        l.server_tx_unix_ns = s.tx_ns;
        l.send_delay_ns = s.rx_ns.map(|rx| minus(rx, r.sent_unix_ns));
        l.receive_delay_ns = r.rx_unix_ns.zip(s.tx_ns).map(|(c, t)| minus(c, t));
        // The server's hold, both stamps on its own clock; irtt's RTT is the rest.
        if let Some(held) = s.rx_ns.zip(s.tx_ns).map(|(rx, tx)| minus(tx, rx)) {
            if let Ok(held) = u64::try_from(held) {
                self.server_processing.record_ns(held);
                self.rtt_less_server
                    .record_ns(r.rtt_ns.saturating_sub(held));
            }
        }
        let n = r.seq;
        for (d, h, ipdv, prev) in [
            (
                l.send_delay_ns,
                &mut self.send,
                &mut self.ipdv_send,
                &mut self.prev_send,
            ),
            (
                l.receive_delay_ns,
                &mut self.receive,
                &mut self.ipdv_receive,
                &mut self.prev_receive,
            ),
        ] {
            let Some(d) = d else { continue };
            match u64::try_from(d) {
                Ok(v) => h.record_ns(v),
                Err(_) => self.negative += 1,
            }
            if let Some((_, pd)) = prev.filter(|&(pn, _)| pn + 1 == n) {
                ipdv.record_ns(d.abs_diff(pd));
            }
            *prev = Some((n, d));
        }
        l
    }

    /// The run's one-way delays (`None` when the server sent no stamps): `same_clock`,
    /// both ends on one kernel; `lost` and `transactions`, the stream's.
    pub(super) fn result(
        &self,
        same_clock: bool,
        lost: u64,
        transactions: u64,
        p: &[Percentile],
    ) -> Option<OneWay> {
        let (n, answered) = self.latest.filter(|_| self.stamps)?;
        let s = |h: &LatencyHistogram| Summary::from_histogram(h, p);
        // The server's count in its report covers every request; without it, those up
        // to the newest reply's are answered or lost, and its count then says how
        // many of them it received.
        let (request_lost, lost_before) = match self.answered_in_all {
            Some(all) => (self.sent.saturating_sub(u64::from(all)), lost),
            None => (
                n.saturating_sub(u64::from(answered)),
                n.saturating_sub(transactions).min(lost),
            ),
        };
        Some(OneWay {
            clock: if same_clock { "same" } else { "separate" }.into(),
            offset_us: 0.0,
            request: s(&self.send),
            response: s(&self.receive),
            server_processing: s(&self.server_processing),
            rtt_less_server: s(&self.rtt_less_server),
            ipdv_request: s(&self.ipdv_send),
            ipdv_response: s(&self.ipdv_receive),
            negative: self.negative,
            request_lost: request_lost.min(lost_before),
            response_lost: lost_before.saturating_sub(request_lost),
            unattributed_lost: lost.saturating_sub(lost_before),
        })
    }
}

/// A lost request's line: which way, and the server's stamps when it received it.
fn lost_line(stream: u32, g: &Lost) -> RawLine {
    let mut l = RawLine::lost(stream, g.seq, g.sent_unix_ns);
    l.lost_way = g.way;
    if let Some(s) = g.part {
        l.server_rx_unix_ns = s.rx_ns;
        l.server_tx_unix_ns = s.tx_ns;
        l.send_delay_ns = s.rx_ns.map(|rx| minus(rx, g.sent_unix_ns));
    }
    l
}

/// Push onto a bounded queue of evidence, forgetting the oldest.
fn push_bounded<T>(q: &mut VecDeque<T>, x: T) {
    if q.len() == EVIDENCE_MAX {
        q.pop_front();
    }
    q.push_back(x);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(seq: u32, rx: u64, tx: u64, answered: u32) -> ServerPart {
        ServerPart {
            seq,
            rx_ns: Some(rx),
            tx_ns: Some(tx),
            answered,
            ..ServerPart::default()
        }
    }

    fn reply(seq: u64, sent: u64, rtt: u64, rx: u64) -> Reply {
        Reply {
            seq,
            sent_unix_ns: sent,
            rtt_ns: rtt,
            rx_unix_ns: Some(rx),
            late: false,
        }
    }

    /// Witness: arithmetic on stamps written by hand. Request n is sent at n·1000 µs,
    /// reaches the server 2 ms later (+n µs of variation), and its response takes
    /// 5 ms back; each response carries the part of the one before.
    #[test]
    fn delays_join_one_response_late_and_ipdv_is_the_consecutive_difference() {
        let mut b = Book::new(0, true, 8);
        let mut lines = Vec::new();
        let mut out = |l: &RawLine| lines.push(*l);
        let at = |n: u64| n * 1_000_000;
        let srx = |n: u64| at(n) + 2_000_000 + n * 1_000;
        let stx = |n: u64| srx(n) + 10_000;
        let crx = |n: u64| stx(n) + 5_000_000;
        for n in 1..=4u64 {
            let r = reply(n, at(n), crx(n) - at(n) + 500, crx(n));
            let p = (n > 1).then(|| part(n as u32 - 1, srx(n - 1), stx(n - 1), n as u32));
            b.reply(r, p, None, &mut out);
        }
        b.sent = 4;
        b.finish(Some(part(4, srx(4), stx(4), 4)), &mut out);
        assert_eq!(lines.len(), 4);
        for (i, l) in lines.iter().enumerate() {
            let n = i as u64 + 1;
            assert_eq!(l.seq, n);
            assert_eq!(l.send_delay_ns, Some(2_000_000 + n as i64 * 1_000));
            assert_eq!(l.receive_delay_ns, Some(5_000_000));
            assert_eq!(l.received_unix_ns, Some(crx(n) + 500));
        }
        let w = b.result(true, 0, 4, &[Percentile(50.0)]).unwrap();
        assert_eq!(w.request.samples, 4);
        assert_eq!(w.ipdv_request.samples, 3);
        assert!((w.ipdv_request.max_us.unwrap() - 1.0).abs() < 0.01);
        assert_eq!(w.ipdv_response.max_us, Some(0.0));
        assert_eq!((w.negative, w.request_lost, w.response_lost), (0, 0, 0));
        assert_eq!(w.clock, "same");
    }

    /// Witness: the server's parts and counts written by hand. The server receives
    /// 1, 3, 4, 5 and 7: 2 and 6 are lost on the way there (the parts on 3's and 7's
    /// replies name 1 and 5), and 4's response on the way back (5's reply carries
    /// 4's part; 3's part rode on 4's lost response).
    #[test]
    fn losses_are_told_apart_by_the_servers_parts_and_count() {
        let t0 = Instant::now();
        let mut b = Book::new(0, true, 1);
        let mut lines = Vec::new();
        let mut out = |l: &RawLine| lines.push(*l);
        b.reply(reply(1, 100, 50, 150), None, None, &mut out);
        b.reply(
            reply(3, 300, 50, 350),
            Some(part(1, 110, 120, 2)),
            None,
            &mut out,
        );
        b.reply(
            reply(5, 500, 50, 550),
            Some(part(4, 410, 420, 4)),
            None,
            &mut out,
        );
        // The timeouts pass after the evidence came.
        for n in [2, 4] {
            b.give_up(Lost::new(n, t0, t0, n * 100), &mut out);
        }
        b.reply(
            reply(7, 700, 50, 750),
            Some(part(5, 510, 520, 5)),
            None,
            &mut out,
        );
        b.give_up(Lost::new(6, t0, t0, 600), &mut out);
        b.finish(None, &mut out);
        let by = |n: u64| lines.iter().find(|l| l.seq == n).unwrap();
        assert_eq!(lines.len(), 7, "{lines:?}");
        assert_eq!(by(1).send_delay_ns, Some(10));
        assert_eq!(
            by(3).server_rx_unix_ns,
            None,
            "its part rode on 4's response"
        );
        assert_eq!((by(2).lost, by(2).lost_way), (true, Some(Way::Request)));
        assert_eq!((by(4).lost, by(4).lost_way), (true, Some(Way::Response)));
        assert_eq!(by(4).send_delay_ns, Some(10), "the server received it");
        assert_eq!(by(5).server_rx_unix_ns, Some(510));
        assert_eq!(
            by(6).lost_way,
            Some(Way::Request),
            "nothing after 5 before 7"
        );
        assert_eq!(by(7).server_rx_unix_ns, None, "no part after it");
        let w = b.result(true, 3, 4, &[]).unwrap();
        // At 7's reply the server had answered 5 of 7: 2 lost on the way there.
        assert_eq!(
            (w.request_lost, w.response_lost, w.unattributed_lost),
            (2, 1, 0)
        );
        // Request 8, lost after the last reply: either way until the server's report
        // says it answered 5 of 8 in all, and its last part (7's) that nothing came
        // after 7.
        let mut b = b.sent(8);
        b.give_up(Lost::new(8, t0, t0, 800), &mut |_| {});
        let w = b.result(true, 4, 4, &[]).unwrap();
        assert_eq!((w.request_lost, w.unattributed_lost), (2, 1));
        let mut last = Vec::new();
        b.finish(Some(part(7, 710, 720, 5)), &mut |l| last.push(*l));
        assert_eq!(last.len(), 1);
        assert_eq!((last[0].seq, last[0].lost_way), (8, Some(Way::Request)));
        let w = b.result(true, 4, 4, &[]).unwrap();
        assert_eq!(
            (w.request_lost, w.response_lost, w.unattributed_lost),
            (3, 1, 0)
        );
    }

    /// Witness: the server's counts written by hand. Responses 4–7 are lost in a row,
    /// with the parts of 3–6 they carried; only 7's part comes back (on 8's reply).
    /// The counts on 3's and 8's replies (3, then 8) say the server answered all four;
    /// then requests 10–12 are lost on the way there (9's part on 13's reply, and the
    /// count: none answered between 9 and 13).
    #[test]
    fn a_run_of_losses_takes_its_way_from_the_counts_either_side() {
        let t0 = Instant::now();
        let mut b = Book::new(0, true, 8);
        let mut lines = Vec::new();
        let mut out = |l: &RawLine| lines.push(*l);
        for n in 1..=3u64 {
            let p = (n > 1).then(|| part(n as u32 - 1, n * 100, n * 100, n as u32));
            b.reply(reply(n, n * 100, 50, n * 100 + 50), p, None, &mut out);
        }
        for n in 4..=7 {
            b.give_up(Lost::new(n, t0, t0, n * 100), &mut out);
        }
        b.reply(
            reply(8, 800, 50, 850),
            Some(part(7, 710, 720, 8)),
            None,
            &mut out,
        );
        b.reply(
            reply(9, 900, 50, 950),
            Some(part(8, 810, 820, 9)),
            None,
            &mut out,
        );
        b.reply(
            reply(13, 1300, 50, 1350),
            Some(part(9, 910, 920, 10)),
            None,
            &mut out,
        );
        for n in 10..=12 {
            b.give_up(Lost::new(n, t0, t0, n * 100), &mut out);
        }
        b.finish(None, &mut out);
        let by = |n: u64| lines.iter().find(|l| l.seq == n).unwrap();
        assert_eq!(lines.len(), 13);
        for n in 4..=7 {
            assert_eq!(by(n).lost_way, Some(Way::Response), "{n}");
        }
        assert_eq!(by(7).server_rx_unix_ns, Some(710));
        assert_eq!(
            by(6).server_rx_unix_ns,
            None,
            "its part rode on 7's response"
        );
        for n in 10..=12 {
            assert_eq!(by(n).lost_way, Some(Way::Request), "{n}");
        }
    }

    /// Witness: arithmetic. A server clock 3 ms behind the client's puts the send
    /// delay below zero: counted and left out, while the receive delay (3 ms too long)
    /// and both IPDVs are kept, the offset cancelling out of the IPDV.
    #[test]
    fn a_delay_below_zero_is_counted_and_left_out_and_ipdv_needs_no_sync() {
        let mut b = Book::new(0, true, 8);
        let behind = 3_000_000;
        let mut out = |_: &RawLine| {};
        for n in 1..=3u64 {
            let sent = 10_000_000 * n;
            let srx = sent + 1_000_000 + n * 1_000 - behind;
            let r = reply(n, sent, 3_000_000, sent + 2_000_000 + behind + 1_000);
            b.reply(
                r,
                None,
                Some(part(n as u32, srx, srx + 1_000, n as u32)),
                &mut out,
            );
        }
        let w = b.result(false, 0, 3, &[]);
        assert!(w.is_none(), "no reply carried a count yet");
        b.latest = Some((3, 3));
        let w = b.result(false, 0, 3, &[]).unwrap();
        assert_eq!((w.clock.as_str(), w.negative), ("separate", 3));
        assert_eq!(w.request.samples, 0);
        assert_eq!(w.response.samples, 3);
        assert_eq!(w.ipdv_request.samples, 2);
        assert!((w.ipdv_request.max_us.unwrap() - 1.0).abs() < 0.01);
    }

    /// Witness: arithmetic — a part's wrapped number is the newest before the reply.
    #[test]
    fn a_parts_wrapped_number_is_the_newest_before_its_reply() {
        assert_eq!(unwrap(300, 299 % 256, 256), Some(299));
        assert_eq!(unwrap(300, 43, 256), Some(299));
        assert_eq!(unwrap(300, 44, 256), Some(44));
        assert_eq!(unwrap(300, 300 % 256, 256), Some(44));
        assert_eq!(unwrap(5, 9, 256), None);
        assert_eq!(unwrap(2, 1, 1 << 32), Some(1));
    }
}
