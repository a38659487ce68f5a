//! `--hdr-log FILE`: the standard HdrHistogram interval log (as written by the Java
//! `HistogramLogWriter`), so HistogramLogProcessor, HdrHistogramVisualizer and friends
//! read our runs.
//!
//! Each measuring thread owns an [`IntervalRecorder`] that ships one histogram per
//! interval to the [`HdrLogWriter`] thread. The writer merges the streams' histograms of
//! the same interval and writes an interval as soon as every live stream has moved past
//! it, so memory stays bounded however long the run is.

use super::MAX_TRACKABLE_NS;
use hdrhistogram::serialization::interval_log::IntervalLogWriterBuilder;
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::Histogram;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

enum Msg {
    Interval {
        stream: usize,
        index: u64,
        hist: Box<Histogram<u64>>,
    },
    StreamDone {
        stream: usize,
    },
}

/// Records samples of one stream into per-interval histograms.
pub struct IntervalRecorder {
    stream: usize,
    start: Instant,
    interval: Duration,
    index: u64,
    next_boundary: Instant,
    hist: Histogram<u64>,
    tx: Sender<Msg>,
}

impl IntervalRecorder {
    /// Record a sample taken at `now`.
    #[inline]
    pub fn record(&mut self, now: Instant, ns: u64) {
        if now >= self.next_boundary {
            self.roll(now);
        }
        self.hist.saturating_record(ns.clamp(1, MAX_TRACKABLE_NS));
    }

    fn roll(&mut self, now: Instant) {
        self.flush();
        let elapsed = now.saturating_duration_since(self.start);
        self.index = (elapsed.as_nanos() / self.interval.as_nanos().max(1)) as u64;
        self.next_boundary = self.start
            + self
                .interval
                .saturating_mul(u32::try_from(self.index + 1).unwrap_or(u32::MAX));
    }

    fn flush(&mut self) {
        if self.hist.is_empty() {
            return;
        }
        let hist = Box::new(self.hist.clone());
        self.hist.reset();
        let _ = self.tx.send(Msg::Interval {
            stream: self.stream,
            index: self.index,
            hist,
        });
    }
}

impl Drop for IntervalRecorder {
    fn drop(&mut self) {
        self.flush();
        let _ = self.tx.send(Msg::StreamDone {
            stream: self.stream,
        });
    }
}

/// The writer thread of one interval log.
pub struct HdrLogWriter {
    tx: Option<Sender<Msg>>,
    handle: Option<JoinHandle<std::io::Result<()>>>,
    start: Instant,
    interval: Duration,
    streams: usize,
    handed_out: usize,
}

impl HdrLogWriter {
    /// Start the writer into `file` (created by the caller: `kernel::fs::create_replace`
    /// makes one a symlink cannot redirect) for `streams` recorders, one interval every
    /// `interval`. `comment` (the run's settings) goes into the log's header.
    ///
    /// # Errors
    /// The writer thread cannot be started.
    pub fn start(
        file: File,
        streams: usize,
        interval: Duration,
        comment: &str,
    ) -> std::io::Result<Self> {
        let (tx, rx) = channel();
        let start = Instant::now();
        let wall = SystemTime::now();
        let comment = comment.to_owned();
        let handle = std::thread::Builder::new()
            .name("hdr-log".into())
            .spawn(move || {
                write_log(BufWriter::new(file), rx, streams, interval, wall, &comment)
            })?;
        Ok(Self {
            tx: Some(tx),
            handle: Some(handle),
            start,
            interval,
            streams,
            handed_out: 0,
        })
    }

    /// The recorder for the next stream. Call exactly `streams` times.
    pub fn recorder(&mut self) -> IntervalRecorder {
        let stream = self.handed_out;
        self.handed_out += 1;
        debug_assert!(stream < self.streams);
        IntervalRecorder {
            stream,
            start: self.start,
            interval: self.interval,
            index: 0,
            next_boundary: self.start + self.interval,
            hist: Histogram::new_with_bounds(1, MAX_TRACKABLE_NS, 3).expect("constant bounds"),
            tx: self.tx.clone().expect("writer is open"),
        }
    }

    /// Wait for every recorder to be dropped and the file to be written.
    ///
    /// # Errors
    /// Writing the file failed.
    pub fn finish(mut self) -> std::io::Result<()> {
        self.tx.take();
        match self.handle.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(std::io::Error::other("hdr log writer thread panicked")),
            None => Ok(()),
        }
    }
}

fn write_log(
    mut out: BufWriter<File>,
    rx: Receiver<Msg>,
    streams: usize,
    interval: Duration,
    wall_start: SystemTime,
    comment: &str,
) -> std::io::Result<()> {
    let mut ser = V2DeflateSerializer::new();
    let io_err = |e| std::io::Error::other(format!("{e:?}"));
    {
        let mut b = IntervalLogWriterBuilder::new();
        b.add_comment("rttlab round-trip times, values in nanoseconds");
        for line in comment.lines() {
            b.add_comment(line);
        }
        b.with_start_time(wall_start)
            .with_base_time(wall_start)
            .with_max_value_divisor(1000.0);
        b.begin_log_with(&mut out, &mut ser)?;
        out.write_all(b"\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n")?;
    }
    let mut pending: BTreeMap<u64, Histogram<u64>> = BTreeMap::new();
    let mut last: Vec<Option<u64>> = vec![None; streams];
    let mut done = vec![false; streams];
    let mut write_upto = |pending: &mut BTreeMap<u64, Histogram<u64>>,
                          limit: Option<u64>,
                          out: &mut BufWriter<File>|
     -> std::io::Result<()> {
        while let Some((&idx, _)) = pending.first_key_value() {
            if limit.is_some_and(|l| idx >= l) {
                break;
            }
            let (_, h) = pending.pop_first().expect("non-empty");
            let mut w = IntervalLogWriterBuilder::new().begin_log_with(&mut *out, &mut ser)?;
            w.write_histogram(
                &h,
                interval.saturating_mul(u32::try_from(idx).unwrap_or(u32::MAX)),
                interval,
                None,
            )
            .map_err(io_err)?;
        }
        Ok(())
    };
    for msg in rx {
        match msg {
            Msg::Interval {
                stream,
                index,
                hist,
            } => {
                if let Some(slot) = last.get_mut(stream) {
                    *slot = Some(index);
                }
                match pending.get_mut(&index) {
                    Some(h) => {
                        let _ = h.add(&*hist);
                    }
                    None => {
                        pending.insert(index, *hist);
                    }
                }
            }
            Msg::StreamDone { stream } => {
                if let Some(d) = done.get_mut(stream) {
                    *d = true;
                }
            }
        }
        // An interval is complete when every live stream has reported a later one.
        let live_min = (0..streams)
            .filter(|&s| !done[s])
            .map(|s| last[s].unwrap_or(0))
            .min();
        write_upto(&mut pending, live_min.or(Some(u64::MAX)), &mut out)?;
    }
    write_upto(&mut pending, None, &mut out)?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    use hdrhistogram::serialization::Deserializer;

    #[test]
    fn log_is_readable_and_merges_streams() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.hlog");
        let mut w = HdrLogWriter::start(
            File::create(&path).unwrap(),
            2,
            Duration::from_millis(100),
            "test: TCP_RR",
        )
        .unwrap();
        let mut a = w.recorder();
        let mut b = w.recorder();
        let t0 = w.start;
        for i in 0..10u64 {
            a.record(t0 + Duration::from_millis(i * 30), 1000 + i);
            b.record(t0 + Duration::from_millis(i * 30), 2000 + i);
        }
        drop(a);
        drop(b);
        w.finish().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("#[StartTime:"), "{text}");
        let mut total = 0;
        let mut intervals = 0;
        let mut de = Deserializer::new();
        for entry in IntervalLogIterator::new(&bytes) {
            if let Ok(LogEntry::Interval(h)) = entry {
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(h.encoded_histogram())
                    .unwrap();
                let hist: Histogram<u64> = de.deserialize(&mut &raw[..]).unwrap();
                total += hist.len();
                intervals += 1;
            }
        }
        assert_eq!(total, 20, "every sample of both streams is in the log");
        // Samples at 0..270 ms with 100 ms intervals: intervals 0, 1, 2.
        assert_eq!(intervals, 3);
    }
}
