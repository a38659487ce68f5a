//! The TS engine: RTT from TCP timestamps (RFC 7323), as Strowes (seeds 002/003) and
//! pping compute it. The first time a TSval is seen going one way is remembered; the
//! first packet coming back whose TSecr echoes it closes a loop from the capture
//! point to the far host and back. Only the first echo counts (later ones are
//! delayed duplicates), and a TSval that was echoed is never recorded again, so a
//! repeated value (the clock ticks once a millisecond on Linux) cannot pair with a
//! stale echo.
//!
//! Where rttlab's default differs from pping, on purpose:
//! - TSvals are recorded from segments that occupy sequence space (data, SYN, FIN);
//!   pping records pure ACKs too. A pure ACK's TSval is echoed only when the other
//!   end next has something to send, so it measures that end's idle time, not the
//!   path. [`Record::Any`] (`--ts-rule pping`) restores pping's rule.
//! - The SYN's TSval is recorded, so the handshake gives a sample; pping ignores a
//!   direction until it has seen the reverse one (kept in [`Record::Any`]).
//! - An echo of a TSval older than one already echoed (a reordered ACK) gives no
//!   sample; pping reports it, overestimating the RTT.

use std::collections::VecDeque;

/// Which segments have their TSval remembered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Record {
    /// Segments that carry data or SYN/FIN (rttlab's default).
    #[default]
    Data,
    /// Every packet with timestamps, once the reverse direction has been seen
    /// (pping's rule).
    Any,
}

/// How far a TSval or an echo may lie from the last TSval recorded: 2^30 ticks (12
/// days at Linux's 1 ms). A flow is forgotten long before its clock moves that much,
/// so anything farther is damaged or forged; passing it over keeps every comparison
/// within 2^31, where serial arithmetic orders values.
pub const MAX_TS_STEP: u32 = 1 << 30;

/// Whether `a` and `b` lie within `d` of each other, either way round.
#[inline]
pub fn within(a: u32, b: u32, d: u32) -> bool {
    a.wrapping_sub(b).min(b.wrapping_sub(a)) <= d
}

/// `a` comes before `b` in 32-bit serial arithmetic (RFC 1982): TSvals and sequence
/// numbers wrap.
#[inline]
pub fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// What pping notes with a TSval (`tsInfo` in pping.cpp): the bytes its direction
/// had sent through the capture point, this packet included (`fBytes`), and the
/// bytes of that direction at the reverse direction's last sample (`dBytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PpingBytesAt {
    /// `fBytes`: bytes (whole frames) this direction had sent through the capture point,
    /// this packet included.
    pub sent: u64,
    /// `dBytes`: this direction's `sent` as noted with the TSval that the reverse
    /// direction's last sample echoed.
    pub departed: u64,
}

/// Timestamps sent by one endpoint of a flow and not yet echoed.
#[derive(Debug, Default)]
pub struct TsHalf {
    /// (TSval, first seen ns), oldest first; TSvals increase along it.
    pending: VecDeque<(u32, u64)>,
    /// pping's byte counts when each pending TSval was seen (its `-m` columns), in
    /// step with `pending` when the caller keeps them.
    bytes: VecDeque<PpingBytesAt>,
    last_recorded: Option<u32>,
    last_echoed: Option<u32>,
    /// A packet with usable timestamps has been seen from this endpoint.
    pub seen: bool,
    /// TSvals dropped unechoed because [`TsHalf::CAP`] were outstanding, or passed
    /// over for lying more than [`MAX_TS_STEP`] from the last recorded.
    pub overflow: u64,
    /// When the last TSval was given an entry (for the rate limit).
    last_entry_ns: Option<u64>,
    /// TSvals not given an entry for the rate limit.
    pub rate_limited: u64,
}

impl TsHalf {
    /// Most TSvals outstanding per direction: a window of 1 ms ticks, so RTTs up to
    /// about 4 s keep every tick (16 bytes each: 64 KiB at most).
    pub const CAP: usize = 4096;

    /// Remember `tsval`, first seen at `now`, unless it was seen or echoed already;
    /// with pping's byte counts at that moment when the caller keeps them (always or
    /// never for one half). Within `rate_limit_ns` of the last TSval remembered (0:
    /// no limit), a new TSval is seen but not remembered, as ePPing samples: its later
    /// packets are not its first sighting either.
    #[inline]
    pub fn record(
        &mut self,
        tsval: u32,
        now: u64,
        bytes: Option<PpingBytesAt>,
        rate_limit_ns: u64,
    ) {
        if self.last_recorded.is_some_and(|l| !before(l, tsval))
            || self.last_echoed.is_some_and(|e| !before(e, tsval))
        {
            return;
        }
        if self
            .last_recorded
            .is_some_and(|l| !within(l, tsval, MAX_TS_STEP))
        {
            self.overflow += 1;
            return;
        }
        if rate_limit_ns > 0
            && self
                .last_entry_ns
                .is_some_and(|t| now.saturating_sub(t) < rate_limit_ns)
        {
            self.last_recorded = Some(tsval);
            self.rate_limited += 1;
            return;
        }
        self.last_entry_ns = Some(now);
        if self.pending.len() == Self::CAP {
            self.pop();
            self.overflow += 1;
        }
        self.pending.push_back((tsval, now));
        if let Some(b) = bytes {
            self.bytes.push_back(b);
        }
        self.last_recorded = Some(tsval);
    }

    /// A TSecr from the other endpoint, at `now`: the RTT if it echoes a pending
    /// TSval for the first time and that TSval is at most `max_age_ns` old. Older
    /// pending TSvals are dropped: an echo never goes backwards except by reordering.
    ///
    /// With the RTT, pping's byte counts kept with the echoed TSval.
    #[inline]
    pub fn echo(
        &mut self,
        tsecr: u32,
        now: u64,
        max_age_ns: u64,
    ) -> Option<(u64, Option<PpingBytesAt>)> {
        if self
            .last_recorded
            .is_some_and(|l| !within(l, tsecr, MAX_TS_STEP))
        {
            return None;
        }
        while let Some(&(v, t)) = self.pending.front() {
            if before(v, tsecr) {
                self.pop();
                continue;
            }
            if v != tsecr {
                return None;
            }
            let bytes = self.pop();
            self.last_echoed = Some(v);
            let rtt = now.saturating_sub(t);
            return (rtt <= max_age_ns).then_some((rtt, bytes));
        }
        None
    }

    #[inline]
    fn pop(&mut self) -> Option<PpingBytesAt> {
        self.pending.pop_front();
        self.bytes.pop_front()
    }

    /// TSvals waiting for an echo.
    pub fn outstanding(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AGE: u64 = 10_000_000_000;

    #[test]
    fn first_sighting_and_first_echo_only() {
        let mut h = TsHalf::default();
        h.record(100, 1_000, None, 0);
        // The same TSval later (same clock tick) keeps the first time.
        h.record(100, 1_500, None, 0);
        h.record(101, 2_000, None, 0);
        assert_eq!(h.echo(100, 5_000, AGE), Some((4_000, None)));
        // A duplicate echo gives nothing.
        assert_eq!(h.echo(100, 6_000, AGE), None);
        // An echoed TSval is never recorded again.
        h.record(100, 7_000, None, 0);
        assert_eq!(h.echo(101, 9_000, AGE), Some((7_000, None)));
        assert_eq!(h.outstanding(), 0);
    }

    #[test]
    fn an_echo_skips_older_tsvals_and_waits_for_newer_ones() {
        let mut h = TsHalf::default();
        for (v, t) in [(10, 0), (11, 1), (12, 2)] {
            h.record(v, t, None, 0);
        }
        // Echoing 11 drops 10 (its echo would only come from a reordered ACK).
        assert_eq!(h.echo(11, 10, AGE), Some((9, None)));
        assert_eq!(h.echo(10, 11, AGE), None);
        // An echo of something never recorded (a pure ACK's TSval) gives nothing and
        // keeps newer ones.
        assert_eq!(h.echo(11, 12, AGE), None);
        assert_eq!(h.outstanding(), 1);
    }

    #[test]
    fn tsvals_wrap_around() {
        let mut h = TsHalf::default();
        h.record(u32::MAX - 1, 0, None, 0);
        h.record(u32::MAX, 1, None, 0);
        h.record(0, 2, None, 0);
        h.record(1, 3, None, 0);
        assert!(before(u32::MAX, 0));
        assert_eq!(h.echo(0, 100, AGE), Some((98, None)));
        assert_eq!(h.echo(1, 100, AGE), Some((97, None)));
        // u32::MAX is before 0: already passed.
        h.record(u32::MAX, 200, None, 0);
        assert_eq!(h.outstanding(), 0);
    }

    #[test]
    fn stale_tsvals_give_no_sample_and_the_cap_holds() {
        let mut h = TsHalf::default();
        h.record(5, 0, None, 0);
        assert_eq!(h.echo(5, AGE + 1, AGE), None);
        for v in 0..(TsHalf::CAP as u32 + 10) {
            h.record(1000 + v, u64::from(v), None, 0);
        }
        assert_eq!(h.outstanding(), TsHalf::CAP);
        assert_eq!(h.overflow, 10);
        assert_eq!(h.echo(1000, 50_000, AGE), None, "the oldest were dropped");
        assert_eq!(h.echo(1010, 50_000, AGE), Some((50_000 - 10, None)));
    }

    /// Witness: arithmetic on hand-made records: the byte counts come back with their
    /// own TSval, also after older ones were skipped or dropped for the cap.
    #[test]
    fn byte_counts_stay_with_their_tsval() {
        let at = |sent| {
            Some(PpingBytesAt {
                sent,
                departed: sent / 2,
            })
        };
        let mut h = TsHalf::default();
        h.record(10, 0, at(100), 0);
        h.record(11, 1, at(200), 0);
        h.record(12, 2, at(300), 0);
        assert_eq!(h.echo(11, 10, AGE), Some((9, at(200))));
        assert_eq!(h.echo(12, 10, AGE), Some((8, at(300))));
        let mut h = TsHalf::default();
        for v in 0..TsHalf::CAP as u32 + 3 {
            h.record(v, u64::from(v), at(u64::from(v)), 0);
        }
        assert_eq!(h.echo(3, 10_000, AGE), Some((10_000 - 3, at(3))));
    }

    /// Witness: arithmetic on the times given. Within the limit of the last TSval
    /// given an entry, a new TSval is seen (never recorded later) but not timed.
    #[test]
    fn the_rate_limit_times_one_tsval_per_interval() {
        let mut h = TsHalf::default();
        h.record(10, 0, None, 100);
        h.record(11, 50, None, 100);
        h.record(12, 100, None, 100);
        h.record(11, 120, None, 100);
        assert_eq!(h.rate_limited, 1);
        assert_eq!(h.echo(11, 130, AGE), None, "11 was passed over");
        assert_eq!(h.echo(12, 140, AGE), Some((40, None)));
        assert_eq!(h.outstanding(), 0);
    }

    /// Witness: arithmetic on TSvals. A TSval or echo more than 2^30 from the last
    /// recorded is passed over; the state it would have moved stays as it was.
    #[test]
    fn values_past_the_largest_step_are_passed_over() {
        let mut h = TsHalf::default();
        h.record(1, 0, None, 0);
        h.record(1 + MAX_TS_STEP + 1, 1, None, 0);
        assert_eq!(h.overflow, 1);
        assert_eq!(
            h.echo(1 + (1 << 31), 2, AGE),
            None,
            "a far echo kills nothing"
        );
        assert_eq!(h.echo(1, 3, AGE), Some((3, None)));
    }
}
