//! `rttlab rr`: application round-trip time, as netperf's TCP_RR, UDP_RR and TCP_CRR
//! measure it (seeds 000, 001, 004).
//!
//! A transaction is timed from just before the request's `send()` to just after the
//! last byte of the response is read. Waits between transactions (`-w`) are never part
//! of a transaction's time, so paced runs report the latency of the transactions, not
//! elapsed/transactions (netperf's RT_LATENCY counts the wait when pacing).
//!
//! Open-loop mode sends on a schedule whatever the replies do and records each
//! transaction twice: service time (actual send → response) and response time
//! (intended send → response). A slow reply delays the next sends in a closed loop and
//! hides its own effect (coordinated omission); the response time shows it. Open-loop
//! UDP_RR also measures irtt's one-way delays, their IPDV and each loss's direction
//! from the server's stamps (`one_way`), and `--raw-log` writes every transaction as a
//! line while the run goes (`raw_log`).

mod client;
mod closed;
mod one_way;
mod open_loop;
mod outcome;
mod raw_log;
mod result;
mod sequence;
mod session;
mod settings;
mod stamped;
mod tcp;
mod udp;
mod watchdog;

pub use client::ControlClient;
pub use raw_log::RAW_SCHEMA;
pub use result::{Confidence, OpenLoopStats, RrReportSettings, RrResult, TcpInfoSample, UdpStats};
pub use session::{Outcome, Session, SessionSpec, Transaction, SESSION_PAYLOAD};
pub use settings::{OpenLoop, RrError, RrSettings, RunControl, MAX_RUN, UDP_TIMEOUT_FLOOR};

use crate::kernel::cpu;
use crate::kernel::cpu::{CpuUse, MachineTicks};
use crate::kernel::host::HostFacts;
use crate::probe::control::{ControlError, ServerReport, TestKind, TestSpec};
use crate::probe::pacing;
use crate::stats::{HdrLogWriter, Summary};
use closed::{thread_cpu_ns, Ctx, Tally};
use open_loop::{open_loop, Endpoint};
use outcome::{StreamError, StreamOutcome};
use settings::{IN_FLIGHT_GRACE, REPORT_WAIT, REPORT_WAIT_CUT};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};
use tcp::{tcp_socket, Plain, TcpCrr, TcpRr};
use watchdog::watch;

/// Run one rr test against a running server.
///
/// # Errors
/// Nothing could be measured (server unreachable, test refused, data port closed).
/// Failures after measuring began are reported in [`RrResult::error`] with the partial
/// numbers.
pub fn run(s: &RrSettings, ctl: &RunControl) -> Result<RrResult, RrError> {
    check_settings(s)?;
    // The output files first: one that cannot be created is the user's to fix, and
    // no connection was made for nothing.
    let mut hdr = open_hdr_log(s)?;
    let slow_log = open_slow_log(s)?;
    let slow_log = slow_log.as_ref();
    let raw_log = open_raw_log(s)?;
    let raw_log = raw_log.as_ref();
    let mut client = ControlClient::connect(s.server, s.secret.as_deref(), &s.path)?;
    check_sizes(s, client.limits.max_payload)?;
    // A run bounded only by count asks for as long as the server allows.
    let server_max = Duration::from_millis(client.limits.max_duration_ms);
    let run_for = s.duration.unwrap_or(server_max.min(MAX_RUN)).min(MAX_RUN);
    let port = client.start(&test_spec(s, run_for))?;
    let data = SocketAddr::new(s.server.ip(), port);
    let conns = connect_streams(s, data, port)?;
    // The watchdog's handles on the connections, also holding them open until the
    // server's report is in: a connection closed before it leaves the server unable
    // to say which stream its last part belongs to.
    let watched: Vec<TcpStream> = conns
        .iter()
        .flatten()
        .filter_map(|c| c.try_clone().ok())
        .collect();
    let plan = Plan {
        data,
        run_for,
        tail: tail_plan(s, run_for),
        slow_log,
        raw_log,
    };
    let (outcomes, phase) = measure(s, ctl, &plan, (conns, &watched), hdr.as_mut());
    if let Some(h) = hdr.take() {
        let _ = h.finish();
    }

    // A server that let the watchdog cut the run off is unlikely to answer promptly.
    let wait = if phase.cut_off && !ctl.stop.load(Ordering::Relaxed) {
        REPORT_WAIT_CUT
    } else {
        REPORT_WAIT
    };
    let server = client.finish(wait);
    drop(watched);
    let mut outcomes = outcomes;
    let last_parts = server.as_ref().map_or(&[][..], |r| &r.last_parts[..]);
    join_last_parts(&mut outcomes, last_parts, slow_log, raw_log);
    let mut t = StreamOutcome::default();
    for o in outcomes {
        t.merge(o);
    }
    // A server that ended the test said why on the control connection (its data
    // connections closing is the consequence, not the cause).
    let server_said = match &server {
        Err(RrError::Control(ControlError::Remote(why))) => {
            Some(format!("the server ended the test: {why}"))
        }
        _ => None,
    };
    let mut error = server_said.or_else(|| t.error.as_ref().map(crate::error_chain));
    if let Some(Err(e)) = raw_log.map(raw_log::RawLog::finish) {
        error = error.or(Some(format!("writing the raw log: {e}")));
    }
    if let Some(log) = slow_log {
        if log.threshold_ns.is_none() {
            for l in t.anatomy.iter().flat_map(|a| a.slowest().0) {
                log.write(&l);
            }
        }
        if let Err(e) = log.finish() {
            error = error.or(Some(format!("writing the slow log: {e}")));
        }
    }
    let server = match server {
        Ok(r) => Some(r),
        Err(e) => {
            error = error.or(Some(format!(
                "collecting the server's report: {}",
                crate::error_chain(&e)
            )));
            None
        }
    };
    let remote_host = server
        .as_ref()
        .and_then(|r| r.host.clone())
        .or(Some(client.server_host.clone()));
    Ok(result(
        s,
        &t,
        phase,
        (server.as_ref(), remote_host),
        port,
        error,
    ))
}

/// The result of a run: the streams' merged outcome `t`, the data phase, the server's
/// report (none when it could not be collected) and the run's first error.
fn result(
    s: &RrSettings,
    t: &StreamOutcome,
    phase: Phase,
    (server, remote_host): (Option<&ServerReport>, Option<HostFacts>),
    port: u16,
    error: Option<String>,
) -> RrResult {
    let elapsed = phase.elapsed;
    let tcp = s.test != TestKind::UdpRr;
    RrResult {
        settings: report_settings(
            s,
            t.local_addr,
            port,
            server.and_then(|r| r.congestion.clone()),
        ),
        brand: None,
        local_host: HostFacts::collect(),
        remote_host,
        elapsed_s: elapsed.as_secs_f64(),
        transactions: t.transactions,
        throughput_tps: if elapsed.is_zero() {
            0.0
        } else {
            t.transactions as f64 / elapsed.as_secs_f64()
        },
        latency: Summary::from_histogram(&t.hist, &s.percentiles),
        histogram: t.hist.clone(),
        connect: (s.test == TestKind::TcpCrr)
            .then(|| Summary::from_histogram(&t.connect, &s.percentiles)),
        pacing_error: (!s.interval.is_zero() && s.open_loop.is_none())
            .then(|| Summary::from_histogram(&t.pacing, &s.percentiles)),
        open_loop: s.open_loop.map(|_| OpenLoopStats {
            response_time: Summary::from_histogram(&t.intended, &s.percentiles),
            unanswered: t.unanswered,
            late_sends: t.late_sends,
        }),
        udp: (s.test == TestKind::UdpRr).then(|| UdpStats {
            lost: t.lost,
            late_replies: t.late_replies,
            stray_replies: t.stray_replies,
            dropped_by_server: server.map_or(0, |r| r.dropped_on_purpose),
        }),
        remote_transactions: server.map(|r| r.transactions),
        local_tcp_info: t.info.clone(),
        remote_tcp_info: server
            .as_ref()
            .map(|r| r.tcp_info.clone())
            .unwrap_or_default(),
        local_retrans: tcp.then_some(t.retrans),
        remote_retrans: if tcp {
            server.map(|r| r.total_retrans)
        } else {
            None
        },
        local_placement: t.cpus.placement(s.local_cpu),
        remote_placement: server.map(|r| r.placement.clone()),
        client_cpu_us_per_transaction: (t.transactions > 0)
            .then(|| t.cpu_ns as f64 / 1e3 / t.transactions as f64),
        tcpinfo_series: phase.tcpinfo_series,
        error,
        confidence: None,
        local_cpu: phase
            .machine
            .and_then(|(a, b)| CpuUse::between(a, b, elapsed, t.transactions)),
        series: {
            let mut v: Vec<(f64, u64)> = t
                .series
                .iter()
                .map(|&(at, ns)| (at as f64 / 1e9, ns))
                .collect();
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            v
        },
        started_unix_ns: phase.started_unix_ns,
        anatomy: t.anatomy.as_ref().map(|a| {
            let mut r = a.result(&s.percentiles, s.test == TestKind::TcpRr);
            r.one_way = a.one_way(same_clock(server), t.lost, t.lost_tail, &s.percentiles);
            r
        }),
        one_way: t
            .one_way
            .as_ref()
            .and_then(|b| b.result(same_clock(server), t.lost, t.transactions, &s.percentiles)),
        remote_cpu: server.and_then(|r| {
            let [a, b] = r.machine_ticks?;
            // A server older than its elapsed field: the client's window is the closest.
            let elapsed = r.machine_elapsed_ns.map_or(elapsed, Duration::from_nanos);
            CpuUse::between(a, b, elapsed, r.transactions)
        }),
    }
}

/// Whether both ends ran on one kernel (the lab's namespaces), so read one clock.
fn same_clock(server: Option<&ServerReport>) -> bool {
    let here = HostFacts::collect().boot_id;
    let there = server
        .and_then(|r| r.host.as_ref())
        .and_then(|h| h.boot_id.clone());
    here.is_some() && here == there
}

/// Settings that contradict each other, refused before the server is asked.
fn check_settings(s: &RrSettings) -> Result<(), RrError> {
    if s.split_request && (s.test != TestKind::TcpRr || s.open_loop.is_some()) {
        return Err(RrError::Limit(
            "--split-request writes closed-loop TCP_RR requests".into(),
        ));
    }
    if s.anatomy {
        check_anatomy(s)
    } else if s.slow_log.is_some() {
        Err(RrError::Limit("--slow-log needs --anatomy".into()))
    } else {
        Ok(())
    }
}

/// `--slow-log`'s writer.
fn open_slow_log(s: &RrSettings) -> Result<Option<crate::probe::anatomy::SlowLog>, RrError> {
    let Some(p) = &s.slow_log else {
        return Ok(None);
    };
    let threshold = s.slow.map(crate::stats::units::ns);
    crate::probe::anatomy::SlowLog::create(p, threshold)
        .map(Some)
        .map_err(|source| RrError::Output {
            flag: "--slow-log",
            source,
        })
}

/// `--raw-log`'s writer.
fn open_raw_log(s: &RrSettings) -> Result<Option<raw_log::RawLog>, RrError> {
    let Some(p) = &s.raw_log else {
        return Ok(None);
    };
    raw_log::RawLog::create(p)
        .map(Some)
        .map_err(|source| RrError::Output {
            flag: "--raw-log",
            source,
        })
}

/// What every stream of a run shares, worked out once before they start.
struct Plan<'a> {
    data: SocketAddr,
    run_for: Duration,
    tail: crate::probe::anatomy::TailPlan,
    slow_log: Option<&'a crate::probe::anatomy::SlowLog>,
    raw_log: Option<&'a raw_log::RawLog>,
}

/// What the data phase gave besides each stream's outcome: the watchdog's `tcp_info`
/// samples, how long it ran and the machine's CPU ticks across it.
struct Phase {
    tcpinfo_series: Vec<TcpInfoSample>,
    elapsed: Duration,
    started_unix_ns: u64,
    machine: Option<(MachineTicks, MachineTicks)>,
    /// The watchdog shut the sockets down (stop or hard deadline).
    cut_off: bool,
}

/// The data phase: a thread per stream, started together, and the watchdog on this
/// thread until they end.
fn measure(
    s: &RrSettings,
    ctl: &RunControl,
    plan: &Plan<'_>,
    (conns, watched): (Vec<Option<TcpStream>>, &[TcpStream]),
    mut hdr: Option<&mut HdrLogWriter>,
) -> (Vec<StreamOutcome>, Phase) {
    let cutoff = AtomicBool::new(false);
    let barrier = Barrier::new(s.streams as usize + 1);
    let start_cell: Mutex<Option<Instant>> = Mutex::new(None);
    // netperf's -c: the whole machine's CPU ticks across the data phase.
    let machine_cell: Mutex<Option<MachineTicks>> = Mutex::new(None);
    let (outcomes, tcpinfo_series) = std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for (i, conn) in conns.into_iter().enumerate() {
            let recorder = hdr.as_mut().map(|h| h.recorder());
            let (barrier, start_cell, cutoff) = (&barrier, &start_cell, &cutoff);
            handles.push(scope.spawn(move || {
                if let Some(c) = s.local_cpu {
                    let _ = cpu::pin_current_thread(c);
                }
                pacing::tighten_timer_slack();
                barrier.wait();
                let start = start_cell
                    .lock()
                    .map(|g| g.unwrap_or_else(Instant::now))
                    .unwrap_or_else(|_| Instant::now());
                if s.spread_starts {
                    let phase = s.interval.mul_f64(i as f64 / f64::from(s.streams.max(1)));
                    std::thread::sleep((start + phase).saturating_duration_since(Instant::now()));
                }
                let cx = Ctx {
                    s,
                    data: plan.data,
                    ctl,
                    start,
                    deadline: start + plan.run_for,
                    hard_deadline: start + plan.run_for + IN_FLIGHT_GRACE,
                    quota: stream_quota(s.count, s.streams, i),
                    cutoff,
                    stream: i as u32,
                    tail: plan.tail,
                    slow_log: plan.slow_log,
                    raw_log: plan.raw_log,
                    anchor: (Instant::now(), crate::kernel::realtime_ns()),
                };
                let cpu0 = thread_cpu_ns();
                let mut tally = Tally::new(recorder, plan.raw_log.is_some());
                measure_stream(&cx, conn, &mut tally);
                tally.out.ended = Some(Instant::now());
                tally.flush_raw(&cx);
                tally.out.cpu_ns = thread_cpu_ns().saturating_sub(cpu0);
                tally.publish(ctl);
                tally.out
            }));
        }
        let start = Instant::now();
        *machine_cell.lock().unwrap_or_else(|p| p.into_inner()) = MachineTicks::now().ok();
        *start_cell.lock().unwrap_or_else(|p| p.into_inner()) = Some(start);
        barrier.wait();
        let hard_deadline = start + plan.run_for + IN_FLIGHT_GRACE;
        let series = watch(s, watched, ctl, &cutoff, hard_deadline, &handles);
        let outs: Vec<StreamOutcome> = handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| StreamOutcome {
                    error: Some(StreamError::Panicked),
                    ..Default::default()
                })
            })
            .collect();
        (outs, series)
    });
    let started = *start_cell.lock().unwrap_or_else(|p| p.into_inner());
    // Until the last stream's last transaction (the watchdog notices the end only at
    // its next tick, 50 ms on: a 100-transaction run would read 50 ms long).
    let last_end = outcomes
        .iter()
        .map(|o| o.ended)
        .collect::<Option<Vec<_>>>()
        .and_then(|v| v.into_iter().max());
    let elapsed = match (started, last_end) {
        (Some(t), Some(end)) => end.saturating_duration_since(t),
        (Some(t), None) => t.elapsed(),
        (None, _) => Duration::ZERO,
    };
    let machine = machine_cell
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .zip(MachineTicks::now().ok());
    let phase = Phase {
        tcpinfo_series,
        elapsed,
        started_unix_ns: crate::kernel::realtime_ns()
            .saturating_sub(crate::stats::units::ns(elapsed)),
        machine,
        cut_off: cutoff.load(Ordering::SeqCst),
    };
    (outcomes, phase)
}

/// One stream's transactions, by test and loop: the closed loop with its protocol's
/// exchange (and `--anatomy`'s hook), or the open loop.
fn measure_stream(cx: &Ctx<'_>, conn: Option<TcpStream>, tally: &mut Tally) {
    let s = cx.s;
    let opened = match (s.test, s.open_loop) {
        (TestKind::TcpRr, None) if s.anatomy => {
            TcpRr::<stamped::Stamps<stamped::RrStamps>>::open(cx, conn, &mut tally.out)
                .map(|x| closed::run(cx, x, tally))
        }
        (TestKind::TcpRr, None) => {
            TcpRr::<Plain>::open(cx, conn, &mut tally.out).map(|x| closed::run(cx, x, tally))
        }
        (TestKind::TcpCrr, _) if s.anatomy => {
            TcpCrr::<stamped::Stamps<stamped::CrrStamps>>::open(cx)
                .map(|x| closed::run(cx, x, tally))
        }
        (TestKind::TcpCrr, _) => TcpCrr::<Plain>::open(cx).map(|x| closed::run(cx, x, tally)),
        (TestKind::UdpRr, None) => udp::UdpRr::open(cx, tally).map(|x| closed::run(cx, x, tally)),
        (TestKind::TcpRr, Some(ol)) => {
            open_loop(cx, ol, Endpoint::Tcp(conn), tally);
            Ok(())
        }
        (TestKind::UdpRr, Some(ol)) => {
            open_loop(cx, ol, Endpoint::Udp, tally);
            Ok(())
        }
    };
    if let Err(e) = opened {
        tally.out.error = Some(e);
    }
}

/// `--anatomy`'s tail for each stream: its share of the run (`--tail`) among at most
/// as many transactions as the run can hold.
fn tail_plan(s: &RrSettings, run_for: Duration) -> crate::probe::anatomy::TailPlan {
    use crate::probe::anatomy::{slowest::runs_at_most, TailPlan};
    let ns = crate::stats::units::ns;
    let n_max = runs_at_most(s.count, ns(run_for), s.streams, s.burst, ns(s.interval));
    TailPlan::new(s.tail_ppm, n_max, s.streams)
}

/// Each stream's last transaction joined with the server's part of it, which came in
/// the server's report (no response followed it to carry it; none when the report
/// could not be collected). A part goes to the stream whose local address the server
/// saw; with one stream and one part (an address translated on the way), to that
/// stream. Open-loop UDP_RR's transactions still unsettled are settled then, and
/// their `--raw-log` lines written.
fn join_last_parts(
    outcomes: &mut [StreamOutcome],
    parts: &[crate::probe::anatomy::LastPart],
    slow_log: Option<&crate::probe::anatomy::SlowLog>,
    raw_log: Option<&raw_log::RawLog>,
) {
    let only = (outcomes.len() == 1 && parts.len() == 1).then(|| &parts[0]);
    for (i, o) in outcomes.iter_mut().enumerate() {
        let part = parts
            .iter()
            .find(|p| o.local_addr == Some(p.peer))
            .or(only)
            .and_then(crate::probe::anatomy::LastPart::part);
        if let (Some(book), Some(part)) = (o.anatomy.as_mut(), part) {
            let joined = book.record_last(part, i as u32);
            if let (Some(l), Some(log)) = (joined, slow_log) {
                log.offer(&l);
            }
        }
        if let Some(book) = o.one_way.as_mut() {
            book.finish(part, &mut |l| {
                if let Some(log) = raw_log {
                    log.line(l);
                }
            });
        }
    }
}

/// What `--anatomy` measures: closed-loop TCP_RR, TCP_CRR and UDP_RR (one stream),
/// with responses large enough to carry the server's stamps.
fn check_anatomy(s: &RrSettings) -> Result<(), RrError> {
    use crate::probe::anatomy::MIN_RESPONSE;
    let refuse = |m: String| Err(RrError::Limit(m));
    if s.open_loop.is_some() {
        return refuse("--anatomy measures closed-loop TCP_RR, TCP_CRR and UDP_RR".into());
    }
    if s.test == TestKind::UdpRr && s.streams > 1 {
        return refuse("--anatomy measures UDP_RR with one stream".into());
    }
    if s.slow_log.is_none() && s.slow.is_some() {
        return refuse("--slow sets what --slow-log writes: give --slow-log FILE".into());
    }
    if s.response_size < MIN_RESPONSE {
        return refuse(format!(
            "--anatomy needs responses of at least {MIN_RESPONSE} bytes (they carry the server's stamps)"
        ));
    }
    Ok(())
}

/// Both payloads within what the server accepts.
fn check_sizes(s: &RrSettings, max_payload: u32) -> Result<(), RrError> {
    for (what, v) in [
        ("request size", s.request_size),
        ("response size", s.response_size),
    ] {
        if v == 0 || v > max_payload {
            return Err(RrError::Limit(format!(
                "{what} {v} is outside the server's limit 1..={max_payload}"
            )));
        }
    }
    Ok(())
}

/// What the client asks the server for.
fn test_spec(s: &RrSettings, run_for: Duration) -> TestSpec {
    TestSpec {
        test: s.test,
        request_size: s.request_size,
        response_size: s.response_size,
        // The server adds its own grace for transactions in flight at the end.
        max_duration_ms: crate::stats::units::ms(run_for),
        interval_ms: crate::stats::units::ms(s.interval.saturating_add(s.timeout)),
        data_port: s.data_port,
        streams: s.streams,
        nodelay: true,
        thin_linear_timeouts: s.thin_linear_timeouts,
        congestion: s.congestion.clone(),
        server_cpu: s.remote_cpu,
        udp_drop_one_in: s.udp_drop_one_in,
        tos: s.path.tos.map(|t| t & 0xfc),
        // Open-loop UDP_RR's one-way delays need the server's stamps as the anatomy's.
        anatomy: s.anatomy || s.one_way(),
        server_delay_us: crate::stats::units::us(s.server_delay),
    }
}

/// The `--hdr-log` writer, one tag per stream, one interval a second.
fn open_hdr_log(s: &RrSettings) -> Result<Option<HdrLogWriter>, RrError> {
    let Some(p) = &s.hdr_log else {
        return Ok(None);
    };
    let file = crate::kernel::fs::create_replace(p).map_err(|source| RrError::Output {
        flag: "--hdr-log",
        source,
    })?;
    HdrLogWriter::start(
        file,
        s.streams as usize,
        Duration::from_secs(1),
        &format!(
            "{} -r {},{} -w {:?}",
            s.test.name(),
            s.request_size,
            s.response_size,
            s.interval
        ),
    )
    .map(Some)
    .map_err(RrError::HdrLog)
}

/// TCP_RR connects every stream before timing starts, so a refused data port is an
/// error rather than an empty result; the other tests connect in their streams.
fn connect_streams(
    s: &RrSettings,
    data: SocketAddr,
    port: u16,
) -> Result<Vec<Option<TcpStream>>, RrError> {
    if s.test != TestKind::TcpRr {
        return Ok((0..s.streams).map(|_| None).collect());
    }
    (0..s.streams)
        .map(|_| {
            tcp_socket(s, data, s.open_loop.is_some())
                .map(Some)
                .map_err(|source| RrError::Data { port, source })
        })
        .collect()
}

/// Stream `i`'s share of a `count`-bounded run: the count split as evenly as whole
/// transactions allow, the first streams taking one more.
fn stream_quota(count: Option<u64>, streams: u32, i: usize) -> u64 {
    count.map_or(u64::MAX, |n| {
        n / u64::from(streams) + u64::from((i as u64) < n % u64::from(streams))
    })
}

/// The settings a result reports: what was asked, and what the server chose where the
/// client left it open (congestion control).
fn report_settings(
    s: &RrSettings,
    local_data_addr: Option<SocketAddr>,
    remote_data_port: u16,
    server_congestion: Option<String>,
) -> RrReportSettings {
    RrReportSettings {
        test: s.test.name(),
        request_size: s.request_size,
        response_size: s.response_size,
        interval_us: s.interval.as_secs_f64() * 1e6,
        burst: s.burst,
        pacing: s.pace.name(),
        streams: s.streams,
        duration_limit_s: s.duration.map(|d| d.as_secs_f64()),
        count_limit: s.count,
        server: s.server,
        local_data_addr,
        remote_data_port,
        nodelay: !s.split_request,
        split_request: s.split_request,
        thin_linear_timeouts: s.thin_linear_timeouts,
        congestion: s.congestion.clone().or(server_congestion),
        timeout_ms: (s.test == TestKind::UdpRr).then_some(s.timeout.as_secs_f64() * 1e3),
        // Closed-loop UDP_RR adapts its timeout unless --timeout fixed it; open loop
        // keeps the fixed one.
        timeout_adaptive: s.test == TestKind::UdpRr && s.adaptive_timeout && s.open_loop.is_none(),
        open_loop: s.open_loop,
        anatomy: s.anatomy,
        server_delay_us: s.server_delay.as_secs_f64() * 1e6,
        recv: if s.recv_spin { "spin" } else { "block" },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Witness: arithmetic — 10 transactions over 3 streams are 4 + 3 + 3.
    #[test]
    fn a_count_splits_evenly_over_the_streams() {
        let q: Vec<u64> = (0..3).map(|i| stream_quota(Some(10), 3, i)).collect();
        assert_eq!(q, vec![4, 3, 3]);
        assert_eq!(q.iter().sum::<u64>(), 10);
        assert_eq!(stream_quota(Some(2), 4, 3), 0);
        assert_eq!(stream_quota(None, 4, 0), u64::MAX);
    }

    #[test]
    fn sizes_outside_the_servers_limit_are_refused_by_name() {
        let mut s = RrSettings::new("127.0.0.1:1".parse().unwrap());
        assert!(check_sizes(&s, 64).is_ok());
        s.response_size = 65;
        let e = check_sizes(&s, 64).unwrap_err().to_string();
        assert!(
            e.contains("response size 65") && e.contains("1..=64"),
            "{e}"
        );
        s.response_size = 0;
        assert!(check_sizes(&s, 64).is_err());
    }

    #[test]
    fn only_closed_loop_udp_rr_without_a_fixed_timeout_adapts_it() {
        let mut s = RrSettings::new("127.0.0.1:1".parse().unwrap());
        s.test = TestKind::UdpRr;
        s.adaptive_timeout = true;
        assert!(report_settings(&s, None, 1, None).timeout_adaptive);
        s.open_loop = Some(OpenLoop {
            rate_per_s: 100.0,
            schedule: crate::probe::pacing::Schedule::Fixed,
            max_outstanding: 10,
        });
        assert!(!report_settings(&s, None, 1, None).timeout_adaptive);
        s.open_loop = None;
        s.test = TestKind::TcpRr;
        let r = report_settings(&s, None, 1, Some("bbr".into()));
        assert!(!r.timeout_adaptive);
        assert_eq!((r.timeout_ms, r.congestion.as_deref()), (None, Some("bbr")));
    }
}
