//! The metrics endpoint's open connections and who makes room for a newcomer at the
//! cap (the module's "Connections" rule): at most `max_connections`, a quarter of them
//! per source; at the cap a connection of the source holding the most makes room, the
//! idle one told nothing yet or heard from longest ago, else the longest stalled,
//! else (when that source holds two more than the newcomer's, or one where the
//! newcomer's holds none) any of its own.

use super::deadline::Progress;
use super::{lock, Shared};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// A connection nothing has been read from for this long may be displaced as one
/// that never asks; a younger one is a newcomer whose request may not have been read
/// yet (a flood of connections that send nothing must come faster than the cap in
/// this time to keep the newcomers out).
const SILENT: Duration = Duration::from_millis(250);

/// A client whose answer has waited this long for it to read may lose its connection
/// to a newcomer at the cap (the one stalled longest first, after connections that
/// never asked and idle ones): clients that send a request and never read cannot
/// hold the slots (once, a hundred of them a second kept every scrape out). A
/// scraper takes bytes as they come: its writes wait a round trip at most.
const STALLED: Duration = Duration::from_millis(250);

/// Open connections, oldest first (ids grow with time).
#[derive(Default)]
pub(super) struct Slots {
    open: BTreeMap<u64, SlotState>,
    next_id: u64,
}

/// What a connection is doing, as far as choosing one to displace goes.
#[derive(Default)]
pub(super) struct Activity {
    /// From an admitted request until its answer's last byte is in the kernel.
    pub(super) answering: AtomicBool,
    /// What its client has done: when it last sent a byte, and since when its writes
    /// have waited.
    pub(super) stall: Arc<Progress>,
}

pub(super) struct SlotState {
    /// When it was accepted.
    opened: Instant,
    /// [`source_of`] the client's address.
    source: IpAddr,
    activity: Arc<Activity>,
    /// Told to close.
    displace: Arc<Notify>,
}

/// A connection's place among the open ones; gives it back when dropped.
pub(super) struct Slot {
    pub(super) id: u64,
    /// [`source_of`] the client's address.
    pub(super) source: IpAddr,
    pub(super) activity: Arc<Activity>,
    pub(super) displace: Arc<Notify>,
    pub(super) shared: Arc<Shared>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        lock(&self.shared.slots).open.remove(&self.id);
    }
}

/// The source a connection counts against: an IPv4 address (an IPv4-mapped IPv6
/// one included), or an IPv6 /64, the block one host is given (RFC 6177), so that
/// an attacker cannot claim a share per address of its own subnet.
fn source_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !u128::from(u64::MAX))),
        },
        v4 @ IpAddr::V4(_) => v4,
    }
}

impl Slots {
    /// A place for a connection from `ip`, displacing another one (from the same
    /// source when it has its share, else from the source holding the most) at a
    /// cap; `None` when none may go.
    pub(super) fn admit(shared: &Arc<Shared>, ip: IpAddr) -> Option<Slot> {
        let max = shared.limits.max_connections.max(1);
        let per_source = (max / 4).max(1);
        let source = source_of(ip);
        let mut slots = lock(&shared.slots);
        let now = Instant::now();
        let victim = if slots.held_by(source) >= per_source {
            Some(slots.victim(|s| s.source == source, now, per_source))
        } else if slots.open.len() >= max {
            Some(slots.fair_victim(source, now, per_source))
        } else {
            None
        };
        match victim {
            Some(Some(id)) => {
                if let Some(s) = slots.open.remove(&id) {
                    s.displace.notify_one();
                    shared.refused.displaced.inc();
                }
            }
            Some(None) => return None,
            None => {}
        }
        slots.next_id += 1;
        let id = slots.next_id;
        let activity = Arc::<Activity>::default();
        let displace = Arc::new(Notify::new());
        slots.open.insert(
            id,
            SlotState {
                opened: now,
                source,
                activity: Arc::clone(&activity),
                displace: Arc::clone(&displace),
            },
        );
        Some(Slot {
            id,
            source,
            activity,
            displace,
            shared: Arc::clone(shared),
        })
    }

    /// How many open connections `source` holds.
    fn held_by(&self, source: IpAddr) -> usize {
        self.open.values().filter(|s| s.source == source).count()
    }

    /// The connection to close at the cap for a newcomer from `source`, which holds
    /// less than its share: one of the source holding the most that is not being
    /// answered ([`Slots::victim`]); failing that, when that source holds at least
    /// two more than the newcomer's, the one of its connections heard from longest
    /// ago, answering or in its TLS handshake though it be (or, when every source
    /// holds one and the newcomer's none, the oldest), so that sources reading at
    /// full speed cannot hold every slot (once, 64 keep-alive scrapers from four
    /// addresses kept half of everyone else's scrapes out); failing that, any
    /// connection not being answered.
    fn fair_victim(&self, source: IpAddr, now: Instant, newcomers: usize) -> Option<u64> {
        let mut held = BTreeMap::<IpAddr, usize>::new();
        for s in self.open.values() {
            *held.entry(s.source).or_default() += 1;
        }
        let most = held.values().copied().max().unwrap_or(0);
        let own = held.get(&source).copied().unwrap_or(0);
        let busiest = |s: &SlotState| held[&s.source] == most;
        // Among the busiest, the connection heard from longest ago; when every source
        // holds one and the newcomer's none, the oldest (once, 64 addresses each
        // scraping at full speed kept every other client out; the oldest has been
        // served longest).
        let forced = || {
            let of_busiest = || self.open.iter().filter(|(_, s)| busiest(s));
            if most >= own + 2 {
                of_busiest()
                    .min_by_key(|(_, s)| s.last_heard())
                    .map(|(&id, _)| id)
            } else if own == 0 && most == 1 {
                of_busiest().next().map(|(&id, _)| id)
            } else {
                None
            }
        };
        self.victim(busiest, now, newcomers)
            .or_else(forced)
            .or_else(|| self.victim(|_| true, now, newcomers))
    }

    /// The connection to close for a newcomer, among those `matching`: the one heard
    /// from longest ago that is not answering (a head or a TLS handshake begun and not
    /// finished, a keep-alive between scrapes, or nothing sent for [`SILENT`]); else
    /// the one whose client has left its answer unread longest, for [`STALLED`] at
    /// least. The `newcomers` newest connections that nothing has been read from for
    /// less than [`SILENT`] are never chosen, nor is one whose client takes its
    /// answer as it comes.
    fn victim(
        &self,
        matching: impl Fn(&SlotState) -> bool,
        now: Instant,
        newcomers: usize,
    ) -> Option<u64> {
        let candidates = || self.open.iter().filter(|(_, s)| matching(s));
        // Under a flood the endpoint may take tens of ms to read a scraper's
        // request: the flood's newcomers must not push out the scraper that came
        // just before them (once, 3 scrapes in 6 were). A burst of newcomers
        // (hundreds at once) must not shut the door either: only the newest few are
        // spared.
        let young = |s: &SlotState| {
            s.activity.stall.heard().is_none() && now.saturating_duration_since(s.opened) < SILENT
        };
        let spared: Vec<u64> = self
            .open
            .iter()
            .rev()
            .filter(|(_, s)| young(s))
            .take(newcomers)
            .map(|(&id, _)| id)
            .collect();
        // One never told anything before one that has been, then the one heard from
        // longest ago: a handshake the server has answered waits on a client that
        // may be far away (a churn of half-sent ClientHellos once displaced it as
        // the oldest connection, losing half the TLS scrapes; a flood trickling
        // them from many addresses kept a scraper 50 ms away out, each trickle
        // making its connection "heard" more lately).
        let not_answering = candidates()
            .filter(|(id, s)| {
                !s.activity.answering.load(Ordering::Relaxed)
                    && s.activity.stall.since().is_none()
                    && !spared.contains(id)
            })
            .min_by_key(|(_, s)| (s.activity.stall.told_any(), s.last_heard()))
            .map(|(&id, _)| id);
        let longest_stalled = || {
            candidates()
                .filter_map(|(&id, s)| Some((s.activity.stall.since()?, id)))
                .filter(|(since, _)| now.saturating_duration_since(*since) >= STALLED)
                .min()
                .map(|(_, id)| id)
        };
        not_answering.or_else(longest_stalled)
    }
}

impl SlotState {
    /// When its client last sent a byte, or connected if it has sent none.
    fn last_heard(&self) -> Instant {
        self.activity.stall.heard().unwrap_or(self.opened)
    }
}
