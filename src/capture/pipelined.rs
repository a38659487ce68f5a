//! A regular capture file read on a thread of its own. Finding, checking and filtering
//! the records is about half of a passive run over a large capture (perf record on
//! 2.6 M packets: the mapped reader's first touch of each page, the record headers,
//! the link types), the engine the other half; here a second core reads the next batch
//! while the caller's engine works on this one. The caller is handed exactly what
//! [`super::Capture::read`] on the file would give it — the same frames, in the same
//! batches, then the same end or the same error after the same frames — so what an
//! engine makes of them cannot differ from one core's.
//!
//! The file is opened on the reading thread (its reader never crosses threads) and the
//! opening's outcome comes back before [`Pipelined::open`] returns, as a direct open's
//! would. Frames are copied out of the file a batch at a time into buffers the engine
//! hands back; the reader is at most [`AHEAD`] batches ahead, and stops once the
//! engine has gone.

use crate::wire::LinkType;
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::thread::JoinHandle;

/// Batches the reader may have ready before the engine takes them.
const AHEAD: usize = 2;

/// One batch's frames, copied end to end, with where each ends.
#[derive(Default)]
struct Frames {
    bytes: Vec<u8>,
    /// (timestamp ns, link type, end of the frame in `bytes`).
    index: Vec<(u64, LinkType, usize)>,
}

/// A file being read ahead on its own thread; `O` is what each of its reads returns.
pub(super) struct Pipelined<O> {
    /// The batch size, sent once: the first read's `max`.
    size: Option<SyncSender<usize>>,
    /// `None` once the file has ended, failed, or its reader is gone.
    batches: Option<Receiver<(Frames, O)>>,
    spent: Sender<Frames>,
    reader: Option<JoinHandle<()>>,
    /// Whether a read's outcome says more may follow.
    more: fn(&O) -> bool,
}

/// A reader's one read: up to `max` frames to the function, then the read's outcome.
type ReadFn<R, O> = dyn FnMut(&mut R, usize, &mut dyn FnMut(u64, LinkType, &[u8])) -> O + Send;

impl<O: Send + 'static> Pipelined<O> {
    /// `open` the file on a reading thread and `read` it there, batch after batch, until
    /// an outcome is not `more`. The opening's error is returned as it is.
    ///
    /// # Errors
    /// The thread could not be started (outer), or `open` failed (inner).
    pub(super) fn open<R: 'static, E: Send + 'static>(
        open: impl FnOnce() -> Result<R, E> + Send + 'static,
        mut read: Box<ReadFn<R, O>>,
        more: fn(&O) -> bool,
    ) -> std::io::Result<Result<Self, E>> {
        let (opened_tx, opened) = mpsc::sync_channel::<Result<(), E>>(1);
        let (size, size_rx) = mpsc::sync_channel::<usize>(1);
        let (tx, batches) = mpsc::sync_channel::<(Frames, O)>(AHEAD);
        let (spent, recycled) = mpsc::channel::<Frames>();
        let reader = std::thread::Builder::new()
            .name("rttlab-read".into())
            .spawn(move || {
                let mut file = match open() {
                    Ok(file) => {
                        let _ = opened_tx.send(Ok(()));
                        file
                    }
                    Err(e) => {
                        let _ = opened_tx.send(Err(e));
                        return;
                    }
                };
                let Ok(max) = size_rx.recv() else { return };
                loop {
                    let mut frames = recycled.try_recv().unwrap_or_default();
                    frames.bytes.clear();
                    frames.index.clear();
                    let got = read(&mut file, max, &mut |ts, link, frame| {
                        frames.bytes.extend_from_slice(frame);
                        frames.index.push((ts, link, frames.bytes.len()));
                    });
                    let last = !more(&got);
                    if tx.send((frames, got)).is_err() || last {
                        return;
                    }
                }
            })?;
        let mut p = Self {
            size: Some(size),
            batches: Some(batches),
            spent,
            reader: Some(reader),
            more,
        };
        Ok(match opened.recv() {
            Ok(Ok(())) => Ok(p),
            Ok(Err(e)) => Err(e),
            // The reader panicked while opening: its panic is this thread's.
            Err(_) => {
                p.rethrow();
                unreachable!("a reader that stopped without a word panicked")
            }
        })
    }

    /// The next batch, `max` packets at most (the first read's `max` sets every
    /// batch's), handed to `f` as the reader read them, and that read's outcome;
    /// `None` after the outcome that said no more.
    pub(super) fn read(
        &mut self,
        max: usize,
        f: &mut dyn FnMut(u64, LinkType, &[u8]),
    ) -> Option<O> {
        if let Some(size) = self.size.take() {
            let _ = size.send(max);
        }
        let batches = self.batches.as_ref()?;
        let Ok((frames, got)) = batches.recv() else {
            self.rethrow();
            unreachable!("a reader that stopped without a word panicked")
        };
        let mut start = 0;
        for &(ts, link, end) in &frames.index {
            f(ts, link, &frames.bytes[start..end]);
            start = end;
        }
        let _ = self.spent.send(frames);
        if !(self.more)(&got) {
            self.batches = None;
        }
        Some(got)
    }

    /// The reader stopped without saying how: it panicked, and so does this thread.
    fn rethrow(&mut self) {
        self.batches = None;
        if let Some(Err(panic)) = self.reader.take().map(JoinHandle::join) {
            std::panic::resume_unwind(panic);
        }
    }
}

impl<O> Drop for Pipelined<O> {
    /// The engine is gone: a reader waiting for the batch size or for room in the
    /// queue sees its channel closed and ends; then it is joined.
    fn drop(&mut self) {
        self.size = None;
        self.batches = None;
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}
