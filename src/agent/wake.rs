//! Signals as a readable socket, so that the agent's loops sleep until they have work
//! or a signal comes, instead of waking every few milliseconds to look at a flag: on a
//! VM each wake-up costs tens of µs of CPU, and an agent with no peer spent 0.3 % of a
//! core on them (bench/RESULTS-agent-vs-smokeping.md). The flags stay what the loops
//! decide by ([`super::supervisor::stop_on_signal`] sets them first, in the same
//! handler); the socket only ends their sleep.

use signal_hook::SigId;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// One end of a socket pair that each of `signals` writes a byte to.
pub struct SignalWake {
    read: UnixStream,
    ids: Vec<SigId>,
}

impl SignalWake {
    /// # Errors
    /// The socket pair or a handler could not be made.
    pub fn new(signals: &[libc::c_int]) -> std::io::Result<Self> {
        let (read, write) = UnixStream::pair()?;
        read.set_nonblocking(true)?;
        write.set_nonblocking(true)?;
        let mut ids = Vec::new();
        for &s in signals {
            ids.push(signal_hook::low_level::pipe::register(
                s,
                write.try_clone()?,
            )?);
        }
        Ok(Self { read, ids })
    }

    /// Sleep until a signal comes or `timeout` passes; the bytes read away.
    pub fn wait(&self, timeout: Duration) {
        let mut pfd = libc::pollfd {
            fd: self.read.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one pollfd, valid for the call. An error (EINTR) ends the sleep early,
        // which costs one more look at the flags.
        unsafe { libc::poll(&mut pfd, 1, ms) };
        self.drain();
    }

    /// Read away what the signals wrote (the socket is non-blocking).
    pub fn drain(&self) {
        let mut buf = [0u8; 64];
        while matches!((&self.read).read(&mut buf), Ok(n) if n > 0) {}
    }

    /// The end to wait on, for a tokio loop (`tokio::net::UnixStream::from_std`).
    ///
    /// # Errors
    /// The descriptor could not be duplicated.
    pub fn stream(&self) -> std::io::Result<UnixStream> {
        self.read.try_clone()
    }
}

impl Drop for SignalWake {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// Witness: the kernel's delivery of a signal raised in this process: a sleep of
    /// 10 s ends at once, and one without a signal lasts its timeout.
    #[test]
    fn a_signal_ends_the_sleep_and_none_lets_it_last() {
        let wake = SignalWake::new(&[libc::SIGUSR2]).unwrap();
        let t0 = Instant::now();
        wake.wait(Duration::from_millis(50));
        assert!(t0.elapsed() >= Duration::from_millis(50));
        signal_hook::low_level::raise(libc::SIGUSR2).unwrap();
        let t0 = Instant::now();
        wake.wait(Duration::from_secs(10));
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    }
}
