//! The TCP_RR streams this server holds, by socket inode: what the agent's
//! `srtt_server` layer samples with sock_diag, so that no other socket on the host (a
//! separate `rttlab serve`, any service listening in the data-port range) is named
//! as a peer's.

use std::collections::HashSet;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::Mutex;

/// The inodes of the streams the server's running TCP_RR tests hold (sock_diag's
/// `idiag_inode` of the same sockets).
#[derive(Debug, Default)]
pub struct ServedStreams(Mutex<HashSet<u64>>);

/// A socket's inode, as `fstat` gives it and sock_diag reports it.
fn inode(s: &TcpStream) -> Option<u64> {
    // SAFETY: an all-zero stat is a valid value for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: the descriptor is open (owned by `s`) and `st` is a writable stat.
    (unsafe { libc::fstat(s.as_raw_fd(), &mut st) } == 0).then_some(st.st_ino)
}

impl ServedStreams {
    /// Whether the socket with this inode is one of ours.
    pub fn contains(&self, inode: u64) -> bool {
        self.lock().contains(&inode)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<u64>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One test's streams in [`ServedStreams`], removed when the test ends however it
/// ends (finished, failed part way, or dropped with its conversation).
#[derive(Debug)]
pub(super) struct Held {
    served: std::sync::Arc<ServedStreams>,
    inodes: Vec<u64>,
}

impl Held {
    pub(super) fn new(served: &std::sync::Arc<ServedStreams>) -> Self {
        Self {
            served: std::sync::Arc::clone(served),
            inodes: Vec::new(),
        }
    }

    /// Hold one more stream.
    pub(super) fn add(&mut self, s: &TcpStream) {
        if let Some(i) = inode(s) {
            self.served.lock().insert(i);
            self.inodes.push(i);
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut set = self.served.lock();
        for i in &self.inodes {
            set.remove(i);
        }
    }
}
