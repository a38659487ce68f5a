//! What a long-lived process must not keep from whoever started it: descriptors above
//! stderr. A process started from a shell inherits every descriptor the shell did not
//! mark close-on-exec (`exec 7>f`, a `flock L cmd` lock); a daemon that keeps one holds
//! a file open, or a lock taken, for its whole life (`flock L rttlab lab up` held L
//! until `lab down`, wedging other jobs for 12 minutes).

use super::SyscallError;
use std::os::fd::RawFd;

/// Close every descriptor from 3 up: `close_range(2)` (Linux 5.9), or on older kernels
/// each one listed in /proc/self/fd.
///
/// Call it first thing in a freshly started process, before anything opens a
/// descriptor it means to keep: it closes descriptors whatever owns them.
///
/// # Errors
/// Neither close_range nor /proc/self/fd is available.
///
/// # Minimum kernel
/// 5.9 for close_range; any with /proc mounted otherwise.
pub fn close_inherited() -> Result<(), SyscallError> {
    close_from(3)
}

fn close_from(first: libc::c_uint) -> Result<(), SyscallError> {
    // SAFETY: close_range takes plain integers and only closes descriptors; the
    // caller guarantees none of them is owned by a live object (see above).
    if unsafe { libc::syscall(libc::SYS_close_range, first, libc::c_uint::MAX, 0) } == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if !matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EINVAL)) {
        return Err(SyscallError {
            call: "close_range",
            source: e,
        });
    }
    let listed: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")
        .map_err(|source| SyscallError {
            call: "opendir /proc/self/fd",
            source,
        })?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    // The listing's own descriptor is among them, closed already: EBADF is fine.
    for fd in listed
        .into_iter()
        .filter(|&fd| libc::c_uint::try_from(fd).is_ok_and(|fd| fd >= first))
    {
        // SAFETY: as for close_range above.
        unsafe { libc::close(fd) };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_open(fd: RawFd) -> bool {
        // SAFETY: F_GETFD only reads the descriptor's flags.
        unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
    }

    /// Run in a child process (fork), since closing descriptors would break the test
    /// harness; the child tells by its exit status whether the descriptor was open
    /// before and closed after. (Its own tests: the lab daemon's in tests/agent_hostile.rs.)
    #[test]
    fn descriptors_from_the_first_up_are_closed() {
        let f = tempfile::tempfile().unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        let first = libc::c_uint::try_from(fd).unwrap();
        // SAFETY: fork; the child only makes system calls (close_range succeeds on
        // the kernels that run this: no allocation), then _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let before = is_open(fd);
            let ok = close_from(first).is_ok();
            let code = i32::from(!(before && ok && !is_open(fd)));
            // SAFETY: leave the child at once, without running the parent's handlers.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waiting for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status));
        assert_eq!(libc::WEXITSTATUS(status), 0);
        // Ours is untouched.
        assert!(is_open(fd));
    }
}
