//! The seq/ACK engine: RTT from a data segment to the ACK that covers it, as tcptrace
//! and Wireshark's `tcp.analysis.ack_rtt` compute it, and as the kernel itself does
//! when timestamps are off. An ACK gives one sample, from the segment that ends
//! exactly where it acknowledges (a delayed ACK covering two segments is timed from
//! the second, the one that triggered it).
//!
//! Where rttlab differs from Wireshark, on purpose:
//! - Karn's rule: a segment sent more than once gives no sample, because the ACK
//!   cannot tell which copy it answers. Wireshark times it from the first copy, so
//!   its sample includes the retransmission timeout.
//! - SACK: a segment first acknowledged by a SACK block that ends where it ends is
//!   timed at that SACK, and the cumulative ACK that later covers it gives nothing.
//!   Wireshark ignores SACK and times it at the cumulative ACK, after the hole was
//!   repaired: a loss-recovery time, not an RTT.

use std::collections::VecDeque;

pub use super::ts::before;

/// Which of the two departures from Wireshark apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Rules {
    /// Karn's rule: no sample from a segment sent more than once.
    pub karn: bool,
    /// Time SACKed segments at their SACK.
    pub sack: bool,
}

impl Rules {
    /// rttlab's rules.
    pub const RTTLAB: Rules = Rules {
        karn: true,
        sack: true,
    };
    /// Wireshark's `tcp.analysis.ack_rtt` (for checking against tshark).
    pub const WIRESHARK: Rules = Rules {
        karn: false,
        sack: false,
    };
}

/// One segment seen and not yet acknowledged.
#[derive(Debug, Clone, Copy)]
struct Segment {
    seq: u32,
    end: u32,
    ns: u64,
    /// Seen more than once (Karn: never timed).
    retransmitted: bool,
    /// Already acknowledged by a SACK block.
    sacked: bool,
    /// Given an entry to time: false when the rate limit passed it over (it is still
    /// followed for the retransmission rules).
    timed: bool,
}

/// What a segment turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Beyond everything seen so far.
    New,
    /// Covers data seen before, not yet acknowledged.
    Retransmission,
    /// Covers data the receiver had already acknowledged.
    SpuriousRetransmission,
    /// Below the highest sequence seen but never seen itself: it was overtaken
    /// before the capture point.
    OutOfOrder,
    /// More than the largest window (2^30 bytes, RFC 7323 §2.3) from the highest
    /// sequence seen: no sender has that much in flight, so it is not followed.
    OutOfWindow,
}

/// The largest window TCP allows (RFC 7323 §2.3: a scale of 14 on 16 bits). No data
/// lies farther than this from `nxt`, so every comparison of two sequence numbers the
/// engine makes spans less than 2^31, where serial arithmetic orders them.
pub const MAX_WINDOW: u32 = 1 << 30;

/// Sequence space sent by one endpoint of a flow.
#[derive(Debug, Default)]
pub struct SeqHalf {
    segments: VecDeque<Segment>,
    /// Just past the highest sequence number seen (snd.nxt at the capture point).
    nxt: Option<u32>,
    /// The highest cumulative ACK the other end sent for this data.
    pub acked: Option<u32>,
    /// Segments that covered data seen before: retransmissions, spurious ones included.
    pub retransmissions: u64,
    /// Retransmissions of data the receiver had already acknowledged.
    pub spurious: u64,
    /// Segments below the highest sequence seen but never seen themselves: overtaken
    /// before the capture point.
    pub out_of_order: u64,
    /// Segments not tracked: [`SeqHalf::CAP`] were outstanding, or they were out of
    /// the window ([`Kind::OutOfWindow`]).
    pub untracked: u64,
    /// ACKs that ended at a retransmitted segment: no sample (Karn).
    pub karn_skipped: u64,
    /// ACKs that ended at a segment already timed at its SACK: no sample.
    pub sacked_skipped: u64,
    /// Samples taken at a SACK block.
    pub sack_timed: u64,
    /// When a segment was last given an entry to time (for the rate limit).
    last_entry_ns: Option<u64>,
    /// Segments not timed for the rate limit.
    pub rate_limited: u64,
}

impl SeqHalf {
    /// Most segments outstanding per direction (24 bytes each: 96 KiB at most).
    pub const CAP: usize = 4096;
    /// How far from either end of the queue an out-of-order segment may be inserted.
    const NEAR: usize = 64;

    /// Whether a segment seen at `now` is timed: not within `rate_limit_ns` (0: no
    /// limit) of the last one timed.
    fn timed(&mut self, now: u64, rate_limit_ns: u64) -> bool {
        if rate_limit_ns > 0
            && self
                .last_entry_ns
                .is_some_and(|t| now.saturating_sub(t) < rate_limit_ns)
        {
            self.rate_limited += 1;
            return false;
        }
        self.last_entry_ns = Some(now);
        true
    }

    /// A segment `[seq, seq + len)` sent at `now` (`len` counts SYN and FIN); within
    /// `rate_limit_ns` of the last segment timed it is followed but not timed.
    pub fn segment(&mut self, seq: u32, len: u32, now: u64, rate_limit_ns: u64) -> Kind {
        let end = seq.wrapping_add(len);
        let nxt = self.nxt;
        let kind = match nxt {
            None => Kind::New,
            Some(n) if before(n, end) && !before(seq, n) && seq.wrapping_sub(n) > MAX_WINDOW => {
                Kind::OutOfWindow
            }
            Some(n) if before(n, end) => {
                if before(seq, n) {
                    // New data with old data in front: a repacketised retransmission.
                    self.mark_overlap(seq, n);
                    Kind::Retransmission
                } else {
                    Kind::New
                }
            }
            Some(_) if self.acked.is_some_and(|a| !before(a, end)) => Kind::SpuriousRetransmission,
            Some(n) if n.wrapping_sub(seq) > MAX_WINDOW => Kind::OutOfWindow,
            Some(_) if self.mark_overlap(seq, end) => Kind::Retransmission,
            Some(_) => Kind::OutOfOrder,
        };
        match kind {
            Kind::New => {
                self.nxt = Some(end);
                let timed = self.timed(now, rate_limit_ns);
                self.push(Segment {
                    seq,
                    end,
                    ns: now,
                    retransmitted: false,
                    sacked: false,
                    timed,
                });
            }
            Kind::Retransmission => {
                self.retransmissions += 1;
                if self.nxt.is_some_and(|n| before(n, end)) {
                    self.nxt = Some(end);
                    let timed = self.timed(now, rate_limit_ns);
                    self.push(Segment {
                        seq,
                        end,
                        ns: now,
                        retransmitted: true,
                        sacked: false,
                        timed,
                    });
                }
            }
            Kind::SpuriousRetransmission => {
                self.retransmissions += 1;
                self.spurious += 1;
            }
            Kind::OutOfWindow => self.untracked += 1,
            Kind::OutOfOrder => {
                self.out_of_order += 1;
                let at = self.segments.partition_point(|s| before(s.seq, seq));
                // A real out-of-order segment lands near the back; one far inside a
                // long queue (hostile or garbled numbers) would cost a long shift.
                let near = at.min(self.segments.len() - at) <= Self::NEAR;
                if self.segments.len() < Self::CAP && near {
                    let timed = self.timed(now, rate_limit_ns);
                    self.segments.insert(
                        at,
                        Segment {
                            seq,
                            end,
                            ns: now,
                            retransmitted: false,
                            sacked: false,
                            timed,
                        },
                    );
                } else {
                    self.untracked += 1;
                }
            }
        }
        kind
    }

    fn push(&mut self, s: Segment) {
        if self.segments.len() < Self::CAP {
            self.segments.push_back(s);
        } else {
            self.untracked += 1;
        }
    }

    /// Mark segments overlapping `[seq, end)` as retransmitted; whether any did.
    ///
    /// Segments are kept in sequence order, so the search is binary and the walk
    /// touches only the overlapping ones: hostile sequence numbers cost O(log n).
    fn mark_overlap(&mut self, seq: u32, end: u32) -> bool {
        let start = self.segments.partition_point(|s| !before(seq, s.end));
        let mut any = false;
        for s in self.segments.range_mut(start..) {
            if !before(s.seq, end) {
                break;
            }
            s.retransmitted = true;
            any = true;
        }
        any
    }

    /// An ACK for this data, at `now`, with the SACK blocks it carries: the RTT of
    /// the segment it acknowledges first, if that segment was sent once.
    pub fn ack(
        &mut self,
        ack: u32,
        sacks: impl Iterator<Item = (u32, u32)>,
        rules: Rules,
        now: u64,
    ) -> Option<u64> {
        let mut sample = None;
        if self.acked.is_none_or(|a| before(a, ack)) {
            self.acked = Some(ack);
            while let Some(s) = self.segments.front_mut() {
                if before(ack, s.end) {
                    // Partly acknowledged: the rest waits.
                    if before(s.seq, ack) {
                        s.seq = ack;
                    }
                    break;
                }
                let s = self.segments.pop_front().expect("front exists");
                if s.end == ack && s.timed {
                    if s.sacked {
                        self.sacked_skipped += 1;
                    } else if rules.karn && s.retransmitted {
                        self.karn_skipped += 1;
                    } else {
                        sample = Some(now.saturating_sub(s.ns));
                    }
                }
            }
        }
        for (left, right) in sacks.filter(|_| rules.sack) {
            // D-SACKs (below the cumulative ACK) and blocks past what was sent are
            // not acknowledgements of anything outstanding.
            if !before(ack, right) || !before(left, right) {
                continue;
            }
            let start = self.segments.partition_point(|s| before(s.seq, left));
            for s in self.segments.range_mut(start..) {
                if !before(s.seq, right) {
                    break;
                }
                if s.sacked || before(right, s.end) {
                    continue;
                }
                s.sacked = true;
                if s.end == right && s.timed && !s.retransmitted && sample.is_none() {
                    sample = Some(now.saturating_sub(s.ns));
                    self.sack_timed += 1;
                }
            }
        }
        sample
    }

    /// Segments waiting for an ACK.
    pub fn outstanding(&self) -> usize {
        self.segments.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: Rules = Rules::RTTLAB;

    fn none() -> std::iter::Empty<(u32, u32)> {
        std::iter::empty()
    }

    #[test]
    fn an_ack_times_the_segment_it_ends_at() {
        let mut h = SeqHalf::default();
        assert_eq!(h.segment(1000, 100, 10, 0), Kind::New);
        assert_eq!(h.segment(1100, 100, 20, 0), Kind::New);
        // A delayed ACK of both: timed from the second.
        assert_eq!(h.ack(1200, none(), R, 70), Some(50));
        assert_eq!(h.outstanding(), 0);
        // A duplicate gives nothing.
        assert_eq!(h.ack(1200, none(), R, 80), None);
    }

    #[test]
    fn a_partial_ack_trims_and_an_ack_inside_a_segment_gives_nothing() {
        let mut h = SeqHalf::default();
        h.segment(0, 1000, 0, 0);
        assert_eq!(h.ack(500, none(), R, 10), None);
        assert_eq!(h.outstanding(), 1);
        assert_eq!(h.ack(1000, none(), R, 30), Some(30));
    }

    #[test]
    fn karn_no_sample_from_a_retransmitted_segment_and_spurious_ones_are_counted() {
        let mut h = SeqHalf::default();
        h.segment(0, 100, 0, 0);
        h.segment(100, 100, 1, 0);
        assert_eq!(h.segment(0, 100, 200, 0), Kind::Retransmission);
        assert_eq!(h.ack(100, none(), R, 210), None);
        assert_eq!(h.ack(200, none(), R, 220), Some(219));
        assert_eq!(h.segment(100, 100, 300, 0), Kind::SpuriousRetransmission);
        assert_eq!((h.retransmissions, h.spurious), (2, 1));
    }

    #[test]
    fn sacked_segments_are_timed_at_the_sack_not_after_the_repair() {
        let mut h = SeqHalf::default();
        for i in 0..4u32 {
            h.segment(i * 100, 100, u64::from(i), 0);
        }
        // Segment 0 lost: the receiver SACKs 100..200, then 100..300.
        assert_eq!(h.ack(0, [(100, 200)].into_iter(), R, 50), Some(49));
        assert_eq!(h.ack(0, [(100, 300)].into_iter(), R, 52), Some(50));
        assert_eq!(h.segment(0, 100, 100, 0), Kind::Retransmission);
        // The repair's cumulative ACK covers SACKed data and a retransmission: nothing.
        assert_eq!(h.ack(300, none(), R, 120), None);
        assert_eq!(h.ack(400, none(), R, 130), Some(127));
        // A D-SACK (below the ACK) is not an acknowledgement of anything new.
        assert_eq!(h.ack(400, [(0, 100)].into_iter(), R, 140), None);
    }

    #[test]
    fn a_segment_never_seen_below_the_front_is_out_of_order_and_timed() {
        let mut h = SeqHalf::default();
        h.segment(0, 100, 0, 0);
        h.segment(200, 100, 5, 0);
        assert_eq!(h.segment(100, 100, 6, 0), Kind::OutOfOrder);
        assert_eq!(h.ack(200, none(), R, 40), Some(34));
        assert_eq!(h.out_of_order, 1);
    }

    #[test]
    fn sequence_numbers_wrap() {
        let mut h = SeqHalf::default();
        h.segment(u32::MAX - 49, 100, 0, 0);
        assert_eq!(h.segment(50, 100, 1, 0), Kind::New);
        assert_eq!(h.ack(50, none(), R, 10), Some(10));
        assert_eq!(h.ack(150, none(), R, 12), Some(11));
    }

    /// Witness: arithmetic on the times given. A segment within the limit is followed
    /// (its ACK and its retransmission are recognised) but gives no sample.
    #[test]
    fn the_rate_limit_times_one_segment_per_interval() {
        let mut h = SeqHalf::default();
        assert_eq!(h.segment(0, 100, 0, 50), Kind::New);
        assert_eq!(h.segment(100, 100, 10, 50), Kind::New);
        assert_eq!(h.segment(200, 100, 60, 50), Kind::New);
        assert_eq!(h.rate_limited, 1);
        assert_eq!(h.ack(100, none(), R, 70), Some(70));
        assert_eq!(h.ack(200, none(), R, 80), None, "passed over, so not timed");
        assert_eq!(h.karn_skipped, 0);
        assert_eq!(h.segment(100, 100, 90, 50), Kind::SpuriousRetransmission);
        assert_eq!(h.ack(300, none(), R, 100), Some(40));
    }

    /// Witness: arithmetic on sequence numbers. Data more than 2^30 from the highest
    /// sequence seen (ahead or behind) is not followed; data within it is.
    #[test]
    fn segments_past_the_largest_window_are_not_followed() {
        let mut h = SeqHalf::default();
        h.segment(1000, 100, 0, 0);
        assert_eq!(
            h.segment(1100 + MAX_WINDOW + 1, 10, 1, 0),
            Kind::OutOfWindow
        );
        assert_eq!(
            h.segment(1100u32.wrapping_sub(MAX_WINDOW + 10), 10, 2, 0),
            Kind::OutOfWindow
        );
        assert_eq!(h.untracked, 2);
        assert_eq!(h.segment(1100 + MAX_WINDOW, 10, 3, 0), Kind::New);
        assert_eq!(h.ack(1100, none(), R, 10), Some(10));
    }
}
