//! Where `rttlab passive`'s output goes: sample lines, interval summaries, `--aggregate`
//! intervals and the end's summary, on one buffered standard output.

use rttlab::passive::summary::{Interval, IntervalSummary, Summary};
use rttlab::passive::{aggregate, Sample, Sink};
use rttlab::report::passive::{self as render, LineWriter};
use std::cell::RefCell;
use std::io::{BufWriter, Write};
use std::rc::Rc;

/// Standard output, shared by the sample lines and the input reader: the reader flushes
/// the lines before every read that may wait (a pipe, stdin), so a stream's samples
/// leave as they are made, while a fast input still writes them in 64 KiB blocks.
#[derive(Clone)]
pub(super) struct SharedOut(pub(super) Rc<RefCell<BufWriter<std::io::StdoutLock<'static>>>>);

impl Write for SharedOut {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.0.borrow_mut().write_all(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.borrow_mut().flush()
    }
}

/// Sample lines, interval summaries, per-prefix histograms, summary and histograms at
/// once.
pub(super) struct Out<W: Write> {
    pub(super) lines: Option<LineWriter<W>>,
    pub(super) summary: Option<Summary>,
    /// `--summary-interval`: the intervals, where they go, and whether as JSON lines.
    pub(super) intervals: Option<(IntervalSummary, SharedOut, bool)>,
    /// `--aggregate` in user space (the ring engine, files): the intervals.
    pub(super) aggregate: Option<aggregate::Intervals>,
    /// Where `--aggregate`'s intervals go (either engine), and whether as JSON lines.
    pub(super) aggregate_out: Option<(SharedOut, bool)>,
    pub(super) error: Option<std::io::Error>,
}

impl<W: Write> Out<W> {
    /// Write a finished interval (keeping the first error).
    pub(super) fn interval(&mut self, iv: Option<Interval>) {
        let (Some(iv), Some((_, out, json))) = (iv, self.intervals.as_mut()) else {
            return;
        };
        let text = if *json {
            render::interval_json(&iv)
        } else {
            let mut t = String::new();
            let _ = render::interval(&mut t, &iv);
            t + "\n"
        };
        if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            self.error.get_or_insert(e);
        }
    }

    /// Write a finished `--aggregate` interval (keeping the first error).
    pub(super) fn aggregated(
        &mut self,
        iv: Option<aggregate::Interval>,
        bounds: &[u64],
        engine: &str,
    ) {
        let (Some(iv), Some((out, json))) = (iv, self.aggregate_out.as_mut()) else {
            return;
        };
        let text = if *json {
            render::aggregate_interval_json(&iv, bounds, engine)
        } else {
            let mut t = String::new();
            let _ = render::aggregate_interval(&mut t, &iv, bounds, engine);
            t + "\n"
        };
        if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            self.error.get_or_insert(e);
        }
    }

    /// The capture clock reads `now_ns` (a live capture that may be quiet).
    pub(super) fn tick(&mut self, now_ns: u64) {
        let done = self
            .intervals
            .as_mut()
            .and_then(|(iv, _, _)| iv.tick(now_ns));
        self.interval(done);
        if let Some(agg) = self.aggregate.as_mut() {
            let done = agg.tick(now_ns);
            let bounds = agg.bounds().to_vec();
            self.aggregated(done, &bounds, "ring");
        }
    }

    /// What a batch made goes out now, not when 64 KiB piled up.
    pub(super) fn flush_lines(&mut self) {
        if let Some(l) = self.lines.as_mut() {
            if let Err(e) = l.flush() {
                self.error.get_or_insert(e);
            }
        }
    }
}

impl<W: Write> Sink for Out<W> {
    fn sample(&mut self, s: &Sample) {
        if let (Some(l), None) = (self.lines.as_mut(), self.error.as_ref()) {
            if let Err(e) = l.write(s) {
                self.error = Some(e);
            }
        }
        if let Some(x) = self.summary.as_mut() {
            x.sample(s);
        }
        let done = self.intervals.as_mut().and_then(|(iv, _, _)| iv.sample(s));
        if done.is_some() {
            // The lines of this interval first, then its summary.
            if let Some(l) = self.lines.as_mut() {
                let _ = l.flush();
            }
            self.interval(done);
        }
        if let Some(agg) = self.aggregate.as_mut() {
            let done = agg.sample(s);
            if done.is_some() {
                let bounds = agg.bounds().to_vec();
                self.aggregated(done, &bounds, "ring");
            }
        }
    }
    fn flow_done(&mut self, f: &rttlab::passive::flow::FlowEnd) {
        if let Some(x) = self.summary.as_mut() {
            x.flow_done(f);
        }
    }
}

/// A write to stdout failed: the run ends. A closed stdout (`| head`) ends it quietly
/// with status 0 (`main` finds the broken pipe in the error's chain); other write
/// errors are errors.
pub(super) fn write_failed<T>(e: std::io::Error) -> anyhow::Result<T> {
    Err(anyhow::Error::new(e).context("writing samples"))
}

/// `fmt::Write` onto an `io::Write`, keeping the first I/O error (`fmt::Error` has
/// no room for it).
pub(super) struct FmtIo<W: Write> {
    pub(super) w: W,
    pub(super) error: Option<std::io::Error>,
}

impl<W: Write> std::fmt::Write for FmtIo<W> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.w.write_all(s.as_bytes()).map_err(|e| {
            self.error = Some(e);
            std::fmt::Error
        })
    }
}
