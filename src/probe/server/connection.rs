//! The thread that drives one control connection: it reads with a receive timeout of
//! what is left until the conversation's deadline, feeds the bytes and the time to the
//! state machine (`conversation`), and performs what it asks — writes, the handshake
//! pool, the budgets, opening, running and stopping the test — then tells it how each
//! went. Every wait is bounded by the machine's deadline, so no peer can hold the
//! thread, or the test slot it may hold, past the deadline of the state it is in.

use super::admission::{self, SourceKey};
use super::budget::{self, Cost, TestSlot};
use super::conversation::{Action, Conversation, EndKind, Ending};
use super::data::{DataTest, RunningTest};
use super::refusal::Refusal;
use super::shares::ROOM_WAIT;
use super::Shared;
use crate::probe::control::{self, ServerReport, TestSpec};
use crate::probe::io::is_timeout;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Bytes read at once: a handshake frame fits; a longer frame takes several reads.
const READ_CHUNK: usize = 4096;
/// Shortest write timeout: a frame due just before a deadline still gets this long.
const MIN_WRITE: Duration = Duration::from_millis(100);

/// A test from the moment its budgets are taken to its end.
struct Test<'a> {
    spec: Box<TestSpec>,
    started: Instant,
    /// Opened, its Ready not yet sent: its streams are accepted once it is.
    opened: Option<DataTest>,
    running: Option<RunningTest>,
    /// Given back when the test ends (dropped after the test stops).
    _slot: TestSlot<'a>,
    /// Counted out last, once its budgets are back: a newcomer it was ended for
    /// waits for that.
    share: Share<'a>,
}

/// A running test's place among the [`super::shares::Shares`], given up when dropped.
struct Share<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Share<'_> {
    /// Why it was ended for another source's test, if it was.
    fn gave_way(&self) -> Option<Refusal> {
        lock(&self.shared.shares).why(self.id)
    }
}

impl Drop for Share<'_> {
    fn drop(&mut self) {
        lock(&self.shared.shares).stop(self.id);
    }
}

/// Drive the conversation on `ctl`, accepted from `peer` as handshake-pool entry `id`,
/// to its end.
pub(super) fn serve(ctl: &TcpStream, peer: SocketAddr, id: u64, shared: &Shared) {
    let _ = ctl.set_nodelay(true);
    let Ok(nonce) = control::nonce() else {
        let _ = admission::leave_pool(shared, id);
        shared.log("no randomness for a nonce: connection closed");
        return;
    };
    let mut conv = Conversation::new(Instant::now(), &shared.settings, nonce);
    let mut test: Option<Test<'_>> = None;
    // The finished test's spec, transactions and length, for its log line.
    let mut done = None;
    let mut buf = [0u8; READ_CHUNK];
    let ending = 'conversation: loop {
        while let Some(action) = conv.poll_action() {
            match action {
                Action::Send(frame) => {
                    if send(ctl, &frame, conv.deadline(), shared).is_err() {
                        conv.on_eof();
                    }
                }
                Action::SaidHello => admission::said_hello(shared, id),
                Action::Open(spec) => test = open(&mut conv, spec, ctl, peer, id, shared),
                Action::Finish => {
                    let mut report = ServerReport::default();
                    if let Some(mut t) = test.take() {
                        if let Some(running) = t.running.take() {
                            report = running.finish();
                            report.host = Some(shared.settings.host.clone());
                        }
                        done = Some((t.spec.clone(), report.transactions, t.started.elapsed()));
                        // Its budgets go back here, once its threads have stopped.
                    }
                    conv.test_finished(report);
                }
                Action::Close(ending) => break 'conversation ending,
            }
        }
        // A test just opened has sent its Ready: accept its streams.
        if let Some(t) = &mut test {
            if let Some(opened) = t.opened.take() {
                match opened.run(&shared.served) {
                    Ok(running) => t.running = Some(running),
                    Err(e) => conv.test_failed(&crate::error_chain(&e)),
                }
                continue;
            }
        }
        let now = Instant::now();
        if let Some(quiet) = test
            .as_ref()
            .and_then(|t| t.running.as_ref())
            .and_then(RunningTest::quiet_for)
        {
            conv.data_heard(now.checked_sub(quiet).unwrap_or(now));
        }
        let Some(left) = conv
            .deadline()
            .and_then(|d| d.checked_duration_since(now))
            .filter(|d| !d.is_zero())
        else {
            conv.on_timeout(now);
            if !conv.is_closed() && conv.deadline().is_none() {
                // Nothing to wait for and nothing to do: cannot happen, but never spin.
                conv.on_eof();
            }
            continue;
        };
        if ctl.set_read_timeout(Some(left)).is_err() {
            conv.on_eof();
            continue;
        }
        match (&mut &*ctl).read(&mut buf) {
            // Dropped from the pool, or its test ended for another source's: its
            // socket was shut for reading to wake us.
            Ok(0) => match admission::leave_pool(shared, id) {
                Err(why) => conv.dropped(&why),
                Ok(()) => match test.as_ref().and_then(|t| t.share.gave_way()) {
                    Some(why) => conv.gave_way(&why),
                    None => conv.on_eof(),
                },
            },
            Ok(n) => conv.on_bytes(&buf[..n], Instant::now()),
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => conv.on_eof(),
        }
    };
    let _ = admission::leave_pool(shared, id);
    if let Some(mut t) = test.take() {
        if let Some(running) = t.running.take() {
            running.finish();
        }
    }
    account(shared, peer, &ending, done);
}

/// Perform [`Action::Open`]: leave the handshake pool, check the spec against the
/// limits and this host, take its budgets and open its data socket; tell the
/// conversation how that went.
fn open<'a>(
    conv: &mut Conversation<'_>,
    spec: Box<TestSpec>,
    ctl: &TcpStream,
    peer: SocketAddr,
    id: u64,
    shared: &'a Shared,
) -> Option<Test<'a>> {
    if let Err(why) = admission::leave_pool(shared, id) {
        conv.dropped(&why);
        return None;
    }
    let source = admission::SourceKey::of(peer.ip());
    let slot = budget::validate(&spec, &shared.config.limits)
        .and_then(|()| budget::check_host(&spec, &shared.cpus, &shared.config.congestion))
        .and_then(|()| take_fairly(shared, Cost::of(&spec), source));
    let slot = match slot {
        Ok(slot) => slot,
        Err(reason) => {
            conv.test_refused(&reason);
            return None;
        }
    };
    shared
        .counters
        .tests_started
        .fetch_add(1, Ordering::Relaxed);
    let (Ok(local), Ok(handle)) = (ctl.local_addr(), ctl.try_clone()) else {
        conv.on_eof();
        return None;
    };
    let share = Share {
        shared,
        id: lock(&shared.shares).start(source, handle),
    };
    let config = &shared.config;
    match DataTest::open(
        &spec,
        local.ip(),
        peer.ip(),
        config.idle_timeout,
        config.limits.data_ports,
    ) {
        Ok(opened) => {
            let now = Instant::now();
            conv.test_started(opened.port, now);
            Some(Test {
                spec,
                started: now,
                opened: Some(opened),
                running: None,
                _slot: slot,
                share,
            })
        }
        Err(reason) => {
            conv.test_refused(&reason);
            None
        }
    }
}

/// Take the budgets of a test from `source`. Refused for want of room, end one test
/// of the source running the most for it, when that source runs two more
/// ([`super::shares::Shares::make_room`]), and wait up to [`ROOM_WAIT`] for its
/// budgets to come back; refused still, it is refused.
fn take_fairly(shared: &Shared, cost: Cost, source: SourceKey) -> Result<TestSlot<'_>, Refusal> {
    let until = Instant::now() + ROOM_WAIT;
    let mut ended: Option<u64> = None;
    loop {
        let why = match shared.budgets.take(cost, source.0) {
            Ok(slot) => return Ok(slot),
            Err(why) => why,
        };
        if !why.wants_room() || Instant::now() >= until {
            return Err(why);
        }
        {
            let mut shares = lock(&shared.shares);
            match ended {
                // One test ends for a newcomer, no more: a large test must not end
                // a dozen small ones (once, one of 30 streams ended 13 tests).
                Some(id) if shares.why(id).is_none() => return Err(why),
                Some(_) => {}
                None => match shares.make_room(source) {
                    Some(id) => ended = Some(id),
                    None => return Err(why),
                },
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Write one frame, within what is left of the conversation's deadline (the idle
/// timeout when it has none: a Result, or the Error that ends it, both small enough
/// to fit the socket's buffer unless the peer stopped reading).
fn send(
    ctl: &TcpStream,
    frame: &[u8],
    deadline: Option<Instant>,
    shared: &Shared,
) -> io::Result<()> {
    let timeout = deadline.map_or(shared.config.idle_timeout, |d| {
        d.saturating_duration_since(Instant::now())
    });
    ctl.set_write_timeout(Some(timeout.max(MIN_WRITE)))?;
    (&mut &*ctl).write_all(frame)
}

/// Count and log how a conversation ended.
fn account(
    shared: &Shared,
    peer: SocketAddr,
    ending: &Ending,
    done: Option<(Box<TestSpec>, u64, Duration)>,
) {
    let c = &shared.counters;
    let why = match ending.kind {
        EndKind::Completed => {
            c.tests_completed.fetch_add(1, Ordering::Relaxed);
            if let Some((spec, transactions, took)) = done {
                shared.log(&format!(
                    "{peer}: {} {},{} streams {} done: {transactions} transactions in {:.1} s",
                    spec.test.name(),
                    spec.request_size,
                    spec.response_size,
                    spec.streams,
                    took.as_secs_f64()
                ));
            }
            return;
        }
        EndKind::Refused => {
            c.rejected.fetch_add(1, Ordering::Relaxed);
            "tests refused"
        }
        EndKind::AuthFailed => {
            c.auth_failures.fetch_add(1, Ordering::Relaxed);
            admission::record_failure(shared, peer);
            "failed authentications"
        }
        EndKind::Protocol => {
            c.protocol_errors.fetch_add(1, Ordering::Relaxed);
            "protocol errors"
        }
        EndKind::EndedByServer => {
            c.tests_ended_by_server.fetch_add(1, Ordering::Relaxed);
            "tests ended by the server"
        }
        EndKind::TimedOut => {
            c.handshakes_dropped.fetch_add(1, Ordering::Relaxed);
            "handshakes past their deadline"
        }
        EndKind::Dropped => "dropped from the handshake pool",
        EndKind::Gone => "closed by the peer",
    };
    shared.refused(peer, why, &ending.message);
}
