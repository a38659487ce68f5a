//! Fair shares of the test budgets among sources. `--max-tests-per-source` stops one
//! address from holding every slot, but two at their share could (once, two
//! addresses running sixteen one-hour tests each kept every other client out for the
//! hour). So when a test is refused for want of room (a slot, memory, descriptors or
//! threads), the source running the most tests gives up its newest while it runs at
//! least two more than the newcomer's source: its client is told why, its budgets go
//! back, and the newcomer, which waits up to [`ROOM_WAIT`] for them, runs if they
//! are enough (one test ends per newcomer, however large the newcomer). A source's
//! share so shrinks as others come, and grows back only as tests end, never by
//! taking from a source that runs fewer.

use super::admission::SourceKey;
use super::refusal::Refusal;
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, TcpStream};
use std::time::Duration;

/// How long a newcomer waits for a test ended for it to give its budgets back (its
/// thread stops its streams first: milliseconds).
pub(super) const ROOM_WAIT: Duration = Duration::from_secs(1);

/// A running test, as far as giving way goes.
struct Running {
    source: IpAddr,
    /// Its control connection, shut for reading to wake its thread when it must end.
    control: TcpStream,
}

/// The running tests (by id, which grows with time: the newest last) and those
/// ended for another source whose threads have not yet told their clients.
#[derive(Default)]
pub(super) struct Shares {
    running: BTreeMap<u64, Running>,
    ended: HashMap<u64, Refusal>,
    next_id: u64,
}

impl Shares {
    /// Count in a test from `source` whose control connection is `control`; its id.
    pub(super) fn start(&mut self, source: SourceKey, control: TcpStream) -> u64 {
        self.next_id += 1;
        self.running.insert(
            self.next_id,
            Running {
                source: source.0,
                control,
            },
        );
        self.next_id
    }

    /// Count test `id` out; why it was ended, if it was ended for another source.
    pub(super) fn stop(&mut self, id: u64) -> Option<Refusal> {
        self.running.remove(&id);
        self.ended.remove(&id)
    }

    /// Why test `id` was ended for another source, if it was and its thread has not
    /// yet counted it out (its budgets are still held).
    pub(super) fn why(&self, id: u64) -> Option<Refusal> {
        self.ended.get(&id).cloned()
    }

    /// The test to end for a newcomer from `source`: the newest of the source running
    /// the most (the lowest address among equals, so the choice is the same however
    /// the map is walked), if that source runs at least two more than `source`.
    fn to_end_for(&self, source: IpAddr) -> Option<u64> {
        let mut held = BTreeMap::<IpAddr, u64>::new();
        for r in self.running.values() {
            *held.entry(r.source).or_default() += 1;
        }
        let own = held.get(&source).copied().unwrap_or(0);
        let (&busiest, &most) = held
            .iter()
            .filter(|(s, _)| **s != source)
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))?;
        (most >= own + 2).then(|| {
            self.running
                .iter()
                .rev()
                .find(|(_, r)| r.source == busiest)
                .map(|(&id, _)| id)
        })?
    }

    /// End a test for a newcomer from `source` refused for want of room, if one may
    /// give way: it leaves the running, its thread is woken (its control connection
    /// shut for reading) to tell its client why and give its budgets back. Its id.
    pub(super) fn make_room(&mut self, source: SourceKey) -> Option<u64> {
        let id = self.to_end_for(source.0)?;
        let r = self.running.remove(&id)?;
        let held = 1 + self
            .running
            .values()
            .filter(|o| o.source == r.source)
            .count() as u64;
        let _ = r.control.shutdown(std::net::Shutdown::Read);
        self.ended.insert(
            id,
            Refusal::GaveWay {
                from: r.source,
                held,
            },
        );
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener};

    /// A connected socket to stand for a control connection.
    fn control(l: &TcpListener) -> TcpStream {
        TcpStream::connect(l.local_addr().unwrap()).unwrap()
    }

    fn source(last: u8) -> SourceKey {
        SourceKey(IpAddr::V4(Ipv4Addr::new(127, 0, 0, last)))
    }

    /// Witness: the arithmetic of the shares. Two sources hold 16 tests each; each of
    /// eight newcomers ends the newest test of whichever holds more (the two take
    /// turns), never one of a source within one of the newcomer's; the ninth
    /// newcomer's source, once it holds two, may take from none that holds fewer
    /// than four.
    #[test]
    fn the_source_running_the_most_gives_way_while_it_runs_two_more() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut shares = Shares::default();
        let mut ids = Vec::new();
        for _ in 0..16 {
            ids.push((2, shares.start(source(2), control(&l))));
            ids.push((3, shares.start(source(3), control(&l))));
        }
        let mut ended_from = Vec::new();
        let mut ended = Vec::new();
        for newcomer in 10..18 {
            let id = shares.make_room(source(newcomer)).expect("room");
            assert!(shares.why(id).is_some());
            let (from, _) = ids.iter().find(|(_, i)| *i == id).unwrap();
            ended_from.push(*from);
            // The newest of that source: every younger test of it ended before.
            assert!(ids
                .iter()
                .filter(|(s, i)| s == from && *i > id)
                .all(|(_, i)| ended.contains(i)));
            ended.push(id);
            assert!(matches!(shares.stop(id), Some(Refusal::GaveWay { .. })));
            shares.start(source(newcomer), control(&l));
        }
        assert_eq!(ended_from, [2, 3, 2, 3, 2, 3, 2, 3], "turns");
        // 12 and 12 left, eight newcomers with one each: a newcomer with 10 tests of
        // its own may still take from a source with 12, one with 11 may not.
        let big = source(9);
        for _ in 0..10 {
            shares.start(big, control(&l));
        }
        assert!(shares.make_room(big).is_some(), "12 against 10");
        shares.start(big, control(&l));
        let before = shares.running.len();
        assert_eq!(shares.make_room(big), None, "12 and 11 against 11");
        assert_eq!(shares.running.len(), before, "nothing ended");
    }

    /// Witness: the refusal's text, which the client prints.
    #[test]
    fn a_test_that_gave_way_is_told_why() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut shares = Shares::default();
        let a = shares.start(source(2), control(&l));
        shares.start(source(2), control(&l));
        assert_eq!(shares.make_room(source(3)), Some(a + 1));
        assert_eq!(
            shares.stop(a + 1).unwrap().to_string(),
            "ended to make room for another source's test: this server shares its test budgets among sources, and 127.0.0.2 ran 2 tests; try again later"
        );
        assert_eq!(shares.stop(a), None, "ended by its own client");
    }
}
