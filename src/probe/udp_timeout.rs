//! UDP_RR's per-request timeout, adapted to the measured round trips as TCP's RTO is
//! (RFC 6298 §2: SRTT and RTTVAR with gains 1/8 and 1/4, RTO = SRTT + max(G, 4·RTTVAR)),
//! the floor playing G's part — a margin over SRTT the variance term never goes below,
//! as Linux's rto_min is for TCP (`tcp_set_rto`) — and a ceiling. Without it a steady
//! path's RTTVAR decays to microseconds (the agent's round trips, timed by kernel
//! stamps, hardly vary) and a reply a millisecond late on a 24 ms path counted lost. A fixed 1 s timeout makes every lost request or response cost a
//! second: on a 10 ms path with 3 % loss each way, UDP_RR was sampled a quarter as often
//! as TCP_RR, and only between losses. Karn's rule needs no care here: a late reply is
//! told apart by its sequence number and never sampled.

use std::time::Duration;

/// The adaptive timeout of one UDP_RR stream.
#[derive(Clone, Copy, Debug)]
pub struct UdpTimeout {
    srtt_ns: Option<u64>,
    rttvar_ns: u64,
    floor: Duration,
    ceiling: Duration,
}

impl UdpTimeout {
    /// Before any sample the timeout is `ceiling` (RFC 6298's initial RTO is 1 s).
    pub fn new(floor: Duration, ceiling: Duration) -> Self {
        Self {
            srtt_ns: None,
            rttvar_ns: 0,
            floor,
            ceiling: ceiling.max(floor),
        }
    }

    /// Take one round trip into the estimate.
    pub fn sample(&mut self, rtt: Duration) {
        let r = crate::stats::units::ns(rtt);
        match self.srtt_ns {
            None => {
                self.srtt_ns = Some(r);
                self.rttvar_ns = r / 2;
            }
            Some(srtt) => {
                self.rttvar_ns = (3 * self.rttvar_ns + srtt.abs_diff(r)) / 4;
                self.srtt_ns = Some((7 * srtt + r) / 8);
            }
        }
    }

    /// A request without a reply after this is lost.
    pub fn current(&self) -> Duration {
        match self.srtt_ns {
            None => self.ceiling,
            Some(srtt) => {
                let margin = (4 * self.rttvar_ns).max(crate::stats::units::ns(self.floor));
                Duration::from_nanos(srtt.saturating_add(margin)).min(self.ceiling)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Witness: RFC 6298's arithmetic by hand.
    #[test]
    fn follows_rfc_6298_with_its_floor_as_g_and_a_ceiling() {
        let mut t = UdpTimeout::new(10 * MS, 1000 * MS);
        assert_eq!(t.current(), 1000 * MS);
        // First sample 40 ms: SRTT 40, RTTVAR 20, RTO 40 + 80 = 120 ms.
        t.sample(40 * MS);
        assert_eq!(t.current(), 120 * MS);
        // Then 80 ms: RTTVAR = 3/4·20 + 1/4·|40 − 80| = 25; SRTT = 7/8·40 + 1/8·80 = 45.
        t.sample(80 * MS);
        assert_eq!(t.current(), (45 + 100) * MS);
        // A steady path settles at SRTT plus the floor: 100 µs + 10 ms, 24 ms + 10 ms.
        for (rtt, want) in [
            (Duration::from_micros(100), Duration::from_micros(10_100)),
            (24 * MS, 34 * MS),
        ] {
            let mut f = UdpTimeout::new(10 * MS, 1000 * MS);
            for _ in 0..100 {
                f.sample(rtt);
            }
            assert_eq!(f.current(), want, "{rtt:?}");
        }
        // A 2 s path is held at the ceiling.
        let mut c = UdpTimeout::new(10 * MS, 1000 * MS);
        c.sample(2000 * MS);
        assert_eq!(c.current(), 1000 * MS);
    }
}
