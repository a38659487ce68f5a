//! Several ping targets in one loop, as fping probes them: one socket per address
//! family ([`Echoer`]), each target's requests on its own period, the targets' sends
//! spread apart (fping's `-i`, 10 ms, or less when the period is short), every reply
//! matched to its request by family and sequence number and timed by the kernel's
//! receive stamp.
//!
//! Two ways to end, as fping: a count of requests per target (`-c`/`-C`), or "is it
//! alive": one request, retried with a timeout 1.5 times longer each time (fping's
//! `-r 3 -B 1.5`) until a reply comes.

use super::echo::{Echoer, Reply};
use super::ping::{PingControl, PingError};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::IpAddr;
use std::os::fd::RawFd;
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

/// Probe every target until each has had its requests (or, alive, a reply or its
/// retries), or `ctl.stop`.
///
/// # Errors
/// Neither address family's ICMP socket could be opened.
pub fn run(
    s: &FpingSettings,
    ctl: &PingControl,
    on_event: &mut dyn FnMut(&FpingEvent),
) -> Result<Vec<TargetResult>, PingError> {
    let mut echo = Echoer::with_payload(s.size)?;
    let fds: Vec<RawFd> = echo.fds().collect();
    let n = s.targets.len();
    let spacing = SPACING.min(s.period / u32::try_from(n.max(1)).unwrap_or(u32::MAX));
    let start = Instant::now();
    let mut results = vec![TargetResult::default(); n];
    let mut answered = vec![false; n];
    let mut queue: BinaryHeap<Reverse<(Instant, Due)>> = (0..n)
        .map(|i| Reverse((start + spacing * i as u32, Due::Send(i))))
        .collect();
    let mut pending: HashMap<(bool, u16), Pending> = HashMap::new();
    let mut next_timeout = vec![s.timeout; n];
    loop {
        if ctl.stop.load(Ordering::Relaxed) {
            break;
        }
        let now = Instant::now();
        while let Some(&Reverse((at, due))) = queue.peek() {
            if at > now {
                break;
            }
            queue.pop();
            match due {
                Due::Send(t) => {
                    let r = &mut results[t];
                    // A request the kernel refuses (no route) is sent and lost, as
                    // fping counts it; the other targets go on.
                    if let Ok(sent) = echo.send(s.targets[t]) {
                        pending.insert(
                            (sent.v6, sent.seq),
                            Pending {
                                target: t,
                                index: r.sent,
                                sent_ns: sent.sent_ns,
                                waited: next_timeout[t],
                            },
                        );
                        queue.push(Reverse((
                            now + next_timeout[t],
                            Due::Expire(sent.v6, sent.seq),
                        )));
                    }
                    r.rtts_ns.push(None);
                    r.sent += 1;
                    if let Some(c) = s.count {
                        if r.sent < c {
                            queue.push(Reverse((at + s.period, Due::Send(t))));
                        }
                    }
                }
                Due::Expire(v6, seq) => {
                    let Some(p) = pending.remove(&(v6, seq)) else {
                        continue;
                    };
                    // Alive mode: try again, waiting longer, until the retries are used.
                    let t = p.target;
                    if s.count.is_none() && !answered[t] && results[t].sent <= u64::from(RETRIES) {
                        next_timeout[t] = p.waited.mul_f64(BACKOFF);
                        queue.push(Reverse((now, Due::Send(t))));
                    }
                }
            }
        }
        // Done once nothing is left to send and every request is answered or expired
        // (a reply takes its request out of `pending`; its expiry is then a no-op).
        let sends_left = queue
            .iter()
            .any(|Reverse((_, d))| matches!(d, Due::Send(_)));
        if !sends_left && pending.is_empty() {
            break;
        }
        let wait = queue.peek().map_or(Duration::ZERO, |Reverse((at, _))| {
            at.saturating_duration_since(now)
        });
        let mut pfds: Vec<libc::pollfd> = fds
            .iter()
            .map(|&fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let ms = wait.as_micros().div_ceil(1000).min(100) as i32;
        // SAFETY: a valid array of pollfds of the length given.
        let ready = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
        if ready <= 0 {
            continue;
        }
        echo.drain(|reply: Reply| {
            let Some(p) = pending.get(&(reply.v6, reply.seq)) else {
                return;
            };
            if reply.from != s.targets[p.target] {
                return;
            }
            let p = pending.remove(&(reply.v6, reply.seq)).expect("just found");
            let rtt_ns = reply.received_ns.saturating_sub(p.sent_ns);
            results[p.target].rtts_ns[p.index as usize] = Some(rtt_ns);
            answered[p.target] = true;
            ctl.received.fetch_add(1, Ordering::Relaxed);
            on_event(&FpingEvent::Reply {
                target: p.target,
                index: p.index,
                rtt_ns,
                bytes: 8 + s.size,
            });
        });
    }
    Ok(results)
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
}
