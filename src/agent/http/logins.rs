//! Password checks, bounded where they run. bcrypt at the toolkit's usual cost 10
//! takes tens of ms of a core per check, so whoever can reach the endpoint can spend
//! the agent's CPU by guessing. Once, each check ran on the blocking pool under a
//! permit the request held: a client that reset its connection mid-check released
//! the permit while its bcrypt ran on, so guessers who reset piled checks up without
//! bound, and expositions (on the same pool) waited behind them: 8 such guessers for
//! 10 s kept `/metrics` and `/-/healthy` from answering for 45 s.
//!
//! Now ([`Logins`]):
//! - checks run on one thread of their own, never the blocking pool, one at a time,
//!   and the thread rests as long as each check took: guesses cost at most half a
//!   core while they last, and nothing once they stop;
//! - the queue holds [`QUEUE_DEPTH`] checks, one per source (`slots::source_of`);
//!   when it is full, a source that has asked for fewer checks since its last
//!   success than one queued takes that one's place (the source that asked most is
//!   refused), else it is refused: a request refused is answered at once (429, with
//!   Retry-After), never queued. A guesser asks again and again; a scraper logging
//!   in asks once;
//! - a check whose client has gone is dropped unrun;
//! - a source whose checks failed more than [`FREE_FAILURES`] times waits before its
//!   next one, twice as long after each further failure ([`FIRST_WAIT`] up to
//!   [`LONGEST_WAIT`]), forgiven by a success ([`Sources`]): one guessing source is
//!   slowed, no other is;
//! - a login that succeeded is remembered ([`WebConfig::check`]) and never queued
//!   again, as the exporter toolkit remembers it.

use super::lock;
use super::web_config::{Auth, WebConfig};
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Checks waiting for the thread, from all sources: at cost 10 a full queue is a
/// fraction of a second of work (each check followed by as long a rest).
pub const QUEUE_DEPTH: usize = 4;
/// Failed checks a source has before it waits: a person who mistypes a password
/// twice is not kept waiting.
pub const FREE_FAILURES: u32 = 2;
/// How long a source waits after its first failed check past [`FREE_FAILURES`],
/// doubled with each further failure (and when its one place in the queue is taken).
pub const FIRST_WAIT: Duration = Duration::from_millis(250);
/// The longest a source waits after failed checks.
pub const LONGEST_WAIT: Duration = Duration::from_secs(30);
/// Sources remembered until their next success; past it the records of sources no longer
/// waiting go first.
const SOURCES_MAX: usize = 4096;

/// A check not queued: the source may ask again after `retry_after`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Throttled {
    /// When to ask again (the answer's Retry-After).
    pub retry_after: Duration,
}

/// Which sources have a check queued, how often each has asked since its last
/// success, and which must wait after failing: a state machine driven by [`Logins`]
/// with the time passed in.
#[derive(Debug, Default)]
pub struct Sources {
    queued: HashSet<IpAddr>,
    unproven: HashMap<IpAddr, Unproven>,
}

/// A source since its last successful login (or since it was first seen).
#[derive(Clone, Copy, Debug)]
struct Unproven {
    /// Checks asked for, refused ones included.
    asked: u32,
    /// Checks that failed (or whose client hung up before it ran).
    failed: u32,
    /// No check before this.
    until: Instant,
}

impl Sources {
    /// Whether `source` may queue a check at `now`; if so, it is counted as queued.
    /// Either way it has asked once more.
    ///
    /// # Errors
    /// The source waits after a failure, or has a check queued already.
    pub fn admit(&mut self, source: IpAddr, now: Instant) -> Result<(), Throttled> {
        let record = self.record(source, now);
        record.asked = record.asked.saturating_add(1);
        if record.until > now {
            return Err(Throttled {
                retry_after: record.until - now,
            });
        }
        if !self.queued.insert(source) {
            return Err(Throttled {
                retry_after: FIRST_WAIT,
            });
        }
        Ok(())
    }

    /// How many checks `source` has asked for since its last success: who gives way
    /// in a full queue.
    pub fn asked(&self, source: IpAddr) -> u32 {
        self.unproven.get(&source).map_or(0, |r| r.asked)
    }

    /// `source`'s check was not queued after all (the queue was full), or was
    /// displaced by a source that asked less.
    pub fn withdraw(&mut self, source: IpAddr) {
        self.queued.remove(&source);
    }

    /// `source`'s check ended at `now` with `verdict`.
    pub fn settle(&mut self, source: IpAddr, verdict: Auth, now: Instant) {
        self.queued.remove(&source);
        if verdict == Auth::Allowed {
            self.unproven.remove(&source);
            return;
        }
        let record = self.record(source, now);
        record.failed = record.failed.saturating_add(1);
        if let Some(beyond) = record.failed.checked_sub(FREE_FAILURES + 1) {
            let wait = FIRST_WAIT
                .saturating_mul(1 << beyond.min(16))
                .min(LONGEST_WAIT);
            record.until = now + wait;
        }
    }

    /// `source`'s record, made if it has none; past [`SOURCES_MAX`] the records of
    /// sources no longer waiting go first, then the one whose wait ends soonest.
    fn record(&mut self, source: IpAddr, now: Instant) -> &mut Unproven {
        if self.unproven.len() >= SOURCES_MAX && !self.unproven.contains_key(&source) {
            self.unproven.retain(|_, r| r.until > now);
            if self.unproven.len() >= SOURCES_MAX {
                let soonest = self.unproven.iter().min_by_key(|(_, r)| r.until);
                if let Some(ip) = soonest.map(|(ip, _)| *ip) {
                    self.unproven.remove(&ip);
                }
            }
        }
        self.unproven.entry(source).or_insert(Unproven {
            asked: 0,
            failed: 0,
            until: now,
        })
    }
}

struct Check {
    source: IpAddr,
    web: Arc<WebConfig>,
    authorization: Option<Vec<u8>>,
    reply: oneshot::Sender<Result<Auth, Throttled>>,
}

/// The checks waiting and the sources' state, behind one lock.
#[derive(Default)]
struct Queue {
    checks: VecDeque<Check>,
    sources: Sources,
    closed: bool,
}

impl Queue {
    /// Queue `check`, at `now`.
    fn push(&mut self, check: Check, now: Instant) -> Result<(), (Check, Throttled)> {
        if let Err(t) = self.sources.admit(check.source, now) {
            return Err((check, t));
        }
        let full = Throttled {
            retry_after: FIRST_WAIT,
        };
        if self.checks.len() >= QUEUE_DEPTH {
            let asked = |c: &Check| self.sources.asked(c.source);
            let mine = asked(&check);
            let worst = (0..self.checks.len())
                .max_by_key(|&i| asked(&self.checks[i]))
                .filter(|&i| asked(&self.checks[i]) > mine);
            let Some(worst) = worst else {
                self.sources.withdraw(check.source);
                return Err((check, full));
            };
            if let Some(out) = self.checks.remove(worst) {
                self.sources.withdraw(out.source);
                let _ = out.reply.send(Err(full));
            }
        }
        self.checks.push_back(check);
        Ok(())
    }
}

/// The thread that checks passwords and its queue ([module docs](self)).
pub struct Logins {
    queue: Arc<(Mutex<Queue>, Condvar)>,
}

impl Logins {
    /// Start the thread; it ends when this is dropped.
    ///
    /// # Errors
    /// The thread cannot be started.
    pub fn start() -> std::io::Result<Self> {
        let queue = Arc::new((Mutex::new(Queue::default()), Condvar::new()));
        let theirs = Arc::clone(&queue);
        std::thread::Builder::new()
            .name("rttlab-logins".into())
            .spawn(move || {
                let (lock_, ready) = &*theirs;
                loop {
                    let mut q = lock(lock_);
                    while q.checks.is_empty() && !q.closed {
                        q = ready
                            .wait(q)
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                    }
                    let Some(check) = q.checks.pop_front() else {
                        return;
                    };
                    drop(q);
                    run(check, lock_);
                }
            })?;
        Ok(Self { queue })
    }

    /// Queue a check of `authorization` by `web`'s users for `source`; the verdict
    /// comes on the receiver (dropping it withdraws the check), or a refusal when a
    /// source that asked less took its place.
    ///
    /// # Errors
    /// The source must wait, or the queue is full of sources that asked no more.
    pub fn submit(
        &self,
        source: IpAddr,
        web: Arc<WebConfig>,
        authorization: Option<Vec<u8>>,
    ) -> Result<oneshot::Receiver<Result<Auth, Throttled>>, Throttled> {
        let (reply, verdict) = oneshot::channel();
        let check = Check {
            source,
            web,
            authorization,
            reply,
        };
        let (queue, ready) = &*self.queue;
        lock(queue)
            .push(check, Instant::now())
            .map_err(|(_, t)| t)?;
        ready.notify_one();
        Ok(verdict)
    }
}

impl Drop for Logins {
    fn drop(&mut self) {
        let (queue, ready) = &*self.queue;
        lock(queue).closed = true;
        ready.notify_one();
    }
}

/// One check, then a rest as long as it took (at most half a core on checks).
fn run(check: Check, queue: &Mutex<Queue>) {
    if check.reply.is_closed() {
        lock(queue).sources.withdraw(check.source);
        return;
    }
    let began = Instant::now();
    let verdict = check.web.check(check.authorization.as_deref());
    let took = began.elapsed();
    lock(queue)
        .sources
        .settle(check.source, verdict, Instant::now());
    let _ = check.reply.send(Ok(verdict));
    std::thread::sleep(took);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2));

    /// Witness: arithmetic on the waits the module's rules give.
    #[test]
    fn a_guessing_source_waits_longer_after_each_failure_and_no_other_does() {
        let mut s = Sources::default();
        let t0 = Instant::now();
        s.admit(A, t0).unwrap();
        assert_eq!(
            s.admit(A, t0),
            Err(Throttled {
                retry_after: FIRST_WAIT
            })
        );
        s.admit(B, t0).unwrap();
        s.settle(B, Auth::Allowed, t0);
        // The free failures: no wait.
        s.settle(A, Auth::Denied, t0);
        for _ in 1..FREE_FAILURES {
            s.admit(A, t0).unwrap();
            s.settle(A, Auth::Denied, t0);
        }
        s.admit(A, t0).unwrap();
        s.settle(A, Auth::Denied, t0);
        let mut now = t0;
        for n in 1..=10u32 {
            let wait = (FIRST_WAIT * 2u32.pow(n - 1)).min(LONGEST_WAIT);
            assert_eq!(s.admit(A, now), Err(Throttled { retry_after: wait }), "{n}");
            assert_eq!(s.admit(B, now), Ok(()), "{n}");
            s.settle(B, Auth::Allowed, now);
            now += wait;
            s.admit(A, now).unwrap();
            s.settle(A, Auth::Denied, now);
        }
        // A success forgives.
        now += LONGEST_WAIT;
        s.admit(A, now).unwrap();
        s.settle(A, Auth::Allowed, now);
        s.admit(A, now).unwrap();
    }

    fn check(source: IpAddr) -> (Check, oneshot::Receiver<Result<Auth, Throttled>>) {
        let (reply, verdict) = oneshot::channel();
        let web = Arc::new(WebConfig::none());
        let check = Check {
            source,
            web,
            authorization: None,
            reply,
        };
        (check, verdict)
    }

    /// Witness: who holds the queue's places and what each refused check is told.
    #[test]
    fn a_full_queue_takes_a_newcomer_in_place_of_the_most_insistent_only() {
        let mut q = Queue::default();
        let mut now = Instant::now();
        let ip = |i: u8| IpAddr::V4(Ipv4Addr::new(192, 0, 2, i));
        // Sources 1..=4 have asked and failed i times each, each time after its wait.
        for i in 1..=4u8 {
            for _ in 0..i {
                q.sources.admit(ip(i), now).unwrap();
                q.sources.settle(ip(i), Auth::Denied, now);
                now += LONGEST_WAIT;
            }
        }
        let later = now + LONGEST_WAIT;
        let mut waiting = Vec::new();
        for i in 1..=4u8 {
            let (c, v) = check(ip(i));
            assert!(q.push(c, later).is_ok());
            waiting.push(v);
        }
        // Source 3 asks again: refused, one place per source (it has now asked 5
        // times, as many as 4).
        let (c, _) = check(ip(3));
        assert!(q.push(c, later).is_err(), "one place per source");
        let (c, _) = check(ip(9));
        assert!(q.push(c, later).is_ok());
        assert_eq!(
            waiting[3].try_recv(),
            Ok(Err(Throttled {
                retry_after: FIRST_WAIT
            }))
        );
        let queued: Vec<IpAddr> = q.checks.iter().map(|c| c.source).collect();
        assert_eq!(queued, vec![ip(1), ip(2), ip(3), ip(9)]);
        // A second newcomer takes 3's place (it asked most), a third 2's; then no
        // one queued asked more than 2 has (now 4 times), and 2 is refused.
        let (c, _) = check(ip(10));
        assert!(q.push(c, later).is_ok());
        let (c, _) = check(ip(11));
        assert!(q.push(c, later).is_ok());
        let (c, _) = check(ip(2));
        assert!(q.push(c, later).is_err());
        let queued: Vec<IpAddr> = q.checks.iter().map(|c| c.source).collect();
        assert_eq!(queued, vec![ip(1), ip(9), ip(10), ip(11)]);
    }

    /// Witness: the count of sources remembered.
    #[test]
    fn failures_of_many_sources_are_remembered_within_a_bound() {
        let mut s = Sources::default();
        let now = Instant::now();
        for i in 0..(SOURCES_MAX as u32 + 100) {
            let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
            // Past its free failures: waiting, so remembered.
            for _ in 0..=FREE_FAILURES {
                s.admit(ip, now).unwrap();
                s.settle(ip, Auth::Denied, now);
            }
        }
        assert_eq!(s.unproven.len(), SOURCES_MAX);
        assert!(s.queued.is_empty());
    }
}
