//! Blocking socket I/O that can be interrupted: sockets carry a short receive timeout,
//! and on each timeout the caller's `keep_going` decides whether to wait on. The fast
//! path (data already there) is one `recv` with no extra work.

use std::io::{self, ErrorKind, Read, Write};

/// How a full read ended.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadEnd {
    /// The buffer was filled.
    Full,
    /// The peer closed the connection after `got` bytes.
    Closed {
        /// Bytes read into the buffer before the end of stream.
        got: usize,
    },
    /// `keep_going` said stop after `got` bytes.
    Stopped {
        /// Bytes read into the buffer before it stopped.
        got: usize,
    },
}

/// Fill `buf`, retrying after receive timeouts while `keep_going()` is true.
///
/// # Errors
/// Any socket error other than a timeout or an interrupted call.
#[inline]
pub fn read_full<R: Read>(
    r: &mut R,
    buf: &mut [u8],
    mut keep_going: impl FnMut() -> bool,
) -> io::Result<ReadEnd> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => return Ok(ReadEnd::Closed { got }),
            Ok(n) => got += n,
            Err(e) if is_timeout(&e) => {
                if !keep_going() {
                    return Ok(ReadEnd::Stopped { got });
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(ReadEnd::Full)
}

/// Write all of `buf`, retrying after send timeouts while `keep_going()` is true.
///
/// # Errors
/// Any socket error other than a timeout, or `keep_going` gave up.
#[inline]
pub fn write_full<W: Write>(
    w: &mut W,
    buf: &[u8],
    mut keep_going: impl FnMut() -> bool,
) -> io::Result<()> {
    let mut put = 0;
    while put < buf.len() {
        match w.write(&buf[put..]) {
            Ok(0) => {
                return Err(io::Error::new(
                    ErrorKind::WriteZero,
                    "connection closed while sending",
                ))
            }
            Ok(n) => put += n,
            Err(e) if is_timeout(&e) => {
                if !keep_going() {
                    return Err(io::Error::new(ErrorKind::TimedOut, "stopped while sending"));
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `recv(2)` with `flags` (`MSG_DONTWAIT` for a busy-polling read) and no ancillary
/// data: UDP_RR's read when nothing asks for the kernel's stamps.
///
/// # Errors
/// As `recv` (a receive timeout or an empty socket is `WouldBlock`).
pub fn recv_with(fd: std::os::fd::RawFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
    // SAFETY: buf is valid for writes of its length for the call's duration.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), flags) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// A receive/send timeout (`SO_RCVTIMEO` reports EAGAIN).
pub fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_reads_are_assembled_and_eof_reported() {
        let data = [1u8, 2, 3, 4, 5];
        let mut r = &data[..];
        let mut b = [0u8; 3];
        assert_eq!(read_full(&mut r, &mut b, || true).unwrap(), ReadEnd::Full);
        assert_eq!(b, [1, 2, 3]);
        assert_eq!(
            read_full(&mut r, &mut b, || true).unwrap(),
            ReadEnd::Closed { got: 2 }
        );
    }
}
