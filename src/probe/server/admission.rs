//! Who gets to talk to the server: the handshake pool and the authentication lockout.
//!
//! A connection that has not finished the handshake holds no test slot; it waits in a
//! pool capped globally and per source (an IPv4 address, or an IPv6 /64). When a cap
//! is reached the oldest waiting connection is dropped for the new one, of the new
//! one's source at its own cap, else of the source with the most waiting (the oldest
//! that has not yet sent a whole Hello, when there is one: a client at work outlives
//! idle and slow peers). A dropped connection's own thread is woken (its socket shut
//! for reading) and tells its peer why in an Error frame before closing, so a client
//! sees "server busy" rather than a connection cut mid-handshake. Sources that fail
//! authentication too often are refused at connect until their window passes.

use super::refusal::Refusal;
use super::serving::canon;
use super::Shared;
use crate::probe::control::{self, ServerMsg};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Failed authentications a source may make within [`FAILURE_WINDOW`].
const FAILURES_ALLOWED: u32 = 5;
/// The window over which failed authentications are counted per source.
const FAILURE_WINDOW: Duration = Duration::from_secs(30);
/// Most source addresses whose failures are remembered (older windows are forgotten
/// first, so the table cannot grow without bound).
const FAILURE_TABLE_MAX: usize = 4096;

/// The key connections are counted under per source: an IPv4 address (IPv4-mapped
/// IPv6 included), or an IPv6 /64, the smallest block one user is usually given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct SourceKey(pub(super) IpAddr);

impl SourceKey {
    pub(super) fn of(ip: IpAddr) -> Self {
        match canon(ip) {
            IpAddr::V6(v6) => {
                let s = v6.segments();
                SourceKey(IpAddr::V6(Ipv6Addr::new(
                    s[0], s[1], s[2], s[3], 0, 0, 0, 0,
                )))
            }
            v4 => SourceKey(v4),
        }
    }
}

struct Waiting {
    id: u64,
    source: SourceKey,
    /// It has sent a valid Hello: a client at work, dropped only after the silent ones.
    said_hello: bool,
    /// A handle on the connection, to wake its thread when it is dropped from the pool.
    stream: TcpStream,
}

/// Connections in the handshake, oldest first.
#[derive(Default)]
pub(super) struct Pool {
    waiting: VecDeque<Waiting>,
    /// Connections dropped from the pool whose threads have not yet said so to their
    /// peers, with the reason to say (at most one per live control thread).
    dropped: HashMap<u64, Refusal>,
    next_id: u64,
}

pub(super) struct Failures {
    window_start: Instant,
    count: u32,
}

/// Put a new connection into the handshake pool (dropping the oldest waiting one when
/// a cap is reached) and count its thread in; its id in the pool. `None`: refused at
/// once, its source locked out for failed authentications (the peer is told so).
pub(super) fn admit(stream: &TcpStream, peer: SocketAddr, shared: &Shared) -> Option<u64> {
    let source = SourceKey::of(peer.ip());
    if let Some(wait) = locked_out(shared, source) {
        shared
            .counters
            .auth_locked_out
            .fetch_add(1, Ordering::Relaxed);
        let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
        let message = format!(
            "too many failed authentications from {}: refused for another {} s",
            source.0,
            wait.as_secs().max(1)
        );
        let _ = control::write_msg(
            &mut &*stream,
            &ServerMsg::Error {
                message: message.clone(),
            },
        );
        shared.refused(peer, "locked out", &message);
        return None;
    }
    let handle = stream.try_clone().ok()?;
    let id = {
        let mut pool = shared.pool.lock().unwrap_or_else(|p| p.into_inner());
        let from_source = pool.waiting.iter().filter(|w| w.source == source).count();
        let per_source = shared.config.max_handshakes_per_source;
        if from_source >= per_source {
            let at = oldest(&pool, |w| w.source == source);
            let why = Refusal::HandshakesPerSource {
                waiting: from_source,
                from: source.0,
                limit: per_source,
            };
            evict(&mut pool, at, why, shared);
        }
        let max = shared.config.max_handshakes;
        if pool.waiting.len() >= max {
            let busiest = busiest(&pool);
            let at = oldest(&pool, |w| busiest.contains(&w.source));
            let why = Refusal::Handshakes {
                waiting: pool.waiting.len(),
                limit: max,
            };
            evict(&mut pool, at, why, shared);
        }
        pool.next_id += 1;
        let id = pool.next_id;
        pool.waiting.push_back(Waiting {
            id,
            source,
            said_hello: false,
            stream: handle,
        });
        id
    };
    // A dropped connection's thread takes a moment to end: wait for one to end rather
    // than let a burst of connections raise the thread count past the pool and the
    // test slots. Dropped threads end in microseconds, so this wait is short.
    let cap = shared.config.max_handshakes
        + shared.config.limits.max_concurrent_tests as usize
        + super::CONTROL_THREAD_SLACK;
    let mut live = shared
        .control_threads
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    while *live >= cap {
        live = shared
            .control_thread_ended
            .wait_timeout(live, Duration::from_millis(10))
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
    *live += 1;
    Some(id)
}

/// Counts a control thread out when it ends, however it ends (its count in was taken
/// by [`admit`]).
pub(super) struct ControlThread<'a>(pub(super) &'a Shared);

impl Drop for ControlThread<'_> {
    fn drop(&mut self) {
        let mut live = self
            .0
            .control_threads
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *live = live.saturating_sub(1);
        self.0.control_thread_ended.notify_one();
    }
}

/// The sources with the most connections waiting: at the global cap one of theirs
/// makes room (the oldest silent one among them all, else their oldest), so that a
/// churn of Hellos from a few addresses that then stall drops its own, not a client
/// from elsewhere that completes its handshake promptly (once, 55 % of legitimate
/// runs were dropped), and when every source has one waiting, a distant client
/// between its Hello and its Start does not go before the silent ones.
fn busiest(pool: &Pool) -> Vec<SourceKey> {
    let mut waiting = HashMap::<SourceKey, usize>::new();
    for w in &pool.waiting {
        *waiting.entry(w.source).or_default() += 1;
    }
    let most = waiting.values().copied().max().unwrap_or(0);
    waiting
        .into_iter()
        .filter(|&(_, n)| n == most)
        .map(|(s, _)| s)
        .collect()
}

/// The connection to drop among those `matching`: the oldest that has not sent a
/// whole Hello yet (an idle or slow peer), else the oldest.
fn oldest(pool: &Pool, matching: impl Fn(&Waiting) -> bool) -> Option<usize> {
    pool.waiting
        .iter()
        .position(|w| matching(w) && !w.said_hello)
        .or_else(|| pool.waiting.iter().position(matching))
}

/// Note that connection `id` has said a valid Hello.
pub(super) fn said_hello(shared: &Shared, id: u64) {
    let mut pool = shared.pool.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(w) = pool.waiting.iter_mut().find(|w| w.id == id) {
        w.said_hello = true;
    }
}

/// Drop the connection at `at` from the pool: shut it for reading, which wakes its
/// thread from its read (`tcp_recvmsg` returns 0 once `RCV_SHUTDOWN` is set) to tell
/// the peer `why`.
fn evict(pool: &mut Pool, at: Option<usize>, why: Refusal, shared: &Shared) {
    if let Some(w) = at.and_then(|i| pool.waiting.remove(i)) {
        let _ = w.stream.shutdown(std::net::Shutdown::Read);
        pool.dropped.insert(w.id, why);
        shared
            .counters
            .handshakes_dropped
            .fetch_add(1, Ordering::Relaxed);
    }
}

/// Take a connection out of the handshake pool.
///
/// # Errors
/// It was dropped from the pool: the reason to tell its peer.
pub(super) fn leave_pool(shared: &Shared, id: u64) -> Result<(), Refusal> {
    let mut pool = shared.pool.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(why) = pool.dropped.remove(&id) {
        return Err(why);
    }
    if let Some(i) = pool.waiting.iter().position(|w| w.id == id) {
        pool.waiting.remove(i);
    }
    Ok(())
}

/// How much longer `source` is refused, if it is.
fn locked_out(shared: &Shared, source: SourceKey) -> Option<Duration> {
    let table = shared.failures.lock().unwrap_or_else(|p| p.into_inner());
    let f = table.get(&source)?;
    let left = FAILURE_WINDOW.checked_sub(f.window_start.elapsed())?;
    (f.count >= FAILURES_ALLOWED).then_some(left)
}

/// Count a failed authentication against the source of `peer`.
pub(super) fn record_failure(shared: &Shared, peer: SocketAddr) {
    let source = SourceKey::of(peer.ip());
    let mut table = shared.failures.lock().unwrap_or_else(|p| p.into_inner());
    if table.len() >= FAILURE_TABLE_MAX {
        table.retain(|_, f| f.window_start.elapsed() < FAILURE_WINDOW);
        if table.len() >= FAILURE_TABLE_MAX {
            let oldest = table
                .iter()
                .min_by_key(|(_, f)| f.window_start)
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                table.remove(&k);
            }
        }
    }
    let f = table.entry(source).or_insert(Failures {
        window_start: Instant::now(),
        count: 0,
    });
    if f.window_start.elapsed() >= FAILURE_WINDOW {
        *f = Failures {
            window_start: Instant::now(),
            count: 0,
        };
    }
    f.count += 1;
}
