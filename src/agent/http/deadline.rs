//! A connection whose reads and writes cannot stall for ever: a scraper that stops
//! reading its answer, or a keep-alive connection that never sends another request,
//! gets `TimedOut` once it has made no progress for its limit, and its task ends.
//!
//! hyper has a header-read deadline of its own but no write deadline, and tokio's
//! sockets have none; this wrapper sits under TLS and HTTP so that both are covered.
//! It also tells the endpoint what the client has done ([`Progress`]): when a byte
//! was last read from it, and since when a write has been waiting for it, which is
//! how a client that stopped reading is told from one being answered, and one that
//! stopped sending from one in the middle of its handshake.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{sleep, Sleep};

/// What a connection's client has done, as its reads and writes show it.
#[derive(Default)]
pub struct Progress {
    /// Since when writes have waited for the client to read (`None` while they move).
    stalled: Mutex<Option<Instant>>,
    /// When a byte was last read from the client (`None` before the first).
    heard: Mutex<Option<Instant>>,
    /// A byte has been written to the client: a TLS handshake that has had the
    /// server's reply, or an answer.
    told_any: std::sync::atomic::AtomicBool,
}

impl Progress {
    /// When the current write stall began, if writes are stalled.
    pub fn since(&self) -> Option<Instant> {
        *self
            .stalled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether any byte has been written to the client.
    pub fn told_any(&self) -> bool {
        self.told_any.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// When a byte was last read from the client, if one has been.
    pub fn heard(&self) -> Option<Instant> {
        *self
            .heard
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn set(&self, since: Option<Instant>) {
        *self
            .stalled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = since;
    }
}

/// `inner` with a stall limit on reads and one on writes.
pub struct Deadlines<T> {
    inner: T,
    read_stall: Duration,
    write_stall: Duration,
    /// Armed when a read finds nothing and cleared by any progress.
    read_timer: Option<Pin<Box<Sleep>>>,
    /// Armed when a write or flush cannot proceed and cleared by any progress.
    write_timer: Option<Pin<Box<Sleep>>>,
    /// Shown to the endpoint: since when `write_timer` has been armed.
    stall: Arc<Progress>,
}

impl<T> Deadlines<T> {
    /// Reads may wait `read_stall` for a byte, writes `write_stall` for room; a
    /// waiting write is shown in `stall`.
    pub fn new(
        inner: T,
        read_stall: Duration,
        write_stall: Duration,
        stall: Arc<Progress>,
    ) -> Self {
        Self {
            inner,
            read_stall,
            write_stall,
            read_timer: None,
            write_timer: None,
            stall,
        }
    }

    /// A write or flush finished `r`: the stall (if any) is over.
    fn wrote<R>(&mut self, r: io::Result<R>) -> Poll<io::Result<R>> {
        if self.write_timer.take().is_some() {
            self.stall.set(None);
        }
        Poll::Ready(r)
    }

    /// A write of `r` bytes finished.
    fn wrote_bytes(&mut self, r: io::Result<usize>) -> Poll<io::Result<usize>> {
        if matches!(r, Ok(1..)) {
            self.stall
                .told_any
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        self.wrote(r)
    }

    /// A write or flush must wait: arm the stall limit (showing when it began).
    fn write_waits<R>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        if self.write_timer.is_none() {
            self.stall.set(Some(Instant::now()));
        }
        stalled(&mut self.write_timer, self.write_stall, "write", cx)
    }
}

/// Pending, unless the stall limit armed in `timer` has passed.
fn stalled<R>(
    timer: &mut Option<Pin<Box<Sleep>>>,
    limit: Duration,
    what: &str,
    cx: &mut Context<'_>,
) -> Poll<io::Result<R>> {
    let t = timer.get_or_insert_with(|| Box::pin(sleep(limit)));
    match t.as_mut().poll(cx) {
        Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no {what} progress for {} s", limit.as_secs_f64()),
        ))),
        Poll::Pending => Poll::Pending,
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Deadlines<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut me.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                me.read_timer = None;
                if buf.filled().len() > before {
                    *super::lock(&me.stall.heard) = Some(Instant::now());
                }
                Poll::Ready(r)
            }
            Poll::Pending => stalled(&mut me.read_timer, me.read_stall, "read", cx),
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Deadlines<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        match Pin::new(&mut me.inner).poll_write(cx, buf) {
            Poll::Ready(r) => me.wrote_bytes(r),
            Poll::Pending => me.write_waits(cx),
        }
    }

    /// Passed through, so that hyper queues a shared exposition instead of copying
    /// it into a buffer of each connection's own (its "flatten" strategy).
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        match Pin::new(&mut me.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(r) => me.wrote_bytes(r),
            Poll::Pending => me.write_waits(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        match Pin::new(&mut me.inner).poll_flush(cx) {
            Poll::Ready(r) => me.wrote(r),
            Poll::Pending => me.write_waits(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        match Pin::new(&mut me.inner).poll_shutdown(cx) {
            Poll::Ready(r) => Poll::Ready(r),
            Poll::Pending => me.write_waits(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap()
    }

    /// Witness: tokio's paused clock — the read fails exactly when its stall limit
    /// has passed with no byte, and a byte before then resets the limit.
    #[test]
    fn a_silent_peer_times_out_and_a_slow_one_does_not() {
        runtime().block_on(async {
            let (a, mut b) = tokio::io::duplex(64);
            let mut a = Deadlines::new(
                a,
                Duration::from_secs(5),
                Duration::from_secs(5),
                Arc::default(),
            );
            let t0 = tokio::time::Instant::now();
            let writer = tokio::spawn(async move {
                for _ in 0..3 {
                    tokio::time::sleep(Duration::from_secs(4)).await;
                    b.write_all(b"x").await.unwrap();
                }
                // Then silence, with the pipe still open.
                tokio::time::sleep(Duration::from_secs(60)).await;
                drop(b);
            });
            let mut buf = [0u8; 8];
            for _ in 0..3 {
                assert_eq!(a.read(&mut buf).await.unwrap(), 1);
            }
            let e = a.read(&mut buf).await.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::TimedOut);
            assert_eq!(t0.elapsed(), Duration::from_secs(12 + 5));
            writer.abort();
        });
    }

    /// Witness: a duplex pipe of 64 bytes that nobody reads — the write stalls and
    /// fails at its limit, and the stall is shown from its start.
    #[test]
    fn a_peer_that_never_reads_times_out_the_write() {
        runtime().block_on(async {
            let (a, _b) = tokio::io::duplex(64);
            let stall = Arc::<Progress>::default();
            let mut a = Deadlines::new(
                a,
                Duration::from_secs(60),
                Duration::from_secs(10),
                Arc::clone(&stall),
            );
            let t0 = tokio::time::Instant::now();
            let e = a.write_all(&[0u8; 1024]).await.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::TimedOut);
            assert_eq!(t0.elapsed(), Duration::from_secs(10));
            assert!(stall.since().is_some(), "the stall is shown");
        });
    }

    /// Witness: the reader's progress — a stall shown while the pipe is full ends
    /// when the reader drains it.
    #[test]
    fn a_stall_ends_when_the_client_reads() {
        runtime().block_on(async {
            let (a, mut b) = tokio::io::duplex(64);
            let stall = Arc::<Progress>::default();
            let mut a = Deadlines::new(
                a,
                Duration::from_secs(60),
                Duration::from_secs(10),
                Arc::clone(&stall),
            );
            let reader = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(3)).await;
                let mut all = Vec::new();
                b.read_to_end(&mut all).await.unwrap();
                all.len()
            });
            let writer = tokio::spawn(async move {
                a.write_all(&[7u8; 128]).await.unwrap();
                a
            });
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert!(stall.since().is_some(), "64 bytes wait for the reader");
            let a = writer.await.unwrap();
            assert_eq!(stall.since(), None, "the reader drained the pipe");
            drop(a);
            assert_eq!(reader.await.unwrap(), 128);
        });
    }
}
