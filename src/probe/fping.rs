//! Several ping targets in one loop, as fping probes them: one socket per address
//! family ([`Echoer`]), each target's requests on its own period, the targets' sends
//! spread apart (fping's `-i`, 10 ms, or less when the period is short), every reply
//! matched to its request by family and sequence number and timed by the kernel's
//! receive stamp.
//!
//! Two ways to end, as fping: a count of requests per target (`-c`/`-C`), or "is it
//! alive": one request, retried with a timeout 1.5 times longer each time (fping's
//! `-r 3 -B 1.5`) until a reply comes.

use super::echo::{Echoer, Reply, Sent};
use super::ping::{PingControl, PingError};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// fping's default time between two requests to different targets (`-i 10`).
pub const SPACING: Duration = Duration::from_millis(10);
/// fping's retries of an unanswered request in alive mode (`-r 3`).
pub const RETRIES: u32 = 3;
/// fping's timeout growth per retry (`-B 1.5`).
const BACKOFF: f64 = 1.5;

/// What a multi-target run does.
#[derive(Clone, Debug)]
pub struct FpingSettings {
    /// The targets, in the order given.
    pub targets: Vec<IpAddr>,
    /// Requests per target (`-c`/`-C`); `None`: alive mode, one answered request each.
    pub count: Option<u64>,
    /// Time between two requests to the same target (ping's `-i`, fping's `-p`).
    pub period: Duration,
    /// A request unanswered this long is lost (alive mode: the first try's).
    pub timeout: Duration,
    /// ICMP payload bytes (ping's `-s`, fping's `-b`).
    pub size: usize,
}

/// One target's outcome.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TargetResult {
    /// Requests sent.
    pub sent: u64,
    /// Each request's round trip, ns, in the order sent; `None`: no reply in time.
    pub rtts_ns: Vec<Option<u64>>,
}

impl TargetResult {
    /// Requests answered in time.
    pub fn received(&self) -> u64 {
        self.rtts_ns.iter().flatten().count() as u64
    }

    /// Smallest, mean and largest round trip, ns (`None`: nothing answered).
    pub fn min_avg_max_ns(&self) -> Option<(u64, u64, u64)> {
        let got: Vec<u64> = self.rtts_ns.iter().flatten().copied().collect();
        let min = *got.iter().min()?;
        let max = *got.iter().max()?;
        Some((min, got.iter().sum::<u64>() / got.len() as u64, max))
    }
}

/// What the loop reports as it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FpingEvent {
    /// Request `index` (from 0) to target `target` was answered after `rtt_ns`.
    Reply {
        /// The target's position in [`FpingSettings::targets`].
        target: usize,
        /// The request's number for that target, from 0 (fping's `[0]`).
        index: u64,
        /// The round trip, ns.
        rtt_ns: u64,
        /// ICMP bytes of the reply.
        bytes: usize,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    /// Send the target's next request.
    Send(usize),
    /// The request with this key has waited its timeout.
    Expire(bool, u16),
}

struct Pending {
    target: usize,
    index: u64,
    sent_ns: u64,
    /// Alive mode: the timeout this try had.
    waited: Duration,
}

/// A request the schedule wants sent now: to [`Transmit::target`], numbered
/// [`Transmit::index`] for that target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// The target's position in [`FpingSettings::targets`].
    pub target: usize,
    /// The request's number for that target, from 0.
    pub index: u64,
}

/// fping's schedule without I/O: time in ([`FpingSchedule::poll_transmit`],
/// [`FpingSchedule::on_sent`], [`FpingSchedule::on_reply`]), requests and replies out,
/// the next moment it needs to be asked again from [`FpingSchedule::poll_timeout`].
pub struct FpingSchedule {
    targets: Vec<IpAddr>,
    count: Option<u64>,
    period: Duration,
    size: usize,
    queue: BinaryHeap<Reverse<(Instant, Due)>>,
    pending: HashMap<(bool, u16), Pending>,
    results: Vec<TargetResult>,
    answered: Vec<bool>,
    next_timeout: Vec<Duration>,
}

impl FpingSchedule {
    /// The first request to each target at `start`, the targets' first requests spread
    /// apart by fping's `-i` (or less when the period is short).
    pub fn new(s: &FpingSettings, start: Instant) -> Self {
        let n = s.targets.len();
        let spacing = SPACING.min(s.period / u32::try_from(n.max(1)).unwrap_or(u32::MAX));
        Self {
            targets: s.targets.clone(),
            count: s.count,
            period: s.period,
            size: s.size,
            queue: (0..n)
                .map(|i| Reverse((start + spacing * i as u32, Due::Send(i))))
                .collect(),
            pending: HashMap::new(),
            results: vec![TargetResult::default(); n],
            answered: vec![false; n],
            next_timeout: vec![s.timeout; n],
        }
    }

    /// The address of target `target`.
    pub fn address(&self, target: usize) -> IpAddr {
        self.targets[target]
    }

    /// The next request due by `now`, counted as sent; requests whose timeout has
    /// passed by then are taken as lost first (alive mode: retried, waiting longer).
    /// Call until `None`, handing each to [`FpingSchedule::on_sent`].
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        while let Some(&Reverse((at, due))) = self.queue.peek() {
            if at > now {
                return None;
            }
            self.queue.pop();
            match due {
                Due::Send(t) => {
                    let r = &mut self.results[t];
                    let index = r.sent;
                    r.rtts_ns.push(None);
                    r.sent += 1;
                    if self.count.is_some_and(|c| r.sent < c) {
                        self.queue.push(Reverse((at + self.period, Due::Send(t))));
                    }
                    return Some(Transmit { target: t, index });
                }
                Due::Expire(v6, seq) => self.expire(now, v6, seq),
            }
        }
        None
    }

    fn expire(&mut self, now: Instant, v6: bool, seq: u16) {
        // A reply took its request out of `pending`: its expiry is then a no-op.
        let Some(p) = self.pending.remove(&(v6, seq)) else {
            return;
        };
        // Alive mode: try again, waiting longer, until the retries are used.
        let t = p.target;
        if self.count.is_none() && !self.answered[t] && self.results[t].sent <= u64::from(RETRIES) {
            self.next_timeout[t] = p.waited.mul_f64(BACKOFF);
            self.queue.push(Reverse((now, Due::Send(t))));
        }
    }

    /// The request `tx` went out at `now` as `sent`; `None`: the kernel refused it (no
    /// route), and it is lost, as fping counts it, while the other targets go on.
    pub fn on_sent(&mut self, now: Instant, tx: Transmit, sent: Option<Sent>) {
        let Some(sent) = sent else { return };
        let waited = self.next_timeout[tx.target];
        self.pending.insert(
            (sent.v6, sent.seq),
            Pending {
                target: tx.target,
                index: tx.index,
                sent_ns: sent.sent_ns,
                waited,
            },
        );
        self.queue
            .push(Reverse((now + waited, Due::Expire(sent.v6, sent.seq))));
    }

    /// A reply came: the event it makes, or `None` when it answers no request still
    /// waiting (late, duplicated, or from another address than the request's).
    pub fn on_reply(&mut self, reply: &Reply) -> Option<FpingEvent> {
        let key = (reply.v6, reply.seq);
        if self.targets[self.pending.get(&key)?.target] != reply.from {
            return None;
        }
        let p = self.pending.remove(&key)?;
        let rtt_ns = reply.received_ns.saturating_sub(p.sent_ns);
        self.results[p.target].rtts_ns[p.index as usize] = Some(rtt_ns);
        self.answered[p.target] = true;
        Some(FpingEvent::Reply {
            target: p.target,
            index: p.index,
            rtt_ns,
            bytes: 8 + self.size,
        })
    }

    /// When [`FpingSchedule::poll_transmit`] next has work; `None`: nothing scheduled.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.queue.peek().map(|Reverse((at, _))| *at)
    }

    /// Nothing is left to send and every request is answered or expired.
    pub fn is_done(&self) -> bool {
        self.pending.is_empty()
            && !self
                .queue
                .iter()
                .any(|Reverse((_, d))| matches!(d, Due::Send(_)))
    }

    /// Each target's outcome, in the order given.
    pub fn into_results(self) -> Vec<TargetResult> {
        self.results
    }
}

/// Probe every target until each has had its requests (or, alive, a reply or its
/// retries), or `ctl.stop`: [`FpingSchedule`] driven by the ICMP sockets and `poll(2)`.
///
/// # Errors
/// Neither address family's ICMP socket could be opened.
pub fn run(
    s: &FpingSettings,
    ctl: &PingControl,
    on_event: &mut dyn FnMut(&FpingEvent),
) -> Result<Vec<TargetResult>, PingError> {
    let mut echo = Echoer::with_payload(s.size)?;
    let mut pfds: Vec<libc::pollfd> = echo
        .fds()
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let mut schedule = FpingSchedule::new(s, Instant::now());
    while !ctl.stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        while let Some(tx) = schedule.poll_transmit(now) {
            let sent = echo.send(schedule.address(tx.target)).ok();
            schedule.on_sent(now, tx, sent);
        }
        if schedule.is_done() {
            break;
        }
        let wait = schedule
            .poll_timeout()
            .map_or(Duration::ZERO, |at| at.saturating_duration_since(now));
        let ms = wait.as_micros().div_ceil(1000).min(100) as i32;
        // SAFETY: a valid array of pollfds of the length given.
        let ready = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
        if ready <= 0 {
            continue;
        }
        echo.drain(|reply: Reply| {
            if let Some(event) = schedule.on_reply(&reply) {
                ctl.received.fetch_add(1, Ordering::Relaxed);
                on_event(&event);
            }
        });
    }
    Ok(schedule.into_results())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Witness: arithmetic over a hand-made outcome.
    #[test]
    fn counts_and_extremes_skip_the_lost() {
        let r = TargetResult {
            sent: 4,
            rtts_ns: vec![Some(30), None, Some(10), Some(20)],
        };
        assert_eq!(r.received(), 3);
        assert_eq!(r.min_avg_max_ns(), Some((10, 20, 30)));
        assert_eq!(TargetResult::default().min_avg_max_ns(), None);
    }

    fn settings(targets: &[&str], count: Option<u64>) -> FpingSettings {
        FpingSettings {
            targets: targets.iter().map(|t| t.parse().unwrap()).collect(),
            count,
            period: Duration::from_secs(1),
            timeout: Duration::from_millis(500),
            size: 56,
        }
    }

    /// Every request due by `now`, each sent as sequence number `seq` (counted up).
    fn send_due(s: &mut FpingSchedule, now: Instant, seq: &mut u16) -> Vec<Transmit> {
        let mut out = Vec::new();
        while let Some(tx) = s.poll_transmit(now) {
            let sent = Sent {
                v6: false,
                seq: *seq,
                sent_ns: 1_000 * u64::from(*seq),
            };
            *seq += 1;
            s.on_sent(now, tx, Some(sent));
            out.push(tx);
        }
        out
    }

    /// Witness: fping's documented schedule (`-p` per target, the targets' requests
    /// `-i` 10 ms apart): two targets, two requests each, at 0, 10 ms, 1 s, 1.01 s.
    #[test]
    fn counted_requests_follow_the_period_and_spacing() {
        let t0 = Instant::now();
        let mut s = FpingSchedule::new(&settings(&["127.0.0.1", "127.0.0.2"], Some(2)), t0);
        let mut seq = 0;
        let ms = Duration::from_millis;
        assert_eq!(send_due(&mut s, t0, &mut seq).len(), 1);
        assert_eq!(s.poll_timeout(), Some(t0 + ms(10)));
        let second = send_due(&mut s, t0 + ms(10), &mut seq);
        assert_eq!(
            second,
            vec![Transmit {
                target: 1,
                index: 0
            }]
        );
        assert!(send_due(&mut s, t0 + ms(999), &mut seq).is_empty());
        let third = send_due(&mut s, t0 + ms(1000), &mut seq);
        assert_eq!(
            third,
            vec![Transmit {
                target: 0,
                index: 1
            }]
        );
        send_due(&mut s, t0 + ms(1010), &mut seq);
        assert!(
            !s.is_done(),
            "four requests wait for replies or their timeout"
        );
        assert!(send_due(&mut s, t0 + ms(2000), &mut seq).is_empty());
        assert!(s.is_done());
        let results = s.into_results();
        assert_eq!(results[0].sent, 2);
        assert_eq!(results[1].rtts_ns, vec![None, None]);
    }

    /// Witness: fping's alive mode (`-r 3 -B 1.5`): a silent target is tried four
    /// times, each timeout 1.5 times the one before (500, 750, 1 125 ms), then given up.
    #[test]
    fn alive_mode_retries_with_a_growing_timeout() {
        let t0 = Instant::now();
        let mut s = FpingSchedule::new(&settings(&["127.0.0.1"], None), t0);
        let mut seq = 0;
        let mut now = t0;
        let mut tries = vec![now];
        send_due(&mut s, now, &mut seq);
        while let Some(at) = s.poll_timeout() {
            now = at;
            if !send_due(&mut s, now, &mut seq).is_empty() {
                tries.push(now);
            }
        }
        let gaps: Vec<u128> = tries
            .windows(2)
            .map(|w| (w[1] - w[0]).as_millis())
            .collect();
        assert_eq!(gaps, vec![500, 750, 1125]);
        assert!(s.is_done());
        assert_eq!(s.into_results()[0].sent, 4);
    }

    /// Witness: the reply's own fields: matched by family and sequence number and
    /// from the request's address only; a second copy or a stranger's is no event.
    #[test]
    fn replies_match_their_request_once_and_only_from_its_target() {
        let t0 = Instant::now();
        let mut s = FpingSchedule::new(&settings(&["127.0.0.1"], None), t0);
        let mut seq = 7;
        send_due(&mut s, t0, &mut seq);
        let reply = |from: &str| Reply {
            v6: false,
            seq: 7,
            from: from.parse().unwrap(),
            received_ns: 7_000 + 250_000,
        };
        assert_eq!(s.on_reply(&reply("127.0.0.9")), None);
        let event = s.on_reply(&reply("127.0.0.1"));
        assert_eq!(
            event,
            Some(FpingEvent::Reply {
                target: 0,
                index: 0,
                rtt_ns: 250_000,
                bytes: 64
            })
        );
        assert_eq!(s.on_reply(&reply("127.0.0.1")), None);
        assert!(s.is_done(), "answered: no retry is left to send");
        assert_eq!(s.into_results()[0].rtts_ns, vec![Some(250_000)]);
    }
}
