//! The closed loop every closed-loop stream runs, whatever its protocol: a burst of
//! transactions one after another, each timed from just before its request is sent
//! to just after its response is read, then `-w`'s wait (seeds 000, 001). What a
//! transaction is (TCP_RR on one connection, TCP_CRR on a connection of its own,
//! UDP_RR with its timeouts) is an [`Exchange`]; the anatomy is a hook inside the
//! TCP exchanges (`super::stamped`) and an option of UDP's, not a loop of its own.

use super::outcome::{StreamError, StreamOutcome, SERIES_MAX};
use super::raw_log::{RawLine, RawLog, CHUNK};
use super::settings::{RrSettings, RunControl, SAMPLE_EVERY};
use crate::probe::anatomy::{ClientPart, Recorder, ServerPart, SlowLog, TailPlan};
use crate::probe::pacing;
use crate::stats::IntervalRecorder;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// What a stream's thread knows of its run.
pub(super) struct Ctx<'a> {
    pub(super) s: &'a RrSettings,
    pub(super) data: SocketAddr,
    pub(super) ctl: &'a RunControl,
    pub(super) start: Instant,
    pub(super) deadline: Instant,
    pub(super) hard_deadline: Instant,
    pub(super) quota: u64,
    /// Set by the watchdog when it shut the sockets down (stop or hard deadline).
    pub(super) cutoff: &'a AtomicBool,
    /// This stream's number (0, 1, …).
    pub(super) stream: u32,
    /// `--anatomy`: the tail each stream keeps, worked out once for the run.
    pub(super) tail: TailPlan,
    /// `--slow-log`.
    pub(super) slow_log: Option<&'a SlowLog>,
    /// `--raw-log`.
    pub(super) raw_log: Option<&'a RawLog>,
    /// The monotonic clock and CLOCK_REALTIME read together at the stream's start:
    /// what turns an `Instant` into the client's wall-clock time ([`Ctx::unix_ns`]).
    pub(super) anchor: (Instant, u64),
}

impl Ctx<'_> {
    /// Whether a blocked read or write should wait on: the run was neither stopped nor
    /// past its hard deadline.
    pub(super) fn keep(&self) -> bool {
        !self.ctl.stop.load(Ordering::Relaxed) && Instant::now() < self.hard_deadline
    }

    /// Whether another transaction is due after `done` of them, at `now`.
    pub(super) fn more(&self, done: u64, now: Instant) -> bool {
        done < self.quota && now < self.deadline && !self.ctl.stop.load(Ordering::Relaxed)
    }

    /// `t` on the client's CLOCK_REALTIME, ns since the Unix epoch, through the
    /// stream's anchor: two instants differ by exactly their distance apart.
    pub(super) fn unix_ns(&self, t: Instant) -> u64 {
        let (at, unix) = self.anchor;
        let ns = crate::stats::units::ns;
        if t >= at {
            unix.saturating_add(ns(t - at))
        } else {
            unix.saturating_sub(ns(at - t))
        }
    }

    /// `--anatomy`'s recorder for this stream.
    pub(super) fn recorder(&self) -> Recorder {
        Recorder::new(
            self.tail,
            self.s.test == crate::probe::control::TestKind::UdpRr,
        )
    }

    /// Record a transaction's anatomy (the server's part read from `resp`), and log it
    /// if it is slow.
    pub(super) fn record_anatomy(&self, book: &mut Recorder, part: ClientPart, resp: &[u8]) {
        let joined = book.record(part, ServerPart::read(resp), self.stream);
        if let (Some(l), Some(log)) = (joined, self.slow_log) {
            log.offer(&l);
        }
    }

    /// `--recv spin`: every read returns at once (`MSG_DONTWAIT`), and the loop reads
    /// again.
    pub(super) fn recv_flags(&self) -> libc::c_int {
        if self.s.recv_spin {
            libc::MSG_DONTWAIT
        } else {
            0
        }
    }
}

/// What a stream counts as it runs: its outcome, `--hdr-log`'s recorder of it, and
/// `--raw-log`'s lines not yet written.
pub(super) struct Tally {
    pub(super) out: StreamOutcome,
    intervals: Option<IntervalRecorder>,
    raw: Option<Vec<u8>>,
}

impl Tally {
    /// `raw`: `--raw-log` is on.
    pub(super) fn new(intervals: Option<IntervalRecorder>, raw: bool) -> Self {
        Self {
            out: StreamOutcome::default(),
            intervals,
            raw: raw.then(|| Vec::with_capacity(CHUNK + 1024)),
        }
    }

    /// `--raw-log`'s line for a transaction; without the flag, one branch.
    #[inline]
    pub(super) fn raw(&mut self, cx: &Ctx<'_>, line: impl FnOnce() -> RawLine) {
        if let Some(buf) = self.raw.as_mut() {
            line().append_to(buf);
            if buf.len() >= CHUNK {
                if let Some(log) = cx.raw_log {
                    log.write(buf);
                }
                buf.clear();
            }
        }
    }

    /// `--raw-log`'s line for transaction `seq` of the stream, sent at `t0` and
    /// answered at `t1` (`late`: after its timeout).
    #[inline]
    pub(super) fn raw_answered(
        &mut self,
        cx: &Ctx<'_>,
        seq: u64,
        (t0, t1): (Instant, Instant),
        late: bool,
    ) {
        self.raw(cx, || {
            let rtt = crate::stats::units::ns(t1 - t0);
            let mut l = RawLine::answered(cx.stream, seq, cx.unix_ns(t0), rtt);
            l.late = late;
            l
        });
    }

    /// `--raw-log`'s line for transaction `seq`, sent at `t0` and never answered.
    #[inline]
    pub(super) fn raw_lost(&mut self, cx: &Ctx<'_>, seq: u64, t0: Instant) {
        self.raw(cx, || RawLine::lost(cx.stream, seq, cx.unix_ns(t0)));
    }

    /// Hand the lines gathered to the file (the stream ended).
    pub(super) fn flush_raw(&mut self, cx: &Ctx<'_>) {
        if let (Some(buf), Some(log)) = (self.raw.as_mut(), cx.raw_log) {
            log.write(buf);
            buf.clear();
        }
    }

    /// A transaction sent at `t0` and answered at `t1`.
    #[inline]
    pub(super) fn record(&mut self, cx: &Ctx<'_>, t0: Instant, t1: Instant) {
        let out = &mut self.out;
        let ns = crate::stats::units::ns(t1 - t0);
        out.hist.record_ns(ns);
        if cx.s.keep_series && out.series.len() < SERIES_MAX {
            let at = t1.saturating_duration_since(cx.start).as_nanos();
            out.series.push((u64::try_from(at).unwrap_or(u64::MAX), ns));
        }
        if let Some(r) = self.intervals.as_mut() {
            r.record(t1, ns);
        }
        out.transactions += 1;
        // Where the thread runs and the shared progress count change slowly: look and
        // publish every 64 transactions (each costs a few tens of ns on a VM).
        if out.transactions % SAMPLE_EVERY == 1 {
            out.cpus.sample();
            self.publish(cx.ctl);
        }
    }

    /// Publish the transactions not yet counted in [`RunControl::transactions`].
    pub(super) fn publish(&mut self, ctl: &RunControl) {
        ctl.transactions.fetch_add(
            self.out.transactions - self.out.published,
            Ordering::Relaxed,
        );
        self.out.published = self.out.transactions;
    }

    /// How late the request after a wait left: intended time → just before `send()`.
    #[inline]
    fn note_pacing(&mut self, target: &mut Option<Instant>, t0: Instant) {
        if let Some(t) = target.take() {
            self.out
                .pacing
                .record_ns(crate::stats::units::ns(t0.saturating_duration_since(t)));
        }
    }
}

/// Why a transaction ended the stream: the run was stopped (`None`), or the error the
/// stream reports.
pub(super) type Ended = Option<StreamError>;

/// One protocol's transaction, as the closed loop drives it.
pub(super) trait Exchange {
    /// Work before the transaction's clock starts (UDP numbers its request and sets
    /// the read's timeout).
    #[inline]
    fn prepare(&mut self, _cx: &Ctx<'_>) {}

    /// Send one request and wait for its response, recording it in `tally` (`t0`:
    /// just before the request). Returns when the transaction ended, answered or given
    /// up on.
    ///
    /// # Errors
    /// [`Ended`]: this transaction ends the stream.
    fn exchange(&mut self, cx: &Ctx<'_>, tally: &mut Tally, t0: Instant) -> Result<Instant, Ended>;

    /// After the last transaction: what the socket says of the stream.
    fn finish(self, cx: &Ctx<'_>, tally: &mut Tally);
}

/// Run transactions until the quota, the deadline or a stop: bursts of `-b`, with
/// `-w` from each burst's end to the next one's start (netperf's `-w`/`-b`).
pub(super) fn run<E: Exchange>(cx: &Ctx<'_>, mut exchange: E, tally: &mut Tally) {
    // UDP_RR's losses are transactions too: they count against the quota.
    let done = |t: &Tally| t.out.transactions + t.out.lost;
    let mut now = cx.start;
    let mut target = None;
    'run: while cx.more(done(tally), now) {
        for _ in 0..cx.s.burst {
            exchange.prepare(cx);
            let t0 = Instant::now();
            tally.note_pacing(&mut target, t0);
            match exchange.exchange(cx, tally, t0) {
                Ok(end) => now = end,
                Err(why) => {
                    tally.out.error = why;
                    break 'run;
                }
            }
            if !cx.more(done(tally), now) {
                break 'run;
            }
        }
        target = pause(cx, now);
        now = Instant::now();
    }
    exchange.finish(cx, tally);
}

/// Wait `-w` after `after`; returns the intended send time of the next request.
fn pause(cx: &Ctx<'_>, after: Instant) -> Option<Instant> {
    if cx.s.interval.is_zero() {
        return None;
    }
    let target = after + cx.s.interval;
    pacing::wait_until(cx.s.pace, target, || !cx.ctl.stop.load(Ordering::Relaxed));
    Some(target)
}

/// The calling thread's CPU time so far.
pub(super) fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
