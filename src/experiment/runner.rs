//! The one trial runner every lab experiment runs on. It owns what they share: the
//! results directory and resuming it, the plan (every cell × `--trials` repeats in a
//! seeded random order, as seed 001's script shuffled its trials, so drift in the host
//! spreads over the cells instead of biasing the last ones), where trials run (set up
//! only when a trial is left to do), interrupts, progress and the final report. A
//! resumed run does again the trials that failed (their records move to failed.jsonl).
//! An experiment supplies its cells, how to run one trial, and how to report.

use super::ExperimentError;
use crate::results::{ResultsDir, ResultsError};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt::Debug;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// One experiment, as the runner drives it.
pub trait Experiment {
    /// Its name in `run.json`.
    const NAME: &'static str;
    /// A point of the plan: what tells trials apart, apart from their repeat number.
    type Cell: Clone + PartialEq + Debug;
    /// A line of `trials.jsonl` (a failed trial is a record holding its error).
    type Record: Serialize + DeserializeOwned;
    /// Where trials run: the lab and its server, or this host and a remote server.
    type Testbed;

    /// What `run.json` records of the settings (a rerun with the same ones resumes).
    type Settings: Serialize;

    /// The settings `run.json` records.
    fn settings(&self) -> &Self::Settings;
    /// Every cell, in a fixed order (the shuffle is over this order).
    fn cells(&self) -> Vec<Self::Cell>;
    /// Repeats of each cell and the seed of their order (`--trials`, `--seed`).
    fn repeats(&self) -> crate::results::Repeats;
    /// The cell and repeat number a recorded trial belongs to.
    fn key(&self, r: &Self::Record) -> (Self::Cell, u32);
    /// Whether [`Experiment::testbed`] builds a lab (and so needs root): checked
    /// before the results directory is made, so a run refused for privilege leaves
    /// nothing behind.
    fn builds_a_lab(&self) -> bool {
        true
    }
    /// Set up where the trials run.
    ///
    /// # Errors
    /// The lab, the server or the journal could not be set up.
    fn testbed(&self) -> Result<Self::Testbed, ExperimentError>;
    /// Run one trial.
    ///
    /// # Errors
    /// Only what stops the whole run (a results file that cannot be written); a trial
    /// that fails is a record with its error.
    fn trial(
        &self,
        testbed: &Self::Testbed,
        cell: &Self::Cell,
        trial: u32,
        ctx: &TrialContext<'_>,
    ) -> Result<Self::Record, ExperimentError>;
    /// One line on what a trial found, for the progress line.
    fn describe(&self, r: &Self::Record) -> String;
    /// How long one trial measures, when known (for a countdown).
    fn trial_length(&self) -> Option<Duration> {
        None
    }
    /// The trial failed (its error is in the record).
    fn failed(&self, r: &Self::Record) -> bool;
    /// Write the tables, charts and report of every record into `out`; returns the
    /// tables' text.
    ///
    /// # Errors
    /// A file could not be read or written.
    fn report(&self, out: &Path, records: &[Self::Record]) -> Result<String, ResultsError>;
}

/// What a trial may use besides its testbed.
pub struct TrialContext<'a> {
    /// The results directory (trials write their sample files here).
    pub out: &'a Path,
    /// Set by Ctrl-C: a long trial should end early and keep what it measured.
    pub interrupt: &'a AtomicBool,
    /// The trial's position in this run (0, 1, …), for per-trial ports.
    pub index: usize,
}

/// Where a run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Building the testbed (the lab, servers, knobs).
    Setup,
    /// A trial starts (`done` trials are done).
    Trial,
    /// A trial ended (`last` says what it found).
    Done,
    /// Writing the tables and the report.
    Report,
}

/// What the runner reports as it goes.
pub struct Progress {
    /// What the run is doing now.
    pub phase: Phase,
    /// Trials done, this run's and earlier runs' of the same directory.
    pub done: usize,
    /// Trials in the plan.
    pub total: usize,
    /// Time left at the pace of this run's trials so far.
    pub eta: Duration,
    /// [`Experiment::describe`] of the last trial done.
    pub last: String,
    /// [`Experiment::trial_length`].
    pub trial_length: Option<Duration>,
}

/// A finished (or interrupted) run.
pub struct Outcome<R> {
    /// Every trial of the directory, earlier runs' included.
    pub records: Vec<R>,
    /// The tables' text.
    pub text: String,
    /// Trials whose record holds an error.
    pub failed: usize,
    /// Ctrl-C ended the run before its plan did.
    pub interrupted: bool,
}

/// Every (cell, repeat) in the seeded order: a Fisher–Yates shuffle of
/// `cells × 0..trials` (cell-major), so a given seed always gives the same order.
pub fn plan<C: Clone>(cells: &[C], trials: u32, seed: u64) -> Vec<(C, u32)> {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    let mut v: Vec<(C, u32)> = cells
        .iter()
        .flat_map(|c| (0..trials).map(move |k| (c.clone(), k)))
        .collect();
    v.shuffle(&mut rand::rngs::SmallRng::seed_from_u64(seed));
    v
}

/// Run `e` into `out` (resuming what it holds), calling `progress` after each trial and
/// stopping early when `interrupt` is set; then write its report.
///
/// # Errors
/// The results directory or the testbed could not be set up, or a record could not be
/// written. Failed trials are records, not errors.
pub fn run<E: Experiment>(
    e: &E,
    out: &Path,
    facts: &serde_json::Value,
    interrupt: &AtomicBool,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Outcome<E::Record>, ExperimentError> {
    // SAFETY: geteuid cannot fail.
    if e.builds_a_lab() && unsafe { libc::geteuid() } != 0 {
        return Err(crate::lab::LabError::NotRoot.into());
    }
    let settings =
        serde_json::to_value(e.settings()).map_err(crate::results::json(&out.join("run.json")))?;
    let (mut dir, all) = ResultsDir::open::<E::Record>(out, E::NAME, &settings, facts)?;
    // A trial that failed (its error is in its record) is done again: its record moves
    // to failed.jsonl.
    let (mut records, failed): (Vec<_>, Vec<_>) = all.into_iter().partition(|r| !e.failed(r));
    dir.set_aside(&records, &failed)?;
    let done: Vec<(E::Cell, u32)> = records.iter().map(|r| e.key(r)).collect();
    let todo: Vec<(E::Cell, u32)> = plan(&e.cells(), e.repeats().trials, e.repeats().seed)
        .into_iter()
        .filter(|t| !done.contains(t))
        .collect();
    let total = todo.len();
    let mut last = String::new();
    let mut tell = |phase, done, eta, last: &str| {
        progress(&Progress {
            phase,
            done,
            total,
            eta,
            last: last.to_string(),
            trial_length: e.trial_length(),
        });
    };
    if total > 0 && !interrupt.load(Ordering::Acquire) {
        tell(Phase::Setup, 0, Duration::ZERO, "");
        let testbed = e.testbed()?;
        let t0 = Instant::now();
        for (index, (cell, k)) in todo.into_iter().enumerate() {
            if interrupt.load(Ordering::Acquire) {
                break;
            }
            let per = t0.elapsed() / (index as u32).max(1);
            tell(Phase::Trial, index, per * (total - index) as u32, &last);
            let ctx = TrialContext {
                out,
                interrupt,
                index,
            };
            let r = e.trial(&testbed, &cell, k, &ctx)?;
            dir.record(&r)?;
            let per = t0.elapsed() / (index as u32 + 1);
            last = e.describe(&r);
            tell(
                Phase::Done,
                index + 1,
                per * (total - index - 1) as u32,
                &last,
            );
            records.push(r);
        }
    }
    tell(Phase::Report, records.len(), Duration::ZERO, &last);
    let text = e.report(out, &records)?;
    Ok(Outcome {
        failed: records.iter().filter(|r| e.failed(r)).count(),
        interrupted: interrupt.load(Ordering::Acquire),
        records,
        text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn plan_covers_every_cell_and_repeat_once_in_a_seeded_order() {
        let cells: Vec<u32> = (0..12).collect();
        let p = plan(&cells, 3, 1);
        assert_eq!(p.len(), 36);
        let mut q = p.clone();
        q.sort();
        q.dedup();
        assert_eq!(q.len(), 36);
        assert_eq!(p, plan(&cells, 3, 1));
        assert_ne!(p, plan(&cells, 3, 2));
        assert_ne!(p, q, "shuffled, not in cell order");
    }

    /// A made-up experiment: cells 0..4, each trial records (cell, repeat, failed);
    /// the trials in `failing` fail once; the `stop_after`-th trial of its first run
    /// sets the interrupt.
    struct Counting {
        ran: RefCell<Vec<(u32, u32)>>,
        benches: RefCell<u32>,
        stop_after: RefCell<Option<usize>>,
        failing: RefCell<Vec<(u32, u32)>>,
        settings: serde_json::Value,
    }

    impl Experiment for Counting {
        const NAME: &'static str = "counting";
        type Cell = u32;
        type Record = (u32, u32, bool);
        type Testbed = ();
        type Settings = serde_json::Value;
        fn settings(&self) -> &serde_json::Value {
            &self.settings
        }
        fn cells(&self) -> Vec<u32> {
            (0..4).collect()
        }
        fn repeats(&self) -> crate::results::Repeats {
            crate::results::Repeats { trials: 2, seed: 7 }
        }
        fn key(&self, r: &(u32, u32, bool)) -> (u32, u32) {
            (r.0, r.1)
        }
        fn builds_a_lab(&self) -> bool {
            false
        }
        fn testbed(&self) -> Result<(), ExperimentError> {
            *self.benches.borrow_mut() += 1;
            Ok(())
        }
        fn trial(
            &self,
            (): &(),
            cell: &u32,
            k: u32,
            ctx: &TrialContext<'_>,
        ) -> Result<(u32, u32, bool), ExperimentError> {
            self.ran.borrow_mut().push((*cell, k));
            if *self.stop_after.borrow() == Some(ctx.index + 1) {
                self.stop_after.borrow_mut().take();
                ctx.interrupt.store(true, Ordering::Release);
            }
            let mut failing = self.failing.borrow_mut();
            let fails = failing.contains(&(*cell, k));
            failing.retain(|&x| x != (*cell, k));
            Ok((*cell, k, fails))
        }
        fn describe(&self, r: &(u32, u32, bool)) -> String {
            format!("{r:?}")
        }
        fn failed(&self, r: &(u32, u32, bool)) -> bool {
            r.2
        }
        fn report(&self, _: &Path, records: &[(u32, u32, bool)]) -> Result<String, ResultsError> {
            Ok(format!("{} records", records.len()))
        }
    }

    /// Witness: the trials.jsonl and failed.jsonl the runner wrote, read back, and the
    /// made-up experiment's own log of what it ran.
    #[test]
    fn an_interrupted_run_resumes_where_it_stopped_and_redoes_only_failed_trials() {
        let dir = tempfile::tempdir().unwrap();
        let plan = plan(&(0..4).collect::<Vec<u32>>(), 2, 7);
        let e = Counting {
            ran: RefCell::default(),
            benches: RefCell::default(),
            stop_after: RefCell::new(Some(3)),
            // The first and the fifth trial of the plan fail once.
            failing: RefCell::new(vec![plan[0], plan[4]]),
            settings: serde_json::json!({"cells": 4, "trials": 2}),
        };
        let stop = AtomicBool::new(false);
        let mut seen = Vec::new();
        let o = run(&e, dir.path(), &serde_json::json!({}), &stop, &mut |p| {
            if p.phase == Phase::Done {
                seen.push((p.done, p.total));
            }
        })
        .unwrap();
        assert!(o.interrupted);
        assert_eq!((o.records.len(), o.failed), (3, 1));
        assert_eq!(seen, vec![(1, 8), (2, 8), (3, 8)]);
        assert_eq!(o.text, "3 records");
        let stop = AtomicBool::new(false);
        let o = run(&e, dir.path(), &serde_json::json!({}), &stop, &mut |_| {}).unwrap();
        assert!(!o.interrupted);
        // plan[0] done again; plan[4] failed in this run, recorded with its error.
        assert_eq!((o.records.len(), o.failed), (8, 1));
        let o = run(&e, dir.path(), &serde_json::json!({}), &stop, &mut |_| {}).unwrap();
        assert_eq!((o.records.len(), o.failed), (8, 0));
        let ran = e.ran.borrow().clone();
        // The planned order, each run doing first what failed before.
        assert_eq!(ran[..3], plan[..3]);
        assert_eq!(ran[3], plan[0]);
        assert_eq!(ran[4..9], plan[3..]);
        assert_eq!(ran[9..], [plan[4]]);
        let on_disk: Vec<(u32, u32, bool)> = crate::results::read_trials(dir.path()).unwrap();
        assert_eq!(on_disk.len(), 8);
        assert!(on_disk.iter().all(|r| !r.2));
        let failed = std::fs::read_to_string(dir.path().join("failed.jsonl")).unwrap();
        assert_eq!(failed.lines().count(), 2, "{failed}");
        // A fourth run has nothing to do and sets up no testbed.
        let benches = *e.benches.borrow();
        let o = run(&e, dir.path(), &serde_json::json!({}), &stop, &mut |_| {}).unwrap();
        assert_eq!((o.records.len(), *e.benches.borrow()), (8, benches));
    }
}
