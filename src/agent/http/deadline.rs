//! A connection whose reads and writes cannot stall for ever: a scraper that stops
//! reading its answer, or a keep-alive connection that never sends another request,
//! gets `TimedOut` once it has made no progress for its limit, and its task ends.
//!
//! hyper has a header-read deadline of its own but no write deadline, and tokio's
//! sockets have none; this wrapper sits under TLS and HTTP so that both are covered.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{sleep, Sleep};

/// `inner` with a stall limit on reads and one on writes.
pub struct Deadlines<T> {
    inner: T,
    read_stall: Duration,
    write_stall: Duration,
    /// Armed when a read finds nothing and cleared by any progress.
    read_timer: Option<Pin<Box<Sleep>>>,
    /// Armed when a write or flush cannot proceed and cleared by any progress.
    write_timer: Option<Pin<Box<Sleep>>>,
}

impl<T> Deadlines<T> {
    /// Reads may wait `read_stall` for a byte, writes `write_stall` for room.
    pub fn new(inner: T, read_stall: Duration, write_stall: Duration) -> Self {
        Self {
            inner,
            read_stall,
            write_stall,
            read_timer: None,
            write_timer: None,
        }
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
        match Pin::new(&mut me.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                me.read_timer = None;
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
            Poll::Ready(r) => {
                me.write_timer = None;
                Poll::Ready(r)
            }
            Poll::Pending => stalled(&mut me.write_timer, me.write_stall, "write", cx),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        match Pin::new(&mut me.inner).poll_flush(cx) {
            Poll::Ready(r) => {
                me.write_timer = None;
                Poll::Ready(r)
            }
            Poll::Pending => stalled(&mut me.write_timer, me.write_stall, "write", cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        match Pin::new(&mut me.inner).poll_shutdown(cx) {
            Poll::Ready(r) => Poll::Ready(r),
            Poll::Pending => stalled(&mut me.write_timer, me.write_stall, "write", cx),
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
            let mut a = Deadlines::new(a, Duration::from_secs(5), Duration::from_secs(5));
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
    /// fails at its limit.
    #[test]
    fn a_peer_that_never_reads_times_out_the_write() {
        runtime().block_on(async {
            let (a, _b) = tokio::io::duplex(64);
            let mut a = Deadlines::new(a, Duration::from_secs(60), Duration::from_secs(10));
            let t0 = tokio::time::Instant::now();
            let e = a.write_all(&[0u8; 1024]).await.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::TimedOut);
            assert_eq!(t0.elapsed(), Duration::from_secs(10));
        });
    }
}
