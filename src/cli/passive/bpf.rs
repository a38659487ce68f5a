//! The in-kernel engine's run: loaded, attached to the interface (or fed a file's
//! frames), drained and swept until the run ends.

use super::out::{write_failed, Out, SharedOut};
use super::{listening_place, say_now, usage_or, AttachArg, Ended, Notes, PassiveArgs};
use anyhow::bail;
use rttlab::capture::{self, Batch, Capture, Source};
use rttlab::kernel::passive_bpf::{Aggregation, AttachMode, Framing, PassiveBpfError};
use rttlab::passive::in_kernel::{Engine as Kernel, Options};
use rttlab::passive::{aggregate, live, Config};
use rttlab::report::passive as render;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How an in-kernel run went: to its end, or not started because the engine could not
/// load or attach (for [`live::fall_back`] to judge).
pub(super) enum BpfRun {
    Ended(Box<Ended>),
    Unstarted(PassiveBpfError),
}

/// The in-kernel engine: attached to the interface, or run on a file's frames.
pub(super) fn run_bpf(
    a: &PassiveArgs,
    mut cfg: Config,
    out: &mut Out<SharedOut>,
    stop: &AtomicBool,
    stage: &crate::cli::Stage,
) -> anyhow::Result<BpfRun> {
    let live = a.interface.as_deref();
    let facts = match live {
        Some(name) => Some(capture::live::interface_facts(name, a.netns.as_deref())?),
        None => None,
    };
    if cfg.local.is_empty() {
        cfg.local = facts
            .as_ref()
            .map(|f| f.addresses.clone())
            .unwrap_or_default();
    }
    let (v4, v6) = a.aggregate_prefix;
    let bounds = aggregate::bounds(&[]);
    let options = Options {
        // Samples come up only when something here reads them.
        events: out.lines.is_some() || out.summary.is_some() || out.intervals.is_some(),
        flow_events: a.summary,
        aggregate: a.aggregate.map(|_| Aggregation {
            prefix_v4: v4,
            prefix_v6: v6,
            bounds_ns: bounds.clone(),
            watched_only: false,
        }),
        max_pending: a.max_pending,
        ..Options::default()
    };
    let framing = match &facts {
        Some(f) if f.link != rttlab::wire::LinkType::Ethernet => Framing::Ip,
        _ => Framing::Ethernet,
    };
    // A file that cannot be read is a set-up error (2), found before anything loads.
    let file = match live {
        Some(_) => None,
        None => Some(capture::open(
            &Source::File(a.read.as_deref().unwrap_or("-").into()),
            capture::Options::default(),
        )?),
    };
    let mut k = match Kernel::load(&cfg, &options, framing) {
        Ok(k) => k,
        Err(e) => return Ok(BpfRun::Unstarted(e)),
    };
    let where_ = match (live, &facts) {
        (Some(name), Some(f)) => match attach(a, &mut k, name, f.loopback) {
            Ok(mode) => format!("{} on {name}", mode.name()),
            Err(e) => return Ok(BpfRun::Unstarted(e)),
        },
        _ => "replaying the file".to_owned(),
    };
    stage.measuring();
    let failure = match file {
        Some(cap) => replay_file(a, &mut k, cap, out, &bounds)?,
        None => run_live(a, &mut k, out, stop, &bounds)?,
    };
    let (counters, kernel) = k.counters()?;
    let mut notes = Notes::default();
    notes.lines.push(render::kernel_counters(&kernel, &where_));
    Ok(BpfRun::Ended(Box::new(Ended {
        counters,
        notes,
        failure,
    })))
}

/// Attach the loaded programs to interface `name` as `--attach` asks, journaled so
/// that `rttlab tune revert --all` removes a clsact filter a crash left, and say so.
fn attach(
    a: &PassiveArgs,
    k: &mut Kernel,
    name: &str,
    loopback: bool,
) -> Result<AttachMode, PassiveBpfError> {
    let mode = match a.attach {
        AttachArg::Auto => None,
        AttachArg::Tcx => Some(AttachMode::Tcx),
        AttachArg::Clsact => Some(AttachMode::Clsact),
    };
    let journal = rttlab::kernel::tuning::Journal::for_run("passive");
    let netns = a.netns.as_deref();
    let mode = k.attach(name, netns, mode, loopback, Box::new(journal))?;
    say_now(&format!(
        "listening on {}, in-kernel engine ({})",
        listening_place(name, netns),
        mode.name()
    ));
    Ok(mode)
}

/// A file's frames run through the programs one by one (`BPF_PROG_TEST_RUN`),
/// `--aggregate` intervals cut in capture time as the ring engine cuts them. The
/// run's failure, if the replay or the file failed part way.
fn replay_file(
    a: &PassiveArgs,
    k: &mut Kernel,
    mut cap: Capture,
    out: &mut Out<SharedOut>,
    bounds: &[u64],
) -> anyhow::Result<Option<anyhow::Error>> {
    let agg_len = a.aggregate.map(rttlab::stats::units::ns);
    let mut failure = None;
    let mut seen = 0u64;
    let mut agg_start: Option<u64> = None;
    let mut replay_err = None;
    loop {
        let batch = cap.read(Duration::from_millis(100), 4096, &mut |ts, link, frame| {
            if a.count.is_some_and(|c| seen >= c) || replay_err.is_some() {
                return;
            }
            if let Some(len) = agg_len {
                let start = *agg_start.get_or_insert(ts - ts % len);
                if ts >= start + len {
                    if let Err(e) = write_interval(out, k, bounds, (start, start + len), true) {
                        replay_err = Some(e);
                    }
                    agg_start = Some(ts - ts % len);
                }
            }
            seen += 1;
            if let Err(e) = k.replay(link, frame, ts) {
                replay_err = Some(e);
            }
            if seen % 2048 == 0 {
                k.drain(out);
            }
        });
        k.drain(out);
        if let Some(e) = out.error.take() {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return write_failed(e);
            }
            bail!("writing samples: {e}");
        }
        if let Some(e) = replay_err.take() {
            failure = Some(e.into());
            break;
        }
        match batch {
            Ok(Batch::More(_)) if a.count.is_none_or(|c| seen < c) => {}
            Ok(_) => break,
            Err(e) => {
                failure = Some(usage_or(e));
                break;
            }
        }
    }
    if let Err(e) = k.finish(out) {
        failure.get_or_insert(e.into());
    }
    if let (Some(start), Some(len)) = (agg_start, agg_len) {
        write_interval(out, k, bounds, (start, start + len), false)?;
    }
    Ok(failure)
}

/// The attached programs' samples drained, flows swept and `--aggregate` intervals
/// cut on [`live::Schedule`]'s clock until Ctrl-C or `--duration`. The run's failure,
/// if a sweep failed.
fn run_live(
    a: &PassiveArgs,
    k: &mut Kernel,
    out: &mut Out<SharedOut>,
    stop: &AtomicBool,
    bounds: &[u64],
) -> anyhow::Result<Option<anyhow::Error>> {
    let mut failure = None;
    let t0 = Instant::now();
    let mut schedule = live::Schedule::new(
        t0,
        rttlab::kernel::realtime_ns(),
        a.idle_timeout,
        a.max_age,
        a.aggregate,
    );
    while !stop.load(Ordering::Acquire) && a.seconds.is_none_or(|s| t0.elapsed() < s) {
        k.wait(Duration::from_millis(100));
        k.drain(out);
        let now_ns = rttlab::kernel::realtime_ns();
        out.tick(now_ns);
        out.flush_lines();
        let due = schedule.poll(Instant::now(), now_ns);
        if let Some(what) = due.sweep {
            if let Err(e) = k.sweep(what) {
                failure = Some(e.into());
                break;
            }
        }
        if let Some(interval) = due.interval {
            write_interval(out, k, bounds, interval, true)?;
        }
        if let Some(e) = out.error.take() {
            // Quietly, as the ring does; the programs are detached when `k` drops on
            // the way out (a clsact filter would outlive the process).
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return write_failed(e);
            }
            bail!("writing samples: {e}");
        }
    }
    if let Err(e) = k.finish(out) {
        failure.get_or_insert(e.into());
    }
    if let Some(last) = schedule.last_interval(rttlab::kernel::realtime_ns()) {
        write_interval(out, k, bounds, last, false)?;
    }
    Ok(failure)
}

/// The kernel's histograms since `start_ns`, written as one `--aggregate` interval
/// (an empty one only when `keep_empty`: the last, partial interval is written only
/// if something came).
fn write_interval(
    out: &mut Out<SharedOut>,
    k: &mut Kernel,
    bounds: &[u64],
    (start_ns, end_ns): (u64, u64),
    keep_empty: bool,
) -> Result<(), PassiveBpfError> {
    let rows = k.take_aggregates(bounds.len())?;
    if keep_empty || !rows.is_empty() {
        out.aggregated(
            Some(aggregate::Interval {
                start_ns,
                end_ns,
                rows,
            }),
            bounds,
            "bpf",
        );
    }
    Ok(())
}
