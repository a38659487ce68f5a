//! The retransmission timeline of one small segment in flight when the network stops
//! delivering, and the TCP idle duration it implies (seed 001).
//!
//! Two flavours:
//! - [`Flavour::Simple`], the seed's theory: the first retransmission after rto_min;
//!   thick doubles (R, 3R, 7R, …: R·(2ᵏ−1)); thin repeats rto_min for the first six
//!   retransmissions, then doubles (R … 6R, 8R, 12R, 20R, …). No TLP, no jiffies. The
//!   idle is the first retransmission at or after the disruption's end.
//! - [`Flavour::Linux`], the kernel's rules (docs/ARCHITECTURE.md, "Linux TCP retransmission timing"; each cited where
//!   used): times in jiffies at the running HZ, a tail loss probe in front, the timer
//!   wheel's rounding, thin-stream linear timeouts as `tcp_retransmit_timer` applies them,
//!   and — when the blackout is a netfilter drop on the sending host — the zero-window
//!   probe timer. Times are ranges, because where in a jiffy a timer is armed is not
//!   known; the prediction is the range's middle.

use serde::Serialize;
use std::time::Duration;

/// Which model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Flavour {
    /// The seed's theory: rto_min, then doubling (thin: rto_min six times first); no TLP,
    /// no jiffies.
    Simple,
    /// The kernel's rules: jiffies at `hz`, the TLP, the timer wheel's rounding and, for
    /// local drops, the zero-window-probe timer.
    Linux,
}

/// Where packets are dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DropAt {
    /// In the path (a switch, the lab's emulator): every send is lost; TLP/RTO apply.
    Path,
    /// On the end host (nftables INPUT+OUTPUT, as in seed 001's script): a refused new
    /// send falls back to the zero-window-probe timer; the peer follows its TLP/RTO.
    Local,
}

/// Inputs of the model.
#[derive(Clone, Debug, Serialize)]
pub struct RtoModel {
    /// Which model computes the timeline.
    pub flavour: Flavour,
    /// The minimum RTO (`--rto-min`; a route's `rto_min` or `net.ipv4.tcp_rto_min_us`);
    /// in JSON `rto_min_s`, seconds.
    #[serde(rename = "rto_min_s", with = "crate::stats::units::seconds")]
    pub rto_min: Duration,
    /// Thin-stream linear timeouts (`tcp_thin_linear_timeouts`): the first six
    /// retransmissions keep the base RTO instead of doubling it.
    pub thin: bool,
    /// The kernel's timer frequency (HZ: 100, 250, 300 or 1000), the length of a jiffy;
    /// the `simple` flavour ignores it.
    pub hz: u32,
    /// Smoothed RTT before the loss (µs RTTs make it irrelevant, as in the seed).
    #[serde(rename = "srtt_s", with = "crate::stats::units::seconds")]
    pub srtt: Duration,
    /// A tail loss probe goes out before the first RTO (`--no-tlp` turns it off, as
    /// `net.ipv4.tcp_early_retrans` < 3 does); the `linux` flavour only.
    pub tlp: bool,
    /// The kernel's RTO cap (`tcp_rto_max`, 120 s by default).
    #[serde(rename = "rto_max_s", with = "crate::stats::units::seconds")]
    pub rto_max: Duration,
    /// Where packets are dropped; for local drops the `linux` flavour adds the
    /// zero-window-probe timer, and a transmission due exactly at the disruption's end is
    /// still lost ([`idle`]).
    pub drop_at: DropAt,
}

impl RtoModel {
    /// The seed's defaults: rto_min 200 ms, thick, HZ 1000, TLP on, path drops.
    pub fn new(flavour: Flavour, rto_min: Duration, thin: bool, hz: u32) -> Self {
        Self {
            flavour,
            rto_min,
            thin,
            hz,
            srtt: Duration::from_micros(100),
            tlp: true,
            rto_max: Duration::from_secs(120),
            drop_at: DropAt::Path,
        }
    }
}

/// What sends a packet; in JSON `"kind": "tlp"` or `"kind": "rto", "n": 2`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "n")]
pub enum EventKind {
    /// Tail loss probe (`tcp_send_loss_probe`).
    Tlp,
    /// The n-th retransmission timeout (`tcp_retransmit_timer`).
    Rto(u32),
    /// The n-th zero-window probe of the local refused send (`tcp_probe_timer`).
    Probe0(u32),
}

/// One (re)transmission: when, in µs after the lost transmission, as a range.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Event {
    /// What sent it; flattened into the event's JSON as `"kind"` (and `"n"`).
    #[serde(flatten)]
    pub kind: EventKind,
    /// Earliest time it goes out, µs after the lost transmission.
    pub lo_us: f64,
    /// Latest time it goes out, µs after the lost transmission (`lo_us` in the `simple`
    /// flavour).
    pub hi_us: f64,
}

impl Event {
    /// The prediction: the middle of the range.
    pub fn at_us(&self) -> f64 {
        (self.lo_us + self.hi_us) / 2.0
    }
}

/// Events until `horizon` (after the last disruption of interest).
pub fn timeline(m: &RtoModel, horizon: Duration) -> Vec<Event> {
    let h = horizon.as_secs_f64() * 1e6;
    match m.flavour {
        Flavour::Simple => simple(m, h),
        Flavour::Linux => {
            let mut ev = linux_path(m, h);
            if m.drop_at == DropAt::Local {
                ev.extend(linux_probe0(m, h));
                ev.sort_by(|a, b| a.at_us().total_cmp(&b.at_us()));
            }
            ev
        }
    }
}

/// The TCP idle duration for a disruption of `d`: the first (re)transmission after it
/// ends. `None` past the horizon the timeline was computed to.
///
/// A (re)transmission due exactly when the disruption ends: the seed's theory counts it
/// as getting through; so does a path drop (the lab's emulator ends its window at
/// exactly `d`, and a kernel timer never fires early, so the packet reaches the link
/// just after). A local drop (nftables) ends late — removing the rules takes a process
/// start — so there the packet is still dropped.
pub fn idle<'a>(events: &'a [Event], m: &RtoModel, d: Duration) -> Option<&'a Event> {
    let d = d.as_secs_f64() * 1e6;
    events.iter().find(|e| match (m.flavour, m.drop_at) {
        (Flavour::Simple, _) | (Flavour::Linux, DropAt::Path) => e.at_us() >= d - 1e-6,
        (Flavour::Linux, DropAt::Local) => e.at_us() > d,
    })
}

fn simple(m: &RtoModel, h: f64) -> Vec<Event> {
    let r = m.rto_min.as_secs_f64() * 1e6;
    let mut out = Vec::new();
    let (mut t, mut len, mut n) = (0.0, r, 0u32);
    while t <= h {
        n += 1;
        t += len;
        out.push(Event {
            kind: EventKind::Rto(n),
            lo_us: t,
            hi_us: t,
        });
        // Thin: rto_min for the first six retransmissions, then doubling.
        if !m.thin || n >= 6 {
            len *= 2.0;
        }
    }
    out
}

/// `msecs_to_jiffies`/`usecs_to_jiffies` of a duration.
fn to_jiffies(d: Duration, hz: u32) -> u64 {
    crate::kernel::hz::usecs_to_jiffies(crate::stats::units::us(d), hz)
}

/// Jiffies after which a timer of `n` jiffies re-armed at a tick edge fires, as a range
/// (`calc_wheel_index`/`calc_index` in kernel/time/timer.c): level 0 (n < 63) is exact
/// to the next tick; level 1 rounds up to 8 jiffies, level 2 to 64.
fn fire(n: u64) -> (u64, u64) {
    match n {
        0..63 => (n + 1, n + 1),
        63..504 => (n + 1, n + 8),
        _ => (n + 1, n + 64),
    }
}

/// The base RTO in jiffies (docs/ARCHITECTURE.md R1, [`crate::kernel::hz::rto_jiffies`]).
fn base_rto_jiffies(m: &RtoModel) -> u64 {
    let us = crate::stats::units::us;
    crate::kernel::hz::rto_jiffies(us(m.srtt), us(m.rto_min), m.hz)
}

fn linux_path(m: &RtoModel, h: f64) -> Vec<Event> {
    let t = 1e6 / f64::from(m.hz);
    let n = base_rto_jiffies(m);
    let cap = to_jiffies(m.rto_max, m.hz);
    let mut out = Vec::new();
    // The first timer is armed by the original send, mid-jiffy: fires in (n, n+1] j.
    // With a TLP in front, `tcp_schedule_loss_probe` arms PTO = min(2·srtt + rto_min
    // (one packet out), RTO) = n jiffies too (R2); the TLP does not count as a
    // retransmission and `tcp_rearm_rto` then arms a full, un-backed-off RTO.
    let mut lo = n as f64 * t;
    let mut hi = (n + 1) as f64 * t;
    let first = if m.tlp {
        EventKind::Tlp
    } else {
        EventKind::Rto(1)
    };
    out.push(Event {
        kind: first,
        lo_us: lo,
        hi_us: hi,
    });
    let mut retrans = u32::from(!m.tlp);
    let mut rto = n;
    while lo <= h {
        // The next timer length. Thin (`tcp_retransmit_timer`, R4): icsk_retransmits
        // is incremented before the test, so the timers armed by RTO #1…#6 keep the base
        // RTO; from RTO #7 on, and always when thick, the RTO doubles (capped).
        // After the TLP (retrans == 0) the RTO is the un-backed-off base too.
        let len = if retrans == 0 || (m.thin && retrans <= 6) {
            n
        } else {
            rto = (rto * 2).min(cap);
            rto
        };
        let (a, b) = fire(len);
        lo += a as f64 * t;
        hi += b as f64 * t;
        retrans += 1;
        out.push(Event {
            kind: EventKind::Rto(retrans),
            lo_us: lo,
            hi_us: hi,
        });
    }
    out
}

/// The zero-window-probe schedule of a send refused by the local OUTPUT hook
/// (`tcp_check_probe_timer`, `tcp_probe0_base` = max(icsk_rto, TCP_RTO_MIN), then
/// `tcp_probe0_when` = base << backoff): 200 ms whatever rto_min is below that.
fn linux_probe0(m: &RtoModel, h: f64) -> Vec<Event> {
    let t = 1e6 / f64::from(m.hz);
    let p = base_rto_jiffies(m).max(u64::from(m.hz) / 5);
    let cap = to_jiffies(m.rto_max, m.hz);
    let (mut lo, mut hi) = (p as f64 * t, (p + 1) as f64 * t);
    let mut out = vec![Event {
        kind: EventKind::Probe0(1),
        lo_us: lo,
        hi_us: hi,
    }];
    let mut len = p;
    let mut k = 1;
    while lo <= h {
        len = (len * 2).min(cap);
        let (a, b) = fire(len);
        lo += a as f64 * t;
        hi += b as f64 * t;
        k += 1;
        out.push(Event {
            kind: EventKind::Probe0(k),
            lo_us: lo,
            hi_us: hi,
        });
    }
    out
}

/// The delayed-ACK ceiling on ≥ 6.11 (`tcp_delack_max`: min(icsk_delack_max,
/// max(tcp_rto_min, 2) − 1) jiffies), in µs.
pub fn delack_max_us(rto_min: Duration, hz: u32) -> u64 {
    let j = to_jiffies(rto_min, hz).max(2) - 1;
    j.min(u64::from(hz) / 5) * (1_000_000 / u64::from(hz))
}

/// Seed 001's grid of disruption durations: 10…100 ms by 10, then 0.2…1.5 s by 0.1.
pub fn seed_grid() -> Vec<Duration> {
    (1..=10)
        .map(|i| Duration::from_millis(10 * i))
        .chain((2..=15).map(|i| Duration::from_millis(100 * i)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// The model's idle (ms) for every cell of seed 001's tables.
    fn seed_grid_predictions(flavour: Flavour, hz: u32, drop_at: DropAt) -> [[f64; 6]; 24] {
        let mut out = [[0.0; 6]; 24];
        for (c, &(r, thin)) in SEED_COLUMNS.iter().enumerate() {
            let mut m = RtoModel::new(flavour, MS(r), thin, hz);
            m.drop_at = drop_at;
            let ev = timeline(&m, MS(4000));
            for (row, &d) in seed_grid().iter().enumerate() {
                out[row][c] = idle(&ev, &m, d).unwrap().at_us() / 1000.0;
            }
        }
        out
    }

    /// The columns of seed 001's tables: (rto_min ms, thin).
    const SEED_COLUMNS: [(u64, bool); 6] = [
        (5, true),
        (5, false),
        (50, true),
        (50, false),
        (200, true),
        (200, false),
    ];

    /// Seed 001's "Theory" table, columns Thin 5, Thick 5, Thin 50, Thick 50, Thin 200,
    /// Thick 200, rows `seed_grid()`.
    const THEORY: [[u64; 6]; 24] = [
        [10, 10, 50, 50, 200, 200],
        [20, 30, 50, 50, 200, 200],
        [30, 30, 50, 50, 200, 200],
        [40, 70, 50, 50, 200, 200],
        [60, 70, 50, 50, 200, 200],
        [60, 70, 100, 150, 200, 200],
        [100, 70, 100, 150, 200, 200],
        [100, 150, 100, 150, 200, 200],
        [100, 150, 100, 150, 200, 200],
        [100, 150, 100, 150, 200, 200],
        [340, 310, 200, 350, 200, 200],
        [340, 310, 300, 350, 400, 600],
        [660, 630, 400, 750, 400, 600],
        [660, 630, 600, 750, 600, 600],
        [660, 630, 600, 750, 600, 600],
        [1300, 1270, 1000, 750, 800, 1400],
        [1300, 1270, 1000, 1550, 800, 1400],
        [1300, 1270, 1000, 1550, 1000, 1400],
        [1300, 1270, 1000, 1550, 1000, 1400],
        [1300, 1270, 1800, 1550, 1200, 1400],
        [1300, 1270, 1800, 1550, 1200, 1400],
        [1300, 2550, 1800, 1550, 1600, 1400],
        [2580, 2550, 1800, 1550, 1600, 1400],
        [2580, 2550, 1800, 1550, 1600, 3200],
    ];

    /// The seed's own arithmetic is off in two places; every other cell must match:
    /// - Thick 5 ms: the whole column is 5·(2ᵏ−2) (10, 30, 70, …), as if the first
    ///   timeout were 2·rto_min; its own rule (thick 50 ms: 50, 150, 350) gives
    ///   5·(2ᵏ−1) = 15, 35, 75, ….
    /// - Thick 200 ms at 1.5 s reads 3200; 200·(2⁴−1) = 3000.
    #[test]
    fn simple_reproduces_the_seeds_theory_table() {
        let predicted = seed_grid_predictions(Flavour::Simple, 1000, DropAt::Path);
        let mut mismatches = Vec::new();
        for (row, d) in seed_grid().iter().enumerate() {
            for (c, &(r, thin)) in SEED_COLUMNS.iter().enumerate() {
                let (got, want) = (predicted[row][c], THEORY[row][c] as f64);
                if (got - want).abs() > 1e-6 {
                    mismatches.push((r, thin, d.as_millis(), want, got));
                }
            }
        }
        let explained = |&(r, thin, d, want, got): &(u64, bool, u128, f64, f64)| {
            (r == 5 && !thin && got - want == 5.0)
                || (r == 200 && !thin && d == 1500 && want == 3200.0 && got == 3000.0)
        };
        assert!(mismatches.iter().all(explained), "{mismatches:?}");
        // The thick 5 ms column differs in every row whose cell is not a shared value.
        assert_eq!(mismatches.iter().filter(|m| m.0 == 5).count(), 24);
        assert_eq!(mismatches.len(), 25);
    }

    /// docs/ARCHITECTURE.md §11's schedule table at HZ=250 (ms after the lost transmission).
    #[test]
    fn linux_matches_kernel_rto_schedules() {
        type Schedule = &'static [(u64, u64)];
        let cases: [(u64, bool, Schedule); 4] = [
            (
                5,
                false,
                &[
                    (12, 16),
                    (28, 32),
                    (56, 60),
                    (108, 112),
                    (208, 212),
                    (404, 408),
                    (792, 824),
                ],
            ),
            (
                5,
                true,
                &[
                    (12, 16),
                    (28, 32),
                    (44, 48),
                    (60, 64),
                    (76, 80),
                    (92, 96),
                    (108, 112),
                    (124, 128),
                    (152, 156),
                    (204, 208),
                    (304, 308),
                    (500, 504),
                    (888, 920),
                ],
            ),
            (
                50,
                true,
                &[
                    (56, 60),
                    (116, 120),
                    (176, 180),
                    (236, 240),
                    (296, 300),
                    (356, 360),
                    (416, 420),
                    (476, 480),
                    (592, 596),
                    (820, 824),
                    (1272, 1304),
                ],
            ),
            (
                200,
                false,
                &[(204, 208), (412, 416), (824, 856), (1644, 1704)],
            ),
        ];
        for (r, thin, want) in cases {
            let m = RtoModel::new(Flavour::Linux, MS(r), thin, 250);
            let ev = timeline(&m, MS(1500));
            for (i, &(lo, hi)) in want.iter().enumerate() {
                let e = ev[i];
                assert_eq!(
                    (e.lo_us / 1000.0, e.hi_us / 1000.0),
                    (lo as f64, hi as f64),
                    "rto_min {r} thin {thin} event {i}: {e:?}"
                );
            }
            assert_eq!(ev[0].kind, EventKind::Tlp);
        }
    }

    #[test]
    fn local_drops_take_the_earlier_of_probe0_and_the_peers_schedule() {
        let mut m = RtoModel::new(Flavour::Linux, MS(200), false, 250);
        m.drop_at = DropAt::Local;
        let ev = timeline(&m, MS(1500));
        let p0: Vec<_> = ev
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Probe0(_)))
            .map(|e| (e.lo_us / 1e3, e.hi_us / 1e3))
            .collect();
        // docs/ARCHITECTURE.md §11, rto_min 200: 204–208, 616–648, 1436–1496.
        assert_eq!(
            &p0[..3],
            &[(204.0, 208.0), (616.0, 648.0), (1436.0, 1496.0)]
        );
        // With rto_min 5 ms the probe timer stays at 200 ms, later than the peer's TLP.
        let mut m5 = RtoModel::new(Flavour::Linux, MS(5), false, 250);
        m5.drop_at = DropAt::Local;
        let ev5 = timeline(&m5, MS(500));
        assert_eq!(idle(&ev5, &m5, MS(10)).unwrap().kind, EventKind::Tlp);
        assert!(ev5
            .iter()
            .any(|e| e.kind == EventKind::Probe0(1) && e.lo_us == 200_000.0));
    }

    #[test]
    fn delayed_ack_ceiling_follows_rto_min() {
        // docs/ARCHITECTURE.md §9 at HZ=250: rto_min 5 ms → 4 ms, 50 ms → 48 ms, 200 ms → 196 ms.
        assert_eq!(
            [5, 50, 200].map(|r| delack_max_us(MS(r), 250)),
            [4_000, 48_000, 196_000]
        );
    }
    /// Seed 001's "Near Present" table: medians measured on a 6.11 kernel (HZ 1000),
    /// blackout by nftables on the host. Columns as `THEORY`, rows `seed_grid()`.
    const NEAR_PRESENT_6_11: [[f64; 6]; 24] = [
        [14.9, 14.6, 52.0, 52.1, 206.4, 206.8],
        [28.0, 27.1, 52.1, 52.0, 206.5, 206.4],
        [35.1, 52.0, 52.1, 52.1, 206.6, 206.5],
        [49.0, 52.1, 52.1, 52.0, 206.7, 206.7],
        [56.1, 101.0, 104.0, 104.1, 206.5, 206.7],
        [69.1, 101.1, 104.1, 104.1, 206.6, 206.2],
        [94.1, 101.1, 104.1, 104.1, 206.4, 206.6],
        [94.2, 101.2, 104.1, 104.1, 206.6, 206.7],
        [142.4, 101.3, 104.1, 104.0, 206.5, 206.6],
        [143.1, 202.6, 155.6, 204.4, 206.6, 206.6],
        [244.8, 402.8, 208.0, 212.5, 209.0, 209.0],
        [446.8, 404.7, 312.1, 421.7, 416.9, 416.5],
        [446.6, 615.6, 416.1, 421.3, 416.8, 416.7],
        [615.8, 615.5, 525.8, 615.7, 616.6, 616.6],
        [615.9, 615.6, 616.0, 615.7, 617.0, 616.8],
        [838.9, 796.9, 733.7, 837.7, 832.6, 824.7],
        [838.6, 1478.3, 1149.6, 837.8, 832.7, 824.8],
        [1475.2, 1477.7, 1149.7, 1476.4, 1040.8, 1476.8],
        [1476.2, 1477.4, 1149.6, 1477.5, 1040.8, 1478.8],
        [1477.2, 1476.5, 1149.4, 1478.9, 1248.8, 1476.3],
        [1477.1, 1476.8, 1476.3, 1477.4, 1248.7, 1477.8],
        [1477.3, 1476.9, 1478.9, 1476.2, 1455.9, 1478.1],
        [1475.8, 1476.4, 1477.4, 1476.7, 1456.6, 1479.1],
        [1667.9, 1627.7, 2024.9, 1713.7, 1664.8, 1686.6],
    ];

    /// The linux flavour, told what the seed's setup was (HZ 1000, local drops), predicts
    /// the seed's own measurements within issue 6's tolerance, max(5 ms, 5 %), in at
    /// least 90 % of the cells (132 of 144 today). The misses sit where the disruption
    /// ends right on a scheduled retransmission, which the seed's script (it overshoots
    /// short blackouts) pushes to the next one.
    #[test]
    fn linux_predicts_the_seeds_measured_6_11_table() {
        let predicted = seed_grid_predictions(Flavour::Linux, 1000, DropAt::Local);
        let (mut hits, mut total) = (0, 0);
        for (p_row, m_row) in predicted.iter().zip(&NEAR_PRESENT_6_11) {
            for (&p, &measured) in p_row.iter().zip(m_row) {
                total += 1;
                if (p - measured).abs() <= (0.05 * measured).max(5.0) {
                    hits += 1;
                }
            }
        }
        assert_eq!(total, 144);
        assert!(
            hits * 10 >= total * 9,
            "{hits} of {total} cells within max(5 ms, 5 %)"
        );
    }
}
